//! `lacuna bench`: timed runs of kernels × matrices × formats × schedules × thread counts,
//! written as JSON Lines, and the comparison of two such runs (`--compare`).
//!
//! Each configuration is compiled once (kernel × format × schedule), its inputs are converted
//! and bound once (matrix × feature width `k`), then it runs once to warm up and `--repeat`
//! times timed, the outputs reset between runs outside the timer. Matrices come from `.mtx`
//! files or are generated from a seed (`--gen er:ROWS:NNZ_PER_ROW`); the dense inputs are
//! generated from the seed too, exactly as `lacuna gen-dense` does, so every run is
//! reproducible from its command line.

use crate::driver::{self, DriverError, Executable, Target};
use clap::Args;
use lacuna_ir::{ArrayData, CooTensor, DenseArray};
use lacuna_schedule::ScheduleFile;
use lacuna_stage1::{bind_with, unpack, Bindings, Input, Program, Role};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Anything that can go wrong in `lacuna bench`.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A generated dense input does not fit in this machine's memory.
    #[error("generated input `{name}` of shape {shape:?} is too large for this machine")]
    TooLarge {
        /// The input.
        name: String,
        /// Its shape.
        shape: Vec<usize>,
    },
    /// Loading, compiling, binding or running failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// One configuration failed; names it.
    #[error("{config}: {source}")]
    Config {
        /// The configuration (kernel, format, schedule, matrix).
        config: String,
        /// The cause.
        source: DriverError,
    },
    /// A kernel name that `lacuna bench` does not know.
    #[error("unknown kernel `{name}` (known: {known})")]
    UnknownKernel {
        /// The name given.
        name: String,
        /// The names known.
        known: String,
    },
    /// A `--gen` spec that does not parse.
    #[error("--gen `{spec}`: {why} (expected er:ROWS:NNZ_PER_ROW or er:ROWS:COLS:NNZ_PER_ROW)")]
    BadGen {
        /// The spec given.
        spec: String,
        /// What is wrong.
        why: String,
    },
    /// A count that must be positive is zero.
    #[error("{flag} must be at least 1")]
    Zero {
        /// The flag.
        flag: &'static str,
    },
    /// More worker threads than `lacuna_target::MAX_THREADS`.
    #[error("--threads {n}: at most {} worker threads", lacuna_target::MAX_THREADS)]
    TooManyThreads {
        /// The count asked for.
        n: usize,
    },
    /// A negative or infinite `--min-time`.
    #[error("--min-time must be a finite number of seconds >= 0, got {value}")]
    MinTime {
        /// The value given.
        value: f64,
    },
    /// A matrix file holds a tensor of another rank.
    #[error("{path}: expected a matrix, found a tensor of rank {rank}")]
    NotMatrix {
        /// The file.
        path: PathBuf,
        /// Its rank.
        rank: usize,
    },
    /// Nothing to benchmark.
    #[error("no matrices: give .mtx files or --gen SPEC")]
    NoMatrices,
    /// A results file cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line of a results file is not a benchmark record.
    #[error("{path}:{line}: not a benchmark record: {message}")]
    BadRecord {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Two results files have no configuration in common.
    #[error("{base} and {new} have no configuration in common (kernel, matrix, k, format, schedule, threads, target)")]
    NothingInCommon {
        /// The base file.
        base: PathBuf,
        /// The new file (or `this run`).
        new: String,
    },
    /// A GPU target with a schedule that binds no GPU threads.
    #[error("--target {target} runs GPU schedules: `--schedule {schedule}` is a CPU schedule (give a GPU schedule file, e.g. examples/schedules/spmm_gpu_naive.ron)")]
    GpuSchedule {
        /// The target.
        target: String,
        /// The schedule given (or the default, `builtin`).
        schedule: String,
    },
    /// Standard output cannot be written.
    #[error("writing the results: {0}")]
    Stdout(std::io::Error),
    /// The worker pool cannot be built.
    #[error("cannot start the worker threads: {0}")]
    Threads(String),
}

