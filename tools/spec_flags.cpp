#include <sstream>

#include "cache/cache.hpp"
#include "normjit/error.hpp"
#include "tools/commands.hpp"
#include "tools/util.hpp"

namespace normjit::tools {
namespace {

// A flag whose text is kept as given: CLI11's own conversions would take 0x10 or " 3" for
// numbers, and a sentinel default would hide a value given as "", -1 or nan.
CLI::Option* add_text(CLI::App& app, const std::string& name, std::optional<std::string>& value,
                      const std::string& help) {
  return app.add_option_function<std::string>(
      name, [&value](const std::string& text) { value = text; }, help);
}

// --residual checked against the spec it joins, so that the error names the flag and only what
// was typed: a bare --residual stands for x's dtype, which the spec's own check (made for spec
// text, "invalid residual 'f32'") would quote as if it had been given.
void check_residual_flag(const NormSpec& s, const std::string& given) {
  const std::string flag = given == SpecFlags::kResidualOfX ? std::string("--residual")
                                                            : "--residual " + quoted_excerpt(given);
  if (s.op == Op::kGroupNorm || s.channel_form()) {
    const std::string what = s.op == Op::kGroupNorm
                                 ? std::string("groupnorm does not")
                                 : std::string(to_string(s.op)) +
                                       " over the channels (normalized_dims 0, the channel form) "
                                       "does not; --normalized-dims K normalizes the last K dims";
    throw Error(ErrorCode::kInvalidArgument,
                "invalid " + flag +
                    ": only the trailing forms (rmsnorm or layernorm over the last dims) take a "
                    "residual; " +
                    what);
  }
}

}  // namespace

bool SpecFlags::any() const { return !first_given().empty(); }

std::string SpecFlags::first_given() const {
  const std::pair<bool, const char*> flags[] = {{bool(text), "--spec"},
                                                {bool(op), "--op"},
                                                {bool(shape), "--shape"},
                                                {bool(dtype), "--dtype"},
                                                {bool(normalized_dims), "--normalized-dims"},
                                                {bool(groups), "--groups"},
                                                {bool(affine), "--affine"},
                                                {bool(eps), "--eps"},
                                                {bool(param_dtype), "--param-dtype"},
                                                {bool(out_dtype), "--out-dtype"},
                                                {bool(weight_offset), "--weight-offset"},
                                                {bool(residual), "--residual"},
                                                {bool(activation), "--activation"},
                                                {save_stats, "--save-stats"},
                                                {bool(layout), "--layout"},
                                                {backward, "--backward"}};
  for (const auto& [given, name] : flags) {
    if (given) return name;
  }
  return "";
}

void SpecFlags::add_to(CLI::App& app, bool required) {
  auto* op_flag = add_text(app, "--op", op, "rmsnorm | layernorm | groupnorm");
  auto* shape_flag = add_text(app, "--shape", shape, "full tensor shape, e.g. 8,64,32,32");
  if (required) {
    op_flag->required();
    shape_flag->required();
  }
  add_text(app, "--dtype", dtype, "f32 | f16 | bf16 (default f32)");
  add_text(app, "--normalized-dims", normalized_dims,
           "reduce over the last K dims, 1 to 8, or 0: dim 1 of [N, C, *spatial] (default: "
           "rmsnorm 0, layernorm all but the first)");
  add_text(app, "--groups", groups, "groupnorm: number of groups, dividing C");
  add_text(app, "--affine", affine,
           "none | weight | both (default: rmsnorm none, layernorm and groupnorm both)");
  add_text(app, "--eps", eps,
           "epsilon added to the variance, a normal float (default 1e-5; the kernel takes it as "
           "a float)");
  add_text(app, "--param-dtype", param_dtype,
           "f32 | f16 | bf16: dtype of weight and bias (default: --dtype)");
  add_text(app, "--out-dtype", out_dtype,
           "f32 | f16 | bf16 | e4m3 | e5m2: dtype of y; fp8 is scaled by a per-tensor f32 at "
           "launch and saturated (default: --dtype)");
  add_text(app, "--residual", residual,
           "add a residual (f32 or x's dtype, bare: x's dtype) to x, normalize the sum and write "
           "it back; trailing forms only. With --backward (x's dtype): x is that sum h, and h's "
           "gradient from its other uses is added to dx")
      ->expected(0, 1)
      ->default_str(kResidualOfX)  // what CLI11 hands over for a bare --residual
      ->option_text("[DTYPE]");    // in --help, instead of the default's NUL
  add_text(app, "--weight-offset", weight_offset,
           "use (offset + weight) as the weight, in f32; Gemma's RMSNorm: 1 (default 0)");
  add_text(app, "--activation", activation,
           "none | silu | gelu: applied to y after the affine step, in the same kernel (gelu: "
           "the exact erf form; with --backward: dy taken through its derivative; default "
           "none)");
  app.add_flag("--save-stats", save_stats,
               "also write each row's mean and rstd in f32, for a backward pass");
  add_text(app, "--layout", layout,
           "nchw | nhwc: memory order of [N, C, *spatial] for groupnorm and the channel forms; "
           "nhwc: channels innermost (channels_last), the shape still N,C,... (default nchw)");
  app.add_flag("--backward", backward,
               "the backward kernel: dx, dweight and dbias from x, dy and the saved mean and "
               "rstd (every op and form, rows of any length; with --residual, the fused "
               "add's: dx plus h's gradient; with --activation, the forward's norm and "
               "activation, dy being the activation's output's gradient)");
  if (!required) {
    auto* spec_flag =
        add_text(app, "--spec", text,
                 "the whole spec as text instead of the flags above, e.g. \"op=rmsnorm "
                 "shape=4,4096 normalized_dims=1 dtype=bf16\": the form 'dump --emit plan' prints "
                 "after 'spec:' and 'bench --specs' reads a line each");
    // The same text as the command's one positional argument, as `cache explain` takes it.
    add_text(app, "SPEC", text, "the spec text as --spec takes it, given without the flag")
        ->excludes(spec_flag);
  }
}

// (Here rather than in util.cpp: the spec flags' unit test builds this file alone.)
PrintedSpec printed_spec(const std::string& text) {
  PrintedSpec out;
  std::istringstream words(text);
  std::string word;
  bool first = true;
  while (words >> word) {
    if (first && word == "spec:") {
      first = false;
      continue;
    }
    first = false;
    const bool arch = word.rfind("arch=", 0) == 0, key = word.rfind("key=", 0) == 0;
    if ((arch && out.arch) || (key && out.key)) {
      // As a spec's own keys: given twice is an error, not the last one winning.
      throw_invalid_argument("spec", quoted_excerpt(text),
                             std::string("key '") + (arch ? "arch" : "key") + "' is given twice");
    }
    if (arch) {
      out.arch = word.substr(5);
    } else if (key) {
      out.key = word.substr(4);
    } else {
      out.spec += (out.spec.empty() ? "" : " ") + word;
    }
  }
  return out;
}

std::optional<std::string> SpecFlags::printed_arch() const {
  return text ? printed_spec(*text).arch : std::nullopt;
}

NormSpec SpecFlags::resolve() const {
  if (text) {
    SpecFlags flags = *this;
    flags.text.reset();
    if (flags.any()) {
      throw_invalid_argument("--spec", quoted_excerpt(*text),
                             "give the spec as text or as flags (--op, --shape, ...), not both");
    }
    if (text->find_first_not_of(" \t\n") == std::string::npos) {
      throw_invalid_argument("--spec", quoted_excerpt(*text),
                             "expected a spec text such as \"op=rmsnorm shape=4,4096 "
                             "normalized_dims=1\"");
    }
    try {
      return NormSpec::parse(printed_spec(*text).spec);
    } catch (const Error& e) {
      throw Error(e.code(), "--spec: " + std::string(e.what()));
    }
  }
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
  if (param_dtype) f.param_dtype = parse_dtype(*param_dtype, "--param-dtype");
  if (out_dtype) f.out_dtype = parse_out_dtype(*out_dtype, "--out-dtype");
  if (residual) {
    f.residual = *residual == kResidualOfX ? f.dtype.value_or(NormSpec{}.dtype)
                                           : parse_dtype(*residual, "--residual");
  }
  if (weight_offset) f.weight_offset = parse_weight_offset(*weight_offset, "--weight-offset");
  if (activation) f.activation = parse_activation(*activation, "--activation");
  if (save_stats) f.save_stats = true;
  if (layout) f.layout = parse_layout(*layout, "--layout");
  if (backward) f.backward = true;
  if (residual) {
    SpecFields without = f;
    without.residual.reset();
    check_residual_flag(NormSpec::from_fields(without), *residual);
  }
  return NormSpec::from_fields(f);
}

std::string default_cache_dir() { return cache::StoreOptions::dir_from_env(); }

std::string cache_dir_source(const std::string& flag) {
  if (!flag.empty()) return "--cache-dir";
  const auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value != nullptr ? value : "");
  };
  if (!env("NORMJIT_CACHE_DIR").empty()) return "NORMJIT_CACHE_DIR";
  // As StoreOptions::dir_from_env: a relative XDG_CACHE_HOME is ignored.
  return env("XDG_CACHE_HOME").rfind('/', 0) == 0
             ? "default cache directory (XDG_CACHE_HOME/normjit)"
             : "default cache directory (~/.cache/normjit)";
}

std::optional<std::string> cache_dir_problem(const std::string& dir) {
  cache::StoreOptions probe;
  probe.dir = dir;
  probe.max_bytes = cache::kNoMaxBytes;
  probe.must_write = true;
  try {
    const cache::Store store(probe);
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

}  // namespace normjit::tools
