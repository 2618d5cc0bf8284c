// The variant axes of issue 18 on the GPU against a float64 reference: parameters in their own
// dtype, every output dtype (fp8 with a scale, saturating), the fused residual (h exact, in
// place or not), the weight offset, saved statistics, strided rows of one and two levels, batch
// invariance, all axes in one launch, and a CUDA-graph capture of a combined kernel.
//
// Semantics checked (NormSpec, LaunchArgs):
//   h    = round_to_residual_dtype(float(x) + float(residual))   written to residual_out exactly
//   y    = norm(h) * (offset + w in f32) (+ b), converted to the output dtype; fp8: times *scale,
//          then rounded to nearest even and saturated to the largest finite value
//   mean = mean of h (layernorm rows, groupnorm [N, G]); rstd = 1 / sqrt(var + eps)
//          (rmsnorm: of mean(h^2); per row, or per (n, position) in the channel form)
// The reference is float64 of the same rounded inputs (x, residual, h, parameters), so an f32
// tolerance applies to every input dtype. Every buffer is poisoned (0xff: NaN in every dtype)
// where the launch must write, and every byte the launch must not write (gaps between strided
// rows, rows past the launched batch, inputs) is checked to be unchanged.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "harness.hpp"

namespace normjit::testing {
namespace {

// ---------------------------------------------------------------------------------------
// Storage formats: the OCP fp8 formats, and rounding to nearest even onto any storage grid.

// OCP E4M3: bias 7, 3 mantissa bits, no infinity, NaN = S.1111.111, largest finite 448.
// OCP E5M2: bias 15, 2 mantissa bits, infinity S.11111.00, NaN S.11111.{01,10,11}, largest
// finite 57344.
double decode_fp8(Dtype dtype, uint8_t code) {
  const bool e4m3 = dtype == Dtype::kE4M3;
  const int mantissa_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int exponent = (code & 0x7f) >> mantissa_bits;
  const int mantissa = code & ((1 << mantissa_bits) - 1);
  double v;
  if (e4m3 && exponent == 15 && mantissa == 7) {
    v = NAN;
  } else if (!e4m3 && exponent == 31) {
    v = mantissa == 0 ? INFINITY : NAN;
  } else if (exponent == 0) {  // subnormal: no implicit one, exponent 1 - bias
    v = std::ldexp(double(mantissa), 1 - bias - mantissa_bits);
  } else {
    v = std::ldexp(double((1 << mantissa_bits) + mantissa), exponent - bias - mantissa_bits);
  }
  return (code & 0x80) ? -v : v;
}

double fp8_max(Dtype dtype) { return dtype == Dtype::kE4M3 ? 448.0 : 57344.0; }
uint8_t fp8_max_code(Dtype dtype) { return dtype == Dtype::kE4M3 ? 0x7e : 0x7b; }

// Every finite value of a storage dtype (f16, bf16, e4m3, e5m2) in increasing order, with its
// code: rounding to nearest even is a search in it.
class Grid {
 public:
  explicit Grid(Dtype dtype) {
    const uint32_t codes = size_of(dtype) == 1 ? 256u : 65536u;
    std::vector<std::pair<double, uint32_t>> all;
    for (uint32_t c = 0; c < codes; ++c) {
      double v;
      if (dtype == Dtype::kF16) {
        v = reference::half_to_float(uint16_t(c));
      } else if (dtype == Dtype::kBF16) {
        v = reference::bf16_to_float(uint16_t(c));
      } else {
        v = decode_fp8(dtype, uint8_t(c));
      }
      if (!std::isfinite(v)) continue;
      if (v == 0 && c != 0) continue;  // -0: keep one zero, code 0
      all.push_back({v, c});
    }
    std::sort(all.begin(), all.end());
    for (const auto& [v, c] : all) {
      values_.push_back(v);
      codes_.push_back(c);
    }
  }
  // Round to nearest, ties to the even code; past the largest finite value (either sign), that
  // value: fp8 saturates (the 16-bit conversions would give inf, which no test reaches).
  size_t nearest(double v) const {
    if (!(v > values_.front())) return 0;
    if (!(v < values_.back())) return values_.size() - 1;
    const size_t hi = size_t(std::upper_bound(values_.begin(), values_.end(), v) - values_.begin());
    const size_t lo = hi - 1;
    const double below = v - values_[lo], above = values_[hi] - v;
    if (below < above) return lo;
    if (above < below) return hi;
    return (codes_[lo] & 1u) == 0 ? lo : hi;
  }
  double round(double v) const { return values_[nearest(v)]; }
  uint32_t code(double v) const {
    if (std::isnan(v)) return 0x7f;  // used for fp8 only: the canonical NaN
    const size_t i = nearest(v);
    return std::signbit(v) && values_[i] == 0 ? 0x80u
                                              : codes_[i];  // keep the sign of a zero result
  }
  double max() const { return values_.back(); }
  // The grid value `steps` places from the one v rounds to (clamped to the ends).
  double step(double v, int steps) const {
    const int64_t i =
        std::clamp<int64_t>(int64_t(nearest(v)) + steps, 0, int64_t(values_.size()) - 1);
    return values_[size_t(i)];
  }

 private:
  std::vector<double> values_;
  std::vector<uint32_t> codes_;
};

const Grid& grid(Dtype dtype) {
  static const Grid f16(Dtype::kF16), bf16(Dtype::kBF16), e4m3(Dtype::kE4M3), e5m2(Dtype::kE5M2);
  switch (dtype) {
    case Dtype::kF16:
      return f16;
    case Dtype::kBF16:
      return bf16;
    case Dtype::kE4M3:
      return e4m3;
    default:
      return e5m2;
  }
}

// fp8 encoding of the reference: round to nearest even, saturate to the largest finite value.
uint8_t encode_fp8(Dtype dtype, double v) { return uint8_t(grid(dtype).code(v)); }

// Round to nearest even onto a storage dtype's grid, exactly, from a double: to a float by
// round-to-odd first (it keeps what a second rounding to fewer bits needs), then to 16 bits by
// the harness's conversions; fp8 through its grid (saturating).
double round_to(Dtype dtype, double v) {
  if (is_fp8(dtype)) return grid(dtype).round(v);
  float f = float(v);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (double(f) != v && (bits & 1u) == 0) {
    f = std::nextafter(f, v > double(f) ? INFINITY : -INFINITY);
  }
  return dtype == Dtype::kF16 ? reference::half_to_float(reference::float_to_half(f))
                              : reference::bf16_to_float(reference::float_to_bf16(f));
}

// Host threads for the reference work (generation, checks): the GPU machine has 16 cores.
int64_t host_threads() {
  return std::clamp<int64_t>(int64_t(std::thread::hardware_concurrency()), 1, 16);
}

// fn(chunk) for every chunk in [0, chunks), on up to host_threads() threads.
template <class F>
void parallel_chunks(int64_t chunks, F&& fn) {
  const int64_t threads = std::min(chunks, host_threads());
  if (threads <= 1) {
    for (int64_t c = 0; c < chunks; ++c) fn(c);
    return;
  }
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int64_t c = next++; c < chunks; c = next++) fn(c);
    });
  }
  for (std::thread& t : pool) t.join();
}

constexpr int64_t kChunk = int64_t{1} << 18;  // elements per unit of parallel host work

// n elements of a storage dtype (not fp8) from f32 values, rounded to nearest even.
void encode_into(Dtype dtype, const float* in, unsigned char* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == Dtype::kF32) {
      std::memcpy(out + 4 * i, &in[i], 4);
    } else {
      const uint16_t h =
          dtype == Dtype::kF16 ? reference::float_to_half(in[i]) : reference::float_to_bf16(in[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
  }
}
// n elements of any storage dtype, fp8 included, as floats or doubles.
template <class T>
void decode_into(Dtype dtype, const unsigned char* in, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (is_fp8(dtype)) {
      out[i] = T(decode_fp8(dtype, in[i]));
    } else if (dtype == Dtype::kF32) {
      float f;
      std::memcpy(&f, in + 4 * i, 4);
      out[i] = f;
    } else {
      uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      out[i] = dtype == Dtype::kF16 ? reference::half_to_float(h) : reference::bf16_to_float(h);
    }
  }
}
double decode_one(Dtype dtype, const unsigned char* in) {
  double v;
  decode_into(dtype, in, &v, 1);
  return v;
}

// ---------------------------------------------------------------------------------------
// A case: the spec's fields, how its rows lie in memory, and its inputs.

// Where the rows of one tensor lie in its buffer, in elements: the first row at `base` (a
// column slice of a wider tensor starts inside it), then LaunchArgs' RowStrides (0:
// contiguous); `extra` elements after the last row stay untouched too.
struct Placement {
  int64_t base = 0;
  RowStrides rows = {};
  int64_t extra = 16;
};

Placement slice(int64_t base, int64_t outer) { return {base, {outer, 0}, 16}; }
Placement heads(int64_t base, int64_t outer, int64_t inner) { return {base, {outer, inner}, 16}; }

std::string describe(const Placement& p) {
  if (p.base == 0 && p.rows.outer == 0 && p.rows.inner == 0) return "contiguous";
  std::string s = "base " + std::to_string(p.base) + " outer " + std::to_string(p.rows.outer);
  if (p.rows.inner) s += " inner " + std::to_string(p.rows.inner);
  return s;
}

struct Case {
  SpecFields fields;
  int64_t batch = 0;       // rows (trailing forms) or N launched; 0: the spec's batch
  int64_t inner_rows = 1;  // trailing forms: rows per group of the two-level layout
  Placement x, y, residual, residual_out;
  bool y_is_x = false;                    // y written over x (in place)
  bool residual_out_is_residual = false;  // h written over the residual (in place)
  float scale = 1.0f;                     // fp8 outputs: the f32 at LaunchArgs::scale
  Values values = Values::kNormal;        // x
  Values residual_values = Values::kNormal;
  uint64_t seed = 1;

  // Axes, chained: rms({7, 4096}, Dtype::kBF16).params(Dtype::kF32).out(Dtype::kE4M3, 0.5f).
  Case& params(Dtype d) {
    fields.param_dtype = d;
    return *this;
  }
  Case& out(Dtype d, float s = 1.0f) {
    fields.out_dtype = d;
    scale = s;
    return *this;
  }
  Case& add_residual(Dtype d, bool in_place) {
    fields.residual = d;
    residual_out_is_residual = in_place;
    return *this;
  }
  Case& offset(double o) {
    fields.weight_offset = o;
    return *this;
  }
  Case& stats() {
    fields.save_stats = true;
    return *this;
  }
  Case& act(Activation a) {
    fields.activation = a;
    return *this;
  }
  Case& y_over_x() {
    y_is_x = true;
    return *this;
  }
  Case& with(Values v, uint64_t s) {
    values = v;
    seed = s;
    return *this;
  }
  Case& residual_with(Values v) {
    residual_values = v;
    return *this;
  }
  Case& rows_at(Placement px, Placement py) {
    x = px;
    y = py;
    return *this;
  }
  Case& residual_at(Placement pr, Placement pro) {
    residual = pr;
    residual_out = pro;
    return *this;
  }
  Case& two_level(int64_t rows_per_group) {
    inner_rows = rows_per_group;
    return *this;
  }
  Case& nhwc() {
    fields.layout = Layout::kNhwc;
    return *this;
  }
};

SpecFields fields_of(Op op, std::vector<int64_t> shape, Dtype dtype, Affine affine, int k,
                     int64_t groups) {
  SpecFields f;
  f.op = op;
  f.shape = std::move(shape);
  f.dtype = dtype;
  f.affine = affine;
  f.normalized_dims = k;
  if (op == Op::kGroupNorm) f.groups = groups;
  return f;
}

Case case_of(SpecFields f) {
  Case c;
  c.fields = std::move(f);
  return c;
}

// RMSNorm over the last k dims (LLM rows), its channel form, LayerNorm over the last k dims,
// its channel form (LayerNorm2d), GroupNorm.
Case rms(std::vector<int64_t> shape, Dtype d, Affine a = Affine::kWeight, int k = 1) {
  return case_of(fields_of(Op::kRmsNorm, std::move(shape), d, a, k, 0));
}
Case rms_channels(std::vector<int64_t> shape, Dtype d, Affine a = Affine::kWeight) {
  return case_of(fields_of(Op::kRmsNorm, std::move(shape), d, a, 0, 0));
}
Case layer_norm(std::vector<int64_t> shape, Dtype d, Affine a = Affine::kBoth, int k = 1) {
  return case_of(fields_of(Op::kLayerNorm, std::move(shape), d, a, k, 0));
}
Case layer_norm_channels(std::vector<int64_t> shape, Dtype d, Affine a = Affine::kBoth) {
  return case_of(fields_of(Op::kLayerNorm, std::move(shape), d, a, 0, 0));
}
Case group_norm(std::vector<int64_t> shape, Dtype d, int64_t groups, Affine a = Affine::kBoth) {
  return case_of(fields_of(Op::kGroupNorm, std::move(shape), d, a, 0, groups));
}

// f32 arithmetic of data whose |mean| >> std loses about 2^-24 |mean| / std (ops_test allows
// 1e-4 for it); otherwise f32 results land well under 1e-5 of the reference.
double f32_tolerance(Values v) { return v == Values::kLargeMean ? 1e-4 : 1e-5; }

// How far an element's f32 value may be from float64 before conversion, relative to
// |y| + |b| + the rms of its row (errors scale with |norm * w|, which that bounds): 2x the f32
// tolerance, 10x with large means. Outputs of 16 and 8 bits must be within the round-to-
// nearest-even images of reference -+ slack.
double slack_factor(Values v) { return v == Values::kLargeMean ? 1e-3 : 2e-5; }

// With an activation (issue 19) the error of the value after the affine step passes through it
// scaled by at most max |act'| (silu 1.0998, gelu 1.1289), and the activation adds its own: at
// most 2e-6 of |act(v)| + the rms of the row's values. That is twice the bound derived from
// its f32 formula (emulated on the host against float64 over v in [-30, 30] with f32 steps:
// silu 7.7 ulp for |v| <= 8, gelu 4.8e-7 absolute where 1 + erf cancels, as PyTorch's does)
// plus the 2-ulp errors of ex2.approx and div.approx; ActivationErrorOfTheEpilogueAlone
// measures it on the device.
constexpr double kActivationSlope = 1.13;
constexpr double kActivationError = 2e-6;

// What one launch got right and wrong.
struct Outcome {
  double rel_error = 0;  // ||y - ref|| / ||ref|| (fp8: ref * scale), every launched element
  int64_t elements = 0;
  int64_t nonfinite = 0;   // y elements NaN or inf (poison left: not written)
  int64_t misrounded = 0;  // 16/8-bit y outside [RNE(ref - slack), RNE(ref + slack)]
  std::string first_misrounded;
  int64_t exact = 0;  // 16/8-bit y equal to RNE(ref): information (not guaranteed)
  int64_t saturated_pos = 0, saturated_neg = 0;  // fp8: ref * scale beyond the largest finite
  int64_t saturated_wrong = 0;                   // ...whose y is not exactly the largest finite
  int64_t h_mismatches = 0;                      // residual_out bytes != the rounded x + residual
  std::string first_h;
  double mean_error = 0;  // worst |mean - ref| / (|ref| + std of the row)
  double rstd_error = 0;  // worst |rstd - ref| / ref
  int64_t stats_nonfinite = 0;
  std::string first_stats;
  int64_t outside_writes = 0;  // bytes changed that the launch must not write
  std::string first_outside;
};

// The y comparison of a stretch of elements, merged in order into an Outcome.
struct Partial {
  double err2 = 0, ref2 = 0;
  int64_t elements = 0, nonfinite = 0, misrounded = 0, exact = 0;
  int64_t saturated_pos = 0, saturated_neg = 0, saturated_wrong = 0;
  std::string first_misrounded;
  void merge_into(Outcome& o, double& err2_total, double& ref2_total) const {
    err2_total += err2;
    ref2_total += ref2;
    o.elements += elements;
    o.nonfinite += nonfinite;
    if (o.misrounded == 0 && misrounded) o.first_misrounded = first_misrounded;
    o.misrounded += misrounded;
    o.exact += exact;
    o.saturated_pos += saturated_pos;
    o.saturated_neg += saturated_neg;
    o.saturated_wrong += saturated_wrong;
  }
};

// The bytes a launch wrote, row by row in logical order (for batch invariance).
struct Written {
  std::vector<unsigned char> y, h, mean, rstd;
};

// One case on the device: buffers laid out as the case says, inputs generated from a seed, the
// launch's arguments, and the check of everything a launch wrote (and did not write).
class VariantRun {
 public:
  explicit VariantRun(const Case& c) : c_(c), spec_(NormSpec::from_fields(c.fields)) {
    trailing_ = !spec_.channel_form() && spec_.op != Op::kGroupNorm;
    row_len_ = trailing_ ? spec_.row_length() : spec_.elements() / spec_.batch();
    rows_ = spec_.batch();
    units_per_row_ = spec_.op == Op::kGroupNorm ? spec_.groups : trailing_ ? 1 : spec_.spatial();
    out_ = spec_.out_type();
    x_.dtype = spec_.dtype;
    x_.at = c.x;
    y_ = c.y_is_x ? &x_ : &y_own_;
    y_own_.dtype = out_;
    y_own_.at = c.y;
    if (spec_.residual) {
      residual_.dtype = *spec_.residual;
      residual_.at = c.residual;
      residual_out_ = c.residual_out_is_residual ? &residual_ : &residual_out_own_;
      residual_out_own_.dtype = *spec_.residual;
      residual_out_own_.at = c.residual_out;
    }
    for (Tensor* t : tensors()) t->buffer = device::Buffer(size_t(span(t->at)) * size_of(t->dtype));
    if (spec_.save_stats) {
      rstd_ = device::Buffer(stats_floats() * 4);
      if (spec_.op != Op::kRmsNorm) mean_ = device::Buffer(stats_floats() * 4);
    }
    if (is_fp8(out_)) scale_ = device::Buffer(4);
    make_parameters();
    generate(c.values, c.residual_values, c.seed, c.scale);
  }
  VariantRun(const VariantRun&) = delete;
  VariantRun& operator=(const VariantRun&) = delete;

