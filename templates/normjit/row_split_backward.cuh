// The backward of LayerNorm and RMSNorm over trailing dims for rows longer than one team holds
// (row_backward.cuh: rows of up to 8192 elements): dx from x, dy, the statistics the forward
// saved (save_stats) and the weight; dweight and dbias summed over every row, deterministically.
//
// Per row, in f32: xhat = (x - mean) * rstd (rmsnorm: x * rstd), g = dy * (offset + w),
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (rmsnorm: without mean(g)).
// With kResidual (the fused add's backward: x is h), dh (p.residual, x's dtype) is added to dx
// in f32 before its rounding, each vector of it loaded as dx's vector is stored (dx may be dh's
// buffer: each element is read before it is written, by the thread that writes it).
// The two means need the whole row, so each row is split over P co-resident CTAs (a cooperative
// launch, as row_split.cuh's forward): the grid is `slots` groups of P CTAs, slot s takes the
// rows s, s + slots, ..., and CTA `chunk` of a slot always takes the same part of each row, the
// kSeg elements from chunk * kSeg (the last one what remains). Each CTA sums (g, g * xhat) over
// its part, publishes that partial in its slot's workspace, waits for the slot's other P - 1 and
// adds the P partials in chunk order: every CTA of the slot gets the same bits, which depend on P
// and kSeg only (not on the slot, nor on how many rows the launch has: batch invariance).
//
// Two ways to hold a part (kPieces):
//   kPieces == 1 (held): a thread's K vectors of x and dy stay in registers from the sums to dx,
//     so x and dy are read once; a row at a time (kWaveRows 1), one exchange per row. Since each
//     thread takes the same columns of every row, the weight is loaded once and the thread sums
//     dy * xhat (dweight) and dy (dbias) of its columns over its rows in registers.
//   kPieces > 1 (streamed, rows longer than the chip's registers hold: the LayerNorm seed's
//     4 Mi elements): a part is kPieces pieces of K vectors per thread, streamed twice, and the
//     slot takes its rows in waves of up to W = kWaveRows. Pass 1 goes piece by piece, and for
//     each piece over the wave's rows: the W rows' sums in registers, and that piece's dweight and
//     dbias over the wave's rows, added to the CTA's accumulators in the workspace once per wave
//     (the accumulators of a part of 16 Ki columns do not fit on chip beside the rows, so W > 1
//     amortizes their read and write: once per W rows, not per row). One exchange per wave, then
//     pass 2 reads x and dy again for dx. (W is 1 without parameters: nothing to amortize, and a
//     row at a time keeps its second read closer to L2.)
//
// dweight and dbias, with no floating-point atomics: each CTA's partial of its columns (held:
// from registers after its last row; streamed: the accumulators) sits in its slice of the
// workspace; after a grid barrier, each column's partials of the slot's CTAs that share its chunk
// are added in slot order (kSumLanes lanes per column where the slots are many, see
// add_slices_in_order). The same inputs on the same grid give the same bits on every run.
//
// Workspace (floats, each region padded to kSlotAlign): the grid barrier's counter
// (kWorkspaceHeaderFloats), then per slot (kWorkspaceSlotFloats): its exchange (a u64 arrival
// counter, then partials[2][W][P] of (g, g * xhat), by generation parity), then P slices of the
// CTAs' dweight and dbias partials (kParams x padded kSeg). Counters only grow, across launches
// too, so nothing is reset between launches; launches on one workspace must be ordered (the
// engine keeps one workspace per stream).
#pragma once

#include "normjit/backward_common.cuh"
#include "normjit/params.cuh"
#include "normjit/vec.cuh"

