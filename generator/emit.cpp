#include "generator/emit.hpp"

#include <sstream>

namespace normjit {
namespace {

// The template of each strategy: its header and function.
struct Template {
  const char* header;
  const char* function;
};

Template template_of(Strategy strategy) {
  switch (strategy) {
    case Strategy::kChannels:
      return {"normjit/channels_norm.cuh", "normjit::channels_norm"};
    case Strategy::kRowRegisters:
      return {"normjit/row_norm.cuh", "normjit::row_norm"};
    case Strategy::kRowSplit:
      return {"normjit/row_split.cuh", "normjit::row_split"};
    case Strategy::kRowStream:
      return {"normjit/row_stream.cuh", "normjit::row_stream"};
    case Strategy::kRowBackward:
      return {"normjit/row_backward.cuh", "normjit::row_backward"};
    case Strategy::kGroupBackward:
      return {"normjit/group_backward.cuh", "normjit::group_backward"};
    case Strategy::kChannelsBackward:
      return {"normjit/channels_backward.cuh", "normjit::channels_backward"};
    case Strategy::kGroupNhwc:
      return {"normjit/group_nhwc.cuh", "normjit::group_nhwc"};
    case Strategy::kRowSplitBackward:
      return {"normjit/row_split_backward.cuh", "normjit::row_split_backward"};
    case Strategy::kChannelsSlab:
      return {"normjit/channels_slab.cuh", "normjit::channels_slab"};
    case Strategy::kGroupNhwcBackward:
      return {"normjit/group_nhwc_backward.cuh", "normjit::group_nhwc_backward"};
  }
  return {"?", "?"};
}

// The configuration's name, for people reading a profile or PTX: the op, x's dtype, the sizes
// and the variants, e.g. layernorm_f32_h4194304 or rmsnorm_bf16_h4096_res_bf16_to_e4m3.
std::string config_name(const Problem& pr) {
  std::ostringstream os;
  os << to_string(pr.op) << "_" << to_string(pr.x);
  if (pr.channel_form || (pr.nhwc && pr.groups > 0)) {
    os << "_c" << pr.channels;
    if (pr.groups > 0) os << "_g" << pr.groups;
    os << "_s" << pr.spatial;
  } else if (pr.groups > 0) {
    os << "_g" << pr.groups << "_h" << pr.row_length;
  } else {
    os << "_h" << pr.row_length;
  }
  if (pr.residual) os << "_res_" << to_string(*pr.residual);
  if ((pr.weight || pr.bias) && pr.param != pr.x) os << "_param_" << to_string(pr.param);
  if (pr.weight_offset != 0.0) os << "_offset";
  if (pr.activation != Activation::kNone) os << "_" << to_string(pr.activation);
  if (pr.y != pr.x) os << "_to_" << to_string(pr.y);
  if (pr.save_stats) os << "_stats";
  // Channels-last GroupNorm has its own kernel. The channel forms whose items are contiguous
  // rows of C (nhwc, or one position per item in either layout) run the row kernel over
  // contiguous rows (kContiguousRows), the same source for every such spec of one C: one name,
  // so one cache entry. Their backward is the trailing form's, and takes its name.
  if (pr.nhwc && pr.groups > 0) {
    os << "_nhwc";
  } else if (pr.channel_rows && !pr.backward) {
    os << "_contiguous";
  }
  if (pr.backward) os << "_backward";
  return os.str();
}

// Writes `static constexpr <type> <name> = <value>;` lines of one struct.
class Fields {
 public:
  explicit Fields(std::ostringstream& os) : os_(os) {}
  void type(const char* name, Dtype dtype) {
    os_ << "  using " << name << " = " << template_type(dtype) << ";\n";
  }
  void flag(const char* name, bool value) {
    os_ << "  static constexpr bool " << name << " = " << (value ? "true" : "false") << ";\n";
  }
  void integer(const char* name, int64_t value) {
    // long long where a size may pass 2^31, int where the templates take one.
    const bool wide = value > 0x7fffffff || value < -0x7fffffff;
    os_ << "  static constexpr " << (wide ? "long long " : "int ") << name << " = " << value
        << ";\n";
  }
  void size(const char* name, int64_t value) {
    os_ << "  static constexpr long long " << name << " = " << value << ";\n";
  }
  void activation(const char* name, Activation value) {
    const char* constant = value == Activation::kSilu   ? "kSilu"
                           : value == Activation::kGelu ? "kGelu"
                                                        : "kNone";
    os_ << "  static constexpr normjit::Activation " << name
        << " = normjit::Activation::" << constant << ";\n";
  }
  void real(const char* name, double value) {
    // The shortest text that reads back as the double; the kernel takes it as a float.
    os_ << "  static constexpr float " << name << " = " << format_double(value) << ";\n";
  }

