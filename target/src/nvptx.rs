//! NVPTX code generation: a flat function with loops bound to the CUDA thread hierarchy as one
//! PTX kernel for `sm_80` or `sm_90`.
//!
//! The kernel `lacuna_NAME(ptr addrspace(1) noalias %buf0, ..., i64 %param0, ...)` uses the
//! `ptx_kernel` calling convention and is also listed in `nvvm.annotations` as a kernel. Its
//! body is the statement emitter of the CPU path with one difference, the GPU semantics of
//! `lacuna_stage2::gpu`: a loop `bind(AXIS) for v in start..end` becomes
//! `v = start + AXIS; if v < end { body }`, with `AXIS` read from the special register
//! (`llvm.nvvm.read.ptx.sreg.ctaid.*` / `tid.*`). The launch extents come from
//! [`lacuna_stage2::gpu::launch`]; [`GpuKernel::launch_dims`] evaluates them for parameter
//! values. When the block's extents are constants, `maxntid{x,y,z}` annotations give `ptxas`
//! the launch bound (CUDA's `__launch_bounds__`).
//!
//! A function of several launches ([`lacuna_stage2::gpu::split_launches`]) becomes one PTX
//! module with one entry per launch, `lacuna_NAME_k0`, `lacuna_NAME_k1`, ... (a single launch
//! keeps the plain `lacuna_NAME`), listed in order in [`GpuKernel::launches`].

use crate::check::{check_decls, symbol_name};
use crate::emit::{arg, Emitter};
use crate::error::CodegenError;
use crate::CodegenOptions;
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple,
};
use inkwell::types::BasicMetadataTypeEnum;
use inkwell::values::{BasicMetadataValueEnum, FunctionValue};
use inkwell::AddressSpace;
use lacuna_ir::DType;
use lacuna_stage1::Bindings;
use lacuna_stage2::gpu::{launch, GpuError, Launch};
use lacuna_stage2::gpu_mem::{shared_layout, SharedLayout, MAX_SHARED_SM80, MAX_SHARED_SM90};
use lacuna_stage2::BufferKind;
use lacuna_stage2::{Expr, Func, GpuAxis, ShuffleKind, Stmt};
use std::collections::HashMap;
use std::sync::OnceLock;

type R<T> = Result<T, CodegenError>;

/// The NVPTX target triple.
pub const NVPTX_TRIPLE: &str = "nvptx64-nvidia-cuda";

/// LLVM's calling convention number of `ptx_kernel`.
const PTX_KERNEL_CC: u32 = 71;

/// Address space of global memory.
const GLOBAL: u16 = 1;

/// A GPU architecture PTX is generated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpuArch {
    /// Ampere (`sm_80`).
    Sm80,
    /// Hopper (`sm_90`).
    Sm90,
}

impl GpuArch {
    /// Parses `cuda`, `cuda:sm_80` or `cuda:sm_90` (plain `cuda` is `sm_80`).
    pub fn from_target(target: &str) -> Result<GpuArch, CodegenError> {
        match target {
            "cuda" | "cuda:sm_80" => Ok(GpuArch::Sm80),
            "cuda:sm_90" => Ok(GpuArch::Sm90),
            other => Err(CodegenError::GpuTarget {
                target: other.to_string(),
            }),
        }
    }
    /// The CPU name of LLVM's NVPTX target (and `ptxas -arch`).
    pub fn name(self) -> &'static str {
        match self {
            GpuArch::Sm80 => "sm_80",
            GpuArch::Sm90 => "sm_90",
        }
    }
    /// The most shared memory (static plus dynamic) a block may use on this architecture
    /// after opting in: 163 KiB on sm_80, 227 KiB on sm_90.
    pub fn max_shared_bytes(self) -> u64 {
        match self {
            GpuArch::Sm80 => MAX_SHARED_SM80,
            GpuArch::Sm90 => MAX_SHARED_SM90,
        }
    }
}

/// One kernel of a PTX module and how to launch it.
#[derive(Clone, Debug)]
pub struct KernelLaunch {
    /// The kernel's symbol in the PTX.
    pub entry: String,
    /// Launch extents per dimension (see [`lacuna_stage2::gpu`]).
    pub launch: Launch,
    /// Its shared memory: static buffers and the dynamic ones with their offsets.
    pub shared: SharedLayout,
}