  const NormSpec& spec() const { return spec_; }

  // Fresh inputs (and scale) into the same buffers; outputs poisoned again.
  void generate(Values values, Values residual_values, uint64_t seed, float scale) {
    values_ = values;
    scale_value_ = scale;
    const int64_t n = rows_ * row_len_;
    const Dtype xd = spec_.dtype;
    x_bytes_.assign(size_t(n * size_of(xd)), 0);
    data_.assign(size_t(n), 0.0f);
    if (spec_.residual) {
      residual_bytes_.assign(size_t(n * size_of(*spec_.residual)), 0);
      h_bytes_.assign(residual_bytes_.size(), 0);
    }
    // In chunks of their own seeds, on every host thread.
    parallel_chunks((n + kChunk - 1) / kChunk, [&](int64_t c) {
      const int64_t begin = c * kChunk, len = std::min(kChunk, n - begin);
      std::vector<float> v = random_values(size_t(len), values, seed * 1000003 + uint64_t(c));
      encode_into(xd, v.data(), &x_bytes_[begin * size_of(xd)], len);
      decode_into(xd, &x_bytes_[begin * size_of(xd)], &data_[begin], len);
      if (!spec_.residual) return;
      const Dtype rd = *spec_.residual;
      const int64_t re = size_of(rd);
      v = random_values(size_t(len), residual_values, seed * 1000003 + uint64_t(c) + 7777777);
      encode_into(rd, v.data(), &residual_bytes_[begin * re], len);
      decode_into(rd, &residual_bytes_[begin * re], v.data(), len);
      for (int64_t i = 0; i < len; ++i) v[i] += data_[begin + i];  // the f32 sum, as the kernel
      encode_into(rd, v.data(), &h_bytes_[begin * re], len);       // h in the residual dtype
      decode_into(rd, &h_bytes_[begin * re], &data_[begin], len);  // what is normalized
    });
    // What each buffer holds before a launch: the inputs in their rows, poison elsewhere.
    x_.before.assign(x_.buffer.bytes(), 0xff);
    scatter(x_, x_bytes_);
    if (!c_.y_is_x) y_own_.before.assign(y_own_.buffer.bytes(), 0xff);
    if (spec_.residual) {
      residual_.before.assign(residual_.buffer.bytes(), 0xff);
      scatter(residual_, residual_bytes_);
      if (!c_.residual_out_is_residual) {
        residual_out_own_.before.assign(residual_out_own_.buffer.bytes(), 0xff);
      }
    }
    if (is_fp8(out_)) scale_.upload(&scale, 4);
    reset();
  }

  // Every buffer back to what it held before a launch (in-place launches overwrite inputs).
  void reset() {
    for (Tensor* t : tensors()) t->buffer.upload(t->before.data(), t->before.size());
    if (mean_.bytes()) mean_.fill_bytes(0xff);
    if (rstd_.bytes()) rstd_.fill_bytes(0xff);
  }

  LaunchArgs args(int64_t batch) const {
    LaunchArgs a;
    a.x = x_.ptr();
    a.y = y_->ptr();
    a.weight = w_.get();
    a.bias = b_.get();
    a.batch = batch;
    a.eps = float(spec_.eps);
    if (spec_.residual) {
      a.residual = residual_.ptr();
      a.residual_out = residual_out_->ptr();
    }
    if (is_fp8(out_)) a.scale = static_cast<const float*>(scale_.get());
    if (spec_.save_stats) {
      a.rstd = static_cast<float*>(rstd_.get());
      if (spec_.op != Op::kRmsNorm) a.mean = static_cast<float*>(mean_.get());
    }
    if (trailing_) {
      a.inner_rows = c_.inner_rows;
      a.x_rows = x_.at.rows;
      a.y_rows = y_->at.rows;
      if (spec_.residual) {
        a.residual_rows = residual_.at.rows;
        a.residual_out_rows = residual_out_->at.rows;
      }
    }
    return a;
  }

  // The bytes of the first `batch` rows (items) the launch wrote, in logical order.
  Written written(int64_t batch) const {
    Written w;
    w.y = gather(*y_, download(*y_), batch);
    if (spec_.residual) w.h = gather(*residual_out_, download(*residual_out_), batch);
    const size_t stats_bytes = size_t(batch * units_per_row_) * 4;
    if (spec_.save_stats) {
      w.rstd.resize(stats_bytes);
      rstd_.download(w.rstd.data(), stats_bytes);
      if (mean_.bytes()) {
        w.mean.resize(stats_bytes);
        mean_.download(w.mean.data(), stats_bytes);
      }
    }
    return w;
  }

  // Everything a launch over the first `batch` rows (items) wrote against float64, and every
  // byte it must not have written. Without the reference: only the bytes outside the rows of
  // the outputs (gaps, rows past the batch) and past the statistics.
  Outcome check(int64_t batch, bool against_reference = true) const {
    Outcome o;
    std::vector<unsigned char> y_now, h_now;
    for (const Tensor* t : tensors()) {
      const bool output = t == y_ || (spec_.residual && t == residual_out_);
      if (!against_reference && !output) continue;
      std::vector<unsigned char> now = download(*t);
      outside_writes(*t, now, output ? batch : 0, o);
      if (t == y_) {
        y_now = std::move(now);
      } else if (output) {
        h_now = std::move(now);
      }
    }
    for (const device::Buffer* b : {&mean_, &rstd_}) {
      if (!b->bytes()) continue;
      std::vector<unsigned char> all(b->bytes());
      b->download(all.data(), all.size());
      for (size_t i = size_t(batch * units_per_row_) * 4; i < all.size(); ++i) {
        if (all[i] != 0xff && o.outside_writes++ == 0) {
          o.first_outside = std::string(b == &mean_ ? "mean" : "rstd") + " byte " +
                            std::to_string(i) + " (past the launched rows)";
        }
      }
    }
    if (!against_reference) return o;
    // h: exactly the rounded sum.
    if (spec_.residual) {
      const std::vector<unsigned char> h = gather(*residual_out_, h_now, batch);
      const size_t e = size_of(*spec_.residual);
      if (std::memcmp(h.data(), h_bytes_.data(), h.size()) != 0) {
        for (size_t i = 0; i < h.size(); i += e) {
          if (std::memcmp(&h[i], &h_bytes_[i], e) != 0 && o.h_mismatches++ == 0) {
            std::ostringstream s;
            s << "element " << i / e << ": " << decode_one(*spec_.residual, &h[i]) << ", expected "
              << decode_one(*spec_.residual, &h_bytes_[i]);
            o.first_h = s.str();
          }
        }
      }
    }
    // y and the statistics against float64, one reduction unit at a time: many units on
    // every thread at once, or the elements of each of a few long ones.
    const std::vector<unsigned char> y_bytes = gather(*y_, y_now, batch);
    std::vector<double> got(static_cast<size_t>(batch * row_len_));
    const int64_t oe = size_of(out_);
    parallel_chunks((int64_t(got.size()) + kChunk - 1) / kChunk, [&](int64_t c) {
      const int64_t begin = c * kChunk, len = std::min(kChunk, int64_t(got.size()) - begin);
      decode_into(out_, &y_bytes[begin * oe], &got[begin], len);
    });
    std::vector<float> mean, rstd;
    if (spec_.save_stats) {
      rstd.resize(size_t(batch * units_per_row_));
      rstd_.download(rstd.data(), rstd.size() * 4);
      if (mean_.bytes()) {
        mean.resize(rstd.size());
        mean_.download(mean.data(), mean.size() * 4);
      }
    }
    const int64_t units = batch * units_per_row_;
    const bool by_unit = units >= 4 * host_threads() || unit(0).n < kChunk;
    std::vector<Partial> partials;
    std::vector<UnitStats> stats(static_cast<size_t>(units));
    if (by_unit) {
      const int64_t per = std::max<int64_t>(1, kChunk / unit(0).n);
      const int64_t chunks = (units + per - 1) / per;
      partials.resize(size_t(chunks));
      parallel_chunks(chunks, [&](int64_t c) {
        for (int64_t u = c * per; u < std::min(units, (c + 1) * per); ++u) {
          stats[u] = unit_stats(u, /*parallel=*/false);
          compare(u, stats[u], 0, stats[u].n, got, partials[c]);
        }
      });
    } else {
      for (int64_t u = 0; u < units; ++u) {
        stats[u] = unit_stats(u, /*parallel=*/true);
        const int64_t chunks = (stats[u].n + kChunk - 1) / kChunk;
        std::vector<Partial> p(static_cast<size_t>(chunks));
        parallel_chunks(chunks, [&](int64_t c) {
          compare(u, stats[u], c * kChunk, std::min(stats[u].n, (c + 1) * kChunk), got, p[c]);
        });
        partials.insert(partials.end(), p.begin(), p.end());
      }
    }
    double err2 = 0, ref2 = 0;
    for (const Partial& p : partials) p.merge_into(o, err2, ref2);
    o.rel_error = o.nonfinite ? INFINITY : std::sqrt(err2 / std::max(ref2, 1e-300));
    if (spec_.save_stats) {
      for (int64_t u = 0; u < units; ++u) check_stats(u, stats[u], mean, rstd, o);
    }
    return o;
  }

  std::string layout_text() const {
    if (!trailing_) return "";
    std::string s;
    if (c_.inner_rows > 1) s += "inner_rows " + std::to_string(c_.inner_rows) + ", ";
    s += "x " + describe(x_.at) + ", y " + (c_.y_is_x ? "= x" : describe(y_own_.at));
    if (spec_.residual) {
      s += ", residual " + describe(residual_.at) + ", residual_out " +
           (c_.residual_out_is_residual ? "= residual" : describe(residual_out_own_.at));
    }
    return s;
  }

 private:
  struct Tensor {
    Dtype dtype = Dtype::kF32;
    Placement at;
    device::Buffer buffer;
    std::vector<unsigned char> before;  // what it held before a launch
    void* ptr() const { return static_cast<char*>(buffer.get()) + at.base * size_of(dtype); }
  };

  // Reduction unit u (statistics index u): element i at logical offset base + i * stride,
  // its parameter at first_param + i / per_param.
  struct Unit {
    int64_t n, base, stride, first_param, per_param;
    int64_t offset(int64_t i) const { return base + i * stride; }
    int64_t param(int64_t i) const { return first_param + (per_param == 1 ? i : i / per_param); }
  };
  // A unit's float64 statistics, and the rms of its reference output (the scale of its errors).
  struct UnitStats {
    int64_t n = 0;
    double mean = 0, var = 0, rstd = 0;
    double ref_rms = 0;  // of the values after the affine step (times the fp8 scale)
  };

  size_t stats_floats() const { return size_t(rows_ * units_per_row_ + 16); }  // 16 past the end

  // The buffers of a launch (y and residual_out only when not written in place).
  std::vector<const Tensor*> tensors() const {
    std::vector<const Tensor*> out = {&x_};
    if (!c_.y_is_x) out.push_back(&y_own_);
    if (spec_.residual) out.push_back(&residual_);
    if (spec_.residual && !c_.residual_out_is_residual) out.push_back(&residual_out_own_);
    return out;
  }
  std::vector<Tensor*> tensors() {
    std::vector<Tensor*> out;
    for (const Tensor* t : std::as_const(*this).tensors()) out.push_back(const_cast<Tensor*>(t));
    return out;
  }
  const char* name_of(const Tensor* t) const {
    if (t == &x_) return c_.y_is_x ? "x (= y)" : "x";
    if (t == &y_own_) return "y";
    if (t == &residual_)
      return c_.residual_out_is_residual ? "residual (= residual_out)" : "residual";
    return "residual_out";
  }

  // Element offset (from the buffer's start) of layout row r: a normalized row of the trailing
  // forms, one batch item of the channel and group forms (always contiguous).
  int64_t start(const Placement& p, int64_t r) const {
    if (!trailing_) return p.base + r * row_len_;
    const int64_t inner = p.rows.inner ? p.rows.inner : row_len_;
    const int64_t outer = p.rows.outer ? p.rows.outer : c_.inner_rows * inner;
    return p.base + (r / c_.inner_rows) * outer + (r % c_.inner_rows) * inner;
  }
  int64_t span(const Placement& p) const {
    int64_t end = 0;
    for (int64_t r = 0; r < rows_; ++r) end = std::max(end, start(p, r) + row_len_);
    return end + p.extra;
  }
  // Layout rows between logical order ([N, C, S] per item) and the buffer. layout=nhwc: each
  // item is permuted to [S, C] (channels innermost), as torch's channels_last holds it.
  void scatter(Tensor& t, const std::vector<unsigned char>& logical) {
    const int64_t e = size_of(t.dtype);
    for (int64_t r = 0; r < rows_; ++r) {
      if (spec_.nhwc()) {
        const int64_t c = spec_.channels(), s = spec_.spatial();
        for (int64_t ch = 0; ch < c; ++ch) {
          for (int64_t pos = 0; pos < s; ++pos) {
            std::memcpy(&t.before[(start(t.at, r) + pos * c + ch) * e],
                        &logical[(r * row_len_ + ch * s + pos) * e], e);
          }
        }
      } else {
        std::memcpy(&t.before[start(t.at, r) * e], &logical[r * row_len_ * e], row_len_ * e);
      }
    }
  }
  std::vector<unsigned char> gather(const Tensor& t, const std::vector<unsigned char>& physical,
                                    int64_t batch) const {
    const int64_t e = size_of(t.dtype);
    std::vector<unsigned char> out(size_t(batch * row_len_ * e));
    for (int64_t r = 0; r < batch; ++r) {
      if (spec_.nhwc()) {
        const int64_t c = spec_.channels(), s = spec_.spatial();
        for (int64_t ch = 0; ch < c; ++ch) {
          for (int64_t pos = 0; pos < s; ++pos) {
            std::memcpy(&out[(r * row_len_ + ch * s + pos) * e],
                        &physical[(start(t.at, r) + pos * c + ch) * e], e);
          }
        }
      } else {
        std::memcpy(&out[r * row_len_ * e], &physical[start(t.at, r) * e], row_len_ * e);
      }
    }
    return out;
  }
  static std::vector<unsigned char> download(const Tensor& t) {
    std::vector<unsigned char> out(t.buffer.bytes());
    t.buffer.download(out.data(), out.size());
    return out;
  }

  // Bytes of t outside its first `rows` rows that differ from what it held before the launch.
  void outside_writes(const Tensor& t, const std::vector<unsigned char>& now, int64_t rows,
                      Outcome& o) const {
    const int64_t e = size_of(t.dtype);
    std::vector<std::pair<int64_t, int64_t>> written;  // byte ranges of the rows
    for (int64_t r = 0; r < rows; ++r) {
      written.push_back({start(t.at, r) * e, (start(t.at, r) + row_len_) * e});
    }
    std::sort(written.begin(), written.end());
    written.push_back({int64_t(now.size()), int64_t(now.size())});
    int64_t from = 0;
    for (const auto& [begin, end] : written) {
      if (begin > from && std::memcmp(&now[from], &t.before[from], size_t(begin - from)) != 0) {
        for (int64_t i = from; i < begin; ++i) {
          if (now[i] != t.before[i] && o.outside_writes++ == 0) {
            o.first_outside = std::string(name_of(&t)) + " byte " + std::to_string(i);
          }
        }
      }
      from = std::max(from, end);
    }
  }

  Unit unit(int64_t u) const {
    if (spec_.op == Op::kGroupNorm) {
      const int64_t g = spec_.groups, cg = spec_.channels() / g, s = spec_.spatial();
      return {cg * s, ((u / g) * spec_.channels() + (u % g) * cg) * s, 1, (u % g) * cg, s};
    }
    if (!trailing_) {  // the channel forms: (n, position) over the channels
      const int64_t c = spec_.channels(), s = spec_.spatial();
      return {c, (u / s) * c * s + u % s, s, 0, 1};
    }
    return {row_len_, u * row_len_, 1, 0, 1};
  }

  // The float64 value of element i of a unit after the affine step (before the activation).
  double affine(const Unit& un, const UnitStats& st, int64_t i) const {
    double v = (double(data_[un.offset(i)]) - st.mean) * st.rstd;
    if (!w_eff_.empty()) v *= w_eff_[un.param(i)];
    if (!bias_.empty()) v += bias_[un.param(i)];
    return v;
  }
  // The float64 reference of element i of a unit: the activation of affine() (times the fp8
  // scale).
  double reference(const Unit& un, const UnitStats& st, int64_t i) const {
    const double v = reference::activate(spec_.activation, affine(un, st, i));
    return is_fp8(out_) ? v * double(scale_value_) : v;
  }

