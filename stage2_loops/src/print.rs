//! The text form of stage-II and flat functions (`lacuna lower --stage 2|flat`).

use crate::ir::{BufferKind, Expr, ForKind, Func, Stmt};
use lacuna_ir::DType;
use lacuna_stage1::{BinOp, IterKind, Role, UnOp};
use std::fmt::{self, Write};

fn prec(e: &Expr) -> u8 {
    match e {
        Expr::Binary(op, ..) => op.precedence(),
        Expr::Unary(UnOp::Neg | UnOp::Not, _) => 6,
        Expr::Int(v, _) if *v < 0 => 6,
        Expr::Float(v, _) if v.is_sign_negative() => 6,
        _ => 7,
    }
}

fn operand(f: &mut fmt::Formatter<'_>, e: &Expr, min: u8) -> fmt::Result {
    if prec(e) < min {
        write!(f, "({e})")
    } else {
        write!(f, "{e}")
    }
}

fn list(v: &[Expr]) -> String {
    v.iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Int(v, DType::I64) => write!(f, "{v}"),
            Expr::Int(v, t) => write!(f, "{v}{t}"),
            Expr::Float(v, DType::F64) => write!(f, "{v:?}"),
            Expr::Float(v, t) => write!(f, "{v:?}{t}"),
            Expr::Bool(v) => write!(f, "{v}"),
            Expr::Var(v) | Expr::Param(v) => f.write_str(v),
            Expr::Coord(v) => write!(f, "@{v}"),
            Expr::Load { buffer, indices } => write!(f, "{buffer}[{}]", list(indices)),
            Expr::Unary(op, a) => match op {
                UnOp::Neg => {
                    f.write_str("-")?;
                    operand(f, a, 7)
                }
                UnOp::Not => {
                    f.write_str("!")?;
                    operand(f, a, 7)
                }
                UnOp::Abs => write!(f, "abs({a})"),
                UnOp::Exp => write!(f, "exp({a})"),
                UnOp::Log => write!(f, "log({a})"),
                UnOp::Sqrt => write!(f, "sqrt({a})"),
            },
            Expr::Binary(op @ (BinOp::Min | BinOp::Max | BinOp::Pow), a, b) => {
                write!(f, "{}({a}, {b})", op.symbol())
            }
            Expr::Binary(op, a, b) => {
                let p = prec(self);
                operand(f, a, if p == 3 { 4 } else { p })?;
                write!(f, " {} ", op.symbol())?;
                operand(f, b, p + 1)
            }
            Expr::Select(c, a, b) => write!(f, "select({c}, {a}, {b})"),
            Expr::Cast(t, a) => write!(f, "{t}({a})"),
            Expr::Search {
                buffer,
                lo,
                hi,
                value,
            } => write!(f, "search({buffer}[{lo}..{hi}], {value})"),
            Expr::Segment {
                buffer,
                lo,
                hi,
                value,
            } => write!(f, "segment({buffer}[{lo}..{hi}], {value})"),
            Expr::Shuffle {
                kind,
                value,
                lane,
                width,
            } => write!(f, "{}({value}, {lane}, {width})", kind.name()),
        }
    }
}

fn write_stmts(out: &mut String, stmts: &[Stmt], depth: usize) {
    let pad = depth * 2;
    for s in stmts {
        match s {
            Stmt::For {
                var,
                start,
                end,
                kind,
                body,
            } => {
                let k = match kind {
                    ForKind::Serial => String::new(),
                    ForKind::Parallel => "parallel ".into(),
                    ForKind::Vectorized => "vectorized ".into(),
                    ForKind::Unrolled => "unrolled ".into(),
                    ForKind::Bound(a) => format!("bind({}) ", a.name()),
                };
                let _ = writeln!(out, "{:pad$}{k}for {var} in {start}..{end} {{", "");
                write_stmts(out, body, depth + 1);
                let _ = writeln!(out, "{:pad$}}}", "");
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let _ = writeln!(out, "{:pad$}if {cond} {{", "");
                write_stmts(out, then_body, depth + 1);
                if !else_body.is_empty() {
                    let _ = writeln!(out, "{:pad$}}} else {{", "");
                    write_stmts(out, else_body, depth + 1);
                }
                let _ = writeln!(out, "{:pad$}}}", "");
            }
            Stmt::Let { var, value } => {
                let _ = writeln!(out, "{:pad$}let {var} = {value}", "");
            }
            Stmt::Decl { var, dtype, init } => {
                let _ = writeln!(out, "{:pad$}var {var}: {} = {init}", "", dtype.name());
            }
            Stmt::Assign { var, value } => {
                let _ = writeln!(out, "{:pad$}{var} := {value}", "");
            }
            Stmt::While { cond, body } => {
                let _ = writeln!(out, "{:pad$}while {cond} {{", "");
                write_stmts(out, body, depth + 1);
                let _ = writeln!(out, "{:pad$}}}", "");
            }
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let _ = writeln!(out, "{:pad$}{buffer}[{}] = {value}", "", list(indices));
            }
            Stmt::Alloc {
                buffer,
                dtype,
                extent,
                scope,
            } => {
                let _ = writeln!(
                    out,
                    "{:pad$}alloc {} {buffer}: {}[{extent}]",
                    "",
                    scope.name(),
                    dtype.name()
                );
            }
            Stmt::Barrier => {
                let _ = writeln!(out, "{:pad$}barrier()", "");
            }
            Stmt::Atomic {
                op,
                buffer,
                indices,
                value,
            } => {
                let _ = writeln!(
                    out,
                    "{:pad$}atomic_{}({buffer}[{}], {value})",
                    "",
                    op.name(),
                    list(indices)
                );
            }
            Stmt::Attr { key, value, body } => {
                let _ = writeln!(out, "{:pad$}attr {key} = {value} {{", "");
                write_stmts(out, body, depth + 1);
                let _ = writeln!(out, "{:pad$}}}", "");
            }
            Stmt::Block {
                name,
                iters,
                init,
                body,
            } => {
                let its: Vec<String> = iters
                    .iter()
                    .map(|it| {
                        format!(
                            "{}: {} {}",
                            it.var,
                            it.axis,
                            if it.kind == IterKind::S { "S" } else { "R" }
                        )
                    })
                    .collect();
                let _ = writeln!(out, "{:pad$}block {name}({}) {{", "", its.join(", "));
                if !init.is_empty() {
                    let _ = writeln!(out, "{:w$}init {{", "", w = pad + 2);
                    write_stmts(out, init, depth + 2);
                    let _ = writeln!(out, "{:w$}}}", "", w = pad + 2);
                }
                write_stmts(out, body, depth + 1);
                let _ = writeln!(out, "{:pad$}}}", "");
            }
        }
    }
}

/// Prints a function.
pub fn print_func(f: &Func) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "func {}({}) {{", f.name, f.params.join(", "));
    for b in &f.buffers {
        let what = match &b.kind {
            BufferKind::Values(Role::Input) => "in",
            BufferKind::Values(Role::Output) => "out",
            BufferKind::Values(Role::Alloc) => "alloc",
            BufferKind::Indptr(_) | BufferKind::Indices(_) => "in",
        };
        let _ = writeln!(
            out,
            "  {what} {}: {}[{}]",
            b.name,
            b.dtype,
            b.layout.join(", ")
        );
    }
    write_stmts(&mut out, &f.body, 1);
    out.push_str("}\n");
    out
}

impl fmt::Display for Func {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&print_func(self))
    }
}
