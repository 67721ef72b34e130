//! Schedules: every primitive preserves results (compiled scheduled kernel = stage-I interpreter
//! on the unscheduled kernel = dense reference), traces round-trip through RON, illegal
//! primitives are rejected with errors naming them, never panics.

mod common;

use common::*;
use lacuna::driver::{reset_outputs, Executable, Target};
use lacuna::ir::{ArrayData, CooTensor};
use lacuna::schedule::{Instruction, Schedule, ScheduleFile};
use lacuna::stage1::{bind, unpack, Input, Program};
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

/// Runs `p` scheduled by `trace` on the JIT and the stage-II interpreter; returns the outputs.
fn run_scheduled(
    p: &Program,
    trace: &[Instruction],
    inputs: &BTreeMap<String, Input>,
) -> Vec<(&'static str, lacuna::stage1::Output)> {
    let file = ScheduleFile {
        version: 1,
        kernel: p.name.clone(),
        trace: trace.to_vec(),
    };
    let mut out = Vec::new();
    // The bounds-checking interpreter first, so that a wrong schedule fails with a message.
    for target in [Target::Interp, Target::Jit] {
        let (scheduled, exe) =
            Executable::build_with(p, Some(&file), target).expect("the schedule applies");
        let mut b = bind(&scheduled, inputs, &BTreeMap::new()).expect("binds");
        reset_outputs(&scheduled, &mut b);
        exe.run(&scheduled, &mut b).expect("runs");
        let o = scheduled
            .buffers
            .iter()
            .find(|x| x.role == lacuna::stage1::Role::Output)
            .expect("an output");
        out.push((
            target.name(),
            unpack(&scheduled, &b, &o.name).expect("unpacks"),
        ));
    }
    out
}

fn spmm_candidates() -> Vec<Instruction> {
    let l = |s: &str| s.to_string();
    vec![
        Instruction::Split {
            r#loop: l("spmm:k"),
            factors: vec![None, Some(2)],
        },
        Instruction::Split {
            r#loop: l("spmm:k"),
            factors: vec![Some(3), None],
        },
        Instruction::Split {
            r#loop: l("spmm_init:k"),
            factors: vec![None, Some(4)],
        },
        Instruction::Split {
            r#loop: l("spmm:j"),
            factors: vec![None, Some(3)],
        },
        Instruction::Split {
            r#loop: l("spmm:i"),
            factors: vec![None, Some(2), Some(2)],
        },
        Instruction::Reorder {
            loops: vec![l("spmm:k"), l("spmm:j")],
        },
        Instruction::Reorder {
            loops: vec![l("spmm:j"), l("spmm:k")],
        },
        Instruction::Fuse {
            outer: l("spmm:j"),
            inner: l("spmm:k"),
        },
        Instruction::Fuse {
            outer: l("k.0"),
            inner: l("k.1"),
        },
        Instruction::Parallel {
            r#loop: l("spmm:i"),
        },
        Instruction::Parallel {
            r#loop: l("spmm:j"),
        },
        Instruction::Vectorize {
            r#loop: l("spmm:k"),
        },
        Instruction::Vectorize { r#loop: l("k.1") },
        Instruction::Unroll { r#loop: l("k.1") },
        Instruction::Unroll {
            r#loop: l("spmm:k"),
        },
        Instruction::SparseReorder {
            iter: l("spmm"),
            axes: vec![l("I"), l("K"), l("J")],
        },
        Instruction::SparseReorder {
            iter: l("spmm"),
            axes: vec![l("J"), l("I"), l("K")],
        },
        Instruction::Specialize {
            param: l("feat"),
            value: 3,
        },
        Instruction::SparseFuse {
            iter: l("spmm"),
            axes: vec![l("I"), l("J")],
        },
        Instruction::DecomposeReduction {
            block: l("spmm"),
            r#loop: l("spmm:i"),
        },
        Instruction::Blockize {
            r#loop: l("spmm:j"),
        },
        Instruction::Bound {
            r#loop: l("spmm:j"),
            extent: 2,
        },
        // Cache primitives: apply after a constant split of k (candidate 0).
        Instruction::ReverseCacheRead {
            block: l("spmm"),
            buffer: l("B"),
            scope: l("local"),
            at: Some(l("k.0")),
        },
        Instruction::CacheWrite {
            block: l("spmm"),
            buffer: l("C"),
            scope: l("local"),
            at: Some(l("k.0")),
        },
    ]
}

proptest! {
    #![proptest_config(config())]

    /// Random sequences of primitives on SpMM: each either applies or is rejected with an
    /// error (never a panic), and the scheduled kernel computes the unscheduled result.
    #[test]
    fn random_schedules_preserve_spmm((m, n, rows) in sparse_matrix(), picks in proptest::collection::vec(0usize..24, 0..6), seed in any::<u64>()) {
        let p = kernel("spmm");
        let k = 3;
        let b = values(n * k, seed);
        let a = to_dense(m, n, &rows);
        let want: Vec<f64> = (0..m * k).map(|ik| (0..n).map(|j| a[ik / k * n + j] * b[j * k + ik % k]).sum()).collect();
        let candidates = spmm_candidates();
        let mut s = Schedule::new(&p).expect("schedulable");
        for &i in &picks {
            let before = s.trace().len();
            let stage2_before = s.stage2().map(|f| print_func(&f)).expect("lowers");
            match s.apply(candidates[i].clone()) {
                Ok(()) => prop_assert_eq!(s.trace().len(), before + 1),
                Err(e) => {
                    // Rejected: the error names the primitive, and nothing changed.
                    prop_assert!(e.to_string().starts_with(candidates[i].name()), "{}", e);
                    prop_assert_eq!(s.trace().len(), before);
                    prop_assert_eq!(print_func(&s.stage2().expect("lowers")), stage2_before);
                }
            }
        }
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows))), ("B".to_string(), dense(&[n, k], b))]);
        for (target, out) in run_scheduled(&p, s.trace(), &inputs) {
            assert_dense(&format!("{target} {:?}", s.trace()), &out, &[m, k], &want);
        }
        // The trace round-trips: RON out, replay, same IR and same trace.
        let text = s.to_file().to_ron();
        let file = ScheduleFile::from_ron(&text).expect("parses back");
        let again = Schedule::replay(&p, &file.trace).expect("replays");
        prop_assert_eq!(print_func(&again.stage2().expect("lowers")), print_func(&s.stage2().expect("lowers")));
        prop_assert_eq!(again.to_file().to_ron(), text);
    }

    /// SDDMM with a split, unrolled and parallel schedule equals the reference.
    #[test]
    fn scheduled_sddmm((m, n, rows) in sparse_matrix(), seed in any::<u64>()) {
        let p = kernel("sddmm");
        let k = 3;
        let x = values(m * k, seed);
        let w = values(n * k, seed ^ 5);
        let inputs = BTreeMap::from([
            ("S".to_string(), Input::Coo(to_coo(m, n, &rows))),
            ("X".to_string(), dense(&[m, k], x.clone())),
            ("W".to_string(), dense(&[n, k], w.clone())),
        ]);
        let want: Vec<(Vec<usize>, f64)> = rows.iter().enumerate().flat_map(|(i, r)| {
            let (x, w) = (&x, &w);
            r.iter().map(move |&(j, s)| (vec![i, j], (0..k).map(|kk| s * x[i * k + kk] * w[j * k + kk]).sum()))
        }).collect();
        for name in ["sddmm_reorder", "sddmm_fused", "sddmm_cache"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/schedules/{name}.ron"));
            let file = ScheduleFile::from_ron(&std::fs::read_to_string(path).expect("schedule file")).expect("parses");
            for (target, out) in run_scheduled(&p, &file.trace, &inputs) {
                assert_sparse(&format!("{name} {target}"), &out, &[m, n], &want);
            }
        }
    }
}

