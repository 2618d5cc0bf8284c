#include "generator/plan.hpp"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "normjit/error.hpp"

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

constexpr int kAccessBytes = 16;  // widest global access per thread
// f32 values a thread keeps between the two phases: the channels are split over up to 32
// threads so that each holds kChannelValues, smaller unrolled kernels that compile faster; up to
// kRegisterValues where the channels need it (more than 256 f32 or 128 16-bit channels).
constexpr int kChannelValues = 32;
constexpr int kRegisterValues = 64;

KernelPlan plan_channels(const NormSpec& spec) {
  const int64_t c = spec.channels();
  const int64_t s = spec.spatial();
  KernelPlan p;
  p.strategy = Strategy::kChannels;
  p.header = "normjit/rmsnorm_channels.cuh";
  p.function = "normjit::rmsnorm_channels";
  p.vec = vector_width(s, kAccessBytes / size_of(spec.dtype));
  // Split the channels over block_y threads so each keeps at most kChannelValues values.
  p.block_y = std::min(32, pow2_ceil(ceil_div(c * p.vec, kChannelValues)));
  p.block_x = std::clamp(256 / p.block_y, 32, 256);
  const bool cached = ceil_div(c, p.block_y) * p.vec <= kRegisterValues;
  p.blocks_per_item = ceil_div(s, int64_t{p.block_x} * p.vec);
  p.template_args = {template_type(spec.dtype),
                     std::to_string(c),
                     std::to_string(s),
                     std::to_string(p.block_x),
                     std::to_string(p.block_y),
                     std::to_string(p.vec),
                     spec.affine == Affine::kWeight ? "true" : "false",
                     cached ? "true" : "false"};
  std::ostringstream why;
  why << "reduce over dim 1: each thread owns " << p.vec << " contiguous spatial positions ("
      << p.vec * size_of(spec.dtype) << "-byte accesses) and " << ceil_div(c, p.block_y)
      << " of the " << c << " channels; " << p.block_y << " threads share a position"
      << (cached ? ", values stay in registers (x read once)"
                 : ", too many channels for registers: x is read twice");
  p.why = why.str();
  return p;
}

constexpr int kTeamValues = 16;     // f32 values per thread a row team aims for
constexpr int kMaxTeamValues = 32;  // values per thread a row team may hold
constexpr int kMaxTeam = 1024;      // threads per row team
// CTA of the split kernel: one of 1024 threads per SM. Its chunk is the most one SM's
// registers hold, so a row needs the fewest CTAs (P): each row's exchange costs about the
// same whatever the chunk, and on the H100 two CTAs of 512 per SM (twice the CTAs per row)
// ran the seeds slower (normjit bench; docs/performance-notes.md). The streaming kernel for
// longer rows takes the same CTA, one per SM.
constexpr int kSplitThreads = 1024;
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
constexpr int kSplitMaxSpanningVectors = 8;
// 16-bit values are held packed two to a register (row_common.cuh), so the same registers
// hold twice as many: half the CTAs per row, twice the rows in flight.
int split_values(Dtype dtype, int vec) {
  return size_of(dtype) == 2 && vec >= 2 ? 64 : kSplitValues;
}
// A row team's thread aims for twice as many 16-bit values, held packed in the same
// registers: half the threads per row, so twice the rows in flight per SM (on the H100 the
// bf16 LLM rows of 8192 and 16384 elements ran faster that way; f32 and shorter rows the same).
int team_values(Dtype dtype, int vec) {
  return size_of(dtype) == 2 && vec >= 2 ? 2 * kTeamValues : kTeamValues;
}
constexpr int kSplitBlocksPerSm = 1;  // split CTAs resident per SM (__launch_bounds__)
constexpr int kStreamVectors = 4;     // vectors per thread in flight in each of its passes

