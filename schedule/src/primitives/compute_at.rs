//! Stage-II primitives that move a loop nest under another loop: `compute_at`,
//! `reverse_compute_at` (TVM's), and `decompose_reduction`.
//!
//! Blocks of a stage-II function access buffers with loop variables directly, so the region a
//! nest produces or consumes per iteration of a loop is read off the index lists: a nest that
//! writes `mx[i]` inside `for i` produces the slice `mx[i]` in iteration `i`. The primitives
//! here move whole nests and match loops one to one (same range), so that "the region needed"
//! is exactly one slice per iteration of the target loops:
//!
//! - `compute_at(block, loop)`: the producer nest holding `block` (the statement holding it in
//!   the statement list that also holds, later, the nest of `loop`; it moves with every block it
//!   holds) loses its outer loops, which are matched to
//!   the loops from the consumer nest's root down to `loop` (same ranges), and its remaining
//!   body is placed at the start of `loop`'s body. Legal when every buffer the producer writes
//!   is written at the slice of its matched loops (one index is exactly the loop variable),
//!   the consumer reads those buffers only inside `loop`, at the same slice, and neither the
//!   consumer nor the statements between touch what the producer reads or writes (so the
//!   producer's iterations see the same values, in the same order, interleaved with the
//!   consumer's).
//! - `reverse_compute_at(block, loop)`: the mirror image — the consumer nest holding `block`
//!   (after the producer nest holding `loop`) is placed at the end of `loop`'s body.
//! - `decompose_reduction(block, loop)`: lowering already runs a reduction block's init
//!   (`BLOCK_init`) just before its first reduction loop; this moves the init out of `loop`
//!   (which encloses it) into its own copy of the loops from `loop` down to it, placed before
//!   `loop` (TVM's decompose_reduction, with the init's position chosen by `loop`).

use super::tree::{
    all_vars, along, block_names, block_path, defined_vars, get, get_mut, list_at, loop_path,
    parent_list_mut, peel, rename, rename_expr, slot_mut, Path, Slot, Summary,
};
use crate::error::Condition;
use crate::loops::find;
use lacuna_stage2::passes::simplify;
use lacuna_stage2::{Expr, ForKind, Stmt};
use std::collections::BTreeSet;

fn bad(what: String) -> Condition {
    Condition::BadArgument { what }
}

/// Where two paths part: the depth `k` of the statement list holding both roots, and the
/// positions of the roots in it (block's, loop's).
fn split_point(
    bp: &Path,
    tp: &Path,
    block: &str,
    name: &str,
) -> Result<(usize, usize, usize), Condition> {
    let mut k = 0;
    while k + 1 < bp.len() && k + 1 < tp.len() && bp[k] == tp[k] {
        k += 1;
    }
    if bp[k].0 == tp[k].0 {
        return Err(bad(format!(
            "block `{block}` and loop `{name}` are in one loop nest; the block must be in a nest of its own, before or after the nest of the loop"
        )));
    }
    Ok((k, bp[k].0, tp[k].0))
}

/// The loops from a nest's root down to the target loop: (var, start, end, kind).
fn target_loops(
    stmts: &[&Stmt],
    name: &str,
) -> Result<Vec<(String, Expr, Expr, ForKind)>, Condition> {
    let mut out = Vec::new();
    for s in stmts {
        match s {
            Stmt::For {
                var,
                start,
                end,
                kind,
                ..
            } => out.push((var.clone(), start.clone(), end.clone(), *kind)),
            Stmt::Block { .. } => {}
            _ => {
                return Err(bad(format!(
                    "loop `{name}` is under a conditional or while loop; only loops and blocks may enclose it"
                )))
            }
        }
    }
    Ok(out)
}

/// Peels as many loops off `nest` as there are targets and matches their ranges; returns the
/// renaming (nest variable to target variable) and the remaining body.
#[allow(clippy::type_complexity)]
fn match_loops(
    nest: &Stmt,
    block: &str,
    targets: &[(String, Expr, Expr, ForKind)],
) -> Result<(Vec<(String, String)>, Vec<Stmt>), Condition> {
    let (headers, rest) = peel(nest.clone(), targets.len()).ok_or_else(|| {
        bad(format!(
            "the nest of block `{block}` does not have {} perfectly nested loops to match the loops {:?}",
            targets.len(),
            targets.iter().map(|t| t.0.as_str()).collect::<Vec<_>>()
        ))
    })?;
    let mut map: Vec<(String, String)> = Vec::new();
    for ((lv, ls, le), (tv, ts, te, _)) in headers.iter().zip(targets) {
        let same = |a: &Expr, b: &Expr| {
            simplify::expr(rename_expr(a.clone(), &map)) == simplify::expr(b.clone())
        };
        if !same(ls, ts) || !same(le, te) {
            return Err(bad(format!(
                "loop `{lv}` of block `{block}` and loop `{tv}` iterate different ranges"
            )));
        }
        map.push((lv.clone(), tv.clone()));
    }
    Ok((map, rest))
}

