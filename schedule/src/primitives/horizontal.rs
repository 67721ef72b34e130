//! Stage-II post pass `horizontal_fuse(loops)`: SparseTIR's horizontal fusion of per-part
//! kernels. After `decompose_format`, each part of a format (an ELL bucket, the remainder) is
//! computed by its own loop nest; horizontal fusion makes consecutive sibling loops one loop over
//! the concatenation of their ranges, dispatching on the part:
//!
//! ```text
//! for a in s0..e0 { A }  for b in s1..e1 { B }
//! ```
//! becomes
//! ```text
//! for a_hfused in 0..(e0 - s0) + (e1 - s1) {
//!   if a_hfused < e0 - s0 { let a = s0 + a_hfused; A } else { let b = s1 + (a_hfused - (e0 - s0)); B }
//! }
//! ```
//! The iterations run in the original order, so the fusion is always legal; the fused loop is
//! serial, and `parallel`/`bind` on it check independence across the parts (one launch for all
//! parts on a GPU, as SparseTIR's per-bucket kernels become one).

use super::decompose_format::{part_name, Conversion, PartKind};
use super::tree::{list_at, loop_path, parent_list_mut};
use crate::decompose::Layout;
use crate::error::Condition;
use crate::loops::find;
use lacuna_stage1::BinOp;
use lacuna_stage2::passes::simplify;
use lacuna_stage2::{Expr, ForKind, Stmt};
use std::collections::{BTreeMap, BTreeSet};

/// `horizontal_fuse(loops)`: requires at least two loops, consecutive statements of one list.
pub fn horizontal_fuse(mut body: Vec<Stmt>, names: &[String]) -> Result<Vec<Stmt>, Condition> {
    if names.len() < 2 {
        return Err(Condition::BadArgument {
            what: format!(
                "horizontal_fuse needs at least two loops, got {}",
                names.len()
            ),
        });
    }
    let paths: Vec<_> = names
        .iter()
        .map(|n| find(&body, n).map(|i| loop_path(&body, i)))
        .collect::<Result<_, _>>()?;
    let prefix = &paths[0][..paths[0].len() - 1];
    let first = paths[0][paths[0].len() - 1].0;
    let consecutive = paths.iter().enumerate().all(|(t, p)| {
        p.len() == paths[0].len() && &p[..p.len() - 1] == prefix && p[p.len() - 1].0 == first + t
    });
    if !consecutive {
        return Err(Condition::BadArgument {
            what: format!("loops {names:?} are not consecutive statements of one statement list"),
        });
    }
    let list = list_at(&body, prefix);
    let mut parts = Vec::new();
    for s in &list[first..first + names.len()] {
        let Stmt::For {
            var,
            start,
            end,
            body,
            ..
        } = s
        else {
            unreachable!("loop paths")
        };
        parts.push((var.clone(), start.clone(), end.clone(), body.clone()));
    }
    let fv = format!("{}_hfused", parts[0].0);
    if parts.iter().any(|p| p.0 == fv) {
        return Err(Condition::BadArgument {
            what: format!("a loop is named `{fv}` already"),
        });
    }
    let extent = |p: &(String, Expr, Expr, Vec<Stmt>)| Expr::sub(p.2.clone(), p.1.clone());
    // offsets[t] = sum of the extents of the parts before t.
    let mut offsets = vec![Expr::i64(0)];
    for p in &parts {
        let last = offsets.last().expect("non-empty").clone();
        offsets.push(simplify::expr(Expr::add(last, extent(p))));
    }
    let total = offsets.pop().expect("non-empty");
    let part_body = |t: usize| -> Vec<Stmt> {
        let (var, start, _, b) = &parts[t];
        let mut v = vec![Stmt::Let {
            var: var.clone(),
            value: simplify::expr(Expr::add(
                start.clone(),
                Expr::sub(Expr::var(&fv), offsets[t].clone()),
            )),
        }];
        v.extend(b.iter().cloned());
        v
    };
    let last = parts.len() - 1;
    let mut dispatch = part_body(last);
    for t in (0..last).rev() {
        dispatch = vec![Stmt::If {
            cond: Expr::bin(BinOp::Lt, Expr::var(&fv), offsets[t + 1].clone()),
            then_body: part_body(t),
            else_body: dispatch,
        }];
    }
    let fused = Stmt::For {
        var: fv,
        start: Expr::i64(0),
        end: total,
        kind: ForKind::Serial,
        body: dispatch,
    };
    let list = parent_list_mut(&mut body, &paths[0]);
    list.splice(first..first + names.len(), [fused]);
    Ok(body)
}

