//! The machine code does no bounds checks, so the safe entry points that run it
//! (`Executable::run`, `Executable::run_preprocess`, the value copies) validate the bindings they
//! are handed against the program the executable was built for, and refuse, without running
//! anything, bindings changed by hand into something the code would read or write out of bounds:
//! a typed error naming the array, never undefined behaviour.

mod common;

use common::*;
use lacuna::driver::{convert_inputs, DriverError, Executable, Target};
use lacuna::ir::ArrayData;
use lacuna::schedule::decompose::DecomposeError;
use lacuna::stage1::{bind, bind_with, unpack, BindError, Bindings, Input, Program};
use std::collections::BTreeMap;

/// A 4 × 5 matrix with an empty row, and `x`.
fn spmv_inputs() -> BTreeMap<String, Input> {
    let rows = vec![
        vec![(0, 1.0), (3, 2.0)],
        vec![],
        vec![(1, -1.0), (2, 0.5), (4, 3.0)],
        vec![(4, 4.0)],
    ];
    BTreeMap::from([
        ("A".to_string(), Input::Coo(to_coo(4, 5, &rows))),
        ("x".to_string(), dense(&[5], vec![1.0, 2.0, 3.0, 4.0, 5.0])),
    ])
}

const Y: [f64; 4] = [9.0, 0.0, 14.5, 20.0];

fn y(p: &Program, b: &Bindings) -> Vec<f64> {
    unpack(p, b, "y").expect("unpacks").values().to_f64_vec()
}

/// Runs `tamper`ed bindings through `exe.run` and returns its error; the output stays zero (the
/// kernel did not run).
fn refused(p: &Program, exe: &Executable, tamper: impl Fn(&mut Bindings)) -> DriverError {
    refused_on(p, exe, &spmv_inputs(), tamper)
}

fn refused_on(
    p: &Program,
    exe: &Executable,
    inputs: &BTreeMap<String, Input>,
    tamper: impl Fn(&mut Bindings),
) -> DriverError {
    let mut b = bind(p, inputs, &BTreeMap::new()).expect("binds");
    tamper(&mut b);
    let e = exe
        .run(p, &mut b)
        .expect_err("tampered bindings are refused");
    if let Some(out) = b.buffers.get("y") {
        assert!(out.to_f64_vec().iter().all(|&v| v == 0.0), "ran: {e}");
    }
    e
}

#[test]
fn compiled_kernels_refuse_inconsistent_bindings() {
    let p = kernel("spmv");
    let exe = Executable::build(&p, Target::Jit).expect("builds");
    // Untouched, it runs and is right.
    let mut b = bind(&p, &spmv_inputs(), &BTreeMap::new()).expect("binds");
    exe.run(&p, &mut b).expect("runs");
    assert_eq!(y(&p, &b), Y);

    // A column index past `x`.
    let e = refused(&p, &exe, |b| {
        let j = b.axes.get_mut("J").expect("J is bound");
        j.indices
            .as_mut()
            .expect("indices")
            .set(2, lacuna::ir::Scalar::I64(5));
    });
    assert!(
        matches!(&e, DriverError::Bind(BindError::Structure { axis, .. }) if axis == "J"),
        "{e}"
    );
    // `indptr` that runs past the stored entries.
    let e = refused(&p, &exe, |b| {
        let j = b.axes.get_mut("J").expect("J is bound");
        j.indptr
            .as_mut()
            .expect("indptr")
            .set(4, lacuna::ir::Scalar::I64(60));
    });
    assert!(
        matches!(&e, DriverError::Bind(BindError::Structure { axis, .. }) if axis == "J"),
        "{e}"
    );
    // Values, `x` and `y` shorter than the structure says.
    for (buffer, len) in [("A", 5), ("x", 4), ("y", 3)] {
        let e = refused(&p, &exe, |b| {
            let a = b.buffers.get_mut(buffer).expect("bound");
            *a = ArrayData::F64(vec![0.0; len]);
        });
        match &e {
            DriverError::Bind(BindError::Length {
                buffer: got,
                expected,
                found,
                ..
            }) => assert_eq!(
                (got.as_str(), *found),
                (buffer, len),
                "{e}; expected {expected}"
            ),
            other => panic!("{buffer}: {other}"),
        }
    }
    // A size that no longer matches the arrays.
    let e = refused(&p, &exe, |b| {
        b.params.insert("n".into(), 50);
    });
    assert!(
        matches!(&e, DriverError::Bind(BindError::Length { .. })),
        "{e}"
    );
}

