// Store: the layered on-disk cache. See docs/cache-format.md for the layout and the argument
// for why readers need no lock.
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "cache/cache.hpp"
#include "cache/format.hpp"
#include "cache/fs.hpp"
#include "normjit/error.hpp"

namespace normjit::cache {
namespace {

using detail::UniqueFd;

constexpr std::string_view kEntrySuffix = ".entry";
constexpr std::string_view kTempPrefix = ".tmp-";
constexpr const char* kStatsFile = "stats.json";
// A load re-stamps an entry at most this often: one futimens per entry per minute keeps the
// hot path read-only while LRU order stays exact to the minute.
constexpr int64_t kStampIntervalSeconds = 60;
// Loads between best-effort flushes of the persisted counters.
constexpr uint64_t kLoadsPerStatsFlush = 64;
using detail::kMaxEntryBytes;

std::mutex& sink_mutex() {
  static std::mutex mutex;
  return mutex;
}

WarningSink& sink() {
  static WarningSink current;
  return current;
}

std::string entry_name(const std::string& key) { return key + std::string(kEntrySuffix); }

// "<64 hex>.entry" -> the key; other names (stats.json, temporaries, strangers) -> "".
std::string key_of_entry_name(std::string_view name) {
  if (name.size() != 64 + kEntrySuffix.size() || name.substr(64) != kEntrySuffix) return "";
  if (!detail::is_key(name.substr(0, 64))) return "";
  return std::string(name.substr(0, 64));
}

bool is_temp_name(std::string_view name) {
  return name.substr(0, kTempPrefix.size()) == kTempPrefix;
}

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string join_path(const std::string& dir, std::string_view name) {
  if (dir.empty() || dir.back() == '/') return dir + std::string(name);
  return dir + "/" + std::string(name);
}

std::string octal_mode(mode_t mode) {
  char text[16];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Test hooks (cache.hpp): read at each save so that a test can set them between saves.
enum class Fault { kNone, kNoSpace, kAccess };

Fault fault_from_env() {
  const char* value = std::getenv("NORMJIT_CACHE_FAULT");
  if (value == nullptr) return Fault::kNone;
  const std::string_view text = value;
  if (text == "enospc") return Fault::kNoSpace;
  if (text == "eacces") return Fault::kAccess;
  return Fault::kNone;
}

double pause_from_env() {
  const char* value = std::getenv("NORMJIT_CACHE_TEST_PAUSE_WRITE");
  if (value == nullptr) return 0;
  char* end = nullptr;
  const double seconds = std::strtod(value, &end);
  return end != value && seconds > 0 ? seconds : 0;
}

std::string random_hex() {
  // Per-thread generator: no lock on the write path. The pid in the temp name separates
  // forked children, which inherit the generator's state.
  thread_local std::mt19937_64 generator([] {
    std::random_device device;
    return (uint64_t{device()} << 32) ^ device() ^
           static_cast<uint64_t>(std::hash<std::thread::id>()(std::this_thread::get_id()));
  }());
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(generator()));
  return text;
}

nlohmann::json stats_to_json(const StoreStats& s) {
  return {{"hits", s.hits},
          {"misses", s.misses},
          {"bad_entries", s.bad_entries},
          {"writes", s.writes},
          {"evictions", s.evictions}};
}

StoreStats stats_from_json(const std::string& text) {
  StoreStats s;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return s;  // missing, torn or foreign: start again from zero
  auto field = [&](const char* name) -> uint64_t {
    auto it = j.find(name);
    return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
  };
  s.hits = field("hits");
  s.misses = field("misses");
  s.bad_entries = field("bad_entries");
  s.writes = field("writes");
  s.evictions = field("evictions");
  return s;
}

struct Layer {
  std::string path;     // as configured, for messages and EntryInfo
  UniqueFd dir;         // invalid: the layer is unusable (missing, refused, unreadable)
  std::string problem;  // why dir is invalid (the warning given), for maintenance commands
  bool readonly = false;
};

// A size no entry can have. Such a file is bad whatever its bytes say, so eviction removes it
// before any entry and never lets the size it claims push out valid ones.
bool implausible_size(const struct stat& st) {
  return st.st_size < static_cast<off_t>(detail::kHeaderBytes) ||
         static_cast<uint64_t>(st.st_size) > kMaxEntryBytes;
}

// Opens the entry file name of layer l for reading. Every reader of entries goes through here:
// only a regular file is opened (a FIFO would block the open, a device has side effects, a
// directory cannot be read), and one of a plausible size, checked before anything is allocated
// for it. Returns 0 with *fd open, ENOENT when the name does not exist, or -1 with *problem;
// *have_stat says whether *st describes the name.
int open_entry(const Layer& l, const std::string& name, UniqueFd* fd, struct stat* st,
               bool* have_stat, std::string* problem) {
  // In the writable layer an entry is never a symbolic link (we only rename regular files in);
  // read-only layers may be assembled from links.
  const int error =
      detail::open_regular(l.dir.get(), name, O_RDONLY, /*follow=*/l.readonly, fd, st, have_stat);
  if (error == ENOENT) return ENOENT;
  if (error == detail::kNotRegular) {
    *problem = "is " + detail::file_type_text(st->st_mode) + ", not a regular file";
  } else if (error == ELOOP) {
    *problem = "is a symbolic link";
  } else if (error != 0) {
    *problem = "cannot be opened (" + detail::errno_text(error) + ")";
  } else if (!l.readonly && st->st_uid != ::geteuid()) {
    *problem = "belongs to uid " + std::to_string(st->st_uid) + ", not to us";
  } else if (static_cast<uint64_t>(st->st_size) > kMaxEntryBytes) {
    *problem = "is implausibly large (" + std::to_string(st->st_size) +
               " bytes, entries are at most " + std::to_string(kMaxEntryBytes) + ")";
  } else {
    return 0;
  }
  fd->reset();
  return -1;
}

// What one layer holds for a key.
enum class Lookup { kAbsent, kBad, kHit };

}  // namespace

struct Store::Impl {
  StoreOptions options;
  Layer primary;                // the writable layer; dir valid when it may be read
  std::vector<Layer> readonly;  // read-only layers, in search order
  std::atomic<bool> writable{false};
  std::atomic<bool> write_warned{false};

