//! Zero-copy slice views (`SparseTensor::view`, `view_as`): shared buffers, the entries they
//! see against a dense model of the slice, MLIR 19's print of a slice, `?` parts, bad slices.

use lacuna_ir::encoding::{parse_encoding, preset, Dim, Encoding};
use lacuna_ir::storage::{CrdTransDirection, IndexArray, SparseTensor, StorageError};
use lacuna_ir::{ArrayData, CooTensor};
use proptest::prelude::*;

fn enc(src: &str) -> Encoding {
    parse_encoding(src).unwrap_or_else(|e| panic!("{src}: {e}"))
}

/// The 4 x 7 matrix of the MLIR program whose output is pasted below.
fn matrix_4x7() -> CooTensor {
    let rows: [[f64; 7]; 4] = [
        [1.0, 2.0, 0.0, 3.0, 0.0, 4.0, 5.0],
        [0.0, 6.0, 0.0, 7.0, 8.0, 0.0, 9.0],
        [10.0, 0.0, 11.0, 12.0, 0.0, 13.0, 0.0],
        [0.0, 14.0, 0.0, 0.0, 15.0, 16.0, 0.0],
    ];
    let mut coords = vec![Vec::new(), Vec::new()];
    let mut values = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        for (j, &v) in row.iter().enumerate() {
            if v != 0.0 {
                coords[0].push(i);
                coords[1].push(j);
                values.push(v);
            }
        }
    }
    CooTensor {
        shape: vec![4, 7],
        coords,
        values: ArrayData::F64(values),
    }
}

fn data_ptr(a: &IndexArray) -> usize {
    match a {
        IndexArray::U8(v) => v.as_ptr() as usize,
        IndexArray::U16(v) => v.as_ptr() as usize,
        IndexArray::U32(v) => v.as_ptr() as usize,
        IndexArray::U64(v) => v.as_ptr() as usize,
    }
}

fn value_ptr(a: &ArrayData) -> usize {
    match a {
        ArrayData::F64(v) => v.as_ptr() as usize,
        ArrayData::F32(v) => v.as_ptr() as usize,
        ArrayData::I32(v) => v.as_ptr() as usize,
        ArrayData::I64(v) => v.as_ptr() as usize,
        #[allow(unreachable_patterns)]
        _ => unreachable!("no other value types in these tests"),
    }
}

/// Every position, coordinate and value array of `a` is the very same memory as `b`'s.
fn assert_same_memory(a: &SparseTensor, b: &SparseTensor) {
    assert!(a.shares_storage_with(b));
    assert_eq!(value_ptr(a.values()), value_ptr(b.values()));
    assert_eq!(a.levels().len(), b.levels().len());
    for (la, lb) in a.levels().iter().zip(b.levels()) {
        for (x, y) in [
            (la.positions(), lb.positions()),
            (la.coordinates(), lb.coordinates()),
        ] {
            assert_eq!(x.map(data_ptr), y.map(data_ptr));
        }
    }
}

#[test]
fn a_view_shares_the_buffers_of_the_tensor_it_views() {
    for name in ["csr", "csc", "dcsr", "coo", "bsr(2,2)", "dense", "ell(5)"] {
        let t = SparseTensor::from_coo(&matrix_4x7(), &preset(name).unwrap()).unwrap();
        let v = t.view(&[1, 1], &[2, 3], &[1, 2]).unwrap();
        assert_same_memory(&t, &v);
        assert!(v.is_view() && !t.is_view(), "{name}");
        assert_eq!(v.dim_shape(), &[2, 3]);
        assert_eq!(v.base_shape(), &[4, 7]);
        assert_eq!(
            v.lvl_shape(),
            t.lvl_shape(),
            "{name}: the storage's level sizes"
        );
        // A copy is equal but does not share.
        let copy = SparseTensor::assemble(
            t.encoding(),
            t.dim_shape(),
            t.disassemble().0,
            t.values().clone(),
            lacuna_ir::storage::Validation::Checked,
        )
        .unwrap();
        assert_eq!(copy, t);
        assert!(!copy.shares_storage_with(&t));
        // The view sees rows 1..3, columns 1, 3, 5.
        assert_eq!(
            v.to_dense().unwrap().data.to_f64_vec(),
            vec![6.0, 7.0, 0.0, 0.0, 12.0, 13.0],
            "{name}"
        );
    }
}

