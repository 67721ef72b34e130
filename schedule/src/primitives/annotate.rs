//! `annotate(loop, key, value)` / `unannotate(loop, key)`: a loop wrapped in
//! `attr KEY = VALUE { loop }` (TVM's `AttrStmt`).
//!
//! - `atomic`: every store in the loop must be a sum `b[idx] = b[idx] + e` (with `e` not
//!   reading `b`; the old value may also be `select(c, b[idx], 0)` under an `if c`, as lowering
//!   writes a scatter through a row map); each becomes `atomic_add(b[idx], e)`. Atomics commute, so the loop may
//!   then be bound or parallelized even where iterations update one element.
//! - `pragma_unroll` (value ≥ 1): an unroll-count hint for the loop.
//! - `prefetch` (value ≥ 1): CPU code prefetches the loop's affine loads `value` iterations
//!   ahead (`llvm.prefetch`).
//! - `masked` (value ≥ 1): a vectorized loop (`vectorize` first) runs its last, partial
//!   vector step under a lane mask instead of a scalar remainder loop (LLVM's tail folding),
//!   with `value` vector registers of lanes per step (independent partial sums). A loop of a
//!   few iterations, such as a sparse row, then runs without a branch on its length: measured
//!   1.3–1.8× faster SpMV on rows of varying short lengths (AVX-512). Ignored on GPUs.
//! - `lanes` (a power of two from 2 to 64): a vectorized loop (`vectorize` first) runs that
//!   many lanes per vector register (LLVM's vectorization width), where the emitter would
//!   choose otherwise (a sparse row's lanes stay 256 bits wide on hosts preferring 512: `lanes`
//!   8 gives f64 rows the whole 512 bits). Ignored on GPUs.
//! - `scalar_gathers` (value ≥ 1): a vectorized loop's gathers (`x[idx[j]]` across lanes) are
//!   assembled from scalar loads instead of gather instructions, on hosts where that is faster
//!   with the gathered array in cache (AMD Zen 4/5, `lacuna_target::host_assembles_gathers`):
//!   SpMV 10–24% faster with `x` in L1 or L2, up to 1.6× slower with `x` in L3. The function
//!   holding the loop is marked; every unmasked gather of 8-byte elements in it is rewritten
//!   after LLVM's optimizations (`lacuna_target`'s `gather.rs`). Ignored on GPUs.
//! - `nontemporal` (value ≥ 1): CPU code stores the outputs the loop writes once, row by
//!   row, with streaming (non-temporal) vector stores that bypass the caches: every loop under
//!   it that stores consecutive elements of a buffer (see `lacuna_stage2::stream`), when the
//!   row starts a vector at run time. For outputs beyond the last-level cache that the kernel
//!   does not read back (SpMM's `C` stored from a `reverse_cache_write`). Ignored on GPUs.
//! - `launch` (value 0): the loop, a top-level statement of the function, starts a new GPU
//!   kernel launch (see `lacuna_stage2::gpu::split_launches`); the CPU runs it as its body.
//!
//! A loop carries each key at most once; `unannotate` removes it (and turns the atomics of
//! `atomic` back into plain sums).

use crate::error::Condition;
use crate::loops::{edit_list, find};
use lacuna_stage1::BinOp;
use lacuna_stage2::{AtomicOp, Expr, Stmt};

/// The keys `annotate` accepts.
pub const KEYS: [&str; 8] = [
    "atomic",
    "pragma_unroll",
    "prefetch",
    "masked",
    "lanes",
    "scalar_gathers",
    "nontemporal",
    "launch",
];

fn to_atomic(stmts: Vec<Stmt>) -> Result<Vec<Stmt>, String> {
    to_atomic_under(stmts, &mut Vec::new())
}

