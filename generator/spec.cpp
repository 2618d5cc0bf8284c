#include "normjit/spec.hpp"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "normjit/error.hpp"

namespace normjit {
namespace {

constexpr int64_t kMaxElements = int64_t{1} << 62;
// Spec text or a shape quoted in an error: a canonical spec (about 80 bytes) and any valid
// shape (at most 8 sizes of 19 digits) are shown whole.
constexpr size_t kSpecExcerpt = 200;
// Why x, parameters and residual take no fp8 dtype: the kernels read none.
constexpr const char* kFp8OutputOnly =
    "e4m3 and e5m2 are output dtypes only (out_dtype); expected one of f32, f16, bf16";
// Every key of the canonical text, in the order to_string() writes them.
constexpr const char* kSpecKeys =
    "op, shape, dtype, normalized_dims, groups, affine, eps, param_dtype, out_dtype, residual, "
    "weight_offset, activation, save_stats, layout, backward";

bool checked_mul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out) && *out < kMaxElements;
}

// Appends c as an error message shows it: printable bytes (UTF-8 included) as they are,
// control characters escaped, so that a message stays on one line.
void append_shown(std::string& out, char c) {
  switch (c) {
    case '\n':
      out += "\\n";
      return;
    case '\r':
      out += "\\r";
      return;
    case '\t':
      out += "\\t";
      return;
    default:
      break;
  }
  const auto byte = static_cast<unsigned char>(c);
  if (byte < 0x20 || byte == 0x7f) {
    char escaped[8];
    std::snprintf(escaped, sizeof(escaped), "\\x%02x", byte);
    out += escaped;
  } else {
    out += c;
  }
}

std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) append_shown(out, c);
  return out;
}

// The first bytes of text that excerpt() shows: at most max_bytes, never ending inside a UTF-8
// sequence (a cut backs up over at most 3 continuation bytes).
size_t shown_bytes(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text.size();
  size_t keep = max_bytes;
  for (int i = 0; i < 3 && keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80;
       ++i) {
    --keep;
  }
  return keep;
}

}  // namespace

// The kernel takes eps as a float: a value that a float rounds to 0, a denormal or inf would
// silently be another eps (or none), so only normal float magnitudes pass. NaN fails too.
void check_eps(double eps, const std::string& argument, const std::string& shown) {
  constexpr double kMinEps = std::numeric_limits<float>::min();
  constexpr double kMaxEps = std::numeric_limits<float>::max();
  static_assert(eps_in_range(kMinEps) && eps_in_range(kMaxEps) && !eps_in_range(kMinEps / 2) &&
                !eps_in_range(kMaxEps * 2));
  if (!eps_in_range(eps)) {
    throw_invalid_argument(argument, shown,
                           "must be a finite number greater than 0 that a float holds, from " +
                               format_double(kMinEps) + " to " + format_double(kMaxEps));
  }
}

namespace {

// The kernel adds weight_offset to the weight in f32: like eps, a value that a float rounds to
// 0, a denormal or inf would silently be another offset. 0 is no offset.
void check_weight_offset(double offset, const std::string& argument, const std::string& shown) {
  constexpr double kMin = std::numeric_limits<float>::min();
  constexpr double kMax = std::numeric_limits<float>::max();
  if (offset != 0 && !(std::fabs(offset) >= kMin && std::fabs(offset) <= kMax)) {
    throw_invalid_argument(argument, shown,
                           "must be 0 or a finite number that a float holds as a normal value, "
                           "magnitude " +
                               format_double(kMin) + " to " + format_double(kMax));
  }
}

std::string cut_note(std::string_view text, size_t keep) {
  return keep < text.size() ? " (" + std::to_string(text.size()) + " bytes)" : "";
}

// Why text is not a decimal integer in [min, max] ("is out of range; ..."), or "" and *value.
std::string integer_problem(std::string_view text, int64_t min, int64_t max, int64_t* value) {
  const bool any =
      min == std::numeric_limits<int64_t>::min() && max == std::numeric_limits<int64_t>::max();
  const std::string range =
      "expected an integer from " + std::to_string(min) + " to " + std::to_string(max);
  // from_chars takes exactly an optional '-' and decimal digits: no '+', spaces, 0x or 1e3.
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  if (text.empty() || end != text.data() + text.size() ||
      (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    return any ? "is not a decimal integer" : "is not an integer; " + range;
  }
  // Past int64 is out of range too, never "not an integer" nor a clamped value.
  if (ec == std::errc::result_out_of_range) {
    return any ? "is past the 64-bit integer range" : "is out of range; " + range;
  }
  if (*value < min || *value > max) return "is out of range; " + range;
  return "";
}

int64_t product(const std::vector<int64_t>& shape, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= shape[i];
  return p;
}

}  // namespace

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kCompile:
      return "compile error";
    case ErrorCode::kDriver:
      return "driver error";
    case ErrorCode::kNoDevice:
      return "no device";
    case ErrorCode::kCacheMiss:
      return "cache miss";
    case ErrorCode::kInternal:
      return "internal error";
  }
  return "unknown error";
}