#[test]
fn an_executable_refuses_another_programs_bindings() {
    let spmv = kernel("spmv");
    let exe = Executable::build(&spmv, Target::Jit).expect("builds");
    // The same kernel with `y` over a longer axis: validated against it, a `y` of 4 would pass.
    let mut other = spmv.clone();
    other.name = "spmv_other".into();
    let mut b = bind(&spmv, &spmv_inputs(), &BTreeMap::new()).expect("binds");
    let e = exe.run(&other, &mut b).expect_err("another program");
    assert!(
        matches!(&e, DriverError::OtherProgram { kernel } if kernel == "spmv_other"),
        "{e}"
    );
    assert!(e.to_string().contains("build_with"), "{e}");
    let e = exe
        .run_preprocess(&other, &mut b)
        .expect_err("another program");
    assert!(matches!(e, DriverError::OtherProgram { .. }));
    // The interpreters check every access and take any program.
    let interp = Executable::build(&spmv, Target::Interp).expect("builds");
    interp
        .check_bindings(&other, &b)
        .expect("no machine code to protect");
}

#[test]
fn value_copies_refuse_tampered_source_maps() {
    let p = kernel("spmv");
    for target in [Target::Jit, Target::Interp] {
        let (program, exe, conversions) = Executable::build_converting(
            &p,
            Some(&decompose(&p, "(+ (bucket 1 3 (ell 2)) remainder)")),
            target,
        )
        .expect("builds");
        let data = spmv_inputs();
        let fresh = || {
            let given = convert_inputs(&conversions, &data).expect("converts");
            bind_with(&program, &data, &BTreeMap::new(), given).expect("binds")
        };
        let mut b = fresh();
        // Padding slots (source -1) are valid: the copy stores zero there.
        let src = b.buffers["A.p0.src"].to_i64_vec();
        assert!(src.contains(&-1), "row 3 pads the bucket: {src:?}");
        exe.run(&program, &mut b).expect("runs");
        assert_eq!(y(&program, &b), Y, "{}", target.name());

        // A slot whose source is past A's 6 entries.
        let mut b = fresh();
        b.buffers
            .get_mut("A.p0.src")
            .expect("the first part's map")
            .set(1, lacuna::ir::Scalar::I64(6));
        let e = exe
            .run(&program, &mut b)
            .expect_err("source past the entries");
        match &e {
            DriverError::Conversion {
                source:
                    DecomposeError::SourceMap {
                        map,
                        slot,
                        value,
                        nnz,
                    },
                ..
            } => assert_eq!((map.as_str(), *slot, *value, *nnz), ("A.p0.src", 1, 6, 6)),
            other => panic!("{}: {other}", target.name()),
        }
        assert!(e.to_string().contains("A.p0.src"), "{e}");
        // A map shorter than its part's slots.
        let mut b = fresh();
        b.buffers.insert("A.p0.src".into(), ArrayData::I64(vec![0]));
        let e = exe.run_preprocess(&program, &mut b).expect_err("short map");
        assert!(
            matches!(&e, DriverError::Bind(BindError::Length { buffer, .. }) if buffer == "A.p0.src"),
            "{}: {e}",
            target.name()
        );
    }
}

