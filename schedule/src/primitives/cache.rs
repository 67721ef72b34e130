//! The cache and scope primitives (TVM's / SparseTIR's): `cache_read`, `cache_write`,
//! `reverse_cache_read`, `reverse_cache_write` and `set_scope`.
//!
//! A cache stages the elements of `buffer` that one access of block `BLOCK` touches under a
//! loop `at` in a new scratch buffer of a scope (`local` or `shared`):
//!
//! ```text
//! for at in .. {                         for at in .. {
//!   for v in s..s+W {                      alloc local X_local: f64[W]
//!     let k = f(v)                         for v.X_local in s..s+W {          (copy stage)
//!     if g(k) {                              let k.X_local = f(v.X_local)
//!       block B { ... X[i, k] ... }   ==>    if g(k.X_local) { X_local[v.X_local - s] = X[i, k.X_local] }
//!     }                                    }
//!   }                                      for v in s..s+W { let k = f(v)
//! }                                          if g(k) { block B { ... X_local[v - s] ... } } }
//!                                        }
//! ```
//!
//! The copy stage is a copy of the consumer's own path from `at` down to the access (its loops,
//! `let`s and guards — also the `select` guards of the load), keeping only the loops that the
//! access's indices depend on; so it reads exactly the elements the consumer reads, under the
//! same guards, and never out of bounds. Its loops are named `VAR.CACHE` and can be split or
//! bound like any other loop (a shared cache is filled by the block's threads after
//! `bind(VAR.CACHE, threadIdx.x)`).
//!
//! The kept loops are those that the access's indices, its `select` guards and the guards on
//! the path depend on (through `let`s and loop bounds). The cache's extent is the product of
//! the extents of the loops it is laid out by, which must be constants (split a loop by a
//! constant factor, or `bound` it, first): scratch buffers are never allocated at run time.
//! A `shared` cache may also have an extent over parameters (e.g. `2 * feat`): it becomes
//! dynamic shared memory, sized when the kernel is launched (`lacuna_stage2::gpu_mem`).
//! A loop kept only for a guard does not index a direct cache: its iterations copy the same
//! elements again.
//!
//! - `cache_read`: each index of the access is a kept loop variable plus terms invariant in the
//!   kept loops (a direct index), or invariant; the cache is laid out like the buffer's region
//!   (one dimension per index that varies). The block must not write the buffer under `at`.
//! - `cache_write`: the same for the element the block stores (with direct indices); the cache
//!   is loaded from the buffer first when the block also reads the element (a reduction), and
//!   written back after the consumer.
//! - `reverse_cache_read`: the access may be indirect (`B[J.indices[j], k]`): the cache is laid
//!   out by the consumer's kept loops (outermost first) and the gather happens in the copy stage.
//! - `reverse_cache_write`: the block's update must be a sum `b[idx] = b[idx] + e` (or an atomic
//!   add); the cache starts at zero, accumulates `e`, and is added back to `b[idx]` (the scatter,
//!   an atomic add when the update was atomic) after the consumer. Several cache elements may
//!   add into one element of `b`.
//!
//! A `shared` cache needs a GPU kernel: `at` must lie inside a loop bound to `blockIdx` and not
//! inside one bound to `threadIdx`; barriers are placed after each copy stage and after the
//! consumer, so that every thread of the block sees the whole cache and the next iteration of
//! `at` does not overwrite it while it is read.
//!
//! `set_scope(buffer, scope)` changes the scope of a scratch buffer (see [`set_scope`]).

use crate::error::Condition;
use crate::loops::{find, get, replace, resolved, Resolved};
use lacuna_ir::DType;
use lacuna_stage1::{BinOp, UnOp};
use lacuna_stage2::passes::simplify;
use lacuna_stage2::stream::unit_in;
use lacuna_stage2::{AtomicOp, Expr, ForKind, Func, GpuAxis, MemScope, ScratchDecl, Stmt};
use std::collections::BTreeSet;

/// Which cache primitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheKind {
    /// `cache_read`.
    Read,
    /// `cache_write`.
    Write,
    /// `reverse_cache_read`.
    ReverseRead,
    /// `reverse_cache_write`.
    ReverseWrite,
}

impl CacheKind {
    fn reads(self) -> bool {
        matches!(self, CacheKind::Read | CacheKind::ReverseRead)
    }
    fn reverse(self) -> bool {
        matches!(self, CacheKind::ReverseRead | CacheKind::ReverseWrite)
    }
}

/// The suffix of the names a cache's copy out binds after a copy in (`i.y_local` zeroes a
/// reverse write's cache, `i.y_local.out` writes it back).
const OUT: &str = ".out";

fn bad(what: String) -> Condition {
    Condition::BadArgument { what }
}

/// One step of the path from `at`'s body down to the access.
#[derive(Clone, Debug)]
enum Step {
    For { var: String, start: Expr, end: Expr },
    Let { var: String, value: Expr },
    If { cond: Expr },
}

/// The access at the end of the path.
#[derive(Clone, Debug)]
struct Leaf {
    /// The indices of every access of the buffer in the leaf statement (all equal).
    indices: Vec<Expr>,
    /// The `select` conditions under which the buffer is loaded (empty when it is not loaded).
    load_guards: Vec<Expr>,
    /// True when the leaf loads the buffer.
    loads: bool,
    /// The leaf stores into the buffer: `Some(atomic)`.
    store: Option<bool>,
}

fn count_block(stmts: &[Stmt], block: &str) -> usize {
    crate::loops::blocks(stmts)
        .iter()
        .filter(|b| *b == block)
        .count()
}

/// Number of accesses (loads, stores, atomics) of `buffer` in an expression.
fn count_expr(e: &Expr, buffer: &str) -> usize {
    let own = matches!(e, Expr::Load { buffer: b, .. } if b == buffer) as usize;
    own + e
        .children()
        .into_iter()
        .map(|c| count_expr(c, buffer))
        .sum::<usize>()
}

/// Number of accesses of `buffer` in a statement list (at any depth).
fn count(stmts: &[Stmt], buffer: &str) -> usize {
    stmts
        .iter()
        .map(|s| {
            let own = match s {
                Stmt::Store { buffer: b, .. } | Stmt::Atomic { buffer: b, .. } if b == buffer => 1,
                _ => 0,
            };
            own + s
                .exprs()
                .iter()
                .map(|e| count_expr(e, buffer))
                .sum::<usize>()
                + s.bodies().iter().map(|b| count(b, buffer)).sum::<usize>()
        })
        .sum()
}

