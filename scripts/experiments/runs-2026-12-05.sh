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
#   scripts/experiments/build.sh row-odd-values oddv
#        (NJX_ODD_VALUES=n: the row kernel's values a thread for rows of scalar accesses;
#        NJX_PA_MANY=n: their many-rows bound on the words loaded with x, the plan's 40;
#        NJX_PA_ALL=n: that bound for every row; NJX_ROW_MINB=n: row_norm's launch bounds ask
#        for n CTAs an SM; with the knobs off the PTX is the plan's)
# and build-gpu (this checkout). On the GPU machine (carry build-gpu .devcarry/gbwpf
# .devcarry/oddbulk .devcarry/oddv .whl):
#   bash scripts/experiments/runs-2026-12-05.sh gbwpf   the GroupNorm backward with step 2
#        prefetching 1, 2 and 4 chunks ahead, step 1 one unit ahead, and both, on
#        scripts/specs/groupnorm-backward-step-prefetch.txt (~4 minutes; timing only)
#   bash scripts/experiments/runs-2026-12-05.sh gbwpf-tests KNOBS   the GroupNorm backward's GPU
#        tests over .devcarry/gbwpf with KNOBS (e.g. "NJX_GBW_PF=2 NJX_GBW_PF1=1"; 3 shards, ~2
#        minutes)
#   bash scripts/experiments/runs-2026-12-05.sh oddbulk   rows of odd length through shared memory
#        (NJX_ODD_BULK=1, 2) on scripts/specs/rows-odd-bulk.txt (~2 minutes; timing only), then
#        the row kernels' GPU tests over .devcarry/oddbulk with NJX_ODD_BULK=2 (3 shards)
#   bash scripts/experiments/runs-2026-12-05.sh oddv   rows of odd length at 32 and 64 values a
#        thread (the plan's 16) on scripts/specs/rows-odd-values.txt (~1.5 minutes; timing), then
#        the row kernels' GPU tests over .devcarry/oddv with NJX_ODD_VALUES=32 (3 shards)
#   bash scripts/experiments/runs-2026-12-05.sh oddv2   the same knob on more odd lengths
#        (scripts/specs/rows-odd-values-2.txt, ~1 minute; timing only)
#   bash scripts/experiments/runs-2026-12-05.sh oddpa   odd rows' parameters loaded at the store
#        in launches of many rows (NJX_PA_MANY=0) beside 32 values a thread, on both odd-row
#        lists (~1.5 minutes), then the row kernels' GPU tests with NJX_PA_MANY=0 (3 shards)
#   bash scripts/experiments/runs-2026-12-05.sh oddpa256   odd rows in teams of 256 with their
#        parameters at the store (NJX_PA_MANY=0) against the plan (library rebuilt at 245e463,
#        where the knob off is the plan), on scripts/specs/rows-odd-teams-256.txt (~1 minute)
#   bash scripts/experiments/runs-2026-12-05.sh oddcross   odd rows in launches of 512 to 2048
#        rows, parameters all at the store (NJX_PA_MANY=0) and all with x (=100) beside the plan,
#        on scripts/specs/rows-odd-crossover.txt (~1 minute; timing only)
#   bash scripts/experiments/runs-2026-12-05.sh lnfew   16-bit LayerNorm rows in teams of 256 with
#        their parameters at the store past 512 rows (build-gpu) against the plan before
#        (.devcarry/oddv, knobs off) on rows-odd-crossover.txt and rows-odd-teams-256.txt (~2
#        minutes), then the row kernels' GPU tests over build-gpu (3 shards)
#   bash scripts/experiments/runs-2026-12-05.sh pamid   LLM rows of 257 to 1024 rows with their
#        parameters with x (NJX_PA_ALL=100) against the plan (at the store) on
#        scripts/specs/rows-params-ahead-mid.txt (~1 minute; timing only)
#   bash scripts/experiments/runs-2026-12-05.sh fewrows   the few-rows class (parameters with x)
#        reaching 512 or 768 rows for teams of 128 threads, 512 for every team, beside the plan
#        (256), on scripts/specs/rows-few-rows-limit.txt (~3 minutes; timing only), over
#        .devcarry/fewrows (scripts/experiments/build.sh few-rows-limit fewrows)
#   bash scripts/experiments/runs-2026-12-05.sh fewrows-tests KNOBS   the row kernels' GPU tests
#        over .devcarry/fewrows with KNOBS (e.g. "NJX_FEW_ROWS=512 NJX_FEW_ROWS_TEAM=128"; 3
#        shards; Variants.APreparedKernelLaunchesTheKernelOfEachBatchClass, not among them,
#        expects the boundary at kFewRows: a rule from this would move it and that test)
#   bash scripts/experiments/runs-2026-12-05.sh team256   the few-rows class of teams of 256
#        threads reaching 448 rows (NJX_FEW_ROWS=448) beside the plan on
#        scripts/specs/rows-few-rows-team256.txt (352 to 448 rows; ~1 minute; timing only)
#   bash scripts/experiments/runs-2026-12-05.sh rule-tests   the row kernels' GPU tests and the
#        prepared kernel's batch classes over build-gpu (4 shards, ~2 minutes)
#   bash scripts/experiments/runs-2026-12-05.sh rules   build-gpu (the few-rows class of 512 rows
#        in teams of at most 128 threads and 384 in teams of 256; 16-bit rows in teams of 256
#        holding 48 words with x) beside .devcarry/fewrows with its knobs off (the plan before),
#        on rows-few-rows-limit.txt, rows-few-rows-team256.txt, rows-f32-weight-ahead.txt and
#        rows-wide-params-ahead.txt (~5 minutes: 58 specs compiled afresh for each library;
#        timing only)
#   bash scripts/experiments/runs-2026-12-05.sh team512   LLM rows of many rows in teams at 16
#        values a thread with the parameters at the store (v16s: NJX_FWD_VALUES=16,NJX_FWD_AHEAD=0;
#        512 threads of 32 registers for rows of 8192), at 16 values with the plan's bound (v16),
#        the plan's team with every parameter at the store (s), and 8 values at the store (v8s),
#        beside the plan, on scripts/specs/rows-team-512-store.txt (~3 minutes; timing only), over
#        .devcarry/fv (scripts/experiments/build.sh row-forward-many-rows fv)
#   bash scripts/experiments/runs-2026-12-05.sh team512-tests KNOBS   the row kernels' GPU tests
#        over .devcarry/fv with KNOBS (e.g. "NJX_FWD_VALUES=16 NJX_FWD_AHEAD=0"; 3 shards)
#   bash scripts/experiments/runs-2026-12-05.sh f32w   rows of 41 to 64 words of slice and
#        parameters with the parameters held with x past 256 rows (NJX_PA_ALL=48, 64) beside the
#        plan, on scripts/specs/rows-f32-weight-ahead.txt (~1.5 minutes; timing only)
#   bash scripts/experiments/runs-2026-12-05.sh oddres   odd rows with a residual (bf16, 2049 to
#        5001 elements, 1024 and 4096 rows) with their parameters at the store (NJX_PA_MANY=0)
#        beside the plan, on scripts/specs/rows-odd-residual.txt (~1 minute; timing only)
#   bash scripts/experiments/runs-2026-12-05.sh rows8192   LLM rows of 8192 with the weight at
#        the store (NJX_PA_ALL=0), and launch bounds of 5 CTAs an SM with it and without it, on
#        scripts/specs/rows-8192-occupancy.txt (~1.5 minutes; timing only)
#   bash scripts/experiments/runs-2026-12-05.sh oddwin   odd rows read and written in 16-byte
#        vectors aligned in memory, their parameters element by element (w: NJX_WIN=1) or as
#        aligned vectors shifted in registers (w2: NJX_WIN=2), at the plan's values a thread and at
#        16 (NJX_WIN_VALUES=16), beside the plan, on scripts/specs/rows-odd-window.txt (~2 minutes;
#        timing only), over .devcarry/oddwin (scripts/experiments/build.sh row-odd-window oddwin)
#   bash scripts/experiments/runs-2026-12-05.sh oddwin-tests KNOBS   the row kernels' GPU tests
#        over .devcarry/oddwin with KNOBS (e.g. NJX_WIN=2; 3 shards; the tests that read plans abort:
#        the patch changes KernelPlan, which build-gpu's gpu_tests were built without)
#   bash scripts/experiments/runs-2026-12-05.sh fwdpf   the LLM rows with each team's first thread
#        starting the row 528, 1056 or 2112 rows ahead towards L2 once its row is stored
#        (NJX_FWD_PF) beside the plan, on scripts/specs/rows-team-512-store.txt (~1 minute; timing
#        only), and issued before the team's own loads instead (NJX_FWD_PF_EARLY=1) 528 and 1056
#        rows ahead, over .devcarry/fpf (scripts/experiments/build.sh row-forward-l2-ahead fpf)
#   bash scripts/experiments/runs-2026-12-05.sh fwdpf2   the same prefetch on more LLM rows and
#        variants (scripts/specs/rows-l2-ahead.txt): a team's own row before its loads (e0), and
#        264, 528 and 1056 rows ahead after its store (one wave of CTAs for rows of 16384, 8192
#        and 4096 on 132 SMs), 3 rounds (~5 minutes; timing only)
#   bash scripts/experiments/runs-2026-12-05.sh fwdpf-decode   a team's own row started towards
#        L2 before its loads (e0) on the decode rows (scripts/specs/decode-rows.txt; the few-rows
#        class, which the rule of 8a1480c leaves out), 3 rounds (~1.5 minutes; timing only)
#   bash scripts/experiments/runs-2026-12-05.sh pfall   the L2 prefetch of a team's own row
#        (kPrefetchRow) off (off: the plan before 8a1480c), for LayerNorm and f32 parameters too
#        (all), issued before x's loads through a dependency on their pointer (dep; depa: with the
#        row's own address and size; depall: also LayerNorm; asm: those explicit loads without the
#        prefetch), beside the plan, on scripts/specs/rows-prefetch-all.txt, 2 rounds (~5-6
#        minutes; timing only), over
#        .devcarry/pfall (scripts/experiments/build.sh row-forward-prefetch-all pfall)
#   bash scripts/experiments/runs-2026-12-05.sh pfdep   the row prefetch issued before x's loads
#        (build-gpu at the commit that made it the rule) beside the plan of 8a1480c (old:
#        .devcarry/pfall) and no prefetch (off), on scripts/specs/rows-prefetch-dep.txt, 2 rounds
#        (~2.5 minutes; timing only)
#   bash scripts/experiments/runs-2026-12-05.sh pfscope   the row prefetch of e043ee7 beyond its
#        rule: decode rows (few), LayerNorm rows of 768 and 1024 (ln), rows of 2 KiB (min), on
#        scripts/specs/rows-prefetch-scope.txt, 3 rounds (~2 minutes; timing only), over
#        .devcarry/pfscope (scripts/experiments/build.sh row-forward-prefetch-scope pfscope)
#   bash scripts/experiments/runs-2026-12-05.sh pg   the parameters loaded ahead as explicit
#        ld.global where the row is prefetched (64 registers for the bf16 rows of 8192 instead
#        of 68) beside e043ee7's kernel (build-gpu), on scripts/specs/rows-prefetch-dep.txt,
#        2 rounds, then the row kernel's GPU tests over it (~4 minutes), over .devcarry/pg
#        (scripts/experiments/build.sh row-forward-prefetch-params-global pg)
#   bash scripts/experiments/runs-2026-12-05.sh sched   the parameters' loads ahead of x's in the
#        machine code (s1: NJX_SCHED=1 of row-forward-loads-ordered.patch) on the decode rows
#        (scripts/specs/decode-rows.txt), 2 rounds, then pfscope in 2 rounds (~3 minutes; timing
#        only), over .devcarry/sched (scripts/experiments/build.sh row-forward-loads-ordered sched)
#        and .devcarry/pfscope
#   bash scripts/experiments/runs-2026-12-05.sh ln16   pfscope's ln on the bf16 LayerNorm rows of
#        rows-prefetch-scope.txt and rows-prefetch-all.txt's rows of 4096, 3 rounds (~30 s; timing
#        only), over .devcarry/pfscope
#   bash scripts/experiments/runs-2026-12-05.sh lntable   the bf16 ViT/BERT rows in
#        tools/compare_torch.py's harness (y to one buffer), with and without pfscope's ln knob,
#        taking turns, 2 rounds (~2-3 minutes; timing only), over .devcarry/pfscope
#   bash scripts/experiments/runs-2026-12-05.sh lnlen   the row prefetch for 16-bit LayerNorm rows of
#        other lengths than 768 and 1024 (384 to 3072), f16, and with a residual
#        (scripts/specs/layernorm-rows-prefetch-lengths.txt), 3 rounds (~1 minute; timing only),
#        over .devcarry/pfscope
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
    ab_variants gbwpf 500 2 scripts/specs/groupnorm-backward-step-prefetch.txt .devcarry/gbwpf \
      pf1=NJX_GBW_PF=1 pf2=NJX_GBW_PF=2 pf4=NJX_GBW_PF=4 s1=NJX_GBW_PF1=1 \
      pf2s1=NJX_GBW_PF=2,NJX_GBW_PF1=1
    ;;
  gbwpf-tests)
    settings=${2:?gbwpf-tests KNOBS}
    test_shards gbwpf-tests .devcarry/gbwpf "$settings" 240 "${GROUP_BACKWARD_FILTERS[@]}" ||
      exit 1
    ;;
  oddbulk)
    ab_variants oddbulk 240 2 scripts/specs/rows-odd-bulk.txt .devcarry/oddbulk \
      ob1=NJX_ODD_BULK=1 ob2=NJX_ODD_BULK=2
    test_shards oddbulk-tests .devcarry/oddbulk NJX_ODD_BULK=2 200 "${ROW_FORWARD_FILTERS[@]}" ||
      exit 1
    ;;
  oddv)
    ab_variants oddv 200 2 scripts/specs/rows-odd-values.txt .devcarry/oddv \
      v32=NJX_ODD_VALUES=32 v64=NJX_ODD_VALUES=64
    test_shards oddv-tests .devcarry/oddv NJX_ODD_VALUES=32 200 "${ROW_FORWARD_FILTERS[@]}" ||
      exit 1
    ;;
  oddv2)
    ab_variants oddv2 200 2 scripts/specs/rows-odd-values-2.txt .devcarry/oddv v32=NJX_ODD_VALUES=32
    ;;
  oddpa)
    cat scripts/specs/rows-odd-values.txt scripts/specs/rows-odd-values-2.txt >/tmp/rows-odd-all.txt
    ab_variants oddpa 200 2 /tmp/rows-odd-all.txt .devcarry/oddv pa0=NJX_PA_MANY=0 \
      v32=NJX_ODD_VALUES=32
    test_shards oddpa-tests .devcarry/oddv NJX_PA_MANY=0 200 "${ROW_FORWARD_FILTERS[@]}" || exit 1
    ;;
  oddpa256)
    ab_variants oddpa256 200 3 scripts/specs/rows-odd-teams-256.txt .devcarry/oddv pa0=NJX_PA_MANY=0
    ;;
  oddcross)
    ab_variants oddcross 200 3 scripts/specs/rows-odd-crossover.txt .devcarry/oddv \
      pa0=NJX_PA_MANY=0 pa100=NJX_PA_MANY=100
    ;;
  lnfew)
    cat scripts/specs/rows-odd-crossover.txt scripts/specs/rows-odd-teams-256.txt >/tmp/lnfew.txt
    timeout 240 python3 scripts/ab_bench.py --rounds 3 --out /tmp/lnfew-ab --specs /tmp/lnfew.txt \
      --variant old=.devcarry/oddv --variant new=build-gpu 2>&1 | tee "$out/lnfew-ab.txt"
    test_shards lnfew-tests build-gpu "" 200 "${ROW_FORWARD_FILTERS[@]}" || exit 1
    ;;
  pamid)
    ab_variants pamid 150 3 scripts/specs/rows-params-ahead-mid.txt .devcarry/oddv pa100=NJX_PA_ALL=100
    ;;
  fewrows)
    ab_variants fewrows 300 3 scripts/specs/rows-few-rows-limit.txt .devcarry/fewrows \
      t128f512=NJX_FEW_ROWS=512,NJX_FEW_ROWS_TEAM=128 t128f768=NJX_FEW_ROWS=768,NJX_FEW_ROWS_TEAM=128 \
      f512=NJX_FEW_ROWS=512
    ;;
  fewrows-tests)
    settings=${2:?fewrows-tests KNOBS}
    test_shards fewrows-tests .devcarry/fewrows "$settings" 200 "${ROW_FORWARD_FILTERS[@]}" ||
      exit 1
    ;;
  rules)
    cat scripts/specs/rows-few-rows-limit.txt scripts/specs/rows-few-rows-team256.txt \
      scripts/specs/rows-f32-weight-ahead.txt scripts/specs/rows-wide-params-ahead.txt >/tmp/rules.txt
    timeout 360 python3 scripts/ab_bench.py --rounds 3 --out /tmp/rules-ab --specs /tmp/rules.txt \
      --variant old=.devcarry/fewrows --variant new=build-gpu 2>&1 | tee "$out/rules-ab.txt"
    ;;
  team512)
    ab_variants team512 300 3 scripts/specs/rows-team-512-store.txt .devcarry/fv \
      v16s=NJX_FWD_VALUES=16,NJX_FWD_AHEAD=0 v16=NJX_FWD_VALUES=16 s=NJX_FWD_AHEAD=0 \
      v8s=NJX_FWD_VALUES=8,NJX_FWD_AHEAD=0
    ;;
  oddwin)
    ab_variants oddwin 300 2 scripts/specs/rows-odd-window.txt .devcarry/oddwin w=NJX_WIN=1 \
      w16=NJX_WIN=1,NJX_WIN_VALUES=16 w2=NJX_WIN=2 w2v16=NJX_WIN=2,NJX_WIN_VALUES=16
    ;;
  pfdep)
    timeout 200 python3 scripts/ab_bench.py --rounds 2 --out /tmp/pfdep-ab \
      --specs scripts/specs/rows-prefetch-dep.txt --variant off=.devcarry/pfall:NJX_PF_OFF=1 \
      --variant old=.devcarry/pfall --variant dep=build-gpu 2>&1 | tee "$out/pfdep-ab.txt"
    ;;
  sched)
    ab_variants sched 110 2 scripts/specs/decode-rows.txt .devcarry/sched s1=NJX_SCHED=1
    ab_variants pfscope 110 2 scripts/specs/rows-prefetch-scope.txt .devcarry/pfscope \
      few=NJX_PF_FEW=1 ln=NJX_PF_LN=1,NJX_PF_MIN=1024 min=NJX_PF_MIN=1024
    ;;
  lnlen)
    ab_variants lnlen 120 3 scripts/specs/layernorm-rows-prefetch-lengths.txt .devcarry/pfscope \
      ln=NJX_PF_LN=1,NJX_PF_MIN=256
    ;;
  lntable)
    # In the table's own harness (compare_torch: y written to one buffer, x rotating), the bf16
    # ViT/BERT rows with and without the LayerNorm prefetch (pfscope's ln knob), taking turns.
    for r in 1 2; do
      for v in head ln; do
        knobs=(NJX_NONE=1)
        [ "$v" = ln ] && knobs=(NJX_PF_LN=1 NJX_PF_MIN=256)
        env "${knobs[@]}" NORMJIT_CACHE_DIR="/tmp/lntable-$v" timeout 110 python3 \
          tools/compare_torch.py --build .devcarry/pfscope --only vit,bert --dtypes bf16 \
          --skip-compile --skip-jit-latency --doc "/tmp/lntable-$v$r.md" \
          --plot "/tmp/lntable-$v$r.png" --json-out "$out/lntable-$v$r.json" \
          >"$out/lntable-$v$r.log" 2>&1
      done
    done
    python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