void throw_invalid_argument(const std::string& name, const std::string& value,
                            const std::string& why) {
  // one_line: a caller that quoted a value without quoted_excerpt() still cannot split the message.
  throw Error(ErrorCode::kInvalidArgument, one_line("invalid " + name + " " + value + ": " + why));
}

void throw_unsupported(const std::string& name, const std::string& value, const std::string& why) {
  throw Error(ErrorCode::kUnsupported, one_line("unsupported " + name + " " + value + ": " + why));
}

std::string excerpt(std::string_view text, size_t max_bytes) {
  const size_t keep = shown_bytes(text, max_bytes);
  return one_line(text.substr(0, keep)) + (keep < text.size() ? "..." : "") + cut_note(text, keep);
}

std::string quoted_excerpt(std::string_view text, size_t max_bytes) {
  const size_t keep = shown_bytes(text, max_bytes);
  return "'" + one_line(text.substr(0, keep)) + (keep < text.size() ? "...'" : "'") +
         cut_note(text, keep);
}

int64_t parse_integer(std::string_view text, const std::string& argument, int64_t min,
                      int64_t max) {
  int64_t value = 0;
  if (const std::string why = integer_problem(text, min, max, &value); !why.empty()) {
    throw_invalid_argument(argument, quoted_excerpt(text), why);
  }
  return value;
}

double parse_number(std::string_view text, const std::string& argument) {
  constexpr const char* kExpected = "expected a decimal number such as 1e-5 or 0.001";
  // Digits, sign, point and exponent only: from_chars would also take nan, inf and infinity.
  if (text.empty() || text.find_first_not_of("0123456789+-.eE") != std::string_view::npos) {
    throw_invalid_argument(argument, quoted_excerpt(text),
                           std::string("is not a number; ") + kExpected);
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (end != text.data() + text.size() ||
      (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    throw_invalid_argument(argument, quoted_excerpt(text),
                           std::string("is not a number; ") + kExpected);
  }
  if (ec == std::errc::result_out_of_range) {
    throw_invalid_argument(argument, quoted_excerpt(text), "is out of the range of a double");
  }
  return value;
}

void throw_internal(const char* condition, const char* file, int line, const std::string& message) {
  std::ostringstream os;
  os << "internal error (" << file << ":" << line << ", " << condition << "): " << message;
  throw Error(ErrorCode::kInternal, os.str());
}

const char* to_string(Op op) {
  switch (op) {
    case Op::kRmsNorm:
      return "rmsnorm";
    case Op::kLayerNorm:
      return "layernorm";
    case Op::kGroupNorm:
      return "groupnorm";
  }
  return "?";
}

const char* to_string(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32:
      return "f32";
    case Dtype::kF16:
      return "f16";
    case Dtype::kBF16:
      return "bf16";
    case Dtype::kE4M3:
      return "e4m3";
    case Dtype::kE5M2:
      return "e5m2";
  }
  return "?";
}

const char* to_string(Affine affine) {
  switch (affine) {
    case Affine::kNone:
      return "none";
    case Affine::kWeight:
      return "weight";
    case Affine::kBoth:
      return "both";
  }
  return "?";
}

const char* to_string(Activation activation) {
  switch (activation) {
    case Activation::kNone:
      return "none";
    case Activation::kSilu:
      return "silu";
    case Activation::kGelu:
      return "gelu";
  }
  return "?";
}

const char* to_string(Layout layout) {
  switch (layout) {
    case Layout::kNchw:
      return "nchw";
    case Layout::kNhwc:
      return "nhwc";
  }
  return "?";
}

int size_of(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32:
      return 4;
    case Dtype::kF16:
    case Dtype::kBF16:
      return 2;
    case Dtype::kE4M3:
    case Dtype::kE5M2:
      return 1;
  }
  return 0;
}

