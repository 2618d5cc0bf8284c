// The structural floor of a row backward (an experiment, not part of normjit): kernels that move
// exactly the bytes of a bf16 RMSNorm or LayerNorm backward over [rows, H] (read x and dy, write
// dx; the column sums dweight (and dbias) reduced over every row, deterministically) and do the
// least arithmetic that keeps each step's dependency:
//   ROWSUMS  0: dx = x + dy (no row reduction); 1 or 2: each row's sums of x * dy (and dy) over
//            the CTA, then dx from them (a row's dx waits on its whole row, as the backward's).
//   COLSUMS  0: no column sums; 1 or 2: each CTA's partial sums of x * dy (and dy) over its rows
//            in registers, written as [grid, H] f32, a grid barrier, then the final sum over the
//            CTAs in order, its columns spread over every thread of the grid (CTA-minor).
// A CTA takes the rows b, b + grid, ... and holds the next row's words in registers while it
// works on the current one (the loads of row r + grid issued before row r's arithmetic).
// Built by scripts/experiments/backward_floor.sh into a shared library that
// scripts/experiments/backward_floor.py drives through ctypes with PyTorch's buffers and stream.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kVec = 8;  // bf16 values a 16-byte word

__device__ inline void unpack(const uint4& w, float (&v)[kVec]) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

__device__ inline uint4 pack(const float (&v)[kVec]) {
  uint4 w;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&w);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  return w;
}

template <int THREADS>
__device__ inline float2 block_sum(float2 v, float2* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
  }
  constexpr int kWarps = THREADS / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // the previous row's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float2 s = make_float2(0.f, 0.f);
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    s.x += scratch[w].x;
    s.y += scratch[w].y;
  }
  return s;
}

__device__ inline unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The grid barrier: the CTA's writes released, it arrives and waits for every CTA of this launch
// (target = launches so far x grid: the counter is never reset).
__device__ inline void grid_barrier(unsigned* counter, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    while (load_acquire(counter) < target) __nanosleep(32);
  }
  __syncthreads();
}

// Row r's words of x and dy that this thread takes (kWords of them, THREADS apart).
template <int H, int THREADS>
__device__ inline void load_row(const uint4* __restrict__ x, const uint4* __restrict__ dy, int r,
                                uint4 (&wx)[H / kVec / THREADS], uint4 (&wd)[H / kVec / THREADS]) {
#pragma unroll
  for (int j = 0; j < H / kVec / THREADS; ++j) {
    const size_t at = size_t(r) * (H / kVec) + j * THREADS + threadIdx.x;
    wx[j] = x[at];
    wd[j] = dy[at];
  }
}

template <int N>
__device__ inline void copy_words(const uint4 (&from)[N], uint4 (&to)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) to[j] = from[j];
}

template <int H, int THREADS, int ROWSUMS, int COLSUMS>
__global__ void __launch_bounds__(THREADS)
    row_floor(const uint4* __restrict__ x, const uint4* __restrict__ dy, uint4* __restrict__ dx,
              float* __restrict__ partial, float* __restrict__ dw, unsigned* counter,
              unsigned target, int rows) {
  constexpr int kWords = H / kVec / THREADS;  // 16-byte words a thread takes of a row
  static_assert(kWords * kVec * THREADS == H, "H must be a multiple of 8 x THREADS");
  constexpr int kRowWords = H / kVec;
  __shared__ float2 scratch[THREADS / 32];
  float acc[COLSUMS > 0 ? COLSUMS : 1][kWords][kVec];
#pragma unroll
  for (int c = 0; c < (COLSUMS > 0 ? COLSUMS : 1); ++c)
#pragma unroll
    for (int j = 0; j < kWords; ++j)
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[c][j][e] = 0.f;

  const int grid = gridDim.x;
  uint4 nx[kWords], nd[kWords];
  int r = blockIdx.x;
  if (r < rows) load_row<H, THREADS>(x, dy, r, nx, nd);
  for (; r < rows; r += grid) {
    uint4 cx[kWords], cd[kWords];
    copy_words(nx, cx);
    copy_words(nd, cd);
    const int next = r + grid;
    if (next < rows) load_row<H, THREADS>(x, dy, next, nx, nd);
    float xv[kWords][kVec], dv[kWords][kVec];
    float2 s = make_float2(0.f, 0.f);
#pragma unroll
    for (int j = 0; j < kWords; ++j) {
      unpack(cx[j], xv[j]);
      unpack(cd[j], dv[j]);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        s.x += xv[j][e] * dv[j][e];
        s.y += dv[j][e];
        if (COLSUMS >= 1) acc[0][j][e] += xv[j][e] * dv[j][e];
        if (COLSUMS >= 2) acc[COLSUMS - 1][j][e] += dv[j][e];
      }
    }
    float a = 1.f, b = 0.f;
    if (ROWSUMS > 0) {
      const float2 t = block_sum<THREADS>(s, scratch);
      a = t.x * (1.f / H);
      b = ROWSUMS > 1 ? t.y * (1.f / H) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kWords; ++j) {
      float o[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        o[e] = ROWSUMS > 0 ? dv[j][e] - xv[j][e] * a - b : xv[j][e] + dv[j][e];
      dx[size_t(r) * kRowWords + j * THREADS + threadIdx.x] = pack(o);
    }
  }
  // Each CTA's partial sums, [COLSUMS][grid][H] f32.
  if (COLSUMS == 0) return;
#pragma unroll
  for (int c = 0; c < COLSUMS; ++c)
#pragma unroll
    for (int j = 0; j < kWords; ++j) {
      float4* p = reinterpret_cast<float4*>(partial + (size_t(c) * grid + blockIdx.x) * H +
                                            (j * THREADS + threadIdx.x) * kVec);
      p[0] = make_float4(acc[c][j][0], acc[c][j][1], acc[c][j][2], acc[c][j][3]);
      p[1] = make_float4(acc[c][j][4], acc[c][j][5], acc[c][j][6], acc[c][j][7]);
    }
  if (counter == nullptr) return;  // two launches: final_sum sums the partials
  grid_barrier(counter, target);
  // The final sums, CTA-minor: thread t of CTA b takes column (t x grid + b) and its strides.
  const int total = COLSUMS * H;
  for (int k = threadIdx.x * grid + blockIdx.x; k < total; k += grid * THREADS) {
    const int c = k / H, col = k % H;
    const float* p = partial + size_t(c) * grid * H + col;
    float sum = 0.f;
    for (int g = 0; g < grid; ++g) sum += __ldcg(p + size_t(g) * H);
    dw[k] = sum;
  }
}

