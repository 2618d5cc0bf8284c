// The floor of a held map: what the channels-last GroupNorm kernel (group_nhwc, one piece) does
// with its bytes, without its arithmetic. Each CTA of 1024 threads loads its part of x (K 16-byte
// vectors a thread, every load in flight), then, by mode:
//   copy      stores them at once (the same bytes, no dependency between the CTAs);
//   sync      passes one barrier of the whole grid (release add, acquire polls), then stores;
//   sync-coop the same barrier in a cooperative launch (as normjit launches group_nhwc);
//   sums      sync-coop after two block reductions (the sum, then the squares: the kernel's
//             two passes over its registers), a block barrier each.
// Beside them: cudaMemcpyAsync of the same bytes, timed the same way. x rotates over enough
// buffers that no launch finds its input in L2; y is one buffer (as the tables time kernels).
// Prints one line per map and mode: µs (median of the repeats) and % of the memcpy's time.
//   nvcc -O3 -arch=sm_90 -o held_map_floor scripts/experiments/held_map_floor.cu &&
//   ./held_map_floor
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../cuda_check.h"

constexpr int kThreads = 1024;
enum Mode { kCopy, kSync, kSyncCoop, kSums, kMemcpy, kModes };
const char* const kModeNames[kModes] = {"copy", "sync", "sync-coop", "sums", "memcpy"};

// CTAs of K vectors a thread covering `vectors`.
template <int K>
int grid_of(long long vectors) {
  return int((vectors + (long long)kThreads * K - 1) / ((long long)kThreads * K));
}

__device__ __forceinline__ void grid_barrier(unsigned int* counter, unsigned int target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    unsigned int seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen < target);
  }
  __syncthreads();
}

__device__ __forceinline__ float block_sum(float v, float* smem) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
  __syncthreads();
  float t = threadIdx.x < 32 ? smem[threadIdx.x] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) t += __shfl_xor_sync(0xffffffffu, t, o);
  __syncthreads();
  return t;
}

// A thread's vectors: b * kThreads * K + t + k * kThreads (a warp's accesses contiguous).
template <int K, int M>
__global__ void __launch_bounds__(kThreads, 1)
    held(const uint4* x, uint4* y, long long vectors, unsigned int* counter, unsigned int target) {
  __shared__ float smem[32];
  const long long base = (long long)blockIdx.x * kThreads * K + threadIdx.x;
  uint4 v[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const long long i = base + (long long)k * kThreads;
    v[k] = i < vectors ? x[i] : make_uint4(0, 0, 0, 0);
  }
  float keep = 0.f;
  if constexpr (M == kSums) {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) s += __uint_as_float(v[k].x & 0x3f800000u);
    const float mean = block_sum(s, smem) * 1e-9f;
    float q = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float d = __uint_as_float(v[k].y & 0x3f800000u) - mean;
      q += d * d;
    }
    keep = block_sum(q, smem);
  }
  if constexpr (M != kCopy) grid_barrier(counter, target);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const long long i = base + (long long)k * kThreads;
    if (i < vectors) {
      uint4 w = v[k];
      if constexpr (M == kSums) w.w ^= keep == 12345.f ? 1u : 0u;  // keeps the sums live
      y[i] = w;
    }
  }
}

