//! Paths into a stage-II statement tree, variable renaming and buffer access summaries, shared
//! by the primitives that move statements (`compute_at`, `reverse_compute_at`,
//! `decompose_reduction`, `blockize`, `lift_loop`).

use crate::error::Condition;
use crate::loops::accesses;
use lacuna_stage2::{Expr, Stmt};
use std::collections::BTreeSet;

/// Which statement list of a compound statement a path step enters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// `For::body`, `While::body`, `Block::body`.
    Body,
    /// `If::then_body`.
    Then,
    /// `If::else_body`.
    Else,
    /// `Block::init`.
    Init,
}

/// A statement's place: from the function body, (index in the list, list entered next) per
/// level; the last step's slot is unused (it names the statement itself).
pub type Path = Vec<(usize, Slot)>;

fn children(s: &Stmt) -> Vec<(Slot, &Vec<Stmt>)> {
    match s {
        Stmt::For { body, .. } | Stmt::While { body, .. } => vec![(Slot::Body, body)],
        Stmt::If {
            then_body,
            else_body,
            ..
        } => vec![(Slot::Then, then_body), (Slot::Else, else_body)],
        Stmt::Block { init, body, .. } => vec![(Slot::Init, init), (Slot::Body, body)],
        Stmt::Attr { body, .. } => vec![(Slot::Body, body)],
        Stmt::Let { .. }
        | Stmt::Decl { .. }
        | Stmt::Assign { .. }
        | Stmt::Store { .. }
        | Stmt::Alloc { .. }
        | Stmt::Barrier
        | Stmt::Atomic { .. } => vec![],
    }
}

/// The statement list a slot of `s` names.
pub fn slot_mut(s: &mut Stmt, slot: Slot) -> &mut Vec<Stmt> {
    match (s, slot) {
        (Stmt::For { body, .. } | Stmt::While { body, .. }, Slot::Body) => body,
        (Stmt::Block { body, .. } | Stmt::Attr { body, .. }, Slot::Body) => body,
        (Stmt::Block { init, .. }, Slot::Init) => init,
        (Stmt::If { then_body, .. }, Slot::Then) => then_body,
        (Stmt::If { else_body, .. }, Slot::Else) => else_body,
        _ => unreachable!("paths only enter existing slots"),
    }
}

/// Every path to a statement for which `pred` holds, in program order.
pub fn find_all(stmts: &[Stmt], pred: &dyn Fn(&Stmt) -> bool) -> Vec<Path> {
    fn go(stmts: &[Stmt], pred: &dyn Fn(&Stmt) -> bool, prefix: &mut Path, out: &mut Vec<Path>) {
        for (k, s) in stmts.iter().enumerate() {
            if pred(s) {
                let mut p = prefix.clone();
                p.push((k, Slot::Body));
                out.push(p);
            }
            for (slot, list) in children(s) {
                prefix.push((k, slot));
                go(list, pred, prefix, out);
                prefix.pop();
            }
        }
    }
    let mut out = Vec::new();
    go(stmts, pred, &mut Vec::new(), &mut out);
    out
}

/// The one path to block `name`.
pub fn block_path(stmts: &[Stmt], name: &str) -> Result<Path, Condition> {
    let hits = find_all(
        stmts,
        &|s| matches!(s, Stmt::Block { name: n, .. } if n == name),
    );
    match hits.len() {
        0 => Err(Condition::NotFound {
            what: "block",
            name: name.to_string(),
        }),
        1 => Ok(hits.into_iter().next().expect("one")),
        n => Err(Condition::BadArgument {
            what: format!("block `{name}` occurs {n} times"),
        }),
    }
}

/// The path to the loop with pre-order number `index` (as `loops::find` numbers them).
pub fn loop_path(stmts: &[Stmt], index: usize) -> Path {
    find_all(stmts, &|s| matches!(s, Stmt::For { .. }))
        .into_iter()
        .nth(index)
        .expect("loops::find returns a loop")
}

/// The statement at `path`.
pub fn get<'a>(stmts: &'a [Stmt], path: &[(usize, Slot)]) -> &'a Stmt {
    let (last, init) = path.split_last().expect("a non-empty path");
    let mut list = stmts;
    for &(k, slot) in init {
        list = children(&list[k])
            .into_iter()
            .find(|(s, _)| *s == slot)
            .expect("a valid path")
            .1;
    }
    &list[last.0]
}

/// The statement list reached by the steps of `prefix` (the function body when empty).
pub fn list_at<'a>(stmts: &'a [Stmt], prefix: &[(usize, Slot)]) -> &'a [Stmt] {
    let mut list = stmts;
    for &(k, slot) in prefix {
        list = children(&list[k])
            .into_iter()
            .find(|(s, _)| *s == slot)
            .expect("a valid path")
            .1;
    }
    list
}

/// The statement at `path`, mutably.
pub fn get_mut<'a>(stmts: &'a mut Vec<Stmt>, path: &[(usize, Slot)]) -> &'a mut Stmt {
    let k = path.last().expect("a non-empty path").0;
    &mut parent_list_mut(stmts, path)[k]
}

/// The statement list that holds the statement at `path`.
pub fn parent_list_mut<'a>(stmts: &'a mut Vec<Stmt>, path: &[(usize, Slot)]) -> &'a mut Vec<Stmt> {
    let mut list = stmts;
    for &(k, slot) in &path[..path.len() - 1] {
        list = slot_mut(&mut list[k], slot);
    }
    list
}

