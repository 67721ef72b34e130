"""SpMV, SpMM, SDDMM, SpAdd, SpGEMM from Python against scipy, on bundled and random matrices."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import lacuna
from conftest import EXAMPLES, MATRICES, assert_close, kernel, load_mtx, random_csr, sddmm_reference


@pytest.fixture(scope="module")
def spmv():
    return lacuna.build(kernel("spmv"))


@pytest.fixture(scope="module")
def spmm():
    return lacuna.build(kernel("spmm"))


@pytest.fixture(scope="module")
def sddmm():
    return lacuna.build(kernel("sddmm"))


@pytest.fixture(scope="module")
def spadd():
    return lacuna.build(kernel("spadd"))


def test_matrices_are_bundled():
    assert len(MATRICES) >= 4


@pytest.mark.parametrize("name", MATRICES)
def test_spmv_matches_scipy(spmv, name, rng):
    a = load_mtx(name)
    x = rng.standard_normal(a.shape[1])
    y = spmv(A=a, x=x)["y"]
    assert isinstance(y, np.ndarray) and y.dtype == np.float64
    assert_close(y, a @ x)
    assert spmv.last_copies == []


@pytest.mark.parametrize("name", MATRICES)
def test_spmm_matches_scipy(spmm, name, rng):
    a = load_mtx(name)
    b = rng.standard_normal((a.shape[1], 16))
    assert_close(spmm(A=a, B=b)["C"], a @ b)


@pytest.mark.parametrize("name", MATRICES)
def test_sddmm_matches_scipy(sddmm, name, rng):
    s = load_mtx(name)
    x = rng.standard_normal((s.shape[0], 8))
    w = rng.standard_normal((s.shape[1], 8))
    c = sddmm(S=s, X=x, W=w)["C"]
    assert sp.issparse(c) and c.format == "csr"
    want = sddmm_reference(s, x, w)
    assert_close(c, want)
    # The result shares S's structure.
    assert np.shares_memory(c.indices, s.indices) and np.shares_memory(c.indptr, s.indptr)


@pytest.mark.parametrize("name", MATRICES)
def test_spadd_matches_scipy(spadd, name):
    a = load_mtx(name)
    b = random_csr(*a.shape, density=0.01, seed=3)
    c = spadd(A=a, B=b)["C"]
    assert sp.issparse(c)
    assert_close(c, a + b)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_spadd_takes_csr_as_stored_or_not(spadd, index_dtype):
    """Canonical CSR is read as stored (either index width); unsorted columns and repeated
    entries go through coordinates, which sort and sum them, as scipy does. Results come back
    with int32 indices, as scipy keeps them."""
    a = random_csr(40, 30, density=0.2, seed=7)
    b = random_csr(40, 30, density=0.1, seed=8)

    def csr(indptr, indices, data):
        m = sp.csr_matrix((data, indices, indptr), shape=a.shape)
        # Set after construction: scipy's constructor narrows int64 indices that fit.
        m.indices, m.indptr = indices.astype(index_dtype), indptr.astype(index_dtype)
        return m

    canonical = csr(a.indptr, a.indices, a.data)
    assert canonical.indices.dtype == index_dtype
    c = spadd(A=canonical, B=b)["C"]
    assert c.indptr.dtype == np.int32 and c.indices.dtype == np.int32
    assert_close(c, a + b)
    # Each row's columns reversed: unsorted.
    rev_idx = np.concatenate([a.indices[s:e][::-1] for s, e in zip(a.indptr[:-1], a.indptr[1:])])
    rev_val = np.concatenate([a.data[s:e][::-1] for s, e in zip(a.indptr[:-1], a.indptr[1:])])
    unsorted = csr(a.indptr, rev_idx, rev_val)
    assert not unsorted.has_sorted_indices
    assert_close(spadd(A=unsorted, B=b)["C"], a + b)
    # Row 0 holds column 3 twice (2.0 and 0.5): summed.
    dup = csr(np.array([0, 2] + [2] * 39), np.array([3, 3]), np.array([2.0, 0.5]))
    c = spadd(A=dup, B=b)["C"]
    assert_close(c, sp.csr_matrix(([2.5], ([0], [3])), shape=a.shape) + b)
    # Malformed storage is still an error that says what is wrong.
    bad = ("csr", a.shape, np.array([0, 5] + [2] * 39), np.array([3, 3]), np.array([1.0, 1.0]))
    with pytest.raises(lacuna.LacunaError, match="indptr"):
        spadd._exe.run({"A": bad, "B": ("csr", b.shape, b.indptr, b.indices, b.data)}, None, None, True, None)
    # Float indices are refused, not truncated (1.5 would be read as column 1).
    floats = ("csr", a.shape, a.indptr, a.indices + 0.5, a.data)
    with pytest.raises(lacuna.BindError, match="indices has element type float64"):
        spadd._exe.run({"A": floats, "B": ("csr", b.shape, b.indptr, b.indices, b.data)}, None, None, True, None)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", [(1, 1), (37, 53), (200, 90)])
def test_random_matrices(spmv, spmm, sddmm, spadd, seed, shape):
    a = random_csr(*shape, density=0.15, seed=seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape[1])
    b = rng.standard_normal((shape[1], 5))
    assert_close(spmv(A=a, x=x)["y"], a @ x)
    assert_close(spmm(A=a, B=b)["C"], a @ b)
    xs, ws = rng.standard_normal((shape[0], 3)), rng.standard_normal((shape[1], 3))
    assert_close(sddmm(S=a, X=xs, W=ws)["C"], sddmm_reference(a, xs, ws))
    b2 = random_csr(*shape, density=0.2, seed=seed + 10)
    assert_close(spadd(A=a, B=b2)["C"], a + b2)


def test_empty_rows_and_empty_matrix(spmv):
    a = sp.csr_matrix((5, 4))
    assert_close(spmv(A=a, x=np.ones(4))["y"], np.zeros(5))
    a = sp.csr_matrix(np.array([[0, 0, 1.5], [0, 0, 0], [2.0, 0, 0]]))
    assert_close(spmv(A=a, x=np.array([1.0, 2.0, 3.0]))["y"], np.array([4.5, 0.0, 2.0]))


@pytest.mark.parametrize("fmt", ["csc", "coo", "bsr", "lil", "dok"])
def test_other_scipy_formats_are_converted(spmm, fmt):
    a = random_csr(30, 20, density=0.2, seed=5)
    b = np.random.default_rng(5).standard_normal((20, 4))
    given = a.asformat(fmt) if fmt != "bsr" else a.tobsr(blocksize=(2, 2))
    assert_close(spmm(A=given, B=b)["C"], a @ b)


def test_coo_with_duplicates_is_summed(spmv):
    a = sp.coo_matrix(([1.0, 2.0, 3.0], ([0, 0, 1], [1, 1, 0])), shape=(2, 2))
    assert_close(spmv(A=a, x=np.array([1.0, 10.0]))["y"], np.array([30.0, 3.0]))


def test_spgemm_matches_scipy():
    f = lacuna.build(kernel("spgemm"))
    a = random_csr(40, 30, density=0.1, seed=8)
    b = random_csr(30, 25, density=0.1, seed=9)
    assert_close(f(A=a, B=b)["C"], a @ b)


@pytest.mark.parametrize("target", ["interp", "interp-stage1"])
def test_interpreters_agree(spmm, target):
    f = lacuna.build(kernel("spmm"), target=target)
    a = load_mtx("west0479.mtx")
    b = np.random.default_rng(2).standard_normal((a.shape[1], 4))
    assert f.target == target
    assert_close(f(A=a, B=b)["C"], a @ b)


@pytest.mark.parametrize("enc", ["csr", "csc", "bsr(2,2)", "dcsr", "coo"])
def test_encoded_kernel_takes_any_format(enc):
    k = lacuna.Kernel.from_ron(EXAMPLES / "formats" / "spmv.ron", formats=[("A", enc)])
    f = lacuna.build(k)
    a = load_mtx("west0479.mtx")
    x = np.random.default_rng(4).standard_normal(a.shape[1])
    assert_close(f(A=a, x=x)["y"], a @ x)


def test_float32_kernel_and_params():
    text = (EXAMPLES / "spmv.ron").read_text().replace("F64", "F32")
    f = lacuna.build(lacuna.Kernel.from_ron_text(text))
    a = random_csr(20, 10, density=0.3, seed=1).astype(np.float32)
    x = np.arange(10, dtype=np.float32)
    y = f(A=a, x=x, params={"m": 20})["y"]
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, a @ x, rtol=1e-5)
    with pytest.raises(lacuna.ShapeError):
        f(A=a, x=x, params={"m": 21})
    # A parameter the kernel does not have (misspelt) is an error, not ignored.
    with pytest.raises(lacuna.BindError, match="has no parameter `rows`.*m, n, nnz"):
        f(A=a, x=x, params={"rows": 20})


def test_inputs_as_a_mapping_and_buffer_named_like_keywords():
    text = (EXAMPLES / "spmv.ron").read_text().replace('"x"', '"out"').replace("x[j]", "out[j]")
    f = lacuna.build(lacuna.Kernel.from_ron_text(text))
    assert f.inputs == ["A", "out"]
    a = random_csr(6, 5, density=0.5, seed=2)
    v = np.arange(5.0)
    assert_close(f.run({"A": a, "out": v})["y"], a @ v)
    y = np.zeros(6)
    assert f.run({"A": a, "out": v}, out={"y": y})["y"] is y
    assert_close(y, a @ v)
    # `self` is an ordinary buffer name too.
    g = lacuna.build(lacuna.Kernel.from_ron_text(text.replace('"out"', '"self"').replace("out[j]", "self[j]")))
    assert_close(g(A=a, self=v)["y"], a @ v)


def test_mlir_is_equal_returns_int8():
    # MLIR's `binary` example isEqual: entries where both vectors have one, i8 flags.
    f = lacuna.build(kernel("mlir_is_equal"))
    a = np.array([1.0, 0.0, 2.0, 0.0, 0.0, 3.0])
    b = np.array([0.0, 0.0, 2.0, 7.0, 0.0, -3.0])
    c = f(A=a, B=b)["C"]
    assert list(c.coords[0]) == [2, 5]
    assert c.values.dtype == np.int8
    assert list(c.values) == [1, 0]


def test_spgemm_rows_in_parallel_match_scipy():
    # Rows run in chunks on the worker pool (one workspace each): same pattern as scipy, and
    # repeated calls agree bit for bit.
    f = lacuna.build(kernel("spgemm"))
    a = random_csr(300, 200, density=0.05, seed=3)
    b = random_csr(200, 150, density=0.05, seed=4)
    first = f(A=a, B=b)["C"]
    again = f(A=a, B=b)["C"]
    assert (first != again).nnz == 0
    ref = (a @ b).tocsr()
    assert ((first != 0) != (ref != 0)).nnz == 0
    assert_close(first, ref)
