# shellcheck shell=bash
# What scripts/perf.sh, perf_backward.sh, perf_variants.sh and perf_vision.sh share (sourced,
# from the repository root, under `set -euo pipefail`).
#
# liger_from_wheels NAME: where PyTorch's Python cannot import liger_kernel already, unpacks
#   the first WHEELS/liger_kernel-*.whl (WHEELS default: .whl; the wheel is pure Python) into a
#   folder of its own (TMPDIR/normjit-NAME-site) and puts it on PYTHONPATH; without one, the
#   tables' Liger column says why it is absent.
# run_bench NAME COPIES CMD...: runs CMD; where OUT is set (the GPU machine's folder that comes
#   back), its output is also written to OUT/NAME.log and each file of COPIES (a space-separated
#   list of paths) that exists is copied into OUT, whatever CMD's exit status. Sets
#   bench_status to CMD's exit status.

liger_from_wheels() {
  local name=$1 wheels=${WHEELS:-$PWD/.whl} w site
  if python3 -c "import liger_kernel" 2>/dev/null; then
    return 0
  fi
  for w in "$wheels"/liger_kernel-*.whl; do
    [ -f "$w" ] || continue
    site=${TMPDIR:-/tmp}/normjit-$name-site
    rm -rf "$site"
    mkdir -p "$site"
    python3 -m zipfile -e "$w" "$site"
    export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
    echo "$name: Liger-Kernel from $(basename "$w")"
    return 0
  done
}

# shellcheck disable=SC2034  # bench_status is read by the sourcing script
run_bench() {
  local name=$1 copies=$2 f
  shift 2
  bench_status=0
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    "$@" 2>&1 | tee "$OUT/$name.log" || bench_status=$?
    for f in $copies; do
      if [ -f "$f" ]; then cp "$f" "$OUT/"; fi
    done
  else
    "$@" || bench_status=$?
  fi
}
