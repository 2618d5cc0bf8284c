// normjit bench: time kernels on the GPU against the device's own copy bandwidth, and measure
// the JIT's latencies (cold compile, disk hit, memory hit, host launch overhead).
//
// Normalization is memory-bound, so the yardstick is a device-to-device copy measured in the
// same run: a kernel that reads x once and writes y once cannot beat it.
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "generator/emit.hpp"
#include "generator/plan.hpp"
#include "normjit/error.hpp"
#include "normjit/normjit.hpp"
#include "runtime/compiler.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "tools/commands.hpp"
#include "tools/reference.hpp"
#include "tools/util.hpp"

namespace normjit::tools {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

constexpr size_t kCopyBytes = size_t{1} << 30;  // copy baseline: large enough to stream HBM
constexpr int kCopyRuns = 10;
constexpr int kMaxBufferPairs = 64;
constexpr size_t kSlotAlignment = 256;  // every rotated buffer starts 256-byte aligned

struct BenchOptions {
  SpecFlags spec;
  bool seeds = false;
  std::string specs_file;  // --specs: one spec text per line
  bool jit_latency = false;
  bool compile_only = false;        // --compile: NVRTC time per kernel, no GPU needed
  std::optional<std::string> arch;  // --compile's target (default sm_90); only with --compile
  bool json = false;
  int repeat = 20;
  int warmup = 3;
  int calls = 10000;  // --jit-latency: calls per host-overhead measurement
  bool warmup_given = false, calls_given = false, repeat_given = false;
  std::string cache_dir;  // empty: not given; --jit-latency: where its scratch directory goes
};

struct DeviceInfo {
  std::string name;
  std::string arch;
  int sms = 0;
  int64_t l2_bytes = 0;

  static DeviceInfo of(const device::PrimaryContext& context) {
    DeviceInfo d;
    d.name = context.name();
    d.arch = "sm_" +
             std::to_string(context.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
                            context.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
    d.sms = context.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    d.l2_bytes = context.attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    return d;
  }
  Json to_json() const {
    return {{"name", name}, {"arch", arch}, {"sms", sms}, {"l2_bytes", l2_bytes}};
  }
};

struct Spread {
  double median = 0, min = 0, max = 0;
  static Spread of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return {median, v.front(), v.back()};
  }
};

double gb_per_s(uint64_t bytes, double ms) { return double(bytes) / (ms * 1e-3) * 1e-9; }

// The device-to-device copy baseline. Its buffers stay alive: before each timed sample a copy
// evicts x from L2 and keeps the GPU busy while the host enqueues the sample's launches, so
// that neither an L2-resident input nor the host's launch rate is what gets timed.
class CopyBaseline {
 public:
  CopyBaseline() : src_(kCopyBytes), dst_(kCopyBytes) {
    src_.fill_bytes(0x3c);
    dst_.fill_bytes(0);
    std::vector<double> ms;
    device::Event start, stop;
    for (int i = 0; i < kCopyRuns + 2; ++i) {
      start.record();
      copy();
      stop.record();
      const double t = stop.since(start);
      if (i >= 2) ms.push_back(t);  // the first two warm up clocks and TLBs
    }
    time_ = Spread::of(ms);
  }
  // Asynchronous for the host: device-to-device copies take no host-side synchronization.
  void copy() { NORMJIT_CU(driver::api().cuMemcpyDtoD(dst_.ptr(), src_.ptr(), kCopyBytes)); }
  uint64_t bytes() const { return 2 * uint64_t{kCopyBytes}; }  // read + write
  double gbps() const { return gb_per_s(bytes(), time_.median); }
  double median_ms() const { return time_.median; }
  Json to_json() const {
    return {{"bytes", bytes()},    {"runs", kCopyRuns},   {"median_ms", time_.median},
            {"min_ms", time_.min}, {"max_ms", time_.max}, {"gbps", gbps()}};
  }

