//! The readable text form of stage I (`lacuna lower --stage 1`), and `Display` for statements.
//!
//! Expressions print with the fewest parentheses that parse back to the same tree.

use crate::ir::{
    Axis, AxisKind, BinOp, Buffer, Expr, Iteration, Program, Region, Role, Semiring, Stmt, Store,
    UnOp,
};
use std::fmt::{self, Write};

fn join(v: &[Expr]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn prec(e: &Expr) -> u8 {
    match e {
        Expr::Binary(op, ..) => BinOp::precedence(*op),
        Expr::Unary(UnOp::Neg | UnOp::Not, _) => 6,
        Expr::Int(v) if *v < 0 => 6,
        Expr::Float(v) if v.is_sign_negative() => 6,
        _ => 7,
    }
}

fn write_operand(f: &mut fmt::Formatter<'_>, e: &Expr, min_prec: u8) -> fmt::Result {
    if prec(e) < min_prec {
        write!(f, "({e})")
    } else {
        write!(f, "{e}")
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Int(v) => write!(f, "{v}"),
            Expr::Float(v) => {
                if v.is_finite() {
                    write!(f, "{v:?}")
                } else {
                    // Non-finite values have no literal; print a constant expression.
                    let s = if v.is_nan() {
                        "(0.0 / 0.0)"
                    } else if *v > 0.0 {
                        "(1.0 / 0.0)"
                    } else {
                        "(-1.0 / 0.0)"
                    };
                    f.write_str(s)
                }
            }
            Expr::Var(v) => f.write_str(v),
            Expr::Load { buffer, indices } => write!(f, "{buffer}[{}]", join(indices)),
            Expr::Unary(op, a) => match op {
                UnOp::Neg | UnOp::Not => {
                    f.write_str(if *op == UnOp::Neg { "-" } else { "!" })?;
                    // `-(5)` keeps a negated literal distinct from the literal `-5`.
                    let literal = matches!(**a, Expr::Int(_) | Expr::Float(_));
                    if literal || prec(a) < 7 {
                        write!(f, "({a})")
                    } else {
                        write!(f, "{a}")
                    }
                }
                UnOp::Abs => write!(f, "abs({a})"),
                UnOp::Exp => write!(f, "exp({a})"),
                UnOp::Log => write!(f, "log({a})"),
                UnOp::Sqrt => write!(f, "sqrt({a})"),
            },
            Expr::Binary(op, a, b) => match op {
                BinOp::Min | BinOp::Max | BinOp::Pow => {
                    write!(f, "{}({a}, {b})", BinOp::symbol(*op))
                }
                _ => {
                    let p = BinOp::precedence(*op);
                    // Left-associative: the right operand needs strictly higher precedence;
                    // comparisons do not chain, so both sides need higher precedence.
                    let left_min = if p == 3 { p + 1 } else { p };
                    write_operand(f, a, left_min)?;
                    write!(f, " {} ", BinOp::symbol(*op))?;
                    write_operand(f, b, p + 1)
                }
            },
            Expr::Select(c, a, b) => write!(f, "select({c}, {a}, {b})"),
            Expr::Cast(t, a) => write!(f, "{t}({a})"),
            Expr::Semiring(s) => write!(f, "{s}"),
        }
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Region::Empty => f.write_str("empty"),
            Region::Identity => f.write_str("identity"),
            Region::Expr(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Display for Semiring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Semiring::Binary {
                a,
                b,
                overlap,
                left,
                right,
            } => write!(f, "binary({a}, {b}, {overlap}, {left}, {right})"),
            Semiring::Unary { a, present, absent } => write!(f, "unary({a}, {present}, {absent})"),
            Semiring::Select { a, pred } => write!(f, "select({a}, {pred})"),
            Semiring::Reduce {
                value,
                combine,
                identity,
            } => write!(f, "reduce({value}, {combine}, {identity})"),
        }
    }
}

impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}[{}] = {}",
            self.buffer,
            join(&self.indices),
            self.value
        )
    }
}

