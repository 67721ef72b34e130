//! `Kernel` and `Schedule`: a verified RON kernel, and the primitives applied to it.

use crate::errors::{driver_error, guard, KernelError, ScheduleError};
use lacuna::driver::parse_kernel_with_formats;
use lacuna_schedule::{Instruction, Schedule, ScheduleFile};
use lacuna_stage1::{Program, Role};
use pyo3::prelude::*;
use std::path::Path;

/// A kernel: the program as written (for `to_ron`) and as prepared for scheduling and
/// compilation (encodings turned into level axes).
#[pyclass(module = "lacuna._lacuna", name = "Kernel", frozen)]
#[derive(Clone)]
pub struct PyKernel {
    pub(crate) source: Program,
    pub(crate) prepared: Program,
}

impl PyKernel {
    fn parse(text: &str, origin: &str, formats: Vec<(String, String)>) -> PyResult<PyKernel> {
        guard("Kernel.from_ron", || {
            for (name, enc) in &formats {
                lacuna_ir::encoding::parse_format(enc).map_err(|e| {
                    crate::errors::FormatError::new_err(format!(
                        "format of `{name}`: bad encoding:\n{}",
                        e.render(enc)
                    ))
                })?;
            }
            let path = Path::new(origin);
            let prepared =
                parse_kernel_with_formats(text, path, &formats).map_err(|e| driver_error(&e))?;
            let mut source = Program::from_ron(text).map_err(|e| {
                KernelError::new_err(format!(
                    "{origin}:{}:{}: {}",
                    e.span.start.line, e.span.start.col, e.code
                ))
            })?;
            for (name, enc) in &formats {
                if let Some(b) = source.buffers.iter_mut().find(|b| &b.name == name) {
                    b.encoding = Some(enc.clone());
                }
            }
            Ok(PyKernel { source, prepared })
        })
    }

    pub(crate) fn buffers_with(&self, role: Role) -> Vec<String> {
        self.source
            .buffers
            .iter()
            .filter(|b| b.role == role)
            .map(|b| b.name.clone())
            .collect()
    }
}

#[pymethods]
impl PyKernel {
    /// Parses and verifies kernel text; `formats` maps encoded buffers to other encodings.
    #[staticmethod]
    #[pyo3(signature = (text, formats = None, origin = "<string>"))]
    fn from_ron_text(
        text: &str,
        formats: Option<Vec<(String, String)>>,
        origin: &str,
    ) -> PyResult<PyKernel> {
        PyKernel::parse(text, origin, formats.unwrap_or_default())
    }

    /// Reads, parses and verifies a kernel file.
    #[staticmethod]
    #[pyo3(signature = (path, formats = None))]
    fn from_ron(
        path: std::path::PathBuf,
        formats: Option<Vec<(String, String)>>,
    ) -> PyResult<PyKernel> {
        let text = std::fs::read_to_string(&path).map_err(|e| {
            crate::errors::DataFileError::new_err(format!("{}: {e}", path.display()))
        })?;
        PyKernel::parse(
            &text,
            &path.display().to_string(),
            formats.unwrap_or_default(),
        )
    }

    /// The kernel as RON text (what `from_ron_text` reads back).
    fn to_ron(&self) -> String {
        self.source.to_ron()
    }

    /// The kernel in the readable stage-I form of `lacuna lower --stage 1`.
    fn text(&self) -> String {
        lacuna_stage1::print_program(&self.prepared)
    }

    /// The kernel's name.
    #[getter]
    fn name(&self) -> String {
        self.source.name.clone()
    }

    /// The symbolic sizes.
    #[getter]
    fn params(&self) -> Vec<String> {
        self.source.params.clone()
    }

    /// The input buffers, in declaration order.
    #[getter]
    fn inputs(&self) -> Vec<String> {
        self.buffers_with(Role::Input)
    }

    /// The output buffers, in declaration order.
    #[getter]
    fn outputs(&self) -> Vec<String> {
        self.buffers_with(Role::Output)
    }

    /// Whether the kernel is compiled by co-iteration (several sparse operands or a sparse result).
    #[getter]
    fn is_coiteration(&self) -> bool {
        lacuna_stage2::coiter::is_coiteration(&self.prepared)
    }

