//! `assemble` / `disassemble`: MLIR's buffer order, and one test per validation error.

use lacuna_ir::encoding::{parse_encoding, preset, Encoding, IndexWidth, Lvl};
use lacuna_ir::storage::{
    storage_fields, Field, IndexArray, SparseTensor, StorageError, Validation,
};
use lacuna_ir::ArrayData;

fn u64s(v: &[u64]) -> IndexArray {
    IndexArray::U64(v.to_vec())
}

fn vals(n: usize) -> ArrayData {
    ArrayData::F64((1..=n).map(|x| x as f64).collect())
}

fn csr() -> Encoding {
    preset("csr").unwrap()
}

/// A 3x4 CSR matrix with `pos`, `crd` and one value per coordinate, checked.
fn csr_with(pos: &[u64], crd: &[u64]) -> Result<SparseTensor, StorageError> {
    SparseTensor::assemble(
        &csr(),
        &[3, 4],
        vec![u64s(pos), u64s(crd)],
        vals(crd.len()),
        Validation::Checked,
    )
}

#[test]
fn assemble_disassemble_roundtrip() {
    let t = csr_with(&[0, 2, 2, 3], &[0, 3, 1]).unwrap();
    assert_eq!(t.print(), "---- Sparse Tensor ----\nnse = 3\ndim = ( 3, 4 )\nlvl = ( 3, 4 )\npos[1] : ( 0, 2, 2, 3 )\ncrd[1] : ( 0, 3, 1 )\nvalues : ( 1, 2, 3 )\n----\n");
    let (buffers, values) = t.disassemble();
    assert_eq!(buffers, vec![u64s(&[0, 2, 2, 3]), u64s(&[0, 3, 1])]);
    assert_eq!(values, vals(3));
}

#[test]
fn storage_fields_follow_mlir_order() {
    let f = |s: &str| storage_fields(&parse_encoding(s).unwrap());
    assert_eq!(
        f("map = (i, j) -> (i : dense, j : compressed)"),
        vec![Field::Positions(Lvl(1)), Field::Coordinates(Lvl(1))]
    );
    assert_eq!(
        f("map = (i, j) -> (i : compressed(nonunique), j : singleton)"),
        vec![Field::Positions(Lvl(0)), Field::CooCoordinates(Lvl(0))]
    );
    assert_eq!(
        f("map = (i, j) -> (i : compressed(nonunique), j : singleton(soa))"),
        vec![
            Field::Positions(Lvl(0)),
            Field::Coordinates(Lvl(0)),
            Field::Coordinates(Lvl(1))
        ]
    );
    assert_eq!(
        f("map = (i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[2, 4])"),
        vec![Field::Coordinates(Lvl(2))]
    );
    assert_eq!(
        f("map = (i, j) -> (i : loose_compressed, j : dense)"),
        vec![Field::Positions(Lvl(0)), Field::Coordinates(Lvl(0))]
    );
}

#[test]
fn coo_buffers_are_interleaved() {
    let enc = preset("coo").unwrap();
    let t = SparseTensor::assemble(
        &enc,
        &[3, 3],
        vec![u64s(&[0, 2]), u64s(&[0, 1, 2, 0])],
        vals(2),
        Validation::Checked,
    )
    .unwrap();
    assert_eq!(t.coordinate(Lvl(1), 1), Some(0));
    let coo = t.to_coo();
    assert_eq!(coo.coords, vec![vec![0, 2], vec![1, 0]]);
}

#[test]
fn wrong_buffer_count() {
    let e = SparseTensor::assemble(
        &csr(),
        &[3, 4],
        vec![u64s(&[0, 0, 0, 0])],
        vals(0),
        Validation::Checked,
    )
    .unwrap_err();
    assert_eq!(
        e,
        StorageError::BufferCount {
            expected: 2,
            found: 1
        }
    );
}

#[test]
fn wrong_positions_length() {
    let e = csr_with(&[0, 1, 2], &[0, 1]).unwrap_err();
    assert_eq!(
        e,
        StorageError::WrongLength {
            field: Field::Positions(Lvl(1)),
            expected: 4,
            found: 3
        }
    );
}

#[test]
fn wrong_coordinates_length() {
    let e = SparseTensor::assemble(
        &csr(),
        &[3, 4],
        vec![u64s(&[0, 1, 1, 2]), u64s(&[0, 1, 2])],
        vals(3),
        Validation::Trusted,
    )
    .unwrap_err();
    assert_eq!(
        e,
        StorageError::WrongLength {
            field: Field::Coordinates(Lvl(1)),
            expected: 2,
            found: 3
        }
    );
}

