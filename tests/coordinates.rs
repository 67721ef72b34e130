//! Buffers declared `coordinates_of` an axis: their values index dense axes of that extent with
//! no range check in the kernel, because binding checks every value (a typed error names the
//! first one outside). The inspector's row and column ids of decomposed formats are declared
//! so, and are checked the same way.

mod common;

use common::gpu::{cases_config, schedule, scheduled_flat};
use common::*;
use lacuna::driver::{convert_inputs, Executable, Target};
use lacuna::ir::{ArrayData, DenseArray};
use lacuna::stage1::{bind, bind_with, verify, BindError, Input, Program, VerifyError};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// `y[i] = w[i] * x[idx[i]]`: a gather through an index buffer, with `idx` declared as
/// coordinates of `J` when `coords` is given (`dtype` its element type).
fn gather(coords: Option<&str>, dtype: &str) -> Program {
    let decl = coords.map_or(String::new(), |a| {
        format!(", coordinates_of: Some(\"{a}\")")
    });
    let text = format!(
        r#"(
    version: 1,
    name: "gather",
    params: ["m", "n"],
    axes: [
        (name: "I", kind: DenseFixed(n: "m")),
        (name: "J", kind: DenseFixed(n: "n")),
    ],
    buffers: [
        (name: "idx", axes: ["I"], dtype: {dtype}{decl}),
        (name: "w", axes: ["I"], dtype: F64),
        (name: "x", axes: ["J"], dtype: F64),
        (name: "y", axes: ["I"], dtype: F64, role: Output),
    ],
    body: [Iter((name: "g", axes: ["I"], kinds: "S", vars: ["i"],
        body: [Store("y[i] = w[i] * x[idx[i]]")]))],
)"#
    );
    Program::from_ron(&text).expect("the gather kernel parses")
}

fn gather_inputs(idx: &[i64], w: &[f64], x: &[f64]) -> BTreeMap<String, Input> {
    BTreeMap::from([
        (
            "idx".to_string(),
            Input::Dense(DenseArray {
                shape: vec![idx.len()],
                data: ArrayData::I64(idx.to_vec()),
            }),
        ),
        ("w".to_string(), dense(&[w.len()], w.to_vec())),
        ("x".to_string(), dense(&[x.len()], x.to_vec())),
    ])
}

fn flat_text(p: &Program) -> String {
    let lowered = lacuna::stage2::lower(p, &Default::default(), &mut |_, _| {}).expect("lowers");
    lowered.flat.to_string()
}

proptest! {
    #![proptest_config(cases_config(24))]

    /// Declared coordinates gather unchecked and agree with the dense reference on every target.
    #[test]
    fn declared_coordinates_gather((m, n) in (0usize..12, 1usize..12), seed in any::<u64>()) {
        let p = gather(Some("J"), "I64");
        verify(&p).expect("verifies");
        let idx: Vec<i64> = values(m, seed).iter().map(|v| ((v + 2.0) * 1000.0) as i64 % n as i64).collect();
        let (w, x) = (values(m, seed ^ 1), values(n, seed ^ 2));
        let want: Vec<f64> = (0..m).map(|i| w[i] * x[idx[i] as usize]).collect();
        for (target, outs) in run_all(&p, &gather_inputs(&idx, &w, &x)) {
            assert_dense(target, &outs["y"], &[m], &want);
        }
    }
}

#[test]
fn declared_coordinates_drop_the_range_check() {
    let checked = flat_text(&gather(None, "I64"));
    let trusted = flat_text(&gather(Some("J"), "I64"));
    assert!(
        checked.contains("select(") && checked.contains("< n"),
        "an undeclared index is range-checked:\n{checked}"
    );
    assert!(
        !trusted.contains("select(") && !trusted.contains("< n"),
        "a declared index is not:\n{trusted}"
    );
    // An axis of another extent keeps the check: its coordinates may exceed `n`.
    let other = gather(Some("I"), "I64");
    verify(&other).expect("verifies");
    assert!(flat_text(&other).contains("select("));
}

