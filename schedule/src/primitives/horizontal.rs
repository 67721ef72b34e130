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

use super::tree::{list_at, loop_path, parent_list_mut};
use crate::error::Condition;
use crate::loops::find;
use lacuna_stage1::BinOp;
use lacuna_stage2::passes::simplify;
use lacuna_stage2::{Expr, ForKind, Stmt};

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
