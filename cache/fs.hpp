// Small POSIX helpers for the store: an owning fd, loops that survive EINTR and short I/O.
// Every function reports errno instead of throwing: the store turns I/O trouble into warnings.
#pragma once

#include <sys/stat.h>
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

// Returned by open_regular() for a name that exists but is not a regular file.
constexpr int kNotRegular = -2;

// Opens name in dirfd with flags (O_RDONLY, or O_RDWR | O_CREAT) only if it is a regular file,
// so that no caller can hang on a FIFO or trigger a device: the type is checked before the open
// (opening a FIFO for reading blocks until a writer comes, opening a device has side effects)
// and again on the descriptor (the name may have been replaced in between), and the open itself
// is O_NONBLOCK so that the window cannot block either. follow: symbolic links are followed;
// otherwise a link is refused with ELOOP. Returns 0 with *fd open, kNotRegular (file_type_text()
// names the type), ENOENT, ELOOP, or another errno; *have_stat says whether *st describes the
// name (always after 0, kNotRegular and a refused link).
int open_regular(int dirfd, const std::string& name, int flags, bool follow, UniqueFd* fd,
                 struct stat* st, bool* have_stat);

// "a directory", "a FIFO", "a symbolic link", ...: what a non-regular name is, for messages.
std::string file_type_text(mode_t mode);

// Bytes a file occupies on disk: its size, unless it has fewer blocks allocated (a sparse file
// claiming gigabytes). File systems that report no blocks at all get their size.
uint64_t disk_bytes(const struct stat& st);

// Names in the directory of dirfd (not "." and ".."); empty when unreadable. Opens its own
// description of the directory, so concurrent scans never share a read offset.
std::vector<std::string> list_directory(int dirfd);

}  // namespace normjit::cache::detail
