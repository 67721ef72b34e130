//! The driver: load kernels and data files, lower, compile, run, write outputs.
//!
//! Every failure is a [`DriverError`] naming the file or construct at fault.

use lacuna_ir::io::{
    read_mtx, read_npy, read_tns, write_mtx_array, write_mtx_coo, write_npy, write_tns, IoError,
    MtxData,
};
use lacuna_ir::{CooTensor, DenseArray};
use lacuna_schedule::{Conversion, Schedule, ScheduleError, ScheduleFile};
use lacuna_stage1::{
    bind_with, interpret, unpack, verify, BindError, Bindings, Input, InterpError, Output, Program,
    Role, VerifyError,
};
use lacuna_stage2::passes::extract_preprocess::{allocate_aux, Preprocess};
use lacuna_stage2::{
    interpret_func, interpret_gpu, lower, Config, LowerError, Lowered, Stage2InterpError,
};
use lacuna_target::{
    compile, compile_ptx, CodegenError, CodegenOptions, CompiledKernel, CudaError, CudaKernel,
    GpuArch, RuntimeError,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Anything that can go wrong between the command line and a result.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// Bindings handed to an executable with the program of another (see
    /// [`Executable::check_bindings`]).
    #[error("kernel `{kernel}`: the program given is not the one the executable was built for (bind to the program `build_with` returned)")]
    OtherProgram {
        /// The given program's kernel name.
        kernel: String,
    },
    /// A kernel file cannot be read.
    #[error("{path}: {source}")]
    KernelRead {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A kernel file is not valid RON for a kernel.
    #[error("{path}:{line}:{column}: {message}")]
    KernelSyntax {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A kernel breaks a rule of stage I.
    #[error("{path}: {source}")]
    Verify {
        /// The file.
        path: PathBuf,
        /// The rule.
        source: VerifyError,
    },
    /// A data file cannot be read or written.
    #[error(transparent)]
    Io(#[from] IoError),
    /// A data file has an extension the driver does not know.
    #[error("{path}: unknown file type (expected .mtx, .tns or .npy)")]
    UnknownFileType {
        /// The file.
        path: PathBuf,
    },
    /// Inputs do not fit the kernel.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// Lowering failed.
    #[error(transparent)]
    Lower(#[from] LowerError),
    /// Code generation failed.
    #[error(transparent)]
    Codegen(#[from] CodegenError),
    /// The compiled kernel could not run.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The stage-I interpreter failed.
    #[error(transparent)]
    Interp1(#[from] InterpError),
    /// The CUDA launcher failed (for example, no CUDA driver on this machine).
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// The stage-II interpreter failed.
    #[error(transparent)]
    Interp2(#[from] Stage2InterpError),
    /// An output cannot be written in the requested format.
    #[error("output `{name}` cannot be written to {path}: {why}")]
    Output {
        /// The buffer.
        name: String,
        /// The file.
        path: PathBuf,
        /// Why not.
        why: String,
    },
    /// An encoding or preset does not parse.
    #[error("bad encoding:\n{rendered}")]
    Encoding {
        /// The error rendered with the source text and a caret.
        rendered: String,
    },
    /// A tensor cannot be stored in an encoding.
    #[error("{path}: {source}")]
    Storage {
        /// The input file.
        path: PathBuf,
        /// The cause.
        source: lacuna_ir::storage::StorageError,
    },
    /// A `--format` names a buffer that is not declared with an encoding.
    #[error("`{name}` is not a buffer of kernel `{kernel}` declared with an encoding, so --format cannot change it")]
    NotEncoded {
        /// The name.
        name: String,
        /// The kernel.
        kernel: String,
    },
    /// A schedule file cannot be read.
    #[error("{path}: {source}")]
    ScheduleRead {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A schedule file is not valid RON for a schedule.
    #[error("{path}:{line}:{column}: {message}")]
    ScheduleSyntax {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A schedule names another kernel.
    #[error("the schedule is for kernel `{schedule}`, not `{kernel}`")]
    ScheduleKernel {
        /// The schedule's kernel.
        schedule: String,
        /// The kernel given.
        kernel: String,
    },
    /// A format conversion failed on the data.
    #[error("converting `{buffer}`: {source}")]
    Conversion {
        /// The decomposed buffer.
        buffer: String,
        /// The cause.
        source: lacuna_schedule::decompose::DecomposeError,
    },
    /// A primitive of a schedule does not apply.
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// A co-iteration kernel cannot be compiled or run.
    #[error(transparent)]
    Coiter(#[from] lacuna_stage2::coiter::CoiterError),
    /// An `--out` names no output buffer.
    #[error("`{name}` is not an output buffer of kernel `{kernel}`")]
    UnknownOutput {
        /// The name.
        name: String,
        /// The kernel.
        kernel: String,
    },
    /// A parameter value (`--param`) names no parameter of the kernel.
    #[error(
        "--param {name}: kernel `{kernel}` has no parameter `{name}` (its parameters: {known})"
    )]
    UnknownParam {
        /// The name.
        name: String,
        /// The kernel.
        kernel: String,
        /// The kernel's parameters, comma-separated (`none` without any).
        known: String,
    },
}

/// Refuses a parameter value that names no parameter of `p`, the kernel as written (a schedule
/// may specialize a parameter away, or a format decomposition add its own, whose values come
/// from the data): a misspelt `--param` would otherwise go unnoticed.
pub fn check_params(p: &Program, params: &BTreeMap<String, i64>) -> Result<(), DriverError> {
    check_param_names(&p.name, &p.params, params)
}

/// [`check_params`] for kernel `kernel`, whose parameters as written are `declared`: for callers
/// that keep only the scheduled program (Python's executables).
pub fn check_param_names(
    kernel: &str,
    declared: &[String],
    params: &BTreeMap<String, i64>,
) -> Result<(), DriverError> {
    match params.keys().find(|k| !declared.contains(*k)) {
        Some(name) => Err(DriverError::UnknownParam {
            name: name.clone(),
            kernel: kernel.to_string(),
            known: if declared.is_empty() {
                "none".into()
            } else {
                declared.join(", ")
            },
        }),
        None => Ok(()),
    }
}

/// Reads, parses and verifies a kernel file.
pub fn load_kernel(path: &Path) -> Result<Program, DriverError> {
    load_kernel_with_formats(path, &[])
}

/// Like [`load_kernel`], with the encodings of some buffers replaced first: `(buffer,
/// encoding)` pairs, the encoding in MLIR syntax or a preset name. Only buffers declared with
/// an encoding (over dimension axes) can take another.
pub fn load_kernel_with_formats(
    path: &Path,
    formats: &[(String, String)],
) -> Result<Program, DriverError> {
    let text = std::fs::read_to_string(path).map_err(|source| DriverError::KernelRead {
        path: path.to_path_buf(),
        source,
    })?;
    parse_kernel_with_formats(&text, path, formats)
}

/// Like [`load_kernel_with_formats`], for kernel text already in memory; `path` names it in
/// error messages.
pub fn parse_kernel_with_formats(
    text: &str,
    path: &Path,
    formats: &[(String, String)],
) -> Result<Program, DriverError> {
    let p = Program::from_ron(text).map_err(|e| DriverError::KernelSyntax {
        path: path.to_path_buf(),
        line: e.span.start.line,
        column: e.span.start.col,
        message: e.code.to_string(),
    })?;
    let verified = |p: &Program| {
        verify(p).map_err(|source| DriverError::Verify {
            path: path.to_path_buf(),
            source,
        })
    };
    let mut p = p;
    for (name, enc) in formats {
        match p.buffers.iter_mut().find(|b| &b.name == name) {
            Some(b) if b.encoding.is_some() => b.encoding = Some(enc.clone()),
            _ => {
                return Err(DriverError::NotEncoded {
                    name: name.clone(),
                    kernel: p.name.clone(),
                })
            }
        }
    }
    verified(&p)?;
    if lacuna_stage2::coiter::is_coiteration(&p) {
        // Compiled by co-iteration over the encodings as declared (see `run_coiteration`).
        return Ok(p);
    }
    // Buffers declared by an encoding become level axes (see `lacuna_stage1::sparsify`).
    let p = lacuna_stage1::sparsify(&p).map_err(|source| DriverError::Verify {
        path: path.to_path_buf(),
        source,
    })?;
    verified(&p)?;
    Ok(p)
}

/// Reads a data file by its extension: `.mtx` (sparse or array), `.tns`, `.npy`.
pub fn load_input(path: &Path) -> Result<Input, DriverError> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("mtx") => Ok(match read_mtx(path)? {
            MtxData::Coo(c) => Input::Coo(c),
            MtxData::Dense(d) => Input::Dense(d),
        }),
        Some("tns") => Ok(Input::Coo(read_tns(path)?)),
        Some("npy") => Ok(Input::Dense(read_npy(path)?)),
        _ => Err(DriverError::UnknownFileType {
            path: path.to_path_buf(),
        }),
    }
}

/// Writes an output by the file's extension: `.npy` and `.mtx` for dense, `.mtx`/`.tns` for sparse.
pub fn write_output(name: &str, out: &Output, path: &Path) -> Result<(), DriverError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let bad = |why: &str| DriverError::Output {
        name: name.into(),
        path: path.to_path_buf(),
        why: why.into(),
    };
    let converted;
    let out = match out {
        Output::Sparse(t) => {
            converted = Output::Coo(t.to_coo());
            &converted
        }
        other => other,
    };
    match (out, ext.as_deref()) {
        (Output::Dense(d), Some("npy")) => write_npy(path, d)?,
        (Output::Dense(d), Some("mtx")) => write_mtx_array(path, d)?,
        (Output::Dense(d), Some("tns")) => write_tns(path, &dense_to_coo(d))?,
        (Output::Coo(c), Some("mtx")) => write_mtx_coo(path, c)?,
        (Output::Coo(c), Some("tns")) => write_tns(path, c)?,
        (Output::Coo(c), Some("npy")) => write_npy(
            path,
            &coo_to_dense(c).ok_or_else(|| bad("too large to densify"))?,
        )?,
        _ => return Err(bad("unknown extension (use .npy, .mtx or .tns)")),
    }
    Ok(())
}

fn dense_to_coo(d: &DenseArray) -> CooTensor {
    let rank = d.shape.len();
    let mut coords = vec![Vec::with_capacity(d.data.len()); rank];
    for flat in 0..d.data.len() {
        let mut rest = flat;
        for dim in (0..rank).rev() {
            coords[dim].push(rest % d.shape[dim].max(1));
            rest /= d.shape[dim].max(1);
        }
    }
    CooTensor {
        shape: d.shape.clone(),
        coords,
        values: d.data.clone(),
    }
}

fn coo_to_dense(c: &CooTensor) -> Option<DenseArray> {
    let len = c.shape.iter().try_fold(1usize, |a, &b| a.checked_mul(b))?;
    let mut data = lacuna_ir::ArrayData::zeros(c.values.dtype(), len);
    for e in 0..c.nnz() {
        let off = c
            .shape
            .iter()
            .enumerate()
            .fold(0usize, |o, (d, &ext)| o * ext + c.coords[d][e]);
        data.set(off, c.values.get(e)?);
    }
    Some(DenseArray {
        shape: c.shape.clone(),
        data,
    })
}

/// Where a kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// LLVM JIT on the host CPU.
    Jit,
    /// The stage-II interpreter on the flat program.
    Interp,
    /// The stage-I interpreter (coordinate space).
    InterpStage1,
    /// The stage-II interpreter with GPU semantics (every thread of the launch, races checked).
    InterpGpu,
    /// A CUDA GPU through the driver loaded at run time (PTX for the architecture).
    Cuda(GpuArch),
}

impl Target {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Target::Jit => "jit",
            Target::Interp => "interp",
            Target::InterpStage1 => "interp-stage1",
            Target::InterpGpu => "interp-gpu",
            Target::Cuda(GpuArch::Sm80) => "cuda:sm_80",
            Target::Cuda(GpuArch::Sm90) => "cuda:sm_90",
        }
    }

    /// Whether kernels for this target run GPU schedules (bound loops as blocks and threads).
    pub fn is_gpu(self) -> bool {
        matches!(self, Target::InterpGpu | Target::Cuda(_))
    }
}

/// `--target` of `lacuna run` and `lacuna bench`: the names of [`Target::name`], and `cuda`
/// for `cuda:sm_80`.
impl clap::ValueEnum for Target {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            Target::Jit,
            Target::Interp,
            Target::InterpStage1,
            Target::InterpGpu,
            Target::Cuda(GpuArch::Sm80),
            Target::Cuda(GpuArch::Sm90),
        ]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        use clap::builder::PossibleValue;
        let help = match self {
            Target::Jit => "LLVM JIT on the host CPU",
            Target::Interp => "The stage-II interpreter",
            Target::InterpStage1 => "The stage-I interpreter",
            Target::InterpGpu => {
                "The stage-II interpreter with GPU semantics (bound loops as threads, races checked)"
            }
            Target::Cuda(GpuArch::Sm80) => {
                "A CUDA GPU with sm_80 PTX (also `cuda`), through the driver loaded at run time"
            }
            Target::Cuda(GpuArch::Sm90) => "A CUDA GPU with sm_90 PTX",
        };
        let value = PossibleValue::new(self.name()).help(help);
        Some(match self {
            Target::Cuda(GpuArch::Sm80) => value.alias("cuda"),
            _ => value,
        })
    }
}

/// Machine code with the program it was lowered from. The code does no bounds checks, so the
/// driver runs it only on bindings validated against that program (`lacuna_stage1::validate`).
pub struct ForProgram<K> {
    kernel: K,
    /// `None` for the generated value copies, whose runs check their own extents.
    program: Option<Program>,
}

impl<K> ForProgram<K> {
    /// The compiled kernel.
    pub fn kernel(&self) -> &K {
        &self.kernel
    }

    /// The program the kernel was lowered from, against which its bindings are validated.
    pub fn program(&self) -> Option<&Program> {
        self.program.as_ref()
    }
}

impl<K> std::ops::Deref for ForProgram<K> {
    type Target = K;

    fn deref(&self) -> &K {
        &self.kernel
    }
}

/// A kernel ready to run on some target.
pub enum Executable {
    /// Compiled machine code.
    Jit(Box<ForProgram<CompiledKernel>>),
    /// The flat program, interpreted.
    Interp(Box<Lowered>),
    /// The stage-I program, interpreted.
    InterpStage1(Box<Program>),
    /// The flat program, interpreted with GPU semantics.
    InterpGpu(Box<Lowered>),
    /// A kernel loaded on a CUDA GPU.
    Cuda(Box<ForProgram<CudaKernel>>),
    /// A kernel with a preprocessing function (see `extract_preprocess`): the preprocessing
    /// runs once per matrix and fills the aux buffers that the kernel reads. Its parts are
    /// private: the kernel trusts what the preprocessing wrote, so it runs only after it.
    Preprocessed(Box<PreprocessedKernel>),
    /// A kernel over buffers a schedule decomposed (`decompose_format`): before it, once per
    /// data, the generated value copies fill the parts' values from the decomposed buffers (see
    /// [`ValueCopy`]), then its own preprocessing runs.
    Decomposed(Box<DecomposedKernel>),
}

/// The parts of [`Executable::Preprocessed`]: the kernel, the preprocessing function that fills
/// the aux buffers it reads, and what that function allocates and writes. Only the stage is
/// public; the kernel is not reachable alone, since it trusts the aux buffers:
///
/// ```compile_fail
/// fn kernel(x: &lacuna::driver::PreprocessedKernel) -> &lacuna::driver::Executable {
///     &x.kernel // private
/// }
/// ```
pub struct PreprocessedKernel {
    kernel: Executable,
    /// Built for the host (JIT) or the interpreter.
    preprocess: Executable,
    stage: Preprocess,
}

impl PreprocessedKernel {
    /// The preprocessing stage: its aux buffers and the buffers it writes.
    pub fn stage(&self) -> &Preprocess {
        &self.stage
    }
}

/// The parts of [`Executable::Decomposed`]: the kernel over the parts (possibly
/// [`Executable::Preprocessed`]) and the value copies that fill the parts' values.
pub struct DecomposedKernel {
    kernel: Executable,
    copies: Vec<ValueCopy>,
}

impl DecomposedKernel {
    /// One value copy per decomposed buffer.
    pub fn copies(&self) -> &[ValueCopy] {
        &self.copies
    }
}

/// The generated value copy of one `decompose_format` conversion
/// ([`lacuna_schedule::value_copy_func`]): it fills the values of the decomposed buffer's parts
/// from the buffer's values through the source maps that [`convert_inputs`] (the inspector)
/// binds. It is compiled for the kernel's backend: the JIT for `jit` (and CUDA kernels, whose
/// inputs are prepared on the host), the stage-II interpreter for the interpreters.
pub struct ValueCopy {
    conv: Conversion,
    copy: Copy,
}

/// How a [`ValueCopy`] fills the parts' values.
enum Copy {
    /// The generated function, built for the kernel's target.
    Generated {
        func: lacuna_stage2::Func,
        exe: Box<Executable>,
    },
    /// An iso conversion (`iso_values`): the decomposed buffer's values, checked equal, give the
    /// one value `BUFFER.iso` the kernel reads.
    Iso,
}

impl ValueCopy {
    /// Generates and builds the copy of `conv` for `target`; `None` for a conversion whose
    /// parts are built with their values (`per_relation`).
    pub fn build(conv: &Conversion, target: Target) -> Result<Option<ValueCopy>, DriverError> {
        if conv.iso {
            return Ok(Some(ValueCopy {
                conv: conv.clone(),
                copy: Copy::Iso,
            }));
        }
        let Some(func) = lacuna_schedule::value_copy_func(conv) else {
            return Ok(None);
        };
        lacuna_stage2::verify_flat(&func)?;
        let exe = match target {
            Target::Jit | Target::Cuda(_) => Executable::Jit(Box::new(ForProgram {
                kernel: compile(&func, &CodegenOptions::default())?,
                program: None,
            })),
            Target::Interp | Target::InterpGpu | Target::InterpStage1 => {
                Executable::Interp(Box::new(Lowered {
                    stage2: func.clone(),
                    flat: func.clone(),
                }))
            }
        };
        Ok(Some(ValueCopy {
            conv: conv.clone(),
            copy: Copy::Generated {
                func,
                exe: Box::new(exe),
            },
        }))
    }

    /// The decomposed buffer.
    pub fn buffer(&self) -> &str {
        &self.conv.buffer
    }

    /// The generated function (flat stage-II IR); `None` for an iso conversion, whose one
    /// value the driver checks and stores itself.
    pub fn func(&self) -> Option<&lacuna_stage2::Func> {
        match &self.copy {
            Copy::Generated { func, .. } => Some(func),
            Copy::Iso => None,
        }
    }

    /// Runs the copy on `b`, which [`convert_inputs`] seeded: the parts' values become those of
    /// the decomposed buffer bound in `b` (rerun it after changing them in place; a changed
    /// pattern needs a new conversion).
    pub fn run(&self, p: &Program, b: &mut Bindings) -> Result<(), DriverError> {
        use lacuna_schedule::decompose::DecomposeError;
        let missing = |buffer: String| DriverError::Bind(BindError::MissingInput { buffer });
        let (func, exe) = match &self.copy {
            Copy::Generated { func, exe } => (func, exe),
            Copy::Iso => return self.run_iso(b),
        };
        let param = lacuna_schedule::source_len_param(&self.conv.buffer);
        let nnz = b
            .params
            .get(&param)
            .copied()
            .ok_or_else(|| missing(param))?;
        let a = b
            .buffers
            .get(&self.conv.buffer)
            .ok_or_else(|| missing(self.conv.buffer.clone()))?;
        // The source maps index the entries the inspector saw: no more, no fewer.
        let entries = a.len();
        if usize::try_from(nnz).ok() != Some(entries) {
            return Err(DriverError::Conversion {
                buffer: self.conv.buffer.clone(),
                source: DecomposeError::ValuesLength {
                    expected: usize::try_from(nnz).unwrap_or(0),
                    found: a.len(),
                },
            });
        }
        for decl in &func.buffers {
            if decl.name != self.conv.buffer && !b.buffers.contains_key(&decl.name) {
                return Err(missing(decl.name.clone()));
            }
        }
        // The compiled copy does no bounds checks: every slot it visits must have a source and a
        // destination, and every source must name one of `a`'s entries.
        for x in lacuna_schedule::value_copy_extents(&self.conv, &b.params) {
            let slots = x.slots.ok_or_else(|| {
                DriverError::Bind(BindError::UnboundParam {
                    param: format!("{} (its slot counts)", x.part),
                })
            })?;
            let len = |name: &str| b.buffers.get(name).map_or(0, lacuna_ir::ArrayData::len);
            for name in [&x.source, &x.part] {
                if len(name) < slots {
                    return Err(DriverError::Bind(BindError::Length {
                        buffer: name.clone(),
                        array: "values".into(),
                        expected: slots,
                        found: len(name),
                    }));
                }
            }
            // Another element type is refused by the run itself.
            let Some(lacuna_ir::ArrayData::I64(src)) = b.buffers.get(&x.source) else {
                continue;
            };
            if let Some((slot, &value)) = src[..slots]
                .iter()
                .enumerate()
                .find(|(_, &k)| usize::try_from(k).is_ok_and(|k| k >= entries))
            {
                return Err(DriverError::Conversion {
                    buffer: self.conv.buffer.clone(),
                    source: DecomposeError::SourceMap {
                        map: x.source,
                        slot,
                        value,
                        nnz: entries,
                    },
                });
            }
        }
        // SAFETY: the copy reads `a` below `entries` (checked above, with the other slots'
        // extents) and the parts' maps and values below their slot counts (checked above).
        unsafe { exe.run_unchecked(p, b) }
    }

    /// The run of an iso conversion: the decomposed buffer's values must be equal bit for bit
    /// (an error names the first that is not); that value becomes `BUFFER.iso`.
    fn run_iso(&self, b: &mut Bindings) -> Result<(), DriverError> {
        let buffer = &self.conv.buffer;
        let iso = lacuna_schedule::iso_name(buffer);
        let missing = |buffer: &String| {
            DriverError::Bind(BindError::MissingInput {
                buffer: buffer.clone(),
            })
        };
        let value = iso_value_of(b.buffers.get(buffer).ok_or_else(|| missing(buffer))?).map_err(
            |source| DriverError::Conversion {
                buffer: buffer.clone(),
                source,
            },
        )?;
        match b.buffers.get_mut(&iso).ok_or_else(|| missing(&iso))? {
            lacuna_ir::ArrayData::F64(one) if one.len() == 1 => one[0] = value,
            other => {
                return Err(DriverError::Bind(BindError::Length {
                    buffer: iso,
                    array: "values".into(),
                    expected: 1,
                    found: other.len(),
                }))
            }
        }
        Ok(())
    }
}

impl Executable {
    /// Lowers (and compiles, for the JIT) a verified program.
    pub fn build(p: &Program, target: Target) -> Result<Executable, DriverError> {
        Executable::build_scheduled(p, None, target)
    }

    /// Like [`Executable::build`], for a program scheduled with a trace: returns the program
    /// after its stage-I primitives (bind inputs to that one) and the executable.
    pub fn build_with(
        p: &Program,
        schedule: Option<&ScheduleFile>,
        target: Target,
    ) -> Result<(Program, Executable), DriverError> {
        let (p, exe, _) = Executable::build_converting(p, schedule, target)?;
        Ok((p, exe))
    }

