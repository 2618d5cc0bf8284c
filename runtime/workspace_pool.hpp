// The workspaces of one split or cooperative kernel and the owners of each (workspace_owner.hpp),
// apart from the driver, so that who may reuse which is tested without a GPU. Not part of the
// public API.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/workspace_owner.hpp"

namespace normjit::detail {

// Set once no launch can use a capture's workspace again: the graph it was captured into, every
// executable graph instantiated from it and every clone are destroyed, and their launches have
// finished. Shared by the workspace's slot and the destructor of the user object that the graph
// owns (cuUserObjectCreate): that runs on a CUDA internal thread, maybe after the kernel and its
// engine are gone, so each holds a reference.
struct GraphRelease {
  std::atomic<bool> done{false};
};

// The user object's destructor (a CUhostFn): `ref` is a heap std::shared_ptr<GraphRelease> that it
// owns. It may call no CUDA function, and does not: it sets the flag and drops its reference.
inline void release_with_graph(void* ref) {
  auto* release = static_cast<std::shared_ptr<GraphRelease>*>(ref);
  (*release)->done.store(true, std::memory_order_release);
  delete release;
}

// Memory: the owner of one workspace's device memory, freed by its destructor. Not thread-safe:
// the kernel's mutex guards it. Released workspaces are kept for the next owner, not freed (a
// free would be cuMemFree on the launch path), so a kernel holds as many as the most graphs of
// it alive at once, plus one a stream.
template <class Memory>
class WorkspacePool {
 public:
  // owner's workspace; nullptr while it has none.
  Memory* find(const WorkspaceOwner& owner) const {
    for (const Slot& s : slots_) {
      if (s.owner == owner && !released(s)) return s.memory.get();
    }
    return nullptr;
  }

  // A workspace no launch can use any more (its graphs are gone), now owner's, whose launches
  // are released with `release` (null: never, a stream's); nullptr when there is none.
  Memory* reuse(const WorkspaceOwner& owner, std::shared_ptr<GraphRelease> release) {
    for (Slot& s : slots_) {
      if (!released(s)) continue;
      s.owner = owner;
      s.release = std::move(release);
      return s.memory.get();
    }
    return nullptr;
  }

  // memory as owner's workspace, as in reuse().
  Memory* add(const WorkspaceOwner& owner, std::unique_ptr<Memory> memory,
              std::shared_ptr<GraphRelease> release) {
    slots_.push_back({owner, std::move(memory), std::move(release)});
    return slots_.back().memory.get();
  }

  // owner's workspace free for another owner at once: no launch used it (its zeroing failed).
  void give_up(const WorkspaceOwner& owner) {
    for (Slot& s : slots_) {
      if (s.owner == owner && !released(s)) {
        s.release = std::make_shared<GraphRelease>();
        s.release->done.store(true, std::memory_order_relaxed);
      }
    }
  }

  size_t size() const { return slots_.size(); }  // workspaces allocated, released ones included

 private:
  struct Slot {
    WorkspaceOwner owner;
    std::unique_ptr<Memory> memory;
    std::shared_ptr<GraphRelease> release;  // a capture's; null for a stream's, never released
  };
  static bool released(const Slot& s) {
    return s.release && s.release->done.load(std::memory_order_acquire);
  }

  std::vector<Slot> slots_;
};

}  // namespace normjit::detail
