// A float64 CPU reference of every operator, one reduction unit at a time, and host-side
// dtype conversion. Used by `normjit demo`, `normjit bench` and the GPU tests.
#pragma once

#include <cstdint>
#include <vector>

#include "normjit/spec.hpp"

namespace normjit::reference {

uint16_t float_to_half(float v);
float half_to_float(uint16_t h);
uint16_t float_to_bf16(float v);
float bf16_to_float(uint16_t h);

// Host storage of n elements of dtype from f32 values (rounded to nearest even), and back.
std::vector<unsigned char> encode(Dtype dtype, const std::vector<float>& values);
std::vector<float> decode(Dtype dtype, const void* data, size_t n);

// A reduction unit: the elements normalized together (one spatial position of one n for the
// channel form, one (n, group) for groupnorm, one row for the trailing forms).
int64_t units(const NormSpec& spec);
struct Unit {
  std::vector<int64_t> offsets;      // element offsets into x / y
  std::vector<int64_t> param_index;  // index into weight / bias for each element
  bool contiguous = false;           // offsets are offsets[0] + i
};
Unit unit(const NormSpec& spec, int64_t u);

// The spec's activation of one value in float64: silu(v) = v / (1 + exp(-v)); gelu(v) =
// v / 2 * (1 + erf(v / sqrt(2))), computed as v / 2 * erfc(-v / sqrt(2)) (the same function,
// without the cancellation of 1 + erf for v << 0); none: v.
double activate(Activation activation, double v);

// y of one unit in float64 from its x values and the full weight / bias (empty if absent),
// through the spec's activation.
std::vector<double> normalize(const NormSpec& spec, const Unit& u, const std::vector<double>& x,
                              const std::vector<double>& weight, const std::vector<double>& bias);

}  // namespace normjit::reference