    /// Like [`Executable::build_with`], also returning the format conversions the schedule's
    /// `decompose_format` primitives need before each run on new data (see [`convert_inputs`]).
    pub fn build_converting(
        p: &Program,
        schedule: Option<&ScheduleFile>,
        target: Target,
    ) -> Result<(Program, Executable, Vec<Conversion>), DriverError> {
        let Some(file) = schedule else {
            return Ok((p.clone(), Executable::build(p, target)?, vec![]));
        };
        if file.kernel != p.name {
            return Err(DriverError::ScheduleKernel {
                schedule: file.kernel.clone(),
                kernel: p.name.clone(),
            });
        }
        let mut s = Schedule::replay(p, &file.trace)?;
        if s.preprocess().is_none() && !s.preprocess_iterations().is_empty() {
            // Iterations annotated `preprocess` always run in the preprocessing function.
            s.apply(lacuna_schedule::Instruction::ExtractPreprocess)?;
        }
        let stage2 = s.stage2()?;
        let program = s.program().clone();
        let conversions = s.conversions().to_vec();
        let exe = Executable::build_scheduled(&program, Some(stage2), target)?;
        let exe = match (s.preprocess(), target) {
            (Some(pre), t) if t != Target::InterpStage1 => {
                let pre_target = match t {
                    Target::Jit | Target::Cuda(_) => Target::Jit,
                    _ => Target::Interp,
                };
                let preprocess =
                    Executable::build_scheduled(&program, Some(pre.func.clone()), pre_target)?;
                Executable::Preprocessed(Box::new(PreprocessedKernel {
                    kernel: exe,
                    preprocess,
                    stage: pre.clone(),
                }))
            }
            _ => exe,
        };
        let mut copies = Vec::new();
        for conv in &conversions {
            copies.extend(ValueCopy::build(conv, target)?);
        }
        let exe = if copies.is_empty() {
            exe
        } else {
            Executable::Decomposed(Box::new(DecomposedKernel {
                kernel: exe,
                copies,
            }))
        };
        Ok((program, exe, conversions))
    }

    fn build_scheduled(
        p: &Program,
        stage2: Option<lacuna_stage2::Func>,
        target: Target,
    ) -> Result<Executable, DriverError> {
        if let Some(stage2) = stage2 {
            let flat =
                lacuna_stage2::lower_to_flat(stage2.clone(), &Config::default(), &mut |_, _| {})?;
            return Ok(match target {
                Target::InterpStage1 => Executable::InterpStage1(Box::new(p.clone())),
                Target::Interp => Executable::Interp(Box::new(Lowered { stage2, flat })),
                Target::InterpGpu => Executable::InterpGpu(Box::new(Lowered { stage2, flat })),
                Target::Cuda(arch) => Executable::Cuda(Box::new(ForProgram {
                    kernel: CudaKernel::load(compile_ptx(
                        &flat,
                        arch,
                        &CodegenOptions::default(),
                    )?)?,
                    program: Some(p.clone()),
                })),
                Target::Jit => Executable::Jit(Box::new(ForProgram {
                    kernel: compile(&flat, &CodegenOptions::default())?,
                    program: Some(p.clone()),
                })),
            });
        }
        Ok(match target {
            Target::InterpStage1 => Executable::InterpStage1(Box::new(p.clone())),
            Target::Interp => {
                Executable::Interp(Box::new(lower(p, &Config::default(), &mut |_, _| {})?))
            }
            Target::InterpGpu => {
                Executable::InterpGpu(Box::new(lower(p, &Config::default(), &mut |_, _| {})?))
            }
            Target::Cuda(arch) => {
                let l = lower(p, &Config::default(), &mut |_, _| {})?;
                Executable::Cuda(Box::new(ForProgram {
                    kernel: CudaKernel::load(compile_ptx(
                        &l.flat,
                        arch,
                        &CodegenOptions::default(),
                    )?)?,
                    program: Some(p.clone()),
                }))
            }
            Target::Jit => {
                let l = lower(p, &Config::default(), &mut |_, _| {})?;
                Executable::Jit(Box::new(ForProgram {
                    kernel: compile(&l.flat, &CodegenOptions::default())?,
                    program: Some(p.clone()),
                }))
            }
        })
    }

    /// Whether the compiled code has parallel loops (run on rayon's current pool).
    pub fn has_parallel_loops(&self) -> bool {
        match self {
            Executable::Jit(k) => k.llvm_ir().contains("lacuna_rt_parallel_for"),
            Executable::Preprocessed(x) => x.kernel.has_parallel_loops(),
            Executable::Decomposed(x) => x.kernel.has_parallel_loops(),
            _ => false,
        }
    }

    /// The preprocessing stage, if the schedule extracted one.
    pub fn preprocess_stage(&self) -> Option<&Preprocess> {
        match self {
            Executable::Preprocessed(x) => Some(&x.stage),
            Executable::Decomposed(x) => x.kernel.preprocess_stage(),
            _ => None,
        }
    }

    /// The generated value copies of the decomposed buffers (empty without `decompose_format`).
    pub fn value_copies(&self) -> &[ValueCopy] {
        match self {
            Executable::Decomposed(x) => &x.copies,
            _ => &[],
        }
    }

    /// Runs the generated value copies of decomposed buffers, then the preprocessing function
    /// on `b` (allocating its aux buffers): once per matrix, before [`Executable::run_kernel`].
    /// Does nothing without them. `p` must be the program the executable was built for, and
    /// `b` must pass `lacuna_stage1::validate` against it: otherwise an error, and nothing runs.
    pub fn run_preprocess(&self, p: &Program, b: &mut Bindings) -> Result<(), DriverError> {
        self.check_bindings(p, b)?;
        // SAFETY: just validated.
        unsafe { self.run_preprocess_unchecked(p, b) }
    }

    /// [`Executable::run_preprocess`] without validating `b`.
    ///
    /// # Safety
    ///
    /// `b` passes [`Executable::check_bindings`] against `p`.
    unsafe fn run_preprocess_unchecked(
        &self,
        p: &Program,
        b: &mut Bindings,
    ) -> Result<(), DriverError> {
        match self {
            Executable::Preprocessed(x) => {
                allocate_aux(&x.stage, b)?;
                // SAFETY: the preprocessing function reads `p`'s data, validated by the caller,
                // and writes the aux buffers just allocated for it.
                unsafe { x.preprocess.run_unchecked(p, b)? };
            }
            Executable::Decomposed(x) => {
                for c in &x.copies {
                    c.run(p, b)?;
                }
                // SAFETY: the copies changed only the parts' values, in place.
                unsafe { x.kernel.run_preprocess_unchecked(p, b)? };
            }
            _ => {}
        }
        Ok(())
    }

    /// Checks that `b` may be handed to this executable's machine code: `p` is the program it
    /// was built for (the executable returned with it by [`Executable::build_with`]) and `b`
    /// passes `lacuna_stage1::validate` against `p`. The interpreters check every access
    /// themselves and take any bindings.
    pub fn check_bindings(&self, p: &Program, b: &Bindings) -> Result<(), DriverError> {
        if !self.same_program(p)? {
            return Ok(());
        }
        lacuna_stage1::validate(p, b)?;
        Ok(())
    }

    /// Whether the machine code in this executable was built for `p` (`Ok(false)` when there is
    /// no machine code); an error when it was built for another program.
    fn same_program(&self, p: &Program) -> Result<bool, DriverError> {
        let built = match self {
            Executable::Jit(k) => k.program.as_ref(),
            Executable::Cuda(k) => k.program.as_ref(),
            Executable::Preprocessed(x) => {
                return Ok(x.kernel.same_program(p)? | x.preprocess.same_program(p)?)
            }
            Executable::Decomposed(x) => return x.kernel.same_program(p),
            Executable::Interp(_) | Executable::InterpStage1(_) | Executable::InterpGpu(_) => {
                return Ok(false)
            }
        };
        match built {
            Some(built) if built == p => Ok(true),
            _ => Err(DriverError::OtherProgram {
                kernel: p.name.clone(),
            }),
        }
    }

    /// Runs the kernel alone on `b`, whose aux buffers [`Executable::run_preprocess`] filled.
    ///
    /// # Safety
    ///
    /// The machine code does no bounds checks. `b` must be as [`Executable::run_preprocess`]
    /// (or [`Executable::run`]) on this executable and `p` left it, changed since only in the
    /// values of buffers that hold no positions or coordinates (the numbers of inputs and
    /// outputs, not their lengths, and no structure, source map or aux array). The bindings
    /// [`Executable::check_bindings`] accepts qualify for executables without preprocessing
    /// or decomposed buffers.
    pub unsafe fn run_kernel(&self, p: &Program, b: &mut Bindings) -> Result<(), DriverError> {
        // SAFETY: as the caller guarantees.
        unsafe { self.run_kernel_timed(p, b).map(|_| ()) }
    }

    /// [`Executable::run_kernel`], returning the seconds the device measured itself where the
    /// kernel runs on a GPU (CUDA events around its launches, without the buffers' copies
    /// between host and device), `None` on the host and in the interpreters.
    ///
    /// # Safety
    ///
    /// As for [`Executable::run_kernel`].
    pub unsafe fn run_kernel_timed(
        &self,
        p: &Program,
        b: &mut Bindings,
    ) -> Result<Option<f64>, DriverError> {
        // SAFETY (all arms): as the caller guarantees.
        match self {
            Executable::Preprocessed(x) => unsafe { x.kernel.run_kernel_timed(p, b) },
            Executable::Decomposed(x) => unsafe { x.kernel.run_kernel_timed(p, b) },
            Executable::Cuda(k) => Ok(Some(unsafe { k.run(b)? })),
            other => unsafe { other.run_unchecked(p, b).map(|_| None) },
        }
    }

    /// Zero-fills the output and intermediate buffers between runs of the kernel, except those
    /// the preprocessing function wrote.
    pub fn reset_outputs(&self, p: &Program, b: &mut Bindings) {
        let keep = self.preprocess_stage().map_or(&[][..], |s| &s.writes[..]);
        for buf in p.buffers.iter().filter(|x| x.role != Role::Input) {
            if keep.contains(&buf.name) {
                continue;
            }
            if let Some(a) = b.buffers.get_mut(&buf.name) {
                a.fill_zeros();
            }
        }
    }

    /// Runs once on `b` (the preprocessing function first, where there is one). `p` must be the
    /// program the executable was built for, and `b` must pass `lacuna_stage1::validate`
    /// against it (see [`Executable::check_bindings`]): otherwise an error, and nothing runs.
    pub fn run(&self, p: &Program, b: &mut Bindings) -> Result<(), DriverError> {
        self.check_bindings(p, b)?;
        // SAFETY: just validated.
        unsafe { self.run_unchecked(p, b) }
    }

    /// [`Executable::run`] without validating `b`.
    ///
    /// # Safety
    ///
    /// `b` passes [`Executable::check_bindings`] against `p`, or (for the value copies'
    /// executables, built for no program) holds what the copy reads and writes.
    unsafe fn run_unchecked(&self, p: &Program, b: &mut Bindings) -> Result<(), DriverError> {
        // SAFETY (all arms): the preprocessing leaves what the kernel reads; otherwise as the
        // caller guarantees.
        match self {
            Executable::Preprocessed(x) => unsafe {
                self.run_preprocess_unchecked(p, b)?;
                x.kernel.run_unchecked(p, b)?;
            },
            Executable::Decomposed(x) => unsafe {
                self.run_preprocess_unchecked(p, b)?;
                x.kernel.run_kernel(p, b)?;
            },
            Executable::Jit(k) => unsafe { k.run(b)? },
            Executable::Interp(l) => interpret_func(&l.flat, b)?,
            Executable::InterpStage1(_) => interpret(p, b)?,
            Executable::InterpGpu(l) => interpret_gpu(&l.flat, b)?,
            Executable::Cuda(k) => {
                unsafe { k.run(b)? };
            }
        }
        Ok(())
    }
}

/// Zero-fills the output and intermediate buffers (between repeated runs).
pub fn reset_outputs(p: &Program, b: &mut Bindings) {
    for buf in p.buffers.iter().filter(|x| x.role != Role::Input) {
        if let Some(a) = b.buffers.get_mut(&buf.name) {
            a.fill_zeros();
        }
    }
}

/// Timings and results of [`run_kernel`].
pub struct RunReport {
    /// Seconds to lower and compile.
    pub compile_seconds: f64,
    /// Seconds of the format conversions' inspectors (`decompose_format`: the parts' structure
    /// and source maps, built in Rust), once per data.
    pub conversion_seconds: f64,
    /// Seconds of the generated value copies of decomposed buffers and of the extracted
    /// preprocessing function (`extract_preprocess`), once per data; 0 without them.
    pub preprocess_seconds: f64,
    /// Seconds of each kernel run.
    pub run_seconds: Vec<f64>,
    /// Outputs by buffer name.
    pub outputs: BTreeMap<String, Output>,
    /// Final parameter values.
    pub params: BTreeMap<String, i64>,
}

/// Binds inputs, builds for `target`, runs `repeat` times (outputs reset before each run) and
/// returns the outputs of the last run.
pub fn run_kernel(
    p: &Program,
    inputs: &BTreeMap<String, Input>,
    params: &BTreeMap<String, i64>,
    target: Target,
    repeat: usize,
) -> Result<RunReport, DriverError> {
    run_kernel_scheduled(p, None, inputs, params, target, repeat)
}

/// Stored entries from which the built-in schedule runs rows in parallel: below, the
/// parallel-for's fixed cost (some microseconds) outweighs what a second worker saves.
pub const PARALLEL_MIN_NNZ: usize = 20_000;

/// The statistics of a kernel's data that the built-in schedule reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataStats {
    /// Stored entries of the sparse inputs, added up.
    pub nnz: usize,
    /// Rows of the sparse input with the most stored entries (0 when there is none).
    pub rows: usize,
    /// SpMM's and SDDMM's feature width (the second extent of `B`, or of `W`).
    pub feat: Option<usize>,
    /// Bytes of the dense operand the kernel gathers from at the sparse input's columns:
    /// SpMM's `B` and SDDMM's `W` (their rows), SpMV's `x` (its elements); 0 without one.
    pub gathered_bytes: usize,
    /// How scattered the gathers are, in thousandths: see [`scattered_gathers`].
    pub scattered_permille: usize,
    /// How often a row's length differs from the previous row's, in thousandths: see
    /// [`row_length_changes`].
    pub row_changes_permille: usize,
    /// Whether the host's vector units have mask registers (AVX-512), which make a masked
    /// vector step about as cheap as a full one ([`lacuna_target::host_has_vector_masks`]).
    /// Not a statistic of the data, but read by the same rules.
    pub vector_masks: bool,
    /// Whether masked lanes also beat a full vector body with a scalar remainder on long rows
    /// and on gathers from L1 ([`lacuna_target::host_masks_long_rows`]; see
    /// [`SPMV_UNMASKED_MIN_ROW`]). A property of the host, like `vector_masks`.
    pub masks_long_rows: bool,
    /// Whether the host's hardware prefetchers cover gathered dense rows, so that SpMM's
    /// software prefetch of `B` only costs ([`lacuna_target::host_prefetches_rows`]).
    pub hw_prefetches_rows: bool,
    /// Whether the host gathers scattered vector lanes cheaply enough for sparse rows to run
    /// across lanes ([`lacuna_target::host_gathers_rows`]; see [`SPMV_SELL_MAX_ROW`]).
    pub gathers_rows: bool,
    /// Whether SpMM's register blocks keep a feature width of 32 whole, in one pass over the row
    /// ([`lacuna_target::host_blocks_whole_width`]). A property of the host.
    pub whole_width_blocks: bool,
    /// Distinct diagonals (`column - row`) holding an entry of the 2-D sparse input with the
    /// most entries: see [`diagonal_count`].
    pub diagonals: usize,
    /// Bytes of the host's per-core L2 cache ([`lacuna_target::host_l2_bytes`]; 0 where
    /// unknown, read as [`lacuna_target::DEFAULT_L2_BYTES`]). A property of the host.
    pub l2_bytes: usize,
    /// SpMM's gathers of `B`'s rows that miss a cache of L2's size, in thousandths, and the
    /// runs of entries that column panels of `B` within it would make: see
    /// [`spmm_panel_stats`]. Read for SpMM only, where `B` exceeds L2; 0 otherwise.
    pub far_rows_permille: usize,
    /// See `far_rows_permille`: the (row, panel) runs of entries of `A` at
    /// [`spmm_panel_width`].
    pub panel_runs: usize,
    /// SpMM's gathers of `B`'s rows that miss a cache of L2's size when `A`'s rows run in
    /// reverse Cuthill–McKee order (the `rcm` format), in thousandths, counted as
    /// `far_rows_permille` counts them in stored order: see [`spmm_rcm_far`]. Read for SpMM
    /// only, where `B` exceeds L2 and the stored order misses at least
    /// [`SPMM_RCM_MIN_GAIN`]; 1000 otherwise (no gain to have).
    pub rcm_far_permille: usize,
    /// The block edge of the built-in schedules' BSR ([`whole_blocks`]): the largest of
    /// [`BSR_BLOCKS`] whose blocks inside the matrix hold its entries with at most
    /// [`BSR_MAX_FILL`] slots per thousand entries; 0 where none does, or where rows hold fewer
    /// than [`BLOCKS_MIN_ROW`] entries on average (not counted there: the rules read it only in
    /// longer rows).
    pub block: usize,
    /// How many f64 values the host's vector registers hold in all
    /// ([`lacuna_target::host_vector_f64s`]; 0 where unknown, read as AVX-512's: see
    /// [`bsr_chunk`]). A property of the host.
    pub vector_f64s: usize,
    /// Whether the host has streaming (non-temporal) vector stores
    /// ([`lacuna_target::host_stream_bytes`]; see [`SPMM_STREAM_MIN_BYTES`]). A property of the
    /// host.
    pub stream_stores: bool,
    /// Whether the sparse input's values are all equal (a Matrix Market `pattern` file, an
    /// unweighted graph): SpMV's built-in schedule then stores one value (`iso_values`), so that
    /// its kernel loads only the structure ([`with_iso_values`]).
    pub iso_values: bool,
    /// Bytes of the host's L3 as a core sees it ([`lacuna_target::host_l3_bytes`]; 0 where
    /// unknown). A property of the host.
    pub l3_bytes: usize,
    /// Whether the host's L3 serves gathers nearly as well as L2 ([`lacuna_target::host_fast_l3`]):
    /// SpMV's hub-heavy panels are then sized by it ([`spmv_panel_width`]) and SpMM's rows take
    /// reverse Cuthill–McKee order only beyond it ([`spmm_by_rcm`]). A property of the host.
    pub fast_l3: bool,
    /// The share of stored entries in the [`HOT_COLUMNS`] columns holding the most, in
    /// thousandths: see [`hot_columns`].
    pub hot_permille: usize,
    /// Whether SpMV's gathers scattered beyond L2 run faster row by row with a software
    /// prefetch than from column panels ([`lacuna_target::host_prefetches_far_gathers`]; see
    /// [`by_panels`]). A property of the host.
    pub prefetches_far_gathers: bool,
}

/// The number of distinct diagonals (`column - row`) of the 2-D tensor `a` that hold a stored
/// entry: a few for stencils and banded matrices stored by diagonal, thousands for meshes
/// numbered otherwise, graphs and random matrices. 0 for tensors that are not 2-D.
pub fn diagonal_count(a: &CooTensor) -> usize {
    let (Some(r), Some(c), &[rows, cols]) = (a.coords.first(), a.coords.get(1), &a.shape[..])
    else {
        return 0;
    };
    let entries = r.iter().zip(c).take(a.nnz()).map(|(&row, &col)| (row, col));
    lacuna_schedule::decompose::diagonals(rows, cols, entries).len()
}

/// The share, in thousandths, of the rows of the 2-D tensor `a` (after the first) whose number
/// of stored entries differs from the previous row's: a loop over each row's entries mispredicts
/// its exit about that often. Near 0 for meshes of uniform degree (wing: every row 4 long) and
/// FEM blocks; 800–950 for road networks, citation and social graphs. 0 for tensors that are not
/// 2-D or have fewer than two rows.
pub fn row_length_changes(a: &CooTensor) -> usize {
    let (Some(r), &[rows, _]) = (a.coords.first(), &a.shape[..]) else {
        return 0;
    };
    if rows < 2 {
        return 0;
    }
    let Some(mut lengths) = filled(rows, 0u32) else {
        return 0;
    };
    for &row in r.iter().take(a.nnz()) {
        if let Some(l) = lengths.get_mut(row) {
            *l = l.saturating_add(1);
        }
    }
    let changes = lengths.windows(2).filter(|w| w[0] != w[1]).count();
    changes * 1000 / (rows - 1)
}

/// Columns whose entries [`hot_columns`] counts: the 32768 holding the most, 256 KiB of an f64
/// `x`, which a quarter of a 1 MiB L2 keeps cached whatever order the gathers come in.
pub const HOT_COLUMNS: usize = 32768;

/// The share, in thousandths, of the stored entries of `a` in its [`HOT_COLUMNS`] columns
/// holding the most: 600–700 on R-MAT power-law graphs, whose hubs take most gathers of `x`
/// (cached whatever the layout); 30 on uniform random columns over 2 million. 1000 for a
/// matrix with no more columns than that; 0 for tensors that are not 2-D or without entries.
pub fn hot_columns(a: &CooTensor) -> usize {
    let (Some(c), &[_, cols]) = (a.coords.get(1), &a.shape[..]) else {
        return 0;
    };
    let nnz = a.nnz().min(c.len());
    if nnz == 0 {
        return 0;
    }
    if cols <= HOT_COLUMNS {
        return 1000;
    }
    // Fallible: a declared column count far beyond the entries is refused later, by binding.
    let Some(mut count) = filled(cols, 0u32) else {
        return 0;
    };
    for &j in &c[..nnz] {
        if let Some(n) = count.get_mut(j) {
            *n = n.saturating_add(1);
        }
    }
    let split = cols - HOT_COLUMNS;
    count.select_nth_unstable(split);
    let hot: u64 = count[split..].iter().map(|&n| u64::from(n)).sum();
    (hot.saturating_mul(1000) / nnz as u64) as usize
}

/// Rows that [`scattered_gathers`] samples at most (each with the rows before it).
const SCATTER_SAMPLES: usize = 1024;

/// Rows before a sampled row whose gathers count as recent.
const SCATTER_BEHIND: usize = 8;

/// The share, in thousandths, of the sampled entries of `a` whose gather of `x` (at their
/// column) lands on a cache line (8 f64) neither equal nor next to one that the previous
/// `SCATTER_BEHIND` rows gather: near 0 when neighbouring rows gather neighbouring parts of
/// `x`, as in banded, FEM and stencil matrices, or bands far from the diagonal (the hardware
/// prefetcher follows such streams); near 1000 for graphs and random matrices, where each
/// gather is a cache miss once `x` exceeds the cache. Samples up to `SCATTER_SAMPLES` rows
/// evenly spread, in one pass over the entries (in any order). 0 for tensors that are not 2-D,
/// with fewer rows than the window, or without sampled entries.
pub fn scattered_gathers(a: &CooTensor) -> usize {
    let (Some(r), Some(c), &[rows, _]) = (a.coords.first(), a.coords.get(1), &a.shape[..]) else {
        return 0;
    };
    let nnz = a.nnz().min(r.len()).min(c.len());
    if rows <= SCATTER_BEHIND || nnz == 0 {
        return 0;
    }
    let step = (rows / SCATTER_SAMPLES).max(1);
    let windows = || (SCATTER_BEHIND..rows).step_by(step);
    // The sampled rows and the rows before them, numbered.
    const NONE: u32 = u32::MAX;
    // Fallible: a declared row count far beyond the entries is refused later, by binding.
    let Some(mut slot) = filled(rows, NONE) else {
        return 0;
    };
    let mut sampled = 0u32;
    for w in windows() {
        for s in &mut slot[w - SCATTER_BEHIND..=w] {
            if *s == NONE {
                *s = sampled;
                sampled += 1;
            }
        }
    }
    let mut lines: Vec<Vec<usize>> = vec![Vec::new(); sampled as usize];
    for e in 0..nnz {
        if let Some(&s) = slot.get(r[e]) {
            if s != NONE {
                lines[s as usize].push(c[e] / 8);
            }
        }
    }
    let of = |q: usize| &lines[slot[q] as usize];
    let (mut far, mut total) = (0usize, 0usize);
    let mut recent = Vec::new();
    for w in windows() {
        recent.clear();
        for q in w - SCATTER_BEHIND..w {
            recent.extend_from_slice(of(q));
        }
        recent.sort_unstable();
        recent.dedup();
        for &line in of(w) {
            let i = recent.partition_point(|&x| x + 1 < line);
            let near = recent.get(i).is_some_and(|&x| x <= line + 1);
            total += 1;
            far += usize::from(!near);
        }
    }
    (far * 1000).checked_div(total).unwrap_or(0)
}

