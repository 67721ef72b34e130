//! `SparseTensor::from_coo` builds CSR storage of entries already in row-major order without
//! sorting them: the storage equals what the general path builds from the same entries
//! shuffled (bit for bit, at every declared width), and entries the fast path cannot take
//! (outside the shape, duplicates, out of order) get the general path's result or error.

use lacuna_ir::encoding::Encoding;
use lacuna_ir::storage::SparseTensor;
use lacuna_ir::{ArrayData, CooTensor};
use proptest::prelude::*;

fn coo(shape: (usize, usize), entries: &[(usize, usize, f64)]) -> CooTensor {
    CooTensor {
        shape: vec![shape.0, shape.1],
        coords: vec![
            entries.iter().map(|e| e.0).collect(),
            entries.iter().map(|e| e.1).collect(),
        ],
        values: ArrayData::F64(entries.iter().map(|e| e.2).collect()),
    }
}

fn encodings() -> Vec<Encoding> {
    [
        "map = (i, j) -> (i : dense, j : compressed)",
        "map = (i, j) -> (i : dense, j : compressed), posWidth = 32, crdWidth = 32",
        "map = (i, j) -> (i : dense, j : compressed), posWidth = 8, crdWidth = 16",
        "map = (i, j) -> (i : dense, j : compressed(nonunique))",
    ]
    .iter()
    .map(|t| t.parse().expect("parses"))
    .collect()
}

proptest! {
    #[test]
    fn sorted_entries_store_as_the_general_path_stores_them(
        m in 1usize..9,
        n in 1usize..9,
        picks in proptest::collection::btree_set((0usize..9, 0usize..9), 0..40),
        seed in any::<u64>(),
    ) {
        let sorted: Vec<(usize, usize, f64)> = picks
            .iter()
            // A row or column just past the shape now and then.
            .filter(|&&(i, j)| i <= m && j <= n)
            .map(|&(i, j)| (i, j, (i * 10 + j) as f64 * 0.5 - 3.0))
            .collect();
        // The same entries in another order take the general path (it sorts them).
        let mut shuffled = sorted.clone();
        let mut s = seed | 1;
        for k in (1..shuffled.len()).rev() {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            shuffled.swap(k, (s % (k as u64 + 1)) as usize);
        }
        let fast_input = coo((m, n), &sorted);
        prop_assert!(fast_input.sorted_and_unique());
        for enc in encodings() {
            let fast = SparseTensor::from_coo(&fast_input, &enc);
            let general = SparseTensor::from_coo(&coo((m, n), &shuffled), &enc);
            match (fast, general) {
                (Ok(f), Ok(g)) => {
                    prop_assert_eq!(f.disassemble(), g.disassemble(), "{}", enc);
                    prop_assert_eq!(f.encoding(), &enc);
                    f.validate().expect("valid storage");
                }
                // The same kind of error (the entry named depends on the order).
                (Err(f), Err(g)) => prop_assert_eq!(
                    std::mem::discriminant(&f),
                    std::mem::discriminant(&g),
                    "{} vs {}",
                    f,
                    g
                ),
                (f, g) => prop_assert!(false, "{enc}: fast {f:?} vs general {g:?}"),
            }
        }
    }
}

/// Entries outside the shape, and duplicates, are refused or summed as before.
#[test]
fn entries_the_fast_path_cannot_take_go_the_general_way() {
    let enc = &encodings()[0];
    let beyond = coo((2, 3), &[(0, 1, 1.0), (2, 0, 2.0)]);
    let beyond_shuffled = coo((2, 3), &[(2, 0, 2.0), (0, 1, 1.0)]);
    let wide = coo((2, 3), &[(0, 1, 1.0), (1, 3, 2.0)]);
    let wide_shuffled = coo((2, 3), &[(1, 3, 2.0), (0, 1, 1.0)]);
    for (sorted, shuffled) in [(beyond, beyond_shuffled), (wide, wide_shuffled)] {
        assert!(sorted.sorted_and_unique());
        let (a, b) = (
            SparseTensor::from_coo(&sorted, enc).expect_err("outside the shape"),
            SparseTensor::from_coo(&shuffled, enc).expect_err("outside the shape"),
        );
        // The same error, in the dimensions' terms, whatever the order of the entries.
        assert!(
            matches!(
                a,
                lacuna_ir::storage::StorageError::DimCoordOutOfRange { .. }
            ),
            "{a}"
        );
        assert_eq!(
            std::mem::discriminant(&a),
            std::mem::discriminant(&b),
            "{a} vs {b}"
        );
    }
    let dup = coo((2, 3), &[(0, 1, 1.0), (0, 1, 2.0), (1, 0, 4.0)]);
    match SparseTensor::from_coo(&dup, enc) {
        Ok(t) => {
            let c = t.to_coo();
            assert_eq!(c.coords, vec![vec![0, 1], vec![1, 0]]);
            assert_eq!(c.values, ArrayData::F64(vec![3.0, 4.0]));
        }
        Err(e) => panic!("duplicates are summed: {e}"),
    }
}

/// `Encoding::is_csr`, which the fast path, the Python results and zero-copy inputs share:
/// CSR at any widths; no other preset, no slice, no other level property.
#[test]
fn is_csr_names_csr_storage_only() {
    use lacuna_ir::encoding::preset;
    for enc in encodings().iter().take(3) {
        assert!(enc.is_csr(), "{enc}");
    }
    assert!(!encodings()[3].is_csr(), "non-unique coordinates");
    for name in ["csc", "dcsr", "coo", "bsr(2,2)", "ell(2)", "dense", "2:4"] {
        assert!(!preset(name).expect("a preset").is_csr(), "{name}");
    }
    assert!(preset("csr").expect("a preset").is_csr());
    let sliced: Encoding = "map = (i : #sparse_tensor<slice(0, 2, 1)>, j : #sparse_tensor<slice(0, 2, 1)>) -> (i : dense, j : compressed)"
        .parse()
        .expect("parses");
    assert!(!sliced.is_csr(), "a view");
}

/// A matrix declaring far more rows than can be allocated (a fuzzed `.mtx` declared
/// 12 297 829 382 473 034 411) is an error of the fast path, as of the general one, not a
/// panic on the position array's capacity.
#[test]
fn rows_beyond_memory_are_errors_not_panics() {
    for m in [usize::MAX, 12_297_829_382_473_034_411, usize::MAX / 2] {
        let a = coo((m, 4), &[(0, 0, 1.5), (1, 2, -0.003), (2, 3, 8.0)]);
        for enc in encodings() {
            match SparseTensor::from_coo(&a, &enc) {
                Err(e) => assert!(e.to_string().contains("too large"), "{m} {enc}: {e}"),
                Ok(_) => panic!("{m} rows stored in {enc}"),
            }
        }
    }
}
