// Launches of layout=nhwc specs, checked before anything needs a device: the channel forms run
// the row kernel over N x S rows (the kernel's batch), GroupNorm keeps the batch N, the
// statistics span [N, S] or [N, G], and row strides stay refused (the tensor is dense).
#include <gtest/gtest.h>

#include <string>

#include "normjit/normjit.hpp"
#include "templates/normjit/params.cuh"

namespace normjit {
namespace detail {
// runtime/engine.cpp: the launch's checks and kernel parameters (all but the workspace).
Params launch_params(const NormSpec& spec, const LaunchArgs& args);
}  // namespace detail
namespace {

char* fake(int i) { return reinterpret_cast<char*>(uintptr_t{1} << 40) + (uintptr_t(i) << 32); }

TEST(LayoutLaunch, ChannelFormsLaunchNTimesSRows) {
  const NormSpec spec =
      NormSpec::parse("op=layernorm shape=8,96,7,9 normalized_dims=0 layout=nhwc");
  LaunchArgs a;
  a.x = fake(1);
  a.y = fake(2);
  a.weight = fake(3);
  a.bias = fake(4);
  a.batch = 5;
  const Params p = detail::launch_params(spec, a);
  EXPECT_EQ(p.batch, 5 * 63);
  // GroupNorm's kernel takes the items.
  const NormSpec gn = NormSpec::parse("op=groupnorm shape=8,96,7,9 groups=3 layout=nhwc");
  EXPECT_EQ(detail::launch_params(gn, a).batch, 5);
  // nchw: the batch as given.
  EXPECT_EQ(
      detail::launch_params(NormSpec::parse("op=layernorm shape=8,96,7,9 normalized_dims=0"), a)
          .batch,
      5);
}

TEST(LayoutLaunch, StatisticsSpanPositionsOrGroups) {
  // rmsnorm channel form, nhwc: rstd of [N, S]. Its end reaching y is an overlap.
  const NormSpec spec = NormSpec::parse("op=rmsnorm shape=2,16,4,4 save_stats=true layout=nhwc");
  LaunchArgs a;
  a.x = fake(1);
  a.y = fake(2);
  a.batch = 2;
  a.rstd = reinterpret_cast<float*>(fake(2) - 2 * 16 * 4 + 4);  // one float into y
  try {
    detail::launch_params(spec, a);
    ADD_FAILURE() << "accepted an rstd [N, S] reaching into y";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rstd"), std::string::npos) << e.what();
  }
  a.rstd = reinterpret_cast<float*>(fake(2) - 2 * 16 * 4);  // ends where y starts
  EXPECT_NO_THROW(detail::launch_params(spec, a));
}

TEST(LayoutLaunch, RowStridesAreRefused) {
  const NormSpec spec = NormSpec::parse("op=rmsnorm shape=2,16,4,4 layout=nhwc");
  LaunchArgs a;
  a.x = fake(1);
  a.y = fake(2);
  a.batch = 2;
  a.x_rows = {32, 0};
  try {
    detail::launch_params(spec, a);
    ADD_FAILURE() << "accepted row strides";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x_rows.outer"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace normjit
