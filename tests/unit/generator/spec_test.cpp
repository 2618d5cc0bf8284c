#include "normjit/spec.hpp"

#include <gtest/gtest.h>

#include "normjit/error.hpp"

namespace normjit {
namespace {

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
        "op=groupnorm shape=112,64,512,512 dtype=f32 groups=8 affine=both eps=0.001"}) {
    const NormSpec spec = NormSpec::parse(text);
    EXPECT_EQ(spec.to_string(), text);
    EXPECT_EQ(NormSpec::parse(spec.to_string()), spec);
  }
  // Any order of key=value words gives the same spec.
  EXPECT_EQ(NormSpec::parse("dtype=f16 shape=2,8 op=layernorm"),
            NormSpec::parse("op=layernorm shape=2,8 dtype=f16"));
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

}  // namespace
}  // namespace normjit
