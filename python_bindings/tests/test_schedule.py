"""Every schedule primitive from Python; traces round-trip through RON and the command line."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import lacuna
from conftest import DATA, EXAMPLES, ROOT, assert_close, kernel, load_mtx, random_csr, sddmm_reference

LACUNA = ROOT / "build" / "release" / "lacuna"


def run_spmm(sch_or_kernel, a, b):
    return lacuna.build(sch_or_kernel)(A=a, B=b)["C"]


@pytest.fixture(scope="module")
def data():
    a = random_csr(64, 48, density=0.15, seed=11)
    b = np.random.default_rng(11).standard_normal((48, 32))
    return a, b


def test_stage2_primitives_split_reorder_vectorize_parallel_unroll(data):
    a, b = data
    s = lacuna.Schedule(kernel("spmm"))
    assert s.get_blocks() == ["spmm_init", "spmm"]
    assert s.get_loops("spmm") == ["i", "j", "spmm:k"]
    s.split("spmm:k", [None, 8])
    s.reorder(["k.0", "j"])
    s.unroll("k.1")
    s.parallel("spmm:i")
    assert s.primitives() == ["split", "reorder", "unroll", "parallel"]
    assert_close(run_spmm(s, a, b), a @ b)
    t = lacuna.Schedule(kernel("spmm"))
    t.split("spmm:k", [None, 4])
    t.vectorize("k.1")
    assert_close(run_spmm(t, a, b), a @ b)


def test_divide_and_fuse(data):
    a, b = data
    s = lacuna.Schedule(kernel("spmm"))
    s.divide("spmm:i", 4)
    s.fuse("i.0", "i.1")
    assert s.primitives() == ["divide", "fuse"]
    assert_close(run_spmm(s, a, b), a @ b)


def test_bind_runs_serially_on_cpu_and_with_gpu_semantics(data):
    a, b = data
    s = lacuna.Schedule.from_ron(kernel("spmm"), EXAMPLES / "schedules" / "spmm_gpu_naive.ron")
    assert "bind" in s.primitives()
    assert_close(lacuna.build(s)(A=a, B=b)["C"], a @ b)
    assert_close(lacuna.build(s, target="interp-gpu")(A=a, B=b)["C"], a @ b)
    t = lacuna.Schedule(kernel("spmv"))
    t.split("spmv:i", [None, 16])
    t.bind("i.0", "blockIdx.x")
    t.bind("i.1", "threadIdx.x")
    x = np.ones(a.shape[1])
    assert_close(lacuna.build(t)(A=a, x=x)["y"], a @ x)


def test_stage1_sparse_fuse_and_sparse_reorder():
    s_mat = random_csr(40, 30, density=0.2, seed=2)
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((40, 8)), rng.standard_normal((30, 8))
    want = sddmm_reference(s_mat, x, w)
    s = lacuna.Schedule(kernel("sddmm"))
    s.sparse_fuse("sddmm", ["I", "J"])
    s.parallel("j")
    assert_close(lacuna.build(s)(S=s_mat, X=x, W=w)["C"], want)
    r = lacuna.Schedule(kernel("sddmm"))
    r.sparse_reorder("sddmm", ["I", "K", "J"])
    assert_close(lacuna.build(r)(S=s_mat, X=x, W=w)["C"], want)


def test_nnz_split_spmv_through_sparse_decompose_init():
    # Rows cut by a chunk boundary are shared by two chunks: their sums are atomic adds.
    dense_row = sp.csr_matrix((np.ones(40), (np.full(40, 7), np.arange(40))), shape=(50, 40))
    a = (random_csr(50, 40, density=0.15, seed=3) + dense_row).tocsr()
    x = np.random.default_rng(3).standard_normal(40)
    s = lacuna.Schedule(kernel("spmv"))
    s.sparse_decompose_init("spmv")
    s.sparse_fuse("spmv", ["I", "J"])
    s.split("spmv:j", [None, 16])
    s.annotate("spmv:j.0", "atomic", 0)
    s.parallel("spmv:j.0")
    assert "sparse_decompose_init" in s.primitives()
    for threads in (1, 2, 3):
        assert_close(lacuna.build(s)(A=a, x=x, threads=threads)["y"], a @ x)
    with pytest.raises(lacuna.ScheduleError, match="sparse_decompose_init"):
        lacuna.Schedule(kernel("spmv")).sparse_decompose_init("nope")


def lanes_schedule(into):
    """SpMV with A decomposed by `into` (sell, dia): a group's 8 sums in a local cache, its
    rows as vector lanes, the groups in parallel (the built-in SpMV schedule of those)."""
    s = lacuna.Schedule(kernel("spmv"))
    s.decompose_format("A", into)
    s.reverse_cache_write("spmv_p0", "y", "local", at="spmv_p0:ig.p0")
    s.vectorize("spmv_p0:i.p0")
    s.annotate("spmv_p0:i.p0", "lanes", 8)
    s.parallel("spmv_p0:ig.p0")
    return s


def test_streamed_spmm_rows_keep_results():
    # Each row of C accumulated in registers (the init folded into the row's cache) and stored
    # with streaming stores where the row starts a vector (the built-in SpMM schedule for large
    # outputs); a loop with nothing to stream is refused.
    rng = np.random.default_rng(3)
    a = random_csr(70, 90, density=0.1, seed=3)
    b = rng.standard_normal((90, 128))
    s = lacuna.Schedule(kernel("spmm"))
    s.specialize("feat", 128)
    s.split("spmm:k", [None, 64])
    s.reorder(["k.0", "j"])
    s.vectorize("k.1")
    s.reverse_cache_write("spmm", "C", "local", at="spmm:i")
    s.unroll("k.0")
    s.annotate("spmm:i", "nontemporal", 1)
    s.parallel("spmm:i")
    f = lacuna.build(s)
    for threads in (1, 2, 3):
        assert_close(f(A=a, B=b, threads=threads)["C"], a @ b)
    with pytest.raises(lacuna.ScheduleError, match="nontemporal"):
        lacuna.Schedule(kernel("spmm")).annotate("spmm:i", "nontemporal", 1)


def test_rcm_spmm_rows_keep_results():
    # A's rows in reverse Cuthill-McKee order (`rcm`: every row once, empty rows too, with its
    # row id), each row of C summed in registers and stored once, the rows in parallel; `rcm`
    # inside another format is refused.
    rng = np.random.default_rng(7)
    a = random_csr(120, 90, density=0.06, seed=7)
    a = (a + sp.csr_matrix((np.ones(90), (np.full(90, 11), np.arange(90))), shape=(120, 90))).tocsr()
    b = rng.standard_normal((90, 32))
    s = lacuna.Schedule(kernel("spmm"))
    s.decompose_format("A", "rcm")
    s.specialize("feat", 32)
    s.split("spmm_p0:k", [None, 16])
    s.reorder(["k.0", "j.p0"])
    s.vectorize("k.1")
    s.reverse_cache_write("spmm_p0", "C", "local", at="spmm_p0:i.p0")
    s.unroll("k.0")
    s.parallel("spmm_p0:i.p0")
    f = lacuna.build(s)
    for threads in (1, 2, 3):
        assert_close(f(A=a, B=b, threads=threads)["C"], a @ b)
    with pytest.raises(lacuna.ScheduleError, match="whole decomposition"):
        lacuna.Schedule(kernel("spmm")).decompose_format("A", "(+ (bucket 1 3 (ell 2)) rcm)")


def test_sliced_ell_spmv_runs_rows_as_lanes():
    # Rows of 0 to 11 entries and one long row, as SELL-8-32: groups of 8 rows as vector lanes.
    rng = np.random.default_rng(5)
    a = random_csr(300, 200, density=0.03, seed=5)
    a = (a + sp.csr_matrix((np.ones(150), (np.full(150, 17), np.arange(150))), shape=(300, 200))).tocsr()
    x = rng.standard_normal(200)
    f = lacuna.build(lanes_schedule("(sell 8 32)"))
    for threads in (1, 2, 3):
        assert_close(f(A=a, x=x, threads=threads)["y"], a @ x)
    with pytest.raises(lacuna.ScheduleError, match="lanes"):
        lacuna.Schedule(kernel("spmv")).decompose_format("A", "(sell 0 32)")


def test_dia_spmv_reads_x_by_diagonal():
    # A 5-point stencil on a 23 x 19 grid (437 rows, not a multiple of the 8 lanes) with one
    # entry removed, stored by diagonal: blocks of 8 rows as vector lanes.
    n = 23 * 19
    a = sp.diags([-1.0, -1.0, 4.0, -1.0, -1.0], [-23, -1, 0, 1, 23], shape=(n, n), format="csr")
    a[5, 6] = 0.0
    a.eliminate_zeros()
    x = np.random.default_rng(7).standard_normal(n)
    f = lacuna.build(lanes_schedule("(dia 8 8)"))
    for threads in (1, 2, 3):
        assert_close(f(A=a, x=x, threads=threads)["y"], a @ x)
    # A matrix on more diagonals than the part stores: a conversion error naming the count.
    wide = random_csr(n, n, density=0.02, seed=3)
    with pytest.raises(lacuna.FormatError, match="diagonals"):
        f(A=wide, x=x)
    with pytest.raises(lacuna.ScheduleError, match="diagonals"):
        lacuna.Schedule(kernel("spmv")).decompose_format("A", "(dia 0 8)")


def test_pos_specialize_decompose_format(data):
    a, b = data
    s = lacuna.Schedule(kernel("spmm_dense_iter"))
    s.pos("spmm_dense_iter", "Jd", "A")
    assert_close(lacuna.build(s)(A=a, B=b)["C"], a @ b)
    sp_ = lacuna.Schedule(kernel("spmm"))
    sp_.specialize("feat", 32)
    f = lacuna.build(sp_)
    assert_close(f(A=a, B=b)["C"], a @ b)
    with pytest.raises(lacuna.ShapeError):
        f(A=a, B=b[:, :16].copy())
    d = lacuna.Schedule(kernel("spmm"))
    d.decompose_format("A", "(+ (ell 4) (split_rows 4))")
    f = lacuna.build(d)
    assert_close(f(A=a, B=b)["C"], a @ b)
    with pytest.raises(lacuna.BindError, match="copy=False"):
        f(A=a, B=b, copy=False)  # the conversion copies


@pytest.mark.parametrize(
    "primitive, args, condition",
    [
        ("split", ("nope", [None, 4]), "nope"),
        ("reorder", (["j", "spmm:i"],), "reorder"),
        ("parallel", ("j",), "parallel"),
        ("vectorize", ("spmm:i",), "vectorize"),
        ("sparse_reorder", ("spmm", ["J", "I", "K"]), "sparse_reorder"),
        ("sparse_fuse", ("spmm", ["I", "K"]), "sparse_fuse"),
        ("decompose_format", ("A", "(nonsense"), "decompose_format"),
        ("pos", ("spmm", "K", "B"), "pos"),
        ("specialize", ("nosuch", 3), "specialize"),
        ("fuse", ("spmm:i", "spmm:k"), "fuse"),
        ("divide", ("nope", 2), "divide"),
        ("unroll", ("nope",), "unroll"),
        ("bind", ("spmm:i", "warp.q"), "bind"),
    ],
)
def test_misapplied_primitive_raises_and_leaves_schedule_unchanged(primitive, args, condition):
    s = lacuna.Schedule(kernel("spmm"))
    s.split("spmm:k", [None, 2]) if primitive not in ("sparse_reorder", "sparse_fuse", "decompose_format", "pos", "specialize") else None
    before_trace, before_ir = s.trace, s.lower(2)
    with pytest.raises(lacuna.ScheduleError, match=condition):
        getattr(s, primitive)(*args)
    assert s.trace == before_trace
    assert s.lower(2) == before_ir


def test_stage1_after_stage2_is_rejected():
    s = lacuna.Schedule(kernel("spmm"))
    s.parallel("spmm:i")
    with pytest.raises(lacuna.ScheduleError):
        s.specialize("feat", 4)
    assert s.primitives() == ["parallel"]


def test_every_primitive_has_a_docstring():
    names = ["sparse_reorder", "sparse_fuse", "decompose_format", "pos", "specialize", "split",
             "divide", "fuse", "reorder", "parallel", "vectorize", "bind", "unroll", "get_loops",
             "get_blocks"]
    for n in names:
        doc = getattr(lacuna.Schedule, n).__doc__
        assert doc and len(doc.split()) >= 5, n


def test_trace_round_trip_python_ron_python(data):
    a, b = data
    s = lacuna.Schedule(kernel("spmm"))
    s.split("spmm:k", [None, 4])
    s.vectorize("k.1")
    s.parallel("spmm:i")
    text = s.trace
    assert 'Split(loop: "spmm:k", factors: [None, 4])' in text or "Split" in text
    r = lacuna.Schedule.from_ron(kernel("spmm"), text)
    assert r.trace == text
    assert r.lower(2) == s.lower(2)
    assert_close(run_spmm(r, a, b), run_spmm(s, a, b), rtol=0)
    # The bundled file replays to the same trace as the same primitives typed in Python.
    f = lacuna.Schedule.from_ron(kernel("spmm"), EXAMPLES / "schedules" / "spmm_split_k.ron")
    assert f.trace == text


def test_schedule_for_another_kernel_is_rejected():
    with pytest.raises(lacuna.ScheduleError, match="spmv"):
        lacuna.Schedule.from_ron(kernel("spmv"), EXAMPLES / "schedules" / "spmm_split_k.ron")
    with pytest.raises(lacuna.ScheduleError):
        lacuna.Schedule.from_ron(kernel("spmm"), "(version: 1, kernel: \"spmm\", trace: [Bogus()])")


@pytest.mark.parametrize("matrix", ["west0479.mtx", "1138_bus.mtx"])
def test_trace_round_trip_python_ron_cli(tmp_path, matrix):
    assert LACUNA.exists(), f"{LACUNA} is missing: run `cargo build --release` first (scripts/test does)"
    a = load_mtx(matrix)
    b = np.random.default_rng(5).standard_normal((a.shape[1], 8))
    s = lacuna.Schedule(kernel("spmm"))
    s.split("spmm:k", [None, 4])
    s.reorder(["k.0", "j"])
    s.unroll("k.1")
    s.parallel("spmm:i")
    sched = tmp_path / "sched.ron"
    s.save(sched)
    np.save(tmp_path / "B.npy", b)
    out = tmp_path / "C.npy"
    proc = subprocess.run(
        [str(LACUNA), "run", str(EXAMPLES / "spmm.ron"), "--schedule", str(sched),
         "--input", f"A={DATA / matrix}", "--input", f"B={tmp_path / 'B.npy'}", "--out", f"C={out}"],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["kernel"] == "spmm"
    cli = np.load(out)
    py = lacuna.build(lacuna.Schedule.from_ron(kernel("spmm"), sched))(A=a, B=b)["C"]
    np.testing.assert_array_equal(py, cli)  # same schedule, same code: identical results
    assert_close(py, a @ b)


def test_lower_prints_every_stage_like_the_cli():
    s = lacuna.Schedule(kernel("spmm"))
    s.split("spmm:k", [None, 4])
    s.parallel("spmm:i")
    assert "sp_iter spmm" in s.lower(1)
    assert "k.1" in s.lower(2) and "parallel" in s.lower(2)
    assert "J.indptr" in s.lower("flat")
    assert "define" in s.lower("llvm") and "lacuna_rt_parallel_for" in s.lower("llvm")
    assert lacuna.lower(kernel("spmv"), 1) == kernel("spmv").text()
    with pytest.raises(ValueError):
        s.lower("ptx9")
    if LACUNA.exists():
        sched_file = EXAMPLES / "schedules" / "spmm_split_k.ron"
        cli = subprocess.run([str(LACUNA), "lower", str(EXAMPLES / "spmm.ron"), "--schedule", str(sched_file),
                              "--stage", "2"], capture_output=True, text=True, check=True).stdout
        assert cli == lacuna.Schedule.from_ron(kernel("spmm"), sched_file).lower(2)


def test_cache_primitives_and_set_scope(data):
    a, b = data
    # reverse_cache_read: B's chunk gathered through J.indices into registers.
    s = lacuna.Schedule(kernel("spmm"))
    s.split("spmm:k", [None, 4])
    s.reverse_cache_read("spmm", "B", "local", "k.0")
    assert "alloc local B_local: f64[4]" in s.lower(2)
    assert_close(run_spmm(s, a, b), a @ b)
    # cache_write: SpMV's accumulator in a register.
    t = lacuna.Schedule(kernel("spmv"))
    t.cache_write("spmv", "y", "local", "spmv:i")
    x = np.random.default_rng(3).standard_normal(a.shape[1])
    assert_close(lacuna.build(t)(A=a, x=x)["y"], a @ x)
    # cache_read and set_scope.
    u = lacuna.Schedule(kernel("sddmm"))
    u.split("sddmm:k", [None, 4])
    u.cache_read("sddmm", "X", "local", "k.0")
    u.set_scope("X_local", "global")
    assert "alloc global X_local" in u.lower(2)
    assert u.primitives() == ["split", "cache_read", "set_scope"]
    # Errors leave the schedule unchanged.
    before = u.lower(2)
    with pytest.raises(lacuna.ScheduleError, match="cache_write"):
        u.cache_write("sddmm", "X", "local", "k.0")
    with pytest.raises(lacuna.ScheduleError, match="set_scope"):
        u.set_scope("X_local", "shared")
    assert u.lower(2) == before


def test_iso_values_keep_results_and_refuse_unequal_values():
    # A pattern matrix (every value 1) stored once, as stored and as sliced ELL; unequal
    # values are a FormatError naming the entry, a padding layout a ScheduleError.
    a = random_csr(60, 50, density=0.1, seed=11)
    a.data[:] = 1.0
    x = np.random.default_rng(11).standard_normal(50)
    plain = lacuna.Schedule(kernel("spmv"))
    plain.iso_values("A")
    plain.parallel("spmv:i")
    sliced = lacuna.Schedule(kernel("spmv"))
    sliced.decompose_format("A", "(sell 8 16)")
    sliced.iso_values("A")
    sliced.parallel("spmv_p0:ig.p0")
    for s in (plain, sliced):
        assert "iso_values" in s.primitives()
        f = lacuna.build(s)
        for threads in (1, 2, 3):
            assert_close(f(A=a, x=x, threads=threads)["y"], a @ x)
        b = a.copy()
        b.data[5] = 2.0
        with pytest.raises(lacuna.FormatError, match="entry 5"):
            f(A=b, x=x)
    with pytest.raises(lacuna.ScheduleError, match="pads rows"):
        s = lacuna.Schedule(kernel("spmv"))
        s.decompose_format("A", "(+ (bsr 2) remainder)")
        s.iso_values("A")