#[test]
fn values_outside_the_axis_are_bind_errors() {
    let (w, x) = (vec![1.0; 4], vec![2.0; 3]);
    for (idx, position, value) in [
        (vec![0, 2, 3, 1], 2, 3),
        (vec![0, -1, 0, 0], 1, -1),
        (vec![0, 1, 2, 7], 3, 7),
    ] {
        for dtype in ["I64", "I32"] {
            let p = gather(Some("J"), dtype);
            let err = bind(&p, &gather_inputs(&idx, &w, &x), &BTreeMap::new())
                .expect_err("an index outside J does not bind");
            assert_eq!(
                err,
                BindError::NotCoordinate {
                    buffer: "idx".into(),
                    axis: "J".into(),
                    position,
                    value,
                    extent: 3,
                },
                "{dtype}"
            );
            assert!(
                err.to_string()
                    .contains("not a coordinate of axis `J` (0..3)"),
                "{err}"
            );
        }
    }
    // Undeclared, the same data binds and the kernel reads the default for the bad index.
    let p = gather(None, "I64");
    let inputs = gather_inputs(&[0, 2, 3, 1], &w, &x);
    let mut b = bind(&p, &inputs, &BTreeMap::new()).expect("binds");
    let exe = Executable::build(&p, Target::Jit).expect("builds");
    exe.run(&p, &mut b).expect("runs");
    assert_eq!(b.buffers["y"].to_f64_vec(), vec![2.0, 2.0, 0.0, 2.0]);
}

#[test]
fn bad_declarations_are_verify_errors() {
    for (p, axis, reason) in [
        (gather(Some("K"), "I64"), "K", "no such axis"),
        (gather(Some("J"), "F64"), "J", "only integer buffers"),
    ] {
        match verify(&p) {
            Err(VerifyError::CoordinatesOf {
                buffer,
                axis: a,
                reason: r,
            }) => {
                assert_eq!((buffer.as_str(), a.as_str()), ("idx", axis));
                assert!(r.contains(reason), "{r}");
            }
            other => panic!("expected a coordinates_of error, got {other:?}"),
        }
    }
    // Bound without verification, they are bind errors, not panics.
    let inputs = gather_inputs(&[0], &[1.0], &[2.0]);
    let err = bind(&gather(Some("K"), "I64"), &inputs, &BTreeMap::new())
        .expect_err("an unknown axis does not bind");
    assert!(
        matches!(&err, BindError::Structure { buffer, axis, reason }
            if buffer == "idx" && axis == "K" && reason.contains("no such axis")),
        "{err:?}"
    );
    let err = bind(&gather(Some("J"), "F64"), &inputs, &BTreeMap::new())
        .expect_err("float coordinates do not bind");
    assert!(
        matches!(&err, BindError::Structure { reason, .. } if reason.contains("integer")),
        "{err:?}"
    );
    let mut p = gather(None, "I64");
    let y = p.buffers.iter_mut().find(|b| b.name == "y").expect("y");
    y.dtype = lacuna::ir::DType::I64;
    y.coordinates_of = Some("J".into());
    match verify(&p) {
        Err(VerifyError::CoordinatesOf { buffer, reason, .. }) => {
            assert_eq!(buffer, "y");
            assert!(reason.contains("only inputs"), "{reason}");
        }
        other => panic!("expected a coordinates_of error, got {other:?}"),
    }
}

/// A matrix whose rows change length, for the decomposed formats below.
fn matrix() -> (usize, usize, Vec<Vec<(usize, f64)>>) {
    let (m, n) = (37, 29);
    let rows = (0..m)
        .map(|i| {
            let len = (i * 7) % 11;
            (0..len)
                .map(|t| ((i + 3 * t) % n, (i + t) as f64 * 0.25 - 1.0))
                .collect::<BTreeMap<_, _>>()
                .into_iter()
                .collect()
        })
        .collect();
    (m, n, rows)
}