/// The statements along a path, outermost first (the last is the statement itself).
pub fn along<'a>(stmts: &'a [Stmt], path: &[(usize, Slot)]) -> Vec<&'a Stmt> {
    (1..=path.len()).map(|n| get(stmts, &path[..n])).collect()
}

/// Replaces variable names everywhere in `stmts` (reads, loop and `let` variables, block
/// iterators) by `map`.
pub fn rename(stmts: Vec<Stmt>, map: &[(String, String)]) -> Vec<Stmt> {
    lacuna_stage2::ir::rename_vars(stmts, &|v| lookup(map, v))
}

/// Replaces variable names in an expression (see [`rename`]).
pub fn rename_expr(e: Expr, map: &[(String, String)]) -> Expr {
    lacuna_stage2::ir::rename_vars_expr(e, &|v| lookup(map, v))
}

fn lookup(map: &[(String, String)], v: &str) -> Option<String> {
    map.iter().find(|(a, _)| a == v).map(|(_, b)| b.clone())
}

/// Variables a statement list defines (loop, `let` and declared variables), at any depth.
pub fn defined_vars(stmts: &[Stmt]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for path in find_all(stmts, &|s| {
        matches!(s, Stmt::For { .. } | Stmt::Let { .. } | Stmt::Decl { .. })
    }) {
        match get(stmts, &path) {
            Stmt::For { var, .. } | Stmt::Let { var, .. } | Stmt::Decl { var, .. } => {
                out.insert(var.clone());
            }
            _ => unreachable!("filtered"),
        }
    }
    out
}

/// Variables a statement list reads or defines, at any depth.
pub fn all_vars(stmts: &[Stmt]) -> BTreeSet<String> {
    let mut out = defined_vars(stmts);
    fn expr(e: &Expr, out: &mut BTreeSet<String>) {
        if let Expr::Var(v) = e {
            out.insert(v.clone());
        }
        e.children().into_iter().for_each(|c| expr(c, out));
    }
    fn go(stmts: &[Stmt], out: &mut BTreeSet<String>) {
        for s in stmts {
            match s {
                Stmt::For {
                    start, end, body, ..
                } => {
                    expr(start, out);
                    expr(end, out);
                    go(body, out);
                }
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    expr(cond, out);
                    go(then_body, out);
                    go(else_body, out);
                }
                Stmt::Let { value, .. } | Stmt::Assign { value, .. } => expr(value, out),
                Stmt::Decl { init, .. } => expr(init, out),
                Stmt::While { cond, body } => {
                    expr(cond, out);
                    go(body, out);
                }
                Stmt::Store { indices, value, .. } => {
                    indices.iter().for_each(|i| expr(i, out));
                    expr(value, out);
                }
                Stmt::Block { init, body, .. } => {
                    go(init, out);
                    go(body, out);
                }
                Stmt::Alloc { extent, .. } => expr(extent, out),
                Stmt::Barrier => {}
                Stmt::Atomic { indices, value, .. } => {
                    indices.iter().for_each(|i| expr(i, out));
                    expr(value, out);
                }
                Stmt::Attr { value, body, .. } => {
                    expr(value, out);
                    go(body, out);
                }
            }
        }
    }
    go(stmts, &mut out);
    out
}

/// What a statement list reads and writes.
#[derive(Debug, Default)]
pub struct Summary {
    /// Every access: buffer, indices, is a store.
    pub accesses: Vec<(String, Vec<Expr>, bool)>,
}

impl Summary {
    /// The accesses of `stmts`.
    pub fn of(stmts: &[Stmt]) -> Summary {
        let mut acc = Vec::new();
        accesses(stmts, &mut acc);
        Summary { accesses: acc }
    }
    /// Buffers written.
    pub fn written(&self) -> BTreeSet<String> {
        self.accesses
            .iter()
            .filter(|a| a.2)
            .map(|a| a.0.clone())
            .collect()
    }
    /// Buffers read.
    pub fn read(&self) -> BTreeSet<String> {
        self.accesses
            .iter()
            .filter(|a| !a.2)
            .map(|a| a.0.clone())
            .collect()
    }
    /// Buffers read or written.
    pub fn touched(&self) -> BTreeSet<String> {
        self.accesses.iter().map(|a| a.0.clone()).collect()
    }
    /// The index lists of accesses to `buffer` (stores when `stores`, loads otherwise).
    pub fn lists(&self, buffer: &str, stores: bool) -> Vec<&Vec<Expr>> {
        self.accesses
            .iter()
            .filter(|a| a.0 == buffer && a.2 == stores)
            .map(|a| &a.1)
            .collect()
    }
}

/// Names of the blocks in a statement list, at any depth.
pub fn block_names(stmts: &[Stmt]) -> Vec<String> {
    crate::loops::blocks(stmts)
}

/// Strips `depth` perfectly nested loops off `s`: their (var, start, end) and the innermost
/// body; `None` when `s` is not such a chain.
#[allow(clippy::type_complexity)]
pub fn peel(s: Stmt, depth: usize) -> Option<(Vec<(String, Expr, Expr)>, Vec<Stmt>)> {
    let mut headers = Vec::new();
    let mut cur = vec![s];
    for _ in 0..depth {
        if cur.len() != 1 {
            return None;
        }
        match cur.pop().expect("one") {
            Stmt::For {
                var,
                start,
                end,
                body,
                ..
            } => {
                headers.push((var, start, end));
                cur = body;
            }
            _ => return None,
        }
    }
    Some((headers, cur))
}
