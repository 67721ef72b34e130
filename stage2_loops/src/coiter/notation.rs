//! The index notation of a co-iteration kernel, read off a stage-I program.
//!
//! A co-iteration kernel is one sparse iteration over dense dimension axes whose body is one
//! store `C[i, j] = EXPR` (or `C[i, j] = C[i, j] + EXPR` when some iterators are reductions),
//! with its operands declared by MLIR encodings (unencoded buffers are dense, row-major). The
//! notation names every tensor, every index variable and the right-hand side as a tree.

use super::CoiterError;
use lacuna_ir::encoding::{parse_format, Encoding};
use lacuna_ir::DType;
use lacuna_stage1::{BinOp, Expr as E1, IterKind, Program, Role, Size, Stmt as S1, UnOp};

/// An operand or the result.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Buffer name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Index variable (position in [`Assignment::vars`]) of each dimension.
    pub vars: Vec<usize>,
    /// Extent of each dimension.
    pub extents: Vec<Size>,
    /// Storage format; `None` for a dense row-major array.
    pub encoding: Option<Encoding>,
}

impl Tensor {
    /// The index variable of each (virtual) storage level, outermost first (dense arrays:
    /// dimension order).
    pub fn level_vars(&self) -> Vec<usize> {
        match self.encoding.as_ref().and_then(vlevels) {
            None => self.vars.clone(),
            Some(levels) => levels.iter().map(|l| self.vars[l.dim]).collect(),
        }
    }
}

/// How a (virtual) level is iterated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VKind {
    /// Every coordinate, located at `parent * size + i`.
    Dense,
    /// `crd[pos[q]..pos[q + 1]]`.
    Compressed,
    /// `crd[pos[2q]..pos[2q + 1]]`.
    Loose,
    /// The parent's positions.
    Singleton,
    /// An n:m pair of levels (`d floordiv m : dense, d mod m : structured[n, m]`) read as one:
    /// `n` slots per block of `m`, the coordinate `block * m + crd[slot]`.
    NOfM {
        /// Stored per block.
        n: i64,
        /// Block size.
        m: i64,
    },
}

/// A level as co-iteration sees it: one per dimension, in storage order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VLevel {
    /// The dimension it stores.
    pub dim: usize,
    /// How it is iterated.
    pub kind: VKind,
    /// Coordinates are unique within a segment.
    pub unique: bool,
    /// Coordinates are increasing within a segment.
    pub ordered: bool,
    /// The storage level holding its positions and coordinates.
    pub storage: usize,
}

/// The levels of an encoding for co-iteration: a permutation map's levels, with n:m pairs read
/// as one level; `None` for other maps (blocks, slices, symbols).
pub fn vlevels(enc: &Encoding) -> Option<Vec<VLevel>> {
    use lacuna_ir::encoding::AffineNode as N;
    if enc.has_slices() || enc.n_symbols() > 0 {
        return None;
    }
    let levels = enc.levels();
    let div_mod = |l: usize| -> Option<(usize, i64, bool)> {
        match levels.get(l)?.expr.nodes() {
            [N::Var(d), N::Const(m), N::FloorDiv(0, 1)] => Some((d.index(), *m, false)),
            [N::Var(d), N::Const(m), N::Mod(0, 1)] => Some((d.index(), *m, true)),
            _ => None,
        }
    };
    let mut out = Vec::new();
    let mut seen = vec![false; enc.dim_rank()];
    let mut l = 0;
    while l < levels.len() {
        let lt = levels[l].lvl_type;
        let level = if let Some(d) = levels[l].expr.as_var() {
            let kind = if lt.is_dense() {
                VKind::Dense
            } else if lt.is_compressed() {
                VKind::Compressed
            } else if lt.is_loose_compressed() {
                VKind::Loose
            } else if lt.is_singleton() {
                VKind::Singleton
            } else {
                return None;
            };
            l += 1;
            VLevel {
                dim: d.index(),
                kind,
                unique: lt.is_unique(),
                ordered: lt.is_ordered(),
                storage: l - 1,
            }
        } else {
            let (d, m, false) = div_mod(l)? else {
                return None;
            };
            let (d2, m2, true) = div_mod(l + 1)? else {
                return None;
            };
            let (n, m3) = levels[l + 1].lvl_type.n_out_of_m_sizes()?;
            if d2 != d || m2 != m || i64::from(m3) != m || !lt.is_dense() {
                return None;
            }
            l += 2;
            VLevel {
                dim: d,
                kind: VKind::NOfM { n: i64::from(n), m },
                unique: true,
                ordered: true,
                storage: l - 1,
            }
        };
        if std::mem::replace(&mut seen[level.dim], true) {
            return None;
        }
        out.push(level);
    }
    seen.iter().all(|&s| s).then_some(out)
}