 private:
  device::Buffer src_, dst_;
  Spread time_;
};

// Device parameters with random values of the spec's parameter dtype (empty buffer when absent).
device::Buffer random_params(const NormSpec& spec, float mean, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(mean, 0.5f);
  std::vector<float> values(size_t(spec.param_elements()));
  for (float& v : values) v = normal(rng);
  const std::vector<unsigned char> bytes = reference::encode(spec.param_type(), values);
  device::Buffer buffer(bytes.size());
  buffer.upload(bytes.data(), bytes.size());
  return buffer;
}

struct KernelTiming {
  Spread ms;             // per launch
  uint64_t bytes = 0;    // x + y + parameters, each once (backward: and dy, gradients, stats)
  int buffer_pairs = 1;  // x/y pairs rotated over
  Source source = Source::kMemory;
};

KernelTiming time_kernel(Engine& engine, const NormSpec& spec, const DeviceInfo& device,
                         CopyBaseline& copy, const BenchOptions& o) {
  Kernel kernel = engine.prepare(spec);
  KernelTiming timing;
  timing.source = kernel.source();
  // Bytes of one problem's x, y and residual (the variants' dtypes), each in slots aligned
  // for any vector width.
  const auto slot_of = [](size_t bytes) {
    return (bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  };
  const size_t x_bytes = size_t(spec.elements()) * size_of(spec.dtype);
  const size_t y_bytes = size_t(spec.elements()) * size_of(spec.out_type());
  // The residual, or for a backward kernel dy (x's dtype), rotated with x.
  const size_t r_bytes = spec.residual   ? size_t(spec.elements()) * size_of(*spec.residual)
                         : spec.backward ? x_bytes
                                         : 0;
  const size_t x_slot = slot_of(x_bytes), y_slot = slot_of(y_bytes), r_slot = slot_of(r_bytes);
  // The fused add's backward (a residual with backward) reads dh too (x's dtype), rotated with x.
  const bool reads_dh = spec.backward && spec.residual.has_value();
  const size_t dh_slot = reads_dh ? slot_of(x_bytes) : 0;
  // A tensor under ~2x L2 would be served from L2 on repeated launches: rotate over enough
  // buffer sets that one pass touches about 4x L2.
  const double footprint = 4.0 * double(device.l2_bytes);
  timing.buffer_pairs =
      int(std::clamp(std::ceil(footprint / double(x_slot + y_slot + r_slot + dh_slot)), 1.0,
                     double(kMaxBufferPairs)));
  const int pairs = timing.buffer_pairs;
  device::Buffer xs(x_slot * pairs), ys(y_slot * pairs);
  fill_random(xs, spec.dtype, /*seed=*/1);
  ys.fill_bytes(0);
  device::Buffer weight, bias, residuals, scale, mean, rstd;
  if (spec.affine != Affine::kNone) weight = random_params(spec, 1.0f, 2);
  if (spec.affine == Affine::kBoth) bias = random_params(spec, 0.0f, 3);
  // The variants' arguments: the residual (updated in place, as inference engines do), the
  // fp8 output's scale (1), and the saved statistics (one f32 per row of each).
  if (spec.residual || spec.backward) {
    residuals = device::Buffer(r_slot * pairs);
    fill_random(residuals, spec.residual.value_or(spec.dtype), /*seed=*/4);
  }
  device::Buffer dhs;
  if (reads_dh) {
    dhs = device::Buffer(dh_slot * pairs);
    fill_random(dhs, spec.dtype, /*seed=*/5);
  }
  if (is_fp8(spec.out_type())) {
    const float one = 1.0f;
    scale = device::Buffer(sizeof(float));
    scale.upload(&one, sizeof(one));
  }
  const size_t stats_bytes = size_t(spec.elements() / spec.row_length()) * sizeof(float);
  if (spec.save_stats || spec.backward) {
    rstd = device::Buffer(stats_bytes);
    if (spec.op != Op::kRmsNorm) mean = device::Buffer(stats_bytes);
  }
  // A backward kernel reads the statistics (rstd 1, mean 0: finite gradients of random x) and
  // writes dweight and dbias.
  device::Buffer dweight, dbias;
  if (spec.backward) {
    const std::vector<float> ones(stats_bytes / sizeof(float), 1.0f);
    rstd.upload(ones.data(), stats_bytes);
    if (mean.bytes()) mean.fill_bytes(0);
    if (spec.affine != Affine::kNone) dweight = device::Buffer(weight.bytes());
    if (spec.affine == Affine::kBoth) dbias = device::Buffer(bias.bytes());
  }
  // Each once: x, y (dx), the residual read and written (dy read, and dh), the parameters (and
  // their gradients), the statistics.
  timing.bytes = uint64_t{x_bytes} + y_bytes + (spec.backward ? 1 : 2) * uint64_t{r_bytes} +
                 (reads_dh ? uint64_t{x_bytes} : 0) + weight.bytes() + bias.bytes() +
                 dweight.bytes() + dbias.bytes() + mean.bytes() + rstd.bytes();

  auto launch = [&](int pair) {
    if (spec.backward) {
      BackwardArgs args;
      args.x = reinterpret_cast<const void*>(xs.ptr() + pair * x_slot);
      args.dy = reinterpret_cast<const void*>(residuals.ptr() + pair * r_slot);
      args.dx = reinterpret_cast<void*>(ys.ptr() + pair * y_slot);
      args.mean = static_cast<const float*>(mean.get());
      args.rstd = static_cast<const float*>(rstd.get());
      args.weight = weight.get();
      args.dweight = dweight.get();
      args.dbias = dbias.get();
      args.batch = spec.batch();
      if (reads_dh) args.dresidual_out = reinterpret_cast<const void*>(dhs.ptr() + pair * dh_slot);
      // With an activation the kernel reads the bias (the activation's input xhat * w + b).
      if (spec.activation != Activation::kNone) args.bias = bias.get();
      kernel.launch_backward(args, nullptr);
      return;
    }
    LaunchArgs args;
    args.x = reinterpret_cast<const void*>(xs.ptr() + pair * x_slot);
    args.y = reinterpret_cast<void*>(ys.ptr() + pair * y_slot);
    args.weight = weight.get();
    args.bias = bias.get();
    args.batch = spec.batch();
    args.eps = float(spec.eps);
    if (spec.residual) {
      args.residual = reinterpret_cast<const void*>(residuals.ptr() + pair * r_slot);
      args.residual_out = const_cast<void*>(args.residual);
    }
    args.scale = static_cast<const float*>(scale.get());
    args.mean = static_cast<float*>(mean.get());
    args.rstd = static_cast<float*>(rstd.get());
    kernel.launch(args, nullptr);
  };
  for (int i = 0; i < o.warmup; ++i) {
    for (int p = 0; p < pairs; ++p) launch(p);
  }
  NORMJIT_CU(driver::api().cuCtxSynchronize());
  std::vector<double> ms;
  device::Event start, stop;
  for (int r = 0; r < o.repeat; ++r) {
    copy.copy();
    start.record();
    for (int p = 0; p < pairs; ++p) launch(p);
    stop.record();
    ms.push_back(stop.since(start) / pairs);
  }
  timing.ms = Spread::of(ms);
  return timing;
}

// --specs FILE: one spec text per line; blank lines and lines starting with '#' are skipped.
// A line that does not parse is an error naming the file and the line.
// Like a manifest, the file is refused past 16 MiB (or where it never ends: /dev/zero), and a
// directory or an unreadable file is named as such.
std::vector<NormSpec> specs_of_file(const std::string& path, const std::string& arch_word_hint) {
  std::istringstream in(
      read_bounded_file("--specs", path, size_t{16} << 20, "split it into several files"));
  std::vector<NormSpec> specs;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    try {
      // A line as dump --emit plan prints it ("spec: op=...") reads as the spec after it; an
      // arch= or key= word (cache ls, prewarm --check) has no meaning here: bench times
      // kernels for this GPU's target.
      const PrintedSpec printed = printed_spec(line.substr(first));
      if (printed.arch || printed.key) {
        throw Error(ErrorCode::kInvalidArgument,
                    std::string(printed.arch ? "arch=" + *printed.arch : "key=" + *printed.key) +
                        ": " + arch_word_hint);
      }
      specs.push_back(NormSpec::parse(printed.spec));
    } catch (const Error& e) {
      throw Error(e.code(), "invalid --specs '" + path + "' line " + std::to_string(number) + ": " +
                                e.what());
    }
  }
  if (specs.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "invalid --specs '" + path + "': it lists no spec (one spec text per line)");
  }
  return specs;
}