  // Sum of f(i) over [0, n) in float64: in chunks on every thread, or here.
  template <class F>
  static double sum_of(int64_t n, bool parallel, F f) {
    if (!parallel) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += f(i);
      return s;
    }
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<double> partial(static_cast<size_t>(chunks));
    parallel_chunks(chunks, [&](int64_t c) {
      double s = 0;
      for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) s += f(i);
      partial[c] = s;
    });
    double s = 0;
    for (double p : partial) s += p;
    return s;
  }

  UnitStats unit_stats(int64_t u, bool parallel) const {
    const Unit un = unit(u);
    UnitStats st;
    st.n = un.n;
    if (spec_.op != Op::kRmsNorm) {
      st.mean = sum_of(un.n, parallel, [&](int64_t i) { return double(data_[un.offset(i)]); }) /
                double(un.n);
    }
    st.var = sum_of(un.n, parallel,
                    [&](int64_t i) {
                      const double d = double(data_[un.offset(i)]) - st.mean;
                      return d * d;
                    }) /
             double(un.n);
    st.rstd = 1.0 / std::sqrt(st.var + double(float(spec_.eps)));  // the kernel's eps is a float
    const double scale = is_fp8(out_) ? double(scale_value_) : 1.0;
    st.ref_rms = std::sqrt(sum_of(un.n, parallel,
                                  [&](int64_t i) {
                                    const double a = affine(un, st, i) * scale;
                                    return a * a;
                                  }) /
                           double(un.n));
    return st;
  }

  // Elements [begin, end) of unit u: y against the reference.
  void compare(int64_t u, const UnitStats& st, int64_t begin, int64_t end,
               const std::vector<double>& got, Partial& p) const {
    const Unit un = unit(u);
    const bool fp8 = is_fp8(out_), rounded = out_ != Dtype::kF32;
    const double k = slack_factor(values_);
    const double scale = fp8 ? double(scale_value_) : 1.0;
    const double max = fp8 ? grid(out_).max() : INFINITY;
    for (int64_t i = begin; i < end; ++i) {
      const double g = got[un.offset(i)], r = reference(un, st, i);
      ++p.elements;
      if (!std::isfinite(g)) {
        ++p.nonfinite;
        continue;
      }
      p.err2 += (g - r) * (g - r);
      p.ref2 += r * r;
      if (!rounded) continue;
      const double b = bias_.empty() ? 0.0 : std::fabs(bias_[un.param(i)]) * scale;
      double slack = k * (std::fabs(affine(un, st, i)) * scale + b + st.ref_rms);
      if (spec_.activation != Activation::kNone) {
        slack = kActivationSlope * slack + kActivationError * (std::fabs(r) + st.ref_rms);
      }
      const double lo = round_to(out_, r - slack), hi = round_to(out_, r + slack);
      if (g == round_to(out_, r)) ++p.exact;
      if ((g < lo || g > hi) && p.misrounded++ == 0) {
        std::ostringstream s;
        s.precision(9);
        s << "element " << un.offset(i) << ": " << g << ", reference " << r << " (allowed [" << lo
          << ", " << hi << "])";
        p.first_misrounded = s.str();
      }
      if (fp8 && std::fabs(r) - slack > max) {
        (r > 0 ? p.saturated_pos : p.saturated_neg)++;
        if (g != (r > 0 ? max : -max)) ++p.saturated_wrong;
      }
    }
  }

  void check_stats(int64_t u, const UnitStats& st, const std::vector<float>& mean,
                   const std::vector<float>& rstd, Outcome& o) const {
    auto note = [&](const char* what, double g, double r) {
      std::ostringstream s;
      s.precision(9);
      s << what << " of unit " << u << ": " << g << ", reference " << r;
      return s.str();
    };
    const double rs = rstd[u];
    if (!std::isfinite(rs)) {
      if (o.stats_nonfinite++ == 0) o.first_stats = note("rstd", rs, st.rstd);
    } else {
      o.rstd_error = std::max(o.rstd_error, std::fabs(rs - st.rstd) / st.rstd);
    }
    if (mean.empty()) return;
    const double m = mean[u];
    if (!std::isfinite(m)) {
      if (o.stats_nonfinite++ == 0) o.first_stats = note("mean", m, st.mean);
      return;
    }
    const double e = std::fabs(m - st.mean) / (std::fabs(st.mean) + std::sqrt(st.var) + 1e-300);
    if (e > o.mean_error) {
      o.mean_error = e;
      if (o.stats_nonfinite == 0) o.first_stats = "worst " + note("mean", m, st.mean);
    }
  }

  // Weight N(1, 0.5), bias N(0, 0.5), in the parameter dtype; the reference takes the rounded
  // values, the weight as (offset + w) summed in f32 as the kernel does.
  void make_parameters() {
    const Dtype pd = spec_.param_type();
    std::mt19937_64 rng(c_.seed + 1);
    std::normal_distribution<float> normal(1.0f, 0.5f);
    auto make = [&](device::Buffer& buffer, float shift) {
      std::vector<float> v(static_cast<size_t>(spec_.param_elements()));
      for (float& e : v) e = normal(rng) + shift;
      const auto bytes = reference::encode(pd, v);
      buffer = device::Buffer(bytes.size());
      buffer.upload(bytes.data(), bytes.size());
      return reference::decode(pd, bytes.data(), v.size());
    };
    if (spec_.affine != Affine::kNone) {
      for (float w : make(w_, 0.0f)) w_eff_.push_back(double(float(spec_.weight_offset) + w));
    }
    if (spec_.affine == Affine::kBoth) {
      for (float b : make(b_, -1.0f)) bias_.push_back(b);
    }
  }

  Case c_;
  NormSpec spec_;
  bool trailing_ = true;       // rows of the last dims (strides apply), not channels or groups
  int64_t row_len_ = 0;        // elements of a layout row (normalized row, or batch item)
  int64_t rows_ = 0;           // layout rows of the largest launch (the spec's batch)
  int64_t units_per_row_ = 1;  // reduction units (and statistics) per layout row
  Dtype out_ = Dtype::kF32;
  Tensor x_, y_own_, residual_, residual_out_own_;
  Tensor* y_ = nullptr;
  Tensor* residual_out_ = nullptr;
  device::Buffer w_, b_, mean_, rstd_, scale_;
  std::vector<double> w_eff_, bias_;
  std::vector<unsigned char> x_bytes_, residual_bytes_, h_bytes_;  // logical order
  std::vector<float> data_;  // what is normalized: x, or h, as rounded (logical order)
  Values values_ = Values::kNormal;
  float scale_value_ = 1.0f;
};

// ---------------------------------------------------------------------------------------
// Running cases: compile them in parallel first (NVRTC dominates the run time), then launch
// and check each, one printed line per case.

void prepare_in_parallel(Engine& engine, const std::vector<Case>& cases) {
  std::vector<NormSpec> specs;
  for (const Case& c : cases) {
    try {
      specs.push_back(NormSpec::from_fields(c.fields));
    } catch (...) {
      // reported where the case runs
    }
  }
  testing::prepare_in_parallel(engine, specs);
}

std::string strategy_of(const NormSpec& spec, const Target& target) {
  try {
    return to_string(plan(spec, target).strategy);
  } catch (const std::exception& e) {
    return std::string("(no plan: ") + e.what() + ")";
  }
}

// Worst results over a test, printed at its end.
struct Summary {
  int cases = 0, failed_to_run = 0;
  double worst_f32_out = 0, worst_16_out = 0, worst_mean = 0, worst_rstd = 0;
  int64_t elements = 0, fp8_exact = 0, fp8_checked = 0;
  std::set<std::string> strategies;
  void print(const char* what, std::chrono::steady_clock::time_point since) const {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
    std::printf(
        "[ summary  ] %s: %d cases (%d could not run), %lld elements in %.1f s; worst y error "
        "f32 out %.2e, 16-bit out %.2e; fp8 exactly rounded %.4f%%; stats mean %.2e rstd "
        "%.2e; strategies:",
        what, cases, failed_to_run, static_cast<long long>(elements), s, worst_f32_out,
        worst_16_out, fp8_checked ? 100.0 * double(fp8_exact) / double(fp8_checked) : 100.0,
        worst_mean, worst_rstd);
    for (const std::string& st : strategies) std::printf(" %s", st.c_str());
    std::printf("\n");
  }
};

// The assertions of one outcome; `what` names the case in every message.
void expect_outcome(const NormSpec& spec, const Outcome& o, Values values, const std::string& what,
                    Summary& summary) {
  const Dtype out = spec.out_type();
  const double tol = f32_tolerance(values);
  EXPECT_EQ(o.nonfinite, 0) << what << ": y elements left unwritten (poison) or not finite";
  if (out == Dtype::kF32) {
    EXPECT_LT(o.rel_error, tol) << what;
    summary.worst_f32_out = std::max(summary.worst_f32_out, o.rel_error);
  } else if (!is_fp8(out)) {
    EXPECT_LT(o.rel_error, tolerance(out)) << what;
    summary.worst_16_out = std::max(summary.worst_16_out, o.rel_error);
  }
  if (out != Dtype::kF32) {
    EXPECT_EQ(o.misrounded, 0) << what << ": " << o.misrounded << " of " << o.elements
                               << " outputs outside the rounding of the reference; first "
                               << o.first_misrounded;
  }
  if (is_fp8(out)) {
    summary.fp8_exact += o.exact;
    summary.fp8_checked += o.elements;
  }
  EXPECT_EQ(o.saturated_wrong, 0) << what << ": outputs past the largest finite value not "
                                  << "saturated to it";
  EXPECT_EQ(o.h_mismatches, 0) << what << ": residual_out differs from round(x + residual); first "
                               << o.first_h;
  EXPECT_EQ(o.outside_writes, 0) << what << ": bytes written outside the rows; first "
                                 << o.first_outside;
  if (spec.save_stats) {
    EXPECT_EQ(o.stats_nonfinite, 0) << what << ": statistics not written; first " << o.first_stats;
    EXPECT_LT(o.rstd_error, tol) << what;
    EXPECT_LT(o.mean_error, tol) << what << ": " << o.first_stats;
    summary.worst_mean = std::max(summary.worst_mean, o.mean_error);
    summary.worst_rstd = std::max(summary.worst_rstd, o.rstd_error);
  }
  summary.elements += o.elements;
}

std::string line_of(const VariantRun& run, const Case& c, int64_t batch, const std::string& strat) {
  std::string s = run.spec().to_string() + " | batch " + std::to_string(batch);
  const std::string layout = run.layout_text();
  if (!layout.empty()) s += " | " + layout;
  if (is_fp8(run.spec().out_type())) s += " | scale " + format_float(c.scale);
  s += std::string(" | ") + to_string(c.values);
  if (run.spec().residual) s += std::string(" + residual ") + to_string(c.residual_values);
  if (c.y_is_x) s += " | y = x";
  return s + " | " + strat;
}

void print_result(const NormSpec& spec, const Outcome& o) {
  std::printf("             y err %.2e", o.rel_error);
  if (spec.out_type() != Dtype::kF32) {
    std::printf(", rounded exactly %.3f%%", o.elements ? 100.0 * o.exact / o.elements : 0.0);
  }
  if (o.saturated_pos + o.saturated_neg) {
    std::printf(", saturated +%lld -%lld", static_cast<long long>(o.saturated_pos),
                static_cast<long long>(o.saturated_neg));
  }
  if (spec.residual) std::printf(", h %s", o.h_mismatches ? "DIFFERS" : "exact");
  if (spec.save_stats) std::printf(", mean err %.2e rstd err %.2e", o.mean_error, o.rstd_error);
  if (o.outside_writes)
    std::printf(", %lld bytes written outside", static_cast<long long>(o.outside_writes));
  std::printf("\n");
}

// Runs one case (one launch on the legacy stream) and checks it; returns its outcome, or
// nothing (after a reported failure) when it could not be prepared or launched.
std::optional<Outcome> run_case(Engine& engine, const Target& target, const Case& c,
                                Summary& summary) {
  ++summary.cases;
  std::string what = c.fields.shape ? format_shape(*c.fields.shape) : "?";
  try {
    const NormSpec spec = NormSpec::from_fields(c.fields);
    what = spec.to_string();
    VariantRun run(c);
    const int64_t batch = c.batch ? c.batch : spec.batch();
    const std::string strat = strategy_of(spec, target);
    summary.strategies.insert(strat);
    what = line_of(run, c, batch, strat);
    std::printf("[ variant  ] %s\n", what.c_str());
    const Kernel kernel = engine.prepare(spec);
    kernel.launch(run.args(batch), nullptr);
    NORMJIT_CU(driver::api().cuCtxSynchronize());
    const Outcome o = run.check(batch);
    print_result(spec, o);
    expect_outcome(spec, o, c.values, what, summary);
    return o;
  } catch (const std::exception& e) {
    ++summary.failed_to_run;
    ADD_FAILURE() << what << ": " << e.what();
    return std::nullopt;
  }
}

void run_cases(const char* title, const std::vector<Case>& cases,
               std::vector<std::optional<Outcome>>* outcomes = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  device::PrimaryContext context;
  const Target target = device::target_of(context.device());
  Engine engine(test_engine_options());
  prepare_in_parallel(engine, cases);
  Summary summary;
  for (const Case& c : cases) {
    std::optional<Outcome> o = run_case(engine, target, c, summary);
    if (outcomes) outcomes->push_back(std::move(o));
  }
  summary.print(title, t0);
}

class Variants : public ::testing::Test {
 protected:
  void SetUp() override { NORMJIT_REQUIRE_GPU(); }
};

const Dtype kXDtypes[] = {Dtype::kF32, Dtype::kF16, Dtype::kBF16};
const Dtype kOutDtypes[] = {Dtype::kF32, Dtype::kF16, Dtype::kBF16, Dtype::kE4M3, Dtype::kE5M2};

// ---------------------------------------------------------------------------------------
// The reference itself (no GPU): fp8 decoding and encoding, rounding onto the 16-bit grids.

TEST(VariantsReference, Fp8DecodeAndEncodeFollowTheOcpFormats) {
  EXPECT_EQ(decode_fp8(Dtype::kE4M3, 0x7e), 448.0);
  EXPECT_EQ(decode_fp8(Dtype::kE4M3, 0xfe), -448.0);
  EXPECT_TRUE(std::isnan(decode_fp8(Dtype::kE4M3, 0x7f)));
  EXPECT_TRUE(std::isnan(decode_fp8(Dtype::kE4M3, 0xff)));
  EXPECT_EQ(decode_fp8(Dtype::kE4M3, 0x78), 256.0);              // S.1111.000: finite in E4M3
  EXPECT_EQ(decode_fp8(Dtype::kE4M3, 0x38), 1.0);                // exponent 7 = bias
  EXPECT_EQ(decode_fp8(Dtype::kE4M3, 0x08), std::ldexp(1, -6));  // smallest normal
  EXPECT_EQ(decode_fp8(Dtype::kE4M3, 0x01), std::ldexp(1, -9));  // smallest subnormal
  EXPECT_EQ(decode_fp8(Dtype::kE4M3, 0x07), 7 * std::ldexp(1, -9));
  EXPECT_EQ(decode_fp8(Dtype::kE5M2, 0x7b), 57344.0);
  EXPECT_EQ(decode_fp8(Dtype::kE5M2, 0x7c), INFINITY);
  EXPECT_EQ(decode_fp8(Dtype::kE5M2, 0xfc), -INFINITY);
  EXPECT_TRUE(std::isnan(decode_fp8(Dtype::kE5M2, 0x7d)));
  EXPECT_EQ(decode_fp8(Dtype::kE5M2, 0x3c), 1.0);
  EXPECT_EQ(decode_fp8(Dtype::kE5M2, 0x04), std::ldexp(1, -14));
  EXPECT_EQ(decode_fp8(Dtype::kE5M2, 0x01), std::ldexp(1, -16));
  EXPECT_EQ(decode_fp8(Dtype::kE5M2, 0x80), 0.0);
  for (Dtype d : {Dtype::kE4M3, Dtype::kE5M2}) {
    int finite = 0;
    for (int c = 0; c < 256; ++c) {  // every finite code encodes back to itself
      const double v = decode_fp8(d, uint8_t(c));
      if (!std::isfinite(v)) continue;
      ++finite;
      EXPECT_EQ(int(encode_fp8(d, v)), c) << to_string(d) << " code " << c;
    }
    EXPECT_EQ(finite, d == Dtype::kE4M3 ? 254 : 248);
    EXPECT_EQ(encode_fp8(d, 1e30), fp8_max_code(d)) << to_string(d);  // saturation
    EXPECT_EQ(encode_fp8(d, -1e30), 0x80 | fp8_max_code(d)) << to_string(d);
    EXPECT_EQ(encode_fp8(d, fp8_max(d) * 1.2), fp8_max_code(d)) << to_string(d);
    EXPECT_EQ(encode_fp8(d, std::ldexp(1, -30)), 0) << to_string(d);  // underflow to zero
    EXPECT_TRUE(std::isnan(decode_fp8(d, encode_fp8(d, NAN)))) << to_string(d);
  }
  // Ties go to the even code: between 1 and 1.125 (E4M3), 1 and 1.25 (E5M2).
  EXPECT_EQ(encode_fp8(Dtype::kE4M3, 1.0625), 0x38);
  EXPECT_EQ(encode_fp8(Dtype::kE4M3, 1.1875), 0x3a);
  EXPECT_EQ(encode_fp8(Dtype::kE4M3, 1.0625 + 1e-9), 0x39);
  EXPECT_EQ(encode_fp8(Dtype::kE5M2, 1.125), 0x3c);
  EXPECT_EQ(encode_fp8(Dtype::kE5M2, 1.375), 0x3e);
  EXPECT_EQ(encode_fp8(Dtype::kE4M3, -std::ldexp(1, -10)), 0x80);  // half the least: to -0
  // Rounding a double straight to 16 bits (round-to-odd through a float) agrees with the
  // grids, also next to midpoints, where rounding to a float first would round twice.
  std::mt19937_64 rng_d(11);
  std::uniform_real_distribution<double> unit_d(-4.0, 4.0);
  for (Dtype d : {Dtype::kF16, Dtype::kBF16, Dtype::kE4M3, Dtype::kE5M2}) {
    for (int i = 0; i < 100000; ++i) {
      double v = unit_d(rng_d);
      if (i % 3) {  // a midpoint of two grid values, exactly or nudged far below a float ulp
        const double mid = (grid(d).round(v) + grid(d).step(v, 1)) / 2;
        v = mid + (i % 3 == 1 ? 0.0 : std::ldexp(std::fabs(mid), -40) * (i % 2 ? 1 : -1));
      }
      ASSERT_EQ(round_to(d, v), grid(d).round(v)) << to_string(d) << " " << v;
    }
  }
  // The 16-bit grids round as the harness's conversions (round to nearest even).
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-26, 14);  // below f16 overflow
  for (int i = 0; i < 100000; ++i) {
    const float v = std::ldexp(mantissa(rng), exponent(rng));
    ASSERT_EQ(grid(Dtype::kF16).round(v), reference::half_to_float(reference::float_to_half(v)))
        << v;
    ASSERT_EQ(grid(Dtype::kBF16).round(v), reference::bf16_to_float(reference::float_to_bf16(v)))
        << v;
  }
}

