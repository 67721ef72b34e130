//! Pass `version_ranges`: loop versioning on range guards. Where every iteration of a loop
//! evaluates range checks (`p >= 0`, `p < n`, ...) that hold throughout most iterations, the
//! loop's body gets a second copy, taken when a check per iteration proves them, in which they
//! are `true` and fold away.
//!
//! Coordinates computed by offsets (`row + off[d]` of a diagonal, `block * 8 + lane`) are
//! range-checked in every step, and a checked load of a vector loop becomes a masked load;
//! only the blocks at a matrix's edges need the checks. Per iteration of the versioned loop `g`
//! each check is bounded over the body's inner loops by interval arithmetic: an inner loop
//! variable spans its loop's range, a `let` its value's interval, an integer load `b[j]` (with
//! `j` an inner loop over a range that does not change with `g`, `b` not written in the loop,
//! the load made in every iteration of `j`'s loop) the least and greatest of `b` over that
//! range, computed once before the loop; a load whose index does not change within the
//! iteration is one value.
//!
//! ```text
//!                                          let off.lo = min(off[0..q]); let off.hi = max(off[0..q])
//! for g in 0..G {                          for g in 0..G {
//!   for d in 0..q {                           if g * 8 + off.lo >= 0 && g * 8 + 7 + off.hi < n {
//!     for l in 0..8 {                           for d in 0..q { for l in 0..8 {
//!       let c = g * 8 + l + off[d]                let c.in = g * 8 + l + off[d]
//!       s[l] += select(c >= 0 && c < n,  ==>      s[l] += x[c.in] } }
//!                      x[c], 0.0)             } else {
//!     }                                         (the loop body as it was)
//!   }                                         }
//! }                                        }
//! ```
//!
//! A check is the interval's end compared as the guard compares (`a < b` holds throughout when
//! the greatest `a` is below the least `b`); a guard whose check folds to `true` holds in every
//! iteration, one whose check folds to `false` is left alone. Guards proved in one round may
//! prove others in the next: a `let` bound to `select(proved, e, -1)` is `e` in the copy.
//! The outermost loop with a guard to prove is versioned, and nothing inside it again. The copy
//! renames what it binds (suffix `.in`), so that every name stays bound once. Loops bound to
//! GPU threads, and bodies with barriers or warp shuffles, are left alone (a branch around a
//! barrier must not diverge).

use crate::ir::{Expr, ForKind, Func, Stmt};
use crate::passes::hoist_invariant_lets::count_bindings;
use crate::passes::partition_loops::{loads_any, writes};
use crate::passes::simplify;
use lacuna_ir::DType;
use lacuna_stage1::BinOp;
use std::collections::{BTreeMap, BTreeSet};

/// Versions every matching loop of `f` (see the module documentation).
pub fn version_ranges(mut f: Func) -> Func {
    let mut counts = BTreeMap::new();
    count_bindings(&f.body, &mut counts);
    let mut names: BTreeSet<String> = counts.keys().cloned().collect();
    names.extend(f.params.iter().cloned());
    names.extend(f.buffers.iter().map(|b| b.name.clone()));
    names.extend(f.scratch.iter().map(|b| b.name.clone()));
    let mut cx = Cx {
        buffers: f
            .buffers
            .iter()
            .map(|b| (b.name.clone(), b.dtype))
            .collect(),
        counts,
        names,
    };
    let body = std::mem::take(&mut f.body);
    let body = stmts(body, &mut cx);
    f.body = body;
    f
}

struct Cx {
    /// The element types of the function's buffers (not its scratch buffers).
    buffers: BTreeMap<String, DType>,
    /// How often each variable is bound in the whole function.
    counts: BTreeMap<String, usize>,
    /// Every name in use (variables, parameters, buffers), for fresh names.
    names: BTreeSet<String>,
}

impl Cx {
    fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut n = 1;
        while self.names.contains(&name) {
            n += 1;
            name = format!("{base}{n}");
        }
        self.names.insert(name.clone());
        name
    }
}

fn stmts(list: Vec<Stmt>, cx: &mut Cx) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(list.len());
    for s in list {
        match s {
            Stmt::For {
                var,
                start,
                end,
                kind,
                body,
            } if !matches!(kind, ForKind::Bound(_)) => match version(&var, &body, cx) {
                Some((before, body)) => {
                    out.extend(before);
                    out.push(Stmt::For {
                        var,
                        start,
                        end,
                        kind,
                        body,
                    });
                }
                None => out.push(Stmt::For {
                    var,
                    start,
                    end,
                    kind,
                    body: stmts(body, cx),
                }),
            },
            other => out.push(other.map_bodies(&mut |b| stmts(b, cx))),
        }
    }
    out
}

