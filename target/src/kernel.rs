//! A JIT-compiled kernel and its runtime: binds buffers and parameters, calls the entry point.

use crate::diag::DiagnosticSink;
use crate::error::{CodegenError, RuntimeError};
use crate::{build_optimized, CodegenOptions};
use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use lacuna_ir::{ArrayData, DType};
use lacuna_stage1::Bindings;
use lacuna_stage2::{BufferKind, Func};
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

/// The entry point: `bufs[i]` is the data of buffer `i`, `params[j]` the value of parameter `j`.
type EntryFn = unsafe extern "C" fn(bufs: *const *mut u8, params: *const i64);

/// A buffer argument of the kernel.
#[derive(Clone, Debug)]
struct Slot {
    name: String,
    kind: BufferKind,
    dtype: DType,
    /// Whether the body reads or writes it (unbound structure arrays are fine otherwise).
    accessed: bool,
}

/// Machine code for a flat function, with the LLVM context and execution engine that own it.
///
/// The kernel is `Send` and `Sync`: it exclusively owns its LLVM context, module and engine
/// (no other handle to them exists), LLVM contexts are not tied to a thread, and the only
/// shared-reference operations ([`CompiledKernel::run`], [`CompiledKernel::llvm_ir`]) call
/// reentrant machine code (no globals) or read a `String`, never touching LLVM objects.
pub struct CompiledKernel {
    entry: EntryFn,
    name: String,
    slots: Vec<Slot>,
    params: Vec<String>,
    ir: String,
    /// Dropped before `context` (see `Drop`).
    engine: ManuallyDrop<ExecutionEngine<'static>>,
    /// From `Box::leak`; freed in `Drop`, after the engine.
    context: NonNull<Context>,
    /// LLVM's warnings while compiling (e.g. a `Vectorized` loop that was not vectorized).
    diagnostics: Vec<String>,
    /// From `Box::leak`; receives the context's diagnostics, freed in `Drop` after the context.
    sink: NonNull<DiagnosticSink>,
}

// SAFETY: see the type's documentation: all LLVM state is exclusively owned and never touched
// through `&self`.
unsafe impl Send for CompiledKernel {}
// SAFETY: as above; `run` only calls the finalized, reentrant machine code.
unsafe impl Sync for CompiledKernel {}

impl Drop for CompiledKernel {
    fn drop(&mut self) {
        // SAFETY: the engine (which owns the module and machine code) goes first, then the
        // context it was created in, then the sink its diagnostic handler points to; each is
        // dropped exactly once.
        unsafe {
            ManuallyDrop::drop(&mut self.engine);
            drop(Box::from_raw(self.context.as_ptr()));
            drop(Box::from_raw(self.sink.as_ptr()));
        }
    }
}

impl std::fmt::Debug for CompiledKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledKernel")
            .field("name", &self.name)
            .field("buffers", &self.slots.len())
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

/// Compiles a flat function to machine code for the host (see [`crate::compile`]).
pub(crate) fn compile_kernel(
    f: &Func,
    opts: &CodegenOptions,
) -> Result<CompiledKernel, CodegenError> {
    let sink = NonNull::from(Box::leak(Box::<DiagnosticSink>::default()));
    let context = NonNull::from(Box::leak(Box::new(Context::create())));
    // SAFETY: the context lives until `CompiledKernel::drop` (or the error path below), after
    // every LLVM object created in it: the builder and module are dropped inside `jit`, and the
    // engine is dropped first in `Drop`. The boxed sink outlives the context in both paths.
    let ctx: &'static Context = unsafe { context.as_ref() };
    unsafe { sink.as_ref().install(ctx) };
    match jit(ctx, f, opts) {
        Ok((engine, entry, ir)) => {
            let accessed = crate::check::accessed_buffers(f);
            let slots = f
                .buffers
                .iter()
                .map(|b| Slot {
                    name: b.name.clone(),
                    kind: b.kind.clone(),
                    dtype: b.dtype,
                    accessed: accessed.contains(&b.name),
                })
                .collect();
            Ok(CompiledKernel {
                entry,
                name: f.name.clone(),
                slots,
                params: f.params.clone(),
                ir,
                engine: ManuallyDrop::new(engine),
                context,
                // SAFETY: the sink is alive (freed only in `Drop`).
                diagnostics: unsafe { sink.as_ref() }.messages(),
                sink,
            })
        }
        Err(e) => {
            // SAFETY: everything created in the context was dropped when `jit` returned.
            // The sink goes after the context.
            unsafe {
                drop(Box::from_raw(context.as_ptr()));
                drop(Box::from_raw(sink.as_ptr()));
            }
            Err(e)
        }
    }
}

