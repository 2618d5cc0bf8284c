#!/usr/bin/env bash
# The GPU runs prepared in session 53 (2026-12-03; performance-notes, "The tables at b106891 ...
# what torch.compile runs for add + RMSNorm at 1024 tokens"). The library (a patch of b106891):
#   scripts/experiments/build.sh row-forward-many-rows fv
#        (the many-rows class's knobs: NJX_FWD_VALUES values a thread, NJX_FWD_AHEAD=0 every
#        parameter at the store, NJX_FWD_CTA threads a CTA)
# and build-gpu (this checkout, for its gpu_tests). On the GPU machine (carry build-gpu
# .devcarry/fv):
#   bash scripts/experiments/runs-2026-12-08.sh addrms   add + RMSNorm at 1024 tokens (and
#        controls) in torch.compile's shape of those rows, a CTA of 512 threads a row at 32
#        registers (v8s: NJX_FWD_VALUES=8,NJX_FWD_AHEAD=0), in teams of 256 (v16s, and v16 with the
#        parameters held), beside the plan on scripts/specs/add-rmsnorm-1024.txt, 3 rounds
#        (~2 minutes; timing)
#   bash scripts/experiments/runs-2026-12-08.sh addtable KNOBS   the variants table's own harness
#        (tools/bench_variants.py: inputs rotating, a sleep kernel first) on add + RMSNorm at 1024
#        and 4096 tokens, the plan and KNOBS (e.g. NJX_FWD_VALUES=8,NJX_FWD_AHEAD=0) taking turns,
#        2 rounds, no torch.compile (its times are the table's) (~3 minutes; timing)
#   bash scripts/experiments/runs-2026-12-08.sh inductor   what torch.compile generates (and its
#        autotuner chose) for the other rows behind it in the tables: LayerNorm f32 [8192, 1024]
#        (BERT-large) and bf16 [12608, 768] (ViT-B), RMSNorm bf16 [4096, 8192] and [8, 4096],
#        LayerNorm bf16 [8192, 1024] (scripts/inductor_code.py; ~1.5 minutes, no build needed)
#   bash scripts/experiments/runs-2026-12-08.sh addtests KNOBS   the forward row kernels' GPU
#        tests over .devcarry/fv with KNOBS (3 shards, ~75 s); rowtests-build-gpu: the same over
#        build-gpu with no knobs (added in session 55)
#   bash scripts/experiments/runs-2026-12-08.sh addevict [KNOBS]   (added in session 54, the
#        library rebuilt at a667604 with the patch's NJX_EVICT_MAX_ROW and NJX_EARLY_H) add +
#        RMSNorm at 1024 tokens with x and the residual loaded evict-first from L2 as
#        torch.compile's kernels load them (e16k: NJX_EVICT_MAX_ROW=16384, every launch of those
#        rows that fits in L2), with h written as formed (eh: NJX_EARLY_H=1, as compile's first
#        loop stores it), both (e16keh), beside the plan on scripts/specs/add-rmsnorm-1024.txt, 3
#        rounds (~2.5 minutes), then the variants table's harness with KNOBS (addtable; default
#        NJX_EVICT_MAX_ROW=16384; ~3 minutes; timing)
#   bash scripts/experiments/runs-2026-12-08.sh minb   (added in session 54) the row kernel's
#        registers capped by its launch bounds (NJX_FWD_MINB CTAs an SM) on
#        scripts/specs/row-minb.txt: build-gpu (this checkout's plan) first, then .devcarry/fv with
#        launch bounds of 1 CTA an SM (where the plan names none, ptxas gives these kernels 3-8
#        more registers so), of 3 and 4, and add + LayerNorm's teams of 128 before 70d9187
#        (NJX_FWD_VALUES=32) with and without 8 CTAs an SM, 3 rounds (~2.5 minutes; timing)
# Logs and tables go to $OUT (default ./runs-out).
set -uo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"

