// The entry file's fixed header (docs/cache-format.md), shared by the codec and the store,
// which reads headers alone to list entries without reading their cubins.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace normjit::cache::detail {

// "\x89NJC\r\n\x1a\n": the high byte catches 7-bit transfers, CR LF catches newline
// translation, ^Z stops DOS `type` (the PNG trick).
constexpr std::string_view kMagic{"\x89NJC\r\n\x1a\n", 8};
constexpr size_t kHeaderBytes = 140;  // magic 8, version 4, key 64, 4 lengths 32, checksum 32
// Larger files are not entries (a cubin is kilobytes to a few megabytes). Every reader checks a
// file's size against this before allocating for it: a sparse file's header can claim any size.
constexpr uint64_t kMaxEntryBytes = uint64_t{1} << 30;

struct Header {
  uint32_t version = 0;
  std::string key;  // 64 hex digits
  uint64_t metadata_bytes = 0, preimage_bytes = 0, cubin_bytes = 0, ptx_bytes = 0;
  std::array<unsigned char, 32> checksum{};  // SHA-256 of metadata, preimage, cubin, ptx

  uint64_t metadata_offset() const { return kHeaderBytes; }
  uint64_t preimage_offset() const { return kHeaderBytes + metadata_bytes; }
};

// Parses the first kHeaderBytes of bytes and checks magic, version, key and that the lengths
// add up to file_size exactly, which is at most kMaxEntryBytes. False (with *problem) when anything
// is off.
bool parse_header(std::string_view bytes, uint64_t file_size, const std::string& expected_key,
                  Header* header, std::string* problem);

// Whether text is 64 lowercase hex digits, the form of every key.
bool is_key(std::string_view text);

}  // namespace normjit::cache::detail
