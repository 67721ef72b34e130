//! The storage of each part of a materialized decomposition, and summing parts back to triples.

use serde::{Deserialize, Serialize};

use super::lang::Layout;
use super::matrix::CsrMatrix;

/// A row or column filter on the way from the root to a part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Filter {
    /// Rows whose length (in the context) lies in `[lo, hi)`.
    Bucket {
        /// Smallest length, inclusive.
        lo: u32,
        /// Largest length, exclusive.
        hi: u32,
    },
    /// Columns in part `part` of `parts`.
    ColPart {
        /// Number of parts.
        parts: u32,
        /// Which part.
        part: u32,
    },
}

/// ELL storage: `rows.len()` rows of `width` slots each, row-major; padding slots have
/// `mask == false`, column 0 and value 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EllStorage {
    /// Slots per row.
    pub width: usize,
    /// Matrix row of each stored row (repeated for split rows).
    pub rows: Vec<usize>,
    /// Column of each slot.
    pub indices: Vec<usize>,
    /// Value of each slot.
    pub values: Vec<f64>,
    /// Whether each slot holds an entry.
    pub mask: Vec<bool>,
}

/// BSR storage of the full `block`×`block` blocks; block row `i` holds blocks
/// `indptr[i]..indptr[i + 1]`, each `block * block` values row-major, explicit zeros masked out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BsrStorage {
    /// Block edge.
    pub block: usize,
    /// Number of block rows (`n_rows / block`).
    pub n_block_rows: usize,
    /// Number of block columns (`n_cols / block`).
    pub n_block_cols: usize,
    /// Block positions per block row.
    pub indptr: Vec<usize>,
    /// Block column of each block.
    pub indices: Vec<usize>,
    /// Values, `block * block` per block.
    pub values: Vec<f64>,
    /// Whether each value slot holds an entry.
    pub mask: Vec<bool>,
}

/// CSR storage with each row padded to a multiple of `tile` slots (padding masked out).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaddedStorage {
    /// Row-length granule.
    pub tile: usize,
    /// Row positions, `n_rows + 1` entries.
    pub indptr: Vec<usize>,
    /// Column of each slot.
    pub indices: Vec<usize>,
    /// Value of each slot.
    pub values: Vec<f64>,
    /// Whether each slot holds an entry.
    pub mask: Vec<bool>,
}

/// Sliced ELL storage (SELL-C-σ): groups of `lanes` rows; group `g` holds the steps
/// `steps[g]..steps[g + 1]`, and slot `l` of step `q` (at `q * lanes + l`) is the next entry of
/// the group's `l`-th row, `rows[g * lanes + l]`. Padding slots (past a row's end, and every slot
/// of a lane beyond the part's last row, whose row repeats the group's first) have
/// `mask == false`, column 0 and value 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SellStorage {
    /// Rows per group.
    pub lanes: usize,
    /// Rows per sorting window.
    pub sigma: usize,
    /// Matrix row of each lane of each group, `groups * lanes` entries.
    pub rows: Vec<usize>,
    /// Step positions per group, `groups + 1` entries.
    pub steps: Vec<usize>,
    /// Column of each slot.
    pub indices: Vec<usize>,
    /// Value of each slot.
    pub values: Vec<f64>,
    /// Whether each slot holds an entry.
    pub mask: Vec<bool>,
}

impl SellStorage {
    /// Number of groups.
    pub fn groups(&self) -> usize {
        self.steps.len().saturating_sub(1)
    }

    /// The longest group, in steps.
    pub fn max_steps(&self) -> usize {
        self.steps
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]))
            .max()
            .unwrap_or(0)
    }
}

/// DIA storage, diagonal-major, blocked by rows: `offsets` are the part's diagonals
/// (`column - row`) in increasing order; diagonal `k` holds, for each block `b` of `lanes`
/// rows, the slots `(k * blocks + b) * lanes + l`, one per lane `l`, for row `b * lanes + l`
/// and column `row + offsets[k]`. Padding slots (no entry there, a column outside the matrix,
/// a row past the last) have `mask == false` and value 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiaStorage {
    /// Rows per block.
    pub lanes: usize,
    /// Rows of the matrix.
    pub n_rows: usize,
    /// The diagonals, increasing.
    pub offsets: Vec<i64>,
    /// Value of each slot.
    pub values: Vec<f64>,
    /// Whether each slot holds an entry.
    pub mask: Vec<bool>,
}

impl DiaStorage {
    /// Number of row blocks.
    pub fn blocks(&self) -> usize {
        self.n_rows.div_ceil(self.lanes.max(1))
    }

    /// The row and column of slot `slot` (the column may lie outside the matrix for padding).
    pub fn position(&self, slot: usize) -> (usize, i64) {
        let lanes = self.lanes.max(1);
        let per_diagonal = (self.blocks() * lanes).max(1);
        let (k, b, l) = (
            slot / per_diagonal,
            slot % per_diagonal / lanes,
            slot % lanes,
        );
        let row = b * lanes + l;
        let off = self.offsets.get(k).copied().unwrap_or(0);
        (row, row as i64 + off)
    }
}

