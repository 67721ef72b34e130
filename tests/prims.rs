//! The compute_at family, block structure, bound and annotation primitives: golden IR before
//! and after, results preserved (the compiled scheduled kernel equals the stage-I interpreter on
//! the unscheduled kernel and a dense reference), random sequences never change results or
//! panic, traces round-trip through RON, illegal uses are rejected naming the primitive.

mod common;

use common::*;
use lacuna::driver::{reset_outputs, Executable, Target};
use lacuna::ir::{ArrayData, CooTensor};
use lacuna::schedule::{Instruction, Schedule, ScheduleFile};
use lacuna::stage1::{bind, print_program, unpack, ClosedForm, Input, Output, Program};
use lacuna::stage2::print_func;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(24),
        ..ProptestConfig::default()
    }
}

fn l(s: &str) -> String {
    s.to_string()
}

/// Runs `p` scheduled by `trace` on the stage-II interpreter and the JIT; returns `output`.
fn run_scheduled(
    p: &Program,
    trace: &[Instruction],
    inputs: &BTreeMap<String, Input>,
    output: &str,
) -> Vec<(&'static str, Output)> {
    let file = ScheduleFile {
        version: 1,
        kernel: p.name.clone(),
        trace: trace.to_vec(),
    };
    let mut out = Vec::new();
    for target in [Target::Interp, Target::Jit] {
        let (scheduled, exe) =
            Executable::build_with(p, Some(&file), target).expect("the schedule applies");
        let mut b = bind(&scheduled, inputs, &BTreeMap::new()).expect("binds");
        reset_outputs(&scheduled, &mut b);
        exe.run(&scheduled, &mut b).expect("runs");
        out.push((
            target.name(),
            unpack(&scheduled, &b, output).expect("unpacks"),
        ));
    }
    out
}

/// The unscheduled kernel on the stage-I interpreter.
fn run_unscheduled(p: &Program, inputs: &BTreeMap<String, Input>, output: &str) -> Output {
    let exe = Executable::build(p, Target::InterpStage1).expect("builds");
    let mut b = bind(p, inputs, &BTreeMap::new()).expect("binds");
    reset_outputs(p, &mut b);
    exe.run(p, &mut b).expect("runs");
    unpack(p, &b, output).expect("unpacks")
}

fn softmax_reference(rows: &[Vec<(usize, f64)>]) -> Vec<(Vec<usize>, f64)> {
    rows.iter()
        .enumerate()
        .flat_map(|(i, r)| {
            let mx = r.iter().fold(-1.0e308f64, |a, &(_, v)| a.max(v));
            let sum: f64 = r.iter().map(|&(_, v)| (v - mx).exp()).sum();
            r.iter()
                .map(move |&(j, v)| (vec![i, j], (v - mx).exp() / sum))
        })
        .collect()
}

fn spmm_reference(m: usize, n: usize, rows: &[Vec<(usize, f64)>], b: &[f64], k: usize) -> Vec<f64> {
    let a = to_dense(m, n, rows);
    (0..m * k)
        .map(|ik| (0..n).map(|j| a[ik / k * n + j] * b[j * k + ik % k]).sum())
        .collect()
}

