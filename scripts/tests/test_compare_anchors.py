"""scripts/compare_anchors.py on small hand-made inputs: the ratios, the geometric means against
GraphBLAS and the C loop, and the goal verdicts of issue 6."""
import json
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "compare_anchors.py")


def record(kernel, matrix, k, threads, seconds, compile_s=0.02):
    return {"kernel": kernel, "matrix": matrix, "k": k, "threads": threads, "nnz": 100,
            "run_s_min": seconds, "compile_s": compile_s, "format": "csr", "schedule": "builtin",
            "threads_used": threads}


def anchor(kernel, matrix, k, lib, threads, seconds):
    return {"kernel": kernel, "matrix": matrix, "K": k, "lib": lib, "threads": threads,
            "t_min_s": seconds, "nnz": 100}


def run(tmp_path, lacuna, anchors, mlir=""):
    lp = tmp_path / "lacuna.jsonl"
    lp.write_text("".join(json.dumps(r) + "\n" for r in lacuna))
    ap = tmp_path / "anchors.json"
    ap.write_text(json.dumps({"rows": anchors}))
    args = [sys.executable, SCRIPT, "--lacuna", str(lp), "--anchors-json", str(ap)]
    if mlir:
        mp = tmp_path / "mlir.txt"
        mp.write_text(mlir)
        args += ["--mlir", str(mp)]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return out


def goal_rows(out):
    """goal text -> list of (kernel, K, T, geomean, met) from the goals table."""
    rows = {}
    section = out.split("Goals (issue 6")[1]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 8 or cells[0] in ("goal", "---"):
            continue
        rows.setdefault(cells[0], []).append((cells[1], cells[2], cells[3], cells[5], cells[7]))
    return rows


def test_ratios_and_goals(tmp_path):
    lacuna = [
        # SDDMM: 2x the C loop, 2.5x GraphBLAS (misses the 3x goal).
        record("sddmm", "m1", 32, 1, 1.0),
        record("sddmm", "m2", 32, 1, 2.0),
        # SpMV: 0.5 of the best library on m1, 1.0 on m2: geomean 0.71, met.
        record("spmv", "m1", None, 1, 0.5, compile_s=0.3),
        record("spmv", "m2", None, 1, 1.0),
    ]
    anchors = [
        anchor("sddmm", "m1", 32, "c-naive", 1, 2.0),
        anchor("sddmm", "m1", 32, "graphblas", 1, 2.5),
        anchor("sddmm", "m2", 32, "c-naive", 1, 4.0),
        anchor("sddmm", "m2", 32, "graphblas", 1, 5.0),
        anchor("spmv", "m1", None, "mkl-ie", 1, 1.0),
        anchor("spmv", "m1", None, "scipy", 1, 3.0),
        anchor("spmv", "m2", None, "mkl-ie", 1, 1.0),
    ]
    # MLIR 2x slower than Lacuna on SpMV m1: misses the 3x goal.
    mlir = "mlir kernel=spmv matrix=m1.mtx K=- nnz=100 min_s=1.0\n"
    out = run(tmp_path, lacuna, anchors, mlir)
    assert "| spmv | - | m1 | 100 | 1 | 500 | mkl-ie | 1000 | 0.50 | 1000 | 0.50 |" in out
    rows = goal_rows(out)
    assert rows["SpMV >= 1.2x the fastest library"] == [("spmv", "-", "1", "0.71", "yes")]
    assert rows["SDDMM (k = 32, 128) >= 1.2x the plain C loop"] == [("sddmm", "32", "1", "0.50", "yes")]
    assert rows["SDDMM (k = 32, 128) >= 3x GraphBLAS"] == [("sddmm", "32", "1", "0.40", "**no**")]
    assert rows["every kernel >= 3x MLIR's sparsifier"] == [("spmv", "-", "1", "0.50", "**no**")]
    # Four compiles of 0.02, 0.02, 0.3, 0.02 s: the median meets 0.1 s.
    compile_row = [line for line in out.splitlines() if line.startswith("| JIT compile")]
    assert len(compile_row) == 1 and "0.0200" in compile_row[0] and compile_row[0].endswith("| yes |")


def test_slow_compiles_miss_the_goal(tmp_path):
    lacuna = [record("spmv", "m1", None, 1, 0.5, compile_s=0.2), record("spmv", "m2", None, 1, 0.5, compile_s=0.3)]
    anchors = [anchor("spmv", "m1", None, "mkl-ie", 1, 1.0), anchor("spmv", "m2", None, "mkl-ie", 1, 1.0)]
    out = run(tmp_path, lacuna, anchors)
    compile_row = [line for line in out.splitlines() if line.startswith("| JIT compile")]
    assert compile_row and compile_row[0].endswith("| **no** |")
