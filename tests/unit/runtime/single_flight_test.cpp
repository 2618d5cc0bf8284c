#include "runtime/single_flight.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace normjit::detail {
namespace {

using Flights = SingleFlight<std::string, int>;

// Waits (up to 30 s) until `n` callers wait for key's flight.
bool wait_for_waiters(const Flights& flights, const std::string& key, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (flights.waiting(key) < n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// A call that makes key's value once released, counting its calls.
struct Leader {
  std::promise<void> started, release;
  std::atomic<int> calls{0};
  std::shared_future<void> released = release.get_future().share();
};

TEST(SingleFlight, CallersOfAKeyInFlightWaitForItsValueAndMakeNone) {
  Flights flights;
  Leader leader;
  std::atomic<int> follower_calls{0};
  auto first = std::async(std::launch::async, [&] {
    return flights.run("k", [&] {
      leader.calls++;
      leader.started.set_value();
      leader.released.wait();
      return 42;
    });
  });
  leader.started.get_future().wait();
  constexpr int kFollowers = 6;
  std::vector<std::future<int>> followers;
  for (int i = 0; i < kFollowers; ++i) {
    followers.push_back(std::async(std::launch::async, [&] {
      return flights.run("k", [&] {
        follower_calls++;
        return -1;
      });
    }));
  }
  ASSERT_TRUE(wait_for_waiters(flights, "k", kFollowers)) << flights.waiting("k") << " waiting";
  leader.release.set_value();
  EXPECT_EQ(first.get(), 42);
  for (auto& f : followers) EXPECT_EQ(f.get(), 42);
  EXPECT_EQ(leader.calls.load(), 1);
  EXPECT_EQ(follower_calls.load(), 0);
  // The flight is over: a new call makes the value again.
  EXPECT_EQ(flights.waiting("k"), 0u);
  EXPECT_EQ(flights.run("k", [] { return 7; }), 7);
}

TEST(SingleFlight, TheMakersExceptionReachesEveryWaiterAndEndsTheFlight) {
  Flights flights;
  Leader leader;
  auto first = std::async(std::launch::async, [&] {
    return flights.run("k", [&]() -> int {
      leader.started.set_value();
      leader.released.wait();
      throw std::runtime_error("compile failed");
    });
  });
  leader.started.get_future().wait();
  auto second = std::async(std::launch::async, [&] { return flights.run("k", [] { return 1; }); });
  ASSERT_TRUE(wait_for_waiters(flights, "k", 1));
  leader.release.set_value();
  EXPECT_THROW(first.get(), std::runtime_error);
  try {
    second.get();
    FAIL() << "the waiter got a value from a call that threw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "compile failed");
  }
  EXPECT_EQ(flights.run("k", [] { return 3; }), 3);
}

TEST(SingleFlight, OtherKeysDoNotWait) {
  Flights flights;
  Leader leader;
  auto first = std::async(std::launch::async, [&] {
    return flights.run("a", [&] {
      leader.started.set_value();
      leader.released.wait();
      return 1;
    });
  });
  leader.started.get_future().wait();
  EXPECT_EQ(flights.run("b", [] { return 2; }), 2);  // would hang if it waited for "a"
  EXPECT_EQ(flights.waiting("a"), 0u);
  leader.release.set_value();
  EXPECT_EQ(first.get(), 1);
}

}  // namespace
}  // namespace normjit::detail
