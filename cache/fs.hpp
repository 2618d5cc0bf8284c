// Small POSIX helpers for the store: an owning fd, loops that survive EINTR and short I/O.
// Every function reports errno instead of throwing: the store turns I/O trouble into warnings.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace normjit::cache::detail {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);  // closes the old fd, ignoring errors (nothing to do about them)

 private:
  int fd_ = -1;
};

std::string errno_text(int error);  // "No space left on device"

// 0 or the errno of the failing call.
int write_all(int fd, std::string_view data);
// Reads exactly size bytes at offset into *out; 0, an errno, or -1 when the file ended early.
int read_at(int fd, uint64_t offset, size_t size, std::string* out);
// mkdir -p: creates path and its missing parents with mode; 0 or an errno.
int make_directories(const std::string& path, mode_t mode);

// Names in the directory of dirfd (not "." and ".."); empty when unreadable. Opens its own
// description of the directory, so concurrent scans never share a read offset.
std::vector<std::string> list_directory(int dirfd);

}  // namespace normjit::cache::detail