bool is_fp8(Dtype dtype) { return dtype == Dtype::kE4M3 || dtype == Dtype::kE5M2; }

Op parse_op(std::string_view text, const std::string& argument) {
  for (Op op : {Op::kRmsNorm, Op::kLayerNorm, Op::kGroupNorm}) {
    if (text == to_string(op)) return op;
  }
  throw_invalid_argument(argument, quoted_excerpt(text),
                         "expected one of rmsnorm, layernorm, groupnorm");
}

Dtype parse_dtype(std::string_view text, const std::string& argument) {
  for (Dtype dtype : {Dtype::kF32, Dtype::kF16, Dtype::kBF16}) {
    if (text == to_string(dtype)) return dtype;
  }
  if (text == to_string(Dtype::kE4M3) || text == to_string(Dtype::kE5M2)) {
    throw_invalid_argument(argument, quoted_excerpt(text), kFp8OutputOnly);
  }
  throw_invalid_argument(argument, quoted_excerpt(text), "expected one of f32, f16, bf16");
}

Dtype parse_out_dtype(std::string_view text, const std::string& argument) {
  for (Dtype dtype : {Dtype::kF32, Dtype::kF16, Dtype::kBF16, Dtype::kE4M3, Dtype::kE5M2}) {
    if (text == to_string(dtype)) return dtype;
  }
  throw_invalid_argument(argument, quoted_excerpt(text),
                         "expected one of f32, f16, bf16, e4m3, e5m2");
}

Affine parse_affine(std::string_view text, const std::string& argument) {
  for (Affine affine : {Affine::kNone, Affine::kWeight, Affine::kBoth}) {
    if (text == to_string(affine)) return affine;
  }
  throw_invalid_argument(argument, quoted_excerpt(text), "expected one of none, weight, both");
}

Activation parse_activation(std::string_view text, const std::string& argument) {
  for (Activation activation : {Activation::kNone, Activation::kSilu, Activation::kGelu}) {
    if (text == to_string(activation)) return activation;
  }
  throw_invalid_argument(argument, quoted_excerpt(text), "expected one of none, silu, gelu");
}

Layout parse_layout(std::string_view text, const std::string& argument) {
  for (Layout layout : {Layout::kNchw, Layout::kNhwc}) {
    if (text == to_string(layout)) return layout;
  }
  throw_invalid_argument(argument, quoted_excerpt(text),
                         "expected one of nchw, nhwc (nhwc: channels innermost)");
}

std::vector<int64_t> parse_shape(std::string_view text, const std::string& argument) {
  std::vector<int64_t> shape;
  if (text.empty()) throw_invalid_argument(argument, "''", "expected sizes like 8,64,32,32");
  // The rank first, from the commas: a value of a million sizes is refused without storing them.
  const int64_t rank = std::count(text.begin(), text.end(), ',') + 1;
  if (rank > kMaxRank) {
    throw_invalid_argument(argument, quoted_excerpt(text, kSpecExcerpt),
                           "has rank " + std::to_string(rank) + "; at most " +
                               std::to_string(kMaxRank) + " dimensions are supported");
  }
  size_t pos = 0;
  while (pos <= text.size()) {
    // Commas only: the one separator the canonical text form writes.
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view item = text.substr(pos, comma - pos);
    int64_t size = 0;
    const std::string why = integer_problem(item, std::numeric_limits<int64_t>::min(),
                                            std::numeric_limits<int64_t>::max(), &size);
    if (!why.empty()) {
      throw_invalid_argument(
          argument, quoted_excerpt(text, kSpecExcerpt),
          "size " + quoted_excerpt(item) + " " + why + " (expected e.g. 8,64,32,32)");
    }
    shape.push_back(size);
    pos = comma + 1;
  }
  return shape;
}

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(shape[i]);
  }
  return out;
}

double parse_eps(std::string_view text, const std::string& argument) {
  const double eps = parse_number(text, argument);
  check_eps(eps, argument, quoted_excerpt(text));  // named as given: 1e300, not 1e+300
  return eps;
}

