#include "runtime/compiler.hpp"

#include <nvrtc.h>

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "normjit/error.hpp"
#include "templates/bundle.hpp"

namespace normjit {
namespace {

[[noreturn]] void throw_nvrtc_error(nvrtcResult result, const char* call, const char* file,
                                    int line) {
  throw Error(ErrorCode::kCompile, std::string(call) + " failed: " + nvrtcGetErrorString(result) +
                                       " at " + file + ":" + std::to_string(line));
}

// Every NVRTC call goes through this: the call text, the error and where.
#define NORMJIT_NVRTC(call)                                                \
  do {                                                                     \
    const nvrtcResult normjit_nvrtc_result_ = (call);                      \
    if (normjit_nvrtc_result_ != NVRTC_SUCCESS)                            \
      throw_nvrtc_error(normjit_nvrtc_result_, #call, __FILE__, __LINE__); \
  } while (0)

// Owns an nvrtcProgram; destruction ignores errors.
class Program {
 public:
  Program(const std::string& source, const char* name) {
    std::vector<const char*> names, texts;
    for (size_t i = 0; i < templates::header_count(); ++i) {
      names.push_back(templates::headers()[i].name);
      texts.push_back(templates::headers()[i].text);
    }
    NORMJIT_NVRTC(nvrtcCreateProgram(&program_, source.c_str(), name, int(names.size()),
                                     texts.data(), names.data()));
  }
  ~Program() {
    if (program_) nvrtcDestroyProgram(&program_);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return program_; }

 private:
  nvrtcProgram program_ = nullptr;
};

std::string read_log(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size == 0) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(size - 1);  // drop the terminating NUL
  return log;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// The compiler identity: version plus the build id NVRTC writes into every PTX header, so
// that two builds of one version never share cache entries.
std::string probe_compiler_identity() {
  int major = 0, minor = 0;
  NORMJIT_NVRTC(nvrtcVersion(&major, &minor));
  std::string identity = "nvrtc " + std::to_string(major) + "." + std::to_string(minor);
  Program program("__global__ void normjit_probe() {}\n", "probe.cu");
  const char* options[] = {"--gpu-architecture=compute_75"};
  if (nvrtcCompileProgram(program.get(), 1, options) != NVRTC_SUCCESS) return identity;
  size_t size = 0;
  NORMJIT_NVRTC(nvrtcGetPTXSize(program.get(), &size));
  std::string ptx(size, '\0');
  NORMJIT_NVRTC(nvrtcGetPTX(program.get(), ptx.data()));
  std::istringstream lines(ptx);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("// Compiler Build ID:", 0) == 0 ||
        line.rfind("// Cuda compilation tools", 0) == 0) {
      identity += ", " + line.substr(3);
    }
  }
  return identity;
}

}  // namespace

Resources parse_resources(const std::string& log) {
  Resources r;
  std::smatch m;
  static const std::regex frame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  if (std::regex_search(log, m, frame)) {
    r.stack_bytes = std::stoi(m[1]);
    r.spill_store_bytes = std::stoi(m[2]);
    r.spill_load_bytes = std::stoi(m[3]);
  }
  if (std::regex_search(log, m, used)) r.registers = std::stoi(m[1]);
  if (std::regex_search(log, m, smem)) r.smem_bytes = std::stoi(m[1]);
  return r;
}

std::string Resources::to_string() const {
  return "registers: " + std::to_string(registers) + "\n" +
         "shared memory: " + std::to_string(smem_bytes) + " bytes static\n" +
         "stack frame: " + std::to_string(stack_bytes) + " bytes\n" +
         "spill stores: " + std::to_string(spill_store_bytes) + " bytes\n" +
         "spill loads: " + std::to_string(spill_load_bytes) + " bytes\n";
}

std::string nvrtc_version() {
  static const std::string identity = probe_compiler_identity();
  return identity;
}

std::vector<std::string> supported_archs() {
  int count = 0;
  NORMJIT_NVRTC(nvrtcGetNumSupportedArchs(&count));
  std::vector<int> archs(count);
  NORMJIT_NVRTC(nvrtcGetSupportedArchs(archs.data()));
  std::vector<std::string> out;
  for (int a : archs) out.push_back("sm_" + std::to_string(a));
  return out;
}

