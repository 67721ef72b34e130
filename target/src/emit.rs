//! Module construction: the inner kernel function, its statements, and the C-ABI entry wrapper.
//!
//! The inner function `lacuna_NAME_body(ptr noalias %buf0, ..., i64 %param0, ...)` holds the
//! code; the entry `lacuna_NAME(ptr %bufs, ptr %params)` unpacks the two arrays and calls it.
//! The inner function is internal and `alwaysinline`, so after optimization the `noalias`
//! facts become alias scopes inside the entry and the loops can be vectorized.

use crate::check::{check_decls, symbol_name};
use crate::error::CodegenError;
use crate::machine::{configure_module, HostMachine};
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::types::{BasicMetadataTypeEnum, BasicTypeEnum};
use inkwell::values::{
    AsValueRef, BasicMetadataValueEnum, BasicValueEnum, FunctionValue, InstructionValue, IntValue,
    PointerValue,
};
use inkwell::AddressSpace;
use lacuna_ir::DType;
use lacuna_stage2::{ForKind, Func, Stmt};
use std::collections::HashMap;

type R<T> = Result<T, CodegenError>;

/// A generated value with its Lacuna type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Val<'ctx> {
    /// The LLVM value (`i1` for `bool`).
    pub v: BasicValueEnum<'ctx>,
    /// Its type.
    pub t: DType,
}

/// State while emitting the body of the inner function.
pub(crate) struct Emitter<'a, 'ctx> {
    pub ctx: &'ctx Context,
    pub module: &'a Module<'ctx>,
    pub builder: Builder<'ctx>,
    pub func: FunctionValue<'ctx>,
    /// Buffer arguments by name.
    pub bufs: HashMap<&'a str, (PointerValue<'ctx>, DType)>,
    /// Parameter arguments by name.
    pub params: HashMap<&'a str, IntValue<'ctx>>,
    /// The host machine (CPU name and features stamped on outlined functions); `None` for GPU
    /// code, which never outlines.
    pub hm: Option<&'a HostMachine>,
    /// Names of the `indptr` buffers (row pointers that balance parallel loops by nnz).
    pub indptr: std::collections::HashSet<&'a str>,
    /// The `indices` buffer of each `indptr` buffer's axis (bound only with as many entries as
    /// the row pointers' last one, which are validated non-decreasing).
    pub indices_of: HashMap<&'a str, &'a str>,
    /// Inside an outlined parallel body: nested parallel loops run serially.
    pub in_parallel: bool,
    /// Outlined functions so far (for unique names).
    pub outlined: std::rc::Rc<std::cell::Cell<usize>>,
    /// Variables in scope, innermost last. A mutable variable ([`Stmt::Decl`]) is held as a
    /// pointer to its stack slot (`true`); LLVM promotes the slot to registers.
    pub env: Vec<(&'a str, Val<'ctx>, bool)>,
    /// Emitting a GPU kernel: loops bound to the thread hierarchy become guarded reads of the
    /// thread's index (see `lacuna_stage2::gpu`); on the CPU they run serially.
    pub gpu: bool,
    /// A `pragma_unroll` count for the next counted loop emitted.
    pub pending_unroll: Option<u32>,
    /// A `prefetch` distance for the next counted loop emitted.
    pub pending_prefetch: Option<i64>,
    /// A `masked` annotation (vector registers per step) for the next counted loop emitted.
    pub pending_masked: Option<u32>,
    /// Vector lanes of the next vectorized loop (`lanes` annotation).
    pub pending_lanes: Option<u32>,
    /// With `pending_prefetch`: where the segments of the enclosing loop's remaining
    /// iterations end, with the segments' `indices` buffer (see [`Emitter::segments_end`]).
    pub pending_prefetch_end: Option<(IntValue<'ctx>, &'a str)>,
    /// The counted loops and conditionals being emitted around the current point, outermost
    /// first: a loop as its variable, that variable's value and its (exclusive) upper bound,
    /// which dominates the loop's body; a conditional (`if`, `while`) as `None`.
    pub loops: Vec<Option<(&'a str, IntValue<'ctx>, IntValue<'ctx>)>>,
    /// GPU-only state: dynamic shared memory (see `crate::nvptx`).
    pub gpux: crate::nvptx::GpuExtras<'a, 'ctx>,
    /// Inside a `nontemporal` annotation: loops that store consecutive elements of a buffer
    /// stream them ([`Emitter::stream_loop`]).
    pub streaming: bool,
    /// This function issued streaming stores: it ends with a store fence.
    pub streamed: bool,
}

/// Builds the module for `f`; returns it with the entry point's symbol name.
pub(crate) fn build_module<'ctx>(
    ctx: &'ctx Context,
    f: &Func,
    hm: &HostMachine,
) -> R<(Module<'ctx>, String)> {
    check_decls(f)?;
    let sym = symbol_name(&f.name);
    let module = ctx.create_module(&format!("lacuna.{sym}"));
    configure_module(&module, hm);
    let ptr = ctx.ptr_type(AddressSpace::default());
    let i64t = ctx.i64_type();
    let mut args: Vec<BasicMetadataTypeEnum> = vec![ptr.into(); f.buffers.len()];
    args.extend(std::iter::repeat_n(
        BasicMetadataTypeEnum::from(i64t),
        f.params.len(),
    ));
    let body_fn = module.add_function(
        &format!("lacuna_{sym}_body"),
        ctx.void_type().fn_type(&args, false),
        Some(Linkage::Internal),
    );
    let attr = |name: &str| ctx.create_enum_attribute(Attribute::get_named_enum_kind_id(name), 0);
    for name in ["alwaysinline", "nounwind"] {
        body_fn.add_attribute(AttributeLoc::Function, attr(name));
    }
    stamp_target(ctx, body_fn, hm);
    let mut bufs = HashMap::new();
    for (i, b) in f.buffers.iter().enumerate() {
        for name in ["noalias", "nocapture"] {
            body_fn.add_attribute(AttributeLoc::Param(i as u32), attr(name));
        }
        let p = arg(body_fn, i)?.into_pointer_value();
        p.set_name(&b.name);
        bufs.insert(b.name.as_str(), (p, b.dtype));
    }
    let mut params = HashMap::new();
    for (j, name) in f.params.iter().enumerate() {
        let v = arg(body_fn, f.buffers.len() + j)?.into_int_value();
        v.set_name(name);
        params.entry(name.as_str()).or_insert(v);
    }
    let builder = ctx.create_builder();
    builder.position_at_end(ctx.append_basic_block(body_fn, "entry"));
    let mut em = Emitter {
        ctx,
        module: &module,
        builder,
        func: body_fn,
        bufs,
        params,
        hm: Some(hm),
        indptr: f
            .buffers
            .iter()
            .filter(|b| matches!(b.kind, lacuna_stage2::BufferKind::Indptr(_)))
            .map(|b| b.name.as_str())
            .collect(),
        indices_of: indices_of(f),
        in_parallel: false,
        outlined: Default::default(),
        env: Vec::new(),
        gpu: false,
        pending_unroll: None,
        pending_prefetch: None,
        pending_masked: None,
        pending_lanes: None,
        pending_prefetch_end: None,
        loops: Vec::new(),
        streaming: false,
        streamed: false,
        gpux: crate::nvptx::GpuExtras {
            globals: f
                .buffers
                .iter()
                .map(|b| (b.name.as_str(), b.dtype))
                .collect(),
            ..Default::default()
        },
    };
    em.stmts(&f.body)?;
    em.fence_streams()?;
    em.builder.build_return(None)?;

    // The entry wrapper: unpack `bufs[i]` and `params[j]`, call the body.
    let entry_name = format!("lacuna_{sym}");
    let entry_fn = module.add_function(
        &entry_name,
        ctx.void_type().fn_type(&[ptr.into(), ptr.into()], false),
        None,
    );
    entry_fn.add_attribute(AttributeLoc::Function, attr("nounwind"));
    stamp_target(ctx, entry_fn, hm);
    let b = &em.builder;
    b.position_at_end(ctx.append_basic_block(entry_fn, "entry"));
    let (bufs_arg, params_arg) = (
        arg(entry_fn, 0)?.into_pointer_value(),
        arg(entry_fn, 1)?.into_pointer_value(),
    );
    bufs_arg.set_name("bufs");
    params_arg.set_name("params");
    let mut call_args: Vec<BasicMetadataValueEnum> = Vec::new();
    for (i, decl) in f.buffers.iter().enumerate() {
        call_args.push(load_slot(b, ctx, ptr.into(), bufs_arg, i, &decl.name)?.into());
    }
    for (j, name) in f.params.iter().enumerate() {
        call_args.push(load_slot(b, ctx, i64t.into(), params_arg, j, name)?.into());
    }
    b.build_call(body_fn, &call_args, "")?;
    b.build_return(None)?;
    module.verify().map_err(|m| CodegenError::Verify {
        kernel: f.name.clone(),
        message: m.to_string(),
    })?;
    Ok((module, entry_name))
}

