//! GPU semantics of a flat function whose loops are bound to the CUDA thread hierarchy.
//!
//! A function is launched as one CUDA kernel (or as several in sequence, see "Several
//! launches" below; each is one kernel as described here). Every thread runs the whole body; a
//! loop `bind(AXIS) for v in start..end { body }` is not a loop on the GPU but the guarded statement
//! `let v = start + AXIS; if v < end { body }`, where `AXIS` is the thread's index on that
//! dimension (`blockIdx.x`, `threadIdx.y`, ...). Statements outside every loop bound to a
//! dimension are therefore executed by each thread of that dimension (redundantly).
//!
//! The launch extent of a dimension is the largest `end - start` of the loops bound to it (1
//! when none is), so it must be computable from the parameters alone: a bound loop whose range
//! reads a variable or a buffer is rejected ([`GpuError::DataDependentExtent`]), as is a loop
//! bound inside another loop bound to the same dimension ([`GpuError::NestedAxis`]).
//!
//! [`crate::interpret_gpu`] executes these semantics thread by thread and reports two threads
//! touching one element where either writes it as a race; the NVPTX code generator in
//! `lacuna_target` emits exactly this guarded form.
//!
//! # Several launches
//!
//! A function may be a sequence of kernels launched one after another on one stream (each
//! launch sees every write of the launches before it), which is how a nest that initializes
//! rows and a later nest whose grid blocks accumulate into rows other blocks initialized are
//! kept apart. The boundaries are explicit: a top-level statement annotated
//! `attr launch = 0 { .. }` ([`LAUNCH_KEY`], the schedule's `Annotate(loop, "launch", 0)` on a
//! top-level loop) starts a new launch, which runs up to the next such statement
//! ([`split_launches`]). Without one the function is one launch, as before. Every launch has
//! its own extents ([`launch`] of its part), and races are checked per launch: accesses of
//! different launches are ordered. Nothing but the buffers survives a launch: a later launch
//! may read a top-level `let` of an earlier one only when its value reads no buffer the function
//! writes (the `let` is then repeated at the start of the later launch); reading an earlier
//! launch's top-level mutable variable or scratch buffer is [`GpuError::CrossLaunch`].

use crate::ir::{Expr, ForKind, Func, GpuAxis, Stmt};
use lacuna_ir::Scalar;
use lacuna_stage1::{eval_binop, eval_unop, BinOp};
use std::collections::BTreeMap;

/// The six dimensions in launch order: grid x, y, z, then block x, y, z.
pub const GPU_AXES: [GpuAxis; 6] = [
    GpuAxis::BlockX,
    GpuAxis::BlockY,
    GpuAxis::BlockZ,
    GpuAxis::ThreadX,
    GpuAxis::ThreadY,
    GpuAxis::ThreadZ,
];

/// Index of a dimension in [`GPU_AXES`].
pub fn axis_slot(a: GpuAxis) -> usize {
    match a {
        GpuAxis::BlockX => 0,
        GpuAxis::BlockY => 1,
        GpuAxis::BlockZ => 2,
        GpuAxis::ThreadX => 3,
        GpuAxis::ThreadY => 4,
        GpuAxis::ThreadZ => 5,
    }
}

/// CUDA's limit on the threads of one block.
pub const MAX_THREADS_PER_BLOCK: i64 = 1024;