/// The arguments of `lacuna bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Matrices to run on (.mtx files).
    #[arg(value_name = "MATRIX.mtx")]
    pub matrices: Vec<PathBuf>,
    /// A generated matrix: `er:ROWS:NNZ_PER_ROW` (square) or `er:ROWS:COLS:NNZ_PER_ROW`, each
    /// row with NNZ_PER_ROW uniform random columns (duplicates merged), values in [-1, 1);
    /// sizes take k/m suffixes (er:1m:10). Repeatable.
    #[arg(long = "gen", value_name = "SPEC")]
    pub gens: Vec<String>,
    /// Seed of the generated matrices; the dense inputs use SEED+1, SEED+2, ... in the
    /// kernel's buffer order (as `lacuna gen-dense --seed`).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Kernels, comma-separated: spmv, spmm, sddmm.
    #[arg(long, value_delimiter = ',', default_value = "spmv,spmm,sddmm")]
    pub kernels: Vec<String>,
    /// A storage format of the sparse operand: `csr` (the SparseTIR-style kernels of
    /// examples/), or any encoding or preset (`csc`, `bsr(2,2)`, `ell(8)`, MLIR syntax), run
    /// with the kernels of examples/formats/. Repeatable; default csr.
    #[arg(long = "format", value_name = "ENCODING")]
    pub formats: Vec<String>,
    /// A schedule file (RON) to apply, `none`, or `builtin` (the schedule `lacuna run` uses
    /// without one, chosen from each matrix's statistics: rows in parallel balanced by nnz on
    /// large inputs, SpMM register blocking, SDDMM vector lanes). Repeatable; default builtin. A schedule
    /// file runs only with the kernel it names.
    #[arg(long = "schedule", value_name = "FILE|none")]
    pub schedules: Vec<String>,
    /// Thread counts, comma-separated: parallel loops run on a pool of that many workers
    /// (`threads_used` is 1 for kernels without parallel loops).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub threads: Vec<usize>,
    /// Feature widths for spmm and sddmm, comma-separated.
    #[arg(long = "k", value_delimiter = ',', default_value = "32")]
    pub ks: Vec<usize>,
    /// Timed runs per configuration (after one warm-up run).
    #[arg(long, default_value_t = 10)]
    pub repeat: usize,
    /// Keep repeating until the timed runs add up to this many seconds (at most 1000 runs;
    /// at least --repeat).
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    pub min_time: f64,
    /// Where the kernels run: `jit` (the host CPU), `cuda` / `cuda:sm_80` / `cuda:sm_90` (a CUDA
    /// GPU: `run_s` are CUDA events around the launches, without the copies between host and
    /// device), or an interpreter (`interp`, `interp-stage1`, `interp-gpu`: GPU semantics on the
    /// CPU). GPU targets need GPU schedule files (examples/schedules/*_gpu*.ron): the built-in
    /// schedules are the CPU's.
    #[arg(long, value_enum, default_value = "jit")]
    pub target: Target,
    /// Write the JSON Lines to this file (atomically) instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Compare against a previous run: print new/base ratios of run_s_min per configuration
    /// and their geometric mean. The new results are this run's, or `--new FILE`'s.
    #[arg(long, value_name = "BASE.jsonl")]
    pub compare: Option<PathBuf>,
    /// With --compare: take the new results from this file instead of running.
    #[arg(long = "new", value_name = "NEW.jsonl", requires = "compare")]
    pub new: Option<PathBuf>,
}

/// One benchmark result: one line of the JSON Lines output.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Record {
    /// Kernel name.
    pub kernel: String,
    /// Matrix name (file stem, or the generator spec and seed).
    pub matrix: String,
    /// Rows of the matrix.
    pub rows: usize,
    /// Columns of the matrix.
    pub cols: usize,
    /// Stored entries of the matrix (duplicates summed).
    pub nnz: usize,
    /// Feature width (spmm, sddmm); null for spmv.
    pub k: Option<usize>,
    /// Storage format of the sparse operand.
    pub format: String,
    /// Schedule file as given, or `none`.
    pub schedule: String,
    /// Requested thread count (exported as RAYON_NUM_THREADS).
    pub threads: usize,
    /// Where the kernel ran (`jit`, `cuda:sm_90`, ...; see `--target`); `jit` in records
    /// written before the field existed.
    #[serde(default = "jit_name")]
    pub target: String,
    /// Threads the kernel actually ran on: the JIT has no parallel runtime yet, so 1.
    pub threads_used: usize,
    /// Seconds to lower and JIT-compile.
    pub compile_s: f64,
    /// Seconds to convert and bind the inputs (format conversion), once per matrix.
    pub convert_s: f64,
    /// Seconds of the extracted preprocessing function (`extract_preprocess`: coordinate
    /// searches, `preprocess` iterations), once per matrix, not part of the timed runs; 0
    /// without one.
    #[serde(default)]
    pub preprocess_s: f64,
    /// Fastest timed run, seconds.
    pub run_s_min: f64,
    /// Median timed run, seconds.
    pub run_s_median: f64,
    /// Useful floating-point operations per run (2·nnz·k; 2·nnz for spmv).
    pub flops: f64,
    /// GFLOP/s at the fastest run.
    pub gflops: f64,
    /// Minimal traffic per run: every input array read once, every output written once.
    pub bytes: usize,
    /// GB/s of that traffic at the fastest run.
    pub gbps: f64,
    /// Sum of all output values of the last run.
    pub checksum: f64,
    /// Number of timed runs.
    pub repeats: usize,
    /// With `--schedule builtin`: the schedule file the built-in schedule chose for this data
    /// (RON on one line; an empty trace where it chose none), so that a run can be reproduced
    /// or varied with `--schedule FILE`. Absent for other schedules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builtin_schedule: Option<String>,
}

fn jit_name() -> String {
    Target::Jit.name().to_string()
}

/// The dimensions of a dense input, in terms of the matrix and the feature width.
#[derive(Clone, Copy, Debug)]
enum Dim {
    Rows,
    Cols,
    K,
}