/// Argument `i` of `func`.
pub(crate) fn arg<'ctx>(func: FunctionValue<'ctx>, i: usize) -> R<BasicValueEnum<'ctx>> {
    func.get_nth_param(i as u32)
        .ok_or_else(|| CodegenError::Llvm {
            message: format!("missing argument {i}"),
        })
}

/// Loads element `i` of an array of pointers or `i64`s (8-byte slots).
fn load_slot<'ctx>(
    b: &Builder<'ctx>,
    ctx: &'ctx Context,
    ty: BasicTypeEnum<'ctx>,
    base: PointerValue<'ctx>,
    i: usize,
    name: &str,
) -> R<BasicValueEnum<'ctx>> {
    let idx = ctx.i64_type().const_int(i as u64, false);
    // SAFETY (of the LLVM construct): the runtime passes arrays with one slot per buffer/param.
    let p = unsafe { b.build_in_bounds_gep(ty, base, &[idx], "") }?;
    let v = b.build_load(ty, p, name)?;
    set_align(v, 8)?;
    Ok(v)
}

/// Sets the alignment of a load or store.
pub(crate) fn set_align(v: impl AsValueRef, align: u32) -> R<()> {
    // SAFETY: `v` is a load or store instruction created by the caller.
    let inst = unsafe { InstructionValue::new(v.as_value_ref()) };
    inst.set_alignment(align).map_err(|e| CodegenError::Llvm {
        message: e.to_string(),
    })
}

/// Stamps `target-cpu` and `target-features` (MCJIT otherwise emits baseline code), and with
/// AVX-512 a preference for 512-bit vectors (LLVM prefers 256 on these CPUs by default, which
/// leaves half of the FMA units idle): SpMM and SDDMM at k = 32 and 128 with the built-in
/// schedules, one thread, `lacuna bench` of builds with and without, best of two alternating
/// runs each, on cage10, bcsstk16, ego-Facebook, citeseer_features, ct2010 and email-Enron
/// (session 12, Xeon with AVX-512): 0.76–1.08× the time, 0.90× in geometric mean (SDDMM at
/// k = 128 0.77–0.94, SpMM on the road network and email-Enron even, SDDMM on bcsstk16 at
/// k = 32 1.08). A sparse row's vectorized loop keeps 256-bit vectors (see
/// [`Emitter::loop_hint`]); SpMV is unchanged (within 3% on eight matrices).
pub(crate) fn stamp_target(ctx: &Context, f: FunctionValue<'_>, hm: &HostMachine) {
    f.add_attribute(
        AttributeLoc::Function,
        ctx.create_string_attribute("target-cpu", &hm.cpu),
    );
    if !hm.features.is_empty() {
        f.add_attribute(
            AttributeLoc::Function,
            ctx.create_string_attribute("target-features", &hm.features),
        );
    }
    if hm.wide_vectors {
        f.add_attribute(
            AttributeLoc::Function,
            ctx.create_string_attribute("prefer-vector-width", "512"),
        );
    }
}

