// Whether a channels-last GroupNorm could read x once by taking its groups as the split kernel
// takes rows: the bandwidth of copying a channels-last map [S, C] (f16, C/G = 8 channels a
// group: one 16-byte vector a position) one group at a time, W groups' CTAs at once over the
// same positions, against a copy of the same bytes in contiguous 16-byte vectors. A group's
// vectors lie C * 2 bytes apart, so W = 1 uses 16 bytes of each 32-byte sector it fetches; W = 2
// and more share the sectors between the CTAs of neighbouring groups (L2 hits while they run
// together). Tiles of 2-16 neighbouring groups a CTA read tile * 16 contiguous bytes a position.
// Two passes a tile (two_pass_tiles, added after the first run): x read twice, tile by tile, the
// second pass from L2 if the tile stays there. The SD VAE's [1, 256, 512, 512] and
// [1, 512, 256, 256] maps and a [1, 512, 128, 128] by default (docs/performance-notes.md, "The
// split kernel's CTA ...": the results of the one-pass modes). On the GPU machine:
//   nvcc -O3 -arch=sm_90 -o nhwc_group_bw scripts/nhwc_group_bw.cu && ./nhwc_group_bw
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"

constexpr int kThreads = 256;
constexpr int kPerThread = 8;  // 16-byte vectors a thread loads before it stores them

// Copies the vectors x[at(i)] to y[at(i)] for i = i0 + k * step, k < kPerThread, i < end: every
// load in flight before the first store. kStreaming: last-use loads and streaming stores
// (evict-first), else plain ones.
template <bool kStreaming = false, class At>
__device__ __forceinline__ void copy_vectors(const uint4* x, uint4* y, long long i0, long long step,
                                             long long end, At at) {
  uint4 v[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const long long i = i0 + k * step;
    if (i < end) v[k] = kStreaming ? __ldcs(x + at(i)) : x[at(i)];
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const long long i = i0 + k * step;
    if (i >= end) continue;
    if constexpr (kStreaming) {
      __stcs(y + at(i), v[k]);
    } else {
      y[at(i)] = v[k];
    }
  }
}

// Contiguous: each thread copies kPerThread vectors, a CTA's kThreads * kPerThread in a row.
__global__ void copy_contiguous(const uint4* x, uint4* y, long long vectors) {
  const long long base = (long long)blockIdx.x * kThreads * kPerThread + threadIdx.x;
  copy_vectors(x, y, base, kThreads, vectors, [](long long i) { return i; });
}

// One group's vectors (one a position, `groups` a position) over a block of positions, CTAs
// ordered so that `w` neighbouring groups run over the same positions together: CTA b takes
// wave b / (blocks * w), position block (b / w) % blocks and group wave * w + b % w.
__global__ void copy_group(const uint4* x, uint4* y, long long positions, int groups, int w) {
  const long long blocks = (positions + kThreads * kPerThread - 1) / (kThreads * kPerThread);
  const long long b = blockIdx.x;
  const long long wave = b / (blocks * w);
  const long long pos_block = (b / w) % blocks;
  const int g = int(wave * w + b % w);
  if (g >= groups) return;
  const long long p0 = pos_block * kThreads * kPerThread + threadIdx.x;
  copy_vectors(x, y, p0, kThreads, positions, [=](long long p) { return p * groups + g; });
}

// A tile of `tile` neighbouring groups (tile * 16 contiguous bytes a position): a CTA's threads
// take tile vectors of kThreads / tile positions at a time, so a warp reads whole lines where
// tile * 16 >= 128; CTAs ordered tile by tile, position block within it.
__global__ void copy_tile(const uint4* x, uint4* y, long long positions, int groups, int tile) {
  const int rows = kThreads / tile;  // positions a CTA takes at a time
  const long long per_cta = (long long)rows * kPerThread;
  const long long blocks = (positions + per_cta - 1) / per_cta;
  const long long b = blockIdx.x;
  const int t = int(b / blocks);
  const long long p0 = (b % blocks) * per_cta + threadIdx.x / tile;
  const int g = t * tile + int(threadIdx.x % tile);
  if (g >= groups || threadIdx.x >= rows * tile) return;
  copy_vectors(x, y, p0, rows, positions, [=](long long p) { return p * groups + g; });
}