// Shared memory per SM of an arch (KiB; the CUDA programming guide's table), for a part we
// do not know the smaller common value.
int smem_per_sm_kib(int sm) {
  switch (sm) {
    case 70:
    case 72:
      return 96;
    case 75:
      return 64;
    case 80:
    case 87:
      return 164;
    case 90:
    case 100:
    case 103:
      return 228;
    default:
      return sm >= 80 ? 100 : 64;
  }
}
// Dynamic shared memory one split CTA may use with kSplitBlocksPerSm of them per SM: the
// SM's share less 1 KiB the driver reserves per CTA and 1 KiB for the kernel's static arrays.
int64_t split_smem_budget(const Target& target) {
  return int64_t{smem_per_sm_kib(target.sm)} * 1024 / kSplitBlocksPerSm - 2048;
}

// How the split kernel holds a row: `values` per thread over P = `chunks` CTAs, whether the
// next row is staged in shared memory, and how many of each thread's vectors keep their
// parameters (LayerNorm, RMSNorm with weight) in the rest of it for the whole launch, so
// each row reads only the others' from memory.
struct SplitLayout {
  int values = 0;
  int64_t vectors = 0;  // per thread
  int64_t chunks = 0;
  bool can_stage = false;
  bool staged = false;
  int64_t resident = 0;
  int64_t smem_bytes = 0;
  int64_t row_bytes = 0;  // a row moves x, y and the parameters that are not resident
};

