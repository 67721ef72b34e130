//! Stage-I primitive `decompose_format`: one CSR buffer becomes a sum of parts in other formats
//! (ELL buckets, split long rows, BSR, a CSR remainder), each computed by its own copy of the
//! iterations that read it, with the parts built from the original by a conversion that runs
//! once before the kernel.
//!
//! Before: `sp_iter spmm [I, J, K] "SRS" (i, j, k) { init { C[i, k] = 0.0 } C[i, k] += A[i, j] * B[j, k] }`
//! After `decompose_format(A, "(+ (bucket 1 3 (ell 2)) (split_rows 2))")`:
//! ```text
//! sp_iter spmm_init [I, K] "SS" (i, k) { C[i, k] = 0.0 }
//! sp_iter spmm_p0 [A.p0.r, A.p0.s, K] "SRS" (r, j, k) { C[A.p0.row[r], k] += A.p0[r, j] * B[j, k] }
//! sp_iter spmm_p1 [A.p1.r, A.p1.s, K] "SRS" (r, j, k) { C[A.p1.row[r], k] += A.p1[r, j] * B[j, k] }
//! ```
//! ELL padding slots hold column 0 and value 0, so they add `0 * B[0, k]`.

use crate::decompose::{materialize, CsrMatrix, Decomposition, Storage};
use crate::error::Condition;
use lacuna_ir::DType;
use lacuna_stage1::{
    Axis, AxisKind, BinOp, Buffer, Expr, IndexType, Iteration, Program, Role, Size, Stmt, Store,
    Tiles,
};
use serde::{Deserialize, Serialize};

/// What a part's kernel iterates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartKind {
    /// Rows of a fixed width with a row id per stored row (ELL, split rows).
    Ell,
    /// `b`×`b` blocks.
    Bsr(usize),
    /// A CSR matrix of the original shape.
    Csr,
    /// CSR with rows padded to a multiple of a tile (padding holds value 0; its coordinates
    /// repeat, so the axis is unsorted).
    Padded,
    /// Sliced ELL (`sell`): groups of `lanes` rows, each a ragged run of steps of `lanes` slots
    /// (column-major), with a row id per lane and a column per slot of type `cols` (the
    /// decomposed column axis's index type).
    Sell {
        /// Rows per group.
        lanes: usize,
        /// The index type of the column buffer.
        cols: IndexType,
    },
    /// DIA (`dia`): blocks of `lanes` matrix rows, each a run of one step per diagonal of
    /// `lanes` slots; row `b * lanes + l`, column that row plus the step's diagonal offset.
    Dia {
        /// Rows per block.
        lanes: usize,
    },
    /// Column panels (`panels`): a dense panel axis, the panel's rows as a sparse axis whose
    /// coordinates are matrix rows, their entries in the panel as a sparse axis of columns;
    /// both sparse axes index with `index` (the decomposed column axis's index type).
    Panels {
        /// The index type of the sparse axes' arrays.
        index: IndexType,
    },
    /// CSR with row ids (`rcm`): a dense axis of every matrix row in the stored order, its
    /// row id (a buffer declared a permutation of the row axis's coordinates), its entries as
    /// a sparse axis of columns indexing with `index`. Each row is stored once, so the
    /// iteration's init runs in the part, row by row (as for `dia`).
    Rows {
        /// The index type of the entries' arrays.
        index: IndexType,
    },
}

/// A decomposition applied to a buffer: what the conversion must build at run time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conversion {
    /// The decomposed buffer (still an input: the conversion reads it).
    pub buffer: String,
    /// The decomposition.
    pub decomposition: Decomposition,
    /// The kernel-side kind of each part, in materialization order.
    pub parts: Vec<PartKind>,
    /// A relation-level decomposition (`(per_relation D)`): the buffer is a relation-CSF
    /// `A[r, i, j]` and `decomposition` applies to each relation's matrix (see
    /// [`convert_relations`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_relation: bool,
    /// The buffer's values are stored once (`iso_values`): the parts hold no values, and the
    /// kernel reads the one value `BUFFER.iso` ([`iso_name`](super::iso::iso_name)), which the
    /// run fills from the buffer's values after checking them equal. With no `parts`, the
    /// buffer keeps its storage (an `iso_values` of a buffer no `decompose_format` split).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub iso: bool,
}

/// An input of row or column ids built by the conversion: coordinates of axis `of`, checked
/// when bound, which lets kernels index by them without a range check.
fn coordinates_buffer(name: String, axes: Vec<String>, dtype: DType, of: &str) -> Buffer {
    Buffer {
        coordinates_of: Some(of.to_string()),
        ..input_buffer(name, axes, dtype)
    }
}

/// The declaration of buffer `name` of `p`.
pub(crate) fn buffer_named(p: &Program, name: &str) -> Result<Buffer, Condition> {
    p.buffer(name).cloned().ok_or_else(|| Condition::NotFound {
        what: "buffer",
        name: name.to_string(),
    })
}

/// A plain input buffer (the conversion binds its data).
pub(crate) fn input_buffer(name: String, axes: Vec<String>, dtype: DType) -> Buffer {
    Buffer {
        name,
        axes,
        dtype,
        role: Role::Input,
        default_value: None,
        extra_storage: 0,
        encoding: None,
        dims: vec![],
        coordinates_of: None,
        permutation: false,
    }
}

/// Names of part `t` of buffer `b`.
pub fn part_name(b: &str, t: usize) -> String {
    format!("{b}.p{t}")
}

fn kinds_of(d: &Decomposition, cols: IndexType) -> Result<Vec<PartKind>, Condition> {
    let empty = CsrMatrix::new(0, 0, vec![0], vec![], vec![])
        .map_err(|e| Condition::Invalid(e.to_string()))?;
    let parts = materialize(&empty, d).map_err(|e| Condition::Invalid(e.to_string()))?;
    parts
        .iter()
        .map(|p| match &p.storage {
            Storage::Ell(_) | Storage::SplitRows(_) => Ok(PartKind::Ell),
            Storage::Bsr(b) => Ok(PartKind::Bsr(b.block)),
            Storage::Csr(_) => Ok(PartKind::Csr),
            Storage::Padded(_) => Ok(PartKind::Padded),
            Storage::Sell(s) => Ok(PartKind::Sell {
                lanes: s.lanes,
                cols,
            }),
            Storage::Dia(s) => Ok(PartKind::Dia { lanes: s.lanes }),
            Storage::Panels(_) => Ok(PartKind::Panels { index: cols }),
            Storage::Rows(_) => Ok(PartKind::Rows { index: cols }),
        })
        .collect()
}