/// A PTX module of one function and how to launch its kernels.
#[derive(Clone, Debug)]
pub struct GpuKernel {
    /// The symbol of the first (for a single-launch function: the only) kernel in the PTX
    /// (`lacuna_NAME`).
    pub entry: String,
    /// The PTX text (every kernel of the function).
    pub ptx: String,
    /// The architecture it was generated for.
    pub arch: GpuArch,
    /// Launch extents of the first kernel per dimension (see [`lacuna_stage2::gpu`]).
    pub launch: Launch,
    /// The function's parameters, passed after the buffers in this order.
    pub params: Vec<String>,
    /// The function (buffers in argument order).
    pub func: Func,
    /// Its shared memory: static buffers and the dynamic ones with their offsets.
    pub shared: SharedLayout,
    /// Every kernel, in launch order (one for a single-launch function: `entry`, `launch`).
    /// All take the same arguments.
    pub launches: Vec<KernelLaunch>,
}

impl GpuKernel {
    /// Grid and block dimensions of the first kernel for bound data (see
    /// [`GpuKernel::dims_of`]).
    pub fn launch_dims(&self, b: &Bindings) -> Result<([u32; 3], [u32; 3]), GpuError> {
        self.dims_of(&self.launch, b)
    }

    /// Grid and block dimensions of every kernel, in launch order.
    #[allow(clippy::type_complexity)]
    pub fn all_launch_dims(&self, b: &Bindings) -> Result<Vec<([u32; 3], [u32; 3])>, GpuError> {
        self.launches
            .iter()
            .map(|k| self.dims_of(&k.launch, b))
            .collect()
    }

    /// Grid and block dimensions of `launch` for bound data: the extents are evaluated from its
    /// parameters (and, for extents such as `J.indptr[m]`, its structure arrays).
    pub fn dims_of(&self, launch: &Launch, b: &Bindings) -> Result<([u32; 3], [u32; 3]), GpuError> {
        launch.dims(&b.params, &|name, i| host_load(&self.func, b, name, i))
    }

    /// Bytes of dynamic shared memory the first kernel's launch on bound data needs (see
    /// [`GpuKernel::dynamic_shared_of`]).
    pub fn dynamic_shared_bytes(&self, b: &Bindings) -> Result<u64, GpuError> {
        self.dynamic_shared_of(&self.shared, b)
    }

    /// Bytes of dynamic shared memory a launch of a kernel with shared memory `shared` on
    /// bound data needs (0 when no shared buffer is dynamic), checked with the static shared
    /// memory against the architecture's limit ([`GpuArch::max_shared_bytes`]); the launcher
    /// checks the device's own limit too.
    pub fn dynamic_shared_of(&self, shared: &SharedLayout, b: &Bindings) -> Result<u64, GpuError> {
        shared.dynamic_bytes_for(
            &b.params,
            &|name, i| host_load(&self.func, b, name, i),
            self.arch.max_shared_bytes(),
            self.arch.name(),
        )
    }
}

/// Element `i` of the bound array behind buffer `name` of `f` (for expressions evaluated on
/// the host before a launch).
fn host_load(f: &Func, b: &Bindings, name: &str, i: i64) -> Option<lacuna_ir::Scalar> {
    let decl = f.buffer(name)?;
    let arr = match &decl.kind {
        BufferKind::Values(_) => b.buffers.get(name),
        BufferKind::Indptr(ax) => b.axes.get(ax).and_then(|a| a.indptr.as_ref()),
        BufferKind::Indices(ax) => b.axes.get(ax).and_then(|a| a.indices.as_ref()),
    }?;
    arr.get(usize::try_from(i).ok()?)
}

