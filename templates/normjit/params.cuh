// The one kernel parameter every normjit kernel takes, passed by value.
// The host fills the same struct (runtime/engine.cpp includes this file).
#pragma once

namespace normjit {

// Where row r of a trailing-form tensor starts, in elements (the host's RowStrides, resolved):
//   (r / inner_rows) * outer + (r % inner_rows) * inner
// (one level, inner_rows == 1: r * outer). The host resolves "contiguous" to real strides.
struct RowPitch {
  long long outer;  // between rows, or between groups of inner_rows rows
  long long inner;  // between the rows of a group (inner_rows > 1)
};

struct Params {
  const void* x;       // input
  void* y;             // output; may equal x
  const void* weight;  // nullptr when the plan has no weight
  const void* bias;    // nullptr when the plan has no bias
  float* workspace;    // per-launch scratch of split plans; nullptr otherwise
  long long batch;     // N (channel and group forms) or rows (trailing forms)
  float eps;
  // The variant axes' arguments: nullptr unless the spec asks for them.
  const void* residual;  // residual input, in the spec's residual dtype
  void* residual_out;    // h = x + residual written here; may equal residual
  const float* scale;    // fp8 output: one f32 that y is multiplied by before conversion
  float* mean;           // save_stats: per row (layernorm, groupnorm: per (n, g))
  float* rstd;           // save_stats: per row (rmsnorm channel form: per (n, position))
  // Trailing forms: the two-level row layout of x, y, residual and residual_out.
  long long inner_rows;  // rows per group; 1: one level
  // row / inner_rows without a division (row < 2^62): (umulhi(row, inner_magic) + row) >>
  // inner_shift, with shift = ceil(log2(inner_rows)) and magic = floor(2^64 * (2^shift -
  // inner_rows) / inner_rows) + 1 (inner_rows 1: magic 1, shift 0). The host computes them.
  unsigned long long inner_magic;
  unsigned int inner_shift;
  RowPitch x_rows, y_rows, residual_rows, residual_out_rows;
  // Backward kernels (row_backward.cuh): x is the forward's input, y is dx (x's dtype), weight
  // as in the forward, mean and rstd the statistics the forward saved (read, not written),
  // workspace the CTAs' partials and the grid barrier's counter; with a residual, x is h (the
  // forward's residual_out) and residual is dh, h's gradient from its other uses (x's dtype).
  const void* dy;  // the gradient of the forward's output, x's dtype
  void* dweight;   // the weight's gradient, in the parameters' dtype; nullptr without a weight
  void* dbias;     // the bias's gradient, in the parameters' dtype; nullptr without a bias
};

}  // namespace normjit
