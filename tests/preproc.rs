//! Preprocessing extraction (`ExtractPreprocess`): the structure-only searches and the
//! iterations annotated `preprocess` move into a function run once per matrix; results are
//! unchanged (JIT and stage-II interpreter against the stage-I interpreter and a dense
//! reference), the kernel no longer searches, and illegal extractions are typed errors.

mod common;

use common::*;
use lacuna::driver::{reset_outputs, run_kernel_scheduled, DriverError, Executable, Target};
use lacuna::schedule::{Condition, Instruction, Schedule, ScheduleFile};
use lacuna::stage1::{bind, unpack, Input, Output, Program};
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

/// Inputs by name.
type Inputs = BTreeMap<String, Input>;
/// Expected sparse entries: coordinates and value, row-major.
type Entries = Vec<(Vec<usize>, f64)>;

fn schedule_file(name: &str) -> ScheduleFile {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("examples/schedules/{name}.ron"));
    ScheduleFile::from_ron(&std::fs::read_to_string(path).expect("schedule file")).expect("parses")
}

fn file(p: &Program, trace: Vec<Instruction>) -> ScheduleFile {
    ScheduleFile {
        version: 1,
        kernel: p.name.clone(),
        trace,
    }
}

/// Runs `p` under `file` on `target` through the driver with 3 repetitions (preprocessing
/// once); returns the output named `out` and the report's preprocessing seconds.
fn run(
    p: &Program,
    file: &ScheduleFile,
    inputs: &BTreeMap<String, Input>,
    target: Target,
    out: &str,
) -> (Output, f64) {
    let r = run_kernel_scheduled(p, Some(file), inputs, &BTreeMap::new(), target, 3)
        .unwrap_or_else(|e| panic!("{}: {e}", target.name()));
    assert_eq!(r.run_seconds.len(), 3);
    (r.outputs[out].clone(), r.preprocess_seconds)
}

fn sddmm_inputs(m: usize, n: usize, rows: &[Vec<(usize, f64)>], seed: u64) -> (Inputs, Entries) {
    let k = 5;
    let x = values(m * k, seed);
    let w = values(n * k, seed ^ 7);
    let inputs = BTreeMap::from([
        ("S".to_string(), Input::Coo(to_coo(m, n, rows))),
        ("X".to_string(), dense(&[m, k], x.clone())),
        ("W".to_string(), dense(&[n, k], w.clone())),
    ]);
    // Dense reference: C = S ⊙ (X Wᵀ) at the stored entries.
    let want = rows
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            let (x, w) = (&x, &w);
            r.iter().map(move |&(j, s)| {
                (
                    vec![i, j],
                    (0..k).map(|kk| s * x[i * k + kk] * w[j * k + kk]).sum(),
                )
            })
        })
        .collect();
    (inputs, want)
}

proptest! {
    #![proptest_config(config())]

    /// Fused SDDMM with the row search extracted equals the stage-I interpreter and the dense
    /// reference (tolerance `REL_TOL`), on random matrices with empty rows and nnz = 0.
    #[test]
    fn fused_sddmm_with_extracted_search((m, n, rows) in sparse_matrix(), seed in any::<u64>()) {
        let p = kernel("sddmm");
        let (inputs, want) = sddmm_inputs(m, n, &rows, seed);
        let pre = schedule_file("sddmm_fused_pre");
        let plain = schedule_file("sddmm_fused");
        prop_assert!(pre.trace.contains(&Instruction::ExtractPreprocess));
        for target in [Target::Interp, Target::Jit, Target::InterpGpu] {
            let (out, _) = run(&p, &pre, &inputs, target, "C");
            assert_sparse(&format!("pre {}", target.name()), &out, &[m, n], &want);
            let (base, _) = run(&p, &plain, &inputs, target, "C");
            prop_assert_eq!(base.to_coo().map(|c| c.coords), out.to_coo().map(|c| c.coords));
        }
        let (oracle, _) = run(&p, &pre, &inputs, Target::InterpStage1, "C");
        assert_sparse("interp-stage1", &oracle, &[m, n], &want);
    }

    /// Row softmax with its first iteration annotated `preprocess` (run once, before the
    /// kernel, its `mx` kept across repeated kernel runs) equals the unscheduled kernel.
    #[test]
    fn preprocess_iteration_runs_before_the_kernel((m, n, rows) in sparse_matrix()) {
        let p = kernel("softmax_rows");
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows)))]);
        let annotated = file(&p, vec![Instruction::SparseAnnotate {
            iter: "row_max".into(),
            key: "preprocess".into(),
            value: "true".into(),
        }]);
        let (want, _) = run(&p, &file(&p, vec![]), &inputs, Target::InterpStage1, "B");
        let want = want.to_coo().expect("sparse");
        let want: Vec<(Vec<usize>, f64)> = (0..want.nnz())
            .map(|e| (vec![want.coords[0][e], want.coords[1][e]], want.values.to_f64_vec()[e]))
            .collect();
        // The annotation alone moves the iteration (the driver extracts it at build time).
        for target in [Target::Interp, Target::Jit] {
            let (out, _) = run(&p, &annotated, &inputs, target, "B");
            assert_sparse(target.name(), &out, &[m, n], &want);
        }
    }
}

