//! Which functions need gather instructions.
//!
//! A vectorized loop that reads `x[idx[j]]` over its variable `j` loads each lane's element at
//! a position it read from memory: LLVM's loop vectorizer emits a gather there, and that gather
//! is the point of vectorizing the loop (SpMV's rows, sliced ELL's lanes; `gather.rs` may then
//! assemble it from scalar loads). Everything else LLVM may emit as a gather is a strided or
//! permuted access to elements whose addresses are known without such a load: the SLP
//! vectorizer's, for example, when it packs the rows of a BSR block into one vector and reads
//! each block column with a stride-4 `vgatherqpd`. On hosts whose gather instructions are slow
//! (where gathers are assembled, AMD Zen 4 and 5), a function none of whose vectorized loops
//! needs a gather is compiled with LLVM's `prefer-no-gather` tuning (see
//! `lib.rs`'s `build_optimized`): the vectorizers then load what they can contiguously and
//! assemble the rest.

use lacuna_stage2::{Expr, ForKind, Func, Stmt};
use std::collections::BTreeSet;

/// Whether a loop of `f` vectorized by the schedule (`ForKind::Vectorized`) reads an element
/// at a position computed from a value it loaded for the lane: the gathers a vector loop over
/// sparse positions exists for. Conservative: a search or segment lookup inside a vectorized
/// loop, or a `while` loop, counts as one.
pub(crate) fn gathers_per_lane(f: &Func) -> bool {
    stmts_need(&f.body, None)
}

/// What varies across the lanes of the enclosing vectorized loop.
#[derive(Clone, Default)]
struct Lanes {
    /// Variables whose value differs between lanes (the loop variable, and what is computed
    /// from it).
    varying: BTreeSet<String>,
    /// Variables whose value was loaded at a lane-varying position (or computed from one).
    loaded: BTreeSet<String>,
}

impl Lanes {
    /// Whether `e` differs between lanes.
    fn varies(&self, e: &Expr) -> bool {
        e.reads_var(&|v| self.varying.contains(v))
    }

    /// Whether `e` holds a value loaded at a lane-varying position (such an `e` also
    /// [`Lanes::varies`]: the position reads a varying variable, or a loaded one, which is
    /// varying too).
    fn loaded(&self, e: &Expr) -> bool {
        match e {
            Expr::Var(v) => self.loaded.contains(v),
            Expr::Load { indices, .. } if indices.iter().any(|i| self.varies(i)) => true,
            other => other.children().into_iter().any(|c| self.loaded(c)),
        }
    }

    /// Whether evaluating `e` in a lane gathers: loads at a position that `loaded` values
    /// compute, or searches at lane-varying bounds.
    fn gathers(&self, e: &Expr) -> bool {
        let here = match e {
            Expr::Load { indices, .. } => indices.iter().any(|i| self.loaded(i)),
            Expr::Search { .. } | Expr::Segment { .. } => self.varies(e),
            _ => false,
        };
        here || e.children().into_iter().any(|c| self.gathers(c))
    }

    /// Records a variable bound (or assigned) to `value`.
    fn bind(&mut self, var: &str, value: &Expr) {
        if self.varies(value) {
            self.varying.insert(var.to_string());
        }
        if self.loaded(value) {
            self.loaded.insert(var.to_string());
        }
    }
}

