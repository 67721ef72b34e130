#!/usr/bin/env python3
"""Lacuna's GPU schedules on a CUDA GPU, side by side with cuSPARSE (through PyTorch) in one run.

For every matrix: `lacuna bench --target cuda:ARCH` times each GPU example schedule (CUDA events
around the launches, copies excluded), one `lacuna bench` per schedule so that a failure loses
only that case; its checksum is checked against scipy on the host (same dense inputs: `lacuna
gen-dense` with the bench's seeds). PyTorch then times cuSPARSE's SpMV, SpMM and SDDMM
(`torch.sparse.sampled_addmm`) on the same data with CUDA events. For the first `--full-check`
matrices, `lacuna run --target cuda:ARCH --out` writes each schedule's whole output, compared
element by element with scipy's.

Writes `OUT/records.jsonl` (Lacuna's bench records), `OUT/cusparse.jsonl`, `OUT/checks.jsonl`
and `OUT/table.md` as it goes, so a run cut short leaves what it measured. Needs numpy, scipy
and torch with CUDA (`python3` on the device machines has them).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

SEED = 0


def gpu_schedules() -> dict[str, list[str]]:
    """Every GPU example (`examples/schedules/*_gpu*.ron`) by the kernel its file names."""
    out: dict[str, list[str]] = {}
    for f in sorted(Path("examples/schedules").glob("*_gpu*.ron")):
        m = re.search(r'kernel:\s*"(\w+)"', f.read_text())
        if m:
            out.setdefault(m.group(1), []).append(f.stem)
    return out


# Rounding bound, relative to the sum of |terms|: sums in any order, atomics included.
RTOL = 1e-10


def log(msg: str) -> None:
    print(msg, flush=True)


def append(path: Path, obj: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(obj) + "\n")


def gen_dense(lacuna: str, shape: tuple[int, ...], seed: int, tmp: Path) -> np.ndarray:
    out = tmp / f"d_{'x'.join(map(str, shape))}_{seed}.npy"
    if not out.exists():
        subprocess.run(
            [lacuna, "gen-dense", "--shape", ",".join(map(str, shape)), "--seed", str(seed),
             "--out", str(out)],
            check=True, capture_output=True,
        )
    return np.load(out)


def load_matrix(path: Path) -> sp.csr_matrix:
    a = scipy.io.mmread(str(path))
    a = sp.csr_matrix(a, dtype=np.float64)
    a.sum_duplicates()
    a.sort_indices()
    return a


def dense_inputs(lacuna: str, kernel: str, a: sp.csr_matrix, k: int | None, tmp: Path) -> dict:
    m, n = a.shape
    if kernel == "spmv":
        return {"x": gen_dense(lacuna, (n,), SEED + 1, tmp)}
    if kernel == "spmm":
        return {"B": gen_dense(lacuna, (n, k), SEED + 1, tmp)}
    return {"X": gen_dense(lacuna, (m, k), SEED + 1, tmp), "W": gen_dense(lacuna, (n, k), SEED + 2, tmp)}


def reference(kernel: str, a: sp.csr_matrix, d: dict):
    """The result and the sum of |terms| that bounds its rounding."""
    if kernel == "spmv":
        return a @ d["x"], abs(a) @ np.abs(d["x"])
    if kernel == "spmm":
        return a @ d["B"], abs(a) @ np.abs(d["B"])
    coo = a.tocoo()
    dots = np.einsum("ij,ij->i", d["X"][coo.row], d["W"][coo.col])
    mags = np.einsum("ij,ij->i", np.abs(d["X"][coo.row]), np.abs(d["W"][coo.col]))
    return (sp.csr_matrix((coo.data * dots, (coo.row, coo.col)), shape=a.shape),
            np.abs(coo.data) * mags)


def total(x) -> float:
    return float(x.sum()) if not sp.issparse(x) else float(x.data.sum())


def cusparse_time(kernel: str, a: sp.csr_matrix, d: dict, k: int | None, repeat: int):
    import torch

    dev = torch.device("cuda")
    crow = torch.tensor(a.indptr.astype(np.int32), device=dev)
    col = torch.tensor(a.indices.astype(np.int32), device=dev)
    val = torch.tensor(a.data, device=dev)
    A = torch.sparse_csr_tensor(crow, col, val, size=a.shape, dtype=torch.float64, device=dev)
    if kernel == "spmv":
        x = torch.tensor(d["x"], device=dev)
        op = lambda: A @ x  # noqa: E731
    elif kernel == "spmm":
        B = torch.tensor(d["B"], device=dev)
        op = lambda: A @ B  # noqa: E731
    else:
        X = torch.tensor(d["X"], device=dev)
        Wt = torch.tensor(d["W"], device=dev).t()
        op = lambda: torch.sparse.sampled_addmm(A, X, Wt, beta=0.0)  # noqa: E731
    for _ in range(3):
        out = op()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        out = op()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    if kernel == "sddmm":
        # cuSPARSE's SDDMM samples X Wᵀ at S's pattern; Lacuna's also scales by S's values.
        checksum = float((out.values() * val).sum())
    else:
        checksum = float(out.sum())
    return min(times), float(np.median(times)), checksum


def full_check(lacuna: str, target: str, mtx: Path, kernel: str, sched: str, a, d, want, mag, tmp: Path):
    """`lacuna run --target cuda --out`, compared element by element with scipy."""
    files = {}
    for name, arr in d.items():
        files[name] = tmp / f"in_{name}.npy"
        np.save(files[name], arr)
    sparse_name = "S" if kernel == "sddmm" else "A"
    out_name = {"spmv": "y", "spmm": "C", "sddmm": "C"}[kernel]
    out = tmp / (f"out.{'mtx' if kernel == 'sddmm' else 'npy'}")
    cmd = [lacuna, "run", f"examples/{kernel}.ron", "--schedule", f"examples/schedules/{sched}.ron",
           "--target", target, "--input", f"{sparse_name}={mtx}", "--out", f"{out_name}={out}"]
    for name, f in files.items():
        cmd += ["--input", f"{name}={f}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return {"ok": False, "error": r.stderr.strip()[-2000:]}
    if kernel == "sddmm":
        got = sp.csr_matrix(scipy.io.mmread(str(out)), shape=a.shape)
        diff = abs(got - want)
        err = float(diff.max()) if diff.nnz else 0.0
        bound = float(mag.max()) * RTOL if len(mag) else 0.0
        ok = got.nnz <= a.nnz and err <= max(bound, 1e-300)
    else:
        got = np.load(out)
        err = float(np.max(np.abs(got - want))) if got.size else 0.0
        bound = float(np.max(mag)) * RTOL if mag.size else 0.0
        ok = got.shape == want.shape and err <= max(bound, 1e-300)
    return {"ok": bool(ok), "max_abs_err": err, "bound": bound}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("matrices", nargs="+", type=Path)
    ap.add_argument("--bin", default="build/release/lacuna")
    ap.add_argument("--target", default="cuda:sm_90",
                    help="cuda:sm_90, cuda:sm_80, or interp-gpu (GPU semantics on the CPU, to try the script without a GPU)")
    ap.add_argument("--no-cusparse", action="store_true", help="skip PyTorch (no GPU)")
    ap.add_argument("--ks", default="32,128")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--kernels", default="spmv,spmm,sddmm")
    ap.add_argument("--full-check", type=int, default=2, help="matrices checked element by element")
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds after which no new matrix starts")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    recs_f, cu_f, chk_f = (args.out / n for n in ("records.jsonl", "cusparse.jsonl", "checks.jsonl"))
    for f in (recs_f, cu_f, chk_f):
        f.write_text("")
    ks = [int(k) for k in args.ks.split(",")]
    kernels = args.kernels.split(",")
    schedules = gpu_schedules()
    start = time.time()
    rows = []
    failures = 0
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        for mi, mtx in enumerate(args.matrices):
            if time.time() - start > args.deadline:
                log(f"deadline: skipping {mtx} and later matrices")
                break
            a = load_matrix(mtx)
            log(f"== {mtx.stem}: {a.shape[0]}x{a.shape[1]}, {a.nnz} entries")
            for kernel in kernels:
                for k in ([None] if kernel == "spmv" else ks):
                    d = dense_inputs(args.bin, kernel, a, k, tmp)
                    want, mag = reference(kernel, a, d)
                    ref_sum, bound = total(want), total(mag) * RTOL
                    if args.no_cusparse:
                        cu = (float("nan"), float("nan"), float("nan"))
                    else:
                        try:
                            cu = cusparse_time(kernel, a, d, k, args.repeat)
                        except Exception as e:  # a cuSPARSE path PyTorch lacks: no reference time
                            log(f"cuSPARSE {kernel} k={k}: {type(e).__name__}: {e}")
                            cu = (float("nan"), float("nan"), float("nan"))
                        cu_rec = {"kernel": kernel, "matrix": mtx.stem, "k": k, "run_s_min": cu[0],
                                  "run_s_median": cu[1], "checksum": cu[2],
                                  "checksum_ok": abs(cu[2] - ref_sum) <= bound + 1e-300}
                        append(cu_f, cu_rec)
                    for sched in schedules.get(kernel, []):
                        cmd = [args.bin, "bench", str(mtx), "--kernels", kernel, "--target",
                               args.target, "--schedule", f"examples/schedules/{sched}.ron",
                               "--repeat", str(args.repeat), "--seed", str(SEED)]
                        if k is not None:
                            cmd += ["--k", str(k)]
                        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
                        row = {"kernel": kernel, "matrix": mtx.stem, "k": k, "schedule": sched,
                               "cusparse_s": cu[0]}
                        if r.returncode != 0 or not r.stdout.strip():
                            failures += 1
                            row.update(ok=False, error=r.stderr.strip()[-2000:])
                            log(f"FAIL {kernel} k={k} {sched}: {row['error']}")
                            append(chk_f, row)
                            rows.append(row)
                            continue
                        rec = json.loads(r.stdout.strip().splitlines()[-1])
                        append(recs_f, rec)
                        err = abs(rec["checksum"] - ref_sum)
                        ok = err <= bound + 1e-300
                        row.update(ok=ok, lacuna_s=rec["run_s_min"], lacuna_median_s=rec["run_s_median"],
                                   checksum=rec["checksum"], reference=ref_sum, err=err, bound=bound,
                                   gflops=rec["gflops"])
                        if mi < args.full_check and k in (None, ks[0]):
                            fc = full_check(args.bin, args.target, mtx, kernel, sched, a, d, want,
                                            mag, tmp)
                            row["full"] = fc
                            ok = ok and fc["ok"]
                            row["ok"] = ok
                        if not ok:
                            failures += 1
                        log(f"{'ok  ' if ok else 'FAIL'} {kernel} k={k} {sched}: lacuna "
                            f"{rec['run_s_min'] * 1e6:.1f} us, cuSPARSE {cu[0] * 1e6:.1f} us, "
                            f"ratio {rec['run_s_min'] / cu[0]:.2f}; checksum err {err:.2e} (bound {bound:.2e})"
                            + (f"; full {row['full']}" if "full" in row else ""))
                        append(chk_f, row)
                        rows.append(row)
    write_table(args.out / "table.md", rows)
    print((args.out / "table.md").read_text())
    timed = [r for r in rows if r.get("ok")]
    log(f"gpu-compare: {len(timed)} passed, {failures} failed")
    return 1 if failures else 0


def write_table(path: Path, rows: list[dict]) -> None:
    """Lacuna's fastest schedule per case against cuSPARSE, then each schedule's geomean."""
    lines = ["| kernel | k | matrix | best Lacuna schedule | Lacuna µs | cuSPARSE µs | Lacuna/cuSPARSE |",
             "|---|---:|---|---|---:|---:|---:|"]
    cases: dict = {}
    for r in rows:
        if r.get("ok"):
            cases.setdefault((r["kernel"], r["k"] or 0, r["matrix"]), []).append(r)
    by_sched: dict = {}
    for (kernel, k, matrix), rs in sorted(cases.items()):
        best = min(rs, key=lambda r: r["lacuna_s"])
        lines.append(f"| {kernel} | {k or '-'} | {matrix} | {best['schedule']} | {best['lacuna_s'] * 1e6:.1f} "
                     f"| {best['cusparse_s'] * 1e6:.1f} | {best['lacuna_s'] / best['cusparse_s']:.2f} |")
        for r in rs:
            by_sched.setdefault((kernel, k, r["schedule"]), []).append(r["lacuna_s"] / r["cusparse_s"])
        by_sched.setdefault((kernel, k, "(best)"), []).append(best["lacuna_s"] / best["cusparse_s"])
    lines += ["", "| kernel | k | schedule | matrices | geomean Lacuna/cuSPARSE |", "|---|---:|---|---:|---:|"]
    for (kernel, k, s), v in sorted(by_sched.items()):
        g = math.exp(sum(math.log(x) for x in v) / len(v))
        lines.append(f"| {kernel} | {k or '-'} | {s} | {len(v)} | {g:.2f} |")
    failed = [r for r in rows if not r.get("ok")]
    if failed:
        lines += ["", "Failed:"] + [f"- {r['kernel']} k={r['k']} {r['matrix']} {r['schedule']}: "
                                    f"{r.get('error') or r.get('full') or r.get('err')}" for r in failed]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