double parse_weight_offset(std::string_view text, const std::string& argument) {
  const double offset = parse_number(text, argument);
  check_weight_offset(offset, argument, quoted_excerpt(text));  // named as given
  return offset;
}

int parse_normalized_dims(std::string_view text, const std::string& argument) {
  return int(parse_integer(text, argument, 0, kMaxRank));
}

int64_t parse_groups(std::string_view text, const std::string& argument) {
  // Any int64: validate() says why a negative count or one that does not divide C is wrong.
  return parse_integer(text, argument, std::numeric_limits<int64_t>::min(),
                       std::numeric_limits<int64_t>::max());
}

std::string format_float(float value) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  NORMJIT_ASSERT(ec == std::errc(), "to_chars failed");
  return std::string(buffer, end);
}

std::string format_double(double value) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  NORMJIT_ASSERT(ec == std::errc(), "to_chars failed");
  return std::string(buffer, end);
}

NormSpec NormSpec::from_fields(const SpecFields& f) {
  if (!f.op)
    throw_invalid_argument("op", "(missing)", "expected one of rmsnorm, layernorm, groupnorm");
  if (!f.shape) throw_invalid_argument("shape", "(missing)", "expected sizes like 8,64,32,32");
  NormSpec s;
  s.op = *f.op;
  s.shape = *f.shape;
  s.dtype = f.dtype.value_or(Dtype::kF32);
  s.eps = f.eps.value_or(1e-5);
  switch (s.op) {
    case Op::kRmsNorm:
      s.normalized_dims = f.normalized_dims.value_or(0);
      s.affine = f.affine.value_or(Affine::kNone);
      break;
    case Op::kLayerNorm:
      s.normalized_dims =
          f.normalized_dims.value_or(s.shape.size() > 1 ? int(s.shape.size()) - 1 : 1);
      s.affine = f.affine.value_or(Affine::kBoth);
      break;
    case Op::kGroupNorm:
      s.normalized_dims = f.normalized_dims.value_or(0);
      s.affine = f.affine.value_or(Affine::kBoth);
      break;
  }
  if (f.groups) {
    if (s.op != Op::kGroupNorm && *f.groups != 0) {
      throw_invalid_argument(
          "groups", std::to_string(*f.groups),
          std::string("only groupnorm takes groups, not ") + normjit::to_string(s.op));
    }
    s.groups = *f.groups;
  } else if (s.op == Op::kGroupNorm) {
    throw_invalid_argument("groups", "(missing)",
                           "groupnorm needs a group count that divides the channels");
  }
  s.param_dtype = f.param_dtype;
  s.out_dtype = f.out_dtype;
  s.residual = f.residual;
  s.weight_offset = f.weight_offset.value_or(0.0);
  s.activation = f.activation.value_or(Activation::kNone);
  s.save_stats = f.save_stats.value_or(false);
  s.layout = f.layout.value_or(Layout::kNchw);
  s.backward = f.backward.value_or(false);
  s.validate();  // as given: param_dtype without parameters is an error even if it is x's dtype
  // One canonical form: a dtype equal to x's is the default, and -0 is no offset.
  if (s.param_dtype == s.dtype) s.param_dtype.reset();
  if (s.out_dtype == s.dtype) s.out_dtype.reset();
  if (s.weight_offset == 0) s.weight_offset = 0.0;
  return s;
}

