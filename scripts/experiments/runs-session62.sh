#!/usr/bin/env bash
# The GPU runs prepared in session 62 (performance-notes, "Session 62 ..."): `focused`, `bwdperf`
# and `eh`. Session 63's runs-session63.sh holds them, its `focused` and `bwdperf` a superset
# (its kernels' tests and rows added), so this forwards there:
#   bash scripts/experiments/runs-session62.sh focused|bwdperf|eh
# OUT: the folder that comes back (default /tmp/runs-session62).
exec env OUT="${OUT:-/tmp/runs-session62}" bash "$(dirname "$0")/runs-session63.sh" "$@"