/// An index variable.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexVar {
    /// Name in the kernel (`i`).
    pub name: String,
    /// Extent.
    pub extent: Size,
    /// Spatial (indexes the result) or reduction.
    pub kind: IterKind,
}

/// The right-hand side of an assignment.
#[derive(Clone, Debug, PartialEq)]
pub enum TExpr {
    /// An element of operand `t` (index into [`Assignment::tensors`]).
    Access(usize),
    /// A float literal.
    Float(f64),
    /// An integer literal.
    Int(i64),
    /// The coordinate of an index variable.
    Coord(usize),
    /// A unary operation: applied to stored entries only.
    Unary(UnOp, Box<TExpr>),
    /// A binary operation: `+` and `-` are unions (an absent side reads zero), every other
    /// operation an intersection.
    Binary(BinOp, Box<TExpr>, Box<TExpr>),
    /// A conversion.
    Cast(DType, Box<TExpr>),
    /// `select(c, a, b)`: `a` where `c` holds, else `b` (present where the chosen one is).
    Cond(Box<TExpr>, Box<TExpr>, Box<TExpr>),
    /// A region argument: `x` (0) or `y` (1).
    Arg(usize),
    /// MLIR's `binary(a, b, overlap, left, right)` (regions over `Arg(0)`, `Arg(1)`).
    SBinary(Box<TExpr>, Box<TExpr>, Box<[TRegion; 3]>),
    /// MLIR's `unary(a, present, absent)`.
    SUnary(Box<TExpr>, Box<[TRegion; 2]>),
    /// MLIR's `select(a, pred)`: `a` where `pred` (over `Arg(0)`) holds.
    SSelect(Box<TExpr>, Box<TExpr>),
}

/// A region of a semiring operation.
#[derive(Clone, Debug, PartialEq)]
pub enum TRegion {
    /// No entry.
    Empty,
    /// The operand.
    Identity,
    /// A computation over the region arguments.
    Expr(TExpr),
}

impl TRegion {
    /// True unless empty.
    pub fn is_some(&self) -> bool {
        !matches!(self, TRegion::Empty)
    }
}

/// `e` with region arguments replaced: `Arg(k)` by `args[k]` where given.
pub fn subst(e: &TExpr, args: &[Option<&TExpr>]) -> TExpr {
    let r = |x: &TExpr| Box::new(subst(x, args));
    match e {
        TExpr::Arg(k) => match args.get(*k) {
            Some(Some(v)) => (*v).clone(),
            _ => e.clone(),
        },
        TExpr::Access(_) | TExpr::Float(_) | TExpr::Int(_) | TExpr::Coord(_) => e.clone(),
        TExpr::Unary(op, a) => TExpr::Unary(*op, r(a)),
        TExpr::Cast(t, a) => TExpr::Cast(*t, r(a)),
        TExpr::Binary(op, a, b) => TExpr::Binary(*op, r(a), r(b)),
        TExpr::Cond(c, a, b) => TExpr::Cond(r(c), r(a), r(b)),
        // Regions of nested operations bind their own arguments.
        TExpr::SBinary(a, b, regions) => TExpr::SBinary(r(a), r(b), regions.clone()),
        TExpr::SUnary(a, regions) => TExpr::SUnary(r(a), regions.clone()),
        TExpr::SSelect(a, p) => TExpr::SSelect(r(a), p.clone()),
    }
}

impl TExpr {
    /// Every operand read.
    pub fn tensors(&self, out: &mut Vec<usize>) {
        match self {
            TExpr::Access(t) => {
                if !out.contains(t) {
                    out.push(*t)
                }
            }
            TExpr::Float(_) | TExpr::Int(_) | TExpr::Coord(_) | TExpr::Arg(_) => {}
            TExpr::Unary(_, a) | TExpr::Cast(_, a) | TExpr::SSelect(a, _) => a.tensors(out),
            TExpr::SUnary(a, r) => {
                a.tensors(out);
                r.iter().for_each(|r| r.tensors(out));
            }
            TExpr::Binary(_, a, b) => {
                a.tensors(out);
                b.tensors(out);
            }
            TExpr::SBinary(a, b, r) => {
                a.tensors(out);
                b.tensors(out);
                r.iter().for_each(|r| r.tensors(out));
            }
            TExpr::Cond(c, a, b) => {
                c.tensors(out);
                a.tensors(out);
                b.tensors(out);
            }
        }
    }
}

