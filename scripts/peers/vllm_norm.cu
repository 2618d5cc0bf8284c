// A C entry point for each of vLLM's hand-written CUDA RMSNorm kernels that the performance
// tables time as a peer: vllm::rms_norm_kernel and vllm::fused_add_rms_norm_kernel of
// csrc/layernorm_kernels.cu and vllm::rms_norm_static_fp8_quant_kernel of
// csrc/layernorm_quant_kernels.cu, in vLLM's source distribution on PyPI.
// scripts/peers/build_vllm.sh copies each file's `namespace vllm` block (the kernels, none of
// its PyTorch-facing host code) into layernorm_kernels.cuh and layernorm_quant_kernels.cuh and
// compiles this file against them; tools/kernel_peers.py loads the library with ctypes. The
// launches below make the choices of vLLM's own host functions rms_norm(),
// fused_add_rms_norm() and rms_norm_static_fp8_quant() (vLLM 0.34.0, VLLM_BATCH_INVARIANT
// unset): a CTA per row, blocks of up to 1024 threads under 256 tokens and 256 from there,
// 16-byte vectors where the row length allows (rms_norm and the fp8 one: gcd(8, hidden)
// elements; fused add: 8 when the pointers are 16-byte aligned and the row length and strides
// multiples of 8, else the scalar kernel).
// dtype: 0 = bf16, 1 = f16. Strides in elements. Each function returns cudaGetLastError().
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "layernorm_kernels.cuh"
#include "layernorm_quant_kernels.cuh"

namespace {

int max_block(int tokens) { return tokens < 256 ? 1024 : 256; }

template <typename F>
int by_dtype(int dtype, F&& f) {
  if (dtype == 0) {
    f(c10::BFloat16{});
  } else if (dtype == 1) {
    f(c10::Half{});
  } else {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

// vLLM's VLLM_STABLE_DISPATCH_VEC_SIZE: 16, 8, 4, 2, else 1.
template <int kVec, typename F>
bool with_vec(int vec, F& f) {
  if (vec == kVec || kVec == 1) f(std::integral_constant<int, kVec>{});
  return vec == kVec || kVec == 1;
}

template <typename F>
void by_vec(int vec, F&& f) {
  with_vec<16>(vec, f) || with_vec<8>(vec, f) || with_vec<4>(vec, f) || with_vec<2>(vec, f) ||
      with_vec<1>(vec, f);
}

// Runs launch(block, v) with vLLM's rms_norm() shape for rows of T: gcd(8, hidden)-element
// vectors (v: std::integral_constant of it), a CTA per row of min(hidden / v, max_block) threads.
template <typename T, typename F>
void row_launch(int rows, int hidden, F&& launch) {
  const int vec = std::gcd(16 / static_cast<int>(sizeof(T)), hidden);
  const dim3 block(std::min(hidden / vec, max_block(rows)));
  by_vec(vec, [&](auto v) { launch(block, v); });
}

// rms_norm() for x of rank 2 ([rows, hidden], row stride stride_2) or 3 ([n, heads, hidden],
// strides stride_3 and stride_2): y contiguous, as vLLM requires of its output.
template <int kRank>
int rms_norm(int dtype, void* y, const void* x, int64_t stride_2, int64_t stride_3, int64_t heads,
             const void* w, float eps, int rows, int hidden, cudaStream_t stream) {
  return by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    row_launch<T>(rows, hidden, [&](dim3 block, auto v) {
      vllm::rms_norm_kernel<T, decltype(v)::value, kRank, true><<<rows, block, 0, stream>>>(
          static_cast<T*>(y), static_cast<const T*>(x), stride_2, stride_3, /*stride_d4=*/0,
          kRank >= 3 ? heads : 0, /*shape_d3=*/0, static_cast<const T*>(w),
          /*weight_stride=*/0, eps, rows, hidden);
    });
  });
}

}  // namespace

extern "C" {

int vl_rms_norm(int dtype, void* y, const void* x, int64_t stride_x, const void* w, float eps,
                int rows, int hidden, void* stream) {
  return rms_norm<2>(dtype, y, x, stride_x, 0, 0, w, eps, rows, hidden,
                     static_cast<cudaStream_t>(stream));
}

// x [n, heads, hidden] with strides (stride_n, stride_h, 1): one row per (n, head).
int vl_rms_norm_heads(int dtype, void* y, const void* x, int64_t stride_n, int64_t stride_h, int n,
                      int heads, const void* w, float eps, int hidden, void* stream) {
  return rms_norm<3>(dtype, y, x, stride_h, stride_n, heads, w, eps, n * heads, hidden,
                     static_cast<cudaStream_t>(stream));
}

// In place, as vLLM's fused_add_rms_norm: residual <- x + residual, x <- RMSNorm of it * w.
int vl_fused_add_rms_norm(int dtype, void* x, int64_t stride_x, void* residual,
                          int64_t stride_residual, const void* w, float eps, int rows, int hidden,
                          void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(rows);
  const dim3 block(std::min(hidden, max_block(rows)));
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool wide = aligned(x) && aligned(residual) && aligned(w) && hidden % 8 == 0 &&
                    stride_x % 8 == 0 && stride_residual % 8 == 0;
  return by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    if (wide) {
      vllm::fused_add_rms_norm_kernel<T, 8, true>
          <<<grid, block, 0, s>>>(static_cast<T*>(x), stride_x, static_cast<T*>(residual),
                                  static_cast<const T*>(w), eps, rows, hidden, stride_residual);
    } else {
      vllm::fused_add_rms_norm_kernel<T, 0, true>
          <<<grid, block, 0, s>>>(static_cast<T*>(x), stride_x, static_cast<T*>(residual),
                                  static_cast<const T*>(w), eps, rows, hidden, stride_residual);
    }
  });
}

// y (e4m3) = clamp(RMSNorm(x) * w / scale[0]), as vLLM's rms_norm_static_fp8_quant.
int vl_rms_norm_fp8(int dtype, void* y, const void* x, int stride_x, const void* w,
                    const float* scale, float eps, int rows, int hidden, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  return by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    row_launch<T>(rows, hidden, [&](dim3 block, auto v) {
      vllm::rms_norm_static_fp8_quant_kernel<T, c10::Float8_e4m3fn, decltype(v)::value>
          <<<rows, block, 0, s>>>(static_cast<c10::Float8_e4m3fn*>(y), static_cast<const T*>(x),
                                  stride_x, static_cast<const T*>(w), scale, eps, rows, hidden);
    });
  });
}

const char* vl_error_string(int status) {
  return cudaGetErrorString(static_cast<cudaError_t>(status));
}

}  // extern "C"
