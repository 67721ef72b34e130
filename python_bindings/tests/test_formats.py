"""convert, assemble, disassemble: MLIR's storage layout over NumPy arrays."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import lacuna
from conftest import EXAMPLES, load_mtx, random_csr


def test_csr_disassembles_to_scipy_arrays():
    a = load_mtx("west0479.mtx")
    t = lacuna.convert(a, "csr")
    assert t.shape == list(a.shape) and t.nse == a.nnz
    assert lacuna.storage_layout("csr") == ["pos[1]", "crd[1]"]
    (pos, crd), values = lacuna.disassemble(t)
    np.testing.assert_array_equal(pos, a.indptr)
    np.testing.assert_array_equal(crd, a.indices)
    np.testing.assert_array_equal(values, a.data)


@pytest.mark.parametrize("enc", ["csc", "dcsr", "coo", "bsr(2,2)", "ell(8)", "dense",
                                 "map = (i, j) -> (j : dense, i : compressed)"])
def test_convert_round_trips_through_any_encoding(enc):
    a = random_csr(12, 10, density=0.2, seed=3)
    t = lacuna.convert(a, enc)
    np.testing.assert_array_equal(t.to_dense(), a.toarray())
    back = lacuna.assemble(t.encoding, t.shape, *lacuna.disassemble(t))
    assert back.print() == t.print()
    assert lacuna.convert(t, "csr").print() == lacuna.convert(a, "csr").print()


def test_bsr_prints_as_mlir():
    dense = np.array([[1, 2, 0, 0], [0, 3, 0, 0], [0, 0, 4, 5], [0, 0, 6, 0]], dtype=np.float64)
    t = lacuna.convert(dense, "bsr(2,2)")
    text = t.print()
    assert "pos[1] : ( 0, 1, 2 )" in text and "crd[1] : ( 0, 1 )" in text
    blocks, values = lacuna.disassemble(t)
    np.testing.assert_array_equal(values, [1, 2, 0, 3, 4, 5, 6, 0])


def test_assemble_validates():
    with pytest.raises(lacuna.FormatError):
        lacuna.assemble("csr", [2, 3], [np.array([0, 2, 1]), np.array([0, 1])], np.array([1.0, 2.0]))
    with pytest.raises(lacuna.FormatError):
        lacuna.assemble("csr", [2, 3], [np.array([0, 1, 2]), np.array([0, 7])], np.array([1.0, 2.0]))
    with pytest.raises(lacuna.FormatError):
        lacuna.assemble("csr", [2, 3], [np.array([0, 1, 2])], np.array([1.0, 2.0]))
    with pytest.raises(lacuna.FormatError):
        lacuna.convert(np.eye(3), "bsr(")
    ok = lacuna.assemble("csr", [2, 3], [np.array([0, 1, 2]), np.array([2, 0])], np.array([1.0, 2.0]))
    np.testing.assert_array_equal(ok.to_dense(), [[0, 0, 1.0], [2.0, 0, 0]])


def test_sparse_tensor_as_kernel_argument():
    a = random_csr(9, 7, density=0.3, seed=4)
    t = lacuna.convert(a, "bsr(3,1)")
    f = lacuna.build(lacuna.Kernel.from_ron(EXAMPLES / "spmv.ron"))
    x = np.arange(7.0)
    np.testing.assert_allclose(f(A=t, x=x)["y"], a @ x, rtol=1e-12)
