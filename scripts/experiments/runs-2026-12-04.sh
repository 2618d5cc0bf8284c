#!/usr/bin/env bash
# The GPU runs of session 55 (2026-12-04; performance-notes, "Launch bounds of 4 CTAs an SM on the
# bf16 rows of 8192"). The libraries: build-gpu (this checkout, with plan.cpp's
# kBf16RowsBlocksPerSm) and .devcarry/fv (scripts/experiments/build.sh row-forward-many-rows fv:
# the plan before the rule, with the NJX_FWD_MINB knob). On the GPU machine (carry build-gpu
# .devcarry/fv):
#   bash scripts/experiments/runs-2026-12-04.sh bounds   the rule's GPU test, then
#        scripts/ab_bench.py (3 rounds) of scripts/specs/bf16-rows-bounded.txt, before the rule
#        (.devcarry/fv) against build-gpu, and of scripts/specs/rows-bounds-256.txt and -512.txt
#        (kernels over 64 registers the rule leaves alone) with NJX_FWD_MINB=1 and 4 (CTAs of 256)
#        or 2 (CTAs of 512) (~2.5 minutes; timing)
#   bash scripts/experiments/runs-2026-12-04.sh rowtests   the forward row kernels' GPU tests over
#        build-gpu (the shards of runs-2026-12-08.sh addtests; ~75 s)
# Logs and tables go to $OUT (default ./runs-out).
set -uo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
  bounds)
    timeout 60 build-gpu/tests/gpu/gpu_tests \
      --gtest_filter='Variants.Bf16RmsNormRowsOfEightKiUnderLaunchBounds' 2>&1 |
      tail -6 | tee "$out/bounds-test.txt"
    timeout 150 python3 scripts/ab_bench.py --rounds 3 --out /tmp/bounds-ab \
      --specs scripts/specs/bf16-rows-bounded.txt --variant before=.devcarry/fv \
      --variant after=build-gpu 2>&1 | grep -v '^round' | tee "$out/bounds-ab.txt"
    ab_variants bounds256 120 3 scripts/specs/rows-bounds-256.txt .devcarry/fv \
      m1=NJX_FWD_MINB=1 m4=NJX_FWD_MINB=4 | grep -v '^round'
    ab_variants bounds512 60 3 scripts/specs/rows-bounds-512.txt .devcarry/fv \
      m1=NJX_FWD_MINB=1 m2=NJX_FWD_MINB=2 | grep -v '^round'
    ;;
  rowtests)
    bash "$(dirname "$0")/runs-2026-12-08.sh" rowtests-build-gpu
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