/// Candidates for random sequences on softmax_rows.
fn softmax_candidates() -> Vec<Instruction> {
    vec![
        Instruction::ReverseComputeAt {
            block: l("row_sum"),
            r#loop: l("i"),
        },
        Instruction::ReverseComputeAt {
            block: l("normalize"),
            r#loop: l("i"),
        },
        Instruction::ReverseComputeAt {
            block: l("normalize"),
            r#loop: l("i2"),
        },
        Instruction::ComputeAt {
            block: l("row_max"),
            r#loop: l("i2"),
        },
        Instruction::ComputeAt {
            block: l("row_sum"),
            r#loop: l("i3"),
        },
        Instruction::ComputeAt {
            block: l("row_max"),
            r#loop: l("i3"),
        },
        // Illegal: the consumer reads mx and sum of the row, not of a row entry.
        Instruction::ComputeAt {
            block: l("row_max"),
            r#loop: l("j3"),
        },
        Instruction::DecomposeReduction {
            block: l("row_sum"),
            r#loop: l("i2"),
        },
        Instruction::DecomposeReduction {
            block: l("row_max"),
            r#loop: l("i"),
        },
        Instruction::Blockize { r#loop: l("j3") },
        Instruction::Blockize { r#loop: l("j2") },
        Instruction::LiftLoop { r#loop: l("j3") },
        Instruction::LiftLoop { r#loop: l("j2") },
        Instruction::Bound {
            r#loop: l("j3"),
            extent: 2,
        },
        Instruction::Bound {
            r#loop: l("j"),
            extent: 3,
        },
        Instruction::Parallel { r#loop: l("i") },
        Instruction::Parallel { r#loop: l("i3") },
        Instruction::Split {
            r#loop: l("i3"),
            factors: vec![None, Some(2)],
        },
        Instruction::SparseAnnotate {
            iter: l("row_max"),
            key: l("preprocess"),
            value: l("false"),
        },
        Instruction::SparseUnannotate {
            iter: l("row_max"),
            key: l("preprocess"),
        },
    ]
}

fn spmm_candidates() -> Vec<Instruction> {
    vec![
        Instruction::DecomposeReduction {
            block: l("spmm"),
            r#loop: l("spmm:i"),
        },
        Instruction::Blockize {
            r#loop: l("spmm:k"),
        },
        Instruction::Blockize {
            r#loop: l("spmm:j"),
        },
        Instruction::LiftLoop {
            r#loop: l("spmm:k"),
        },
        Instruction::LiftLoop {
            r#loop: l("spmm:j"),
        },
        Instruction::Bound {
            r#loop: l("spmm:j"),
            extent: 2,
        },
        Instruction::Bound {
            r#loop: l("spmm:k"),
            extent: 2,
        },
        Instruction::Vectorize { r#loop: l("j.b") },
        Instruction::Unroll { r#loop: l("j.b") },
        Instruction::Parallel {
            r#loop: l("spmm:i"),
        },
        Instruction::Parallel {
            r#loop: l("spmm_init:i"),
        },
        Instruction::Split {
            r#loop: l("spmm:k"),
            factors: vec![None, Some(2)],
        },
        Instruction::Reorder {
            loops: vec![l("spmm:j"), l("spmm:k")],
        },
    ]
}

/// Applies the picked candidates: each applies, or is rejected by an error naming it and
/// leaves the schedule unchanged.
fn apply_picks(p: &Program, candidates: &[Instruction], picks: &[usize]) -> Schedule {
    let mut s = Schedule::new(p).expect("schedulable");
    for &i in picks {
        let inst = candidates[i % candidates.len()].clone();
        let before = s.trace().len();
        let ir_before = print_func(&s.stage2().expect("lowers"));
        match s.apply(inst.clone()) {
            Ok(()) => assert_eq!(s.trace().len(), before + 1),
            Err(e) => {
                assert!(e.to_string().starts_with(inst.name()), "{e}");
                assert_eq!(s.trace().len(), before);
                assert_eq!(print_func(&s.stage2().expect("lowers")), ir_before);
            }
        }
    }
    s
}

fn round_trip(p: &Program, s: &Schedule) {
    let text = s.to_file().to_ron();
    let file = ScheduleFile::from_ron(&text).expect("parses back");
    let again = Schedule::replay(p, &file.trace).expect("replays");
    assert_eq!(
        print_func(&again.stage2().expect("lowers")),
        print_func(&s.stage2().expect("lowers"))
    );
    assert_eq!(print_program(again.program()), print_program(s.program()));
    assert_eq!(again.to_file().to_ron(), text);
}

proptest! {
    #![proptest_config(config())]

    /// Random sequences on softmax_rows never change its result.
    #[test]
    fn random_schedules_preserve_softmax_rows((m, n, rows) in sparse_matrix(), picks in proptest::collection::vec(0usize..64, 0..7)) {
        let p = kernel("softmax_rows");
        let s = apply_picks(&p, &softmax_candidates(), &picks);
        let want = softmax_reference(&rows);
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows)))]);
        assert_sparse("unscheduled stage-I interpreter", &run_unscheduled(&p, &inputs, "B"), &[m, n], &want);
        for (target, out) in run_scheduled(&p, s.trace(), &inputs, "B") {
            assert_sparse(&format!("{target} {:?}", s.trace()), &out, &[m, n], &want);
        }
        round_trip(&p, &s);
    }

    /// Random sequences on SpMM never change its result.
    #[test]
    fn random_schedules_preserve_spmm((m, n, rows) in sparse_matrix(), picks in proptest::collection::vec(0usize..64, 0..6), seed in any::<u64>()) {
        let p = kernel("spmm");
        let k = 3;
        let b = values(n * k, seed);
        let want = spmm_reference(m, n, &rows, &b, k);
        let s = apply_picks(&p, &spmm_candidates(), &picks);
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows))), ("B".to_string(), dense(&[n, k], b))]);
        assert_dense("unscheduled stage-I interpreter", &run_unscheduled(&p, &inputs, "C"), &[m, k], &want);
        for (target, out) in run_scheduled(&p, s.trace(), &inputs, "C") {
            assert_dense(&format!("{target} {:?}", s.trace()), &out, &[m, k], &want);
        }
        round_trip(&p, &s);
    }

    /// Each new primitive alone (and the example schedule) computes the unscheduled result.
    #[test]
    fn each_primitive_preserves_results((m, n, rows) in sparse_matrix(), seed in any::<u64>()) {
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows)))]);
        let want = run_unscheduled(&kernel("softmax_rows"), &inputs, "B");
        let Output::Coo(w) = &want else { panic!("sparse output") };
        let want: Vec<(Vec<usize>, f64)> = (0..w.nnz()).map(|e| (w.coords.iter().map(|c| c[e]).collect(), w.values.to_f64_vec()[e])).collect();
        assert_sparse("reference", &Output::Coo(w.clone()), &[m, n], &softmax_reference(&rows));
        let mut traces: Vec<Vec<Instruction>> = golden_cases().into_iter().filter(|c| c.1 == "softmax_rows").map(|c| c.2).collect();
        traces.push(schedule_file("softmax_rows_fused").trace);
        for trace in traces {
            for (target, out) in run_scheduled(&kernel("softmax_rows"), &trace, &inputs, "B") {
                assert_sparse(&format!("{target} {trace:?}"), &out, &[m, n], &want);
            }
        }
        let k = 2;
        let b = values(n * k, seed);
        let want = spmm_reference(m, n, &rows, &b, k);
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows))), ("B".to_string(), dense(&[n, k], b))]);
        for (_, kernel_name, trace) in golden_cases().into_iter().filter(|c| c.1 != "softmax_rows") {
            let p = kernel(kernel_name);
            let (out, want) = if kernel_name == "spmm" {
                ("C", want.clone())
            } else {
                // spmv: y = A x with x the first column of B.
                let x: Vec<f64> = (0..n).map(|j| match &inputs["B"] { Input::Dense(d) => d.data.to_f64_vec()[j * k], _ => unreachable!() }).collect();
                let a = to_dense(m, n, &rows);
                ("y", (0..m).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect())
            };
            let inputs = if kernel_name == "spmm" { inputs.clone() } else {
                let x: Vec<f64> = (0..n).map(|j| match &inputs["B"] { Input::Dense(d) => d.data.to_f64_vec()[j * k], _ => unreachable!() }).collect();
                BTreeMap::from([("A".to_string(), inputs["A"].clone()), ("x".to_string(), dense(&[n], x))])
            };
            let shape: Vec<usize> = if kernel_name == "spmm" { vec![m, k] } else { vec![m] };
            assert_dense("unscheduled", &run_unscheduled(&p, &inputs, out), &shape, &want);
            for (target, got) in run_scheduled(&p, &trace, &inputs, out) {
                assert_dense(&format!("{target} {trace:?}"), &got, &shape, &want);
            }
        }
    }
}

