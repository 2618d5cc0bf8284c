// NormSpec: the validated description of one normalization problem.
//
// One canonical text form is shared by the CLI flags, the prewarm manifest (JSON fields of
// the same names), cache metadata and error messages:
//   op=groupnorm shape=112,64,512,512 dtype=f32 groups=8 affine=both eps=1e-05
// The variant axes follow, each only when not its default, in this order:
//   ... param_dtype=f32 out_dtype=e4m3 residual=bf16 weight_offset=1 activation=silu
//   save_stats=true layout=nhwc
// and, last, backward=true (the gradient kernel of the same problem).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normjit {

constexpr int kMaxRank = 8;  // dimensions of a tensor

enum class Op { kRmsNorm, kLayerNorm, kGroupNorm };
// e4m3 and e5m2 (the OCP fp8 formats, saturating) are output dtypes only.
enum class Dtype { kF32, kF16, kBF16, kE4M3, kE5M2 };
enum class Affine { kNone, kWeight, kBoth };
// Applied to y after the affine step, before the output conversion (and its fp8 scale):
// silu(v) = v / (1 + exp(-v)); gelu is the exact erf form, v / 2 * (1 + erf(v / sqrt(2)))
// (PyTorch's F.gelu with approximate='none').
enum class Activation { kNone, kSilu, kGelu };
// Memory order of [N, C, *spatial] (channel and group forms): kNchw row-major as the shape
// reads; kNhwc channels innermost ([N, *spatial, C] in memory: PyTorch's channels_last and
// channels_last_3d, and [N, L, C] for a 1-D [N, C, L]). The shape stays the logical one.
enum class Layout { kNchw, kNhwc };

const char* to_string(Op op);
const char* to_string(Dtype dtype);
const char* to_string(Affine affine);
const char* to_string(Activation activation);
const char* to_string(Layout layout);
int size_of(Dtype dtype);  // bytes per element
bool is_fp8(Dtype dtype);  // e4m3 or e5m2

// Parse one name; `argument` names the flag or field in the error message.
Op parse_op(std::string_view text, const std::string& argument = "op");
// x, parameters and residual: f32, f16, bf16 (e4m3 and e5m2 are refused as output-only).
Dtype parse_dtype(std::string_view text, const std::string& argument = "dtype");
// The output: any dtype, fp8 included.
Dtype parse_out_dtype(std::string_view text, const std::string& argument = "out_dtype");
Affine parse_affine(std::string_view text, const std::string& argument = "affine");
Activation parse_activation(std::string_view text, const std::string& argument = "activation");
Layout parse_layout(std::string_view text, const std::string& argument = "layout");
// Commas only ("8,64,32,32"); every size a decimal integer within 64 bits (validate() checks
// that each is at least 1), at most kMaxRank of them.
std::vector<int64_t> parse_shape(std::string_view text, const std::string& argument = "shape");
// 0 (channel form) to kMaxRank.
int parse_normalized_dims(std::string_view text, const std::string& argument = "normalized_dims");
int64_t parse_groups(std::string_view text, const std::string& argument = "groups");
// A number that a float holds as a normal value (the kernel takes eps as a float).
double parse_eps(std::string_view text, const std::string& argument = "eps");
// 0 or a number that a float holds as a normal value (the kernel adds it to the weight in f32).
double parse_weight_offset(std::string_view text, const std::string& argument = "weight_offset");

// The one parser of numbers given as text (spec text, CLI flags): the whole text must be a
// decimal integer (an optional '-' and digits: no '+', spaces, 0x, 1e3 or trailing text) in
// [min, max]; overflow is "out of range", never a wrapped or clamped value. The error names
// `argument` and quotes the text.
int64_t parse_integer(std::string_view text, const std::string& argument, int64_t min, int64_t max);
// A whole decimal number such as 1e-5 or 0.001 (nan, inf, hex and trailing text are refused);
// overflow and underflow of a double are "out of range".
double parse_number(std::string_view text, const std::string& argument);

// The fields as a user gives them; omitted ones take the defaults of the PyTorch modules:
// rmsnorm: channel form (reduce dim 1), no weight; layernorm: every dim after the first,
// weight and bias; groupnorm: weight and bias; eps 1e-5.
struct SpecFields {
  std::optional<Op> op;
  std::optional<std::vector<int64_t>> shape;
  std::optional<Dtype> dtype;
  std::optional<int> normalized_dims;
  std::optional<int64_t> groups;
  std::optional<Affine> affine;
  std::optional<double> eps;
  // Variant axes (see NormSpec).
  std::optional<Dtype> param_dtype;
  std::optional<Dtype> out_dtype;
  std::optional<Dtype> residual;  // the residual's dtype: x's or f32
  std::optional<double> weight_offset;
  std::optional<Activation> activation;
  std::optional<bool> save_stats;
  std::optional<Layout> layout;
  std::optional<bool> backward;
};

