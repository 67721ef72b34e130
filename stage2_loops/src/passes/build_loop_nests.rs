//! Pass `build_loop_nests`: turns each sparse iteration into a nest of loops over the positions
//! of its axes with a block at the bottom; statements stay in coordinate form (`Coord(v)`).
//!
//! Before: `sp_iter spmv [I, J] "SR" (i, j) { y[i] = y[i] + A[i, j] * x[j] }`
//! After:
//! ```text
//! for i in 0..m {
//!   for j in i64(J.indptr[i])..i64(J.indptr[i + 1]) {
//!     block spmv(i: I S, j: J R) { y[@i] = y[@i] + A[@i, @j] * x[@j] }
//!   }
//! }
//! ```
//! Loop variables are *global* positions on their axis; `@v` is the coordinate of iterator `v`.

use crate::ir::{Expr, ForKind, Func, IterVar, Stmt};
use crate::passes::materialize_index_buffers::{indices_name, indptr_name};
use crate::LowerError;
use lacuna_ir::DType;
use lacuna_stage1::{
    resolve_index, resolve_literals, AxisKind, Expr as E1, Iteration, Program, Size, Stmt as S1,
};
use std::collections::BTreeMap;

/// An iterator in scope: its variable and axis.
#[derive(Clone, Debug)]
pub struct ScopeVar {
    /// Loop variable.
    pub var: String,
    /// Iterated axis.
    pub axis: String,
}

/// Adds the loop nests of `p`'s body to `f`.
pub fn build_loop_nests(p: &Program, mut f: Func) -> Result<Func, LowerError> {
    let dtypes: BTreeMap<String, DType> = p
        .buffers
        .iter()
        .map(|b| (b.name.clone(), b.dtype))
        .collect();
    let b = Builder { p, dtypes };
    f.body = b.stmts(&p.body, &[])?;
    Ok(f)
}

/// The extent of a size as an expression.
pub fn size_expr(s: &Size) -> Expr {
    match s {
        Size::Const(c) => Expr::i64(*c as i64),
        Size::Param(name) => Expr::Param(name.clone()),
    }
}

struct Builder<'p> {
    p: &'p Program,
    dtypes: BTreeMap<String, DType>,
}

impl Builder<'_> {
    fn stmts(&self, stmts: &[S1], scope: &[ScopeVar]) -> Result<Vec<Stmt>, LowerError> {
        let mut out = Vec::new();
        for s in stmts {
            match s {
                S1::Store(st) => {
                    let want = self.dtypes.get(&st.buffer).copied();
                    let value = convert(&resolve_literals(&st.value, want, &self.dtypes));
                    out.push(Stmt::Store {
                        buffer: st.buffer.clone(),
                        indices: st
                            .indices
                            .iter()
                            .map(|i| convert(&resolve_index(i, &self.dtypes)))
                            .collect(),
                        value,
                    });
                }
                S1::Iter(it) => out.push(self.iteration(it, scope)?),
            }
        }
        Ok(out)
    }

    fn iteration(&self, it: &Iteration, outer: &[ScopeVar]) -> Result<Stmt, LowerError> {
        let kinds = it.iter_kinds().ok_or_else(|| LowerError::Malformed {
            what: format!("iteration `{}` kinds", it.name),
        })?;
        let mut scope = outer.to_vec();
        let mut headers: Vec<(String, Expr, Expr, Vec<Stmt>)> = Vec::new();
        let mut k = 0;
        while k < it.axes.len() {
            let (ax, var) = (&it.axes[k], &it.vars[k]);
            if let Some((_, inner)) = it.fused.iter().find(|(o, _)| o == ax) {
                // A fused pair: one loop over the child's positions; the parent's position is
                // the segment holding it.
                let child = self.p.axis(inner).ok_or_else(|| LowerError::Malformed {
                    what: format!("axis `{inner}`"),
                })?;
                let n = match &self.p.axis(ax).map(|a| &a.kind) {
                    Some(AxisKind::DenseFixed { n }) => size_expr(n),
                    _ => {
                        return Err(LowerError::Malformed {
                            what: format!("fused axis `{ax}`"),
                        })
                    }
                };
                let ip = indptr_name(inner);
                let it_t = child.idtype.dtype();
                let end = Expr::load_i64(&ip, n.clone(), it_t);
                let row = Expr::Segment {
                    buffer: ip,
                    lo: Box::new(Expr::i64(0)),
                    hi: Box::new(n),
                    value: Box::new(Expr::var(&it.vars[k + 1])),
                };
                headers.push((
                    it.vars[k + 1].clone(),
                    Expr::i64(0),
                    end,
                    vec![Stmt::Let {
                        var: var.clone(),
                        value: row,
                    }],
                ));
                scope.push(ScopeVar {
                    var: var.clone(),
                    axis: ax.clone(),
                });
                scope.push(ScopeVar {
                    var: it.vars[k + 1].clone(),
                    axis: inner.clone(),
                });
                k += 2;
                continue;
            }
            let (start, end) = loop_bounds(self.p, ax, &scope)?;
            headers.push((var.clone(), start, end, vec![]));
            scope.push(ScopeVar {
                var: var.clone(),
                axis: ax.clone(),
            });
            k += 1;
        }
        let iters = it
            .axes
            .iter()
            .zip(&it.vars)
            .zip(&kinds)
            .map(|((a, v), k)| IterVar {
                var: v.clone(),
                axis: a.clone(),
                kind: *k,
            })
            .collect();
        let init_scope: Vec<ScopeVar> = scope.clone();
        let block = Stmt::Block {
            name: it.name.clone(),
            iters,
            init: self.stmts(&it.init, &init_scope)?,
            body: self.stmts(&it.body, &scope)?,
        };
        Ok(headers
            .into_iter()
            .rev()
            .fold(block, |body, (var, start, end, mut lets)| Stmt::For {
                var,
                start,
                end,
                kind: ForKind::Serial,
                body: {
                    lets.push(body);
                    lets
                },
            }))
    }
}

