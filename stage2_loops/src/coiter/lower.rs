//! Code generation for co-iteration: one flat function per pass over loops of merge lattices.
//!
//! Every index variable, in the iteration order, gets the loops of its [`Lattice`]: for each
//! loop point a `while` over the participating level iterators (a `for` when one iterator or
//! the dense range alone is left), the current coordinate the smallest of theirs, a chain of
//! cases (the lattice points within it, supersets first), and the iterators at that
//! coordinate advanced. Per level format: `compressed` iterates `pos[q]..pos[q+1]`,
//! `loose_compressed` `pos[2q]..pos[2q+1]`, `singleton` its parent's positions; a non-unique
//! level hands its children the run of equal coordinates; a `dense` level is located
//! (`q * size + i`) instead of iterated. Dense arrays are addressed row-major.
//!
//! A sparse result is produced in two passes over the same loops (TACO's assembly): the
//! *count* pass stores the number of entries of every result row (the result's variables but
//! the innermost, linearized) into `C.pos[r + 1]`; after a prefix sum, the *compute* pass
//! appends coordinates and values in order. When a reduction variable is iterated before the
//! result's innermost variable (SpGEMM's `i, k, j`), each row goes through a dense workspace
//! (`C.w` values, `C.flag` marks, `C.list` the coordinates added), whose coordinates are sorted
//! (heap sort) and compressed at the end of the row.

use super::lattice;
use super::lattice::{build, Lattice, Point};
use super::notation::{vlevels, Assignment, TExpr, TRegion, VKind, VLevel};
use super::CoiterError;
use crate::ir::{BufferDecl, BufferKind, Expr, ForKind, Func, Stmt};
use lacuna_ir::encoding::{Encoding, LevelType};
use lacuna_ir::DType;
use lacuna_stage1::{BinOp, Merge, Role, Size, UnOp};
use std::collections::BTreeSet;

/// How the result is written.
#[derive(Clone, Debug, PartialEq)]
pub enum OutMode {
    /// A dense row-major array.
    Dense,
    /// Entries appended in iteration order.
    Direct,
    /// Rows accumulated in a dense workspace over the innermost result variable, entered at
    /// loop depth `depth` (the first reduction variable).
    Workspace {
        /// Loop depth of the first reduction variable.
        depth: usize,
    },
}

/// Decisions made before generating code.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Variables in iteration order.
    pub order: Vec<usize>,
    /// The storage each tensor is read in (its own, or a transposed copy's).
    pub encodings: Vec<Option<Encoding>>,
    /// Its levels as co-iteration reads them (`None` for dense arrays).
    pub levels: Vec<Option<Vec<VLevel>>>,
    /// Whether operand `t` must be copied into `encodings[t]` before running.
    pub transposed: Vec<bool>,
    /// Whether operand `t` is blocked (BSR, ELL: levels co-iteration cannot merge) and is
    /// read from an unblocked copy (dense outermost level, compressed below, in dimension
    /// order), made at bind time from its blocked storage: the blocks' explicit zeros and
    /// padding stay stored entries, as the sparse-iteration pipeline iterates them.
    pub unblocked: Vec<bool>,
    /// How the result is written.
    pub mode: OutMode,
    /// Result variables but the innermost, in iteration order (the row of a sparse result).
    pub row_vars: Vec<usize>,
    /// The innermost result variable (sparse results).
    pub last_var: Option<usize>,
    /// Workspace results whose one row variable is iterated first over its dense range: both
    /// passes loop over rows `[row_lo, row_hi)` given as parameters (see [`row_range_params`]),
    /// so rows can run in parallel chunks, each chunk with its own workspace.
    pub parallel_rows: bool,
    /// A direct result over `(row, col)` whose entries are each at a stored entry of an
    /// operand (no lattice point of the column covers the whole range): it can be computed in
    /// one serial pass into arrays sized by the operands' stored entries (see
    /// [`generate_one_pass`]), skipping the count pass.
    pub one_pass: bool,
    /// The element type of the operands' positions and coordinates: `I64` as planned, `I32`
    /// from [`super::CoKernel::narrowed`] when the bound data fits (half their traffic). Loads
    /// widen to `i64`; the result's positions and every counter stay `i64`, and its
    /// coordinates are [`Plan::result_index`].
    pub index: DType,
    /// Whether the compute pass merges short segments holding the same coordinates as straight
    /// masked vector loops first ([`Gen::equal_segments`]): planned on; the JIT turns it off on
    /// hosts without vector mask registers (`lacuna::driver::CoExecutable::new`), where
    /// masked lanes are emulated and the merge alone is faster
    /// ([`super::CoKernel::with_equal_segments`]).
    pub equal_segments: bool,
    /// Whether the one-pass function first tries each block of [`ROW_BLOCK`] rows as one
    /// straight vector loop over positions, where every operand stores the same coordinates
    /// in every row of the block ([`Gen::row_block`]): planned on, on every host (its loops
    /// run whole vectors with a scalar remainder, no masks)
    /// ([`super::CoKernel::with_row_blocks`]).
    pub row_blocks: bool,
}

/// The parameters bounding the row loop of a [`Plan::parallel_rows`] kernel whose result is
/// `out`: first row and one past the last.
pub fn row_range_params(out: &str) -> (String, String) {
    (format!("{out}.row_lo"), format!("{out}.row_hi"))
}

/// The parameter giving the first result slot a [`generate_one_pass`] function appends at
/// (0 for all rows; a chunk of rows writes its own region of the arrays). Its rows are
/// `[row_lo, row_hi)` ([`row_range_params`]).
pub fn one_pass_start_param(out: &str) -> String {
    format!("{out}.q0")
}

/// Which pass a function is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// Counts the entries of every result row.
    Count,
    /// Computes values (and appends a sparse result's entries).
    Compute,
}

/// A position handle of a tensor at some loop depth.
#[derive(Clone, Debug)]
enum Handle {
    Single(Expr),
    Range(Expr, Expr),
}

struct Gen<'a> {
    a: &'a Assignment,
    plan: &'a Plan,
    pass: Pass,
    /// Next storage level of each tensor.
    next: Vec<usize>,
    handles: Vec<Option<Handle>>,
    fresh: usize,
    /// Inside a workspace row.
    in_ws: bool,
    /// What the innermost body does with a value.
    sink: Sink,
    /// Generating the one-pass compute function ([`generate_one_pass`]).
    one_pass: bool,
    /// Whether the one-pass row loop was generated (it writes the result's positions).
    wrote_pos: bool,
    /// Set by the one-pass row loop for the level below it: the names its blocks of rows
    /// use ([`Gen::row_block`]).
    block_rows: Option<BlockRows>,
    /// The statements trying a block of rows at once, from the level below the row loop.
    row_block: Option<Vec<Stmt>>,
}

/// The names of the one-pass row loop's blocks ([`Gen::row_block`]).
#[derive(Clone, Debug)]
struct BlockRows {
    /// The row variable.
    row: String,
    /// First row of the block.
    i0: String,
    /// One past its last row.
    i1: String,
    /// Set to 1 where the block was computed at once.
    done: String,
}

/// What [`Gen::equal_run`] builds: the statements of the equal-coordinates path over
/// `len` positions of every iterator from its `lo`.
struct EqualRun {
    /// The number of positions.
    len: String,
    /// `let len = ...`: the first iterator's segment length.
    bind_len: Stmt,
    /// Every other iterator's segment is `len` long.
    same_len: Vec<Expr>,
    /// The count of differing coordinates (a variable the caller declares, 0).
    diff: String,
    /// Adds the differing coordinates to `diff`.
    check: Stmt,
    /// Computes the positions (the top point's case at each) and, for a sparse result, moves
    /// `out.q` past them.
    equal: Vec<Stmt>,
    /// The result slot of the first position (bound in `equal`; sparse results).
    q0: String,
}

/// What the innermost body does with a computed value.
#[derive(Clone, Debug)]
enum Sink {
    /// Store into the dense result, or append to the sparse one.
    Emit,
    /// Reduce into `acc`, marking `hit`.
    Acc { acc: String, hit: String },
    /// Insert into the workspace row with `cnt` coordinates.
    Ws { cnt: String },
}

/// A level iterator of a loop.
#[derive(Clone, Debug)]
struct It {
    t: usize,
    lo: String,
    p: String,
    end: String,
    c: String,
    crd: String,
    seg: Option<String>,
    /// An n:m level's `(n, m)`.
    nofm: Option<(i64, i64)>,
    /// The element type of `crd` ([`Plan::index`]).
    index: DType,
}

impl It {
    /// The coordinate at position `p`.
    fn coord(&self, p: Expr) -> Expr {
        match self.nofm {
            None => Expr::load_i64(&self.crd, p, self.index),
            Some((n, m)) => {
                // block * m + the coordinate within the block.
                let block = Expr::bin(
                    BinOp::Div,
                    Expr::sub(p.clone(), i64v(&self.lo)),
                    Expr::i64(n),
                );
                let c = Expr::load_i64(&self.crd, p, self.index);
                Expr::add(Expr::mul(block, Expr::i64(m)), c)
            }
        }
    }
}

pub(crate) fn size_expr(s: &Size) -> Expr {
    match s {
        Size::Const(c) => Expr::i64(*c as i64),
        Size::Param(p) => Expr::Param(p.clone()),
    }
}

fn i64v(v: &str) -> Expr {
    Expr::var(v)
}

fn load(buf: &str, idx: Expr) -> Expr {
    Expr::Load {
        buffer: buf.to_string(),
        indices: vec![idx],
    }
}

fn store(buf: &str, idx: Expr, value: Expr) -> Stmt {
    Stmt::Store {
        buffer: buf.to_string(),
        indices: vec![idx],
        value,
    }
}

fn decl(v: &str, init: Expr) -> Stmt {
    Stmt::Decl {
        var: v.to_string(),
        dtype: DType::I64,
        init,
    }
}

fn assign(v: &str, value: Expr) -> Stmt {
    Stmt::Assign {
        var: v.to_string(),
        value,
    }
}