 private:
  std::ostringstream& os_;
};

// What every kernel computes (the problem): its dtypes and fused extras.
void problem_fields(const Problem& pr, Fields& f) {
  f.type("X", pr.x);
  f.type("Y", pr.y);
  f.type("Param", pr.param);
  f.type("Residual", pr.held());
  f.flag("kWeight", pr.weight);
  f.real("kWeightOffset", pr.weight_offset);
  f.activation("kActivation", pr.activation);
  f.flag("kSaveStats", pr.save_stats);
}

// What both channel-form kernels (registers, slab) are told first: the operator, the bias and
// the [C, S] of an item.
void channel_form_fields(const Problem& pr, Fields& f) {
  f.flag("kRms", pr.op == Op::kRmsNorm);
  f.flag("kBias", pr.bias);
  f.integer("kChannels", pr.channels);
  f.size("kSpatial", pr.spatial);
}

void channels_fields(const KernelPlan& p, Fields& f) {
  channel_form_fields(p.problem, f);
  f.integer("kThreadsX", p.block_x);
  f.integer("kThreadsY", p.block_y);
  f.integer("kVec", p.vec);
  f.flag("kCached", p.cached);
  f.size("kBlocksPerItem", p.blocks_per_item);
}

void channels_slab_fields(const KernelPlan& p, Fields& f) {
  channel_form_fields(p.problem, f);
  f.integer("kThreads", p.block_x);
  f.integer("kCluster", p.blocks_per_item);
  f.integer("kVec", p.vec);
  f.integer("kGroups", p.sums_per_position);
  f.integer("kStoreVec", p.slab_store_vec);
  f.integer("kHeld", p.slab_held);
  f.size("kBlocksPerItem", p.blocks_per_item);
  f.size("kDynamicSmemBytes", p.smem_bytes);
}

void row_fields(const KernelPlan& p, Fields& f) {
  const Problem& pr = p.problem;
  f.flag("kRms", pr.op == Op::kRmsNorm);
  f.flag("kBias", pr.bias);
  f.flag("kResidual", pr.residual.has_value());
  f.size("kRowLength", pr.row_length);
  f.integer("kGroups", pr.groups);
  f.size("kSpatial", pr.spatial);
  f.integer("kChannelsPerGroup", pr.groups > 0 ? pr.channels / pr.groups : 0);
  f.integer("kThreads", p.block_x);
  f.integer("kVec", p.vec);
  f.integer("kVectors", p.vectors);
  switch (p.strategy) {
    case Strategy::kRowRegisters:
      f.integer("kRowsPerBlock", p.rows_per_block);
      f.flag("kParamsAhead", p.params_ahead);
      f.flag("kPinParams", p.pin_params);
      f.flag("kEarlyResidualStore", p.early_h);
      f.size("kEvictFirstRows", p.evict_first_rows);
      f.flag("kPrefetchRow", p.prefetch_row);
      f.integer("kMinBlocksPerSm", p.min_blocks_per_sm);
      break;
    case Strategy::kRowSplit:
      f.size("kChunks", p.split_chunks);
      f.integer("kBlocksPerSm", p.split_blocks_per_sm);
      f.flag("kStaged", p.staged);
      f.integer("kResidentVectors", p.resident_vectors);
      f.integer("kPrefetch", p.prefetch);
      f.size("kDynamicSmemBytes", p.smem_bytes);
      f.size("kWorkspaceSlotFloats", p.workspace_slot_floats());
      break;
    case Strategy::kRowStream:
      f.size("kParts", p.split_chunks);
      f.size("kSegment", p.segment);
      f.size("kWorkspaceSlotFloats", p.workspace_slot_floats());
      break;
    case Strategy::kChannels:
    case Strategy::kChannelsSlab:
    case Strategy::kRowBackward:
    case Strategy::kGroupBackward:
    case Strategy::kChannelsBackward:
    case Strategy::kGroupNhwc:
    case Strategy::kRowSplitBackward:
    case Strategy::kGroupNhwcBackward:
      break;
  }
  // The channel forms in nhwc or of S = 1: rows of C, one after another (a constant stride, not
  // the launch's row layout).
  if (pr.channel_rows) f.flag("kContiguousRows", true);
}

// What the GroupNorm kernels of [N, C, *spatial] are told of an item: C, G, C / G and S.
void group_shape_fields(const Problem& pr, Fields& f) {
  f.integer("kChannels", pr.channels);
  f.integer("kGroups", pr.groups);
  f.integer("kChannelsPerGroup", pr.channels / pr.groups);
  f.size("kSpatial", pr.spatial);
}

// The channels-last GroupNorm kernel's configuration (group_nhwc.cuh).
void group_nhwc_fields(const KernelPlan& p, Fields& f) {
  const Problem& pr = p.problem;
  f.flag("kBias", pr.bias);
  group_shape_fields(pr, f);
  f.integer("kTiles", p.blocks_per_item);
  f.integer("kThreadsX", p.block_x);
  f.integer("kThreadsY", p.block_y);
  f.integer("kVec", p.vec);
  f.integer("kVectors", p.vectors);
  f.integer("kPieces", p.pieces);
  f.integer("kAside", p.nhwc_aside);
  f.size("kDynamicSmemBytes", p.smem_bytes);
  f.size("kChunks", p.split_chunks);
  f.size("kSegment", p.segment);
  f.integer("kBlocksPerSm", p.split_blocks_per_sm);
  f.size("kWorkspaceSlotFloats", p.workspace_slot_floats());
}

// What every backward configuration starts with: dy and dx take x's dtype, dweight and dbias
// the parameters'; the forward's affine step (kRms where the kernel serves both operators) and
// its activation.
void backward_dtypes_and_affine(const Problem& pr, bool rms_flag, Fields& f) {
  f.type("X", pr.x);
  f.type("Param", pr.param);
  if (rms_flag) f.flag("kRms", pr.op == Op::kRmsNorm);
  f.flag("kWeight", pr.weight);
  f.flag("kBias", pr.bias);
  f.real("kWeightOffset", pr.weight_offset);
  f.activation("kActivation", pr.activation);
}

// The backward kernel's configuration (row_backward.cuh): dy and dx take x's dtype, dweight
// and dbias the parameters'; with a residual, dh (x's dtype) is added to dx.
void backward_fields(const KernelPlan& p, Fields& f) {
  const Problem& pr = p.problem;
  backward_dtypes_and_affine(pr, /*rms_flag=*/true, f);
  f.flag("kResidual", pr.residual.has_value());
  f.size("kRowLength", pr.row_length);
  f.integer("kThreads", p.block_x);
  f.integer("kRowsPerBlock", p.rows_per_block);
  f.integer("kVec", p.vec);
  f.integer("kVectors", p.vectors);
  f.flag("kPrefetchNextRow", p.prefetch != 0);
  f.flag("kNextRowInRegisters", p.prefetch == 2);
  f.flag("kHoldPacked", p.hold_packed);
  f.flag("kReloadWeight", p.reload_weight);
  f.flag("kSharedBiasSums", p.shared_sums);
  f.flag("kTeamBarriers", p.team_barriers);
  f.flag("kQuadFinalSum", p.quad_final_sum);
  f.flag("kLateResidual", p.late_dh);
  f.integer("kMinBlocksPerSm", p.min_blocks_per_sm);
  f.size("kDynamicSmemBytes", p.smem_bytes);
  f.size("kWorkspaceHeaderFloats", p.workspace_header_floats());
  f.size("kWorkspaceSlotFloats", p.workspace_slot_floats());
}

// The split backward kernel's configuration (row_split_backward.cuh): dy and dx take x's dtype,
// dweight and dbias the parameters'.
void split_backward_fields(const KernelPlan& p, Fields& f) {
  const Problem& pr = p.problem;
  backward_dtypes_and_affine(pr, /*rms_flag=*/true, f);
  f.flag("kResidual", pr.residual.has_value());
  f.size("kRowLength", pr.row_length);
  f.integer("kThreads", p.block_x);
  f.integer("kBlocksPerSm", p.split_blocks_per_sm);
  f.integer("kVec", p.vec);
  f.integer("kVectors", p.vectors);
  f.size("kParts", p.split_chunks);
  f.size("kSegment", p.segment);
  f.size("kPieces", p.pieces);
  f.integer("kWaveRows", int(p.wave_rows));
  f.flag("kReloadWeight", p.reload_weight);
  f.flag("kSharedBiasSums", p.shared_sums);
  f.integer("kStepsAhead", p.prefetch);
  f.size("kWorkspaceHeaderFloats", p.workspace_header_floats());
  f.size("kWorkspaceSlotFloats", p.workspace_slot_floats());
}

// The groupnorm backward kernel's configuration (group_backward.cuh).
void group_backward_fields(const KernelPlan& p, Fields& f) {
  const Problem& pr = p.problem;
  backward_dtypes_and_affine(pr, /*rms_flag=*/false, f);
  group_shape_fields(pr, f);
  f.integer("kThreads", p.block_x);
  f.integer("kRowsPerBlock", p.rows_per_block);
  f.integer("kVec", p.vec);
  f.integer("kVectors", p.vectors);
  f.integer("kChunks", int(p.chunks));
  f.integer("kChunksAhead", p.chunks_ahead);
  f.size("kUnitsPerChannel", p.units_per_channel);
  f.size("kWaveRows", p.wave_rows);
  f.flag("kPrefetchNextWave", p.prefetch != 0);
  f.integer("kMinBlocksPerSm", p.min_blocks_per_sm);
  f.flag("kLoadAhead", p.load_ahead);
  f.size("kWorkspaceFloats", p.workspace_floats(0));
}

// The channels-last groupnorm backward kernel's configuration (group_nhwc_backward.cuh).
void group_nhwc_backward_fields(const KernelPlan& p, Fields& f) {
  const Problem& pr = p.problem;
  backward_dtypes_and_affine(pr, /*rms_flag=*/false, f);
  group_shape_fields(pr, f);
  f.integer("kThreadsX", p.block_x);
  f.integer("kThreadsY", p.block_y);
  f.integer("kVec", p.vec);
  f.integer("kPositions", int(p.vectors));
  f.size("kUnitsPerItem", p.units_per_channel);
  f.size("kWaveItems", p.wave_rows);
  f.integer("kMinBlocksPerSm", p.min_blocks_per_sm);
  f.size("kWorkspaceFloats", p.workspace_floats(0));
}

// The channel-form backward kernel's configuration (channels_backward.cuh).
void channels_backward_fields(const KernelPlan& p, Fields& f) {
  const Problem& pr = p.problem;
  backward_dtypes_and_affine(pr, /*rms_flag=*/true, f);
  f.integer("kChannels", pr.channels);
  f.size("kSpatial", pr.spatial);
  f.integer("kThreadsX", p.block_x);
  f.integer("kThreadsY", p.block_y);
  f.integer("kVec", p.vec);
  f.flag("kCached", p.cached);
  f.size("kBlocksPerItem", p.blocks_per_item);
  f.size("kWorkspaceHeaderFloats", p.workspace_header_floats());
  f.size("kWorkspaceSlotFloats", p.workspace_slot_floats());
}

}  // namespace

const char* template_type(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32:
      return "float";
    case Dtype::kF16:
      return "normjit::half_t";
    case Dtype::kBF16:
      return "normjit::bf16_t";
    case Dtype::kE4M3:
      return "normjit::e4m3_t";
    case Dtype::kE5M2:
      return "normjit::e5m2_t";
  }
  return "?";
}