/// Column-panel storage (`panels`): the columns cut into ranges of `width`; panel `p` holds the
/// panel rows `panel_rows[p]..panel_rows[p + 1]`, panel row `r` being matrix row `rows[r]` with
/// its entries of the panel at `indptr[r]..indptr[r + 1]` (columns increasing). Within a panel
/// the rows increase; a matrix row appears in every panel where it has an entry. No padding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PanelsStorage {
    /// Columns per panel.
    pub width: usize,
    /// Panel rows per panel, `panels + 1` positions.
    pub panel_rows: Vec<usize>,
    /// Matrix row of each panel row.
    pub rows: Vec<usize>,
    /// Entry positions per panel row, `rows.len() + 1` entries.
    pub indptr: Vec<usize>,
    /// Column of each entry.
    pub indices: Vec<usize>,
    /// Value of each entry.
    pub values: Vec<f64>,
}

impl PanelsStorage {
    /// Number of panels.
    pub fn panels(&self) -> usize {
        self.panel_rows.len().saturating_sub(1)
    }
}

/// CSR with row ids (`rcm`): stored row `r` is matrix row `rows[r]`, its entries at
/// `indptr[r]..indptr[r + 1]` (columns increasing). `rows` is a permutation of the matrix's
/// rows: every row once, empty ones included.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowsStorage {
    /// Matrix row of each stored row.
    pub rows: Vec<usize>,
    /// Entry positions per stored row, `rows.len() + 1` entries.
    pub indptr: Vec<usize>,
    /// Column of each entry.
    pub indices: Vec<usize>,
    /// Value of each entry.
    pub values: Vec<f64>,
}

/// The arrays of one part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Storage {
    /// `csr` or `remainder`: a matrix of the original shape holding this part's entries.
    Csr(CsrMatrix),
    /// `ell`: one row per matrix row.
    Ell(EllStorage),
    /// `split_rows`: one row per chunk; a matrix row may appear several times.
    SplitRows(EllStorage),
    /// `bsr`.
    Bsr(BsrStorage),
    /// `padded`.
    Padded(PaddedStorage),
    /// `sell`.
    Sell(SellStorage),
    /// `dia`.
    Dia(DiaStorage),
    /// `panels`.
    Panels(PanelsStorage),
    /// `rcm`.
    Rows(RowsStorage),
}

impl Storage {
    /// The value slots, padding included, in storage order.
    pub fn values(&self) -> &[f64] {
        match self {
            Storage::Csr(m) => &m.values,
            Storage::Ell(e) | Storage::SplitRows(e) => &e.values,
            Storage::Bsr(s) => &s.values,
            Storage::Padded(s) => &s.values,
            Storage::Sell(s) => &s.values,
            Storage::Dia(s) => &s.values,
            Storage::Panels(s) => &s.values,
            Storage::Rows(s) => &s.values,
        }
    }

    /// The value slots, mutable (see [`Storage::values`]).
    pub fn values_mut(&mut self) -> &mut Vec<f64> {
        match self {
            Storage::Csr(m) => &mut m.values,
            Storage::Ell(e) | Storage::SplitRows(e) => &mut e.values,
            Storage::Bsr(s) => &mut s.values,
            Storage::Padded(s) => &mut s.values,
            Storage::Sell(s) => &mut s.values,
            Storage::Dia(s) => &mut s.values,
            Storage::Panels(s) => &mut s.values,
            Storage::Rows(s) => &mut s.values,
        }
    }
}

/// One part of a materialized decomposition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Part {
    /// The leaf of the decomposition this part comes from, e.g. `Layout::Ell { width: 4 }`.
    pub leaf: Layout,
    /// The buckets and column parts enclosing the leaf, outermost first.
    pub filters: Vec<Filter>,
    /// The arrays.
    pub storage: Storage,
    /// Whether some row this part writes is also written by another part or twice by this
    /// one, so that a kernel must accumulate (atomic adds on a GPU) instead of storing.
    pub accumulate: bool,
}

