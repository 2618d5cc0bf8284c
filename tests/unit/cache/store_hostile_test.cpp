// Hostile cache directories (issue 16): names of entries that are not regular files (FIFOs,
// directories, links to FIFOs, in the writable and in read-only layers), files whose size or
// header claims more than they hold, and maintenance that must report only what it did.
//
// Every test that meets a FIFO or a bogus size runs in a forked child with an alarm and (when
// not sanitized) a cap on its address space: if a fix regresses, the test fails within seconds
// instead of hanging the suite on an open(2) or taking the machine's memory.
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cache/cache.hpp"
#include "test_util.hpp"

namespace normjit::cache {
namespace {

using testing::entry_path;
using testing::exists;
using testing::names_in;
using testing::same_entry;
using testing::sample_entry;
using testing::set_mtime;
using testing::TempDir;
using testing::WarningCapture;
using testing::write_file;

constexpr uid_t kNobody = 65534;
constexpr int kAlarmSeconds = 20;
constexpr uint64_t kHundredGiB = uint64_t{100} << 30;

StoreOptions options_for(const std::string& dir, std::vector<std::string> readonly = {}) {
  StoreOptions options;
  options.dir = dir;
  options.readonly = std::move(readonly);
  return options;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs body in a forked child killed by SIGALRM after kAlarmSeconds. uid >= 0: the child drops
// to that user first (permission bits do not stop root, and CI runs as root). Returns false
// when it could not drop privileges (the caller skips).
bool in_child(const std::function<void()>& body, int uid = -1) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return true;
  }
  if (pid == 0) {
    ::alarm(kAlarmSeconds);
#ifndef NORMJIT_SANITIZED
    // Allocating what a bogus header claims then fails at once (bad_alloc, a test failure)
    // instead of eating the machine's memory.
    const rlimit limit{uint64_t{16} << 30, uint64_t{16} << 30};
    ::setrlimit(RLIMIT_AS, &limit);
#endif
    if (uid >= 0 && ::getuid() != static_cast<uid_t>(uid) &&
        (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(uid)) != 0 ||
         ::setuid(static_cast<uid_t>(uid)) != 0)) {
      ::_exit(77);
    }
    try {
      body();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw " << e.what();
    }
    std::fflush(nullptr);
    ::_exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    ADD_FAILURE() << (WTERMSIG(status) == SIGALRM
                          ? "hung: the child was still blocked after " +
                                std::to_string(kAlarmSeconds) + " s (a FIFO opened for reading?)"
                          : "the child died of signal " + std::to_string(WTERMSIG(status)));
    return true;
  }
  if (WEXITSTATUS(status) == 77) return false;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child failed; its messages are above";
  return true;
}

void make_fifo(const std::string& path) { ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0) << path; }

// A directory with a file in it, so that neither rmdir nor rename can replace it.
void make_full_directory(const std::string& path) {
  ASSERT_EQ(::mkdir(path.c_str(), 0700), 0) << path;
  write_file(path + "/inside", "not an entry");
}

void put_u64(std::string& bytes, size_t offset, uint64_t value) {
  for (int i = 0; i < 8; ++i) bytes[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

// A file with key's entry name whose header is right in every field a listing checks first
// (magic, version, key) and whose lengths add up to `bytes`, the size ftruncate gives it: a
// sparse file that claims 100 GiB and occupies a few KiB.
void write_sparse_entry(const std::string& dir, const std::string& key, uint64_t bytes) {
  std::string header = encode_entry(sample_entry(0)).substr(0, 140);
  header.replace(12, 64, key);
  put_u64(header, 76, bytes - 140);  // metadata
  for (size_t offset : {84, 92, 100}) put_u64(header, offset, 0);
  const std::string path = entry_path(dir, key);
  write_file(path, header);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(bytes)), 0) << std::strerror(errno);
}

// A key no sample entry has, for names that hold no entry.
std::string stray_key(int i) { return sample_entry(100 + i).key; }

// ---------------------------------------------------------------------------------------
// Names that are not regular files

TEST(StoreHostile, FifoNamedLikeAnEntryIsABadEntryNotAHang) {
  in_child([] {
    TempDir tmp;
    const Entry entry = sample_entry(0);
    Store(options_for(tmp.path())).save(sample_entry(1));
    make_fifo(entry_path(tmp.path(), entry.key));
    WarningCapture warnings;
    Store store(options_for(tmp.path()));
    EXPECT_FALSE(store.load(entry.key));
    ASSERT_EQ(warnings.count(), 1u) << warnings.all();
    EXPECT_TRUE(contains(warnings.all(), "is a FIFO")) << warnings.all();
    EXPECT_TRUE(contains(warnings.all(), "removed")) << warnings.all();
    EXPECT_FALSE(exists(entry_path(tmp.path(), entry.key))) << "a name in our directory";

    // The rebuild publishes, and the directory stays in use for every other key.
    store.save(entry);
    EXPECT_TRUE(store.writable());
    const auto loaded = store.load(entry.key);
    ASSERT_TRUE(loaded);
    EXPECT_TRUE(same_entry(*loaded, entry));
    EXPECT_TRUE(store.load(sample_entry(1).key));
  });
}

