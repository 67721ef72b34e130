//! `rfactor` (TVM's): factor a reduction loop into a partial-result buffer, one element per
//! iteration of the loop, plus a final reduction loop over those partial results.
//!
//! ```text
//! init: b[idx] = v0                       alloc local b_rf: T[W]
//! for l in s..s+W {                       for l in s..s+W {
//!   ... b[idx] = b[idx] + e ...     ==>     b_rf[l - s] = 0
//! }                                         ... b_rf[l - s] = b_rf[l - s] + e ...
//!                                         }
//!                                         b[idx] = v0            (the init, moved here)
//!                                         for l.rf in s..s+W { b[idx] = b[idx] + b_rf[l.rf - s] }
//! ```
//!
//! The loop must have a constant extent `W` (split it by a constant first), and every store in
//! it must be a sum into one element `b[idx]` that does not vary in the loop. The init store
//! of `b[idx]` directly before the loop (a plain store or an init block), if any, is moved in
//! front of the final reduction, so that `bind(l.rf, threadIdx.x)` can make the final
//! reduction a warp reduction that owns the whole update of `b[idx]` (see `loop_kind::bind`).
//! The partial results live in `local` scope: under GPU semantics each thread has its own.
//!
//! When the loop is the only statement of enclosing serial loops that the reduced element
//! does not vary in (the outer part of a split reduction, `for l.0 { for l.1 { ... } }`), the
//! partial results live across those loops too (TVM's rfactor, whose partial results span
//! every reduction loop of the block): they are zeroed once before the outermost of them and
//! reduced once after it, so that `W` independent partial sums run through the whole
//! reduction — several accumulators of a CPU reduction once `l.1` is unrolled:
//!
//! ```text
//! for l0 in ... {                         alloc local b_rf: T[W]
//!   for l in s..s+W {               ==>   for l.init in s..s+W { b_rf[l.init - s] = 0 }
//!     ... b[idx] = b[idx] + e ...         for l0 in ... { for l in s..s+W {
//!   }                                       ... b_rf[l - s] = b_rf[l - s] + e ... } }
//! }                                       b[idx] = v0; for l.rf in s..s+W { b[idx] += b_rf[l.rf - s] }
//! ```
//!
//! On the way to such a loop the chain may cross loops of constant range that do move the
//! element (a BSR block's row loop `r` between its column loop `l` and the block row's blocks
//! `l0`): the partial results then hold one set of `W` per element, `b_rf[(r - sr) * W + l -
//! s]`, and the zeroing and the final reduction run under copies of the crossed loops
//! (`r.init`, `r.rf`), so that each of the block's rows keeps `W` partial sums across its
//! blocks — one vector register per row once `l` runs as vector lanes:
//!
//! ```text
//! for l0 in ... {                         alloc local b_rf: T[R * W]
//!   for r in sr..sr+R {             ==>   for r.init { for l.init { b_rf[..] = 0 } }
//!     for l in s..s+W {                   for l0 in ... { for r in ... { for l in ... {
//!       b[idx(r)] = b[idx(r)] + e           b_rf[(r - sr) * W + l - s] += e } } }
//! } } }                                   for r.rf { for l.rf { b[idx(r.rf)] += b_rf[..] } }
//! ```

use crate::error::Condition;
use crate::loops::{accesses, bound_vars, edit_list, find, get, mentions};
use lacuna_ir::DType;
use lacuna_stage1::BinOp;
use lacuna_stage2::{Expr, ForKind, Func, MemScope, ScratchDecl, Stmt};
use std::collections::BTreeSet;

/// The element every store of `stmts` sums into: `(b, idx, e)` for `b[idx] = b[idx] + e`
/// with `e` not reading `b`, all with one `(b, idx)`.
fn reduction_target(stmts: &[Stmt]) -> Option<(String, Vec<Expr>)> {
    let mut acc = Vec::new();
    accesses(stmts, &mut acc);
    let (b, idx) = acc
        .iter()
        .find(|a| a.2)
        .map(|a| (a.0.clone(), a.1.clone()))?;
    // Every access of `b` is at `idx`, and every store is a sum into it.
    if acc.iter().any(|a| a.0 == b && a.1 != idx) || acc.iter().any(|a| a.2 && a.0 != b) {
        return None;
    }
    fn stores_ok(stmts: &[Stmt], b: &str, idx: &[Expr]) -> bool {
        stmts.iter().all(|s| match s {
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                buffer == b
                    && indices == idx
                    && matches!(value, Expr::Binary(BinOp::Add, l, _)
                        if matches!(&**l, Expr::Load { buffer: lb, indices: li } if lb == b && li == idx))
            }
            Stmt::Atomic { .. } | Stmt::Barrier => false,
            other => other.bodies().iter().all(|v| stores_ok(v, b, idx)),
        })
    }
    stores_ok(stmts, &b, &idx).then_some((b, idx))
}

