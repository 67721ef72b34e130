//! The stage-II interpreter: runs a stage-II or flat function on bound data.
//!
//! Every access is checked: a flat index must be inside its buffer, and at stage II a position
//! on a sparse axis must lie inside the segment of its parent position. A failed check is an
//! error naming the buffer, never a panic, so the interpreter doubles as a bounds checker for
//! lowered code. Scalar semantics are those of `lacuna_stage1::{eval_binop, eval_unop}`.

use crate::ir::{AtomicOp, BufferKind, Expr, ForKind, Func, MemScope, ShuffleKind, Stmt};
use lacuna_ir::{ArrayData, Scalar};
use lacuna_stage1::{eval_binop, eval_unop, size_value, AxisKind, BinOp, Bindings, Role};
use std::collections::{BTreeMap, HashMap};

/// A failure while interpreting stage II.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Stage2InterpError {
    /// A buffer, parameter or variable has no value.
    #[error("no value for {what} `{name}`")]
    Unbound {
        /// `buffer`, `parameter` or `variable`.
        what: &'static str,
        /// Its name.
        name: String,
    },
    /// A flat index outside its buffer.
    #[error("index {index} out of bounds for buffer `{buffer}` of length {len}")]
    OutOfBounds {
        /// The buffer.
        buffer: String,
        /// The index.
        index: i64,
        /// The buffer's length.
        len: usize,
    },
    /// A position outside the segment of its parent position.
    #[error("position {pos} on axis `{axis}` of `{buffer}` is outside its segment {start}..{end}")]
    OutsideSegment {
        /// The buffer.
        buffer: String,
        /// The axis.
        axis: String,
        /// The position.
        pos: i64,
        /// Segment start.
        start: i64,
        /// Segment end.
        end: i64,
    },
    /// Two iterations of a GPU-bound loop touch one element and one of them writes it.
    #[error("race in GPU-bound loop `{loop}`: iterations {first} and {second} both access `{buffer}`[{index}] and one writes it")]
    Race {
        /// The loop variable.
        r#loop: String,
        /// The buffer.
        buffer: String,
        /// The flat index.
        index: usize,
        /// One iteration.
        first: i64,
        /// The other.
        second: i64,
    },
    /// Two GPU threads touch one element and one of them writes it (GPU semantics).
    #[error("race between GPU threads: {first} and {second} both access `{buffer}`[{index}] and one writes it without an atomic")]
    GpuRace {
        /// The buffer.
        buffer: String,
        /// The flat index.
        index: usize,
        /// One thread, as `block (x, y, z) thread (x, y, z)`.
        first: String,
        /// The other.
        second: String,
    },
    /// The function cannot be launched as a GPU kernel.
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    /// A barrier or warp shuffle outside GPU semantics.
    #[error("{what} is GPU-only: run the function with GPU semantics (interpret_gpu) or compile it for a cuda target")]
    GpuOnly {
        /// `barrier` or `warp shuffle`.
        what: &'static str,
    },
    /// Threads that must move together (a block, at a barrier; a warp, at a shuffle) take
    /// different paths at a statement that contains the barrier or shuffle.
    #[error("divergence at `{what}`: {first} and {second} of one {scope} take different paths, but it contains a {sync} that every thread of the {scope} must reach")]
    Divergence {
        /// The diverging statement (its head).
        what: String,
        /// `block` or `warp`.
        scope: &'static str,
        /// `barrier` or `warp shuffle`.
        sync: &'static str,
        /// One thread.
        first: String,
        /// Another, on the other path.
        second: String,
    },
    /// A warp shuffle reads a lane that does not execute it.
    #[error("warp shuffle in {thread} reads lane {lane}, which is not active (with a full mask every lane of the warp must execute the shuffle)")]
    ShuffleInactive {
        /// The reading thread.
        thread: String,
        /// The source lane.
        lane: i64,
    },
    /// A warp shuffle in a block whose thread count is not a multiple of the warp size.
    #[error("warp shuffle in a block of {threads} threads: shuffles need whole warps (a multiple of 32 threads per block)")]
    ShuffleWarp {
        /// Threads per block.
        threads: usize,
    },
    /// An access with the wrong number of indices, or another malformed construct.
    #[error("malformed function: {what}")]
    Malformed {
        /// What is malformed.
        what: String,
    },
}

type R<T> = Result<T, Stage2InterpError>;

struct Machine<'f> {
    f: &'f Func,
    data: BTreeMap<String, ArrayData>,
    params: BTreeMap<String, i64>,
    env: Vec<(String, Scalar)>,
    /// One tracker per enclosing GPU-bound loop: which iteration wrote or read each element.
    concurrent: Vec<Tracker>,
    /// Under GPU semantics: the running thread and every element's accesses so far.
    gpu: Option<GpuState>,
    /// Under GPU semantics: the threads of the running block (see [`Machine::block_stmts`]).
    threads: Vec<Thread>,
    /// The thread being run (an index into `threads`).
    cur: usize,
    /// Under GPU semantics: the shared scratch buffers of the running block.
    shared: BTreeMap<String, ArrayData>,
    /// Whether a statement (by address) contains a barrier or shuffle.
    sync_cache: HashMap<usize, bool>,
}

