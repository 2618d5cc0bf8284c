#include "generator/plan.hpp"

#include <algorithm>
#include <optional>
#include <sstream>

#include "normjit/error.hpp"

// plan() in two steps: choose_strategy() decides how a problem is computed (which kernel), then
// that strategy's size_*() function decides its shape (threads, vectors, chunks, shared memory).
// Arch facts come from one table (generator/target.cpp); no source text is written here
// (generator/emit.cpp spells the plan as the kernel's configuration).

namespace normjit {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int pow2_ceil(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

// Largest power of two <= max_vec that divides n: the widest access that stays aligned
// at every row start when the base pointer is aligned.
int vector_width(int64_t n, int max_vec) {
  int v = max_vec;
  while (v > 1 && n % v != 0) v /= 2;
  return v;
}

constexpr int kAccessBytes = 16;  // widest global access of x per thread

// ---------------------------------------------------------------------------------------
// kChannels

// f32 values a thread keeps between the two phases: the channels are split over up to 32
// threads so that each holds kChannelValues, smaller unrolled kernels that compile faster; up to
// kRegisterValues where the channels need it (more than 256 f32 or 128 16-bit channels).
constexpr int kChannelValues = 32;
constexpr int kRegisterValues = 64;

// The values a thread of the channel kernel holds with vectors of v elements.
int64_t channel_values(int64_t c, int v) {
  return ceil_div(c, std::min(32, pow2_ceil(ceil_div(c * v, kChannelValues)))) * v;
}

void size_channels(const Problem& pr, KernelPlan& p) {
  const int64_t c = pr.channels;
  const int64_t s = pr.spatial;
  p.vec = vector_width(s, kAccessBytes / size_of(pr.x));
  // Where the values would not fit registers (x read twice), narrower vectors, down to 8 bytes,
  // that let them stay: on the H100 (normjit bench of scripts/specs/channel-read-twice.txt, the
  // rule switched by a throwaway environment variable; performance-notes) f32 RMSNorm and
  // LayerNorm with C 1024 on 14x14 and 28x28 maps ran 10-12% faster with 8-byte accesses held
  // than with 16-byte ones read twice; bf16 with 4-byte accesses 8-14% slower (hence 8 bytes).
  while (p.vec * size_of(pr.x) > 8 && channel_values(c, p.vec) > kRegisterValues &&
         channel_values(c, p.vec / 2) <= kRegisterValues) {
    p.vec /= 2;
  }
  // Split the channels over block_y threads so each keeps at most kChannelValues values.
  p.block_y = std::min(32, pow2_ceil(ceil_div(c * p.vec, kChannelValues)));
  p.block_x = std::clamp(256 / p.block_y, 32, 256);
  // Where a position's channels take 32 threads, 16 positions per CTA (512 threads) rather than
  // 32 when the accesses are vectors (16 of them still coalesce): a CTA of 1024 threads has 64
  // registers a thread, which spilled 64 cached values (`normjit dump --emit resources`), and
  // half as many CTAs per item. On the H100 (normjit bench, the positions per CTA switched by a
  // throwaway environment variable; performance-notes) LayerNorm2d on ConvNeXt's maps (C 192
  // to 512, f32 and bf16) and RMSNorm with C of 512 to 2048 on 8x8 and 16x16 maps ran 5-41%
  // faster, but f32 RMSNorm with C = 2048 on 8x8 (read twice) 3% slower; maps of odd size
  // (scalar accesses, 7x7) ran 2% slower, so they keep 32 where a thread holds at most
  // kChannelValues values. Above that (C over 1024 with scalar accesses) 1024 threads spilled
  // (C 2048 on 7x7: 104 bytes) and 16 positions ran 1.15-1.75x faster (bf16 RMSNorm C 2048 on
  // 7x7: 40.8 -> 23.7 us; LayerNorm2d 44.2 -> 20.8; read twice, C 4096: 42.3 -> 41.0;
  // performance-notes, "Channel forms on small maps").
  const int64_t per_thread = ceil_div(c, p.block_y) * p.vec;
  if (p.block_y == 32 && (p.vec > 1 || per_thread > kChannelValues)) p.block_x = 16;
  p.cached = per_thread <= kRegisterValues;
  p.blocks_per_item = ceil_div(s, int64_t{p.block_x} * p.vec);
  std::ostringstream why;
  why << "reduce over dim 1: each thread owns " << p.vec << " contiguous spatial positions ("
      << p.vec * size_of(pr.x) << "-byte accesses) and " << ceil_div(c, p.block_y) << " of the "
      << c << " channels; " << p.block_y << " threads share a position"
      << (p.cached ? ", values stay in registers (x read once)"
                   : ", too many channels for registers: x is read twice");
  p.why = why.str();
}

// ---------------------------------------------------------------------------------------
// kChannelsSlab

// Small maps of odd size (at most kSlabMaxSpatial positions, where the register kernel reads
// each channel's positions with scalar accesses: 3x3, 7x7, 9x9) on sm_90: an item over a cluster
// of K CTAs, each holding its C/K channels' contiguous [C/K, S] slab of x in shared memory
// (channels_slab.cuh). K is the smallest cluster whose slabs are at most kSlabAimBytes (more,
// smaller CTAs a wave), up to the portable cluster size; an item whose slabs would still exceed
// kSlabMaxBytes (two CTAs an SM) stays with the register kernel. On the H100 (normjit bench of
// scripts/specs/channel-small-maps.txt, performance-notes "Channel forms on small maps") the
// slab ran 1.3-3.2x faster than the register kernel on 7x7, 9x9 and 3x3 maps with C of 1024 and
// more (RMSNorm C 2048 on 7x7, bf16: 23.5 -> 11.4 us) and level (0.98-1.12x) on ConvNeXt's 7x7
// LayerNorm2d, but 0.36-0.87x on 14x14 and 16x16 maps, whose register kernel has vector
// accesses; slabs of 16 KiB rather than 32 ran up to 7% faster on 16-bit LayerNorm2d.
constexpr int64_t kSlabMaxSpatial = 256;
constexpr int64_t kSlabAimBytes = 16 * 1024;
constexpr int64_t kSlabMaxBytes = 96 * 1024;
constexpr int kMaxCluster = 8;
constexpr int kSlabThreads = 256;
// The most values of the slab a thread holds in registers (KernelPlan::slab_held): 52 (bf16
// [32, 2048, 7, 7], 80 registers) ran 7% faster on the H200, 20 to 26 5-8%; 39 (C 1536 at batch
// 8) 2% slower.
constexpr int64_t kSlabMostHeld = 64;

// The cluster size of the slab kernel for the problem, 0 where it does not apply.
int slab_cluster(const Problem& pr, const Target& target) {
  if (!arch_facts(target.sm).clusters || pr.backward || pr.nhwc || !pr.channel_form) return 0;
  if (pr.spatial > kSlabMaxSpatial) return 0;
  if (vector_width(pr.spatial, kAccessBytes / size_of(pr.x)) > 1) return 0;  // vector accesses
  const int64_t item = pr.channels * pr.spatial * size_of(pr.x);
  int fits = 0;
  for (int k = 1; k <= kMaxCluster; k *= 2) {
    // Every CTA owns as many channels, and its slab is whole 16-byte vectors.
    if (pr.channels % k != 0 || item / k % 16 != 0 || item / k > kSlabMaxBytes) continue;
    fits = k;
    if (item / k <= kSlabAimBytes) break;
  }
  return fits;
}

std::string channels_slab(const Problem& pr, const Target& target, KernelPlan& p) {
  const int64_t c = pr.channels, s = pr.spatial;
  p.blocks_per_item = slab_cluster(pr, target);
  p.block_x = kSlabThreads;
  p.block_y = 1;
  p.vec = int(kAccessBytes / size_of(pr.x));
  p.cached = true;
  const int64_t own = c / p.blocks_per_item;
  // G threads per position, each summing every G-th channel of the slab: about one sum per
  // thread of the CTA.
  p.sums_per_position = int(std::clamp<int64_t>(kSlabThreads / s, 1, own));
  // LayerNorm forms y in the sums' layout, each thread at one position (its mean, rstd and shift
  // in registers), and stores it an element at a time, lanes of a warp at consecutive positions;
  // RMSNorm keeps 16-byte vectors along the slab (two factors an element). On the H200 (normjit
  // bench of scripts/specs/slab-modes.txt, performance-notes "The slab kernel of small odd maps")
  // that ran LayerNorm 4-12% faster (with its one exchange, 11-15%), RMSNorm 5-11% slower.
  p.slab_store_vec = pr.op == Op::kLayerNorm ? 1 : p.vec;
  // LayerNorm's threads of the sums' layout read their values of the slab once, into registers,
  // for both sums and y (the same additions in the same order: the same bits). On the H200
  // (normjit bench of scripts/specs/slab-modes.txt, this build beside the one before, 3 rounds;
  // performance-notes "The slab kernel's values in registers ...") that and the relaxed arrive
  // ran ConvNeXt's 7x7 LayerNorm2d at batch 32 (C 768 to 2048) and 1 0.92-0.95x the time, 3x3
  // maps 0.97x, batch 8 of C 1536 1.02x; RMSNorm, whose y is stored in vectors, ran 0-6% slower
  // with its values held and stored in the sums' layout (the knob of slab-knobs.patch).
  const int64_t held = (own + p.sums_per_position - 1) / p.sums_per_position;
  if (p.slab_store_vec == 1 && held <= kSlabMostHeld) p.slab_held = int(held);
  // The slab, then f32: weights and biases of the CTA's channels, G x S partials, and five
  // arrays of S (channels_slab.cuh, slab_smem_bytes).
  p.smem_bytes = int(own * s * size_of(pr.x) + 4 * (2 * own + p.sums_per_position * s + 5 * s));
  std::ostringstream why;
  why << "reduce over dim 1 of a small map (S = " << s << "): each item over a cluster of "
      << p.blocks_per_item << " CTAs, each copying the contiguous [" << own << ", " << s
      << "] slab of its channels (" << own * s * size_of(pr.x)
      << " bytes) into shared memory (one bulk copy) and exchanging per-position sums with the "
         "others through distributed shared memory ("
      << (pr.op == Op::kLayerNorm ? "once: each CTA's mean and M2" : "once") << "); y written "
      << (p.slab_store_vec == 1
              ? std::string("an element a store from the sums' layout (a warp's lanes at "
                            "consecutive positions)")
              : "in " + std::to_string(kAccessBytes) + "-byte vectors");
  if (p.slab_held > 0) why << "; each thread's " << p.slab_held << " values held in registers";
  return why.str();
}

// ---------------------------------------------------------------------------------------
// Row strategies: what they share

constexpr int kTeamValues = 16;     // f32 values per thread a row team aims for
constexpr int kMaxTeamValues = 32;  // values per thread a row team may hold
constexpr int kMaxTeam = 1024;      // threads per row team
// The split kernel's CTA: `threads` threads, `per_sm` of them resident an SM, 1024 threads an SM
// in every shape, so a thread holds the same values (64 registers) in each. The chunk of one SM
// is the same whatever the shape; smaller CTAs give a row more of them, each a pipeline of its
// own: while one waits on its row's barrier or runs its epilogue, the SM's others load and store.
struct SplitCta {
  int threads = 1024;
  int per_sm = 1;
};
// The stream kernel's CTA and the split kernel's where smaller CTAs would cut a row too finely:
// one of 1024 threads an SM, the most one SM's registers hold, so a row needs the fewest CTAs.
constexpr SplitCta kSplitCta{1024, 1};
constexpr int kSplitThreads = kSplitCta.threads;
constexpr int kSplitBlocksPerSm = kSplitCta.per_sm;
// The split kernel takes the smallest of these CTAs whose layout cuts a row into at most
// kSmallCtaMostChunks of them (choose_split_layout), else kSplitCta. Each row's exchange merges
// one partial a CTA and its barrier waits for the row's last CTA. On the H200 (normjit bench
// through scripts/ab_bench.py, two rounds, scripts/specs/split-cta.txt and
// groupnorm-silu-vision.txt; performance-notes, "The split kernel's CTA ..."):
// - 256 x 4 ran GroupNorm on SD UNet and VAE maps (16 to 64 CTAs a group) 4-26% faster, f32
//   included, and LayerNorm and RMSNorm rows of 64 Ki to 1 Mi elements (in 256 x 4 or 512 x 2)
//   3-12% faster;
// - the VAE's [1, 256, 512, 512] (128 CTAs of 256 a group) ran 2% slower in them, 7% faster in
//   512 x 2 (64 a group); the 16-bit GroupNorm seeds in 512 x 2 level to 3% faster;
// - rows of 128 or more CTAs of 512 ran slower in them: the f32 GroupNorm seed 8-9%, the bf16
//   LayerNorm seed 8%.
// On the H100 (3352 GB/s; scripts/ab_bench.py, 3 rounds, scripts/specs/dram-rules-h100.txt and
// half-cta-h100.txt, the engine's bandwidth set by NORMJIT_DRAM_GBPS; performance-notes,
// "Session 73") 512 x 2 ran 14 of the 17 rows that take it faster than 1024 x 1: LayerNorm and
// RMSNorm rows of 786432 to 2 Mi elements 0.87-0.99x the time, f32 GroupNorm groups of 1 Mi
// 0.96-0.98x, 16-bit groups of 2 Mi with SiLU (the VAE's 512x512 map, the f16 seed) 0.95-0.96x,
// the plain VAE map 0.95x; but the plain 16-bit GroupNorm seeds 1.01-1.04x (their 896 groups
// pipeline through the stage of one CTA an SM). So plain 16-bit GroupNorm takes 512 x 2 only
// with DRAM of at least kHalfCtaMinDramGbps (the H200's 4814 GB/s: the seeds level to 3% faster
// there), everything else on every GPU. 256 x 4 takes rows of at most 64 CTAs of 256 (16 of
// 1024) on every GPU: on the H100 too (scripts/specs/split-cta-h100.txt, 17 such rows, 2 rounds;
// performance-notes, "Session 73") 512 x 2 ran them 1.00-1.18x the time and 1024 x 1 1.01-1.22x.
constexpr SplitCta kSmallSplitCtas[] = {{256, 4}, {512, 2}};
constexpr int64_t kSmallCtaMostChunks = 64;
constexpr int kHalfCtaMinDramGbps = 4000;
bool half_ctas_pay(const Problem& pr, const Target& target) {
  const bool plain_16bit_groups =
      pr.op == Op::kGroupNorm && size_of(pr.x) == 2 && pr.activation == Activation::kNone;
  return !plain_16bit_groups || target.dram_gbps >= kHalfCtaMinDramGbps;
}
constexpr int kSplitValues = 32;  // f32 values per thread of the split kernel
// Vectors per thread of the split kernel, at most: each costs registers beyond its values (its
// address and bounds, its parameters), and with narrow vectors (odd or 2-aligned rows: 32 of
// them at 32 values) ptxas spilled hundreds of bytes to local memory, which the shared memory
// leaves little L1 for (`normjit dump --emit resources`). GroupNorm vectors that may span two
// channels cost more (two channels' parameters), so half as many. On the H100 (`normjit
// bench`, the cap switched by a throwaway environment variable: 32, 16, 12, 8) LayerNorm rows
// of 65537 and 1000001 f32 elements and RMSNorm rows of 1000003 ran about twice as fast at 16
// as at 32, rows of 100002 the same, and GroupNorm groups of 6 x 8191 fastest at 8.
constexpr int kSplitMaxVectors = 16;
// The fewest elements a vector whose row the split kernel stages in shared memory (split_layout).
constexpr int kSplitStageMinVector = 4;
constexpr int kSplitMaxSpanningVectors = 8;
// The batch GroupNorm's split plans are sized for (N is not part of the kernel): two items, as
// diffusion UNets run with classifier-free guidance; one item takes the same waves or fewer.
constexpr int64_t kGroupWaveItems = 2;
constexpr int kStreamVectors = 4;  // vectors per thread in flight in each of its passes

// 16-bit values are held packed two to a register (row_common.cuh), so the same registers
// hold twice as many: half the CTAs per row, twice the rows in flight.
bool packed(const Problem& pr, int vec) { return size_of(pr.held()) == 2 && vec >= 2; }
int split_values(const Problem& pr, int vec) { return packed(pr, vec) ? 64 : kSplitValues; }
// Threads a row team of `values` values per thread takes for `vectors` vectors, and the vector
// slots it has (team x vectors per thread; those past the row's end are idle).
int team_for(int64_t vectors, int values, int vec) {
  return std::min<int64_t>(kMaxTeam, pow2_ceil(ceil_div(vectors, std::max(1, values / vec))));
}
int64_t team_slots(int64_t vectors, int values, int vec) {
  const int team = team_for(vectors, values, vec);
  return team * ceil_div(vectors, team);
}

// A row team's thread aims for twice as many 16-bit values, held packed in the same
// registers: half the threads per row, so twice the rows in flight per SM (on the H100 the
// bf16 LLM rows of 4096 to 16384 elements ran faster that way; f32 the same). Rows of at most
// kShortPackedRow 16-bit elements aim for kTeamValues instead, twice the threads per row, where
// that leaves no more vector slots idle: on the H100 (normjit bench of bf16 RMSNorm, LayerNorm
// and add + RMSNorm rows, 16 to 4096 tokens, the values switched by a throwaway environment
// variable) rows of 1024 and 2048 ran 3-12% faster with 16 values per thread, rows of 4096
// the same and of 8192 slower (LayerNorm 4096 x 8192: 49.8 -> 53.9 us); rows of 768 ran 11%
// slower, their 96 vectors filling a team of 32 threads at 32 values but leaving a quarter of
// a team of 64 idle at 16.
constexpr int64_t kShortPackedRow = 2048;
// LayerNorm with a residual of x's 16-bit dtype, rows of kResidualLayerNormRows elements, aims for
// kTeamValues as well (teams of 256 to 512, the parameters then held with x), in both batch
// classes (a row's bits do not depend on the launch's rows). On the H200 (scripts/ab_bench.py, 3
// rounds; performance-notes, "add + LayerNorm in teams of 16 values") the many-rows class ran add
// + LayerNorm 1024 x 4096 in 0.89x the time (its 71 registers at 128 threads leave 7 CTAs an SM:
// 924 of 1024 rows in the first round of CTAs), 1024 and 4096 x 8192 in 0.98x, 4096 and 16384 x
// 4096 in 1.00-1.01x, plain LayerNorm rows in 1.11-1.14x (not taken); with the rule
// (scripts/specs/add-layernorm-teams.txt) 16384 x 8192 0.98x, 1 to 384 tokens 0.97-1.01x.
constexpr int64_t kResidualLayerNormRows[2] = {4096, 8192};
// f32 rows (f32 x, one value a register) of at most kShortF32Row elements in 16-byte accesses aim
// for half of kTeamValues where that leaves no more vector slots idle: twice the threads per
// row. In both batch classes, so that a row's reduction (its team) and bits do not depend on the
// launch's rows. On the H200 (performance-notes, "f32 rows of 1024 in teams of 8 values";
// scripts/ab_bench.py with scripts/specs/row-f32-short-teams.txt) LayerNorm rows of 1024 ran
// 0.97x the time at 6304 and 8192 rows and 0.88x at 1000 (with an f32 residual 0.98x), RMSNorm
// 0.99x, rows of 512 0.99x; rows of 768 and 2048, which the rule leaves alone, ran 21% and up to
// 4% slower in teams of 8 values.
constexpr int64_t kShortF32Row = 1024;
int team_values(const Problem& pr, int vec) {
  if (!packed(pr, vec)) {
    const int64_t vectors = ceil_div(pr.row_length, vec);
    const bool shorter =
        pr.op != Op::kGroupNorm && size_of(pr.x) == 4 && vec * 4 == kAccessBytes &&
        pr.row_length <= kShortF32Row &&
        team_slots(vectors, kTeamValues / 2, vec) <= team_slots(vectors, kTeamValues, vec);
    return shorter ? kTeamValues / 2 : kTeamValues;
  }
  if (pr.op == Op::kGroupNorm) return 2 * kTeamValues;  // groups: not measured with 16
  const int64_t vectors = ceil_div(pr.row_length, vec);
  const bool residual_layernorm = pr.op == Op::kLayerNorm && pr.residual == pr.x &&
                                  pr.row_length >= kResidualLayerNormRows[0] &&
                                  pr.row_length <= kResidualLayerNormRows[1];
  if (residual_layernorm) return kTeamValues;
  const bool shorter =
      pr.row_length <= kShortPackedRow &&
      team_slots(vectors, kTeamValues, vec) <= team_slots(vectors, 2 * kTeamValues, vec);
  return shorter ? kTeamValues : 2 * kTeamValues;
}

// Threads per CTA of the row kernel (rows per CTA = this / the team): CTAs of one row where a
// team has 128 threads spread a launch of few rows over more SMs. On the H100 (the sweep above)
// CTAs of 128 threads ran the trailing forms' rows of 16 and 128 tokens 5-12% faster than CTAs of
// 256, and most larger launches the same or up to 3% faster; one row, add + RMSNorm 1024 x 4096,
// 6% slower (its waves: 1024 CTAs at 5 per SM fill 1.55 waves where 512 at 2 fill 1.94).
// GroupNorm's rows (groups) keep 256: not measured with 128.
constexpr int kRowCtaThreads = 128;
constexpr int kGroupRowCtaThreads = 256;

// The widest access that divides the row, so every row starts aligned. A groupnorm vector
// stays within one channel (one weight and bias) where S allows more than one element;
// where S is odd it may span channels (the group, CG channels of S, may still be a
// multiple), and the kernel takes each element's parameters past a channel's end
// (row_common.cuh). On the H100 that ran GroupNorm on 7x7, 3x3 and 1001x1001 maps faster
// than scalar accesses, and on 25x38 maps (S = 950) slower than pairs within a channel.
int row_vector_width(const Problem& pr) {
  const bool group = pr.op == Op::kGroupNorm;
  const int max_vec = kAccessBytes / size_of(pr.x);
  return vector_width(group && pr.spatial % 2 == 0 ? pr.spatial : pr.row_length, max_vec);
}

// Co-resident CTAs the split and stream kernels are built for.
int64_t split_capacity(const Target& target, SplitCta cta = kSplitCta) {
  return int64_t{cta.per_sm} * target.sm_count;
}

// Dynamic shared memory one split CTA may use with cta.per_sm of them per SM: the SM's share
// less 1 KiB the driver reserves per CTA and 1 KiB for the kernel's static arrays.
int64_t split_smem_budget(const Target& target, SplitCta cta) {
  return int64_t{arch_facts(target.sm).smem_per_sm_kib} * 1024 / cta.per_sm - 2048;
}

int params_of(const Problem& pr) { return pr.weight + pr.bias; }

// How the split kernel holds a row: its CTA, `values` per thread over P = `chunks` CTAs, whether
// the next row is staged in shared memory, and how many of each thread's vectors keep their
// parameters (LayerNorm, RMSNorm with weight) in the rest of it for the whole launch, so
// each row reads only the others' from memory.
struct SplitLayout {
  SplitCta cta;
  int values = 0;
  int64_t vectors = 0;  // per thread
  int64_t chunks = 0;
  bool can_stage = false;
  bool narrow = false;  // the stage would fit, but the vectors are too narrow to gain from it
  bool staged = false;
  int64_t resident = 0;
  int64_t smem_bytes = 0;
  int64_t row_bytes = 0;  // a row moves x, y and the parameters that are not resident
};

SplitLayout split_layout(const Problem& pr, const Target& target, int vec, int values,
                         SplitCta cta) {
  const int64_t h = pr.row_length;
  const int64_t threads = cta.threads;
  const int size = size_of(pr.x);
  const int param_size = size_of(pr.param);
  SplitLayout l;
  l.cta = cta;
  l.values = values;
  // P: the fewest CTAs whose threads hold the row at `values` each; then the fewest vectors
  // per thread that still fit the row in P CTAs, so that the chunks are even. (A row a little
  // longer than one chunk would otherwise leave a full CTA and a sliver, and each row's
  // exchange waits for the full one.)
  const int64_t row_vectors = ceil_div(h, int64_t{vec});
  const bool spanning = pr.op == Op::kGroupNorm && pr.spatial % vec != 0;
  const int most = spanning ? kSplitMaxSpanningVectors : kSplitMaxVectors;
  l.chunks = ceil_div(row_vectors, threads * std::clamp(values / vec, 1, most));
  l.vectors = ceil_div(row_vectors, l.chunks * threads);
  l.chunks = ceil_div(row_vectors, l.vectors * threads);
  if (pr.op == Op::kGroupNorm) {
    // GroupNorm's rows are the N x G groups, G known: fewer vectors per thread (more CTAs per
    // row) where that runs kGroupWaveItems items in fewer waves of co-resident rows, or in as
    // many with smaller chunks. Each wave costs several microseconds beyond its bytes (its
    // loads' latency, the exchange and its barrier): on the H100 (normjit bench, the CTAs per
    // row switched by a throwaway environment variable; performance-notes) G = 32 groups of
    // 40960 f16 elements ran 12.8 -> 11.2 us for N = 2 at 2 CTAs per row (one wave) and 14.6
    // at 4 (two waves); 163840-element groups 31.9 -> 25.7 us at 4 (two even waves of 33 and 31
    // rows, where 3 gave 44 and 20); one item ran faster at each choice.
    const int64_t capacity = split_capacity(target, cta);
    const int64_t rows = kGroupWaveItems * pr.groups;
    const auto waves = [&](int64_t chunks) { return ceil_div(rows, capacity / chunks); };
    int64_t best = l.chunks;
    for (int64_t v = l.vectors - 1; v >= 1; --v) {
      const int64_t chunks = ceil_div(row_vectors, v * threads);
      if (chunks > capacity) break;
      if (waves(chunks) <= waves(best)) best = chunks;
    }
    l.vectors = ceil_div(row_vectors, best * threads);
    l.chunks = ceil_div(row_vectors, l.vectors * threads);
  }
  // Stage the next row in shared memory when cp.async can move the vectors (4-16 bytes)
  // and cta.per_sm CTAs still fit the SM's shared memory. The stage holds x: a row
  // with a residual is not staged (h = x + residual is formed as it loads). Nor is a row of
  // vectors of 1 or 2 elements (odd rows: f32 scalars and pairs, 16-bit pairs): loaded
  // straight into registers, all 11 such rows measured ran faster (H200, normjit bench, two
  // and three rounds; performance-notes): f32 rows of 65537 to 1000003 elements 2-25%, f16/bf16
  // rows of 65538 and 131074 4-9%, GroupNorm on f16 63 x 63 and f32 255 x 255 maps 5-7%.
  // Vectors of 4 elements were mixed (16-bit: LayerNorm of 65540 bf16 33% and GroupNorm on
  // f16 255 x 255 maps 18% slower, RMSNorm of 131076 bf16 10% faster) and of 8 slower (the SD
  // VAE's GroupNorm 39%): they keep the stage.
  const int64_t budget = split_smem_budget(target, cta);
  const int64_t stage_bytes = threads * l.vectors * vec * size;
  const bool copy_async = target.sm >= 80;
  const bool stage_fits = copy_async && vec * size >= 4 && stage_bytes <= budget && !pr.residual;
  l.narrow = stage_fits && vec < kSplitStageMinVector;
  l.can_stage = stage_fits && !l.narrow;
  const int params = params_of(pr);
  const int64_t per_vector = threads * vec * param_size * params;
  const bool group = pr.op == Op::kGroupNorm;
  const auto resident_in = [&](int64_t smem) {
    return copy_async && vec * param_size >= 4 && !group && params > 0
               ? std::min(l.vectors, smem / per_vector)
               : 0;
  };
  const auto row_bytes = [&](int64_t resident) {
    return 2 * h * size + (l.vectors - resident) * per_vector * l.chunks;
  };
  const int64_t staged_resident = l.can_stage ? resident_in(budget - stage_bytes) : 0;
  const int64_t unstaged_resident = resident_in(budget);
  // Staging hides each row's exchange behind the next row's load, but its shared memory is
  // then not free for parameters. When one row fills the chip (a single slot) and staging
  // would leave a row moving over a quarter more bytes (LayerNorm f32: most of its 32 MB of
  // parameters streamed again for every row), going without the stage is faster (measured
  // on the H100 with normjit bench; docs/performance-notes.md).
  const bool one_slot = split_capacity(target, cta) / l.chunks == 1;
  l.staged = l.can_stage &&
             !(one_slot && 4 * row_bytes(staged_resident) > 5 * row_bytes(unstaged_resident));
  l.resident = l.staged ? staged_resident : unstaged_resident;
  l.smem_bytes = (l.staged ? stage_bytes : 0) + l.resident * per_vector;
  l.row_bytes = row_bytes(l.resident);
  return l;
}

// The split kernel's layout for a problem in one CTA shape: the full chunk, or, for 16-bit rows
// with parameters per element (LayerNorm), half the values per thread and twice the CTAs per
// row, when that keeps all the parameters on chip and the full chunk would leave a row moving
// over a quarter more bytes. On the H100 that ran the bf16 LayerNorm seed and bf16/f16
// LayerNorm rows of 64 Ki to 4 Mi elements faster, and RMSNorm with a weight (a quarter of its
// parameters streamed) slower (normjit bench; performance-notes).
SplitLayout split_layout_in(const Problem& pr, const Target& target, int vec, SplitCta cta) {
  SplitLayout layout = split_layout(pr, target, vec, split_values(pr, vec), cta);
  if (layout.values > kSplitValues && params_of(pr) > 0 && pr.op != Op::kGroupNorm) {
    const SplitLayout half = split_layout(pr, target, vec, layout.values / 2, cta);
    if (half.chunks <= split_capacity(target, cta) && half.resident == half.vectors &&
        4 * layout.row_bytes > 5 * half.row_bytes) {
      layout = half;
    }
  }
  return layout;
}

// The split kernel's layout: in the smallest CTA that cuts a row into at most
// kSmallCtaMostChunks with no more vectors per thread than kSplitCta's layout (the same work a
// thread, cut into more CTAs), else in kSplitCta (512 x 2 for plain 16-bit GroupNorm only with
// DRAM of at least kHalfCtaMinDramGbps: half_ctas_pay). Odd f32 LayerNorm rows (1- and 2-element
// vectors) need more vectors a thread in CTAs of 256 to keep their chunks even (65537: 16 in 17
// CTAs, where 1024 threads take 13 in 5), which leaves fewer of their parameters resident; on the
// H200 they ran 17-25% slower so.
SplitLayout choose_split_layout(const Problem& pr, const Target& target, int vec) {
  const SplitLayout full = split_layout_in(pr, target, vec, kSplitCta);
  for (const SplitCta cta : kSmallSplitCtas) {
    if (cta.per_sm == 2 && !half_ctas_pay(pr, target)) continue;
    const SplitLayout small = split_layout_in(pr, target, vec, cta);
    if (small.chunks <= kSmallCtaMostChunks && small.vectors <= full.vectors) return small;
  }
  return full;
}

// ---------------------------------------------------------------------------------------
// The choice of strategy

bool row_backward_holds(const Problem& pr, const Target& target);  // kRowBackward below

Strategy choose_strategy(const Problem& pr, const Target& target) {
  if (pr.backward) {
    if (pr.op == Op::kGroupNorm) {
      return pr.nhwc ? Strategy::kGroupNhwcBackward : Strategy::kGroupBackward;
    }
    if (pr.channel_form) return Strategy::kChannelsBackward;
    // Rows one team holds in registers; longer ones split over CTAs.
    return row_backward_holds(pr, target) ? Strategy::kRowBackward : Strategy::kRowSplitBackward;
  }
  if (pr.channel_form) {
    return slab_cluster(pr, target) > 0 ? Strategy::kChannelsSlab : Strategy::kChannels;
  }
  // Channels last: GroupNorm has its own kernel; the channel forms are rows of C (below).
  if (pr.nhwc && pr.op == Op::kGroupNorm) return Strategy::kGroupNhwc;
  if (pr.row_length <= int64_t{kMaxTeam} * kMaxTeamValues) return Strategy::kRowRegisters;
  const SplitLayout layout = choose_split_layout(pr, target, row_vector_width(pr));
  return layout.chunks <= split_capacity(target, layout.cta) ? Strategy::kRowSplit
                                                             : Strategy::kRowStream;
}

// ---------------------------------------------------------------------------------------
// Each row strategy's sizing

void size_rows_common(const Problem& pr, KernelPlan& p) {
  const bool group = pr.op == Op::kGroupNorm;
  p.vec = row_vector_width(pr);
  p.param_vec = group ? 1 : p.vec;
  p.rows_per_item = group ? pr.groups : 1;
}

// Registers (32-bit words) a thread of the row kernel may spend on its parameters to load them
// with x rather than at the store: the store waits for each vector's parameters before storing
// it, and its stores keep the next vector's loads behind them (vec.cuh's stores are ordered),
// so loaded there they cost a memory latency per vector on every row: the time of a whole
// launch for a few rows (decode). 32 words hold a bf16 LayerNorm's weight and bias at 32
// values per thread.
constexpr int kParamsAheadWords = 32;
// With many rows the same registers are rows in flight (fewer CTAs fit an SM): parameters are
// loaded with x only where the loads in flight together take at most this many: the slice,
// twice over with a residual (x and the residual both arrive before h is formed), and the
// parameters. On the H100 (normjit bench, a throwaway switch, two rounds) counting the residual
// ran add + RMSNorm bf16 1024 x 4096 7% faster (72 registers, 7 CTAs an SM, to 55 and 9:
// the 1024 rows in one wave) and 1024 x 8192 2% faster; 1 to 128 and 4096 tokens the same.
// 40, not 32: on the H200 (scripts/ab_bench.py, scripts/specs/row-params-at-the-store.txt, the
// bound switched by a throwaway build, two rounds; performance-notes, "Parameters with x in
// f32 rows of 768") the f32 LayerNorm rows of 768 (ViT-B, BERT-base: 12 + 24 words) ran 5%
// faster with theirs loaded with x, 35 registers to 56; the 25 rows measured that load theirs
// at the store otherwise ran the same at 40 (0.99-1.01x). At 48 and 64 some gained (f32 weights
// beside bf16 rows of 8192: 2-7%), others lost (add + RMSNorm 1024 x 4096 6%, f32 weights
// beside rows of 16384 at 1024 tokens 20%).
constexpr int kParamsAheadWordsManyRows = 40;
// 16-bit rows in 16-byte accesses in a team of kWideRowsTeam threads (rows of 4097 to 8192
// elements, 32 values a thread: 16 words of slice) with f32 parameters hold up to this many: an
// f32 weight of RMSNorm (32 words; bf16 x with an f32 weight, as autocast and many checkpoints
// have it). On the H200 (scripts/ab_bench.py, three rounds; performance-notes, "The few-rows class
// of teams of 128 reaches 512 rows") RMSNorm of bf16 rows of 8192 with an f32 weight ran 0.89x
// the time at 768 tokens, 0.94-0.95x at 1024, 0.98-0.99x at 4096 and 16384 and 1.02x at 512
// (f16 [4096, 8192] 0.98x). The same 48 words lost for 16-bit parameters beside those rows
// (LayerNorm's weight and bias: 1.05-1.08x at 448 and 512 rows, 1.02-1.03x at 4096 and 16384;
// add + RMSNorm 1.08-1.09x at 448 and 512, 1.01x at 4096 and 16384), in other teams (f32 weights
// beside rows of 4096, 128 threads: 1.04x; of 16384, 512 threads: 1.20x) and for f32 LayerNorm
// rows of 4096 (1.02x), which keep 40.
constexpr int kParamsAheadWordsWideRows = 48;
constexpr int kWideRowsTeam = 256;
// Rows of scalar accesses (odd lengths) in a team of this many threads (rows of 4097 to 8192
// elements at 16 values a thread) load their parameters at the store in launches of many rows,
// whatever their words: held with x, their parameters took the row kernel from 31-32 registers
// to 37-54, two or three CTAs of 512 threads an SM instead of four. On the H200
// (scripts/ab_bench.py, scripts/specs/rows-odd-values.txt and rows-odd-values-2.txt, the bound
// switched by a throwaway build, two rounds; performance-notes, "Odd rows' parameters at the
// store") rows of 4097 ran 0.76x the time (LayerNorm bf16), 0.80x (LayerNorm f32) and 0.91-0.92x
// (RMSNorm bf16, f16), [8192, 4097] 0.74x and rows of 4501 0.77x (LayerNorm bf16) and 0.98x
// (RMSNorm f16); in teams of 256 threads (rows of 2049 to 4096) some gained (LayerNorm bf16 of
// 2049 and 3001: 0.93x) and some lost (RMSNorm bf16 of 2301: 1.12x, LayerNorm f32 of 2049:
// 1.02x), in teams of 64 and 128 (rows of 1023 and 1025) they ran 1.00-1.10x, so they keep the
// rule above. Teams of 1024 (odd rows over 8192) and rows with a residual were not measured and
// keep it too. At 512 to 2048 rows (scalar rows of 4097, scripts/specs/rows-odd-crossover.txt)
// the rule ran 0.99-1.00x, the parameters with x 1.03-1.27x.
constexpr int kScalarRowsParamsAtTheStoreTeam = 512;
// 16-bit LayerNorm rows of scalar accesses in a team of half as many threads (2049 to 4095
// elements) load theirs at the store too, but only in launches of more than
// kNarrowFewRows rows: their few-rows class (parameters with x) reaches that far. On the
// H200 (scripts/ab_bench.py, rows-odd-teams-256.txt and rows-odd-crossover.txt, the bound switched
// by a throwaway build, three rounds; performance-notes, "Odd rows: where the batch decides")
// bf16 rows of 2049 and 3001 ran 0.92-0.98x the time at 1024 to 4096 rows and 0.86x at
// [16384, 3001], f16 0.93-1.00x, but 1.09-1.13x at 512 rows, a launch the parameters-with-x plan
// holds in one wave. RMSNorm's rows (one parameter: 0.97-1.12x) and f32 LayerNorm's (1.02-1.12x)
// keep the rule above.
constexpr int kScalarLayerNormParamsAtTheStoreTeam = kScalarRowsParamsAtTheStoreTeam / 2;
// The few-rows class of those rows, and of every row kernel of at most kNarrowTeam threads a row
// (rows of at most 4096 16-bit or 2048 f32 elements in 16-byte accesses), reaches
// kNarrowFewRows rows, that of the kernels of kWideRowsTeam threads (16-bit rows of 4097 to 8192
// elements, f32 rows of 2049 to 4096) kWideFewRows: about the rows a launch holds in one wave of
// CTAs with its parameters loaded with x. On the H200 (scripts/ab_bench.py,
// scripts/specs/rows-few-rows-limit.txt and rows-few-rows-team256.txt, the limit switched by a
// throwaway build, three rounds; performance-notes, "The few-rows class of teams of 128 reaches
// 512 rows") bf16 rows of 4096 in teams of 128 ran 0.90-0.92x the time at 300 and 512 rows
// (LayerNorm, add + RMSNorm, add + LayerNorm) and f32 LayerNorm rows of 2048 0.87-0.88x; at 768
// rows add + LayerNorm lost (1.05x), at 1024 all ran level. In teams of 256 (f32 LayerNorm rows of
// 4096; bf16 rows of 8192: LayerNorm, an f32 weight, add + RMSNorm) they ran 0.91-0.97x at 300,
// 352 and 384 rows, 0.97-1.04x at 448 and 0.99-1.08x at 512. Wider teams keep kFewRows.
constexpr int kNarrowTeam = 128;
constexpr int64_t kNarrowFewRows = 2 * kFewRows;
constexpr int64_t kWideFewRows = kFewRows + kFewRows / 2;

// Rows of scalar accesses whose parameters are loaded at the store in launches of many rows,
// whatever their words (the two rules above), for a row kernel of `team` threads a row.
bool scalar_params_at_the_store(const Problem& pr, int vec, int team) {
  if (vec != 1 || pr.residual || pr.op == Op::kGroupNorm || params_of(pr) == 0) return false;
  return team == kScalarRowsParamsAtTheStoreTeam || (team == kScalarLayerNormParamsAtTheStoreTeam &&
                                                     pr.op == Op::kLayerNorm && size_of(pr.x) == 2);
}
// The team of the row kernel for pr's rows (threads a row).
int row_team(const Problem& pr, int vec) {
  return team_for(ceil_div(pr.row_length, vec), team_values(pr, vec), vec);
}

// The registers (32-bit words) `values` elements of a dtype take when held (HeldVec and Slice,
// row_common.cuh): 16-bit pairs packed, otherwise one per element.
int64_t held_words(Dtype dtype, int64_t values, int vec) {
  return size_of(dtype) == 2 && vec % 2 == 0 ? values / 2 : values;
}

// The L2 of the target's arch (bytes): its full-size part's (an H100 PCIe has the SXM's 50 MiB),
// whatever the multiprocessors, so that a plan of short rows does not depend on their count (a
// MIG slice has less); 0 where the arch table does not know it.
int64_t l2_bytes(const Target& target) { return int64_t{arch_facts(target.sm).l2_kib} * 1024; }

// Rows of at most this many elements read x evict-first from L2 in launches that fit in it.
constexpr int64_t kEvictFirstMaxRow = 1024;

// Launches of at most this many rows load x (and the residual) evict-first from L2: the rows
// whose x, y (and residual, h) fit in L2 together. Read once, x's lines then go first and y's
// stay, written into L2 and read from there by the next kernel. Larger launches take the normal
// policy (given as a hint: one load path). On the H100 (tools/compare_torch.py, throwaway
// builds, two runs each; docs/performance-notes.md, "ViT/BERT rows: x evict-first from L2"):
// - rows of 768 and 1024 elements whose launch fits in L2 ran 2-10% faster, larger launches
//   of them 1-2% slower evict-first, 0.5-1% with the normal policy as a hint (qk-norm's rows
//   of 128 at 16384 tokens: 4%);
// - LLM rows (4096 to 16384 elements, 4096 tokens) ran 0-3% slower with either policy as a
//   hint, decode rows the same; a branch between a hinted and a plain load path cost
//   registers and ran the decode rows 4-8% slower. So only rows of at most kEvictFirstMaxRow
//   elements take the policy; GroupNorm's rows (not measured) do not.
int64_t evict_first_rows(const Problem& pr, const Target& target) {
  if (pr.op == Op::kGroupNorm || pr.row_length > kEvictFirstMaxRow) return 0;
  const int64_t row_bytes = pr.row_length * (size_of(pr.x) + size_of(pr.y) +
                                             (pr.residual ? 2 * size_of(*pr.residual) : 0));
  return l2_bytes(target) / row_bytes;
}

// RMSNorm rows of a launch of many rows ask L2 for their row with one bulk prefetch (sm_90:
// cp.async.bulk.prefetch.L2) by the team's first thread, issued before the team's loads: they go
// through the pointer that the prefetch's asm returns (row_norm.cuh). On the H200 (normjit bench,
// 2 rounds, scripts/experiments/runs-2026-12-05.sh pfdep; performance-notes, "The forward rows'
// L2 prefetch") that ran bf16 RMSNorm rows of 2048 to 16384 elements 0-5% faster than no
// prefetch (rows of 8192 at 1024 tokens 5%, of 16384 at 1024 tokens 4%), with a residual or an
// fp8 output 2%, f32 rows of 1024 and 8192 0-2% (geometric mean over 24 LLM rows 0.988), where
// the same prefetch placed by ptxas after the loads (8a1480c) measured 0.999. LayerNorm rows gained
// nothing and RMSNorm rows of 8192 with f32 parameters beside 16-bit x ran 15-19% slower with it
// (pfall, depall; rows of 4096 1%), so they do not take it; nor does the few-rows class (decode
// rows), which ran 3-13% slower with the prefetch of an earlier experiment (fwdpf-decode). Only
// rows measured so: 16-byte accesses, at least kPrefetchRowMinBytes of x.
constexpr int64_t kPrefetchRowMinBytes = 4096;

// Rows with a residual take the prefetch only from this many bytes of x. Measured on an H100
// (session 81, scripts/experiments/runs-session80.sh first: add + RMSNorm in the variants
// harness, two rounds, the prefetch as planned and off): off, bf16 rows of 2048 at 1024 tokens
// took 9.86 -> 9.28-9.38 µs in place and rows of 4096 15.0 -> 14.8-14.9 (the rows behind
// torch.compile), while at 4096 and 16384 tokens they lost 0.3-1.1% (rows ahead of it by 3-8%);
// rows of 8192 keep it (0.6% faster with it at 16384 tokens, level at 1024).
constexpr int64_t kPrefetchResidualRowMinBytes = 16384;

bool prefetches_row(const Problem& pr, const Target& target, const KernelPlan& p) {
  const int64_t row_bytes = pr.row_length * size_of(pr.x);
  return arch_facts(target.sm).clusters && pr.op == Op::kRmsNorm &&
         p.batch_class != kBatchFewRows && p.vec * size_of(pr.x) == kAccessBytes &&
         size_of(pr.param) <= size_of(pr.x) && row_bytes >= kPrefetchRowMinBytes &&
         (!pr.residual || row_bytes >= kPrefetchResidualRowMinBytes);
}

// A row kernel that loads its parameters with x issues their loads beside x's, but ptxas sank
// them past the kernel's `!active` exit, which follows the reduction, where a team within one
// warp (at most 32 threads) has no block barrier to stop them: in a launch of a
// few such rows the parameters' latency then followed the reduction's (QK-norm's [1, 32, 128]:
// the weight's loads after the shuffles, in the SASS of Triton 3.6's cuobjdump). The kernel
// stores the XOR of their bits to shared memory (never read) before the reduction, a use that
// keeps the loads with x's. On the H200 (scripts/ab_bench.py, 2 rounds,
// scripts/specs/row-params-pinned.txt; performance-notes, "The parameters' loads above the
// reduction") that ran QK-norm's rows of 128 at 1 to 8 tokens, [64, 64] and ViT-B's [197, 768]
// LayerNorm (teams of 8 to 32) 0.91-0.97x the time; wider teams, whose loads ptxas had already
// placed before the block barrier, 0.97-1.01x (not taken), RMSNorm decode rows with a residual
// 1.02-1.04x (not taken), the many-rows class in teams within a warp 0.99-1.06x (not taken).
// In launches of many rows, LayerNorm's 16-bit rows in teams of 64 and 128 (two to four warps):
// ptxas placed some of the parameters' loads after the first shuffles, ahead of the team's block
// barrier (BERT-large's bf16 [8192, 1024]); with the store, bf16 and f16 rows of 1024 and 2048 at
// 4096 to 16384 rows ran 0.95-0.97x the time, 2048 rows of 1024 1.00x, the f32 rows of 768 and
// 1024 1.00-1.01x (not taken) (H200, scripts/ab_bench.py, 3 rounds,
// scripts/specs/rows-pin-teams.txt; performance-notes, "Session 58"). Then (H200,
// scripts/ab_bench.py, 3 rounds; performance-notes, "Session 59") wider teams and residuals:
// LayerNorm's bf16 rows of 5120 and 12288 (teams of 256 and 512) at 1024 to 16384 rows 0.97-0.99x
// the time (scripts/specs/rows-pin-wide.txt), RMSNorm's bf16 rows of 1024 (teams of 64) 0.95x
// (taken in both classes, with 16-byte accesses, so that they plan one kernel still: in the
// few-rows class [16, 1024] ran 0.97-0.98x with the store, session 57's measurement above), its LLM
// rows of 4096 to 16384 1.00x (their weight's loads above the shuffles already: not taken); add
// + LayerNorm with x, parameters and residual 16-bit (scripts/specs/add-layernorm-teams.txt: rows
// of 2048 to 8192, 1 to 16384 tokens, both classes) 0.93-1.00x (LayerNorm stores h after the
// reduction, so the loads delay no early store of it, as they did add + RMSNorm's decode rows
// above); with an f32 residual the plan loads the parameters after the reduction. Not taken,
// unmeasured: RMSNorm's 16-bit rows of 2048 and more in teams wider than a warp other than those
// LLM rows.
constexpr int kPinParamsMaxTeam = 32;
constexpr int64_t kPinRmsNormMaxRow = 1024;

bool pins_params(const Problem& pr, const KernelPlan& p, int team) {
  if (!p.params_ahead) return false;
  const bool sixteen_bit = size_of(pr.x) == 2 && size_of(pr.param) == 2;
  if (pr.residual) return pr.op == Op::kLayerNorm && sixteen_bit;
  if (pr.op == Op::kRmsNorm && sixteen_bit && team > kPinParamsMaxTeam &&
      pr.row_length <= kPinRmsNormMaxRow && p.vec * size_of(pr.x) == kAccessBytes) {
    return true;  // both classes, so that they keep planning one kernel
  }
  if (p.batch_class == kBatchFewRows) return team <= kPinParamsMaxTeam;
  return team > kPinParamsMaxTeam && sixteen_bit && pr.op == Op::kLayerNorm;
}

// Row kernels of 16-bit rows (x, h and the parameters 16-bit, y at most) take launch bounds that
// cap their registers at kRowRegisterCap in three classes: CTAs of 256 threads without a residual
// in launches of many rows (4 CTAs an SM), and in launches of any size LayerNorm without a
// residual in CTAs of 512 at fewer than 32 values a thread (rows of 8193 to 12288; 2 CTAs an SM)
// and RMSNorm with an f16 residual in CTAs of 512 (2). ptxas gives those kernels up to 80 registers
// (3 CTAs of 256 an SM, or 1 of 512: a quarter of the threads an SM holds); bounded, 64, some
// spilling 4-16 bytes. On the H200 (scripts/ab_bench.py, 3 rounds,
// scripts/specs/rows-launch-bounds.txt; performance-notes, "Launch bounds: 64 registers for the row
// kernels in CTAs of 256 and 512") LayerNorm bf16 rows of 9216 and 12288 ran 0.63-0.71x the time
// (1024 and 4096 tokens; 69-71 registers, 1 CTA an SM), f16 add + RMSNorm rows of 16384 0.91-0.93x
// (76), LayerNorm rows of 5120 and 6144 0.90-0.94x (73-78), RMSNorm rows of 7168 and 8192
// 0.93-0.99x (68-70; Gemma's and Llama-70B's 0.98-0.99x from 1024 to 16384 tokens). Left out, as
// they ran 1.01-1.02x bounded: residuals in CTAs of 256 (f16 add + RMSNorm rows of 5120 and 8192, 4
// and 12 bytes spilled), kernels in CTAs of 512 that fit 2 an SM already (RMSNorm bf16 rows of
// 12288, LayerNorm of 16384: ptxas then took 56 registers); an f32 weight beside 16-bit x (80
// registers: 4 CTAs an SM spilled 80 bytes and ran 1.38-1.42x slower), f32 y or h and add +
// LayerNorm of 32 values a thread (81 registers, 36 bytes spilled bounded, 1.03x) by the class's 16
// bits; f32 rows (CTAs of 1024 hold at most 64 registers anyway). The few-rows class (at most 256
// rows in teams of 512, 384 in teams of 256) takes the bounds of CTAs of 512 too: there bf16
// LayerNorm rows of 9216 and 12288 hold 69-70 registers (1 CTA an SM), so 133 to 256 rows took two
// rounds of CTAs on 132 SMs; bounded (64, no spills) 0.82-0.83x the time, 64 and 132 rows (one
// round either way), the f16 rows and f16 add + RMSNorm rows of 16384 (64 registers
// unbounded) 1.00-1.01x (H200, scripts/ab_bench.py, 3 rounds,
// scripts/specs/rows-bounds-few-rows.txt; performance-notes, "Launch bounds in the few-rows
// class"). In CTAs of 256 that class's 384 rows take one round at 3 CTAs an SM: no bounds.
constexpr int64_t kSmRegisters = 65536;  // 32-bit registers per SM on every arch from sm_70 on
constexpr int kRowRegisterCap = 64;
int row_blocks_bound(const Problem& pr, const KernelPlan& p) {
  const int cta = p.block_x * p.block_y;
  const bool sixteen_bit = size_of(pr.x) == 2 && size_of(pr.y) <= 2 && size_of(pr.held()) == 2 &&
                           (params_of(pr) == 0 || size_of(pr.param) == 2);
  const bool bounded = (cta == 256 && !pr.residual && p.batch_class != kBatchFewRows) ||
                       (cta == 512 && pr.op == Op::kLayerNorm && !pr.residual &&
                        p.vectors * p.vec < 2 * kTeamValues) ||
                       (cta == 512 && pr.op == Op::kRmsNorm && pr.residual == Dtype::kF16);
  if (pr.op == Op::kGroupNorm || !sixteen_bit || !bounded) {
    return 0;  // no bounds
  }
  return int(kSmRegisters / (int64_t{kRowRegisterCap} * cta));
}

std::string row_registers(const Problem& pr, const Target& target, KernelPlan& p) {
  const int64_t h = pr.row_length;
  const int64_t vectors = ceil_div(h, p.vec);
  const bool group = pr.op == Op::kGroupNorm;
  const int team = row_team(pr, p.vec);
  p.vectors = ceil_div(vectors, team);
  p.block_x = team;
  p.rows_per_block = std::max(1, (group ? kGroupRowCtaThreads : kRowCtaThreads) / team);
  p.block_y = p.rows_per_block;
  p.min_blocks_per_sm = row_blocks_bound(pr, p);
  const int64_t values = p.vectors * p.vec;
  const int64_t param_words = params_of(pr) * held_words(pr.param, values, p.vec);
  const int64_t slice_words = held_words(pr.held(), values, p.vec);
  const int64_t loaded_words = slice_words * (pr.residual ? 2 : 1);
  const bool few = p.batch_class == kBatchFewRows;
  const bool wide_scalar = scalar_params_at_the_store(pr, p.vec, team);
  const bool f32_params_of_wide_16bit_rows = team == kWideRowsTeam && size_of(pr.x) == 2 &&
                                             p.vec * size_of(pr.x) == kAccessBytes &&
                                             size_of(pr.param) == 4;
  const int many_rows_words =
      f32_params_of_wide_16bit_rows ? kParamsAheadWordsWideRows : kParamsAheadWordsManyRows;
  p.params_ahead = !group && params_of(pr) > 0 &&
                   (few ? param_words <= kParamsAheadWords
                        : !wide_scalar && loaded_words + param_words <= many_rows_words);
  std::ostringstream why;
  why << "rows of " << h << " elements fit in the registers of " << team << " threads (" << values
      << " values each, " << p.vec * size_of(pr.x) << "-byte accesses); " << p.rows_per_block
      << " rows per CTA; x is read once";
  // RMSNorm of a few rows writes h as soon as it is formed, its stores overlapping the
  // reduction (LayerNorm's shift reads the residual's first element, which h may overwrite).
  // On the H100 (normjit bench, add + RMSNorm bf16, two rounds; performance-notes) that ran 1 to
  // 128 tokens 3-4% faster and 1024 to 4096 tokens about 1% slower, so only the few-rows class.
  p.early_h = few && pr.residual && pr.op == Op::kRmsNorm;
  if (p.params_ahead) {
    why << "; the parameters are loaded with x"
        << (few ? " (a launch of at most " + std::to_string(p.few_rows) + " rows)" : "");
  }
  if (!few && wide_scalar) {
    why << "; the parameters are loaded at the store (scalar accesses in a team of " << team
        << ": held with x they would leave fewer rows in flight)";
  }
  if (p.early_h) why << "; h written as it is formed, before the reduction";
  p.pin_params = pins_params(pr, p, team);
  if (p.pin_params) {
    why << "; the parameters' loads kept above the reduction (their bits stored to shared "
           "memory before it)";
  }
  p.evict_first_rows = evict_first_rows(pr, target);
  if (p.evict_first_rows > 0) {
    why << "; x read evict-first from L2 in launches of at most " << p.evict_first_rows
        << " rows (their bytes fit in L2: y stays there)";
  }
  p.prefetch_row = prefetches_row(pr, target, p);
  if (p.prefetch_row) {
    why << "; each team's first thread asks L2 for its row (one bulk prefetch)";
  }
  if (p.min_blocks_per_sm > 0) {
    why << "; launch bounds of " << p.min_blocks_per_sm << " CTAs an SM (caps the registers at "
        << kRowRegisterCap << ")";
  }
  return why.str();
}

std::string row_split(const Problem& pr, const Target& target, KernelPlan& p) {
  const SplitLayout l = choose_split_layout(pr, target, p.vec);
  const bool group = pr.op == Op::kGroupNorm;
  p.block_x = l.cta.threads;
  p.split_chunks = l.chunks;
  p.split_blocks_per_sm = l.cta.per_sm;
  p.vectors = l.vectors;
  p.staged = l.staged;
  p.resident_vectors = l.resident;
  p.smem_bytes = int(l.smem_bytes);
  // Prefetching a later row into L2 keeps DRAM busy through each row's exchange (sm_90: one
  // bulk prefetch per chunk). Staged, only where no parameters are read again for every row
  // (GroupNorm, none, or all resident): streaming weight and bias need that L2, and the
  // prefetched rows evicted them (the LayerNorm seeds ran slower while theirs streamed).
  // Unstaged (one row fills the chip), the next row is prefetched where at most an eighth
  // of the parameters stream (the f32 LayerNorm seed ran faster so). GroupNorm prefetches
  // after each row's barrier, the others once the row's partial is out: each ran faster so
  // (measured on the H100 with normjit bench, docs/performance-notes.md). GroupNorm -> SiLU,
  // whose epilogue takes longer, prefetches once the partial is out as well: on the H200 its
  // SD VAE and UNet maps and its seed-sized rows (2 to 224 rows a slot) ran level to 6%
  // faster so, where plain GroupNorm's bf16 seed ran 5-14% slower and -> GELU 1% slower
  // (performance-notes, "GroupNorm -> SiLU: a reciprocal per pair ...").
  // A residual of x's dtype is not prefetched: the next row's x alone (half of what a row
  // reads) pulled into L2 ran 5-9% slower than none on RMSNorm rows of 64 Ki to 1 Mi bf16 or
  // f32 elements (H200, normjit bench, three rounds; performance-notes), where an f32 residual
  // to bf16 x (x a third of the reads) ran 3% faster with it.
  const bool none = params_of(pr) == 0;
  const bool same_residual = pr.residual && *pr.residual == pr.x;
  const bool worth_it = l.staged ? group || l.resident == l.vectors || none
                                 : !group && (none || 8 * l.resident >= 7 * l.vectors);
  const bool prefetch = target.sm >= 90 && worth_it && !same_residual;
  const bool after_barrier = group && pr.activation != Activation::kSilu;
  p.prefetch = !prefetch ? 0 : after_barrier ? 2 : 1;
  std::ostringstream why;
  why << "rows of " << pr.row_length << " elements split over " << l.chunks
      << " co-resident CTAs of " << int64_t{l.cta.threads} * l.vectors * p.vec << " elements each ("
      << l.cta.threads << " threads, " << l.cta.per_sm
      << " CTAs an SM), kept in registers; each chunk's (mean, M2) merged "
      << "with Chan's formula; x is read once";
  if (l.resident > 0) {
    why << "; the parameters of " << l.resident << " of each thread's " << l.vectors
        << " vectors stay in shared memory";
  }
  if (prefetch) {
    why << "; the " << (l.staged ? "row after the staged one" : "next row")
        << " is prefetched into L2";
  }
  if (l.can_stage && !l.staged) {
    why << " (the next row is not staged: that shared memory holds parameters instead)";
  }
  if (l.narrow) {
    why << " (the next row is not staged: vectors of " << p.vec
        << (p.vec == 1 ? " element" : " elements") << " load faster straight into registers)";
  }
  if (target.sm >= 90 && worth_it && same_residual) {
    why << "; the next row is not prefetched into L2 (with a residual of x's dtype it ran slower)";
  }
  return why.str();
}

std::string row_stream(const Problem& pr, const Target& target, KernelPlan& p) {
  // Each row over every co-resident CTA (one per SM), each streaming a part twice in
  // pieces of `vectors` vectors per thread: up to kStreamVectors in flight per thread (half
  // as many per row where parameters per element make the kernel normalize two rows per
  // pass), as many as divide the part's length in vectors (rounded up to a multiple where
  // that moves little), so that the parts stay even and every SM gets one.
  const int64_t h = pr.row_length;
  const int64_t capacity = split_capacity(target);
  const bool group = pr.op == Op::kGroupNorm;
  const int most = !group && params_of(pr) > 0 ? kStreamVectors / 2 : kStreamVectors;
  const int64_t unit = int64_t{kSplitThreads} * p.vec;  // one vector per thread
  int64_t units = ceil_div(h, capacity * unit);
  if (units >= 4 * most) units = ceil_div(units, most) * most;
  int vectors = most;
  while (units % vectors != 0) --vectors;
  p.segment = units * unit;
  p.split_chunks = ceil_div(h, p.segment);
  p.block_x = kSplitThreads;
  p.split_blocks_per_sm = kSplitBlocksPerSm;
  p.vectors = vectors;
  std::ostringstream why;
  why << "rows of " << h << " elements exceed what " << capacity
      << " co-resident CTAs hold in registers: each row is split over " << p.split_chunks
      << " co-resident CTAs of " << p.segment
      << " elements, each streaming its part twice (statistics, then normalize: x is "
         "read twice); the parts' (mean, M2) merged with Chan's formula";
  return why.str();
}

// ---------------------------------------------------------------------------------------
// kRowBackward

// A backward thread holds, for its columns, x, dy, the weight and its running sums of dweight
// and dbias: at most kBackwardValues of each, in a team of at most kBackwardMaxTeam threads
// (whose launch bounds leave 128 registers a thread; at 1024 threads, 64 would not hold them).
constexpr int kBackwardValues = 16;
constexpr int kBackwardMaxTeam = 512;
constexpr int kBackwardWideTeam = 1024;  // 16-bit rows in pairs: row_backward_max_team
constexpr int kBackwardBlock = 256;      // threads per CTA where teams are smaller
constexpr int kBackwardPairedTeams = 2;  // teams of kBackwardBlock a CTA (16-byte accesses)
// Each team normalizes at least this many rows before the grid is capped below the CTAs the
// device holds: every CTA adds one partial of dweight/dbias (a row's worth of f32 each) to the
// final sum, so a CTA should own several rows. 8 rather than 4: on the H100 bf16 rows of 4096
// with 1024 tokens (256 CTAs of 4 rows, or 128 of 8) ran 5-6% faster, larger batches the same
// (their grid is the CTAs the device holds either way; performance-notes, 2026-11-24).
// Where that leaves fewer CTAs than the device has multiprocessors, the grid takes one CTA per
// multiprocessor (KernelPlan::fill_ctas), or one per row of teams where there are fewer: a few
// rows are latency-bound, and one CTA of 4 teams looping over 32 rows of 768 waited on each
// row's loads in turn. On the H200 (performance-notes, 2026-11-29) launches of 8 to 512 rows
// ran in 0.20-0.72x the time (LayerNorm f16 [32, 768] 29.3 -> 7.1 us); a CTA per row of teams
// with more rows (256 rows of 4096: 256 CTAs) ran slower than 128 (9.7 us against 11.4: each
// CTA's partial is a row of f32 to write and add again).
constexpr int kBackwardRowsPerTeam = 8;
constexpr int kBackwardHeaderFloats = 8;  // the grid barrier's counter, padded to 32 bytes
constexpr int kBackwardSlotAlign = 8;     // floats: each CTA's partial starts 32-byte aligned

// Floats rounded up to whole kBackwardSlotAlign: every workspace region starts 32-byte aligned.
int64_t padded_floats(int64_t floats) {
  return ceil_div(floats, kBackwardSlotAlign) * kBackwardSlotAlign;
}

// Vectors per thread and team size of a backward row of `vectors` vectors of `vec` elements, in
// a team of at most `max_team` threads.
void backward_team(int64_t vectors, int vec, int max_team, int* team, int64_t* per_thread) {
  const int aim = std::max(1, kBackwardValues / vec);
  *team = int(std::min<int64_t>(max_team, pow2_ceil(ceil_div(vectors, aim))));
  *per_thread = ceil_div(vectors, *team);
}

// The widest team a row may take: 16-bit rows in pairs (x and dy then held as raw bits, two to
// a register, the weight loaded again, dbias summed in shared memory) fit a team of 1024 threads
// in 64 registers a thread without spills (`normjit dump --emit resources`), so rows of 16384 run
// here rather than split over CTAs: on the H200 (performance-notes, 2026-11-28) bf16 rows of
// 16384 ran 1.16-1.44x faster than split (LayerNorm with a bias at 1024 tokens the same). Rows a
// team of 512 holds keep the f32 form (packed, they ran 1-8% slower). With a bias the dbias sums
// take 64 KiB of shared memory, so an arch whose SM has no more (sm_75) keeps the split kernel.
int row_backward_max_team(const Problem& pr, const Target& target) {
  const int vec = row_vector_width(pr);
  if (size_of(pr.x) != 2 || vec % 2 != 0) return kBackwardMaxTeam;
  const int64_t bias_sums_bytes = int64_t{kBackwardWideTeam} * kBackwardValues * 4;
  // Beside them: the 1 KiB the driver reserves per CTA and 1 KiB for the static arrays.
  if (pr.bias && bias_sums_bytes + 2048 > int64_t{arch_facts(target.sm).smem_per_sm_kib} * 1024) {
    return kBackwardMaxTeam;
  }
  return kBackwardWideTeam;
}

bool row_backward_holds(const Problem& pr, const Target& target) {
  const int vec = row_vector_width(pr);
  int team = 0;
  int64_t per_thread = 0;
  backward_team(ceil_div(pr.row_length, vec), vec, row_backward_max_team(pr, target), &team,
                &per_thread);
  return per_thread * vec <= kBackwardValues;
}

constexpr int kActivationBackwardBlocks = 2;

std::string row_backward(const Problem& pr, const Target& target, KernelPlan& p) {
  const int64_t h = pr.row_length;
  int team = 0;
  backward_team(ceil_div(h, p.vec), p.vec, row_backward_max_team(pr, target), &team, &p.vectors);
  p.block_x = team;
  p.rows_per_block = std::max(1, kBackwardBlock / team);
  // Teams of kBackwardBlock threads in 16-byte accesses (rows of 2049 to 4096 elements) go two
  // to a CTA (two rows in flight, one partial of dweight/dbias between them; 16 warps an SM
  // where one team a CTA left 8 in launches of few rows) and prefetch each team's next row. On
  // the H200 (performance-notes, 2026-11-29) that ran 256 to 2048 rows of 3072 and 4096 in
  // 0.87-0.97x the time (LayerNorm bf16 [1024, 4096] 20.7 -> 17.9 us), but 4096 rows and more
  // 0.96-1.04x: there the two teams of a CTA waited for each other at each row's reduction, so
  // launches of more than 2048 rows ran one team a CTA (a batch class of their own). With each
  // team at its own barrier (below) the pairing gains there too (performance-notes, "The row
  // backward's final sum over every CTA, and a barrier for each team": [4096, 4096] and [4096,
  // 3072] 0.90-0.96x, [16384, 4096] 0.97-0.99x), so every batch takes it: one kernel, one class.
  const bool paired = team == kBackwardBlock && p.vec * size_of(pr.x) == kAccessBytes;
  if (paired) p.rows_per_block = kBackwardPairedTeams;
  p.block_y = p.rows_per_block;
  p.fill_ctas = target.sm_count;
  // The teams of a CTA of several (of whole warps) wait at a row's reduction at their own named
  // barrier, not at the CTA's: else a team whose loads arrived first waits at every row for the
  // slowest team of its CTA (Nsight Compute put a third of the warp samples of RMSNorm [4096,
  // 4096] on the instruction after that barrier). On the H200 f32 rows of 1024 in CTAs of two
  // teams ran 0.93x the time, 16-bit rows of 768-2048 in CTAs of two to four teams 0.98-0.99x.
  p.team_barriers = p.rows_per_block > 1 && team % 32 == 0;
  std::ostringstream why;
  why << "backward: rows of " << h << " elements in the registers of " << team << " threads ("
      << p.vectors * p.vec << " values each of x and dy, " << p.vec * size_of(pr.x)
      << "-byte accesses); " << p.rows_per_block
      << " rows per CTA, each CTA looping over rows; dx from the saved statistics"
      << (pr.residual ? " plus dh" : "");
  // Where a team is the whole CTA, it starts pulling its next row's x and dy into L2 (sm_90: two
  // bulk prefetches) as it takes a row, so that row's loads wait on L2 rather than DRAM: a CTA's
  // rows are otherwise loaded one after the other, each after the previous one's reduction. On
  // the H100 (performance-notes, 2026-11-24) that ran bf16 rows of 4096 and 8192 with 4096 and
  // 16384 tokens 2-11% faster (1024 tokens: the same); f32 rows of 768 in CTAs of 4 teams ran
  // 14% slower with it, so CTAs of several teams of f32 rows go without. CTAs of several teams of
  // 16-bit rows in even accesses (packed: a backward's residual is x's dtype, so x is what it
  // holds) prefetch too, with the next row in registers (below).
  const bool packs = packed(pr, p.vec);
  p.prefetch = target.sm >= 90 && (p.rows_per_block == 1 || paired || packs) ? 1 : 0;
  if (p.team_barriers) why << " (each team at its own barrier at a row's reduction)";
  if (p.prefetch) {
    why << (p.rows_per_block > 1 ? "; each team prefetches its next row's x and dy into L2"
                                 : "; each CTA prefetches its next row's x and dy into L2");
  }
  // A team that prefetches also loads its next row's 16-bit x and dy (held as raw pairs, two to a
  // register) and statistics into a second set of registers as it takes a row, so that they are in
  // flight through the row's sums, team reduction and dx stores; the L2 prefetch then pulls the row
  // after it. A CTA's rows otherwise wait, each, for the previous row's reduction before their
  // loads start (Nsight Compute: 43% of the stall cycles on scoreboard dependencies). Offline
  // nothing spills (bf16 LayerNorm rows of 8192: 120 -> 119 registers, RMSNorm rows of 4096 in
  // teams of 256: 100 -> 108). On the H200 (performance-notes, "The row backward's next row in
  // registers") bf16 rows of 4096 and 8192 with 256 to 16384 tokens ran 0.86-0.93x the time (16384
  // x 4096 0.97x). In CTAs of several teams (16-bit rows of 2048 and shorter) each team does the
  // same: bf16 rows of 768-2048 with 1024-16384 tokens ran 0.82-0.94x the time ("The row
  // backward's three experiments on the H200"; offline no spills, RMSNorm rows of 1024 and
  // 2048 80 -> 96-106 registers, 3 CTAs of 256 threads an SM -> 2). Teams wider than
  // kBackwardMaxTeam (64 registers a thread) go without: there it spilled 132-152 bytes a thread
  // and ran 1.4-1.8x the time.
  if (p.prefetch && packs && team <= kBackwardMaxTeam) {
    p.prefetch = 2;
    p.hold_packed = true;
    why << "; x and dy held as raw 16-bit pairs, the next row's loaded into registers as a team "
           "takes a row (the L2 prefetch pulls the row after it)";
  }
  // A team wider than kBackwardMaxTeam has 64 registers a thread: x and dy held as raw bits,
  // the weight loaded again where used (from L1: the CTA's columns are the same every row), and
  // the dbias sums in shared memory.
  if (team > kBackwardMaxTeam) {
    p.hold_packed = true;
    p.reload_weight = pr.weight;
    p.shared_sums = pr.bias;
    if (p.shared_sums) p.smem_bytes = int(int64_t{team} * p.vectors * p.vec * 4);
    // dh loaded with x and dy spilled here (56-60 bytes a thread, `normjit dump --emit
    // resources`, bf16 rows of 16384; all of a thread's dh loaded after the reduction, 36-60):
    // each vector of it is loaded at its store (bf16 none; f16 rows of 9000-16384 24-48 bytes).
    p.late_dh = pr.residual.has_value();
    why << "; x and dy held as raw 16-bit pairs"
        << (pr.weight ? ", the weight loaded again for each row (from L1)" : "")
        << (pr.bias ? ", the dbias sums in shared memory" : "")
        << (p.late_dh ? ", each vector of dh loaded at its store" : "");
  }
  // The CTAs' partials are summed in float4s where the row is whole groups of 4 columns (16
  // lanes a group, whole 32-byte sectors), by warps numbered CTA-minor so that every CTA takes
  // part (add_slot_quads_in_order). On the H200 (performance-notes, "The row backward's final sum
  // over every CTA, and a barrier for each team") the LLM rows at 1024-4096 tokens took
  // 0.92-0.99x the time of one float a column by warps numbered CTA-major, which left the
  // columns of rows of 4096 to 64 of 132 CTAs; numbered CTA-minor alone, 0.98-1.00x.
  p.quad_final_sum = (pr.weight || pr.bias) && h % 4 == 0;
  // With an activation, CTAs of kBackwardBlock threads are bounded to kActivationBackwardBlocks
  // an SM (128 registers a thread), as the plain kernel's registers let the SM hold: unbounded,
  // ptxas took 168-169 registers for bf16 rows of 768-2048 with GELU (the plain kernel 119-121),
  // one CTA an SM instead of two; bounded, none spilled over RMSNorm and LayerNorm rows of
  // 128-8192 in each dtype with SiLU and GELU but bf16 LayerNorm rows of 2048 with SiLU (8
  // bytes; `normjit dump --emit resources`). On the H200 (normjit bench, performance-notes
  // "Session 65") the channels-last LayerNorm2d [32, 768, 56, 56] backward with GELU ran 2.2x
  // the plain kernel's time unbounded; on the H100 (performance-notes "Session 66") bounded it
  // runs 0.81x the unbounded time (269 -> 219 us), rows of 768 with GELU 0.86x (bf16) and 0.93x
  // (f32), the other activation rows 0.92-1.00x (geomean 0.94 over 9 specs; the plain 1.00x).
  // (0: no bound, as the row forward's; a bound of 1 made ptxas take other registers.)
  p.min_blocks_per_sm = 0;
  if (pr.activation != Activation::kNone && team * p.rows_per_block == kBackwardBlock) {
    p.min_blocks_per_sm = kActivationBackwardBlocks;
    why << "; launch bounds of " << p.min_blocks_per_sm << " CTAs an SM (caps the registers)";
  }
  if (pr.weight || pr.bias) {
    why << "; each CTA sums " << (pr.bias ? "dweight and dbias" : "dweight")
        << " of its rows in f32, then the CTAs' partials are added in a fixed order after a grid "
           "barrier (cooperative launch; deterministic, no float atomics), "
        << (p.quad_final_sum ? "in float4s " : "") << "by every CTA";
  }
  return why.str();
}

// ---------------------------------------------------------------------------------------
// kRowSplitBackward

// A CTA of the split backward: 256 threads, two per SM, so that at 128 registers a thread (2 x
// 256 x 128 fill the SM's 64 Ki) each holds kBackwardValues values each of x, dy, the weight
// and its dweight and dbias sums, as row_backward's teams do; with two CTAs per SM one loads and
// computes while the other waits on its row's exchange. On the H100 (performance-notes,
// 2026-11-24) held parts of 8 values (more CTAs a row) ran 1.1-1.8x slower at 2, 3 or 4 CTAs
// per SM, and streamed parts at 3 per SM 2-30% slower.
constexpr int kSplitBackwardThreads = 256;
constexpr int kSplitBackwardBlocksPerSm = 2;
// Held parts fit 3 CTAs per SM (80 registers) with the weight loaded again for each row (from
// L1) instead of held, and with a bias each thread's dbias sums in shared memory (16 KiB a CTA):
// no spills (`normjit dump --emit resources`; held, RMSNorm's weight spilled 8 bytes, LayerNorm's
// 36, and with dbias in registers 64-160). On the H100 (performance-notes, 2026-11-24) bf16
// RMSNorm rows of 16384 with a weight ran 3% (1024 tokens) to 12% (16384) faster at 3 than at 2
// with the weight held, and 1-2% faster again with it reloaded; LayerNorm with a weight only 10%
// faster (4096 tokens); LayerNorm with weight and bias 3-11% faster with dbias in shared memory
// (7-11% slower at 3 with dbias in registers, spilling).
constexpr int kSplitBackwardBlocksPerSmHeld = 3;
// Streamed parts (rows longer than the CTAs hold): values per thread of a piece (x, dy, the
// weight and the piece's dweight and dbias, beside the 2 W sums of the wave's rows), and rows
// per wave W where there are parameters: their accumulators (f32, a CTA's columns, in the
// workspace) are read and written once per wave, 1/W of a row's traffic per row. Without
// parameters a wave is one row (nothing to amortize; the row's second read is then the most
// recent one in L2). On the H100 pieces of 4 values or waves of 8 rows ran the LayerNorm seeds as
// fast or up to 12% slower (performance-notes, 2026-11-24).
constexpr int kSplitBackwardPieceValues = 8;
constexpr int kSplitBackwardWaveRows = 16;
// Streamed parts whose piece is one vector a thread (16-bit x: 16 bytes each of x and dy) wait a
// DRAM round trip each step with that little in flight; each thread starts its vectors this many
// steps ahead towards L2. On the H200 (performance-notes, "The split backward's streamed steps
// prefetched ahead") the bf16 LayerNorm seed's backward took 0.85x the time (2 steps; 4: 0.87x,
// 8: 1.05x), RMSNorm bf16 rows of 4 Mi 0.84x, LayerNorm bf16 rows of 2 Mi 0.86x. Where it did
// not help it is not done: two vectors a piece (f32: 1.02-1.03x) or waves of one row (no
// parameters, the second read from L2: 1.27x). Narrower accesses (odd rows) are not measured and
// go without.
constexpr int kSplitBackwardStepsAhead = 2;

std::string row_split_backward(const Problem& pr, const Target& target, KernelPlan& p) {
  const int64_t h = pr.row_length;
  const int64_t vectors = ceil_div(h, p.vec);
  // (f32 LayerNorm with a weight and no bias spills 24-40 bytes at 3 even so: it keeps 2.)
  const bool three = pr.bias || pr.op == Op::kRmsNorm || size_of(pr.x) == 2 || !pr.weight;
  const int held_blocks = three ? kSplitBackwardBlocksPerSmHeld : kSplitBackwardBlocksPerSm;
  const int64_t threads = kSplitBackwardThreads;
  p.block_x = kSplitBackwardThreads;
  // Held: the fewest CTAs whose threads hold the row at kBackwardValues each, then the fewest
  // vectors per thread that still fit it in as many, so that the parts are even.
  const int64_t most = std::max(1, kBackwardValues / p.vec);
  int64_t chunks = ceil_div(vectors, threads * most);
  const bool held = chunks <= int64_t{held_blocks} * target.sm_count;
  p.split_blocks_per_sm = held ? held_blocks : kSplitBackwardBlocksPerSm;
  const int64_t capacity = int64_t{p.split_blocks_per_sm} * target.sm_count;
  std::ostringstream why;
  if (held) {
    p.vectors = ceil_div(vectors, chunks * threads);
    p.split_chunks = ceil_div(vectors, p.vectors * threads);
    p.pieces = 1;
    p.wave_rows = 1;
    p.segment = threads * p.vectors * p.vec;
    p.reload_weight = pr.weight && p.split_blocks_per_sm == kSplitBackwardBlocksPerSmHeld;
    p.shared_sums = pr.bias && p.split_blocks_per_sm == kSplitBackwardBlocksPerSmHeld;
    why << "backward: rows of " << h << " elements split over " << p.split_chunks
        << " co-resident CTAs of " << p.segment << " elements (" << p.vectors * p.vec
        << " values each of x and dy per thread, " << p.vec * size_of(pr.x)
        << "-byte accesses), kept in registers (x and dy read once"
        << (p.reload_weight ? "; the weight loaded again with each row, from L1" : "")
        << "); per row, each CTA's sums of g and g * xhat exchanged with the row's other CTAs "
           "and added in chunk order";
  } else {
    // Streamed: every co-resident CTA takes a part of units of one vector per thread, in pieces
    // of up to kSplitBackwardPieceValues values per thread that divide it (rounded up to a
    // multiple where that moves little), as row_stream's parts.
    const int per_piece = std::max(1, kSplitBackwardPieceValues / p.vec);
    const int64_t unit = threads * p.vec;
    int64_t units = ceil_div(h, capacity * unit);
    if (units >= 4 * per_piece) units = ceil_div(units, per_piece) * per_piece;
    int k = per_piece;
    while (units % k != 0) --k;
    p.vectors = k;
    p.pieces = int(units / k);
    p.segment = units * unit;
    p.split_chunks = ceil_div(h, p.segment);
    p.wave_rows = params_of(pr) > 0 ? kSplitBackwardWaveRows : 1;
    const bool one_vector = p.vectors == 1 && p.vec * size_of(pr.x) == kAccessBytes;
    p.prefetch = target.sm >= 90 && one_vector && p.wave_rows > 1 ? kSplitBackwardStepsAhead : 0;
    why << "backward: rows of " << h << " elements exceed what " << capacity
        << " co-resident CTAs hold in registers: each row is split over " << p.split_chunks
        << " co-resident CTAs of " << p.segment << " elements, each streaming its part twice in "
        << p.pieces << " pieces of " << p.vectors * p.vec << " values per thread (x and dy read "
        << "twice); a slot's rows in waves of up to " << p.wave_rows
        << (p.wave_rows == 1 ? " row" : " rows")
        << ", each CTA's sums of g and g * xhat of a wave's rows exchanged once and added in "
           "chunk order";
    if (p.prefetch > 0) {
      why << "; each thread starts its vectors of x and dy " << p.prefetch
          << " steps (a row's piece) ahead of its loads towards L2";
    }
  }
  why << "; " << p.split_blocks_per_sm << " CTAs of " << kSplitBackwardThreads << " threads per SM";
  if (pr.residual) why << "; dh added to dx, each vector loaded as dx's is stored";
  if (pr.weight || pr.bias) {
    why << "; each CTA sums " << (pr.bias ? "dweight and dbias" : "dweight") << " of its columns"
        << (p.pieces > 1    ? " over a wave in registers, then into its f32 accumulators in "
                              "the workspace"
            : p.shared_sums ? " in registers (dbias in shared memory)"
                            : " in registers")
        << ", then the partials of the CTAs that share a part are added in slot order after a "
           "grid barrier (deterministic, no float atomics)";
  }
  return why.str();
}

int64_t row_split_backward_slot_floats(const KernelPlan& p) {
  const int64_t exchange =
      kBackwardHeaderFloats + padded_floats(2 * 2 * p.wave_rows * p.split_chunks);
  return exchange + p.split_chunks * params_of(p.problem) * padded_floats(p.segment);
}

// ---------------------------------------------------------------------------------------
// kGroupBackward

// A unit is a team's positions of one channel: at most kBackwardValues per thread of each of x
// and dy, in a team of at most kGroupBackwardTeam threads (one CTA of kBackwardBlock threads
// holds 256 / team units).
constexpr int kGroupBackwardTeam = 256;
// 16-bit channels of at least kGroupBackwardChunkedChannel positions in 16-byte accesses take units
// of kGroupBackwardUnitPositions positions in chunks of a team's 16 values a thread (4 chunks of
// 4096), each thread's sums carried from one chunk to the next and the next chunk's x and dy
// loaded while dx of this one is stored, bounded to kGroupBackwardChunkedBlocksPerSm CTAs an SM
// (128 registers, none spilled): a quarter as many partials as units of one chunk, and twice the
// CTAs an SM of the 64-values-a-thread units (236 registers) these replace. On the H200
// (ab_bench of scripts/specs/groupnorm-backward.txt against 6898cdf's plan, two rounds,
// 2026-11-28; performance-notes) the bf16 seeds [112|8, 64, 512, 512] ran 5583 -> 5021 and 407
// -> 366 us, f16 VAE maps of 65536 and 262144 positions 11-12% faster, [2, 320, 128, 128] (16384
// positions, 16 values a thread in units of one chunk bounded to 3 before) 5%; units of 2 chunks
// 7-8% slower than 4 on the large maps, 16 chunks spill; the same chunks unbounded (186
// registers) and channels of 4096 positions bounded to 2 slower. Not measured on the H100,
// where the 64 values had run the seeds 13% faster than one chunk of 16.
// In narrower accesses (odd spatial sizes) the chunks spill (8-288 bytes), so those channels take
// units of one chunk of 16 values a thread, bounded to kGroupBackwardSmallBlocksPerSm (below) at
// every size. On the H200 (ab_bench of scripts/specs/groupnorm-backward-narrow.txt, two rounds,
// 2026-11-28; performance-notes) that ran bf16 [2, 32, 1, 65537] and [4, 64, 263, 263] 113 -> 34
// and 317 -> 100 us against the 64 values a thread they had from 65536 positions on (255
// registers, 8 bytes spilled since the chunk loop; 62 and 182 us before it, at 6898cdf); 32
// values bounded to 2 ran 38 and 108, 8 values 39 and 141, chunks of 16 81 and 244.
constexpr int64_t kGroupBackwardChunkedChannel = 16384;
constexpr int64_t kGroupBackwardUnitPositions = 16384;
constexpr int kGroupBackwardChunkedBlocksPerSm = 2;
// Step 2 of a chunked unit loads kGroupBackwardChunksAhead chunks ahead of the one whose dx it
// forms, held as raw 16-bit words (16 registers a chunk of x and dy, not 32; still 128, none
// spilled), so that more of the unit's reads are in flight while dx goes out. On the H200
// (ab_bench of scripts/specs/groupnorm-backward.txt and -narrow.txt against one chunk ahead, two
// rounds, 2026-11-28; performance-notes) f16 [2, 320, 128, 128] ran 38.7 -> 35.6 us, [1, 128, 512,
// 512] 94.2 -> 90.7, bf16 [4, 64, 264, 264] 79.2 -> 70.0, [8, 64, 512, 512] 328.7 -> 324.9, the
// bf16 seed the same (4332 -> 4337); 3 chunks ahead ran 0.5-1% slower than 2.
constexpr int kGroupBackwardChunksAhead = 2;
// 16-bit channels smaller than that (units of one chunk of 16 values a thread) are launched
// bounded to kGroupBackwardSmallBlocksPerSm CTAs an SM (at most 85 registers a thread: 71-80,
// none spilled), so more units are in flight per SM. On the H100 (ab_bench of
// scripts/specs/groupnorm-backward.txt against 0f71f8e's kernels, two rounds, 2026-11-27;
// performance-notes) bf16 [16, 256, 56, 56] ran 69.6 -> 61.4 us, f16 [2, 320, 64, 64] 17.3 ->
// 16.7 and [2, 320, 128, 128] (chunked since) 48.7 -> 47.2; in sweeps of the bound, f32 [32, 64,
// 128, 128] ran 5% slower at 3 (2% at 4), so f32 goes unbounded (1).
constexpr int kGroupBackwardSmallBlocksPerSm = 3;
// f32 channels of at least kGroupBackwardLargeChannel positions may stream (below).
constexpr int64_t kGroupBackwardLargeChannel = 65536;
// f32 channels of at least kGroupBackwardLargeChannel positions stream instead on a GPU of
// kGroupStreamMinDramGbps and more: waves of as many rows as kGroupStreamWaveUnits units (the
// f32 seeds: one wave of every row), x and dy read twice from DRAM (two streaming passes and
// one grid barrier, as torch.compile's two kernels do), no prefetch, kGroupBackwardStreamValues
// values a thread bounded to kGroupStreamBlocksPerSm CTAs an SM (128 registers, none spilled),
// and dx's x and dy loaded before the row's sums, so that their DRAM latency overlaps the sums'
// reductions. On the H200 (4814 GB/s; ab_bench of scripts/specs/groupnorm-backward-f32-large.txt
// against 0f71f8e's L2 waves, 2026-11-27; performance-notes) the f32 seed ran 10.51 -> 8.64 ms,
// [8, 64, 512, 512] 755 -> 627 us, [16, 32, 256, 256] 207 -> 167 us; unbounded (147 registers, one
// CTA an SM) 9.23 ms, 16 values 9.24 (8.80 bounded to 3), 64 values 8.64. On the H100 (3352
// GB/s) an earlier form ran the seed 1% slower than its waves (12379 -> 12505 us), so slower
// DRAM keeps the waves.
// 16-bit channels stream there too from kGroupBackwardStream16Channel positions on, in the chunked
// units above (16 values a thread, bounded to 2: 128 registers). In units of 4 chunks, on the
// H200 (ab_bench of scripts/specs/groupnorm-backward-16bit-large.txt against the waves, two
// rounds, 2026-11-28; performance-notes) the bf16 seed ran 4934 -> 4545 us, [8, 64, 512, 512]
// 360 -> 336, f16 [1, 128, 512, 512] and [1, 512, 256, 256] the same (95 us), [1, 256, 256, 256]
// 49.8 -> 53.5 (so 65536 positions keep their waves); 64 values unbounded 1.5x slower, 32 values
// or one chunk of 16 13-20% slower than the waves. The kernel serves any batch, so the rule
// cannot ask how many waves a launch has: the large channels stream, whose batch-1 maps ran the
// same either way.
// Streamed, their units are kGroupBackwardStreamUnitPositions positions (8 chunks: one team
// reduction and one read of the row's partials per 32768 positions): the bf16 seed 4545 -> 4376
// us, [8, 64, 512, 512] 335 -> 331, f16 [1, 128, 512, 512] 95.4 -> 94.3 (ab_bench of
// scripts/specs/groupnorm-backward-16bit-stream.txt, H200, 2026-11-28); 16 chunks the same as 8,
// 8 values a thread in 8 chunks (bounded to 2, 3 or 4) 1.7-1.8x slower.
constexpr int kGroupBackwardStreamValues = 32;
constexpr int64_t kGroupBackwardStream16Channel = int64_t{1} << 18;
constexpr int64_t kGroupBackwardStreamUnitPositions = 32768;
constexpr int kGroupStreamBlocksPerSm = 2;
constexpr int64_t kGroupStreamWaveUnits = int64_t{1} << 18;
constexpr int kGroupStreamMinDramGbps = 4000;
// Rows per wave: as many as keep the wave's x and dy in L2 (the second read, for dx, then comes
// from there), at least one. 16 MiB: a third of the H100's L2, leaving room for the next wave's
// prefetch and dx on its way out (the f32 GroupNorm seed: 1 row of 2 Mi elements per wave,
// bf16: 2). On the H100 waves of 8, 32 and 48 MiB ran the seeds and the diffusion shapes up to
// 1.3x slower (performance-notes, 2026-11-24).
constexpr int64_t kGroupWaveBytes = int64_t{16} << 20;
// f32 waves (their rows are not prefetched, so one wave has L2 to itself) take kGroupWaveBytesF32.
// On the H200 (ab_bench of scripts/specs/groupnorm-backward-f32-waves.txt, two rounds,
// 2026-11-28; performance-notes) f32 [16, 256, 56, 56] ran 85.8 -> 76.6 us, [32, 64, 128, 128]
// 182.7 -> 169.6, [2, 320, 128, 128] 65.6 -> 62.1, [64, 64, 64, 64] 93.7 -> 89.4, [16, 128, 64,
// 64] 49.8 -> 47.8, [8, 512, 28, 28] 25.5 -> 25.8; 32 MiB mixed (22.2 on the last, 82.2 on the
// first); bf16 [16, 256, 56, 56] 3% slower at 24, so 16-bit waves keep 16 MiB. Not measured on
// the H100 (its f32 seed's wave is one row of 16 MiB either way).
constexpr int64_t kGroupWaveBytesF32 = int64_t{24} << 20;
// ... and at most this many units per wave, which bounds the workspace (partials: 2 floats per
// unit, two buffers) where channels are tiny (S = 1: a unit per channel).
constexpr int64_t kGroupWaveUnits = int64_t{1} << 16;
// The largest workspace a backward plan may ask for (floats): larger is refused, not allocated.
constexpr int64_t kBackwardMaxWorkspaceFloats = int64_t{64} << 20;

std::string group_backward(const Problem& pr, const Target& target, KernelPlan& p) {
  const int64_t s = pr.spatial, cg = pr.channels / pr.groups;
  p.vec = vector_width(s, kAccessBytes / size_of(pr.x));
  p.param_vec = 1;
  p.rows_per_item = pr.groups;
  const int64_t vectors = s / p.vec;  // of a channel
  const bool wide = p.vec * size_of(pr.x) == kAccessBytes;
  const bool chunked = size_of(pr.x) == 2 && wide && s >= kGroupBackwardChunkedChannel;
  const bool stream = target.dram_gbps >= kGroupStreamMinDramGbps &&
                      (size_of(pr.x) == 4 ? s >= kGroupBackwardLargeChannel
                                          : chunked && s >= kGroupBackwardStream16Channel);
  const int values = stream && !chunked ? kGroupBackwardStreamValues : kBackwardValues;
  const int aim = std::max(1, values / p.vec);
  p.block_x = int(std::min<int64_t>(kGroupBackwardTeam, pow2_ceil(ceil_div(vectors, aim))));
  p.vectors = std::min<int64_t>(aim, ceil_div(vectors, p.block_x));
  p.block_y = p.rows_per_block = std::max(1, kBackwardBlock / p.block_x);
  const int64_t chunk = int64_t{p.block_x} * p.vectors * p.vec;
  const int64_t unit_positions =
      stream ? kGroupBackwardStreamUnitPositions : kGroupBackwardUnitPositions;
  p.chunks = chunked ? std::clamp<int64_t>(unit_positions / chunk, 1, ceil_div(s, chunk)) : 1;
  const int64_t unit = chunk * p.chunks;
  p.units_per_channel = ceil_div(s, unit);
  const int64_t row_units = cg * p.units_per_channel;
  const int64_t row_bytes = 2 * pr.row_length * size_of(pr.x);
  const int64_t wave_bytes = size_of(pr.x) == 4 ? kGroupWaveBytesF32 : kGroupWaveBytes;
  p.wave_rows =
      stream ? std::max<int64_t>(1, kGroupStreamWaveUnits / row_units)
             : std::max<int64_t>(1, std::min(wave_bytes / row_bytes,
                                             kGroupWaveUnits / std::max<int64_t>(1, row_units)));
  p.load_ahead = stream;
  p.chunks_ahead =
      p.chunks > 1 ? int(std::min<int64_t>(kGroupBackwardChunksAhead, p.chunks - 1)) : 1;
  std::ostringstream why;
  why << "groupnorm backward: units of " << unit << " positions of one channel (" << p.block_x
      << " threads, " << p.vectors * p.vec << " values each of x and dy, " << p.vec * size_of(pr.x)
      << "-byte accesses";
  if (p.chunks > 1) {
    why << ", in " << p.chunks << " chunks of " << chunk
        << ": a thread's sums carried across them, the next " << p.chunks_ahead
        << (p.chunks_ahead == 1 ? " chunk" : " chunks (as raw words)")
        << " loaded while dx of one is stored";
  }
  why << "), " << p.units_per_channel << " per channel, " << row_units << " per group of "
      << pr.row_length << " elements; rows in waves of up to " << p.wave_rows
      << " (the kernel serves any batch; x and dy of a full wave: " << p.wave_rows * row_bytes
      << (stream ? " bytes, read again from DRAM" : " bytes, kept for the second read in L2")
      << "), one grid barrier per wave: each unit's sums of dy and dy * xhat, then dx from its "
         "row's sums (x and dy read twice)";
  if (stream) {
    why << "; streamed (DRAM of " << target.dram_gbps << " GB/s, at least "
        << kGroupStreamMinDramGbps << "): dx's x and dy loaded before the row's sums";
  }
  // While a wave writes dx, the next wave's x and dy are pulled into L2 (sm_90: a bulk prefetch
  // per unit), so DRAM reads overlap the writes: two waves then share L2 (2 x kGroupWaveBytes).
  // On the H100 (normjit bench, this library against the one before, 3 interleaved rounds;
  // performance-notes) that ran the bf16 and f32 seeds 10% and 5% faster, f16 diffusion groups
  // (25 and 4 rows a wave) 18-21%, bf16 [16, 256, 56, 56] 3%; f32 [32, 64, 128, 128] with 32
  // groups (64 rows a wave) 5% slower, so f32 waves of several rows go without.
  p.prefetch = target.sm >= 90 && !stream && (size_of(pr.x) == 2 || p.wave_rows == 1) ? 1 : 0;
  if (p.prefetch) why << "; the next wave's x and dy are prefetched into L2 during its dx";
  if (chunked) {
    p.min_blocks_per_sm = kGroupBackwardChunkedBlocksPerSm;
  } else if (stream) {
    p.min_blocks_per_sm = kGroupStreamBlocksPerSm;
  } else if (size_of(pr.x) == 2) {  // 16 values a thread in units of one chunk
    p.min_blocks_per_sm = kGroupBackwardSmallBlocksPerSm;
  }
  if (p.min_blocks_per_sm > 1) {
    why << "; launch bounds of " << p.min_blocks_per_sm << " CTAs an SM (caps the registers)";
  }
  // Bounded kernels' L2 waves are shrunk to whole rounds of the units their co-resident CTAs
  // run at once (the launch bounds fix how many: SMs x bound x units a CTA), so that no wave
  // ends in a nearly idle round (scripts/wave_rounds.py prints the rounds). On the H200 (ab_bench
  // of scripts/specs/groupnorm-backward.txt and -narrow.txt, two rounds, 2026-11-28;
  // performance-notes) bf16 [4, 64, 264, 264] ran 79.1 -> 66.1 us (280 units on 264 CTAs: 240),
  // [1, 64, 257, 257] 33.8 -> 28.0, [2, 32, 1, 65537] 33.9 -> 30.4, [4, 64, 263, 263] 100.8 ->
  // 96.4, [16, 256, 56, 56] 54.0 -> 49.2; f16 [1, 128, 255, 255] 40.6 -> 43.1 (its 32 rows in
  // 3 waves of 12, not 2 of 16: the kernel serves any batch, so the rule cannot count waves).
  // With the chunks ahead above (ab_bench against 15a4bf9, same day) bf16 [4, 64, 264, 264] ran
  // 78.9 -> 60.4 us, [16, 256, 56, 56] 53.8 -> 49.0, f16 [2, 320, 128, 128] 38.8 -> 35.7, f16
  // [1, 128, 255, 255] 45.2 -> 43.0; the bf16 seed 4372 -> 4387, f32 [32, 64, 128, 128] 170.6 ->
  // 172.3 (neither is cut: the one-chunk buffers' form, group_backward.cuh).
  if (!stream && p.min_blocks_per_sm > 1) {
    const int64_t slots = int64_t{target.sm_count} * p.min_blocks_per_sm * p.rows_per_block;
    const int64_t rounds = p.wave_rows * row_units / slots;
    const int64_t fitted = rounds * slots / row_units;
    if (fitted >= 1 && fitted < p.wave_rows) {
      p.wave_rows = fitted;
      why << "; waves cut to " << fitted << " rows: " << rounds
          << (rounds == 1 ? " round" : " whole rounds") << " of " << slots
          << " units (the CTAs the launch bounds let the device hold)";
    }
  }
  if (pr.weight || pr.bias) {
    why << "; dweight and dbias summed per channel over n in order by one owner thread each "
           "(deterministic, the same for any grid; no float atomics)";
  }
  return why.str();
}

int64_t group_backward_workspace_floats(const KernelPlan& p) {
  const Problem& pr = p.problem;
  const int params = params_of(pr);
  const int64_t cg = pr.channels / pr.groups;
  const int64_t partials = padded_floats(p.wave_rows * cg * p.units_per_channel * 2);
  const int64_t channel_sums = params > 0 ? padded_floats(p.wave_rows * cg * 2) : 0;
  const int64_t accumulators = params > 0 ? padded_floats(2 * pr.channels) : 0;
  return kBackwardHeaderFloats + 2 * partials + 2 * channel_sums + accumulators;
}

// ---------------------------------------------------------------------------------------
// kGroupNhwcBackward

// A CTA of the channels-last GroupNorm backward: TX = C / V threads across a position's
// channels (one 16-byte vector each where C allows), TY across positions, about
// kGroupNhwcBackwardThreads in all (at least a warp: step 2 sums columns a warp each). Step 1's
// shared memory holds two floats per thread and channel of its vector ([TY][C] twice): TX is at
// most kGroupNhwcBackwardMostVectors (16-bit C up to 4096 in 16-byte vectors; f32 up to 2048),
// the CTA's static shared memory at most kGroupNhwcBackwardSmemBytes.
constexpr int64_t kGroupNhwcBackwardThreads = 256;
constexpr int64_t kGroupNhwcBackwardMostVectors = 512;
constexpr int64_t kGroupNhwcBackwardSmemBytes = 48 * 1024;
// Units a wave aims at per SM (each a CTA's work between barriers), so that the co-resident
// CTAs all take part and the last round of units is short. Positions per thread a unit at least
// kGroupNhwcBackwardMinPositions (one batch of loads; fewer where the item has fewer positions),
// so that a unit's partials (two floats a channel and a group) stay small beside its x and dy.
// Waves of at most kGroupNhwcBackwardOneRoundItems items aim at one round instead: a full wave's
// units as many as the CTAs the launch bounds let the device hold (SMs x bound), so no wave ends
// in a part-filled second round. Measured on the H100 (scripts/ab_bench.py, two rounds,
// 2026-12-05; performance-notes, "Session 67"): first the constants from the environment
// (scripts/experiments/group-nhwc-backward-knobs.patch) on scripts/specs/groupnorm-nhwc-backward-
// sd.txt, where 2 units an SM won on the waves of 1-3 items and lost on those of 6 and 12
// ([2, 640, 32, 32] 14.2 -> 15.0 us, [2, 1280, 16, 16] 16.4 -> 20.4: the kernel serves any
// batch, and a batch of 2 fills a third of such a wave's round, so those keep 4 units an SM);
// then this rule against the constants before it: bf16 [8, 1280, 32, 32] 84.5 -> 67.3 us (513
// units a wave on 396 CTAs -> 384), [8, 320, 64, 64] 56.8 -> 51.2, with SiLU 67.4 -> 59.3,
// [2, 320, 64, 64] 19.3 -> 17.3, the VAE's [1, 512, 128, 128] 39.2 -> 37.2 and [1, 128, 512,
// 512] 125.3 -> 126.8 (geomean 0.94 over the 10); f16 [2, 512, 64, 64] 23.4 -> 20.4, f32 [2,
// 320, 64, 64] 24.8 -> 23.0, bf16 [4, 64, 256, 256] 68.9 -> 65.5, the rows of 4 and 6 items a
// wave unchanged (scripts/specs/groupnorm-nhwc-backward-rounds.txt, geomean 0.96 over 9).
constexpr int64_t kGroupNhwcBackwardUnitsPerSm = 4;
constexpr int64_t kGroupNhwcBackwardOneRoundItems = 3;
constexpr int64_t kGroupNhwcBackwardMinPositions = 4;
// Registers a thread may take (the launch bounds' CTAs an SM follow): unbounded, ptxas took
// 162 for bf16 [2, 320, 64, 64] with 4 positions of x and dy loaded together (one CTA of 240
// threads an SM); with 2 (group_nhwc_backward.cuh) 112-125 and no spills at 128 (`normjit dump
// --emit resources`, sm_90: bf16/f16/f32, C 96 to 4096).
constexpr int64_t kGroupNhwcBackwardRegisters = 128;
// A wave's floats in the workspace at most (partials and means), which bounds it where items are
// tiny.
constexpr int64_t kGroupNhwcBackwardWaveFloats = int64_t{4} << 20;

int64_t group_nhwc_backward_smem(int64_t ty, int64_t channels, int64_t groups) {
  return 2 * ty * channels * 4 + groups * 8;
}

std::string group_nhwc_backward(const Problem& pr, const Target& target, KernelPlan& p) {
  const int64_t c = pr.channels, s = pr.spatial, groups = pr.groups;
  p.vec = vector_width(c, kAccessBytes / size_of(pr.x));
  p.param_vec = 1;
  p.rows_per_item = groups;
  const int64_t tx = c / p.vec;
  if (tx > kGroupNhwcBackwardMostVectors) {
    throw_unsupported("channels", std::to_string(c),
                      "backward=true with layout=nhwc covers a position's channels with one "
                      "vector a thread, at most " +
                          std::to_string(kGroupNhwcBackwardMostVectors) + " vectors of " +
                          std::to_string(p.vec) + " (C = " + std::to_string(c) +
                          "); leave layout out or nchw (the channels-first kernel)");
  }
  const int64_t ty = std::max(ceil_div(32, tx), std::min(kGroupNhwcBackwardThreads / tx, s));
  if (group_nhwc_backward_smem(ty, c, groups) > kGroupNhwcBackwardSmemBytes) {
    throw_unsupported(
        "groups", std::to_string(groups),
        "backward=true with layout=nhwc keeps a CTA's sums of its " + std::to_string(c) +
            " channels and " + std::to_string(groups) +
            " groups in shared memory: " + std::to_string(group_nhwc_backward_smem(ty, c, groups)) +
            " bytes, more than " + std::to_string(kGroupNhwcBackwardSmemBytes) +
            "; leave layout out or nchw (the channels-first kernel)");
  }
  p.block_x = int(tx);
  p.block_y = p.rows_per_block = int(ty);
  // Items per wave: as many as keep the wave's x and dy in L2 (as the channels-first kernel's
  // rows, kGroupWaveBytes), then units of the fewest positions a thread that still give the wave
  // its units, bounded by the wave's partials.
  const int64_t item_bytes = 2 * c * s * size_of(pr.x);
  const int64_t wave_bytes = size_of(pr.x) == 4 ? kGroupWaveBytesF32 : kGroupWaveBytes;
  int64_t items = std::max<int64_t>(1, wave_bytes / item_bytes);
  // Launch bounds of as many CTAs an SM as leave kGroupNhwcBackwardRegisters registers a thread.
  const int64_t warps = ceil_div(tx * ty, 32);
  p.min_blocks_per_sm =
      int(std::max<int64_t>(1, kSmRegisters / (kGroupNhwcBackwardRegisters * warps * 32)));
  const bool one_round = items <= kGroupNhwcBackwardOneRoundItems;
  const int64_t aim =
      int64_t{target.sm_count} * (one_round ? p.min_blocks_per_sm : kGroupNhwcBackwardUnitsPerSm);
  const int64_t units_aim = std::max<int64_t>(1, ceil_div(aim, items));
  const int64_t least = std::min(kGroupNhwcBackwardMinPositions, ceil_div(s, ty));
  p.vectors = std::max(least, ceil_div(s, ty * units_aim));
  p.units_per_channel = ceil_div(s, ty * p.vectors);
  // An item's floats in the workspace: its units' partials (two a group, and a channel with
  // parameters) and its groups' means.
  const int64_t item_floats =
      p.units_per_channel * 2 * (groups + (params_of(pr) > 0 ? c : 0)) + 2 * groups;
  items = std::max<int64_t>(1, std::min(items, kGroupNhwcBackwardWaveFloats / item_floats));
  p.wave_rows = items;
  std::ostringstream why;
  why << "groupnorm backward, channels last: a CTA of " << tx << " x " << ty
      << " threads covers every channel of " << ty << " positions at a time (" << p.vec
      << " channels a thread, " << p.vec * size_of(pr.x) << "-byte accesses); units of "
      << ty * p.vectors << " positions of an item (" << p.vectors << " a thread), "
      << p.units_per_channel << " per item; items in waves of up to " << items
      << " (the kernel serves any batch; x and dy of a full wave: " << items * item_bytes
      << (items * item_bytes <= wave_bytes ? " bytes, kept for the second read in L2)"
                                           : " bytes, more than L2 keeps: read again from DRAM)")
      << ", two grid barriers per wave: each unit's sums "
         "of dy and dy * xhat per channel and per group, then each group's (and channel's) "
         "unit sums added by a warp in a fixed order, then dx from the group's sums (x and dy "
         "read twice)";
  if (params_of(pr) > 0) {
    why << "; dweight and dbias summed per channel over n in order by one warp each "
           "(deterministic, the same for any grid; no float atomics)";
  }
  if (p.min_blocks_per_sm > 1) {
    why << "; launch bounds of " << p.min_blocks_per_sm << " CTAs an SM (caps the registers)";
  }
  if (one_round) {
    why << "; a full wave's units sized to one round of the " << aim
        << " CTAs the launch bounds let the device hold";
  }
  return why.str();
}

int64_t group_nhwc_backward_workspace_floats(const KernelPlan& p) {
  const Problem& pr = p.problem;
  const bool params = params_of(pr) > 0;
  const int64_t r = p.wave_rows, t = p.units_per_channel;
  const int64_t group_partials = padded_floats(r * pr.groups * t * 2);
  const int64_t channel_partials = params ? padded_floats(r * pr.channels * t * 2) : 0;
  const int64_t group_means = padded_floats(r * pr.groups * 2);
  const int64_t accumulators = params ? padded_floats(pr.channels * 2) : 0;
  return kBackwardHeaderFloats + group_partials + channel_partials + group_means + accumulators;
}

// ---------------------------------------------------------------------------------------
// kChannelsBackward

// Values of each of x and dy a thread of the channel-form backward holds: twice the row
// kernels' (kBackwardValues), so that a tile has as many positions in 16-bit dtypes as in f32.
// On the H100 (normjit bench of scripts/specs/channels-backward.txt, the values switched by a
// throwaway environment variable; performance-notes "Channel forms on small maps") 32 ran the
// bf16 RMSNorm seed 1.47x faster (5739 -> 3910 us: tiles of 64 positions over 32 threads of 2
// channels each had left it at 67% of copy), LayerNorm2d on ConvNeXt's 56x56 and 7x7 maps 5-11%
// faster, the other rows the same (no spills: 125 registers at 256 threads).
constexpr int kChannelsBackwardValues = 32;

std::string channels_backward(const Problem& pr, KernelPlan& p) {
  const int64_t c = pr.channels, s = pr.spatial;
  p.vec = vector_width(s, kAccessBytes / size_of(pr.x));
  p.param_vec = 1;
  p.block_y = std::min(32, pow2_ceil(ceil_div(c * p.vec, kChannelsBackwardValues)));
  p.block_x = std::max(8, kBackwardBlock / p.block_y);
  const int64_t per_thread = ceil_div(c, p.block_y);
  p.cached = per_thread * p.vec <= kChannelsBackwardValues;
  p.blocks_per_item = ceil_div(s, int64_t{p.block_x} * p.vec);
  std::ostringstream why;
  why << "channel-form backward: each thread owns " << p.vec << " contiguous spatial positions ("
      << p.vec * size_of(pr.x) << "-byte accesses) and " << per_thread << " of the " << c
      << " channels, " << p.block_y << " threads share a position; CTAs loop over tiles of "
      << int64_t{p.block_x} * p.vec << " positions; dx from the position's sums over C"
      << (p.cached ? " (x and dy held in registers)"
                   : " (too many channels for registers: x "
                     "and dy are read twice)");
  if (pr.weight || pr.bias) {
    why << "; each CTA sums " << (pr.bias ? "dweight and dbias" : "dweight")
        << " of its tiles in f32, then the CTAs' partials are added in a fixed order after a grid "
           "barrier (cooperative launch; deterministic, no float atomics)";
  }
  return why.str();
}

// ---------------------------------------------------------------------------------------
// kGroupNhwc

// A CTA of up to kGroupThreads threads: TX = C/V across the channels of a position, TY across
// positions. Its shared memory (static) holds a float per thread and channel of its vector
// ([TY][C]) and two per group, within kGroupSmemBytes.
constexpr int64_t kGroupThreads = 1024;
constexpr int64_t kGroupSmemBytes = 46 * 1024;
// Registers (32-bit words) a thread holds its values in: at most kGroupWords (x read once; the
// item then fits on the chip).
constexpr int64_t kGroupWords = 32;
// The least x a CTA of the channels-last kernel takes when an item is split: 8 positions of
// 1280 f16 channels (20 KiB) ran fastest of the segments measured (performance-notes).
constexpr int64_t kGroupMinSegmentBytes = 16 * 1024;
constexpr int64_t kGroupStreamVectors = 4;  // positions per thread per piece when streamed
// Channels-last GroupNorm: threads that hold at least kNhwcAsideFrom positions in registers keep
// kNhwcAside of them in dynamic shared memory instead (KernelPlan::nhwc_aside). Their spills
// (`normjit dump --emit resources`, f16 with SiLU) fall from 88 to 52 bytes stored at [1, 512,
// 128, 128] (8 positions), 52 to 36 at [2, 320, 128, 128] (5); on the H200 0.94x and 0.89x the
// time, and 1.06x at [1, 512, 64, 64] (4: not taken) (performance-notes, "Single f32 -> bf16
// conversions by one instruction ...; held positions in shared memory ...").
constexpr int64_t kNhwcAsideFrom = 5;
constexpr int kNhwcAside = 2;

// Registers beyond its held values a thread of the channels-last kernel takes (addresses,
// statistics, parameters): with 32 words held in CTAs of 1024 threads ptxas spilled 52 bytes
// (`normjit dump --emit resources` of f16 [1, 512, 64, 64] in tiles of one group).
constexpr int64_t kGroupTileOverheadWords = 40;
constexpr int64_t kGroupTileMinAccessBytes = 8;

// A tile of whole groups (kTiles > 1) that one CTA covers at every position of an item
// (nhwc_tile), or `chunks` CTAs that exchange the tile's partials (exchange_tile).
struct NhwcTile {
  int64_t groups = 0;  // groups per tile
  int vec = 1;
  int64_t tx = 0, ty = 0, k = 0;  // threads across the tile's channels, across positions;
                                  // positions per thread
  int64_t chunks = 1;             // CTAs a tile's positions are split over (exchange_tile)
};

// The vector of the channels-last kernel over `channels` contiguous channels of groups of
// `per_group`: 16-byte accesses, narrowed to stay in one group where 8-byte ones remain.
int nhwc_vector(const Problem& pr, int64_t channels, int64_t per_group) {
  int vec = vector_width(channels, kAccessBytes / size_of(pr.x));
  if (per_group % vec != 0 && vector_width(per_group, vec) * size_of(pr.x) >= 8) {
    vec = vector_width(per_group, vec);
  }
  return vec;
}

// Shared memory (bytes) of a CTA of `rows` position rows over `channels` channels in `groups`
// groups (group_nhwc.cuh: a float per thread and channel, two per group).
int64_t nhwc_smem(int64_t rows, int64_t channels, int64_t groups) {
  return rows * channels * 4 + groups * 8;
}

// The tile of the fewest groups whose CTA holds all S positions of the item in registers (at
// most kGroupWords words a thread, kGroupThreads threads) with accesses of at least
// kGroupTileMinAccessBytes, if any. On the H100 (normjit bench, f16 SD UNet maps of two items,
// G = 32, tiles of 1, 2, 4 and 8 groups against the exchange; performance-notes) one group a
// tile ran 8x8 maps of 1280 channels in 5.0 us where the exchange took 10.4, 16x16 in 7.6
// (11.7) and 32x32 of 640 in 10.3 (14.4); larger tiles fell between the two. 64x64 maps of 320
// channels (4-byte accesses of a group's 10 channels) ran 19.3 against 17.0: refused.
std::optional<NhwcTile> nhwc_tile(const Problem& pr) {
  const int64_t per_group = pr.channels / pr.groups;
  for (int64_t gt = 1; gt < pr.groups; ++gt) {
    if (pr.groups % gt != 0) continue;
    NhwcTile t;
    t.groups = gt;
    const int64_t channels = gt * per_group;
    t.vec = nhwc_vector(pr, channels, per_group);
    if (t.vec * size_of(pr.x) < kGroupTileMinAccessBytes) continue;
    t.tx = channels / t.vec;
    const int per_word = size_of(pr.x) == 2 && t.vec % 2 == 0 ? 2 : 1;
    const int64_t k_most = std::max<int64_t>(1, kGroupWords * per_word / t.vec);
    // The fewest positions per thread (the most threads loading at once) that fit the CTA, its
    // held words and kGroupTileOverheadWords more within a thread's share of the SM's registers.
    for (int64_t k = 1; k <= k_most; ++k) {
      const int64_t ty = std::max(ceil_div(pr.spatial, k), ceil_div(32, t.tx));
      const int64_t threads = t.tx * ty;
      const int64_t words = ceil_div(k * t.vec, per_word);
      if (threads > kGroupThreads || nhwc_smem(ty, channels, gt) > kGroupSmemBytes ||
          words + kGroupTileOverheadWords > kSmRegisters / (ceil_div(threads, 32) * 32)) {
        continue;
      }
      t.k = ceil_div(pr.spatial, ty);
      t.ty = ceil_div(pr.spatial, t.k);
      t.ty = std::max(t.ty, ceil_div(32, t.tx));
      return t;
    }
  }
  return std::nullopt;
}

// Groups a tile of an exchanged channels-last item takes (x in registers over several CTAs):
// each tile of whole groups runs over its own CTAs, which publish and merge only its groups'
// partials, not all G of them. On the H200 (normjit bench, two rounds, the 14 SD UNet and VAE
// maps of scripts/specs/groupnorm-nhwc-exchange.txt, G = 32; performance-notes) tiles of 8
// groups ran 0.72-0.96x the time of CTAs over all channels (the VAE's f16 [1, 512, 128, 128]
// 24.0 -> 21.4 us), geometric mean 0.90; tiles of 4 groups 0.92 and of 16 groups 0.91.
constexpr int64_t kGroupExchangeTileGroups = 8;

// The tile of kGroupExchangeTileGroups groups an item whose CTAs exchange their partials is
// cut into (NhwcTile::chunks CTAs a tile, x held in registers), where its groups make at least
// two such tiles and the item's tiles x chunks stay within `capacity` co-resident CTAs.
std::optional<NhwcTile> exchange_tile(const Problem& pr, int64_t capacity) {
  const int64_t gt = kGroupExchangeTileGroups, per_group = pr.channels / pr.groups;
  if (pr.groups % gt != 0 || pr.groups / gt < 2) return std::nullopt;
  const int64_t s = pr.spatial, tiles = pr.groups / gt, channels = gt * per_group;
  NhwcTile t;
  t.groups = gt;
  t.vec = nhwc_vector(pr, channels, per_group);
  t.tx = channels / t.vec;
  int64_t ty = std::max<int64_t>(kGroupThreads / t.tx, ceil_div(32, t.tx));
  while (ty > 1 && nhwc_smem(ty, channels, gt) > kGroupSmemBytes) --ty;
  if (nhwc_smem(ty, channels, gt) > kGroupSmemBytes || t.tx * ty < 32) return std::nullopt;
  const int per_word = size_of(pr.x) == 2 && t.vec % 2 == 0 ? 2 : 1;
  const int64_t k_most = std::max<int64_t>(1, kGroupWords * per_word / t.vec);
  const auto ctas = [&](int64_t k) { return tiles * ceil_div(s, ty * k); };
  if (ctas(k_most) > capacity) return std::nullopt;
  // As the item over all channels below: the fewest positions a thread that let
  // kGroupWaveItems items share one wave (else the item alone), then even segments.
  const int64_t wave =
      ctas(k_most) * kGroupWaveItems <= capacity ? capacity / kGroupWaveItems : capacity;
  int64_t k = k_most;
  while (k > 1 && ctas(k - 1) <= wave) --k;
  t.chunks = ceil_div(s, ty * k);
  t.k = ceil_div(s, t.chunks * ty);
  t.ty = std::max(ceil_div(s, t.chunks * t.k), ceil_div(32, t.tx));
  return t;
}

std::string group_nhwc(const Problem& pr, const Target& target, KernelPlan& p) {
  const int64_t c = pr.channels, s = pr.spatial, groups = pr.groups;
  const std::string shape_note = "C = " + std::to_string(c) + ", " + std::to_string(groups) +
                                 " groups, S = " + std::to_string(s);
  // Vectors within one group, where that keeps 8-byte accesses: a vector spanning groups holds
  // each channel's statistics and parameters (on the VAE's C/G = 4 in 16 bits, 16-byte vectors
  // spilled ~100 bytes of registers, `normjit dump --emit resources`; 8-byte ones fewer).
  p.vec = nhwc_vector(pr, c, c / groups);
  p.param_vec = p.vec;
  const int64_t tx = c / p.vec;
  if (tx > kGroupThreads) {
    throw_unsupported("shape", "(" + shape_note + ")",
                      "layout=nhwc groupnorm covers a position's channels with one row of a CTA: "
                      "at most " +
                          std::to_string(kGroupThreads) + " accesses of " + std::to_string(p.vec) +
                          " channels; " + std::to_string(c) + " channels are not yet supported");
  }
  const auto smem = [&](int64_t rows) { return nhwc_smem(rows, c, groups); };
  // No more position rows than the item has, and at least a warp.
  int64_t ty = std::max(std::min(kGroupThreads / tx, s), ceil_div(32, tx));
  while (ty > 1 && smem(ty) > kGroupSmemBytes) --ty;
  if (smem(ty) > kGroupSmemBytes || tx * ty < 32) {
    throw_unsupported("shape", "(" + shape_note + ")",
                      "layout=nhwc groupnorm needs a CTA of at least 32 threads whose partials "
                      "(a float per channel, two per group) fit " +
                          std::to_string(kGroupSmemBytes) +
                          " bytes of shared memory; these channels are not yet supported");
  }
  const int per_word = size_of(pr.x) == 2 && p.vec % 2 == 0 ? 2 : 1;  // 16-bit pairs packed
  const int64_t k_most = std::max<int64_t>(1, kGroupWords * per_word / p.vec);
  const int64_t capacity = split_capacity(target);
  const bool in_registers = ceil_div(s, ty * k_most) <= capacity;
  int64_t k = 0;
  if (in_registers) {
    // The smallest segments that let kGroupWaveItems items share one wave of co-resident CTAs
    // (where registers cannot hold that, the item alone), fewer position rows per CTA before
    // more positions per thread, then even segments. Each wave costs several microseconds
    // beyond its bytes (as the split rows' waves above): on the H100 (normjit bench, segments
    // switched by a throwaway environment variable; performance-notes) two items of 8x8,
    // 16x16 and 32x32 maps ran 13.9 -> 10.3, 15.1 -> 12.0 and 15.6 -> 14.5 us with smaller
    // segments in one wave, and 19.8 -> 29 us where they took two.
    const int64_t per_wave = capacity / kGroupWaveItems;
    int64_t target = ceil_div(s, per_wave);
    if (target > ty * k_most) target = ceil_div(s, capacity);
    // ... but a CTA's share stays at least kGroupMinSegmentBytes of x (a small item needs no
    // exchange at all).
    target = std::min(s, std::max(target, ceil_div(kGroupMinSegmentBytes, c * size_of(pr.x))));
    k = ceil_div(target, ty);
    ty = std::max(ceil_div(target, k), ceil_div(32, tx));
    const int64_t chunks = ceil_div(s, ty * k);
    k = ceil_div(s, chunks * ty);
  }
  p.block_x = int(tx);
  p.block_y = int(ty);
  p.split_blocks_per_sm = kSplitBlocksPerSm;
  std::ostringstream why;
  why << "layout nhwc: each CTA covers all " << c << " channels (" << tx << " threads of "
      << p.vec * size_of(pr.x) << "-byte accesses along the contiguous channels) of " << ty
      << " positions at a time; ";
  // Items the exchange would split: where a tile of whole groups holds every position of the
  // item, N x (G / tile groups) CTAs need no exchange; else tiles of kGroupExchangeTileGroups
  // groups still exchange, each over its own CTAs.
  const bool exchanged = in_registers && ceil_div(s, ty * k) > 1;
  std::optional<NhwcTile> tile = exchanged ? nhwc_tile(pr) : std::nullopt;
  if (exchanged && !tile) tile = exchange_tile(pr, capacity);
  if (tile) {
    p.vec = p.param_vec = tile->vec;
    p.block_x = int(tile->tx);
    p.block_y = int(tile->ty);
    p.blocks_per_item = groups / tile->groups;
    p.vectors = tile->k;
    p.pieces = 1;
    p.segment = tile->ty * tile->k;
    p.split_chunks = tile->chunks;
    why.str("");
    why << "layout nhwc: each CTA covers a tile of " << tile->groups << " group"
        << (tile->groups == 1 ? "" : "s") << " (" << tile->groups * (c / groups) << " channels, "
        << tile->tx << " threads of " << tile->vec * size_of(pr.x)
        << "-byte accesses along the contiguous channels) at ";
    if (tile->chunks == 1) {
      why << "all " << s << " positions of an item";
    } else {
      why << p.segment << " positions (the item's " << s << " split over " << tile->chunks
          << " CTAs a tile)";
    }
    why << ", " << tile->ty << " at a time, " << tile->k
        << " per thread kept in registers (x read once): " << p.blocks_per_item * p.split_chunks
        << " CTAs per item";
  } else if (in_registers) {
    p.vectors = k;
    p.pieces = 1;
    p.segment = ty * k;
    p.split_chunks = ceil_div(s, p.segment);
    why << "an item (n) split over " << p.split_chunks << " CTAs of " << p.segment << " positions, "
        << k << " per thread kept in registers (x read once)";
  } else {
    // Larger than the chip holds: every co-resident CTA streams its segment twice.
    const int64_t k = std::min(kGroupStreamVectors, ceil_div(s, ty));
    const int64_t piece = ty * k;
    p.vectors = k;
    p.pieces = int(ceil_div(ceil_div(s, capacity), piece));
    p.segment = p.pieces * piece;
    p.split_chunks = ceil_div(s, p.segment);
    why << "an item (n) larger than the chip holds, split over " << p.split_chunks
        << " co-resident CTAs of " << p.segment << " positions, each streaming its segment "
        << "twice in " << p.pieces << " pieces of " << k
        << " positions per thread (statistics, then normalize: x is read twice)";
  }
  if (p.split_chunks > 1) {
    why << "; each CTA's per-group (mean, M2) exchanged through the workspace and merged with "
           "Chan's formula in a fixed order (cooperative launch, deterministic)";
  } else if (p.blocks_per_item == 1) {
    why << "; one CTA per item, no exchange";
  } else {
    why << ", no exchange";
  }
  if (pr.groups > 0 && (pr.channels / pr.groups) % p.vec != 0) {
    why << "; a vector may span groups (C/G = " << pr.channels / pr.groups
        << "), each channel taking its group's statistics";
  }
  // Threads holding kNhwcAsideFrom or more positions spill (64 registers at 1024 threads, the
  // SiLU epilogue's values among them): the last kNhwcAside of them go to dynamic shared memory.
  // 16-bit x only: the rule's measurements and GPU tests are f16 and bf16.
  const int words = size_of(pr.x) == 2 && p.vec % 2 == 0 ? int(p.vec / 2) : int(p.vec);
  // Beside the kernel's static shared memory (at most 48 KiB) within what a CTA may have (an
  // SM's less 1 KiB): not on 64 KiB parts (sm_75).
  const int64_t aside_bytes = int64_t{kNhwcAside} * p.block_x * p.block_y * words * 4;
  const int64_t cta_smem = (int64_t{arch_facts(target.sm).smem_per_sm_kib} - 1) * 1024;
  if (size_of(pr.x) == 2 && p.pieces == 1 && p.vectors >= kNhwcAsideFrom && words % 4 == 0 &&
      aside_bytes + 48 * 1024 <= cta_smem) {
    p.nhwc_aside = kNhwcAside;
    p.smem_bytes = int(aside_bytes);
    why << "; " << p.nhwc_aside << " of a thread's " << p.vectors
        << " positions held in shared memory (" << p.smem_bytes << " bytes), not registers";
  }
  return why.str();
}

// What the variant axes add to the plan's one-line reason.
std::string variant_note(const Problem& pr) {
  std::string out;
  if (pr.residual && pr.backward) {
    out += "; x is h = x + residual, and h's gradient from its other uses is added to dx";
  } else if (pr.residual) {
    out += "; h = x + residual (" + std::string(to_string(*pr.residual)) +
           ") normalized and written back in the same pass";
  }
  if (pr.param != pr.x && (pr.weight || pr.bias)) {
    out += std::string("; parameters in ") + to_string(pr.param);
  }
  if (pr.weight_offset != 0.0)
    out += "; weight used as " + format_double(pr.weight_offset) + " + w";
  if (pr.activation != Activation::kNone && pr.backward) {
    out += std::string("; dy taken through ") + to_string(pr.activation) +
           "'s derivative at the forward's xhat * w + b, in the same pass";
  } else if (pr.activation != Activation::kNone) {
    out += std::string("; ") + to_string(pr.activation) + " applied to y in the same pass";
  }
  if (pr.y != pr.x) {
    out += std::string("; y in ") + to_string(pr.y) +
           (is_fp8(pr.y) ? " (times the launch's scale, saturated)" : "");
  }
  if (pr.save_stats) out += pr.op == Op::kRmsNorm ? "; rstd saved" : "; mean and rstd saved";
  return out;
}

}  // namespace

Problem Problem::of(const NormSpec& spec) {
  Problem pr;
  pr.op = spec.op;
  pr.x = spec.dtype;
  pr.y = spec.out_type();
  pr.param = spec.param_type();
  pr.residual = spec.residual;
  pr.channel_form = spec.op != Op::kGroupNorm && spec.channel_form() && !spec.channel_rows();
  pr.channel_rows = spec.channel_rows();
  pr.nhwc = spec.nhwc();
  pr.row_length = spec.row_length();
  if (spec.channel_form()) {
    pr.channels = spec.channels();
    // Channels last (or S = 1), the channel forms are rows of C: their kernel is the same for
    // every S.
    pr.spatial = spec.channel_rows() ? 1 : spec.spatial();
  }
  pr.groups = spec.op == Op::kGroupNorm ? spec.groups : 0;
  pr.weight = spec.affine != Affine::kNone;
  pr.bias = spec.affine == Affine::kBoth;
  pr.weight_offset = spec.weight_offset == 0 ? 0.0 : spec.weight_offset;  // -0: no offset
  pr.activation = spec.activation;
  pr.save_stats = spec.save_stats;
  pr.backward = spec.backward;
  return pr;
}

int64_t KernelPlan::grid(int64_t batch, int64_t co_resident) const {
  const int64_t rows = batch * rows_per_item;
  switch (strategy) {
    case Strategy::kChannels:
    case Strategy::kChannelsSlab:
      return blocks_per_item * batch;
    case Strategy::kRowRegisters:
      return ceil_div(rows, rows_per_block);
    case Strategy::kRowStream:
    case Strategy::kRowSplit:
    case Strategy::kRowSplitBackward:
      return std::min(co_resident / split_chunks, rows) * split_chunks;
    case Strategy::kRowBackward: {
      const int64_t owning = ceil_div(rows, int64_t{rows_per_block} * kBackwardRowsPerTeam);
      const int64_t filling = std::min<int64_t>(fill_ctas, ceil_div(rows, rows_per_block));
      return std::max<int64_t>(1, std::min(co_resident, std::max(owning, filling)));
    }
    case Strategy::kGroupBackward: {
      const int64_t units =
          std::min(rows, wave_rows) * (problem.channels / problem.groups) * units_per_channel;
      return std::max<int64_t>(1, std::min(co_resident, ceil_div(units, rows_per_block)));
    }
    case Strategy::kChannelsBackward:
      return std::max<int64_t>(1, std::min(co_resident, blocks_per_item * batch));
    case Strategy::kGroupNhwcBackward:
      return std::max<int64_t>(
          1, std::min(co_resident, std::min(batch, wave_rows) * units_per_channel));
    case Strategy::kGroupNhwc:
      return cooperative() ? std::min(co_resident / exchange_ctas(), batch) * exchange_ctas()
                           : batch * blocks_per_item;
  }
  return 0;
}

int64_t KernelPlan::workspace_slot_floats() const {
  if (strategy == Strategy::kRowBackward || strategy == Strategy::kChannelsBackward) {
    // One CTA's partial sums: dweight, then dbias, each as long as the weight, rounded up.
    const int64_t length =
        strategy == Strategy::kRowBackward ? problem.row_length : problem.channels;
    return cooperative() ? (problem.weight + problem.bias) * padded_floats(length) : 0;
  }
  if (strategy == Strategy::kGroupBackward || strategy == Strategy::kGroupNhwcBackward) {
    return 0;  // no per-CTA slots
  }
  if (strategy == Strategy::kRowSplitBackward) return row_split_backward_slot_floats(*this);
  // Two u64 counters, then 4 generations of G x P partials of one u64 (group_nhwc.cuh).
  if (strategy == Strategy::kGroupNhwc) {
    return cooperative() ? 4 + 4 * 2 * problem.groups * split_chunks : 0;
  }
  // Two u64 counters, then 4 generations of P partials in 16-byte slots (exchange.cuh).
  return cooperative() ? 16 * split_chunks + 4 : 0;
}

int64_t KernelPlan::workspace_header_floats() const {
  const bool backward =
      strategy == Strategy::kRowBackward || strategy == Strategy::kChannelsBackward ||
      strategy == Strategy::kGroupBackward || strategy == Strategy::kRowSplitBackward ||
      strategy == Strategy::kGroupNhwcBackward;
  return backward && cooperative() ? kBackwardHeaderFloats : 0;
}

int64_t KernelPlan::workspace_floats(int64_t co_resident) const {
  if (!cooperative()) return 0;
  // The grid barrier's counter, then a partial per CTA (at most co_resident CTAs).
  if (strategy == Strategy::kRowBackward || strategy == Strategy::kChannelsBackward)
    return workspace_header_floats() + co_resident * workspace_slot_floats();
  if (strategy == Strategy::kGroupBackward) return group_backward_workspace_floats(*this);
  if (strategy == Strategy::kGroupNhwcBackward) {
    return group_nhwc_backward_workspace_floats(*this);
  }
  // kRowSplitBackward: the grid barrier's counter, then a slot per P co-resident CTAs.
  if (strategy == Strategy::kRowSplitBackward)
    return workspace_header_floats() + co_resident / split_chunks * workspace_slot_floats();
  return co_resident / exchange_ctas() * workspace_slot_floats();
}

const char* to_string(Strategy strategy) {
  switch (strategy) {
    case Strategy::kChannels:
      return "channels";
    case Strategy::kRowRegisters:
      return "row-registers";
    case Strategy::kRowSplit:
      return "row-split";
    case Strategy::kRowStream:
      return "row-stream";
    case Strategy::kRowBackward:
      return "row-backward";
    case Strategy::kGroupBackward:
      return "group-backward";
    case Strategy::kChannelsBackward:
      return "channels-backward";
    case Strategy::kGroupNhwc:
      return "group-nhwc";
    case Strategy::kRowSplitBackward:
      return "row-split-backward";
    case Strategy::kChannelsSlab:
      return "channels-slab";
    case Strategy::kGroupNhwcBackward:
      return "group-nhwc-backward";
  }
  return "?";
}

namespace {
// "1 CTA per SM", "3 CTAs per SM".
std::string per_sm_text(int ctas) {
  return std::to_string(ctas) + (ctas == 1 ? " CTA per SM" : " CTAs per SM");
}
}  // namespace

std::string KernelPlan::grid_text() const {
  switch (strategy) {
    case Strategy::kChannels:
      return std::to_string(blocks_per_item) + " x batch CTAs";
    case Strategy::kChannelsSlab:
      return std::to_string(blocks_per_item) + " x batch CTAs (clusters of " +
             std::to_string(blocks_per_item) + ", one per item)";
    case Strategy::kRowRegisters:
      return "batch x " + std::to_string(rows_per_item) + " rows / " +
             std::to_string(rows_per_block) + " rows per CTA";
    case Strategy::kRowBackward:
      return "min(CTAs the device holds, max(rows / " +
             std::to_string(rows_per_block * kBackwardRowsPerTeam) + ", min(rows / " +
             std::to_string(rows_per_block) + ", " + std::to_string(fill_ctas) +
             " multiprocessors))) CTAs of " + std::to_string(rows_per_block) +
             " rows, looping over the rows" + (cooperative() ? " (cooperative launch)" : "");
    case Strategy::kGroupBackward:
      return "min(CTAs the device holds, units of " + std::to_string(wave_rows) + " rows / " +
             std::to_string(rows_per_block) +
             " units per CTA), looping over waves of rows (cooperative launch)";
    case Strategy::kGroupNhwcBackward:
      return "min(CTAs the device holds, units of " + std::to_string(wave_rows) + " items (" +
             std::to_string(units_per_channel) +
             " an item)), looping over waves of items (cooperative launch)";
    case Strategy::kChannelsBackward:
      return "min(CTAs the device holds, " + std::to_string(blocks_per_item) +
             " x batch tiles), looping over the tiles" +
             (cooperative() ? " (cooperative launch)" : "");
    case Strategy::kRowStream:
    case Strategy::kRowSplit:
      return std::to_string(split_chunks) +
             " CTAs per row x as many rows as stay co-resident "
             "(cooperative launch, " +
             per_sm_text(split_blocks_per_sm) + ")";
    case Strategy::kRowSplitBackward:
      return std::to_string(split_chunks) +
             " CTAs per row x as many rows as stay co-resident, each slot of " +
             std::to_string(split_chunks) + " CTAs looping over its rows (cooperative launch, " +
             per_sm_text(split_blocks_per_sm) + ")";
    case Strategy::kGroupNhwc:
      if (!cooperative()) {
        return blocks_per_item == 1 ? "batch CTAs (one per item)"
                                    : std::to_string(blocks_per_item) +
                                          " x batch CTAs (one per tile of groups of an item)";
      }
      return (blocks_per_item == 1 ? std::to_string(split_chunks)
                                   : std::to_string(blocks_per_item) + " tiles of groups x " +
                                         std::to_string(split_chunks)) +
             " CTAs per item x as many items as stay co-resident (cooperative launch, " +
             per_sm_text(split_blocks_per_sm) + ")";
  }
  return "?";
}

int KernelPlan::batch_class_of(int64_t batch) const {
  return few_rows > 0 && batch * rows_per_item <= few_rows ? kBatchFewRows : kBatchAny;
}

std::string KernelPlan::batch_class_text() const {
  const std::string few = std::to_string(few_rows);
  if (batch_class == kBatchFewRows) {
    return "few rows (launches of at most " + few +
           (two_classes ? " rows; a prepared kernel runs the other class's plan for more)" : ")");
  }
  if (two_classes) {
    return "more than " + few + " rows (a prepared kernel runs the few-rows plan for launches of " +
           "at most " + few + ")";
  }
  return "any";
}

std::string KernelPlan::to_string() const {
  std::ostringstream os;
  os << "strategy: " << normjit::to_string(strategy) << "\n"
     << "layout: " << (problem.nhwc ? "nhwc" : "nchw") << "\n"
     << "arch: " << arch << "\n"
     << "block: " << block_x << "x" << block_y << " (" << block_x * block_y << " threads)\n"
     << "grid: " << grid_text() << "\n"
     << "vector: " << vec << " elements per access\n";
  switch (strategy) {
    case Strategy::kChannels:
      os << "values: " << (cached ? "in registers" : "read twice") << "\n";
      break;
    case Strategy::kChannelsSlab:
      os << "values: in shared memory (a slab of " << problem.channels / blocks_per_item
         << " channels per CTA)"
         << (slab_held > 0 ? ", " + std::to_string(slab_held) +
                                 " a thread held in registers for both sums and y"
                           : std::string())
         << "\n"
         << "threads per position's sum: " << sums_per_position << "\n"
         << "stores of y: "
         << (slab_store_vec == 1 ? "one element each, in the sums' layout"
                                 : std::to_string(slab_store_vec) + " elements each (16 bytes)")
         << "\n";
      break;
    case Strategy::kRowRegisters:
      os << "vectors per thread: " << vectors << "\n"
         << "batch class: " << batch_class_text() << "\n"
         << "parameters loaded: " << (params_ahead ? "with x" : "at the store") << "\n"
         << "L2 policy of x: "
         << (evict_first_rows > 0 ? "evict-first in launches of at most " +
                                        std::to_string(evict_first_rows) + " rows, else normal"
                                  : std::string("normal"))
         << "\n"
         << "L2 prefetch of the row: "
         << (prefetch_row ? "one bulk prefetch by the team's first thread" : "none") << "\n";
      break;
    case Strategy::kRowBackward:
      os << "vectors per thread: " << vectors << "\n"
         << "team barriers: " << (team_barriers ? "one per team" : "the CTA's") << "\n"
         << "final sum: " << (quad_final_sum ? "float4s" : "one float a column") << "\n";
      break;
    case Strategy::kGroupBackward:
      os << "vectors per thread: " << vectors << "\n"
         << "chunks per unit: " << chunks << "\n"
         << "units per channel: " << units_per_channel << "\n"
         << "rows per wave: " << wave_rows << "\n"
         << "workspace: " << workspace_floats(0) << " floats\n";
      break;
    case Strategy::kChannelsBackward:
      os << "values: " << (cached ? "in registers" : "read twice") << "\n";
      break;
    case Strategy::kGroupNhwcBackward:
      os << "positions per thread per unit: " << vectors << "\n"
         << "units per item: " << units_per_channel << "\n"
         << "items per wave: " << wave_rows << "\n"
         << "workspace: " << workspace_floats(0) << " floats\n";
      break;
    case Strategy::kRowSplit:
      os << "vectors per thread: " << vectors << "\n"
         << "staged: " << (staged ? "yes" : "no") << "\n"
         << "resident parameter vectors: " << resident_vectors << "\n"
         << "prefetch: "
         << (prefetch == 0   ? "none"
             : prefetch == 1 ? "after each row's partial"
                             : "after each row's barrier")
         << "\n";
      break;
    case Strategy::kRowStream:
      os << "vectors per thread per piece: " << vectors << "\n"
         << "segment: " << segment << " elements per CTA\n";
      break;
    case Strategy::kRowSplitBackward:
      os << "vectors per thread" << (pieces == 1 ? "" : " per piece") << ": " << vectors << "\n"
         << "segment: " << segment << " elements per CTA, " << pieces
         << (pieces == 1 ? " piece (in registers)" : " pieces (streamed, read twice)") << "\n"
         << "rows per exchange: " << wave_rows << "\n"
         << "steps prefetched ahead: " << prefetch << "\n";
      break;
    case Strategy::kGroupNhwc:
      os << "positions per thread per piece: " << vectors << "\n"
         << "segment: " << segment << " positions per CTA, " << pieces
         << (pieces == 1 ? " piece (in registers)" : " pieces (streamed, read twice)") << "\n";
      break;
  }
  os << "shared memory: " << smem_bytes << " bytes dynamic\n"
     << "why: " << why << "\n";
  return os.str();
}

int batch_class(const NormSpec& spec) { return batch_class(spec, spec.batch()); }

int64_t few_rows_limit(const NormSpec& spec) {
  // The channel forms in nhwc (and of S = 1) are rows too: N x S of them.
  const bool rows_form = spec.op != Op::kGroupNorm && (!spec.channel_form() || spec.channel_rows());
  // The backward: one kernel for every batch (row_backward pairs its teams of kBackwardBlock
  // threads whatever the rows).
  if (!rows_form || spec.backward) return 0;
  // The forward: only the row kernel's parameters depend on it (row_registers): rows that fit
  // one team, with parameters.
  const bool row_registers = spec.row_length() <= int64_t{kMaxTeam} * kMaxTeamValues;
  if (!row_registers || spec.affine == Affine::kNone) return 0;
  const Problem pr = Problem::of(spec);
  const int vec = row_vector_width(pr);
  const int team = row_team(pr, vec);
  const bool scalar_layernorm =
      team == kScalarLayerNormParamsAtTheStoreTeam && scalar_params_at_the_store(pr, vec, team);
  if (team <= kNarrowTeam || scalar_layernorm) return kNarrowFewRows;
  return team == kWideRowsTeam ? kWideFewRows : kFewRows;
}

int batch_class(const NormSpec& spec, int64_t batch) {
  const int64_t limit = few_rows_limit(spec);
  if (limit == 0) return kBatchAny;
  const int64_t rows = spec.channel_form() ? batch * spec.spatial() : batch;
  return rows <= limit ? kBatchFewRows : kBatchAny;
}

bool has_two_batch_classes(const NormSpec& spec) {
  // As batch_class_specs decides, without building the other spec: one row (N = 1) and more
  // than the limit's rows (N > limit: at least that many rows) fall in different classes.
  const size_t leading = spec.shape.size() - spec.normalized_dims;
  if (spec.op == Op::kGroupNorm || leading == 0) return false;
  if (spec.channel_form() && !spec.channel_rows()) return false;
  const int64_t limit = few_rows_limit(spec);
  return limit > 0 && batch_class(spec, 1) != batch_class(spec, limit + 1);
}

std::vector<NormSpec> batch_class_specs(const NormSpec& spec) {
  std::vector<NormSpec> out = {spec};
  NormSpec other = spec;
  // The leading dims of another class: one row, or kFewRows + 1 rows.
  const size_t leading = spec.shape.size() - spec.normalized_dims;
  if (spec.op == Op::kGroupNorm || leading == 0) return out;
  if (spec.channel_form()) {
    if (!spec.channel_rows()) return out;
    // nhwc (or S = 1): N x S rows; the batch N alone changes.
    const int64_t s = spec.spatial();
    other.shape[0] = batch_class(spec) == kBatchFewRows ? few_rows_limit(spec) / s + 1 : 1;
    if (batch_class(other) != batch_class(spec)) out.push_back(other);
    return out;
  }
  for (size_t i = 0; i < leading; ++i) other.shape[i] = 1;
  if (batch_class(spec) == kBatchFewRows) other.shape[0] = few_rows_limit(spec) + 1;
  if (batch_class(other) != batch_class(spec)) out.push_back(other);
  return out;
}

KernelPlan plan(const NormSpec& spec, const Target& target) {
  spec.validate();
  const Problem pr = Problem::of(spec);
  if (is_fp8(pr.y) && !arch_facts(target.sm).fp8_convert) {
    throw_invalid_argument("out_dtype", std::string("'") + to_string(pr.y) + "'",
                           "fp8 output needs sm_89 or later (cvt.rn.satfinite to fp8); the "
                           "target is " +
                               target.name());
  }
  KernelPlan p;
  p.problem = pr;
  p.arch = target.text();
  p.batch_class = batch_class(spec);
  p.few_rows = few_rows_limit(spec);
  p.two_classes = has_two_batch_classes(spec);
  p.strategy = choose_strategy(pr, target);
  std::string why;
  if (p.strategy == Strategy::kGroupBackward) {
    why = group_backward(pr, target, p);
    if (p.workspace_floats(0) > kBackwardMaxWorkspaceFloats) {
      throw_unsupported("shape", "'" + format_shape(spec.shape) + "'",
                        "backward=true sums each group's channels in units of a workspace; " +
                            std::to_string(pr.channels / pr.groups) + " channels of " +
                            std::to_string(pr.spatial) + " elements per group need " +
                            std::to_string(p.workspace_floats(0)) + " floats, more than the " +
                            std::to_string(kBackwardMaxWorkspaceFloats) + " supported");
    }
  } else if (p.strategy == Strategy::kGroupNhwcBackward) {
    why = group_nhwc_backward(pr, target, p);
  } else if (p.strategy == Strategy::kChannelsBackward) {
    why = channels_backward(pr, p);
  } else if (p.strategy == Strategy::kRowBackward) {
    size_rows_common(pr, p);
    why = row_backward(pr, target, p);
  } else if (p.strategy == Strategy::kRowSplitBackward) {
    size_rows_common(pr, p);
    why = row_split_backward(pr, target, p);
    const int64_t co_resident = int64_t{p.split_blocks_per_sm} * target.sm_count;
    if (p.workspace_floats(co_resident) > kBackwardMaxWorkspaceFloats) {
      throw_unsupported("shape", "'" + format_shape(spec.shape) + "'",
                        "backward=true of rows split over CTAs keeps each CTA's partial sums of "
                        "its columns in a workspace; rows of " +
                            std::to_string(pr.row_length) + " elements need " +
                            std::to_string(p.workspace_floats(co_resident)) +
                            " floats, more than the " +
                            std::to_string(kBackwardMaxWorkspaceFloats) + " supported");
    }
  } else if (p.strategy == Strategy::kChannels) {
    size_channels(pr, p);
    why = p.why;
  } else if (p.strategy == Strategy::kChannelsSlab) {
    why = channels_slab(pr, target, p);
  } else if (p.strategy == Strategy::kGroupNhwc) {
    why = group_nhwc(pr, target, p);
  } else {
    size_rows_common(pr, p);
    switch (p.strategy) {
      case Strategy::kRowRegisters:
        why = row_registers(pr, target, p);
        break;
      case Strategy::kRowSplit:
        why = row_split(pr, target, p);
        break;
      case Strategy::kRowStream:
        why = row_stream(pr, target, p);
        break;
      case Strategy::kChannels:
      case Strategy::kChannelsSlab:
      case Strategy::kRowBackward:
      case Strategy::kGroupBackward:
      case Strategy::kChannelsBackward:
      case Strategy::kGroupNhwc:
      case Strategy::kRowSplitBackward:
      case Strategy::kGroupNhwcBackward:
        break;
    }
    if (pr.op == Op::kGroupNorm && p.vec > 1 && pr.spatial % p.vec != 0) {
      why += "; " + std::to_string(p.vec * size_of(pr.x)) +
             "-byte vectors may span channels (S = " + std::to_string(pr.spatial) +
             " is odd), each element taking its own channel's weight and bias";
    }
  }
  if (pr.channel_rows) {
    // The channel forms, channels last or of one position: each position's C channels are one
    // contiguous row (the forward's and, with S = 1, the backward's row kernels).
    p.rows_per_item = spec.spatial();
    const std::string params = !pr.weight ? ""
                               : pr.bias  ? ", weight and bias [C] per element of a row"
                                          : ", weight [C] per element of a row";
    const std::string as_rows = pr.backward ? "differentiated as rows by the row backward kernel"
                                            : "normalized as rows of the row kernel";
    why = (pr.nhwc ? "layout nhwc: the C = " + std::to_string(pr.channels) +
                         " channels of each of the " + std::to_string(spec.spatial()) +
                         " positions per item are contiguous, " + as_rows + " (N x " +
                         std::to_string(spec.spatial()) + " rows"
                   : "one position per item (S = 1): the C = " + std::to_string(pr.channels) +
                         " channels of each item are contiguous, " + as_rows + " (N rows") +
          " at a constant stride" + params + "); " + why;
  }
  p.why = why + variant_note(pr);
  return p;
}

}  // namespace normjit