/// `sparse_tensor.print` of the 4 x 7 CSR matrix, of its slice `[1, 1][2, 3][1, 2]` (static
/// and dynamic types), and of that slice converted to CSR, as MLIR 19.1.7 prints them
/// (`mlir-opt --sparsifier="enable-runtime-library=false"`, `mlir-cpu-runner`; the program
/// is `ir/tests/data/mlir19/slice_csr.mlir`).
const MLIR19_SLICE: &str = "---- Sparse Tensor ----
nse = 16
dim = ( 2, 3 )
lvl = ( 2, 3 )
pos[1] : ( 0, 5, 9, 13, 16 )
crd[1] : ( 0, 1, 3, 5, 6, 1, 3, 4, 6, 0, 2, 3, 5, 1, 4, 5 )
values : ( 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 )
----
";
const MLIR19_SLICE_TO_CSR: &str = "---- Sparse Tensor ----
nse = 4
dim = ( 2, 3 )
lvl = ( 2, 3 )
pos[1] : ( 0, 2, 4 )
crd[1] : ( 0, 1, 1, 2 )
values : ( 6, 7, 12, 13 )
----
";

#[test]
fn a_view_prints_and_converts_as_mlir_19() {
    let csr = preset("csr").unwrap();
    let t = SparseTensor::from_coo(&matrix_4x7(), &csr).unwrap();
    let v = t.view(&[1, 1], &[2, 3], &[1, 2]).unwrap();
    assert_eq!(v.print(), MLIR19_SLICE);
    // MLIR's number_of_entries of the slice is the underlying count (it printed 16).
    assert_eq!(v.number_of_entries(), 16);
    assert_eq!(v.number_of_visible_entries(), 4);
    let dynamic = enc(
        "map = (d0 : #sparse_tensor<slice(?, ?, ?)>, d1 : #sparse_tensor<slice(?, ?, ?)>) -> (d0 : dense, d1 : compressed)",
    );
    let w = t.view_as(&dynamic, &[1, 1], &[2, 3], &[1, 2]).unwrap();
    assert_eq!(w.print(), MLIR19_SLICE);
    assert_eq!(w.encoding(), &dynamic);
    assert_same_memory(&t, &w);
    assert_eq!(v.convert(&csr).unwrap().print(), MLIR19_SLICE_TO_CSR);
    assert_eq!(w.convert(&csr).unwrap().print(), MLIR19_SLICE_TO_CSR);
    // The materializing copy gives the same tensor.
    assert_eq!(
        t.extract_slice(&[1, 1], &[2, 3], &[1, 2]).unwrap(),
        v.convert(&csr).unwrap()
    );
}

