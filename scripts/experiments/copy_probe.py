#!/usr/bin/env python3
"""The backward table's copy, probed at every step of a row (session 75's diagnostic).

docs/perf_backward.json (H100, 2026-12-05) has the copy of the same bytes about 3 µs slower in
the RMSNorm rows than in the LayerNorm rows at 1024 tokens. This runs tools/bench_backward.py
as it is, and in each row also times the row's copy (the same bytes and rotation, the same
time_calls) at the row's start and after each implementation: `kept`, one set of buffers
allocated at the row's start and used by every probe of the row, and `fresh`, new buffers each
probe (as the table's copy has). A state that slows the copy shows as one step's probes.

  python3 scripts/experiments/copy_probe.py [bench_backward.py flags]
prints `probe ROW STEP kept X fresh Y` lines (µs, medians) beside the bench's log.
"""
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import bench_backward as bb  # noqa: E402
import compare_torch as ct  # noqa: E402

state = {}


def median_us(bench, fn) -> float:
    return statistics.median(bench.time_calls(fn)) * 1e3


def probe(bench, row, step: str) -> None:
    kept = state.get(row.problem.key)
    if kept is None:
        kept = state[row.problem.key] = ct.own_copy(row.bytes_moved, row.rotation, bench.dev)
    fresh = ct.own_copy(row.bytes_moved, row.rotation, bench.dev)
    a = median_us(bench, kept)
    b = median_us(bench, fresh)
    del fresh
    print(f"probe {row.problem.key} {step:13s} kept {a:8.2f} fresh {b:8.2f}", flush=True)


run_normjit, run_autograd, measure_copy = bb.Bench.run_normjit, bb.Bench.run_autograd, \
    bb.Bench.measure_copy


def probed_normjit(self, p, row, *args, **kwargs):
    probe(self, row, "start")
    run_normjit(self, p, row, *args, **kwargs)
    probe(self, row, "after normjit")


def probed_autograd(self, p, row, impl, *args, **kwargs):
    run_autograd(self, p, row, impl, *args, **kwargs)
    probe(self, row, "after " + impl)


def probed_copy(self, nbytes, sets):
    m = measure_copy(self, nbytes, sets)
    print(f"probe table copy {m.ms * 1e3 if m.ms else float('nan'):8.2f}", flush=True)
    state.clear()
    self.free()
    return m


bb.Bench.run_normjit = probed_normjit
bb.Bench.run_autograd = probed_autograd
bb.Bench.measure_copy = probed_copy

if __name__ == "__main__":
    sys.exit(bb.main(sys.argv[1:]))
