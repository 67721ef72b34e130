//! Finding and rewriting loops of a stage-II function by name.
//!
//! Loops are numbered in pre-order; a name resolves to exactly one of them (`var`, or
//! `BLOCK:var` for the loop of `var` enclosing block `BLOCK`).

use crate::error::Condition;
use lacuna_stage2::{Expr, Stmt};

/// A loop found by [`find`]: its pre-order number and variable.
struct Found {
    index: usize,
    var: String,
    blocks: Vec<String>,
}

fn collect(stmts: &[Stmt], counter: &mut usize, out: &mut Vec<Found>) -> Vec<String> {
    let mut blocks = Vec::new();
    for s in stmts {
        match s {
            Stmt::For { var, body, .. } => {
                let index = *counter;
                *counter += 1;
                let inner = collect(body, counter, out);
                out.push(Found {
                    index,
                    var: var.clone(),
                    blocks: inner.clone(),
                });
                blocks.extend(inner);
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                blocks.extend(collect(then_body, counter, out));
                blocks.extend(collect(else_body, counter, out));
            }
            Stmt::Block {
                name, init, body, ..
            } => {
                blocks.push(name.clone());
                blocks.extend(collect(init, counter, out));
                blocks.extend(collect(body, counter, out));
            }
            Stmt::While { body, .. } | Stmt::Attr { body, .. } => {
                blocks.extend(collect(body, counter, out))
            }
            Stmt::Let { .. }
            | Stmt::Store { .. }
            | Stmt::Decl { .. }
            | Stmt::Assign { .. }
            | Stmt::Alloc { .. }
            | Stmt::Barrier
            | Stmt::Atomic { .. } => {}
        }
    }
    blocks
}

/// The pre-order number of the loop named `name`.
pub fn find(body: &[Stmt], name: &str) -> Result<usize, Condition> {
    let mut all = Vec::new();
    collect(body, &mut 0, &mut all);
    let (block, var) = match name.split_once(':') {
        Some((b, v)) => (Some(b), v),
        None => (None, name),
    };
    let hits: Vec<&Found> = all
        .iter()
        .filter(|f| f.var == var && block.is_none_or(|b| f.blocks.iter().any(|x| x == b)))
        .collect();
    match hits.as_slice() {
        [one] => Ok(one.index),
        [] => Err(Condition::NotFound {
            what: "loop",
            name: name.to_string(),
        }),
        many => Err(Condition::Ambiguous {
            name: name.to_string(),
            count: many.len(),
        }),
    }
}

/// The loop with pre-order number `index`.
pub fn get(body: &[Stmt], index: usize) -> Option<&Stmt> {
    fn go<'a>(stmts: &'a [Stmt], index: usize, counter: &mut usize) -> Option<&'a Stmt> {
        for s in stmts {
            match s {
                Stmt::For { body, .. } => {
                    if *counter == index {
                        return Some(s);
                    }
                    *counter += 1;
                    if let Some(x) = go(body, index, counter) {
                        return Some(x);
                    }
                }
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    if let Some(x) =
                        go(then_body, index, counter).or_else(|| go(else_body, index, counter))
                    {
                        return Some(x);
                    }
                }
                Stmt::Block { init, body, .. } => {
                    if let Some(x) = go(init, index, counter).or_else(|| go(body, index, counter)) {
                        return Some(x);
                    }
                }
                Stmt::While { body, .. } | Stmt::Attr { body, .. } => {
                    if let Some(x) = go(body, index, counter) {
                        return Some(x);
                    }
                }
                Stmt::Let { .. }
                | Stmt::Store { .. }
                | Stmt::Decl { .. }
                | Stmt::Assign { .. }
                | Stmt::Alloc { .. }
                | Stmt::Barrier
                | Stmt::Atomic { .. } => {}
            }
        }
        None
    }
    go(body, index, &mut 0)
}