/// (snapshot name, kernel, trace) of the golden tests.
fn golden_cases() -> Vec<(&'static str, &'static str, Vec<Instruction>)> {
    vec![
        (
            "reverse_compute_at",
            "softmax_rows",
            vec![Instruction::ReverseComputeAt {
                block: l("row_sum"),
                r#loop: l("i"),
            }],
        ),
        (
            "compute_at",
            "softmax_rows",
            vec![Instruction::ComputeAt {
                block: l("row_sum"),
                r#loop: l("i3"),
            }],
        ),
        (
            "decompose_reduction",
            "spmm",
            vec![Instruction::DecomposeReduction {
                block: l("spmm"),
                r#loop: l("spmm:i"),
            }],
        ),
        (
            "blockize",
            "spmm",
            vec![Instruction::Blockize {
                r#loop: l("spmm:j"),
            }],
        ),
        (
            "lift_loop",
            "spmm",
            vec![
                Instruction::Blockize {
                    r#loop: l("spmm:j"),
                },
                Instruction::LiftLoop {
                    r#loop: l("spmm:j"),
                },
            ],
        ),
        (
            "bound",
            "spmv",
            vec![
                Instruction::Bound {
                    r#loop: l("j"),
                    extent: 4,
                },
                Instruction::Vectorize { r#loop: l("j.b") },
            ],
        ),
    ]
}

#[test]
fn golden_before_and_after() {
    for (name, kernel_name, trace) in golden_cases() {
        let p = kernel(kernel_name);
        let before = print_func(
            &Schedule::new(&p)
                .expect("schedulable")
                .stage2()
                .expect("lowers"),
        );
        let s = Schedule::replay(&p, &trace).unwrap_or_else(|e| panic!("{name}: {e}"));
        let after = print_func(&s.stage2().expect("lowers"));
        assert_ne!(before, after, "{name} changes the IR");
        insta::assert_snapshot!(
            format!("prim_{name}"),
            format!("// before\n{before}\n// after\n{after}")
        );
    }
}

#[test]
fn fused_softmax_is_one_row_loop() {
    let p = kernel("softmax_rows");
    let s = Schedule::replay(&p, &schedule_file("softmax_rows_fused").trace).expect("applies");
    let f = s.stage2().expect("lowers");
    assert_eq!(f.body.len(), 1, "one loop nest:\n{}", print_func(&f));
    assert_eq!(
        s.get_loops("normalize").expect("a block"),
        ["i", "j3"],
        "normalize runs in the row loop of row_max"
    );
}

#[test]
fn annotations_are_printed_and_removed() {
    let p = kernel("softmax_rows");
    let mut s = Schedule::new(&p).expect("schedulable");
    s.apply(Instruction::SparseAnnotate {
        iter: l("row_sum"),
        key: l("preprocess"),
        value: l("true"),
    })
    .expect("annotates");
    let text = print_program(s.program());
    assert!(
        text.contains(
            "sp_iter row_sum [I, J] \"SR\" (i2, j2) {\n    sp_iter_attr {\"preprocess\": \"true\"}"
        ),
        "{text}"
    );
    insta::assert_snapshot!("prim_annotate", text);
    s.apply(Instruction::SparseUnannotate {
        iter: l("row_sum"),
        key: l("preprocess"),
    })
    .expect("unannotates");
    assert!(!print_program(s.program()).contains("sp_iter_attr"));
    let e = s
        .apply(Instruction::SparseUnannotate {
            iter: l("row_sum"),
            key: l("preprocess"),
        })
        .expect_err("not set any more");
    assert!(
        e.to_string().contains("no annotation named `preprocess`"),
        "{e}"
    );
    round_trip(&p, &s);
}

fn rejects(kernel_name: &str, trace: &[Instruction], needle: &str) {
    let p = kernel(kernel_name);
    let (last, before) = trace.split_last().expect("a primitive");
    let mut s = Schedule::replay(&p, before).expect("the prefix applies");
    let ir = print_func(&s.stage2().expect("lowers"));
    let e = s.apply(last.clone()).expect_err("must be rejected");
    let msg = e.to_string();
    assert!(
        msg.starts_with(last.name()) && msg.contains(needle),
        "{msg}"
    );
    assert_eq!(s.trace().len(), before.len());
    assert_eq!(print_func(&s.stage2().expect("lowers")), ir);
}

#[test]
fn illegal_compute_at() {
    // Wrong direction.
    rejects(
        "softmax_rows",
        &[Instruction::ComputeAt {
            block: l("normalize"),
            r#loop: l("i"),
        }],
        "use reverse_compute_at",
    );
    rejects(
        "softmax_rows",
        &[Instruction::ReverseComputeAt {
            block: l("row_max"),
            r#loop: l("i3"),
        }],
        "use compute_at",
    );
    // Under an entry loop, the row maximum would be recomputed per entry and read incomplete.
    rejects(
        "softmax_rows",
        &[Instruction::ComputeAt {
            block: l("row_max"),
            r#loop: l("j3"),
        }],
        "perfectly nested loops",
    );
    // The loop encloses the block.
    rejects(
        "spmm",
        &[Instruction::ComputeAt {
            block: l("spmm"),
            r#loop: l("spmm:k"),
        }],
        "in one loop nest",
    );
    // Sibling nests under one row loop whose loops differ.
    rejects(
        "spmm",
        &[Instruction::ComputeAt {
            block: l("spmm_init"),
            r#loop: l("j"),
        }],
        "iterate different ranges",
    );
    // Unknown names.
    rejects(
        "softmax_rows",
        &[Instruction::ComputeAt {
            block: l("nope"),
            r#loop: l("i3"),
        }],
        "no block named `nope`",
    );
    rejects(
        "softmax_rows",
        &[Instruction::ReverseComputeAt {
            block: l("row_sum"),
            r#loop: l("q"),
        }],
        "no loop named `q`",
    );
    // Ranges that differ: a split row loop does not match the producer's row loop.
    rejects(
        "softmax_rows",
        &[
            Instruction::Split {
                r#loop: l("i3"),
                factors: vec![None, Some(2)],
            },
            Instruction::ComputeAt {
                block: l("row_sum"),
                r#loop: l("i3.0"),
            },
        ],
        "iterate different ranges",
    );
}

#[test]
fn compute_at_needs_slices() {
    // square_sum-like dependence: a consumer that reads the whole produced buffer (a reduction
    // over rows) cannot run per row.
    let text = r#"(
        version: 1, name: "rowsum_total", params: ["m", "n", "nnz"],
        axes: [(name: "I", kind: DenseFixed(n: "m")), (name: "J", kind: SparseVariable(parent: "I", n: "n", nnz: "nnz"))],
        buffers: [
            (name: "A", axes: ["I", "J"], dtype: F64),
            (name: "r", axes: ["I"], dtype: F64, role: Alloc),
            (name: "y", axes: ["I"], dtype: F64, role: Output),
        ],
        body: [
            Iter((name: "rows", axes: ["I", "J"], kinds: "SR", vars: ["i", "j"],
                init: [Store("r[i] = 0.0")], body: [Store("r[i] = r[i] + A[i, j]")])),
            Iter((name: "shift", axes: ["I"], kinds: "S", vars: ["i2"],
                body: [Store("y[i2] = r[0] + r[i2]")])),
        ],
    )"#;
    let p = lacuna::driver::parse_kernel_with_formats(
        text,
        std::path::Path::new("rowsum_total.ron"),
        &[],
    )
    .expect("parses");
    let mut s = Schedule::new(&p).expect("schedulable");
    let e = s
        .apply(Instruction::ComputeAt {
            block: l("rows"),
            r#loop: l("i2"),
        })
        .expect_err("reads row 0 in every row");
    assert!(
        e.to_string().starts_with("compute_at") && e.to_string().contains("region of `r`"),
        "{e}"
    );
    let e = s
        .apply(Instruction::ReverseComputeAt {
            block: l("shift"),
            r#loop: l("i"),
        })
        .expect_err("reads row 0 in every row");
    assert!(
        e.to_string().starts_with("reverse_compute_at") && e.to_string().contains("region of `r`"),
        "{e}"
    );
    assert!(s.trace().is_empty());
}

