//! `iso_values` (issue 6): a sparse buffer whose values are all equal stores one, and the kernel
//! loads only the structure. Scheduled kernels give the stage-I interpreter's results on the
//! unscheduled program (to 1e-12), bit for bit at 1 to 4 threads, on skewed matrices, for every
//! layout that takes one value (the buffer as stored, `csr`, `remainder`, `rcm`, `panels`,
//! `sell`); values that differ are a conversion error naming the entry; padding layouts and
//! misuse are schedule errors; SpMV's built-in schedule stores one value exactly when the
//! values are equal.

mod common;

use lacuna::driver::{
    builtin_schedule, convert_inputs, reset_outputs, run_kernel_scheduled, DataStats, DriverError,
    Executable, Target,
};
use lacuna::ir::{ArrayData, CooTensor};
use lacuna::schedule::decompose::DecomposeError;
use lacuna::schedule::{Condition, Instruction as I, Schedule, ScheduleFile};
use lacuna::stage1::{bind_with, unpack, Input, Program, Role};
use proptest::prelude::*;
use std::collections::BTreeMap;

use common::kernel;

/// Skewed patterns of one value `v`: `style` 0 random, 1 one dense row among empty ones, 2 many
/// empty rows, 3 a single row, 4 no entries.
fn iso_matrix() -> impl Strategy<Value = (usize, usize, Vec<(usize, usize)>, f64)> {
    (
        1usize..40,
        1usize..30,
        0u8..5,
        any::<u64>(),
        prop_oneof![Just(1.0), Just(-0.5), Just(3.25)],
    )
        .prop_map(|(m, n, style, seed, v)| {
            let (m, entries) = common::skewed_entries(m, n, style, seed);
            (
                m,
                n,
                entries.into_iter().map(|(i, j, _)| (i, j)).collect(),
                v,
            )
        })
}

fn coo(m: usize, n: usize, e: &[(usize, usize)], values: Vec<f64>) -> CooTensor {
    CooTensor {
        shape: vec![m, n],
        coords: vec![
            e.iter().map(|t| t.0).collect(),
            e.iter().map(|t| t.1).collect(),
        ],
        values: ArrayData::F64(values),
    }
}

fn dense(shape: Vec<usize>, seed: u64) -> Input {
    let len = shape.iter().product();
    common::dense(&shape, common::values(len, seed))
}

fn file(kernel: &str, trace: Vec<I>) -> ScheduleFile {
    ScheduleFile {
        version: 1,
        kernel: kernel.into(),
        trace,
    }
}

fn iso() -> I {
    I::IsoValues { buffer: "A".into() }
}

fn decompose(into: &str) -> I {
    I::DecomposeFormat {
        buffer: "A".into(),
        into: into.into(),
    }
}

