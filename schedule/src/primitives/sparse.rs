//! Stage-I primitives: `sparse_reorder`, `specialize`.

use crate::error::Condition;
use lacuna_stage1::{AxisKind, Iteration, Program, Size, Stmt};

fn find_iteration<'a>(stmts: &'a mut [Stmt], name: &str) -> Option<&'a mut Iteration> {
    for s in stmts {
        if let Stmt::Iter(it) = s {
            if it.name == name {
                return Some(it);
            }
            if let Some(x) = find_iteration(&mut it.body, name) {
                return Some(x);
            }
        }
    }
    None
}

/// `sparse_reorder(iter, axes)`: iterates the axes of a sparse iteration in a new order.
/// Requires: `axes` is a permutation of the iteration's axes, and each axis comes after its
/// parent.
pub fn sparse_reorder(mut p: Program, iter: &str, axes: &[String]) -> Result<Program, Condition> {
    let snapshot = p.clone();
    let it = find_iteration(&mut p.body, iter).ok_or_else(|| Condition::NotFound {
        what: "iteration",
        name: iter.to_string(),
    })?;
    let mut a = it.axes.clone();
    let mut b = axes.to_vec();
    a.sort();
    b.sort();
    if a != b {
        return Err(Condition::NotPermutation {
            expected: it.axes.clone(),
            given: axes.to_vec(),
        });
    }
    for (k, ax) in axes.iter().enumerate() {
        if let Some(parent) = snapshot.axis(ax).and_then(|x| x.kind.parent()) {
            if let Some(pk) = axes.iter().position(|x| x == parent) {
                if pk > k {
                    return Err(Condition::ChildBeforeParent {
                        axis: ax.clone(),
                        parent: parent.to_string(),
                    });
                }
            }
        }
    }
    let kinds: Vec<char> = it.kinds.chars().collect();
    let perm: Vec<usize> = axes
        .iter()
        .map(|x| it.axes.iter().position(|y| y == x).expect("a permutation"))
        .collect();
    it.vars = perm.iter().map(|&i| it.vars[i].clone()).collect();
    it.kinds = perm.iter().map(|&i| kinds[i]).collect();
    it.axes = axes.to_vec();
    Ok(p)
}

/// `specialize(param, value)`: replaces a symbolic size by a constant; inputs must then agree.
pub fn specialize(mut p: Program, param: &str, value: u64) -> Result<Program, Condition> {
    if !p.params.iter().any(|x| x == param) {
        return Err(Condition::NotFound {
            what: "parameter",
            name: param.to_string(),
        });
    }
    p.params.retain(|x| x != param);
    let fix = |s: &mut Size| {
        if matches!(s, Size::Param(x) if x == param) {
            *s = Size::Const(value);
        }
    };
    for a in &mut p.axes {
        match &mut a.kind {
            AxisKind::DenseFixed { n } => fix(n),
            AxisKind::DenseVariable { max_len, nnz, .. } => {
                fix(max_len);
                fix(nnz);
            }
            AxisKind::SparseFixed { n, nnz_cols, .. } => {
                fix(n);
                fix(nnz_cols);
            }
            AxisKind::SparseVariable { n, nnz, .. } => {
                fix(n);
                fix(nnz);
            }
            AxisKind::Attached { n, .. } => fix(n),
        }
        if let Some(t) = &mut a.tiles {
            fix(&mut t.extent);
        }
    }
    Ok(p)
}

/// The statement list holding iteration `name` (at any depth), and its position there.
fn holder<'a>(stmts: &'a mut Vec<Stmt>, name: &str) -> Option<(&'a mut Vec<Stmt>, usize)> {
    if let Some(at) = stmts
        .iter()
        .position(|s| matches!(s, Stmt::Iter(it) if it.name == name))
    {
        return Some((stmts, at));
    }
    for s in stmts.iter_mut() {
        if let Stmt::Iter(it) = s {
            if let Some(found) = holder(&mut it.body, name) {
                return Some(found);
            }
        }
    }
    None
}

/// Whether a stage-I expression reads iterator `var` (semiring regions are assumed to).
fn reads_var(e: &lacuna_stage1::Expr, var: &str) -> bool {
    use lacuna_stage1::Expr as E;
    match e {
        E::Int(_) | E::Float(_) => false,
        E::Var(v) => v == var,
        E::Load { indices, .. } => indices.iter().any(|i| reads_var(i, var)),
        E::Unary(_, a) | E::Cast(_, a) => reads_var(a, var),
        E::Binary(_, a, b) => reads_var(a, var) || reads_var(b, var),
        E::Select(c, a, b) => reads_var(c, var) || reads_var(a, var) || reads_var(b, var),
        E::Semiring(_) => true,
    }
}

