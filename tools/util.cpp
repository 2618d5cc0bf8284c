#include "tools/util.hpp"

#include <algorithm>
#include <random>

#include "normjit/error.hpp"
#include "runtime/compiler.hpp"
#include "tools/reference.hpp"

namespace normjit::tools {

std::vector<NormSpec> seed_specs() {
  std::vector<NormSpec> specs;
  for (const char* dtype : {"f32", "bf16"}) {
    const std::string d = dtype;
    specs.push_back(NormSpec::parse("op=rmsnorm shape=112,64,512,512 dtype=" + d + " affine=none"));
    specs.push_back(NormSpec::parse("op=layernorm shape=16,64,256,256 dtype=" + d +
                                    " normalized_dims=3 affine=both"));
    specs.push_back(
        NormSpec::parse("op=groupnorm shape=112,64,512,512 dtype=" + d + " groups=8 affine=both"));
  }
  return specs;
}

void fill_random(device::Buffer& buffer, Dtype dtype, uint64_t seed) {
  const size_t element = size_of(dtype);
  const size_t count = buffer.bytes() / element;
  const size_t pattern = std::min<size_t>(count, size_t{1} << 24);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.5f, 2.0f);
  std::vector<float> values(pattern);
  for (float& v : values) v = normal(rng);
  const std::vector<unsigned char> bytes = reference::encode(dtype, values);
  for (size_t done = 0; done < count; done += pattern) {
    const size_t n = std::min(pattern, count - done);
    buffer.upload(bytes.data(), n * element, done * element);
  }
}

Target parse_arch(const std::string& flag, const std::string& arch) {
  const std::vector<std::string> supported = supported_archs();
  std::string list;
  for (const std::string& a : supported) list += (list.empty() ? "" : ", ") + a;
  const std::string why = "this NVRTC (" + nvrtc_version() + ") builds for " + list +
                          " (an 'a' suffix, as in sm_90a, selects arch-specific features)";
  Target target;
  const std::string base_arch = arch.substr(0, arch.find(':'));
  try {
    Target::parse(base_arch);
  } catch (const Error&) {
    throw_invalid_argument(flag, "'" + arch + "'", "not a GPU architecture; " + why);
  }
  try {
    target = Target::parse(arch);
  } catch (const Error&) {
    throw_invalid_argument(flag, "'" + arch + "'",
                           "the multiprocessor count after ':' must be an integer from 1 to " +
                               std::to_string(Target::kMaxSmCount));
  }
  Target base = target;
  base.arch_specific = false;
  if (std::find(supported.begin(), supported.end(), base.name()) == supported.end()) {
    throw_invalid_argument(flag, "'" + arch + "'", why);
  }
  return target;
}

std::string indent(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += "    ";
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == '\n')) out.pop_back();
  return out;
}

}  // namespace normjit::tools