// ---------------------------------------------------------------------------------------
// One axis at a time.

TEST_F(Variants, ParamDtypeF32ParamsWith16BitXAndBf16ParamsWithF32X) {
  // With the output in f32 as well, parameters rounded to x's dtype would show as 1e-3 errors.
  std::vector<Case> cases;
  const std::pair<Dtype, Dtype> pairs[] = {
      {Dtype::kF16, Dtype::kF32}, {Dtype::kBF16, Dtype::kF32}, {Dtype::kF32, Dtype::kBF16}};
  uint64_t seed = 1;
  for (const auto& [x, p] : pairs) {
    for (bool f32_out : {false, true}) {
      // f32 x: the other output is bf16 (f32 is x's own).
      const Dtype out = x == Dtype::kF32 ? Dtype::kBF16 : Dtype::kF32;
      auto add = [&](Case c, Values v) {
        c.params(p).with(v, seed++);
        if (f32_out) c.out(out);
        cases.push_back(c);
      };
      add(rms({7, 4096}, x), Values::kNormal);
      add(rms({5, 3, 1000}, x, Affine::kWeight, 2), Values::kNegative);
      add(rms_channels({2, 64, 33, 17}, x), Values::kNormal);
      add(layer_norm_channels({2, 96, 14, 14}, x), Values::kNormal);
      add(layer_norm_channels({2, 24, 7, 7}, x, Affine::kWeight), Values::kNegative);
      add(layer_norm({5, 1000}, x), Values::kNormal);
      add(layer_norm({3, 4097}, x, Affine::kWeight), Values::kNormal);
      add(group_norm({2, 32, 9, 9}, x, 8), Values::kNormal);
      add(group_norm({3, 16, 65}, x, 2, Affine::kWeight), Values::kNegative);
    }
  }
  run_cases("param dtype", cases);
}

TEST_F(Variants, OutDtypeEveryXDtypeToEveryOutDtypeOnEveryForm) {
  // fp8 scales alternate 0.5 and 4.0.
  std::vector<Case> cases;
  uint64_t seed = 100;
  int i = 0;
  for (Dtype x : kXDtypes) {
    for (Dtype out : kOutDtypes) {
      const float scale = i++ % 2 ? 4.0f : 0.5f;
      cases.push_back(rms({7, 4096}, x).out(out, scale).with(Values::kNormal, seed++));
      cases.push_back(
          rms_channels({2, 64, 16, 16}, x).out(out, scale).with(Values::kNormal, seed++));
      cases.push_back(
          layer_norm_channels({2, 96, 8, 8}, x).out(out, scale).with(Values::kNormal, seed++));
      cases.push_back(layer_norm({3, 5120}, x).out(out, scale).with(Values::kNormal, seed++));
      cases.push_back(
          group_norm({2, 64, 14, 14}, x, 8).out(out, scale).with(Values::kNormal, seed++));
    }
  }
  run_cases("out dtype", cases);
}

TEST_F(Variants, Fp8OutputSaturatesToTheLargestFiniteValue) {
  // Scales that push a good part of each row past the largest finite value, both signs:
  // e4m3 at 100 saturates |y| > 4.48, e5m2 at 20000 saturates |y| > 2.87.
  std::vector<Case> cases;
  uint64_t seed = 200;
  for (Dtype out : {Dtype::kE4M3, Dtype::kE5M2}) {
    const float scale = out == Dtype::kE4M3 ? 100.0f : 20000.0f;
    cases.push_back(rms({4, 4096}, Dtype::kBF16).out(out, scale).with(Values::kNormal, seed++));
    cases.push_back(
        layer_norm({3, 1000}, Dtype::kF32).out(out, scale).with(Values::kNormal, seed++));
    cases.push_back(
        rms_channels({2, 32, 8, 8}, Dtype::kF16).out(out, scale).with(Values::kNormal, seed++));
    cases.push_back(layer_norm_channels({2, 32, 8, 8}, Dtype::kBF16)
                        .out(out, scale)
                        .with(Values::kNormal, seed++));
    cases.push_back(
        group_norm({2, 16, 10, 10}, Dtype::kF32, 4).out(out, scale).with(Values::kNormal, seed++));
    // With f32 parameters and a residual, the way a quantizing decoder layer calls it.
    cases.push_back(rms({7, 4096}, Dtype::kBF16)
                        .params(Dtype::kF32)
                        .add_residual(Dtype::kBF16, /*in_place=*/true)
                        .out(out, scale)
                        .with(Values::kNormal, seed++));
  }
  std::vector<std::optional<Outcome>> outcomes;
  run_cases("fp8 saturation", cases, &outcomes);
  for (size_t i = 0; i < cases.size() && i < outcomes.size(); ++i) {
    if (!outcomes[i]) continue;
    EXPECT_GT(outcomes[i]->saturated_pos, 0) << format_shape(*cases[i].fields.shape);
    EXPECT_GT(outcomes[i]->saturated_neg, 0) << format_shape(*cases[i].fields.shape);
  }
}

TEST_F(Variants, ResidualExactSumWrittenInPlaceOrSeparateAndItsNorm) {
  // Residual in x's dtype and in f32; h over the residual or into its own buffer; y over x
  // or not (vLLM's fused_add_rms_norm: x becomes y, residual becomes h).
  std::vector<Case> cases;
  const std::vector<int64_t> shapes[] = {{7, 4096}, {128, 2048}, {3, 1000}, {1, 5120}};
  uint64_t seed = 300;
  int i = 0;
  for (Op op : {Op::kRmsNorm, Op::kLayerNorm}) {
    for (Dtype x : kXDtypes) {
      for (Dtype r : {x, Dtype::kF32}) {
        if (x == Dtype::kF32 && r == Dtype::kF32 && i % 2) continue;  // the same pair twice
        for (int mode = 0; mode < 4; ++mode) {
          const std::vector<int64_t>& shape = shapes[i++ % 4];
          Case c = op == Op::kRmsNorm ? rms(shape, x) : layer_norm(shape, x);
          c.add_residual(r, /*in_place=*/mode % 2 == 1).with(Values::kNormal, seed++);
          if (mode >= 2) c.y_over_x();
          cases.push_back(c);
        }
      }
    }
  }
  // A residual stream much larger than x (late layers), and a negative x.
  cases.push_back(rms({7, 4096}, Dtype::kBF16)
                      .add_residual(Dtype::kBF16, true)
                      .with(Values::kNormal, seed++)
                      .residual_with(Values::kLargeMean));
  cases.push_back(layer_norm({5, 3000}, Dtype::kF16)
                      .add_residual(Dtype::kF32, false)
                      .with(Values::kNegative, seed++)
                      .residual_with(Values::kTiny));
  run_cases("residual", cases);
}

TEST_F(Variants, WeightOffsetOneAndHalfWithAndWithoutBias) {
  // Gemma's RMSNorm (offset 1, w around 0 in its checkpoints) and zero-centred gamma.
  std::vector<Case> cases;
  uint64_t seed = 400;
  int i = 0;
  for (double offset : {1.0, 0.5}) {
    auto d = [&] { return kXDtypes[i++ % 3]; };
    cases.push_back(rms({7, 4096}, d()).offset(offset).with(Values::kNormal, seed++));
    cases.push_back(rms_channels({2, 64, 9, 9}, d()).offset(offset).with(Values::kNormal, seed++));
    cases.push_back(
        layer_norm_channels({2, 64, 9, 9}, d()).offset(offset).with(Values::kNormal, seed++));
    cases.push_back(
        layer_norm({5, 1000}, d(), Affine::kWeight).offset(offset).with(Values::kNormal, seed++));
    cases.push_back(
        layer_norm({5, 1000}, d(), Affine::kBoth).offset(offset).with(Values::kNormal, seed++));
    cases.push_back(group_norm({2, 32, 7, 7}, d(), 8, Affine::kWeight)
                        .offset(offset)
                        .with(Values::kNormal, seed++));
    cases.push_back(group_norm({2, 32, 7, 7}, d(), 4, Affine::kBoth)
                        .offset(offset)
                        .with(Values::kNegative, seed++));
  }
  // Gemma's decoder layer: bf16 x and weight, offset 1, residual added in place.
  cases.push_back(rms({7, 3072}, Dtype::kBF16)
                      .offset(1.0)
                      .add_residual(Dtype::kBF16, true)
                      .with(Values::kNormal, seed++));
  run_cases("weight offset", cases);
}

TEST_F(Variants, SaveStatsMeanAndRstdMatchFloat64OfTheRoundedInputs) {
  // Statistics of the values as rounded (x, or h), so the f32 tolerance holds for 16-bit x.
  std::vector<Case> cases;
  const Values values[] = {Values::kNormal, Values::kLargeMean, Values::kTiny, Values::kNegative,
                           Values::kConstant};
  uint64_t seed = 500;
  int i = 0;
  for (Dtype x : kXDtypes) {
    auto v = [&] { return values[i++ % 5]; };
    cases.push_back(layer_norm({5, 1000}, x).stats().with(v(), seed++));
    cases.push_back(layer_norm({3, 65537}, x, Affine::kNone).stats().with(v(), seed++));
    cases.push_back(group_norm({2, 32, 9, 9}, x, 8).stats().with(v(), seed++));
    cases.push_back(group_norm({3, 16, 33}, x, 2).stats().with(v(), seed++));
    cases.push_back(rms({7, 4096}, x).stats().with(v(), seed++));
    cases.push_back(rms_channels({2, 64, 17, 5}, x).stats().with(v(), seed++));
    cases.push_back(layer_norm_channels({2, 96, 17, 5}, x).stats().with(v(), seed++));
    cases.push_back(  // read twice: the shifted one-pass statistics
        layer_norm_channels({1, 4099, 4}, x, Affine::kNone).stats().with(v(), seed++));
  }
  // Statistics of h, not of x.
  cases.push_back(rms({7, 4096}, Dtype::kBF16)
                      .add_residual(Dtype::kBF16, true)
                      .stats()
                      .with(Values::kNormal, seed++));
  cases.push_back(layer_norm({5, 2048}, Dtype::kF16)
                      .add_residual(Dtype::kF32, false)
                      .stats()
                      .with(Values::kLargeMean, seed++));
  run_cases("save stats", cases);
}

// ---------------------------------------------------------------------------------------
// Strided rows.

TEST_F(Variants, StridedRowsOneLevelSliceOfAWiderTensor) {
  // x a column slice [T, H] of a [T, W] tensor; y, residual and residual_out each with strides
  // of their own (multiples of 16 elements); the gaps between rows stay as they were.
  std::vector<Case> cases;
  uint64_t seed = 600;
  // q of a [T, 3H] qkv tensor, and its v slice (base 2H); y contiguous.
  cases.push_back(
      rms({7, 4096}, Dtype::kBF16).rows_at(slice(0, 3 * 4096), {}).with(Values::kNormal, seed++));
  cases.push_back(rms({128, 2048}, Dtype::kF16)
                      .rows_at(slice(2 * 2048, 3 * 2048), slice(16, 2048 + 64))
                      .with(Values::kNormal, seed++));
  cases.push_back(layer_norm({5, 1000}, Dtype::kF32)
                      .rows_at(slice(16, 1040), slice(32, 1056))
                      .with(Values::kLargeMean, seed++));
  // Four distinct layouts.
  cases.push_back(rms({7, 4096}, Dtype::kF16)
                      .add_residual(Dtype::kF16, false)
                      .rows_at(slice(0, 4096 + 64), slice(48, 4096 + 128))
                      .residual_at(slice(16, 4096 + 16), slice(32, 4096 + 32))
                      .with(Values::kNormal, seed++));
  cases.push_back(layer_norm({9, 2048}, Dtype::kBF16)
                      .add_residual(Dtype::kF32, false)
                      .rows_at(slice(64, 3 * 2048), slice(0, 2048 + 16))
                      .residual_at(slice(0, 2048 + 48), slice(16, 2048 + 80))
                      .with(Values::kNormal, seed++));
  // In place on strided rows: y over x, h over the residual (the same layouts).
  Case in_place = layer_norm({6, 1024}, Dtype::kBF16)
                      .add_residual(Dtype::kBF16, true)
                      .y_over_x()
                      .with(Values::kNormal, seed++);
  in_place.x = slice(32, 1024 + 96);
  in_place.residual = slice(16, 1024 + 32);
  cases.push_back(in_place);
  // fp8 output rows with a stride of their own.
  cases.push_back(rms({7, 4096}, Dtype::kBF16)
                      .params(Dtype::kF32)
                      .out(Dtype::kE4M3, 0.5f)
                      .rows_at(slice(0, 2 * 4096), slice(16, 4096 + 16))
                      .with(Values::kNormal, seed++));
  // Odd row lengths with strides and bases that are multiples of 1 only.
  cases.push_back(rms({5, 4097}, Dtype::kBF16)
                      .add_residual(Dtype::kF32, false)
                      .rows_at(slice(3, 4099), slice(1, 4101))
                      .residual_at(slice(5, 4103), slice(7, 4097 + 9))
                      .with(Values::kNormal, seed++));
  cases.push_back(layer_norm({4, 1001}, Dtype::kF32)
                      .out(Dtype::kBF16)
                      .stats()
                      .rows_at(slice(1, 1003), slice(5, 1011))
                      .with(Values::kNegative, seed++));
  cases.push_back(
      rms({6, 1}, Dtype::kF32).rows_at(slice(16, 16), slice(0, 32)).with(Values::kNormal, seed++));
  cases.push_back(layer_norm({5, 3}, Dtype::kF16)
                      .rows_at(slice(1, 7), slice(2, 5))
                      .with(Values::kNormal, seed++));
  // Rows split over CTAs, a slice of a wider tensor.
  cases.push_back(layer_norm({3, 1000003}, Dtype::kBF16)
                      .rows_at(slice(7, 1000003 + 5), slice(1, 1000003 + 2))
                      .with(Values::kNegative, seed++));
  run_cases("strided rows, one level", cases);
}

TEST_F(Variants, StridedRowsTwoLevelsPerHeadSliceOfQkv) {
  // Per-head QK-norm: rows of [T, heads, dim] sliced out of a [T, W] qkv tensor: inner_rows =
  // heads, inner = dim, outer = W; Llama-like: 8 q heads, 2 kv heads, dim 128, W = 12 * 128.
  std::vector<Case> cases;
  const int64_t dim = 128, w = 12 * dim;
  uint64_t seed = 700;
  // q heads (base 0) normalized in place, as engines do.
  cases.push_back(rms({7, 8, dim}, Dtype::kBF16)
                      .two_level(8)
                      .y_over_x()
                      .rows_at(heads(0, w, dim), {})
                      .with(Values::kNormal, seed++));
  // k heads (base 8 * dim) into a contiguous y, and into a padded per-head layout of another
  // tensor.
  cases.push_back(rms({7, 2, dim}, Dtype::kBF16)
                      .two_level(2)
                      .rows_at(heads(8 * dim, w, dim), {})
                      .with(Values::kNormal, seed++));
  cases.push_back(rms({1000, 2, dim}, Dtype::kF16)
                      .two_level(2)
                      .rows_at(heads(8 * dim, w, dim), heads(16, 2 * dim + 64, dim + 16))
                      .with(Values::kNegative, seed++));
  cases.push_back(layer_norm({5, 8, dim}, Dtype::kF32)
                      .two_level(8)
                      .stats()
                      .rows_at(heads(0, w, dim), heads(0, 8 * (dim + 32), dim + 32))
                      .with(Values::kLargeMean, seed++));
  // Residual and residual_out in two-level layouts of their own.
  cases.push_back(rms({7, 4, 256}, Dtype::kBF16)
                      .two_level(4)
                      .add_residual(Dtype::kF32, false)
                      .out(Dtype::kE5M2, 4.0f)
                      .rows_at(heads(0, 4 * 256 + 128, 256), heads(16, 4 * 272, 272))
                      .residual_at(heads(32, 4 * 256 + 64, 256), heads(0, 4 * 288, 288))
                      .with(Values::kNormal, seed++));
  // Odd head dim: inner and outer multiples of 1 only.
  cases.push_back(rms({5, 3, 65}, Dtype::kF32)
                      .two_level(3)
                      .rows_at(heads(1, 300, 67), heads(3, 3 * 65 + 7, 65))
                      .with(Values::kNormal, seed++));
  run_cases("strided rows, two levels", cases);
}