fn let_(v: &str, value: Expr) -> Stmt {
    Stmt::Let {
        var: v.to_string(),
        value,
    }
}

fn cmp(op: BinOp, a: Expr, b: Expr) -> Expr {
    Expr::bin(op, a, b)
}

fn and_all(conds: Vec<Expr>) -> Expr {
    conds
        .into_iter()
        .reduce(|a, b| Expr::bin(BinOp::And, a, b))
        .unwrap_or(Expr::Bool(true))
}

/// `Σ i64(cond)` over `conds`: how many hold (`None` for none given). A sum, not a
/// short-circuit `||`, whose branches would keep a loop around it scalar.
fn count_true(conds: impl IntoIterator<Item = Expr>) -> Option<Expr> {
    conds
        .into_iter()
        .map(|c| Expr::Cast(DType::I64, Box::new(c)))
        .reduce(Expr::add)
}

/// Whether a statement of `stmts`, at any depth, reads variable `var`.
fn reads(stmts: &[Stmt], var: &str) -> bool {
    stmts.iter().any(|s| {
        s.exprs().iter().any(|e| e.reads_var(&|v| v == var))
            || s.bodies().iter().any(|b| reads(b, var))
    })
}

/// Whether `body` moves the result's slot (`out.q`) exactly once, unconditionally: one
/// `out.q := ...` outside conditionals and loops (annotations and blocks run their bodies),
/// none inside.
fn appends_once(body: &[Stmt]) -> bool {
    /// (unconditional, conditional) assignments of `out.q` in `body`.
    fn count(body: &[Stmt], conditional: bool, n: &mut (usize, usize)) {
        for s in body {
            match s {
                Stmt::Assign { var, .. } if var == "out.q" => {
                    if conditional {
                        n.1 += 1;
                    } else {
                        n.0 += 1;
                    }
                }
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    count(then_body, true, n);
                    count(else_body, true, n);
                }
                Stmt::For { body, .. } | Stmt::While { body, .. } => count(body, true, n),
                Stmt::Attr { body, .. } | Stmt::Block { body, .. } => count(body, conditional, n),
                _ => {}
            }
        }
    }
    let mut n = (0, 0);
    count(body, false, &mut n);
    n == (1, 0)
}

/// The longest segments [`Gen::equal_segments`] compares. Longer rows of one pattern merge as
/// fast (the branch predictor learns that every coordinate is in both; memory bounds either);
/// masked steps of 8 lanes over them cost more. SpAdd C = A + Aᵀ, one thread, `lacuna run
/// --repeat 100`, Intel Xeon (AMX) of session 21, ms, without → 16 → 32 → 64: ct2010 1.29 →
/// 0.60 → 0.60 → 0.64, de2010 0.45 → 0.21 → 0.23 → 0.22, email-Enron 0.85 → 0.68 → 0.68 →
/// 0.66, EX5 0.45 → 0.46 → 0.46 → 0.53, bcsstk16 0.44 → 0.46 → 0.48 → 0.53; unsymmetric
/// patterns pay for comparing rows of one length that differ (cage11 0.90 → 0.98).
pub const EQUAL_SEGMENT_MAX: i64 = 16;

/// Rows per block that the one-pass function tries at once ([`Gen::row_block`]).
pub const ROW_BLOCK: i64 = 64;

/// Names of a tensor's storage arrays.
pub fn pos_name(t: &str, l: usize) -> String {
    format!("{t}.pos{l}")
}
/// Name of the coordinates array of level `l`.
pub fn crd_name(t: &str, l: usize) -> String {
    format!("{t}.crd{l}")
}
/// Name of the values array.
pub fn vals_name(t: &str) -> String {
    format!("{t}.vals")
}

impl Plan {
    /// The element type of a sparse result's coordinates: `I32` with 32-bit operand indices
    /// when the result's encoding stores 32-bit coordinates (`crdWidth = 32`), so that they
    /// are its storage as written; `I64` otherwise (a narrower array would be widened again
    /// to the encoding's width after every run, costing more than it saves).
    pub fn result_index(&self, a: &Assignment) -> DType {
        let declared = a.output().encoding.as_ref().map(|e| e.crd_width());
        match (self.index, declared) {
            (DType::I32, Some(lacuna_ir::encoding::IndexWidth::W32)) => DType::I32,
            _ => DType::I64,
        }
    }

    /// Level `l` of tensor `t` (an encoded tensor's).
    fn level(&self, t: usize, l: usize) -> VLevel {
        self.levels[t].as_ref().expect("encoded")[l]
    }
}

/// Chooses the iteration order, the storage to read and the result mode.
pub fn plan(a: &Assignment) -> Result<Plan, CoiterError> {
    let n = a.vars.len();
    // Level-order constraints of every encoded operand.
    let constraints = |t: usize| -> Vec<(usize, usize)> {
        let lv = a.tensors[t].level_vars();
        lv.windows(2).map(|w| (w[0], w[1])).collect()
    };
    let operands: Vec<usize> = (0..a.tensors.len())
        .filter(|&t| t != a.out && a.tensors[t].encoding.is_some())
        .collect();
    let topo = |edges: &[(usize, usize)]| -> Option<Vec<usize>> {
        // Kahn's algorithm, the kernel's own order breaking ties.
        let mut indeg = vec![0usize; n];
        for &(_, b) in edges {
            indeg[b] += 1;
        }
        let mut done = vec![false; n];
        let mut order = Vec::new();
        while order.len() < n {
            let next = (0..n).find(|&v| !done[v] && indeg[v] == 0)?;
            done[next] = true;
            order.push(next);
            for &(x, y) in edges {
                if x == next {
                    indeg[y] -= 1;
                }
            }
        }
        Some(order)
    };
    let all: Vec<(usize, usize)> = operands.iter().flat_map(|&t| constraints(t)).collect();
    let mut encodings: Vec<Option<Encoding>> =
        a.tensors.iter().map(|t| t.encoding.clone()).collect();
    let mut transposed = vec![false; a.tensors.len()];
    let mut unblocked = vec![false; a.tensors.len()];
    for &t in &operands {
        let enc = encodings[t].as_ref().expect("encoded operand");
        if vlevels(enc).is_none() && enc.n_symbols() == 0 && !enc.has_slices() {
            encodings[t] =
                Some(
                    unblocked_encoding(enc.dim_rank()).map_err(|e| CoiterError::Unsupported {
                        what: format!("`{}`: no unblocked encoding: {e}", a.tensors[t].name),
                    })?,
                );
            unblocked[t] = true;
        }
    }
    let order = match topo(&all) {
        Some(o) => o,
        None if a.transpose => {
            // The kernel's order; operands that disagree are read from transposed copies.
            let order: Vec<usize> = (0..n).collect();
            for &t in &operands {
                let pos = |v: usize| order.iter().position(|&x| x == v);
                let ok = constraints(t).iter().all(|&(x, y)| pos(x) < pos(y));
                if !ok {
                    let enc = encodings[t].clone().expect("encoded operand");
                    encodings[t] = Some(transpose_encoding(a, t, &enc, &order)?);
                    transposed[t] = true;
                }
            }
            order
        }
        None => {
            let names: Vec<String> = operands
                .iter()
                .map(|&t| {
                    let lv = a.tensors[t].level_vars();
                    format!(
                        "`{}` ({})",
                        a.tensors[t].name,
                        lv.iter()
                            .map(|&v| a.vars[v].name.as_str())
                            .collect::<Vec<_>>()
                            .join(" → ")
                    )
                })
                .collect();
            return Err(CoiterError::InconsistentLevelOrder {
                operands: names.join(", "),
            });
        }
    };
    let levels: Vec<Option<Vec<VLevel>>> = encodings
        .iter()
        .map(|e| e.as_ref().and_then(vlevels))
        .collect();
    for &t in &operands {
        let Some(tl) = &levels[t] else {
            return Err(CoiterError::Unsupported {
                what: format!("`{}`: its levels cannot be co-iterated", a.tensors[t].name),
            });
        };
        for (l, vl) in tl.iter().enumerate() {
            if vl.kind != VKind::Dense && !vl.ordered {
                return Err(CoiterError::Unsupported {
                    what: format!(
                        "`{}`: level {l} is nonordered and cannot be merged; convert it to an ordered encoding",
                        a.tensors[t].name
                    ),
                });
            }
        }
    }
    let position = |v: usize| order.iter().position(|&x| x == v).expect("ordered");
    let out = a.output();
    let (mode, row_vars, last_var) = if out.encoding.is_none() {
        (OutMode::Dense, vec![], None)
    } else {
        let mut ov = out.vars.clone();
        ov.sort_by_key(|&v| position(v));
        let last = *ov.last().ok_or_else(|| CoiterError::Unsupported {
            what: "a sparse result of rank 0".into(),
        })?;
        let rows: Vec<usize> = ov[..ov.len() - 1].to_vec();
        let first_red = (0..n)
            .filter(|&v| a.vars[v].kind == lacuna_stage1::IterKind::R)
            .map(position)
            .min();
        match first_red {
            Some(r) if r < position(last) => {
                if rows.iter().any(|&v| position(v) > r) {
                    return Err(CoiterError::Unsupported {
                        what: format!(
                            "result `{}`: its row variables must be iterated before every reduction",
                            out.name
                        ),
                    });
                }
                (OutMode::Workspace { depth: r }, rows, Some(last))
            }
            _ => (OutMode::Direct, rows, Some(last)),
        }
    };
    if a.merge == Merge::Galloping {
        for &v in &order {
            let sparse = |t: usize| sparse_at(a, &levels, t, v);
            let l = build(&a.rhs, &sparse);
            if l.points.len() > 1 {
                return Err(CoiterError::GallopingUnion {
                    var: a.vars[v].name.clone(),
                });
            }
        }
    }
    let parallel_rows = matches!(mode, OutMode::Workspace { .. })
        && row_vars.len() == 1
        && order.first() == row_vars.first()
        && !operands.iter().any(|&t| sparse_at(a, &levels, t, order[0]));
    let one_pass = mode == OutMode::Direct
        && n == 2
        && row_vars.len() == 1
        && order.first() == row_vars.first()
        && !operands.iter().any(|&t| sparse_at(a, &levels, t, order[0]))
        && last_var.is_some_and(|last| {
            let sparse = |t: usize| t != a.out && sparse_at(a, &levels, t, last);
            let l = build(&a.rhs, &sparse);
            !l.points.iter().any(|p| p.universe && p.expr.is_some())
        });
    Ok(Plan {
        order,
        encodings,
        levels,
        transposed,
        unblocked,
        mode,
        row_vars,
        last_var,
        parallel_rows,
        one_pass,
        index: DType::I64,
        equal_segments: true,
        row_blocks: true,
    })
}