namespace {

bool parse_bool(std::string_view text, const std::string& argument) {
  if (text == "true") return true;
  if (text == "false") return false;
  throw_invalid_argument(argument, quoted_excerpt(text), "expected true or false");
}

// backward=true: the axes that have a meaning for the gradient kernel. Its dy and dx take x's
// dtype and its dweight and dbias the parameters'; it reads the statistics a forward saved.
// residual: the forward's fused add (h = x + residual normalized): the backward's x is h, and
// dx = the norm's gradient + dh, the gradient of both the forward's x and its residual.
// activation: the forward's activation after the affine step; the kernel takes dy through its
// derivative (and reads the bias, where there is one, for the activation's input).
void validate_backward(const NormSpec& s) {
  auto refuse = [&](const std::string& argument, const std::string& value, const std::string& why) {
    throw_invalid_argument(argument, value, "backward=true " + why);
  };
  if (s.out_dtype && *s.out_dtype != s.dtype) {
    refuse("out_dtype", std::string("'") + normjit::to_string(*s.out_dtype) + "'",
           "takes dy and writes dx in x's dtype (" + std::string(normjit::to_string(s.dtype)) +
               "); leave out_dtype out");
  }
  // With a residual, the backward's x is h = x + residual, the forward's residual_out, and the
  // kernel adds dh (h's gradient from its other uses) to dx: h and dh take h's dtype.
  if (s.residual && *s.residual != s.dtype) {
    refuse("residual", std::string("'") + normjit::to_string(*s.residual) + "'",
           std::string("normalizes h = x + residual (its x is h) and adds h's gradient dh, "
                       "both in h's dtype: residual must equal dtype (") +
               normjit::to_string(s.dtype) + "), or leave residual out");
  }
  if (s.save_stats) {
    refuse("save_stats", "true",
           "reads the statistics that the forward saved (mean and rstd are inputs of the "
           "backward kernel), it writes none; leave save_stats out");
  }
}

// The variant axes of a spec whose base fields validate() has checked.
void validate_variant(const NormSpec& s) {
  auto quoted = [](Dtype d) { return std::string("'") + normjit::to_string(d) + "'"; };
  if (is_fp8(s.dtype)) throw_invalid_argument("dtype", quoted(s.dtype), kFp8OutputOnly);
  if (s.param_dtype) {
    if (is_fp8(*s.param_dtype)) {
      throw_invalid_argument("param_dtype", quoted(*s.param_dtype), kFp8OutputOnly);
    }
    if (s.affine == Affine::kNone) {
      throw_invalid_argument("param_dtype", quoted(*s.param_dtype),
                             "is the dtype of weight and bias, and affine is none; give affine "
                             "weight or both, or leave param_dtype out");
    }
  }
  if (s.residual) {
    if (s.op == Op::kGroupNorm || s.channel_form()) {
      throw_invalid_argument(
          "residual", quoted(*s.residual),
          std::string("only the trailing forms take a residual (rmsnorm with normalized_dims > "
                      "0, layernorm), not ") +
              normjit::to_string(s.op) +
              (s.op == Op::kGroupNorm ? "" : " with normalized_dims 0 (channel form)"));
    }
    if (*s.residual != s.dtype && *s.residual != Dtype::kF32) {
      throw_invalid_argument(
          "residual", quoted(*s.residual),
          std::string("must be x's dtype (") + normjit::to_string(s.dtype) + ") or f32");
    }
  }
  if (s.nhwc()) {
    if (s.op != Op::kGroupNorm && !s.channel_form()) {
      throw_invalid_argument(
          "layout", "'nhwc'",
          std::string("orders the channels of [N, C, *spatial] innermost; the trailing form of ") +
              normjit::to_string(s.op) + " (normalized_dims " + std::to_string(s.normalized_dims) +
              ") normalizes contiguous trailing dims: leave layout out, or give normalized_dims "
              "0 (the channel form)");
    }
  }
  check_weight_offset(s.weight_offset, "weight_offset", format_double(s.weight_offset));
  if (s.weight_offset != 0 && s.affine == Affine::kNone) {
    throw_invalid_argument("weight_offset", format_double(s.weight_offset),
                           "offsets the weight, and affine is none; give affine weight or both");
  }
  if (s.backward) validate_backward(s);
}

}  // namespace

namespace {

// A struct built by hand (the C++ API) may hold any integer in an enum: each field is checked
// first, before any use of it (a Dtype past the last used to reach a division by its size).
void validate_enums(const NormSpec& s) {
  const auto check = [](const char* field, int value, int count, const char* expected) {
    if (value < 0 || value >= count) {
      throw_invalid_argument(field, std::to_string(value), std::string("expected ") + expected);
    }
  };
  constexpr const char* kDtypes = "one of f32, f16, bf16, e4m3, e5m2";
  constexpr int kDtypeCount = int(Dtype::kE5M2) + 1;
  check("op", int(s.op), int(Op::kGroupNorm) + 1, "one of rmsnorm, layernorm, groupnorm");
  check("dtype", int(s.dtype), kDtypeCount, kDtypes);
  check("affine", int(s.affine), int(Affine::kBoth) + 1, "one of none, weight, both");
  check("layout", int(s.layout), int(Layout::kNhwc) + 1, "one of nchw, nhwc");
  check("activation", int(s.activation), int(Activation::kGelu) + 1, "one of none, silu, gelu");
  if (s.param_dtype) check("param_dtype", int(*s.param_dtype), kDtypeCount, kDtypes);
  if (s.out_dtype) check("out_dtype", int(*s.out_dtype), kDtypeCount, kDtypes);
  if (s.residual) check("residual", int(*s.residual), kDtypeCount, kDtypes);
}

}  // namespace