/// What the format conversions guarantee about the rows the parts of a decomposed buffer
/// write: the basis for running a fused dispatch loop in parallel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowFacts {
    /// Row-id arrays (`A.pK.row`) of ELL, sliced ELL and `rcm` parts whose rows are distinct within the part and
    /// written by no other part of the same decomposition, with that decomposed buffer.
    pub row_arrays: BTreeMap<String, String>,
    /// CSR parts (`A.pK`, iterated by the matrix row) whose non-empty rows no other part of the
    /// same decomposition holds, with that decomposed buffer.
    pub csr_parts: BTreeMap<String, String>,
}

impl RowFacts {
    /// The facts of the schedule's conversions. A part is *exclusive* when every row it holds
    /// is whole and no earlier part holds part of it: `(bucket lo hi (ell w))` with `w ≥ hi - 1`
    /// (the whole row fits, one ELL row per matrix row), or the CSR `remainder`/`csr` after only
    /// such buckets. `split_rows` repeats a row (its chunks), `ell` alone leaves the rest of long
    /// rows to later parts; those and the other layouts are never exclusive.
    pub fn of(conversions: &[Conversion]) -> RowFacts {
        let mut facts = RowFacts::default();
        for c in conversions {
            let mut whole = Vec::new();
            if !flags(c.decomposition.layout(), &mut whole) || whole.len() != c.parts.len() {
                continue;
            }
            for (t, kind) in c.parts.iter().enumerate() {
                if !whole[..=t].iter().all(|w| *w) {
                    break;
                }
                let part = part_name(&c.buffer, t);
                match kind {
                    PartKind::Ell | PartKind::Sell { .. } | PartKind::Rows { .. } => {
                        facts
                            .row_arrays
                            .insert(format!("{part}.row"), c.buffer.clone());
                    }
                    PartKind::Csr => {
                        facts.csr_parts.insert(part, c.buffer.clone());
                    }
                    _ => {}
                }
            }
        }
        facts
    }
}

/// Pushes, per part of `l` in materialization order, whether it holds whole, distinct rows;
/// false when `l` has a layout this analysis does not follow (nothing is then exclusive).
fn flags(l: &Layout, out: &mut Vec<bool>) -> bool {
    match l {
        Layout::Sum(a, b) => flags(a, out) && flags(b, out),
        Layout::Bucket { hi, inner, .. } => match **inner {
            Layout::Ell { width } => {
                out.push(u64::from(width) + 1 >= u64::from(*hi));
                true
            }
            // Whole rows, each in one group (a lane past the last row repeats its group's
            // first row: the same group).
            Layout::Sell { .. } => {
                out.push(true);
                true
            }
            _ => false,
        },
        // `rcm`: every row once (its row ids are checked to be a permutation when bound).
        Layout::Csr | Layout::Remainder | Layout::Sell { .. } | Layout::Rcm => {
            out.push(true);
            true
        }
        Layout::SplitRows { .. } | Layout::Ell { .. } => {
            out.push(false);
            true
        }
        _ => false,
    }
}

/// Checks that the iterations of the fused dispatch loop `name` (made by [`horizontal_fuse`])
/// are independent, so that it may run in parallel or be bound to `blockIdx`: in every part,
/// every written buffer is accessed at one index list whose first index is the part's row —
/// a row id `A.pK.row[i]` of an exclusive part (see [`RowFacts`]), or the matrix row of an
/// exclusive CSR part inside the loop over its stored entries — and all parts writing a buffer
/// come from one decomposition (whose exclusive parts hold disjoint rows). Atomic updates are
/// independent too. Anything else is an error naming the buffer and the part.
pub fn check_parallel(body: &[Stmt], name: &str, facts: &RowFacts) -> Result<(), Condition> {
    let index = find(body, name)?;
    let Some(Stmt::For {
        var: fv,
        body: fused,
        ..
    }) = crate::loops::get(body, index)
    else {
        unreachable!("find returns loops")
    };
    // The parts: the dispatch chain `if fv < o1 { let v0 = ..; P0 } else { if .. }`.
    let mut parts: Vec<(String, &[Stmt])> = Vec::new();
    let mut rest: &[Stmt] = fused;
    loop {
        match rest {
            [Stmt::If {
                cond,
                then_body,
                else_body,
            }] if cond.reads_var(&|v| v == fv) => {
                parts.push(part_of(then_body).ok_or_else(|| not_fused(name))?);
                rest = else_body;
            }
            _ => {
                parts.push(part_of(rest).ok_or_else(|| not_fused(name))?);
                break;
            }
        }
    }
    // buffer -> the decomposition that writes it
    let mut writer: BTreeMap<String, String> = BTreeMap::new();
    for (v, stmts) in &parts {
        check_part(name, v, stmts, facts, &mut writer)?;
    }
    Ok(())
}

