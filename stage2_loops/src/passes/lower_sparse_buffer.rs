//! Pass `lower_sparse_buffer`: flattens every multi-axis buffer access to one index.
//!
//! A position on an axis with a parent is global (it already encodes the parent), so it is the
//! offset; a dense axis without a parent multiplies the offset so far by its extent.
//!
//! Before: `C[i, k]` with `C: f64[I, K]`, `A[i, j]` with `A: f64[I, J]` (J sparse).
//! After:  `C[i * k_ext + k]`, `A[j]`.
//! Postcondition: the function is flat (see `crate::ir`); `Block::init` must already be empty.

use crate::ir::{Expr, Func, Stmt};
use crate::passes::build_loop_nests::size_expr;
use crate::LowerError;

/// Flattens all buffers of `f`.
pub fn lower_sparse_buffer(mut f: Func) -> Result<Func, LowerError> {
    let body = std::mem::take(&mut f.body);
    f.body = body
        .into_iter()
        .map(|s| stmt(&f, s))
        .collect::<Result<_, _>>()?;
    for b in &mut f.buffers {
        b.layout.clear();
    }
    Ok(f)
}

fn stmts(f: &Func, v: Vec<Stmt>) -> Result<Vec<Stmt>, LowerError> {
    v.into_iter().map(|s| stmt(f, s)).collect()
}

fn stmt(f: &Func, s: Stmt) -> Result<Stmt, LowerError> {
    Ok(match s {
        Stmt::For {
            var,
            start,
            end,
            kind,
            body,
        } => Stmt::For {
            var,
            start: expr(f, start)?,
            end: expr(f, end)?,
            kind,
            body: stmts(f, body)?,
        },
        Stmt::If {
            cond,
            then_body,
            else_body,
        } => Stmt::If {
            cond: expr(f, cond)?,
            then_body: stmts(f, then_body)?,
            else_body: stmts(f, else_body)?,
        },
        Stmt::Let { var, value } => Stmt::Let {
            var,
            value: expr(f, value)?,
        },
        Stmt::Decl { var, dtype, init } => Stmt::Decl {
            var,
            dtype,
            init: expr(f, init)?,
        },
        Stmt::Assign { var, value } => Stmt::Assign {
            var,
            value: expr(f, value)?,
        },
        Stmt::While { cond, body } => Stmt::While {
            cond: expr(f, cond)?,
            body: stmts(f, body)?,
        },
        Stmt::Store {
            buffer,
            indices,
            value,
        } => {
            let index = flat_index(f, &buffer, indices)?;
            Stmt::Store {
                buffer,
                indices: vec![index],
                value: expr(f, value)?,
            }
        }
        Stmt::Alloc {
            buffer,
            dtype,
            extent,
            scope,
        } => Stmt::Alloc {
            buffer,
            dtype,
            extent: expr(f, extent)?,
            scope,
        },
        Stmt::Barrier => Stmt::Barrier,
        Stmt::Atomic {
            op,
            buffer,
            indices,
            value,
        } => {
            let index = flat_index(f, &buffer, indices)?;
            Stmt::Atomic {
                op,
                buffer,
                indices: vec![index],
                value: expr(f, value)?,
            }
        }
        Stmt::Attr { key, value, body } => Stmt::Attr {
            key,
            value: expr(f, value)?,
            body: stmts(f, body)?,
        },
        Stmt::Block {
            name,
            iters,
            init,
            body,
        } => {
            if !init.is_empty() {
                return Err(LowerError::Malformed {
                    what: format!(
                        "block `{name}` still has init statements; run place_init_blocks first"
                    ),
                });
            }
            Stmt::Block {
                name,
                iters,
                init,
                body: stmts(f, body)?,
            }
        }
    })
}

fn expr(f: &Func, e: Expr) -> Result<Expr, LowerError> {
    Ok(match e {
        Expr::Load { buffer, indices } => {
            let index = flat_index(f, &buffer, indices)?;
            Expr::Load {
                buffer,
                indices: vec![index],
            }
        }
        Expr::Coord(v) => return Err(LowerError::UnboundIterator { var: v }),
        Expr::Unary(op, a) => Expr::Unary(op, Box::new(expr(f, *a)?)),
        Expr::Binary(op, a, b) => Expr::Binary(op, Box::new(expr(f, *a)?), Box::new(expr(f, *b)?)),
        Expr::Select(c, a, b) => Expr::Select(
            Box::new(expr(f, *c)?),
            Box::new(expr(f, *a)?),
            Box::new(expr(f, *b)?),
        ),
        Expr::Cast(t, a) => Expr::Cast(t, Box::new(expr(f, *a)?)),
        Expr::Search {
            buffer,
            lo,
            hi,
            value,
        } => Expr::Search {
            buffer,
            lo: Box::new(expr(f, *lo)?),
            hi: Box::new(expr(f, *hi)?),
            value: Box::new(expr(f, *value)?),
        },
        Expr::Segment {
            buffer,
            lo,
            hi,
            value,
        } => Expr::Segment {
            buffer,
            lo: Box::new(expr(f, *lo)?),
            hi: Box::new(expr(f, *hi)?),
            value: Box::new(expr(f, *value)?),
        },
        Expr::Shuffle {
            kind,
            value,
            lane,
            width,
        } => Expr::Shuffle {
            kind,
            value: Box::new(expr(f, *value)?),
            lane: Box::new(expr(f, *lane)?),
            width,
        },
        Expr::Int(..) | Expr::Float(..) | Expr::Bool(_) | Expr::Var(_) | Expr::Param(_) => e,
    })
}

fn flat_index(f: &Func, buffer: &str, indices: Vec<Expr>) -> Result<Expr, LowerError> {
    // Scratch buffers are flat at every level.
    if f.scratch_buffer(buffer).is_some() && f.buffer(buffer).is_none() {
        return match <[Expr; 1]>::try_from(indices) {
            Ok([i]) => expr(f, i),
            Err(v) => Err(LowerError::Malformed {
                what: format!(
                    "scratch buffer `{buffer}` accessed with {} indices",
                    v.len()
                ),
            }),
        };
    }
    let decl = f.buffer(buffer).ok_or_else(|| LowerError::Malformed {
        what: format!("buffer `{buffer}`"),
    })?;
    if decl.layout.is_empty() {
        return match <[Expr; 1]>::try_from(indices) {
            Ok([i]) => expr(f, i),
            Err(v) => Err(LowerError::Malformed {
                what: format!("flat buffer `{buffer}` accessed with {} indices", v.len()),
            }),
        };
    }
    if decl.layout.len() != indices.len() {
        return Err(LowerError::Malformed {
            what: format!(
                "buffer `{buffer}` accessed with {} indices for {} axes",
                indices.len(),
                decl.layout.len()
            ),
        });
    }
    let mut off: Option<Expr> = None;
    for (ax, pos) in decl.layout.iter().zip(indices) {
        let pos = expr(f, pos)?;
        let a = f.axis(ax).ok_or_else(|| LowerError::Malformed {
            what: format!("axis `{ax}`"),
        })?;
        off = Some(match (a.kind.parent(), off) {
            (Some(_), _) | (None, None) => pos,
            (None, Some(o)) => Expr::add(Expr::mul(o, size_expr(a.kind.coord_extent())), pos),
        });
    }
    Ok(off.unwrap_or_else(|| Expr::i64(0)))
}