knobs_arg() {
  if [ -z "${1:-}" ]; then
    echo "runs-2026-12-08.sh: $2 takes the knobs, e.g. NJX_FWD_VALUES=8,NJX_FWD_AHEAD=0" >&2
    exit 2
  fi
}

case "${1:-}" in
  addrms)
    ab_variants addrms 200 3 scripts/specs/add-rmsnorm-1024.txt .devcarry/fv \
      v8s=NJX_FWD_VALUES=8,NJX_FWD_AHEAD=0 v16s=NJX_FWD_VALUES=16,NJX_FWD_AHEAD=0 \
      v16=NJX_FWD_VALUES=16
    ;;
  addtable)
    knobs_arg "${2:-}" addtable
    IFS=, read -r -a knobs <<<"$2"
    for r in 1 2; do
      for v in head knob; do
        set_knobs=(NJX_NONE=1)
        [ "$v" = knob ] && set_knobs=("${knobs[@]}")
        env "${set_knobs[@]}" NORMJIT_CACHE_DIR="/tmp/addtable-$v" timeout 120 python3 \
          tools/bench_variants.py --build .devcarry/fv --only add-rmsnorm --tokens 1024,4096 \
          --skip-compile --doc "/tmp/addtable-$v$r.md" --json-out "$out/addtable-$v$r.json" \
          >"$out/addtable-$v$r.log" 2>&1
        echo "addtable $v round $r: exit $?"
      done
    done
    python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
rows = {}
for f in sorted(Path(sys.argv[1]).glob("addtable-*.json")):
    for r in json.loads(f.read_text())["rows"]:
        key = f"{r['variant']} {r['tokens']} x {r['hidden']}"
        for col in ("normjit", "separate"):
            us = (r.get(col) or {}).get("us")
            if us:
                rows.setdefault(f"{key} {col}", {})[f.stem[len("addtable-"):]] = us
for name, t in rows.items():
    print(f"| {name} | " + " | ".join(f"{k} {v:.2f}" for k, v in sorted(t.items())) + " |")
PY
    ;;
  inductor)
    for c in "layernorm 8192 1024 f32" "layernorm 12608 768 bf16" "rmsnorm 4096 8192 bf16" \
      "rmsnorm 8 4096 bf16" "layernorm 8192 1024 bf16"; do
      read -r v t h d <<<"$c"
      timeout 60 python3 scripts/inductor_code.py --variant "$v" --tokens "$t" --hidden "$h" \
        --dtype "$d" --out "$out/inductor" 2>&1 | grep -v -i warning | tee -a "$out/inductor.txt"
    done
    ;;
  addevict)
    ab_variants addevict 220 3 scripts/specs/add-rmsnorm-1024.txt .devcarry/fv \
      e16k=NJX_EVICT_MAX_ROW=16384 eh=NJX_EARLY_H=1 e16keh=NJX_EVICT_MAX_ROW=16384,NJX_EARLY_H=1
    bash "$0" addtable "${2:-NJX_EVICT_MAX_ROW=16384}"
    ;;
  minb)
    timeout 240 python3 scripts/ab_bench.py --rounds 3 --out /tmp/minb-ab \
      --specs scripts/specs/row-minb.txt --variant head=build-gpu \
      --variant m1=.devcarry/fv:NJX_FWD_MINB=1 --variant m3=.devcarry/fv:NJX_FWD_MINB=3 \
      --variant m4=.devcarry/fv:NJX_FWD_MINB=4 \
      --variant o32=.devcarry/fv:NJX_FWD_VALUES=32 \
      --variant o32m8=.devcarry/fv:NJX_FWD_VALUES=32,NJX_FWD_MINB=8 2>&1 | tee "$out/minb-ab.txt"
    ;;
  addtests)
    knobs_arg "${2:-}" addtests
    test_shards addtests .devcarry/fv "${2//,/ }" 150 "${ROW_FORWARD_FILTERS[@]}" || exit 1
    ;;
  rowtests-build-gpu)
    test_shards rowtests build-gpu "" 150 "${ROW_FORWARD_FILTERS[@]}" || exit 1
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
