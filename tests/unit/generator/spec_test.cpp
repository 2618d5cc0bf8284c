#include "normjit/spec.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "normjit/error.hpp"

namespace normjit {
namespace {

constexpr size_t npos = std::string::npos;

// The message of the Error that `body` throws, checking its code.
template <class F>
std::string error_of(F&& body, ErrorCode code = ErrorCode::kInvalidArgument) {
  try {
    body();
  } catch (const Error& e) {
    EXPECT_EQ(int(e.code()), int(code)) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

TEST(Spec, DefaultsFollowThePyTorchModules) {
  SpecFields f;
  f.op = Op::kRmsNorm;
  f.shape = std::vector<int64_t>{112, 64, 512, 512};
  NormSpec rms = NormSpec::from_fields(f);
  EXPECT_TRUE(rms.channel_form());
  EXPECT_EQ(rms.affine, Affine::kNone);
  EXPECT_EQ(rms.dtype, Dtype::kF32);
  EXPECT_DOUBLE_EQ(rms.eps, 1e-5);
  EXPECT_EQ(rms.batch(), 112);
  EXPECT_EQ(rms.row_length(), 64);
  EXPECT_EQ(rms.spatial(), 512 * 512);

  f.op = Op::kLayerNorm;
  f.shape = std::vector<int64_t>{16, 64, 256, 256};
  NormSpec ln = NormSpec::from_fields(f);
  EXPECT_EQ(ln.normalized_dims, 3);
  EXPECT_EQ(ln.affine, Affine::kBoth);
  EXPECT_EQ(ln.batch(), 16);
  EXPECT_EQ(ln.row_length(), 64 * 256 * 256);

  f.op = Op::kGroupNorm;
  f.shape = std::vector<int64_t>{112, 64, 512, 512};
  f.groups = 8;
  NormSpec gn = NormSpec::from_fields(f);
  EXPECT_EQ(gn.affine, Affine::kBoth);
  EXPECT_EQ(gn.row_length(), 8 * 512 * 512);
  EXPECT_EQ(gn.param_elements(), 64);
}

TEST(Spec, CanonicalTextRoundTrips) {
  for (const char* text :
       {"op=rmsnorm shape=112,64,512,512 dtype=f32 affine=none eps=1e-05",
        "op=rmsnorm shape=4,4096 dtype=bf16 normalized_dims=1 affine=weight eps=1e-06",
        "op=layernorm shape=16,64,256,256 dtype=f16 normalized_dims=3 affine=both eps=1e-05",
        "op=layernorm shape=2,96,56,56 dtype=f32 normalized_dims=0 affine=both eps=1e-06",
        "op=groupnorm shape=112,64,512,512 dtype=f32 groups=8 affine=both eps=0.001"}) {
    const NormSpec spec = NormSpec::parse(text);
    EXPECT_EQ(spec.to_string(), text);
    EXPECT_EQ(NormSpec::parse(spec.to_string()), spec);
  }
  // Any order of key=value words gives the same spec.
  EXPECT_EQ(NormSpec::parse("dtype=f16 shape=2,8 op=layernorm"),
            NormSpec::parse("op=layernorm shape=2,8 dtype=f16"));
}

TEST(Spec, LayerNormChannelFormNormalizesDimOneWithParametersOfC) {
  // ConvNeXt's and SAM's LayerNorm2d: [N, C, *spatial] over C, weight and bias [C].
  for (const char* text : {"op=layernorm shape=2,96,56,56 normalized_dims=0",
                           "op=layernorm shape=1,256,64,64 normalized_dims=0 dtype=bf16",
                           "op=layernorm shape=2,8,3,5,7 normalized_dims=0 affine=weight",
                           "op=layernorm shape=4,1 normalized_dims=0"}) {
    const NormSpec spec = NormSpec::parse(text);
    EXPECT_TRUE(spec.channel_form()) << text;
    EXPECT_EQ(spec.batch(), spec.shape[0]) << text;
    EXPECT_EQ(spec.row_length(), spec.shape[1]) << text;
    EXPECT_EQ(spec.param_elements(), spec.affine == Affine::kNone ? 0 : spec.shape[1]) << text;
    // The canonical text spells normalized_dims=0 out: layernorm's default is all but dim 0.
    EXPECT_NE(spec.to_string().find(" normalized_dims=0 "), std::string::npos) << text;
    EXPECT_EQ(NormSpec::parse(spec.to_string()), spec) << text;
  }
  const NormSpec convnext = NormSpec::parse("op=layernorm shape=2,96,56,56 normalized_dims=0");
  EXPECT_EQ(convnext.spatial(), 56 * 56);
  EXPECT_EQ(convnext.affine, Affine::kBoth);
  EXPECT_NE(convnext, NormSpec::parse("op=layernorm shape=2,96,56,56"));
  // The same spec from fields (the CLI's and manifests' path).
  SpecFields f;
  f.op = Op::kLayerNorm;
  f.shape = std::vector<int64_t>{2, 96, 56, 56};
  f.normalized_dims = 0;
  EXPECT_EQ(NormSpec::from_fields(f), convnext);
  // With the variant axes the channel form has: parameter and output dtypes, statistics.
  const NormSpec variants = NormSpec::parse(
      "op=layernorm shape=2,64,9,9 dtype=bf16 normalized_dims=0 param_dtype=f32 out_dtype=e4m3 "
      "weight_offset=1 save_stats=true");
  EXPECT_EQ(NormSpec::parse(variants.to_string()), variants);
}

TEST(Spec, LayerNormChannelFormRefusesWhatItCannotBe) {
  // No channel dim.
  const std::string rank =
      error_of([] { NormSpec::parse("op=layernorm shape=8 normalized_dims=0"); });
  EXPECT_NE(rank.find("rank >= 2"), std::string::npos) << rank;
  EXPECT_NE(rank.find("layernorm"), std::string::npos) << rank;
  // No residual in the channel forms.
  const std::string residual =
      error_of([] { NormSpec::parse("op=layernorm shape=2,64,8 normalized_dims=0 residual=f32"); });
  EXPECT_NE(residual.find("channel form"), std::string::npos) << residual;
  // Its backward kernel exists (channels_backward.cuh): the axis is taken.
  EXPECT_TRUE(
      NormSpec::parse("op=layernorm shape=2,64,8 normalized_dims=0 backward=true").backward);
  // Groups are groupnorm's.
  const std::string groups =
      error_of([] { NormSpec::parse("op=layernorm shape=2,64,8 normalized_dims=0 groups=4"); });
  EXPECT_NE(groups.find("groups"), std::string::npos) << groups;
}

// validate() checks every enum field of a struct built by hand (the C++ API), first: a dtype
// past the last used to reach a division by its size, an op or affine past the last to plan or
// compile ('op=?').
TEST(Spec, ValidateRefusesEveryEnumValueOutOfRangeNamingTheField) {
  const NormSpec base = NormSpec::parse("op=rmsnorm shape=8,64 normalized_dims=1 affine=weight");
  ASSERT_NO_THROW(base.validate());
  const std::vector<std::pair<std::string, std::function<void(NormSpec&, int)>>> fields = {
      {"op", [](NormSpec& s, int v) { s.op = static_cast<Op>(v); }},
      {"dtype", [](NormSpec& s, int v) { s.dtype = static_cast<Dtype>(v); }},
      {"affine", [](NormSpec& s, int v) { s.affine = static_cast<Affine>(v); }},
      {"layout", [](NormSpec& s, int v) { s.layout = static_cast<Layout>(v); }},
      {"activation", [](NormSpec& s, int v) { s.activation = static_cast<Activation>(v); }},
      {"param_dtype", [](NormSpec& s, int v) { s.param_dtype = static_cast<Dtype>(v); }},
      {"out_dtype", [](NormSpec& s, int v) { s.out_dtype = static_cast<Dtype>(v); }},
      {"residual", [](NormSpec& s, int v) { s.residual = static_cast<Dtype>(v); }}};
  for (const auto& [field, set] : fields) {
    for (int bad : {-1, 9}) {
      NormSpec s = base;
      set(s, bad);
      const std::string e = error_of([&] { s.validate(); });
      EXPECT_NE(e.find("invalid " + field + " " + std::to_string(bad) + ": expected one of"),
                std::string::npos)
          << field << " " << bad << ": " << e;
    }
  }
}

TEST(Spec, BadInputNamesTheArgumentAndValue) {
  EXPECT_NE(error_of([] { NormSpec::parse("op=softmax shape=2,3"); }).find("op 'softmax'"),
            std::string::npos);
  EXPECT_NE(error_of([] { NormSpec::parse("op=rmsnorm shape=2,0,3"); }).find("dimension 1 is 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { NormSpec::parse("op=rmsnorm shape=2,-4"); }).find("-4"),
            std::string::npos);
  EXPECT_NE(error_of([] { NormSpec::parse("op=rmsnorm shape=2,x3"); }).find("shape"),
            std::string::npos);
  EXPECT_NE(error_of([] { NormSpec::parse("op=rmsnorm shape=2,3 dtype=f64"); }).find("dtype 'f64'"),
            std::string::npos);
  EXPECT_NE(error_of([] { NormSpec::parse("op=rmsnorm shape=2,3 eps=0"); }).find("eps 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { NormSpec::parse("op=rmsnorm shape=2,3 eps=nan"); }).find("eps"),
            std::string::npos);
  EXPECT_NE(error_of([] { NormSpec::parse("op=groupnorm shape=2,6,4 groups=4"); }).find("groups 4"),
            std::string::npos);
  EXPECT_NE(error_of([] { NormSpec::parse("op=groupnorm shape=2,6,4"); }).find("groups"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              NormSpec::parse("op=layernorm shape=2,6 normalized_dims=3");
            }).find("normalized_dims 3"),
            std::string::npos);
  EXPECT_NE(error_of([] { NormSpec::parse("op=rmsnorm shape=8 affine=none"); }).find("rank"),
            std::string::npos);
  EXPECT_NE(error_of([] { NormSpec::parse("op=rmsnorm shape=2,3 affine=both"); }).find("bias"),
            std::string::npos);
  EXPECT_NE(error_of([] { NormSpec::parse("op=rmsnorm shape=2,3 colour=red"); }).find("colour"),
            std::string::npos);
  EXPECT_NE(error_of([] { NormSpec::parse("op=rmsnorm shape=1,1,1,1,1,1,1,1,1"); }).find("rank 9"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { NormSpec::parse("op=rmsnorm shape=4294967296,4294967296"); }).find("2^62"),
      std::string::npos);
}

TEST(Spec, EveryNumberIsParsedWholeOrRefusedNamingTheKey) {
  // normalized_dims=4294967297 was wrapped to 1 by an int cast.
  const std::string wrapped =
      error_of([] { NormSpec::parse("op=rmsnorm shape=2,64 normalized_dims=4294967297"); });
  EXPECT_NE(wrapped.find("normalized_dims '4294967297'"), std::string::npos) << wrapped;
  EXPECT_NE(wrapped.find("out of range"), std::string::npos) << wrapped;
  // Past int64 is "out of range", not "not an integer" (the number is a number).
  for (const char* text : {"op=rmsnorm shape=2,99999999999999999999",
                           "op=groupnorm shape=2,64 groups=99999999999999999999"}) {
    const std::string e = error_of([&] { NormSpec::parse(text); });
    EXPECT_NE(e.find("'99999999999999999999'"), std::string::npos) << e;
    EXPECT_NE(e.find("64-bit integer range"), std::string::npos) << e;
  }
  // Hex, signs, exponents and trailing text are not decimal integers.
  for (const char* text :
       {"op=rmsnorm shape=2,0x10", "op=rmsnorm shape=2,+64", "op=rmsnorm shape=2,64 groups=1e3",
        "op=rmsnorm shape=2,64 normalized_dims=1x", "op=rmsnorm shape=2,64 normalized_dims="}) {
    EXPECT_NE(error_of([&] { NormSpec::parse(text); }).find("not"), std::string::npos) << text;
  }
  EXPECT_EQ(parse_integer("-12", "n", -100, 100), -12);
  EXPECT_NE(error_of([] { parse_integer("101", "--n", -100, 100); }).find("--n '101'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_integer(" 1", "--n", -100, 100); }).find("--n ' 1'"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(parse_number("1e-5", "eps"), 1e-5);
  for (const char* text : {"nan", "inf", "-inf", "infinity", "0x1p-3", "1e-5x", "", " 1"}) {
    const std::string e = error_of([&] { parse_number(text, "--eps"); });
    EXPECT_NE(e.find(std::string("--eps '") + text + "'"), std::string::npos) << e;
  }
}

TEST(Spec, ShapeSeparatorIsTheCommaOnly) {
  // "8x64" used to parse as 8,64: an undocumented second separator.
  const std::string e = error_of([] { NormSpec::parse("op=rmsnorm shape=8x64"); });
  EXPECT_NE(e.find("shape '8x64'"), std::string::npos) << e;
  EXPECT_EQ(parse_shape("8,64"), (std::vector<int64_t>{8, 64}));
  // The rank is refused from the commas, before a million sizes are stored.
  std::string many = "1";
  for (int i = 0; i < 1000000; ++i) many += ",1";
  const std::string rank = error_of([&] { parse_shape(many); });
  EXPECT_NE(rank.find("rank 1000001"), std::string::npos) << rank.substr(0, 300);
  EXPECT_LT(rank.size(), 400u) << "quotes an excerpt, not the whole value";
}

TEST(Spec, EpsMustBeANormalFloat) {
  // The kernel takes eps as a float: these become inf, 0 or a denormal there.
  for (const char* eps : {"1e300", "1e-300", "1e-40", "3.5e38", "-1", "0", "-0"}) {
    const std::string e =
        error_of([&] { NormSpec::parse(std::string("op=rmsnorm shape=2,64 eps=") + eps); });
    EXPECT_NE(e.find("eps"), std::string::npos) << eps << ": " << e;
    EXPECT_NE(e.find("float"), std::string::npos) << eps << " says why: " << e;
  }
  for (const char* eps : {"1.2e-38", "1e-5", "3.4e38"}) {
    EXPECT_NO_THROW(NormSpec::parse(std::string("op=rmsnorm shape=2,64 eps=") + eps)) << eps;
  }
  SpecFields f;
  f.op = Op::kRmsNorm;
  f.shape = std::vector<int64_t>{2, 64};
  f.eps = 1e-300;
  EXPECT_NE(error_of([&] { NormSpec::from_fields(f); }).find("eps 1e-300"), std::string::npos);
}

TEST(Spec, RepeatedKeyIsAnError) {
  // The last value used to win silently.
  for (const char* text : {"op=rmsnorm shape=2,64 op=layernorm", "op=rmsnorm shape=2,64 shape=2,64",
                           "op=rmsnorm shape=2,64 eps=1e-5 eps=1e-6"}) {
    const std::string e = error_of([&] { NormSpec::parse(text); });
    EXPECT_NE(e.find("twice"), std::string::npos) << text << ": " << e;
  }
}

TEST(Spec, ErrorsQuoteAShortExcerptOnOneLine) {
  const std::string huge(10 << 20, 'a');
  for (const std::string& text :
       {"op=" + huge + " shape=2,64", "op=rmsnorm shape=2,64 " + huge,
        "op=rmsnorm shape=2,64 " + huge + "=1", "op=rmsnorm shape=2," + huge}) {
    const std::string e = error_of([&] { NormSpec::parse(text); });
    EXPECT_LT(e.size(), 600u) << e.substr(0, 600);
    EXPECT_NE(e.find("10485760 bytes"), std::string::npos) << "says how long: " << e;
  }
  // Words are split at spaces, tabs and newlines; other control bytes are shown escaped.
  const std::string e = error_of([] { NormSpec::parse("op=rms\rnorm\x01 shape=2,64"); });
  EXPECT_EQ(e.find_first_of("\r\x01"), std::string::npos) << e;
  EXPECT_NE(e.find("'rms\\rnorm\\x01'"), std::string::npos) << e;
  const std::string flag = error_of([] { parse_op("rms\nnorm", "--op"); });
  EXPECT_NE(flag.find("--op 'rms\\nnorm'"), std::string::npos) << flag;

  EXPECT_EQ(quoted_excerpt("sm_90"), "'sm_90'");
  EXPECT_EQ(excerpt("a\tb"), "a\\tb");
  EXPECT_EQ(quoted_excerpt(std::string(100, 'x'), 4), "'xxxx...' (100 bytes)");
  // A cut never splits a UTF-8 sequence: "é" is two bytes.
  EXPECT_EQ(excerpt("aé", 2), "a... (3 bytes)");
}

// ---------------------------------------------------------------------------------------
// The variant axes (issue 18): param_dtype, out_dtype, residual, weight_offset, save_stats.

SpecFields trailing_rms(Dtype dtype) {
  SpecFields f;
  f.op = Op::kRmsNorm;
  f.shape = std::vector<int64_t>{4, 4096};
  f.normalized_dims = 1;
  f.affine = Affine::kWeight;
  f.dtype = dtype;
  return f;
}

TEST(SpecVariant, DefaultsGiveThePlainKernel) {
  for (const char* text : {"op=rmsnorm shape=112,64,512,512", "op=layernorm shape=16,64,256,256",
                           "op=groupnorm shape=112,64,512,512 groups=8 dtype=bf16"}) {
    const NormSpec spec = NormSpec::parse(text);
    EXPECT_FALSE(spec.param_dtype) << text;
    EXPECT_FALSE(spec.out_dtype) << text;
    EXPECT_FALSE(spec.residual) << text;
    EXPECT_EQ(spec.weight_offset, 0.0) << text;
    EXPECT_FALSE(spec.save_stats) << text;
    EXPECT_EQ(spec.param_type(), spec.dtype) << text;
    EXPECT_EQ(spec.out_type(), spec.dtype) << text;
  }
}

// The cache key and every message of today's specs depend on this text: it must not change.
TEST(SpecVariant, TodaysCanonicalTextIsUnchanged) {
  SpecFields f;
  f.op = Op::kRmsNorm;
  f.shape = std::vector<int64_t>{112, 64, 512, 512};
  EXPECT_EQ(NormSpec::from_fields(f).to_string(),
            "op=rmsnorm shape=112,64,512,512 dtype=f32 affine=none eps=1e-05");
  f.op = Op::kLayerNorm;
  f.shape = std::vector<int64_t>{16, 64, 256, 256};
  f.dtype = Dtype::kBF16;
  EXPECT_EQ(NormSpec::from_fields(f).to_string(),
            "op=layernorm shape=16,64,256,256 dtype=bf16 normalized_dims=3 affine=both eps=1e-05");
  f.op = Op::kGroupNorm;
  f.shape = std::vector<int64_t>{112, 64, 512, 512};
  f.groups = 8;
  f.dtype = Dtype::kF32;
  EXPECT_EQ(NormSpec::from_fields(f).to_string(),
            "op=groupnorm shape=112,64,512,512 dtype=f32 groups=8 affine=both eps=1e-05");
  EXPECT_EQ(NormSpec::from_fields(trailing_rms(Dtype::kF16)).to_string(),
            "op=rmsnorm shape=4,4096 dtype=f16 normalized_dims=1 affine=weight eps=1e-05");
  // Variant values equal to the defaults are the plain spec, text included.
  SpecFields same = trailing_rms(Dtype::kBF16);
  same.param_dtype = Dtype::kBF16;
  same.out_dtype = Dtype::kBF16;
  same.weight_offset = -0.0;
  same.save_stats = false;
  const NormSpec plain = NormSpec::from_fields(trailing_rms(Dtype::kBF16));
  const NormSpec given = NormSpec::from_fields(same);
  EXPECT_EQ(given.to_string(),
            "op=rmsnorm shape=4,4096 dtype=bf16 normalized_dims=1 affine=weight eps=1e-05");
  EXPECT_EQ(given, plain);
  EXPECT_FALSE(given.param_dtype) << "stored as the default: one canonical form";
  EXPECT_FALSE(given.out_dtype);
  EXPECT_FALSE(std::signbit(given.weight_offset));
}

TEST(SpecVariant, EachAxisHasItsKeyInOrder) {
  for (const char* text : {
           "op=rmsnorm shape=4,4096 dtype=bf16 normalized_dims=1 affine=weight eps=1e-06 "
           "param_dtype=f32",
           "op=layernorm shape=8,2048 dtype=f16 normalized_dims=1 affine=both eps=1e-05 "
           "param_dtype=bf16",
           "op=groupnorm shape=2,64,8,8 dtype=f32 groups=8 affine=both eps=1e-05 param_dtype=f16",
           "op=rmsnorm shape=4,4096 dtype=bf16 normalized_dims=1 affine=weight eps=1e-06 "
           "out_dtype=e4m3",
           "op=layernorm shape=8,2048 dtype=f16 normalized_dims=1 affine=both eps=1e-05 "
           "out_dtype=e5m2",
           "op=rmsnorm shape=2,64,32,32 dtype=f32 affine=none eps=1e-05 out_dtype=bf16",
           "op=groupnorm shape=2,64,8,8 dtype=bf16 groups=8 affine=none eps=1e-05 out_dtype=f32",
           "op=rmsnorm shape=4,4096 dtype=bf16 normalized_dims=1 affine=none eps=1e-06 "
           "residual=bf16",
           "op=layernorm shape=8,2048 dtype=f16 normalized_dims=1 affine=both eps=1e-05 "
           "residual=f32",
           "op=rmsnorm shape=4,4096 dtype=bf16 normalized_dims=1 affine=weight eps=1e-06 "
           "weight_offset=1",
           "op=layernorm shape=8,2048 dtype=f32 normalized_dims=1 affine=both eps=1e-05 "
           "weight_offset=-0.5",
           "op=groupnorm shape=2,64,8,8 dtype=f32 groups=8 affine=both eps=1e-05 "
           "weight_offset=0.1",
           "op=rmsnorm shape=2,64,32,32 dtype=f32 affine=none eps=1e-05 save_stats=true",
           "op=layernorm shape=8,2048 dtype=bf16 normalized_dims=1 affine=both eps=1e-05 "
           "save_stats=true",
           "op=groupnorm shape=2,64,8,8 dtype=f16 groups=8 affine=both eps=1e-05 save_stats=true",
           "op=rmsnorm shape=4,4096 dtype=bf16 normalized_dims=1 affine=weight eps=1e-06 "
           "param_dtype=f32 out_dtype=e4m3 residual=bf16 weight_offset=1 save_stats=true",
           "op=layernorm shape=3,5,7 dtype=f16 normalized_dims=2 affine=both eps=0.001 "
           "param_dtype=f32 out_dtype=e5m2 residual=f32 weight_offset=1 save_stats=true",
       }) {
    const NormSpec spec = NormSpec::parse(text);
    EXPECT_EQ(spec.to_string(), text);
    EXPECT_EQ(NormSpec::parse(spec.to_string()), spec) << text;
  }
  const NormSpec all = NormSpec::parse(
      "save_stats=true weight_offset=1 residual=bf16 out_dtype=e4m3 param_dtype=f32 "
      "affine=weight normalized_dims=1 dtype=bf16 shape=4,4096 op=rmsnorm");
  EXPECT_EQ(all.param_type(), Dtype::kF32);
  EXPECT_EQ(all.out_type(), Dtype::kE4M3);
  EXPECT_EQ(all.residual, Dtype::kBF16);
  EXPECT_EQ(all.weight_offset, 1.0);
  EXPECT_TRUE(all.save_stats);
  EXPECT_EQ(all.to_string(),
            "op=rmsnorm shape=4,4096 dtype=bf16 normalized_dims=1 affine=weight eps=1e-05 "
            "param_dtype=f32 out_dtype=e4m3 residual=bf16 weight_offset=1 save_stats=true");
  EXPECT_EQ(NormSpec::parse("op=rmsnorm shape=2,64 save_stats=false"),
            NormSpec::parse("op=rmsnorm shape=2,64"));
  EXPECT_EQ(NormSpec::parse("op=rmsnorm shape=2,64 save_stats=false").to_string(),
            "op=rmsnorm shape=2,64 dtype=f32 affine=none eps=1e-05");
  EXPECT_EQ(NormSpec::parse("op=layernorm shape=2,64 dtype=bf16 param_dtype=bf16 out_dtype=bf16 "
                            "weight_offset=0")
                .to_string(),
            "op=layernorm shape=2,64 dtype=bf16 normalized_dims=1 affine=both eps=1e-05");
}

// parse(to_string()) == spec and one text per spec, for every combination that validates.
TEST(SpecVariant, EveryCombinationRoundTrips) {
  struct Base {
    Op op;
    std::vector<int64_t> shape;
    int normalized_dims;
    int64_t groups;
  };
  const std::vector<Base> bases = {{Op::kRmsNorm, {2, 64, 8}, 0, 0},
                                   {Op::kRmsNorm, {3, 4096}, 1, 0},
                                   {Op::kLayerNorm, {3, 5, 64}, 2, 0},
                                   {Op::kGroupNorm, {2, 64, 8}, 0, 8}};
  const std::vector<std::optional<Dtype>> dtypes = {std::nullopt, Dtype::kF32, Dtype::kF16,
                                                    Dtype::kBF16};
  const std::vector<std::optional<Dtype>> outs = {std::nullopt, Dtype::kF32,  Dtype::kF16,
                                                  Dtype::kBF16, Dtype::kE4M3, Dtype::kE5M2};
  int valid = 0, refused = 0;
  for (const Base& base : bases) {
    for (Affine affine : {Affine::kNone, Affine::kWeight, Affine::kBoth}) {
      for (Dtype dtype : {Dtype::kF32, Dtype::kF16, Dtype::kBF16}) {
        for (const auto& param : dtypes) {
          for (const auto& out : outs) {
            for (const auto& residual : dtypes) {
              for (double offset : {0.0, 1.0, -0.25}) {
                for (bool stats : {false, true}) {
                  SpecFields f;
                  f.op = base.op;
                  f.shape = base.shape;
                  f.normalized_dims = base.normalized_dims;
                  if (base.groups) f.groups = base.groups;
                  f.affine = affine;
                  f.dtype = dtype;
                  f.param_dtype = param;
                  f.out_dtype = out;
                  f.residual = residual;
                  f.weight_offset = offset;
                  f.save_stats = stats;
                  NormSpec spec;
                  try {
                    spec = NormSpec::from_fields(f);
                  } catch (const Error& e) {
                    ++refused;
                    EXPECT_EQ(int(e.code()), int(ErrorCode::kInvalidArgument)) << e.what();
                    continue;
                  }
                  ++valid;
                  const std::string text = spec.to_string();
                  const NormSpec back = NormSpec::parse(text);
                  ASSERT_EQ(back, spec) << text;
                  ASSERT_EQ(back.to_string(), text);
                  EXPECT_EQ(spec.param_type(), param.value_or(dtype)) << text;
                  EXPECT_EQ(spec.out_type(), out.value_or(dtype)) << text;
                  EXPECT_EQ(spec.residual, residual) << text;
                  EXPECT_EQ(spec.weight_offset, offset) << text;
                  EXPECT_EQ(spec.save_stats, stats) << text;
                  // A key is written exactly when its axis is not the default.
                  EXPECT_EQ(text.find(" param_dtype=") != npos, spec.param_type() != dtype);
                  EXPECT_EQ(text.find(" out_dtype=") != npos, spec.out_type() != dtype);
                  EXPECT_EQ(text.find(" residual=") != npos, residual.has_value());
                  EXPECT_EQ(text.find(" weight_offset=") != npos, offset != 0);
                  EXPECT_EQ(text.find(" save_stats=true") != npos, stats);
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(valid, 1000);
  EXPECT_GT(refused, 1000);
}

TEST(SpecVariant, EqualityComparesTheResolvedAxes) {
  NormSpec a = NormSpec::parse("op=layernorm shape=2,64 dtype=bf16");
  NormSpec b = a;
  b.param_dtype = Dtype::kBF16;  // x's dtype, spelled out
  b.out_dtype = Dtype::kBF16;
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.to_string(), b.to_string());
  for (auto change : std::vector<void (*)(NormSpec&)>{
           [](NormSpec& s) { s.param_dtype = Dtype::kF32; },
           [](NormSpec& s) { s.out_dtype = Dtype::kE4M3; },
           [](NormSpec& s) { s.out_dtype = Dtype::kE5M2; },
           [](NormSpec& s) { s.residual = Dtype::kBF16; },
           [](NormSpec& s) { s.residual = Dtype::kF32; },
           [](NormSpec& s) { s.weight_offset = 1; },
           [](NormSpec& s) { s.save_stats = true; },
       }) {
    NormSpec c = a;
    change(c);
    EXPECT_NE(a, c) << c.to_string();
    EXPECT_NE(a.to_string(), c.to_string());
    EXPECT_EQ(NormSpec::parse(c.to_string()), c) << c.to_string();
  }
  NormSpec e4m3 = a, e5m2 = a;
  e4m3.out_dtype = Dtype::kE4M3;
  e5m2.out_dtype = Dtype::kE5M2;
  EXPECT_NE(e4m3, e5m2);
}

TEST(SpecVariant, SaveStatsTakesAnyOp) {
  for (const char* text : {"op=rmsnorm shape=2,64,8 save_stats=true",
                           "op=rmsnorm shape=2,64 normalized_dims=1 "
                           "save_stats=true",
                           "op=layernorm shape=2,64 save_stats=true",
                           "op=groupnorm shape=2,64,8 groups=4 "
                           "save_stats=true"}) {
    EXPECT_TRUE(NormSpec::parse(text).save_stats) << text;
  }
}

TEST(SpecVariant, OutDtypeTakesFp8AndNothingElseDoes) {
  EXPECT_EQ(parse_out_dtype("e4m3"), Dtype::kE4M3);
  EXPECT_EQ(parse_out_dtype("e5m2"), Dtype::kE5M2);
  EXPECT_EQ(parse_out_dtype("bf16"), Dtype::kBF16);
  const std::string out = error_of([] { parse_out_dtype("f8", "--out-dtype"); });
  EXPECT_NE(out.find("--out-dtype 'f8'"), npos) << out;
  EXPECT_NE(out.find("e4m3, e5m2"), npos) << "lists the fp8 dtypes: " << out;
  for (const char* fp8 : {"e4m3", "e5m2"}) {
    const std::string e = error_of([&] { parse_dtype(fp8, "--dtype"); });
    EXPECT_NE(e.find(std::string("--dtype '") + fp8 + "'"), npos) << e;
    EXPECT_NE(e.find("output dtypes only"), npos) << "says why: " << e;
  }
}

TEST(SpecVariant, ErrorsNameTheKeyAndValue) {
  struct Case {
    std::string text;
    std::vector<std::string> mentions;
  };
  const std::string rms = "op=rmsnorm shape=4,4096 normalized_dims=1 ";
  const std::vector<Case> cases = {
      {"op=rmsnorm shape=2,64 dtype=e4m3", {"dtype 'e4m3'", "output dtypes only"}},
      {"op=layernorm shape=2,64 dtype=e5m2", {"dtype 'e5m2'", "output dtypes only"}},
      {rms + "affine=weight param_dtype=e5m2", {"param_dtype 'e5m2'", "output dtypes only"}},
      {rms + "affine=weight param_dtype=f64", {"param_dtype 'f64'", "f32, f16, bf16"}},
      {rms + "out_dtype=fp8", {"out_dtype 'fp8'", "e4m3, e5m2"}},
      {rms + "param_dtype=f32", {"param_dtype 'f32'", "affine is none"}},
      {rms + "dtype=f32 param_dtype=f32", {"param_dtype 'f32'", "affine is none"}},
      {"op=rmsnorm shape=2,64,8 residual=f32", {"residual 'f32'", "trailing", "channel form"}},
      {"op=groupnorm shape=2,64,8 groups=4 residual=f32", {"residual 'f32'", "trailing"}},
      {rms + "dtype=bf16 residual=f16", {"residual 'f16'", "x's dtype (bf16) or f32"}},
      {rms + "dtype=f16 residual=e4m3", {"residual 'e4m3'", "output dtypes only"}},
      {rms + "residual=yes", {"residual 'yes'"}},
      {rms + "weight_offset=1", {"weight_offset 1", "affine is none"}},
      {rms + "affine=weight weight_offset=nan", {"weight_offset 'nan'"}},
      {rms + "affine=weight weight_offset=one", {"weight_offset 'one'"}},
      {rms + "affine=weight weight_offset=1e300", {"weight_offset", "float"}},
      {rms + "affine=weight weight_offset=1e-40", {"weight_offset", "float"}},
      {rms + "affine=weight weight_offset=1e999", {"weight_offset '1e999'", "range"}},
      {rms + "save_stats=yes", {"save_stats 'yes'", "true or false"}},
      {rms + "save_stats=1", {"save_stats '1'", "true or false"}},
      {rms + "save_stats=true save_stats=true", {"save_stats", "twice"}},
      {rms + "out_dtype=f16 out_dtype=f32", {"out_dtype", "twice"}},
  };
  for (const Case& c : cases) {
    const std::string e = error_of([&] { NormSpec::parse(c.text); });
    for (const std::string& m : c.mentions) {
      EXPECT_NE(e.find(m), npos) << c.text << "\n  names " << m << ": " << e;
    }
  }
  // The unknown-key message lists every key.
  const std::string unknown = error_of([] { NormSpec::parse("op=rmsnorm shape=2,64 colour=red"); });
  for (const char* key : {"op", "shape", "dtype", "normalized_dims", "groups", "affine", "eps",
                          "param_dtype", "out_dtype", "residual", "weight_offset", "save_stats"}) {
    EXPECT_NE(unknown.find(key), npos) << key << ": " << unknown;
  }
}

// validate() checks a spec that was built field by field (the C++ API), not only parsed text.
TEST(SpecVariant, ValidateChecksAStructBuiltByHand) {
  const NormSpec good = NormSpec::from_fields(trailing_rms(Dtype::kBF16));
  struct Case {
    void (*change)(NormSpec&);
    const char* mentions;
  };
  for (const Case& c : std::vector<Case>{
           {[](NormSpec& s) { s.dtype = Dtype::kE4M3; }, "dtype 'e4m3'"},
           {[](NormSpec& s) { s.param_dtype = Dtype::kE5M2; }, "param_dtype 'e5m2'"},
           {[](NormSpec& s) { s.residual = Dtype::kE4M3; }, "residual 'e4m3'"},
           {[](NormSpec& s) { s.residual = Dtype::kF16; }, "residual 'f16'"},
           {[](NormSpec& s) { s.weight_offset = std::numeric_limits<double>::infinity(); },
            "weight_offset inf"},
           {[](NormSpec& s) { s.weight_offset = std::numeric_limits<double>::quiet_NaN(); },
            "weight_offset nan"},
           {[](NormSpec& s) { s.weight_offset = 1e39; }, "weight_offset 1e+39"},
           {[](NormSpec& s) {
              s.affine = Affine::kNone;
              s.weight_offset = 1;
            },
            "weight_offset 1"},
           {[](NormSpec& s) {
              s.affine = Affine::kNone;
              s.param_dtype = Dtype::kF32;
            },
            "param_dtype 'f32'"},
           {[](NormSpec& s) {
              s.normalized_dims = 0;
              s.shape = {4, 64, 8};
              s.residual = Dtype::kBF16;
            },
            "residual 'bf16'"},
       }) {
    NormSpec s = good;
    c.change(s);
    const std::string e = error_of([&] { s.validate(); });
    EXPECT_NE(e.find(c.mentions), npos) << c.mentions << ": " << e;
  }
  NormSpec ok = good;
  ok.param_dtype = Dtype::kF32;
  ok.out_dtype = Dtype::kE5M2;
  ok.residual = Dtype::kF32;
  ok.weight_offset = -1e-3;
  ok.save_stats = true;
  EXPECT_NO_THROW(ok.validate());
}

}  // namespace
}  // namespace normjit