/// A kernel `lacuna bench` knows how to feed.
struct KernelDef {
    name: &'static str,
    /// The SparseTIR-style kernel over sparse axes (format `csr`).
    plain: &'static str,
    /// The kernel written over dimensions, sparse operands declared by an encoding.
    encoded: &'static str,
    /// The sparse input, which takes the matrix.
    sparse: &'static str,
    /// Buffers whose encoding follows `--format` (the sparse input, and sparse outputs).
    formatted: &'static [&'static str],
    /// Dense inputs in order, with their shapes.
    dense: &'static [(&'static str, &'static [Dim])],
    /// Whether the kernel has a feature width.
    uses_k: bool,
}

const KERNELS: &[KernelDef] = &[
    KernelDef {
        name: "spmv",
        plain: include_str!("../examples/spmv.ron"),
        encoded: include_str!("../examples/formats/spmv.ron"),
        sparse: "A",
        formatted: &["A"],
        dense: &[("x", &[Dim::Cols])],
        uses_k: false,
    },
    KernelDef {
        name: "spmm",
        plain: include_str!("../examples/spmm.ron"),
        encoded: include_str!("../examples/formats/spmm.ron"),
        sparse: "A",
        formatted: &["A"],
        dense: &[("B", &[Dim::Cols, Dim::K])],
        uses_k: true,
    },
    KernelDef {
        name: "sddmm",
        plain: include_str!("../examples/sddmm.ron"),
        encoded: include_str!("../examples/formats/sddmm.ron"),
        sparse: "S",
        formatted: &["S", "C"],
        dense: &[("X", &[Dim::Rows, Dim::K]), ("W", &[Dim::Cols, Dim::K])],
        uses_k: true,
    },
];