#[test]
fn illegal_decompose_reduction_blockize_lift_loop_bound() {
    rejects(
        "softmax_rows",
        &[Instruction::DecomposeReduction {
            block: l("normalize"),
            r#loop: l("i3"),
        }],
        "has no init block",
    );
    rejects(
        "spmm",
        &[Instruction::DecomposeReduction {
            block: l("spmm"),
            r#loop: l("j"),
        }],
        "does not enclose",
    );
    rejects(
        "spmm",
        &[
            Instruction::Blockize {
                r#loop: l("spmm:k"),
            },
            Instruction::Blockize {
                r#loop: l("spmm_init:k"),
            },
        ],
        "exists already",
    );
    rejects(
        "spmm",
        &[Instruction::LiftLoop {
            r#loop: l("spmm:k"),
        }],
        "not the only statement of a block",
    );
    rejects(
        "spmv",
        &[Instruction::Bound {
            r#loop: l("j"),
            extent: 0,
        }],
        "a bound of 0",
    );
    rejects(
        "softmax_rows",
        &[Instruction::SparseAnnotate {
            iter: l("nope"),
            key: l("preprocess"),
            value: l("true"),
        }],
        "no iteration named `nope`",
    );
    rejects(
        "softmax_rows",
        &[Instruction::SparseAnnotate {
            iter: l("row_sum"),
            key: l(""),
            value: l("true"),
        }],
        "empty annotation key",
    );
}

