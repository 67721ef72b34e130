//! Parallel loops: outlined bodies run by a rayon-backed parallel-for.
//!
//! A `Parallel` loop `for i in lo..hi { body }` becomes a call
//! `lacuna_rt_parallel_for(@body_fn, ctx, lo, hi, weights, weight_bits)`: `@body_fn(ctx, a, b)`
//! is an internal function running `for i in a..b { body }`, and `ctx` an array of 8-byte slots
//! holding every buffer pointer, parameter and variable in scope (a mutable variable by its
//! stack slot: the caller's frame outlives the call). The runtime splits `lo..hi` into one
//! static chunk per worker of rayon's pool (no thread is spawned per call), equal in rows, or —
//! when the body reads `indptr[i]` and `indptr[i + 1]` of a row-pointer array, which it then
//! passes as `weights` — equal in stored entries plus [`ROW_WEIGHT`] per row (prefix-sum
//! partitioning, with merge-path's charge for each row). Loops nested in an outlined body run
//! serially.
//!
//! Between parallel loops the other workers stay awake for [`SPIN_MICROS`] (OpenMP's
//! "blocktime"): a spinning worker takes the next loop's chunk at once, where a sleeping one
//! is woken only after tens of microseconds, by which time the caller has often run every chunk
//! itself. Pools built by [`pool_builder`] also pin each worker to its own CPU, so that two
//! workers never share one while another CPU idles.

use crate::emit::{arg, stamp_target, Emitter, Val};
use crate::error::CodegenError;
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::module::Linkage;
use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicValueEnum, IntValue};
use inkwell::AddressSpace;
use lacuna_ir::partition::balanced_bounds;
use lacuna_stage1::BinOp;
use lacuna_stage2::{Expr, ForKind, Stmt};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{AcqRel, Acquire};

type R<T> = Result<T, CodegenError>;

/// The symbol of the runtime's parallel-for.
pub(crate) const PARALLEL_FOR: &str = "lacuna_rt_parallel_for";

/// The outlined body's signature.
type BodyFn = unsafe extern "C" fn(ctx: *mut u8, lo: i64, hi: i64);

struct Shared(*mut u8);
// SAFETY: the context array is only read by the outlined bodies, whose writes go to disjoint
// elements (the `parallel` primitive checked that iterations are independent).
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    /// The context (a method, so that closures capture `Shared`, not the raw pointer).
    fn ptr(&self) -> *mut u8 {
        self.0
    }
}

/// What a row costs in the balance of parallel chunks over a row-pointer array, in stored
/// entries: its setup, the horizontal sum of its vector lanes and its store (merge-path
/// partitioning counts 1). SpMV, two threads, `lacuna bench` side by side (session 12, ms; 0
/// is entries only, as before): email-Enron 0.20 / 0.16 / 0.15 / 0.14 / 0.16 at 0, 1, 4, 8
/// and 16, soc-Slashdot0902 0.49 / 0.45 / 0.41 / 0.35 / 0.45; ego-Facebook, cit-HepPh, EX5,
/// cage10, ct2010 and wing within noise. Where every entry is a long computation (SpMM, SDDMM)
/// it hardly moves the bounds.
pub const ROW_WEIGHT: i64 = 8;

/// Chunk bounds of rows `lo..hi` for `chunks` workers: equal in `indptr` entries plus
/// [`ROW_WEIGHT`] per row when given a row pointer (non-decreasing over `lo..=hi`), equal in
/// rows otherwise.
pub fn row_chunks(lo: i64, hi: i64, chunks: i64, indptr: Option<&dyn Fn(i64) -> i64>) -> Vec<i64> {
    match indptr {
        Some(indptr) => {
            let weight = |r: i64| indptr(r).saturating_add(r.saturating_mul(ROW_WEIGHT));
            balanced_bounds(lo, hi, chunks, Some(&weight))
        }
        None => balanced_bounds(lo, hi, chunks, None),
    }
}

