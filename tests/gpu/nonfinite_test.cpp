// A NaN in the input on the GPU, with PyTorch's semantics: a quiet NaN in one element of x (or
// of the residual) makes every y element of the item it lies in NaN, and that item's saved mean
// and rstd (an item: what one statistic covers, a row of the trailing forms, a position (n, s) of
// the channel forms, an (n, group) of GroupNorm); every other item's y and statistics keep the
// bits of a launch over the same finite inputs. A kernel whose reductions, exchanges between
// CTAs, vectors spanning items or max/min clamps (fmaxf(var, 0) drops a NaN) let a NaN leak into
// other items, or lose it, fails here.
//
// Each spec is launched once over finite random inputs (outputs poisoned with 0xff, NaN in every
// dtype: everything must be written and finite), then once per NaN site from the same inputs
// uploaded again with the one NaN written in (outputs preset to a finite pattern, so that an
// element left unwritten is neither NaN nor the first launch's bits).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "harness.hpp"

namespace normjit::testing {
namespace {

// Bytes preset in the outputs of a launch with a NaN: 0x3c3c3c3c (f32 0.0115), 0x3c3c (f16 1.06,
// bf16 0.0115) are finite, and no output of the first launch is expected to equal them.
constexpr unsigned char kFinitePreset = 0x3c;

// The bits of one element of an f32, f16 or bf16 tensor.
uint32_t bits_at(Dtype dtype, const unsigned char* p) {
  if (dtype == Dtype::kF32) {
    uint32_t b;
    std::memcpy(&b, p, 4);
    return b;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// Decoded from the bits (no conversion to float, which could quiet or lose a NaN's payload).
bool is_nan(Dtype dtype, const unsigned char* p) {
  const uint32_t b = bits_at(dtype, p);
  switch (dtype) {
    case Dtype::kF32:
      return (b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu) != 0;
    case Dtype::kF16:
      return (b & 0x7c00u) == 0x7c00u && (b & 0x03ffu) != 0;
    default:  // bf16
      return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0;
  }
}
bool is_finite(Dtype dtype, const unsigned char* p) {
  const uint32_t b = bits_at(dtype, p);
  switch (dtype) {
    case Dtype::kF32:
      return (b & 0x7f800000u) != 0x7f800000u;
    case Dtype::kF16:
      return (b & 0x7c00u) != 0x7c00u;
    default:  // bf16
      return (b & 0x7f80u) != 0x7f80u;
  }
}

// The canonical quiet NaN of dtype, written over one element.
void put_nan(Dtype dtype, unsigned char* p) {
  if (dtype == Dtype::kF32) {
    const uint32_t b = 0x7fc00000u;
    std::memcpy(p, &b, 4);
  } else {
    const uint16_t h = dtype == Dtype::kF16 ? 0x7e00u : 0x7fc0u;
    std::memcpy(p, &h, 2);
  }
}

// How a spec's items lie in x and y (and in the residual and h): count() items of length()
// elements; element e of item i at offset(i, e), in elements. Item i's statistics are mean[i] and
// rstd[i] (rows; [N, *spatial] for the channel forms; [N, G] for GroupNorm).
class Items {
 public:
  explicit Items(const NormSpec& spec)
      : spec_(spec),
        trailing_(!spec.channel_form() && spec.op != Op::kGroupNorm),
        group_(spec.op == Op::kGroupNorm) {
    if (trailing_) {
      count_ = spec.batch();
      length_ = spec.row_length();
    } else if (group_) {
      count_ = spec.batch() * spec.groups;
      length_ = spec.channels() / spec.groups * spec.spatial();
    } else {
      count_ = spec.batch() * spec.spatial();
      length_ = spec.channels();
    }
  }
  int64_t count() const { return count_; }
  int64_t length() const { return length_; }
  bool group() const { return group_; }

  int64_t offset(int64_t item, int64_t e) const {
    if (trailing_) return item * length_ + e;
    const int64_t s_count = spec_.spatial();
    int64_t n, c, s;
    if (group_) {  // e = channel of the group * S + position
      const int64_t groups = spec_.groups, per_group = spec_.channels() / groups;
      n = item / groups;
      c = item % groups * per_group + e / s_count;
      s = e % s_count;
    } else {  // item = n * S + position, e = channel
      n = item / s_count;
      s = item % s_count;
      c = e;
    }
    const int64_t channels = spec_.channels();
    return spec_.nhwc() ? (n * s_count + s) * channels + c : (n * channels + c) * s_count + s;
  }

 private:
  NormSpec spec_;
  bool trailing_, group_;
  int64_t count_ = 0, length_ = 0;
};

// Where one launch puts its NaN: element `element` of item `item`.
struct Site {
  int64_t item = 0, element = 0;
  bool operator<(const Site& o) const {
    return std::pair(item, element) < std::pair(o.item, o.element);
  }
};

// The first element of the first item, the last of the last, a middle one of a middle item, and
// a late one of the second item (one item: the first).
std::vector<Site> nan_sites(const Items& items) {
  const int64_t count = items.count(), len = items.length();
  const std::set<Site> sites = {{0, 0},
                                {count - 1, len - 1},
                                {count / 2, len / 2},
                                {std::min<int64_t>(1, count - 1), (3 * len) / 4}};
  return {sites.begin(), sites.end()};
}

// GroupNorm's (an item: the group's channels x S positions): the middle one at the middle channel
// and the middle position, the late one at the group's last channel and 3/4 of the positions:
// parts of later CTAs where an item is split over CTAs along its elements (NCHW) or its
// positions (NHWC), and in NHWC beside the next group's first channel.
std::vector<Site> group_sites(const NormSpec& spec, const Items& items) {
  const int64_t count = items.count(), len = items.length();
  const int64_t s = spec.spatial(), per_group = len / s;
  const std::set<Site> sites = {
      {0, 0},
      {count - 1, len - 1},
      {count / 2, per_group / 2 * s + s / 2},
      {std::min<int64_t>(1, count - 1), (per_group - 1) * s + (3 * s) / 4}};
  return {sites.begin(), sites.end()};
}

// Which input the NaN goes into.
enum class Input { kX, kResidual };
const char* to_string(Input in) { return in == Input::kX ? "x" : "the residual"; }

// What one launch wrote.
struct Outputs {
  std::vector<unsigned char> y, h;  // h: residual_out
  std::vector<float> mean, rstd;
};

// One spec on the device: finite random x, parameters and residual (seeded), kept on the host so
// that every launch uploads them afresh, and its output buffers (y, h, mean, rstd).
class NanRun {
 public:
  NanRun(const NormSpec& spec, uint64_t seed)
      : spec_(spec),
        items_(spec_),
        x_host_(reference::encode(spec.dtype,
                                  random_values(size_t(spec.elements()), Values::kNormal, seed))),
        x_(x_host_.size()),
        y_(size_t(spec.elements()) * size_of(spec.out_type())) {
    auto parameter = [&](device::Buffer& buffer, uint64_t s) {
      const std::vector<unsigned char> bytes = reference::encode(
          spec_.param_type(), random_values(size_t(spec_.param_elements()), Values::kNormal, s));
      buffer = device::Buffer(bytes.size());
      buffer.upload(bytes.data(), bytes.size());
    };
    if (spec.affine != Affine::kNone) parameter(w_, seed + 1);
    if (spec.affine == Affine::kBoth) parameter(b_, seed + 2);
    if (spec.residual) {
      residual_host_ = reference::encode(
          *spec.residual, random_values(size_t(spec.elements()), Values::kNormal, seed + 3));
      residual_ = device::Buffer(residual_host_.size());
      residual_out_ = device::Buffer(residual_host_.size());
    }
    if (spec.save_stats) {
      rstd_ = device::Buffer(size_t(items_.count()) * 4);
      if (spec.op != Op::kRmsNorm) mean_ = device::Buffer(size_t(items_.count()) * 4);
    }
  }

  const Items& items() const { return items_; }

  // One launch: the inputs uploaded (a quiet NaN at `nan_offset` of `input`, if given), every
  // output preset to `preset` bytes first.
  Outputs launch(const Kernel& kernel, std::optional<int64_t> nan_offset, Input input,
                 unsigned char preset) {
    std::vector<unsigned char> x = x_host_, residual = residual_host_;
    if (nan_offset) {
      const Dtype d = input == Input::kX ? spec_.dtype : *spec_.residual;
      std::vector<unsigned char>& host = input == Input::kX ? x : residual;
      put_nan(d, &host[size_t(*nan_offset) * size_of(d)]);
    }
    x_.upload(x.data(), x.size());
    if (spec_.residual) residual_.upload(residual.data(), residual.size());
    for (device::Buffer* b : {&y_, &residual_out_, &mean_, &rstd_}) {
      if (b->bytes()) b->fill_bytes(preset);
    }
    LaunchArgs a;
    a.x = x_.get();
    a.y = y_.get();
    a.weight = w_.get();
    a.bias = b_.get();
    a.batch = spec_.batch();
    a.eps = float(spec_.eps);
    a.residual = residual_.get();
    a.residual_out = residual_out_.get();
    a.mean = static_cast<float*>(mean_.get());
    a.rstd = static_cast<float*>(rstd_.get());
    kernel.launch(a, nullptr);
    NORMJIT_CU(driver::api().cuCtxSynchronize());
    Outputs out;
    out.y = download(y_);
    if (spec_.residual) out.h = download(residual_out_);
    for (auto [buffer, floats] : {std::pair{&mean_, &out.mean}, std::pair{&rstd_, &out.rstd}}) {
      floats->resize(buffer->bytes() / 4);
      if (buffer->bytes()) buffer->download(floats->data(), buffer->bytes());
    }
    return out;
  }

 private:
  NormSpec spec_;
  Items items_;
  std::vector<unsigned char> x_host_, residual_host_;
  device::Buffer x_, y_, w_, b_, residual_, residual_out_, mean_, rstd_;
};

// Counts of what a check found, with the first instance of each kind for the message.
struct Tally {
  int64_t count = 0;
  std::string first;
  void add(const std::string& where) {
    if (count++ == 0) first = where;
  }
};

std::string at(int64_t item, int64_t e, int64_t offset) {
  return "item " + std::to_string(item) + " element " + std::to_string(e) + " (offset " +
         std::to_string(offset) + ")";
}

// The launch over finite inputs: every y (and h, mean, rstd) element written and finite.
void expect_all_finite(const NormSpec& spec, const Outputs& o, const std::string& what) {
  const Dtype yd = spec.out_type();
  Tally y, h, stats;
  const int64_t n = spec.elements();
  for (int64_t i = 0; i < n; ++i) {
    if (!is_finite(yd, &o.y[size_t(i) * size_of(yd)])) y.add("offset " + std::to_string(i));
    if (spec.residual && !is_finite(*spec.residual, &o.h[size_t(i) * size_of(*spec.residual)]))
      h.add("offset " + std::to_string(i));
  }
  for (const std::vector<float>* v : {&o.mean, &o.rstd}) {
    for (size_t i = 0; i < v->size(); ++i) {
      if (!std::isfinite((*v)[i])) stats.add("statistic " + std::to_string(i));
    }
  }
  EXPECT_EQ(y.count, 0) << what << ": finite x gave y not finite or unwritten; first at "
                        << y.first;
  EXPECT_EQ(h.count, 0) << what << ": finite inputs gave h not finite or unwritten; first at "
                        << h.first;
  EXPECT_EQ(stats.count, 0) << what << ": finite x gave statistics not finite or unwritten; first "
                            << stats.first;
}

// The launch with a NaN at `site` against the clean one: that item's y (and statistics) NaN,
// h NaN at the site's element only, everything else the clean launch's bits.
void expect_nan_in_its_item_only(const NormSpec& spec, const Items& items, const Site& site,
                                 const Outputs& clean, const Outputs& got,
                                 const std::string& what) {
  const Dtype yd = spec.out_type();
  const int ye = size_of(yd);
  const int he = spec.residual ? size_of(*spec.residual) : 0;
  const int64_t nan_offset = items.offset(site.item, site.element);
  Tally y_not_nan, y_changed, h_wrong;
  for (int64_t item = 0; item < items.count(); ++item) {
    for (int64_t e = 0; e < items.length(); ++e) {
      const int64_t off = items.offset(item, e);
      const unsigned char* g = &got.y[size_t(off) * ye];
      if (item == site.item) {
        if (!is_nan(yd, g)) y_not_nan.add(at(item, e, off));
      } else if (std::memcmp(g, &clean.y[size_t(off) * ye], size_t(ye)) != 0) {
        y_changed.add(at(item, e, off));
      }
      if (!spec.residual) continue;
      const unsigned char* gh = &got.h[size_t(off) * he];
      if (off == nan_offset ? !is_nan(*spec.residual, gh)
                            : std::memcmp(gh, &clean.h[size_t(off) * he], size_t(he)) != 0) {
        h_wrong.add(at(item, e, off));
      }
    }
  }
  EXPECT_EQ(y_not_nan.count, 0) << what << ": " << y_not_nan.count << " of " << items.length()
                                << " y elements of the NaN's item not NaN; first at "
                                << y_not_nan.first;
  EXPECT_EQ(y_changed.count, 0) << what << ": " << y_changed.count
                                << " y elements of other items differ from the launch without "
                                   "the NaN; first at "
                                << y_changed.first;
  EXPECT_EQ(h_wrong.count, 0) << what << ": " << h_wrong.count
                              << " h elements wrong (NaN expected at the NaN's element only, "
                                 "the launch without it's bits elsewhere); first at "
                              << h_wrong.first;
  for (const auto& [now, before, name] :
       {std::tuple{&got.mean, &clean.mean, "mean"}, std::tuple{&got.rstd, &clean.rstd, "rstd"}}) {
    Tally changed;
    for (size_t i = 0; i < now->size(); ++i) {
      if (int64_t(i) == site.item) {
        EXPECT_TRUE(std::isnan((*now)[i]))
            << what << ": " << name << " of the NaN's item is " << (*now)[i] << ", not NaN";
      } else if (std::memcmp(&(*now)[i], &(*before)[i], 4) != 0) {
        changed.add("item " + std::to_string(i));
      }
    }
    EXPECT_EQ(changed.count, 0) << what << ": " << name << " of " << changed.count
                                << " other items differ from the launch without the NaN; first "
                                << changed.first;
  }
}

std::string strategy_of(const NormSpec& spec, const Target& target) {
  try {
    return to_string(plan(spec, target).strategy);
  } catch (const std::exception& e) {
    return std::string("(no plan: ") + e.what() + ")";
  }
}

// Every spec: a launch over finite inputs, then one launch per NaN site and input in `inputs`.
void run_nan_sites(const std::vector<std::string>& texts, const std::vector<Input>& inputs) {
  device::PrimaryContext context;
  const Target target = device::target_of(context.device());
  Engine engine(test_engine_options());
  std::vector<NormSpec> specs;
  for (const std::string& t : texts) specs.push_back(NormSpec::parse(t));
  prepare_in_parallel(engine, specs);
  uint64_t seed = 100;
  for (const NormSpec& spec : specs) {
    std::string what = spec.to_string();
    try {
      const Kernel kernel = engine.prepare(spec);
      NanRun run(spec, seed++);
      const Items& items = run.items();
      const std::vector<Site> sites = items.group() ? group_sites(spec, items) : nan_sites(items);
      std::string line = what + " | batch " + std::to_string(spec.batch()) + " | " +
                         strategy_of(spec, target) + " | NaN in";
      for (Input in : inputs) line += std::string(" ") + (in == Input::kX ? "x" : "residual");
      line += " at (item, element)";
      for (const Site& s : sites) {
        line += " (" + std::to_string(s.item) + ", " + std::to_string(s.element) + ")";
      }
      std::printf("[ nonfinite] %s\n", line.c_str());
      const Outputs clean = run.launch(kernel, std::nullopt, Input::kX, /*preset=*/0xff);
      expect_all_finite(spec, clean, what);
      for (Input in : inputs) {
        for (const Site& s : sites) {
          const int64_t off = items.offset(s.item, s.element);
          const Outputs got = run.launch(kernel, off, in, kFinitePreset);
          expect_nan_in_its_item_only(
              spec, items, s, clean, got,
              what + " | NaN in " + to_string(in) + " at " + at(s.item, s.element, off));
        }
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": " << e.what();
    }
  }
}

TEST(NonFinite, NanInARowMakesThatRowNanOnly) {
  NORMJIT_REQUIRE_GPU();
  // Rows in registers of one thread (1, 7), of a team (65 to 8192), and split over CTAs (65536),
  // each length with two dtypes and affine forms, statistics saved in one; and launches of more
  // rows than the few-rows batch class (another plan, more rows a CTA).
  const int64_t lengths[] = {1, 7, 65, 1000, 4096, 8192, 65536};
  const char* dtypes[] = {"bf16", "f16", "f32"};
  std::vector<std::string> texts;
  for (int i = 0; i < 7; ++i) {
    const int64_t h = lengths[i];
    const std::string shape = " shape=" + std::to_string(h >= 65536 ? 3 : 5) + "," +
                              std::to_string(h) + " normalized_dims=1";
    const std::string d0 = std::string(" dtype=") + dtypes[i % 3];
    const std::string d1 = std::string(" dtype=") + dtypes[(i + 1) % 3];
    const bool even = i % 2 == 0;
    texts.push_back("op=rmsnorm" + shape + d0 + (even ? " affine=weight" : " affine=none"));
    texts.push_back("op=rmsnorm" + shape + d1 + (even ? " affine=none" : " affine=weight") +
                    " save_stats=true");
    texts.push_back("op=layernorm" + shape + d0 + " affine=both");
    texts.push_back("op=layernorm" + shape + d1 + (even ? " affine=none" : " affine=weight") +
                    " save_stats=true");
  }
  texts.push_back("op=rmsnorm shape=600,1000 normalized_dims=1 dtype=bf16 affine=weight");
  texts.push_back(
      "op=layernorm shape=600,4096 normalized_dims=1 dtype=f16 affine=both save_stats=true");
  run_nan_sites(texts, {Input::kX});
}

TEST(NonFinite, NanInAGroupMakesThatGroupNanOnly) {
  NORMJIT_REQUIRE_GPU();
  // GroupNorm in one CTA's registers (small), split over CTAs per group (NCHW, large), and
  // channels last: one CTA per item, tiles of 8 groups exchanged between CTAs, and the UNet's map
  // with SiLU (C/G = 10: a vector spans groups).
  run_nan_sites(
      {
          "op=groupnorm shape=2,64,7,9 dtype=f16 groups=8 affine=both save_stats=true",
          "op=groupnorm shape=2,64,7,9 dtype=bf16 groups=8 affine=none",
          "op=groupnorm shape=1,512,128,128 dtype=bf16 groups=32 affine=both save_stats=true",
          "op=groupnorm shape=1,512,128,128 dtype=f32 groups=32 affine=weight",
          "op=groupnorm shape=2,64,7,9 dtype=f32 groups=8 affine=both save_stats=true "
          "layout=nhwc",
          "op=groupnorm shape=1,512,128,128 dtype=f16 groups=32 affine=both save_stats=true "
          "layout=nhwc",
          "op=groupnorm shape=2,320,64,64 dtype=f16 groups=32 affine=both activation=silu "
          "save_stats=true layout=nhwc",
          "op=groupnorm shape=2,320,64,64 dtype=bf16 groups=32 affine=both activation=silu "
          "layout=nhwc",
      },
      {Input::kX});
}

TEST(NonFinite, NanAtAPositionOfAChannelFormMakesThatPositionNanOnly) {
  NORMJIT_REQUIRE_GPU();
  // Over dim 1: a small map in a shared-memory slab (NCHW), rows of C (NHWC), and larger maps
  // where a thread owns V neighbouring positions, values held in registers or read twice (many
  // channels: the read-twice LayerNorm clamps its variance at 0).
  run_nan_sites(
      {
          "op=layernorm shape=2,96,9,7 normalized_dims=0 dtype=bf16 affine=both save_stats=true",
          "op=layernorm shape=2,96,9,7 normalized_dims=0 dtype=f32 affine=none layout=nhwc "
          "save_stats=true",
          "op=rmsnorm shape=2,96,9,7 normalized_dims=0 dtype=f16 affine=weight save_stats=true",
          "op=rmsnorm shape=2,96,9,7 normalized_dims=0 dtype=bf16 affine=none save_stats=true "
          "layout=nhwc",
          "op=layernorm shape=2,96,64,64 normalized_dims=0 dtype=f16 affine=both save_stats=true",
          "op=rmsnorm shape=2,64,64,64 normalized_dims=0 dtype=bf16 affine=weight "
          "save_stats=true",
          "op=layernorm shape=2,4096,8,8 normalized_dims=0 dtype=f32 affine=both "
          "save_stats=true",
      },
      {Input::kX});
}

TEST(NonFinite, NanInTheResidualMakesThatRowNanAndHNanAtThatElementOnly) {
  NORMJIT_REQUIRE_GPU();
  // h = x + residual is written back and normalized: a NaN in the residual (or in x) is NaN in h
  // at its element only, and makes its row's y NaN.
  run_nan_sites(
      {
          "op=rmsnorm shape=5,1000 normalized_dims=1 dtype=bf16 affine=weight residual=bf16",
          "op=rmsnorm shape=5,4096 normalized_dims=1 dtype=f16 affine=weight residual=f32 "
          "save_stats=true",
          "op=rmsnorm shape=3,65536 normalized_dims=1 dtype=bf16 affine=weight residual=f32 "
          "save_stats=true",
      },
      {Input::kResidual, Input::kX});
}

}  // namespace
}  // namespace normjit::testing
