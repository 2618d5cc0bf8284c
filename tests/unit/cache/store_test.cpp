// Store: publishing, loading, bad entries, layers, LRU, stats and threads (cache/store.cpp).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <ostream>
#include <random>
#include <thread>

#include "cache/cache.hpp"
#include "normjit/error.hpp"
#include "test_util.hpp"

namespace normjit::cache {
namespace {

using testing::count_temporaries;
using testing::entry_path;
using testing::exists;
using testing::mtime_of;
using testing::names_in;
using testing::now_seconds;
using testing::read_file;
using testing::same_entry;
using testing::sample_entry;
using testing::set_mtime;
using testing::TempDir;
using testing::WarningCapture;
using testing::write_file;

StoreOptions options_for(const std::string& dir, std::vector<std::string> readonly = {}) {
  StoreOptions options;
  options.dir = dir;
  options.readonly = std::move(readonly);
  return options;
}

TEST(Store, SavedEntryLoadsBackAndCounts) {
  TempDir tmp;
  WarningCapture warnings;
  Store store(options_for(tmp.path()));
  ASSERT_TRUE(store.writable());
  const Entry entry = sample_entry(0);
  EXPECT_FALSE(store.load(entry.key));
  store.save(entry);
  const auto loaded = store.load(entry.key);
  ASSERT_TRUE(loaded);
  EXPECT_TRUE(same_entry(*loaded, entry));
  EXPECT_EQ(read_file(entry_path(tmp.path(), entry.key)), encode_entry(entry));
  EXPECT_EQ(count_temporaries(tmp.path()), 0u);
  const StoreStats stats = store.stats();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.writes, 1u);
  EXPECT_EQ(stats.bad_entries, 0u);
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
}

TEST(Store, MalformedKeysMissWithoutTouchingTheDisk) {
  TempDir tmp;
  Store store(options_for(tmp.path()));
  testing::write_file(tmp / "..entry", "x");
  EXPECT_FALSE(store.load("."));
  EXPECT_FALSE(store.load("../../etc/passwd"));
  EXPECT_FALSE(store.load(std::string(64, 'A')));  // keys are lower-case hex
  EXPECT_EQ(store.stats().misses, 3u);
  EXPECT_EQ(store.stats().bad_entries, 0u);
}

TEST(Store, SaveRefusesAKeyThatIsNotTheHashOfItsPreimage) {
  TempDir tmp;
  Store store(options_for(tmp.path()));
  Entry entry = sample_entry(0);
  entry.key = sample_entry(1).key;
  EXPECT_THROW(store.save(entry), normjit::Error);
  entry.key = "abc";
  EXPECT_THROW(store.save(entry), normjit::Error);
  EXPECT_TRUE(names_in(tmp.path()).empty());
}

TEST(Store, CreatesMissingDirectoriesPrivate) {
  TempDir tmp;
  const mode_t old_umask = ::umask(022);
  const std::string dir = tmp / "a/b/cache";
  {
    Store store(options_for(dir));
    EXPECT_TRUE(store.writable());
    store.save(sample_entry(0));
  }
  ::umask(old_umask);
  for (const std::string& path : {tmp / "a", tmp / "a/b", dir}) {
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_mode & 07777, 0700u) << path;
  }
  EXPECT_TRUE(exists(entry_path(dir, sample_entry(0).key)));
}

// Keys never involve paths: an entry written through a relative path after one chdir is found
// through another path, and a copy of the file in another directory serves as well.
TEST(Store, KeysDoNotDependOnPathsOrTheWorkingDirectory) {
  TempDir tmp;
  const std::filesystem::path cwd = std::filesystem::current_path();
  const Entry entry = sample_entry(4);
  std::filesystem::create_directories(tmp / "one/two");
  std::filesystem::current_path(tmp / "one");
  {
    Store store(options_for("two/../cache"));  // tmp/one/cache
    // The store keeps a handle on its directory: a chdir after construction changes nothing.
    std::filesystem::current_path(tmp / "one/two");
    store.save(entry);
    EXPECT_TRUE(store.load(entry.key));
  }
  std::filesystem::current_path(cwd);
  {
    Store store(options_for(tmp / "one/cache"));
    EXPECT_TRUE(store.load(entry.key));
  }
  std::filesystem::create_directories(tmp / "elsewhere");
  std::filesystem::copy_file(entry_path(tmp / "one/cache", entry.key),
                             entry_path(tmp / "elsewhere", entry.key));
  ::chmod((tmp / "elsewhere").c_str(), 0700);
  Store copy(options_for(tmp / "elsewhere"));
  const auto loaded = copy.load(entry.key);
  ASSERT_TRUE(loaded);
  EXPECT_TRUE(same_entry(*loaded, entry));
}