impl TRegion {
    fn tensors(&self, out: &mut Vec<usize>) {
        if let TRegion::Expr(e) = self {
            e.tensors(out)
        }
    }
}

/// `out[vars] (+)= rhs` over `vars` in the kernel's order.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    /// Kernel name.
    pub name: String,
    /// Kernel parameters (symbolic sizes).
    pub params: Vec<String>,
    /// Index variables in the order the kernel lists them.
    pub vars: Vec<IndexVar>,
    /// Operands and the result (`out`).
    pub tensors: Vec<Tensor>,
    /// The result tensor.
    pub out: usize,
    /// Whether the result accumulates over the reduction variables.
    pub accumulate: bool,
    /// The right-hand side.
    pub rhs: TExpr,
    /// How values reduce into one entry (when `accumulate`): the combiner over `Arg(0)` (the
    /// entry so far) and `Arg(1)` (the next value), and the first value of every entry;
    /// `Arg(0) + Arg(1)` from zero for `C[..] = C[..] + ...`.
    pub reduce: (TExpr, TExpr),
    /// Merge strategy for co-iterated levels.
    pub merge: lacuna_stage1::Merge,
    /// Whether operands whose level order conflicts with the others may be copied into a
    /// compatible order.
    pub transpose: bool,
}

impl Assignment {
    /// The result.
    pub fn output(&self) -> &Tensor {
        &self.tensors[self.out]
    }
}

fn encoding_of(b: &lacuna_stage1::Buffer) -> Result<Option<Encoding>, CoiterError> {
    match &b.encoding {
        None => Ok(None),
        Some(text) => {
            let enc = parse_format(text).map_err(|e| CoiterError::Unsupported {
                what: format!("buffer `{}`: {}", b.name, e.render(text)),
            })?;
            if enc.has_slices() {
                return Err(CoiterError::Unsupported {
                    what: format!(
                        "buffer `{}`: dimension slices in co-iteration kernels (kernels with one \
                         encoded input, such as spmv, spmm and sddmm, take them)",
                        b.name
                    ),
                });
            }
            Ok(Some(enc))
        }
    }
}

/// True when `p` must be compiled by co-iteration: its one iteration reads two encoded inputs,
/// or writes an encoded result whose structure is not that of an encoded input, or asks for it
/// (`coiteration: Some(...)`).
pub fn is_coiteration(p: &Program) -> bool {
    let [S1::Iter(it)] = p.body.as_slice() else {
        return false;
    };
    if it.coiteration.is_some() {
        return true;
    }
    let semiring = it
        .body
        .iter()
        .chain(&it.init)
        .any(|s| matches!(s, S1::Store(st) if has_semiring(&st.value)));
    if semiring {
        return true;
    }
    if p.buffers.iter().any(|b| !b.dims.is_empty()) {
        return false; // already sparsified
    }
    let mut read = Vec::new();
    for s in it.body.iter().chain(&it.init) {
        if let S1::Store(st) = s {
            loads(&st.value, &mut read);
        }
    }
    let encoded_inputs: Vec<&lacuna_stage1::Buffer> = p
        .buffers
        .iter()
        .filter(|b| b.encoding.is_some() && b.role == Role::Input && read.contains(&b.name))
        .collect();
    if encoded_inputs.len() >= 2 {
        return true;
    }
    p.buffers.iter().any(|b| {
        b.role == Role::Output
            && b.encoding.is_some()
            && !encoded_inputs
                .iter()
                .any(|i| i.encoding == b.encoding && i.axes == b.axes)
    })
}

fn loads(e: &E1, out: &mut Vec<String>) {
    match e {
        E1::Load { buffer, indices } => {
            out.push(buffer.clone());
            indices.iter().for_each(|i| loads(i, out));
        }
        E1::Int(_) | E1::Float(_) | E1::Var(_) => {}
        E1::Unary(_, a) | E1::Cast(_, a) => loads(a, out),
        E1::Binary(_, a, b) => {
            loads(a, out);
            loads(b, out);
        }
        E1::Select(c, a, b) => {
            loads(c, out);
            loads(a, out);
            loads(b, out);
        }
        E1::Semiring(s) => s.exprs().into_iter().for_each(|e| loads(e, out)),
    }
}

