//! Format decomposition: every enumerated decomposition reproduces its matrix, the cost picks
//! the expected family, and saturation stops within its limits.

use std::time::Duration;

use lacuna_schedule::decompose::{
    best, enumerate, estimate, materialize, rcm_rows, reuse, rules, saturate, saturate_csr, to_coo,
    Candidates, CostWeights, CsrMatrix, Decomposition, Layout, MatrixStats, PanelsStorage, Part,
    RunnerLimits, StopReason, Storage,
};
use proptest::prelude::*;

/// Widths up to 4 so that random rows are often longer than the widest bucket.
fn small_candidates() -> Candidates {
    Candidates::new(&[1, 2, 4], &[2, 3], &[1, 2, 3], &[4]).unwrap()
}

fn bits(triples: Vec<(usize, usize, f64)>) -> Vec<(usize, usize, u64)> {
    triples
        .into_iter()
        .map(|(r, c, v)| (r, c, v.to_bits()))
        .collect()
}

/// Materializes `d` on `m` and checks that the parts sum back to exactly the stored entries.
fn check_reproduces(m: &CsrMatrix, d: &Decomposition) -> Vec<Part> {
    let parts = materialize(m, d).unwrap_or_else(|e| panic!("{d}: {e}"));
    assert_eq!(
        bits(to_coo(&parts)),
        bits(m.to_triples().unwrap()),
        "{d} does not reproduce the matrix"
    );
    parts
}

fn check_all(m: &CsrMatrix, candidates: &Candidates, limit: usize) -> Vec<Decomposition> {
    let stats = MatrixStats::of(m).unwrap();
    let found = enumerate(&stats, candidates, limit);
    assert!(!found.is_empty() && found.len() <= limit);
    for d in &found {
        check_reproduces(m, d);
        assert_eq!(
            &d.to_string().parse::<Decomposition>().unwrap(),
            d,
            "text round trip"
        );
    }
    found
}

/// A matrix from a row-length list: row `r` holds `lens[r]` columns spread by a stride.
fn from_lengths(n_cols: usize, lens: &[usize]) -> CsrMatrix {
    let mut triples = Vec::new();
    for (r, &len) in lens.iter().enumerate() {
        let mut cols: Vec<usize> = (0..len).map(|j| (r * 7 + j * 13) % n_cols).collect();
        cols.sort_unstable();
        cols.dedup();
        triples.extend(cols.into_iter().map(|c| (r, c, (r * 100 + c) as f64 + 0.5)));
    }
    CsrMatrix::from_triples(lens.len(), n_cols, &triples).unwrap()
}