/// For SpMM's column panels of `width` rows of `B` (see [`spmm_by_panels`]): the share, in
/// thousandths, of `a`'s entries, read in stored order (row by row, as CSR stores them), whose
/// column was not gathered within the `window` entries before (nor ever: compulsory misses
/// count) — a cheap stand-in for the gathers of `B`'s rows that miss a cache of `window` rows,
/// since an entry's distance in entries bounds its distance in distinct rows from above —
/// and the number of runs of entries in one row and one panel (each a pass that reads and
/// writes a row of `C`). `(0, 0)` for tensors that are not 2-D or have no entries.
pub fn spmm_panel_stats(a: &CooTensor, width: usize, window: usize) -> (usize, usize) {
    let (Some(r), Some(c), &[_, cols]) = (a.coords.first(), a.coords.get(1), &a.shape[..]) else {
        return (0, 0);
    };
    let nnz = a.nnz().min(r.len()).min(c.len());
    const NEVER: usize = usize::MAX;
    let Some(mut last) = filled(cols, NEVER).filter(|_| nnz > 0) else {
        return (0, 0);
    };
    let width = width.max(1);
    let (mut far, mut runs) = (0usize, 0usize);
    let mut prev = (usize::MAX, usize::MAX);
    for (t, (&row, &col)) in r.iter().zip(c).take(nnz).enumerate() {
        let Some(seen) = last.get_mut(col) else {
            continue;
        };
        far += usize::from(*seen == NEVER || t - *seen > window);
        *seen = t;
        let here = (row, col / width);
        runs += usize::from(here != prev);
        prev = here;
    }
    ((far * 1000) / nnz, runs)
}

/// For SpMM with `A`'s rows run in reverse Cuthill–McKee order (the `rcm` format, see
/// [`spmm_by_rcm`]): the share, in thousandths, of `a`'s entries whose column was not gathered
/// within the `window` entries before in that order — [`spmm_panel_stats`]'s far gathers, in
/// the order the `rcm` format runs the rows. 0 for tensors that are not 2-D or have no
/// entries; 1000 (nothing saved) for shapes far larger than the entries (more than 4 rows or
/// columns per entry, plus 1024: a file may declare any extent), which the order would
/// allocate for and hardly reorder.
pub fn spmm_rcm_far(a: &CooTensor, window: usize) -> usize {
    let (Some(r), Some(c), &[rows, cols]) = (a.coords.first(), a.coords.get(1), &a.shape[..])
    else {
        return 0;
    };
    // The rows' entries as CSR (the tensor is sorted row by row).
    let nnz = a.nnz().min(r.len()).min(c.len());
    let sparse = nnz.saturating_mul(4).saturating_add(1024);
    if rows > sparse || cols > sparse {
        return 1000;
    }
    let Ok(indptr) = row_pointers(rows, &r[..nnz]) else {
        return 1000;
    };
    let indices = &c[..nnz];
    let order = lacuna_schedule::decompose::rcm_rows(rows, cols, &indptr, indices);
    let hits = lacuna_schedule::decompose::reuse(cols, &indptr, indices, &order, window);
    if nnz == 0 {
        0
    } else {
        ((1.0 - hits) * 1000.0).round() as usize
    }
}

/// The statistics of one sparse matrix that the built-in schedules read (see [`DataStats`]),
/// counted once: `lacuna bench` keeps them with each matrix for every schedule it compiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatrixProfile {
    /// Stored entries.
    pub nnz: usize,
    /// Rows.
    pub rows: usize,
    /// [`scattered_gathers`].
    pub scattered_permille: usize,
    /// [`row_length_changes`].
    pub row_changes_permille: usize,
    /// [`diagonal_count`].
    pub diagonals: usize,
    /// [`whole_blocks`], in rows of [`BLOCKS_MIN_ROW`] entries or more on average (0 otherwise).
    pub block: usize,
    /// Whether the matrix has entries and their values are all equal bit for bit (see
    /// [`DataStats::iso_values`]).
    pub iso_values: bool,
    /// [`hot_columns`].
    pub hot_permille: usize,
}

impl MatrixProfile {
    /// The statistics of a 2-D matrix.
    pub fn of(a: &CooTensor) -> MatrixProfile {
        let rows = a.shape.first().copied().unwrap_or(0);
        let long_rows = rows > 0 && a.nnz() as f64 >= BLOCKS_MIN_ROW * rows as f64;
        MatrixProfile {
            nnz: a.nnz(),
            rows,
            scattered_permille: scattered_gathers(a),
            row_changes_permille: row_length_changes(a),
            diagonals: diagonal_count(a),
            block: if long_rows { whole_blocks(a) } else { 0 },
            iso_values: a.nnz() > 0 && equal_values(&a.values),
            hot_permille: hot_columns(a),
        }
    }
}

/// Whether the values are all equal bit for bit (as `iso_values` checks them).
pub fn equal_values(values: &lacuna_ir::ArrayData) -> bool {
    iso_value_of(values).is_ok()
}

/// The one value of `values` ([`lacuna_schedule::iso_value`]), read in place when they are
/// f64 (as binding stores an f64 buffer's).
fn iso_value_of(
    values: &lacuna_ir::ArrayData,
) -> Result<f64, lacuna_schedule::decompose::DecomposeError> {
    match values {
        lacuna_ir::ArrayData::F64(v) => lacuna_schedule::iso_value(v),
        other => lacuna_schedule::iso_value(&other.to_f64_vec()),
    }
}

impl DataStats {
    /// No data, and this host's properties (`vector_masks`, `masks_long_rows`,
    /// `hw_prefetches_rows`, `gathers_rows`, `whole_width_blocks`, `l2_bytes`,
    /// `stream_stores`, `vector_f64s`, `l3_bytes`, `fast_l3`, `prefetches_far_gathers`): the base
    /// the data's statistics
    /// are filled into.
    pub fn host() -> DataStats {
        DataStats {
            vector_masks: lacuna_target::host_has_vector_masks(),
            masks_long_rows: lacuna_target::host_masks_long_rows(),
            hw_prefetches_rows: lacuna_target::host_prefetches_rows(),
            gathers_rows: lacuna_target::host_gathers_rows(),
            whole_width_blocks: lacuna_target::host_blocks_whole_width(),
            l2_bytes: lacuna_target::host_l2_bytes(),
            stream_stores: lacuna_target::host_stream_bytes().is_some(),
            vector_f64s: lacuna_target::host_vector_f64s(),
            l3_bytes: lacuna_target::host_l3_bytes(),
            fast_l3: lacuna_target::host_fast_l3(),
            prefetches_far_gathers: lacuna_target::host_prefetches_far_gathers(),
            ..DataStats::default()
        }
    }

    /// The statistics of a kernel's inputs.
    pub fn of(inputs: &BTreeMap<String, Input>) -> DataStats {
        let sparse = || inputs.values().filter(|i| !matches!(i, Input::Dense(_)));
        let nnz = sparse().map(Input::stored_len).sum();
        let rows = sparse()
            .map(|i| (i.stored_len(), i.shape().first().copied().unwrap_or(0)))
            .max()
            .map_or(0, |(_, rows)| rows);
        let bytes = |d: &DenseArray| d.data.len().saturating_mul(d.data.dtype().size_bytes());
        let rows_of = inputs.get("B").or_else(|| inputs.get("W"));
        let (feat, gathered_bytes) = match (rows_of, inputs.get("x")) {
            (Some(Input::Dense(b)), _) if b.shape.len() == 2 => (Some(b.shape[1]), bytes(b)),
            (_, Some(Input::Dense(x))) if x.shape.len() == 1 => (None, bytes(x)),
            _ => (None, 0),
        };
        let matrix = sparse()
            .filter(|i| i.shape().len() == 2)
            .max_by_key(|i| i.stored_len())
            .and_then(Input::coo);
        let profile = matrix.as_deref().map(MatrixProfile::of).unwrap_or_default();
        let stats = DataStats {
            nnz,
            rows,
            ..DataStats::with_matrix(&profile, feat, gathered_bytes)
        };
        // Only SpMM's rule reads them (its `B`; SDDMM's `W` is gathered otherwise).
        match (&matrix, inputs.get("B")) {
            (Some(a), Some(_)) => stats.with_spmm_stats(a),
            _ => stats,
        }
    }

    /// The host's properties ([`DataStats::host`]) with a matrix's statistics, the feature
    /// width and the bytes of the gathered dense operand (SpMM's `B`, SDDMM's `W`, SpMV's
    /// `x`). SpMM's statistics are left to [`DataStats::with_spmm_stats`].
    pub fn with_matrix(m: &MatrixProfile, feat: Option<usize>, gathered_bytes: usize) -> DataStats {
        DataStats {
            nnz: m.nnz,
            rows: m.rows,
            feat,
            gathered_bytes,
            scattered_permille: m.scattered_permille,
            row_changes_permille: m.row_changes_permille,
            diagonals: m.diagonals,
            block: m.block,
            iso_values: m.iso_values,
            hot_permille: m.hot_permille,
            ..DataStats::host()
        }
    }

    /// `self` with SpMM's statistics of its matrix `a` filled in, where the feature width is
    /// set and `B` exceeds L2 (left 0 otherwise: the rules read them there only): its panel
    /// statistics ([`spmm_panel_stats`] at [`spmm_panel_width`], over a window of L2's size in
    /// rows of `B`) and its far gathers in `rcm`'s order ([`spmm_rcm_far`], same window).
    pub fn with_spmm_stats(self, a: &CooTensor) -> DataStats {
        let Some(k) = self.feat.filter(|_| self.gathered_bytes > self.l2()) else {
            return self;
        };
        let row_bytes = k.max(1).saturating_mul(std::mem::size_of::<f64>());
        let width = spmm_panel_width(self.l2_bytes, k) as usize;
        let window = self.l2() / row_bytes;
        let (far_rows_permille, panel_runs) = spmm_panel_stats(a, width, window);
        // The order only where it could gain (it costs a pass over the graph).
        let rcm_far_permille = if far_rows_permille >= SPMM_RCM_MIN_GAIN {
            spmm_rcm_far(a, window)
        } else {
            1000
        };
        DataStats {
            far_rows_permille,
            panel_runs,
            rcm_far_permille,
            ..self
        }
    }

    /// The host's L2 bytes, [`lacuna_target::DEFAULT_L2_BYTES`] where unknown.
    pub fn l2(&self) -> usize {
        l2_or_default(self.l2_bytes)
    }

    /// The host's L3 bytes where it has a fast L3 ([`DataStats::fast_l3`]) of known size.
    pub fn fast_l3_bytes(&self) -> Option<usize> {
        (self.fast_l3 && self.l3_bytes > 0).then_some(self.l3_bytes)
    }

    /// Mean stored entries per row (0 without rows).
    pub fn mean_row(&self) -> f64 {
        if self.rows == 0 {
            0.0
        } else {
            self.nnz as f64 / self.rows as f64
        }
    }
}

/// Bytes of SpMM's `B` from which the built-in schedule prefetches the rows it gathers
/// (`annotate(j, prefetch, SPMM_PREFETCH_DISTANCE)`): beyond the 32 MiB L3, where the gathers
/// wait on DRAM. cit-HepPh (B 35 MB at k = 128), one thread, `lacuna bench` side by side: 21.5
/// and 19.1 ms without, 17.5 and 18.0 ms with; on cage10 and bcsstk16 (B within L3) no gain
/// (±10%, within noise), so it stays off there.
/// On Zen 5 it only costs (session 13, `lacuna bench`, k = 128, min of 10, ms, without / with,
/// one thread then two): cage11 7.67 / 9.83, 4.39 / 5.95; ct2010 9.14 / 11.98, 5.46 / 7.00;
/// cit-HepPh 6.64 / 8.98, 3.69 / 4.80; soc-Slashdot0902 21.3 / 26.2, 12.4 / 15.8.
pub const SPMM_PREFETCH_MIN_BYTES: usize = 32 << 20;

/// Mean stored entries per row for which SpMM's built-in schedule, on a host with AVX-512 (32
/// vector registers), splits a feature width that is a multiple of 64 (k = 128 .. 512) by 64
/// instead of 32: eight 8-lane registers of accumulators per pass over the row, half the passes.
/// `lacuna bench`, one thread, split by 32 / by 64, ms, min of 10 (session 13, znver5): k = 128
/// cage10 (13 per row) 1.29–1.37 / 1.19, cage11 (14) 7.54–7.68 / 7.22–7.24, cit-HepPh (12)
/// 6.88–7.29 / 6.01–6.54, email-Enron (10) 6.59–6.82 / 6.16–6.24, soc-Slashdot0902 (12) 22.2–22.6
/// / 20.6–21.2, EX5 (45) 1.96–2.01 / 1.84–1.85, ego-Facebook (44) 1.05–1.09 / 0.96–0.97,
/// citeseer_features (32) 0.73–0.77 / 0.70–0.73; k = 256 cit-HepPh 18.9 / 16.2, ego-Facebook
/// 3.18 / 2.49, email-Enron 16.5 / 14.5. Outside the range it loses: rows of about 5 (ct2010
/// 8.94–9.10 / 9.45–9.85, wing 10.2–10.3 / 11.0–11.3, de2010 and vt2010 0–6% slower) and
/// bcsstk16 (59 per row) 1.75–1.77 / 2.14–2.16.
pub const SPMM_WIDE_CHUNK_ROWS: std::ops::Range<f64> = 8.0..50.0;

/// Bytes of SpMM's `C` from which the built-in schedule accumulates each row in registers
/// (`reverse_cache_write` at the row, its init folded in: the row is not zeroed in memory
/// first) and stores it with streaming stores (`annotate(i, nontemporal)`), on hosts that have
/// them (`DataStats::stream_stores`): an output beyond the last-level cache, written once, is
/// then not read into the caches before it is overwritten. `lacuna bench`, k = 128, min of
/// 10, ms, side by side with the schedule without (session 26, the Intel AMX host), one
/// thread: ct2010 (`C` 69 MB) 20.7 → 18.9, cage11 (40 MB) 13.2 → 11.1–11.3, email-Enron (38
/// MB) 13.0 → 11.1–11.6, vt2010 (33 MB) 5.19 → 4.79–4.85, soc-Slashdot0902 (84 MB) 45.1 →
/// 40.7–41.6, cit-HepPh (35 MB) 14.3 → 13.8–14.3; two threads: ct2010 10.1 → 8.6–8.7, cage11
/// 5.82 → 5.30–5.37, email-Enron 7.58 → 5.93–5.99, soc-Slashdot0902 21.4 → 20.1–20.8,
/// cit-HepPh 6.74 → 6.34. Below (de2010, `C` 25 MB, 2.79 → 2.71–2.80 ms at two threads; a C
/// prototype with `C` in the last-level cache between runs) it does not pay (on AMD Zen's
/// victim L3 it does: [`SPMM_STREAM_FAST_L3_DIVISOR`]). k = 256, one / two
/// threads: ct2010 42.7 / 20.7 → 39.3 / 19.0, cage11 30.4 / 15.6 → 28.5 / 13.4, email-Enron
/// 27.9 / 13.8 → 24.5 / 13.4; k = 512: ct2010 90.7 / 46.6 → 84.7 / 41.9, cage11 76.5 / 40.6 →
/// 67.5 / 35.4. Rows of `C` shorter than [`SPMM_STREAM_MIN_ROW_BYTES`] keep the schedule
/// without.
pub const SPMM_STREAM_MIN_BYTES: usize = 32 << 20;

/// The share of a fast L3 (`DataStats::fast_l3_bytes`: AMD Zen) from which SpMM's built-in
/// schedule streams `C` on such a host, in place of [`SPMM_STREAM_MIN_BYTES`]: an eighth (4 MiB
/// of the Zen 4 guest's 32). Zen's L3 is a victim cache of the L2s: rows of `C` written through
/// the caches are evicted into it and push out the rows of `B` that later rows gather, even
/// where `C` and `B` together fit. `lacuna bench`, k = 128, side by side in three rounds
/// (each side's fastest), the rows accumulated in registers and streamed against the built-in
/// schedule without, one / two threads, ms (session 35, Zen 4 guest, L3 32 MiB): vt2010 (`C`
/// 33 MB, just below 32 MiB) 7.89 / 4.21 → 5.80 / 3.05, de2010 (25 MB) 6.12 / 3.42 → 4.39 /
/// 2.32, cage10 (12 MB) 3.09 / 1.53 → 2.47 / 0.99, EX5 (6.7 MB) 4.07 / 1.82 → 3.56 / 1.80;
/// at k = 256 cage10 (23 MB) 6.99 / 4.07 → 6.92 / 3.70; below the threshold even:
/// ego-Facebook (4.1 MB) 1.84 / 1.05 → 1.82 / 0.91, citeseer_features (3.4 MB) 1.13 / 0.56 →
/// 1.14 / 0.56. The rows accumulated in registers without the streaming stores lose or tie
/// (de2010 6.71 / 3.52, vt2010 7.50 / 4.18, cage10 3.15 / 1.16).
pub const SPMM_STREAM_FAST_L3_DIVISOR: usize = 8;

/// Whether SpMM's built-in schedule accumulates each row of `C` (of `row_bytes`) in registers
/// and stores it with streaming stores ([`spmm_stream_trace`]): on hosts that have them, for
/// rows of [`SPMM_STREAM_MIN_ROW_BYTES`] or more, and `C` of [`SPMM_STREAM_MIN_BYTES`] or more
/// — on a host with a fast L3, of that L3 over [`SPMM_STREAM_FAST_L3_DIVISOR`] or more; and
/// for shorter rows of a multiple of [`SPMM_STREAM_SHORT_ROW_BYTES`] where `C` is far beyond
/// the last-level cache ([`spmm_stream_short_rows_min_bytes`]).
pub fn spmm_streams(data: &DataStats, row_bytes: usize) -> bool {
    let c_bytes = data.rows.saturating_mul(row_bytes);
    let long = row_bytes >= SPMM_STREAM_MIN_ROW_BYTES && c_bytes >= spmm_stream_min_bytes(data);
    let short = row_bytes >= SPMM_STREAM_SHORT_ROW_BYTES
        && row_bytes.is_multiple_of(SPMM_STREAM_SHORT_ROW_BYTES)
        && c_bytes >= spmm_stream_short_rows_min_bytes(data);
    data.stream_stores && (long || short)
}

/// Bytes of a row of `C` (32 f64 features) whose multiples below
/// [`SPMM_STREAM_MIN_ROW_BYTES`] stream where `C` is far beyond the last-level cache
/// ([`spmm_stream_short_rows_min_bytes`]): each row then accumulates as 32 vector lanes per
/// pass over its entries, in place of the unrolled chunks of 16. There the write-allocate
/// reads of `C` that streaming stores save are a third of the traffic, whatever the row's
/// length; near the cache's size they are not (k = 32 and 64 on the shared matrices, `C` of
/// 6–42 MB, lost or tied: [`SPMM_STREAM_MIN_ROW_BYTES`]). `lacuna bench`, min of 5 per
/// schedule, the two alternating in one process, two processes in opposite orders, ms, one /
/// two threads (session 36, Zen 4 guest, L3 32 MiB): k = 32, streamed against the built-in,
/// lap3d-large (`C` 702 MB) 118 / 79 against 145 / 105, block4-large (221 MB) 69 / 41 against
/// 79 / 45, rmat-large (537 MB) 549 / 333 against 659 / 332; k = 64, block4-large 233 / 112
/// against 249 / 173, lap3d-large 263 / 192 against 337 / 261. Streaming the chunks of 16
/// unrolled instead: block4-large k = 32 76–109 / 55–57.
pub const SPMM_STREAM_SHORT_ROW_BYTES: usize = 256;

/// How many times the last-level cache `C` must hold for rows shorter than
/// [`SPMM_STREAM_MIN_ROW_BYTES`] to stream ([`spmm_stream_short_rows_min_bytes`]).
pub const SPMM_STREAM_SHORT_ROWS_LLC_MULTIPLE: usize = 4;

/// The bytes of `C` from which rows shorter than [`SPMM_STREAM_MIN_ROW_BYTES`] stream
/// ([`SPMM_STREAM_SHORT_ROW_BYTES`]): [`SPMM_STREAM_SHORT_ROWS_LLC_MULTIPLE`] times the host's
/// L3 (128 MiB on a 32 MiB L3), or times [`SPMM_STREAM_MIN_BYTES`] where its size is unknown.
pub fn spmm_stream_short_rows_min_bytes(data: &DataStats) -> usize {
    let llc = if data.l3_bytes > 0 {
        data.l3_bytes
    } else {
        SPMM_STREAM_MIN_BYTES
    };
    llc.saturating_mul(SPMM_STREAM_SHORT_ROWS_LLC_MULTIPLE)
}

/// The bytes of `C` from which SpMM's built-in schedule streams it on the host of `data`
/// ([`spmm_streams`]); `lacuna tune` offers streamed rows from there too.
pub fn spmm_stream_min_bytes(data: &DataStats) -> usize {
    data.fast_l3_bytes()
        .map_or(SPMM_STREAM_MIN_BYTES, |l3| l3 / SPMM_STREAM_FAST_L3_DIVISOR)
}

/// Bytes of a row of SpMM's `C` from which the built-in schedule streams it (see
/// [`SPMM_STREAM_MIN_BYTES`]): k = 128 in f64. At k = 64 (512-byte rows) it lost on ct2010 (`C`
/// 35 MB), one / two threads, ms: 7.06 / 3.63 without, 7.40 / 3.93 with the row accumulated in
/// registers, 7.77 / 4.12 also streamed; soc-Slashdot0902 (42 MB) 19.3 / 9.5 → 19.2 / 10.5.
pub const SPMM_STREAM_MIN_ROW_BYTES: usize = 1024;

/// Entries ahead that SpMM's built-in prefetch reads `J.indices` (4 and 16 measured no
/// better than 8 on cit-HepPh).
pub const SPMM_PREFETCH_DISTANCE: i64 = 8;

/// Feature widths from which SDDMM's built-in schedule specializes the width (up to
/// [`SDDMM_SPECIALIZE_MAX_FEAT`]): the dot product over features becomes a constant number of
/// vector steps, unrolled. `lacuna bench`, min of 10, specialized (with the prefetch below) over
/// the generic width's vector lanes, geometric mean over the thirteen shared matrices, one /
/// two threads (session 20, Intel AMX host): k = 16 0.43 / 0.42, k = 32 0.78 / 0.82. (Before
/// session 20 a specialized k = 32 was twice as slow: LLVM unrolled the constant feature loop
/// before vectorizing and vectorized the entries instead; see the emitter's loop hints.)
pub const SDDMM_SPECIALIZE_MIN_FEAT: usize = 16;

/// The widest feature width SDDMM's built-in schedule specializes (and measured).
pub const SDDMM_SPECIALIZE_MAX_FEAT: usize = 256;

