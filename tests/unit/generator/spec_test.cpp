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

}  // namespace
}  // namespace normjit