/// `specialize_buffer` makes the kernel compute `J`'s arrays instead of loading them, so no
/// missing array stops it: binding must hold them, checked against the closed forms, or the
/// coordinates and lengths the kernel computes would go unchecked.
#[test]
fn closed_forms_are_checked_against_bound_arrays() {
    let p = kernel("spmv");
    let (program, exe) =
        Executable::build_with(&p, Some(&schedule_file("spmv_band")), Target::Jit).expect("builds");
    // A 4 × 6 band: row i stores columns i, i + 1, i + 2, as `spmv_band` asserts.
    let rows: Vec<Vec<(usize, f64)>> = (0..4)
        .map(|i| (0..3).map(|d| (i + d, (1 + i * 3 + d) as f64)).collect())
        .collect();
    let x = values(6, 7);
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(to_coo(4, 6, &rows))),
        ("x".to_string(), dense(&[6], x.clone())),
    ]);
    let mut b = bind(&program, &inputs, &BTreeMap::new()).expect("binds");
    exe.run(&program, &mut b).expect("runs");
    let want: Vec<f64> = rows
        .iter()
        .map(|r| r.iter().map(|&(j, v)| v * x[j]).sum())
        .collect();
    for (got, want) in y(&program, &b).iter().zip(&want) {
        assert!(close(*got, *want), "{got} vs {want}");
    }

    // No structure for `J` at all, or no `indices`: refused, naming the axis and the form.
    type Tamper = fn(&mut Bindings);
    let tampers: [(&str, Tamper); 2] = [
        ("no structure", |b| {
            b.axes.remove("J");
        }),
        ("missing indices", |b| {
            b.axes.get_mut("J").expect("J is bound").indices = None;
        }),
    ];
    for (what, tamper) in tampers {
        let e = refused_on(&program, &exe, &inputs, tamper);
        match &e {
            DriverError::Bind(BindError::Structure { axis, reason, .. }) => {
                assert_eq!(axis, "J", "{e}");
                assert!(
                    reason.contains(what) && reason.contains("specialize_buffer"),
                    "{e}"
                );
            }
            other => panic!("{what}: {other}"),
        }
    }
    // Bound arrays that break the form are refused too.
    let e = refused_on(&program, &exe, &inputs, |b| {
        let j = b.axes.get_mut("J").expect("J is bound");
        j.indices
            .as_mut()
            .expect("indices")
            .set(4, lacuna::ir::Scalar::I64(5));
    });
    assert!(
        matches!(&e, DriverError::Bind(BindError::ClosedForm { axis, position: 4, .. }) if axis == "J"),
        "{e}"
    );
}

/// A preprocessed executable's kernel trusts the aux buffers its preprocessing fills, so `run`
/// allocates and fills them itself: aux arrays bound by hand (here, rows far past `X`) are
/// replaced, never read. (Its parts are private, so safe code cannot run that kernel alone.)
#[test]
fn preprocessed_kernels_fill_their_own_aux_buffers() {
    let p = kernel("sddmm");
    let rows = vec![vec![(1, 2.0), (3, -1.0)], vec![], vec![(0, 0.5), (2, 4.0)]];
    let (m, n, k) = (3, 4, 5);
    let x = values(m * k, 1);
    let w = values(n * k, 2);
    let inputs = BTreeMap::from([
        ("S".to_string(), Input::Coo(to_coo(m, n, &rows))),
        ("X".to_string(), dense(&[m, k], x.clone())),
        ("W".to_string(), dense(&[n, k], w.clone())),
    ]);
    let want: Vec<f64> = rows
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            let (x, w) = (&x, &w);
            r.iter()
                .map(move |&(j, s)| s * (0..k).map(|q| x[i * k + q] * w[j * k + q]).sum::<f64>())
        })
        .collect();
    for target in [Target::Jit, Target::Interp] {
        let (program, exe) =
            Executable::build_with(&p, Some(&schedule_file("sddmm_fused_pre")), target)
                .expect("builds");
        let stage = exe.preprocess_stage().expect("a preprocessing stage");
        assert!(
            !stage.aux.is_empty(),
            "the row of each nonzero is an aux buffer"
        );
        let mut b = bind(&program, &inputs, &BTreeMap::new()).expect("binds");
        for aux in &stage.aux {
            b.buffers
                .insert(aux.name.clone(), ArrayData::I64(vec![1 << 40; 64]));
        }
        exe.run(&program, &mut b).expect("runs");
        let got = unpack(&program, &b, "C").expect("unpacks");
        let got = got.values().to_f64_vec();
        assert_eq!(got.len(), want.len(), "{}", target.name());
        for (g, w) in got.iter().zip(&want) {
            assert!(close(*g, *w), "{}: {g} vs {w}", target.name());
        }
    }
}

