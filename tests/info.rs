//! `lacuna info` counts each format's storage bytes from the matrix's entries instead of
//! building the storage: the counts equal the built storage's bytes exactly.

use lacuna::driver::{info, load_coo, preset_bytes, storage_bytes, InfoFormat};
use lacuna::ir::{ArrayData, CooTensor};
use proptest::prelude::*;
use std::path::Path;

fn formats(coo: &CooTensor) -> Vec<InfoFormat> {
    let max = (0..coo.shape[0])
        .map(|i| coo.coords[0].iter().filter(|&&r| r == i).count())
        .max()
        .unwrap_or(0);
    // What `info` reports, and blocks of 3 besides.
    let mut f = InfoFormat::reported(max).to_vec();
    f.push(InfoFormat::Bsr(3));
    f
}

fn assert_counts_match(what: &str, coo: &CooTensor) {
    for f in formats(coo) {
        let enc = lacuna::ir::encoding::preset(&f.name()).expect("a preset");
        let built = lacuna::ir::storage::SparseTensor::from_coo(coo, &enc).expect("stores");
        assert_eq!(
            preset_bytes(coo, f),
            Some(storage_bytes(&built)),
            "{what} in {}",
            f.name()
        );
    }
}

#[test]
fn counted_bytes_equal_built_storage_on_the_bundled_matrices() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/data") {
        let p = entry.expect("entry").path();
        if p.extension().is_some_and(|e| e == "mtx") {
            let mut coo = load_coo(&p).expect("loads");
            coo.sort_and_sum_duplicates();
            assert_counts_match(&p.display().to_string(), &coo);
            // What `info` reports is the same count.
            let report = info(&p).expect("info");
            assert_eq!(
                report["storage_bytes"]["csr"].as_u64(),
                preset_bytes(&coo, InfoFormat::Csr).map(|b| b as u64)
            );
            // `pattern` files (every value 1) are reported as equal values, the others not.
            let pattern = std::fs::read_to_string(&p)
                .expect("reads")
                .lines()
                .next()
                .is_some_and(|h| h.contains(" pattern "));
            assert_eq!(
                report["equal_values"].as_bool(),
                Some(pattern),
                "{}",
                p.display()
            );
            // The hottest columns' share, as the built-in schedule reads it.
            assert_eq!(
                report["hot_columns_permille"].as_u64(),
                Some(lacuna::driver::hot_columns(&coo) as u64)
            );
            n += 1;
        }
    }
    assert!(n >= 5, "the bundled matrices");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Shapes that are not multiples of the block sizes, empty rows and columns, no entries.
    #[test]
    fn counted_bytes_equal_built_storage(m in 1usize..23, n in 1usize..23, seed in any::<u64>(), density in 0u64..4) {
        let mut x = seed | 1;
        let mut entries = Vec::new();
        for i in 0..m {
            for j in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x % 4 < density {
                    entries.push((i, j));
                }
            }
        }
        let coo = CooTensor {
            shape: vec![m, n],
            coords: vec![entries.iter().map(|e| e.0).collect(), entries.iter().map(|e| e.1).collect()],
            values: ArrayData::F64(vec![1.5; entries.len()]),
        };
        assert_counts_match(&format!("{m}x{n}, {} entries", entries.len()), &coo);
    }
}

/// Not 2-D, or an ELL wider than a row: no count.
#[test]
fn no_count_for_what_the_formats_cannot_hold() {
    let cube = CooTensor {
        shape: vec![2, 2, 2],
        coords: vec![vec![0], vec![1], vec![1]],
        values: ArrayData::F64(vec![1.0]),
    };
    assert_eq!(preset_bytes(&cube, InfoFormat::Csr), None);
    let row = CooTensor {
        shape: vec![1, 3],
        coords: vec![vec![0], vec![2]],
        values: ArrayData::F64(vec![1.0]),
    };
    assert_eq!(preset_bytes(&row, InfoFormat::Ell(4)), None);
    assert_eq!(preset_bytes(&row, InfoFormat::Bsr(0)), None);
}
