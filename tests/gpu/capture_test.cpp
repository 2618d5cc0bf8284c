// CUDA-graph capture of every strategy (channels, rows, split, stream), as an inference
// engine does it: the kernel prepared and launched once, then captured on a stream of its own
// that it never used before, and the graph replayed with new data in the captured buffers,
// compared with float64 each time. The split and streaming kernels keep arrival counters in
// a workspace: a capture must neither allocate it through the capturing stream nor share it
// with launches the graph's replays are not ordered with.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"

namespace normjit::testing {
namespace {

struct Case {
  NormSpec spec;
  Strategy strategy;  // what the plan must pick, so each strategy is covered
};

std::vector<Case> cases(const Target& target) {
  return {
      {make(Op::kRmsNorm, {4, 64, 32, 32}, Dtype::kBF16, Affine::kWeight, 0), Strategy::kChannels},
      // A cluster of 8 CTAs per item (sm_90): its compile-time cluster launched into a graph.
      {make(Op::kLayerNorm, {3, 1024, 7, 7}, Dtype::kBF16, Affine::kBoth, 0),
       target.sm >= 90 ? Strategy::kChannelsSlab : Strategy::kChannels},
      {make(Op::kLayerNorm, {64, 1000}, Dtype::kF32, Affine::kBoth, 1), Strategy::kRowRegisters},
      {make(Op::kGroupNorm, {3, 64, 7, 7}, Dtype::kF16, Affine::kBoth, -1, 8),
       Strategy::kRowRegisters},
      // The LayerNorm seed's shape class (rows of 4 Mi split over co-resident CTAs).
      {make(Op::kLayerNorm, {2, 64, 256, 256}, Dtype::kF32, Affine::kBoth, 3), Strategy::kRowSplit},
      {make(Op::kGroupNorm, {2, 64, 128, 128}, Dtype::kBF16, Affine::kBoth, -1, 4),
       Strategy::kRowSplit},
      {make(Op::kLayerNorm, {2, 5000011}, Dtype::kF32, Affine::kBoth, 1), Strategy::kRowStream},
  };
}

double tolerance_of(const NormSpec& spec, Values values) {
  return values == Values::kLargeMean && spec.dtype == Dtype::kF32 ? 1e-4 : tolerance(spec.dtype);
}

void expect_close(const Problem& p, Values values, const std::string& what) {
  const RunResult r = p.compare(p.y);
  EXPECT_TRUE(r.all_finite) << p.spec.to_string() << ": " << what;
  EXPECT_LT(r.rel_error, tolerance_of(p.spec, values)) << p.spec.to_string() << ": " << what;
}

class Capture : public ::testing::Test {
 protected:
  void SetUp() override { NORMJIT_REQUIRE_GPU(); }
};

TEST_F(Capture, EveryStrategyOnAFreshStreamReplaysWithNewInputs) {
  device::PrimaryContext context;
  const Target target = device::target_of(context.device());
  Engine engine(test_engine_options());
  int replays = 0;
  for (const Case& c : cases(target)) {
    ASSERT_EQ(plan(c.spec, target).strategy, c.strategy) << c.spec.to_string();
    Problem p(c.spec, Values::kNormal, 1);
    const Kernel kernel = engine.prepare(c.spec);
    const LaunchArgs args{p.x.get(), p.y.get(), p.w.get(), p.b.get(), c.spec.batch(), 1e-5f};
    // Launched once on the default stream, as before a capture...
    kernel.launch(args, nullptr);
    NORMJIT_CU(driver::api().cuCtxSynchronize());
    expect_close(p, Values::kNormal, "eager launch");
    // ...then captured on a stream first used inside the capture.
    device::Stream stream;
    CapturedGraph graph(stream.get(), [&] { kernel.launch(args, stream.handle()); });
    const Values kinds[] = {Values::kLargeMean, Values::kNegative, Values::kNormal};
    for (int r = 0; r < 3; ++r) {
      p.new_x(kinds[r], 100 + r);
      p.poison();
      graph.replay(stream.get());
      stream.synchronize();
      expect_close(p, kinds[r], "replay " + std::to_string(r));
      ++replays;
    }
  }
  std::printf("[ capture  ] %zu strategies x 3 replays = %d replays checked\n",
              cases(target).size(), replays);
}

TEST_F(Capture, GraphsAndEagerLaunchesOfOneSplitKernelInterleave) {
  // Two graphs of the same split kernel and eager launches on two other streams, replayed
  // in turns: each owner keeps its own counters, so none waits for another's generations.
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const NormSpec spec = make(Op::kLayerNorm, {3, 1000003}, Dtype::kBF16, Affine::kBoth, 1);
  ASSERT_EQ(plan(spec, device::target_of(context.device())).strategy, Strategy::kRowSplit);
  Problem a(spec, Values::kNormal, 1), b(spec, Values::kNegative, 2);
  const Kernel kernel = engine.prepare(spec);
  auto args = [&](const Problem& p) {
    return LaunchArgs{p.x.get(), p.y.get(), p.w.get(), p.b.get(), spec.batch(), 1e-5f};
  };
  device::Stream capture_stream, eager_a, eager_b;
  CapturedGraph graph_a(capture_stream.get(),
                        [&] { kernel.launch(args(a), capture_stream.handle()); });
  CapturedGraph graph_b(capture_stream.get(),
                        [&] { kernel.launch(args(b), capture_stream.handle()); });
  for (int r = 0; r < 4; ++r) {
    a.new_x(Values::kNormal, 10 + r);
    b.new_x(Values::kLargeMean, 20 + r);
    a.poison();
    b.poison();
    graph_a.replay(eager_a.get());
    graph_b.replay(eager_b.get());
    eager_a.synchronize();
    eager_b.synchronize();
    expect_close(a, Values::kNormal, "graph a, round " + std::to_string(r));
    expect_close(b, Values::kLargeMean, "graph b, round " + std::to_string(r));
    a.poison();
    kernel.launch(args(a), eager_a.handle());
    eager_a.synchronize();
    expect_close(a, Values::kNormal, "eager, round " + std::to_string(r));
  }
}

TEST_F(Capture, TwoThreadsOnTheirPerThreadStreamsKeepTheirOwnCounters) {
  // CU_STREAM_PER_THREAD is one handle for a different stream in each thread: two threads
  // launching one split kernel on it, at once, each with a workspace of its own (one shared
  // workspace's counters, counted by both launches: a hang or wrong sums).
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const NormSpec spec = make(Op::kLayerNorm, {3, 1000003}, Dtype::kBF16, Affine::kBoth, 1);
  ASSERT_EQ(plan(spec, device::target_of(context.device())).strategy, Strategy::kRowSplit);
  const Kernel kernel = engine.prepare(spec);
  CUcontext current = nullptr;
  NORMJIT_CU(driver::api().cuCtxGetCurrent(&current));
  auto per_thread = reinterpret_cast<CUstream_st*>(CU_STREAM_PER_THREAD);
  auto work = [&](Values values, uint64_t seed) {
    NORMJIT_CU(driver::api().cuCtxSetCurrent(current));
    Problem p(spec, values, seed);
    for (int r = 0; r < 8; ++r) {
      p.new_x(values, seed + r);
      p.poison();
      kernel.launch(LaunchArgs{p.x.get(), p.y.get(), p.w.get(), p.b.get(), spec.batch(), 1e-5f},
                    per_thread);
      NORMJIT_CU(driver::api().cuStreamSynchronize(CU_STREAM_PER_THREAD));
      expect_close(p, values, "per-thread stream, seed " + std::to_string(seed + r));
    }
  };
  std::thread first(work, Values::kNormal, 40), second(work, Values::kLargeMean, 60);
  first.join();
  second.join();
}

TEST_F(Capture, KernelFirstPreparedInsideTheCapture) {
  // A model captured before it ever ran: compiling and loading the module happen while the
  // stream captures (global mode), and only the launch is recorded.
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  for (const NormSpec& spec :
       {make(Op::kRmsNorm, {8, 4096}, Dtype::kBF16, Affine::kWeight, 1),
        make(Op::kLayerNorm, {2, 64, 256, 256}, Dtype::kBF16, Affine::kBoth, 3)}) {
    Problem p(spec, Values::kNormal, 3);
    device::Stream stream;
    CapturedGraph graph(stream.get(), [&] {
      engine.run(spec, p.x.get(), p.y.get(), p.w.get(), p.b.get(), stream.handle());
    });
    for (int r = 0; r < 2; ++r) {
      p.new_x(Values::kNegative, 30 + r);
      p.poison();
      graph.replay(stream.get());
      stream.synchronize();
      expect_close(p, Values::kNegative, "replay " + std::to_string(r));
    }
  }
}

}  // namespace
}  // namespace normjit::testing
