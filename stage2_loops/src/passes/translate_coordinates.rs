//! Pass `translate_coordinates`: rewrites accesses in coordinate form into positions.
//!
//! An iterator indexing the axis it iterates (under the same parent position) is used directly.
//! Otherwise its coordinate is translated: a dense axis takes the coordinate as the position, a
//! ragged axis offsets it into the segment (guarded by the segment length), and a sparse axis
//! binary-searches the segment's sorted coordinates. Translated positions are bound with `let`
//! and are -1 when the entry is not stored; a load is then guarded and yields the buffer's
//! `default_value` (zero unless given), and a store is skipped (the output's pattern masks it).
//!
//! Before: `C[@i, @k] = C[@i, @k] + A[@i, @j] * B[@j, @k]` inside `block(i: I, j: Jd, k: K)`
//! After:
//! ```text
//! let _p0 = search(J.indices, J.indptr[i]..J.indptr[i + 1], j)
//! C[i, k] = C[i, k] + select(_p0 >= 0, A[i, _p0], 0.0) * B[j, k]
//! ```

use crate::ir::{Expr, Func, Stmt};
use crate::passes::build_loop_nests::{
    coord_expr, segment_bounds, size_expr, var_of_axis, ScopeVar,
};
use crate::passes::materialize_index_buffers::{indices_name, indptr_name};
use crate::LowerError;
use lacuna_ir::DType;
use lacuna_stage1::{Axis, AxisKind, BinOp, Program, Size};

/// Translates every coordinate-form access of `f` (lowered from `p`) into positions.
pub fn translate_coordinates(p: &Program, mut f: Func) -> Result<Func, LowerError> {
    let body = std::mem::take(&mut f.body);
    let mut t = Translator {
        p,
        f: &f,
        counter: 0,
    };
    let body = t.stmts(body, &[])?;
    f.body = body;
    Ok(f)
}

struct Translator<'a> {
    p: &'a Program,
    f: &'a Func,
    counter: usize,
}

