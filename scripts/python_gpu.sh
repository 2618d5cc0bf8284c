#!/usr/bin/env bash
# The Python part on the GPU machine, which has PyTorch, transformers and timm but no network
# and no pip index: the wheels in WHEELS (default .whl/: normjit's, built on the build machine
# with `pip wheel --no-deps -w .whl .`, and pytest's from `pip download -d .whl pytest`) are
# unpacked into a folder put on PYTHONPATH (packages the machine already has are left to it),
# then: the pytest suite (tests/python, GPU tests included), scripts/host_cost.py (writes
# docs/host-cost.md and its block in docs/performance.md) and the seed examples, batch 2.
# Logs go to $OUT (default build-py/gpu-out). Exit status: non-zero when a step failed.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
wheels=${WHEELS:-$here/.whl}
site=${NORMJIT_SITE:-/tmp/normjit-site}
out=${OUT:-$here/build-py/gpu-out}
rm -rf "$site"
mkdir -p "$site" "$out"
for w in "$wheels"/*.whl; do
  name=$(basename "$w" | cut -d- -f1)
  case "$name" in
    normjit | pytest | pluggy | iniconfig) ;;
    *) python3 -c "import $name" 2>/dev/null && continue ;;
  esac
  python3 -m zipfile -e "$w" "$site"
done
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
export NORMJIT_CACHE_DIR=${NORMJIT_CACHE_DIR:-/tmp/normjit-cache}
export PYTHONUNBUFFERED=1
status=0
nvidia-smi -L > "$out/device.txt" 2>&1
python3 -m pytest -rs -v -p no:cacheprovider --junitxml="$out/pytest.xml" tests/python \
  2>&1 | tee "$out/pytest.log"
((PIPESTATUS[0] == 0)) || status=1
python3 scripts/host_cost.py 2>&1 | tee "$out/host-cost.log"
((PIPESTATUS[0] == 0)) || status=1
python3 examples/run_seeds.py --small 2>&1 | tee "$out/seeds.log"
((PIPESTATUS[0] == 0)) || status=1
echo "python_gpu: exit $status; logs in $out"
exit "$status"