/// How a variable bound in the versioned loop's body is bound.
enum Binding<'b> {
    Loop { start: &'b Expr, end: &'b Expr },
    Let(&'b Expr),
    Unknown,
}

/// An interval `[lo, hi]` (both ends included) of an `i64` value, its ends expressions that
/// the versioned loop's iteration can evaluate before its body.
#[derive(Clone)]
struct Iv {
    lo: Expr,
    hi: Expr,
}

/// The least and greatest of an integer buffer over a range, computed before the loop.
struct Extremes {
    buffer: String,
    dtype: DType,
    start: Expr,
    end: Expr,
    lo: String,
    hi: String,
    /// The variables the computation binds: the index, the running least and greatest.
    at: String,
    lo_acc: String,
    hi_acc: String,
}

struct Analysis<'a> {
    cx: &'a mut Cx,
    /// The versioned loop's variable.
    var: &'a str,
    /// Variables bound in the body.
    inner: BTreeMap<&'a str, Binding<'a>>,
    /// Buffers written in the body.
    written: BTreeSet<String>,
    /// Integer loads `buffer[j]` (buffer, `j`) that every run of `j`'s loop makes whatever the
    /// values: not under an `if`, a `while`, a `select`'s branch or the right of `&&`/`||`.
    unconditional: BTreeSet<(String, String)>,
    /// Guards assumed to hold (proved by a check, or in every iteration).
    assumed: Vec<Expr>,
    extremes: Vec<Extremes>,
    memo: BTreeMap<String, Option<Iv>>,
}

fn version(var: &str, body: &[Stmt], cx: &mut Cx) -> Option<(Vec<Stmt>, Vec<Stmt>)> {
    if body
        .iter()
        .any(|s| s.has_barrier() || s.has_shuffle() || s.has_bound_loop())
    {
        return None;
    }
    let mut inner = BTreeMap::new();
    bindings(body, &mut inner);
    // Every binding of a name bound in the body is in the body (and alike, see `bindings`): a
    // guard means one thing wherever it appears. (The loop's own variable, bound outside the
    // body, is then bound nowhere in it.)
    let mut here = BTreeMap::new();
    count_bindings(body, &mut here);
    if here.iter().any(|(v, n)| cx.counts.get(v) != Some(n)) {
        return None;
    }
    let mut guards = Vec::new();
    for s in body {
        collect_guards(s, &mut guards);
    }
    if guards.is_empty() {
        return None;
    }
    let mut written = BTreeSet::new();
    writes(body, &mut written);
    let mut unconditional = BTreeSet::new();
    unconditional_loads(body, &mut unconditional);
    let mut a = Analysis {
        cx,
        var,
        inner,
        written,
        unconditional,
        assumed: Vec::new(),
        extremes: Vec::new(),
        memo: BTreeMap::new(),
    };
    // Guards proved in a round may prove others in the next (through `select(guard, e, ..)`).
    let mut checks: Vec<Expr> = Vec::new();
    // Whether a proved guard's operands span intervals: one with one value per iteration is its
    // own check, and moving it to the top of the iteration gains nothing worth a second copy.
    let mut worth = false;
    for _round in 0..4 {
        a.memo.clear();
        let mut grew = false;
        for g in &guards {
            if a.assumed.contains(g) {
                continue;
            }
            let Some((check, spans)) = a.check(g) else {
                continue;
            };
            match check {
                Expr::Bool(false) => {}
                Expr::Bool(true) => {
                    a.assumed.push(g.clone());
                    grew = true;
                }
                check => {
                    worth |= spans;
                    if !checks.contains(&check) {
                        checks.push(check);
                    }
                    a.assumed.push(g.clone());
                    grew = true;
                }
            }
        }
        if !grew {
            break;
        }
    }
    if !worth {
        return None;
    }
    let Analysis {
        assumed, extremes, ..
    } = a;
    // Only the extremes a check reads are computed (an interval may have failed after its
    // load's extremes were named).
    let extremes: Vec<Extremes> = extremes
        .into_iter()
        .filter(|x| {
            checks
                .iter()
                .any(|c| c.reads_var(&|v| v == x.lo || v == x.hi))
        })
        .collect();
    // Scratch allocations at the top of the body stay shared by both copies.
    let split = body
        .iter()
        .position(|s| !matches!(s, Stmt::Alloc { .. }))
        .unwrap_or(body.len());
    let (allocs, rest) = body.split_at(split);
    let fast = simplify::stmts(
        rest.iter()
            .cloned()
            .map(|s| assume_stmt(s, &assumed))
            .collect(),
    );
    let fast = rename(fast, cx);
    let cond = checks
        .into_iter()
        .reduce(|a, b| Expr::bin(BinOp::And, a, b))
        .unwrap_or(Expr::Bool(true));
    let mut new_body = allocs.to_vec();
    new_body.push(Stmt::If {
        cond,
        then_body: fast,
        else_body: rest.to_vec(),
    });
    let before = extremes.into_iter().flat_map(extremes_stmts).collect();
    Some((before, new_body))
}