fn kernel_def(name: &str) -> Result<&'static KernelDef, BenchError> {
    KERNELS
        .iter()
        .find(|k| k.name == name)
        .ok_or_else(|| BenchError::UnknownKernel {
            name: name.to_string(),
            known: KERNELS
                .iter()
                .map(|k| k.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// A matrix to benchmark on.
#[derive(Clone, Debug)]
pub struct Matrix {
    /// Its name in the records.
    pub name: String,
    /// Its entries: sorted, duplicates summed, f64 values.
    pub coo: CooTensor,
    /// Its statistics, counted once for every built-in schedule compiled for it.
    pub stats: driver::MatrixProfile,
}

impl Matrix {
    /// Reads a matrix file (.mtx; .tns and .npy of rank 2 work too); named by the file stem.
    pub fn load(path: &Path) -> Result<Matrix, BenchError> {
        let coo = driver::load_coo(path)?;
        if coo.shape.len() != 2 {
            return Err(BenchError::NotMatrix {
                path: path.to_path_buf(),
                rank: coo.shape.len(),
            });
        }
        let name = path.file_stem().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into(),
        );
        Ok(Matrix::new(name, coo))
    }

    /// A generated matrix from a `--gen` spec and a seed.
    pub fn generate(spec: &str, seed: u64) -> Result<Matrix, BenchError> {
        let g = GenSpec::parse(spec)?;
        let name = format!("er-{}x{}-d{}-s{}", g.rows, g.cols, g.per_row, seed);
        Ok(Matrix::new(name, gen_er(g.rows, g.cols, g.per_row, seed)))
    }

    fn new(name: String, mut coo: CooTensor) -> Matrix {
        coo.sort_and_sum_duplicates();
        coo.values = ArrayData::F64(coo.values.to_f64_vec());
        let stats = driver::MatrixProfile::of(&coo);
        Matrix { name, coo, stats }
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.coo.shape[0]
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.coo.shape[1]
    }
}

/// A parsed `--gen` spec: `er:ROWS:NNZ_PER_ROW` or `er:ROWS:COLS:NNZ_PER_ROW`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenSpec {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Random columns drawn per row (before merging duplicates).
    pub per_row: usize,
}

impl GenSpec {
    /// Parses a spec; sizes take `k` (10³) and `m` (10⁶) suffixes.
    pub fn parse(spec: &str) -> Result<GenSpec, BenchError> {
        let bad = |why: String| BenchError::BadGen {
            spec: spec.to_string(),
            why,
        };
        let parts: Vec<&str> = spec.split(':').collect();
        if parts[0] != "er" {
            return Err(bad(format!("unknown generator `{}` (known: er)", parts[0])));
        }
        let nums = parts[1..]
            .iter()
            .map(|s| parse_size(s).ok_or_else(|| bad(format!("`{s}` is not a size"))))
            .collect::<Result<Vec<usize>, _>>()?;
        let (rows, cols, per_row) = match nums[..] {
            [r, d] => (r, r, d),
            [r, c, d] => (r, c, d),
            _ => return Err(bad("expected 2 or 3 sizes".into())),
        };
        if rows == 0 || cols == 0 || per_row == 0 {
            return Err(bad("sizes must be at least 1".into()));
        }
        match rows.checked_mul(per_row) {
            Some(n) if n <= 1 << 31 => {}
            _ => return Err(bad("more than 2^31 entries".into())),
        }
        Ok(GenSpec {
            rows,
            cols,
            per_row,
        })
    }
}

fn parse_size(s: &str) -> Option<usize> {
    let (digits, scale) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1_000),
        b'm' | b'M' => (&s[..s.len() - 1], 1_000_000),
        _ => (s, 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(scale)
}

/// A uniform random matrix: each row draws `per_row` columns uniformly from `0..cols`
/// (duplicates merged), with values uniform in [-1, 1). Deterministic in `seed`.
pub fn gen_er(rows: usize, cols: usize, per_row: usize, seed: u64) -> CooTensor {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let cap = rows.saturating_mul(per_row);
    let (mut r, mut c, mut v) = (
        Vec::with_capacity(cap),
        Vec::with_capacity(cap),
        Vec::with_capacity(cap),
    );
    let mut row = Vec::with_capacity(per_row);
    for i in 0..rows {
        row.clear();
        row.extend((0..per_row).map(|_| rng.random_range(0..cols)));
        row.sort_unstable();
        row.dedup();
        for &j in &row {
            r.push(i);
            c.push(j);
            v.push(rng.random_range(-1.0..1.0));
        }
    }
    CooTensor {
        shape: vec![rows, cols],
        coords: vec![r, c],
        values: ArrayData::F64(v),
    }
}

/// A dense f64 array of uniform values in [-1, 1): the same values as `lacuna gen-dense
/// --shape SHAPE --seed SEED`.
pub fn random_dense(shape: &[usize], seed: u64) -> Option<DenseArray> {
    let len = shape.iter().try_fold(1usize, |a, &b| a.checked_mul(b))?;
    let mut data: Vec<f64> = Vec::new();
    // Fallible: a width such as `--k 100000000000` is an error, not an abort.
    data.try_reserve_exact(len).ok()?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    data.extend((0..len).map(|_| rng.random_range(-1.0..1.0)));
    Some(DenseArray {
        shape: shape.to_vec(),
        data: ArrayData::F64(data),
    })
}

/// A kernel compiled for one format and schedule.
pub struct Compiled {
    def: &'static KernelDef,
    /// Where it runs.
    pub target: Target,
    /// The format name.
    pub format: String,
    /// The program after the schedule's stage-I primitives (inputs bind to this one).
    pub program: Program,
    exe: Executable,
    conversions: Vec<lacuna_schedule::Conversion>,
    /// Seconds to lower and compile.
    pub compile_s: f64,
    /// The built-in schedule chosen, in RON on one line, where it was asked for (see
    /// [`Record::builtin_schedule`]).
    pub builtin_schedule: Option<String>,
}

/// The kernel name standing for "the built-in schedule of each kernel" (`--schedule builtin`).
const BUILTIN: &str = "<builtin>";

/// Loads a kernel by name (`spmv`, `spmm`, `sddmm`) with its sparse operand stored in `format`
/// (`csr`: the kernels over sparse axes), applies `schedule` and builds it for `target`. The built-in
/// schedule (`--schedule builtin`) is `lacuna run`'s for data with `data`'s stored entries and
/// feature width when given (see [`driver::builtin_schedule`]), rows in parallel otherwise.
pub fn compile_kernel(
    kernel: &str,
    format: &str,
    schedule: Option<&ScheduleFile>,
    data: Option<driver::DataStats>,
    target: Target,
) -> Result<Compiled, BenchError> {
    let def = kernel_def(kernel)?;
    let p = if format == "csr" {
        driver::parse_kernel_with_formats(
            def.plain,
            Path::new(&format!("examples/{}.ron", def.name)),
            &[],
        )?
    } else {
        let formats: Vec<(String, String)> = def
            .formatted
            .iter()
            .map(|b| (b.to_string(), format.to_string()))
            .collect();
        driver::parse_kernel_with_formats(
            def.encoded,
            Path::new(&format!("examples/formats/{}.ron", def.name)),
            &formats,
        )?
    };
    let t = Instant::now();
    let is_builtin = schedule.is_some_and(|s| s.kernel == BUILTIN);
    let builtin = if is_builtin {
        match data {
            Some(stats) => driver::builtin_schedule(&p, &stats),
            None => driver::parallel_rows_schedule(&p),
        }
    } else {
        None
    };
    let schedule = if is_builtin {
        builtin.as_ref()
    } else {
        schedule
    };
    let builtin_schedule = is_builtin.then(|| match schedule {
        Some(s) => s.to_ron_line(),
        None => ScheduleFile {
            version: 1,
            kernel: p.name.clone(),
            trace: Vec::new(),
        }
        .to_ron_line(),
    });
    let (program, exe, conversions) = Executable::build_converting(&p, schedule, target)?;
    Ok(Compiled {
        builtin_schedule,
        def,
        target,
        format: format.to_string(),
        program,
        exe,
        conversions,
        compile_s: t.elapsed().as_secs_f64(),
    })
}

/// A compiled kernel bound to its inputs, ready to run.
pub struct Prepared<'a> {
    compiled: &'a Compiled,
    /// Everything the kernel reads and writes, as `run_preprocess` (which validated it) left it:
    /// private, since the runs trust it (see [`Prepared::bindings`]).
    bindings: Bindings,
    /// Seconds to convert and bind the inputs.
    pub convert_s: f64,
    /// Seconds of the preprocessing function (run once here, not by the timed runs).
    pub preprocess_s: f64,
    /// Useful floating-point operations per run.
    pub flops: f64,
    /// Minimal traffic per run in bytes.
    pub bytes: usize,
}