/// Applies the decomposition `into` to buffer `buffer` of `p`.
pub fn decompose_format(
    mut p: Program,
    buffer: &str,
    into: &str,
) -> Result<(Program, Conversion), Condition> {
    if let Some(inner) = per_relation_term(into) {
        return decompose_relations(p, buffer, inner);
    }
    let d: Decomposition =
        into.parse().map_err(
            |e: crate::decompose::DecomposeError| Condition::BadArgument {
                what: format!("decomposition `{into}`: {e}"),
            },
        )?;
    let buf = buffer_named(&p, buffer)?;
    let csr = match (buf.role, buf.dtype, buf.axes.as_slice()) {
        (Role::Input, DType::F64, [i, j]) => {
            match (p.axis(i).map(|a| &a.kind), p.axis(j).map(|a| &a.kind)) {
                (
                    Some(AxisKind::DenseFixed { .. }),
                    Some(AxisKind::SparseVariable {
                        parent,
                        loose: false,
                        ..
                    }),
                ) if parent == i => Some((i.clone(), j.clone())),
                _ => None,
            }
        }
        _ => None,
    };
    let (ai, aj) = csr.ok_or_else(|| Condition::BadArgument { what: format!("`{buffer}` must be an f64 input stored as CSR (a dense_fixed axis, then its sparse_variable child)") })?;
    let n = p
        .axis(&aj)
        .map(|a| a.kind.coord_extent().clone())
        .unwrap_or(Size::Const(0));
    let col_type = p.axis(&aj).map_or(IndexType::I64, |a| a.idtype);
    let kinds = kinds_of(&d, col_type)?;
    // Axes and buffers of the parts.
    for (t, kind) in kinds.iter().enumerate() {
        let pn = part_name(buffer, t);
        let (axes, extra): (Vec<Axis>, Vec<Buffer>) = match kind {
            PartKind::Ell => {
                p.params.extend([format!("{pn}.rows"), format!("{pn}.w")]);
                let r = Axis {
                    name: format!("{pn}.r"),
                    kind: AxisKind::DenseFixed {
                        n: Size::Param(format!("{pn}.rows")),
                    },
                    idtype: IndexType::I64,
                    sorted: true,
                    closed_forms: vec![],
                    tiles: None,
                };
                let s = Axis {
                    name: format!("{pn}.s"),
                    kind: AxisKind::SparseFixed {
                        parent: r.name.clone(),
                        n: n.clone(),
                        nnz_cols: Size::Param(format!("{pn}.w")),
                    },
                    idtype: IndexType::I64,
                    sorted: false,
                    closed_forms: vec![],
                    tiles: None,
                };
                let row =
                    coordinates_buffer(format!("{pn}.row"), vec![r.name.clone()], DType::I64, &ai);
                let vals =
                    input_buffer(pn.clone(), vec![r.name.clone(), s.name.clone()], DType::F64);
                (vec![r, s], vec![row, vals])
            }
            PartKind::Csr | PartKind::Padded => {
                p.params.push(format!("{pn}.nnz"));
                let sorted = *kind == PartKind::Csr;
                let s = entries_axis(&pn, &ai, &n, IndexType::I64, sorted);
                let vals = input_buffer(pn.clone(), vec![ai.clone(), s.name.clone()], DType::F64);
                (vec![s], vec![vals])
            }
            PartKind::Bsr(b) => {
                p.params
                    .extend([format!("{pn}.mb"), format!("{pn}.nb"), format!("{pn}.nnzb")]);
                // Only blocks inside the matrix are stored (`n_rows / b` block rows, `n_cols /
                // b` block columns): a block's rows and columns need no range checks.
                let rows = p
                    .axis(&ai)
                    .map(|a| a.kind.coord_extent().clone())
                    .unwrap_or(Size::Const(0));
                let bi = Axis {
                    name: format!("{pn}.bi"),
                    kind: AxisKind::DenseFixed {
                        n: Size::Param(format!("{pn}.mb")),
                    },
                    idtype: IndexType::I64,
                    sorted: true,
                    closed_forms: vec![],
                    tiles: Some(Tiles {
                        extent: rows,
                        factor: *b as u64,
                    }),
                };
                let bj = Axis {
                    name: format!("{pn}.bj"),
                    kind: AxisKind::SparseVariable {
                        parent: bi.name.clone(),
                        n: Size::Param(format!("{pn}.nb")),
                        nnz: Size::Param(format!("{pn}.nnzb")),
                        loose: false,
                    },
                    idtype: IndexType::I64,
                    sorted: true,
                    closed_forms: vec![],
                    tiles: Some(Tiles {
                        extent: n.clone(),
                        factor: *b as u64,
                    }),
                };
                let ii = Axis {
                    name: format!("{pn}.ii"),
                    kind: AxisKind::DenseFixed {
                        n: Size::Const(*b as u64),
                    },
                    idtype: IndexType::I64,
                    sorted: true,
                    closed_forms: vec![],
                    tiles: None,
                };
                let jj = Axis {
                    name: format!("{pn}.jj"),
                    kind: AxisKind::DenseFixed {
                        n: Size::Const(*b as u64),
                    },
                    idtype: IndexType::I64,
                    sorted: true,
                    closed_forms: vec![],
                    tiles: None,
                };
                let vals = input_buffer(
                    pn.clone(),
                    vec![
                        bi.name.clone(),
                        bj.name.clone(),
                        ii.name.clone(),
                        jj.name.clone(),
                    ],
                    DType::F64,
                );
                (vec![bi, bj, ii, jj], vec![vals])
            }
            PartKind::Sell { lanes, cols } => {
                p.params.extend([
                    format!("{pn}.groups"),
                    format!("{pn}.w"),
                    format!("{pn}.steps"),
                ]);
                let (g, l) = lane_axes(&pn, "groups", *lanes);
                let q = i64_axis(
                    format!("{pn}.q"),
                    AxisKind::DenseVariable {
                        parent: g.name.clone(),
                        max_len: Size::Param(format!("{pn}.w")),
                        nnz: Size::Param(format!("{pn}.steps")),
                    },
                    true,
                );
                let row = coordinates_buffer(
                    format!("{pn}.row"),
                    vec![g.name.clone(), l.name.clone()],
                    DType::I64,
                    &ai,
                );
                let slot_axes = vec![g.name.clone(), q.name.clone(), l.name.clone()];
                let col_dtype = match cols {
                    IndexType::I32 => DType::I32,
                    IndexType::I64 => DType::I64,
                };
                let col =
                    coordinates_buffer(format!("{pn}.col"), slot_axes.clone(), col_dtype, &aj);
                let vals = input_buffer(pn.clone(), slot_axes, DType::F64);
                (vec![g, q, l], vec![row, col, vals])
            }
            PartKind::Panels { index } => {
                p.params.extend([
                    format!("{pn}.panels"),
                    format!("{pn}.nrows"),
                    format!("{pn}.nnz"),
                ]);
                let rows = p
                    .axis(&ai)
                    .map(|a| a.kind.coord_extent().clone())
                    .unwrap_or(Size::Const(0));
                let panel = i64_axis(
                    format!("{pn}.p"),
                    AxisKind::DenseFixed {
                        n: Size::Param(format!("{pn}.panels")),
                    },
                    true,
                );
                // Row ids and positions at the width of the decomposed column axis (binding
                // refuses a value beyond it).
                let r = index_axis(
                    format!("{pn}.i"),
                    AxisKind::SparseVariable {
                        parent: panel.name.clone(),
                        n: rows,
                        nnz: Size::Param(format!("{pn}.nrows")),
                        loose: false,
                    },
                    *index,
                    true,
                );
                let s = entries_axis(&pn, &r.name, &n, *index, true);
                let vals = input_buffer(
                    pn.clone(),
                    vec![panel.name.clone(), r.name.clone(), s.name.clone()],
                    DType::F64,
                );
                (vec![panel, r, s], vec![vals])
            }
            PartKind::Rows { index } => {
                p.params.extend([format!("{pn}.rows"), format!("{pn}.nnz")]);
                let r = i64_axis(
                    format!("{pn}.r"),
                    AxisKind::DenseFixed {
                        n: Size::Param(format!("{pn}.rows")),
                    },
                    true,
                );
                let s = entries_axis(&pn, &r.name, &n, *index, true);
                let row = Buffer {
                    permutation: true,
                    ..coordinates_buffer(format!("{pn}.row"), vec![r.name.clone()], DType::I64, &ai)
                };
                let vals =
                    input_buffer(pn.clone(), vec![r.name.clone(), s.name.clone()], DType::F64);
                (vec![r, s], vec![row, vals])
            }
            PartKind::Dia { lanes } => {
                p.params
                    .extend([format!("{pn}.blocks"), format!("{pn}.diagonals")]);
                let (g, l) = lane_axes(&pn, "blocks", *lanes);
                let q = i64_axis(
                    format!("{pn}.q"),
                    AxisKind::DenseFixed {
                        n: Size::Param(format!("{pn}.diagonals")),
                    },
                    true,
                );
                let offsets = input_buffer(format!("{pn}.off"), vec![q.name.clone()], DType::I64);
                // Diagonal-major (see `Layout::Dia`): the values' axes are (q, g, l) while
                // the iteration nests g, q, l.
                let vals = input_buffer(
                    pn.clone(),
                    vec![q.name.clone(), g.name.clone(), l.name.clone()],
                    DType::F64,
                );
                (vec![g, q, l], vec![offsets, vals])
            }
        };
        p.axes.extend(axes);
        p.buffers.extend(extra);
    }
    let body = std::mem::take(&mut p.body);
    p.body = rewrite(&body, buffer, &ai, &aj, &kinds, &p.buffers)?;
    Ok((
        p,
        Conversion {
            buffer: buffer.to_string(),
            decomposition: d,
            parts: kinds,
            per_relation: false,
            iso: false,
        },
    ))
}