#[test]
fn decomposed_row_and_column_ids_index_unchecked() {
    let p = kernel("spmv");
    let (_, flat) = scheduled_flat(&p, &schedule("spmv_sell.ron"));
    let text = flat.to_string();
    assert!(
        text.contains("x[_p1]"),
        "x gathered at the column id:\n{text}"
    );
    assert!(
        !text.contains("select("),
        "no range check in the sliced kernel:\n{text}"
    );
    assert!(
        !text.contains("if "),
        "the write-back of the rows is unguarded:\n{text}"
    );
    let spmm = kernel("spmm");
    let (_, flat) = scheduled_flat(&spmm, &schedule("spmm_hyb.ron"));
    let text = flat.to_string();
    assert!(
        !text.contains("select("),
        "hyb's ELL rows store unguarded:\n{text}"
    );
}

#[test]
fn corrupted_inspector_ids_are_bind_errors() {
    let p = kernel("spmv");
    let s = lacuna::schedule::Schedule::replay(&p, &schedule("spmv_sell.ron").trace)
        .expect("the schedule applies");
    let scheduled = s.program().clone();
    let (m, n, rows) = matrix();
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(to_coo(m, n, &rows))),
        ("x".to_string(), dense(&[n], values(n, 5))),
    ]);
    let given = convert_inputs(s.conversions(), &inputs).expect("converts");
    bind_with(&scheduled, &inputs, &BTreeMap::new(), given.clone())
        .expect("the inspector's ids bind");
    for (buffer, axis, bad) in [("A.p0.col", "J", n as i64), ("A.p0.row", "I", -2)] {
        let mut g = given.clone();
        let ids = g.buffers.get_mut(buffer).expect("bound by the inspector");
        let position = 5;
        let mut v = ids.to_i64_vec();
        v[position] = bad;
        *ids = match ids {
            ArrayData::I32(_) => ArrayData::I32(v.iter().map(|&x| x as i32).collect()),
            _ => ArrayData::I64(v),
        };
        let err = bind_with(&scheduled, &inputs, &BTreeMap::new(), g)
            .expect_err("a corrupted id does not bind");
        assert!(
            matches!(&err, BindError::NotCoordinate { buffer: b, axis: a, position: 5, value, .. }
                if b == buffer && a == axis && *value == bad),
            "{err:?}"
        );
    }
}