fn random_sddmm() -> (Program, Inputs, Entries) {
    let rows: Vec<Vec<(usize, f64)>> = vec![
        vec![(0, 1.0), (3, 2.0)],
        vec![],
        vec![],
        vec![(1, -1.5), (2, 0.5), (4, 3.0)],
        vec![(4, 1.0)],
    ];
    let (inputs, want) = sddmm_inputs(5, 5, &rows, 11);
    (kernel("sddmm"), inputs, want)
}

#[test]
fn the_kernel_no_longer_searches_golden_ir() {
    let (p, _, _) = random_sddmm();
    let s = Schedule::replay(&p, &schedule_file("sddmm_fused_pre").trace).expect("applies");
    let kernel = print_func(&s.stage2().expect("stage II"));
    let pre = s.preprocess().expect("extracted");
    let pre_text = print_func(&pre.func);
    assert!(
        !kernel.contains("segment(") && !kernel.contains("search("),
        "{kernel}"
    );
    assert!(kernel.contains("let i = mid_0[j]"), "{kernel}");
    assert!(
        pre_text.contains("mid_0[j] = segment(J.indptr[0..m], j)"),
        "{pre_text}"
    );
    assert_eq!(pre.aux.len(), 1);
    assert_eq!(pre.writes, vec!["mid_0".to_string()]);
    insta::assert_snapshot!("sddmm_fused_pre.kernel", kernel);
    insta::assert_snapshot!("sddmm_fused_pre.preprocess", pre_text);
    // Without extraction the kernel searches (so the assertion above can fail).
    let plain = Schedule::replay(&p, &schedule_file("sddmm_fused").trace).expect("applies");
    assert!(print_func(&plain.stage2().expect("stage II")).contains("segment("));
    assert!(plain.preprocess().is_none());
}

#[test]
fn repeated_kernel_runs_do_not_rerun_preprocessing() {
    let (p, inputs, want) = random_sddmm();
    for target in [Target::Interp, Target::Jit] {
        let (scheduled, exe) =
            Executable::build_with(&p, Some(&schedule_file("sddmm_fused_pre")), target)
                .expect("builds");
        let mut b = bind(&scheduled, &inputs, &BTreeMap::new()).expect("binds");
        reset_outputs(&scheduled, &mut b);
        // The kernel alone has no aux buffer yet: it does not preprocess by itself.
        // SAFETY: `b` passes `check_bindings`; its one difference from what `run_preprocess`
        // leaves is the missing aux array, which the compiled kernel's run refuses before it
        // calls any code, and the interpreters check.
        let e = unsafe { exe.run_kernel(&scheduled, &mut b) }.expect_err("aux buffer missing");
        assert!(e.to_string().contains("mid_0"), "{e}");
        exe.run_preprocess(&scheduled, &mut b)
            .expect("preprocesses");
        let mid = b.buffers["mid_0"].to_f64_vec();
        assert_eq!(mid, vec![0.0, 0.0, 3.0, 3.0, 3.0, 4.0]);
        for _ in 0..3 {
            exe.reset_outputs(&scheduled, &mut b);
            // SAFETY: as `run_preprocess` left it, outputs zeroed.
            unsafe { exe.run_kernel(&scheduled, &mut b) }.expect("runs");
            assert_eq!(b.buffers["mid_0"].to_f64_vec(), mid, "kept across runs");
        }
        let out = unpack(&scheduled, &b, "C").expect("unpacks");
        assert_sparse(target.name(), &out, &[5, 5], &want);
    }
}

