// The arguments of a backward kernel (issue 20) are checked before anything needs a device:
// every pointer is present exactly when the spec asks for it (mean for layernorm only, weight,
// dweight and dbias by affine, dresidual_out by residual), written buffers share no memory with
// another argument except dx over x, dy or dresidual_out (in place), and a forward launch of a
// backward spec (or the reverse) is refused naming the entry point to use. The C entry point
// normjit_launch_backward checks its struct.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "normjit/normjit.h"
#include "normjit/normjit.hpp"
#include "templates/normjit/params.cuh"

namespace normjit {
namespace detail {
// runtime/engine.cpp: what Kernel::launch_backward (and launch) check before they need the plan
// or a device, and the kernel parameters they fill. No runtime header declares them.
Params backward_params(const NormSpec& spec, const BackwardArgs& args);
Params launch_params(const NormSpec& spec, const LaunchArgs& args);
}  // namespace detail
namespace {

bool has(const std::string& text, const std::string& word) {
  return text.find(word) != std::string::npos;
}

// Fake device pointers: the checks look at addresses only. Far apart unless a test says so.
char* fake(int i) { return reinterpret_cast<char*>(uintptr_t{1} << 40) + (uintptr_t(i) << 32); }

NormSpec layernorm(const char* affine = "both") {
  return NormSpec::parse(std::string("op=layernorm shape=8,128 affine=") + affine +
                         " backward=true");
}
NormSpec rmsnorm(const char* affine = "weight") {
  return NormSpec::parse(std::string("op=rmsnorm shape=8,128 normalized_dims=1 affine=") + affine +
                         " backward=true");
}

// Every pointer a layernorm backward with weight and bias takes.
BackwardArgs full(int64_t batch = 8) {
  BackwardArgs a;
  a.x = fake(1);
  a.dy = fake(2);
  a.mean = reinterpret_cast<const float*>(fake(3));
  a.rstd = reinterpret_cast<const float*>(fake(4));
  a.weight = fake(5);
  a.dx = fake(6);
  a.dweight = fake(7);
  a.dbias = fake(8);
  a.batch = batch;
  return a;
}

std::string refusal(const NormSpec& spec, const BackwardArgs& args) {
  try {
    detail::backward_params(spec, args);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted; expected an error";
  return "";
}

TEST(BackwardArgs, EveryPointerTheSpecNeedsIsPresent) {
  const NormSpec spec = layernorm();
  EXPECT_NO_THROW(detail::backward_params(spec, full()));
  struct Case {
    const char* name;
    void (*clear)(BackwardArgs&);
  } cases[] = {
      {"x", [](BackwardArgs& a) { a.x = nullptr; }},
      {"dy", [](BackwardArgs& a) { a.dy = nullptr; }},
      {"dx", [](BackwardArgs& a) { a.dx = nullptr; }},
      {"rstd", [](BackwardArgs& a) { a.rstd = nullptr; }},
      {"mean", [](BackwardArgs& a) { a.mean = nullptr; }},
      {"weight", [](BackwardArgs& a) { a.weight = nullptr; }},
      {"dweight", [](BackwardArgs& a) { a.dweight = nullptr; }},
      {"dbias", [](BackwardArgs& a) { a.dbias = nullptr; }},
  };
  for (const Case& c : cases) {
    BackwardArgs a = full();
    c.clear(a);
    const std::string m = refusal(spec, a);
    EXPECT_TRUE(has(m, std::string("invalid ") + c.name + " NULL") && has(m, "needs it"))
        << c.name << ": " << m;
    EXPECT_TRUE(has(m, "backward=true")) << m;  // the spec is quoted
  }
}

TEST(BackwardArgs, UnwantedPointersAreRefusedNamingWhy) {
  // RMSNorm has no mean; affine none takes no weight and makes no gradients of parameters.
  BackwardArgs a = full();
  a.dbias = nullptr;
  std::string m = refusal(rmsnorm(), a);
  EXPECT_TRUE(has(m, "invalid mean 0x") && has(m, "rmsnorm, which has no mean")) << m;
  a.mean = nullptr;
  EXPECT_NO_THROW(detail::backward_params(rmsnorm(), a));
  a.dbias = fake(8);
  m = refusal(rmsnorm(), a);
  EXPECT_TRUE(has(m, "invalid dbias 0x") && has(m, "affine=weight")) << m;
  BackwardArgs none = full();
  none.weight = nullptr;
  none.dbias = nullptr;
  m = refusal(layernorm("none"), none);
  EXPECT_TRUE(has(m, "invalid dweight 0x") && has(m, "affine=none")) << m;
  none.dweight = nullptr;
  EXPECT_NO_THROW(detail::backward_params(layernorm("none"), none));
}

TEST(BackwardArgs, BatchIsPositive) {
  for (int64_t batch : {int64_t{0}, int64_t{-3}}) {
    const std::string m = refusal(layernorm(), full(batch));
    EXPECT_TRUE(has(m, "invalid batch " + std::to_string(batch)) && has(m, "at least 1")) << m;
  }
  const std::string m = refusal(layernorm(), full(int64_t{1} << 41));
  EXPECT_TRUE(has(m, "too large")) << m;
}

TEST(BackwardArgs, WrittenBuffersShareNoMemoryExceptDxInPlace) {
  const NormSpec spec = layernorm();
  // dx over dy or x, exactly: in place.
  BackwardArgs a = full();
  a.dx = const_cast<void*>(a.dy);
  EXPECT_NO_THROW(detail::backward_params(spec, a));
  a.dx = const_cast<void*>(a.x);
  EXPECT_NO_THROW(detail::backward_params(spec, a));
  // Partially: refused.
  a.dx = static_cast<char*>(const_cast<void*>(a.dy)) + 4;
  std::string m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid dx 0x") && has(m, "partially overlaps dy")) << m;
  // dweight over the weight, dbias over dweight, dx over the mean: refused.
  a = full();
  a.dweight = const_cast<void*>(a.weight);
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid dweight 0x") && has(m, "overlaps weight")) << m;
  a = full();
  a.dbias = static_cast<char*>(a.dweight) + 64;
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "overlaps") && has(m, "dweight") && has(m, "dbias")) << m;
  a = full();
  a.dx = const_cast<float*>(a.mean);
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid dx 0x") && has(m, "overlaps mean")) << m;
  // Read-only arguments may share memory.
  a = full();
  a.dy = a.x;
  EXPECT_NO_THROW(detail::backward_params(spec, a));
}

// The fused add's backward (residual): x is h, and dresidual_out (h's gradient from its other
// uses) is added to dx. It is required exactly with a residual, and dx may be it.
TEST(BackwardArgs, AResidualTakesTheGradientOfH) {
  const NormSpec spec = NormSpec::parse(
      "op=rmsnorm shape=8,128 dtype=bf16 normalized_dims=1 affine=weight residual=bf16 "
      "backward=true");
  BackwardArgs a = full();
  a.mean = nullptr;
  a.dbias = nullptr;
  std::string m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid dresidual_out NULL") && has(m, "forward's residual_out")) << m;
  a.dresidual_out = fake(9);
  const Params p = detail::backward_params(spec, a);
  EXPECT_EQ(p.residual, a.dresidual_out);
  EXPECT_EQ(p.residual_out, nullptr);
  // In place over dh, exactly; partially refused.
  a.dx = const_cast<void*>(a.dresidual_out);
  EXPECT_EQ(detail::backward_params(spec, a).y, a.dresidual_out);
  a.dx = static_cast<char*>(const_cast<void*>(a.dresidual_out)) + 2;
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid dx 0x") && has(m, "partially overlaps dresidual_out")) << m;
  // Written gradients of the parameters may not overlap it.
  a.dx = fake(6);
  a.dweight = const_cast<void*>(a.dresidual_out);
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid dweight 0x") && has(m, "overlaps dresidual_out")) << m;
  // Without a residual it is refused.
  BackwardArgs b = full();
  b.dresidual_out = fake(9);
  m = refusal(layernorm(), b);
  EXPECT_TRUE(has(m, "invalid dresidual_out 0x") && has(m, "has no residual")) << m;
}

// With an activation (the forward's, after its affine step) the kernel reads the bias for the
// activation's input z = xhat * w + b: required exactly with an activation and affine both,
// passed to the kernel, read-only (it may share memory with other inputs, not with dx).
TEST(BackwardArgs, AnActivationWithABiasTakesTheBias) {
  const NormSpec spec = NormSpec::parse(
      "op=groupnorm shape=2,64,4,4 groups=8 affine=both activation=silu backward=true");
  BackwardArgs a = full(2);
  std::string m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid bias NULL") && has(m, "xhat * weight + bias")) << m;
  a.bias = fake(10);
  const Params p = detail::backward_params(spec, a);
  EXPECT_EQ(p.bias, a.bias);
  EXPECT_EQ(p.weight, a.weight);
  a.bias = a.weight;  // read-only beside the weight
  EXPECT_NO_THROW(detail::backward_params(spec, a));
  a.bias = a.dx;
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid dx 0x") && has(m, "overlaps bias")) << m;
  // Without a bias, or without an activation, it is refused: the kernel would not read it.
  BackwardArgs b = full(2);
  b.dbias = nullptr;
  b.bias = fake(10);
  m = refusal(NormSpec::parse("op=groupnorm shape=2,64,4,4 groups=8 affine=weight "
                              "activation=gelu backward=true"),
              b);
  EXPECT_TRUE(has(m, "invalid bias 0x") && has(m, "has no bias")) << m;
  b.bias = nullptr;
  EXPECT_NO_THROW(detail::backward_params(
      NormSpec::parse("op=groupnorm shape=2,64,4,4 groups=8 affine=weight activation=gelu "
                      "backward=true"),
      b));
  BackwardArgs c = full();
  c.bias = fake(10);
  m = refusal(layernorm(), c);
  EXPECT_TRUE(has(m, "invalid bias 0x") && has(m, "has no activation")) << m;
}

// The channel forms channels last: the row kernel over N x S rows of C; the statistics are one
// per (n, position), in that order.
TEST(BackwardArgs, ChannelFormsInNhwcLaunchNTimesSRows) {
  const NormSpec spec = NormSpec::parse(
      "op=layernorm shape=8,96,7,7 normalized_dims=0 affine=both layout=nhwc backward=true");
  const Params p = detail::backward_params(spec, full(8));
  EXPECT_EQ(p.batch, 8 * 49);
  EXPECT_EQ(p.x_rows.outer, 96);
  // nchw: the channel kernel, one item per n.
  const NormSpec nchw =
      NormSpec::parse("op=layernorm shape=8,96,7,7 normalized_dims=0 affine=both backward=true");
  EXPECT_EQ(detail::backward_params(nchw, full(8)).batch, 8);
  // The statistics of N x S positions overlap dx when dx starts inside them.
  BackwardArgs a = full(8);
  a.dx = const_cast<float*>(a.rstd) + 8 * 49 - 1;
  const std::string m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid dx 0x") && has(m, "overlaps rstd")) << m;
}

TEST(BackwardArgs, ParamsCarryThePointersAndContiguousRows) {
  const BackwardArgs a = full(5);
  const Params p = detail::backward_params(layernorm(), a);
  EXPECT_EQ(p.x, a.x);
  EXPECT_EQ(p.y, a.dx);
  EXPECT_EQ(p.dy, a.dy);
  EXPECT_EQ(p.weight, a.weight);
  EXPECT_EQ(p.bias, nullptr);
  EXPECT_EQ(p.dweight, a.dweight);
  EXPECT_EQ(p.dbias, a.dbias);
  EXPECT_EQ(p.mean, a.mean);
  EXPECT_EQ(p.rstd, a.rstd);
  EXPECT_EQ(p.residual, nullptr);
  EXPECT_EQ(p.batch, 5);
  EXPECT_EQ(p.workspace, nullptr);
  EXPECT_EQ(p.inner_rows, 1);
  EXPECT_EQ(p.x_rows.outer, 128);
  EXPECT_EQ(p.y_rows.outer, 128);
}

TEST(BackwardArgs, ForwardAndBackwardEntryPointsRefuseEachOthersSpecs) {
  LaunchArgs f;
  f.x = fake(1);
  f.y = fake(2);
  f.batch = 8;
  try {
    detail::launch_params(layernorm(), f);
    ADD_FAILURE() << "a forward launch of a backward spec was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "invalid spec 'op=layernorm") &&
                has(e.what(), "is a backward kernel") && has(e.what(), "launch_backward"))
        << e.what();
  }
  const std::string m = refusal(NormSpec::parse("op=layernorm shape=8,128"), full());
  EXPECT_TRUE(has(m, "is a forward kernel") && has(m, "backward=true")) << m;
  // Engine::run is a forward launch: refused before a device is needed.
  EngineOptions o;
  o.memory_only = true;
  Engine engine(o);
  try {
    engine.run(layernorm("none"), fake(1), fake(2), nullptr, nullptr, nullptr);
    ADD_FAILURE() << "run accepted a backward spec";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_TRUE(has(e.what(), "is a backward kernel")) << e.what();
  }
  // An empty kernel is named as such.
  try {
    Kernel().launch_backward(full(), nullptr);
    ADD_FAILURE() << "an empty kernel launched";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "empty normjit::Kernel")) << e.what();
  }
  // So is asking one what it is (it dereferenced nothing: a crash).
  const Kernel empty;
  for (const auto& ask : std::vector<std::function<void()>>{[&] { (void)empty.key(); },
                                                            [&] { (void)empty.plan_text(); },
                                                            [&] { (void)empty.spec(); }}) {
    try {
      ask();
      ADD_FAILURE() << "an empty kernel described itself";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_TRUE(has(e.what(), "of an empty normjit::Kernel")) << e.what();
    }
  }
}

