#include "cache/cache.hpp"
#include "normjit/error.hpp"
#include "tools/commands.hpp"

namespace normjit::tools {

void SpecFlags::add_to(CLI::App& app, bool required) {
  auto* op_flag = app.add_option("--op", op, "rmsnorm | layernorm | groupnorm");
  auto* shape_flag = app.add_option("--shape", shape, "full tensor shape, e.g. 8,64,32,32");
  if (required) {
    op_flag->required();
    shape_flag->required();
  }
  app.add_option("--dtype", dtype, "f32 | f16 | bf16 (default f32)");
  app.add_option(
      "--normalized-dims", normalized_dims,
      "reduce over the last K dims (default: rmsnorm dim 1, layernorm all but the first)");
  app.add_option("--groups", groups, "groupnorm: number of groups, dividing C");
  app.add_option("--affine", affine,
                 "none | weight | both (default: rmsnorm none, layernorm and groupnorm both)");
  app.add_option("--eps", eps, "epsilon added to the variance (default 1e-5)");
}

NormSpec SpecFlags::resolve() const {
  SpecFields f;
  f.op = parse_op(op, "--op");
  f.shape = parse_shape(shape, "--shape");
  if (!dtype.empty()) f.dtype = parse_dtype(dtype, "--dtype");
  if (normalized_dims >= 0) f.normalized_dims = normalized_dims;
  if (groups >= 0) f.groups = groups;
  if (!affine.empty()) f.affine = parse_affine(affine, "--affine");
  if (eps >= 0) f.eps = eps;
  return NormSpec::from_fields(f);
}

std::string default_cache_dir() { return cache::StoreOptions::from_env().dir; }

}  // namespace normjit::tools