#[test]
fn illegal_extractions_are_typed_errors() {
    // Nothing structure-only to extract.
    let p = kernel("spmv");
    let mut s = Schedule::new(&p).expect("schedulable");
    let e = s
        .apply(Instruction::ExtractPreprocess)
        .expect_err("nothing to extract");
    assert!(matches!(&e.condition, Condition::Preprocess(_)), "{e:?}");
    assert!(e.to_string().starts_with("extract_preprocess"), "{e}");
    assert!(e.to_string().contains("nothing to extract"), "{e}");
    assert!(s.trace().is_empty());

    // Twice.
    let p = kernel("sddmm");
    let mut s = Schedule::new(&p).expect("schedulable");
    s.apply(Instruction::SparseFuse {
        iter: "sddmm".into(),
        axes: vec!["I".into(), "J".into()],
    })
    .expect("fuses");
    s.apply(Instruction::ExtractPreprocess).expect("extracts");
    let e = s
        .apply(Instruction::ExtractPreprocess)
        .expect_err("already extracted");
    assert!(e.to_string().contains("already extracted"), "{e}");

    // A `preprocess` iteration that reads what the kernel computes before it.
    let p = kernel("softmax_rows");
    let mut s = Schedule::new(&p).expect("schedulable");
    s.apply(Instruction::SparseAnnotate {
        iter: "normalize".into(),
        key: "preprocess".into(),
        value: "true".into(),
    })
    .expect("annotates");
    let e = s
        .apply(Instruction::ExtractPreprocess)
        .expect_err("normalize reads sum");
    assert!(
        e.to_string()
            .contains("`mx` is written by the kernel before it"),
        "{e}"
    );
    // The driver reports the same error for the annotation alone.
    let a = BTreeMap::from([(
        "A".to_string(),
        Input::Coo(to_coo(2, 2, &[vec![(0, 1.0)], vec![(1, 2.0)]])),
    )]);
    let annotated = file(
        &p,
        vec![Instruction::SparseAnnotate {
            iter: "normalize".into(),
            key: "preprocess".into(),
            value: "true".into(),
        }],
    );
    match run_kernel_scheduled(&p, Some(&annotated), &a, &BTreeMap::new(), Target::Jit, 1) {
        Err(DriverError::Schedule(e)) => {
            assert!(matches!(e.condition, Condition::Preprocess(_)), "{e:?}")
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("must be rejected"),
    }
}

#[test]
fn lacuna_run_reports_preprocess_seconds() {
    let dir = std::env::temp_dir().join(format!("lacuna-preproc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let matrix = root.join("tests/data/ash219.mtx");
    let (rows, cols) = (219, 85);
    let k = 4;
    for (name, len) in [("X", rows), ("W", cols)] {
        let a = lacuna::ir::DenseArray {
            shape: vec![len, k],
            data: lacuna::ir::ArrayData::F64(values(len * k, len as u64)),
        };
        lacuna::ir::io::write_npy(&dir.join(format!("{name}.npy")), &a).expect("writes npy");
    }
    let run = |schedule: &str| -> serde_json::Value {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lacuna"))
            .arg("run")
            .arg(root.join("examples/sddmm.ron"))
            .arg("--input")
            .arg(format!("S={}", matrix.display()))
            .arg("--input")
            .arg(format!("X={}", dir.join("X.npy").display()))
            .arg("--input")
            .arg(format!("W={}", dir.join("W.npy").display()))
            .arg("--schedule")
            .arg(root.join(format!("examples/schedules/{schedule}.ron")))
            .args(["--repeat", "3"])
            .output()
            .expect("lacuna runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("one JSON object")
    };
    let pre = run("sddmm_fused_pre");
    let plain = run("sddmm_fused");
    let secs = pre["preprocess_seconds"].as_f64().expect("a number");
    assert!(secs > 0.0 && secs.is_finite(), "{pre}");
    assert!(plain["preprocess_seconds"].as_f64().is_some(), "{plain}");
    assert_eq!(pre["repeat"], 3);
    assert_eq!(pre["checksum"], plain["checksum"], "same result");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn lacuna_bench_reports_preprocess_s() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lacuna"))
        .args([
            "bench",
            "--gen",
            "er:200:4",
            "--kernels",
            "sddmm",
            "--k",
            "4",
        ])
        .args(["--repeat", "2", "--schedule"])
        .arg(root.join("examples/schedules/sddmm_fused_pre.ron"))
        .arg("--schedule")
        .arg(root.join("examples/schedules/sddmm_fused.ron"))
        .output()
        .expect("lacuna bench runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recs: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(recs.len(), 2, "{recs:?}");
    let (pre, plain) = if recs[0]["schedule"]
        .as_str()
        .expect("a schedule")
        .ends_with("_pre.ron")
    {
        (&recs[0], &recs[1])
    } else {
        (&recs[1], &recs[0])
    };
    let secs = pre["preprocess_s"].as_f64().expect("a number");
    assert!(secs > 0.0 && secs.is_finite(), "{pre}");
    assert!(plain["preprocess_s"].as_f64().is_some(), "{plain}");
    assert_eq!(pre["checksum"], plain["checksum"], "same results");
}
