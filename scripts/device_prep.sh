#!/usr/bin/env bash
# Prepares, on this machine, what the GPU machine's runs carry (the device tool sends the working
# tree and the git-ignored folders named in its `carry`), so that a fresh checkout is ready for
# scripts/gpu_suite.sh and the performance scripts in one step:
#   scripts/device_prep.sh [build-dir]      (default: build-gpu)
# - the build folder: scripts/setup.sh (its Debian packages, .venv with lit, scikit-build-core
#   and pytest) with NORMJIT_BUILD_TYPE=Release;
# - .whl: normjit's wheel built from this checkout (the previous one removed), and the pure-Python
#   wheels the GPU machine has no way to download: Liger-Kernel (the performance scripts' peer),
#   diffusers with importlib_metadata and zipp (the patch() tests on diffusers' classes);
# - BUILD/peers: FlashInfer's and vLLM's CUDA RMSNorm kernels as libraries
#   (scripts/peers/build_flashinfer.sh, scripts/peers/build_vllm.sh: the performance scripts'
#   FlashInfer and vLLM peers; vLLM's needs PyTorch's headers, TORCH_INCLUDE where this machine's
#   python3 has no torch, else its sources stay in BUILD/peers, and scripts/perf.sh and
#   perf_variants.sh build it there on the GPU machine before their tables); if a step fails,
#   the tables say that peer is absent and why, and the rest is ready.
# Then carry `BUILD .whl` (about 45 MiB). Idempotent: a re-run rebuilds what changed and keeps
# wheels already downloaded. Exit status: 0 ready; 1 a step failed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
build=${1:-build-gpu}
wheels=$here/.whl
liger=liger_kernel==0.8.5
extras=(diffusers importlib_metadata zipp)

NORMJIT_BUILD_TYPE=Release bash scripts/setup.sh "$build"
echo "device_prep: built $build (Release)"

mkdir -p "$wheels"
rm -f "$wheels"/normjit-*.whl
.venv/bin/pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w "$wheels" .
echo "device_prep: $(basename "$(ls "$wheels"/normjit-*.whl)") built at $(git rev-parse --short HEAD)"

have() { ls "$wheels"/"$1"-*.whl >/dev/null 2>&1; }
have liger_kernel || .venv/bin/pip download -q --disable-pip-version-check --no-deps \
  --only-binary=:all: -d "$wheels" "$liger"
for name in "${extras[@]}"; do
  have "$name" || .venv/bin/pip download -q --disable-pip-version-check --no-deps \
    --only-binary=:all: -d "$wheels" "$name"
done
for peer in flashinfer vllm; do
  if ! bash "scripts/peers/build_$peer.sh" "$build"; then
    echo "device_prep: warning: the $peer peer was not built; the tables will say it is absent" >&2
  fi
done
echo "device_prep: $wheels holds $(find "$wheels" -maxdepth 1 -type f -name '*.whl' -printf '%f ')"
echo "device_prep: carry $build .whl ($(du -sh "$build" | cut -f1) and $(du -sh "$wheels" | cut -f1))"
