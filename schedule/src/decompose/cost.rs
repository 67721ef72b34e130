//! The extraction cost: an abstract evaluation of a layout over a matrix's statistics that
//! estimates stored bytes, wasted padding and work, part by part.
//!
//! Work counts slots touched plus overheads. CSR-like parts run rows in lock-step groups of
//! [`GROUP`] (one lane per row), so a group costs its longest row on every lane; ELL, BSR and
//! split rows are regular. Parts that must accumulate (column parts, split rows) pay [`ATOMIC`]
//! per row written. Empty parts cost nothing.

use serde::{Deserialize, Serialize};

use super::lang::{Decomposition, Layout};
use super::region::{enter_colpart, exit_colpart, shrink, Region};
use super::stats::{Histogram, MatrixStats};

/// Rows run in lock-step by one group of lanes in CSR-like parts.
pub const GROUP: u32 = 32;
/// Work per atomic accumulation of a row (column parts, split rows).
pub const ATOMIC: f64 = 2.0;
/// Work per row of a CSR-like part for reading its bounds.
pub const ROW_BOUNDS: f64 = 2.0;
const INDEX_BYTES: f64 = 4.0;
const VALUE_BYTES: f64 = 8.0;

/// Estimated cost of a decomposition on a matrix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// Bytes of index and value arrays, padding included.
    pub bytes: f64,
    /// Padding slots (stored but holding no entry).
    pub padding: f64,
    /// Slots touched plus per-row, per-block and atomic overheads, in slot units.
    pub work: f64,
}

/// How [`Cost::total`] weighs the three figures.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostWeights {
    /// Weight per byte.
    pub bytes: f64,
    /// Weight per padding slot.
    pub padding: f64,
    /// Weight per unit of work.
    pub work: f64,
}

impl Default for CostWeights {
    fn default() -> Self {
        CostWeights {
            bytes: 0.25,
            padding: 0.5,
            work: 1.0,
        }
    }
}

impl Cost {
    /// The weighted sum of the three figures.
    pub fn total(&self, weights: &CostWeights) -> f64 {
        self.bytes * weights.bytes + self.padding * weights.padding + self.work * weights.work
    }

    fn plus(self, other: Cost) -> Cost {
        Cost {
            bytes: self.bytes + other.bytes,
            padding: self.padding + other.padding,
            work: self.work + other.work,
        }
    }
}

/// The bytes and work of a part that its conversion would refuse (a `dia` part of a matrix
/// with more diagonals): finite, so that weighted sums stay comparable, and larger than any
/// real part's.
pub const UNCONVERTIBLE: f64 = 1e30;

/// Estimates the cost of `decomposition` on the matrix described by `stats`.
pub fn estimate(stats: &MatrixStats, decomposition: &Decomposition) -> Cost {
    eval_layout(decomposition.layout(), &Region::whole(stats), stats).0
}

fn eval_layout(layout: &Layout, region: &Region, stats: &MatrixStats) -> (Cost, Region) {
    let (op, children) = Op::of(layout);
    let result = eval_op(op, region, stats, &mut |i, sub| {
        Some(eval_layout(children[i], sub, stats))
    });
    result.unwrap_or_else(|| unreachable!("evaluating a layout never fails"))
}

/// A node's operator with its parameters; format children are evaluated through a callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Csr,
    Remainder,
    Ell(u32),
    Bsr(u32),
    Padded(u32),
    SplitRows(u32),
    Sell(u32, u32),
    Dia(u32, u32),
    Panels(u32),
    Rcm,
    Bucket(u32, u32),
    ColPart(u32, u32),
    Sum,
}

