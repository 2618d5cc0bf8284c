// normjit dump: what normjit generates for a spec: the plan, the entry source, the PTX and
// ptxas's resource report. Needs no GPU (then --arch is required). --cache-entry KEY shows the
// same views of a kernel already in the cache.
#include <errno.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cache/cache.hpp"
#include "generator/emit.hpp"
#include "generator/plan.hpp"
#include "normjit/normjit.hpp"
#include "runtime/compiler.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "tools/commands.hpp"
#include "tools/util.hpp"

namespace normjit::tools {
namespace {

struct DumpOptions {
  SpecFlags spec;
  std::string emit = "plan";
  std::optional<std::string> arch;  // absent: GPU 0's target ("" given is refused, not ignored)
  std::string output;               // empty: stdout ("" given is refused)
  std::optional<std::string> cache_entry;  // a key: dump the cached entry instead of a spec
  std::optional<std::string> cache_dir;    // only with cache_entry
};

// GPU 0's target as an engine there plans for it (NORMJIT_DRAM_GBPS included; the caller checks
// gpu_available()).
Target device_target() {
  CUdevice device;
  NORMJIT_CU(driver::api().cuDeviceGet(&device, 0));
  Target target = device::target_of(device);
  if (const int gbps = device::dram_gbps_from_env(); gbps > 0) target.dram_gbps = gbps;
  return target;
}

// ptxas's report from the NVRTC log. Where a driver is installed, NVRTC 13.0 can take the cubin
// from the driver's compute cache (~/.nv/ComputeCache; CUDA_CACHE_DISABLE=1 turns it off) and
// then leaves that report out of its log; if this GPU runs the target, the driver then reports
// what it loaded.
std::string resource_report(const CompiledKernel& compiled, const Target& target) {
  std::string out = "kernel: " + compiled.lowered_name + "\narch: " + target.name() + "\n";
  const Resources r = parse_resources(compiled.log);
  if (r.registers >= 0 || !gpu_available() || device_target().name() != target.name()) {
    return out + r.to_string();
  }
  const driver::Api& cu = driver::api();
  device::PrimaryContext context(0);
  CUmodule module = nullptr;
  NORMJIT_CU(cu.cuModuleLoadData(&module, compiled.cubin.data()));
  CUfunction function = nullptr;
  int registers = 0, smem = 0, local = 0;
  const CUresult got = cu.cuModuleGetFunction(&function, module, compiled.lowered_name.c_str());
  if (got == CUDA_SUCCESS) {
    cu.cuFuncGetAttribute(&registers, CU_FUNC_ATTRIBUTE_NUM_REGS, function);
    cu.cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function);
    cu.cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, function);
  }
  cu.cuModuleUnload(module);
  NORMJIT_CU(got);
  return out + "registers: " + std::to_string(registers) + "\n" +
         "shared memory: " + std::to_string(smem) + " bytes static\n" +
         "local memory: " + std::to_string(local) +
         " bytes per thread (stack and spills; from the driver, NVRTC gave no ptxas report)\n";
}