/// One GPU thread of the running block.
struct Thread {
    /// Its index per dimension, in the order of `gpu::GPU_AXES`.
    idx: [i64; 6],
    /// Its number in the launch.
    id: u64,
    /// Its variables (the machine's `env` while it runs).
    env: Vec<(String, Scalar)>,
    /// Its local scratch buffers.
    local: BTreeMap<String, ArrayData>,
    /// Results of the warp shuffles of the statement being run, by the address of the node.
    shuffled: HashMap<usize, Scalar>,
}

/// One access of an element by a GPU thread: the thread, its block, and the block's barrier
/// interval at the time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Acc {
    tid: u64,
    block: u64,
    epoch: u64,
}

impl Acc {
    /// `self` happens before `me` (or is the same thread).
    fn ordered_before(self, me: Acc) -> bool {
        self.tid == me.tid || (self.block == me.block && self.epoch < me.epoch)
    }
}

/// The accesses of one element under GPU semantics.
#[derive(Clone, Copy, Debug, Default)]
struct Seen2 {
    write: Option<Acc>,
    read: Option<Acc>,
    /// Another thread read it in the same interval as `read`.
    multi: bool,
    atomic: Option<Acc>,
}

/// How an element is accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    Read,
    Write,
    Atomic,
}

/// The thread being run under GPU semantics and the accesses of all threads.
struct GpuState {
    /// Its index per dimension, in the order of `gpu::GPU_AXES`.
    idx: [i64; 6],
    /// A number unique to the thread.
    id: u64,
    /// (buffer, index) → its accesses (global memory).
    seen: BTreeMap<(String, usize), Seen2>,
    /// The same for the shared memory of the running block.
    seen_shared: BTreeMap<(String, usize), Seen2>,
    /// The running block's number and barrier interval.
    block: u64,
    epoch: u64,
    /// Thread numbers to their indices, for messages.
    dims: ([u32; 3], [u32; 3]),
    /// The launch being run, for messages, when the function has several.
    launch: Option<usize>,
}

impl GpuState {
    fn describe(&self, id: u64) -> String {
        let ([gx, gy, _], [bx, by, bz]) = self.dims;
        let per_block = bx as u64 * by as u64 * bz as u64;
        let (blk, thr) = (id / per_block, id % per_block);
        let (bxx, byy) = (gx as u64, gy as u64);
        let (tx, ty) = (bx as u64, by as u64);
        let launch = self
            .launch
            .map_or(String::new(), |k| format!("launch {k} "));
        format!(
            "{launch}block ({}, {}, {}) thread ({}, {}, {})",
            blk % bxx,
            blk / bxx % byy,
            blk / (bxx * byy),
            thr % tx,
            thr / tx % ty,
            thr / (tx * ty)
        )
    }
}

/// The iteration that wrote an element, one that read it, and whether another read it too.
type Seen = (Option<i64>, Option<i64>, bool);

/// Accesses of the iterations of one GPU-bound loop, to find races.
struct Tracker {
    var: String,
    iteration: i64,
    /// (buffer, index) → (iteration that wrote it, an iteration that read it, whether another
    /// iteration read it too).
    seen: BTreeMap<(String, usize), Seen>,
}

/// Runs `f` on `b`; output and intermediate buffers are updated in place.
pub fn interpret_func(f: &Func, b: &mut Bindings) -> R<()> {
    let data = bind_data(f, b)?;
    let mut m = Machine {
        f,
        data,
        params: b.params.clone(),
        env: Vec::new(),
        concurrent: Vec::new(),
        gpu: None,
        threads: Vec::new(),
        cur: 0,
        shared: BTreeMap::new(),
        sync_cache: HashMap::new(),
    };
    m.stmts(&f.body)?;
    m.finish(b);
    Ok(())
}

/// Runs `f` on `b` with GPU semantics (see [`crate::gpu`]): every thread of the launch runs
/// the body with its bound loops replaced by guards. The blocks run one after another; in a
/// block, a statement without barriers or shuffles is run by one thread after another, and a
/// statement that contains one is run in lockstep: its conditions must agree across the block
/// (barrier) or warp (shuffle), else [`Stage2InterpError::Divergence`]. Two threads touching
/// one element in one barrier interval (or from different blocks) where either writes it
/// without an atomic is a [`Stage2InterpError::GpuRace`]. Shared scratch is per block, local
/// scratch per thread; a shuffle reads the value of its source lane in the warp of 32.
///
/// A function of several launches ([`crate::gpu::split_launches`]) runs them one after
/// another, each with its own extents; accesses of different launches never race.
pub fn interpret_gpu(f: &Func, b: &mut Bindings) -> R<()> {
    let kernels = crate::gpu::split_launches(f)?;
    let several = kernels.len() > 1;
    let mut data = bind_data(f, b)?;
    for (k, kernel) in kernels.iter().enumerate() {
        data = run_launch(kernel, data, &b.params, several.then_some(k))?;
    }
    for decl in &f.buffers {
        if matches!(decl.kind, BufferKind::Values(Role::Output | Role::Alloc)) {
            if let Some(a) = data.remove(&decl.name) {
                b.buffers.insert(decl.name.clone(), a);
            }
        }
    }
    Ok(())
}