/// A function that cannot be launched as a GPU kernel, or launch dimensions that are invalid.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GpuError {
    /// A bound loop's range reads a loop variable or a buffer.
    #[error("loop `{loop}` is bound to {axis} but its range reads {what}: the launch extent of a bound loop must depend on parameters only (bind an outer loop, or split the loop by a constant first)")]
    DataDependentExtent {
        /// The loop variable.
        r#loop: String,
        /// The dimension.
        axis: &'static str,
        /// What the range reads.
        what: String,
    },
    /// A loop is bound inside another loop bound to the same dimension.
    #[error("loop `{inner}` is bound to {axis} inside loop `{outer}`, which is bound to it too")]
    NestedAxis {
        /// The enclosing loop.
        outer: String,
        /// The nested loop.
        inner: String,
        /// The dimension.
        axis: &'static str,
    },
    /// A launch extent could not be evaluated (a parameter or element without a value).
    #[error("the launch extent of {axis} needs `{param}`, which has no value")]
    Unbound {
        /// The dimension.
        axis: &'static str,
        /// The parameter.
        param: String,
    },
    /// A `warp_reduce` annotation that cannot become a warp reduction.
    #[error("warp reduction: {why}")]
    WarpReduce {
        /// What is wrong.
        why: String,
    },
    /// A dynamic shared buffer's extent reads something other than parameters (and
    /// elements at parameter positions), so its size cannot be computed before the launch.
    #[error("shared buffer `{buffer}` has extent `{extent}`, which reads {what}: the extent of a shared buffer must depend on parameters only")]
    SharedExtent {
        /// The scratch buffer.
        buffer: String,
        /// Its extent.
        extent: String,
        /// What the extent reads.
        what: String,
    },
    /// A kernel asks for more shared memory per block than the device (or architecture) allows.
    #[error("the kernel needs {bytes} bytes of shared memory per block ({static_bytes} static + {dynamic_bytes} dynamic), more than the {limit} bytes {what} allows")]
    SharedMemory {
        /// Total bytes.
        bytes: u64,
        /// Of which static (`.shared` arrays of constant size).
        static_bytes: u64,
        /// Of which dynamic (`.extern .shared`).
        dynamic_bytes: u64,
        /// The limit.
        limit: u64,
        /// Whose limit (an architecture or the device).
        what: String,
    },
    /// A later launch reads what an earlier launch defines at its top level (see the module
    /// documentation, "Several launches").
    #[error("launch {launch} reads {what}, which launch {defined_in} defines at its top level: only buffers survive a kernel launch (move it into the nest that uses it, or drop the launch boundary)")]
    CrossLaunch {
        /// The reading launch (from 0).
        launch: usize,
        /// The earlier launch that defines it.
        defined_in: usize,
        /// What is read: ``variable `x` `` or ``scratch buffer `s` ``.
        what: String,
    },
    /// A `launch` annotation that is not on a top-level statement of the function.
    #[error("a `launch` annotation must be on a top-level statement of the function (a loop nest of its own), but one is nested in {parent}")]
    NestedLaunch {
        /// The enclosing statement's head.
        parent: String,
    },
    /// A launch extent is out of CUDA's range.
    #[error("launch extent {value} of {axis} is out of range ({limit})")]
    ExtentRange {
        /// The dimension.
        axis: &'static str,
        /// The extent.
        value: i64,
        /// The limit that was broken.
        limit: &'static str,
    },
}

/// The launch extents of a function, as expressions over its parameters, per dimension in the
/// order of [`GPU_AXES`]; `None` for a dimension no loop is bound to (extent 1).
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// Extent expressions (`i64`), one per dimension.
    pub extents: [Option<Expr>; 6],
}

