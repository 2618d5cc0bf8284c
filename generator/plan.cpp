#include "generator/plan.hpp"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "normjit/error.hpp"

namespace normjit {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int pow2_ceil(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

// Largest power of two <= max_vec that divides n: the widest access that stays aligned
// at every row start when the base pointer is aligned.
int vector_width(int64_t n, int max_vec) {
  int v = max_vec;
  while (v > 1 && n % v != 0) v /= 2;
  return v;
}

constexpr int kAccessBytes = 16;         // widest global access per thread
constexpr int kRegisterValues = 64;      // f32 values a thread keeps between the two phases

KernelPlan plan_channels(const NormSpec& spec) {
  const int64_t c = spec.channels();
  const int64_t s = spec.spatial();
  KernelPlan p;
  p.strategy = Strategy::kChannels;
  p.header = "normjit/rmsnorm_channels.cuh";
  p.function = "normjit::rmsnorm_channels";
  p.vec = vector_width(s, kAccessBytes / size_of(spec.dtype));
  // Split the channels over block_y threads so each keeps at most kRegisterValues values.
  p.block_y = std::min(32, pow2_ceil(ceil_div(c * p.vec, kRegisterValues)));
  p.block_x = std::clamp(256 / p.block_y, 32, 256);
  const bool cached = ceil_div(c, p.block_y) * p.vec <= kRegisterValues;
  p.blocks_per_item = ceil_div(s, int64_t{p.block_x} * p.vec);
  p.template_args = {template_type(spec.dtype),
                     std::to_string(c),
                     std::to_string(s),
                     std::to_string(p.block_x),
                     std::to_string(p.block_y),
                     std::to_string(p.vec),
                     spec.affine == Affine::kWeight ? "true" : "false",
                     cached ? "true" : "false"};
  std::ostringstream why;
  why << "reduce over dim 1: each thread owns " << p.vec << " contiguous spatial positions ("
      << p.vec * size_of(spec.dtype) << "-byte accesses) and " << ceil_div(c, p.block_y)
      << " of the " << c << " channels; " << p.block_y << " threads share a position"
      << (cached ? ", values stay in registers (x read once)"
                 : ", too many channels for registers: x is read twice");
  p.why = why.str();
  return p;
}

}  // namespace

std::string Target::name() const {
  return "sm_" + std::to_string(sm) + (arch_specific ? "a" : "");
}

Target Target::parse(std::string_view arch) {
  Target t;
  std::string_view digits = arch;
  const std::string why = "expected a real GPU architecture such as sm_80, sm_90 or sm_90a";
  if (digits.substr(0, 3) != "sm_") throw_invalid_argument("arch", "'" + std::string(arch) + "'", why);
  digits.remove_prefix(3);
  if (!digits.empty() && digits.back() == 'a') {
    t.arch_specific = true;
    digits.remove_suffix(1);
  }
  int sm = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), sm);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || sm < 50) {
    throw_invalid_argument("arch", "'" + std::string(arch) + "'", why);
  }
  t.sm = sm;
  return t;
}

const char* to_string(Strategy strategy) {
  switch (strategy) {
    case Strategy::kChannels: return "channels";
  }
  return "?";
}

const char* template_type(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32: return "float";
    case Dtype::kF16: return "normjit::half_t";
    case Dtype::kBF16: return "normjit::bf16_t";
  }
  return "?";
}

std::string KernelPlan::name_expression() const {
  std::string out = "&" + function + "<";
  for (size_t i = 0; i < template_args.size(); ++i) {
    if (i) out += ", ";
    out += template_args[i];
  }
  return out + ">";
}

std::string KernelPlan::to_string() const {
  std::ostringstream os;
  os << "strategy: " << normjit::to_string(strategy) << "\n"
     << "kernel: " << name_expression().substr(1) << "\n"
     << "arch: " << arch << "\n"
     << "block: " << block_x << "x" << block_y << " (" << block_x * block_y << " threads)\n"
     << "grid: " << blocks_per_item << " x batch CTAs\n"
     << "vector: " << vec << " elements per access\n"
     << "shared memory: " << smem_bytes << " bytes dynamic\n"
     << "why: " << why << "\n";
  return os.str();
}

int batch_class(const NormSpec& spec) {
  (void)spec;
  return 0;
}

KernelPlan plan(const NormSpec& spec, const Target& target) {
  spec.validate();
  KernelPlan p;
  if (spec.op == Op::kRmsNorm && spec.channel_form()) {
    p = plan_channels(spec);
  } else {
    throw Error(ErrorCode::kUnsupported,
                "not yet supported: " + spec.to_string() + " (only the channel form of rmsnorm)");
  }
  p.arch = target.name();
  return p;
}

}  // namespace normjit