/// Runs one launch of a GPU function on `data` (see [`interpret_gpu`]); `index` names the
/// launch in messages when the function has several.
fn run_launch(
    f: &Func,
    data: BTreeMap<String, ArrayData>,
    params: &BTreeMap<String, i64>,
    index: Option<usize>,
) -> R<BTreeMap<String, ArrayData>> {
    let lowered = crate::gpu::lower_warp_reductions(f)?;
    let f = &lowered;
    let launch = crate::gpu::launch(f)?;
    let load = |name: &str, i: i64| {
        let a = data.get(name)?;
        a.get(usize::try_from(i).ok()?)
    };
    let dims = launch.dims(params, &load)?;
    // Shared memory per block within the largest architecture's limit (sm_90), as a launch
    // would check it; each block gets its own copy of every shared buffer below.
    crate::gpu_mem::shared_layout(f)?.dynamic_bytes_for(
        params,
        &load,
        crate::gpu_mem::MAX_SHARED_SM90,
        "sm_90 (227 KiB)",
    )?;
    let mut m = Machine {
        f,
        data,
        params: params.clone(),
        env: Vec::new(),
        concurrent: Vec::new(),
        gpu: Some(GpuState {
            idx: [0; 6],
            id: 0,
            seen: BTreeMap::new(),
            seen_shared: BTreeMap::new(),
            block: 0,
            epoch: 0,
            dims,
            launch: index,
        }),
        threads: Vec::new(),
        cur: 0,
        shared: BTreeMap::new(),
        sync_cache: HashMap::new(),
    };
    let ([gx, gy, gz], [bx, by, bz]) = dims;
    let mut id = 0u64;
    let mut block = 0u64;
    for z in 0..gz {
        for y in 0..gy {
            for x in 0..gx {
                m.threads.clear();
                for tz in 0..bz {
                    for ty in 0..by {
                        for tx in 0..bx {
                            m.threads.push(Thread {
                                idx: [x, y, z, tx, ty, tz].map(i64::from),
                                id,
                                env: Vec::new(),
                                local: BTreeMap::new(),
                                shuffled: HashMap::new(),
                            });
                            id += 1;
                        }
                    }
                }
                m.shared.clear();
                if let Some(g) = m.gpu.as_mut() {
                    g.seen_shared.clear();
                    g.block = block;
                    g.epoch = 0;
                }
                block += 1;
                let all: Vec<usize> = (0..m.threads.len()).collect();
                m.block_stmts(&f.body, &all)?;
            }
        }
    }
    Ok(m.data)
}

fn bind_data(f: &Func, b: &Bindings) -> R<BTreeMap<String, ArrayData>> {
    let mut data = BTreeMap::new();
    for decl in &f.buffers {
        let arr = match &decl.kind {
            BufferKind::Values(_) => b.buffers.get(&decl.name).cloned(),
            BufferKind::Indptr(ax) => b.axes.get(ax).and_then(|a| a.indptr.clone()),
            BufferKind::Indices(ax) => b.axes.get(ax).and_then(|a| a.indices.clone()),
        };
        match arr {
            Some(a) => {
                data.insert(decl.name.clone(), a);
            }
            // Structure of axes nothing binds is only an error if it is read.
            None if !matches!(decl.kind, BufferKind::Values(_)) => {}
            None => {
                return Err(Stage2InterpError::Unbound {
                    what: "buffer",
                    name: decl.name.clone(),
                })
            }
        }
    }
    Ok(data)
}

