//! The `sparse_tensor` operations on stored tensors (concatenate, sort, reorder_coo,
//! crd_translate, reinterpret_map, extract_slice, static slices) against plain COO and dense
//! references, their errors, and property tests.

use lacuna_ir::encoding::{
    parse_encoding, preset, Dim, DimSlice, Encoding, EncodingParts, IndexWidth, Lvl, SliceBound,
    PRESET_EXAMPLES,
};
use lacuna_ir::storage::{CrdTransDirection, IndexArray, SparseTensor, StorageError, Validation};
use lacuna_ir::{ArrayData, CooTensor, DType};
use proptest::prelude::*;

fn coo(shape: &[usize], entries: &[(&[usize], f64)]) -> CooTensor {
    let mut coords = vec![Vec::new(); shape.len()];
    for (c, _) in entries {
        for (d, &x) in c.iter().enumerate() {
            coords[d].push(x);
        }
    }
    CooTensor {
        shape: shape.to_vec(),
        coords,
        values: ArrayData::F64(entries.iter().map(|e| e.1).collect()),
    }
}

fn enc(src: &str) -> Encoding {
    parse_encoding(src).unwrap_or_else(|e| panic!("{src}: {e}"))
}

fn store(c: &CooTensor, name: &str) -> SparseTensor {
    SparseTensor::from_coo(c, &preset(name).unwrap()).unwrap()
}

/// The row-major dense values of a COO tensor, duplicates summed: the reference semantics.
fn dense_ref(c: &CooTensor) -> Vec<f64> {
    let len = c.shape.iter().product();
    let mut out = vec![0.0; len];
    for (e, v) in c.values.to_f64_vec().into_iter().enumerate() {
        let idx = (c.coords.iter().zip(&c.shape)).fold(0, |acc, (x, &n)| acc * n + x[e]);
        out[idx] += v;
    }
    out
}

fn dense_of(t: &SparseTensor) -> Vec<f64> {
    t.to_dense().unwrap().data.to_f64_vec()
}

fn u64s(v: &[u64]) -> IndexArray {
    IndexArray::U64(v.to_vec())
}

// ---------------------------------------------------------------- concatenate

#[test]
fn concatenate_matches_dense_concatenation() {
    let a = coo(&[2, 3], &[(&[0, 0], 1.0), (&[1, 2], 2.0)]);
    let b = coo(&[2, 2], &[(&[0, 1], 3.0), (&[1, 0], 4.0)]);
    let (ta, tb) = (store(&a, "csr"), store(&b, "coo"));
    let ab = SparseTensor::concatenate(&[&ta, &tb], 1, &preset("dcsc").unwrap()).unwrap();
    assert_eq!(ab.dim_shape(), &[2, 5]);
    #[rustfmt::skip]
    let want = [1.0, 0.0, 0.0, 0.0, 3.0,
                0.0, 0.0, 2.0, 4.0, 0.0];
    assert_eq!(dense_of(&ab), want);
    let c = coo(&[1, 3], &[(&[0, 1], 5.0)]);
    let rows =
        SparseTensor::concatenate(&[&ta, &store(&c, "dense")], 0, &preset("csr").unwrap()).unwrap();
    assert_eq!(rows.dim_shape(), &[3, 3]);
    assert_eq!(
        rows.print(),
        "---- Sparse Tensor ----\nnse = 3\ndim = ( 3, 3 )\nlvl = ( 3, 3 )\npos[1] : ( 0, 1, 2, 3 )\ncrd[1] : ( 0, 2, 1 )\nvalues : ( 1, 2, 5 )\n----\n",
        "padding zeros of the dense part are dropped"
    );
}

#[test]
fn concatenate_three_dimensional_and_single_part() {
    let a = coo(&[2, 2, 2], &[(&[1, 0, 1], 1.0)]);
    let b = coo(&[2, 2, 1], &[(&[0, 1, 0], 2.0)]);
    let csf = preset("csf(3)").unwrap();
    let (ta, tb) = (store(&a, "csf(3)"), store(&b, "coo3"));
    let t = SparseTensor::concatenate(&[&ta, &tb], 2, &csf).unwrap();
    let mut expect = coo(&[2, 2, 3], &[(&[1, 0, 1], 1.0), (&[0, 1, 2], 2.0)]);
    expect.sort_and_sum_duplicates();
    assert_eq!(t, SparseTensor::from_coo(&expect, &csf).unwrap());
    assert_eq!(SparseTensor::concatenate(&[&ta], 0, &csf).unwrap(), ta);
}

