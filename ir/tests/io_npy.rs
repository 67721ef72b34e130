//! NumPy `.npy` reader and writer tests.

mod common;

use common::TempDir;
use lacuna_ir::io::{encode_npy, parse_npy, read_npy, write_npy, IoError};
use lacuna_ir::{ArrayData, DenseArray};
use proptest::prelude::*;
use std::path::Path;

/// A `.npy` file with the given version, header dictionary and data bytes (padded like NumPy).
fn npy(major: u8, dict: &str, data: &[u8]) -> Vec<u8> {
    let prefix = if major == 1 { 10 } else { 12 };
    let pad = (64 - (prefix + dict.len() + 1) % 64) % 64;
    let header = format!("{dict}{}\n", " ".repeat(pad));
    let mut out = b"\x93NUMPY".to_vec();
    out.extend_from_slice(&[major, 0]);
    if major == 1 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn f64_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn parse(bytes: &[u8]) -> Result<DenseArray, IoError> {
    parse_npy(bytes, Path::new("a.npy"))
}

#[test]
fn header_matches_numpy_layout() {
    let a = DenseArray {
        shape: vec![2, 3],
        data: ArrayData::F64(vec![0.0; 6]),
    };
    let bytes = encode_npy(&a, Path::new("a.npy")).unwrap();
    // numpy.save(np.zeros((2, 3))) writes a 128-byte header (with NumPy's growth padding).
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 118);
    let header = std::str::from_utf8(&bytes[10..128]).unwrap();
    assert!(header.starts_with("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }"));
    assert!(header.ends_with(" \n"));
    assert_eq!(bytes.len(), 128 + 48);
}

#[test]
fn header_shapes_like_python() {
    let h = |shape: Vec<usize>, n: usize| {
        let a = DenseArray {
            shape,
            data: ArrayData::I32(vec![7; n]),
        };
        let b = encode_npy(&a, Path::new("a.npy")).unwrap();
        let len = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + len) % 64, 0);
        String::from_utf8(b[10..10 + len].to_vec()).unwrap()
    };
    assert!(h(vec![], 1).contains("'descr': '<i4', 'fortran_order': False, 'shape': (), }"));
    assert!(h(vec![5], 5).contains("'shape': (5,), }"));
    assert!(h(vec![1, 2, 3], 6).contains("'shape': (1, 2, 3), }"));
}

#[test]
fn int8_reads_and_writes_as_numpy_i1() {
    // numpy.save(np.array([-128, 0, 127], dtype=np.int8)): descr '|i1', one byte each.
    let bytes = npy(
        1,
        "{'descr': '|i1', 'fortran_order': False, 'shape': (3,), }",
        &[0x80, 0x00, 0x7f],
    );
    let a = parse(&bytes).unwrap();
    assert_eq!(a.data, ArrayData::I8(vec![-128, 0, 127]));
    let out = encode_npy(&a, Path::new("a.npy")).unwrap();
    let len = u16::from_le_bytes([out[8], out[9]]) as usize;
    let header = std::str::from_utf8(&out[10..10 + len]).unwrap();
    assert!(header.starts_with("{'descr': '|i1',"), "{header}");
    assert_eq!(&out[10 + len..], &[0x80, 0x00, 0x7f]);
}