struct Corruption {
  std::string name;
  std::function<void(const std::string& path, const std::string& dir)> apply;
};
void PrintTo(const Corruption& c, std::ostream* out) { *out << c.name; }  // readable test names

// Every kind of bad entry is a miss with exactly one warning, is removed from the writable
// layer, and the rebuilt entry then loads: rebuilt once, no loop.
class BadEntry : public ::testing::TestWithParam<Corruption> {};

TEST_P(BadEntry, IsAMissWithOneWarningAndIsRebuiltOnce) {
  TempDir tmp;
  const Entry entry = sample_entry(7);
  {
    Store writer(options_for(tmp.path()));
    writer.save(entry);
    writer.save(sample_entry(8));
  }
  const std::string path = entry_path(tmp.path(), entry.key);
  GetParam().apply(path, tmp.path());

  WarningCapture warnings;
  Store store(options_for(tmp.path()));
  EXPECT_FALSE(store.load(entry.key));
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_NE(warnings.messages()[0].find(entry.key), std::string::npos) << warnings.all();
  EXPECT_FALSE(exists(path)) << "a bad entry of the writable layer is removed";
  EXPECT_EQ(store.stats().bad_entries, 1u);
  EXPECT_EQ(store.stats().misses, 1u);

  EXPECT_FALSE(store.load(entry.key));  // now a plain miss
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();

  store.save(entry);
  const auto rebuilt = store.load(entry.key);
  ASSERT_TRUE(rebuilt);
  EXPECT_TRUE(same_entry(*rebuilt, entry));
  EXPECT_TRUE(store.load(sample_entry(8).key)) << "the good neighbour is untouched";
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();
}

void flip_bit(const std::string& path, size_t offset) {
  std::string bytes = read_file(path);
  bytes[offset % bytes.size()] ^= 0x10;
  write_file(path, bytes);
}

INSTANTIATE_TEST_SUITE_P(Store, BadEntry,
                         ::testing::Values(Corruption{"ZeroLength",
                                                      [](const std::string& p, const std::string&) {
                                                        write_file(p, "");
                                                      }},
                                           Corruption{"Truncated",
                                                      [](const std::string& p, const std::string&) {
                                                        const std::string bytes = read_file(p);
                                                        write_file(
                                                            p, bytes.substr(0, bytes.size() - 100));
                                                      }},
                                           Corruption{"HeaderOnly",
                                                      [](const std::string& p, const std::string&) {
                                                        write_file(p, read_file(p).substr(0, 140));
                                                      }},
                                           Corruption{"FlippedCubinBit",
                                                      [](const std::string& p, const std::string&) {
                                                        flip_bit(p, 1500);
                                                      }},
                                           Corruption{"FlippedLengthBit",
                                                      [](const std::string& p, const std::string&) {
                                                        flip_bit(p, 93);
                                                      }},
                                           Corruption{"FlippedChecksumBit",
                                                      [](const std::string& p, const std::string&) {
                                                        flip_bit(p, 120);
                                                      }},
                                           Corruption{"WrongMagic",
                                                      [](const std::string& p, const std::string&) {
                                                        flip_bit(p, 2);
                                                      }},
                                           Corruption{"WrongVersion",
                                                      [](const std::string& p, const std::string&) {
                                                        std::string bytes = read_file(p);
                                                        bytes[8] =
                                                            static_cast<char>(kFormatVersion + 1);
                                                        write_file(p, bytes);
                                                      }},
                                           Corruption{
                                               "AnotherKeysFileRenamedOntoIt",
                                               [](const std::string& p, const std::string& dir) {
                                                 std::filesystem::rename(
                                                     entry_path(dir, sample_entry(8).key), p);
                                                 std::filesystem::copy_file(
                                                     p, entry_path(dir, sample_entry(8).key));
                                               }},
                                           Corruption{"AnotherKeysPayload",
                                                      [](const std::string& p, const std::string&) {
                                                        Entry forged = sample_entry(8);
                                                        forged.key = sample_entry(7).key;
                                                        write_file(p, encode_entry(forged));
                                                      }},
                                           Corruption{"Garbage",
                                                      [](const std::string& p, const std::string&) {
                                                        write_file(p, std::string(5000, '\xff'));
                                                      }},
                                           Corruption{"Directory",
                                                      [](const std::string& p, const std::string&) {
                                                        std::filesystem::remove(p);
                                                        std::filesystem::create_directory(p);
                                                      }},
                                           Corruption{
                                               "Symlink",
                                               [](const std::string& p, const std::string& dir) {
                                                 std::filesystem::remove(p);
                                                 std::filesystem::create_symlink(
                                                     entry_path(dir, sample_entry(8).key), p);
                                               }}),
                         [](const ::testing::TestParamInfo<Corruption>& info) {
                           return info.param.name;
                         });