/// True when the statement list writes `buffer` (stores or atomics).
fn writes(stmts: &[Stmt], buffer: &str) -> bool {
    stmts.iter().any(|s| {
        matches!(s, Stmt::Store { buffer: b, .. } | Stmt::Atomic { buffer: b, .. } if b == buffer)
            || s.bodies().iter().any(|b| writes(b, buffer))
    })
}

/// The loads of `buffer` in `e`: (indices, the `select` conditions that guard the load).
fn loads(e: &Expr, buffer: &str, guards: &mut Vec<Expr>, out: &mut Vec<(Vec<Expr>, Vec<Expr>)>) {
    match e {
        Expr::Load { buffer: b, indices } if b == buffer => {
            out.push((indices.clone(), guards.clone()));
            indices.iter().for_each(|i| loads(i, buffer, guards, out));
        }
        Expr::Select(c, a, b) => {
            loads(c, buffer, guards, out);
            guards.push((**c).clone());
            loads(a, buffer, guards, out);
            guards.pop();
            guards.push(Expr::Unary(UnOp::Not, c.clone()));
            loads(b, buffer, guards, out);
            guards.pop();
        }
        other => other
            .children()
            .into_iter()
            .for_each(|c| loads(c, buffer, guards, out)),
    }
}

/// Walks from `list` (the body of `at`; `top` for that level) down to the access of `buffer`
/// in block `block`, recording the path.
fn descend(
    list: &[Stmt],
    block: &str,
    buffer: &str,
    inside: bool,
    top: bool,
    kind: CacheKind,
    steps: &mut Vec<Step>,
) -> Result<(usize, Leaf), Condition> {
    let holds = |s: &Stmt| {
        if inside {
            count(std::slice::from_ref(s), buffer) > 0
        } else {
            count_block(std::slice::from_ref(s), block) > 0
        }
    };
    let hits: Vec<usize> = (0..list.len()).filter(|&i| holds(&list[i])).collect();
    let pos = match hits.as_slice() {
        [one] => *one,
        [] => unreachable!("the caller checked that the list holds it"),
        _ if inside => {
            return Err(bad(format!(
                "several statements of block `{block}` access `{buffer}`"
            )))
        }
        _ => {
            return Err(bad(format!(
                "block `{block}` occurs more than once under the loop"
            )))
        }
    };
    if !top {
        for s in &list[..pos] {
            if let Stmt::Let { var, value } = s {
                steps.push(Step::Let {
                    var: var.clone(),
                    value: value.clone(),
                });
            }
        }
    }
    let s = &list[pos];
    match s {
        Stmt::For {
            var,
            start,
            end,
            body,
            ..
        } => {
            if count_expr(start, buffer) + count_expr(end, buffer) > 0 {
                return Err(bad(format!("a loop's range reads `{buffer}`")));
            }
            steps.push(Step::For {
                var: var.clone(),
                start: start.clone(),
                end: end.clone(),
            });
            descend(body, block, buffer, inside, false, kind, steps).map(|(_, l)| (pos, l))
        }
        Stmt::If {
            cond,
            then_body,
            else_body,
        } => {
            if count_expr(cond, buffer) > 0 {
                return Err(bad(format!("a guard reads `{buffer}`")));
            }
            let in_then = if inside {
                count(then_body, buffer) > 0
            } else {
                count_block(then_body, block) > 0
            };
            let (c, b) = if in_then {
                (cond.clone(), then_body)
            } else {
                (Expr::Unary(UnOp::Not, Box::new(cond.clone())), else_body)
            };
            steps.push(Step::If { cond: c });
            descend(b, block, buffer, inside, false, kind, steps).map(|(_, l)| (pos, l))
        }
        Stmt::Attr { body, .. } => {
            descend(body, block, buffer, inside, false, kind, steps).map(|(_, l)| (pos, l))
        }
        Stmt::Block {
            name, init, body, ..
        } if !inside => {
            if name == block {
                if count(init, buffer) > 0 {
                    return Err(bad(format!(
                        "the init of block `{block}` accesses `{buffer}` (decompose the reduction first)"
                    )));
                }
                if count(body, buffer) == 0 {
                    return Err(bad(format!("block `{block}` does not access `{buffer}`")));
                }
                descend(body, block, buffer, true, false, kind, steps).map(|(_, l)| (pos, l))
            } else {
                if count_block(init, block) > 0 {
                    return Err(bad(format!("block `{block}` is inside an init block")));
                }
                descend(body, block, buffer, false, false, kind, steps).map(|(_, l)| (pos, l))
            }
        }
        Stmt::While { .. } => Err(bad(
            "the access is inside a while loop (a co-iteration): its extent is not known".into(),
        )),
        leaf if inside => leaf_of(leaf, buffer, kind, steps).map(|l| (pos, l)),
        _ => unreachable!("only compound statements hold blocks"),
    }
}

