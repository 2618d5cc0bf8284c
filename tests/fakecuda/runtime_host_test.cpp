// The runtime's host logic on the fake driver of fake_cuda.hpp, so that it runs in CI, under the
// sanitizers too: kernels keyed by context, launches refused in a context that is not theirs,
// split-kernel workspaces per owner and released with their graphs, the calls a global capture
// forbids never made while one runs, a cubin the driver rejects rebuilt. Kernels are compiled
// with NVRTC as on a GPU machine and their launches recorded; tests/gpu checks their results.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache/cache.hpp"
#include "generator/plan.hpp"
#include "normjit/normjit.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "tests/fakecuda/fake_test.hpp"
#include "tests/unit/cache/test_util.hpp"
#include "tests/unit/temp_dir.hpp"

namespace normjit::fake_testing {
namespace {

using cache::testing::WarningCapture;

TEST_F(FakeDriver, ALaunchCarriesThePlansConfigurationAndTheCallersPointers) {
  device::PrimaryContext context;
  Engine engine(options());
  const NormSpec spec = spec_of(kRows);
  Problem p(spec);
  const Kernel kernel = engine.prepare(spec);
  kernel.launch(p.args(), nullptr);
  const std::vector<fakecuda::Launch> launches = fakecuda::launches();
  ASSERT_EQ(launches.size(), 1u);
  const fakecuda::Launch& l = launches[0];
  const KernelPlan expected = plan(spec, device::target_of(context.device()));
  EXPECT_EQ(l.block_x, unsigned(expected.block_x));
  EXPECT_EQ(l.block_y, unsigned(expected.block_y));
  EXPECT_EQ(l.smem, unsigned(expected.smem_bytes));
  EXPECT_EQ(l.grid, unsigned(expected.grid(8, /*co_resident=*/1)));  // a row kernel's: rows
  EXPECT_FALSE(l.cooperative);
  EXPECT_EQ(l.context, id_of(current_context()));
  EXPECT_EQ(l.params.x, p.x.get());
  EXPECT_EQ(l.params.y, p.y.get());
  EXPECT_EQ(l.params.weight, p.w.get());
  EXPECT_EQ(l.params.bias, nullptr);
  EXPECT_EQ(l.params.batch, 8);
  EXPECT_EQ(l.params.workspace, nullptr);
}

// A context created after another was destroyed may get its handle (the fake always gives it).
// The kernel of the destroyed context must not be handed out there: its module is gone. And the
// engine, destroyed while the new context lives, must neither unload the old module nor free the
// old workspace there (the fake notes either as a misuse, which fails the test).
TEST_F(FakeDriver, ANewContextWithTheDestroyedOnesHandleGetsItsOwnKernel) {
  auto engine = std::make_unique<Engine>(options());
  const NormSpec spec = spec_of(kSplit);  // a workspace too
  CUcontext first_handle = nullptr;
  unsigned long long first_id = 0;
  Kernel first;
  {
    device::PrimaryContext context;
    first_handle = current_context();
    first_id = id_of(first_handle);
    first = engine->prepare(spec);
    Problem p(spec);
    first.launch(p.args(), nullptr);
    ASSERT_EQ(detail::workspace_count(first), 1u);
  }
  device::PrimaryContext context;
  ASSERT_EQ(current_context(), first_handle) << "the fake gives a new context the freed handle";
  ASSERT_NE(id_of(current_context()), first_id);
  Kernel again = engine->prepare(spec);
  EXPECT_NE(detail::identity(again), detail::identity(first));
  Problem p(spec);
  fakecuda::clear_launches();
  again.launch(p.args(), nullptr);
  ASSERT_EQ(fakecuda::launches().size(), 1u);
  EXPECT_EQ(fakecuda::launches()[0].context, id_of(current_context()));
  // The old kernel is refused, not launched with a function of a module that is gone.
  try {
    first.launch(p.args(), nullptr);
    ADD_FAILURE() << "the destroyed context's kernel launched";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("another CUDA context"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fakecuda::launches().size(), 1u);
  const size_t modules = fakecuda::live_modules(), allocations = fakecuda::live_allocations();
  first = Kernel();
  again = Kernel();
  engine.reset();
  // The new context's module and workspace went with the engine; the caller's buffers stay.
  EXPECT_EQ(fakecuda::live_modules(), modules - 1);
  EXPECT_EQ(fakecuda::live_allocations(), allocations - 1);
}

// Without a current context, a launch makes its kernel's current, if it still lives.
TEST_F(FakeDriver, ALaunchWithoutACurrentContextMakesTheKernelsCurrent) {
  device::PrimaryContext context;
  const CUcontext handle = current_context();
  Engine engine(options());
  const NormSpec spec = spec_of(kRows);
  Problem p(spec);
  const Kernel kernel = engine.prepare(spec);
  std::thread([&] {  // a thread on which no context was ever current
    kernel.launch(p.args(), nullptr);
    EXPECT_EQ(current_context(), handle);
  })
      .join();
  ASSERT_EQ(fakecuda::launches().size(), 1u);
  EXPECT_EQ(fakecuda::launches()[0].context, id_of(handle));
}

// ... and refuses one whose context was destroyed, rather than make another context current.
TEST_F(FakeDriver, ALaunchWithoutACurrentContextOfAKernelWhoseContextIsGoneIsRefused) {
  Engine engine(options());
  const NormSpec spec = spec_of(kRows);
  Kernel kernel;
  {
    device::PrimaryContext context;
    kernel = engine.prepare(spec);
  }
  std::thread([&] {
    try {
      kernel.launch(LaunchArgs{reinterpret_cast<void*>(0x100000), reinterpret_cast<void*>(0x200000),
                               reinterpret_cast<void*>(0x300000), nullptr, 8, 1e-5f},
                    nullptr);
      ADD_FAILURE() << "a kernel of a destroyed context launched";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("CUDA context was destroyed"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(current_context(), nullptr);
  }).join();
  EXPECT_TRUE(fakecuda::launches().empty());
}

// A kernel first prepared inside a capture loads its module there (relaxed mode: a global
// capture forbids loading), and a launch records one kernel node and nothing that would
// invalidate the capture; replays launch it.
TEST_F(FakeDriver, PreparedAndLaunchedInsideAGlobalCaptureWithoutInvalidatingIt) {
  device::PrimaryContext context;
  device::Stream stream;
  Engine engine(options());
  const NormSpec spec = spec_of("op=rmsnorm shape=5,3,2048 normalized_dims=1 dtype=f16");
  Problem p(spec);
  const CapturedGraph graph(stream.get(),
                            [&] { engine.prepare(spec).launch(p.args(), stream.get()); });
  EXPECT_EQ(graph.kernel_functions().size(), 1u);
  EXPECT_TRUE(fakecuda::launches().empty()) << "a captured launch ran at capture";
  graph.replay(stream.get());
  graph.replay(stream.get());
  const std::vector<fakecuda::Launch> launches = fakecuda::launches();
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_TRUE(launches[0].from_graph);
  EXPECT_EQ(launches[1].params.x, p.x.get());
}

// A split kernel's workspace: one per stream, one per capture, zeroed in the stream's order
// (a memset node before the kernel's in a graph), and released with its graph: captured, replayed
// and destroyed again and again, one workspace serves every capture.
TEST_F(FakeDriver, SplitWorkspacesPerOwnerAndReleasedWithTheirGraphs) {
  device::PrimaryContext context;
  device::Stream a, b;
  Engine engine(options());
  const NormSpec spec = spec_of(kSplit);
  ASSERT_EQ(plan(spec, device::target_of(context.device())).strategy, Strategy::kRowSplit);
  Problem p(spec);
  const Kernel kernel = engine.prepare(spec);
  kernel.launch(p.args(), a.get());
  kernel.launch(p.args(), a.get());
  kernel.launch(p.args(), b.get());
  std::vector<fakecuda::Launch> launches = fakecuda::launches();
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_TRUE(launches[0].cooperative);
  EXPECT_NE(launches[0].params.workspace, nullptr);
  EXPECT_EQ(launches[1].params.workspace, launches[0].params.workspace) << "one stream, one";
  EXPECT_NE(launches[2].params.workspace, launches[0].params.workspace) << "streams apart";
  float* const on_a = launches[0].params.workspace;
  EXPECT_EQ(detail::workspace_count(kernel), 2u);

  const size_t allocations = fakecuda::live_allocations();
  std::set<float*> captured;
  for (int i = 0; i < 20; ++i) {
    device::Stream fresh;
    fakecuda::clear_launches();
    {
      const CapturedGraph graph(fresh.get(), [&] { kernel.launch(p.args(), fresh.get()); });
      graph.replay(fresh.get());
    }
    fakecuda::drain_destructors();  // the graph's release, on the driver's thread
    launches = fakecuda::launches();
    ASSERT_EQ(launches.size(), 1u);
    captured.insert(launches[0].params.workspace);
  }
  EXPECT_EQ(captured.size(), 1u) << "each destroyed graph's workspace served the next capture";
  EXPECT_EQ(captured.count(on_a), 0u) << "a capture used stream a's workspace";
  EXPECT_EQ(detail::workspace_count(kernel), 3u);
  EXPECT_EQ(fakecuda::live_allocations(), allocations + 1);
  EXPECT_EQ(fakecuda::live_user_objects(), 0u);
}

// Threads prepare and launch at once, each on a stream of its own and on its per-thread default
// stream: every launch of the split kernel gets its owner's workspace, and no owner another's.
TEST_F(FakeDriver, ThreadsLaunchingAtOnceKeepTheirOwnWorkspaces) {
  device::PrimaryContext context;
  const CUcontext handle = current_context();
  Engine engine(options());
  const NormSpec split = spec_of(kSplit), rows = spec_of(kRows);
  Problem ps(split), pr(rows);
  constexpr int kThreads = 6, kLaunches = 40;
  std::vector<std::unique_ptr<device::Stream>> streams;
  for (int t = 0; t < kThreads; ++t) streams.push_back(std::make_unique<device::Stream>());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        NORMJIT_CU(driver::api().cuCtxSetCurrent(handle));
        for (int i = 0; i < kLaunches; ++i) {
          engine.prepare(split).launch(ps.args(), streams[size_t(t)]->get());
          engine.prepare(rows).launch(pr.args(), streams[size_t(t)]->get());
          engine.prepare(split).launch(ps.args(), CU_STREAM_PER_THREAD);
        }
      } catch (const std::exception& e) {
        ++failures;
        ADD_FAILURE() << e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  // Owner: the stream, and the thread where the stream is CU_STREAM_PER_THREAD.
  std::map<std::pair<CUstream, std::thread::id>, std::set<float*>> by_owner;
  size_t split_launches = 0;
  for (const fakecuda::Launch& l : fakecuda::launches()) {
    if (!l.cooperative) continue;
    ++split_launches;
    const std::thread::id thread = l.stream == CU_STREAM_PER_THREAD ? l.thread : std::thread::id{};
    by_owner[{l.stream, thread}].insert(l.params.workspace);
  }
  EXPECT_EQ(split_launches, size_t(2 * kThreads * kLaunches));
  ASSERT_EQ(by_owner.size(), size_t(2 * kThreads));
  std::set<float*> all;
  for (const auto& [owner, workspaces] : by_owner) {
    EXPECT_EQ(workspaces.size(), 1u) << "an owner's launches used more than one workspace";
    all.insert(workspaces.begin(), workspaces.end());
  }
  EXPECT_EQ(all.size(), size_t(2 * kThreads)) << "two owners shared a workspace";
  EXPECT_EQ(detail::workspace_count(engine.prepare(split)), size_t(2 * kThreads));
}

// A capture whose graph refuses the user object that would release its workspace keeps going
// with a workspace of its own, never released (the behaviour before user objects), and says so
// once (a warning of the process: the test runs once in it); the refused object is released at
// once.
TEST_F(FakeDriver, AGraphThatRefusesTheUserObjectKeepsItsWorkspaceAndWarnsOnce) {
  device::PrimaryContext context;
  Engine engine(options());
  const NormSpec spec = spec_of(kSplit);
  Problem p(spec);
  const Kernel kernel = engine.prepare(spec);
  WarningCapture warnings;
  std::set<float*> workspaces;
  for (int i = 0; i < 3; ++i) {
    device::Stream fresh;
    fakecuda::fail_next("cuGraphRetainUserObject", CUDA_ERROR_NOT_SUPPORTED);
    fakecuda::clear_launches();
    {
      const CapturedGraph graph(fresh.get(), [&] { kernel.launch(p.args(), fresh.get()); });
      graph.replay(fresh.get());
    }
    fakecuda::drain_destructors();  // a release, had there been one, before the next capture
    ASSERT_EQ(fakecuda::launches().size(), 1u);
    workspaces.insert(fakecuda::launches()[0].params.workspace);
  }
  EXPECT_EQ(workspaces.size(), 3u) << "a workspace no graph releases served another capture";
  EXPECT_EQ(detail::workspace_count(kernel), 3u);
  EXPECT_EQ(fakecuda::live_user_objects(), 0u);
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_NE(warnings.messages()[0].find("could not take a user object"), std::string::npos)
      << warnings.all();
}

// A cached cubin the driver rejects (an image it cannot load) is counted, warned about, removed
// and rebuilt; an error of the context's state (no memory) fails the call and leaves the entry.
TEST_F(FakeDriver, ACachedCubinTheDriverRejectsIsRebuiltAndAStateErrorLeavesIt) {
  device::PrimaryContext context;
  TempDir dir;
  EngineOptions o;
  o.cache_dir = dir.path();
  o.no_readonly_cache_dirs = true;
  const NormSpec spec = spec_of("op=layernorm shape=7,1000 normalized_dims=1 dtype=f32");
  uint64_t saved = 0;
  {
    Engine warm(o);
    warm.prepare(spec);
    saved = warm.counters().nvrtc_compiles;
    ASSERT_GE(saved, 1u);
  }
  {
    fakecuda::fail_next("cuModuleLoadData", CUDA_ERROR_OUT_OF_MEMORY);
    Engine engine(o);
    try {
      engine.prepare(spec);
      ADD_FAILURE() << "a load that ran out of memory passed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDriver) << e.what();
    }
    EXPECT_EQ(engine.counters().bad_entries, 0u);
    EXPECT_EQ(engine.counters().nvrtc_compiles, 0u);
  }
  {
    WarningCapture warnings;
    fakecuda::fail_next("cuModuleLoadData", CUDA_ERROR_INVALID_IMAGE);
    Engine engine(o);
    Problem p(spec);
    engine.prepare(spec).launch(p.args(), nullptr);
    EXPECT_EQ(engine.counters().bad_entries, 1u);
    EXPECT_EQ(engine.counters().nvrtc_compiles, 1u);
    ASSERT_EQ(warnings.count(), 1u) << warnings.all();
    EXPECT_NE(warnings.messages()[0].find("rejected by the driver"), std::string::npos)
        << warnings.all();
  }
  Engine engine(o);
  engine.prepare(spec);
  EXPECT_EQ(engine.counters().nvrtc_compiles, 0u) << "the rebuilt kernel replaced the entry";
  EXPECT_EQ(engine.counters().bad_entries, 0u);
  EXPECT_GE(engine.counters().disk_hits, 1u);
}

// A graph's release comes later, on the driver's thread: a capture before it gets a workspace of
// its own (sharing the graph's, the two graphs' replays would count each other's arrivals), and a
// capture after it reuses the released one.
TEST_F(FakeDriver, ACaptureBeforeAGraphsReleaseGetsItsOwnWorkspace) {
  device::PrimaryContext context;
  Engine engine(options());
  const NormSpec spec = spec_of(kSplit);
  Problem p(spec);
  const Kernel kernel = engine.prepare(spec);
  const auto captured = [&] {
    device::Stream fresh;
    fakecuda::clear_launches();
    {
      const CapturedGraph graph(fresh.get(), [&] { kernel.launch(p.args(), fresh.get()); });
      graph.replay(fresh.get());
    }
    return fakecuda::launches().at(0).params.workspace;
  };
  fakecuda::hold_destructors(true);
  float* const first = captured();
  float* const meanwhile = captured();  // the first graph destroyed, its release not yet run
  fakecuda::hold_destructors(false);
  fakecuda::drain_destructors();
  EXPECT_NE(meanwhile, first);
  const float* after = captured();
  EXPECT_TRUE(after == first || after == meanwhile);
  EXPECT_EQ(detail::workspace_count(kernel), 2u);
}

// An executable graph keeps its workspace after its graph is destroyed; released with it.
TEST_F(FakeDriver, AnExecutableGraphKeepsItsWorkspaceUntilItIsDestroyed) {
  device::PrimaryContext context;
  device::Stream a, b, c;
  Engine engine(options());
  const NormSpec spec = spec_of(kSplit);
  Problem p(spec);
  const Kernel kernel = engine.prepare(spec);
  auto kept = std::make_unique<CapturedGraph>(
      a.get(), [&] { kernel.launch(p.args(), a.get()); }, CapturedGraph::kExecutableOnly);
  fakecuda::drain_destructors();
  {
    const CapturedGraph other(b.get(), [&] { kernel.launch(p.args(), b.get()); });
  }
  fakecuda::drain_destructors();
  fakecuda::clear_launches();
  kept->replay(a.get());
  float* const held = fakecuda::launches().at(0).params.workspace;
  {
    const CapturedGraph next(c.get(), [&] { kernel.launch(p.args(), c.get()); });
    next.replay(c.get());
  }
  EXPECT_NE(fakecuda::launches().at(1).params.workspace, held) << "shared a live graph's";
  kept.reset();
  fakecuda::drain_destructors();
  const CapturedGraph last(c.get(), [&] { kernel.launch(p.args(), c.get()); });
  EXPECT_EQ(detail::workspace_count(kernel), 2u) << "a released workspace was not reused";
}

// A workspace whose zeroing fails inside a capture is given up (no launch used it) and serves the
// next capture at once, not only once the failed capture's graph is released (held here); the
// error is the driver's.
TEST_F(FakeDriver, AWorkspaceWhoseZeroingFailsServesTheNextCapture) {
  device::PrimaryContext context;
  device::Stream stream;
  Engine engine(options());
  const NormSpec spec = spec_of(kSplit);
  Problem p(spec);
  const Kernel kernel = engine.prepare(spec);
  fakecuda::hold_destructors(true);
  fakecuda::fail_next("cuMemsetD8Async", CUDA_ERROR_OUT_OF_MEMORY);
  try {
    const CapturedGraph graph(stream.get(), [&] { kernel.launch(p.args(), stream.get()); });
    ADD_FAILURE() << "a launch whose workspace could not be zeroed went on";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDriver) << e.what();
  }
  const CapturedGraph graph(stream.get(), [&] { kernel.launch(p.args(), stream.get()); });
  EXPECT_EQ(detail::workspace_count(kernel), 1u);
  fakecuda::hold_destructors(false);
}

// The engine destroyed while another thread captures in global mode: its modules and workspaces
// go without a call that the capture forbids this thread (it invalidated the capture, and the
// memory stayed), and a graph that outlives the engine is destroyed after it without harm.
TEST_F(FakeDriver, AnEngineDestroyedWhileAnotherThreadCapturesLeavesTheCaptureIntact) {
  device::PrimaryContext context;
  const CUcontext handle = current_context();
  device::Stream eager, capturing;
  auto engine = std::make_unique<Engine>(options());
  const NormSpec spec = spec_of(kSplit);
  Problem p(spec);
  Kernel kernel = engine->prepare(spec);
  kernel.launch(p.args(), eager.get());
  auto survivor = std::make_unique<CapturedGraph>(
      capturing.get(), [&] { kernel.launch(p.args(), capturing.get()); });
  const size_t modules = fakecuda::live_modules(), allocations = fakecuda::live_allocations();

  std::promise<void> began, destroyed;
  CUresult ended = CUDA_ERROR_UNKNOWN;
  std::thread capturer([&] {
    const driver::Api& cu = driver::api();
    NORMJIT_CU(cu.cuCtxSetCurrent(handle));
    device::Stream stream;
    NORMJIT_CU(cu.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL));
    began.set_value();
    destroyed.get_future().wait();
    CUgraph graph = nullptr;
    ended = cu.cuStreamEndCapture(stream.get(), &graph);
    if (graph) cu.cuGraphDestroy(graph);
  });
  began.get_future().wait();
  kernel = Kernel();
  engine.reset();
  destroyed.set_value();
  capturer.join();
  EXPECT_EQ(ended, CUDA_SUCCESS) << "the other thread's capture was invalidated";
  EXPECT_EQ(fakecuda::live_modules(), modules - 1);
  EXPECT_EQ(fakecuda::live_allocations(), allocations - 2);  // the eager and captured workspaces
  survivor.reset();
}

}  // namespace
}  // namespace normjit::fake_testing
