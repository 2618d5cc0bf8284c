// A prewarm manifest for the tool tests, written from canonical spec texts.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normjit/spec.hpp"

namespace normjit::testing {

// The JSON manifest listing these specs (op, shape, dtype, affine of each).
inline std::string manifest_of(const std::vector<std::string>& specs) {
  nlohmann::json manifest = nlohmann::json::array();
  for (const std::string& text : specs) {
    const NormSpec spec = NormSpec::parse(text);
    manifest.push_back({{"op", to_string(spec.op)},
                        {"shape", spec.shape},
                        {"dtype", to_string(spec.dtype)},
                        {"affine", to_string(spec.affine)}});
  }
  return manifest.dump(2);
}

}  // namespace normjit::testing
