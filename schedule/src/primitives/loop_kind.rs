//! Stage-II primitives that change how a loop runs: `parallel`, `vectorize`, `unroll`.

use crate::error::Condition;
use crate::loops::{accesses, count_loops, find, get, mentions, replace, resolved};
use lacuna_stage2::{Expr, ForKind, Stmt};
use std::collections::BTreeSet;

/// Variables that take a distinct value in each iteration of loop `v`: `v`, the `let`s defined
/// from them without division or search (which may map two iterations to one value), and the
/// loops whose ranges are defined from them (their segments are disjoint: validated positions
/// are monotone).
pub(crate) fn varying(v: &str, body: &[Stmt]) -> BTreeSet<String> {
    let mut set = BTreeSet::from([v.to_string()]);
    fn walk(stmts: &[Stmt], set: &mut BTreeSet<String>) {
        let reads = |e: &Expr, set: &BTreeSet<String>| set.iter().any(|x| mentions(e, x));
        for s in stmts {
            match s {
                Stmt::Let { var, value } if reads(value, set) && injective(value) => {
                    set.insert(var.clone());
                }
                // A translated position: `select(in_range, e, -1)`, -1 where the coordinate
                // lies outside its axis. Lowering only ever indexes by it under `v >= 0` (a
                // guarded store, a `select` around a load), so distinct iterations reach
                // distinct elements where `e` is injective.
                Stmt::Let {
                    var,
                    value: Expr::Select(_, e, missing),
                } if matches!(**missing, Expr::Int(-1, _)) && reads(e, set) && injective(e) => {
                    set.insert(var.clone());
                }
                Stmt::For {
                    var,
                    start,
                    end,
                    body,
                    ..
                } => {
                    if reads(start, set) || reads(end, set) {
                        set.insert(var.clone());
                    }
                    walk(body, set);
                }
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    walk(then_body, set);
                    walk(else_body, set);
                }
                Stmt::Block { init, body, .. } => {
                    walk(init, set);
                    walk(body, set);
                }
                Stmt::While { body, .. } | Stmt::Attr { body, .. } => walk(body, set),
                Stmt::Let { .. }
                | Stmt::Store { .. }
                | Stmt::Decl { .. }
                | Stmt::Assign { .. }
                | Stmt::Alloc { .. }
                | Stmt::Barrier
                | Stmt::Atomic { .. } => {}
            }
        }
    }
    // Iterate to a fixed point: a loop may be defined from a later `let` only after it is seen.
    loop {
        let before = set.len();
        walk(body, &mut set);
        if set.len() == before {
            return set;
        }
    }
}

/// Checks that the iterations of loop `name` are independent: every buffer it writes is
/// written and read at one index list, which varies with the loop.
fn independent(s: &Stmt, name: &str) -> Result<(), Condition> {
    independent_or_reduction(s, name, false)
}

/// True when every store in `stmts` is `b[idx] = b[idx] + e` with `e` not reading `b`.
fn sum_reductions_only(stmts: &[Stmt]) -> bool {
    let mut acc = Vec::new();
    accesses(stmts, &mut acc);
    fn stores(stmts: &[Stmt], ok: &mut bool) {
        for s in stmts {
            match s {
                Stmt::Store {
                    buffer,
                    indices,
                    value,
                } => {
                    let reads_other = |e: &Expr| {
                        let mut found = false;
                        fn walk(e: &Expr, b: &str, found: &mut bool) {
                            if let Expr::Load { buffer, .. } = e {
                                *found |= buffer == b;
                            }
                            e.children().into_iter().for_each(|c| walk(c, b, found));
                        }
                        walk(e, buffer, &mut found);
                        found
                    };
                    *ok &= matches!(value, Expr::Binary(lacuna_stage1::BinOp::Add, a, e)
                        if matches!(&**a, Expr::Load { buffer: b, indices: i } if b == buffer && i == indices)
                            && !reads_other(e));
                }
                Stmt::For { body, .. } | Stmt::While { body, .. } | Stmt::Attr { body, .. } => {
                    stores(body, ok)
                }
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    stores(then_body, ok);
                    stores(else_body, ok);
                }
                Stmt::Block { init, body, .. } => {
                    stores(init, ok);
                    stores(body, ok);
                }
                Stmt::Let { .. }
                | Stmt::Decl { .. }
                | Stmt::Assign { .. }
                | Stmt::Alloc { .. }
                | Stmt::Barrier
                | Stmt::Atomic { .. } => {}
            }
        }
    }
    let mut ok = true;
    stores(stmts, &mut ok);
    ok
}