/// SpMV schedules storing one value: `A` as stored (rows in parallel, vectorized with masked
/// tails), and after every decomposition that takes one.
fn spmv_schedules() -> Vec<(&'static str, ScheduleFile)> {
    let par = |l: &str| I::Parallel { r#loop: l.into() };
    let sell = |lanes: i64| {
        vec![
            decompose(&format!("(sell {lanes} 4)")),
            iso(),
            I::ReverseCacheWrite {
                block: "spmv_p0".into(),
                buffer: "y".into(),
                scope: "local".into(),
                at: Some("spmv_p0:ig.p0".into()),
            },
            I::Vectorize {
                r#loop: "spmv_p0:i.p0".into(),
            },
            I::Annotate {
                r#loop: "spmv_p0:i.p0".into(),
                key: "scalar_gathers".into(),
                value: 1,
            },
            par("spmv_p0:ig.p0"),
        ]
    };
    vec![
        (
            "stored, rows in parallel",
            file("spmv", vec![iso(), par("spmv:i")]),
        ),
        (
            "stored, masked vector rows",
            file(
                "spmv",
                vec![
                    iso(),
                    I::Vectorize {
                        r#loop: "spmv:j".into(),
                    },
                    I::Annotate {
                        r#loop: "spmv:j".into(),
                        key: "masked".into(),
                        value: 2,
                    },
                    par("spmv:i"),
                ],
            ),
        ),
        ("sell 8", file("spmv", sell(8))),
        ("sell 4", file("spmv", sell(4))),
        ("csr", file("spmv", vec![decompose("csr"), iso()])),
        ("rcm", file("spmv", vec![decompose("rcm"), iso()])),
        ("panels", file("spmv", vec![decompose("(panels 4)"), iso()])),
        (
            "colpart panels + remainder",
            file(
                "spmv",
                vec![decompose("(+ (colpart 2 0 (panels 4)) remainder)"), iso()],
            ),
        ),
    ]
}

/// The output of `p` under `s` on `target` with `threads` workers.
fn output(
    p: &Program,
    s: Option<&ScheduleFile>,
    inputs: &BTreeMap<String, Input>,
    target: Target,
    threads: usize,
) -> Result<Vec<f64>, DriverError> {
    let pool = lacuna::target::pool_builder(threads).build().expect("pool");
    let report =
        pool.install(|| run_kernel_scheduled(p, s, inputs, &BTreeMap::new(), target, 1))?;
    let out = p
        .buffers
        .iter()
        .find(|b| b.role == Role::Output)
        .expect("an output");
    Ok(report.outputs[&out.name].values().to_f64_vec())
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (x, y) in got.iter().zip(want) {
        assert!(
            (x - y).abs() <= 1e-12 * y.abs().max(1.0),
            "{what}: {x} vs {y}"
        );
    }
}

/// `s` gives the stage-I interpreter's result on the unscheduled program: on the JIT at 1 to 4
/// threads (bit for bit the same at each) and on the stage-II and stage-I interpreters.
fn assert_schedule_keeps_results(
    p: &Program,
    what: &str,
    s: &ScheduleFile,
    inputs: &BTreeMap<String, Input>,
) {
    let want = output(p, None, inputs, Target::InterpStage1, 1).expect("the interpreter runs");
    let mut first: Option<Vec<f64>> = None;
    for threads in 1..=4 {
        let got = output(p, Some(s), inputs, Target::Jit, threads)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_close(&got, &want, &format!("{what}, {threads} threads"));
        match &first {
            None => first = Some(got),
            Some(f) => assert_eq!(&got, f, "{what}: {threads} threads vs 1"),
        }
    }
    for target in [Target::Interp, Target::InterpStage1] {
        let got = output(p, Some(s), inputs, target, 1).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_close(&got, &want, &format!("{what} on {}", target.name()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn iso_schedules_equal_the_interpreter_at_every_thread_count((m, n, e, v) in iso_matrix(), k in 1usize..5) {
        let a = Input::Coo(coo(m, n, &e, vec![v; e.len()]));
        let spmv = kernel("spmv");
        let inputs = BTreeMap::from([("A".to_string(), a.clone()), ("x".to_string(), dense(vec![n], 1))]);
        for (what, s) in spmv_schedules() {
            assert_schedule_keeps_results(&spmv, what, &s, &inputs);
        }
        // Any kernel reading the buffer: SpMM, as stored and in reverse Cuthill–McKee order.
        let spmm = kernel("spmm");
        let inputs = BTreeMap::from([("A".to_string(), a), ("B".to_string(), dense(vec![n, k], 2))]);
        for (what, trace) in [
            ("spmm stored", vec![iso()]),
            ("spmm rcm", vec![decompose("rcm"), iso()]),
        ] {
            assert_schedule_keeps_results(&spmm, what, &file("spmm", trace), &inputs);
        }
    }
}

/// Values that are not all equal are refused when the kernel runs, naming the first entry that
/// differs from entry 0 (in storage order), for the buffer as stored and decomposed, on every
/// target.
#[test]
fn values_that_differ_are_a_conversion_error_naming_the_entry() {
    let p = kernel("spmv");
    // Row-major storage order: entry 3 is (1, 2).
    let e = [(0, 0), (0, 3), (1, 1), (1, 2), (2, 0)];
    let mut values = vec![2.0; e.len()];
    values[3] = 2.5;
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(coo(3, 4, &e, values))),
        ("x".to_string(), dense(vec![4], 1)),
    ]);
    for trace in [
        vec![iso()],
        vec![decompose("(sell 2 1)"), iso()],
        vec![decompose("rcm"), iso()],
    ] {
        for target in [Target::Jit, Target::Interp, Target::InterpStage1] {
            let s = file("spmv", trace.clone());
            let err = output(&p, Some(&s), &inputs, target, 2).expect_err("unequal values");
            match &err {
                DriverError::Conversion {
                    buffer,
                    source:
                        DecomposeError::NotIso {
                            position,
                            value,
                            first,
                        },
                } => {
                    assert_eq!(buffer, "A");
                    assert_eq!((*position, *value, *first), (3, 2.5, 2.0), "{err}");
                }
                other => panic!("{trace:?} on {}: {other}", target.name()),
            }
            assert!(err.to_string().contains("entry 3"), "{err}");
        }
    }
    // -0.0 and 0.0 differ bit for bit: one stored value could not give both signs of zero.
    let inputs = BTreeMap::from([
        (
            "A".to_string(),
            Input::Coo(coo(1, 2, &[(0, 0), (0, 1)], vec![0.0, -0.0])),
        ),
        ("x".to_string(), dense(vec![2], 1)),
    ]);
    let err = output(
        &p,
        Some(&file("spmv", vec![iso()])),
        &inputs,
        Target::Jit,
        1,
    )
    .expect_err("signed zeros differ");
    assert!(
        matches!(
            err,
            DriverError::Conversion {
                source: DecomposeError::NotIso { position: 1, .. },
                ..
            }
        ),
        "{err}"
    );
}

/// The one value is read from the buffer's values each time they are copied: new equal values
/// in place give the new result, unequal ones an error.
#[test]
fn the_one_value_follows_the_values_in_place() {
    let p = kernel("spmv");
    let e = [(0, 1), (1, 0), (1, 2), (3, 3)];
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(coo(4, 4, &e, vec![1.5; 4]))),
        ("x".to_string(), dense(vec![4], 5)),
    ]);
    for trace in [vec![iso()], vec![decompose("(sell 2 1)"), iso()]] {
        let s = file("spmv", trace.clone());
        let (program, exe, conversions) =
            Executable::build_converting(&p, Some(&s), Target::Jit).expect("builds");
        let given = convert_inputs(&conversions, &inputs).expect("converts");
        let mut b = bind_with(&program, &inputs, &BTreeMap::new(), given).expect("binds");
        let y = |b: &mut lacuna::stage1::Bindings| {
            reset_outputs(&program, b);
            exe.run(&program, b).map(|()| {
                unpack(&program, b, "y")
                    .expect("unpacks")
                    .values()
                    .to_f64_vec()
            })
        };
        let before = y(&mut b).expect("runs");
        let Some(ArrayData::F64(a)) = b.buffers.get_mut("A") else {
            panic!("A's values are bound as f64")
        };
        a.iter_mut().for_each(|v| *v = -3.0);
        let after = y(&mut b).expect("runs on new equal values");
        for (x, y0) in after.iter().zip(&before) {
            assert_eq!(*x, y0 / 1.5 * -3.0, "{trace:?}: scaled by the new value");
        }
        let Some(ArrayData::F64(a)) = b.buffers.get_mut("A") else {
            panic!("A's values are bound as f64")
        };
        a[2] = 7.0;
        assert!(
            matches!(
                y(&mut b),
                Err(DriverError::Conversion {
                    source: DecomposeError::NotIso { position: 2, .. },
                    ..
                })
            ),
            "{trace:?}: unequal values in place"
        );
    }
}

