// What the backward GPU tests share (backward_test.cpp, backward_channels_test.cpp): BackwardRun,
// one forward (save_stats) and backward on the device with the host's rounded copy of every
// input, and the float64 reference of dx, dweight and dbias:
//   xhat = (x - mean) * rstd (rmsnorm: x * rstd), z = xhat * w + b, dz = dy * act'(z) (dy without
//   an activation), g = dz * (offset + w),
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) over a row of the statistics (rmsnorm:
//   without mean(g)), plus dh with a residual,
//   dweight[j] = sum of dz * xhat over the elements of parameter j, dbias[j] = sum of dz.
// Two references: from the statistics the forward saved (the backward kernel's own inputs: as
// exact as f32 arithmetic allows) and from float64 statistics of x (the forward and backward
// together). dx is measured against max(||dx_ref||, ||rstd * g||): where g lies almost along
// xhat (rmsnorm rows of 1 element, layernorm rows of 2) dx is the eps-sized remainder of a
// cancellation that f32 can only resolve to 2^-24 of the terms that cancel. dweight and dbias,
// against float64 statistics, are measured against the size of their terms (a column whose terms
// cancel, over a few rows, against them; the saved f32 statistics' error of about 1e-7 times the
// cancellation is not the kernel's), against the saved statistics against the sum itself.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "harness.hpp"

namespace normjit::testing {

// The biases of an activation's input: z = xhat * w + b pushed where the derivative is flat.
enum class Bias {
  kNormal,         // N(0, 0.5)
  kVeryNegative,   // -14 + N(0, 0.5): z mostly below -10 (|silu'| under 5e-4 there)
  kLargePositive,  // 12 + N(0, 0.5): z above 6 (both derivatives near 1)
  kMixed,          // channel by channel: very negative, large positive, normal
};

// The activation's derivative at z, in float64 (1 without one).
inline double activation_slope(Activation a, double z) {
  switch (a) {
    case Activation::kSilu: {
      const double s = 1.0 / (1.0 + std::exp(-z));
      return s * (1.0 + z * (1.0 - s));
    }
    case Activation::kGelu:
      return 0.5 * std::erfc(-z * 0.70710678118654752440) +
             z * std::exp(-0.5 * z * z) * 0.39894228040143267794;
    case Activation::kNone:
      break;
  }
  return 1.0;
}

// Config: a test file's description of one problem, with
//   NormSpec spec(bool backward): the forward (save_stats) or the backward spec;
//   op, dtype, affine, param (nullopt: x's dtype), weight_offset, residual (the backward's dh
//   in x's dtype), activation;
//   stats_rows(): the rows of the statistics, each of row_length() elements;
//   offset(r, i): where element i of statistics row r is in x, and param_index(r, i): its
//   weight's index, among params().
template <class Config>
class BackwardRun {
 public:
  BackwardRun(Engine& engine, const Config& c, Values values, uint64_t seed,
              Bias bias = Bias::kNormal)
      : c_(c),
        forward_(engine.prepare(c.spec(false))),
        backward_(engine.prepare(c.spec(true))),
        n_(size_t(c.spec(true).elements())),
        batch_(c.spec(true).batch()),
        x_(n_ * size_of(c.dtype)),
        dy_(x_.bytes()),
        y_(x_.bytes()),
        dx_(x_.bytes()),
        mean_(size_t(c.stats_rows()) * 4),
        rstd_(size_t(c.stats_rows()) * 4) {
    const Dtype param = c.param.value_or(c.dtype);
    x_host_ = upload(x_, c.dtype, random_values(n_, values, seed));
    dy_host_ = upload(dy_, c.dtype, random_values(n_, Values::kNormal, seed + 7));
    std::mt19937_64 rng(seed + 1);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    const size_t params = size_t(c.params());
    if (c.affine != Affine::kNone) {
      std::vector<float> w(params);
      for (float& e : w) e = 1.0f + normal(rng);
      w_ = device::Buffer(params * size_of(param));
      w_host_ = upload(w_, param, w);
      dw_ = device::Buffer(params * size_of(param));
    }
    if (c.affine == Affine::kBoth) {
      std::vector<float> b(params);
      for (size_t j = 0; j < params; ++j) {
        Bias kind = bias;
        if (bias == Bias::kMixed) {
          kind = j % 3 == 0   ? Bias::kVeryNegative
                 : j % 3 == 1 ? Bias::kLargePositive
                              : Bias::kNormal;
        }
        const float shift = kind == Bias::kVeryNegative    ? -14.0f
                            : kind == Bias::kLargePositive ? 12.0f
                                                           : 0.0f;
        b[j] = shift + normal(rng);
      }
      b_ = device::Buffer(params * size_of(param));
      b_host_ = upload(b_, param, b);
      db_ = device::Buffer(params * size_of(param));
    }
    if (c.residual) {
      dh_ = device::Buffer(x_.bytes());
      dh_host_ = upload(dh_, c.dtype, random_values(n_, Values::kNormal, seed + 11));
    }
  }

  // The forward (with the activation, if any), writing mean and rstd (and y, unused).
  void forward(CUstream stream = nullptr) {
    LaunchArgs a;
    a.x = x_.get();
    a.y = y_.get();
    a.weight = w_.get();
    a.bias = b_.get();
    a.batch = batch_;
    a.eps = 1e-5f;
    a.rstd = static_cast<float*>(rstd_.get());
    if (c_.op != Op::kRmsNorm) a.mean = static_cast<float*>(mean_.get());
    forward_.launch(a, stream);
  }
  // in_place: dx over dy (over dh with a residual).
  BackwardArgs args(bool in_place = false) const {
    BackwardArgs a;
    a.x = x_.get();
    a.dy = dy_.get();
    a.dx = !in_place ? dx_.get() : c_.residual ? dh_.get() : dy_.get();
    a.dresidual_out = dh_.get();
    a.rstd = static_cast<const float*>(rstd_.get());
    if (c_.op != Op::kRmsNorm) a.mean = static_cast<const float*>(mean_.get());
    a.weight = w_.get();
    // The activation's input z = xhat * w + b: the bias, where there is one (and an activation).
    if (c_.activation != Activation::kNone) a.bias = b_.get();
    a.dweight = dw_.get();
    a.dbias = db_.get();
    a.batch = batch_;
    return a;
  }
  // NaN in every output. Synchronized: the memsets are not ordered with non-blocking streams.
  void poison() {
    dx_.fill_bytes(0xff);
    if (dw_.bytes()) dw_.fill_bytes(0xff);
    if (db_.bytes()) db_.fill_bytes(0xff);
    NORMJIT_CU(driver::api().cuCtxSynchronize());
  }
  void backward(CUstream stream = nullptr, bool in_place = false) {
    backward_.launch_backward(args(in_place), stream);
  }
  // forward, poison, backward, synchronize.
  void run(bool in_place = false) {
    forward();
    poison();
    backward(nullptr, in_place);
    NORMJIT_CU(driver::api().cuCtxSynchronize());
  }

  // dx (from `dx`: the dx buffer, or dy or dh after an in-place run), dweight and dbias against
  // the float64 reference; `saved`: from the statistics the forward saved, else from float64
  // statistics of x.
  GradErrors compare(bool saved, const device::Buffer* dx = nullptr) const {
    const Config& c = c_;
    const Dtype param = c.param.value_or(c.dtype);
    const std::vector<float> got_dx =
        reference::decode(c.dtype, download(dx ? *dx : dx_).data(), n_);
    const size_t params = size_t(c.params());
    const int64_t rows = c.stats_rows();
    std::vector<float> got_dw, got_db, mean(static_cast<size_t>(rows)), rstd(mean.size());
    if (dw_.bytes()) got_dw = reference::decode(param, download(dw_).data(), params);
    if (db_.bytes()) got_db = reference::decode(param, download(db_).data(), params);
    rstd_.download(rstd.data(), rstd.size() * 4);
    if (c.op != Op::kRmsNorm) mean_.download(mean.data(), mean.size() * 4);
    const bool rms = c.op == Op::kRmsNorm;
    const int64_t h = c.row_length();
    std::vector<double> ref_dw(params), ref_db(params), abs_dw(params), abs_db(params);
    std::vector<double> xhat(static_cast<size_t>(h)), g(static_cast<size_t>(h));
    std::vector<int64_t> at(static_cast<size_t>(h));
    GradErrors e;
    double err2 = 0, ref2 = 0, scale2 = 0;  // scale2: ||rstd * g||^2, the size of dx's terms
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < h; ++i) at[i] = c.offset(r, i);
      double m = 0, s = 0;
      if (saved) {
        m = rms ? 0.0 : double(mean[size_t(r)]);
        s = rstd[size_t(r)];
      } else {
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < h; ++i) sum += x_host_[at[i]];
        if (!rms) m = sum / double(h);
        for (int64_t i = 0; i < h; ++i) sq += (x_host_[at[i]] - m) * (x_host_[at[i]] - m);
        s = 1.0 / std::sqrt(sq / double(h) + 1e-5);
      }
      double mean_g = 0, mean_gx = 0;
      for (int64_t i = 0; i < h; ++i) {
        const size_t j = size_t(c.param_index(r, i));
        const double w = w_host_.empty() ? 1.0 : c.weight_offset + double(w_host_[j]);
        const double b = b_host_.empty() ? 0.0 : double(b_host_[j]);
        xhat[i] = (double(x_host_[at[i]]) - m) * s;
        const double dz = double(dy_host_[at[i]]) * activation_slope(c.activation, xhat[i] * w + b);
        g[i] = dz * w;
        mean_g += g[i];
        mean_gx += g[i] * xhat[i];
        ref_dw[j] += dz * xhat[i];
        ref_db[j] += dz;
        abs_dw[j] += std::fabs(dz * xhat[i]);
        abs_db[j] += std::fabs(dz);
      }
      mean_g = rms ? 0.0 : mean_g / double(h);
      mean_gx /= double(h);
      for (int64_t i = 0; i < h; ++i) {
        const double dh = dh_host_.empty() ? 0.0 : double(dh_host_[at[i]]);
        accumulate(got_dx[size_t(at[i])], s * (g[i] - mean_g - xhat[i] * mean_gx) + dh, err2, ref2,
                   e.finite);
        scale2 += s * g[i] * s * g[i];
      }
    }
    e.dx = relative(err2, std::max(ref2, scale2), e.finite);
    for (auto [got, ref, terms, out] : {std::tuple{&got_dw, &ref_dw, &abs_dw, &e.dweight},
                                        std::tuple{&got_db, &ref_db, &abs_db, &e.dbias}}) {
      if (got->empty()) continue;
      double err = 0, norm = 0, terms2 = 0;
      bool ok = true;
      for (size_t j = 0; j < params; ++j) {
        accumulate((*got)[j], (*ref)[j], err, norm, ok);
        terms2 += (*terms)[j] * (*terms)[j];
      }
      *out = relative(err, saved ? norm : std::max(norm, terms2), ok);
      e.finite = e.finite && ok;
    }
    return e;
  }

  // The raw bytes of dx (or of dy after an in-place run), dweight and dbias: for bitwise
  // comparisons.
  std::vector<unsigned char> bits(bool in_place = false) const {
    std::vector<unsigned char> out = download(in_place ? dy_ : dx_);
    for (const device::Buffer* b : {&dw_, &db_}) {
      if (!b->bytes()) continue;
      const std::vector<unsigned char> more = download(*b);
      out.insert(out.end(), more.begin(), more.end());
    }
    return out;
  }
  // New dy in the same buffer (a captured graph reads it on replay).
  void new_dy(uint64_t seed) {
    dy_host_ = upload(dy_, c_.dtype, random_values(n_, Values::kNormal, seed));
    NORMJIT_CU(driver::api().cuCtxSynchronize());
  }
  const device::Buffer& dy() const { return dy_; }
  const device::Buffer& dh() const { return dh_; }
  const device::Buffer& dx() const { return dx_; }
  const Kernel& backward_kernel() const { return backward_; }

 private:
  // Uploads values rounded to dtype; returns the rounded values.
  static std::vector<float> upload(device::Buffer& buffer, Dtype d, const std::vector<float>& v) {
    const std::vector<unsigned char> bytes = reference::encode(d, v);
    buffer.upload(bytes.data(), bytes.size());
    return reference::decode(d, bytes.data(), v.size());
  }

  Config c_;
  Kernel forward_, backward_;
  size_t n_;
  int64_t batch_;  // N (channel and group forms) or rows (trailing forms)
  device::Buffer x_, dy_, y_, dx_, mean_, rstd_, w_, b_, dw_, db_, dh_;
  std::vector<float> x_host_, dy_host_, w_host_, b_host_, dh_host_;
};

}  // namespace normjit::testing
