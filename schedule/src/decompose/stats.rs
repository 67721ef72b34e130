//! Matrix statistics that the extraction cost reads: row-length histograms (whole matrix and
//! per column part) and block counts per block size.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::DecomposeError;
use super::matrix::{check_structure, CsrMatrix};

/// Block sizes and column-part counts for which [`MatrixStats`] holds exact figures; the cost
/// model estimates other sizes.
pub const STAT_SIZES: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];

/// A row-length histogram: row length → number of rows with that length.
pub type Histogram = BTreeMap<usize, usize>;

/// Block statistics for one block size `b`, over the full `b`×`b` blocks (the rows and columns
/// beyond the last multiple of `b` are not covered).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockStats {
    /// Blocks holding at least one entry.
    pub n_blocks: usize,
    /// Entries inside full blocks.
    pub nnz: usize,
}

impl BlockStats {
    /// Fraction of the slots of non-empty blocks that hold an entry (1 when there are none).
    pub fn density(&self, block: u32) -> f64 {
        let slots = self.n_blocks as f64 * f64::from(block) * f64::from(block);
        if slots == 0.0 {
            1.0
        } else {
            self.nnz as f64 / slots
        }
    }
}

/// What the extraction cost knows about a matrix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatrixStats {
    /// Number of rows.
    pub n_rows: usize,
    /// Number of columns.
    pub n_cols: usize,
    /// Number of stored entries.
    pub nnz: usize,
    /// Row-length histogram of the whole matrix, empty rows included.
    pub row_lengths: Histogram,
    /// For each `k` in [`STAT_SIZES`], the row-length histogram of each of the `k` column
    /// parts (empty rows included).
    pub col_parts: BTreeMap<u32, Vec<Histogram>>,
    /// For each block size in [`STAT_SIZES`], the block statistics.
    pub blocks: BTreeMap<u32, BlockStats>,
    /// Distinct diagonals (`column - row`) holding an entry.
    #[serde(default)]
    pub diagonals: usize,
}

impl MatrixStats {
    /// Computes the statistics of a CSR structure with `indptr.len() - 1` rows.
    pub fn from_csr(
        indptr: &[usize],
        indices: &[usize],
        n_cols: usize,
    ) -> Result<MatrixStats, DecomposeError> {
        let n_rows = match indptr.len().checked_sub(1) {
            Some(n) => n,
            None => {
                return Err(DecomposeError::IndptrLength {
                    expected: 1,
                    found: 0,
                })
            }
        };
        check_structure(n_rows, n_cols, indptr, indices)?;
        let rows = || indptr.windows(2).map(|w| &indices[w[0]..w[1]]);
        let mut row_lengths = Histogram::new();
        for cols in rows() {
            *row_lengths.entry(cols.len()).or_default() += 1;
        }
        let mut col_parts = BTreeMap::new();
        for k in STAT_SIZES {
            let width = part_width(n_cols, k);
            let mut hists = vec![Histogram::new(); k as usize];
            let mut counts = vec![0usize; k as usize];
            for cols in rows() {
                counts.iter_mut().for_each(|c| *c = 0);
                for &col in cols {
                    counts[(col / width).min(k as usize - 1)] += 1;
                }
                for (hist, &count) in hists.iter_mut().zip(&counts) {
                    *hist.entry(count).or_default() += 1;
                }
            }
            col_parts.insert(k, hists);
        }
        let mut blocks = BTreeMap::new();
        for b in STAT_SIZES {
            blocks.insert(b, block_stats(indptr, indices, n_rows, n_cols, b as usize));
        }
        Ok(MatrixStats {
            n_rows,
            n_cols,
            nnz: indices.len(),
            row_lengths,
            col_parts,
            blocks,
            diagonals: diagonals(
                n_rows,
                n_cols,
                indptr
                    .windows(2)
                    .enumerate()
                    .flat_map(|(row, w)| indices[w[0]..w[1]].iter().map(move |&c| (row, c))),
            )
            .len(),
        })
    }

    /// Computes the statistics of a matrix.
    pub fn of(matrix: &CsrMatrix) -> Result<MatrixStats, DecomposeError> {
        if matrix.indptr.len() != matrix.n_rows.saturating_add(1) {
            return Err(DecomposeError::IndptrLength {
                expected: matrix.n_rows.saturating_add(1),
                found: matrix.indptr.len(),
            });
        }
        MatrixStats::from_csr(&matrix.indptr, &matrix.indices, matrix.n_cols)
    }
}

/// The diagonals (`column - row`, increasing) that hold at least one of `entries`, the
/// `(row, column)` positions of an `n_rows` × `n_cols` matrix; positions outside it are
/// skipped.
pub fn diagonals(
    n_rows: usize,
    n_cols: usize,
    entries: impl IntoIterator<Item = (usize, usize)>,
) -> Vec<i64> {
    let entries = entries
        .into_iter()
        .filter(|&(row, col)| row < n_rows && col < n_cols);
    // Entry `k` of `seen` is diagonal `k - (n_rows - 1)`: a bitmap over every diagonal where
    // that is small, else the entries' diagonals sorted (a declared shape far beyond the
    // entries, which must not abort).
    let shift = n_rows.saturating_sub(1);
    let len = n_rows.saturating_add(n_cols).saturating_sub(1);
    if len > DIAGONAL_BITMAP_MAX {
        let mut offsets: Vec<i64> = entries.map(|(row, col)| col as i64 - row as i64).collect();
        offsets.sort_unstable();
        offsets.dedup();
        return offsets;
    }
    let mut seen = vec![false; len];
    for (row, col) in entries {
        seen[col + shift - row] = true;
    }
    seen.iter()
        .enumerate()
        .filter(|(_, s)| **s)
        .map(|(k, _)| k as i64 - shift as i64)
        .collect()
}

/// The most diagonals [`diagonals`] keeps a bitmap of (256 MB).
const DIAGONAL_BITMAP_MAX: usize = 1 << 28;

/// Columns per part when `n_cols` columns are cut into `parts` parts (at least 1).
pub(crate) fn part_width(n_cols: usize, parts: u32) -> usize {
    n_cols.div_ceil(parts.max(1) as usize).max(1)
}

fn block_stats(
    indptr: &[usize],
    indices: &[usize],
    n_rows: usize,
    n_cols: usize,
    b: usize,
) -> BlockStats {
    let aligned_cols = n_cols / b * b;
    let mut stats = BlockStats {
        n_blocks: 0,
        nnz: 0,
    };
    let mut block_cols = Vec::new();
    for block_row in 0..n_rows / b {
        block_cols.clear();
        for row in block_row * b..block_row * b + b {
            for &col in &indices[indptr[row]..indptr[row + 1]] {
                if col < aligned_cols {
                    block_cols.push(col / b);
                }
            }
        }
        stats.nnz += block_cols.len();
        block_cols.sort_unstable();
        block_cols.dedup();
        stats.n_blocks += block_cols.len();
    }
    stats
}
