// normjit dump: what normjit generates for a spec: the plan, the entry source, the PTX and
// ptxas's resource report. Needs no GPU (then --arch is required).
#include <fstream>
#include <iostream>

#include "generator/emit.hpp"
#include "generator/plan.hpp"
#include "normjit/normjit.hpp"
#include "runtime/compiler.hpp"
#include "runtime/driver.hpp"
#include "tools/commands.hpp"

namespace normjit::tools {
namespace {

struct DumpOptions {
  SpecFlags spec;
  std::string emit = "plan";
  std::string arch;
  std::string output;
};

// The arch of GPU 0 when there is one.
std::string device_arch() {
  if (!gpu_available()) return "";
  const driver::Api& cu = driver::api();
  CUdevice device;
  int major = 0, minor = 0;
  NORMJIT_CU(cu.cuDeviceGet(&device, 0));
  NORMJIT_CU(cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
  NORMJIT_CU(cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device));
  return "sm_" + std::to_string(major * 10 + minor);
}

void run_dump(const DumpOptions& o) {
  const NormSpec spec = o.spec.resolve();
  std::string arch = o.arch;
  if (arch.empty()) arch = device_arch();
  if (arch.empty()) {
    throw_invalid_argument("--arch", "(missing)",
                           "no GPU here (" + gpu_unavailable_reason() +
                               "); name the target, e.g. --arch sm_90");
  }
  const Target target = Target::parse(arch);
  const KernelPlan p = plan(spec, target);
  const EmittedKernel emitted = emit(p);
  std::string text;
  if (o.emit == "plan") {
    text = "spec: " + spec.to_string() + "\n" + p.to_string();
  } else if (o.emit == "source") {
    text = emitted.source;
  } else {
    const CompiledKernel compiled = compile(emitted, target);
    if (o.emit == "ptx") {
      text = compiled.ptx;
    } else {
      text = "kernel: " + compiled.lowered_name + "\narch: " + target.name() + "\n" +
             parse_resources(compiled.log).to_string();
    }
  }
  if (o.output.empty() || o.output == "-") {
    std::cout << text;
    return;
  }
  std::ofstream out(o.output, std::ios::binary);
  if (!(out << text) || !out.flush()) {
    throw_invalid_argument("-o", "'" + o.output + "'", "cannot be written");
  }
}

}  // namespace

void add_dump_command(CLI::App& app) {
  auto options = std::make_shared<DumpOptions>();
  CLI::App* dump = app.add_subcommand(
      "dump",
      "Show what normjit generates for a spec: the plan (strategy, grid, block, vector width,\n"
      "why), the entry source, the PTX, or ptxas's resource report (registers, spills, stack).\n"
      "Works without a GPU when --arch names the target.\n"
      "Example: normjit dump --op groupnorm --shape 2,64,32,32 --groups 8 --emit resources "
      "--arch sm_90");
  options->spec.add_to(*dump, /*required=*/true);
  dump->add_option("--emit", options->emit, "plan | source | ptx | resources (default plan)")
      ->check(CLI::IsMember({"plan", "source", "ptx", "resources"}));
  dump->add_option("--arch", options->arch, "target such as sm_80, sm_90, sm_90a (default: GPU 0)");
  dump->add_option("-o,--output", options->output, "write to FILE instead of stdout");
  dump->callback([options] { run_dump(*options); });
}

}  // namespace normjit::tools