// ---------------------------------------------------------------------------------------
// Batch invariance: one kernel, several launch batches over the same leading rows.

TEST_F(Variants, BatchInvarianceRowBitsDoNotDependOnTheLaunchBatch) {
  const auto t0 = std::chrono::steady_clock::now();
  device::PrimaryContext context;
  const Target target = device::target_of(context.device());
  Engine engine(test_engine_options());
  struct Invariance {
    Case c;
    std::vector<int64_t> batches;  // launch batches (rows, or N); the last is the largest
    int64_t checked;               // the batch also checked against float64 (kept small)
  };
  const std::vector<int64_t> tokens = {1, 7, 64, 1000};
  std::vector<Invariance> runs = {
      {rms({1000, 4096}, Dtype::kBF16)
           .params(Dtype::kF32)
           .add_residual(Dtype::kBF16, false)
           .out(Dtype::kE4M3, 0.5f)
           .stats()
           .with(Values::kNormal, 1),
       tokens, 64},
      {layer_norm({1000, 5120}, Dtype::kF16).out(Dtype::kF32).stats().with(Values::kNormal, 2),
       tokens, 64},
      {rms({1000, 2048}, Dtype::kF32)
           .offset(1.0)
           .rows_at(slice(0, 3 * 2048), slice(16, 2048 + 16))
           .with(Values::kNormal, 3),
       tokens, 64},
      {rms({1000, 8, 128}, Dtype::kBF16)
           .two_level(8)
           .rows_at(heads(0, 12 * 128, 128), {})
           .with(Values::kNormal, 4),
       {8, 56, 512, 8000},
       512},
      {layer_norm({1000, 8192}, Dtype::kBF16)
           .add_residual(Dtype::kF32, false)
           .stats()
           .with(Values::kNormal, 5),
       tokens, 64},
      // Rows of 9 KiB (x, y, an f32 residual and h): on sm_90 a launch of at most 5688 rows
      // reads x and the residual evict-first from L2, the launch of 8000 with the normal policy
      // (kEvictFirstRows).
      {layer_norm({8000, 768}, Dtype::kBF16)
           .add_residual(Dtype::kF32, false)
           .stats()
           .with(Values::kNormal, 10),
       {1, 64, 5000, 8000},
       64},
      // Odd 16-bit LayerNorm rows in a team of 256: parameters with x in launches of at most 512
      // rows, at the store in larger ones (few_rows_limit).
      {layer_norm({2000, 3001}, Dtype::kBF16).with(Values::kLargeMean, 11),
       {1, 512, 513, 2000},
       513},
      // The few-rows class of teams of 128 (bf16 rows of 4096) reaches 512 rows, of teams of 256
      // (f32 rows of 4096) 384; past them the parameters are loaded at the store.
      {layer_norm({1000, 4096}, Dtype::kBF16).with(Values::kLargeMean, 12),
       {1, 512, 513, 1000},
       513},
      {layer_norm({1000, 4096}, Dtype::kF32).with(Values::kNegative, 13), {1, 384, 385, 1000}, 385},
      // Rows split over CTAs; rows of the streaming kernel.
      {layer_norm({4, 1000003}, Dtype::kF32).stats().with(Values::kLargeMean, 6), {1, 2, 3, 4}, 2},
      {rms({2, 5000011}, Dtype::kBF16)
           .add_residual(Dtype::kBF16, false)
           .out(Dtype::kF32)
           .with(Values::kNormal, 7),
       {1, 2},
       1},
      {rms_channels({8, 64, 32, 32}, Dtype::kBF16).stats().with(Values::kNormal, 8), {1, 3, 8}, 8},
      {group_norm({8, 32, 16, 16}, Dtype::kF16, 4)
           .out(Dtype::kE5M2, 4.0f)
           .stats()
           .with(Values::kNormal, 9),
       {1, 5, 8},
       8},
  };
  {
    std::vector<Case> all;
    for (const Invariance& r : runs) all.push_back(r.c);
    prepare_in_parallel(engine, all);
  }
  Summary summary;
  for (const Invariance& r : runs) {
    std::string what = format_shape(*r.c.fields.shape);
    try {
      const NormSpec spec = NormSpec::from_fields(r.c.fields);
      VariantRun run(r.c);
      const Kernel kernel = engine.prepare(spec);
      const std::string strat = strategy_of(spec, target);
      summary.strategies.insert(strat);
      what = line_of(run, r.c, r.batches.back(), strat);
      std::printf("[ variant  ] %s\n", what.c_str());
      // The largest launch first: its rows are what every smaller launch must reproduce.
      run.reset();
      kernel.launch(run.args(r.batches.back()), nullptr);
      NORMJIT_CU(driver::api().cuCtxSynchronize());
      const Written full = run.written(r.batches.back());
      ++summary.cases;
      std::string line = "             same bits for batches";
      for (int64_t b : r.batches) {
        // The same kernel, and the kernel the engine prepares for a spec of this batch.
        SpecFields fb = r.c.fields;
        const int64_t per_lead = spec.batch() / spec.shape[0];
        ASSERT_EQ(b % per_lead, 0);
        fb.shape->at(0) = b / per_lead;
        const Kernel for_batch = engine.prepare(NormSpec::from_fields(fb));
        for (const Kernel* k : {&kernel, &for_batch}) {
          run.reset();
          k->launch(run.args(b), nullptr);
          NORMJIT_CU(driver::api().cuCtxSynchronize());
          const Written w = run.written(b);
          const std::string which = std::string(k == &kernel ? "the same kernel" : "its own spec") +
                                    ", batch " + std::to_string(b) + ": ";
          auto same = [&](const std::vector<unsigned char>& got,
                          const std::vector<unsigned char>& all, const char* name) {
            ASSERT_LE(got.size(), all.size());
            EXPECT_EQ(std::memcmp(got.data(), all.data(), got.size()), 0)
                << what << ": " << which << name << " bits differ from the batch "
                << r.batches.back() << " launch";
          };
          same(w.y, full.y, "y");
          same(w.h, full.h, "residual_out");
          same(w.mean, full.mean, "mean");
          same(w.rstd, full.rstd, "rstd");
          // Nothing past the batch written (rows of the larger launch stay poisoned); one
          // batch against float64 as well.
          if (b == r.checked && k == &kernel) {
            const Outcome o = run.check(b);
            print_result(spec, o);
            expect_outcome(spec, o, r.c.values, what + " (batch " + std::to_string(b) + ")",
                           summary);
          } else {
            const Outcome ob = run.check(b, /*against_reference=*/false);
            EXPECT_EQ(ob.outside_writes, 0) << what << ": " << which << ob.first_outside;
          }
        }
        line += " " + std::to_string(b) + (for_batch.key() == kernel.key() ? "" : " (own key)");
      }
      std::printf("%s\n", line.c_str());
    } catch (const std::exception& e) {
      ++summary.failed_to_run;
      ADD_FAILURE() << what << ": " << e.what();
    }
  }
  summary.print("batch invariance", t0);
}

TEST_F(Variants, APreparedKernelLaunchesTheKernelOfEachBatchClass) {
  // A row kernel with parameters has a plan for launches of few rows (decode: the parameters
  // loaded with x, h written early; at most 512 rows for these rows of 4096 in teams of 128)
  // and one for more. Whatever batch the spec was prepared with, a launch runs its own class's
  // kernel: the function a captured launch records is the one of the kernel prepared for that
  // batch, and the two classes differ.
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const Case few =
      rms({1, 4096}, Dtype::kBF16).add_residual(Dtype::kBF16, false).with(Values::kNormal, 1);
  Case many = few;
  many.fields.shape = std::vector<int64_t>{1000, 4096};
  const NormSpec few_spec = NormSpec::from_fields(few.fields);
  const NormSpec many_spec = NormSpec::from_fields(many.fields);
  ASSERT_NE(batch_class(few_spec), batch_class(many_spec));
  const uint64_t compiles_before = engine.counters().nvrtc_compiles;
  const uint64_t disk_before = engine.counters().disk_hits;
  const Kernel from_few = engine.prepare(few_spec);
  // Both classes compiled or loaded by the one prepare; the other spec then a memory hit.
  EXPECT_EQ(engine.counters().nvrtc_compiles + engine.counters().disk_hits - compiles_before -
                disk_before,
            2u);
  const Kernel from_many = engine.prepare(many_spec);
  EXPECT_EQ(engine.counters().nvrtc_compiles + engine.counters().disk_hits - compiles_before -
                disk_before,
            2u);
  VariantRun run(many);
  device::Stream stream;
  auto recorded = [&](const Kernel& k, int64_t batch) {
    CapturedGraph graph(stream.get(), [&] { k.launch(run.args(batch), stream.handle()); });
    const std::vector<CUfunction> f = graph.kernel_functions();
    EXPECT_EQ(f.size(), 1u) << "kernel nodes of one launch";
    return f.empty() ? CUfunction{} : f[0];
  };
  const int64_t limit = few_rows_limit(few_spec);
  EXPECT_EQ(limit, 2 * kFewRows);
  for (int64_t rows : {int64_t{1}, kFewRows, kFewRows + 1, limit, limit + 1, int64_t{1000}}) {
    const CUfunction own = recorded(rows <= limit ? from_few : from_many, rows);
    EXPECT_EQ(recorded(from_few, rows), own) << rows << " rows, the kernel prepared for 1 row";
    EXPECT_EQ(recorded(from_many, rows), own) << rows << " rows, the kernel prepared for 1000";
  }
  EXPECT_NE(recorded(from_few, 1), recorded(from_few, 1000));
  // And what the 1000-row launch of the kernel prepared for one row wrote is right.
  run.reset();
  from_few.launch(run.args(1000), nullptr);
  NORMJIT_CU(driver::api().cuCtxSynchronize());
  Summary summary;
  const Outcome o = run.check(1000);
  print_result(many_spec, o);
  expect_outcome(many_spec, o, many.values, "rmsnorm 1000 x 4096 from a 1-row prepare", summary);
}

// ---------------------------------------------------------------------------------------
// Every axis at once, LLM shapes, odd rows, long rows, adversarial values.

TEST_F(Variants, AllAxesCombinedInOneLaunch) {
  // residual + f32 params + fp8 out + weight offset + strided rows + saved statistics.
  std::vector<Case> cases;
  uint64_t seed = 800;
  cases.push_back(rms({7, 4096}, Dtype::kBF16)
                      .params(Dtype::kF32)
                      .add_residual(Dtype::kBF16, true)
                      .out(Dtype::kE4M3, 0.5f)
                      .offset(1.0)
                      .stats()
                      .rows_at(slice(0, 3 * 4096), slice(16, 4096 + 16))
                      .residual_at(slice(32, 4096 + 32), {})
                      .with(Values::kNormal, seed++));
  cases.push_back(layer_norm({128, 5120}, Dtype::kF16)
                      .params(Dtype::kF32)
                      .add_residual(Dtype::kF32, false)
                      .out(Dtype::kE5M2, 4.0f)
                      .offset(0.5)
                      .stats()
                      .rows_at(slice(16, 2 * 5120), slice(0, 5120 + 64))
                      .residual_at(slice(0, 5120 + 16), slice(48, 5120 + 48))
                      .with(Values::kNormal, seed++));
  cases.push_back(rms({1, 16384}, Dtype::kBF16)
                      .params(Dtype::kF32)
                      .add_residual(Dtype::kF32, false)
                      .out(Dtype::kE4M3, 4.0f)
                      .offset(1.0)
                      .stats()
                      .rows_at(slice(16, 16384 + 32), slice(0, 16384 + 16))
                      .residual_at(slice(0, 16384 + 48), slice(16, 16384 + 64))
                      .with(Values::kNegative, seed++));
  cases.push_back(layer_norm({3, 4097}, Dtype::kBF16, Affine::kWeight)
                      .params(Dtype::kF32)
                      .add_residual(Dtype::kBF16, false)
                      .out(Dtype::kE4M3, 0.5f)
                      .offset(1.0)
                      .stats()
                      .rows_at(slice(1, 4099), slice(3, 4100))
                      .residual_at(slice(2, 4098), slice(0, 4111))
                      .with(Values::kNormal, seed++));
  cases.push_back(rms({7, 8, 128}, Dtype::kBF16)
                      .two_level(8)
                      .params(Dtype::kF32)
                      .add_residual(Dtype::kBF16, true)
                      .out(Dtype::kE5M2, 0.5f)
                      .offset(0.5)
                      .stats()
                      .rows_at(heads(0, 12 * 128, 128), heads(16, 8 * 144, 144))
                      .residual_at(heads(0, 8 * 160, 160), {})
                      .with(Values::kNormal, seed++));
  // Split rows and streamed rows with every axis.
  cases.push_back(layer_norm({2, 1000003}, Dtype::kBF16)
                      .params(Dtype::kF32)
                      .add_residual(Dtype::kF32, false)
                      .out(Dtype::kE4M3, 4.0f)
                      .offset(1.0)
                      .stats()
                      .rows_at(slice(5, 1000003 + 3), slice(0, 1000003 + 1))
                      .residual_at(slice(1, 1000003 + 7), slice(2, 1000003 + 9))
                      .with(Values::kNormal, seed++));
  cases.push_back(rms({2, 5000011}, Dtype::kF16)
                      .params(Dtype::kF32)
                      .add_residual(Dtype::kF16, true)
                      .out(Dtype::kE5M2, 0.5f)
                      .offset(0.5)
                      .stats()
                      .rows_at(slice(0, 5000011 + 5), slice(3, 5000011 + 1))
                      .residual_at(slice(9, 5000011 + 13), {})
                      .with(Values::kNegative, seed++));
  // In place over x too (same dtype out: bf16).
  cases.push_back(rms({128, 4096}, Dtype::kBF16)
                      .params(Dtype::kF32)
                      .add_residual(Dtype::kBF16, true)
                      .offset(1.0)
                      .stats()
                      .y_over_x()
                      .rows_at(slice(16, 4096 + 48), {})
                      .residual_at(slice(0, 4096 + 16), {})
                      .with(Values::kNormal, seed++));
  run_cases("all axes combined", cases);
}

TEST_F(Variants, LlmRowsTokensByHidden) {
  // Tokens {1, 7, 128, 1000} x hidden {2048, 4096, 5120, 8192, 16384}, sampled: each hidden
  // size twice, each token count at least twice, with the variants decoder layers use.
  const int64_t tokens[] = {1, 7, 128, 1000};
  const int64_t hidden[] = {2048, 4096, 5120, 8192, 16384};
  std::vector<Case> cases;
  uint64_t seed = 900;
  int i = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int h = 0; h < 5; ++h) {
      const int64_t t = tokens[(h + 2 * pass) % 4], n = hidden[h];
      switch (i++ % 5) {
        case 0:  // Llama in bf16 with f32 weights: fused add + norm, both in place
          cases.push_back(rms({t, n}, Dtype::kBF16)
                              .params(Dtype::kF32)
                              .add_residual(Dtype::kBF16, true)
                              .y_over_x()
                              .with(Values::kNormal, seed++));
          break;
        case 1:  // Gemma: offset 1, residual kept in f32
          cases.push_back(rms({t, n}, Dtype::kBF16)
                              .offset(1.0)
                              .add_residual(Dtype::kF32, false)
                              .with(Values::kNormal, seed++));
          break;
        case 2:  // fused add + norm + fp8 quantization (vLLM, TensorRT-LLM)
          cases.push_back(rms({t, n}, Dtype::kBF16)
                              .params(Dtype::kF32)
                              .add_residual(Dtype::kBF16, true)
                              .out(Dtype::kE4M3, 0.5f)
                              .with(Values::kNormal, seed++));
          break;
        case 3:  // LayerNorm (GPT-style) with saved statistics for training
          cases.push_back(layer_norm({t, n}, Dtype::kF16)
                              .params(Dtype::kF32)
                              .stats()
                              .with(Values::kNormal, seed++));
          break;
        default:  // a slice of a wider activation
          cases.push_back(rms({t, n}, Dtype::kBF16)
                              .out(Dtype::kF32)
                              .rows_at(slice(n, 3 * n), {})
                              .with(Values::kNegative, seed++));
          break;
      }
    }
  }
  run_cases("LLM rows", cases);
}

TEST_F(Variants, TransformerRowsOf768And1024InLaunchesOfManyRows) {
  // ViT and BERT rows (768, 1024) in launches of more than 512 rows (the many-rows class of their
  // teams of at most 128 threads): f32 LayerNorm rows of 768 load their weight and bias with x
  // there (kParamsAheadWordsManyRows, 12 + 24 registers), rows of 1024 at the store; every dtype
  // and affine form, large means and negatives, and one with a residual and an f32 weight beside
  // 16-bit x.
  std::vector<Case> cases;
  uint64_t seed = 1700;
  int i = 0;
  for (const int64_t n : {768, 1024}) {
    for (Dtype d : kXDtypes) {
      for (Affine a : {Affine::kBoth, Affine::kWeight, Affine::kNone}) {
        const int64_t t = i % 2 == 0 ? 1000 : 513;
        const Values v = i % 3 == 0   ? Values::kLargeMean
                         : i % 3 == 1 ? Values::kNegative
                                      : Values::kNormal;
        cases.push_back(layer_norm({t, n}, d, a).with(v, seed++));
        ++i;
      }
      cases.push_back(rms({300, n}, d).with(Values::kNormal, seed++));
    }
    cases.push_back(layer_norm({600, n}, Dtype::kBF16)
                        .params(Dtype::kF32)
                        .add_residual(Dtype::kBF16, true)
                        .with(Values::kNormal, seed++));
  }
  run_cases("transformer rows, many", cases);
}