// The two-phase form (session 76's lead), for rows whose x and dy fit in L2: phase 1 takes
// rows as row_floor does but only sums them (x and dy read from DRAM, each row's two sums
// written as a float2); a grid barrier; phase 2 takes column slices of kSlice 16-byte words (16
// columns) over every row: x and dy again (from L2), the row's sums, dx written, and the
// slice's COLSUMS column sums complete within the CTA (its row groups added in a fixed order in
// shared memory): no partials, no final sum over CTAs. kSlice: the slice's words a row (2: one
// 32-byte sector, as session 76 wrote it; 4 and 8 asked in session 77 whether its wider rows of
// a slice read L2 better).
constexpr int kAhead = 4;  // phase 2's steps whose loads are in flight at once

template <int H, int THREADS, int COLSUMS, int kSlice>
__global__ void __launch_bounds__(THREADS)
    two_phase(const uint4* __restrict__ x, const uint4* __restrict__ dy, uint4* __restrict__ dx,
              float2* __restrict__ rowsums, float* __restrict__ dw, unsigned* counter,
              unsigned target, int rows) {
  constexpr int kWords = H / kVec / THREADS;
  constexpr int kRowWords = H / kVec;
  constexpr int kGroups = THREADS / kSlice;  // rows a step of phase 2 covers
  __shared__ float2 scratch[THREADS / 32];
  __shared__ float colsum[COLSUMS][kGroups][kSlice * kVec];
  constexpr int kCols = COLSUMS * kSlice * kVec;  // a slice's column sums
  constexpr int kParts = THREADS / kCols;
  static_assert(kParts * kCols == THREADS && kGroups % kParts == 0, "the final sum's runs");
  __shared__ float partsum[kParts][kCols];
  const int grid = gridDim.x;
  // Phase 1: the rows' sums.
  uint4 nx[kWords], nd[kWords];
  int r = blockIdx.x;
  if (r < rows) load_row<H, THREADS>(x, dy, r, nx, nd);
  for (; r < rows; r += grid) {
    uint4 cx[kWords], cd[kWords];
    copy_words(nx, cx);
    copy_words(nd, cd);
    const int next = r + grid;
    if (next < rows) load_row<H, THREADS>(x, dy, next, nx, nd);
    float2 s = make_float2(0.f, 0.f);
#pragma unroll
    for (int j = 0; j < kWords; ++j) {
      float xv[kVec], dv[kVec];
      unpack(cx[j], xv);
      unpack(cd[j], dv);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        s.x += xv[e] * dv[e];
        s.y += dv[e];
      }
    }
    const float2 t = block_sum<THREADS>(s, scratch);
    if (threadIdx.x == 0)
      rowsums[r] = make_float2(t.x * (1.f / H), COLSUMS > 1 ? t.y * (1.f / H) : 0.f);
  }
  grid_barrier(counter, target);
  // Phase 2: slices of kSlice words; thread t takes word t % kSlice of rows t / kSlice +
  // kGroups x step.
  const int word = threadIdx.x % kSlice, group = threadIdx.x / kSlice;
  constexpr int kSlices = kRowWords / kSlice;
  for (int slice = blockIdx.x; slice < kSlices; slice += grid) {
    float acc[COLSUMS][kVec];
#pragma unroll
    for (int c = 0; c < COLSUMS; ++c)
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[c][e] = 0.f;
    const int col_word = slice * kSlice + word;
    for (int base = group; base < rows; base += kGroups * kAhead) {
      uint4 wx[kAhead], wd[kAhead];
      float2 rs[kAhead];
#pragma unroll
      for (int k = 0; k < kAhead; ++k) {
        const int row = base + k * kGroups;
        if (row < rows) {
          const size_t at = size_t(row) * kRowWords + col_word;
          wx[k] = __ldcg(x + at);
          wd[k] = __ldcg(dy + at);
          rs[k] = __ldcg(rowsums + row);
        }
      }
#pragma unroll
      for (int k = 0; k < kAhead; ++k) {
        const int row = base + k * kGroups;
        if (row < rows) {
          float xv[kVec], dv[kVec], o[kVec];
          unpack(wx[k], xv);
          unpack(wd[k], dv);
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            o[e] = dv[e] - xv[e] * rs[k].x - rs[k].y;
            acc[0][e] += xv[e] * dv[e];
            if (COLSUMS > 1) acc[COLSUMS - 1][e] += dv[e];
          }
          dx[size_t(row) * kRowWords + col_word] = pack(o);
        }
      }
    }
