#!/usr/bin/env bash
# The main job: set up, build, run `normjit demo` (on a GPU: launch, check and time the seed
# problems; without one: plan and compile them into the cache).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/setup.sh"
exec "$here/build/tools/normjit" demo "$@"