fn rejects(kernel_name: &str, inst: Instruction, needle: &str) {
    let p = kernel(kernel_name);
    let mut s = Schedule::new(&p).expect("schedulable");
    let e = s.apply(inst.clone()).expect_err("must be rejected");
    let msg = e.to_string();
    assert!(
        msg.starts_with(inst.name()) && msg.contains(needle),
        "{msg}"
    );
    assert!(s.trace().is_empty());
}

#[test]
fn reorder_violating_a_dependency() {
    // J's bounds read I's position: J cannot move outside I.
    rejects(
        "spmv",
        Instruction::Reorder {
            loops: vec!["j".into(), "i".into()],
        },
        "not perfectly nested",
    );
    rejects(
        "square_sum",
        Instruction::Reorder {
            loops: vec!["k".into(), "j".into()],
        },
        "depend on loop",
    );
    rejects(
        "spmm",
        Instruction::SparseReorder {
            iter: "spmm".into(),
            axes: vec!["J".into(), "I".into(), "K".into()],
        },
        "before its parent",
    );
}

#[test]
fn sparse_reorder_with_wrong_length_or_missing_axis() {
    rejects(
        "spmm",
        Instruction::SparseReorder {
            iter: "spmm".into(),
            axes: vec!["I".into(), "J".into()],
        },
        "not a permutation",
    );
    rejects(
        "spmm",
        Instruction::SparseReorder {
            iter: "spmm".into(),
            axes: vec!["I".into(), "J".into(), "Q".into()],
        },
        "not a permutation",
    );
    rejects(
        "spmm",
        Instruction::SparseReorder {
            iter: "nope".into(),
            axes: vec![],
        },
        "no iteration named `nope`",
    );
}

#[test]
fn fusing_non_consecutive_loops() {
    rejects(
        "spmm",
        Instruction::Fuse {
            outer: "spmm:i".into(),
            inner: "spmm:k".into(),
        },
        "not perfectly nested",
    );
    rejects(
        "spmm",
        Instruction::Fuse {
            outer: "spmm:i".into(),
            inner: "spmm:j".into(),
        },
        "not perfectly nested",
    );
}