impl Op {
    pub(crate) fn of(layout: &Layout) -> (Op, Vec<&Layout>) {
        match layout {
            Layout::Csr => (Op::Csr, vec![]),
            Layout::Remainder => (Op::Remainder, vec![]),
            Layout::Ell { width } => (Op::Ell(*width), vec![]),
            Layout::Bsr { block } => (Op::Bsr(*block), vec![]),
            Layout::Padded { tile } => (Op::Padded(*tile), vec![]),
            Layout::SplitRows { width } => (Op::SplitRows(*width), vec![]),
            Layout::Sell { lanes, sigma } => (Op::Sell(*lanes, *sigma), vec![]),
            Layout::Dia { diagonals, lanes } => (Op::Dia(*diagonals, *lanes), vec![]),
            Layout::Panels { width } => (Op::Panels(*width), vec![]),
            Layout::Rcm => (Op::Rcm, vec![]),
            Layout::Bucket { lo, hi, inner } => (Op::Bucket(*lo, *hi), vec![&**inner]),
            Layout::ColPart { parts, part, inner } => (Op::ColPart(*parts, *part), vec![&**inner]),
            Layout::Sum(a, b) => (Op::Sum, vec![&**a, &**b]),
        }
    }
}

/// What a node costs and the region it leaves; `None` where a child could not be evaluated.
pub(crate) type Outcome = Option<(Cost, Region)>;

/// Evaluates `op` on `region`; `child(i, region)` evaluates the `i`-th format child.
pub(crate) fn eval_op(
    op: Op,
    region: &Region,
    stats: &MatrixStats,
    child: &mut dyn FnMut(usize, &Region) -> Outcome,
) -> Outcome {
    match op {
        Op::Bucket(lo, hi) => {
            let (lo, hi) = (lo as usize, hi as usize);
            let inside: Histogram = region
                .hist
                .range(lo..hi.max(lo))
                .map(|(l, c)| (*l, *c))
                .collect();
            if inside.is_empty() {
                let (cost, _) = child(0, &region.with_hist(inside))?;
                return Some((cost, region.clone()));
            }
            let (cost, left) = child(0, &region.with_hist(inside))?;
            let mut hist: Histogram = region
                .hist
                .iter()
                .filter(|(l, _)| !(lo..hi).contains(*l))
                .map(|(l, c)| (*l, *c))
                .collect();
            for (len, count) in left.hist {
                *hist.entry(len).or_default() += count;
            }
            Some((cost, region.with_hist(hist)))
        }
        Op::ColPart(k, p) => {
            let sub = enter_colpart(region, stats, k, p);
            let (mut cost, left) = child(0, &sub)?;
            if k > 1 {
                cost.work += ATOMIC * sub.rows();
            }
            Some((cost, exit_colpart(region, &sub, &left, k, p)))
        }
        Op::Sum => {
            let (first, left) = child(0, region)?;
            let (second, rest) = child(1, &left)?;
            Some((first.plus(second), rest))
        }
        Op::Csr
        | Op::Remainder
        | Op::Rcm
        | Op::Dia(..)
        | Op::Ell(_)
        | Op::Bsr(_)
        | Op::Padded(_)
        | Op::SplitRows(_)
        | Op::Panels(_)
        | Op::Sell(..) => Some(leaf(op, region, stats)),
    }
}

/// Work of a lock-step part: every group of [`GROUP`] lanes (rows, empty ones included) runs as
/// long as its longest row; the expected maximum is taken over `n_lanes` iid draws.
fn lock_step(hist: &Histogram, n_lanes: f64) -> f64 {
    lock_step_by(hist, n_lanes, f64::from(GROUP))
}

/// [`lock_step`] with groups of `group` lanes.
fn lock_step_by(hist: &Histogram, n_lanes: f64, group: f64) -> f64 {
    if n_lanes <= 0.0 {
        return 0.0;
    }
    let group = n_lanes.min(group.max(1.0));
    let empty = (n_lanes - hist.values().sum::<usize>() as f64).max(0.0);
    let mut below = empty / n_lanes;
    let mut expected_max = 0.0;
    for (len, count) in hist {
        let at_most = below + *count as f64 / n_lanes;
        expected_max += *len as f64 * (at_most.min(1.0).powf(group) - below.powf(group));
        below = at_most;
    }
    n_lanes * expected_max
}

