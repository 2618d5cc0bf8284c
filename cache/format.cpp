// encode_entry / decode_entry: one self-validating file per cache entry.
#include "cache/format.hpp"

#include <openssl/evp.h>

#include <cstring>

#include "cache/cache.hpp"
#include "normjit/error.hpp"

namespace normjit::cache {
namespace detail {
namespace {

void put_u32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

void put_u64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t get_le(std::string_view bytes, size_t offset, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(bytes[offset + i]);
  }
  return value;
}

std::array<unsigned char, 32> payload_checksum(const std::string_view (&parts)[4]) {
  std::array<unsigned char, 32> digest{};
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  unsigned int length = 0;
  bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1;
  for (std::string_view part : parts) {
    ok = ok && EVP_DigestUpdate(ctx, part.data(), part.size()) == 1;
  }
  ok = ok && EVP_DigestFinal_ex(ctx, digest.data(), &length) == 1 && length == 32;
  EVP_MD_CTX_free(ctx);
  if (!ok) throw Error(ErrorCode::kInternal, "OpenSSL SHA-256 of a cache payload failed");
  return digest;
}

}  // namespace

bool is_key(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool parse_header(std::string_view bytes, uint64_t file_size, const std::string& expected_key,
                  Header* header, std::string* problem) {
  auto fail = [&](std::string why) {
    if (problem != nullptr) *problem = std::move(why);
    return false;
  };
  if (file_size == 0) return fail("empty file (0 bytes)");
  if (file_size < kHeaderBytes || bytes.size() < kHeaderBytes) {
    return fail("truncated: " + std::to_string(file_size) + " bytes, shorter than the " +
                std::to_string(kHeaderBytes) + "-byte header");
  }
  if (file_size > kMaxEntryBytes) {
    return fail("implausibly large (" + std::to_string(file_size) + " bytes, entries are at most " +
                std::to_string(kMaxEntryBytes) + ")");
  }
  if (bytes.substr(0, kMagic.size()) != kMagic)
    return fail("not a normjit cache entry (bad magic)");
  header->version = static_cast<uint32_t>(get_le(bytes, 8, 4));
  if (header->version != static_cast<uint32_t>(kFormatVersion)) {
    return fail("format version " + std::to_string(header->version) + ", this build reads " +
                std::to_string(kFormatVersion));
  }
  header->key.assign(bytes.substr(12, 64));
  if (!is_key(header->key)) return fail("corrupt header: the key field is not 64 hex digits");
  if (header->key != expected_key) {
    return fail("holds the entry of key " + header->key + " (renamed or copied file)");
  }
  header->metadata_bytes = get_le(bytes, 76, 8);
  header->preimage_bytes = get_le(bytes, 84, 8);
  header->cubin_bytes = get_le(bytes, 92, 8);
  header->ptx_bytes = get_le(bytes, 100, 8);
  std::memcpy(header->checksum.data(), bytes.data() + 108, 32);
  // Each length is bounded by the file size before adding, so the sum cannot overflow.
  const uint64_t lengths[] = {header->metadata_bytes, header->preimage_bytes, header->cubin_bytes,
                              header->ptx_bytes};
  uint64_t total = kHeaderBytes;
  for (uint64_t length : lengths) {
    if (length > file_size) return fail("corrupt header: a length exceeds the file size");
    total += length;
  }
  if (total != file_size) {
    return fail((total > file_size ? "truncated: " : "trailing bytes: ") +
                std::to_string(file_size) + " bytes, the header describes " +
                std::to_string(total));
  }
  return true;
}

}  // namespace detail

std::string encode_entry(const Entry& entry) {
  const std::string_view parts[4] = {entry.metadata, entry.preimage, entry.cubin, entry.ptx};
  std::string out;
  out.reserve(detail::kHeaderBytes + entry.metadata.size() + entry.preimage.size() +
              entry.cubin.size() + entry.ptx.size());
  out += detail::kMagic;
  detail::put_u32(out, static_cast<uint32_t>(kFormatVersion));
  out += entry.key;
  for (std::string_view part : parts) detail::put_u64(out, part.size());
  const auto checksum = detail::payload_checksum(parts);
  out.append(reinterpret_cast<const char*>(checksum.data()), checksum.size());
  for (std::string_view part : parts) out += part;
  return out;
}

std::optional<Entry> decode_entry(std::string_view bytes, const std::string& expected_key,
                                  std::string* problem) {
  detail::Header header;
  if (!detail::parse_header(bytes, bytes.size(), expected_key, &header, problem)) {
    return std::nullopt;
  }
  Entry entry;
  entry.key = header.key;
  size_t offset = detail::kHeaderBytes;
  auto take = [&](uint64_t length) {
    std::string_view part = bytes.substr(offset, length);
    offset += length;
    return part;
  };
  const std::string_view parts[4] = {take(header.metadata_bytes), take(header.preimage_bytes),
                                     take(header.cubin_bytes), take(header.ptx_bytes)};
  if (detail::payload_checksum(parts) != header.checksum) {
    if (problem != nullptr) *problem = "payload checksum mismatch (corrupted bytes)";
    return std::nullopt;
  }
  // The key is the hash of the stored preimage: a payload moved under another key's header
  // has a valid checksum but fails here.
  if (sha256_hex(parts[1]) != header.key) {
    if (problem != nullptr) *problem = "the stored preimage does not hash to the key";
    return std::nullopt;
  }
  entry.metadata.assign(parts[0]);
  entry.preimage.assign(parts[1]);
  entry.cubin.assign(parts[2]);
  entry.ptx.assign(parts[3]);
  return entry;
}

}  // namespace normjit::cache
