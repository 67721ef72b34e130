//! `annotate(loop, key, value)` / `unannotate(loop, key)`: a loop wrapped in
//! `attr KEY = VALUE { loop }` (TVM's `AttrStmt`).
//!
//! - `atomic`: every store in the loop must be a sum `b[idx] = b[idx] + e` (or
//!   `select(c, b[idx], 0) + e` under an enclosing `if c`, as lowering writes sums into a row
//!   found by a lookup) (with `e` not
//!   reading `b`); each becomes `atomic_add(b[idx], e)`. Atomics commute, so the loop may
//!   then be bound or parallelized even where iterations update one element.
//! - `pragma_unroll` (value ≥ 1): an unroll-count hint for the loop.
//! - `prefetch` (value ≥ 1): CPU code prefetches the loop's affine loads `value` iterations
//!   ahead (`llvm.prefetch`).
//!
//! A loop carries each key at most once; `unannotate` removes it (and turns the atomics of
//! `atomic` back into plain sums).

use crate::error::Condition;
use crate::loops::{edit_list, find};
use lacuna_stage1::BinOp;
use lacuna_stage2::{AtomicOp, Expr, Stmt};

/// The keys `annotate` accepts.
pub const KEYS: [&str; 3] = ["atomic", "pragma_unroll", "prefetch"];

fn to_atomic(stmts: Vec<Stmt>) -> Result<Vec<Stmt>, String> {
    to_atomic_under(stmts, &[])
}

/// `b[i]`, or `select(c, b[i], 0)` with `c` one of the enclosing conditions `guards` (so that
/// the select is `b[i]`: the form lowering gives a sum into a row found by a lookup).
fn is_own_element(l: &Expr, buffer: &str, indices: &[Expr], guards: &[Expr]) -> bool {
    match l {
        Expr::Load {
            buffer: b,
            indices: i,
        } => b == buffer && i == indices,
        Expr::Select(c, a, z) => {
            guards.contains(c)
                && matches!(**z, Expr::Float(v, _) if v == 0.0)
                && is_own_element(a, buffer, indices, guards)
        }
        _ => false,
    }
}

fn to_atomic_under(stmts: Vec<Stmt>, guards: &[Expr]) -> Result<Vec<Stmt>, String> {
    stmts
        .into_iter()
        .map(|s| {
            Ok(match s {
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    let mut inner = guards.to_vec();
                    inner.push(cond.clone());
                    Stmt::If {
                        then_body: to_atomic_under(then_body, &inner)?,
                        else_body: to_atomic_under(else_body, guards)?,
                        cond,
                    }
                }
                Stmt::Store {
                    buffer,
                    indices,
                    value,
                } => match value {
                    Expr::Binary(BinOp::Add, l, e)
                        if is_own_element(&l, &buffer, &indices, guards)
                            && !reads(&e, &buffer) =>
                    {
                        Stmt::Atomic {
                            op: AtomicOp::Add,
                            buffer,
                            indices,
                            value: *e,
                        }
                    }
                    other => {
                        return Err(format!(
                            "the store `{buffer}[...] = {other}` is not a sum `b[i] = b[i] + e` that an atomic add can perform"
                        ))
                    }
                },
                other => other.try_map_bodies(&mut |b| to_atomic_under(b, guards))?,
            })
        })
        .collect()
}

fn from_atomic(stmts: Vec<Stmt>) -> Vec<Stmt> {
    stmts
        .into_iter()
        .map(|s| match s {
            Stmt::Atomic {
                op: AtomicOp::Add,
                buffer,
                indices,
                value,
            } => Stmt::Store {
                value: Expr::add(
                    Expr::Load {
                        buffer: buffer.clone(),
                        indices: indices.clone(),
                    },
                    value,
                ),
                buffer,
                indices,
            },
            other => other.map_bodies(&mut from_atomic),
        })
        .collect()
}

fn reads(e: &Expr, b: &str) -> bool {
    matches!(e, Expr::Load { buffer, .. } if buffer == b)
        || e.children().iter().any(|c| reads(c, b))
}

/// `annotate(loop, key, value)`.
pub fn annotate(
    mut body: Vec<Stmt>,
    name: &str,
    key: &str,
    value: i64,
) -> Result<Vec<Stmt>, Condition> {
    if !KEYS.contains(&key) {
        return Err(Condition::BadArgument {
            what: format!("unknown annotation `{key}` (use one of {KEYS:?})"),
        });
    }
    if key != "atomic" && value < 1 {
        return Err(Condition::BadArgument {
            what: format!("`{key}` needs a value of at least 1, not {value}"),
        });
    }
    let index = find(&body, name)?;
    let mut already = false;
    strip(body.clone(), index, key, &mut 0, &mut already);
    if already {
        return Err(Condition::BadArgument {
            what: format!("loop `{name}` is annotated `{key}` already"),
        });
    }
    edit_list(&mut body, index, &mut |list, i| {
        let mut s = list.remove(i);
        if key == "atomic" {
            if let Stmt::For { body, .. } = &mut s {
                *body = to_atomic(std::mem::take(body))
                    .map_err(|what| Condition::BadArgument { what })?;
            }
        }
        list.insert(
            i,
            Stmt::Attr {
                key: key.to_string(),
                value: Expr::i64(value),
                body: vec![s],
            },
        );
        Ok(())
    })?;
    Ok(body)
}

/// `unannotate(loop, key)`: removes the annotation `key` directly around the loop.
pub fn unannotate(body: Vec<Stmt>, name: &str, key: &str) -> Result<Vec<Stmt>, Condition> {
    let index = find(&body, name)?;
    let mut found = false;
    let out = strip(body, index, key, &mut 0, &mut found);
    if !found {
        return Err(Condition::BadArgument {
            what: format!("loop `{name}` has no annotation `{key}`"),
        });
    }
    Ok(out)
}

/// Removes `attr key { loop #index }` wrappers (counting loops in pre-order as `find` does).
fn strip(
    stmts: Vec<Stmt>,
    index: usize,
    key: &str,
    counter: &mut usize,
    found: &mut bool,
) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        match s {
            Stmt::Attr { key: k, body, .. }
                if k == key
                    && body.len() == 1
                    && matches!(body[0], Stmt::For { .. })
                    && *counter == index =>
            {
                *found = true;
                let inner = strip(body, index, key, counter, found);
                if k == "atomic" {
                    out.extend(from_atomic(inner));
                } else {
                    out.extend(inner);
                }
            }
            Stmt::For {
                var,
                start,
                end,
                kind,
                body,
            } => {
                *counter += 1;
                out.push(Stmt::For {
                    var,
                    start,
                    end,
                    kind,
                    body: strip(body, index, key, counter, found),
                });
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let then_body = strip(then_body, index, key, counter, found);
                let else_body = strip(else_body, index, key, counter, found);
                out.push(Stmt::If {
                    cond,
                    then_body,
                    else_body,
                });
            }
            Stmt::While { cond, body } => out.push(Stmt::While {
                cond,
                body: strip(body, index, key, counter, found),
            }),
            Stmt::Block {
                name,
                iters,
                init,
                body,
            } => {
                let init = strip(init, index, key, counter, found);
                let body = strip(body, index, key, counter, found);
                out.push(Stmt::Block {
                    name,
                    iters,
                    init,
                    body,
                });
            }
            Stmt::Attr {
                key: k,
                value,
                body,
            } => out.push(Stmt::Attr {
                key: k,
                value,
                body: strip(body, index, key, counter, found),
            }),
            other => out.push(other),
        }
    }
    out
}