/// [`independent`], or — when `reduction` — a loop whose carried dependences are all sums
/// into loop-invariant elements (which vector lanes may reassociate).
fn independent_or_reduction(s: &Stmt, name: &str, reduction: bool) -> Result<(), Condition> {
    let result = independent_strict(s, name);
    match (&result, s) {
        (Err(Condition::CarriedDependence { .. }), Stmt::For { body, .. })
            if reduction && assigned_outer(body).is_none() && sum_reductions_only(body) =>
        {
            Ok(())
        }
        _ => result,
    }
}

fn independent_strict(s: &Stmt, name: &str) -> Result<(), Condition> {
    let Stmt::For { var, body, .. } = s else {
        unreachable!("find returns loops")
    };
    if let Some(v) = assigned_outer(body) {
        return Err(Condition::CarriedDependence {
            r#loop: name.to_string(),
            buffer: format!("variable {v}"),
        });
    }
    let vary = varying(var, body);
    let mut acc = Vec::new();
    accesses(body, &mut acc);
    let resolved_all = resolved(body);
    // A buffer updated atomically may be updated at any element by every iteration, but not
    // also accessed plainly.
    let mut atomic = Vec::new();
    crate::loops::atomic_buffers(body, &mut atomic);
    if let Some(b) = atomic.iter().find(|b| acc.iter().any(|a| &a.0 == *b)) {
        return Err(Condition::CarriedDependence {
            r#loop: name.to_string(),
            buffer: b.clone(),
        });
    }
    // Scratch allocated inside the body is each iteration's own (its contents start
    // undefined at every `alloc`): rfactor's partial results of a row, say.
    let private = allocated(body);
    let written: BTreeSet<&String> = acc
        .iter()
        .filter(|a| a.2 && !private.contains(&a.0))
        .map(|a| &a.0)
        .collect();
    for buffer in written {
        let lists: Vec<&Vec<Expr>> = acc
            .iter()
            .filter(|a| &a.0 == buffer)
            .map(|a| &a.1)
            .collect();
        // Equal lists, or lists that reach the same elements once resolved (`resolved`: lets
        // inlined, the variables of loops inside named by their ranges).
        let same = lists.windows(2).all(|w| w[0] == w[1]) || {
            let resolved: Vec<&Vec<Expr>> = resolved_all
                .iter()
                .filter(|a| &a.buffer == buffer)
                .map(|a| &a.indices)
                .collect();
            resolved.len() == lists.len() && resolved.windows(2).all(|w| w[0] == w[1])
        };
        let varies = lists
            .first()
            .is_some_and(|l| l.iter().any(|e| vary.iter().any(|v| mentions(e, v))));
        if !same || !varies {
            return Err(Condition::CarriedDependence {
                r#loop: name.to_string(),
                buffer: buffer.clone(),
            });
        }
    }
    Ok(())
}