/// Layouts that pad rows or store explicit zeros, a second `iso_values`, a decomposition after
/// it, and buffers that are not f64 inputs read by the kernel are refused with the condition.
#[test]
fn padding_layouts_and_misuse_are_schedule_errors() {
    let p = kernel("spmv");
    let refused = |trace: Vec<I>| -> Condition {
        let mut s = Schedule::new(&p).expect("schedules");
        let last = trace.len() - 1;
        for (k, inst) in trace.into_iter().enumerate() {
            let r = s.apply(inst.clone());
            if k < last {
                r.unwrap_or_else(|e| panic!("{inst:?}: {e}"));
            } else {
                let e = r.expect_err("refused");
                assert_eq!(e.primitive, inst.name());
                return e.condition;
            }
        }
        unreachable!()
    };
    for term in [
        "(+ (ell 4) remainder)",
        "(+ (bucket 1 3 (ell 2)) remainder)",
        "(split_rows 2)",
        "(padded 4)",
        "(+ (bsr 2) remainder)",
        "(dia 8 4)",
    ] {
        let c = refused(vec![decompose(term), iso()]);
        assert!(
            matches!(&c, Condition::BadArgument { what } if what.contains("pads rows or stores explicit zeros")),
            "{term}: {c}"
        );
    }
    let c = refused(vec![iso(), iso()]);
    assert!(
        matches!(&c, Condition::BadArgument { what } if what.contains("already")),
        "{c}"
    );
    let c = refused(vec![iso(), decompose("(sell 8 4)")]);
    assert!(
        matches!(&c, Condition::BadArgument { what } if what.contains("decompose it before")),
        "{c}"
    );
    let c = refused(vec![I::IsoValues { buffer: "y".into() }]);
    assert!(
        matches!(&c, Condition::BadArgument { what } if what.contains("f64 input")),
        "{c}"
    );
    let c = refused(vec![I::IsoValues { buffer: "B".into() }]);
    assert!(matches!(&c, Condition::NotFound { .. }), "{c}");
    // A stage-II primitive first: stage I is over.
    let c = refused(vec![
        I::Parallel {
            r#loop: "spmv:i".into(),
        },
        iso(),
    ]);
    assert_eq!(c, Condition::StageOrder);
}

