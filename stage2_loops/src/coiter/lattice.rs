//! Merge lattices (TACO): for one index variable, the cases of which sparse operands are present.
//!
//! A [`Point`] is a set of sparse level iterators (operands stored sparsely at the variable),
//! plus the *universe* — the dense range `0..n` — when an operand that is dense at the variable
//! (or a literal, or a coordinate) takes part in a union; its expression is the right-hand side
//! with every sparse operand outside the set absent. Multiplication (and every operation but
//! `+`, `-`) is a conjunction: the product of the operands' points. Addition is a disjunction:
//! the product, then each side alone. Points are ordered supersets first; duplicates, points
//! whose expression is absent, and — when the first point holds the universe — every point
//! without it (never reached: the universe is always present) are dropped.

use super::notation::{subst, TExpr, TRegion};
use lacuna_stage1::BinOp;
use std::collections::BTreeSet;
use std::fmt;

/// A lattice point.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Operands (tensor indices) iterated sparsely at the variable that are present.
    pub iters: BTreeSet<usize>,
    /// Whether the point covers the whole dense range.
    pub universe: bool,
    /// The expression computed where exactly these are present; `None` where the result has
    /// no entry (a case that only shadows the cases below it).
    pub expr: Option<TExpr>,
}

/// The lattice of one index variable.
#[derive(Clone, Debug, PartialEq)]
pub struct Lattice {
    /// Points, supersets first.
    pub points: Vec<Point>,
}

impl Point {
    /// True when `self` is a sub-case of loop point `p`.
    pub fn within(&self, p: &Point) -> bool {
        self.iters.is_subset(&p.iters) && (!self.universe || p.universe)
    }
}

type Shape = (BTreeSet<usize>, bool);

/// The lattice of `e` at a variable, where `sparse(t)` tells whether operand `t` is iterated
/// sparsely there.
pub fn build(e: &TExpr, sparse: &dyn Fn(usize) -> bool) -> Lattice {
    let mut shapes = shapes(e, sparse);
    // Supersets first (stable: construction order breaks ties).
    shapes.sort_by_key(|(s, u)| std::cmp::Reverse(s.len() + usize::from(*u)));
    let mut points: Vec<Point> = Vec::new();
    for (iters, universe) in shapes {
        if points
            .iter()
            .any(|p| p.iters == iters && p.universe == universe)
        {
            continue;
        }
        let expr = restrict(e, &|t| !sparse(t) || iters.contains(&t));
        points.push(Point {
            iters,
            universe,
            expr,
        });
    }
    if points.first().is_some_and(|p| p.universe) {
        points.retain(|p| p.universe);
    }
    // Trailing points without entries shadow nothing.
    while points.last().is_some_and(|p| p.expr.is_none()) {
        points.pop();
    }
    Lattice { points }
}

fn shapes(e: &TExpr, sparse: &dyn Fn(usize) -> bool) -> Vec<Shape> {
    match e {
        TExpr::Access(t) if sparse(*t) => vec![(BTreeSet::from([*t]), false)],
        TExpr::Access(_) | TExpr::Float(_) | TExpr::Int(_) | TExpr::Coord(_) => {
            vec![(BTreeSet::new(), true)]
        }
        TExpr::Arg(_) => vec![(BTreeSet::new(), true)],
        TExpr::Unary(_, a) | TExpr::Cast(_, a) | TExpr::SSelect(a, _) => shapes(a, sparse),
        TExpr::Cond(c, a, b) => {
            let mut out = shapes(c, sparse);
            for x in [a, b] {
                out = product(&out, &shapes(x, sparse), false);
            }
            out
        }
        TExpr::SUnary(a, r) => {
            let la = shapes(a, sparse);
            if r[1].is_some() {
                // Entries everywhere: `a`'s iterators tell present from absent.
                let mut out: Vec<Shape> = la.into_iter().map(|(s, _)| (s, true)).collect();
                out.push((BTreeSet::new(), true));
                out
            } else {
                la
            }
        }
        TExpr::SBinary(a, b, r) => {
            let (la, lb) = (shapes(a, sparse), shapes(b, sparse));
            let union = r[1].is_some() || r[2].is_some();
            let mut out = product(&la, &lb, union);
            if r[1].is_some() {
                out.extend(la);
            }
            if r[2].is_some() {
                out.extend(lb);
            }
            out
        }
        TExpr::Binary(op, a, b) => {
            let (la, lb) = (shapes(a, sparse), shapes(b, sparse));
            let union = is_union(*op);
            let mut out = Vec::new();
            for (sa, ua) in &la {
                for (sb, ub) in &lb {
                    let iters: BTreeSet<usize> = sa.union(sb).copied().collect();
                    // A conjunction ranges over the dense range only when both sides do (a
                    // dense side is located, not iterated); a disjunction when either does.
                    let universe = if union {
                        *ua || *ub
                    } else {
                        (*ua && *ub) || (iters.is_empty() && (*ua || *ub))
                    };
                    out.push((iters, universe));
                }
            }
            if union {
                out.extend(la);
                out.extend(lb);
            }
            out
        }
    }
}

/// Every pair of points of `la` and `lb`, both present.
fn product(la: &[Shape], lb: &[Shape], union: bool) -> Vec<Shape> {
    let mut out = Vec::new();
    for (sa, ua) in la {
        for (sb, ub) in lb {
            let iters: BTreeSet<usize> = sa.union(sb).copied().collect();
            let universe = if union { *ua || *ub } else { *ua && *ub };
            out.push((iters, universe));
        }
    }
    out
}

/// True for the operations whose result is present where either operand is.
pub fn is_union(op: BinOp) -> bool {
    matches!(op, BinOp::Add | BinOp::Sub)
}