#[test]
fn fortran_order_2d() {
    // Column-major [[1, 2, 3], [4, 5, 6]].
    let dict = "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }";
    let a = parse(&npy(1, dict, &f64_bytes(&[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]))).unwrap();
    assert_eq!(a.shape, vec![2, 3]);
    assert_eq!(a.data, ArrayData::F64(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
}

#[test]
fn fortran_order_3d() {
    let shape = [2usize, 3, 4];
    // Element (i, j, k) has value 100i + 10j + k; Fortran order puts i fastest.
    let mut col_major = Vec::new();
    for k in 0..shape[2] {
        for j in 0..shape[1] {
            for i in 0..shape[0] {
                col_major.push((100 * i + 10 * j + k) as i64);
            }
        }
    }
    let data: Vec<u8> = col_major.iter().flat_map(|x| x.to_le_bytes()).collect();
    let dict = "{'fortran_order': True, 'shape': (2, 3, 4), 'descr': '<i8'}";
    let a = parse(&npy(1, dict, &data)).unwrap();
    let mut row_major = Vec::new();
    for i in 0..shape[0] {
        for j in 0..shape[1] {
            for k in 0..shape[2] {
                row_major.push((100 * i + 10 * j + k) as i64);
            }
        }
    }
    assert_eq!(a.data, ArrayData::I64(row_major));
}

#[test]
fn versions_2_and_3() {
    for major in [2, 3] {
        let dict = "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,)}";
        let a = parse(&npy(major, dict, &[0, 0, 128, 63, 0, 0, 0, 64])).unwrap();
        assert_eq!(a.data, ArrayData::F32(vec![1.0, 2.0]));
    }
}

#[test]
fn python2_long_dims() {
    let dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (1L, 2L), }";
    let a = parse(&npy(1, dict, &[1, 0, 0, 0, 2, 0, 0, 0])).unwrap();
    assert_eq!(a.shape, vec![1, 2]);
}

#[test]
fn zero_d_array() {
    let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (), }";
    let a = parse(&npy(1, dict, &f64_bytes(&[2.5]))).unwrap();
    assert_eq!(a.shape, Vec::<usize>::new());
    assert_eq!(a.data, ArrayData::F64(vec![2.5]));
}

