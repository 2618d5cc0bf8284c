// Helpers shared by the cache tests: scratch directories, captured warnings, sample entries.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache.hpp"
#include "tests/unit/temp_dir.hpp"

namespace normjit::cache::testing {

using normjit::testing::TempDir;

// Collects warnings instead of printing them, for as long as it lives.
class WarningCapture {
 public:
  WarningCapture() {
    set_warning_sink([this](const std::string& message) {
      std::lock_guard lock(mutex_);
      messages_.push_back(message);
    });
  }
  ~WarningCapture() { set_warning_sink(nullptr); }
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;

  std::vector<std::string> messages() const {
    std::lock_guard lock(mutex_);
    return messages_;
  }
  size_t count() const { return messages().size(); }
  std::string all() const {
    std::string out;
    for (const std::string& m : messages()) out += m + "\n";
    return out;
  }
  void clear() {
    std::lock_guard lock(mutex_);
    messages_.clear();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
};

// Sets (or unsets, with nullopt) an environment variable and restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

inline KeyInputs sample_inputs(int i) {
  KeyInputs inputs;
  inputs.source = "#include <normjit/rmsnorm_channels.cuh>\n// kernel " + std::to_string(i) + "\n";
  inputs.name_expression = "&normjit::rmsnorm_channels<float, " + std::to_string(8 * (i + 1)) + ">";
  inputs.template_digest = "0123456789abcdef";
  inputs.options = {"--gpu-architecture=sm_90", "--std=c++17", "-default-device"};
  inputs.target = "sm_90";
  inputs.output_kind = "cubin+ptx";
  inputs.compiler = "nvrtc 13.0";
  return inputs;
}

// A complete entry; the cubin holds every byte value, NULs included.
inline Entry sample_entry(int i, size_t cubin_bytes = 2048) {
  const KeyInputs inputs = sample_inputs(i);
  Entry entry;
  entry.preimage = inputs.preimage();
  entry.key = sha256_hex(entry.preimage);
  entry.metadata = R"({"spec":"op=rmsnorm shape=8,)" + std::to_string(8 * (i + 1)) +
                   R"(,32,32 dtype=f32 affine=none eps=1e-05"})";
  entry.cubin.resize(cubin_bytes);
  for (size_t b = 0; b < cubin_bytes; ++b) entry.cubin[b] = static_cast<char>((b * 7 + i) & 0xff);
  entry.ptx = ".version 8.0\n.target sm_90\n// kernel " + std::to_string(i) + "\n";
  return entry;
}

inline bool same_entry(const Entry& a, const Entry& b) {
  return a.key == b.key && a.preimage == b.preimage && a.metadata == b.metadata &&
         a.cubin == b.cubin && a.ptx == b.ptx;
}

inline std::string entry_path(const std::string& dir, const std::string& key) {
  return dir + "/" + key + ".entry";
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

inline std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ignored;
  for (const auto& e : std::filesystem::directory_iterator(dir, ignored)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

inline size_t count_temporaries(const std::string& dir) {
  size_t n = 0;
  for (const std::string& name : names_in(dir)) n += name.rfind(".tmp-", 0) == 0;
  return n;
}

// Sets a file's mtime (the last-use stamp of an entry) to now + offset seconds.
inline void set_mtime(const std::string& path, int64_t offset_seconds) {
  struct timespec times[2];
  ::clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec += offset_seconds;
  times[1] = times[0];
  ::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW);
}

inline int64_t mtime_of(const std::string& path) {
  struct stat st {};
  ::lstat(path.c_str(), &st);
  return st.st_mtime;
}

inline int64_t now_seconds() { return static_cast<int64_t>(::time(nullptr)); }

}  // namespace normjit::cache::testing
