//! Balanced chunks of rows for parallel runs: the generated parallel loops' runtime
//! (`lacuna_target`), co-iteration kernels' chunks of rows and their one-pass chunks all split
//! rows with [`balanced_bounds`].

/// Chunk boundaries of `lo..hi` (`chunks + 1` of them, non-decreasing, from `lo` to `hi`): equal
/// row counts, or — given a non-decreasing prefix `weight(r)` over `lo..=hi`, such as a CSR row
/// pointer — equal weights (each boundary is the first row whose prefix reaches its share).
/// `chunks` is at least 1.
pub fn balanced_bounds(
    lo: i64,
    hi: i64,
    chunks: i64,
    weight: Option<&dyn Fn(i64) -> i64>,
) -> Vec<i64> {
    let mut bounds = Vec::with_capacity(chunks as usize + 1);
    bounds.push(lo);
    let n = hi - lo;
    match weight {
        Some(weight) => {
            let (first, total) = (weight(lo), weight(hi) - weight(lo));
            for k in 1..chunks {
                let target = first + (total as i128 * k as i128 / chunks as i128) as i64;
                let (mut a, mut b) = (*bounds.last().unwrap_or(&lo), hi);
                while a < b {
                    let mid = a + (b - a) / 2;
                    if weight(mid) < target {
                        a = mid + 1;
                    } else {
                        b = mid;
                    }
                }
                bounds.push(a);
            }
        }
        None => {
            for k in 1..chunks {
                bounds.push(lo + (n as i128 * k as i128 / chunks as i128) as i64);
            }
        }
    }
    bounds.push(hi);
    bounds
}

#[cfg(test)]
mod tests {
    use super::balanced_bounds;

    #[test]
    fn partitions_cover_the_range_and_balance_stored_entries() {
        // Row lengths: one heavy row among light ones.
        let lens = [1i64, 0, 2, 40, 1, 1, 0, 3, 1, 1, 2, 0];
        let mut indptr = vec![0i64];
        for l in lens {
            indptr.push(indptr.last().unwrap() + l);
        }
        let w = |r: i64| indptr[r as usize];
        for chunks in 1..=5 {
            for (lo, hi) in [(0, 12), (2, 9), (3, 4)] {
                for weighted in [false, true] {
                    let b = balanced_bounds(
                        lo,
                        hi,
                        chunks,
                        weighted.then_some(&w as &dyn Fn(i64) -> i64),
                    );
                    assert_eq!(b.len() as i64, chunks + 1);
                    assert_eq!((b[0], *b.last().unwrap()), (lo, hi));
                    assert!(b.windows(2).all(|x| x[0] <= x[1]), "{b:?}");
                    if weighted {
                        // Each chunk holds at most its share plus one row.
                        let share = (w(hi) - w(lo)) / chunks + 1;
                        let max_row = (lo..hi).map(|r| w(r + 1) - w(r)).max().unwrap_or(0);
                        for x in b.windows(2) {
                            assert!(w(x[1]) - w(x[0]) <= share + max_row, "{b:?}");
                        }
                    }
                }
            }
        }
        // Equal rows: sizes differ by at most one.
        let b = balanced_bounds(0, 10, 3, None);
        assert_eq!(b, vec![0, 3, 6, 10]);
    }
}
