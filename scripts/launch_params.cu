// Event-bracketed time of a trivial kernel by the size of its parameter block: whether a
// launch's 208-byte Params costs GPU time that a Triton kernel's few arguments do not
// (docs/performance-notes.md). On the GPU machine:
//   nvcc -O2 -arch=sm_90 -o launch_params scripts/launch_params.cu && ./launch_params
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>
template <int N>
struct P {
  const float* x;
  float* y;
  char pad[N];
};
template <int N>
__global__ void k(P<N> p) {
  if (threadIdx.x == 0 && blockIdx.x == 0) p.y[0] = p.x[0] + 1.f;
}
__global__ void spin(long long c) {
  long long s = clock64();
  while (clock64() - s < c) {
  }
}
template <int N>
float run(float* x, float* y) {
  P<N> p{};
  p.x = x;
  p.y = y;
  const int R = 50;
  std::vector<cudaEvent_t> a(R), b(R);
  for (int i = 0; i < R; ++i) {
    cudaEventCreate(&a[i]);
    cudaEventCreate(&b[i]);
  }
  for (int i = 0; i < 5; ++i) k<N><<<1, 128>>>(p);
  cudaDeviceSynchronize();
  spin<<<1, 1>>>(20000000);
  for (int i = 0; i < R; ++i) {
    cudaEventRecord(a[i]);
    k<N><<<1, 128>>>(p);
    cudaEventRecord(b[i]);
  }
  cudaDeviceSynchronize();
  std::vector<float> t(R);
  for (int i = 0; i < R; ++i) {
    cudaEventElapsedTime(&t[i], a[i], b[i]);
    t[i] *= 1000.f;
  }
  std::sort(t.begin(), t.end());
  return t[R / 2];
}
int main() {
  float *x, *y;
  cudaMalloc(&x, 4096);
  cudaMalloc(&y, 4096);
  for (int round = 0; round < 3; ++round)
    printf(
        "params 24 B: %.2f us  80 B: %.2f us  208 B: %.2f us  1024 B: %.2f us  4000 B: %.2f us\n",
        run<8>(x, y), run<64>(x, y), run<192>(x, y), run<1008>(x, y), run<3984>(x, y));
  return 0;
}
