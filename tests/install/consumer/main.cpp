// Uses the installed headers and library the way the README shows: no GPU needed for
// planning and compiling.
#include <normjit/normjit.h>

#include <cstdio>
#include <normjit/normjit.hpp>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  normjit::EngineOptions options;
  options.cache_dir = argv[1];
  normjit::Engine engine(options);
  const auto spec = normjit::NormSpec::parse("op=layernorm shape=4,1024 dtype=bf16");
  const bool compiled = engine.precompile(spec, "sm_90");
  std::printf("%s: %s\n", spec.to_string().c_str(), compiled ? "compiled" : "cached");
  std::printf("status name: %s\n", normjit_status_name(NORMJIT_ERROR_CACHE_MISS));
  return compiled ? 0 : 1;
}
