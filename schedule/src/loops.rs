//! Finding and rewriting loops of a stage-II function by name.
//!
//! Loops are numbered in pre-order; a name resolves to exactly one of them (`var`, or
//! `BLOCK:var` for the loop of `var` enclosing block `BLOCK`).

use crate::error::Condition;
use lacuna_stage2::{Expr, Stmt};
use std::collections::BTreeMap;

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

/// Every load in `e`, as an access `(buffer, indices, false)`, outermost first.
pub(crate) fn loads(e: &Expr, out: &mut Vec<(String, Vec<Expr>, bool)>) {
    if let Expr::Load { buffer, indices } = e {
        out.push((buffer.clone(), indices.clone(), false));
    }
    e.children().into_iter().for_each(|c| loads(c, out));
}

/// Every (buffer, indices, is_store) access in a statement list.
pub fn accesses(stmts: &[Stmt], out: &mut Vec<(String, Vec<Expr>, bool)>) {
    for s in stmts {
        match s {
            Stmt::For {
                start, end, body, ..
            } => {
                loads(start, out);
                loads(end, out);
                accesses(body, out);
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                loads(cond, out);
                accesses(then_body, out);
                accesses(else_body, out);
            }
            Stmt::Let { value, .. } | Stmt::Assign { value, .. } => loads(value, out),
            Stmt::Decl { init, .. } => loads(init, out),
            Stmt::While { cond, body } => {
                loads(cond, out);
                accesses(body, out);
            }
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                out.push((buffer.clone(), indices.clone(), true));
                indices.iter().for_each(|i| loads(i, out));
                loads(value, out);
            }
            Stmt::Block { init, body, .. } => {
                accesses(init, out);
                accesses(body, out);
            }
            // The element an atomic updates is not listed (atomics commute; see
            // `atomic_buffers`), only what it reads.
            Stmt::Atomic { indices, value, .. } => {
                indices.iter().for_each(|i| loads(i, out));
                loads(value, out);
            }
            Stmt::Alloc { extent, .. } => loads(extent, out),
            Stmt::Barrier => {}
            Stmt::Attr { value, body, .. } => {
                loads(value, out);
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

/// An access of [`resolved`]: the buffer, its indices resolved, whether it stores (with the
/// stored value, resolved) and the conditions of the `if`s around it within the statements.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Resolved {
    pub buffer: String,
    pub indices: Vec<Expr>,
    pub stored: Option<Expr>,
    pub guards: Vec<Expr>,
}

/// Every access of `stmts` that [`accesses`] lists, in the same order, with its indices (and a
/// store's value and guards) resolved: a variable bound by a `let` replaced by its resolved
/// value, and the variable of a loop inside replaced by one name per range. So
/// `for l in 0..8 { let p = g * 8 + l; y[p] = 0 }` and `for l2 in 0..8 { y[g * 8 + l2] += c[l2] }`
/// list the same index: each reaches the same elements for every value of the variables
/// bound outside (`g`). Mutable variables stay as they are.
pub(crate) fn resolved(stmts: &[Stmt]) -> Vec<Resolved> {
    fn resolve(e: &Expr, env: &BTreeMap<String, Expr>) -> Expr {
        match e {
            Expr::Var(v) => env.get(v).cloned().unwrap_or_else(|| e.clone()),
            _ => e.clone().map_children(&mut |c| resolve(&c, env)),
        }
    }
    struct Walk {
        out: Vec<Resolved>,
        guards: Vec<Expr>,
    }
    impl Walk {
        fn expr(&mut self, e: &Expr, env: &BTreeMap<String, Expr>) {
            let mut found = Vec::new();
            loads(e, &mut found);
            for (buffer, idx, _) in found {
                self.out.push(Resolved {
                    buffer,
                    indices: idx.iter().map(|i| resolve(i, env)).collect(),
                    stored: None,
                    guards: self.guards.clone(),
                });
            }
        }
        fn walk(&mut self, stmts: &[Stmt], mut env: BTreeMap<String, Expr>) {
            for s in stmts {
                match s {
                    Stmt::For {
                        var,
                        start,
                        end,
                        body,
                        ..
                    } => {
                        self.expr(start, &env);
                        self.expr(end, &env);
                        let range = format!("{:?}..{:?}", resolve(start, &env), resolve(end, &env));
                        let mut inner = env.clone();
                        inner.insert(var.clone(), Expr::Var(format!("for {range}")));
                        self.walk(body, inner);
                    }
                    Stmt::If {
                        cond,
                        then_body,
                        else_body,
                    } => {
                        self.expr(cond, &env);
                        let c = resolve(cond, &env);
                        self.guards.push(c.clone());
                        self.walk(then_body, env.clone());
                        self.guards.pop();
                        self.guards
                            .push(Expr::Unary(lacuna_stage1::UnOp::Not, Box::new(c)));
                        self.walk(else_body, env.clone());
                        self.guards.pop();
                    }
                    Stmt::Let { var, value } => {
                        self.expr(value, &env);
                        let v = resolve(value, &env);
                        env.insert(var.clone(), v);
                    }
                    Stmt::Assign { var, value } => {
                        self.expr(value, &env);
                        env.remove(var);
                    }
                    Stmt::Decl { var, init, .. } => {
                        self.expr(init, &env);
                        env.remove(var);
                    }
                    Stmt::While { cond, body } => {
                        self.expr(cond, &env);
                        self.walk(body, env.clone());
                    }
                    Stmt::Store {
                        buffer,
                        indices,
                        value,
                    } => {
                        self.out.push(Resolved {
                            buffer: buffer.clone(),
                            indices: indices.iter().map(|i| resolve(i, &env)).collect(),
                            stored: Some(resolve(value, &env)),
                            guards: self.guards.clone(),
                        });
                        indices.iter().for_each(|i| self.expr(i, &env));
                        self.expr(value, &env);
                    }
                    Stmt::Block { init, body, .. } => {
                        self.walk(init, env.clone());
                        self.walk(body, env.clone());
                    }
                    Stmt::Atomic { indices, value, .. } => {
                        indices.iter().for_each(|i| self.expr(i, &env));
                        self.expr(value, &env);
                    }
                    Stmt::Alloc { extent, .. } => self.expr(extent, &env),
                    Stmt::Barrier => {}
                    Stmt::Attr { value, body, .. } => {
                        self.expr(value, &env);
                        self.walk(body, env.clone());
                    }
                }
            }
        }
    }
    let mut w = Walk {
        out: Vec::new(),
        guards: Vec::new(),
    };
    w.walk(stmts, BTreeMap::new());
    w.out
}
