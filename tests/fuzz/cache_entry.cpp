// Fuzz target: the cache's entry file format (cache/format.cpp, docs/cache-format.md), which
// every process reads from directories others may write. The first byte picks a mode:
//   even: the rest is an entry file as found on disk, decoded under the key its header names:
//         decode_entry never crashes or reads past the bytes; what it accepts encodes back to
//         the same bytes. Also parse_byte_size (NORMJIT_CACHE_MAX_BYTES) and
//         preimage_unescape on the same bytes: no crash.
//   odd:  the rest is cut into an entry's four payloads (metadata, preimage, cubin, PTX) and
//         the last 5 bytes pick a byte of the encoded file to change (position, xor) or a
//         length to cut it to: the encoded entry decodes to itself, and every changed or cut
//         file is refused with a reason, never taken for an entry.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cache/cache.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

using normjit::cache::Entry;

constexpr size_t kKeyOffset = 12;  // magic (8 bytes) and version (4): docs/cache-format.md
constexpr size_t kKeyBytes = 64;

void as_found_on_disk(std::string_view bytes) {
  const std::string key(bytes.size() >= kKeyOffset + kKeyBytes ? bytes.substr(kKeyOffset, kKeyBytes)
                                                               : std::string_view{});
  std::string problem;
  const auto entry = normjit::cache::decode_entry(bytes, key, &problem);
  if (entry) {
    NORMJIT_FUZZ_CHECK(normjit::cache::encode_entry(*entry) == bytes);
  } else {
    NORMJIT_FUZZ_CHECK(!problem.empty());
  }
  if (const auto size = normjit::cache::parse_byte_size(bytes)) {
    (void)*size;
  }
  (void)normjit::cache::preimage_unescape(bytes);
}

void encoded_then_damaged(std::string_view bytes) {
  if (bytes.size() < 5) return;
  const std::string_view damage = bytes.substr(bytes.size() - 5);
  bytes.remove_suffix(5);
  // Four payloads: lengths from the first 4 bytes, each a share of what is left.
  if (bytes.size() < 4) return;
  size_t cut[4];
  for (int i = 0; i < 4; ++i) cut[i] = static_cast<unsigned char>(bytes[i]);
  bytes.remove_prefix(4);
  std::string_view parts[4];
  for (int i = 0; i < 3; ++i) {
    const size_t n = bytes.empty() ? 0 : cut[i] % (bytes.size() + 1);
    parts[i] = bytes.substr(0, n);
    bytes.remove_prefix(n);
  }
  parts[3] = bytes;
  Entry entry;
  entry.metadata.assign(parts[0]);
  entry.preimage.assign(parts[1]);
  entry.cubin.assign(parts[2]);
  entry.ptx.assign(parts[3]);
  entry.key = normjit::cache::sha256_hex(entry.preimage);
  const std::string file = normjit::cache::encode_entry(entry);

  const auto decoded = normjit::cache::decode_entry(file, entry.key);
  NORMJIT_FUZZ_CHECK(decoded.has_value());
  NORMJIT_FUZZ_CHECK(decoded->key == entry.key && decoded->metadata == entry.metadata &&
                     decoded->preimage == entry.preimage && decoded->cubin == entry.cubin &&
                     decoded->ptx == entry.ptx);
  // Under another key: refused (a renamed or copied file).
  std::string other = entry.key;
  other[0] = other[0] == '0' ? '1' : '0';
  NORMJIT_FUZZ_CHECK(!normjit::cache::decode_entry(file, other).has_value());

  const uint32_t where = static_cast<unsigned char>(damage[0]) |
                         static_cast<unsigned char>(damage[1]) << 8 |
                         static_cast<uint32_t>(static_cast<unsigned char>(damage[2])) << 16;
  const auto flip = static_cast<unsigned char>(damage[3]);
  const bool truncate = (static_cast<unsigned char>(damage[4]) & 1) != 0;
  std::string damaged = file;
  if (truncate) {
    damaged.resize(where % file.size());  // shorter by at least one byte
  } else {
    if (flip == 0) return;  // no change
    damaged[where % file.size()] = static_cast<char>(damaged[where % file.size()] ^ flip);
  }
  std::string problem;
  NORMJIT_FUZZ_CHECK(!normjit::cache::decode_entry(damaged, entry.key, &problem).has_value());
  NORMJIT_FUZZ_CHECK(!problem.empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    as_found_on_disk(bytes);
  } else {
    encoded_then_damaged(bytes);
  }
  return 0;
}
