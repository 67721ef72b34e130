//! GPU functions of several kernel launches, and the hyb SpMM GPU schedule
//! (`examples/schedules/spmm_hyb_gpu.ron`) that needs them: its PTX has one entry per launch
//! and assembles with `ptxas` for sm_80 and sm_90; the interpreter's GPU semantics (launches in
//! order, races checked per launch) equal the unscheduled kernel on the CPU on random matrices
//! with empty rows, long (split) rows and nnz = 0; dropping the launch boundary or the atomic
//! annotation of the split rows is a race (or refused by `bind`); single-launch schedules keep
//! their plain entry.

mod common;

use common::*;
use lacuna::driver::{reset_outputs, DriverError, Executable, Target};
use lacuna::schedule::{Instruction, Schedule, ScheduleFile};
use lacuna::stage1::{unpack, Input, Output, Program};
use lacuna::stage2::{
    interpret_gpu, lower_to_flat, Config, ForKind, Func, GpuAxis, Stage2InterpError, Stmt,
};
use lacuna::target::{compile_ptx, cuda_available, CodegenOptions, CudaError, GpuArch};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn schedule(name: &str) -> ScheduleFile {
    lacuna::driver::load_schedule(&root().join("examples/schedules").join(name)).expect("loads")
}

fn hyb() -> ScheduleFile {
    schedule("spmm_hyb_gpu.ron")
}

fn flat_of(p: &Program, file: &ScheduleFile) -> Func {
    let s = Schedule::replay(p, &file.trace).expect("the schedule applies");
    lower_to_flat(
        s.stage2().expect("lowers"),
        &Config::default(),
        &mut |_, _| {},
    )
    .expect("flattens")
}

/// `ptxas` from the PyPI wheel `nvidia-cuda-nvcc-cu12` in `.venv`, or `$PTXAS`.
fn ptxas() -> PathBuf {
    if let Ok(p) = std::env::var("PTXAS") {
        return PathBuf::from(p);
    }
    let lib = root().join(".venv/lib");
    for e in std::fs::read_dir(lib).into_iter().flatten().flatten() {
        let p = e.path().join("site-packages/nvidia/cuda_nvcc/bin/ptxas");
        if p.is_file() {
            return p;
        }
    }
    panic!("ptxas not found: run ./scripts/setup (installs nvidia-cuda-nvcc-cu12 into .venv) or set PTXAS")
}