/// Row sums over a sparse_fixed axis: its loops run `w` entries a row without loading `J`'s
/// arrays, so a missing structure would not stop the kernel.
const ELL_ROW_SUM: &str = r#"(
    version: 1, name: "ell_row_sum", params: ["m", "n", "w"],
    axes: [
        (name: "I", kind: DenseFixed(n: "m")),
        (name: "J", kind: SparseFixed(parent: "I", n: "n", nnz_cols: "w")),
    ],
    buffers: [
        (name: "A", axes: ["I", "J"], dtype: F64),
        (name: "b", axes: ["I"], dtype: F64, role: Output),
    ],
    body: [Iter((name: "s", axes: ["I", "J"], kinds: "SR", vars: ["i", "j"],
        init: [Store("b[i] = 0.0")], body: [Store("b[i] = b[i] + A[i, j]")]))],
)"#;

/// A bound buffer needs its axes' structure: without it, its length (what the kernel reaches)
/// is unknown, and a fixed-width axis's loops load nothing that would be found missing.
#[test]
fn buffers_over_unbound_axes_are_refused() {
    let p = inline_kernel(ELL_ROW_SUM);
    let exe = Executable::build(&p, Target::Jit).expect("builds");
    let rows = vec![vec![(0, 1.0), (2, 2.0)], vec![(1, 3.0), (3, 4.0)]];
    let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(2, 4, &rows)))]);
    let params = BTreeMap::from([("w".to_string(), 2)]);
    let mut b = bind(&p, &inputs, &params).expect("binds");
    exe.run(&p, &mut b).expect("runs");
    assert_eq!(
        unpack(&p, &b, "b").expect("unpacks").values().to_f64_vec(),
        [3.0, 7.0]
    );
    let mut b = bind(&p, &inputs, &params).expect("binds");
    b.axes.remove("J");
    let e = exe.run(&p, &mut b).expect_err("no structure for J");
    assert!(
        matches!(&e, DriverError::Bind(BindError::NoStructure { axis, .. }) if axis == "J"),
        "{e}"
    );
    assert!(b.buffers["b"].to_f64_vec().iter().all(|&v| v == 0.0));
}

