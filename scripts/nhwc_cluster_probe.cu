// Whether the channels-last GroupNorm backward would run faster with an item (one n: every
// group of one sample), or a tile of its groups, over a thread-block cluster instead of over the
// whole grid: a throwaway kernel of that shape, checked against float64 on the CPU and timed as
// `normjit bench` times, to be run beside `normjit bench --specs` of the same specs (the first
// five of scripts/specs/groupnorm-nhwc-backward-sd.txt) in one call of the GPU machine. The
// library's kernel (templates/normjit/group_nhwc_backward.cuh) takes the items in waves of R,
// each wave in three steps with two grid barriers between them. Here:
//   - cluster q of K CTAs (sm_90, K up to 16) takes tile q % (C / CT) of item q / (C / CT), CT
//     channels (whole groups); CTA r of it the positions [r * P, (r + 1) * P), P = ceil(S / K),
//     in rows of TY positions (thread (tx, ty): 8 channels of position s, 16-byte accesses);
//   - pass 1: each thread sums dy * xhat and dy of its channels over its positions; the CTA adds
//     its TY rows of each channel (in ty order);
//   - cluster barrier; CTA r adds its CT / K channels over the K CTAs in rank order through
//     distributed shared memory (the item's A and B of each channel) and writes them to the
//     workspace for dweight and dbias; cluster barrier; every CTA forms each channel's w * B and
//     w * A from their owners and each group's means of g and g * xhat (its CG channels in
//     order); cluster barrier (no CTA leaves while another reads its shared memory);
//   - pass 2: x and dy read again (from L2 where the item stayed there), dx stored;
//   - dweight and dbias: each CTA takes its (tile, rank)'s ticket after its channels' partials
//     are written; the CTA that draws the last one adds them over n in order (the library's
//     order and bits, whatever the grid) and resets the ticket.
// No grid barrier, no cooperative launch; clusters are independent but for the last ticket. Not
// in the library: the per-item partials here grow with the batch, which the library's plan
// cannot size. Measured in session 72 (docs/performance-notes.md): not pursued.
// On the GPU machine (or built here with the CUDA toolkit and carried):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o nhwc_cluster_probe scripts/nhwc_cluster_probe.cu
//   ./nhwc_cluster_probe            (the configurations listed in main)
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cuda_check.h"

namespace cg = cooperative_groups;

using bf16 = __nv_bfloat16;
constexpr int kV = 8;      // channels a thread: one 16-byte vector of bf16
constexpr int kAhead = 4;  // positions of a thread loaded together

__device__ __forceinline__ void unpack(const uint4& v, float (&f)[kV]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x, f[2 * i + 1] = p.y;
  }
}

__device__ __forceinline__ uint4 pack(const float (&f)[kV]) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

struct Args {
  const bf16* x;
  const bf16* dy;
  const float* mean;  // [N * G]
  const float* rstd;
  const bf16* w;  // [C]
  bf16* dx;
  float* part;        // [N][C][2]: each item's A and B of each channel
  unsigned* tickets;  // [K], zero between launches
  float* dw;
  float* db;
  int n_items;
  int s;  // positions per item
};