/// Checks that the iterations of a plain loop `name` (not a fused dispatch loop) write
/// disjoint rows of a decomposition, as [`check_parallel`] checks one part: every written
/// buffer is accessed at one index list whose first index is a row of an exclusive part, found
/// through the row-id array at an index that varies with the loop (e.g. the rows of an ELL
/// bucket split into groups, `let i = i.0 * 4 + i.1`, for binding `i.1` to `threadIdx.y`).
pub fn check_rows(body: &[Stmt], name: &str, facts: &RowFacts) -> Result<(), Condition> {
    let index = find(body, name)?;
    let Some(Stmt::For { var, body: b, .. }) = crate::loops::get(body, index) else {
        unreachable!("find returns loops")
    };
    check_part(name, var, b, facts, &mut BTreeMap::new())
}

/// Checks one part `stmts` (iterated by `v`) of loop `name`: see [`check_parallel`]; `writer`
/// collects the decomposition that writes each buffer.
fn check_part(
    name: &str,
    v: &str,
    stmts: &[Stmt],
    facts: &RowFacts,
    writer: &mut BTreeMap<String, String>,
) -> Result<(), Condition> {
    let carried = |buffer: &str, why: String| Condition::BadArgument {
        what: format!("loop `{name}` carries a dependence through `{buffer}`: {why}"),
    };
    let mut acc = Vec::new();
    crate::loops::accesses(stmts, &mut acc);
    let mut atomic = Vec::new();
    crate::loops::atomic_buffers(stmts, &mut atomic);
    let written: BTreeSet<&String> = acc.iter().filter(|a| a.2).map(|a| &a.0).collect();
    let private = allocated(stmts);
    for buffer in written {
        // Scratch allocated inside the iteration is its own.
        if atomic.contains(buffer) || private.contains(buffer) {
            continue;
        }
        let lists: Vec<&Vec<Expr>> = acc
            .iter()
            .filter(|a| &a.0 == buffer)
            .map(|a| &a.1)
            .collect();
        // Several index lists are disjoint between iterations too when each starts at the row
        // id `A.pK.row[v]` of one exclusive part (through its own `let`): each iteration then
        // touches its own row only (e.g. `rcm`'s init and sums, lowered apart).
        let same_row = || {
            let rows: Option<Vec<&String>> = lists
                .iter()
                .map(|l| l.first().and_then(|e| row_id_at(e, v, stmts)))
                .collect();
            rows.is_some_and(|r| {
                r.windows(2).all(|w| w[0] == w[1])
                    && r.first().is_some_and(|b| facts.row_arrays.contains_key(*b))
            })
        };
        if !lists.windows(2).all(|w| w[0] == w[1]) && !same_row() {
            return Err(carried(
                buffer,
                format!("part `{v}` accesses it at several index lists"),
            ));
        }
        let Some(first) = lists[0].first() else {
            return Err(carried(buffer, "a scalar written by every part".into()));
        };
        let Some(decomposed) = row_of(first, v, stmts, facts) else {
            return Err(carried(
                buffer,
                format!(
                    "part `{v}` writes it at `{first}`, not at the row of an exclusive part: rows may repeat (split_rows, ell): annotate the loop `atomic` first, or use whole-row buckets"
                ),
            ));
        };
        if let Some(other) = writer.insert(buffer.clone(), decomposed.clone()) {
            if other != decomposed {
                return Err(carried(
                    buffer,
                    format!("parts of `{other}` and `{decomposed}` both write it"),
                ));
            }
        }
    }
    // Loop-carried scalars are never independent.
    if let Some(v) = stmts.iter().find_map(|s| match s {
        Stmt::Assign { var, .. } => Some(var.clone()),
        _ => None,
    }) {
        return Err(carried(&v, "a variable assigned by every iteration".into()));
    }
    Ok(())
}

