//! The stage-I interpreter: runs a program directly in coordinate space.
//!
//! It shares no code with lowering: iteration spaces are enumerated from the axes' structure,
//! and every buffer access looks its coordinates up by a linear scan of the stored coordinates.
//! It is the oracle the compiled code is checked against.

use crate::data::{size_value, Bindings};
use crate::ir::{AxisKind, BinOp, Expr, IterKind, Iteration, Program, Stmt, Store, UnOp};
use crate::verify::{resolve_index, resolve_literals};
use lacuna_ir::{DType, Scalar};
use std::collections::BTreeMap;

/// A failure while interpreting (inconsistent bindings or an unsupported construct).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum InterpError {
    /// A construct this interpreter does not run.
    #[error("{what}")]
    Unsupported {
        /// What.
        what: String,
    },
    /// A buffer, axis or parameter has no data.
    #[error("no data bound for {what} `{name}`")]
    Unbound {
        /// `buffer`, `axis` or `parameter`.
        what: &'static str,
        /// Its name.
        name: String,
    },
    /// A coordinate is outside a dense axis.
    #[error("coordinate {coord} is out of range for axis `{axis}` (extent {extent}) in buffer `{buffer}`")]
    OutOfRange {
        /// The buffer.
        buffer: String,
        /// The axis.
        axis: String,
        /// The coordinate.
        coord: i64,
        /// The extent.
        extent: i64,
    },
    /// The init block of an iteration ranges over a spatial axis nested in a reduction axis.
    #[error("iteration `{iteration}`: spatial axis `{axis}` depends on reduction axis `{parent}`, so its init has no well-defined space")]
    InitSpace {
        /// The iteration.
        iteration: String,
        /// The spatial axis.
        axis: String,
        /// Its reduction parent.
        parent: String,
    },
}

/// One dimension of an access: the buffer's axis, the coordinate, the axis's extent, and the
/// position when the index iterates that axis itself.
type Located<'a> = (&'a crate::ir::Axis, i64, i64, Option<usize>);

/// The `indptr` and `indices` of an axis, widened to `i64`.
type Structure = (Option<Vec<i64>>, Option<Vec<i64>>);

#[derive(Clone, Copy)]
struct Point {
    coord: i64,
    offset: usize,
}

struct Interp<'a> {
    p: &'a Program,
    b: &'a mut Bindings,
    dtypes: BTreeMap<String, DType>,
    structure: BTreeMap<String, Structure>,
}

/// Runs `p` on `b`, updating the output and intermediate buffers in place.
pub fn interpret(p: &Program, b: &mut Bindings) -> Result<(), InterpError> {
    let dtypes = p
        .buffers
        .iter()
        .map(|x| (x.name.clone(), x.dtype))
        .collect();
    let structure = b
        .axes
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                (
                    v.indptr.as_ref().map(|x| x.to_i64_vec()),
                    v.indices.as_ref().map(|x| x.to_i64_vec()),
                ),
            )
        })
        .collect();
    let mut it = Interp {
        p,
        b,
        dtypes,
        structure,
    };
    let scope = Vec::new();
    it.stmts(&p.body, &scope)
}

type Scope<'s> = Vec<(&'s str, &'s str, Point)>; // (var, axis, point)

