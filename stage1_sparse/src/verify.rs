//! Validation of stage-I programs, and the type rules of scalar expressions.
//!
//! Type rules: loads have their buffer's type, iterator variables are `i64`, literals are *weak*
//! (an integer literal takes the type of the other operand, a float literal any float type), both
//! operands of a binary operation have the same type, comparisons give `bool`, and conversions are
//! explicit casts (`f64(x)`).

use crate::ir::{
    substitute, AxisKind, BinOp, Expr, IterKind, Iteration, Program, Region, Role, Semiring, Size,
    Stmt, Store, UnOp, KERNEL_FORMAT_VERSION,
};
use lacuna_ir::DType;
use std::collections::{BTreeMap, BTreeSet};

/// A stage-I program that breaks a rule, with the construct that breaks it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The kernel file has a version this build does not read.
    #[error("kernel format version {found} is not supported (expected {expected})")]
    Version {
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        expected: u32,
    },
    /// Two things of one kind share a name.
    #[error("duplicate {what} `{name}`")]
    Duplicate {
        /// `axis`, `buffer`, `parameter`, `iteration` or `iterator variable`.
        what: &'static str,
        /// The repeated name.
        name: String,
    },
    /// A size names a parameter that is not declared.
    #[error("{context}: unknown parameter `{param}` (declare it in `params`)")]
    UnknownParam {
        /// Where the size appears.
        context: String,
        /// The undeclared parameter.
        param: String,
    },
    /// An axis's `tiles` assertion is malformed.
    #[error("axis `{axis}`: tiles: {reason}")]
    Tiles {
        /// The axis.
        axis: String,
        /// What is wrong.
        reason: String,
    },
    /// A buffer's encoding is malformed or not supported in kernels.
    #[error("buffer `{buffer}`: encoding: {rendered}")]
    Encoding {
        /// The buffer.
        buffer: String,
        /// The problem, with the encoding text and a caret where it applies.
        rendered: String,
    },
    /// A fused pair is not a dense axis directly followed by its variable child.
    #[error("iteration `{iteration}`: cannot fuse `{outer}` and `{inner}`: fusion needs a dense_fixed axis directly followed in the iteration by its dense_variable or sparse_variable child")]
    BadFuse {
        /// The iteration.
        iteration: String,
        /// The outer axis.
        outer: String,
        /// The inner axis.
        inner: String,
    },
    /// An iterator variable has the name of a parameter.
    #[error("iteration `{iteration}`: iterator variable `{var}` has the name of a parameter; rename one of them")]
    VarShadowsParam {
        /// The iteration.
        iteration: String,
        /// The variable.
        var: String,
    },
    /// A name that should be an axis is not one.
    #[error("{context}: unknown axis `{axis}`")]
    UnknownAxis {
        /// Where the name appears.
        context: String,
        /// The unknown name.
        axis: String,
    },
    /// An axis names a parent defined after it (or itself).
    #[error("axis `{axis}`: its parent `{parent}` must be defined before it")]
    ParentOrder {
        /// The child axis.
        axis: String,
        /// Its parent.
        parent: String,
    },
    /// An attached axis's base cannot be re-parented.
    #[error("axis `{axis}`: cannot attach `{base}`: {reason}")]
    AttachBase {
        /// The attached axis.
        axis: String,
        /// Its base.
        base: String,
        /// Why not (the base has no parent, its parent is not dense_fixed, ...).
        reason: String,
    },
    /// An attached axis's extents do not match those of its base.
    #[error("axis `{axis}`: {what} extent {found} differs from {expected_from} extent {expected}")]
    AttachExtent {
        /// The attached axis.
        axis: String,
        /// Which extent: `new parent `J`` or `coordinate`.
        what: String,
        /// Its extent.
        found: Size,
        /// What it must match, e.g. `the base's parent `J_detach``.
        expected_from: String,
        /// That extent.
        expected: Size,
    },
    /// A buffer is declared over an attached axis (which owns no storage).
    #[error("buffer `{buffer}`: axis `{axis}` is attached and owns no storage; declare the buffer over its base `{base}`")]
    AttachedBufferAxis {
        /// The buffer.
        buffer: String,
        /// The attached axis.
        axis: String,
        /// Its base.
        base: String,
    },
    /// In a buffer's axis list, an axis with a parent does not directly follow it.
    #[error("buffer `{buffer}`: axis `{axis}` must directly follow its parent `{parent}`")]
    BufferAxisOrder {
        /// The buffer.
        buffer: String,
        /// The child axis.
        axis: String,
        /// Its parent.
        parent: String,
    },
    /// A buffer has element type `bool`.
    #[error("buffer `{buffer}`: element type bool is not allowed (use i32)")]
    BoolBuffer {
        /// The buffer.
        buffer: String,
    },
    /// A buffer declared `coordinates_of` an axis cannot hold its coordinates.
    #[error("buffer `{buffer}`: coordinates_of `{axis}`: {reason}")]
    CoordinatesOf {
        /// The buffer.
        buffer: String,
        /// The axis named.
        axis: String,
        /// Why not.
        reason: String,
    },
    /// A statement names an unknown buffer.
    #[error("{context}: unknown buffer `{buffer}`")]
    UnknownBuffer {
        /// The statement.
        context: String,
        /// The unknown name.
        buffer: String,
    },
    /// The `kinds` string of an iteration is malformed.
    #[error("iteration `{iteration}`: kinds \"{kinds}\" must be one letter S or R per axis ({n_axes} axes)")]
    BadKinds {
        /// The iteration.
        iteration: String,
        /// The kinds string.
        kinds: String,
        /// Number of axes.
        n_axes: usize,
    },
    /// An iteration has a different number of variables and axes.
    #[error("iteration `{iteration}`: {n_vars} iterator variables for {n_axes} axes")]
    VarCount {
        /// The iteration.
        iteration: String,
        /// Number of variables.
        n_vars: usize,
        /// Number of axes.
        n_axes: usize,
    },
    /// An iterated axis's parent is not iterated before it.
    #[error("iteration `{iteration}`: axis `{axis}` is iterated but its parent `{parent}` is not iterated before it")]
    ParentNotIterated {
        /// The iteration.
        iteration: String,
        /// The child axis.
        axis: String,
        /// Its parent.
        parent: String,
    },
    /// A variable used in a statement is not bound by an enclosing iteration.
    #[error("{context}: `{var}` is not an iterator variable of an enclosing iteration")]
    UnknownVar {
        /// The statement.
        context: String,
        /// The unbound name.
        var: String,
    },
    /// A buffer access has the wrong number of indices.
    #[error("{context}: buffer `{buffer}` has {expected} axes but is indexed with {found}")]
    Arity {
        /// The statement.
        context: String,
        /// The buffer.
        buffer: String,
        /// Its rank.
        expected: usize,
        /// Number of indices.
        found: usize,
    },
    /// A statement writes an input buffer.
    #[error("{context}: buffer `{buffer}` is an input and cannot be written (make it an Output or Alloc)")]
    WriteToInput {
        /// The statement.
        context: String,
        /// The buffer.
        buffer: String,
    },
    /// An iterator indexes a buffer axis whose coordinate extent differs from its own.
    #[error("{context}: `{var}` iterates axis `{var_axis}` (extent {var_extent}) but indexes axis `{axis}` of `{buffer}` (extent {axis_extent})")]
    ExtentMismatch {
        /// The statement.
        context: String,
        /// The buffer.
        buffer: String,
        /// The buffer's axis.
        axis: String,
        /// Its coordinate extent.
        axis_extent: Size,
        /// The iterator.
        var: String,
        /// The iterator's axis.
        var_axis: String,
        /// Its coordinate extent.
        var_extent: Size,
    },
    /// A reduction axis indexes the buffer the iteration writes.
    #[error("iteration `{iteration}`: axis `{axis}` is marked reduction (R) but indexes the written buffer `{buffer}`; mark it S")]
    ReductionIndexesOutput {
        /// The iteration.
        iteration: String,
        /// The axis.
        axis: String,
        /// The written buffer.
        buffer: String,
    },
    /// A spatial axis does not index the buffer the iteration writes.
    #[error("iteration `{iteration}`: axis `{axis}` is marked spatial (S) but does not index the written buffer `{buffer}`; a reduction axis must be marked R")]
    SpatialNotIndexing {
        /// The iteration.
        iteration: String,
        /// The axis.
        axis: String,
        /// The written buffer.
        buffer: String,
    },
    /// A type error in an expression.
    #[error("{context}: {message}")]
    Type {
        /// The statement.
        context: String,
        /// What is wrong.
        message: String,
    },
}

