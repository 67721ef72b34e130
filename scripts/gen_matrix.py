#!/usr/bin/env python3
"""Writes one of ../shared/bench/anchors/anchors.py's generated matrices as a Matrix Market file.

  gen_matrix.py ANCHORS_DIR FAMILY SIZE OUT.mtx

FAMILY is one of anchors.py's families (er, rmat, lap3d, block4, lap2d) and SIZE one of its
size classes (small ~100K nnz, mid ~2M, large ~20-25M: well beyond a 32 MiB L3). The matrix is
the one `anchors.py suite` times, built by anchors.py's own generator from its fixed seed, so
scripts/compare-anchors can run Lacuna, the reference libraries and MLIR on the same file.
The file is written to a temporary name beside OUT and renamed, so that an interrupted run
never leaves a truncated matrix behind.
"""
import os
import sys


def main(argv):
    if len(argv) != 5:
        sys.exit(__doc__)
    anchors_dir, family, size, out = argv[1:]
    sys.path.insert(0, anchors_dir)
    import anchors  # noqa: E402  (the shared harness; its generators are the reference)
    import scipy.io  # noqa: E402

    gens = anchors.FAMILIES.get(family)
    if gens is None:
        sys.exit(f"gen_matrix.py: unknown family `{family}` (known: {', '.join(anchors.FAMILIES)})")
    if size not in ("small", "mid", "large"):
        sys.exit(f"gen_matrix.py: unknown size `{size}` (known: small, mid, large)")
    A = gens[size]()
    tmp = f"{out}.tmp-{os.getpid()}"
    try:
        scipy.io.mmwrite(tmp, A.tocoo(), symmetry="general")
        # mmwrite appends .mtx to a name without it.
        written = tmp if os.path.exists(tmp) else tmp + ".mtx"
        os.replace(written, out)
    finally:
        for leftover in (tmp, tmp + ".mtx"):
            if os.path.exists(leftover):
                os.remove(leftover)
    print(f"{out}: {family} {size}, {A.shape[0]}x{A.shape[1]}, nnz={A.nnz}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