impl Translator<'_> {
    fn stmts(&mut self, stmts: Vec<Stmt>, scope: &[ScopeVar]) -> Result<Vec<Stmt>, LowerError> {
        let mut out = Vec::new();
        for s in stmts {
            match s {
                Stmt::For {
                    var,
                    start,
                    end,
                    kind,
                    body,
                } => {
                    let mut pre = Vec::new();
                    let start = self.expr(start, scope, &mut pre)?;
                    let end = self.expr(end, scope, &mut pre)?;
                    out.extend(pre);
                    out.push(Stmt::For {
                        var,
                        start,
                        end,
                        kind,
                        body: self.stmts(body, scope)?,
                    });
                }
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    let mut pre = Vec::new();
                    let cond = self.expr(cond, scope, &mut pre)?;
                    out.extend(pre);
                    out.push(Stmt::If {
                        cond,
                        then_body: self.stmts(then_body, scope)?,
                        else_body: self.stmts(else_body, scope)?,
                    });
                }
                Stmt::Let { var, value } => {
                    let mut pre = Vec::new();
                    let value = self.expr(value, scope, &mut pre)?;
                    out.extend(pre);
                    out.push(Stmt::Let { var, value });
                }
                Stmt::Decl { var, dtype, init } => {
                    let mut pre = Vec::new();
                    let init = self.expr(init, scope, &mut pre)?;
                    out.extend(pre);
                    out.push(Stmt::Decl { var, dtype, init });
                }
                Stmt::Assign { var, value } => {
                    let mut pre = Vec::new();
                    let value = self.expr(value, scope, &mut pre)?;
                    out.extend(pre);
                    out.push(Stmt::Assign { var, value });
                }
                Stmt::While { cond, body } => {
                    // The condition is re-evaluated every iteration: nothing may be hoisted
                    // out of it.
                    let mut pre = Vec::new();
                    let cond = self.expr(cond, scope, &mut pre)?;
                    if !pre.is_empty() {
                        return Err(LowerError::Malformed {
                            what: "a while-loop condition that needs coordinate translation".into(),
                        });
                    }
                    out.push(Stmt::While {
                        cond,
                        body: self.stmts(body, scope)?,
                    });
                }
                Stmt::Store {
                    buffer,
                    indices,
                    value,
                } => {
                    let mut pre = Vec::new();
                    let value = self.expr(value, scope, &mut pre)?;
                    let (indices, guard) = self.access(&buffer, indices, scope, &mut pre)?;
                    out.extend(pre);
                    let store = Stmt::Store {
                        buffer,
                        indices,
                        value,
                    };
                    out.push(match guard {
                        Some(g) => Stmt::If {
                            cond: g,
                            then_body: vec![store],
                            else_body: vec![],
                        },
                        None => store,
                    });
                }
                Stmt::Block {
                    name,
                    iters,
                    init,
                    body,
                } => {
                    let mut inner = scope.to_vec();
                    inner.extend(iters.iter().map(|it| ScopeVar {
                        var: it.var.clone(),
                        axis: it.axis.clone(),
                    }));
                    let init = self.stmts(init, &inner)?;
                    let body = self.stmts(body, &inner)?;
                    out.push(Stmt::Block {
                        name,
                        iters,
                        init,
                        body,
                    });
                }
                Stmt::Attr { key, value, body } => out.push(Stmt::Attr {
                    key,
                    value,
                    body: self.stmts(body, scope)?,
                }),
                // Scheduling constructs come after this pass; nothing to translate.
                s @ (Stmt::Alloc { .. } | Stmt::Barrier | Stmt::Atomic { .. }) => out.push(s),
            }
        }
        Ok(out)
    }

    fn lookup<'s>(&self, scope: &'s [ScopeVar], var: &str) -> Result<&'s ScopeVar, LowerError> {
        scope
            .iter()
            .rev()
            .find(|s| s.var == var)
            .ok_or_else(|| LowerError::UnboundIterator {
                var: var.to_string(),
            })
    }

    fn expr(
        &mut self,
        e: Expr,
        scope: &[ScopeVar],
        pre: &mut Vec<Stmt>,
    ) -> Result<Expr, LowerError> {
        Ok(match e {
            Expr::Coord(v) => {
                let sv = self.lookup(scope, &v)?;
                let upto = scope
                    .iter()
                    .rposition(|s| s.var == v)
                    .map_or(scope.len(), |i| i + 1);
                coord_expr(self.p, &sv.var, &sv.axis, &scope[..upto])?
            }
            Expr::Load { buffer, indices } => {
                let constant = self.constant_input_element(&buffer, &indices);
                let (indices, guard) = self.access(&buffer, indices, scope, pre)?;
                let load = Expr::Load {
                    buffer: buffer.clone(),
                    indices,
                };
                match guard {
                    // Always in bounds: read once before the statement (a `let` that can leave
                    // the loops), not in the arm of a `select` that would make it conditional.
                    None if constant => Self::bind_value(load, pre, &mut self.counter),
                    None => load,
                    Some(g) => {
                        let b = self
                            .p
                            .buffer(&buffer)
                            .ok_or_else(|| LowerError::Malformed {
                                what: format!("buffer `{buffer}`"),
                            })?;
                        let d = b.default_value.unwrap_or(0.0);
                        let default = match b.dtype {
                            DType::F32 | DType::F64 => Expr::Float(d, b.dtype),
                            t => Expr::Int(d as i64, t),
                        };
                        Expr::Select(Box::new(g), Box::new(load), Box::new(default))
                    }
                }
            }
            Expr::Unary(op, a) => Expr::Unary(op, Box::new(self.expr(*a, scope, pre)?)),
            Expr::Binary(op, a, b) => Expr::Binary(
                op,
                Box::new(self.expr(*a, scope, pre)?),
                Box::new(self.expr(*b, scope, pre)?),
            ),
            Expr::Select(c, a, b) => Expr::Select(
                Box::new(self.expr(*c, scope, pre)?),
                Box::new(self.expr(*a, scope, pre)?),
                Box::new(self.expr(*b, scope, pre)?),
            ),
            Expr::Cast(t, a) => Expr::Cast(t, Box::new(self.expr(*a, scope, pre)?)),
            Expr::Search {
                buffer,
                lo,
                hi,
                value,
            } => Expr::Search {
                buffer,
                lo: Box::new(self.expr(*lo, scope, pre)?),
                hi: Box::new(self.expr(*hi, scope, pre)?),
                value: Box::new(self.expr(*value, scope, pre)?),
            },
            Expr::Segment {
                buffer,
                lo,
                hi,
                value,
            } => Expr::Segment {
                buffer,
                lo: Box::new(self.expr(*lo, scope, pre)?),
                hi: Box::new(self.expr(*hi, scope, pre)?),
                value: Box::new(self.expr(*value, scope, pre)?),
            },
            Expr::Int(..)
            | Expr::Float(..)
            | Expr::Bool(_)
            | Expr::Var(_)
            | Expr::Param(_)
            | Expr::Shuffle { .. } => e,
        })
    }

    /// Positions for an access in coordinate form, and the guard under which it is stored.
    fn access(
        &mut self,
        buffer: &str,
        indices: Vec<Expr>,
        scope: &[ScopeVar],
        pre: &mut Vec<Stmt>,
    ) -> Result<(Vec<Expr>, Option<Expr>), LowerError> {
        let layout = self
            .f
            .buffer(buffer)
            .ok_or_else(|| LowerError::Malformed {
                what: format!("buffer `{buffer}`"),
            })?
            .layout
            .clone();
        if layout.is_empty() {
            // A flat structure buffer, already indexed by position.
            let indices = indices
                .into_iter()
                .map(|e| self.expr(e, scope, pre))
                .collect::<Result<_, _>>()?;
            return Ok((indices, None));
        }
        if layout.len() != indices.len() {
            return Err(LowerError::Malformed {
                what: format!(
                    "access to `{buffer}`: {} indices for {} axes",
                    indices.len(),
                    layout.len()
                ),
            });
        }
        let mut positions: Vec<Expr> = Vec::new();
        let mut direct_prev = true;
        let mut guard: Option<Expr> = None;
        for (d, (ax, idx)) in layout.iter().zip(indices).enumerate() {
            let var = match idx {
                Expr::Coord(v) => v,
                computed => {
                    // A computed coordinate (e.g. `io * 2 + ii`): it may fall outside the
                    // axis, so dense axes check its range too — unless it is a whole tile's.
                    let y = self
                        .p
                        .axis(ax)
                        .ok_or_else(|| LowerError::Malformed {
                            what: format!("axis `{ax}`"),
                        })?
                        .clone();
                    let within = self.tiled_within(&computed, &y, scope);
                    let c = self.expr(computed, scope, pre)?;
                    direct_prev = false;
                    if self.holds_coordinates(&c, &y) {
                        // A value checked when bound to be a coordinate of an axis of this
                        // extent: the position itself, computed once.
                        positions.push(Self::bind_value(c, pre, &mut self.counter));
                        continue;
                    }
                    let pos = self.translate(buffer, &y, d, &positions, c, !within)?;
                    let pos = self.bind_position(pos, &mut guard, pre);
                    positions.push(pos);
                    continue;
                }
            };
            let sv = self.lookup(scope, &var)?.clone();
            let upto = scope
                .iter()
                .rposition(|s| s.var == var)
                .map_or(scope.len(), |i| i + 1);
            let outer = &scope[..upto];
            let y = self
                .p
                .axis(ax)
                .ok_or_else(|| LowerError::Malformed {
                    what: format!("axis `{ax}`"),
                })?
                .clone();
            let parent_var = y
                .kind
                .parent()
                .and_then(|par| var_of_axis(&outer[..outer.len() - 1], par))
                .map(|s| s.var.clone());
            let same_parent = match (y.kind.parent(), d) {
                (None, _) => true,
                (Some(_), 0) => false,
                (Some(_), _) => {
                    direct_prev
                        && positions[d - 1] == Expr::var(parent_var.as_deref().unwrap_or(""))
                }
            };
            if sv.axis == y.name && same_parent {
                positions.push(Expr::var(&var));
                direct_prev = true;
                continue;
            }
            if self.attached_direct(&sv, &y, d, &positions, outer)? {
                // An attached iterator over this axis, whose parent's coordinate is the position
                // of the previous (detached, dense) dimension: it visits this very fiber.
                positions.push(Expr::var(&var));
                direct_prev = true;
                continue;
            }
            direct_prev = false;
            let c = coord_expr(self.p, &sv.var, &sv.axis, outer)?;
            let pos = self.translate(buffer, &y, d, &positions, c, false)?;
            let pos = self.bind_position(pos, &mut guard, pre);
            positions.push(pos);
        }
        Ok((positions, guard))
    }

    /// True when iterator `sv` is on an axis attached to `y` and the position of the access's
    /// previous dimension (`y`'s detached dense parent) is the coordinate of the attached axis's
    /// new parent: the iterator's position is then `y`'s position.
    fn attached_direct(
        &self,
        sv: &ScopeVar,
        y: &Axis,
        d: usize,
        positions: &[Expr],
        outer: &[ScopeVar],
    ) -> Result<bool, LowerError> {
        let Some(AxisKind::Attached { base, parent, .. }) = self.p.axis(&sv.axis).map(|a| &a.kind)
        else {
            return Ok(false);
        };
        if *base != y.name || d == 0 {
            return Ok(false);
        }
        let Some(pv) = var_of_axis(&outer[..outer.len() - 1], parent) else {
            return Ok(false);
        };
        let c = coord_expr(self.p, &pv.var, parent, &outer[..outer.len() - 1])?;
        Ok(positions[d - 1] == c)
    }

    /// The position of coordinate `c` on axis `y` (the access's dimension `d`), given the
    /// positions of the dimensions before it. `Translated::Maybe` positions are -1 when the
    /// coordinate is not stored; `checked` adds a range check to dense axes.
    fn translate(
        &self,
        buffer: &str,
        y: &Axis,
        d: usize,
        positions: &[Expr],
        c: Expr,
        checked: bool,
    ) -> Result<Translated, LowerError> {
        let ax = &y.name;
        let it = y.idtype.dtype();
        let ge0 = || Expr::bin(BinOp::Ge, c.clone(), Expr::i64(0));
        Ok(match &y.kind {
            // A constant coordinate inside a constant extent needs no range check.
            AxisKind::DenseFixed { n } if checked && !constant_inside(&c, n) => {
                let inside = Expr::bin(
                    BinOp::And,
                    ge0(),
                    Expr::bin(BinOp::Lt, c.clone(), size_expr(n)),
                );
                Translated::Maybe(Expr::Select(
                    Box::new(inside),
                    Box::new(c.clone()),
                    Box::new(Expr::i64(-1)),
                ))
            }
            AxisKind::DenseFixed { .. } => Translated::Always(c),
            AxisKind::DenseVariable { .. } => {
                let pp = positions[d - 1].clone();
                let start = Expr::load_i64(&indptr_name(ax), pp.clone(), it);
                let end = Expr::load_i64(&indptr_name(ax), Expr::add(pp, Expr::i64(1)), it);
                let inside = Expr::bin(
                    BinOp::And,
                    ge0(),
                    Expr::bin(BinOp::Lt, c.clone(), Expr::sub(end, start.clone())),
                );
                Translated::Maybe(Expr::Select(
                    Box::new(inside),
                    Box::new(Expr::add(start, c)),
                    Box::new(Expr::i64(-1)),
                ))
            }
            AxisKind::SparseVariable { .. } | AxisKind::SparseFixed { .. } => {
                if !y.sorted {
                    return Err(LowerError::UnsortedSearch {
                        buffer: buffer.to_string(),
                        axis: ax.clone(),
                    });
                }
                let pp = positions[d - 1].clone();
                let (lo, hi) = match &y.kind {
                    AxisKind::SparseFixed { nnz_cols, .. } => {
                        let lo = Expr::mul(pp, size_expr(nnz_cols));
                        (lo.clone(), Expr::add(lo, size_expr(nnz_cols)))
                    }
                    _ => segment_bounds(y, pp.clone()),
                };
                Translated::Maybe(Expr::Search {
                    buffer: indices_name(ax),
                    lo: Box::new(lo),
                    hi: Box::new(hi),
                    value: Box::new(c),
                })
            }
            AxisKind::Attached { .. } => {
                return Err(LowerError::Malformed {
                    what: format!("access to `{buffer}` over attached axis `{ax}`"),
                })
            }
        })
    }

    /// Whether the computed coordinate `c` (of dense axis `y`) is `t * f + o`: `t` the
    /// coordinate of an iterator over an axis declared to tile `y`'s extent by `f`
    /// ([`lacuna_stage1::Tiles`], checked when bound, as the iterator's coordinates are) and `o`
    /// an iterator's over a dense axis of at most `f` coordinates. It then lies in `y`.
    fn tiled_within(&self, c: &Expr, y: &Axis, scope: &[ScopeVar]) -> bool {
        let AxisKind::DenseFixed { n } = &y.kind else {
            return false;
        };
        let Expr::Binary(BinOp::Add, a, b) = c else {
            return false;
        };
        let axis_of = |v: &str| {
            self.lookup(scope, v)
                .ok()
                .and_then(|sv| self.p.axis(&sv.axis))
        };
        let tile = |e: &Expr| -> Option<u64> {
            let Expr::Binary(BinOp::Mul, l, r) = e else {
                return None;
            };
            let ((Expr::Coord(t), Expr::Int(f, _)) | (Expr::Int(f, _), Expr::Coord(t))) =
                (l.as_ref(), r.as_ref())
            else {
                return None;
            };
            let tiles = axis_of(t)?.tiles.as_ref()?;
            (tiles.extent == *n && i64::try_from(tiles.factor) == Ok(*f)).then_some(tiles.factor)
        };
        let offset_below = |e: &Expr, f: u64| {
            let Expr::Coord(o) = e else {
                return false;
            };
            axis_of(o).is_some_and(
                |a| matches!(&a.kind, AxisKind::DenseFixed { n: Size::Const(m) } if *m <= f),
            )
        };
        [(a, b), (b, a)]
            .into_iter()
            .any(|(t, o)| tile(t).is_some_and(|f| offset_below(o, f)))
    }

    /// Whether `c` loads an input declared `coordinates_of` an axis whose coordinates range
    /// over dense axis `y` (the same extent): bound data was checked to lie in `0..extent`.
    fn holds_coordinates(&self, c: &Expr, y: &Axis) -> bool {
        let load = match c {
            Expr::Cast(DType::I64, inner) => inner.as_ref(),
            other => other,
        };
        let Expr::Load { buffer, .. } = load else {
            return false;
        };
        let AxisKind::DenseFixed { n } = &y.kind else {
            return false;
        };
        self.p
            .buffer(buffer)
            .and_then(|b| b.coordinates_of.as_deref())
            .and_then(|x| self.p.axis(x))
            .is_some_and(|x| x.kind.coord_extent() == n)
    }

    /// Whether `buffer[indices]` is an element of an input at constant coordinates inside its
    /// axes' constant extents (e.g. the one value of an `iso_values` buffer, `A.iso[0]`): a
    /// load that is always in bounds and reads what no statement writes.
    fn constant_input_element(&self, buffer: &str, indices: &[Expr]) -> bool {
        let Some(b) = self.p.buffer(buffer) else {
            return false;
        };
        b.role == lacuna_stage1::Role::Input
            && b.axes.len() == indices.len()
            && b.axes.iter().zip(indices).all(|(ax, i)| {
                matches!(self.p.axis(ax).map(|a| &a.kind),
                    Some(AxisKind::DenseFixed { n }) if constant_inside(i, n))
            })
    }

    /// Binds `value` to a `let` (reusing one of equal value in `pre`) and returns its variable.
    fn bind_value(value: Expr, pre: &mut Vec<Stmt>, counter: &mut usize) -> Expr {
        let existing = pre.iter().find_map(|s| match s {
            Stmt::Let { var, value: v } if *v == value => Some(var.clone()),
            _ => None,
        });
        let name = existing.unwrap_or_else(|| {
            let name = format!("_p{counter}");
            *counter += 1;
            pre.push(Stmt::Let {
                var: name.clone(),
                value,
            });
            name
        });
        Expr::var(&name)
    }

    /// Binds a position that may be missing to a fresh `let` and extends the access's guard.
    /// Positions after a missing entry are never computed: the chain stays at -1.
    fn bind_position(
        &mut self,
        pos: Translated,
        guard: &mut Option<Expr>,
        pre: &mut Vec<Stmt>,
    ) -> Expr {
        let pos = match pos {
            Translated::Always(p) => return p,
            Translated::Maybe(p) => p,
        };
        let pos = match guard.as_ref() {
            Some(g) => Expr::Select(Box::new(g.clone()), Box::new(pos), Box::new(Expr::i64(-1))),
            None => pos,
        };
        // One statement reading and writing the same element (`C[r, k] = C[r, k] + ...`)
        // computes its position once.
        let var = Self::bind_value(pos, pre, &mut self.counter);
        *guard = Some(Expr::bin(BinOp::Ge, var.clone(), Expr::i64(0)));
        var
    }
}

/// Whether coordinate `c` is an integer constant inside the constant extent `n`.
fn constant_inside(c: &Expr, n: &Size) -> bool {
    match (c, n) {
        (Expr::Int(v, _), Size::Const(n)) => u64::try_from(*v).is_ok_and(|v| v < *n),
        _ => false,
    }
}

/// A translated position: always stored, or -1 when the coordinate is not stored.
enum Translated {
    Always(Expr),
    Maybe(Expr),
}