SplitLayout split_layout(const NormSpec& spec, const Target& target, int vec, int values) {
  const int64_t h = spec.row_length();
  const int size = size_of(spec.dtype);
  SplitLayout l;
  l.values = values;
  // P: the fewest CTAs whose threads hold the row at `values` each; then the fewest vectors
  // per thread that still fit the row in P CTAs, so that the chunks are even. (A row a little
  // longer than one chunk would otherwise leave a full CTA and a sliver, and each row's
  // exchange waits for the full one.)
  const int64_t row_vectors = ceil_div(h, int64_t{vec});
  const bool spanning = spec.op == Op::kGroupNorm && spec.spatial() % vec != 0;
  const int most = spanning ? kSplitMaxSpanningVectors : kSplitMaxVectors;
  l.chunks = ceil_div(row_vectors, int64_t{kSplitThreads} * std::clamp(values / vec, 1, most));
  l.vectors = ceil_div(row_vectors, l.chunks * kSplitThreads);
  l.chunks = ceil_div(row_vectors, l.vectors * kSplitThreads);
  // Stage the next row in shared memory when cp.async can move the vectors (4-16 bytes)
  // and kSplitBlocksPerSm CTAs still fit the SM's shared memory.
  const int64_t budget = split_smem_budget(target);
  const int64_t stage_bytes = int64_t{kSplitThreads} * l.vectors * vec * size;
  const bool copy_async = vec * size >= 4 && target.sm >= 80;  // what cp.async can move
  l.can_stage = copy_async && stage_bytes <= budget;
  const int params = (spec.affine != Affine::kNone) + (spec.affine == Affine::kBoth);
  const int64_t per_vector = int64_t{kSplitThreads} * vec * size * params;
  const bool group = spec.op == Op::kGroupNorm;
  const auto resident_in = [&](int64_t smem) {
    return copy_async && !group && params > 0 ? std::min(l.vectors, smem / per_vector) : 0;
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
  const bool one_slot = int64_t{kSplitBlocksPerSm} * target.sm_count / l.chunks == 1;
  l.staged = l.can_stage &&
             !(one_slot && 4 * row_bytes(staged_resident) > 5 * row_bytes(unstaged_resident));
  l.resident = l.staged ? staged_resident : unstaged_resident;
  l.smem_bytes = (l.staged ? stage_bytes : 0) + l.resident * per_vector;
  l.row_bytes = row_bytes(l.resident);
  return l;
}

KernelPlan plan_rows(const NormSpec& spec, const Target& target) {
  const bool group = spec.op == Op::kGroupNorm;
  const int64_t h = spec.row_length();
  const int64_t g = group ? spec.groups : 0;
  const int64_t s = group ? spec.spatial() : 1;
  const int64_t cg = group ? spec.channels() / spec.groups : 0;
  const int max_vec = kAccessBytes / size_of(spec.dtype);
  KernelPlan p;
  // The widest access that divides the row, so every row starts aligned. A groupnorm vector
  // stays within one channel (one weight and bias) where S allows more than one element;
  // where S is odd it may span channels (the group, CG channels of S, may still be a
  // multiple), and the kernel takes each element's parameters past a channel's end
  // (row_common.cuh). On the H100 that ran GroupNorm on 7x7, 3x3 and 1001x1001 maps faster
  // than scalar accesses, and on 25x38 maps (S = 950) slower than pairs within a channel.
  p.vec = vector_width(group && s % 2 == 0 ? s : h, max_vec);
  p.param_vec = group ? 1 : p.vec;
  p.rows_per_item = group ? g : 1;
  const int64_t vectors = ceil_div(h, p.vec);
  const std::string type = template_type(spec.dtype);
  const std::string rms = spec.op == Op::kRmsNorm ? "true" : "false";
  const std::string weight = spec.affine != Affine::kNone ? "true" : "false";
  const std::string bias = spec.affine == Affine::kBoth ? "true" : "false";
  // The template parameters every row kernel ends with: groups, spatial, channels per group,
  // weight, bias (groups 0: parameters indexed by the element, not by the channel).
  const std::string tail[] = {std::to_string(g), std::to_string(s), std::to_string(cg), weight,
                              bias};
  std::ostringstream why;
  SplitLayout layout;  // the split kernel's, if it is chosen
  if (h <= int64_t{kMaxTeam} * kMaxTeamValues) {
    const int team = std::min<int64_t>(
        kMaxTeam,
        pow2_ceil(ceil_div(vectors, std::max(1, team_values(spec.dtype, p.vec) / p.vec))));
    const int64_t k = ceil_div(vectors, team);
    p.strategy = Strategy::kRowRegisters;
    p.header = "normjit/row_norm.cuh";
    p.function = "normjit::row_norm";
    p.block_x = team;
    p.rows_per_block = std::max(1, 256 / team);
    p.block_y = p.rows_per_block;
    p.template_args = {type,
                       rms,
                       std::to_string(h),
                       std::to_string(team),
                       std::to_string(p.rows_per_block),
                       std::to_string(p.vec),
                       std::to_string(k)};
    why << "rows of " << h << " elements fit in the registers of " << team << " threads ("
        << k * p.vec << " values each, " << p.vec * size_of(spec.dtype) << "-byte accesses); "
        << p.rows_per_block << " rows per CTA; x is read once";
  } else {
    const int64_t capacity = int64_t{kSplitBlocksPerSm} * target.sm_count;
    layout = split_layout(spec, target, p.vec, split_values(spec.dtype, p.vec));
    // 16-bit rows with parameters per element (LayerNorm): half the values per thread, twice
    // the CTAs per row, when that keeps all the parameters on chip and the full chunk would
    // leave a row moving over a quarter more bytes. On the H100 that ran the bf16 LayerNorm
    // seed and bf16/f16 LayerNorm rows of 64 Ki to 4 Mi elements faster, and RMSNorm with a
    // weight (a quarter of its parameters streamed) slower (normjit bench; performance-notes).
    if (layout.values > kSplitValues && spec.affine != Affine::kNone && !group) {
      const SplitLayout half = split_layout(spec, target, p.vec, layout.values / 2);
      if (half.chunks <= capacity && half.resident == half.vectors &&
          4 * layout.row_bytes > 5 * half.row_bytes) {
        layout = half;
      }
    }
    const int64_t k = layout.vectors;
    const int64_t chunk = int64_t{kSplitThreads} * k * p.vec;
    const int64_t chunks = layout.chunks;
    // Both kernels that split a row over co-resident CTAs (one per SM) begin their template
    // arguments with <T, rms, H, THREADS, V, vectors per thread, CTAs per row>.
    const auto cooperative = [&](Strategy strategy, const char* name, int64_t vectors,
                                 int64_t parts) {
      p.strategy = strategy;
      p.header = std::string("normjit/") + name + ".cuh";
      p.function = std::string("normjit::") + name;
      p.block_x = kSplitThreads;
      p.split_chunks = parts;
      p.split_blocks_per_sm = kSplitBlocksPerSm;
      p.template_args = {type,
                         rms,
                         std::to_string(h),
                         std::to_string(kSplitThreads),
                         std::to_string(p.vec),
                         std::to_string(vectors),
                         std::to_string(parts)};
    };
    if (chunks <= capacity) {
      cooperative(Strategy::kRowSplit, "row_split", k, chunks);
      why << "rows of " << h << " elements split over " << chunks << " co-resident CTAs of "
          << chunk << " elements each, kept in registers; each chunk's (mean, M2) merged "
          << "with Chan's formula; x is read once";
    } else {
      // Each row over every co-resident CTA (one per SM), each streaming a part twice in
      // pieces of `vectors` vectors per thread: up to kStreamVectors in flight per thread (half
      // as many per row where parameters per element make the kernel normalize two rows per
      // pass), as many as divide the part's length in vectors (rounded up to a multiple where
      // that moves little), so that the parts stay even and every SM gets one.
      const int most = !group && spec.affine != Affine::kNone ? kStreamVectors / 2 : kStreamVectors;
      const int64_t unit = int64_t{kSplitThreads} * p.vec;  // one vector per thread
      int64_t units = ceil_div(h, capacity * unit);
      if (units >= 4 * most) units = ceil_div(units, most) * most;
      int vectors = most;
      while (units % vectors != 0) --vectors;
      const int64_t seg = units * unit;
      const int64_t parts = ceil_div(h, seg);
      cooperative(Strategy::kRowStream, "row_stream", vectors, parts);
      p.template_args.push_back(std::to_string(seg));
      why << "rows of " << h << " elements exceed what " << capacity
          << " co-resident CTAs hold in registers: each row is split over " << parts
          << " co-resident CTAs of " << seg
          << " elements, each streaming its part twice (statistics, then normalize: x is "
             "read twice); the parts' (mean, M2) merged with Chan's formula";
    }
  }
  if (group && p.vec > 1 && s % p.vec != 0) {
    why << "; " << p.vec * size_of(spec.dtype) << "-byte vectors may span channels (S = " << s
        << " is odd), each element taking its own channel's weight and bias";
  }
  for (const std::string& arg : tail) p.template_args.push_back(arg);
  if (p.strategy == Strategy::kRowSplit) {
    const SplitLayout& l = layout;
    p.smem_bytes = l.smem_bytes;
    p.template_args.push_back(std::to_string(kSplitBlocksPerSm));
    p.template_args.push_back(l.staged ? "true" : "false");
    p.template_args.push_back(std::to_string(l.resident));
    // Prefetching a later row into L2 keeps DRAM busy through each row's exchange (sm_90: one
    // bulk prefetch per chunk). Staged, only where no parameters are read again for every row
    // (GroupNorm, none, or all resident): streaming weight and bias need that L2, and the
    // prefetched rows evicted them (the LayerNorm seeds ran slower while theirs streamed).
    // Unstaged (one row fills the chip), the next row is prefetched where at most an eighth
    // of the parameters stream (the f32 LayerNorm seed ran faster so). GroupNorm prefetches
    // after each row's barrier, the others once the row's partial is out: each ran faster so
    // (measured on the H100 with normjit bench, docs/performance-notes.md).
    const bool prefetch =
        target.sm >= 90 &&
        (l.staged ? group || l.resident == l.vectors || spec.affine == Affine::kNone
                  : !group && (spec.affine == Affine::kNone || 8 * l.resident >= 7 * l.vectors));
    p.template_args.push_back(!prefetch ? "0" : group ? "2" : "1");
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
  }
  p.why = why.str();
  return p;
}

}  // namespace

