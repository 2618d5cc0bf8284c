// The cache key: SHA-256 over a canonical, line-oriented preimage of every compile input.
#include <openssl/evp.h>

#include <algorithm>

#include "cache/cache.hpp"
#include "normjit/error.hpp"

namespace normjit::cache {
namespace {

// One value per line: escaping newlines keeps the preimage injective (a source that contains
// "\noption: -O0" cannot pass for an option) and keeps `explain` diffs line-based.
void append_escaped(std::string& out, std::string_view value) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (byte < 0x20 || byte == 0x7f) {
          out += "\\x";
          out += kHex[byte >> 4];
          out += kHex[byte & 0xf];
        } else {
          out += c;
        }
    }
  }
}

void append_line(std::string& out, std::string_view field, std::string_view value) {
  out += field;
  out += ": ";
  append_escaped(out, value);
  out += '\n';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // EVP_Digest is the one-shot form; it fails only on allocation failure inside OpenSSL.
  if (EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr) != 1 ||
      length != 32) {
    throw Error(ErrorCode::kInternal, "OpenSSL EVP_Digest(SHA-256) failed");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(64, '0');
  for (unsigned int i = 0; i < 32; ++i) {
    hex[2 * i] = kHex[digest[i] >> 4];
    hex[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return hex;
}

std::string KeyInputs::preimage() const {
  // Options are sorted so that the order a caller listed them in never changes the key; the
  // compiler layer passes only order-independent "--flag=value" options (no paths).
  std::vector<std::string> sorted = options;
  std::sort(sorted.begin(), sorted.end());

  std::string out;
  out.reserve(source.size() + 512);
  append_line(out, "format", std::to_string(kFormatVersion));
  append_line(out, "source", source);
  append_line(out, "name_expression", name_expression);
  append_line(out, "template_digest", template_digest);
  for (const std::string& option : sorted) append_line(out, "option", option);
  append_line(out, "target", target);
  append_line(out, "output_kind", output_kind);
  append_line(out, "compiler", compiler);
  return out;
}

std::string preimage_unescape(std::string_view escaped) {
  std::string out;
  out.reserve(escaped.size());
  for (size_t i = 0; i < escaped.size(); ++i) {
    if (escaped[i] != '\\' || i + 1 == escaped.size()) {
      out += escaped[i];
      continue;
    }
    const char next = escaped[++i];
    switch (next) {
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'x': {
        const int hi = i + 1 < escaped.size() ? hex_value(escaped[i + 1]) : -1;
        const int lo = i + 2 < escaped.size() ? hex_value(escaped[i + 2]) : -1;
        if (hi < 0 || lo < 0) {
          out += "\\x";  // not our escape: keep it as written
        } else {
          out += static_cast<char>(hi * 16 + lo);
          i += 2;
        }
        break;
      }
      default:
        out += next;  // "\\" and anything unexpected
    }
  }
  return out;
}

}  // namespace normjit::cache