fn leaf_of(s: &Stmt, buffer: &str, kind: CacheKind, steps: &[Step]) -> Result<Leaf, Condition> {
    let mut found = Vec::new();
    for e in s.exprs() {
        loads(e, buffer, &mut Vec::new(), &mut found);
    }
    let store = match s {
        Stmt::Store { buffer: b, .. } if b == buffer => Some(false),
        Stmt::Atomic { buffer: b, .. } if b == buffer => Some(true),
        Stmt::Store { .. } | Stmt::Atomic { .. } | Stmt::Let { .. } => None,
        _ => {
            return Err(bad(format!(
                "`{buffer}` is accessed in a statement that is not a store or a let"
            )))
        }
    };
    let mut indices: Option<Vec<Expr>> = match s {
        Stmt::Store { indices, .. } | Stmt::Atomic { indices, .. } if store.is_some() => {
            Some(indices.clone())
        }
        _ => None,
    };
    let mut load_guards: Option<Vec<Expr>> = None;
    for (idx, g) in &found {
        if idx.iter().any(|e| count_expr(e, buffer) > 0) {
            return Err(bad(format!("an index of `{buffer}` reads `{buffer}`")));
        }
        match &indices {
            Some(i) if i != idx => {
                return Err(bad(format!(
                    "block accesses `{buffer}` at several positions ({} and {})",
                    show(i),
                    show(idx)
                )))
            }
            _ => indices = Some(idx.clone()),
        }
        match &load_guards {
            Some(h) if h != g => {
                return Err(bad(format!(
                    "`{buffer}` is loaded under different conditions"
                )))
            }
            _ => load_guards = Some(g.clone()),
        }
    }
    let indices = indices.expect("the leaf accesses the buffer");
    if kind.reads() && store.is_some() {
        return Err(bad(format!(
            "the block writes `{buffer}`: use cache_write to stage what it writes"
        )));
    }
    if !kind.reads() && store.is_none() {
        return Err(bad(format!(
            "the block does not write `{buffer}`: use cache_read to stage what it reads"
        )));
    }
    if kind == CacheKind::Write && store == Some(true) {
        return Err(bad(format!(
            "the block updates `{buffer}` atomically: use reverse_cache_write, which adds the cache back"
        )));
    }
    if kind == CacheKind::ReverseWrite {
        let e = match s {
            Stmt::Atomic {
                op: AtomicOp::Add,
                value,
                ..
            } => Some(value.clone()),
            Stmt::Store { value, .. } => match value {
                Expr::Binary(BinOp::Add, l, r) if is_old(l, buffer, &indices, steps) => {
                    Some((**r).clone())
                }
                _ => None,
            },
            _ => None,
        };
        match e {
            Some(e) if count_expr(&e, buffer) == 0 => {}
            _ => {
                return Err(bad(format!(
                    "the block's update of `{buffer}` is not a sum `{buffer}[idx] = {buffer}[idx] + e` (or an atomic add)"
                )))
            }
        }
    }
    Ok(Leaf {
        indices,
        loads: !found.is_empty(),
        load_guards: load_guards.unwrap_or_default(),
        store,
    })
}

/// True when `e` is the old value `b[idx]` of a sum: the load itself, or
/// `select(c, b[idx], 0)` under a guard `if c` of the path (what lowering writes for a scatter
/// through a row map).
fn is_old(e: &Expr, buffer: &str, indices: &[Expr], steps: &[Step]) -> bool {
    match e {
        Expr::Load {
            buffer: b,
            indices: i,
        } => b == buffer && i == indices,
        Expr::Select(c, a, z) => {
            matches!(&**z, Expr::Float(v, _) if *v == 0.0)
                && steps
                    .iter()
                    .any(|s| matches!(s, Step::If { cond } if cond == &**c))
                && is_old(a, buffer, indices, steps)
        }
        _ => false,
    }
}