fn leaf(op: Op, region: &Region, stats: &MatrixStats) -> (Cost, Region) {
    let (rows, nnz) = (region.rows(), region.nnz());
    if nnz == 0.0 {
        return (Cost::default(), region.clone());
    }
    let n_rows = stats.n_rows as f64;
    let empty = region.with_hist(Histogram::new());
    let entry = INDEX_BYTES + VALUE_BYTES;
    match op {
        // `rcm` is CSR with a row id per row: its gain, the dense operand's rows staying in
        // cache, is not in this model (the built-in schedules decide it from a simulation of
        // that cache, `lacuna::driver::spmm_rcm_gain`).
        Op::Csr | Op::Remainder | Op::Rcm => {
            let ids = if op == Op::Rcm { n_rows } else { 0.0 };
            let bytes = INDEX_BYTES * (n_rows + 1.0 + ids) + entry * nnz;
            let work = lock_step(&region.hist, n_rows) + ROW_BOUNDS * n_rows;
            (
                Cost {
                    bytes,
                    padding: 0.0,
                    work,
                },
                empty,
            )
        }
        Op::Padded(tile) => {
            let tile = tile.max(1) as usize;
            let mut padded = Histogram::new();
            for (len, count) in &region.hist {
                *padded
                    .entry(len.div_ceil(tile).saturating_mul(tile))
                    .or_default() += count;
            }
            let slots: f64 = padded.iter().map(|(l, c)| *l as f64 * *c as f64).sum();
            let bytes = INDEX_BYTES * (n_rows + 1.0) + entry * slots;
            let work = lock_step(&padded, n_rows) + ROW_BOUNDS * n_rows;
            (
                Cost {
                    bytes,
                    padding: slots - nnz,
                    work,
                },
                empty,
            )
        }
        Op::Ell(width) => {
            let width = width as usize;
            let slots = rows * width as f64;
            let mut left = Histogram::new();
            for (len, count) in region.hist.range(width.saturating_add(1)..) {
                *left.entry(len - width).or_default() += count;
            }
            let kept = region.with_hist(left);
            let padding = slots - (nnz - kept.nnz());
            (
                Cost {
                    bytes: entry * slots + INDEX_BYTES * rows,
                    padding,
                    work: slots + rows,
                },
                kept,
            )
        }
        Op::SplitRows(width) => {
            let width = width.max(1) as usize;
            let chunks: f64 = region
                .hist
                .iter()
                .map(|(l, c)| l.div_ceil(width) as f64 * *c as f64)
                .sum();
            let slots = chunks * width as f64;
            let cost = Cost {
                bytes: entry * slots + INDEX_BYTES * chunks,
                padding: slots - nnz,
                work: slots + chunks * (1.0 + ATOMIC),
            };
            (cost, empty)
        }
        Op::Sell(lanes, sigma) => {
            // Unsorted groups run as long as the longest of `lanes` iid rows; rows sorted
            // within windows of more than `lanes` rows are taken as sorted throughout (groups
            // of equal lengths but at the windows' edges).
            let lanes_f = f64::from(lanes.max(1));
            let steps = if sigma > lanes {
                sorted_group_steps(&region.hist, lanes.max(1) as usize)
            } else {
                lock_step_by(&region.hist, rows, lanes_f) / lanes_f
            };
            let groups = (rows / lanes_f).ceil();
            let slots = steps * lanes_f;
            let cost = Cost {
                bytes: entry * slots
                    + INDEX_BYTES * (groups + 1.0)
                    + INDEX_BYTES * groups * lanes_f,
                padding: (slots - nnz).max(0.0),
                work: slots + ROW_BOUNDS * groups + rows,
            };
            (cost, empty)
        }
        Op::Panels(width) => {
            // A row of `l` entries falls into `k (1 - (1 - 1/k)^l)` of the `k` panels when its
            // columns are spread evenly; each panel row reads its bounds and row id and adds
            // into the result.
            let k = (stats.n_cols as f64 / f64::from(width.max(1)))
                .ceil()
                .max(1.0);
            let panel_rows: f64 = region
                .hist
                .iter()
                .map(|(l, c)| *c as f64 * k * (1.0 - (1.0 - 1.0 / k).powf(*l as f64)))
                .sum();
            let cost = Cost {
                bytes: entry * nnz + INDEX_BYTES * (2.0 * panel_rows + k + 1.0),
                padding: 0.0,
                work: nnz + (ROW_BOUNDS + ATOMIC) * panel_rows,
            };
            (cost, empty)
        }
        Op::Dia(most, _) if stats.diagonals > most as usize => {
            // The conversion would fail (a part of the matrix may have fewer diagonals, but the
            // whole matrix's are what the statistics know): never chosen.
            let never = Cost {
                bytes: UNCONVERTIBLE,
                padding: 0.0,
                work: UNCONVERTIBLE,
            };
            (never, empty)
        }
        Op::Dia(_, lanes) => {
            // Every row of the matrix in blocks of `lanes`, one slot per diagonal and row; no
            // column indices, one offset per diagonal.
            let lanes_f = f64::from(lanes.max(1));
            let blocks = (n_rows / lanes_f).ceil();
            let diagonals = stats.diagonals as f64;
            let slots = blocks * lanes_f * diagonals;
            let cost = Cost {
                bytes: VALUE_BYTES * slots + INDEX_BYTES * diagonals,
                padding: (slots - nnz).max(0.0),
                work: slots + ROW_BOUNDS * blocks,
            };
            (cost, empty)
        }
        Op::Bsr(block) => {
            let (n_blocks, claimed) = blocks(region, stats, block);
            let area = f64::from(block) * f64::from(block);
            let slots = n_blocks * area;
            let cost = Cost {
                bytes: INDEX_BYTES
                    * ((stats.n_rows / block.max(1) as usize) as f64 + 1.0 + n_blocks)
                    + VALUE_BYTES * slots,
                padding: slots - claimed,
                work: slots + n_blocks,
            };
            let left = region.with_hist(shrink(&region.hist, claimed / nnz));
            (cost, left)
        }
        Op::Bucket(..) | Op::ColPart(..) | Op::Sum => unreachable!("{op:?} is not a leaf"),
    }
}