EmittedKernel emit(const KernelPlan& plan) {
  const Template t = template_of(plan.strategy);
  const std::string config = "normjit::" + config_name(plan.problem);
  std::ostringstream os;
  os << "// Generated by normjit. Strategy: " << to_string(plan.strategy) << ".\n"
     << "#include \"" << t.header << "\"\n\n"
     << "namespace normjit {\n\n"
     << "// The kernel's configuration: what it computes (the spec without its batch) and how\n"
     << "// (the plan). " << t.header << " says what each name means.\n"
     << "struct " << config_name(plan.problem) << " {\n";
  Fields fields(os);
  if (plan.strategy == Strategy::kRowBackward) {
    backward_fields(plan, fields);
  } else if (plan.strategy == Strategy::kRowSplitBackward) {
    split_backward_fields(plan, fields);
  } else if (plan.strategy == Strategy::kGroupBackward) {
    group_backward_fields(plan, fields);
  } else if (plan.strategy == Strategy::kGroupNhwcBackward) {
    group_nhwc_backward_fields(plan, fields);
  } else if (plan.strategy == Strategy::kChannelsBackward) {
    channels_backward_fields(plan, fields);
  } else if (plan.strategy == Strategy::kChannels) {
    problem_fields(plan.problem, fields);
    channels_fields(plan, fields);
  } else if (plan.strategy == Strategy::kChannelsSlab) {
    problem_fields(plan.problem, fields);
    channels_slab_fields(plan, fields);
  } else if (plan.strategy == Strategy::kGroupNhwc) {
    problem_fields(plan.problem, fields);
    group_nhwc_fields(plan, fields);
  } else {
    problem_fields(plan.problem, fields);
    row_fields(plan, fields);
  }
  os << "};\n\n"
     << "}  // namespace normjit\n\n";
  EmittedKernel out;
  out.kernel = std::string(t.function) + "<" + config + ">";
  out.name_expression = "&" + out.kernel;
  os << "template __global__ void " << out.kernel << "(normjit::Params);\n";
  out.source = os.str();
  return out;
}

}  // namespace normjit
