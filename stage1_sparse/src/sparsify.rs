//! Pass `sparsify`: compiles buffers declared by an MLIR encoding into level axes, and rewrites
//! the iterations that read them to iterate the encoding's levels (MLIR's sparsifier, at stage I).
//!
//! A buffer `A: f64[I, J]` with `encoding: Some("csc")` is stored per its encoding: the pass
//! creates one axis per level (`A.l0`, `A.l1`, and `A.root` when the first level needs a
//! parent), makes them the buffer's axes and remembers `I, J` as its `dims`. An iteration that
//! iterates every dimension of an encoded input it reads (the *driver*) iterates the driver's
//! levels instead; the dimension iterators become expressions of the level iterators
//! (`lvl_to_dim`), and other encoded buffers are addressed through `dim_to_lvl`, which lowering
//! turns into coordinate searches.
//!
//! Before: `sp_iter spmv [I, J] "SR" (i, j) { y[i] = y[i] + A[i, j] * x[j] }`, `A` in CSC.
//! After:
//! ```text
//! sp_iter spmv_init [I] "S" (i) { y[i] = 0.0 }
//! sp_iter spmv [A.l0, A.l1] "RS" (a.l0, a.l1) { y[a.l1] = y[a.l1] + A[a.l0, a.l1] * x[a.l0] }
//! ```
//! Init moves to its own iteration when a spatial level is nested in a reduction level.

use crate::ir::{
    Axis, AxisKind, BinOp, Buffer, Expr, IndexType, IterKind, Iteration, Program, Role, Size, Stmt,
    Store,
};
use crate::verify::VerifyError;
use lacuna_ir::encoding::{parse_format, AffineExpr, AffineNode, Dim, Encoding, IndexWidth, Lvl};
use std::collections::BTreeMap;

/// The levels of one encoded storage, shared by buffers with equal encodings and dimensions.
#[derive(Clone, Debug)]
struct Levels {
    encoding: Encoding,
    /// Level axes, the root (if any) first.
    axes: Vec<String>,
    /// Whether `axes[0]` is a root axis of extent 1 (not a level).
    rooted: bool,
    dims: Vec<String>,
}

/// The storage encoding of a buffer, parsed: the declared encoding without its dimension
/// slices. An input declared with slices is a view of the tensor it is bound to; kernels compute
/// on the view stored in this encoding (see [`declared_encoding`]). An output declared with
/// slices is stored without them.
pub fn buffer_encoding(b: &Buffer) -> Result<Option<Encoding>, VerifyError> {
    Ok(declared_encoding(b)?.map(|e| e.without_slices()))
}

/// The encoding of a buffer as declared, slices included.
pub fn declared_encoding(b: &Buffer) -> Result<Option<Encoding>, VerifyError> {
    match &b.encoding {
        None => Ok(None),
        Some(text) => {
            let enc = parse_format(text).map_err(|e| VerifyError::Encoding {
                buffer: b.name.clone(),
                rendered: e.render(text),
            })?;
            if enc.n_symbols() > 0 {
                return Err(unsupported(
                    &b.name,
                    format!(
                        "the encoding has {} symbol(s) (`[s0, ...]`, e.g. ELL's counting symbol): \
                         kernels need every level size from the dimension sizes; use a preset \
                         such as `ell(w)` (`structured[w, w]`) instead",
                        enc.n_symbols()
                    ),
                ));
            }
            let dynamic = (0..enc.dim_rank()).any(|d| {
                enc.dim_slice(Dim(d as u32)).is_some_and(|s| {
                    [s.offset, s.size, s.stride].contains(&lacuna_ir::encoding::SliceBound::Dynamic)
                })
            });
            if dynamic && b.role == crate::ir::Role::Input {
                return Err(unsupported(
                    &b.name,
                    "a kernel input's dimension slices must be static: `?` has no value to bind"
                        .into(),
                ));
            }
            Ok(Some(enc))
        }
    }
}