impl<'a> Interp<'a> {
    fn stmts<'s>(&mut self, stmts: &'s [Stmt], scope: &Scope<'s>) -> Result<(), InterpError> {
        for s in stmts {
            match s {
                Stmt::Store(st) => self.store(st, scope)?,
                Stmt::Iter(it) => self.iteration(it, scope)?,
            }
        }
        Ok(())
    }

    fn param(&self, s: &crate::ir::Size) -> Result<i64, InterpError> {
        size_value(s, &self.b.params).ok_or_else(|| InterpError::Unbound {
            what: "parameter",
            name: s.to_string(),
        })
    }

    /// The stored points of `axis` under the current scope.
    fn points(&self, axis: &str, scope: &Scope<'_>) -> Result<Vec<Point>, InterpError> {
        let a = self.p.axis(axis).expect("verified");
        let parent_off = |parent: &str| {
            scope
                .iter()
                .rev()
                .find(|(_, ax, _)| *ax == parent)
                .map(|(_, _, pt)| pt.offset)
                .expect("verified: parents are iterated first")
        };
        let st = || {
            self.structure
                .get(axis)
                .ok_or_else(|| InterpError::Unbound {
                    what: "axis",
                    name: axis.to_string(),
                })
        };
        Ok(match &a.kind {
            AxisKind::DenseFixed { n } => (0..self.param(n)?)
                .map(|c| Point {
                    coord: c,
                    offset: c as usize,
                })
                .collect(),
            AxisKind::DenseVariable { parent, .. } | AxisKind::SparseVariable { parent, .. } => {
                let (indptr, indices) = st()?;
                let ip = indptr.as_ref().ok_or_else(|| InterpError::Unbound {
                    what: "axis",
                    name: axis.to_string(),
                })?;
                let (lo, hi) = a.kind.segment_slots(parent_off(parent));
                let (s, t) = (ip[lo] as usize, ip[hi] as usize);
                (s..t)
                    .map(|q| Point {
                        coord: indices.as_ref().map_or((q - s) as i64, |ind| ind[q]),
                        offset: q,
                    })
                    .collect()
            }
            AxisKind::SparseFixed {
                parent, nnz_cols, ..
            } => {
                let (_, indices) = st()?;
                let ind = indices.as_ref().ok_or_else(|| InterpError::Unbound {
                    what: "axis",
                    name: axis.to_string(),
                })?;
                let w = self.param(nnz_cols)? as usize;
                let o = parent_off(parent);
                (o * w..(o + 1) * w)
                    .map(|q| Point {
                        coord: ind[q],
                        offset: q,
                    })
                    .collect()
            }
            AxisKind::Attached { base, parent, .. } => {
                // The fiber of `base` under the detached parent position equal to the new
                // parent's coordinate.
                let c = scope
                    .iter()
                    .rev()
                    .find(|(_, ax, _)| *ax == parent)
                    .map(|(_, _, pt)| pt.coord)
                    .expect("verified: parents are iterated first");
                let b = self.p.axis(base).expect("verified");
                let detached = b.kind.parent().expect("verified: the base has a parent");
                let ext =
                    self.param(self.p.axis(detached).expect("verified").kind.coord_extent())?;
                if c < 0 || c >= ext {
                    return Ok(Vec::new());
                }
                let c = c as usize;
                let (indptr, indices) =
                    self.structure
                        .get(base.as_str())
                        .ok_or_else(|| InterpError::Unbound {
                            what: "axis",
                            name: base.to_string(),
                        })?;
                let unbound = || InterpError::Unbound {
                    what: "axis",
                    name: base.to_string(),
                };
                let (s, t) = match (&b.kind, indptr) {
                    (AxisKind::SparseFixed { nnz_cols, .. }, _) => {
                        let w = self.param(nnz_cols)? as usize;
                        (c * w, (c + 1) * w)
                    }
                    (kind, Some(ip)) => {
                        let (lo, hi) = kind.segment_slots(c);
                        (ip[lo] as usize, ip[hi] as usize)
                    }
                    (_, None) => return Err(unbound()),
                };
                (s..t)
                    .map(|q| Point {
                        coord: indices.as_ref().map_or((q - s) as i64, |ind| ind[q]),
                        offset: q,
                    })
                    .collect()
            }
        })
    }

    fn iteration<'s>(&mut self, it: &'s Iteration, scope: &Scope<'s>) -> Result<(), InterpError> {
        let kinds = it.iter_kinds().expect("verified");
        if !it.init.is_empty() {
            // Init runs once per point of the spatial sub-space.
            let spatial: Vec<usize> = (0..it.axes.len())
                .filter(|&i| kinds[i] == IterKind::S)
                .collect();
            for &i in &spatial {
                if let Some(parent) = self.p.axis(&it.axes[i]).and_then(|a| a.kind.parent()) {
                    if let Some(pi) = it.axes.iter().position(|x| x == parent) {
                        if kinds[pi] == IterKind::R {
                            return Err(InterpError::InitSpace {
                                iteration: it.name.clone(),
                                axis: it.axes[i].clone(),
                                parent: parent.to_string(),
                            });
                        }
                    }
                }
            }
            self.nest(it, &spatial, 0, &mut scope.clone(), &it.init)?;
        }
        let all: Vec<usize> = (0..it.axes.len()).collect();
        self.nest(it, &all, 0, &mut scope.clone(), &it.body)
    }

    fn nest<'s>(
        &mut self,
        it: &'s Iteration,
        which: &[usize],
        d: usize,
        scope: &mut Scope<'s>,
        body: &'s [Stmt],
    ) -> Result<(), InterpError> {
        if d == which.len() {
            return self.stmts(body, scope);
        }
        let i = which[d];
        for pt in self.points(&it.axes[i], scope)? {
            scope.push((&it.vars[i], &it.axes[i], pt));
            self.nest(it, which, d + 1, scope, body)?;
            scope.pop();
        }
        Ok(())
    }

    /// Looks a buffer element up by coordinates; `None` when not stored. On non-unique levels
    /// (COO) a coordinate may sit at several positions: every one is tried, depth first.
    fn locate(
        &self,
        buffer: &str,
        indices: &[Expr],
        scope: &Scope<'_>,
    ) -> Result<Option<usize>, InterpError> {
        let buf = self.p.buffer(buffer).expect("verified");
        let mut coords = Vec::with_capacity(indices.len());
        let mut direct_prev = true;
        for (ax, index) in buf.axes.iter().zip(indices) {
            // An iterator over this very axis (under the same parent) stands for the stored
            // element it visits, not for a coordinate to look up: padding or repeated
            // coordinates (ELL, COO) are distinct elements.
            let own = index
                .as_var()
                .and_then(|v| scope.iter().rev().find(|(x, _, _)| *x == v))
                .filter(|(_, a, _)| a == ax);
            let direct = match own {
                Some((_, _, pt)) if direct_prev => Some(pt.offset),
                _ => None,
            };
            direct_prev = direct.is_some();
            let index = resolve_index(index, &self.dtypes);
            let c = self.eval(&index, scope)?.as_i64();
            let a = self.p.axis(ax).expect("verified");
            let extent = self.param(a.kind.coord_extent())?;
            // A coordinate outside the axis is not stored: loads read the default value and
            // stores are masked.
            if c < 0 || c >= extent {
                return Ok(None);
            }
            coords.push((a, c, extent, direct));
        }
        self.find(&coords, 0, 0)
    }

    fn find(
        &self,
        coords: &[Located<'_>],
        d: usize,
        off: usize,
    ) -> Result<Option<usize>, InterpError> {
        let Some(&(a, c, extent, direct)) = coords.get(d) else {
            return Ok(Some(off));
        };
        if let AxisKind::DenseFixed { .. } = a.kind {
            return self.find(coords, d + 1, off * extent as usize + c as usize);
        }
        if let Some(position) = direct {
            return self.find(coords, d + 1, position);
        }
        let st = self
            .structure
            .get(a.name.as_str())
            .ok_or_else(|| InterpError::Unbound {
                what: "axis",
                name: a.name.clone(),
            })?;
        let (s, t) = match (&st.0, &a.kind) {
            (_, AxisKind::SparseFixed { nnz_cols, .. }) => {
                let w = self.param(nnz_cols)? as usize;
                (off * w, off * w + w)
            }
            (Some(ip), kind) => {
                let (lo, hi) = kind.segment_slots(off);
                (ip[lo] as usize, ip[hi] as usize)
            }
            (None, _) => return Ok(None),
        };
        match &st.1 {
            None if (c as usize) < t - s => self.find(coords, d + 1, s + c as usize),
            None => Ok(None),
            Some(ind) => {
                for q in (s..t).filter(|&q| ind[q] == c) {
                    if let Some(found) = self.find(coords, d + 1, q)? {
                        return Ok(Some(found));
                    }
                }
                Ok(None)
            }
        }
    }

    fn store<'s>(&mut self, st: &Store, scope: &Scope<'s>) -> Result<(), InterpError> {
        let buf = self.p.buffer(&st.buffer).expect("verified");
        let value = resolve_literals(&st.value, Some(buf.dtype), &self.dtypes);
        let v = self.eval(&value, scope)?.cast(buf.dtype);
        // A store to coordinates outside a sparse buffer's pattern is masked.
        if let Some(off) = self.locate(&st.buffer, &st.indices, scope)? {
            let data = self
                .b
                .buffers
                .get_mut(&st.buffer)
                .ok_or_else(|| InterpError::Unbound {
                    what: "buffer",
                    name: st.buffer.clone(),
                })?;
            data.set(off, v);
        }
        Ok(())
    }

    fn eval(&self, e: &Expr, scope: &Scope<'_>) -> Result<Scalar, InterpError> {
        Ok(match e {
            Expr::Int(v) => Scalar::I64(*v),
            Expr::Float(v) => Scalar::F64(*v),
            Expr::Var(v) => Scalar::I64(
                scope
                    .iter()
                    .rev()
                    .find(|(x, _, _)| x == v)
                    .map(|(_, _, pt)| pt.coord)
                    .expect("verified"),
            ),
            Expr::Load { buffer, indices } => {
                let buf = self.p.buffer(buffer).expect("verified");
                match self.locate(buffer, indices, scope)? {
                    Some(off) => {
                        let data =
                            self.b
                                .buffers
                                .get(buffer)
                                .ok_or_else(|| InterpError::Unbound {
                                    what: "buffer",
                                    name: buffer.clone(),
                                })?;
                        data.get(off).ok_or_else(|| InterpError::Unbound {
                            what: "buffer",
                            name: buffer.clone(),
                        })?
                    }
                    None => Scalar::F64(buf.default_value.unwrap_or(0.0)).cast(buf.dtype),
                }
            }
            Expr::Unary(op, a) => eval_unop(*op, self.eval(a, scope)?),
            Expr::Binary(op, a, b) => {
                let x = self.eval(a, scope)?;
                match op {
                    BinOp::And if !x.as_bool() => Scalar::Bool(false),
                    BinOp::Or if x.as_bool() => Scalar::Bool(true),
                    _ => eval_binop(*op, x, self.eval(b, scope)?),
                }
            }
            Expr::Select(c, a, b) => {
                if self.eval(c, scope)?.as_bool() {
                    self.eval(a, scope)?
                } else {
                    self.eval(b, scope)?
                }
            }
            Expr::Cast(t, a) => self.eval(a, scope)?.cast(*t),
            Expr::Semiring(s) => {
                return Err(InterpError::Unsupported {
                    what: format!("`{s}`: semiring operations run by co-iteration only"),
                })
            }
        })
    }
}

