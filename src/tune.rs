//! `lacuna tune`: the autotuner on the command line. The search itself lives in
//! `lacuna_tuning`; this module measures candidates in an isolated worker process (`lacuna
//! tune-worker`, started by the tuner), so that a candidate that crashes, hangs or computes a
//! wrong result is recorded as failed and the search goes on.
//!
//! # Worker protocol
//!
//! JSON lines. The tuner writes a [`WorkerSetup`], then [`ToWorker`] batches; the worker
//! answers [`FromWorker`] messages: `Ready` once it has loaded the data and computed the
//! reference result (the kernel without a schedule), then for each candidate of a batch
//! (compiled together, in parallel) `Start` and `Done`. A worker that stops answering within
//! the time limit is killed; one that dies is restarted for the rest of its batch.

use crate::driver::{
    self, convert_inputs, load_input, load_kernel_with_formats, reset_outputs, DriverError,
    Executable, Target,
};
use lacuna_schedule::{Instruction, ScheduleFile};
use lacuna_stage1::bind_with;
use lacuna_stage1::{unpack, Input, Output, Program};
use lacuna_tuning::db::{Database, Record, Status, Timing};
use lacuna_tuning::{
    coo_stats, data_signature, kernel_hash, template, Candidate, KernelTemplate, Machine,
    MatrixFeatures, Measurer, Observer, Outcome, StrategyKind, Task, TemplateOptions, TuneError,
    TuneOptions,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Environment variable naming candidates (by trial number) whose measurement the worker
/// sabotages, for testing the tuner's fault handling: `crash:3,hang:5,wrong:7`.
pub const INJECT_ENV: &str = "LACUNA_TUNE_INJECT";

/// What a worker needs to measure candidates.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerSetup {
    /// The kernel file.
    pub kernel: PathBuf,
    /// `--format NAME=ENCODING` pairs.
    pub formats: Vec<(String, String)>,
    /// Input files by buffer name.
    pub inputs: Vec<(String, PathBuf)>,
    /// Sizes given on the command line.
    pub params: BTreeMap<String, i64>,
    /// Worker threads of parallel loops.
    pub threads: usize,
    /// Keep timing a candidate until this many seconds have been spent (at least 3 runs).
    pub min_seconds: f64,
    /// At most this many timed runs.
    pub max_runs: usize,
}

/// A message to the worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ToWorker {
    /// Compile these candidates (trial, trace) and measure them in order.
    Batch(Vec<(usize, Vec<Instruction>)>),
}

/// A message from the worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum FromWorker {
    /// The data is loaded and the reference computed.
    Ready {
        /// Seconds of one run of the kernel without a schedule.
        reference_seconds: f64,
    },
    /// Measuring a trial begins.
    Start(usize),
    /// A trial's outcome.
    Done {
        /// The trial.
        trial: usize,
        /// Timings, or `None` with a status and detail.
        timing: Option<Timing>,
        /// The failure.
        status: Status,
        /// Details of a failure.
        detail: Option<String>,
    },
    /// The worker cannot work at all (bad kernel or data).
    Fatal(String),
}

