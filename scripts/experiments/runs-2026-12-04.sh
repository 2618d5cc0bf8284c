#!/usr/bin/env bash
# The GPU runs prepared on 2026-12-02 after session 42's device time (performance-notes, "The
# split backward's streamed steps prefetched ahead ..." and "Prepared for the next device time
# (2026-12-03)"). The library (a patch of c5ed001, whose kernels are 67d5564's but for odd rows):
#   scripts/experiments/build.sh split-backward-piece-wave sbwpw
#        (NJX_SBW_W=w rows a wave with parameters; NJX_SBW_VALUES=n values a thread a piece;
#        NJX_SBW_PF=d steps ahead, overriding the rule; NJX_SBW_REV=1 pass 2 in reverse)
# and build-gpu (this checkout). On the GPU machine (carry build-gpu .devcarry/sbwpw .whl):
#   bash scripts/experiments/runs-2026-12-04.sh waves   the split backward's streamed parts with
#        parameters in waves of 16 (head), 8, 4, 2 and 1 rows, pass 2 in reverse at 16 and 4, and
#        pieces of 16 values a thread at 8 and 4 rows, on scripts/specs/split-backward-waves.txt
#        (the LayerNorm seeds, RMSNorm bf16 rows of 4 Mi, LayerNorm bf16 rows of 2 Mi; ~5 minutes;
#        timing only)
#   bash scripts/experiments/runs-2026-12-04.sh waves-tests KNOBS   the split backward's streamed
#        rows' GPU tests over .devcarry/sbwpw with KNOBS (e.g. "NJX_SBW_W=4 NJX_SBW_REV=1"; 3
#        shards, ~2.5 minutes)
# Logs and tables go to $OUT (default ./runs-out).
set -uo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
  waves)
    lib=.devcarry/sbwpw
    timeout 560 python3 scripts/ab_bench.py --rounds 2 --out /tmp/waves-ab \
      --specs scripts/specs/split-backward-waves.txt --variant head=$lib \
      --variant w8=$lib:NJX_SBW_W=8 --variant w4=$lib:NJX_SBW_W=4 \
      --variant w2=$lib:NJX_SBW_W=2 --variant w1=$lib:NJX_SBW_W=1 \
      --variant rev=$lib:NJX_SBW_REV=1 --variant rev4=$lib:NJX_SBW_W=4,NJX_SBW_REV=1 \
      --variant v16w8=$lib:NJX_SBW_VALUES=16,NJX_SBW_W=8 \
      --variant v16w4=$lib:NJX_SBW_VALUES=16,NJX_SBW_W=4 2>&1 | tee "$out/waves-ab.txt"
    ;;
  waves-tests)
    settings=${2:?waves-tests KNOBS}
    test_shards waves-tests .devcarry/sbwpw "$settings" 300 "${SPLIT_STREAMED_FILTERS[@]}" ||
      exit 1
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