#[test]
fn vectorizing_a_loop_with_a_carried_dependence() {
    // A max is not a sum: its lanes may not be reassociated by this rule.
    rejects(
        "sparse_softmax",
        Instruction::Vectorize { r#loop: "j".into() },
        "carries a dependence through `mx`",
    );
    // A sum reduction may be vectorized (its lanes reassociate).
    let mut s = Schedule::new(&kernel("spmv")).expect("schedulable");
    s.apply(Instruction::Vectorize { r#loop: "j".into() })
        .expect("a sum reduction vectorizes");
    rejects(
        "spmm",
        Instruction::Parallel {
            r#loop: "spmm:j".into(),
        },
        "carries a dependence through `C`",
    );
    rejects(
        "spmm",
        Instruction::Vectorize {
            r#loop: "spmm:i".into(),
        },
        "not innermost",
    );
}

#[test]
fn ambiguous_and_unknown_loops_and_bad_factors() {
    rejects(
        "spmm",
        Instruction::Unroll { r#loop: "k".into() },
        "2 loops are named `k`",
    );
    rejects(
        "spmm",
        Instruction::Unroll { r#loop: "q".into() },
        "no loop named `q`",
    );
    rejects(
        "spmm",
        Instruction::Split {
            r#loop: "spmm:k".into(),
            factors: vec![None, None],
        },
        "at most one factor",
    );
    rejects(
        "spmm",
        Instruction::Split {
            r#loop: "spmm:k".into(),
            factors: vec![Some(0), None],
        },
        "a factor of 0",
    );
    rejects(
        "spmm",
        Instruction::Specialize {
            param: "nope".into(),
            value: 1,
        },
        "no parameter named `nope`",
    );
}

#[test]
fn stage1_primitives_after_stage2_ones_are_rejected() {
    let p = kernel("spmm");
    let mut s = Schedule::new(&p).expect("schedulable");
    s.apply(Instruction::Unroll {
        r#loop: "spmm:k".into(),
    })
    .expect("applies");
    let e = s
        .apply(Instruction::Specialize {
            param: "feat".into(),
            value: 4,
        })
        .expect_err("stage order");
    assert!(
        e.to_string()
            .contains("stage-I primitives must come before"),
        "{e}"
    );
}

#[test]
fn specialize_checks_the_inputs() {
    let p = kernel("spmm");
    let s = Schedule::replay(
        &p,
        &[Instruction::Specialize {
            param: "feat".into(),
            value: 4,
        }],
    )
    .expect("applies");
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(to_coo(1, 1, &[vec![(0, 1.0)]]))),
        ("B".to_string(), dense(&[1, 3], vec![1.0, 2.0, 3.0])),
    ]);
    let e = bind(s.program(), &inputs, &BTreeMap::new()).expect_err("feat is 4, B has 3 columns");
    assert!(e.to_string().contains("shape mismatch"), "{e}");
}

#[test]
fn golden_split_and_reorder() {
    let p = kernel("spmm");
    let s = Schedule::replay(
        &p,
        &[
            Instruction::SparseReorder {
                iter: "spmm".into(),
                axes: vec!["I".into(), "K".into(), "J".into()],
            },
            Instruction::Split {
                r#loop: "spmm:k".into(),
                factors: vec![None, Some(4)],
            },
            Instruction::Unroll {
                r#loop: "k.1".into(),
            },
            Instruction::Parallel {
                r#loop: "spmm:i".into(),
            },
        ],
    )
    .expect("applies");
    insta::assert_snapshot!(
        "spmm_reorder_split",
        print_func(&s.stage2().expect("lowers"))
    );
}

#[test]
fn parallelizing_a_fused_reduction_is_rejected() {
    // After fusing j and k of SpMM, two iterations of the fused loop may write one C[i, k]
    // element only if the loop is a reduction; here the fused loop writes C[i, k] through
    // divisions of the fused index, which the check does not treat as one-to-one.
    let p = kernel("spmm");
    let mut s = Schedule::new(&p).expect("schedulable");
    s.apply(Instruction::Fuse {
        outer: "spmm:j".into(),
        inner: "spmm:k".into(),
    })
    .expect("fuses");
    let e = s
        .apply(Instruction::Parallel {
            r#loop: "j_k_fused".into(),
        })
        .expect_err("may race");
    assert!(e.to_string().contains("carries a dependence"), "{e}");
}

#[test]
fn sparse_fuse_needs_a_parent_and_its_child() {
    rejects(
        "sddmm",
        Instruction::SparseFuse {
            iter: "sddmm".into(),
            axes: vec!["I".into(), "K".into()],
        },
        "cannot fuse `I` and `K`",
    );
    rejects(
        "sddmm",
        Instruction::SparseFuse {
            iter: "sddmm".into(),
            axes: vec!["J".into(), "K".into()],
        },
        "cannot fuse `J` and `K`",
    );
    rejects(
        "spmm",
        Instruction::SparseFuse {
            iter: "spmm".into(),
            axes: vec!["I".into(), "J".into()],
        },
        "init without a place",
    );
    rejects(
        "spmm",
        Instruction::SparseFuse {
            iter: "spmm".into(),
            axes: vec!["I".into()],
        },
        "takes two axes",
    );
    // After a reorder that moves K between I and J, they are no longer adjacent.
    let p = kernel("sddmm");
    let mut s = Schedule::replay(
        &p,
        &[Instruction::SparseReorder {
            iter: "sddmm".into(),
            axes: vec!["I".into(), "K".into(), "J".into()],
        }],
    )
    .expect("reorders");
    let e = s
        .apply(Instruction::SparseFuse {
            iter: "sddmm".into(),
            axes: vec!["I".into(), "J".into()],
        })
        .expect_err("not adjacent");
    assert!(e.to_string().contains("must directly follow"), "{e}");
}

/// Decompositions of SpMM's A: each named one, and every one egg enumerates for the matrix,
/// computes the reference result on every target (the conversion builds the parts).
#[allow(clippy::too_many_arguments)] // one case of a table-driven test
fn check_decomposition(
    p: &Program,
    into: &str,
    m: usize,
    n: usize,
    rows: &[Vec<(usize, f64)>],
    b: &[f64],
    k: usize,
    want: &[f64],
) {
    let trace = vec![Instruction::DecomposeFormat {
        buffer: "A".into(),
        into: into.to_string(),
    }];
    let file = ScheduleFile {
        version: 1,
        kernel: p.name.clone(),
        trace,
    };
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(to_coo(m, n, rows))),
        ("B".to_string(), dense(&[n, k], b.to_vec())),
    ]);
    for target in [Target::InterpStage1, Target::Interp, Target::Jit] {
        let (scheduled, exe, conversions) = Executable::build_converting(p, Some(&file), target)
            .unwrap_or_else(|e| panic!("{into}: {e}"));
        let given = lacuna::driver::convert_inputs(&conversions, &inputs).expect("converts");
        let mut bnd = lacuna::stage1::bind_with(&scheduled, &inputs, &BTreeMap::new(), given)
            .unwrap_or_else(|e| panic!("{into}: {e}"));
        reset_outputs(&scheduled, &mut bnd);
        exe.run(&scheduled, &mut bnd).expect("runs");
        assert_dense(
            &format!("{into} {}", target.name()),
            &unpack(&scheduled, &bnd, "C").expect("unpacks"),
            &[m, k],
            want,
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: config().cases / 2 + 1, ..config() })]

    #[test]
    fn decomposed_spmm((m, n, rows) in sparse_matrix(), seed in any::<u64>()) {
        use lacuna::schedule::decompose::{enumerate, Candidates, CsrMatrix, MatrixStats};
        let p = kernel("spmm");
        let k = 2;
        let b = values(n * k, seed);
        let a = to_dense(m, n, &rows);
        let want: Vec<f64> = (0..m * k).map(|ik| (0..n).map(|j| a[ik / k * n + j] * b[j * k + ik % k]).sum()).collect();
        let mut terms: Vec<String> = [
            "(+ (bucket 1 2 (ell 1)) (+ (bucket 2 5 (ell 4)) (split_rows 4)))",
            "(+ (bsr 2) remainder)",
            "(+ (ell 2) (split_rows 2))",
            "(+ (colpart 2 0 (ell 2)) (+ (colpart 2 1 (ell 2)) remainder))",
        ].iter().map(|s| s.to_string()).collect();
        // And what equality saturation finds for this matrix.
        let mut indptr = vec![0usize];
        let mut indices = Vec::new();
        let mut vals = Vec::new();
        for r in &rows {
            for &(j, v) in r {
                indices.push(j);
                vals.push(v);
            }
            indptr.push(indices.len());
        }
        let csr = CsrMatrix::new(m, n, indptr, indices, vals).expect("a valid CSR");
        let stats = MatrixStats::of(&csr).expect("statistics");
        for d in enumerate(&stats, &Candidates::default(), 4) {
            terms.push(d.to_string());
        }
        for t in terms {
            check_decomposition(&p, &t, m, n, &rows, &b, k, &want);
        }
    }
}

#[test]
fn decompose_format_rejects_what_it_cannot_do() {
    rejects(
        "spmm",
        Instruction::DecomposeFormat {
            buffer: "B".into(),
            into: "csr".into(),
        },
        "stored as CSR",
    );
    rejects(
        "spmm",
        Instruction::DecomposeFormat {
            buffer: "A".into(),
            into: "(ell 2)".into(),
        },
        "does not store every entry",
    );
    rejects(
        "spmm",
        Instruction::DecomposeFormat {
            buffer: "A".into(),
            into: "(ell".into(),
        },
        "decomposition",
    );
    rejects(
        "spmm",
        Instruction::DecomposeFormat {
            buffer: "Z".into(),
            into: "csr".into(),
        },
        "no buffer named `Z`",
    );
}

