//! Row orders that keep rows sharing columns together (the `rcm` format), and a measure of
//! how much an order lets a cache of the dense operand's rows serve.

use std::collections::VecDeque;

/// The rows of an `n_rows` × `n_cols` CSR pattern (`indptr`, `indices`) in reverse Cuthill–McKee order of its row–column graph (each row joined
/// to the columns of its entries), every row exactly once: breadth-first from a row of least
/// length in each connected component, each node's newly reached neighbours taken shortest
/// first, the whole order reversed; empty rows last, in increasing order.
///
/// Two rows a column apart in the graph share that column, so consecutive rows of the order
/// gather mostly the same rows of a dense operand (SpMM's `B`), whatever the stored order.
/// Entries whose column lies outside `0..n_cols` are left out of the graph; rows past the end
/// of `indptr` are empty.
pub fn rcm_rows(n_rows: usize, n_cols: usize, indptr: &[usize], indices: &[usize]) -> Vec<usize> {
    let (m, n) = (n_rows, n_cols);
    let row_of = |r: usize| row(indptr, indices, r);
    // The columns' rows (the transpose's pattern), by counting.
    let mut col_ptr = vec![0usize; n + 1];
    for r in 0..m {
        for &c in row_of(r) {
            if c < n {
                col_ptr[c + 1] += 1;
            }
        }
    }
    for c in 0..n {
        col_ptr[c + 1] += col_ptr[c];
    }
    let mut next = col_ptr.clone();
    let mut col_rows = vec![0usize; col_ptr[n]];
    for r in 0..m {
        for &c in row_of(r) {
            if c < n {
                col_rows[next[c]] = r;
                next[c] += 1;
            }
        }
    }
    let row_len = |r: usize| row_of(r).len();
    let col_len = |c: usize| col_ptr[c + 1] - col_ptr[c];

    // Start rows: the non-empty ones, shortest first (stable: by index among equals).
    let mut starts: Vec<usize> = (0..m).filter(|&r| row_len(r) > 0).collect();
    starts.sort_by_key(|&r| row_len(r));

    let (mut row_seen, mut col_seen) = (vec![false; m], vec![false; n]);
    let mut order = Vec::with_capacity(m);
    // Nodes: rows `0..m`, columns `m..m + n`.
    let mut queue = VecDeque::new();
    let mut reached = Vec::new();
    for &start in &starts {
        if row_seen[start] {
            continue;
        }
        row_seen[start] = true;
        order.push(start);
        queue.push_back(start);
        while let Some(node) = queue.pop_front() {
            reached.clear();
            if node < m {
                for &c in row_of(node) {
                    if c < n && !col_seen[c] {
                        col_seen[c] = true;
                        reached.push(c);
                    }
                }
                reached.sort_by_key(|&c| col_len(c));
                queue.extend(reached.iter().map(|&c| m + c));
            } else {
                let c = node - m;
                for &r in &col_rows[col_ptr[c]..col_ptr[c + 1]] {
                    if !row_seen[r] {
                        row_seen[r] = true;
                        reached.push(r);
                    }
                }
                reached.sort_by_key(|&r| row_len(r));
                order.extend_from_slice(&reached);
                queue.extend(reached.iter().copied());
            }
        }
    }
    order.reverse();
    order.extend((0..m).filter(|&r| !row_seen[r]));
    order
}

/// The entries of row `r` of a CSR pattern (none where `indptr` or `indices` fall short).
fn row<'a>(indptr: &[usize], indices: &'a [usize], r: usize) -> &'a [usize] {
    let start = indptr.get(r).copied().unwrap_or(0);
    let end = indptr.get(r + 1).copied().unwrap_or(start);
    indices.get(start..end.max(start)).unwrap_or_default()
}

/// The share of `order`'s gathers of a dense operand's rows (one per entry, at its column)
/// that find the row among the `window` rows gathered last: the gathers served by a cache of
/// `window` rows, counted with a window of gathers instead of distinct rows (a lower bound of
/// a least-recently-used cache's hits), rows read in `order` from a CSR pattern of `n_cols`
/// columns (`indptr`, `indices`). 0 for a matrix without entries.
pub fn reuse(
    n_cols: usize,
    indptr: &[usize],
    indices: &[usize],
    order: &[usize],
    window: usize,
) -> f64 {
    let mut last = vec![usize::MAX; n_cols];
    let (mut t, mut hits) = (0usize, 0usize);
    for &r in order {
        for &c in row(indptr, indices, r) {
            if let Some(slot) = last.get_mut(c) {
                if *slot != usize::MAX && t - *slot <= window {
                    hits += 1;
                }
                *slot = t;
            }
            t += 1;
        }
    }
    if t == 0 {
        0.0
    } else {
        hits as f64 / t as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decompose::CsrMatrix;

    fn order(a: &CsrMatrix) -> Vec<usize> {
        rcm_rows(a.n_rows, a.n_cols, &a.indptr, &a.indices)
    }

    fn hits(a: &CsrMatrix, order: &[usize], window: usize) -> f64 {
        reuse(a.n_cols, &a.indptr, &a.indices, order, window)
    }

    fn csr(n_rows: usize, n_cols: usize, triples: &[(usize, usize)]) -> CsrMatrix {
        let t: Vec<_> = triples.iter().map(|&(r, c)| (r, c, 1.0)).collect();
        CsrMatrix::from_triples(n_rows, n_cols, &t).expect("valid matrix")
    }

    #[test]
    fn every_row_once_empty_rows_last() {
        let a = csr(6, 4, &[(0, 3), (2, 0), (2, 1), (3, 1), (5, 3), (5, 2)]);
        let order = order(&a);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..6).collect::<Vec<_>>());
        assert_eq!(&order[4..], &[1, 4], "empty rows last, increasing");
    }

    #[test]
    fn rows_sharing_columns_come_together() {
        // Rows 0, 2, 4 share column 0; rows 1, 3, 5 share column 9: stored interleaved.
        let a = csr(6, 10, &[(0, 0), (1, 9), (2, 0), (3, 9), (4, 0), (5, 9)]);
        let order = order(&a);
        let group = |r: usize| r % 2;
        let switches = order
            .windows(2)
            .filter(|w| group(w[0]) != group(w[1]))
            .count();
        assert_eq!(switches, 1, "{order:?}");
        // A window of one row serves every gather but each group's first in the new order,
        // none in the stored one.
        assert_eq!(hits(&a, &(0..6).collect::<Vec<_>>(), 1), 0.0);
        assert!((hits(&a, &order, 1) - 4.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn reuse_of_nothing_is_zero() {
        let a = csr(3, 3, &[]);
        assert_eq!(hits(&a, &order(&a), 8), 0.0);
    }
}