/// State of the statement emitter for GPU memory: dynamic shared memory and vector loads
/// (`crate::vecload`).
#[derive(Default)]
pub(crate) struct GpuExtras<'a, 'ctx> {
    /// The kernel's shared memory layout (which shared buffers are dynamic, at what offset).
    pub shared: Option<&'a SharedLayout>,
    /// The extern `addrspace(3)` array of dynamic shared memory, once declared.
    pub dyn_base: Option<inkwell::values::PointerValue<'ctx>>,
    /// The function's (global) buffers with their element types.
    pub globals: HashMap<&'a str, DType>,
    /// Vector loads of the vectorized loop being emitted, by the address of the load's node.
    pub vector: HashMap<usize, (inkwell::values::VectorValue<'ctx>, DType)>,
    /// The iteration (lane) of that loop being emitted.
    pub lane: Option<u64>,
    /// Guards (by the address of their condition) that hold in every lane of that loop's
    /// vector path, with the branch taken (`true`: then).
    pub known: HashMap<usize, bool>,
    /// The buffers the kernel never writes.
    pub read_only: std::collections::BTreeSet<String>,
}

/// Symbol of the kernel's dynamic shared memory (`extern __shared__`).
const DYN_SHARED: &str = "lacuna_dynamic_shared";

/// Initializes LLVM's NVPTX target once per process.
fn init_nvptx() -> R<()> {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| Target::initialize_nvptx(&InitializationConfig::default()));
    Ok(())
}

fn nvptx_machine(arch: GpuArch, opts: &CodegenOptions) -> R<TargetMachine> {
    let level = crate::machine::opt_level(opts)?;
    init_nvptx()?;
    let triple = TargetTriple::create(NVPTX_TRIPLE);
    let target = Target::from_triple(&triple).map_err(|e| CodegenError::Target {
        message: e.to_string(),
    })?;
    target
        .create_target_machine(
            &triple,
            arch.name(),
            "+ptx80",
            level,
            RelocMode::Default,
            CodeModel::Default,
        )
        .ok_or_else(|| CodegenError::Target {
            message: format!("no NVPTX target machine for {}", arch.name()),
        })
}

/// The LLVM IR of the GPU kernel of `f` (optimized per [`CodegenOptions::optimized_ir`]).
pub fn emit_nvptx_ir(f: &Func, arch: GpuArch, opts: &CodegenOptions) -> R<String> {
    let ctx = Context::create();
    let tm = nvptx_machine(arch, opts)?;
    let module = build_kernel_module(&ctx, f, &tm)?.0;
    if opts.optimized_ir {
        optimize(&module, &tm, opts)?;
    }
    Ok(module.print_to_string().to_string())
}

/// Compiles `f` to a PTX kernel for `arch`.
pub fn compile_ptx(f: &Func, arch: GpuArch, opts: &CodegenOptions) -> R<GpuKernel> {
    let ctx = Context::create();
    let tm = nvptx_machine(arch, opts)?;
    let (module, launches) = build_kernel_module(&ctx, f, &tm)?;
    optimize(&module, &tm, opts)?;
    let buf = tm
        .write_to_memory_buffer(&module, FileType::Assembly)
        .map_err(|e| CodegenError::Target {
            message: format!("PTX emission failed: {e}"),
        })?;
    let ptx = String::from_utf8_lossy(buf.as_slice())
        .trim_end_matches('\0')
        .to_string();
    let first = launches
        .first()
        .cloned()
        .ok_or_else(|| CodegenError::Target {
            message: "a GPU function without kernels".into(),
        })?;
    Ok(GpuKernel {
        entry: first.entry,
        ptx,
        arch,
        launch: first.launch,
        params: f.params.clone(),
        func: f.clone(),
        shared: first.shared,
        launches,
    })
}

fn optimize(module: &Module<'_>, tm: &TargetMachine, opts: &CodegenOptions) -> R<()> {
    if opts.fp_contract {
        crate::machine::allow_contraction(module);
    }
    let pbo = PassBuilderOptions::create();
    pbo.set_loop_unrolling(opts.opt_level >= 2);
    module
        .run_passes(&format!("default<O{}>", opts.opt_level), tm, pbo)
        .map_err(|e| CodegenError::Optimize {
            message: e.to_string(),
        })
}