fn send(out: &mut impl Write, msg: &FromWorker) {
    let line = serde_json::to_string(msg).unwrap_or_default();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The worker process's main loop (`lacuna tune-worker`); returns when its input closes.
pub fn worker_main() -> Result<(), DriverError> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout();
    let Some(Ok(first)) = lines.next() else {
        return Ok(());
    };
    let setup: WorkerSetup = match serde_json::from_str(&first) {
        Ok(s) => s,
        Err(e) => {
            send(&mut out, &FromWorker::Fatal(format!("bad setup: {e}")));
            return Ok(());
        }
    };
    let worker = match Worker::new(&setup) {
        Ok(w) => w,
        Err(e) => {
            send(&mut out, &FromWorker::Fatal(e.to_string()));
            return Ok(());
        }
    };
    send(
        &mut out,
        &FromWorker::Ready {
            reference_seconds: worker.reference_seconds,
        },
    );
    let inject = parse_inject(&std::env::var(INJECT_ENV).unwrap_or_default());
    for line in lines {
        let Ok(line) = line else { break };
        let Ok(ToWorker::Batch(batch)) = serde_json::from_str::<ToWorker>(&line) else {
            send(&mut out, &FromWorker::Fatal(format!("bad message: {line}")));
            break;
        };
        // Compile the batch together, on every core.
        let built: Vec<_> = {
            use rayon::prelude::*;
            let pool = rayon::ThreadPoolBuilder::new().build();
            let build = |(trial, trace): &(usize, Vec<Instruction>)| {
                let t = Instant::now();
                let file = ScheduleFile {
                    version: lacuna_schedule::SCHEDULE_FORMAT_VERSION,
                    kernel: worker.program.name.clone(),
                    trace: trace.clone(),
                };
                let r = Executable::build_converting(&worker.program, Some(&file), Target::Jit);
                (*trial, r, t.elapsed().as_secs_f64())
            };
            match pool {
                Ok(pool) => pool.install(|| batch.par_iter().map(build).collect()),
                Err(_) => batch.iter().map(build).collect(),
            }
        };
        for (trial, built, compile) in built {
            send(&mut out, &FromWorker::Start(trial));
            let fault = inject.get(&trial).map(String::as_str);
            match fault {
                Some("crash") => {
                    // SAFETY: restoring the default action of SIGSEGV (the Rust runtime's handler
                    // ignores a raised one) and raising it on this process: the fault tested.
                    unsafe {
                        libc::signal(libc::SIGSEGV, libc::SIG_DFL);
                        libc::raise(libc::SIGSEGV);
                    }
                }
                Some("hang") => loop {
                    std::thread::sleep(Duration::from_secs(3600));
                },
                _ => {}
            }
            let msg = match built {
                Err(e) => FromWorker::Done {
                    trial,
                    timing: None,
                    status: Status::Error,
                    detail: Some(e.to_string()),
                },
                Ok((program, exe, conversions)) => {
                    match worker.measure(
                        &setup,
                        &program,
                        &exe,
                        &conversions,
                        fault == Some("wrong"),
                    ) {
                        Ok(Ok(mut timing)) => {
                            timing.compile = compile;
                            FromWorker::Done {
                                trial,
                                timing: Some(timing),
                                status: Status::Ok,
                                detail: None,
                            }
                        }
                        Ok(Err(why)) => FromWorker::Done {
                            trial,
                            timing: None,
                            status: Status::Wrong,
                            detail: Some(why),
                        },
                        Err(e) => FromWorker::Done {
                            trial,
                            timing: None,
                            status: Status::Error,
                            detail: Some(e.to_string()),
                        },
                    }
                }
            };
            send(&mut out, &msg);
        }
    }
    Ok(())
}

fn parse_inject(text: &str) -> BTreeMap<usize, String> {
    text.split(',')
        .filter_map(|item| {
            let (what, trial) = item.trim().split_once(':')?;
            Some((trial.parse().ok()?, what.to_string()))
        })
        .collect()
}

/// A loaded kernel, its data and its reference result.
struct Worker {
    program: Program,
    inputs: BTreeMap<String, Input>,
    params: BTreeMap<String, i64>,
    reference: BTreeMap<String, Output>,
    reference_seconds: f64,
}

impl Worker {
    fn new(setup: &WorkerSetup) -> Result<Worker, DriverError> {
        let _ = lacuna_target::pool_builder(setup.threads.max(1)).build_global();
        let program = load_kernel_with_formats(&setup.kernel, &setup.formats)?;
        let mut inputs = BTreeMap::new();
        for (name, path) in &setup.inputs {
            inputs.insert(name.clone(), load_input(path)?);
        }
        let t = Instant::now();
        let report =
            driver::run_kernel_scheduled(&program, None, &inputs, &setup.params, Target::Jit, 1)?;
        Ok(Worker {
            program,
            inputs,
            params: setup.params.clone(),
            reference: report.outputs,
            reference_seconds: t.elapsed().as_secs_f64(),
        })
    }

