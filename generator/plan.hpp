// plan(): choose a kernel strategy and launch shape for a spec on a target.
// A pure function of (spec, target): no GPU, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "normjit/spec.hpp"

namespace normjit {

struct Target {
  // The suffix of the NVRTC target: sm_90 runs on sm_90 and later GPUs, sm_90a only on sm_90
  // (arch-specific features such as wgmma), sm_100f on the sm_100 family (sm_100, sm_103).
  enum class Variant { kPortable, kArchSpecific, kFamilySpecific };
  int sm = 90;                           // compute capability, major * 10 + minor
  Variant variant = Variant::kPortable;  // sm_90a: kArchSpecific; sm_100f: kFamilySpecific
  // Multiprocessors: from the device at run time; for an offline compile (prewarm) the
  // full-size part of the arch (sm_90: 132, an H100 SXM) unless the spelling names another
  // count. Plans use it only to decide whether a long row can be split over co-resident CTAs.
  int sm_count = 132;
  static constexpr int kMaxSmCount = 1024;  // bound of a spelled count: far above any GPU's
  std::string name() const;                 // the NVRTC target: "sm_90", "sm_90a", "sm_100f"
  std::string base_name() const;            // name() without the suffix: "sm_90"
  // name(), plus ":N" when sm_count is not the full-size part's: "sm_90:114" (an H100 PCIe).
  // parse(text()) gives back this target.
  std::string text() const;
  // "sm_80", "sm_90a", "sm_100f", "sm_90:114" (114 multiprocessors, e.g. an H100 PCIe or a MIG
  // slice's count); "compute_90" is refused (we always build a cubin), and so is a suffix the
  // arch does not have (sm_90f, sm_80a): a target is compiled exactly as named or not at all.
  static Target parse(std::string_view arch);
  // The targets of arch `sm` that exist, from the same table parse() checks suffixes against:
  // {"sm_100", "sm_100a", "sm_100f"}, {"sm_90", "sm_90a"}, {"sm_80"}.
  static std::vector<std::string> names_of(int sm);
  bool operator==(const Target& o) const {
    return sm == o.sm && variant == o.variant && sm_count == o.sm_count;
  }
};

enum class Strategy {
  kChannels,      // rmsnorm over dim 1: a thread owns spatial positions, loops over C
  kRowRegisters,  // a team of threads per row, the row in registers (read once)
  kRowSplit,      // a row over P co-resident CTAs, chunks in registers (read once)
  kRowStream,     // rows longer than the chip holds: a row over P co-resident CTAs, read twice
};
const char* to_string(Strategy strategy);

struct KernelPlan {
  Strategy strategy = Strategy::kChannels;
  std::string header;                      // template header, "normjit/rmsnorm_channels.cuh"
  std::string function;                    // "normjit::rmsnorm_channels"
  std::vector<std::string> template_args;  // every compile-time parameter, in order
  std::string arch;                        // target name, "sm_90"
  int block_x = 1, block_y = 1;            // threads per CTA
  int64_t blocks_per_item = 1;             // kChannels: CTAs per batch item
  int64_t rows_per_item = 1;               // row strategies: rows per batch item (groups)
  int rows_per_block = 1;                  // kRowRegisters: rows per CTA
  int64_t split_chunks = 0;                // kRowSplit, kRowStream: CTAs per row (P)
  int split_blocks_per_sm = 0;             // kRowSplit, kRowStream: residency built for
  int vec = 1;                             // elements per global access of x and y
  int param_vec = 1;                       // elements per access of weight and bias
  int smem_bytes = 0;                      // dynamic shared memory per CTA
  std::string why;                         // one line: why this strategy and shape

  // CTAs of a row exchange partials: launched cooperatively, with a workspace.
  bool cooperative() const {
    return strategy == Strategy::kRowSplit || strategy == Strategy::kRowStream;
  }
  // CTAs of a launch over `batch` items; for cooperative kernels, `co_resident` is how many
  // CTAs of this kernel the device holds at once.
  int64_t grid(int64_t batch, int64_t co_resident) const;
  // Workspace floats a launch of a cooperative kernel needs, for `co_resident` as above.
  int64_t workspace_floats(int64_t co_resident) const;

  std::string name_expression() const;  // "&normjit::rmsnorm_channels<float, 64, ...>"
  std::string grid_text() const;        // the grid as a formula of the batch
  std::string to_string() const;        // multi-line, for `normjit dump --emit plan`
};

KernelPlan plan(const NormSpec& spec, const Target& target);

// The coarse batch class a plan depends on (part of the kernel's identity; 0 when the plan
// does not depend on the batch). Cheap: called on every Engine::run.
int batch_class(const NormSpec& spec);

// The type name of a storage dtype inside the templates ("float", "normjit::half_t", ...).
const char* template_type(Dtype dtype);

}  // namespace normjit