impl Compiled {
    /// The dense inputs of this kernel for a matrix of `rows`×`cols` and feature width `k`,
    /// generated from SEED+1, SEED+2, ... in order.
    pub fn dense_inputs(
        &self,
        rows: usize,
        cols: usize,
        k: usize,
        seed: u64,
    ) -> Result<BTreeMap<String, Input>, BenchError> {
        self.def
            .dense
            .iter()
            .enumerate()
            .map(|(i, (name, dims))| {
                let shape: Vec<usize> = dims
                    .iter()
                    .map(|d| match d {
                        Dim::Rows => rows,
                        Dim::Cols => cols,
                        Dim::K => k,
                    })
                    .collect();
                let s = seed.wrapping_add(1 + i as u64);
                let dense = random_dense(&shape, s).ok_or_else(|| BenchError::TooLarge {
                    name: name.to_string(),
                    shape: shape.clone(),
                })?;
                Ok((name.to_string(), Input::Dense(dense)))
            })
            .collect()
    }

    /// Binds the matrix and generated dense inputs (timing the conversion).
    pub fn prepare(&self, m: &Matrix, k: usize, seed: u64) -> Result<Prepared<'_>, BenchError> {
        let mut inputs = self.dense_inputs(m.rows(), m.cols(), k, seed)?;
        inputs.insert(self.def.sparse.to_string(), Input::Coo(m.coo.clone()));
        let t = Instant::now();
        let given = driver::convert_inputs(&self.conversions, &inputs)?;
        let bindings = bind_with(&self.program, &inputs, &BTreeMap::new(), given)
            .map_err(DriverError::from)?;
        let convert_s = t.elapsed().as_secs_f64();
        let mut bindings = bindings;
        driver::reset_outputs(&self.program, &mut bindings);
        let t = Instant::now();
        self.exe.run_preprocess(&self.program, &mut bindings)?;
        let preprocess_s = t.elapsed().as_secs_f64();
        let width = if self.def.uses_k { k } else { 1 };
        // The same model as ../shared/bench/anchors: 2 flops per stored entry and feature
        // (SDDMM's scaling by S's values is not counted).
        let flops = 2.0 * m.coo.nnz() as f64 * width as f64;
        let bytes = traffic_bytes(&self.program, &bindings);
        Ok(Prepared {
            compiled: self,
            bindings,
            convert_s,
            preprocess_s,
            flops,
            bytes,
        })
    }
}

/// Bytes of every structure array and every input and output buffer (intermediates left out).
fn traffic_bytes(p: &Program, b: &Bindings) -> usize {
    let size = |a: &ArrayData| a.len() * a.dtype().size_bytes();
    let structure: usize = b
        .axes
        .values()
        .flat_map(|a| a.indptr.iter().chain(a.indices.iter()))
        .map(size)
        .sum();
    let buffers: usize = p
        .buffers
        .iter()
        .filter(|x| x.role != Role::Alloc)
        .filter_map(|x| b.buffers.get(&x.name))
        .map(size)
        .sum();
    structure + buffers
}

impl Prepared<'_> {
    /// Resets the outputs and runs once; returns the seconds of the run alone (on a GPU, as
    /// its events measured the launches).
    pub fn run_once(&mut self) -> Result<f64, BenchError> {
        let c = self.compiled;
        c.exe.reset_outputs(&c.program, &mut self.bindings);
        let t = Instant::now();
        // SAFETY: `bindings` is as `run_preprocess` left it; nothing outside reaches it mutably,
        // and `reset_outputs` changed only output values.
        let device = unsafe { c.exe.run_kernel_timed(&c.program, &mut self.bindings)? };
        Ok(device.unwrap_or_else(|| t.elapsed().as_secs_f64()))
    }

    /// Runs the kernel without resetting anything (for criterion loops: the kernels
    /// initialize their outputs themselves).
    pub fn run_raw(&mut self) -> Result<(), BenchError> {
        let c = self.compiled;
        // SAFETY: as in `run_once`; the kernel itself changed only output values.
        unsafe { c.exe.run_kernel(&c.program, &mut self.bindings)? };
        Ok(())
    }

    /// Everything the kernel reads and writes (read-only: the runs trust it).
    pub fn bindings(&self) -> &Bindings {
        &self.bindings
    }

    /// The sum of all output values.
    pub fn checksum(&self) -> Result<f64, BenchError> {
        let p = &self.compiled.program;
        let mut sum = 0.0;
        for buf in p.buffers.iter().filter(|x| x.role == Role::Output) {
            let out = unpack(p, &self.bindings, &buf.name).map_err(DriverError::from)?;
            sum += out.values().sum_f64();
        }
        Ok(sum)
    }
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