// CT: the channels of a tile (whole groups); cluster q takes tile q % (C / CT) of item
// q / (C / CT), so that a batch of few items still spreads over the chip.
template <int C, int G, int CT, int TY, int K>
__global__ void __launch_bounds__(CT / kV * TY) cluster_backward(Args a) {
  constexpr int TX = CT / kV, THREADS = TX * TY, CG = C / G, OWN = CT / K, TILES = C / CT;
  static_assert(CT % K == 0 && C % G == 0 && C % CT == 0 && CT % CG == 0 && TY >= 2, "shape");
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const long long q = blockIdx.x / K, n = q / TILES;
  const int tile = static_cast<int>(q % TILES), base_c = tile * CT;
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TX + tx, c0 = base_c + tx * kV;
  const int S = a.s, P = (S + K - 1) / K;
  const int s_begin = rank * P, s_end = min(S, s_begin + P);
  constexpr int GT = CT / CG;  // groups of the tile
  __shared__ float red_a[TY][CT], red_b[TY][CT];
  __shared__ float own_a[OWN], own_b[OWN];
  __shared__ float2 means[GT];
  __shared__ bool last;

  float wv[kV], mu[kV], rs[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    wv[j] = __bfloat162float(a.w[c0 + j]);
    const long long row = n * G + (c0 + j) / CG;
    mu[j] = a.mean[row];
    rs[j] = a.rstd[row];
  }
  const bf16* x = a.x + n * S * C + c0;
  const bf16* dy = a.dy + n * S * C + c0;

  // Pass 1.
  float sa[kV], sb[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) sa[j] = 0.f, sb[j] = 0.f;
  for (int s = s_begin + ty; s < s_end; s += TY * kAhead) {
    uint4 xv[kAhead], dv[kAhead];
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      const int si = s + i * TY;
      if (si < s_end) {
        xv[i] = *reinterpret_cast<const uint4*>(x + (long long)si * C);
        dv[i] = *reinterpret_cast<const uint4*>(dy + (long long)si * C);
      }
    }
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      if (s + i * TY >= s_end) continue;
      float xf[kV], df[kV];
      unpack(xv[i], xf);
      unpack(dv[i], df);
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const float xhat = (xf[j] - mu[j]) * rs[j];
        sa[j] = fmaf(df[j], xhat, sa[j]);
        sb[j] += df[j];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kV; ++j)
    red_a[ty][c0 - base_c + j] = sa[j], red_b[ty][c0 - base_c + j] = sb[j];
  __syncthreads();
  for (int c = tid; c < CT; c += THREADS) {
    float ca = red_a[0][c], cb = red_b[0][c];
#pragma unroll
    for (int y = 1; y < TY; ++y) ca += red_a[y][c], cb += red_b[y][c];
    red_a[0][c] = ca, red_b[0][c] = cb;
  }
  cluster.sync();

  // The item's A and B of this CTA's channels, over the cluster's CTAs in rank order.
  for (int i = tid; i < OWN; i += THREADS) {
    const int c = rank * OWN + i;  // within the tile
    float ca = 0.f, cb = 0.f;
#pragma unroll 4
    for (int r = 0; r < K; ++r) {
      ca += cluster.map_shared_rank(&red_a[0][0], r)[c];
      cb += cluster.map_shared_rank(&red_b[0][0], r)[c];
    }
    own_a[i] = ca, own_b[i] = cb;
    *reinterpret_cast<float2*>(a.part + (n * C + base_c + c) * 2) = make_float2(ca, cb);
  }
  cluster.sync();
  // Each channel's w * B and w * A (row 1 of red_*: free now), then each group's means.
  for (int c = tid; c < CT; c += THREADS) {
    const int r = c / OWN, i = c - r * OWN;
    const float wc = __bfloat162float(a.w[base_c + c]);
    red_b[1][c] = wc * cluster.map_shared_rank(own_b, r)[i];
    red_a[1][c] = wc * cluster.map_shared_rank(own_a, r)[i];
  }
  __syncthreads();
  for (int g = tid; g < GT; g += THREADS) {
    float sg = 0.f, sgx = 0.f;
    for (int c = g * CG; c < (g + 1) * CG; ++c) sg += red_b[1][c], sgx += red_a[1][c];
    const float inv = 1.0f / (float(CG) * float(S));
    means[g] = make_float2(sg * inv, sgx * inv);
  }
  cluster.sync();  // every remote read of own_* done before any CTA goes on (or exits)

  // Pass 2.
  float mg[kV], mgx[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    const float2 m = means[(c0 - base_c + j) / CG];
    mg[j] = m.x, mgx[j] = m.y;
  }
  bf16* dx = a.dx + n * S * C + c0;
  for (int s = s_begin + ty; s < s_end; s += TY * kAhead) {
    uint4 xv[kAhead], dv[kAhead];
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      const int si = s + i * TY;
      if (si < s_end) {
        xv[i] = *reinterpret_cast<const uint4*>(x + (long long)si * C);
        dv[i] = *reinterpret_cast<const uint4*>(dy + (long long)si * C);
      }
    }
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      const int si = s + i * TY;
      if (si >= s_end) continue;
      float xf[kV], df[kV], out[kV];
      unpack(xv[i], xf);
      unpack(dv[i], df);
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const float xhat = (xf[j] - mu[j]) * rs[j];
        out[j] = rs[j] * (df[j] * wv[j] - fmaf(xhat, mgx[j], mg[j]));
      }
      __stcs(reinterpret_cast<uint4*>(dx + (long long)si * C), pack(out));
    }
  }

  // dweight and dbias of this CTA's channels, by the CTA of this rank that finishes last.
  __threadfence();
  __syncthreads();
  unsigned* const ticket = a.tickets + tile * K + rank;
  if (tid == 0) last = atomicAdd(ticket, 1u) == unsigned(a.n_items - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = tid; i < OWN; i += THREADS) {
    const int c = base_c + rank * OWN + i;
    float dw = 0.f, db = 0.f;
    for (long long m = 0; m < a.n_items; ++m) {
      const float2 p = __ldcg(reinterpret_cast<const float2*>(a.part + (m * C + c) * 2));
      dw += p.x, db += p.y;
    }
    a.dw[c] = dw, a.db[c] = db;
  }
  if (tid == 0) *ticket = 0;
}