TEST(Store, ReadOnlyLayerServesAndIsNeverWritten) {
  TempDir tmp;
  const std::string writable = tmp / "rw", readonly = tmp / "ro";
  const Entry shared = sample_entry(1), mine = sample_entry(2);
  {
    Store prewarm(options_for(readonly));
    prewarm.save(shared);
  }
  set_mtime(entry_path(readonly, shared.key), -7200);
  const auto before = names_in(readonly);
  const std::string bytes_before = read_file(entry_path(readonly, shared.key));

  WarningCapture warnings;
  Store store(options_for(writable, {readonly}));
  const auto loaded = store.load(shared.key);
  ASSERT_TRUE(loaded);
  EXPECT_TRUE(same_entry(*loaded, shared));
  store.save(mine);
  EXPECT_TRUE(store.load(mine.key));
  EXPECT_TRUE(exists(entry_path(writable, mine.key)));
  store.discard(shared.key);
  store.gc(0);
  store.clear();
  store.sweep_temporaries(0);

  EXPECT_EQ(names_in(readonly), before);
  EXPECT_EQ(read_file(entry_path(readonly, shared.key)), bytes_before);
  EXPECT_LE(mtime_of(entry_path(readonly, shared.key)), now_seconds() - 7000)
      << "a read-only layer's entries are not even stamped";
  EXPECT_FALSE(exists(entry_path(writable, mine.key))) << "clear() empties the writable layer";
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
}

TEST(Store, WritableLayerIsSearchedFirst) {
  TempDir tmp;
  const std::string writable = tmp / "rw", readonly = tmp / "ro";
  const Entry entry = sample_entry(1);
  for (const std::string& dir : {writable, readonly}) Store(options_for(dir)).save(entry);
  set_mtime(entry_path(writable, entry.key), -7200);
  Store store(options_for(writable, {readonly}));
  ASSERT_TRUE(store.load(entry.key));
  EXPECT_GE(mtime_of(entry_path(writable, entry.key)), now_seconds() - 60)
      << "the writable layer's copy served the load (and was stamped)";

  // A bad copy in the writable layer falls through to the read-only one.
  write_file(entry_path(writable, entry.key), "garbage");
  WarningCapture warnings;
  const auto loaded = store.load(entry.key);
  ASSERT_TRUE(loaded);
  EXPECT_TRUE(same_entry(*loaded, entry));
  EXPECT_EQ(warnings.count(), 1u);
  const auto infos = store.list(/*verify=*/true);
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_TRUE(infos[0].readonly);
  EXPECT_EQ(infos[0].layer, readonly);
}

// A directory named twice (with a trailing slash, twice in NORMJIT_CACHE_READONLY, or the
// writable one again) is one layer: a listing counted its entries once for each name.
TEST(Store, ADirectoryUnderSeveralNamesIsOneLayer) {
  TempDir tmp;
  const std::string writable = tmp / "rw", readonly = tmp / "ro";
  Store(options_for(writable)).save(sample_entry(1));
  Store(options_for(readonly)).save(sample_entry(2));
  Store store(options_for(writable, {writable + "/", readonly, readonly + "/", readonly}));
  const auto infos = store.list(/*verify=*/true);
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_FALSE(infos[0].readonly);
  EXPECT_TRUE(infos[1].readonly);
  EXPECT_EQ(infos[1].layer, readonly);
  EXPECT_TRUE(store.load(sample_entry(2).key));
  EXPECT_EQ(store.searched_readonly(), std::vector<std::string>{readonly});
}

