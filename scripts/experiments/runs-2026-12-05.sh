#!/usr/bin/env bash
# The GPU runs prepared in session 43 (2026-12-02; performance-notes, "The split backward's waves
# ... (not kept); the GroupNorm backward's per-thread L2 prefetches"). The library (a patch of
# 352c254, whose kernels are c5ed001's):
#   scripts/experiments/build.sh group-backward-step-prefetch gbwpf
#        (NJX_GBW_PF=D: step 2 starts chunk m + D of the team's walk, the team's next units
#        included, towards L2 as it loads chunk m; NJX_GBW_PF1=D: step 1 starts the unit D units
#        ahead as it begins one; both per thread, prefetch.global.L2 of its own vectors)
#   scripts/experiments/build.sh row-odd-bulk oddbulk
#        (NJX_ODD_BULK=1: row_norm's row of x copied into shared memory by one bulk copy of its
#        16-byte-aligned bytes and read from there, the arithmetic unchanged; =2: y formed there
#        too and written by one bulk copy of its aligned interior; rows of one team a CTA, no
#        residual, at most 16 KiB of 16-bit x)
# and build-gpu (this checkout). On the GPU machine (carry build-gpu .devcarry/gbwpf
# .devcarry/oddbulk .whl):
#   bash scripts/experiments/runs-2026-12-05.sh gbwpf   the GroupNorm backward with step 2
#        prefetching 1, 2 and 4 chunks ahead, step 1 one unit ahead, and both, on
#        scripts/specs/groupnorm-backward-step-prefetch.txt (~4 minutes; timing only)
#   bash scripts/experiments/runs-2026-12-05.sh gbwpf-tests KNOBS   the GroupNorm backward's GPU
#        tests over .devcarry/gbwpf with KNOBS (e.g. "NJX_GBW_PF=2 NJX_GBW_PF1=1"; 3 shards, ~2
#        minutes)
#   bash scripts/experiments/runs-2026-12-05.sh oddbulk   rows of odd length through shared memory
#        (NJX_ODD_BULK=1, 2) on scripts/specs/rows-odd-bulk.txt (~2 minutes; timing only), then
#        the row kernels' GPU tests over .devcarry/oddbulk with NJX_ODD_BULK=2 (3 shards)
# Logs and tables go to $OUT (default ./runs-out).
set -uo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"

# The GroupNorm backward's GPU tests (BackwardChannelsGpu but the channel forms' rows of one
# position) in 3 shards of about 60-70 s (scripts/gpu_test_times.txt).
GROUP_BACKWARD_FILTERS=(
  'BackwardChannelsGpu.StreamedGroupNorm*:BackwardChannelsGpu.SmallerBatch*:BackwardChannelsGpu.CApi*:BackwardChannelsGpu.Dram*:BackwardChannelsGpu.CudaGraph*'
  'BackwardChannelsGpu.SeedKernels:BackwardChannelsGpu.ChunkedGroupNorm*:BackwardChannelsGpu.DeterministicBits*:BackwardChannelsGpu.AdversarialValues'
  'BackwardChannelsGpu.GroupNormShapes*:BackwardChannelsGpu.ParamDtype*:BackwardChannelsGpu.ChannelFormsShapes*'
)

case "${1:-}" in
  gbwpf)
    lib=.devcarry/gbwpf
    timeout 500 python3 scripts/ab_bench.py --rounds 2 --out /tmp/gbwpf-ab \
      --specs scripts/specs/groupnorm-backward-step-prefetch.txt --variant head=$lib \
      --variant pf1=$lib:NJX_GBW_PF=1 --variant pf2=$lib:NJX_GBW_PF=2 \
      --variant pf4=$lib:NJX_GBW_PF=4 --variant s1=$lib:NJX_GBW_PF1=1 \
      --variant pf2s1=$lib:NJX_GBW_PF=2,NJX_GBW_PF1=1 2>&1 | tee "$out/gbwpf-ab.txt"
    ;;
  gbwpf-tests)
    settings=${2:?gbwpf-tests KNOBS}
    test_shards gbwpf-tests .devcarry/gbwpf "$settings" 240 "${GROUP_BACKWARD_FILTERS[@]}" ||
      exit 1
    ;;
  oddbulk)
    lib=.devcarry/oddbulk
    timeout 240 python3 scripts/ab_bench.py --rounds 2 --out /tmp/oddbulk-ab \
      --specs scripts/specs/rows-odd-bulk.txt --variant head=$lib \
      --variant ob1=$lib:NJX_ODD_BULK=1 --variant ob2=$lib:NJX_ODD_BULK=2 2>&1 |
      tee "$out/oddbulk-ab.txt"
    test_shards oddbulk-tests $lib NJX_ODD_BULK=2 200 'Ops.FixedShapes*' \
      'Ops.RandomizedSweep:Ops.AdversarialValues:Ops.InPlace:Variants.OddAndTinyRows:Variants.Strided*:Variants.BatchInvariance*:Variants.OutDtype*:Variants.SaveStats*' \
      'Variants.TransformerRows*:Variants.LlmRows*:Variants.ActivationLongAndOddRows*:Variants.ActivationEvery*:Variants.ParamDtype*:Variants.WeightOffset*:Variants.AllAxes*:Variants.CudaGraph*:Variants.AdversarialValuesThroughTheVariants' ||
      exit 1
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