#[test]
fn wrong_values_length() {
    let e = SparseTensor::assemble(
        &csr(),
        &[3, 4],
        vec![u64s(&[0, 1, 1, 2]), u64s(&[0, 1])],
        vals(5),
        Validation::Trusted,
    )
    .unwrap_err();
    assert_eq!(
        e,
        StorageError::WrongLength {
            field: Field::Values,
            expected: 2,
            found: 5
        }
    );
}

#[test]
fn positions_not_starting_at_zero() {
    assert_eq!(
        csr_with(&[1, 2, 2, 3], &[0, 3, 1]).unwrap_err(),
        StorageError::PositionsStart {
            lvl: Lvl(1),
            value: 1
        }
    );
}

#[test]
fn non_monotone_positions() {
    let e = csr_with(&[0, 2, 1, 3], &[0, 3, 1]).unwrap_err();
    assert_eq!(
        e,
        StorageError::PositionsNotMonotone {
            lvl: Lvl(1),
            position: 1
        }
    );
    assert_eq!(e.to_string(), "pos[1] decreases at index 1");
}

#[test]
fn coordinate_out_of_bounds() {
    let e = csr_with(&[0, 2, 2, 3], &[0, 4, 1]).unwrap_err();
    assert_eq!(
        e,
        StorageError::CoordinateOutOfBounds {
            lvl: Lvl(1),
            position: 1,
            coordinate: 4,
            size: 4
        }
    );
}

#[test]
fn first_out_of_bounds_coordinate_of_sorted_rows() {
    // Only the rows' last coordinates are compared with the size; the position reported is
    // still the first coordinate out of range, in the first row holding one.
    let e = csr_with(&[0, 3, 3, 5], &[0, 4, 5, 1, 6]).unwrap_err();
    assert_eq!(
        e,
        StorageError::CoordinateOutOfBounds {
            lvl: Lvl(1),
            position: 1,
            coordinate: 4,
            size: 4
        }
    );
    let e = csr_with(&[0, 1, 1, 3], &[3, 2, 7]).unwrap_err();
    assert_eq!(
        e,
        StorageError::CoordinateOutOfBounds {
            lvl: Lvl(1),
            position: 2,
            coordinate: 7,
            size: 4
        }
    );
    assert!(csr_with(&[0, 1, 1, 3], &[3, 2, 3]).is_ok());
}

#[test]
fn unsorted_coordinates_in_ordered_level() {
    let e = csr_with(&[0, 2, 2, 3], &[3, 0, 1]).unwrap_err();
    assert_eq!(
        e,
        StorageError::Unsorted {
            lvl: Lvl(1),
            position: 1
        }
    );
    let nonordered =
        parse_encoding("map = (i, j) -> (i : dense, j : compressed(nonordered))").unwrap();
    let ok = SparseTensor::assemble(
        &nonordered,
        &[3, 4],
        vec![u64s(&[0, 2, 2, 3]), u64s(&[3, 0, 1])],
        vals(3),
        Validation::Checked,
    );
    assert!(ok.is_ok());
}

#[test]
fn duplicates_in_unique_level() {
    let e = csr_with(&[0, 2, 2, 3], &[1, 1, 1]).unwrap_err();
    assert_eq!(
        e,
        StorageError::Duplicate {
            lvl: Lvl(1),
            position: 1
        }
    );
    let nonunique =
        parse_encoding("map = (i, j) -> (i : dense, j : compressed(nonunique))").unwrap();
    let t = SparseTensor::assemble(
        &nonunique,
        &[3, 4],
        vec![u64s(&[0, 2, 2, 3]), u64s(&[1, 1, 1])],
        vals(3),
        Validation::Checked,
    )
    .unwrap();
    assert_eq!(
        t.to_dense().unwrap().data.to_f64_vec()[1],
        3.0,
        "repeated coordinates add up"
    );
}

#[test]
fn unsorted_and_duplicate_coo_tuples() {
    let enc = preset("coo").unwrap();
    let coo = |crd: &[u64]| {
        SparseTensor::assemble(
            &enc,
            &[3, 3],
            vec![u64s(&[0, 2]), u64s(crd)],
            vals(2),
            Validation::Checked,
        )
    };
    assert_eq!(
        coo(&[1, 2, 1, 0]).unwrap_err(),
        StorageError::Unsorted {
            lvl: Lvl(1),
            position: 1
        }
    );
    assert_eq!(
        coo(&[1, 2, 1, 2]).unwrap_err(),
        StorageError::Duplicate {
            lvl: Lvl(1),
            position: 1
        }
    );
    assert_eq!(
        coo(&[2, 0, 1, 2]).unwrap_err(),
        StorageError::Unsorted {
            lvl: Lvl(0),
            position: 1
        }
    );
    assert!(coo(&[1, 0, 1, 2]).is_ok());
}

