//! `lacuna.tune`: the autotuner of `lacuna tune`, driven from Python. Candidates are measured
//! in worker processes started as `python -m lacuna._tune_worker` (the same protocol as
//! `lacuna tune-worker`), so a crashing candidate never takes the interpreter down.

use crate::errors::{driver_error, guard, DataFileError, ExecutionError, LacunaError, TuneError};
use lacuna::tune::{parse_strategy, run_tune, TuneCliError, TuneRequest};
use lacuna::tuning::TuneOptions;
use pyo3::prelude::*;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

fn tune_error(e: &TuneCliError) -> PyErr {
    use lacuna::tuning::TuneError as T;
    let msg = e.to_string();
    match e {
        TuneCliError::Driver(d) => driver_error(d),
        TuneCliError::Tune(T::Db(_)) | TuneCliError::Report { .. } => DataFileError::new_err(msg),
        TuneCliError::Tune(T::Measure(_)) => ExecutionError::new_err(msg),
        TuneCliError::Tune(T::EmptySpace) | TuneCliError::NoRecord { .. } => {
            TuneError::new_err(msg)
        }
    }
}

/// Runs the tuner on a kernel file and data files; returns the JSON summary (text). The
/// Python wrapper `lacuna.tune` writes in-memory arguments to files first.
#[pyfunction]
#[pyo3(signature = (kernel, inputs, db, worker, *, budget, strategy=None, trials=None,
    threads=None, resume=false, report=None, amortize=None, params=None, batch=8, seed=0,
    timeout=30.0, min_seconds=0.05, decompositions=5, warm_start=true, progress=true,
    final_rounds=3, finalists=3))]
#[allow(clippy::too_many_arguments)]
pub fn tune(
    py: Python<'_>,
    kernel: PathBuf,
    inputs: Vec<(String, PathBuf)>,
    db: PathBuf,
    worker: Vec<String>,
    budget: f64,
    strategy: Option<String>,
    trials: Option<usize>,
    threads: Option<usize>,
    resume: bool,
    report: Option<PathBuf>,
    amortize: Option<f64>,
    params: Option<BTreeMap<String, i64>>,
    batch: usize,
    seed: u64,
    timeout: f64,
    min_seconds: f64,
    decompositions: usize,
    warm_start: bool,
    progress: bool,
    final_rounds: usize,
    finalists: usize,
) -> PyResult<String> {
    let bad = |m: &str| Err(TuneError::new_err(m.to_string()));
    if !(budget.is_finite() && budget > 0.0) {
        return bad("budget expects a positive number of seconds");
    }
    if !(timeout.is_finite() && timeout > 0.0) {
        return bad("timeout expects a positive number of seconds");
    }
    if amortize.is_some_and(|n| !(n.is_finite() && n >= 1.0)) {
        return bad("amortize expects a number of runs (at least 1)");
    }
    if batch == 0 || threads == Some(0) {
        return bad("batch and threads expect at least 1");
    }
    if threads.is_some_and(|n| n > lacuna::target::MAX_THREADS) {
        return bad(&format!("threads: at most {}", lacuna::target::MAX_THREADS));
    }
    let strategy = match strategy.as_deref() {
        None => None,
        Some(s) => match parse_strategy(s) {
            Some(k) => Some(k),
            None => return bad("strategy is one of exhaustive, random, evolutionary"),
        },
    };
    if worker.is_empty() {
        return Err(LacunaError::new_err("no worker command"));
    }
    let threads =
        threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let req = TuneRequest {
        kernel,
        formats: vec![],
        inputs,
        params: params.unwrap_or_default(),
        db,
        threads,
        options: TuneOptions {
            budget: Duration::from_secs_f64(budget),
            max_trials: trials,
            batch,
            seed,
            amortize,
            resume,
            warm_start,
            final_rounds,
            finalists,
            ..TuneOptions::default()
        },
        strategy,
        template: lacuna::tune::host_template_options(decompositions),
        timeout: Duration::from_secs_f64(timeout),
        min_seconds,
        report,
        progress,
        worker: Some(worker.into_iter().map(Into::into).collect()),
    };
    let out = py.detach(move || guard("tune", || Ok(run_tune(req))))?;
    out.map(|v| v.to_string()).map_err(|e| tune_error(&e))
}

/// The measurement worker's main loop on this process's stdin and stdout (run by
/// `python -m lacuna._tune_worker`).
#[pyfunction]
pub fn tune_worker(py: Python<'_>) -> PyResult<()> {
    py.detach(|| guard("tune worker", || Ok(lacuna::tune::worker_main())))?
        .map_err(|e| driver_error(&e))
}
