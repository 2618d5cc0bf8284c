// Pieces shared by the row kernels (layernorm, rmsnorm over trailing dims, groupnorm): a
// thread's slice of a row held in registers, its statistics, and the normalize-and-store.
//
// A row is H contiguous elements. For groupnorm a row is one (n, g): CG channels of S
// spatial elements, and the parameters of element e are weight[(row % G) * CG + e / S];
// otherwise (G == 0) they are weight[e]. V divides H (not always S: a groupnorm vector may
// span channels).
#pragma once

#include "normjit/params.cuh"
#include "normjit/reduce.cuh"
#include "normjit/vec.cuh"

namespace normjit {

// The shift of a row's statistics (see Slice::load): its first element; none for RMSNorm.
template <bool kRms, class T>
__device__ __forceinline__ float row_shift(const T* row) {
  return kRms ? 0.f : to_float(row[0]);
}

// The rows a launch covers: batch items times groups per item.
template <int G>
__device__ __forceinline__ long long total_rows(const Params& p) {
  return p.batch * (G > 0 ? G : 1);
}

// The L2 hints of a row kernel's accesses (vec.cuh): `stream` for x and y, `keep` for the
// parameters.
struct NoHints {
  NoHint stream, keep;
};
struct L2Hints {
  L2Hint stream, keep;
};

// A thread's K vectors of V elements: vector k starts at element begin + (tid + k*THREADS)*V
// of the row; elements at or past H are not loaded. H % V == 0, so a vector never straddles.
template <class T, int K, int V, int THREADS, long long H>
struct Slice {
  // 16-bit types keep their raw bits, two to a register: half the registers of f32 values,
  // so a split CTA can hold twice the elements. The shift is applied on use (value()); a
  // vector past the row's end holds the shift itself, so its values are exactly 0.
  static constexpr bool kPacked = sizeof(T) == 2 && V % 2 == 0;
  float fv[kPacked ? 1 : K][kPacked ? 1 : V];
  unsigned int pv[kPacked ? K : 1][kPacked ? V / 2 : 1];
  float shift_ = 0.f;
  int count;  // valid elements

  // x - shift of element j of vector k.
  __device__ __forceinline__ float value(int k, int j) const {
    if constexpr (kPacked) {
      const unsigned int w = pv[k][j / 2];
      return to_float(from_bits<T>(j % 2 ? w >> 16 : w & 0xffffu)) - shift_;
    } else {
      return fv[k][j];
    }
  }

  // Vector k from V elements at p (global or shared memory), or the shift when !valid.
  template <class Hint>
  __device__ __forceinline__ void fill(int k, const T* p, bool valid, float shift, Hint hint) {
    if constexpr (kPacked) {
      if (valid) {
        load_words<T, V>(p, pv[k], hint);
      } else {
        const unsigned int bits = bits_of(from_float<T>(shift));  // exact: shift is a T
#pragma unroll
        for (int i = 0; i < V / 2; ++i) pv[k][i] = bits | bits << 16;
      }
    } else if (valid) {
      load_vec<T, V>(p, fv[k], hint);
#pragma unroll
      for (int j = 0; j < V; ++j) fv[k][j] -= shift;
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) fv[k][j] = 0.f;
    }
  }

