//! `CooTensor::sort_and_sum_duplicates` against a model: entries in lexicographic order of
//! their coordinates, duplicates summed in the order they were given (bit for bit), for
//! matrices (the counting sort by row), rows beyond the shape (the general sort), vectors and
//! 3-D tensors; sorted input is left as it is, and `sorted_and_unique` tells it apart.

use lacuna_ir::{ArrayData, CooTensor};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn model(t: &CooTensor) -> Vec<(Vec<usize>, u64)> {
    let v = t.values.to_f64_vec();
    let mut sums: BTreeMap<Vec<usize>, f64> = BTreeMap::new();
    for (e, x) in v.iter().enumerate() {
        let key: Vec<usize> = t.coords.iter().map(|c| c[e]).collect();
        sums.entry(key).and_modify(|s| *s += x).or_insert(*x);
    }
    sums.into_iter().map(|(k, s)| (k, s.to_bits())).collect()
}

fn entries(t: &CooTensor) -> Vec<(Vec<usize>, u64)> {
    let v = t.values.to_f64_vec();
    (0..t.nnz())
        .map(|e| (t.coords.iter().map(|c| c[e]).collect(), v[e].to_bits()))
        .collect()
}

/// Tensors of rank 1 to 3 with extents up to 6, entries up to 40 (duplicates likely), some
/// coordinates past the extent (the shape does not bound them here).
fn tensor() -> impl Strategy<Value = CooTensor> {
    (1usize..4, 1usize..7).prop_flat_map(|(rank, ext)| {
        proptest::collection::vec(
            (proptest::collection::vec(0..ext + 1, rank), -8.0f64..8.0),
            0..40,
        )
        .prop_map(move |es| CooTensor {
            shape: vec![ext; rank],
            coords: (0..rank)
                .map(|d| es.iter().map(|(c, _)| c[d]).collect())
                .collect(),
            values: ArrayData::F64(es.iter().map(|(_, v)| *v).collect()),
        })
    })
}

proptest! {
    #[test]
    fn sorting_sums_duplicates_in_given_order(t in tensor()) {
        let want = model(&t);
        let mut got = t.clone();
        got.sort_and_sum_duplicates();
        prop_assert_eq!(entries(&got), want);
        prop_assert!(got.sorted_and_unique());
        // Sorted input stays as it is.
        let again = {
            let mut a = got.clone();
            a.sort_and_sum_duplicates();
            a
        };
        prop_assert_eq!(&again, &got);
        let unique = t.nnz() == entries(&got).len();
        let ordered = entries(&t) == entries(&got);
        prop_assert_eq!(t.sorted_and_unique(), unique && ordered);
    }
}

#[test]
fn scalars_and_mismatched_coordinates_are_not_taken_as_sorted() {
    let scalar = |n: usize| CooTensor {
        shape: vec![],
        coords: vec![],
        values: ArrayData::F64(vec![1.0; n]),
    };
    assert!(scalar(1).sorted_and_unique());
    assert!(!scalar(2).sorted_and_unique());
    let mut two = scalar(2);
    two.sort_and_sum_duplicates();
    assert_eq!(two.values, ArrayData::F64(vec![2.0]));
    let short = CooTensor {
        shape: vec![3, 3],
        coords: vec![vec![0, 1], vec![0]],
        values: ArrayData::F64(vec![1.0]),
    };
    assert!(!short.sorted_and_unique());
}

/// A matrix declaring far more rows than it has entries (up to `usize::MAX`, as a file may)
/// sorts by the general sort, without a slot per row: entries in order, duplicates summed.
#[test]
fn huge_declared_extents_sort_without_a_slot_per_row() {
    for rows in [1 << 40, usize::MAX - 1, usize::MAX] {
        let mut t = CooTensor {
            shape: vec![rows, 4],
            coords: vec![vec![rows - 1, 7, 7, 0], vec![2, 1, 1, 3]],
            values: ArrayData::F64(vec![1.0, 2.0, 0.5, 4.0]),
        };
        let want = model(&t);
        t.sort_and_sum_duplicates();
        assert_eq!(entries(&t), want, "{rows} rows");
        assert!(t.sorted_and_unique());
    }
}