/// For each variable, the index position that holds exactly that variable in every list.
fn slice_positions(lists: &[&Vec<Expr>], vars: &[String]) -> Option<Vec<usize>> {
    let first = lists.first()?;
    vars.iter()
        .map(|v| {
            (0..first.len()).find(|&d| {
                lists
                    .iter()
                    .all(|l| matches!(l.get(d), Some(Expr::Var(x)) if x == v))
            })
        })
        .collect()
}

fn at_slice(list: &[Expr], positions: &[usize], vars: &[String]) -> bool {
    positions
        .iter()
        .zip(vars)
        .all(|(&d, v)| matches!(list.get(d), Some(Expr::Var(x)) if x == v))
}

fn conflict(block: &str, buffer: &str, what: &str) -> Condition {
    Condition::Conflict {
        block: block.to_string(),
        buffer: buffer.to_string(),
        what: what.to_string(),
    }
}

fn var_clash(
    moved: &[Stmt],
    host: &Stmt,
    targets: &[(String, Expr, Expr, ForKind)],
    block: &str,
) -> Result<(), Condition> {
    let mut used = all_vars(std::slice::from_ref(host));
    used.extend(targets.iter().map(|t| t.0.clone()));
    if let Some(v) = defined_vars(moved).intersection(&used).next() {
        return Err(bad(format!(
            "variable `{v}` of the nest of block `{block}` is also used where it would move"
        )));
    }
    Ok(())
}

/// The loop body of the loop at `path`.
fn loop_body<'a>(body: &'a [Stmt], path: &Path) -> &'a [Stmt] {
    match get(body, path) {
        Stmt::For { body, .. } => body,
        _ => unreachable!("a loop path"),
    }
}

/// `compute_at(block, loop)`: see the module documentation.
pub fn compute_at(mut body: Vec<Stmt>, block: &str, name: &str) -> Result<Vec<Stmt>, Condition> {
    let bp = block_path(&body, block)?;
    let tp = loop_path(&body, find(&body, name)?);
    let (k, a, c) = split_point(&bp, &tp, block, name)?;
    if a > c {
        return Err(bad(format!(
            "block `{block}` comes after loop `{name}`: compute_at moves a producer under a later consumer's loop (use reverse_compute_at)"
        )));
    }
    let list = list_at(&body, &bp[..k]);
    let (producer, consumer) = (&list[a], &list[c]);
    let targets = target_loops(&along(&body, &tp)[k..], name)?;
    let (map, rest) = match_loops(producer, block, &targets)?;
    let ps = Summary::of(std::slice::from_ref(producer));
    let (written, read) = (ps.written(), ps.read());
    for s in &list[a + 1..c] {
        let ss = Summary::of(std::slice::from_ref(s));
        if let Some(b) = ss.touched().intersection(&written).next() {
            return Err(conflict(block, b, "a statement between it and the loop"));
        }
        if let Some(b) = ss.written().intersection(&read).next() {
            return Err(conflict(block, b, "a statement between it and the loop"));
        }
    }
    let cs = Summary::of(std::slice::from_ref(consumer));
    let both: BTreeSet<String> = written.union(&read).cloned().collect();
    if let Some(b) = cs.written().intersection(&both).next() {
        return Err(conflict(block, b, &format!("the nest of loop `{name}`")));
    }
    let ts = Summary::of(loop_body(&body, &tp));
    let lvars: Vec<String> = map.iter().map(|m| m.0.clone()).collect();
    let tvars: Vec<String> = map.iter().map(|m| m.1.clone()).collect();
    let parallel = targets.iter().any(|t| t.3 != ForKind::Serial);
    for b in &written {
        if cs.lists(b, false).len() != ts.lists(b, false).len() {
            return Err(Condition::Region {
                buffer: b.clone(),
                what: format!("it is read outside loop `{name}`"),
            });
        }
        let d = slice_positions(&ps.lists(b, true), &lvars).ok_or_else(|| Condition::Region {
            buffer: b.clone(),
            what: format!("block `{block}` does not write it at the slice of loops {lvars:?} (an index that is exactly the loop variable)"),
        })?;
        if let Some(l) = ts.lists(b, false).iter().find(|l| !at_slice(l, &d, &tvars)) {
            return Err(Condition::Region {
                buffer: b.clone(),
                what: format!("it is read at {l:?}, not only at the slice of loops {tvars:?}"),
            });
        }
        if parallel && ps.lists(b, false).iter().any(|l| !at_slice(l, &d, &lvars)) {
            return Err(Condition::Region {
                buffer: b.clone(),
                what: "block reads it outside its slice, under a parallel loop".into(),
            });
        }
    }
    var_clash(&rest, consumer, &targets, block)?;
    let rest = rename(rest, &map);
    let t = get_mut(&mut body, &tp);
    slot_mut(t, Slot::Body).splice(0..0, rest);
    parent_list_mut(&mut body, &bp[..=k]).remove(a);
    Ok(body)
}

