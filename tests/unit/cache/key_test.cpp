// The cache key: a SHA-256 of a canonical preimage that holds every compile input and nothing
// else (cache/key.cpp).
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "cache/cache.hpp"
#include "test_util.hpp"

namespace normjit::cache {
namespace {

using testing::sample_inputs;

TEST(Sha256, MatchesTheFips180Vectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(std::string("a\0b", 3)),
            sha256_hex(std::string("a\0b", 3)));  // embedded NUL is data, not a terminator
  EXPECT_NE(sha256_hex(std::string("a\0b", 3)), sha256_hex("a"));
}

// The preimage is documented in docs/cache-format.md; this pins it down line by line.
TEST(Preimage, IsOneLinePerInputWithTheFormatVersionFirst) {
  KeyInputs inputs;
  inputs.source = "line 1\nline\t2\\";
  inputs.name_expression = "&f<float>";
  inputs.template_digest = "abcd";
  inputs.options = {"--std=c++17", "--gpu-architecture=sm_90"};
  inputs.target = "sm_90";
  inputs.output_kind = "cubin+ptx";
  inputs.compiler = "nvrtc 13.0";
  EXPECT_EQ(inputs.preimage(), "format: " + std::to_string(kFormatVersion) +
                                   "\n"
                                   "source: line 1\\nline\\t2\\\\\n"
                                   "name_expression: &f<float>\n"
                                   "template_digest: abcd\n"
                                   "option: --gpu-architecture=sm_90\n"
                                   "option: --std=c++17\n"
                                   "target: sm_90\n"
                                   "output_kind: cubin+ptx\n"
                                   "compiler: nvrtc 13.0\n");
  EXPECT_EQ(inputs.key(), sha256_hex(inputs.preimage()));
  EXPECT_EQ(inputs.key().size(), 64u);
}

TEST(Preimage, OptionOrderDoesNotChangeTheKey) {
  KeyInputs a = sample_inputs(0);
  KeyInputs b = a;
  std::reverse(b.options.begin(), b.options.end());
  ASSERT_NE(a.options, b.options);
  EXPECT_EQ(a.key(), b.key());
}

TEST(Preimage, EveryInputAloneChangesTheKey) {
  const KeyInputs base = sample_inputs(0);
  const std::vector<std::pair<std::string, std::function<void(KeyInputs&)>>> changes = {
      {"source", [](KeyInputs& k) { k.source += " "; }},
      {"name_expression", [](KeyInputs& k) { k.name_expression = "&normjit::other<float>"; }},
      {"template_digest", [](KeyInputs& k) { k.template_digest = "fedcba9876543210"; }},
      {"an added option", [](KeyInputs& k) { k.options.push_back("-lineinfo"); }},
      {"a removed option", [](KeyInputs& k) { k.options.pop_back(); }},
      {"a changed option", [](KeyInputs& k) { k.options[1] = "--std=c++20"; }},
      {"a duplicated option", [](KeyInputs& k) { k.options.push_back(k.options[0]); }},
      {"target sm_90a", [](KeyInputs& k) { k.target = "sm_90a"; }},
      {"target sm_80", [](KeyInputs& k) { k.target = "sm_80"; }},
      {"output_kind", [](KeyInputs& k) { k.output_kind = "cubin"; }},
      {"compiler", [](KeyInputs& k) { k.compiler = "nvrtc 13.1"; }},
  };
  std::set<std::string> keys = {base.key()};
  for (const auto& [what, change] : changes) {
    KeyInputs changed = base;
    change(changed);
    EXPECT_NE(changed.key(), base.key()) << what;
    keys.insert(changed.key());
  }
  EXPECT_EQ(keys.size(), changes.size() + 1) << "two different changes gave one key";
}

// Values are escaped, so no input can impersonate another field: a source that contains a
// newline and "option: ..." must not collide with a real option.
TEST(Preimage, NoInputCanForgeAnotherField) {
  KeyInputs real = sample_inputs(0);
  real.options.push_back("-O0");
  KeyInputs forged = sample_inputs(0);
  forged.template_digest += "\noption: -O0";
  EXPECT_NE(real.key(), forged.key());
  const std::string forged_text = forged.preimage();
  const std::string base_text = sample_inputs(0).preimage();
  EXPECT_EQ(std::count(forged_text.begin(), forged_text.end(), '\n'),
            std::count(base_text.begin(), base_text.end(), '\n'));

  KeyInputs split_a = sample_inputs(0), split_b = sample_inputs(0);
  split_a.options = {"-a -b"};
  split_b.options = {"-a", "-b"};
  EXPECT_NE(split_a.key(), split_b.key());
}

TEST(Preimage, UnescapeUndoesTheEscaping) {
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  for (const std::string& value :
       {std::string("plain"), std::string("a\\nb"), std::string("tab\there\r\n"), every_byte,
        std::string("trailing\\")}) {
    KeyInputs inputs;
    inputs.source = value;
    const std::string preimage = inputs.preimage();
    const size_t start = preimage.find("source: ") + 8;
    const size_t end = preimage.find('\n', start);
    const std::string line = preimage.substr(start, end - start);
    EXPECT_EQ(line.find('\n'), std::string::npos);
    EXPECT_EQ(preimage_unescape(line), value);
  }
}

}  // namespace
}  // namespace normjit::cache