/// `(d0 : dense, d1 : compressed, ...)`: the unblocked copy of a blocked operand of `rank`
/// dimensions.
fn unblocked_encoding(rank: usize) -> Result<Encoding, lacuna_ir::encoding::EncodingError> {
    let dims: Vec<String> = (0..rank).map(|d| format!("d{d}")).collect();
    let levels: Vec<String> = dims
        .iter()
        .enumerate()
        .map(|(l, d)| format!("{d} : {}", if l == 0 { "dense" } else { "compressed" }))
        .collect();
    lacuna_ir::encoding::parse_format(&format!(
        "map = ({}) -> ({})",
        dims.join(", "),
        levels.join(", ")
    ))
}

/// Whether tensor `t` is stored sparsely (non-dense level) at variable `v`.
pub(crate) fn sparse_at(
    a: &Assignment,
    levels: &[Option<Vec<VLevel>>],
    t: usize,
    v: usize,
) -> bool {
    let Some(tl) = &levels[t] else {
        return false;
    };
    let tensor = &a.tensors[t];
    tl.iter()
        .any(|l| tensor.vars[l.dim] == v && l.kind != VKind::Dense)
}

/// The encoding of `t` with its levels reordered to follow `order` (same level types per
/// dimension, positions and coordinates as wide).
fn transpose_encoding(
    a: &Assignment,
    t: usize,
    enc: &Encoding,
    order: &[usize],
) -> Result<Encoding, CoiterError> {
    let tensor = &a.tensors[t];
    if !enc.is_permutation() {
        return Err(CoiterError::Unsupported {
            what: format!(
                "`{}`: only permutation maps can be read from a transposed copy; store it in the iteration's order",
                tensor.name
            ),
        });
    }
    let mut specs: Vec<lacuna_ir::encoding::LevelSpec> = enc.levels().to_vec();
    let var_of = |s: &lacuna_ir::encoding::LevelSpec| {
        let d = s.expr.as_var().expect("permutation");
        order
            .iter()
            .position(|&v| v == tensor.vars[d.index()])
            .expect("ordered")
    };
    // Keep the level types in level order, move the dimensions.
    let types: Vec<LevelType> = specs.iter().map(|s| s.lvl_type).collect();
    specs.sort_by_key(var_of);
    let specs: Vec<lacuna_ir::encoding::LevelSpec> = specs
        .into_iter()
        .zip(types)
        .map(|(s, lt)| lacuna_ir::encoding::LevelSpec::new(s.expr.clone(), lt))
        .collect();
    Encoding::new(enc.dim_rank(), specs)
        .map(|e| e.with_widths(enc.pos_width(), enc.crd_width()))
        .map_err(|e| CoiterError::Unsupported {
            what: format!("`{}`: no transposed encoding: {e}", tensor.name),
        })
}

/// Generates the function of one pass.
pub fn generate(a: &Assignment, plan: &Plan, pass: Pass) -> Result<Func, CoiterError> {
    Ok(generate_with(a, plan, pass, false)?.0)
}

/// For a [`Plan::one_pass`] kernel, the compute function that also writes the result's
/// positions: its row loop runs serially, appending every row's entries after the previous
/// row's and storing `C.pos[i + 1]` at the end of row `i`. The caller sizes `C.crd` and
/// `C.vals` by the operands' stored entries and zeroes `C.pos`. `None` when the plan does not
/// allow it.
pub fn generate_one_pass(a: &Assignment, plan: &Plan) -> Result<Option<Func>, CoiterError> {
    if !plan.one_pass {
        return Ok(None);
    }
    let (mut f, wrote_pos) = generate_with(a, plan, Pass::Compute, true)?;
    f.name = format!("{}_one_pass", a.name);
    Ok(wrote_pos.then_some(f))
}

fn generate_with(
    a: &Assignment,
    plan: &Plan,
    pass: Pass,
    one_pass: bool,
) -> Result<(Func, bool), CoiterError> {
    let mut g = Gen {
        a,
        plan,
        pass,
        next: vec![0; a.tensors.len()],
        handles: a
            .tensors
            .iter()
            .enumerate()
            .map(|(t, _)| {
                plan.encodings[t]
                    .as_ref()
                    .map(|_| Handle::Single(Expr::i64(0)))
            })
            .collect(),
        fresh: 0,
        in_ws: false,
        sink: Sink::Emit,
        one_pass: false,
        wrote_pos: false,
        block_rows: None,
        row_block: None,
    };
    g.one_pass = one_pass;
    let mut body = Vec::new();
    let sparse_out = plan.mode != OutMode::Dense;
    let (q0_param, range) = (
        one_pass_start_param(&a.output().name),
        row_range_params(&a.output().name),
    );
    if sparse_out && pass == Pass::Compute {
        // One pass appends from a given slot: 0 for all rows, a chunk's own region otherwise.
        let start = if one_pass {
            Expr::Param(q0_param.clone())
        } else {
            Expr::i64(0)
        };
        body.push(decl("out.q", start));
    }
    body.extend(g.var(0, &a.rhs)?);
    let name = match pass {
        Pass::Count => format!("{}_count", a.name),
        Pass::Compute => a.name.clone(),
    };
    let mut params = a.params.clone();
    if plan.parallel_rows || g.wrote_pos {
        params.extend([range.0, range.1]);
    }
    if g.wrote_pos {
        params.push(q0_param);
    }
    let f = crate::passes::simplify::simplify(Func {
        name,
        params,
        axes: vec![],
        buffers: buffers(a, plan, pass),
        body,
        scratch: vec![],
    });
    Ok((f, g.wrote_pos))
}

fn decl_buf(name: String, dtype: DType, role: Role) -> BufferDecl {
    BufferDecl {
        name,
        dtype,
        layout: vec![],
        kind: BufferKind::Values(role),
    }
}

/// The buffers of a pass, in argument order.
pub fn buffers(a: &Assignment, plan: &Plan, pass: Pass) -> Vec<BufferDecl> {
    let mut out = Vec::new();
    for (t, tensor) in a.tensors.iter().enumerate() {
        if t == a.out {
            continue;
        }
        match &plan.levels[t] {
            None => out.push(decl_buf(tensor.name.clone(), tensor.dtype, Role::Input)),
            Some(levels) => {
                for vl in levels {
                    if matches!(vl.kind, VKind::Compressed | VKind::Loose) {
                        let name = pos_name(&tensor.name, vl.storage);
                        out.push(decl_buf(name, plan.index, Role::Input));
                    }
                    if vl.kind != VKind::Dense {
                        let name = crd_name(&tensor.name, vl.storage);
                        out.push(decl_buf(name, plan.index, Role::Input));
                    }
                }
                out.push(decl_buf(vals_name(&tensor.name), tensor.dtype, Role::Input));
            }
        }
    }
    let o = a.output();
    match (&plan.mode, pass) {
        (OutMode::Dense, _) => out.push(decl_buf(o.name.clone(), o.dtype, Role::Output)),
        (mode, pass) => {
            out.push(decl_buf(
                format!("{}.pos", o.name),
                DType::I64,
                Role::Output,
            ));
            if pass == Pass::Compute {
                out.push(decl_buf(
                    format!("{}.crd", o.name),
                    plan.result_index(a),
                    Role::Output,
                ));
                out.push(decl_buf(vals_name(&o.name), o.dtype, Role::Output));
            }
            if let OutMode::Workspace { .. } = mode {
                if pass == Pass::Compute {
                    out.push(decl_buf(format!("{}.w", o.name), o.dtype, Role::Alloc));
                }
                out.push(decl_buf(
                    format!("{}.flag", o.name),
                    DType::I64,
                    Role::Alloc,
                ));
                out.push(decl_buf(
                    format!("{}.list", o.name),
                    DType::I64,
                    Role::Alloc,
                ));
            }
        }
    }
    out
}

/// The linear row index of the result's row variables (0 when there are none).
fn row_index(a: &Assignment, plan: &Plan) -> Expr {
    let mut r = Expr::i64(0);
    for &v in &plan.row_vars {
        r = Expr::add(
            Expr::mul(r, size_expr(&a.vars[v].extent)),
            i64v(&a.vars[v].name),
        );
    }
    r
}