std::string dump_spec(const DumpOptions& o) {
  if (!o.spec.text && (!o.spec.op || !o.spec.shape)) {
    throw_invalid_argument(
        !o.spec.op ? "--op" : "--shape", "(missing)",
        "dump needs a spec (--op and --shape, --spec TEXT or the text alone) or --cache-entry "
        "KEY");
  }
  const NormSpec spec = o.spec.resolve();
  // A spec pasted with its target (cache ls, prewarm --check): that target, unless --arch says
  // another.
  std::optional<std::string> arch = o.arch;
  if (const std::optional<std::string> printed = o.spec.printed_arch()) {
    if (arch && *arch != *printed) {
      throw_invalid_argument("--arch", quoted_excerpt(*arch),
                             "differs from the spec's arch=" + *printed);
    }
    arch = printed;
  }
  if (o.cache_dir) {
    throw_invalid_argument("--cache-dir", "'" + *o.cache_dir + "'",
                           "only applies with --cache-entry; a spec is planned and compiled "
                           "without the cache");
  }
  if (!arch && !gpu_available()) {
    throw_invalid_argument(
        "--arch", "(missing)",
        "no GPU here (" + gpu_unavailable_reason() + "); name the target, e.g. --arch sm_90");
  }
  const Target target = arch ? parse_arch(o.arch ? "--arch" : "arch", *arch) : device_target();
  const KernelPlan p = plan(spec, target);
  const EmittedKernel emitted = emit(p);
  if (o.emit == "plan") return "spec: " + spec.to_string() + "\n" + p.to_string();
  if (o.emit == "source") return emitted.source;
  const CompiledKernel compiled = compile(emitted, target);
  if (o.emit == "ptx") return compiled.ptx;
  return resource_report(compiled, target);
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The value of the preimage line "name: value", unescaped; empty when absent.
std::string preimage_field(const std::string& preimage, const std::string& name) {
  const std::string prefix = name + ": ";
  size_t begin = 0;
  while (begin < preimage.size()) {
    size_t end = preimage.find('\n', begin);
    if (end == std::string::npos) end = preimage.size();
    const std::string_view line(preimage.data() + begin, end - begin);
    if (line.substr(0, prefix.size()) == prefix) {
      return cache::preimage_unescape(line.substr(prefix.size()));
    }
    begin = end + 1;
  }
  return "";
}

// The entry stores no NVRTC log, so the resource report comes from compiling the entry's own
// source, name expression and target again; a byte-identical cubin proves the report is the
// entry's.
std::string entry_resources(const cache::Entry& entry) {
  EmittedKernel emitted;
  emitted.source = preimage_field(entry.preimage, "source");
  emitted.name_expression = preimage_field(entry.preimage, "name_expression");
  if (emitted.name_expression.size() > 1) emitted.kernel = emitted.name_expression.substr(1);
  const std::string target_name = preimage_field(entry.preimage, "target");
  if (emitted.source.empty() || emitted.name_expression.empty() || target_name.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "cache entry " + entry.key +
                    " lacks the source, name expression or target in "
                    "its preimage; it cannot be recompiled for a resource report");
  }
  const Target target = Target::parse(target_name);
  const CompiledKernel compiled = compile(emitted, target);
  std::string note;
  if (compiled.cubin == entry.cubin) {
    note = "recompiled the entry's source: cubin identical to the entry's";
  } else {
    const std::string stored = preimage_field(entry.preimage, "compiler");
    note = "recompiled the entry's source: cubin differs from the entry's (entry built by " +
           stored + ", this is " + nvrtc_version() + ")";
  }
  return resource_report(compiled, target) + "note: " + note + "\n";
}

std::string dump_entry(const DumpOptions& o) {
  const std::string& key = *o.cache_entry;
  if (key.size() != 64 || key.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw_invalid_argument("--cache-entry", quoted_excerpt(key),
                           "expected a key of 64 lowercase hex digits, as 'normjit cache ls' "
                           "prints");
  }
  if (o.spec.any() || o.arch) {
    throw_invalid_argument("--cache-entry", quoted_excerpt(key),
                           "names a compiled kernel; leave out the spec flags and --arch");
  }
  // Every layer is opened read-only: dumping never creates, stamps or removes anything.
  std::vector<std::string> searched, layers;
  const std::string dir = o.cache_dir ? *o.cache_dir : default_cache_dir();
  std::vector<std::string> candidates;
  if (!dir.empty()) candidates.push_back(dir);
  for (const std::string& layer : cache::StoreOptions::from_env().readonly) {
    candidates.push_back(layer);
  }
  for (const std::string& layer : candidates) {
    if (is_directory(layer)) {
      layers.push_back(layer);
      searched.push_back(layer);
    } else {
      searched.push_back(layer + " (missing)");
    }
  }
  cache::StoreOptions options;
  options.readonly = layers;
  cache::Store store(options);
  const std::optional<cache::Entry> entry = store.load(key);
  if (!entry) {
    std::string where;
    for (const std::string& s : searched) where += (where.empty() ? "" : ", ") + s;
    throw Error(
        ErrorCode::kCacheMiss,
        "no valid cache entry " + key + " in " +
            (where.empty() ? std::string("any directory (no --cache-dir, HOME unset)") : where));
  }
  if (o.emit == "plan") {
    const nlohmann::ordered_json metadata =
        nlohmann::ordered_json::parse(entry->metadata, nullptr, /*allow_exceptions=*/false);
    return (metadata.is_discarded() ? entry->metadata : metadata.dump(2)) + "\n";
  }
  if (o.emit == "source") return preimage_field(entry->preimage, "source");
  if (o.emit == "ptx") return entry->ptx;
  return entry_resources(*entry);
}