// Keeps the GPU busy while the host queues the timed launches, so that the events bracket GPU
// work, not the host's pace (as the tables' time_cuda does).
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// The median µs of `repeat` launches of mode (kMemcpy: cudaMemcpyAsync) queued back to back behind
// a spin kernel, each between two events, x rotating over xs.
template <int K>
float run_mode(int mode, const std::vector<uint4*>& xs, uint4* y, long long vectors,
               unsigned int* counter, unsigned int& arrived, int repeat) {
  const int grid = grid_of<K>(vectors);
  std::vector<cudaEvent_t> starts(static_cast<size_t>(repeat)), ends(static_cast<size_t>(repeat));
  for (cudaEvent_t& e : starts) CHECK(cudaEventCreate(&e));
  for (cudaEvent_t& e : ends) CHECK(cudaEventCreate(&e));
  const auto launch = [&](int r) {
    const uint4* x = xs[size_t(r) % xs.size()];
    unsigned int target = arrived + unsigned(grid);
    void* args[] = {&x, &y, &vectors, &counter, &target};
    switch (mode) {
      case kCopy:
        held<K, kCopy><<<grid, kThreads>>>(x, y, vectors, counter, target);
        return;  // no barrier: nothing arrives
      case kSync:
        held<K, kSync><<<grid, kThreads>>>(x, y, vectors, counter, target);
        break;
      case kSyncCoop:
        CHECK(cudaLaunchCooperativeKernel((void*)held<K, kSyncCoop>, grid, kThreads, args));
        break;
      case kSums:
        CHECK(cudaLaunchCooperativeKernel((void*)held<K, kSums>, grid, kThreads, args));
        break;
      case kMemcpy:
        CHECK(cudaMemcpyAsync(y, x, size_t(vectors) * 16, cudaMemcpyDeviceToDevice));
        return;
    }
    arrived = target;
  };
  for (int r = 0; r < 3; ++r) launch(r);
  CHECK(cudaDeviceSynchronize());
  spin<<<1, 1>>>(2000000LL + 40000LL * repeat);  // about 1 ms + 20 us a launch at 2 GHz
  for (int r = 0; r < repeat; ++r) {
    CHECK(cudaEventRecord(starts[size_t(r)]));
    launch(3 + r);
    CHECK(cudaEventRecord(ends[size_t(r)]));
  }
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaGetLastError());
  std::vector<float> ms;
  for (int r = 0; r < repeat; ++r) {
    float e = 0.f;
    CHECK(cudaEventElapsedTime(&e, starts[size_t(r)], ends[size_t(r)]));
    ms.push_back(e);
    CHECK(cudaEventDestroy(starts[size_t(r)]));
    CHECK(cudaEventDestroy(ends[size_t(r)]));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e3f;
}

template <int K>
void run_map(const char* name, long long bytes, int repeat) {
  const long long vectors = bytes / 16;
  int l2 = 0;
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  const int sets = int(std::min<long long>(64, 4LL * l2 / bytes + 2));
  std::vector<uint4*> xs(size_t(sets), nullptr);
  for (auto& x : xs) {
    CHECK(cudaMalloc(&x, size_t(bytes)));
    CHECK(cudaMemset(x, 0x3c, size_t(bytes)));
  }
  uint4* y = nullptr;
  unsigned int* counter = nullptr;
  CHECK(cudaMalloc(&y, size_t(bytes)));
  CHECK(cudaMalloc(&counter, 4));
  CHECK(cudaMemset(counter, 0, 4));
  unsigned int arrived = 0;
  float us[kModes];
  for (int mode = kModes - 1; mode >= 0; --mode)  // the memcpy first
    us[mode] = run_mode<K>(mode, xs, y, vectors, counter, arrived, repeat);
  for (int mode = 0; mode < kModes; ++mode) {
    std::printf("%-28s %8.1f MB  K=%2d grid=%4d  %-10s %8.2f us  %5.1f%% of memcpy\n", name,
                2.0 * bytes / 1e6, K, grid_of<K>(vectors), kModeNames[mode], us[mode],
                100.0 * us[kMemcpy] / us[mode]);
  }
  for (auto x : xs) CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFree(counter));
}

int main(int argc, char** argv) {
  const int repeat = argc > 1 ? std::atoi(argv[1]) : 50;
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MiB; median of %d launches\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, repeat);
  // x of the maps the channels-last GroupNorm kernel holds (f16/bf16): [1, 512, 64, 64],
  // [1, 512, 128, 128] and [2, 320, 64, 64] (whose two items the kernel holds at once).
  run_map<2>("[1, 512, 64, 64]", 512LL * 64 * 64 * 2, repeat);
  run_map<8>("[1, 512, 128, 128]", 512LL * 128 * 128 * 2, repeat);
  run_map<4>("[2, 320, 64, 64]", 2LL * 320 * 64 * 64 * 2, repeat);
  return 0;
}