/// `sparse_decompose_init(iter)` (a stage-I `decompose_reduction`): the init of `iter` becomes
/// its own iteration `ITER_init` over `iter`'s spatial axes (same variables, in order), placed
/// just before `iter`; `iter` keeps only its body. The init then runs once per spatial point
/// before any of the reduction, as before, and `sparse_fuse` may fuse a spatial axis with a
/// reduction axis of `iter` (e.g. the rows and entries of SpMV: an nnz-split loop).
///
/// Requires: `iter` has an init, is not compiled by co-iteration, the init reads no reduction
/// iterator, and every spatial axis whose parent is iterated by `iter` has a spatial parent
/// (so that the spatial axes form an iteration of their own).
pub fn sparse_decompose_init(mut p: Program, iter: &str) -> Result<Program, Condition> {
    let snapshot = p.clone();
    let (list, at) = holder(&mut p.body, iter).ok_or_else(|| Condition::NotFound {
        what: "iteration",
        name: iter.to_string(),
    })?;
    let Stmt::Iter(it) = &mut list[at] else {
        unreachable!("holder finds iterations")
    };
    let bad = |what: String| Condition::BadArgument { what };
    if it.init.is_empty() {
        return Err(bad(format!("iteration `{iter}` has no init to decompose")));
    }
    if it.coiteration.is_some() {
        return Err(bad(format!(
            "iteration `{iter}` is compiled by co-iteration, whose init is part of its merge"
        )));
    }
    let name = format!("{iter}_init");
    if find_iteration(&mut snapshot.body.clone(), &name).is_some() {
        return Err(bad(format!("an iteration named `{name}` exists already")));
    }
    let kinds: Vec<char> = it.kinds.chars().collect();
    let spatial: Vec<usize> = (0..it.axes.len())
        .filter(|&k| kinds.get(k) == Some(&'S'))
        .collect();
    for (k, ax) in it.axes.iter().enumerate() {
        if kinds.get(k) == Some(&'R') {
            let var = &it.vars[k];
            let reads = it.init.iter().any(|s| match s {
                Stmt::Store(st) => {
                    st.indices.iter().any(|i| reads_var(i, var)) || reads_var(&st.value, var)
                }
                Stmt::Iter(_) => true,
            });
            if reads {
                return Err(bad(format!(
                    "the init of `{iter}` reads the reduction iterator `{var}` (axis `{ax}`)"
                )));
            }
        } else if let Some(parent) = snapshot.axis(ax).and_then(|a| a.kind.parent()) {
            if let Some(pk) = it.axes.iter().position(|a| a == parent) {
                if kinds.get(pk) == Some(&'R') {
                    return Err(bad(format!(
                        "spatial axis `{ax}` of `{iter}` depends on reduction axis `{parent}`"
                    )));
                }
            }
        }
    }
    let init = Iteration {
        name,
        axes: spatial.iter().map(|&k| it.axes[k].clone()).collect(),
        kinds: "S".repeat(spatial.len()),
        vars: spatial.iter().map(|&k| it.vars[k].clone()).collect(),
        init: vec![],
        body: std::mem::take(&mut it.init),
        fused: vec![],
        coiteration: None,
        annotations: it.annotations.clone(),
    };
    list.insert(at, Stmt::Iter(init));
    Ok(p)
}