void run_dump(const DumpOptions& o) {
  const std::string text = o.cache_entry ? dump_entry(o) : dump_spec(o);
  if (o.output.empty() || o.output == "-") {
    std::cout << text;
    return;
  }
  std::ofstream out(o.output, std::ios::binary);
  if (!out) {
    throw_invalid_argument("--output", "'" + o.output + "'",
                           std::string("cannot be written (") + std::strerror(errno) + ")");
  }
  if (!(out << text) || !out.flush()) {
    throw_invalid_argument("--output", "'" + o.output + "'", "cannot be written");
  }
}

}  // namespace

void add_dump_command(CLI::App& app) {
  auto options = std::make_shared<DumpOptions>();
  CLI::App* dump = app.add_subcommand(
      "dump",
      "Show what normjit generates for a spec: the plan (strategy, grid, block, vector width,\n"
      "why), the entry source, the PTX, or ptxas's resource report (registers, spills, stack).\n"
      "Works without a GPU when --arch names the target. --cache-entry KEY shows the same\n"
      "views of a cached kernel (plan: its metadata).");
  // Not required by CLI11: --cache-entry replaces them; run_dump says which one is missing.
  options->spec.add_to(*dump, /*required=*/false);
  dump->add_option("--emit", options->emit, "plan | source | ptx | resources (default plan)")
      ->check(CLI::IsMember({"plan", "source", "ptx", "resources"}));
  dump->add_option_function<std::string>(
      "--arch", [options](const std::string& arch) { options->arch = arch; },
      "target such as sm_80, sm_90, sm_90a, sm_100f; sm_90:114 plans for 114 multiprocessors, "
      "sm_90:132:4814 for 132 and 4814 GB/s of DRAM bandwidth (an H200) (default: GPU 0, its "
      "count and bandwidth included, NORMJIT_DRAM_GBPS replacing the bandwidth as in an engine; "
      "offline: the arch's full-size part)");
  add_text_option(*dump, "-o,--output", options->output,
                  "write to FILE instead of stdout ('-': stdout)");
  add_text_option(*dump, "--cache-entry", options->cache_entry,
                  "dump the cached kernel with this key (from 'normjit cache ls') instead");
  add_text_option(*dump, "--cache-dir", options->cache_dir,
                  "with --cache-entry only (an error without): cache directory (default: "
                  "$NORMJIT_CACHE_DIR, else $XDG_CACHE_HOME/normjit, else ~/.cache/normjit); "
                  "NORMJIT_CACHE_READONLY layers are "
                  "searched too");
  dump->footer(
      "Example:\n"
      "  normjit dump --op groupnorm --shape 2,64,32,32 --groups 8 --emit resources --arch sm_90\n"
      "  normjit dump --op rmsnorm --shape 8,64,32,32 --emit ptx --arch sm_90 -o rms.ptx\n"
      "  normjit dump --cache-entry "
      "2fc9f6e371f274dbc96953be3dbfbc390e804461bee426e5245d1e850bbb73fe --emit plan");
  dump->callback([options] { run_dump(*options); });
}

}  // namespace normjit::tools