/// The innermost variable in scope iterating `axis`.
pub fn var_of_axis<'s>(scope: &'s [ScopeVar], axis: &str) -> Option<&'s ScopeVar> {
    scope.iter().rev().find(|s| s.axis == axis)
}

/// Position bounds `[start, end)` of `axis` given the iterators in scope (its parent must be one).
pub fn loop_bounds(
    p: &Program,
    axis: &str,
    scope: &[ScopeVar],
) -> Result<(Expr, Expr), LowerError> {
    let a = p.axis(axis).ok_or_else(|| LowerError::Malformed {
        what: format!("axis `{axis}`"),
    })?;
    let parent_pos = |parent: &str| {
        var_of_axis(scope, parent)
            .map(|s| Expr::var(&s.var))
            .ok_or_else(|| LowerError::ParentNotIterated {
                axis: axis.to_string(),
                parent: parent.to_string(),
            })
    };
    Ok(match &a.kind {
        AxisKind::DenseFixed { n } => (Expr::i64(0), size_expr(n)),
        AxisKind::DenseVariable { parent, .. } | AxisKind::SparseVariable { parent, .. } => {
            segment_bounds(a, parent_pos(parent)?)
        }
        AxisKind::SparseFixed {
            parent, nnz_cols, ..
        } => {
            let pp = parent_pos(parent)?;
            let w = size_expr(nnz_cols);
            let start = Expr::mul(pp, w.clone());
            (start.clone(), Expr::add(start, w))
        }
        AxisKind::Attached { base, parent, .. } => {
            let pv = var_of_axis(scope, parent).ok_or_else(|| LowerError::ParentNotIterated {
                axis: axis.to_string(),
                parent: parent.to_string(),
            })?;
            let c = coord_expr(p, &pv.var, parent, scope)?;
            base_segment(p, base, c)?
        }
    })
}

/// The `[start, end)` positions of `base`'s fiber under the position `pp` of its (dense) parent:
/// the segment an attached axis visits, `pp` being the new parent's coordinate.
fn base_segment(p: &Program, base: &str, pp: Expr) -> Result<(Expr, Expr), LowerError> {
    let b = p.axis(base).ok_or_else(|| LowerError::Malformed {
        what: format!("axis `{base}`"),
    })?;
    Ok(match &b.kind {
        AxisKind::DenseVariable { .. } | AxisKind::SparseVariable { .. } => segment_bounds(b, pp),
        AxisKind::SparseFixed { nnz_cols, .. } => {
            let w = size_expr(nnz_cols);
            let start = Expr::mul(pp, w.clone());
            (start.clone(), Expr::add(start, w))
        }
        AxisKind::DenseFixed { .. } | AxisKind::Attached { .. } => {
            return Err(LowerError::Malformed {
                what: format!("attached axis over `{base}`, which has no parent fiber"),
            })
        }
    })
}

