#include "generator/target.hpp"

#include <algorithm>
#include <charconv>

#include "normjit/error.hpp"

namespace normjit {
namespace {

// Facts about each arch that are not in NVRTC's list of supported archs (nvrtcGetSupportedArchs
// names plain archs only): which suffixed targets exist, the multiprocessors of the arch's
// full-size part (for plans made without a device), shared memory per SM (KiB, the CUDA
// programming guide's table), whether fp8 conversions exist, whether thread-block clusters
// (with distributed shared memory and bulk copies) do, and the full-size part's L2 (0 where the
// table does not know it). The one table of arch facts.
constexpr int kDefaultSmCount = 80;  // an arch without a full-size part here
constexpr ArchFacts kArchFacts[] = {
    {70, false, false, 80, 96, false, false, 0},                // V100
    {72, false, false, kDefaultSmCount, 96, false, false, 0},   // Xavier
    {75, false, false, kDefaultSmCount, 64, false, false, 0},   // T4 / RTX 2080
    {80, false, false, 108, 164, false, false, 40 * 1024},      // A100
    {86, false, false, 84, 100, false, false, 6 * 1024},        // A40 / RTX 3090
    {87, false, false, kDefaultSmCount, 164, false, false, 0},  // Orin
    {89, false, false, 142, 100, true, false, 96 * 1024},       // L40S
    {90, true, false, 132, 228, true, true, 50 * 1024},         // H100 SXM
    {100, true, true, 148, 228, true, true, 0},                 // B200
    {101, true, true, kDefaultSmCount, 100, true, true, 0},     // CUDA 12.9's name of sm_110
    {103, true, true, kDefaultSmCount, 228, true, true, 0},
    {110, true, true, kDefaultSmCount, 100, true, true, 0},
    {120, true, true, kDefaultSmCount, 100, true, true, 0},
    {121, true, true, kDefaultSmCount, 100, true, true, 0},
};

const ArchFacts* facts_of(int sm) {
  for (const ArchFacts& f : kArchFacts) {
    if (f.sm == sm) return &f;
  }
  return nullptr;
}

int full_size_sm_count(int sm) { return arch_facts(sm).full_size_sm_count; }

// Every suffixed target of the table: what a refused suffix is told to pick from.
std::string suffixed_targets() {
  std::string out;
  for (const ArchFacts& f : kArchFacts) {
    for (const std::string& name : Target::names_of(f.sm)) {
      if (name.back() == 'a' || name.back() == 'f') out += (out.empty() ? "" : ", ") + name;
    }
  }
  return out;
}

}  // namespace

ArchFacts arch_facts(int sm) {
  if (const ArchFacts* f = facts_of(sm)) return *f;
  // Not in the table: no suffixes, the smaller common shared memory, fp8 from sm_89 on.
  return {sm, false, false, kDefaultSmCount, sm >= 80 ? 100 : 64, sm >= 89, sm >= 90, 0};
}

std::string Target::base_name() const { return "sm_" + std::to_string(sm); }

std::string Target::name() const {
  switch (variant) {
    case Variant::kPortable:
      break;
    case Variant::kArchSpecific:
      return base_name() + "a";
    case Variant::kFamilySpecific:
      return base_name() + "f";
  }
  return base_name();
}

std::string Target::text() const {
  return sm_count == full_size_sm_count(sm) ? name() : name() + ":" + std::to_string(sm_count);
}

std::vector<std::string> Target::names_of(int sm) {
  const std::string base = "sm_" + std::to_string(sm);
  std::vector<std::string> names = {base};
  if (const ArchFacts* f = facts_of(sm)) {
    if (f->arch_specific) names.push_back(base + "a");
    if (f->family_specific) names.push_back(base + "f");
  }
  return names;
}

Target Target::parse(std::string_view arch) {
  Target t;
  std::string_view digits = arch;
  const std::string shown = quoted_excerpt(arch);
  const std::string why =
      "expected a real GPU architecture such as sm_80, sm_90, sm_90a or sm_100f, optionally "
      "with a multiprocessor count as in sm_90:114";
  const size_t colon = digits.find(':');
  std::string_view count = colon == std::string_view::npos ? "" : digits.substr(colon + 1);
  if (colon != std::string_view::npos) digits = digits.substr(0, colon);
  if (digits.substr(0, 3) != "sm_") throw_invalid_argument("arch", shown, why);
  digits.remove_prefix(3);
  char suffix = 0;
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) {
    suffix = digits.back();
    digits.remove_suffix(1);
  }
  // Decimal digits without a leading zero: sm_090 would otherwise be built as sm_90.
  int sm = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), sm);
  if (digits.empty() || digits[0] < '1' || digits[0] > '9' || ec != std::errc() ||
      end != digits.data() + digits.size() || sm < 50) {
    throw_invalid_argument("arch", shown, why);
  }
  t.sm = sm;
  if (suffix != 0) {
    // Only the suffixes the arch has: NVRTC would refuse sm_90f, and quietly taking it as
    // another target (sm_90a) would build what nobody asked for.
    t.variant = suffix == 'a' ? Variant::kArchSpecific : Variant::kFamilySpecific;
    const std::vector<std::string> names = names_of(sm);
    if (std::find(names.begin(), names.end(), t.name()) == names.end()) {
      throw_invalid_argument("arch", shown,
                             t.base_name() + " has no " +
                                 (suffix == 'a' ? "arch-specific ('a')" : "family-specific ('f')") +
                                 " target; the suffixed targets are " + suffixed_targets());
    }
  }
  t.sm_count = full_size_sm_count(sm);
  if (colon != std::string_view::npos) {
    int n = 0;
    auto [count_end, count_ec] = std::from_chars(count.data(), count.data() + count.size(), n);
    if (count.empty() || count_ec != std::errc() || count_end != count.data() + count.size() ||
        n < 1 || n > kMaxSmCount) {
      throw_invalid_argument("arch", shown,
                             "the multiprocessor count after ':' must be an integer from 1 to " +
                                 std::to_string(kMaxSmCount));
    }
    t.sm_count = n;
  }
  return t;
}

}  // namespace normjit