  std::atomic<uint64_t> hits{0}, misses{0}, bad_entries{0}, writes{0}, evictions{0};
  std::mutex flush_mutex;
  StoreStats flushed;  // counters already added to stats.json
  std::atomic<uint64_t> loads_since_flush{0};

  // Bad entries that could not be removed (read-only layers, or a failed unlink), by layer
  // index, key and file identity: skipped silently afterwards so that each warns once. Size
  // and mtime join the inode because a replaced file may reuse the inode number.
  using FileId = std::tuple<size_t, std::string, ino_t, off_t, time_t, long>;
  static FileId file_id(size_t index, const std::string& key, const struct stat& st) {
    return {index, key, st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
  }
  std::mutex bad_mutex;
  std::set<FileId> known_bad;
  std::set<std::string> blocked_warned;   // keys whose name a directory blocks: warned once
  std::atomic<bool> stats_warned{false};  // stats.json is not a regular file: warned once
  // Stale temporaries the constructor swept, in bytes: gc() reports them with its own sweep's
  // (a `cache gc` opens its store, which sweeps first, and then found nothing left to free).
  std::atomic<uint64_t> swept_at_open{0};

  // Memory layer: holds what save() could not write to disk, LRU-bounded by max_bytes.
  std::mutex memory_mutex;
  std::list<Entry> memory_lru;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> memory_index;
  uint64_t memory_bytes = 0;

  // One eviction scan at a time inside the process. A scan stats every entry, so save() skips
  // it while the writable layer's size, as last scanned plus what this store wrote since, stays
  // under the cap; other processes' writes are caught by a rescan every minute or 64 saves.
  std::mutex evict_mutex;
  bool scanned = false;
  uint64_t estimated_bytes = 0;  // writable layer size at the last scan + our saves since
  uint64_t saves_since_scan = 0;
  int64_t scanned_at = 0;  // unix seconds

  void open_primary();
  void open_readonly(const std::string& path);
  Layer& layer(size_t index) { return index == 0 ? primary : readonly[index - 1]; }
  const Layer& layer(size_t index) const { return index == 0 ? primary : readonly[index - 1]; }
  size_t layer_count() const { return 1 + readonly.size(); }

  Lookup lookup(size_t index, const std::string& key, Entry* entry);
  void reject(size_t index, const std::string& key, const struct stat* judged,
              const std::string& problem);
  int write_entry(const std::string& key, const std::string& bytes, std::string* step,
                  bool* blocked);
  void degrade(const std::string& step, int error);
  Removal evict(uint64_t max_bytes, const std::string& keep);
  bool remove_name(const std::string& name, uint64_t* freed, std::string* problem);
  void evict_after_save(const std::string& key, uint64_t bytes);
  // Removes the writable layer's temporary files older than that; the bytes freed. A name that
  // could not be removed goes to *failures where given ("<path>: <why>").
  uint64_t sweep(int64_t older_than_seconds, std::vector<std::string>* failures = nullptr);
  void remember(const Entry& entry);
  std::optional<Entry> recall(const std::string& key);
  void forget(const std::string& key);
  StoreStats current() const {
    return {hits.load(), misses.load(), bad_entries.load(), writes.load(), evictions.load()};
  }
  void flush_stats();
  EntryInfo describe(size_t index, const std::string& name, bool verify) const;
};

void Store::Impl::open_primary() {
  const std::string& dir = options.dir;
  primary.path = dir;
  const auto memory_only = "; kernels are cached in memory only";
  // Remembered for maintenance commands, which must fail where they could not look.
  auto refuse = [&](const std::string& why) {
    if (options.must_write) throw Error(ErrorCode::kInvalidArgument, why);
    primary.problem = why;
    warn(why + memory_only);
  };
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid() && errno == ENOENT) {
    // Created 0700, parents too: cached kernels are code this user will run.
    if (const int error = detail::make_directories(dir, 0700); error != 0) {
      refuse("cannot create cache directory " + dir + " (" + detail::errno_text(error) + ")");
      return;
    }
    fd.reset(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  if (!fd.valid()) {
    refuse("cannot open cache directory " + dir + " (" + detail::errno_text(errno) + ")");
    return;
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    refuse("cannot stat cache directory " + dir + " (" + detail::errno_text(errno) + ")");
    return;
  }
  // Anyone who can write into the directory can plant a kernel under a valid key that this
  // process would then run. So the directory must be ours and closed to other writers; the
  // exception is a sticky directory of ours (others can add files but not replace ours), where
  // each entry's owner is checked on load.
  if (st.st_uid != ::geteuid()) {
    refuse("refusing cache directory " + dir + ": it belongs to uid " + std::to_string(st.st_uid) +
           ", not to uid " + std::to_string(::geteuid()) +
           " running normjit, so its owner could plant kernels; set NORMJIT_CACHE_DIR to a "
           "directory of your own (a directory only read, such as a shipped cache, may belong to "
           "anyone as a read-only layer: NORMJIT_CACHE_READONLY=" +
           dir + ")");
    return;
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    refuse("refusing cache directory " + dir + ": its mode " + octal_mode(st.st_mode) +
           " lets other users write into it and plant kernels; run 'chmod go-w " + dir +
           "' or set NORMJIT_CACHE_DIR to a private directory");
    return;
  }
  primary.dir = std::move(fd);
  // access(2) semantics catch a read-only mount (EROFS) and missing write permission (which
  // root bypasses); save() still handles failures of the real writes (ENOSPC, quotas, ...).
  if (::faccessat(primary.dir.get(), ".", W_OK | X_OK, AT_EACCESS) != 0) {
    const std::string why =
        "cache directory " + dir + " is not writable (" + detail::errno_text(errno) + ")";
    if (options.must_write) throw Error(ErrorCode::kInvalidArgument, why);
    warn(why + "; its kernels are still read, new ones are cached in memory only");
    write_warned = true;
    return;
  }
  writable = true;
}

void Store::Impl::open_readonly(const std::string& path) {
  Layer layer;
  layer.path = path;
  layer.readonly = true;
  layer.dir.reset(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!layer.dir.valid()) {
    layer.problem =
        "read-only cache layer " + path + " is unusable (" + detail::errno_text(errno) + ")";
    warn(layer.problem + "; skipped");
  }
  readonly.push_back(std::move(layer));
}

Lookup Store::Impl::lookup(size_t index, const std::string& key, Entry* entry) {
  Layer& l = layer(index);
  if (!l.dir.valid()) return Lookup::kAbsent;
  const std::string name = entry_name(key);
  UniqueFd fd;
  struct stat st {};
  bool have_stat = false;
  std::string problem;
  if (open_entry(l, name, &fd, &st, &have_stat, &problem) == ENOENT) return Lookup::kAbsent;
  if (have_stat) {
    std::lock_guard lock(bad_mutex);
    if (known_bad.count(file_id(index, key, st)) != 0) return Lookup::kBad;  // warned already
  }
  if (fd.valid()) {
    // One open fd, the whole file read into memory: a concurrent eviction unlinks the name,
    // never the bytes behind this fd, and entries are never modified in place. open_entry
    // bounded the size, so this allocation is what the file holds, at most kMaxEntryBytes.
    std::string bytes;
    const int error = detail::read_at(fd.get(), 0, static_cast<size_t>(st.st_size), &bytes);
    if (error != 0) {
      problem =
          error < 0 ? "truncated while reading" : "unreadable (" + detail::errno_text(error) + ")";
    } else if (auto decoded = decode_entry(bytes, key, &problem)) {
      *entry = std::move(*decoded);
      if (!l.readonly && now_seconds() - st.st_mtime >= kStampIntervalSeconds) {
        // The last-use stamp is the entry's mtime (never atime, which noatime/relatime
        // mounts do not keep). Failure only makes LRU less exact.
        const struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
        ::futimens(fd.get(), times);
      }
      return Lookup::kHit;
    }
  }
  reject(index, key, have_stat ? &st : nullptr, problem);
  return Lookup::kBad;
}

void Store::Impl::reject(size_t index, const std::string& key, const struct stat* judged,
                         const std::string& problem) {
  Layer& l = layer(index);
  const std::string name = entry_name(key);
  ++bad_entries;
  bool removed = false;
  int remove_error = 0;
  if (!l.readonly && judged != nullptr) {
    // Unlink only the file we judged: a writer may have renamed a fresh entry onto the name
    // since we opened it, and that one must survive. A directory goes only if it is empty:
    // what is inside is not ours to judge.
    struct stat now {};
    if (::fstatat(l.dir.get(), name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
        now.st_ino == judged->st_ino && now.st_dev == judged->st_dev) {
      removed = ::unlinkat(l.dir.get(), name.c_str(), S_ISDIR(now.st_mode) ? AT_REMOVEDIR : 0) == 0;
      if (!removed) remove_error = errno;
    }
  }
  if (!removed && judged != nullptr) {
    std::lock_guard lock(bad_mutex);
    known_bad.insert(file_id(index, key, *judged));
  }
  // An entry of a layer opened read-only stays (a read-only layer, or a directory that only
  // looks, such as `normjit dump --cache-entry`'s); the kernel comes from a later layer, or is
  // rebuilt into the writable one where the JIT is on.
  std::string outcome =
      l.readonly ? "; skipped (opened read-only: it stays)" : "; it will be rebuilt";
  if (removed) {
    outcome = "; removed, it will be rebuilt";
  } else if (remove_error != 0) {
    outcome = "; cannot remove it (" + detail::errno_text(remove_error) + ")";
  }
  warn("ignoring bad cache entry " + join_path(l.path, name) + ": " + problem + outcome);
}

int Store::Impl::write_entry(const std::string& key, const std::string& bytes, std::string* step,
                             bool* blocked) {
  *blocked = false;
  const Fault fault = fault_from_env();
  const int dir = primary.dir.get();
  if (fault == Fault::kAccess) {
    *step = "creating a temporary file";
    return EACCES;
  }
  // ".tmp-<key>-<pid>-<random>": unique per writer (O_EXCL), recognisable by the sweeper.
  std::string temp;
  UniqueFd fd;
  for (int attempt = 0; attempt < 4 && !fd.valid(); ++attempt) {
    temp = std::string(kTempPrefix) + key + "-" + std::to_string(::getpid()) + "-" + random_hex();
    fd.reset(::openat(dir, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd.valid() && errno != EEXIST) break;
  }
  if (!fd.valid()) {
    *step = "creating a temporary file";
    return errno;
  }
  auto fail = [&](const char* what, int error) {
    *step = what;
    fd.reset();
    ::unlinkat(dir, temp.c_str(), 0);
    return error;
  };
  std::string_view rest = bytes;
  const double pause = pause_from_env();
  if (pause > 0 || fault == Fault::kNoSpace) {
    // Test hooks: leave a half-written temporary behind, as a killed writer or a full disk does.
    const std::string_view half = rest.substr(0, rest.size() / 2);
    if (const int error = detail::write_all(fd.get(), half); error != 0) {
      return fail("writing a temporary file", error);
    }
    rest.remove_prefix(half.size());
    if (fault == Fault::kNoSpace) return fail("writing a temporary file", ENOSPC);
    std::this_thread::sleep_for(std::chrono::duration<double>(pause));
  }
  if (const int error = detail::write_all(fd.get(), rest); error != 0) {
    return fail("writing a temporary file", error);
  }
  // The data must be durable before the name points at it, or a crash could publish a
  // zero-length or partial entry under a valid name.
  if (::fsync(fd.get()) != 0) return fail("syncing a temporary file", errno);
  // close() can report delayed write errors (NFS).
  if (::close(fd.release()) != 0) return fail("closing a temporary file", errno);
  const std::string name = entry_name(key);
  if (::renameat(dir, temp.c_str(), dir, name.c_str()) != 0) {
    int error = errno;
    // A directory holds the entry's name (EISDIR; ENOTEMPTY or EEXIST when it has files): a
    // problem of this one key, not of the cache directory, which other keys keep using. An
    // empty one is nobody's data and goes; one with files in it stays.
    if (error == EISDIR || error == ENOTEMPTY || error == EEXIST) {
      if (::unlinkat(dir, name.c_str(), AT_REMOVEDIR) == 0 &&
          ::renameat(dir, temp.c_str(), dir, name.c_str()) == 0) {
        ::fsync(dir);
        return 0;
      }
      error = errno;
      *blocked = error == EISDIR || error == ENOTEMPTY || error == EEXIST;
    }
    return fail("renaming a temporary file into place", error);
  }
  // Make the rename durable. Some file systems refuse fsync on a directory (EINVAL); the entry
  // is already published and valid, so that is no reason to give up on the directory.
  ::fsync(dir);
  return 0;
}

void Store::Impl::degrade(const std::string& step, int error) {
  writable = false;
  if (write_warned.exchange(true)) return;  // one warning per store, not one per save
  warn("cannot write to cache directory " + options.dir + " (" + step + ": " +
       detail::errno_text(error) + "); new kernels are cached in memory only from now on");
}

void Store::Impl::evict_after_save(const std::string& key, uint64_t bytes) {
  {
    std::lock_guard lock(evict_mutex);
    estimated_bytes += bytes;
    if (scanned && estimated_bytes <= options.max_bytes && ++saves_since_scan < 64 &&
        now_seconds() - scanned_at < 60) {
      return;
    }
  }
  evict(options.max_bytes, key);
}

Removal Store::Impl::evict(uint64_t max_bytes, const std::string& keep) {
  Removal removal;
  if (!primary.dir.valid()) return removal;
  std::lock_guard lock(evict_mutex);
  struct Candidate {
    bool implausible;  // cannot be an entry: goes first
    struct timespec last_use;
    std::string name;
    uint64_t bytes;  // on disk
  };
  std::vector<Candidate> candidates;
  uint64_t total = 0;
  for (std::string& name : detail::list_directory(primary.dir.get())) {
    if (key_of_entry_name(name).empty()) continue;
    struct stat st;
    if (::fstatat(primary.dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    // Only regular files are entries. A directory or FIFO that took an entry's name is reported
    // by the loads that meet it; it is not counted and eviction does not stop at it.
    if (!S_ISREG(st.st_mode)) continue;
    // What the file occupies, not what its size claims: a sparse file claiming 100 GiB must
    // not push valid entries out.
    const uint64_t bytes = detail::disk_bytes(st);
    total += bytes;
    candidates.push_back({implausible_size(st), st.st_mtim, std::move(name), bytes});
  }
  scanned = true;
  scanned_at = now_seconds();
  saves_since_scan = 0;
  estimated_bytes = total;
  if (total <= max_bytes) return removal;
  // Files no entry could be first, then least recently used first; names break ties so that
  // every process agrees on the order.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::make_tuple(!a.implausible, a.last_use.tv_sec, a.last_use.tv_nsec,
                           std::cref(a.name)) < std::make_tuple(!b.implausible, b.last_use.tv_sec,
                                                                b.last_use.tv_nsec,
                                                                std::cref(b.name));
  });
  const std::string keep_name = keep.empty() ? "" : entry_name(keep);
  for (const Candidate& c : candidates) {
    if (total <= max_bytes) break;
    if (c.name == keep_name) continue;
    // Unlinking is safe against readers: they hold an fd and read the whole file through it.
    if (::unlinkat(primary.dir.get(), c.name.c_str(), 0) == 0) {
      ++evictions;
      ++removal.entries;
      removal.bytes += c.bytes;
    } else if (errno != ENOENT) {
      const int error = errno;
      removal.failures.push_back(join_path(primary.path, c.name) + ": " +
                                 detail::errno_text(error));
      // A read-only or foreign directory: no other entry will go either.
      if (error == EACCES || error == EPERM || error == EROFS) break;
      continue;
    }
    total -= c.bytes;  // gone: removed by us or by a concurrent evictor
  }
  estimated_bytes = total;
  return removal;
}

bool Store::Impl::remove_name(const std::string& name, uint64_t* freed, std::string* problem) {
  *freed = 0;
  struct stat st;
  if (::fstatat(primary.dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return true;  // gone already: another process removed it
    *problem = detail::errno_text(errno);
    return false;
  }
  // A directory on an entry's name goes only when empty: its files are not ours to judge. Any
  // other non-regular file (a FIFO, a link) is only a name, removed without being opened.
  if (::unlinkat(primary.dir.get(), name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0) {
    if (errno == ENOENT) return true;
    *problem = S_ISDIR(st.st_mode) && (errno == ENOTEMPTY || errno == EEXIST)
                   ? "a directory with files in it, not an entry; remove it by hand"
                   : detail::errno_text(errno);
    return false;
  }
  if (S_ISREG(st.st_mode)) *freed = detail::disk_bytes(st);
  return true;
}

uint64_t Store::Impl::sweep(int64_t older_than_seconds, std::vector<std::string>* failures) {
  if (!primary.dir.valid()) return 0;
  const int64_t now = now_seconds();
  uint64_t freed = 0;
  for (const std::string& name : detail::list_directory(primary.dir.get())) {
    if (!is_temp_name(name)) continue;
    struct stat st;
    if (::fstatat(primary.dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) || now - st.st_mtime < older_than_seconds) continue;
    if (::unlinkat(primary.dir.get(), name.c_str(), 0) == 0) {
      freed += detail::disk_bytes(st);
    } else if (failures && errno != ENOENT) {  // gone meanwhile: another sweep's
      failures->push_back(join_path(primary.path, name) + ": " + detail::errno_text(errno));
    }
  }
  return freed;
}

void Store::Impl::remember(const Entry& entry) {
  const uint64_t bytes =
      entry.metadata.size() + entry.preimage.size() + entry.cubin.size() + entry.ptx.size();
  std::lock_guard lock(memory_mutex);
  if (auto it = memory_index.find(entry.key); it != memory_index.end()) {
    memory_bytes -= it->second->metadata.size() + it->second->preimage.size() +
                    it->second->cubin.size() + it->second->ptx.size();
    memory_lru.erase(it->second);
    memory_index.erase(it);
  }
  memory_lru.push_front(entry);
  memory_index[entry.key] = memory_lru.begin();
  memory_bytes += bytes;
  // Same cap as the disk: oldest first, never the entry just saved.
  while (memory_bytes > options.max_bytes && memory_lru.size() > 1) {
    const Entry& old = memory_lru.back();
    memory_bytes -= old.metadata.size() + old.preimage.size() + old.cubin.size() + old.ptx.size();
    memory_index.erase(old.key);
    memory_lru.pop_back();
  }
}

std::optional<Entry> Store::Impl::recall(const std::string& key) {
  std::lock_guard lock(memory_mutex);
  auto it = memory_index.find(key);
  if (it == memory_index.end()) return std::nullopt;
  memory_lru.splice(memory_lru.begin(), memory_lru, it->second);
  return *it->second;
}

void Store::Impl::forget(const std::string& key) {
  std::lock_guard lock(memory_mutex);
  auto it = memory_index.find(key);
  if (it == memory_index.end()) return;
  memory_bytes -= it->second->metadata.size() + it->second->preimage.size() +
                  it->second->cubin.size() + it->second->ptx.size();
  memory_lru.erase(it->second);
  memory_index.erase(it);
}

void Store::Impl::flush_stats() {
  if (!primary.dir.valid() || !writable) return;
  std::lock_guard lock(flush_mutex);
  const StoreStats now = current();
  const StoreStats delta{now.hits - flushed.hits, now.misses - flushed.misses,
                         now.bad_entries - flushed.bad_entries, now.writes - flushed.writes,
                         now.evictions - flushed.evictions};
  if (delta.hits + delta.misses + delta.bad_entries + delta.writes + delta.evictions == 0) return;
  UniqueFd fd;
  struct stat st;
  bool have_stat = false;
  const int error = detail::open_regular(primary.dir.get(), kStatsFile, O_RDWR | O_CREAT,
                                         /*follow=*/false, &fd, &st, &have_stat);
  if (error != 0) {
    // A FIFO (which would block a reader), a directory or a link in its place: counters are
    // best effort, so say it once and carry on without them.
    if ((error == detail::kNotRegular || error == ELOOP) && !stats_warned.exchange(true)) {
      warn("ignoring " + join_path(primary.path, kStatsFile) + ": it is " +
           (error == ELOOP ? std::string("a symbolic link") : detail::file_type_text(st.st_mode)) +
           ", not a regular file; counters are not persisted until it is removed");
    }
    return;
  }
  // flock serialises the read-modify-write between processes; the file is rewritten in place
  // (not renamed) so that the lock stays on the one inode everybody opens. Best effort: a
  // crash mid-write leaves JSON that fails to parse, and the counters restart from zero.
  if (::flock(fd.get(), LOCK_EX) != 0) return;
  std::string text;
  if (::fstat(fd.get(), &st) == 0 && st.st_size > 0 && st.st_size < 4096) {
    detail::read_at(fd.get(), 0, static_cast<size_t>(st.st_size), &text);
  }
  StoreStats total = stats_from_json(text);
  total.hits += delta.hits;
  total.misses += delta.misses;
  total.bad_entries += delta.bad_entries;
  total.writes += delta.writes;
  total.evictions += delta.evictions;
  const std::string out = stats_to_json(total).dump() + "\n";
  if (::pwrite(fd.get(), out.data(), out.size(), 0) == static_cast<ssize_t>(out.size()) &&
      ::ftruncate(fd.get(), static_cast<off_t>(out.size())) == 0) {
    flushed = now;
  }
  loads_since_flush = 0;
}

EntryInfo Store::Impl::describe(size_t index, const std::string& name, bool verify) const {
  const Layer& l = layer(index);
  EntryInfo info;
  info.key = key_of_entry_name(name);
  info.path = join_path(l.path, name);
  info.layer = l.path;
  info.readonly = l.readonly;
  UniqueFd fd;
  struct stat st;
  bool have_stat = false;
  const int opened = open_entry(l, name, &fd, &st, &have_stat, &info.problem);
  if (have_stat) {
    info.last_use = st.st_mtime;
    if (S_ISREG(st.st_mode)) {
      info.bytes = static_cast<uint64_t>(st.st_size);
      info.disk_bytes = detail::disk_bytes(st);
    }
  }
  if (opened == ENOENT) info.problem = "removed while listing";
  if (opened != 0) return info;
  // Header, metadata and preimage come first in the file, so listing never reads a cubin.
  std::string head;
  detail::Header header;
  const size_t head_bytes = std::min<uint64_t>(info.bytes, detail::kHeaderBytes);
  if (detail::read_at(fd.get(), 0, head_bytes, &head) != 0) {
    info.problem = "unreadable header";
    return info;
  }
  if (!detail::parse_header(head, info.bytes, info.key, &header, &info.problem)) return info;
  if (detail::read_at(fd.get(), header.metadata_offset(), header.metadata_bytes, &info.metadata) !=
          0 ||
      detail::read_at(fd.get(), header.preimage_offset(), header.preimage_bytes, &info.preimage) !=
          0) {
    info.metadata.clear();
    info.preimage.clear();
    info.problem = "truncated while reading";
    return info;
  }
  if (sha256_hex(info.preimage) != info.key) {
    info.problem = "the stored preimage does not hash to the key";
    return info;
  }
  if (verify) {
    std::string bytes;
    if (detail::read_at(fd.get(), 0, static_cast<size_t>(info.bytes), &bytes) != 0) {
      info.problem = "unreadable";
      return info;
    }
    if (!decode_entry(bytes, info.key, &info.problem)) return info;
  }
  info.valid = true;
  return info;
}

Store::Store(StoreOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->primary.readonly = false;
  if (!impl_->options.dir.empty()) {
    impl_->open_primary();
  } else if (impl_->options.must_write) {
    throw Error(ErrorCode::kInvalidArgument, "no cache directory is given to write to");
  }
  for (const std::string& path : impl_->options.readonly) {
    if (path.empty() || path == impl_->options.dir) continue;
    impl_->open_readonly(path);
    // The same directory by another name (a trailing slash, a link, listed twice, the writable
    // one): searched once, or a listing would count its entries twice.
    const Layer& added = impl_->readonly.back();
    const auto same = [&added](const Layer& other) {
      struct stat a, b;
      return &other != &added && other.dir.valid() && ::fstat(added.dir.get(), &a) == 0 &&
             ::fstat(other.dir.get(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    };
    if (added.dir.valid() &&
        (same(impl_->primary) ||
         std::any_of(impl_->readonly.begin(), impl_->readonly.end() - 1, same))) {
      impl_->readonly.pop_back();
    }
  }
  // Temporaries of writers killed mid-save (kill -9, power loss) would otherwise stay forever.
  if (impl_->writable) impl_->swept_at_open = impl_->sweep(kStaleTemporarySeconds);
}

Store::~Store() {
  try {
    impl_->flush_stats();
  } catch (...) {
    // Counters are best effort; a destructor never throws.
  }
}

std::optional<Entry> Store::load(const std::string& key, bool counted) {
  std::optional<Entry> found;
  if (detail::is_key(key)) {
    found = impl_->recall(key);
    Entry entry;
    for (size_t i = 0; !found && i < impl_->layer_count(); ++i) {
      if (impl_->lookup(i, key, &entry) == Lookup::kHit) found = std::move(entry);
    }
  }
  if (!counted) return found;
  ++(found ? impl_->hits : impl_->misses);
  if (++impl_->loads_since_flush >= kLoadsPerStatsFlush) impl_->flush_stats();
  return found;
}

void Store::save(const Entry& entry) {
  // A key that is not the hash of its preimage would be rejected by every later load: a
  // rebuild loop. That is a caller bug, reported at once.
  if (!detail::is_key(entry.key) || sha256_hex(entry.preimage) != entry.key) {
    throw Error(ErrorCode::kInvalidArgument,
                "argument 'entry.key' = '" + entry.key +
                    "': not the SHA-256 of entry.preimage (use KeyInputs::key())");
  }
  if (!impl_->writable) {
    impl_->remember(entry);
    return;
  }
  std::string step;
  bool blocked = false;
  const std::string bytes = encode_entry(entry);
  if (const int error = impl_->write_entry(entry.key, bytes, &step, &blocked); error != 0) {
    if (blocked) {
      // Only this key's name is taken; the directory stays writable for every other kernel.
      bool first = false;
      {
        std::lock_guard lock(impl_->bad_mutex);
        first = impl_->blocked_warned.insert(entry.key).second;
      }
      if (first) {
        warn("cannot publish cache entry " + join_path(impl_->options.dir, entry_name(entry.key)) +
             ": a directory with files in it has its name (" + detail::errno_text(error) +
             "); this kernel is cached in memory only until it is removed");
      }
    } else {
      impl_->degrade(step, error);
    }
    impl_->remember(entry);
    return;
  }
  ++impl_->writes;
  impl_->evict_after_save(entry.key, bytes.size());
  impl_->flush_stats();
}

bool Store::published(const std::string& key) {
  Entry entry;
  return detail::is_key(key) && impl_->writable && impl_->lookup(0, key, &entry) == Lookup::kHit;
}

void Store::discard(const std::string& key) {
  if (!detail::is_key(key)) return;
  impl_->forget(key);
  if (impl_->primary.dir.valid()) ::unlinkat(impl_->primary.dir.get(), entry_name(key).c_str(), 0);
  // A read-only layer cannot lose the file; remember it so that loads skip it from now on.
  for (size_t i = 1; i < impl_->layer_count(); ++i) {
    const Layer& l = impl_->layer(i);
    struct stat st;
    if (l.dir.valid() && ::fstatat(l.dir.get(), entry_name(key).c_str(), &st, 0) == 0) {
      std::lock_guard lock(impl_->bad_mutex);
      impl_->known_bad.insert(Impl::file_id(i, key, st));
    }
  }
}

bool Store::writable() const { return impl_->writable; }

const StoreOptions& Store::options() const { return impl_->options; }

StoreStats Store::stats() const { return impl_->current(); }

StoreStats Store::persisted_stats() const {
  if (!impl_->primary.dir.valid()) return {};
  UniqueFd fd;
  struct stat st;
  bool have_stat = false;
  const int error = detail::open_regular(impl_->primary.dir.get(), kStatsFile, O_RDONLY,
                                         /*follow=*/false, &fd, &st, &have_stat);
  if (error == detail::kNotRegular || error == ELOOP) {
    warn("ignoring " + join_path(impl_->primary.path, kStatsFile) + ": it is " +
         (error == ELOOP ? std::string("a symbolic link") : detail::file_type_text(st.st_mode)) +
         ", not a regular file; no counters are read from it");
  }
  if (error != 0 || ::flock(fd.get(), LOCK_SH) != 0) return {};
  std::string text;
  if (::fstat(fd.get(), &st) != 0 || st.st_size <= 0 || st.st_size >= 4096 ||
      detail::read_at(fd.get(), 0, static_cast<size_t>(st.st_size), &text) != 0) {
    return {};
  }
  return stats_from_json(text);
}

std::vector<EntryInfo> Store::list(bool verify) const {
  std::vector<EntryInfo> infos;
  for (size_t i = 0; i < impl_->layer_count(); ++i) {
    const Layer& l = impl_->layer(i);
    if (!l.dir.valid()) continue;
    std::vector<std::string> names = detail::list_directory(l.dir.get());
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      if (!key_of_entry_name(name).empty()) infos.push_back(impl_->describe(i, name, verify));
    }
  }
  return infos;
}

std::vector<EntryInfo> Store::list_key(const std::string& key) const {
  std::vector<EntryInfo> infos;
  if (!detail::is_key(key)) return infos;
  const std::string name = entry_name(key);
  for (size_t i = 0; i < impl_->layer_count(); ++i) {
    const Layer& l = impl_->layer(i);
    if (!l.dir.valid()) continue;
    struct stat st;  // the one name, not a listing of the layer: prewarm --check asks per kernel
    if (::fstatat(l.dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      infos.push_back(impl_->describe(i, name, /*verify=*/true));
    }
  }
  return infos;
}

Removal Store::gc(uint64_t max_bytes) {
  const uint64_t swept = impl_->swept_at_open.exchange(0) + impl_->sweep(kStaleTemporarySeconds);
  Removal removal = impl_->evict(max_bytes, /*keep=*/"");
  removal.bytes += swept;
  removal.temporary_bytes = swept;
  return removal;
}

Removal Store::clear() {
  Removal removal;
  if (!impl_->primary.dir.valid()) return removal;
  for (const std::string& name : detail::list_directory(impl_->primary.dir.get())) {
    if (key_of_entry_name(name).empty()) continue;  // stats.json, temporaries, other files
    uint64_t freed = 0;
    std::string problem;
    if (impl_->remove_name(name, &freed, &problem)) {
      ++removal.entries;
      removal.bytes += freed;
    } else {
      removal.failures.push_back(join_path(impl_->primary.path, name) + ": " + problem);
    }
  }
  return removal;
}

bool Store::remove(const std::string& key, std::string* problem) {
  if (!detail::is_key(key)) {
    *problem = "not a key";
    return false;
  }
  impl_->forget(key);
  if (!impl_->primary.dir.valid()) {
    *problem =
        impl_->primary.problem.empty() ? "no writable cache directory" : impl_->primary.problem;
    return false;
  }
  uint64_t freed = 0;
  return impl_->remove_name(entry_name(key), &freed, problem);
}

const std::string& Store::directory_problem() const { return impl_->primary.problem; }

std::vector<std::string> Store::temporary_files() const {
  std::vector<std::string> paths;
  for (size_t i = 0; i < impl_->layer_count(); ++i) {
    const Layer& l = impl_->layer(i);
    if (!l.dir.valid()) continue;
    for (const std::string& name : detail::list_directory(l.dir.get())) {
      if (is_temp_name(name)) paths.push_back(join_path(l.path, name));
    }
  }
  return paths;
}

std::vector<std::string> Store::readonly_problems() const {
  std::vector<std::string> problems;
  for (const Layer& l : impl_->readonly) {
    if (!l.problem.empty()) problems.push_back(l.problem);
  }
  return problems;
}

std::vector<std::string> Store::searched_readonly() const {
  std::vector<std::string> paths;
  for (const Layer& l : impl_->readonly) paths.push_back(l.path);
  return paths;
}

Removal Store::sweep_temporaries(int64_t older_than_seconds) {
  Removal removal;
  removal.bytes = impl_->sweep(older_than_seconds, &removal.failures);
  removal.temporary_bytes = removal.bytes;
  return removal;
}

std::optional<uint64_t> parse_byte_size(std::string_view text) {
  size_t digits = 0;
  uint64_t value = 0;
  for (; digits < text.size() && text[digits] >= '0' && text[digits] <= '9'; ++digits) {
    const uint64_t digit = static_cast<uint64_t>(text[digits] - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  if (digits == 0) return std::nullopt;
  std::string suffix;
  for (char c : text.substr(digits))
    suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int shift = 0;
  if (suffix.empty() || suffix == "b") {
    shift = 0;
  } else {
    static constexpr std::string_view kUnits = "kmgt";
    const size_t unit = kUnits.find(suffix[0]);
    const std::string_view rest = std::string_view(suffix).substr(1);
    if (unit == std::string_view::npos || !(rest.empty() || rest == "b" || rest == "ib")) {
      return std::nullopt;
    }
    shift = 10 * static_cast<int>(unit + 1);
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) return std::nullopt;
  return value << shift;
}

namespace {
std::string env_text(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}
}  // namespace

std::string StoreOptions::dir_from_env() {
  if (std::string dir = env_text("NORMJIT_CACHE_DIR"); !dir.empty()) return dir;
  if (std::string xdg = env_text("XDG_CACHE_HOME"); !xdg.empty() && xdg.front() == '/') {
    return join_path(xdg, "normjit");  // the XDG spec ignores relative values
  }
  if (std::string home = env_text("HOME"); !home.empty()) return join_path(home, ".cache/normjit");
  struct passwd pw;
  struct passwd* result = nullptr;
  char buffer[4096];
  if (::getpwuid_r(::geteuid(), &pw, buffer, sizeof(buffer), &result) == 0 && result &&
      result->pw_dir != nullptr && result->pw_dir[0] == '/') {
    return join_path(result->pw_dir, ".cache/normjit");
  }
  warn(
      "no home directory (HOME unset) and NORMJIT_CACHE_DIR unset; kernels are cached in memory "
      "only");
  return "";
}

std::string max_bytes_env_problem() {
  const char* max = std::getenv("NORMJIT_CACHE_MAX_BYTES");
  if (max == nullptr || *max == '\0' || parse_byte_size(max)) return "";
  return std::string("NORMJIT_CACHE_MAX_BYTES='") + max +
         "' is not a byte count such as 1073741824, 512M or 2G";
}

StoreOptions StoreOptions::from_env() {
  StoreOptions options;
  options.dir = dir_from_env();
  const std::string layers = env_text("NORMJIT_CACHE_READONLY");
  for (size_t start = 0; start <= layers.size();) {
    size_t colon = layers.find(':', start);
    if (colon == std::string::npos) colon = layers.size();
    if (colon > start) options.readonly.push_back(layers.substr(start, colon - start));
    start = colon + 1;
  }
  if (const std::string max = env_text("NORMJIT_CACHE_MAX_BYTES"); !max.empty()) {
    if (auto bytes = parse_byte_size(max)) {
      options.max_bytes = *bytes;
      options.max_bytes_from_env = true;
    } else {
      options.max_bytes_problem = max_bytes_env_problem();
      // Once per value and process: a command opens its store more than once.
      static std::mutex warned_mutex;
      static std::set<std::string> warned;
      std::lock_guard<std::mutex> lock(warned_mutex);
      if (warned.insert(max).second) warn(options.max_bytes_problem + "; using the default 2G");
    }
  }
  return options;
}

void set_warning_sink(WarningSink sink_function) {
  std::lock_guard lock(sink_mutex());
  sink() = std::move(sink_function);
}

void warn(const std::string& message) {
  WarningSink current;
  {
    std::lock_guard lock(sink_mutex());
    current = sink();
  }
  // Called outside the lock, so that a sink may itself warn or replace the sink.
  if (current) {
    current(message);
  } else {
    std::fprintf(stderr, "normjit: warning: %s\n", message.c_str());
  }
}

}  // namespace normjit::cache
