#!/usr/bin/env bash
# The GPU runs of session 55 (2026-12-04; performance-notes, "Launch bounds: 64 registers for the
# row kernels in CTAs of 256 and 512"). The libraries: build-gpu (this checkout, with plan.cpp's
# row_blocks_bound) and .devcarry/fv (scripts/experiments/build.sh row-forward-many-rows fv: the
# plan before the rule, with the NJX_FWD_MINB knob). On the GPU machine (carry build-gpu
# .devcarry/fv):
#   bash scripts/experiments/runs-2026-12-04.sh explore   scripts/ab_bench.py (3 rounds) of
#        scripts/specs/bf16-rows-bounded.txt, .devcarry/fv against build-gpu at 2c993e9 (the rule
#        for bf16 RMSNorm rows of 8192 alone), and of scripts/specs/rows-bounds-256.txt and
#        -512.txt with NJX_FWD_MINB=1 and 4 (CTAs of 256) or 2 (CTAs of 512) (~2.5 minutes)
#   bash scripts/experiments/runs-2026-12-04.sh bounds   the rule's GPU test, then
#        scripts/ab_bench.py (3 rounds) of scripts/specs/rows-launch-bounds.txt, before the rule
#        (.devcarry/fv) against build-gpu (~2 minutes; timing)
#   bash scripts/experiments/runs-2026-12-04.sh rowtests   the forward row kernels' GPU tests over
#        build-gpu (the shards of runs-2026-12-08.sh addtests; ~75 s)
#   bash scripts/experiments/runs-2026-12-04.sh bwide   (four of its lines ran in session 55, not kept; build
#        .devcarry/bw first, scripts/experiments/build.sh row-backward-wide-form bw, and carry it)
#        scripts/ab_bench.py (3 rounds) of scripts/specs/row-backward-wide-form.txt: the row
#        backward's teams of 512 in the wide teams' form (w: NJX_BWD_WIDE=512), with 2 CTAs an SM
#        (wm2: and NJX_BWD_MINB=2), and teams of 256 so too (w256m2; RMSNorm only) (~2.5 minutes)
#   bash scripts/experiments/runs-2026-12-04.sh fewbounds   (prepared for the next session)
#        scripts/ab_bench.py (3 rounds) of scripts/specs/rows-bounds-few-rows.txt: build-gpu against
#        .devcarry/fv with NJX_FWD_MINB=2, launch bounds in the few-rows class of CTAs of 512
#        (LayerNorm bf16 rows of 9216-12288 at 133-256 rows: one round of CTAs, not two) (~1 minute)
#   bash scripts/experiments/runs-2026-12-04.sh l2seed   (session 56)
#        the f32 LayerNorm seed's parameters kept in L2 (split-l2-persist.patch, .devcarry/l2:
#        the persisting set-aside, an access policy window, the stage where one row fills the
#        chip), scripts/ab_bench.py (3 rounds) on scripts/specs/split-l2-persist.txt (~2.5 minutes)
#   bash scripts/experiments/runs-2026-12-04.sh boundtests   (session 56) the launch bounds'
#        GPU test and the forward row kernels' GPU tests over build-gpu (~2 minutes)
#   bash scripts/experiments/runs-2026-12-04.sh pad   (session 56) add + RMSNorm at 1024 tokens
#        in two rounds of CTAs (row-occupancy-pad.patch, .devcarry/pad: NJX_PAD_SMEM), ab_bench
#        (3 rounds) on scripts/specs/row-occupancy-pad.txt (~1.5 minutes)
#   bash scripts/experiments/runs-2026-12-04.sh ncuadd   (session 56) Nsight Compute of add +
#        RMSNorm [1024, H] (H 2048, 4096, 8192; bf16): normjit's kernel beside torch.compile's,
#        by scripts/ncu_rows_vs_compile.sh's add cases (~2 minutes; session 56 measured with this
#        subcommand's first form at 5eeeb6c, scripts/experiments/ncu_compile_kernel.py)
#   bash scripts/experiments/runs-2026-12-04.sh pftable   (prepared in session 56) add + RMSNorm
#        at 1024 tokens in the variants table's harness (tools/bench_variants.py, rotating inputs,
#        torch.compile beside it) over .devcarry/pfs (row-forward-prefetch-scope.patch) with the
#        row's L2 prefetch as the plan has it and with NJX_PF_OFF=1, twice each in turn (~4 min)
#   bash scripts/experiments/runs-2026-12-04.sh pfvariants   (session 57) the variants table's
#        harness over .devcarry/pfs, the row prefetch as planned and off (NJX_PF_OFF=1), one round
#        each in turn per variant: add + RMSNorm (1), Gemma (4), f32 weight and fp8 out (2,3) at
#        1024, 4096 and 16384 tokens of 2048, 4096 and 8192 (~3.5 minutes; carry .devcarry/pfs .whl)
#   bash scripts/experiments/runs-2026-12-04.sh clusters   (session 57) the split kernel's slots as
#        thread-block clusters (split-cluster-exchange.patch, .devcarry/cl: NJX_CLUSTER=N): the
#        split GPU tests with NJX_CLUSTER=16, then ab_bench (2 rounds) of
#        scripts/specs/split-cluster.txt, clusters of at most 8 and 16 CTAs (~1.5 minutes; carry
#        build-gpu .devcarry/cl)
#   bash scripts/experiments/runs-2026-12-04.sh pinned   (session 57) the row kernel's parameter
#        loads kept above its reduction (row-params-pinned.patch, .devcarry/pin: NJX_PIN=1 every
#        kernel loading them with x, 2 the few-rows class): the forward row GPU tests with
#        NJX_PIN=1, then ab_bench (2 rounds) of scripts/specs/row-params-pinned.txt (~3 minutes;
#        carry build-gpu .devcarry/pin)
#   bash scripts/experiments/runs-2026-12-04.sh pinrows   (session 57) after the rule (kPinParams):
#        the forward row GPU tests over build-gpu, then the variants table's QK-norm rows
#        (tools/bench_variants.py --only 5) and ab_bench (2 rounds) of
#        scripts/specs/row-forward-few-short.txt, the plan before the rule (.devcarry/pin, its knob
#        unset) against build-gpu (~3 minutes; carry build-gpu .devcarry/pin .whl)
#   bash scripts/experiments/runs-2026-12-04.sh policy   (session 57) the L2 policy of x chosen by
#        a selp of two constant policies (evict-policy-select.patch, .devcarry/pol): GPU tests of
#        the rows that choose it, then ab_bench (2 rounds) of scripts/specs/evict-policy-select.txt,
#        build-gpu against .devcarry/pol (~2 minutes; carry build-gpu .devcarry/pol)
#   bash scripts/experiments/runs-2026-12-04.sh pinmany   (prepared in session 57) ab_bench (3
#        rounds) of scripts/specs/rows-pin-many.txt, .devcarry/pin with and without NJX_PIN=1: the
#        pinning store in launches of many rows in teams within a warp (~1.5 minutes; carry
#        .devcarry/pin)
#   bash scripts/experiments/runs-2026-12-04.sh pinteams   (session 58) the same A/B (3 rounds) of
#        scripts/specs/rows-pin-teams.txt: teams of 64 and 128 with the parameters loaded with x
#        (~1.5 minutes; carry .devcarry/pin)
#   bash scripts/experiments/runs-2026-12-04.sh pinresidual   (prepared in session 58) the same
#        A/B of scripts/specs/add-layernorm-teams.txt (add + LayerNorm, whose rows of 4096 to 8192
#        load the parameters with x), NJX_PIN=1 and =2 (few rows only) (~2 minutes; carry
#        .devcarry/pin)
#   bash scripts/experiments/runs-2026-12-04.sh pinwide   (prepared in session 58) the same A/B of
#        scripts/specs/rows-pin-wide.txt (~1.5 minutes; carry .devcarry/pin)
#   bash scripts/experiments/runs-2026-12-04.sh pinvariants   (prepared in session 59) the same
#        A/B of scripts/specs/rows-pin-variants.txt: f32 weight, Gemma, fp8 out, the combined
#        variant and the decode rows, whose SASS has parameter loads after the first shuffle (~2
#        minutes; carry .devcarry/pin)
#   bash scripts/experiments/runs-2026-12-04.sh paramsbatch   (prepared in session 59) the row
#        kernels' parameters loaded at the store all at once before the first store
#        (row-params-batched.patch, .devcarry/pb: NJX_PARAMS_BATCH=1): the forward row GPU tests
#        with the knob, then ab_bench (3 rounds) of scripts/specs/rows-params-batched.txt (~4
#        minutes; carry build-gpu .devcarry/pb)
#   bash scripts/experiments/runs-2026-12-04.sh bwtests KNOBS   the row backward's GPU tests over
#        .devcarry/bw with KNOBS (e.g. NJX_BWD_WIDE=512,NJX_BWD_MINB=2; 3 shards, ~3 minutes)
# Logs and tables go to $OUT (default ./runs-out).
set -uo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
  explore)
    timeout 150 python3 scripts/ab_bench.py --rounds 3 --out /tmp/bounds-ab \
      --specs scripts/specs/bf16-rows-bounded.txt --variant before=.devcarry/fv \
      --variant after=build-gpu 2>&1 | grep -v '^round' | tee "$out/bounds-ab.txt"
    ab_variants bounds256 120 3 scripts/specs/rows-bounds-256.txt .devcarry/fv \
      m1=NJX_FWD_MINB=1 m4=NJX_FWD_MINB=4 | grep -v '^round'
    ab_variants bounds512 60 3 scripts/specs/rows-bounds-512.txt .devcarry/fv \
      m1=NJX_FWD_MINB=1 m2=NJX_FWD_MINB=2 | grep -v '^round'
    ;;
  bounds)
    timeout 90 build-gpu/tests/gpu/gpu_tests \
      --gtest_filter='Variants.SixteenBitRowsUnderLaunchBounds' 2>&1 |
      tail -4 | tee "$out/bounds-test.txt"
    timeout 200 python3 scripts/ab_bench.py --rounds 3 --out /tmp/rows-bounds-ab \
      --specs scripts/specs/rows-launch-bounds.txt --variant before=.devcarry/fv \
      --variant after=build-gpu 2>&1 | grep -v '^round' | tee "$out/rows-bounds-ab.txt"
    ;;
  bwide)
    ab_variants bwide 220 3 scripts/specs/row-backward-wide-form.txt .devcarry/bw \
      w=NJX_BWD_WIDE=512 wm2=NJX_BWD_WIDE=512,NJX_BWD_MINB=2 \
      w256m2=NJX_BWD_WIDE=256,NJX_BWD_MINB=2 | grep -v '^round'
    ;;
  fewbounds)
    timeout 150 python3 scripts/ab_bench.py --rounds 3 --out /tmp/fewbounds-ab \
      --specs scripts/specs/rows-bounds-few-rows.txt --variant head=build-gpu \
      --variant m2=.devcarry/fv:NJX_FWD_MINB=2 2>&1 | grep -v '^round' |
      tee "$out/fewbounds-ab.txt"
    ;;
  l2seed)
    seed='op=layernorm shape=16,64,256,256 dtype=f32 normalized_dims=3 affine=both eps=1e-05'
    export LD_LIBRARY_PATH=.devcarry/l2${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    NJX_L2_SETASIDE=64 NJX_L2_WINDOW=1 timeout 60 .devcarry/l2/tools/normjit bench \
      --spec "$seed" --repeat 20 2>&1 | tail -6 | tee "$out/l2seed-window.txt"
    ab_variants l2seed 240 3 scripts/specs/split-l2-persist.txt .devcarry/l2 \
      sa=NJX_L2_SETASIDE=64 saw=NJX_L2_SETASIDE=64,NJX_L2_WINDOW=1 st2=NJX_STAGE2=1 \
      st2sa=NJX_STAGE2=1,NJX_L2_SETASIDE=64 \
      st2saw=NJX_STAGE2=1,NJX_L2_SETASIDE=64,NJX_L2_WINDOW=1 | grep -v '^round'
    # DRAM bytes of one launch of the seed per setting (x and y: 268 MB each; weight and bias 33.6)
    for knobs in "" "NJX_L2_SETASIDE=64" "NJX_L2_SETASIDE=64 NJX_L2_WINDOW=1" "NJX_STAGE2=1" \
      "NJX_STAGE2=1 NJX_L2_SETASIDE=64 NJX_L2_WINDOW=1"; do
      echo "== ncu ${knobs:-head}"
      # shellcheck disable=SC2086  # the knobs are words
      env $knobs timeout 90 ncu --clock-control none --metrics \
        dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum -k regex:row_split \
        --launch-skip 3 -c 1 .devcarry/l2/tools/normjit bench --spec "$seed" --repeat 5 2>&1 |
        grep -E 'dram__|gpu__time|njx:|ERROR' || echo "(ncu gave no metrics)"
    done 2>&1 | tee "$out/l2seed-ncu.txt"
    ;;
  pad)
    ab_variants pad 200 3 scripts/specs/row-occupancy-pad.txt .devcarry/pad \
      p37=NJX_PAD_SMEM=37888 p44=NJX_PAD_SMEM=45056 p56=NJX_PAD_SMEM=57344 \
      p75=NJX_PAD_SMEM=76800 | grep -v '^round'
    ;;
  ncuadd)
    OUT=$out/ncuadd bash scripts/ncu_rows_vs_compile.sh build-gpu 1024,2048,bf16,add \
      1024,4096,bf16,add 1024,8192,bf16,add 2>&1 | tee "$out/ncuadd.txt"
    ;;
  pftable)
    for round in 1 2; do
      for knob in on off; do
        echo "== round $round, the row prefetch $knob"
        cp docs/performance.md "/tmp/pf-$knob.md"
        knobs=(-u NJX_PF_OFF)  # the patch reads any NJX_PF_OFF as off
        [ "$knob" = off ] && knobs=(NJX_PF_OFF=1)
        env "${knobs[@]}" timeout 170 python3 \
          tools/bench_variants.py --lib .devcarry/pfs/libnormjit.so --only add-rmsnorm \
          --tokens 1024 --hiddens 2048,4096,8192 --budget-s 150 --doc "/tmp/pf-$knob.md" \
          --section-out "$out/pftable-$knob-$round.md" --json-out "$out/pftable-$knob-$round.json" \
          2>&1 | tail -3
        grep -E '^\| 1024 ' "$out/pftable-$knob-$round.md" || echo "(no rows)"
      done
    done 2>&1 | tee "$out/pftable.txt"
    ;;
  pfvariants)
    mkdir -p "$out/pfv"
    for v in 1 4 2,3; do
      for knob in on off; do
        knobs=(-u NJX_PF_OFF)
        [ "$knob" = off ] && knobs=(NJX_PF_OFF=1)
        cp docs/performance.md "/tmp/pfv-$knob.md"
        env "${knobs[@]}" timeout 95 python3 tools/bench_variants.py \
          --lib .devcarry/pfs/libnormjit.so --only "$v" --tokens 1024,4096,16384 \
          --hiddens 2048,4096,8192 --budget-s 80 --doc "/tmp/pfv-$knob.md" \
          --section-out "$out/pfv/v${v/,/}-$knob.md" --json-out "$out/pfv/v${v/,/}-$knob.json" \
          >"$out/pfv/v${v/,/}-$knob.log" 2>&1
        echo "variants $v, the row prefetch $knob: exit $?"
      done
    done
    # (the device tool brings back few files: one archive)
    tar czf "$out/pfvariants.tgz" -C "$out" pfv && rm -rf "$out/pfv"
    ;;
  clusters)
    NJX_CLUSTER=16 LD_LIBRARY_PATH=.devcarry/cl NORMJIT_CACHE_DIR=/tmp/clc timeout 200 \
      build-gpu/tests/gpu/gpu_tests --gtest_filter='Ops.SplitRows*:Ops.UnstagedGroupNorm*:Capture.*:Variants.ActivationGroupNormOnDiffusionShapes:Variants.LongRowsSplit*' \
      >"$out/cltests.log" 2>&1
    echo "split tests with clusters: exit $?"
    grep -E '^\[  (PASSED|FAILED)  \]' "$out/cltests.log"
    timeout 300 python3 scripts/ab_bench.py --rounds 2 --out /tmp/clab \
      --specs scripts/specs/split-cluster.txt --variant head=.devcarry/cl \
      --variant c8=.devcarry/cl:NJX_CLUSTER=8 --variant c16=.devcarry/cl:NJX_CLUSTER=16 2>&1 |
      grep -v '^round' | tee "$out/clab.txt"
    ;;
  pinned)
    test_shards pinned .devcarry/pin NJX_PIN=1 150 "${ROW_FORWARD_FILTERS[@]}"
    echo "forward row tests with NJX_PIN=1: exit $?"
    timeout 300 python3 scripts/ab_bench.py --rounds 2 --out /tmp/pinab \
      --specs scripts/specs/row-params-pinned.txt --variant head=.devcarry/pin \
      --variant p1=.devcarry/pin:NJX_PIN=1 --variant p2=.devcarry/pin:NJX_PIN=2 2>&1 |
      grep -v '^round' | tee "$out/pinab.txt"
    ;;
  pinrows)
    bash "$(dirname "$0")/runs-2026-12-08.sh" rowtests-build-gpu
    echo "forward row tests over build-gpu: exit $?"
    cp docs/performance.md /tmp/pin-doc.md
    timeout 150 python3 tools/bench_variants.py --build build-gpu --only 5 --budget-s 120 \
      --doc /tmp/pin-doc.md --section-out "$out/qk.md" --json-out "$out/qk.json" 2>&1 | tail -2
    grep -E '^\| [0-9]+ \| 32x128' "$out/qk.md"
    timeout 120 python3 scripts/ab_bench.py --rounds 2 --out /tmp/pinfew \
      --specs scripts/specs/row-forward-few-short.txt --variant before=.devcarry/pin \
      --variant after=build-gpu 2>&1 | grep -v '^round' | tee "$out/pinfew.txt"
    ;;
  policy)
    LD_LIBRARY_PATH=.devcarry/pol NORMJIT_CACHE_DIR=/tmp/pol-cache timeout 150 \
      build-gpu/tests/gpu/gpu_tests --gtest_filter='Variants.TransformerRows*:Variants.OddAndTinyRows:Variants.StridedRows*:Variants.BatchInvariance*:Capture.*' \
      >"$out/policy-tests.log" 2>&1
    echo "row tests over .devcarry/pol: exit $?"
    grep -E '^\[  (PASSED|FAILED)  \]' "$out/policy-tests.log"
    timeout 200 python3 scripts/ab_bench.py --rounds 2 --out /tmp/polab \
      --specs scripts/specs/evict-policy-select.txt --variant before=build-gpu \
      --variant after=.devcarry/pol 2>&1 | grep -v '^round' | tee "$out/policy-ab.txt"
    ;;
  pinmany)
    timeout 200 python3 scripts/ab_bench.py --rounds 3 --out /tmp/pinmany \
      --specs scripts/specs/rows-pin-many.txt --variant head=.devcarry/pin \
      --variant p1=.devcarry/pin:NJX_PIN=1 2>&1 | grep -v '^round' | tee "$out/pinmany.txt"
    ;;
  pinteams)
    timeout 200 python3 scripts/ab_bench.py --rounds 3 --out /tmp/pinteams \
      --specs scripts/specs/rows-pin-teams.txt --variant head=.devcarry/pin \
      --variant p1=.devcarry/pin:NJX_PIN=1 2>&1 | grep -v '^round' | tee "$out/pinteams.txt"
    ;;
  pinresidual)
    timeout 240 python3 scripts/ab_bench.py --rounds 3 --out /tmp/pinresidual \
      --specs scripts/specs/add-layernorm-teams.txt --variant head=.devcarry/pin \
      --variant p1=.devcarry/pin:NJX_PIN=1 --variant p2=.devcarry/pin:NJX_PIN=2 2>&1 |
      grep -v '^round' | tee "$out/pinresidual.txt"
    ;;
  pinwide)
    timeout 200 python3 scripts/ab_bench.py --rounds 3 --out /tmp/pinwide \
      --specs scripts/specs/rows-pin-wide.txt --variant head=.devcarry/pin \
      --variant p1=.devcarry/pin:NJX_PIN=1 2>&1 | grep -v '^round' | tee "$out/pinwide.txt"
    ;;
  pinvariants)
    ab_variants pinvariants 240 3 scripts/specs/rows-pin-variants.txt .devcarry/pin p1=NJX_PIN=1
    ;;
  paramsbatch)
    test_shards batchtests .devcarry/pb "NJX_PARAMS_BATCH=1" 150 "${ROW_FORWARD_FILTERS[@]}"
    ab_variants paramsbatch 240 3 scripts/specs/rows-params-batched.txt .devcarry/pb \
      batch=NJX_PARAMS_BATCH=1
    ;;
  boundtests)
    timeout 120 build-gpu/tests/gpu/gpu_tests \
      --gtest_filter='Variants.SixteenBitRowsUnderLaunchBounds' 2>&1 |
      tail -4 | tee "$out/bounds-test.txt"
    bash "$(dirname "$0")/runs-2026-12-08.sh" rowtests-build-gpu
    ;;
  bwtests)
    if [ -z "${2:-}" ]; then
      echo "runs-2026-12-04.sh: bwtests takes the knobs, e.g. NJX_BWD_WIDE=512,NJX_BWD_MINB=2" >&2
      exit 2
    fi
    test_shards bwtests .devcarry/bw "${2//,/ }" 240 "${ROW_BACKWARD_FILTERS[@]}" || exit 1
    ;;
  rowtests)
    bash "$(dirname "$0")/runs-2026-12-08.sh" rowtests-build-gpu
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