/// Replaces the loop with pre-order number `index` by the statements `f` makes of it.
pub fn replace(
    body: Vec<Stmt>,
    index: usize,
    f: &mut dyn FnMut(Stmt) -> Result<Vec<Stmt>, Condition>,
) -> Result<Vec<Stmt>, Condition> {
    fn go(
        stmts: Vec<Stmt>,
        index: usize,
        counter: &mut usize,
        f: &mut dyn FnMut(Stmt) -> Result<Vec<Stmt>, Condition>,
    ) -> Result<Vec<Stmt>, Condition> {
        let mut out = Vec::with_capacity(stmts.len());
        for s in stmts {
            match s {
                Stmt::For {
                    var,
                    start,
                    end,
                    kind,
                    body,
                } => {
                    if *counter == index {
                        *counter += 1 + count_loops(&body);
                        out.extend(f(Stmt::For {
                            var,
                            start,
                            end,
                            kind,
                            body,
                        })?);
                    } else {
                        *counter += 1;
                        let body = go(body, index, counter, f)?;
                        out.push(Stmt::For {
                            var,
                            start,
                            end,
                            kind,
                            body,
                        });
                    }
                }
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    let then_body = go(then_body, index, counter, f)?;
                    let else_body = go(else_body, index, counter, f)?;
                    out.push(Stmt::If {
                        cond,
                        then_body,
                        else_body,
                    });
                }
                Stmt::Block {
                    name,
                    iters,
                    init,
                    body,
                } => {
                    let init = go(init, index, counter, f)?;
                    let body = go(body, index, counter, f)?;
                    out.push(Stmt::Block {
                        name,
                        iters,
                        init,
                        body,
                    });
                }
                Stmt::While { cond, body } => {
                    let body = go(body, index, counter, f)?;
                    out.push(Stmt::While { cond, body });
                }
                Stmt::Attr { key, value, body } => {
                    let body = go(body, index, counter, f)?;
                    out.push(Stmt::Attr { key, value, body });
                }
                other => out.push(other),
            }
        }
        Ok(out)
    }
    go(body, index, &mut 0, f)
}

/// Number of loops in a statement list, at any depth.
pub fn count_loops(stmts: &[Stmt]) -> usize {
    let mut n = 0;
    collect(stmts, &mut n, &mut Vec::new());
    n
}

/// True when `e` reads variable `var`.
pub fn mentions(e: &Expr, var: &str) -> bool {
    e.reads_var(&|v| v == var)
}

/// Every (buffer, indices, is_store) access in a statement list.
pub fn accesses(stmts: &[Stmt], out: &mut Vec<(String, Vec<Expr>, bool)>) {
    fn expr(e: &Expr, out: &mut Vec<(String, Vec<Expr>, bool)>) {
        if let Expr::Load { buffer, indices } = e {
            out.push((buffer.clone(), indices.clone(), false));
        }
        e.children().into_iter().for_each(|c| expr(c, out));
    }
    for s in stmts {
        match s {
            Stmt::For {
                start, end, body, ..
            } => {
                expr(start, out);
                expr(end, out);
                accesses(body, out);
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                expr(cond, out);
                accesses(then_body, out);
                accesses(else_body, out);
            }
            Stmt::Let { value, .. } | Stmt::Assign { value, .. } => expr(value, out),
            Stmt::Decl { init, .. } => expr(init, out),
            Stmt::While { cond, body } => {
                expr(cond, out);
                accesses(body, out);
            }
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                out.push((buffer.clone(), indices.clone(), true));
                indices.iter().for_each(|i| expr(i, out));
                expr(value, out);
            }
            Stmt::Block { init, body, .. } => {
                accesses(init, out);
                accesses(body, out);
            }
            // The element an atomic updates is not listed (atomics commute; see
            // `atomic_buffers`), only what it reads.
            Stmt::Atomic { indices, value, .. } => {
                indices.iter().for_each(|i| expr(i, out));
                expr(value, out);
            }
            Stmt::Alloc { extent, .. } => expr(extent, out),
            Stmt::Barrier => {}
            Stmt::Attr { value, body, .. } => {
                expr(value, out);
                accesses(body, out);
            }
        }
    }
}