void NormSpec::validate() const {
  validate_enums(*this);
  const int rank = int(shape.size());
  // Built only on error: validate() runs on every Engine::run.
  auto shape_text = [this] { return quoted_excerpt(format_shape(shape), kSpecExcerpt); };
  if (rank == 0) throw_invalid_argument("shape", "''", "needs at least one dimension");
  if (rank > kMaxRank) {
    throw_invalid_argument("shape", shape_text(),
                           "has rank " + std::to_string(rank) + "; at most " +
                               std::to_string(kMaxRank) + " dimensions are supported");
  }
  int64_t total = 1;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] < 1) {
      throw_invalid_argument("shape", shape_text(),
                             "dimension " + std::to_string(i) + " is " + std::to_string(shape[i]) +
                                 "; every size must be at least 1");
    }
    if (!checked_mul(total, shape[i], &total)) {
      throw_invalid_argument("shape", shape_text(), "more than 2^62 elements");
    }
  }
  check_eps(eps, "eps", format_double(eps));
  if (normalized_dims < 0 || normalized_dims > rank) {
    throw_invalid_argument("normalized_dims", std::to_string(normalized_dims),
                           "must be between 0 (the channel form) and the rank of shape " +
                               shape_text() + " (" + std::to_string(rank) + ")");
  }
  if (op != Op::kGroupNorm && channel_form() && rank < 2) {
    throw_invalid_argument("shape", shape_text(),
                           std::string("the channel form of ") + normjit::to_string(op) +
                               " needs [N, C, *spatial] (rank >= 2); give normalized_dims for "
                               "the trailing form");
  }
  switch (op) {
    case Op::kRmsNorm:
      if (affine == Affine::kBoth) {
        throw_invalid_argument("affine", "'both'",
                               "rmsnorm has a weight but no bias (use weight or none)");
      }
      break;
    case Op::kLayerNorm:
      break;
    case Op::kGroupNorm:
      if (normalized_dims != 0) {
        throw_invalid_argument(
            "normalized_dims", std::to_string(normalized_dims),
            "groupnorm always normalizes [N, C, *spatial] per group; leave it out");
      }
      if (rank < 2) {
        throw_invalid_argument("shape", shape_text(),
                               "groupnorm needs [N, C, *spatial] (rank >= 2)");
      }
      if (groups < 1 || shape[1] % groups != 0) {
        throw_invalid_argument(
            "groups", std::to_string(groups),
            "must be at least 1 and divide the channel count " + std::to_string(shape[1]));
      }
      break;
  }
  if (op != Op::kGroupNorm && groups != 0) {
    throw_invalid_argument("groups", std::to_string(groups), "only groupnorm takes groups");
  }
  if (row_length() > (int64_t{1} << 31) - 1) {
    throw_invalid_argument("shape", shape_text(),
                           "normalizes " + std::to_string(row_length()) +
                               " elements together; at most 2^31-1 are supported");
  }
  validate_variant(*this);
}

int64_t NormSpec::batch() const {
  if (channel_form()) return shape[0];
  return product(shape, 0, shape.size() - normalized_dims);
}

int64_t NormSpec::channels() const { return shape.size() > 1 ? shape[1] : 1; }

int64_t NormSpec::spatial() const { return product(shape, 2, shape.size()); }

bool NormSpec::channel_rows() const {
  return op != Op::kGroupNorm && channel_form() && (nhwc() || spatial() == 1);
}

int64_t NormSpec::row_length() const {
  if (op == Op::kGroupNorm) return channels() / (groups > 0 ? groups : 1) * spatial();
  if (channel_form()) return channels();
  return product(shape, shape.size() - normalized_dims, shape.size());
}

int64_t NormSpec::elements() const { return product(shape, 0, shape.size()); }

int64_t NormSpec::param_elements() const {
  if (affine == Affine::kNone) return 0;
  if (channel_form()) return channels();
  return row_length();
}