/// True when `l` is the old value `b[i]` of a sum: the load itself, or `select(c, b[i], 0)`
/// under a guard `if c` (what lowering writes for a scatter through a row map).
fn is_old_value(l: &Expr, buffer: &str, indices: &[Expr], guards: &[Expr]) -> bool {
    match l {
        Expr::Load {
            buffer: b,
            indices: i,
        } => b == buffer && i == indices,
        Expr::Select(c, a, z) => {
            matches!(&**z, Expr::Float(v, _) if *v == 0.0)
                && guards.contains(c)
                && is_old_value(a, buffer, indices, guards)
        }
        _ => false,
    }
}

/// `to_atomic` with the conditions of the enclosing `if`s.
fn to_atomic_under(stmts: Vec<Stmt>, guards: &mut Vec<Expr>) -> Result<Vec<Stmt>, String> {
    stmts
        .into_iter()
        .map(|s| {
            Ok(match s {
                Stmt::Store {
                    buffer,
                    indices,
                    value,
                } => match value {
                    Expr::Binary(BinOp::Add, l, e)
                        if is_old_value(&l, &buffer, &indices, guards) && !reads(&e, &buffer) =>
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
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    guards.push(cond.clone());
                    let then_body = to_atomic_under(then_body, guards);
                    guards.pop();
                    Stmt::If {
                        cond,
                        then_body: then_body?,
                        else_body: to_atomic_under(else_body, guards)?,
                    }
                }
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
    if key == "launch" && value != 0 {
        return Err(Condition::BadArgument {
            what: format!("`launch` takes the value 0, not {value}"),
        });
    }
    if key == "lanes" && !(value.count_ones() == 1 && (2..=64).contains(&value)) {
        return Err(Condition::BadArgument {
            what: format!("`lanes` takes a power of two from 2 to 64, not {value}"),
        });
    }
    if !["atomic", "launch"].contains(&key) && value < 1 {
        return Err(Condition::BadArgument {
            what: format!("`{key}` needs a value of at least 1, not {value}"),
        });
    }
    let index = find(&body, name)?;
    if key == "launch" && !top_level(&body, index) {
        return Err(Condition::BadArgument {
            what: format!(
                "loop `{name}` is not a top-level statement of the function: a kernel launch starts only at a top-level loop nest"
            ),
        });
    }
    if ["masked", "lanes", "scalar_gathers"].contains(&key)
        && !matches!(
            crate::loops::get(&body, index),
            Some(Stmt::For {
                kind: lacuna_stage2::ForKind::Vectorized,
                ..
            })
        )
    {
        return Err(Condition::BadArgument {
            what: format!(
                "loop `{name}` is not vectorized: `{key}` applies to a vectorized loop (apply `vectorize` first)"
            ),
        });
    }
    if key == "nontemporal" {
        let mut scratch = std::collections::BTreeSet::new();
        allocated(&body, &mut scratch);
        let under = crate::loops::get(&body, index).cloned();
        if !under.is_some_and(|s| {
            lacuna_stage2::stream::has_stream_loop(std::slice::from_ref(&s), &|b| {
                !scratch.contains(b)
            })
        }) {
            return Err(Condition::BadArgument {
                what: format!(
                    "no loop under `{name}` stores consecutive elements of a buffer: `nontemporal` streams loops of a constant range whose body is `let`s and one store at `... + VAR` (such as the write-back of a `reverse_cache_write`)"
                ),
            });
        }
    }
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

/// The scratch buffers `stmts` allocate.
fn allocated(stmts: &[Stmt], out: &mut std::collections::BTreeSet<String>) {
    for s in stmts {
        if let Stmt::Alloc { buffer, .. } = s {
            out.insert(buffer.clone());
        }
        s.bodies().into_iter().for_each(|b| allocated(b, out));
    }
}

/// Whether the loop with pre-order number `index` is a top-level statement (possibly under
/// annotations of it alone).
fn top_level(body: &[Stmt], index: usize) -> bool {
    let Some(target) = crate::loops::get(body, index) else {
        return false;
    };
    body.iter().any(|s| {
        let mut s = s;
        loop {
            if std::ptr::eq(s, target) {
                return true;
            }
            match s {
                Stmt::Attr { body, .. } if body.len() == 1 => s = &body[0],
                _ => return false,
            }
        }
    })
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