/// The type of an expression: a dtype, and whether it comes from a literal (weak).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ty {
    /// The element type.
    pub dtype: DType,
    /// True when the type may still adapt to its context.
    pub weak: bool,
}

/// Unifies two operand types under the weak-literal rule.
pub fn unify(a: Ty, b: Ty) -> Result<Ty, String> {
    match (a.weak, b.weak) {
        (false, false) if a.dtype == b.dtype => Ok(a),
        (false, false) => Err(format!(
            "operands have types {} and {}; insert a cast",
            a.dtype, b.dtype
        )),
        (true, false) => adapt(a, b.dtype),
        (false, true) => adapt(b, a.dtype),
        (true, true) => Ok(Ty {
            dtype: if a.dtype.is_float() || b.dtype.is_float() {
                DType::F64
            } else {
                DType::I64
            },
            weak: true,
        }),
    }
}

fn adapt(weak: Ty, to: DType) -> Result<Ty, String> {
    if weak.dtype.is_float() && !to.is_float() {
        Err(format!(
            "a float literal cannot be used as {to}; insert a cast"
        ))
    } else if to == DType::Bool {
        Err("a numeric literal cannot be used as bool".to_string())
    } else {
        Ok(Ty {
            dtype: to,
            weak: false,
        })
    }
}

