// Fuzz target: NormSpec::parse, the one spec syntax of the CLI, manifests, cache metadata and
// error messages. For any bytes: parse either throws normjit::Error (the caller's bad input,
// never another exception or a crash), or returns a spec whose canonical text parses back to
// the same spec and the same text; and plan() and emit() of that spec, on the targets prewarm
// builds for, either throw normjit::Error or give a plan whose emitted source is the same on a
// second emit (pure, deterministic).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "generator/emit.hpp"
#include "generator/plan.hpp"
#include "generator/target.hpp"
#include "normjit/error.hpp"
#include "normjit/spec.hpp"
#include "tests/fuzz/fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  normjit::NormSpec spec;
  try {
    spec = normjit::NormSpec::parse(text);
  } catch (const normjit::Error&) {
    return 0;  // refused, with a message naming the field: the expected outcome of most inputs
  }
  const std::string canonical = spec.to_string();
  normjit::NormSpec again;
  try {
    again = normjit::NormSpec::parse(canonical);
  } catch (const normjit::Error& e) {
    std::fprintf(stderr, "fuzz: the canonical text of an accepted spec is refused: %s\n%s\n",
                 canonical.c_str(), e.what());
    std::abort();
  }
  NORMJIT_FUZZ_CHECK(again == spec);
  NORMJIT_FUZZ_CHECK(again.to_string() == canonical);
  // Shapes too large to plan quickly are still planned: plan() is arithmetic on the sizes.
  for (const char* arch : {"sm_80", "sm_90"}) {
    const normjit::Target target = normjit::Target::parse(arch);
    normjit::KernelPlan plan;
    try {
      plan = normjit::plan(spec, target);
    } catch (const normjit::Error&) {
      continue;  // a spec the target cannot run (fp8 before sm_89, sizes past a limit)
    }
    const normjit::EmittedKernel first = normjit::emit(plan);
    NORMJIT_FUZZ_CHECK(!first.source.empty() && !first.name_expression.empty());
    NORMJIT_FUZZ_CHECK(normjit::emit(plan).source == first.source);
  }
  return 0;
}
