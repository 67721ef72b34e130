//! Stage-II primitives that add or move block boundaries (`blockize`, `lift_loop`) and give a
//! loop a constant bound (`bound`).
//!
//! Blocks at stage II are transparent (they run their statements in order and do not scope
//! variables differently from a loop body), so these primitives never change results; they change
//! the structure other primitives and the tuner see.
//!
//! - `blockize(loop)`: wraps the loop (and its subtree) in a new block `blockize_<var>`, whose
//!   iterators are the iterators of the blocks inside that are bound by loops outside (the
//!   outer part of the iteration space, as TVM's blockize does).
//! - `lift_loop(loop)` (SparseTIR's: "lift a loop into its outer block as a new block
//!   iterator"): a loop that is the only statement of a block's body moves outside the block,
//!   and the block gains the loop's variable as an iterator. `block B(i) { for j { S } }`
//!   becomes `for j { block B(i, j) { S } }`. The new iterator's axis and kind are those of the
//!   inner blocks' iterator of that variable (or of the variable it was split from), reduction
//!   if any inner block reduces over it.
//! - `bound(loop, extent)` (TACO's bound): a loop `for v in s..e` whose extent is data
//!   dependent becomes a loop of constant extent, `for v.b in 0..extent { let v = s + v.b;
//!   if v < e { S } }`, which may be unrolled, vectorized or bound to threads, followed by a
//!   remainder loop `for v.r in s + extent..e` for ranges longer than the bound — so a bound
//!   that the data exceeds costs time, never a wrong result.

use super::tree::{block_names, find_all, get, loop_path, parent_list_mut, Slot};
use crate::error::Condition;
use crate::loops::{find, replace};
use lacuna_ir::DType;
use lacuna_stage1::{BinOp, IterKind};
use lacuna_stage2::{Expr, IterVar, Stmt};

/// Every block iterator inside `stmts`.
fn inner_iters(stmts: &[Stmt]) -> Vec<IterVar> {
    find_all(stmts, &|s| matches!(s, Stmt::Block { .. }))
        .into_iter()
        .flat_map(|p| match get(stmts, &p) {
            Stmt::Block { iters, .. } => iters.clone(),
            _ => unreachable!("filtered"),
        })
        .collect()
}

/// `blockize(loop)`: see the module documentation.
pub fn blockize(body: Vec<Stmt>, name: &str) -> Result<Vec<Stmt>, Condition> {
    let index = find(&body, name)?;
    let Some(Stmt::For { var, .. }) = crate::loops::get(&body, index) else {
        unreachable!("find returns loops")
    };
    let block = format!("blockize_{var}");
    if block_names(&body).contains(&block) {
        return Err(Condition::BadArgument {
            what: format!("a block named `{block}` exists already"),
        });
    }
    replace(body, index, &mut |s| {
        let inside = super::tree::defined_vars(std::slice::from_ref(&s));
        let mut iters: Vec<IterVar> = Vec::new();
        for it in inner_iters(std::slice::from_ref(&s)) {
            if inside.contains(&it.var) {
                continue;
            }
            match iters.iter_mut().find(|x| x.var == it.var) {
                Some(x) if it.kind == IterKind::R => x.kind = IterKind::R,
                Some(_) => {}
                None => iters.push(it),
            }
        }
        Ok(vec![Stmt::Block {
            name: block.clone(),
            iters,
            init: vec![],
            body: vec![s],
        }])
    })
}

/// `lift_loop(loop)`: see the module documentation.
pub fn lift_loop(mut body: Vec<Stmt>, name: &str) -> Result<Vec<Stmt>, Condition> {
    let tp = loop_path(&body, find(&body, name)?);
    let not_lone = || Condition::BadArgument {
        what: format!("loop `{name}` is not the only statement of a block's body"),
    };
    if tp.len() < 2 || tp[tp.len() - 2].1 != Slot::Body {
        return Err(not_lone());
    }
    let bp = &tp[..tp.len() - 1];
    let Stmt::Block {
        init, body: bbody, ..
    } = get(&body, bp)
    else {
        return Err(not_lone());
    };
    if !init.is_empty() || bbody.len() != 1 {
        return Err(not_lone());
    }
    let k = bp[bp.len() - 1].0;
    let list = parent_list_mut(&mut body, bp);
    let Stmt::Block {
        name: bname,
        mut iters,
        init,
        body: mut bbody,
    } = list.remove(k)
    else {
        unreachable!("checked above")
    };
    let Some(Stmt::For {
        var,
        start,
        end,
        kind,
        body: lbody,
    }) = bbody.pop()
    else {
        unreachable!("checked above")
    };
    let inner = inner_iters(&lbody);
    let base = var.split('.').next().unwrap_or(&var).to_string();
    let of = |v: &str| {
        inner
            .iter()
            .filter(|it| it.var == v)
            .cloned()
            .collect::<Vec<_>>()
    };
    let mut same = of(&var);
    if same.is_empty() {
        same = of(&base);
    }
    let axis = same.first().map_or_else(String::new, |it| it.axis.clone());
    let reduces = same.iter().any(|it| it.kind == IterKind::R);
    iters.push(IterVar {
        var: var.clone(),
        axis,
        kind: if reduces { IterKind::R } else { IterKind::S },
    });
    list.insert(
        k,
        Stmt::For {
            var,
            start,
            end,
            kind,
            body: vec![Stmt::Block {
                name: bname,
                iters,
                init,
                body: lbody,
            }],
        },
    );
    Ok(body)
}

/// `bound(loop, extent)`: see the module documentation.
pub fn bound(body: Vec<Stmt>, name: &str, extent: u64) -> Result<Vec<Stmt>, Condition> {
    if extent == 0 || extent > i64::MAX as u64 {
        return Err(Condition::BadArgument {
            what: format!("a bound of {extent}"),
        });
    }
    let index = find(&body, name)?;
    replace(body, index, &mut |s| {
        let Stmt::For {
            var,
            start,
            end,
            kind,
            body,
        } = s
        else {
            unreachable!("find returns loops")
        };
        let bv = format!("{var}.b");
        let rv = format!("{var}.r");
        let n = Expr::Int(extent as i64, DType::I64);
        let bounded = Stmt::For {
            var: bv.clone(),
            start: Expr::i64(0),
            end: n.clone(),
            kind,
            body: vec![
                Stmt::Let {
                    var: var.clone(),
                    value: Expr::add(start.clone(), Expr::var(&bv)),
                },
                Stmt::If {
                    cond: Expr::bin(BinOp::Lt, Expr::var(&var), end.clone()),
                    then_body: body.clone(),
                    else_body: vec![],
                },
            ],
        };
        // The remainder runs serially after the bounded part, in the original order.
        let rest = Stmt::For {
            var: rv.clone(),
            start: Expr::add(start, n),
            end,
            kind: lacuna_stage2::ForKind::Serial,
            body: std::iter::once(Stmt::Let {
                var: var.clone(),
                value: Expr::var(&rv),
            })
            .chain(body)
            .collect(),
        };
        Ok(vec![bounded, rest])
    })
}