/// Runs every configuration of `args`, handing each record to `sink` as soon as it is done.
pub fn run_bench(
    args: &BenchArgs,
    sink: &mut dyn FnMut(&Record) -> Result<(), BenchError>,
) -> Result<Vec<Record>, BenchError> {
    if args.repeat == 0 {
        return Err(BenchError::Zero { flag: "--repeat" });
    }
    if !(args.min_time >= 0.0 && args.min_time.is_finite()) {
        return Err(BenchError::MinTime {
            value: args.min_time,
        });
    }
    if args.threads.contains(&0) {
        return Err(BenchError::Zero { flag: "--threads" });
    }
    if let Some(&n) = args
        .threads
        .iter()
        .find(|&&n| n > lacuna_target::MAX_THREADS)
    {
        return Err(BenchError::TooManyThreads { n });
    }
    if args.ks.contains(&0) {
        return Err(BenchError::Zero { flag: "--k" });
    }
    let target = args.target;
    let kernels = args
        .kernels
        .iter()
        .map(|k| kernel_def(k.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    // Check the cheap arguments before reading any matrix.
    for spec in &args.gens {
        GenSpec::parse(spec)?;
    }
    let mut matrices = Vec::new();
    for path in &args.matrices {
        matrices.push(Matrix::load(path)?);
    }
    for spec in &args.gens {
        matrices.push(Matrix::generate(spec, args.seed)?);
    }
    if matrices.is_empty() {
        return Err(BenchError::NoMatrices);
    }
    let formats = if args.formats.is_empty() {
        vec!["csr".to_string()]
    } else {
        args.formats.clone()
    };
    let mut schedules: Vec<(String, Option<ScheduleFile>)> = Vec::new();
    for s in &args.schedules {
        let file = if s == "none" {
            None
        } else if s == "builtin" {
            // Stands for the built-in schedule of each kernel (see `compile_kernel`).
            Some(ScheduleFile {
                version: 1,
                kernel: BUILTIN.into(),
                trace: vec![],
            })
        } else {
            Some(driver::load_schedule(Path::new(s))?)
        };
        schedules.push((s.clone(), file));
    }
    if schedules.is_empty() {
        schedules.push((
            "builtin".to_string(),
            Some(ScheduleFile {
                version: 1,
                kernel: BUILTIN.into(),
                trace: vec![],
            }),
        ));
    }
    if target.is_gpu() {
        // A GPU kernel needs loops bound to blocks and threads, which only a GPU schedule
        // file binds: the built-in schedules are the CPU's.
        if let Some((name, _)) = schedules
            .iter()
            .find(|(_, f)| f.as_ref().is_none_or(|f| f.kernel == BUILTIN))
        {
            return Err(BenchError::GpuSchedule {
                target: target.name().to_string(),
                schedule: name.clone(),
            });
        }
    }
    let mut records = Vec::new();
    for def in kernels {
        for format in &formats {
            for (sched_name, sched) in &schedules {
                if let Some(f) = sched {
                    if f.kernel != def.name && f.kernel != BUILTIN {
                        continue;
                    }
                }
                let what = format!("{} (format {format}, schedule {sched_name})", def.name);
                // The built-in schedule depends on the data: compiled per matrix and width.
                let builtin = sched.as_ref().is_some_and(|f| f.kernel == BUILTIN);
                let shared = if builtin {
                    None
                } else {
                    Some(
                        compile_kernel(def.name, format, sched.as_ref(), None, target)
                            .map_err(|e| in_config(&what, e))?,
                    )
                };
                let ks: Vec<Option<usize>> = if def.uses_k {
                    args.ks.iter().copied().map(Some).collect()
                } else {
                    vec![None]
                };
                for m in &matrices {
                    for &k in &ks {
                        let what = format!("{what} on {}", m.name);
                        let own;
                        let compiled = match &shared {
                            Some(c) => c,
                            None => {
                                let feat = k.filter(|_| matches!(def.name, "spmm" | "sddmm"));
                                // SpMM's B and SDDMM's W: one row of `feat` f64 per
                                // column of the matrix; SpMV's x: one f64 per column.
                                let gathered = match (def.name, feat) {
                                    ("spmm" | "sddmm", Some(k)) => m.cols().saturating_mul(k * 8),
                                    ("spmv", _) => m.cols().saturating_mul(8),
                                    _ => 0,
                                };
                                let data = driver::DataStats::with_matrix(&m.stats, feat, gathered);
                                let data = if def.name == "spmm" {
                                    data.with_spmm_stats(&m.coo)
                                } else {
                                    data
                                };
                                own = compile_kernel(
                                    def.name,
                                    format,
                                    sched.as_ref(),
                                    Some(data),
                                    target,
                                )
                                .map_err(|e| in_config(&what, e))?;
                                &own
                            }
                        };
                        let mut prep = compiled
                            .prepare(m, k.unwrap_or(1), args.seed)
                            .map_err(|e| in_config(&what, e))?;
                        for &threads in &args.threads {
                            let reps = Repeats {
                                min_runs: args.repeat,
                                min_time: args.min_time,
                            };
                            let r = measure(&mut prep, m, k, sched_name, threads, reps)
                                .map_err(|e| in_config(&what, e))?;
                            eprintln!(
                                "bench: {} {} k={} {} {} threads={}: min {:.3e} s, {:.2} GFLOP/s, {:.2} GB/s",
                                r.kernel,
                                r.matrix,
                                k.map_or("-".to_string(), |k| k.to_string()),
                                r.format,
                                r.schedule,
                                r.threads,
                                r.run_s_min,
                                r.gflops,
                                r.gbps
                            );
                            sink(&r)?;
                            records.push(r);
                        }
                    }
                }
            }
        }
    }
    Ok(records)
}

fn in_config(config: &str, e: BenchError) -> BenchError {
    match e {
        BenchError::Driver(source) => BenchError::Config {
            config: config.to_string(),
            source,
        },
        other => other,
    }
}

/// How many timed runs: at least `min_runs`, and more until they add up to `min_time`
/// seconds (at most [`MAX_RUNS`]).
#[derive(Clone, Copy, Debug)]
struct Repeats {
    min_runs: usize,
    min_time: f64,
}

/// The most timed runs `--min-time` asks for.
const MAX_RUNS: usize = 1000;

fn measure(
    prep: &mut Prepared<'_>,
    m: &Matrix,
    k: Option<usize>,
    schedule: &str,
    threads: usize,
    reps: Repeats,
) -> Result<Record, BenchError> {
    // Parallel loops run on a pool of `threads` workers (built once per measurement, outside
    // the timed runs); kernels without parallel loops use one.
    let pool = lacuna_target::pool_builder(threads)
        .build()
        .map_err(|e| BenchError::Threads(e.to_string()))?;
    let parallel = prep.compiled.exe.has_parallel_loops();
    let threads_used = if parallel { threads } else { 1 };
    let mut times = Vec::with_capacity(reps.min_runs);
    pool.install(|| -> Result<(), BenchError> {
        prep.run_once()?; // warm-up
        let mut total = 0.0;
        while times.len() < reps.min_runs || (total < reps.min_time && times.len() < MAX_RUNS) {
            let t = prep.run_once()?;
            total += t;
            times.push(t);
        }
        Ok(())
    })?;
    let repeat = times.len();
    let min = times.iter().copied().fold(f64::INFINITY, f64::min);
    let med = median(&mut times);
    let c = prep.compiled;
    let per_s = |x: f64| if min > 0.0 { x / min / 1e9 } else { 0.0 };
    Ok(Record {
        kernel: c.def.name.to_string(),
        matrix: m.name.clone(),
        rows: m.rows(),
        cols: m.cols(),
        nnz: m.coo.nnz(),
        k,
        format: c.format.clone(),
        schedule: schedule.to_string(),
        threads,
        target: c.target.name().to_string(),
        threads_used,
        compile_s: c.compile_s,
        convert_s: prep.convert_s,
        preprocess_s: prep.preprocess_s,
        run_s_min: min,
        run_s_median: med,
        flops: prep.flops,
        gflops: per_s(prep.flops),
        bytes: prep.bytes,
        gbps: per_s(prep.bytes as f64),
        checksum: prep.checksum()?,
        repeats: repeat,
        builtin_schedule: c.builtin_schedule.clone(),
    })
}

/// What identifies a configuration across runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Kernel.
    pub kernel: String,
    /// Matrix.
    pub matrix: String,
    /// Feature width.
    pub k: Option<usize>,
    /// Format.
    pub format: String,
    /// Schedule.
    pub schedule: String,
    /// Threads.
    pub threads: usize,
    /// Target.
    pub target: String,
}

#[derive(Deserialize)]
struct KeyedTime {
    kernel: String,
    matrix: String,
    k: Option<usize>,
    format: String,
    schedule: String,
    threads: usize,
    #[serde(default = "jit_name")]
    target: String,
    run_s_min: f64,
}

impl Record {
    /// The configuration of this record.
    pub fn key(&self) -> Key {
        Key {
            kernel: self.kernel.clone(),
            matrix: self.matrix.clone(),
            k: self.k,
            format: self.format.clone(),
            schedule: self.schedule.clone(),
            threads: self.threads,
            target: self.target.clone(),
        }
    }
}

/// Reads a JSON Lines results file: the fastest run_s_min per configuration, in order of first
/// appearance. Blank lines are skipped.
pub fn read_results(path: &Path) -> Result<Vec<(Key, f64)>, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|source| BenchError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out: Vec<(Key, f64)> = Vec::new();
    let mut index: HashMap<Key, usize> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let r: KeyedTime = serde_json::from_str(line).map_err(|e| BenchError::BadRecord {
            path: path.to_path_buf(),
            line: i + 1,
            message: e.to_string(),
        })?;
        let key = Key {
            kernel: r.kernel,
            matrix: r.matrix,
            k: r.k,
            format: r.format,
            schedule: r.schedule,
            threads: r.threads,
            target: r.target,
        };
        match index.get(&key) {
            Some(&at) => out[at].1 = out[at].1.min(r.run_s_min),
            None => {
                index.insert(key.clone(), out.len());
                out.push((key, r.run_s_min));
            }
        }
    }
    Ok(out)
}

