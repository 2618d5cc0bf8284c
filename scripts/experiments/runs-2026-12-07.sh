#!/usr/bin/env bash
# The GPU runs prepared in session 51 (2026-12-03; performance-notes, "The slab kernel's values in
# registers and its relaxed arrive ..."), run in session 52 (performance-notes, "Single f32 -> bf16
# conversions by one instruction ..."): cvt and nhwcs landed in f496406 (their patches apply to
# 417a707, not after), slabl was not kept. The library (a patch of 6bc05df):
#   scripts/experiments/build.sh slab-lanes slabl
#        (NJX_SLAB_LANES=1: LayerNorm's G threads of a position adjacent lanes of a warp, their
#        sums by shuffles, no block barrier before the exchange; NJX_SLAB_BULKY=1: y written
#        into the slab in place and stored by one bulk copy)
# and build-gpu (this checkout, for its gpu_tests). On the GPU machine (carry build-gpu
# .devcarry/slabl):
#   bash scripts/experiments/runs-2026-12-07.sh slabl   the knobs alone and together beside the
#        plan on scripts/specs/slab-modes.txt, 3 rounds (~2 minutes; timing), then the channel
#        forms' GPU tests over .devcarry/slabl with both knobs (3 shards, ~2 minutes)
#   bash scripts/experiments/runs-2026-12-07.sh nhwcs   channels-last GroupNorm with 1, 2 or 4 of a
#        thread's held positions in shared memory (NJX_NHWC_SMEM) beside the plan on
#        scripts/specs/groupnorm-silu-nhwc.txt, 3 rounds (~1.5 minutes; timing), then the
#        channels-last tests with 2 (~1 minute), over .devcarry/nhwcs
#        (scripts/experiments/build.sh nhwc-smem nhwcs; carry build-gpu .devcarry/nhwcs)
#   bash scripts/experiments/runs-2026-12-07.sh cvt   single f32 -> bf16 conversions by one
#        cvt.rn.bf16.f32 (NJX_BF16_CVT=1) beside the plan on scripts/specs/bf16-scalar-stores.txt,
#        3 rounds (~1 minute; timing), then the forward GPU tests and two backward ones with it
#        (3 shards, ~4 minutes), over .devcarry/cvt (scripts/experiments/build.sh bf16-cvt cvt;
#        carry build-gpu .devcarry/cvt)
set -uo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"

SLAB_FILTERS=(
  'Variants.ChannelsSlab*:LayerNormChannels.*:Capture*'
  'Variants.Nhwc*:Variants.Activation*:Ops.FixedShapes*'
  'RmsNormChannels*:Variants.SaveStats*:Variants.Fp8*:BackwardChannelsGpu.*Channel*'
)

case "${1:-}" in
  slabl)
    ab_variants slabl 200 3 scripts/specs/slab-modes.txt .devcarry/slabl \
      lanes=NJX_SLAB_LANES=1 bulky=NJX_SLAB_BULKY=1 both=NJX_SLAB_LANES=1,NJX_SLAB_BULKY=1
    test_shards slabl .devcarry/slabl "NJX_SLAB_LANES=1 NJX_SLAB_BULKY=1" 150 \
      "${SLAB_FILTERS[@]}" || exit 1
    ;;
  nhwcs)
    ab_variants nhwcs 150 3 scripts/specs/groupnorm-silu-nhwc.txt .devcarry/nhwcs \
      s1=NJX_NHWC_SMEM=1 s2=NJX_NHWC_SMEM=2 s4=NJX_NHWC_SMEM=4
    test_shards nhwcs .devcarry/nhwcs "NJX_NHWC_SMEM=2" 150 'Variants.Nhwc*:Capture*' || exit 1
    ;;
  cvt)
    ab_variants cvt 120 3 scripts/specs/bf16-scalar-stores.txt .devcarry/cvt cvt=NJX_BF16_CVT=1
    test_shards cvt .devcarry/cvt "NJX_BF16_CVT=1" 270 'Variants.*' 'Ops.*' \
      'LayerNormChannels.*:RmsNormChannels*:Capture*:Deployment*:BackwardGpu.EveryHidden*:BackwardChannelsGpu.GroupNorm*' ||
      exit 1
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
