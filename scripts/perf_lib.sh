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
# peers_from_sources NAME BUILD: where an engine peer's library is missing from BUILD/peers but
#   its sources are there (scripts/device_prep.sh keeps them: vLLM's library needs PyTorch's
#   headers, which the preparing machine may lack), builds it with scripts/peers/build_PEER.sh
#   (PyTorch's headers from this python3; no download), so that the tables' FlashInfer and vLLM
#   columns are not absent for want of that step; a build that fails leaves the column absent,
#   and says so.

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

peers_from_sources() {
  local name=$1 build=$2 peer
  for peer in flashinfer vllm; do
    [ -f "$build/peers/lib${peer}_norm.so" ] && continue
    compgen -G "$build/peers/$peer-*" >/dev/null || continue
    echo "$name: building the $peer peer from the sources in $build/peers"
    if ! bash "scripts/peers/build_$peer.sh" "$build" >"$build/peers/$peer-build.log" 2>&1; then
      echo "$name: warning: the $peer peer did not build (its log: $build/peers/$peer-build.log;" \
        "last line: $(tail -n 1 "$build/peers/$peer-build.log")); its column says it is absent" >&2
    fi
  done
}