#pragma unroll
    for (int c = 0; c < COLSUMS; ++c)
#pragma unroll
      for (int e = 0; e < kVec; ++e) colsum[c][group][word * kVec + e] = acc[c][e];
    __syncthreads();
    // The slice's columns summed over the row groups in a fixed order: kParts runs of
    // consecutive groups, a thread each, then the runs in order.
    {
      const int k = threadIdx.x % kCols, part = threadIdx.x / kCols;
      const int c = k / (kSlice * kVec), col = k % (kSlice * kVec);
      float sum = 0.f;
#pragma unroll
      for (int g = part * (kGroups / kParts); g < (part + 1) * (kGroups / kParts); ++g)
        sum += colsum[c][g][col];
      partsum[part][k] = sum;
    }
    __syncthreads();
    if (threadIdx.x < kCols) {
      const int c = threadIdx.x / (kSlice * kVec), col = threadIdx.x % (kSlice * kVec);
      float sum = 0.f;
#pragma unroll
      for (int part = 0; part < kParts; ++part) sum += partsum[part][threadIdx.x];
      dw[c * H + slice * kSlice * kVec + col] = sum;
    }
    __syncthreads();
  }
}

// The final sums of two launches: a thread a column of the COLSUMS x H, in CTA order.
__global__ void final_sum(const float* __restrict__ partial, float* __restrict__ dw, int grid,
                          int h, int total) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= total) return;
  const int c = k / h, col = k % h;
  const float* p = partial + size_t(c) * grid * h + col;
  float sum = 0.f;
  for (int g = 0; g < grid; ++g) sum += p[size_t(g) * h];
  dw[k] = sum;
}

__global__ void add_floor(const uint4* __restrict__ x, const uint4* __restrict__ dy,
                          uint4* __restrict__ dx, size_t words) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words;
       i += size_t(gridDim.x) * blockDim.x) {
    float a[kVec], b[kVec];
    unpack(x[i], a);
    unpack(dy[i], b);
#pragma unroll
    for (int e = 0; e < kVec; ++e) a[e] += b[e];
    dx[i] = pack(a);
  }
}

using Kernel = void (*)(const uint4*, const uint4*, uint4*, float*, float*, unsigned*, unsigned,
                        int);

template <int H, int THREADS>
Kernel pick_sums(int rowsums, int colsums) {
  switch (rowsums * 3 + colsums) {
    case 0:
      return row_floor<H, THREADS, 0, 0>;
    case 1:
      return row_floor<H, THREADS, 0, 1>;
    case 2:
      return row_floor<H, THREADS, 0, 2>;
    case 3:
      return row_floor<H, THREADS, 1, 0>;
    case 4:
      return row_floor<H, THREADS, 1, 1>;
    case 5:
      return row_floor<H, THREADS, 1, 2>;
    case 6:
      return row_floor<H, THREADS, 2, 0>;
    case 7:
      return row_floor<H, THREADS, 2, 1>;
    case 8:
      return row_floor<H, THREADS, 2, 2>;
    default:
      return nullptr;
  }
}