// Keeps the GPU busy while the host enqueues a timed launch, so that the events bracket GPU
// work, not the host's launch latency (normjit bench queues a copy there for the same reason).
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

struct Problem {
  int n, c, h, w;
};

template <int C, int G, int CT, int TY, int K>
float run(const Problem& pr, int sets, bool check) {
  const int S = pr.h * pr.w;
  const long long elems = (long long)pr.n * S * C;
  std::mt19937 rng(1234);
  std::normal_distribution<float> nx(3.f, 1.5f), nd(0.f, 1.f), nw(1.f, 0.5f);
  std::vector<bf16> hx(elems), hdy(elems), hw(C);
  std::vector<float> hx_f(elems), hdy_f(elems), hw_f(C);
  for (long long i = 0; i < elems; ++i) {
    hx[i] = __float2bfloat16(nx(rng)), hx_f[i] = __bfloat162float(hx[i]);
    hdy[i] = __float2bfloat16(nd(rng)), hdy_f[i] = __bfloat162float(hdy[i]);
  }
  for (int c = 0; c < C; ++c) hw[c] = __float2bfloat16(nw(rng)), hw_f[c] = __bfloat162float(hw[c]);
  constexpr int CG = C / G;
  std::vector<float> hmean(pr.n * G), hrstd(pr.n * G);
  for (int n = 0; n < pr.n; ++n) {
    for (int g = 0; g < G; ++g) {
      double s1 = 0, s2 = 0;
      for (int s = 0; s < S; ++s) {
        for (int c = g * CG; c < (g + 1) * CG; ++c) s1 += hx_f[((long long)n * S + s) * C + c];
      }
      const double m = s1 / (double(CG) * S);
      for (int s = 0; s < S; ++s) {
        for (int c = g * CG; c < (g + 1) * CG; ++c) {
          const double d = hx_f[((long long)n * S + s) * C + c] - m;
          s2 += d * d;
        }
      }
      hmean[n * G + g] = float(m);
      hrstd[n * G + g] = float(1.0 / std::sqrt(s2 / (double(CG) * S) + 1e-5));
    }
  }
  std::vector<bf16*> dxs(sets), dys(sets), dxo(sets);
  for (int i = 0; i < sets; ++i) {
    CHECK(cudaMalloc(&dxs[i], elems * 2));
    CHECK(cudaMalloc(&dys[i], elems * 2));
    CHECK(cudaMalloc(&dxo[i], elems * 2));
    CHECK(cudaMemcpy(dxs[i], hx.data(), elems * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dys[i], hdy.data(), elems * 2, cudaMemcpyHostToDevice));
  }
  float *dmean, *drstd, *dpart, *ddw, *ddb;
  bf16* dw16;
  unsigned* dtickets;
  CHECK(cudaMalloc(&dmean, pr.n * G * 4));
  CHECK(cudaMalloc(&drstd, pr.n * G * 4));
  CHECK(cudaMalloc(&dpart, (long long)pr.n * C * 8));
  CHECK(cudaMalloc(&ddw, C * 4));
  CHECK(cudaMalloc(&ddb, C * 4));
  CHECK(cudaMalloc(&dw16, C * 2));
  CHECK(cudaMalloc(&dtickets, C / CT * K * 4));
  CHECK(cudaMemset(dtickets, 0, C / CT * K * 4));
  CHECK(cudaMemcpy(dmean, hmean.data(), pr.n * G * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(drstd, hrstd.data(), pr.n * G * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dw16, hw.data(), C * 2, cudaMemcpyHostToDevice));

  auto kernel = cluster_backward<C, G, CT, TY, K>;
  if (K > 8) CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(pr.n * (C / CT) * K);
  cfg.blockDim = dim3(CT / kV, TY);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = K, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
  auto launch = [&](int set) {
    Args a{dxs[set], dys[set], dmean, drstd, dw16, dxo[set], dpart, dtickets, ddw, ddb, pr.n, S};
    CHECK(cudaLaunchKernelEx(&cfg, kernel, a));
  };
  // Poisoned output, then one launch, checked against float64.
  CHECK(cudaMemset(dxo[0], 0xff, elems * 2));
  launch(0);
  CHECK(cudaDeviceSynchronize());
  double err_dx = 0, ref_dx = 0, err_dw = 0, ref_dw = 0, err_db = 0, ref_db = 0;
  if (check) {
    std::vector<bf16> out(elems);
    std::vector<float> gdw(C), gdb(C);
    CHECK(cudaMemcpy(out.data(), dxo[0], elems * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(gdw.data(), ddw, C * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(gdb.data(), ddb, C * 4, cudaMemcpyDeviceToHost));
    std::vector<double> rdw(C, 0.0), rdb(C, 0.0);
    for (int n = 0; n < pr.n; ++n) {
      for (int g = 0; g < G; ++g) {
        const double m = hmean[n * G + g], r = hrstd[n * G + g];
        double sg = 0, sgx = 0;
        for (int s = 0; s < S; ++s) {
          for (int c = g * CG; c < (g + 1) * CG; ++c) {
            const long long i = ((long long)n * S + s) * C + c;
            const double xhat = (hx_f[i] - m) * r, gg = double(hdy_f[i]) * hw_f[c];
            sg += gg, sgx += gg * xhat;
            rdw[c] += double(hdy_f[i]) * xhat, rdb[c] += hdy_f[i];
          }
        }
        const double inv = 1.0 / (double(CG) * S);
        for (int s = 0; s < S; ++s) {
          for (int c = g * CG; c < (g + 1) * CG; ++c) {
            const long long i = ((long long)n * S + s) * C + c;
            const double xhat = (hx_f[i] - m) * r, gg = double(hdy_f[i]) * hw_f[c];
            const double ref = r * (gg - sg * inv - xhat * sgx * inv);
            const double got = __bfloat162float(out[i]);
            err_dx += (got - ref) * (got - ref), ref_dx += ref * ref;
          }
        }
      }
    }
    for (int c = 0; c < C; ++c) {
      err_dw += (gdw[c] - rdw[c]) * (gdw[c] - rdw[c]), ref_dw += rdw[c] * rdw[c];
      err_db += (gdb[c] - rdb[c]) * (gdb[c] - rdb[c]), ref_db += rdb[c] * rdb[c];
    }
  }
  // Timing: 3 warm-up calls, then the median of 20, the input sets in turn, each queued behind
  // a spin kernel.
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) launch(i % sets);
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    spin<<<1, 1>>>(100000);  // about 50 us
    CHECK(cudaEventRecord(e0));
    launch(i % sets);
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double bytes = 3.0 * elems * 2 + 2.0 * C * 2 + 2.0 * C * 4;  // x, dy, dx; w, b; dw, db
  std::printf(
      "[%d, %d, %d, %d] tiles %d K=%2d TY=%2d: %8.2f us median (min %.2f)  %.0f GB/s  "
      "%d clusters co-resident  rel. err dx %.1e dw %.1e db %.1e\n",
      pr.n, C, pr.h, pr.w, C / CT, K, TY, ms[10] * 1e3, ms[0] * 1e3, bytes / (ms[10] * 1e6),
      clusters, check ? std::sqrt(err_dx / ref_dx) : 0.0, check ? std::sqrt(err_dw / ref_dw) : 0.0,
      check ? std::sqrt(err_db / ref_db) : 0.0);
  for (int i = 0; i < sets; ++i) {
    CHECK(cudaFree(dxs[i]));
    CHECK(cudaFree(dys[i]));
    CHECK(cudaFree(dxo[i]));
  }
  CHECK(cudaFree(dmean));
  CHECK(cudaFree(drstd));
  CHECK(cudaFree(dpart));
  CHECK(cudaFree(ddw));
  CHECK(cudaFree(ddb));
  CHECK(cudaFree(dw16));
  CHECK(cudaFree(dtickets));
  return ms[10];
}

// Input sets so that the bytes between two uses of one set exceed 4x L2 (as normjit bench).
int sets_for(const Problem& pr) {
  int l2 = 0;
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  const double bytes = 3.0 * pr.n * pr.c * pr.h * pr.w * 2;
  return std::max(1, std::min(64, int(std::ceil(4.0 * l2 / bytes))));
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  const Problem p1{2, 320, 64, 64}, p2{2, 640, 32, 32}, p3{2, 1280, 16, 16}, p4{8, 1280, 32, 32},
      p5{8, 320, 64, 64};
  // <C, G, channels a tile, TY, K>: 640 threads a CTA; the first of each problem one tile.
  run<320, 32, 320, 16, 16>(p1, sets_for(p1), true);
  run<320, 32, 80, 64, 16>(p1, sets_for(p1), true);
  run<320, 32, 80, 64, 8>(p1, sets_for(p1), true);
  run<320, 32, 160, 32, 8>(p1, sets_for(p1), true);
  run<640, 32, 640, 8, 16>(p2, sets_for(p2), true);
  run<640, 32, 160, 32, 16>(p2, sets_for(p2), true);
  run<640, 32, 160, 32, 8>(p2, sets_for(p2), true);
  run<640, 32, 80, 64, 8>(p2, sets_for(p2), true);
  run<1280, 32, 1280, 4, 16>(p3, sets_for(p3), true);
  run<1280, 32, 320, 16, 16>(p3, sets_for(p3), true);
  run<1280, 32, 320, 16, 8>(p3, sets_for(p3), true);
  run<1280, 32, 160, 32, 8>(p3, sets_for(p3), true);
  run<1280, 32, 1280, 4, 8>(p4, sets_for(p4), true);
  run<1280, 32, 640, 8, 8>(p4, sets_for(p4), true);
  run<1280, 32, 320, 16, 8>(p4, sets_for(p4), true);
  run<1280, 32, 320, 16, 4>(p4, sets_for(p4), true);
  run<320, 32, 320, 16, 8>(p5, sets_for(p5), true);
  run<320, 32, 160, 32, 8>(p5, sets_for(p5), true);
  run<320, 32, 80, 64, 8>(p5, sets_for(p5), true);
  run<320, 32, 80, 64, 4>(p5, sets_for(p5), true);
  return 0;
}