/// A dense_variable axis's coordinate is the position in its segment, which the kernel uses on
/// a dense axis of extent `max_len` unchecked: a segment longer than that is refused even when
/// (unsorted) indices are bound too.
#[test]
fn dense_variable_segments_stay_within_max_len() {
    let p = inline_kernel(
        r#"(
        version: 1, name: "ragged_dot", params: ["m", "max_len", "nnz"],
        axes: [
            (name: "I", kind: DenseFixed(n: "m")),
            (name: "J", kind: DenseVariable(parent: "I", max_len: "max_len", nnz: "nnz"),
                sorted: false),
            (name: "J_", kind: DenseFixed(n: "max_len")),
        ],
        buffers: [
            (name: "A", axes: ["I", "J"], dtype: F64),
            (name: "x", axes: ["J_"], dtype: F64),
            (name: "y", axes: ["I"], dtype: F64, role: Output),
        ],
        body: [Iter((name: "s", axes: ["I", "J"], kinds: "SR", vars: ["i", "j"],
            init: [Store("y[i] = 0.0")], body: [Store("y[i] = y[i] + A[i, j] * x[j]")]))],
    )"#,
    );
    let exe = Executable::build(&p, Target::Jit).expect("builds");
    let rows = vec![vec![(0, 1.0), (1, 2.0)], vec![(0, 3.0)]];
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(to_coo(2, 2, &rows))),
        ("x".to_string(), dense(&[2], vec![10.0, 100.0])),
    ]);
    let mut b = bind(&p, &inputs, &BTreeMap::new()).expect("binds");
    exe.run(&p, &mut b).expect("runs");
    assert_eq!(y(&p, &b), [210.0, 30.0]);
    // Row 0 grown to 40 entries, with in-range (repeated) indices beside the indptr.
    let mut b = bind(&p, &inputs, &BTreeMap::new()).expect("binds");
    let j = b.axes.get_mut("J").expect("J is bound");
    j.indptr = Some(ArrayData::I64(vec![0, 40, 41]));
    j.indices = Some(ArrayData::I64(vec![0; 41]));
    b.params.insert("nnz".into(), 41);
    b.buffers.insert("A".into(), ArrayData::F64(vec![1.0; 41]));
    let e = exe.run(&p, &mut b).expect_err("a segment past max_len");
    match &e {
        DriverError::Bind(BindError::Structure { axis, reason, .. }) => {
            assert_eq!(axis, "J");
            assert!(reason.contains("max_len"), "{e}");
        }
        other => panic!("{other}"),
    }
}

/// The parts a decomposition's conversion builds (row ids, source maps, values) are what the
/// kernel and its parallel loops rely on (distinct rows, entries in range): an input or a
/// parameter that replaces them is refused. A dense input is stored by its non-zeros, in the
/// conversion as in binding, and must be as long as its shape.
#[test]
fn converted_parts_cannot_be_replaced() {
    let p = kernel("spmv");
    let (program, exe, conversions) = Executable::build_converting(
        &p,
        Some(&decompose(&p, "(+ (bucket 1 2 (ell 1)) remainder)")),
        Target::Jit,
    )
    .expect("builds");
    let data = spmv_inputs();
    let given = convert_inputs(&conversions, &data).expect("converts");
    let part = given
        .buffers
        .keys()
        .find(|k| k.ends_with(".row"))
        .expect("a part with row ids")
        .clone();
    let mut with_part = data.clone();
    with_part.insert(
        part.clone(),
        Input::Dense(lacuna::ir::DenseArray {
            shape: vec![given.buffers[&part].len()],
            data: ArrayData::I32(vec![0; given.buffers[&part].len()]),
        }),
    );
    let e = bind_with(&program, &with_part, &BTreeMap::new(), given.clone())
        .expect_err("row ids given by hand");
    assert!(
        matches!(&e, BindError::Converted { name } if *name == part),
        "{e}"
    );
    let (param, &value) = given
        .params
        .iter()
        .next()
        .expect("the conversion sets sizes");
    let e = bind_with(
        &program,
        &data,
        &BTreeMap::from([(param.clone(), value + 1)]),
        given.clone(),
    )
    .expect_err("a size the conversion set, changed");
    assert!(
        matches!(&e, BindError::ShapeMismatch { param: got, .. } if got == param),
        "{e}"
    );
    bind_with(
        &program,
        &data,
        &BTreeMap::from([(param.clone(), value)]),
        given,
    )
    .expect("the same size is fine");

    // A dense A (zeros included) converts and binds as its non-zeros.
    let Input::Coo(a) = &data["A"] else {
        panic!("COO A")
    };
    let mut cells = vec![0.0; 4 * 5];
    for e in 0..a.nnz() {
        cells[a.coords[0][e] * 5 + a.coords[1][e]] = a.values.to_f64_vec()[e];
    }
    let mut dense_a = data.clone();
    dense_a.insert("A".into(), dense(&[4, 5], cells.clone()));
    let given = convert_inputs(&conversions, &dense_a).expect("converts");
    let mut b = bind_with(&program, &dense_a, &BTreeMap::new(), given).expect("binds");
    exe.run(&program, &mut b).expect("runs");
    assert_eq!(y(&program, &b), Y);
    // Data that is not its shape's length is refused, not wrapped onto other cells.
    cells.push(1.0);
    dense_a.insert(
        "A".into(),
        Input::Dense(lacuna::ir::DenseArray {
            shape: vec![4, 5],
            data: ArrayData::F64(cells),
        }),
    );
    let e = convert_inputs(&conversions, &dense_a).expect_err("21 values for 4 × 5");
    assert!(e.to_string().contains("expected 20"), "{e}");
    let e = bind(&p, &dense_a, &BTreeMap::new()).expect_err("21 values for 4 × 5");
    assert!(
        matches!(&e, BindError::Length { buffer, expected: 20, found: 21, .. } if buffer == "A"),
        "{e}"
    );
}

