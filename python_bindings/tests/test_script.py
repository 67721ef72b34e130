"""Authoring kernels in Python (lacuna.script) and converting them to and from RON."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import lacuna
import lacuna.script as T
from conftest import EXAMPLES, assert_close, kernel, random_csr


def build_spmm():
    with T.kernel("spmm") as K:
        m, n, feat, nnz = (T.param(p) for p in ("m", "n", "feat", "nnz"))
        I = T.dense_fixed(m)
        J = T.sparse_variable(I, (n, nnz))
        J_ = T.dense_fixed(n)
        K_ = T.dense_fixed(feat, name="K")
        A = T.match_sparse_buffer((I, J), "float64")
        B = T.match_sparse_buffer((J_, K_), "float64")
        C = T.match_sparse_buffer((I, K_), "float64")
        with T.sp_iter([I, J, K_], "SRS", "spmm") as [i, j, k]:
            with T.init():
                C[i, k] = 0.0
            C[i, k] = C[i, k] + A[i, j] * B[j, k]
    return K


def test_authored_spmm_equals_the_ron_example():
    K = build_spmm()
    k = K.kernel
    assert isinstance(k, lacuna.Kernel)
    assert k.inputs == ["A", "B"] and k.outputs == ["C"]
    assert k.params == ["m", "n", "feat", "nnz"]
    # The same program as examples/spmm.ron: same stage-I text, same RON.
    ex = kernel("spmm")
    assert k.text() == ex.text()
    assert k == ex and k.to_ron() == ex.to_ron()


def test_authored_spmm_scheduled_matches_scipy():
    k = build_spmm().kernel
    s = lacuna.Schedule(k)
    s.split("spmm:k", [None, 8])
    s.reorder(["k.0", "j"])
    s.parallel("spmm:i")
    f = lacuna.build(s)
    rng = np.random.default_rng(99)
    a = sp.random(300, 200, density=0.03, format="csr", random_state=rng)
    b = rng.standard_normal((200, 24))
    assert_close(f(A=a, B=b)["C"], a @ b)


def test_ron_round_trip_of_authored_and_example_kernels():
    k = build_spmm().kernel
    again = lacuna.Kernel.from_ron_text(k.to_ron())
    assert again == k and again.to_ron() == k.to_ron()
    for name in ["spmv", "spmm", "sddmm", "spadd", "sparse_softmax", "rgcn", "segment_reduce"]:
        ex = kernel(name)
        back = lacuna.Kernel.from_ron_text(ex.to_ron())
        assert back == ex, name
        assert back.to_ron() == ex.to_ron()


def test_every_axis_kind_alloc_buffer_and_functions():
    # Row-wise softmax-like kernel: ragged rows (dense_variable), an allocated row maximum,
    # exp, max, select and a comparison.
    with T.kernel("ragged") as K:
        I = T.dense_fixed("m")
        J = T.dense_variable(I, ("maxlen", "nnz"))
        A = T.match_sparse_buffer((I, J), "float64")
        mx = T.alloc_sparse_buffer((I,), "float64")
        out = T.match_sparse_buffer((I,), "float64", role="output")
        with T.sp_iter([I, J], "SR", "rowmax") as [i, j]:
            with T.init():
                mx[i] = -1.0e300
            mx[i] = T.max(mx[i], A[i, j])
        with T.sp_iter([I, J], "SR", "rowsum") as [i, j]:
            with T.init():
                out[i] = 0.0
            out[i] += T.select(A[i, j] > 0.0, T.exp(A[i, j] - mx[i]), T.abs(A[i, j]))
    k = K.kernel
    assert "DenseVariable" in k.to_ron() and "Alloc" in k.to_ron()
    f = lacuna.build(k, target="interp")
    # A ragged matrix: row r stores columns 0..len(r).
    lens = [3, 0, 2]
    vals = np.array([1.0, -2.0, 0.5, 3.0, -1.0])
    indptr = np.concatenate([[0], np.cumsum(lens)])
    rows = np.repeat(np.arange(3), lens)
    cols = np.concatenate([np.arange(n) for n in lens])
    a = sp.csr_matrix((vals, (rows, cols)), shape=(3, 3))
    got = f(A=a)["out"]
    want = []
    for r in range(3):
        v = vals[indptr[r]:indptr[r + 1]]
        m = v.max() if len(v) else 0.0
        want.append(sum(np.exp(x - m) if x > 0 else abs(x) for x in v))
    assert_close(got, np.array(want))


def test_sparse_fixed_and_int64_axes_render():
    with T.kernel("ell") as K:
        I = T.dense_fixed("m")
        J = T.sparse_fixed(I, ("n", 2), idtype="int64")
        J_ = T.dense_fixed("n")
        A = T.match_sparse_buffer((I, J), "float32")
        x = T.match_sparse_buffer((J_,), "float32")
        y = T.match_sparse_buffer((I,), "float32")
        with T.sp_iter([I, J], "SR", "ell") as [i, j]:
            with T.init():
                y[i] = 0.0
            y[i] = y[i] + A[i, j] * x[j]
    text = K.to_ron()
    assert "SparseFixed" in text and "idtype: I64" in text and "F32" in text
    k = K.kernel
    f = lacuna.build(k)
    a = sp.csr_matrix(np.array([[1.0, 2.0, 0], [0, 3.0, 4.0]], dtype=np.float32))
    y = f(A=a, x=np.array([1.0, 1.0, 2.0], dtype=np.float32))["y"]
    np.testing.assert_allclose(y, [3.0, 11.0])


def test_encoded_buffer_from_python():
    with T.kernel("spmv") as K:
        I = T.dense_fixed("m")
        J = T.dense_fixed("n")
        A = T.match_sparse_buffer((I, J), "float64", encoding="csc")
        x = T.match_sparse_buffer((J,), "float64")
        y = T.match_sparse_buffer((I,), "float64")
        with T.sp_iter([I, J], "SR", "spmv") as [i, j]:
            with T.init():
                y[i] = 0.0
            y[i] = y[i] + A[i, j] * x[j]
    assert 'encoding: Some("csc")' in K.to_ron()
    a = random_csr(20, 15, density=0.3, seed=1)
    x = np.arange(15.0)
    assert_close(lacuna.build(K.kernel)(A=a, x=x)["y"], a @ x)


def test_invalid_kernels_raise_kernel_error():
    with pytest.raises(lacuna.KernelError):
        with T.kernel("bad") as K:
            I = T.dense_fixed("m")
            J = T.dense_fixed("n")
            A = T.match_sparse_buffer((I, J), "float64")
            y = T.match_sparse_buffer((I,), "float64")
            # J is a reduction axis but indexes the written buffer.
            with T.sp_iter([I, J], "SR", "bad") as [i, j]:
                y[j] = A[i, j]
    with pytest.raises(lacuna.KernelError):
        lacuna.Kernel.from_ron_text("(version: 1, name: \"x\"")
    with pytest.raises(TypeError):
        with T.kernel("bad2"):
            I = T.dense_fixed("m")
            A = T.match_sparse_buffer((I,), "complex128")
    with pytest.raises(ValueError):
        with T.kernel("bad3"):
            I = T.dense_fixed("m")
            T.sp_iter([I], "SX")
    with pytest.raises(RuntimeError):
        T.dense_fixed("m")  # outside a kernel block


def test_nested_iterations_equal_the_sparse_softmax_example():
    with T.kernel("sparse_softmax") as K:
        I = T.dense_fixed("m")
        J = T.sparse_variable(I, ("n", "nnz"))
        A = T.match_sparse_buffer((I, J), "float64")
        mx = T.alloc_sparse_buffer((I,), "float64")
        sum_ = T.alloc_sparse_buffer("sum", (I,), "float64")
        B = T.match_sparse_buffer((I, J), "float64")
        with T.sp_iter([I], "S", "rows") as [i]:
            with T.sp_iter([J], "R", "row_max") as [j]:
                with T.init():
                    mx[i] = -1.0e308
                mx[i] = T.max(mx[i], A[i, j])
            with T.sp_iter([J], "R", "row_sum", vars=["j2"]) as [j2]:
                with T.init():
                    sum_[i] = 0.0
                sum_[i] = sum_[i] + T.exp(A[i, j2] - mx[i])
            with T.sp_iter([J], "S", "normalize", vars=["j3"]) as [j3]:
                B[i, j3] = T.exp(A[i, j3] - mx[i]) / sum_[i]
    ex = kernel("sparse_softmax")
    assert K.kernel == ex
    a = random_csr(30, 20, density=0.3, seed=6)
    got = lacuna.build(K.kernel)(A=a)["B"]
    dense = a.toarray()
    want = a.copy()
    for r in range(a.shape[0]):
        lo, hi = a.indptr[r], a.indptr[r + 1]
        v = a.data[lo:hi]
        if len(v):
            e = np.exp(v - v.max())
            want.data[lo:hi] = e / e.sum()
    assert dense.shape == got.shape
    assert_close(got, want)


def test_attach_builds_the_hypergnn_attach_example():
    with T.kernel("hypergnn_attach") as K:
        I = T.dense_fixed("nv")
        J = T.sparse_variable(I, ("ne", "nnz"))
        J_ = T.dense_fixed("ne")
        I_T = T.sparse_variable(J_, ("nv", "nnz_t"))
        I_TJ = T.attach(I_T, J)
        I_ = T.dense_fixed("nv")
        F = T.dense_fixed("feat")
        H = T.match_sparse_buffer((I, J), "float64")
        HT = T.match_sparse_buffer((J_, I_T), "float64")
        X = T.match_sparse_buffer((I_, F), "float64")
        Y = T.match_sparse_buffer((I, F), "float64")
        with T.sp_iter([I, J, I_TJ, F], "SRRS", "hgnn") as [i, j, i2, f]:
            with T.init():
                Y[i, f] = 0.0
            Y[i, f] = Y[i, f] + H[i, j] * HT[j, i2] * X[i2, f]
    assert K.kernel == kernel("hypergnn_attach")
    h = random_csr(12, 7, density=0.3, seed=11)
    ht = random_csr(7, 12, density=0.3, seed=12)
    x = np.random.default_rng(13).uniform(-1.0, 1.0, (12, 4))
    got = lacuna.build(K.kernel)(H=h, HT=ht, X=x)["Y"]
    np.testing.assert_allclose(got, h.toarray() @ ht.toarray() @ x, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError):
        with T.kernel("bad_attach"):
            I = T.dense_fixed("m")
            T.attach(I, I)


def test_coordinates_of_indexes_unchecked_and_is_checked_when_bound():
    def gather(declared):
        with T.kernel("gather") as K:
            I = T.dense_fixed("m")
            J = T.dense_fixed("n")
            idx = T.match_sparse_buffer((I,), "int64", coordinates_of=J if declared else None)
            x = T.match_sparse_buffer((J,), "float64")
            y = T.match_sparse_buffer((I,), "float64")
            with T.sp_iter([I], "S", "g") as [i]:
                y[i] = x[idx[i]]
        return K.kernel

    k = gather(True)
    assert "coordinates_of: Some(" in k.to_ron()
    assert lacuna.Kernel.from_ron_text(k.to_ron()) == k
    # The declared index has no range check in the kernel; the undeclared one has.
    assert "select(" not in lacuna.lower(k, "flat")
    assert "select(" in lacuna.lower(gather(False), "flat")
    x = np.array([1.5, -2.0, 4.0])
    idx = np.array([2, 0, 0, 1], dtype=np.int64)
    np.testing.assert_array_equal(lacuna.build(k)(idx=idx, x=x)["y"], x[idx])
    with pytest.raises(lacuna.BindError, match=r"value 3 at position 1 is not a coordinate of axis"):
        lacuna.build(k)(idx=np.array([0, 3, 1, 1], dtype=np.int64), x=x)
    with pytest.raises(TypeError, match="integer buffer"):
        with T.kernel("bad"):
            J = T.dense_fixed("n")
            T.match_sparse_buffer((J,), "float64", coordinates_of=J)
