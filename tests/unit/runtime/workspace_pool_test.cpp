// runtime/workspace_pool.hpp: which workspace a split kernel's launch gets. A capture's workspace
// is free again once its graph is gone (the graph's user object runs release_with_graph), so an
// engine that captures graphs again and again holds as many workspaces as graphs it keeps, not as
// it ever captured.
#include "runtime/workspace_pool.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace normjit::detail {
namespace {

// Device memory stand-in: counts the frees.
struct FakeMemory {
  explicit FakeMemory(int* frees) : frees(frees) {}
  ~FakeMemory() { ++*frees; }
  int* frees;
};

const auto kStream = reinterpret_cast<CUstream>(0x7f0000001000);

WorkspaceOwner capture(unsigned long long id) { return workspace_owner(kStream, /*capture=*/id); }

// What the graph's user object does when the graph and all made from it are gone: its destructor
// with its own reference (the one cuUserObjectCreate was given).
void destroy_graph(const std::shared_ptr<GraphRelease>& release) {
  release_with_graph(new std::shared_ptr<GraphRelease>(release));
}

// The workspace owner's launches get: its own, else a released one, else a new one.
FakeMemory* workspace(WorkspacePool<FakeMemory>& pool, const WorkspaceOwner& owner,
                      std::shared_ptr<GraphRelease> release, int* frees) {
  if (FakeMemory* mine = pool.find(owner)) return mine;
  if (FakeMemory* reused = pool.reuse(owner, release)) return reused;
  return pool.add(owner, std::make_unique<FakeMemory>(frees), release);
}

TEST(WorkspacePool, AStreamKeepsItsWorkspace) {
  int frees = 0;
  WorkspacePool<FakeMemory> pool;
  const WorkspaceOwner stream = workspace_owner(kStream, /*capture=*/0);
  FakeMemory* mine = workspace(pool, stream, nullptr, &frees);
  EXPECT_EQ(pool.find(stream), mine);
  EXPECT_EQ(pool.find(capture(5)), nullptr);
  EXPECT_EQ(pool.reuse(capture(5), nullptr), nullptr);  // a stream's is never released
  EXPECT_EQ(pool.size(), 1u);
  EXPECT_EQ(frees, 0);
}

// The defect this pool fixes: one workspace per capture, never freed, so an engine re-capturing
// on every shape change grew device memory without bound. Each graph here is destroyed before
// the next capture: one workspace serves them all.
TEST(WorkspacePool, CapturesOneAfterAnotherShareOneWorkspace) {
  int frees = 0;
  WorkspacePool<FakeMemory> pool;
  FakeMemory* first = nullptr;
  for (unsigned long long id = 1; id <= 50; ++id) {
    auto release = std::make_shared<GraphRelease>();
    FakeMemory* w = workspace(pool, capture(id), release, &frees);
    if (id == 1) first = w;
    EXPECT_EQ(w, first) << "capture " << id;
    EXPECT_EQ(pool.find(capture(id)), w);  // its later launches in the capture
    destroy_graph(release);
    EXPECT_EQ(pool.find(capture(id)), nullptr);
  }
  EXPECT_EQ(pool.size(), 1u);
  EXPECT_EQ(frees, 0);
}

// A graph (or an executable graph made from it: the user object counts both) still alive keeps
// its workspace: a capture meanwhile gets another, and the first freed serves the next.
TEST(WorkspacePool, AGraphAliveKeepsItsWorkspace) {
  int frees = 0;
  WorkspacePool<FakeMemory> pool;
  std::vector<std::shared_ptr<GraphRelease>> graphs;
  std::vector<FakeMemory*> held;
  for (unsigned long long id = 1; id <= 3; ++id) {
    graphs.push_back(std::make_shared<GraphRelease>());
    held.push_back(workspace(pool, capture(id), graphs.back(), &frees));
  }
  EXPECT_NE(held[0], held[1]);
  EXPECT_NE(held[1], held[2]);
  EXPECT_NE(held[0], held[2]);
  destroy_graph(graphs[1]);
  EXPECT_EQ(pool.find(capture(1)), held[0]);
  EXPECT_EQ(pool.find(capture(3)), held[2]);
  EXPECT_EQ(workspace(pool, capture(4), std::make_shared<GraphRelease>(), &frees), held[1]);
  FakeMemory* fifth = workspace(pool, capture(5), std::make_shared<GraphRelease>(), &frees);
  EXPECT_TRUE(fifth != held[0] && fifth != held[1] && fifth != held[2]);
  EXPECT_EQ(pool.size(), 4u);
  // A stream may have a released one too, and keeps it (no graph releases it again).
  destroy_graph(graphs[0]);
  const WorkspaceOwner stream = workspace_owner(kStream, /*capture=*/0);
  EXPECT_EQ(workspace(pool, stream, nullptr, &frees), held[0]);
  EXPECT_EQ(pool.reuse(capture(6), std::make_shared<GraphRelease>()), nullptr);
  EXPECT_EQ(pool.find(stream), held[0]);
}

// The user object's destructor runs on a CUDA thread, maybe after the kernel (and its pool) is
// gone: it holds its own reference to what it sets, and the last one to let go frees it.
TEST(WorkspacePool, TheGraphMayOutliveThePool) {
  int frees = 0;
  std::weak_ptr<GraphRelease> watch;
  auto* callbacks_ref = new std::shared_ptr<GraphRelease>(std::make_shared<GraphRelease>());
  watch = *callbacks_ref;
  {
    WorkspacePool<FakeMemory> pool;
    workspace(pool, capture(1), *callbacks_ref, &frees);
  }
  EXPECT_EQ(frees, 1);  // the kernel died: its workspaces are freed
  EXPECT_FALSE(watch.expired());
  std::thread(release_with_graph, callbacks_ref).join();
  EXPECT_TRUE(watch.expired());
}

// A workspace whose zeroing failed was used by no launch: free for the next owner at once.
TEST(WorkspacePool, AWorkspaceGivenUpServesTheNextOwner) {
  int frees = 0;
  WorkspacePool<FakeMemory> pool;
  const WorkspaceOwner stream = workspace_owner(kStream, /*capture=*/0);
  FakeMemory* w = workspace(pool, stream, nullptr, &frees);
  pool.give_up(stream);
  EXPECT_EQ(pool.find(stream), nullptr);
  EXPECT_EQ(workspace(pool, stream, nullptr, &frees), w);
  EXPECT_EQ(pool.size(), 1u);
}

}  // namespace
}  // namespace normjit::detail