/// Bytes of the widest floating-point element that `body` loads (8 when it loads none).
fn widest_float_load(body: &[Stmt], bufs: &HashMap<&str, (PointerValue<'_>, DType)>) -> u32 {
    fn expr(e: &lacuna_stage2::Expr, bufs: &HashMap<&str, (PointerValue<'_>, DType)>, w: &mut u32) {
        if let lacuna_stage2::Expr::Load { buffer, .. } = e {
            if let Some((_, t)) = bufs.get(buffer.as_str()) {
                if t.is_float() {
                    *w = (*w).max(t.size_bytes() as u32);
                }
            }
        }
        e.children().into_iter().for_each(|c| expr(c, bufs, w));
    }
    fn stmts(body: &[Stmt], bufs: &HashMap<&str, (PointerValue<'_>, DType)>, w: &mut u32) {
        for s in body {
            s.exprs().into_iter().for_each(|e| expr(e, bufs, w));
            s.bodies().into_iter().for_each(|b| stmts(b, bufs, w));
        }
    }
    let mut w = 0;
    stmts(body, bufs, &mut w);
    if w == 0 {
        8
    } else {
        w
    }
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// Emits a statement list; variables bound inside go out of scope at its end.
    pub(crate) fn stmts(&mut self, body: &'a [Stmt]) -> R<()> {
        let mark = self.env.len();
        for s in body {
            self.stmt(s)?;
        }
        self.env.truncate(mark);
        Ok(())
    }

    fn stmt(&mut self, s: &'a Stmt) -> R<()> {
        match s {
            Stmt::For {
                var,
                start,
                end,
                kind: ForKind::Bound(axis),
                body,
            } if self.gpu => self.bound_loop(var, *axis, start, end, body)?,
            Stmt::For {
                var,
                start,
                end,
                kind,
                body,
            } => {
                if *kind == ForKind::Vectorized && self.vector_loop(var, start, end, body)? {
                    return Ok(());
                }
                if self.streaming
                    && *kind != ForKind::Parallel
                    && self.stream_loop(var, start, end, *kind, body)?
                {
                    return Ok(());
                }
                let bound = |t| CodegenError::LoopBoundType {
                    var: var.clone(),
                    dtype: t,
                };
                let lo = self.int_operand(start, bound)?;
                let hi = self.int_operand(end, bound)?;
                if *kind == ForKind::Parallel && !self.in_parallel {
                    return self.parallel_for(var, lo, hi, body);
                }
                // A trip count read from memory is a sparse segment's length, often short.
                let from_memory = reads_memory(start) || reads_memory(end);
                if self.pending_prefetch.is_some() {
                    self.pending_prefetch_end = self.segments_end(start, end)?;
                }
                self.for_loop(var, lo, hi, *kind, from_memory, body)?;
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                self.loops.push(None);
                let emitted = self.if_else(cond, then_body, else_body);
                self.loops.pop();
                emitted?;
            }
            other => self.simple_stmt(other)?,
        }
        Ok(())
    }

    /// A counted loop `for var in lo..hi` in the current function; `from_memory`: its bounds
    /// are read from memory (see [`Emitter::loop_hint`]).
    pub(crate) fn for_loop(
        &mut self,
        var: &'a str,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        kind: ForKind,
        from_memory: bool,
        body: &'a [Stmt],
    ) -> R<()> {
        let unroll = self.pending_unroll.take();
        let prefetch = self.pending_prefetch.take();
        let masked = self.pending_masked.take();
        let lanes = self.pending_lanes.take();
        let segments_end = self.pending_prefetch_end.take();
        {
            {
                let pre = self.current_block()?;
                let head = self
                    .ctx
                    .append_basic_block(self.func, &format!("{var}.head"));
                let body_bb = self
                    .ctx
                    .append_basic_block(self.func, &format!("{var}.body"));
                let exit = self
                    .ctx
                    .append_basic_block(self.func, &format!("{var}.exit"));
                self.builder.build_unconditional_branch(head)?;
                self.builder.position_at_end(head);
                let i64t = self.ctx.i64_type();
                let phi = self.builder.build_phi(i64t, var)?;
                let iv = phi.as_basic_value().into_int_value();
                let go = self
                    .builder
                    .build_int_compare(inkwell::IntPredicate::SLT, iv, hi, "")?;
                self.builder.build_conditional_branch(go, body_bb, exit)?;
                self.builder.position_at_end(body_bb);
                self.env.push((
                    var,
                    Val {
                        v: iv.into(),
                        t: DType::I64,
                    },
                    false,
                ));
                if let Some(d) = prefetch {
                    self.prefetch_loads(var, iv, d, body)?;
                    self.prefetch_gathers(var, iv, hi, segments_end, d, body)?;
                }
                self.loops.push(Some((var, iv, hi)));
                let emitted = self.stmts(body);
                self.loops.pop();
                emitted?;
                self.env.pop();
                // `iv < hi <= i64::MAX`, so the increment cannot overflow.
                let next = self.builder.build_int_nsw_add(
                    iv,
                    i64t.const_int(1, false),
                    &format!("{var}.next"),
                )?;
                let latch = self.current_block()?;
                let br = self.builder.build_unconditional_branch(head)?;
                // Loops unrolled in full (the chunk of a split reduction) leave straight code.
                let short = from_memory
                    && !body.iter().any(|s| {
                        matches!(s, Stmt::For { kind, .. } if *kind != ForKind::Unrolled)
                            || matches!(s, Stmt::While { .. })
                    });
                // A row's vector lanes stay 256 bits wide where functions prefer 512: rows of a
                // few entries fill fewer lanes (SpMV on cage10, 8 f64 lanes against 4: 0.057
                // against 0.051 ms; on bcsstk16, EX5 and citeseer_features within noise).
                let row_lanes = (short
                    && kind == ForKind::Vectorized
                    && self.hm.is_some_and(|h| h.wide_vectors))
                .then(|| 32 / widest_float_load(body, &self.bufs).clamp(1, 32));
                // `lanes` annotates vectorized loops only (the primitive checks it).
                let row_lanes = lanes.or(row_lanes);
                // A vectorized loop of constant trip count is vectorized itself, not unrolled in
                // full first (LLVM unrolls constant trip counts before it vectorizes, leaving
                // scalar code or vectorizing an outer loop instead), and its vector steps are
                // unrolled in full afterwards. The lanes of a sliced ELL group keep their
                // partial sums in one vector register (SpMV, `(sell 8 1024)` on de2010, one
                // thread: 0.116 ms unrolled, 0.058 ms vectorized); SDDMM with k specialized to
                // 32 ran the entries, not the features, as lanes, with a gather per feature:
                // twice the time of the generic width (cage10 1.58 → 0.71 ms, one thread,
                // session 20, Intel AMX host; SpMM's register blocks, whose inner loops are
                // constant too, within noise of before).
                let trip = match (
                    lo.get_sign_extended_constant(),
                    hi.get_sign_extended_constant(),
                ) {
                    (Some(a), Some(b)) => Some(b.saturating_sub(a).max(0) as u64),
                    _ => None,
                };
                match unroll {
                    Some(n) => self.unroll_count_hint(br, n),
                    None => self.loop_hint(br, kind, short, masked, row_lanes, trip),
                }
                phi.add_incoming(&[(&lo, pre), (&next, latch)]);
                self.builder.position_at_end(exit);
            }
        }
        Ok(())
    }

    fn if_else(
        &mut self,
        cond: &'a lacuna_stage2::Expr,
        then_body: &'a [Stmt],
        else_body: &'a [Stmt],
    ) -> R<()> {
        // In the vector path of a vectorized loop, a guard checked for every lane holds.
        if self.gpux.lane.is_some() {
            if let Some(&holds) = self.gpux.known.get(&(cond as *const _ as usize)) {
                return self.stmts(if holds { then_body } else { else_body });
            }
        }
        {
            {
                let c = self.cond(cond)?;
                let then_bb = self.ctx.append_basic_block(self.func, "then");
                let else_bb =
                    (!else_body.is_empty()).then(|| self.ctx.append_basic_block(self.func, "else"));
                let merge = self.ctx.append_basic_block(self.func, "endif");
                self.builder
                    .build_conditional_branch(c, then_bb, else_bb.unwrap_or(merge))?;
                self.builder.position_at_end(then_bb);
                self.stmts(then_body)?;
                self.builder.build_unconditional_branch(merge)?;
                if let Some(else_bb) = else_bb {
                    self.builder.position_at_end(else_bb);
                    self.stmts(else_body)?;
                    self.builder.build_unconditional_branch(merge)?;
                }
                self.builder.position_at_end(merge);
            }
        }
        Ok(())
    }

    pub(crate) fn simple_stmt(&mut self, s: &'a Stmt) -> R<()> {
        match s {
            Stmt::For { .. } | Stmt::If { .. } => unreachable!("handled by stmt"),
            Stmt::Let { var, value } => {
                let v = self.expr(value)?;
                self.env.push((var, v, false));
            }
            Stmt::Decl { var, dtype, init } => {
                let v = self.expr(init)?;
                let v = self.convert(v, *dtype)?;
                let slot = self.entry_alloca(*dtype, var)?;
                self.builder.build_store(slot, v.v)?;
                self.env.push((
                    var,
                    Val {
                        v: slot.into(),
                        t: *dtype,
                    },
                    true,
                ));
            }
            Stmt::Assign { var, value } => {
                let (slot, t) = match self.env.iter().rev().find(|(n, ..)| *n == var.as_str()) {
                    Some((_, v, true)) => (v.v.into_pointer_value(), v.t),
                    Some((_, _, false)) => {
                        return Err(CodegenError::AssignImmutable { var: var.clone() })
                    }
                    None => return Err(CodegenError::UnknownVariable { var: var.clone() }),
                };
                let v = self.expr(value)?;
                let v = self.convert(v, t)?;
                self.builder.build_store(slot, v.v)?;
            }
            Stmt::While { cond, body } => {
                let head = self.ctx.append_basic_block(self.func, "while.head");
                let body_bb = self.ctx.append_basic_block(self.func, "while.body");
                let exit = self.ctx.append_basic_block(self.func, "while.exit");
                self.builder.build_unconditional_branch(head)?;
                self.builder.position_at_end(head);
                let c = self.cond(cond)?;
                self.builder.build_conditional_branch(c, body_bb, exit)?;
                self.builder.position_at_end(body_bb);
                self.loops.push(None);
                let emitted = self.stmts(body);
                self.loops.pop();
                emitted?;
                self.builder.build_unconditional_branch(head)?;
                self.builder.position_at_end(exit);
            }
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let v = self.expr(value)?;
                let (p, t) = self.element_ptr(buffer, indices)?;
                // Like the interpreters, a stored value is converted to the buffer's type.
                let v = self.convert(v, t)?;
                let st = self.builder.build_store(p, v.v)?;
                set_align(st, t.size_bytes() as u32)?;
            }
            Stmt::Block {
                name, init, body, ..
            } => {
                if !init.is_empty() {
                    return Err(CodegenError::BlockInit {
                        block: name.clone(),
                    });
                }
                self.stmts(body)?;
            }
            Stmt::Alloc {
                buffer,
                dtype,
                extent,
                scope,
            } => self.alloc_scratch(buffer, *dtype, extent, *scope)?,
            Stmt::Barrier => {
                if !self.gpu {
                    return Err(CodegenError::GpuOnly { what: "barrier" });
                }
                self.void_intrinsic("llvm.nvvm.barrier0", &[])?;
            }
            Stmt::Atomic {
                op,
                buffer,
                indices,
                value,
            } => {
                let v = self.expr(value)?;
                let (p, t) = self.element_ptr(buffer, indices)?;
                let v = self.convert(v, t)?;
                self.atomic_rmw(*op, p, v)?;
            }
            Stmt::Attr { key, value, body } => self.attr(key, value, body)?,
        }
        Ok(())
    }

    /// Storage for a scratch buffer: a stack array in the entry block (CPU, and local scope on
    /// the GPU), a static `addrspace(3)` array (shared scope on the GPU), or a slice of the
    /// kernel's dynamic shared memory (a shared buffer that `lacuna_stage2::gpu_mem` makes
    /// dynamic). Otherwise the extent must be a constant: kernels never allocate at run time.
    fn alloc_scratch(
        &mut self,
        buffer: &'a str,
        t: DType,
        extent: &'a lacuna_stage2::Expr,
        scope: lacuna_stage2::MemScope,
    ) -> R<()> {
        use inkwell::types::BasicType;
        use lacuna_stage2::MemScope;
        let err = |why: String| CodegenError::Scratch {
            buffer: buffer.to_string(),
            scope: scope.name(),
            why,
        };
        if self.gpu && scope == MemScope::Shared {
            if let Some(ptr) = self.dynamic_shared(buffer)? {
                self.bufs.insert(buffer, (ptr, t));
                return Ok(());
            }
        }
        let n = match extent {
            lacuna_stage2::Expr::Int(n, _) if *n >= 0 => *n as u64,
            // A shared buffer sized by parameters is dynamic shared memory, which only a GPU
            // kernel has.
            _ if !self.gpu && scope == MemScope::Shared => {
                return Err(CodegenError::GpuOnly {
                    what: "dynamic shared memory (a shared buffer of non-constant extent)",
                })
            }
            other => {
                return Err(err(format!(
                    "its extent `{other}` is not a constant (split the loop it serves by a constant factor first)"
                )))
            }
        };
        // Stack and shared memory are small: 48 KiB is CUDA's static shared-memory limit.
        let bytes = n.saturating_mul(t.size_bytes() as u64);
        if bytes > 48 * 1024 {
            return Err(err(format!(
                "{bytes} bytes exceed the 48 KiB a scratch buffer may take"
            )));
        }
        let n32 = u32::try_from(n.max(1)).map_err(|_| err("extent too large".into()))?;
        let ty = self.llvm_type(t).array_type(n32);
        let ptr = match (self.gpu, scope) {
            (true, MemScope::Shared) => {
                let name = format!("{}_shared", crate::check::symbol_name(buffer));
                let g = self
                    .module
                    .add_global(ty, Some(AddressSpace::from(3u16)), &name);
                g.set_linkage(Linkage::Internal);
                g.set_initializer(&ty.get_undef());
                g.set_alignment(16);
                g.as_pointer_value()
            }
            (true, MemScope::Global) => {
                return Err(err(
                    "a GPU kernel does not allocate global memory: stage the data in shared or local scope".into(),
                ))
            }
            _ => {
                let p = self.entry_alloca_ty(ty.as_basic_type_enum(), buffer)?;
                if let Some(i) = p.as_instruction() {
                    let _ = i.set_alignment(16);
                }
                p
            }
        };
        self.bufs.insert(buffer, (ptr, t));
        Ok(())
    }

    /// An atomic read-modify-write (relaxed ordering): `atomicrmw fadd|add|fmin|min|...`.
    fn atomic_rmw(
        &mut self,
        op: lacuna_stage2::AtomicOp,
        p: PointerValue<'ctx>,
        v: Val<'ctx>,
    ) -> R<()> {
        use inkwell::llvm_sys::core::LLVMBuildAtomicRMW;
        use inkwell::llvm_sys::{LLVMAtomicOrdering, LLVMAtomicRMWBinOp};
        use lacuna_stage2::AtomicOp;
        let float = v.t.is_float();
        let rmw = match (op, float) {
            (AtomicOp::Add, true) => LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpFAdd,
            (AtomicOp::Add, false) => LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpAdd,
            (AtomicOp::Min, true) => LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpFMin,
            (AtomicOp::Min, false) => LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpMin,
            (AtomicOp::Max, true) => LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpFMax,
            (AtomicOp::Max, false) => LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpMax,
        };
        // SAFETY: the builder is positioned, `p` points to an element of `v`'s type.
        let r = unsafe {
            LLVMBuildAtomicRMW(
                self.builder.as_mut_ptr(),
                rmw,
                p.as_value_ref(),
                v.v.as_value_ref(),
                LLVMAtomicOrdering::LLVMAtomicOrderingMonotonic,
                0,
            )
        };
        if r.is_null() {
            return Err(CodegenError::Llvm {
                message: "atomicrmw".into(),
            });
        }
        Ok(())
    }

    /// Calls an intrinsic that returns nothing.
    pub(crate) fn void_intrinsic(
        &self,
        name: &str,
        args: &[BasicMetadataValueEnum<'ctx>],
    ) -> R<()> {
        let missing = || CodegenError::Llvm {
            message: format!("intrinsic {name} is not available"),
        };
        let decl = inkwell::intrinsics::Intrinsic::find(name)
            .ok_or_else(missing)?
            .get_declaration(self.module, &[])
            .ok_or_else(missing)?;
        self.builder.build_call(decl, args, "")?;
        Ok(())
    }

    /// An annotated statement list: the annotation changes how the body is emitted
    /// (`pragma_unroll`: unroll hint on the loops directly inside; others: as the body).
    fn attr(&mut self, key: &'a str, value: &'a lacuna_stage2::Expr, body: &'a [Stmt]) -> R<()> {
        let n = match value {
            lacuna_stage2::Expr::Int(n, _) => Some(*n),
            _ => None,
        };
        match (key, n) {
            ("pragma_unroll", Some(n)) if n >= 1 => {
                self.pending_unroll = Some(u32::try_from(n).unwrap_or(u32::MAX));
            }
            ("prefetch", Some(d)) if d >= 1 && !self.gpu => self.pending_prefetch = Some(d),
            ("masked", Some(n)) if n >= 1 && !self.gpu => {
                self.pending_masked = Some(u32::try_from(n).unwrap_or(u32::MAX));
            }
            ("lanes", Some(n)) if n >= 1 && !self.gpu => {
                self.pending_lanes = Some(u32::try_from(n).unwrap_or(u32::MAX));
            }
            ("nontemporal", Some(n)) if n >= 1 && !self.gpu => {
                let outer = std::mem::replace(&mut self.streaming, true);
                let r = self.stmts(body);
                self.streaming = outer;
                return r;
            }
            ("scalar_gathers", Some(n)) if n >= 1 && !self.gpu => {
                self.func.add_attribute(
                    AttributeLoc::Function,
                    self.ctx
                        .create_string_attribute(crate::gather::SCALAR_GATHERS, "true"),
                );
            }
            _ => {}
        }
        let r = self.stmts(body);
        self.pending_unroll = None;
        self.pending_prefetch = None;
        self.pending_masked = None;
        self.pending_lanes = None;
        self.pending_prefetch_end = None;
        r
    }

    /// `llvm.prefetch` of the loads of `body` (outside nested loops) whose index is computed
    /// without memory reads and depends on `var`, at `var + distance`.
    fn prefetch_loads(
        &mut self,
        var: &'a str,
        iv: IntValue<'ctx>,
        distance: i64,
        body: &'a [Stmt],
    ) -> R<()> {
        use lacuna_stage2::Expr as E;
        fn loads<'e>(e: &'e E, var: &str, out: &mut Vec<(&'e str, &'e E)>) {
            if let E::Load { buffer, indices } = e {
                if let [i] = indices.as_slice() {
                    if i.reads_var(&|v| v == var) && !reads_memory(i) {
                        out.push((buffer, i));
                    }
                }
            }
            e.children().into_iter().for_each(|c| loads(c, var, out));
        }
        fn walk<'e>(stmts: &'e [Stmt], var: &str, out: &mut Vec<(&'e str, &'e E)>) {
            for s in stmts {
                if matches!(s, Stmt::For { .. } | Stmt::While { .. }) {
                    continue;
                }
                s.exprs().into_iter().for_each(|e| loads(e, var, out));
                s.bodies().into_iter().for_each(|b| walk(b, var, out));
            }
        }
        let mut found = Vec::new();
        walk(body, var, &mut found);
        found.dedup();
        let i64t = self.ctx.i64_type();
        let ahead = self
            .builder
            .build_int_add(iv, i64t.const_int(distance as u64, true), "")?;
        for (buffer, index) in found {
            let Some((base, t)) = self.bufs.get(buffer).copied() else {
                continue;
            };
            let idx = self.index_at(index, var, ahead, buffer);
            // A prefetch never faults, so an address past the end is harmless (plain GEP).
            let p = unsafe {
                self.builder
                    .build_gep(self.llvm_type(t), base, &[idx?], "pf")
            }?;
            self.prefetch_read(p)?;
        }
        Ok(())
    }

    /// For a loop `for j in b[i]..b[i + 1]` over one segment of a row-pointer array `b` (casts
    /// allowed) directly in the body of a counted loop over `i` with upper bound `h` (no
    /// conditional between, so every iteration runs it): the end of the last segment that
    /// loop walks, `b[h]` (the bound expression at `i = h - 1`, a load that loop executes
    /// itself), with the `indices` buffer of `b`'s axis. Row pointers are validated
    /// non-decreasing when bound, and the `indices` buffer as long as their last entry, so
    /// `indices[p]` is in bounds for every position `p` from `b[i]` up to `b[h]`. `None` for
    /// other loops.
    fn segments_end(
        &mut self,
        start: &'a lacuna_stage2::Expr,
        end: &'a lacuna_stage2::Expr,
    ) -> R<Option<(IntValue<'ctx>, &'a str)>> {
        use lacuna_stage1::BinOp;
        use lacuna_stage2::Expr as E;
        fn uncast(e: &lacuna_stage2::Expr) -> &lacuna_stage2::Expr {
            match e {
                E::Cast(_, a) => uncast(a),
                e => e,
            }
        }
        let Some(&Some((outer, iv, h))) = self.loops.last() else {
            return Ok(None);
        };
        let (
            E::Load {
                buffer: b0,
                indices: i0,
            },
            E::Load {
                buffer: b1,
                indices: i1,
            },
        ) = (uncast(start), uncast(end))
        else {
            return Ok(None);
        };
        let is_outer = |e: &E| matches!(e, E::Var(v) if v == outer);
        let Some(&indices) = self.indices_of.get(b0.as_str()) else {
            return Ok(None);
        };
        let segment = b0 == b1
            && matches!(i0.as_slice(), [i] if is_outer(i))
            && matches!(i1.as_slice(), [E::Binary(BinOp::Add, a, c)]
                if is_outer(a) && matches!(**c, E::Int(1, _)));
        // `i` must still name the loop's own variable (not a `let` shadowing it).
        let current = self
            .env
            .iter()
            .rev()
            .find(|(v, ..)| *v == outer)
            .is_some_and(|(_, val, mutable)| !mutable && val.v == BasicValueEnum::from(iv));
        if !segment || !current {
            return Ok(None);
        }
        let i64t = self.ctx.i64_type();
        let last_row = self
            .builder
            .build_int_sub(h, i64t.const_int(1, false), "pf.last_row")?;
        let at = self.index_at(end, outer, last_row, b1)?;
        Ok(Some((at, indices)))
    }

    /// `llvm.prefetch(p, read, locality 3, data)`: a hint that never faults.
    fn prefetch_read(&self, p: PointerValue<'ctx>) -> R<()> {
        let i32t = self.ctx.i32_type();
        let decl = inkwell::intrinsics::Intrinsic::find("llvm.prefetch")
            .and_then(|i| i.get_declaration(self.module, &[p.get_type().into()]))
            .ok_or_else(|| CodegenError::Llvm {
                message: "intrinsic llvm.prefetch is not available".into(),
            })?;
        self.builder.build_call(
            decl,
            &[
                p.into(),
                i32t.const_zero().into(),
                i32t.const_int(3, false).into(),
                i32t.const_int(1, false).into(),
            ],
            "",
        )?;
        Ok(())
    }

    /// `llvm.prefetch` of gathers in `body`, nested loops included: loads `b[index]` whose
    /// index reads `var` through loads `c[inner]` of positions computed without memory reads,
    /// e.g. SpMM's `B[J.indices[j] * feat + k]`. At the top of iteration `var` the index is
    /// evaluated for `var + distance` when that is below `hi` and for `hi - 1` otherwise,
    /// nested loop variables at their start: the loads of `c` it executes are ones the loop
    /// itself executes for that iteration (the gather lies outside conditionals, in nested
    /// loops of constant positive extent), so they stay in bounds; the prefetched address need
    /// not be. A gather inside a `vectorized` loop of `n` lanes prefetches every cache line of
    /// its `n` elements.
    ///
    /// Across segments: when the loop walks one segment of a row-pointer array for each
    /// iteration of the enclosing loop (`segments`, see [`Emitter::segments_end`]) and the
    /// index's only loads are of that array's `indices` at `var`, `var + distance` is used up
    /// to the end of the enclosing loop's last segment instead, where those loads stay in
    /// bounds. SpMV's `x[J.indices[j]]` and SpMM's `B[J.indices[j] * feat + k]` then prefetch
    /// into the next rows, which matters when rows are short.
    fn prefetch_gathers(
        &mut self,
        var: &'a str,
        iv: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        segments: Option<(IntValue<'ctx>, &'a str)>,
        distance: i64,
        body: &'a [Stmt],
    ) -> R<()> {
        let mut found = Vec::new();
        let mut path = GatherPath::default();
        gathers(body, var, &self.env, &mut path, &mut found);
        found.dedup_by(|a, b| a.buffer == b.buffer && a.index == b.index);
        if found.is_empty() {
            return Ok(());
        }
        let i64t = self.ctx.i64_type();
        let one = i64t.const_int(1, false);
        let next =
            self.builder
                .build_int_add(iv, i64t.const_int(distance as u64, true), "pf.ahead")?;
        let last = self.builder.build_int_sub(hi, one, "pf.last")?;
        let clamped = |end: IntValue<'ctx>| -> R<IntValue<'ctx>> {
            let within =
                self.builder
                    .build_int_compare(inkwell::IntPredicate::SLT, next, end, "")?;
            Ok(self
                .builder
                .build_select(within, next, last, "pf.at")?
                .into_int_value())
        };
        // Per gather: whether it may look into later segments.
        let across: Vec<bool> = found
            .iter()
            .map(|g| segments.is_some_and(|(_, indices)| loads_only_indices(g, var, indices)))
            .collect();
        let at_across = match segments {
            Some((end, _)) if across.contains(&true) => Some(clamped(end)?),
            _ => None,
        };
        let at_within = match across.contains(&false) {
            true => Some(clamped(hi)?),
            false => None,
        };
        for (g, across) in found.into_iter().zip(across) {
            let Some(ahead) = (if across { at_across } else { at_within }) else {
                continue;
            };
            let Some((base, t)) = self.bufs.get(g.buffer).copied() else {
                continue;
            };
            let mark = self.env.len();
            let val = |v: IntValue<'ctx>| Val {
                v: v.into(),
                t: DType::I64,
            };
            self.env.push((var, val(ahead), false));
            for &(v, start) in &g.inner {
                self.env
                    .push((v, val(i64t.const_int(start as u64, true)), false));
            }
            let mut failed = None;
            for &(v, value) in &g.lets {
                match self.expr(value) {
                    Ok(x) => self.env.push((v, x, false)),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            let idx = match failed {
                Some(e) => Err(e),
                None => self.int_operand(g.index, |dtype| CodegenError::IndexType {
                    buffer: g.buffer.to_string(),
                    dtype,
                }),
            };
            self.env.truncate(mark);
            let idx = idx?;
            // A prefetch never faults, so an address past the end is harmless (plain GEP).
            let p = unsafe {
                self.builder
                    .build_gep(self.llvm_type(t), base, &[idx], "pf.gather")
            }?;
            let bytes = g.lanes.max(1) as u64 * t.size_bytes() as u64;
            let lines = bytes.div_ceil(64).clamp(1, 16);
            for l in 0..lines {
                let at = unsafe {
                    self.builder.build_gep(
                        self.ctx.i8_type(),
                        p,
                        &[i64t.const_int(l * 64, false)],
                        "pf.line",
                    )
                }?;
                self.prefetch_read(at)?;
            }
        }
        Ok(())
    }

    /// `llvm.loop.unroll.count N` on a loop's back edge.
    fn unroll_count_hint(&self, br: InstructionValue<'ctx>, n: u32) {
        use inkwell::llvm_sys::core::{
            LLVMMDNodeInContext2, LLVMMDStringInContext2, LLVMMetadataAsValue, LLVMSetMetadata,
            LLVMValueAsMetadata,
        };
        use inkwell::llvm_sys::debuginfo::{LLVMMetadataReplaceAllUsesWith, LLVMTemporaryMDNode};
        let c = self.ctx.raw();
        let key = b"llvm.loop.unroll.count";
        // SAFETY: as in `loop_hint`: metadata of this context, a self-referential loop ID.
        unsafe {
            let k = LLVMMDStringInContext2(c, key.as_ptr().cast(), key.len());
            let v = LLVMValueAsMetadata(
                self.ctx
                    .i32_type()
                    .const_int(u64::from(n), false)
                    .as_value_ref(),
            );
            let mut hint_ops = [k, v];
            let hint = LLVMMDNodeInContext2(c, hint_ops.as_mut_ptr(), hint_ops.len());
            let tmp = LLVMTemporaryMDNode(c, std::ptr::null_mut(), 0);
            let mut ops = [tmp, hint];
            let id = LLVMMDNodeInContext2(c, ops.as_mut_ptr(), ops.len());
            LLVMMetadataReplaceAllUsesWith(tmp, id);
            LLVMSetMetadata(
                br.as_value_ref(),
                self.ctx.get_kind_id("llvm.loop"),
                LLVMMetadataAsValue(c, id),
            );
        }
    }

    /// A stack slot for a mutable variable, at the start of the entry block (where LLVM's
    /// `mem2reg` promotes it to SSA registers).
    fn entry_alloca(&self, t: DType, name: &str) -> R<PointerValue<'ctx>> {
        self.entry_alloca_ty(self.llvm_type(t), name)
    }

    /// A stack slot of any type at the start of the entry block.
    pub(crate) fn entry_alloca_ty(
        &self,
        ty: BasicTypeEnum<'ctx>,
        name: &str,
    ) -> R<PointerValue<'ctx>> {
        let entry = self
            .func
            .get_first_basic_block()
            .ok_or_else(|| CodegenError::Llvm {
                message: "function has no entry block".into(),
            })?;
        let b = self.ctx.create_builder();
        match entry.get_first_instruction() {
            Some(i) => b.position_before(&i),
            None => b.position_at_end(entry),
        }
        Ok(b.build_alloca(ty, name)?)
    }

    /// The block the builder appends to.
    pub(crate) fn current_block(&self) -> R<inkwell::basic_block::BasicBlock<'ctx>> {
        self.builder
            .get_insert_block()
            .ok_or_else(|| CodegenError::Llvm {
                message: "builder has no insertion block".into(),
            })
    }

    /// Attaches `llvm.loop` metadata (hints only): vectorized and unrolled loops ask for that;
    /// a serial innermost loop whose bounds are read from memory (`short`: a sparse row's
    /// entries) is not unrolled at run time, because the remainder loop and the unrolled body
    /// cost more than they save on rows of a few entries (measured 1.48× faster SpMV on
    /// cit-HepPh, within 1% elsewhere). A vectorized loop with `masked` (the `masked`
    /// annotation: vector registers per step) also asks for its tail folded into masked lanes
    /// (`llvm.loop.vectorize.predicate.enable`) and that many registers interleaved; a short
    /// vectorized loop without it, for one register per step, so that a row of 4 to 15
    /// entries reaches the vector body at all (LLVM's default of 4 needs 16: SpMV on cage10,
    /// 13 entries per row, 0.061–0.066 → 0.050–0.053 ms, cage11 0.27 → 0.25 ms, bcsstk16 and
    /// EX5 (45–60 per row) even; one thread, side by side, Xeon with AVX-512, session 12).
    /// `row_lanes`: the lanes of such a loop where functions prefer wider vectors, or those of
    /// a `lanes` annotation (any vectorized loop). `trip`: the loop's constant trip count; a
    /// vectorized loop with one is not unrolled before it is vectorized
    /// (`llvm.loop.unroll.disable`), so that the trip count reaches the vectorizer, and its
    /// vector steps are unrolled in full afterwards when it runs at most
    /// [`UNROLL_VECTORIZED_MAX_TRIP`] iterations.
    fn loop_hint(
        &self,
        br: InstructionValue<'ctx>,
        kind: ForKind,
        short: bool,
        masked: Option<u32>,
        row_lanes: Option<u32>,
        trip: Option<u64>,
    ) {
        let hint: &[u8] = match kind {
            ForKind::Vectorized => b"llvm.loop.vectorize.enable",
            ForKind::Unrolled => b"llvm.loop.unroll.full",
            ForKind::Serial if short => b"llvm.loop.unroll.runtime.disable",
            // A GPU-bound loop runs serially on the CPU.
            ForKind::Serial | ForKind::Parallel | ForKind::Bound(_) => return,
        };
        use inkwell::llvm_sys::core::{
            LLVMMDNodeInContext2, LLVMMDStringInContext2, LLVMMetadataAsValue, LLVMSetMetadata,
            LLVMValueAsMetadata,
        };
        use inkwell::llvm_sys::debuginfo::{LLVMMetadataReplaceAllUsesWith, LLVMTemporaryMDNode};
        let c = self.ctx.raw();
        // SAFETY: all metadata is created in this function's context; the temporary node is
        // replaced (and freed) by the self-referential loop ID, as LLVM requires for loop IDs.
        unsafe {
            let key = LLVMMDStringInContext2(c, hint.as_ptr().cast(), hint.len());
            let mut hint_ops = vec![key];
            if kind == ForKind::Vectorized {
                hint_ops.push(LLVMValueAsMetadata(
                    self.ctx.bool_type().const_int(1, false).as_value_ref(),
                ));
            }
            let hint_node = LLVMMDNodeInContext2(c, hint_ops.as_mut_ptr(), hint_ops.len());
            let tmp = LLVMTemporaryMDNode(c, std::ptr::null_mut(), 0);
            let mut ops = vec![tmp, hint_node];
            let interleave = masked.or(short.then_some(1));
            if kind == ForKind::Vectorized {
                let mut pairs = Vec::new();
                if let Some(n) = interleave {
                    pairs.push((
                        &b"llvm.loop.interleave.count"[..],
                        self.ctx.i32_type().const_int(u64::from(n), false),
                    ));
                }
                if let Some(lanes) = row_lanes {
                    pairs.push((
                        &b"llvm.loop.vectorize.width"[..],
                        self.ctx.i32_type().const_int(u64::from(lanes), false),
                    ));
                }
                if masked.is_some() {
                    pairs.push((
                        &b"llvm.loop.vectorize.predicate.enable"[..],
                        self.ctx.bool_type().const_int(1, false),
                    ));
                }
                for (key, value) in pairs {
                    let mut node = [
                        LLVMMDStringInContext2(c, key.as_ptr().cast(), key.len()),
                        LLVMValueAsMetadata(value.as_value_ref()),
                    ];
                    ops.push(LLVMMDNodeInContext2(c, node.as_mut_ptr(), node.len()));
                }
            }
            if let (ForKind::Vectorized, Some(n)) = (kind, trip) {
                let key = b"llvm.loop.unroll.disable";
                let mut node = [LLVMMDStringInContext2(c, key.as_ptr().cast(), key.len())];
                ops.push(LLVMMDNodeInContext2(c, node.as_mut_ptr(), node.len()));
                // The vectorized loop's own attributes: its few vector steps unroll in full;
                // a longer loop is left to LLVM's heuristics (no attributes).
                let key = b"llvm.loop.vectorize.followup_vectorized";
                let mut node = vec![LLVMMDStringInContext2(c, key.as_ptr().cast(), key.len())];
                if n <= UNROLL_VECTORIZED_MAX_TRIP {
                    let full = b"llvm.loop.unroll.full";
                    let mut attr = [LLVMMDStringInContext2(c, full.as_ptr().cast(), full.len())];
                    node.push(LLVMMDNodeInContext2(c, attr.as_mut_ptr(), attr.len()));
                }
                ops.push(LLVMMDNodeInContext2(c, node.as_mut_ptr(), node.len()));
            }
            let id = LLVMMDNodeInContext2(c, ops.as_mut_ptr(), ops.len());
            LLVMMetadataReplaceAllUsesWith(tmp, id);
            LLVMSetMetadata(
                br.as_value_ref(),
                self.ctx.get_kind_id("llvm.loop"),
                LLVMMetadataAsValue(c, id),
            );
        }
    }
}

