"""`lacuna.tune`: the autotuner from Python, sharing its records database with the CLI."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import scipy.io

import lacuna
from conftest import ROOT, assert_close, kernel, random_csr

LACUNA = ROOT / "build" / "release" / "lacuna"


def records(db):
    return [json.loads(line) for line in open(db) if line.strip()]


def test_tuned_spmm_is_correct_and_replays(tmp_path, rng):
    a = random_csr(300, 200, 0.05, 7)
    b = rng.uniform(-1.0, 1.0, (200, 16))
    db = tmp_path / "tune.jsonl"
    spmm = kernel("spmm")
    s = lacuna.tune(spmm, {"A": a, "B": b}, db=db, budget=60, trials=6, threads=1,
                    progress=False, report=tmp_path / "report")
    assert s["trials"] == 6
    rs = records(db)
    assert len([r for r in rs if "final_round" not in r]) == 6
    # The final round: the best few and the built-in schedule again, three rounds each.
    verdicts = [r for r in rs if "final_round" in r]
    assert s["final_round"]["finalists"] == len(verdicts) >= 2
    assert all(len(r["final_round"]["scores"]) == 3 for r in verdicts)
    assert s["best"]["trial"] in {r["trial"] for r in verdicts}
    assert (tmp_path / "report" / "convergence.svg").is_file()
    best = s["best"]
    assert best["seconds"] > 0
    # The best schedule is an ordinary schedule: it replays and computes A @ B.
    sch = lacuna.Schedule.from_ron(spmm, best["schedule"])
    got = lacuna.build(sch)(A=a, B=b)["C"]
    assert_close(got, a @ b)


def test_python_and_cli_share_the_database(tmp_path, rng):
    a = random_csr(200, 150, 0.05, 3)
    b = rng.uniform(-1.0, 1.0, (150, 8))
    mtx, npy = tmp_path / "a.mtx", tmp_path / "b.npy"
    scipy.io.mmwrite(mtx, a.tocoo(), symmetry="general", precision=17)
    np.save(npy, b)
    db = tmp_path / "tune.jsonl"
    s = lacuna.tune(ROOT / "examples" / "spmm.ron", {"A": str(mtx), "B": b}, db=db, budget=60,
                    trials=4, threads=1, progress=False)
    out = subprocess.run(
        [str(LACUNA), "tune", "apply-best", str(ROOT / "examples" / "spmm.ron"), "--input",
         f"A={mtx}", "--input", f"B={npy}", "--db", str(db), "--threads", "1"],
        capture_output=True, text=True, check=True)
    assert out.stdout == s["best"]["schedule"]


def test_a_crashing_candidate_does_not_take_python_down(tmp_path, monkeypatch, rng):
    a = random_csr(100, 100, 0.05, 5)
    b = rng.uniform(-1.0, 1.0, (100, 8))
    db = tmp_path / "tune.jsonl"
    monkeypatch.setenv("LACUNA_TUNE_INJECT", "crash:2")
    s = lacuna.tune(kernel("spmm"), {"A": a, "B": b}, db=db, budget=60, trials=4, threads=1,
                    strategy="exhaustive", progress=False, final_rounds=0)
    by_trial = {r["trial"]: r for r in records(db)}
    assert len(by_trial) == 4 and s["final_round"] is None
    assert by_trial[2]["status"] == "crashed"
    assert "SIGSEGV" in by_trial[2]["detail"]
    assert s["failed"] == 1 and s["trials"] == 4


@pytest.mark.parametrize("bad", [{"budget": 0}, {"strategy": "bogus"}, {"timeout": -1.0},
                                 {"threads": 0}, {"threads": 1_000_000}])
def test_bad_options_raise_tune_error(tmp_path, bad):
    a = random_csr(20, 20, 0.1, 1)
    args = {"db": tmp_path / "db.jsonl", "budget": 5, "progress": False, **bad}
    with pytest.raises(lacuna.TuneError):
        lacuna.tune(kernel("spmv"), {"A": a, "x": np.ones(20)}, **args)


def test_a_missing_input_is_a_bind_error(tmp_path):
    with pytest.raises(lacuna.BindError):
        lacuna.tune(kernel("spmv"), {"A": random_csr(20, 20, 0.1, 1)}, db=tmp_path / "db.jsonl",
                    budget=5, progress=False)
