// The entry file format (cache/format.cpp, docs/cache-format.md): its exact bytes, and that
// every truncation, flipped bit or foreign payload is caught.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cache/cache.hpp"
#include "test_util.hpp"

namespace normjit::cache {
namespace {

using testing::read_file;
using testing::same_entry;
using testing::sample_entry;
using testing::write_file;

// The entry pinned by the golden file. Changing it means regenerating the golden file too.
Entry golden_entry() {
  KeyInputs inputs;
  inputs.source = "#include <normjit/rmsnorm_channels.cuh>\n";
  inputs.name_expression = "&normjit::rmsnorm_channels<float, 64, 1024, 4, 32, 8, false>";
  inputs.template_digest = "5d41402abc4b2a76b9719d911017c592";
  inputs.options = {"--gpu-architecture=sm_90", "--std=c++17", "-default-device"};
  inputs.target = "sm_90";
  inputs.output_kind = "cubin+ptx";
  inputs.compiler = "nvrtc 13.0";
  Entry entry;
  entry.preimage = inputs.preimage();
  entry.key = inputs.key();
  entry.metadata = R"({"spec":"op=rmsnorm shape=8,64,32,32 dtype=f32 affine=none eps=1e-05"})";
  for (int b = 0; b < 256; ++b) entry.cubin += static_cast<char>(b);
  entry.ptx = ".version 8.0\n.target sm_90\n";
  return entry;
}

// The golden file sits next to this test in the source tree (NORMJIT_SOURCE_DIR is defined by
// the test's CMake target).
std::string golden_path() {
  const std::string name = "entry_v" + std::to_string(kFormatVersion) + ".bin";
  return std::string(NORMJIT_SOURCE_DIR) + "/tests/unit/cache/golden/" + name;
}

TEST(EntryFormat, MatchesTheGoldenFileByteForByte) {
  const std::string bytes = encode_entry(golden_entry());
  const std::string path = golden_path();
  if (const char* update = std::getenv("NORMJIT_UPDATE_GOLDEN"); update && *update == '1') {
    write_file(path, bytes);
    GTEST_SKIP() << "wrote " << path << " (NORMJIT_UPDATE_GOLDEN=1); commit it";
  }
  ASSERT_TRUE(testing::exists(path))
      << path << " is missing. A new kFormatVersion needs a new golden file: run this test with "
      << "NORMJIT_UPDATE_GOLDEN=1, commit the file and describe the format in "
      << "docs/cache-format.md";
  const std::string golden = read_file(path);
  size_t first_difference = 0;
  while (first_difference < std::min(golden.size(), bytes.size()) &&
         golden[first_difference] == bytes[first_difference]) {
    ++first_difference;
  }
  EXPECT_TRUE(golden == bytes)
      << "The cache entry format changed (first difference at byte " << first_difference
      << "; golden " << golden.size() << " bytes, now " << bytes.size() << ") but kFormatVersion "
      << "is still " << kFormatVersion << ". Old files would be misread: bump kFormatVersion in "
      << "cache/cache.hpp, regenerate the golden file with NORMJIT_UPDATE_GOLDEN=1 and update "
      << "docs/cache-format.md.";
}

// What this version wrote must stay readable by this version.
TEST(EntryFormat, TheGoldenFileDecodes) {
  const std::string path = golden_path();
  ASSERT_TRUE(testing::exists(path)) << path;
  const Entry expected = golden_entry();
  std::string problem;
  const auto decoded = decode_entry(read_file(path), expected.key, &problem);
  ASSERT_TRUE(decoded) << problem;
  EXPECT_TRUE(same_entry(*decoded, expected));
}

uint64_t le(const std::string& bytes, size_t offset, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i)
    value = value << 8 | static_cast<unsigned char>(bytes[offset + i]);
  return value;
}

// The layout table of docs/cache-format.md, checked field by field.
TEST(EntryFormat, HeaderFieldsSitWhereTheDocumentSays) {
  const Entry entry = sample_entry(3, 100);
  const std::string bytes = encode_entry(entry);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89NJC\r\n\x1a\n", 8));
  EXPECT_EQ(le(bytes, 8, 4), static_cast<uint64_t>(kFormatVersion));
  EXPECT_EQ(bytes.substr(12, 64), entry.key);
  EXPECT_EQ(le(bytes, 76, 8), entry.metadata.size());
  EXPECT_EQ(le(bytes, 84, 8), entry.preimage.size());
  EXPECT_EQ(le(bytes, 92, 8), entry.cubin.size());
  EXPECT_EQ(le(bytes, 100, 8), entry.ptx.size());
  const std::string payload = entry.metadata + entry.preimage + entry.cubin + entry.ptx;
  std::string checksum_hex;
  for (int i = 0; i < 32; ++i) {
    char text[3];
    std::snprintf(text, sizeof(text), "%02x", static_cast<unsigned char>(bytes[108 + i]));
    checksum_hex += text;
  }
  EXPECT_EQ(checksum_hex, sha256_hex(payload));
  EXPECT_EQ(bytes.substr(140), payload);
}

TEST(EntryFormat, RoundTrips) {
  for (size_t cubin_bytes : {size_t{0}, size_t{1}, size_t{4096}}) {
    const Entry entry = sample_entry(1, cubin_bytes);
    std::string problem;
    const auto decoded = decode_entry(encode_entry(entry), entry.key, &problem);
    ASSERT_TRUE(decoded) << problem;
    EXPECT_TRUE(same_entry(*decoded, entry));
  }
}

TEST(EntryFormat, EveryTruncationIsRejected) {
  const Entry entry = sample_entry(2, 64);
  const std::string bytes = encode_entry(entry);
  for (size_t size = 0; size < bytes.size(); ++size) {
    std::string problem;
    EXPECT_FALSE(decode_entry(bytes.substr(0, size), entry.key, &problem)) << size;
    EXPECT_FALSE(problem.empty()) << size;
  }
  std::string problem;
  EXPECT_FALSE(decode_entry("", entry.key, &problem));
  EXPECT_NE(problem.find("empty"), std::string::npos) << problem;
  EXPECT_FALSE(decode_entry(bytes + "x", entry.key, &problem));
  EXPECT_NE(problem.find("trailing"), std::string::npos) << problem;
}

TEST(EntryFormat, EveryFlippedBitIsRejected) {
  const Entry entry = sample_entry(2, 64);
  const std::string bytes = encode_entry(entry);
  size_t accepted = 0;
  for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    std::string flipped = bytes;
    flipped[bit / 8] = static_cast<char>(flipped[bit / 8] ^ (1 << (bit % 8)));
    accepted += decode_entry(flipped, entry.key).has_value();
  }
  EXPECT_EQ(accepted, 0u) << "of " << bytes.size() * 8 << " single-bit flips";
}