impl Launch {
    /// The dimensions that loops are bound to.
    pub fn bound_axes(&self) -> impl Iterator<Item = GpuAxis> + '_ {
        GPU_AXES
            .into_iter()
            .zip(&self.extents)
            .filter(|(_, e)| e.is_some())
            .map(|(a, _)| a)
    }

    /// Grid and block dimensions for the parameter values: `([gx, gy, gz], [bx, by, bz])`.
    /// Every extent is at least 1 (an empty range launches one idle thread, whose guard
    /// fails); the block may hold at most [`MAX_THREADS_PER_BLOCK`] threads.
    pub fn dims(
        &self,
        params: &BTreeMap<String, i64>,
        load: &dyn Fn(&str, i64) -> Option<Scalar>,
    ) -> Result<([u32; 3], [u32; 3]), GpuError> {
        let mut d = [1u32; 6];
        for (slot, (axis, e)) in GPU_AXES.iter().zip(&self.extents).enumerate() {
            let Some(e) = e else { continue };
            let v = eval_host(e, params, load).map_err(|param| GpuError::Unbound {
                axis: axis.name(),
                param,
            })?;
            let limit: (i64, &'static str) = match slot {
                0 => (i32::MAX as i64, "gridDim.x ≤ 2^31 - 1"),
                1 | 2 => (65535, "gridDim.y, gridDim.z ≤ 65535"),
                3 | 4 => (1024, "blockDim.x, blockDim.y ≤ 1024"),
                _ => (64, "blockDim.z ≤ 64"),
            };
            if v > limit.0 {
                return Err(GpuError::ExtentRange {
                    axis: axis.name(),
                    value: v,
                    limit: limit.1,
                });
            }
            d[slot] = v.max(1) as u32;
        }
        let threads = d[3] as i64 * d[4] as i64 * d[5] as i64;
        if threads > MAX_THREADS_PER_BLOCK {
            return Err(GpuError::ExtentRange {
                axis: "blockDim.x * blockDim.y * blockDim.z",
                value: threads,
                limit: "at most 1024 threads per block",
            });
        }
        Ok(([d[0], d[1], d[2]], [d[3], d[4], d[5]]))
    }

    /// The block's thread count when it does not depend on parameters (for `maxntid`).
    pub fn constant_block(&self) -> Option<[u32; 3]> {
        let empty = BTreeMap::new();
        let mut out = [1u32; 3];
        for (o, e) in out.iter_mut().zip(&self.extents[3..]) {
            if let Some(e) = e {
                let v = eval_host(e, &empty, &|_, _| None).ok()?;
                *o = u32::try_from(v.clamp(1, MAX_THREADS_PER_BLOCK)).ok()?;
            }
        }
        Some(out)
    }
}

/// The key of the annotation (`attr launch = 0 { .. }`) that starts a new kernel launch.
pub const LAUNCH_KEY: &str = "launch";

/// Whether a top-level statement starts a launch: it is annotated [`LAUNCH_KEY`], possibly
/// under other annotations of the same single statement.
pub fn starts_launch(s: &Stmt) -> bool {
    match s {
        Stmt::Attr { key, .. } if key == LAUNCH_KEY => true,
        Stmt::Attr { body, .. } => matches!(body.as_slice(), [one] if starts_launch(one)),
        _ => false,
    }
}

