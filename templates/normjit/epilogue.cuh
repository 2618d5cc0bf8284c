// The epilogue every forward kernel applies to a normalized value, between the affine step and
// the output conversion: the weight offset, the activation, and for fp8 output the per-tensor
// scale. The kernels' configurations name them (generator/emit.cpp):
//   Y               the output dtype (fp8: the scale applies)
//   kWeightOffset   the weight used is (kWeightOffset + w) in f32
//   kActivation     applied to y after the affine step, before the fp8 scale and the conversion
// y = conversion(scale * activation(norm * (kWeightOffset + w) + b)).
#pragma once

#include "normjit/dtype.cuh"
#include "normjit/params.cuh"

namespace normjit {

// The host's normjit::Activation (generator), spelled by name in each configuration.
enum class Activation { kNone, kSilu, kGelu };

// One value through the activation, in f32. Fast device forms, each within a few times 2^-24
// of |act(v)| + 1 of the float64 function (the norm's own error is relative to the row's
// scale, about 1):
//   silu(v) = v / (1 + exp(-v)): __expf (ex2.approx, 2 ulp plus |v| * 2^-24 relative from the
//     rounding of v * log2(e)) and __fdividef (2 ulp; the quotient is -0 where 1 + exp(-v)
//     passes 2^126, v < -87.3, whose silu is below 1e-36); Epilogue::finish takes silu a pair
//     at a time (silu_pair below);
//   gelu(v) = v * Phi(v) (PyTorch's exact GELU, approximate='none', Phi the normal CDF), with
//     Phi(v) = 1 - h (v >= 0) or h (v < 0), h = erfc(|v| / sqrt(2)) / 2 by Abramowitz and
//     Stegun 7.1.26 (|error of erf| <= 1.5e-7): one rcp.approx, a 5-term polynomial and one
//     ex2.approx, no coefficients selected by range, no cancellation of 1 + erf for v < 0.
//     At most 2.1e-7 of |gelu(v)| + 1 (emulated in f32 against float64 over v in [-30, 30] by
//     scripts/gelu_error.cpp; 2.12e-7 measured on the H200), where libdevice's erff form had
//     8.3e-8: relative to gelu(v) alone, up to 1.7e-4 where |gelu| > 1e-3 (v near -3). NaN
//     gives NaN, +inf inf, -inf NaN (as PyTorch's). It replaced erff, whose two predicated
//     polynomials cost about 19 more SASS instructions an element (GroupNorm -> GELU 0.73-0.97x
//     the time on the H200: docs/performance-notes.md, "GELU in the A&S form").
// tests/gpu/variants_test.cpp (Activation*) measures both against float64 on the device.
// Phi(v) (the normal CDF) and exp(-v^2 / 2), the A&S form of activate<kGelu> below (its
// derivative, activation_slope, takes both).
__device__ __forceinline__ float2 gelu_cdf_and_gauss(float v) {
  const float a = fabsf(v);
  float t;  // 1 / (1 + p |v| / sqrt(2)), p = 0.3275911
  asm("rcp.approx.ftz.f32 %0, %1;"
      : "=f"(t)
      : "f"(fmaf(0.3275911f * 0.70710678118654752f, a, 1.0f)));
  // h = (a1 t + ... + a5 t^5) / 2 * exp(-v^2 / 2): the coefficients halved
  float p = fmaf(0.5f * 1.061405429f, t, 0.5f * -1.453152027f);
  p = fmaf(p, t, 0.5f * 1.421413741f);
  p = fmaf(p, t, 0.5f * -0.284496736f);
  p = fmaf(p, t, 0.5f * 0.254829592f);
  p *= t;
  float e;  // exp(-v^2 / 2)
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(a * (a * (-0.5f * 1.4426950408889634f))));
  const float h = p * e;
  return make_float2(v >= 0.f ? 1.0f - h : h, e);
}

template <Activation A>
__device__ __forceinline__ float activate(float v) {
  if constexpr (A == Activation::kSilu) {
    return __fdividef(v, 1.0f + __expf(-v));
  } else if constexpr (A == Activation::kGelu) {
    return v * gelu_cdf_and_gauss(v).x;
  } else {
    return v;
  }
}