fn reads(e: &Expr, buffer: &str) -> bool {
    let mut found = false;
    visit(e, &mut |x| {
        found |= matches!(x, Expr::Load { buffer: b, .. } if b == buffer)
    });
    found
}

fn visit(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    f(e);
    match e {
        Expr::Int(_) | Expr::Float(_) | Expr::Var(_) => {}
        Expr::Load { indices, .. } => indices.iter().for_each(|i| visit(i, f)),
        Expr::Unary(_, a) | Expr::Cast(_, a) => visit(a, f),
        Expr::Binary(_, a, b) => {
            visit(a, f);
            visit(b, f);
        }
        Expr::Select(c, a, b) => {
            visit(c, f);
            visit(a, f);
            visit(b, f);
        }
        Expr::Semiring(s) => s.exprs().into_iter().for_each(|x| visit(x, f)),
    }
}

fn rewrite(
    stmts: &[Stmt],
    buffer: &str,
    ai: &str,
    aj: &str,
    kinds: &[PartKind],
    buffers: &[Buffer],
) -> Result<Vec<Stmt>, Condition> {
    let mut out = Vec::new();
    for s in stmts {
        let Stmt::Iter(it) = s else {
            out.push(s.clone());
            continue;
        };
        let uses = it
            .body
            .iter()
            .any(|st| matches!(st, Stmt::Store(x) if reads(&x.value, buffer)));
        if !uses {
            out.push(s.clone());
            continue;
        }
        let (Some(pi), Some(pj)) = (
            it.axes.iter().position(|a| a == ai),
            it.axes.iter().position(|a| a == aj),
        ) else {
            return Err(Condition::BadArgument {
                what: format!(
                    "iteration `{}` reads `{buffer}` without iterating its axes `{ai}`, `{aj}`",
                    it.name
                ),
            });
        };
        if pj != pi + 1 || it.body.iter().any(|st| matches!(st, Stmt::Iter(_))) {
            return Err(Condition::BadArgument { what: format!("iteration `{}` must iterate `{ai}` directly followed by `{aj}`, without nested iterations", it.name) });
        }
        let (vi, vj) = (it.vars[pi].clone(), it.vars[pj].clone());
        let kinds_s: Vec<char> = it.kinds.chars().collect();
        // Init runs once, before every part, over the spatial axes (all dense); or, when the
        // first part is DIA (which holds every row once, in blocks) or `rcm`'s rows (every row
        // once, its row ids checked to be a permutation when bound), inside that part's loop:
        // each row is set just before its sums are added to it (`reverse_cache_write` then
        // stores the sums instead), not in a pass of its own over the result.
        let init_in_first = matches!(
            kinds.first(),
            Some(PartKind::Dia { .. } | PartKind::Rows { .. })
        ) && it
            .init
            .iter()
            .all(|st| matches!(st, Stmt::Store(x) if !reads(&x.value, buffer)));
        if !it.init.is_empty() && !init_in_first {
            let spatial: Vec<usize> = (0..it.axes.len())
                .filter(|&k| kinds_s.get(k) == Some(&'S'))
                .collect();
            out.push(Stmt::Iter(Iteration {
                name: format!("{}_init", it.name),
                axes: spatial.iter().map(|&k| it.axes[k].clone()).collect(),
                kinds: "S".repeat(spatial.len()),
                vars: spatial.iter().map(|&k| it.vars[k].clone()).collect(),
                init: vec![],
                body: it.init.clone(),
                fused: vec![],
                coiteration: None,
                annotations: it.annotations.clone(),
            }));
        }
        for (t, kind) in kinds.iter().enumerate() {
            let pn = part_name(buffer, t);
            let var = |s: &str| format!("{s}.p{t}");
            let (new_axes, new_vars, new_kinds, row_expr, col_expr): (
                Vec<String>,
                Vec<String>,
                Vec<char>,
                Expr,
                Expr,
            ) = match kind {
                PartKind::Ell | PartKind::Rows { .. } => (
                    vec![format!("{pn}.r"), format!("{pn}.s")],
                    vec![var(&vi), var(&vj)],
                    vec![kinds_s[pi], kinds_s[pj]],
                    Expr::Load {
                        buffer: format!("{pn}.row"),
                        indices: vec![Expr::Var(var(&vi))],
                    },
                    Expr::Var(var(&vj)),
                ),
                PartKind::Csr | PartKind::Padded => (
                    vec![ai.to_string(), format!("{pn}.s")],
                    vec![var(&vi), var(&vj)],
                    vec![kinds_s[pi], kinds_s[pj]],
                    Expr::Var(var(&vi)),
                    Expr::Var(var(&vj)),
                ),
                PartKind::Bsr(b) => {
                    let bb = *b as i64;
                    let comb = |o: String, i: String| {
                        Expr::Binary(
                            BinOp::Add,
                            Box::new(Expr::Binary(
                                BinOp::Mul,
                                Box::new(Expr::Var(o)),
                                Box::new(Expr::Int(bb)),
                            )),
                            Box::new(Expr::Var(i)),
                        )
                    };
                    (
                        vec![
                            format!("{pn}.bi"),
                            format!("{pn}.bj"),
                            format!("{pn}.ii"),
                            format!("{pn}.jj"),
                        ],
                        vec![
                            var(&format!("{vi}b")),
                            var(&format!("{vj}b")),
                            var(&vi),
                            var(&vj),
                        ],
                        vec![kinds_s[pi], kinds_s[pj], kinds_s[pi], kinds_s[pj]],
                        comb(var(&format!("{vi}b")), var(&vi)),
                        comb(var(&format!("{vj}b")), var(&vj)),
                    )
                }
                PartKind::Sell { .. } => {
                    let (g, l) = (var(&format!("{vi}g")), var(&vi));
                    let slot = vec![
                        Expr::Var(g.clone()),
                        Expr::Var(var(&vj)),
                        Expr::Var(l.clone()),
                    ];
                    (
                        vec![format!("{pn}.g"), format!("{pn}.q"), format!("{pn}.l")],
                        vec![g.clone(), var(&vj), l.clone()],
                        vec![kinds_s[pi], kinds_s[pj], kinds_s[pi]],
                        Expr::Load {
                            buffer: format!("{pn}.row"),
                            indices: vec![Expr::Var(g), Expr::Var(l)],
                        },
                        Expr::Load {
                            buffer: format!("{pn}.col"),
                            indices: slot,
                        },
                    )
                }
                // The panel's rows are coordinates of the row axis: the row variable is the row.
                // Panels write the same rows (a reduction over panels).
                PartKind::Panels { .. } => (
                    vec![format!("{pn}.p"), format!("{pn}.i"), format!("{pn}.s")],
                    vec![var(&format!("{vi}p")), var(&vi), var(&vj)],
                    vec!['R', kinds_s[pi], kinds_s[pj]],
                    Expr::Var(var(&vi)),
                    Expr::Var(var(&vj)),
                ),
                PartKind::Dia { lanes } => {
                    // Row `g * lanes + l`; column that row plus the diagonal's offset.
                    let (g, l) = (var(&format!("{vi}g")), var(&vi));
                    let row = Expr::Binary(
                        BinOp::Add,
                        Box::new(Expr::Binary(
                            BinOp::Mul,
                            Box::new(Expr::Var(g.clone())),
                            Box::new(Expr::Int(i64::try_from(*lanes).unwrap_or(i64::MAX))),
                        )),
                        Box::new(Expr::Var(l.clone())),
                    );
                    let col = Expr::Binary(
                        BinOp::Add,
                        Box::new(row.clone()),
                        Box::new(Expr::Load {
                            buffer: format!("{pn}.off"),
                            indices: vec![Expr::Var(var(&vj))],
                        }),
                    );
                    (
                        vec![format!("{pn}.g"), format!("{pn}.q"), format!("{pn}.l")],
                        vec![g, var(&vj), l],
                        vec![kinds_s[pi], kinds_s[pj], kinds_s[pi]],
                        row,
                        col,
                    )
                }
            };
            // The part's values are indexed in the order their axes are stored, which need not
            // be the nest's (DIA's are diagonal-major: (q, g, l) under g, q, l).
            let direct = value_indices(buffers, &pn, &new_axes, &new_vars)?;
            let subst =
                |e: &Expr| substitute(e, buffer, &pn, &direct, &vi, &row_expr, &vj, &col_expr);
            let body = map_stores(&it.body, &subst);
            let init = if t == 0 && init_in_first {
                map_stores(&it.init, &subst)
            } else {
                vec![]
            };
            let mut axes = it.axes.clone();
            let mut vars = it.vars.clone();
            let mut kinds_new = kinds_s.clone();
            axes.splice(pi..=pj, new_axes);
            vars.splice(pi..=pj, new_vars);
            kinds_new.splice(pi..=pj, new_kinds);
            out.push(Stmt::Iter(Iteration {
                name: format!("{}_p{t}", it.name),
                axes,
                kinds: kinds_new.into_iter().collect(),
                vars,
                init,
                body,
                fused: vec![],
                coiteration: None,
                annotations: it.annotations.clone(),
            }));
        }
    }
    Ok(out)
}