impl Gen<'_> {
    fn fresh(&mut self, base: &str) -> String {
        self.fresh += 1;
        format!("{base}.{}", self.fresh)
    }

    /// Code for loop depth `depth` computing `e`.
    fn var(&mut self, depth: usize, e: &TExpr) -> Result<Vec<Stmt>, CoiterError> {
        if let OutMode::Workspace { depth: d } = self.plan.mode {
            if d == depth && self.fresh_ws() {
                return self.workspace_row(depth, e);
            }
        }
        if depth == self.plan.order.len() {
            return self.leaf(e);
        }
        let v = self.plan.order[depth];
        // Direct results with reductions below the innermost result variable reduce first.
        let reduce_below = self.plan.mode == OutMode::Direct
            && self.plan.last_var == Some(v)
            && depth + 1 < self.plan.order.len();
        let mut present = Vec::new();
        e.tensors(&mut present);
        let sparse = |t: usize| sparse_at(self.a, &self.plan.levels, t, v);
        let lattice = build(e, &sparse);
        if lattice.points.is_empty() {
            return Ok(vec![]);
        }
        // The storage level of each present tensor at `v`.
        let mut levels: Vec<(usize, usize)> = Vec::new();
        for &t in &present {
            if let Some(tl) = &self.plan.levels[t] {
                let l = self.next[t];
                if l < tl.len() && self.a.tensors[t].vars[tl[l].dim] == v {
                    levels.push((t, l));
                }
            }
        }
        let saved = (self.next.clone(), self.handles.clone());
        let out = self.lattice_loops(depth, v, &lattice, &levels, reduce_below);
        self.next = saved.0;
        self.handles = saved.1;
        out
    }

    fn fresh_ws(&self) -> bool {
        !self.in_ws
    }

    fn tname(&self, t: usize) -> &str {
        &self.a.tensors[t].name
    }

    fn level_size(&self, t: usize, l: usize) -> Expr {
        size_expr(&self.a.tensors[t].extents[self.plan.level(t, l).dim])
    }

    fn lattice_loops(
        &mut self,
        depth: usize,
        v: usize,
        lattice: &Lattice,
        levels: &[(usize, usize)],
        reduce_below: bool,
    ) -> Result<Vec<Stmt>, CoiterError> {
        let var = self.a.vars[v].name.clone();
        let n = size_expr(&self.a.vars[v].extent);
        let top = &lattice.points[0];
        let mut out = Vec::new();
        // Level iterators of the sparse operands, with their ranges.
        let mut its: Vec<It> = Vec::new();
        for &(t, l) in levels {
            if !top.iters.contains(&t) {
                continue;
            }
            let vl = self.plan.level(t, l);
            let name = self.tname(t).to_string();
            let handle = self.handles[t]
                .clone()
                .ok_or_else(|| CoiterError::Unsupported {
                    what: format!("`{name}` level {l}: no parent position"),
                })?;
            let pos = pos_name(&name, vl.storage);
            let (lo, hi) = match (&handle, vl.kind) {
                (Handle::Single(q), VKind::Singleton) => {
                    (q.clone(), Expr::add(q.clone(), Expr::i64(1)))
                }
                (Handle::Range(a, b), VKind::Singleton) => (a.clone(), b.clone()),
                (Handle::Single(q), VKind::Compressed) => (
                    Expr::load_i64(&pos, q.clone(), self.plan.index),
                    Expr::load_i64(&pos, Expr::add(q.clone(), Expr::i64(1)), self.plan.index),
                ),
                (Handle::Single(q), VKind::Loose) => {
                    let two_q = Expr::mul(Expr::i64(2), q.clone());
                    (
                        Expr::load_i64(&pos, two_q.clone(), self.plan.index),
                        Expr::load_i64(&pos, Expr::add(two_q, Expr::i64(1)), self.plan.index),
                    )
                }
                (Handle::Single(q), VKind::NOfM { n, m }) => {
                    // n slots per block of m, ceil(extent / m) blocks per parent position.
                    let ext = size_expr(&self.a.tensors[t].extents[vl.dim]);
                    let blocks =
                        Expr::bin(BinOp::Div, Expr::add(ext, Expr::i64(m - 1)), Expr::i64(m));
                    let per = Expr::mul(blocks, Expr::i64(n));
                    let lo = Expr::mul(q.clone(), per.clone());
                    (lo.clone(), Expr::add(lo, per))
                }
                (Handle::Range(..), _) | (_, VKind::Dense) => {
                    return Err(CoiterError::Unsupported {
                        what: format!(
                            "`{name}` level {l}: a {:?} level below a non-unique level",
                            vl.kind
                        ),
                    })
                }
            };
            let lo_v = self.fresh(&format!("{name}.l{l}.lo"));
            let p = self.fresh(&format!("{name}.l{l}.p"));
            let end = self.fresh(&format!("{name}.l{l}.end"));
            let c = self.fresh(&format!("{name}.l{l}.c"));
            let seg = (!vl.unique).then(|| self.fresh(&format!("{name}.l{l}.seg")));
            its.push(It {
                t,
                lo: lo_v.clone(),
                p: p.clone(),
                end: end.clone(),
                c,
                crd: crd_name(&name, vl.storage),
                seg,
                nofm: match vl.kind {
                    VKind::NOfM { n, m } => Some((n, m)),
                    _ => None,
                },
                index: self.plan.index,
            });
            out.push(let_(&lo_v, lo));
            out.push(let_(&end, hi));
            out.push(decl(&p, i64v(&lo_v)));
        }
        let it_of = |t: usize| its.iter().find(|i| i.t == t).cloned();
        // Fast paths: one unique iterator alone, or the dense range alone.
        if lattice.points.len() == 1 && !top.universe && its.len() == 1 && its[0].seg.is_none() {
            let it = its[0].clone();
            let pv = self.fresh(&format!("{var}.pos"));
            let mut body = vec![let_(&var, it.coord(i64v(&pv))), let_(&it.c, i64v(&var))];
            let mut inner = it.clone();
            inner.p = pv.clone();
            body.extend(self.case(depth, v, top, levels, &[inner], reduce_below)?);
            out.retain(|s| !matches!(s, Stmt::Decl { .. }));
            out.push(Stmt::For {
                var: pv,
                start: i64v(&it.lo),
                end: i64v(&it.end),
                kind: ForKind::Serial,
                body,
            });
            return Ok(out);
        }
        if lattice.points.len() == 1 && top.universe && its.is_empty() {
            // The outermost dense loop over result rows runs in parallel: every row writes
            // its own entries, a sparse result's from its own position (`C.pos[i]`, known
            // from the count pass).
            let parallel = depth == 0
                && match self.plan.mode {
                    OutMode::Dense => self.a.output().vars.contains(&v),
                    OutMode::Direct => self.plan.row_vars == [v],
                    OutMode::Workspace { .. } => false,
                };
            let mut body = Vec::new();
            let rows_append =
                parallel && self.plan.mode == OutMode::Direct && self.pass == Pass::Compute;
            let pos = format!("{}.pos", self.a.output().name);
            if rows_append && !self.one_pass {
                body.push(decl("out.q", load(&pos, i64v(&var))));
            }
            // The one-pass rows in blocks: the level below builds the statements trying a
            // block at once where it can (`row_block`).
            let names = (rows_append && self.one_pass && self.plan.row_blocks).then(|| BlockRows {
                row: var.clone(),
                i0: self.fresh(&format!("{var}.blk.lo")),
                i1: self.fresh(&format!("{var}.blk.hi")),
                done: self.fresh(&format!("{var}.blk.done")),
            });
            self.block_rows = names.clone();
            let cases = self.case(depth, v, top, levels, &[], reduce_below);
            self.block_rows = None;
            let try_block = self.row_block.take();
            body.extend(cases?);
            let parallel = parallel && !self.one_pass;
            if rows_append && self.one_pass {
                // One pass: row `i` ends where row `i + 1` starts.
                body.push(store(
                    &pos,
                    Expr::add(i64v(&var), Expr::i64(1)),
                    i64v("out.q"),
                ));
                self.wrote_pos = true;
            }
            // Workspace rows in chunks: the caller gives the range (and a workspace per chunk);
            // so does one pass, whose rows can run in chunks writing disjoint regions.
            let (start, end) =
                if depth == 0 && (self.plan.parallel_rows || rows_append && self.one_pass) {
                    let (lo, hi) = row_range_params(&self.a.output().name);
                    (Expr::Param(lo), Expr::Param(hi))
                } else {
                    (Expr::i64(0), n)
                };
            let kind = if parallel {
                ForKind::Parallel
            } else {
                ForKind::Serial
            };
            if let (Some(b), Some(try_block)) = (names, try_block) {
                // while lo < row_hi { hi = min(lo + ROW_BLOCK, row_hi); the block at once,
                // else row by row; lo = hi }
                let mut block = vec![
                    let_(
                        &b.i1,
                        Expr::bin(
                            BinOp::Min,
                            Expr::add(i64v(&b.i0), Expr::i64(ROW_BLOCK)),
                            end.clone(),
                        ),
                    ),
                    decl(&b.done, Expr::i64(0)),
                ];
                block.extend(try_block);
                block.push(Stmt::If {
                    cond: cmp(BinOp::Eq, i64v(&b.done), Expr::i64(0)),
                    then_body: vec![Stmt::For {
                        var: var.clone(),
                        start: i64v(&b.i0),
                        end: i64v(&b.i1),
                        kind,
                        body,
                    }],
                    else_body: vec![],
                });
                block.push(assign(&b.i0, i64v(&b.i1)));
                out.push(decl(&b.i0, start));
                out.push(Stmt::While {
                    cond: cmp(BinOp::Lt, i64v(&b.i0), end),
                    body: block,
                });
                return Ok(out);
            }
            out.push(Stmt::For {
                var: var.clone(),
                start,
                end,
                kind,
                body,
            });
            return Ok(out);
        }
        let cnt = self.fresh(&format!("{var}.cnt"));
        if top.universe {
            out.push(decl(&cnt, Expr::i64(0)));
        }
        let galloping =
            self.a.merge == Merge::Galloping && lattice.points.len() == 1 && its.len() >= 2;
        let block_rows = self.block_rows.take();
        if !galloping && !reduce_below {
            if let Some(b) = &block_rows {
                self.row_block = self.row_block(depth, v, top, levels, &its, b)?;
            }
            out.extend(self.equal_segments(depth, v, top, levels, &its)?);
        }
        for point in &lattice.points {
            let pits: Vec<It> = point.iters.iter().filter_map(|&t| it_of(t)).collect();
            let mut conds: Vec<Expr> = pits
                .iter()
                .map(|i| cmp(BinOp::Lt, i64v(&i.p), i64v(&i.end)))
                .collect();
            if point.universe {
                conds.push(cmp(BinOp::Lt, i64v(&cnt), n.clone()));
            }
            let mut body = Vec::new();
            for i in &pits {
                body.push(let_(&i.c, i.coord(i64v(&i.p))));
                if let Some(seg) = &i.seg {
                    body.push(decl(seg, Expr::add(i64v(&i.p), Expr::i64(1))));
                    body.push(Stmt::While {
                        cond: Expr::bin(
                            BinOp::And,
                            cmp(BinOp::Lt, i64v(seg), i64v(&i.end)),
                            cmp(
                                BinOp::Eq,
                                Expr::load_i64(&i.crd, i64v(seg), i.index),
                                i64v(&i.c),
                            ),
                        ),
                        body: vec![assign(seg, Expr::add(i64v(seg), Expr::i64(1)))],
                    });
                }
            }
            let coord = if point.universe {
                i64v(&cnt)
            } else {
                let op = if galloping { BinOp::Max } else { BinOp::Min };
                pits.iter()
                    .map(|i| i64v(&i.c))
                    .reduce(|a, b| Expr::bin(op, a, b))
                    .ok_or_else(|| CoiterError::Unsupported {
                        what: "a lattice point without iterators".into(),
                    })?
            };
            body.push(let_(&var, coord));
            let advance = |i: &It| {
                let next = match &i.seg {
                    Some(seg) => i64v(seg),
                    None => Expr::add(i64v(&i.p), Expr::i64(1)),
                };
                assign(&i.p, next)
            };
            let advance_if_at = |i: &It| Stmt::If {
                cond: cmp(BinOp::Eq, i64v(&i.c), i64v(&var)),
                then_body: vec![advance(i)],
                else_body: vec![],
            };
            // Cases, supersets first: an if-else chain. Without galloping, each case also
            // steps its own iterators, unconditionally, as a hand-written merge does: the
            // positions then depend on the branch taken, not on the loaded coordinates, so
            // the loop carries no load-compare-add chain from one step to the next (branches
            // the predictor learns, where a select or `p += c == j` waits for the loads).
            // An iterator outside the case steps only if it is at the coordinate too, unless
            // an earlier case covers exactly the case's iterators and it (then it is not).
            let arms: Vec<&Point> = lattice.points.iter().filter(|q| q.within(point)).collect();
            // Each case's iterators present at this variable.
            let present: Vec<BTreeSet<usize>> = arms
                .iter()
                .map(|q| {
                    q.iters
                        .iter()
                        .copied()
                        .filter(|&t| it_of(t).is_some())
                        .collect()
                })
                .collect();
            // Where no case matches, an iterator with a case of its own alone is not at the
            // coordinate (that case would have matched); the others step if they are.
            let mut chain: Vec<Stmt> = if galloping {
                Vec::new()
            } else {
                pits.iter()
                    .filter(|i| !present.iter().any(|r| *r == BTreeSet::from([i.t])))
                    .map(advance_if_at)
                    .collect()
            };
            for (k, q) in arms.iter().enumerate().rev() {
                let qits: Vec<It> = q.iters.iter().filter_map(|&t| it_of(t)).collect();
                let cond = and_all(
                    qits.iter()
                        .map(|i| cmp(BinOp::Eq, i64v(&i.c), i64v(&var)))
                        .collect(),
                );
                let mut then_body = self.case(depth, v, q, levels, &qits, reduce_below)?;
                if !galloping {
                    let here = &present[k];
                    for i in &pits {
                        if here.contains(&i.t) {
                            then_body.push(advance(i));
                            continue;
                        }
                        let mut with = here.clone();
                        with.insert(i.t);
                        if !present[..k].contains(&with) {
                            then_body.push(advance_if_at(i));
                        }
                    }
                }
                chain = vec![Stmt::If {
                    cond,
                    then_body,
                    else_body: chain,
                }];
            }
            body.extend(chain);
            if galloping {
                // All at the largest coordinate: a match, step past it; otherwise the ones
                // behind skip ahead to it.
                let all = and_all(
                    pits.iter()
                        .map(|i| cmp(BinOp::Eq, i64v(&i.c), i64v(&var)))
                        .collect(),
                );
                let mut behind = Vec::new();
                for i in &pits {
                    behind.push(Stmt::If {
                        cond: cmp(BinOp::Lt, i64v(&i.c), i64v(&var)),
                        then_body: self.gallop(i, &var),
                        else_body: vec![],
                    });
                }
                body.push(Stmt::If {
                    cond: all,
                    then_body: pits.iter().map(advance).collect(),
                    else_body: behind,
                });
            }
            if point.universe {
                body.push(assign(&cnt, Expr::add(i64v(&cnt), Expr::i64(1))));
            }
            out.push(Stmt::While {
                cond: and_all(conds),
                body,
            });
        }
        Ok(out)
    }

    /// The merge of short segments that hold the same coordinates, as straight vector loops:
    /// where every operand iterated at innermost variable `v` has a segment of one length, at
    /// most [`EQUAL_SEGMENT_MAX`], a vectorized loop compares their coordinates; when all are
    /// equal, every position is the case of the top lattice point (all present, as the merge
    /// would find it), computed by a second vectorized loop, and the iterators are moved to
    /// their ends, so that the merge loops after it have nothing left to do. Both loops fold
    /// their tails into masked lanes: a segment of up to one vector's lanes is one step, with
    /// no scalar remainder whose exit the branch predictor misses, where the merge misses one
    /// per segment at least. A + Aᵀ of a symmetric pattern, or operands sharing a pattern (K +
    /// M in FEM assembly), of short rows gain most. Empty where [`Plan::equal_segments`] is
    /// off, and where [`Gen::equal_run`] does not apply.
    fn equal_segments(
        &mut self,
        depth: usize,
        v: usize,
        top: &Point,
        levels: &[(usize, usize)],
        its: &[It],
    ) -> Result<Vec<Stmt>, CoiterError> {
        if !self.plan.equal_segments {
            return Ok(vec![]);
        }
        let Some(mut run) = self.equal_run(depth, v, top, levels, its, true)? else {
            return Ok(vec![]);
        };
        // The merge loops after it have nothing left to do.
        run.equal
            .extend(its.iter().map(|i| assign(&i.p, i64v(&i.end))));
        let mut same_len = run.same_len;
        same_len.push(cmp(BinOp::Le, i64v(&run.len), Expr::i64(EQUAL_SEGMENT_MAX)));
        Ok(vec![
            run.bind_len,
            Stmt::If {
                cond: and_all(same_len),
                then_body: vec![
                    decl(&run.diff, Expr::i64(0)),
                    run.check,
                    Stmt::If {
                        cond: cmp(BinOp::Eq, i64v(&run.diff), Expr::i64(0)),
                        then_body: run.equal,
                        else_body: vec![],
                    },
                ],
                else_body: vec![],
            },
        ])
    }

    /// The statements of a block of rows at once, tried by the one-pass row loop before its
    /// rows (`b` names the block): where every operand iterated here (at the innermost
    /// variable `v`, directly below the rows) stores the same number of entries in each row
    /// of the block and the same coordinates, the block's entries are one run of positions,
    /// each the top point's case, so two vectorized loops (the coordinates compared, then
    /// the entries computed) and a third (the result's row positions) compute the whole
    /// block with no branch per row or per entry; `b.done` is set. A + Aᵀ of a symmetric
    /// pattern (road networks, FEM meshes) and operands sharing a pattern (K + M in FEM
    /// assembly) take it for nearly every block; elsewhere it costs comparisons, each only
    /// where the one before agrees: of the block's entry counts, of its first and last
    /// coordinates, of its row lengths (a vectorized loop), of all its coordinates. The
    /// loops run whole vectors with a scalar remainder (no masks). `None` where it does not
    /// apply: as for [`Gen::equal_run`], where the case reads the row variable, and unless
    /// every iterator is a compressed level under its row's position (CSR's).
    fn row_block(
        &mut self,
        depth: usize,
        v: usize,
        top: &Point,
        levels: &[(usize, usize)],
        its: &[It],
        b: &BlockRows,
    ) -> Result<Option<Vec<Stmt>>, CoiterError> {
        if depth != 1 || self.plan.mode == OutMode::Dense {
            return Ok(None);
        }
        let row = Expr::var(&b.row);
        let mut block_its = Vec::new();
        let mut pos = Vec::new();
        let mut out = Vec::new();
        for i in its {
            let Some(&(_, l)) = levels.iter().find(|(t, _)| *t == i.t) else {
                return Ok(None);
            };
            let vl = self.plan.level(i.t, l);
            let under_row = matches!(
                &self.handles[i.t],
                Some(Handle::Single(q)) if crate::passes::simplify::expr(q.clone()) == row
            );
            if vl.kind != VKind::Compressed || !under_row {
                return Ok(None);
            }
            let name = self.tname(i.t).to_string();
            let p = pos_name(&name, vl.storage);
            // The block's segment, from its first row's start to its last row's end.
            let it = It {
                lo: self.fresh(&format!("{name}.blk.lo")),
                end: self.fresh(&format!("{name}.blk.end")),
                ..i.clone()
            };
            out.push(let_(
                &it.lo,
                Expr::load_i64(&p, i64v(&b.i0), self.plan.index),
            ));
            out.push(let_(
                &it.end,
                Expr::load_i64(&p, i64v(&b.i1), self.plan.index),
            ));
            pos.push(p);
            block_its.push(it);
        }
        let Some(run) = self.equal_run(depth, v, top, levels, &block_its, false)? else {
            return Ok(None);
        };
        // A case that reads the row (MLIR's triangular `select(i < j)`) needs each row's own
        // loop.
        if reads(&run.equal, &b.row) {
            return Ok(None);
        }
        let index = self.plan.index;
        let Some((first, rest)) = block_its.split_first() else {
            return Ok(None);
        };
        let r = self.fresh(&format!("{}.blk.r", b.row));
        // Row r's end, from the block's first position.
        let row_end = |k: usize, i: &It| {
            let next = Expr::add(i64v(&r), Expr::i64(1));
            Expr::sub(Expr::load_i64(&pos[k], next, index), i64v(&i.lo))
        };
        let rows_differ = count_true(
            rest.iter()
                .enumerate()
                .map(|(k, i)| cmp(BinOp::Ne, row_end(k + 1, i), row_end(0, first))),
        );
        // The block's first and last coordinates first: operands of one row structure but
        // other coordinates (B = A with its columns shifted) skip the other comparisons.
        let last = |i: &It| Expr::sub(i64v(&i.end), Expr::i64(1));
        let ends_differ = count_true(rest.iter().flat_map(|i| {
            [
                cmp(
                    BinOp::Ne,
                    i.coord(i64v(&i.lo)),
                    first.coord(i64v(&first.lo)),
                ),
                cmp(BinOp::Ne, i.coord(last(i)), first.coord(last(first))),
            ]
        }));
        let (Some(rows_differ), Some(ends_differ)) = (rows_differ, ends_differ) else {
            return Ok(None);
        };
        let rows = |body: Vec<Stmt>| Stmt::For {
            var: r.clone(),
            start: i64v(&b.i0),
            end: i64v(&b.i1),
            kind: ForKind::Vectorized,
            body,
        };
        let mut equal = run.equal;
        // The result's row r ends where the operands' rows end, from its first slot (the
        // block rows' result is sparse: `rows_append`).
        let o = format!("{}.pos", self.a.output().name);
        equal.push(rows(vec![store(
            &o,
            Expr::add(i64v(&r), Expr::i64(1)),
            Expr::add(i64v(&run.q0), row_end(0, first)),
        )]));
        equal.push(assign(&b.done, Expr::i64(1)));
        let if_same = |body: Vec<Stmt>| Stmt::If {
            cond: cmp(BinOp::Eq, i64v(&run.diff), Expr::i64(0)),
            then_body: body,
            else_body: vec![],
        };
        out.push(run.bind_len);
        out.push(Stmt::If {
            cond: and_all(run.same_len),
            then_body: vec![
                decl(&run.diff, Expr::i64(0)),
                Stmt::If {
                    cond: cmp(BinOp::Gt, i64v(&run.len), Expr::i64(0)),
                    then_body: vec![assign(&run.diff, ends_differ)],
                    else_body: vec![],
                },
                if_same(vec![rows(vec![assign(
                    &run.diff,
                    Expr::add(i64v(&run.diff), rows_differ),
                )])]),
                if_same(vec![run.check, if_same(equal)]),
            ],
            else_body: vec![],
        });
        Ok(Some(out))
    }

    /// The equal-coordinates path over `len` positions of the iterators `its` from their
    /// `lo` ([`Gen::equal_segments`], [`Gen::row_block`]): a vectorized loop counting the
    /// coordinates that differ from the first iterator's, and one computing the top point's
    /// case at every position; `masked` folds their tails into masked lanes. `None` where it
    /// does not apply: the count pass, reductions (into an accumulator or over `v`),
    /// workspaces, a universe point, a level above others, non-unique or n:m levels, fewer
    /// than two sparse operands, or a case that may append no entry to a sparse result.
    fn equal_run(
        &mut self,
        depth: usize,
        v: usize,
        top: &Point,
        levels: &[(usize, usize)],
        its: &[It],
        masked: bool,
    ) -> Result<Option<EqualRun>, CoiterError> {
        let applies = self.pass == Pass::Compute
            && matches!(self.sink, Sink::Emit)
            && !self.in_ws
            && depth + 1 == self.plan.order.len()
            // Each position its own result entry: no sum over `v` (spdot's), which a
            // vectorized loop could reassociate.
            && self.a.output().vars.contains(&v)
            && !top.universe
            && top.expr.is_some()
            && its.len() >= 2
            && top.iters.iter().all(|t| its.iter().any(|i| i.t == *t))
            && its.iter().all(|i| i.seg.is_none() && i.nofm.is_none());
        let Some((first, rest)) = its.split_first().filter(|_| applies) else {
            return Ok(None);
        };
        let var = self.a.vars[v].name.clone();
        let len = self.fresh(&format!("{var}.eq.len"));
        let diff = self.fresh(&format!("{var}.eq.diff"));
        let t = self.fresh(&format!("{var}.eq.t"));
        let q0 = self.fresh("out.q0");
        let at = |i: &It| Expr::add(i64v(&i.lo), i64v(&t));
        let vector_loop = |body: Vec<Stmt>| {
            let l = Stmt::For {
                var: t.clone(),
                start: Expr::i64(0),
                end: i64v(&len),
                kind: ForKind::Vectorized,
                body,
            };
            if masked {
                Stmt::Attr {
                    key: "masked".into(),
                    value: Expr::i64(1),
                    body: vec![l],
                }
            } else {
                l
            }
        };
        // Σ over positions and operands of [coordinate ≠ the first operand's].
        let differs = count_true(
            rest.iter()
                .map(|i| cmp(BinOp::Ne, i.coord(at(i)), first.coord(at(first)))),
        )
        .ok_or_else(|| CoiterError::Unsupported {
            what: "equal segments of one operand".into(),
        })?;
        let check = vector_loop(vec![assign(&diff, Expr::add(i64v(&diff), differs))]);
        // The top point's case at each position, the iterators at `lo + t`. A sparse result's
        // slot is `q0 + t` (a variable of the body's own that shadows the running slot), and
        // the running slot moves past the segment after the loop: a loop whose induction is
        // used after it keeps a scalar remainder instead of masked lanes.
        let sparse_out = self.plan.mode != OutMode::Dense;
        let mut body = vec![let_(&var, first.coord(at(first)))];
        if sparse_out {
            body.push(decl("out.q", Expr::add(i64v(&q0), i64v(&t))));
        }
        let mut inner = Vec::new();
        for i in its {
            let p = self.fresh(&format!("{}.eq.p", self.tname(i.t)));
            body.push(let_(&p, at(i)));
            body.push(let_(&i.c, i64v(&var)));
            inner.push(It { p, ..i.clone() });
        }
        let case = self.case(depth, v, top, levels, &inner, false)?;
        // A sparse result's slots are `q0 + t` only where every position appends one entry:
        // not where a case may append none (MLIR's `binary` and `select` regions).
        if sparse_out && !appends_once(&case) {
            return Ok(None);
        }
        body.extend(case);
        let mut equal = Vec::new();
        if sparse_out {
            equal.push(let_(&q0, i64v("out.q")));
        }
        equal.push(vector_loop(body));
        if sparse_out {
            equal.push(assign("out.q", Expr::add(i64v(&q0), i64v(&len))));
        }
        let seg_len = |i: &It| Expr::sub(i64v(&i.end), i64v(&i.lo));
        Ok(Some(EqualRun {
            bind_len: let_(&len, seg_len(first)),
            same_len: rest
                .iter()
                .map(|i| cmp(BinOp::Eq, seg_len(i), i64v(&len)))
                .collect(),
            len,
            diff,
            check,
            equal,
            q0,
        }))
    }

    /// Moves iterator `i` to the first position whose coordinate is at least `target`:
    /// exponential steps, then a binary search.
    fn gallop(&mut self, i: &It, target: &str) -> Vec<Stmt> {
        let (lo, step, hi, mid) = (
            self.fresh("gallop.lo"),
            self.fresh("gallop.step"),
            self.fresh("gallop.hi"),
            self.fresh("gallop.mid"),
        );
        let crd_at = |e: Expr| i.coord(e);
        vec![
            decl(&lo, i64v(&i.p)),
            decl(&step, Expr::i64(1)),
            Stmt::While {
                cond: Expr::bin(
                    BinOp::And,
                    cmp(BinOp::Lt, Expr::add(i64v(&lo), i64v(&step)), i64v(&i.end)),
                    cmp(
                        BinOp::Lt,
                        crd_at(Expr::add(i64v(&lo), i64v(&step))),
                        i64v(target),
                    ),
                ),
                body: vec![
                    assign(&lo, Expr::add(i64v(&lo), i64v(&step))),
                    assign(&step, Expr::mul(i64v(&step), Expr::i64(2))),
                ],
            },
            decl(
                &hi,
                Expr::bin(BinOp::Min, Expr::add(i64v(&lo), i64v(&step)), i64v(&i.end)),
            ),
            assign(&lo, Expr::add(i64v(&lo), Expr::i64(1))),
            Stmt::While {
                cond: cmp(BinOp::Lt, i64v(&lo), i64v(&hi)),
                body: vec![
                    let_(
                        &mid,
                        Expr::bin(BinOp::Div, Expr::add(i64v(&lo), i64v(&hi)), Expr::i64(2)),
                    ),
                    Stmt::If {
                        cond: cmp(BinOp::Lt, crd_at(i64v(&mid)), i64v(target)),
                        then_body: vec![assign(&lo, Expr::add(i64v(&mid), Expr::i64(1)))],
                        else_body: vec![assign(&hi, i64v(&mid))],
                    },
                ],
            },
            assign(&i.p, i64v(&lo)),
        ]
    }

    /// The body of case `q` at variable `v`: positions for the next levels, then the next
    /// variable.
    fn case(
        &mut self,
        depth: usize,
        v: usize,
        q: &Point,
        levels: &[(usize, usize)],
        qits: &[It],
        reduce_below: bool,
    ) -> Result<Vec<Stmt>, CoiterError> {
        let saved = (self.next.clone(), self.handles.clone());
        let var = self.a.vars[v].name.clone();
        for &(t, l) in levels {
            self.next[t] = l + 1;
            let dense = self.plan.level(t, l).kind == VKind::Dense;
            self.handles[t] = if let Some(i) = qits.iter().find(|i| i.t == t) {
                Some(match &i.seg {
                    Some(seg) => Handle::Range(i64v(&i.p), i64v(seg)),
                    None => Handle::Single(i64v(&i.p)),
                })
            } else if dense {
                match &self.handles[t] {
                    Some(Handle::Single(q)) => Some(Handle::Single(Expr::add(
                        Expr::mul(q.clone(), self.level_size(t, l)),
                        i64v(&var),
                    ))),
                    _ => {
                        return Err(CoiterError::Unsupported {
                            what: format!(
                                "`{}` level {l}: a dense level below a non-unique level",
                                self.tname(t)
                            ),
                        })
                    }
                }
            } else {
                None
            };
        }
        let Some(qexpr) = &q.expr else {
            // A case without entries: it only keeps the cases below from matching.
            self.next = saved.0;
            self.handles = saved.1;
            return Ok(vec![]);
        };
        let out = if reduce_below {
            let acc = self.fresh("acc");
            let hit = self.fresh("hit");
            let dtype = self.a.output().dtype;
            let saved_sink = std::mem::replace(
                &mut self.sink,
                Sink::Acc {
                    acc: acc.clone(),
                    hit: hit.clone(),
                },
            );
            let inner = self.var(depth + 1, qexpr);
            self.sink = saved_sink;
            let inner = inner?;
            let mut out = vec![decl(&hit, Expr::i64(0))];
            if self.pass == Pass::Compute {
                out.push(Stmt::Decl {
                    var: acc.clone(),
                    dtype,
                    init: self.identity()?,
                });
            }
            out.extend(inner);
            out.push(Stmt::If {
                cond: cmp(BinOp::Ne, i64v(&hit), Expr::i64(0)),
                then_body: self.emit(Expr::var(&acc)),
                else_body: vec![],
            });
            out
        } else {
            self.var(depth + 1, qexpr)?
        };
        self.next = saved.0;
        self.handles = saved.1;
        Ok(out)
    }

    /// Appends (or counts) one entry of a sparse result, or stores into the dense one.
    fn emit(&mut self, value: Expr) -> Vec<Stmt> {
        let o = self.a.output().name.clone();
        let pos = format!("{o}.pos");
        let r1 = Expr::add(row_index(self.a, self.plan), Expr::i64(1));
        match self.pass {
            Pass::Count => vec![store(
                &pos,
                r1.clone(),
                Expr::add(load(&pos, r1), Expr::i64(1)),
            )],
            Pass::Compute => {
                let last = self.plan.last_var.expect("sparse result");
                vec![
                    store(
                        &format!("{o}.crd"),
                        i64v("out.q"),
                        i64v(&self.a.vars[last].name),
                    ),
                    store(&vals_name(&o), i64v("out.q"), value),
                    assign("out.q", Expr::add(i64v("out.q"), Expr::i64(1))),
                ]
            }
        }
    }

    /// The first value of every result entry.
    fn identity(&self) -> Result<Expr, CoiterError> {
        self.value(&self.a.reduce.1, self.a.output().dtype, &[])
    }

    /// The entry so far combined with a new value.
    fn combine(&self, cur: Expr, value: Expr) -> Result<Expr, CoiterError> {
        let t = self.a.output().dtype;
        self.value(&self.a.reduce.0, t, &[(cur, t), (value, t)])
    }

    /// The innermost body: evaluate and hand the value to the sink, where it is present.
    fn leaf(&mut self, e: &TExpr) -> Result<Vec<Stmt>, CoiterError> {
        let out = self.a.output();
        let dtype = out.dtype;
        let (cond, value) = self.eval(e, dtype)?;
        let body = if self.plan.mode == OutMode::Dense {
            if self.pass == Pass::Count {
                return Ok(vec![]);
            }
            let mut idx = Expr::i64(0);
            for (d, &v) in out.vars.iter().enumerate() {
                idx = Expr::add(
                    Expr::mul(idx, size_expr(&out.extents[d])),
                    i64v(&self.a.vars[v].name),
                );
            }
            let value = if self.a.accumulate {
                self.combine(load(&out.name, idx.clone()), value)?
            } else {
                value
            };
            vec![store(&out.name, idx, value)]
        } else {
            match self.sink.clone() {
                Sink::Emit => self.emit(value),
                Sink::Acc { acc, hit } => {
                    let mut s = vec![assign(&hit, Expr::i64(1))];
                    if self.pass == Pass::Compute {
                        s.push(assign(&acc, self.combine(Expr::var(&acc), value)?));
                    }
                    s
                }
                Sink::Ws { cnt } => {
                    let o = out.name.clone();
                    let (flag, list, w) =
                        (format!("{o}.flag"), format!("{o}.list"), format!("{o}.w"));
                    let c = i64v(&self.a.vars[self.plan.last_var.expect("sparse")].name);
                    let mut first = vec![
                        store(&flag, c.clone(), Expr::i64(1)),
                        store(&list, i64v(&cnt), c.clone()),
                        assign(&cnt, Expr::add(i64v(&cnt), Expr::i64(1))),
                    ];
                    let mut again = vec![];
                    if self.pass == Pass::Compute {
                        first.push(store(
                            &w,
                            c.clone(),
                            self.combine(self.identity()?, value.clone())?,
                        ));
                        again.push(store(
                            &w,
                            c.clone(),
                            self.combine(load(&w, c.clone()), value)?,
                        ));
                    }
                    vec![Stmt::If {
                        cond: cmp(BinOp::Eq, load(&flag, c), Expr::i64(0)),
                        then_body: first,
                        else_body: again,
                    }]
                }
            }
        };
        Ok(match cond {
            None => body,
            Some(c) => vec![Stmt::If {
                cond: c,
                then_body: body,
                else_body: vec![],
            }],
        })
    }

    /// One row through the workspace: the loops below, then the row compressed in order.
    fn workspace_row(&mut self, depth: usize, e: &TExpr) -> Result<Vec<Stmt>, CoiterError> {
        let o = self.a.output().name.clone();
        let (flag, list, w, pos) = (
            format!("{o}.flag"),
            format!("{o}.list"),
            format!("{o}.w"),
            format!("{o}.pos"),
        );
        let cnt = self.fresh("ws.cnt");
        self.in_ws = true;
        let saved = std::mem::replace(&mut self.sink, Sink::Ws { cnt: cnt.clone() });
        let inner = self.var(depth, e);
        self.sink = saved;
        self.in_ws = false;
        let mut out = vec![decl(&cnt, Expr::i64(0))];
        out.extend(inner?);
        let t = self.fresh("ws.t");
        let c = self.fresh("ws.c");
        match self.pass {
            Pass::Count => {
                out.push(store(
                    &pos,
                    Expr::add(row_index(self.a, self.plan), Expr::i64(1)),
                    i64v(&cnt),
                ));
                out.push(Stmt::For {
                    var: t.clone(),
                    start: Expr::i64(0),
                    end: i64v(&cnt),
                    kind: ForKind::Serial,
                    body: vec![store(&flag, load(&list, i64v(&t)), Expr::i64(0))],
                });
            }
            Pass::Compute => {
                out.extend(self.heap_sort(&list, &cnt));
                // The row's entries start where the count pass put them: rows need not run
                // in order.
                out.push(assign("out.q", load(&pos, row_index(self.a, self.plan))));
                out.push(Stmt::For {
                    var: t.clone(),
                    start: Expr::i64(0),
                    end: i64v(&cnt),
                    kind: ForKind::Serial,
                    body: vec![
                        let_(&c, load(&list, i64v(&t))),
                        store(&format!("{o}.crd"), i64v("out.q"), i64v(&c)),
                        store(&vals_name(&o), i64v("out.q"), load(&w, i64v(&c))),
                        store(&flag, i64v(&c), Expr::i64(0)),
                        assign("out.q", Expr::add(i64v("out.q"), Expr::i64(1))),
                    ],
                });
            }
        }
        Ok(out)
    }

    /// Sorts `buf[0..n)` ascending in place (heap sort: no allocation, O(n log n)).
    fn heap_sort(&mut self, buf: &str, n: &str) -> Vec<Stmt> {
        let start = self.fresh("hs.start");
        let end = self.fresh("hs.end");
        let mut out = vec![decl(&start, Expr::bin(BinOp::Div, i64v(n), Expr::i64(2)))];
        let sift1 = self.sift_down(buf, i64v(&start), i64v(n));
        let mut b1 = vec![assign(&start, Expr::sub(i64v(&start), Expr::i64(1)))];
        b1.extend(sift1);
        out.push(Stmt::While {
            cond: cmp(BinOp::Gt, i64v(&start), Expr::i64(0)),
            body: b1,
        });
        out.push(decl(&end, i64v(n)));
        let tmp = self.fresh("hs.tmp");
        let mut b2 = vec![
            assign(&end, Expr::sub(i64v(&end), Expr::i64(1))),
            let_(&tmp, load(buf, Expr::i64(0))),
            store(buf, Expr::i64(0), load(buf, i64v(&end))),
            store(buf, i64v(&end), i64v(&tmp)),
        ];
        b2.extend(self.sift_down(buf, Expr::i64(0), i64v(&end)));
        out.push(Stmt::While {
            cond: cmp(BinOp::Gt, i64v(&end), Expr::i64(1)),
            body: b2,
        });
        out
    }

    fn sift_down(&mut self, buf: &str, start: Expr, end: Expr) -> Vec<Stmt> {
        let (root, go, child, sw, tmp) = (
            self.fresh("hs.root"),
            self.fresh("hs.go"),
            self.fresh("hs.child"),
            self.fresh("hs.sw"),
            self.fresh("hs.tmp"),
        );
        let at = |e: Expr| load(buf, e);
        vec![
            decl(&root, start),
            decl(&go, Expr::i64(1)),
            Stmt::While {
                cond: cmp(BinOp::Ne, i64v(&go), Expr::i64(0)),
                body: vec![
                    let_(
                        &child,
                        Expr::add(Expr::mul(Expr::i64(2), i64v(&root)), Expr::i64(1)),
                    ),
                    Stmt::If {
                        cond: cmp(BinOp::Ge, i64v(&child), end.clone()),
                        then_body: vec![assign(&go, Expr::i64(0))],
                        else_body: vec![
                            decl(&sw, i64v(&root)),
                            Stmt::If {
                                cond: cmp(BinOp::Lt, at(i64v(&sw)), at(i64v(&child))),
                                then_body: vec![assign(&sw, i64v(&child))],
                                else_body: vec![],
                            },
                            Stmt::If {
                                cond: Expr::bin(
                                    BinOp::And,
                                    cmp(
                                        BinOp::Lt,
                                        Expr::add(i64v(&child), Expr::i64(1)),
                                        end.clone(),
                                    ),
                                    cmp(
                                        BinOp::Lt,
                                        at(i64v(&sw)),
                                        at(Expr::add(i64v(&child), Expr::i64(1))),
                                    ),
                                ),
                                then_body: vec![assign(&sw, Expr::add(i64v(&child), Expr::i64(1)))],
                                else_body: vec![],
                            },
                            Stmt::If {
                                cond: cmp(BinOp::Eq, i64v(&sw), i64v(&root)),
                                then_body: vec![assign(&go, Expr::i64(0))],
                                else_body: vec![
                                    let_(&tmp, at(i64v(&root))),
                                    store(buf, i64v(&root), at(i64v(&sw))),
                                    store(buf, i64v(&sw), i64v(&tmp)),
                                    assign(&root, i64v(&sw)),
                                ],
                            },
                        ],
                    },
                ],
            },
        ]
    }

    /// The presence condition (`None`: always present) and value of `e` at the current point,
    /// where every operand left in `e` is stored: semiring operations take their `overlap` and
    /// `present` regions, `select(a, pred)` is present where `pred` holds, and `+`/`-` are
    /// present where either side is.
    fn eval(&self, e: &TExpr, want: DType) -> Result<(Option<Expr>, Expr), CoiterError> {
        let and = |a: Option<Expr>, b: Option<Expr>| match (a, b) {
            (None, x) | (x, None) => x,
            (Some(x), Some(y)) => Some(Expr::bin(BinOp::And, x, y)),
        };
        let truth = |c: &Option<Expr>| c.clone().unwrap_or(Expr::Bool(true));
        Ok(match e {
            TExpr::SBinary(a, b, r) => {
                let (ta, tb) = (natural(self.a, a), natural(self.a, b));
                let (ca, va) = self.eval(a, ta)?;
                let (cb, vb) = self.eval(b, tb)?;
                match &r[0] {
                    TRegion::Expr(f) => (and(ca, cb), self.value(f, want, &[(va, ta), (vb, tb)])?),
                    _ => (Some(Expr::Bool(false)), zero(want)),
                }
            }
            TExpr::SUnary(a, r) => {
                let ta = natural(self.a, a);
                let (ca, va) = self.eval(a, ta)?;
                match &r[0] {
                    TRegion::Expr(f) => (ca, self.value(f, want, &[(va, ta)])?),
                    TRegion::Identity => (ca, cast_to(va, ta, want)),
                    TRegion::Empty => (Some(Expr::Bool(false)), zero(want)),
                }
            }
            TExpr::SSelect(a, pred) => {
                let ta = natural(self.a, a);
                let (ca, va) = self.eval(a, ta)?;
                let p = self.value(pred, DType::Bool, &[(va.clone(), ta)])?;
                (and(ca, Some(p)), cast_to(va, ta, want))
            }
            TExpr::Binary(op, a, b) if !(op.is_comparison() || op.is_logical()) => {
                let (ca, va) = self.eval(a, want)?;
                let (cb, vb) = self.eval(b, want)?;
                if lattice::is_union(*op) && (ca.is_some() || cb.is_some()) {
                    let only_b = if *op == BinOp::Sub {
                        Expr::Unary(UnOp::Neg, Box::new(vb.clone()))
                    } else {
                        vb.clone()
                    };
                    let both = Expr::bin(*op, va.clone(), vb);
                    let value = Expr::Select(
                        Box::new(Expr::bin(BinOp::And, truth(&ca), truth(&cb))),
                        Box::new(both),
                        Box::new(Expr::Select(
                            Box::new(truth(&ca)),
                            Box::new(va),
                            Box::new(only_b),
                        )),
                    );
                    (Some(Expr::bin(BinOp::Or, truth(&ca), truth(&cb))), value)
                } else {
                    (and(ca, cb), Expr::bin(*op, va, vb))
                }
            }
            TExpr::Unary(op, a) => {
                let (c, v) = self.eval(a, want)?;
                (c, Expr::Unary(*op, Box::new(v)))
            }
            TExpr::Cast(t, a) => {
                let ta = natural(self.a, a);
                let (c, v) = self.eval(a, ta)?;
                (c, cast_to(Expr::Cast(*t, Box::new(v)), *t, want))
            }
            other => (None, self.value(other, want, &[])?),
        })
    }

    /// The value of `e` at the current point, of type `want`; `Arg(k)` is `args[k]`.
    fn value(&self, e: &TExpr, want: DType, args: &[(Expr, DType)]) -> Result<Expr, CoiterError> {
        let arg_types: Vec<DType> = args.iter().map(|a| a.1).collect();
        let nat = |x: &TExpr| natural_in(self.a, x, &arg_types);
        Ok(match e {
            TExpr::Access(t) => {
                let tensor = &self.a.tensors[*t];
                let load_e = match &self.plan.levels[*t] {
                    None => {
                        let mut idx = Expr::i64(0);
                        for (d, &v) in tensor.vars.iter().enumerate() {
                            idx = Expr::add(
                                Expr::mul(idx, size_expr(&tensor.extents[d])),
                                i64v(&self.a.vars[v].name),
                            );
                        }
                        load(&tensor.name, idx)
                    }
                    Some(_) => match &self.handles[*t] {
                        Some(Handle::Single(q)) => load(&vals_name(&tensor.name), q.clone()),
                        _ => {
                            return Err(CoiterError::Unsupported {
                                what: format!(
                                    "`{}`: the innermost level is non-unique (duplicate entries)",
                                    tensor.name
                                ),
                            })
                        }
                    },
                };
                cast_to(load_e, tensor.dtype, want)
            }
            TExpr::Arg(k) => {
                let (v, t) = args
                    .get(*k)
                    .cloned()
                    .ok_or_else(|| CoiterError::Unsupported {
                        what: "a region argument outside its region".into(),
                    })?;
                cast_to(v, t, want)
            }
            TExpr::Float(v) => {
                if want.is_float() {
                    Expr::Float(*v, want)
                } else {
                    Expr::Int(*v as i64, want)
                }
            }
            TExpr::Int(v) => {
                if want.is_float() {
                    Expr::Float(*v as f64, want)
                } else if want == DType::Bool {
                    Expr::Bool(*v != 0)
                } else {
                    Expr::Int(*v, want)
                }
            }
            TExpr::Coord(v) => cast_to(i64v(&self.a.vars[*v].name), DType::I64, want),
            TExpr::Unary(op, a) => {
                if *op == UnOp::Not {
                    Expr::Unary(*op, Box::new(self.value(a, DType::Bool, args)?))
                } else {
                    Expr::Unary(*op, Box::new(self.value(a, want, args)?))
                }
            }
            TExpr::Cast(t, a) => {
                let inner = self.value(a, nat(a), args)?;
                cast_to(Expr::Cast(*t, Box::new(inner)), *t, want)
            }
            TExpr::Cond(c, a, b) => Expr::Select(
                Box::new(self.value(c, DType::Bool, args)?),
                Box::new(self.value(a, want, args)?),
                Box::new(self.value(b, want, args)?),
            ),
            TExpr::Binary(op, a, b) if op.is_comparison() || op.is_logical() => {
                let ta = if op.is_logical() {
                    DType::Bool
                } else {
                    match (&**a, &**b) {
                        (TExpr::Float(_) | TExpr::Int(_), other) => nat(other),
                        (x, _) => nat(x),
                    }
                };
                let x = Expr::bin(*op, self.value(a, ta, args)?, self.value(b, ta, args)?);
                cast_to(x, DType::Bool, want)
            }
            TExpr::Binary(op, a, b) => {
                Expr::bin(*op, self.value(a, want, args)?, self.value(b, want, args)?)
            }
            TExpr::SBinary(..) | TExpr::SUnary(..) | TExpr::SSelect(..) => {
                return Err(CoiterError::Unsupported {
                    what: "a semiring operation inside a region".into(),
                })
            }
        })
    }
}