#[test]
fn concatenate_errors_name_the_part_and_dimension() {
    let a = store(&coo(&[2, 3], &[(&[0, 0], 1.0)]), "csr");
    let b = store(&coo(&[3, 3], &[]), "csr");
    let csr = preset("csr").unwrap();
    assert_eq!(
        SparseTensor::concatenate(&[], 0, &csr),
        Err(StorageError::NoParts)
    );
    assert_eq!(
        SparseTensor::concatenate(&[&a, &b], 2, &csr),
        Err(StorageError::ConcatDim {
            dim: Dim(2),
            rank: 2
        })
    );
    let e = SparseTensor::concatenate(&[&a, &a, &b], 1, &csr).unwrap_err();
    assert_eq!(
        e,
        StorageError::ConcatShape {
            part: 2,
            dim: Dim(0),
            expected: 2,
            found: 3
        }
    );
    assert_eq!(
        e.to_string(),
        "part 2: dimension 0 has size 3, part 0 has size 2"
    );
    let three = store(&coo(&[2, 3, 1], &[]), "csf(3)");
    assert_eq!(
        SparseTensor::concatenate(&[&a, &three], 0, &csr),
        Err(StorageError::ConcatRank {
            part: 1,
            expected: 2,
            found: 3
        })
    );
    let ints = CooTensor {
        shape: vec![2, 3],
        coords: vec![vec![], vec![]],
        values: ArrayData::I32(vec![]),
    };
    let ints = SparseTensor::from_coo(&ints, &csr).unwrap();
    assert_eq!(
        SparseTensor::concatenate(&[&a, &ints], 0, &csr),
        Err(StorageError::ConcatDType {
            part: 1,
            expected: DType::F64,
            found: DType::I32
        })
    );
    assert_eq!(
        SparseTensor::concatenate(&[&a, &a], 0, &preset("csf(3)").unwrap()),
        Err(StorageError::DimRank {
            expected: 3,
            found: 2
        })
    );
}

// ---------------------------------------------------------------- sort and reorder_coo

const UNORDERED_COO: &str =
    "map = (i, j) -> (i : compressed(nonunique, nonordered), j : singleton(nonordered))";

/// `(2, 1) = 1, (0, 3) = 2, (2, 0) = 3, (1, 1) = 4` in storage order, not sorted.
fn unordered_coo() -> SparseTensor {
    SparseTensor::assemble(
        &enc(UNORDERED_COO),
        &[3, 4],
        vec![u64s(&[0, 4]), u64s(&[2, 1, 0, 3, 2, 0, 1, 1])],
        ArrayData::F64(vec![1.0, 2.0, 3.0, 4.0]),
        Validation::Checked,
    )
    .unwrap()
}

#[test]
fn sort_orders_the_coo_region_in_place() {
    let t = unordered_coo();
    let sorted = t.sort();
    assert_eq!(sorted.encoding(), t.encoding());
    assert_eq!(
        sorted.disassemble(),
        (
            vec![u64s(&[0, 4]), u64s(&[0, 3, 1, 1, 2, 0, 2, 1])],
            ArrayData::F64(vec![2.0, 4.0, 3.0, 1.0])
        )
    );
    assert_eq!(dense_of(&sorted), dense_of(&t));
    let mut in_place = t.clone();
    in_place.sort_in_place();
    assert_eq!(in_place, sorted);
    assert_eq!(sorted.sort(), sorted, "sorting is idempotent");
}

#[test]
fn reorder_coo_gives_the_ordered_variant() {
    let t = unordered_coo();
    let coo = preset("coo").unwrap();
    let ordered = t.reorder_coo(&coo).unwrap();
    assert_eq!(ordered, SparseTensor::from_coo(&t.to_coo(), &coo).unwrap());
    let (buffers, values) = ordered.disassemble();
    SparseTensor::assemble(&coo, &[3, 4], buffers, values, Validation::Checked).unwrap();
    let soa = enc("map = (i, j) -> (i : compressed(nonunique), j : singleton(soa))");
    let split = t.reorder_coo(&soa).unwrap();
    assert_eq!(split.coordinates(Lvl(1)), Some(&u64s(&[3, 1, 0, 1])));
    assert_eq!(dense_of(&split), dense_of(&t));
}

#[test]
fn sort_moves_subtrees_of_nonordered_outer_levels() {
    // Row 2 holds (1, a), (3, b); row 0 holds (0, c); rows stored 2 first.
    let dcsr = enc("map = (i, j) -> (i : compressed(nonordered), j : compressed(nonordered))");
    let t = SparseTensor::assemble(
        &dcsr,
        &[3, 4],
        vec![
            u64s(&[0, 2]),
            u64s(&[2, 0]),
            u64s(&[0, 2, 3]),
            u64s(&[3, 1, 0]),
        ],
        ArrayData::I64(vec![10, 20, 30]),
        Validation::Checked,
    )
    .unwrap();
    let s = t.sort();
    assert_eq!(
        s.disassemble(),
        (
            vec![
                u64s(&[0, 2]),
                u64s(&[0, 2]),
                u64s(&[0, 1, 3]),
                u64s(&[0, 1, 3])
            ],
            ArrayData::I64(vec![30, 20, 10])
        )
    );
    assert_eq!(
        s.reorder_coo(&preset("dcsr").unwrap()).unwrap(),
        SparseTensor::from_coo(&t.to_coo(), &preset("dcsr").unwrap()).unwrap()
    );
}