#[test]
fn bound_keeps_long_rows() {
    // A row longer than the bound still computes every entry (the remainder loop).
    let p = kernel("spmv");
    let trace = [
        Instruction::Bound {
            r#loop: l("j"),
            extent: 2,
        },
        Instruction::Unroll { r#loop: l("j.b") },
    ];
    let rows = vec![
        vec![(0, 1.0), (1, 2.0), (2, 3.0), (4, 4.0), (5, 5.0)],
        vec![],
        vec![(3, -1.0)],
    ];
    let (m, n) = (3, 6);
    let x = values(n, 4);
    let a = to_dense(m, n, &rows);
    let want: Vec<f64> = (0..m)
        .map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum())
        .collect();
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(to_coo(m, n, &rows))),
        ("x".to_string(), dense(&[n], x)),
    ]);
    for (target, out) in run_scheduled(&p, &trace, &inputs, "y") {
        assert_dense(target, &out, &[m], &want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: config().cases / 2 + 1, ..config() })]

    /// Hybrid SpMM with its per-part loop nests fused horizontally computes the reference on
    /// every target.
    #[test]
    fn horizontal_fusion_of_hyb_parts((m, n, rows) in sparse_matrix(), seed in any::<u64>()) {
        let p = kernel("spmm");
        let k = 2;
        let b = values(n * k, seed);
        let want = spmm_reference(m, n, &rows, &b, k);
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows))), ("B".to_string(), dense(&[n, k], b))]);
        let file = schedule_file("spmm_hyb_hfused");
        for target in [Target::InterpStage1, Target::Interp, Target::Jit] {
            let (scheduled, exe, conversions) = Executable::build_converting(&p, Some(&file), target).expect("builds");
            let given = lacuna::driver::convert_inputs(&conversions, &inputs).expect("converts");
            let mut bnd = lacuna::stage1::bind_with(&scheduled, &inputs, &BTreeMap::new(), given).expect("binds");
            reset_outputs(&scheduled, &mut bnd);
            exe.run(&scheduled, &mut bnd).expect("runs");
            assert_dense(target.name(), &unpack(&scheduled, &bnd, "C").expect("unpacks"), &[m, k], &want);
        }
    }
}