/// The buffers that atomics in a statement list update.
pub fn atomic_buffers(stmts: &[Stmt], out: &mut Vec<String>) {
    for s in stmts {
        if let Stmt::Atomic { buffer, .. } = s {
            out.push(buffer.clone());
        }
        for b in s.bodies() {
            atomic_buffers(b, out);
        }
    }
}

/// The loops enclosing block `block`, outermost first, named so that [`find`] resolves each
/// name to that loop; `None` when there is no such block.
pub fn enclosing(body: &[Stmt], block: &str) -> Option<Vec<String>> {
    fn go(stmts: &[Stmt], block: &str, path: &mut Vec<String>) -> bool {
        for s in stmts {
            match s {
                Stmt::For { var, body, .. } => {
                    path.push(var.clone());
                    if go(body, block, path) {
                        return true;
                    }
                    path.pop();
                }
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    if go(then_body, block, path) || go(else_body, block, path) {
                        return true;
                    }
                }
                Stmt::Block {
                    name, init, body, ..
                } => {
                    if name == block {
                        return true;
                    }
                    if go(init, block, path) || go(body, block, path) {
                        return true;
                    }
                }
                Stmt::While { body, .. } | Stmt::Attr { body, .. } => {
                    if go(body, block, path) {
                        return true;
                    }
                }
                Stmt::Let { .. }
                | Stmt::Store { .. }
                | Stmt::Decl { .. }
                | Stmt::Assign { .. }
                | Stmt::Alloc { .. }
                | Stmt::Barrier
                | Stmt::Atomic { .. } => {}
            }
        }
        false
    }
    let mut path = Vec::new();
    if !go(body, block, &mut path) {
        return None;
    }
    Some(
        path.into_iter()
            .map(|v| {
                if find(body, &v).is_ok() {
                    v
                } else {
                    format!("{block}:{v}")
                }
            })
            .collect(),
    )
}

/// Every block name, in program order.
pub fn blocks(body: &[Stmt]) -> Vec<String> {
    let mut out = Vec::new();
    fn go(stmts: &[Stmt], out: &mut Vec<String>) {
        for s in stmts {
            match s {
                Stmt::For { body, .. } => go(body, out),
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    go(then_body, out);
                    go(else_body, out);
                }
                Stmt::Block {
                    name, init, body, ..
                } => {
                    out.push(name.clone());
                    go(init, out);
                    go(body, out);
                }
                Stmt::While { body, .. } | Stmt::Attr { body, .. } => go(body, out),
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
    go(body, &mut out);
    out
}

/// An edit of the statement list holding a loop, given the loop's position in it.
pub type ListEdit<'f> = &'f mut dyn FnMut(&mut Vec<Stmt>, usize) -> Result<(), Condition>;

/// Calls `f` with the statement list that holds the loop with pre-order number `index`, and
/// the loop's position in it; `false` when there is no such loop.
pub fn edit_list(body: &mut Vec<Stmt>, index: usize, f: ListEdit<'_>) -> Result<bool, Condition> {
    fn go(
        stmts: &mut Vec<Stmt>,
        index: usize,
        counter: &mut usize,
        f: ListEdit<'_>,
    ) -> Result<bool, Condition> {
        for i in 0..stmts.len() {
            if let Stmt::For { .. } = &stmts[i] {
                if *counter == index {
                    f(stmts, i)?;
                    return Ok(true);
                }
                *counter += 1;
            }
            let found = match &mut stmts[i] {
                Stmt::For { body, .. } | Stmt::While { body, .. } | Stmt::Attr { body, .. } => {
                    go(body, index, counter, f)?
                }
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => go(then_body, index, counter, f)? || go(else_body, index, counter, f)?,
                Stmt::Block { init, body, .. } => {
                    go(init, index, counter, f)? || go(body, index, counter, f)?
                }
                _ => false,
            };
            if found {
                return Ok(true);
            }
        }
        Ok(false)
    }
    go(body, index, &mut 0, f)
}

pub use lacuna_stage2::bound_vars;