std::vector<NormSpec> requested_specs(const BenchOptions& o) {
  // A spec's arch= word (cache ls, prewarm --check) has no meaning in bench: it times GPU 0's
  // own target, or --compile's --arch.
  const std::string arch_word_hint =
      o.compile_only ? "bench --compile compiles for --arch; drop the word and give --arch"
                     : "bench times kernels for GPU 0's own target; drop the word (or use "
                       "--compile --arch for compile times)";
  const bool spec_flags = o.spec.op || o.spec.shape || o.spec.text;
  const bool listed = !o.specs_file.empty();
  if (!spec_flags && o.spec.any() && (o.seeds || listed || o.jit_latency)) {
    // A spec flag beside a source of specs of its own would be dropped without a word.
    const std::string flag = o.spec.first_given();
    throw Error(ErrorCode::kInvalidArgument,
                flag + " describes the spec of --op and --shape; it does not apply to " +
                    (o.seeds  ? "--seeds"
                     : listed ? "--specs, each line of which holds its whole spec"
                              : "--jit-latency"));
  }
  if (int(spec_flags) + int(o.seeds) + int(listed) + int(o.jit_latency) != 1) {
    throw Error(
        ErrorCode::kInvalidArgument,
        "bench needs exactly one of: a spec (--op ... --shape ..., --spec TEXT or the text alone), "
        "--seeds, --specs FILE, --jit-latency");
  }
  if (o.compile_only && o.jit_latency) {
    throw Error(ErrorCode::kInvalidArgument,
                "--compile times kernels of spec flags or --seeds, "
                "not --jit-latency");
  }
  if (o.seeds) return seed_specs();
  if (listed) return specs_of_file(o.specs_file, arch_word_hint);
  if (spec_flags) {
    if (const std::optional<std::string> arch = o.spec.printed_arch()) {
      throw_invalid_argument("--spec", quoted_excerpt(*o.spec.text),
                             "its arch=" + *arch + ": " + arch_word_hint);
    }
    return {o.spec.resolve()};
  }
  return {};
}

