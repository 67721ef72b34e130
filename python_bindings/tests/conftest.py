"""Shared fixtures: the repository root, bundled matrices, random matrices."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DATA = ROOT / "tests" / "data"
MATRICES = sorted(p.name for p in DATA.glob("*.mtx"))


def load_mtx(name: str) -> sp.csr_matrix:
    """A bundled Matrix Market file as a canonical float64 CSR matrix with int32 indices."""
    m = sp.csr_matrix(scipy.io.mmread(DATA / name), dtype=np.float64)
    m.sum_duplicates()
    return m


def random_csr(m: int, n: int, density: float, seed: int) -> sp.csr_matrix:
    """A random CSR matrix (values in [-1, 1))."""
    rng = np.random.default_rng(seed)
    a = sp.random(m, n, density=density, format="csr", random_state=rng, dtype=np.float64)
    a.data = rng.uniform(-1.0, 1.0, a.nnz)
    a.sum_duplicates()
    return a


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def kernel(name: str):
    import lacuna

    return lacuna.Kernel.from_ron(EXAMPLES / f"{name}.ron")


def sddmm_reference(s: sp.csr_matrix, x: np.ndarray, w: np.ndarray) -> sp.csr_matrix:
    """S ⊙ (X Wᵀ) at S's stored entries, without forming the dense product."""
    coo = s.tocoo()
    values = coo.data * np.einsum("ek,ek->e", x[coo.row], w[coo.col])
    return sp.csr_matrix((values, (coo.row, coo.col)), shape=s.shape)


def assert_close(got, want, rtol: float = 1e-10) -> None:
    """Dense or sparse comparison, relative to the largest magnitude (rtol 1e-10 for f64).
    Sparse operands are compared entry by entry without densifying."""
    if sp.issparse(got) or sp.issparse(want):
        got, want = sp.csr_matrix(got), sp.csr_matrix(want)
        assert got.shape == want.shape
        scale = max(1.0, float(np.abs(want.data).max(initial=0.0)))
        diff = (got - want).tocsr()
        assert float(np.abs(diff.data).max(initial=0.0)) <= rtol * scale
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)