// The activation's derivative at v, for the backward kernels (backward_common.cuh):
//   silu'(v) = s + v * s * (1 - s), s = 1 / (1 + exp(-v)) (__expf and __fdividef as activate's;
//     s is 0 below v = -87.3, where the derivative is under 1e-36 in magnitude; 1 - s loses
//     its relative precision above v = 17, where v * s * (1 - s) is under 1e-6);
//   gelu'(v) = Phi(v) + v * exp(-v^2 / 2) / sqrt(2 pi), Phi and the exponential from the A&S
//     form above.
// NaN gives NaN, and so does -inf (as PyTorch's silu_backward and gelu_backward).
template <Activation A>
__device__ __forceinline__ float activation_slope(float v) {
  if constexpr (A == Activation::kSilu) {
    const float s = __fdividef(1.0f, 1.0f + __expf(-v));
    return fmaf(v * s, 1.0f - s, s);
  } else if constexpr (A == Activation::kGelu) {
    const float2 parts = gelu_cdf_and_gauss(v);
    return fmaf(v * parts.y, 0.3989422804014327f, parts.x);  // 1 / sqrt(2 pi)
  } else {
    return 1.0f;
  }
}

// silu of two values with one reciprocal: with d = 1 + 2^t, t = -v * log2(e), silu(a) =
// a * d_b / (d_a * d_b) and silu(b) = b * d_a / (d_a * d_b). Two ex2.approx and one rcp.approx
// (.ftz: what they would flush is exact here) where activate() takes two ex2.approx and two
// div.approx (a reciprocal each): a quarter fewer multi-function unit operations. Where the
// epilogue is not overlapped with memory (the split kernel's, between a row's barrier and its
// stores) GroupNorm -> SiLU on the SD VAE's and UNet's maps ran 0.4-5% faster so on the H200
// (docs/performance-notes.md, "GroupNorm -> SiLU: a reciprocal per pair ..."). Error: within a
// few f32 ulps of the float64 function, as activate()'s (tests/gpu/variants_test.cpp,
// ActivationErrorOfTheEpilogueAlone: 8.6 ulp at worst where |silu| > 1e-3, as before). t is
// capped at 62 so that the product stays finite (under 2^125): below v = -42.98, where silu(v)
// is under 1e-17 in magnitude, the result is v / (1 + 2^62), under |v| * 2.2e-19 in magnitude
// (activate(): -0 below -87.3). A NaN v gives NaN (fminf keeps 62; v times its factor keeps the
// NaN) and leaves its partner's result as it was; v = -inf gives -inf (PyTorch, activate(): NaN).
__device__ __forceinline__ void silu_pair(float& a, float& b) {
  constexpr float kLog2e = 1.4426950408889634f;
  float ea, eb, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(ea) : "f"(fminf(-a * kLog2e, 62.f)));
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(eb) : "f"(fminf(-b * kLog2e, 62.f)));
  const float da = 1.f + ea, db = 1.f + eb;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(da * db));
  a *= db * r;
  b *= da * r;
}

// What every forward kernel does with a normalized value after its affine step. A kernel that
// folds the parameters of a channel into one (scale, offset) folds `folded_scale` of the fp8
// scale into them: all of it without an activation (one FMA per element), none with one (the
// activation comes first).
template <class C>
struct Epilogue {
  float out_scale = 1.f;     // fp8 output: *p.scale, read once per launch
  float folded_scale = 1.f;  // the part of out_scale that the affine step may include
  __device__ __forceinline__ explicit Epilogue(const Params& p) {
    if constexpr (kFp8<typename C::Y>) {
      out_scale = *p.scale;
      if constexpr (C::kActivation == Activation::kNone) folded_scale = out_scale;
    }
  }
  // The weight used: (offset + w) in f32.
  __device__ __forceinline__ static float weight(float w) {
    if constexpr (C::kWeightOffset != 0.f) {
      return C::kWeightOffset + w;
    } else {
      return w;
    }
  }
  // y after the affine step: the activation, then the fp8 scale unless the affine step
  // included it (kFolded: it was given folded_scale).
  template <bool kFolded, int V>
  __device__ __forceinline__ void finish(float (&y)[V]) const {
    if constexpr (C::kActivation == Activation::kSilu) {
#pragma unroll
      for (int j = 0; j + 1 < V; j += 2) silu_pair(y[j], y[j + 1]);
      if constexpr (V % 2 != 0) y[V - 1] = activate<Activation::kSilu>(y[V - 1]);
    } else if constexpr (C::kActivation != Activation::kNone) {
#pragma unroll
      for (int j = 0; j < V; ++j) y[j] = activate<C::kActivation>(y[j]);
    }
    if constexpr (kFp8<typename C::Y> && !(kFolded && C::kActivation == Activation::kNone)) {
#pragma unroll
      for (int j = 0; j < V; ++j) y[j] *= out_scale;
    }
  }
};

}  // namespace normjit
