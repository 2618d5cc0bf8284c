// Target: the GPU a kernel is built for, and the one table of facts about each arch that the
// generator uses (which suffixed targets exist, multiprocessors of the full-size part, shared
// memory per SM, fp8 conversions).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace normjit {

struct Target {
  // The suffix of the NVRTC target: sm_90 runs on sm_90 and later GPUs, sm_90a only on sm_90
  // (arch-specific features such as wgmma), sm_100f on the sm_100 family (sm_100, sm_103).
  enum class Variant { kPortable, kArchSpecific, kFamilySpecific };
  int sm = 90;                           // compute capability, major * 10 + minor
  Variant variant = Variant::kPortable;  // sm_90a: kArchSpecific; sm_100f: kFamilySpecific
  // Multiprocessors: from the device at run time; for an offline compile (prewarm) the
  // full-size part of the arch (sm_90: 132, an H100 SXM) unless the spelling names another
  // count. Plans use it only to decide whether a long row can be split over co-resident CTAs.
  int sm_count = 132;
  // Peak DRAM bandwidth in GB/s (2 x memory clock x bus width): from the device at run time;
  // offline the full-size part's (sm_90: 3352, an H100 SXM) unless the spelling names another;
  // 0 where neither is known. Plans use it only where the fastest strategy depends on it (the
  // GroupNorm backward of large f32 channels streams from DRAM on a GPU of 4 TB/s and more).
  int dram_gbps = 3352;
  static constexpr int kMaxSmCount = 1024;        // bound of a spelled count: far above any GPU's
  static constexpr int kMaxDramGbps = 1'000'000;  // bound of a spelled bandwidth (1 PB/s)
  std::string name() const;                       // the NVRTC target: "sm_90", "sm_90a", "sm_100f"
  std::string base_name() const;                  // name() without the suffix: "sm_90"
  // name(), plus ":N" when sm_count is not the full-size part's, plus ":N:B" when dram_gbps is
  // not: "sm_90:114" (an H100 PCIe's count), "sm_90:132:4814" (an H200). parse(text()) gives
  // back this target.
  std::string text() const;
  // "sm_80", "sm_90a", "sm_100f", "sm_90:114" (114 multiprocessors, e.g. an H100 PCIe or a MIG
  // slice's count), "sm_90:132:4814" (132 multiprocessors and 4814 GB/s of DRAM bandwidth);
  // "compute_90" is refused (we always build a cubin), and so is a suffix the arch does not
  // have (sm_90f, sm_80a): a target is compiled exactly as named or not at all.
  static Target parse(std::string_view arch);
  // The targets of arch `sm` that exist, from the same table parse() checks suffixes against:
  // {"sm_100", "sm_100a", "sm_100f"}, {"sm_90", "sm_90a"}, {"sm_80"}.
  static std::vector<std::string> names_of(int sm);
  bool operator==(const Target& o) const {
    return sm == o.sm && variant == o.variant && sm_count == o.sm_count && dram_gbps == o.dram_gbps;
  }
};

// What the generator knows about an arch, from one table (generator/target.cpp); an arch not
// in it gets conservative values.
struct ArchFacts {
  int sm;
  bool arch_specific;      // sm_<sm>a exists
  bool family_specific;    // sm_<sm>f exists (CUDA 12.9 and later)
  int full_size_sm_count;  // multiprocessors of the arch's full-size part, for offline plans
  int smem_per_sm_kib;     // shared memory per SM (the CUDA programming guide's table)
  bool fp8_convert;        // cvt.rn.satfinite.{e4m3,e5m2}x2.f32 (sm_89 and later)
  bool clusters;           // thread-block clusters, distributed shared memory and bulk copies
                           // (cp.async.bulk): sm_90 and later
  int l2_kib;              // L2 of the full-size part (KiB); 0: not in the table, or no L2
                           // eviction policies (createpolicy: sm_80 and later)
  int dram_gbps;           // peak DRAM bandwidth of the full-size part (GB/s); 0: not known
};
ArchFacts arch_facts(int sm);

}  // namespace normjit