#[test]
fn sort_compacts_loose_segments_under_dense_batches() {
    let batched = enc(
        "map = (b, i, j) -> (b : dense, i : loose_compressed(nonunique, nonordered), j : singleton(nonordered))",
    );
    // Batch 0: positions [1, 3) hold (1, 1) and (0, 2); batch 1: [4, 5) holds (0, 0).
    let t = SparseTensor::assemble(
        &batched,
        &[2, 2, 3],
        vec![u64s(&[1, 3, 4, 5]), u64s(&[1, 2, 1, 1, 0, 2, 0, 1, 0, 0])],
        ArrayData::F32(vec![-1.0, 1.0, 2.0, -1.0, 3.0]),
        Validation::Checked,
    )
    .unwrap();
    let s = t.sort();
    assert_eq!(
        s.disassemble(),
        (
            vec![u64s(&[0, 2, 2, 3]), u64s(&[0, 2, 1, 1, 0, 0])],
            ArrayData::F32(vec![2.0, 1.0, 3.0])
        )
    );
    assert_eq!(dense_of(&s), dense_of(&t));
}

#[test]
fn sort_of_unchecked_overlapping_segments_keeps_each_position_once() {
    // Rows 0 and 1 both claim coordinates [0, 2); row 2 claims [1, 3).
    let csr = enc("map = (i, j) -> (i : dense, j : compressed(nonordered))");
    let t = SparseTensor::assemble(
        &csr,
        &[3, 4],
        vec![u64s(&[0, 2, 0, 3]), u64s(&[3, 1, 2])],
        ArrayData::F64(vec![1.0, 2.0, 3.0]),
        Validation::Trusted,
    )
    .unwrap();
    let s = t.sort();
    assert_eq!(
        s.disassemble(),
        (
            vec![u64s(&[0, 2, 2, 3]), u64s(&[1, 3, 2])],
            ArrayData::F64(vec![2.0, 1.0, 3.0])
        )
    );
    let (buffers, values) = s.disassemble();
    assert!(SparseTensor::assemble(&csr, &[3, 4], buffers, values, Validation::Checked).is_ok());
}

#[test]
fn reorder_coo_errors() {
    let t = unordered_coo();
    assert_eq!(
        t.reorder_coo(&preset("coo3").unwrap()),
        Err(StorageError::LevelRank {
            expected: 2,
            found: 3
        })
    );
    assert_eq!(
        t.reorder_coo(&preset("csr").unwrap()),
        Err(StorageError::ReorderLevel { lvl: Lvl(0) })
    );
    assert_eq!(
        t.reorder_coo(&enc(
            "map = (i, j) -> (i : compressed(nonunique), j : singleton(nonunique))"
        )),
        Err(StorageError::ReorderLevel { lvl: Lvl(1) })
    );
    let sliced = enc(
        "map = (i : #sparse_tensor<slice(0, 3, 1)>, j) -> (i : compressed(nonunique), j : singleton)",
    );
    assert_eq!(t.reorder_coo(&sliced), Err(StorageError::ReorderDims));
    let wide = store(&coo(&[1, 300], &[(&[0, 299], 1.0)]), "coo");
    let narrow = preset("coo")
        .unwrap()
        .with_widths(IndexWidth::Native, IndexWidth::W8);
    assert!(matches!(
        wide.reorder_coo(&narrow),
        Err(StorageError::WidthOverflow {
            value: 299,
            width: 8,
            ..
        })
    ));
}

// ---------------------------------------------------------------- crd_translate

#[test]
fn crd_translate_through_maps() {
    let dim_to_lvl = CrdTransDirection::DimToLvl;
    let lvl_to_dim = CrdTransDirection::LvlToDim;
    let bsr = preset("bsr(2,3)").unwrap();
    assert_eq!(
        SparseTensor::crd_translate(&bsr, dim_to_lvl, &[5, 7]),
        Ok(vec![2, 2, 1, 1])
    );
    assert_eq!(
        SparseTensor::crd_translate(&bsr, lvl_to_dim, &[2, 2, 1, 1]),
        Ok(vec![5, 7])
    );
    let csc = preset("csc").unwrap();
    assert_eq!(
        SparseTensor::crd_translate(&csc, dim_to_lvl, &[1, 4]),
        Ok(vec![4, 1])
    );
    let skew =
        enc("map = {a, b} (i = a - b, j = b) -> (a = i + j : compressed, b = j : compressed)");
    assert_eq!(
        SparseTensor::crd_translate(&skew, dim_to_lvl, &[2, 3]),
        Ok(vec![5, 3])
    );
    assert_eq!(
        SparseTensor::crd_translate(&skew, lvl_to_dim, &[1, 3]),
        Err(StorageError::CrdOutOfRange {
            direction: lvl_to_dim,
            index: 0
        }),
        "1 - 3 is negative"
    );
}