/// Golden IR after each primitive, applied alone to the unscheduled kernel (whose own golden IR
/// is in stage2_loops/tests/snapshots).
#[test]
fn golden_each_primitive() {
    let l = |s: &str| s.to_string();
    let cases: Vec<(&str, &str, Instruction)> = vec![
        (
            "split",
            "spmm",
            Instruction::Split {
                r#loop: l("spmm:k"),
                factors: vec![None, Some(8)],
            },
        ),
        (
            "fuse",
            "spmm",
            Instruction::Fuse {
                outer: l("spmm:j"),
                inner: l("spmm:k"),
            },
        ),
        (
            "reorder",
            "spmm",
            Instruction::Reorder {
                loops: vec![l("spmm:k"), l("spmm:j")],
            },
        ),
        (
            "parallel",
            "spmm",
            Instruction::Parallel {
                r#loop: l("spmm:i"),
            },
        ),
        (
            "vectorize",
            "spmm",
            Instruction::Vectorize {
                r#loop: l("spmm:k"),
            },
        ),
        ("unroll", "spmv", Instruction::Unroll { r#loop: l("j") }),
        (
            "sparse_reorder",
            "spmm",
            Instruction::SparseReorder {
                iter: l("spmm"),
                axes: vec![l("I"), l("K"), l("J")],
            },
        ),
        (
            "sparse_fuse",
            "sddmm",
            Instruction::SparseFuse {
                iter: l("sddmm"),
                axes: vec![l("I"), l("J")],
            },
        ),
        (
            "specialize",
            "spmm",
            Instruction::Specialize {
                param: l("feat"),
                value: 8,
            },
        ),
        (
            "decompose_format",
            "spmv",
            Instruction::DecomposeFormat {
                buffer: l("A"),
                into: l("(+ (bucket 1 3 (ell 2)) (split_rows 2))"),
            },
        ),
    ];
    for (name, kernel_name, inst) in cases {
        let s = Schedule::replay(&kernel(kernel_name), &[inst])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        insta::assert_snapshot!(
            format!("primitive_{name}"),
            print_func(&s.stage2().expect("lowers"))
        );
    }
}

proptest! {
    #![proptest_config(config())]

    /// `pos` turns the dense iteration of spmm_dense_iter into A's positions, same result.
    #[test]
    fn pos_preserves_spmm_dense_iter((m, n, rows) in sparse_matrix(), seed in any::<u64>()) {
        let p = kernel("spmm_dense_iter");
        let k = 2;
        let b = values(n * k, seed);
        let a = to_dense(m, n, &rows);
        let want: Vec<f64> = (0..m * k).map(|ik| (0..n).map(|j| a[ik / k * n + j] * b[j * k + ik % k]).sum()).collect();
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows))), ("B".to_string(), dense(&[n, k], b))]);
        let trace = [Instruction::Pos { iter: "spmm_dense_iter".into(), axis: "Jd".into(), buffer: "A".into() }];
        let s = Schedule::replay(&p, &trace).expect("applies");
        prop_assert!(!print_func(&s.stage2().expect("lowers")).contains("search("), "pos removes the coordinate search");
        for (target, out) in run_scheduled(&p, &trace, &inputs) {
            assert_dense(target, &out, &[m, k], &want);
        }
    }
}

#[test]
fn pos_on_a_dense_level_or_a_non_annihilating_statement() {
    rejects(
        "spmm",
        Instruction::Pos {
            iter: "spmm".into(),
            axis: "K".into(),
            buffer: "B".into(),
        },
        "needs a sparse level",
    );
    rejects(
        "spmm",
        Instruction::Pos {
            iter: "spmm".into(),
            axis: "K".into(),
            buffer: "Q".into(),
        },
        "no buffer named `Q`",
    );
    rejects(
        "csr_element_wise",
        Instruction::Pos {
            iter: "csr_element_wise".into(),
            axis: "J".into(),
            buffer: "A".into(),
        },
        "is not `out = out + ...",
    );
}

proptest! {
    #![proptest_config(config())]

    /// A 4-D ragged reduction, unscheduled and with its outer levels fused.
    #[test]
    fn ragged_4d_reduction(shape in proptest::collection::vec(proptest::collection::vec(proptest::collection::vec(0usize..3, 0..3), 0..3), 0..4), seed in any::<u64>()) {
        let p = kernel("ragged4d_reduce");
        let mut coords = vec![Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        let mut data = Vec::new();
        let mut want = Vec::new();
        let vals = values(64, seed);
        let (mut mj, mut mk, mut ml) = (0, 0, 0);
        for (i, js) in shape.iter().enumerate() {
            mj = mj.max(js.len());
            for (j, ks) in js.iter().enumerate() {
                mk = mk.max(ks.len());
                let mut sum = 0.0;
                for (k, &ls) in ks.iter().enumerate() {
                    ml = ml.max(ls);
                    for l in 0..ls {
                        let v = vals[data.len() % vals.len()];
                        for (d, c) in [i, j, k, l].into_iter().enumerate() {
                            coords[d].push(c);
                        }
                        data.push(v);
                        sum += v;
                    }
                }
                want.push((vec![i, j], sum));
            }
        }
        // Ragged levels store every prefix position, so a (i, j) or (i, j, k) without entries
        // below still needs a stored position: skip shapes the COO input cannot express.
        let expressible = shape.iter().all(|js| js.iter().all(|ks| !ks.is_empty() && ks.iter().all(|&l| l > 0)));
        prop_assume!(expressible);
        let a = CooTensor { shape: vec![shape.len(), mj, mk, ml], coords, values: ArrayData::F64(data) };
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(a))]);
        for (target, outs) in run_all(&p, &inputs) {
            assert_sparse(target, &outs["out"], &[shape.len(), mj], &want);
        }
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/schedules/ragged4d_reduce_fused.ron");
        let file = ScheduleFile::from_ron(&std::fs::read_to_string(path).expect("schedule")).expect("parses");
        for (target, out) in run_scheduled(&p, &file.trace, &inputs) {
            assert_sparse(&format!("fused {target}"), &out, &[shape.len(), mj], &want);
        }
    }
}