fn unsupported(buffer: &str, what: String) -> VerifyError {
    VerifyError::Encoding {
        buffer: buffer.to_string(),
        rendered: what,
    }
}

/// Rewrites encoded buffers into level axes; a program without encodings is returned as is.
pub fn sparsify(p: &Program) -> Result<Program, VerifyError> {
    if p.buffers
        .iter()
        .all(|b| b.encoding.is_none() || !b.dims.is_empty())
    {
        return Ok(p.clone());
    }
    let mut out = p.clone();
    let mut groups: Vec<Levels> = Vec::new();
    let mut of_buffer: BTreeMap<String, usize> = BTreeMap::new();
    for b in p.buffers.iter() {
        let Some(enc) = buffer_encoding(b)? else {
            continue;
        };
        if enc.dim_rank() != b.axes.len() {
            return Err(unsupported(
                &b.name,
                format!(
                    "the encoding has {} dimensions but the buffer has {} axes",
                    enc.dim_rank(),
                    b.axes.len()
                ),
            ));
        }
        for ax in &b.axes {
            if !matches!(
                p.axis(ax).map(|a| &a.kind),
                Some(AxisKind::DenseFixed { .. })
            ) {
                return Err(unsupported(&b.name, format!("the dimensions of an encoded buffer must be dense_fixed axes; `{ax}` is not")));
            }
        }
        let key = enc.to_string();
        if let Some(g) = groups
            .iter()
            .position(|g| g.encoding.to_string() == key && g.dims == b.axes)
        {
            of_buffer.insert(b.name.clone(), g);
            continue;
        }
        let dim_sizes: Vec<Size> = b
            .axes
            .iter()
            .filter_map(|a| p.axis(a))
            .map(|a| a.kind.coord_extent().clone())
            .collect();
        let (axes, rooted, new_axes, params) = level_axes(&b.name, &enc, &dim_sizes)?;
        out.axes.extend(new_axes);
        out.params.extend(params);
        of_buffer.insert(b.name.clone(), groups.len());
        groups.push(Levels {
            encoding: enc,
            axes,
            rooted,
            dims: b.axes.clone(),
        });
    }
    for b in out.buffers.iter_mut() {
        if let Some(&g) = of_buffer.get(&b.name) {
            b.dims = std::mem::take(&mut b.axes);
            b.axes = groups[g].axes.clone();
        }
    }
    let cx = Cx {
        p,
        groups: &groups,
        of_buffer: &of_buffer,
    };
    out.body = cx.stmts(&p.body)?;
    Ok(out)
}

