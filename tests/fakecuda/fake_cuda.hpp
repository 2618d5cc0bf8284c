// A fake CUDA driver (libcuda.so.1 of this directory's build), for tests of the runtime's host
// logic on machines without a GPU: contexts (a destroyed context's handle given to the next
// one, as the real driver may), modules, device memory in host memory, streams, stream capture
// with its global-mode rules, graphs and their user objects. Kernels do not run: each launch is
// recorded with its configuration and parameters. Calls the real driver would refuse or that
// would be unsafe (a module unloaded once its context is gone, memory allocated while a global
// capture runs) are refused and noted as misuses, which tests expect to be none.
//
// Tests link the library; the runtime's dlopen("libcuda.so.1") then finds it already loaded.
//
// What it does not model: kernels' effects, stream order and concurrency (every call is done
// when it returns, under one mutex, so TSan sees the fake order any two calls of different
// threads: a race in the runtime that only the real driver's lock-free paths expose can hide),
// child graphs, streams' implicit synchronization with the legacy stream.
#pragma once

#include <cuda.h>

#include <string>
#include <thread>
#include <vector>

#include "templates/normjit/params.cuh"

namespace fakecuda {

// A kernel launch: outside a capture when it is enqueued, inside one when its graph is launched.
struct Launch {
  std::string function;  // the name given to cuModuleGetFunction
  unsigned long long context = 0;
  unsigned grid = 0, block_x = 0, block_y = 0;
  unsigned smem = 0;  // dynamic shared memory, bytes
  bool cooperative = false;
  bool from_graph = false;
  CUstream stream = nullptr;
  std::thread::id thread;  // the caller's
  normjit::Params params{};
};

// What the driver saw, since the process started or the last clear_launches().
std::vector<Launch> launches();
void clear_launches();
// The calls refused as misuse, one line each (what, and why).
std::vector<std::string> misuses();
void clear_misuses();
// What is alive now: modules loaded and device allocations, of every context.
size_t live_modules();
size_t live_allocations();
// Graphs and executable graphs not yet destroyed; user objects whose destructor has not run.
size_t live_graphs();
size_t live_user_objects();
// The next `count` calls of `function` (its name without version suffix, "cuModuleLoadData")
// fail with `result` and do nothing else. std::invalid_argument for a name the runtime does not
// use.
void fail_next(const std::string& function, CUresult result, int count = 1);
// The failures fail_next armed that no call took; clears them.
size_t armed_failures();
// User-object destructors run on a thread of the fake's, some time after the last reference
// goes, as CUDA's do. hold_destructors(true) keeps them waiting (a capture then comes before its
// graph's release); drain_destructors() returns once none waits to run (or all are held).
void hold_destructors(bool held);
void drain_destructors();
// Calls of `function` so far.
size_t calls(const std::string& function);

}  // namespace fakecuda
