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
#   bash scripts/experiments/runs-2026-12-06.sh slab2   the slab kernel's epilogue in the sums'
#        layout (NJX_SLAB_EPI=1: element stores; 2: through the slab), alone and with one
#        exchange (NJX_SLAB_MODE=1), beside the plan on scripts/specs/slab-modes.txt, 3 rounds
#        (~2 minutes; timing), then the channel forms' GPU tests over .devcarry/slab with
#        one exchange and each epilogue (4 shards, ~1 minute)
#   bash scripts/experiments/runs-2026-12-06.sh slabt   the slab kernel of 77f1aec in CTAs of 512 and
#        1024 threads (NJX_SLAB_THREADS) beside the plan's 256, on scripts/specs/slab-modes.txt,
#        3 rounds (~1 minute; timing), and the channel forms' GPU tests at 512 (2 shards), over
#        .devcarry/slabt (scripts/experiments/build.sh slab-threads slabt)
#   bash scripts/experiments/runs-2026-12-06.sh slabr   the slab kernel of 29c2856 with a thread's
#        values in registers (NJX_SLAB_REG=1) beside the plan, on scripts/specs/slab-modes.txt,
#        3 rounds (~1 minute; timing), then the channel forms' GPU tests with it (2 shards), over
#        .devcarry/slabr (scripts/experiments/build.sh slab-registers slabr)
#   bash scripts/experiments/runs-2026-12-06.sh slabk   the knobs of slab-knobs.patch (registers,
#        relaxed arrive, CTAs of 512, statistics by warps) alone and together beside the plan on
#        scripts/specs/slab-modes.txt, 3 rounds (~4 minutes; timing), then the channel forms' GPU
#        tests with registers, relaxed arrive and CTAs of 512 (2 shards; the winner's own tests
#        next, e.g. test_shards with NJX_SLAB_WARP=1), over .devcarry/slabk
#        (scripts/experiments/build.sh slab-knobs slabk)
#   bash scripts/experiments/runs-2026-12-06.sh slab-ncu   Nsight Compute's duration (the kernel
#        alone, no launch) and stall reasons of the slab kernel in modes 0-3 on ConvNeXt's
#        [32, 1024, 7, 7] bf16 LayerNorm2d and of the row kernel on the same bytes as rows
#        ([1568, 1024]) (~1 minute)
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
  slab2)
    ab_variants slab2 200 3 scripts/specs/slab-modes.txt .devcarry/slab \
      e1=NJX_SLAB_EPI=1 e2=NJX_SLAB_EPI=2 one-e1=NJX_SLAB_MODE=1,NJX_SLAB_EPI=1 \
      one-e2=NJX_SLAB_MODE=1,NJX_SLAB_EPI=2
    (test_shards slab-e1 .devcarry/slab "NJX_SLAB_MODE=1 NJX_SLAB_EPI=1" 150 "${SLAB_FILTERS[@]}") &
    (test_shards slab-e2 .devcarry/slab "NJX_SLAB_MODE=1 NJX_SLAB_EPI=2" 150 "${SLAB_FILTERS[@]}") &
    wait
    ;;
  slabt)
    ab_variants slabt 150 3 scripts/specs/slab-modes.txt .devcarry/slabt \
      t512=NJX_SLAB_THREADS=512 t1024=NJX_SLAB_THREADS=1024
    test_shards slabt .devcarry/slabt "NJX_SLAB_THREADS=512" 150 "${SLAB_FILTERS[@]}" || exit 1
    ;;
  slabr)
    ab_variants slabr 150 3 scripts/specs/slab-modes.txt .devcarry/slabr reg=NJX_SLAB_REG=1
    test_shards slabr .devcarry/slabr "NJX_SLAB_REG=1" 150 "${SLAB_FILTERS[@]}" || exit 1
    ;;
  slabk)
    ab_variants slabk 300 3 scripts/specs/slab-modes.txt .devcarry/slabk reg=NJX_SLAB_REG=1 \
      relaxed=NJX_SLAB_RELAXED=1 t512=NJX_SLAB_THREADS=512 warp=NJX_SLAB_WARP=1 \
      warp-relaxed=NJX_SLAB_WARP=1,NJX_SLAB_RELAXED=1 \
      all=NJX_SLAB_REG=1,NJX_SLAB_RELAXED=1,NJX_SLAB_THREADS=512
    test_shards slabk .devcarry/slabk "NJX_SLAB_REG=1 NJX_SLAB_RELAXED=1 NJX_SLAB_THREADS=512" 150 \
      "${SLAB_FILTERS[@]}" || exit 1
    ;;
  slab-ncu)
    metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
    metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active
    for reason in long_scoreboard barrier membar short_scoreboard wait lg_throttle \
      mio_throttle; do
      metrics+=,smsp__average_warps_issue_stalled_${reason}_per_issue_active.ratio
    done
    spec="op=layernorm shape=32,1024,7,7 dtype=bf16 normalized_dims=0 affine=both"
    for m in 0 1 2 3; do
      NJX_SLAB_MODE=$m LD_LIBRARY_PATH=.devcarry/slab NORMJIT_CACHE_DIR=/tmp/slab-ncu-$m \
        timeout 60 "${NCU:-/usr/local/cuda/bin/ncu}" --clock-control none --metrics "$metrics" \
        -k regex:channels_slab --launch-skip 3 -c 1 --csv .devcarry/slab/tools/normjit bench \
        --spec "$spec" --repeat 5 >"$out/slab-ncu-$m.csv" 2>&1
      echo "mode $m"
      grep -E '"(gpu__time|dram__bytes|sm__warps|smsp__average)' "$out/slab-ncu-$m.csv" |
        awk -F'","' '{print "  " $(NF-2) " " $NF}' | tr -d '"'
    done
    LD_LIBRARY_PATH=.devcarry/slab NORMJIT_CACHE_DIR=/tmp/slab-ncu-rows timeout 60 \
      "${NCU:-/usr/local/cuda/bin/ncu}" --clock-control none --metrics "$metrics" \
      -k regex:row --launch-skip 3 -c 1 --csv .devcarry/slab/tools/normjit bench \
      --spec "op=layernorm shape=1568,1024 dtype=bf16 normalized_dims=1 affine=both" \
      --repeat 5 >"$out/slab-ncu-rows.csv" 2>&1
    echo "rows [1568, 1024]"
    grep -E '"(gpu__time|dram__bytes|sm__warps|smsp__average)' "$out/slab-ncu-rows.csv" |
      awk -F'","' '{print "  " $(NF-2) " " $NF}' | tr -d '"'
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