/// `sparse_fuse(iter, [outer, inner])`: iterates a dense axis and its variable child as one
/// flat axis over the child's positions; the parent's position is recovered by a search of the
/// child's `indptr`. Requires: the two axes are consecutive in the iteration, the child's parent
/// is the first, and (when the iteration has init) both are spatial or both reductions.
pub fn sparse_fuse(mut p: Program, iter: &str, axes: &[String]) -> Result<Program, Condition> {
    let [outer, inner] = axes else {
        return Err(Condition::BadArgument {
            what: format!("sparse_fuse takes two axes, got {}", axes.len()),
        });
    };
    let fusable = matches!(
        p.axis(outer).map(|a| &a.kind),
        Some(AxisKind::DenseFixed { .. })
    ) && p
        .axis(inner)
        .is_some_and(|a| a.kind.parent() == Some(outer.as_str()) && a.kind.has_indptr());
    if !fusable {
        return Err(Condition::BadArgument {
            what: format!("cannot fuse `{outer}` and `{inner}`: the second must be a variable axis whose parent is the first, a dense_fixed axis"),
        });
    }
    let it = find_iteration(&mut p.body, iter).ok_or_else(|| Condition::NotFound {
        what: "iteration",
        name: iter.to_string(),
    })?;
    let at = it
        .axes
        .iter()
        .position(|a| a == outer)
        .ok_or_else(|| Condition::NotFound {
            what: "axis",
            name: outer.clone(),
        })?;
    if it.axes.get(at + 1) != Some(inner) {
        return Err(Condition::BadArgument {
            what: format!("`{inner}` must directly follow `{outer}` in iteration `{iter}`"),
        });
    }
    let kinds: Vec<char> = it.kinds.chars().collect();
    if !it.init.is_empty() && kinds.get(at) != kinds.get(at + 1) {
        return Err(Condition::BadArgument { what: format!("fusing a spatial and a reduction axis of `{iter}` would leave its init without a place") });
    }
    if it
        .fused
        .iter()
        .any(|(o, i)| o == outer || i == inner || o == inner || i == outer)
    {
        return Err(Condition::BadArgument {
            what: format!("`{outer}` or `{inner}` is already fused"),
        });
    }
    it.fused.push((outer.clone(), inner.clone()));
    Ok(p)
}

/// `pos(iter, axis, buffer)` (TACO's position-space iteration): an iteration over a dense axis
/// that reads `buffer` there iterates the stored positions of `buffer`'s sparse axis instead, so
/// coordinates where `buffer` stores nothing are skipped rather than searched.
///
/// Requires: `buffer`'s axis at the access is sparse (not a dense level), its parent is iterated
/// before, and skipping is exact: every statement of the iteration has the form
/// `out[...] = out[...] + e` with `e` a product that has `buffer[...]` (default value 0) as a
/// factor.
pub fn pos(mut p: Program, iter: &str, axis: &str, buffer: &str) -> Result<Program, Condition> {
    let snapshot = p.clone();
    let buf = snapshot.buffer(buffer).ok_or_else(|| Condition::NotFound {
        what: "buffer",
        name: buffer.to_string(),
    })?;
    if buf.default_value.unwrap_or(0.0) != 0.0 {
        return Err(Condition::BadArgument { what: format!("`{buffer}` reads {} where it stores nothing, so its absent entries cannot be skipped", buf.default_value.unwrap_or(0.0)) });
    }
    let it = find_iteration(&mut p.body, iter).ok_or_else(|| Condition::NotFound {
        what: "iteration",
        name: iter.to_string(),
    })?;
    let at = it
        .axes
        .iter()
        .position(|a| a == axis)
        .ok_or_else(|| Condition::NotFound {
            what: "axis",
            name: axis.to_string(),
        })?;
    let var = it.vars[at].clone();
    // The access of `buffer` and the buffer axis its iterator indexes.
    let mut target: Option<String> = None;
    for st in &it.body {
        let Stmt::Store(s) = st else {
            return Err(Condition::BadArgument {
                what: format!("iteration `{iter}` has a nested iteration"),
            });
        };
        let exact = match &s.value {
            lacuna_stage1::Expr::Binary(lacuna_stage1::BinOp::Add, acc, e) => {
                matches!(&**acc, lacuna_stage1::Expr::Load { buffer: b, indices } if *b == s.buffer && *indices == s.indices)
                    && has_factor(e, buffer)
            }
            _ => false,
        };
        if !exact {
            return Err(Condition::BadArgument { what: format!("statement `{s}` is not `out = out + ... * {buffer}[...]`: skipping absent entries would change it") });
        }
        if let Some(ax) = factor_axis(&s.value, buffer, &var, &buf.axes) {
            target = Some(ax);
        }
    }
    let level = target.ok_or_else(|| Condition::BadArgument {
        what: format!("`{buffer}` is not indexed by `{var}` in iteration `{iter}`"),
    })?;
    let level_axis = snapshot.axis(&level).ok_or_else(|| Condition::NotFound {
        what: "axis",
        name: level.clone(),
    })?;
    if level_axis.kind.is_dense() {
        return Err(Condition::BadArgument {
            what: format!("`pos` needs a sparse level, but `{buffer}`'s axis `{level}` is dense"),
        });
    }
    if let Some(parent) = level_axis.kind.parent() {
        if !it.axes[..at].iter().any(|a| a == parent) {
            return Err(Condition::ChildBeforeParent {
                axis: level.clone(),
                parent: parent.to_string(),
            });
        }
    }
    it.axes[at] = level;
    Ok(p)
}

