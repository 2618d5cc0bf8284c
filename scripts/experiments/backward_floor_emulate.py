#!/usr/bin/env python3
"""Phase 2 of backward_floor.cu's two-phase kernel emulated with NumPy (no GPU): its threads'
rows and words, dx, and the column sums in runs of row groups, on small sizes and each slice
width the kernel is built for (2, 4 and 8 words a row), against NumPy's sums; it checks that
every element of dx is written once and every column summed.
  python3 scripts/experiments/backward_floor_emulate.py      (prints one `ok` line a case)
"""
import numpy as np

VEC, AHEAD = 8, 4  # backward_floor.cu's kVec, kAhead


def emulate(h: int, threads: int, sums: int, rows: int, grid: int, slice_words: int) -> None:
    SLICE = slice_words  # the kernel's kSlice
    row_words, groups = h // VEC, threads // SLICE
    cols = sums * SLICE * VEC
    parts = threads // cols
    assert parts * cols == threads and groups % parts == 0, "the kernel's static_assert"
    rng = np.random.default_rng(76)
    x, dy = rng.standard_normal((rows, h)), rng.standard_normal((rows, h))
    a = (x * dy).sum(1) / h
    b = dy.sum(1) / h if sums > 1 else np.zeros(rows)
    dx, dw = np.full((rows, h), np.nan), np.full(sums * h, np.nan)
    writes = np.zeros((rows, h), int)
    for block in range(grid):
        for sl in range(block, row_words // SLICE, grid):
            colsum = np.zeros((sums, groups, SLICE * VEC))
            for t in range(threads):
                word, group = t % SLICE, t // SLICE
                at = slice((sl * SLICE + word) * VEC, (sl * SLICE + word + 1) * VEC)
                acc = np.zeros((sums, VEC))
                for base in range(group, rows, groups * AHEAD):
                    for k in range(AHEAD):
                        row = base + k * groups
                        if row < rows:
                            xv, dv = x[row, at], dy[row, at]
                            dx[row, at] = dv - xv * a[row] - b[row]
                            writes[row, at] += 1
                            acc[0] += xv * dv
                            acc[sums - 1] += dv if sums > 1 else 0
                colsum[:, group, word * VEC:(word + 1) * VEC] = acc
            partsum = np.zeros((parts, cols))
            run = groups // parts
            for t in range(threads):
                k, part = t % cols, t // cols
                c, col = divmod(k, SLICE * VEC)
                partsum[part, k] = colsum[c, part * run:(part + 1) * run, col].sum()
            for k in range(cols):
                c, col = divmod(k, SLICE * VEC)
                dw[c * h + sl * SLICE * VEC + col] = partsum[:, k].sum()
    assert (writes == 1).all(), "an element of dx written other than once"
    assert np.allclose(dx, dy - x * a[:, None] - b[:, None])
    for c, want in enumerate([(x * dy).sum(0), dy.sum(0)][:sums]):
        assert np.allclose(dw[c * h:(c + 1) * h], want)
    print(f"ok: H {h}, {threads} threads, {sums} sums, {rows} rows, grid {grid}, slice {SLICE}")


if __name__ == "__main__":
    for case in ((256, 16, 1, 37, 3, 2), (256, 64, 2, 37, 5, 2), (512, 64, 2, 100, 2, 2),
                 (128, 32, 1, 7, 9, 2), (256, 32, 1, 1000, 3, 2), (512, 64, 1, 37, 3, 4),
                 (512, 128, 2, 100, 5, 4), (1024, 128, 1, 37, 3, 8), (1024, 256, 2, 70, 2, 8)):
        emulate(*case)