  // Loads the slice as x - shift. LayerNorm and GroupNorm shift by the row's first element:
  // statistics of shifted data keep their precision when |mean| >> std (mean 1e4, std 1
  // would otherwise lose 1e-3 to the rounding of the mean), and x - shift is exact for x
  // within a factor 2 of the shift.
  template <class Hint = NoHint>
  __device__ __forceinline__ void load(const T* row, long long begin, int tid, float shift,
                                       Hint hint = {}) {
    shift_ = shift;
    count = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const long long e = begin + (long long)(tid + k * THREADS) * V;
      fill(k, row + e, e < H, shift, hint);
      count += e < H ? V : 0;
    }
  }

  // Starts asynchronous copies of this thread's vectors of the chunk at `begin` of `row` into
  // the same offsets of `stage` (shared memory), to be picked up by load_staged(). Each
  // thread copies and later reads only its own vectors, so no barrier is needed between.
  // No L2 hint: ptxas before 13.4 miscompiles cp.async with a cache policy (the kernel dies
  // with an illegal instruction; triton-lang/triton#11660 and #11848).
  __device__ __forceinline__ void prefetch(const T* row, long long begin, int tid, T* stage) const {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const long long local = (long long)(tid + k * THREADS) * V;
      if (begin + local < H) copy_async(stage + local, row + begin + local);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  // One vector from global to shared memory, asynchronously (joins the next commit_group).
  __device__ __forceinline__ static void copy_async(T* shared_dst, const T* src) {
    constexpr int kBytes = sizeof(T) * V;
    static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async moves 4, 8 or 16 bytes");
    const unsigned int dst = static_cast<unsigned int>(__cvta_generic_to_shared(shared_dst));
    if constexpr (kBytes == 16) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
    } else {
      asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(dst), "l"(src), "n"(kBytes)
                   : "memory");
    }
  }

  // Waits for this thread's prefetch() and loads the slice from `stage`, as load() would.
  __device__ __forceinline__ void load_staged(const T* stage, long long begin, int tid,
                                              float shift) {
    asm volatile("cp.async.wait_all;" ::: "memory");
    shift_ = shift;
    count = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const long long local = (long long)(tid + k * THREADS) * V;
      fill(k, stage + local, begin + local < H, shift, NoHint{});
      count += begin + local < H ? V : 0;
    }
  }

  // Calls f(v, k) with each of this thread's valid prefetched vectors v (its k-th), read from
  // `stage` (one shared-memory access each) after this thread's copies completed.
  template <class F>
  __device__ __forceinline__ static void for_each_staged(const T* stage, long long begin, int tid,
                                                         F f) {
    asm volatile("cp.async.wait_all;" ::: "memory");
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const long long local = (long long)(tid + k * THREADS) * V;
      if (begin + local < H) {
        float v[V];
        load_vec<T, V>(stage + local, v);
        f(v, k);
      }
    }
  }

  // Statistics of this thread's prefetched values, read from `stage` without keeping them
  // (the registers hold the row before): the same values load_staged() will load.
  // 16-bit values: one pass over shared memory, each vector's exact two-pass (mean, M2) merged
  // into the running ones with Chan's formula, whose weights are constants here (valid vectors
  // come first, so before vector k there are k*V values). f32: two passes, the thread's
  // exact two-pass statistics. On the H100 the single pass ran the bf16 GroupNorm seed faster
  // and the f32 one slower (its 4-element vectors spend more arithmetic per element on the
  // merges than a second pass over shared memory costs).
  __device__ __forceinline__ static Stats staged_stats(const T* stage, long long begin, int tid,
                                                       float shift) {
    if constexpr (sizeof(T) == 2) {
      Stats total = {0.f, 0.f, 0.f};
      // k: a constant of each step of the unrolled loop, and the vectors merged before this.
      for_each_staged(stage, begin, tid, [&](const float(&v)[V], int k) {
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < V; ++j) sum += v[j] - shift;
        const float mean = sum * (1.0f / V);
        float m2 = 0.f;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float d = v[j] - shift - mean;
          m2 += d * d;
        }
        const float delta = mean - total.mean;
        const float weight = 1.0f / (k + 1);  // this vector's share of the (k+1)*V values
        total = {float((k + 1) * V), total.mean + delta * weight,
                 total.m2 + m2 + delta * delta * (k * V) * weight};
      });
      return total;
    } else {
      float sum = 0.f;
      int count = 0;
      for_each_staged(stage, begin, tid, [&](const float(&v)[V], int) {
#pragma unroll
        for (int j = 0; j < V; ++j) sum += v[j] - shift;
        count += V;
      });
      const float mean = count > 0 ? sum / count : 0.f;
      float m2 = 0.f;
      for_each_staged(stage, begin, tid, [&](const float(&v)[V], int) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float d = v[j] - shift - mean;
          m2 += d * d;
        }
      });
      return {float(count), mean, m2};
    }
  }

  __device__ __forceinline__ static float staged_sum_squares(const T* stage, long long begin,
                                                             int tid) {
    float s = 0.f;
    for_each_staged(stage, begin, tid, [&](const float(&v)[V], int) {
#pragma unroll
      for (int j = 0; j < V; ++j) s += v[j] * v[j];
    });
    return s;
  }

  // Sum of the valid values (invalid slots hold 0).
  __device__ __forceinline__ float sum() const {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int j = 0; j < V; ++j) s += value(k, j);
    }
    return s;
  }
  // Sum of the squared deviations of the valid values from `mean`. Valid vectors come first
  // (k ascending), so the first `count` values in (k, j) order are the real ones.
  __device__ __forceinline__ float squared_deviations(float mean) const {
    float m2 = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float d = value(k, j) - mean;
        m2 += k * V + j < count ? d * d : 0.f;
      }
    }
    return m2;
  }
  // Exact two-pass statistics of the valid values.
  __device__ __forceinline__ Stats stats() const {
    const float mean = count > 0 ? sum() / count : 0.f;
    return {float(count), mean, squared_deviations(mean)};
  }

  __device__ __forceinline__ float sum_squares() const {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int j = 0; j < V; ++j) s += value(k, j) * value(k, j);
    }
    return s;  // invalid slots hold 0
  }

  // y = (x - mean) * rstd * weight + bias, stored to the row of y; `mean` is of the shifted
  // values, like the slice. kOneChannel: the caller
  // knows every element of the slice lies in the channel of `begin` (groupnorm chunks that
  // divide S), so the parameters are loaded once.
  // `hints`: NoHints, or L2Hints (y and the parameters as their names say).
  // KR > 0 (G == 0): the parameters of the slice's first KR vectors are in shared memory,
  // `resident` (weight, then bias, each KR * THREADS * V elements at the chunk's offsets).
  template <int G, long long S, int CG, bool kWeight, bool kBias, bool kOneChannel = false,
            int KR = 0, class Hints = NoHints>
  __device__ __forceinline__ void store(T* out, const Params& p, long long row, long long begin,
                                        int tid, float mean, float rstd, Hints hints = {},
                                        const T* resident = nullptr) const {
    const T* weight = static_cast<const T*>(p.weight);
    const T* bias = static_cast<const T*>(p.bias);
    // y = (v - mean) * rstd * w + b. With per-channel parameters (groupnorm) that folds into
    // one FMA per element: scale = rstd * w, offset = b - mean * scale.
    // The (scale, offset) of the channel of element e (groupnorm).
    const auto fold = [&](long long e, float& scale, float& offset) {
      const long long c = (row % G) * CG + e / S;
      const float w = kWeight ? to_float(weight[c]) : 1.f;
      const float b = kBias ? to_float(bias[c]) : 0.f;
      scale = rstd * w;
      offset = fmaf(-mean, scale, b);
    };
    float scale1 = rstd, offset1 = -mean * rstd;  // the whole slice's, when it has one channel
    if constexpr (kOneChannel) fold(begin, scale1, offset1);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const long long e = begin + (long long)(tid + k * THREADS) * V;
      if (e >= H) continue;
      float y[V];
      if constexpr (G == 0) {
        float w[V], b[V];
        constexpr long long kResident = (long long)KR * THREADS * V;
        if (k < KR) {  // k is a constant of the unrolled loop: no branch
          if constexpr (kWeight) load_vec<T, V>(resident + (e - begin), w);
          if constexpr (kBias)
            load_vec<T, V>(resident + (kWeight ? kResident : 0) + (e - begin), b);
        } else {
          if constexpr (kWeight) load_vec<T, V>(weight + e, w, hints.keep);
          if constexpr (kBias) load_vec<T, V>(bias + e, b, hints.keep);
        }
#pragma unroll
        for (int j = 0; j < V; ++j) {
          y[j] = (value(k, j) - mean) * rstd;
          if constexpr (kWeight) y[j] *= w[j];
          if constexpr (kBias) y[j] += b[j];
        }
      } else if constexpr (kOneChannel || S % V == 0) {
        // The whole vector lies in one channel.
        float scale = scale1, offset = offset1;
        if constexpr (!kOneChannel) fold(e, scale, offset);
#pragma unroll
        for (int j = 0; j < V; ++j) y[j] = fmaf(value(k, j), scale, offset);
      } else if constexpr (S >= V) {
        // The group's length is a multiple of V but S is not (7x7 maps): the vector spans at
        // most two channels, those of its first and last elements. Where one vector in about
        // S / V spans two, the second's parameters are loaded only then; on short channels
        // always (on the H100 each ran faster so: GroupNorm on 1001x1001 and on 7x7 maps).
        float scale[2], offset[2];
        fold(e, scale[0], offset[0]);
        const long long next = (e / S + 1) * S;  // the first element of the next channel
        if constexpr (S > 16 * V) {
          scale[1] = scale[0], offset[1] = offset[0];
          if (e + V > next) fold(next, scale[1], offset[1]);
        } else {
          fold(e + V - 1, scale[1], offset[1]);
        }
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const int c = e + j < next ? 0 : 1;
          y[j] = fmaf(value(k, j), scale[c], offset[c]);
        }
      } else {
        // Channels shorter than a vector: each element folds its own channel's parameters.
#pragma unroll
        for (int j = 0; j < V; ++j) {
          float scale, offset;
          fold(e + j, scale, offset);
          y[j] = fmaf(value(k, j), scale, offset);
        }
      }
      store_vec<T, V>(out + e, y, hints.stream);
    }
  }
};

}  // namespace normjit