fn rewrite(stmts: Vec<Stmt>, b: &str, rf: &str, at: &Expr) -> Vec<Stmt> {
    fn expr(e: Expr, b: &str, rf: &str, at: &Expr) -> Expr {
        match e {
            Expr::Load { buffer, .. } if buffer == b => Expr::Load {
                buffer: rf.to_string(),
                indices: vec![at.clone()],
            },
            other => other.map_children(&mut |c| expr(c, b, rf, at)),
        }
    }
    stmts
        .into_iter()
        .map(|s| match s {
            Stmt::Store { buffer, value, .. } if buffer == b => Stmt::Store {
                buffer: rf.to_string(),
                indices: vec![at.clone()],
                value: expr(value, b, rf, at),
            },
            other => other.map_bodies(&mut |list| rewrite(list, b, rf, at)),
        })
        .collect()
}

/// True when `s` only initializes `b[idx]` (a store of a value not reading `b`, or an init
/// block holding just that).
pub(crate) fn is_init_of(s: &Stmt, b: &str, idx: &[Expr]) -> bool {
    match s {
        Stmt::Store {
            buffer, indices, ..
        } => {
            let mut acc = Vec::new();
            accesses(std::slice::from_ref(s), &mut acc);
            buffer == b && indices == idx && !acc.iter().any(|a| !a.2 && a.0 == b)
        }
        Stmt::Block { init, body, .. } => {
            init.is_empty() && body.len() == 1 && is_init_of(&body[0], b, idx)
        }
        _ => false,
    }
}

