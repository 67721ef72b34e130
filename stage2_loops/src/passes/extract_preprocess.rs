//! Pass `extract_preprocess`: lifts the structure-only work of a stage-II function into a
//! separate preprocessing function that runs once per matrix, before the kernel (SparseTIR's
//! `ExtractPreprocess` + `RemovePreprocess`).
//!
//! Two kinds of work move:
//! - every `let` whose value contains a coordinate search (`search`, `segment`) and depends
//!   only on the structure (`indptr`/`indices` arrays), parameters and the variables of
//!   enclosing loops whose ranges are themselves structure-only. The preprocessing function
//!   fills an aux buffer `mid_K` with the value at every point of those loops; the kernel loads
//!   `mid_K[point]` instead of searching;
//! - the top-level loop nests made only of blocks of iterations annotated `preprocess`
//!   (`sparse_annotate(iter, "preprocess", "true")`, and their init blocks).
//!
//! Before (fused SDDMM):
//! ```text
//! parallel for j in 0..i64(J.indptr[m]) { let i = segment(J.indptr[0..m], j)  ... }
//! ```
//! After, the kernel:
//! ```text
//! parallel for j in 0..i64(J.indptr[m]) { let i = mid_0[j]  ... }
//! ```
//! and the preprocessing function:
//! ```text
//! for j in 0..i64(J.indptr[m]) { mid_0[j] = segment(J.indptr[0..m], j) }
//! ```
//! A search that reads values, a mutable (loop-carried) variable, or lies in loops whose ranges
//! depend on one another cannot move: that is an [`ExtractError`].

use crate::ir::{expr_type, BufferDecl, BufferKind, Expr, ForKind, Func, Stmt};
use lacuna_ir::DType;
use lacuna_stage1::{BinOp, Role, UnOp};
use std::collections::{BTreeMap, BTreeSet};

/// Why the preprocessing cannot be extracted.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExtractError {
    /// A search reads the values of a buffer, which change between runs.
    #[error("`let {var}` cannot move to preprocessing: it reads the values of `{buffer}` (only indptr/indices arrays, parameters and loop variables may be read)")]
    ValueDependent {
        /// The variable the search is bound to.
        var: String,
        /// The buffer.
        buffer: String,
    },
    /// A search reads a mutable variable (the state of a co-iteration loop).
    #[error(
        "`let {var}` cannot move to preprocessing: it reads `{carried}`, a loop-carried variable"
    )]
    LoopCarried {
        /// The variable the search is bound to.
        var: String,
        /// The mutable variable.
        carried: String,
    },
    /// The points where a search is evaluated do not form a box of loops.
    #[error("`let {var}` cannot move to preprocessing: {why}")]
    NotExpressible {
        /// The variable the search is bound to (or the construct).
        var: String,
        /// Why.
        why: String,
    },
    /// A loop nest mixes blocks of `preprocess` iterations with others.
    #[error("the loop nest of `preprocess` block `{block}` also holds block `{other}` of the kernel; the nest must hold only preprocessing blocks")]
    MixedNest {
        /// The preprocessing block.
        block: String,
        /// The kernel block.
        other: String,
    },
    /// A `preprocess` nest depends on (or is overwritten by) the kernel's work.
    #[error("the loop nest of `preprocess` block `{block}` cannot run before the kernel: `{buffer}` is {why}")]
    Order {
        /// The preprocessing block.
        block: String,
        /// The buffer.
        buffer: String,
        /// How the kernel uses it.
        why: &'static str,
    },
    /// Nothing to extract.
    #[error("nothing to extract: the function has no structure-only search and no `preprocess` iteration")]
    Nothing,
}

/// An aux buffer written by the preprocessing function and read by the kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct AuxBuffer {
    /// Its name (`mid_K`).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Number of elements: an `i64` expression over parameters and structure arrays.
    pub len: Expr,
}

/// The preprocessing stage of a kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Preprocess {
    /// The function that runs once per matrix, before the kernel (stage II).
    pub func: Func,
    /// Its aux buffers, which the caller allocates (see [`allocate_aux`]).
    pub aux: Vec<AuxBuffer>,
    /// Every buffer it writes (aux buffers, and the outputs of `preprocess` iterations):
    /// repeated kernel runs must not reset them.
    pub writes: Vec<String>,
}