struct NormSpec {
  Op op = Op::kRmsNorm;
  std::vector<int64_t> shape;  // full tensor shape, contiguous row-major
  Dtype dtype = Dtype::kF32;   // input, output and parameters; statistics are f32
  int normalized_dims = 0;     // trailing dims reduced over; 0 = channel form (dim 1)
  int64_t groups = 0;          // groupnorm only; 0 otherwise
  Affine affine = Affine::kNone;
  double eps = 1e-5;  // a run-time argument of the kernel, not part of its specialization

  // Variant axes. Their defaults give the plain kernel, its canonical text and its cache key.
  // Weight and bias in their own dtype (f32 parameters with f16/bf16 x); nullopt: dtype.
  std::optional<Dtype> param_dtype;
  // y in its own dtype, fp8 included (multiplied by a per-tensor f32 scale given at launch,
  // then saturated); nullopt: dtype.
  std::optional<Dtype> out_dtype;
  // Trailing forms: h = x + residual (rounded to the residual's dtype, x's or f32) is
  // normalized and written back (to the residual or to another buffer); nullopt: no residual.
  std::optional<Dtype> residual;
  // The weight used is (weight_offset + weight) in f32 (Gemma's RMSNorm: 1); needs a weight.
  double weight_offset = 0.0;
  // Applied to y after the affine step (and the weight offset), before the output conversion;
  // with a residual, h is written as it was (the activation is of y only). With backward: the
  // backward of the norm and this activation (dy taken through its derivative).
  Activation activation = Activation::kNone;
  // Also write each row's mean (layernorm, groupnorm) and rstd in f32, for a backward pass.
  bool save_stats = false;
  // The memory order of x and y (the channel and group forms): kNhwc, channels innermost. The
  // shape, weight, bias and statistics keep their logical [N, C, *spatial] meaning.
  Layout layout = Layout::kNchw;
  // The backward kernel of this problem instead of the forward: from x, dy, the statistics the
  // forward saved (save_stats) and the weight, it writes dx (x's dtype) and dweight and dbias
  // (the parameters' dtype) reduced over every row (groupnorm and the channel forms: over n and
  // the positions) in a fixed order. Every op and form; trailing rows of up to 8192 elements.
  bool backward = false;

  // Fill defaults and validate; throws Error(kInvalidArgument) naming the field and value.
  static NormSpec from_fields(const SpecFields& fields);
  // Parse the canonical text form (key=value words, any order).
  static NormSpec parse(std::string_view text);
  // The canonical text form; parse(to_string()) == *this.
  std::string to_string() const;
  // Throws Error(kInvalidArgument) if the spec is inconsistent.
  void validate() const;

  Dtype param_type() const { return param_dtype.value_or(dtype); }
  Dtype out_type() const { return out_dtype.value_or(dtype); }

  // Derived sizes.
  bool channel_form() const { return normalized_dims == 0; }  // reduce over dim 1 (all ops)
  bool nhwc() const { return layout == Layout::kNhwc; }
  // A channel form (rmsnorm or layernorm over dim 1) whose C channels of each position lie
  // contiguous, normalized as rows of C by the row kernels: layout nhwc (forward only), or one
  // position per item, S = 1, where both layouts are one memory order ([N, C] or [N, C, 1, 1]);
  // its backward then runs the row backward kernels.
  bool channel_rows() const;
  int64_t batch() const;           // N for channel/group forms, product of leading dims otherwise
  int64_t channels() const;        // shape[1] (channel and group forms)
  int64_t spatial() const;         // product of shape[2:] (channel and group forms)
  int64_t row_length() const;      // elements reduced together (per row or per (n, g))
  int64_t elements() const;        // product of the shape
  int64_t param_elements() const;  // elements of the weight (and of the bias)

  bool operator==(const NormSpec& other) const;
  bool operator!=(const NormSpec& other) const { return !(*this == other); }
};

std::string format_shape(const std::vector<int64_t>& shape);  // "112,64,512,512"
std::string format_double(double value);                      // shortest round-trip text
std::string format_float(float value);                        // shortest round-trip text
// Whether eps is a normal float greater than 0 (what the kernels take): every eps a spec or a
// launch gives. Inline and allocation-free for the launch path; check_eps says why not.
constexpr bool eps_in_range(double eps) {
  return eps >= 1.17549435082228750797e-38 && eps <= 3.40282346638528859812e+38;  // FLT_MIN, _MAX
}
// Throws Error(kInvalidArgument) naming `argument` and `shown` unless eps_in_range(eps).
void check_eps(double eps, const std::string& argument, const std::string& shown);

}  // namespace normjit