    /// Converts, binds, warms up, times; then checks the outputs against the reference
    /// (`Ok(Err(why))` when they differ).
    fn measure(
        &self,
        setup: &WorkerSetup,
        program: &Program,
        exe: &Executable,
        conversions: &[lacuna_schedule::Conversion],
        sabotage: bool,
    ) -> Result<Result<Timing, String>, DriverError> {
        let t = Instant::now();
        let given = convert_inputs(conversions, &self.inputs)?;
        let mut conversion = t.elapsed().as_secs_f64();
        let mut b = bind_with(program, &self.inputs, &self.params, given)?;
        reset_outputs(program, &mut b);
        // Once per data, counted with the conversion: the generated value copies of decomposed
        // buffers and the preprocessing function; the timed runs are the kernel's alone.
        let t = Instant::now();
        exe.run_preprocess(program, &mut b)?;
        conversion += t.elapsed().as_secs_f64();
        // SAFETY (here and below): `b` is as `run_preprocess` (which validated it) left it,
        // changed only by the kernel and `reset_outputs` in output values.
        unsafe { exe.run_kernel(program, &mut b)? }; // warm-up
        let mut times = Vec::new();
        let started = Instant::now();
        while times.len() < 3
            || (started.elapsed().as_secs_f64() < setup.min_seconds && times.len() < setup.max_runs)
        {
            exe.reset_outputs(program, &mut b);
            let t = Instant::now();
            unsafe { exe.run_kernel(program, &mut b)? };
            times.push(t.elapsed().as_secs_f64());
        }
        for (name, want) in &self.reference {
            let mut got = unpack(program, &b, name)?;
            if sabotage {
                if let Output::Dense(d) = &mut got {
                    let v = d.data.get(0).map_or(0.0, |s| s.as_f64());
                    let dtype = d.data.dtype();
                    d.data.set(0, lacuna_ir::Scalar::F64(v + 1.0).cast(dtype));
                }
            }
            if let Some(why) = differs(name, want, &got) {
                return Ok(Err(why));
            }
        }
        times.sort_by(f64::total_cmp);
        Ok(Ok(Timing {
            min: times[0],
            median: times[times.len() / 2],
            runs: times.len(),
            compile: 0.0,
            conversion,
        }))
    }
}

/// Relative tolerance of a candidate's results against the reference: schedules may
/// reassociate sums (vector lanes, split accumulators).
pub const TOLERANCE: f64 = 1e-9;

fn differs(name: &str, want: &Output, got: &Output) -> Option<String> {
    if want.shape() != got.shape() {
        return Some(format!(
            "output `{name}` has shape {:?}, the reference {:?}",
            got.shape(),
            want.shape()
        ));
    }
    let (w, g) = (want.values().to_f64_vec(), got.values().to_f64_vec());
    if w.len() != g.len() {
        return Some(format!(
            "output `{name}` has {} entries, the reference {}",
            g.len(),
            w.len()
        ));
    }
    let scale = w.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    let tol = match want.values().dtype() {
        lacuna_ir::DType::F32 => 1e-4,
        _ => TOLERANCE,
    } * scale;
    for (i, (a, b)) in w.iter().zip(&g).enumerate() {
        if (a - b).abs() > tol || a.is_nan() != b.is_nan() {
            return Some(format!(
                "output `{name}` differs from the reference at entry {i}: {b} instead of {a}"
            ));
        }
    }
    None
}

/// Measures candidates in a `lacuna tune-worker` process.
pub struct ProcessMeasurer {
    command: Vec<std::ffi::OsString>,
    setup: WorkerSetup,
    timeout: Duration,
    worker: Option<WorkerProcess>,
    /// Seconds of one unscheduled run (from the first worker's reference run).
    pub reference_seconds: Option<f64>,
}

struct WorkerProcess {
    child: Child,
    stdin: ChildStdin,
    rx: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl WorkerProcess {
    fn kill(mut self) -> String {
        let _ = self.child.kill();
        let status = self.child.wait();
        describe_exit(status.ok())
    }
}

fn describe_exit(status: Option<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (_, Some(sig)) => {
                let name = match sig {
                    libc::SIGSEGV => " (SIGSEGV)",
                    libc::SIGBUS => " (SIGBUS)",
                    libc::SIGILL => " (SIGILL)",
                    libc::SIGABRT => " (SIGABRT)",
                    libc::SIGFPE => " (SIGFPE)",
                    libc::SIGKILL => " (SIGKILL)",
                    _ => "",
                };
                format!("killed by signal {sig}{name}")
            }
            (Some(c), None) => format!("exited with status {c}"),
            (None, None) => "ended".to_string(),
        },
        None => "ended".to_string(),
    }
}