/// `reverse_compute_at(block, loop)`: see the module documentation.
pub fn reverse_compute_at(
    mut body: Vec<Stmt>,
    block: &str,
    name: &str,
) -> Result<Vec<Stmt>, Condition> {
    let bp = block_path(&body, block)?;
    let tp = loop_path(&body, find(&body, name)?);
    let (k, c, a) = split_point(&bp, &tp, block, name)?;
    if a > c {
        return Err(bad(format!(
            "block `{block}` comes before loop `{name}`: reverse_compute_at moves a consumer under an earlier producer's loop (use compute_at)"
        )));
    }
    let list = list_at(&body, &bp[..k]);
    let (producer, consumer) = (&list[a], &list[c]);
    let targets = target_loops(&along(&body, &tp)[k..], name)?;
    let (map, rest) = match_loops(consumer, block, &targets)?;
    let cs = Summary::of(std::slice::from_ref(consumer));
    let (written, read) = (cs.written(), cs.read());
    for s in &list[a + 1..c] {
        let ss = Summary::of(std::slice::from_ref(s));
        if let Some(b) = ss.touched().intersection(&written).next() {
            return Err(conflict(block, b, "a statement between the loop and it"));
        }
        if let Some(b) = ss.written().intersection(&read).next() {
            return Err(conflict(block, b, "a statement between the loop and it"));
        }
    }
    let ps = Summary::of(std::slice::from_ref(producer));
    if let Some(b) = ps.touched().intersection(&written).next() {
        return Err(conflict(block, b, &format!("the nest of loop `{name}`")));
    }
    let ts = Summary::of(loop_body(&body, &tp));
    let lvars: Vec<String> = map.iter().map(|m| m.0.clone()).collect();
    let tvars: Vec<String> = map.iter().map(|m| m.1.clone()).collect();
    for b in ps.written().intersection(&read) {
        if ps.lists(b, true).len() != ts.lists(b, true).len() {
            return Err(Condition::Region {
                buffer: b.clone(),
                what: format!("it is written outside loop `{name}`"),
            });
        }
        let d = slice_positions(&ts.lists(b, true), &tvars).ok_or_else(|| Condition::Region {
            buffer: b.clone(),
            what: format!(
                "loop `{name}` does not write it at the slice of loops {tvars:?} (an index that is exactly the loop variable)"
            ),
        })?;
        if let Some(l) = cs.lists(b, false).iter().find(|l| !at_slice(l, &d, &lvars)) {
            return Err(Condition::Region {
                buffer: b.clone(),
                what: format!(
                    "block `{block}` reads it at {l:?}, not only at the slice of loops {lvars:?}"
                ),
            });
        }
    }
    // Under a parallel loop, the moved iterations must write disjoint slices.
    for (s, t) in targets.iter().enumerate() {
        if t.3 == ForKind::Serial {
            continue;
        }
        for b in &written {
            let lists: Vec<&Vec<Expr>> = cs
                .accesses
                .iter()
                .filter(|x| &x.0 == b)
                .map(|x| &x.1)
                .collect();
            if slice_positions(&lists, &lvars[s..=s]).is_none() {
                return Err(Condition::CarriedDependence {
                    r#loop: t.0.clone(),
                    buffer: b.clone(),
                });
            }
        }
    }
    var_clash(&rest, producer, &targets, block)?;
    let rest = rename(rest, &map);
    parent_list_mut(&mut body, &bp[..=k]).remove(c);
    let t = get_mut(&mut body, &tp);
    slot_mut(t, Slot::Body).extend(rest);
    Ok(body)
}

