#include "cache/cache.hpp"
#include "normjit/error.hpp"
#include "tools/commands.hpp"

namespace normjit::tools {
namespace {

// A flag whose text is kept as given: CLI11's own conversions would take 0x10 or " 3" for
// numbers, and a sentinel default would hide a value given as "", -1 or nan.
CLI::Option* add_text(CLI::App& app, const std::string& name, std::optional<std::string>& value,
                      const std::string& help) {
  return app.add_option_function<std::string>(
      name, [&value](const std::string& text) { value = text; }, help);
}

}  // namespace

void SpecFlags::add_to(CLI::App& app, bool required) {
  auto* op_flag = add_text(app, "--op", op, "rmsnorm | layernorm | groupnorm");
  auto* shape_flag = add_text(app, "--shape", shape, "full tensor shape, e.g. 8,64,32,32");
  if (required) {
    op_flag->required();
    shape_flag->required();
  }
  add_text(app, "--dtype", dtype, "f32 | f16 | bf16 (default f32)");
  add_text(app, "--normalized-dims", normalized_dims,
           "reduce over the last K dims, 0 to 8 (default: rmsnorm dim 1, layernorm all but the "
           "first)");
  add_text(app, "--groups", groups, "groupnorm: number of groups, dividing C");
  add_text(app, "--affine", affine,
           "none | weight | both (default: rmsnorm none, layernorm and groupnorm both)");
  add_text(app, "--eps", eps,
           "epsilon added to the variance, a normal float (default 1e-5; the kernel takes it as "
           "a float)");
}

NormSpec SpecFlags::resolve() const {
  if (!op)
    throw_invalid_argument("--op", "(missing)", "expected one of rmsnorm, layernorm, groupnorm");
  if (!shape) throw_invalid_argument("--shape", "(missing)", "expected sizes like 8,64,32,32");
  SpecFields f;
  f.op = parse_op(*op, "--op");
  f.shape = parse_shape(*shape, "--shape");
  if (dtype) f.dtype = parse_dtype(*dtype, "--dtype");
  if (normalized_dims)
    f.normalized_dims = parse_normalized_dims(*normalized_dims, "--normalized-dims");
  if (groups) f.groups = parse_groups(*groups, "--groups");
  if (affine) f.affine = parse_affine(*affine, "--affine");
  if (eps) f.eps = parse_eps(*eps, "--eps");
  return NormSpec::from_fields(f);
}

std::string default_cache_dir() { return cache::StoreOptions::from_env().dir; }

}  // namespace normjit::tools
