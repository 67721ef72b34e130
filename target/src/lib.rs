//! LLVM code generation for flat Lacuna loop programs, an in-process JIT, and a typed runtime.
//!
//! A *flat* [`Func`] (see `lacuna_stage2::ir`) is compiled to an LLVM module with two
//! functions: an internal `alwaysinline` body taking every buffer as a separate `ptr noalias`
//! argument and every parameter as an `i64`, and the C-ABI entry point
//! `void lacuna_NAME(ptr bufs, ptr params)` that unpacks the arrays and calls it. The module
//! targets the host CPU, is optimized with the `default<On>` pipeline, and is JIT-compiled with
//! MCJIT into a [`CompiledKernel`], whose [`CompiledKernel::run`] binds a
//! [`lacuna_stage1::Bindings`] to the arguments.
//!
//! Scalar semantics are exactly those of the interpreters (`lacuna_stage1::eval_binop`,
//! `eval_unop`, `lacuna_ir::Scalar::cast`): IEEE floats without fast-math flags, wrapping
//! integers, integer division by zero giving zero, saturating float-to-integer conversion.
//! `select`, `&&` and `||` are lazy, so an operand that is not needed is never evaluated.
//! A value stored into a buffer is converted to the buffer's element type, as the
//! interpreters do.
//!
//! Loop kinds: `Serial` and `Parallel` loops run serially. `Vectorized` loops carry
//! `llvm.loop.vectorize.enable`, with which LLVM may also reorder floating-point reductions in
//! that loop (the schedule asserts its iterations may run as vector lanes), so their sums can
//! differ from the interpreters' in rounding; one whose bounds are read from memory (a sparse
//! row) interleaves one vector register per step, or, annotated `masked`, that many with its
//! tail folded into masked lanes; one of constant trip count is not unrolled before it is
//! vectorized (`llvm.loop.unroll.disable`) and its vector steps are unrolled in full after
//! (`llvm.loop.vectorize.followup_vectorized`). `Unrolled` loops carry `llvm.loop.unroll.full`,
//! effective for constant trip counts. LLVM's warnings about such hints are collected in
//! [`CompiledKernel::diagnostics`] rather than printed.
#![warn(missing_docs)]

mod check;
mod cuda;
mod diag;
mod emit;
mod error;
mod expr;
mod gather;
mod indexed;
mod kernel;
mod machine;
mod nvptx;
mod ops;
mod parallel;
mod stream;
mod vecload;

pub use cuda::{cuda_available, CudaError, CudaKernel};
pub use error::{CodegenError, RuntimeError};
pub use kernel::{CompiledKernel, KernelArgument, RawArray, RawBindings};
pub use machine::{
    host_assembles_gathers, host_blocks_whole_width, host_fast_l3, host_gathers_rows,
    host_has_vector_masks, host_l2_bytes, host_l3_bytes, host_masks_long_rows,
    host_prefetches_far_gathers, host_prefetches_rows, host_stream_bytes, host_vector_f64s,
    DEFAULT_L2_BYTES,
};
pub use nvptx::{compile_ptx, emit_nvptx_ir, GpuArch, GpuKernel, KernelLaunch, NVPTX_TRIPLE};
pub use parallel::{pool_builder, run_on_pool, MAX_THREADS, SPIN_MICROS};
pub use vecload::with_cpu_vector_loads;

use inkwell::context::Context;
use inkwell::module::Module;
use lacuna_stage2::Func;