/// `e` with the operands for which `present` fails absent; `None` when the result is absent.
pub fn restrict(e: &TExpr, present: &dyn Fn(usize) -> bool) -> Option<TExpr> {
    match e {
        TExpr::Access(t) => present(*t).then(|| e.clone()),
        TExpr::Float(_) | TExpr::Int(_) | TExpr::Coord(_) | TExpr::Arg(_) => Some(e.clone()),
        TExpr::Cond(c, a, b) => Some(TExpr::Cond(
            Box::new(restrict(c, present)?),
            Box::new(restrict(a, present)?),
            Box::new(restrict(b, present)?),
        )),
        TExpr::SSelect(a, p) => {
            restrict(a, present).map(|a| TExpr::SSelect(Box::new(a), p.clone()))
        }
        TExpr::SUnary(a, r) => match restrict(a, present) {
            // Still present: the `present` region applies where the entry is reached.
            Some(x) => Some(TExpr::SUnary(Box::new(x), r.clone())),
            None => match &r[1] {
                TRegion::Expr(f) => Some(f.clone()),
                _ => None,
            },
        },
        TExpr::SBinary(a, b, r) => {
            let region = |reg: &TRegion, v: TExpr, k: usize| -> Option<TExpr> {
                match reg {
                    TRegion::Empty => None,
                    TRegion::Identity => Some(v),
                    TRegion::Expr(f) => {
                        let mut args = [None, None];
                        args[k] = Some(&v);
                        Some(subst(f, &args))
                    }
                }
            };
            match (restrict(a, present), restrict(b, present)) {
                (Some(x), Some(y)) => Some(TExpr::SBinary(Box::new(x), Box::new(y), r.clone())),
                (Some(x), None) => region(&r[1], x, 0),
                (None, Some(y)) => region(&r[2], y, 1),
                (None, None) => None,
            }
        }
        TExpr::Unary(op, a) => restrict(a, present).map(|a| TExpr::Unary(*op, Box::new(a))),
        TExpr::Cast(t, a) => restrict(a, present).map(|a| TExpr::Cast(*t, Box::new(a))),
        TExpr::Binary(op, a, b) => {
            let (ra, rb) = (restrict(a, present), restrict(b, present));
            match (ra, rb) {
                (Some(x), Some(y)) => Some(TExpr::Binary(*op, Box::new(x), Box::new(y))),
                (Some(x), None) if is_union(*op) => Some(x),
                (None, Some(y)) if *op == BinOp::Add => Some(y),
                (None, Some(y)) if *op == BinOp::Sub => {
                    Some(TExpr::Unary(lacuna_stage1::UnOp::Neg, Box::new(y)))
                }
                _ => None,
            }
        }
    }
}

/// Renders an expression with operand and variable names.
pub struct Named<'a> {
    /// The expression.
    pub expr: &'a TExpr,
    /// Operand names.
    pub tensors: &'a [String],
    /// Variable names.
    pub vars: &'a [String],
}

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |e| Named {
            expr: e,
            tensors: self.tensors,
            vars: self.vars,
        };
        match self.expr {
            TExpr::Access(t) => f.write_str(&self.tensors[*t]),
            TExpr::Float(v) => write!(f, "{v:?}"),
            TExpr::Int(v) => write!(f, "{v}"),
            TExpr::Coord(v) => f.write_str(&self.vars[*v]),
            TExpr::Unary(lacuna_stage1::UnOp::Neg, a) => write!(f, "-{}", n(a)),
            TExpr::Unary(op, a) => write!(f, "{op:?}({})", n(a)),
            TExpr::Cast(t, a) => write!(f, "{}({})", t.name(), n(a)),
            TExpr::Binary(op, a, b) if op.precedence() == 7 => {
                write!(f, "{}({}, {})", op.symbol(), n(a), n(b))
            }
            TExpr::Binary(op, a, b) => write!(f, "({} {} {})", n(a), op.symbol(), n(b)),
            TExpr::Cond(c, a, b) => write!(f, "select({}, {}, {})", n(c), n(a), n(b)),
            TExpr::Arg(k) => f.write_str(if *k == 0 { "x" } else { "y" }),
            TExpr::SBinary(a, b, r) => write!(
                f,
                "binary({}, {}, {}, {}, {})",
                n(a),
                n(b),
                self.region(&r[0]),
                self.region(&r[1]),
                self.region(&r[2])
            ),
            TExpr::SUnary(a, r) => write!(
                f,
                "unary({}, {}, {})",
                n(a),
                self.region(&r[0]),
                self.region(&r[1])
            ),
            TExpr::SSelect(a, p) => write!(f, "select({}, {})", n(a), n(p)),
        }
    }
}

impl Named<'_> {
    fn region(&self, r: &TRegion) -> String {
        match r {
            TRegion::Empty => "empty".into(),
            TRegion::Identity => "identity".into(),
            TRegion::Expr(e) => Named {
                expr: e,
                tensors: self.tensors,
                vars: self.vars,
            }
            .to_string(),
        }
    }
}

impl Lattice {
    /// One line per point: `[A B U] (A + B)`, `U` marking the universe.
    pub fn render(&self, tensors: &[String], vars: &[String]) -> String {
        let mut out = String::new();
        for p in &self.points {
            let mut names: Vec<&str> = p.iters.iter().map(|&t| tensors[t].as_str()).collect();
            if p.universe {
                names.push("U");
            }
            let expr = match &p.expr {
                Some(e) => Named {
                    expr: e,
                    tensors,
                    vars,
                }
                .to_string(),
                None => "(no entry)".into(),
            };
            out.push_str(&format!("[{}] {expr}\n", names.join(" ")));
        }
        out
    }
}