TEST(StoreHostile, ListAndVerifySkipAFifoAndGoOn) {
  in_child([] {
    TempDir tmp;
    Store(options_for(tmp.path())).save(sample_entry(1));
    make_fifo(entry_path(tmp.path(), stray_key(0)));
    WarningCapture warnings;
    Store store(options_for(tmp.path()));
    for (bool verify : {false, true}) {
      const auto infos = store.list(verify);
      ASSERT_EQ(infos.size(), 2u);
      size_t valid = 0;
      for (const EntryInfo& info : infos) {
        if (info.valid) {
          ++valid;
          continue;
        }
        EXPECT_EQ(info.key, stray_key(0));
        EXPECT_TRUE(contains(info.problem, "FIFO")) << info.problem;
        EXPECT_EQ(info.bytes, 0u);
        EXPECT_EQ(info.disk_bytes, 0u);
      }
      EXPECT_EQ(valid, 1u);
    }
  });
}

// Read-only layers are never changed: the FIFO stays, is reported once, and a symbolic link
// to a FIFO (read-only layers may be built from links) is not followed into it.
TEST(StoreHostile, FifoAndLinkToAFifoInAReadOnlyLayer) {
  in_child([] {
    TempDir tmp;
    const std::string layer = tmp / "layer";
    Store(options_for(layer)).save(sample_entry(2));
    make_fifo(entry_path(layer, sample_entry(0).key));
    make_fifo(tmp / "elsewhere.fifo");
    ASSERT_EQ(
        ::symlink((tmp / "elsewhere.fifo").c_str(), entry_path(layer, sample_entry(1).key).c_str()),
        0);
    WarningCapture warnings;
    Store store(options_for(tmp / "rw", {layer}));
    for (int round = 0; round < 2; ++round) {
      EXPECT_FALSE(store.load(sample_entry(0).key));
      EXPECT_FALSE(store.load(sample_entry(1).key));
      EXPECT_TRUE(store.load(sample_entry(2).key));
    }
    EXPECT_EQ(warnings.count(), 2u) << "once per bad name\n" << warnings.all();
    EXPECT_TRUE(exists(entry_path(layer, sample_entry(0).key)));
    EXPECT_TRUE(exists(entry_path(layer, sample_entry(1).key)));
    size_t fifos = 0;
    for (const EntryInfo& info : store.list(/*verify=*/true))
      fifos += contains(info.problem, "FIFO");
    EXPECT_EQ(fifos, 2u);
  });
}

TEST(StoreHostile, FifoAsTheStatsFileIsSkippedWithOneWarning) {
  in_child([] {
    TempDir tmp;
    make_fifo(tmp / "stats.json");
    WarningCapture warnings;
    {
      Store store(options_for(tmp.path()));
      store.save(sample_entry(0));  // flushes the counters
      store.save(sample_entry(1));
      EXPECT_TRUE(store.load(sample_entry(0).key));
      const StoreStats persisted = store.persisted_stats();
      EXPECT_EQ(persisted.writes, 0u);
    }
    size_t about_stats = 0;
    for (const std::string& w : warnings.messages()) about_stats += contains(w, "stats.json");
    EXPECT_GE(about_stats, 1u) << warnings.all();
    EXPECT_LE(about_stats, 2u) << "one for the writes, one for the read\n" << warnings.all();
    EXPECT_TRUE(contains(warnings.all(), "a FIFO")) << warnings.all();
  });
}

// A directory with files in it holds one key's name: only that key is kept in memory (one
// warning), every other kernel is still published, and eviction is not stopped by it.
TEST(StoreHostile, DirectoryNamedLikeAnEntryBlocksOnlyItsKey) {
  TempDir tmp;
  const Entry blocked = sample_entry(0);
  make_full_directory(entry_path(tmp.path(), blocked.key));
  WarningCapture warnings;
  Store store(options_for(tmp.path()));
  store.save(blocked);
  EXPECT_TRUE(store.writable()) << "one taken name is not an unwritable directory";
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_TRUE(contains(warnings.all(), "cannot publish")) << warnings.all();
  EXPECT_TRUE(contains(warnings.all(), blocked.key)) << warnings.all();
  store.save(blocked);
  EXPECT_EQ(warnings.count(), 1u) << "warned once per key\n" << warnings.all();
  EXPECT_TRUE(store.load(blocked.key)) << "kept in memory";
  for (int i = 1; i < 4; ++i) {
    store.save(sample_entry(i));
    EXPECT_TRUE(exists(entry_path(tmp.path(), sample_entry(i).key))) << i;
  }
  EXPECT_EQ(store.stats().writes, 3u);
  EXPECT_TRUE(exists(entry_path(tmp.path(), blocked.key) + "/inside")) << "not ours to delete";
}

