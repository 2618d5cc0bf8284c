// The template headers, embedded into the library at build time and handed to NVRTC as
// in-memory headers: nothing is read from the source tree at run time.
#pragma once

#include <cstddef>

namespace normjit::templates {

struct Header {
  const char* name;  // include name, "normjit/channels_norm.cuh"
  const char* text;
};

const Header* headers();  // the bundle, header_count() entries
size_t header_count();
const char* bundle_digest();  // SHA-256 (hex) of every name and text: part of each cache key

}  // namespace normjit::templates