/// `stmts` with `f` applied to every store's indices and value (a part's copy of an
/// iteration's statements).
fn map_stores(stmts: &[Stmt], f: &dyn Fn(&Expr) -> Expr) -> Vec<Stmt> {
    stmts
        .iter()
        .map(|st| match st {
            Stmt::Store(x) => Stmt::Store(Store {
                buffer: x.buffer.clone(),
                indices: x.indices.iter().map(f).collect(),
                value: f(&x.value),
            }),
            other => other.clone(),
        })
        .collect()
}

/// Replaces the decomposed buffer's loads by the part's (direct positions) and the row and
/// column iterators by the part's row and column coordinates.
/// The indices of a load of part `part`'s values: for each axis of the values buffer, in
/// storage order, the variable of the nest's axis of that name.
fn value_indices(
    buffers: &[Buffer],
    part: &str,
    axes: &[String],
    vars: &[String],
) -> Result<Vec<Expr>, Condition> {
    let stored = buffers
        .iter()
        .find(|b| b.name == part)
        .ok_or_else(|| Condition::Invalid(format!("part `{part}` has no values buffer")))?;
    stored
        .axes
        .iter()
        .map(|ax| {
            let at = axes.iter().position(|a| a == ax).ok_or_else(|| {
                Condition::Invalid(format!(
                    "axis `{ax}` of part `{part}`'s values is not iterated"
                ))
            })?;
            Ok(Expr::Var(vars[at].clone()))
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn substitute(
    e: &Expr,
    buffer: &str,
    part: &str,
    direct: &[Expr],
    vi: &str,
    row: &Expr,
    vj: &str,
    col: &Expr,
) -> Expr {
    match e {
        Expr::Load { buffer: b, .. } if b == buffer => Expr::Load {
            buffer: part.to_string(),
            indices: direct.to_vec(),
        },
        Expr::Var(v) if v == vi => row.clone(),
        Expr::Var(v) if v == vj => col.clone(),
        _ => e.map_children(&mut |x| substitute(x, buffer, part, direct, vi, row, vj, col)),
    }
}

/// The conversion routine of a decomposition: builds the storage of every part from the CSR
/// matrix of the decomposed buffer, as bindings (parameters, axis structure, values) for the
/// decomposed program.
///
/// This is the hand-written reference conversion: it copies the values in Rust. The driver
/// uses [`convert_structure`] and the generated copy of
/// [`value_copy_func`](super::value_copy::value_copy_func) instead.
pub fn convert(
    conv: &Conversion,
    a: &CsrMatrix,
) -> Result<lacuna_stage1::Bindings, crate::decompose::DecomposeError> {
    let iso = if conv.iso {
        super::iso::iso_value(&a.values)?
    } else {
        0.0
    };
    // No parts: the buffer keeps its storage, only its one value is bound.
    let parts = if conv.parts.is_empty() {
        vec![]
    } else {
        materialize(a, &conv.decomposition)?
    };
    bind_parts(conv, parts, None, iso)
}

/// The inspector half of a conversion: like [`convert`], but every part's values are bound as
/// zeros; with them, for each part `A.pT`, its source map `A.pT.src` ([`source_name`]): one
/// `i64` per value slot, the position in `a`'s CSR storage of the entry stored there, or -1 for
/// padding; and the parameter `A.src_nnz` ([`source_len_param`]), `a`'s number of entries.
///
/// The generated function of [`value_copy_func`](super::value_copy::value_copy_func) then
/// fills the values from the decomposed buffer's CSR values, bit for bit as [`convert`]
/// would; it can run again after the values (not the pattern) change.
pub fn convert_structure(
    conv: &Conversion,
    a: &CsrMatrix,
) -> Result<lacuna_stage1::Bindings, crate::decompose::DecomposeError> {
    if conv.parts.is_empty() {
        // The buffer keeps its storage: only its one value (an `iso_values` alone).
        return bind_parts(conv, vec![], None, 0.0);
    }
    let inspection = crate::decompose::inspect(a, &conv.decomposition)?;
    let mut b = bind_parts(conv, inspection.parts, Some(inspection.sources), 0.0)?;
    b.params
        .insert(source_len_param(&conv.buffer), a.nnz() as i64);
    Ok(b)
}

/// Name of the source map of part `t` of buffer `b` (see [`convert_structure`]).
pub fn source_name(b: &str, t: usize) -> String {
    format!("{}.src", part_name(b, t))
}

/// Name of the parameter that holds the number of stored entries of decomposed buffer `b`,
/// which its parts' source maps index (see [`convert_structure`]).
pub fn source_len_param(b: &str) -> String {
    format!("{b}.src_nnz")
}

/// Bindings of the parts' structure and values, and of their source maps where given. An iso
/// conversion binds `iso` as the one value instead of the parts' values and source maps, and
/// each `sell` part's lane lengths.
fn bind_parts(
    conv: &Conversion,
    parts: Vec<crate::decompose::Part>,
    sources: Option<Vec<Vec<i64>>>,
    iso: f64,
) -> Result<lacuna_stage1::Bindings, crate::decompose::DecomposeError> {
    use lacuna_ir::ArrayData;
    use lacuna_stage1::AxisData;
    let mut b = lacuna_stage1::Bindings::default();
    let i64s = |v: &[usize]| ArrayData::I64(v.iter().map(|&x| x as i64).collect());
    if let Some(sources) = sources {
        for (t, src) in sources.into_iter().enumerate() {
            b.buffers
                .insert(source_name(&conv.buffer, t), ArrayData::I64(src));
        }
    }
    for (t, part) in parts.into_iter().enumerate() {
        let pn = part_name(&conv.buffer, t);
        match part.storage {
            Storage::Ell(e) | Storage::SplitRows(e) => {
                b.params.insert(format!("{pn}.rows"), e.rows.len() as i64);
                b.params.insert(format!("{pn}.w"), e.width as i64);
                b.axes.insert(
                    format!("{pn}.s"),
                    AxisData {
                        indptr: None,
                        indices: Some(i64s(&e.indices)),
                    },
                );
                b.buffers.insert(format!("{pn}.row"), i64s(&e.rows));
                b.buffers.insert(pn, ArrayData::F64(e.values));
            }
            Storage::Csr(m) => {
                b.params.insert(format!("{pn}.nnz"), m.indices.len() as i64);
                b.axes.insert(
                    format!("{pn}.s"),
                    AxisData {
                        indptr: Some(i64s(&m.indptr)),
                        indices: Some(i64s(&m.indices)),
                    },
                );
                b.buffers.insert(pn, ArrayData::F64(m.values));
            }
            Storage::Bsr(s) => {
                b.params.insert(format!("{pn}.mb"), s.n_block_rows as i64);
                b.params.insert(format!("{pn}.nb"), s.n_block_cols as i64);
                b.params
                    .insert(format!("{pn}.nnzb"), s.indices.len() as i64);
                b.axes.insert(
                    format!("{pn}.bj"),
                    AxisData {
                        indptr: Some(i64s(&s.indptr)),
                        indices: Some(i64s(&s.indices)),
                    },
                );
                b.buffers.insert(pn, ArrayData::F64(s.values));
            }
            Storage::Sell(s) => {
                b.params.insert(format!("{pn}.groups"), s.groups() as i64);
                b.params.insert(format!("{pn}.w"), s.max_steps() as i64);
                b.params.insert(
                    format!("{pn}.steps"),
                    s.steps.last().copied().unwrap_or(0) as i64,
                );
                b.axes.insert(
                    format!("{pn}.q"),
                    AxisData {
                        indptr: Some(i64s(&s.steps)),
                        indices: None,
                    },
                );
                let narrow = matches!(
                    conv.parts.get(t),
                    Some(PartKind::Sell {
                        cols: IndexType::I32,
                        ..
                    })
                );
                let cols = if narrow {
                    // A column past i32 (never from an i32 column axis) is an error, not a
                    // wrapped index.
                    let lanes = s.lanes.max(1);
                    let narrowed: Result<Vec<i32>, _> = s
                        .indices
                        .iter()
                        .enumerate()
                        .map(|(slot, &col)| {
                            i32::try_from(col).map_err(|_| {
                                let g = s.steps.partition_point(|&x| x <= slot / lanes);
                                let lane = g.saturating_sub(1) * lanes + slot % lanes;
                                crate::decompose::DecomposeError::ColumnOutOfRange {
                                    row: s.rows.get(lane).copied().unwrap_or(0),
                                    col,
                                    n_cols: 1 << 31,
                                }
                            })
                        })
                        .collect();
                    ArrayData::I32(narrowed?)
                } else {
                    i64s(&s.indices)
                };
                b.buffers.insert(format!("{pn}.col"), cols);
                b.buffers.insert(format!("{pn}.row"), i64s(&s.rows));
                if conv.iso {
                    b.buffers.insert(
                        super::iso::lane_len_name(&conv.buffer, t),
                        ArrayData::I64(sell_lane_lengths(&s)),
                    );
                }
                b.buffers.insert(pn, ArrayData::F64(s.values));
            }
            Storage::Dia(s) => {
                b.params.insert(format!("{pn}.blocks"), s.blocks() as i64);
                b.params
                    .insert(format!("{pn}.diagonals"), s.offsets.len() as i64);
                b.buffers
                    .insert(format!("{pn}.off"), ArrayData::I64(s.offsets));
                b.buffers.insert(pn, ArrayData::F64(s.values));
            }
            Storage::Panels(s) => {
                b.params.insert(format!("{pn}.panels"), s.panels() as i64);
                b.params.insert(format!("{pn}.nrows"), s.rows.len() as i64);
                b.params.insert(format!("{pn}.nnz"), s.indices.len() as i64);
                let narrow = narrow_part(conv, t);
                b.axes.insert(
                    format!("{pn}.i"),
                    sparse_axis(&s.panel_rows, &s.rows, "row id", narrow, "panels")?,
                );
                b.axes.insert(
                    format!("{pn}.s"),
                    sparse_axis(&s.indptr, &s.indices, "column", narrow, "panels")?,
                );
                b.buffers.insert(pn, ArrayData::F64(s.values));
            }
            Storage::Rows(s) => {
                b.params.insert(format!("{pn}.rows"), s.rows.len() as i64);
                b.params.insert(format!("{pn}.nnz"), s.indices.len() as i64);
                let narrow = narrow_part(conv, t);
                b.axes.insert(
                    format!("{pn}.s"),
                    sparse_axis(&s.indptr, &s.indices, "column", narrow, "rcm")?,
                );
                b.buffers.insert(format!("{pn}.row"), i64s(&s.rows));
                b.buffers.insert(pn, ArrayData::F64(s.values));
            }
            Storage::Padded(s) => {
                b.params.insert(format!("{pn}.nnz"), s.indices.len() as i64);
                b.axes.insert(
                    format!("{pn}.s"),
                    AxisData {
                        indptr: Some(i64s(&s.indptr)),
                        indices: Some(i64s(&s.indices)),
                    },
                );
                b.buffers.insert(pn, ArrayData::F64(s.values));
            }
        }
    }
    if conv.iso {
        // The kernel reads the one value; the parts hold none.
        for t in 0..conv.parts.len() {
            b.buffers.remove(&part_name(&conv.buffer, t));
            b.buffers.remove(&source_name(&conv.buffer, t));
        }
        b.buffers.insert(
            super::iso::iso_name(&conv.buffer),
            ArrayData::F64(vec![iso]),
        );
    }
    Ok(b)
}

/// The number of slots each lane of each group of `s` fills (its row's length), `groups *
/// lanes` of them: a lane's entries fill its first steps.
fn sell_lane_lengths(s: &crate::decompose::SellStorage) -> Vec<i64> {
    let lanes = s.lanes;
    let mut lens = vec![0i64; s.rows.len()];
    for (g, w) in s.steps.windows(2).enumerate() {
        for (l, len) in lens[g * lanes..(g + 1) * lanes].iter_mut().enumerate() {
            *len = (w[0]..w[1])
                .filter(|&q| s.mask.get(q * lanes + l).copied().unwrap_or(false))
                .count() as i64;
        }
    }
    lens
}

/// The inner term of `(per_relation TERM)`, if `into` is one.
fn per_relation_term(into: &str) -> Option<&str> {
    let t = into.trim();
    let inner = t.strip_prefix('(')?.strip_suffix(')')?.trim_start();
    let rest = inner.strip_prefix("per_relation")?;
    rest.starts_with(char::is_whitespace).then(|| rest.trim())
}

/// The group axis `PART.g` (as many groups as the parameter `PART.{groups}`) and the lane axis
/// `PART.l` (`lanes` wide) of a part whose rows run as vector lanes (`sell`, `dia`).
fn lane_axes(pn: &str, groups: &str, lanes: usize) -> (Axis, Axis) {
    let g = i64_axis(
        format!("{pn}.g"),
        AxisKind::DenseFixed {
            n: Size::Param(format!("{pn}.{groups}")),
        },
        true,
    );
    let l = i64_axis(
        format!("{pn}.l"),
        AxisKind::DenseFixed {
            n: Size::Const(lanes as u64),
        },
        true,
    );
    (g, l)
}

pub(crate) fn i64_axis(name: String, kind: AxisKind, sorted: bool) -> Axis {
    index_axis(name, kind, IndexType::I64, sorted)
}

/// Whether part `t` of `conv` indexes its sparse axes with 32-bit arrays (column panels and
/// `rcm` take the decomposed column axis's index type).
fn narrow_part(conv: &Conversion, t: usize) -> bool {
    matches!(
        conv.parts.get(t),
        Some(
            PartKind::Panels {
                index: IndexType::I32
            } | PartKind::Rows {
                index: IndexType::I32
            }
        )
    )
}

/// The structure of a part's sparse axis: positions `indptr` and coordinates `indices` (which
/// hold `what`), at 32 bits where `narrow` (see [`index_array`]).
fn sparse_axis(
    indptr: &[usize],
    indices: &[usize],
    what: &'static str,
    narrow: bool,
    op: &'static str,
) -> Result<lacuna_stage1::AxisData, crate::decompose::DecomposeError> {
    Ok(lacuna_stage1::AxisData {
        indptr: Some(index_array(indptr, narrow, op, "position")?),
        indices: Some(index_array(indices, narrow, op, what)?),
    })
}

/// `v` as a structure array of a part's axis: 64-bit, or 32-bit where `narrow` (a value past
/// `i32` is then an error naming format `op` and `what` the array holds, not a wrapped index).
fn index_array(
    v: &[usize],
    narrow: bool,
    op: &'static str,
    what: &'static str,
) -> Result<lacuna_ir::ArrayData, crate::decompose::DecomposeError> {
    use lacuna_ir::ArrayData;
    if !narrow {
        return Ok(ArrayData::I64(v.iter().map(|&x| x as i64).collect()));
    }
    v.iter()
        .map(|&x| {
            i32::try_from(x).map_err(|_| crate::decompose::DecomposeError::IndexTooWide {
                op,
                what,
                value: x,
            })
        })
        .collect::<Result<Vec<i32>, _>>()
        .map(ArrayData::I32)
}

/// The entries of part `pn`'s rows: `{pn}.s`, a sparse axis under `parent` of columns below
/// `n`, `{pn}.nnz` of them, with `idtype` structure arrays.
fn entries_axis(pn: &str, parent: &str, n: &Size, idtype: IndexType, sorted: bool) -> Axis {
    index_axis(
        format!("{pn}.s"),
        AxisKind::SparseVariable {
            parent: parent.to_string(),
            n: n.clone(),
            nnz: Size::Param(format!("{pn}.nnz")),
            loose: false,
        },
        idtype,
        sorted,
    )
}

/// An axis of a part with `idtype` structure arrays and no closed forms.
fn index_axis(name: String, kind: AxisKind, idtype: IndexType, sorted: bool) -> Axis {
    Axis {
        name,
        kind,
        idtype,
        sorted,
        closed_forms: vec![],
        tiles: None,
    }
}

/// `decompose_format(A, "(per_relation D)")` on a relation-CSF buffer `A[r, i, j]` (a
/// dense_fixed relation axis, its sparse_variable rows, their sparse_variable columns): every
/// relation's matrix is decomposed by `D`, and part `t` of all relations is stored as one 3-D
/// part over the relation axis (SparseTIR's `csf_to_ell3d`):
/// - an ELL part (`ell`, `split_rows`, in buckets) as relation → row group (dense_variable over
///   the relation: the relation's rows in that bucket) → `w` slots (sparse_fixed), with a
///   row-id buffer `A.pT.row[r, g]`;
/// - a CSR part (the remainder) as relation-CSF again (relation → non-empty rows → columns).
///
/// Each iteration reading `A` over `[R, I, J]` becomes one copy per part over the part's axes;
/// the relation iterator is kept, the row becomes `A.pT.row[r, g]` (or the CSR row), the column
/// the slot's coordinate.
fn decompose_relations(
    mut p: Program,
    buffer: &str,
    inner: &str,
) -> Result<(Program, Conversion), Condition> {
    let d: Decomposition =
        inner.parse().map_err(
            |e: crate::decompose::DecomposeError| Condition::BadArgument {
                what: format!("decomposition `{inner}` of per_relation: {e}"),
            },
        )?;
    let buf = p
        .buffer(buffer)
        .cloned()
        .ok_or_else(|| Condition::NotFound {
            what: "buffer",
            name: buffer.to_string(),
        })?;
    let csf = match (buf.role, buf.dtype, buf.axes.as_slice()) {
        (Role::Input, DType::F64, [r, i, j]) => match (
            p.axis(r).map(|a| &a.kind),
            p.axis(i).map(|a| &a.kind),
            p.axis(j).map(|a| &a.kind),
        ) {
            (
                Some(AxisKind::DenseFixed { .. }),
                Some(AxisKind::SparseVariable {
                    parent: pi,
                    n: rows,
                    loose: false,
                    ..
                }),
                Some(AxisKind::SparseVariable {
                    parent: pj,
                    n: cols,
                    loose: false,
                    ..
                }),
            ) if pi == r && pj == i => Some((
                [r.clone(), i.clone(), j.clone()],
                rows.clone(),
                cols.clone(),
            )),
            _ => None,
        },
        _ => None,
    };
    let (orig, n_rows, n_cols) = csf.ok_or_else(|| Condition::BadArgument {
        what: format!("per_relation: `{buffer}` must be an f64 input stored relation-CSF (a dense_fixed relation axis, its sparse_variable rows, their sparse_variable columns)"),
    })?;
    let kinds = kinds_of(&d, IndexType::I64)?;
    let rel = orig[0].clone();
    for (t, kind) in kinds.iter().enumerate() {
        let pn = part_name(buffer, t);
        match kind {
            PartKind::Ell => {
                p.params.extend([format!("{pn}.rows"), format!("{pn}.w")]);
                let g = i64_axis(
                    format!("{pn}.g"),
                    // Split rows may give a relation more ELL rows than matrix rows: the
                    // bound on a group is the part's total.
                    AxisKind::DenseVariable {
                        parent: rel.clone(),
                        max_len: Size::Param(format!("{pn}.rows")),
                        nnz: Size::Param(format!("{pn}.rows")),
                    },
                    true,
                );
                let sl = i64_axis(
                    format!("{pn}.s"),
                    AxisKind::SparseFixed {
                        parent: g.name.clone(),
                        n: n_cols.clone(),
                        nnz_cols: Size::Param(format!("{pn}.w")),
                    },
                    false,
                );
                p.buffers.push(coordinates_buffer(
                    format!("{pn}.row"),
                    vec![rel.clone(), g.name.clone()],
                    DType::I64,
                    &orig[1],
                ));
                p.buffers.push(input_buffer(
                    pn.clone(),
                    vec![rel.clone(), g.name.clone(), sl.name.clone()],
                    DType::F64,
                ));
                p.axes.extend([g, sl]);
            }
            PartKind::Csr => {
                p.params
                    .extend([format!("{pn}.nrows"), format!("{pn}.nnz")]);
                let ri = i64_axis(
                    format!("{pn}.i"),
                    AxisKind::SparseVariable {
                        parent: rel.clone(),
                        n: n_rows.clone(),
                        nnz: Size::Param(format!("{pn}.nrows")),
                        loose: false,
                    },
                    true,
                );
                let sl = i64_axis(
                    format!("{pn}.s"),
                    AxisKind::SparseVariable {
                        parent: ri.name.clone(),
                        n: n_cols.clone(),
                        nnz: Size::Param(format!("{pn}.nnz")),
                        loose: false,
                    },
                    true,
                );
                p.buffers.push(input_buffer(
                    pn.clone(),
                    vec![rel.clone(), ri.name.clone(), sl.name.clone()],
                    DType::F64,
                ));
                p.axes.extend([ri, sl]);
            }
            PartKind::Bsr(_)
            | PartKind::Padded
            | PartKind::Sell { .. }
            | PartKind::Dia { .. }
            | PartKind::Panels { .. }
            | PartKind::Rows { .. } => {
                return Err(Condition::BadArgument {
                    what: format!("per_relation: part {t} is {kind:?}; relation-level parts are ELL (ell, split_rows, in buckets) or a CSR remainder"),
                })
            }
        }
    }
    let body = std::mem::take(&mut p.body);
    p.body = rewrite_relations(&body, buffer, &orig, &kinds)?;
    Ok((
        p,
        Conversion {
            buffer: buffer.to_string(),
            decomposition: d,
            parts: kinds,
            per_relation: true,
            iso: false,
        },
    ))
}

fn rewrite_relations(
    stmts: &[Stmt],
    buffer: &str,
    orig: &[String; 3],
    kinds: &[PartKind],
) -> Result<Vec<Stmt>, Condition> {
    let mut out = Vec::new();
    for s in stmts {
        let Stmt::Iter(it) = s else {
            out.push(s.clone());
            continue;
        };
        let uses = it
            .body
            .iter()
            .any(|st| matches!(st, Stmt::Store(x) if reads(&x.value, buffer)));
        if !uses {
            out.push(s.clone());
            continue;
        }
        let at = it.axes.iter().position(|a| *a == orig[0]);
        let consecutive = at.is_some_and(|k| it.axes.get(k..k + 3) == Some(&orig[..]));
        let (Some(pr), true) = (at, consecutive) else {
            return Err(Condition::BadArgument {
                what: format!(
                    "iteration `{}` reads `{buffer}`: it must iterate `{}`, `{}`, `{}` consecutively",
                    it.name, orig[0], orig[1], orig[2]
                ),
            });
        };
        if !it.init.is_empty() || it.body.iter().any(|st| matches!(st, Stmt::Iter(_))) {
            return Err(Condition::BadArgument {
                what: format!("iteration `{}`: per_relation needs an iteration without init and nested iterations (zero the output in its own iteration)", it.name),
            });
        }
        let (vr, vi, vj) = (
            it.vars[pr].clone(),
            it.vars[pr + 1].clone(),
            it.vars[pr + 2].clone(),
        );
        let kinds_s: Vec<char> = it.kinds.chars().collect();
        for (t, kind) in kinds.iter().enumerate() {
            let pn = part_name(buffer, t);
            let (gi, gv) = (format!("{vi}.p{t}"), format!("{vj}.p{t}"));
            let (row_axis, row_expr) = match kind {
                PartKind::Ell => (
                    format!("{pn}.g"),
                    Expr::Load {
                        buffer: format!("{pn}.row"),
                        indices: vec![Expr::Var(vr.clone()), Expr::Var(gi.clone())],
                    },
                ),
                _ => (format!("{pn}.i"), Expr::Var(gi.clone())),
            };
            let direct = vec![
                Expr::Var(vr.clone()),
                Expr::Var(gi.clone()),
                Expr::Var(gv.clone()),
            ];
            let col = Expr::Var(gv.clone());
            let subst = |e: &Expr| substitute(e, buffer, &pn, &direct, &vi, &row_expr, &vj, &col);
            let body = map_stores(&it.body, &subst);
            let mut axes = it.axes.clone();
            let mut vars = it.vars.clone();
            axes.splice(pr + 1..=pr + 2, [row_axis, format!("{pn}.s")]);
            vars.splice(pr + 1..=pr + 2, [gi, gv]);
            // In an ELL part the relation indexes the output through the row ids, so it is
            // spatial; rows of different relations (and split rows) still write the same output
            // rows, which the part's stores accumulate into (as the hyb parts of
            // `decompose_format` do). A CSR part keeps the relation's kind.
            let mut kinds_new = kinds_s.clone();
            if *kind == PartKind::Ell {
                kinds_new[pr] = 'S';
            }
            out.push(Stmt::Iter(Iteration {
                name: format!("{}_p{t}", it.name),
                axes,
                kinds: kinds_new.into_iter().collect(),
                vars,
                init: vec![],
                body,
                fused: vec![],
                coiteration: None,
                annotations: it.annotations.clone(),
            }));
        }
    }
    Ok(out)
}

/// The conversion routine of a `per_relation` decomposition: builds the 3-D parts from the
/// relation-CSF tensor given as sorted, de-duplicated coordinates `(r, i, j)` with values, of
/// shape `rel × n_rows × n_cols`.
pub fn convert_relations(
    conv: &Conversion,
    shape: [usize; 3],
    coords: [&[usize]; 3],
    values: &[f64],
) -> Result<lacuna_stage1::Bindings, crate::decompose::DecomposeError> {
    use crate::decompose::DecomposeError;
    use lacuna_ir::ArrayData;
    use lacuna_stage1::AxisData;
    let [rel, m, n] = shape;
    let nnz = values.len();
    if coords.iter().any(|c| c.len() != nnz) {
        return Err(DecomposeError::Relations(format!(
            "coordinate arrays of lengths {:?} for {nnz} values",
            coords.map(<[usize]>::len)
        )));
    }
    let k = coords[0].iter().position(|&r| r >= rel);
    if let Some(e) = k {
        return Err(DecomposeError::Relations(format!(
            "entry {e}: relation {} is out of range (relations = {rel})",
            coords[0][e]
        )));
    }
    if let Some(e) = (1..nnz).find(|&e| {
        (coords[0][e], coords[1][e], coords[2][e])
            <= (coords[0][e - 1], coords[1][e - 1], coords[2][e - 1])
    }) {
        return Err(DecomposeError::Relations(format!(
            "entry {e}: coordinates are not sorted and unique by (relation, row, column)"
        )));
    }
    // Per part: (group indptr, rows, indices, values, width) for ELL; (row indptr, row ids,
    // column indptr, columns, values) for CSR.
    struct Acc {
        outer: Vec<usize>,
        rows: Vec<usize>,
        inner: Vec<usize>,
        indices: Vec<usize>,
        values: Vec<f64>,
        width: Option<usize>,
    }
    let mut accs: Vec<Acc> = conv
        .parts
        .iter()
        .map(|_| Acc {
            outer: vec![0],
            rows: vec![],
            inner: vec![0],
            indices: vec![],
            values: vec![],
            width: None,
        })
        .collect();
    let mut start = 0;
    for r in 0..rel {
        let end = start + coords[0][start..].iter().take_while(|&&x| x == r).count();
        let mut indptr = vec![0usize; m + 1];
        for &row in &coords[1][start..end] {
            if row >= m {
                return Err(DecomposeError::RowOutOfRange { row, n_rows: m });
            }
            indptr[row + 1] += 1;
        }
        for i in 0..m {
            indptr[i + 1] += indptr[i];
        }
        let csr = CsrMatrix::new(
            m,
            n,
            indptr,
            coords[2][start..end].to_vec(),
            values[start..end].to_vec(),
        )?;
        let parts = materialize(&csr, &conv.decomposition)?;
        if parts.len() != accs.len() {
            return Err(DecomposeError::Relations(format!(
                "relation {r} has {} parts, the kernel {}",
                parts.len(),
                accs.len()
            )));
        }
        for (t, (part, acc)) in parts.iter().zip(&mut accs).enumerate() {
            match (&part.storage, conv.parts[t]) {
                (Storage::Ell(e) | Storage::SplitRows(e), PartKind::Ell) => {
                    if *acc.width.get_or_insert(e.width) != e.width {
                        return Err(DecomposeError::Relations(format!(
                            "part {t} has width {} in relation {r}, {} before",
                            e.width,
                            acc.width.unwrap_or(0)
                        )));
                    }
                    acc.rows.extend(&e.rows);
                    acc.outer.push(acc.rows.len());
                    acc.indices.extend(&e.indices);
                    acc.values.extend(&e.values);
                }
                (Storage::Csr(c), PartKind::Csr) => {
                    for i in 0..c.n_rows {
                        let (s, t) = (c.indptr[i], c.indptr[i + 1]);
                        if t > s {
                            acc.rows.push(i);
                            acc.indices.extend(&c.indices[s..t]);
                            acc.values.extend(&c.values[s..t]);
                            acc.inner.push(acc.indices.len());
                        }
                    }
                    acc.outer.push(acc.rows.len());
                }
                (_, kind) => {
                    return Err(DecomposeError::Relations(format!(
                        "part {t} of relation {r} does not match the kernel's {kind:?} part"
                    )))
                }
            }
        }
        start = end;
    }
    let mut b = lacuna_stage1::Bindings::default();
    let i64s = |v: &[usize]| ArrayData::I64(v.iter().map(|&x| x as i64).collect());
    for (t, acc) in accs.into_iter().enumerate() {
        let pn = part_name(&conv.buffer, t);
        match conv.parts[t] {
            PartKind::Ell => {
                // An empty tensor still has the term's width (0 rows of it).
                let w = acc.width.unwrap_or(0);
                b.params.insert(format!("{pn}.rows"), acc.rows.len() as i64);
                b.params.insert(format!("{pn}.w"), w as i64);
                b.axes.insert(
                    format!("{pn}.g"),
                    AxisData {
                        indptr: Some(i64s(&acc.outer)),
                        indices: None,
                    },
                );
                b.axes.insert(
                    format!("{pn}.s"),
                    AxisData {
                        indptr: None,
                        indices: Some(i64s(&acc.indices)),
                    },
                );
                b.buffers.insert(format!("{pn}.row"), i64s(&acc.rows));
                b.buffers.insert(pn, ArrayData::F64(acc.values));
            }
            _ => {
                b.params
                    .insert(format!("{pn}.nrows"), acc.rows.len() as i64);
                b.params
                    .insert(format!("{pn}.nnz"), acc.indices.len() as i64);
                b.axes.insert(
                    format!("{pn}.i"),
                    AxisData {
                        indptr: Some(i64s(&acc.outer)),
                        indices: Some(i64s(&acc.rows)),
                    },
                );
                b.axes.insert(
                    format!("{pn}.s"),
                    AxisData {
                        indptr: Some(i64s(&acc.inner)),
                        indices: Some(i64s(&acc.indices)),
                    },
                );
                b.buffers.insert(pn, ArrayData::F64(acc.values));
            }
        }
    }
    Ok(b)
}
