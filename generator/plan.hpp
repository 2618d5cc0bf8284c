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
  int sm = 90;                 // compute capability, major * 10 + minor
  bool arch_specific = false;  // sm_90a rather than sm_90
  std::string name() const;    // "sm_90", "sm_90a"
  // "sm_80", "sm_90a", "compute_90" is refused (we always build a cubin).
  static Target parse(std::string_view arch);
  bool operator==(const Target& o) const { return sm == o.sm && arch_specific == o.arch_specific; }
};

enum class Strategy {
  kChannels,  // rmsnorm over dim 1: a thread owns spatial positions, loops over C
};
const char* to_string(Strategy strategy);

struct KernelPlan {
  Strategy strategy = Strategy::kChannels;
  std::string header;                      // template header, "normjit/rmsnorm_channels.cuh"
  std::string function;                    // "normjit::rmsnorm_channels"
  std::vector<std::string> template_args;  // every compile-time parameter, in order
  std::string arch;                        // target name, "sm_90"
  int block_x = 1, block_y = 1;            // threads per CTA
  int64_t blocks_per_item = 1;             // grid.x = blocks_per_item * batch
  int vec = 1;                             // elements per global access
  int smem_bytes = 0;                      // dynamic shared memory per CTA
  std::string why;                         // one line: why this strategy and shape

  std::string name_expression() const;     // "&normjit::rmsnorm_channels<float, 64, ...>"
  std::string to_string() const;           // multi-line, for `normjit dump --emit plan`
};

KernelPlan plan(const NormSpec& spec, const Target& target);

// The coarse batch class a plan depends on (part of the kernel's identity; 0 when the plan
// does not depend on the batch). Cheap: called on every Engine::run.
int batch_class(const NormSpec& spec);

// The type name of a storage dtype inside the templates ("float", "normjit::half_t", ...).
const char* template_type(Dtype dtype);

}  // namespace normjit