// A second look before compiling (the engine's, after its counted miss) is not another lookup:
// a prewarmed kernel used to count two misses.
TEST(Store, AnUncountedLoadLeavesTheCounters) {
  TempDir tmp;
  Store store(options_for(tmp / "c"));
  const Entry entry = sample_entry(1);
  EXPECT_FALSE(store.load(entry.key, /*counted=*/false));
  EXPECT_EQ(store.stats().misses, 0u);
  EXPECT_FALSE(store.load(entry.key));
  EXPECT_EQ(store.stats().misses, 1u);
  store.save(entry);
  EXPECT_TRUE(store.load(entry.key, /*counted=*/false));
  EXPECT_EQ(store.stats().hits, 0u);
  EXPECT_TRUE(store.load(entry.key));
  EXPECT_EQ(store.stats().hits, 1u);
}

TEST(Store, BadEntryInAReadOnlyLayerWarnsOnceAndStays) {
  TempDir tmp;
  const std::string readonly = tmp / "ro";
  const Entry entry = sample_entry(3);
  Store(options_for(readonly)).save(entry);
  flip_bit(entry_path(readonly, entry.key), 1000);

  WarningCapture warnings;
  Store store(options_for(tmp / "rw", {readonly}));
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(store.load(entry.key));
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_TRUE(exists(entry_path(readonly, entry.key)));
  EXPECT_EQ(store.stats().bad_entries, 1u);
  EXPECT_EQ(store.stats().misses, 5u);
  store.save(entry);  // the rebuild goes to the writable layer, which wins from now on
  EXPECT_TRUE(store.load(entry.key));
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();
}

// The driver rejected a cubin: discard() must make the next load miss, in every layer.
TEST(Store, DiscardMakesTheNextLoadMiss) {
  TempDir tmp;
  const Entry in_ro = sample_entry(1), in_rw = sample_entry(2);
  Store(options_for(tmp / "ro")).save(in_ro);
  Store store(options_for(tmp / "rw", {tmp / "ro"}));
  store.save(in_rw);
  ASSERT_TRUE(store.load(in_ro.key));
  ASSERT_TRUE(store.load(in_rw.key));
  store.discard(in_ro.key);
  store.discard(in_rw.key);
  EXPECT_FALSE(store.load(in_ro.key));
  EXPECT_FALSE(store.load(in_rw.key));
  EXPECT_FALSE(exists(entry_path(tmp / "rw", in_rw.key)));
  EXPECT_TRUE(exists(entry_path(tmp / "ro", in_ro.key)));
  store.save(in_ro);
  EXPECT_TRUE(store.load(in_ro.key)) << "the rebuilt entry in the writable layer serves";
}

TEST(Store, LoadStampsLastUseAtMostOncePerMinute) {
  TempDir tmp;
  const Entry entry = sample_entry(0);
  Store store(options_for(tmp.path()));
  store.save(entry);
  const std::string path = entry_path(tmp.path(), entry.key);
  set_mtime(path, -3600);
  ASSERT_TRUE(store.load(entry.key));
  EXPECT_GE(mtime_of(path), now_seconds() - 5) << "an hour-old stamp is renewed";
  set_mtime(path, -10);
  const int64_t recent = mtime_of(path);
  ASSERT_TRUE(store.load(entry.key));
  EXPECT_EQ(mtime_of(path), recent) << "a stamp younger than a minute is left alone";
}

TEST(Store, EvictsLeastRecentlyUsedFirst) {
  TempDir tmp;
  std::vector<Entry> entries;
  for (int i = 0; i < 4; ++i) entries.push_back(sample_entry(i));
  const uint64_t entry_bytes = encode_entry(entries[0]).size();
  StoreOptions options = options_for(tmp.path());
  options.max_bytes = 3 * entry_bytes + entry_bytes / 2;
  Store store(options);
  for (int i = 0; i < 3; ++i) store.save(entries[i]);
  EXPECT_EQ(store.stats().evictions, 0u);
  // Created 0, 1, 2 (oldest first); then 0 is used again, so 1 is the least recently used.
  set_mtime(entry_path(tmp.path(), entries[0].key), -300);
  set_mtime(entry_path(tmp.path(), entries[1].key), -200);
  set_mtime(entry_path(tmp.path(), entries[2].key), -100);
  ASSERT_TRUE(store.load(entries[0].key));
  store.save(entries[3]);
  EXPECT_EQ(store.stats().evictions, 1u);
  EXPECT_FALSE(exists(entry_path(tmp.path(), entries[1].key)));
  for (int i : {0, 2, 3}) EXPECT_TRUE(exists(entry_path(tmp.path(), entries[i].key))) << i;
}