fn jit(
    ctx: &'static Context,
    f: &Func,
    opts: &CodegenOptions,
) -> Result<(ExecutionEngine<'static>, EntryFn, String), CodegenError> {
    let (module, entry_name) = build_optimized(ctx, f, opts, true)?;
    let ir = module.print_to_string().to_string();
    let level = crate::machine::opt_level(opts)?;
    let engine = module
        .create_jit_execution_engine(level)
        .map_err(|e| CodegenError::Jit {
            message: e.to_string(),
        })?;
    // The runtime's parallel-for, for kernels with parallel loops.
    if let Some(rt) = module.get_function(crate::parallel::PARALLEL_FOR) {
        engine.add_global_mapping(
            &rt,
            crate::parallel::lacuna_rt_parallel_for as *const () as usize,
        );
    }
    let addr = engine
        .get_function_address(&entry_name)
        .map_err(|e| CodegenError::Jit {
            message: format!("entry `{entry_name}`: {e}"),
        })?;
    if addr == 0 {
        return Err(CodegenError::Jit {
            message: format!("entry `{entry_name}` has no address"),
        });
    }
    // SAFETY: `entry_name` was defined with exactly the signature `void(ptr, ptr)`.
    let entry = unsafe { std::mem::transmute::<usize, EntryFn>(addr) };
    Ok((engine, entry, ir))
}

impl CompiledKernel {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// LLVM's diagnostics while compiling, as `severity: message` (for example that a loop
    /// marked `Vectorized` could not be vectorized).
    pub fn diagnostics(&self) -> &[String] {
        &self.diagnostics
    }

    /// The optimized LLVM IR the machine code was generated from.
    pub fn llvm_ir(&self) -> &str {
        &self.ir
    }

    /// The values of the kernel's parameters, in its argument order.
    fn param_values(
        &self,
        given: &std::collections::BTreeMap<String, i64>,
    ) -> Result<Vec<i64>, RuntimeError> {
        self.params
            .iter()
            .map(|p| {
                given
                    .get(p)
                    .copied()
                    .ok_or_else(|| RuntimeError::MissingParam { param: p.clone() })
            })
            .collect()
    }

    /// Runs the kernel on `b`, updating written buffers in place. Returns an error, and calls
    /// nothing, when a parameter or an accessed array is missing or an array's element type
    /// differs from the kernel's.
    ///
    /// # Safety
    ///
    /// The machine code does no bounds checks, so `b` must be consistent with the function
    /// the kernel was compiled from: every array as long as the accesses through it reach, and
    /// every structure array and coordinate buffer within the ranges the function assumes.
    /// Bindings that `lacuna_stage1::bind` produced for the program the function was lowered
    /// from, or that `lacuna_stage1::validate` accepted against it, are; so are the buffers the
    /// function's own preprocessing wrote. The driver's `Executable::run` validates before it
    /// calls this.
    pub unsafe fn run(&self, b: &mut Bindings) -> Result<(), RuntimeError> {
        let params = self.param_values(&b.params)?;
        let mut ptrs: Vec<*mut u8> = Vec::with_capacity(self.slots.len());
        for s in &self.slots {
            let data = match &s.kind {
                BufferKind::Values(_) => b.buffers.get_mut(&s.name),
                BufferKind::Indptr(axis) => b.axes.get_mut(axis).and_then(|a| a.indptr.as_mut()),
                BufferKind::Indices(axis) => b.axes.get_mut(axis).and_then(|a| a.indices.as_mut()),
            };
            ptrs.push(match data {
                Some(a) => pointer(a, s)?,
                // Never dereferenced: the body does not access this buffer.
                None if !s.accessed && !matches!(s.kind, BufferKind::Values(_)) => {
                    NonNull::<u64>::dangling().as_ptr().cast()
                }
                None => return Err(missing(s)),
            });
        }
        // SAFETY: one pointer per buffer of the declared element type (a `Vec`'s pointer, which
        // is dangling but aligned when empty, and never read then by a valid kernel), one value
        // per parameter; the `&mut Bindings` keeps the data alive and unaliased during the call;
        // the caller guarantees the data is consistent with the function (see `# Safety`).
        unsafe { (self.entry)(ptrs.as_ptr(), params.as_ptr()) };
        Ok(())
    }
}

fn missing(s: &Slot) -> RuntimeError {
    match &s.kind {
        BufferKind::Values(_) => RuntimeError::MissingBuffer {
            buffer: s.name.clone(),
        },
        BufferKind::Indptr(axis) => RuntimeError::MissingStructure {
            buffer: s.name.clone(),
            axis: axis.clone(),
            array: "indptr",
        },
        BufferKind::Indices(axis) => RuntimeError::MissingStructure {
            buffer: s.name.clone(),
            axis: axis.clone(),
            array: "indices",
        },
    }
}

fn pointer(a: &mut ArrayData, s: &Slot) -> Result<*mut u8, RuntimeError> {
    if a.dtype() != s.dtype {
        return Err(RuntimeError::DType {
            buffer: s.name.clone(),
            expected: s.dtype,
            found: a.dtype(),
        });
    }
    Ok(a.as_mut_ptr())
}

