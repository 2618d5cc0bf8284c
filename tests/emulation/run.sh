#!/usr/bin/env bash
# The kernels emulated on the host (ctest: kernel_emulation):
#   tests/emulation/run.sh DRIVER CXX WORK [SPECS] [--co LIST] [--bits]
# makes the host form of templates/normjit in WORK/templates (host_templates.py), then runs
# DRIVER (kernel_emulation) over SPECS (default: specs.txt beside this script).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
driver=$1 cxx=$2 work=$3
shift 3
specs=$here/specs.txt
if (($#)) && [[ $1 != --* ]]; then
  specs=$1
  shift
fi
rm -rf "$work"
mkdir -p "$work/templates"
python3 "$here/host_templates.py" "$here/../../templates/normjit" "$work/templates/normjit"
exec "$driver" --cxx "$cxx" --templates "$work/templates" --emulation "$here" --work "$work" \
  "$@" "$specs"