void require_gpu() {
  if (!gpu_available()) {
    throw Error(ErrorCode::kNoDevice, "bench needs a GPU and there is none here (" +
                                          gpu_unavailable_reason() +
                                          "); 'normjit dump' and 'normjit prewarm' work without");
  }
}

EngineOptions engine_options(const BenchOptions& o) {
  EngineOptions e;
  e.cache_dir = o.cache_dir;
  return e;
}

void run_kernels(const BenchOptions& o, const std::vector<NormSpec>& specs) {
  device::PrimaryContext context(0);
  const DeviceInfo device = DeviceInfo::of(context);
  Engine engine(engine_options(o));
  CopyBaseline copy;
  if (!o.json) {
    std::printf("normjit bench on %s (%s, %d SMs, L2 %.0f MiB); median of %d after %d warm-up\n",
                device.name.c_str(), device.arch.c_str(), device.sms,
                double(device.l2_bytes) / (1 << 20), o.repeat, o.warmup);
    std::printf("device-to-device copy: %.1f GB/s (%.0f MiB read + written, median %.3f ms)\n",
                copy.gbps(), double(copy.bytes()) / (1 << 20), copy.median_ms());
    std::fflush(stdout);
  }
  Json results = Json::array();
  size_t failed = 0;
  for (const NormSpec& spec : specs) {
    Json r = {{"spec", spec.to_string()}};
    try {
      const KernelTiming t = time_kernel(engine, spec, device, copy, o);
      const double gbps = gb_per_s(t.bytes, t.ms.median);
      r["median_ms"] = t.ms.median;
      r["min_ms"] = t.ms.min;
      r["max_ms"] = t.ms.max;
      r["bytes"] = t.bytes;
      r["gbps"] = gbps;
      r["copy_percent"] = 100.0 * gbps / copy.gbps();
      r["buffer_pairs"] = t.buffer_pairs;
      r["binary"] = to_string(t.source);
      if (!o.json) {
        std::printf(
            "%s\n  %9.4f ms median (min %.4f, max %.4f)  %8.2f MB  %8.1f GB/s  %5.1f%% "
            "of copy  [%s, %d buffer pair%s]\n",
            spec.to_string().c_str(), t.ms.median, t.ms.min, t.ms.max, double(t.bytes) * 1e-6, gbps,
            100.0 * gbps / copy.gbps(), to_string(t.source), t.buffer_pairs,
            t.buffer_pairs == 1 ? "" : "s");
      }
    } catch (const Error& e) {
      // --seeds and --specs time every spec they can and report the others: a spec the
      // generator does not cover yet is not a failure; any other error fails the run once the
      // rest are timed.
      if (specs.size() == 1 && !o.seeds) throw;
      const bool unsupported = e.code() == ErrorCode::kUnsupported;
      failed += !unsupported;
      r["error"] = e.what();
      r["error_code"] = to_string(e.code());
      if (!o.json) {
        std::printf("%s\n  %s: %s\n", spec.to_string().c_str(),
                    unsupported ? "not yet supported" : "FAILED", indent(e.what()).c_str());
      }
    }
    std::fflush(stdout);
    results.push_back(std::move(r));
  }
  if (o.json) {
    const Json doc = {{"device", device.to_json()},
                      {"copy", copy.to_json()},
                      {"repeat", o.repeat},
                      {"warmup", o.warmup},
                      {"results", results}};
    std::printf("%s\n", doc.dump(2).c_str());
  }
  if (failed) {
    throw Error(ErrorCode::kInternal, std::to_string(failed) + " of " +
                                          std::to_string(specs.size()) +
                                          " specs failed (listed above)");
  }
}