#[test]
fn horizontal_fusion_golden_and_errors() {
    let p = kernel("spmm");
    let trace = schedule_file("spmm_hyb_hfused").trace;
    let s = Schedule::replay(&p, &trace).expect("applies");
    let f = s.stage2().expect("lowers");
    let text = print_func(&f);
    // One loop nest for the init, one for all parts.
    assert_eq!(f.body.len(), 2, "{text}");
    insta::assert_snapshot!("prim_horizontal_fuse", text);
    round_trip(&p, &s);
    let decompose = trace[0].clone();
    rejects(
        "spmm",
        &[
            decompose.clone(),
            Instruction::HorizontalFuse {
                loops: vec![l("i.p0"), l("i.p2")],
            },
        ],
        "not consecutive",
    );
    rejects(
        "spmm",
        &[
            decompose.clone(),
            Instruction::HorizontalFuse {
                loops: vec![l("i.p0")],
            },
        ],
        "at least two loops",
    );
    rejects(
        "spmm",
        &[
            decompose,
            Instruction::HorizontalFuse {
                loops: vec![l("spmm_init:i"), l("j.p0")],
            },
        ],
        "not consecutive",
    );
}

#[test]
fn get_block_and_get_sparse_iteration() {
    let p = kernel("sparse_softmax");
    let s = Schedule::new(&p).expect("schedulable");
    assert_eq!(s.get_block("row_sum").expect("a block"), "row_sum");
    assert_eq!(
        s.get_sparse_iteration("normalize")
            .expect("a nested iteration"),
        "normalize"
    );
    let e = s.get_block("nope").expect_err("no such block");
    assert!(
        e.to_string().starts_with("get_block") && e.to_string().contains("no block named `nope`"),
        "{e}"
    );
    let e = s
        .get_sparse_iteration("row_sum_init")
        .expect_err("a block, not an iteration");
    assert!(e.to_string().starts_with("get_sparse_iteration"), "{e}");
}

/// Runs `p` unscheduled on every target and scheduled by `schedule` on the stage-II
/// interpreter and the JIT; checks the dense output `out` against `want` on all of them.
fn check_kernel(
    p: &Program,
    schedule: &str,
    inputs: &BTreeMap<String, Input>,
    out: &str,
    shape: &[usize],
    want: &[f64],
) {
    for (target, outs) in run_all(p, inputs) {
        assert_dense(target, &outs[out], shape, want);
    }
    for (target, got) in run_scheduled(p, &schedule_file(schedule).trace, inputs, out) {
        assert_dense(&format!("{schedule} {target}"), &got, shape, want);
    }
}

