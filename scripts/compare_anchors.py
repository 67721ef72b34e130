#!/usr/bin/env python3
"""Joins `lacuna bench` records with the reference timings of one scripts/compare-anchors run
and prints a markdown table of Lacuna time / best reference time per kernel × K × matrix ×
threads, with geometric means (below 1: Lacuna is faster).

Inputs:
  --lacuna FILE.jsonl     `lacuna bench` JSON Lines (run_s_min; the fastest format/schedule
                          of each configuration counts)
  --anchors-json FILE     results/<tag>.json of ../shared/bench/anchors/anchors.py ("rows":
                          kernel, matrix, K (null for spmv), lib, threads, t_min_s, nnz);
                          repeatable (one per round of compare-anchors ROUNDS=): the fastest
                          time of each library over the files counts, as the fastest record
                          of each configuration in --lacuna does
  --anchors-text FILE     anchors.py's standard output, read when no JSON file exists;
                          repeatable likewise
  --machine FILE          anchors.py's results/machine.json (STREAM triad per thread count):
                          adds SpMV's effective bandwidth as a share of STREAM triad
  --mlir FILE             lines of ../shared/bench/mlir/run_mlir.sh ("mlir kernel=.. matrix=..
                          K=.. min_s=.."); MLIR's sparsifier runs on one thread
  --tuned FILE.jsonl      `lacuna bench` records of tuned schedules (compare-anchors TUNE=):
                          a second table of tuned ratios beside the built-in schedule's

The best reference at T threads is the fastest library measured at exactly T threads (scipy,
numpy and MLIR run on one thread only).
"""
import argparse
import json
import math
import os
import sys
from collections import defaultdict

KERNEL_ORDER = {"spmv": 0, "spmm": 1, "sddmm": 2, "spadd": 3}
# Kernels without a feature width.
NO_K = {"spmv", "spadd"}
# anchors.py calls sparse add `add`; Lacuna and run_mlir.sh call it `spadd`.
ALIASES = {"add": "spadd"}


def key(kernel, matrix, k, threads):
    # spmv and spadd have no feature width: None everywhere (anchors: null, lacuna: null,
    # mlir: "-")
    kernel = ALIASES.get(kernel, kernel)
    return (kernel, matrix, None if kernel in NO_K else int(k), int(threads))


def read_lacuna(path, keep=lambda record: True):
    """The fastest record per kernel × matrix × K × threads among those `keep` accepts, and
    the nnz of each matrix."""
    best = {}
    nnz = {}
    compiles = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                kk = key(r["kernel"], r["matrix"], r["k"], r["threads"])
                t = float(r["run_s_min"])
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"{path}:{i}: not a lacuna bench record: {e}")
            if not keep(r):
                continue
            if r.get("compile_s") is not None:
                compiles.append(float(r["compile_s"]))
            cfg = f"{r.get('format', 'csr')}/{r.get('schedule', 'none')}"
            if kk not in best or t < best[kk][0]:
                best[kk] = (t, cfg, int(r.get("threads_used", r["threads"])), r.get("gbps"))
            nnz[r["matrix"]] = r["nnz"]
    return best, nnz, compiles


def read_anchors_json(path):
    with open(path) as f:
        rows = json.load(f)["rows"]
    out = []
    for r in rows:
        if ALIASES.get(r["kernel"], r["kernel"]) not in KERNEL_ORDER:
            continue
        out.append((key(r["kernel"], r["matrix"], r["K"], r["threads"]), r["lib"], float(r["t_min_s"]),
                    r.get("nnz")))
    return out


def read_anchors_text(path):
    """anchors.py's table: kernel matrix [K] lib T min_ms med_ms GFLOP/s GB/s %BW foreign checksum
    (K is blank for spmv, so the columns shift by one there)."""
    out = []
    with open(path) as f:
        for line in f:
            t = line.split()
            if not t or ALIASES.get(t[0], t[0]) not in KERNEL_ORDER:
                continue
            kernel, matrix = ALIASES.get(t[0], t[0]), t[1]
            rest = t[2:]
            k = None
            if kernel not in NO_K:
                k, rest = int(rest[0]), rest[1:]
            lib, threads, min_ms = rest[0], int(rest[1]), float(rest[2])
            out.append((key(kernel, matrix, k, threads), lib, min_ms / 1e3, None))
    return out