fn level_axes(buffer: &str, enc: &Encoding, dim_sizes: &[Size]) -> Result<LevelAxes, VerifyError> {
    let idtype = match (enc.pos_width(), enc.crd_width()) {
        (
            IndexWidth::W8 | IndexWidth::W16 | IndexWidth::W32,
            IndexWidth::W8 | IndexWidth::W16 | IndexWidth::W32,
        ) => IndexType::I32,
        _ => IndexType::I64,
    };
    let types = enc.lvl_types();
    let rooted = types.first().is_some_and(|t| !t.is_dense());
    let mut names = Vec::new();
    let mut axes = Vec::new();
    let mut params = Vec::new();
    if rooted {
        names.push(format!("{buffer}.root"));
        axes.push(Axis {
            name: format!("{buffer}.root"),
            kind: AxisKind::DenseFixed { n: Size::Const(1) },
            idtype,
            sorted: true,
            closed_forms: vec![],
            tiles: None,
        });
    }
    for (k, t) in types.iter().enumerate() {
        let name = format!("{buffer}.l{k}");
        // A level that is one dimension has that dimension's size; others get a size of their own.
        let n = match enc.dim_to_lvl(Lvl(k as u32)).root() {
            AffineNode::Var(d) if enc.dim_to_lvl(Lvl(k as u32)).nodes().len() == 1 => {
                dim_sizes[d.index()].clone()
            }
            _ => {
                let n = format!("{buffer}.l{k}.n");
                params.push(n.clone());
                Size::Param(n)
            }
        };
        let parent = names.last().cloned();
        let need_parent = || {
            parent
                .clone()
                .ok_or_else(|| unsupported(buffer, format!("level {k} ({t}) has no parent level")))
        };
        let parent_of_sparse = types.get(k + 1).is_some_and(|next| !next.is_dense());
        let kind = if t.is_dense() && parent_of_sparse && !names.is_empty() {
            // A dense level below another level that is itself the parent of a sparse level
            // (2:4's column groups): its positions must compose with its parent's, so it is
            // stored as a fixed-width sparse axis whose coordinates are all of 0..n.
            AxisKind::SparseFixed {
                parent: need_parent()?,
                n: n.clone(),
                nnz_cols: n,
            }
        } else if t.is_dense() {
            AxisKind::DenseFixed { n }
        } else if t.is_compressed() || t.is_loose_compressed() {
            let nnz = format!("{buffer}.l{k}.nnz");
            params.push(nnz.clone());
            AxisKind::SparseVariable {
                parent: need_parent()?,
                n,
                nnz: Size::Param(nnz),
                loose: t.is_loose_compressed(),
            }
        } else if t.is_singleton() {
            AxisKind::SparseFixed {
                parent: need_parent()?,
                n,
                nnz_cols: Size::Const(1),
            }
        } else if let Some((nn, _)) = t.n_out_of_m_sizes() {
            AxisKind::SparseFixed {
                parent: need_parent()?,
                n,
                nnz_cols: Size::Const(u64::from(nn)),
            }
        } else {
            return Err(unsupported(
                buffer,
                format!("level {k} ({t}): kernels over this level format are not supported yet"),
            ));
        };
        axes.push(Axis {
            name: name.clone(),
            kind,
            idtype,
            sorted: t.is_ordered() && t.is_unique(),
            closed_forms: vec![],
            tiles: None,
        });
        names.push(name);
    }
    Ok((names, rooted, axes, params))
}

/// The level axes of an encoding: their names (root first), whether there is a root, the new
/// axes and the new size parameters.
type LevelAxes = (Vec<String>, bool, Vec<Axis>, Vec<String>);

/// Translates an affine expression over variables named by `name` into a stage-I expression.
fn affine<V: lacuna_ir::encoding::Var>(e: &AffineExpr<V>, name: &dyn Fn(V) -> Expr) -> Expr {
    fn node<V: Copy>(nodes: &[AffineNode<V>], i: usize, name: &dyn Fn(V) -> Expr) -> Expr {
        let sub = |j: u32| node(nodes, j as usize, name);
        match nodes[i] {
            AffineNode::Var(v) => name(v),
            AffineNode::Sym(_) | AffineNode::Const(_) => Expr::Int(match nodes[i] {
                AffineNode::Const(c) => c,
                _ => 0,
            }),
            AffineNode::Add(a, b) => Expr::Binary(BinOp::Add, Box::new(sub(a)), Box::new(sub(b))),
            AffineNode::Mul(a, b) => Expr::Binary(BinOp::Mul, Box::new(sub(a)), Box::new(sub(b))),
            // Coordinates are non-negative, so truncating division is floor division.
            AffineNode::FloorDiv(a, b) => {
                Expr::Binary(BinOp::Div, Box::new(sub(a)), Box::new(sub(b)))
            }
            AffineNode::Mod(a, b) => {
                let (x, c) = (sub(a), sub(b));
                let q = Expr::Binary(
                    BinOp::Mul,
                    Box::new(Expr::Binary(
                        BinOp::Div,
                        Box::new(x.clone()),
                        Box::new(c.clone()),
                    )),
                    Box::new(c),
                );
                Expr::Binary(BinOp::Sub, Box::new(x), Box::new(q))
            }
        }
    }
    let nodes = e.nodes();
    node(nodes, nodes.len() - 1, name)
}