/// Feature widths from which SDDMM's built-in schedule prefetches the rows of `W` it gathers
/// [`SDDMM_PREFETCH_DISTANCE`] entries ahead on every host, up to [`SDDMM_SPECIALIZE_MAX_FEAT`];
/// from [`SDDMM_SPECIALIZE_MIN_FEAT`] on hosts whose hardware prefetchers do not cover gathered
/// rows ([`DataStats::hw_prefetches_rows`]). `lacuna bench`, one thread, side by side with
/// the vector lanes alone (session 12, Xeon with AVX-512; ms): k = 64 cage10 1.25 → 0.98,
/// email-Enron 5.87 → 4.29, bcsstk16 1.64 → 1.40; k = 128 cage11 14.2 → 12.4, email-Enron
/// 13.9 → 11.3, ct2010 21.5 → 19.2, wing 18.6 → 16.2, bcsstk16 3.17 → 2.67; k = 256 cage10 6.7
/// → 6.2, email-Enron 30.9 → 26.7, bcsstk16 6.4 → 5.5. Below 64, specialized with the prefetch
/// over specialized alone (session 20, Intel AMX host, geometric mean as for
/// [`SDDMM_SPECIALIZE_MIN_FEAT`], one / two threads): k = 16 0.88 / 0.88, k = 32 0.88 / 0.92;
/// not measured on Zen 5, whose prefetchers cover SpMM's gathered rows.
pub const SDDMM_PREFETCH_MIN_FEAT: usize = 64;

/// Entries ahead that SDDMM's built-in prefetch reads `J.indices` (4 and 8 within 3% at
/// k = 128 on the matrices above).
pub const SDDMM_PREFETCH_DISTANCE: i64 = 8;

/// Feature widths at which SDDMM's built-in schedule prefetches the rows of `W`
/// [`SDDMM_SHORT_ROWS_PREFETCH_DISTANCE`] entries ahead on hosts whose hardware prefetchers
/// cover gathered rows ([`DataStats::hw_prefetches_rows`]: Zen 5), where they do not cover
/// rows of 4 to 8 cache lines. `lacuna bench`, min of 10, ms, one thread, specialized alone →
/// prefetched 32 entries ahead (8 ahead), geometric mean over the thirteen shared matrices and
/// the generated large ones (session 37, Zen 5 guest): k = 32 0.72 (0.79) over 18 matrices,
/// e.g. ct2010 5.68 → 1.81, vt2010 1.11 → 0.56, cit-HepPh 1.79 → 1.22, er-large 473 → 182,
/// lap2d-large 185 → 116, rmat-large 441 → 232, bcsstk16 and ego-Facebook even; k = 64 0.82
/// (0.95) over 15, e.g. cage11 5.21 → 3.07, soc-Slashdot0902 13.9 → 8.6, wing 6.3 → 4.0, but
/// lap2d-large 175 → 242. At k = 16 (rows of 2 lines) the shared matrices lost 3–11% (0.92
/// overall, from er-large and lap2d-large), and from k = 128 (16 lines and more) the
/// prefetcher covers a row after its first lines: 32 ahead 1.17, 8 ahead 1.11 at k = 128
/// (er-large and rmat-large, scattered far beyond L3, 0.56–0.66, lap2d-large 2.08), 0.98 and
/// 0.95 at k = 256 on the shared matrices; those widths keep the rule of
/// [`SDDMM_PREFETCH_MIN_FEAT`].
pub const SDDMM_SHORT_ROWS_PREFETCH: std::ops::RangeInclusive<usize> = 32..=64;

/// Entries ahead of SDDMM's prefetch at the widths of [`SDDMM_SHORT_ROWS_PREFETCH`] (see
/// there).
pub const SDDMM_SHORT_ROWS_PREFETCH_DISTANCE: i64 = 32;

/// How many entries ahead SDDMM's built-in schedule prefetches the rows of `W` at a specialized
/// feature width `k`, on a host whose hardware prefetchers cover gathered rows or not
/// (`hw_prefetches_rows`); `None`: no prefetch. See [`SDDMM_PREFETCH_MIN_FEAT`] and
/// [`SDDMM_SHORT_ROWS_PREFETCH`].
pub fn sddmm_prefetch_distance(k: usize, hw_prefetches_rows: bool) -> Option<i64> {
    if hw_prefetches_rows && SDDMM_SHORT_ROWS_PREFETCH.contains(&k) {
        Some(SDDMM_SHORT_ROWS_PREFETCH_DISTANCE)
    } else if k >= SDDMM_PREFETCH_MIN_FEAT
        || (!hw_prefetches_rows && k >= SDDMM_SPECIALIZE_MIN_FEAT)
    {
        Some(SDDMM_PREFETCH_DISTANCE)
    } else {
        None
    }
}

/// Mean stored entries per row from which SpMV's built-in schedule runs each row's sum as
/// vector lanes (gathers of `x`, reassociated). `lacuna bench`, one thread, vector lanes over
/// the scalar row loop side by side, on the 13 matrices of `../shared/matrices` above 100K
/// entries and anchors.py's generated families: faster from 10 per row up (bcsstk16 0.48,
/// ego-Facebook 0.44, citeseer_features (32 per row) 0.66, cage10 (13) 0.62–0.95, cage11
/// 0.91, email-Enron (10) 0.92, soc-Slashdot0902 0.96, er-mid (10) 0.44, rmat-mid 0.90,
/// block4-mid 0.84), except cit-HepPh (12 per row: 1.15); about even to slower below 8
/// (lap3d-mid (7) 1.01, lap2d-mid (5) 0.93, wing (4) 1.03, ct2010, de2010 and vt2010 (5)
/// 1.08–1.13). It was 32 until session 11, set on three matrices.
pub const SPMV_VECTOR_MIN_ROW: f64 = 8.0;

/// [`row_length_changes`] (thousandths) from which SpMV's built-in schedule, on a host with
/// vector masks, runs every row as masked vector lanes ([`SPMV_MASKED_REGISTERS`] registers per
/// step, no scalar remainder), whatever the rows' mean length. `lacuna bench`, one thread, side
/// by side with the rule before (session 12, Xeon with AVX-512; ms): ct2010 (840‰) 0.50 →
/// 0.29, de2010 0.17 → 0.09, vt2010 0.23 → 0.13, cit-HepPh (940‰) 0.39 → 0.29,
/// email-Enron (660‰) 0.33 → 0.25, soc-Slashdot0902 (780‰) 0.87 → 0.65, citeseer_features
/// (950‰) 0.042 → 0.036, ego-Facebook (980‰) 0.072 → 0.061, EX5 (610‰) 0.116 → 0.111; below
/// it, rows of steady length gain nothing or lose: wing (0‰, every row 4 long) 0.14 → 0.23,
/// cage10 (220‰) 0.060 → 0.064, cage11 (250‰) and bcsstk16 (230‰) even.
pub const SPMV_MASKED_MIN_ROW_CHANGES: usize = 500;

/// Mean stored entries per row from which SpMV's built-in schedule, on a host whose masked
/// lanes lose on long rows (`DataStats::masks_long_rows` false: AMD Zen), runs rows as a full
/// vector body with a scalar remainder instead of masked lanes; with an `x` of at most
/// [`SPMV_L1_GATHER_BYTES`], from [`SPMV_VECTOR_MIN_ROW`]. `lacuna bench`, one thread, znver5
/// (session 13; ms, vector body / masked lanes): `x` in L1: citeseer_features (32 per row,
/// `x` 30 KB) 0.0295 / 0.0408, ego-Facebook (44, 32 KB) 0.047 / 0.066, bcsstk16 (59, 39 KB)
/// 0.081 / 0.108, random 4000 columns (32 KB) with 12, 24 and 40 per row 0.042 / 0.064, 0.038
/// / 0.055, 0.046 / 0.063, but 6 per row 0.131 / 0.085; `x` beyond L1: EX5 (45, 52 KB) 0.085
/// / 0.111, random 8000 columns (64 KB) with 40 per row 0.102 / 0.135, but with 24 per row
/// 0.133 / 0.117 and 12 per row 0.228 / 0.136, random 20000 columns (160 KB) with 32 per row
/// 0.366 / 0.293 and 48 per row 0.474 / 0.457; cit-HepPh (12), email-Enron (10) and
/// soc-Slashdot0902 (12) 0.469 / 0.332, 0.345 / 0.217, 0.892 / 0.685.
pub const SPMV_UNMASKED_MIN_ROW: f64 = 40.0;

/// Bytes of `x` up to which SpMV's gathers are served by L1 (48 KiB on Zen 5) for
/// [`SPMV_UNMASKED_MIN_ROW`]'s rule.
pub const SPMV_L1_GATHER_BYTES: usize = 40 << 10;

/// Mean stored entries per row from which SpMV's unmasked vector rows, on a host with 512-bit
/// vectors (AVX-512), fill them: `annotate(j, lanes, 8)` for f64, where a row's lanes otherwise
/// stay 256 bits wide. `lacuna bench`, side by side, min of 300 runs (session 13, znver5, ms;
/// 4 lanes / 8 lanes), one thread: EX5 (45 per row) 0.087 / 0.079, bcsstk16 (59) 0.080 /
/// 0.074, ego-Facebook (44) 0.049 / 0.046; two threads 0.044 / 0.042, 0.042 / 0.039, 0.026 /
/// 0.025; even on citeseer_features (32) and a random 200k × 200k with 48 per row (`x` beyond
/// L2); cage10 (13) 0.045 / 0.052. On a Xeon (session 12) 8 lanes were within noise on
/// bcsstk16 and EX5.
pub const SPMV_WIDE_LANES_MIN_ROW: f64 = 40.0;

/// Vector registers of lanes per step of SpMV's masked rows (LLVM's interleave count): 2 over
/// 1 and 4 on the matrices above (ct2010 0.38 / 0.29 / 0.41 ms; cage11 0.26 / 0.26 / 0.29).
pub const SPMV_MASKED_REGISTERS: i64 = lacuna_tuning::MASKED_REGISTERS;

/// Bytes of `x` from which SpMV's vectorized rows also prefetch their scattered gathers
/// ([`SPMV_PREFETCH_MIN_SCATTERED`]): rmat-large (`x` 17 MB), one thread, side by side: vector
/// lanes 117–170 ms, with the prefetch 87–96 ms (scalar with prefetch 87 ms); with `x` of
/// 0.6–1.6 MB the vector lanes alone are fastest (er-mid 2.4–2.6 ms, with prefetch 2.8–3.2,
/// scalar with prefetch 2.9; soc-Slashdot0902 1.17–1.53, 1.69–2.14 and 1.56). Between 1.6 and
/// 17 MB nothing was measured; 8 MiB splits the gap. From there rows shorter than
/// [`SPMV_UNMASKED_MIN_ROW`] run scalar, prefetched: rmat-large, session 17 (znver5, min of
/// 15, ms, one / two threads, two alternating runs), masked lanes 41.1–43.1 / 21.5–22.7,
/// scalar 39.5–40.7 / 19.8–20.4, both prefetching [`SPMV_PREFETCH_DISTANCE`] ahead.
pub const SPMV_VECTOR_PREFETCH_MIN_BYTES: usize = 8 << 20;

/// Bytes of `x` from which SpMV's built-in schedule (rows not vectorized) prefetches its
/// scattered gathers (see [`SPMV_PREFETCH_MIN_SCATTERED`]) [`SPMV_PREFETCH_DISTANCE`] entries
/// ahead, into the following rows: the 512 KiB L2 of these machines. `lacuna bench`, built-in
/// and prefetching side by side, one thread: uniform random 100k × 100k with 10 per row (`x`
/// 800 KB) 1.81 → 1.36 ms, 1m (8 MB) 35.4 → 16.7 ms, rmat-large (2.1M rows, 28.5M entries)
/// 126 → 79 ms; with `x` within L2 prefetching only costs (cage10 0.077 → 0.162 ms, random
/// 30k: 0.22 → 0.32 ms), and so it does on a band (a C loop on lap3d-large: 13.7 → 17.5 ms).
pub const SPMV_PREFETCH_MIN_BYTES: usize = 512 << 10;

/// [`scattered_gathers`] (thousandths) from which SpMV's built-in schedule prefetches.
pub const SPMV_PREFETCH_MIN_SCATTERED: usize = 500;

/// Entries ahead that SpMV's built-in prefetch reads `J.indices`. A C loop on rmat-large (an
/// earlier, slower host): 16 → 123 ms, 32 → 98, 64 → 91, 128 → 87, 256 → 92, none → 134.
/// On the znver5 VM (session 17, `lacuna bench`, min of 15, ms, one / two threads, two
/// alternating runs): the built-in masked rows with 64 → 58–62 / 27–30, 128 → 49–50 / 24.3–24.6,
/// 256 → 42.8–43.0 / 21.3–21.7, 512 → 43.5–43.9 / 22.3–22.4; scalar rows 128 → 47.6–48.0 / 23.1–23.6,
/// 256 → 40.3–43.3 / 20.2–21.8, 512 → 40.0–40.1 / 20.4–20.6, 1024 → 39.6–40.7 / 20.3–20.6,
/// none → 60–69. 256 entries are at most 16 KiB of lines in flight, well within L1.
pub const SPMV_PREFETCH_DISTANCE: i64 = 256;

/// SpMM's rows of `C` accumulated in registers and stored with streaming stores (see
/// [`SPMM_STREAM_MIN_BYTES`]), after the feature loop's split (`k.0`) and reorder: the row's
/// cache starts at zero in place of `C`'s init, the feature chunks are unrolled so that the
/// cache's vectors stay in registers, and the row is written once, streamed.
pub fn spmm_stream_trace() -> Vec<lacuna_schedule::Instruction> {
    let l = SpmmLoops::STORED;
    lacuna_schedule::stream::streamed_rows_trace(l.block, "C", l.row, "k.0")
}

/// The built-in schedule for a kernel run without one, chosen from its inputs' statistics: the
/// outermost loop of its sparse iteration in parallel (balanced by stored entries) when the
/// sparse inputs hold at least [`PARALLEL_MIN_NNZ`] entries and the loop's iterations are
/// independent; `None` otherwise.
///
/// Kernel-specific parts, each kept only when the whole schedule applies:
/// - SpMM (`examples/spmm.ron`) with a feature width that is a multiple of 16 up to 64:
///   register blocking — the width specialized, the feature loop split by 16 with the outer
///   part moved out of the row's entries and the inner part unrolled, so that 16 accumulators
///   stay in registers across the row (measured 1.8× faster at k = 32 on cage10, one thread).
///   Wider multiples of 32 (k = 96 .. 512) split by 32 and run the inner part as vector lanes
///   (four 8-lane registers of accumulators per pass over the row); on AVX-512 hosts, multiples
///   of 64 split by 64 where rows hold [`SPMM_WIDE_CHUNK_ROWS`] entries on average. With `B` beyond
///   [`SPMM_PREFETCH_MIN_BYTES`], the rows of `B` are prefetched (not on hosts whose hardware
///   prefetchers cover them, `DataStats::hw_prefetches_rows`: Zen 5)
///   [`SPMM_PREFETCH_DISTANCE`] entries ahead. With `C` of [`SPMM_STREAM_MIN_BYTES`] or
///   more (on AMD Zen an eighth of L3) in rows of [`SPMM_STREAM_MIN_ROW_BYTES`] or more, or
///   far beyond the last-level cache in rows of 32 or 64 features ([`spmm_streams`]), each row
///   is accumulated in registers and written once with streaming stores
///   ([`spmm_stream_trace`]). Where [`spmm_by_panels`] says so (wide
///   features, `B` beyond L2 gathered from far back, long runs per panel), `A` is stored in
///   column panels instead ([`spmm_panels_trace`]); otherwise, where [`spmm_by_rcm`] says so
///   (`B` beyond L2, far gathers that a reverse Cuthill–McKee order of the rows would save),
///   `A` is stored as `rcm` ([`spmm_rcm_trace`]).
/// - SDDMM (`examples/sddmm.ron`) vectorizes its feature reduction, which lets the lanes
///   reassociate the sum: results may differ from the serial order in the last bits. With a
///   feature width from [`SDDMM_SPECIALIZE_MIN_FEAT`] to [`SDDMM_SPECIALIZE_MAX_FEAT`], the
///   width is specialized and the rows of `W` are prefetched as [`sddmm_prefetch_distance`]
///   says.
/// - SpMV (`examples/spmv.ron`) with at least [`SPMV_VECTOR_MIN_ROW`] entries per row on
///   average vectorizes each row's sum (reassociated likewise), and prefetches scattered
///   gathers ([`SPMV_PREFETCH_MIN_SCATTERED`]) of an `x` of
///   [`SPMV_VECTOR_PREFETCH_MIN_BYTES`] or more. On a host with vector masks (AVX-512), rows
///   whose lengths change often ([`SPMV_MASKED_MIN_ROW_CHANGES`]) run as masked vector lanes
///   whatever their mean length, except on hosts where masked lanes lose on long rows (AMD
///   Zen): there rows of [`SPMV_UNMASKED_MIN_ROW`] or more, or of [`SPMV_VECTOR_MIN_ROW`] or
///   more gathering from an `x` within [`SPMV_L1_GATHER_BYTES`], keep the vector body with a
///   scalar remainder; such rows of [`SPMV_WIDE_LANES_MIN_ROW`] or more run 8 f64 lanes per
///   vector on AVX-512 hosts. With shorter rows whose gathers are
///   scattered over an `x` of [`SPMV_PREFETCH_MIN_BYTES`] or more, it prefetches them
///   [`SPMV_PREFETCH_DISTANCE`] entries ahead, across rows. On AVX-512 Zen hosts, `A` is
///   stored as sliced ELL instead where [`sliced_rows`] says so, its rows run as vector lanes
///   ([`spmv_sell_trace`]).
pub fn default_schedule(p: &Program, inputs: &BTreeMap<String, Input>) -> Option<ScheduleFile> {
    builtin_schedule(p, &DataStats::of(inputs))
}

/// [`default_schedule`] from the statistics it reads.
pub fn builtin_schedule(p: &Program, data: &DataStats) -> Option<ScheduleFile> {
    let file = builtin_layout(p, data);
    if p.name == "spmv" && data.iso_values && stores_entries_only(p, "A") {
        return with_iso_values(p, file, "A");
    }
    file
}

/// Whether buffer `name` of `p` stores exactly the matrix's entries in its values: no
/// encoding (the sparse axes' CSR), or an encoding without blocks, dense inner levels, `n:m`
/// slots or loose segments (CSR, CSC, COO, DCSR), which all may hold explicit zeros. The
/// statistics see the entries only: storage with zeros besides equal entries is not iso.
fn stores_entries_only(p: &Program, name: &str) -> bool {
    let Some(b) = p.buffer(name) else {
        return false;
    };
    let Some(text) = &b.encoding else {
        return true;
    };
    let Ok(enc) = lacuna_ir::encoding::parse_format(text) else {
        return false;
    };
    enc.is_permutation()
        && enc
            .lvl_types()
            .iter()
            .skip(1)
            .all(|t| t.is_compressed() || t.is_singleton())
}

/// `file` (the empty schedule for `None`) with `buffer`'s values stored once (`iso_values`),
/// after its `decompose_format`s, where the schedule replays with it; `file` otherwise (a
/// layout that pads, `bsr` or `dia`, keeps its values).
///
/// A kernel reading a matrix of equal values (a `pattern` file) then loads only its structure.
/// `lacuna bench`, min of three alternating rounds of 200, one / two threads, the Zen 4 guest
/// of session 33, SpMV's sliced ELL `(sell 8 1024)` without → with `iso_values` on the shared
/// `pattern` matrices: soc-Slashdot0902 0.68 / 0.70 of the time, cit-HepPh 0.81 / 0.81,
/// email-Enron 0.86 / 0.80, EX5 0.85 / 0.90, citeseer_features 0.81 / 1.01, ego-Facebook
/// 1.08 / 0.94; rows of CSR (wing) 0.94 / 0.97.
pub fn with_iso_values(
    p: &Program,
    file: Option<ScheduleFile>,
    buffer: &str,
) -> Option<ScheduleFile> {
    use lacuna_schedule::Instruction as I;
    let mut trace = file.as_ref().map(|f| f.trace.clone()).unwrap_or_default();
    let at = trace
        .iter()
        .rposition(|i| matches!(i, I::DecomposeFormat { .. }))
        .map_or(0, |i| i + 1);
    trace.insert(
        at,
        I::IsoValues {
            buffer: buffer.into(),
        },
    );
    replayable(p, trace).or(file)
}