/// The launches of `f`, in order, each a function with `f`'s buffers, parameters and scratch
/// declarations and a run of its top-level statements (see the module documentation): a new
/// launch starts at every top-level statement that [`starts_launch`], unless everything before
/// it is top-level `let`s. A function without boundaries is returned whole (one launch, the
/// body unchanged). A later launch gets the top-level `let`s of earlier ones that it reads,
/// when their values read no buffer the function writes; any other top-level definition of an
/// earlier launch that it reads is [`GpuError::CrossLaunch`]. A `launch` annotation below the
/// top level is [`GpuError::NestedLaunch`].
pub fn split_launches(f: &Func) -> Result<Vec<Func>, GpuError> {
    for s in &f.body {
        let mut top = s;
        // The annotations wrapping a top-level statement are top-level too.
        while let Stmt::Attr { body, .. } = top {
            match body.as_slice() {
                [one] => top = one,
                _ => break,
            }
        }
        for b in top.bodies() {
            nested_launch(b, top)?;
        }
    }
    let mut groups: Vec<Vec<Stmt>> = Vec::new();
    let mut cur: Vec<Stmt> = Vec::new();
    for s in &f.body {
        let only_lets = cur.iter().all(|s| matches!(s, Stmt::Let { .. }));
        if starts_launch(s) && !only_lets {
            groups.push(std::mem::take(&mut cur));
        }
        cur.push(s.clone());
    }
    groups.push(cur);
    if groups.len() == 1 {
        return Ok(vec![f.clone()]);
    }
    // Buffers the function may write: a `let` reading one cannot be repeated in a later launch.
    let read_only = |b: &str| {
        f.buffer(b).is_some_and(|d| {
            !matches!(
                d.kind,
                crate::ir::BufferKind::Values(
                    lacuna_stage1::Role::Output | lacuna_stage1::Role::Alloc
                )
            )
        })
    };
    let mut out = Vec::with_capacity(groups.len());
    for (k, group) in groups.iter().enumerate() {
        let mut free = std::collections::BTreeSet::new();
        free_vars(group, &mut Vec::new(), &mut free);
        let mut used = std::collections::BTreeSet::new();
        buffers_used(group, &mut used);
        let mut lets: Vec<Stmt> = Vec::new();
        let earlier: Vec<(usize, &Stmt)> = groups[..k]
            .iter()
            .enumerate()
            .flat_map(|(j, g)| g.iter().map(move |s| (j, s)))
            .collect();
        // Backwards, so that a repeated `let` brings the `let`s its value reads.
        for &(j, s) in earlier.iter().rev() {
            {
                match s {
                    Stmt::Let { var, value } if free.contains(var) => {
                        let mut read = std::collections::BTreeSet::new();
                        expr_buffers(value, &mut read);
                        if read.iter().all(|b| read_only(b)) && !value.has_shuffle() {
                            free.remove(var);
                            expr_vars(value, &[], &mut free);
                            lets.push(s.clone());
                        } else {
                            return Err(GpuError::CrossLaunch {
                                launch: k,
                                defined_in: j,
                                what: format!("variable `{var}` (its value reads a buffer the function writes)"),
                            });
                        }
                    }
                    Stmt::Decl { var, .. } if free.contains(var) => {
                        return Err(GpuError::CrossLaunch {
                            launch: k,
                            defined_in: j,
                            what: format!("variable `{var}`"),
                        })
                    }
                    Stmt::Alloc { buffer, .. } if used.contains(buffer) => {
                        return Err(GpuError::CrossLaunch {
                            launch: k,
                            defined_in: j,
                            what: format!("scratch buffer `{buffer}`"),
                        })
                    }
                    _ => {}
                }
            }
        }
        lets.reverse();
        lets.extend(group.iter().cloned());
        out.push(Func {
            body: lets,
            ..f.clone()
        });
    }
    Ok(out)
}

/// Rejects `launch` annotations in `stmts`, nested in `parent`.
fn nested_launch(stmts: &[Stmt], parent: &Stmt) -> Result<(), GpuError> {
    for s in stmts {
        if matches!(s, Stmt::Attr { key, .. } if key == LAUNCH_KEY) {
            let head = match parent {
                Stmt::For { var, .. } => format!("loop `{var}`"),
                Stmt::Block { name, .. } => format!("block `{name}`"),
                Stmt::If { cond, .. } => format!("`if {cond}`"),
                Stmt::While { cond, .. } => format!("`while {cond}`"),
                Stmt::Attr { key, .. } => format!("annotation `{key}`"),
                _ => "a statement".to_string(),
            };
            return Err(GpuError::NestedLaunch { parent: head });
        }
        for b in s.bodies() {
            nested_launch(b, s)?;
        }
    }
    Ok(())
}

/// The variables `stmts` read without binding them first (`bound`: those in scope).
fn free_vars(
    stmts: &[Stmt],
    bound: &mut Vec<String>,
    out: &mut std::collections::BTreeSet<String>,
) {
    let mark = bound.len();
    for s in stmts {
        for e in s.exprs() {
            expr_vars(e, bound, out);
        }
        match s {
            Stmt::For { var, body, .. } => {
                bound.push(var.clone());
                free_vars(body, bound, out);
                bound.pop();
            }
            Stmt::Let { var, .. } | Stmt::Decl { var, .. } => bound.push(var.clone()),
            Stmt::Assign { var, .. } => {
                if !bound.contains(var) {
                    out.insert(var.clone());
                }
            }
            other => {
                for b in other.bodies() {
                    free_vars(b, bound, out);
                }
            }
        }
    }
    bound.truncate(mark);
}