// THREADS by H: 16 bf16 values a thread at 4096 and 8192 (two words), 32 at 16384.
Kernel pick(int h, int rowsums, int colsums, int* threads) {
  switch (h) {
    case 4096:
      *threads = 256;
      return pick_sums<4096, 256>(rowsums, colsums);
    case 8192:
      *threads = 512;
      return pick_sums<8192, 512>(rowsums, colsums);
    case 16384:
      *threads = 512;
      return pick_sums<16384, 512>(rowsums, colsums);
    default:
      return nullptr;
  }
}

using TwoPhase = void (*)(const uint4*, const uint4*, uint4*, float2*, float*, unsigned*, unsigned,
                          int);

template <int kSlice>
TwoPhase pick_two_of(int h, int colsums) {
  switch (h * 4 + colsums) {
    case 4096 * 4 + 1:
      return two_phase<4096, 256, 1, kSlice>;
    case 4096 * 4 + 2:
      return two_phase<4096, 256, 2, kSlice>;
    case 8192 * 4 + 1:
      return two_phase<8192, 512, 1, kSlice>;
    case 8192 * 4 + 2:
      return two_phase<8192, 512, 2, kSlice>;
    case 16384 * 4 + 1:
      return two_phase<16384, 512, 1, kSlice>;
    case 16384 * 4 + 2:
      return two_phase<16384, 512, 2, kSlice>;
    default:
      return nullptr;
  }
}

TwoPhase pick_two(int h, int colsums, int slice, int* threads) {
  *threads = h == 4096 ? 256 : 512;
  switch (slice) {
    case 2:
      return pick_two_of<2>(h, colsums);
    case 4:
      return pick_two_of<4>(h, colsums);
    case 8:
      return pick_two_of<8>(h, colsums);
    default:
      return nullptr;
  }
}

}  // namespace

extern "C" {

// CTAs of the row kernel that fit one SM (0: no such kernel or the query failed).
int floor_occupancy(int h, int rowsums, int colsums) {
  int threads = 0, blocks = 0;
  Kernel k = pick(h, rowsums, colsums, &threads);
  if (!k || cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, threads, 0) != cudaSuccess)
    return 0;
  return blocks;
}

// Launches the row kernel; the grid must be resident at once (at most SMs x floor_occupancy)
// when colsums > 0. Returns a cudaError_t.
int floor_rows(int h, int rowsums, int colsums, const void* x, const void* dy, void* dx,
               float* partial, float* dw, unsigned* counter, unsigned target, int rows, int grid,
               void* stream) {
  int threads = 0;
  Kernel k = pick(h, rowsums, colsums, &threads);
  if (!k) return int(cudaErrorInvalidValue);
  k<<<grid, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint4*>(x), static_cast<const uint4*>(dy), static_cast<uint4*>(dx), partial,
      dw, counter, target, rows);
  return int(cudaGetLastError());
}

// The row kernel's partials summed by a second launch (counter null in floor_rows).
int floor_final(const float* partial, float* dw, int grid, int h, int colsums, void* stream) {
  const int total = colsums * h;
  final_sum<<<(total + 255) / 256, 256, 0, static_cast<cudaStream_t>(stream)>>>(partial, dw, grid,
                                                                                h, total);
  return int(cudaGetLastError());
}

// The two-phase kernel: CTAs that fit one SM, and its launch (rowsums: rows float2; the grid
// resident at once; target as floor_rows').
int floor_two_occupancy(int h, int colsums, int slice) {
  int threads = 0, blocks = 0;
  TwoPhase k = pick_two(h, colsums, slice, &threads);
  if (!k || cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, threads, 0) != cudaSuccess)
    return 0;
  return blocks;
}

int floor_two(int h, int colsums, int slice, const void* x, const void* dy, void* dx, void* rowsums,
              float* dw, unsigned* counter, unsigned target, int rows, int grid, void* stream) {
  int threads = 0;
  TwoPhase k = pick_two(h, colsums, slice, &threads);
  if (!k) return int(cudaErrorInvalidValue);
  k<<<grid, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint4*>(x), static_cast<const uint4*>(dy), static_cast<uint4*>(dx),
      static_cast<float2*>(rowsums), dw, counter, target, rows);
  return int(cudaGetLastError());
}

// dx = x + dy over n bf16 values (n a multiple of 8), grid-stride.
int floor_add(const void* x, const void* dy, void* dx, size_t n, int grid, void* stream) {
  add_floor<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const uint4*>(x),
                                                                 static_cast<const uint4*>(dy),
                                                                 static_cast<uint4*>(dx), n / kVec);
  return int(cudaGetLastError());
}
}
