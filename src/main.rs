//! The `lacuna` command line: run and lower sparse kernels.

use clap::{Parser, Subcommand, ValueEnum};
use lacuna::driver::{
    load_input, load_kernel, load_kernel_with_formats, write_output, DriverError, Target,
};
use lacuna::stage1::{print_program, Output};
use lacuna::stage2::{print_func, Config};
use lacuna::target::{compile_ptx, emit_llvm_ir, emit_nvptx_ir, CodegenOptions, GpuArch};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// Large arrays start on a cache line (see `lacuna::alloc`).
#[global_allocator]
static ALLOC: lacuna::alloc::CacheAligned = lacuna::alloc::CacheAligned;

#[derive(Parser)]
#[command(
    name = "lacuna",
    version,
    about = "A compiler for sparse tensor algebra"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum StageArg {
    /// Stage I: sparse iterations in coordinate space.
    #[value(name = "1")]
    One,
    /// Stage II: loops over buffers in position space.
    #[value(name = "2")]
    Two,
    /// Flat loops over 1-D arrays.
    Flat,
    /// LLVM IR (for the host, or NVPTX with `--target cuda:...`).
    Llvm,
    /// PTX assembly of the GPU kernel (`--target cuda:sm_80` or `cuda:sm_90`).
    Ptx,
}

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct TuneCmd {
    #[command(subcommand)]
    action: Option<TuneAction>,
    /// The kernel (RON).
    #[arg(required = true)]
    kernel: Option<PathBuf>,
    #[command(flatten)]
    data: DataArgs,
    /// The records database (JSON Lines; created if missing).
    #[arg(long, required = true)]
    db: Option<PathBuf>,
    /// Wall-clock seconds to search (a resumed run continues its count).
    #[arg(long, default_value_t = 60.0)]
    budget: f64,
    /// Continue the last run of this kernel and data in the database.
    #[arg(long)]
    resume: bool,
    /// Search strategy (default: exhaustive for spaces that fit the trial limit, else
    /// evolutionary).
    #[arg(long, value_parser = ["exhaustive", "random", "evolutionary"])]
    strategy: Option<String>,
    /// Write the convergence plot, the best schedule, the run's records and a summary here.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Rank by run time plus conversion time divided by N (the runs it is amortized over).
    #[arg(long, value_name = "N")]
    amortize: Option<f64>,
    /// Stop after this many trials.
    #[arg(long)]
    trials: Option<usize>,
    /// Candidates compiled together (in parallel) before being measured one at a time.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Seed of the strategy's random choices.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Seconds a candidate may run before its worker is killed and it is recorded as
    /// timed out.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Format decompositions (from the e-graph) to try besides the stored CSR.
    #[arg(long, default_value_t = 5)]
    decompositions: usize,
    /// Time each candidate for at least this many seconds (and at least 3 runs).
    #[arg(long, default_value_t = 0.05)]
    min_seconds: f64,
    /// Do not use earlier records (of this data or similar matrices) to start the search.
    #[arg(long)]
    no_warm_start: bool,
    /// Rounds of the final round: when the search stops, the best few candidates and the
    /// built-in schedule are measured again side by side this many times, and the median of
    /// each one's rounds decides the best (0: the search's single measurements decide). After
    /// the budget and the trial limit.
    #[arg(long, default_value_t = 3)]
    final_rounds: usize,
    /// Candidates of the final round besides the built-in schedule.
    #[arg(long, default_value_t = 3)]
    finalists: usize,
    /// Hide the progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Subcommand)]
enum TuneAction {
    /// Print the best recorded schedule (RON) for a kernel and data, or write it with --out.
    ApplyBest {
        /// The kernel (RON).
        kernel: PathBuf,
        #[command(flatten)]
        data: DataArgs,
        /// The records database.
        #[arg(long)]
        db: PathBuf,
        /// Write the schedule file here instead of printing it.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// Kernel data on the command line.
#[derive(clap::Args)]
struct DataArgs {
    /// An input buffer: NAME=FILE (.mtx, .tns or .npy).
    #[arg(long = "input", value_name = "NAME=FILE")]
    inputs: Vec<String>,
    /// A size parameter: NAME=VALUE.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    params: Vec<String>,
    /// Store an encoded buffer in another format: NAME=ENCODING.
    #[arg(long = "format", value_name = "NAME=ENCODING")]
    formats: Vec<String>,
    /// Worker threads for parallel loops (default: RAYON_NUM_THREADS, else every core).
    #[arg(long)]
    threads: Option<usize>,
}

/// Parsed [`DataArgs`].
struct Data {
    inputs: Vec<(String, PathBuf)>,
    params: BTreeMap<String, i64>,
    formats: Vec<(String, String)>,
    threads: usize,
}

impl DataArgs {
    fn parse(&self) -> Result<Data, CliError> {
        let inputs = self
            .inputs
            .iter()
            .map(|a| pair("--input", a).map(|(k, v)| (k, PathBuf::from(v))))
            .collect::<Result<Vec<_>, _>>()?;
        let params = parse_params(&self.params)?;
        let formats = self
            .formats
            .iter()
            .map(|f| pair("--format", f))
            .collect::<Result<Vec<_>, _>>()?;
        let threads = thread_count(self.threads)?;
        Ok(Data {
            inputs,
            params,
            formats,
            threads,
        })
    }
}

fn parse_params(args: &[String]) -> Result<BTreeMap<String, i64>, CliError> {
    let mut out = BTreeMap::new();
    for arg in args {
        let (name, value) = pair("--param", arg)?;
        let v = value.parse::<i64>().map_err(|_| CliError::BadParam {
            name: name.clone(),
            value: value.clone(),
        })?;
        out.insert(name, v);
    }
    Ok(out)
}

/// The worker threads: `--threads`, else `RAYON_NUM_THREADS`, else every core; the global
/// pool is built with that many.
fn thread_count(threads: Option<usize>) -> Result<usize, CliError> {
    let n = match threads {
        Some(0) => return Err(CliError::BadThreads),
        Some(n) => n,
        None => std::env::var("RAYON_NUM_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    if n > lacuna_target::MAX_THREADS {
        return Err(CliError::TooManyThreads { n });
    }
    let _ = lacuna_target::pool_builder(n).build_global();
    Ok(n)
}

#[derive(Subcommand)]
enum Command {
    /// Compile and run a kernel on data files; prints one JSON object.
    Run {
        /// The kernel (RON).
        kernel: PathBuf,
        /// An input buffer: NAME=FILE (.mtx, .tns or .npy).
        #[arg(long = "input", value_name = "NAME=FILE")]
        inputs: Vec<String>,
        /// A size parameter: NAME=VALUE.
        #[arg(long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
        /// An output to write: NAME=FILE (.npy, .mtx or .tns).
        #[arg(long = "out", value_name = "NAME=FILE")]
        outs: Vec<String>,
        /// Store an encoded buffer in another format: NAME=ENCODING (MLIR syntax or a preset
        /// such as csc, dcsr, coo, bsr(2,2), ell(4), 2:4).
        #[arg(long = "format", value_name = "NAME=ENCODING")]
        formats: Vec<String>,
        /// A schedule file (RON) to apply; `none` for no schedule at all. Without one, the JIT
        /// uses the built-in schedule (rows in parallel on large inputs).
        #[arg(long)]
        schedule: Option<PathBuf>,
        /// Where to run.
        #[arg(long, value_enum, default_value = "jit")]
        target: Target,
        /// Number of timed runs.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// Worker threads for parallel loops (default: RAYON_NUM_THREADS, else every core).
        #[arg(long)]
        threads: Option<usize>,
        /// Run the best schedule recorded for this kernel and data in a tuning database (see
        /// `lacuna tune`).
        #[arg(long, value_name = "DB", conflicts_with = "schedule")]
        tuned: Option<PathBuf>,
    },
    /// Search schedules and format decompositions for a kernel on data, measuring each
    /// candidate in an isolated worker process; every measurement is appended to a database.
    /// Prints a JSON summary (the table of the best schedules goes to stderr).
    Tune(TuneCmd),
    /// Measures candidates for `lacuna tune` (started by it; JSON lines on stdin/stdout).
    #[command(hide = true)]
    TuneWorker,
    /// Store a tensor in an encoding (MLIR syntax or a preset such as `csr`, `bsr(2,2)`).
    /// Prints MLIR's `sparse_tensor.print` layout with `--print`, a JSON summary otherwise.
    Convert {
        /// The tensor (.mtx, .tns or .npy).
        input: PathBuf,
        /// The target encoding: `map = (i, j) -> (...)` or a preset name.
        #[arg(long)]
        to: String,
        /// Print the storage as MLIR's `sparse_tensor.print` does.
        #[arg(long)]
        print: bool,
        /// Write the converted tensor's entries (.mtx, .tns or .npy).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Describe a tensor file: shape, nnz, whether its values are all equal, row lengths, the share of entries in the hottest 32768 columns, storage bytes per format (JSON).
    Info {
        /// The tensor (.mtx, .tns or .npy).
        input: PathBuf,
    },
    /// Write a dense array of uniform random values in [-1, 1) to a .npy file (or .mtx, .tns),
    /// reproducibly from a seed.
    GenDense {
        /// Extents, comma-separated (e.g. 1138,16).
        #[arg(long, value_delimiter = ',', required = true)]
        shape: Vec<usize>,
        /// Random seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Output file: .npy, or a Matrix Market array (.mtx) or FROSTT coordinates (.tns).
        #[arg(long)]
        out: PathBuf,
    },
    /// Benchmark kernels × matrices × formats × schedules × thread counts; prints JSON Lines,
    /// or with --compare a table of ratios against a previous run.
    Bench(lacuna::bench::BenchArgs),
    /// Print the kernel's IR at a stage.
    Lower {
        /// The kernel (RON).
        kernel: PathBuf,
        /// The stage to print.
        #[arg(long, value_enum, default_value = "2")]
        stage: StageArg,
        /// A schedule file (RON) to apply first.
        #[arg(long)]
        schedule: Option<PathBuf>,
        /// Print the IR after every pass (stage 2/flat) to stderr.
        #[arg(long)]
        print_after_all: bool,
        /// Code-generation target of `--stage llvm` and `--stage ptx`: `host` (default) or
        /// `cuda`, `cuda:sm_80`, `cuda:sm_90`.
        #[arg(long, default_value = "host")]
        target: String,
        /// With `--stage llvm` (an error with any other stage): print the IR as generated,
        /// before LLVM's optimization passes.
        #[arg(long)]
        unoptimized: bool,
    },
}

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error(transparent)]
    Bench(#[from] lacuna::bench::BenchError),
    #[error(transparent)]
    Tune(#[from] lacuna::tune::TuneCliError),
    #[error("{flag} expects NAME=VALUE, got `{arg}`")]
    BadPair { flag: &'static str, arg: String },
    #[error("the requested shape has too many elements for this machine")]
    TooLarge,
    #[error("--threads expects a positive number of worker threads")]
    BadThreads,
    #[error(
        "{n} worker threads (--threads or RAYON_NUM_THREADS) are more than the {} allowed",
        lacuna_target::MAX_THREADS
    )]
    TooManyThreads { n: usize },
    #[error("kernel `{kernel}` co-iterates sparse operands; GPU code generation does not support co-iteration kernels")]
    CoiterPtx { kernel: String },
    #[error("--param {name}: `{value}` is not an integer")]
    BadParam { name: String, value: String },
    #[error("{what}")]
    BadTuneOption { what: String },
    #[error("--unoptimized applies to --stage llvm only (the IR before LLVM's passes); the other stages have no LLVM passes to skip")]
    UnoptimizedStage,
}

fn pair(flag: &'static str, arg: &str) -> Result<(String, String), CliError> {
    match arg.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(CliError::BadPair {
            flag,
            arg: arg.to_string(),
        }),
    }
}

fn output_json(o: &Output) -> Value {
    json!({ "shape": o.shape(), "nnz": o.nnz(), "checksum": o.values().sum_f64() })
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Run {
            kernel,
            inputs,
            params,
            outs,
            formats,
            schedule,
            target,
            repeat,
            threads,
            tuned,
        } => {
            thread_count(threads)?;
            let no_schedule = schedule.as_deref() == Some(std::path::Path::new("none"));
            let schedule = schedule
                .as_deref()
                .filter(|_| !no_schedule)
                .map(lacuna::driver::load_schedule)
                .transpose()?;
            let formats = formats
                .iter()
                .map(|f| pair("--format", f))
                .collect::<Result<Vec<_>, _>>()?;
            let p = load_kernel_with_formats(&kernel, &formats)?;
            let mut input_data = BTreeMap::new();
            for arg in &inputs {
                let (name, file) = pair("--input", arg)?;
                input_data.insert(name, load_input(&PathBuf::from(file))?);
            }
            let param_values = parse_params(&params)?;
            let mut out_files = Vec::new();
            for arg in &outs {
                let (name, file) = pair("--out", arg)?;
                if !p
                    .buffers
                    .iter()
                    .any(|b| b.name == name && b.role == lacuna::stage1::Role::Output)
                {
                    return Err(DriverError::UnknownOutput {
                        name,
                        kernel: p.name.clone(),
                    }
                    .into());
                }
                out_files.push((name, PathBuf::from(file)));
            }
            let mut tuned_note = None;
            let schedule = match &tuned {
                Some(db) => {
                    let (r, note) = lacuna::tune::best_record(db, &p, &input_data, threads)?;
                    if let Some(n) = note {
                        eprintln!("note: {n}");
                    }
                    tuned_note = Some(format!(
                        "tuned: trial {} of run {} ({:.4} ms)",
                        r.trial,
                        r.run,
                        r.score.unwrap_or(f64::NAN) * 1e3
                    ));
                    Some(r.schedule())
                }
                None => schedule,
            };
            let default = match (&schedule, target) {
                (None, Target::Jit) if !no_schedule => {
                    lacuna::driver::default_schedule(&p, &input_data)
                }
                _ => None,
            };
            // On a worker of the pool, so that parallel sections see it as one of theirs: it runs
            // a chunk, the other workers the rest (from outside, it would be one thread more
            // than the pool's, and than the CPUs, while workers spin between sections).
            let report = rayon::scope(|_| {
                lacuna::driver::run_kernel_scheduled(
                    &p,
                    schedule.as_ref().or(default.as_ref()),
                    &input_data,
                    &param_values,
                    target,
                    repeat,
                )
            })?;
            for (name, file) in &out_files {
                write_output(name, &report.outputs[name], file)?;
            }
            let mut times = report.run_seconds.clone();
            let min = times.iter().copied().fold(f64::INFINITY, f64::min);
            let checksum: f64 = report.outputs.values().map(|o| o.values().sum_f64()).sum();
            let outputs: serde_json::Map<String, Value> = report
                .outputs
                .iter()
                .map(|(k, o)| (k.clone(), output_json(o)))
                .collect();
            let obj = json!({
                "kernel": p.name,
                "target": target.name(),
                "compile_seconds": report.compile_seconds,
                "conversion_seconds": report.conversion_seconds,
                "preprocess_seconds": report.preprocess_seconds,
                "run_seconds": { "min": min, "median": median(&mut times) },
                "repeat": report.run_seconds.len(),
                "schedule": match (&schedule, &default) {
                    (Some(_), _) if tuned_note.is_some() => json!(tuned_note),
                    (Some(_), _) => json!("given"),
                    (None, Some(d)) => json!(format!("built-in: {}", d.to_ron_line())),
                    (None, None) => json!(null),
                },
                "checksum": checksum,
                "params": report.params,
                "outputs": outputs,
            });
            println!("{obj}");
        }
        Command::Convert {
            input,
            to,
            print,
            out,
        } => {
            let tensor = lacuna::driver::convert_file(&input, &to)?;
            if let Some(out) = &out {
                lacuna::driver::write_output("converted", &Output::Coo(tensor.to_coo()), out)?;
            }
            if print {
                print!("{}", tensor.print());
            } else {
                println!(
                    "{}",
                    json!({
                        "input": input,
                        "encoding": tensor.encoding().to_string(),
                        "dim": tensor.dim_shape(),
                        "lvl": tensor.lvl_shape(),
                        "nse": tensor.number_of_entries(),
                        "storage_bytes": lacuna::driver::storage_bytes(&tensor),
                    })
                );
            }
        }
        Command::Info { input } => {
            println!("{}", lacuna::driver::info(&input)?);
        }
        Command::GenDense { shape, seed, out } => {
            let arr = lacuna::bench::random_dense(&shape, seed).ok_or(CliError::TooLarge)?;
            write_output("gen-dense", &Output::Dense(arr), &out)?;
            println!("{}", json!({ "shape": shape, "seed": seed, "out": out }));
        }
        Command::Bench(args) => lacuna::bench::main(&args)?,
        Command::TuneWorker => lacuna::tune::worker_main()?,
        Command::Tune(cmd) => match cmd.action {
            Some(TuneAction::ApplyBest {
                kernel,
                data,
                db,
                out,
            }) => {
                let d = data.parse()?;
                let p = load_kernel_with_formats(&kernel, &d.formats)?;
                let inputs = lacuna::tune::load_inputs(&d.inputs)?;
                let (r, note) = lacuna::tune::best_record(&db, &p, &inputs, data.threads)?;
                if let Some(n) = note {
                    eprintln!("note: {n}");
                }
                let text = r.schedule().to_ron();
                match out {
                    Some(path) => {
                        lacuna::ir::io::write_atomic(&path, text.as_bytes())
                            .map_err(DriverError::from)?;
                        println!(
                            "{}",
                            json!({ "schedule": path, "trial": r.trial, "run": r.run,
                                    "seconds": r.score, "decisions": r.decisions })
                        );
                    }
                    None => print!("{text}"),
                }
            }
            None => {
                let d = cmd.data.parse()?;
                let bad = |what: &str| CliError::BadTuneOption {
                    what: what.to_string(),
                };
                if !(cmd.budget.is_finite() && cmd.budget > 0.0) {
                    return Err(bad("--budget expects a positive number of seconds"));
                }
                if !(cmd.timeout.is_finite() && cmd.timeout > 0.0) {
                    return Err(bad("--timeout expects a positive number of seconds"));
                }
                if cmd.amortize.is_some_and(|n| !(n.is_finite() && n >= 1.0)) {
                    return Err(bad("--amortize expects a number of runs (at least 1)"));
                }
                if cmd.batch == 0 {
                    return Err(bad("--batch expects at least 1"));
                }
                let req = lacuna::tune::TuneRequest {
                    kernel: cmd.kernel.unwrap_or_default(),
                    formats: d.formats,
                    inputs: d.inputs,
                    params: d.params,
                    db: cmd.db.unwrap_or_default(),
                    threads: d.threads,
                    options: lacuna::tuning::TuneOptions {
                        strategy: lacuna::tuning::StrategyKind::Evolutionary,
                        budget: std::time::Duration::from_secs_f64(cmd.budget),
                        max_trials: cmd.trials,
                        batch: cmd.batch,
                        seed: cmd.seed,
                        amortize: cmd.amortize,
                        resume: cmd.resume,
                        warm_start: !cmd.no_warm_start,
                        final_rounds: cmd.final_rounds,
                        finalists: cmd.finalists,
                    },
                    strategy: cmd
                        .strategy
                        .as_deref()
                        .and_then(lacuna::tune::parse_strategy),
                    template: lacuna::tune::host_template_options(cmd.decompositions),
                    timeout: std::time::Duration::from_secs_f64(cmd.timeout),
                    min_seconds: cmd.min_seconds,
                    report: cmd.report,
                    progress: !cmd.quiet,
                    worker: None,
                };
                println!("{}", lacuna::tune::run_tune(req)?);
            }
        },
        Command::Lower {
            kernel,
            stage,
            schedule,
            print_after_all,
            target,
            unoptimized,
        } => {
            if unoptimized && !matches!(stage, StageArg::Llvm) {
                return Err(CliError::UnoptimizedStage);
            }
            let llvm_opts = CodegenOptions {
                optimized_ir: !unoptimized,
                ..CodegenOptions::default()
            };
            let gpu = match (target.as_str(), stage) {
                ("host", StageArg::Ptx) => Some(GpuArch::Sm80),
                ("host", _) => None,
                (t, _) => Some(GpuArch::from_target(t).map_err(DriverError::from)?),
            };
            let p = load_kernel(&kernel)?;
            if lacuna::stage2::coiter::is_coiteration(&p) {
                let k = lacuna::stage2::coiter::CoKernel::new(&p).map_err(DriverError::from)?;
                // The count and compute passes, then the one-pass function (where the kernel
                // has one), which runs instead of them on up to two threads.
                let funcs: Vec<&lacuna::stage2::Func> = k
                    .count
                    .iter()
                    .chain(std::iter::once(&k.compute))
                    .chain(k.one_pass.iter())
                    .collect();
                match stage {
                    StageArg::One => {
                        print!("{}", print_program(&p));
                        print!("// merge lattices\n{}", k.lattices());
                    }
                    StageArg::Two | StageArg::Flat => {
                        for f in funcs {
                            print!("{}", print_func(f));
                        }
                    }
                    StageArg::Ptx => {
                        return Err(CliError::CoiterPtx {
                            kernel: p.name.clone(),
                        })
                    }
                    StageArg::Llvm if gpu.is_some() => {
                        return Err(CliError::CoiterPtx {
                            kernel: p.name.clone(),
                        })
                    }
                    StageArg::Llvm => {
                        for f in funcs {
                            print!(
                                "{}",
                                emit_llvm_ir(f, &llvm_opts).map_err(DriverError::from)?
                            );
                        }
                    }
                }
                return Ok(());
            }
            let mut hook = |name: &str, f: &lacuna::stage2::Func| {
                if print_after_all {
                    eprintln!("// ---- after {name} ----\n{}", print_func(f));
                }
            };
            let schedule = schedule
                .as_deref()
                .map(lacuna::driver::load_schedule)
                .transpose()?;
            let (p, stage2, pre) = match &schedule {
                None => (
                    p.clone(),
                    lacuna::stage2::lower_to_stage2(&p, &mut hook).map_err(DriverError::from)?,
                    None,
                ),
                Some(file) => {
                    let s = lacuna::schedule::Schedule::replay(&p, &file.trace)
                        .map_err(DriverError::from)?;
                    (
                        s.program().clone(),
                        s.stage2().map_err(DriverError::from)?,
                        s.preprocess().map(|x| x.func.clone()),
                    )
                }
            };
            // The preprocessing function (`ExtractPreprocess`) prints after the kernel.
            let pre_text = |flat: bool| -> Result<String, DriverError> {
                Ok(match &pre {
                    None => String::new(),
                    Some(f) if flat => format!(
                        "\n{}",
                        print_func(&lacuna::stage2::lower_to_flat(
                            f.clone(),
                            &Config::default(),
                            &mut |_, _| {}
                        )?)
                    ),
                    Some(f) => format!("\n{}", print_func(f)),
                })
            };
            let flat = || {
                lacuna::stage2::lower_to_flat(stage2.clone(), &Config::default(), &mut |_, _| {})
                    .map_err(DriverError::from)
            };
            match stage {
                StageArg::One => print!("{}", print_program(&p)),
                StageArg::Two => print!("{}{}", print_func(&stage2), pre_text(false)?),
                StageArg::Flat => print!("{}{}", print_func(&flat()?), pre_text(true)?),
                StageArg::Llvm => match gpu {
                    None => print!(
                        "{}",
                        emit_llvm_ir(&flat()?, &llvm_opts).map_err(DriverError::from)?
                    ),
                    Some(arch) => print!(
                        "{}",
                        emit_nvptx_ir(&flat()?, arch, &llvm_opts).map_err(DriverError::from)?
                    ),
                },
                StageArg::Ptx => {
                    let k =
                        compile_ptx(&flat()?, gpu.unwrap_or(GpuArch::Sm80), &Default::default())
                            .map_err(DriverError::from)?;
                    print!("{}", k.ptx);
                }
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