fn axis_line(a: &Axis) -> String {
    let args = match &a.kind {
        AxisKind::DenseFixed { n } => format!("{n}"),
        AxisKind::DenseVariable {
            parent,
            max_len,
            nnz,
        } => format!("{parent}, {max_len}, {nnz}"),
        AxisKind::SparseFixed {
            parent,
            n,
            nnz_cols,
        } => format!("{parent}, {n}, {nnz_cols}"),
        AxisKind::SparseVariable {
            parent,
            n,
            nnz,
            loose: false,
        } => format!("{parent}, {n}, {nnz}"),
        AxisKind::SparseVariable {
            parent,
            n,
            nnz,
            loose: true,
        } => format!("{parent}, {n}, {nnz}, loose"),
        AxisKind::Attached { base, parent, n } => format!("{base}, {parent}, {n}"),
    };
    let mut attrs = Vec::new();
    if a.kind.has_indptr() || a.kind.has_indices() {
        attrs.push(format!("{:?}", a.idtype).to_lowercase());
        if a.kind.has_indices() && !a.sorted {
            attrs.push("unsorted".into());
        }
    }
    if let Some(t) = &a.tiles {
        attrs.push(format!("tiles {} by {}", t.extent, t.factor));
    }
    let attrs = if attrs.is_empty() {
        String::new()
    } else {
        format!("  // {}", attrs.join(", "))
    };
    format!("{} = {}({args}){attrs}", a.name, a.kind.keyword())
}

fn buffer_line(b: &Buffer) -> String {
    let role = match b.role {
        Role::Input => "in",
        Role::Output => "out",
        Role::Alloc => "alloc",
    };
    let mut s = format!("{role} {}: {}[{}]", b.name, b.dtype, b.axes.join(", "));
    if let Some(d) = b.default_value {
        let _ = write!(s, " default({d:?})");
    }
    if b.extra_storage > 0 {
        let _ = write!(s, " extra({})", b.extra_storage);
    }
    if let Some(axis) = &b.coordinates_of {
        let _ = write!(s, " coords({axis})");
    }
    if b.permutation {
        s.push_str(" permutation");
    }
    s
}

fn write_stmts(out: &mut String, stmts: &[Stmt], depth: usize) {
    for s in stmts {
        match s {
            Stmt::Store(st) => {
                let _ = writeln!(out, "{:w$}{st}", "", w = depth * 2);
            }
            Stmt::Iter(it) => write_iteration(out, it, depth),
        }
    }
}

fn write_iteration(out: &mut String, it: &Iteration, depth: usize) {
    let pad = depth * 2;
    // Fused pairs print as `fuse(I, J)`.
    let mut axes = Vec::new();
    let mut k = 0;
    while k < it.axes.len() {
        match it.fused.iter().find(|(o, _)| *o == it.axes[k]) {
            Some((o, i)) => {
                axes.push(format!("fuse({o}, {i})"));
                k += 2;
            }
            None => {
                axes.push(it.axes[k].clone());
                k += 1;
            }
        }
    }
    let _ = writeln!(
        out,
        "{:pad$}sp_iter {} [{}] \"{}\" ({}) {{",
        "",
        it.name,
        axes.join(", "),
        it.kinds,
        it.vars.join(", ")
    );
    if !it.annotations.is_empty() {
        let attrs: Vec<String> = it
            .annotations
            .iter()
            .map(|(k, v)| format!("{k:?}: {v:?}"))
            .collect();
        let _ = writeln!(
            out,
            "{:w$}sp_iter_attr {{{}}}",
            "",
            attrs.join(", "),
            w = pad + 2
        );
    }
    if !it.init.is_empty() {
        let _ = writeln!(out, "{:w$}init {{", "", w = pad + 2);
        write_stmts(out, &it.init, depth + 2);
        let _ = writeln!(out, "{:w$}}}", "", w = pad + 2);
    }
    write_stmts(out, &it.body, depth + 1);
    let _ = writeln!(out, "{:pad$}}}", "");
}

/// Prints a program in the readable stage-I form.
pub fn print_program(p: &Program) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "kernel {}({}) {{", p.name, p.params.join(", "));
    for a in &p.axes {
        let _ = writeln!(out, "  {}", axis_line(a));
    }
    for b in &p.buffers {
        let _ = writeln!(out, "  {}", buffer_line(b));
    }
    write_stmts(&mut out, &p.body, 1);
    out.push_str("}\n");
    out
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&print_program(self))
    }
}
