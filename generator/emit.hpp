// emit(): the entry translation unit NVRTC compiles for one plan.
// Pure and deterministic: equal plans give byte-identical text.
#pragma once

#include <string>

#include "generator/plan.hpp"

namespace normjit {

struct EmittedKernel {
  std::string source;           // includes the template header, instantiates the kernel
  std::string name_expression;  // handed to nvrtcAddNameExpression
};

EmittedKernel emit(const KernelPlan& plan);

}  // namespace normjit