/// Builds the module of `f`'s kernels; returns it with each kernel's symbol and launch
/// extents, in launch order.
fn build_kernel_module<'ctx>(
    ctx: &'ctx Context,
    f: &Func,
    tm: &TargetMachine,
) -> R<(Module<'ctx>, Vec<KernelLaunch>)> {
    check_decls(f)?;
    let base = format!("lacuna_{}", symbol_name(&f.name));
    let module = ctx.create_module(&base);
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    let kernels = lacuna_stage2::gpu::split_launches(f)?;
    let mut launches = Vec::with_capacity(kernels.len());
    for (k, kf) in kernels.iter().enumerate() {
        let sym = if kernels.len() == 1 {
            base.clone()
        } else {
            format!("{base}_k{k}")
        };
        let (launch, shared) = add_kernel(ctx, &module, kf, &sym)?;
        launches.push(KernelLaunch {
            entry: sym,
            launch,
            shared,
        });
    }
    module.verify().map_err(|m| CodegenError::Verify {
        kernel: f.name.clone(),
        message: m.to_string(),
    })?;
    Ok((module, launches))
}

/// Adds the kernel `sym` running all of `f` (one launch) to `module`; returns its extents.
fn add_kernel<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    f: &Func,
    sym: &str,
) -> R<(Launch, SharedLayout)> {
    let lowered = lacuna_stage2::gpu::lower_warp_reductions(f)?;
    let f = &lowered;
    let launch = launch(f)?;
    let shared = shared_layout(f)?;
    let gptr = ctx.ptr_type(AddressSpace::from(GLOBAL));
    let i64t = ctx.i64_type();
    let mut args: Vec<BasicMetadataTypeEnum> = vec![gptr.into(); f.buffers.len()];
    args.extend(std::iter::repeat_n(
        BasicMetadataTypeEnum::from(i64t),
        f.params.len(),
    ));
    let kernel = module.add_function(sym, ctx.void_type().fn_type(&args, false), None);
    kernel.set_call_conventions(PTX_KERNEL_CC);
    let attr = |name: &str| ctx.create_enum_attribute(Attribute::get_named_enum_kind_id(name), 0);
    kernel.add_attribute(AttributeLoc::Function, attr("nounwind"));
    let mut bufs = HashMap::new();
    // Buffers the kernel never writes are `readonly`: with `noalias`, their loads may use the
    // read-only data cache (`ld.global.nc`).
    let read_only = crate::vecload::read_only(f);
    for (i, b) in f.buffers.iter().enumerate() {
        for name in ["noalias", "nocapture"] {
            kernel.add_attribute(AttributeLoc::Param(i as u32), attr(name));
        }
        if read_only.contains(&b.name) {
            kernel.add_attribute(AttributeLoc::Param(i as u32), attr("readonly"));
        }
        let p = arg(kernel, i)?.into_pointer_value();
        p.set_name(&b.name);
        bufs.insert(b.name.as_str(), (p, b.dtype));
    }
    let mut params = HashMap::new();
    for (j, name) in f.params.iter().enumerate() {
        let v = arg(kernel, f.buffers.len() + j)?.into_int_value();
        v.set_name(name);
        params.entry(name.as_str()).or_insert(v);
    }
    let builder = ctx.create_builder();
    builder.position_at_end(ctx.append_basic_block(kernel, "entry"));
    let mut em = Emitter {
        ctx,
        module,
        builder,
        func: kernel,
        bufs,
        params,
        env: Vec::new(),
        gpu: true,
        pending_unroll: None,
        pending_prefetch: None,
        pending_masked: None,
        pending_lanes: None,
        pending_prefetch_end: None,
        loops: Vec::new(),
        streaming: false,
        streamed: false,
        hm: None,
        indptr: Default::default(),
        indices_of: Default::default(),
        // A `Parallel` loop inside a GPU kernel runs serially in its thread.
        in_parallel: true,
        outlined: Default::default(),
        gpux: GpuExtras {
            shared: Some(&shared),
            globals: f
                .buffers
                .iter()
                .map(|b| (b.name.as_str(), b.dtype))
                .collect(),
            read_only,
            ..Default::default()
        },
    };
    em.stmts(&f.body)?;
    em.builder.build_return(None)?;
    annotate(ctx, module, kernel, &launch)?;
    drop(em);
    Ok((launch, shared))
}