/// The steps of groups of `lanes` rows taken in order of decreasing length: each group as long
/// as its first row.
fn sorted_group_steps(hist: &Histogram, lanes: usize) -> f64 {
    let mut steps = 0.0;
    let mut filled = 0usize;
    for (len, count) in hist.iter().rev() {
        // Groups starting among these rows (the first row of a group is its longest).
        let start = filled.div_ceil(lanes);
        filled = filled.saturating_add(*count);
        let end = filled.div_ceil(lanes);
        steps += (end.saturating_sub(start)) as f64 * *len as f64;
    }
    steps
}

/// Estimated (non-empty blocks, entries inside full blocks) of `region` for block size `block`.
fn blocks(region: &Region, stats: &MatrixStats, block: u32) -> (f64, f64) {
    let nnz = region.nnz();
    let area = f64::from(block) * f64::from(block);
    match stats.blocks.get(&block) {
        Some(whole) if region.is_whole() => (whole.n_blocks as f64, whole.nnz as f64),
        Some(whole) => {
            let fraction = nnz / (stats.nnz as f64).max(1.0);
            let claimed = whole.nnz as f64 * fraction;
            // At least a full block's worth of entries per block, at most one entry per block.
            let n_blocks = (whole.n_blocks as f64 * fraction)
                .max(claimed / area)
                .min(claimed);
            (n_blocks, claimed)
        }
        None => {
            let b = block as usize;
            let covered = |n: usize| {
                if n == 0 {
                    0.0
                } else {
                    (n / b * b) as f64 / n as f64
                }
            };
            let claimed = nnz * covered(stats.n_rows) * covered(stats.n_cols);
            let most = ((stats.n_rows / b) as f64) * ((stats.n_cols / b) as f64);
            (claimed.min(most), claimed)
        }
    }
}
