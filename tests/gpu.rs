//! GPU schedules without a GPU: every `examples/schedules/*_gpu*.ron` lowers to PTX that
//! NVIDIA's `ptxas` assembles for sm_80 and sm_90; the stage-II interpreter's GPU semantics
//! (every thread of the launch, races checked) equals the CPU result on random matrices
//! (empty rows, nnz = 0 included); racy schedules are flagged; the CUDA launcher fails with a
//! typed "no CUDA driver" error where no driver exists, and GPU runs report themselves skipped.

mod common;

use common::gpu::*;
use common::*;
use lacuna::driver::{DriverError, Target};
use lacuna::schedule::{Instruction, Schedule, ScheduleFile};
use lacuna::stage1::{Input, Program};
use lacuna::stage2::{interpret_gpu, ForKind, Func, GpuAxis, Stage2InterpError, Stmt};
use lacuna::target::{compile_ptx, cuda_available, CodegenOptions, CudaError, GpuArch};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The GPU example schedules, with their kernels' names.
fn gpu_schedules() -> Vec<(PathBuf, ScheduleFile)> {
    let dir = root().join("examples/schedules");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).expect("examples/schedules") {
        let path = e.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.contains("_gpu") && name.ends_with(".ron") {
            let file = lacuna::driver::load_schedule(&path).expect("GPU schedules load");
            out.push((path, file));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn gpu_examples_exist() {
    let names: Vec<String> = gpu_schedules()
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "spmm_gpu_naive.ron",
        "spmv_gpu_thread_row.ron",
        "sddmm_gpu.ron",
        "spmv_gpu_warp_row.ron",
        "sddmm_gpu_rfactor.ron",
        "spmm_bsr_gpu_shared.ron",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
}

#[test]
fn ptx_of_every_gpu_example_assembles_with_ptxas() {
    for (path, file) in gpu_schedules() {
        let p = kernel(&file.kernel);
        let (_, flat) = scheduled_flat(&p, &file);
        for arch in [GpuArch::Sm80, GpuArch::Sm90] {
            let k = compile_ptx(&flat, arch, &CodegenOptions::default()).expect("PTX");
            assert!(k.ptx.contains(&format!(".target {}", arch.name())));
            assert!(k.ptx.contains(&format!(".visible .entry {}(", k.entry)));
            assert!(
                k.ptx.contains("%tid.") && k.ptx.contains("%ctaid."),
                "{path:?}: the kernel reads its thread and block indices"
            );
            let stem = path.file_stem().unwrap().to_string_lossy();
            if stem.contains("warp") || stem.contains("rfactor") {
                assert!(
                    k.ptx.contains("shfl.sync.down.b32"),
                    "{path:?}: a warp reduction by shuffles"
                );
            }
            if stem.contains("shared") {
                assert!(
                    k.ptx.contains(".shared") && k.ptx.contains("bar.sync"),
                    "{path:?}: a shared-memory cache with barriers"
                );
            }
            assemble_ptx(&k.ptx, arch, &stem);
        }
    }
}

#[test]
fn constant_blocks_carry_launch_bounds() {
    let file = lacuna::driver::load_schedule(&root().join("examples/schedules/spmm_gpu_naive.ron"))
        .expect("loads");
    let (_, flat) = scheduled_flat(&kernel("spmm"), &file);
    let k = compile_ptx(&flat, GpuArch::Sm90, &CodegenOptions::default()).expect("PTX");
    assert!(k.ptx.contains(".maxntid 32, 8, 1"), "{}", k.ptx);
    let ir = lacuna::target::emit_nvptx_ir(
        &flat,
        GpuArch::Sm90,
        &CodegenOptions {
            optimized_ir: false,
            ..CodegenOptions::default()
        },
    )
    .expect("IR");
    assert!(ir.contains("ptx_kernel void @lacuna_spmm(ptr addrspace(1) noalias"));
    assert!(ir.contains("llvm.nvvm.read.ptx.sreg.tid.x"));
    assert!(ir.contains("!\"kernel\", i32 1"));
}

/// The CPU result a GPU schedule must reproduce: the schedule on the JIT, or the unscheduled
/// kernel on the JIT where the schedule has barriers (shared-memory caches) or dynamic shared
/// memory, which CPU code refuses (a typed GPU-only error).
fn cpu_reference(
    p: &Program,
    file: &ScheduleFile,
    inputs: &BTreeMap<String, Input>,
) -> lacuna::stage1::Output {
    match run_on(p, file, inputs, Target::Jit) {
        Ok(out) => out,
        Err(e) if e.to_string().contains("barrier") || e.to_string().contains("GPU-only") => {
            let plain = ScheduleFile {
                trace: vec![],
                ..file.clone()
            };
            run_on(p, &plain, inputs, Target::Jit).expect("unscheduled CPU run")
        }
        Err(e) => panic!("CPU run: {e}"),
    }
}

proptest! {
    #![proptest_config(cases_config(24))]

    /// GPU semantics = CPU (JIT) result for every GPU example.
    #[test]
    fn interpreter_gpu_semantics_equal_cpu((m, n, rows) in sparse_matrix(), feat in 0usize..40) {
        for (path, file) in gpu_schedules() {
            let p = kernel(&file.kernel);
            let inputs = inputs_for(&file.kernel, m, n, feat, &rows);
            let want = cpu_reference(&p, &file, &inputs);
            let got = run_on(&p, &file, &inputs, Target::InterpGpu)
                .unwrap_or_else(|e| panic!("{path:?}: GPU semantics failed: {e}"));
            same(&format!("{path:?} m={m} n={n} feat={feat}"), &got, &want);
        }
    }
}

#[test]
fn empty_matrix_and_empty_rows_under_gpu_semantics() {
    for (m, n, rows) in [
        (0, 0, vec![]),
        (3, 4, vec![vec![], vec![], vec![]]),
        (
            4,
            2,
            vec![vec![], vec![(1, 2.0)], vec![], vec![(0, -1.0), (1, 0.5)]],
        ),
    ] {
        for (path, file) in gpu_schedules() {
            let p = kernel(&file.kernel);
            let inputs = inputs_for(&file.kernel, m, n, 33, &rows);
            let want = cpu_reference(&p, &file, &inputs);
            let got = run_on(&p, &file, &inputs, Target::InterpGpu).expect("GPU semantics");
            same(&format!("{path:?} m={m}"), &got, &want);
        }
    }
}

fn small_rows() -> Vec<Vec<(usize, f64)>> {
    vec![
        vec![(0, 1.0), (2, 2.0)],
        vec![(1, 3.0)],
        vec![(0, 4.0), (1, 5.0)],
    ]
}

/// A non-atomic scatter: COO SpMV with the nonzeros spread over threads, each adding its
/// product into `y[row[p]]` with a plain load and store. `bind` would refuse such a loop (its
/// writes to `y` do not vary injectively with the loop), so the function is written by hand, as
/// a buggy schedule would produce it. Rows 0 and 2 have two entries each: two threads write
/// one element.
#[test]
fn non_atomic_scatter_is_flagged_as_a_race() {
    use lacuna::ir::{ArrayData, DType};
    use lacuna::stage1::{BinOp, Role};
    use lacuna::stage2::{BufferDecl, BufferKind, Expr};
    let decl = |name: &str, dtype, role| BufferDecl {
        name: name.into(),
        dtype,
        layout: vec![],
        kind: BufferKind::Values(role),
    };
    let load = |b: &str, i: Expr| Expr::Load {
        buffer: b.into(),
        indices: vec![i],
    };
    let row = Expr::Cast(DType::I64, Box::new(load("row", Expr::var("p"))));
    let col = Expr::Cast(DType::I64, Box::new(load("col", Expr::var("p"))));
    let scatter = Stmt::Store {
        buffer: "y".into(),
        indices: vec![row.clone()],
        value: Expr::add(
            load("y", row),
            Expr::bin(BinOp::Mul, load("val", Expr::var("p")), load("x", col)),
        ),
    };
    let f = Func {
        scratch: vec![],
        name: "coo_spmv_scatter".into(),
        params: vec!["nnz".into()],
        axes: vec![],
        buffers: vec![
            decl("row", DType::I32, Role::Input),
            decl("col", DType::I32, Role::Input),
            decl("val", DType::F64, Role::Input),
            decl("x", DType::F64, Role::Input),
            decl("y", DType::F64, Role::Output),
        ],
        body: vec![Stmt::For {
            var: "p".into(),
            start: Expr::i64(0),
            end: Expr::Param("nnz".into()),
            kind: ForKind::Bound(GpuAxis::ThreadX),
            body: vec![scatter],
        }],
    };
    let mut b = lacuna::stage1::Bindings::default();
    b.params.insert("nnz".into(), 5);
    b.buffers
        .insert("row".into(), ArrayData::I32(vec![0, 0, 1, 2, 2]));
    b.buffers
        .insert("col".into(), ArrayData::I32(vec![0, 2, 1, 0, 1]));
    b.buffers
        .insert("val".into(), ArrayData::F64(vec![1.0, 2.0, 3.0, 4.0, 5.0]));
    b.buffers
        .insert("x".into(), ArrayData::F64(vec![1.0, 1.0, 1.0]));
    b.buffers.insert("y".into(), ArrayData::F64(vec![0.0; 3]));
    // Serially (the CPU's reading of a bound loop) the scatter is fine...
    let mut serial = b.clone();
    lacuna::stage2::interpret_func(&f, &mut serial)
        .expect_err("the per-loop race check sees it too");
    // ...but under GPU semantics threads 0 and 1 both update y[0].
    let e = interpret_gpu(&f, &mut b).expect_err("a race");
    assert!(
        matches!(e, Stage2InterpError::GpuRace { ref buffer, index: 0, .. } if buffer == "y"),
        "{e}"
    );
    assert!(e.to_string().contains("race between GPU threads"), "{e}");
    assert!(
        e.to_string().contains("thread (0, 0, 0)") && e.to_string().contains("thread (1, 0, 0)"),
        "{e}"
    );
    // The same scatter with one entry per row is race-free and computes y.
    b.params.insert("nnz".into(), 3);
    b.buffers
        .insert("row".into(), ArrayData::I32(vec![0, 1, 2]));
    b.buffers.insert("y".into(), ArrayData::F64(vec![0.0; 3]));
    interpret_gpu(&f, &mut b).expect("no race");
    assert_eq!(b.buffers["y"], ArrayData::F64(vec![1.0, 2.0, 3.0]));
}

/// Binding only the compute loop of SpMM to threadIdx.x leaves the init loop to every thread:
/// `bind` accepts each binding, but under GPU semantics thread 1 zeroes what thread 0 has
/// accumulated. The interpreter reports it.
#[test]
fn unbound_init_loop_is_a_race_between_threads() {
    let p = kernel("spmm");
    let file = ScheduleFile {
        version: 1,
        kernel: "spmm".into(),
        trace: vec![
            Instruction::Bind {
                r#loop: "spmm:i".into(),
                thread: "blockIdx.x".into(),
            },
            Instruction::Bind {
                r#loop: "spmm:k".into(),
                thread: "threadIdx.x".into(),
            },
        ],
    };
    let (m, n, feat) = (3, 3, 4);
    let inputs = inputs_for("spmm", m, n, feat, &small_rows());
    // The CPU (serial) code is fine.
    run_on(&p, &file, &inputs, Target::Jit).expect("CPU run");
    let e = run_on(&p, &file, &inputs, Target::InterpGpu).expect_err("a race on C");
    assert!(
        matches!(e, DriverError::Interp2(Stage2InterpError::GpuRace { ref buffer, .. }) if buffer == "C"),
        "{e}"
    );
}

fn force_bind(body: &mut [Stmt], var: &str, axis: GpuAxis) {
    for s in body {
        match s {
            Stmt::For {
                var: v, kind, body, ..
            } => {
                if v == var {
                    *kind = ForKind::Bound(axis);
                }
                force_bind(body, var, axis);
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                force_bind(then_body, var, axis);
                force_bind(else_body, var, axis);
            }
            Stmt::While { body, .. } => force_bind(body, var, axis),
            Stmt::Block { init, body, .. } => {
                force_bind(init, var, axis);
                force_bind(body, var, axis);
            }
            _ => {}
        }
    }
}

/// A bound loop whose extent depends on another loop cannot be launched: a typed error.
#[test]
fn data_dependent_launch_extent_is_rejected() {
    let p = kernel("spmm");
    let file = ScheduleFile {
        version: 1,
        kernel: "spmm".into(),
        trace: vec![Instruction::Bind {
            r#loop: "spmm:j".into(),
            thread: "threadIdx.x".into(),
        }],
    };
    // `bind` itself refuses j (a reduction); build the function by hand instead.
    assert!(Schedule::replay(&p, &file.trace).is_err());
    let (_, mut flat) = scheduled_flat(
        &p,
        &ScheduleFile {
            trace: vec![],
            ..file
        },
    );
    force_bind(&mut flat.body, "j", GpuAxis::ThreadX);
    let e = compile_ptx(&flat, GpuArch::Sm80, &CodegenOptions::default()).expect_err("rejected");
    assert!(e.to_string().contains("launch extent"), "{e}");
}

/// On a machine without a CUDA driver the launcher fails with a typed, clear error; with a
/// driver, the GPU result equals the CPU result. Either way this test checks something, and
/// says which.
#[test]
fn cuda_launcher_runs_or_reports_no_driver() {
    let file = lacuna::driver::load_schedule(&root().join("examples/schedules/spmm_gpu_naive.ron"))
        .expect("loads");
    let p = kernel("spmm");
    let inputs = inputs_for("spmm", 3, 3, 40, &small_rows());
    match cuda_available() {
        Err(CudaError::NoDriver { reason }) => {
            println!("SKIPPED (GPU part): no CUDA driver on this machine: {reason}");
            let e = run_on(&p, &file, &inputs, Target::Cuda(GpuArch::Sm80))
                .expect_err("no driver: the cuda target must fail");
            assert!(
                matches!(e, DriverError::Cuda(CudaError::NoDriver { .. })),
                "{e}"
            );
            assert!(e.to_string().starts_with("no CUDA driver"), "{e}");
        }
        Err(other) => {
            println!("SKIPPED (GPU part): the CUDA driver is present but unusable: {other}");
            let e = run_on(&p, &file, &inputs, Target::Cuda(GpuArch::Sm80))
                .expect_err("an unusable driver fails cleanly");
            assert!(matches!(e, DriverError::Cuda(_)), "{e}");
        }
        Ok(()) => {
            let want = cpu_reference(&p, &file, &inputs);
            let got = run_on(&p, &file, &inputs, Target::Cuda(GpuArch::Sm80)).expect("GPU run");
            same("cuda", &got, &want);
        }
    }
}

#[test]
fn cli_prints_ptx_and_reports_no_driver() {
    let bin = Path::new(env!("CARGO_BIN_EXE_lacuna"));
    let out = Command::new(bin)
        .current_dir(root())
        .args([
            "lower",
            "examples/spmm.ron",
            "--schedule",
            "examples/schedules/spmm_gpu_naive.ron",
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
    assert!(ptx.contains(".target sm_90") && ptx.contains(".entry lacuna_spmm("));
    let bad = Command::new(bin)
        .current_dir(root())
        .args([
            "lower",
            "examples/spmm.ron",
            "--stage",
            "ptx",
            "--target",
            "cuda:sm_42",
        ])
        .output()
        .expect("runs");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown GPU target"));
    if let Err(CudaError::NoDriver { .. }) = cuda_available() {
        let run = Command::new(bin)
            .current_dir(root())
            .args([
                "run",
                "examples/spmv.ron",
                "--schedule",
                "examples/schedules/spmv_gpu_thread_row.ron",
                "--input",
                "A=tests/data/lp_afiro.mtx",
                "--target",
                "cuda",
            ])
            .output()
            .expect("runs");
        assert!(!run.status.success());
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(err.contains("no CUDA driver"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// A hand-written kernel with every GPU construct: a shared tile staged behind a barrier, a
/// warp reduction by shuffles (f64 and f32), atomic adds (f64 and f32), local scratch. Its
/// PTX has the expected instructions and `ptxas` assembles it for sm_80 and sm_90; on the
/// CPU the barrier and shuffles are typed errors.
#[test]
fn shared_barrier_shuffle_atomic_reach_ptx() {
    use lacuna::ir::DType;
    use lacuna::stage1::{BinOp, Role};
    use lacuna::stage2::{
        AtomicOp, BufferDecl, BufferKind, Expr, MemScope, ScratchDecl, ShuffleKind,
    };
    let decl = |name: &str, dtype, role| BufferDecl {
        name: name.into(),
        dtype,
        layout: vec![],
        kind: BufferKind::Values(role),
    };
    let load = |b: &str, i: Expr| Expr::Load {
        buffer: b.into(),
        indices: vec![i],
    };
    let bound = |var: &str, n: Expr, axis, body| Stmt::For {
        var: var.into(),
        start: Expr::i64(0),
        end: n,
        kind: ForKind::Bound(axis),
        body,
    };
    let g = Expr::add(Expr::mul(Expr::var("b"), Expr::i64(64)), Expr::var("t"));
    let mut lane_body = vec![
        Stmt::Alloc {
            buffer: "acc".into(),
            dtype: DType::F64,
            extent: Expr::i64(1),
            scope: MemScope::Local,
        },
        Stmt::Store {
            buffer: "acc".into(),
            indices: vec![Expr::i64(0)],
            value: load("tile", Expr::sub(Expr::i64(63), Expr::var("t"))),
        },
        Stmt::Let {
            var: "v0".into(),
            value: load("acc", Expr::i64(0)),
        },
    ];
    for (k, off) in [16i64, 8, 4, 2, 1].into_iter().enumerate() {
        lane_body.push(Stmt::Let {
            var: format!("v{}", k + 1),
            value: Expr::add(
                Expr::var(&format!("v{k}")),
                Expr::Shuffle {
                    kind: ShuffleKind::Down,
                    value: Box::new(Expr::var(&format!("v{k}"))),
                    lane: Box::new(Expr::i64(off)),
                    width: 32,
                },
            ),
        });
    }
    lane_body.push(Stmt::Let {
        var: "f".into(),
        value: Expr::Shuffle {
            kind: ShuffleKind::Xor,
            value: Box::new(Expr::Cast(DType::F32, Box::new(Expr::var("v0")))),
            lane: Box::new(Expr::i64(1)),
            width: 32,
        },
    });
    // Lane 0 of each warp adds the warp's sum.
    let lane = Expr::sub(
        Expr::var("t"),
        Expr::mul(
            Expr::bin(BinOp::Div, Expr::var("t"), Expr::i64(32)),
            Expr::i64(32),
        ),
    );
    lane_body.push(Stmt::If {
        cond: Expr::bin(BinOp::Eq, lane, Expr::i64(0)),
        then_body: vec![
            Stmt::Atomic {
                op: AtomicOp::Add,
                buffer: "y".into(),
                indices: vec![Expr::var("b")],
                value: Expr::var("v5"),
            },
            Stmt::Atomic {
                op: AtomicOp::Add,
                buffer: "z".into(),
                indices: vec![Expr::var("b")],
                value: Expr::var("f"),
            },
        ],
        else_body: vec![],
    });
    let f = Func {
        scratch: vec![
            ScratchDecl {
                name: "tile".into(),
                dtype: DType::F64,
                scope: MemScope::Shared,
            },
            ScratchDecl {
                name: "acc".into(),
                dtype: DType::F64,
                scope: MemScope::Local,
            },
        ],
        name: "all_constructs".into(),
        params: vec!["nb".into()],
        axes: vec![],
        buffers: vec![
            decl("x", DType::F64, Role::Input),
            decl("y", DType::F64, Role::Output),
            decl("z", DType::F32, Role::Output),
        ],
        body: vec![
            Stmt::Alloc {
                buffer: "tile".into(),
                dtype: DType::F64,
                extent: Expr::i64(64),
                scope: MemScope::Shared,
            },
            bound(
                "b",
                Expr::Param("nb".into()),
                GpuAxis::BlockX,
                vec![
                    bound(
                        "t",
                        Expr::i64(64),
                        GpuAxis::ThreadX,
                        vec![Stmt::Store {
                            buffer: "tile".into(),
                            indices: vec![Expr::var("t")],
                            value: load("x", g),
                        }],
                    ),
                    Stmt::Barrier,
                    bound("t", Expr::i64(64), GpuAxis::ThreadX, lane_body),
                ],
            ),
        ],
    };
    // The interpreter's GPU semantics: y[b] = the block's sum (its two warps each add theirs),
    // race-free.
    let mut bd = lacuna::stage1::Bindings::default();
    bd.params.insert("nb".into(), 2);
    let x: Vec<f64> = (0..128).map(|v| (v % 7) as f64).collect();
    bd.buffers
        .insert("x".into(), lacuna::ir::ArrayData::F64(x.clone()));
    bd.buffers
        .insert("y".into(), lacuna::ir::ArrayData::F64(vec![0.0; 2]));
    bd.buffers
        .insert("z".into(), lacuna::ir::ArrayData::F32(vec![0.0; 2]));
    interpret_gpu(&f, &mut bd).expect("GPU semantics");
    let y = bd.buffers["y"].to_f64_vec();
    for blk in 0..2 {
        let want: f64 = x[blk * 64..blk * 64 + 64].iter().sum();
        assert!(
            (y[blk] - want).abs() < 1e-9,
            "y[{blk}] = {} vs {want}",
            y[blk]
        );
    }
    for arch in [GpuArch::Sm80, GpuArch::Sm90] {
        let k = compile_ptx(&f, arch, &CodegenOptions::default()).expect("PTX");
        for want in [
            ".shared",
            "bar.sync",
            "shfl.sync.down.b32",
            "shfl.sync.bfly.b32",
            "atom.global.add.f64",
            "atom.global.add.f32",
            ".maxntid 64, 1, 1",
        ] {
            assert!(k.ptx.contains(want), "{want} missing in\n{}", k.ptx);
        }
        assemble_ptx(&k.ptx, arch, "all");
    }
    let e = lacuna::target::compile(&f, &CodegenOptions::default()).expect_err("CPU: GPU-only");
    assert!(e.to_string().contains("GPU-only"), "{e}");
}

/// The BSR shared-cache schedule without binding its copy loop to threadIdx.x: every thread
/// then copies the whole cache into the one shared buffer, which GPU semantics flag as a race;
/// and a shared cache under a loop bound to threadIdx is refused by the primitive.
#[test]
fn shared_cache_copy_must_be_distributed_over_threads() {
    let path = root().join("examples/schedules/spmm_bsr_gpu_shared.ron");
    let file = lacuna::driver::load_schedule(&path).expect("loads");
    let p = kernel("spmm");
    let rows = small_rows();
    let inputs = inputs_for("spmm", 3, 3, 5, &rows);
    let good = run_on(&p, &file, &inputs, Target::InterpGpu).expect("GPU semantics");
    same(
        "spmm_bsr_gpu_shared",
        &good,
        &cpu_reference(&p, &file, &inputs),
    );
    let mut racy = file.clone();
    racy.trace
        .retain(|i| !matches!(i, Instruction::Bind { r#loop, .. } if r#loop == "k.1.B_shared"));
    assert_eq!(racy.trace.len(), file.trace.len() - 1);
    let e = run_on(&p, &racy, &inputs, Target::InterpGpu).expect_err("a race on B_shared");
    assert!(e.to_string().contains("B_shared"), "{e}");
    // A shared cache inside the threads' loop.
    let at = file
        .trace
        .iter()
        .position(|i| matches!(i, Instruction::ReverseCacheRead { .. }))
        .expect("the cache");
    let mut s = Schedule::replay(&p, &file.trace[..at]).expect("prefix applies");
    let e = s
        .apply(Instruction::ReverseCacheRead {
            block: "spmm_p0".into(),
            buffer: "B".into(),
            scope: "shared".into(),
            at: Some("spmm_p0:k.1".into()),
        })
        .expect_err("inside threadIdx");
    assert!(e.to_string().contains("threadIdx"), "{e}");
}