namespace normjit {

__device__ __forceinline__ unsigned long long load_acquire_u64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ float2 load_global_cg2(const float* p) {
  float2 v;
  asm volatile("ld.global.cg.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "l"(p) : "memory");
  return v;
}

// One slot's exchange of row sums between its P CTAs, W rows per generation. Each CTA publishes
// its partials (g, g * xhat) of the generation's rows, then adds one to the slot's counter;
// generation g is complete when the counter reaches (g + 1) * P. Partials alternate between two
// buffers by generation parity: a CTA publishes g + 2 only after g + 1 completed, that is after
// every CTA of the slot had read g's. The counter only grows (across launches too): the launch's
// first generation is floor(counter / P), exact since the generation in progress cannot complete
// without this CTA. The arrival is a red.release.gpu and the wait an ld.acquire.gpu poll, without
// __threadfence() (performance-notes, "The other backward kernels' barriers with release and
// acquire").
template <int THREADS, long long P, int W>
struct GradExchange {
  static constexpr int kWarps = THREADS / 32;
  static constexpr long long kBufferFloats = 2LL * W * P;  // one generation: [W][P] of (g, gx)
  static constexpr long long kFloats = kBarrierFloats + padded_floats(2 * kBufferFloats);
  static_assert(THREADS % 32 == 0 && W <= THREADS, "whole warps; a thread per row's partial");

  struct Shared {
    GradSums warp_sums[W][kWarps];
    GradSums rows[W];  // the generation's row totals, after combine()
    unsigned long long base_generation;
  };

  Shared& sh;
  unsigned long long* const counter;
  float* const partials;
  const long long chunk;

  __device__ __forceinline__ GradExchange(Shared& shared, float* region, long long chunk_index)
      : sh(shared),
        counter(reinterpret_cast<unsigned long long*>(region)),
        partials(region + kBarrierFloats),
        chunk(chunk_index) {}

  // Thread 0 reads the launch's first generation; every thread may use base_generation() after
  // the next block barrier.
  __device__ __forceinline__ void start() {
    if (threadIdx.x == 0) sh.base_generation = load_acquire_u64(counter) / P;
  }
  __device__ __forceinline__ unsigned long long base_generation() const {
    return sh.base_generation;
  }

  // This CTA's partials of generation g's rows: each thread's mine[r] reduced over the CTA (a
  // fixed shuffle tree per warp, then the warps in order), written, then counted.
  __device__ __forceinline__ void publish(GradSums (&mine)[W], unsigned long long g) {
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
#pragma unroll
    for (int r = 0; r < W; ++r) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        mine[r] = merge(mine[r], shfl_down(mine[r], offset, 32));
      }
      if (lane == 0) sh.warp_sums[r][warp] = mine[r];
    }
    __syncthreads();
    if (tid < W) {
      GradSums total = sh.warp_sums[tid][0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) total = merge(total, sh.warp_sums[tid][w]);
      float* out = partials + (g & 1) * kBufferFloats + (tid * P + chunk) * 2;
      out[0] = total.g;
      out[1] = total.gx;
    }
    __syncthreads();  // the partials are written (and warp_sums read) before the arrival
    if (tid == 0) {
      asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(counter) : "memory");
    }
  }

  // Waits for generation g and leaves the totals of its first n rows in sh.rows (the P partials
  // added in chunk order: lane q takes chunks q, q + 32, ... in order, then a fixed tree).
  __device__ __forceinline__ void combine(unsigned long long g, int n) {
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    if (tid == 0) {
      const unsigned long long complete = (g + 1) * P;
      while (load_acquire_u64(counter) < complete) __nanosleep(64);
    }
    __syncthreads();
    const float* in = partials + (g & 1) * kBufferFloats;
    for (int r = warp; r < n; r += kWarps) {
      GradSums sum{0.f, 0.f};
      long long c = lane;
      for (; c + 32 < P; c += 64) {  // two loads in flight, added in order
        const float2 a = load_global_cg2(in + (r * P + c) * 2);
        const float2 b = load_global_cg2(in + (r * P + c + 32) * 2);
        sum = merge(merge(sum, GradSums{a.x, a.y}), GradSums{b.x, b.y});
      }
      if (c < P) {
        const float2 a = load_global_cg2(in + (r * P + c) * 2);
        sum = merge(sum, GradSums{a.x, a.y});
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) sum = merge(sum, shfl_down(sum, offset, 32));
      if (lane == 0) sh.rows[r] = sum;
    }
    __syncthreads();
  }
};

constexpr int kSumLanes = 8;    // lanes that add one column vector's partials where slots are many
constexpr int kFewSlots = 8;    // at most this many slots: one lane per column vector
constexpr int kSumColumns = 4;  // columns per lane (one 16-byte load of each partial)

// add_slices_in_order (below) with Q lanes per column vector.
template <int Q, class PT, int kThreads, int kParams, long long H, long long kSeg,
          long long kPaddedSeg, long long P, long long kCtaFloats, long long kSlotFloats>