/// Infers the type of `e`; `buffers` gives element types, iterator variables are `i64`.
pub fn type_of(e: &Expr, buffers: &BTreeMap<String, DType>) -> Result<Ty, String> {
    Ok(match e {
        Expr::Int(_) => Ty {
            dtype: DType::I64,
            weak: true,
        },
        Expr::Float(_) => Ty {
            dtype: DType::F64,
            weak: true,
        },
        Expr::Var(_) => Ty {
            dtype: DType::I64,
            weak: false,
        },
        Expr::Load { buffer, .. } => Ty {
            dtype: *buffers
                .get(buffer)
                .ok_or_else(|| format!("unknown buffer `{buffer}`"))?,
            weak: false,
        },
        Expr::Unary(op, a) => {
            let t = type_of(a, buffers)?;
            match op {
                UnOp::Not if t.dtype != DType::Bool => {
                    return Err(format!("`!` needs a bool operand, found {}", t.dtype))
                }
                UnOp::Not => t,
                UnOp::Neg | UnOp::Abs if t.dtype == DType::Bool => {
                    return Err("arithmetic on bool".into())
                }
                UnOp::Neg | UnOp::Abs => t,
                UnOp::Exp | UnOp::Log | UnOp::Sqrt => {
                    if t.weak {
                        Ty {
                            dtype: DType::F64,
                            weak: true,
                        }
                    } else if t.dtype.is_float() {
                        t
                    } else {
                        return Err(format!(
                            "{op:?} needs a float operand, found {}; insert a cast",
                            t.dtype
                        )
                        .to_lowercase());
                    }
                }
            }
        }
        Expr::Binary(op, a, b) => {
            let ta = type_of(a, buffers)?;
            let tb = type_of(b, buffers)?;
            if op.is_logical() {
                if ta.dtype != DType::Bool || tb.dtype != DType::Bool {
                    return Err(format!(
                        "`{op:?}` needs bool operands, found {} and {}",
                        ta.dtype, tb.dtype
                    ));
                }
                return Ok(ta);
            }
            if ta.dtype == DType::Bool || tb.dtype == DType::Bool {
                return Err(format!("{op:?} on bool operands").to_lowercase());
            }
            let t = unify(ta, tb)?;
            if op.is_comparison() {
                Ty {
                    dtype: DType::Bool,
                    weak: false,
                }
            } else if *op == BinOp::Pow && !t.dtype.is_float() {
                if !t.weak {
                    return Err(format!(
                        "pow needs float operands, found {}; insert a cast",
                        t.dtype
                    ));
                }
                // `pow(2, 3)`: integer literals are read as floats.
                Ty {
                    dtype: DType::F64,
                    weak: true,
                }
            } else {
                t
            }
        }
        Expr::Select(c, a, b) => {
            let tc = type_of(c, buffers)?;
            if tc.dtype != DType::Bool {
                return Err(format!(
                    "select's condition must be bool, found {}",
                    tc.dtype
                ));
            }
            unify(type_of(a, buffers)?, type_of(b, buffers)?)?
        }
        Expr::Cast(t, a) => {
            type_of(a, buffers)?;
            Ty {
                dtype: *t,
                weak: false,
            }
        }
        Expr::Semiring(s) => semiring_type(s, buffers)?,
    })
}