/// A matrix given as storage (`Input::Sparse`, in any layout, a view included) binds as its
/// entries given as coordinates do, for a kernel that stores it by its own axes (SpMV) and for
/// one whose buffer declares an encoding (SpMV with `A` in CSC).
#[test]
fn stored_inputs_bind_as_their_entries() {
    use lacuna::ir::encoding::parse_format;
    use lacuna::ir::storage::SparseTensor;
    let given = spmv_inputs();
    let Input::Coo(a) = &given["A"] else {
        unreachable!("coordinates")
    };
    let csc = r#"(
        version: 1, name: "spmv_csc", params: ["m", "n"],
        axes: [(name: "I", kind: DenseFixed(n: "m")), (name: "J", kind: DenseFixed(n: "n"))],
        buffers: [
            (name: "A", axes: ["I", "J"], dtype: F64, encoding: Some("csc")),
            (name: "x", axes: ["J"], dtype: F64),
            (name: "y", axes: ["I"], dtype: F64, role: Output),
        ],
        body: [Iter((name: "spmv", axes: ["I", "J"], kinds: "SR", vars: ["i", "j"],
            body: [Store("y[i] = y[i] + A[i, j] * x[j]")]))],
    )"#;
    let programs = [
        ("spmv", kernel("spmv")),
        (
            "spmv with A in CSC",
            lacuna::stage1::sparsify(&inline_kernel(csc)).expect("sparsifies"),
        ),
    ];
    for (name, p) in programs {
        let want = bind(&p, &given, &BTreeMap::new()).expect("binds");
        assert_eq!(y(&p, &want).len(), Y.len());
        for fmt in ["csr", "csc", "dcsr", "coo"] {
            let enc = parse_format(fmt).expect("format");
            let mut stored = given.clone();
            let t = SparseTensor::from_coo(a, &enc).expect("stores");
            stored.insert("A".into(), Input::Sparse(t));
            let got = bind(&p, &stored, &BTreeMap::new()).expect("binds");
            assert_eq!(got, want, "{name} given {fmt}");
        }
        // A view of a larger matrix, cut to the operand.
        let mut big = a.clone();
        big.shape = vec![5, 6];
        big.coords[0].push(4);
        big.coords[1].push(5);
        big.values = ArrayData::F64([a.values.to_f64_vec(), vec![9.0]].concat());
        let enc = parse_format("csr").expect("format");
        let view = SparseTensor::from_coo(&big, &enc)
            .expect("stores")
            .view(&[0, 0], &[4, 5], &[1, 1])
            .expect("views");
        let mut stored = given.clone();
        stored.insert("A".into(), Input::Sparse(view));
        assert_eq!(
            bind(&p, &stored, &BTreeMap::new()).expect("binds"),
            want,
            "{name} view"
        );
    }
}