/// The meaning of a unary operation on a typed scalar (shared by the interpreters; the code
/// generator implements the same semantics independently).
pub fn eval_unop(op: UnOp, x: Scalar) -> Scalar {
    match (op, x) {
        (UnOp::Neg, Scalar::F32(v)) => Scalar::F32(-v),
        (UnOp::Neg, Scalar::F64(v)) => Scalar::F64(-v),
        (UnOp::Neg, Scalar::I8(v)) => Scalar::I8(v.wrapping_neg()),
        (UnOp::Neg, Scalar::I32(v)) => Scalar::I32(v.wrapping_neg()),
        (UnOp::Neg, Scalar::I64(v)) => Scalar::I64(v.wrapping_neg()),
        (UnOp::Abs, Scalar::F32(v)) => Scalar::F32(v.abs()),
        (UnOp::Abs, Scalar::F64(v)) => Scalar::F64(v.abs()),
        (UnOp::Abs, Scalar::I8(v)) => Scalar::I8(v.wrapping_abs()),
        (UnOp::Abs, Scalar::I32(v)) => Scalar::I32(v.wrapping_abs()),
        (UnOp::Abs, Scalar::I64(v)) => Scalar::I64(v.wrapping_abs()),
        (UnOp::Exp, Scalar::F32(v)) => Scalar::F32(v.exp()),
        (UnOp::Exp, v) => Scalar::F64(v.as_f64().exp()),
        (UnOp::Log, Scalar::F32(v)) => Scalar::F32(v.ln()),
        (UnOp::Log, v) => Scalar::F64(v.as_f64().ln()),
        (UnOp::Sqrt, Scalar::F32(v)) => Scalar::F32(v.sqrt()),
        (UnOp::Sqrt, v) => Scalar::F64(v.as_f64().sqrt()),
        (UnOp::Not, v) => Scalar::Bool(!v.as_bool()),
        (UnOp::Neg | UnOp::Abs, Scalar::Bool(v)) => Scalar::Bool(v),
    }
}