def read_mlir(path):
    out = []
    with open(path) as f:
        for line in f:
            if not line.startswith("mlir "):
                continue
            kv = dict(tok.split("=", 1) for tok in line.split()[1:] if "=" in tok)
            matrix = os.path.splitext(kv["matrix"])[0]
            k = None if kv["kernel"] in NO_K else int(kv["K"])
            out.append((key(kv["kernel"], matrix, k, 1), "mlir", float(kv["min_s"]), int(kv["nnz"])))
    return out


def group_order(g):
    """Table order of a (kernel, K, threads) group."""
    return (KERNEL_ORDER.get(g[0], 9), g[1] or 0, g[2])


def geomean(xs):
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def fmt_ms(s):
    return f"{s * 1e3:.4g}" if s is not None else "-"


# Issue 6's goals, as the largest geometric mean of Lacuna's time over the reference's that meets
# each: 1.2x faster is a ratio of 1/1.2 = 0.83 or less.
GOALS = [
    # (kernel, K values (None: any), which ratios, bound, text)
    ("spmv", None, "best", 1 / 1.2, "SpMV >= 1.2x the fastest library"),
    ("spmm", (32, 128), "best", 1 / 1.2, "SpMM (k = 32, 128) >= 1.2x the fastest library, built-in schedule"),
    ("spmm", (32, 128), "tuned", 1 / 1.5, "SpMM (k = 32, 128) >= 1.5x the fastest library, tuned"),
    ("sddmm", (32, 128), "c-naive", 1 / 1.2, "SDDMM (k = 32, 128) >= 1.2x the plain C loop"),
    ("sddmm", (32, 128), "graphblas", 1 / 3, "SDDMM (k = 32, 128) >= 3x GraphBLAS"),
    ("spadd", None, "best", 1 / 2, "SpAdd >= 2x the fastest library"),
    (None, None, "mlir", 1 / 3, "every kernel >= 3x MLIR's sparsifier"),
]
# JIT compile of one kernel: median seconds.
COMPILE_GOAL_S = 0.1


