#include "tools/reference.hpp"

#include <cmath>
#include <cstring>

namespace normjit::reference {

uint16_t float_to_half(float v) {
  uint32_t x;
  std::memcpy(&x, &v, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                  // subnormal or zero
    if (abs < 0x33000000u) return uint16_t(sign);           // below half the min
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - int(abs >> 23);  // value = mant * 2^(e-150) = h * 2^-24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = std::ldexp(float(mant), -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

uint16_t float_to_bf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<unsigned char> encode(Dtype dtype, const std::vector<float>& values) {
  std::vector<unsigned char> out(values.size() * size_of(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == Dtype::kF32) {
      std::memcpy(&out[i * 4], &values[i], 4);
    } else {
      const uint16_t h = dtype == Dtype::kF16 ? float_to_half(values[i]) : float_to_bf16(values[i]);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

std::vector<float> decode(Dtype dtype, const void* data, size_t n) {
  std::vector<float> out(n);
  const unsigned char* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == Dtype::kF32) {
      std::memcpy(&out[i], bytes + i * 4, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, bytes + i * 2, 2);
      out[i] = dtype == Dtype::kF16 ? half_to_float(h) : bf16_to_float(h);
    }
  }
  return out;
}

int64_t units(const NormSpec& spec) {
  if (spec.op == Op::kGroupNorm) return spec.batch() * spec.groups;
  if (spec.channel_form()) return spec.batch() * spec.spatial();
  return spec.batch();
}

Unit unit(const NormSpec& spec, int64_t u) {
  Unit out;
  if (spec.op == Op::kGroupNorm) {
    const int64_t g = spec.groups, cg = spec.channels() / g, s = spec.spatial();
    const int64_t n = u / g, group = u % g, base = (n * spec.channels() + group * cg) * s;
    out.contiguous = true;
    for (int64_t i = 0; i < cg * s; ++i) {
      out.offsets.push_back(base + i);
      out.param_index.push_back(group * cg + i / s);
    }
  } else if (spec.channel_form()) {
    const int64_t c = spec.channels(), s = spec.spatial();
    const int64_t n = u / s, pos = u % s;
    for (int64_t ch = 0; ch < c; ++ch) {
      out.offsets.push_back(n * c * s + ch * s + pos);
      out.param_index.push_back(ch);
    }
  } else {
    const int64_t h = spec.row_length();
    out.contiguous = true;
    for (int64_t i = 0; i < h; ++i) {
      out.offsets.push_back(u * h + i);
      out.param_index.push_back(i);
    }
  }
  return out;
}

double activate(Activation activation, double v) {
  switch (activation) {
    case Activation::kNone:
      return v;
    case Activation::kSilu:
      return v / (1.0 + std::exp(-v));
    case Activation::kGelu:
      return 0.5 * v * std::erfc(-v * 0.70710678118654752440);
  }
  return v;
}

std::vector<double> normalize(const NormSpec& spec, const Unit& u, const std::vector<double>& x,
                              const std::vector<double>& weight, const std::vector<double>& bias) {
  const size_t n = x.size();
  double mean = 0.0;
  if (spec.op != Op::kRmsNorm) {
    for (double v : x) mean += v;
    mean /= double(n);
  }
  double m2 = 0.0;
  for (double v : x) m2 += (v - mean) * (v - mean);
  const double inv = 1.0 / std::sqrt(m2 / double(n) + spec.eps);
  std::vector<double> y(n);
  for (size_t i = 0; i < n; ++i) {
    double v = (x[i] - mean) * inv;
    if (!weight.empty()) v *= weight[u.param_index[i]];
    if (!bias.empty()) v += bias[u.param_index[i]];
    y[i] = activate(spec.activation, v);
  }
  return y;
}

}  // namespace normjit::reference