int64_t KernelPlan::grid(int64_t batch, int64_t co_resident) const {
  const int64_t rows = batch * rows_per_item;
  switch (strategy) {
    case Strategy::kChannels:
      return blocks_per_item * batch;
    case Strategy::kRowRegisters:
      return ceil_div(rows, rows_per_block);
    case Strategy::kRowStream:
    case Strategy::kRowSplit:
      return std::min(co_resident / split_chunks, rows) * split_chunks;
  }
  return 0;
}

int64_t KernelPlan::workspace_floats(int64_t co_resident) const {
  if (!cooperative()) return 0;
  return co_resident / split_chunks * (16 * split_chunks + 4);  // see exchange.cuh
}

namespace {

// Facts about each arch that are not in NVRTC's list of supported archs (nvrtcGetSupportedArchs
// names plain archs only): which suffixed targets exist, and the multiprocessors of the arch's
// full-size part, for plans made without a device. The one table Target consults.
struct ArchFacts {
  int sm;
  bool arch_specific;    // sm_<sm>a exists
  bool family_specific;  // sm_<sm>f exists (CUDA 12.9 and later)
  int full_size_sm_count;
};
constexpr int kDefaultSmCount = 80;  // an arch without a full-size part here
constexpr ArchFacts kArchFacts[] = {
    {80, false, false, 108},             // A100
    {86, false, false, 84},              // A40 / RTX 3090
    {89, false, false, 142},             // L40S
    {90, true, false, 132},              // H100 SXM
    {100, true, true, 148},              // B200
    {101, true, true, kDefaultSmCount},  // CUDA 12.9's name of sm_110
    {103, true, true, kDefaultSmCount},
    {110, true, true, kDefaultSmCount},
    {120, true, true, kDefaultSmCount},
    {121, true, true, kDefaultSmCount},
};

const ArchFacts* facts_of(int sm) {
  for (const ArchFacts& f : kArchFacts) {
    if (f.sm == sm) return &f;
  }
  return nullptr;
}

int full_size_sm_count(int sm) {
  const ArchFacts* f = facts_of(sm);
  return f ? f->full_size_sm_count : kDefaultSmCount;
}

// Every suffixed target of the table: what a refused suffix is told to pick from.
std::string suffixed_targets() {
  std::string out;
  for (const ArchFacts& f : kArchFacts) {
    for (const std::string& name : Target::names_of(f.sm)) {
      if (name.back() == 'a' || name.back() == 'f') out += (out.empty() ? "" : ", ") + name;
    }
  }
  return out;
}

}  // namespace