#[test]
fn crd_translate_errors() {
    let bsr = preset("bsr(2,3)").unwrap();
    let e = SparseTensor::crd_translate(&bsr, CrdTransDirection::LvlToDim, &[1, 2]).unwrap_err();
    assert_eq!(
        e,
        StorageError::CrdArity {
            direction: CrdTransDirection::LvlToDim,
            expected: 4,
            found: 2
        }
    );
    assert_eq!(
        e.to_string(),
        "crd_translate lvl_to_dim: expected 4 coordinates, got 2"
    );
    assert_eq!(
        SparseTensor::crd_translate(&bsr, CrdTransDirection::DimToLvl, &[u64::MAX, 0]),
        Err(StorageError::TooLarge("coordinate"))
    );
    let skew =
        enc("map = {a, b} (i = a - b, j = b) -> (a = i + j : compressed, b = j : compressed)");
    assert!(matches!(
        SparseTensor::crd_translate(&skew, CrdTransDirection::DimToLvl, &[i64::MAX as u64, 1]),
        Err(StorageError::CrdOutOfRange { index: 0, .. })
    ));
    let ell = enc("map = [s0](i, j) -> (i * s0 : dense, i : dense, j : compressed)");
    assert_eq!(
        SparseTensor::crd_translate(&ell, CrdTransDirection::DimToLvl, &[0, 0]),
        Err(StorageError::Symbols)
    );
}

// ---------------------------------------------------------------- reinterpret_map

const DSDD: &str = "map = (i, j, k, l) -> (i : dense, j : compressed, k : dense, l : dense)";

#[test]
fn reinterpret_bsr_as_its_block_view_and_back() {
    let a = coo(&[6, 12], &[(&[0, 1], 1.0), (&[3, 7], 2.0), (&[5, 11], 3.0)]);
    let bsr = store(&a, "bsr(2,3)");
    let blocks = bsr.reinterpret_map(&enc(DSDD)).unwrap();
    assert_eq!(blocks.dim_shape(), &[3, 4, 2, 3]);
    assert_eq!(blocks.lvl_shape(), bsr.lvl_shape());
    assert_eq!(blocks.disassemble(), bsr.disassemble());
    // Entry (i, j) of the matrix is entry (i / 2, j / 3, i % 2, j % 3) of the block view.
    let mut seen = Vec::new();
    blocks.foreach(|d, _, v| {
        if v.as_f64() != 0.0 {
            seen.push((d[0] * 2 + d[2], d[1] * 3 + d[3], v.as_f64()));
        }
    });
    assert_eq!(seen, vec![(0, 1, 1.0), (3, 7, 2.0), (5, 11, 3.0)]);
    assert_eq!(blocks.number_of_entries(), 3 * 6);
    assert_eq!(
        blocks
            .reinterpret_map(&preset("bsr(2,3)").unwrap())
            .unwrap(),
        bsr
    );
}

#[test]
fn reinterpret_keeps_the_shape_when_the_map_allows_it() {
    let a = coo(&[5, 11], &[(&[4, 10], 1.0)]);
    let bsr = store(&a, "bsr(2,3)");
    assert_eq!(
        bsr.reinterpret_map(&preset("bsr(2,3)").unwrap()),
        Ok(bsr.clone())
    );
    let blocks = bsr.reinterpret_map(&enc(DSDD)).unwrap();
    let back = blocks
        .reinterpret_map(&preset("bsr(2,3)").unwrap())
        .unwrap();
    assert_eq!(
        back.dim_shape(),
        &[6, 12],
        "the padded shape the blocks reach"
    );
    assert_eq!(back.disassemble(), bsr.disassemble());
}

#[test]
fn reinterpret_csc_as_csr_transposes() {
    let a = coo(&[3, 4], &[(&[0, 3], 1.0), (&[2, 1], 2.0)]);
    let csc = store(&a, "csc");
    let t = csc.reinterpret_map(&preset("csr").unwrap()).unwrap();
    assert_eq!(t.dim_shape(), &[4, 3]);
    let d = dense_of(&t);
    assert_eq!((d[3 * 3], d[3 + 2]), (1.0, 2.0));
    assert_eq!(d.iter().filter(|&&v| v != 0.0).count(), 2);
}

