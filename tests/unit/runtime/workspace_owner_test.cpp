#include "runtime/workspace_owner.hpp"

#include <gtest/gtest.h>

#include <thread>

namespace normjit::detail {
namespace {

// The owner of a split kernel's workspace in another thread than this one.
WorkspaceOwner owner_in_another_thread(CUstream stream, unsigned long long capture) {
  WorkspaceOwner out{};
  std::thread([&] { out = workspace_owner(stream, capture); }).join();
  return out;
}

// CU_STREAM_PER_THREAD is a different stream in each thread: two threads launching on it may
// run at once, so they must not share the counters of one workspace (a grid barrier counted by
// both: a hang or wrong sums). Every other stream is the same stream in every thread.
TEST(WorkspaceOwner, ThePerThreadStreamIsOneStreamAThread) {
  EXPECT_EQ(workspace_owner(CU_STREAM_PER_THREAD, 0), workspace_owner(CU_STREAM_PER_THREAD, 0));
  EXPECT_FALSE(workspace_owner(CU_STREAM_PER_THREAD, 0) ==
               owner_in_another_thread(CU_STREAM_PER_THREAD, 0));
  const auto stream = reinterpret_cast<CUstream>(0x7f0000001000);
  for (CUstream shared : {CUstream{nullptr}, CU_STREAM_LEGACY, stream}) {
    EXPECT_EQ(workspace_owner(shared, 0), owner_in_another_thread(shared, 0));
  }
  // A capture has its own, as before; and a capture of the per-thread stream its thread's.
  EXPECT_FALSE(workspace_owner(stream, 0) == workspace_owner(stream, 5));
  EXPECT_EQ(workspace_owner(stream, 5), owner_in_another_thread(stream, 5));
  EXPECT_FALSE(workspace_owner(CU_STREAM_PER_THREAD, 5) ==
               owner_in_another_thread(CU_STREAM_PER_THREAD, 5));
}

}  // namespace
}  // namespace normjit::detail