fn has_semiring(e: &E1) -> bool {
    match e {
        E1::Semiring(_) => true,
        E1::Int(_) | E1::Float(_) | E1::Var(_) => false,
        E1::Load { indices, .. } => indices.iter().any(has_semiring),
        E1::Unary(_, a) | E1::Cast(_, a) => has_semiring(a),
        E1::Binary(_, a, b) => has_semiring(a) || has_semiring(b),
        E1::Select(c, a, b) => has_semiring(c) || has_semiring(a) || has_semiring(b),
    }
}

/// Interns an accessed buffer as a tensor of the assignment.
type TensorOf<'a> = dyn FnMut(&str, &[E1]) -> Result<usize, CoiterError> + 'a;

fn has_coord(e: &TExpr) -> bool {
    match e {
        TExpr::Coord(_) => true,
        TExpr::Access(_) | TExpr::Float(_) | TExpr::Int(_) | TExpr::Arg(_) => false,
        TExpr::Unary(_, a) | TExpr::Cast(_, a) => has_coord(a),
        TExpr::Binary(_, a, b) => has_coord(a) || has_coord(b),
        TExpr::Cond(c, a, b) => has_coord(c) || has_coord(a) || has_coord(b),
        TExpr::SBinary(..) | TExpr::SUnary(..) | TExpr::SSelect(..) => true,
    }
}