#[test]
fn reinterpret_map_errors() {
    let bsr = store(&coo(&[6, 12], &[(&[0, 1], 1.0)]), "bsr(2,3)");
    let csr = store(&coo(&[2, 2], &[(&[0, 1], 1.0)]), "csr");
    assert_eq!(
        csr.reinterpret_map(&enc(DSDD)),
        Err(StorageError::LevelRank {
            expected: 2,
            found: 4
        })
    );
    let e = csr.reinterpret_map(&preset("dcsr").unwrap()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "reinterpret_map: level 0 is `compressed` in the target, `dense` in the tensor"
    );
    assert_eq!(
        bsr.reinterpret_map(&preset("bsr(3,2)").unwrap()),
        Err(StorageError::ReinterpretLevelSize {
            lvl: Lvl(1),
            expected: 4,
            found: 5
        })
    );
    let narrow = preset("csr")
        .unwrap()
        .with_widths(IndexWidth::W32, IndexWidth::W32);
    assert_eq!(
        csr.reinterpret_map(&narrow),
        Err(StorageError::ReinterpretWidths {
            expected: (IndexWidth::Native, IndexWidth::Native),
            found: (IndexWidth::W32, IndexWidth::W32)
        })
    );
    let sliced =
        enc("map = (i : #sparse_tensor<slice(0, 2, 1)>, j) -> (i : dense, j : compressed)");
    assert_eq!(csr.reinterpret_map(&sliced), Err(StorageError::Slices));
}

// ---------------------------------------------------------------- slices

#[test]
fn extract_slice_keeps_the_entries_inside_rebased() {
    // A 4 x 6 matrix with value 10 * i + j + 1 at (i, j) where (i + j) is even.
    let mut entries = Vec::new();
    for i in 0..4 {
        for j in 0..6 {
            if (i + j) % 2 == 0 {
                entries.push((vec![i, j], (10 * i + j + 1) as f64));
            }
        }
    }
    let refs: Vec<(&[usize], f64)> = entries.iter().map(|(c, v)| (c.as_slice(), *v)).collect();
    let a = coo(&[4, 6], &refs);
    let full = dense_ref(&a);
    for name in ["csr", "dcsc", "coo", "bsr(2,2)", "dense"] {
        let t = store(&a, name);
        let s = t.extract_slice(&[1, 1], &[3, 2], &[1, 2]).unwrap();
        assert_eq!(s.dim_shape(), &[3, 2]);
        assert_eq!(s.encoding(), t.encoding());
        let mut want = Vec::new();
        for i in 0..3 {
            for j in 0..2 {
                want.push(full[(1 + i) * 6 + 1 + 2 * j]);
            }
        }
        assert_eq!(dense_of(&s), want, "{name}");
        let empty = t.extract_slice(&[4, 0], &[0, 6], &[1, 1]).unwrap();
        assert_eq!(
            (empty.dim_shape(), empty.number_of_entries()),
            (&[0, 6][..], 0)
        );
    }
}

#[test]
fn extract_slice_errors() {
    let t = store(&coo(&[4, 6], &[(&[0, 0], 1.0)]), "csr");
    assert_eq!(
        t.extract_slice(&[0], &[1, 1], &[1, 1]),
        Err(StorageError::SliceArity {
            what: "offsets",
            expected: 2,
            found: 1
        })
    );
    assert_eq!(
        t.extract_slice(&[0, 0], &[1, 1], &[1, 1, 1]),
        Err(StorageError::SliceArity {
            what: "strides",
            expected: 2,
            found: 3
        })
    );
    let out = |dim, offset, size, stride, extent| StorageError::SliceOutOfBounds {
        dim: Dim(dim),
        offset,
        size,
        stride,
        extent,
    };
    assert!(
        t.extract_slice(&[0, 1], &[4, 3], &[1, 2]).is_ok(),
        "the last column viewed is 1 + 2 * 2 = 5 < 6"
    );
    assert_eq!(
        t.extract_slice(&[0, 1], &[4, 3], &[1, 3]),
        Err(out(1, 1, 3, 3, 6))
    );
    assert_eq!(
        t.extract_slice(&[0, 0], &[1, 1], &[0, 1]),
        Err(out(0, 0, 1, 0, 4))
    );
    assert_eq!(
        t.extract_slice(&[5, 0], &[0, 1], &[1, 1]),
        Err(out(0, 5, 0, 1, 4))
    );
    assert_eq!(
        t.extract_slice(&[usize::MAX, 0], &[2, 1], &[usize::MAX, 1]),
        Err(out(0, usize::MAX, 2, usize::MAX, 4))
    );
}

const SLICED_CSR: &str = "map = (i : #sparse_tensor<slice(1, 2, 1)>, j : #sparse_tensor<slice(0, 3, 2)>) -> (i : dense, j : compressed)";

