//! Python exception classes, one per Rust error concern, and the conversions into them.
//!
//! Every class derives from `lacuna.LacunaError`; the message is the Rust error's `Display`.
//! Panics never cross into Python as crashes: [`guard`] turns one into a `LacunaError` that
//! says it is an internal error.

use lacuna::driver::DriverError;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::PyErr;

create_exception!(
    lacuna,
    LacunaError,
    PyException,
    "Base class of every Lacuna error."
);
create_exception!(
    lacuna,
    KernelError,
    LacunaError,
    "A kernel does not parse (RON syntax) or breaks a rule of stage I (verification)."
);
create_exception!(
    lacuna,
    ScheduleError,
    LacunaError,
    "A schedule primitive does not apply, or a schedule file does not parse or names another kernel."
);
create_exception!(
    lacuna,
    FormatError,
    LacunaError,
    "An encoding does not parse, or a tensor cannot be stored, assembled or converted in it."
);
create_exception!(
    lacuna,
    BindError,
    LacunaError,
    "Arguments do not fit the kernel: missing or unknown buffers, element types, layouts, structure."
);
create_exception!(
    lacuna,
    ShapeError,
    BindError,
    "Arguments disagree on a size, or an array has the wrong number of dimensions or elements."
);
create_exception!(
    lacuna,
    CompileError,
    LacunaError,
    "Lowering or code generation failed."
);
create_exception!(
    lacuna,
    ExecutionError,
    LacunaError,
    "A compiled or interpreted kernel failed while running."
);
create_exception!(
    lacuna,
    TuneError,
    LacunaError,
    "The tuner cannot run: bad options, a kernel with nothing to tune, or no record to apply."
);
create_exception!(
    lacuna,
    DataFileError,
    LacunaError,
    "A data or kernel file cannot be read or written."
);

/// The exception for a bind error: shape errors get their own class.
pub fn bind_error(e: &lacuna_stage1::BindError) -> PyErr {
    use lacuna_stage1::BindError as B;
    let msg = e.to_string();
    match e {
        B::Rank { .. }
        | B::ShapeMismatch { .. }
        | B::Length { .. }
        | B::CoordRange { .. }
        | B::Tiles { .. } => ShapeError::new_err(msg),
        B::MissingInput { .. }
        | B::UnknownInput { .. }
        | B::UnboundParam { .. }
        | B::PatternMismatch { .. }
        | B::Structure { .. }
        | B::NoStructure { .. }
        | B::Value { .. }
        | B::NegativeParam { .. }
        | B::TooLarge { .. }
        | B::ClosedForm { .. }
        | B::Converted { .. }
        | B::NotCoordinate { .. }
        | B::NotPermutation { .. } => BindError::new_err(msg),
    }
}

/// The exception for any driver error.
pub fn driver_error(e: &DriverError) -> PyErr {
    let msg = e.to_string();
    match e {
        DriverError::KernelSyntax { .. } | DriverError::Verify { .. } => KernelError::new_err(msg),
        DriverError::KernelRead { .. }
        | DriverError::ScheduleRead { .. }
        | DriverError::Io(_)
        | DriverError::UnknownFileType { .. }
        | DriverError::Output { .. } => DataFileError::new_err(msg),
        DriverError::Bind(b) => bind_error(b),
        DriverError::Coiter(c) => coiter_error(c),
        DriverError::Lower(_) | DriverError::Codegen(_) => CompileError::new_err(msg),
        DriverError::Runtime(_)
        | DriverError::Interp1(_)
        | DriverError::Interp2(_)
        | DriverError::Cuda(_) => ExecutionError::new_err(msg),
        DriverError::Encoding { .. }
        | DriverError::Storage { .. }
        | DriverError::NotEncoded { .. }
        | DriverError::Conversion { .. } => FormatError::new_err(msg),
        DriverError::ScheduleSyntax { .. }
        | DriverError::ScheduleKernel { .. }
        | DriverError::Schedule(_) => ScheduleError::new_err(msg),
        DriverError::UnknownOutput { .. }
        | DriverError::UnknownParam { .. }
        | DriverError::OtherProgram { .. } => BindError::new_err(msg),
    }
}

/// The exception for a co-iteration error: bad inputs are bind errors, failed passes
/// execution errors, the rest compile errors.
pub fn coiter_error(e: &lacuna_stage2::coiter::CoiterError) -> PyErr {
    use lacuna_stage2::coiter::CoiterError as C;
    let msg = e.to_string();
    match e {
        C::Input { .. } => BindError::new_err(msg),
        C::Run { .. } => ExecutionError::new_err(msg),
        C::Unsupported { .. } | C::InconsistentLevelOrder { .. } | C::GallopingUnion { .. } => {
            CompileError::new_err(msg)
        }
    }
}

/// Runs `f`, turning a panic into a `LacunaError` instead of unwinding into Python.
pub fn guard<T>(what: &str, f: impl FnOnce() -> Result<T, PyErr>) -> Result<T, PyErr> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let detail = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(LacunaError::new_err(format!(
                "internal error in {what} (please report it): {detail}"
            )))
        }
    }
}

/// Like [`guard`], for work that returns Rust errors (run without the GIL): the panic becomes
/// `Err(Err(message))`.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into())
    })
}

/// The `LacunaError` for a panic caught by [`catch`].
pub fn internal(what: &str, detail: String) -> PyErr {
    LacunaError::new_err(format!(
        "internal error in {what} (please report it): {detail}"
    ))
}