std::string Target::base_name() const { return "sm_" + std::to_string(sm); }

std::string Target::name() const {
  switch (variant) {
    case Variant::kPortable:
      break;
    case Variant::kArchSpecific:
      return base_name() + "a";
    case Variant::kFamilySpecific:
      return base_name() + "f";
  }
  return base_name();
}

std::string Target::text() const {
  return sm_count == full_size_sm_count(sm) ? name() : name() + ":" + std::to_string(sm_count);
}

std::vector<std::string> Target::names_of(int sm) {
  const std::string base = "sm_" + std::to_string(sm);
  std::vector<std::string> names = {base};
  if (const ArchFacts* f = facts_of(sm)) {
    if (f->arch_specific) names.push_back(base + "a");
    if (f->family_specific) names.push_back(base + "f");
  }
  return names;
}

Target Target::parse(std::string_view arch) {
  Target t;
  std::string_view digits = arch;
  const std::string shown = quoted_excerpt(arch);
  const std::string why =
      "expected a real GPU architecture such as sm_80, sm_90, sm_90a or sm_100f, optionally "
      "with a multiprocessor count as in sm_90:114";
  const size_t colon = digits.find(':');
  std::string_view count = colon == std::string_view::npos ? "" : digits.substr(colon + 1);
  if (colon != std::string_view::npos) digits = digits.substr(0, colon);
  if (digits.substr(0, 3) != "sm_") throw_invalid_argument("arch", shown, why);
  digits.remove_prefix(3);
  char suffix = 0;
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) {
    suffix = digits.back();
    digits.remove_suffix(1);
  }
  // Decimal digits without a leading zero: sm_090 would otherwise be built as sm_90.
  int sm = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), sm);
  if (digits.empty() || digits[0] < '1' || digits[0] > '9' || ec != std::errc() ||
      end != digits.data() + digits.size() || sm < 50) {
    throw_invalid_argument("arch", shown, why);
  }
  t.sm = sm;
  if (suffix != 0) {
    // Only the suffixes the arch has: NVRTC would refuse sm_90f, and quietly taking it as
    // another target (sm_90a) would build what nobody asked for.
    t.variant = suffix == 'a' ? Variant::kArchSpecific : Variant::kFamilySpecific;
    const std::vector<std::string> names = names_of(sm);
    if (std::find(names.begin(), names.end(), t.name()) == names.end()) {
      throw_invalid_argument("arch", shown,
                             t.base_name() + " has no " +
                                 (suffix == 'a' ? "arch-specific ('a')" : "family-specific ('f')") +
                                 " target; the suffixed targets are " + suffixed_targets());
    }
  }
  t.sm_count = full_size_sm_count(sm);
  if (colon != std::string_view::npos) {
    int n = 0;
    auto [count_end, count_ec] = std::from_chars(count.data(), count.data() + count.size(), n);
    if (count.empty() || count_ec != std::errc() || count_end != count.data() + count.size() ||
        n < 1 || n > kMaxSmCount) {
      throw_invalid_argument("arch", shown,
                             "the multiprocessor count after ':' must be an integer from 1 to " +
                                 std::to_string(kMaxSmCount));
    }
    t.sm_count = n;
  }
  return t;
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
  }
  return "?";
}

