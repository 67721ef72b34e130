//! Pass `hoist_invariant_lets`: moves a `let` out of a loop when its value does not depend on
//! the loop (loop-invariant code motion for bindings), so that coordinate searches and segment
//! lookups run once per outer iteration instead of once per inner one.
//!
//! Before:
//! ```text
//! for j in 0..n { for k in 0..feat { block { let _p0 = search(J.indices[..], j); C[..] = .. } } }
//! ```
//! After:
//! ```text
//! for j in 0..n { let _p0 = search(J.indices[..], j); for k in 0..feat { block { C[..] = .. } } }
//! ```
//! Only `let`s at the top of a loop body, or at the top of a block directly in it, move; values
//! are pure, and every load they make stays inside the loops whose variables index it.

use crate::ir::{Expr, Func, Stmt};
use std::collections::BTreeSet;

/// Hoists loop-invariant `let`s of `f` as far out as they go.
pub fn hoist_invariant_lets(mut f: Func) -> Func {
    // Only names bound once in the whole function move: moving a binding never shadows another.
    let mut counts = std::collections::BTreeMap::new();
    count_bindings(&f.body, &mut counts);
    let unique: BTreeSet<String> = counts
        .into_iter()
        .filter(|(_, n)| *n == 1)
        .map(|(k, _)| k)
        .collect();
    let body = std::mem::take(&mut f.body);
    f.body = stmts(body, &unique);
    f
}

/// Counts how often each variable is bound (loops, lets, declarations) in `stmts`.
pub(crate) fn count_bindings(stmts: &[Stmt], out: &mut std::collections::BTreeMap<String, usize>) {
    for s in stmts {
        match s {
            Stmt::For { var, body, .. } => {
                *out.entry(var.clone()).or_default() += 1;
                count_bindings(body, out);
            }
            Stmt::Let { var, .. } | Stmt::Decl { var, .. } => {
                *out.entry(var.clone()).or_default() += 1
            }
            Stmt::While { body, .. } => count_bindings(body, out),
            Stmt::Assign { .. } => {}
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                count_bindings(then_body, out);
                count_bindings(else_body, out);
            }
            Stmt::Block { init, body, .. } => {
                count_bindings(init, out);
                count_bindings(body, out);
            }
            Stmt::Attr { body, .. } => count_bindings(body, out),
            Stmt::Store { .. } | Stmt::Alloc { .. } | Stmt::Barrier | Stmt::Atomic { .. } => {}
        }
    }
}

fn mentions_any(e: &Expr, vars: &BTreeSet<String>) -> bool {
    e.reads_var(&|v| vars.contains(v))
}

/// Every variable a statement list binds, at any depth.
fn bound(stmts: &[Stmt], out: &mut BTreeSet<String>) {
    for s in stmts {
        match s {
            Stmt::For { var, body, .. } => {
                out.insert(var.clone());
                bound(body, out);
            }
            // A variable assigned in the list varies too: a `Let` reading it stays put.
            Stmt::Let { var, .. } | Stmt::Decl { var, .. } | Stmt::Assign { var, .. } => {
                out.insert(var.clone());
            }
            Stmt::While { body, .. } => bound(body, out),
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                bound(then_body, out);
                bound(else_body, out);
            }
            Stmt::Block { init, body, .. } => {
                bound(init, out);
                bound(body, out);
            }
            Stmt::Attr { body, .. } => bound(body, out),
            Stmt::Store { .. } | Stmt::Alloc { .. } | Stmt::Barrier | Stmt::Atomic { .. } => {}
        }
    }
}

fn stmts(v: Vec<Stmt>, unique: &BTreeSet<String>) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in v {
        match s {
            Stmt::For {
                var,
                start,
                end,
                kind,
                body,
            } => {
                let body = stmts(body, unique);
                let (hoisted, body) = hoist(&var, body, unique);
                out.extend(hoisted);
                out.push(Stmt::For {
                    var,
                    start,
                    end,
                    kind,
                    body,
                });
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => out.push(Stmt::If {
                cond,
                then_body: stmts(then_body, unique),
                else_body: stmts(else_body, unique),
            }),
            Stmt::Block {
                name,
                iters,
                init,
                body,
            } => out.push(Stmt::Block {
                name,
                iters,
                init: stmts(init, unique),
                body: stmts(body, unique),
            }),
            Stmt::Attr { key, value, body } => out.push(Stmt::Attr {
                key,
                value,
                body: stmts(body, unique),
            }),
            other => out.push(other),
        }
    }
    out
}

/// Splits the `let`s that can leave loop `var` off its body.
fn hoist(var: &str, body: Vec<Stmt>, unique: &BTreeSet<String>) -> (Vec<Stmt>, Vec<Stmt>) {
    // Variables that vary inside the loop: its own, and every one bound in the body, except
    // the lets being hoisted (which are invariant by construction).
    let mut local = BTreeSet::from([var.to_string()]);
    bound(&body, &mut local);
    let mut hoisted = Vec::new();
    let take =
        |stmts: Vec<Stmt>, hoisted: &mut Vec<Stmt>, local: &mut BTreeSet<String>| -> Vec<Stmt> {
            let mut kept = Vec::new();
            let mut prefix = true;
            for s in stmts {
                match s {
                    Stmt::Let { var: v, value }
                        if prefix
                            && unique.contains(&v)
                            && !mentions_any(&value, local)
                            && !value.has_shuffle() =>
                    {
                        local.remove(&v);
                        hoisted.push(Stmt::Let { var: v, value });
                    }
                    other => {
                        prefix = false;
                        kept.push(other);
                    }
                }
            }
            kept
        };
    let body = take(body, &mut hoisted, &mut local);
    let body = body
        .into_iter()
        .map(|s| match s {
            Stmt::Block {
                name,
                iters,
                init,
                body,
            } if init.is_empty() => {
                let body = take(body, &mut hoisted, &mut local);
                Stmt::Block {
                    name,
                    iters,
                    init,
                    body,
                }
            }
            other => other,
        })
        .collect();
    (hoisted, body)
}