struct Cx<'a> {
    p: &'a Program,
    groups: &'a [Levels],
    of_buffer: &'a BTreeMap<String, usize>,
}

/// A rewrite of one iteration: dimension variables replaced by level expressions.
struct Rewrite {
    group: usize,
    /// Level variables, the root's first.
    level_vars: Vec<String>,
    /// Dimension variable → its expression in level variables.
    dim_expr: BTreeMap<String, Expr>,
    /// The dimension variables in dimension order.
    dim_vars: Vec<String>,
}

impl Cx<'_> {
    fn stmts(&self, stmts: &[Stmt]) -> Result<Vec<Stmt>, VerifyError> {
        let mut out = Vec::new();
        for s in stmts {
            match s {
                Stmt::Store(st) => out.push(Stmt::Store(self.store(st, None))),
                Stmt::Iter(it) => out.extend(self.iteration(it)?),
            }
        }
        Ok(out)
    }

    /// The driver of an iteration: an encoded input read with the iteration's own variables
    /// for all its dimensions.
    fn driver(&self, it: &Iteration) -> Option<(usize, Vec<String>)> {
        let mut found = None;
        let mut visit = |e: &Expr| {
            if let Expr::Load { buffer, indices } = e {
                let Some(&g) = self.of_buffer.get(buffer) else {
                    return;
                };
                let is_input = self.p.buffer(buffer).is_some_and(|b| b.role == Role::Input);
                let vars: Option<Vec<String>> = indices
                    .iter()
                    .map(|i| i.as_var().map(str::to_string))
                    .collect();
                let Some(vars) = vars else { return };
                let own = vars.iter().zip(&self.groups[g].dims).all(|(v, d)| {
                    it.vars
                        .iter()
                        .zip(&it.axes)
                        .any(|(iv, ia)| iv == v && ia == d)
                });
                if is_input && own && found.is_none() {
                    found = Some((g, vars));
                }
            }
        };
        for s in &it.body {
            if let Stmt::Store(st) = s {
                walk(&st.value, &mut visit);
            }
        }
        found
    }

    fn iteration(&self, it: &Iteration) -> Result<Vec<Stmt>, VerifyError> {
        let Some((g, dim_vars)) = self.driver(it) else {
            let mut it2 = it.clone();
            it2.init = self.stmts(&it.init)?;
            it2.body = self.stmts(&it.body)?;
            return Ok(vec![Stmt::Iter(it2)]);
        };
        let levels = &self.groups[g];
        let kinds = it.iter_kinds().unwrap_or_default();
        let kind_of = |var: &str| {
            it.vars
                .iter()
                .position(|v| v == var)
                .and_then(|i| kinds.get(i).copied())
                .unwrap_or(IterKind::S)
        };
        let base = it.name.replace(['.', ' '], "_").to_lowercase();
        let level_vars: Vec<String> = levels
            .axes
            .iter()
            .map(|a| format!("{base}.{}", a.replace('.', "_").to_lowercase()))
            .collect();
        let lvl_var =
            |l: Lvl| Expr::Var(level_vars[l.index() + usize::from(levels.rooted)].clone());
        let dim_expr: BTreeMap<String, Expr> = dim_vars
            .iter()
            .enumerate()
            .map(|(d, v)| {
                (
                    v.clone(),
                    affine(levels.encoding.lvl_to_dim(Dim(d as u32)), &lvl_var),
                )
            })
            .collect();
        // Level kinds: a level is a reduction when any dimension it reads is one.
        let mut level_kinds = Vec::new();
        if levels.rooted {
            level_kinds.push(IterKind::S);
        }
        for k in 0..levels.encoding.lvl_rank() {
            let mut kind = IterKind::S;
            let e = levels.encoding.dim_to_lvl(Lvl(k as u32));
            for n in e.nodes() {
                if let AffineNode::Var(d) = n {
                    if kind_of(&dim_vars[d.index()]) == IterKind::R {
                        kind = IterKind::R;
                    }
                }
            }
            level_kinds.push(kind);
        }
        let rw = Rewrite {
            group: g,
            level_vars: level_vars.clone(),
            dim_expr,
            dim_vars: dim_vars.clone(),
        };
        // New axis order: the levels replace the driver's dimensions at the first of them.
        let mut axes = Vec::new();
        let mut vars = Vec::new();
        let mut new_kinds = Vec::new();
        let mut placed = false;
        for ((ax, v), k) in it.axes.iter().zip(&it.vars).zip(&kinds) {
            if dim_vars.contains(v) {
                if !placed {
                    axes.extend(levels.axes.iter().cloned());
                    vars.extend(level_vars.iter().cloned());
                    new_kinds.extend(level_kinds.iter().copied());
                    placed = true;
                }
            } else {
                axes.push(ax.clone());
                vars.push(v.clone());
                new_kinds.push(*k);
            }
        }
        // Init stays in place unless a spatial level is nested in a reduction level.
        let first_r = new_kinds.iter().position(|k| *k == IterKind::R);
        // A non-unique level (COO) visits one coordinate at several positions: init there
        // would run once per position, so it moves out as well.
        // (Stores into the driver's own storage are at distinct positions and may stay.)
        let writes_elsewhere = it.init.iter().any(|s| match s {
            Stmt::Store(st) => self.of_buffer.get(&st.buffer) != Some(&g),
            Stmt::Iter(_) => true,
        });
        let types = levels.encoding.lvl_types();
        let nonunique = writes_elsewhere && types.iter().any(|t| !t.is_unique());
        // A spatial level that is not dense visits only stored coordinates: init must still
        // reach the others.
        let skips_points = writes_elsewhere
            && types
                .iter()
                .zip(&level_kinds[usize::from(levels.rooted)..])
                .any(|(t, k)| *k == IterKind::S && !t.is_dense());
        let split_init = (nonunique
            || skips_points
            || first_r.is_some_and(|r| new_kinds[r..].contains(&IterKind::S)))
            && !it.init.is_empty();
        let mut out = Vec::new();
        let init = if split_init {
            let spatial: Vec<usize> = (0..it.axes.len())
                .filter(|&i| kinds.get(i) == Some(&IterKind::S))
                .collect();
            out.push(Stmt::Iter(Iteration {
                name: format!("{}_init", it.name),
                axes: spatial.iter().map(|&i| it.axes[i].clone()).collect(),
                kinds: "S".repeat(spatial.len()),
                vars: spatial.iter().map(|&i| it.vars[i].clone()).collect(),
                init: vec![],
                body: self.stmts(&it.init)?,
                fused: vec![],
                coiteration: None,
                annotations: it.annotations.clone(),
            }));
            vec![]
        } else {
            it.init
                .iter()
                .map(|s| self.rewrite_stmt(s, &rw))
                .collect::<Result<_, _>>()?
        };
        let body = it
            .body
            .iter()
            .map(|s| self.rewrite_stmt(s, &rw))
            .collect::<Result<_, _>>()?;
        let kinds: String = new_kinds
            .iter()
            .map(|k| if *k == IterKind::S { 'S' } else { 'R' })
            .collect();
        out.push(Stmt::Iter(Iteration {
            name: it.name.clone(),
            axes,
            kinds,
            vars,
            init,
            body,
            // Fusion refers to the dimension axes the levels replaced.
            fused: vec![],
            coiteration: None,
            annotations: it.annotations.clone(),
        }));
        Ok(out)
    }

    fn rewrite_stmt(&self, s: &Stmt, rw: &Rewrite) -> Result<Stmt, VerifyError> {
        Ok(match s {
            Stmt::Store(st) => Stmt::Store(self.store(st, Some(rw))),
            Stmt::Iter(inner) => {
                let mut inner = inner.clone();
                inner.init = inner
                    .init
                    .iter()
                    .map(|x| self.rewrite_stmt(x, rw))
                    .collect::<Result<_, _>>()?;
                inner.body = inner
                    .body
                    .iter()
                    .map(|x| self.rewrite_stmt(x, rw))
                    .collect::<Result<_, _>>()?;
                return Ok(self.iteration(&inner)?.pop().unwrap_or(Stmt::Iter(inner)));
            }
        })
    }

    fn store(&self, st: &Store, rw: Option<&Rewrite>) -> Store {
        Store {
            buffer: st.buffer.clone(),
            indices: self.indices(&st.buffer, &st.indices, rw),
            value: self.expr(&st.value, rw),
        }
    }

    /// Indices of an access: direct level variables for the driver's storage, `dim_to_lvl` of
    /// the (rewritten) dimension indices for other encoded buffers.
    fn indices(&self, buffer: &str, indices: &[Expr], rw: Option<&Rewrite>) -> Vec<Expr> {
        let Some(&g) = self.of_buffer.get(buffer) else {
            return indices.iter().map(|i| self.expr(i, rw)).collect();
        };
        if let Some(rw) = rw {
            let direct = rw.group == g
                && indices
                    .iter()
                    .map(Expr::as_var)
                    .eq(rw.dim_vars.iter().map(|v| Some(v.as_str())));
            if direct {
                return rw.level_vars.iter().map(|v| Expr::Var(v.clone())).collect();
            }
        }
        let levels = &self.groups[g];
        let dims: Vec<Expr> = indices.iter().map(|i| self.expr(i, rw)).collect();
        let mut out = Vec::new();
        if levels.rooted {
            out.push(Expr::Int(0));
        }
        for k in 0..levels.encoding.lvl_rank() {
            out.push(affine(
                levels.encoding.dim_to_lvl(Lvl(k as u32)),
                &|d: Dim| dims[d.index()].clone(),
            ));
        }
        out
    }

    fn expr(&self, e: &Expr, rw: Option<&Rewrite>) -> Expr {
        match e {
            Expr::Var(v) => rw
                .and_then(|rw| rw.dim_expr.get(v))
                .cloned()
                .unwrap_or_else(|| e.clone()),
            Expr::Load { buffer, indices } => Expr::Load {
                buffer: buffer.clone(),
                indices: self.indices(buffer, indices, rw),
            },
            Expr::Int(_) | Expr::Float(_) => e.clone(),
            Expr::Unary(op, a) => Expr::Unary(*op, Box::new(self.expr(a, rw))),
            Expr::Binary(op, a, b) => {
                Expr::Binary(*op, Box::new(self.expr(a, rw)), Box::new(self.expr(b, rw)))
            }
            Expr::Select(c, a, b) => Expr::Select(
                Box::new(self.expr(c, rw)),
                Box::new(self.expr(a, rw)),
                Box::new(self.expr(b, rw)),
            ),
            Expr::Cast(t, a) => Expr::Cast(*t, Box::new(self.expr(a, rw))),
            Expr::Semiring(s) => Expr::Semiring(Box::new(s.map(&mut |x| self.expr(x, rw)))),
        }
    }
}

fn walk(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    f(e);
    match e {
        Expr::Int(_) | Expr::Float(_) | Expr::Var(_) => {}
        Expr::Load { indices, .. } => indices.iter().for_each(|i| walk(i, f)),
        Expr::Unary(_, a) | Expr::Cast(_, a) => walk(a, f),
        Expr::Binary(_, a, b) => {
            walk(a, f);
            walk(b, f);
        }
        Expr::Select(c, a, b) => {
            walk(c, f);
            walk(a, f);
            walk(b, f);
        }
        Expr::Semiring(s) => s.exprs().into_iter().for_each(|x| walk(x, f)),
    }
}