#[test]
fn truncated_data() {
    let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }";
    let bytes = npy(1, dict, &f64_bytes(&[1.0, 2.0, 3.0]));
    let e = parse(&bytes[..bytes.len() - 3]).unwrap_err();
    assert!(
        matches!(
            e,
            IoError::NpyLength {
                expected_bytes: 24,
                found_bytes: 21,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().starts_with("a.npy: .npy data is 21 bytes"),
        "{e}"
    );
}

#[test]
fn trailing_data_rejected() {
    let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }";
    let e = parse(&npy(1, dict, &f64_bytes(&[1.0, 2.0]))).unwrap_err();
    assert!(
        matches!(
            e,
            IoError::NpyLength {
                expected_bytes: 8,
                found_bytes: 16,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn truncated_header() {
    let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }";
    let bytes = npy(1, dict, &f64_bytes(&[1.0]));
    for cut in [0, 5, 7, 9, 40] {
        let e = parse(&bytes[..cut]).unwrap_err();
        assert!(matches!(e, IoError::Npy { .. }), "cut {cut}: {e:?}");
    }
}

#[test]
fn unsupported_descr() {
    for descr in [">f8", "|b1", "<u1", "<c16", "<f2"] {
        let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (1,), }}");
        let e = parse(&npy(1, &dict, &[0; 8])).unwrap_err();
        assert!(
            matches!(e, IoError::Unsupported { line: None, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains(&format!("'{descr}'")), "{e}");
    }
}

#[test]
fn structured_dtype_rejected() {
    let dict = "{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (1,), }";
    let e = parse(&npy(1, dict, &[0; 8])).unwrap_err();
    assert!(e.to_string().contains("structured"), "{e}");
}

#[test]
fn unsupported_version() {
    let mut bytes = npy(
        1,
        "{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
        &[0; 8],
    );
    bytes[6] = 4;
    let e = parse(&bytes).unwrap_err();
    assert!(matches!(e, IoError::Unsupported { .. }), "{e:?}");
}

#[test]
fn bad_magic_and_bad_dict() {
    assert!(matches!(
        parse(b"PK\x03\x04 a zip file"),
        Err(IoError::Npy { .. })
    ));
    for dict in [
        "{'descr': '<f8', 'fortran_order': False}",
        "{'descr': '<f8', 'fortran_order': Maybe, 'shape': (1,)}",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (1,) trailing",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (-1,)}",
        "{'descr': 8, 'fortran_order': False, 'shape': (1,)}",
    ] {
        let e = parse(&npy(1, dict, &[0; 8])).unwrap_err();
        assert!(matches!(e, IoError::Npy { .. }), "{dict}: {e:?}");
    }
}

#[test]
fn huge_shape_is_an_error() {
    let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }";
    let e = parse(&npy(1, dict, &[])).unwrap_err();
    assert!(matches!(e, IoError::Overflow { .. }), "{e:?}");
}

#[test]
fn writer_rejects_mismatched_shape() {
    let dir = TempDir::new();
    let p = dir.join("x.npy");
    std::fs::write(&p, b"old").unwrap();
    let a = DenseArray {
        shape: vec![2, 2],
        data: ArrayData::F64(vec![1.0; 3]),
    };
    let e = write_npy(&p, &a).unwrap_err();
    assert!(matches!(e, IoError::InvalidTensor { .. }), "{e:?}");
    assert_eq!(std::fs::read(&p).unwrap(), b"old", "destination untouched");
    assert_eq!(dir.listing(), vec!["x.npy".to_string()]);
}

/// Bit patterns of the elements, so NaNs compare equal to themselves.
fn bits(a: &ArrayData) -> Vec<u64> {
    match a {
        ArrayData::F32(v) => v.iter().map(|x| x.to_bits() as u64).collect(),
        ArrayData::F64(v) => v.iter().map(|x| x.to_bits()).collect(),
        ArrayData::I8(v) => v.iter().map(|&x| x as u64).collect(),
        ArrayData::I32(v) => v.iter().map(|&x| x as u64).collect(),
        ArrayData::I64(v) => v.iter().map(|&x| x as u64).collect(),
    }
}

fn dense_array() -> impl Strategy<Value = DenseArray> {
    (prop::collection::vec(0usize..5, 0..=3), 0..5u8).prop_flat_map(|(shape, kind)| {
        let n: usize = shape.iter().product();
        let data = match kind {
            0 => prop::collection::vec(any::<f32>(), n)
                .prop_map(ArrayData::F32)
                .boxed(),
            1 => prop::collection::vec(any::<f64>(), n)
                .prop_map(ArrayData::F64)
                .boxed(),
            2 => prop::collection::vec(any::<i32>(), n)
                .prop_map(ArrayData::I32)
                .boxed(),
            3 => prop::collection::vec(any::<i8>(), n)
                .prop_map(ArrayData::I8)
                .boxed(),
            _ => prop::collection::vec(any::<i64>(), n)
                .prop_map(ArrayData::I64)
                .boxed(),
        };
        data.prop_map(move |data| DenseArray {
            shape: shape.clone(),
            data,
        })
    })
}

proptest! {
    #[test]
    fn roundtrip(a in dense_array()) {
        let dir = TempDir::new();
        let p = dir.join("a.npy");
        write_npy(&p, &a).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        prop_assert_eq!((10 + header_len) % 64, 0);
        prop_assert_eq!(bytes[10 + header_len - 1], b'\n');
        let back = read_npy(&p).unwrap();
        prop_assert_eq!(&back.shape, &a.shape);
        prop_assert_eq!(back.data.dtype(), a.data.dtype());
        prop_assert_eq!(bits(&back.data), bits(&a.data));
    }

    #[test]
    fn never_panics(tail in prop::collection::vec(any::<u8>(), 0..200), major in 0u8..5) {
        let mut bytes = b"\x93NUMPY".to_vec();
        bytes.push(major);
        bytes.push(0);
        bytes.extend_from_slice(&tail);
        let _ = parse(&bytes);
    }

    #[test]
    fn never_panics_on_plausible_headers(
        descr in prop::sample::select(vec!["<f8", "<i4", ">f8", "", "<f4"]),
        fortran in prop::sample::select(vec!["True", "False", "1", ""]),
        shape in prop::sample::select(vec![
            "()", "(0,)", "(3,)", "(2, 2)", "(18446744073709551615, 2)", "(", "(,)", "(1,,)",
            "(2, 0, 3)", "(99999999999999999999,)",
        ]),
        data_len in 0usize..64,
    ) {
        let dict = format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}");
        let _ = parse(&npy(1, &dict, &vec![1u8; data_len]));
    }
}