#[test]
fn get_blocks_get_loops_and_divide() {
    let p = kernel("spmm");
    let mut s = Schedule::new(&p).expect("schedulable");
    assert_eq!(s.get_blocks().expect("lowers"), ["spmm_init", "spmm"]);
    let loops = s.get_loops("spmm").expect("a block");
    assert_eq!(loops, ["i", "j", "spmm:k"]);
    // Every name get_loops returns is one a primitive accepts.
    s.apply(Instruction::Divide {
        r#loop: loops[2].clone(),
        parts: 3,
    })
    .expect("divides");
    assert_eq!(
        s.get_loops("spmm").expect("a block"),
        ["i", "j", "k.0", "k.1"]
    );
    assert!(s.get_loops("nope").is_err());
    // divide(k, 3) computes the same as the unscheduled kernel.
    let (m, n, k) = (3, 4, 5);
    let rows = vec![vec![(0, 1.0), (3, 2.0)], vec![], vec![(1, -1.0)]];
    let b = values(n * k, 9);
    let a = to_dense(m, n, &rows);
    let want: Vec<f64> = (0..m * k)
        .map(|ik| (0..n).map(|j| a[ik / k * n + j] * b[j * k + ik % k]).sum())
        .collect();
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(to_coo(m, n, &rows))),
        ("B".to_string(), dense(&[n, k], b)),
    ]);
    for (target, out) in run_scheduled(&p, s.trace(), &inputs) {
        assert_dense(target, &out, &[m, k], &want);
    }
}

#[test]
fn bind_to_gpu_threads() {
    let p = kernel("spmm");
    let trace = vec![
        Instruction::Bind {
            r#loop: "spmm:i".into(),
            thread: "blockIdx.x".into(),
        },
        Instruction::Bind {
            r#loop: "spmm:k".into(),
            thread: "threadIdx.x".into(),
        },
    ];
    let s = Schedule::replay(&p, &trace).expect("binds");
    assert!(print_func(&s.stage2().expect("lowers")).contains("bind(blockIdx.x) for i"));
    // The race-checking interpreter and the (serial) CPU code agree with the reference.
    let (m, n, k) = (4, 5, 3);
    let rows = vec![
        vec![(0, 1.0), (4, 2.0)],
        vec![],
        vec![(1, -1.0), (2, 0.5), (3, 3.0)],
        vec![(4, 1.5)],
    ];
    let b = values(n * k, 3);
    let a = to_dense(m, n, &rows);
    let want: Vec<f64> = (0..m * k)
        .map(|ik| (0..n).map(|j| a[ik / k * n + j] * b[j * k + ik % k]).sum())
        .collect();
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(to_coo(m, n, &rows))),
        ("B".to_string(), dense(&[n, k], b)),
    ]);
    for (target, out) in run_scheduled(&p, &trace, &inputs) {
        assert_dense(target, &out, &[m, k], &want);
    }
    rejects(
        "spmm",
        Instruction::Bind {
            r#loop: "spmm:j".into(),
            thread: "threadIdx.x".into(),
        },
        "carries a dependence",
    );
    rejects(
        "spmm",
        Instruction::Bind {
            r#loop: "spmm:i".into(),
            thread: "warp.x".into(),
        },
        "not a thread dimension",
    );
}

/// SpMV's row loop split by 4 with the lanes outermost: the loop `rfactor` factors.
fn spmv_rfactor_trace(rfactor: bool) -> Vec<Instruction> {
    let mut t = vec![
        Instruction::Split {
            r#loop: "spmv:j".into(),
            factors: vec![None, Some(4)],
        },
        Instruction::Reorder {
            loops: vec!["j.1".into(), "j.0".into()],
        },
    ];
    if rfactor {
        t.push(Instruction::Rfactor {
            r#loop: "j.1".into(),
        });
    }
    t
}

#[test]
fn golden_rfactor() {
    let p = kernel("spmv");
    for (name, rf) in [("rfactor_before", false), ("rfactor_after", true)] {
        let s = Schedule::replay(&p, &spmv_rfactor_trace(rf)).expect("applies");
        insta::assert_snapshot!(name, print_func(&s.stage2().expect("lowers")));
    }
}

proptest! {
    #![proptest_config(config())]

    /// rfactor'ed SpMV (interpreter and JIT) equals the dense reference and the unscheduled
    /// interpreter.
    #[test]
    fn rfactor_preserves_spmv((m, n, rows) in sparse_matrix(), seed in any::<u64>()) {
        let p = kernel("spmv");
        let x = values(n, seed);
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(to_coo(m, n, &rows))),
            ("x".to_string(), dense(&[n], x.clone())),
        ]);
        let a = to_dense(m, n, &rows);
        let want: Vec<f64> = (0..m).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect();
        for (target, out) in run_scheduled(&p, &spmv_rfactor_trace(true), &inputs) {
            assert_dense(&format!("rfactor {target}"), &out, &[m], &want);
        }
        for (target, outs) in run_all(&p, &inputs) {
            assert_dense(&format!("unscheduled {target}"), &outs["y"], &[m], &want);
        }
    }
}

/// SpMV's row split by `w` with the lanes inside, factored: `w` partial sums that live across
/// the whole row (several accumulators), the lanes unrolled, rows in parallel when asked.
fn spmv_accumulators_trace(w: u64, parallel: bool) -> Vec<Instruction> {
    let mut t = vec![
        Instruction::Split {
            r#loop: "spmv:j".into(),
            factors: vec![None, Some(w)],
        },
        Instruction::Rfactor {
            r#loop: "j.1".into(),
        },
        Instruction::Unroll {
            r#loop: "j.1".into(),
        },
    ];
    if parallel {
        t.push(Instruction::Parallel {
            r#loop: "spmv:i".into(),
        });
    }
    t
}

#[test]
fn golden_rfactor_accumulators() {
    // The partial sums are zeroed before `j.0` and reduced after it (not per `j.0`), the rows
    // may run in parallel (each has its own partial sums), and lowering takes the split's
    // guard out of the full chunks (partition_loops).
    let p = kernel("spmv");
    let s = Schedule::replay(&p, &spmv_accumulators_trace(4, true)).expect("applies");
    let stage2 = s.stage2().expect("lowers");
    insta::assert_snapshot!("rfactor_accumulators", print_func(&stage2));
    let flat = lacuna::stage2::lower_to_flat(stage2, &Default::default(), &mut |_, _| {})
        .expect("flattens");
    insta::assert_snapshot!("rfactor_accumulators_flat", print_func(&flat));
}