/// The most iterations of a vectorized loop of constant trip count whose vector steps are
/// unrolled in full after vectorization (32 steps of 8 f64 lanes): SDDMM's feature loop
/// specialized up to k = 256, SpMM's register blocks. Longer loops stay loops, as any loop
/// whose full unroll would bloat the code.
pub(crate) const UNROLL_VECTORIZED_MAX_TRIP: u64 = 256;

/// Whether evaluating `e` loads from a buffer.
fn reads_memory(e: &lacuna_stage2::Expr) -> bool {
    use lacuna_stage2::Expr as E;
    match e {
        E::Load { .. } | E::Search { .. } => true,
        E::Unary(_, a) | E::Cast(_, a) => reads_memory(a),
        E::Binary(_, a, b) => reads_memory(a) || reads_memory(b),
        E::Select(c, a, b) => reads_memory(c) || reads_memory(a) || reads_memory(b),
        _ => false,
    }
}

/// A gather found by [`Emitter::prefetch_gathers`]: the buffer and index of the load, the `let`s
/// of its path that the index reads (in order), the nested loops' variables with their
/// constant starts, and the lanes of the innermost `vectorized` loop around it (1 otherwise).
struct Gather<'a> {
    buffer: &'a str,
    index: &'a lacuna_stage2::Expr,
    lets: Vec<(&'a str, &'a lacuna_stage2::Expr)>,
    inner: Vec<(&'a str, i64)>,
    lanes: i64,
}