impl Part {
    /// The stored entries `(row, col, value)`, padding left out, in storage order.
    pub fn entries(&self) -> Vec<(usize, usize, f64)> {
        let mut out = Vec::new();
        match &self.storage {
            Storage::Csr(m) => {
                for (row, w) in m.indptr.windows(2).enumerate() {
                    let range = w[0]..w[1].max(w[0]);
                    let cols = m.indices.get(range.clone()).unwrap_or_default();
                    let vals = m.values.get(range).unwrap_or_default();
                    out.extend(cols.iter().zip(vals).map(|(c, v)| (row, *c, *v)));
                }
            }
            Storage::Ell(e) | Storage::SplitRows(e) => {
                if e.width > 0 {
                    let slots = e.indices.chunks(e.width).zip(e.values.chunks(e.width));
                    for ((row, (cols, vals)), mask) in
                        e.rows.iter().zip(slots).zip(e.mask.chunks(e.width))
                    {
                        for ((c, v), m) in cols.iter().zip(vals).zip(mask) {
                            if *m {
                                out.push((*row, *c, *v));
                            }
                        }
                    }
                }
            }
            Storage::Padded(p) => {
                for (row, w) in p.indptr.windows(2).enumerate() {
                    let range = w[0]..w[1].max(w[0]);
                    let cols = p.indices.get(range.clone()).unwrap_or_default();
                    let vals = p.values.get(range.clone()).unwrap_or_default();
                    let mask = p.mask.get(range).unwrap_or_default();
                    for ((c, v), m) in cols.iter().zip(vals).zip(mask) {
                        if *m {
                            out.push((row, *c, *v));
                        }
                    }
                }
            }
            Storage::Sell(s) => {
                for (g, w) in s.steps.windows(2).enumerate() {
                    for q in w[0]..w[1].max(w[0]) {
                        for l in 0..s.lanes {
                            let slot = q.saturating_mul(s.lanes).saturating_add(l);
                            let row = s.rows.get(g.saturating_mul(s.lanes).saturating_add(l));
                            if let (Some(row), Some(c), Some(v), Some(true)) = (
                                row,
                                s.indices.get(slot),
                                s.values.get(slot),
                                s.mask.get(slot),
                            ) {
                                out.push((*row, *c, *v));
                            }
                        }
                    }
                }
            }
            Storage::Panels(PanelsStorage {
                rows,
                indptr,
                indices,
                values,
                ..
            })
            | Storage::Rows(RowsStorage {
                rows,
                indptr,
                indices,
                values,
            }) => {
                for (r, w) in indptr.windows(2).enumerate() {
                    let Some(row) = rows.get(r) else { continue };
                    let range = w[0]..w[1].max(w[0]);
                    let cols = indices.get(range.clone()).unwrap_or_default();
                    let vals = values.get(range).unwrap_or_default();
                    out.extend(cols.iter().zip(vals).map(|(c, v)| (*row, *c, *v)));
                }
            }
            Storage::Dia(d) => {
                for (slot, (v, m)) in d.values.iter().zip(&d.mask).enumerate() {
                    let (row, col) = d.position(slot);
                    if *m && row < d.n_rows && col >= 0 {
                        out.push((row, col as usize, *v));
                    }
                }
            }
            Storage::Bsr(b) => {
                let area = b.block.saturating_mul(b.block);
                for (block_row, w) in b.indptr.windows(2).enumerate() {
                    for slot in w[0]..w[1].max(w[0]) {
                        let Some(block_col) = b.indices.get(slot) else {
                            continue;
                        };
                        let start = slot.saturating_mul(area);
                        let range = start..start.saturating_add(area);
                        let vals = b.values.get(range.clone()).unwrap_or_default();
                        let mask = b.mask.get(range).unwrap_or_default();
                        for (i, (v, m)) in vals.iter().zip(mask).enumerate() {
                            if *m {
                                let row = block_row
                                    .saturating_mul(b.block)
                                    .saturating_add(i / b.block);
                                let col = block_col
                                    .saturating_mul(b.block)
                                    .saturating_add(i % b.block);
                                out.push((row, col, *v));
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// The matrix rows this part's kernel writes, once per written row slot.
    pub(crate) fn written_rows(&self) -> Vec<usize> {
        match &self.storage {
            Storage::Csr(m) => m
                .indptr
                .windows(2)
                .enumerate()
                .filter(|(_, w)| w[1] > w[0])
                .map(|(r, _)| r)
                .collect(),
            Storage::Padded(p) => p
                .indptr
                .windows(2)
                .enumerate()
                .filter(|(_, w)| w[1] > w[0])
                .map(|(r, _)| r)
                .collect(),
            Storage::Ell(e) | Storage::SplitRows(e) => e.rows.clone(),
            Storage::Panels(p) => p.rows.clone(),
            Storage::Rows(p) => p.rows.clone(),
            // A lane beyond the part's rows repeats its group's first row, adding zero.
            Storage::Sell(s) => {
                let mut rows = s.rows.clone();
                rows.sort_unstable();
                rows.dedup();
                rows
            }
            Storage::Bsr(b) => b
                .indptr
                .windows(2)
                .enumerate()
                .filter(|(_, w)| w[1] > w[0])
                .flat_map(|(block_row, _)| block_row * b.block..(block_row + 1) * b.block)
                .collect(),
            // Every row, once (a lane past the last row writes nothing).
            Storage::Dia(d) if d.offsets.is_empty() => Vec::new(),
            Storage::Dia(d) => (0..d.n_rows).collect(),
        }
    }
}

/// Sums parts back into `(row, col, value)` triples sorted by row then column; entries at the
/// same position are added (a value found once is returned bit for bit).
pub fn to_coo(parts: &[Part]) -> Vec<(usize, usize, f64)> {
    let mut all: Vec<(usize, usize, f64)> = parts.iter().flat_map(Part::entries).collect();
    all.sort_by_key(|&(r, c, _)| (r, c));
    let mut out: Vec<(usize, usize, f64)> = Vec::with_capacity(all.len());
    for (r, c, v) in all {
        match out.last_mut() {
            Some(last) if last.0 == r && last.1 == c => last.2 += v,
            _ => out.push((r, c, v)),
        }
    }
    out
}