TEST(EntryFormat, WrongMagicOrVersionIsRejected) {
  const Entry entry = sample_entry(2);
  std::string bytes = encode_entry(entry);
  std::string problem;
  std::string magic = bytes;
  magic[1] = 'X';
  EXPECT_FALSE(decode_entry(magic, entry.key, &problem));
  EXPECT_NE(problem.find("magic"), std::string::npos) << problem;
  std::string version = bytes;
  version[8] = static_cast<char>(kFormatVersion + 1);
  EXPECT_FALSE(decode_entry(version, entry.key, &problem));
  EXPECT_NE(problem.find("format version " + std::to_string(kFormatVersion + 1)), std::string::npos)
      << problem;
}

TEST(EntryFormat, AnotherKeysEntryIsRejected) {
  const Entry a = sample_entry(1), b = sample_entry(2);
  std::string problem;
  // A whole file under the wrong name: the header names the other key.
  EXPECT_FALSE(decode_entry(encode_entry(a), b.key, &problem));
  EXPECT_NE(problem.find(a.key), std::string::npos) << problem;
  // Another key's payload behind a header with the right key and a matching checksum: only
  // the hash of the stored preimage gives it away.
  Entry forged = a;
  forged.key = b.key;
  EXPECT_FALSE(decode_entry(encode_entry(forged), b.key, &problem));
  EXPECT_NE(problem.find("preimage"), std::string::npos) << problem;
}

}  // namespace
}  // namespace normjit::cache