impl Machine<'_> {
    /// Moves the written buffers back into the bindings.
    fn finish(mut self, b: &mut Bindings) {
        let f = self.f;
        for decl in &f.buffers {
            if matches!(decl.kind, BufferKind::Values(Role::Output | Role::Alloc)) {
                if let Some(a) = self.data.remove(&decl.name) {
                    b.buffers.insert(decl.name.clone(), a);
                }
            }
        }
    }

    /// Records an access for every enclosing GPU-bound loop (or, under GPU semantics, for the
    /// running thread); two iterations or threads touching one element where either writes it
    /// without an atomic, unordered by a barrier, is a race.
    fn track(&mut self, buffer: &str, off: usize, access: Access) -> R<()> {
        if let Some(g) = self.gpu.as_mut() {
            let scope = self
                .f
                .buffer(buffer)
                .is_none()
                .then(|| self.f.scratch_buffer(buffer).map(|s| s.scope))
                .flatten();
            let map = match scope {
                Some(MemScope::Local) => return Ok(()),
                Some(MemScope::Shared) => &mut g.seen_shared,
                _ => &mut g.seen,
            };
            let me = Acc {
                tid: g.id,
                block: g.block,
                epoch: g.epoch,
            };
            let e = map.entry((buffer.to_string(), off)).or_default();
            let unordered = |a: Option<Acc>| a.filter(|a| !a.ordered_before(me));
            let conflict = match access {
                Access::Read => unordered(e.write).or(unordered(e.atomic)),
                Access::Write | Access::Atomic => {
                    let reader = unordered(e.read).or_else(|| {
                        // Several readers in `read`'s interval: one of them is another thread.
                        e.read
                            .filter(|r| e.multi && !(r.block == me.block && r.epoch < me.epoch))
                    });
                    let plain = unordered(e.write).or(reader);
                    if access == Access::Write {
                        plain.or(unordered(e.atomic))
                    } else {
                        plain
                    }
                }
            };
            if let Some(other) = conflict {
                let (first, second) = (g.describe(other.tid), g.describe(me.tid));
                return Err(Stage2InterpError::GpuRace {
                    buffer: buffer.to_string(),
                    index: off,
                    first,
                    second,
                });
            }
            match access {
                Access::Write => e.write = Some(me),
                Access::Atomic => e.atomic = Some(me),
                Access::Read => match e.read {
                    Some(r) if !r.ordered_before(me) => e.multi = true,
                    Some(r) if r.tid == me.tid => {}
                    _ => {
                        e.read = Some(me);
                        e.multi = false;
                    }
                },
            }
            return Ok(());
        }
        // Atomics commute: they never conflict with each other in a CPU-bound loop.
        if access == Access::Atomic {
            return Ok(());
        }
        let write = access == Access::Write;
        for t in &mut self.concurrent {
            let entry = t
                .seen
                .entry((buffer.to_string(), off))
                .or_insert((None, None, false));
            let me = t.iteration;
            let conflict = match (write, *entry) {
                (_, (Some(w), _, _)) if w != me => Some(w),
                (true, (_, Some(r), multi)) if r != me || multi => Some(r),
                _ => None,
            };
            if let Some(other) = conflict {
                return Err(Stage2InterpError::Race {
                    r#loop: t.var.clone(),
                    buffer: buffer.to_string(),
                    index: off,
                    first: other,
                    second: me,
                });
            }
            if write {
                entry.0 = Some(me);
            } else {
                match entry.1 {
                    None => entry.1 = Some(me),
                    Some(r) if r != me => entry.2 = true,
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    /// Runs `f` as thread `t` of the running block (its variables, indices and scratch).
    fn on_thread<T>(&mut self, t: usize, f: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        self.cur = t;
        std::mem::swap(&mut self.env, &mut self.threads[t].env);
        if let Some(g) = self.gpu.as_mut() {
            g.idx = self.threads[t].idx;
            g.id = self.threads[t].id;
        }
        let r = f(self);
        std::mem::swap(&mut self.env, &mut self.threads[t].env);
        r
    }

    /// Whether a statement contains a barrier or a shuffle (cached by address).
    fn is_sync(&mut self, s: &Stmt) -> bool {
        *self
            .sync_cache
            .entry(s as *const Stmt as usize)
            .or_insert_with(|| s.has_barrier() || s.has_shuffle())
    }

    /// Runs a statement list for the `active` threads of the running block (GPU semantics).
    fn block_stmts(&mut self, stmts: &[Stmt], active: &[usize]) -> R<()> {
        let marks: Vec<usize> = active.iter().map(|&t| self.threads[t].env.len()).collect();
        for s in stmts {
            if self.is_sync(s) {
                self.sync_stmt(s, active)?;
            } else {
                for &t in active {
                    self.on_thread(t, |m| m.stmt(s))?;
                }
            }
        }
        for (&t, &mark) in active.iter().zip(&marks) {
            self.threads[t].env.truncate(mark);
        }
        Ok(())
    }

    /// Checks that the threads agree on a condition: across the block when the statement
    /// holds a barrier, across each warp when it holds only shuffles.
    fn uniform(&self, what: &dyn Fn() -> String, s: &Stmt, vals: &[(usize, bool)]) -> R<()> {
        let block = s.has_barrier();
        let group = |t: usize| if block { 0 } else { t / 32 };
        let mut first: BTreeMap<usize, (usize, bool)> = BTreeMap::new();
        for &(t, v) in vals {
            let (t0, v0) = *first.entry(group(t)).or_insert((t, v));
            if v0 != v {
                let g = self.gpu.as_ref().expect("GPU semantics");
                return Err(Stage2InterpError::Divergence {
                    what: what(),
                    scope: if block { "block" } else { "warp" },
                    sync: if block { "barrier" } else { "warp shuffle" },
                    first: g.describe(self.threads[t0].id),
                    second: g.describe(self.threads[t].id),
                });
            }
        }
        Ok(())
    }

    /// Runs a statement that contains a barrier or shuffle in lockstep over `active`.
    fn sync_stmt(&mut self, s: &Stmt, active: &[usize]) -> R<()> {
        match s {
            Stmt::Barrier => {
                if active.len() != self.threads.len() {
                    let missing = (0..self.threads.len())
                        .find(|t| !active.contains(t))
                        .unwrap_or(0);
                    let g = self.gpu.as_ref().expect("GPU semantics");
                    return Err(Stage2InterpError::Divergence {
                        what: "barrier()".into(),
                        scope: "block",
                        sync: "barrier",
                        first: g.describe(self.threads[active[0]].id),
                        second: g.describe(self.threads[missing].id),
                    });
                }
                if let Some(g) = self.gpu.as_mut() {
                    g.epoch += 1;
                }
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let mut vals = Vec::with_capacity(active.len());
                for &t in active {
                    vals.push((t, self.on_thread(t, |m| m.eval(cond))?.as_bool()));
                }
                self.uniform(&|| format!("if {cond}"), s, &vals)?;
                let pick = |want: bool| -> Vec<usize> {
                    vals.iter().filter(|v| v.1 == want).map(|v| v.0).collect()
                };
                let (yes, no) = (pick(true), pick(false));
                if !yes.is_empty() {
                    self.block_stmts(then_body, &yes)?;
                }
                if !no.is_empty() {
                    self.block_stmts(else_body, &no)?;
                }
            }
            Stmt::For {
                var,
                start,
                end,
                kind,
                body,
            } => {
                // (thread, current value, end)
                let mut state = Vec::with_capacity(active.len());
                for &t in active {
                    let (lo, hi) = self
                        .on_thread(t, |m| Ok((m.eval(start)?.as_i64(), m.eval(end)?.as_i64())))?;
                    let lo = match kind {
                        ForKind::Bound(axis) => {
                            lo.wrapping_add(self.threads[t].idx[crate::gpu::axis_slot(*axis)])
                        }
                        _ => lo,
                    };
                    state.push((t, lo, hi));
                }
                loop {
                    let vals: Vec<(usize, bool)> =
                        state.iter().map(|&(t, v, e)| (t, v < e)).collect();
                    self.uniform(&|| format!("for {var} in {start}..{end}"), s, &vals)?;
                    state.retain(|&(_, v, e)| v < e);
                    if state.is_empty() {
                        break;
                    }
                    let now: Vec<usize> = state.iter().map(|x| x.0).collect();
                    for &(t, v, _) in &state {
                        self.threads[t].env.push((var.clone(), Scalar::I64(v)));
                    }
                    self.block_stmts(body, &now)?;
                    for x in &mut state {
                        self.threads[x.0].env.pop();
                        // A bound loop is a guarded statement: one "iteration" per thread.
                        x.1 = if matches!(kind, ForKind::Bound(_)) {
                            x.2
                        } else {
                            x.1 + 1
                        };
                    }
                }
            }
            Stmt::While { cond, body } => {
                let mut now = active.to_vec();
                loop {
                    let mut vals = Vec::with_capacity(now.len());
                    for &t in &now {
                        vals.push((t, self.on_thread(t, |m| m.eval(cond))?.as_bool()));
                    }
                    self.uniform(&|| format!("while {cond}"), s, &vals)?;
                    now = vals.iter().filter(|v| v.1).map(|v| v.0).collect();
                    if now.is_empty() {
                        break;
                    }
                    self.block_stmts(body, &now)?;
                }
            }
            Stmt::Block { init, body, .. } => {
                self.block_stmts(init, active)?;
                self.block_stmts(body, active)?;
            }
            Stmt::Attr { body, .. } => self.block_stmts(body, active)?,
            // A simple statement with shuffles: every shuffle is evaluated for all active
            // threads first, then the statement runs thread by thread with those results.
            _ => {
                let mut shuffles = Vec::new();
                for e in s.exprs() {
                    collect_shuffles(e, &mut shuffles);
                }
                for sh in shuffles {
                    self.shuffle(sh, active)?;
                }
                for &t in active {
                    self.on_thread(t, |m| m.stmt(s))?;
                }
                for &t in active {
                    self.threads[t].shuffled.clear();
                }
            }
        }
        Ok(())
    }

    /// Evaluates one shuffle for the `active` threads and stores each thread's result.
    fn shuffle(&mut self, e: &Expr, active: &[usize]) -> R<()> {
        let Expr::Shuffle {
            kind,
            value,
            lane,
            width,
        } = e
        else {
            unreachable!("collect_shuffles returns shuffles")
        };
        if value.has_shuffle() || lane.has_shuffle() {
            return Err(Stage2InterpError::Malformed {
                what: format!("shuffle `{e}` has a shuffle in its operands"),
            });
        }
        let w = i64::from(*width);
        if !(1..=32).contains(&w) || w & (w - 1) != 0 {
            return Err(Stage2InterpError::Malformed {
                what: format!("shuffle width {w} (a power of two up to 32)"),
            });
        }
        if !self.threads.len().is_multiple_of(32) {
            return Err(Stage2InterpError::ShuffleWarp {
                threads: self.threads.len(),
            });
        }
        let mut vals: HashMap<usize, (Scalar, i64)> = HashMap::new();
        for &t in active {
            let v = self.on_thread(t, |m| Ok((m.eval(value)?, m.eval(lane)?.as_i64())))?;
            vals.insert(t, v);
        }
        let key = e as *const Expr as usize;
        for &t in active {
            let arg = vals[&t].1;
            let (warp, l) = (t as i64 / 32, t as i64 % 32);
            let base = l & !(w - 1);
            let src = match kind {
                ShuffleKind::Down => l.saturating_add(arg),
                ShuffleKind::Xor => l ^ arg,
                ShuffleKind::Idx => base + arg.rem_euclid(w),
            };
            let src = if (base..base + w).contains(&src) {
                src
            } else {
                l
            };
            let got = usize::try_from(warp * 32 + src)
                .ok()
                .and_then(|s| vals.get(&s))
                .map(|v| v.0);
            let got = match got {
                Some(v) => v,
                None => {
                    let g = self.gpu.as_ref().expect("GPU semantics");
                    return Err(Stage2InterpError::ShuffleInactive {
                        thread: g.describe(self.threads[t].id),
                        lane: src,
                    });
                }
            };
            self.threads[t].shuffled.insert(key, got);
        }
        Ok(())
    }

    fn stmts(&mut self, stmts: &[Stmt]) -> R<()> {
        let mark = self.env.len();
        for s in stmts {
            self.stmt(s)?;
        }
        self.env.truncate(mark);
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> R<()> {
        match s {
            Stmt::For {
                var,
                start,
                end,
                body,
                kind,
            } => {
                let (s0, e0) = (self.eval(start)?.as_i64(), self.eval(end)?.as_i64());
                if let (Some(g), ForKind::Bound(axis)) = (&self.gpu, kind) {
                    // One thread: the guarded statement `let v = start + idx; if v < end`.
                    let v = s0.wrapping_add(g.idx[crate::gpu::axis_slot(*axis)]);
                    if v < e0 {
                        self.env.push((var.clone(), Scalar::I64(v)));
                        self.stmts(body)?;
                        self.env.pop();
                    }
                    return Ok(());
                }
                let bound = matches!(
                    s,
                    Stmt::For {
                        kind: ForKind::Bound(_),
                        ..
                    }
                );
                if bound {
                    self.concurrent.push(Tracker {
                        var: var.clone(),
                        iteration: 0,
                        seen: BTreeMap::new(),
                    });
                }
                for v in s0..e0 {
                    if let Some(t) = self.concurrent.last_mut().filter(|_| bound) {
                        t.iteration = v;
                    }
                    self.env.push((var.clone(), Scalar::I64(v)));
                    self.stmts(body)?;
                    self.env.pop();
                }
                if bound {
                    self.concurrent.pop();
                }
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                if self.eval(cond)?.as_bool() {
                    self.stmts(then_body)?;
                } else {
                    self.stmts(else_body)?;
                }
            }
            Stmt::Let { var, value } => {
                let v = self.eval(value)?;
                self.env.push((var.clone(), v));
            }
            Stmt::Decl { var, dtype, init } => {
                let v = self.eval(init)?.cast(*dtype);
                self.env.push((var.clone(), v));
            }
            Stmt::Assign { var, value } => {
                let v = self.eval(value)?;
                let slot = self
                    .env
                    .iter_mut()
                    .rev()
                    .find(|(n, _)| n == var)
                    .ok_or_else(|| Stage2InterpError::Unbound {
                        what: "variable",
                        name: var.clone(),
                    })?;
                slot.1 = v.cast(slot.1.dtype());
            }
            Stmt::While { cond, body } => {
                while self.eval(cond)?.as_bool() {
                    self.stmts(body)?;
                }
            }
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let v = self.eval(value)?;
                let off = self.offset(buffer, indices)?;
                self.track(buffer, off, Access::Write)?;
                let arr = self.array_mut(buffer)?;
                let dtype = arr.dtype();
                arr.set(off, v.cast(dtype));
            }
            Stmt::Atomic {
                op,
                buffer,
                indices,
                value,
            } => {
                let v = self.eval(value)?;
                let off = self.offset(buffer, indices)?;
                self.track(buffer, off, Access::Atomic)?;
                let old = self.read(buffer, off as i64)?;
                let v = v.cast(old.dtype());
                let new = match op {
                    AtomicOp::Add => eval_binop(BinOp::Add, old, v),
                    AtomicOp::Min => eval_binop(BinOp::Min, old, v),
                    AtomicOp::Max => eval_binop(BinOp::Max, old, v),
                };
                self.array_mut(buffer)?.set(off, new);
            }
            Stmt::Alloc {
                buffer,
                dtype,
                extent,
                scope,
            } => {
                let n = self.eval(extent)?.as_i64();
                let n = usize::try_from(n).map_err(|_| Stage2InterpError::Malformed {
                    what: format!("scratch buffer `{buffer}` of extent {n}"),
                })?;
                let fresh = || ArrayData::zeros(*dtype, n);
                match (self.gpu.is_some(), scope) {
                    (true, MemScope::Local) => {
                        let t = self.cur;
                        self.threads[t].local.insert(buffer.clone(), fresh());
                    }
                    // Shared scratch is allocated once per block, global scratch once per
                    // launch, whichever thread gets there first.
                    (true, MemScope::Shared) => {
                        self.shared.entry(buffer.clone()).or_insert_with(fresh);
                    }
                    (true, MemScope::Global) => {
                        self.data.entry(buffer.clone()).or_insert_with(fresh);
                    }
                    (false, _) => {
                        self.data.insert(buffer.clone(), fresh());
                    }
                }
            }
            Stmt::Barrier => {
                return Err(Stage2InterpError::GpuOnly { what: "barrier" });
            }
            Stmt::Attr { body, .. } => self.stmts(body)?,
            Stmt::Block { init, body, .. } => {
                self.stmts(init)?;
                self.stmts(body)?;
            }
        }
        Ok(())
    }

    /// Where a scratch buffer's elements live for the running thread, if `name` is one.
    fn scratch_scope(&self, name: &str) -> Option<MemScope> {
        if self.gpu.is_none() || self.f.buffer(name).is_some() {
            return None;
        }
        self.f.scratch_buffer(name).map(|s| s.scope)
    }

    fn array(&self, name: &str) -> R<&ArrayData> {
        let a = match self.scratch_scope(name) {
            Some(MemScope::Local) => self.threads.get(self.cur).and_then(|t| t.local.get(name)),
            Some(MemScope::Shared) => self.shared.get(name),
            _ => self.data.get(name),
        };
        a.ok_or_else(|| Stage2InterpError::Unbound {
            what: "buffer",
            name: name.to_string(),
        })
    }

    fn array_mut(&mut self, name: &str) -> R<&mut ArrayData> {
        let a = match self.scratch_scope(name) {
            Some(MemScope::Local) => self
                .threads
                .get_mut(self.cur)
                .and_then(|t| t.local.get_mut(name)),
            Some(MemScope::Shared) => self.shared.get_mut(name),
            _ => self.data.get_mut(name),
        };
        a.ok_or_else(|| Stage2InterpError::Unbound {
            what: "buffer",
            name: name.to_string(),
        })
    }

    fn read(&self, name: &str, index: i64) -> R<Scalar> {
        let a = self.array(name)?;
        usize::try_from(index)
            .ok()
            .and_then(|i| a.get(i))
            .ok_or(Stage2InterpError::OutOfBounds {
                buffer: name.to_string(),
                index,
                len: a.len(),
            })
    }

    /// Flat offset of an access, checking every position.
    fn offset(&mut self, buffer: &str, indices: &[Expr]) -> R<usize> {
        let f = self.f;
        let layout: &[String] = match f.buffer(buffer) {
            Some(d) => &d.layout,
            // Scratch buffers are flat.
            None if f.scratch_buffer(buffer).is_some() => &[],
            None => {
                return Err(Stage2InterpError::Unbound {
                    what: "buffer",
                    name: buffer.to_string(),
                })
            }
        };
        let pos: Vec<i64> = indices
            .iter()
            .map(|e| self.eval(e).map(Scalar::as_i64))
            .collect::<R<_>>()?;
        let len = self.array(buffer)?.len();
        let oob = |index: i64| Stage2InterpError::OutOfBounds {
            buffer: buffer.to_string(),
            index,
            len,
        };
        let flat = if layout.is_empty() {
            match pos.as_slice() {
                [i] => *i,
                _ => {
                    return Err(Stage2InterpError::Malformed {
                        what: format!("flat buffer `{buffer}` with {} indices", pos.len()),
                    })
                }
            }
        } else {
            if layout.len() != pos.len() {
                return Err(Stage2InterpError::Malformed {
                    what: format!(
                        "`{buffer}` has {} axes, accessed with {}",
                        layout.len(),
                        pos.len()
                    ),
                });
            }
            let mut off: Option<i64> = None;
            for (ax, &p) in layout.iter().zip(&pos) {
                let a = self
                    .f
                    .axis(ax)
                    .ok_or_else(|| Stage2InterpError::Malformed {
                        what: format!("axis `{ax}`"),
                    })?;
                let param = |s| {
                    size_value(s, &self.params).ok_or_else(|| Stage2InterpError::Unbound {
                        what: "parameter",
                        name: format!("{s}"),
                    })
                };
                off = Some(match (&a.kind, off) {
                    (AxisKind::DenseFixed { n }, o) => {
                        let n = param(n)?;
                        if p < 0 || p >= n {
                            return Err(Stage2InterpError::OutsideSegment {
                                buffer: buffer.into(),
                                axis: ax.clone(),
                                pos: p,
                                start: 0,
                                end: n,
                            });
                        }
                        o.map_or(p, |o| o * n + p)
                    }
                    (_, None) => {
                        return Err(Stage2InterpError::Malformed {
                            what: format!("axis `{ax}` first in `{buffer}`"),
                        })
                    }
                    (kind, Some(o)) => {
                        let (s, e) = match kind {
                            AxisKind::SparseFixed { nnz_cols, .. } => {
                                let w = param(nnz_cols)?;
                                (o * w, o * w + w)
                            }
                            _ => {
                                let ip = format!("{ax}.indptr");
                                let lo = if kind.is_loose() { 2 * o } else { o };
                                (
                                    self.read(&ip, lo)?.as_i64(),
                                    self.read(&ip, lo + 1)?.as_i64(),
                                )
                            }
                        };
                        if p < s || p >= e {
                            return Err(Stage2InterpError::OutsideSegment {
                                buffer: buffer.into(),
                                axis: ax.clone(),
                                pos: p,
                                start: s,
                                end: e,
                            });
                        }
                        p
                    }
                });
            }
            off.unwrap_or(0)
        };
        usize::try_from(flat)
            .ok()
            .filter(|&i| i < len)
            .ok_or_else(|| oob(flat))
    }

    fn eval(&mut self, e: &Expr) -> R<Scalar> {
        Ok(match e {
            Expr::Int(v, t) => Scalar::I64(*v).cast(*t),
            Expr::Float(v, t) => Scalar::F64(*v).cast(*t),
            Expr::Bool(v) => Scalar::Bool(*v),
            Expr::Var(v) => self
                .env
                .iter()
                .rev()
                .find(|(n, _)| n == v)
                .map(|(_, s)| *s)
                .ok_or_else(|| Stage2InterpError::Unbound {
                    what: "variable",
                    name: v.clone(),
                })?,
            Expr::Param(p) => {
                Scalar::I64(
                    *self
                        .params
                        .get(p)
                        .ok_or_else(|| Stage2InterpError::Unbound {
                            what: "parameter",
                            name: p.clone(),
                        })?,
                )
            }
            Expr::Coord(v) => {
                return Err(Stage2InterpError::Malformed {
                    what: format!("untranslated coordinate @{v}"),
                })
            }
            Expr::Load { buffer, indices } => {
                let off = self.offset(buffer, indices)?;
                self.track(buffer, off, Access::Read)?;
                self.read(buffer, off as i64)?
            }
            Expr::Unary(op, a) => eval_unop(*op, self.eval(a)?),
            Expr::Binary(op, a, b) => {
                let x = self.eval(a)?;
                match op {
                    BinOp::And if !x.as_bool() => Scalar::Bool(false),
                    BinOp::Or if x.as_bool() => Scalar::Bool(true),
                    _ => {
                        let y = self.eval(b)?;
                        if x.dtype() != y.dtype() {
                            return Err(Stage2InterpError::Malformed {
                                what: format!(
                                    "operands of {op:?} have types {} and {}",
                                    x.dtype(),
                                    y.dtype()
                                ),
                            });
                        }
                        eval_binop(*op, x, y)
                    }
                }
            }
            Expr::Select(c, a, b) => {
                if self.eval(c)?.as_bool() {
                    self.eval(a)?
                } else {
                    self.eval(b)?
                }
            }
            Expr::Cast(t, a) => self.eval(a)?.cast(*t),
            Expr::Shuffle { .. } => {
                if self.gpu.is_none() {
                    return Err(Stage2InterpError::GpuOnly {
                        what: "warp shuffle",
                    });
                }
                let key = e as *const Expr as usize;
                self.threads
                    .get(self.cur)
                    .and_then(|t| t.shuffled.get(&key).copied())
                    .ok_or_else(|| Stage2InterpError::Malformed {
                        what: format!("shuffle `{e}` evaluated outside lockstep (a shuffle inside another shuffle's operands?)"),
                    })?
            }
            Expr::Search {
                buffer,
                lo,
                hi,
                value,
            } => {
                let (lo, hi, v) = (
                    self.eval(lo)?.as_i64(),
                    self.eval(hi)?.as_i64(),
                    self.eval(value)?.as_i64(),
                );
                // A linear scan: independent of the binary search the code generator emits.
                let mut found = -1;
                for q in lo..hi {
                    if self.read(buffer, q)?.as_i64() == v {
                        found = q;
                        break;
                    }
                }
                Scalar::I64(found)
            }
            Expr::Segment {
                buffer,
                lo,
                hi,
                value,
            } => {
                let (lo, hi, v) = (
                    self.eval(lo)?.as_i64(),
                    self.eval(hi)?.as_i64(),
                    self.eval(value)?.as_i64(),
                );
                // A linear scan for the last entry not above the value.
                let mut found = lo - 1;
                for q in lo..hi {
                    if self.read(buffer, q)?.as_i64() <= v {
                        found = q;
                    } else {
                        break;
                    }
                }
                Scalar::I64(found)
            }
        })
    }
}

/// The shuffles of an expression, innermost first.
fn collect_shuffles<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    for c in e.children() {
        collect_shuffles(c, out);
    }
    if matches!(e, Expr::Shuffle { .. }) {
        out.push(e);
    }
}
