// NVRTC: compile an emitted entry for one target into cubin + PTX.
#pragma once

#include <string>
#include <vector>

#include "cache/cache.hpp"
#include "generator/emit.hpp"
#include "generator/plan.hpp"

namespace normjit {

struct CompiledKernel {
  std::string cubin;
  std::string ptx;
  std::string lowered_name;  // mangled name of the instantiated kernel
  std::string log;           // NVRTC log (holds ptxas's resource report)
};

// ptxas's resource report for the kernel, read from the NVRTC log.
struct Resources {
  int registers = -1;   // per thread
  int smem_bytes = 0;   // static shared memory per CTA
  int stack_bytes = 0;  // stack frame per thread
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  std::string to_string() const;
};
Resources parse_resources(const std::string& log);

// NVRTC version and build, e.g. "nvrtc 13.0".
std::string nvrtc_version();
// Architectures this NVRTC can build for, e.g. {"sm_75", ..., "sm_90", ...}.
std::vector<std::string> supported_archs();
// Every target this NVRTC builds: supported_archs() with the 'a' and 'f' variants each arch has
// (Target::names_of), e.g. {..., "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_100f", ...}.
std::vector<std::string> supported_targets();
// The canonical NVRTC options for a target (no paths).
std::vector<std::string> compile_options(const Target& target);
// What decides the cache key of (plan, emitted) compiled for target.
cache::KeyInputs key_inputs(const KernelPlan& plan, const EmittedKernel& emitted,
                            const Target& target);
// Same, from a spec: plan(), emit(), then key_inputs().
cache::KeyInputs key_inputs(const NormSpec& spec, const Target& target);

// Compiles with the embedded templates as in-memory headers. Throws Error(kCompile) with the
// log, the options and the source when NVRTC rejects it.
CompiledKernel compile(const EmittedKernel& emitted, const Target& target);

// The metadata JSON stored with a cache entry.
std::string entry_metadata(const NormSpec& spec, const KernelPlan& plan,
                           const CompiledKernel& compiled);

}  // namespace normjit