/// Splits `f` into the kernel and its preprocessing function; `preprocess_iters` names the
/// iterations annotated `preprocess` (their blocks, and their `_init` blocks, move).
pub fn extract_preprocess(
    f: Func,
    preprocess_iters: &BTreeSet<String>,
) -> Result<(Func, Preprocess), ExtractError> {
    let mut taken: BTreeSet<String> = f
        .buffers
        .iter()
        .map(|b| b.name.clone())
        .chain(f.scratch.iter().map(|s| s.name.clone()))
        .collect();
    // 1. Top-level nests of `preprocess` iterations.
    let is_pre = |block: &str| {
        preprocess_iters.contains(block)
            || block
                .strip_suffix("_init")
                .is_some_and(|b| preprocess_iters.contains(b))
    };
    let mut pre_body = Vec::new();
    let mut kernel_body = Vec::new();
    let mut kernel_reads = BTreeSet::new();
    let mut kernel_writes = BTreeSet::new();
    let mut pre_writes: BTreeMap<String, String> = BTreeMap::new();
    for s in f.body {
        let mut names = Vec::new();
        block_names(std::slice::from_ref(&s), &mut names);
        let pre: Vec<&String> = names.iter().filter(|n| is_pre(n)).collect();
        if pre.is_empty() {
            accesses(
                std::slice::from_ref(&s),
                &mut kernel_reads,
                &mut kernel_writes,
            );
            kernel_body.push(s);
            continue;
        }
        if let Some(other) = names.iter().find(|n| !is_pre(n)) {
            return Err(ExtractError::MixedNest {
                block: pre[0].clone(),
                other: other.clone(),
            });
        }
        let (mut r, mut w) = (BTreeSet::new(), BTreeSet::new());
        accesses(std::slice::from_ref(&s), &mut r, &mut w);
        let order = |buffer: &String, why| ExtractError::Order {
            block: pre[0].clone(),
            buffer: buffer.clone(),
            why,
        };
        if let Some(b) = r.iter().find(|b| kernel_writes.contains(*b)) {
            return Err(order(b, "written by the kernel before it"));
        }
        if let Some(b) = w.iter().find(|b| kernel_reads.contains(*b)) {
            return Err(order(b, "read by the kernel before it"));
        }
        for b in w {
            pre_writes.insert(b, pre[0].clone());
        }
        pre_body.push(s);
    }
    // The kernel must not write what preprocessing produced: reruns would see its changes.
    for s in &kernel_body {
        let (mut r, mut w) = (BTreeSet::new(), BTreeSet::new());
        accesses(std::slice::from_ref(s), &mut r, &mut w);
        if let Some(b) = w.iter().find(|b| pre_writes.contains_key(*b)) {
            return Err(ExtractError::Order {
                block: pre_writes[b].clone(),
                buffer: b.clone(),
                why: "written by the kernel too",
            });
        }
    }
    // 2. Structure-only searches.
    let mut cx = Cx {
        f: &f.buffers,
        func: Func {
            name: f.name.clone(),
            params: f.params.clone(),
            axes: f.axes.clone(),
            buffers: f.buffers.clone(),
            body: vec![],
            scratch: f.scratch.clone(),
        },
        taken: &mut taken,
        aux: Vec::new(),
        lifted: Vec::new(),
    };
    let mut scope = Scope::default();
    let kernel_body = cx.stmts(kernel_body, &mut scope)?;
    let aux = cx.aux;
    let lifted = cx.lifted;
    if pre_body.is_empty() && aux.is_empty() {
        return Err(ExtractError::Nothing);
    }
    pre_body.extend(lifted);
    let mut kernel = Func {
        name: f.name.clone(),
        params: f.params.clone(),
        axes: f.axes.clone(),
        buffers: f.buffers.clone(),
        body: kernel_body,
        scratch: f.scratch.clone(),
    };
    let aux_decl = |a: &AuxBuffer, role| BufferDecl {
        name: a.name.clone(),
        dtype: a.dtype,
        layout: vec![],
        kind: BufferKind::Values(role),
    };
    kernel
        .buffers
        .extend(aux.iter().map(|a| aux_decl(a, Role::Input)));
    // The preprocessing function takes the buffers its body touches, and writes the aux ones.
    let (mut r, mut w) = (BTreeSet::new(), BTreeSet::new());
    accesses(&pre_body, &mut r, &mut w);
    let mut pre_buffers: Vec<BufferDecl> = f
        .buffers
        .iter()
        .filter(|b| r.contains(&b.name) || w.contains(&b.name))
        .cloned()
        .collect();
    pre_buffers.extend(aux.iter().map(|a| aux_decl(a, Role::Output)));
    let mut writes: Vec<String> = pre_writes.into_keys().collect();
    writes.extend(aux.iter().map(|a| a.name.clone()));
    let func = Func {
        name: format!("{}_preprocess", f.name),
        params: f.params,
        axes: f.axes,
        buffers: pre_buffers,
        body: pre_body,
        scratch: f.scratch,
    };
    Ok((kernel, Preprocess { func, aux, writes }))
}