    fn __eq__(&self, other: &PyKernel) -> bool {
        self.source == other.source
    }

    fn __repr__(&self) -> String {
        format!(
            "Kernel({:?}, inputs={:?}, outputs={:?})",
            self.source.name,
            self.buffers_with(Role::Input),
            self.buffers_with(Role::Output)
        )
    }
}

/// A schedule: a kernel and the primitives applied to it, in order.
#[pyclass(module = "lacuna._lacuna", name = "Schedule")]
#[derive(Clone)]
pub struct PySchedule {
    pub(crate) kernel: PyKernel,
    pub(crate) schedule: Schedule,
}

fn schedule_err(e: lacuna_schedule::ScheduleError) -> PyErr {
    ScheduleError::new_err(e.to_string())
}

impl PySchedule {
    fn apply(&mut self, inst: Instruction) -> PyResult<()> {
        let schedule = &mut self.schedule;
        guard("Schedule.apply", || {
            schedule.apply(inst).map_err(schedule_err)
        })
    }

    pub(crate) fn file(&self) -> ScheduleFile {
        self.schedule.to_file()
    }
}

#[pymethods]
impl PySchedule {
    #[new]
    fn new(kernel: PyRef<'_, PyKernel>) -> PyResult<PySchedule> {
        let kernel = kernel.clone();
        let schedule = guard("Schedule", || {
            Schedule::new(&kernel.prepared).map_err(schedule_err)
        })?;
        Ok(PySchedule { kernel, schedule })
    }

    /// Replays a schedule file (RON text) on `kernel`.
    #[staticmethod]
    fn from_ron_text(kernel: PyRef<'_, PyKernel>, text: &str) -> PyResult<PySchedule> {
        let kernel = kernel.clone();
        let file = ScheduleFile::from_ron(text).map_err(|e| {
            ScheduleError::new_err(format!(
                "<schedule>:{}:{}: {}",
                e.span.start.line, e.span.start.col, e.code
            ))
        })?;
        if file.kernel != kernel.source.name {
            return Err(ScheduleError::new_err(format!(
                "the schedule is for kernel `{}`, not `{}`",
                file.kernel, kernel.source.name
            )));
        }
        let schedule = guard("Schedule.replay", || {
            Schedule::replay(&kernel.prepared, &file.trace).map_err(schedule_err)
        })?;
        Ok(PySchedule { kernel, schedule })
    }

    /// The kernel being scheduled.
    #[getter]
    fn kernel(&self) -> PyKernel {
        self.kernel.clone()
    }

    /// The trace as a RON schedule file.
    #[getter]
    fn trace(&self) -> String {
        self.file().to_ron()
    }

    /// The number of applied primitives.
    fn __len__(&self) -> usize {
        self.schedule.trace().len()
    }

