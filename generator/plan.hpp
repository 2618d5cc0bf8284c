// plan(): choose a kernel strategy and launch shape for a spec on a target.
// A pure function of (spec, target): no GPU, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "generator/target.hpp"
#include "normjit/spec.hpp"

namespace normjit {

enum class Strategy {
  kChannels,      // rms/layernorm over dim 1: a thread owns spatial positions, loops over C
  kRowRegisters,  // a team of threads per row, the row in registers (read once)
  kRowSplit,      // a row over P co-resident CTAs, chunks in registers (read once)
  kRowStream,     // rows longer than the chip holds: a row over P co-resident CTAs, read twice
  kRowBackward,   // backward: a team per row, the row in registers; CTAs loop over rows, and
                  // with parameters their f32 partials of dweight/dbias are summed in a fixed order
  kGroupBackward,      // groupnorm backward: per-channel sums of units over the grid, rows in
                       // waves, a grid barrier per wave, dx from the row's sums (x read twice)
  kChannelsBackward,   // channel-form backward: a thread owns positions, loops over C; CTAs
                       // loop over tiles, their dweight/dbias partials summed in a fixed order
  kGroupNhwc,          // groupnorm, channels last: a CTA covers every channel of its positions, an
                       // item (n) over P CTAs exchanging per-group partials (group_nhwc.cuh)
  kRowSplitBackward,   // backward of rows longer than one team holds: a row over P co-resident
                       // CTAs exchanging its two sums; held in registers, or streamed twice in
                       // waves of rows; dweight/dbias partials per CTA summed in a fixed order
  kChannelsSlab,       // rms/layernorm over dim 1 of small maps (sm_90): an item over a cluster of
                       // K CTAs, each copying its C/K channels' contiguous slab into shared memory,
                       // the per-position sums exchanged through distributed shared memory
  kGroupNhwcBackward,  // groupnorm backward, channels last: a CTA covers every channel of a
                       // unit of positions; items in waves, per-unit channel and group sums
                       // added over the grid, dx from the group's sums (x read twice)
};
const char* to_string(Strategy strategy);

// What a kernel computes: the spec without its batch and eps (one kernel serves every batch
// and eps). Everything here is a compile-time constant of the kernel.
struct Problem {
  Op op = Op::kRmsNorm;
  Dtype x = Dtype::kF32, y = Dtype::kF32, param = Dtype::kF32;
  std::optional<Dtype> residual;  // h = x + residual, in this dtype
  bool channel_form = false;      // rmsnorm or layernorm over dim 1, channels strided (nchw)
  // layout=nhwc, channels innermost. The channel forms are then rows of C contiguous elements
  // (row_length C, spatial 1: their kernel does not depend on S; plan.rows_per_item = S).
  bool nhwc = false;
  // The channel forms in nhwc, or of S = 1 (NormSpec::channel_rows): rows of C, one after another
  // at a constant stride, planned as the trailing forms' rows of row_length C (forward and, with
  // S = 1, backward).
  bool channel_rows = false;
  int64_t row_length = 0;  // H: elements normalized together (channel form: C)
  int64_t channels = 0;    // channel and group forms: C
  int64_t spatial = 1;     // channel and group forms: S, elements per channel
  int64_t groups = 0;      // groupnorm: G; 0 otherwise
  bool weight = false, bias = false;
  double weight_offset = 0.0;
  Activation activation = Activation::kNone;  // applied to y after the affine step
  bool save_stats = false;
  bool backward = false;  // dx, dweight, dbias from x, dy and the saved statistics