bool NormSpec::operator==(const NormSpec& o) const {
  return op == o.op && shape == o.shape && dtype == o.dtype &&
         normalized_dims == o.normalized_dims && groups == o.groups && affine == o.affine &&
         eps == o.eps && param_type() == o.param_type() && out_type() == o.out_type() &&
         residual == o.residual && weight_offset == o.weight_offset && activation == o.activation &&
         save_stats == o.save_stats && layout == o.layout && backward == o.backward;
}

std::string NormSpec::to_string() const {
  std::string out = std::string("op=") + normjit::to_string(op) + " shape=" + format_shape(shape) +
                    " dtype=" + normjit::to_string(dtype);
  // Layernorm's default is every dim after the first, so its channel form (0) is spelled out.
  if (normalized_dims != 0 || op == Op::kLayerNorm) {
    out += " normalized_dims=" + std::to_string(normalized_dims);
  }
  if (op == Op::kGroupNorm) out += " groups=" + std::to_string(groups);
  out += std::string(" affine=") + normjit::to_string(affine) + " eps=" + format_double(eps);
  // The variant axes, each only when not its default: today's specs keep their text.
  if (param_type() != dtype) out += std::string(" param_dtype=") + normjit::to_string(param_type());
  if (out_type() != dtype) out += std::string(" out_dtype=") + normjit::to_string(out_type());
  if (residual) out += std::string(" residual=") + normjit::to_string(*residual);
  if (weight_offset != 0) out += " weight_offset=" + format_double(weight_offset);
  if (activation != Activation::kNone) {
    out += std::string(" activation=") + normjit::to_string(activation);
  }
  if (save_stats) out += " save_stats=true";
  if (layout != Layout::kNchw) out += std::string(" layout=") + normjit::to_string(layout);
  if (backward) out += " backward=true";
  return out;
}

NormSpec NormSpec::parse(std::string_view text) {
  SpecFields f;
  std::vector<std::string> seen;  // keys given so far: a repeated key is an error, not a choice
  size_t pos = 0;
  while (pos < text.size()) {
    size_t start = text.find_first_not_of(" \t\n", pos);
    if (start == std::string_view::npos) break;
    size_t end = text.find_first_of(" \t\n", start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = text.substr(start, end - start);
    pos = end;
    size_t eq = word.find('=');
    if (eq == std::string_view::npos) {
      throw_invalid_argument("spec", quoted_excerpt(text, kSpecExcerpt),
                             "word " + quoted_excerpt(word) + " is not key=value");
    }
    std::string key(word.substr(0, eq));
    std::string_view value = word.substr(eq + 1);
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw_invalid_argument("spec", quoted_excerpt(text, kSpecExcerpt),
                             "key " + quoted_excerpt(key) + " is given twice");
    }
    seen.push_back(key);
    if (key == "op") {
      f.op = parse_op(value);
    } else if (key == "shape") {
      f.shape = parse_shape(value);
    } else if (key == "dtype") {
      f.dtype = parse_dtype(value);
    } else if (key == "normalized_dims") {
      f.normalized_dims = parse_normalized_dims(value, key);
    } else if (key == "groups") {
      f.groups = parse_groups(value, key);
    } else if (key == "affine") {
      f.affine = parse_affine(value);
    } else if (key == "eps") {
      f.eps = parse_number(value, key);  // validate() checks the range
    } else if (key == "param_dtype") {
      f.param_dtype = parse_dtype(value, key);
    } else if (key == "out_dtype") {
      f.out_dtype = parse_out_dtype(value, key);
    } else if (key == "residual") {
      f.residual = parse_dtype(value, key);
    } else if (key == "weight_offset") {
      f.weight_offset = parse_number(value, key);  // validate() checks the range
    } else if (key == "activation") {
      f.activation = parse_activation(value, key);
    } else if (key == "save_stats") {
      f.save_stats = parse_bool(value, key);
    } else if (key == "layout") {
      f.layout = parse_layout(value, key);
    } else if (key == "backward") {
      f.backward = parse_bool(value, key);
    } else {
      throw_invalid_argument("spec", quoted_excerpt(text, kSpecExcerpt),
                             "unknown key " + quoted_excerpt(key) + " (known: " + kSpecKeys + ")");
    }
  }
  return from_fields(f);
}

}  // namespace normjit
