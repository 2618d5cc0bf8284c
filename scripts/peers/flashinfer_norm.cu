// A C entry point for each of FlashInfer's hand-written CUDA RMSNorm kernels that the
// performance tables time as a peer (include/flashinfer/norm.cuh of the flashinfer-python wheel:
// the kernels behind FlashInfer's CUDA norm module, FLASHINFER_USE_CUDA_NORM=1, and the ones
// sgl-kernel carries). Built by scripts/peers/build_flashinfer.sh into a shared library that the
// benchmark scripts load with ctypes (tools/flashinfer_peer.py); each function launches on the
// given stream exactly what FlashInfer's own host function launches and returns its cudaError_t.
// dtype: 0 = bf16, 1 = f16 (FlashInfer's Python API takes those two). Strides in elements.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "flashinfer/norm.cuh"

namespace {

template <typename F>
int by_dtype(int dtype, F&& f) {
  if (dtype == 0) return static_cast<int>(f(__nv_bfloat16{}));
  if (dtype == 1) return static_cast<int>(f(__half{}));
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace

extern "C" {

int fi_rmsnorm(int dtype, void* x, void* w, void* y, uint32_t rows, uint32_t d, uint32_t stride_x,
               uint32_t stride_y, float eps, int pdl, void* stream) {
  return by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    return flashinfer::norm::RMSNorm<T>(static_cast<T*>(x), static_cast<T*>(w), static_cast<T*>(y),
                                        rows, d, stride_x, stride_y, eps, pdl != 0,
                                        static_cast<cudaStream_t>(stream));
  });
}

int fi_gemma_rmsnorm(int dtype, void* x, void* w, void* y, uint32_t rows, uint32_t d,
                     uint32_t stride_x, uint32_t stride_y, float eps, int pdl, void* stream) {
  return by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    return flashinfer::norm::GemmaRMSNorm<T>(static_cast<T*>(x), static_cast<T*>(w),
                                             static_cast<T*>(y), rows, d, stride_x, stride_y, eps,
                                             pdl != 0, static_cast<cudaStream_t>(stream));
  });
}

// In place, as FlashInfer's fused_add_rmsnorm: residual <- x + residual, x <- RMSNorm of it.
int fi_fused_add_rmsnorm(int dtype, void* x, void* residual, void* w, uint32_t rows, uint32_t d,
                         uint32_t stride_x, uint32_t stride_residual, float eps, int pdl,
                         void* stream) {
  return by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    return flashinfer::norm::FusedAddRMSNorm<T>(
        static_cast<T*>(x), static_cast<T*>(residual), static_cast<T*>(w), rows, d, stride_x,
        stride_residual, eps, pdl != 0, static_cast<cudaStream_t>(stream));
  });
}

// y (e4m3) = clamp(RMSNorm(x) * w / scale[0]): FlashInfer divides by its scale.
int fi_rmsnorm_quant_e4m3(int dtype, void* x, void* w, void* y, uint32_t rows, uint32_t d,
                          uint32_t stride_x, uint32_t stride_y, float* scale, float eps, int pdl,
                          void* stream) {
  return by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    return flashinfer::norm::RMSNormQuant<T, __nv_fp8_e4m3>(
        static_cast<T*>(x), static_cast<T*>(w), static_cast<__nv_fp8_e4m3*>(y), rows, d, stride_x,
        stride_y, scale, eps, pdl != 0, static_cast<cudaStream_t>(stream));
  });
}

// Per-head RMSNorm of [batch, heads, d] with two-level strides (FlashInfer's rmsnorm of 3-D x).
int fi_qk_rmsnorm(int dtype, void* x, void* w, void* y, uint32_t batch, uint32_t heads, uint32_t d,
                  uint32_t stride_x_n, uint32_t stride_x_h, uint32_t stride_y_n,
                  uint32_t stride_y_h, float eps, int pdl, void* stream) {
  return by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    return flashinfer::norm::QKRMSNorm<T>(
        static_cast<T*>(x), static_cast<T*>(w), static_cast<T*>(y), batch, heads, d, stride_x_n,
        stride_x_h, stride_y_n, stride_y_h, eps, pdl != 0, static_cast<cudaStream_t>(stream));
  });
}

const char* fi_error_string(int status) {
  return cudaGetErrorString(static_cast<cudaError_t>(status));
}

}  // extern "C"