/// Random matrices: empty, uniform or skewed row lengths; any f64 values (compared bitwise).
fn matrix() -> impl Strategy<Value = CsrMatrix> {
    (0usize..20, 0usize..24, 0usize..4).prop_flat_map(|(n_rows, n_cols, skew)| {
        let row = (
            0usize..4,
            any::<u64>(),
            prop::collection::vec(any::<f64>(), 24),
        );
        prop::collection::vec(row, n_rows).prop_map(move |rows| {
            let mut triples = Vec::new();
            for (r, (tier, seed, values)) in rows.into_iter().enumerate() {
                let tier = if skew == 0 { 1 } else { tier.min(skew) };
                let len = [0, 1 + (seed % 2) as usize, n_cols / 2, n_cols][tier].min(n_cols);
                let mut cols: Vec<usize> = (0..n_cols).collect();
                let mut s = seed;
                for i in (1..cols.len()).rev() {
                    s = s
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    cols.swap(i, (s >> 33) as usize % (i + 1));
                }
                triples.extend(cols[..len].iter().zip(&values).map(|(&c, &v)| (r, c, v)));
            }
            CsrMatrix::from_triples(n_rows, n_cols, &triples).unwrap()
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Column panels of any width (one column, fewer than the matrix has, all of them, more)
    /// and panels after other parts reproduce the matrix; within each panel the rows increase
    /// and every column lies in the panel.
    #[test]
    fn panels_reproduce_the_matrix_panel_by_panel(m in matrix(), width in 1u32..30) {
        for text in [
            format!("(panels {width})"),
            format!("(+ (bucket 1 2 (ell 1)) (panels {width}))"),
            format!("(+ (colpart 2 0 (panels {width})) (panels {width}))"),
        ] {
            let d: Decomposition = text.parse().unwrap();
            for part in check_reproduces(&m, &d) {
                if let Storage::Panels(s) = &part.storage {
                    check_panels(s, m.n_cols);
                }
            }
        }
    }

    /// `rcm` reproduces the matrix as one part holding every row exactly once (empty rows
    /// included, last), each with its entries in column order, written once (no accumulation).
    #[test]
    fn rcm_stores_every_row_once(m in matrix()) {
        let parts = check_reproduces(&m, &"rcm".parse().unwrap());
        prop_assert_eq!(parts.len(), 1);
        prop_assert!(!parts[0].accumulate);
        let Storage::Rows(s) = &parts[0].storage else { panic!("rows storage") };
        let mut rows = s.rows.clone();
        rows.sort_unstable();
        prop_assert_eq!(rows, (0..m.n_rows).collect::<Vec<_>>());
        prop_assert_eq!(s.indptr.len(), m.n_rows + 1);
        let len = |r: usize| m.indptr[r + 1] - m.indptr[r];
        let first_empty = s.rows.iter().position(|&r| len(r) == 0).unwrap_or(m.n_rows);
        prop_assert!(s.rows[first_empty..].iter().all(|&r| len(r) == 0));
        for (k, &r) in s.rows.iter().enumerate() {
            prop_assert_eq!(&s.indices[s.indptr[k]..s.indptr[k + 1]], &m.indices[m.indptr[r]..m.indptr[r + 1]]);
        }
    }

    #[test]
    fn every_enumerated_decomposition_reproduces_the_matrix(m in matrix()) {
        check_all(&m, &small_candidates(), 48);
    }

    #[test]
    fn the_best_decomposition_reproduces_the_matrix(m in matrix()) {
        let d = best(&MatrixStats::of(&m).unwrap(), &small_candidates());
        check_reproduces(&m, &d);
    }
}

#[test]
fn edge_matrices_reproduce_under_default_candidates() {
    let no_entries = CsrMatrix::new(3, 3, vec![0; 4], vec![], vec![]).unwrap();
    let no_rows = CsrMatrix::new(0, 5, vec![0], vec![], vec![]).unwrap();
    let one_row = from_lengths(10, &[7]);
    let long_row = from_lengths(256, &[1, 200, 3, 0, 70]);
    let skewed = from_lengths(128, &[1, 1, 1, 1, 2, 1, 1, 3, 1, 120, 1, 1, 64, 1, 1, 1]);
    for m in [&no_entries, &no_rows, &one_row, &long_row, &skewed] {
        check_all(m, &Candidates::default(), 64);
    }
    // With nothing stored every part is empty and cheapest is the smallest term.
    assert_eq!(
        best(
            &MatrixStats::of(&no_entries).unwrap(),
            &Candidates::default()
        ),
        Decomposition::csr()
    );
}

#[test]
fn hyb_handles_empty_buckets_and_rows_past_the_widest_bucket() {
    let m = from_lengths(256, &[1, 200, 3, 0, 70]);
    let hyb: Decomposition =
        "(+ (bucket 1 2 (ell 1)) (+ (bucket 2 3 (ell 2)) (+ (bucket 3 5 (ell 4)) \
                              (+ (bucket 5 65 (ell 64)) (split_rows 64)))))"
            .parse()
            .unwrap();
    let parts = check_reproduces(&m, &hyb);
    let rows = |p: &Part| match &p.storage {
        Storage::Ell(e) | Storage::SplitRows(e) => e.rows.clone(),
        other => panic!("unexpected storage {other:?}"),
    };
    let got: Vec<Vec<usize>> = parts.iter().map(rows).collect();
    // Bucket [2, 3) and bucket [5, 65) are empty; rows 1 and 4 are split into chunks of 64.
    assert_eq!(
        got,
        vec![vec![0], vec![], vec![2], vec![], vec![1, 1, 1, 1, 4, 4]]
    );
    let accumulate: Vec<bool> = parts.iter().map(|p| p.accumulate).collect();
    assert_eq!(accumulate, vec![false, false, false, false, true]);
}

#[test]
fn column_parts_sharing_rows_accumulate() {
    let m = from_lengths(8, &[8, 1, 0, 4]);
    let d: Decomposition = "(+ (colpart 2 0 (+ (bucket 1 5 (ell 4)) remainder)) (colpart 2 1 csr))"
        .parse()
        .unwrap();
    let parts = check_reproduces(&m, &d);
    // Rows 0 and 3 span both column parts; the remainder of part 0 is empty.
    let accumulate: Vec<bool> = parts.iter().map(|p| p.accumulate).collect();
    assert_eq!(accumulate, vec![true, false, true]);
}

#[test]
fn bsr_stores_full_blocks_with_masked_zeros_and_leaves_the_edges() {
    // 5×5 with an entry in the ragged last row and column.
    let m = CsrMatrix::from_triples(
        5,
        5,
        &[
            (0, 0, 1.0),
            (1, 1, 2.0),
            (3, 2, 0.0),
            (4, 4, 5.0),
            (2, 4, 6.0),
        ],
    )
    .unwrap();
    let d: Decomposition = "(+ (bsr 2) remainder)".parse().unwrap();
    let parts = check_reproduces(&m, &d);
    let Storage::Bsr(b) = &parts[0].storage else {
        panic!("expected BSR, got {:?}", parts[0].storage)
    };
    assert_eq!(
        (
            b.n_block_rows,
            b.n_block_cols,
            b.indptr.clone(),
            b.indices.clone()
        ),
        (2, 2, vec![0, 1, 2], vec![0, 1])
    );
    // The stored explicit zero at (3, 2) is kept and masked in; padding is masked out.
    assert_eq!(
        b.mask,
        vec![true, false, false, true, false, false, true, false]
    );
    let Storage::Csr(rest) = &parts[1].storage else {
        panic!("expected CSR")
    };
    assert_eq!(rest.to_triples().unwrap(), vec![(2, 4, 6.0), (4, 4, 5.0)]);
}

/// SELL-C-σ: rows sorted by decreasing length within windows of σ rows, cut into groups of C
/// lanes stored step by step (column-major), each group as long as its longest row; a lane
/// past the last row repeats its group's first row with padding only.
#[test]
fn sell_groups_sorted_rows_into_lane_major_steps() {
    // Row lengths 1, 3, 0 (empty: not stored), 2, 4.
    let m = from_lengths(16, &[1, 3, 0, 2, 4]);
    let parts = check_reproduces(&m, &"(sell 2 2)".parse().unwrap());
    let [Part {
        storage: Storage::Sell(s),
        ..
    }] = parts.as_slice()
    else {
        panic!("expected one SELL part, got {parts:?}")
    };
    // Windows of two non-empty rows: {0, 1} sorted to 1, 0; {3, 4} to 4, 3.
    assert_eq!(s.rows, vec![1, 0, 4, 3]);
    assert_eq!(s.steps, vec![0, 3, 7]);
    assert_eq!((s.groups(), s.max_steps()), (2, 4));
    let col = |r: usize, j: usize| (r * 7 + j * 13) % 16;
    let sorted = |r: usize| {
        let mut c: Vec<usize> = (0..[1, 3, 0, 2, 4][r]).map(|j| col(r, j)).collect();
        c.sort_unstable();
        c
    };
    let (r0, r1, r3, r4) = (sorted(0), sorted(1), sorted(3), sorted(4));
    // Step q holds entry q of each lane's row; padding is column 0, value 0, masked out.
    assert_eq!(
        s.indices,
        vec![
            r1[0], r0[0], r1[1], 0, r1[2], 0, // group 0
            r4[0], r3[0], r4[1], r3[1], r4[2], 0, r4[3], 0, // group 1
        ]
    );
    assert_eq!(
        s.mask,
        [true, true, true, false, true, false, true, true, true, true, true, false, true, false]
    );
    // σ = 1 keeps the order; a last, partial group repeats its first row in the spare lane.
    let parts = check_reproduces(&m, &"(sell 3 1)".parse().unwrap());
    let Storage::Sell(s) = &parts[0].storage else {
        panic!("expected SELL")
    };
    assert_eq!(s.rows, vec![0, 1, 3, 4, 4, 4]);
    assert_eq!(s.steps, vec![0, 3, 7]);
    assert!(s.mask[9..].chunks(3).all(|lanes| !lanes[1] && !lanes[2]));
    // Sorting within wide windows pads less than keeping the order on skewed rows.
    let skewed = from_lengths(64, &[1, 9, 1, 9, 1, 9, 1, 9]);
    let stats = MatrixStats::of(&skewed).unwrap();
    let slots = |text: &str| match &check_reproduces(&skewed, &text.parse().unwrap())[0].storage {
        Storage::Sell(s) => s.mask.len(),
        other => panic!("expected SELL, got {other:?}"),
    };
    assert_eq!((slots("(sell 2 1)"), slots("(sell 2 8)")), (72, 40));
    assert!(cost(&stats, "(sell 2 8)") < cost(&stats, "(sell 2 1)"));
}

/// DIA: the distinct diagonals in increasing order; every matrix row in blocks of `lanes`, each
/// diagonal one run of `lanes` slots per block (diagonal-major); padding (no entry on that
/// diagonal, a column outside the matrix, a row past the last) masked out with value 0.
#[test]
fn dia_stores_rows_in_blocks_by_diagonal() {
    // 5 x 6, diagonals -1, 0 and 2; row 3 empty; (4, 3) on -1, (1, 3) on 2.
    let m = CsrMatrix::from_triples(
        5,
        6,
        &[
            (0, 0, 1.0),
            (0, 2, 2.0),
            (1, 0, 3.0),
            (1, 1, 4.0),
            (1, 3, 5.0),
            (2, 2, 6.0),
            (4, 3, 7.0),
            (4, 4, 8.0),
        ],
    )
    .unwrap();
    let parts = check_reproduces(&m, &"(dia 3 2)".parse().unwrap());
    let [Part {
        storage: Storage::Dia(s),
        accumulate: false,
        ..
    }] = parts.as_slice()
    else {
        panic!("expected one DIA part, got {parts:?}")
    };
    assert_eq!(s.offsets, vec![-1, 0, 2]);
    assert_eq!((s.lanes, s.n_rows, s.blocks()), (2, 5, 3));
    // Diagonal k, block b, lane l at (k * 3 + b) * 2 + l (diagonal-major).
    #[rustfmt::skip]
    assert_eq!(
        s.values,
        vec![
            0.0, 3.0, /* rows 2, 3 */ 0.0, 0.0, /* row 4, past the last */ 7.0, 0.0, // -1
            1.0, 4.0, /* rows 2, 3 */ 6.0, 0.0, /* row 4, past the last */ 8.0, 0.0, // 0
            2.0, 5.0, /* rows 2, 3 */ 0.0, 0.0, /* row 4, past the last */ 0.0, 0.0, // 2
        ]
    );
    assert_eq!(
        s.mask.iter().filter(|&&x| x).count(),
        m.nnz(),
        "one slot per entry"
    );
    assert_eq!(
        (s.position(4), s.position(5), s.position(13)),
        ((4, 3), (5, 4), (1, 3))
    );
    // Fewer diagonals than the part may hold; the cost counts slots, not entries.
    let stats = MatrixStats::of(&m).unwrap();
    assert_eq!(stats.diagonals, 3);
    assert!(cost(&stats, "(dia 3 8)") > cost(&stats, "(dia 3 2)"));
    check_reproduces(&m, &"(dia 64 1)".parse().unwrap());
    check_reproduces(&m, &"(+ (bucket 3 4 (ell 3)) (dia 3 4))".parse().unwrap());
}

/// The invariants of a panels part: panel `p` holds its rows in increasing order, each with
/// at least one entry, columns increasing and inside `[p w, (p + 1) w)`; positions run on from
/// panel to panel.
fn check_panels(s: &PanelsStorage, n_cols: usize) {
    assert_eq!(s.panels(), n_cols.div_ceil(s.width));
    assert_eq!(s.panel_rows.first(), Some(&0));
    assert_eq!(s.panel_rows.last(), Some(&s.rows.len()));
    assert_eq!(s.indptr.len(), s.rows.len() + 1);
    assert_eq!((s.indptr[0], s.indptr[s.rows.len()]), (0, s.indices.len()));
    assert_eq!(s.values.len(), s.indices.len());
    for (p, w) in s.panel_rows.windows(2).enumerate() {
        let rows = &s.rows[w[0]..w[1]];
        assert!(rows.windows(2).all(|r| r[0] < r[1]), "panel {p}: {rows:?}");
        for r in w[0]..w[1] {
            let cols = &s.indices[s.indptr[r]..s.indptr[r + 1]];
            assert!(!cols.is_empty(), "panel {p}, row {}: empty", s.rows[r]);
            assert!(cols.windows(2).all(|c| c[0] < c[1]));
            assert!(cols.iter().all(|c| c / s.width == p), "panel {p}: {cols:?}");
        }
    }
}

/// Column panels: `(panels 3)` of a 4 x 7 matrix (panels of columns 0-2, 3-5 and 6): rows in
/// each panel where they have entries, panel after panel; a row in two panels accumulates.
#[test]
fn panels_store_rows_panel_by_panel() {
    let m = CsrMatrix::from_triples(
        4,
        7,
        &[
            (0, 1, 1.0),
            (0, 4, 2.0),
            (0, 6, 3.0),
            (2, 0, 4.0),
            (2, 2, 5.0),
            (3, 5, 6.0),
        ],
    )
    .unwrap();
    let parts = check_reproduces(&m, &"(panels 3)".parse().unwrap());
    let [Part {
        storage: Storage::Panels(s),
        accumulate: true,
        ..
    }] = parts.as_slice()
    else {
        panic!("expected one accumulating panels part, got {parts:?}")
    };
    assert_eq!(s.panel_rows, vec![0, 2, 4, 5]);
    assert_eq!(s.rows, vec![0, 2, 0, 3, 0]);
    assert_eq!(s.indptr, vec![0, 1, 3, 4, 5, 6]);
    assert_eq!(s.indices, vec![1, 0, 2, 4, 5, 6]);
    assert_eq!(s.values, vec![1.0, 4.0, 5.0, 2.0, 6.0, 3.0]);
    check_panels(s, 7);
    // One panel holding every column: each non-empty row once, nothing accumulates.
    let parts = check_reproduces(&m, &"(panels 7)".parse().unwrap());
    assert!(!parts[0].accumulate);
    // The cost grows with the rows split across panels.
    let stats = MatrixStats::of(&m).unwrap();
    assert!(cost(&stats, "(panels 1)") > cost(&stats, "(panels 7)"));
    assert!("(panels 0)".parse::<Decomposition>().is_err());
    assert_eq!(
        "(panels 65536)".parse::<Decomposition>().unwrap().layout(),
        &Layout::Panels { width: 65536 }
    );
}

fn cost(stats: &MatrixStats, text: &str) -> f64 {
    estimate(stats, &text.parse().unwrap()).total(&CostWeights::default())
}

fn nonempty_parts(m: &CsrMatrix, d: &Decomposition) -> Vec<Part> {
    check_reproduces(m, d)
        .into_iter()
        .filter(|p| !p.entries().is_empty())
        .collect()
}

#[test]
fn cost_picks_ell_for_uniform_rows() {
    let m = from_lengths(256, &[8; 256]);
    let stats = MatrixStats::of(&m).unwrap();
    let chosen = best(&stats, &Candidates::default());
    let parts = nonempty_parts(&m, &chosen);
    assert!(
        parts.iter().all(|p| matches!(p.storage, Storage::Ell(_))),
        "{chosen}"
    );
    let ell = cost(&stats, "(+ (bucket 1 9 (ell 8)) remainder)");
    assert!(ell < cost(&stats, "csr"));
    assert!(ell < cost(&stats, "(+ (bsr 4) remainder)"));
    assert!(ell < cost(&stats, "(padded 32)"));
    assert!(
        ell < cost(&stats, "(+ (bucket 1 17 (ell 16)) remainder)"),
        "padding costs"
    );
}

#[test]
fn cost_picks_bsr_for_a_block_diagonal_matrix() {
    let triples: Vec<_> = (0..256)
        .flat_map(|r| (0..4).map(move |j| (r, r / 4 * 4 + j, 1.0)))
        .collect();
    let m = CsrMatrix::from_triples(256, 256, &triples).unwrap();
    let stats = MatrixStats::of(&m).unwrap();
    let chosen = best(&stats, &Candidates::default());
    let parts = nonempty_parts(&m, &chosen);
    assert!(
        matches!(&parts[..], [Part { storage: Storage::Bsr(b), .. }] if b.block == 4),
        "{chosen}"
    );
    let bsr = cost(&stats, "(+ (bsr 4) remainder)");
    assert!(bsr < cost(&stats, "(+ (bsr 8) remainder)"));
    assert!(bsr < cost(&stats, "(+ (bsr 2) remainder)"));
    assert!(bsr < cost(&stats, "(+ (bucket 1 5 (ell 4)) remainder)"));
    assert!(bsr < cost(&stats, "csr"));
}

#[test]
fn cost_picks_hyb_for_power_law_rows() {
    // Row r has about 400 / (r + 1) entries: a few long rows, many short ones.
    let lens: Vec<usize> = (0..512).map(|r| (400 / (r % 97 + 1)).max(1)).collect();
    let m = from_lengths(512, &lens);
    let stats = MatrixStats::of(&m).unwrap();
    let chosen = best(&stats, &Candidates::default());
    let parts = nonempty_parts(&m, &chosen);
    let ell_parts = parts
        .iter()
        .filter(|p| matches!(p.storage, Storage::Ell(_)))
        .count();
    assert!(ell_parts >= 2 && parts.len() >= 3, "{chosen}");
    let hyb = estimate(&stats, &chosen).total(&CostWeights::default());
    assert!(hyb < cost(&stats, "csr"));
    assert!(hyb < cost(&stats, "(+ (bucket 1 65 (ell 64)) remainder)"));
    assert!(hyb < cost(&stats, "(+ (bsr 4) remainder)"));
    assert!(hyb < cost(&stats, "(padded 8)"));
}

#[test]
fn saturation_stops_within_its_limits() {
    let full = saturate_csr(&Candidates::default());
    assert_eq!(full.stop_reason(), &StopReason::Saturated);
    assert!(full.iterations() <= RunnerLimits::default().iterations);
    assert!(full.n_nodes() <= RunnerLimits::default().nodes);

    let rules = rules(&Candidates::default());
    let start = Decomposition::csr();
    let limited = |limits| saturate(&start, &rules, &limits);
    let by_iterations = limited(RunnerLimits {
        iterations: 2,
        ..RunnerLimits::default()
    });
    assert_eq!(by_iterations.stop_reason(), &StopReason::IterationLimit(2));
    assert_eq!(by_iterations.iterations(), 2);
    let by_nodes = limited(RunnerLimits {
        nodes: 60,
        ..RunnerLimits::default()
    });
    let reason = by_nodes.stop_reason();
    assert!(
        matches!(reason, StopReason::NodeLimit(n) if *n > 60),
        "{reason:?}"
    );
    // The node limit is checked after each rule, so one rule's matches may overshoot it.
    assert!(
        by_nodes.n_nodes() < full.n_nodes(),
        "{} nodes",
        by_nodes.n_nodes()
    );
    let by_time = limited(RunnerLimits {
        time: Duration::ZERO,
        ..RunnerLimits::default()
    });
    assert!(matches!(by_time.stop_reason(), StopReason::TimeLimit(_)));
    // Whatever stopped it, every extracted term still stores the matrix exactly.
    let m = from_lengths(64, &[1, 5, 40, 2, 0, 9]);
    let stats = MatrixStats::of(&m).unwrap();
    for sat in [&by_iterations, &by_nodes, &by_time] {
        for (d, _) in sat.ranked(&stats, &CostWeights::default(), 16) {
            check_reproduces(&m, &d);
        }
    }
}

#[test]
fn enumeration_is_deterministic_and_distinct() {
    let m = from_lengths(128, &[1, 1, 2, 3, 90, 4, 0, 17, 1, 33]);
    let stats = MatrixStats::of(&m).unwrap();
    let first = enumerate(&stats, &Candidates::default(), 40);
    assert_eq!(first, enumerate(&stats, &Candidates::default(), 40));
    let mut unique = first.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), first.len());
    assert_eq!(first.len(), 40);
}

#[test]
fn decompositions_round_trip_through_ron() {
    let d: Decomposition =
        "(+ (colpart 2 0 (+ (bucket 1 3 (ell 2)) remainder)) (colpart 2 1 (padded 4)))"
            .parse()
            .unwrap();
    let text = ron::to_string(&d).unwrap();
    assert_eq!(
        text,
        "\"(+ (colpart 2 0 (+ (bucket 1 3 (ell 2)) remainder)) (colpart 2 1 (padded 4)))\""
    );
    assert_eq!(ron::from_str::<Decomposition>(&text).unwrap(), d);
    assert!(ron::from_str::<Decomposition>("\"(ell 4)\"").is_err());
    assert_eq!(d.layout().size(), 16);
    assert!(matches!(d.layout(), Layout::Sum(..)));
}

/// A band of width 3 whose rows are stored shuffled: the reverse Cuthill–McKee order runs the
/// band's rows in order again (each next to a row sharing columns), so a cache of a few rows
/// of the dense operand serves most gathers, which the stored order's do not find.
#[test]
fn rcm_restores_the_order_of_a_shuffled_band() {
    let n: usize = 400;
    // Row i of the band, stored at row (i * 7) % n (7 is prime to 400).
    let mut triples = Vec::new();
    for i in 0..n {
        for c in i.saturating_sub(1)..(i + 2).min(n) {
            triples.push(((i * 7) % n, c, 1.0));
        }
    }
    let m = CsrMatrix::from_triples(n, n, &triples).unwrap();
    let order = rcm_rows(m.n_rows, m.n_cols, &m.indptr, &m.indices);
    let stored: Vec<usize> = (0..n).collect();
    let window = 8;
    let before = reuse(n, &m.indptr, &m.indices, &stored, window);
    let after = reuse(n, &m.indptr, &m.indices, &order, window);
    assert!(before < 0.05, "{before}");
    assert!(after > 0.6, "{after}");
    // Consecutive rows of the order are band rows at most 2 apart.
    let band = |r: usize| (r * 343) % n; // 7 * 343 = 2401 = 1 (mod 400)
    assert!(
        order
            .windows(2)
            .all(|w| band(w[0]).abs_diff(band(w[1])) <= 2),
        "{:?}",
        &order[..20]
    );
}