proptest! {
    #![proptest_config(config())]

    /// RGCN on a relation-CSF adjacency (3-D sparse: relation × destination × source).
    #[test]
    fn rgcn_hetero((m, n, rows) in sparse_matrix(), seed in any::<u64>()) {
        let p = kernel("rgcn_hetero");
        let nodes = m.max(n).max(1);
        let (rel, fi_n, fo_n) = (3usize, 2usize, 5usize);
        // Each edge (i, j) gets relation (i + 2 j) mod rel; sorted by (r, i, j).
        let mut edges: Vec<(usize, usize, usize, f64)> = rows.iter().enumerate()
            .flat_map(|(i, r)| r.iter().map(move |&(j, v)| ((i + 2 * j) % 3, i, j, v)))
            .collect();
        edges.sort_by_key(|e| (e.0, e.1, e.2));
        let w = values(rel * fo_n * fi_n, seed);
        let x = values(nodes * fi_n, seed ^ 7);
        let mut want = vec![0.0; nodes * fo_n];
        for &(r, i, j, a) in &edges {
            for fo in 0..fo_n {
                want[i * fo_n + fo] += (0..fi_n).map(|fi| a * w[(r * fo_n + fo) * fi_n + fi] * x[j * fi_n + fi]).sum::<f64>();
            }
        }
        let a = CooTensor {
            shape: vec![rel, nodes, nodes],
            coords: vec![edges.iter().map(|e| e.0).collect(), edges.iter().map(|e| e.1).collect(), edges.iter().map(|e| e.2).collect()],
            values: ArrayData::F64(edges.iter().map(|e| e.3).collect()),
        };
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(a)),
            ("W".to_string(), dense(&[rel, fo_n, fi_n], w)),
            ("X".to_string(), dense(&[nodes, fi_n], x)),
        ]);
        check_kernel(&p, "rgcn_hetero_split", &inputs, "Y", &[nodes, fo_n], &want);
    }

    /// Hypergraph convolution: vertex -> hyperedge -> vertex through two incidence matrices.
    #[test]
    fn hypergnn((nv, ne, rows) in sparse_matrix(), seed in any::<u64>()) {
        let p = kernel("hypergnn");
        let feat = 3;
        // H: vertex × hyperedge; HT: its transpose (hyperedge × vertex).
        let mut cols: Vec<Vec<(usize, f64)>> = vec![Vec::new(); ne];
        for (v, r) in rows.iter().enumerate() {
            for &(e, h) in r {
                cols[e].push((v, h));
            }
        }
        let x = values(nv * feat, seed);
        let h = to_dense(nv, ne, &rows);
        let z: Vec<f64> = (0..ne * feat).map(|ef| (0..nv).map(|u| h[u * ne + ef / feat] * x[u * feat + ef % feat]).sum()).collect();
        let want: Vec<f64> = (0..nv * feat).map(|vf| (0..ne).map(|e| h[vf / feat * ne + e] * z[e * feat + vf % feat]).sum()).collect();
        let inputs = BTreeMap::from([
            ("H".to_string(), Input::Coo(to_coo(nv, ne, &rows))),
            ("HT".to_string(), Input::Coo(to_coo(ne, nv, &cols))),
            ("X".to_string(), dense(&[nv, feat], x)),
        ]);
        check_kernel(&p, "hypergnn_parallel", &inputs, "Y", &[nv, feat], &want);
    }
}

proptest! {
    #![proptest_config(config())]

    /// specialize_buffer on band matrices (row i stores columns i..i+w): the structure arrays
    /// are computed, the result is the reference; a matrix off the band is rejected at bind time.
    #[test]
    fn specialize_buffer_on_band_matrices(m in 0usize..8, w in 1usize..4, extra in 0usize..3, seed in any::<u64>(), off in any::<proptest::sample::Index>()) {
        let p = kernel("spmv");
        let n = m + w + extra;
        let vals = values(m * w + 1, seed);
        let rows: Vec<Vec<(usize, f64)>> = (0..m).map(|i| (0..w).map(|d| (i + d, vals[i * w + d])).collect()).collect();
        let x = values(n, seed ^ 3);
        let a = to_dense(m, n, &rows);
        let want: Vec<f64> = (0..m).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect();
        let trace = vec![
            Instruction::SpecializeBuffer { axis: l("J"), form: ClosedForm::Indptr { stride: w as i64 } },
            Instruction::SpecializeBuffer { axis: l("J"), form: ClosedForm::Indices { row: 1, in_row: 1, constant: 0 } },
            Instruction::Unroll { r#loop: l("j") },
        ];
        let s = Schedule::replay(&p, &trace).expect("applies");
        let text = print_func(&s.stage2().expect("lowers"));
        prop_assert!(!text.contains("J.indptr[") && !text.contains("J.indices["), "{}", text);
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows))), ("x".to_string(), dense(&[n], x.clone()))]);
        for (target, out) in run_scheduled(&p, &trace, &inputs, "y") {
            assert_dense(target, &out, &[m], &want);
        }
        round_trip(&p, &s);
        // Move one stored entry of a row off the band (to the last column, when free).
        if m > 0 && w > 1 && extra > 0 {
            let i = off.index(m);
            let mut bad = rows.clone();
            bad[i][w - 1].0 = n - 1;
            let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &bad))), ("x".to_string(), dense(&[n], x))]);
            let e = bind(s.program(), &inputs, &BTreeMap::new()).expect_err("off the band");
            let pos = i * w + w - 1;
            prop_assert!(e.to_string().contains(&format!("`J.indices[{pos}]` is {}, but specialize_buffer asserts {}", n - 1, i + w - 1)), "{}", e);
        }
        // Rows of other lengths break the indptr form.
        if m > 1 {
            let mut bad = rows.clone();
            bad[0].pop();
            let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &bad))), ("x".to_string(), dense(&[n], values(n, 1)))]);
            let e = bind(s.program(), &inputs, &BTreeMap::new()).expect_err("a shorter row");
            prop_assert!(e.to_string().contains("`J.indptr[1]`"), "{}", e);
        }
    }
}