  static Problem of(const NormSpec& spec);
  Dtype held() const { return residual.value_or(x); }  // the dtype a row kernel holds
};

struct KernelPlan {
  Strategy strategy = Strategy::kChannels;
  Problem problem;
  std::string arch;              // Target::text(): "sm_90", "sm_90:114", "sm_90:132:4814"
  int block_x = 1, block_y = 1;  // threads per CTA
  int64_t blocks_per_item = 1;   // kChannels: CTAs per batch item; kChannelsSlab: the cluster (K);
                                 // kGroupNhwc: tiles of whole groups across the channels
  int64_t rows_per_item = 1;     // row strategies: rows per batch item (groups; nhwc channel
                                 // forms: S positions, the launch's rows being N x S)
  int rows_per_block = 1;        // kRowRegisters: rows per CTA
  int64_t split_chunks = 0;      // kRowSplit, kRowStream, kRowSplitBackward: CTAs per row (P);
                                 // kGroupNhwc: CTAs per tile of groups of an item
  int split_blocks_per_sm = 0;   // kRowSplit, kRowStream, kRowSplitBackward: residency built for
  int fill_ctas = 0;             // kRowBackward: CTAs the grid takes at least where the rows
                                 // allow (the target's multiprocessors)
  int vec = 1;                   // elements per global access of x and y
  int param_vec = 1;             // elements per access of weight and bias
  int smem_bytes = 0;            // dynamic shared memory per CTA
  // How each strategy holds its data (the kernel's configuration, generator/emit.cpp):
  int64_t vectors = 0;            // row strategies: vectors per thread (per piece: kRowStream);
                                  // kGroupNhwcBackward: positions per thread per unit
  bool cached = false;            // kChannels: the values stay in registers (x read once)
  bool staged = false;            // kRowSplit: the next row staged in shared memory
  int64_t resident_vectors = 0;   // kRowSplit: vectors per thread with parameters on chip
  int prefetch = 0;               // kRowSplit: 0 none; 1 after a row's partial; 2 its barrier
                                  // kGroupBackward: 1 the next wave into L2
                                  // kRowBackward: 1 each team's next row into L2; 2
                                  // also its words into registers (the L2 prefetch
                                  // then the row after it)
                                  // kRowSplitBackward: streamed steps (a row's piece) whose
                                  // x and dy each thread prefetches into L2 ahead
  int64_t segment = 0;            // kRowStream, kRowSplitBackward: elements of a row per CTA;
                                  // kGroupNhwc: positions
  int pieces = 0;                 // kGroupNhwc, kRowSplitBackward: pieces of `vectors` vectors
                                  // (kGroupNhwc: positions) per thread per segment; 1: held in
                                  // registers (x read once), else streamed (read twice)
  bool params_ahead = false;      // kRowRegisters: parameters loaded with x, not at the store
  bool early_h = false;           // kRowRegisters: h written as formed, before the reduction
  bool pin_params = false;        // kRowRegisters: the parameters' loads (params_ahead) kept
                                  // above the reduction by a shared-memory store of their bits
  int64_t evict_first_rows = 0;   // kRowRegisters: launches of at most this many rows (their
                                  // bytes within L2) load x evict-first; 0: plain loads
  bool prefetch_row = false;      // kRowRegisters: each team's first thread asks L2 for its row
                                  // of x (and of the residual) with one bulk prefetch
  bool reload_weight = false;     // kRowSplitBackward (held parts), kRowBackward (wide teams):
                                  // the weight loaded again for each row (from L1), not held
  bool shared_sums = false;       // kRowSplitBackward (held parts), kRowBackward (wide teams):
                                  // dbias summed in shared memory
  bool hold_packed = false;       // kRowBackward: 16-bit x and dy held as raw bits (two to a
                                  // register), converted again where used
  bool team_barriers = false;     // kRowBackward: each team of a CTA of several waits at its own
                                  // named barrier at a row's reduction
  bool quad_final_sum = false;    // kRowBackward: the CTAs' partials summed in float4s
  bool late_dh = false;           // kRowBackward with a residual: each vector of dh loaded at
                                  // its store, not with x and dy (wide teams: 64 registers)
  int64_t chunks = 1;             // kGroupBackward: chunks of block_x * vectors * vec positions
                                  // a unit (M), taken in turn by its team
  int64_t units_per_channel = 0;  // kGroupBackward: units of chunks * block_x * vectors * vec
                                  // positions that cover a channel (T); kGroupNhwcBackward:
                                  // units of block_y * vectors positions that cover an item
  int64_t wave_rows = 0;          // kGroupBackward: rows (n, g) per wave (R);
                                  // kGroupNhwcBackward: items (n) per wave;
                                  // kRowSplitBackward: rows of a slot per exchange (W)
  int min_blocks_per_sm = 1;      // kGroupBackward, kRowRegisters, kRowBackward: launch
                                  // bounds' CTAs per SM (caps the registers; kRowRegisters,
                                  // kRowBackward: 0 names none)
  bool load_ahead = false;        // kGroupBackward: dx's x and dy loaded before the row's sums
  int chunks_ahead = 1;           // kGroupBackward: step 2 loads chunks m + 1 .. m + A while dx
                                  // of chunk m is formed (A; 1 where a unit is one chunk)
  int sums_per_position = 0;      // kChannelsSlab: threads that sum a position's channels (G)
  int slab_store_vec = 0;         // kChannelsSlab: y's elements a store: vec (16-byte vectors
                                  // along the slab) or 1 (one a store, in the sums' layout)
  int slab_held = 0;              // kChannelsSlab: values of the slab a thread of the sums'
                                  // layout holds in registers for both sums and y (0: each pass
                                  // reads the slab)
  int nhwc_aside = 0;             // kGroupNhwc: the last of a thread's held positions kept in
                                  // dynamic shared memory, not registers
  int batch_class = 0;            // batch_class() of the spec planned
  int64_t few_rows = 0;           // few_rows_limit() of the spec planned
  bool two_classes = false;       // has_two_batch_classes(): launches of the other class run
                                  // another plan (Engine::prepare loads both)
  std::string why;                // one line: why this strategy and shape

