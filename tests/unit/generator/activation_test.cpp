// The activation axis (issue 19): activation=none|silu|gelu in the canonical text (left out at
// its default, so today's specs keep their text and cache keys), what it refuses (each error
// naming the argument and its value), and what it makes of the plan and of the configuration
// emit writes: the same strategy and launch shape as without, one named constant more, and the
// same kernel for every op and form.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "generator/emit.hpp"
#include "generator/plan.hpp"
#include "generator/target.hpp"
#include "normjit/error.hpp"
#include "normjit/spec.hpp"

namespace normjit {
namespace {

constexpr size_t npos = std::string::npos;

bool has(const std::string& text, const std::string& word) { return text.find(word) != npos; }

// The error that parse(text) throws; fails when it throws none.
Error refusal(const std::string& text) {
  try {
    NormSpec::parse(text);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << text;
  return Error(ErrorCode::kInternal, "");
}

// One spec of every op and form.
const std::vector<std::string> kForms = {
    "op=rmsnorm shape=4,4096 dtype=bf16 normalized_dims=1 affine=weight eps=1e-06",
    "op=rmsnorm shape=2,64,33,17 dtype=f16 affine=weight eps=1e-05",
    "op=layernorm shape=8,2048 dtype=f16 normalized_dims=1 affine=both eps=1e-05",
    "op=layernorm shape=2,96,14,14 dtype=bf16 normalized_dims=0 affine=both eps=1e-06",
    "op=groupnorm shape=2,320,64,64 dtype=f16 groups=32 affine=both eps=1e-05",
    "op=groupnorm shape=3,96,7,9 dtype=f32 groups=8 affine=none eps=1e-05",
};

// The configuration's kActivation line for an activation named as the spec names it.
std::string activation_line(const std::string& name) {
  const std::string constant = name == "silu" ? "kSilu" : name == "gelu" ? "kGelu" : "kNone";
  return "static constexpr normjit::Activation kActivation = normjit::Activation::" + constant +
         ";";
}

// The same launch as the plan without the activation: strategy, CTA, vectors, split.
void expect_same_launch(const KernelPlan& p, const KernelPlan& plain, const std::string& what) {
  EXPECT_EQ(p.strategy, plain.strategy) << what;
  EXPECT_EQ(p.block_x, plain.block_x) << what;
  EXPECT_EQ(p.block_y, plain.block_y) << what;
  EXPECT_EQ(p.vec, plain.vec) << what;
  EXPECT_EQ(p.vectors, plain.vectors) << what;
  EXPECT_EQ(p.split_chunks, plain.split_chunks) << what;
  EXPECT_EQ(p.smem_bytes, plain.smem_bytes) << what;
}

TEST(ActivationSpec, NamesParseAndPrintBack) {
  for (Activation a : {Activation::kNone, Activation::kSilu, Activation::kGelu}) {
    EXPECT_EQ(parse_activation(to_string(a)), a) << to_string(a);
  }
  EXPECT_STREQ(to_string(Activation::kNone), "none");
  EXPECT_STREQ(to_string(Activation::kSilu), "silu");
  EXPECT_STREQ(to_string(Activation::kGelu), "gelu");
}

TEST(ActivationSpec, DefaultNoneIsLeftOutOfTheText) {
  for (const std::string& text : kForms) {
    const NormSpec plain = NormSpec::parse(text);
    EXPECT_EQ(plain.activation, Activation::kNone) << text;
    EXPECT_EQ(plain.to_string(), text) << "today's text, and so today's cache key";
    const NormSpec given = NormSpec::parse(text + " activation=none");
    EXPECT_EQ(given, plain) << text;
    EXPECT_EQ(given.to_string(), text);
    EXPECT_FALSE(has(given.to_string(), "activation")) << given.to_string();
  }
  SpecFields f;
  f.op = Op::kGroupNorm;
  f.shape = std::vector<int64_t>{2, 320, 64, 64};
  f.groups = 32;
  f.activation = Activation::kNone;
  EXPECT_EQ(NormSpec::from_fields(f).to_string(),
            "op=groupnorm shape=2,320,64,64 dtype=f32 groups=32 affine=both eps=1e-05");
}

TEST(ActivationSpec, EveryOpAndFormTakesEachActivationAndRoundTrips) {
  for (const std::string& text : kForms) {
    for (const char* name : {"silu", "gelu"}) {
      const NormSpec s = NormSpec::parse(text + " activation=" + name);
      EXPECT_EQ(s.activation, parse_activation(name));
      EXPECT_EQ(s.to_string(), text + " activation=" + name);
      EXPECT_EQ(NormSpec::parse(s.to_string()), s) << s.to_string();
      EXPECT_NE(s, NormSpec::parse(text)) << "another kernel: " << s.to_string();
    }
    EXPECT_NE(NormSpec::parse(text + " activation=silu"),
              NormSpec::parse(text + " activation=gelu"));
  }
}

// The key comes after weight_offset and before save_stats (the order of the computation: the
// affine step, its offset, then the activation), whatever order it is given in.
TEST(ActivationSpec, KeyIsWrittenAfterTheWeightOffsetAndBeforeSaveStats) {
  const NormSpec all = NormSpec::parse(
      "save_stats=true activation=gelu weight_offset=1 residual=bf16 out_dtype=e4m3 "
      "param_dtype=f32 affine=weight normalized_dims=1 dtype=bf16 shape=4,4096 op=rmsnorm");
  EXPECT_EQ(all.to_string(),
            "op=rmsnorm shape=4,4096 dtype=bf16 normalized_dims=1 affine=weight eps=1e-05 "
            "param_dtype=f32 out_dtype=e4m3 residual=bf16 weight_offset=1 activation=gelu "
            "save_stats=true");
  EXPECT_EQ(NormSpec::parse(all.to_string()), all);
  const NormSpec gn = NormSpec::parse(
      "op=groupnorm shape=2,64,8,8 groups=8 dtype=f16 out_dtype=e5m2 param_dtype=f32 "
      "activation=silu save_stats=true");
  EXPECT_EQ(gn.to_string(),
            "op=groupnorm shape=2,64,8,8 dtype=f16 groups=8 affine=both eps=1e-05 "
            "param_dtype=f32 out_dtype=e5m2 activation=silu save_stats=true");
}

// Every combination with the other axes that validates round-trips, with the key written
// exactly when the activation is not none.
TEST(ActivationSpec, CombinesWithTheOtherAxes) {
  int valid = 0;
  for (const std::string& base : kForms) {
    for (const char* extra :
         {"", " out_dtype=e4m3", " param_dtype=f32", " residual=f32", " weight_offset=1",
          " save_stats=true",
          " param_dtype=f32 out_dtype=e5m2 weight_offset=0.5 save_stats=true"}) {
      for (const char* name : {"none", "silu", "gelu"}) {
        NormSpec s;
        try {
          s = NormSpec::parse(base + extra + " activation=" + name);
        } catch (const Error& e) {
          // Only what the other axes refuse without an activation (residual on the channel and
          // group forms, a weight offset or param dtype without parameters).
          EXPECT_THROW(NormSpec::parse(base + extra), Error) << base << extra << ": " << e.what();
          continue;
        }
        ++valid;
        EXPECT_EQ(NormSpec::parse(s.to_string()), s) << s.to_string();
        EXPECT_EQ(has(s.to_string(), " activation="), std::string(name) != "none");
        NormSpec without = s;
        without.activation = Activation::kNone;
        EXPECT_EQ(without, NormSpec::parse(base + extra)) << s.to_string();
      }
    }
  }
  EXPECT_GT(valid, 90);
}

TEST(ActivationSpec, BadValuesNameTheKeyAndValue) {
  const std::string rms = "op=rmsnorm shape=4,4096 normalized_dims=1 ";
  struct Case {
    std::string text;
    std::vector<std::string> mentions;
  };
  for (const Case& c : std::vector<Case>{
           {rms + "activation=relu", {"activation 'relu'", "none, silu, gelu"}},
           {rms + "activation=SiLU", {"activation 'SiLU'", "none, silu, gelu"}},
           {rms + "activation=", {"activation ''", "none, silu, gelu"}},
           {rms + "activation=gelu_tanh", {"activation 'gelu_tanh'"}},
           {rms + "activation=silu activation=silu", {"activation", "twice"}},
       }) {
    const Error e = refusal(c.text);
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << c.text << ": " << e.what();
    for (const std::string& m : c.mentions) {
      EXPECT_TRUE(has(e.what(), m)) << c.text << "\n  names " << m << ": " << e.what();
    }
  }
  // The unknown-key message lists it with the others.
  const Error unknown = refusal("op=rmsnorm shape=2,64 act=silu");
  EXPECT_TRUE(has(unknown.what(), "activation")) << unknown.what();
  // parse_activation names the argument it is given (a flag, a manifest field).
  try {
    parse_activation("swish", "--activation");
    ADD_FAILURE() << "accepted swish";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "--activation 'swish'")) << e.what();
  }
}

// backward=true with an activation: the kernel of the forward's norm + activation. The spec
// keeps the activation in its text (its own cache key), and refuses nothing it took without.
TEST(ActivationSpec, BackwardTakesEachActivationWithItsOwnText) {
  for (const std::string& text : kForms) {
    const NormSpec plain = NormSpec::parse(text + " backward=true");
    for (const char* name : {"silu", "gelu"}) {
      const NormSpec s = NormSpec::parse(text + " activation=" + name + " backward=true");
      EXPECT_TRUE(s.backward);
      EXPECT_EQ(s.activation, parse_activation(name));
      EXPECT_TRUE(has(s.to_string(), std::string(" activation=") + name + " backward=true"))
          << s.to_string();
      EXPECT_EQ(NormSpec::parse(s.to_string()), s) << s.to_string();
      EXPECT_NE(s.to_string(), plain.to_string());
    }
  }
  // With the other backward axes (a residual, the weight offset, f32 parameters, channels last).
  EXPECT_NO_THROW(NormSpec::parse(
      "op=layernorm shape=16,1000 dtype=bf16 residual=bf16 weight_offset=1 param_dtype=f32 "
      "activation=silu backward=true"));
  EXPECT_NO_THROW(NormSpec::parse(
      "op=groupnorm shape=2,320,8,8 dtype=bf16 groups=32 layout=nhwc activation=gelu "
      "backward=true"));
  // none is no activation: the same spec as without.
  EXPECT_EQ(NormSpec::parse("op=layernorm shape=16,1000 activation=none backward=true"),
            NormSpec::parse("op=layernorm shape=16,1000 backward=true"));
}

// Every backward strategy takes the activation: the same plan as without (strategy, launch
// shape, vectors, workspace), a note naming the derivative, and a configuration whose
// kActivation names it (the plain backward's: kNone).
TEST(ActivationPlan, BackwardKeepsThePlanAndNamesTheActivation) {
  const Target target = Target::parse("sm_90");
  const std::vector<std::pair<std::string, Strategy>> cases = {
      {"op=layernorm shape=64,4096 dtype=bf16 affine=both", Strategy::kRowBackward},
      {"op=layernorm shape=4,16384 dtype=bf16 affine=both", Strategy::kRowBackward},
      {"op=layernorm shape=2,1048576 dtype=f32 affine=both", Strategy::kRowSplitBackward},
      {"op=groupnorm shape=2,320,64,64 dtype=bf16 groups=32", Strategy::kGroupBackward},
      {"op=groupnorm shape=2,320,64,64 dtype=bf16 groups=32 layout=nhwc",
       Strategy::kGroupNhwcBackward},
      {"op=layernorm shape=32,768,56,56 dtype=bf16 normalized_dims=0", Strategy::kChannelsBackward},
      {"op=layernorm shape=32,768,56,56 dtype=bf16 normalized_dims=0 layout=nhwc",
       Strategy::kRowBackward},
  };
  for (const auto& [text, strategy] : cases) {
    const KernelPlan plain = plan(NormSpec::parse(text + " backward=true"), target);
    ASSERT_EQ(plain.strategy, strategy) << text;
    const EmittedKernel plain_source = emit(plain);
    EXPECT_TRUE(has(plain_source.source, activation_line("none"))) << plain_source.source;
    for (const char* name : {"silu", "gelu"}) {
      const KernelPlan p =
          plan(NormSpec::parse(text + " activation=" + name + " backward=true"), target);
      EXPECT_EQ(p.strategy, strategy) << text << " " << name;
      expect_same_launch(p, plain, text + " " + name);
      EXPECT_EQ(p.workspace_floats(300), plain.workspace_floats(300)) << text;
      EXPECT_TRUE(has(p.why, std::string("dy taken through ") + name + "'s derivative")) << p.why;
      EXPECT_FALSE(has(p.why, "applied to y")) << p.why;
      const EmittedKernel e = emit(p);
      EXPECT_TRUE(has(e.source, activation_line(name))) << e.source;
      EXPECT_NE(e.kernel, plain_source.kernel);
    }
  }
}

// The row backward with an activation in CTAs of 256 threads is bounded to 2 CTAs an SM (128
// registers: unbounded, ptxas took 168-169 for bf16 rows of 768-2048 and the SM held one), as
// the plain kernel's registers let it hold; the plain kernel and CTAs of 512 threads (already at
// 128) stay unbounded.
TEST(ActivationPlan, RowBackwardWithAnActivationIsBoundedToTwoCtasAnSm) {
  const Target target = Target::parse("sm_90");
  for (const char* text : {"op=layernorm shape=64,768 dtype=bf16 affine=both",
                           "op=layernorm shape=64,2048 dtype=bf16 affine=both",
                           "op=rmsnorm shape=64,1000 dtype=f16 affine=weight",
                           "op=layernorm shape=32,768,56,56 dtype=bf16 normalized_dims=0 "
                           "layout=nhwc"}) {
    const KernelPlan plain = plan(NormSpec::parse(std::string(text) + " backward=true"), target);
    ASSERT_EQ(plain.strategy, Strategy::kRowBackward) << text;
    ASSERT_EQ(plain.block_x * plain.block_y, 256) << text;
    EXPECT_EQ(plain.min_blocks_per_sm, 0) << text;
    EXPECT_TRUE(has(emit(plain).source, "static constexpr int kMinBlocksPerSm = 0;")) << text;
    const KernelPlan act =
        plan(NormSpec::parse(std::string(text) + " activation=gelu backward=true"), target);
    EXPECT_EQ(act.min_blocks_per_sm, 2) << text;
    EXPECT_TRUE(has(emit(act).source, "static constexpr int kMinBlocksPerSm = 2;")) << text;
    EXPECT_TRUE(has(act.why, "launch bounds of 2 CTAs an SM")) << act.why;
  }
  const KernelPlan wide =
      plan(NormSpec::parse("op=layernorm shape=64,4096 dtype=bf16 affine=both activation=silu "
                           "backward=true"),
           target);
  EXPECT_EQ(wide.block_x * wide.block_y, 512);
  EXPECT_EQ(wide.min_blocks_per_sm, 0);
}

// validate() checks a struct built by hand (the C++ API): an enum value outside the three.
TEST(ActivationSpec, ValidateRefusesAnUnknownEnumValue) {
  NormSpec s = NormSpec::parse(kForms[0]);
  s.activation = static_cast<Activation>(7);
  try {
    s.validate();
    ADD_FAILURE() << "accepted activation 7";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(has(e.what(), "activation 7")) << e.what();
  }
  s.activation = Activation::kGelu;
  EXPECT_NO_THROW(s.validate());
}

// The plan is the plan without the activation (strategy, launch shape, vectors), with a note
// saying it is applied in the same pass; the configuration has one more named constant, and
// its name says which activation.
TEST(ActivationPlan, SameStrategyAndShapeAndOneNamedConstant) {
  for (const char* arch : {"sm_90", "sm_80"}) {
    const Target target = Target::parse(arch);
    for (const std::string& text : kForms) {
      const KernelPlan plain = plan(NormSpec::parse(text), target);
      const EmittedKernel plain_source = emit(plain);
      EXPECT_TRUE(has(plain_source.source, activation_line("none"))) << plain_source.source;
      for (const char* name : {"silu", "gelu"}) {
        const KernelPlan p = plan(NormSpec::parse(text + " activation=" + name), target);
        expect_same_launch(p, plain, text + " " + name);
        EXPECT_EQ(p.problem.activation, parse_activation(name));
        EXPECT_TRUE(has(p.why, std::string(name) + " applied to y in the same pass")) << p.why;
        const EmittedKernel e = emit(p);
        EXPECT_TRUE(has(e.source, activation_line(name))) << e.source;
        EXPECT_TRUE(has(e.kernel, std::string("_") + name + ">")) << e.kernel;
        EXPECT_NE(e.source, plain_source.source);
        EXPECT_EQ(e.source.find("template __global__"), e.source.rfind("template __global__"))
            << "one kernel: " << e.source;
      }
    }
  }
}

}  // namespace
}  // namespace normjit