__device__ __forceinline__ void add_slices_with(const float* slices, long long slots, void* out0,
                                                void* out1) {
  constexpr int kPerWarp = 32 / Q;
  constexpr long long kVectorsPerChunk = kSeg / kSumColumns;
  constexpr long long kVectors = kParams * P * kVectorsPerChunk;
  const int tid = threadIdx.x, lane = tid % 32, q = lane % Q;
  const long long warps = (long long)gridDim.x * (kThreads / 32);
  const long long warp = sum_warp<kThreads>(tid);
  // The same trip count for every lane of the warp (the shuffles need all 32).
  for (long long first = warp * kPerWarp; first < kVectors; first += warps * kPerWarp) {
    const long long v = first + lane / Q;
    const long long param = v / (P * kVectorsPerChunk);
    const long long rest = v - param * (P * kVectorsPerChunk);
    const long long c = rest / kVectorsPerChunk;
    const long long local = (rest - c * kVectorsPerChunk) * kSumColumns;
    const long long e = c * kSeg + local;
    const bool valid = v < kVectors && e < H;
    const float* column = slices + c * kCtaFloats + param * kPaddedSeg + local;
    float4 sum = {0.f, 0.f, 0.f, 0.f};
    if (valid) {
      long long s = q;
      for (; s + 3 * Q < slots; s += 4 * Q) {  // four loads in flight, added in order
        float4 part[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) part[i] = load_global_cg4(column + (s + i * Q) * kSlotFloats);
        sum = add4(add4(add4(add4(sum, part[0]), part[1]), part[2]), part[3]);
      }
      for (; s < slots; s += Q) sum = add4(sum, load_global_cg4(column + s * kSlotFloats));
    }
    sum = add4_over_lanes<Q>(sum);
    if (valid && q == 0) {
      PT* out = static_cast<PT*>(param == 0 ? out0 : out1) + e;
      const float parts[kSumColumns] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
      for (int j = 0; j < kSumColumns; ++j) {
        if (e + j < H) out[j] = from_float<PT>(parts[j]);
      }
    }
  }
}

// After the grid barrier: dweight and dbias from the CTAs' slices. Column e of parameter i lies in
// chunk c = e / kSeg at local = e - c * kSeg of the slices of CTAs (s, c), s = 0 .. slots - 1, at
// slices + s * kSlotFloats + c * kCtaFloats + i * kPaddedSeg + local. Each column's partials are
// added in slot order: by one lane where the slots are few (their reads then spread over every
// thread of the grid: the LayerNorm seed has one slot and 4 Mi columns), else Q = kSumLanes lanes
// add the slots q, q + Q, ... in order and their sums are added in a fixed tree (Q times as many
// loads in flight). Which of the two depends on the slot count only, so the order is fixed by the
// grid. Every thread of the grid calls it.
template <class PT, int kThreads, int kParams, long long H, long long kSeg, long long kPaddedSeg,
          long long P, long long kCtaFloats, long long kSlotFloats>
__device__ __forceinline__ void add_slices_in_order(const float* slices, long long slots,
                                                    void* out0, void* out1) {
  static_assert(kSeg % kSumColumns == 0 && kPaddedSeg % kSumColumns == 0,
                "column vectors stay within a chunk and 16-byte aligned");
  if (slots <= kFewSlots) {
    add_slices_with<1, PT, kThreads, kParams, H, kSeg, kPaddedSeg, P, kCtaFloats, kSlotFloats>(
        slices, slots, out0, out1);
  } else {
    add_slices_with<kSumLanes, PT, kThreads, kParams, H, kSeg, kPaddedSeg, P, kCtaFloats,
                    kSlotFloats>(slices, slots, out0, out1);
  }
}