/// The type of a semiring operation: its regions (with `x`, `y` typed as the operands) must
/// agree with each other.
fn semiring_type(s: &Semiring, buffers: &BTreeMap<String, DType>) -> Result<Ty, String> {
    let with = |x: &Expr, y: Option<&Expr>, r: &Expr| {
        substitute(r, &|v| match v {
            "x" => Some(x.clone()),
            "y" => y.cloned(),
            _ => None,
        })
    };
    let mut types: Vec<(&str, Ty)> = Vec::new();
    let agree = |types: &[(&str, Ty)], what: &str| -> Result<Ty, String> {
        let mut it = types.iter();
        let Some(&(first_name, first)) = it.next() else {
            return Err(format!("`{what}` with every region empty has no entries"));
        };
        it.try_fold(first, |acc, &(name, t)| {
            unify(acc, t).map_err(|_| {
                format!(
                    "`{what}`: region `{first_name}` gives {} but region `{name}` gives {}",
                    acc.dtype, t.dtype
                )
            })
        })
    };
    match s {
        Semiring::Binary {
            a,
            b,
            overlap,
            left,
            right,
        } => {
            let (ta, tb) = (type_of(a, buffers)?, type_of(b, buffers)?);
            match overlap {
                Region::Expr(r) => types.push(("overlap", type_of(&with(a, Some(b), r), buffers)?)),
                Region::Identity => {
                    return Err("`binary`: the overlap region cannot be `identity`".into())
                }
                Region::Empty => {}
            }
            match left {
                Region::Expr(r) => types.push(("left", type_of(&with(a, None, r), buffers)?)),
                Region::Identity => types.push(("left", ta)),
                Region::Empty => {}
            }
            match right {
                // The right region's argument is `y`.
                Region::Expr(r) => types.push(("right", type_of(&with(b, Some(b), r), buffers)?)),
                Region::Identity => types.push(("right", tb)),
                Region::Empty => {}
            }
            agree(&types, "binary")
        }
        Semiring::Unary { a, present, absent } => {
            let ta = type_of(a, buffers)?;
            match present {
                Region::Expr(r) => types.push(("present", type_of(&with(a, None, r), buffers)?)),
                Region::Identity => types.push(("present", ta)),
                Region::Empty => {}
            }
            match absent {
                Region::Expr(r) => {
                    if r.mentions("x") {
                        return Err("`unary`: the absent region has no `x`".into());
                    }
                    types.push(("absent", type_of(r, buffers)?))
                }
                Region::Identity => {
                    return Err("`unary`: the absent region cannot be `identity`".into())
                }
                Region::Empty => {}
            }
            agree(&types, "unary")
        }
        Semiring::Select { a, pred } => {
            let ta = type_of(a, buffers)?;
            let tp = type_of(&with(a, None, pred), buffers)?;
            if tp.dtype != DType::Bool {
                return Err(format!(
                    "`select`'s predicate must be bool, found {}",
                    tp.dtype
                ));
            }
            Ok(ta)
        }
        Semiring::Reduce {
            value,
            combine,
            identity,
        } => {
            types.push(("value", type_of(value, buffers)?));
            types.push(("identity", type_of(identity, buffers)?));
            types.push((
                "combine",
                type_of(&with(value, Some(value), combine), buffers)?,
            ));
            agree(&types, "reduce")
        }
    }
}

struct Checker<'p> {
    p: &'p Program,
    params: BTreeSet<&'p str>,
    dtypes: BTreeMap<String, DType>,
    iter_names: BTreeSet<String>,
}

