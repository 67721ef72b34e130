//! GPU functions of several kernel launches, and the hyb SpMM GPU schedule
//! (`examples/schedules/spmm_hyb_gpu.ron`) that needs them: its PTX has one entry per launch
//! and assembles with `ptxas` for sm_80 and sm_90; the interpreter's GPU semantics (launches in
//! order, races checked per launch) equal the unscheduled kernel on the CPU on random matrices
//! with empty rows, long (split) rows and nnz = 0; dropping the launch boundary or the atomic
//! annotation of the split rows is a race (or refused by `bind`); single-launch schedules keep
//! their plain entry.

mod common;

use common::gpu::*;
use common::*;
use lacuna::driver::{reset_outputs, DriverError, Executable, Target};
use lacuna::schedule::{Instruction, Schedule, ScheduleFile};
use lacuna::stage2::{
    interpret_gpu, lower_to_flat, Config, ForKind, GpuAxis, Stage2InterpError, Stmt,
};
use lacuna::target::{compile_ptx, cuda_available, CodegenOptions, CudaError, GpuArch};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn hyb() -> ScheduleFile {
    schedule("spmm_hyb_gpu.ron")
}

#[test]
fn hyb_gpu_ptx_has_one_entry_per_launch_and_assembles() {
    let flat = flat_of(&kernel("spmm"), &hyb());
    for arch in [GpuArch::Sm80, GpuArch::Sm90] {
        let k = compile_ptx(&flat, arch, &CodegenOptions::default()).expect("PTX");
        let entries: Vec<&str> = k.launches.iter().map(|l| l.entry.as_str()).collect();
        assert_eq!(entries, ["lacuna_spmm_k0", "lacuna_spmm_k1"]);
        assert_eq!(k.entry, "lacuna_spmm_k0");
        assert_eq!(k.ptx.matches(".visible .entry ").count(), 2, "{}", k.ptx);
        for e in &entries {
            assert!(k.ptx.contains(&format!(".visible .entry {e}(")), "{e}");
        }
        assert!(!k.ptx.contains(".entry lacuna_spmm("));
        // Launch 0 zeroes C (no atomics); launch 1 holds the split rows' atomic adds.
        let k1 = k.ptx.find(".entry lacuna_spmm_k1(").expect("k1");
        assert!(!k.ptx[..k1].contains("atom.global.add.f64"));
        assert!(k.ptx[k1..].contains("atom.global.add.f64"));
        // Each launch has its own block: 32 threads (features) in launch 0, 32 x 4 (features
        // x rows of a group) in launch 1.
        assert!(k.ptx[..k1].contains(".maxntid 32, 1, 1"));
        assert!(k.ptx[k1..].contains(".maxntid 32, 4, 1"));
        let axes = |l: usize| k.launches[l].launch.bound_axes().collect::<Vec<GpuAxis>>();
        assert_eq!(axes(0), [GpuAxis::BlockX, GpuAxis::ThreadX]);
        assert_eq!(
            axes(1),
            [GpuAxis::BlockX, GpuAxis::ThreadX, GpuAxis::ThreadY]
        );
        assert_eq!(k.launches[0].launch.constant_block(), Some([32, 1, 1]));
        assert_eq!(k.launches[1].launch.constant_block(), Some([32, 4, 1]));
        assemble_ptx(&k.ptx, arch, "spmm_hyb_gpu");
    }
}

#[test]
fn single_launch_schedules_keep_their_plain_entry() {
    for name in [
        "spmm_gpu_naive.ron",
        "spmm_bsr_gpu_shared.ron",
        "sddmm_gpu_rfactor.ron",
    ] {
        let file = schedule(name);
        let flat = flat_of(&kernel(&file.kernel), &file);
        let k = compile_ptx(&flat, GpuArch::Sm80, &CodegenOptions::default()).expect("PTX");
        assert_eq!(k.launches.len(), 1, "{name}");
        assert_eq!(k.launches[0].entry, k.entry);
        assert_eq!(k.entry, format!("lacuna_{}", file.kernel));
        assert_eq!(k.launches[0].launch, k.launch);
        assert_eq!(k.ptx.matches(".visible .entry ").count(), 1, "{name}");
    }
}