/// `rfactor(loop)` on a stage-II function (see the module documentation).
pub fn rfactor(mut f: Func, name: &str) -> Result<Func, Condition> {
    let index = find(&f.body, name)?;
    let Some(Stmt::For {
        var, start, end, ..
    }) = get(&f.body, index).cloned()
    else {
        unreachable!("find returns loops")
    };
    let bad = |what: String| Condition::BadArgument { what };
    let (s0, w) = match (&start, &end) {
        (Expr::Int(s, _), Expr::Int(e, _)) if e > s => (*s, e - s),
        _ => {
            return Err(bad(format!(
                "the loop's range {start}..{end} is not a non-empty constant range (split the loop by a constant factor first)"
            )))
        }
    };
    let body = match get(&f.body, index) {
        Some(Stmt::For { body, .. }) => body.clone(),
        _ => unreachable!("a loop"),
    };
    let (b, idx) = reduction_target(&body).ok_or_else(|| {
        bad("the loop's stores are not all sums `b[idx] = b[idx] + e` into one element".into())
    })?;
    let mut inner = BTreeSet::from([var.clone()]);
    bound_vars(&body, &mut inner);
    if idx.iter().any(|e| inner.iter().any(|v| mentions(e, v))) {
        return Err(bad(format!(
            "the reduced element `{b}[...]` varies inside the loop: it is not a reduction over `{var}`"
        )));
    }
    // The enclosing loops the partial results may live across: each holds only the next loop
    // of the chain and runs serially. A loop that moves the reduced element (a block's row
    // loop between its column loop and the blocks) is crossed only on the way to one that
    // does not, and only with a constant range: the partial results then get a dimension per
    // such loop, one set of `W` per element.
    let mut host = index;
    let mut dims: Vec<(String, i64, i64)> = Vec::new();
    let mut pending: Vec<(String, i64, i64)> = Vec::new();
    let mut probe = index;
    while let Some(Stmt::For {
        var: outer,
        start: o_start,
        end: o_end,
        kind: ForKind::Serial | ForKind::Unrolled,
        body: outer_body,
    }) = probe.checked_sub(1).and_then(|h| get(&f.body, h))
    {
        if outer_body.len() != 1 || !matches!(outer_body[0], Stmt::For { .. }) {
            break;
        }
        if idx.iter().any(|e| mentions(e, outer)) {
            match (o_start, o_end) {
                (Expr::Int(s, _), Expr::Int(e, _)) if e > s => {
                    pending.push((outer.clone(), *s, e - s))
                }
                _ => break,
            }
        } else {
            host = probe - 1;
            dims.append(&mut pending);
        }
        probe -= 1;
    }
    // Outermost first.
    dims.reverse();
    let dtype = f.elem_type(&b).unwrap_or(DType::F64);
    let zero = match dtype {
        DType::F32 | DType::F64 => Expr::Float(0.0, dtype),
        DType::Bool => return Err(bad(format!("`{b}` holds booleans"))),
        t => Expr::Int(0, t),
    };
    let mut rf = format!("{b}_rf");
    let mut n = 1;
    while f.buffer(&rf).is_some() || f.scratch_buffer(&rf).is_some() {
        rf = format!("{b}_rf{n}");
        n += 1;
    }
    let fin = format!("{var}.rf");
    let zero_loop = format!("{var}.init");
    // The zeroing loop exists only when the partial results live across enclosing loops; the
    // crossed loops that move the element are repeated around the zeroing and the final
    // reduction, under the same suffixes.
    let renamed = |suffix: &str| -> Vec<String> {
        dims.iter().map(|(d, ..)| format!("{d}.{suffix}")).collect()
    };
    let (fin_vars, init_vars) = (renamed("rf"), renamed("init"));
    let mut new_loops = vec![fin.clone()];
    if host != index {
        new_loops.push(zero_loop.clone());
    }
    new_loops.extend(fin_vars.iter().chain(&init_vars).cloned());
    for name in &new_loops {
        if find(&f.body, name).is_ok() {
            return Err(bad(format!("a loop named `{name}` exists already")));
        }
    }
    // The partial result of iteration `l` for the element at the crossed loops' variables
    // `vars` (in the order of `dims`): row-major over the crossed loops' ranges, then `l`.
    let at = |vars: &[String], l: &str| {
        let offset = |v: &str, s: i64| {
            if s == 0 {
                Expr::var(v)
            } else {
                Expr::sub(Expr::var(v), Expr::i64(s))
            }
        };
        let mut flat: Option<Expr> = None;
        for ((_, s, e), v) in dims.iter().zip(vars) {
            let here = offset(v, *s);
            flat = Some(match flat {
                None => here,
                Some(outer) => Expr::add(Expr::mul(outer, Expr::i64(*e)), here),
            });
        }
        let lane = offset(l, s0);
        match flat {
            None => lane,
            Some(outer) => Expr::add(Expr::mul(outer, Expr::i64(w)), lane),
        }
    };
    let own: Vec<String> = dims.iter().map(|(d, ..)| d.clone()).collect();
    // `inner` inside copies of the crossed loops over `vars`, outermost first.
    let nest = |vars: &[String], kind: ForKind, inner: Stmt| -> Stmt {
        dims.iter()
            .zip(vars)
            .rev()
            .fold(inner, |s, ((_, st, e), v)| Stmt::For {
                var: v.clone(),
                start: Expr::i64(*st),
                end: Expr::i64(st + e),
                kind,
                body: vec![s],
            })
    };
    let zero_store = |vars: &[String], l: &str| Stmt::Store {
        buffer: rf.clone(),
        indices: vec![at(vars, l)],
        value: zero.clone(),
    };
    // Zeroed in each iteration of the loop, or once before the loops they live across.
    let (mut new_body, mut zeroing) = if host == index {
        (vec![zero_store(&own, &var)], None)
    } else {
        let zeroing = Stmt::For {
            var: zero_loop.clone(),
            start: start.clone(),
            end: end.clone(),
            kind: ForKind::Unrolled,
            body: vec![zero_store(&init_vars, &zero_loop)],
        };
        (
            Vec::new(),
            Some(nest(&init_vars, ForKind::Unrolled, zeroing)),
        )
    };
    new_body.extend(rewrite(body, &b, &rf, &at(&own, &var)));
    // The element, at the final reduction's copies of the crossed loops.
    let fin_idx: Vec<Expr> = idx
        .iter()
        .map(|e| {
            own.iter()
                .zip(&fin_vars)
                .fold(e.clone(), |e, (d, r)| e.subst_var(d, &Expr::var(r)))
        })
        .collect();
    let load_b = Expr::Load {
        buffer: b.clone(),
        indices: fin_idx.clone(),
    };
    let final_loop = Stmt::For {
        var: fin.clone(),
        start: start.clone(),
        end: end.clone(),
        kind: ForKind::Serial,
        body: vec![Stmt::Store {
            buffer: b.clone(),
            indices: fin_idx,
            value: Expr::add(
                load_b,
                Expr::Load {
                    buffer: rf.clone(),
                    indices: vec![at(&fin_vars, &fin)],
                },
            ),
        }],
    };
    let final_loop = nest(&fin_vars, ForKind::Serial, final_loop);
    let extent = dims.iter().fold(w, |n, (_, _, e)| n.saturating_mul(*e));
    let alloc = Stmt::Alloc {
        buffer: rf.clone(),
        dtype,
        extent: Expr::i64(extent),
        scope: MemScope::Local,
    };
    let mut new_body = Some(new_body);
    let mut final_loop = Some(final_loop);
    let mut alloc = Some(alloc);
    edit_list(&mut f.body, index, &mut |list, i| {
        let Stmt::For { body, .. } = &mut list[i] else {
            unreachable!("a loop")
        };
        *body = new_body.take().unwrap_or_default();
        Ok(())
    })?;
    // The loops before `host` are unchanged: its pre-order number still finds it.
    edit_list(&mut f.body, host, &mut |list, i| {
        let mut pos = i;
        // With crossed loops the element is not one element before `host`: no init to move.
        let moves_init = dims.is_empty() && i > 0 && is_init_of(&list[i - 1], &b, &idx);
        let init = moves_init.then(|| list.remove(i - 1));
        if init.is_some() {
            pos -= 1;
        }
        let mut after = Vec::new();
        after.extend(init);
        after.extend(final_loop.take());
        list.splice(pos + 1..pos + 1, after);
        list.splice(pos..pos, alloc.take().into_iter().chain(zeroing.take()));
        Ok(())
    })?;
    f.scratch.push(ScratchDecl {
        name: rf,
        dtype,
        scope: MemScope::Local,
    });
    Ok(f)
}