/// [`builtin_schedule`] before `iso_values`: the layout and loops from the statistics.
fn builtin_layout(p: &Program, data: &DataStats) -> Option<ScheduleFile> {
    use lacuna_schedule::Instruction as I;
    let nnz = data.nnz;
    let mut trace = Vec::new();
    if p.name == "spmm" && p.params.iter().any(|x| x == "feat") && spmm_by_panels(data) {
        let k = data.feat.unwrap_or_default();
        let chunk = if data.vector_masks && k.is_multiple_of(64) {
            64
        } else {
            32
        };
        let width = spmm_panel_width(data.l2_bytes, k);
        if let Some(file) = replayable(
            p,
            spmm_panels_trace(width, k, chunk, nnz >= PARALLEL_MIN_NNZ),
        ) {
            return Some(file);
        }
    }
    if p.name == "spmm" && p.params.iter().any(|x| x == "feat") {
        // Whether the rows of `C` (k features of f64) stream: see `spmm_streams`.
        let stream = data
            .feat
            .is_some_and(|k| spmm_streams(data, k.saturating_mul(std::mem::size_of::<f64>())));
        let blocking = data.feat.and_then(|k| {
            if k == 32 && data.whole_width_blocks {
                Some((k, 32, true))
            } else if k % 16 == 0 && (16..=64).contains(&k) {
                // Streamed short rows run as 32 vector lanes (SPMM_STREAM_SHORT_ROW_BYTES).
                Some(if stream {
                    (k, 32, true)
                } else {
                    (k, 16, false)
                })
            } else if k % 32 == 0 && (96..=512).contains(&k) {
                let wide = data.vector_masks
                    && k % 64 == 0
                    && SPMM_WIDE_CHUNK_ROWS.contains(&data.mean_row());
                Some((k, if wide { 64 } else { 32 }, true))
            } else {
                None
            }
        });
        if let Some((k, chunk, vector)) = blocking {
            let prefetch =
                data.gathered_bytes >= SPMM_PREFETCH_MIN_BYTES && !data.hw_prefetches_rows;
            let blocks = by_blocks(data)
                .and_then(|b| bsr_chunk(b, k, data.vector_f64s).map(|chunk| (b, chunk)));
            if let Some((b, bsr_chunk)) = blocks {
                let trace = spmm_bsr_trace(b, k, bsr_chunk, nnz >= PARALLEL_MIN_NNZ);
                if let Some(file) = replayable(p, trace) {
                    return Some(file);
                }
            }
            if spmm_by_rcm(data) {
                let trace =
                    spmm_rcm_trace(k, chunk, vector, prefetch, stream, nnz >= PARALLEL_MIN_NNZ);
                if let Some(file) = replayable(p, trace) {
                    return Some(file);
                }
            }
            trace.extend(spmm_rows_trace(
                &SpmmLoops::STORED,
                k,
                chunk,
                vector,
                prefetch,
            ));
            if stream {
                // Only where it applies (the init folds into the cache), the rest kept either way.
                let mut with = trace.clone();
                with.extend(spmm_stream_trace());
                if Schedule::replay(p, &with).is_ok() {
                    trace = with;
                }
            }
        }
    }
    if p.name == "sddmm" && p.params.iter().any(|x| x == "feat") {
        let fixed = data
            .feat
            .filter(|k| (SDDMM_SPECIALIZE_MIN_FEAT..=SDDMM_SPECIALIZE_MAX_FEAT).contains(k));
        if let Some(k) = fixed {
            trace.push(I::Specialize {
                param: "feat".into(),
                value: k as u64,
            });
        }
        // The dot product over features as vector lanes (reassociated: 2.8× at k = 32 on
        // cage10, one thread).
        trace.push(I::Vectorize {
            r#loop: "sddmm:k".into(),
        });
        let distance = fixed.and_then(|k| sddmm_prefetch_distance(k, data.hw_prefetches_rows));
        if let Some(value) = distance {
            trace.push(I::Annotate {
                r#loop: "sddmm:j".into(),
                key: "prefetch".into(),
                value,
            });
        }
    }
    let scalar_gathers = data.gathered_bytes <= SPMV_SCALAR_GATHER_MAX_BYTES;
    if p.name == "spmv" && by_diagonals(data) {
        // No gathers: rows and columns are computed. The diagonal loop's trip count is the
        // matrix's (see `lacuna_schedule::lanes::specialize_diagonals`).
        let mut trace = spmv_lanes_trace(SPMV_DIA, nnz >= PARALLEL_MIN_NNZ, false);
        trace.insert(
            1,
            lacuna_schedule::lanes::specialize_diagonals("A", data.diagonals as u64),
        );
        if let Some(file) = replayable(p, trace) {
            return Some(file);
        }
    }
    if let Some(b) = spmv_by_blocks(data).filter(|_| p.name == "spmv") {
        if let Some(file) = replayable(p, spmv_bsr_trace(b, nnz >= PARALLEL_MIN_NNZ)) {
            return Some(file);
        }
    }
    if p.name == "spmv" && by_panels(data) {
        let trace = spmv_panels_trace(spmv_panel_width(data), nnz >= PARALLEL_MIN_NNZ);
        if let Some(file) = replayable(p, trace) {
            return Some(file);
        }
    }
    if p.name == "spmv" && sliced_rows(data) {
        if let Some(file) = replayable(p, spmv_sell_trace(nnz >= PARALLEL_MIN_NNZ, scalar_gathers))
        {
            return Some(file);
        }
    }
    if p.name == "spmv" {
        // Long rows, or rows gathering from L1, lose with masked lanes on some hosts.
        let unmasked = !data.masks_long_rows
            && (data.mean_row() >= SPMV_UNMASKED_MIN_ROW
                || (data.gathered_bytes <= SPMV_L1_GATHER_BYTES
                    && data.mean_row() >= SPMV_VECTOR_MIN_ROW));
        // Rows shorter than that scattering their gathers over an `x` beyond the caches run
        // scalar, prefetched (see [`SPMV_VECTOR_PREFETCH_MIN_BYTES`]).
        let scalar_far = data.scattered_permille >= SPMV_PREFETCH_MIN_SCATTERED
            && data.gathered_bytes >= SPMV_VECTOR_PREFETCH_MIN_BYTES
            && data.mean_row() < SPMV_UNMASKED_MIN_ROW;
        let masked = data.vector_masks
            && !unmasked
            && !scalar_far
            && data.row_changes_permille >= SPMV_MASKED_MIN_ROW_CHANGES;
        let vector = !scalar_far && (masked || data.mean_row() >= SPMV_VECTOR_MIN_ROW);
        if vector {
            trace.push(I::Vectorize {
                r#loop: "spmv:j".into(),
            });
        }
        if masked {
            trace.push(I::Annotate {
                r#loop: "spmv:j".into(),
                key: "masked".into(),
                value: SPMV_MASKED_REGISTERS,
            });
        } else if vector && data.vector_masks && data.mean_row() >= SPMV_WIDE_LANES_MIN_ROW {
            trace.push(I::Annotate {
                r#loop: "spmv:j".into(),
                key: "lanes".into(),
                value: 8,
            });
        }
        if vector && !masked && scalar_gathers {
            // A masked loop's gathers stay gathers anyway (see `lacuna_target`'s gather.rs).
            trace.push(I::Annotate {
                r#loop: "spmv:j".into(),
                key: "scalar_gathers".into(),
                value: 1,
            });
        }
        // Vector lanes keep more gathers in flight: they want a prefetch only further out.
        let prefetch_from = if vector {
            SPMV_VECTOR_PREFETCH_MIN_BYTES
        } else {
            SPMV_PREFETCH_MIN_BYTES
        };
        if data.scattered_permille >= SPMV_PREFETCH_MIN_SCATTERED
            && data.gathered_bytes >= prefetch_from
        {
            trace.push(I::Annotate {
                r#loop: "spmv:j".into(),
                key: "prefetch".into(),
                value: SPMV_PREFETCH_DISTANCE,
            });
        }
    }
    if nnz >= PARALLEL_MIN_NNZ {
        trace.extend(
            parallel_rows_schedule(p)
                .map(|s| s.trace)
                .unwrap_or_default(),
        );
    }
    (!trace.is_empty())
        .then(|| replayable(p, trace))
        .flatten()
        .or_else(|| {
            (nnz >= PARALLEL_MIN_NNZ)
                .then(|| parallel_rows_schedule(p))
                .flatten()
        })
}

/// The names a schedule of SpMM's row iteration refers to: the block, and its row, entry and
/// feature loops.
pub struct SpmmLoops {
    /// The sparse iteration's block.
    pub block: &'static str,
    /// The row loop.
    pub row: &'static str,
    /// The loop over a row's entries.
    pub entries: &'static str,
    /// The feature loop.
    pub feature: &'static str,
}

impl SpmmLoops {
    /// `examples/spmm.ron` over `A` as stored.
    pub const STORED: SpmmLoops = SpmmLoops {
        block: "spmm",
        row: "spmm:i",
        entries: "j",
        feature: "spmm:k",
    };
    /// `examples/spmm.ron` after a decomposition into one part (`rcm`, `(panels w)`): the
    /// part's rows.
    pub const PART: SpmmLoops = SpmmLoops {
        block: "spmm_p0",
        row: "spmm_p0:i.p0",
        entries: "j.p0",
        feature: "spmm_p0:k",
    };
}

/// SpMM's register blocking over the loops `l`: the feature width `k` specialized, its loop
/// split by `chunk` with the outer part (`k.0`) moved out of the row's entries and the inner
/// part (`k.1`) run as vector lanes (`vector`) or unrolled, so that the row's accumulators stay
/// in registers across its entries; where `prefetch`, the rows of `B` prefetched
/// [`SPMM_PREFETCH_DISTANCE`] entries ahead.
pub fn spmm_rows_trace(
    l: &SpmmLoops,
    k: usize,
    chunk: u64,
    vector: bool,
    prefetch: bool,
) -> Vec<lacuna_schedule::Instruction> {
    use lacuna_schedule::Instruction as I;
    let mut trace = feature_chunks(l.feature, k, chunk).to_vec();
    trace.extend([
        I::Reorder {
            loops: vec!["k.0".into(), l.entries.into()],
        },
        if vector {
            I::Vectorize {
                r#loop: "k.1".into(),
            }
        } else {
            I::Unroll {
                r#loop: "k.1".into(),
            }
        },
    ]);
    if prefetch {
        trace.push(I::Annotate {
            r#loop: l.entries.into(),
            key: "prefetch".into(),
            value: SPMM_PREFETCH_DISTANCE,
        });
    }
    trace
}

/// The block edges the built-in schedules try for BSR, largest first (see [`whole_blocks`]).
pub const BSR_BLOCKS: [usize; 3] = [4, 3, 2];

/// Slots per thousand entries up to which the built-in schedules store `A` as BSR
/// ([`whole_blocks`], [`by_blocks`]); measured on SpMM. Each block's rows of `C` stay in registers and each row of `B` a block
/// reads is loaded once for all its rows, but every slot costs a multiply-add, padding too.
/// `lacuna bench`, k = 32, one thread, min of 30, ms (session 28, Xeon guest), CSR's built-in
/// schedule → [`spmm_bsr_trace`]: bcsstk16 (3×3 blocks of its 3 degrees of freedom per node:
/// fill 1.02 at b = 3, 1.25 at 2, 1.72 at 4) 0.34 → 0.27 (b = 3), 0.32 (2), 0.46 (4); bcsstk13
/// (1.61 at 2, 2.03 at 3) 0.103 → 0.117 (2), 0.131 (3).
pub const BSR_MAX_FILL: usize = 1100;

/// Mean stored entries per row from which the built-in schedules store whole blocks as BSR
/// ([`by_blocks`]; SpMV's measurements are at [`spmv_bsr_trace`]). For SpMM: shorter rows reuse a loaded row of `B` too little to pay for `C`'s
/// separate init and its sums added into it (CSR's rows are set once, streamed where `C` is
/// large). `lacuna bench`, min of 10 in two rounds alternating, ms (session 28, Xeon guest),
/// CSR's built-in schedule → [`spmm_bsr_trace`], one / two threads, on generated matrices of
/// dense blocks along a band: 60 entries per row (6000 rows of 2×2, 3×3 or 4×4 blocks) k = 128
/// 0.53–0.57 / 0.59–0.62, k = 32 0.80–0.90 / 1.01–1.07; 60000 rows of 3×3, k = 128 0.62 / 0.65,
/// k = 32 1.00 / 1.02; bcsstk16 (59) 0.60 / 0.64 and 0.70 / 0.84. With 14–28 entries per row
/// BSR lost: 6000 rows of 3×3 (21) 1.32 / 1.27 at k = 128, 1.07 / 1.31 at k = 32; 60000 rows of
/// 2×2, 3×3, 4×4 (14, 21, 28) 1.44–2.26 at k = 128, 1.21–1.49 at k = 32.
pub const BSR_MIN_ROW: f64 = 40.0;

/// Mean stored entries per row from which SpMV's built-in schedule stores whole blocks as BSR
/// ([`spmv_by_blocks`], [`spmv_bsr_trace`]): each block's entries share one column index and
/// each element of `x` it reads is loaded once for its rows. `lacuna bench`, min of 30 in two
/// rounds, ms, one / two threads (session 32, AMD Zen 4 guest, with SLP's strided gathers gone:
/// `lacuna_target`'s `indexed.rs`), the built-in schedule before (row by row or sliced ELL) →
/// BSR, on generated matrices of random dense blocks: 2×2 blocks, 16 per row (200K rows) 2.44
/// / 1.96 → 1.96 / 1.30, 32 per row 1.72 / 0.97 → 1.78 / 1.01 (even); 3×3, 18 per row 2.59 /
/// 1.25 → 1.97 / 1.05; 4×4, 16 per row 3.30 / 1.64 → 2.19 / 0.97; anchors.py's block4-mid
/// (4×4, 27.6 per row, 2.1M entries) 0.82–1.19 / 0.40–0.44 → 0.72–0.86 / 0.31–0.37 and
/// block4-large (23.8M entries, beyond L3) 12.5–16.5 / 9.5–11.2 → 10.9–12.1 / 7.7–8.1. Shorter
/// rows were not measured.
pub const SPMV_BSR_MIN_ROW: f64 = 16.0;

/// Mean stored entries per row from which [`DataStats::block`] is looked for: the lower of
/// [`BSR_MIN_ROW`] (SpMM) and [`SPMV_BSR_MIN_ROW`].
pub const BLOCKS_MIN_ROW: f64 = if SPMV_BSR_MIN_ROW < BSR_MIN_ROW {
    SPMV_BSR_MIN_ROW
} else {
    BSR_MIN_ROW
};

/// The block edge of BSR for the 2-D matrix `a`: the first of [`BSR_BLOCKS`] whose
/// blocks inside the matrix (those `(+ (bsr b) remainder)` stores) hold its entries with at most
/// [`BSR_MAX_FILL`] slots per thousand entries, and hold nearly all of them (the rest, in
/// the last rows and columns, runs as CSR); 0 where none does.
pub fn whole_blocks(a: &CooTensor) -> usize {
    let (Some(r), Some(c), &[rows, cols]) = (a.coords.first(), a.coords.get(1), &a.shape[..])
    else {
        return 0;
    };
    let nnz = a.nnz().min(r.len()).min(c.len());
    BSR_BLOCKS
        .into_iter()
        .find(|&b| {
            let within = ((rows / b) * b, (cols / b) * b);
            let (blocks, entries) = count_blocks(&r[..nnz], &c[..nnz], b, within);
            let slots = blocks.saturating_mul(b * b).saturating_mul(1000);
            entries > 0
                && entries.saturating_mul(100) >= nnz.saturating_mul(99)
                && slots <= entries.saturating_mul(BSR_MAX_FILL)
        })
        .unwrap_or(0)
}

/// The block edge SpMM's built-in schedule stores `A` in as BSR ([`spmm_bsr_trace`]):
/// [`DataStats::block`], where rows hold [`BSR_MIN_ROW`] entries or more on average.
pub fn by_blocks(data: &DataStats) -> Option<usize> {
    (data.block > 0 && data.mean_row() >= BSR_MIN_ROW).then_some(data.block)
}

/// The block edge SpMV's built-in schedule stores `A` in as BSR ([`spmv_bsr_trace`]):
/// [`DataStats::block`], where rows hold [`SPMV_BSR_MIN_ROW`] entries or more on average.
pub fn spmv_by_blocks(data: &DataStats) -> Option<usize> {
    (data.block > 0 && data.mean_row() >= SPMV_BSR_MIN_ROW).then_some(data.block)
}

/// The feature chunk of SpMM's BSR register blocking ([`spmm_bsr_trace`]) of `block` rows at
/// feature width `k` on a host whose vector registers hold `vector_f64s` f64 values
/// ([`lacuna_target::host_vector_f64s`]; 0 when unknown, read as AVX-512's 256): the largest of
/// 32, 16, 8 and 4 that divides `k` and keeps the block's accumulators (`block` rows of it)
/// within half of the registers, the rest left to the rows of `B` and the block's values;
/// `None` where none does. With AVX-512 that is 32 (16 where `k` is not a multiple of 32) for
/// blocks up to 4 rows; with AVX2, 16 for 2 rows and 8 for 3 or 4. `lacuna bench`, bcsstk16
/// (3×3 blocks) at k = 32, one / two threads, min of 20, ms (session 29, AMD EPYC Zen 3 guest,
/// AVX2): chunk 32 (24 registers of sums: they spill) 1.27 / 0.69, 16 0.91 / 0.44, 8 0.76 /
/// 0.39.
pub fn bsr_chunk(block: usize, k: usize, vector_f64s: usize) -> Option<u64> {
    let room = if vector_f64s == 0 { 256 } else { vector_f64s } / 2;
    [32, 16, 8, 4]
        .into_iter()
        .find(|&c| k.is_multiple_of(c) && block.saturating_mul(c) <= room)
        .map(|c| c as u64)
}