// C: the configuration generator/emit.cpp writes:
//   X, Param                  dtypes of x, dy and dx; of weight, bias, dweight and dbias
//   kRms                      rmsnorm (no mean); else layernorm
//   kWeight, kBias            the forward's affine step: y = xhat * (kWeightOffset + w) + b
//   kWeightOffset             added to the weight in f32 (Gemma)
//   kActivation               the forward's activation after the affine step: dy taken through
//                             its derivative at z = xhat * (offset + w) + b (through_activation,
//                             backward_common.cuh) wherever it is read; p.bias read for z (with
//                             the weight) where there is a bias
//   kRowLength                H: elements normalized together
//   kThreads, kBlocksPerSm    threads per CTA; CTAs per SM the launch bounds ask for
//   kVec, kVectors            V: elements per access (V divides H); K: vectors per thread (held:
//                             of the part; streamed: of a piece)
//   kParts, kSegment          P: CTAs per row; kSeg: elements of a row per CTA
//   kPieces                   pieces of THREADS * K * V elements per part; 1: held in registers
//   kWaveRows                 W: rows of a slot per exchange (held: 1)
//   kReloadWeight             held: the weight loaded with each row instead of held
//   kSharedBiasSums           held: each thread's dbias sums in shared memory, not registers
//   kStepsAhead               streamed: each step's vectors of x and dy started towards L2 this
//                             many steps of the wave's walk ahead of its loads (0: none)
//   kWorkspaceHeaderFloats    the plan's floats before the slots (checked against the layout)
//   kWorkspaceSlotFloats      the plan's floats per slot (checked against the layout)
template <class C>
__global__ void __launch_bounds__(C::kThreads, C::kBlocksPerSm) row_split_backward(Params p) {
  using X = typename C::X;
  using PT = typename C::Param;
  constexpr int THREADS = C::kThreads, V = C::kVec, K = C::kVectors, W = C::kWaveRows;
  constexpr long long H = C::kRowLength, P = C::kParts, kSeg = C::kSegment;
  constexpr long long kPieces = C::kPieces;
  constexpr long long kPiece = (long long)THREADS * K * V;
  constexpr bool kRms = C::kRms, kWeight = C::kWeight, kBias = C::kBias;
  constexpr int kParams = kWeight + kBias;
  constexpr long long kPaddedSeg = padded_floats(kSeg);
  constexpr long long kCtaFloats = kParams * kPaddedSeg;
  using Exchange = GradExchange<THREADS, P, W>;
  constexpr long long kSlotFloats = Exchange::kFloats + P * kCtaFloats;
  static_assert(H % V == 0, "vectors never straddle a row's end");
  static_assert(kSeg == kPieces * kPiece, "a part is whole pieces");
  static_assert((P - 1) * kSeg < H && H <= P * kSeg, "P parts of kSeg cover the row, none empty");
  static_assert(kPieces > 1 || W == 1, "held parts take a row at a time");
  static_assert(C::kWorkspaceHeaderFloats == kBarrierFloats,
                "the plan's workspace starts with the grid barrier's counter");
  static_assert(C::kWorkspaceSlotFloats == kSlotFloats,
                "the plan's workspace slot is the exchange and the P CTAs' slices");
  static_assert(V <= kSlotAlign, "slices are written as aligned vectors of V floats");
  static_assert(THREADS % 32 == 0, "whole warps");

  __shared__ typename Exchange::Shared exchange_shared;
  const long long slots = gridDim.x / P, slot = blockIdx.x / P;
  const long long chunk = blockIdx.x - slot * P;
  const long long begin = chunk * kSeg;  // this CTA's part of every row
  const long long end = begin + kSeg < H ? begin + kSeg : H;
  float* const slot_region = p.workspace + kBarrierFloats + slot * kSlotFloats;
  Exchange exchange(exchange_shared, slot_region, chunk);
  float* const slice = slot_region + Exchange::kFloats + chunk * kCtaFloats;
  const long long rows = p.batch;
  const int tid = threadIdx.x;
  const X* const x_all = static_cast<const X*>(p.x);
  const X* const dy_all = static_cast<const X*>(p.dy);
  X* const dx_all = static_cast<X*>(p.y);
  const X* const dh_all = static_cast<const X*>(p.residual);
  const PT* const weight = static_cast<const PT*>(p.weight);
  // Vector k of this thread in the piece at `at` (held: the part): its first element, in the row.
  const auto col = [&](long long at, int k) { return at + (long long)(tid + k * THREADS) * V; };
  // kResidual: dh of vector k (in the piece at `at`) of a row, added to dx's values `out`.
  const auto add_dh = [&](long long row, long long at, int k, float(&out)[V]) {
    if constexpr (C::kResidual) {
      float d[V];
      load_vec<X, V>(dh_all + row * H + col(at, k), d);
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] += d[j];
    }
  };
  const auto load_weight = [&](long long at, float(&w)[K][V]) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (col(at, k) < end) {
        load_vec<PT, V>(weight + col(at, k), w[k]);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) w[k][j] = 0.f;
      }