TEST(Store, SaveKeepsTheEntryItJustWroteEvenAboveTheCap) {
  TempDir tmp;
  StoreOptions options = options_for(tmp.path());
  options.max_bytes = 1;
  Store store(options);
  store.save(sample_entry(0));
  store.save(sample_entry(1));
  EXPECT_FALSE(store.load(sample_entry(0).key));
  EXPECT_TRUE(store.load(sample_entry(1).key));
  EXPECT_EQ(store.stats().evictions, 1u);
}

TEST(Store, GcAndClearTouchOnlyEntries) {
  TempDir tmp;
  Store store(options_for(tmp.path()));
  std::vector<uint64_t> bytes;
  for (int i = 0; i < 4; ++i) {
    store.save(sample_entry(i));
    set_mtime(entry_path(tmp.path(), sample_entry(i).key), -100 * (4 - i));  // 0 is the oldest
    bytes.push_back(encode_entry(sample_entry(i)).size());
  }
  write_file(tmp / "notes.txt", "not ours");
  EXPECT_EQ(store.gc(bytes[2] + bytes[3]).bytes, bytes[0] + bytes[1]);
  EXPECT_FALSE(exists(entry_path(tmp.path(), sample_entry(0).key)));
  EXPECT_FALSE(exists(entry_path(tmp.path(), sample_entry(1).key)));
  EXPECT_TRUE(exists(entry_path(tmp.path(), sample_entry(2).key)));
  EXPECT_TRUE(exists(entry_path(tmp.path(), sample_entry(3).key)));
  EXPECT_EQ(store.stats().evictions, 2u);
  EXPECT_EQ(store.gc(bytes[2] + bytes[3]).bytes, 0u) << "already under the cap";
  EXPECT_EQ(store.clear().bytes, bytes[2] + bytes[3]);
  EXPECT_TRUE(store.list(false).empty());
  EXPECT_TRUE(exists(tmp / "notes.txt"));
  EXPECT_TRUE(exists(tmp / "stats.json")) << "clear() removes entries, not the counters";
}

TEST(Store, SweepsOnlyStaleTemporaries) {
  TempDir tmp;
  const std::string key = sample_entry(0).key;
  const std::string old_temp = tmp / (".tmp-" + key + "-123-00000000deadbeef");
  const std::string new_temp = tmp / (".tmp-" + key + "-124-00000000deadbeef");
  write_file(old_temp, "half an entry");
  write_file(new_temp, "being written");
  write_file(tmp / "tmp-not-ours", "x");
  set_mtime(old_temp, -2 * kStaleTemporarySeconds);
  set_mtime(tmp / "tmp-not-ours", -2 * kStaleTemporarySeconds);
  {
    Store store(options_for(tmp.path()));  // construction sweeps what is older than an hour
    EXPECT_FALSE(exists(old_temp));
    EXPECT_TRUE(exists(new_temp));
    EXPECT_EQ(store.sweep_temporaries(60).bytes, 0u);
    const Removal swept = store.sweep_temporaries(0);
    EXPECT_EQ(swept.bytes, std::string("being written").size());
    EXPECT_TRUE(swept.failures.empty());
  }
  EXPECT_FALSE(exists(new_temp));
  EXPECT_TRUE(exists(tmp / "tmp-not-ours"));
}