/// The statements enclosing a point of a prefetched loop's body: `let`s in scope, nested loops
/// (constant positive extents), variables declared mutable inside the body.
#[derive(Default)]
struct GatherPath<'a> {
    lets: Vec<(&'a str, &'a lacuna_stage2::Expr)>,
    inner: Vec<InnerLoop<'a>>,
    mutable: Vec<&'a str>,
}

/// A loop of constant extent inside a prefetched loop's body, on a [`GatherPath`].
struct InnerLoop<'a> {
    var: &'a str,
    start: i64,
    extent: i64,
    vectorized: bool,
}

/// The gathers of `stmts` (see [`Emitter::prefetch_gathers`]), outside conditionals and
/// loops of unknown extent.
fn gathers<'a, 'ctx>(
    stmts: &'a [Stmt],
    var: &'a str,
    env: &[(&'a str, Val<'ctx>, bool)],
    path: &mut GatherPath<'a>,
    out: &mut Vec<Gather<'a>>,
) {
    use lacuna_stage2::Expr as E;
    let mark = (path.lets.len(), path.mutable.len());
    for s in stmts {
        let mut exprs: Vec<&'a E> = Vec::new();
        match s {
            Stmt::Let { var: v, value } => {
                exprs.push(value);
                path.lets.push((v, value));
            }
            Stmt::Decl { var: v, init, .. } => {
                exprs.push(init);
                path.mutable.push(v);
            }
            Stmt::For {
                var: v,
                start: E::Int(a, _),
                end: E::Int(b, _),
                kind,
                body,
            } if b > a => {
                path.inner.push(InnerLoop {
                    var: v,
                    start: *a,
                    extent: b - a,
                    vectorized: *kind == lacuna_stage2::ForKind::Vectorized,
                });
                gathers(body, var, env, path, out);
                path.inner.pop();
            }
            Stmt::Attr { body, .. } | Stmt::Block { body, .. } => {
                gathers(body, var, env, path, out)
            }
            Stmt::Store { indices, value, .. } | Stmt::Atomic { indices, value, .. } => {
                exprs.extend(indices);
                exprs.push(value);
            }
            Stmt::Assign { value, .. } => exprs.push(value),
            // Conditionals, loops of unknown extent: not every iteration runs their loads.
            _ => {}
        }
        for e in exprs {
            gather_loads(e, var, env, path, out);
        }
    }
    path.lets.truncate(mark.0);
    path.mutable.truncate(mark.1);
}