// ---------------------------------------------------------------------------------------
// C: normjit_backward_args and normjit_launch_backward

bool mentions(const char* needle) {
  return std::string(normjit_last_error()).find(needle) != std::string::npos;
}

TEST(CBackwardArgs, InitSetsTheDefaults) {
  normjit_backward_args a;
  std::memset(&a, 0x5a, sizeof a);
  normjit_backward_args_init(&a);
  EXPECT_EQ(a.size, sizeof(normjit_backward_args));
  for (const void* p :
       {a.x, a.dy, static_cast<const void*>(a.mean), static_cast<const void*>(a.rstd), a.weight,
        static_cast<const void*>(a.dx), static_cast<const void*>(a.dweight),
        static_cast<const void*>(a.dbias), a.dresidual_out}) {
    EXPECT_EQ(p, nullptr);
  }
  EXPECT_EQ(a.batch, 0);
  (normjit_backward_args_init)(nullptr);  // ignored, as by the sized form
  normjit_backward_args_init_sized(nullptr, sizeof(normjit_backward_args));
}

TEST(CBackwardArgs, LaunchBackwardChecksTheStructBeforeTheKernel) {
  normjit_backward_args a;
  normjit_backward_args_init(&a);
  EXPECT_EQ(normjit_launch_backward(nullptr, nullptr, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid args NULL") && mentions("normjit_backward_args_init"))
      << normjit_last_error();
  a.size = 0;
  EXPECT_EQ(normjit_launch_backward(nullptr, &a, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid args.size 0") && mentions("normjit_backward_args_init"))
      << normjit_last_error();
  a.size = size_t{1} << 40;
  EXPECT_EQ(normjit_launch_backward(nullptr, &a, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("larger")) << normjit_last_error();
  normjit_backward_args_init(&a);
  EXPECT_EQ(normjit_launch_backward(nullptr, &a, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid kernel NULL")) << normjit_last_error();
  // A newer caller's larger struct: taken when its unknown fields are zero.
  struct Newer {
    normjit_backward_args known;
    int64_t added;
  } n;
  std::memset(&n, 0, sizeof n);
  normjit_backward_args_init(&n.known);
  n.known.size = sizeof n;
  EXPECT_EQ(normjit_launch_backward(nullptr, &n.known, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid kernel NULL")) << normjit_last_error();
  n.added = 1;
  EXPECT_EQ(normjit_launch_backward(nullptr, &n.known, nullptr), NORMJIT_ERROR_UNSUPPORTED);
  EXPECT_TRUE(mentions("normjit_backward_args") && mentions("as new as the header"))
      << normjit_last_error();
  // An older caller's struct, built before dresidual_out (its size ends at batch): taken.
  normjit_backward_args older;
  std::memset(&older, 0x5a, sizeof older);
  normjit_backward_args_init(&older);
  older.size = offsetof(normjit_backward_args, dresidual_out);
  std::memset(&older.dresidual_out, 0x5a, sizeof older.dresidual_out);
  EXPECT_EQ(normjit_launch_backward(nullptr, &older, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid kernel NULL")) << normjit_last_error();
}

}  // namespace
}  // namespace normjit