impl ProcessMeasurer {
    /// A measurer starting workers with `command` (program and arguments; see
    /// [`worker_command`]) that speak the worker protocol on their stdin and stdout.
    pub fn new(
        command: Vec<std::ffi::OsString>,
        setup: WorkerSetup,
        timeout: Duration,
    ) -> ProcessMeasurer {
        ProcessMeasurer {
            command,
            setup,
            timeout,
            worker: None,
            reference_seconds: None,
        }
    }

    fn spawn(&mut self) -> Result<(), TuneError> {
        let Some((program, args)) = self.command.split_first() else {
            return Err(TuneError::Measure("no worker command".into()));
        };
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                TuneError::Measure(format!(
                    "cannot start the worker {}: {e}",
                    program.to_string_lossy()
                ))
            })?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            return Err(TuneError::Measure("worker pipes unavailable".into()));
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let tail = Arc::new(Mutex::new(String::new()));
        let tail2 = Arc::clone(&tail);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(mut t) = tail2.lock() {
                    *t = line;
                }
            }
        });
        let setup = serde_json::to_string(&self.setup).unwrap_or_default();
        writeln!(stdin, "{setup}")
            .and_then(|_| stdin.flush())
            .map_err(|e| TuneError::Measure(format!("worker setup: {e}")))?;
        let w = WorkerProcess {
            child,
            stdin,
            rx,
            stderr: tail,
        };
        // Loading the data and the reference run may take a while.
        let wait = self.timeout.max(Duration::from_secs(120));
        match w.rx.recv_timeout(wait) {
            Ok(line) => match serde_json::from_str::<FromWorker>(&line) {
                Ok(FromWorker::Ready { reference_seconds }) => {
                    self.reference_seconds.get_or_insert(reference_seconds);
                    self.worker = Some(w);
                    Ok(())
                }
                Ok(FromWorker::Fatal(m)) => {
                    w.kill();
                    Err(TuneError::Measure(m))
                }
                _ => {
                    w.kill();
                    Err(TuneError::Measure(format!(
                        "unexpected worker message: {line}"
                    )))
                }
            },
            Err(_) => {
                let tail = w.stderr.lock().map(|t| t.clone()).unwrap_or_default();
                let how = w.kill();
                Err(TuneError::Measure(format!(
                    "the worker did not get ready ({how}){}",
                    if tail.is_empty() {
                        String::new()
                    } else {
                        format!(": {tail}")
                    }
                )))
            }
        }
    }
}

impl Drop for ProcessMeasurer {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            w.kill();
        }
    }
}