/// One array handed to [`CompiledKernel::run_raw`]: `len` elements of `dtype` at `ptr`, owned
/// elsewhere (e.g. a NumPy array).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawArray {
    /// The first element (aligned for `dtype`; may dangle when `len` is 0).
    pub ptr: *mut u8,
    /// Number of elements.
    pub len: usize,
    /// Element type.
    pub dtype: DType,
}

/// Parameters and borrowed arrays for [`CompiledKernel::run_raw`], named as in
/// [`lacuna_stage1::Bindings`]: values by buffer, structure arrays by axis.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawBindings {
    /// Values of the symbolic sizes.
    pub params: std::collections::BTreeMap<String, i64>,
    /// Values per buffer name.
    pub buffers: std::collections::BTreeMap<String, RawArray>,
    /// `indptr` per axis name.
    pub indptr: std::collections::BTreeMap<String, RawArray>,
    /// `indices` per axis name.
    pub indices: std::collections::BTreeMap<String, RawArray>,
}

/// A buffer argument of a compiled kernel, as [`CompiledKernel::arguments`] lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelArgument<'a> {
    /// The buffer's name (`AXIS.indptr` / `AXIS.indices` for structure arrays).
    pub name: &'a str,
    /// What the array holds (values of a buffer with its role, or an axis's structure).
    pub kind: &'a BufferKind,
    /// Its element type.
    pub dtype: DType,
    /// Whether the machine code reads or writes it.
    pub accessed: bool,
}

impl CompiledKernel {
    /// The buffer arguments of the kernel, in entry-point order.
    pub fn arguments(&self) -> impl Iterator<Item = KernelArgument<'_>> {
        self.slots.iter().map(|s| KernelArgument {
            name: &s.name,
            kind: &s.kind,
            dtype: s.dtype,
            accessed: s.accessed,
        })
    }

    /// The names of the parameters the kernel reads.
    pub fn param_names(&self) -> &[String] {
        &self.params
    }

    /// Runs the kernel on arrays owned elsewhere, without copying them: each buffer argument
    /// is taken from `b` by its kind (values by buffer name, `indptr`/`indices` by axis name).
    /// Returns an error, and calls nothing, when a parameter or an accessed array is missing or
    /// an array's element type differs from the kernel's.
    ///
    /// # Safety
    ///
    /// The machine code does no bounds checks, so the caller guarantees what
    /// [`CompiledKernel::run`] requires of its bindings:
    /// - every pointer is valid for reads of `len` elements of its type, and for writes too
    ///   when the kernel writes that buffer (outputs and allocated buffers);
    /// - the arrays are consistent with the parameters exactly as `lacuna_stage1::validate`
    ///   checks owned bindings (for borrowed inputs `lacuna_stage1::bind_views` does, and
    ///   `lacuna_stage1::check_length` for the written buffers): lengths, `indptr` monotone from
    ///   zero, coordinates in range, sorted where the axis says so, each coordinate once in a
    ///   buffer declared a permutation (`rcm`'s row ids: two iterations of a parallel row loop
    ///   would otherwise write one row), and each axis declared to tile an extent
    ///   (`lacuna_stage1::Tiles`: BSR's block rows and columns) within it, as the kernel indexes
    ///   the tiled axis without a range check;
    /// - no array the kernel writes overlaps another array, and nothing else reads or writes
    ///   them during the call.
    pub unsafe fn run_raw(&self, b: &RawBindings) -> Result<(), RuntimeError> {
        let params = self.param_values(&b.params)?;
        let mut ptrs: Vec<*mut u8> = Vec::with_capacity(self.slots.len());
        for s in &self.slots {
            let data = match &s.kind {
                BufferKind::Values(_) => b.buffers.get(&s.name),
                BufferKind::Indptr(axis) => b.indptr.get(axis),
                BufferKind::Indices(axis) => b.indices.get(axis),
            };
            ptrs.push(match data {
                Some(a) if a.dtype != s.dtype => {
                    return Err(RuntimeError::DType {
                        buffer: s.name.clone(),
                        expected: s.dtype,
                        found: a.dtype,
                    })
                }
                Some(a) if a.len == 0 => {
                    // Never dereferenced by a kernel whose arrays are consistent (nothing stored).
                    NonNull::<u64>::dangling().as_ptr().cast()
                }
                Some(a) => a.ptr,
                None if !s.accessed && !matches!(s.kind, BufferKind::Values(_)) => {
                    NonNull::<u64>::dangling().as_ptr().cast()
                }
                None => return Err(missing(s)),
            });
        }
        // SAFETY: one pointer per buffer of the declared element type, valid and consistent
        // with the parameters per this function's contract; one value per parameter.
        unsafe { (self.entry)(ptrs.as_ptr(), params.as_ptr()) };
        Ok(())
    }
}
