// explain(): why a request misses, by comparing its preimage with the stored ones.
#include <algorithm>
#include <map>

#include "cache/cache.hpp"

namespace normjit::cache {
namespace {

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    lines.emplace_back(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
  }
  return lines;
}

size_t shared_lines(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::map<std::string_view, int> counts;
  for (const std::string& line : a) ++counts[line];
  size_t shared = 0;
  for (const std::string& line : b) {
    auto it = counts.find(line);
    if (it != counts.end() && it->second > 0) {
      --it->second;
      ++shared;
    }
  }
  return shared;
}

// Lines of a that b lacks, counting repeats, in a's order.
std::vector<std::string> only_in(const std::vector<std::string>& a,
                                 const std::vector<std::string>& b) {
  std::map<std::string_view, int> counts;
  for (const std::string& line : b) ++counts[line];
  std::vector<std::string> out;
  for (const std::string& line : a) {
    auto it = counts.find(line);
    if (it != counts.end() && it->second > 0) {
      --it->second;
    } else {
      out.push_back(line);
    }
  }
  return out;
}

std::string shorten(const std::string& text) {
  constexpr size_t kMax = 120;
  if (text.size() <= kMax) return text;
  return text.substr(0, kMax) + "... (" + std::to_string(text.size()) + " chars)";
}

// The sources are one escaped line each; report the first line where they part.
std::string source_difference(const std::vector<std::string>& missing,
                              const std::vector<std::string>& extra) {
  constexpr std::string_view kField = "source: ";
  auto find = [&](const std::vector<std::string>& lines) -> const std::string* {
    for (const std::string& line : lines) {
      if (line.compare(0, kField.size(), kField) == 0) return &line;
    }
    return nullptr;
  };
  const std::string* wanted = find(missing);
  const std::string* stored = find(extra);
  if (wanted == nullptr || stored == nullptr) return "";
  const auto a = split_lines(preimage_unescape(std::string_view(*wanted).substr(kField.size())));
  const auto b = split_lines(preimage_unescape(std::string_view(*stored).substr(kField.size())));
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string left = i < a.size() ? a[i] : "<end of source>";
    const std::string right = i < b.size() ? b[i] : "<end of source>";
    if (left != right) {
      return "source line " + std::to_string(i + 1) + ": requested '" + shorten(left) +
             "', nearest entry has '" + shorten(right) + "'";
    }
  }
  return "the sources differ only in a trailing newline";
}

// The source's own lines of a preimage (which holds the source as one escaped line); empty
// where it has none.
std::vector<std::string> source_lines(const std::vector<std::string>& preimage_lines) {
  constexpr std::string_view kField = "source: ";
  for (const std::string& line : preimage_lines) {
    if (line.compare(0, kField.size(), kField) == 0) {
      return split_lines(preimage_unescape(std::string_view(line).substr(kField.size())));
    }
  }
  return {};
}

}  // namespace

Explanation explain(const std::vector<EntryInfo>& entries, const std::string& preimage) {
  Explanation out;
  out.key = sha256_hex(preimage);
  const std::vector<std::string> wanted = split_lines(preimage);
  out.total_lines = wanted.size();
  const EntryInfo* nearest = nullptr;
  // Entries that differ from the request in as many preimage lines (the source and the kernel's
  // name, typically: another op or dtype alike) are told apart by the source's own lines shared,
  // so that rmsnorm bf16 is nearer to rmsnorm f16 than layernorm f32 is. Computed on ties only.
  const std::vector<std::string> wanted_source = source_lines(wanted);
  size_t nearest_source = 0;
  bool nearest_source_known = false;
  for (const EntryInfo& info : entries) {
    if (!info.valid || info.preimage.empty()) continue;
    if (info.key == out.key) {
      if (!out.found) out.found = info;  // entries come in layer order: the first one serves
      continue;
    }
    const std::vector<std::string> lines = split_lines(info.preimage);
    const size_t shared = shared_lines(wanted, lines);
    if (nearest == nullptr || shared > out.shared_lines) {
      nearest = &info;
      out.shared_lines = shared;
      nearest_source_known = false;
    } else if (shared == out.shared_lines) {
      if (!nearest_source_known) {
        nearest_source = shared_lines(wanted_source, source_lines(split_lines(nearest->preimage)));
        nearest_source_known = true;
      }
      // Still tied: the entry listed first, i.e. the earlier layer.
      if (const size_t source = shared_lines(wanted_source, source_lines(lines));
          source > nearest_source) {
        nearest = &info;
        nearest_source = source;
      }
    }
  }
  if (nearest != nullptr) {
    out.nearest = *nearest;
    const std::vector<std::string> stored = split_lines(nearest->preimage);
    out.missing = only_in(wanted, stored);
    out.extra = only_in(stored, wanted);
    out.source_difference = source_difference(out.missing, out.extra);
  }
  return out;
}

}  // namespace normjit::cache