std::vector<std::string> compile_options(const Target& target) {
  // -minimal: the templates need none of NVRTC's builtin headers (dtype.cuh converts without
  // cuda_fp16.h / cuda_bf16.h), and skipping them saves a good part of each compile.
  return {"--gpu-architecture=" + target.name(), "--std=c++17", "--ptxas-options=--verbose",
          "-minimal"};
}

std::vector<std::string> supported_targets() {
  std::vector<std::string> out;
  for (const std::string& arch : supported_archs()) {
    for (const std::string& name : Target::names_of(std::stoi(arch.substr(3)))) {
      out.push_back(name);
    }
  }
  return out;
}

void check_target_supported(const Target& target) {
  // Target::parse admits only suffixes the arch has; the arch itself must be one of NVRTC's.
  for (const auto& a : supported_archs()) {
    if (a == target.base_name()) return;
  }
  throw_invalid_argument(
      "arch", "'" + target.name() + "'",
      "this NVRTC (" + nvrtc_version() + ") builds for " + join(supported_targets(), ", "));
}

cache::KeyInputs key_inputs(const KernelPlan& plan, const EmittedKernel& emitted,
                            const Target& target) {
  (void)plan;  // everything of the plan that shapes the binary is in the emitted text
  cache::KeyInputs in;
  in.source = emitted.source;
  in.name_expression = emitted.name_expression;
  in.template_digest = templates::bundle_digest();
  in.options = compile_options(target);
  in.target = target.name();
  in.output_kind = "cubin+ptx";
  in.compiler = nvrtc_version();
  return in;
}

cache::KeyInputs key_inputs(const NormSpec& spec, const Target& target) {
  const KernelPlan p = plan(spec, target);
  return key_inputs(p, emit(p), target);
}

CompiledKernel compile(const EmittedKernel& emitted, const Target& target) {
  check_target_supported(target);
  Program program(emitted.source, "normjit_entry.cu");
  NORMJIT_NVRTC(nvrtcAddNameExpression(program.get(), emitted.name_expression.c_str()));
  const std::vector<std::string> options = compile_options(target);
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  const nvrtcResult result = nvrtcCompileProgram(program.get(), int(argv.size()), argv.data());
  CompiledKernel out;
  out.log = read_log(program.get());  // before checking: a failed compile explains itself
  if (result != NVRTC_SUCCESS) {
    throw Error(ErrorCode::kCompile, std::string("NVRTC failed to compile the generated kernel: ") +
                                         nvrtcGetErrorString(result) + "\n--- options ---\n" +
                                         join(options, " ") + "\n--- log ---\n" + out.log +
                                         "\n--- source ---\n" + emitted.source);
  }
  const char* lowered = nullptr;
  NORMJIT_NVRTC(nvrtcGetLoweredName(program.get(), emitted.name_expression.c_str(), &lowered));
  out.lowered_name = lowered;
  size_t size = 0;
  NORMJIT_NVRTC(nvrtcGetPTXSize(program.get(), &size));
  out.ptx.resize(size);
  NORMJIT_NVRTC(nvrtcGetPTX(program.get(), out.ptx.data()));
  if (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  NORMJIT_NVRTC(nvrtcGetCUBINSize(program.get(), &size));
  out.cubin.resize(size);
  NORMJIT_NVRTC(nvrtcGetCUBIN(program.get(), out.cubin.data()));
  return out;
}

std::string entry_metadata(const NormSpec& spec, const KernelPlan& plan,
                           const CompiledKernel& compiled) {
  nlohmann::ordered_json j;
  j["spec"] = spec.to_string();
  j["strategy"] = to_string(plan.strategy);
  j["kernel"] = emit(plan).kernel;
  j["lowered_name"] = compiled.lowered_name;
  j["arch"] = plan.arch;
  j["block"] = {plan.block_x, plan.block_y};
  j["blocks_per_item"] = plan.blocks_per_item;
  j["vector"] = plan.vec;
  j["smem_bytes"] = plan.smem_bytes;
  j["why"] = plan.why;
  j["compiler"] = nvrtc_version();
  j["created"] = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  return j.dump();
}

}  // namespace normjit