#[test]
fn specialize_buffer_golden_and_errors() {
    let p = kernel("spmv");
    let s = Schedule::replay(&p, &schedule_file("spmv_band").trace).expect("applies");
    insta::assert_snapshot!(
        "prim_specialize_buffer",
        print_func(&s.stage2().expect("lowers"))
    );
    rejects(
        "spmv",
        &[Instruction::SpecializeBuffer {
            axis: l("Q"),
            form: ClosedForm::Indptr { stride: 2 },
        }],
        "no axis named `Q`",
    );
    rejects(
        "spmv",
        &[Instruction::SpecializeBuffer {
            axis: l("I"),
            form: ClosedForm::Indptr { stride: 2 },
        }],
        "axis `I` has no `indptr`",
    );
    rejects(
        "spmv",
        &[Instruction::SpecializeBuffer {
            axis: l("J"),
            form: ClosedForm::Indptr { stride: -1 },
        }],
        "has no `indptr`",
    );
    rejects(
        "spmv",
        &[
            Instruction::SpecializeBuffer {
                axis: l("J"),
                form: ClosedForm::Indptr { stride: 2 },
            },
            Instruction::SpecializeBuffer {
                axis: l("J"),
                form: ClosedForm::Indptr { stride: 3 },
            },
        ],
        "specialized already",
    );
}

proptest! {
    #![proptest_config(config())]

    /// csr2bsr written as a kernel fills the values of `lacuna convert`'s BSR(2, 2).
    #[test]
    fn csr2bsr_matches_convert((m, n, rows) in sparse_matrix()) {
        use lacuna::ir::encoding::preset;
        use lacuna::ir::storage::SparseTensor;
        let p = kernel("csr2bsr");
        // Even extents, so that 2×2 blocks tile the matrix.
        let (m2, n2) = (m + m % 2, n + n % 2);
        let mut rows = rows;
        rows.resize(m2, Vec::new());
        let coo = to_coo(m2, n2, &rows);
        let bsr = SparseTensor::from_coo(&coo, &preset("bsr(2,2)").expect("a preset")).expect("converts");
        let (index, want) = bsr.disassemble();
        // The block pattern: one entry per stored block.
        let (mb, nb) = (m2 / 2, n2 / 2);
        let mut blocks: Vec<Vec<(usize, f64)>> = vec![Vec::new(); mb];
        for (i, r) in rows.iter().enumerate() {
            for &(j, _) in r {
                if !blocks[i / 2].iter().any(|b| b.0 == j / 2) {
                    blocks[i / 2].push((j / 2, 1.0));
                }
            }
        }
        blocks.iter_mut().for_each(|b| b.sort_by_key(|x| x.0));
        let pos: Vec<u64> = std::iter::once(0).chain(blocks.iter().scan(0u64, |s, b| { *s += b.len() as u64; Some(*s) })).collect();
        let crd: Vec<u64> = blocks.iter().flatten().map(|b| b.0 as u64).collect();
        prop_assert_eq!((0..index[0].len()).map(|k| index[0].get(k).expect("in range")).collect::<Vec<u64>>(), pos);
        prop_assert_eq!((0..index[1].len()).map(|k| index[1].get(k).expect("in range")).collect::<Vec<u64>>(), crd);
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(coo)),
            ("P".to_string(), Input::Coo(to_coo(mb, nb, &blocks))),
        ]);
        let want = want.to_f64_vec();
        let file = schedule_file("csr2bsr_parallel");
        for (target, schedule) in [(Target::InterpStage1, None), (Target::Interp, None), (Target::Jit, None), (Target::Interp, Some(&file)), (Target::Jit, Some(&file))] {
            let (scheduled, exe) = Executable::build_with(&p, schedule, target).expect("builds");
            let mut b = bind(&scheduled, &inputs, &BTreeMap::new()).expect("binds");
            reset_outputs(&scheduled, &mut b);
            exe.run(&scheduled, &mut b).expect("runs");
            let got = b.buffers["B"].to_f64_vec();
            prop_assert_eq!(&got, &want, "{} scheduled: {}", target.name(), schedule.is_some());
        }
    }
}
