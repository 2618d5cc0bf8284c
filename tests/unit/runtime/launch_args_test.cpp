// The launch arguments of the variant axes are checked before anything needs a device: every
// pointer is present exactly when the spec asks for it, row strides belong to the trailing
// forms, written rows never overlap, and the kernel's parameters (templates/normjit/params.cuh)
// carry the strides resolved. The C entry point normjit_launch_ex checks its struct first.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <limits>
#include <string>

#include "normjit/normjit.h"
#include "normjit/normjit.hpp"
#include "templates/normjit/params.cuh"

namespace normjit {
namespace detail {
// runtime/engine.cpp: what Kernel::launch checks before it needs the plan or a device, and the
// kernel parameters it fills (all but the workspace). No runtime header declares it.
Params launch_params(const NormSpec& spec, const LaunchArgs& args);
}  // namespace detail
namespace {

// Trailing-form rmsnorm of `rows` rows of `hidden` elements, f32 (fields set directly: the
// variant axes need no spec text here).
NormSpec rows_spec(int64_t rows = 8, int64_t hidden = 128) {
  NormSpec s;
  s.op = Op::kRmsNorm;
  s.shape = {rows, hidden};
  s.normalized_dims = 1;
  s.validate();
  return s;
}

// Fake device pointers: the checks look at addresses only. Far apart unless a test says so.
char* fake(int i) { return reinterpret_cast<char*>(uintptr_t{1} << 40) + (uintptr_t(i) << 32); }

LaunchArgs plain(int64_t batch = 8) {
  LaunchArgs a;
  a.x = fake(1);
  a.y = fake(2);
  a.batch = batch;
  return a;
}

// The message of the InvalidArgument error that launch_params throws ("" and a failure when
// it throws nothing or something else).
std::string refusal(const NormSpec& spec, const LaunchArgs& args) {
  try {
    detail::launch_params(spec, args);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted; expected an error";
  return "";
}

bool has(const std::string& text, const std::string& word) {
  return text.find(word) != std::string::npos;
}

TEST(LaunchArgs, ResidualPointersArePresentExactlyWhenTheSpecHasAResidual) {
  NormSpec spec = rows_spec();
  spec.residual = Dtype::kF32;
  LaunchArgs a = plain();
  std::string m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid residual NULL") && has(m, "needs it")) << m;
  a.residual = fake(3);
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid residual_out NULL") && has(m, "may equal residual")) << m;
  a.residual_out = fake(4);
  EXPECT_NO_THROW(detail::launch_params(spec, a));
  // Without a residual in the spec, neither may be given, nor their strides.
  const NormSpec no_residual = rows_spec();
  m = refusal(no_residual, a);
  EXPECT_TRUE(has(m, "invalid residual 0x") && has(m, "has no residual")) << m;
  LaunchArgs b = plain();
  b.residual_out_rows.outer = 256;
  m = refusal(no_residual, b);
  EXPECT_TRUE(has(m, "invalid residual_out_rows.outer 256") && has(m, "no residual")) << m;
}

// A launch's eps is held to a spec's range: a denormal float (1e-40) would be another eps on
// the device, and was taken; 0, negatives, inf and NaN too.
TEST(LaunchArgs, EpsIsANormalFloatAsASpecsIs) {
  const NormSpec spec = rows_spec();
  for (float eps : {1e-40f, 1e-45f, 0.0f, -1e-5f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    LaunchArgs a = plain();
    a.eps = eps;
    const std::string e = refusal(spec, a);
    EXPECT_TRUE(has(e, "invalid eps") && has(e, "that a float holds")) << eps << ": " << e;
  }
  LaunchArgs a = plain();
  a.eps = std::numeric_limits<float>::min();
  EXPECT_NO_THROW(detail::launch_params(spec, a));
}

TEST(LaunchArgs, ScaleIsPresentExactlyForAnFp8Output) {
  NormSpec spec = rows_spec();
  spec.out_dtype = Dtype::kE4M3;
  LaunchArgs a = plain();
  std::string m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid scale NULL") && has(m, "one f32")) << m;
  a.scale = reinterpret_cast<const float*>(fake(5));
  EXPECT_NO_THROW(detail::launch_params(spec, a));
  spec.out_dtype = Dtype::kBF16;
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid scale 0x") && has(m, "out_dtype bf16, not fp8")) << m;
}

TEST(LaunchArgs, StatisticsFollowSaveStatsAndRmsnormHasNoMean) {
  NormSpec spec = rows_spec();
  spec.save_stats = true;
  LaunchArgs a = plain();
  std::string m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid rstd NULL")) << m;
  a.rstd = reinterpret_cast<float*>(fake(6));
  EXPECT_NO_THROW(detail::launch_params(spec, a));
  a.mean = reinterpret_cast<float*>(fake(7));
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid mean 0x") && has(m, "rmsnorm, which has no mean")) << m;
  // LayerNorm saves both.
  NormSpec ln = rows_spec();
  ln.op = Op::kLayerNorm;
  ln.affine = Affine::kNone;
  ln.save_stats = true;
  a.mean = nullptr;
  m = refusal(ln, a);
  EXPECT_TRUE(has(m, "invalid mean NULL")) << m;
  a.mean = reinterpret_cast<float*>(fake(7));
  EXPECT_NO_THROW(detail::launch_params(ln, a));
  ln.save_stats = false;
  a.rstd = nullptr;
  m = refusal(ln, a);
  EXPECT_TRUE(has(m, "invalid mean 0x") && has(m, "save_stats")) << m;
}

TEST(LaunchArgs, RowStridesAreForTheTrailingFormsOnly) {
  const NormSpec channels = NormSpec::parse("op=rmsnorm shape=2,64,32,32");
  const NormSpec groups = NormSpec::parse("op=groupnorm shape=2,64,32,32 groups=8 affine=none");
  LaunchArgs a = plain(2);
  EXPECT_NO_THROW(detail::launch_params(channels, a));
  a.x_rows.outer = 65536;
  std::string m = refusal(channels, a);
  EXPECT_TRUE(has(m, "invalid x_rows.outer 65536") && has(m, "the channel form")) << m;
  a = plain(2);
  a.y_rows.inner = 64;
  m = refusal(groups, a);
  EXPECT_TRUE(has(m, "invalid y_rows.inner 64") && has(m, "groupnorm")) << m;
  a = plain(2);
  a.inner_rows = 2;
  m = refusal(groups, a);
  EXPECT_TRUE(has(m, "invalid inner_rows 2") && has(m, "pass 1")) << m;
}

TEST(LaunchArgs, InnerRowsDivideTheBatchAndStridesAreNotNegative) {
  const NormSpec spec = rows_spec();
  LaunchArgs a = plain(6);
  a.inner_rows = 4;
  std::string m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid inner_rows 4") && has(m, "must divide batch (6)")) << m;
  a.inner_rows = 0;
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid inner_rows 0") && has(m, "at least 1")) << m;
  a = plain();
  a.x_rows.outer = -128;
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid x_rows.outer -128") && has(m, ">= 0")) << m;
  a = plain();
  a.inner_rows = 2;
  a.y_rows.inner = -1;
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid y_rows.inner -1")) << m;
  a = plain();
  a.x_rows.outer = int64_t{1} << 61;  // rows 2^63 bytes apart
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid x_rows.outer") && has(m, "more than 2^62 bytes")) << m;
}

TEST(LaunchArgs, StridesResolveToContiguousRowsAndEveryParamIsFilled) {
  NormSpec spec = rows_spec(12, 128);
  spec.residual = Dtype::kF32;
  spec.out_dtype = Dtype::kE5M2;
  spec.save_stats = true;
  LaunchArgs a = plain(12);
  a.eps = 1e-6f;
  a.residual = fake(3);
  a.residual_out = fake(4);
  a.scale = reinterpret_cast<const float*>(fake(5));
  a.rstd = reinterpret_cast<float*>(fake(6));
  Params p = detail::launch_params(spec, a);
  EXPECT_EQ(p.x, a.x);
  EXPECT_EQ(p.y, a.y);
  EXPECT_EQ(p.weight, nullptr);
  EXPECT_EQ(p.bias, nullptr);
  EXPECT_EQ(p.workspace, nullptr);
  EXPECT_EQ(p.batch, 12);
  EXPECT_EQ(p.eps, 1e-6f);
  EXPECT_EQ(p.residual, a.residual);
  EXPECT_EQ(p.residual_out, a.residual_out);
  EXPECT_EQ(p.scale, a.scale);
  EXPECT_EQ(p.mean, nullptr);
  EXPECT_EQ(p.rstd, a.rstd);
  EXPECT_EQ(p.inner_rows, 1);
  for (const RowPitch* r : {&p.x_rows, &p.y_rows, &p.residual_rows, &p.residual_out_rows}) {
    EXPECT_EQ(r->outer, 128);  // one level: the row length
    EXPECT_EQ(r->inner, 128);  // not used with one level
  }
  // Two levels ([tokens, heads, dim] of 4 tokens x 3 heads): inner defaults to the row length,
  // outer to inner_rows * inner; given strides are kept.
  a.inner_rows = 3;
  a.x_rows = {1024, 256};  // x: heads 256 apart, tokens 1024 apart (a slice of a wider tensor)
  a.y_rows = {0, 256};
  a.residual_rows = {512, 0};
  p = detail::launch_params(spec, a);
  EXPECT_EQ(p.inner_rows, 3);
  EXPECT_EQ(p.x_rows.outer, 1024);
  EXPECT_EQ(p.x_rows.inner, 256);
  EXPECT_EQ(p.y_rows.outer, 768);
  EXPECT_EQ(p.y_rows.inner, 256);
  EXPECT_EQ(p.residual_rows.outer, 512);
  EXPECT_EQ(p.residual_rows.inner, 128);
  EXPECT_EQ(p.residual_out_rows.outer, 384);
  EXPECT_EQ(p.residual_out_rows.inner, 128);
}

// The kernels divide a row index by inner_rows as (umulhi(row, magic) + row) >> shift
// (row_common.cuh): the host's magic numbers must give the exact quotient for every row a launch
// can have (below 2^62), here checked at the edges of each quotient and at large rows.
TEST(LaunchArgs, InnerRowsMagicNumbersDivideExactly) {
  const auto quotient = [](const Params& p, uint64_t n) {
    const uint64_t high = uint64_t((unsigned __int128)n * p.inner_magic >> 64);
    return (high + n) >> p.inner_shift;
  };
  for (int64_t d : {1, 2, 3, 5, 7, 8, 12, 40, 64, 100, 1000, 4097, 65536, 1000003}) {
    NormSpec spec = rows_spec(d * 6, 128);
    LaunchArgs a = plain(d * 6);
    a.inner_rows = d;
    const Params p = detail::launch_params(spec, a);
    ASSERT_EQ(p.inner_rows, d);
    for (uint64_t q : {uint64_t{0}, uint64_t{1}, uint64_t{5}, uint64_t{1} << 20,
                       (uint64_t{1} << 62) / uint64_t(d) - 1}) {
      for (int64_t r : {int64_t{0}, int64_t{1}, d - 1}) {
        if (r >= d) continue;
        const uint64_t n = q * uint64_t(d) + uint64_t(r);
        EXPECT_EQ(quotient(p, n), q) << "row " << n << " / " << d;
      }
    }
  }
  // The channel form has no rows: zeros, one level.
  const Params p = detail::launch_params(NormSpec::parse("op=rmsnorm shape=2,64,32,32"), plain(2));
  EXPECT_EQ(p.inner_rows, 1);
  EXPECT_EQ(quotient(p, 12345), 12345u);
  EXPECT_EQ(p.x_rows.outer, 0);
  EXPECT_EQ(p.y_rows.inner, 0);
}

TEST(LaunchArgs, TheRowsOfAWrittenTensorDoNotOverlap) {
  const NormSpec spec = rows_spec(8, 128);
  LaunchArgs a = plain();
  a.y_rows.outer = 64;
  std::string m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid y_rows.outer 64") && has(m, "at least 128")) << m;
  // x is only read: its rows may overlap.
  a = plain();
  a.x_rows.outer = 64;
  EXPECT_NO_THROW(detail::launch_params(spec, a));
  // Two levels: groups of 4 rows 256 apart need outer >= 3 * 256 + 128 (or the transposed
  // layout, [heads, tokens, dim] seen as [tokens, heads, dim]: outer 128, inner 2 * 128).
  a = plain();
  a.inner_rows = 4;
  a.y_rows = {512, 256};
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid y_rows.outer 512") && has(m, "at least 896")) << m;
  a.y_rows = {896, 256};
  EXPECT_NO_THROW(detail::launch_params(spec, a));
  a.y_rows = {128, 256};
  EXPECT_NO_THROW(detail::launch_params(spec, a));
  a.y_rows = {128, 200};
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid y_rows.inner 200") && has(m, "at least 256")) << m;
}

TEST(LaunchArgs, WrittenBuffersShareNoMemoryExceptInPlace) {
  NormSpec spec = rows_spec(8, 128);
  spec.residual = Dtype::kF32;
  spec.affine = Affine::kWeight;
  spec.save_stats = true;
  char* base = fake(1);
  LaunchArgs a = plain();
  a.weight = fake(8);
  a.residual = fake(3);
  a.residual_out = fake(4);
  a.rstd = reinterpret_cast<float*>(fake(6));
  EXPECT_NO_THROW(detail::launch_params(spec, a));
  // In place: y == x and residual_out == residual with the same strides.
  a.y = base;
  a.residual_out = const_cast<void*>(a.residual);
  EXPECT_NO_THROW(detail::launch_params(spec, a));
  a.y_rows.outer = 256;
  std::string m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid y 0x") && has(m, "equals x") && has(m, "row strides")) << m;
  a.y_rows = {};
  a.residual_rows.outer = 256;
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid residual_out 0x") && has(m, "equals residual")) << m;
  a.residual_rows = {};
  // In place needs an output of x's size.
  NormSpec narrow = spec;
  narrow.out_dtype = Dtype::kBF16;
  m = refusal(narrow, a);
  EXPECT_TRUE(has(m, "invalid y 0x") && has(m, "x f32, y bf16")) << m;
  // Partial overlap of y and x.
  a.y = base + 64;
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid y 0x") && has(m, "partially overlaps x")) << m;
  // Any written buffer against any other argument, both named.
  a.y = fake(2);
  a.rstd = reinterpret_cast<float*>(base + 1024);  // inside x (8 rows of 512 bytes)
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid rstd 0x") && has(m, "overlaps x (0x")) << m;
  a.rstd = reinterpret_cast<float*>(static_cast<char*>(const_cast<void*>(a.weight)) + 16);
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid rstd 0x") && has(m, "overlaps weight")) << m;
  a.rstd = reinterpret_cast<float*>(fake(6));
  a.y = static_cast<char*>(a.residual_out) + 512;
  m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid y 0x") && has(m, "overlaps residual")) << m;
}

TEST(LaunchArgs, InterleavedRowsOfOneTensorAreDisjoint) {
  // q and k of one qkv tensor [8, 3 * 128]: x = q, y = k, rows 384 elements apart.
  const NormSpec spec = rows_spec(8, 128);
  LaunchArgs a = plain();
  char* qkv = fake(1);
  a.x = qkv;
  a.y = qkv + 128 * 4;
  a.x_rows.outer = 384;
  a.y_rows.outer = 384;
  EXPECT_NO_THROW(detail::launch_params(spec, a));
  a.y = qkv + 64 * 4;  // half a row off: k overlaps q
  const std::string m = refusal(spec, a);
  EXPECT_TRUE(has(m, "invalid y 0x") && has(m, "partially overlaps x")) << m;
}

TEST(LaunchArgs, EngineRunNamesTheVariantArgumentItCannotPass) {
  // Engine::run takes x, y, weight and bias only: a spec that needs more is refused, naming
  // the argument, before a device is needed.
  EngineOptions o;
  o.memory_only = true;
  Engine engine(o);
  NormSpec spec = rows_spec();
  spec.residual = Dtype::kF32;
  try {
    engine.run(spec, fake(1), fake(2), nullptr, nullptr, nullptr);
    ADD_FAILURE() << "run accepted a residual spec without a residual";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_TRUE(has(e.what(), "invalid residual NULL")) << e.what();
  }
}

TEST(LaunchArgs, EngineRunValidatesAHandBuiltSpecBeforeReadingIt) {
  // A spec past its rank or with no shape at all: refused, naming the field, where its batch
  // was read first (past the end of the shape: a crash under ASan, garbage without).
  EngineOptions o;
  o.memory_only = true;
  Engine engine(o);
  NormSpec past_rank = rows_spec();
  past_rank.normalized_dims = 5;
  NormSpec no_shape = rows_spec();
  no_shape.shape.clear();
  for (const NormSpec& spec : {past_rank, no_shape}) {
    try {
      engine.run(spec, fake(1), fake(2), nullptr, nullptr, nullptr);
      ADD_FAILURE() << "run accepted an invalid spec";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_TRUE(has(e.what(), "shape") || has(e.what(), "normalized_dims")) << e.what();
    }
  }
}

// ---------------------------------------------------------------------------------------
// C: normjit_launch_args and normjit_launch_ex

bool mentions(const char* needle) {
  return std::string(normjit_last_error()).find(needle) != std::string::npos;
}

TEST(CLaunchArgs, InitSetsTheDefaults) {
  normjit_launch_args a;
  std::memset(&a, 0x5a, sizeof a);
  normjit_launch_args_init(&a);
  EXPECT_EQ(a.size, sizeof(normjit_launch_args));
  EXPECT_EQ(a.x, nullptr);
  EXPECT_EQ(a.y, nullptr);
  EXPECT_EQ(a.weight, nullptr);
  EXPECT_EQ(a.bias, nullptr);
  EXPECT_EQ(a.batch, 0);
  EXPECT_EQ(a.eps, 1e-5);
  EXPECT_EQ(a.residual, nullptr);
  EXPECT_EQ(a.residual_out, nullptr);
  EXPECT_EQ(a.scale, nullptr);
  EXPECT_EQ(a.mean, nullptr);
  EXPECT_EQ(a.rstd, nullptr);
  EXPECT_EQ(a.inner_rows, 1);
  for (const int64_t* s : {a.x_strides, a.y_strides, a.residual_strides, a.residual_out_strides}) {
    EXPECT_EQ(s[0], 0);
    EXPECT_EQ(s[1], 0);
  }
  (normjit_launch_args_init)(nullptr);  // ignored, as by the sized form
  normjit_launch_args_init_sized(nullptr, sizeof(normjit_launch_args));
}

TEST(CLaunchArgs, LaunchExChecksTheStructBeforeTheKernel) {
  normjit_launch_args a;
  normjit_launch_args_init(&a);
  EXPECT_EQ(normjit_launch_ex(nullptr, nullptr, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid args NULL")) << normjit_last_error();
  a.size = 0;  // not initialised
  EXPECT_EQ(normjit_launch_ex(nullptr, &a, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid args.size 0") && mentions("normjit_launch_args_init"))
      << normjit_last_error();
  a.size = offsetof(normjit_launch_args, inner_rows);
  EXPECT_EQ(normjit_launch_ex(nullptr, &a, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid args.size") && mentions("smaller")) << normjit_last_error();
  a.size = size_t{1} << 40;  // garbage: refused without reading past the struct
  EXPECT_EQ(normjit_launch_ex(nullptr, &a, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid args.size 1099511627776") && mentions("larger"))
      << normjit_last_error();
  // A well-formed struct gets as far as the kernel.
  normjit_launch_args_init(&a);
  EXPECT_EQ(normjit_launch_ex(nullptr, &a, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid kernel NULL")) << normjit_last_error();
}

TEST(CLaunchArgs, ALargerStructIsTakenWhenItsUnknownFieldsAreZero) {
  // A caller built against a newer header with one more field.
  struct Newer {
    normjit_launch_args known;
    int64_t added;
  } n;
  std::memset(&n, 0, sizeof n);
  normjit_launch_args_init(&n.known);
  n.known.size = sizeof n;
  EXPECT_EQ(normjit_launch_ex(nullptr, &n.known, nullptr), NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid kernel NULL")) << normjit_last_error();
  n.added = 7;
  EXPECT_EQ(normjit_launch_ex(nullptr, &n.known, nullptr), NORMJIT_ERROR_UNSUPPORTED);
  EXPECT_TRUE(mentions("args.size") && mentions("as new as the header")) << normjit_last_error();
}

// normjit_*_init(p) is the sized init with the caller's sizeof: it writes the caller's struct
// and nothing past it. A program built against an older, shorter header keeps the bytes after
// its struct (the library function the macro replaced wrote this library's sizeof, overrunning
// it); one built against a newer, longer header gets zeros in the fields this library does not
// know, which the library's calls then accept.
TEST(CStructs, SizedInitWritesTheCallersStructAndNothingPastIt) {
  const auto check = [](const char* name, size_t older, size_t ours, void (*init)(void*, size_t)) {
    for (size_t size : {older, ours, ours + 16}) {
      alignas(16) unsigned char bytes[512];
      std::memset(bytes, 0xab, sizeof bytes);
      init(bytes, size);
      size_t got = 0;
      std::memcpy(&got, bytes, sizeof got);
      EXPECT_EQ(got, size) << name;
      for (size_t i = size; i < sizeof bytes; ++i) {
        ASSERT_EQ(bytes[i], 0xab) << name << " of " << size << " bytes: byte " << i << " written";
      }
      for (size_t i = ours; i < size; ++i) {
        ASSERT_EQ(bytes[i], 0) << name << " of " << size << " bytes: byte " << i << " not zero";
      }
    }
  };
  check("normjit_launch_args", offsetof(normjit_launch_args, residual_out_strides),
        sizeof(normjit_launch_args), [](void* p, size_t n) {
          normjit_launch_args_init_sized(static_cast<normjit_launch_args*>(p), n);
        });
  check("normjit_backward_args", offsetof(normjit_backward_args, dresidual_out),
        sizeof(normjit_backward_args), [](void* p, size_t n) {
          normjit_backward_args_init_sized(static_cast<normjit_backward_args*>(p), n);
        });
  check("normjit_engine_config", offsetof(normjit_engine_config, prewarm),
        sizeof(normjit_engine_config), [](void* p, size_t n) {
          normjit_engine_config_init_sized(static_cast<normjit_engine_config*>(p), n);
        });
  check("normjit_engine_stats", offsetof(normjit_engine_stats, bad_entries),
        sizeof(normjit_engine_stats), [](void* p, size_t n) {
          normjit_engine_stats_init_sized(static_cast<normjit_engine_stats*>(p), n);
        });
  // The defaults of the fields a shorter struct has, and the macro's size is the caller's.
  alignas(16) unsigned char older[offsetof(normjit_launch_args, residual_out_strides)];
  normjit_launch_args_init_sized(reinterpret_cast<normjit_launch_args*>(older), sizeof older);
  double eps = 0;
  int64_t inner_rows = 0;
  std::memcpy(&eps, older + offsetof(normjit_launch_args, eps), sizeof eps);
  std::memcpy(&inner_rows, older + offsetof(normjit_launch_args, inner_rows), sizeof inner_rows);
  EXPECT_EQ(eps, 1e-5);
  EXPECT_EQ(inner_rows, 1);
  normjit_launch_args a;
  normjit_launch_args_init(&a);
  EXPECT_EQ(a.size, sizeof a);
}

// ndim's range is the rank a spec takes (it said 1 to 64, then refused a rank of 9 as a shape).
TEST(CLaunchArgs, NdimIsBoundedByTheRankASpecTakes) {
  normjit_engine_options o;
  normjit_engine_options_init(&o);
  o.memory_only = 1;
  normjit_engine* engine = nullptr;
  ASSERT_EQ(normjit_engine_create(&o, &engine), NORMJIT_OK) << normjit_last_error();
  const int64_t shape[9] = {2, 2, 2, 2, 2, 2, 2, 2, 2};
  char x[64];
  for (int ndim : {0, 9, 65}) {
    EXPECT_EQ(normjit_rmsnorm(engine, x, x, nullptr, shape, ndim, 1, NORMJIT_F32, 1e-5, nullptr),
              NORMJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(
        mentions(("invalid ndim " + std::to_string(ndim) + ": must be between 1 and 8").c_str()))
        << normjit_last_error();
  }
  normjit_engine_destroy(engine);
}

TEST(CLaunchArgs, Fp8IsAnOutputDtypeOnly) {
  normjit_engine_options o;
  normjit_engine_options_init(&o);
  o.memory_only = 1;
  normjit_engine* engine = nullptr;
  ASSERT_EQ(normjit_engine_create(&o, &engine), NORMJIT_OK) << normjit_last_error();
  const int64_t shape[] = {8, 4096};
  char x[64];
  EXPECT_EQ(normjit_rmsnorm(engine, x, x, nullptr, shape, 2, 1, NORMJIT_E4M3, 1e-5, nullptr),
            NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid dtype 3 (e4m3)") && mentions("output dtype only"))
      << normjit_last_error();
  EXPECT_EQ(
      normjit_layernorm(engine, x, x, nullptr, nullptr, shape, 2, 1, NORMJIT_E5M2, 1e-5, nullptr),
      NORMJIT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("invalid dtype 4 (e5m2)")) << normjit_last_error();
  normjit_engine_destroy(engine);
}

}  // namespace
}  // namespace normjit
