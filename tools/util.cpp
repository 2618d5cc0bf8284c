#include "tools/util.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>

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
  const std::vector<std::string> targets = supported_targets();
  std::string list;
  for (const std::string& a : targets) list += (list.empty() ? "" : ", ") + a;
  const std::string why = "this NVRTC (" + nvrtc_version() + ") builds for " + list +
                          " (an 'a' suffix selects arch-specific features, an 'f' suffix "
                          "family-specific ones)";
  const std::string shown = quoted_excerpt(arch);
  Target target;
  const std::string base_arch = arch.substr(0, arch.find(':'));
  try {
    Target::parse(base_arch);
  } catch (const Error&) {
    throw_invalid_argument(flag, shown, "is not a GPU target; " + why);
  }
  try {
    target = Target::parse(arch);
  } catch (const Error& e) {
    // The library's reason (the multiprocessor count or the bandwidth, whichever is wrong),
    // under the flag's name.
    const std::string message = e.what(), prefix = "invalid arch " + shown + ": ";
    throw_invalid_argument(flag, shown,
                           message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message);
  }
  // Exactly the target named: sm_100f is built as sm_100f, and an arch or suffix this NVRTC
  // lacks is refused rather than replaced.
  if (std::find(targets.begin(), targets.end(), target.name()) == targets.end()) {
    throw_invalid_argument(flag, shown, why);
  }
  return target;
}

namespace {

// The long name of a flag ("--output" of "-o,--output"): what its errors name.
std::string long_name(const std::string& name) { return name.substr(name.find_last_of(',') + 1); }

// A flag whose value must not be empty; set() takes the value as given.
CLI::Option* add_nonempty_option(CLI::App& app, const std::string& name,
                                 std::function<void(const std::string&)> set,
                                 const std::string& help) {
  return app.add_option_function<std::string>(
      name,
      [set = std::move(set), flag = long_name(name)](const std::string& text) {
        if (text.empty()) {
          throw_invalid_argument(flag, "''", "is empty; give a value or leave the flag out");
        }
        set(text);
      },
      help);
}

}  // namespace

CLI::Option* add_integer_option(CLI::App& app, const std::string& name, int& value, int min,
                                int max, const std::string& help) {
  // The long name ("--jobs" of "-j,--jobs") is what the error names.
  const std::string flag = long_name(name);
  return app
      .add_option_function<std::string>(
          name,
          [&value, flag, min, max](const std::string& text) {
            value = int(parse_integer(text, flag, min, max));
          },
          help)
      ->type_name("INT");
}

CLI::Option* add_text_option(CLI::App& app, const std::string& name, std::string& value,
                             const std::string& help) {
  return add_nonempty_option(
      app, name, [&value](const std::string& text) { value = text; }, help);
}

CLI::Option* add_text_option(CLI::App& app, const std::string& name,
                             std::optional<std::string>& value, const std::string& help) {
  return add_nonempty_option(
      app, name, [&value](const std::string& text) { value = text; }, help);
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

std::string read_bounded_file(const std::string& flag, const std::string& path, size_t max_bytes,
                              const std::string& hint) {
  const auto unreadable = [&](int error) {
    throw_invalid_argument(flag, quoted_excerpt(path, kPathExcerpt),
                           std::string("cannot be read (") + std::strerror(error) + ")");
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) unreadable(errno);
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;  // EISDIR for a directory
      ::close(fd);
      unreadable(error);
    }
    if (text.size() + size_t(n) > max_bytes) {
      ::close(fd);
      throw_invalid_argument(flag, quoted_excerpt(path, kPathExcerpt),
                             "is larger than " + std::to_string(max_bytes >> 20) + " MiB; " + hint);
    }
    text.append(buffer, size_t(n));
  }
  ::close(fd);
  return text;
}

}  // namespace normjit::tools