/// SpMV's built-in schedule stores one value when the matrix's values are equal (and the layout
/// takes one), keeps them otherwise; either way it gives the interpreter's result.
#[test]
fn builtin_spmv_stores_one_value_for_equal_values() {
    let p = kernel("spmv");
    // Rows of changing lengths (sliced ELL on AVX-512 Zen hosts, CSR rows elsewhere).
    let (m, n) = (3000, 500);
    let e: Vec<(usize, usize)> = (0..m)
        .flat_map(|i| (0..(i * 7) % 23 + 1).map(move |k| (i, (i * 31 + k * 97) % n)))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let has_iso = |s: &ScheduleFile| s.trace.iter().any(|i| matches!(i, I::IsoValues { .. }));
    for (what, values, iso_expected) in [
        ("equal values", vec![1.0; e.len()], true),
        (
            "different values",
            (0..e.len()).map(|k| 1.0 + (k % 3) as f64).collect(),
            false,
        ),
    ] {
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(coo(m, n, &e, values))),
            ("x".to_string(), dense(vec![n], 3)),
        ]);
        let stats = DataStats::of(&inputs);
        assert_eq!(stats.iso_values, iso_expected, "{what}: statistics");
        let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
        assert_eq!(has_iso(&s), iso_expected, "{what}: {:?}", s.trace);
        assert_schedule_keeps_results(&p, what, &s, &inputs);
    }
    // A stencil of equal values is stored by diagonal (DIA pads): its values stay.
    let (m, n): (usize, usize) = (4000, 4000);
    let e: Vec<(usize, usize)> = (0..m)
        .flat_map(|i| {
            [i.wrapping_sub(1), i, i + 1]
                .into_iter()
                .filter(move |&j| j < n)
                .map(move |j| (i, j))
        })
        .collect();
    let inputs = BTreeMap::from([
        (
            "A".to_string(),
            Input::Coo(coo(m, n, &e, vec![2.0; e.len()])),
        ),
        ("x".to_string(), dense(vec![n], 4)),
    ]);
    let stats = DataStats::of(&inputs);
    assert!(stats.iso_values);
    let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
    let dia = s
        .trace
        .iter()
        .any(|i| matches!(i, I::DecomposeFormat { into, .. } if into.starts_with("(dia")));
    assert!(
        !(dia && has_iso(&s)),
        "a DIA layout keeps its values: {:?}",
        s.trace
    );
    assert_schedule_keeps_results(&p, "stencil", &s, &inputs);
}

/// The one value is read once per statement, before it (a load always in bounds: a constant
/// element of a one-element input), so that the `select` of a sliced ELL slot chooses between
/// values instead of guarding a load (which LLVM would vectorize as a masked gather).
#[test]
fn the_one_value_is_read_before_the_select() {
    let p = kernel("spmv");
    let (_, s) = spmv_schedules()
        .into_iter()
        .find(|(what, _)| *what == "sell 8")
        .expect("the sliced schedule");
    let (_, flat) = common::gpu::scheduled_flat(&p, &s);
    let text = lacuna::stage2::print_func(&flat);
    let stmt = text
        .lines()
        .find(|l| l.contains("y_local[i.p0] = y_local[i.p0] +"))
        .unwrap_or_else(|| panic!("the slot's statement:\n{text}"));
    assert!(
        stmt.contains("select(") && !stmt.contains("A.iso"),
        "{stmt}"
    );
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("let _p") && l.ends_with("= A.iso[0]")),
        "{text}"
    );
}

/// A buffer whose encoding stores explicit zeros besides equal entries (BSR's blocks, dense
/// levels) keeps its values in the built-in schedule; encodings of the entries alone (CSC,
/// COO, DCSR) store one. Both run and give the interpreter's result.
#[test]
fn builtin_spmv_keeps_values_of_encodings_with_zeros() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/formats/spmv.ron");
    let (m, n) = (300, 260);
    let e: Vec<(usize, usize)> = (0..m)
        .flat_map(|i| (0..(i % 13) + 1).map(move |k| (i, (i * 7 + k * 19) % n)))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let inputs = BTreeMap::from([
        (
            "A".to_string(),
            Input::Coo(coo(m, n, &e, vec![0.5; e.len()])),
        ),
        ("x".to_string(), dense(vec![n], 6)),
    ]);
    let stats = DataStats::of(&inputs);
    assert!(stats.iso_values);
    for (format, one) in [
        ("bsr(2,2)", false),
        ("dense", false),
        ("csr", true),
        ("csc", true),
        ("coo", true),
        ("dcsr", true),
    ] {
        let p = lacuna::driver::load_kernel_with_formats(&path, &[("A".into(), format.into())])
            .expect("kernel");
        let s = builtin_schedule(&p, &stats).unwrap_or_else(|| file("spmv", vec![]));
        let has = s.trace.iter().any(|i| matches!(i, I::IsoValues { .. }));
        assert_eq!(has, one, "{format}: {:?}", s.trace);
        let want = output(&p, None, &inputs, Target::InterpStage1, 1).expect("interprets");
        let got = output(&p, Some(&s), &inputs, Target::Jit, 2)
            .unwrap_or_else(|e| panic!("{format}: {e}"));
        assert_close(&got, &want, format);
    }
}