impl Analysis<'_> {
    /// The condition under which guard `g` holds throughout an iteration, simplified, and
    /// whether an operand spans an interval (rather than one value per iteration); `None` when
    /// its operands cannot be bounded.
    fn check(&mut self, g: &Expr) -> Option<(Expr, bool)> {
        let Expr::Binary(op, a, b) = g else {
            return None;
        };
        let (ia, ib) = (self.iv(a)?, self.iv(b)?);
        let spans = ia.lo != ia.hi || ib.lo != ib.hi;
        let check = match op {
            BinOp::Lt | BinOp::Le => Expr::bin(*op, ia.hi, ib.lo),
            BinOp::Gt | BinOp::Ge => Expr::bin(*op, ia.lo, ib.hi),
            _ => return None,
        };
        Some((simplify::expr(check), spans))
    }

    /// The interval of an `i64` expression over one iteration of the versioned loop.
    fn iv(&mut self, e: &Expr) -> Option<Iv> {
        let point = |e: Expr| {
            Some(Iv {
                lo: e.clone(),
                hi: e,
            })
        };
        match e {
            Expr::Int(_, DType::I64) | Expr::Param(_) => point(e.clone()),
            Expr::Var(v) if v == self.var => point(e.clone()),
            Expr::Var(v) => match self.inner.get(v.as_str()) {
                None => point(e.clone()),
                Some(Binding::Unknown) => None,
                Some(Binding::Loop { start, end }) => {
                    let (start, end) = (*start, *end);
                    let lo = self.iv(start)?.lo;
                    let hi = Expr::sub(self.iv(end)?.hi, Expr::i64(1));
                    Some(Iv { lo, hi })
                }
                Some(Binding::Let(value)) => {
                    if let Some(known) = self.memo.get(v) {
                        return known.clone();
                    }
                    let value = *value;
                    let iv = self.iv(value);
                    self.memo.insert(v.clone(), iv.clone());
                    iv
                }
            },
            Expr::Load { .. } if self.invariant_load(e) => point(e.clone()),
            Expr::Load { buffer, indices } => self.load(buffer, indices, DType::I64),
            Expr::Cast(DType::I64, inner) => match &**inner {
                Expr::Load { .. } if self.invariant_load(inner) => point(e.clone()),
                Expr::Load { buffer, indices } => {
                    let t = *self.cx.buffers.get(buffer)?;
                    self.load(buffer, indices, t)
                }
                _ => None,
            },
            Expr::Binary(op, a, b) => {
                let ia = self.iv(a)?;
                match op {
                    BinOp::Add => {
                        let ib = self.iv(b)?;
                        Some(Iv {
                            lo: Expr::add(ia.lo, ib.lo),
                            hi: Expr::add(ia.hi, ib.hi),
                        })
                    }
                    BinOp::Sub => {
                        let ib = self.iv(b)?;
                        Some(Iv {
                            lo: Expr::sub(ia.lo, ib.hi),
                            hi: Expr::sub(ia.hi, ib.lo),
                        })
                    }
                    BinOp::Min | BinOp::Max => {
                        let ib = self.iv(b)?;
                        Some(Iv {
                            lo: Expr::bin(*op, ia.lo, ib.lo),
                            hi: Expr::bin(*op, ia.hi, ib.hi),
                        })
                    }
                    // Multiplying by a constant scales (and for a negative one swaps) the ends;
                    // truncating division by a positive constant is monotone.
                    BinOp::Mul => match **b {
                        Expr::Int(c, DType::I64) if c >= 0 => Some(Iv {
                            lo: Expr::mul(ia.lo, Expr::i64(c)),
                            hi: Expr::mul(ia.hi, Expr::i64(c)),
                        }),
                        Expr::Int(c, DType::I64) => Some(Iv {
                            lo: Expr::mul(ia.hi, Expr::i64(c)),
                            hi: Expr::mul(ia.lo, Expr::i64(c)),
                        }),
                        _ => None,
                    },
                    BinOp::Div => match **b {
                        Expr::Int(c, DType::I64) if c > 0 => Some(Iv {
                            lo: Expr::bin(BinOp::Div, ia.lo, Expr::i64(c)),
                            hi: Expr::bin(BinOp::Div, ia.hi, Expr::i64(c)),
                        }),
                        _ => None,
                    },
                    _ => None,
                }
            }
            // A value chosen by assumed guards is its first operand.
            Expr::Select(c, a, _) if self.holds(c) => self.iv(a),
            _ => None,
        }
    }

    /// Whether `e` is a load that one iteration of the versioned loop reads alike wherever it
    /// appears: its index reads no variable bound in the body, its buffer is not written there.
    fn invariant_load(&self, e: &Expr) -> bool {
        let Expr::Load { buffer, indices } = e else {
            return false;
        };
        self.cx.buffers.contains_key(buffer)
            && !self.written.contains(buffer)
            && !indices.iter().any(|i| {
                i.reads_var(&|v| self.inner.contains_key(v)) || loads_any(i, &self.written)
            })
    }

    /// Whether condition `c` is a conjunction of assumed guards.
    fn holds(&self, c: &Expr) -> bool {
        match c {
            Expr::Binary(BinOp::And, a, b) => self.holds(a) && self.holds(b),
            Expr::Bool(true) => true,
            other => self.assumed.contains(other),
        }
    }

    /// The interval of an integer load `buffer[j]` (converted to `i64`) with `j` an inner loop
    /// whose range does not change with the versioned loop: the buffer's extremes over it.
    fn load(&mut self, buffer: &str, indices: &[Expr], dtype: DType) -> Option<Iv> {
        let [Expr::Var(j)] = indices else {
            return None;
        };
        let t = *self.cx.buffers.get(buffer)?;
        if t != dtype
            || !dtype.is_int()
            || self.written.contains(buffer)
            || !self
                .unconditional
                .contains(&(buffer.to_string(), j.clone()))
        {
            return None;
        }
        let Some(Binding::Loop { start, end }) = self.inner.get(j.as_str()) else {
            return None;
        };
        let (start, end) = ((*start).clone(), (*end).clone());
        let varies = |e: &Expr| e.reads_var(&|v| v == self.var || self.inner.contains_key(v));
        if varies(&start)
            || varies(&end)
            || loads_any(&start, &self.written)
            || loads_any(&end, &self.written)
        {
            return None;
        }
        let known = self
            .extremes
            .iter()
            .position(|x| x.buffer == buffer && x.start == start && x.end == end);
        let i = match known {
            Some(i) => i,
            None => {
                let mut fresh = |what: &str| self.cx.fresh(&format!("{buffer}.{what}"));
                let (lo, hi) = (fresh("lo"), fresh("hi"));
                let (at, lo_acc, hi_acc) = (fresh("at"), fresh("lo.acc"), fresh("hi.acc"));
                self.extremes.push(Extremes {
                    buffer: buffer.to_string(),
                    dtype,
                    start,
                    end,
                    lo,
                    hi,
                    at,
                    lo_acc,
                    hi_acc,
                });
                self.extremes.len() - 1
            }
        };
        let x = &self.extremes[i];
        Some(Iv {
            lo: Expr::var(&x.lo),
            hi: Expr::var(&x.hi),
        })
    }
}

