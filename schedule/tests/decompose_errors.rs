//! Bad input to format decomposition gives typed errors, never panics: malformed terms and
//! matrices, out-of-range parameters and candidates, parts too large to store.

use lacuna_schedule::decompose::{
    estimate, materialize, to_coo, Candidates, CsrMatrix, DecomposeError, Decomposition, Layout,
    MatrixStats, MAX_DEPTH,
};
use proptest::prelude::*;

fn parse(text: &str) -> Result<Decomposition, DecomposeError> {
    text.parse()
}

#[test]
fn malformed_terms_are_rejected() {
    assert!(matches!(parse(""), Err(DecomposeError::Parse(_))));
    assert!(matches!(parse("("), Err(DecomposeError::Parse(_))));
    assert!(matches!(parse("(foo 1)"), Err(DecomposeError::Parse(_))));
    assert!(matches!(parse("(+ csr)"), Err(DecomposeError::Parse(_))));
    assert!(matches!(
        parse("4"),
        Err(DecomposeError::IllSorted {
            expected: "a format",
            ..
        })
    ));
    assert!(matches!(
        parse("(ell csr)"),
        Err(DecomposeError::IllSorted {
            expected: "a number",
            ..
        })
    ));
    assert!(matches!(parse("(ell -1)"), Err(DecomposeError::Parse(_))));
    let deep = format!(
        "{}csr{}",
        "(+ remainder ".repeat(MAX_DEPTH + 1),
        ")".repeat(MAX_DEPTH + 1)
    );
    assert!(matches!(parse(&deep), Err(DecomposeError::TooDeep { .. })));
    let very_deep = "(".repeat(1 << 20);
    assert!(matches!(
        parse(&very_deep),
        Err(DecomposeError::TooDeep { .. })
    ));
}

#[test]
fn out_of_range_parameters_are_rejected() {
    let bad = |text: &str, op: &str, param: &str| match parse(text) {
        Err(DecomposeError::BadParameter {
            op: o, param: p, ..
        }) => assert_eq!((o, p), (op, param), "{text}"),
        other => panic!("{text}: {other:?}"),
    };
    bad("(+ (ell 0) csr)", "ell", "width");
    bad("(+ (bsr 0) csr)", "bsr", "block");
    bad("(padded 0)", "padded", "tile");
    bad("(split_rows 0)", "split_rows", "width");
    bad("(sell 0 4)", "sell", "lanes");
    bad("(sell 65 4)", "sell", "lanes");
    bad("(sell 8 0)", "sell", "sigma");
    bad("(dia 0 8)", "dia", "diagonals");
    bad("(dia 65 8)", "dia", "diagonals");
    bad("(dia 8 0)", "dia", "lanes");
    bad("(dia 8 65)", "dia", "lanes");
    bad("(+ (bucket 3 3 (ell 2)) csr)", "bucket", "hi");
    bad("(+ (colpart 0 0 csr) csr)", "colpart", "parts");
    bad("(+ (colpart 2 2 csr) csr)", "colpart", "part");
}

/// A `dia` part refuses entries on more diagonals than it stores, naming the count and the
/// first diagonal beyond, whatever the cost model thought of it (a cost too large to choose).
#[test]
fn dia_parts_refuse_too_many_diagonals() {
    // Diagonals -1, 0, 2 and 3.
    let m = CsrMatrix::from_triples(
        4,
        6,
        &[
            (0, 0, 1.0),
            (0, 2, 2.0),
            (1, 0, 3.0),
            (1, 4, 4.0),
            (2, 5, 5.0),
        ],
    )
    .unwrap();
    let d: Decomposition = "(dia 3 4)".parse().unwrap();
    match materialize(&m, &d) {
        Err(DecomposeError::TooManyDiagonals {
            found: 4,
            limit: 3,
            first_beyond: 3,
        }) => {}
        other => panic!("{other:?}"),
    }
    let stats = MatrixStats::of(&m).unwrap();
    assert_eq!(stats.diagonals, 4);
    let never = estimate(&stats, &d);
    assert!(never.bytes >= lacuna_schedule::decompose::UNCONVERTIBLE && never.padding.is_finite());
    let fits = estimate(&stats, &"(dia 4 4)".parse().unwrap());
    assert!(fits.bytes < never.bytes, "{fits:?}");
    // Entries left by an earlier part count, not the whole matrix's: ELL takes each row's first
    // entry, leaving diagonals 2 and 3.
    let parts = materialize(&m, &"(+ (ell 1) (dia 2 4))".parse().unwrap()).unwrap();
    assert_eq!(bits(to_coo(&parts)), bits(m.to_triples().unwrap()));
}