TEST(StoreHostile, EmptyDirectoryNamedLikeAnEntryIsReplaced) {
  TempDir tmp;
  const Entry entry = sample_entry(0);
  ASSERT_EQ(::mkdir(entry_path(tmp.path(), entry.key).c_str(), 0700), 0);
  WarningCapture warnings;
  Store store(options_for(tmp.path()));
  store.save(entry);
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
  Store fresh(options_for(tmp.path()));
  const auto loaded = fresh.load(entry.key);
  ASSERT_TRUE(loaded);
  EXPECT_TRUE(same_entry(*loaded, entry));
}

TEST(StoreHostile, EvictionIsNotStoppedByADirectoryNamedLikeAnEntry) {
  TempDir tmp;
  Store store(options_for(tmp.path()));
  for (int i = 1; i < 4; ++i) {
    store.save(sample_entry(i));
    set_mtime(entry_path(tmp.path(), sample_entry(i).key), -100 * (4 - i));
  }
  make_full_directory(entry_path(tmp.path(), stray_key(0)));
  set_mtime(entry_path(tmp.path(), stray_key(0)), -1000);  // the oldest name of all
  const Removal removal = store.gc(0);
  EXPECT_EQ(removal.entries, 3u);
  EXPECT_TRUE(removal.failures.empty()) << removal.failures.front();
  for (int i = 1; i < 4; ++i) EXPECT_FALSE(exists(entry_path(tmp.path(), sample_entry(i).key)));
  EXPECT_TRUE(exists(entry_path(tmp.path(), stray_key(0)) + "/inside"));
}

// `cache verify --remove` and `cache clear` report a name as removed only when it is gone.
TEST(StoreHostile, RemoveAndClearReportADirectoryThatStays) {
  in_child([] {
    TempDir tmp;
    Store(options_for(tmp.path())).save(sample_entry(1));
    make_full_directory(entry_path(tmp.path(), stray_key(0)));
    ASSERT_EQ(::mkdir(entry_path(tmp.path(), stray_key(1)).c_str(), 0700), 0);  // empty
    make_fifo(entry_path(tmp.path(), stray_key(2)));
    Store store(options_for(tmp.path()));

    std::string why;
    EXPECT_FALSE(store.remove(stray_key(0), &why));
    EXPECT_TRUE(contains(why, "directory")) << why;
    EXPECT_TRUE(store.remove(stray_key(2), &why)) << why;
    EXPECT_FALSE(exists(entry_path(tmp.path(), stray_key(2))));

    const Removal removal = store.clear();
    EXPECT_EQ(removal.entries, 2u) << "the entry and the empty directory";
    EXPECT_EQ(removal.bytes, encode_entry(sample_entry(1)).size());
    ASSERT_EQ(removal.failures.size(), 1u);
    EXPECT_TRUE(contains(removal.failures[0], stray_key(0))) << removal.failures[0];
    EXPECT_TRUE(exists(entry_path(tmp.path(), stray_key(0)) + "/inside"));
    EXPECT_FALSE(exists(entry_path(tmp.path(), stray_key(1))));
  });
}

// ---------------------------------------------------------------------------------------
// Sizes that lie

TEST(StoreHostile, SparseEntryClaimingHundredGiBIsNeverAllocated) {
  in_child([] {
    TempDir tmp;
    const std::string key = stray_key(0);
    write_sparse_entry(tmp.path(), key, kHundredGiB);
    Store(options_for(tmp.path())).save(sample_entry(1));
    WarningCapture warnings;
    Store store(options_for(tmp.path()));
    for (bool verify : {false, true}) {
      const auto infos = store.list(verify);
      ASSERT_EQ(infos.size(), 2u);
      const EntryInfo& bogus = infos[0].key == key ? infos[0] : infos[1];
      EXPECT_FALSE(bogus.valid);
      EXPECT_TRUE(contains(bogus.problem, "implausibly large")) << bogus.problem;
      EXPECT_EQ(bogus.bytes, kHundredGiB) << "the file's size, as ls shows it";
      EXPECT_LT(bogus.disk_bytes, uint64_t{1} << 20) << "what it occupies";
    }
    EXPECT_FALSE(store.load(key));
    EXPECT_TRUE(contains(warnings.all(), "implausibly large")) << warnings.all();
  });
}