// Two passes a tile, tile by tile, in one cooperative launch: the first reads the tile's x (its
// bits folded into a value, so the loads stay), a grid barrier, the second reads x again (last
// use, evict-first) and writes y (streaming stores); `overlap` 0 puts a grid barrier after the
// second pass too, 1 lets the next tile's first pass start under this one's second. Whether the
// second pass finds the tile in L2 (a tile of 8 of the VAE's groups is 32 MB, L2 60 MB): the
// lead for channels-last GroupNorm in docs/performance-notes.md.
__global__ void two_pass_tiles(const uint4* x, uint4* y, long long positions, int groups, int tile,
                               int overlap, unsigned* sink) {
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  const long long threads = (long long)gridDim.x * blockDim.x;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long per_tile = positions * tile;  // vectors of a tile: position-major
  unsigned acc = 0;
  for (int t = 0; t < groups / tile; ++t) {
    const auto at = [&](long long i) { return (i / tile) * groups + t * tile + i % tile; };
    for (long long i0 = tid; i0 < per_tile; i0 += threads * kPerThread) {
      uint4 v[kPerThread];
#pragma unroll
      for (int k = 0; k < kPerThread; ++k) {
        const long long i = i0 + k * threads;
        if (i < per_tile) v[k] = __ldcg(x + at(i));
      }
#pragma unroll
      for (int k = 0; k < kPerThread; ++k) {
        if (i0 + k * threads < per_tile) acc ^= v[k].x ^ v[k].w;
      }
    }
    grid.sync();
    for (long long i0 = tid; i0 < per_tile; i0 += threads * kPerThread) {
      copy_vectors<true>(x, y, i0, threads, per_tile, at);
    }
    if (!overlap) grid.sync();
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

template <class Launch>
float median_us(Launch launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> ts;
  for (int i = 0; i < 20; ++i) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms * 1000.f);
  }
  CHECK(cudaGetLastError());
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

int main(int argc, char** argv) {
  struct Map {
    long long positions;
    int channels;
  };
  std::vector<Map> maps = {{512LL * 512, 256}, {256LL * 256, 512}, {128LL * 128, 512}};
  if (argc == 3) maps = {{std::atoll(argv[1]), std::atoi(argv[2])}};
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
  std::printf(
      "| map [S, C] f16, C/G = 8 | MB moved | contiguous us | W groups at once, or a tile | us | "
      "%% of contiguous "
      "|\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (const Map& m : maps) {
    const int groups = m.channels / 8;  // 16-byte vectors of 8 f16 channels
    const long long vectors = m.positions * groups;
    uint4 *x, *y;
    CHECK(cudaMalloc(&x, vectors * sizeof(uint4)));
    CHECK(cudaMalloc(&y, vectors * sizeof(uint4)));
    CHECK(cudaMemset(x, 1, vectors * sizeof(uint4)));
    // A buffer larger than L2 read between calls would flush it; the map is 2-4x L2 already for
    // the large ones, and each call's x is read once: the calls run back to back.
    const double mb = 2.0 * vectors * sizeof(uint4) / 1e6;
    const unsigned contiguous_blocks =
        unsigned((vectors + kThreads * kPerThread - 1) / (kThreads * kPerThread));
    const float tc =
        median_us([&] { copy_contiguous<<<contiguous_blocks, kThreads>>>(x, y, vectors); });
    const long long pos_blocks =
        (m.positions + kThreads * kPerThread - 1) / (kThreads * kPerThread);
    for (int w : {1, 2, 4, 8, groups}) {
      if (groups % w != 0) continue;
      const unsigned blocks = unsigned(pos_blocks * groups);
      const float tg =
          median_us([&] { copy_group<<<blocks, kThreads>>>(x, y, m.positions, groups, w); });
      std::printf("| [%lld, %d] | %.1f | %.1f | %d | %.1f | %.1f%% |\n", m.positions, m.channels,
                  mb, tc, w, tg, 100.0 * tc / tg);
    }
    for (int tile : {2, 4, 8, 16}) {
      if (groups % tile != 0) continue;
      const long long per_cta = (long long)(kThreads / tile) * kPerThread;
      const unsigned blocks = unsigned((m.positions + per_cta - 1) / per_cta * (groups / tile));
      const float tt =
          median_us([&] { copy_tile<<<blocks, kThreads>>>(x, y, m.positions, groups, tile); });
      std::printf("| [%lld, %d] | %.1f | %.1f | tile %d (%d bytes a position) | %.1f | %.1f%% |\n",
                  m.positions, m.channels, mb, tc, tile, tile * 16, tt, 100.0 * tc / tt);
    }
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, two_pass_tiles, kThreads, 0));
    unsigned* sink;
    CHECK(cudaMalloc(&sink, sizeof(unsigned)));
    for (int tile : {8, 16}) {
      if (groups % tile != 0) continue;
      for (int overlap : {0, 1}) {
        long long positions = m.positions;
        int g = groups, tl = tile, ov = overlap;
        void* args[] = {&x, &y, &positions, &g, &tl, &ov, &sink};
        const float tt = median_us([&] {
          CHECK(cudaLaunchCooperativeKernel((void*)two_pass_tiles,
                                            dim3(per_sm * prop.multiProcessorCount), dim3(kThreads),
                                            args, 0, nullptr));
        });
        std::printf(
            "| [%lld, %d] | %.1f | %.1f | two passes a tile of %d (%.0f MB of x), %s | %.1f | "
            "%.1f%% |\n",
            m.positions, m.channels, mb, tc, tile, mb / 2 * tile / groups,
            overlap ? "overlapped" : "a barrier after each pass", tt, 100.0 * tc / tt);
      }
    }
    // Bits: copy_group and two_pass_tiles each write every vector of y (the first 2^20 checked).
    std::vector<uint4> hy(std::min<long long>(vectors, 1 << 20));
    for (int kernel = 0; kernel < 2; ++kernel) {
      CHECK(cudaMemset(y, 0, vectors * sizeof(uint4)));
      if (kernel == 0) {
        copy_group<<<unsigned(pos_blocks * groups), kThreads>>>(x, y, m.positions, groups, 4);
      } else {
        long long positions = m.positions;
        int g = groups, tl = groups % 8 == 0 ? 8 : groups, ov = 1;
        void* args[] = {&x, &y, &positions, &g, &tl, &ov, &sink};
        CHECK(cudaLaunchCooperativeKernel((void*)two_pass_tiles,
                                          dim3(per_sm * prop.multiProcessorCount), dim3(kThreads),
                                          args, 0, nullptr));
      }
      CHECK(cudaMemcpy(hy.data(), y, hy.size() * sizeof(uint4), cudaMemcpyDeviceToHost));
      for (const uint4& v : hy) {
        if (v.x != 0x01010101u || v.w != 0x01010101u) {
          std::fprintf(stderr, "%s missed a vector\n",
                       kernel == 0 ? "copy_group" : "two_pass_tiles");
          return 1;
        }
      }
    }
    CHECK(cudaFree(sink));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
  }
  return 0;
}