/// The meaning of a binary operation on two scalars of the same type: IEEE floats (min/max
/// ignore a NaN operand), wrapping integers, integer division by zero gives zero.
pub fn eval_binop(op: BinOp, x: Scalar, y: Scalar) -> Scalar {
    use Scalar::*;
    match op {
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => {
            let r = match (x, y) {
                (I8(a), I8(b)) => cmp(op, a, b),
                (I32(a), I32(b)) => cmp(op, a, b),
                (I64(a), I64(b)) => cmp(op, a, b),
                (F32(a), F32(b)) => cmp(op, a, b),
                (a, b) => cmp(op, a.as_f64(), b.as_f64()),
            };
            Bool(r)
        }
        BinOp::And => Bool(x.as_bool() && y.as_bool()),
        BinOp::Or => Bool(x.as_bool() || y.as_bool()),
        _ => match (x, y) {
            (F32(a), F32(b)) => F32(match op {
                BinOp::Add => a + b,
                BinOp::Sub => a - b,
                BinOp::Mul => a * b,
                BinOp::Div => a / b,
                BinOp::Min => a.min(b),
                BinOp::Max => a.max(b),
                _ => a.powf(b),
            }),
            (I8(a), I8(b)) => I8(match op {
                BinOp::Add => a.wrapping_add(b),
                BinOp::Sub => a.wrapping_sub(b),
                BinOp::Mul => a.wrapping_mul(b),
                BinOp::Div => {
                    if b == 0 {
                        0
                    } else {
                        a.wrapping_div(b)
                    }
                }
                BinOp::Min => a.min(b),
                _ => a.max(b),
            }),
            (I32(a), I32(b)) => I32(match op {
                BinOp::Add => a.wrapping_add(b),
                BinOp::Sub => a.wrapping_sub(b),
                BinOp::Mul => a.wrapping_mul(b),
                BinOp::Div => {
                    if b == 0 {
                        0
                    } else {
                        a.wrapping_div(b)
                    }
                }
                BinOp::Min => a.min(b),
                _ => a.max(b),
            }),
            (I64(a), I64(b)) => I64(match op {
                BinOp::Add => a.wrapping_add(b),
                BinOp::Sub => a.wrapping_sub(b),
                BinOp::Mul => a.wrapping_mul(b),
                BinOp::Div => {
                    if b == 0 {
                        0
                    } else {
                        a.wrapping_div(b)
                    }
                }
                BinOp::Min => a.min(b),
                _ => a.max(b),
            }),
            (a, b) => {
                let (a, b) = (a.as_f64(), b.as_f64());
                F64(match op {
                    BinOp::Add => a + b,
                    BinOp::Sub => a - b,
                    BinOp::Mul => a * b,
                    BinOp::Div => a / b,
                    BinOp::Min => a.min(b),
                    BinOp::Max => a.max(b),
                    _ => a.powf(b),
                })
            }
        },
    }
}

fn cmp<T: PartialOrd>(op: BinOp, a: T, b: T) -> bool {
    match op {
        BinOp::Lt => a < b,
        BinOp::Le => a <= b,
        BinOp::Gt => a > b,
        BinOp::Ge => a >= b,
        BinOp::Eq => a == b,
        _ => a != b,
    }
}