impl Measurer for ProcessMeasurer {
    fn measure(
        &mut self,
        batch: &[Candidate],
        done: &mut dyn FnMut(&Candidate, Outcome) -> bool,
    ) -> Result<(), TuneError> {
        let mut remaining: Vec<Candidate> = batch.to_vec();
        while !remaining.is_empty() {
            if self.worker.is_none() {
                self.spawn()?;
            }
            let Some(w) = self.worker.as_mut() else {
                return Err(TuneError::Measure("no worker".into()));
            };
            let msg = ToWorker::Batch(
                remaining
                    .iter()
                    .map(|c| (c.trial, c.trace.clone()))
                    .collect(),
            );
            let line = serde_json::to_string(&msg).unwrap_or_default();
            if writeln!(w.stdin, "{line}")
                .and_then(|_| w.stdin.flush())
                .is_err()
            {
                // The worker is gone; a new one takes the batch.
                if let Some(w) = self.worker.take() {
                    w.kill();
                }
                continue;
            }
            let mut in_flight: Option<usize> = None;
            // Compiling the batch comes before the first `Start`.
            let mut wait = self.timeout.saturating_mul(remaining.len().max(1) as u32);
            while let Some(w) = self.worker.as_mut() {
                match w.rx.recv_timeout(wait) {
                    Ok(line) => match serde_json::from_str::<FromWorker>(&line) {
                        Ok(FromWorker::Start(t)) => {
                            in_flight = Some(t);
                            wait = self.timeout;
                        }
                        Ok(FromWorker::Done {
                            trial,
                            timing,
                            status,
                            detail,
                        }) => {
                            in_flight = None;
                            let Some(i) = remaining.iter().position(|c| c.trial == trial) else {
                                continue;
                            };
                            let c = remaining.remove(i);
                            let outcome = match timing {
                                Some(t) if status == Status::Ok => Outcome::Ok(t),
                                _ => Outcome::Failed {
                                    status,
                                    detail: detail.unwrap_or_default(),
                                },
                            };
                            if !done(&c, outcome) {
                                if let Some(w) = self.worker.take() {
                                    w.kill();
                                }
                                return Ok(());
                            }
                            if remaining.is_empty() {
                                break;
                            }
                        }
                        Ok(FromWorker::Fatal(m)) => {
                            if let Some(w) = self.worker.take() {
                                w.kill();
                            }
                            return Err(TuneError::Measure(m));
                        }
                        Ok(FromWorker::Ready { .. }) | Err(_) => {}
                    },
                    Err(e) => {
                        let timed_out = e == RecvTimeoutError::Timeout;
                        let Some(w) = self.worker.take() else { break };
                        let tail = w.stderr.lock().map(|t| t.clone()).unwrap_or_default();
                        let how = w.kill();
                        let (status, detail) = if timed_out {
                            (
                                Status::Timeout,
                                format!("no result within {:.1} s", wait.as_secs_f64()),
                            )
                        } else {
                            (
                                Status::Crashed,
                                if tail.is_empty() {
                                    format!("the worker was {how}")
                                } else {
                                    format!("the worker was {how}: {tail}")
                                },
                            )
                        };
                        // The candidate in flight failed; before any started, the whole batch
                        // (its compilation) did.
                        let failed: Vec<Candidate> = match in_flight {
                            Some(t) => remaining
                                .iter()
                                .position(|c| c.trial == t)
                                .map(|i| vec![remaining.remove(i)])
                                .unwrap_or_default(),
                            None => std::mem::take(&mut remaining),
                        };
                        for c in failed {
                            let go = done(
                                &c,
                                Outcome::Failed {
                                    status,
                                    detail: detail.clone(),
                                },
                            );
                            if !go {
                                return Ok(());
                            }
                        }
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Reads the inputs named on the command line.
pub fn load_inputs(pairs: &[(String, PathBuf)]) -> Result<BTreeMap<String, Input>, DriverError> {
    let mut m = BTreeMap::new();
    for (name, path) in pairs {
        m.insert(name.clone(), load_input(path)?);
    }
    Ok(m)
}

/// The template options of `lacuna tune` and Python's `lacuna.tune` on this host: `formats`
/// decompositions from the e-graph, and the host-dependent choices the built-in schedules
/// make too (scalar gathers where the host assembles them faster, SpMV's column panels from its
/// L2 and, where it sizes them so, its L3, SpMM's from its L2, SpMM's streamed rows where it
/// has streaming stores).
pub fn host_template_options(formats: usize) -> TemplateOptions {
    let host = driver::DataStats::host();
    TemplateOptions {
        formats,
        scalar_gathers: lacuna_target::host_assembles_gathers(),
        panels: driver::spmv_panel_widths(&host),
        row_panel_bytes: host.l2_bytes / 2,
        stream_rows: lacuna_target::host_stream_bytes()
            .map(|_| driver::spmm_stream_min_bytes(&host)),
        row_orders: true,
        ..Default::default()
    }
}

/// The task of tuning `p` on `inputs`, its template and the built-in schedule's trace.
pub fn prepare(
    p: &Program,
    inputs: &BTreeMap<String, Input>,
    params: &BTreeMap<String, i64>,
    threads: usize,
    opts: &TemplateOptions,
) -> Result<(Task, KernelTemplate, Vec<Instruction>), DriverError> {
    crate::driver::check_params(p, params)?;
    if lacuna_stage2::coiter::is_coiteration(p) {
        return Err(DriverError::Coiter(
            lacuna_stage2::coiter::CoiterError::Unsupported {
                what: "tuning co-iteration kernels (they take no schedule)".into(),
            },
        ));
    }
    let b = bind_with(p, inputs, params, lacuna_stage1::Bindings::default())?;
    let matrix = template::csr_buffer(p).and_then(|name| inputs.get(&name)?.coo());
    let stats = matrix.as_deref().and_then(coo_stats);
    // Equal values: the candidates may store one, as the built-in SpMV schedule does.
    let iso_values = matrix
        .as_deref()
        .is_some_and(|c| c.nnz() > 0 && driver::equal_values(&c.values));
    let opts = TemplateOptions {
        iso_values: opts.iso_values || iso_values,
        ..opts.clone()
    };
    let t = KernelTemplate::new(p, &b.params, stats.as_ref(), &opts);
    let width = p
        .iterations()
        .first()
        .and_then(|it| it.axes.last())
        .and_then(|a| p.axis(a))
        .and_then(|a| match &a.kind {
            lacuna_stage1::AxisKind::DenseFixed {
                n: lacuna_stage1::Size::Param(n),
            } => b.params.get(n).map(|&v| v as u64),
            _ => None,
        });
    let features = stats
        .as_ref()
        .map(|s| MatrixFeatures::of(s, width))
        .unwrap_or_default();
    let task = Task {
        kernel: p.name.clone(),
        kernel_hash: kernel_hash(p),
        data: data_signature(inputs),
        features,
        machine: Machine::host(),
        threads,
    };
    let baseline = driver::default_schedule(p, inputs)
        .map(|f| f.trace)
        .unwrap_or_default();
    Ok((task, t, baseline))
}

/// The best record of the database for `p` on `inputs` (this machine and `threads` first;
/// then other data of the kernel, nearest by matrix features), with a note when it is not an
/// exact match.
pub fn best_record(
    db: &Path,
    p: &Program,
    inputs: &BTreeMap<String, Input>,
    threads: Option<usize>,
) -> Result<(Record, Option<String>), TuneCliError> {
    let records = Database::new(db).load().map_err(TuneError::from)?;
    let kh = kernel_hash(p);
    let data = data_signature(inputs);
    let machine = Machine::host();
    if let Some(r) = lacuna_tuning::db::best(&records, &kh, &data, &machine, threads) {
        return Ok((r.clone(), None));
    }
    let features = template::csr_buffer(p)
        .and_then(|name| inputs.get(&name)?.coo().and_then(|c| coo_stats(&c)))
        .map(|s| MatrixFeatures::of(&s, None))
        .unwrap_or_default();
    let near = lacuna_tuning::db::similar(&records, &kh, &data, &features, 1);
    match near.first() {
        Some(r) => Ok((
            (*r).clone(),
            Some(format!(
                "no record of these inputs; using the best record of the most similar data ({})",
                r.data
            )),
        )),
        None => Err(TuneCliError::NoRecord {
            db: db.to_path_buf(),
            kernel: p.name.clone(),
        }),
    }
}

/// Errors of `lacuna tune` beyond the driver's.
#[derive(Debug, thiserror::Error)]
pub enum TuneCliError {
    /// Tuning failed.
    #[error(transparent)]
    Tune(#[from] TuneError),
    /// The driver failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// No record fits.
    #[error("{db}: no successful record of kernel `{kernel}`")]
    NoRecord {
        /// The database.
        db: PathBuf,
        /// The kernel.
        kernel: String,
    },
    /// A report file cannot be written.
    #[error("{path}: {message}")]
    Report {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// A progress bar: trials done, best time and speedup so far, on a bar of the budget.
pub struct Progress {
    bar: indicatif::ProgressBar,
    trials: usize,
    failed: usize,
}

impl Progress {
    /// A bar over `budget` seconds (hidden when stderr is not a terminal).
    pub fn new(budget: Duration) -> Progress {
        let bar = indicatif::ProgressBar::new(budget.as_secs().max(1));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} s  {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Progress {
            bar,
            trials: 0,
            failed: 0,
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Observer for Progress {
    fn trial(&mut self, r: &Record, best: Option<&Record>, baseline: Option<&Record>) {
        self.trials += 1;
        if !matches!(r.status, Status::Ok | Status::Invalid) {
            self.failed += 1;
        }
        self.bar.set_position(r.elapsed as u64);
        let best_s = best.and_then(|b| b.score);
        let base_s = baseline.and_then(|b| b.score);
        let speed = match (best_s, base_s) {
            (Some(b), Some(d)) => format!(" ({:.2}x the built-in schedule)", d / b),
            _ => String::new(),
        };
        self.bar.set_message(format!(
            "trials {} ({} failed), best {}{}",
            self.trials,
            self.failed,
            best_s.map_or("-".into(), |s| format!("{:.4} ms", s * 1e3)),
            speed
        ));
    }
}

/// Writes `--report DIR`: `convergence.svg`, `best.ron`, `records.jsonl` (the run's records)
/// and `summary.json`; each file atomically.
pub fn write_report(
    dir: &Path,
    summary: &lacuna_tuning::Summary,
    summary_json: &serde_json::Value,
) -> Result<(), TuneCliError> {
    let fail = |path: &Path, message: String| TuneCliError::Report {
        path: path.to_path_buf(),
        message,
    };
    std::fs::create_dir_all(dir).map_err(|e| fail(dir, e.to_string()))?;
    let write = |name: &str, text: &str| -> Result<(), TuneCliError> {
        lacuna_ir::io::write_atomic(&dir.join(name), text.as_bytes())
            .map_err(|e| TuneCliError::Driver(e.into()))
    };
    if let Some(best) = summary.best() {
        write("best.ron", &best.schedule().to_ron())?;
    }
    let lines: String = summary
        .records
        .iter()
        .filter_map(|r| serde_json::to_string(r).ok())
        .map(|l| l + "\n")
        .collect();
    write("records.jsonl", &lines)?;
    write(
        "summary.json",
        &serde_json::to_string_pretty(summary_json).unwrap_or_default(),
    )?;
    let svg = dir.join("convergence.svg");
    let tmp = dir.join(".convergence.svg.tmp");
    let title = format!(
        "{}: best time per trial ({} strategy)",
        summary.records.first().map_or("", |r| r.kernel.as_str()),
        summary.strategy.name()
    );
    lacuna_tuning::report::plot_svg(&summary.records, &title, &tmp).map_err(|m| fail(&svg, m))?;
    std::fs::rename(&tmp, &svg).map_err(|e| fail(&svg, e.to_string()))?;
    Ok(())
}

/// The JSON summary `lacuna tune` prints.
pub fn summary_json(s: &lacuna_tuning::Summary) -> serde_json::Value {
    use serde_json::json;
    let best = s.best();
    let base = s.baseline().and_then(|b| b.score);
    let invalid = s
        .records
        .iter()
        .filter(|r| r.status == Status::Invalid)
        .count();
    json!({
        "kernel": s.records.first().map(|r| r.kernel.clone()),
        "run": s.run,
        "resumed": s.resumed,
        "strategy": s.strategy.name(),
        "space_size": s.space_size.to_string(),
        "trials": s.trials(),
        "final_round": final_round_json(&s.records),
        "failed": s.failed(),
        "invalid": invalid,
        "stop": format!("{:?}", s.stop).to_lowercase(),
        "builtin_seconds": base,
        "best": best.map(|b| json!({
            "trial": b.trial,
            "seconds": b.score,
            "conversion_seconds": b.timing.map(|t| t.conversion),
            "final_round": b.final_round,
            "speedup_over_builtin": base.zip(b.score).map(|(d, t)| d / t),
            "decisions": b.decisions,
            "schedule": b.schedule().to_ron(),
        })),
        "trials_to_95_percent": lacuna_tuning::report::trials_to_reach(&s.records, 0.95),
    })
}

/// The final round in the summary: its finalists and how many of them failed in it (`null`
/// without one).
fn final_round_json(records: &[Record]) -> serde_json::Value {
    let verdicts: Vec<&Record> = records.iter().filter(|r| r.is_final()).collect();
    if verdicts.is_empty() {
        return serde_json::Value::Null;
    }
    serde_json::json!({
        "finalists": verdicts.len(),
        "failed": verdicts.iter().filter(|r| r.status != Status::Ok).count(),
    })
}

/// Parses `--strategy`.
pub fn parse_strategy(s: &str) -> Option<StrategyKind> {
    match s {
        "exhaustive" => Some(StrategyKind::Exhaustive),
        "random" => Some(StrategyKind::Random),
        "evolutionary" => Some(StrategyKind::Evolutionary),
        _ => None,
    }
}

/// Tuning options from the command line.
pub struct TuneRequest {
    /// The kernel file.
    pub kernel: PathBuf,
    /// `--format` pairs.
    pub formats: Vec<(String, String)>,
    /// Inputs.
    pub inputs: Vec<(String, PathBuf)>,
    /// Sizes.
    pub params: BTreeMap<String, i64>,
    /// The database.
    pub db: PathBuf,
    /// Threads of parallel loops.
    pub threads: usize,
    /// Options of the search.
    pub options: TuneOptions,
    /// `--strategy` when given (else chosen from the space).
    pub strategy: Option<StrategyKind>,
    /// What the template explores.
    pub template: TemplateOptions,
    /// Time limit of one candidate.
    pub timeout: Duration,
    /// Timing per candidate.
    pub min_seconds: f64,
    /// `--report DIR`.
    pub report: Option<PathBuf>,
    /// Show a progress bar.
    pub progress: bool,
    /// How to start a worker (default: [`worker_command`]).
    pub worker: Option<Vec<std::ffi::OsString>>,
}

/// The command starting a measurement worker: this executable with `tune-worker`.
pub fn worker_command() -> Result<Vec<std::ffi::OsString>, TuneError> {
    let exe = std::env::current_exe()
        .map_err(|e| TuneError::Measure(format!("cannot find this executable: {e}")))?;
    Ok(vec![exe.into_os_string(), "tune-worker".into()])
}

/// Runs `lacuna tune`: returns the JSON summary, and prints the table of the best schedules
/// to stderr.
pub fn run_tune(req: TuneRequest) -> Result<serde_json::Value, TuneCliError> {
    let p = load_kernel_with_formats(&req.kernel, &req.formats)?;
    let inputs = load_inputs(&req.inputs)?;
    let mut topts = req.template.clone();
    topts.parallel &= req.threads > 1;
    let (task, template, baseline) = prepare(&p, &inputs, &req.params, req.threads, &topts)?;
    let mut options = req.options.clone();
    options.strategy = req.strategy.unwrap_or_else(|| {
        // Exhaustive when the whole space fits comfortably in the trial limit.
        let hint = options.max_trials.unwrap_or(48);
        StrategyKind::for_space(lacuna_tuning::Template::space(&template), hint)
    });
    let command = match &req.worker {
        Some(c) => c.clone(),
        None => worker_command()?,
    };
    let setup = WorkerSetup {
        kernel: req.kernel.clone(),
        formats: req.formats.clone(),
        inputs: req.inputs.clone(),
        params: req.params.clone(),
        threads: req.threads,
        min_seconds: req.min_seconds,
        max_runs: 200,
    };
    let mut measurer = ProcessMeasurer::new(command, setup, req.timeout);
    let db = Database::new(&req.db);
    let mut progress = Progress::new(options.budget);
    if !req.progress {
        progress
            .bar
            .set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let summary = lacuna_tuning::tune(
        &template,
        &task,
        Some(baseline),
        &db,
        &mut measurer,
        &options,
        &mut progress,
    );
    progress.finish();
    let summary = summary?;
    let json = summary_json(&summary);
    eprint!(
        "{}",
        lacuna_tuning::report::table(
            &summary.records,
            summary.baseline().and_then(|b| b.score),
            5
        )
    );
    if let Some(dir) = &req.report {
        write_report(dir, &summary, &json)?;
    }
    Ok(json)
}