fn expr_vars(e: &Expr, bound: &[String], out: &mut std::collections::BTreeSet<String>) {
    if let Expr::Var(v) = e {
        if !bound.contains(v) {
            out.insert(v.clone());
        }
    }
    for c in e.children() {
        expr_vars(c, bound, out);
    }
}

/// The buffers an expression loads from.
fn expr_buffers(e: &Expr, out: &mut std::collections::BTreeSet<String>) {
    match e {
        Expr::Load { buffer, .. } | Expr::Search { buffer, .. } | Expr::Segment { buffer, .. } => {
            out.insert(buffer.clone());
        }
        _ => {}
    }
    for c in e.children() {
        expr_buffers(c, out);
    }
}

/// The buffers `stmts` name (loads, stores, atomics, allocations).
fn buffers_used(stmts: &[Stmt], out: &mut std::collections::BTreeSet<String>) {
    for s in stmts {
        for e in s.exprs() {
            expr_buffers(e, out);
        }
        match s {
            Stmt::Store { buffer, .. }
            | Stmt::Atomic { buffer, .. }
            | Stmt::Alloc { buffer, .. } => {
                out.insert(buffer.clone());
            }
            _ => {}
        }
        for b in s.bodies() {
            buffers_used(b, out);
        }
    }
}

/// The launch extents of `f` (see the module documentation for the rules).
pub fn launch(f: &Func) -> Result<Launch, GpuError> {
    let mut extents: [Option<Expr>; 6] = Default::default();
    let mut open: Vec<(GpuAxis, String)> = Vec::new();
    collect(&f.body, &mut extents, &mut open)?;
    Ok(Launch { extents })
}

fn collect(
    stmts: &[Stmt],
    extents: &mut [Option<Expr>; 6],
    open: &mut Vec<(GpuAxis, String)>,
) -> Result<(), GpuError> {
    for s in stmts {
        match s {
            Stmt::For {
                var,
                start,
                end,
                kind,
                body,
            } => {
                if let ForKind::Bound(axis) = kind {
                    if let Some((_, outer)) = open.iter().find(|(a, _)| a == axis) {
                        return Err(GpuError::NestedAxis {
                            outer: outer.clone(),
                            inner: var.clone(),
                            axis: axis.name(),
                        });
                    }
                    for e in [start, end] {
                        if let Some(what) = non_param(e) {
                            return Err(GpuError::DataDependentExtent {
                                r#loop: var.clone(),
                                axis: axis.name(),
                                what,
                            });
                        }
                    }
                    let n = Expr::bin(
                        BinOp::Max,
                        Expr::sub(end.clone(), start.clone()),
                        Expr::i64(0),
                    );
                    let slot = &mut extents[axis_slot(*axis)];
                    *slot = Some(match slot.take() {
                        None => n,
                        Some(prev) if prev == n => n,
                        Some(prev) => Expr::bin(BinOp::Max, prev, n),
                    });
                    open.push((*axis, var.clone()));
                    collect(body, extents, open)?;
                    open.pop();
                } else {
                    collect(body, extents, open)?;
                }
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                collect(then_body, extents, open)?;
                collect(else_body, extents, open)?;
            }
            Stmt::While { body, .. } | Stmt::Attr { body, .. } => collect(body, extents, open)?,
            Stmt::Block { init, body, .. } => {
                collect(init, extents, open)?;
                collect(body, extents, open)?;
            }
            Stmt::Let { .. }
            | Stmt::Decl { .. }
            | Stmt::Assign { .. }
            | Stmt::Store { .. }
            | Stmt::Alloc { .. }
            | Stmt::Barrier
            | Stmt::Atomic { .. } => {}
        }
    }
    Ok(())
}