fn cast_to(x: Expr, from: DType, to: DType) -> Expr {
    if from == to {
        x
    } else {
        Expr::Cast(to, Box::new(x))
    }
}

/// The type an expression has by itself.
pub(crate) fn natural(a: &Assignment, e: &TExpr) -> DType {
    natural_in(a, e, &[])
}

/// The type of `e` by itself, region arguments typed by `args`.
pub(crate) fn natural_in(a: &Assignment, e: &TExpr, args: &[DType]) -> DType {
    let n = |x: &TExpr| natural_in(a, x, args);
    match e {
        TExpr::Access(t) => a.tensors[*t].dtype,
        TExpr::Float(_) => DType::F64,
        TExpr::Int(_) | TExpr::Coord(_) => DType::I64,
        TExpr::Arg(k) => args.get(*k).copied().unwrap_or(DType::F64),
        TExpr::Unary(UnOp::Not, _) => DType::Bool,
        TExpr::Unary(_, x) | TExpr::SSelect(x, _) => n(x),
        TExpr::Cast(t, _) => *t,
        TExpr::Cond(_, x, y) => {
            if matches!(x.as_ref(), TExpr::Float(_) | TExpr::Int(_)) {
                n(y)
            } else {
                n(x)
            }
        }
        TExpr::Binary(op, x, y) => {
            if op.is_comparison() || op.is_logical() {
                DType::Bool
            } else if matches!(x.as_ref(), TExpr::Float(_) | TExpr::Int(_)) {
                n(y)
            } else {
                n(x)
            }
        }
        TExpr::SBinary(x, y, r) => match (&r[0], &r[1], &r[2]) {
            (TRegion::Expr(f), _, _) => natural_in(a, f, &[n(x), n(y)]),
            (_, TRegion::Expr(f), _) => natural_in(a, f, &[n(x)]),
            (_, TRegion::Identity, _) => n(x),
            (_, _, TRegion::Expr(f)) => natural_in(a, f, &[n(x), n(y)]),
            _ => n(y),
        },
        TExpr::SUnary(x, r) => match (&r[0], &r[1]) {
            (TRegion::Expr(f), _) => natural_in(a, f, &[n(x)]),
            (_, TRegion::Expr(f)) => n(f),
            _ => n(x),
        },
    }
}

fn zero(t: DType) -> Expr {
    if t.is_float() {
        Expr::Float(0.0, t)
    } else {
        Expr::Int(0, t)
    }
}