/// Options of code generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodegenOptions {
    /// LLVM optimization level, 0 to 3 (default 3).
    pub opt_level: u8,
    /// Whether [`emit_llvm_ir`] returns the IR after optimization (default) or as generated.
    pub optimized_ir: bool,
    /// Generate code for the host CPU and its features (default). When off, the generic CPU
    /// of the host architecture is targeted, which makes the IR text machine-independent.
    pub host_cpu: bool,
    /// Allow fusing a floating-point product and the sum it feeds into one fused multiply-add
    /// (LLVM's `contract`; default on, as C compilers do). Off, every product and sum rounds
    /// separately, as in the interpreters.
    pub fp_contract: bool,
    /// Assemble the gathers of loops annotated `scalar_gathers` from scalar loads instead of
    /// gather instructions (see `gather.rs`); off, the annotation is ignored. By default on
    /// hosts where that was measured faster ([`host_assembles_gathers`]).
    pub assemble_gathers: bool,
}

impl Default for CodegenOptions {
    fn default() -> Self {
        CodegenOptions {
            opt_level: 3,
            optimized_ir: true,
            host_cpu: true,
            fp_contract: true,
            assemble_gathers: machine::host_assembles_gathers(),
        }
    }
}

/// The LLVM IR of a flat function as text, before or after optimization per
/// [`CodegenOptions::optimized_ir`].
pub fn emit_llvm_ir(f: &Func, opts: &CodegenOptions) -> Result<String, CodegenError> {
    let sink = diag::DiagnosticSink::default();
    let ctx = Context::create();
    // SAFETY: `sink` is declared before `ctx`, so it is dropped after it.
    unsafe { sink.install(&ctx) };
    let (module, _) = build_optimized(&ctx, f, opts, opts.optimized_ir)?;
    Ok(module.print_to_string().to_string())
}

/// Compiles a flat function to machine code for the host.
pub fn compile(f: &Func, opts: &CodegenOptions) -> Result<CompiledKernel, CodegenError> {
    kernel::compile_kernel(f, opts)
}

/// Stack of the threads that compile a function beside another (LLVM's passes recurse over
/// the IR; the main thread's 8 MiB is what they get otherwise).
const COMPILE_STACK_BYTES: usize = 8 << 20;

/// Compiles `funcs` (independent functions: each gets its own LLVM context and module), the
/// first on the calling thread and every other on a thread of its own, concurrently; the
/// results in `funcs`' order. Where a thread cannot be started, its function is compiled on
/// the calling thread after the others. Co-iteration kernels hold up to three functions (the
/// count and compute passes and the one-pass function, `lacuna::driver::CompiledCoKernel`): SpAdd C = A + Aᵀ on cage10, `lacuna
/// run`, three runs (session 32, AMD Zen 4 guest, 2 vCPUs): 16–22, 31–37 and 48–65 ms one
/// after another, 97–120 ms in all.
pub fn compile_side_by_side(
    funcs: &[&Func],
    opts: &CodegenOptions,
) -> Vec<Result<CompiledKernel, CodegenError>> {
    let Some((first, rest)) = funcs.split_first() else {
        return Vec::new();
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = rest
            .iter()
            .map(|f| {
                std::thread::Builder::new()
                    .name(format!("compile {}", f.name))
                    .stack_size(COMPILE_STACK_BYTES)
                    .spawn_scoped(s, move || compile(f, opts))
                    .map_err(|_| *f)
            })
            .collect();
        let mut out = vec![compile(first, opts)];
        for h in handles {
            out.push(match h {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(f) => compile(f, opts),
            });
        }
        out
    })
}

/// Builds (and, if `optimize`, optimizes) the module of `f`; returns it with the entry's name.
fn build_optimized<'ctx>(
    ctx: &'ctx Context,
    f: &Func,
    opts: &CodegenOptions,
    optimize: bool,
) -> Result<(Module<'ctx>, String), CodegenError> {
    let mut hm = machine::host_machine(opts)?;
    if opts.assemble_gathers && opts.host_cpu && !indexed::gathers_per_lane(f) {
        // Slow gather instructions, and none this function needs (see `indexed.rs`).
        hm.features.push_str(",+prefer-no-gather");
    }
    let (module, entry) = emit::build_module(ctx, f, &hm)?;
    if optimize {
        machine::optimize(&module, &hm, opts)?;
    }
    Ok((module, entry))
}
