// normjit::Error: the one exception type of the library.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace normjit {

enum class ErrorCode {
  kInvalidArgument = 1,  // the caller passed something we cannot accept; the message names it
  kUnsupported = 2,      // a valid request this build cannot serve
  kCompile = 3,          // NVRTC rejected the generated source (log, options and source attached)
  kDriver = 4,           // a CUDA driver call failed
  kNoDevice = 5,         // no driver or no GPU: everything but launching still works
  kCacheMiss = 6,        // NORMJIT_JIT=off and the kernel is not in any cache layer
  kInternal = 7,         // a bug in normjit
};

const char* to_string(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Bad input from the caller: "invalid NAME VALUE: WHY", on one line (a control character in
// any part is shown escaped). The caller quotes VALUE, with quoted_excerpt() where it was given.
[[noreturn]] void throw_invalid_argument(const std::string& name, const std::string& value,
                                         const std::string& why);
// A valid request this build cannot serve yet: "unsupported NAME VALUE: WHY" (kUnsupported).
[[noreturn]] void throw_unsupported(const std::string& name, const std::string& value,
                                    const std::string& why);

// Text from a caller as an error message shows it: on one line (control characters escaped as
// \n, \t, \xNN) and at most about `max_bytes` long; a cut is marked with "..." and the full
// length, so that no input, however long or whatever it holds, makes an error long or splits it
// over lines. The one helper for quoting input in errors (spec text, flags, manifests, paths).
std::string excerpt(std::string_view text, size_t max_bytes = 64);
// excerpt() in single quotes: 'sm_90f', or 'aaaa...' (104857600 bytes).
std::string quoted_excerpt(std::string_view text, size_t max_bytes = 64);

// A broken invariant inside normjit.
[[noreturn]] void throw_internal(const char* condition, const char* file, int line,
                                 const std::string& message);

}  // namespace normjit

#define NORMJIT_CHECK_ARG(cond, name, value, why)                           \
  do {                                                                      \
    if (!(cond)) ::normjit::throw_invalid_argument((name), (value), (why)); \
  } while (0)

#define NORMJIT_ASSERT(cond, message)                                             \
  do {                                                                            \
    if (!(cond)) ::normjit::throw_internal(#cond, __FILE__, __LINE__, (message)); \
  } while (0)