/// Runs `body(ctx, a, b)` over chunks of `lo..hi` on rayon's current pool.
///
/// # Safety
/// `body` and `ctx` come from generated code (see the module documentation); `weights`, when
/// `weight_bits` is 32 or 64, points to at least `hi + 1` elements of that width.
pub(crate) unsafe extern "C" fn lacuna_rt_parallel_for(
    body: BodyFn,
    ctx: *mut u8,
    lo: i64,
    hi: i64,
    weights: *const u8,
    weight_bits: i64,
) {
    if hi <= lo {
        return;
    }
    let workers = rayon::current_num_threads().max(1) as i64;
    let n = hi - lo;
    if workers == 1 || n == 1 {
        // SAFETY: the generated body over the whole range, as a serial loop would run it.
        unsafe { body(ctx, lo, hi) };
        return;
    }
    let chunks = workers.min(n);
    // Row pointer at row `r` (only called for lo <= r <= hi).
    let weight = |r: i64| -> i64 {
        // SAFETY: the body reads `weights[r]` and `weights[r + 1]` for every row it runs, so
        // `lo..=hi` are valid indices.
        unsafe {
            match weight_bits {
                32 => *(weights as *const i32).add(r as usize) as i64,
                _ => *(weights as *const i64).add(r as usize),
            }
        }
    };
    let bounds = if weight_bits == 32 || weight_bits == 64 {
        row_chunks(lo, hi, chunks, Some(&weight))
    } else {
        row_chunks(lo, hi, chunks, None)
    };
    let shared = Shared(ctx);
    let run = |k: usize| {
        let (a, b) = (bounds[k], bounds[k + 1]);
        if a < b {
            // SAFETY: disjoint row ranges of an independent loop, each run once; `ctx` outlives
            // the call.
            unsafe { body(shared.ptr(), a, b) };
        }
    };
    run_on_pool(bounds.len() - 1, &run);
}

/// Runs `f(0)`, ..., `f(n - 1)` on rayon's current pool, each once, and returns when all have
/// returned: the calls after the first go to the pool as jobs, the caller runs the first and
/// then waits for the others by spinning, running pending jobs of the pool meanwhile where it
/// is a worker (its own calls, if no other worker took them), never on a lock: neither side
/// waits for a sleeping thread to be woken. Afterwards the pool's other workers stay awake for
/// [`SPIN_MICROS`] to take the next parallel section's jobs at once. Parallel loops of
/// generated code and the chunks of co-iteration results run this way.
///
/// Rayon's own paths wait on a lock: from outside the pool, a job injected and a lock waited
/// on took 0.040 ms at two threads on citeseer_features' SpMV against 0.030 ms at one; from a
/// worker, `join` puts the caller to sleep once its chunk ends well before the other's, and
/// waking it took longer than the loop: SpMV on cage10 (sliced ELL) at two threads ran every
/// other time in 0.055 to 0.080 ms instead of 0.027, its median above one thread's (session
/// 21, Intel Xeon).
///
/// A panic of `f(0)` propagates once the other calls have returned; the others must not panic
/// (a panicking job aborts, as rayon's `spawn` does).
pub fn run_on_pool(n: usize, f: &(dyn Fn(usize) + Sync)) {
    let workers = rayon::current_num_threads().max(1);
    if n <= 1 || workers == 1 {
        (0..n).for_each(f);
        return;
    }
    // A loop run by a job this thread takes while waiting restores the flag it found.
    let inside = rayon::current_thread_index().is_some();
    let outer = IN_PARALLEL_FOR.with(|flag| flag.replace(inside));
    // The jobs reach `f` and the counter of ended jobs through pointers whose lifetimes are
    // erased: this function returns only after every job has counted itself, its last access
    // to either (also when `f(0)` panics), so both outlive the jobs.
    let done = AtomicUsize::new(0);
    struct Call(*const (dyn Fn(usize) + Sync), *const AtomicUsize);
    // SAFETY: `f` is `Sync`, the counter atomic; both outlive the jobs (see above).
    unsafe impl Send for Call {}
    for k in 1..n {
        // SAFETY: only the lifetime changes; see `Call`.
        let f = unsafe {
            std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(f)
        };
        let call = Call(f, &done);
        rayon::spawn(move || {
            let call = call;
            // SAFETY: the caller waits for this job's count before `f` and `done` go away.
            unsafe {
                (*call.0)(k);
                (*call.1).fetch_add(1, AcqRel);
            }
        });
    }
    let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(0)));
    let mut spins = 0u32;
    while done.load(Acquire) < n - 1 {
        // A worker runs what is pending (a call of its own no one took); outside the pool
        // there is nothing to run.
        if let Some(rayon::Yield::Executed) = rayon::yield_now() {
            continue;
        }
        if spins < 1 << 16 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    IN_PARALLEL_FOR.with(|flag| flag.set(outer));
    // A worker caller runs the next section's first call itself; one from outside the pool
    // leaves every call after its first to the workers.
    keep_workers_awake(if inside { workers - 1 } else { workers }, spin_time());
    if let Err(panic) = first {
        std::panic::resume_unwind(panic);
    }
}