#pragma unroll
      for (int j = 0; j < V; ++j) w[k][j] += C::kWeightOffset;
    }
  };
  // With an activation and a bias: the bias of the piece at `at`, for z (zeros past the part's
  // end); nothing otherwise.
  constexpr bool kActBias = C::kActivation != Activation::kNone && kBias;
  constexpr int KB = kActBias ? K : 1;
  const auto load_bias = [&](long long at, float(&b)[KB][V]) {
#pragma unroll
    for (int k = 0; k < KB; ++k) {
      if (kActBias && col(at, k) < end) {
        load_vec<PT, V>(static_cast<const PT*>(p.bias) + col(at, k), b[k]);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) b[k][j] = 0.f;
      }
    }
  };
  // The weight used for z and g: 1 without a weight.
  const auto w_at = [](const float(&w)[kWeight ? K : 1][V], int k, int j) {
    return kWeight ? w[kWeight ? k : 0][j] : 1.f;
  };
  exchange.start();
  __syncthreads();  // every thread reads the generation thread 0 wrote
  unsigned long long g = exchange.base_generation();

  if constexpr (kPieces == 1) {
    // Held: the part in registers, a row at a time.
    // The weight is held for the whole launch, or (kReloadWeight) loaded again with each row's
    // x and dy (from L1: the CTA's columns are the same every row), which frees its registers.
    // With an activation, the bias as the weight: held, or loaded again with each row.
    float w[kWeight ? K : 1][V], bias[KB][V] = {};
    if constexpr (kWeight && !C::kReloadWeight) load_weight(begin, w);
    if constexpr (kActBias && !C::kReloadWeight) load_bias(begin, bias);
    float dw[kWeight ? K : 1][V] = {}, db[kBias ? K : 1][V] = {};
    // kSharedBiasSums: the dbias sums live in shared memory ([k][j][tid]: a warp's accesses are
    // consecutive words), each thread touching only its own, so no barrier orders them.
    constexpr bool kSharedDb = kBias && C::kSharedBiasSums;
    __shared__ float db_shared[kSharedDb ? K * V * THREADS : 1];
    const auto db_at = [&](int k, int j) -> float& {
      return db_shared[(k * V + j) * THREADS + tid];
    };
    if constexpr (kSharedDb) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int j = 0; j < V; ++j) db_at(k, j) = 0.f;
      }
    }
    for (long long row = slot; row < rows; row += slots, ++g) {
      const float rstd = p.rstd[row];
      const float mean = kRms ? 0.f : p.mean[row];
      const X* x = x_all + row * H;
      const X* dy = dy_all + row * H;
      float xhat[K][V], gv[K][V];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (col(begin, k) < end) {
          load_vec<X, V>(x + col(begin, k), xhat[k]);
          load_vec<X, V>(dy + col(begin, k), gv[k]);
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) xhat[k][j] = mean, gv[k][j] = 0.f;
        }
      }
      if constexpr (kWeight && C::kReloadWeight) load_weight(begin, w);
      if constexpr (kActBias && C::kReloadWeight) load_bias(begin, bias);
      GradSums sums[1] = {{0.f, 0.f}};
#pragma unroll
      for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          xhat[k][j] = (xhat[k][j] - mean) * rstd;  // 0 past the row's end
          gv[k][j] =
              through_activation<C>(gv[k][j], xhat[k][j], w_at(w, k, j), bias[kActBias ? k : 0][j]);
          if constexpr (kWeight) dw[k][j] = fmaf(gv[k][j], xhat[k][j], dw[k][j]);
          if constexpr (kSharedDb) {
            db_at(k, j) += gv[k][j];
          } else if constexpr (kBias) {
            db[k][j] += gv[k][j];
          }
          if constexpr (kWeight) gv[k][j] *= w[k][j];
          if constexpr (!kRms) sums[0].g += gv[k][j];
          sums[0].gx = fmaf(gv[k][j], xhat[k][j], sums[0].gx);
        }
      }
      // This row's part is in registers: start the slot's next row towards L2, so that its
      // loads find it there after the exchange.
      if (tid == 0 && row + slots < rows) {
        prefetch_l2(x + slots * H, begin, end);
        prefetch_l2(dy + slots * H, begin, end);
      }
      exchange.publish(sums, g);
      exchange.combine(g, 1);
      const GradSums total = exchange_shared.rows[0];
      const float mean_g = kRms ? 0.f : total.g * (1.0f / H);
      const float mean_gx = total.gx * (1.0f / H);
      X* dx = dx_all + row * H;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (col(begin, k) >= end) continue;
        float out[V];
