// Several processes on one directory, and a writer killed with SIGKILL in the middle of a save.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "cache/cache.hpp"
#include "test_util.hpp"

namespace normjit::cache {
namespace {

using testing::count_temporaries;
using testing::entry_path;
using testing::exists;
using testing::names_in;
using testing::same_entry;
using testing::sample_entry;
using testing::set_mtime;
using testing::TempDir;
using testing::WarningCapture;

StoreOptions options_for(const std::string& dir) {
  StoreOptions options;
  options.dir = dir;
  return options;
}

// Child exit codes: which check failed, so the parent's message says.
constexpr int kWrongEntry = 2, kWarned = 3, kMissAfterSave = 4;

int child_fills(const std::string& dir, int child, int keys) {
  int warnings = 0;
  set_warning_sink([&](const std::string& message) {
    std::fprintf(stderr, "child %d warned: %s\n", child, message.c_str());
    ++warnings;
  });
  Store store(options_for(dir));
  for (int i = 0; i < 24; ++i) {
    // Children overlap on most keys, in different orders, so that saves of one key race.
    const Entry entry = sample_entry((i * 7 + child * 3) % keys, 64 * 1024);
    if (auto existing = store.load(entry.key); existing && !same_entry(*existing, entry)) {
      return kWrongEntry;
    }
    store.save(entry);
    const auto loaded = store.load(entry.key);
    // Nobody evicts (no cap), so the entry must be there, written by us or by another child.
    if (!loaded) return kMissAfterSave;
    if (!same_entry(*loaded, entry)) return kWrongEntry;
  }
  return warnings == 0 ? 0 : kWarned;
}

TEST(StoreProcesses, ConcurrentProcessesEndWithValidEntries) {
  TempDir tmp;
  const std::string dir = tmp / "cache";
  constexpr int kChildren = 4, kKeys = 10;
  std::fflush(nullptr);
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(child_fills(dir, c, kKeys));
    ASSERT_GT(pid, 0);
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status)) << "child " << pid << " died of signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "child " << pid << " (2: wrong entry, 3: warned, "
                                      << "4: miss right after its own save)";
  }
  WarningCapture warnings;
  Store store(options_for(dir));
  const auto infos = store.list(/*verify=*/true);
  EXPECT_EQ(infos.size(), static_cast<size_t>(kKeys));
  for (const EntryInfo& info : infos) EXPECT_TRUE(info.valid) << info.path << ": " << info.problem;
  EXPECT_EQ(count_temporaries(dir), 0u);
  EXPECT_EQ(store.persisted_stats().writes, static_cast<uint64_t>(kChildren * 24))
      << "every child's counters reached stats.json";
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
}

// The writer pauses after half the temporary file (NORMJIT_CACHE_TEST_PAUSE_WRITE) and is
// killed there: no entry may appear, the temporary is swept once stale, and saving works.
TEST(StoreProcesses, WriterKilledMidWriteLeavesNoEntry) {
  TempDir tmp;
  const std::string dir = tmp.path();
  const Entry entry = sample_entry(5, 512 * 1024);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("NORMJIT_CACHE_TEST_PAUSE_WRITE", "30", 1);
    Store(options_for(dir)).save(entry);
    ::_exit(0);  // only reached if the pause did not happen
  }
  ASSERT_GT(pid, 0);
  // Wait for the half-written temporary to appear.
  std::string temp;
  for (int i = 0; i < 500 && temp.empty(); ++i) {
    for (const std::string& name : names_in(dir)) {
      struct stat st {};
      if (name.rfind(".tmp-" + entry.key + "-", 0) == 0 &&
          ::stat((dir + "/" + name).c_str(), &st) == 0 && st.st_size > 0) {
        temp = dir + "/" + name;
      }
    }
    if (temp.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_FALSE(temp.empty()) << "the writer never left a temporary file";
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer finished before it was killed";

  EXPECT_FALSE(exists(entry_path(dir, entry.key)));
  WarningCapture warnings;
  {
    Store store(options_for(dir));
    EXPECT_FALSE(store.load(entry.key));
    EXPECT_TRUE(exists(temp)) << "a young temporary may belong to a live writer: kept";
  }
  set_mtime(temp, -2 * kStaleTemporarySeconds);
  Store store(options_for(dir));
  EXPECT_FALSE(exists(temp)) << "opening a store sweeps temporaries older than an hour";
  store.save(entry);
  const auto loaded = store.load(entry.key);
  ASSERT_TRUE(loaded);
  EXPECT_TRUE(same_entry(*loaded, entry));
  EXPECT_EQ(count_temporaries(dir), 0u);
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
}

}  // namespace
}  // namespace normjit::cache