/// Allocates the aux buffers of `pre` (zero-filled) in `b`, sized by the bound parameters and
/// structure; runs nothing else.
pub fn allocate_aux(
    pre: &Preprocess,
    b: &mut lacuna_stage1::Bindings,
) -> Result<(), crate::Stage2InterpError> {
    if pre.aux.is_empty() {
        return Ok(());
    }
    // The lengths are evaluated by the interpreter: one store per aux buffer.
    let lens = "__lacuna_aux_len";
    let probe = Func {
        name: format!("{}_aux_len", pre.func.name),
        params: pre.func.params.clone(),
        axes: pre.func.axes.clone(),
        buffers: pre
            .func
            .buffers
            .iter()
            .filter(|d| !matches!(d.kind, BufferKind::Values(_)))
            .cloned()
            .chain(std::iter::once(BufferDecl {
                name: lens.into(),
                dtype: DType::I64,
                layout: vec![],
                kind: BufferKind::Values(Role::Output),
            }))
            .collect(),
        body: pre
            .aux
            .iter()
            .enumerate()
            .map(|(k, a)| Stmt::Store {
                buffer: lens.into(),
                indices: vec![Expr::i64(k as i64)],
                value: a.len.clone(),
            })
            .collect(),
        scratch: vec![],
    };
    b.buffers.insert(
        lens.into(),
        lacuna_ir::ArrayData::zeros(DType::I64, pre.aux.len()),
    );
    let result = crate::interpret_func(&probe, b);
    let lens_data = b.buffers.remove(lens);
    result?;
    let lens_data = lens_data.expect("the probe's output stays bound");
    for (k, a) in pre.aux.iter().enumerate() {
        let n = lens_data.get(k).map_or(0, |v| v.as_f64().max(0.0) as usize);
        b.buffers
            .insert(a.name.clone(), lacuna_ir::ArrayData::zeros(a.dtype, n));
    }
    Ok(())
}

/// Names of the blocks in `stmts`, in program order.
fn block_names(stmts: &[Stmt], out: &mut Vec<String>) {
    for s in stmts {
        if let Stmt::Block { name, .. } = s {
            out.push(name.clone());
        }
        for b in s.bodies() {
            block_names(b, out);
        }
    }
}

/// The buffers `stmts` read and write (stores and atomics write; atomics also read).
fn accesses(stmts: &[Stmt], reads: &mut BTreeSet<String>, writes: &mut BTreeSet<String>) {
    fn expr(e: &Expr, reads: &mut BTreeSet<String>) {
        match e {
            Expr::Load { buffer, .. }
            | Expr::Search { buffer, .. }
            | Expr::Segment { buffer, .. } => {
                reads.insert(buffer.clone());
            }
            _ => {}
        }
        for c in e.children() {
            expr(c, reads);
        }
    }
    for s in stmts {
        match s {
            Stmt::Store { buffer, .. } => {
                writes.insert(buffer.clone());
            }
            Stmt::Atomic { buffer, .. } => {
                writes.insert(buffer.clone());
                reads.insert(buffer.clone());
            }
            _ => {}
        }
        for e in s.exprs() {
            expr(e, reads);
        }
        for b in s.bodies() {
            accesses(b, reads, writes);
        }
    }
}

/// An enclosing loop.
#[derive(Clone)]
struct Loop {
    var: String,
    start: Expr,
    end: Expr,
}

/// What is in scope at a statement.
#[derive(Clone, Default)]
struct Scope {
    /// Enclosing loops, outermost first.
    loops: Vec<Loop>,
    /// `let` variables with their values (lets they read already substituted).
    lets: BTreeMap<String, Expr>,
    /// Mutable variables (`Decl`).
    mutable: BTreeSet<String>,
    /// Enclosing conditions (negated in else branches), lets substituted.
    guards: Vec<Expr>,
}