/// The statements computing a buffer's extremes over a range: both 0 when it is empty (the
/// loop that loads it then runs no iteration, and the guards it bounds are never evaluated).
fn extremes_stmts(x: Extremes) -> Vec<Stmt> {
    let Extremes {
        buffer,
        dtype,
        start,
        end,
        lo,
        hi,
        at,
        lo_acc,
        hi_acc,
    } = x;
    let load = |i: Expr| Expr::load_i64(&buffer, i, dtype);
    let first = Expr::Select(
        Box::new(Expr::bin(BinOp::Lt, start.clone(), end.clone())),
        Box::new(load(start.clone())),
        Box::new(Expr::i64(0)),
    );
    let step = |acc: &str, op| Stmt::Assign {
        var: acc.to_string(),
        value: Expr::bin(op, Expr::var(acc), load(Expr::var(&at))),
    };
    let body = vec![step(&lo_acc, BinOp::Min), step(&hi_acc, BinOp::Max)];
    vec![
        Stmt::Decl {
            var: lo_acc.clone(),
            dtype: DType::I64,
            init: first.clone(),
        },
        Stmt::Decl {
            var: hi_acc.clone(),
            dtype: DType::I64,
            init: first,
        },
        Stmt::For {
            var: at.clone(),
            start: simplify::expr(Expr::add(start, Expr::i64(1))),
            end,
            kind: ForKind::Serial,
            body,
        },
        Stmt::Let {
            var: lo,
            value: Expr::var(&lo_acc),
        },
        Stmt::Let {
            var: hi,
            value: Expr::var(&hi_acc),
        },
    ]
}