/// Whether `stmts` need gathers; `lanes` is the state inside a vectorized loop.
fn stmts_need(stmts: &[Stmt], lanes: Option<&Lanes>) -> bool {
    let mut lanes = lanes.cloned();
    for s in stmts {
        if let Some(l) = lanes.as_mut() {
            if matches!(s, Stmt::While { .. }) || s.exprs().into_iter().any(|e| l.gathers(e)) {
                return true;
            }
            match s {
                Stmt::Let { var, value } | Stmt::Assign { var, value } => l.bind(var, value),
                Stmt::Decl { var, init, .. } => l.bind(var, init),
                _ => {}
            }
        }
        let need = match (s, lanes.as_ref()) {
            (
                Stmt::For {
                    var,
                    kind: ForKind::Vectorized,
                    body,
                    ..
                },
                outer,
            ) => {
                let mut inner = outer.cloned().unwrap_or_default();
                inner.varying.insert(var.clone());
                stmts_need(body, Some(&inner))
            }
            (s, l) => s.bodies().into_iter().any(|b| stmts_need(b, l)),
        };
        if need {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use lacuna_ir::DType;

    fn var(v: &str) -> Expr {
        Expr::var(v)
    }

    fn load(buffer: &str, index: Expr) -> Expr {
        Expr::Load {
            buffer: buffer.into(),
            indices: vec![index],
        }
    }

    fn looped(kind: ForKind, var: &str, body: Vec<Stmt>) -> Stmt {
        Stmt::For {
            var: var.into(),
            start: Expr::Int(0, DType::I64),
            end: Expr::Param("n".into()),
            kind,
            body,
        }
    }

    fn store(value: Expr) -> Stmt {
        Stmt::Store {
            buffer: "y".into(),
            indices: vec![Expr::Int(0, DType::I64)],
            value,
        }
    }

    fn func(body: Vec<Stmt>) -> Func {
        Func {
            name: "f".into(),
            params: vec!["n".into(), "k".into()],
            axes: vec![],
            buffers: vec![],
            body,
            scratch: vec![],
        }
    }

    /// `y += a[j] * x[idx[j]]`, vectorized over `j`, needs gathers; the same loop serial, or
    /// vectorized over features with the row's index loaded outside (SpMM's `B[idx[j] * k +
    /// f]`), or a strided read (BSR's `a[j * 4 + c]`) does not.
    #[test]
    fn only_lane_loaded_positions_need_gathers() {
        let row = |kind| {
            func(vec![looped(
                kind,
                "j",
                vec![store(Expr::mul(
                    load("a", var("j")),
                    load("x", load("idx", var("j"))),
                ))],
            )])
        };
        assert!(gathers_per_lane(&row(ForKind::Vectorized)));
        assert!(!gathers_per_lane(&row(ForKind::Serial)));
        assert!(!gathers_per_lane(&row(ForKind::Unrolled)));
        let features = func(vec![looped(
            ForKind::Serial,
            "j",
            vec![looped(
                ForKind::Vectorized,
                "f",
                vec![store(load(
                    "b",
                    Expr::add(
                        Expr::mul(load("idx", var("j")), Expr::Param("k".into())),
                        var("f"),
                    ),
                ))],
            )],
        )]);
        assert!(!gathers_per_lane(&features));
        let strided = func(vec![looped(
            ForKind::Vectorized,
            "j",
            vec![store(load(
                "a",
                Expr::add(Expr::mul(var("j"), Expr::Int(4, DType::I64)), var("c")),
            ))],
        )]);
        assert!(!gathers_per_lane(&strided));
    }

    /// A position loaded per lane counts through `let` bindings and nested statements.
    #[test]
    fn loaded_positions_flow_through_lets() {
        let f = func(vec![looped(
            ForKind::Parallel,
            "i",
            vec![looped(
                ForKind::Vectorized,
                "j",
                vec![
                    Stmt::Let {
                        var: "p".into(),
                        value: Expr::add(var("j"), var("i")),
                    },
                    Stmt::Let {
                        var: "c".into(),
                        value: load("idx", var("p")),
                    },
                    Stmt::If {
                        cond: Expr::Bool(true),
                        then_body: vec![store(load("x", var("c")))],
                        else_body: vec![],
                    },
                ],
            )],
        )]);
        assert!(gathers_per_lane(&f));
        // The same position loaded outside the vectorized loop is one value for all lanes.
        let uniform = func(vec![looped(
            ForKind::Serial,
            "i",
            vec![
                Stmt::Let {
                    var: "c".into(),
                    value: load("idx", var("i")),
                },
                looped(
                    ForKind::Vectorized,
                    "j",
                    vec![store(load("x", Expr::add(var("c"), var("j"))))],
                ),
            ],
        )]);
        assert!(!gathers_per_lane(&uniform));
    }
}