def print_goals(groups, mlir_groups, graphblas_groups, c_loop_groups, tgroups, compiles):
    """One line per goal and group (kernel, K, threads) measured: the geometric mean and
    whether it meets the goal; then the median JIT compile time."""
    by = {"best": groups, "mlir": mlir_groups, "graphblas": graphblas_groups, "c-naive": c_loop_groups,
          "tuned": tgroups}
    rows = []
    for kernel, ks, against, bound, text in GOALS:
        src = by[against]
        for g in sorted(src, key=group_order):
            if kernel is not None and g[0] != kernel:
                continue
            if ks is not None and g[1] not in ks:
                continue
            gm = geomean(src[g])
            rows.append((text, g, len(src[g]), gm, bound))
    if not rows and not compiles:
        return
    print()
    print("Goals (issue 6; a geometric mean of Lacuna's time over the reference's, at most the bound):")
    print()
    print("| goal | kernel | K | T | matrices | geomean | bound | met |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for text, (kernel, k, threads), n, gm, bound in rows:
        met = "yes" if gm <= bound else "**no**"
        print(f"| {text} | {kernel} | {k or '-'} | {threads} | {n} | {gm:.2f} | {bound:.2f} | {met} |")
    if compiles:
        med = sorted(compiles)[len(compiles) // 2]
        met = "yes" if med <= COMPILE_GOAL_S else "**no**"
        print(f"| JIT compile of one kernel, median over {len(compiles)} compiles (s) | | | | | "
              f"{med:.4f} | {COMPILE_GOAL_S} | {met} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lacuna", required=True)
    ap.add_argument("--anchors-json", action="append", default=[])
    ap.add_argument("--anchors-text", action="append", default=[])
    ap.add_argument("--mlir")
    ap.add_argument("--machine")
    ap.add_argument("--tuned")
    a = ap.parse_args()
    triad = {}
    if a.machine and os.path.exists(a.machine):
        with open(a.machine) as f:
            for t, v in json.load(f).get("stream", {}).items():
                if isinstance(v, dict) and v.get("triad"):
                    triad[int(t)] = float(v["triad"])

    lacuna, lacuna_nnz, compiles = read_lacuna(a.lacuna)
    refs = []
    json_files = [p for p in a.anchors_json if os.path.exists(p)]
    for path in json_files:
        refs += read_anchors_json(path)
    if not json_files:
        for path in a.anchors_text:
            if os.path.exists(path):
                refs += read_anchors_text(path)
    if a.mlir and os.path.exists(a.mlir):
        refs += read_mlir(a.mlir)
    by_key = defaultdict(list)
    for kk, lib, t, nnz in refs:
        by_key[kk].append((t, lib))
        if nnz is not None and kk[1] in lacuna_nnz and nnz != lacuna_nnz[kk[1]]:
            print(f"<!-- warning: {kk[1]}: nnz {lacuna_nnz[kk[1]]} in Lacuna, {nnz} for {lib} -->")

    print("| kernel | K | matrix | nnz | T | Lacuna ms | best reference | ref ms | Lacuna/best | MLIR ms | Lacuna/MLIR |")
    print("|---|---:|---|---:|---:|---:|---|---:|---:|---:|---:|")
    groups = defaultdict(list)
    mlir_groups = defaultdict(list)
    graphblas_groups = defaultdict(list)
    c_loop_groups = defaultdict(list)
    tgroups = defaultdict(list)
    serial_note = False
    missing = 0
    for kk in sorted(lacuna, key=lambda k: (KERNEL_ORDER.get(k[0], 9), k[2] or 0, k[1], k[3])):
        kernel, matrix, k, threads = kk
        t, _cfg, used, _gbps = lacuna[kk]
        if used < threads:
            serial_note = True
        cands = by_key.get(kk, [])
        if not cands:
            missing += 1
            continue
        best_t, best_lib = min(cands)
        ratio = t / best_t
        groups[(kernel, k, threads)].append(ratio)
        # MLIR runs once per round: its fastest round counts.
        mlir = [c for c in cands if c[1] == "mlir"]
        mt = min(mlir)[0] if mlir else None
        mratio = f"{t / mt:.2f}" if mt else "-"
        if mt:
            mlir_groups[(kernel, k, threads)].append(t / mt)
        for lib, lib_groups in (("graphblas", graphblas_groups), ("c-naive", c_loop_groups)):
            times = [c[0] for c in cands if c[1] == lib]
            if times:
                lib_groups[(kernel, k, threads)].append(t / min(times))
        lt = f"{t * 1e3:.4g}" + ("*" if used < threads else "")
        print(f"| {kernel} | {k or '-'} | {matrix} | {lacuna_nnz[matrix]} | {threads} | {lt} | {best_lib} | "
              f"{fmt_ms(best_t)} | {ratio:.2f} | {fmt_ms(mt)} | {mratio} |")

    print()
    print("| kernel | K | T | matrices | geomean Lacuna/best | geomean Lacuna/MLIR | geomean Lacuna/GraphBLAS |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for g in sorted(groups, key=group_order):
        kernel, k, threads = g
        m = f"{geomean(mlir_groups[g]):.2f}" if mlir_groups.get(g) else "-"
        gb = f"{geomean(graphblas_groups[g]):.2f}" if graphblas_groups.get(g) else "-"
        print(f"| {kernel} | {k or '-'} | {threads} | {len(groups[g])} | {geomean(groups[g]):.2f} | {m} | {gb} |")
    for threads in sorted({g[2] for g in groups}):
        allr = [r for g, rs in groups.items() if g[2] == threads for r in rs]
        print(f"| all | | {threads} | {len(allr)} | **{geomean(allr):.2f}** | | |")
    if triad and any(k[0] == "spmv" for k in lacuna):
        print()
        print("SpMV's effective bandwidth (minimal traffic: indptr, indices, values, x and y once) "
              "as a share of STREAM triad at the same thread count:")
        print()
        print("| matrix | T | Lacuna GB/s | STREAM triad GB/s | share |")
        print("|---|---:|---:|---:|---:|")
        for kk in sorted(k for k in lacuna if k[0] == "spmv"):
            _t, _cfg, _used, gbps = lacuna[kk]
            bw = triad.get(kk[3])
            if gbps and bw:
                print(f"| {kk[1]} | {kk[3]} | {gbps:.1f} | {bw:.1f} | {gbps / bw * 100:.0f}% |")
    if a.tuned and os.path.exists(a.tuned):
        # Each case's tuned schedule was timed by one `lacuna bench` beside the built-in one;
        # that built-in time (else the main run's) is the one compared with.
        tuned, _, _ = read_lacuna(a.tuned, lambda r: r.get("schedule") != "builtin")
        beside, _, _ = read_lacuna(a.tuned, lambda r: r.get("schedule") == "builtin")
        builtin = {**lacuna, **beside}
        chose_builtin, _, _ = read_lacuna(a.tuned, lambda r: r.get("tuned_is_builtin", False))
        print()
        print("Tuned schedules (`lacuna tune`, then the best schedule timed by `lacuna bench` "
              "beside the built-in schedule, in one run; \"(built-in)\": the tuner's final round "
              "chose the built-in schedule, whose one time stands for both):")
        print()
        print("| kernel | K | matrix | T | built-in ms | tuned ms | best reference | ref ms "
              "| built-in/best | tuned/best |")
        print("|---|---:|---|---:|---:|---:|---|---:|---:|---:|")
        for kk in sorted(tuned, key=lambda k: (KERNEL_ORDER.get(k[0], 9), k[2] or 0, k[1], k[3])):
            kernel, matrix, k, threads = kk
            cands = by_key.get(kk, [])
            if not cands:
                continue
            best_t, best_lib = min(cands)
            tt = tuned[kk][0]
            bt = builtin[kk][0] if kk in builtin else None
            b_ratio = f"{bt / best_t:.2f}" if bt else "-"
            tgroups[(kernel, k, threads)].append(tt / best_t)
            mark = " (built-in)" if kk in chose_builtin else ""
            print(f"| {kernel} | {k or '-'} | {matrix} | {threads} | {fmt_ms(bt)} | {fmt_ms(tt)}{mark} | "
                  f"{best_lib} | {fmt_ms(best_t)} | {b_ratio} | {tt / best_t:.2f} |")
        print()
        print("| kernel | K | T | matrices | geomean tuned/best | geomean built-in/best (same matrices) |")
        print("|---|---:|---:|---:|---:|---:|")
        for g in sorted(tgroups, key=group_order):
            kernel, k, threads = g
            same = [builtin[kk][0] / min(by_key[kk])[0] for kk in tuned
                    if (kk[0], kk[2], kk[3]) == g and kk in builtin and by_key.get(kk)]
            print(f"| {kernel} | {k or '-'} | {threads} | {len(tgroups[g])} | {geomean(tgroups[g]):.2f} "
                  f"| {geomean(same):.2f} |")
    print_goals(groups, mlir_groups, graphblas_groups, c_loop_groups, tgroups, compiles)
    print()
    print("Ratios are Lacuna's fastest run over the fastest reference's at the same thread count; "
          "below 1 means Lacuna is faster.")
    if serial_note:
        print("\\* Lacuna ran on 1 thread (no parallel runtime yet) where T > 1.")
    if missing:
        print(f"{missing} Lacuna configurations had no reference timing.")
    if not groups:
        sys.exit("compare_anchors: no Lacuna configuration had a reference timing")


if __name__ == "__main__":
    main()