#[test]
fn terms_that_may_leave_entries_unstored_are_rejected() {
    for text in [
        "(ell 4)",
        "(bsr 2)",
        "(bucket 1 5 csr)",
        "(+ (ell 3) (ell 2))",
        "(colpart 2 0 csr)",
        "(+ (colpart 2 0 csr) (colpart 3 1 csr))",
        "(+ (colpart 2 0 (ell 3)) (colpart 2 1 csr))",
    ] {
        assert!(
            matches!(parse(text), Err(DecomposeError::NotTotal)),
            "{text}"
        );
    }
    for text in [
        "(+ (ell 2) remainder)",
        "(+ (colpart 2 0 csr) (colpart 2 1 remainder))",
        "(colpart 1 0 csr)",
    ] {
        assert!(parse(text).is_ok(), "{text}");
    }
    assert!(matches!(
        Decomposition::new(Layout::Ell { width: 2 }),
        Err(DecomposeError::NotTotal)
    ));
}

/// `rcm` stores every row once (its row ids a permutation), which holds only for the whole
/// matrix: inside a sum, a bucket or a column part it is an error naming it.
#[test]
fn rcm_is_only_the_whole_decomposition() {
    assert!(parse("rcm").is_ok());
    for text in [
        "(+ (bucket 1 3 (ell 2)) rcm)",
        "(+ rcm csr)",
        "(bucket 0 5 rcm)",
        "(+ (colpart 2 0 rcm) (colpart 2 1 csr))",
    ] {
        match parse(text) {
            Err(e @ DecomposeError::NotAtRoot { op: "rcm" }) => {
                assert!(e.to_string().contains("only valid as the whole"), "{e}")
            }
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn malformed_matrices_are_rejected() {
    let new = |n_rows, n_cols, indptr: &[usize], indices: &[usize], n_values| {
        CsrMatrix::new(
            n_rows,
            n_cols,
            indptr.to_vec(),
            indices.to_vec(),
            vec![1.0; n_values],
        )
    };
    assert!(matches!(
        new(2, 3, &[0, 1], &[0], 1),
        Err(DecomposeError::IndptrLength {
            expected: 3,
            found: 2
        })
    ));
    assert!(matches!(
        new(2, 3, &[1, 1, 1], &[0], 1),
        Err(DecomposeError::IndptrNotMonotone { row: 0, .. })
    ));
    assert!(matches!(
        new(2, 3, &[0, 2, 1], &[0, 1], 2),
        Err(DecomposeError::IndptrNotMonotone { row: 1, .. })
    ));
    assert!(matches!(
        new(2, 3, &[0, 1, 5], &[0, 1], 2),
        Err(DecomposeError::IndptrNotMonotone { .. })
    ));
    assert!(matches!(
        new(1, 3, &[0, 1], &[0, 1], 2),
        Err(DecomposeError::IndptrNotMonotone { row: 1, .. })
    ));
    assert!(matches!(
        new(1, 3, &[0, 1], &[3], 1),
        Err(DecomposeError::ColumnOutOfRange { col: 3, .. })
    ));
    assert!(matches!(
        new(1, 3, &[0, 2], &[2, 1], 2),
        Err(DecomposeError::ColumnsNotIncreasing { col: 1, .. })
    ));
    assert!(matches!(
        new(1, 3, &[0, 2], &[1, 1], 2),
        Err(DecomposeError::ColumnsNotIncreasing { .. })
    ));
    assert!(matches!(
        new(1, 3, &[0, 1], &[1], 2),
        Err(DecomposeError::ValuesLength {
            expected: 1,
            found: 2
        })
    ));
    assert!(matches!(
        MatrixStats::from_csr(&[], &[], 3),
        Err(DecomposeError::IndptrLength { .. })
    ));
    assert!(matches!(
        MatrixStats::from_csr(&[0, 2], &[0, 7], 3),
        Err(DecomposeError::ColumnOutOfRange { .. })
    ));
    assert!(matches!(
        CsrMatrix::from_triples(2, 2, &[(0, 0, 1.0), (0, 0, 2.0)]),
        Err(DecomposeError::ColumnsNotIncreasing { .. })
    ));
    assert!(matches!(
        CsrMatrix::from_triples(2, 2, &[(2, 0, 1.0)]),
        Err(DecomposeError::RowOutOfRange { .. })
    ));
    // A matrix whose public fields were edited after validation is checked again.
    let mut m = CsrMatrix::new(1, 3, vec![0, 1], vec![1], vec![1.0]).unwrap();
    m.indices[0] = 9;
    assert!(matches!(
        materialize(&m, &Decomposition::csr()),
        Err(DecomposeError::ColumnOutOfRange { .. })
    ));
}

#[test]
fn bad_candidates_are_rejected() {
    let err = |r: Result<Candidates, DecomposeError>| match r {
        Err(DecomposeError::BadCandidate { field, value, .. }) => (field, value),
        other => panic!("{other:?}"),
    };
    assert_eq!(err(Candidates::new(&[0], &[], &[], &[])), ("widths", 0));
    assert_eq!(err(Candidates::new(&[1], &[65], &[], &[])), ("blocks", 65));
    assert_eq!(
        err(Candidates::new(&[1], &[2], &[0], &[])),
        ("col_parts", 0)
    );
    assert_eq!(
        err(Candidates::new(&[1], &[2], &[1], &[1 << 20])),
        ("pad_tiles", 1 << 20)
    );
    let many: Vec<u32> = (1..=17).collect();
    assert_eq!(err(Candidates::new(&many, &[], &[], &[])), ("widths", 17));
    let ok = Candidates::new(&[4, 1, 4], &[], &[2], &[]).unwrap();
    assert_eq!(ok.widths(), &[1, 4]);
}

#[test]
fn parts_too_large_to_store_are_errors() {
    let m = CsrMatrix::from_triples(
        100,
        10,
        &(0..100).map(|r| (r, r % 10, 1.0)).collect::<Vec<_>>(),
    )
    .unwrap();
    for text in [
        "(+ (ell 4000000000) remainder)",
        "(padded 4000000000)",
        "(split_rows 4000000000)",
    ] {
        let d = parse(text).unwrap();
        assert!(
            matches!(
                materialize(&m, &d),
                Err(DecomposeError::StorageTooLarge { .. })
            ),
            "{text}"
        );
        let cost = estimate(&MatrixStats::of(&m).unwrap(), &d);
        assert!(cost.bytes.is_finite() && cost.work.is_finite());
    }
    // Blocks larger than the matrix simply hold nothing.
    let parts = materialize(&m, &parse("(+ (bsr 4000000000) remainder)").unwrap()).unwrap();
    assert_eq!(to_coo(&parts), m.to_triples().unwrap());
    // `rcm`'s order takes a slot per column: a matrix declaring 2^40 columns is refused
    // before allocating them.
    let wide = CsrMatrix::from_triples(2, 1 << 40, &[(0, 5, 1.0), (1, 1 << 39, 2.0)]).unwrap();
    assert!(matches!(
        materialize(&wide, &parse("rcm").unwrap()),
        Err(DecomposeError::StorageTooLarge { op: "rcm", .. })
    ));
}

/// A small parameter, zero (out of range) about one time in ten.
fn param(max: u32) -> impl Strategy<Value = u32> {
    prop_oneof![9 => 1..max, 1 => Just(0)]
}

/// Leaves with small parameters, so that random terms exercise truncation and padding.
fn leaf() -> impl Strategy<Value = Layout> {
    prop_oneof![
        Just(Layout::Csr),
        Just(Layout::Remainder),
        param(6).prop_map(|width| Layout::Ell { width }),
        param(5).prop_map(|block| Layout::Bsr { block }),
        param(5).prop_map(|tile| Layout::Padded { tile }),
        param(6).prop_map(|width| Layout::SplitRows { width }),
        (param(10), param(9)).prop_map(|(lanes, sigma)| Layout::Sell { lanes, sigma }),
        // As many diagonals as any generated matrix has (or an out-of-range count).
        (prop_oneof![9 => Just(64u32), 1 => Just(0)], param(10))
            .prop_map(|(diagonals, lanes)| Layout::Dia { diagonals, lanes }),
        Just(Layout::Rcm),
    ]
}

fn layout() -> impl Strategy<Value = Layout> {
    leaf().prop_recursive(4, 32, 2, |inner| {
        let bucket = (0u32..6, param(8), inner.clone());
        let colpart = (param(4), 0u32..4, inner.clone());
        prop_oneof![
            bucket.prop_map(|(lo, d, f)| Layout::Bucket {
                lo,
                hi: lo + d,
                inner: Box::new(f)
            }),
            colpart.prop_map(|(parts, p, f)| Layout::ColPart {
                parts,
                part: p % parts.max(1),
                inner: Box::new(f)
            }),
            (inner.clone(), inner).prop_map(|(a, b)| Layout::Sum(Box::new(a), Box::new(b))),
        ]
    })
}

fn matrix() -> impl Strategy<Value = CsrMatrix> {
    (0usize..10, 0usize..12).prop_flat_map(|(n_rows, n_cols)| {
        prop::collection::vec(
            (0..n_rows.max(1), 0..n_cols.max(1), any::<f64>()),
            0..=(n_rows * n_cols).min(60),
        )
        .prop_map(move |mut entries| {
            entries.retain(|e| e.0 < n_rows && e.1 < n_cols);
            entries.sort_by_key(|e| (e.0, e.1));
            entries.dedup_by_key(|e| (e.0, e.1));
            CsrMatrix::from_triples(n_rows, n_cols, &entries).unwrap()
        })
    })
}

fn bits(t: Vec<(usize, usize, f64)>) -> Vec<(usize, usize, u64)> {
    t.into_iter().map(|(r, c, v)| (r, c, v.to_bits())).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any term either is rejected with an error or, once validated, reproduces any matrix.
    #[test]
    fn random_terms_are_rejected_or_reproduce(l in layout(), total in prop::bool::weighted(0.8), m in matrix()) {
        let l = if total { Layout::Sum(Box::new(l), Box::new(Layout::Remainder)) } else { l };
        match Decomposition::new(l) {
            Ok(d) => {
                let parts = materialize(&m, &d).unwrap();
                prop_assert_eq!(bits(to_coo(&parts)), bits(m.to_triples().unwrap()), "{}", d);
                let cost = estimate(&MatrixStats::of(&m).unwrap(), &d);
                prop_assert!(cost.bytes >= 0.0 && cost.work >= 0.0 && cost.padding.is_finite(), "{:?}", cost);
                prop_assert_eq!(d.to_string().parse::<Decomposition>().unwrap(), d);
            }
            Err(e) => prop_assert!(matches!(e, DecomposeError::NotTotal | DecomposeError::BadParameter { .. } | DecomposeError::NotAtRoot { .. }), "{e}"),
        }
    }

    #[test]
    fn arbitrary_text_never_panics(text in "[()a-z_+0-9 ]{0,48}") {
        let _ = text.parse::<Decomposition>();
    }
}