/// True when `e` is a product with a load of `buffer` as a factor.
fn has_factor(e: &lacuna_stage1::Expr, buffer: &str) -> bool {
    use lacuna_stage1::{BinOp, Expr};
    match e {
        Expr::Load { buffer: b, .. } => b == buffer,
        Expr::Binary(BinOp::Mul, a, b) => has_factor(a, buffer) || has_factor(b, buffer),
        _ => false,
    }
}

/// The axis of `buffer` that iterator `var` indexes in a load of `buffer` within `e`.
fn factor_axis(
    e: &lacuna_stage1::Expr,
    buffer: &str,
    var: &str,
    axes: &[String],
) -> Option<String> {
    use lacuna_stage1::Expr;
    match e {
        Expr::Load { buffer: b, indices } if b == buffer => indices
            .iter()
            .position(|i| i.as_var() == Some(var))
            .map(|d| axes[d].clone()),
        Expr::Load { .. } | Expr::Int(_) | Expr::Float(_) | Expr::Var(_) => None,
        Expr::Unary(_, a) | Expr::Cast(_, a) => factor_axis(a, buffer, var, axes),
        Expr::Binary(_, a, b) => {
            factor_axis(a, buffer, var, axes).or_else(|| factor_axis(b, buffer, var, axes))
        }
        Expr::Select(c, a, b) => factor_axis(c, buffer, var, axes)
            .or_else(|| factor_axis(a, buffer, var, axes))
            .or_else(|| factor_axis(b, buffer, var, axes)),
        Expr::Semiring(s) => s
            .exprs()
            .into_iter()
            .find_map(|x| factor_axis(x, buffer, var, axes)),
    }
}

/// `annotate(iter, key, value)` (with `Some(value)`) or `unannotate(iter, key)` (with `None`):
/// sets or removes an annotation of a sparse iteration. Requires: the iteration exists, a
/// non-empty key, and for `unannotate` that the key is set.
pub fn annotate(
    mut p: Program,
    iter: &str,
    key: &str,
    value: Option<&str>,
) -> Result<Program, Condition> {
    if key.is_empty() {
        return Err(Condition::BadArgument {
            what: "an empty annotation key".into(),
        });
    }
    let it = find_iteration(&mut p.body, iter).ok_or_else(|| Condition::NotFound {
        what: "iteration",
        name: iter.to_string(),
    })?;
    match value {
        Some(v) => {
            it.annotations.insert(key.to_string(), v.to_string());
        }
        None => {
            if it.annotations.remove(key).is_none() {
                return Err(Condition::NotFound {
                    what: "annotation",
                    name: key.to_string(),
                });
            }
        }
    }
    Ok(p)
}

/// `specialize_buffer(axis, form)`: asserts a closed form for one of an axis's structure arrays
/// (`indptr[i] = stride * i`, or `indices[p] = row * i + in_row * (p - indptr[i]) + constant`);
/// lowering computes it instead of loading the array, and binding checks the data against it
/// (a typed error names the array and the first mismatching position). Requires: the axis
/// has that array (a variable axis for `indptr`, a compressed one for `indices`; not loose), a
/// non-negative stride, and no form for that array yet.
pub fn specialize_buffer(
    mut p: Program,
    axis: &str,
    form: lacuna_stage1::ClosedForm,
) -> Result<Program, Condition> {
    use lacuna_stage1::ClosedForm;
    let a = p
        .axes
        .iter_mut()
        .find(|a| a.name == axis)
        .ok_or_else(|| Condition::NotFound {
            what: "axis",
            name: axis.to_string(),
        })?;
    let fits = match (&form, &a.kind) {
        (ClosedForm::Indptr { stride }, AxisKind::DenseVariable { .. })
        | (ClosedForm::Indptr { stride }, AxisKind::SparseVariable { loose: false, .. }) => {
            *stride >= 0
        }
        (ClosedForm::Indices { .. }, AxisKind::SparseVariable { loose: false, .. }) => true,
        _ => false,
    };
    if !fits {
        return Err(Condition::BadArgument {
            what: format!(
                "axis `{axis}` has no `{}` that {form:?} can describe (indptr: a variable axis and a stride >= 0; indices: a compressed axis; not loose)",
                form.array()
            ),
        });
    }
    if a.closed_forms.iter().any(|f| f.array() == form.array()) {
        return Err(Condition::BadArgument {
            what: format!("`{axis}.{}` is specialized already", form.array()),
        });
    }
    a.closed_forms.push(form);
    Ok(p)
}
