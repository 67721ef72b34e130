//! `horizontal_fuse` followed by `parallel`/`bind(blockIdx.x)` on the fused dispatch loop:
//! legal when the parts write disjoint rows (whole-row ELL buckets and a CSR remainder), checked
//! from the decomposition; results equal the dense reference on the JIT and the stage-II
//! interpreter (which reports races between the iterations of a bound loop); parts that split rows
//! are rejected with an error naming the buffer and the part, unless the loop is annotated
//! `atomic` (its sums into C become atomic adds).

mod common;

use common::*;
use lacuna::driver::{convert_inputs, reset_outputs, Executable, Target};
use lacuna::schedule::{Instruction, Schedule, ScheduleFile};
use lacuna::stage1::{bind_with, unpack, Input};
use lacuna::stage2::{print_func, ForKind, GpuAxis, Stmt};
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

fn schedule_file(name: &str) -> ScheduleFile {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("examples/schedules/{name}.ron"));
    ScheduleFile::from_ron(&std::fs::read_to_string(path).expect("schedule file")).expect("parses")
}

fn spmm_reference(m: usize, n: usize, rows: &[Vec<(usize, f64)>], b: &[f64], k: usize) -> Vec<f64> {
    let a = to_dense(m, n, rows);
    (0..m * k)
        .map(|ik| (0..n).map(|j| a[ik / k * n + j] * b[j * k + ik % k]).sum())
        .collect()
}

/// The parallel schedule with `Parallel` replaced by `Bind(.., blockIdx.x)`.
fn bound_trace() -> Vec<Instruction> {
    let mut trace = schedule_file("spmm_hyb_hfused_parallel").trace;
    let last = trace.pop().expect("a Parallel");
    assert_eq!(
        last,
        Instruction::Parallel {
            r#loop: "i.p0_hfused".into()
        }
    );
    trace.push(Instruction::Bind {
        r#loop: "i.p0_hfused".into(),
        thread: "blockIdx.x".into(),
    });
    trace
}

/// Buckets, then long rows split into chunks of 4; the fused loop annotated `atomic`.
fn atomic_trace(last: Instruction) -> Vec<Instruction> {
    vec![
        Instruction::DecomposeFormat {
            buffer: "A".into(),
            into: "(+ (bucket 1 2 (ell 1)) (+ (bucket 2 3 (ell 2)) (split_rows 2)))".into(),
        },
        Instruction::HorizontalFuse {
            loops: vec!["i.p0".into(), "i.p1".into(), "i.p2".into()],
        },
        Instruction::Annotate {
            r#loop: "i.p0_hfused".into(),
            key: "atomic".into(),
            value: 0,
        },
        last,
    ]
}