/// `decompose_reduction(block, loop)`: see the module documentation.
pub fn decompose_reduction(
    mut body: Vec<Stmt>,
    block: &str,
    name: &str,
) -> Result<Vec<Stmt>, Condition> {
    let bp = block_path(&body, block)?;
    let init_name = format!("{block}_init");
    let ip = block_path(&body, &init_name).map_err(|_| {
        bad(format!(
            "block `{block}` has no init block `{init_name}` (it is not a reduction with an init)"
        ))
    })?;
    let tp = loop_path(&body, find(&body, name)?);
    let n = tp.len();
    let encloses = |p: &Path| p.len() > n && p[..n - 1] == tp[..n - 1] && p[n - 1].0 == tp[n - 1].0;
    if !encloses(&ip) || !encloses(&bp) {
        return Err(bad(format!(
            "loop `{name}` does not enclose both block `{block}` and its init `{init_name}`"
        )));
    }
    // The statements from inside the loop down to the init block; the moved unit is the
    // outermost of them that holds nothing but the init.
    let chain = along(&body, &ip)[n..].to_vec();
    let j = chain
        .iter()
        .position(|s| {
            block_names(std::slice::from_ref(*s)) == [init_name.clone()]
                && Summary::of(std::slice::from_ref(*s)).accesses.len()
                    == Summary::of(std::slice::from_ref(get(&body, &ip)))
                        .accesses
                        .len()
        })
        .expect("the init block itself qualifies");
    let unit = chain[j].clone();
    // Rebuild the enclosing structure: the loop's header, the loops and guards between, and
    // the `let`s that precede the path at each level.
    let mut nest = vec![unit];
    for level in (n..n + j).rev() {
        let s = get(&body, &ip[..=level]);
        let list = list_at(&body, &ip[..=level]);
        let lets = |upto: usize| -> Vec<Stmt> {
            list[..upto]
                .iter()
                .filter(|s| matches!(s, Stmt::Let { .. }))
                .cloned()
                .collect()
        };
        let mut inner = lets(ip[level + 1].0);
        inner.append(&mut nest);
        nest = vec![match (s, ip[level].1) {
            (
                Stmt::For {
                    var,
                    start,
                    end,
                    kind,
                    ..
                },
                _,
            ) => Stmt::For {
                var: var.clone(),
                start: start.clone(),
                end: end.clone(),
                kind: *kind,
                body: inner,
            },
            (Stmt::If { cond, .. }, Slot::Then) => Stmt::If {
                cond: cond.clone(),
                then_body: inner,
                else_body: vec![],
            },
            (Stmt::If { cond, .. }, _) => Stmt::If {
                cond: cond.clone(),
                then_body: vec![],
                else_body: inner,
            },
            _ => {
                return Err(bad(format!(
                    "the init `{init_name}` is inside a block or while loop under loop `{name}`"
                )))
            }
        }];
    }
    let Stmt::For {
        var,
        start,
        end,
        kind,
        body: tbody,
    } = get(&body, &tp)
    else {
        unreachable!("a loop path")
    };
    let mut inner: Vec<Stmt> = tbody[..ip[n].0]
        .iter()
        .filter(|s| matches!(s, Stmt::Let { .. }))
        .cloned()
        .collect();
    inner.append(&mut nest);
    let new = Stmt::For {
        var: var.clone(),
        start: start.clone(),
        end: end.clone(),
        kind: *kind,
        body: inner,
    };
    // Legality: the loop's other statements touch the init's buffers only at the slice of the
    // loop, and do not write what the init (with its copied loops and lets) reads.
    let ns = Summary::of(std::slice::from_ref(&new));
    let us = Summary::of(std::slice::from_ref(chain[j]));
    let mut rest_body = body.clone();
    parent_list_mut(&mut rest_body, &ip[..=n + j]).remove(ip[n + j].0);
    let rs = Summary::of(std::slice::from_ref(get(&rest_body, &tp)));
    if let Some(b) = rs.written().intersection(&ns.read()).next() {
        return Err(conflict(
            &init_name,
            b,
            &format!("the rest of loop `{name}`"),
        ));
    }
    let tv = vec![var.clone()];
    for b in us.written() {
        let d = slice_positions(&us.lists(&b, true), &tv).ok_or_else(|| Condition::Region {
            buffer: b.clone(),
            what: format!("`{init_name}` does not write it at the slice of loop `{name}`"),
        })?;
        if let Some(l) = rs
            .accesses
            .iter()
            .filter(|x| x.0 == b)
            .find(|x| !at_slice(&x.1, &d, &tv))
        {
            return Err(Condition::Region {
                buffer: b.clone(),
                what: format!("loop `{name}` accesses it at {:?}, outside its slice", l.1),
            });
        }
        // Before the init, in the same iteration, nothing may touch it.
        for level in n..n + j + 1 {
            let list = list_at(&body, &ip[..level]);
            let before = Summary::of(&list[..ip[level].0]);
            if before.touched().contains(&b) {
                return Err(conflict(
                    &init_name,
                    &b,
                    "a statement that runs before it in the same iteration",
                ));
            }
        }
    }
    let tk = tp[n - 1].0;
    body = rest_body;
    parent_list_mut(&mut body, &tp).insert(tk, new);
    Ok(body)
}