proptest! {
    #![proptest_config(config())]

    /// SpMV with several accumulators per row (rfactor across the split row, partitioned
    /// tails), serial and parallel on 1..4 threads: equal to the dense reference within
    /// `REL_TOL` (the partial sums reassociate; rows hold at most 10 entries), on the
    /// interpreter and the JIT.
    #[test]
    fn rfactor_accumulators_preserve_spmv(
        (m, n, rows) in sparse_matrix(),
        seed in any::<u64>(),
        w in 2u64..5,
        threads in 1usize..5,
    ) {
        let p = kernel("spmv");
        let x = values(n, seed);
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(to_coo(m, n, &rows))),
            ("x".to_string(), dense(&[n], x.clone())),
        ]);
        let a = to_dense(m, n, &rows);
        let want: Vec<f64> = (0..m).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
        for parallel in [false, true] {
            let outs = pool.install(|| run_scheduled(&p, &spmv_accumulators_trace(w, parallel), &inputs));
            for (target, out) in outs {
                assert_dense(&format!("{w} accumulators, parallel {parallel}, {target}"), &out, &[m], &want);
            }
        }
    }
}

/// BSR SpMV's block columns factored across the block row's blocks, crossing the block's row
/// loop (which moves the reduced element): partial sums `y_local_rf[i * 4 + j]`, zeroed once
/// before the blocks and summed once after them, under copies of the row loop (`i.p0.init`,
/// `i.p0.rf`); the columns as vector lanes. The JIT's results are checked by
/// `parallel.rs`'s proptest over blocks of 2, 3 and 4 at 1 to 4 threads.
#[test]
fn golden_rfactor_across_a_row_loop() {
    let p = kernel("spmv");
    let s = Schedule::replay(&p, &lacuna::driver::spmv_bsr_trace(4, false)).expect("applies");
    insta::assert_snapshot!(
        "rfactor_across_block_rows",
        print_func(&s.stage2().expect("lowers"))
    );
    // A loop that moves the element with a data-dependent extent (SpMV's rows, `0..m`) is not
    // crossed: one set of partial sums per row, across the row's chunks only.
    let mut s = Schedule::replay(
        &p,
        &[Instruction::Split {
            r#loop: "spmv:j".into(),
            factors: vec![None, Some(4)],
        }],
    )
    .expect("splits");
    s.apply(Instruction::Rfactor {
        r#loop: "j.1".into(),
    })
    .expect("factors");
    let text = print_func(&s.stage2().expect("lowers"));
    assert!(text.contains("alloc local y_rf: f64[4]"), "{text}");
    assert!(!text.contains("i.rf"), "{text}");
}

#[test]
fn rfactor_and_warp_bind_reject_what_they_cannot_do() {
    let p = kernel("spmv");
    // A loop of data-dependent extent.
    rejects(
        "spmv",
        Instruction::Rfactor {
            r#loop: "spmv:j".into(),
        },
        "not a non-empty constant range",
    );
    // A loop that is not a reduction: it also initializes y[i].
    let mut s = Schedule::replay(
        &p,
        &[Instruction::Split {
            r#loop: "spmv:i".into(),
            factors: vec![None, Some(4)],
        }],
    )
    .expect("splits");
    let before = print_func(&s.stage2().expect("lowers"));
    let e = s
        .apply(Instruction::Rfactor {
            r#loop: "i.1".into(),
        })
        .expect_err("not a reduction over i.1");
    assert!(
        e.to_string()
            .starts_with("rfactor(\"i.1\"): the loop's stores are not all sums"),
        "{e}"
    );
    assert_eq!(print_func(&s.stage2().expect("lowers")), before);
    assert_eq!(s.trace().len(), 1);
    // The final reduction loop is a warp reduction only on threadIdx.x.
    let mut s = Schedule::replay(&p, &spmv_rfactor_trace(true)).expect("applies");
    let e = s
        .apply(Instruction::Bind {
            r#loop: "j.1.rf".into(),
            thread: "threadIdx.y".into(),
        })
        .expect_err("a reduction across threadIdx.y");
    assert!(e.to_string().contains("carries a dependence"), "{e}");
    // On threadIdx.x it becomes a warp_reduce annotation holding the init.
    s.apply(Instruction::Bind {
        r#loop: "j.1.rf".into(),
        thread: "threadIdx.x".into(),
    })
    .expect("a warp reduction");
    let text = print_func(&s.stage2().expect("lowers"));
    assert!(text.contains("attr warp_reduce = 4 {"), "{text}");
    // Width 4: a power of two; a factor of 3 is not.
    let mut t = spmv_rfactor_trace(true);
    if let Instruction::Split { factors, .. } = &mut t[0] {
        factors[1] = Some(3);
    }
    let mut s = Schedule::replay(&p, &t).expect("applies");
    assert!(s
        .apply(Instruction::Bind {
            r#loop: "j.1.rf".into(),
            thread: "threadIdx.x".into(),
        })
        .is_err());
}

fn spmv_inputs(
    m: usize,
    n: usize,
    rows: &[Vec<(usize, f64)>],
    seed: u64,
) -> (BTreeMap<String, Input>, Vec<f64>) {
    let x = values(n, seed);
    let a = to_dense(m, n, rows);
    let want: Vec<f64> = (0..m)
        .map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum())
        .collect();
    (
        BTreeMap::from([
            ("A".to_string(), Input::Coo(to_coo(m, n, rows))),
            ("x".to_string(), dense(&[n], x)),
        ]),
        want,
    )
}

fn annotate(r#loop: &str, key: &str, value: i64) -> Instruction {
    Instruction::Annotate {
        r#loop: r#loop.into(),
        key: key.into(),
        value,
    }
}