/// The comparison table of `new` against `base`: one row per configuration in both, with
/// new/base ratios of run_s_min, then their geometric mean. Errors when none matches.
pub fn compare_table(
    base: &[(Key, f64)],
    new: &[(Key, f64)],
    base_name: &Path,
    new_name: &str,
) -> Result<String, BenchError> {
    let base_map: HashMap<&Key, f64> = base.iter().map(|(k, t)| (k, *t)).collect();
    let mut rows: Vec<[String; 9]> = Vec::new();
    let mut log_sum = 0.0;
    let mut n = 0usize;
    for (key, t_new) in new {
        let Some(&t_base) = base_map.get(key) else {
            continue;
        };
        let ratio = t_new / t_base;
        if ratio.is_finite() && ratio > 0.0 {
            log_sum += ratio.ln();
            n += 1;
        }
        rows.push([
            key.kernel.clone(),
            key.matrix.clone(),
            key.k.map_or("-".to_string(), |k| k.to_string()),
            key.format.clone(),
            if key.target == Target::Jit.name() {
                key.schedule.clone()
            } else {
                format!("{} on {}", key.schedule, key.target)
            },
            key.threads.to_string(),
            format!("{t_base:.3e}"),
            format!("{t_new:.3e}"),
            format!("{ratio:.2}"),
        ]);
    }
    if rows.is_empty() {
        return Err(BenchError::NothingInCommon {
            base: base_name.to_path_buf(),
            new: new_name.to_string(),
        });
    }
    let header = [
        "kernel", "matrix", "k", "format", "schedule", "threads", "base_s", "new_s", "new/base",
    ];
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: &[&str]| {
        cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if i < 6 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = String::new();
    out.push_str(&line(&header));
    out.push('\n');
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        out.push_str(&line(&cells));
        out.push('\n');
    }
    let only_base = base.len() - rows.len();
    let only_new = new.len() - rows.len();
    let geo = if n > 0 {
        (log_sum / n as f64).exp()
    } else {
        f64::NAN
    };
    out.push_str(&format!(
        "geometric mean new/base: {geo:.2} over {} configurations ({only_base} only in {}, {only_new} only in {new_name}); below 1 is faster\n",
        rows.len(),
        base_name.display()
    ));
    Ok(out)
}