// ---------------------------------------------------------------------------------------
// --jit-latency

class TempDir {
 public:
  // A fresh directory in parent (--cache-dir), else in TMPDIR or /tmp.
  explicit TempDir(const std::string& parent) {
    const char* tmp = std::getenv("TMPDIR");
    const std::string base = !parent.empty() ? parent : tmp && *tmp ? tmp : "/tmp";
    std::string pattern = base + "/normjit-bench-XXXXXX";
    if (!::mkdtemp(pattern.data())) {
      const std::string why = std::strerror(errno);
      if (!parent.empty()) {
        throw_invalid_argument(
            "--cache-dir", "'" + parent + "'",
            "--jit-latency cannot create its scratch directory there (" + why + ")");
      }
      throw Error(ErrorCode::kInvalidArgument,
                  "cannot create a temporary directory " + pattern + " (" + why + ")");
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Host time per call of enqueue(), in microseconds: batches small enough that the launch queue
// never fills (a full queue would make the host wait for the GPU), synchronized untimed.
template <typename F>
double host_us_per_call(int calls, F&& enqueue) {
  constexpr int kBatch = 256;
  double ms = 0;
  for (int done = 0; done < calls; done += kBatch) {
    const int n = std::min(kBatch, calls - done);
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < n; ++i) enqueue();
    ms += ms_since(t0);
    NORMJIT_CU(driver::api().cuCtxSynchronize());
  }
  return ms * 1e3 / calls;
}

void run_jit_latency(const BenchOptions& o) {
  // Each step needs to start where it says: no prewarmed layer may serve the "cold" compile,
  // and JIT must be allowed. Single-threaded here, so changing the environment is safe.
  ::unsetenv("NORMJIT_CACHE_READONLY");
  ::unsetenv("NORMJIT_JIT");
  device::PrimaryContext context(0);
  const DeviceInfo device = DeviceInfo::of(context);
  const NormSpec spec = NormSpec::parse("op=rmsnorm shape=112,64,512,512 dtype=f32 affine=none");
  const NormSpec other = NormSpec::parse("op=rmsnorm shape=112,32,512,512 dtype=f32 affine=none");
  const NormSpec tiny = NormSpec::parse("op=rmsnorm shape=1,64,8,8 dtype=f32 affine=none");
  // A fresh directory, so that the cold compile is cold; inside --cache-dir where given, so that
  // the disk hit is timed on that file system.
  TempDir dir(o.cache_dir);
  EngineOptions options;
  options.cache_dir = dir.path();
  Engine engine(options);

  auto expect_source = [](const Kernel& k, Source wanted, const char* step) {
    if (k.source() != wanted) {
      throw Error(ErrorCode::kInternal, std::string("jit-latency: the ") + step + " came from " +
                                            to_string(k.source()) + ", not " + to_string(wanted));
    }
  };
  // (a) Cold: the first NVRTC compile of the process (NVRTC's own start-up included) plus
  // module load; then a second spec, NVRTC warm.
  Clock::time_point t0 = Clock::now();
  expect_source(engine.prepare(spec), Source::kCompiled, "cold compile");
  const double cold_ms = ms_since(t0);
  t0 = Clock::now();
  expect_source(engine.prepare(other), Source::kCompiled, "second compile");
  const double compile_ms = ms_since(t0);

  // (b) Disk hit: a new engine (a new process, in effect) on the same directory.
  std::vector<double> disk;
  for (int i = 0; i < 5; ++i) {
    Engine fresh(options);
    t0 = Clock::now();
    expect_source(fresh.prepare(spec), Source::kDisk, "disk hit");
    disk.push_back(ms_since(t0));
  }
  const Spread disk_ms = Spread::of(disk);

  // (c) Memory hit: prepare() of a prepared spec, the hot path of Engine::run.
  const int hits = std::max(o.calls, 1000) * 10;
  t0 = Clock::now();
  for (int i = 0; i < hits; ++i) engine.prepare(spec);
  const double hit_us = ms_since(t0) * 1e3 / hits;

  // (d) Host launch overhead on a tiny problem.
  const Kernel kernel = engine.prepare(tiny);
  const size_t bytes = size_t(tiny.elements()) * size_of(tiny.dtype);
  device::Buffer x(bytes), y(bytes);
  fill_random(x, tiny.dtype, 1);
  const LaunchArgs args{x.get(), y.get(), nullptr, nullptr, tiny.batch(), float(tiny.eps)};
  host_us_per_call(1000, [&] { kernel.launch(args, nullptr); });  // warm-up
  const double launch_us = host_us_per_call(o.calls, [&] { kernel.launch(args, nullptr); });
  const double run_us = host_us_per_call(
      o.calls, [&] { engine.run(tiny, x.get(), y.get(), nullptr, nullptr, nullptr); });

  if (o.json) {
    const Json doc = {{"device", device.to_json()},     {"spec", spec.to_string()},
                      {"cold_compile_ms", cold_ms},     {"compile_ms", compile_ms},
                      {"disk_hit_ms", disk_ms.median},  {"disk_hit_min_ms", disk_ms.min},
                      {"disk_hit_max_ms", disk_ms.max}, {"memory_hit_us", hit_us},
                      {"memory_hit_calls", hits},       {"launch_spec", tiny.to_string()},
                      {"launch_us", launch_us},         {"run_us", run_us},
                      {"launch_calls", o.calls}};
    std::printf("%s\n", doc.dump(2).c_str());
    return;
  }
  std::printf("normjit JIT latency on %s (%s)\n", device.name.c_str(), device.arch.c_str());
  std::printf("spec: %s\ncache directory: %s (removed after)\n", spec.to_string().c_str(),
              dir.path().c_str());
  std::printf("  cold compile + module load (first NVRTC use) %10.1f ms\n", cold_ms);
  std::printf("  compile + module load (NVRTC warm)           %10.1f ms\n", compile_ms);
  std::printf(
      "  disk hit: new engine, load + module load     %10.3f ms (median of 5; min %.3f, "
      "max %.3f)\n",
      disk_ms.median, disk_ms.min, disk_ms.max);
  std::printf("  memory hit: Engine::prepare                  %10.3f us (mean of %d)\n", hit_us,
              hits);
  std::printf("host time per call on %s (mean of %d):\n", tiny.to_string().c_str(), o.calls);
  std::printf("  Kernel::launch                               %10.3f us\n", launch_us);
  std::printf("  Engine::run (prepare + launch)               %10.3f us\n", run_us);
}

// NVRTC alone: plan, emit and compile each spec for --arch, --repeat times, on this machine's
// CPU (no GPU, no cache). The first compile of the process also pays NVRTC's start-up. For
// scale, an empty kernel is compiled the same way after them (NVRTC's own cost with our
// options), and each kernel's cubin size is reported (compile time grows with it).
void run_compile(const BenchOptions& o, const std::vector<NormSpec>& specs) {
  const Target target = parse_arch("--arch", o.arch.value_or("sm_90"));
  Json results = Json::array();
  bool first = true;
  // Times --repeat compiles of `emitted`; the cubin size of the last.
  const auto time_compiles = [&](const EmittedKernel& emitted, double& first_ms, size_t& bytes) {
    std::vector<double> times;
    for (int i = 0; i < o.repeat; ++i) {
      const Clock::time_point t0 = Clock::now();
      bytes = compile(emitted, target).cubin.size();
      const double ms = ms_since(t0);
      if (first) first_ms = ms, first = false;
      times.push_back(ms);
    }
    return Spread::of(times);
  };
  int failed = 0;
  for (const NormSpec& spec : specs) {
    double first_ms = 0;
    size_t bytes = 0;
    Spread s;
    KernelPlan p;
    try {
      p = plan(spec, target);
      s = time_compiles(emit(p), first_ms, bytes);
    } catch (const Error& e) {
      // As on the GPU: --seeds and --specs compile every spec they can and report the others;
      // a spec the generator does not cover yet is not a failure, any other error fails the
      // run once the rest are timed.
      if (specs.size() == 1 && !o.seeds) throw;
      const bool unsupported = e.code() == ErrorCode::kUnsupported;
      failed += !unsupported;
      if (o.json) {
        results.push_back(
            {{"spec", spec.to_string()}, {"error", e.what()}, {"error_code", to_string(e.code())}});
      } else {
        std::printf("%s\n  %s: %s\n", spec.to_string().c_str(),
                    unsupported ? "not yet supported" : "FAILED", indent(e.what()).c_str());
      }
      std::fflush(stdout);
      continue;
    }
    if (o.json) {
      results.push_back({{"spec", spec.to_string()},
                         {"strategy", to_string(p.strategy)},
                         {"median_ms", s.median},
                         {"min_ms", s.min},
                         {"max_ms", s.max},
                         {"process_first_ms", first_ms},
                         {"cubin_bytes", bytes},
                         {"repeat", o.repeat}});
    } else {
      std::printf(
          "%s\n  %s: NVRTC to cubin %8.1f ms median (min %.1f, max %.1f) of %d; cubin %zu bytes\n",
          spec.to_string().c_str(), to_string(p.strategy), s.median, s.min, s.max, o.repeat, bytes);
    }
  }
  double unused = 0;
  size_t empty_bytes = 0;
  const EmittedKernel empty = {"extern \"C\" __global__ void normjit_empty_kernel() {}\n",
                               "normjit_empty_kernel", "normjit_empty_kernel"};
  const Spread e = time_compiles(empty, unused, empty_bytes);
  if (!o.json) {
    std::printf(
        "an empty kernel, for scale\n  NVRTC to cubin %8.1f ms median (min %.1f, max %.1f) "
        "of %d; cubin %zu bytes\n",
        e.median, e.min, e.max, o.repeat, empty_bytes);
  }
  if (o.json) {
    const Json doc = {{"arch", target.name()},
                      {"compiler", nvrtc_version()},
                      {"hardware_threads", std::thread::hardware_concurrency()},
                      {"kernels", results},
                      {"empty_kernel",
                       {{"median_ms", e.median},
                        {"min_ms", e.min},
                        {"max_ms", e.max},
                        {"cubin_bytes", empty_bytes},
                        {"repeat", o.repeat}}}};
    std::printf("%s\n", doc.dump(2).c_str());
  }
  if (failed) {
    throw Error(ErrorCode::kInternal, std::to_string(failed) + " of " +
                                          std::to_string(specs.size()) +
                                          " specs failed (listed above)");
  }
}

void run_bench(const BenchOptions& o) {
  const std::vector<NormSpec> specs = requested_specs(o);  // bad flags first, GPU or not
  if (o.arch) {
    parse_arch("--arch", *o.arch);
    // On the GPU, bench times GPU 0's own target: an --arch there would be silently unused.
    if (!o.compile_only) {
      throw_invalid_argument("--arch", quoted_excerpt(*o.arch),
                             "only applies with --compile; without it bench times kernels for "
                             "GPU 0's own target");
    }
  }
  // --compile times NVRTC alone, every compile (the process's first included): no cache is read
  // or written and nothing warms up, so these flags would be silently unused there.
  if (o.compile_only && !o.cache_dir.empty()) {
    throw_invalid_argument("--cache-dir", "'" + o.cache_dir + "'",
                           "does not apply with --compile, which times NVRTC alone and reads or "
                           "writes no cache");
  }
  if (o.compile_only && o.warmup_given) {
    throw_invalid_argument("--warmup", "'" + std::to_string(o.warmup) + "'",
                           "does not apply with --compile, which times every compile (the "
                           "process's first included); --repeat sets how many");
  }
  // --jit-latency takes its own counts: 5 disk hits, --calls launches; nothing warms up first.
  if (o.jit_latency && (o.warmup_given || o.repeat_given)) {
    const bool warmup = o.warmup_given;
    throw_invalid_argument(warmup ? "--warmup" : "--repeat",
                           "'" + std::to_string(warmup ? o.warmup : o.repeat) + "'",
                           "does not apply with --jit-latency, whose compiles must be cold and "
                           "whose host figures take --calls");
  }
  if (o.calls_given && !o.jit_latency) {
    throw_invalid_argument("--calls", "'" + std::to_string(o.calls) + "'",
                           std::string("only applies with --jit-latency") +
                               (o.compile_only ? ", not with --compile" : ""));
  }
  if (o.compile_only) return run_compile(o, specs);
  require_gpu();
  if (o.jit_latency) {
    run_jit_latency(o);
  } else {
    run_kernels(o, specs);
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* bench = app.add_subcommand(
      "bench",
      "Time kernels on the GPU with CUDA events: median and spread of --repeat launches after\n"
      "--warmup, bytes moved (x, y and parameters once each; a backward kernel: x, dy, dx,\n"
      "the statistics, the parameters and their gradients), GB/s and the percentage of a\n"
      "device-to-device copy measured in the same run. Tensors under ~2x L2 rotate over several\n"
      "buffers so that L2 does not serve them. --jit-latency measures the JIT instead: cold\n"
      "compile, disk hit, memory hit and host launch overhead. Needs a GPU.");
  options->spec.add_to(*bench, /*required=*/false);
  bench->add_flag("--seeds", options->seeds, "time the seed problems of the design");
  add_text_option(*bench, "--specs", options->specs_file,
                  "time every spec listed in this file, one spec text per line (canonical, as "
                  "'normjit dump --emit plan' prints it after 'spec:', which may stay; '#' "
                  "starts a comment line), in one process");
  bench->add_flag("--jit-latency", options->jit_latency,
                  "measure compile, cache-hit and launch latencies instead of bandwidth");
  bench->add_flag("--compile", options->compile_only,
                  "time NVRTC compiles (plan, emit, compile to cubin) on this machine's CPU for "
                  "--arch; needs no GPU");
  add_text_option(*bench, "--arch", options->arch,
                  "with --compile only (an error without: on the GPU, bench times GPU 0's own "
                  "target): target architecture (default sm_90)");
  CLI::Option* repeat = add_integer_option(
      *bench, "--repeat", options->repeat, 1, 100000,
      "timed samples per kernel, median reported (default 20); an error with --jit-latency");
  CLI::Option* warmup = add_integer_option(
      *bench, "--warmup", options->warmup, 0, 100000,
      "untimed launches first (default 3); an error with --compile, which times every "
      "compile, and with --jit-latency");
  CLI::Option* calls =
      add_integer_option(*bench, "--calls", options->calls, 1, 10000000,
                         "with --jit-latency only: calls per host-overhead figure (default 10000)");
  bench->add_flag("--json", options->json, "print one JSON document (for scripts)");
  add_text_option(
      *bench, "--cache-dir", options->cache_dir,
      "cache directory (default: $NORMJIT_CACHE_DIR, else $XDG_CACHE_HOME/normjit, else "
      "~/.cache/normjit); "
      "--jit-latency times its compiles and disk hits in a fresh directory made "
      "inside it (default: in TMPDIR), removed after; an error with --compile, which "
      "uses no cache");
  bench->footer(
      "Example:\n"
      "  normjit bench --op rmsnorm --shape 112,64,512,512 --dtype bf16 --repeat 50\n"
      "  normjit bench --seeds --json > seeds.json\n"
      "  normjit bench --specs decode.txt --repeat 50\n"
      "  normjit bench --jit-latency\n"
      "  normjit bench --compile --seeds --arch sm_90 --repeat 5");
  bench->callback([options, warmup, calls, repeat] {
    options->warmup_given = warmup->count() > 0;
    options->calls_given = calls->count() > 0;
    options->repeat_given = repeat->count() > 0;
    run_bench(*options);
  });
}

}  // namespace normjit::tools
