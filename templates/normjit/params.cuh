// The one kernel parameter every normjit kernel takes, passed by value.
// The host side mirrors this layout in runtime/launch.hpp (static_asserts check it).
#pragma once

namespace normjit {

struct Params {
  const void* x;       // input, contiguous
  void* y;             // output, contiguous; may equal x
  const void* weight;  // nullptr when the plan has no weight
  const void* bias;    // nullptr when the plan has no bias
  float* workspace;    // per-launch scratch of split plans; nullptr otherwise
  long long batch;     // N (channel and group forms) or rows (trailing forms)
  float eps;
};

}  // namespace normjit
