// Which launches of a split or cooperative kernel may share its workspace (the grid barrier's
// arrival counters and the partial sums): launches ordered among themselves. Not part of the
// public API.
#pragma once

#include <cuda.h>

#include <thread>

namespace normjit::detail {

// One stream's launches are ordered, and so are those recorded into one capture, whose graph's
// replays run apart from the stream's other work. CU_STREAM_PER_THREAD is one handle for a
// different stream in each thread, which may run at the same time: there the thread is part of
// the owner (the legacy default stream, NULL, is one stream for every thread).
struct WorkspaceOwner {
  CUstream stream;
  unsigned long long capture;  // the capture sequence's id; 0: not capturing
  std::thread::id thread;      // CU_STREAM_PER_THREAD's thread; no thread for other streams
  bool operator==(const WorkspaceOwner&) const = default;
};

inline WorkspaceOwner workspace_owner(CUstream stream, unsigned long long capture) {
  return {stream, capture,
          stream == CU_STREAM_PER_THREAD ? std::this_thread::get_id() : std::thread::id{}};
}

}  // namespace normjit::detail