/// `rcm`'s row ids are declared a permutation of the rows (its kernel sets each row of the
/// result once instead of adding into a zeroed one, and runs the rows in parallel): ids that
/// repeat a row, or fall short of every row, do not bind; the inspector's ids bind and give
/// SpMM's result.
#[test]
fn rcm_row_ids_must_be_a_permutation() {
    let p = kernel("spmm");
    let trace = lacuna::driver::spmm_rcm_trace(4, 4, true, false, false, true);
    let s = lacuna::schedule::Schedule::replay(&p, &trace).expect("the schedule applies");
    let scheduled = s.program().clone();
    let row = scheduled.buffer("A.p0.row").expect("the row ids");
    assert!(row.permutation && row.coordinates_of.as_deref() == Some("I"));
    let (m, n, rows) = matrix();
    let b = values(n * 4, 3);
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(to_coo(m, n, &rows))),
        ("B".to_string(), dense(&[n, 4], b.clone())),
    ]);
    let given = convert_inputs(s.conversions(), &inputs).expect("converts");
    let mut bound = bind_with(&scheduled, &inputs, &BTreeMap::new(), given.clone())
        .expect("the inspector's ids bind");
    let file = lacuna::schedule::ScheduleFile {
        version: 1,
        kernel: "spmm".into(),
        trace,
    };
    let (_, exe, _) = Executable::build_converting(&p, Some(&file), Target::Jit).expect("builds");
    lacuna::driver::reset_outputs(&scheduled, &mut bound);
    exe.run(&scheduled, &mut bound).expect("runs");
    let mut want = vec![0.0; m * 4];
    for (i, row) in rows.iter().enumerate() {
        for &(j, a) in row {
            for k in 0..4 {
                want[i * 4 + k] += a * b[j * 4 + k];
            }
        }
    }
    let got = bound.buffers["C"].to_f64_vec();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{g} vs {w}");
    }
    let ids = given.buffers["A.p0.row"].to_i64_vec();
    assert_eq!(ids.len(), m);
    let first = ids[0];
    // A row twice (and another never).
    let mut twice = ids.clone();
    twice[1] = first;
    // One row short (the parameter says one row fewer as well).
    let short: Vec<i64> = ids[..m - 1].to_vec();
    for (bad, what) in [
        (twice, format!("{first} again at position 1")),
        (short, format!("{} values", m - 1)),
    ] {
        let mut g = given.clone();
        if bad.len() < m {
            g.params.insert("A.p0.rows".into(), bad.len() as i64);
            // The last stored row's entries go with it (arrays kept at their index type).
            let like = |orig: &ArrayData, v: &[i64]| match orig {
                ArrayData::I32(_) => ArrayData::I32(v.iter().map(|&x| x as i32).collect()),
                _ => ArrayData::I64(v.to_vec()),
            };
            let axis = g.axes.get_mut("A.p0.s").expect("entries");
            let indptr = axis.indptr.as_ref().expect("indptr");
            let positions = indptr.to_i64_vec();
            let nnz = positions[m - 1];
            axis.indptr = Some(like(indptr, &positions[..m]));
            let cols = axis.indices.as_ref().expect("columns");
            axis.indices = Some(like(cols, &cols.to_i64_vec()[..nnz as usize]));
            g.params.insert("A.p0.nnz".into(), nnz);
            let vals = g.buffers["A.p0"].to_f64_vec();
            g.buffers
                .insert("A.p0".into(), ArrayData::F64(vals[..nnz as usize].to_vec()));
        }
        g.buffers.insert("A.p0.row".into(), ArrayData::I64(bad));
        let err = bind_with(&scheduled, &inputs, &BTreeMap::new(), g)
            .expect_err("ids that are not a permutation do not bind");
        assert!(
            matches!(&err, BindError::NotPermutation { buffer, axis, extent, reason }
                if buffer == "A.p0.row" && axis == "I" && *extent == m as i64 && *reason == what),
            "{err:?}"
        );
        assert!(err.to_string().contains("not a permutation"), "{err}");
    }
}

/// RGCN's edge types index its weights unchecked (`examples/rgcn.ron` declares them
/// coordinates of the relation axis); a type past the relations does not bind.
#[test]
fn rgcn_edge_types_are_relation_coordinates() {
    let p = kernel("rgcn");
    let text = flat_text(&p);
    assert!(!text.contains("select("), "{text}");
    let (n, rel) = (3, 2);
    let rows = vec![vec![(1, 1.0)], vec![(0, 2.0), (2, 3.0)], vec![]];
    let typed = |t: i32| {
        let e = to_coo(n, n, &rows);
        lacuna::ir::CooTensor {
            values: ArrayData::I32(vec![0, 1, t]),
            ..e
        }
    };
    let inputs = |t: i32| {
        BTreeMap::from([
            ("A".to_string(), Input::Coo(to_coo(n, n, &rows))),
            ("E".to_string(), Input::Coo(typed(t))),
            ("W".to_string(), dense(&[rel, 1, 1], vec![10.0, 100.0])),
            ("X".to_string(), dense(&[n, 1], vec![1.0, 2.0, 3.0])),
        ])
    };
    // Y[i] = sum_j A[i, j] * W[E[i, j]] * X[j]
    for (target, outs) in run_all(&p, &inputs(1)) {
        assert_dense(target, &outs["Y"], &[n, 1], &[20.0, 200.0 + 900.0, 0.0]);
    }
    let err = bind(&p, &inputs(2), &BTreeMap::new()).expect_err("type 2 of 2 relations");
    assert!(
        matches!(&err, BindError::NotCoordinate { buffer, axis, position: 2, value: 2, extent: 2 }
            if buffer == "E" && axis == "R"),
        "{err:?}"
    );
}