/// What an extent expression reads besides parameters and literals, if anything.
pub(crate) fn non_param(e: &Expr) -> Option<String> {
    match e {
        Expr::Var(v) => Some(format!("variable `{v}`")),
        // A load at a position computable on the host (e.g. `J.indptr[m]`, the nonzero count)
        // is evaluated from the bound data before the launch.
        Expr::Load { indices, .. } => indices.iter().find_map(non_param),
        Expr::Search { buffer, .. } | Expr::Segment { buffer, .. } => {
            Some(format!("a search of buffer `{buffer}`"))
        }
        Expr::Coord(v) => Some(format!("coordinate `@{v}`")),
        other => other.children().into_iter().find_map(non_param),
    }
}

/// Evaluates an expression over parameters, literals and loads at such positions (as the
/// interpreters do), `load` giving a buffer's element; the error names a parameter or buffer
/// element without a value (or another construct that cannot be evaluated on the host).
pub fn eval_host(
    e: &Expr,
    params: &BTreeMap<String, i64>,
    load: &dyn Fn(&str, i64) -> Option<Scalar>,
) -> Result<i64, String> {
    fn walk(
        e: &Expr,
        params: &BTreeMap<String, i64>,
        load: &dyn Fn(&str, i64) -> Option<Scalar>,
    ) -> Result<Scalar, String> {
        let go = |e: &Expr| walk(e, params, load);
        Ok(match e {
            Expr::Int(v, t) => Scalar::I64(*v).cast(*t),
            Expr::Float(v, t) => Scalar::F64(*v).cast(*t),
            Expr::Bool(b) => Scalar::Bool(*b),
            Expr::Param(p) => Scalar::I64(*params.get(p).ok_or_else(|| p.clone())?),
            Expr::Load { buffer, indices } => {
                let [i] = indices.as_slice() else {
                    return Err(format!("{buffer}[...] (not flat)"));
                };
                let i = go(i)?.as_i64();
                load(buffer, i).ok_or_else(|| format!("{buffer}[{i}]"))?
            }
            Expr::Unary(op, a) => eval_unop(*op, go(a)?),
            Expr::Binary(op, a, b) => {
                let (x, y) = (go(a)?, go(b)?);
                if x.dtype() != y.dtype() {
                    return Err(format!("operands of {op:?}"));
                }
                eval_binop(*op, x, y)
            }
            Expr::Select(c, a, b) => {
                if go(c)?.as_bool() {
                    go(a)?
                } else {
                    go(b)?
                }
            }
            Expr::Cast(t, a) => go(a)?.cast(*t),
            other => return Err(non_param(other).unwrap_or_else(|| format!("{other:?}"))),
        })
    }
    walk(e, params, load).map(Scalar::as_i64)
}

/// Lowers the `warp_reduce` annotations that `bind` puts on cross-thread reductions (see
/// `lacuna_schedule`'s `bind`) into warp shuffles: in
/// `attr warp_reduce = W { init; bind(threadIdx.x) for l in s..s+W { lets; b[i] = b[i] + e } }`
/// every lane computes its `e`, `log2 W` steps of `shfl_down` sum the lanes of each segment of
/// `W`, and lane `s` performs the init and `b[i] = b[i] + sum`. The block's `threadIdx.x`
/// extent must be exactly `W`, so that the segments are the lanes of the loop. The CPU runs
/// the annotation as its body (a serial sum), which is why it is lowered only here.
pub fn lower_warp_reductions(f: &Func) -> Result<Func, GpuError> {
    fn has(stmts: &[Stmt]) -> bool {
        stmts.iter().any(|s| {
            matches!(s, Stmt::Attr { key, .. } if key == "warp_reduce")
                || s.bodies().iter().any(|b| has(b))
        })
    }
    if !has(&f.body) {
        return Ok(f.clone());
    }
    let tx = launch(f)?.extents[axis_slot(GpuAxis::ThreadX)].clone();
    let tx = tx.and_then(|e| eval_host(&e, &BTreeMap::new(), &|_, _| None).ok());
    let mut out = f.clone();
    out.body = lower_list(f.body.clone(), tx)?;
    Ok(out)
}

