// What a kernel holds of a context or a graph after that is gone. A destroyed context's handle
// may be the next context's, and a split kernel's workspace for a capture must go with the graph
// (an inference engine re-captures on every shape change): nothing of the old one may be handed
// to the new one, and nothing may pile up.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "harness.hpp"

namespace normjit {
namespace testing {
namespace {

// The LayerNorm of few huge rows: a split kernel, whose launches share a workspace's counters.
NormSpec split_spec() { return make(Op::kLayerNorm, {3, 1000003}, Dtype::kBF16, Affine::kBoth, 1); }

LaunchArgs args_of(const Problem& p) {
  return LaunchArgs{p.x.get(), p.y.get(), p.w.get(), p.b.get(), p.spec.batch(), 1e-5f};
}

void expect_close(const Problem& p, const std::string& what) {
  const RunResult r = p.compare(p.y);
  EXPECT_TRUE(r.all_finite) << p.spec.to_string() << ": " << what;
  EXPECT_LT(r.rel_error, tolerance(p.spec.dtype)) << p.spec.to_string() << ": " << what;
}

class Lifetime : public ::testing::Test {
 protected:
  void SetUp() override { NORMJIT_REQUIRE_GPU(); }
};

// The primary context's last release destroys it, and the next retain makes a new one, often
// with the same handle. The engine's kernel table was keyed by the handle: prepare() then handed
// out the destroyed context's kernel, whose module went with it (its launch failed, or ran
// another module's code), and the engine's death freed that kernel's workspace address in the
// new context, maybe a buffer of the caller's. Keyed by the context's id, the kernel loads again.
TEST_F(Lifetime, ANewContextWithADestroyedOnesHandleLoadsTheKernelAgain) {
  const NormSpec spec = split_spec();
  auto engine = std::make_unique<Engine>(test_engine_options());
  CUcontext first_handle = nullptr;
  unsigned long long first_id = 0;
  Kernel first;
  {
    // Current before the engine's first prepare(), so that the engine retains no primary context.
    device::PrimaryContext context;
    ASSERT_EQ(plan(spec, device::target_of(context.device())).strategy, Strategy::kRowSplit);
    first_handle = current_context();
    first_id = id_of(first_handle);
    Problem p(spec, Values::kNormal, 1);
    first = engine->prepare(spec);
    first.launch(args_of(p), nullptr);  // and its workspace, an allocation of this context
    NORMJIT_CU(driver::api().cuCtxSynchronize());
    expect_close(p, "in the first context");
  }
  device::PrimaryContext context;
  const CUcontext handle = current_context();
  ASSERT_NE(id_of(handle), first_id)
      << "the new context has the destroyed one's id: it was not destroyed (something else in "
         "the process retains it), or the driver gave it the old id";
  std::printf("[ context  ] the new context %s the destroyed one's handle\n",
              handle == first_handle ? "has" : "does not have");
  Problem p(spec, Values::kNegative, 2);
  const Kernel again = engine->prepare(spec);
  EXPECT_NE(detail::identity(again), detail::identity(first))
      << "the destroyed context's kernel was handed out";
  again.launch(args_of(p), nullptr);
  NORMJIT_CU(driver::api().cuCtxSynchronize());
  expect_close(p, "in the new context");
  // The destroyed context's module and workspace go with the engine: not freed in this context,
  // where their handle and address may be others'. The caller's buffers stay allocated.
  first = Kernel();
  engine.reset();
  for (const device::Buffer* b : {&p.x, &p.y, &p.w, &p.b}) {
    CUdeviceptr base = 0;
    size_t bytes = 0;
    EXPECT_EQ(driver::api().cuMemGetAddressRange(&base, &bytes, b->ptr()), CUDA_SUCCESS)
        << "a buffer of the new context was freed with the engine";
  }
}

// A split kernel captured into a graph, replayed, checked and the graph destroyed, again and
// again: each capture had a workspace of its own that nothing freed (device memory grew by one
// workspace a capture, without bound). Now a graph's workspace serves the next capture once the
// graph is gone. Released on a CUDA thread after the graph's destruction: a capture may come
// before that, so a few may be held, never one a graph.
TEST_F(Lifetime, GraphsCapturedAgainAndAgainHoldNoWorkspaceOnceDestroyed) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const NormSpec spec = split_spec();
  ASSERT_EQ(plan(spec, device::target_of(context.device())).strategy, Strategy::kRowSplit);
  Problem p(spec, Values::kNormal, 1);
  const Kernel kernel = engine.prepare(spec);
  kernel.launch(args_of(p), nullptr);
  NORMJIT_CU(driver::api().cuCtxSynchronize());
  expect_close(p, "eager launch");
  const size_t before = detail::workspace_count(kernel);
  device::Stream stream;
  constexpr int kGraphs = 50;
  const Values kinds[] = {Values::kLargeMean, Values::kNegative, Values::kNormal};
  for (int g = 0; g < kGraphs; ++g) {
    p.new_x(kinds[g % 3], 100 + g);
    p.poison();
    const CapturedGraph graph(stream.get(), [&] { kernel.launch(args_of(p), stream.handle()); });
    graph.replay(stream.get());
    stream.synchronize();
    expect_close(p, "graph " + std::to_string(g));
  }
  const size_t held = detail::workspace_count(kernel) - before;
  std::printf("[ graphs   ] %d graphs captured and destroyed: %zu workspaces held for them\n",
              kGraphs, held);
  EXPECT_LE(held, size_t{kGraphs / 5}) << "a workspace a graph, never freed";
}

// An executable graph holds its own reference to what its graph held: the graph destroyed right
// after instantiation, its workspace stays the executable graph's, and a capture meanwhile gets
// another (sharing one, the two graphs' replays, which run apart, would count each other's
// arrivals: wrong sums or a hang). This guards the release, not the leak: the old code, which
// never freed a workspace, passes it too.
TEST_F(Lifetime, AnExecutableGraphKeepsItsWorkspaceAfterItsGraphIsDestroyed) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const NormSpec spec = split_spec();
  ASSERT_EQ(plan(spec, device::target_of(context.device())).strategy, Strategy::kRowSplit);
  Problem a(spec, Values::kNormal, 1), b(spec, Values::kLargeMean, 2);
  const Kernel kernel = engine.prepare(spec);
  device::Stream capture_stream, stream_a, stream_b;
  const CapturedGraph graph_a(
      capture_stream.get(), [&] { kernel.launch(args_of(a), capture_stream.handle()); },
      CapturedGraph::kExecutableOnly);
  // Time for a release that must not come (the destructor runs on a CUDA thread).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const CapturedGraph graph_b(
      capture_stream.get(), [&] { kernel.launch(args_of(b), capture_stream.handle()); },
      CapturedGraph::kExecutableOnly);
  EXPECT_EQ(detail::workspace_count(kernel), 2u);
  for (int r = 0; r < 4; ++r) {
    a.new_x(Values::kNormal, 10 + r);
    b.new_x(Values::kLargeMean, 20 + r);
    a.poison();
    b.poison();
    graph_a.replay(stream_a.get());
    graph_b.replay(stream_b.get());
    stream_a.synchronize();
    stream_b.synchronize();
    expect_close(a, "graph a, round " + std::to_string(r));
    expect_close(b, "graph b, round " + std::to_string(r));
  }
}

}  // namespace
}  // namespace testing
}  // namespace normjit
