"""The GIL is released while a kernel runs: other Python threads keep running meanwhile."""

from __future__ import annotations

import threading
import time

import numpy as np

import lacuna
from conftest import assert_close, kernel, random_csr


def test_gil_is_released_while_running():
    f = lacuna.build(kernel("spmm"))
    a = random_csr(20000, 20000, density=0.002, seed=1)
    b = np.random.default_rng(1).standard_normal((20000, 256))
    out = np.empty((20000, 256))
    t0 = time.perf_counter()
    f(A=a, B=b, out={"C": out})
    alone = time.perf_counter() - t0
    assert alone > 0.1, "the kernel must run long enough to observe"
    # While another thread runs the kernel, this thread keeps taking the GIL: the longest gap
    # between its iterations stays far below the kernel's running time.
    done = threading.Event()

    def worker():
        f(A=a, B=b, out={"C": out})
        done.set()

    th = threading.Thread(target=worker)
    ticks = []
    th.start()
    while not done.is_set():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    th.join()
    assert len(ticks) >= 5
    gaps = np.diff(ticks)
    assert gaps.max() < 0.5 * alone + 0.02, (gaps.max(), alone)
    assert_close(out, a @ b)


def test_concurrent_calls_from_threads_agree():
    f = lacuna.build(kernel("spmv"))
    mats = [random_csr(300, 200, density=0.05, seed=s) for s in range(8)]
    x = np.linspace(-1.0, 1.0, 200)
    results = [None] * len(mats)

    def run(i):
        results[i] = f(A=mats[i], x=x)["y"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(mats))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for m, y in zip(mats, results):
        assert_close(y, m @ x)


def test_thread_count_per_call():
    # `threads=N` runs the parallel loops on a pool of N threads: SpGEMM's row chunks and
    # SpAdd (two passes over row chunks on more than two threads, one serial pass below) give
    # the same bits at every count; 0 threads is a ValueError.
    import pytest

    gemm = lacuna.build(kernel("spgemm"))
    a = random_csr(300, 200, density=0.05, seed=5)
    b = random_csr(200, 150, density=0.05, seed=6)
    results = [gemm(A=a, B=b, threads=t)["C"] for t in (1, 2, 3, 4)]
    for r in results[1:]:
        assert (r != results[0]).nnz == 0
    assert_close(results[0], (a @ b).tocsr())
    add = lacuna.build(kernel("spadd"))
    sums = [add(A=a, B=a, threads=t)["C"] for t in (1, 2, 3)]
    for r in sums[1:]:
        assert (r != sums[0]).nnz == 0
    assert_close(sums[0], (a + a).tocsr())
    with pytest.raises(ValueError, match="threads"):
        gemm(A=a, B=b, threads=0)
    # A pool of a million threads is refused before any is started.
    with pytest.raises(ValueError, match="threads: 1 to 1024"):
        gemm(A=a, B=b, threads=1_000_000)
