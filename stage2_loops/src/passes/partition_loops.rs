//! Loop partitioning (Halide's and TVM's): the guard that `split` puts around a tail which does
//! not divide evenly is taken out of the full chunks.
//!
//! ```text
//! for o in 0..N {                          for o in 0..min((e - s) / F, N) {
//!   for u in 0..F {                          for u in 0..F { let v = s + (o * F + u); body }
//!     let v = s + (o * F + u)              }
//!     if v < e { body }              ==>   for o in max(min((e - s) / F, N), 0)..N {
//! }                                          for u in 0..F { let v = ...; if v < e { body } }
//!                                          }
//! ```
//!
//! In the full chunks every `v` is below `e`, so the guard always holds there; the
//! iterations run in the same order as before. `s` and `e` must not change inside the loop:
//! they may not read a variable bound in it or a buffer written in it. The outer loop must be
//! serial and the inner one serial or unrolled (an unrolled chunk then has no branch left);
//! vector, parallel and GPU loops keep their guards (masks, partitions and thread bounds).

use crate::ir::{bound_vars, Expr, ForKind, Func, Stmt};
use lacuna_stage1::BinOp;
use std::collections::BTreeSet;

/// Partitions every matching loop of `f` (see the module documentation).
pub fn partition_loops(mut f: Func) -> Func {
    f.body = stmts(std::mem::take(&mut f.body));
    f
}

fn stmts(list: Vec<Stmt>) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(list.len());
    for s in list {
        let s = s.map_bodies(&mut stmts);
        match split_tail(&s) {
            Some(parts) => out.extend(partition(s, parts)),
            None => out.push(s),
        }
    }
    out
}

/// What a guarded split looks like: the chunk width, the guarded variable's start and end.
struct Parts {
    width: i64,
    end: Expr,
    start: Expr,
}

fn split_tail(s: &Stmt) -> Option<Parts> {
    let Stmt::For {
        var: outer,
        start: Expr::Int(0, _),
        kind: ForKind::Serial,
        body,
        ..
    } = s
    else {
        return None;
    };
    let [Stmt::For {
        var: inner,
        start: Expr::Int(0, _),
        end: Expr::Int(width, _),
        kind: ForKind::Serial | ForKind::Unrolled,
        body: chunk,
    }] = body.as_slice()
    else {
        return None;
    };
    let [Stmt::Let { var, value }, Stmt::If {
        cond: Expr::Binary(BinOp::Lt, guarded, end),
        then_body,
        else_body,
    }] = chunk.as_slice()
    else {
        return None;
    };
    if *width <= 0 || !else_body.is_empty() || !matches!(&**guarded, Expr::Var(v) if v == var) {
        return None;
    }
    // v = s + (o * F + u)
    let Expr::Binary(BinOp::Add, start, offset) = value else {
        return None;
    };
    let Expr::Binary(BinOp::Add, scaled, u) = &**offset else {
        return None;
    };
    let Expr::Binary(BinOp::Mul, o, f) = &**scaled else {
        return None;
    };
    let is = |e: &Expr, name: &str| matches!(e, Expr::Var(v) if v == name);
    if !is(o, outer) || !is(u, inner) || !matches!(**f, Expr::Int(w, _) if w == *width) {
        return None;
    }
    // The bounds are invariant: no variable of the loop, no buffer it writes.
    let mut bound = BTreeSet::from([outer.clone(), inner.clone(), var.clone()]);
    bound_vars(then_body, &mut bound);
    let mut written = BTreeSet::new();
    writes(then_body, &mut written);
    let invariant = |e: &Expr| !e.reads_var(&|v| bound.contains(v)) && !loads_any(e, &written);
    (invariant(start) && invariant(end)).then(|| Parts {
        width: *width,
        end: (**end).clone(),
        start: (**start).clone(),
    })
}

fn partition(s: Stmt, parts: Parts) -> Vec<Stmt> {
    let Stmt::For {
        var,
        start,
        end,
        kind,
        mut body,
    } = s
    else {
        unreachable!("split_tail matched a loop")
    };
    // The number of full chunks, written out in both loops' bounds rather than bound by a
    // `let`: code generation then still sees a trip count read from memory (a row's length,
    // often short, not worth unrolling at run time).
    let full = Expr::bin(
        BinOp::Min,
        Expr::bin(
            BinOp::Div,
            Expr::sub(parts.end, parts.start),
            Expr::i64(parts.width),
        ),
        end.clone(),
    );
    let tail = Stmt::For {
        var: var.clone(),
        start: Expr::bin(BinOp::Max, full.clone(), Expr::i64(0)),
        end: end.clone(),
        kind,
        body: body.clone(),
    };
    // The full chunks: the guard's body in place of the guard.
    if let Some(Stmt::For { body: chunk, .. }) = body.first_mut() {
        if let Some(Stmt::If { then_body, .. }) = chunk.pop() {
            chunk.extend(then_body);
        }
    }
    vec![
        Stmt::For {
            var,
            start,
            end: full,
            kind,
            body,
        },
        tail,
    ]
}

/// Adds the buffers `list` writes (stores, atomics, allocations) and the variables it assigns.
pub(crate) fn writes(list: &[Stmt], out: &mut BTreeSet<String>) {
    for s in list {
        match s {
            Stmt::Store { buffer, .. }
            | Stmt::Atomic { buffer, .. }
            | Stmt::Alloc { buffer, .. } => {
                out.insert(buffer.clone());
            }
            Stmt::Assign { var, .. } => {
                out.insert(var.clone());
            }
            _ => {}
        }
        for b in s.bodies() {
            writes(b, out);
        }
    }
}

/// True when `e` loads one of `buffers` or reads one of them as a variable (an assigned one).
pub(crate) fn loads_any(e: &Expr, buffers: &BTreeSet<String>) -> bool {
    match e {
        Expr::Load { buffer, .. } | Expr::Search { buffer, .. } | Expr::Segment { buffer, .. }
            if buffers.contains(buffer) =>
        {
            true
        }
        Expr::Var(v) if buffers.contains(v) => true,
        _ => e.children().into_iter().any(|c| loads_any(c, buffers)),
    }
}