/// Checks every rule of stage I; returns the first violation.
pub fn verify(p: &Program) -> Result<(), VerifyError> {
    if p.version != KERNEL_FORMAT_VERSION {
        return Err(VerifyError::Version {
            found: p.version,
            expected: KERNEL_FORMAT_VERSION,
        });
    }
    let mut params = BTreeSet::new();
    for name in &p.params {
        if !params.insert(name.as_str()) {
            return Err(VerifyError::Duplicate {
                what: "parameter",
                name: name.clone(),
            });
        }
    }
    let mut seen_axes: BTreeSet<&str> = BTreeSet::new();
    for a in &p.axes {
        if !seen_axes.insert(&a.name) {
            return Err(VerifyError::Duplicate {
                what: "axis",
                name: a.name.clone(),
            });
        }
        if let Some(parent) = a.kind.parent() {
            if parent == a.name || !seen_axes.contains(parent) {
                if p.axis(parent).is_none() {
                    return Err(VerifyError::UnknownAxis {
                        context: format!("axis `{}`", a.name),
                        axis: parent.to_string(),
                    });
                }
                return Err(VerifyError::ParentOrder {
                    axis: a.name.clone(),
                    parent: parent.to_string(),
                });
            }
        }
        let sizes: Vec<&Size> = match &a.kind {
            AxisKind::DenseFixed { n } => vec![n],
            AxisKind::DenseVariable { max_len, nnz, .. } => vec![max_len, nnz],
            AxisKind::SparseFixed { n, nnz_cols, .. } => vec![n, nnz_cols],
            AxisKind::SparseVariable { n, nnz, .. } => vec![n, nnz],
            AxisKind::Attached { base, parent, n } => {
                check_attached(p, &seen_axes, &a.name, base, parent, n)?;
                vec![n]
            }
        };
        if let Some(t) = &a.tiles {
            if t.factor == 0 {
                return Err(VerifyError::Tiles {
                    axis: a.name.clone(),
                    reason: "the factor must be at least 1".into(),
                });
            }
        }
        for s in sizes.into_iter().chain(a.tiles.as_ref().map(|t| &t.extent)) {
            if let Size::Param(name) = s {
                if !params.contains(name.as_str()) {
                    return Err(VerifyError::UnknownParam {
                        context: format!("axis `{}`", a.name),
                        param: name.clone(),
                    });
                }
            }
        }
    }
    let mut dtypes = BTreeMap::new();
    for b in &p.buffers {
        if dtypes.insert(b.name.clone(), b.dtype).is_some() {
            return Err(VerifyError::Duplicate {
                what: "buffer",
                name: b.name.clone(),
            });
        }
        crate::sparsify::buffer_encoding(b)?;
        if b.dtype == DType::Bool {
            return Err(VerifyError::BoolBuffer {
                buffer: b.name.clone(),
            });
        }
        if let Some(axis) = &b.coordinates_of {
            let bad = |reason: &str| {
                Err(VerifyError::CoordinatesOf {
                    buffer: b.name.clone(),
                    axis: axis.clone(),
                    reason: reason.into(),
                })
            };
            if p.axis(axis).is_none() {
                return bad("no such axis");
            }
            if !matches!(b.dtype, DType::I8 | DType::I32 | DType::I64) {
                return bad("only integer buffers hold coordinates");
            }
            if b.role != Role::Input {
                return bad("only inputs are checked when bound (the kernel writes the others)");
            }
            if b.permutation && b.axes.len() != 1 {
                return bad("a permutation is a buffer of one axis");
            }
        } else if b.permutation {
            return Err(VerifyError::CoordinatesOf {
                buffer: b.name.clone(),
                axis: String::new(),
                reason: "a permutation must declare coordinates_of the axis it permutes".into(),
            });
        }
        for (d, ax) in b.axes.iter().enumerate() {
            let axis = p.axis(ax).ok_or_else(|| VerifyError::UnknownAxis {
                context: format!("buffer `{}`", b.name),
                axis: ax.clone(),
            })?;
            if let AxisKind::Attached { base, .. } = &axis.kind {
                return Err(VerifyError::AttachedBufferAxis {
                    buffer: b.name.clone(),
                    axis: ax.clone(),
                    base: base.clone(),
                });
            }
            if let Some(parent) = axis.kind.parent() {
                if d == 0 || b.axes[d - 1] != parent {
                    return Err(VerifyError::BufferAxisOrder {
                        buffer: b.name.clone(),
                        axis: ax.clone(),
                        parent: parent.to_string(),
                    });
                }
            }
        }
    }
    let mut c = Checker {
        p,
        params,
        dtypes,
        iter_names: BTreeSet::new(),
    };
    c.stmts(&p.body, &[], "kernel body")
}

/// The rules of an attached axis `name = attach(base, parent)`: `base` is defined before it, is a
/// variable or sparse axis (not itself attached) whose parent is a detached dense_fixed axis, and
/// that detached axis has the coordinate extent of the new parent; `n` is `base`'s extent.
fn check_attached(
    p: &Program,
    seen: &BTreeSet<&str>,
    name: &str,
    base: &str,
    parent: &str,
    n: &Size,
) -> Result<(), VerifyError> {
    let bad = |reason: String| VerifyError::AttachBase {
        axis: name.to_string(),
        base: base.to_string(),
        reason,
    };
    let b = p.axis(base).ok_or_else(|| VerifyError::UnknownAxis {
        context: format!("axis `{name}`"),
        axis: base.to_string(),
    })?;
    if base == name || !seen.contains(base) {
        return Err(bad(
            "the base must be defined before the attached axis".into()
        ));
    }
    if matches!(b.kind, AxisKind::Attached { .. }) {
        return Err(bad("the base is itself attached".into()));
    }
    let Some(detached) = b.kind.parent() else {
        return Err(bad(
            "the base is a root axis (dense_fixed); only an axis with a parent can be re-parented"
                .into(),
        ));
    };
    let d = p.axis(detached).ok_or_else(|| VerifyError::UnknownAxis {
        context: format!("axis `{base}`"),
        axis: detached.to_string(),
    })?;
    let AxisKind::DenseFixed { n: detached_n } = &d.kind else {
        return Err(bad(format!(
            "its parent `{detached}` is {}, not a detached dense_fixed axis (the fiber is chosen by coordinate, which is the position only on dense_fixed)",
            d.kind.keyword()
        )));
    };
    let np = p.axis(parent).ok_or_else(|| VerifyError::UnknownAxis {
        context: format!("axis `{name}`"),
        axis: parent.to_string(),
    })?;
    if np.kind.coord_extent() != detached_n {
        return Err(VerifyError::AttachExtent {
            axis: name.to_string(),
            what: format!("new parent `{parent}`"),
            found: np.kind.coord_extent().clone(),
            expected_from: format!("the base's parent `{detached}`"),
            expected: detached_n.clone(),
        });
    }
    if n != b.kind.coord_extent() {
        return Err(VerifyError::AttachExtent {
            axis: name.to_string(),
            what: "coordinate".into(),
            found: n.clone(),
            expected_from: format!("the base `{base}`"),
            expected: b.kind.coord_extent().clone(),
        });
    }
    Ok(())
}