#[test]
fn view_as_binds_dynamic_parts_and_checks_static_ones() {
    let t = SparseTensor::from_coo(&matrix_4x7(), &preset("csr").unwrap()).unwrap();
    let mixed = enc(
        "map = (d0 : #sparse_tensor<slice(1, ?, 1)>, d1 : #sparse_tensor<slice(0, 4, ?)>) -> (d0 : dense, d1 : compressed)",
    );
    let v = t.view_as(&mixed, &[1, 0], &[3, 4], &[1, 2]).unwrap();
    assert_eq!(v.bound_slices(), vec![(1, 3, 1), (0, 4, 2)]);
    assert_eq!(v.dim_shape(), &[3, 4]);
    // Rows 1..4, columns 0, 2, 4, 6.
    let want = vec![
        0.0, 0.0, 8.0, 9.0, //
        10.0, 11.0, 0.0, 0.0, //
        0.0, 0.0, 15.0, 0.0,
    ];
    assert_eq!(v.to_dense().unwrap().data.to_f64_vec(), want);
    assert_eq!(
        t.view_as(&mixed, &[2, 0], &[2, 4], &[1, 2]),
        Err(StorageError::SliceMismatch {
            dim: Dim(0),
            what: "offset",
            expected: 1,
            found: 2
        })
    );
    assert_eq!(
        t.view_as(&mixed, &[1, 0], &[3, 3], &[1, 2]),
        Err(StorageError::SliceMismatch {
            dim: Dim(1),
            what: "size",
            expected: 4,
            found: 3
        })
    );
    // A dimension the encoding does not slice is taken whole.
    let rows_only =
        enc("map = (d0 : #sparse_tensor<slice(?, ?, ?)>, d1) -> (d0 : dense, d1 : compressed)");
    assert!(t.view_as(&rows_only, &[1, 0], &[2, 7], &[1, 1]).is_ok());
    assert!(matches!(
        t.view_as(&rows_only, &[1, 1], &[2, 6], &[1, 1]),
        Err(StorageError::SliceMismatch {
            dim: Dim(1),
            what: "offset",
            ..
        })
    ));
    // Another storage is no view of this one.
    let csc_slice = enc(
        "map = (d0 : #sparse_tensor<slice(?, ?, ?)>, d1 : #sparse_tensor<slice(?, ?, ?)>) -> (d1 : dense, d0 : compressed)",
    );
    assert!(matches!(
        t.view_as(&csc_slice, &[0, 0], &[1, 1], &[1, 1]),
        Err(StorageError::ViewEncoding { .. })
    ));
}

#[test]
fn bad_slices_are_typed_errors_naming_the_dimension() {
    let t = SparseTensor::from_coo(&matrix_4x7(), &preset("csr").unwrap()).unwrap();
    let e = t.view(&[0, 2], &[4, 3], &[1, 3]).unwrap_err();
    assert_eq!(
        e,
        StorageError::SliceOutOfBounds {
            dim: Dim(1),
            offset: 2,
            size: 3,
            stride: 3,
            extent: 7
        }
    );
    assert!(e.to_string().contains("dimension 1"), "{e}");
    assert!(matches!(
        t.view(&[4, 0], &[1, 7], &[1, 1]),
        Err(StorageError::SliceOutOfBounds { dim: Dim(0), .. })
    ));
    assert!(matches!(
        t.view(&[0, 0], &[2, 2], &[1, 0]),
        Err(StorageError::SliceOutOfBounds {
            dim: Dim(1),
            stride: 0,
            ..
        })
    ));
    assert!(matches!(
        t.view(&[0], &[2], &[1]),
        Err(StorageError::SliceArity {
            what: "offsets",
            expected: 2,
            found: 1
        })
    ));
    // A huge offset or stride overflows into an error, not a wrap.
    assert!(t.view(&[usize::MAX, 0], &[1, 1], &[1, 1]).is_err());
    assert!(t.view(&[0, 0], &[2, 1], &[usize::MAX, 1]).is_err());
}

#[test]
fn a_view_of_a_view_composes_the_slices() {
    let t = SparseTensor::from_coo(&matrix_4x7(), &preset("dcsr").unwrap()).unwrap();
    let v = t.view(&[0, 1], &[4, 3], &[1, 2]).unwrap(); // columns 1, 3, 5
    let w = v.view(&[1, 1], &[2, 2], &[2, 1]).unwrap(); // rows 1, 3; columns 3, 5
    assert_same_memory(&t, &w);
    assert_eq!(w.bound_slices(), vec![(1, 2, 2), (3, 2, 2)]);
    assert_eq!(
        w.to_dense().unwrap().data.to_f64_vec(),
        vec![7.0, 0.0, 0.0, 16.0]
    );
    assert_eq!(
        w.convert(&preset("csr").unwrap()).unwrap(),
        t.extract_slice(&[1, 3], &[2, 2], &[2, 2])
            .unwrap()
            .convert(&preset("csr").unwrap())
            .unwrap()
    );
}

