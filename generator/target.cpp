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
// (with distributed shared memory and bulk copies) do, the full-size part's L2 (0 where the
// table does not know it) and its peak DRAM bandwidth (GB/s, the vendor's data sheet; 0 where
// the table does not know it). The one table of arch facts.
constexpr int kDefaultSmCount = 80;  // an arch without a full-size part here
constexpr ArchFacts kArchFacts[] = {
    {70, false, false, 80, 96, false, false, 0, 900},              // V100 SXM2
    {72, false, false, kDefaultSmCount, 96, false, false, 0, 0},   // Xavier
    {75, false, false, kDefaultSmCount, 64, false, false, 0, 0},   // T4 / RTX 2080
    {80, false, false, 108, 164, false, false, 40 * 1024, 2039},   // A100 SXM 80GB
    {86, false, false, 84, 100, false, false, 6 * 1024, 696},      // A40
    {87, false, false, kDefaultSmCount, 164, false, false, 0, 0},  // Orin
    {89, false, false, 142, 100, true, false, 96 * 1024, 864},     // L40S
    {90, true, false, 132, 228, true, true, 50 * 1024, 3352},      // H100 SXM
    {100, true, true, 148, 228, true, true, 0, 8000},              // B200
    {101, true, true, kDefaultSmCount, 100, true, true, 0, 0},     // CUDA 12.9's sm_110
    {103, true, true, kDefaultSmCount, 228, true, true, 0, 0},
    {110, true, true, kDefaultSmCount, 100, true, true, 0, 0},
    {120, true, true, kDefaultSmCount, 100, true, true, 0, 0},
    {121, true, true, kDefaultSmCount, 100, true, true, 0, 0},
};

const ArchFacts* facts_of(int sm) {
  for (const ArchFacts& f : kArchFacts) {
    if (f.sm == sm) return &f;
  }
  return nullptr;
}

int full_size_sm_count(int sm) { return arch_facts(sm).full_size_sm_count; }
int full_size_dram_gbps(int sm) { return arch_facts(sm).dram_gbps; }

// A positive integer up to `max` after a ':' of an arch spelling, or an error naming `what`.
int spelled_count(std::string_view digits, const std::string& shown, int max, const char* what) {
  int n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || n < 1 ||
      n > max) {
    throw_invalid_argument(
        "arch", shown, std::string(what) + " must be an integer from 1 to " + std::to_string(max));
  }
  return n;
}

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
  return {sm, false, false, kDefaultSmCount, sm >= 80 ? 100 : 64, sm >= 89, sm >= 90, 0, 0};
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
  const bool count = sm_count != full_size_sm_count(sm);
  const bool bandwidth = dram_gbps != full_size_dram_gbps(sm);
  std::string out = name();
  if (count || bandwidth) out += ":" + std::to_string(sm_count);
  if (bandwidth) out += ":" + std::to_string(dram_gbps);
  return out;
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
      "with a multiprocessor count as in sm_90:114 and a DRAM bandwidth in GB/s as in "
      "sm_90:132:4814";
  const size_t colon = digits.find(':');
  std::string_view count = colon == std::string_view::npos ? "" : digits.substr(colon + 1);
  if (colon != std::string_view::npos) digits = digits.substr(0, colon);
  const size_t second = count.find(':');
  std::string_view bandwidth = second == std::string_view::npos ? "" : count.substr(second + 1);
  if (second != std::string_view::npos) count = count.substr(0, second);
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
                                 " target; the suffixed targets normjit knows are " +
                                 suffixed_targets() +
                                 " (the NVRTC in use may build only some of them)");
    }
  }
  t.sm_count = full_size_sm_count(sm);
  t.dram_gbps = full_size_dram_gbps(sm);
  if (colon != std::string_view::npos) {
    t.sm_count = spelled_count(count, shown, kMaxSmCount, "the multiprocessor count after ':'");
  }
  if (second != std::string_view::npos) {
    t.dram_gbps = spelled_count(bandwidth, shown, kMaxDramGbps,
                                "the DRAM bandwidth (GB/s) after the second ':'");
  }
  return t;
}

}  // namespace normjit