TEST_F(Variants, ResidualLayerNormRowsInTeamsOfSixteenValues) {
  // LayerNorm with a residual of x's 16-bit dtype over rows of 4096 to 8192 (plan.cpp's
  // kResidualLayerNormRows: teams of 256 to 512 threads, 16 values each, the parameters held with
  // x) in both batch classes (the few-rows class of teams of 256 reaches 384 rows, of 512 256),
  // in place and to separate outputs, with saved statistics; rows of 6144 leave a quarter of
  // their team's vector slots idle. Large means, negatives and normal values in turn.
  std::vector<Case> cases;
  uint64_t seed = 2600;
  int i = 0;
  for (const int64_t n : {4096, 6144, 8192}) {
    for (const int64_t t : {1, 7, 384, 385, 1000}) {
      const Dtype d = i % 2 == 0 ? Dtype::kBF16 : Dtype::kF16;
      const Values v = i % 3 == 0   ? Values::kLargeMean
                       : i % 3 == 1 ? Values::kNegative
                                    : Values::kNormal;
      Case c = layer_norm({t, n}, d).add_residual(d, /*in_place=*/i % 2 == 1).with(v, seed++);
      if (i % 4 == 0) c.stats();
      cases.push_back(c);
      ++i;
    }
  }
  run_cases("residual LayerNorm rows, teams of 16 values", cases);
}

TEST_F(Variants, SixteenBitRowsUnderLaunchBounds) {
  // Row kernels of 16-bit rows in CTAs of 256 and 512 threads, which take launch bounds of 64
  // registers (plan.cpp's row_blocks_bound: CTAs of 512 in both batch classes, of 256 in launches
  // of more than the few-rows class's rows; `normjit dump --emit resources`: some spill 4-16 bytes
  // so): bf16 RMSNorm rows of 7168, 8191 (scalar accesses) and 8192 with Gemma's 1 + w, an f16
  // weight, saved rstd, y over x, strided rows and -> SiLU; f16 add + RMSNorm rows of 16384 (and
  // of 8192, left unbounded); LayerNorm bf16 rows of 9216 and 12288 with saved statistics, f16
  // rows of 5120 and 6144, fp8 y. 3 tokens (the few-rows class: bounded in CTAs of 512 only)
  // beside 385, 1000 and 4096, and 200 and 256 tokens of the few-rows class's CTAs of 512 (two
  // rounds of CTAs unbounded); large means, negatives and normal values in turn.
  std::vector<Case> cases;
  uint64_t seed = 2700;
  int i = 0;
  for (const int64_t t : {3, 385, 1000, 4096}) {
    const auto values = [&] {
      const int k = i++;
      return k % 3 == 0 ? Values::kLargeMean : k % 3 == 1 ? Values::kNegative : Values::kNormal;
    };
    cases.push_back(rms({t, 8192}, Dtype::kBF16).offset(1.0).with(values(), seed++));
    cases.push_back(
        rms({t, 8192}, Dtype::kBF16).params(Dtype::kF16).stats().with(values(), seed++));
    cases.push_back(rms({t, 7168}, Dtype::kBF16).y_over_x().with(values(), seed++));
    cases.push_back(rms({t, 8191}, Dtype::kBF16).offset(1.0).stats().with(values(), seed++));
    cases.push_back(rms({t, 8192}, Dtype::kBF16)
                        .rows_at(slice(64, 8192 + 64), slice(128, 8192 + 32))
                        .with(values(), seed++));
    cases.push_back(rms({t, 8192}, Dtype::kBF16).act(Activation::kSilu).with(values(), seed++));
    cases.push_back(rms({t, 8192}, Dtype::kF16)
                        .add_residual(Dtype::kF16, /*in_place=*/true)
                        .with(values(), seed++));
    cases.push_back(rms({t, 16384}, Dtype::kF16)
                        .add_residual(Dtype::kF16, /*in_place=*/false)
                        .with(values(), seed++));
    cases.push_back(layer_norm({t, 12288}, Dtype::kBF16).stats().with(values(), seed++));
    cases.push_back(layer_norm({t, 9216}, Dtype::kBF16).with(values(), seed++));
    cases.push_back(layer_norm({t, 5120}, Dtype::kF16).with(values(), seed++));
    cases.push_back(
        layer_norm({t, 6144}, Dtype::kF16).out(Dtype::kE4M3, 0.5f).with(values(), seed++));
  }
  cases.push_back(layer_norm({200, 12288}, Dtype::kBF16).stats().with(Values::kLargeMean, seed++));
  cases.push_back(layer_norm({256, 9216}, Dtype::kBF16).with(Values::kNegative, seed++));
  cases.push_back(rms({200, 16384}, Dtype::kF16)
                      .add_residual(Dtype::kF16, /*in_place=*/true)
                      .with(Values::kNormal, seed++));
  run_cases("16-bit rows under launch bounds", cases);
}

TEST_F(Variants, OddAndTinyRows) {
  // Row lengths 1, 3, 7, 65, 1000, 4097, 65537 and the prime 100003, each axis in turn.
  const int64_t lengths[] = {1, 3, 7, 65, 1000, 4097, 65537, 100003};
  const int64_t rows[] = {3, 1, 7, 5, 2, 3, 2, 1};
  std::vector<Case> cases;
  uint64_t seed = 1000;
  int i = 0;
  for (int l = 0; l < 8; ++l) {
    const int64_t n = lengths[l], t = rows[l];
    for (Op op : {Op::kRmsNorm, Op::kLayerNorm}) {
      const Dtype x = kXDtypes[i % 3];
      Case c = op == Op::kRmsNorm ? rms({t, n}, x) : layer_norm({t, n}, x);
      switch (i++ % 6) {
        case 0:
          c.params(x == Dtype::kF32 ? Dtype::kBF16 : Dtype::kF32).out(Dtype::kF32);
          break;
        case 1:
          c.add_residual(x, /*in_place=*/true);
          break;
        case 2:
          c.out(Dtype::kE5M2, 4.0f).add_residual(Dtype::kF32, false);
          break;
        case 3:
          c.offset(0.5).stats();
          break;
        case 4:
          c.rows_at(slice(1, n + 1), slice(3, n + 2)).out(Dtype::kE4M3, 0.5f);
          break;
        default:
          c.stats().y_over_x();
          break;
      }
      cases.push_back(c.with(Values::kNormal, seed++));
    }
  }
  run_cases("odd and tiny rows", cases);
}

TEST_F(Variants, LongRowsSplitOverCtasAndStreamedWithEachAxis) {
  // [3, 1000003] and the LayerNorm seed's rows [2, 64, 256, 256] split over co-resident CTAs;
  // [2, 5000011] streamed. Which strategy ran is printed per case; both must have run.
  std::vector<Case> cases;
  uint64_t seed = 1100;
  cases.push_back(rms({3, 1000003}, Dtype::kF32)
                      .params(Dtype::kBF16)
                      .out(Dtype::kBF16)
                      .offset(1.0)
                      .with(Values::kNormal, seed++));
  cases.push_back(layer_norm({3, 1000003}, Dtype::kBF16)
                      .add_residual(Dtype::kBF16, true)
                      .stats()
                      .out(Dtype::kE4M3, 0.5f)
                      .with(Values::kNegative, seed++));
  cases.push_back(rms({3, 1000003}, Dtype::kF16)
                      .add_residual(Dtype::kF32, false)
                      .rows_at(slice(3, 1000003 + 5), slice(0, 1000003 + 2))
                      .residual_at(slice(1, 1000003 + 1), slice(5, 1000003 + 7))
                      .with(Values::kNormal, seed++));
  cases.push_back(layer_norm({2, 64, 256, 256}, Dtype::kF32, Affine::kBoth, 3)
                      .params(Dtype::kBF16)
                      .add_residual(Dtype::kF32, false)
                      .out(Dtype::kE5M2, 4.0f)
                      .offset(0.5)
                      .stats()
                      .with(Values::kLargeMean, seed++));
  cases.push_back(group_norm({2, 64, 256, 256}, Dtype::kBF16, 4)
                      .params(Dtype::kF32)
                      .out(Dtype::kF32)
                      .offset(1.0)
                      .stats()
                      .with(Values::kNegative, seed++));
  cases.push_back(layer_norm({2, 5000011}, Dtype::kF32)
                      .params(Dtype::kBF16)
                      .add_residual(Dtype::kF32, false)
                      .out(Dtype::kE4M3, 0.5f)
                      .stats()
                      .with(Values::kLargeMean, seed++));
  cases.push_back(rms({2, 5000011}, Dtype::kBF16)
                      .params(Dtype::kF32)
                      .add_residual(Dtype::kBF16, true)
                      .offset(1.0)
                      .stats()
                      .rows_at(slice(1, 5000011 + 16), slice(16, 5000011 + 7))
                      .residual_at(slice(0, 5000011 + 3), {})
                      .with(Values::kNormal, seed++));
  run_cases("long rows", cases);
  device::PrimaryContext context;
  const Target target = device::target_of(context.device());
  std::set<std::string> ran;
  for (const Case& c : cases) {
    try {
      ran.insert(strategy_of(NormSpec::from_fields(c.fields), target));
    } catch (const std::exception&) {
    }
  }
  for (Strategy s : {Strategy::kRowSplit, Strategy::kRowStream}) {
    EXPECT_TRUE(ran.count(to_string(s)))
        << "no case selected " << to_string(s) << ": pick rows that do, to cover it";
  }
}

TEST_F(Variants, AdversarialValuesThroughTheVariants) {
  // Large mean (1e4, std 1), tiny values, constant rows (variance 0), all negative; in x, and
  // in the residual.
  std::vector<Case> cases;
  uint64_t seed = 1200;
  int i = 0;
  for (Values v : {Values::kLargeMean, Values::kTiny, Values::kConstant, Values::kNegative}) {
    auto d = [&] { return kXDtypes[i++ % 3]; };
    cases.push_back(layer_norm({3, 1000}, d())
                        .add_residual(Dtype::kF32, false)
                        .stats()
                        .out(Dtype::kF32)
                        .with(v, seed++));
    cases.push_back(
        rms({3, 4096}, d()).params(Dtype::kF32).out(Dtype::kE4M3, 4.0f).with(v, seed++));
    cases.push_back(
        group_norm({2, 8, 33}, d(), 4).out(Dtype::kF32).stats().offset(1.0).with(v, seed++));
    cases.push_back(layer_norm({2, 100000}, d())
                        .add_residual(Dtype::kF32, /*in_place=*/true)
                        .out(Dtype::kBF16)
                        .stats()
                        .with(v, seed++));
    cases.push_back(rms_channels({2, 64, 9, 7}, d()).stats().out(Dtype::kF16).with(v, seed++));
    cases.push_back(
        layer_norm_channels({2, 96, 9, 7}, d()).stats().out(Dtype::kF32).with(v, seed++));
    cases.push_back(
        layer_norm_channels({1, 3000, 8}, d()).stats().out(Dtype::kF32).with(v, seed++));
    cases.push_back(rms({5, 2048}, Dtype::kF32)
                        .add_residual(Dtype::kF32, true)
                        .stats()
                        .with(Values::kNormal, seed++)
                        .residual_with(v));
  }
  run_cases("adversarial values", cases);
}

// ---------------------------------------------------------------------------------------
// CUDA graphs.

TEST_F(Variants, CudaGraphOfACombinedKernelOnAFreshStreamReplaysWithNewInputs) {
  // A combined variant kernel captured on a non-blocking stream first used inside the
  // capture, replayed with new x, residual and scale in the captured buffers (h over the
  // residual: each replay starts from fresh inputs), checked against float64 each time.
  const auto t0 = std::chrono::steady_clock::now();
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const Target target = device::target_of(context.device());
  Case rows = rms({128, 4096}, Dtype::kBF16)
                  .params(Dtype::kF32)
                  .add_residual(Dtype::kBF16, true)
                  .out(Dtype::kE4M3, 0.5f)
                  .offset(1.0)
                  .stats()
                  .rows_at(slice(0, 3 * 4096), slice(16, 4096 + 16))
                  .with(Values::kNormal, 1);
  rows.residual = slice(32, 4096 + 32);
  const Case split = layer_norm({2, 1000003}, Dtype::kF16)
                         .params(Dtype::kF32)
                         .add_residual(Dtype::kF32, false)
                         .out(Dtype::kE5M2, 4.0f)
                         .offset(0.5)
                         .stats()
                         .rows_at(slice(1, 1000003 + 2), slice(0, 1000003 + 5))
                         .with(Values::kNormal, 2);
  prepare_in_parallel(engine, {rows, split});
  Summary summary;
  for (const Case& c : {rows, split}) {
    std::string what = format_shape(*c.fields.shape);
    try {
      const NormSpec spec = NormSpec::from_fields(c.fields);
      VariantRun run(c);
      const Kernel kernel = engine.prepare(spec);
      const std::string strat = strategy_of(spec, target);
      summary.strategies.insert(strat);
      what = line_of(run, c, spec.batch(), strat);
      std::printf("[ variant  ] %s\n", what.c_str());
      device::Stream stream;
      CapturedGraph graph(stream.get(),
                          [&] { kernel.launch(run.args(spec.batch()), stream.handle()); });
      const Values kinds[] = {Values::kNormal, Values::kNegative, Values::kLargeMean};
      const float scales[] = {0.5f, 4.0f, 100.0f};  // the last saturates e4m3
      for (int r = 0; r < 3; ++r) {
        run.generate(kinds[r], Values::kNormal, 10 + r, scales[r]);
        graph.replay(stream.get());
        stream.synchronize();
        const Outcome o = run.check(spec.batch());
        print_result(spec, o);
        expect_outcome(spec, o, kinds[r], what + " | replay " + std::to_string(r), summary);
        ++summary.cases;
      }
    } catch (const std::exception& e) {
      ++summary.failed_to_run;
      ADD_FAILURE() << what << ": " << e.what();
    }
  }
  summary.print("CUDA graph replays", t0);
}

// ---------------------------------------------------------------------------------------
// The activation epilogue (issue 19): silu and gelu applied to y after the affine step, in the
// same kernel, on every form and strategy, against float64 with the activation applied in
// float64 (reference::activate); h (with a residual) and the statistics are those of the norm.

const Activation kActivations[] = {Activation::kSilu, Activation::kGelu};

TEST_F(Variants, ActivationEveryFormEveryDtypeEveryOutput) {
  // Each form with odd sizes, x in f32/f16/bf16, out in x's dtype, f32 or fp8 (scales 0.5, 4).
  std::vector<Case> cases;
  uint64_t seed = 1300;
  int i = 0;
  for (Activation a : kActivations) {
    for (Dtype x : kXDtypes) {
      auto out = [&](Case c) {
        switch (i++ % 4) {
          case 0:
            break;  // x's dtype
          case 1:
            c.out(Dtype::kF32);
            break;
          case 2:
            c.out(Dtype::kE4M3, 0.5f);
            break;
          default:
            c.out(Dtype::kE5M2, 4.0f);
            break;
        }
        cases.push_back(c.act(a).with(Values::kNormal, seed++));
      };
      out(rms({7, 4096}, x));
      out(rms({5, 3, 1000}, x, Affine::kNone, 2));
      out(rms_channels({2, 64, 33, 17}, x));
      out(rms_channels({3, 5, 7}, x, Affine::kNone));
      out(layer_norm({3, 4097}, x));
      out(layer_norm({5, 1000}, x, Affine::kWeight));
      out(layer_norm_channels({2, 96, 14, 14}, x));
      out(layer_norm_channels({2, 24, 7, 9}, x, Affine::kNone));
      out(group_norm({2, 32, 9, 9}, x, 8));
      out(group_norm({3, 16, 65}, x, 2, Affine::kWeight));
      out(group_norm({2, 8, 3}, x, 4, Affine::kNone));  // channels shorter than a vector
    }
  }
  run_cases("activation: forms x dtypes x outputs", cases);
}