fn gather_loads<'a, 'ctx>(
    e: &'a lacuna_stage2::Expr,
    var: &'a str,
    env: &[(&'a str, Val<'ctx>, bool)],
    path: &GatherPath<'a>,
    out: &mut Vec<Gather<'a>>,
) {
    use lacuna_stage2::Expr as E;
    match e {
        // Lazy operands and searches: not every evaluation reads them.
        E::Select(c, ..) => return gather_loads(c, var, env, path, out),
        E::Search { .. } | E::Segment { .. } => return,
        E::Load { buffer, indices } => {
            if let [index] = indices.as_slice() {
                let mut lets = Vec::new();
                let indirect = pure(index, var, env, path, true, &mut lets)
                    && reads_memory_through(index, path)
                    && reads(index, var, path);
                if indirect {
                    // The lets the index reads, in path order.
                    let lets = path
                        .lets
                        .iter()
                        .copied()
                        .filter(|(v, _)| lets.contains(v))
                        .collect();
                    let lanes = path
                        .inner
                        .iter()
                        .rev()
                        .find(|l| l.vectorized)
                        .map_or(1, |l| l.extent)
                        .min(64);
                    out.push(Gather {
                        buffer,
                        index,
                        lets,
                        inner: path.inner.iter().map(|l| (l.var, l.start)).collect(),
                        lanes,
                    });
                }
            }
        }
        _ => {}
    }
    for c in e.children() {
        gather_loads(c, var, env, path, out);
    }
}