TEST(Store, ListReportsLayersMetadataAndVerifies) {
  TempDir tmp;
  Store(options_for(tmp / "ro")).save(sample_entry(1));
  Store store(options_for(tmp / "rw", {tmp / "ro"}));
  store.save(sample_entry(2));
  store.save(sample_entry(3));
  // A flipped cubin bit passes the cheap checks of list(false) but not list(true).
  flip_bit(entry_path(tmp / "rw", sample_entry(3).key), 1000);

  auto infos = store.list(/*verify=*/false);
  ASSERT_EQ(infos.size(), 3u);
  EXPECT_FALSE(infos[0].readonly);
  EXPECT_FALSE(infos[1].readonly);
  EXPECT_TRUE(infos[2].readonly);
  EXPECT_EQ(infos[2].key, sample_entry(1).key);
  EXPECT_EQ(infos[2].layer, tmp / "ro");
  EXPECT_EQ(infos[2].path, entry_path(tmp / "ro", sample_entry(1).key));
  EXPECT_EQ(infos[2].metadata, sample_entry(1).metadata);
  EXPECT_EQ(infos[2].preimage, sample_entry(1).preimage);
  EXPECT_EQ(infos[2].bytes, encode_entry(sample_entry(1)).size());
  EXPECT_GE(infos[2].last_use, now_seconds() - 60);
  for (const EntryInfo& info : infos) EXPECT_TRUE(info.valid) << info.path << ": " << info.problem;

  infos = store.list(/*verify=*/true);
  size_t bad = 0;
  for (const EntryInfo& info : infos) {
    if (info.valid) continue;
    ++bad;
    EXPECT_EQ(info.key, sample_entry(3).key);
    EXPECT_NE(info.problem.find("checksum"), std::string::npos) << info.problem;
  }
  EXPECT_EQ(bad, 1u);
}

TEST(Store, MemoryOnlyStoreKeepsEntriesInMemory) {
  WarningCapture warnings;
  Store store(StoreOptions{});
  EXPECT_FALSE(store.writable());
  const Entry entry = sample_entry(0);
  store.save(entry);
  const auto loaded = store.load(entry.key);
  ASSERT_TRUE(loaded);
  EXPECT_TRUE(same_entry(*loaded, entry));
  store.discard(entry.key);
  EXPECT_FALSE(store.load(entry.key));
  EXPECT_TRUE(store.list(true).empty());
  EXPECT_EQ(store.stats().writes, 0u) << "nothing was published to disk";
  EXPECT_EQ(warnings.count(), 0u) << "memory-only by request is not a problem";
}

TEST(Store, StatsPersistAcrossStores) {
  TempDir tmp;
  {
    Store store(options_for(tmp.path()));
    EXPECT_FALSE(store.load(sample_entry(0).key));
    EXPECT_FALSE(store.load(sample_entry(1).key));
    store.save(sample_entry(0));
    EXPECT_TRUE(store.load(sample_entry(0).key));
  }
  {
    Store store(options_for(tmp.path()));
    EXPECT_TRUE(store.load(sample_entry(0).key));
  }
  Store store(options_for(tmp.path()));
  StoreStats total = store.persisted_stats();
  EXPECT_EQ(total.hits, 2u);
  EXPECT_EQ(total.misses, 2u);
  EXPECT_EQ(total.writes, 1u);
  EXPECT_EQ(total.bad_entries, 0u);

  // A torn or foreign stats file restarts the counters; it never breaks the store.
  write_file(tmp / "stats.json", "{\"hits\": tor");
  EXPECT_EQ(store.persisted_stats().hits, 0u);
  store.save(sample_entry(1));
  total = store.persisted_stats();
  EXPECT_EQ(total.writes, 1u);
  EXPECT_EQ(total.hits, 0u);
}

// Readers hold one fd and read the whole entry: an eviction that unlinks the name in the
// middle never hands a reader a partial or foreign entry.
TEST(Store, LoadsRunSafelyWhileAnotherThreadEvicts) {
  TempDir tmp;
  WarningCapture warnings;
  std::vector<Entry> entries;
  for (int i = 0; i < 6; ++i) entries.push_back(sample_entry(i, 128 * 1024));
  Store store(options_for(tmp.path()));
  std::atomic<bool> done{false};
  std::atomic<int> hits{0}, wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937 random(t);
      while (!done) {
        const Entry& want = entries[random() % entries.size()];
        if (auto got = store.load(want.key)) {
          ++hits;
          if (!same_entry(*got, want)) ++wrong;
        }
        std::this_thread::yield();  // leave the writer a core on a 2-core machine
      }
    });
  }
  for (int round = 0; round < 25; ++round) {
    for (const Entry& entry : entries) store.save(entry);
    store.gc(0);
  }
  done = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(hits, 0) << "the readers never overlapped the writer; the test proved nothing";
  EXPECT_EQ(store.stats().bad_entries, 0u);
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
}