TEST_F(Variants, ActivationGroupNormOnDiffusionShapes) {
  // GroupNorm -> SiLU of the SD 1.5 / SDXL UNet (32 groups; 320, 640, 1280 channels at 64x64,
  // 32x32, 8x8) and VAE ([1, 512, 128, 128], [1, 256, 512, 512]), in f16, bf16 and f32 (with f32
  // parameters under autocast), an odd [3, 96, 7, 9] with 8 groups, fp8 outputs; gelu on some. A
  // row kernel, the split rows and the streamed rows all run (checked below).
  std::vector<Case> cases;
  uint64_t seed = 1400;
  const Activation silu = Activation::kSilu, gelu = Activation::kGelu;
  cases.push_back(
      group_norm({2, 320, 64, 64}, Dtype::kF16, 32).act(silu).with(Values::kNormal, seed++));
  cases.push_back(
      group_norm({2, 320, 64, 64}, Dtype::kBF16, 32).act(silu).with(Values::kNormal, seed++));
  cases.push_back(
      group_norm({2, 320, 64, 64}, Dtype::kF32, 32).act(silu).with(Values::kNormal, seed++));
  cases.push_back(group_norm({2, 640, 32, 32}, Dtype::kF16, 32)
                      .params(Dtype::kF32)
                      .act(silu)
                      .with(Values::kNormal, seed++));
  cases.push_back(group_norm({2, 1280, 8, 8}, Dtype::kBF16, 32)
                      .params(Dtype::kF32)
                      .act(silu)
                      .with(Values::kNegative, seed++));
  cases.push_back(
      group_norm({1, 512, 128, 128}, Dtype::kF16, 32).act(silu).with(Values::kNormal, seed++));
  // The VAE's 512x512 map (groups of 2 Mi elements: 64 CTAs of 512 a group on every GPU).
  cases.push_back(
      group_norm({1, 256, 512, 512}, Dtype::kF16, 32).act(silu).with(Values::kNegative, seed++));
  cases.push_back(group_norm({2, 320, 64, 64}, Dtype::kBF16, 32)
                      .act(silu)
                      .out(Dtype::kE4M3, 4.0f)
                      .with(Values::kNormal, seed++));
  cases.push_back(
      group_norm({2, 640, 32, 32}, Dtype::kF16, 32).act(gelu).with(Values::kNormal, seed++));
  for (Dtype x : kXDtypes) {
    for (Activation a : kActivations) {
      cases.push_back(group_norm({3, 96, 7, 9}, x, 8).act(a).with(Values::kNormal, seed++));
    }
  }
  cases.push_back(group_norm({3, 96, 7, 9}, Dtype::kF16, 8)
                      .act(silu)
                      .out(Dtype::kE5M2, 0.5f)
                      .with(Values::kNormal, seed++));
  // Rows split over CTAs ([2, 64, 256, 256], 4 groups: 1 M elements a row) and streamed
  // ([1, 64, 512, 512], 2 groups: 8 M elements a row).
  cases.push_back(
      group_norm({2, 64, 256, 256}, Dtype::kBF16, 4).act(silu).with(Values::kNormal, seed++));
  cases.push_back(group_norm({1, 64, 512, 512}, Dtype::kF32, 2)
                      .act(silu)
                      .stats()
                      .with(Values::kNormal, seed++));
  run_cases("activation: GroupNorm on diffusion shapes", cases);
  device::PrimaryContext context;
  const Target target = device::target_of(context.device());
  std::set<std::string> ran;
  for (const Case& c : cases) ran.insert(strategy_of(NormSpec::from_fields(c.fields), target));
  for (Strategy s : {Strategy::kRowRegisters, Strategy::kRowSplit, Strategy::kRowStream}) {
    EXPECT_TRUE(ran.count(to_string(s))) << "no case selected " << to_string(s);
  }
}

TEST_F(Variants, ActivationLongAndOddRowsEveryStrategy) {
  // Row lengths 1, 3, 7, 65, 4097, 100003 (row kernels), 1000003 (split over CTAs) and
  // 5000011 (streamed), with silu and gelu; LayerNorm2d with C not a multiple of anything and
  // read twice (4099 channels).
  std::vector<Case> cases;
  uint64_t seed = 1500;
  const int64_t lengths[] = {1, 3, 7, 65, 4097, 100003, 1000003, 5000011};
  const int64_t rows[] = {3, 1, 7, 5, 3, 2, 2, 2};
  int i = 0;
  for (int l = 0; l < 8; ++l) {
    for (Activation a : kActivations) {
      const Dtype x = kXDtypes[i++ % 3];
      Case c = i % 2 ? rms({rows[l], lengths[l]}, x) : layer_norm({rows[l], lengths[l]}, x);
      cases.push_back(c.act(a).with(i % 4 == 3 ? Values::kNegative : Values::kNormal, seed++));
    }
  }
  cases.push_back(layer_norm_channels({1, 4099, 4}, Dtype::kF32, Affine::kBoth)
                      .act(Activation::kGelu)
                      .with(Values::kNormal, seed++));
  cases.push_back(layer_norm_channels({2, 4099, 3}, Dtype::kBF16, Affine::kWeight)
                      .act(Activation::kSilu)
                      .with(Values::kNormal, seed++));
  run_cases("activation: odd and long rows", cases);
}

TEST_F(Variants, ActivationWithResidualStatsOffsetAndStridedRows) {
  // h = x + residual is written exactly (before the activation), the saved statistics are the
  // norm's, the weight offset comes before the activation; strided rows and in-place y.
  std::vector<Case> cases;
  uint64_t seed = 1600;
  for (Activation a : kActivations) {
    cases.push_back(rms({7, 4096}, Dtype::kBF16)
                        .params(Dtype::kF32)
                        .add_residual(Dtype::kBF16, /*in_place=*/true)
                        .act(a)
                        .with(Values::kNormal, seed++));
    cases.push_back(layer_norm({5, 3000}, Dtype::kF16)
                        .add_residual(Dtype::kF32, /*in_place=*/false)
                        .act(a)
                        .stats()
                        .y_over_x()
                        .with(Values::kNormal, seed++));
    cases.push_back(rms({128, 5120}, Dtype::kBF16)
                        .offset(1.0)
                        .add_residual(Dtype::kBF16, true)
                        .out(Dtype::kE4M3, 0.5f)
                        .act(a)
                        .stats()
                        .rows_at(slice(16, 3 * 5120), slice(0, 5120 + 16))
                        .residual_at(slice(32, 5120 + 32), {})
                        .with(Values::kNormal, seed++));
    cases.push_back(rms({7, 8, 128}, Dtype::kBF16)
                        .two_level(8)
                        .act(a)
                        .rows_at(heads(0, 12 * 128, 128), heads(16, 8 * 144, 144))
                        .with(Values::kNormal, seed++));
    cases.push_back(layer_norm({2, 1000003}, Dtype::kBF16)
                        .add_residual(Dtype::kF32, false)
                        .act(a)
                        .stats()
                        .with(Values::kNormal, seed++));
    cases.push_back(group_norm({2, 32, 7, 7}, Dtype::kF32, 8)
                        .offset(0.5)
                        .act(a)
                        .stats()
                        .with(Values::kNegative, seed++));
    cases.push_back(layer_norm_channels({2, 64, 9, 9}, Dtype::kF16)
                        .offset(1.0)
                        .act(a)
                        .stats()
                        .with(Values::kNormal, seed++));
  }
  run_cases("activation with the other axes", cases);
}

TEST_F(Variants, ActivationAdversarialValues) {
  // Large mean (1e4, std 1), tiny values, constant rows (the output is the bias alone), all
  // negative; and a weight offset of 40, which spreads y over about -150..150: exp(-v)
  // overflows f32 for v < -88.7 (silu's quotient is then -0, its float64 value below 1e-36) and
  // erf saturates.
  std::vector<Case> cases;
  uint64_t seed = 1700;
  int i = 0;
  for (Values v : {Values::kLargeMean, Values::kTiny, Values::kConstant, Values::kNegative}) {
    for (Activation a : kActivations) {
      auto d = [&] { return kXDtypes[i++ % 3]; };
      cases.push_back(layer_norm({3, 1000}, d()).act(a).out(Dtype::kF32).with(v, seed++));
      cases.push_back(rms({3, 4096}, d()).act(a).out(Dtype::kE4M3, 4.0f).with(v, seed++));
      cases.push_back(group_norm({2, 32, 9, 9}, d(), 8).act(a).with(v, seed++));
      cases.push_back(rms_channels({2, 64, 9, 7}, d()).act(a).out(Dtype::kF16).with(v, seed++));
      cases.push_back(layer_norm_channels({2, 96, 9, 7}, d()).act(a).with(v, seed++));
    }
  }
  for (Activation a : kActivations) {
    for (Dtype x : kXDtypes) {
      cases.push_back(layer_norm({5, 1000}, x).offset(40.0).act(a).with(Values::kNormal, seed++));
      cases.push_back(
          group_norm({2, 32, 9, 9}, x, 8).offset(40.0).act(a).with(Values::kNormal, seed++));
    }
    cases.push_back(rms({3, 4096}, Dtype::kBF16)
                        .offset(40.0)
                        .act(a)
                        .out(Dtype::kF32)
                        .with(Values::kNormal, seed++));
  }
  run_cases("activation: adversarial values", cases);
}