proptest! {
    #![proptest_config(config())]

    /// The parallel (and blockIdx-bound) fused dispatch loop computes the dense reference
    /// (tolerance `REL_TOL`) on random matrices with empty rows, long rows and nnz = 0.
    #[test]
    fn parallel_fused_parts((m, n, rows) in sparse_matrix(), seed in any::<u64>()) {
        let p = kernel("spmm");
        let k = 3;
        let b = values(n * k, seed);
        let want = spmm_reference(m, n, &rows, &b, k);
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(to_coo(m, n, &rows))),
            ("B".to_string(), dense(&[n, k], b)),
        ]);
        let parallel = schedule_file("spmm_hyb_hfused_parallel");
        let bound = ScheduleFile { trace: bound_trace(), ..parallel.clone() };
        // Rows split into chunks (split_rows) are summed atomically instead.
        let atomic = |last: Instruction| ScheduleFile { trace: atomic_trace(last), ..parallel.clone() };
        let atomic_parallel = atomic(Instruction::Parallel { r#loop: "i.p0_hfused".into() });
        let atomic_bound = atomic(Instruction::Bind { r#loop: "i.p0_hfused".into(), thread: "blockIdx.x".into() });
        for (file, target) in [
            (&atomic_parallel, Target::Interp),
            (&atomic_parallel, Target::Jit),
            (&atomic_bound, Target::Interp),
            (&parallel, Target::Interp),
            (&parallel, Target::Jit),
            // The stage-II interpreter checks the iterations of a bound loop for races (two
            // iterations touching one element of C where one writes it).
            (&bound, Target::Interp),
            (&bound, Target::Jit),
        ] {
            let (scheduled, exe, conversions) =
                Executable::build_converting(&p, Some(file), target).expect("builds");
            let given = convert_inputs(&conversions, &inputs).expect("converts");
            let mut bnd = bind_with(&scheduled, &inputs, &BTreeMap::new(), given).expect("binds");
            reset_outputs(&scheduled, &mut bnd);
            exe.run(&scheduled, &mut bnd).unwrap_or_else(|e| panic!("{}: {e}", target.name()));
            assert_dense(target.name(), &unpack(&scheduled, &bnd, "C").expect("unpacks"), &[m, k], &want);
        }
    }
}

#[test]
fn the_dispatch_loop_is_parallel_or_bound() {
    let p = kernel("spmm");
    let s =
        Schedule::replay(&p, &schedule_file("spmm_hyb_hfused_parallel").trace).expect("applies");
    let f = s.stage2().expect("stage II");
    let kind = |f: &lacuna::stage2::Func| match &f.body[1] {
        Stmt::For { var, kind, .. } if var == "i.p0_hfused" => *kind,
        other => panic!("not the fused loop: {other:?}"),
    };
    assert_eq!(kind(&f), ForKind::Parallel, "{}", print_func(&f));
    let s = Schedule::replay(&p, &bound_trace()).expect("applies");
    assert_eq!(
        kind(&s.stage2().expect("stage II")),
        ForKind::Bound(GpuAxis::BlockX)
    );
}

fn rejected(into: &str, last: Instruction, needle: &str) {
    let p = kernel("spmm");
    let trace = vec![
        Instruction::DecomposeFormat {
            buffer: "A".into(),
            into: into.into(),
        },
        Instruction::HorizontalFuse {
            loops: vec!["i.p0".into(), "i.p1".into()],
        },
    ];
    let mut s = Schedule::replay(&p, &trace).expect("fuses");
    let e = s.apply(last.clone()).expect_err("must be rejected");
    let msg = e.to_string();
    assert!(
        msg.starts_with(last.name()) && msg.contains(needle),
        "{msg}"
    );
    assert_eq!(s.trace().len(), 2, "the schedule is unchanged");
}

#[test]
fn parts_that_split_rows_are_rejected() {
    let par = Instruction::Parallel {
        r#loop: "i.p0_hfused".into(),
    };
    let bind = Instruction::Bind {
        r#loop: "i.p0_hfused".into(),
        thread: "blockIdx.x".into(),
    };
    // split_rows repeats a long row in several chunks: two iterations write one row of C.
    for last in [par.clone(), bind] {
        rejected(
            "(+ (bucket 1 3 (ell 2)) (split_rows 2))",
            last,
            "carries a dependence through `C`: part `i.p1` writes it at `_p1`",
        );
    }
    // A bucket whose ELL width is below its longest row leaves the rest of those rows to the
    // next part: the bucket's rows are not exclusive either.
    rejected(
        "(+ (bucket 1 5 (ell 2)) remainder)",
        par.clone(),
        "part `i.p0` writes it at `_p0`",
    );
    // Whole-row buckets and a remainder are accepted (the same check as the example).
    let p = kernel("spmm");
    let mut s = Schedule::replay(
        &p,
        &[
            Instruction::DecomposeFormat {
                buffer: "A".into(),
                into: "(+ (bucket 1 5 (ell 4)) remainder)".into(),
            },
            Instruction::HorizontalFuse {
                loops: vec!["i.p0".into(), "i.p1".into()],
            },
        ],
    )
    .expect("fuses");
    s.apply(par).expect("disjoint rows");
}