/// Microseconds that workers stay awake after a parallel loop, taking the next loop's chunks
/// as soon as they are pushed (`LACUNA_SPIN_US` overrides; 0 lets them sleep at once, as
/// rayon's own idle workers do after a few rounds). SpMV, two threads, `lacuna bench`, min /
/// median of 300 runs (session 13, znver5, ms), without → with 200 µs and pinned workers:
/// citeseer_features 0.030 / 0.031 → 0.016 / 0.016, ego-Facebook 0.050 / 0.050 → 0.025 /
/// 0.027, cage10 0.047 / 0.048 → 0.025 / 0.025, wing 0.049 / 0.100 → 0.049 / 0.050, de2010
/// 0.094 / 0.095 → 0.048 / 0.049: without it the second worker, asleep, is woken too late to
/// take its chunk of a loop of some tens of microseconds, and the caller runs both.
pub const SPIN_MICROS: u64 = 200;

fn spin_time() -> std::time::Duration {
    static SPIN: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        let us = std::env::var("LACUNA_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(SPIN_MICROS);
        std::time::Duration::from_micros(us)
    })
}

thread_local! {
    /// Set while this thread runs a parallel loop's chunks (and, waiting for them, other jobs):
    /// a spinner it picks up then would hold the loop up, so it returns at once.
    static IN_PARALLEL_FOR: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Spinners spawned and not yet started, and spinners spinning.
static SPINNERS_PENDING: AtomicUsize = AtomicUsize::new(0);
static SPINNERS_RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Increments `counter` if it is below `limit`; whether it did.
fn claim(counter: &AtomicUsize, limit: usize) -> bool {
    counter
        .fetch_update(AcqRel, Acquire, |n| (n < limit).then_some(n + 1))
        .is_ok()
}

/// Keeps up to `helpers` workers of the current pool awake for `spin` after their last job:
/// spawns spinner jobs (at most `helpers` pending at once) that run every job pushed meanwhile
/// (`rayon::yield_now`) and return once `spin` passes without one.
fn keep_workers_awake(helpers: usize, spin: std::time::Duration) {
    if helpers == 0 || spin.is_zero() {
        return;
    }
    let running = SPINNERS_RUNNING.load(Acquire);
    let pending = SPINNERS_PENDING.load(Acquire);
    if running + pending >= helpers || !claim(&SPINNERS_PENDING, helpers) {
        return;
    }
    // The caller goes on with its own work: a spinner it picks up itself (waiting in some
    // other parallel section of its own) would hold that work up for the spin time.
    let spawner = rayon::current_thread_index();
    rayon::spawn(move || {
        SPINNERS_PENDING.fetch_sub(1, AcqRel);
        let own = spawner.is_some() && rayon::current_thread_index() == spawner;
        if own || IN_PARALLEL_FOR.with(|f| f.get()) || !claim(&SPINNERS_RUNNING, helpers) {
            return;
        }
        let mut last = std::time::Instant::now();
        while last.elapsed() < spin {
            match rayon::yield_now() {
                Some(rayon::Yield::Executed) => last = std::time::Instant::now(),
                _ => std::hint::spin_loop(),
            }
        }
        SPINNERS_RUNNING.fetch_sub(1, AcqRel);
    });
}

/// The most worker threads a pool may be asked for (`--threads`, `RAYON_NUM_THREADS`, `lacuna
/// bench --threads`, Python's `threads=`): far above any machine's cores, far below what
/// exhausts a process's threads and stacks (a million was tried in earnest).
pub const MAX_THREADS: usize = 1024;

/// A pool builder for `threads` workers running parallel loops: each worker is pinned to its
/// own CPU of those the process may use (`sched_getaffinity`), in order, when there are at
/// least `threads` of them; `LACUNA_PIN_THREADS=0` leaves them unpinned. Pinned workers spin
/// between loops on CPUs of their own (see [`SPIN_MICROS`]); unpinned, the kernel may keep two
/// on one CPU, where a spinning worker only slows the other.
pub fn pool_builder(threads: usize) -> rayon::ThreadPoolBuilder {
    let builder = rayon::ThreadPoolBuilder::new().num_threads(threads);
    let pin = std::env::var("LACUNA_PIN_THREADS").map_or(true, |v| v.trim() != "0");
    let cpus = allowed_cpus();
    if !pin || threads < 2 || cpus.len() < threads {
        return builder;
    }
    builder.start_handler(move |worker| {
        if let Some(&cpu) = cpus.get(worker) {
            pin_current_thread(cpu);
        }
    })
}

/// The CPUs this process may run on, in order (empty when unknown).
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed `cpu_set_t` is a valid empty set; `sched_getaffinity` writes at most
    // its size; `CPU_ISSET` reads within it for indices below `CPU_SETSIZE`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Restricts the calling thread to `cpu` (best effort: a refusal leaves it unpinned).
fn pin_current_thread(cpu: usize) {
    // SAFETY: as in `allowed_cpus`; `cpu` comes from the allowed set, below `CPU_SETSIZE`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The row-pointer buffer of a loop over `var`, if its body reads `b[var]` and `b[var + 1]`.
fn row_pointer<'a>(em: &Emitter<'a, '_>, var: &str, body: &'a [Stmt]) -> Option<&'a str> {
    fn walk<'a>(stmts: &'a [Stmt], out: &mut Vec<(&'a str, &'a Expr)>) {
        fn expr<'a>(e: &'a Expr, out: &mut Vec<(&'a str, &'a Expr)>) {
            if let Expr::Load { buffer, indices } = e {
                if let [i] = indices.as_slice() {
                    out.push((buffer, i));
                }
            }
            e.children().into_iter().for_each(|c| expr(c, out));
        }
        for s in stmts {
            match s {
                Stmt::Let { value, .. } | Stmt::Assign { value, .. } => expr(value, out),
                Stmt::Decl { init, .. } => expr(init, out),
                Stmt::Store { indices, value, .. } => {
                    indices.iter().for_each(|i| expr(i, out));
                    expr(value, out);
                }
                Stmt::For {
                    start, end, body, ..
                } => {
                    expr(start, out);
                    expr(end, out);
                    walk(body, out);
                }
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    expr(cond, out);
                    walk(then_body, out);
                    walk(else_body, out);
                }
                Stmt::While { cond, body } => {
                    expr(cond, out);
                    walk(body, out);
                }
                Stmt::Block { init, body, .. } => {
                    walk(init, out);
                    walk(body, out);
                }
                Stmt::Atomic { indices, value, .. } => {
                    indices.iter().for_each(|i| expr(i, out));
                    expr(value, out);
                }
                Stmt::Alloc { extent, .. } => expr(extent, out),
                Stmt::Barrier => {}
                Stmt::Attr { body, .. } => walk(body, out),
            }
        }
    }
    let mut loads = Vec::new();
    walk(body, &mut loads);
    let is_var = |e: &Expr| matches!(e, Expr::Var(v) if v == var);
    let is_next = |e: &Expr| {
        matches!(e, Expr::Binary(BinOp::Add, a, b)
            if (is_var(a) && matches!(**b, Expr::Int(1, _))) || (is_var(b) && matches!(**a, Expr::Int(1, _))))
    };
    loads
        .iter()
        .filter(|(b, i)| em.indptr.contains(*b) && is_var(i))
        .map(|(b, _)| *b)
        .find(|b| loads.iter().any(|(c, i)| c == b && is_next(i)))
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// Emits a parallel loop: outlines the body and calls the runtime's parallel-for.
    pub(crate) fn parallel_for(
        &mut self,
        var: &'a str,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        body: &'a [Stmt],
    ) -> R<()> {
        let ctx = self.ctx;
        let ptr = ctx.ptr_type(AddressSpace::default());
        let i64t = ctx.i64_type();
        // Everything in scope, in a fixed order.
        let mut bufs: Vec<(&'a str, BasicValueEnum<'ctx>, lacuna_ir::DType)> = self
            .bufs
            .iter()
            .map(|(n, (p, t))| (*n, (*p).into(), *t))
            .collect();
        bufs.sort_by_key(|b| b.0);
        let mut params: Vec<(&'a str, IntValue<'ctx>)> =
            self.params.iter().map(|(n, v)| (*n, *v)).collect();
        params.sort_by_key(|p| p.0);
        let env = self.env.clone();
        let slots = bufs.len() + params.len() + env.len();
        let slot_ty = i64t.array_type(slots.max(1) as u32);
        let frame = self.entry_alloca_ty(slot_ty.into(), "par.ctx")?;
        let slot = |em: &Self, k: usize| -> R<inkwell::values::PointerValue<'ctx>> {
            // SAFETY (of the LLVM construct): `k < slots`, the array's length.
            Ok(unsafe {
                em.builder
                    .build_in_bounds_gep(i64t, frame, &[i64t.const_int(k as u64, false)], "")
            }?)
        };
        let values: Vec<BasicValueEnum<'ctx>> = bufs
            .iter()
            .map(|b| b.1)
            .chain(params.iter().map(|p| p.1.into()))
            .chain(env.iter().map(|e| e.1.v))
            .collect();
        for (k, v) in values.iter().enumerate() {
            let p = slot(self, k)?;
            self.builder.build_store(p, *v)?;
        }
        // The outlined body: `@par_body(ptr noalias %buf..., i64 %param..., env..., lo, hi)`,
        // internal and always inlined into `@par(ptr ctx, lo, hi)`, which unpacks the context
        // (so that, as in the entry wrapper, `noalias` survives inlining as alias scopes and the
        // loop keeps the facts it is optimized with).
        let n = self.outlined.get();
        self.outlined.set(n + 1);
        let base = format!("{}.par{n}", self.func.get_name().to_string_lossy());
        let attr =
            |name: &str| ctx.create_enum_attribute(Attribute::get_named_enum_kind_id(name), 0);
        let mut arg_types: Vec<inkwell::types::BasicMetadataTypeEnum<'ctx>> = Vec::new();
        arg_types.extend(
            bufs.iter()
                .map(|_| inkwell::types::BasicMetadataTypeEnum::from(ptr)),
        );
        arg_types.extend(
            params
                .iter()
                .map(|_| inkwell::types::BasicMetadataTypeEnum::from(i64t)),
        );
        arg_types.extend(
            env.iter()
                .map(|e| inkwell::types::BasicMetadataTypeEnum::from(e.1.v.get_type())),
        );
        arg_types.extend([
            inkwell::types::BasicMetadataTypeEnum::from(i64t),
            inkwell::types::BasicMetadataTypeEnum::from(i64t),
        ]);
        let body_fn = self.module.add_function(
            &format!("{base}.body"),
            ctx.void_type().fn_type(&arg_types, false),
            Some(Linkage::Internal),
        );
        for a in ["alwaysinline", "nounwind"] {
            body_fn.add_attribute(AttributeLoc::Function, attr(a));
        }
        if let Some(hm) = self.hm {
            stamp_target(ctx, body_fn, hm);
        }
        for k in 0..bufs.len() {
            for a in ["noalias", "nocapture"] {
                body_fn.add_attribute(AttributeLoc::Param(k as u32), attr(a));
            }
        }
        let mut inner = Emitter {
            ctx,
            module: self.module,
            builder: ctx.create_builder(),
            func: body_fn,
            bufs: Default::default(),
            params: Default::default(),
            hm: self.hm,
            indptr: self.indptr.clone(),
            indices_of: self.indices_of.clone(),
            in_parallel: true,
            outlined: self.outlined.clone(),
            env: Vec::new(),
            gpu: false,
            pending_unroll: None,
            pending_prefetch: None,
            pending_masked: None,
            pending_lanes: None,
            pending_prefetch_end: None,
            loops: Vec::new(),
            gpux: crate::nvptx::GpuExtras {
                globals: self.gpux.globals.clone(),
                ..Default::default()
            },
            streaming: self.streaming,
            streamed: false,
        };
        inner
            .builder
            .position_at_end(ctx.append_basic_block(body_fn, "entry"));
        let mut k = 0;
        for (name, _, t) in &bufs {
            inner
                .bufs
                .insert(name, (arg(body_fn, k)?.into_pointer_value(), *t));
            k += 1;
        }
        for (name, _) in &params {
            inner.params.insert(name, arg(body_fn, k)?.into_int_value());
            k += 1;
        }
        for (name, v, mutable) in &env {
            inner.env.push((
                name,
                Val {
                    v: arg(body_fn, k)?,
                    t: v.t,
                },
                *mutable,
            ));
            k += 1;
        }
        let (blo, bhi) = (
            arg(body_fn, k)?.into_int_value(),
            arg(body_fn, k + 1)?.into_int_value(),
        );
        inner.for_loop(var, blo, bhi, ForKind::Serial, false, body)?;
        inner.fence_streams()?;
        inner.builder.build_return(None)?;
        // The chunk function the runtime calls.
        let fn_ty = ctx
            .void_type()
            .fn_type(&[ptr.into(), i64t.into(), i64t.into()], false);
        let outlined = self
            .module
            .add_function(&base, fn_ty, Some(Linkage::Internal));
        outlined.add_attribute(AttributeLoc::Function, attr("nounwind"));
        if let Some(hm) = self.hm {
            stamp_target(ctx, outlined, hm);
        }
        let builder = ctx.create_builder();
        builder.position_at_end(ctx.append_basic_block(outlined, "entry"));
        let (octx, olo, ohi) = (
            arg(outlined, 0)?.into_pointer_value(),
            arg(outlined, 1)?.into_int_value(),
            arg(outlined, 2)?.into_int_value(),
        );
        let mut call_args: Vec<inkwell::values::BasicMetadataValueEnum<'ctx>> = Vec::new();
        let types: Vec<BasicTypeEnum<'ctx>> = bufs
            .iter()
            .map(|_| BasicTypeEnum::from(ptr))
            .chain(params.iter().map(|_| i64t.into()))
            .chain(env.iter().map(|e| e.1.v.get_type()))
            .collect();
        for (k, ty) in types.into_iter().enumerate() {
            // SAFETY (of the LLVM construct): `k < slots`, the context's length.
            let p = unsafe {
                builder.build_in_bounds_gep(i64t, octx, &[i64t.const_int(k as u64, false)], "")
            }?;
            call_args.push(builder.build_load(ty, p, "")?.into());
        }
        call_args.push(olo.into());
        call_args.push(ohi.into());
        builder.build_call(body_fn, &call_args, "")?;
        builder.build_return(None)?;
        // The call.
        let rt = match self.module.get_function(PARALLEL_FOR) {
            Some(f) => f,
            None => self.module.add_function(
                PARALLEL_FOR,
                ctx.void_type().fn_type(
                    &[
                        ptr.into(),
                        ptr.into(),
                        i64t.into(),
                        i64t.into(),
                        ptr.into(),
                        i64t.into(),
                    ],
                    false,
                ),
                Some(Linkage::External),
            ),
        };
        let (weights, bits) = match row_pointer(self, var, body).map(|b| self.bufs[b]) {
            Some((p, lacuna_ir::DType::I32)) => (p, 32),
            Some((p, lacuna_ir::DType::I64)) => (p, 64),
            // Other element types (i8 counts wrap) are not row pointers: even chunks.
            _ => (ptr.const_null(), 0),
        };
        self.builder.build_call(
            rt,
            &[
                outlined.as_global_value().as_pointer_value().into(),
                frame.into(),
                lo.into(),
                hi.into(),
                weights.into(),
                i64t.const_int(bits, false).into(),
            ],
            "",
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{
        allowed_cpus, lacuna_rt_parallel_for, pool_builder, row_chunks, run_on_pool, ROW_WEIGHT,
        SPINNERS_PENDING, SPINNERS_RUNNING,
    };
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A loop body adding 1 to `ctx[i]` for each of its rows.
    unsafe extern "C" fn count_rows(ctx: *mut u8, lo: i64, hi: i64) {
        let cells = ctx as *const AtomicU32;
        for i in lo..hi {
            // SAFETY: the test's array has an element per row.
            unsafe { (*cells.add(i as usize)).fetch_add(1, Ordering::Relaxed) };
        }
    }

    /// Runs the runtime's parallel-for over `rows` rows (balanced by a row pointer of
    /// uneven rows when `weighted`) and checks every row ran exactly once.
    fn every_row_once(rows: usize, weighted: bool) {
        let cells: Vec<AtomicU32> = (0..rows).map(|_| AtomicU32::new(0)).collect();
        let indptr: Vec<i64> = (0..=rows as i64).map(|r| r * r % 7 + r * 3).collect();
        let mut sorted = indptr.clone();
        sorted.sort_unstable();
        let (weights, bits) = if weighted {
            (sorted.as_ptr().cast::<u8>(), 64)
        } else {
            (std::ptr::null(), 0)
        };
        // SAFETY: `count_rows` touches only rows `0..rows` of `cells`; the weights have
        // `rows + 1` elements.
        unsafe {
            lacuna_rt_parallel_for(
                count_rows,
                cells.as_ptr() as *mut u8,
                0,
                rows as i64,
                weights,
                bits,
            )
        };
        assert!(
            cells.iter().all(|c| c.load(Ordering::Relaxed) == 1),
            "{rows} rows, weighted {weighted}"
        );
    }

    /// `run_on_pool` calls every index once, from a worker and from outside the pool, at 1 to
    /// 3 workers; a panic of the caller's own call reaches the caller after the other calls
    /// have ended.
    #[test]
    fn run_on_pool_calls_every_index_once() {
        let once = |n: usize| {
            let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            run_on_pool(n, &|k| {
                hits[k].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "{n} calls"
            );
        };
        for threads in 1..=3 {
            let pool = pool_builder(threads).build().expect("a pool");
            for n in [0, 1, 2, 3, 5, 64] {
                pool.install(|| once(n));
                once(n);
            }
        }
        let pool = pool_builder(2).build().expect("a pool");
        let others = AtomicU32::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.install(|| {
                run_on_pool(4, &|k| {
                    if k == 0 {
                        panic!("the first call");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    others.fetch_add(1, Ordering::Relaxed);
                })
            })
        }));
        assert!(r.is_err(), "the panic reaches the caller");
        assert_eq!(
            others.load(Ordering::Relaxed),
            3,
            "after the other calls ended"
        );
    }

    /// A worker's parallel loop whose chunks no other worker takes (every other worker busy
    /// until the loop ends) runs them itself while it waits, instead of waiting forever.
    #[test]
    fn a_worker_runs_its_own_chunks_when_the_others_are_busy() {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        use std::sync::Arc;
        for threads in 2..=3 {
            let pool = pool_builder(threads).build().expect("a pool");
            for _ in 0..20 {
                let released = Arc::new(AtomicBool::new(false));
                let busy = Arc::new(AtomicUsize::new(0));
                // Occupy every worker but the one that will run the loop.
                for _ in 0..threads - 1 {
                    let (released, busy) = (Arc::clone(&released), Arc::clone(&busy));
                    pool.spawn(move || {
                        busy.fetch_add(1, Ordering::AcqRel);
                        while !released.load(Ordering::Acquire) {
                            std::hint::spin_loop();
                        }
                    });
                }
                while busy.load(Ordering::Acquire) < threads - 1 {
                    std::hint::spin_loop();
                }
                pool.install(|| every_row_once(1000, true));
                released.store(true, Ordering::Release);
            }
        }
    }

    /// Called from a worker and from a thread outside any pool (chunks as jobs, the caller
    /// spinning until they end), at 1 to 4 workers, back to back (the spinning workers take
    /// the next loop's chunks): each row runs exactly once.
    #[test]
    fn parallel_for_runs_every_row_once_inside_and_outside_the_pool() {
        for threads in 1..=4 {
            let pool = pool_builder(threads).build().expect("a pool");
            for rows in [1, 2, 3, 7, 100, 1001] {
                for weighted in [false, true] {
                    for _ in 0..20 {
                        pool.install(|| every_row_once(rows, weighted));
                    }
                }
            }
        }
        // The test thread is outside every pool: rayon's global pool takes the jobs.
        for rows in [1, 2, 5, 1000] {
            for weighted in [false, true] {
                for _ in 0..50 {
                    every_row_once(rows, weighted);
                }
            }
        }
        // The spinners return once no job comes for their spin time.
        let t = std::time::Instant::now();
        while SPINNERS_RUNNING.load(Ordering::Acquire) + SPINNERS_PENDING.load(Ordering::Acquire)
            > 0
        {
            assert!(
                t.elapsed().as_secs() < 10,
                "spinners still running after 10 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// With as many CPUs as workers, each worker of `pool_builder`'s pool runs on a CPU of its
    /// own; with more workers than CPUs they stay unpinned.
    #[test]
    fn pool_workers_are_pinned_to_cpus_of_their_own() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty(), "sched_getaffinity names no CPU");
        let affinity = || {
            let mine = allowed_cpus();
            (mine.len(), mine.first().copied())
        };
        if std::env::var("LACUNA_PIN_THREADS").is_ok_and(|v| v.trim() == "0") {
            return;
        }
        if cpus.len() >= 2 {
            let pool = pool_builder(2).build().expect("a pool");
            let seen: Vec<(usize, Option<usize>)> = pool.broadcast(|_| affinity());
            assert_eq!(seen.len(), 2);
            assert!(seen.iter().all(|(n, _)| *n == 1), "{seen:?}");
            assert_ne!(seen[0].1, seen[1].1, "{seen:?}");
        }
        let pool = pool_builder(cpus.len() + 1).build().expect("a pool");
        let seen: Vec<(usize, Option<usize>)> = pool.broadcast(|_| affinity());
        assert!(seen.iter().all(|(n, _)| *n == cpus.len()), "{seen:?}");
    }

    /// Many empty rows, then rows of 100 entries: entries alone would put every empty row
    /// and half the entries in one chunk; with the rows' weight the empty rows count too.
    #[test]
    fn row_chunks_charge_rows_and_entries() {
        let lens: Vec<i64> = (0..400).map(|r| if r < 300 { 0 } else { 100 }).collect();
        let mut indptr = vec![0i64];
        for l in &lens {
            indptr.push(indptr.last().copied().unwrap_or(0) + l);
        }
        let ptr = |r: i64| indptr[r as usize];
        let cost = |a: i64, b: i64| ptr(b) - ptr(a) + (b - a) * ROW_WEIGHT;
        for chunks in 1..=4 {
            let b = row_chunks(0, 400, chunks, Some(&ptr));
            assert_eq!(b.len() as i64, chunks + 1);
            assert_eq!((b[0], b[chunks as usize]), (0, 400));
            let total = cost(0, 400);
            for w in b.windows(2) {
                assert!(w[0] <= w[1], "{b:?}");
                // Within a share plus one row of the largest cost.
                assert!(
                    cost(w[0], w[1]) <= total / chunks + 100 + ROW_WEIGHT,
                    "{b:?}"
                );
            }
        }
        // Two chunks: the first ends before row 300 would (entries alone: at row 350).
        let b = row_chunks(0, 400, 2, Some(&ptr));
        assert!(b[1] > 300 && b[1] < 350, "{b:?}");
        // Without a row pointer: equal rows.
        assert_eq!(row_chunks(0, 400, 4, None), vec![0, 100, 200, 300, 400]);
    }
}