// The activation's own error, apart from the norm's: the same inputs through the kernel with
// and without the activation (f32 out), and the first's output against the float64 activation
// of the second's. The pre-activation values are the same arithmetic in both kernels (only the
// epilogue differs), so what is left is the f32 activation of ex2.approx, div.approx (silu of a
// lone value) or rcp.approx (silu of a pair: epilogue.cuh's silu_pair), and gelu's
// Abramowitz-Stegun erfc (rcp.approx, ex2.approx).
// Bound: 2e-6 of |ref| + 1e-6 absolute (kActivationError; twice what the host emulation of the
// formulas and the intrinsics' documented errors give). The measured worst is printed.
TEST_F(Variants, ActivationErrorOfTheEpilogueAlone) {
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const auto t0 = std::chrono::steady_clock::now();
  // y spread over about -25..25 (a weight offset of 8 on N(1, 0.5) weights, biases around -1),
  // one row of the row kernel, the channel kernel and a GroupNorm row kernel.
  const std::vector<Case> bases = {
      layer_norm({16, 4096}, Dtype::kF32).offset(8.0).with(Values::kNormal, 1801),
      layer_norm_channels({4, 64, 32, 32}, Dtype::kF32).offset(8.0).with(Values::kNormal, 1802),
      group_norm({2, 64, 16, 16}, Dtype::kF32, 8).offset(8.0).with(Values::kNormal, 1803),
  };
  for (Activation a : kActivations) {
    double worst = 0, worst_ulps = 0, worst_at = 0;
    int64_t checked = 0, beyond = 0;
    for (Case base : bases) {
      Case with = base;
      with.act(a);
      try {
        VariantRun plain(base), activated(with);
        const int64_t batch = plain.spec().batch();
        engine.prepare(plain.spec()).launch(plain.args(batch), nullptr);
        engine.prepare(activated.spec()).launch(activated.args(batch), nullptr);
        NORMJIT_CU(driver::api().cuCtxSynchronize());
        const std::vector<unsigned char> y0 = plain.written(batch).y,
                                         y1 = activated.written(batch).y;
        ASSERT_EQ(y0.size(), y1.size());
        for (size_t e = 0; e < y0.size() / 4; ++e) {
          float v, got;
          std::memcpy(&v, &y0[4 * e], 4);
          std::memcpy(&got, &y1[4 * e], 4);
          const double ref = reference::activate(a, double(v));
          const double err = std::fabs(double(got) - ref);
          const double bound = kActivationError * std::fabs(ref) + 0.5 * kActivationError;
          ++checked;
          if (!(err <= bound) && beyond++ == 0) {
            ADD_FAILURE() << to_string(a) << "(" << v << ") = " << got << ", float64 " << ref
                          << " (bound " << bound << ")";
          }
          if (err / (std::fabs(ref) + 1.0) > worst) {
            worst = err / (std::fabs(ref) + 1.0);
            worst_at = v;
          }
          if (std::fabs(ref) > 1e-3) {
            const double ulp = std::ldexp(1.0, std::ilogb(float(ref)) - 23);
            worst_ulps = std::max(worst_ulps, err / ulp);
          }
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << to_string(a) << ": " << e.what();
      }
    }
    EXPECT_EQ(beyond, 0) << to_string(a) << ": " << beyond << " of " << checked
                         << " values beyond the bound";
    EXPECT_GT(checked, 100000) << to_string(a);
    std::printf(
        "[ measured ] %s: %lld values, worst |err| / (|ref| + 1) %.3g (at v = %.6g), worst %.2f "
        "ulp where |ref| > 1e-3\n",
        to_string(a), static_cast<long long>(checked), worst, worst_at, worst_ulps);
  }
  std::printf("[ summary  ] activation epilogue alone: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

TEST_F(Variants, ActivationCudaGraphOfGroupNormSiluReplaysWithNewInputs) {
  // The SD UNet's GroupNorm -> SiLU kernel captured on a fresh non-blocking stream, replayed
  // with new x (and fp8 scale) in the captured buffers, checked against float64 each time.
  const auto t0 = std::chrono::steady_clock::now();
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const Target target = device::target_of(context.device());
  const Case unet =
      group_norm({2, 320, 64, 64}, Dtype::kF16, 32).act(Activation::kSilu).with(Values::kNormal, 1);
  const Case fp8 = layer_norm_channels({2, 96, 14, 14}, Dtype::kBF16)
                       .act(Activation::kGelu)
                       .out(Dtype::kE4M3, 0.5f)
                       .with(Values::kNormal, 2);
  prepare_in_parallel(engine, {unet, fp8});
  Summary summary;
  for (const Case& c : {unet, fp8}) {
    std::string what = format_shape(*c.fields.shape);
    try {
      const NormSpec spec = NormSpec::from_fields(c.fields);
      VariantRun run(c);
      const Kernel kernel = engine.prepare(spec);
      const std::string strat = strategy_of(spec, target);
      summary.strategies.insert(strat);
      what = line_of(run, c, spec.batch(), strat);
      std::printf("[ variant  ] %s\n", what.c_str());
      device::Stream stream;
      CapturedGraph graph(stream.get(),
                          [&] { kernel.launch(run.args(spec.batch()), stream.handle()); });
      const Values kinds[] = {Values::kNormal, Values::kNegative, Values::kLargeMean};
      const float scales[] = {0.5f, 4.0f, 100.0f};
      for (int r = 0; r < 3; ++r) {
        run.generate(kinds[r], Values::kNormal, 20 + r, scales[r]);
        graph.replay(stream.get());
        stream.synchronize();
        const Outcome o = run.check(spec.batch());
        print_result(spec, o);
        expect_outcome(spec, o, kinds[r], what + " | replay " + std::to_string(r), summary);
        ++summary.cases;
      }
    } catch (const std::exception& e) {
      ++summary.failed_to_run;
      ADD_FAILURE() << what << ": " << e.what();
    }
  }
  summary.print("activation: CUDA graph replays", t0);
}

// layout=nhwc (issue 19 item 2): GroupNorm and the channel forms on channels-last tensors. The
// input is the logical [N, C, *spatial] tensor permuted to [N, *spatial, C] (VariantRun's
// scatter), the output permuted back (gather), and both compared with the float64 reference
// of the logical tensor, as every other case.

Case nhwc_group(std::vector<int64_t> shape, Dtype d, int64_t groups, Affine a = Affine::kBoth) {
  return group_norm(std::move(shape), d, groups, a).nhwc();
}
Case nhwc_rms(std::vector<int64_t> shape, Dtype d, Affine a = Affine::kWeight) {
  return rms_channels(std::move(shape), d, a).nhwc();
}
Case nhwc_layer(std::vector<int64_t> shape, Dtype d, Affine a = Affine::kBoth) {
  return layer_norm_channels(std::move(shape), d, a).nhwc();
}

// The variant axes in turn over a channel-form test's cases (the i-th RMSNorm r and LayerNorm
// l): none; f32 params and an offset, stats; fp8 out and stats, silu to f32; gelu, f32 params
// to e5m2 with an offset; stats and offsets with gelu.
void with_axes_in_turn(int i, Case& r, Case& l) {
  switch (i % 5) {
    case 0:
      break;
    case 1:
      r.params(Dtype::kF32).offset(1.0);
      l.stats();
      break;
    case 2:
      r.out(Dtype::kE4M3, 0.5f).stats();
      l.act(Activation::kSilu).out(Dtype::kF32);
      break;
    case 3:
      r.act(Activation::kGelu);
      l.params(Dtype::kF32).out(Dtype::kE5M2, 4.0f).offset(0.5);
      break;
    default:
      r.stats().offset(0.5);
      l.stats().act(Activation::kGelu);
      break;
  }
}

TEST_F(Variants, ChannelsSlabOnSmallOddMapsEveryDtypeAxisAndCluster) {
  // The slab kernel (channels_slab.cuh, sm_90): items over clusters of 1, 2, 4 and 8 CTAs, maps
  // of 1, 3x3, 5x5, 7x7, 9x9, 13x13 and 3-D, both operators, every dtype, with each variant axis,
  // adversarial values (LayerNorm's shift by channel 0 across the cluster: large means).
  struct Map {
    std::vector<int64_t> shape;
    int cluster;  // f32 x: the plan's CTAs per item, checked on sm_90
  };
  const std::vector<Map> maps = {
      {{3, 2048, 7, 7}, 8},  // ResNet's last stage: 8 slabs of 256 channels
      {{2, 768, 7, 7}, 8},   // ConvNeXt-T's last stage
      {{5, 96, 7, 7}, 2},    // 18816 bytes: two slabs
      {{4, 64, 3}, 1},       // S = 3 (S = 1 is rows: ChannelFormsOfOnePositionRunAsRowsOfC)
      {{2, 1024, 3, 3}, 4},  // 36864 bytes: four of 9216
      {{3, 200, 9, 9}, 2},   // slabs of a quarter would not be whole 16-byte vectors
      {{2, 48, 5, 5}, 1},    {{1, 512, 13, 13}, 8},
      {{2, 16, 3, 5, 7}, 1},  // a 3-D volume of 105 positions
  };
  std::vector<Case> cases;
  uint64_t seed = 2500;
  int i = 0;
  device::PrimaryContext context;
  const Target target = device::target_of(context.device());
  for (const Map& m : maps) {
    for (Dtype x : kXDtypes) {
      Case r = rms_channels(m.shape, x);
      Case l = layer_norm_channels(m.shape, x, i % 2 ? Affine::kWeight : Affine::kBoth);
      if (target.sm >= 90 && x == Dtype::kF32) {
        for (const Case* c : {&r, &l}) {
          const NormSpec spec = NormSpec::from_fields(c->fields);
          const KernelPlan p = plan(spec, target);
          EXPECT_EQ(p.strategy, Strategy::kChannelsSlab) << spec.to_string();
          EXPECT_EQ(p.blocks_per_item, m.cluster) << spec.to_string();
        }
      }
      with_axes_in_turn(i++, r, l);
      cases.push_back(r.with(Values::kNormal, seed++));
      cases.push_back(l.with(Values::kNormal, seed++));
    }
  }
  for (Values v : {Values::kLargeMean, Values::kTiny, Values::kConstant, Values::kNegative}) {
    for (Dtype x : kXDtypes) {
      cases.push_back(layer_norm_channels({2, 768, 7, 7}, x).stats().with(v, seed++));
      cases.push_back(rms_channels({3, 2048, 7, 7}, x).with(v, seed++));
    }
  }
  run_cases("channels slab: small odd maps", cases);
}

TEST_F(Variants, NhwcMatchesFloat64OnOddVisionAndDiffusionShapes) {
  std::vector<Case> cases;
  uint64_t seed = 3000;
  // Odd spatial sizes, 1x1, 3-D volumes, C not a multiple of the vector width (3, 65), C = 96
  // with 3 groups; every dtype and affine form.
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> small = {
      {{2, 64, 7, 9}, 8},    {{3, 32, 1, 1}, 4}, {{2, 32, 5, 6, 7}, 8},   {{2, 3, 7, 9}, 3},
      {{2, 65, 7, 9}, 5},    {{2, 96, 7, 9}, 3}, {{1, 96, 3, 5, 7}, 3},   {{4, 40, 33}, 4},
      {{2, 130, 17, 3}, 13}, {{1, 1, 5, 5}, 1},  {{2, 48, 2, 3, 4, 5}, 6}};
  for (const auto& [shape, groups] : small) {
    for (Dtype d : kXDtypes) {
      for (Affine a : {Affine::kNone, Affine::kWeight, Affine::kBoth}) {
        cases.push_back(nhwc_group(shape, d, groups, a).with(Values::kNormal, seed++));
        cases.push_back(nhwc_layer(shape, d, a).with(Values::kNormal, seed++));
        if (a != Affine::kBoth)
          cases.push_back(nhwc_rms(shape, d, a).with(Values::kNormal, seed++));
      }
    }
  }
  // The SD 1.5/SDXL UNet and VAE GroupNorms (G = 32) and ConvNeXt's LayerNorm2d: the exchange
  // between CTAs, items held in registers and (VAE f32) streamed twice.
  for (Dtype d : kXDtypes) {
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
             {2, 320, 64, 64}, {1, 512, 128, 128}, {2, 1280, 8, 8}, {1, 128, 256, 256}}) {
      cases.push_back(nhwc_group(shape, d, 32).with(Values::kNormal, seed++));
    }
    // Exchanged items cut into tiles of 8 groups: two tiles (G = 16), an odd map (S = 61 x 67,
    // the last segment short); and 36 groups, which 8 does not divide (untiled, every thread
    // polling its share of the partials).
    cases.push_back(nhwc_group({2, 320, 64, 64}, d, 16).with(Values::kNormal, seed++));
    cases.push_back(nhwc_group({3, 256, 61, 67}, d, 32).with(Values::kNormal, seed++));
    cases.push_back(nhwc_group({2, 360, 64, 64}, d, 36).with(Values::kNormal, seed++));
  }
  for (Dtype d : {Dtype::kF32, Dtype::kBF16, Dtype::kF16}) {
    cases.push_back(nhwc_layer({8, 96, 56, 56}, d).with(Values::kNormal, seed++));
    cases.push_back(nhwc_layer({8, 768, 7, 7}, d).with(Values::kNormal, seed++));
    cases.push_back(nhwc_rms({4, 192, 28, 28}, d).with(Values::kNormal, seed++));
  }
  // Items larger than the chip holds, streamed twice: 32 groups of 8 channels over 147456
  // positions (37.7 M elements an item), and 3 groups of 32 in f32.
  cases.push_back(nhwc_group({1, 256, 384, 384}, Dtype::kF16, 32).with(Values::kNormal, seed++));
  cases.push_back(nhwc_group({1, 96, 256, 256}, Dtype::kF32, 3).with(Values::kNormal, seed++));
  // Channels beyond one row team (split rows), and many items over few slots.
  cases.push_back(nhwc_layer({2, 40000, 3}, Dtype::kF32).with(Values::kNormal, seed++));
  cases.push_back(nhwc_group({300, 64, 8, 8}, Dtype::kBF16, 8).with(Values::kNormal, seed++));
  cases.push_back(nhwc_group({40, 256, 32, 32}, Dtype::kF16, 32).with(Values::kNormal, seed++));
  run_cases("layout nhwc", cases);
}

TEST_F(Variants, NhwcWithEachVariantAxis) {
  // param_dtype, out_dtype (fp8 with a scale, saturating), weight_offset, save_stats and the
  // activation on the channels-last kernels: GroupNorm in one CTA per item, exchanged between CTAs,
  // streamed; the channel forms as rows.
  std::vector<Case> cases;
  uint64_t seed = 3500;
  const std::vector<Case> bases = {
      nhwc_group({2, 96, 7, 9}, Dtype::kBF16, 3),
      nhwc_group({2, 320, 32, 32}, Dtype::kF16, 32),
      nhwc_group({1, 128, 256, 256}, Dtype::kF32, 32),
      nhwc_group({2, 65, 5, 7}, Dtype::kF32, 5),
      nhwc_layer({4, 96, 14, 14}, Dtype::kBF16),
      nhwc_layer({2, 65, 9, 7}, Dtype::kF32),
      nhwc_rms({4, 64, 9, 7}, Dtype::kF16),
  };
  for (const Case& base : bases) {
    const Dtype x = *base.fields.dtype;
    cases.push_back(Case(base)
                        .params(x == Dtype::kF32 ? Dtype::kBF16 : Dtype::kF32)
                        .with(Values::kNormal, seed++));
    for (Dtype out : kOutDtypes) {
      if (out == x) continue;
      cases.push_back(Case(base).out(out, is_fp8(out) ? 4.0f : 1.0f).with(Values::kNormal, seed++));
    }
    cases.push_back(
        Case(base).out(Dtype::kE4M3, 100.0f).with(Values::kNormal, seed++));  // saturates
    cases.push_back(Case(base).offset(1.0).with(Values::kNormal, seed++));
    cases.push_back(Case(base).stats().with(Values::kNormal, seed++));
    cases.push_back(Case(base)
                        .params(Dtype::kF32)
                        .out(Dtype::kE5M2, 0.5f)
                        .offset(0.5)
                        .stats()
                        .with(Values::kNormal, seed++));
    // The activation epilogue: silu alone, and gelu before an fp8 scale.
    cases.push_back(Case(base).act(Activation::kSilu).with(Values::kNormal, seed++));
    cases.push_back(
        Case(base).act(Activation::kGelu).out(Dtype::kE4M3, 4.0f).with(Values::kNegative, seed++));
  }
  run_cases("layout nhwc with each variant axis", cases);
}

TEST_F(Variants, NhwcAdversarialValues) {
  // Large mean (1e4, std 1: each group's shift keeps the statistics exact), tiny values,
  // constant groups (variance 0: y = bias), all negative.
  std::vector<Case> cases;
  uint64_t seed = 3800;
  for (Values v : {Values::kLargeMean, Values::kTiny, Values::kConstant, Values::kNegative}) {
    for (Dtype d : kXDtypes) {
      cases.push_back(nhwc_group({2, 320, 16, 16}, d, 32).stats().with(v, seed++));
      cases.push_back(nhwc_group({2, 1280, 8, 8}, d, 32).stats().with(v, seed++));  // tiles
      cases.push_back(nhwc_group({1, 128, 256, 256}, d, 32).stats().with(v, seed++));
      cases.push_back(nhwc_group({2, 65, 7, 9}, d, 13).out(Dtype::kF32).with(v, seed++));
      cases.push_back(nhwc_layer({2, 96, 9, 7}, d).stats().out(Dtype::kF32).with(v, seed++));
      cases.push_back(nhwc_rms({2, 64, 9, 7}, d).stats().with(v, seed++));
    }
  }
  run_cases("layout nhwc adversarial values", cases);
}

// Each case launched at its largest batch, then at each batch of its list: an item's y and
// statistics have the same bits whatever the batch launched, and nothing past the batch is
// written.
void run_batch_invariance(const char* title,
                          const std::vector<std::pair<Case, std::vector<int64_t>>>& runs) {
  const auto t0 = std::chrono::steady_clock::now();
  device::PrimaryContext context;
  const Target target = device::target_of(context.device());
  Engine engine(test_engine_options());
  Summary summary;
  for (const auto& [c, batches] : runs) {
    std::string what = format_shape(*c.fields.shape);
    try {
      const NormSpec spec = NormSpec::from_fields(c.fields);
      VariantRun run(c);
      const Kernel kernel = engine.prepare(spec);
      const std::string strat = strategy_of(spec, target);
      what = line_of(run, c, batches.back(), strat);
      std::printf("[ variant  ] %s\n", what.c_str());
      run.reset();
      kernel.launch(run.args(batches.back()), nullptr);
      NORMJIT_CU(driver::api().cuCtxSynchronize());
      const Written full = run.written(batches.back());
      const Outcome o = run.check(batches.back());
      print_result(spec, o);
      expect_outcome(spec, o, c.values, what, summary);
      ++summary.cases;
      for (int64_t b : batches) {
        run.reset();
        kernel.launch(run.args(b), nullptr);
        NORMJIT_CU(driver::api().cuCtxSynchronize());
        const Written w = run.written(b);
        for (const auto& [got, all, name] :
             {std::tuple{&w.y, &full.y, "y"}, std::tuple{&w.mean, &full.mean, "mean"},
              std::tuple{&w.rstd, &full.rstd, "rstd"}}) {
          ASSERT_LE(got->size(), all->size());
          EXPECT_EQ(std::memcmp(got->data(), all->data(), got->size()), 0)
              << what << ": batch " << b << ": " << name << " bits differ from the batch "
              << batches.back() << " launch";
        }
        const Outcome ob = run.check(b, /*against_reference=*/false);
        EXPECT_EQ(ob.outside_writes, 0) << what << ": batch " << b << ": " << ob.first_outside;
      }
    } catch (const std::exception& e) {
      ++summary.failed_to_run;
      ADD_FAILURE() << what << ": " << e.what();
    }
  }
  summary.print(title, t0);
}

TEST_F(Variants, NhwcItemBitsDoNotDependOnTheLaunchBatch) {
  // GroupNorm's items over slots of P CTAs (fewer slots than items at the largest batch), and
  // the channel forms' N x S rows: an item's y and statistics have the same bits whatever the
  // batch launched, and nothing past the batch is written.
  run_batch_invariance(
      "layout nhwc batch invariance",
      {
          // Tiles of 2 groups, a CTA each over all positions: 16 CTAs per item, no exchange.
          {nhwc_group({40, 320, 32, 32}, Dtype::kBF16, 32).stats().with(Values::kNormal, 1),
           {1, 2, 13, 40}},
          // Exchanged in tiles of 8 groups, the item's 4 tiles x P CTAs a slot: 2 slots of 56 CTAs
          // on 132 SMs for the 9 items; 1 slot of 128 CTAs for the VAE's 3.
          {nhwc_group({9, 320, 64, 64}, Dtype::kF16, 32).stats().with(Values::kNormal, 5),
           {1, 2, 5, 9}},
          {nhwc_group({3, 512, 128, 128}, Dtype::kBF16, 32).stats().with(Values::kNormal, 6),
           {1, 3}},
          {nhwc_group({6, 128, 256, 256}, Dtype::kF32, 32).stats().with(Values::kNormal, 2),
           {1, 2, 6}},
          {nhwc_group({9, 96, 7, 9}, Dtype::kF16, 3).stats().with(Values::kNormal, 3), {1, 4, 9}},
          {nhwc_layer({9, 96, 14, 14}, Dtype::kBF16).stats().with(Values::kNormal, 4), {1, 4, 9}},
      });
}

TEST_F(Variants, NhwcCudaGraphOnAFreshStreamReplaysWithNewInputs) {
  // The exchanging GroupNorm kernel (its workspace per capture), the tiled one (a CTA per group
  // of an item) and a channel-form row kernel, captured on a stream first used inside the
  // capture, replayed with new x and scale.
  const auto t0 = std::chrono::steady_clock::now();
  device::PrimaryContext context;
  Engine engine(test_engine_options());
  const Target target = device::target_of(context.device());
  const Case group = nhwc_group({2, 320, 64, 64}, Dtype::kF16, 32)
                         .out(Dtype::kE4M3, 0.5f)
                         .stats()
                         .with(Values::kNormal, 1);
  const Case rows = nhwc_layer({8, 96, 56, 56}, Dtype::kBF16).offset(1.0).with(Values::kNormal, 2);
  const Case tiles =
      nhwc_group({2, 1280, 8, 8}, Dtype::kBF16, 32).act(Activation::kSilu).with(Values::kNormal, 3);
  prepare_in_parallel(engine, {group, rows, tiles});
  Summary summary;
  for (const Case& c : {group, rows, tiles}) {
    std::string what = format_shape(*c.fields.shape);
    try {
      const NormSpec spec = NormSpec::from_fields(c.fields);
      VariantRun run(c);
      const Kernel kernel = engine.prepare(spec);
      const std::string strat = strategy_of(spec, target);
      what = line_of(run, c, spec.batch(), strat);
      std::printf("[ variant  ] %s\n", what.c_str());
      device::Stream stream;
      CapturedGraph graph(stream.get(),
                          [&] { kernel.launch(run.args(spec.batch()), stream.handle()); });
      const Values kinds[] = {Values::kNormal, Values::kNegative, Values::kLargeMean};
      const float scales[] = {0.5f, 4.0f, 100.0f};
      for (int r = 0; r < 3; ++r) {
        run.generate(kinds[r], Values::kNormal, 20 + r, scales[r]);
        graph.replay(stream.get());
        stream.synchronize();
        const Outcome o = run.check(spec.batch());
        print_result(spec, o);
        expect_outcome(spec, o, kinds[r], what + " | replay " + std::to_string(r), summary);
        ++summary.cases;
      }
    } catch (const std::exception& e) {
      ++summary.failed_to_run;
      ADD_FAILURE() << what << ": " << e.what();
    }
  }
  summary.print("layout nhwc CUDA graph replays", t0);
}

TEST_F(Variants, ChannelFormsOfOnePositionRunAsRowsOfC) {
  // The channel forms with one position per item (S = 1): rmsnorm's default, dim 1, of a 2-D
  // [N, C], and LayerNorm2d on [N, C, 1, 1] (ConvNeXt's head after its pooling). An item's C
  // channels are then one contiguous row, and the forward plans the row kernels (checked here)
  // where it planned the channel kernels; every dtype, each variant axis, odd, tiny and long C
  // (rows split over CTAs), adversarial values, and their batch invariance.
  device::PrimaryContext context;
  const Target target = device::target_of(context.device());
  const std::vector<std::vector<int64_t>> shapes = {{1, 1},       {3, 7},          {5, 65},
                                                    {2, 1000, 1}, {7, 1021, 1, 1}, {32, 768, 1, 1},
                                                    {512, 8192},  {2, 40000},      {1, 131071, 1}};
  std::vector<Case> cases;
  uint64_t seed = 4100;
  int i = 0;
  for (const std::vector<int64_t>& shape : shapes) {
    for (Dtype x : kXDtypes) {
      Case r = rms_channels(shape, x);
      Case l = layer_norm_channels(shape, x, i % 2 ? Affine::kWeight : Affine::kBoth);
      for (const Case* c : {&r, &l}) {
        const std::string strat = strategy_of(NormSpec::from_fields(c->fields), target);
        EXPECT_EQ(strat.rfind("row-", 0), 0u)
            << NormSpec::from_fields(c->fields).to_string() << ": " << strat;
      }
      with_axes_in_turn(i++, r, l);
      cases.push_back(r.with(Values::kNormal, seed++));
      cases.push_back(l.with(Values::kNormal, seed++));
    }
  }
  for (Values v : {Values::kLargeMean, Values::kTiny, Values::kConstant, Values::kNegative}) {
    for (Dtype x : kXDtypes) {
      cases.push_back(layer_norm_channels({32, 768, 1, 1}, x).stats().with(v, seed++));
      cases.push_back(rms_channels({3, 4099}, x).stats().with(v, seed++));
    }
  }
  // The backward: the row backward kernel (BackwardChannelsGpu checks its values).
  NormSpec backward =
      NormSpec::from_fields(layer_norm_channels({32, 768, 1, 1}, Dtype::kF32).fields);
  backward.backward = true;
  EXPECT_EQ(strategy_of(backward, target), "row-backward");
  run_cases("channel forms of one position as rows", cases);
  run_batch_invariance(
      "channel forms of one position: batch invariance",
      {{rms_channels({40, 4096}, Dtype::kBF16).stats().with(Values::kNormal, 7), {1, 2, 17, 40}},
       {layer_norm_channels({300, 768, 1, 1}, Dtype::kF16).stats().with(Values::kNormal, 8),
        {1, 3, 257, 300}},
       {rms_channels({5, 40000}, Dtype::kF32).with(Values::kNormal, 9), {1, 2, 5}}});
}

}  // namespace
}  // namespace normjit::testing
