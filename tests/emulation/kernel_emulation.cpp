// normjit's kernels emulated on the host (no GPU; host_cuda.hpp says how and what that checks).
// For each spec of a list: plan it for sm_90 (or --arch's target), emit its source, compile that
// with the host templates (host_templates.py's) into a shared object, and launch it over the plan's
// grid for a device of each given number of co-resident CTAs (each CTA a process). Against float64:
//   forward: y (through the activation, times the scale of an fp8 output), h = x + residual where
//   the spec adds one (written to residual_out and normalized), the statistics with save_stats;
//   a line "strided SPEC" launches a trailing form with row strides longer than its rows;
//   a line "nan SPEC" launches the forward again with NaN in x at a few sites: each site's row
//   (group, position) must be NaN through, y and the saved statistics, h at the site alone, and
//   every other output must keep its bits;
//   backward: dx (plus dh with a residual), dweight and dbias, from the same saved statistics
//     (with an activation: dy through its derivative at the forward's xhat * w + b); "nan SPEC"
//     launches it again with NaN in dy at the sites: dx NaN over each site's row, dweight and
//     dbias at the site's parameter alone, every other output with its bits.
// And y's (dx's) bits must not depend on the grid: a row's, group's or position's result is the
// same whatever CTAs share the launch. Not emulated: the cluster kernel (channels-slab:
// distributed shared memory).
//
//   kernel_emulation --cxx CXX --templates DIR --emulation DIR --work DIR [--co 5,300]
//                    [--arch sm_90:8] [--bits] SPECS
//
// --bits: each launch's line ends with a hash of its outputs' bits (y, or dx with dweight and
// dbias), so that two plans of a spec (an experiment's knobs, run.sh under each setting) can be
// compared for the same bits, not only for the same errors.
// --arch: the target the specs are planned for (normjit dump's form): a part with few
// multiprocessors makes the split and streamed plans of long rows reachable at small sizes.
// SPECS: a spec text a line ('#' comments). Exit status 0 when every launch matches, 1 when one
// does not, 2 on a usage or setup error.
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "generator/emit.hpp"
#include "generator/plan.hpp"
#include "generator/target.hpp"
#include "normjit/error.hpp"
#include "normjit/spec.hpp"

#define __device__
#define __forceinline__ inline
#include "normjit/params.cuh"  // the struct the kernels take
#undef __device__
#undef __forceinline__

namespace {

using normjit::Dtype;

// Device memory, shared with the CTAs' processes: zeroed, unmapped when it goes.
class DeviceMemory {
 public:
  explicit DeviceMemory(size_t bytes) : bytes_(bytes + 256) {
    p_ = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p_ == MAP_FAILED) {
      std::perror("mmap");
      std::exit(2);
    }
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { munmap(p_, bytes_); }
  void* get() const { return p_; }

 private:
  size_t bytes_;
  void* p_;
};

// Stores v as element i of a tensor of d (fp8: only NaN, the poison).
void store(void* base, int64_t i, float v, Dtype d) {
  if (d == Dtype::kF32) {
    static_cast<float*>(base)[i] = v;
    return;
  }
  if (normjit::is_fp8(d)) {
    static_cast<unsigned char*>(base)[i] = 0x7f;
    return;
  }
  unsigned short bits;
  if (d == Dtype::kBF16) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<unsigned short>((u >> 16) | 0x40u);
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      bits = static_cast<unsigned short>(u >> 16);
    }
  } else {
    const _Float16 h = static_cast<_Float16>(v);
    std::memcpy(&bits, &h, 2);
  }
  static_cast<unsigned short*>(base)[i] = bits;
}

