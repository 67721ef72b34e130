//! Storage of the MLIR documentation examples and of MLIR's `sparse_print.mlir` cases, compared
//! with the text `sparse_tensor.print` writes.

use lacuna_ir::encoding::{parse_encoding, preset, Encoding};
use lacuna_ir::io::{parse_mtx, MtxData};
use lacuna_ir::storage::SparseTensor;
use lacuna_ir::{ArrayData, CooTensor, DenseArray};
use std::path::Path;

fn data(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/mlir_doc_examples")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn doc_example(name: &str) -> (SparseTensor, String) {
    // nv_2_4.mtx opens with `%MatrixMarket` (one `%`); the reader accepts that banner.
    let mtx = data(&format!("{name}.mtx"));
    let coo = match parse_mtx(&mtx, Path::new(name)) {
        Ok(MtxData::Coo(t)) => t,
        other => panic!("expected a COO matrix, got {other:?}"),
    };
    let enc = parse_encoding(data(&format!("{name}.encoding")).trim()).expect("encoding parses");
    let t = SparseTensor::from_coo(&coo, &enc).expect("storage builds");
    (t, data(&format!("{name}.print")))
}

#[test]
fn bsr_2x2_prints_as_documented() {
    let (t, expected) = doc_example("bsr_2x2");
    assert_eq!(t.print(), expected);
    assert_eq!(t.number_of_entries(), 12);
}

#[test]
fn nv_2_4_prints_as_documented() {
    let (t, expected) = doc_example("nv_2_4");
    assert_eq!(t.print(), expected);
}

#[test]
fn nv_2_4_older_spelling_builds_the_same_storage() {
    let (t, _) = doc_example("nv_2_4");
    let old =
        parse_encoding("map = (i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : block2_4)")
            .unwrap();
    assert_eq!(&old, t.encoding());
    assert_eq!(preset("2:4").unwrap(), old);
}

/// The 4x8 integer matrix of MLIR's `sparse_print.mlir`.
fn mlir_print_matrix() -> DenseArray {
    let mut data = vec![0i32; 32];
    for (i, j, v) in [(0, 0, 1), (0, 2, 2), (3, 2, 3), (3, 3, 4), (3, 5, 5)] {
        data[i * 8 + j] = v;
    }
    DenseArray {
        shape: vec![4, 8],
        data: ArrayData::I32(data),
    }
}

fn body(enc: &str) -> String {
    let enc: Encoding = parse_encoding(enc).expect("encoding parses");
    let t = SparseTensor::from_dense(&mlir_print_matrix(), &enc).expect("storage builds");
    let text = t.print();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "---- Sparse Tensor ----");
    assert_eq!(lines[lines.len() - 1], "----");
    lines[1..lines.len() - 1].join("\n")
}

#[test]
fn mlir_sparse_print_cases() {
    let cases: &[(&str, &str)] = &[
        (
            "map = (i, j) -> (j : dense, i : dense)",
            "nse = 32\ndim = ( 4, 8 )\nlvl = ( 8, 4 )\nvalues : ( 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0 )",
        ),
        (
            "map = (i, j) -> (i : dense, j : compressed)",
            "nse = 5\ndim = ( 4, 8 )\nlvl = ( 4, 8 )\npos[1] : ( 0, 2, 2, 2, 5 )\ncrd[1] : ( 0, 2, 2, 3, 5 )\nvalues : ( 1, 2, 3, 4, 5 )",
        ),
        (
            "map = (i, j) -> (i : compressed, j : compressed)",
            "nse = 5\ndim = ( 4, 8 )\nlvl = ( 4, 8 )\npos[0] : ( 0, 2 )\ncrd[0] : ( 0, 3 )\npos[1] : ( 0, 2, 5 )\ncrd[1] : ( 0, 2, 2, 3, 5 )\nvalues : ( 1, 2, 3, 4, 5 )",
        ),
        (
            "map = (i, j) -> (j : dense, i : compressed)",
            "nse = 5\ndim = ( 4, 8 )\nlvl = ( 8, 4 )\npos[1] : ( 0, 1, 1, 3, 4, 4, 5, 5, 5 )\ncrd[1] : ( 0, 0, 3, 3, 3 )\nvalues : ( 1, 2, 3, 4, 5 )",
        ),
        (
            "map = (i, j) -> (i floordiv 2 : compressed, j floordiv 4 : compressed, i mod 2 : dense, j mod 4 : dense)",
            "nse = 24\ndim = ( 4, 8 )\nlvl = ( 2, 2, 2, 4 )\npos[0] : ( 0, 2 )\ncrd[0] : ( 0, 1 )\npos[1] : ( 0, 1, 3 )\ncrd[1] : ( 0, 0, 1 )\nvalues : ( 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 4, 0, 0, 0, 0, 0, 5, 0, 0 )",
        ),
        (
            "map = (i, j) -> (i floordiv 2 : compressed, j floordiv 4 : compressed, j mod 4 : dense, i mod 2 : dense)",
            "nse = 24\ndim = ( 4, 8 )\nlvl = ( 2, 2, 4, 2 )\npos[0] : ( 0, 2 )\ncrd[0] : ( 0, 1 )\npos[1] : ( 0, 1, 3 )\ncrd[1] : ( 0, 0, 1 )\nvalues : ( 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 5, 0, 0, 0, 0 )",
        ),
        (
            "map = (i, j) -> (j floordiv 4 : compressed, i floordiv 2 : compressed, i mod 2 : dense, j mod 4 : dense)",
            "nse = 24\ndim = ( 4, 8 )\nlvl = ( 2, 2, 2, 4 )\npos[0] : ( 0, 2 )\ncrd[0] : ( 0, 1 )\npos[1] : ( 0, 2, 3 )\ncrd[1] : ( 0, 1, 1 )\nvalues : ( 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 4, 0, 0, 0, 0, 0, 5, 0, 0 )",
        ),
        (
            "map = (i, j) -> (i floordiv 2 : dense, j floordiv 4 : compressed, i mod 2 : dense, j mod 4 : dense)",
            "nse = 24\ndim = ( 4, 8 )\nlvl = ( 2, 2, 2, 4 )\npos[1] : ( 0, 1, 3 )\ncrd[1] : ( 0, 0, 1 )\nvalues : ( 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 4, 0, 0, 0, 0, 0, 5, 0, 0 )",
        ),
        (
            "map = (d0, d1) -> (d0 : compressed(nonunique), d1 : singleton)",
            "nse = 5\ndim = ( 4, 8 )\nlvl = ( 4, 8 )\npos[0] : ( 0, 5 )\ncrd[0] : ( 0, 0, 0, 2, 3, 2, 3, 3, 3, 5 )\nvalues : ( 1, 2, 3, 4, 5 )",
        ),
        (
            "map = (d0, d1) -> (d0 : compressed(nonunique), d1 : singleton(soa))",
            "nse = 5\ndim = ( 4, 8 )\nlvl = ( 4, 8 )\npos[0] : ( 0, 5 )\ncrd[0] : ( 0, 0, 3, 3, 3 )\ncrd[1] : ( 0, 2, 2, 3, 5 )\nvalues : ( 1, 2, 3, 4, 5 )",
        ),
    ];
    for (enc, expected) in cases {
        assert_eq!(body(enc), *expected, "encoding {enc}");
    }
}