/// Whether the only loads of `g`'s index (through its `let`s) are `indices[var]`.
fn loads_only_indices(g: &Gather<'_>, var: &str, indices: &str) -> bool {
    use lacuna_stage2::Expr as E;
    fn walk(e: &E, g: &Gather<'_>, var: &str, indices: &str, depth: usize) -> bool {
        match e {
            E::Load {
                buffer,
                indices: at,
            } => buffer == indices && matches!(at.as_slice(), [E::Var(v)] if v == var),
            // A `let` of the path: its value counts (the lets are few and acyclic; the depth
            // bound only guards against a malformed path).
            E::Var(v) => match g.lets.iter().rev().find(|(w, _)| *w == v.as_str()) {
                Some((_, x)) => depth < 64 && walk(x, g, var, indices, depth + 1),
                None => true,
            },
            E::Search { .. } | E::Segment { .. } => false,
            _ => e
                .children()
                .into_iter()
                .all(|c| walk(c, g, var, indices, depth)),
        }
    }
    walk(g.index, g, var, indices, 0)
}

/// The `indices` buffer of each `indptr` buffer's axis in `f`.
fn indices_of(f: &Func) -> HashMap<&str, &str> {
    use lacuna_stage2::BufferKind as K;
    f.buffers
        .iter()
        .filter_map(|b| match &b.kind {
            K::Indptr(axis) => f
                .buffers
                .iter()
                .find(|c| matches!(&c.kind, K::Indices(a) if a == axis))
                .map(|c| (b.name.as_str(), c.name.as_str())),
            _ => None,
        })
        .collect()
}

