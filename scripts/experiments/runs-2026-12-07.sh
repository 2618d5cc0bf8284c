#!/usr/bin/env bash
# The GPU runs prepared in session 51 (2026-12-03; performance-notes, "The slab kernel's values in
# registers and its relaxed arrive ..."). The library (a patch of 6bc05df):
#   scripts/experiments/build.sh slab-lanes slabl
#        (NJX_SLAB_LANES=1: LayerNorm's G threads of a position adjacent lanes of a warp, their
#        sums by shuffles, no block barrier before the exchange; NJX_SLAB_BULKY=1: y written
#        into the slab in place and stored by one bulk copy)
# and build-gpu (this checkout, for its gpu_tests). On the GPU machine (carry build-gpu
# .devcarry/slabl):
#   bash scripts/experiments/runs-2026-12-07.sh slabl   the knobs alone and together beside the
#        plan on scripts/specs/slab-modes.txt, 3 rounds (~2 minutes; timing), then the channel
#        forms' GPU tests over .devcarry/slabl with both knobs (3 shards, ~2 minutes)
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
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