/// An iterator variable in scope: its name and the axis it iterates.
#[derive(Clone)]
struct Bound<'a> {
    var: &'a str,
    axis: &'a str,
}

impl<'p> Checker<'p> {
    fn stmts(
        &mut self,
        stmts: &'p [Stmt],
        scope: &[Bound<'p>],
        _where: &str,
    ) -> Result<(), VerifyError> {
        for s in stmts {
            match s {
                Stmt::Store(st) => self.store(st, scope)?,
                Stmt::Iter(it) => self.iteration(it, scope)?,
            }
        }
        Ok(())
    }

    fn iteration(&mut self, it: &'p Iteration, outer: &[Bound<'p>]) -> Result<(), VerifyError> {
        if !self.iter_names.insert(it.name.clone()) {
            return Err(VerifyError::Duplicate {
                what: "iteration",
                name: it.name.clone(),
            });
        }
        let kinds = it
            .iter_kinds()
            .filter(|k| k.len() == it.axes.len())
            .ok_or_else(|| VerifyError::BadKinds {
                iteration: it.name.clone(),
                kinds: it.kinds.clone(),
                n_axes: it.axes.len(),
            })?;
        if it.vars.len() != it.axes.len() {
            return Err(VerifyError::VarCount {
                iteration: it.name.clone(),
                n_vars: it.vars.len(),
                n_axes: it.axes.len(),
            });
        }
        let mut scope: Vec<Bound<'p>> = outer.to_vec();
        for (ax, var) in it.axes.iter().zip(&it.vars) {
            let axis = self.p.axis(ax).ok_or_else(|| VerifyError::UnknownAxis {
                context: format!("iteration `{}`", it.name),
                axis: ax.clone(),
            })?;
            if let Some(parent) = axis.kind.parent() {
                if !scope.iter().any(|b| b.axis == parent) {
                    return Err(VerifyError::ParentNotIterated {
                        iteration: it.name.clone(),
                        axis: ax.clone(),
                        parent: parent.to_string(),
                    });
                }
            }
            if scope.iter().any(|b| b.var == var) || self.dtypes.contains_key(var) {
                return Err(VerifyError::Duplicate {
                    what: "iterator variable",
                    name: var.clone(),
                });
            }
            if self.params.contains(var.as_str()) {
                return Err(VerifyError::VarShadowsParam {
                    iteration: it.name.clone(),
                    var: var.clone(),
                });
            }
            scope.push(Bound { var, axis: ax });
        }
        for (outer, inner) in &it.fused {
            let at = it.axes.iter().position(|a| a == outer);
            let ok = at.is_some_and(|k| it.axes.get(k + 1) == Some(inner))
                && self
                    .p
                    .axis(outer)
                    .is_some_and(|a| matches!(a.kind, AxisKind::DenseFixed { .. }))
                && self.p.axis(inner).is_some_and(|a| {
                    a.kind.parent() == Some(outer.as_str()) && a.kind.has_indptr()
                });
            if !ok {
                return Err(VerifyError::BadFuse {
                    iteration: it.name.clone(),
                    outer: outer.clone(),
                    inner: inner.clone(),
                });
            }
        }
        // Spatial axes index every written buffer; reduction axes index none.
        for st in it.body.iter().chain(&it.init) {
            let Stmt::Store(st) = st else { continue };
            for ((ax, var), kind) in it.axes.iter().zip(&it.vars).zip(&kinds) {
                let indexes = st.indices.iter().any(|i| i.mentions(var));
                // An axis of extent 1 (the root above an encoding's first level) has one point:
                // it need not index anything.
                let unit = matches!(
                    self.p.axis(ax).map(|a| &a.kind),
                    Some(AxisKind::DenseFixed { n: Size::Const(1) })
                );
                match kind {
                    IterKind::S if !indexes && !unit => {
                        return Err(VerifyError::SpatialNotIndexing {
                            iteration: it.name.clone(),
                            axis: ax.clone(),
                            buffer: st.buffer.clone(),
                        })
                    }
                    IterKind::R if indexes => {
                        return Err(VerifyError::ReductionIndexesOutput {
                            iteration: it.name.clone(),
                            axis: ax.clone(),
                            buffer: st.buffer.clone(),
                        })
                    }
                    _ => {}
                }
            }
        }
        // Init statements see only the spatial variables.
        let spatial: Vec<Bound<'p>> = scope
            .iter()
            .filter(|b| match it.vars.iter().position(|v| v == b.var) {
                Some(i) => kinds[i] == IterKind::S,
                None => true,
            })
            .cloned()
            .collect();
        self.stmts(&it.init, &spatial, &it.name)?;
        self.stmts(&it.body, &scope, &it.name)
    }