/// The coordinate of the iterator `var` (a position on `axis`) as an `i64` expression.
pub fn coord_expr(
    p: &Program,
    var: &str,
    axis: &str,
    scope: &[ScopeVar],
) -> Result<Expr, LowerError> {
    let a = p.axis(axis).ok_or_else(|| LowerError::Malformed {
        what: format!("axis `{axis}`"),
    })?;
    Ok(match &a.kind {
        AxisKind::DenseFixed { .. } => Expr::var(var),
        AxisKind::DenseVariable { parent, .. } => {
            let pv = var_of_axis(scope, parent).ok_or_else(|| LowerError::ParentNotIterated {
                axis: axis.to_string(),
                parent: parent.clone(),
            })?;
            Expr::sub(
                Expr::var(var),
                Expr::load_i64(&indptr_name(axis), Expr::var(&pv.var), a.idtype.dtype()),
            )
        }
        AxisKind::SparseFixed { .. } | AxisKind::SparseVariable { .. } => {
            Expr::load_i64(&indices_name(axis), Expr::var(var), a.idtype.dtype())
        }
        AxisKind::Attached { base, parent, .. } => {
            // Positions are the base's: its coordinates are the base's too.
            let b = p.axis(base).ok_or_else(|| LowerError::Malformed {
                what: format!("axis `{base}`"),
            })?;
            match &b.kind {
                AxisKind::DenseVariable { .. } => {
                    let pv = var_of_axis(scope, parent).ok_or_else(|| {
                        LowerError::ParentNotIterated {
                            axis: axis.to_string(),
                            parent: parent.clone(),
                        }
                    })?;
                    let c = coord_expr(p, &pv.var, parent, scope)?;
                    let (start, _) = base_segment(p, base, c)?;
                    Expr::sub(Expr::var(var), start)
                }
                _ => Expr::load_i64(&indices_name(base), Expr::var(var), b.idtype.dtype()),
            }
        }
    })
}

/// Converts a stage-I expression whose literals are resolved into a stage-II expression in
/// coordinate form.
pub fn convert(e: &E1) -> Expr {
    match e {
        E1::Int(v) => Expr::i64(*v),
        E1::Float(v) => Expr::Float(*v, DType::F64),
        E1::Var(v) => Expr::Coord(v.clone()),
        // Never reached: kernels with semiring operations are co-iteration kernels, which
        // `lower_to_stage2` refuses. Should one get here, the coordinate is unbound and
        // `translate_coordinates` reports it as an error.
        E1::Semiring(s) => Expr::Coord(format!("{s}")),
        E1::Load { buffer, indices } => Expr::Load {
            buffer: buffer.clone(),
            indices: indices.iter().map(convert).collect(),
        },
        E1::Unary(op, a) => Expr::Unary(*op, Box::new(convert(a))),
        E1::Binary(op, a, b) => Expr::Binary(*op, Box::new(convert(a)), Box::new(convert(b))),
        E1::Select(c, a, b) => Expr::Select(
            Box::new(convert(c)),
            Box::new(convert(a)),
            Box::new(convert(b)),
        ),
        E1::Cast(t, a) => match **a {
            E1::Int(v) => match t {
                DType::F32 | DType::F64 => Expr::Float(v as f64, *t),
                DType::Bool => Expr::Bool(v != 0),
                _ => Expr::Int(v, *t),
            },
            E1::Float(v) if t.is_float() => Expr::Float(v, *t),
            _ => Expr::Cast(*t, Box::new(convert(a))),
        },
    }
}

/// The `[start, end)` positions of the segment of parent position `pp` on a variable axis:
/// `indptr[pp]..indptr[pp + 1]`, or `indptr[2 pp]..indptr[2 pp + 1]` for a loose axis.
pub fn segment_bounds(a: &lacuna_stage1::Axis, pp: Expr) -> (Expr, Expr) {
    let ip = indptr_name(&a.name);
    let it = a.idtype.dtype();
    let lo = if a.kind.is_loose() {
        Expr::mul(pp, Expr::i64(2))
    } else {
        pp
    };
    (
        Expr::load_i64(&ip, lo.clone(), it),
        Expr::load_i64(&ip, Expr::add(lo, Expr::i64(1)), it),
    )
}