rows = {}
for f in sorted(Path(sys.argv[1]).glob("lntable-*.json")):
    for r in json.loads(f.read_text())["results"]:
        p = r["problem"]
        name = p if isinstance(p, str) else f"{p.get('name')} {p.get('dtype', '')}"
        rows.setdefault(name, {})[f.stem[len("lntable-"):]] = r["normjit"].get("ms", 0) * 1000
for name, t in rows.items():
    print(f"| {name} | " + " | ".join(f"{k} {v:.2f}" for k, v in sorted(t.items())) + " |")
PY
    ;;
  ln16)
    grep -E "layernorm.*bf16" scripts/specs/rows-prefetch-scope.txt >/tmp/ln16.txt
    grep -E "layernorm shape=4096,4096 dtype=bf16" scripts/specs/rows-prefetch-all.txt >>/tmp/ln16.txt
    timeout 80 python3 scripts/ab_bench.py --rounds 3 --out /tmp/ln16-ab --specs /tmp/ln16.txt \
      --variant head=.devcarry/pfscope --variant ln=.devcarry/pfscope:NJX_PF_LN=1,NJX_PF_MIN=1024 \
      2>&1 | tee "$out/ln16-ab.txt"
    ;;
  pfscope)
    ab_variants pfscope 200 3 scripts/specs/rows-prefetch-scope.txt .devcarry/pfscope \
      few=NJX_PF_FEW=1 ln=NJX_PF_LN=1,NJX_PF_MIN=1024 min=NJX_PF_MIN=1024
    ;;
  pg)
    timeout 130 python3 scripts/ab_bench.py --rounds 2 --out /tmp/pg-ab \
      --specs scripts/specs/rows-prefetch-dep.txt --variant head=build-gpu --variant pg=.devcarry/pg \
      2>&1 | tee "$out/pg-ab.txt"
    test_shards pg-tests .devcarry/pg "NJX_NONE=1" 150 "${ROW_FORWARD_FILTERS[@]}" || exit 1
    ;;
  pfall)
    ab_variants pfall 330 2 scripts/specs/rows-prefetch-all.txt .devcarry/pfall off=NJX_PF_OFF=1 \
      all=NJX_PF_ALL=1 dep=NJX_PF_DEP=1 depa=NJX_PF_DEP=1,NJX_PF_ALIGNED=1 \
      depall=NJX_PF_DEP=1,NJX_PF_ALL=1 asm=NJX_PF_DEP=1,NJX_PF_OFF=1
    ;;
  fwdpf-decode)
    ab_variants fwdpf-decode 100 3 scripts/specs/decode-rows.txt .devcarry/fpf \
      e0=NJX_FWD_PF=0,NJX_FWD_PF_EARLY=1
    ;;
  fwdpf2)
    ab_variants fwdpf2 330 3 scripts/specs/rows-l2-ahead.txt .devcarry/fpf \
      e0=NJX_FWD_PF=0,NJX_FWD_PF_EARLY=1 p264=NJX_FWD_PF=264 p528=NJX_FWD_PF=528 \
      p1056=NJX_FWD_PF=1056
    ;;
  fwdpf)
    ab_variants fwdpf 240 2 scripts/specs/rows-team-512-store.txt .devcarry/fpf p528=NJX_FWD_PF=528 \
      p1056=NJX_FWD_PF=1056 p2112=NJX_FWD_PF=2112 e528=NJX_FWD_PF=528,NJX_FWD_PF_EARLY=1 \
      e1056=NJX_FWD_PF=1056,NJX_FWD_PF_EARLY=1
    ;;
  oddwin-tests)
    settings=${2:?oddwin-tests KNOBS}
    test_shards "oddwin-tests${settings//[^0-9]/}" .devcarry/oddwin "$settings" 200 \
      "${ROW_FORWARD_FILTERS[@]}" || exit 1
    ;;
  team512-tests)
    settings=${2:?team512-tests KNOBS}
    test_shards team512-tests .devcarry/fv "$settings" 200 "${ROW_FORWARD_FILTERS[@]}" || exit 1
    ;;
  team256)
    ab_variants team256 150 3 scripts/specs/rows-few-rows-team256.txt .devcarry/fewrows \
      f448=NJX_FEW_ROWS=448
    ;;
  rule-tests)
    test_shards rule-tests build-gpu "" 200 "${ROW_FORWARD_FILTERS[@]}" \
      'Variants.APreparedKernelLaunchesTheKernelOfEachBatchClass:Variants.BatchInvariance*' || exit 1
    ;;
  f32w)
    ab_variants f32w 200 3 scripts/specs/rows-f32-weight-ahead.txt .devcarry/oddv \
      pa48=NJX_PA_ALL=48 pa64=NJX_PA_ALL=64
    ;;
  oddres)
    ab_variants oddres 150 3 scripts/specs/rows-odd-residual.txt .devcarry/oddv pa0=NJX_PA_MANY=0
    ;;
  rows8192)
    ab_variants rows8192 240 3 scripts/specs/rows-8192-occupancy.txt .devcarry/oddv \
      pa0=NJX_PA_ALL=0 pa0b5=NJX_PA_ALL=0,NJX_ROW_MINB=5 b5=NJX_ROW_MINB=5
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