    fn access(
        &self,
        context: &str,
        buffer: &str,
        indices: &[Expr],
        scope: &[Bound<'p>],
    ) -> Result<(), VerifyError> {
        let b = self
            .p
            .buffer(buffer)
            .ok_or_else(|| VerifyError::UnknownBuffer {
                context: context.to_string(),
                buffer: buffer.to_string(),
            })?;
        if b.axes.len() != indices.len() {
            return Err(VerifyError::Arity {
                context: context.to_string(),
                buffer: buffer.to_string(),
                expected: b.axes.len(),
                found: indices.len(),
            });
        }
        for (ax, index) in b.axes.iter().zip(indices) {
            let Some(var) = index.as_var() else {
                // A computed coordinate: any integer expression of iterators. Coordinates
                // outside the axis read the default value and mask stores.
                self.expr(context, index, scope)?;
                let t = type_of(index, &self.dtypes).map_err(|message| VerifyError::Type {
                    context: context.to_string(),
                    message,
                })?;
                if !t.dtype.is_int() {
                    return Err(VerifyError::Type {
                        context: context.to_string(),
                        message: format!(
                            "index `{index}` of `{buffer}` has type {}, expected an integer",
                            t.dtype
                        ),
                    });
                }
                continue;
            };
            let bound = scope.iter().rev().find(|s| s.var == var).ok_or_else(|| {
                VerifyError::UnknownVar {
                    context: context.to_string(),
                    var: var.to_string(),
                }
            })?;
            let (Some(baxis), Some(vaxis)) = (self.p.axis(ax), self.p.axis(bound.axis)) else {
                continue;
            };
            if baxis.name != vaxis.name && baxis.kind.coord_extent() != vaxis.kind.coord_extent() {
                return Err(VerifyError::ExtentMismatch {
                    context: context.to_string(),
                    buffer: buffer.to_string(),
                    axis: ax.clone(),
                    axis_extent: baxis.kind.coord_extent().clone(),
                    var: var.to_string(),
                    var_axis: vaxis.name.clone(),
                    var_extent: vaxis.kind.coord_extent().clone(),
                });
            }
        }
        Ok(())
    }

    fn expr(&self, context: &str, e: &Expr, scope: &[Bound<'p>]) -> Result<(), VerifyError> {
        match e {
            Expr::Int(_) | Expr::Float(_) => Ok(()),
            Expr::Var(v) => {
                if scope.iter().any(|s| s.var == v) {
                    Ok(())
                } else {
                    Err(VerifyError::UnknownVar {
                        context: context.to_string(),
                        var: v.clone(),
                    })
                }
            }
            Expr::Load { buffer, indices } => self.access(context, buffer, indices, scope),
            Expr::Unary(_, a) | Expr::Cast(_, a) => self.expr(context, a, scope),
            Expr::Binary(_, a, b) => {
                self.expr(context, a, scope)?;
                self.expr(context, b, scope)
            }
            Expr::Select(c, a, b) => {
                self.expr(context, c, scope)?;
                self.expr(context, a, scope)?;
                self.expr(context, b, scope)
            }
            Expr::Semiring(s) => {
                // Regions are checked with `x` and `y` replaced by an operand.
                let x = s.operands()[0].clone();
                for e in s.exprs() {
                    let e = substitute(e, &|v| matches!(v, "x" | "y").then(|| x.clone()));
                    self.expr(context, &e, scope)?;
                }
                Ok(())
            }
        }
    }

    fn store(&self, st: &Store, scope: &[Bound<'p>]) -> Result<(), VerifyError> {
        let context = format!("statement `{st}`");
        self.access(&context, &st.buffer, &st.indices, scope)?;
        let b = self
            .p
            .buffer(&st.buffer)
            .ok_or_else(|| VerifyError::UnknownBuffer {
                context: context.clone(),
                buffer: st.buffer.clone(),
            })?;
        if b.role == Role::Input {
            return Err(VerifyError::WriteToInput {
                context,
                buffer: st.buffer.clone(),
            });
        }
        self.expr(&context, &st.value, scope)?;
        let t = type_of(&st.value, &self.dtypes).map_err(|message| VerifyError::Type {
            context: context.clone(),
            message,
        })?;
        unify(
            t,
            Ty {
                dtype: b.dtype,
                weak: false,
            },
        )
        .map_err(|m| VerifyError::Type {
            context: context.clone(),
            message: format!("storing into `{}` ({}): {m}", b.name, b.dtype),
        })?;
        Ok(())
    }
}

/// Gives every literal a concrete type: the result has integer literals only where `i64` is
/// meant and float literals only where `f64` is, other types appear as casts of literals, so
/// that both operands of every operation have the same concrete type. `want` is the type the
/// context asks for (`None`: the expression's own type, `i64`/`f64` for weak literals).
pub fn resolve_literals(e: &Expr, want: Option<DType>, buffers: &BTreeMap<String, DType>) -> Expr {
    let own = type_of(e, buffers).ok();
    let target = match own {
        Some(t) if !t.weak => t.dtype,
        Some(t) => want
            .filter(|w| *w != DType::Bool && (w.is_float() || !t.dtype.is_float()))
            .unwrap_or(t.dtype),
        None => want.unwrap_or(DType::F64),
    };
    let rec = |x: &Expr, w: Option<DType>| Box::new(resolve_literals(x, w, buffers));
    match e {
        Expr::Int(v) => match target {
            DType::I64 => Expr::Int(*v),
            DType::F64 => Expr::Float(*v as f64),
            other => Expr::Cast(other, Box::new(Expr::Int(*v))),
        },
        Expr::Float(v) => match target {
            DType::F64 => Expr::Float(*v),
            other => Expr::Cast(other, Box::new(Expr::Float(*v))),
        },
        Expr::Var(_) => e.clone(),
        Expr::Load { buffer, indices } => Expr::Load {
            buffer: buffer.clone(),
            indices: indices.iter().map(|x| resolve_index(x, buffers)).collect(),
        },
        Expr::Unary(op, a) => Expr::Unary(*op, rec(a, Some(target))),
        Expr::Binary(op, a, b) => {
            let operand = if op.is_comparison() || op.is_logical() {
                let ta = type_of(a, buffers).ok();
                let tb = type_of(b, buffers).ok();
                match (ta, tb) {
                    (Some(x), Some(y)) => unify(x, y).ok().map(|t| t.dtype),
                    _ => None,
                }
            } else {
                Some(target)
            };
            Expr::Binary(*op, rec(a, operand), rec(b, operand))
        }
        Expr::Select(c, a, b) => Expr::Select(
            rec(c, Some(DType::Bool)),
            rec(a, Some(target)),
            rec(b, Some(target)),
        ),
        Expr::Cast(t, a) => Expr::Cast(*t, rec(a, None)),
        // Typed by co-iteration's own rules (`lacuna_stage2::coiter`).
        Expr::Semiring(_) => e.clone(),
    }
}

/// The concrete type of an expression whose literals were resolved by [`resolve_literals`].
pub fn concrete_type(e: &Expr, buffers: &BTreeMap<String, DType>) -> DType {
    match e {
        Expr::Int(_) | Expr::Var(_) => DType::I64,
        Expr::Float(_) => DType::F64,
        Expr::Load { buffer, .. } => buffers.get(buffer).copied().unwrap_or(DType::F64),
        Expr::Unary(_, a) => concrete_type(a, buffers),
        Expr::Binary(op, a, _) => {
            if op.is_comparison() {
                DType::Bool
            } else {
                concrete_type(a, buffers)
            }
        }
        Expr::Select(_, a, _) => concrete_type(a, buffers),
        Expr::Cast(t, _) => *t,
        Expr::Semiring(s) => type_of(e, buffers)
            .map(|t| t.dtype)
            .unwrap_or_else(|_| concrete_type(s.operands()[0], buffers)),
    }
}

/// Resolves the literals of an index expression and makes it `i64`.
pub fn resolve_index(e: &Expr, buffers: &BTreeMap<String, DType>) -> Expr {
    let r = resolve_literals(e, Some(DType::I64), buffers);
    if concrete_type(&r, buffers) == DType::I64 {
        r
    } else {
        Expr::Cast(DType::I64, Box::new(r))
    }
}
