#include "cache/fs.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace normjit::cache::detail {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  // close() is not retried on EINTR: on Linux the descriptor is released either way.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string errno_text(int error) {
  char buffer[256];
  // GNU strerror_r returns the message, which may or may not live in buffer.
  return ::strerror_r(error, buffer, sizeof(buffer));
}

int write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;  // no progress and no errno: never loop on it
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

int read_at(int fd, uint64_t offset, size_t size, std::string* out) {
  out->resize(size);
  size_t done = 0;
  while (done < size) {
    const ssize_t n =
        ::pread(fd, out->data() + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return -1;
    done += static_cast<size_t>(n);
  }
  return 0;
}

int make_directories(const std::string& path, mode_t mode) {
  if (path.empty()) return ENOENT;
  // Walk the components left to right; existing ones (EEXIST) are left as they are.
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && prefix.back() != '/' && ::mkdir(prefix.c_str(), mode) != 0) {
      const int error = errno;
      struct stat st;
      if (error != EEXIST) return error;
      if (::stat(prefix.c_str(), &st) != 0) return errno;
      if (!S_ISDIR(st.st_mode)) return ENOTDIR;
    }
    if (slash == std::string::npos) return 0;
  }
}

int open_regular(int dirfd, const std::string& name, int flags, bool follow, UniqueFd* fd,
                 struct stat* st, bool* have_stat) {
  fd->reset();
  *have_stat = ::fstatat(dirfd, name.c_str(), st, follow ? 0 : AT_SYMLINK_NOFOLLOW) == 0;
  if (*have_stat) {
    if (S_ISLNK(st->st_mode)) return ELOOP;  // only seen when !follow
    if (!S_ISREG(st->st_mode)) return kNotRegular;
  } else if (errno != ENOENT || (flags & O_CREAT) == 0) {
    return errno;
  }
  // O_NONBLOCK matters only if the name became a FIFO since the fstatat (a regular file ignores
  // it), O_NOCTTY only if it became a terminal.
  fd->reset(::openat(dirfd, name.c_str(),
                     flags | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (follow ? 0 : O_NOFOLLOW), 0644));
  if (!fd->valid()) return errno;
  *have_stat = ::fstat(fd->get(), st) == 0;
  if (!*have_stat) {
    const int error = errno;
    fd->reset();
    return error;
  }
  if (!S_ISREG(st->st_mode)) {
    fd->reset();
    return kNotRegular;
  }
  return 0;
}

std::string file_type_text(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO";
    case S_IFLNK:
      return "a symbolic link";
    case S_IFSOCK:
      return "a socket";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    default:
      return "not a regular file";
  }
}

uint64_t disk_bytes(const struct stat& st) {
  const uint64_t size = st.st_size > 0 ? static_cast<uint64_t>(st.st_size) : 0;
  // st_blocks counts 512-byte units whatever st_blksize is. Some FUSE and network file systems
  // report 0 for every file; their sizes are taken as they are.
  const uint64_t allocated = static_cast<uint64_t>(st.st_blocks) * 512;
  return st.st_blocks > 0 ? std::min(size, allocated) : size;
}

std::vector<std::string> list_directory(int dirfd) {
  std::vector<std::string> names;
  const int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return names;
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    ::close(fd);
    return names;
  }
  while (const dirent* e = ::readdir(dir)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(dir);  // closes fd too
  return names;
}

}  // namespace normjit::cache::detail
