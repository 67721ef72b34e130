//! Python bindings of Lacuna: the extension module `lacuna._lacuna` under the pure-Python
//! package `lacuna` (`python/lacuna/`), built with maturin.
//!
//! The module holds thin wrappers: [`kernel::PyKernel`] (a verified RON kernel),
//! [`kernel::PySchedule`] (one method per schedule primitive), [`run::build`] and the callable
//! [`run::PyExecutable`] (zero-copy over NumPy and SciPy CSR where layouts match), sparse
//! tensor storage in [`formats`], and one exception class per error concern ([`errors`]).
//! The Python package adds the authoring builder, argument normalization and docstrings.
#![warn(missing_docs)]

pub mod errors;
pub mod formats;
pub mod kernel;
pub mod run;
pub mod tune;

use pyo3::prelude::*;

/// Large arrays start on a cache line (see `lacuna::alloc`).
#[global_allocator]
static ALLOC: lacuna::alloc::CacheAligned = lacuna::alloc::CacheAligned;

/// The extension module.
#[pymodule]
fn _lacuna(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<kernel::PyKernel>()?;
    m.add_class::<kernel::PySchedule>()?;
    m.add_class::<run::PyExecutable>()?;
    m.add_class::<formats::PySparseTensor>()?;
    m.add_function(wrap_pyfunction!(run::build, m)?)?;
    m.add_function(wrap_pyfunction!(formats::from_coo, m)?)?;
    m.add_function(wrap_pyfunction!(formats::from_dense, m)?)?;
    m.add_function(wrap_pyfunction!(formats::assemble, m)?)?;
    m.add_function(wrap_pyfunction!(formats::storage_layout, m)?)?;
    m.add_function(wrap_pyfunction!(tune::tune, m)?)?;
    m.add_function(wrap_pyfunction!(tune::tune_worker, m)?)?;
    m.add("LacunaError", py.get_type::<errors::LacunaError>())?;
    m.add("KernelError", py.get_type::<errors::KernelError>())?;
    m.add("ScheduleError", py.get_type::<errors::ScheduleError>())?;
    m.add("FormatError", py.get_type::<errors::FormatError>())?;
    m.add("BindError", py.get_type::<errors::BindError>())?;
    m.add("ShapeError", py.get_type::<errors::ShapeError>())?;
    m.add("CompileError", py.get_type::<errors::CompileError>())?;
    m.add("ExecutionError", py.get_type::<errors::ExecutionError>())?;
    m.add("DataFileError", py.get_type::<errors::DataFileError>())?;
    m.add("TuneError", py.get_type::<errors::TuneError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
