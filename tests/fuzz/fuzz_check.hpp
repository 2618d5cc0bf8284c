// What the fuzz targets share: a property check that aborts (the fuzzer's and the corpus
// replay's signal of a bug) with the property's text, whatever the build's NDEBUG.
#pragma once

#include <cstdio>
#include <cstdlib>

#define NORMJIT_FUZZ_CHECK(cond)                                                              \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "fuzz: property failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)
