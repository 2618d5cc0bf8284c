#include "runtime/insert_only_map.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace normjit::detail {
namespace {

// Every key in one bucket: the probe sequences collide, as a poor hash's would.
struct OneBucket {
  size_t operator()(int) const { return 7; }
};

using Map = InsertOnlyMap<int, std::string, std::hash<int>>;

TEST(InsertOnlyMap, FindsWhatWasInsertedAndNothingElse) {
  Map map;
  EXPECT_EQ(map.find(1), nullptr);
  EXPECT_EQ(map.insert(1, "one"), "one");
  EXPECT_EQ(map.insert(-5, "minus five"), "minus five");
  ASSERT_NE(map.find(1), nullptr);
  EXPECT_EQ(*map.find(1), "one");
  EXPECT_EQ(*map.find(-5), "minus five");
  EXPECT_EQ(map.find(2), nullptr);
  EXPECT_EQ(map.size(), 2u);
}

TEST(InsertOnlyMap, AKeyInsertedAgainKeepsItsFirstValue) {
  Map map;
  const std::string* first = &map.insert(3, "first");
  EXPECT_EQ(&map.insert(3, "second"), first);
  EXPECT_EQ(*map.find(3), "first");
  EXPECT_EQ(map.size(), 1u);
}

TEST(InsertOnlyMap, ValuesStayWhereTheyWereThroughGrowth) {
  Map map;
  std::vector<const std::string*> at;
  constexpr int kKeys = 5000;
  for (int k = 0; k < kKeys; ++k) at.push_back(&map.insert(k, std::to_string(k)));
  for (int k = 0; k < kKeys; ++k) {
    ASSERT_EQ(map.find(k), at[k]) << k;
    ASSERT_EQ(*at[k], std::to_string(k));
  }
  EXPECT_EQ(map.find(kKeys), nullptr);
}

// The memory a map holds grows with its entries, not with their square: every array it made,
// together, under eight slots an entry (the last array more than a quarter full, each one before
// it half the size of the next).
TEST(InsertOnlyMap, ItsArraysTogetherHoldUnderEightSlotsAnEntry) {
  Map map;
  for (int k = 0; k < 100000; ++k) {
    map.insert(k, {});
    if (k >= 16) {
      ASSERT_LT(map.slots_allocated(), 8 * map.size()) << "after " << k + 1;
    }
  }
}

TEST(InsertOnlyMap, CollidingKeysAreFoundPastEachOther) {
  InsertOnlyMap<int, int, OneBucket> map;
  for (int k = 0; k < 100; ++k) {
    map.insert(k, 10 * k);
    // A missing key probes every colliding one, up to an empty slot: half the array at most.
    ASSERT_EQ(map.find(-1), nullptr) << "after " << k + 1;
  }
  for (int k = 0; k < 100; ++k) ASSERT_EQ(*map.find(k), 10 * k);
}

TEST(InsertOnlyMap, ClearDropsEveryValueAndTheMapStillWorks) {
  auto alive = std::make_shared<int>(1);
  InsertOnlyMap<int, std::shared_ptr<int>, std::hash<int>> map;
  for (int k = 0; k < 40; ++k) map.insert(k, alive);
  EXPECT_EQ(alive.use_count(), 41);
  map.clear();
  EXPECT_EQ(alive.use_count(), 1);
  EXPECT_EQ(map.find(0), nullptr);
  EXPECT_EQ(map.size(), 0u);
  for (int k = 0; k < 100; ++k) map.insert(k, std::make_shared<int>(k));  // grows again
  for (int k = 0; k < 100; ++k) ASSERT_EQ(**map.find(k), k);
  EXPECT_EQ(map.find(100), nullptr);
}

// Readers beside a writer that grows the map: a reader that finds a key sees its whole value,
// and a key is found by every reader once its insert() returned. Run under TSan in CI.
TEST(InsertOnlyMap, ReadersBesideTheWriterSeeWholeValues) {
  Map map;
  constexpr int kKeys = 20000;
  std::atomic<int> inserted{0};  // keys below it are in the map
  std::atomic<bool> bad{false};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      int seen = 0;
      while (seen < kKeys) {
        seen = inserted.load(std::memory_order_acquire);
        for (int k = r; k < seen; k += 97) {
          const std::string* value = map.find(k);
          if (!value || *value != std::to_string(k)) bad = true;
        }
        if (const std::string* ahead = map.find(seen)) {
          if (*ahead != std::to_string(seen)) bad = true;
        }
      }
    });
  }
  std::mutex writer;  // insert()s serialized, as callers must
  for (int k = 0; k < kKeys; ++k) {
    const std::lock_guard lock(writer);
    map.insert(k, std::to_string(k));
    inserted.store(k + 1, std::memory_order_release);
  }
  for (auto& reader : readers) reader.join();
  EXPECT_FALSE(bad);
}

}  // namespace
}  // namespace normjit::detail