/// A kernel reading `x` at whole tiles: `y[t * 2 + o] = x[t * 2 + o]` over tiles `T` of 2
/// (`tiles` declared on `T` where `declared`).
fn tiled(declared: bool, factor: u64) -> Program {
    let decl = if declared {
        format!(", tiles: Some((extent: \"n\", factor: {factor}))")
    } else {
        String::new()
    };
    let text = format!(
        r#"(
    version: 1,
    name: "tiled",
    params: ["n", "h"],
    axes: [
        (name: "I", kind: DenseFixed(n: "n")),
        (name: "T", kind: DenseFixed(n: "h"){decl}),
        (name: "O", kind: DenseFixed(n: "2")),
    ],
    buffers: [
        (name: "x", axes: ["I"], dtype: F64),
        (name: "y", axes: ["I"], dtype: F64, role: Output),
    ],
    body: [Iter((name: "g", axes: ["T", "O"], kinds: "SS", vars: ["t", "o"],
        body: [Store("y[t * 2 + o] = 3.0 * x[t * 2 + o]")]))],
)"#
    );
    Program::from_ron(&text).expect("the tiled kernel parses")
}

/// An axis declared to tile an extent (`Axis::tiles`, as BSR's block rows and columns are)
/// indexes it as `t * factor + offset` without range checks; its extent times the factor must
/// fit the tiled extent when bound (`BindError::Tiles`), and a factor of 0 or an undeclared
/// extent do not verify. Undeclared, the same kernel keeps its checks; both agree with the
/// reference on every target.
#[test]
fn tiles_index_without_range_checks_and_are_checked_when_bound() {
    for declared in [false, true] {
        let p = tiled(declared, 2);
        verify(&p).expect("verifies");
        assert_eq!(flat_text(&p).contains("select("), !declared);
        let n = 9;
        let x = values(n, 4);
        let h = BTreeMap::from([("h".to_string(), 4)]);
        let inputs = BTreeMap::from([("x".to_string(), dense(&[n], x.clone()))]);
        let mut want: Vec<f64> = x.iter().map(|v| 3.0 * v).collect();
        want[8] = 0.0;
        let base = bind(&p, &inputs, &h).expect("4 tiles of 2 fit 9");
        for target in [Target::InterpStage1, Target::Interp, Target::Jit] {
            let exe = Executable::build(&p, target).expect("builds");
            let mut b = base.clone();
            lacuna::driver::reset_outputs(&p, &mut b);
            exe.run(&p, &mut b).expect("runs");
            let got = b.buffers["y"].to_f64_vec();
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                    "{}: {g} vs {w}",
                    target.name()
                );
            }
        }
        let five = BTreeMap::from([("h".to_string(), 5)]);
        let bound = bind(&p, &inputs, &five);
        if declared {
            let err = bound.expect_err("5 tiles of 2 exceed 9");
            assert!(
                matches!(&err, BindError::Tiles { axis, extent: 5, factor: 2, tiled, tiled_extent: 9 }
                    if axis == "T" && tiled == "n"),
                "{err:?}"
            );
            assert!(err.to_string().contains("exceed `n` = 9"), "{err}");
        } else {
            // Checked in the kernel instead: the tenth element is outside and skipped.
            bound.expect("binds: the kernel checks each index");
        }
    }
    let err = verify(&tiled(true, 0)).expect_err("a factor of 0");
    assert!(
        matches!(&err, VerifyError::Tiles { axis, .. } if axis == "T"),
        "{err:?}"
    );
    let mut p = tiled(true, 2);
    p.axes[1].tiles = Some(lacuna::stage1::Tiles {
        extent: lacuna::stage1::Size::Param("w".into()),
        factor: 2,
    });
    let err = verify(&p).expect_err("an undeclared extent");
    assert!(
        matches!(&err, VerifyError::UnknownParam { param, .. } if param == "w"),
        "{err:?}"
    );
}