/// `nvvm.annotations`: the kernel flag and, for constant block extents, `maxntid{x,y,z}`.
fn annotate<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    kernel: FunctionValue<'ctx>,
    launch: &Launch,
) -> R<()> {
    let i32t = ctx.i32_type();
    let fptr = kernel.as_global_value().as_pointer_value();
    let add = |key: &str, value: u64| -> R<()> {
        let node = ctx.metadata_node(&[
            BasicMetadataValueEnum::from(fptr),
            ctx.metadata_string(key).into(),
            i32t.const_int(value, false).into(),
        ]);
        module
            .add_global_metadata("nvvm.annotations", &node)
            .map_err(|e| CodegenError::Llvm {
                message: e.to_string(),
            })
    };
    add("kernel", 1)?;
    if let Some([x, y, z]) = launch.constant_block() {
        add("maxntidx", x as u64)?;
        add("maxntidy", y as u64)?;
        add("maxntidz", z as u64)?;
    }
    Ok(())
}

/// The special register holding a thread's index on a dimension.
fn sreg(axis: GpuAxis) -> &'static str {
    match axis {
        GpuAxis::BlockX => "llvm.nvvm.read.ptx.sreg.ctaid.x",
        GpuAxis::BlockY => "llvm.nvvm.read.ptx.sreg.ctaid.y",
        GpuAxis::BlockZ => "llvm.nvvm.read.ptx.sreg.ctaid.z",
        GpuAxis::ThreadX => "llvm.nvvm.read.ptx.sreg.tid.x",
        GpuAxis::ThreadY => "llvm.nvvm.read.ptx.sreg.tid.y",
        GpuAxis::ThreadZ => "llvm.nvvm.read.ptx.sreg.tid.z",
    }
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// A loop bound to a GPU dimension, in a kernel: `v = start + index; if v < end { body }`.
    pub(crate) fn bound_loop(
        &mut self,
        var: &'a str,
        axis: GpuAxis,
        start: &'a Expr,
        end: &'a Expr,
        body: &'a [Stmt],
    ) -> R<()> {
        let bound = |t| CodegenError::LoopBoundType {
            var: var.to_string(),
            dtype: t,
        };
        let lo = self.int_operand(start, bound)?;
        let hi = self.int_operand(end, bound)?;
        let idx = self.intrinsic(sreg(axis), &[], &[])?.into_int_value();
        let i64t = self.ctx.i64_type();
        let idx = self.builder.build_int_z_extend(idx, i64t, "")?;
        let v = self.builder.build_int_nsw_add(lo, idx, var)?;
        let go = self
            .builder
            .build_int_compare(inkwell::IntPredicate::SLT, v, hi, "")?;
        let then_bb = self
            .ctx
            .append_basic_block(self.func, &format!("{var}.bound"));
        let merge = self
            .ctx
            .append_basic_block(self.func, &format!("{var}.end"));
        self.builder.build_conditional_branch(go, then_bb, merge)?;
        self.builder.position_at_end(then_bb);
        self.env.push((
            var,
            crate::emit::Val {
                v: v.into(),
                t: DType::I64,
            },
            false,
        ));
        self.stmts(body)?;
        self.env.pop();
        self.builder.build_unconditional_branch(merge)?;
        self.builder.position_at_end(merge);
        Ok(())
    }
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// The address of shared buffer `buffer` if it is dynamic: its byte offset (computed from
    /// the parameters) into the kernel's extern `[0 x i8]` array of dynamic shared memory,
    /// declared on first use (`.extern .shared .align 16` in PTX).
    pub(crate) fn dynamic_shared(
        &mut self,
        buffer: &str,
    ) -> R<Option<inkwell::values::PointerValue<'ctx>>> {
        let Some(d) = self.gpux.shared.and_then(|l| l.dynamic_buffer(buffer)) else {
            return Ok(None);
        };
        // One extern array per module, shared by its kernels.
        let existing = self
            .module
            .get_global(DYN_SHARED)
            .map(|g| g.as_pointer_value());
        let base = match self.gpux.dyn_base.or(existing) {
            Some(p) => p,
            None => {
                let ty = self.ctx.i8_type().array_type(0);
                let g = self
                    .module
                    .add_global(ty, Some(AddressSpace::from(3u16)), DYN_SHARED);
                g.set_linkage(inkwell::module::Linkage::External);
                g.set_alignment(lacuna_stage2::gpu_mem::SHARED_ALIGN as u32);
                let p = g.as_pointer_value();
                self.gpux.dyn_base = Some(p);
                p
            }
        };
        let off = self.int_operand(&d.offset, |dtype| CodegenError::Scratch {
            buffer: buffer.to_string(),
            scope: "shared",
            why: format!("its offset in dynamic shared memory has type {dtype}"),
        })?;
        // SAFETY (of the LLVM construct): the offset lies inside the launch's dynamic shared
        // memory, whose size the launcher computes from the same layout.
        let p = unsafe {
            self.builder
                .build_in_bounds_gep(self.ctx.i8_type(), base, &[off], buffer)
        }?;
        Ok(Some(p))
    }

    /// A warp shuffle with a full mask: `llvm.nvvm.shfl.sync.{down,bfly,idx}.i32`, 64-bit
    /// values as two 32-bit halves, `bool` widened to 32 bits.
    pub(crate) fn shuffle(
        &mut self,
        kind: ShuffleKind,
        value: &'a Expr,
        lane: &'a Expr,
        width: u32,
    ) -> R<crate::emit::Val<'ctx>> {
        if !self.gpu {
            return Err(CodegenError::GpuOnly {
                what: "warp shuffle",
            });
        }
        if !(1..=32).contains(&width) || !width.is_power_of_two() {
            return Err(CodegenError::Shuffle {
                why: format!("width {width} is not a power of two up to 32"),
            });
        }
        let v = self.expr(value)?;
        let l = self.int_operand(lane, |dtype| CodegenError::Shuffle {
            why: format!("the lane operand has type {dtype}, expected an integer"),
        })?;
        let (i32t, i64t) = (self.ctx.i32_type(), self.ctx.i64_type());
        let b = &self.builder;
        let l = b.build_int_truncate_or_bit_cast(l, i32t, "lane")?;
        let name = match kind {
            ShuffleKind::Down => "llvm.nvvm.shfl.sync.down.i32",
            ShuffleKind::Xor => "llvm.nvvm.shfl.sync.bfly.i32",
            ShuffleKind::Idx => "llvm.nvvm.shfl.sync.idx.i32",
        };
        let mask = i32t.const_int(0xffff_ffff, false);
        let clamp = i32t.const_int((u64::from(32 - width) << 8) | 31, false);
        let shfl =
            |em: &Self, x: inkwell::values::IntValue<'ctx>| -> R<inkwell::values::IntValue<'ctx>> {
                Ok(em
                    .intrinsic(name, &[], &[mask.into(), x.into(), l.into(), clamp.into()])?
                    .into_int_value())
            };
        let out: inkwell::values::BasicValueEnum<'ctx> = match v.t {
            DType::I32 => shfl(self, v.v.into_int_value())?.into(),
            DType::Bool | DType::I8 => {
                let narrow = v.v.into_int_value();
                let x = b.build_int_z_extend(narrow, i32t, "")?;
                let y = shfl(self, x)?;
                self.builder
                    .build_int_truncate(y, narrow.get_type(), "")?
                    .into()
            }
            DType::F32 => {
                let x = b.build_bit_cast(v.v, i32t, "")?.into_int_value();
                let y = shfl(self, x)?;
                self.builder.build_bit_cast(y, self.ctx.f32_type(), "")?
            }
            DType::I64 | DType::F64 => {
                let x = if v.t == DType::F64 {
                    b.build_bit_cast(v.v, i64t, "")?.into_int_value()
                } else {
                    v.v.into_int_value()
                };
                let lo = b.build_int_truncate(x, i32t, "")?;
                let hi = b.build_right_shift(x, i64t.const_int(32, false), false, "")?;
                let hi = b.build_int_truncate(hi, i32t, "")?;
                let (lo, hi) = (shfl(self, lo)?, shfl(self, hi)?);
                let b = &self.builder;
                let lo = b.build_int_z_extend(lo, i64t, "")?;
                let hi = b.build_int_z_extend(hi, i64t, "")?;
                let hi = b.build_left_shift(hi, i64t.const_int(32, false), "")?;
                let y = b.build_or(lo, hi, "")?;
                if v.t == DType::F64 {
                    b.build_bit_cast(y, self.ctx.f64_type(), "")?
                } else {
                    y.into()
                }
            }
        };
        Ok(crate::emit::Val { v: out, t: v.t })
    }
}