const char* template_type(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32:
      return "float";
    case Dtype::kF16:
      return "normjit::half_t";
    case Dtype::kBF16:
      return "normjit::bf16_t";
    case Dtype::kE4M3:
      return "normjit::e4m3_t";
    case Dtype::kE5M2:
      return "normjit::e5m2_t";
  }
  return "?";
}

std::string KernelPlan::name_expression() const {
  std::string out = "&" + function + "<";
  for (size_t i = 0; i < template_args.size(); ++i) {
    if (i) out += ", ";
    out += template_args[i];
  }
  return out + ">";
}

std::string KernelPlan::grid_text() const {
  switch (strategy) {
    case Strategy::kChannels:
      return std::to_string(blocks_per_item) + " x batch CTAs";
    case Strategy::kRowRegisters:
      return "batch x " + std::to_string(rows_per_item) + " rows / " +
             std::to_string(rows_per_block) + " rows per CTA";
    case Strategy::kRowStream:
    case Strategy::kRowSplit:
      return std::to_string(split_chunks) +
             " CTAs per row x as many rows as stay co-resident "
             "(cooperative launch, " +
             std::to_string(split_blocks_per_sm) + " CTAs per SM)";
  }
  return "?";
}

std::string KernelPlan::to_string() const {
  std::ostringstream os;
  os << "strategy: " << normjit::to_string(strategy) << "\n"
     << "kernel: " << name_expression().substr(1) << "\n"
     << "arch: " << arch << "\n"
     << "block: " << block_x << "x" << block_y << " (" << block_x * block_y << " threads)\n"
     << "grid: " << grid_text() << "\n"
     << "vector: " << vec << " elements per access\n"
     << "shared memory: " << smem_bytes << " bytes dynamic\n"
     << "why: " << why << "\n";
  return os.str();
}

int batch_class(const NormSpec& spec) {
  (void)spec;
  return 0;
}

KernelPlan plan(const NormSpec& spec, const Target& target) {
  spec.validate();
  KernelPlan p;
  p = spec.op == Op::kRmsNorm && spec.channel_form() ? plan_channels(spec)
                                                     : plan_rows(spec, target);
  p.arch = target.name();
  return p;
}

}  // namespace normjit
