#!/usr/bin/env python3
"""Sparse add's second operand and records for scripts/compare-anchors.

  spadd_operand.py A.mtx B.mtx
      writes B: Aᵀ when A is square, else A with its columns shifted by one (mod n) and values
      v * 0.5 + 0.25 -- the operands that ../shared/bench/anchors/anchors.py (`add`) and
      ../shared/bench/mlir/run_mlir.sh (`spadd`, C = A + Aᵀ) use for a .mtx file.
  spadd_operand.py --record RUN.json NAME A.mtx THREADS
      prints one `lacuna bench`-style JSON line for the `lacuna run` output RUN.json.
"""
import json
import sys

import numpy as np
import scipy.io
import scipy.sparse as sp


def operand(a_path, b_path):
    A = sp.csr_matrix(scipy.io.mmread(a_path), dtype=np.float64)
    A.sum_duplicates()
    if A.shape[0] == A.shape[1]:
        B = A.T.tocsr()
    else:
        C = A.tocoo()
        B = sp.csr_matrix((C.data * 0.5 + 0.25, (C.row, (C.col.astype(np.int64) + 1) % A.shape[1])),
                          shape=A.shape)
    scipy.io.mmwrite(b_path, B.tocoo(), symmetry="general")


def record(run_path, name, a_path, threads):
    with open(run_path) as f:
        r = json.load(f)
    A = scipy.io.mmread(a_path)
    nnz = sp.csr_matrix(A).nnz
    out = r["outputs"]["C"]
    t_min, t_med = r["run_seconds"]["min"], r["run_seconds"]["median"]
    # anchors.py's traffic model for add: A, B and C in CSR (8-byte values, 4-byte indices).
    m = A.shape[0]
    csr_bytes = lambda k: 4 * (m + 1) + 12 * k
    nbytes = csr_bytes(nnz) * 2 + csr_bytes(out["nnz"])
    print(json.dumps({
        "kernel": "spadd", "matrix": name, "rows": A.shape[0], "cols": A.shape[1], "nnz": nnz,
        "k": None, "format": "csr", "schedule": r.get("schedule") or "builtin",
        "threads": int(threads), "threads_used": int(threads),
        "compile_s": r["compile_seconds"], "convert_s": r["conversion_seconds"],
        "run_s_min": t_min, "run_s_median": t_med, "flops": float(out["nnz"]),
        "gflops": out["nnz"] / t_min / 1e9 if t_min > 0 else 0.0, "bytes": nbytes,
        "gbps": nbytes / t_min / 1e9 if t_min > 0 else 0.0, "checksum": out["checksum"],
        "repeats": r["repeat"],
    }))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--record":
        record(*sys.argv[2:])
    elif len(sys.argv) == 3:
        operand(*sys.argv[1:])
    else:
        sys.exit(__doc__)
