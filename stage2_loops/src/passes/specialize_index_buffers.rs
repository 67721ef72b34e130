//! Pass `specialize_index_buffers`: where a schedule asserted a closed form for an axis's
//! structure array (`specialize_buffer`, stored in `Axis::closed_forms`), loads of the array
//! become the closed form. Binding checks the data against the form, so the result is unchanged.
//!
//! - `indptr[i] = stride * i`: every load `AXIS.indptr[e]` becomes `stride * e`.
//! - `indices[p] = row * i + in_row * (p - indptr[i]) + constant`: a load `AXIS.indices[j]`
//!   inside a loop `for j in AXIS.indptr[x]..` becomes `row * x + in_row * (j - start) +
//!   constant`; loads whose segment is not known from an enclosing loop stay loads.
//!
//! Before: `for j in i64(J.indptr[i])..i64(J.indptr[i + 1]) { ... x[i64(J.indices[j])] }`
//! After (`stride: 3`, `row: 1, in_row: 1, constant: 0`):
//! `for j in 3 * i..3 * (i + 1) { ... x[1 * i + 1 * (j - 3 * i) + 0] }`

use crate::ir::{Expr, Func, Stmt};
use lacuna_stage1::{ClosedForm, Program};

/// Rewrites `e` top-down: where `f` gives a replacement it is taken, else the children are
/// rewritten.
fn map_expr(e: Expr, f: &dyn Fn(&Expr) -> Option<Expr>) -> Expr {
    match f(&e) {
        Some(new) => new,
        None => e.map_children(&mut |c| map_expr(c, f)),
    }
}

/// A rewrite of one expression, given the enclosing loops (var, start).
type Rewrite<'a> = &'a dyn Fn(&Expr, &[(String, Expr)]) -> Option<Expr>;

/// Statements with every expression rewritten by `f(expr, loops)`, where `loops` holds the
/// enclosing loops (var, start).
fn map_stmts(stmts: Vec<Stmt>, loops: &mut Vec<(String, Expr)>, f: Rewrite<'_>) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        let ex = |e: Expr, loops: &[(String, Expr)]| map_expr(e, &|x| f(x, loops));
        out.push(match s {
            // The loop's own start, not its rewrite, is what loads inside it are matched to.
            Stmt::For {
                var,
                start,
                end,
                kind,
                body,
            } => {
                let (start2, end2) = (ex(start.clone(), loops), ex(end, loops));
                loops.push((var.clone(), start));
                let body = map_stmts(body, loops, f);
                loops.pop();
                Stmt::For {
                    var,
                    start: start2,
                    end: end2,
                    kind,
                    body,
                }
            }
            other => other
                .map_exprs(&mut |e| ex(e, loops))
                .map_bodies(&mut |b| map_stmts(b, loops, f)),
        });
    }
    out
}

/// The index of a load of `buffer`, seen through a widening cast.
fn load_of<'a>(e: &'a Expr, buffer: &str) -> Option<&'a Expr> {
    match e {
        Expr::Cast(_, a) => load_of(a, buffer),
        Expr::Load { buffer: b, indices } if b == buffer && indices.len() == 1 => Some(&indices[0]),
        _ => None,
    }
}

fn int(v: i64) -> Expr {
    Expr::i64(v)
}

/// Replaces loads of structure arrays that have asserted closed forms.
pub fn specialize_index_buffers(p: &Program, mut f: Func) -> Func {
    for a in &p.axes {
        let indptr = format!("{}.indptr", a.name);
        let indices = format!("{}.indices", a.name);
        // Indices first: their rewrite reads the loops' starts, which are indptr loads.
        for form in &a.closed_forms {
            if let ClosedForm::Indices {
                row,
                in_row,
                constant,
            } = *form
            {
                let body = std::mem::take(&mut f.body);
                f.body = map_stmts(body, &mut Vec::new(), &|e, loops| {
                    let Expr::Var(j) = load_of(e, &indices)? else {
                        return None;
                    };
                    let (_, start) = loops.iter().rev().find(|(v, _)| v == j)?;
                    let x = load_of(start, &indptr)?;
                    Some(Expr::add(
                        Expr::add(
                            Expr::mul(int(row), x.clone()),
                            Expr::mul(int(in_row), Expr::sub(Expr::var(j), start.clone())),
                        ),
                        int(constant),
                    ))
                });
            }
        }
        for form in &a.closed_forms {
            if let ClosedForm::Indptr { stride } = *form {
                let body = std::mem::take(&mut f.body);
                f.body = map_stmts(body, &mut Vec::new(), &|e, _| {
                    let x = load_of(e, &indptr)?;
                    Some(Expr::mul(int(stride), x.clone()))
                });
            }
        }
    }
    f
}