#[test]
fn crd_translate_through_a_view_applies_its_slice() {
    let t = SparseTensor::from_coo(&matrix_4x7(), &preset("bsr(2,2)").unwrap()).unwrap();
    let v = t.view(&[1, 1], &[2, 3], &[1, 2]).unwrap();
    // View (1, 2) is underlying (2, 5): block (1, 2), offset (0, 1).
    let lvl = v.translate(CrdTransDirection::DimToLvl, &[1, 2]).unwrap();
    assert_eq!(lvl, vec![1, 2, 0, 1]);
    assert_eq!(
        v.translate(CrdTransDirection::LvlToDim, &lvl).unwrap(),
        vec![1, 2]
    );
    // Underlying (2, 4) is not seen by the view (column 4 is off the stride).
    assert!(matches!(
        v.translate(CrdTransDirection::LvlToDim, &[1, 2, 0, 0]),
        Err(StorageError::CrdOffSlice {
            dim: Dim(1),
            coord: 4,
            ..
        })
    ));
    assert!(matches!(
        v.translate(CrdTransDirection::DimToLvl, &[2, 0]),
        Err(StorageError::CrdOffSlice {
            dim: Dim(0),
            coord: 2,
            ..
        })
    ));
    // The static form needs the slice in the encoding.
    let dynamic =
        enc("map = (d0 : #sparse_tensor<slice(?, 2, 1)>, d1) -> (d0 : dense, d1 : compressed)");
    assert_eq!(
        SparseTensor::crd_translate(&dynamic, CrdTransDirection::DimToLvl, &[0, 0]),
        Err(StorageError::Slices)
    );
}

#[test]
fn a_view_serializes_with_its_bound_slices() {
    let t = SparseTensor::from_coo(&matrix_4x7(), &preset("coo").unwrap()).unwrap();
    let dynamic = enc(
        "map = (d0 : #sparse_tensor<slice(?, ?, ?)>, d1 : #sparse_tensor<slice(?, ?, ?)>) -> (d0 : compressed(nonunique), d1 : singleton)",
    );
    let v = t.view_as(&dynamic, &[1, 0], &[3, 3], &[1, 3]).unwrap();
    let json = serde_json::to_string(&v).unwrap();
    let back: SparseTensor = serde_json::from_str(&json).unwrap();
    assert_eq!(back, v);
    assert_eq!(back.print(), v.print());
}

// ---------------------------------------------------------------- properties