TEST(Store, ThreadsSaveAndLoadDifferentAndSameKeysInParallel) {
  TempDir tmp;
  WarningCapture warnings;
  Store store(options_for(tmp.path()));
  const Entry shared = sample_entry(100);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4; ++i) {
        const Entry own = sample_entry(t * 10 + i);
        store.save(own);
        store.save(shared);
        auto a = store.load(own.key);
        auto b = store.load(shared.key);
        if (!a || !same_entry(*a, own) || !b || !same_entry(*b, shared)) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  const auto infos = store.list(/*verify=*/true);
  EXPECT_EQ(infos.size(), 8u * 4u + 1u);
  for (const EntryInfo& info : infos) EXPECT_TRUE(info.valid) << info.problem;
  EXPECT_EQ(count_temporaries(tmp.path()), 0u);
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
}

TEST(ByteSize, ParsesCountsAndBinarySuffixes) {
  EXPECT_EQ(parse_byte_size("0"), 0u);
  EXPECT_EQ(parse_byte_size("1048576"), 1048576u);
  EXPECT_EQ(parse_byte_size("512K"), 512u << 10);
  EXPECT_EQ(parse_byte_size("64m"), 64u << 20);
  EXPECT_EQ(parse_byte_size("2G"), uint64_t{2} << 30);
  EXPECT_EQ(parse_byte_size("2GiB"), uint64_t{2} << 30);
  EXPECT_EQ(parse_byte_size("1TB"), uint64_t{1} << 40);
  EXPECT_EQ(parse_byte_size("18446744073709551615"), UINT64_MAX);
  // Exactly as given: spaces around a count are refused, not trimmed.
  for (const char* bad : {"", "G", "-1", "1.5G", "2X", "2 G", "abc", "18446744073709551616",
                          "17179869184G", " 5", "5 ", " 1TB ", "\t5"}) {
    EXPECT_FALSE(parse_byte_size(bad)) << bad;
  }
}

TEST(StoreOptions, FromEnvironment) {
  using testing::ScopedEnv;
  WarningCapture warnings;
  {
    ScopedEnv dir("NORMJIT_CACHE_DIR", "/x/cache");
    ScopedEnv ro("NORMJIT_CACHE_READONLY", "/ro/a::/ro/b:");
    ScopedEnv max("NORMJIT_CACHE_MAX_BYTES", "64M");
    const StoreOptions options = StoreOptions::from_env();
    EXPECT_EQ(options.dir, "/x/cache");
    EXPECT_EQ(options.readonly, (std::vector<std::string>{"/ro/a", "/ro/b"}));
    EXPECT_EQ(options.max_bytes, uint64_t{64} << 20);
  }
  {
    ScopedEnv dir("NORMJIT_CACHE_DIR", std::nullopt);
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    ScopedEnv max("NORMJIT_CACHE_MAX_BYTES", std::nullopt);
    EXPECT_EQ(StoreOptions::from_env().dir, "/xdg/normjit");
    EXPECT_EQ(StoreOptions::from_env().max_bytes, kDefaultMaxBytes);
  }
  {
    ScopedEnv dir("NORMJIT_CACHE_DIR", std::nullopt);
    ScopedEnv xdg("XDG_CACHE_HOME", std::nullopt);
    ScopedEnv home("HOME", "/home/someone");
    EXPECT_EQ(StoreOptions::from_env().dir, "/home/someone/.cache/normjit");
  }
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
  {
    ScopedEnv max("NORMJIT_CACHE_MAX_BYTES", "lots");
    EXPECT_EQ(StoreOptions::from_env().max_bytes, kDefaultMaxBytes);
  }
  ASSERT_EQ(warnings.count(), 1u);
  EXPECT_NE(warnings.messages()[0].find("NORMJIT_CACHE_MAX_BYTES='lots'"), std::string::npos);
  {
    // Read exactly as given, like --max-bytes: a count with spaces is warned about, not trimmed.
    ScopedEnv max("NORMJIT_CACHE_MAX_BYTES", " 64M");
    EXPECT_EQ(StoreOptions::from_env().max_bytes, kDefaultMaxBytes);
  }
  ASSERT_EQ(warnings.count(), 2u);
  EXPECT_NE(warnings.messages()[1].find("NORMJIT_CACHE_MAX_BYTES=' 64M'"), std::string::npos);
}

}  // namespace
}  // namespace normjit::cache