/// Matrices up to 80 columns, so that rows fall in every bucket (1 to 32 entries) and beyond
/// (split into chunks of 32): random row lengths, one long row among rows of at most one
/// entry, or mostly empty rows.
fn hyb_matrix() -> impl Strategy<Value = (usize, usize, Vec<Vec<(usize, f64)>>)> {
    (0usize..7, 0usize..80, 0u8..3).prop_flat_map(|(m, n, style)| {
        let rows = proptest::collection::vec(
            proptest::collection::btree_map(0..n.max(1), -4.0f64..4.0, 0..=n),
            m,
        );
        (Just(m), Just(n), rows).prop_map(move |(m, n, rows)| {
            let mut rows: Vec<Vec<(usize, f64)>> = rows
                .into_iter()
                .map(|r| {
                    if n == 0 {
                        vec![]
                    } else {
                        r.into_iter().collect()
                    }
                })
                .collect();
            match style {
                1 if m > 0 => {
                    rows[m / 2] = (0..n).map(|j| (j, j as f64 * 0.25 - 3.0)).collect();
                    for (i, r) in rows.iter_mut().enumerate() {
                        if i != m / 2 {
                            r.truncate(1);
                        }
                    }
                }
                2 => {
                    for (i, r) in rows.iter_mut().enumerate() {
                        if i % 3 != 1 {
                            r.clear();
                        }
                    }
                }
                _ => {}
            }
            (m, n, rows)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(16),
        ..ProptestConfig::default()
    })]

    /// The two launches under GPU semantics = the unscheduled kernel on the CPU.
    #[test]
    fn hyb_gpu_semantics_equal_cpu((m, n, rows) in hyb_matrix(), feat in 0usize..40) {
        let p = kernel("spmm");
        let inputs = inputs_for("spmm", m, n, feat, &rows);
        let want = cpu(&p, "spmm", &inputs);
        let got = run_on(&p, &hyb(), &inputs, Target::InterpGpu)
            .unwrap_or_else(|e| panic!("GPU semantics failed: {e}"));
        same(&format!("m={m} n={n} feat={feat}"), &got, &want);
    }
}

/// A 4 × 70 matrix: an empty row, a row of 70 entries (three chunks of the split part), a row
/// of 20 (bucket 17..33), a row of 1.
fn long_row_matrix() -> (usize, usize, Vec<Vec<(usize, f64)>>) {
    let long: Vec<(usize, f64)> = (0..70).map(|j| (j, 1.0 + j as f64 / 8.0)).collect();
    let mid: Vec<(usize, f64)> = (0..20).map(|j| (3 * j, -0.5 * j as f64)).collect();
    (4, 70, vec![vec![], long, mid, vec![(69, 2.0)]])
}

#[test]
fn hyb_gpu_edge_matrices() {
    let p = kernel("spmm");
    let (lm, ln, lrows) = long_row_matrix();
    for (m, n, rows) in [
        (0, 0, vec![]),
        (3, 5, vec![vec![], vec![], vec![]]),
        (lm, ln, lrows),
    ] {
        for feat in [1, 32, 33] {
            let inputs = inputs_for("spmm", m, n, feat, &rows);
            let got = run_on(&p, &hyb(), &inputs, Target::InterpGpu).expect("GPU semantics");
            same(
                &format!("m={m} n={n} feat={feat}"),
                &got,
                &cpu(&p, "spmm", &inputs),
            );
        }
    }
}

#[test]
fn hyb_gpu_without_its_launch_boundary_races() {
    let mut file = hyb();
    let before = file.trace.len();
    file.trace
        .retain(|i| !matches!(i, Instruction::Annotate { key, .. } if key == "launch"));
    assert_eq!(file.trace.len(), before - 1);
    let (m, n, rows) = long_row_matrix();
    let inputs = inputs_for("spmm", m, n, 8, &rows);
    // The CPU runs the nests one after another: fine.
    same(
        "cpu",
        &run_on(&kernel("spmm"), &file, &inputs, Target::Jit).expect("CPU"),
        &cpu(&kernel("spmm"), "spmm", &inputs),
    );
    // One launch: a block's part accumulates into a row another block zeroes.
    let e = run_on(&kernel("spmm"), &file, &inputs, Target::InterpGpu).expect_err("a race");
    assert!(
        matches!(e, DriverError::Interp2(Stage2InterpError::GpuRace { ref buffer, .. }) if buffer == "C"),
        "{e}"
    );
}

fn force_bound(body: &mut [Stmt], var: &str, axis: GpuAxis) -> bool {
    let mut found = false;
    for s in body.iter_mut() {
        if let Stmt::For { var: v, kind, .. } = s {
            if v == var {
                *kind = ForKind::Bound(axis);
                found = true;
            }
        }
        found |= match s {
            Stmt::For { body, .. } | Stmt::While { body, .. } | Stmt::Attr { body, .. } => {
                force_bound(body, var, axis)
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => force_bound(then_body, var, axis) | force_bound(else_body, var, axis),
            Stmt::Block { init, body, .. } => {
                force_bound(init, var, axis) | force_bound(body, var, axis)
            }
            _ => false,
        };
    }
    found
}

/// Without `atomic` on the split rows, `bind` refuses to spread the split part's rows over
/// threadIdx.y (naming the loop); bound by hand anyway, the chunks of a long row, in different
/// threads, race on its row of C.
#[test]
fn hyb_gpu_without_atomic_split_rows_races() {
    let p = kernel("spmm");
    let mut file = hyb();
    file.trace
        .retain(|i| !matches!(i, Instruction::Annotate { key, .. } if key == "atomic"));
    let e = Schedule::replay(&p, &file.trace).expect_err("bind refuses");
    let msg = e.to_string();
    assert!(
        msg.contains("i.p6.1") && msg.contains("threadIdx.y"),
        "{msg}"
    );
    // Replay without those bindings and the boundary, then bind by hand as a buggy schedule
    // would.
    let forced = ["i.p6.1", "i.p0.0_hfused"];
    let unbound: Vec<Instruction> = file
        .trace
        .iter()
        .filter(|i| {
            !matches!(i, Instruction::Bind { r#loop, .. } if forced.contains(&r#loop.as_str()))
                && !matches!(i, Instruction::Annotate { key, .. } if key == "launch")
        })
        .cloned()
        .collect();
    assert_eq!(unbound.len(), file.trace.len() - 3);
    let mut s = Schedule::replay(&p, &unbound).expect("replays");
    s.apply(Instruction::Annotate {
        r#loop: "i.p0.0_hfused".into(),
        key: "launch".into(),
        value: 0,
    })
    .expect("a top-level loop");
    let mut stage2 = s.stage2().expect("stage 2");
    assert!(force_bound(&mut stage2.body, "i.p6.1", GpuAxis::ThreadY));
    assert!(force_bound(
        &mut stage2.body,
        "i.p0.0_hfused",
        GpuAxis::BlockX
    ));
    let flat = lower_to_flat(stage2, &Config::default(), &mut |_, _| {}).expect("flat");
    // Bind the data as the driver does (the parts from the conversion, values copied).
    let plain = ScheduleFile {
        trace: unbound,
        ..file
    };
    let (scheduled, exe, conversions) =
        Executable::build_converting(&p, Some(&plain), Target::Interp).expect("builds");
    let (m, n, rows) = long_row_matrix();
    let inputs = inputs_for("spmm", m, n, 3, &rows);
    let given = lacuna::driver::convert_inputs(&conversions, &inputs).expect("converts");
    let mut b =
        lacuna::stage1::bind_with(&scheduled, &inputs, &BTreeMap::new(), given).expect("binds");
    reset_outputs(&scheduled, &mut b);
    exe.run_preprocess(&scheduled, &mut b).expect("value copy");
    let e = interpret_gpu(&flat, &mut b).expect_err("split chunks race");
    assert!(
        matches!(e, Stage2InterpError::GpuRace { ref buffer, .. } if buffer == "C"),
        "{e}"
    );
    assert!(e.to_string().contains("launch 1 block"), "{e}");
}

/// BSR(2) + remainder in three launches, each nest with its own grid (no row ownership shared
/// between nests): three entries; GPU semantics equal the CPU; without the boundaries the
/// nests race on C.
#[test]
fn bsr_in_three_launches() {
    let file = schedule("spmm_bsr_gpu_shared_launches.ron");
    let p = kernel("spmm");
    let flat = flat_of(&p, &file);
    for arch in [GpuArch::Sm80, GpuArch::Sm90] {
        let k = compile_ptx(&flat, arch, &CodegenOptions::default()).expect("PTX");
        let entries: Vec<&str> = k.launches.iter().map(|l| l.entry.as_str()).collect();
        assert_eq!(
            entries,
            ["lacuna_spmm_k0", "lacuna_spmm_k1", "lacuna_spmm_k2"]
        );
        // Only launch 1 stages B in shared memory behind barriers.
        let (k1, k2) = (
            k.ptx.find(".entry lacuna_spmm_k1(").expect("k1"),
            k.ptx.find(".entry lacuna_spmm_k2(").expect("k2"),
        );
        assert!(k.ptx[k1..k2].contains("bar.sync"));
        assert!(!k.ptx[..k1].contains("bar.sync") && !k.ptx[k2..].contains("bar.sync"));
        assemble_ptx(&k.ptx, arch, "spmm_bsr_gpu_shared_launches");
    }
    let mut rows = long_row_matrix().2;
    rows.push(vec![(0, 1.5), (1, -2.0), (68, 0.5)]);
    let inputs = inputs_for("spmm", 5, 70, 33, &rows);
    let got = run_on(&p, &file, &inputs, Target::InterpGpu).expect("GPU semantics");
    same("bsr launches", &got, &cpu(&p, "spmm", &inputs));
    let mut one = file.clone();
    one.trace
        .retain(|i| !matches!(i, Instruction::Annotate { key, .. } if key == "launch"));
    assert_eq!(one.trace.len(), file.trace.len() - 2);
    let e = run_on(&p, &one, &inputs, Target::InterpGpu).expect_err("one launch races");
    assert!(
        matches!(e, DriverError::Interp2(Stage2InterpError::GpuRace { ref buffer, .. }) if buffer == "C"),
        "{e}"
    );
}

/// A group of a bucket's rows may be bound to threadIdx.y when the bucket holds whole rows
/// (distinct rows: the ELL row ids decide the rows written); a bucket whose rows continue in a
/// later part is refused, naming the loop.
#[test]
fn row_groups_of_whole_row_buckets_bind_to_threads() {
    let p = kernel("spmm");
    let trace = |term: &str| {
        vec![
            Instruction::DecomposeFormat {
                buffer: "A".into(),
                into: term.into(),
            },
            Instruction::Split {
                r#loop: "i.p0".into(),
                factors: vec![None, Some(4)],
            },
            Instruction::Bind {
                r#loop: "i.p0.1".into(),
                thread: "threadIdx.y".into(),
            },
        ]
    };
    Schedule::replay(&p, &trace("(+ (bucket 1 3 (ell 2)) remainder)")).expect("whole rows");
    let e = Schedule::replay(&p, &trace("(+ (bucket 1 3 (ell 1)) remainder)"))
        .expect_err("rows continue in the remainder");
    assert!(e.to_string().contains("i.p0.1"), "{e}");
}

#[test]
fn launch_annotation_needs_a_top_level_loop() {
    let p = kernel("spmm");
    let file = hyb();
    let mut s = Schedule::replay(&p, &file.trace[..4]).expect("prefix");
    let e = s
        .apply(Instruction::Annotate {
            r#loop: "spmm_init:k.1".into(),
            key: "launch".into(),
            value: 0,
        })
        .expect_err("nested loop");
    assert!(e.to_string().contains("top-level"), "{e}");
    let e = s
        .apply(Instruction::Annotate {
            r#loop: "spmm_init:i".into(),
            key: "launch".into(),
            value: 1,
        })
        .expect_err("value");
    assert!(e.to_string().contains("value 0"), "{e}");
}

#[test]
fn cli_prints_every_entry_of_the_module() {
    let bin = Path::new(env!("CARGO_BIN_EXE_lacuna"));
    let out = Command::new(bin)
        .current_dir(root())
        .args([
            "lower",
            "examples/spmm.ron",
            "--schedule",
            "examples/schedules/spmm_hyb_gpu.ron",
            "--stage",
            "ptx",
            "--target",
            "cuda:sm_90",
        ])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ptx = String::from_utf8_lossy(&out.stdout);
    assert!(ptx.contains(".target sm_90"));
    assert!(ptx.contains(".entry lacuna_spmm_k0(") && ptx.contains(".entry lacuna_spmm_k1("));
}

/// Without a CUDA driver the multi-launch executable fails with the typed error; with one,
/// the launches run in order and equal the CPU.
#[test]
fn cuda_runs_the_launches_or_reports_no_driver() {
    let p = kernel("spmm");
    let (m, n, rows) = long_row_matrix();
    let inputs = inputs_for("spmm", m, n, 40, &rows);
    match cuda_available() {
        Err(CudaError::NoDriver { reason }) => {
            println!("SKIPPED (GPU part): no CUDA driver on this machine: {reason}");
            let e =
                run_on(&p, &hyb(), &inputs, Target::Cuda(GpuArch::Sm80)).expect_err("no driver");
            assert!(
                matches!(e, DriverError::Cuda(CudaError::NoDriver { .. })),
                "{e}"
            );
        }
        Err(other) => {
            println!("SKIPPED (GPU part): the CUDA driver is present but unusable: {other}");
            let e = run_on(&p, &hyb(), &inputs, Target::Cuda(GpuArch::Sm80))
                .expect_err("an unusable driver fails cleanly");
            assert!(matches!(e, DriverError::Cuda(_)), "{e}");
        }
        Ok(()) => {
            let got = run_on(&p, &hyb(), &inputs, Target::Cuda(GpuArch::Sm80)).expect("GPU run");
            same("cuda", &got, &cpu(&p, "spmm", &inputs));
        }
    }
}