fn show(idx: &[Expr]) -> String {
    let parts: Vec<String> = idx.iter().map(|e| e.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// Whether `e` reads only parameters and literals (no variables, loads or searches).
fn params_only(e: &Expr) -> bool {
    match e {
        Expr::Var(_) | Expr::Load { .. } | Expr::Search { .. } | Expr::Segment { .. } => false,
        Expr::Coord(_) | Expr::Shuffle { .. } => false,
        other => other.children().into_iter().all(params_only),
    }
}

fn vars_of(e: &Expr, out: &mut BTreeSet<String>) {
    if let Expr::Var(v) = e {
        out.insert(v.clone());
    }
    e.children().into_iter().for_each(|c| vars_of(c, out));
}

/// Substitutes the values of path `let`s into `e` (innermost first).
fn inline_lets(e: &Expr, steps: &[Step]) -> Expr {
    let mut e = e.clone();
    for s in steps.iter().rev() {
        if let Step::Let { var, value } = s {
            e = e.subst_var(var, value);
        }
    }
    e
}

/// The cache's name: `BUFFER_SCOPE`, made unique.
fn fresh_name(f: &Func, buffer: &str, scope: MemScope) -> String {
    let base = format!("{}_{}", buffer.replace('.', "_"), scope.name());
    let mut name = base.clone();
    let mut n = 1;
    while f.buffer(&name).is_some() || f.scratch_buffer(&name).is_some() {
        name = format!("{base}{n}");
        n += 1;
    }
    name
}

/// The GPU axes of the loops enclosing the loop with pre-order number `index`.
fn enclosing_kinds(body: &[Stmt], index: usize) -> Vec<ForKind> {
    fn go(stmts: &[Stmt], index: usize, counter: &mut usize, path: &mut Vec<ForKind>) -> bool {
        for s in stmts {
            if let Stmt::For { kind, body, .. } = s {
                if *counter == index {
                    return true;
                }
                *counter += 1;
                path.push(*kind);
                if go(body, index, counter, path) {
                    return true;
                }
                path.pop();
            } else {
                for b in s.bodies() {
                    if go(b, index, counter, path) {
                        return true;
                    }
                }
            }
        }
        false
    }
    let mut path = Vec::new();
    go(body, index, &mut 0, &mut path);
    path
}

fn is_thread(k: &ForKind) -> bool {
    matches!(
        k,
        ForKind::Bound(GpuAxis::ThreadX | GpuAxis::ThreadY | GpuAxis::ThreadZ)
    )
}

fn is_block(k: &ForKind) -> bool {
    matches!(
        k,
        ForKind::Bound(GpuAxis::BlockX | GpuAxis::BlockY | GpuAxis::BlockZ)
    )
}

/// `cache_read` / `cache_write` / `reverse_cache_read` / `reverse_cache_write` (see the module
/// documentation). `at` is a loop enclosing the block; `None` picks the outermost one.
pub fn cache(
    mut f: Func,
    kind: CacheKind,
    block: &str,
    buffer: &str,
    scope: &str,
    at: Option<&str>,
) -> Result<Func, Condition> {
    let scope = match MemScope::from_name(scope) {
        Some(s @ (MemScope::Local | MemScope::Shared)) => s,
        _ => {
            return Err(bad(format!(
                "a cache lives in `local` or `shared` scope, not `{scope}`"
            )))
        }
    };
    let dtype = f.elem_type(buffer).ok_or_else(|| Condition::NotFound {
        what: "buffer",
        name: buffer.to_string(),
    })?;
    let loops = crate::loops::enclosing(&f.body, block).ok_or_else(|| Condition::NotFound {
        what: "block",
        name: block.to_string(),
    })?;
    let at_name = match at {
        Some(a) => a.to_string(),
        None => loops
            .first()
            .cloned()
            .ok_or_else(|| bad(format!("block `{block}` is not inside any loop")))?,
    };
    let index = find(&f.body, &at_name)?;
    let Some(Stmt::For { body: at_body, .. }) = get(&f.body, index).cloned() else {
        unreachable!("find returns loops")
    };
    if count_block(&at_body, block) == 0 {
        return Err(bad(format!(
            "loop `{at_name}` does not enclose block `{block}`"
        )));
    }
    let mut steps = Vec::new();
    let (pos, leaf) = descend(&at_body, block, buffer, false, true, kind, &mut steps)?;
    let consumer = &at_body[pos];
    // Other accesses in the consumer's subtree.
    if kind.reads() {
        if writes(std::slice::from_ref(consumer), buffer) {
            return Err(bad(format!(
                "`{buffer}` is written under loop `{at_name}`: a cache of it would be stale"
            )));
        }
    } else {
        let total = count(std::slice::from_ref(consumer), buffer);
        let mut leaf_count = 0;
        count_leaf(consumer, block, buffer, &mut leaf_count);
        if total != leaf_count {
            return Err(bad(format!(
                "`{buffer}` is also accessed elsewhere under loop `{at_name}`"
            )));
        }
    }
    // GPU placement rules.
    let outer = enclosing_kinds(&f.body, index);
    let at_kind = match get(&f.body, index) {
        Some(Stmt::For { kind, .. }) => *kind,
        _ => unreachable!("a loop"),
    };
    if scope == MemScope::Shared {
        if outer.iter().chain([&at_kind]).any(is_thread) {
            return Err(bad(format!(
                "a shared cache is filled by all threads of a block: loop `{at_name}` must not be inside (or be) a loop bound to threadIdx"
            )));
        }
        if !outer.iter().any(is_block) && !is_block(&at_kind) {
            return Err(bad(format!(
                "a shared cache needs a GPU kernel: loop `{at_name}` must be inside a loop bound to blockIdx"
            )));
        }
    }
    // Which path variables the access depends on.
    let mut needed = BTreeSet::new();
    leaf.indices.iter().for_each(|e| vars_of(e, &mut needed));
    leaf.load_guards
        .iter()
        .for_each(|e| vars_of(e, &mut needed));
    // The copy stage keeps every guard of the path, so it needs what they read too.
    for s in &steps {
        if let Step::If { cond } = s {
            vars_of(cond, &mut needed);
        }
    }
    for s in steps.iter().rev() {
        if let Step::Let { var, value } = s {
            if needed.contains(var) {
                vars_of(value, &mut needed);
            }
        }
    }
    let defined: BTreeSet<String> = steps
        .iter()
        .filter_map(|s| match s {
            Step::For { var, .. } | Step::Let { var, .. } => Some(var.clone()),
            Step::If { .. } => None,
        })
        .collect();
    // Loop bounds of kept loops, and guards, must not read dropped variables.
    let mut changed = true;
    while changed {
        changed = false;
        for s in &steps {
            if let Step::For { var, start, end } = s {
                if needed.contains(var) {
                    let mut vs = BTreeSet::new();
                    vars_of(start, &mut vs);
                    vars_of(end, &mut vs);
                    for v in vs {
                        changed |= needed.insert(v);
                    }
                }
            }
            if let Step::Let { var, value } = s {
                if needed.contains(var) {
                    let mut vs = BTreeSet::new();
                    vars_of(value, &mut vs);
                    for v in vs {
                        changed |= needed.insert(v);
                    }
                }
            }
        }
    }
    // A shared cache may have an extent over parameters (dynamic shared memory, sized at
    // launch); other caches need constant extents.
    let kept: Vec<(String, Expr, Expr)> = steps
        .iter()
        .filter_map(|s| match s {
            Step::For { var, start, end } if needed.contains(var) => {
                Some((var.clone(), start.clone(), end.clone()))
            }
            _ => None,
        })
        .map(|(var, start, end)| {
            match simplify::expr(Expr::sub(end.clone(), start.clone())) {
                Expr::Int(n, t) => Ok((var, start, Expr::Int(n.max(0), t))),
                other if scope == MemScope::Shared && params_only(&other) => Ok((
                    var,
                    start,
                    Expr::bin(BinOp::Max, other, Expr::i64(0)),
                )),
                other => Err(bad(format!(
                    "the cached region's extent along loop `{var}` is `{other}`, not {} (split the loop by a constant factor, bound it, or specialize the parameters first)",
                    if scope == MemScope::Shared { "an expression over parameters" } else { "a constant" }
                ))),
            }
        })
        .collect::<Result<_, _>>()?;
    if scope == MemScope::Local {
        let mut kinds = Vec::new();
        path_loop_kinds(&at_body[pos], block, &mut kinds);
        if kinds.iter().any(|k| is_thread(k) || is_block(k)) {
            return Err(bad(format!(
                "a local cache is private to one thread, but loops between `{at_name}` and block `{block}` are bound to GPU threads: cache under the innermost bound loop"
            )));
        }
    }
    // The cache layout: one dimension per kept loop (reverse), or per varying index (direct).
    let dims: Vec<(String, Expr, Expr)> = if kind.reverse() {
        kept.clone()
    } else {
        let mut dims = Vec::new();
        let kept_vars: BTreeSet<&str> = kept.iter().map(|k| k.0.as_str()).collect();
        for (d, e) in leaf.indices.iter().enumerate() {
            let full = inline_lets(e, &steps);
            let mut vs = BTreeSet::new();
            vars_of(&full, &mut vs);
            let varying: Vec<&String> = vs
                .iter()
                .filter(|v| kept_vars.contains(v.as_str()))
                .collect();
            match varying.as_slice() {
                [] => {}
                [v] if unit_in(&full, v) && !dims.iter().any(|x: &(String, Expr, Expr)| &x.0 == *v) => {
                    dims.push(kept.iter().find(|k| &k.0 == *v).cloned().expect("kept"));
                }
                _ => {
                    return Err(bad(format!(
                        "index {d} of `{buffer}`, `{e}`, is not a loop variable plus invariant terms: use reverse_cache_{}",
                        if kind.reads() { "read" } else { "write" }
                    )))
                }
            }
        }
        dims
    };
    let extent = simplify::expr(
        dims.iter()
            .map(|d| d.2.clone())
            .reduce(Expr::mul)
            .unwrap_or_else(|| Expr::i64(1)),
    );
    // A local cache lives in registers or on the stack (48 KiB at most); a shared one in
    // shared memory, static up to 48 KiB and dynamic beyond (up to sm_90's 227 KiB per block,
    // checked again against the architecture and the device at launch).
    let limit = match scope {
        MemScope::Shared => lacuna_stage2::gpu_mem::MAX_SHARED_SM90,
        _ => 48 * 1024,
    };
    if let Expr::Int(n, _) = extent {
        let bytes = n.max(1).saturating_mul(dtype.size_bytes() as i64);
        if bytes as u64 > limit {
            return Err(bad(format!(
                "the cache would take {bytes} bytes; a {} scratch buffer may take at most {} KiB",
                scope.name(),
                limit / 1024
            )));
        }
    }
    let name = fresh_name(&f, buffer, scope);
    let suffix = format!(".{name}");
    for s in &steps {
        if let Step::For { var, .. } = s {
            for v in [format!("{var}{suffix}"), format!("{var}{suffix}{OUT}")] {
                if find(&f.body, &v).is_ok() {
                    return Err(bad(format!("a loop named `{v}` exists already")));
                }
            }
        }
    }
    // The position in the cache: sum over dims of (v - start) * stride.
    let position = |rn: &dyn Fn(&str) -> String| -> Expr {
        let mut pos: Option<Expr> = None;
        let mut stride = Expr::i64(1);
        for (var, start, ext) in dims.iter().rev() {
            let off = simplify::expr(Expr::sub(
                Expr::var(&rn(var)),
                crate::primitives::tree::rename_expr(start.clone(), &renames(rn, &steps)),
            ));
            let term = if stride == Expr::i64(1) {
                off
            } else {
                Expr::mul(off, stride.clone())
            };
            pos = Some(match pos {
                None => term,
                Some(p) => Expr::add(term, p),
            });
            stride = simplify::expr(Expr::mul(stride, ext.clone()));
        }
        pos.unwrap_or_else(|| Expr::i64(0))
    };
    let rn_copy = |v: &str| {
        if defined.contains(v) && needed.contains(v) {
            format!("{v}{suffix}")
        } else {
            v.to_string()
        }
    };
    let rn_id = |v: &str| v.to_string();
    let copy_pos = position(&rn_copy);
    let cons_pos = position(&rn_id);
    let map = renames(&rn_copy, &steps);
    let r = |e: &Expr| crate::primitives::tree::rename_expr(e.clone(), &map);
    let load_buf = Expr::Load {
        buffer: buffer.to_string(),
        indices: leaf.indices.iter().map(r).collect(),
    };
    let load_cache_copy = Expr::Load {
        buffer: name.clone(),
        indices: vec![copy_pos.clone()],
    };
    let zero = match dtype {
        DType::F32 | DType::F64 => Expr::Float(0.0, dtype),
        DType::Bool => return Err(bad(format!("`{buffer}` holds booleans"))),
        t => Expr::Int(0, t),
    };
    let guard = |guards: &[Expr], s: Stmt| -> Stmt {
        let conds: Vec<Expr> = guards.iter().map(r).collect();
        match conds.into_iter().reduce(|a, b| Expr::bin(BinOp::And, a, b)) {
            None => s,
            Some(c) => Stmt::If {
                cond: c,
                then_body: vec![s],
                else_body: vec![],
            },
        }
    };
    // The stages, each wrapped in the kept path.
    let copy_in = match kind {
        CacheKind::Read | CacheKind::ReverseRead => Some(guard(
            &leaf.load_guards,
            Stmt::Store {
                buffer: name.clone(),
                indices: vec![copy_pos.clone()],
                value: load_buf.clone(),
            },
        )),
        CacheKind::Write if leaf.loads => Some(guard(
            &leaf.load_guards,
            Stmt::Store {
                buffer: name.clone(),
                indices: vec![copy_pos.clone()],
                value: load_buf.clone(),
            },
        )),
        CacheKind::Write => None,
        CacheKind::ReverseWrite => Some(Stmt::Store {
            buffer: name.clone(),
            indices: vec![copy_pos.clone()],
            value: zero,
        }),
    };
    // A reverse write whose buffer the statement just before the consumer sets to zero at the
    // same elements (a sum's init, run per group as the first `dia` part's): the cache is
    // stored instead of added, and that init goes (`0.0 + c` is `c`; a sum of `-0.0` then
    // stays `-0.0`).
    let zeroed_before = kind == CacheKind::ReverseWrite
        && leaf.store == Some(false)
        && scope != MemScope::Shared
        && pos > 0;
    let copy_out = match kind {
        CacheKind::Read | CacheKind::ReverseRead => None,
        CacheKind::Write => Some(Stmt::Store {
            buffer: buffer.to_string(),
            indices: leaf.indices.iter().map(r).collect(),
            value: load_cache_copy.clone(),
        }),
        CacheKind::ReverseWrite if leaf.store == Some(true) => Some(Stmt::Atomic {
            op: AtomicOp::Add,
            buffer: buffer.to_string(),
            indices: leaf.indices.iter().map(r).collect(),
            value: load_cache_copy.clone(),
        }),
        CacheKind::ReverseWrite => Some(Stmt::Store {
            buffer: buffer.to_string(),
            indices: leaf.indices.iter().map(r).collect(),
            value: Expr::add(load_buf.clone(), load_cache_copy.clone()),
        }),
    };
    // Guards keep the stages to the elements the consumer touches; zeroing a reverse write's
    // cache needs none (every element lies in the cache, and one the consumer never adds to
    // is never added back): unguarded, it is one vector store.
    let wrap_guarded = |inner: Stmt, guarded: bool| -> Stmt {
        let mut s = vec![inner];
        for step in steps.iter().rev() {
            match step {
                Step::For { var, start, end } if needed.contains(var) => {
                    s = vec![Stmt::For {
                        var: rn_copy(var),
                        start: r(start),
                        end: r(end),
                        kind: ForKind::Serial,
                        body: s,
                    }]
                }
                Step::Let { var, value } if needed.contains(var) => s.insert(
                    0,
                    Stmt::Let {
                        var: rn_copy(var),
                        value: r(value),
                    },
                ),
                Step::If { cond } if guarded => {
                    s = vec![Stmt::If {
                        cond: r(cond),
                        then_body: s,
                        else_body: vec![],
                    }]
                }
                _ => {}
            }
        }
        match s.len() {
            1 => s.pop().expect("one"),
            _ => Stmt::If {
                cond: Expr::Bool(true),
                then_body: s,
                else_body: vec![],
            },
        }
    };
    // Rewrite the consumer's accesses.
    let consumer = rewrite_consumer(
        at_body[pos].clone(),
        block,
        buffer,
        &name,
        &cons_pos,
        kind,
        false,
    );
    let shared = scope == MemScope::Shared;
    let mut copy_out = copy_out;
    let mut first = pos;
    if let (true, Some(add @ Stmt::Store { indices, .. })) = (zeroed_before, &copy_out) {
        if zeroes_as(&at_body[pos - 1], &wrap_guarded(add.clone(), true), buffer) {
            copy_out = Some(Stmt::Store {
                buffer: buffer.to_string(),
                indices: indices.clone(),
                value: load_cache_copy.clone(),
            });
            first = pos - 1;
        }
    }
    let mut stages = vec![Stmt::Alloc {
        buffer: name.clone(),
        dtype,
        extent,
        scope,
    }];
    let copies_in = copy_in.is_some();
    if let Some(c) = copy_in {
        stages.push(wrap_guarded(c, kind != CacheKind::ReverseWrite));
        if shared {
            stages.push(Stmt::Barrier);
        }
    }
    stages.push(consumer);
    if let Some(c) = copy_out {
        if shared {
            stages.push(Stmt::Barrier);
        }
        let mut out = vec![wrap_guarded(c, true)];
        // After a copy in, the copy out's loops and lets take names of their own, so that a
        // schedule can name either.
        if copies_in {
            let map: Vec<(String, String)> = crate::primitives::tree::defined_vars(&out)
                .into_iter()
                .filter(|v| v.ends_with(&suffix))
                .map(|v| (v.clone(), format!("{v}{OUT}")))
                .collect();
            out = crate::primitives::tree::rename(out, &map);
        }
        stages.extend(out);
    }
    if shared {
        stages.push(Stmt::Barrier);
    }
    let mut stages = Some(stages);
    f.body = replace(f.body, index, &mut |s| {
        let Stmt::For {
            var,
            start,
            end,
            kind,
            mut body,
        } = s
        else {
            unreachable!("a loop")
        };
        body.splice(first..=pos, stages.take().unwrap_or_default());
        Ok(vec![Stmt::For {
            var,
            start,
            end,
            kind,
            body,
        }])
    })?;
    f.scratch.push(ScratchDecl { name, dtype, scope });
    Ok(f)
}

/// Whether `init` only sets `buffer` to 0.0, at exactly the elements (same resolved indices,
/// same guards: [`resolved`]) where `write_back` stores into it, and touches nothing else.
fn zeroes_as(init: &Stmt, write_back: &Stmt, buffer: &str) -> bool {
    let mut atomics = Vec::new();
    crate::loops::atomic_buffers(std::slice::from_ref(init), &mut atomics);
    let zeroing = resolved(std::slice::from_ref(init));
    let stores: Vec<&Resolved> = zeroing.iter().filter(|a| a.stored.is_some()).collect();
    let written = resolved(std::slice::from_ref(write_back));
    let target: Vec<&Resolved> = written
        .iter()
        .filter(|a| a.stored.is_some() && a.buffer == buffer)
        .collect();
    let [zero] = stores.as_slice() else {
        return false;
    };
    let [wb] = target.as_slice() else {
        return false;
    };
    atomics.is_empty()
        && zero.buffer == buffer
        && matches!(zero.stored, Some(Expr::Float(v, _)) if v == 0.0)
        && !zeroing
            .iter()
            .any(|a| a.buffer == buffer && a.stored.is_none())
        && ((zero.indices == wb.indices && zero.guards == wb.guards)
            || same_elements(init, write_back, buffer))
}

/// Iterations [`same_elements`] enumerates at most, for each statement.
const ENUMERATE_MAX: usize = 1 << 16;

/// Whether `init` and `write_back` store into the same elements of `buffer`, each of
/// `write_back`'s once, counted by running their loops: every loop of constant range (none
/// bound to GPU threads), every guard decided by the loop variables, at most
/// [`ENUMERATE_MAX`] iterations each. Variables
/// bound outside (`i`) stay as they are, so `for k in 0..128 { C[i, k] = 0 }` and
/// `for k.0 in 0..2 { for k.1 in 0..64 { C[i, k.0 * 64 + k.1] = .. } }` match; anything the
/// count cannot decide does not.
fn same_elements(init: &Stmt, write_back: &Stmt, buffer: &str) -> bool {
    let (Some(mut a), Some(mut b)) = (
        stored_elements(init, buffer),
        stored_elements(write_back, buffer),
    ) else {
        return false;
    };
    a.sort();
    a.dedup();
    b.sort();
    let n = b.len();
    b.dedup();
    n == b.len() && a == b
}

/// The index lists (printed, after substituting the loop variables' values and simplifying)
/// of every store into `buffer` that `s` runs; `None` where a range, a guard or the number of
/// iterations cannot be known without running the kernel.
fn stored_elements(s: &Stmt, buffer: &str) -> Option<Vec<String>> {
    fn value(e: &Expr, env: &[(String, Expr)]) -> Expr {
        let mut e = e.clone();
        for (var, v) in env.iter().rev() {
            e = e.subst_var(var, v);
        }
        simplify::expr(e)
    }
    fn walk(
        stmts: &[Stmt],
        buffer: &str,
        env: &mut Vec<(String, Expr)>,
        steps: &mut usize,
        out: &mut Vec<String>,
    ) -> Option<()> {
        let mark = env.len();
        for s in stmts {
            *steps += 1;
            if *steps > ENUMERATE_MAX {
                return None;
            }
            match s {
                // A loop bound to GPU threads runs one iteration per thread: not counted.
                Stmt::For {
                    kind: ForKind::Bound(_),
                    ..
                } => return None,
                Stmt::For {
                    var,
                    start,
                    end,
                    body,
                    ..
                } => {
                    let (Expr::Int(lo, _), Expr::Int(hi, _)) = (value(start, env), value(end, env))
                    else {
                        return None;
                    };
                    for v in lo..hi {
                        env.push((var.clone(), Expr::i64(v)));
                        let r = walk(body, buffer, env, steps, out);
                        env.pop();
                        r?;
                    }
                }
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => match value(cond, env) {
                    Expr::Bool(c) => walk(
                        if c { then_body } else { else_body },
                        buffer,
                        env,
                        steps,
                        out,
                    )?,
                    _ => return None,
                },
                Stmt::Let { var, value: v } => {
                    let x = value(v, env);
                    env.push((var.clone(), x));
                }
                Stmt::Block { init, body, .. } => {
                    walk(init, buffer, env, steps, out)?;
                    walk(body, buffer, env, steps, out)?;
                }
                Stmt::Store {
                    buffer: b, indices, ..
                } => {
                    if b == buffer {
                        let idx: Vec<Expr> = indices.iter().map(|i| value(i, env)).collect();
                        out.push(show(&idx));
                    }
                }
                _ => return None,
            }
        }
        env.truncate(mark);
        Some(())
    }
    let mut out = Vec::new();
    walk(
        std::slice::from_ref(s),
        buffer,
        &mut Vec::new(),
        &mut 0,
        &mut out,
    )?;
    Some(out)
}

fn renames(rn: &dyn Fn(&str) -> String, steps: &[Step]) -> Vec<(String, String)> {
    steps
        .iter()
        .filter_map(|s| match s {
            Step::For { var, .. } | Step::Let { var, .. } => Some((var.clone(), rn(var))),
            Step::If { .. } => None,
        })
        .filter(|(a, b)| a != b)
        .collect()
}

/// Counts the accesses of `buffer` in the body of block `block` under `s`.
fn count_leaf(s: &Stmt, block: &str, buffer: &str, n: &mut usize) {
    match s {
        Stmt::Block { name, body, .. } if name == block => *n += count(body, buffer),
        other => {
            for b in other.bodies() {
                for x in b {
                    count_leaf(x, block, buffer, n);
                }
            }
        }
    }
}

/// The kinds of the loops on the path from `s` down to block `block`.
fn path_loop_kinds(s: &Stmt, block: &str, out: &mut Vec<ForKind>) {
    if let Stmt::Block { name, .. } = s {
        if name == block {
            return;
        }
    }
    if let Stmt::For { kind, .. } = s {
        out.push(*kind);
    }
    for b in s.bodies() {
        for x in b {
            if count_block(std::slice::from_ref(x), block) > 0 {
                path_loop_kinds(x, block, out);
            }
        }
    }
}

/// The consumer with the block's accesses of `buffer` redirected to the cache at `pos`.
fn rewrite_consumer(
    s: Stmt,
    block: &str,
    buffer: &str,
    cache: &str,
    pos: &Expr,
    kind: CacheKind,
    inside: bool,
) -> Stmt {
    fn expr(e: Expr, buffer: &str, cache: &str, pos: &Expr) -> Expr {
        match e {
            Expr::Load { buffer: b, .. } if b == buffer => Expr::Load {
                buffer: cache.to_string(),
                indices: vec![pos.clone()],
            },
            other => other.map_children(&mut |c| expr(c, buffer, cache, pos)),
        }
    }
    let inside = inside || matches!(&s, Stmt::Block { name, .. } if name == block);
    if !inside {
        return s.map_bodies(&mut |list| {
            list.into_iter()
                .map(|x| rewrite_consumer(x, block, buffer, cache, pos, kind, false))
                .collect()
        });
    }
    if kind == CacheKind::ReverseWrite {
        if let Some(store) = index_guarded_sum(&s, buffer) {
            // The guard only keeps the store's index in `buffer`'s bounds; the cache's element
            // is always in bounds, and the scatter after the consumer is guarded the same way
            // (its condition depends only on the kept loops), so an element whose guard fails
            // accumulates but is never added back. Unguarded, the sum vectorizes without
            // masks.
            return rewrite_consumer(store, block, buffer, cache, pos, kind, true);
        }
    }
    let s = match s {
        Stmt::Store {
            buffer: b,
            value,
            indices,
        } => {
            let value = expr(value, buffer, cache, pos);
            let indices: Vec<Expr> = indices
                .into_iter()
                .map(|i| expr(i, buffer, cache, pos))
                .collect();
            if b == buffer {
                Stmt::Store {
                    buffer: cache.to_string(),
                    indices: vec![pos.clone()],
                    value,
                }
            } else {
                Stmt::Store {
                    buffer: b,
                    indices,
                    value,
                }
            }
        }
        Stmt::Atomic {
            op,
            buffer: b,
            indices,
            value,
        } => {
            let value = expr(value, buffer, cache, pos);
            if b == buffer && kind == CacheKind::ReverseWrite {
                // The cache is private to the enclosing path: a plain sum into it.
                Stmt::Store {
                    buffer: cache.to_string(),
                    indices: vec![pos.clone()],
                    value: Expr::add(
                        Expr::Load {
                            buffer: cache.to_string(),
                            indices: vec![pos.clone()],
                        },
                        value,
                    ),
                }
            } else {
                Stmt::Atomic {
                    op,
                    buffer: b,
                    indices: indices
                        .into_iter()
                        .map(|i| expr(i, buffer, cache, pos))
                        .collect(),
                    value,
                }
            }
        }
        Stmt::Let { var, value } => Stmt::Let {
            var,
            value: expr(value, buffer, cache, pos),
        },
        other => other,
    };
    s.map_bodies(&mut |list| {
        list.into_iter()
            .map(|x| rewrite_consumer(x, block, buffer, cache, pos, kind, true))
            .collect()
    })
}

/// For `if v >= 0 { b[v] = select(v >= 0, b[v], 0.0) + e }` (a sum through a translated
/// position `v`, -1 where the coordinate is not stored, as lowering writes it; the `select`
/// may also be the plain load): the sum `b[v] = b[v] + e` without the guard.
fn index_guarded_sum(s: &Stmt, buffer: &str) -> Option<Stmt> {
    let Stmt::If {
        cond,
        then_body,
        else_body,
    } = s
    else {
        return None;
    };
    let [Stmt::Store {
        buffer: b,
        indices,
        value,
    }] = then_body.as_slice()
    else {
        return None;
    };
    let Expr::Binary(BinOp::Ge, v, zero) = cond else {
        return None;
    };
    let (Expr::Var(v), Expr::Int(0, _)) = (&**v, &**zero) else {
        return None;
    };
    if !else_body.is_empty() || b != buffer || indices.as_slice() != [Expr::Var(v.clone())] {
        return None;
    }
    let Expr::Binary(BinOp::Add, old, e) = value else {
        return None;
    };
    let load = Expr::Load {
        buffer: buffer.to_string(),
        indices: indices.clone(),
    };
    let plain = match &**old {
        l if *l == load => true,
        Expr::Select(c, l, z) => {
            **c == *cond && **l == load && matches!(&**z, Expr::Float(f, _) if *f == 0.0)
        }
        _ => false,
    };
    if !plain || count_expr(e, buffer) > 0 {
        return None;
    }
    Some(Stmt::Store {
        buffer: b.clone(),
        indices: indices.clone(),
        value: Expr::add(load, (**e).clone()),
    })
}

/// `set_scope(buffer, scope)`: changes the scope of a scratch buffer (its declaration and its
/// allocations).
///
/// - to `shared`: every allocation must be inside a loop bound to blockIdx and outside every
///   loop bound to threadIdx, so that all accesses happen inside one block's threads (each
///   block gets its own copy); races between the block's threads are then reported by the GPU
///   interpreter.
/// - to `local`: no loop between an allocation and an access of the buffer may be bound to GPU
///   threads or blocks or be parallel (every access must come from the thread that allocated).
/// - to `global`: only in CPU functions (a GPU kernel does not allocate global memory).
pub fn set_scope(mut f: Func, buffer: &str, scope: &str) -> Result<Func, Condition> {
    let to = MemScope::from_name(scope).ok_or_else(|| {
        bad(format!(
            "unknown scope `{scope}` (use `global`, `shared` or `local`)"
        ))
    })?;
    let Some(decl) = f.scratch_buffer(buffer) else {
        if f.buffer(buffer).is_some() {
            return Err(bad(format!(
                "`{buffer}` is a parameter of the function, not a scratch buffer (only buffers allocated in the function have a scope)"
            )));
        }
        return Err(Condition::NotFound {
            what: "buffer",
            name: buffer.to_string(),
        });
    };
    if decl.scope == to {
        return Err(bad(format!("`{buffer}` is in {scope} scope already")));
    }
    // The loop kinds enclosing each allocation, and those between it and each access.
    let mut allocs: Vec<Vec<ForKind>> = Vec::new();
    let mut inner: Vec<ForKind> = Vec::new();
    fn walk(
        stmts: &[Stmt],
        buffer: &str,
        path: &mut Vec<ForKind>,
        alloc_depth: &mut Option<usize>,
        allocs: &mut Vec<Vec<ForKind>>,
        inner: &mut Vec<ForKind>,
    ) {
        let saved = *alloc_depth;
        for s in stmts {
            if let Stmt::Alloc { buffer: b, .. } = s {
                if b == buffer {
                    allocs.push(path.clone());
                    *alloc_depth = Some(path.len());
                }
            }
            let touches = count(std::slice::from_ref(s), buffer) > 0;
            if touches && s.bodies().is_empty() {
                if let Some(d) = alloc_depth {
                    inner.extend(path[*d..].iter().copied());
                }
            }
            let is_for = if let Stmt::For { kind, .. } = s {
                path.push(*kind);
                true
            } else {
                false
            };
            if touches || s.bodies().iter().any(|b| count(b, buffer) > 0) {
                for b in s.bodies() {
                    walk(b, buffer, path, alloc_depth, allocs, inner);
                }
            }
            if is_for {
                path.pop();
            }
        }
        *alloc_depth = saved;
    }
    walk(
        &f.body,
        buffer,
        &mut Vec::new(),
        &mut None,
        &mut allocs,
        &mut inner,
    );
    let gpu = f.body.iter().any(Stmt::has_bound_loop);
    match to {
        MemScope::Shared => {
            if !gpu {
                return Err(bad(format!(
                    "shared scope needs a GPU kernel, and no loop of `{}` is bound to GPU threads",
                    f.name
                )));
            }
            for path in &allocs {
                if path.iter().any(is_thread) || !path.iter().any(is_block) {
                    return Err(bad(format!(
                        "`{buffer}` is allocated outside a loop bound to blockIdx or inside one bound to threadIdx: its accesses do not all happen inside one block's threads"
                    )));
                }
            }
        }
        MemScope::Local => {
            if inner
                .iter()
                .any(|k| is_thread(k) || is_block(k) || *k == ForKind::Parallel)
            {
                return Err(bad(format!(
                    "`{buffer}` is accessed inside a bound or parallel loop nested in its allocation: other threads would not see a local buffer"
                )));
            }
        }
        MemScope::Global => {
            if gpu {
                return Err(bad(
                    "a GPU kernel does not allocate global memory: keep the buffer in shared or local scope".into(),
                ));
            }
        }
    }
    fn set(stmts: Vec<Stmt>, buffer: &str, to: MemScope) -> Vec<Stmt> {
        stmts
            .into_iter()
            .map(|s| match s {
                Stmt::Alloc {
                    buffer: b,
                    dtype,
                    extent,
                    ..
                } if b == buffer => Stmt::Alloc {
                    buffer: b,
                    dtype,
                    extent,
                    scope: to,
                },
                other => other.map_bodies(&mut |l| set(l, buffer, to)),
            })
            .collect()
    }
    f.body = set(f.body, buffer, to);
    for d in &mut f.scratch {
        if d.name == buffer {
            d.scope = to;
        }
    }
    Ok(f)
}
