#!/usr/bin/env python3
"""SpAdd and SpGEMM of real matrices with their transposes and with random masks, vs scipy.

The cases of ../shared/checks/check_cli.py's `coiter`, with the comparison it intends: the
pattern of the result's non-zeros equals scipy's, and max |C - C_ref| <= 1e-12 * max |C_ref|.
(That script's formula compares the difference matrix's entries with max |C_ref| itself, so it
reports 1.0 even for bit-identical results.)

usage: check_coiter.py --bin build/release/lacuna --dir DIR --matrices A.mtx ...
       [--kernels spadd spgemm] [--pairs T R]   (T: A with its transpose, R: with a random mask;
       A @ A.T of a large graph can need many GB in scipy)
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import scipy.io
import scipy.sparse as sp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--matrices", nargs="+", required=True)
    ap.add_argument("--kernels", nargs="+", default=["spadd", "spgemm"])
    ap.add_argument("--pairs", nargs="+", default=["T", "R"])
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="lacuna-coiter-")
    fails, done = [], 0
    for name in a.matrices:
        A = sp.csr_matrix(scipy.io.mmread(os.path.join(a.dir, name))).astype(np.float64)
        A.sum_duplicates()
        if A.shape[0] != A.shape[1]:
            continue
        n = A.shape[0]
        if n * n <= 10**8:
            R = sp.random(n, n, density=min(1.0, 2.0 / n), random_state=3, format="csr")
        else:
            # sp.random draws from all n*n positions (GBs for large graphs): draw 2n instead.
            rng = np.random.default_rng(3)
            R = sp.coo_matrix((rng.random(2 * n), (rng.integers(0, n, 2 * n), rng.integers(0, n, 2 * n))),
                              shape=(n, n)).tocsr()
            R.sum_duplicates()
        scipy.io.mmwrite(f"{tmp}/A.mtx", A)
        for tag, B in (("T", A.T.tocsr()), ("R", R)):
            if tag not in a.pairs:
                continue
            scipy.io.mmwrite(f"{tmp}/B.mtx", B)
            for kernel, ref in (("spadd", lambda: A + B), ("spgemm", lambda: A @ B)):
                if kernel not in a.kernels:
                    continue
                ref = ref()
                out = f"{tmp}/C.mtx"
                if os.path.exists(out):
                    os.remove(out)
                r = subprocess.run([a.bin, "run", f"examples/{kernel}.ron", "--input", f"A={tmp}/A.mtx",
                                    "--input", f"B={tmp}/B.mtx", "--out", f"C={out}"], capture_output=True, text=True)
                if r.returncode != 0 or not os.path.exists(out):
                    fails.append(f"{kernel}/{name}/{tag}: rc={r.returncode} {r.stderr.strip()[-200:]}")
                    continue
                got = sp.csr_matrix(scipy.io.mmread(out))
                ref = sp.csr_matrix(ref)
                same = ((got != 0) != (ref != 0)).nnz == 0
                diff = abs(got - ref).max() if (got - ref).nnz else 0.0
                scale = max(abs(ref).max() if ref.nnz else 0.0, 1e-300)
                err = diff / scale
                done += 1
                print(f"{kernel:6s} {name:24s} {tag} nnz={got.nnz}/{ref.nnz} pattern={'same' if same else 'DIFFERENT'} relerr={err:.1e}")
                if not same or not err <= 1e-12:
                    fails.append(f"{kernel}/{name}/{tag}: pattern {'same' if same else 'different'}, relerr {err:.1e}")
    for f in fails:
        print("FAIL", f)
    print(f"{done} co-iteration cases agree with scipy, {len(fails)} fail")
    return 0 if done and not fails else 1


if __name__ == "__main__":
    sys.exit(main())