#pragma unroll
        for (int j = 0; j < V; ++j) {
          out[j] = rstd * (gv[k][j] - fmaf(xhat[k][j], mean_gx, mean_g));
        }
        add_dh(row, begin, k, out);
        store_vec<X, V>(dx + col(begin, k), out);
      }
    }
    // The CTA's partial of its columns, for the sum after the grid barrier.
    if constexpr (kParams > 0) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (col(begin, k) >= end) continue;
        const long long local = col(begin, k) - begin;
        if constexpr (kWeight) store_vec<float, V>(slice + local, dw[k]);
        if constexpr (kSharedDb) {
#pragma unroll
          for (int j = 0; j < V; ++j) db[k][j] = db_at(k, j);
        }
        if constexpr (kBias) store_vec<float, V>(slice + (kParams - 1) * kPaddedSeg + local, db[k]);
      }
    }
  } else {
    // Streamed: waves of up to W rows of the slot (rows first + r * slots), pieces streamed
    // twice.
    __shared__ float wave_stats[2][2][W];  // [wave parity][mean, rstd][r]
    long long wave = 0;
    for (long long first = slot; first < rows; first += slots * W, ++wave, ++g) {
      const long long left = (rows - first + slots - 1) / slots;  // the slot's rows from `first`
      const int n = left < W ? int(left) : W;                     // the same in the whole slot
      float(*const stats)[W] = wave_stats[wave & 1];
      // (The other parity's stats may still be read by slower threads of the previous wave;
      // this one's were last read two waves ago, before the previous wave's exchange.)
      if (tid < n) {
        stats[0][tid] = kRms ? 0.f : p.mean[first + tid * slots];
        stats[1][tid] = p.rstd[first + tid * slots];
      }
      __syncthreads();

      // A step is one row's piece; the wave's walk is pass 1's pieces, each over the wave's
      // rows, then pass 2's. With kStepsAhead = D, each step first starts this thread's vectors
      // of x and dy D steps further on towards L2 (prefetch.global.L2: no registers held), so
      // that D more steps of each thread are in flight beside its loads; without it a step waits
      // a DRAM round trip with one piece's vectors in flight (16 KiB an SM for bf16 at 2 CTAs of
      // 256 threads).
      long long ahead_piece = 0;
      int ahead_row = 0, ahead_pass = 0;
      const auto advance_ahead = [&] {
        if (++ahead_row == n) {
          ahead_row = 0;
          if (++ahead_piece == kPieces) ahead_piece = 0, ++ahead_pass;
        }
      };
      const auto step_ahead = [&] {
        if constexpr (C::kStepsAhead > 0) {
          if (ahead_pass < 2) {
            const long long at = begin + ahead_piece * kPiece;
            const long long row = first + ahead_row * slots;
#pragma unroll
            for (int k = 0; k < K; ++k) {
              if (col(at, k) < end) {
                prefetch_l2_vector(x_all + row * H + col(at, k));
                prefetch_l2_vector(dy_all + row * H + col(at, k));
              }
            }
          }
          advance_ahead();
        }
      };
      if constexpr (C::kStepsAhead > 0) {
        for (int d = 0; d < C::kStepsAhead; ++d) advance_ahead();
      }

      // Pass 1: each piece over the wave's rows.
      GradSums sums[W];
#pragma unroll
      for (int r = 0; r < W; ++r) sums[r] = GradSums{0.f, 0.f};
      for (long long i = 0; i < kPieces; ++i) {
        const long long at = begin + i * kPiece;
        float w[kWeight ? K : 1][V], bias[KB][V] = {};
        if constexpr (kWeight) load_weight(at, w);
        if constexpr (kActBias) load_bias(at, bias);
        float dw[kWeight ? K : 1][V] = {}, db[kBias ? K : 1][V] = {};
#pragma unroll
        for (int r = 0; r < W; ++r) {
          if (r >= n) break;
          const long long row = first + r * slots;
          const float mean = stats[0][r], rstd = stats[1][r];
          const X* x = x_all + row * H;
          const X* dy = dy_all + row * H;
          step_ahead();
          float xv[K][V], gv[K][V];
#pragma unroll
          for (int k = 0; k < K; ++k) {
            if (col(at, k) < end) {
              load_vec<X, V>(x + col(at, k), xv[k]);
              load_vec<X, V>(dy + col(at, k), gv[k]);
            } else {
#pragma unroll
              for (int j = 0; j < V; ++j) xv[k][j] = mean, gv[k][j] = 0.f;
            }
          }
#pragma unroll
          for (int k = 0; k < K; ++k) {
#pragma unroll
            for (int j = 0; j < V; ++j) {
              const float xhat = (xv[k][j] - mean) * rstd;  // 0 past the row's end
              gv[k][j] =
                  through_activation<C>(gv[k][j], xhat, w_at(w, k, j), bias[kActBias ? k : 0][j]);
              if constexpr (kWeight) dw[k][j] = fmaf(gv[k][j], xhat, dw[k][j]);
              if constexpr (kBias) db[k][j] += gv[k][j];
              const float gw = kWeight ? gv[k][j] * w[k][j] : gv[k][j];
              if constexpr (!kRms) sums[r].g += gw;
              sums[r].gx = fmaf(gw, xhat, sums[r].gx);
            }
          }
        }
        // The piece's dweight and dbias over the wave, added to the CTA's accumulators (its
        // own columns: no other thread touches them until the grid barrier).
        if constexpr (kParams > 0) {
#pragma unroll
          for (int k = 0; k < K; ++k) {
            if (col(at, k) >= end) continue;
            const long long local = col(at, k) - begin;
            float acc[V];
            if constexpr (kWeight) {
              if (wave > 0) {
                load_vec<float, V>(slice + local, acc);
#pragma unroll
                for (int j = 0; j < V; ++j) dw[k][j] += acc[j];
              }
              store_vec<float, V>(slice + local, dw[k]);
            }
            if constexpr (kBias) {
              float* b = slice + (kParams - 1) * kPaddedSeg + local;
              if (wave > 0) {
                load_vec<float, V>(b, acc);
#pragma unroll
                for (int j = 0; j < V; ++j) db[k][j] += acc[j];
              }
              store_vec<float, V>(b, db[k]);
            }
          }
        }
      }
      exchange.publish(sums, g);
      exchange.combine(g, n);

      // Pass 2: dx, x and dy read again.
      for (long long i = 0; i < kPieces; ++i) {
        const long long at = begin + i * kPiece;
        float w[kWeight ? K : 1][V], bias[KB][V] = {};
        if constexpr (kWeight) load_weight(at, w);
        if constexpr (kActBias) load_bias(at, bias);
#pragma unroll
        for (int r = 0; r < W; ++r) {
          if (r >= n) break;
          const long long row = first + r * slots;
          const float mean = stats[0][r], rstd = stats[1][r];
          const GradSums total = exchange_shared.rows[r];
          const float mean_g = kRms ? 0.f : total.g * (1.0f / H);
          const float mean_gx = total.gx * (1.0f / H);
          const X* x = x_all + row * H;
          const X* dy = dy_all + row * H;
          X* dx = dx_all + row * H;
          step_ahead();
          float xv[K][V], gv[K][V];
#pragma unroll
          for (int k = 0; k < K; ++k) {
            if (col(at, k) < end) {
              load_vec<X, V>(x + col(at, k), xv[k]);
              load_vec<X, V>(dy + col(at, k), gv[k]);
            }
          }
#pragma unroll
          for (int k = 0; k < K; ++k) {
            if (col(at, k) >= end) continue;
            float out[V];
#pragma unroll
            for (int j = 0; j < V; ++j) {
              const float xhat = (xv[k][j] - mean) * rstd;
              const float d =
                  through_activation<C>(gv[k][j], xhat, w_at(w, k, j), bias[kActBias ? k : 0][j]);
              const float gw = kWeight ? d * w[k][j] : d;
              out[j] = rstd * (gw - fmaf(xhat, mean_gx, mean_g));
            }
            add_dh(row, at, k, out);
            store_vec<X, V>(dx + col(at, k), out);
          }
        }
      }
    }
  }

  if constexpr (kParams > 0) {
    grid_barrier(reinterpret_cast<unsigned int*>(p.workspace));
    add_slices_in_order<PT, THREADS, kParams, H, kSeg, kPaddedSeg, P, kCtaFloats, kSlotFloats>(
        p.workspace + kBarrierFloats + Exchange::kFloats, slots, kWeight ? p.dweight : p.dbias,
        p.dbias);
  }
}

}  // namespace normjit
