//! Stage-II primitives that restructure loops: `split`, `fuse`, `reorder`.

use crate::error::Condition;
use crate::loops::{find, get, mentions, replace};
use lacuna_ir::DType;
use lacuna_stage1::BinOp;
use lacuna_stage2::{Expr, ForKind, Stmt};

fn int(v: u64) -> Expr {
    Expr::Int(v as i64, DType::I64)
}

fn ceil_div(a: Expr, b: Expr) -> Expr {
    Expr::bin(
        BinOp::Div,
        Expr::add(a, Expr::sub(b.clone(), Expr::i64(1))),
        b,
    )
}

/// The largest product of split factors (`2^31 - 1`): with bounds computed in i64, no product
/// of a factor and a loop variable overflows.
pub const MAX_SPLIT_FACTOR: u64 = i32::MAX as u64;

/// `split(loop, factors)`: `for v in s..e` becomes `for v.0 .. for v.1 ..` with
/// `v = s + (v.0 * f1 + v.1)`, guarded by `v < e` for a tail that does not divide evenly.
///
/// Requires: at most one factor is `None` (inferred as the ceiling quotient); no factor is 0;
/// the product of the given factors at most [`MAX_SPLIT_FACTOR`];
/// at least two factors.
pub fn split(body: Vec<Stmt>, name: &str, factors: &[Option<u64>]) -> Result<Vec<Stmt>, Condition> {
    if factors.len() < 2 {
        return Err(Condition::BadArgument {
            what: format!("split needs at least two factors, got {}", factors.len()),
        });
    }
    if factors.iter().filter(|f| f.is_none()).count() > 1 {
        return Err(Condition::BadArgument {
            what: "at most one factor may be inferred (None)".into(),
        });
    }
    if factors.contains(&Some(0)) {
        return Err(Condition::BadArgument {
            what: "a factor of 0".into(),
        });
    }
    // Loop bounds are i64: the factors, and their product (the inferred factor's divisor),
    // must fit in 32 bits so that no bound arithmetic overflows.
    let product = factors
        .iter()
        .flatten()
        .try_fold(1u64, |acc, &f| acc.checked_mul(f))
        .filter(|&p| p <= MAX_SPLIT_FACTOR);
    if product.is_none() {
        return Err(Condition::BadArgument {
            what: format!(
                "split factors {factors:?}: their product must be at most {MAX_SPLIT_FACTOR}"
            ),
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
        let known: u64 = factors.iter().flatten().product();
        let extent = Expr::sub(end.clone(), start.clone());
        let extents: Vec<Expr> = factors
            .iter()
            .map(|f| f.map_or_else(|| ceil_div(extent.clone(), int(known)), int))
            .collect();
        let vars: Vec<String> = (0..factors.len()).map(|i| format!("{var}.{i}")).collect();
        // v = start + ((v.0 * f1 + v.1) * f2 + v.2) ...
        let mut fused = Expr::var(&vars[0]);
        for (v, f) in vars.iter().zip(&extents).skip(1) {
            fused = Expr::add(Expr::mul(fused, f.clone()), Expr::var(v));
        }
        // No tail when the extent is a known multiple of the factors.
        let exact = match lacuna_stage2::passes::simplify::expr(extent.clone()) {
            Expr::Int(e, _) => {
                let covered = extents.iter().try_fold(1i64, |acc, f| {
                    match lacuna_stage2::passes::simplify::expr(f.clone()) {
                        Expr::Int(v, _) => acc.checked_mul(v),
                        _ => None,
                    }
                });
                covered == Some(e)
            }
            _ => false,
        };
        let let_var = Stmt::Let {
            var: var.clone(),
            value: Expr::add(start.clone(), fused),
        };
        let inner = if exact {
            let mut v = vec![let_var];
            v.extend(body);
            v
        } else {
            vec![
                let_var,
                Stmt::If {
                    cond: Expr::bin(BinOp::Lt, Expr::var(&var), end.clone()),
                    then_body: body,
                    else_body: vec![],
                },
            ]
        };
        let nest = vars.iter().zip(&extents).rev().fold(inner, |b, (v, f)| {
            vec![Stmt::For {
                var: v.clone(),
                start: Expr::i64(0),
                end: f.clone(),
                kind,
                body: b,
            }]
        });
        Ok(nest)
    })
}

/// `fuse(outer, inner)`: two directly nested loops become one over the product of their
/// extents. Requires: `inner` is the only statement of `outer`, and its bounds do not use
/// `outer`'s variable.
pub fn fuse(body: Vec<Stmt>, outer: &str, inner: &str) -> Result<Vec<Stmt>, Condition> {
    let oi = find(&body, outer)?;
    let ii = find(&body, inner)?;
    let Some(Stmt::For {
        var: ov,
        body: obody,
        ..
    }) = get(&body, oi)
    else {
        unreachable!("find returns loops")
    };
    let direct = matches!(obody.as_slice(), [Stmt::For { .. }]) && ii == oi + 1;
    if !direct {
        return Err(Condition::NotPerfectlyNested {
            loops: vec![outer.to_string(), inner.to_string()],
        });
    }
    if let [Stmt::For { start, end, .. }] = obody.as_slice() {
        if mentions(start, ov) || mentions(end, ov) {
            return Err(Condition::BoundDependence {
                inner: inner.to_string(),
                outer: outer.to_string(),
            });
        }
    }
    replace(body, oi, &mut |s| {
        let Stmt::For {
            var: ov,
            start: os,
            end: oe,
            kind,
            body: mut ob,
        } = s
        else {
            unreachable!("a loop")
        };
        let Some(Stmt::For {
            var: iv,
            start: is,
            end: ie,
            body: ib,
            ..
        }) = ob.pop()
        else {
            unreachable!("checked above")
        };
        let ext_o = Expr::sub(oe, os.clone());
        let ext_i = Expr::sub(ie, is.clone());
        let fv = format!("{ov}_{iv}_fused");
        let mut nb = vec![
            Stmt::Let {
                var: ov.clone(),
                value: Expr::add(os, Expr::bin(BinOp::Div, Expr::var(&fv), ext_i.clone())),
            },
            Stmt::Let {
                var: iv.clone(),
                value: Expr::add(
                    is,
                    Expr::sub(
                        Expr::var(&fv),
                        Expr::mul(
                            Expr::bin(BinOp::Div, Expr::var(&fv), ext_i.clone()),
                            ext_i.clone(),
                        ),
                    ),
                ),
            },
        ];
        nb.extend(ib);
        Ok(vec![Stmt::For {
            var: fv,
            start: Expr::i64(0),
            end: Expr::mul(ext_o, ext_i),
            kind,
            body: nb,
        }])
    })
}

/// `reorder(loops)`: permutes a perfectly nested chain of loops. Requires: the named loops
/// form one chain (each the only statement of the previous), and no loop's bounds use the
/// variable of a loop that the new order places inside it.
pub fn reorder(body: Vec<Stmt>, names: &[String]) -> Result<Vec<Stmt>, Condition> {
    if names.is_empty() {
        return Err(Condition::BadArgument {
            what: "reorder needs at least one loop".into(),
        });
    }
    let indices: Vec<usize> = names
        .iter()
        .map(|n| find(&body, n))
        .collect::<Result<_, _>>()?;
    let mut sorted = indices.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != indices.len() {
        return Err(Condition::BadArgument {
            what: format!("a loop is named twice in {names:?}"),
        });
    }
    let not_nested = || Condition::NotPerfectlyNested {
        loops: names.to_vec(),
    };
    // The chain: consecutive pre-order numbers, each loop the only statement of the previous.
    if sorted.windows(2).any(|w| w[1] != w[0] + 1) {
        return Err(not_nested());
    }
    let mut headers = Vec::new();
    let mut cur = get(&body, sorted[0]).ok_or_else(not_nested)?;
    for k in 0..sorted.len() {
        let Stmt::For {
            var,
            start,
            end,
            kind,
            body: b,
        } = cur
        else {
            return Err(not_nested());
        };
        headers.push((var.clone(), start.clone(), end.clone(), *kind));
        if k + 1 < sorted.len() {
            match b.as_slice() {
                [next @ Stmt::For { .. }] => cur = next,
                _ => return Err(not_nested()),
            }
        }
    }
    // New order of the headers.
    let order: Vec<usize> = indices.iter().map(|i| i - sorted[0]).collect();
    let new: Vec<&(String, Expr, Expr, ForKind)> = order.iter().map(|&k| &headers[k]).collect();
    for (pos, h) in new.iter().enumerate() {
        for inner in &new[pos + 1..] {
            if mentions(&h.1, &inner.0) || mentions(&h.2, &inner.0) {
                return Err(Condition::BoundDependence {
                    inner: h.0.clone(),
                    outer: inner.0.clone(),
                });
            }
        }
    }
    let new: Vec<(String, Expr, Expr, ForKind)> = new.into_iter().cloned().collect();
    let depth = sorted.len();
    replace(body, sorted[0], &mut |s| {
        // Peel the chain, keep the innermost body, rebuild with the new headers.
        let mut cur = s;
        for _ in 0..depth - 1 {
            let Stmt::For { mut body, .. } = cur else {
                unreachable!("checked chain")
            };
            cur = body.pop().expect("checked chain");
        }
        let Stmt::For {
            body: innermost, ..
        } = cur
        else {
            unreachable!("checked chain")
        };
        Ok(new
            .iter()
            .rev()
            .fold(innermost, |b, (var, start, end, kind)| {
                vec![Stmt::For {
                    var: var.clone(),
                    start: start.clone(),
                    end: end.clone(),
                    kind: *kind,
                    body: b,
                }]
            }))
    })
}
