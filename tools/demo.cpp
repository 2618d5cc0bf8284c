// normjit demo: the seed problems of the design, end to end. On a GPU: prepare each kernel,
// launch it, check sampled outputs against a float64 CPU reference and time it. Without a
// GPU: say so, plan and compile each kernel into the cache and show where it went.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "generator/plan.hpp"
#include "normjit/normjit.hpp"
#include "runtime/compiler.hpp"
#include "runtime/device.hpp"
#include "tools/commands.hpp"
#include "tools/reference.hpp"
#include "tools/util.hpp"

namespace normjit::tools {
namespace {

struct DemoOptions {
  std::string arch = "sm_90";
  std::string cache_dir;
  int repeat = 10;
  int samples = 64;
  std::vector<std::string> gpu_only_given;  // --repeat, --samples where given: unused without one
};

std::vector<double> download_at(const device::Buffer& buffer, Dtype dtype,
                                const reference::Unit& unit) {
  const size_t element = size_of(dtype);
  std::vector<double> out;
  if (unit.contiguous) {
    std::vector<unsigned char> raw(unit.offsets.size() * element);
    buffer.download(raw.data(), raw.size(), unit.offsets[0] * element);
    for (float v : reference::decode(dtype, raw.data(), unit.offsets.size())) out.push_back(v);
    return out;
  }
  for (int64_t offset : unit.offsets) {
    unsigned char raw[4];
    buffer.download(raw, element, offset * element);
    out.push_back(reference::decode(dtype, raw, 1)[0]);
  }
  return out;
}

// Relative L2 error of the kernel's output over `samples` random units.
double check(const NormSpec& spec, const device::Buffer& x, const device::Buffer& y,
             const std::vector<double>& weight, const std::vector<double>& bias, int samples) {
  std::mt19937_64 rng(7);
  const int64_t total = reference::units(spec);
  double err2 = 0, ref2 = 0;
  for (int i = 0; i < samples; ++i) {
    const int64_t u = std::uniform_int_distribution<int64_t>(0, total - 1)(rng);
    const reference::Unit unit = reference::unit(spec, u);
    const std::vector<double> ref =
        reference::normalize(spec, unit, download_at(x, spec.dtype, unit), weight, bias);
    const std::vector<double> got = download_at(y, spec.dtype, unit);
    for (size_t j = 0; j < ref.size(); ++j) {
      if (!std::isfinite(got[j])) return INFINITY;
      err2 += (got[j] - ref[j]) * (got[j] - ref[j]);
      ref2 += ref[j] * ref[j];
    }
  }
  return std::sqrt(err2 / std::max(ref2, 1e-300));
}

void run_on_gpu(Engine& engine, const NormSpec& spec, const DemoOptions& o) {
  Kernel kernel = engine.prepare(spec);
  const Source source = kernel.source();
  const size_t element = size_of(spec.dtype);
  const size_t bytes = size_t(spec.elements()) * element;
  device::Buffer x(bytes), y(bytes);
  fill_random(x, spec.dtype, 1);
  y.fill_bytes(0xff);  // poison: NaN in every dtype
  std::vector<double> weight, bias;
  device::Buffer w, b;
  if (spec.affine != Affine::kNone) {
    std::mt19937_64 rng(3);
    std::normal_distribution<float> normal(1.0f, 0.5f);
    std::vector<float> values(spec.param_elements());
    for (float& v : values) v = normal(rng);
    auto encoded = reference::encode(spec.dtype, values);
    w = device::Buffer(encoded.size());
    w.upload(encoded.data(), encoded.size());
    for (float v : reference::decode(spec.dtype, encoded.data(), values.size()))
      weight.push_back(v);
    if (spec.affine == Affine::kBoth) {
      for (float& v : values) v = normal(rng) - 1.0f;
      encoded = reference::encode(spec.dtype, values);
      b = device::Buffer(encoded.size());
      b.upload(encoded.data(), encoded.size());
      for (float v : reference::decode(spec.dtype, encoded.data(), values.size()))
        bias.push_back(v);
    }
  }
  const LaunchArgs args{x.get(), y.get(), w.get(), b.get(), spec.batch(), float(spec.eps)};
  kernel.launch(args, nullptr);
  NORMJIT_CU(driver::api().cuCtxSynchronize());
  const double error = check(spec, x, y, weight, bias, o.samples);
  std::vector<float> times;
  device::Event start, stop;
  for (int i = 0; i < o.repeat; ++i) {
    start.record();
    kernel.launch(args, nullptr);
    stop.record();
    times.push_back(stop.since(start));
  }
  std::sort(times.begin(), times.end());
  const double ms = times[times.size() / 2];
  const double moved = 2.0 * bytes + 2.0 * w.bytes() + b.bytes();
  const double tolerance = spec.dtype == Dtype::kF32 ? 1e-5 : 1e-2;
  std::printf("  %-9s %-4s %8.3f ms %8.1f GB/s  rel.err %.2e %s  binary: %s\n", to_string(spec.op),
              to_string(spec.dtype), ms, moved / ms * 1e-6, error,
              error <= tolerance ? "ok" : "FAILED", to_string(source));
  if (!(error <= tolerance)) {
    throw Error(ErrorCode::kInternal, "demo: wrong result for " + spec.to_string());
  }
}

// Where a compiled kernel goes: "in DIR", or memory only where the directory cannot be written
// (the engine warned why as it opened it; a probe that must write says it again, silently).
std::string where_kernels_go(const std::string& dir) {
  const std::optional<std::string> problem = cache_dir_problem(dir);
  return problem ? "in memory only (" + *problem + ")" : "in " + dir;
}

void run_demo(const DemoOptions& o) {
  // Checked as dump and prewarm check it, GPU or not, before anything is printed.
  const Target target = parse_arch("--arch", o.arch);
  EngineOptions engine_options;
  engine_options.cache_dir = o.cache_dir;
  Engine engine(engine_options);
  const bool gpu = gpu_available();
  const std::string cache_dir = o.cache_dir.empty() ? default_cache_dir() : o.cache_dir;
  const std::string where = where_kernels_go(cache_dir);
  if (gpu) {
    device::PrimaryContext context(0);
    std::printf("normjit demo on %s; kernels cached %s\n", context.name().c_str(), where.c_str());
    for (const NormSpec& spec : seed_specs()) {
      std::printf("%s\n", spec.to_string().c_str());
      run_on_gpu(engine, spec, o);
    }
    return;
  }
  std::printf(
      "normjit demo: no GPU here (%s); planning and compiling the seed kernels for %s "
      "without launching them\n",
      gpu_unavailable_reason().c_str(), o.arch.c_str());
  if (!o.gpu_only_given.empty()) {
    std::string flags;
    for (const std::string& flag : o.gpu_only_given) flags += (flags.empty() ? "" : " and ") + flag;
    std::fflush(stdout);
    std::fprintf(stderr, "normjit: warning: %s %s only on a GPU (launches): not used here\n",
                 flags.c_str(), o.gpu_only_given.size() == 1 ? "applies" : "apply");
  }
  // Where the directory could be written at the start, whether each kernel reached it: a save
  // that fails later (a full disk) leaves it in the engine's memory alone, with a warning.
  std::unique_ptr<cache::Store> disk;
  if (!cache_dir_problem(cache_dir)) {
    cache::StoreOptions store_options;
    store_options.dir = cache_dir;
    disk = std::make_unique<cache::Store>(store_options);
  }
  for (const NormSpec& spec : seed_specs()) {
    std::printf("\n%s\n", spec.to_string().c_str());
    const KernelPlan p = plan(spec, target);
    std::printf("%s", p.to_string().c_str());
    std::fflush(stdout);  // the compile takes a moment: show what is being built first
    const bool compiled = engine.precompile(spec, o.arch);
    const std::string key = key_inputs(spec, target).key();
    if (compiled) {
      const std::string saved = !disk || disk->published(key)
                                    ? where
                                    : "in memory only (it could not be written to " + cache_dir +
                                          ": see the warning above)";
      std::printf("binary: compiled now, key %s, %s\n", key.c_str(), saved.c_str());
    } else {
      std::printf("binary: already cached, key %s\n", key.c_str());
    }
  }
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto options = std::make_shared<DemoOptions>();
  CLI::App* demo = app.add_subcommand(
      "demo",
      "Run the seed problems of the design (RMSNorm, LayerNorm, GroupNorm in f32 and bf16):\n"
      "prepare each kernel, and on a GPU launch it, check it against a float64 CPU reference\n"
      "and time it. Without a GPU, plan and compile each kernel into the cache.\n"
      "Example: normjit demo --repeat 20");
  demo->add_option("--arch", options->arch,
                   "target to compile for when there is no GPU (checked on a GPU too)")
      ->capture_default_str();
  add_text_option(
      *demo, "--cache-dir", options->cache_dir,
      "cache directory (default: $NORMJIT_CACHE_DIR, else $XDG_CACHE_HOME/normjit, else "
      "~/.cache/normjit)");
  CLI::Option* repeat = add_integer_option(*demo, "--repeat", options->repeat, 1, 100000,
                                           "timed launches per kernel, median reported (default "
                                           "10; on a GPU only)");
  CLI::Option* samples = add_integer_option(*demo, "--samples", options->samples, 1, 100000,
                                            "reduction units checked against the reference "
                                            "(default 64; on a GPU only)");
  demo->callback([options, repeat, samples] {
    for (const CLI::Option* given : {repeat, samples}) {
      if (given->count() > 0) options->gpu_only_given.push_back(given->get_name());
    }
    run_demo(*options);
  });
}

}  // namespace normjit::tools