  // CTAs exchange partials (of a row, or of dweight/dbias): launched cooperatively, with a
  // workspace.
  bool cooperative() const {
    return strategy == Strategy::kRowSplit || strategy == Strategy::kRowStream ||
           strategy == Strategy::kGroupBackward || strategy == Strategy::kRowSplitBackward ||
           strategy == Strategy::kGroupNhwcBackward ||
           ((strategy == Strategy::kRowBackward || strategy == Strategy::kChannelsBackward) &&
            (problem.weight || problem.bias)) ||
           (strategy == Strategy::kGroupNhwc && split_chunks > 1);
  }
  // CTAs of a cooperative kernel that exchange partials with one another and so must be
  // co-resident: split_chunks (kGroupNhwc: times its tiles of groups, which share the item's
  // slot).
  int64_t exchange_ctas() const {
    return strategy == Strategy::kGroupNhwc ? split_chunks * blocks_per_item : split_chunks;
  }
  // CTAs of a launch over `batch` items; for cooperative kernels, `co_resident` is how many
  // CTAs of this kernel the device holds at once.
  int64_t grid(int64_t batch, int64_t co_resident) const;
  // Workspace floats of one slot (P CTAs sharing a row; kRowBackward: one CTA's partial sums of
  // dweight and dbias; kRowSplitBackward: the slot's exchange and its P CTAs' partials) of a
  // cooperative kernel: the kernel static_asserts that it lays out as many (exchange.cuh,
  // row_backward.cuh, row_split_backward.cuh).
  int64_t workspace_slot_floats() const;
  // Workspace floats before the first slot (the backward kernels: the grid barrier's counter; the
  // kernel static_asserts the same).
  int64_t workspace_header_floats() const;
  // Workspace floats a launch of a cooperative kernel needs, for `co_resident` as above
  // (kGroupBackward: the same for any co_resident, group_backward.cuh's layout).
  int64_t workspace_floats(int64_t co_resident) const;

  std::string grid_text() const;  // the grid as a formula of the batch
  std::string to_string() const;  // multi-line, for `normjit dump --emit plan`
  // The launches this plan serves ("any", or one of two batch classes), for to_string().
  std::string batch_class_text() const;
  // The class of a launch of this kernel over `batch` (batch_class(spec, batch) of the spec
  // planned), from few_rows and rows_per_item: what the launch path asks, without the spec.
  int batch_class_of(int64_t batch) const;
};

KernelPlan plan(const NormSpec& spec, const Target& target);

// The coarse batch class a plan depends on (part of the kernel's identity; 0 when the plan
// does not depend on the batch). Cheap: called on every Engine::run. The row kernel of a
// launch of few rows (decode) loads its parameters with x whatever registers that takes; with
// more rows, only where that leaves the registers for rows in flight. Both compute the same
// bits (batch invariance): the class changes when loads are issued, not the arithmetic.
constexpr int kBatchAny = 0;
constexpr int kBatchFewRows = 1;
constexpr int64_t kFewRows = 256;  // rows (batch x groups) of the few-rows class, at most
// The rows of the few-rows class of spec's kernel, at most (kFewRows; twice that for row kernels
// of at most 128 threads a row and 16-bit LayerNorm rows of scalar accesses in a team of 256, one
// and a half times for the other teams of 256: plan.cpp); 0 where its plan does not depend on the
// batch (every backward). No allocation.
int64_t few_rows_limit(const NormSpec& spec);
int batch_class(const NormSpec& spec);
// The class of a launch of spec's kernel over `batch` (rows of the trailing forms, N of the
// channel forms), as if the spec's leading dims were that batch: what a prepared kernel of
// several classes launches by. No allocation (the launch path calls it).
int batch_class(const NormSpec& spec, int64_t batch);
// The spec and, where its kernel depends on the batch class, a spec of each other class (its
// leading dims changed): what precompile() compiles so that a prewarmed spec serves every batch.
std::vector<NormSpec> batch_class_specs(const NormSpec& spec);
// Whether batch_class_specs(spec) has two specs; no allocation (Engine::prepare's hot path).
bool has_two_batch_classes(const NormSpec& spec);

}  // namespace normjit
