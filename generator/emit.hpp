// emit(): the entry translation unit NVRTC compiles for one plan: the kernel's configuration
// (one struct of named constants) and the instantiation of its template with it. The only
// place that writes source text. Pure and deterministic: equal plans give byte-identical text.
#pragma once

#include <string>

#include "generator/plan.hpp"

namespace normjit {

struct EmittedKernel {
  std::string source;           // the configuration, and the kernel instantiated with it
  std::string name_expression;  // handed to nvrtcAddNameExpression
  std::string kernel;           // the kernel as C++ names it: "normjit::row_split<normjit::...>"
};

EmittedKernel emit(const KernelPlan& plan);

// The type name of a storage dtype inside the templates ("float", "normjit::half_t", ...).
const char* template_type(Dtype dtype);

}  // namespace normjit