#[test]
fn static_slices_store_the_underlying_tensor() {
    let sliced = enc(SLICED_CSR);
    let a = coo(&[2, 3], &[(&[0, 2], 1.0), (&[1, 0], 2.0), (&[1, 1], 3.0)]);
    let t = SparseTensor::from_coo(&a, &sliced).unwrap();
    assert_eq!(t.dim_shape(), &[2, 3]);
    assert_eq!(
        t.print(),
        "---- Sparse Tensor ----\nnse = 3\ndim = ( 2, 3 )\nlvl = ( 2, 3 )\npos[1] : ( 0, 0, 1, 3 )\ncrd[1] : ( 4, 0, 2 )\nvalues : ( 1, 2, 3 )\n----\n",
        "row i is stored at 1 + i, column j at 2 * j; MLIR 19 prints a slice's lvl sizes as its dim sizes"
    );
    assert_eq!(t.lvl_shape(), &[3, 5]);
    assert_eq!(t.base_shape(), &[3, 5]);
    assert_eq!(dense_of(&t), dense_ref(&a));
    let mut sorted = a.clone();
    sorted.sort_and_sum_duplicates();
    assert_eq!(t.to_coo(), sorted);
    let (buffers, values) = t.disassemble();
    let back = SparseTensor::assemble(&sliced, &[2, 3], buffers, values, Validation::Checked);
    assert_eq!(back.as_ref(), Ok(&t));
    let json = serde_json::to_string(&t).unwrap();
    assert_eq!(serde_json::from_str::<SparseTensor>(&json).unwrap(), t);
    let csr = t.convert(&preset("csr").unwrap()).unwrap();
    assert_eq!(csr.convert(&sliced).unwrap(), t);
    let part = t.extract_slice(&[1, 0], &[1, 2], &[1, 1]).unwrap();
    assert_eq!(part.encoding(), &preset("csr").unwrap());
    assert_eq!(dense_of(&part), vec![2.0, 3.0]);
}

#[test]
fn assembled_entries_off_the_slice_are_invisible() {
    // Underlying 3 x 5 storage with entries at columns 1 and 4 of row 1; the slice views
    // columns 0, 2, 4 of rows 1 and 2.
    let t = SparseTensor::assemble(
        &enc(SLICED_CSR),
        &[2, 3],
        vec![u64s(&[0, 0, 2, 2]), u64s(&[1, 4])],
        ArrayData::F64(vec![7.0, 8.0]),
        Validation::Checked,
    )
    .unwrap();
    assert_eq!(dense_of(&t), vec![0.0, 0.0, 8.0, 0.0, 0.0, 0.0]);
}

#[test]
fn slice_storage_errors() {
    let sliced = enc(SLICED_CSR);
    let a = coo(&[2, 4], &[]);
    assert_eq!(
        SparseTensor::from_coo(&a, &sliced),
        Err(StorageError::SliceSize {
            dim: Dim(1),
            expected: 3,
            found: 4
        })
    );
    let b = coo(&[2, 3], &[(&[0, 3], 1.0)]);
    assert_eq!(
        SparseTensor::from_coo(&b, &sliced),
        Err(StorageError::DimCoordOutOfRange {
            entry: 0,
            dim: Dim(1),
            coord: 3,
            extent: 3
        })
    );
    let dynamic =
        enc("map = (i : #sparse_tensor<slice(1, ?, 1)>, j) -> (i : dense, j : compressed)");
    assert_eq!(
        SparseTensor::from_coo(&coo(&[2, 3], &[]), &dynamic),
        Err(StorageError::Slices)
    );
    let huge = enc(
        "map = (i : #sparse_tensor<slice(9223372036854775807, 2, 9223372036854775807)>) -> (i : compressed)",
    );
    assert!(matches!(
        SparseTensor::from_coo(&coo(&[2], &[(&[1], 1.0)]), &huge),
        Err(StorageError::TooLarge(_))
    ));
}

// ---------------------------------------------------------------- properties

/// A random matrix with distinct coordinates and nonzero integral values, sorted.
fn matrix() -> impl Strategy<Value = CooTensor> {
    (1usize..7, 1usize..8).prop_flat_map(|(m, n)| {
        prop::collection::btree_map((0..m, 0..n), (1i32..20).prop_map(f64::from), 0..=(m * n))
            .prop_map(move |entries| {
                let mut coords = vec![Vec::new(), Vec::new()];
                let mut values = Vec::new();
                for ((i, j), v) in entries {
                    coords[0].push(i);
                    coords[1].push(j);
                    values.push(if i % 2 == 0 { v } else { -v });
                }
                CooTensor {
                    shape: vec![m, n],
                    coords,
                    values: ArrayData::F64(values),
                }
            })
    })
}

const FORMATS: &[&str] = &[
    "dense", "csr", "csc", "dcsr", "dcsc", "coo", "bsr(2,2)", "bsr(2,3)",
];

fn format(i: usize) -> Encoding {
    match FORMATS.get(i) {
        Some(name) => preset(name).unwrap(),
        None => enc("map = (i, j) -> (j : loose_compressed, i : compressed(nonordered))"),
    }
}