#[test]
fn blocks_pad_a_shape_that_is_not_a_multiple() {
    let coo = CooTensor {
        shape: vec![3, 5],
        coords: vec![vec![2, 0], vec![4, 1]],
        values: ArrayData::F64(vec![7.0, 1.5]),
    };
    let t = SparseTensor::from_coo(&coo, &preset("bsr(2,2)").unwrap()).unwrap();
    assert_eq!(t.lvl_shape(), &[2, 3, 2, 2]);
    assert_eq!(
        t.print(),
        "---- Sparse Tensor ----\nnse = 8\ndim = ( 3, 5 )\nlvl = ( 2, 3, 2, 2 )\npos[1] : ( 0, 1, 2 )\ncrd[1] : ( 0, 2 )\nvalues : ( 0, 1.5, 0, 0, 7, 0, 0, 0 )\n----\n"
    );
    let mut back = t.to_coo();
    back.sort_and_sum_duplicates();
    let nonzero: Vec<(usize, usize)> = (0..back.nnz())
        .filter(|&e| back.values.get(e).is_some_and(|v| v.as_f64() != 0.0))
        .map(|e| (back.coords[0][e], back.coords[1][e]))
        .collect();
    assert_eq!(nonzero, vec![(0, 1), (2, 4)]);
}

#[test]
fn ell_pads_rows_with_unused_columns() {
    let coo = CooTensor {
        shape: vec![3, 4],
        coords: vec![vec![0, 0, 2], vec![1, 3, 2]],
        values: ArrayData::F64(vec![1.0, 2.0, 3.0]),
    };
    let t = SparseTensor::from_coo(&coo, &preset("ell(2)").unwrap()).unwrap();
    assert_eq!(
        t.print(),
        "---- Sparse Tensor ----\nnse = 6\ndim = ( 3, 4 )\nlvl = ( 3, 4 )\ncrd[1] : ( 1, 3, 0, 1, 0, 2 )\nvalues : ( 1, 2, 0, 0, 0, 3 )\n----\n"
    );
}

#[test]
fn loose_compressed_prints_lo_hi_pairs() {
    // Then the trailing 0 MLIR 19 prints (ir/tests/data/mlir19/nations_bcoo.print).
    let enc = preset("bcoo").unwrap();
    let coo = CooTensor {
        shape: vec![2, 3, 3],
        coords: vec![vec![0, 0, 1], vec![0, 2, 1], vec![1, 0, 2]],
        values: ArrayData::F64(vec![1.0, 2.0, 3.0]),
    };
    let t = SparseTensor::from_coo(&coo, &enc).unwrap();
    assert_eq!(
        t.print(),
        "---- Sparse Tensor ----\nnse = 3\ndim = ( 2, 3, 3 )\nlvl = ( 2, 3, 3 )\npos[1] : ( 0, 2, 2, 3, 0 )\ncrd[1] : ( 0, 1, 2, 0, 1, 2 )\nvalues : ( 1, 2, 3 )\n----\n"
    );
}