/// BSR's block rows and columns tile the matrix (only blocks inside it are stored): its
/// kernel indexes `B` and `C` unchecked, and data whose block counts exceed the matrix do not
/// bind.
#[test]
fn bsr_blocks_tile_the_matrix() {
    let p = kernel("spmm");
    let trace = lacuna::driver::spmm_bsr_trace(2, 4, 4, false);
    let s = lacuna::schedule::Schedule::replay(&p, &trace).expect("the schedule applies");
    let scheduled = s.program().clone();
    let tiles = |axis: &str| scheduled.axis(axis).and_then(|a| a.tiles.clone());
    let size = |s: &str| lacuna::stage1::Size::Param(s.into());
    assert_eq!(
        tiles("A.p0.bi"),
        Some(lacuna::stage1::Tiles {
            extent: size("m"),
            factor: 2
        })
    );
    assert_eq!(
        tiles("A.p0.bj"),
        Some(lacuna::stage1::Tiles {
            extent: size("n"),
            factor: 2
        })
    );
    assert!(!flat_text(&scheduled).contains("select("));
    let printed = lacuna::stage1::print_program(&scheduled);
    assert!(
        printed.contains("A.p0.bi = dense_fixed(A.p0.mb)  // tiles m by 2"),
        "{printed}"
    );
    let (m, n, rows) = matrix();
    // Sizes specialized after the decomposition: the tiles follow them.
    let mut fixed = trace.clone();
    fixed.splice(
        1..1,
        [("m", m), ("n", n)].map(|(param, value)| lacuna::schedule::Instruction::Specialize {
            param: param.into(),
            value: value as u64,
        }),
    );
    let f = lacuna::schedule::Schedule::replay(&p, &fixed).expect("specializes");
    let fp = f.program();
    assert_eq!(
        fp.axis("A.p0.bi").and_then(|a| a.tiles.clone()),
        Some(lacuna::stage1::Tiles {
            extent: lacuna::stage1::Size::Const(m as u64),
            factor: 2
        })
    );
    verify(fp).expect("verifies");
    assert!(!flat_text(fp).contains("select("));
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(to_coo(m, n, &rows))),
        ("B".to_string(), dense(&[n, 4], values(n * 4, 3))),
    ]);
    let given = convert_inputs(s.conversions(), &inputs).expect("converts");
    assert_eq!(given.params["A.p0.mb"], (m / 2) as i64);
    assert_eq!(given.params["A.p0.nb"], (n / 2) as i64);
    bind_with(&scheduled, &inputs, &BTreeMap::new(), given.clone()).expect("binds");
    // One block column too many (the coordinates stay in range of it).
    let mut g = given.clone();
    g.params.insert("A.p0.nb".into(), (n / 2 + 1) as i64);
    let err = bind_with(&scheduled, &inputs, &BTreeMap::new(), g).expect_err("too many columns");
    assert!(
        matches!(&err, BindError::Tiles { axis, factor: 2, tiled_extent, .. }
            if axis == "A.p0.bj" && *tiled_extent == n as i64),
        "{err:?}"
    );
    // One (empty) block row too many.
    let mut g = given;
    g.params.insert("A.p0.mb".into(), (m / 2 + 1) as i64);
    let axis = g.axes.get_mut("A.p0.bj").expect("block columns");
    let indptr = axis.indptr.as_ref().expect("indptr").to_i64_vec();
    let last = *indptr.last().expect("a position");
    let mut longer = indptr;
    longer.push(last);
    axis.indptr = Some(ArrayData::I64(longer));
    let err = bind_with(&scheduled, &inputs, &BTreeMap::new(), g).expect_err("too many rows");
    assert!(
        matches!(&err, BindError::Tiles { axis, factor: 2, tiled_extent, .. }
            if axis == "A.p0.bi" && *tiled_extent == m as i64),
        "{err:?}"
    );
}