/// `lacuna bench`: runs the benchmark (or reads `--new`), writes the records, and prints the
/// comparison with `--compare`.
pub fn main(args: &BenchArgs) -> Result<(), BenchError> {
    if let (Some(base), Some(new)) = (&args.compare, &args.new) {
        let table = compare_table(
            &read_results(base)?,
            &read_results(new)?,
            base,
            &new.display().to_string(),
        )?;
        print!("{table}");
        return Ok(());
    }
    // Read the base first, so that a bad base fails before a long run.
    let base = args.compare.as_deref().map(read_results).transpose()?;
    let stream = args.out.is_none() && base.is_none();
    let stdout = std::io::stdout();
    let records = run_bench(args, &mut |r| {
        if stream {
            let mut lock = stdout.lock();
            writeln!(lock, "{}", to_line(r))
                .and_then(|()| lock.flush())
                .map_err(BenchError::Stdout)?;
        }
        Ok(())
    })?;
    if let Some(out) = &args.out {
        let text: String = records.iter().map(|r| to_line(r) + "\n").collect();
        lacuna_ir::io::write_atomic(out, text.as_bytes()).map_err(DriverError::from)?;
    }
    if let (Some(base), Some(base_path)) = (base, &args.compare) {
        let new: Vec<(Key, f64)> = records.iter().map(|r| (r.key(), r.run_s_min)).collect();
        print!("{}", compare_table(&base, &new, base_path, "this run")?);
    }
    Ok(())
}

fn to_line(r: &Record) -> String {
    // A record has no maps with non-string keys, so serialization cannot fail; fall back to
    // an empty object rather than panic.
    serde_json::to_string(r).unwrap_or_else(|_| "{}".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gen_specs() {
        assert_eq!(
            GenSpec::parse("er:100:4").ok(),
            Some(GenSpec {
                rows: 100,
                cols: 100,
                per_row: 4
            })
        );
        assert_eq!(
            GenSpec::parse("er:2k:1m:3").ok(),
            Some(GenSpec {
                rows: 2000,
                cols: 1_000_000,
                per_row: 3
            })
        );
        for bad in [
            "er",
            "er:10",
            "rmat:10:2",
            "er:0:2",
            "er:x:2",
            "er:1:2:3:4",
            "",
        ] {
            assert!(GenSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn er_is_deterministic_and_sorted() {
        let a = gen_er(50, 40, 5, 3);
        let b = gen_er(50, 40, 5, 3);
        assert_eq!(a, b);
        assert_ne!(a, gen_er(50, 40, 5, 4));
        let keys: Vec<(usize, usize)> = (0..a.nnz())
            .map(|e| (a.coords[0][e], a.coords[1][e]))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert!(a.nnz() <= 250 && a.nnz() > 150);
    }

    #[test]
    fn compare_of_itself_is_one() {
        let rows = vec![(
            Key {
                kernel: "spmv".into(),
                matrix: "m".into(),
                k: None,
                format: "csr".into(),
                schedule: "none".into(),
                threads: 1,
                target: "jit".into(),
            },
            2e-3,
        )];
        let t = compare_table(&rows, &rows, Path::new("a"), "b").unwrap_or_default();
        assert!(t.contains("geometric mean new/base: 1.00"), "{t}");
    }
}