/// SpMM's schedule on `A` as `(+ (bsr block) remainder)`: the feature width `k` specialized and
/// split by `chunk` (vector lanes), each block's columns then rows unrolled inside a block row's
/// blocks, the block row's rows of `C` summed in registers ([`cached_rows_trace`] at the block
/// row) — each row of `B` a block reads loaded once for the block's rows — and, where
/// `parallel`, the block rows in parallel. No range checks: BSR's block rows and columns tile
/// the matrix ([`lacuna_stage1::Tiles`]). The remainder (entries in the last rows and columns
/// outside whole blocks) runs plainly.
///
/// [`cached_rows_trace`]: lacuna_schedule::stream::cached_rows_trace
pub fn spmm_bsr_trace(
    block: usize,
    k: usize,
    chunk: u64,
    parallel: bool,
) -> Vec<lacuna_schedule::Instruction> {
    use lacuna_schedule::Instruction as I;
    let mut trace = vec![I::DecomposeFormat {
        buffer: "A".into(),
        into: format!("(+ (bsr {block}) remainder)"),
    }];
    trace.extend(feature_chunks("spmm_p0:k", k, chunk));
    trace.extend(bsr_block_order(&["k.0"]));
    trace.push(I::Vectorize {
        r#loop: "k.1".into(),
    });
    trace.extend(lacuna_schedule::stream::cached_rows_trace(
        "spmm_p0", "C", "ib.p0", "k.0",
    ));
    if parallel {
        // `C`'s init, a pass of its own before the blocks add into it, in parallel too: at two
        // threads, SpMM at k = 32 on 6000 rows of 3×3 blocks took 0.16 ms with it serial, 0.10
        // in parallel (CSR's built-in schedule: 0.11).
        trace.extend(["ib.p0", "spmm_init:i"].map(|l| I::Parallel { r#loop: l.into() }));
    }
    trace
}

/// A BSR part's blocks with their columns outside their rows (after the loops `before`, moved
/// out of the block row's blocks), both unrolled: what a column multiplies (an element of `x`,
/// a row of `B`) is loaded once for the block's rows.
fn bsr_block_order(before: &[&str]) -> Vec<lacuna_schedule::Instruction> {
    use lacuna_schedule::Instruction as I;
    let loops = before.iter().chain(&["jb.p0", "j.p0", "i.p0"]);
    vec![
        I::Reorder {
            loops: loops.map(|l| l.to_string()).collect(),
        },
        I::Unroll {
            r#loop: "i.p0".into(),
        },
        I::Unroll {
            r#loop: "j.p0".into(),
        },
    ]
}

/// SpMV's schedule on `A` as `(+ (bsr block) remainder)`: the block row's sums in a local cache
/// ([`cached_rows_trace`]'s, at the block row), factored over the block's columns across the
/// block row's blocks (`Rfactor` of `j.p0`, crossing the block's row loop: one partial sum per
/// row and column of the block, summed once after the block row), the block's rows unrolled
/// and its columns run as vector lanes where the block edge is a power of two (one load of
/// `x`'s `block` elements and one multiply-add per block row, `block` independent chains),
/// unrolled otherwise (3×3: LLVM's vectors of three lanes spill); where `parallel`, the block
/// rows and `y`'s init in parallel; the remainder runs plainly. Unchecked indices, as
/// [`spmm_bsr_trace`]'s. The built-in schedule uses it where [`spmv_by_blocks`] says.
///
/// `lacuna bench`, min of 20–50 in two rounds alternating, one / two threads (session 34, Zen
/// 4 guest), the schedule before (each block's columns then rows unrolled, summed into the
/// block row's cache: LLVM's SLP vectorizer packed the block's rows into one vector, its
/// columns gathered from scalar loads, a chain of `block` multiply-adds per block) → this:
/// block4-large (anchors.py's, 23.8M entries) 11.2–11.5 / 7.3–7.5 → 8.8–8.9 / 6.4–7.0 ms;
/// block4-mid 0.70 / 0.32–0.46 → 0.52–0.67 / 0.26–0.35; anchors.py's block generator with 2×2
/// blocks, 128000 and 686000 rows, 1.00–1.02 / 0.39–0.65 → 0.76–0.90 / 0.30–0.44 and 6.9–7.2 /
/// 3.9–4.0 → 6.4 / 4.1–4.5; 3×3 blocks unrolled, 192000 and 648000 rows, 2.05 / 1.09–1.40 →
/// 1.94–2.07 / 0.99–1.34, 7.8–7.9 / 4.9 → 7.2–7.4 / 4.6–4.7; bcsstk16 0.080 / 0.042–0.048 →
/// 0.065–0.076 / 0.036–0.037. Vector lanes on 3×3 blocks: 1.2–1.8× the time.
/// Before that (session 28, Xeon guest), the built-in schedule before BSR (sliced ELL or vector
/// rows) → the schedule before this one, one / two threads: bcsstk16 (3×3 blocks, 59 entries
/// per row) 0.74 / 1.09 of the time; generated block matrices with 60 entries per row, 6000
/// rows of 2×2, 3×3, 4×4 blocks 0.74–0.90 / 0.85–1.01, 60000 rows of 3×3 0.77 / 0.81.
///
/// [`cached_rows_trace`]: lacuna_schedule::stream::cached_rows_trace
pub fn spmv_bsr_trace(block: usize, parallel: bool) -> Vec<lacuna_schedule::Instruction> {
    use lacuna_schedule::Instruction as I;
    let unroll = |l: &str| I::Unroll { r#loop: l.into() };
    let mut trace = vec![
        I::DecomposeFormat {
            buffer: "A".into(),
            into: format!("(+ (bsr {block}) remainder)"),
        },
        I::ReverseCacheWrite {
            block: "spmv_p0".into(),
            buffer: "y".into(),
            scope: "local".into(),
            at: Some("ib.p0".into()),
        },
        I::Rfactor {
            r#loop: "j.p0".into(),
        },
        unroll("i.p0"),
        if block.is_power_of_two() {
            I::Vectorize {
                r#loop: "j.p0".into(),
            }
        } else {
            unroll("j.p0")
        },
        unroll("i.p0.rf"),
        unroll("j.p0.rf"),
    ];
    if parallel {
        trace.extend(["ib.p0", "spmv_init:i"].map(|l| I::Parallel { r#loop: l.into() }));
    }
    trace
}

/// SpMM's feature width `k` specialized and its loop `feature` split by `chunk` (`k.0` outside,
/// `k.1` inside): the start of every register blocking of SpMM's built-in schedules.
fn feature_chunks(feature: &str, k: usize, chunk: u64) -> [lacuna_schedule::Instruction; 2] {
    use lacuna_schedule::Instruction as I;
    [
        I::Specialize {
            param: "feat".into(),
            value: k as u64,
        },
        I::Split {
            r#loop: feature.into(),
            factors: vec![None, Some(chunk)],
        },
    ]
}

/// Far gathers saved, in thousandths of `A`'s entries ([`DataStats::far_rows_permille`] less
/// [`DataStats::rcm_far_permille`]), from which SpMM's built-in schedule runs `A`'s rows in
/// reverse Cuthill–McKee order (see [`spmm_by_rcm`]).
pub const SPMM_RCM_MIN_GAIN: usize = 100;

/// Whether SpMM's built-in schedule stores `A` as `rcm` ([`spmm_rcm_trace`]): a `B` beyond L2
/// whose rows the stored order gathers from far back, where running `A`'s rows in reverse
/// Cuthill–McKee order (rows sharing columns one after another) would save
/// [`SPMM_RCM_MIN_GAIN`] thousandths of the gathers or more.
///
/// `lacuna bench`, min of 10 in two rounds alternating, ms, one / two threads, the built-in
/// schedule before → with this rule (session 27, Xeon guest with 2 MiB of L2 per core; far
/// gathers at k = 32 in stored → `rcm` order): k = 32, wing (893‰ → 395‰) 2.76 / 1.19 →
/// 1.84 / 1.10, ct2010 (475 → 209) 2.43 / 1.36 → 1.97 / 1.05, de2010 (429 → 208) 0.74 / 0.38 →
/// 0.57 / 0.36, cit-HepPh (401 → 296) 2.08 / 1.24 → 1.76 / 1.07; k = 128 (rows streamed before
/// and after) wing 15.2 / 6.42 → 12.3 / 6.08, ct2010 16.2 / 7.95 → 12.0 / 5.31, de2010 4.52 /
/// 2.47 → 3.41 / 1.78, cit-HepPh 12.4 / 5.67 → 9.81 / 4.71. Where the order saves little, the
/// row ids and `C`'s rows written out of order cost more than it saves: cage11 (306 → 271) as
/// `rcm` at k = 32 1.81 / 0.89 → 2.40 / 1.26, at k = 128 10.2 → 11.7 (one thread); vt2010
/// (239 → 215) about the same. The nine shared matrices the rule leaves alone kept their times
/// (0.94–1.10, noise).
///
/// On hosts with a fast L3 ([`DataStats::fast_l3`], AMD's Zen), `B` must exceed L3 and the
/// order save [`SPMM_RCM_FAST_L3_MIN_GAIN`]: there gathers from L3 cost little, and the row ids
/// and `C`'s rows written out of order cost more than the order saves. `lacuna bench`, min of
/// 20–30 in two rounds alternating, one / two threads (session 34, Zen 4 guest, 1 MiB of L2,
/// 32 MiB of L3), `rcm` (the rule before) → rows in stored order, ms: k = 32 (`B` 6–17 MB)
/// wing 4.84 / 2.17 → 3.47 / 1.60, ct2010 4.88 / 2.57 → 4.21 / 2.08, de2010 0.53 / 0.22 →
/// 0.47 / 0.21, cit-HepPh 2.78 / 1.58 → 2.02 / 0.80 (a second run, three rounds: 2.36 / 0.95 →
/// 2.27 / 0.99, even); k = 128 vt2010 (`B` 33 MB, saves 125‰)
/// 8.46 / 5.41 → 5.68 / 3.34, de2010 (25 MB) 5.65 / 3.43 → 6.14 / 3.33. `rcm` kept: k = 128
/// wing (64 MB, saves 331‰) 14.6 / 8.0 against 23.2 / 11.7 in stored order, ct2010 (69 MB,
/// 340‰) 13.1 / 7.3 against 15.3 / 9.9, cit-HepPh (35 MB, 156‰) 11.1 / 5.5 against 12.2 /
/// 6.8.
pub fn spmm_by_rcm(data: &DataStats) -> bool {
    let (beyond, min_gain) = match data.fast_l3_bytes() {
        Some(l3) => (l3, SPMM_RCM_FAST_L3_MIN_GAIN),
        None => (data.l2(), SPMM_RCM_MIN_GAIN),
    };
    data.feat
        .is_some_and(|k| k.is_multiple_of(16) && (16..=512).contains(&k))
        && data.gathered_bytes > beyond
        && data.far_rows_permille.saturating_sub(data.rcm_far_permille) >= min_gain
}

/// Far gathers saved, in thousandths, from which SpMM's built-in schedule runs `A`'s rows in
/// reverse Cuthill–McKee order on a host with a fast L3 (see [`spmm_by_rcm`]): between vt2010's
/// 125 (lost 1.5×) and cit-HepPh's 156 (gained 1.1×) at k = 128 on the Zen 4 guest.
pub const SPMM_RCM_FAST_L3_MIN_GAIN: usize = 150;

/// SpMM's schedule on `A` as `rcm` (every row once, in reverse Cuthill–McKee order, with its
/// row id): [`spmm_rows_trace`]'s register blocking over the part's rows, each row of `C`
/// summed in registers from zero (its init folded in) and stored once — with streaming stores
/// where `stream` — and, where `parallel`, the rows in parallel (distinct rows of `C`: the row
/// ids are a permutation).
pub fn spmm_rcm_trace(
    k: usize,
    chunk: u64,
    vector: bool,
    prefetch: bool,
    stream: bool,
    parallel: bool,
) -> Vec<lacuna_schedule::Instruction> {
    use lacuna_schedule::Instruction as I;
    let l = SpmmLoops::PART;
    let mut trace = vec![I::DecomposeFormat {
        buffer: "A".into(),
        into: "rcm".into(),
    }];
    trace.extend(spmm_rows_trace(&l, k, chunk, vector, prefetch));
    let rows = if stream {
        lacuna_schedule::stream::streamed_rows_trace
    } else {
        lacuna_schedule::stream::cached_rows_trace
    };
    trace.extend(rows(l.block, "C", l.row, "k.0"));
    if parallel {
        trace.push(I::Parallel {
            r#loop: l.row.into(),
        });
    }
    trace
}

/// `trace` as a schedule file of `p`, if it replays on `p`.
fn replayable(p: &Program, trace: Vec<lacuna_schedule::Instruction>) -> Option<ScheduleFile> {
    let file = ScheduleFile {
        version: 1,
        kernel: p.name.clone(),
        trace,
    };
    Schedule::replay(p, &file.trace).is_ok().then_some(file)
}

/// Whether SpMV's built-in schedule stores `A` by diagonal ([`SPMV_DIA`]): when its entries lie
/// on at most [`SPMV_DIA_MAX_DIAGONALS`] diagonals that hold at least 1 /
/// [`SPMV_DIA_MAX_FILL`] of their slots (stencils, banded matrices numbered along the band).
/// Its rows then run as vector lanes that read `x` contiguously, without column indices:
/// `lacuna bench`, min of 100 (20 on the large one), ms, one / two threads, built-in
/// (sliced ELL or row by row) → `(dia 16 8)` (session 16, znver5): lap3d-mid (7 diagonals,
/// every slot but the border's full) 0.89 / 0.44 → 0.35 / 0.18, lap2d-mid (5) 1.14 / 0.58 →
/// 0.40 / 0.19, lap3d-large (19M entries, `x` 22 MB) 13.2 / 7.5 → 8.1 / 5.6; block4-mid (43
/// diagonals, 1.59 slots per entry) 0.58 / 0.29 → 0.62 / 0.30 with `(dia 64 8)`. Storing each
/// block's sums instead of zeroing `y` first and adding them (`reverse_cache_write` after the
/// DIA part's own init): lap3d-mid 0.33–0.36 / 0.16–0.18 → 0.30–0.32 / 0.14–0.15, lap3d-large
/// 8.3 / 4.3 → 8.2 / 3.7.
pub fn by_diagonals(data: &DataStats) -> bool {
    let lanes = lacuna_schedule::lanes::LANES as usize;
    let slots = data
        .rows
        .div_ceil(lanes)
        .saturating_mul(lanes)
        .saturating_mul(data.diagonals);
    data.rows > 0
        && data.nnz > 0
        && (1..=SPMV_DIA_MAX_DIAGONALS).contains(&data.diagonals)
        && slots as f64 <= SPMV_DIA_MAX_FILL * data.nnz as f64
}

/// Whether SpMV's built-in schedule stores `A` in column panels ([`spmv_panels_trace`]): on
/// hosts where panels beat prefetched rows (not [`DataStats::prefetches_far_gathers`]: Zen 5),
/// rows shorter than [`SPMV_UNMASKED_MIN_ROW`] on average whose gathers scatter
/// ([`SPMV_PREFETCH_MIN_SCATTERED`]) over an `x` of [`spmv_panels_min_bytes`] or more.
pub fn by_panels(data: &DataStats) -> bool {
    !data.prefetches_far_gathers
        && data.rows > 0
        && data.nnz > 0
        && data.scattered_permille >= SPMV_PREFETCH_MIN_SCATTERED
        && data.gathered_bytes >= spmv_panels_min_bytes(data)
        && data.mean_row() < SPMV_UNMASKED_MIN_ROW
}

/// Bytes of `x` from which SpMV's built-in schedule stores a matrix with scattered gathers in
/// column panels (see [`by_panels`]), each pass over a panel gathering from an `x` slice of a
/// quarter of L2 ([`spmv_panel_width`]) instead of the whole `x` from the last-level cache.
/// `lacuna bench`, side by side, min of 8–20 runs, ms, one thread (session 24, Xeon guest with
/// 2 MiB of L2 per core), row by row with prefetch (the built-in schedule before) → `(panels
/// 65536)`: rmat-large (`x` 17 MB, 13.6 entries per row, half the rows empty) 131.6 → 79.6,
/// two threads 62.5 → 40.1; er-large (16 MB, 10 per row) 85.1 → 53.1, two threads 42.2 →
/// 32.7; a uniform random 1m × 1m with 10 per row (8 MB) 32.1 → 29.8; 500k (4 MB) 12.0 →
/// 19.1; 250k (2 MB) 3.6 → 6.3: a row falls into nearly as many panels as it has entries, and
/// each panel row costs its bounds, its row id and an update of `y`, which only far gathers
/// repay. Panel widths on rmat-large / er-large: 16384 columns 91.4 / 76.3, 32768 83.8 / 56.0,
/// 65536 77.6 / 53.7, 131072 83.8 / 77.2.
pub const SPMV_PANELS_MIN_BYTES: usize = 8 << 20;

/// Hot entries ([`DataStats::hot_permille`]) from which SpMV's gathers count as hub-heavy: on
/// hosts that size such panels by their L3 ([`DataStats::fast_l3`]), the panels then
/// start at an `x` of half of L3 and take a sixteenth of L3 each ([`spmv_panel_width`]). Most
/// gathers of a power-law graph hit its hubs' part of `x`, cached whatever the layout, while
/// each panel visits a row's entries in as many runs as the panels they fall into, each run
/// reading and writing its element of `y`: wider panels save those passes over `y`. `lacuna
/// bench`, min of 10–20 runs, ms, one / two threads (session 34, Zen 4 guest: 1 MiB of L2,
/// 32 MiB of L3), panels of 32768 columns (a quarter of L2, the rule before) → 262144 (a
/// sixteenth of L3): rmat-large (`x` 16 MiB, 616‰ hot) 141.6 / 67.1 → 81.7 / 42.2; widths
/// 65536 110.5 / 50.7, 131072 89.6 / 47.6, 524288 91.9 / 42.6, 1048576 109.6 / 54.1; rows one
/// by one with prefetch 99.6 / 49.9, sliced ELL 173.2 / 82.0. An R-MAT graph of scale 20 (`x`
/// 8 MiB, 699‰): panels of 32768 48.1 / 20.2, of 262144 35.2 / 17.5, rows with prefetch (the
/// rule's choice below half of L3) 33.6 / 16.3. Uniform random columns (er, 2 million rows of
/// 10, 31‰ hot) keep a quarter of L2: 69–78 / 30–36 there, 93–94 / 46–48 at 262144.
pub const SPMV_PANELS_HUB_MIN_HOT: usize = 500;

/// The L3 of a host that sizes hub-heavy panels by it ([`SPMV_PANELS_HUB_MIN_HOT`]), for data
/// whose gathers are hub-heavy; `None` otherwise (L2 sizes the panels).
fn hub_panels_l3(data: &DataStats) -> Option<usize> {
    data.fast_l3_bytes()
        .filter(|_| data.hot_permille >= SPMV_PANELS_HUB_MIN_HOT)
}

/// Bytes of `x` from which SpMV's built-in schedule stores `A` in column panels: half of L3
/// for hub-heavy gathers on hosts that size their panels by L3 ([`SPMV_PANELS_HUB_MIN_HOT`]),
/// at least [`SPMV_PANELS_MIN_BYTES`], which holds everywhere else.
pub fn spmv_panels_min_bytes(data: &DataStats) -> usize {
    hub_panels_l3(data).map_or(SPMV_PANELS_MIN_BYTES, |l3| {
        (l3 / 2).max(SPMV_PANELS_MIN_BYTES)
    })
}

/// Columns per panel of SpMV's column-panel schedule for `data` on its host: the power of two
/// of f64 elements nearest below a quarter of L2 (`l2_bytes`; 0: unknown,
/// [`lacuna_target::DEFAULT_L2_BYTES`]; 65536 for 2 MiB), or below a sixteenth of L3 where
/// that is more for hub-heavy gathers on a host that sizes panels by L3 (262144 for 32 MiB;
/// [`SPMV_PANELS_HUB_MIN_HOT`]), from 4096 to 2^30.
pub fn spmv_panel_width(data: &DataStats) -> u32 {
    let l2_slice = data.l2() / 4;
    let bytes = hub_panels_l3(data).map_or(l2_slice, |l3| (l3 / 16).max(l2_slice));
    lacuna_schedule::decompose::panel_width(bytes, std::mem::size_of::<f64>(), 4096)
}

/// The panel widths `lacuna tune` tries for SpMV on the host `host` ([`DataStats::host`]):
/// [`spmv_panel_width`] for gathers of either kind (the L2 slice, and the L3 slice where the
/// host sizes hub-heavy panels by L3), without duplicates.
pub fn spmv_panel_widths(host: &DataStats) -> Vec<u32> {
    let mut widths: Vec<u32> = [0, 1000]
        .into_iter()
        .map(|hot_permille| {
            spmv_panel_width(&DataStats {
                hot_permille,
                ..*host
            })
        })
        .collect();
    widths.dedup();
    widths
}

/// `l2_bytes`, or [`lacuna_target::DEFAULT_L2_BYTES`] for 0 (unknown).
fn l2_or_default(l2_bytes: usize) -> usize {
    if l2_bytes == 0 {
        lacuna_target::DEFAULT_L2_BYTES
    } else {
        l2_bytes
    }
}

/// Far gathers ([`DataStats::far_rows_permille`]) from which SpMM's built-in schedule stores
/// `A` in column panels (see [`spmm_by_panels`]).
pub const SPMM_PANELS_MIN_FAR: usize = 200;

/// Mean entries per run (a row's entries in one panel, [`DataStats::panel_runs`]) from which
/// SpMM's built-in schedule stores `A` in column panels: each run reads and writes its row of
/// `C` once, which only a run of several gathers repays.
pub const SPMM_PANELS_MIN_RUN: usize = 6;

/// Whether SpMM's built-in schedule stores `A` in column panels ([`spmm_panels_trace`]): a
/// feature width of 64 to 512 in multiples of 32, a `B` beyond L2 whose rows the CSR order
/// gathers from far apart ([`SPMM_PANELS_MIN_FAR`]), and runs of [`SPMM_PANELS_MIN_RUN`]
/// entries or more per row and panel. Each panel then gathers from half of L2's worth of
/// `B`'s rows ([`spmm_panel_width`]) instead of all of `B` from the last-level cache.
/// `lacuna bench`, k = 128, one / two threads, min of 10–20, ms, built-in → `(panels 1024)`
/// with chunks of 64 (session 25, Xeon guest with 2 MiB of L2 per core; side by side): EX5
/// (45 entries per row, 347‰ far, runs of 8.3) 4.43 / 2.45 → 3.38 / 1.93, citeseer_features
/// (32, 313‰, 8.0) 1.52 / 0.99 → 1.37 / 0.71. Where the rule says no, panels lose:
/// ego-Facebook (44, 109‰ far: its rows reuse `B`'s) 1.56 / 0.81 → 1.62 / 0.97, bcsstk16 (59,
/// 49‰) 2.29 → 2.22–2.52; cage10 (13, 364‰ but runs of 3.8) 2.23 → 2.74–2.91, cage11 11.4 →
/// 14.6, ct2010 18.8 → 27.9, wing 16.0 → 23.9–28.8 (runs of 1.0–1.4). Other widths, built-in
/// before → after, one / two threads: k = 64 (`(panels 2048)` against the register-blocked
/// rows) EX5 1.98 / 1.11 → 1.47 / 0.81, citeseer_features 0.92 / 0.43 → 0.58 / 0.29; k = 256
/// EX5 9.64 / 5.07 → 9.69 / 4.68, citeseer_features 3.68 / 2.05 → 3.63 / 1.74; k = 512 EX5
/// 26.2 / 11.5 → 26.0 / 11.9, citeseer_features 8.96 / 4.09 → 8.45 / 3.77.
pub fn spmm_by_panels(data: &DataStats) -> bool {
    data.feat
        .is_some_and(|k| k.is_multiple_of(32) && (64..=512).contains(&k))
        && data.gathered_bytes > data.l2()
        && data.far_rows_permille >= SPMM_PANELS_MIN_FAR
        && data.panel_runs > 0
        && data.nnz >= SPMM_PANELS_MIN_RUN.saturating_mul(data.panel_runs)
}

/// Rows of `B` per column panel of SpMM's panel schedule at feature width `feat` on a host
/// with `l2_bytes` of L2 per core (0: unknown, [`lacuna_target::DEFAULT_L2_BYTES`]): the power
/// of two of rows nearest below half of L2 (1024 rows of 128 f64 for 2 MiB), from 16 to 2^30.
pub fn spmm_panel_width(l2_bytes: usize, feat: usize) -> u32 {
    let row = feat.max(1).saturating_mul(std::mem::size_of::<f64>());
    lacuna_schedule::decompose::panel_width(l2_or_default(l2_bytes) / 2, row, 16)
}

/// SpMM's schedule on `A` in column panels of `width` rows of `B` (`(panels width)`): `C`
/// zeroed, then panel by panel each run's products added to its row of `C`, the feature width
/// `feat` specialized and split by `chunk` vector lanes kept in registers across the run;
/// where `parallel`, the zeroing and each panel's rows (distinct rows of `C`) in parallel.
pub fn spmm_panels_trace(
    width: u32,
    feat: usize,
    chunk: usize,
    parallel: bool,
) -> Vec<lacuna_schedule::Instruction> {
    let mut trace = vec![lacuna_schedule::Instruction::DecomposeFormat {
        buffer: "A".into(),
        into: format!("(panels {width})"),
    }];
    trace.extend(spmm_rows_trace(
        &SpmmLoops::PART,
        feat,
        chunk as u64,
        true,
        false,
    ));
    if parallel {
        trace.extend(panels_in_parallel("spmm"));
    }
    trace
}

/// The parallel loops of a row iteration `iteration` over `A` in column panels: the zeroing of
/// the result (`ITER_init:i`) and each panel's rows (`ITER_p0:i.p0`, distinct rows, balanced by
/// their entries); the panel loop stays serial.
fn panels_in_parallel(iteration: &str) -> [lacuna_schedule::Instruction; 2] {
    use lacuna_schedule::Instruction as I;
    [
        I::Parallel {
            r#loop: format!("{iteration}_init:i"),
        },
        I::Parallel {
            r#loop: format!("{iteration}_p0:i.p0"),
        },
    ]
}

/// SpMV's schedule on `A` in column panels of `width` columns (`(panels width)`): `y` zeroed,
/// then panel by panel each panel row's sum added to its row of `y`; where `parallel`, the
/// zeroing and each panel's rows (distinct rows, balanced by their entries) in parallel.
pub fn spmv_panels_trace(width: u32, parallel: bool) -> Vec<lacuna_schedule::Instruction> {
    let mut trace = vec![lacuna_schedule::Instruction::DecomposeFormat {
        buffer: "A".into(),
        into: format!("(panels {width})"),
    }];
    if parallel {
        trace.extend(panels_in_parallel("spmv"));
    }
    trace
}

/// The decomposition of SpMV's diagonal schedule: every entry by diagonal, rows in blocks of 8
/// (one per f64 lane of an AVX-512 register); see [`by_diagonals`].
pub const SPMV_DIA: &str = lacuna_schedule::lanes::DIA;

/// The most diagonals SpMV's built-in schedule stores by diagonal (see [`by_diagonals`]);
/// [`SPMV_DIA`] holds as many.
pub const SPMV_DIA_MAX_DIAGONALS: usize = 32;

/// The most slots per stored entry with which SpMV's built-in schedule stores `A` by diagonal
/// (a slot costs 8 bytes, an entry of CSR or sliced ELL 12 and a gather): see
/// [`by_diagonals`].
pub const SPMV_DIA_MAX_FILL: f64 = 1.3;

/// Whether SpMV's built-in schedule runs `A` as sliced ELL ([`SPMV_SELL`]): on hosts that
/// gather rows across lanes cheaply ([`DataStats::gathers_rows`]), for rows shorter than
/// [`SPMV_SELL_MAX_ROW`] on average whose lengths change often ([`SPMV_SELL_MIN_ROW_CHANGES`])
/// or that hold [`SPMV_SELL_UNIFORM_MIN_ROW`] entries or more, while `x` stays below
/// [`SPMV_SELL_MAX_GATHER_BYTES`], or the gathers are not scattered
/// ([`SPMV_PREFETCH_MIN_SCATTERED`]: a stencil's gathers stream through `x` without a
/// software prefetch), or the rows are uniform (sorting them by length keeps their order) and
/// `x` fits in L3 where its size is known ([`DataStats::l3_bytes`]).
///
/// Uniform rows scattering their gathers over an `x` beyond L3 keep their rows, prefetched
/// (a lane's gathers then wait on DRAM, which the prefetched rows hide better): `lacuna bench`,
/// min of 5, ms, one / two threads (session 37, Zen 5 guest with 32 MiB of L3), a uniform
/// random 8M × 8M with 10 per row (`x` 64 MB): sliced ELL 343 / 193, rows prefetched 256
/// entries ahead 184 / 94; within L3, er-large (`x` 16 MB): sliced ELL 17.6 / 7.7, rows
/// prefetched 46.4 / 23.8.
pub fn sliced_rows(data: &DataStats) -> bool {
    let uniform = data.row_changes_permille < SPMV_SELL_MIN_ROW_CHANGES;
    let mean = data.mean_row();
    let lengths = mean < SPMV_SELL_MAX_ROW && (!uniform || mean >= SPMV_SELL_UNIFORM_MIN_ROW);
    let within_l3 = data.l3_bytes == 0 || data.gathered_bytes <= data.l3_bytes;
    let gathers = data.gathered_bytes < SPMV_SELL_MAX_GATHER_BYTES
        || data.scattered_permille < SPMV_PREFETCH_MIN_SCATTERED
        || (uniform && within_l3);
    data.gathers_rows && data.rows > 0 && lengths && gathers
}

/// The decomposition of SpMV's sliced ELL schedule: SELL-8-1024, groups of 8 rows (one per f64
/// lane of an AVX-512 register) sorted by length within windows of 1024 rows. `lacuna bench`,
/// one thread, min of 200, ms, against the row-by-row built-in schedule (session 14, znver5):
/// σ = 32 / 128 / 1024 / 8192: de2010 0.074 / 0.065 / 0.058 / 0.058 (built-in 0.096), ct2010
/// 0.21 / 0.18 / 0.17–0.18 / 0.18 (0.29), vt2010 0.099 / 0.083 / 0.076 / 0.076 (0.128); 4
/// lanes at σ = 1024 within 3% of 8, 16 lanes slower (de2010 0.078 at σ = 64).
pub const SPMV_SELL: &str = lacuna_schedule::lanes::SELL;

/// Mean stored entries per row below which SpMV's built-in schedule may run rows across vector
/// lanes (see [`sliced_rows`]). `lacuna bench`, min of 300, ms, one / two threads, built-in
/// row by row → `(sell 8 1024)` (session 15, znver5, the kernel's column and row ids unchecked
/// since `coordinates_of`): cage10 (13 per row) 0.047 / 0.025 → 0.041 / 0.022, cage11 (14)
/// 0.176 / 0.095 → 0.150 / 0.084, citeseer_features (32) 0.031 / 0.016 → 0.026 / 0.014,
/// ego-Facebook (44) 0.047 / 0.024 → 0.045 / 0.023, EX5 (45) 0.080 / 0.041 → 0.073 / 0.038,
/// bcsstk16 (59) 0.075 / 0.038 → 0.067 / 0.035; min of 60 on anchors.py's generated `mid`
/// matrices (2M entries): rmat-mid (18 per row, rows up to 11640) 3.14 / 1.33 → 1.92 / 1.01,
/// er-mid (10, all equal) 1.34 / 0.69 → 1.16 / 0.60, block4-mid (27) 0.61 / 0.33 → 0.58 /
/// 0.30, lap3d-mid (7) 0.97 / 0.44 → 0.91 / 0.44. Nothing longer was measured. In session 14,
/// with the ids range-checked, sliced ELL lost from 13 per row up.
pub const SPMV_SELL_MAX_ROW: f64 = 64.0;

/// Mean stored entries per row from which SpMV runs rows across vector lanes even when their
/// lengths rarely change (see [`sliced_rows`]): shorter uniform rows gain nothing from sliced
/// ELL, whose groups add their sums to `y` one row at a time. `lacuna bench` as for
/// [`SPMV_SELL_MAX_ROW`]: wing (4 per row, all equal) 0.100 / 0.051 → 0.107 / 0.057, lap2d-mid
/// (5, all but the border equal) 1.02 / 0.62 → 1.05 / 0.51; from 7 per row it wins: lap3d-mid
/// 0.97 / 0.44 → 0.91 / 0.44, lap3d-large (19M entries, `x` 22 MB) 15.4 / 8.5 → 13.2 / 7.8,
/// er-mid (10, all equal) 1.34 / 0.69 → 1.16 / 0.60.
pub const SPMV_SELL_UNIFORM_MIN_ROW: f64 = 6.0;

/// Bytes of `x` from which SpMV keeps rows of changing lengths whose gathers are scattered one
/// by one, with their gathers prefetched across rows ([`SPMV_VECTOR_PREFETCH_MIN_BYTES`]),
/// instead of running them across lanes: gathers that miss every cache want the prefetch.
/// rmat-large (28.5M entries, 13.6 per row, `x` 17 MB), `lacuna bench`, min of 10, ms, one /
/// two threads (session 14, znver5): sliced ELL 86.3 / 36.8, masked row lanes with the
/// prefetch 53.5 / 30.0; in session 15, with sliced ELL's ids unchecked, 39–56 / 20–27 against
/// 43–50 / 21–24, from one run to the next. Uniform rows and a stencil's gathers run across
/// lanes whatever the size of `x`: er-large (20M entries, 10 per row, `x` 16 MB) 23.1 / 11.4 →
/// 17.8 / 7.7, lap3d-large (19M, 7 per row, `x` 22 MB) 15.4 / 8.5 → 12.7 / 7.8.
pub const SPMV_SELL_MAX_GATHER_BYTES: usize = SPMV_VECTOR_PREFETCH_MIN_BYTES;

/// Thousandths of rows whose length differs from the previous row's ([`row_length_changes`])
/// from which SpMV runs rows of any mean length below [`SPMV_SELL_MAX_ROW`] across vector
/// lanes: 220–250 on cage10, cage11 and bcsstk16, which win (see [`SPMV_SELL_MAX_ROW`]); 0 on
/// wing, which loses. It was 500 in session 14, when cage10 and cage11 lost.
pub const SPMV_SELL_MIN_ROW_CHANGES: usize = 100;

/// Bytes of `x` up to which SpMV's vectorized loops assemble their gathers from scalar loads
/// (the `scalar_gathers` annotation; it takes effect on AMD Zen 4/5 hosts,
/// `lacuna_target::host_assembles_gathers`): the gathered array within L2 (1 MiB per core on
/// Zen 4 and 5). `lacuna bench`, min of 200, ms, one thread, gather instructions →
/// assembled (session 17, znver5): sliced ELL on cage10 (`x` 91 KB) 0.042 → 0.033, cage11
/// (313 KB) 0.161 → 0.123, citeseer_features (30 KB) 0.0265 → 0.0213, ego-Facebook (32 KB)
/// 0.046 → 0.037, cit-HepPh (276 KB) 0.149 → 0.130, soc-Slashdot0902 (657 KB) 0.394 → 0.340,
/// de2010 (186 KB) 0.045 → 0.040, tomography (4 KB) 0.0071 → 0.0056, and row by row with 8
/// lanes on tomography 0.0080 → 0.0062; but er-mid (`x` 1.6 MB, in L3) 1.25 → 2.06.
pub const SPMV_SCALAR_GATHER_MAX_BYTES: usize = 1 << 20;

/// SpMV's sliced ELL schedule: `A` decomposed as [`SPMV_SELL`], each group's 8 partial sums in
/// a local cache (one vector register) added to `y` after the group, the lanes vectorized 8
/// wide; groups in parallel when `parallel`.
pub fn spmv_sell_trace(parallel: bool, scalar_gathers: bool) -> Vec<lacuna_schedule::Instruction> {
    spmv_lanes_trace(SPMV_SELL, parallel, scalar_gathers)
}

/// SpMV's schedule for a decomposition `into` of one part whose rows run as vector lanes in
/// groups of 8 (`sell` and `dia`, whose iterators are named alike): the group's sums kept in a
/// local cache, the lanes vectorized, the groups in parallel where `parallel`, the lanes'
/// gathers assembled from scalar loads where `scalar_gathers` (see
/// [`SPMV_SCALAR_GATHER_MAX_BYTES`]).
pub fn spmv_lanes_trace(
    into: &str,
    parallel: bool,
    scalar_gathers: bool,
) -> Vec<lacuna_schedule::Instruction> {
    use lacuna_schedule::{lanes, Instruction as I};
    let mut trace = vec![I::DecomposeFormat {
        buffer: "A".into(),
        into: into.into(),
    }];
    trace.extend(lanes::lanes_trace("spmv", "i", "y"));
    if scalar_gathers {
        trace.push(I::Annotate {
            r#loop: lanes::lanes_loop("spmv", "i"),
            key: "scalar_gathers".into(),
            value: 1,
        });
    }
    if parallel {
        trace.push(I::Parallel {
            r#loop: lanes::group_loop("spmv", "i"),
        });
    }
    trace
}

/// The schedule running the outermost loop of `p`'s first sparse iteration in parallel, when
/// that is legal (independent iterations); `None` otherwise or for co-iteration kernels (whose
/// rows are parallel by construction where legal).
pub fn parallel_rows_schedule(p: &Program) -> Option<ScheduleFile> {
    if lacuna_stage2::coiter::is_coiteration(p) {
        return None;
    }
    let it = p.iterations().into_iter().next()?;
    // Only when legal (independent iterations).
    replayable(
        p,
        vec![lacuna_schedule::Instruction::Parallel {
            r#loop: format!("{}:{}", it.name, it.vars.first()?),
        }],
    )
}

/// Like [`run_kernel`], with a schedule applied first.
pub fn run_kernel_scheduled(
    p: &Program,
    schedule: Option<&ScheduleFile>,
    inputs: &BTreeMap<String, Input>,
    params: &BTreeMap<String, i64>,
    target: Target,
    repeat: usize,
) -> Result<RunReport, DriverError> {
    check_params(p, params)?;
    if lacuna_stage2::coiter::is_coiteration(p) {
        if schedule.is_some() {
            return Err(DriverError::Coiter(
                lacuna_stage2::coiter::CoiterError::Unsupported {
                    what: "schedules of co-iteration kernels".into(),
                },
            ));
        }
        return run_coiteration(p, inputs, params, target, repeat);
    }
    let t0 = Instant::now();
    let (scheduled, exe, conversions) = Executable::build_converting(p, schedule, target)?;
    let compile_seconds = t0.elapsed().as_secs_f64();
    let p = &scheduled;
    let t1 = Instant::now();
    let given = convert_inputs(&conversions, inputs)?;
    let conversion_seconds = t1.elapsed().as_secs_f64();
    let mut b = bind_with(p, inputs, params, given)?;
    // Preprocessing runs once, before the first reset: what it writes stays for every run.
    reset_outputs(p, &mut b);
    let t2 = Instant::now();
    exe.run_preprocess(p, &mut b)?;
    let preprocess_seconds = t2.elapsed().as_secs_f64();
    let mut run_seconds = Vec::new();
    for _ in 0..repeat.max(1) {
        exe.reset_outputs(p, &mut b);
        let t = Instant::now();
        // SAFETY: `b` is as `run_preprocess` (which validated it) left it, outputs zeroed.
        let device = unsafe { exe.run_kernel_timed(p, &mut b)? };
        run_seconds.push(device.unwrap_or_else(|| t.elapsed().as_secs_f64()));
    }
    let mut outputs = BTreeMap::new();
    for buf in p.buffers.iter().filter(|x| x.role == Role::Output) {
        outputs.insert(buf.name.clone(), unpack(p, &b, &buf.name)?);
    }
    Ok(RunReport {
        compile_seconds,
        conversion_seconds,
        preprocess_seconds,
        run_seconds,
        outputs,
        params: b.params,
    })
}

/// Runs a co-iteration kernel (see `lacuna_stage2::coiter`): the count pass, the result
/// sized, the compute pass; the stage-I target evaluates the reference semantics point by point.
pub fn run_coiteration(
    p: &Program,
    inputs: &BTreeMap<String, Input>,
    params: &BTreeMap<String, i64>,
    target: Target,
    repeat: usize,
) -> Result<RunReport, DriverError> {
    use lacuna_stage2::coiter::CoKernel;
    if let Target::Cuda(_) = target {
        return Err(DriverError::Coiter(
            lacuna_stage2::coiter::CoiterError::Unsupported {
                what: "GPU code generation of co-iteration kernels".into(),
            },
        ));
    }
    let t0 = Instant::now();
    let k = CoKernel::new(p)?;
    let mut compile_seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut b = k.bind(inputs, params)?;
    // 32-bit indices where the data allows: half the index traffic of the merge loops.
    let k = match k.narrowed(&mut b)? {
        Some(narrow) => narrow,
        None => k,
    };
    let conversion_seconds = t1.elapsed().as_secs_f64();
    let t2 = Instant::now();
    let exe = CoExecutable::new(k, target)?;
    compile_seconds += t2.elapsed().as_secs_f64();
    // The arrays every function only reads stay bound across runs, as a caller running the
    // kernel repeatedly keeps its operands; the others (results, scratch) and the parameters
    // start each run as bound.
    let read_only = read_only_buffers(&exe.kernel);
    let fresh = Bindings {
        params: b.params.clone(),
        axes: BTreeMap::new(),
        buffers: b
            .buffers
            .iter()
            .filter(|(name, _)| !read_only.contains(name.as_str()))
            .map(|(name, a)| (name.clone(), a.clone()))
            .collect(),
    };
    // `b` is what `exe`'s kernel bound (narrowed by it above).
    let mut data = CoData { b, owner: exe.id };
    let mut run_seconds = Vec::new();
    let mut result = None;
    for _ in 0..repeat.max(1) {
        data.b.params = fresh.params.clone();
        for (name, a) in &fresh.buffers {
            data.b.buffers.insert(name.clone(), a.clone());
        }
        // Each run after the first writes into the previous run's result, as a caller
        // running the kernel repeatedly would reuse it; the first runs into fresh memory.
        if let Some(previous) = result.take() {
            exe.recycle(&mut data, previous);
        }
        let t = Instant::now();
        let out = exe.run(&mut data, inputs)?;
        run_seconds.push(t.elapsed().as_secs_f64());
        result = Some(out);
    }
    let mut outputs = BTreeMap::new();
    outputs.insert(
        exe.kernel.assignment.output().name.clone(),
        result.expect("ran at least once"),
    );
    Ok(RunReport {
        compile_seconds,
        conversion_seconds,
        preprocess_seconds: 0.0,
        run_seconds,
        outputs,
        params: data.b.params,
    })
}

/// The buffers that every function of `k` declares as inputs (none writes them).
fn read_only_buffers(k: &lacuna_stage2::coiter::CoKernel) -> std::collections::BTreeSet<String> {
    use lacuna_stage2::ir::BufferKind;
    let funcs: Vec<&lacuna_stage2::ir::Func> = std::iter::once(&k.compute)
        .chain(k.count.as_ref())
        .chain(k.one_pass.as_ref())
        .collect();
    let input = |f: &lacuna_stage2::ir::Func, name: &str| {
        f.buffers.iter().any(|d| {
            d.name == name && matches!(d.kind, BufferKind::Values(lacuna_stage1::Role::Input))
        })
    };
    funcs
        .iter()
        .flat_map(|f| f.buffers.iter().map(|d| d.name.clone()))
        .filter(|name| {
            funcs
                .iter()
                .all(|f| !f.buffers.iter().any(|d| &d.name == name) || input(f, name))
        })
        .collect()
}

/// Up to this many threads a co-iteration kernel with a one-pass function runs it serially;
/// above, in chunks of rows on the pool where its operands allow (`run_one_pass_chunks`),
/// else the count and compute passes over parallel row chunks. On this 2-core VM, both
/// parallel forms were slower at 2 threads than one serial pass: SpAdd on bcsstk16 (A + Aᵀ,
/// `lacuna run --repeat`, min) 0.60 ms serial, 0.90 ms in two chunks (a woken worker starts
/// about 0.1 ms late and the second chunk's entries are moved down afterwards); on cit-HepPh
/// 3.07 vs 3.50 ms; the two passes, 1.54 vs 0.90 ms on cage10 (session 5). Up to it, the
/// one-pass function still runs in chunks where [`one_pass_in_chunks`] says they pay.
pub const ONE_PASS_MAX_THREADS: usize = 2;

/// Operand entries from which a one-pass run on [`ONE_PASS_MAX_THREADS`] threads or fewer may
/// go in chunks ([`one_pass_in_chunks`]): below, a woken worker's delay and the move of the
/// second chunk's entries outweigh half the merge.
pub const ONE_PASS_CHUNK_MIN_ENTRIES: i64 = 1 << 19;

/// The share of branch changes in the sampled merge ([`lacuna_stage2::coiter::MergeSample`])
/// from which a one-pass run on [`ONE_PASS_MAX_THREADS`] threads or fewer goes in chunks. A
/// merge whose branch keeps changing direction is bound by mispredictions, which each thread
/// pays for its own rows; one that takes the same branch throughout (equal patterns) is bound
/// by memory, which two threads share. SpAdd A + Aᵀ on two threads, `lacuna run --repeat 30`,
/// min, ms, serial → two chunks (session 18, znver5): cit-HepPh (0.16 switches, 843K entries)
/// 1.58 → 1.14, soc-Slashdot0902 (0.29, 1.9M) 2.83 → 2.29; with no switches email-Enron
/// (735K) 0.46 → 0.56, cage11 (1.1M) 0.56 → 0.57, ct2010 (673K) 0.70 → 0.69, bcsstk16 (581K)
/// 0.21 → 0.21; smaller ones lose: citeseer_features (0.98 switches, but alternating in a
/// pattern the predictor learns; 210K entries) 0.16 → 0.14–0.21, wing 0.23 → 0.74–0.78.
pub const ONE_PASS_CHUNK_MIN_SWITCHES: f64 = 0.1;

/// Rows sampled for [`ONE_PASS_CHUNK_MIN_SWITCHES`]: evenly spread, a few microseconds.
pub const MERGE_SAMPLE_ROWS: usize = 64;

/// Whether a co-iteration kernel's one-pass function runs in chunks of rows on `threads`
/// threads (when its operands allow it) rather than serially: always above
/// [`ONE_PASS_MAX_THREADS`], never on one thread, and in between when the operands hold
/// [`ONE_PASS_CHUNK_MIN_ENTRIES`] entries or more and their sampled merge switches branch
/// often ([`ONE_PASS_CHUNK_MIN_SWITCHES`]).
pub fn one_pass_in_chunks(
    k: &lacuna_stage2::coiter::CoKernel,
    b: &Bindings,
    threads: usize,
) -> bool {
    match threads {
        0 | 1 => false,
        t if t > ONE_PASS_MAX_THREADS => true,
        _ => k
            .merge_sample(b, MERGE_SAMPLE_ROWS, ONE_PASS_CHUNK_MIN_ENTRIES)
            .is_some_and(|s| {
                s.entries >= ONE_PASS_CHUNK_MIN_ENTRIES && s.switches >= ONE_PASS_CHUNK_MIN_SWITCHES
            }),
    }
}

/// The JIT-compiled functions of a co-iteration kernel.
pub struct CompiledCoKernel {
    /// The count pass (sparse results).
    pub count: Option<CompiledKernel>,
    /// The compute pass.
    pub compute: CompiledKernel,
    /// The one-pass compute function, run instead of the two passes on one thread.
    pub one_pass: Option<CompiledKernel>,
}

impl CompiledCoKernel {
    /// Compiles every function of `k`, side by side ([`lacuna_target::compile_side_by_side`]).
    pub fn new(k: &lacuna_stage2::coiter::CoKernel) -> Result<CompiledCoKernel, DriverError> {
        let opts = CodegenOptions::default();
        let mut funcs = vec![&k.compute];
        funcs.extend(k.one_pass.as_ref());
        funcs.extend(k.count.as_ref());
        let mut compiled = lacuna_target::compile_side_by_side(&funcs, &opts).into_iter();
        let mut next = || compiled.next().expect("one result per function");
        let compute = next()?;
        let one_pass = k.one_pass.as_ref().map(|_| next()).transpose()?;
        let count = k.count.as_ref().map(|_| next()).transpose()?;
        Ok(CompiledCoKernel {
            count,
            compute,
            one_pass,
        })
    }
}

/// A co-iteration kernel with its compiled functions for one target, built together: the
/// safe way to run one. Data is bound by the executable itself ([`CoExecutable::bind`]) and
/// changed only by it (runs, [`CoExecutable::recycle`], [`CoExecutable::narrow`]), so machine
/// code that does no bounds checks never sees another kernel's data, or data a caller edited.
pub struct CoExecutable {
    kernel: lacuna_stage2::coiter::CoKernel,
    /// Built from `kernel`, for [`Target::Jit`].
    compiled: Option<CompiledCoKernel>,
    target: Target,
    /// Tells the data this executable bound from any other's ([`CoData::owner`]).
    id: u64,
}

/// Data bound for one [`CoExecutable`]: its operands converted into the planned storage, the
/// result's arrays and the parameters. Readable ([`CoData::bindings`]); only the executable
/// that owns it changes it.
#[derive(Clone, Debug)]
pub struct CoData {
    b: Bindings,
    /// The [`CoExecutable::id`] of the executable the data is bound for.
    owner: u64,
}

impl CoData {
    /// The bound arrays and parameters.
    pub fn bindings(&self) -> &Bindings {
        &self.b
    }
}

impl CoExecutable {
    /// Compiles `kernel` for `target` (its functions for the JIT; nothing for the
    /// interpreters). CUDA targets do not run co-iteration kernels.
    pub fn new(
        kernel: lacuna_stage2::coiter::CoKernel,
        target: Target,
    ) -> Result<CoExecutable, DriverError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        if let Target::Cuda(_) = target {
            return Err(DriverError::Coiter(
                lacuna_stage2::coiter::CoiterError::Unsupported {
                    what: "GPU code generation of co-iteration kernels".into(),
                },
            ));
        }
        // Equal segments run as masked vector loops, which hosts without mask registers
        // (AVX2) emulate: SpAdd C = A + Aᵀ, one thread, `lacuna run --repeat 30`, min of three
        // rounds alternating, ms (session 29, AMD EPYC Zen 3 guest), with → without: wing 0.75
        // → 0.43, ct2010 2.65 → 1.11, de2010 0.66 → 0.48, vt2010 0.99 → 0.69, email-Enron 1.50
        // → 1.23, cage11 1.77 → 1.56.
        let kernel = if target == Target::Jit
            && kernel.plan.equal_segments
            && !lacuna_target::host_has_vector_masks()
        {
            kernel.with_equal_segments(false)?
        } else {
            kernel
        };
        let compiled = match target {
            Target::Jit => Some(CompiledCoKernel::new(&kernel)?),
            _ => None,
        };
        Ok(CoExecutable {
            kernel,
            compiled,
            target,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// The kernel.
    pub fn kernel(&self) -> &lacuna_stage2::coiter::CoKernel {
        &self.kernel
    }

    /// The target it runs on.
    pub fn target(&self) -> Target {
        self.target
    }

    /// Binds parameters from the inputs' shapes, converts the inputs into the planned storage
    /// and allocates the result ([`lacuna_stage2::coiter::CoKernel::bind`]).
    pub fn bind(
        &self,
        inputs: &BTreeMap<String, Input>,
        params: &BTreeMap<String, i64>,
    ) -> Result<CoData, DriverError> {
        Ok(CoData {
            b: self.kernel.bind(inputs, params)?,
            owner: self.id,
        })
    }

    /// Binds `inputs` for `narrow` (`self`'s kernel with 32-bit indices,
    /// [`lacuna_stage2::coiter::CoKernel::with_index`], on the same target) where every index
    /// fits, converting them to 32 bits directly
    /// ([`lacuna_stage2::coiter::CoKernel::bind_narrow`]), otherwise for `self`. Returns the
    /// executable the data is bound for, with the data: the same result as [`CoExecutable::bind`]
    /// then [`CoExecutable::narrow`], with one conversion of each index array instead of three.
    pub fn bind_narrowest<'a>(
        &'a self,
        narrow: &'a CoExecutable,
        inputs: &BTreeMap<String, Input>,
        params: &BTreeMap<String, i64>,
    ) -> Result<(&'a CoExecutable, CoData), DriverError> {
        if narrow.target == self.target {
            if let Some(b) = self.kernel.bind_narrow(&narrow.kernel, inputs, params) {
                return Ok((
                    narrow,
                    CoData {
                        b,
                        owner: narrow.id,
                    },
                ));
            }
        }
        let mut data = self.bind(inputs, params)?;
        Ok(if self.narrow(narrow, &mut data) {
            (narrow, data)
        } else {
            (self, data)
        })
    }

    /// One run on inputs handed over, bound for the faster of `self` and `narrow` as
    /// [`CoExecutable::bind_narrowest`] binds: arrays already stored as the kernel reads them
    /// move into the bindings instead of being copied
    /// ([`lacuna_stage2::coiter::CoKernel::bind_owned`]). On [`Target::InterpStage1`], whose
    /// runs read the inputs themselves, a borrow of them is bound.
    pub fn run_owned(
        &self,
        narrow: &CoExecutable,
        inputs: BTreeMap<String, Input>,
        params: &BTreeMap<String, i64>,
    ) -> Result<Output, DriverError> {
        if self.target == Target::InterpStage1 {
            let (exe, mut data) = self.bind_narrowest(narrow, &inputs, params)?;
            return exe.run(&mut data, &inputs);
        }
        let none = BTreeMap::new();
        let inputs = if narrow.target == self.target {
            match self
                .kernel
                .bind_narrow_owned(&narrow.kernel, inputs, params)
            {
                Ok(b) => {
                    let mut data = CoData {
                        b: b?,
                        owner: narrow.id,
                    };
                    return narrow.run(&mut data, &none);
                }
                Err(inputs) => inputs,
            }
        } else {
            inputs
        };
        let mut data = CoData {
            b: self.kernel.bind_owned(inputs, params)?,
            owner: self.id,
        };
        let exe = if self.narrow(narrow, &mut data) {
            narrow
        } else {
            self
        };
        exe.run(&mut data, &none)
    }

    /// Hands `data`, bound by `self`, over to `narrow` (`self`'s kernel with 32-bit indices,
    /// [`lacuna_stage2::coiter::CoKernel::with_index`]) when every index it holds fits
    /// ([`lacuna_stage2::coiter::CoKernel::narrow_bindings`]); returns whether it did. Data
    /// of another executable, or a `narrow` of another kernel or target, stays as it is.
    pub fn narrow(&self, narrow: &CoExecutable, data: &mut CoData) -> bool {
        let ok = data.owner == self.id
            && narrow.target == self.target
            && self.kernel.narrow_bindings(&narrow.kernel, &mut data.b);
        if ok {
            data.owner = narrow.id;
        }
        ok
    }

    /// Lets the next run write into `previous`'s storage, a result of this executable
    /// ([`lacuna_stage2::coiter::CoKernel::recycle`], which drops storage it cannot use).
    /// Nothing happens to data another executable bound.
    pub fn recycle(&self, data: &mut CoData, previous: Output) {
        if data.owner == self.id {
            self.kernel.recycle(&mut data.b, previous);
        }
    }

    /// One run on `data` (see [`coiteration_once`]); `inputs` are those `data` was bound
    /// from (the stage-I reference reads them). Data another executable bound is refused.
    pub fn run(
        &self,
        data: &mut CoData,
        inputs: &BTreeMap<String, Input>,
    ) -> Result<Output, DriverError> {
        if data.owner != self.id {
            return Err(DriverError::Coiter(
                lacuna_stage2::coiter::CoiterError::Run {
                    pass: self.kernel.compute.name.clone(),
                    what: "the data was bound for another kernel".into(),
                },
            ));
        }
        // SAFETY: `compiled` was built from `kernel` (`new`), and `data` is what this
        // executable bound (its `owner`), changed since only by its runs, `recycle` and, on
        // the way to it, `narrow` from the kernel it narrows.
        unsafe {
            coiteration_once(
                &self.kernel,
                self.compiled.as_ref(),
                self.target,
                &mut data.b,
                inputs,
            )
        }
    }
}

/// One run of a co-iteration kernel bound in `b` (see
/// [`lacuna_stage2::coiter::CoKernel::bind`]): the compiled functions when given (on up to
/// [`ONE_PASS_MAX_THREADS`] threads, the one-pass function where the kernel has one, in chunks
/// where [`one_pass_in_chunks`] says so), the
/// stage-II interpreter otherwise, or the point-by-point reference for
/// [`Target::InterpStage1`]; returns the result.
///
/// # Safety
///
/// The compiled functions do no bounds checks: `compiled` was built from `k`
/// ([`CompiledCoKernel::new`]), and `b` is what `k.bind` returned (or `narrow_bindings` made
/// of it for `k`), changed since only by earlier runs and `k.recycle`.
unsafe fn coiteration_once(
    k: &lacuna_stage2::coiter::CoKernel,
    compiled: Option<&CompiledCoKernel>,
    target: Target,
    b: &mut Bindings,
    inputs: &BTreeMap<String, Input>,
) -> Result<Output, DriverError> {
    use lacuna_stage2::coiter::Pass;
    Ok(match (compiled, target) {
        (_, Target::InterpStage1) => k.reference(b, inputs)?,
        (Some(c), _) => {
            let threads = rayon::current_num_threads();
            if let Some(one) = c
                .one_pass
                .as_ref()
                .filter(|_| one_pass_in_chunks(k, b, threads))
            {
                if run_one_pass_chunks(k, one, b, threads)? {
                    return Ok(k.output(b)?);
                }
            }
            if let (true, Some(one)) = (threads <= ONE_PASS_MAX_THREADS, &c.one_pass) {
                // SAFETY: compiled machine code of the kernel's one-pass function.
                unsafe {
                    k.run_one_pass_reserved(b, &mut |_, b| one.run(b).map_err(|e| e.to_string()))?
                };
                return Ok(k.output(b)?);
            }
            let (count, compute) = (&c.count, &c.compute);
            k.run(b, &mut |pass, _, b| {
                let kernel = match pass {
                    Pass::Count => count.as_ref().ok_or("no count pass")?,
                    Pass::Compute => compute,
                };
                if k.plan.parallel_rows && threads > 1 {
                    run_row_chunks(k, kernel, pass, b, threads)
                } else {
                    // SAFETY: `CoKernel::bind` built `b` from the validated inputs, and the
                    // passes before this one sized what it reads (see `run_row_chunks`).
                    unsafe { kernel.run(b) }.map_err(|e| e.to_string())
                }
            })?;
            k.output(b)?
        }
        (None, _) => {
            k.run(b, &mut |_, f, b| {
                interpret_func(f, b).map_err(|e| e.to_string())
            })?;
            k.output(b)?
        }
    })
}

/// Borrowed views of `b`'s parameters and value buffers but those in `skip`, for
/// [`CompiledKernel::run_raw`]; with `spare`, an array's length is its capacity (reserved
/// arrays a kernel fills, [`lacuna_ir::ArrayData::reserved`]).
fn raw_buffers(b: &mut Bindings, skip: &[String], spare: bool) -> lacuna_target::RawBindings {
    let mut raw = lacuna_target::RawBindings {
        params: b.params.clone(),
        ..Default::default()
    };
    for (name, a) in b.buffers.iter_mut() {
        if !skip.contains(name) {
            let view = lacuna_target::RawArray {
                len: if spare { a.capacity() } else { a.len() },
                dtype: a.dtype(),
                ptr: a.as_mut_ptr(),
            };
            raw.buffers.insert(name.clone(), view);
        }
    }
    raw
}

/// Runs the compiled one-pass function of `k` over `threads` chunks of rows in parallel, each
/// appending into its own region of the result's arrays (sized by its rows' operand entries),
/// then moves the regions together; `Ok(false)`, having run nothing, when the operands are not
/// stored as [`lacuna_stage2::coiter::CoKernel::one_pass_row_positions`] requires. Every row
/// runs the same code as in a serial run, so results are bit-identical for any thread count.
fn run_one_pass_chunks(
    k: &lacuna_stage2::coiter::CoKernel,
    kernel: &CompiledKernel,
    b: &mut Bindings,
    threads: usize,
) -> Result<bool, DriverError> {
    let Some(chunks) = k.prepare_one_pass_chunks(b, threads)? else {
        return Ok(false);
    };
    let out = &k.assignment.output().name;
    let (lo_name, hi_name) = lacuna_stage2::coiter::row_range_params(out);
    let q0_name = lacuna_stage2::coiter::lower::one_pass_start_param(out);
    // The reserved result arrays are passed with their whole capacity.
    let shared = raw_buffers(b, &[], true);
    struct Shared(lacuna_target::RawBindings);
    // SAFETY: the arrays outlive the parallel section (`b` is borrowed mutably throughout);
    // chunks read the inputs and write disjoint rows of the positions and disjoint regions of
    // the coordinates and values (`prepare_one_pass_chunks`).
    unsafe impl Sync for Shared {}
    let shared = Shared(shared);
    let shared = &shared;
    use lacuna_stage2::coiter::RowChunk;
    let run_chunk = |&RowChunk { lo, hi, q0 }: &RowChunk| -> Result<(), String> {
        if lo >= hi {
            return Ok(());
        }
        let mut mine = shared.0.clone();
        mine.params.insert(lo_name.clone(), lo);
        mine.params.insert(hi_name.clone(), hi);
        mine.params.insert(q0_name.clone(), q0);
        // SAFETY: the bindings are consistent for all rows (`CoKernel::bind`); the chunk's
        // rows are a sub-range whose entries fit its region, written by no other chunk.
        unsafe { kernel.run_raw(&mine) }.map_err(|e| e.to_string())
    };
    // The calling thread runs the first chunk while the pool's workers take the others, as
    // the parallel loops of generated code run (spinning, not asleep: a sleeping worker wakes
    // up in about 0.1 ms on this VM, the length of a chunk here).
    let results: Vec<std::sync::Mutex<Result<(), String>>> = chunks
        .iter()
        .map(|_| std::sync::Mutex::new(Ok(())))
        .collect();
    lacuna_target::run_on_pool(chunks.len(), &|k| {
        let r = run_chunk(&chunks[k]);
        if let Ok(mut slot) = results[k].lock() {
            *slot = r;
        }
    });
    results
        .into_iter()
        .try_for_each(|slot| {
            slot.into_inner()
                .unwrap_or_else(|_| Err("a chunk's result was lost".into()))
        })
        .map_err(|what| {
            DriverError::Coiter(lacuna_stage2::coiter::CoiterError::Run {
                pass: kernel.name().to_string(),
                what,
            })
        })?;
    // SAFETY: every chunk ran the compiled one-pass function over its rows with its `q0`.
    unsafe { k.finish_one_pass_chunks(b, &chunks)? };
    Ok(true)
}

/// Runs one pass of a [`lacuna_stage2::coiter::Plan::parallel_rows`] kernel over chunks of
/// rows in parallel on rayon's current pool, one workspace per chunk (allocated once per chunk,
/// not per row). Chunks hold equal numbers of rows plus result entries (the count pass's
/// positions, for the compute pass); every row runs the same code as in a serial run, so
/// results are bit-identical for any number of threads.
fn run_row_chunks(
    k: &lacuna_stage2::coiter::CoKernel,
    kernel: &CompiledKernel,
    pass: lacuna_stage2::coiter::Pass,
    b: &mut Bindings,
    threads: usize,
) -> Result<(), String> {
    use lacuna_target::{RawArray, RawBindings};
    use rayon::prelude::*;
    let out = k.assignment.output();
    let (lo_name, hi_name) = lacuna_stage2::coiter::row_range_params(&out.name);
    let rows = *b.params.get(&hi_name).ok_or("row range not set")?;
    let workspace = [
        format!("{}.w", out.name),
        format!("{}.flag", out.name),
        format!("{}.list", out.name),
    ];
    let width = b
        .buffers
        .get(&workspace[1])
        .map(|a| a.len())
        .ok_or("workspace not allocated")?;
    // Chunk bounds: the first row whose weight reaches each share.
    let chunks = (threads as i64).min(rows).max(1);
    // The positions as bound (i64), borrowed; other widths converted.
    let pos: Option<std::borrow::Cow<'_, [i64]>> = match b.buffers.get(&format!("{}.pos", out.name))
    {
        Some(lacuna_ir::ArrayData::I64(v)) => Some(std::borrow::Cow::Borrowed(v)),
        Some(other) => Some(std::borrow::Cow::Owned(other.to_i64_vec())),
        None => None,
    };
    let weight = |r: i64| -> i64 {
        match (pass, &pos) {
            (lacuna_stage2::coiter::Pass::Compute, Some(p)) => r + p[r as usize],
            _ => r,
        }
    };
    let bounds = lacuna_ir::partition::balanced_bounds(0, rows, chunks, Some(&weight));
    drop(pos);
    // Every other array is shared: inputs are read, and chunks write disjoint rows of the
    // result (`pos[r + 1]` in the count pass, `crd`/`vals` from `pos[r]` in the compute pass).
    let shared = raw_buffers(b, &workspace, false);
    struct Shared(RawBindings);
    // SAFETY: the arrays outlive the parallel section (`b` is borrowed mutably throughout);
    // chunks read the inputs and write disjoint elements of the outputs, as above.
    unsafe impl Sync for Shared {}
    let shared = Shared(shared);
    let shared = &shared;
    let out_dtype = out.dtype;
    let results: Vec<Result<(), String>> = (0..chunks as usize)
        .into_par_iter()
        .map(|c| {
            let (lo, hi) = (bounds[c], bounds[c + 1]);
            if lo >= hi {
                return Ok(());
            }
            let mut w = lacuna_ir::ArrayData::zeros(out_dtype, width);
            let mut flag = lacuna_ir::ArrayData::zeros(lacuna_ir::DType::I64, width);
            let mut list = lacuna_ir::ArrayData::zeros(lacuna_ir::DType::I64, width);
            let mut mine = shared.0.clone();
            mine.params.insert(lo_name.clone(), lo);
            mine.params.insert(hi_name.clone(), hi);
            for (name, a) in workspace.iter().zip([&mut w, &mut flag, &mut list]) {
                let raw = RawArray {
                    len: a.len(),
                    dtype: a.dtype(),
                    ptr: a.as_mut_ptr(),
                };
                mine.buffers.insert(name.clone(), raw);
            }
            // SAFETY: the bindings were consistent for the whole row range (checked by
            // `CoKernel::bind` and the count pass); this chunk's rows are a sub-range with
            // its own workspace, and no other chunk writes what it writes.
            unsafe { kernel.run_raw(&mine) }.map_err(|e| e.to_string())
        })
        .collect();
    results.into_iter().collect()
}

/// The entries of a tensor file as a coordinate tensor (dense arrays keep their non-zeros).
pub fn load_coo(path: &Path) -> Result<CooTensor, DriverError> {
    Ok(match load_input(path)? {
        Input::Coo(c) => c,
        Input::Sparse(t) => t.to_coo(),
        Input::Dense(d) => {
            let mut c = lacuna_stage1::dense_nonzeros(&path.display().to_string(), &d)?;
            c.values = c.values.cast(lacuna_ir::DType::F64);
            c
        }
    })
}

/// Parses an encoding given as MLIR text or a preset name.
pub fn parse_encoding_arg(text: &str) -> Result<lacuna_ir::encoding::Encoding, DriverError> {
    lacuna_ir::encoding::parse_format(text).map_err(|e| DriverError::Encoding {
        rendered: e.render(text),
    })
}

/// Reads a tensor file and stores it in the encoding `to` (MLIR text or a preset).
pub fn convert_file(
    path: &Path,
    to: &str,
) -> Result<lacuna_ir::storage::SparseTensor, DriverError> {
    let enc = parse_encoding_arg(to)?;
    let coo = load_coo(path)?;
    let err = |source| DriverError::Storage {
        path: path.to_path_buf(),
        source,
    };
    if !enc.has_slices() {
        return lacuna_ir::storage::SparseTensor::from_coo(&coo, &enc).map_err(err);
    }
    // A sliced encoding views the file's tensor, as `tensor.extract_slice` in MLIR.
    let base = lacuna_ir::storage::SparseTensor::from_coo(&coo, &enc.without_slices());
    base.and_then(|t| t.view_by(&enc)).map_err(err)
}

/// Bytes of a stored tensor: positions and coordinates at their widths, plus values.
pub fn storage_bytes(t: &lacuna_ir::storage::SparseTensor) -> usize {
    let index: usize = t
        .levels()
        .iter()
        .map(|l| {
            [l.positions(), l.coordinates()]
                .into_iter()
                .flatten()
                .map(|a| a.len() * a.bits() as usize / 8)
                .sum::<usize>()
        })
        .sum();
    index + t.values().len() * t.values().dtype().size_bytes()
}

/// A storage format whose size `lacuna info` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InfoFormat {
    /// `csr`.
    Csr,
    /// `csc`.
    Csc,
    /// `dcsr`.
    Dcsr,
    /// `coo`.
    Coo,
    /// `bsr(b,b)`.
    Bsr(usize),
    /// `ell(w)`.
    Ell(usize),
    /// `dense`.
    Dense,
}

impl InfoFormat {
    /// The formats `lacuna info` reports, for a matrix whose longest row holds `max_row`
    /// entries (ELL as wide as that row).
    pub fn reported(max_row: usize) -> [InfoFormat; 8] {
        [
            InfoFormat::Csr,
            InfoFormat::Csc,
            InfoFormat::Dcsr,
            InfoFormat::Coo,
            InfoFormat::Bsr(2),
            InfoFormat::Bsr(4),
            InfoFormat::Ell(max_row.max(1)),
            InfoFormat::Dense,
        ]
    }

    /// The preset's name (`lacuna_ir::encoding::preset`).
    pub fn name(self) -> String {
        match self {
            InfoFormat::Csr => "csr".into(),
            InfoFormat::Csc => "csc".into(),
            InfoFormat::Dcsr => "dcsr".into(),
            InfoFormat::Coo => "coo".into(),
            InfoFormat::Bsr(b) => format!("bsr({b},{b})"),
            InfoFormat::Ell(w) => format!("ell({w})"),
            InfoFormat::Dense => "dense".into(),
        }
    }
}

/// The bytes [`storage_bytes`] gives for the matrix `coo` (2-D, entries sorted by row then
/// column, without duplicates) stored in `format`, counted from its entries without building
/// the storage: positions and coordinates at the preset's widths (native: 64 bits), values
/// at their dtype's size. `None` for a tensor that is not 2-D, a format wider than a row, or
/// a size beyond `usize`.
pub fn preset_bytes(coo: &CooTensor, format: InfoFormat) -> Option<usize> {
    let enc = lacuna_ir::encoding::preset(&format.name()).ok()?;
    let width = |w: lacuna_ir::encoding::IndexWidth| match w.bits() {
        0 => 8,
        b => b as usize / 8,
    };
    let (pw, cw) = (width(enc.pos_width()), width(enc.crd_width()));
    let vb = coo.values.dtype().size_bytes();
    let (&[m, n], Some(r), Some(c)) = (&coo.shape[..], coo.coords.first(), coo.coords.get(1))
    else {
        return None;
    };
    let nnz = coo.nnz().min(r.len()).min(c.len());
    // Sums of products, each checked.
    let sum = |terms: &[(usize, usize)]| {
        terms.iter().try_fold(0usize, |acc, &(a, b)| {
            a.checked_mul(b).and_then(|x| acc.checked_add(x))
        })
    };
    let entries = cw.checked_add(vb)?;
    match format {
        InfoFormat::Csr => sum(&[(m.checked_add(1)?, pw), (nnz, entries)]),
        InfoFormat::Csc => sum(&[(n.checked_add(1)?, pw), (nnz, entries)]),
        InfoFormat::Dcsr => {
            let rows = (0..nnz).filter(|&e| e == 0 || r[e] != r[e - 1]).count();
            // Level 0: two positions and the stored rows; level 1: CSR over them.
            sum(&[(2, pw), (rows, cw), (rows + 1, pw), (nnz, entries)])
        }
        InfoFormat::Coo => sum(&[(2, pw), (nnz, cw.checked_mul(2)?.checked_add(vb)?)]),
        InfoFormat::Bsr(b) => {
            if b == 0 {
                return None;
            }
            let (blocks, _) = count_blocks(&r[..nnz], &c[..nnz], b, (usize::MAX, usize::MAX));
            let block = b.checked_mul(b)?.checked_mul(vb)?;
            sum(&[
                (m.div_ceil(b).checked_add(1)?, pw),
                (blocks, cw),
                (blocks, block),
            ])
        }
        InfoFormat::Ell(w) => {
            if w == 0 || w > n.max(1) {
                return None;
            }
            sum(&[(m, w.checked_mul(entries)?)])
        }
        InfoFormat::Dense => sum(&[(m.checked_mul(n)?, vb)]),
    }
}

/// The `b`×`b` blocks (`b` at least 1) holding the entries at rows `r` and columns `c`
/// (sorted by row) that lie below `within` (rows, columns), and how many entries those are:
/// the distinct block columns of each block row, whose entries are contiguous in row order.
fn count_blocks(r: &[usize], c: &[usize], b: usize, within: (usize, usize)) -> (usize, usize) {
    let b = b.max(1);
    let (mut blocks, mut entries) = (0usize, 0usize);
    let mut cols = Vec::new();
    let mut e = 0;
    let nnz = r.len().min(c.len());
    while e < nnz {
        let br = r[e] / b;
        cols.clear();
        while e < nnz && r[e] / b == br {
            if r[e] < within.0 && c[e] < within.1 {
                cols.push(c[e] / b);
            }
            e += 1;
        }
        entries += cols.len();
        cols.sort_unstable();
        cols.dedup();
        blocks += cols.len();
    }
    (blocks, entries)
}

/// The row pointers (CSR `indptr`, `m + 1` positions) of entries whose row coordinates are
/// `rows`, grouped row by row: `Err(Some(r))` for the first row `r >= m`, `Err(None)` where the
/// positions cannot be allocated.
fn row_pointers(m: usize, rows: &[usize]) -> Result<Vec<usize>, Option<usize>> {
    let mut indptr = m
        .checked_add(1)
        .and_then(|len| filled(len, 0usize))
        .ok_or(None)?;
    for &r in rows {
        if r >= m {
            return Err(Some(r));
        }
        indptr[r + 1] += 1;
    }
    for r in 0..m {
        indptr[r + 1] += indptr[r];
    }
    Ok(indptr)
}

/// `n` copies of `v`, or `None` where this machine cannot hold them (instead of aborting).
fn filled<T: Clone>(n: usize, v: T) -> Option<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n).ok()?;
    out.resize(n, v);
    Some(out)
}

/// Shape, nnz, row-length statistics and storage bytes per format of a tensor file.
pub fn info(path: &Path) -> Result<serde_json::Value, DriverError> {
    let mut coo = load_coo(path)?;
    coo.sort_and_sum_duplicates();
    // Equal values (a `pattern` file): SpMV's built-in schedule then stores one (`iso_values`).
    let equal = coo.nnz() > 0 && equal_values(&coo.values);
    let mut out = serde_json::json!({ "file": path, "shape": coo.shape, "nnz": coo.nnz(), "dtype": coo.values.dtype().name(), "equal_values": equal });
    if coo.shape.len() == 2 {
        let mut lens = filled(coo.shape[0], 0usize).ok_or_else(|| BindError::TooLarge {
            buffer: format!("{} (its row lengths)", path.display()),
        })?;
        for &r in &coo.coords[0] {
            lens[r] += 1;
        }
        let max = lens.iter().copied().max().unwrap_or(0);
        // Histogram of row lengths in power-of-two bins: bin k counts rows with length in
        // [2^(k-1), 2^k) (bin 0: empty rows).
        let mut hist = vec![0usize; usize::BITS as usize - max.leading_zeros() as usize + 1];
        for &l in &lens {
            hist[usize::BITS as usize - l.leading_zeros() as usize] += 1;
        }
        let mean = if lens.is_empty() {
            0.0
        } else {
            coo.nnz() as f64 / lens.len() as f64
        };
        out["rows"] = serde_json::json!({ "empty": lens.iter().filter(|&&l| l == 0).count(), "max": max, "mean": mean, "histogram_pow2": hist });
        // Hub-heavy gathers size SpMV's column panels on some hosts (`spmv_panel_width`).
        out["hot_columns_permille"] = hot_columns(&coo).into();
        // Counted from the entries, not built: bsr(4,4) of a 28M-entry graph would take
        // gigabytes, and ELL as wide as the longest row far more.
        let mut formats = serde_json::Map::new();
        for f in InfoFormat::reported(max) {
            formats.insert(
                f.name(),
                preset_bytes(&coo, f).map_or(serde_json::Value::Null, Into::into),
            );
        }
        out["storage_bytes"] = formats.into();
    }
    Ok(out)
}

/// Reads a schedule file.
pub fn load_schedule(path: &Path) -> Result<ScheduleFile, DriverError> {
    let text = std::fs::read_to_string(path).map_err(|source| DriverError::ScheduleRead {
        path: path.to_path_buf(),
        source,
    })?;
    ScheduleFile::from_ron(&text).map_err(|e| DriverError::ScheduleSyntax {
        path: path.to_path_buf(),
        line: e.span.start.line,
        column: e.span.start.col,
        message: e.code.to_string(),
    })
}

/// Runs the inspectors of the format conversions of a scheduled kernel on its inputs: each
/// decomposed buffer's CSR is split into the structure of its parts, with the source map of
/// each part's value slots ([`lacuna_schedule::convert_structure`]); the values are bound as
/// zeros, and the executable's generated value copies ([`ValueCopy`], run by
/// [`Executable::run_preprocess`] and [`Executable::run`]) fill them. `per_relation`
/// conversions build their values here. The result seeds [`lacuna_stage1::bind_with`].
pub fn convert_inputs(
    conversions: &[Conversion],
    inputs: &BTreeMap<String, Input>,
) -> Result<Bindings, DriverError> {
    let mut given = Bindings::default();
    for conv in conversions {
        let input = inputs
            .get(&conv.buffer)
            .ok_or_else(|| BindError::MissingInput {
                buffer: conv.buffer.clone(),
            })?;
        if conv.iso && conv.parts.is_empty() {
            // The buffer keeps its storage; its one value is filled when the kernel runs.
            given.buffers.insert(
                lacuna_schedule::iso_name(&conv.buffer),
                lacuna_ir::ArrayData::F64(vec![0.0]),
            );
            continue;
        }
        let mut coo = match input {
            Input::Coo(c) => std::borrow::Cow::Borrowed(c),
            Input::Sparse(t) => std::borrow::Cow::Owned(t.to_coo()),
            // Its non-zeros, as binding stores them: the source maps index those.
            Input::Dense(d) => {
                std::borrow::Cow::Owned(lacuna_stage1::dense_nonzeros(&conv.buffer, d)?)
            }
        };
        // Coordinates already sorted and unique (as read from a file) are read where they are;
        // others are copied (if borrowed) and sorted (copying 28M entries took a second).
        if !coo.sorted_and_unique() {
            coo.to_mut().sort_and_sum_duplicates();
        }
        let fail = |source| DriverError::Conversion {
            buffer: conv.buffer.clone(),
            source,
        };
        if conv.per_relation {
            // A relation-CSF tensor: its parts are built relation by relation.
            let [rel, m, n] = coo.shape[..] else {
                return Err(BindError::Rank {
                    buffer: conv.buffer.clone(),
                    expected: 3,
                    found: coo.shape.len(),
                }
                .into());
            };
            let c = &coo.coords;
            let part = lacuna_schedule::convert_relations(
                conv,
                [rel, m, n],
                [&c[0], &c[1], &c[2]],
                &coo.values.to_f64_vec(),
            )
            .map_err(fail)?;
            given.params.extend(part.params);
            given.axes.extend(part.axes);
            given.buffers.extend(part.buffers);
            continue;
        }
        if coo.shape.len() != 2 {
            return Err(BindError::Rank {
                buffer: conv.buffer.clone(),
                expected: 2,
                found: coo.shape.len(),
            }
            .into());
        }
        let (m, n) = (coo.shape[0], coo.shape[1]);
        let indptr = row_pointers(m, &coo.coords[0]).map_err(|outside| match outside {
            Some(r) => BindError::CoordRange {
                buffer: conv.buffer.clone(),
                dim: 0,
                coord: r,
                extent: m,
            },
            None => BindError::TooLarge {
                buffer: conv.buffer.clone(),
            },
        })?;
        let csr = lacuna_schedule::decompose::CsrMatrix::new(
            m,
            n,
            indptr,
            coo.coords[1].clone(),
            coo.values.to_f64_vec(),
        )
        .map_err(fail)?;
        let part = lacuna_schedule::convert_structure(conv, &csr).map_err(fail)?;
        given.params.extend(part.params);
        given.axes.extend(part.axes);
        given.buffers.extend(part.buffers);
    }
    Ok(given)
}