/// Reads the assignment of a co-iteration kernel.
pub fn analyze(p: &Program) -> Result<Assignment, CoiterError> {
    let unsupported = |what: String| CoiterError::Unsupported { what };
    let [S1::Iter(it)] = p.body.as_slice() else {
        return Err(unsupported(
            "a co-iteration kernel has exactly one sparse iteration".into(),
        ));
    };
    let kinds = it
        .iter_kinds()
        .ok_or_else(|| unsupported(format!("iteration `{}`: bad kinds", it.name)))?;
    let mut vars = Vec::new();
    for ((ax, v), k) in it.axes.iter().zip(&it.vars).zip(&kinds) {
        let axis = p
            .axis(ax)
            .ok_or_else(|| unsupported(format!("unknown axis `{ax}`")))?;
        let lacuna_stage1::AxisKind::DenseFixed { n } = &axis.kind else {
            return Err(unsupported(format!(
                "co-iteration iterates dimensions: axis `{ax}` must be dense_fixed (declare sparsity by encodings)"
            )));
        };
        vars.push(IndexVar {
            name: v.clone(),
            extent: n.clone(),
            kind: *k,
        });
    }
    // An init may only zero the result (results start at zero, or at a reduction's identity).
    let zeroing = |s: &S1| match s {
        S1::Store(st) => {
            matches!(st.value, E1::Int(0)) || matches!(st.value, E1::Float(v) if v == 0.0)
        }
        S1::Iter(_) => false,
    };
    if !it.init.iter().all(zeroing) || it.body.len() != 1 || !it.fused.is_empty() {
        return Err(unsupported(format!(
            "iteration `{}`: a co-iteration body is a single store (an init is implied: results start at zero)",
            it.name
        )));
    }
    let S1::Store(st) = &it.body[0] else {
        return Err(unsupported(format!(
            "iteration `{}`: nested iterations are not supported in co-iteration",
            it.name
        )));
    };
    let var_of = |e: &E1| -> Result<usize, CoiterError> {
        let name = e.as_var().ok_or_else(|| {
            unsupported(format!(
                "`{e}`: co-iteration accesses are indexed by iterator variables"
            ))
        })?;
        vars.iter()
            .position(|v| v.name == name)
            .ok_or_else(|| unsupported(format!("`{name}` is not an iterator of `{}`", it.name)))
    };
    let mut tensors: Vec<Tensor> = Vec::new();
    let mut tensor = |name: &str, indices: &[E1]| -> Result<usize, CoiterError> {
        let b = p
            .buffer(name)
            .ok_or_else(|| unsupported(format!("unknown buffer `{name}`")))?;
        let vs = indices.iter().map(var_of).collect::<Result<Vec<_>, _>>()?;
        if vs.len() != b.axes.len() {
            return Err(unsupported(format!(
                "`{name}` has {} dimensions, accessed with {}",
                b.axes.len(),
                vs.len()
            )));
        }
        let mut seen = vs.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != vs.len() {
            return Err(unsupported(format!(
                "`{name}` is accessed with a repeated iterator (a diagonal)"
            )));
        }
        let mut extents = Vec::new();
        for (ax, &v) in b.axes.iter().zip(&vs) {
            let a = p
                .axis(ax)
                .ok_or_else(|| unsupported(format!("unknown axis `{ax}`")))?;
            let n = a.kind.coord_extent().clone();
            if n != vars[v].extent {
                return Err(unsupported(format!(
                    "`{name}`: dimension `{ax}` ({n}) is indexed by `{}` of extent {}",
                    vars[v].name, vars[v].extent
                )));
            }
            extents.push(n);
        }
        let encoding = encoding_of(b)?;
        if let Some(enc) = &encoding {
            if enc.dim_rank() != vs.len() {
                return Err(unsupported(format!(
                    "`{name}`: the encoding has {} dimensions, the buffer {}",
                    enc.dim_rank(),
                    vs.len()
                )));
            }
        }
        if let Some(i) = tensors.iter().position(|t| t.name == name) {
            if tensors[i].vars != vs {
                return Err(unsupported(format!(
                    "`{name}` is accessed with two different index lists"
                )));
            }
            return Ok(i);
        }
        tensors.push(Tensor {
            name: name.to_string(),
            dtype: b.dtype,
            vars: vs,
            extents,
            encoding,
        });
        Ok(tensors.len() - 1)
    };
    let out = tensor(&st.buffer, &st.indices)?;
    if p.buffer(&st.buffer).map(|b| b.role) != Some(Role::Output) {
        return Err(unsupported(format!(
            "`{}` is written but is not an output",
            st.buffer
        )));
    }
    let out_vars = st
        .indices
        .iter()
        .map(var_of)
        .collect::<Result<Vec<_>, _>>()?;
    let reductions: Vec<usize> = (0..vars.len())
        .filter(|&v| vars[v].kind == IterKind::R)
        .collect();
    for (v, var) in vars.iter().enumerate() {
        let in_out = out_vars.contains(&v);
        if in_out == (var.kind == IterKind::R) {
            return Err(unsupported(format!(
                "iterator `{}` is {} but {} the result `{}`",
                var.name,
                if var.kind == IterKind::R {
                    "a reduction"
                } else {
                    "spatial"
                },
                if in_out { "indexes" } else { "does not index" },
                st.buffer
            )));
        }
    }
    // `C[..] = C[..] + rhs` accumulates; a plain `C[..] = rhs` has no reductions.
    let mut custom_reduce = None;
    let (accumulate, rhs_expr) = match &st.value {
        E1::Binary(BinOp::Add, a, b) if matches!(&**a, E1::Load { buffer, indices } if *buffer == st.buffer && *indices == st.indices) => {
            (true, &**b)
        }
        E1::Semiring(s) => match &**s {
            lacuna_stage1::Semiring::Reduce {
                value,
                combine,
                identity,
            } => {
                custom_reduce = Some((combine, identity));
                (true, value)
            }
            _ => (false, &st.value),
        },
        other => (false, other),
    };
    if !accumulate && !reductions.is_empty() {
        return Err(unsupported(format!(
            "iteration `{}` has reductions: write `{}[..] = {}[..] + ...`",
            it.name, st.buffer, st.buffer
        )));
    }
    /// Converts `e`; inside a region, `x` and `y` are the arguments `args` names.
    fn conv(
        e: &E1,
        out_name: &str,
        vars: &[IndexVar],
        args: &[&str],
        tensor: &mut TensorOf<'_>,
    ) -> Result<TExpr, CoiterError> {
        let mut rec = |x: &E1, args: &[&str]| conv(x, out_name, vars, args, tensor).map(Box::new);
        Ok(match e {
            E1::Int(v) => TExpr::Int(*v),
            E1::Float(v) => TExpr::Float(*v),
            E1::Var(name) => {
                if args.contains(&name.as_str()) {
                    // `x` is argument 0 and `y` argument 1 in every region.
                    return Ok(TExpr::Arg(usize::from(name == "y")));
                }
                TExpr::Coord(vars.iter().position(|v| &v.name == name).ok_or_else(|| {
                    CoiterError::Unsupported {
                        what: format!("`{name}` is not an iterator"),
                    }
                })?)
            }
            E1::Load { buffer, indices } => {
                if !args.is_empty() {
                    return Err(CoiterError::Unsupported {
                        what: format!("`{e}`: a region reads its arguments, not buffers"),
                    });
                }
                if buffer == out_name {
                    return Err(CoiterError::Unsupported {
                        what: format!("the result `{out_name}` is read on the right-hand side"),
                    });
                }
                TExpr::Access(tensor(buffer, indices)?)
            }
            E1::Unary(op, a) => TExpr::Unary(*op, rec(a, args)?),
            E1::Cast(t, a) => TExpr::Cast(*t, rec(a, args)?),
            E1::Binary(op, a, b) => TExpr::Binary(*op, rec(a, args)?, rec(b, args)?),
            E1::Select(c, a, b) => TExpr::Cond(rec(c, args)?, rec(a, args)?, rec(b, args)?),
            E1::Semiring(s) => {
                if !args.is_empty() {
                    return Err(CoiterError::Unsupported {
                        what: format!("`{s}`: semiring operations do not nest inside regions"),
                    });
                }
                let mut region =
                    |r: &lacuna_stage1::Region, args: &[&str]| -> Result<TRegion, CoiterError> {
                        Ok(match r {
                            lacuna_stage1::Region::Empty => TRegion::Empty,
                            lacuna_stage1::Region::Identity => TRegion::Identity,
                            lacuna_stage1::Region::Expr(x) => {
                                TRegion::Expr(conv(x, out_name, vars, args, tensor)?)
                            }
                        })
                    };
                match &**s {
                    lacuna_stage1::Semiring::Binary {
                        a,
                        b,
                        overlap,
                        left,
                        right,
                    } => {
                        let regions = [
                            region(overlap, &["x", "y"])?,
                            region(left, &["x"])?,
                            region(right, &["y"])?,
                        ];
                        let a = conv(a, out_name, vars, &[], tensor)?;
                        let b = conv(b, out_name, vars, &[], tensor)?;
                        TExpr::SBinary(Box::new(a), Box::new(b), Box::new(regions))
                    }
                    lacuna_stage1::Semiring::Unary { a, present, absent } => {
                        let regions = [region(present, &["x"])?, region(absent, &[])?];
                        let a = conv(a, out_name, vars, &[], tensor)?;
                        TExpr::SUnary(Box::new(a), Box::new(regions))
                    }
                    lacuna_stage1::Semiring::Select { a, pred } => {
                        let pred = conv(pred, out_name, vars, &["x"], tensor)?;
                        let a = conv(a, out_name, vars, &[], tensor)?;
                        TExpr::SSelect(Box::new(a), Box::new(pred))
                    }
                    lacuna_stage1::Semiring::Reduce { .. } => {
                        return Err(CoiterError::Unsupported {
                            what: format!(
                                "`{s}`: `reduce` is the whole right-hand side of a store"
                            ),
                        })
                    }
                }
            }
        })
    }
    let rhs = conv(rhs_expr, &st.buffer, &vars, &[], &mut tensor)?;
    let reduce = match custom_reduce {
        Some((combine, identity)) => {
            let combine = conv(combine, &st.buffer, &vars, &["x", "y"], &mut tensor)?;
            let identity = conv(identity, &st.buffer, &vars, &[], &mut tensor)?;
            let mut read = Vec::new();
            identity.tensors(&mut read);
            if !read.is_empty() || has_coord(&identity) {
                return Err(unsupported(format!(
                    "`{}`: the identity of `reduce` must be a constant",
                    st.value
                )));
            }
            (combine, identity)
        }
        None => (
            TExpr::Binary(BinOp::Add, Box::new(TExpr::Arg(0)), Box::new(TExpr::Arg(1))),
            TExpr::Int(0),
        ),
    };
    for (ti, t) in tensors.iter().enumerate() {
        if let Some(enc) = &t.encoding {
            // Blocked operands (BSR, ELL) are read from an unblocked copy (see
            // `lower::Plan::unblocked`); results and unstorable encodings are not.
            let copyable = ti != out && enc.n_symbols() == 0 && !enc.has_slices();
            if vlevels(enc).is_none() && !copyable {
                let what = if ti == out {
                    "a sparse result is written"
                } else {
                    "co-iteration reads"
                };
                return Err(unsupported(format!(
                    "`{}`: {what} in permutation maps with dense, compressed, loose_compressed and singleton levels, and n:m pairs (`d floordiv m : dense, d mod m : structured[n, m]`); found `{enc}` (convert it first)",
                    t.name
                )));
            }
        }
    }
    let opts = it.coiteration.clone().unwrap_or_default();
    Ok(Assignment {
        name: p.name.clone(),
        params: p.params.clone(),
        vars,
        tensors,
        out,
        accumulate,
        rhs,
        reduce,
        merge: opts.merge,
        transpose: opts.transpose,
    })
}