/// Whether `e` can be evaluated at the top of an iteration with the same meaning: constants,
/// parameters, `var`, nested loop variables, immutable variables from outside the loop, and
/// `let`s of the path whose values qualify (collected into `lets`); with `loads`, also loads at
/// positions that qualify without loads.
fn pure<'a, 'ctx>(
    e: &'a lacuna_stage2::Expr,
    var: &str,
    env: &[(&'a str, Val<'ctx>, bool)],
    path: &GatherPath<'a>,
    loads: bool,
    lets: &mut Vec<&'a str>,
) -> bool {
    use lacuna_stage2::Expr as E;
    match e {
        E::Int(..) | E::Float(..) | E::Bool(_) | E::Param(_) => true,
        E::Var(v) if v == var => true,
        E::Var(v) => {
            if path.mutable.contains(&v.as_str()) {
                return false;
            }
            if let Some(&(name, value)) = path.lets.iter().rev().find(|(n, _)| *n == v.as_str()) {
                if !pure(value, var, env, path, loads, lets) {
                    return false;
                }
                if !lets.contains(&name) {
                    lets.push(name);
                }
                return true;
            }
            if path.inner.iter().any(|l| l.var == v.as_str()) {
                return true;
            }
            env.iter()
                .rev()
                .find(|(n, ..)| *n == v.as_str())
                .is_some_and(|(_, _, mutable)| !mutable)
        }
        E::Load { indices, .. } if loads => match indices.as_slice() {
            [i] => pure(i, var, env, path, false, lets),
            _ => false,
        },
        E::Unary(_, a) | E::Cast(_, a) => pure(a, var, env, path, loads, lets),
        E::Binary(_, a, b) => {
            pure(a, var, env, path, loads, lets) && pure(b, var, env, path, loads, lets)
        }
        _ => false,
    }
}

/// Whether `e` reads memory, through the path's `let`s too.
fn reads_memory_through(e: &lacuna_stage2::Expr, path: &GatherPath<'_>) -> bool {
    use lacuna_stage2::Expr as E;
    match e {
        E::Load { .. } => true,
        E::Var(v) => path
            .lets
            .iter()
            .rev()
            .find(|(n, _)| *n == v.as_str())
            .is_some_and(|(_, value)| reads_memory_through(value, path)),
        _ => e
            .children()
            .into_iter()
            .any(|c| reads_memory_through(c, path)),
    }
}

/// Whether `e` reads `var`, through the path's `let`s too.
fn reads(e: &lacuna_stage2::Expr, var: &str, path: &GatherPath<'_>) -> bool {
    use lacuna_stage2::Expr as E;
    match e {
        E::Var(v) if v == var => true,
        E::Var(v) => path
            .lets
            .iter()
            .rev()
            .find(|(n, _)| *n == v.as_str())
            .is_some_and(|(_, value)| reads(value, var, path)),
        _ => e.children().into_iter().any(|c| reads(c, var, path)),
    }
}

#[cfg(test)]
mod tests {
    use super::{loads_only_indices, Gather};
    use lacuna_stage1::BinOp;
    use lacuna_stage2::Expr as E;

    fn var(v: &str) -> E {
        E::Var(v.into())
    }
    fn load(b: &str, i: E) -> E {
        E::Load {
            buffer: b.into(),
            indices: vec![i],
        }
    }
    fn add(a: E, b: E) -> E {
        E::Binary(BinOp::Add, Box::new(a), Box::new(b))
    }
    fn across<'a>(index: &'a E, lets: Vec<(&'a str, &'a E)>) -> bool {
        let g = Gather {
            buffer: "x",
            index,
            lets,
            inner: vec![("t", 0)],
            lanes: 1,
        };
        loads_only_indices(&g, "j", "J.indices")
    }

    /// A gather may look into later rows only when its index loads nothing but the walked
    /// axis's `indices` at the loop's own position (directly or through `let`s); the gathered
    /// address may read any variable.
    #[test]
    fn gathers_cross_rows_only_through_the_axis_indices() {
        // x[J.indices[j]]; B[J.indices[j] + k] with k any other variable.
        assert!(across(&load("J.indices", var("j")), vec![]));
        assert!(across(&add(load("J.indices", var("j")), var("k")), vec![]));
        let c = load("J.indices", var("j"));
        assert!(across(&add(var("c"), var("i")), vec![("c", &c)]));
        // Another buffer, another position, a position through arithmetic or a let.
        assert!(!across(&load("K.indices", var("j")), vec![]));
        assert!(!across(&load("J.indices", var("i")), vec![]));
        assert!(!across(&load("J.indices", add(var("j"), var("t"))), vec![]));
        let p = var("j");
        assert!(!across(&load("J.indices", var("p")), vec![("p", &p)]));
        let other = load("A", var("j"));
        assert!(!across(
            &add(var("o"), load("J.indices", var("j"))),
            vec![("o", &other)]
        ));
        // Nested loads.
        assert!(!across(
            &load("J.indices", load("J.indices", var("j"))),
            vec![]
        ));
    }
}
