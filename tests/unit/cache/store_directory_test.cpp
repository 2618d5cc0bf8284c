// Directory trouble: unwritable, full, uncreatable, insecure. Each degrades the store to
// memory-only with exactly one warning, never an exception or a warning per save.
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <ostream>

#include "cache/cache.hpp"
#include "test_util.hpp"

namespace normjit::cache {
namespace {

using testing::entry_path;
using testing::exists;
using testing::names_in;
using testing::same_entry;
using testing::sample_entry;
using testing::ScopedEnv;
using testing::TempDir;
using testing::WarningCapture;
using testing::write_file;

constexpr uid_t kNobody = 65534;

StoreOptions options_for(const std::string& dir) {
  StoreOptions options;
  options.dir = dir;
  return options;
}

size_t entry_count(const std::string& dir) {
  size_t n = 0;
  for (const std::string& name : names_in(dir)) n += name.size() == 64 + 6;  // <key>.entry
  return n;
}

// Permission bits do not stop root, and CI runs as root. There the body runs in a forked child
// that drops to nobody; its gtest failures print from the child and fail its exit status.
// False when the child could not drop privileges (the caller skips).
bool run_unprivileged(const std::function<void()>& body) {
  if (::geteuid() != 0) {
    body();
    return true;
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) {
      ::_exit(77);
    }
    body();
    std::fflush(nullptr);
    ::_exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) return false;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the unprivileged child failed; its messages are above";
  return true;
}

TEST(StoreDirectory, ReadOnlyDirectoryStillServesReadsAndWarnsOnce) {
  const bool ran = run_unprivileged([] {
    TempDir tmp;
    const std::string dir = tmp / "cache";
    const Entry old_entry = sample_entry(0);
    Store(options_for(dir)).save(old_entry);
    ASSERT_EQ(::chmod(dir.c_str(), 0500), 0);

    WarningCapture warnings;
    Store store(options_for(dir));
    EXPECT_FALSE(store.writable());
    ASSERT_EQ(warnings.count(), 1u) << warnings.all();
    EXPECT_NE(warnings.messages()[0].find("not writable"), std::string::npos) << warnings.all();
    EXPECT_TRUE(store.load(old_entry.key)) << "a read-only directory still serves its entries";
    for (int i = 1; i < 4; ++i) {
      store.save(sample_entry(i));
      const auto loaded = store.load(sample_entry(i).key);
      ASSERT_TRUE(loaded) << "memory-only still caches";
      EXPECT_TRUE(same_entry(*loaded, sample_entry(i)));
    }
    EXPECT_EQ(warnings.count(), 1u) << warnings.all();
    EXPECT_EQ(entry_count(dir), 1u);
  });
  if (!ran) GTEST_SKIP() << "running as root and cannot drop to uid " << kNobody;
}

TEST(StoreDirectory, DirectoryThatBecomesReadOnlyDegradesAtTheFirstSave) {
  const bool ran = run_unprivileged([] {
    TempDir tmp;
    const std::string dir = tmp / "cache";
    WarningCapture warnings;
    Store store(options_for(dir));
    ASSERT_TRUE(store.writable());
    ASSERT_EQ(::chmod(dir.c_str(), 0500), 0);
    for (int i = 0; i < 3; ++i) store.save(sample_entry(i));
    EXPECT_FALSE(store.writable());
    ASSERT_EQ(warnings.count(), 1u) << warnings.all();
    EXPECT_NE(warnings.messages()[0].find("Permission denied"), std::string::npos)
        << warnings.all();
    EXPECT_TRUE(store.load(sample_entry(2).key));
    EXPECT_EQ(entry_count(dir), 0u);
  });
  if (!ran) GTEST_SKIP() << "running as root and cannot drop to uid " << kNobody;
}

struct Fault {
  const char* value;
  const char* message;
};
void PrintTo(const Fault& f, std::ostream* out) { *out << f.value; }  // readable test names

class InjectedFault : public ::testing::TestWithParam<Fault> {};

// The write path fails as on a full disk or an unwritable directory (NORMJIT_CACHE_FAULT): one
// warning, memory-only, and no temporary file left behind.
TEST_P(InjectedFault, DegradesToMemoryWithOneWarning) {
  TempDir tmp;
  WarningCapture warnings;
  Store store(options_for(tmp.path()));
  ASSERT_TRUE(store.writable());
  {
    ScopedEnv fault("NORMJIT_CACHE_FAULT", GetParam().value);
    for (int i = 0; i < 5; ++i) store.save(sample_entry(i));
  }
  EXPECT_FALSE(store.writable());
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_NE(warnings.messages()[0].find(GetParam().message), std::string::npos) << warnings.all();
  EXPECT_NE(warnings.messages()[0].find(tmp.path()), std::string::npos) << warnings.all();
  EXPECT_TRUE(names_in(tmp.path()).empty()) << "no entry and no temporary left";
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(store.load(sample_entry(i).key)) << i;
  store.save(sample_entry(9));  // fault gone, but the store stays memory-only: still one warning
  EXPECT_EQ(warnings.count(), 1u);

  Store fresh(options_for(tmp.path()));
  EXPECT_TRUE(fresh.writable());
  fresh.save(sample_entry(0));
  EXPECT_TRUE(exists(entry_path(tmp.path(), sample_entry(0).key)));
}

INSTANTIATE_TEST_SUITE_P(StoreDirectory, InjectedFault,
                         ::testing::Values(Fault{"enospc", "No space left on device"},
                                           Fault{"eacces", "Permission denied"}),
                         [](const auto& info) { return std::string(info.param.value); });

TEST(StoreDirectory, UncreatableDirectoryWarnsOnce) {
  TempDir tmp;
  write_file(tmp / "file", "a file where a directory should be");
  WarningCapture warnings;
  Store store(options_for(tmp / "file/cache"));
  EXPECT_FALSE(store.writable());
  for (int i = 0; i < 3; ++i) store.save(sample_entry(i));
  EXPECT_TRUE(store.load(sample_entry(0).key));
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_NE(warnings.messages()[0].find(tmp / "file/cache"), std::string::npos) << warnings.all();
  EXPECT_NE(warnings.messages()[0].find("Not a directory"), std::string::npos) << warnings.all();
  EXPECT_TRUE(store.list(false).empty());
  EXPECT_EQ(store.gc(0).bytes, 0u);
  EXPECT_EQ(store.clear().entries, 0u);
}

// Another user who can write into the directory could plant a kernel under a valid key:
// such a directory is neither written nor read.
TEST(StoreDirectory, DirectoryWritableByOthersIsRefused) {
  for (mode_t mode : {0777, 0770, 0702}) {
    TempDir tmp;
    const std::string dir = tmp / "cache";
    const Entry planted = sample_entry(0);
    Store(options_for(dir)).save(planted);
    ASSERT_EQ(::chmod(dir.c_str(), mode), 0);
    WarningCapture warnings;
    Store store(options_for(dir));
    EXPECT_FALSE(store.writable());
    ASSERT_EQ(warnings.count(), 1u) << warnings.all();
    char octal[8];
    std::snprintf(octal, sizeof(octal), "%04o", static_cast<unsigned>(mode));
    EXPECT_NE(warnings.messages()[0].find(octal), std::string::npos) << warnings.all();
    EXPECT_NE(warnings.messages()[0].find("chmod go-w"), std::string::npos) << warnings.all();
    EXPECT_FALSE(store.load(planted.key)) << "nothing is read from a refused directory";
    EXPECT_TRUE(store.list(false).empty());
    store.save(sample_entry(1));
    EXPECT_EQ(entry_count(dir), 1u);
    EXPECT_EQ(warnings.count(), 1u);
  }
}

// A sticky directory of ours (like /tmp's mode): others may add files but not replace ours,
// so it is accepted, and an entry that another user planted is rejected by its owner.
TEST(StoreDirectory, StickyDirectoryOfOursIsAcceptedAndForeignEntriesRejected) {
  TempDir tmp;
  const std::string dir = tmp / "cache";
  const Entry entry = sample_entry(0);
  Store(options_for(dir)).save(entry);
  ASSERT_EQ(::chmod(dir.c_str(), 01777), 0);
  WarningCapture warnings;
  {
    Store store(options_for(dir));
    EXPECT_TRUE(store.writable());
    EXPECT_TRUE(store.load(entry.key));
    EXPECT_EQ(warnings.count(), 0u) << warnings.all();
  }
  if (::geteuid() != 0) GTEST_SKIP() << "planting a file of another user needs root (chown)";
  ASSERT_EQ(::chown(entry_path(dir, entry.key).c_str(), kNobody, kNobody), 0);
  Store store(options_for(dir));
  EXPECT_FALSE(store.load(entry.key));
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_NE(warnings.messages()[0].find("belongs to uid 65534"), std::string::npos)
      << warnings.all();
  EXPECT_FALSE(exists(entry_path(dir, entry.key)));
}

TEST(StoreDirectory, DirectoryOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a directory to another user needs root (chown)";
  TempDir tmp;
  const std::string dir = tmp / "cache";
  Store(options_for(dir)).save(sample_entry(0));
  ASSERT_EQ(::chown(dir.c_str(), kNobody, kNobody), 0);
  WarningCapture warnings;
  Store store(options_for(dir));
  EXPECT_FALSE(store.writable());
  EXPECT_FALSE(store.load(sample_entry(0).key));
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_NE(warnings.messages()[0].find("belongs to uid 65534"), std::string::npos)
      << warnings.all();
}

TEST(StoreDirectory, MissingReadOnlyLayerWarnsOnceAndIsSkipped) {
  TempDir tmp;
  WarningCapture warnings;
  StoreOptions options = options_for(tmp / "rw");
  options.readonly = {tmp / "missing"};
  Store store(options);
  EXPECT_TRUE(store.writable());
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_NE(warnings.messages()[0].find("read-only cache layer"), std::string::npos);
  EXPECT_FALSE(store.load(sample_entry(0).key));
  store.save(sample_entry(0));
  EXPECT_TRUE(store.load(sample_entry(0).key));
  EXPECT_EQ(warnings.count(), 1u);
}

}  // namespace
}  // namespace normjit::cache