struct Cx<'a> {
    f: &'a [BufferDecl],
    /// The function's declarations (for element types).
    func: Func,
    taken: &'a mut BTreeSet<String>,
    aux: Vec<AuxBuffer>,
    lifted: Vec<Stmt>,
}

fn has_search(e: &Expr) -> bool {
    matches!(e, Expr::Search { .. } | Expr::Segment { .. })
        || e.children().into_iter().any(has_search)
}

/// `e` with `let` variables replaced by their values.
fn substitute(e: Expr, lets: &BTreeMap<String, Expr>) -> Expr {
    match e {
        Expr::Var(v) => match lets.get(&v) {
            Some(x) => x.clone(),
            None => Expr::Var(v),
        },
        other => other.map_children(&mut |c| substitute(c, lets)),
    }
}

impl Cx<'_> {
    fn stmts(&mut self, stmts: Vec<Stmt>, scope: &mut Scope) -> Result<Vec<Stmt>, ExtractError> {
        let mut out = Vec::with_capacity(stmts.len());
        // Lets and decls bind for the rest of the list: restore the scope afterwards.
        let saved = scope.clone();
        for s in stmts {
            let s = match s {
                Stmt::Let { var, value } if has_search(&value) => {
                    // Later lifts inline the search itself, not the aux load.
                    let inlined = substitute(value.clone(), &scope.lets);
                    let value = self.lift(&var, value, scope)?;
                    scope.lets.insert(var.clone(), inlined);
                    Stmt::Let { var, value }
                }
                Stmt::Let { var, value } => {
                    scope
                        .lets
                        .insert(var.clone(), substitute(value.clone(), &scope.lets));
                    Stmt::Let { var, value }
                }
                Stmt::Decl { var, dtype, init } => {
                    scope.lets.remove(&var);
                    scope.mutable.insert(var.clone());
                    Stmt::Decl { var, dtype, init }
                }
                Stmt::For {
                    var,
                    start,
                    end,
                    kind,
                    body,
                } => {
                    let mut inner = scope.clone();
                    inner.lets.remove(&var);
                    inner.mutable.remove(&var);
                    inner.loops.push(Loop {
                        var: var.clone(),
                        start: substitute(start.clone(), &scope.lets),
                        end: substitute(end.clone(), &scope.lets),
                    });
                    let body = self.stmts(body, &mut inner)?;
                    Stmt::For {
                        var,
                        start,
                        end,
                        kind,
                        body,
                    }
                }
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    let c = substitute(cond.clone(), &scope.lets);
                    let mut t = scope.clone();
                    t.guards.push(c.clone());
                    let then_body = self.stmts(then_body, &mut t)?;
                    let mut e = scope.clone();
                    e.guards.push(Expr::Unary(UnOp::Not, Box::new(c)));
                    let else_body = self.stmts(else_body, &mut e)?;
                    Stmt::If {
                        cond,
                        then_body,
                        else_body,
                    }
                }
                other => {
                    if let Some(e) = other.exprs().into_iter().find(|e| has_search(e)) {
                        return Err(ExtractError::NotExpressible {
                            var: e.to_string(),
                            why: "the search is not bound by a `let`".into(),
                        });
                    }
                    let mut inner = scope.clone();
                    other.try_map_bodies(&mut |b| self.stmts(b, &mut inner))?
                }
            };
            out.push(s);
        }
        *scope = saved;
        Ok(out)
    }

    /// Checks that `e` (lets substituted) reads only structure, parameters and loop variables;
    /// collects the loop variables it reads.
    fn structure_only(
        &self,
        var: &str,
        e: &Expr,
        scope: &Scope,
        deps: &mut BTreeSet<String>,
    ) -> Result<(), ExtractError> {
        match e {
            Expr::Var(v) => {
                if scope.mutable.contains(v) {
                    return Err(ExtractError::LoopCarried {
                        var: var.into(),
                        carried: v.clone(),
                    });
                }
                if !scope.loops.iter().any(|l| &l.var == v) {
                    return Err(ExtractError::NotExpressible {
                        var: var.into(),
                        why: format!("it reads `{v}`, which is not a loop variable in scope"),
                    });
                }
                deps.insert(v.clone());
            }
            Expr::Load { buffer, .. }
            | Expr::Search { buffer, .. }
            | Expr::Segment { buffer, .. } => {
                let structure = self
                    .f
                    .iter()
                    .find(|b| &b.name == buffer)
                    .is_some_and(|b| !matches!(b.kind, BufferKind::Values(_)));
                if !structure {
                    return Err(ExtractError::ValueDependent {
                        var: var.into(),
                        buffer: buffer.clone(),
                    });
                }
            }
            Expr::Coord(c) => {
                return Err(ExtractError::NotExpressible {
                    var: var.into(),
                    why: format!("it reads the untranslated coordinate @{c}"),
                })
            }
            Expr::Shuffle { .. } => {
                return Err(ExtractError::NotExpressible {
                    var: var.into(),
                    why: "it reads a warp shuffle".into(),
                })
            }
            _ => {}
        }
        for c in e.children() {
            self.structure_only(var, c, scope, deps)?;
        }
        Ok(())
    }

    /// Lifts `let var = value` (which searches): returns the kernel's new value, a load of the
    /// aux buffer, and adds the loop nest filling it to the preprocessing function.
    fn lift(&mut self, var: &str, value: Expr, scope: &Scope) -> Result<Expr, ExtractError> {
        let v = substitute(value, &scope.lets);
        let mut deps = BTreeSet::new();
        self.structure_only(var, &v, scope, &mut deps)?;
        // The enclosing conditions over the same loops come along (they keep the search in
        // range, e.g. a split's tail guard); others do not change the value and stay behind.
        let mut guards = Vec::new();
        for g in &scope.guards {
            let mut gd = BTreeSet::new();
            if self.structure_only(var, g, scope, &mut gd).is_ok() && gd.is_subset(&deps) {
                guards.push(g.clone());
            }
        }
        // The loops of the variables read, outermost first; their ranges must not depend on
        // any loop variable (the points form a box).
        let loops: Vec<&Loop> = scope
            .loops
            .iter()
            .filter(|l| deps.contains(&l.var))
            .collect();
        for l in &loops {
            for bound in [&l.start, &l.end] {
                let mut inner = BTreeSet::new();
                self.structure_only(var, bound, scope, &mut inner)
                    .map_err(|e| match e {
                        ExtractError::ValueDependent { buffer, .. } => {
                            ExtractError::ValueDependent {
                                var: var.into(),
                                buffer,
                            }
                        }
                        other => other,
                    })?;
                if let Some(o) = inner.iter().next() {
                    return Err(ExtractError::NotExpressible {
                        var: var.into(),
                        why: format!(
                            "the range of loop `{}` depends on loop `{o}`, so the points of the search do not form a box",
                            l.var
                        ),
                    });
                }
            }
        }
        let mut name = format!("mid_{}", self.aux.len());
        let mut k = self.aux.len();
        while self.taken.contains(&name) {
            k += 1;
            name = format!("mid_{k}");
        }
        self.taken.insert(name.clone());
        let dtype = expr_type(&self.func, &v, &|_| Some(DType::I64));
        // index = ((v0 - s0) * e1 + (v1 - s1)) * e2 + ...; len = e0 * e1 * ...
        let extent = |l: &Loop| {
            if l.start == Expr::i64(0) {
                return Expr::bin(BinOp::Max, l.end.clone(), Expr::i64(0));
            }
            Expr::bin(
                BinOp::Max,
                Expr::sub(l.end.clone(), l.start.clone()),
                Expr::i64(0),
            )
        };
        let mut index = Expr::i64(0);
        let mut len = Expr::i64(1);
        for (n, l) in loops.iter().enumerate() {
            let off = if l.start == Expr::i64(0) {
                Expr::var(&l.var)
            } else {
                Expr::sub(Expr::var(&l.var), l.start.clone())
            };
            index = if n == 0 {
                off
            } else {
                Expr::add(Expr::mul(index, extent(l)), off)
            };
            len = if n == 0 {
                extent(l)
            } else {
                Expr::mul(len, extent(l))
            };
        }
        let mut body = vec![Stmt::Store {
            buffer: name.clone(),
            indices: vec![index.clone()],
            value: v,
        }];
        for g in guards.into_iter().rev() {
            body = vec![Stmt::If {
                cond: g,
                then_body: body,
                else_body: vec![],
            }];
        }
        for l in loops.iter().rev() {
            body = vec![Stmt::For {
                var: l.var.clone(),
                start: l.start.clone(),
                end: l.end.clone(),
                kind: ForKind::Serial,
                body,
            }];
        }
        self.lifted.extend(body);
        self.aux.push(AuxBuffer {
            name: name.clone(),
            dtype,
            len,
        });
        Ok(Expr::Load {
            buffer: name,
            indices: vec![index],
        })
    }
}
