//! Checks on a function before code generation, and which buffers its body accesses.
//!
//! Per-access flatness (one index per load and store, no coordinates, no block init) is
//! checked by the emitter as it meets each construct; here we check the declarations.

use crate::error::CodegenError;
use lacuna_ir::DType;
use lacuna_stage2::{Expr, Func, Stmt};
use std::collections::BTreeSet;

/// Checks the buffer declarations: flat layouts, unique names, no `bool` element type.
pub(crate) fn check_decls(f: &Func) -> Result<(), CodegenError> {
    let mut seen = BTreeSet::new();
    for b in &f.buffers {
        if !b.layout.is_empty() {
            return Err(CodegenError::NotFlatBuffer {
                buffer: b.name.clone(),
                layout: b.layout.clone(),
            });
        }
        if !seen.insert(b.name.as_str()) {
            return Err(CodegenError::DuplicateBuffer {
                buffer: b.name.clone(),
            });
        }
        if b.dtype == DType::Bool {
            return Err(CodegenError::BoolBuffer {
                buffer: b.name.clone(),
            });
        }
    }
    Ok(())
}

/// Names of the buffers that the body loads from, stores to or searches.
pub(crate) fn accessed_buffers(f: &Func) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    stmts(&f.body, &mut out);
    out
}

fn stmts(body: &[Stmt], out: &mut BTreeSet<String>) {
    for s in body {
        match s {
            Stmt::For {
                start, end, body, ..
            } => {
                expr(start, out);
                expr(end, out);
                stmts(body, out);
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                expr(cond, out);
                stmts(then_body, out);
                stmts(else_body, out);
            }
            Stmt::Let { value, .. } | Stmt::Assign { value, .. } => expr(value, out),
            Stmt::Decl { init, .. } => expr(init, out),
            Stmt::While { cond, body } => {
                expr(cond, out);
                stmts(body, out);
            }
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                out.insert(buffer.clone());
                indices.iter().for_each(|e| expr(e, out));
                expr(value, out);
            }
            Stmt::Block { init, body, .. } => {
                stmts(init, out);
                stmts(body, out);
            }
            Stmt::Atomic {
                buffer,
                indices,
                value,
                ..
            } => {
                out.insert(buffer.clone());
                indices.iter().for_each(|e| expr(e, out));
                expr(value, out);
            }
            Stmt::Alloc { extent, .. } => expr(extent, out),
            Stmt::Barrier => {}
            Stmt::Attr { value, body, .. } => {
                expr(value, out);
                stmts(body, out);
            }
        }
    }
}

fn expr(e: &Expr, out: &mut BTreeSet<String>) {
    match e {
        Expr::Int(..)
        | Expr::Float(..)
        | Expr::Bool(_)
        | Expr::Var(_)
        | Expr::Param(_)
        | Expr::Coord(_) => {}
        Expr::Load { buffer, indices } => {
            out.insert(buffer.clone());
            indices.iter().for_each(|i| expr(i, out));
        }
        Expr::Unary(_, a) | Expr::Cast(_, a) => expr(a, out),
        Expr::Binary(_, a, b) => {
            expr(a, out);
            expr(b, out);
        }
        Expr::Select(c, a, b) => {
            expr(c, out);
            expr(a, out);
            expr(b, out);
        }
        Expr::Search {
            buffer,
            lo,
            hi,
            value,
        }
        | Expr::Segment {
            buffer,
            lo,
            hi,
            value,
        } => {
            out.insert(buffer.clone());
            expr(lo, out);
            expr(hi, out);
            expr(value, out);
        }
        Expr::Shuffle { value, lane, .. } => {
            expr(value, out);
            expr(lane, out);
        }
    }
}

/// A symbol-safe rendering of a kernel name (`[A-Za-z0-9_]`, never empty).
pub(crate) fn symbol_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "kernel".to_string()
    } else {
        s
    }
}