// The 100 GiB a sparse file claims are not on the disk: gc and the eviction after a save count
// what is, and remove no valid entry for it.
TEST(StoreHostile, EvictionNeverRemovesValidEntriesForASparseFile) {
  in_child([] {
    TempDir tmp;
    StoreOptions options = options_for(tmp.path());
    uint64_t valid_bytes = 0;
    {
      Store writer(options);
      for (int i = 0; i < 7; ++i) {
        writer.save(sample_entry(i));
        valid_bytes += encode_entry(sample_entry(i)).size();
      }
    }
    write_sparse_entry(tmp.path(), stray_key(0), kHundredGiB);
    set_mtime(entry_path(tmp.path(), stray_key(0)), 3600);  // the most recently used name
    options.max_bytes = valid_bytes + 64 * 1024;
    {
      Store saver(options);
      saver.save(sample_entry(7));  // its first save scans the directory, evicting above the cap
      EXPECT_EQ(saver.stats().evictions, 0u);
    }
    Store store(options);
    const Removal removal = store.gc(options.max_bytes);
    EXPECT_EQ(removal.entries, 0u) << "freed " << removal.bytes;
    for (int i = 0; i < 8; ++i) EXPECT_TRUE(store.load(sample_entry(i).key)) << i;
  });
}

// A file no entry can be (a fully sparse 100 GiB file, which reports no blocks; junk shorter
// than a header) goes before any entry when the cap is exceeded.
TEST(StoreHostile, FilesNoEntryCanBeAreEvictedFirst) {
  in_child([] {
    TempDir tmp;
    StoreOptions options = options_for(tmp.path());
    uint64_t valid_bytes = 0;
    {
      Store writer(options);
      for (int i = 0; i < 3; ++i) {
        writer.save(sample_entry(i));
        set_mtime(entry_path(tmp.path(), sample_entry(i).key), -1000 + i);
        valid_bytes += encode_entry(sample_entry(i)).size();
      }
    }
    const std::string hollow = entry_path(tmp.path(), stray_key(0));
    write_file(hollow, "");
    ASSERT_EQ(::truncate(hollow.c_str(), static_cast<off_t>(kHundredGiB)), 0);
    write_file(entry_path(tmp.path(), stray_key(1)), "junk");
    for (int i = 0; i < 2; ++i) set_mtime(entry_path(tmp.path(), stray_key(i)), 3600);
    Store store(options);
    const Removal removal = store.gc(valid_bytes);
    EXPECT_EQ(removal.entries, 2u);
    EXPECT_FALSE(exists(hollow));
    EXPECT_FALSE(exists(entry_path(tmp.path(), stray_key(1))));
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(store.load(sample_entry(i).key)) << i;
  });
}

// ---------------------------------------------------------------------------------------
// Reports

TEST(StoreHostile, ClearOfAnUnwritableDirectoryReportsEveryEntryItKept) {
  const bool ran = in_child(
      [] {
        TempDir tmp;
        const std::string dir = tmp / "cache";
        {
          Store writer(options_for(dir));
          for (int i = 0; i < 6; ++i) writer.save(sample_entry(i));
        }
        ASSERT_EQ(::chmod(dir.c_str(), 0500), 0);
        WarningCapture warnings;
        Store store(options_for(dir));
        const Removal removal = store.clear();
        EXPECT_EQ(removal.entries, 0u);
        EXPECT_EQ(removal.bytes, 0u);
        ASSERT_EQ(removal.failures.size(), 6u);
        EXPECT_TRUE(contains(removal.failures[0], "Permission denied")) << removal.failures[0];
        const Removal gc = store.gc(0);
        EXPECT_EQ(gc.entries, 0u);
        EXPECT_FALSE(gc.failures.empty());
        EXPECT_EQ(names_in(dir).size(), 7u) << "six entries and stats.json";
      },
      /*uid=*/::geteuid() == 0 ? static_cast<int>(kNobody) : -1);
  if (!ran) GTEST_SKIP() << "running as root and cannot drop to uid " << kNobody;
}

TEST(StoreHostile, LayersThatAreNotReadSayWhy) {
  TempDir tmp;
  const std::string refused = tmp / "refused";
  Store(options_for(refused)).save(sample_entry(0));
  ASSERT_EQ(::chmod(refused.c_str(), 0777), 0);
  write_file(tmp / "file", "a file, not a directory");
  WarningCapture warnings;
  Store store(options_for(refused, {tmp / "missing", tmp / "file", tmp.path()}));
  EXPECT_TRUE(contains(store.directory_problem(), "refusing")) << store.directory_problem();
  const std::vector<std::string> skipped = store.readonly_problems();
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_TRUE(contains(skipped[0], tmp / "missing")) << skipped[0];
  EXPECT_TRUE(contains(skipped[1], "Not a directory")) << skipped[1];

  Store fine(options_for(tmp / "fine"));
  EXPECT_TRUE(fine.directory_problem().empty());
  EXPECT_TRUE(fine.readonly_problems().empty());
}

}  // namespace
}  // namespace normjit::cache