/// The entries of `c` with `lo <= coordinate < hi` in `dim`, re-based, as a tensor of size
/// `hi - lo` in `dim`.
fn band(c: &CooTensor, dim: usize, lo: usize, hi: usize) -> CooTensor {
    let keep: Vec<usize> = (0..c.nnz())
        .filter(|&e| (lo..hi).contains(&c.coords[dim][e]))
        .collect();
    let coords = (c.coords.iter().enumerate())
        .map(|(d, x)| {
            let shift = if d == dim { lo } else { 0 };
            keep.iter().map(|&e| x[e] - shift).collect()
        })
        .collect();
    let v = c.values.to_f64_vec();
    let mut shape = c.shape.clone();
    shape[dim] = hi - lo;
    CooTensor {
        shape,
        coords,
        values: ArrayData::F64(keep.iter().map(|&e| v[e]).collect()),
    }
}

proptest! {
    #[test]
    fn random_splits_concatenate_to_the_original(
        m in matrix(),
        dim in 0usize..2,
        cuts in prop::collection::vec(0usize..8, 0..4),
        formats in prop::collection::vec(0..=FORMATS.len(), 5),
    ) {
        let extent = m.shape[dim];
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (extent + 1)).collect();
        bounds.extend([0, extent]);
        bounds.sort();
        let out = format(formats[0]);
        let parts: Vec<SparseTensor> = (bounds.windows(2).enumerate())
            .map(|(k, w)| {
                SparseTensor::from_coo(&band(&m, dim, w[0], w[1]), &format(formats[1 + k % 4]))
                    .unwrap()
            })
            .collect();
        let refs: Vec<&SparseTensor> = parts.iter().collect();
        let whole = SparseTensor::concatenate(&refs, dim, &out).unwrap();
        prop_assert_eq!(&whole, &SparseTensor::from_coo(&m, &out).unwrap());
        prop_assert_eq!(dense_of(&whole), dense_ref(&m));

        // The same split through extract_slice of the stored matrix.
        let stored = SparseTensor::from_coo(&m, &format(formats[1])).unwrap();
        let slices: Vec<SparseTensor> = bounds
            .windows(2)
            .map(|w| {
                let (mut offsets, mut sizes) = (vec![0, 0], m.shape.clone());
                offsets[dim] = w[0];
                sizes[dim] = w[1] - w[0];
                stored.extract_slice(&offsets, &sizes, &[1, 1]).unwrap()
            })
            .collect();
        let refs: Vec<&SparseTensor> = slices.iter().collect();
        prop_assert_eq!(
            SparseTensor::concatenate(&refs, dim, &out).unwrap(),
            SparseTensor::from_coo(&m, &out).unwrap()
        );
    }

    #[test]
    fn crd_translate_round_trips_on_every_preset(
        which in 0..PRESET_EXAMPLES.len(),
        raw in prop::collection::vec(0u64..1000, 4),
    ) {
        let enc = preset(PRESET_EXAMPLES[which]).unwrap();
        let dims = &raw[..enc.dim_rank()];
        let lvls = SparseTensor::crd_translate(&enc, CrdTransDirection::DimToLvl, dims).unwrap();
        prop_assert_eq!(lvls.len(), enc.lvl_rank());
        let back = SparseTensor::crd_translate(&enc, CrdTransDirection::LvlToDim, &lvls).unwrap();
        prop_assert_eq!(back.as_slice(), dims);
    }

    #[test]
    fn sort_of_shuffled_coo_is_the_sorted_coo(
        m in matrix(),
        seed in any::<u64>(),
    ) {
        let unordered = enc(UNORDERED_COO);
        let sorted = SparseTensor::from_coo(&m, &unordered).unwrap();
        // Shuffle the stored entries (a Fisher-Yates pass driven by `seed`) and assemble them.
        let n = m.nnz();
        let mut order: Vec<usize> = (0..n).collect();
        let mut state = seed | 1;
        for i in (1..n).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            order.swap(i, (state % (i as u64 + 1)) as usize);
        }
        let v = m.values.to_f64_vec();
        let crd: Vec<u64> = order
            .iter()
            .flat_map(|&e| [m.coords[0][e] as u64, m.coords[1][e] as u64])
            .collect();
        let shuffled = SparseTensor::assemble(
            &unordered,
            &m.shape,
            vec![u64s(&[0, n as u64]), u64s(&crd)],
            ArrayData::F64(order.iter().map(|&e| v[e]).collect()),
            Validation::Checked,
        )
        .unwrap();
        prop_assert_eq!(shuffled.sort(), sorted.clone());
        let coo = preset("coo").unwrap();
        prop_assert_eq!(
            shuffled.reorder_coo(&coo).unwrap(),
            SparseTensor::from_coo(&m, &coo).unwrap()
        );
    }

    #[test]
    fn sliced_encodings_store_at_underlying_coordinates(
        m in matrix(),
        which in 0..=FORMATS.len(),
        offsets in prop::collection::vec(0u64..4, 2),
        strides in prop::collection::vec(1u64..4, 2),
    ) {
        let base = format(which);
        let slice = |d: usize| DimSlice {
            offset: SliceBound::Static(offsets[d]),
            size: SliceBound::Static(m.shape[d] as u64),
            stride: SliceBound::Static(strides[d]),
        };
        let sliced = Encoding::from_parts(EncodingParts {
            dim_rank: 2,
            levels: base.levels().to_vec(),
            dim_slices: vec![Some(slice(0)), Some(slice(1))],
            ..EncodingParts::default()
        })
        .unwrap();
        let t = SparseTensor::from_coo(&m, &sliced).unwrap();
        prop_assert_eq!(t.dim_shape(), &m.shape[..]);
        prop_assert_eq!(dense_of(&t), dense_ref(&m));
        let mut visible = 0;
        t.foreach(|dims, lvls, _| {
            visible += 1;
            // crd_translate applies the slice: view coordinates in, underlying levels out.
            let view: Vec<u64> = dims.iter().map(|&c| c as u64).collect();
            let want = SparseTensor::crd_translate(&sliced, CrdTransDirection::DimToLvl, &view);
            assert_eq!(want.as_deref(), Ok(lvls), "{}", t.print());
            let back = SparseTensor::crd_translate(&sliced, CrdTransDirection::LvlToDim, lvls);
            assert_eq!(back, Ok(view), "{}", t.print());
        });
        prop_assert!(visible <= t.number_of_entries());
        let (buffers, values) = t.disassemble();
        let back = SparseTensor::assemble(&sliced, &m.shape, buffers, values, Validation::Checked);
        prop_assert_eq!(back.as_ref(), Ok(&t));
        prop_assert_eq!(t.convert(&base).unwrap(), SparseTensor::from_coo(&m, &base).unwrap());
        prop_assert_eq!(t.sort(), t.clone());
    }
}

