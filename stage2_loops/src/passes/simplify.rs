//! Pass `simplify`: folds constants and removes identities in integer index arithmetic.
//!
//! Rules (integers only, so no floating-point result changes): `c1 op c2` folds; `x + 0`,
//! `0 + x`, `x - 0`, `x * 1`, `1 * x` become `x`; `x * 0` becomes 0; `(x + c1) + c2` becomes
//! `x + (c1 + c2)`; a cast to the type an integer literal already has is dropped; `select`
//! and `if` on a literal condition keep the taken side; `true && x` and `x && true` become `x`.
//!
//! Before: `C[(0 * m + i) * k + k1]`   After: `C[i * k + k1]`

use crate::ir::{Expr, Func, Stmt};
use lacuna_ir::DType;
use lacuna_stage1::BinOp;

/// Simplifies every expression of `f`.
pub fn simplify(mut f: Func) -> Func {
    let body = std::mem::take(&mut f.body);
    f.body = stmts(body);
    f
}

pub(crate) fn stmts(v: Vec<Stmt>) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in v {
        match s {
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => match expr(cond) {
                Expr::Bool(true) => out.extend(stmts(then_body)),
                Expr::Bool(false) => out.extend(stmts(else_body)),
                cond => out.push(Stmt::If {
                    cond,
                    then_body: stmts(then_body),
                    else_body: stmts(else_body),
                }),
            },
            Stmt::While { cond, body } => match expr(cond) {
                Expr::Bool(false) => {}
                cond => out.push(Stmt::While {
                    cond,
                    body: stmts(body),
                }),
            },
            other => out.push(other.map_exprs(&mut expr).map_bodies(&mut stmts)),
        }
    }
    out
}

/// Simplifies one expression.
pub fn expr(e: Expr) -> Expr {
    match e {
        Expr::Binary(op, a, b) => binary(op, expr(*a), expr(*b)),
        Expr::Unary(op, a) => match (op, expr(*a)) {
            (lacuna_stage1::UnOp::Not, Expr::Bool(x)) => Expr::Bool(!x),
            (op, a) => Expr::Unary(op, Box::new(a)),
        },
        Expr::Select(c, a, b) => match expr(*c) {
            Expr::Bool(true) => expr(*a),
            Expr::Bool(false) => expr(*b),
            c => Expr::Select(Box::new(c), Box::new(expr(*a)), Box::new(expr(*b))),
        },
        Expr::Cast(t, a) => match expr(*a) {
            Expr::Int(v, DType::I64) if t == DType::I64 => Expr::Int(v, t),
            Expr::Int(v, from) if from == t => Expr::Int(v, t),
            Expr::Cast(t2, inner) if t2 == t => Expr::Cast(t, inner),
            a => Expr::Cast(t, Box::new(a)),
        },
        Expr::Load { buffer, indices } => Expr::Load {
            buffer,
            indices: indices.into_iter().map(expr).collect(),
        },
        Expr::Search {
            buffer,
            lo,
            hi,
            value,
        } => Expr::Search {
            buffer,
            lo: Box::new(expr(*lo)),
            hi: Box::new(expr(*hi)),
            value: Box::new(expr(*value)),
        },
        Expr::Segment {
            buffer,
            lo,
            hi,
            value,
        } => Expr::Segment {
            buffer,
            lo: Box::new(expr(*lo)),
            hi: Box::new(expr(*hi)),
            value: Box::new(expr(*value)),
        },
        Expr::Shuffle {
            kind,
            value,
            lane,
            width,
        } => Expr::Shuffle {
            kind,
            value: Box::new(expr(*value)),
            lane: Box::new(expr(*lane)),
            width,
        },
        Expr::Int(..)
        | Expr::Float(..)
        | Expr::Bool(_)
        | Expr::Var(_)
        | Expr::Param(_)
        | Expr::Coord(_) => e,
    }
}

fn binary(op: BinOp, a: Expr, b: Expr) -> Expr {
    use Expr::Int;
    match (op, &a, &b) {
        (_, Int(x, DType::I64), Int(y, DType::I64)) => match op {
            BinOp::Add => return Int(x.wrapping_add(*y), DType::I64),
            BinOp::Sub => return Int(x.wrapping_sub(*y), DType::I64),
            BinOp::Mul => return Int(x.wrapping_mul(*y), DType::I64),
            // Truncating, zero for a zero divisor: the interpreters' semantics.
            BinOp::Div => return Int(if *y == 0 { 0 } else { x.wrapping_div(*y) }, DType::I64),
            BinOp::Lt => return Expr::Bool(x < y),
            BinOp::Le => return Expr::Bool(x <= y),
            BinOp::Gt => return Expr::Bool(x > y),
            BinOp::Ge => return Expr::Bool(x >= y),
            BinOp::Eq => return Expr::Bool(x == y),
            BinOp::Ne => return Expr::Bool(x != y),
            _ => {}
        },
        (BinOp::And, Expr::Bool(x), Expr::Bool(y)) => return Expr::Bool(*x && *y),
        (BinOp::Or, Expr::Bool(x), Expr::Bool(y)) => return Expr::Bool(*x || *y),
        (BinOp::And, Expr::Bool(true), _) => return b,
        (BinOp::And, _, Expr::Bool(true)) => return a,
        (BinOp::Add, _, Int(0, t)) | (BinOp::Sub, _, Int(0, t)) | (BinOp::Mul, _, Int(1, t))
            if t.is_int() =>
        {
            return a
        }
        (BinOp::Add, Int(0, t), _) | (BinOp::Mul, Int(1, t), _) if t.is_int() => return b,
        (BinOp::Mul, _, Int(0, t)) | (BinOp::Mul, Int(0, t), _) if t.is_int() => return Int(0, *t),
        (BinOp::Add, Expr::Binary(BinOp::Add, x, c1), Int(c2, DType::I64)) => {
            if let Int(c1, DType::I64) = **c1 {
                return binary(
                    BinOp::Add,
                    (**x).clone(),
                    Int(c1.wrapping_add(*c2), DType::I64),
                );
            }
        }
        _ => {}
    }
    Expr::Binary(op, Box::new(a), Box::new(b))
}