fn matrix() -> impl Strategy<Value = CooTensor> {
    (1usize..7, 1usize..8).prop_flat_map(|(m, n)| {
        prop::collection::btree_map((0..m, 0..n), (1i32..20).prop_map(f64::from), 0..=(m * n))
            .prop_map(move |entries| {
                let mut coords = vec![Vec::new(), Vec::new()];
                let mut values = Vec::new();
                for ((i, j), v) in entries {
                    coords[0].push(i);
                    coords[1].push(j);
                    values.push(v);
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
    "dense", "csr", "csc", "dcsr", "dcsc", "coo", "bsr(2,2)", "bsr(2,3)", "ell", "2:4",
];

/// A slice `(offset, size, stride)` of an extent-`n` dimension from three raw numbers,
/// empty slices and strides above 1 included.
fn slice_of(n: usize, raw: (usize, usize, usize)) -> (usize, usize, usize) {
    let offset = raw.0 % (n + 1);
    let stride = 1 + raw.2 % 3;
    let max_size = (n - offset).div_ceil(stride);
    (offset, raw.1 % (max_size + 1), stride)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_view_sees_exactly_the_dense_slice(
        m in matrix(),
        which in 0..FORMATS.len(),
        raw in prop::array::uniform2((0usize..8, 0usize..8, 0usize..8)),
    ) {
        // ELL as wide as a row can be.
        let name = match FORMATS[which] {
            "ell" => format!("ell({})", m.shape[1]),
            other => other.to_string(),
        };
        let enc = preset(&name).unwrap();
        // 2:4 needs at most two entries per group of four columns: keep those that fit.
        let Ok(t) = SparseTensor::from_coo(&m, &enc) else {
            prop_assert_eq!(FORMATS[which], "2:4");
            return Ok(());
        };
        let (m0, n0) = (m.shape[0], m.shape[1]);
        let s = [slice_of(m0, raw[0]), slice_of(n0, raw[1])];
        let v = t.view(&[s[0].0, s[1].0], &[s[0].1, s[1].1], &[s[0].2, s[1].2]).unwrap();
        prop_assert!(v.shares_storage_with(&t));
        // The dense model: element (i, j) of the slice is (o0 + i s0, o1 + j s1).
        let full = t.to_dense().unwrap().data.to_f64_vec();
        let mut want = Vec::new();
        for i in 0..s[0].1 {
            for j in 0..s[1].1 {
                want.push(full[(s[0].0 + i * s[0].2) * n0 + s[1].0 + j * s[1].2]);
            }
        }
        prop_assert_eq!(v.dim_shape(), &[s[0].1, s[1].1][..]);
        prop_assert_eq!(v.to_dense().unwrap().data.to_f64_vec(), want.clone());
        // foreach visits only coordinates inside the slice, each at its underlying levels.
        let mut visible = 0;
        let mut ok = true;
        v.foreach(|d, lvl, _| {
            visible += 1;
            ok &= d[0] < s[0].1 && d[1] < s[1].1;
            let under = [(s[0].0 + d[0] * s[0].2) as u64, (s[1].0 + d[1] * s[1].2) as u64];
            ok &= t.translate(CrdTransDirection::DimToLvl, &under).as_deref() == Ok(lvl);
            ok &= v.translate(CrdTransDirection::LvlToDim, lvl)
                == Ok(vec![d[0] as u64, d[1] as u64]);
        });
        prop_assert!(ok);
        prop_assert_eq!(visible, v.number_of_visible_entries());
        prop_assert_eq!(v.number_of_entries(), t.number_of_entries());
        // Converting the view to any encoding equals the materializing copy (taken of CSR: a
        // narrow slice may not be storable as 2:4 or ELL).
        let copy = t.convert(&preset("csr").unwrap()).unwrap().extract_slice(&[s[0].0, s[1].0], &[s[0].1, s[1].1], &[s[0].2, s[1].2]).unwrap();
        for target in ["csr", "coo", "dcsc", "bsr(2,2)"] {
            let target = preset(target).unwrap();
            prop_assert_eq!(v.convert(&target).unwrap(), copy.convert(&target).unwrap());
        }
        // Its print is MLIR's print of a slice: the storage's buffers, the slice's sizes.
        let print = v.print();
        let sizes = format!("dim = ( {}, {} )\n", s[0].1, s[1].1);
        prop_assert!(print.contains(&sizes), "{}", print);
        let body = |p: &str| p.lines().skip(4).map(str::to_string).collect::<Vec<_>>();
        prop_assert_eq!(body(&print), body(&t.print()));
    }
}

/// The count of visible entries (taken without a walk for tensors whose levels are their
/// dimensions) is the number of values `foreach` visits, in every layout: permuted, blocked
/// with padding past the shape, viewed.
#[test]
fn visible_entries_are_those_foreach_visits() {
    let a = matrix_4x7();
    for fmt in [
        "csr", "csc", "dcsr", "coo", "bsr(2,2)", "bsr(3,3)", "ell(7)",
    ] {
        let t = SparseTensor::from_coo(&a, &preset(fmt).unwrap()).unwrap();
        for s in [t.clone(), t.view(&[1, 1], &[2, 3], &[1, 2]).unwrap()] {
            let mut walked = 0;
            s.foreach(|_, _, _| walked += 1);
            assert_eq!(s.number_of_visible_entries(), walked, "{fmt}");
        }
    }
}