    /// The names of the primitives applied, in order.
    fn primitives(&self) -> Vec<&'static str> {
        self.schedule.trace().iter().map(|i| i.name()).collect()
    }

    /// A copy that can be changed independently.
    fn copy(&self) -> PySchedule {
        self.clone()
    }

    /// Names of the loops around `block`, outermost first.
    fn get_loops(&self, block: &str) -> PyResult<Vec<String>> {
        self.schedule.get_loops(block).map_err(schedule_err)
    }

    /// Names of the blocks, in program order.
    fn get_blocks(&self) -> PyResult<Vec<String>> {
        self.schedule.get_blocks().map_err(schedule_err)
    }

    /// The scheduled program as text at a stage: `"1"` (sparse iterations), `"2"` (loops),
    /// `"flat"` (1-D arrays) or `"llvm"` (the optimized LLVM IR for the host).
    #[pyo3(signature = (stage = "2"))]
    fn lower(&self, py: Python<'_>, stage: &str) -> PyResult<String> {
        let schedule = &self.schedule;
        let flat = || {
            let f = schedule.stage2().map_err(schedule_err)?;
            lacuna_stage2::lower_to_flat(f, &lacuna_stage2::Config::default(), &mut |_, _| {})
                .map_err(|e| crate::errors::CompileError::new_err(e.to_string()))
        };
        match stage {
            "1" => Ok(lacuna_stage1::print_program(schedule.program())),
            "2" => Ok(lacuna_stage2::print_func(
                &schedule.stage2().map_err(schedule_err)?,
            )),
            "flat" => Ok(lacuna_stage2::print_func(&flat()?)),
            "llvm" => {
                let f = flat()?;
                py.detach(move || {
                    lacuna_target::emit_llvm_ir(&f, &lacuna_target::CodegenOptions::default())
                })
                .map_err(|e| crate::errors::CompileError::new_err(e.to_string()))
            }
            _ => Err(pyo3::exceptions::PyValueError::new_err(format!(
                "unknown stage `{stage}` (expected 1, 2, flat or llvm)"
            ))),
        }
    }

    fn sparse_reorder(&mut self, iter: String, axes: Vec<String>) -> PyResult<()> {
        self.apply(Instruction::SparseReorder { iter, axes })
    }
    fn sparse_fuse(&mut self, iter: String, axes: Vec<String>) -> PyResult<()> {
        self.apply(Instruction::SparseFuse { iter, axes })
    }
    fn sparse_decompose_init(&mut self, iter: String) -> PyResult<()> {
        self.apply(Instruction::SparseDecomposeInit { iter })
    }
    fn decompose_format(&mut self, buffer: String, into: String) -> PyResult<()> {
        self.apply(Instruction::DecomposeFormat { buffer, into })
    }
    fn iso_values(&mut self, buffer: String) -> PyResult<()> {
        self.apply(Instruction::IsoValues { buffer })
    }
    fn pos(&mut self, iter: String, axis: String, buffer: String) -> PyResult<()> {
        self.apply(Instruction::Pos { iter, axis, buffer })
    }
    fn specialize(&mut self, param: String, value: u64) -> PyResult<()> {
        self.apply(Instruction::Specialize { param, value })
    }
    fn split(&mut self, r#loop: String, factors: Vec<Option<u64>>) -> PyResult<()> {
        self.apply(Instruction::Split { r#loop, factors })
    }
    fn divide(&mut self, r#loop: String, parts: u64) -> PyResult<()> {
        self.apply(Instruction::Divide { r#loop, parts })
    }
    fn fuse(&mut self, outer: String, inner: String) -> PyResult<()> {
        self.apply(Instruction::Fuse { outer, inner })
    }
    fn reorder(&mut self, loops: Vec<String>) -> PyResult<()> {
        self.apply(Instruction::Reorder { loops })
    }
    fn parallel(&mut self, r#loop: String) -> PyResult<()> {
        self.apply(Instruction::Parallel { r#loop })
    }
    fn vectorize(&mut self, r#loop: String) -> PyResult<()> {
        self.apply(Instruction::Vectorize { r#loop })
    }
    fn bind(&mut self, r#loop: String, thread: String) -> PyResult<()> {
        self.apply(Instruction::Bind { r#loop, thread })
    }
    fn unroll(&mut self, r#loop: String) -> PyResult<()> {
        self.apply(Instruction::Unroll { r#loop })
    }
    fn compute_at(&mut self, block: String, r#loop: String) -> PyResult<()> {
        self.apply(Instruction::ComputeAt { block, r#loop })
    }
    fn reverse_compute_at(&mut self, block: String, r#loop: String) -> PyResult<()> {
        self.apply(Instruction::ReverseComputeAt { block, r#loop })
    }
    fn decompose_reduction(&mut self, block: String, r#loop: String) -> PyResult<()> {
        self.apply(Instruction::DecomposeReduction { block, r#loop })
    }
    fn blockize(&mut self, r#loop: String) -> PyResult<()> {
        self.apply(Instruction::Blockize { r#loop })
    }
    fn lift_loop(&mut self, r#loop: String) -> PyResult<()> {
        self.apply(Instruction::LiftLoop { r#loop })
    }
    fn bound(&mut self, r#loop: String, extent: u64) -> PyResult<()> {
        self.apply(Instruction::Bound { r#loop, extent })
    }
    fn horizontal_fuse(&mut self, loops: Vec<String>) -> PyResult<()> {
        self.apply(Instruction::HorizontalFuse { loops })
    }
    fn sparse_annotate(&mut self, iter: String, key: String, value: String) -> PyResult<()> {
        self.apply(Instruction::SparseAnnotate { iter, key, value })
    }
    fn sparse_unannotate(&mut self, iter: String, key: String) -> PyResult<()> {
        self.apply(Instruction::SparseUnannotate { iter, key })
    }
    /// Asserts a closed form for a structure array of `axis`: `stride` gives `indptr[i] =
    /// stride * i`; `row`, `in_row`, `constant` give `indices[p] = row * i + in_row * (p -
    /// indptr[i]) + constant`.
    #[pyo3(signature = (axis, *, stride = None, row = None, in_row = None, constant = 0))]
    fn specialize_buffer(
        &mut self,
        axis: String,
        stride: Option<i64>,
        row: Option<i64>,
        in_row: Option<i64>,
        constant: i64,
    ) -> PyResult<()> {
        let form = match (stride, row, in_row) {
            (Some(stride), None, None) => lacuna_stage1::ClosedForm::Indptr { stride },
            (None, Some(row), Some(in_row)) => lacuna_stage1::ClosedForm::Indices {
                row,
                in_row,
                constant,
            },
            _ => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "give either stride (indptr) or row and in_row (indices)",
                ))
            }
        };
        self.apply(Instruction::SpecializeBuffer { axis, form })
    }
    /// The block named `name` (its name, checked to exist).
    fn get_block(&self, name: &str) -> PyResult<String> {
        self.schedule.get_block(name).map_err(schedule_err)
    }
    /// The sparse iteration named `name` (its name, checked to exist).
    fn get_sparse_iteration(&self, name: &str) -> PyResult<String> {
        self.schedule
            .get_sparse_iteration(name)
            .map_err(schedule_err)
    }
    fn rfactor(&mut self, r#loop: String) -> PyResult<()> {
        self.apply(Instruction::Rfactor { r#loop })
    }
    #[pyo3(signature = (r#loop, key, value = 0))]
    fn annotate(&mut self, r#loop: String, key: String, value: i64) -> PyResult<()> {
        self.apply(Instruction::Annotate { r#loop, key, value })
    }
    fn unannotate(&mut self, r#loop: String, key: String) -> PyResult<()> {
        self.apply(Instruction::Unannotate { r#loop, key })
    }
    /// Stages what `block` reads of `buffer` under loop `at` in a `local`/`shared` cache.
    #[pyo3(signature = (block, buffer, scope, at = None))]
    fn cache_read(
        &mut self,
        block: String,
        buffer: String,
        scope: String,
        at: Option<String>,
    ) -> PyResult<()> {
        self.apply(Instruction::CacheRead {
            block,
            buffer,
            scope,
            at,
        })
    }
    /// Stages what `block` writes of `buffer` under loop `at` in a cache, written back after.
    #[pyo3(signature = (block, buffer, scope, at = None))]
    fn cache_write(
        &mut self,
        block: String,
        buffer: String,
        scope: String,
        at: Option<String>,
    ) -> PyResult<()> {
        self.apply(Instruction::CacheWrite {
            block,
            buffer,
            scope,
            at,
        })
    }
    /// Like `cache_read`, the cache indexed by the consumer's loops (a gather in the copy).
    #[pyo3(signature = (block, buffer, scope, at = None))]
    fn reverse_cache_read(
        &mut self,
        block: String,
        buffer: String,
        scope: String,
        at: Option<String>,
    ) -> PyResult<()> {
        self.apply(Instruction::ReverseCacheRead {
            block,
            buffer,
            scope,
            at,
        })
    }
    /// Accumulates `block`'s sum into `buffer` in a zeroed cache, added back after (a scatter).
    #[pyo3(signature = (block, buffer, scope, at = None))]
    fn reverse_cache_write(
        &mut self,
        block: String,
        buffer: String,
        scope: String,
        at: Option<String>,
    ) -> PyResult<()> {
        self.apply(Instruction::ReverseCacheWrite {
            block,
            buffer,
            scope,
            at,
        })
    }
    /// Changes the scope (`global`, `shared`, `local`) of a scratch buffer.
    fn set_scope(&mut self, buffer: String, scope: String) -> PyResult<()> {
        self.apply(Instruction::SetScope { buffer, scope })
    }
}
