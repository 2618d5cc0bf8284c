// The error of the forward kernels' GELU (templates/normjit/epilogue.cuh: the Abramowitz-Stegun
// 7.1.26 form, since the erff form before it, and of that erff form), emulated in f32 on the
// host (rcp and ex2 rounded to f32, fmaf) against float64 over v in [-30, 30], step 1e-5. No GPU:
//   g++ -O2 -o /tmp/gelu_error scripts/gelu_error.cpp && /tmp/gelu_error
// Output of 2026-11-29: A&S worst abs 4.21e-07 at v=3.11; worst err/(|ref|+1) 2.13e-07;
// erff worst abs 4.47e-07, worst err/(|ref|+1) 8.26e-08. On the device,
// tests/gpu/variants_test.cpp (ActivationErrorOfTheEpilogueAlone) measures the kernels' own.
#include <cmath>
#include <cstdio>
static float gelu_as(float v) {
  const float a = std::fabs(v);
  const float t = 1.0f / std::fmaf(0.3275911f * 0.70710678118654752f, a, 1.0f);
  // 0.5 * (a1 t + ... + a5 t^5): the coefficients halved
  float p = std::fmaf(0.5f * 1.061405429f, t, 0.5f * -1.453152027f);
  p = std::fmaf(p, t, 0.5f * 1.421413741f);
  p = std::fmaf(p, t, 0.5f * -0.284496736f);
  p = std::fmaf(p, t, 0.5f * 0.254829592f);
  p = p * t;
  const float e = std::exp2f(a * (a * (-0.5f * 1.4426950408889634f)));  // exp(-v^2/2)
  const float h = p * e;                                                // erfc(|v|/sqrt2)/2
  const float phi = v >= 0.f ? 1.0f - h : h;
  return v * phi;
}
static float gelu_erf(float v) { return 0.5f * v * (1.0f + std::erf(v * 0.707106781186547524f)); }
int main() {
  double worst_abs = 0, worst_at = 0, worst_rel_big = 0, worst_model = 0, wm_at = 0;
  double worst_abs_erf = 0, wmodel_erf = 0;
  for (double v = -30; v <= 30; v += 1e-5) {
    const float vf = float(v);
    const double vd = vf;
    const double ref = 0.5 * vd * (1.0 + std::erf(vd / std::sqrt(2.0)));
    const double g = gelu_as(vf), ge = gelu_erf(vf);
    const double err = std::fabs(g - ref), erre = std::fabs(ge - ref);
    if (err > worst_abs) worst_abs = err, worst_at = vd;
    if (erre > worst_abs_erf) worst_abs_erf = erre;
    // the tests' model: |err| <= 2e-6 * (|gelu| + rms); take rms = 1
    const double m = err / (std::fabs(ref) + 1.0), me = erre / (std::fabs(ref) + 1.0);
    if (m > worst_model) worst_model = m, wm_at = vd;
    if (me > wmodel_erf) wmodel_erf = me;
    if (std::fabs(ref) > 1e-3) worst_rel_big = std::fmax(worst_rel_big, err / std::fabs(ref));
  }
  std::printf(
      "A&S: worst abs %.3g at v=%.5f; worst err/(|ref|+1) %.3g at %.4f; worst rel where "
      "|gelu|>1e-3 %.3g\n",
      worst_abs, worst_at, worst_model, wm_at, worst_rel_big);
  std::printf("erff: worst abs %.3g; worst err/(|ref|+1) %.3g\n", worst_abs_erf, wmodel_erf);
}