proptest! {
    #![proptest_config(config())]

    /// `annotate(atomic)` makes SpMV's reduction loop parallel (atomic adds); `pragma_unroll`
    /// and `prefetch` change only the code: all equal the dense reference. The prefetch reads
    /// `J.indices` `d` entries ahead across rows, clamped at the last entry of the matrix (or
    /// of the parallel chunk), on empty and short rows too.
    #[test]
    fn annotated_spmv((m, n, rows) in sparse_matrix(), seed in any::<u64>(), d in 1i64..80) {
        let p = kernel("spmv");
        let (inputs, want) = spmv_inputs(m, n, &rows, seed);
        for trace in [
            vec![annotate("spmv:j", "atomic", 0), Instruction::Parallel { r#loop: "spmv:j".into() }],
            vec![annotate("spmv:j", "pragma_unroll", 4)],
            vec![annotate("spmv:j", "prefetch", d)],
            vec![annotate("spmv:j", "prefetch", d), Instruction::Parallel { r#loop: "spmv:i".into() }],
        ] {
            for (target, out) in run_scheduled(&p, &trace, &inputs) {
                assert_dense(&format!("{trace:?} {target}"), &out, &[m], &want);
            }
        }
    }

    /// `masked` on SpMV's vectorized rows (tails as masked lanes, 1..4 registers per step),
    /// and `lanes` (2..16 lanes per register), serial and parallel rows on 1..4 threads, with prefetching too: equal to the dense
    /// reference within `REL_TOL` (lanes reassociate), on the interpreter and the JIT, on empty
    /// rows, rows shorter than one step and rows of several steps.
    #[test]
    fn masked_rows_preserve_spmv(
        (m, n, rows) in sparse_matrix(),
        seed in any::<u64>(),
        w in 1i64..5,
        threads in 1usize..5,
    ) {
        let p = kernel("spmv");
        let (inputs, want) = spmv_inputs(m, n, &rows, seed);
        let vector = Instruction::Vectorize { r#loop: "spmv:j".into() };
        let parallel = Instruction::Parallel { r#loop: "spmv:i".into() };
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
        for trace in [
            vec![vector.clone(), annotate("spmv:j", "masked", w)],
            vec![vector.clone(), annotate("spmv:j", "masked", w), parallel.clone()],
            vec![vector.clone(), annotate("spmv:j", "masked", w), annotate("spmv:j", "prefetch", 3), parallel.clone()],
            // `lanes`: 2, 4, 8 or 16 lanes per register, the remainder scalar.
            vec![vector.clone(), annotate("spmv:j", "lanes", 1 << w), parallel.clone()],
        ] {
            for (target, out) in pool.install(|| run_scheduled(&p, &trace, &inputs)) {
                assert_dense(&format!("{trace:?} on {threads} threads, {target}"), &out, &[m], &want);
            }
        }
    }

    /// `prefetch` on SpMM's entry loop, under register blocking (the gathers of `B` sit in a
    /// nested vectorized loop): the prefetches read `J.indices` ahead across rows, clamped to
    /// the last entry of the rows the loop nest walks, and change nothing else, on empty rows
    /// and short rows too.
    #[test]
    fn spmm_gather_prefetch((m, n, rows) in sparse_matrix(), feat in 1usize..5, d in 1i64..12) {
        let feat = feat * 8;
        let p = kernel("spmm");
        let b = values(n * feat, 11);
        let a = to_dense(m, n, &rows);
        let mut want = vec![0.0; m * feat];
        for i in 0..m {
            for j in 0..n {
                for k in 0..feat {
                    want[i * feat + k] += a[i * n + j] * b[j * feat + k];
                }
            }
        }
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(to_coo(m, n, &rows))),
            ("B".to_string(), dense(&[n, feat], b)),
        ]);
        let mut trace = vec![
            Instruction::Specialize { param: "feat".into(), value: feat as u64 },
            Instruction::Split { r#loop: "spmm:k".into(), factors: vec![None, Some(8)] },
            Instruction::Reorder { loops: vec!["k.0".into(), "j".into()] },
            Instruction::Vectorize { r#loop: "k.1".into() },
            annotate("j", "prefetch", d),
        ];
        for (target, out) in run_scheduled(&p, &trace, &inputs) {
            assert_dense(&format!("d={d} {target}"), &out, &[m, feat], &want);
        }
        // Rows in parallel: the prefetching loop is emitted in the outlined body.
        trace.push(Instruction::Parallel { r#loop: "spmm:i".into() });
        for (target, out) in run_scheduled(&p, &trace, &inputs) {
            assert_dense(&format!("parallel d={d} {target}"), &out, &[m, feat], &want);
        }
    }
}

#[test]
fn annotations_reach_the_ir_and_unannotate_restores() {
    let p = kernel("spmv");
    let plain = print_func(&Schedule::new(&p).expect("ok").stage2().expect("lowers"));
    let flat_of = |trace: &[Instruction]| {
        let s = Schedule::replay(&p, trace).expect("applies");
        lacuna::stage2::lower_to_flat(
            s.stage2().expect("lowers"),
            &Default::default(),
            &mut |_, _| {},
        )
        .expect("flattens")
    };
    let ir = |trace: &[Instruction]| {
        lacuna::target::emit_llvm_ir(
            &flat_of(trace),
            &lacuna::target::CodegenOptions {
                optimized_ir: false,
                ..Default::default()
            },
        )
        .expect("IR")
    };
    assert!(ir(&[annotate("spmv:j", "prefetch", 8)]).contains("@llvm.prefetch"));
    // The gather `x[J.indices[j]]`: J.indices read at j + 8 while below the end of the last
    // row (`J.indptr[m]`, read at i = m - 1), else at the row's last entry; one line of x.
    let gather = ir(&[annotate("spmv:j", "prefetch", 8)]);
    assert!(
        gather.contains("%pf.at = select")
            && gather.contains("%pf.last_row = sub i64")
            && gather.contains("%pf.gather = getelementptr double"),
        "{gather}"
    );
    assert!(ir(&[annotate("spmv:j", "pragma_unroll", 4)]).contains("llvm.loop.unroll.count"));
    // `masked` on a vectorized loop: tail folding and the interleave count, as hints.
    let masked = ir(&[
        Instruction::Vectorize {
            r#loop: "spmv:j".into(),
        },
        annotate("spmv:j", "masked", 3),
    ]);
    assert!(
        masked.contains("!\"llvm.loop.vectorize.predicate.enable\", i1 true}")
            && masked.contains("!\"llvm.loop.interleave.count\", i32 3}"),
        "{masked}"
    );
    let unmasked = ir(&[Instruction::Vectorize {
        r#loop: "spmv:j".into(),
    }]);
    // A row's entries, unmasked: one register per step, the remainder loop scalar.
    assert!(
        !unmasked.contains("predicate.enable")
            && unmasked.contains("!\"llvm.loop.interleave.count\", i32 1}"),
        "{unmasked}"
    );
    // `lanes` on a vectorized loop: the vectorization width, as a hint.
    let lanes = ir(&[
        Instruction::Vectorize {
            r#loop: "spmv:j".into(),
        },
        annotate("spmv:j", "lanes", 8),
    ]);
    assert!(
        lanes.contains("!\"llvm.loop.vectorize.width\", i32 8}")
            && !lanes.contains("llvm.loop.unroll.disable"),
        "{lanes}"
    );
    // A counted loop given its lanes (a sliced ELL group's lanes) is kept for the vectorizer,
    // not unrolled in full first: its partial sums become one vector register.
    let sell: Vec<Instruction> = lacuna::driver::spmv_sell_trace(false, false);
    let sliced = ir(&sell);
    assert!(
        sliced.contains("!\"llvm.loop.vectorize.width\", i32 8}")
            && sliced.contains("!{!\"llvm.loop.unroll.disable\"}"),
        "{sliced}"
    );
    if lacuna::target::host_has_vector_masks() {
        let optimized =
            lacuna::target::emit_llvm_ir(&flat_of(&sell), &Default::default()).expect("IR");
        assert!(
            optimized.contains("phi <8 x double>")
                && optimized.contains("@llvm.masked.gather.v8f64"),
            "{optimized}"
        );
    }
    // `scalar_gathers` on the lanes, in a parallel group loop: the outlined chunk function's
    // gathers become scalar loads where the host assembles them, and only there.
    let assembled = lacuna::driver::spmv_sell_trace(true, true);
    let optimized =
        lacuna::target::emit_llvm_ir(&flat_of(&assembled), &Default::default()).expect("IR");
    assert_eq!(
        optimized.contains("gx.x"),
        lacuna::target::host_assembles_gathers() && lacuna::target::host_has_vector_masks(),
        "{optimized}"
    );
    assert!(ir(&[annotate("spmv:j", "atomic", 0)]).contains("atomicrmw fadd"));
    // Golden: the atomic annotation.
    let s = Schedule::replay(&p, &[annotate("spmv:j", "atomic", 0)]).expect("applies");
    insta::assert_snapshot!("annotate_atomic", print_func(&s.stage2().expect("lowers")));
    // unannotate gives back the original program; the trace replays through RON.
    for key in ["atomic", "prefetch", "pragma_unroll"] {
        let trace = vec![
            annotate("spmv:j", key, 2),
            Instruction::Unannotate {
                r#loop: "spmv:j".into(),
                key: key.into(),
            },
        ];
        let s = Schedule::replay(&p, &trace).expect("applies");
        assert_eq!(print_func(&s.stage2().expect("lowers")), plain, "{key}");
        let file = ScheduleFile::from_ron(&s.to_file().to_ron()).expect("parses");
        assert_eq!(file.trace, trace);
    }
}

#[test]
fn annotate_rejects_what_it_cannot_do() {
    rejects(
        "spmv",
        annotate("spmv:j", "vectorize_me", 1),
        "unknown annotation",
    );
    rejects("spmv", annotate("spmv:j", "prefetch", 0), "at least 1");
    rejects("spmv", annotate("spmv:j", "masked", 0), "at least 1");
    // Masked lanes need vector lanes first.
    rejects("spmv", annotate("spmv:j", "masked", 2), "is not vectorized");
    rejects("spmv", annotate("spmv:j", "lanes", 8), "is not vectorized");
    rejects(
        "spmv",
        annotate("spmv:j", "scalar_gathers", 1),
        "is not vectorized",
    );
    rejects(
        "spmv",
        annotate("spmv:j", "scalar_gathers", 0),
        "at least 1",
    );
    let vectorized = |value| {
        let p = kernel("spmv");
        let mut s = Schedule::replay(
            &p,
            &[Instruction::Vectorize {
                r#loop: "spmv:j".into(),
            }],
        )
        .expect("applies");
        s.apply(annotate("spmv:j", "lanes", value))
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    for bad in [0, 1, 3, 12, 128, -8] {
        let e = vectorized(bad).expect_err("not a power of two from 2 to 64");
        assert!(e.contains("power of two"), "{bad}: {e}");
    }
    assert!(vectorized(16).is_ok());
    // The row loop also initializes y[i]: not a sum an atomic can perform.
    rejects("spmv", annotate("spmv:i", "atomic", 0), "not a sum");
    let p = kernel("spmv");
    let mut s = Schedule::replay(&p, &[annotate("spmv:j", "prefetch", 4)]).expect("applies");
    let e = s
        .apply(annotate("spmv:j", "prefetch", 2))
        .expect_err("twice");
    assert!(e.to_string().contains("already"), "{e}");
    let e = s
        .apply(Instruction::Unannotate {
            r#loop: "spmv:j".into(),
            key: "atomic".into(),
        })
        .expect_err("not annotated atomic");
    assert!(
        e.to_string().starts_with("unannotate(") && e.to_string().contains("no annotation"),
        "{e}"
    );
    assert_eq!(s.trace().len(), 1);
}

/// A vectorized loop of constant trip count is vectorized itself: SDDMM with k specialized to
/// 32 loads rows of `W` as vectors, with no gather (LLVM used to unroll the feature loop first
/// and vectorize the entries instead, gathering `W` feature by feature). Its loop ID keeps it
/// from unrolling before vectorization and unrolls its vector steps in full after, up to
/// 256 iterations; a longer loop's vector steps are left to LLVM.
#[test]
fn constant_vectorized_loops_are_vectorized_not_unrolled_first() {
    let p = kernel("sddmm");
    let ir = |k: u64, optimized: bool| {
        let s = Schedule::replay(
            &p,
            &[
                Instruction::Specialize {
                    param: "feat".into(),
                    value: k,
                },
                Instruction::Vectorize {
                    r#loop: "sddmm:k".into(),
                },
            ],
        )
        .expect("applies");
        let flat = lacuna::stage2::lower_to_flat(
            s.stage2().expect("lowers"),
            &Default::default(),
            &mut |_, _| {},
        )
        .expect("flattens");
        lacuna::target::emit_llvm_ir(
            &flat,
            &lacuna::target::CodegenOptions {
                optimized_ir: optimized,
                ..Default::default()
            },
        )
        .expect("IR")
    };
    let hints = ir(32, false);
    assert!(
        hints.contains("!\"llvm.loop.unroll.disable\"}")
            && hints.contains("!\"llvm.loop.vectorize.followup_vectorized\", !")
            && hints.contains("!\"llvm.loop.unroll.full\"}"),
        "{hints}"
    );
    let long = ir(1000, false);
    assert!(
        long.contains("!\"llvm.loop.vectorize.followup_vectorized\"}")
            && !long.contains("llvm.loop.unroll.full"),
        "{long}"
    );
    let optimized = ir(32, true);
    assert!(!optimized.contains("llvm.masked.gather"), "{optimized}");
    assert!(optimized.contains("load <"), "{optimized}");
}
