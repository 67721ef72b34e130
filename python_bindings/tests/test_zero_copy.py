"""Arrays whose element type and layout match are used in place: proven through memory."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import lacuna
from conftest import EXAMPLES, assert_close, kernel, random_csr, sddmm_reference


def test_kernel_sees_writes_to_the_same_input_array():
    f = lacuna.build(kernel("spmv"))
    a = random_csr(50, 40, density=0.1, seed=1)
    x = np.ones(40)
    y1 = f(A=a, x=x)["y"].copy()
    assert f.last_copies == []
    x[:] = 2.0  # written through the same memory, no rebuild
    a.data *= 3.0
    y2 = f(A=a, x=x)["y"]
    assert_close(y2, 6.0 * y1)
    assert_close(y2, a @ x)


def test_output_is_written_into_out_array():
    f = lacuna.build(kernel("spmm"))
    a = random_csr(30, 20, density=0.2, seed=2)
    b = np.random.default_rng(0).standard_normal((20, 6))
    c = np.full((30, 6), np.nan)
    res = f(A=a, B=b, out={"C": c})
    assert res["C"] is c
    assert res["C"].ctypes.data == c.ctypes.data
    assert_close(c, a @ b)  # c itself holds the result (NaNs overwritten)
    assert f.last_copies == []


def test_sparse_output_values_written_in_place_and_structure_shared():
    f = lacuna.build(kernel("sddmm"))
    s = random_csr(25, 30, density=0.2, seed=3)
    x = np.random.default_rng(1).standard_normal((25, 4))
    w = np.random.default_rng(2).standard_normal((30, 4))
    out = np.empty(s.nnz)
    c = f(S=s, X=x, W=w, out={"C": out})["C"]
    assert np.shares_memory(c.data, out)
    assert np.shares_memory(c.indptr, s.indptr) and np.shares_memory(c.indices, s.indices)
    assert_close(c, sddmm_reference(s, x, w))


def test_copy_false_accepts_matching_arrays_and_rejects_others():
    f = lacuna.build(kernel("spmv"))
    a = random_csr(10, 8, density=0.3, seed=4)
    f(A=a, x=np.ones(8), copy=False)
    with pytest.raises(lacuna.BindError, match="copy=False"):
        f(A=a, x=np.ones(8, dtype=np.float32), copy=False)
    with pytest.raises(lacuna.BindError, match="copy=False"):
        f(A=a, x=np.ones(16)[::2], copy=False)
    with pytest.raises(lacuna.BindError, match="copy=False"):
        f(A=a.tocsc(), x=np.ones(8), copy=False)
    with pytest.raises(lacuna.BindError, match="copy=False"):
        f(A=a.astype(np.float32), x=np.ones(8), copy=False)


def test_mismatched_arrays_are_converted_and_reported():
    f = lacuna.build(kernel("spmv"))
    a = random_csr(10, 8, density=0.3, seed=4)
    x = np.arange(8, dtype=np.int32)
    y = f(A=a, x=x)["y"]
    assert_close(y, a @ x.astype(np.float64))
    assert f.last_copies == ["argument `x`: int32 -> float64"]
    a64 = a.copy()
    a64.indptr = a64.indptr.astype(np.int64)
    a64.indices = a64.indices.astype(np.int64)
    assert_close(f(A=a64, x=np.ones(8))["y"], a @ np.ones(8))
    assert sorted(f.last_copies) == [
        "argument `A` indices: int64 -> int32",
        "argument `A` indptr: int64 -> int32",
    ]


def test_int64_index_kernel_uses_int64_csr_without_copy():
    text = (EXAMPLES / "spmv.ron").read_text().replace(
        'kind: SparseVariable(parent: "I", n: "n", nnz: "nnz"))',
        'kind: SparseVariable(parent: "I", n: "n", nnz: "nnz"), idtype: I64)',
    )
    assert "I64" in text
    f = lacuna.build(lacuna.Kernel.from_ron_text(text))
    a = random_csr(12, 9, density=0.3, seed=6)
    a.indptr = a.indptr.astype(np.int64)
    a.indices = a.indices.astype(np.int64)
    x = np.ones(9)
    assert_close(f(A=a, x=x, copy=False)["y"], a @ x)
    assert f.last_copies == []


def test_byte_swapped_arrays_are_converted():
    f = lacuna.build(kernel("spmv"))
    a = random_csr(10, 8, density=0.3, seed=4)
    x = np.arange(8.0).astype(">f8")
    assert_close(f(A=a, x=x)["y"], a @ np.arange(8.0))
    assert f.last_copies == ["argument `x`: >f8 -> float64"]
    with pytest.raises(lacuna.BindError):
        f(A=a, x=np.ones(8), out={"y": np.zeros(10, dtype=">f8")})


def test_unaligned_arrays_are_converted_and_small_int_types_refused_in_place():
    f = lacuna.build(kernel("spmv"))
    a = random_csr(10, 8, density=0.3, seed=5)
    raw = np.zeros(8 * 8 + 1, dtype=np.uint8)
    x = np.frombuffer(raw.data, dtype=np.float64, count=8, offset=1)
    assert not x.flags.aligned
    x_vals = np.arange(8.0)
    raw[1:] = np.frombuffer(x_vals.tobytes(), dtype=np.uint8)
    assert_close(f(A=a, x=x)["y"], a @ x_vals)
    assert f.last_copies == ["argument `x`: float64 -> float64"]
    with pytest.raises(lacuna.BindError):
        f(A=a, x=x, copy=False)
    # An output of another element type is refused, not converted (it is written in place).
    with pytest.raises(lacuna.BindError):
        f(A=a, x=x_vals, out={"y": np.zeros(10, dtype=np.int16)})


def test_buffer_declared_as_csr_encoding_is_zero_copy():
    # The encoding's widths decide the index type: 32-bit positions and coordinates take
    # SciPy's int32 arrays as they are; the default (64-bit) converts them, values still shared.
    text = (EXAMPLES / "formats" / "spmv.ron").read_text()
    enc32 = "map = (i, j) -> (i : dense, j : compressed), posWidth = 32, crdWidth = 32"
    f32idx = lacuna.build(lacuna.Kernel.from_ron_text(text, formats=[("A", enc32)]))
    a = random_csr(40, 30, density=0.2, seed=8)
    x = np.random.default_rng(8).standard_normal(30)
    assert_close(f32idx(A=a, x=x, copy=False)["y"], a @ x)
    assert f32idx.last_copies == []
    a.data[:] = 1.0  # seen by the next call through the same memory
    assert_close(f32idx(A=a, x=x, copy=False)["y"], a @ x)
    f64idx = lacuna.build(lacuna.Kernel.from_ron_text(text))
    assert_close(f64idx(A=a, x=x)["y"], a @ x)
    assert sorted(f64idx.last_copies) == [
        "argument `A` indices: int32 -> int64",
        "argument `A` indptr: int32 -> int64",
    ]
    # Other encodings are converted by the binder (a copy).
    csc = lacuna.build(lacuna.Kernel.from_ron_text(text, formats=[("A", "csc")]))
    assert_close(csc(A=a, x=x)["y"], a @ x)
    with pytest.raises(lacuna.BindError, match="copy=False"):
        csc(A=a, x=x, copy=False)
    unsorted = sp.csr_matrix((np.array([1.0, 2.0]), np.array([3, 1]), np.array([0, 2, 2])), shape=(2, 4))
    with pytest.raises(lacuna.BindError, match="strictly increasing"):
        f32idx(A=unsorted, x=np.ones(4))