#[test]
fn widths_overflowed() {
    let enc = csr().with_widths(IndexWidth::W8, IndexWidth::W8);
    let e = SparseTensor::assemble(
        &enc,
        &[3, 400],
        vec![u64s(&[0, 1, 1, 2]), u64s(&[5, 300])],
        vals(2),
        Validation::Checked,
    )
    .unwrap_err();
    assert_eq!(
        e,
        StorageError::WidthOverflow {
            field: Field::Coordinates(Lvl(1)),
            index: 1,
            value: 300,
            width: 8
        }
    );
    let t = SparseTensor::assemble(
        &enc,
        &[3, 200],
        vec![u64s(&[0, 1, 1, 2]), u64s(&[5, 199])],
        vals(2),
        Validation::Checked,
    )
    .unwrap();
    assert_eq!(t.coordinates(Lvl(1)), Some(&IndexArray::U8(vec![5, 199])));
}

#[test]
fn loose_positions_out_of_range() {
    let enc = parse_encoding("map = (i, j) -> (i : dense, j : loose_compressed)").unwrap();
    let loose = |pos: &[u64]| {
        SparseTensor::assemble(
            &enc,
            &[2, 4],
            vec![u64s(pos), u64s(&[0, 3, 1])],
            vals(3),
            Validation::Checked,
        )
    };
    assert!(loose(&[0, 2, 2, 3]).is_ok());
    assert_eq!(
        loose(&[0, 2, 2, 4]).unwrap_err(),
        StorageError::PositionOutOfRange {
            lvl: Lvl(1),
            position: 3,
            value: 4,
            len: 3
        }
    );
    assert_eq!(
        loose(&[2, 0, 2, 3]).unwrap_err(),
        StorageError::PositionsNotMonotone {
            lvl: Lvl(1),
            position: 0
        }
    );
}

#[test]
fn structured_groups_are_checked() {
    let enc = preset("2:4").unwrap();
    let nm = |crd: &[u64]| {
        SparseTensor::assemble(&enc, &[1, 4], vec![u64s(crd)], vals(2), Validation::Checked)
    };
    assert!(nm(&[0, 3]).is_ok());
    assert_eq!(
        nm(&[3, 0]).unwrap_err(),
        StorageError::Unsorted {
            lvl: Lvl(2),
            position: 1
        }
    );
    assert_eq!(
        nm(&[0, 4]).unwrap_err(),
        StorageError::CoordinateOutOfBounds {
            lvl: Lvl(2),
            position: 1,
            coordinate: 4,
            size: 4
        }
    );
    assert_eq!(
        nm(&[1]).unwrap_err(),
        StorageError::WrongLength {
            field: Field::Coordinates(Lvl(2)),
            expected: 2,
            found: 1
        }
    );
}

#[test]
fn trusted_garbage_never_panics() {
    let t = SparseTensor::assemble(
        &csr(),
        &[3, 4],
        vec![u64s(&[9, 0, 7, 2]), u64s(&[99, 1])],
        vals(2),
        Validation::Trusted,
    )
    .unwrap();
    let _ = t.print();
    let _ = t.to_coo();
    let _ = t.to_dense();
    let _ = t.convert(&preset("coo").unwrap());
    t.foreach(|_, _, _| {});
    let coo = preset("coo").unwrap();
    let t = SparseTensor::assemble(
        &coo,
        &[3, 3],
        vec![u64s(&[5, 1]), u64s(&[7, 7])],
        vals(1),
        Validation::Trusted,
    )
    .unwrap();
    let _ = t.to_coo();
}

#[test]
fn storage_rejects_symbols_and_slices() {
    let ell =
        parse_encoding("map = [s0](i, j) -> (i * s0 : dense, i : dense, j : compressed)").unwrap();
    let e =
        SparseTensor::assemble(&ell, &[2, 2], vec![], vals(0), Validation::Checked).unwrap_err();
    assert_eq!(e, StorageError::Symbols);
    let sliced = parse_encoding(
        "map = (i : #sparse_tensor<slice(0, ?, 1)>, j) -> (i : dense, j : compressed)",
    )
    .unwrap();
    let e =
        SparseTensor::assemble(&sliced, &[2, 2], vec![], vals(0), Validation::Checked).unwrap_err();
    assert_eq!(e, StorageError::Slices);
}