fn assemble(ptx: &str, arch: GpuArch, stem: &str) {
    let tmp = std::env::temp_dir().join(format!("lacuna-gpulaunch-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("temp dir");
    let file = tmp.join(format!("{stem}.{}.ptx", arch.name()));
    std::fs::write(&file, ptx).expect("writes PTX");
    let out = Command::new(ptxas())
        .arg(format!("-arch={}", arch.name()))
        .arg(&file)
        .arg("-o")
        .arg(tmp.join(format!("{stem}.{}.cubin", arch.name())))
        .output()
        .expect("ptxas runs");
    assert!(
        out.status.success(),
        "ptxas -arch={} rejected {stem}:\n{}",
        arch.name(),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&tmp);
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
        // Both launches: 32 threads per block on x, the grid on blockIdx.x.
        assert_eq!(k.ptx.matches(".maxntid 32, 1, 1").count(), 2);
        for l in &k.launches {
            let axes: Vec<GpuAxis> = l.launch.bound_axes().collect();
            assert_eq!(axes, [GpuAxis::BlockX, GpuAxis::ThreadX], "{}", l.entry);
        }
        assemble(&k.ptx, arch, "spmm_hyb_gpu");
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

fn inputs(m: usize, n: usize, feat: usize, rows: &[Vec<(usize, f64)>]) -> BTreeMap<String, Input> {
    BTreeMap::from([
        ("A".to_string(), Input::Coo(to_coo(m, n, rows))),
        ("B".to_string(), dense(&[n, feat], values(n * feat, 7))),
    ])
}

/// Runs a scheduled kernel on `target`; its output.
fn run_on(
    p: &Program,
    file: &ScheduleFile,
    inputs: &BTreeMap<String, Input>,
    target: Target,
) -> Result<Output, DriverError> {
    let (scheduled, exe, conversions) = Executable::build_converting(p, Some(file), target)?;
    let given = lacuna::driver::convert_inputs(&conversions, inputs).expect("converts");
    let mut b =
        lacuna::stage1::bind_with(&scheduled, inputs, &BTreeMap::new(), given).expect("binds");
    reset_outputs(&scheduled, &mut b);
    exe.run(&scheduled, &mut b)?;
    Ok(unpack(&scheduled, &b, "C").expect("unpacks"))
}

/// The unscheduled kernel on the CPU (JIT).
fn cpu(p: &Program, inputs: &BTreeMap<String, Input>) -> Output {
    let plain = ScheduleFile {
        trace: vec![],
        ..hyb()
    };
    run_on(p, &plain, inputs, Target::Jit).expect("CPU run")
}

fn same(what: &str, got: &Output, want: &Output) {
    let (g, w) = (got.values().to_f64_vec(), want.values().to_f64_vec());
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(g.len(), w.len(), "{what}: number of values");
    for (i, (x, y)) in g.iter().zip(&w).enumerate() {
        assert!(close(*x, *y), "{what}: value {i}: {x} vs CPU {y}");
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
        let inputs = inputs(m, n, feat, &rows);
        let want = cpu(&p, &inputs);
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
            let inputs = inputs(m, n, feat, &rows);
            let got = run_on(&p, &hyb(), &inputs, Target::InterpGpu).expect("GPU semantics");
            same(&format!("m={m} n={n} feat={feat}"), &got, &cpu(&p, &inputs));
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
    let inputs = inputs(m, n, 8, &rows);
    // The CPU runs the nests one after another: fine.
    same(
        "cpu",
        &run_on(&kernel("spmm"), &file, &inputs, Target::Jit).expect("CPU"),
        &cpu(&kernel("spmm"), &inputs),
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

/// Without `atomic` on the split rows, `bind` refuses the fused loop (naming the part); bound
/// by hand anyway, the chunks of a long row, in different grid blocks, race on its row of C.
#[test]
fn hyb_gpu_without_atomic_split_rows_races() {
    let p = kernel("spmm");
    let mut file = hyb();
    file.trace
        .retain(|i| !matches!(i, Instruction::Annotate { key, .. } if key == "atomic"));
    let e = Schedule::replay(&p, &file.trace).expect_err("bind refuses");
    let msg = e.to_string();
    assert!(msg.contains("i.p0_hfused") && msg.contains("i.p6"), "{msg}");
    // Replay without the binding and the boundary, then bind by hand as a buggy schedule would.
    let unbound: Vec<Instruction> = file
        .trace
        .iter()
        .filter(|i| {
            !matches!(i, Instruction::Bind { r#loop, .. } if r#loop == "i.p0_hfused")
                && !matches!(i, Instruction::Annotate { key, .. } if key == "launch")
        })
        .cloned()
        .collect();
    let mut s = Schedule::replay(&p, &unbound).expect("replays");
    s.apply(Instruction::Annotate {
        r#loop: "i.p0_hfused".into(),
        key: "launch".into(),
        value: 0,
    })
    .expect("a top-level loop");
    let mut stage2 = s.stage2().expect("stage 2");
    assert!(force_bound(
        &mut stage2.body,
        "i.p0_hfused",
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
    let inputs = inputs(m, n, 3, &rows);
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
        assemble(&k.ptx, arch, "spmm_bsr_gpu_shared_launches");
    }
    let mut rows = long_row_matrix().2;
    rows.push(vec![(0, 1.5), (1, -2.0), (68, 0.5)]);
    let inputs = inputs(5, 70, 33, &rows);
    let got = run_on(&p, &file, &inputs, Target::InterpGpu).expect("GPU semantics");
    same("bsr launches", &got, &cpu(&p, &inputs));
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
    let inputs = inputs(m, n, 40, &rows);
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
            same("cuda", &got, &cpu(&p, &inputs));
        }
    }
}
