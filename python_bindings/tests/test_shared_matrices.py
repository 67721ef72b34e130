"""SpMV, SpMM and SDDMM from Python against scipy on real matrices of ../shared/matrices (next
to the repository, as in CI), a selection of the small and medium ones."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import lacuna
from conftest import ROOT, assert_close, kernel, sddmm_reference

SHARED = ROOT.parent / "shared" / "matrices"
SELECTION = ["4elt.mtx", "bcsstk13.mtx", "cs4.mtx", "ego-Facebook.mtx", "Franz6_id1959_aug.mtx",
             "citeseer_features.mtx", "PGPgiantcompo.mtx", "dwt_992.mtx"]
PRESENT = [name for name in SELECTION if (SHARED / name).exists()]


@pytest.fixture(scope="module")
def functions():
    return {name: lacuna.build(kernel(name)) for name in ("spmv", "spmm", "sddmm")}


@pytest.mark.parametrize("name", PRESENT)
def test_shared_matrix(functions, name):
    a = sp.csr_matrix(scipy.io.mmread(SHARED / name), dtype=np.float64)
    a.sum_duplicates()
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(a.shape[1])
    assert_close(functions["spmv"](A=a, x=x)["y"], a @ x)
    b = rng.standard_normal((a.shape[1], 32))
    assert_close(functions["spmm"](A=a, B=b)["C"], a @ b)
    xs, ws = rng.standard_normal((a.shape[0], 16)), rng.standard_normal((a.shape[1], 16))
    assert_close(functions["sddmm"](S=a, X=xs, W=ws)["C"], sddmm_reference(a, xs, ws))
    assert functions["spmm"].last_copies == []
