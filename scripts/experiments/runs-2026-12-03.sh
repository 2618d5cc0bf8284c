#!/usr/bin/env bash
# The GPU runs prepared on 2026-12-02 (performance-notes, "The other backward kernels' barriers
# with release and acquire" for ra, split-fences, clusters and backward-table, made on
# 2026-12-02; "Prepared for the next device time" for sbwpf, sbwpf-tests, relaxed, cta-minor
# and ncu-rows, not yet made). The libraries (ra, waitfence, pairswide, clsum: patches of
# 021180a; sbwpf, relaxed and ctaminor: of 76f600a or later, whose kernels are 6ef5e04's):
#   scripts/experiments/build.sh backward-barriers-release-acquire ra   (NJX_BARRIER_RA=1)
#   scripts/experiments/build.sh split-exchange-wait-fence waitfence
#   scripts/experiments/build.sh row-backward-cluster-pairs-wide pairswide   (NJX_BWD_PAIRS=1)
#   scripts/experiments/build.sh row-backward-cluster-sum clsum   (NJX_BWD_CLUSTER=2|4)
#   scripts/experiments/build.sh split-backward-prefetch sbwpf   (NJX_SBW_PF=D)
#   scripts/experiments/build.sh relaxed-polls relaxed   (NJX_RELAXED_POLLS=1)
#   scripts/experiments/build.sh final-sums-cta-minor ctaminor   (NJX_CTA_MINOR=1)
# and build-gpu (this checkout). On the GPU machine (carry build-gpu and the libraries a step
# uses, e.g. .devcarry/sbwpf .devcarry/relaxed: all of .devcarry with build-gpu is over the
# 64 MiB the device tool carries):
#   bash scripts/experiments/runs-2026-12-03.sh ra   the channels, GroupNorm and split backward
#        GPU tests over the ra library with NJX_BARRIER_RA=1 (3 shards at once, ~4 minutes), then,
#        if they pass, its A/B on scripts/specs/backward-barriers.txt (~4 minutes)
#   bash scripts/experiments/runs-2026-12-03.sh clusters   the A/B of the row backward in
#        clusters on the LLM rows: this checkout's build-gpu, pairswide (NJX_BWD_PAIRS=1), clsum
#        with NJX_BWD_CLUSTER=2 and =4 (~4 minutes; timing only)
#   bash scripts/experiments/runs-2026-12-03.sh cluster-tests LIB KNOB=VALUE   the row
#        backward's GPU tests over .devcarry/LIB with the knob (3 shards, ~3 minutes), e.g.
#        cluster-tests clsum NJX_BWD_CLUSTER=4
#   bash scripts/experiments/runs-2026-12-03.sh ncu-rows   normjit's and compile's kernels of the
#        RMSNorm rows of 8192 under Nsight Compute (scripts/ncu_rows_vs_compile.sh), ~2 minutes
#   bash scripts/experiments/runs-2026-12-03.sh split-fences   the split backward with its
#        exchange's wait fence (.devcarry/waitfence: split-exchange-wait-fence.patch over the
#        release/acquire barriers) and without (build-gpu), and head (.devcarry/ra without its knob)
#        on scripts/specs/split-exchange-fences.txt (~2 minutes; timing only)
#   NORMJIT_REVISION=REV bash scripts/experiments/runs-2026-12-03.sh backward-table PART BUDGET
#        build-gpu's part of the backward table (scripts/perf_backward.sh --only PART --budget-s
#        BUDGET), its files tarred to $OUT/backward-PART.tgz; REV typed in (the commit build-gpu
#        was built at), not asked of the device copy's git
#   bash scripts/experiments/runs-2026-12-03.sh sbwpf   the split backward's streamed parts with
#        D steps of x and dy prefetched to L2 ahead of the loads (.devcarry/sbwpf:
#        split-backward-prefetch.patch, NJX_SBW_PF=D; 0 is head's kernel) on
#        scripts/specs/split-backward-streamed.txt, D = 0, 2, 4, 8 each thread its vectors, and
#        D = 4 by thread 0's bulk prefetches (NJX_SBW_BULK=1) (~5 minutes; timing only)
#   bash scripts/experiments/runs-2026-12-03.sh sbwpf-tests KNOBS   the split backward's GPU
#        tests over .devcarry/sbwpf with KNOBS (e.g. NJX_SBW_PF=4, or "NJX_SBW_PF=4
#        NJX_SBW_BULK=1") (3 shards, ~3 minutes)
#   bash scripts/experiments/runs-2026-12-03.sh relaxed   the backward kernels' waits with relaxed
#        polls and one acquire load (.devcarry/relaxed, NJX_RELAXED_POLLS=1) against head (the
#        same library, knob off) on scripts/specs/relaxed-polls.txt (~3 minutes; timing only)
#   bash scripts/experiments/runs-2026-12-03.sh cta-minor   the channels and split backward's
#        final sums CTA-minor (.devcarry/ctaminor, NJX_CTA_MINOR=1) against head (knob off) on
#        scripts/specs/final-sums-cta-minor.txt (~3 minutes; timing only)
#   bash scripts/experiments/runs-2026-12-03.sh timing   sbwpf, relaxed and cta-minor in turn (one
#        device call, ~5 minutes: the clusters step's 4 variants of 14 specs took 159 s)
#   bash scripts/experiments/runs-2026-12-03.sh landed   build-gpu with the split backward's steps
#        prefetched ahead and the CTA-minor final sums as rules: the channels, GroupNorm and split
#        backward's GPU tests (3 shards), then its A/B against the kernels before (.devcarry/sbwpf
#        and .devcarry/ctaminor without their knobs) on split-backward-streamed.txt, beside D = 1
#        and 3 (NJX_SBW_PF), and on final-sums-cta-minor.txt (~6 minutes)
# Logs and tables go to $OUT (default ./runs-out).
set -uo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
  ra)
    test_shards ra .devcarry/ra NJX_BARRIER_RA=1 330 "${SPLIT_CHANNELS_FILTERS[@]}" || exit 1
    timeout 280 python3 scripts/ab_bench.py --rounds 2 --out /tmp/ra-ab \
      --specs scripts/specs/backward-barriers.txt --variant head=.devcarry/ra \
      --variant ra=.devcarry/ra:NJX_BARRIER_RA=1 2>&1 | tee "$out/ra-ab.txt"
    ;;
  clusters)
    timeout 400 python3 scripts/ab_bench.py --rounds 2 --out /tmp/clusters-ab \
      --specs scripts/specs/row-backward-final-sum.txt --variant head=build-gpu \
      --variant pairs=.devcarry/pairswide:NJX_BWD_PAIRS=1 \
      --variant cl2=.devcarry/clsum:NJX_BWD_CLUSTER=2 \
      --variant cl4=.devcarry/clsum:NJX_BWD_CLUSTER=4 2>&1 | tee "$out/clusters-ab.txt"
    ;;
  cluster-tests)
    lib=${2:?cluster-tests LIB KNOB=VALUE}
    knob=${3:?cluster-tests LIB KNOB=VALUE}
    test_shards "cluster-tests-$lib" ".devcarry/$lib" "$knob" 300 "${ROW_BACKWARD_FILTERS[@]}" ||
      exit 1
    ;;
  split-fences)
    timeout 300 python3 scripts/ab_bench.py --rounds 2 --out /tmp/split-fences-ab \
      --specs scripts/specs/split-exchange-fences.txt --variant head=.devcarry/ra \
      --variant nofence=build-gpu --variant waitfence=.devcarry/waitfence 2>&1 |
      tee "$out/split-fences-ab.txt"
    ;;
  backward-table)
    part=${2:?backward-table PART BUDGET}
    budget=${3:?backward-table PART BUDGET}
    # The device copy's git may name an older commit than its tree (it said 214289c for 67d5564's
    # tree on 2026-12-02): the caller names the revision, typed into the command.
    : "${NORMJIT_REVISION:?backward-table: set NORMJIT_REVISION to the commit of build-gpu, named on the machine that built it}"
    NORMJIT_REVISION=$NORMJIT_REVISION BUILD=build-gpu \
      OUT=/tmp/backward-$part timeout $((budget + 120)) bash scripts/perf_backward.sh --only "$part" \
      --budget-s "$budget" 2>&1 | tail -25
    tar czf "$out/backward-$part.tgz" -C /tmp "backward-$part"
    ;;
  sbwpf)
    timeout 400 python3 scripts/ab_bench.py --rounds 2 --out /tmp/sbwpf-ab \
      --specs scripts/specs/split-backward-streamed.txt --variant head=.devcarry/sbwpf \
      --variant pf2=.devcarry/sbwpf:NJX_SBW_PF=2 --variant pf4=.devcarry/sbwpf:NJX_SBW_PF=4 \
      --variant pf8=.devcarry/sbwpf:NJX_SBW_PF=8 \
      --variant bulk4=.devcarry/sbwpf:NJX_SBW_PF=4,NJX_SBW_BULK=1 2>&1 | tee "$out/sbwpf-ab.txt"
    ;;
  sbwpf-tests)
    settings=${2:?sbwpf-tests KNOBS}
    test_shards sbwpf-tests .devcarry/sbwpf "$settings" 300 "${SPLIT_STREAMED_FILTERS[@]}" ||
      exit 1
    ;;
  relaxed)
    timeout 300 python3 scripts/ab_bench.py --rounds 2 --out /tmp/relaxed-ab \
      --specs scripts/specs/relaxed-polls.txt --variant head=.devcarry/relaxed \
      --variant relaxed=.devcarry/relaxed:NJX_RELAXED_POLLS=1 2>&1 | tee "$out/relaxed-ab.txt"
    ;;
  cta-minor)
    timeout 300 python3 scripts/ab_bench.py --rounds 2 --out /tmp/cta-minor-ab \
      --specs scripts/specs/final-sums-cta-minor.txt --variant head=.devcarry/ctaminor \
      --variant minor=.devcarry/ctaminor:NJX_CTA_MINOR=1 2>&1 | tee "$out/cta-minor-ab.txt"
    ;;
  timing)
    for step in sbwpf relaxed cta-minor; do
      bash "$here/scripts/experiments/runs-2026-12-03.sh" "$step"
    done
    ;;
  landed)
    test_shards landed build-gpu "" 330 "${SPLIT_CHANNELS_FILTERS[@]}" || exit 1
    timeout 300 python3 scripts/ab_bench.py --rounds 2 --out /tmp/landed-streamed-ab \
      --specs scripts/specs/split-backward-streamed.txt --variant before=.devcarry/sbwpf \
      --variant landed=build-gpu --variant pf1=.devcarry/sbwpf:NJX_SBW_PF=1 \
      --variant pf3=.devcarry/sbwpf:NJX_SBW_PF=3 2>&1 | tee "$out/landed-streamed-ab.txt"
    timeout 200 python3 scripts/ab_bench.py --rounds 2 --out /tmp/landed-sums-ab \
      --specs scripts/specs/final-sums-cta-minor.txt --variant before=.devcarry/ctaminor \
      --variant landed=build-gpu 2>&1 | tee "$out/landed-sums-ab.txt"
    ;;
  ncu-rows)
    OUT="$out/ncu-rows" timeout 300 bash scripts/ncu_rows_vs_compile.sh build-gpu | tee "$out/ncu-rows.txt"
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