fn bindings<'b>(body: &'b [Stmt], out: &mut BTreeMap<&'b str, Binding<'b>>) {
    for s in body {
        let binding = match s {
            Stmt::For {
                var, start, end, ..
            } => Some((var, Binding::Loop { start, end })),
            Stmt::Let { var, value } => Some((var, Binding::Let(value))),
            Stmt::Decl { var, .. } | Stmt::Assign { var, .. } => Some((var, Binding::Unknown)),
            _ => None,
        };
        if let Some((var, b)) = binding {
            // A variable bound twice alike (the same range or value) is one; one assigned, or
            // bound twice differently, is unknown everywhere.
            let b = match (out.remove(var.as_str()), b) {
                (None, b) => b,
                (Some(Binding::Loop { start, end }), Binding::Loop { start: s, end: e })
                    if start == s && end == e =>
                {
                    Binding::Loop { start, end }
                }
                (Some(Binding::Let(v)), Binding::Let(w)) if v == w => Binding::Let(v),
                _ => Binding::Unknown,
            };
            out.insert(var, b);
        }
        for b in s.bodies() {
            bindings(b, out);
        }
    }
}

/// The loads `buffer[j]` of a loop variable `j` that `list` makes unconditionally (see
/// [`Analysis::unconditional`]): computing a buffer's extremes over `j`'s range before the loop
/// then loads nothing the loop would not (storage is validated against the loops' ranges).
fn unconditional_loads(list: &[Stmt], out: &mut BTreeSet<(String, String)>) {
    fn expr(e: &Expr, out: &mut BTreeSet<(String, String)>) {
        match e {
            Expr::Load { buffer, indices } => {
                if let [Expr::Var(j)] = indices.as_slice() {
                    out.insert((buffer.clone(), j.clone()));
                }
                indices.iter().for_each(|i| expr(i, out));
            }
            Expr::Select(c, ..) => expr(c, out),
            Expr::Binary(BinOp::And | BinOp::Or, a, _) => expr(a, out),
            other => other.children().into_iter().for_each(|c| expr(c, out)),
        }
    }
    for s in list {
        match s {
            Stmt::If { cond, .. } | Stmt::While { cond, .. } => expr(cond, out),
            Stmt::For { body, .. } | Stmt::Attr { body, .. } => {
                s.exprs().into_iter().for_each(|e| expr(e, out));
                unconditional_loads(body, out);
            }
            Stmt::Block { init, body, .. } => {
                unconditional_loads(init, out);
                unconditional_loads(body, out);
            }
            other => other.exprs().into_iter().for_each(|e| expr(e, out)),
        }
    }
}

/// Every integer comparison in the statement, at any depth.
fn collect_guards(s: &Stmt, out: &mut Vec<Expr>) {
    fn expr(e: &Expr, out: &mut Vec<Expr>) {
        if let Expr::Binary(BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge, ..) = e {
            if !out.contains(e) {
                out.push(e.clone());
            }
        }
        for c in e.children() {
            expr(c, out);
        }
    }
    for e in s.exprs() {
        expr(e, out);
    }
    for b in s.bodies() {
        for s in b {
            collect_guards(s, out);
        }
    }
}

fn assume_stmt(s: Stmt, assumed: &[Expr]) -> Stmt {
    s.map_exprs(&mut |e| assume(e, assumed))
        .map_bodies(&mut |b| b.into_iter().map(|s| assume_stmt(s, assumed)).collect())
}

/// `e` with every assumed guard replaced by `true`.
fn assume(e: Expr, assumed: &[Expr]) -> Expr {
    if assumed.contains(&e) {
        return Expr::Bool(true);
    }
    e.map_children(&mut |c| assume(c, assumed))
}

/// The copy's bindings renamed (suffix `.in`), so that every variable stays bound once.
fn rename(body: Vec<Stmt>, cx: &mut Cx) -> Vec<Stmt> {
    let mut bound = BTreeSet::new();
    crate::ir::bound_vars(&body, &mut bound);
    let map: BTreeMap<String, String> = bound
        .into_iter()
        .map(|v| {
            let new = cx.fresh(&format!("{v}.in"));
            (v, new)
        })
        .collect();
    crate::ir::rename_vars(body, &|v| map.get(v).cloned())
}