/// The scratch buffers that `stmts` allocate, at any depth.
fn allocated(stmts: &[Stmt]) -> BTreeSet<String> {
    fn walk(stmts: &[Stmt], out: &mut BTreeSet<String>) {
        for s in stmts {
            if let Stmt::Alloc { buffer, .. } = s {
                out.insert(buffer.clone());
            }
            for list in s.bodies() {
                walk(list, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(stmts, &mut out);
    out
}

fn set_kind(
    body: Vec<Stmt>,
    name: &str,
    kind: ForKind,
    innermost: bool,
    check: bool,
) -> Result<Vec<Stmt>, Condition> {
    let index = find(&body, name)?;
    let s = get(&body, index).expect("found");
    if check {
        independent(s, name)?;
    }
    if let Stmt::For {
        body: b,
        start,
        end,
        ..
    } = s
    {
        if innermost && count_loops(b) > 0 {
            return Err(Condition::NotInnermost {
                r#loop: name.to_string(),
            });
        }
        if kind == ForKind::Unrolled {
            let extent =
                lacuna_stage2::passes::simplify::expr(Expr::sub(end.clone(), start.clone()));
            if let Expr::Int(n, _) = extent {
                if n > MAX_UNROLL {
                    return Err(Condition::BadArgument {
                        what: format!(
                            "unroll of `{name}`: {n} iterations, at most {MAX_UNROLL} (split it first)"
                        ),
                    });
                }
            }
        }
    }
    replace(body, index, &mut |s| {
        let Stmt::For {
            var,
            start,
            end,
            body,
            ..
        } = s
        else {
            unreachable!("a loop")
        };
        Ok(vec![Stmt::For {
            var,
            start,
            end,
            kind,
            body,
        }])
    })
}

/// A mutable variable assigned in `body` but declared outside it (a loop-carried value).
fn assigned_outer(body: &[Stmt]) -> Option<String> {
    fn walk(stmts: &[Stmt], declared: &mut BTreeSet<String>) -> Option<String> {
        for s in stmts {
            let found = match s {
                Stmt::Decl { var, .. } => {
                    declared.insert(var.clone());
                    None
                }
                Stmt::Assign { var, .. } if !declared.contains(var) => Some(var.clone()),
                Stmt::For { body, .. } | Stmt::While { body, .. } => walk(body, declared),
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => walk(then_body, declared).or_else(|| walk(else_body, declared)),
                Stmt::Block { init, body, .. } => {
                    walk(init, declared).or_else(|| walk(body, declared))
                }
                _ => None,
            };
            if found.is_some() {
                return found;
            }
        }
        None
    }
    walk(body, &mut BTreeSet::new())
}

/// `parallel(loop)`: requires independent iterations.
pub fn parallel(body: Vec<Stmt>, name: &str) -> Result<Vec<Stmt>, Condition> {
    set_kind(body, name, ForKind::Parallel, false, true)
}

/// `vectorize(loop)`: requires an innermost loop whose iterations are independent, or whose
/// only carried dependences are sums into loop-invariant elements (a reduction, which the
/// vector lanes then reassociate: results may differ from the serial sum in rounding).
pub fn vectorize(body: Vec<Stmt>, name: &str) -> Result<Vec<Stmt>, Condition> {
    let index = find(&body, name)?;
    let s = get(&body, index).expect("found");
    independent_or_reduction(s, name, true)?;
    set_kind(body, name, ForKind::Vectorized, true, false)
}

/// `bind(loop, thread)`: requires independent iterations and a CUDA thread dimension name.
///
/// A reduction loop `for l in s..s+W { b[idx] = b[idx] + e }` (the final loop of `rfactor`)
/// with `W` a power of two up to 32 may be bound to `threadIdx.x`: it becomes a cross-thread
/// warp reduction, `attr warp_reduce = W { init; bind(threadIdx.x) for l ... }`, which the CPU
/// runs serially and the GPU lowering (`lacuna_stage2::gpu::lower_warp_reductions`) turns into
/// shuffles, lane 0 storing the result. An init store of `b[idx]` directly before the loop
/// moves into the annotation (lane 0 performs it).
pub fn bind(body: Vec<Stmt>, name: &str, thread: &str) -> Result<Vec<Stmt>, Condition> {
    let axis = lacuna_stage2::GpuAxis::from_name(thread).ok_or_else(|| Condition::BadArgument {
        what: format!("`{thread}` is not a thread dimension (blockIdx.x|y|z, threadIdx.x|y|z)"),
    })?;
    let index = find(&body, name)?;
    let s = get(&body, index).expect("found");
    match independent(s, name) {
        Ok(()) => set_kind(body, name, ForKind::Bound(axis), false, false),
        Err(e) => match warp_reduction(s) {
            Some((w, b, idx)) if axis == lacuna_stage2::GpuAxis::ThreadX => {
                let mut body = body;
                crate::loops::edit_list(&mut body, index, &mut |list, i| {
                    let Stmt::For { kind, .. } = &mut list[i] else {
                        unreachable!("a loop")
                    };
                    *kind = ForKind::Bound(axis);
                    let take_init =
                        i > 0 && crate::primitives::rfactor::is_init_of(&list[i - 1], &b, &idx);
                    let lo = if take_init { i - 1 } else { i };
                    let inner: Vec<Stmt> = list.drain(lo..=i).collect();
                    list.insert(
                        lo,
                        Stmt::Attr {
                            key: "warp_reduce".into(),
                            value: Expr::i64(w),
                            body: inner,
                        },
                    );
                    Ok(())
                })?;
                Ok(body)
            }
            _ => Err(e),
        },
    }
}

/// `(W, b, idx)` when `s` is `for l in s..s+W { b[idx] = b[idx] + e }` with `W` a power of two
/// up to 32 and `idx` not reading `l`.
fn warp_reduction(s: &Stmt) -> Option<(i64, String, Vec<Expr>)> {
    let Stmt::For {
        var,
        start: Expr::Int(s0, _),
        end: Expr::Int(e0, _),
        body,
        ..
    } = s
    else {
        return None;
    };
    let w = e0 - s0;
    if !(1..=32).contains(&w) || w & (w - 1) != 0 {
        return None;
    }
    let [Stmt::Store {
        buffer,
        indices,
        value: Expr::Binary(lacuna_stage1::BinOp::Add, l, e),
    }] = body.as_slice()
    else {
        return None;
    };
    let same = matches!(&**l, Expr::Load { buffer: b, indices: i } if b == buffer && i == indices);
    let mut acc = Vec::new();
    accesses(body, &mut acc);
    let reads_b_elsewhere = {
        let mut r = Vec::new();
        fn loads(e: &Expr, out: &mut Vec<String>) {
            if let Expr::Load { buffer, .. } = e {
                out.push(buffer.clone());
            }
            e.children().into_iter().for_each(|c| loads(c, out));
        }
        loads(e, &mut r);
        r.contains(buffer)
    };
    (same && !reads_b_elsewhere && !indices.iter().any(|i| mentions(i, var)))
        .then(|| (w, buffer.clone(), indices.clone()))
}

/// `unroll(loop)`: legal on any loop; one of constant extent has at most [`MAX_UNROLL`]
/// iterations (checked by `set_kind`, for every way a loop becomes unrolled).
pub fn unroll(body: Vec<Stmt>, name: &str) -> Result<Vec<Stmt>, Condition> {
    set_kind(body, name, ForKind::Unrolled, false, false)
}

/// The most iterations a loop of constant extent may be unrolled into: code generation grows
/// with the copies (100,000 took minutes).
pub const MAX_UNROLL: i64 = 1024;

/// True when `e` has no division, search or conditional: an affine-like combination, one-to-one
/// in each variable it reads when the others are fixed.
fn injective(e: &Expr) -> bool {
    match e {
        Expr::Int(..)
        | Expr::Float(..)
        | Expr::Bool(_)
        | Expr::Var(_)
        | Expr::Param(_)
        | Expr::Coord(_) => true,
        Expr::Binary(
            lacuna_stage1::BinOp::Add | lacuna_stage1::BinOp::Sub | lacuna_stage1::BinOp::Mul,
            a,
            b,
        ) => injective(a) && injective(b),
        Expr::Cast(_, a) => injective(a),
        Expr::Load { .. }
        | Expr::Unary(..)
        | Expr::Binary(..)
        | Expr::Select(..)
        | Expr::Search { .. }
        | Expr::Segment { .. }
        | Expr::Shuffle { .. } => false,
    }
}

/// Sets the kind of loop `name` without the independence check: for callers that proved
/// independence another way (`horizontal::check_parallel` on a fused dispatch loop).
pub fn mark(body: Vec<Stmt>, name: &str, kind: ForKind) -> Result<Vec<Stmt>, Condition> {
    set_kind(body, name, kind, false, false)
}