double load(const void* base, int64_t i, Dtype d) {
  if (d == Dtype::kF32) return static_cast<const float*>(base)[i];
  if (normjit::is_fp8(d)) {  // E4M3: 3 mantissa bits, bias 7, 0x7f NaN; E5M2: 2 bits, bias 15
    const unsigned bits = static_cast<const unsigned char*>(base)[i];
    const int m = d == Dtype::kE4M3 ? 3 : 2, bias = d == Dtype::kE4M3 ? 7 : 15;
    const unsigned exponent = (bits & 0x7fu) >> m, mantissa = bits & ((1u << m) - 1);
    if ((d == Dtype::kE4M3 && (bits & 0x7fu) == 0x7fu) || (d == Dtype::kE5M2 && exponent == 31u)) {
      return NAN;
    }
    const double magnitude =
        exponent == 0 ? std::ldexp(double(mantissa), 1 - bias - m)
                      : std::ldexp(1.0 + double(mantissa) / (1 << m), int(exponent) - bias);
    return bits & 0x80u ? -magnitude : magnitude;
  }
  const unsigned short bits = static_cast<const unsigned short*>(base)[i];
  if (d == Dtype::kBF16) {
    const uint32_t u = uint32_t{bits} << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<double>(h);
}

uint64_t fnv(const void* p, size_t bytes, uint64_t h = 1469598103934665603ull) {
  for (size_t i = 0; i < bytes; ++i) {
    h ^= static_cast<const unsigned char*>(p)[i];
    h *= 1099511628211ull;
  }
  return h;
}

struct Options {
  std::string cxx, templates, emulation, work, specs;
  std::vector<int64_t> co = {5, 300};
  std::string arch = "sm_90";
  bool bits = false;
};

using RunCta = void (*)(const void*, unsigned, unsigned, unsigned, unsigned);

// The spec's kernel compiled for the host; nullptr (after a message) when it does not compile.
RunCta compile(const Options& o, const normjit::KernelPlan& plan, int index) {
  const normjit::EmittedKernel k = normjit::emit(plan);
  const std::string base = o.work + "/kernel" + std::to_string(index);
  {
    std::ofstream out(base + ".cpp");
    out << "#include \"host_cuda.hpp\"\n"
        << k.source << "\n#define NORMJIT_EMULATED_KERNEL " << k.kernel << "\n"
        << "#include \"cta_runner.inc\"\n";
  }
  // -w: the templates' host form has what a device build has no use for (unused parameters).
  const std::string command = "'" + o.cxx +
                              "' -std=c++17 -O1 -g -w -fPIC -shared -D__CUDA_ARCH__=900 -I'" +
                              o.emulation + "' -I'" + o.templates + "' -include cstring '" + base +
                              ".cpp' -o '" + base + ".so' 2> '" + base + ".log'";
  if (std::system(command.c_str()) != 0) {
    std::printf("FAIL: the host build of its source failed (%s.log)\n", base.c_str());
    return nullptr;
  }
  void* so = dlopen((base + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (so == nullptr) {
    std::printf("FAIL: %s\n", dlerror());
    return nullptr;
  }
  return reinterpret_cast<RunCta>(dlsym(so, "run_cta"));
}

// One spec's tensors and its float64 reference.
class Problem {
 public:
  // strided: x and the residual with rows 16 elements longer than H (rounded up to 16), y and
  // residual_out 32 (the trailing forms' row strides; forward).
  Problem(const normjit::NormSpec& spec, uint64_t seed, bool strided) : spec_(spec) {
    const bool gn = spec.op == normjit::Op::kGroupNorm;
    channel_form_ = !gn && spec.channel_form() && !spec.channel_rows();
    const bool grouped_or_channels = gn || spec.channel_form();
    c_ = grouped_or_channels ? spec.channels() : 0;
    s_ = grouped_or_channels ? spec.spatial() : 1;
    g_ = gn ? spec.groups : 1;
    n_ = spec.elements();
    h_ = spec.row_length();
    rows_ = n_ / h_;
    weight_ = spec.affine != normjit::Affine::kNone;
    bias_ = spec.affine == normjit::Affine::kBoth;
    params_ = weight_ ? spec.param_elements() : (c_ ? c_ : h_);
    strided_ = strided;
    xs_ = strided ? (h_ + 15) / 16 * 16 + 16 : h_;
    ys_ = strided ? (h_ + 15) / 16 * 16 + 32 : h_;
    if (spec.backward) {
      backward_inputs(seed);
    } else {
      forward_inputs(seed);
    }
  }

  // The backward's inputs (x, dy, dh with a residual, the weight, the statistics a forward
  // saves, in f32) and outputs (dx, dweight, dbias).
  void backward_inputs(uint64_t seed) {
    const normjit::NormSpec& spec = spec_;
    const Dtype xd = spec.dtype, pd = spec.param_type();
    x_ = allocate(n_ * 4);
    dy_ = allocate(n_ * 4);
    dx_ = allocate(n_ * 4);
    if (spec.residual) dh_ = allocate(n_ * 4);
    mean_ = static_cast<float*>(allocate(rows_ * 4));
    rstd_ = static_cast<float*>(allocate(rows_ * 4));
    if (weight_) w_ = allocate(params_ * 4), dw_ = allocate(params_ * 4);
    if (bias_) db_ = allocate(params_ * 4);
    // With an activation the backward reads the bias too (the activation's input).
    const bool read_bias = bias_ && spec.activation != normjit::Activation::kNone;
    if (read_bias) b_ = allocate(params_ * 4);
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0, 1);
    x64_.resize(n_), dy64_.resize(n_), dh64_.resize(spec.residual ? n_ : 0);
    w64_.assign(params_, 1.0), b64_.assign(params_, 0.0);
    for (int64_t i = 0; i < n_; ++i) {
      store(x_, i, float(0.5 + 2.0 * normal(rng)), xd), x64_[i] = load(x_, i, xd);
      store(dy_, i, float(normal(rng)), xd), dy64_[i] = load(dy_, i, xd);
      if (spec.residual) store(dh_, i, float(normal(rng)), xd), dh64_[i] = load(dh_, i, xd);
    }
    for (int64_t c = 0; c < params_ && weight_; ++c) {
      store(w_, c, float(1.0 + 0.5 * normal(rng) - spec.weight_offset), pd);
      w64_[c] = spec.weight_offset + load(w_, c, pd);
      if (read_bias) store(b_, c, float(normal(rng)), pd), b64_[c] = load(b_, c, pd);
    }
    const bool rms = spec.op == normjit::Op::kRmsNorm;
    for (int64_t r = 0; r < rows_; ++r) {  // the statistics a forward saves, in f32
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < h_; ++i) sum += x64_[offset(r, i)];
      const double m = rms ? 0.0 : sum / double(h_);
      for (int64_t i = 0; i < h_; ++i) sq += (x64_[offset(r, i)] - m) * (x64_[offset(r, i)] - m);
      mean_[r] = float(m);
      rstd_[r] = float(1.0 / std::sqrt(sq / double(h_) + 1e-5));
    }
  }

  // The forward's inputs (x, the residual, weight and bias) and outputs (y; residual_out, mean
  // and rstd where the spec writes them).
  void forward_inputs(uint64_t seed) {
    const Dtype xd = spec_.dtype, pd = spec_.param_type();
    x_ = allocate(rows_ * xs_ * 4);
    dx_ = allocate(rows_ * ys_ * 4);  // y
    if (spec_.residual) dh_ = allocate(rows_ * xs_ * 4), h_out_ = allocate(rows_ * ys_ * 4);
    if (normjit::is_fp8(spec_.out_type())) {
      scale_ = static_cast<float*>(allocate(4));
      *scale_ = 0.75f;
    }
    if (spec_.save_stats) {
      mean_ = static_cast<float*>(allocate(rows_ * 4));
      rstd_ = static_cast<float*>(allocate(rows_ * 4));
    }
    if (weight_) w_ = allocate(params_ * 4);
    if (bias_) b_ = allocate(params_ * 4);
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0, 1);
    x64_.resize(n_);
    w64_.assign(params_, 1.0), b64_.assign(params_, 0.0);
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t i = 0; i < h_; ++i) {
        const int64_t at = offset(r, i), xa = x_at(r, i);
        store(x_, xa, float(0.5 + 2.0 * normal(rng)), xd), x64_[at] = load(x_, xa, xd);
        if (spec_.residual) {
          const Dtype rd = *spec_.residual;
          store(dh_, xa, float(normal(rng)), rd);
          // h as the kernel forms it: x + residual in f32, rounded to the residual's dtype
          // (residual_out is poisoned before a launch).
          store(h_out_, y_at(r, i), float(load(x_, xa, xd)) + float(load(dh_, xa, rd)), rd);
          x64_[at] = load(h_out_, y_at(r, i), rd);
        }
      }
    }
    for (int64_t c = 0; c < params_; ++c) {
      if (weight_) {
        store(w_, c, float(1.0 + 0.5 * normal(rng) - spec_.weight_offset), pd);
        w64_[c] = spec_.weight_offset + load(w_, c, pd);
      }
      if (bias_) store(b_, c, float(normal(rng)), pd), b64_[c] = load(b_, c, pd);
    }
  }

  // Element i of statistics row r: its offset in x.
  int64_t offset(int64_t r, int64_t i) const {
    if (spec_.op == normjit::Op::kGroupNorm) {
      const int64_t b = r / g_, g = r % g_, cg = c_ / g_;
      if (spec_.nhwc()) return (b * s_ + i % s_) * c_ + g * cg + i / s_;
      return (b * c_ + g * cg + i / s_) * s_ + i % s_;
    }
    if (channel_form_) return (r / s_ * c_ + i) * s_ + r % s_;
    return r * h_ + i;  // trailing rows; the channel forms' rows of C (nhwc, or S = 1)
  }
  // Where element i of row r lies in x and the residual, and in y and residual_out (forward).
  int64_t x_at(int64_t r, int64_t i) const { return strided_ ? r * xs_ + i : offset(r, i); }
  int64_t y_at(int64_t r, int64_t i) const { return strided_ ? r * ys_ + i : offset(r, i); }
  // The parameter of element i at offset `at`.
  int64_t param(int64_t at, int64_t i) const {
    if (spec_.op == normjit::Op::kGroupNorm) return spec_.nhwc() ? at % c_ : at / s_ % c_;
    return i;
  }

  normjit::Params params(float* workspace) const {
    normjit::Params p{};
    if (!spec_.backward) {
      p.x = x_, p.y = dx_, p.weight = w_, p.bias = b_, p.workspace = workspace;
      p.batch = spec_.channel_rows() ? spec_.batch() * spec_.spatial() : spec_.batch();
      p.eps = float(spec_.eps);
      p.residual = dh_, p.residual_out = h_out_, p.mean = mean_, p.rstd = rstd_;
      p.scale = scale_;
      p.inner_rows = 1, p.inner_magic = 1, p.inner_shift = 0;
      p.x_rows = p.residual_rows = {xs_, xs_};
      p.y_rows = p.residual_out_rows = {ys_, ys_};
      return p;
    }
    p.x = x_, p.y = dx_, p.weight = w_, p.bias = b_, p.workspace = workspace;
    p.batch = spec_.channel_rows() ? spec_.batch() * spec_.spatial() : spec_.batch();
    p.inner_rows = 1, p.inner_magic = 1, p.inner_shift = 0;
    p.x_rows = p.y_rows = {h_, h_};
    p.mean = spec_.op == normjit::Op::kRmsNorm ? nullptr : mean_;
    p.rstd = rstd_, p.dy = dy_, p.residual = dh_, p.dweight = dw_, p.dbias = db_;
    return p;
  }

  // `value` (default NaN) in every output element; a finite one for the NaN launches, so that an
  // element a launch leaves unwritten is neither NaN nor an earlier launch's bits.
  void poison(float value = NAN) const {
    const Dtype xd = spec_.dtype, pd = spec_.param_type();
    if (!spec_.backward) {
      for (int64_t r = 0; r < rows_; ++r) {
        for (int64_t i = 0; i < h_; ++i) {
          store(dx_, y_at(r, i), value, spec_.out_type());
          if (spec_.residual) store(h_out_, y_at(r, i), value, *spec_.residual);
        }
      }
      for (int64_t r = 0; r < rows_ && spec_.save_stats; ++r) mean_[r] = rstd_[r] = value;
      return;
    }
    for (int64_t i = 0; i < n_; ++i) store(dx_, i, value, xd);
    for (int64_t c = 0; c < params_; ++c) {
      if (weight_) store(dw_, c, value, pd);
      if (bias_) store(db_, c, value, pd);
    }
  }

  // Forward: relative errors of y, of residual_out (against x + residual rounded as the kernel
  // rounds it) and of the statistics (rstd relative, mean in units of the row's std); NaN where
  // an output is not finite.
  std::vector<double> forward_errors() const {
    const bool rms = spec_.op == normjit::Op::kRmsNorm;
    double e2 = 0, r2 = 0, h2 = 0, hr2 = 0, stats = 0;
    for (int64_t r = 0; r < rows_; ++r) {
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < h_; ++i) sum += x64_[offset(r, i)];
      const double m = rms ? 0.0 : sum / double(h_);
      for (int64_t i = 0; i < h_; ++i) sq += (x64_[offset(r, i)] - m) * (x64_[offset(r, i)] - m);
      const double inv = 1.0 / std::sqrt(sq / double(h_) + spec_.eps);
      for (int64_t i = 0; i < h_; ++i) {
        const int64_t at = offset(r, i), c = param(at, i);
        const double scale = scale_ ? *scale_ : 1.0;
        const double ref = scale * activate((x64_[at] - m) * inv * w64_[c] + b64_[c]);
        const double got = load(dx_, y_at(r, i), spec_.out_type());
        e2 += (got - ref) * (got - ref), r2 += ref * ref;
        if (spec_.residual) {
          const double h = load(h_out_, y_at(r, i), *spec_.residual);
          h2 += (h - x64_[at]) * (h - x64_[at]), hr2 += x64_[at] * x64_[at];
        }
      }
      if (spec_.save_stats) {
        const double dr = std::fabs(rstd_[r] - inv) / inv;
        const double dm = rms ? 0.0 : std::fabs(mean_[r] - m) * inv;
        stats = std::isfinite(dr + dm) ? std::max(stats, std::max(dr, dm)) : NAN;
      }
    }
    const auto relative = [](double err2, double ref2) {
      return std::isfinite(err2) ? std::sqrt(err2 / std::max(ref2, 1e-300)) : NAN;
    };
    return {relative(e2, r2), spec_.residual ? relative(h2, hr2) : 0.0, stats};
  }

  double activate(double v) const {
    switch (spec_.activation) {
      case normjit::Activation::kSilu:
        return v / (1.0 + std::exp(-v));
      case normjit::Activation::kGelu:
        return 0.5 * v * std::erfc(-v * 0.70710678118654752440);
      case normjit::Activation::kNone:
        break;
    }
    return v;
  }
  // The activation's derivative at v.
  double slope(double v) const {
    switch (spec_.activation) {
      case normjit::Activation::kSilu: {
        const double s = 1.0 / (1.0 + std::exp(-v));
        return s * (1.0 + v * (1.0 - s));
      }
      case normjit::Activation::kGelu:
        return 0.5 * std::erfc(-v * 0.70710678118654752440) +
               v * std::exp(-0.5 * v * v) * 0.39894228040143267794;
      case normjit::Activation::kNone:
        break;
    }
    return 1.0;
  }

  // Relative errors of dx, dweight, dbias (NaN where an output is not finite).
  std::vector<double> errors() const {
    if (!spec_.backward) return forward_errors();
    const Dtype xd = spec_.dtype, pd = spec_.param_type();
    const bool rms = spec_.op == normjit::Op::kRmsNorm;
    double e2 = 0, r2 = 0;
    std::vector<double> dw(params_), db(params_), xhat(h_), g(h_);
    for (int64_t r = 0; r < rows_; ++r) {
      const double m = rms ? 0.0 : mean_[r], s = rstd_[r];
      double mean_g = 0, mean_gx = 0;
      for (int64_t i = 0; i < h_; ++i) {
        const int64_t at = offset(r, i), c = param(at, i);
        xhat[i] = (x64_[at] - m) * s;
        // dy through the activation, at the forward's z = xhat * w + b
        const double dz = dy64_[at] * slope(xhat[i] * w64_[c] + b64_[c]);
        g[i] = dz * w64_[c];
        mean_g += g[i], mean_gx += g[i] * xhat[i];
        dw[c] += dz * xhat[i], db[c] += dz;
      }
      mean_g = rms ? 0.0 : mean_g / double(h_), mean_gx /= double(h_);
      for (int64_t i = 0; i < h_; ++i) {
        const int64_t at = offset(r, i);
        double ref = s * (g[i] - mean_g - xhat[i] * mean_gx);
        if (spec_.residual) ref += dh64_[at];
        const double got = load(dx_, at, xd);
        e2 += (got - ref) * (got - ref), r2 += ref * ref;
      }
    }
    const auto relative = [](double err2, double ref2) {
      return std::isfinite(err2) ? std::sqrt(err2 / std::max(ref2, 1e-300)) : NAN;
    };
    const auto param_error = [&](bool present, const void* got, const std::vector<double>& ref) {
      if (!present) return 0.0;
      double err2 = 0, ref2 = 0;
      for (int64_t c = 0; c < params_; ++c) {
        const double v = load(got, c, pd);
        err2 += (v - ref[c]) * (v - ref[c]), ref2 += ref[c] * ref[c];
      }
      return relative(err2, ref2);
    };
    return {relative(e2, r2), param_error(weight_, dw_, dw), param_error(bias_, db_, db)};
  }

  // A "nan" line's sites: (statistics row, element) pairs whose x (dy) is made NaN, one a row, at
  // the first element of the first row, an element past the middle of the middle row (of a
  // group split over CTAs, in a later CTA's part) and the last element of the last row.
  std::vector<std::pair<int64_t, int64_t>> nan_sites() const {
    std::vector<std::pair<int64_t, int64_t>> sites{{0, 0}};
    if (rows_ > 2) sites.emplace_back(rows_ / 2, (h_ * 5) / 8);
    if (rows_ > 1) sites.emplace_back(rows_ - 1, h_ - 1);
    return sites;
  }

  // Puts NaN at every site (on), or the site's value back (off): into x (forward) or dy
  // (backward, whose statistics are given).
  void set_nan(bool on) {
    void* input = spec_.backward ? dy_ : x_;
    const auto at = [&](int64_t r, int64_t i) {
      return spec_.backward ? offset(r, i) : x_at(r, i);
    };
    if (saved_x_.empty()) {
      for (const auto& [r, i] : nan_sites()) saved_x_.push_back(load(input, at(r, i), spec_.dtype));
    }
    const std::vector<std::pair<int64_t, int64_t>> sites = nan_sites();
    for (size_t k = 0; k < sites.size(); ++k) {
      const auto [r, i] = sites[k];
      store(input, at(r, i), on ? NAN : float(saved_x_[k]), spec_.dtype);
    }
  }

  // The outputs as bytes: the forward's y, residual_out, mean, rstd; the backward's dx (in y),
  // dweight and dbias.
  struct Outputs {
    std::vector<unsigned char> y, h, mean, rstd, dw, db;
  };
  Outputs outputs() const {
    const auto bytes = [](const void* p, size_t n) {
      const auto* b = static_cast<const unsigned char*>(p);
      return p ? std::vector<unsigned char>(b, b + n) : std::vector<unsigned char>{};
    };
    if (spec_.backward) {
      const size_t pb = size_t(params_) * normjit::size_of(spec_.param_type());
      return {bytes(dx_, size_t(n_) * normjit::size_of(spec_.dtype)),
              {},
              {},
              {},
              bytes(weight_ ? dw_ : nullptr, pb),
              bytes(bias_ ? db_ : nullptr, pb)};
    }
    const size_t elements = size_t(rows_ * ys_);
    return {bytes(dx_, elements * normjit::size_of(spec_.out_type())),
            bytes(h_out_, spec_.residual ? elements * normjit::size_of(*spec_.residual) : 0),
            bytes(mean_, size_t(rows_) * 4),
            bytes(rstd_, size_t(rows_) * 4),
            {},
            {}};
  }

  // The backward's nan_contained: NaN in dy makes dx NaN over the site's row, and dweight and
  // dbias NaN at the site's parameter (their sums over the rows meet no other parameter's);
  // every other element keeps the bits of `clean`.
  std::string nan_contained_backward(const Outputs& clean) const {
    const Outputs now = outputs();
    const Dtype xd = spec_.dtype, pd = spec_.param_type();
    const size_t xsz = normjit::size_of(xd), psz = normjit::size_of(pd);
    const std::vector<std::pair<int64_t, int64_t>> sites = nan_sites();
    std::vector<bool> hit(size_t(params_), false);
    for (const auto& [r, i] : sites) hit[size_t(param(offset(r, i), i))] = true;
    char what[160];
    for (int64_t r = 0; r < rows_; ++r) {
      bool site = false;
      for (const auto& sr : sites) site = site || sr.first == r;
      for (int64_t i = 0; i < h_; ++i) {
        const int64_t at = offset(r, i);
        const bool ok = site ? std::isnan(load(dx_, at, xd))
                             : std::memcmp(&now.y[at * xsz], &clean.y[at * xsz], xsz) == 0;
        if (!ok) {
          std::snprintf(what, sizeof what, "dx of row %lld, element %lld: %s", (long long)r,
                        (long long)i, site ? "not NaN" : "bits changed");
          return what;
        }
      }
    }
    for (const auto& [got, before, base, name] : {std::tuple{&now.dw, &clean.dw, dw_, "dweight"},
                                                  std::tuple{&now.db, &clean.db, db_, "dbias"}}) {
      for (int64_t c = 0; c < int64_t(got->size() / psz); ++c) {
        const bool ok = hit[size_t(c)]
                            ? std::isnan(load(base, c, pd))
                            : std::memcmp(&(*got)[c * psz], &(*before)[c * psz], psz) == 0;
        if (!ok) {
          std::snprintf(what, sizeof what, "%s of parameter %lld: %s", name, (long long)c,
                        hit[size_t(c)] ? "not NaN" : "bits changed");
          return what;
        }
      }
    }
    return "";
  }

  // After a launch with NaN at the sites (set_nan): as PyTorch gives, a site's whole row (group,
  // position) of y is NaN, its saved rstd (and LayerNorm's or GroupNorm's mean) too, and h at
  // the site alone; every other output has the bits of `clean` (the launch without the NaNs).
  // Empty when so, else the first difference.
  std::string nan_contained(const Outputs& clean) const {
    if (spec_.backward) return nan_contained_backward(clean);
    const Outputs now = outputs();
    const Dtype yd = spec_.out_type();
    const size_t ysz = normjit::size_of(yd);
    const std::vector<std::pair<int64_t, int64_t>> sites = nan_sites();
    char what[160];
    for (int64_t r = 0; r < rows_; ++r) {
      int64_t site = -1;
      for (const auto& [sr, si] : sites) site = sr == r ? si : site;
      for (int64_t i = 0; i < h_; ++i) {
        const int64_t at = y_at(r, i);
        const bool y_ok = site >= 0 ? std::isnan(load(dx_, at, yd))
                                    : std::memcmp(&now.y[at * ysz], &clean.y[at * ysz], ysz) == 0;
        if (!y_ok) {
          std::snprintf(what, sizeof what, "y of row %lld, element %lld: %s", (long long)r,
                        (long long)i, site >= 0 ? "not NaN" : "bits changed");
          return what;
        }
        if (!spec_.residual) continue;
        const size_t hsz = normjit::size_of(*spec_.residual);
        const bool h_ok = i == site ? std::isnan(load(h_out_, at, *spec_.residual))
                                    : std::memcmp(&now.h[at * hsz], &clean.h[at * hsz], hsz) == 0;
        if (!h_ok) {
          std::snprintf(what, sizeof what, "residual_out of row %lld, element %lld: %s",
                        (long long)r, (long long)i, i == site ? "not NaN" : "bits changed");
          return what;
        }
      }
      if (!spec_.save_stats) continue;
      const bool mean_nan = spec_.op != normjit::Op::kRmsNorm;
      const bool stats_ok = site >= 0
                                ? std::isnan(rstd_[r]) && (!mean_nan || std::isnan(mean_[r]))
                                : std::memcmp(&now.mean[r * 4], &clean.mean[r * 4], 4) == 0 &&
                                      std::memcmp(&now.rstd[r * 4], &clean.rstd[r * 4], 4) == 0;
      if (!stats_ok) {
        std::snprintf(what, sizeof what, "statistics of row %lld: %s", (long long)r,
                      site >= 0 ? "not NaN" : "bits changed");
        return what;
      }
    }
    return "";
  }

  // The bits of dx (forward: y).
  uint64_t dx_bits() const {
    const Dtype d = spec_.backward ? spec_.dtype : spec_.out_type();
    return fnv(dx_, size_t(rows_ * ys_) * normjit::size_of(d));
  }

  // dx_bits() followed by the parameters' gradients (a backward with them).
  uint64_t output_bits() const {
    uint64_t h = dx_bits();
    if (spec_.backward && weight_) h = fnv(dw_, size_t(params_) * 4, h);
    if (spec_.backward && bias_) h = fnv(db_, size_t(params_) * 4, h);
    return h;
  }

 private:
  void* allocate(int64_t bytes) {
    memory_.push_back(std::make_unique<DeviceMemory>(size_t(bytes)));
    return memory_.back()->get();
  }

  std::vector<std::unique_ptr<DeviceMemory>> memory_;
  normjit::NormSpec spec_;
  bool channel_form_ = false, weight_ = false, bias_ = false, strided_ = false;
  int64_t c_ = 0, s_ = 1, g_ = 1, n_ = 0, h_ = 0, rows_ = 0, params_ = 0, xs_ = 0, ys_ = 0;
  void *x_ = nullptr, *dy_ = nullptr, *dx_ = nullptr, *dh_ = nullptr;
  void *w_ = nullptr, *dw_ = nullptr, *db_ = nullptr, *b_ = nullptr, *h_out_ = nullptr;
  float *mean_ = nullptr, *rstd_ = nullptr, *scale_ = nullptr;
  std::vector<double> x64_, dy64_, dh64_, w64_, b64_, saved_x_;
};

