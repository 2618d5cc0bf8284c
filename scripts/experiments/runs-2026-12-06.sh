#!/usr/bin/env bash
# The GPU runs prepared in session 50 (2026-12-03; performance-notes, "The slab kernel of small
# odd maps: ..."). The library (a patch of 42563ac):
#   scripts/experiments/build.sh slab-modes slab
#        (NJX_SLAB_MODE=1: LayerNorm's statistics in one cluster exchange; =2: no exchange, wrong
#        output; =3: y = x through the slab, wrong output; =4: as 3 without clusters)
# and build-gpu (this checkout). On the GPU machine (carry build-gpu .devcarry/slab):
#   bash scripts/experiments/runs-2026-12-06.sh slab   the slab kernel in modes 1-4 beside the plan
#        on scripts/specs/slab-modes.txt, 3 rounds (~1.5 minutes; timing only), then the channel
#        forms' GPU tests over .devcarry/slab with NJX_SLAB_MODE=1 (2 shards, ~1 minute)
set -uo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"

SLAB_FILTERS=(
  'Variants.ChannelsSlab*:LayerNormChannels.*:Capture*'
  'Variants.Nhwc*:Variants.Activation*:Ops.FixedShapes*'
)

case "${1:-}" in
  slab)
    ab_variants slab 150 3 scripts/specs/slab-modes.txt .devcarry/slab \
      one=NJX_SLAB_MODE=1 noexch=NJX_SLAB_MODE=2 copy=NJX_SLAB_MODE=3 nocl=NJX_SLAB_MODE=4
    test_shards slab .devcarry/slab "NJX_SLAB_MODE=1" 150 "${SLAB_FILTERS[@]}" || exit 1
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
