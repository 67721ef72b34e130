//! Context-aware extraction from the e-graph: the cost of a node depends on which entries it
//! sees, so the best term is chosen per (e-class, region) instead of per e-class.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use egg::{EGraph, Id};

use super::cost::{eval_op, Cost, CostWeights, Op};
use super::lang::{Format, Layout, MAX_DEPTH};
use super::region::Region;
use super::stats::MatrixStats;

/// A term chosen for an e-class in a region, with its cost and the region it leaves.
#[derive(Clone, Debug)]
pub(crate) struct Choice {
    pub(crate) cost: Cost,
    pub(crate) layout: Layout,
    residual: Region,
}

/// Picks, for each (e-class, region), the term of least weighted cost (ties: fewer nodes, then
/// the smaller term), never following a cycle and never nesting column parts.
pub(crate) struct Extractor<'a> {
    egraph: &'a EGraph<Format, ()>,
    stats: &'a MatrixStats,
    weights: CostWeights,
    memo: HashMap<(Id, Region), Option<Choice>>,
    active: HashSet<(Id, Region)>,
}

impl<'a> Extractor<'a> {
    pub(crate) fn new(
        egraph: &'a EGraph<Format, ()>,
        stats: &'a MatrixStats,
        weights: CostWeights,
    ) -> Self {
        Extractor {
            egraph,
            stats,
            weights,
            memo: HashMap::new(),
            active: HashSet::new(),
        }
    }

    /// The best term of the class `id` for the whole matrix.
    pub(crate) fn best(&mut self, id: Id) -> Option<Choice> {
        self.best_class(id, &Region::whole(self.stats), 0)
    }

    /// The best term whose root is `node`, for the whole matrix.
    pub(crate) fn best_rooted_at(&mut self, node: &Format) -> Option<Choice> {
        self.best_node(node, &Region::whole(self.stats), 0)
    }

    fn better(&self, a: &Choice, b: &Choice) -> bool {
        let (ta, tb) = (a.cost.total(&self.weights), b.cost.total(&self.weights));
        let order = ta
            .total_cmp(&tb)
            .then(a.layout.size().cmp(&b.layout.size()))
            .then_with(|| a.layout.cmp(&b.layout));
        order == Ordering::Less
    }

    fn best_class(&mut self, id: Id, region: &Region, depth: usize) -> Option<Choice> {
        let key = (self.egraph.find(id), region.clone());
        if let Some(done) = self.memo.get(&key) {
            return done.clone();
        }
        if depth > MAX_DEPTH || !self.active.insert(key.clone()) {
            return None;
        }
        let mut nodes = self.egraph[key.0].nodes.clone();
        nodes.sort();
        let mut best: Option<Choice> = None;
        for node in &nodes {
            if let Some(choice) = self.best_node(node, region, depth) {
                if best.as_ref().is_none_or(|b| self.better(&choice, b)) {
                    best = Some(choice);
                }
            }
        }
        self.active.remove(&key);
        self.memo.insert(key, best.clone());
        best
    }

    fn best_node(&mut self, node: &Format, region: &Region, depth: usize) -> Option<Choice> {
        let (op, kids) = op_of(self.egraph, node)?;
        if matches!(op, Op::ColPart(..)) && region.in_part {
            // The cost model cannot tell nested partitions apart; they are never extracted.
            return None;
        }
        let mut layouts: Vec<Option<Layout>> = vec![None; kids.len()];
        let stats = self.stats;
        let (cost, residual) = eval_op(op, region, stats, &mut |i, sub| {
            let choice = self.best_class(kids[i], sub, depth + 1)?;
            layouts[i] = Some(choice.layout);
            Some((choice.cost, choice.residual))
        })?;
        let layouts: Option<Vec<Layout>> = layouts.into_iter().collect();
        Some(Choice {
            cost,
            layout: build(op, layouts?)?,
            residual,
        })
    }
}