// Launches the kernel over `grid` CTAs, one process each; false when one did not exit cleanly.
bool launch(RunCta run_cta, const normjit::Params& p, int64_t grid, int block_x, int block_y) {
  std::vector<pid_t> ctas;
  for (int64_t b = 0; b < grid; ++b) {
    const pid_t pid = fork();
    if (pid == 0) {
      run_cta(&p, unsigned(b), unsigned(grid), unsigned(block_x), unsigned(block_y));
      _exit(0);
    }
    ctas.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : ctas) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status) && ok)
      std::printf("  a CTA's process: %s\n", strsignal(WTERMSIG(status)));
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--cxx") {
      o.cxx = value();
    } else if (a == "--templates") {
      o.templates = value();
    } else if (a == "--emulation") {
      o.emulation = value();
    } else if (a == "--work") {
      o.work = value();
    } else if (a == "--co") {
      o.co.clear();
      std::stringstream list(value());
      for (std::string item; std::getline(list, item, ',');) o.co.push_back(std::stoll(item));
    } else if (a == "--arch") {
      o.arch = value();
    } else if (a == "--bits") {
      o.bits = true;
    } else if (o.specs.empty() && a[0] != '-') {
      o.specs = a;
    } else {
      std::fprintf(stderr, "kernel_emulation: unknown argument '%s'\n", a.c_str());
      return false;
    }
  }
  return !o.cxx.empty() && !o.templates.empty() && !o.emulation.empty() && !o.work.empty() &&
         !o.specs.empty() && !o.co.empty();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: kernel_emulation --cxx CXX --templates DIR --emulation DIR --work DIR "
                 "[--co 5,300] [--arch sm_90:8] [--bits] SPECS\n");
    return 2;
  }
  std::ifstream list(o.specs);
  if (!list) {
    std::fprintf(stderr, "kernel_emulation: cannot read %s\n", o.specs.c_str());
    return 2;
  }
  const normjit::Target target = normjit::Target::parse(o.arch);
  int index = 0, failed = 0, passed = 0;
  for (std::string line; std::getline(list, line);) {
    if (line.empty() || line[0] == '#') continue;
    ++index;
    std::printf("[%d] %s\n", index, line.c_str());
    std::fflush(stdout);
    try {
      // "strided SPEC": the forward of a trailing form launched with row strides. "nan SPEC":
      // launched again with NaN in x (backward: dy) at a few sites (Problem::nan_sites).
      const bool strided = line.rfind("strided ", 0) == 0;
      const bool nan = line.rfind("nan ", 0) == 0;
      const normjit::NormSpec spec = normjit::NormSpec::parse(strided ? line.substr(8)
                                                              : nan   ? line.substr(4)
                                                                      : line);
      const normjit::KernelPlan plan = normjit::plan(spec, target);
      const RunCta run_cta = compile(o, plan, index);
      if (run_cta == nullptr) {
        ++failed;
        continue;
      }
      Problem problem(spec, uint64_t(index) * 7919, strided);
      // Tolerances of the three errors: backward dx, dweight, dbias; forward y, residual_out
      // (the same rounding of the same sum: exact), the statistics.
      // fp8: within half a step of the value (2^-4 of it for E4M3, 2^-3 for E5M2), as L2.
      const auto by_dtype = [](Dtype d) {
        return d == Dtype::kF32 ? 1e-5 : d == Dtype::kE4M3 ? 0.04 : d == Dtype::kE5M2 ? 0.08 : 1e-2;
      };
      const double tol[3] = {by_dtype(spec.backward ? spec.dtype : spec.out_type()),
                             spec.backward ? by_dtype(spec.param_type()) : 1e-12,
                             spec.backward ? by_dtype(spec.param_type()) : 1e-5};
      const char* names = spec.backward ? "dx %.2e, dweight %.2e, dbias %.2e"
                                        : "y %.2e, residual_out %.2e, statistics %.2e";
      uint64_t first_bits = 0;
      bool have_bits = false;
      for (int64_t co : o.co) {
        const int64_t grid = plan.grid(spec.batch(), co);
        if (grid < 1) {
          std::printf("  %lld co-resident CTAs: none of its slots fits (not launched)\n",
                      (long long)co);
          continue;
        }
        const int64_t ws = plan.cooperative() ? plan.workspace_floats(co) : 0;
        const DeviceMemory workspace(size_t(ws) * 4);
        problem.poison();
        const bool ran = launch(
            run_cta,
            problem.params(plan.cooperative() ? static_cast<float*>(workspace.get()) : nullptr),
            grid, plan.block_x, plan.block_y);
        const std::vector<double> e = problem.errors();
        const bool close = ran && e[0] < tol[0] && e[1] < tol[1] && e[2] < tol[2];
        const uint64_t bits = problem.dx_bits();
        const bool same = !have_bits || bits == first_bits;
        first_bits = have_bits ? first_bits : bits, have_bits = true;
        char errors[128], hash[40] = "";
        std::snprintf(errors, sizeof errors, names, e[0], e[1], e[2]);
        if (o.bits) {
          std::snprintf(hash, sizeof hash, ", bits %016llx",
                        (unsigned long long)problem.output_bits());
        }
        std::printf("  %s %s, %lld CTAs: %s%s%s%s\n", close && same ? "PASS" : "FAIL",
                    normjit::to_string(plan.strategy), (long long)grid, errors, hash,
                    ran ? "" : " (a CTA's process failed)",
                    same ? "" : " (the output's bits differ from the first grid's)");
        (close && same ? passed : failed) += 1;
        if (!nan) continue;
        const Problem::Outputs clean = problem.outputs();
        problem.set_nan(true);
        problem.poison(0.75f);  // finite: a NaN left unwritten would pass
        const bool nan_ran = launch(
            run_cta,
            problem.params(plan.cooperative() ? static_cast<float*>(workspace.get()) : nullptr),
            grid, plan.block_x, plan.block_y);
        const std::string leak = nan_ran ? problem.nan_contained(clean) : "a CTA's process failed";
        problem.set_nan(false);
        std::printf(
            "  %s NaN at %zu sites, %lld CTAs: %s\n", leak.empty() ? "PASS" : "FAIL",
            problem.nan_sites().size(), (long long)grid,
            leak.empty() ? "each site's row NaN, every other output unchanged" : leak.c_str());
        (leak.empty() ? passed : failed) += 1;
      }
    } catch (const normjit::Error& e) {
      std::printf("  FAIL: %s\n", e.what());
      ++failed;
    }
    std::fflush(stdout);
  }
  std::printf("%d launches match float64, %d do not\n", passed, failed);
  return failed == 0 && passed > 0 ? 0 : 1;
}