// ---------------------------------------------------------------- signed indices

#[test]
fn signed_indices_are_reinterpreted_and_a_negative_one_is_rejected() {
    assert_eq!(
        IndexArray::from_signed(ArrayData::I64(vec![0, 3, -1])),
        IndexArray::U64(vec![0, 3, u64::MAX])
    );
    assert_eq!(
        IndexArray::from_signed(ArrayData::I32(vec![2, -2])),
        IndexArray::U32(vec![2, u32::MAX - 1])
    );
    assert_eq!(
        IndexArray::from_signed(ArrayData::I8(vec![1, 4])),
        IndexArray::U64(vec![1, 4])
    );
    let csr = preset("csr").unwrap();
    let assemble = |crd: Vec<i64>| {
        SparseTensor::assemble(
            &csr,
            &[2, 4],
            vec![
                IndexArray::from_signed(ArrayData::I64(vec![0, 1, 2])),
                IndexArray::from_signed(ArrayData::I64(crd)),
            ],
            ArrayData::F64(vec![1.0, 2.0]),
            Validation::Checked,
        )
    };
    let t = assemble(vec![3, 0]).unwrap();
    assert_eq!(t.coordinates(Lvl(1)), Some(&u64s(&[3, 0])));
    assert!(
        matches!(
            assemble(vec![3, -1]),
            Err(StorageError::CoordinateOutOfBounds { position: 1, .. })
        ),
        "a negative coordinate is out of bounds, not wrapped into range"
    );
}

/// `Validation::Positions` checks positions (they address the rest) but takes the
/// coordinates on trust; `validate` then finds what `Checked` would have rejected.
#[test]
fn positions_validation_checks_positions_only() {
    let csr = preset("csr").unwrap();
    let assemble = |pos: &[u64], crd: &[u64], v: Validation| {
        let n = crd.len();
        SparseTensor::assemble(
            &csr,
            &[2, 4],
            vec![u64s(pos), u64s(crd)],
            ArrayData::F64(vec![1.0; n]),
            v,
        )
    };
    // Row 0's coordinates out of order: only Checked and validate notice.
    let unsorted = assemble(&[0, 2, 3], &[3, 1, 0], Validation::Positions).unwrap();
    assert!(matches!(
        unsorted.validate(),
        Err(StorageError::Unsorted { .. })
    ));
    assert!(assemble(&[0, 2, 3], &[3, 1, 0], Validation::Checked).is_err());
    assert!(assemble(&[0, 2, 3], &[1, 3, 0], Validation::Positions)
        .unwrap()
        .validate()
        .is_ok());
    // Decreasing positions are rejected as by Checked; Trusted lets them through.
    for v in [Validation::Positions, Validation::Checked] {
        assert!(assemble(&[0, 3, 2], &[0, 1], v).is_err(), "{v:?}");
    }
    assert!(assemble(&[0, 3, 2], &[0, 1], Validation::Trusted).is_ok());
}