/// The scratch buffers `stmts` allocate (at any depth).
fn allocated(stmts: &[Stmt]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for s in stmts {
        if let Stmt::Alloc { buffer, .. } = s {
            out.insert(buffer.clone());
        }
        for b in s.bodies() {
            out.extend(allocated(b));
        }
    }
    out
}

fn not_fused(name: &str) -> Condition {
    Condition::BadArgument {
        what: format!("loop `{name}` is not a dispatch loop made by horizontal_fuse"),
    }
}

/// A part of the dispatch: its variable (bound by the leading `let`) and its statements.
fn part_of(stmts: &[Stmt]) -> Option<(String, &[Stmt])> {
    match stmts.first() {
        Some(Stmt::Let { var, .. }) => Some((var.clone(), &stmts[1..])),
        _ => None,
    }
}

/// The decomposed buffer whose exclusive part gives `e` as the row of part variable `v`, if
/// any.
fn row_of(e: &Expr, v: &str, stmts: &[Stmt], facts: &RowFacts) -> Option<String> {
    let Expr::Var(x) = e else { return None };
    if x == v {
        // The matrix row of an exclusive CSR part, written only under the loop over its stored
        // entries (an empty row writes nothing).
        return csr_part(stmts, v, facts);
    }
    // The row-id array at `v`, or at a variable that takes a distinct value in each iteration
    // of `v` (e.g. `let i = i.0 * 4 + i.1` under `for i.1`); a sliced ELL part's rows
    // `A.pK.row[g, l]` at the group `g = v` (groups hold disjoint rows).
    let (buffer, indices) = let_load(x, stmts)?;
    match indices {
        [Expr::Var(w)] if w == v || crate::primitives::loop_kind::varying(v, stmts).contains(w) => {
            facts.row_arrays.get(buffer).cloned()
        }
        [Expr::Var(g), _] if g == v => facts.row_arrays.get(buffer).cloned(),
        _ => None,
    }
}

/// The row-id array `R` when `e` is a variable bound to `R[v]` (see [`let_load`]), at the part
/// variable `v` itself.
fn row_id_at<'a>(e: &Expr, v: &str, stmts: &'a [Stmt]) -> Option<&'a String> {
    let Expr::Var(x) = e else { return None };
    match let_load(x, stmts)? {
        (buffer, [Expr::Var(w)]) if w == v => Some(buffer),
        _ => None,
    }
}

/// The buffer and indices of the load that `let x = B[..]` or `let x = select(c, B[..], -1)`
/// (then guarded by `x >= 0`) binds `x` to.
fn let_load<'a>(x: &str, stmts: &'a [Stmt]) -> Option<(&'a String, &'a [Expr])> {
    let load = match find_let(stmts, x)? {
        Expr::Select(_, a, b) if matches!(**b, Expr::Int(-1, _)) => a.as_ref(),
        other => other,
    };
    match load {
        Expr::Load { buffer, indices } => Some((buffer, indices.as_slice())),
        _ => None,
    }
}

fn find_let<'a>(stmts: &'a [Stmt], x: &str) -> Option<&'a Expr> {
    for s in stmts {
        if let Stmt::Let { var, value } = s {
            if var == x {
                return Some(value);
            }
        }
        for b in s.bodies() {
            if let Some(v) = find_let(b, x) {
                return Some(v);
            }
        }
    }
    None
}

/// The decomposition of the exclusive CSR part that `stmts` compute, when all their writes lie
/// under `for j in P.s.indptr[v]..P.s.indptr[v + 1]` for an exclusive CSR part `P`.
fn csr_part(stmts: &[Stmt], v: &str, facts: &RowFacts) -> Option<String> {
    let mut found: Option<String> = None;
    for s in stmts {
        match s {
            Stmt::For { start, body, .. } => {
                let part = match start {
                    Expr::Load { buffer, indices } if indices == &[Expr::var(v)] => buffer
                        .strip_suffix(".s.indptr")
                        .and_then(|p| facts.csr_parts.get(p)),
                    _ => None,
                };
                match part {
                    Some(d) => found = Some(d.clone()),
                    None => {
                        let mut acc = Vec::new();
                        crate::loops::accesses(body, &mut acc);
                        if acc.iter().any(|a| a.2) {
                            return None;
                        }
                    }
                }
            }
            Stmt::Store { .. } | Stmt::Atomic { .. } => return None,
            other => {
                let mut acc = Vec::new();
                crate::loops::accesses(std::slice::from_ref(other), &mut acc);
                if acc.iter().any(|a| a.2) {
                    return None;
                }
            }
        }
    }
    found
}