fn lower_list(stmts: Vec<Stmt>, tx: Option<i64>) -> Result<Vec<Stmt>, GpuError> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        out.push(match s {
            Stmt::Attr { key, value, body } if key == "warp_reduce" => lower_one(value, body, tx)?,
            Stmt::For {
                var,
                start,
                end,
                kind,
                body,
            } => Stmt::For {
                var,
                start,
                end,
                kind,
                body: lower_list(body, tx)?,
            },
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => Stmt::If {
                cond,
                then_body: lower_list(then_body, tx)?,
                else_body: lower_list(else_body, tx)?,
            },
            Stmt::While { cond, body } => Stmt::While {
                cond,
                body: lower_list(body, tx)?,
            },
            Stmt::Block {
                name,
                iters,
                init,
                body,
            } => Stmt::Block {
                name,
                iters,
                init: lower_list(init, tx)?,
                body: lower_list(body, tx)?,
            },
            Stmt::Attr { key, value, body } => Stmt::Attr {
                key,
                value,
                body: lower_list(body, tx)?,
            },
            other => other,
        });
    }
    Ok(out)
}

fn lower_one(value: Expr, mut body: Vec<Stmt>, tx: Option<i64>) -> Result<Stmt, GpuError> {
    let bad = |why: String| GpuError::WarpReduce { why };
    let Expr::Int(w, _) = value else {
        return Err(bad(format!("width `{value}` is not a constant")));
    };
    if !(1..=32).contains(&w) || w & (w - 1) != 0 {
        return Err(bad(format!("width {w} is not a power of two up to 32")));
    }
    if tx != Some(w) {
        return Err(bad(format!(
            "the block's threadIdx.x extent is {}, not the reduction's width {w}: bind nothing wider to threadIdx.x",
            tx.map_or("not a constant".to_string(), |t| t.to_string())
        )));
    }
    let Some(Stmt::For {
        var,
        start,
        end,
        kind: kind @ ForKind::Bound(GpuAxis::ThreadX),
        body: lb,
    }) = body.pop()
    else {
        return Err(bad(
            "the annotation does not end with a loop bound to threadIdx.x".into(),
        ));
    };
    let init = body;
    let mut lb = lb;
    let Some(Stmt::Store {
        buffer,
        indices,
        value: Expr::Binary(BinOp::Add, _, e),
    }) = lb.pop()
    else {
        return Err(bad(
            "the loop does not end with a sum `b[i] = b[i] + e`".into()
        ));
    };
    if !lb.iter().all(|s| matches!(s, Stmt::Let { .. })) {
        return Err(bad(
            "the loop holds statements other than lets before its sum".into(),
        ));
    }
    let acc = |k: u32| format!("{var}.wr{k}");
    lb.push(Stmt::Let {
        var: acc(0),
        value: *e,
    });
    let (mut off, mut k) = (w / 2, 0);
    while off > 0 {
        lb.push(Stmt::Let {
            var: acc(k + 1),
            value: Expr::add(
                Expr::var(&acc(k)),
                Expr::Shuffle {
                    kind: crate::ir::ShuffleKind::Down,
                    value: Box::new(Expr::var(&acc(k))),
                    lane: Box::new(Expr::i64(off)),
                    width: w as u32,
                },
            ),
        });
        off /= 2;
        k += 1;
    }
    let load = Expr::Load {
        buffer: buffer.clone(),
        indices: indices.clone(),
    };
    let mut then_body = init;
    then_body.push(Stmt::Store {
        buffer,
        indices,
        value: Expr::add(load, Expr::var(&acc(k))),
    });
    lb.push(Stmt::If {
        cond: Expr::bin(BinOp::Eq, Expr::var(&var), start.clone()),
        then_body,
        else_body: vec![],
    });
    Ok(Stmt::For {
        var,
        start,
        end,
        kind,
        body: lb,
    })
}
