//! Binding borrowed arrays (`bind_views`): sizes from shapes, the same structure checks as
//! owned bindings, lengths of values, and agreement with `bind` on the same data.

use lacuna_ir::{ArrayData, ArrayView, CooTensor};
use lacuna_stage1::{
    axis_len, bind, bind_views, buffer_len_view, check_length, verify, view_form, BindError, Input,
    InputView, Program, ViewForm,
};
use std::collections::BTreeMap;

const SPMV: &str = r#"(
    version: 1, name: "spmv", params: ["m", "n", "nnz"],
    axes: [
        (name: "I", kind: DenseFixed(n: "m")),
        (name: "J", kind: SparseVariable(parent: "I", n: "n", nnz: "nnz")),
        (name: "J_", kind: DenseFixed(n: "n")),
    ],
    buffers: [
        (name: "A", axes: ["I", "J"], dtype: F64),
        (name: "x", axes: ["J_"], dtype: F64),
        (name: "y", axes: ["I"], dtype: F64, role: Output),
    ],
    body: [Iter((name: "spmv", axes: ["I", "J"], kinds: "SR", vars: ["i", "j"],
        init: [Store("y[i] = 0.0")], body: [Store("y[i] = y[i] + A[i, j] * x[j]")]))],
)"#;

fn spmv() -> Program {
    let p = Program::from_ron(SPMV).unwrap();
    verify(&p).unwrap();
    p
}

/// A 2×3 CSR matrix [[0, 5, 6], [7, 0, 0]] and a vector of 3.
struct Data {
    indptr: Vec<i32>,
    indices: Vec<i32>,
    values: Vec<f64>,
    x: Vec<f64>,
}

fn data() -> Data {
    Data {
        indptr: vec![0, 2, 3],
        indices: vec![1, 2, 0],
        values: vec![5.0, 6.0, 7.0],
        x: vec![1.0, 2.0, 3.0],
    }
}

fn views<'a>(d: &'a Data, x_shape: &'a [usize]) -> BTreeMap<String, InputView<'a>> {
    BTreeMap::from([
        (
            "A".to_string(),
            InputView::Csr {
                shape: [2, 3],
                indptr: ArrayView::I32(&d.indptr),
                indices: ArrayView::I32(&d.indices),
                values: ArrayView::F64(&d.values),
            },
        ),
        (
            "x".to_string(),
            InputView::Dense {
                shape: x_shape,
                data: ArrayView::F64(&d.x),
            },
        ),
    ])
}

#[test]
fn forms_of_buffers() {
    let p = spmv();
    assert_eq!(
        view_form(&p, "A"),
        Some(ViewForm::Csr {
            axis: "J".into(),
            index: lacuna_ir::DType::I32
        })
    );
    assert_eq!(view_form(&p, "x"), Some(ViewForm::Dense));
    assert_eq!(view_form(&p, "nope"), None);
}

#[test]
fn binds_sizes_and_agrees_with_owned_binding() {
    let p = spmv();
    let d = data();
    let b = bind_views(&p, &views(&d, &[3]), &BTreeMap::new()).unwrap();
    assert_eq!(b.params["m"], 2);
    assert_eq!(b.params["n"], 3);
    assert_eq!(b.params["nnz"], 3);
    assert_eq!(buffer_len_view(&p, &b, "y").unwrap(), 2);
    assert_eq!(buffer_len_view(&p, &b, "A").unwrap(), 3);
    check_length(&p, &b, "y", "values", 2).unwrap();
    assert!(matches!(
        check_length(&p, &b, "y", "values", 3),
        Err(BindError::Length {
            expected: 2,
            found: 3,
            ..
        })
    ));
    let coo = CooTensor {
        shape: vec![2, 3],
        coords: vec![vec![0, 0, 1], vec![1, 2, 0]],
        values: ArrayData::F64(d.values.clone()),
    };
    let owned = bind(
        &p,
        &BTreeMap::from([
            ("A".to_string(), Input::Coo(coo)),
            (
                "x".to_string(),
                Input::Dense(lacuna_ir::DenseArray {
                    shape: vec![3],
                    data: ArrayData::F64(d.x.clone()),
                }),
            ),
        ]),
        &BTreeMap::new(),
    )
    .unwrap();
    assert_eq!(owned.params, b.params);
    assert_eq!(
        owned.axes["J"].indptr.as_ref().unwrap().view(),
        b.axes["J"].indptr.unwrap()
    );
    assert_eq!(
        owned.axes["J"].indices.as_ref().unwrap().view(),
        b.axes["J"].indices.unwrap()
    );
    assert_eq!(axis_len(&p, &owned, "J").unwrap(), 3);
}

#[test]
fn rejects_what_owned_binding_rejects() {
    let p = spmv();
    let check = |d: Data, x_shape: &[usize]| {
        bind_views(&p, &views(&d, x_shape), &BTreeMap::new()).map(|_| ())
    };
    // Unsorted coordinates in a row.
    let mut d = data();
    d.indices = vec![2, 1, 0];
    assert!(
        matches!(check(d, &[3]), Err(BindError::Structure { reason, .. }) if reason.contains("strictly increasing"))
    );
    // A coordinate out of range.
    let mut d = data();
    d.indices = vec![1, 9, 0];
    assert!(
        matches!(check(d, &[3]), Err(BindError::Structure { reason, .. }) if reason.contains("out of range"))
    );
    // indptr not monotone.
    let mut d = data();
    d.indptr = vec![0, 3, 2];
    assert!(matches!(check(d, &[3]), Err(BindError::Structure { .. })));
    // indptr of the wrong length for the rows.
    let mut d = data();
    d.indptr = vec![0, 3];
    assert!(check(d, &[3]).is_err());
    // A vector whose size disagrees with the matrix's columns.
    let mut d = data();
    d.x = vec![1.0; 4];
    assert!(matches!(
        check(d, &[4]),
        Err(BindError::ShapeMismatch { .. })
    ));
    // A dense shape that does not match its data.
    let d = data();
    assert!(matches!(
        check(d, &[2]),
        Err(BindError::ShapeMismatch { .. })
    ));
    // Values of another element type.
    let d = data();
    let xs = [1.0f32, 2.0, 3.0];
    let mut v = views(&d, &[3]);
    v.insert(
        "x".into(),
        InputView::Dense {
            shape: &[3],
            data: ArrayView::F32(&xs),
        },
    );
    assert!(
        matches!(bind_views(&p, &v, &BTreeMap::new()), Err(BindError::Structure { reason, .. }) if reason.contains("f32"))
    );
    // Missing and unknown inputs.
    let d = data();
    let mut v = views(&d, &[3]);
    v.remove("x");
    assert!(matches!(
        bind_views(&p, &v, &BTreeMap::new()),
        Err(BindError::MissingInput { .. })
    ));
    let mut v = views(&d, &[3]);
    v.insert("z".into(), v["x"]);
    assert!(matches!(
        bind_views(&p, &v, &BTreeMap::new()),
        Err(BindError::UnknownInput { .. })
    ));
}