/// The operator of an e-node with its parameters read from the number e-classes, and its format
/// children; `None` for numbers and ill-sorted nodes.
pub(crate) fn op_of(egraph: &EGraph<Format, ()>, node: &Format) -> Option<(Op, Vec<Id>)> {
    let num = |id: Id| {
        egraph[id].nodes.iter().find_map(|n| match n {
            Format::Num(v) => Some(*v),
            _ => None,
        })
    };
    Some(match node {
        Format::Csr => (Op::Csr, vec![]),
        Format::Remainder => (Op::Remainder, vec![]),
        Format::Ell(w) => (Op::Ell(num(*w)?), vec![]),
        Format::Bsr(b) => (Op::Bsr(num(*b)?), vec![]),
        Format::Padded(t) => (Op::Padded(num(*t)?), vec![]),
        Format::SplitRows(w) => (Op::SplitRows(num(*w)?), vec![]),
        Format::Sell([c, s]) => (Op::Sell(num(*c)?, num(*s)?), vec![]),
        Format::Dia([d, c]) => (Op::Dia(num(*d)?, num(*c)?), vec![]),
        Format::Panels(w) => (Op::Panels(num(*w)?), vec![]),
        Format::Rcm => (Op::Rcm, vec![]),
        Format::Bucket([lo, hi, f]) => (Op::Bucket(num(*lo)?, num(*hi)?), vec![*f]),
        Format::ColPart([k, p, f]) => (Op::ColPart(num(*k)?, num(*p)?), vec![*f]),
        Format::Sum([a, b]) => (Op::Sum, vec![*a, *b]),
        Format::Num(_) => return None,
    })
}

/// Builds a layout from an operator and its format children's layouts.
pub(crate) fn build(op: Op, kids: Vec<Layout>) -> Option<Layout> {
    let mut kids = kids.into_iter().map(Box::new);
    Some(match op {
        Op::Csr => Layout::Csr,
        Op::Remainder => Layout::Remainder,
        Op::Ell(width) => Layout::Ell { width },
        Op::Bsr(block) => Layout::Bsr { block },
        Op::Padded(tile) => Layout::Padded { tile },
        Op::SplitRows(width) => Layout::SplitRows { width },
        Op::Sell(lanes, sigma) => Layout::Sell { lanes, sigma },
        Op::Dia(diagonals, lanes) => Layout::Dia { diagonals, lanes },
        Op::Panels(width) => Layout::Panels { width },
        Op::Rcm => Layout::Rcm,
        Op::Bucket(lo, hi) => Layout::Bucket {
            lo,
            hi,
            inner: kids.next()?,
        },
        Op::ColPart(parts, part) => Layout::ColPart {
            parts,
            part,
            inner: kids.next()?,
        },
        Op::Sum => Layout::Sum(kids.next()?, kids.next()?),
    })
}

/// Up to `limit` distinct terms of each e-class, walking e-nodes in sorted order and pairing
/// children's terms along diagonals so that early terms vary every child.
pub(crate) struct TermWalker<'a> {
    egraph: &'a EGraph<Format, ()>,
    limit: usize,
    memo: HashMap<Id, Vec<Layout>>,
    active: HashSet<Id>,
}

impl<'a> TermWalker<'a> {
    pub(crate) fn new(egraph: &'a EGraph<Format, ()>, limit: usize) -> Self {
        TermWalker {
            egraph,
            limit,
            memo: HashMap::new(),
            active: HashSet::new(),
        }
    }

    pub(crate) fn terms(&mut self, id: Id) -> Vec<Layout> {
        self.class_terms(id, 0)
    }

    fn class_terms(&mut self, id: Id, depth: usize) -> Vec<Layout> {
        let id = self.egraph.find(id);
        if let Some(done) = self.memo.get(&id) {
            return done.clone();
        }
        if depth > MAX_DEPTH || !self.active.insert(id) {
            return Vec::new();
        }
        let mut nodes = self.egraph[id].nodes.clone();
        nodes.sort();
        let mut out = Vec::new();
        for node in &nodes {
            let Some((op, kids)) = op_of(self.egraph, node) else {
                continue;
            };
            let options: Vec<Vec<Layout>> = kids
                .iter()
                .map(|k| self.class_terms(*k, depth + 1))
                .collect();
            for combo in diagonal(&options, self.limit.saturating_sub(out.len())) {
                out.extend(build(op, combo));
            }
            if out.len() >= self.limit {
                break;
            }
        }
        self.active.remove(&id);
        self.memo.insert(id, out.clone());
        out
    }
}

/// Up to `limit` combinations picking one item per list, by increasing sum of indices.
fn diagonal(options: &[Vec<Layout>], limit: usize) -> Vec<Vec<Layout>> {
    match options {
        [] => vec![vec![]].into_iter().take(limit).collect(),
        [only] => only.iter().take(limit).map(|l| vec![l.clone()]).collect(),
        [a, b] => {
            let mut out = Vec::new();
            if a.is_empty() || b.is_empty() {
                return out;
            }
            let (last_a, last_b) = (a.len() - 1, b.len() - 1);
            for sum in 0..=last_a + last_b {
                for i in sum.saturating_sub(last_b)..=sum.min(last_a) {
                    if out.len() >= limit {
                        return out;
                    }
                    out.push(vec![a[i].clone(), b[sum - i].clone()]);
                }
            }
            out
        }
        _ => unreachable!("format nodes have at most two format children"),
    }
}
