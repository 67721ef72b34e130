"""Bad input gives the right exception class, never a crash."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import lacuna
from conftest import EXAMPLES, assert_close, kernel, random_csr


@pytest.fixture(scope="module")
def spmv():
    return lacuna.build(kernel("spmv"))


@pytest.fixture(scope="module")
def a():
    return random_csr(10, 8, density=0.4, seed=7)


def test_exception_hierarchy():
    for cls in [lacuna.KernelError, lacuna.ScheduleError, lacuna.FormatError, lacuna.BindError,
                lacuna.CompileError, lacuna.ExecutionError, lacuna.DataFileError]:
        assert issubclass(cls, lacuna.LacunaError)
    assert issubclass(lacuna.ShapeError, lacuna.BindError)
    assert issubclass(lacuna.LacunaError, Exception)


def test_wrong_dtype(spmv, a):
    with pytest.raises(lacuna.BindError, match="complex128"):
        spmv(A=a, x=np.ones(8, dtype=np.complex128))
    with pytest.raises(lacuna.BindError):
        spmv(A=a, x=np.array(["a"] * 8))
    with pytest.raises(lacuna.BindError, match="float64"):
        spmv(A=a, x=np.ones(8), out={"y": np.zeros(10, dtype=np.float32)})
    text = (EXAMPLES / "spmv.ron").read_text().replace("(name: \"x\", axes: [\"J_\"], dtype: F64)",
                                                        "(name: \"x\", axes: [\"J_\"], dtype: I32)")
    assert "I32" in text
    fi = lacuna.build(lacuna.Kernel.from_ron_text(text.replace("y[i] + A[i, j] * x[j]", "y[i] + A[i, j] * f64(x[j])")))
    with pytest.raises(lacuna.BindError):
        fi(A=a, x=np.full(8, 0.5))  # floats do not convert to an integer buffer


def test_non_contiguous_arrays(spmv, a):
    x = np.ones(16)[::2]
    y = spmv(A=a, x=x)["y"]  # converted (copied), correct
    np.testing.assert_allclose(y, a @ x)
    with pytest.raises(lacuna.BindError, match="C-contiguous"):
        spmv(A=a, x=x, copy=False)
    with pytest.raises(lacuna.BindError, match="C-contiguous"):
        spmv(A=a, x=np.ones(8), out={"y": np.zeros(20)[::2]})
    f = lacuna.build(kernel("spmm"))
    b = np.asfortranarray(np.random.default_rng(0).standard_normal((8, 3)))
    np.testing.assert_allclose(f(A=a, B=b)["C"], a @ b, rtol=1e-12)
    with pytest.raises(lacuna.BindError):
        f(A=a, B=b, copy=False)
    ro = np.ones(10)
    ro.flags.writeable = False
    with pytest.raises(lacuna.BindError, match="writeable"):
        spmv(A=a, x=np.ones(8), out={"y": ro})


def test_unsorted_and_duplicate_indices(spmv):
    m = sp.csr_matrix((np.array([1.0, 2.0]), np.array([3, 1]), np.array([0, 2, 2])), shape=(2, 4))
    assert not m.has_sorted_indices
    with pytest.raises(lacuna.BindError, match="strictly increasing"):
        spmv(A=m, x=np.ones(4))
    d = sp.csr_matrix((np.array([1.0, 2.0]), np.array([1, 1]), np.array([0, 2, 2])), shape=(2, 4))
    with pytest.raises(lacuna.BindError, match="strictly increasing"):
        spmv(A=d, x=np.ones(4))


def test_malformed_csr_structure(spmv):
    bad_ptr = sp.csr_matrix((3, 4))
    bad_ptr.indptr = np.array([0, 2, 1, 0], dtype=np.int32)
    bad_ptr.indices = np.array([0, 1], dtype=np.int32)
    bad_ptr.data = np.array([1.0, 2.0])
    with pytest.raises(lacuna.BindError):
        spmv(A=bad_ptr, x=np.ones(4))
    out_of_range = sp.csr_matrix((2, 4))
    out_of_range.indptr = np.array([0, 1, 1], dtype=np.int32)
    out_of_range.indices = np.array([9], dtype=np.int32)
    out_of_range.data = np.array([1.0])
    with pytest.raises(lacuna.BindError, match="out of range"):
        spmv(A=out_of_range, x=np.ones(4))
    short = sp.csr_matrix((2, 4))
    short.indptr = np.array([0, 1, 3], dtype=np.int32)
    short.indices = np.array([0, 1], dtype=np.int32)
    short.data = np.array([1.0, 2.0])
    with pytest.raises(lacuna.BindError):
        spmv(A=short, x=np.ones(4))


def test_shape_mismatch(spmv, a):
    with pytest.raises(lacuna.ShapeError, match="shape mismatch"):
        spmv(A=a, x=np.ones(9))
    with pytest.raises(lacuna.ShapeError):
        spmv(A=a, x=np.ones((8, 1)))
    with pytest.raises(lacuna.ShapeError):
        spmv(A=a, x=np.ones(8), out={"y": np.zeros(11)})
    f = lacuna.build(kernel("spadd"))
    with pytest.raises(lacuna.BindError, match="dimension 1"):
        f(A=a, B=random_csr(10, 9, density=0.2, seed=1))


def test_missing_and_unknown_arguments(spmv, a):
    with pytest.raises(lacuna.BindError, match="no input given for buffer `x`"):
        spmv(A=a)
    with pytest.raises(lacuna.BindError, match="not an input buffer"):
        spmv(A=a, x=np.ones(8), z=np.ones(3))
    with pytest.raises(lacuna.BindError, match="not an output buffer"):
        spmv(A=a, x=np.ones(8), out={"x": np.ones(8)})
    with pytest.raises(lacuna.BindError):
        spmv(A=np.ones((10, 8)), x=np.ones(8), copy=False)


def test_same_array_as_input_and_output(a):
    f = lacuna.build(kernel("spmm"))
    b = np.ones((8, 8))
    with pytest.raises(lacuna.BindError):
        f(A=random_csr(8, 8, density=0.3, seed=2), B=b, out={"C": b})


def test_kernel_files_and_targets():
    with pytest.raises(lacuna.DataFileError):
        lacuna.Kernel.from_ron("/nonexistent/kernel.ron")
    with pytest.raises(lacuna.KernelError, match="<string>"):
        lacuna.Kernel.from_ron_text("(version: 1)")
    with pytest.raises(ValueError):
        lacuna.build(kernel("spmv"), target="tpu")
    with pytest.raises(TypeError):
        lacuna.build("examples/spmv.ron")
    with pytest.raises(lacuna.FormatError):
        lacuna.Kernel.from_ron(EXAMPLES / "formats" / "spmv.ron", formats=[("A", "bsr(")])
    with pytest.raises(lacuna.FormatError):
        lacuna.Kernel.from_ron(EXAMPLES / "spmv.ron", formats=[("A", "csc")])


def test_coiteration_schedules_are_compile_errors():
    s = lacuna.Schedule(kernel("spadd"))
    s.specialize("m", 10)
    with pytest.raises(lacuna.CompileError, match="schedules of co-iteration kernels"):
        lacuna.build(s)
    assert lacuna.build(kernel("spadd")).outputs == ["C"]


def test_random_corrupt_csr_never_crashes(spmv):
    """Random structure arrays: every call either computes scipy's answer on a well-formed
    matrix or raises a LacunaError; none reaches the machine code out of bounds."""
    rng = np.random.default_rng(2024)
    accepted = rejected = 0
    for trial in range(300):
        m, n = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        nnz = int(rng.integers(0, 8))
        indptr = np.sort(rng.integers(-1, nnz + 2, m + 1)).astype(np.int32)
        if trial % 3 == 0:
            indptr = rng.integers(-2, nnz + 3, m + 1).astype(np.int32)  # not even sorted
        indices = rng.integers(-1, n + 1, nnz).astype(np.int32)
        data = rng.standard_normal(nnz)
        a = sp.csr_matrix((m, n))
        a.indptr, a.indices, a.data = indptr, indices, data
        x = rng.standard_normal(n)
        try:
            y = spmv(A=a, x=x)["y"]
        except lacuna.LacunaError:
            rejected += 1
            continue
        accepted += 1
        # Accepted: the structure is a canonical CSR matrix, and the result is scipy's.
        assert indptr[0] == 0 and np.all(np.diff(indptr) >= 0) and indptr[-1] == nnz
        assert np.all((indices >= 0) & (indices < n))
        for r in range(m):
            row = indices[indptr[r]:indptr[r + 1]]
            assert np.all(np.diff(row) > 0)
        want = sp.csr_matrix((data, indices, indptr), shape=(m, n)) @ x
        assert_close(y, want)
    assert accepted > 0 and rejected > 0


def test_gpu_race_is_an_execution_error():
    # spmm_gpu_naive without binding the init loop: every threadIdx.x initializes row i.
    s = lacuna.Schedule(kernel("spmm"))
    s.split("spmm:i", [None, 8])
    s.bind("i.0", "blockIdx.x")
    s.bind("i.1", "threadIdx.y")
    s.split("spmm:k", [None, 32])
    s.reorder(["k.0", "k.1", "j"])
    s.bind("spmm:k.1", "threadIdx.x")
    f = lacuna.build(s, target="interp-gpu")
    a = random_csr(20, 10, density=0.3, seed=3)
    with pytest.raises(lacuna.ExecutionError, match="race"):
        f(A=a, B=np.ones((10, 64)))
    s.split("spmm_init:k", [None, 32])
    s.bind("spmm_init:k.1", "threadIdx.x")
    g = lacuna.build(s, target="interp-gpu")
    assert_close(g(A=a, B=np.ones((10, 64)))["C"], a @ np.ones((10, 64)))


def test_arrays_changed_by_python_code_during_the_call_are_caught(spmv):
    # The kernel trusts the structure arrays it was given, so every Python call the binding
    # makes (here, an `out` array's `flags` property) comes before they are validated: a change
    # made then is refused, not read out of bounds.
    a = random_csr(50, 40, density=0.2, seed=3)
    assert a.indices.dtype == np.int32 and a.nnz > 0

    class Sneaky(np.ndarray):
        @property
        def flags(self):
            a.indices[0] = 10**6  # far past x
            return super().flags

    y = np.zeros(50).view(Sneaky)
    with pytest.raises(lacuna.BindError, match="out of range"):
        spmv(A=a, x=np.ones(40), out={"y": y})
    assert not y.any(), "the kernel did not run"


def test_out_sharing_memory_with_an_argument_is_refused(spmv):
    # Two arrays over the same bytes through different base objects: NumPy's borrow checks do
    # not see the overlap, the binding compares addresses.
    raw = bytearray(64)
    ind = np.frombuffer(memoryview(raw), np.int32)[:4]
    ind[:] = [0, 1, 2, 3]
    y = np.frombuffer(memoryview(raw), np.float64)[1:5]  # bytes 8..40: over ind[2:4]
    a = ("csr", (4, 4), np.arange(5, dtype=np.int32), ind, np.ones(4))
    with pytest.raises(lacuna.BindError, match="shares memory with argument `A`"):
        spmv(A=a, x=np.ones(4), out={"y": y})
    # Overlapping views of one array: NumPy's borrow check refuses them first.
    x = np.ones(8)
    with pytest.raises(lacuna.BindError, match="also an input"):
        spmv(A=random_csr(4, 4, density=0.5, seed=1), x=x[:4], out={"y": x[2:6]})
    # Apart, they run: the structure read is a copy, the result is right.
    good = np.zeros(4)
    spmv(A=a, x=np.ones(4), out={"y": good})
    assert_close(good, np.ones(4))
