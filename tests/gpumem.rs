//! GPU memory without a GPU: dynamic (`extern`) shared memory, vectorized global loads and the
//! nnz-split SpMV schedule. PTX is assembled by NVIDIA's `ptxas` for sm_80 and sm_90, and the
//! stage-II interpreter's GPU semantics is compared with the CPU.

mod common;

use common::gpu::*;
use common::*;
use lacuna::driver::{reset_outputs, DriverError, Executable, Target};
use lacuna::ir::{ArrayData, DType};
use lacuna::schedule::{Instruction, Schedule, ScheduleFile};
use lacuna::stage1::{unpack, Input, Program, Role};
use lacuna::stage2::gpu::GpuError;
use lacuna::stage2::gpu_mem::shared_layout;
use lacuna::stage2::{
    interpret_gpu, BufferDecl, BufferKind, Expr, ForKind, Func, GpuAxis, MemScope, ScratchDecl,
    Stage2InterpError, Stmt,
};
use lacuna::target::{
    compile_ptx, with_cpu_vector_loads, CodegenError, CodegenOptions, GpuArch, GpuKernel,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Compiles `f` for both architectures, assembles each PTX with `ptxas`; the kernels.
fn assemble(what: &str, f: &Func) -> Vec<GpuKernel> {
    [GpuArch::Sm80, GpuArch::Sm90]
        .into_iter()
        .map(|arch| {
            let k = compile_ptx(f, arch, &CodegenOptions::default()).expect("PTX");
            assemble_ptx(&k.ptx, arch, what);
            k
        })
        .collect()
}

/// Bindings of the spmm kernel scheduled by `file` for a small matrix and `feat` features.
fn spmm_bindings(file: &ScheduleFile, feat: usize) -> (Program, lacuna::stage1::Bindings) {
    let p = kernel("spmm");
    let rows = vec![vec![(0, 1.0), (1, 2.0)], vec![(1, 3.0)], vec![]];
    let inputs = inputs_for("spmm", 3, 2, feat, &rows);
    let (scheduled, _, conversions) =
        Executable::build_converting(&p, Some(file), Target::InterpGpu).expect("builds");
    let given = lacuna::driver::convert_inputs(&conversions, &inputs).expect("converts");
    let b = lacuna::stage1::bind_with(&scheduled, &inputs, &BTreeMap::new(), given).expect("binds");
    (scheduled, b)
}

// ---------------------------------------------------------------------------------------
// 1. Dynamic shared memory
// ---------------------------------------------------------------------------------------

const DYN: &str = "spmm_bsr_gpu_shared_dyn.ron";

/// The cache of B under each nonzero block holds its 2 rows of B, 2 x ceil(feat / 32) x 32
/// values (no range checks: BSR's blocks tile the matrix, `lacuna_stage1::Tiles`): its
/// extent reads `feat`, so it is dynamic shared memory: `.extern .shared` in the PTX, which
/// `ptxas` assembles, and a launch size that follows `feat`.
#[test]
fn dynamic_shared_cache_reaches_ptx_and_sizes_with_feat() {
    let file = schedule(DYN);
    let p = kernel("spmm");
    let flat = flat_of(&p, &file);
    // CPU code has no dynamic shared memory: a typed GPU-only error.
    let e = lacuna::target::compile(&flat, &CodegenOptions::default()).expect_err("GPU-only");
    assert!(
        matches!(e, CodegenError::GpuOnly { what } if what.contains("dynamic shared")),
        "{e}"
    );
    let layout = shared_layout(&flat).expect("layout");
    assert!(layout.statics.is_empty(), "{layout:?}");
    assert_eq!(layout.dynamic.len(), 1, "{layout:?}");
    assert_eq!(layout.dynamic[0].buffer, "B_shared");
    for k in assemble("bsr_dyn", &flat) {
        assert!(
            k.ptx
                .contains(".extern .shared .align 16 .b8 lacuna_dynamic_shared[]"),
            "{}",
            k.ptx
        );
        assert!(k.ptx.contains("st.shared.f64") && k.ptx.contains("bar.sync"));
        for feat in [1usize, 31, 32, 33, 1000] {
            let (_, b) = spmm_bindings(&file, feat);
            let want = 2 * feat.div_ceil(32) * 32 * 8;
            assert_eq!(
                k.dynamic_shared_bytes(&b).expect("fits") as usize,
                want,
                "feat = {feat}"
            );
        }
    }
}

/// Too much shared memory for the architecture is a typed error at launch (and under GPU
/// semantics, which checks sm_90's limit), never a panic: 2 x 12032 doubles (188 KiB) fit
/// sm_90 (227 KiB) but not sm_80 (163 KiB); 2 x 16384 (256 KiB) fit neither.
#[test]
fn too_much_dynamic_shared_memory_is_a_typed_error() {
    let file = schedule(DYN);
    let flat = flat_of(&kernel("spmm"), &file);
    let sm80 = compile_ptx(&flat, GpuArch::Sm80, &CodegenOptions::default()).expect("PTX");
    let sm90 = compile_ptx(&flat, GpuArch::Sm90, &CodegenOptions::default()).expect("PTX");
    let (_, b) = spmm_bindings(&file, 12_032);
    let e = sm80
        .dynamic_shared_bytes(&b)
        .expect_err("over sm_80's limit");
    assert!(
        matches!(
            e,
            GpuError::SharedMemory {
                bytes: 192_512,
                limit: 166_912,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("sm_80"), "{e}");
    assert_eq!(sm90.dynamic_shared_bytes(&b).expect("fits sm_90"), 192_512);
    let (scheduled, b) = spmm_bindings(&file, 16_384);
    let e = sm90
        .dynamic_shared_bytes(&b)
        .expect_err("over sm_90's limit");
    assert!(
        matches!(
            e,
            GpuError::SharedMemory {
                bytes: 262_144,
                limit: 232_448,
                ..
            }
        ),
        "{e}"
    );
    let mut b2 = b.clone();
    reset_outputs(&scheduled, &mut b2);
    let e = interpret_gpu(&flat, &mut b2).expect_err("over the limit under GPU semantics");
    assert!(
        matches!(e, Stage2InterpError::Gpu(GpuError::SharedMemory { .. })),
        "{e}"
    );
}

fn decl(name: &str, dtype: DType, role: Role) -> BufferDecl {
    BufferDecl {
        name: name.into(),
        dtype,
        layout: vec![],
        kind: BufferKind::Values(role),
    }
}

fn load(b: &str, i: Expr) -> Expr {
    Expr::Load {
        buffer: b.into(),
        indices: vec![i],
    }
}

fn bound(var: &str, n: Expr, axis: GpuAxis, body: Vec<Stmt>) -> Stmt {
    Stmt::For {
        var: var.into(),
        start: Expr::i64(0),
        end: n,
        kind: ForKind::Bound(axis),
        body,
    }
}

/// A kernel that reverses each block's 64-element slice of `x` through shared buffers of
/// `extent` elements each: `s1` and `s2` (f64), staged behind barriers.
fn reverse_through_shared(extent: Expr) -> Func {
    let alloc = |name: &str| Stmt::Alloc {
        buffer: name.into(),
        dtype: DType::F64,
        extent: extent.clone(),
        scope: MemScope::Shared,
    };
    let g = |t: Expr| Expr::add(Expr::mul(Expr::var("b"), Expr::i64(64)), t);
    Func {
        scratch: ["s1", "s2"]
            .map(|n| ScratchDecl {
                name: n.into(),
                dtype: DType::F64,
                scope: MemScope::Shared,
            })
            .to_vec(),
        name: "reverse".into(),
        params: vec!["nb".into(), "w".into()],
        axes: vec![],
        buffers: vec![
            decl("x", DType::F64, Role::Input),
            decl("y", DType::F64, Role::Output),
        ],
        body: vec![bound(
            "b",
            Expr::Param("nb".into()),
            GpuAxis::BlockX,
            vec![
                alloc("s1"),
                alloc("s2"),
                bound(
                    "t",
                    Expr::i64(64),
                    GpuAxis::ThreadX,
                    vec![Stmt::Store {
                        buffer: "s1".into(),
                        indices: vec![Expr::var("t")],
                        value: load("x", g(Expr::var("t"))),
                    }],
                ),
                Stmt::Barrier,
                bound(
                    "t",
                    Expr::i64(64),
                    GpuAxis::ThreadX,
                    vec![Stmt::Store {
                        buffer: "s2".into(),
                        indices: vec![Expr::var("t")],
                        value: load("s1", Expr::sub(Expr::i64(63), Expr::var("t"))),
                    }],
                ),
                Stmt::Barrier,
                bound(
                    "t",
                    Expr::i64(64),
                    GpuAxis::ThreadX,
                    vec![Stmt::Store {
                        buffer: "y".into(),
                        indices: vec![g(Expr::var("t"))],
                        value: load("s2", Expr::var("t")),
                    }],
                ),
            ],
        )],
    }
}

fn run_reverse(f: &Func, w: i64) -> Result<Vec<f64>, Stage2InterpError> {
    let mut b = lacuna::stage1::Bindings::default();
    b.params.insert("nb".into(), 3);
    b.params.insert("w".into(), w);
    b.buffers.insert(
        "x".into(),
        ArrayData::F64((0..192).map(|v| v as f64 * 0.5).collect()),
    );
    b.buffers.insert("y".into(), ArrayData::F64(vec![0.0; 192]));
    interpret_gpu(f, &mut b)?;
    Ok(b.buffers["y"].to_f64_vec())
}

fn reversed() -> Vec<f64> {
    (0..192)
        .map(|i| ((i / 64) * 64 + 63 - i % 64) as f64 * 0.5)
        .collect()
}

/// The rule: constant extents are static `.shared` arrays while they fit 48 KiB together;
/// beyond, every shared buffer is dynamic; a parameter extent is always dynamic, each buffer
/// at a 16-byte aligned offset. Every variant computes the same result under GPU semantics
/// (each block with its own copy) and assembles.
#[test]
fn static_and_dynamic_shared_buffers_follow_the_rule() {
    // Two static buffers of 64 doubles.
    let f = reverse_through_shared(Expr::i64(64));
    let l = shared_layout(&f).expect("layout");
    assert_eq!(l.statics, vec![("s1".into(), 512), ("s2".into(), 512)]);
    assert!(l.dynamic.is_empty() && l.dynamic_bytes.is_none());
    assert_eq!(run_reverse(&f, 0).expect("runs"), reversed());
    for k in assemble("static", &f) {
        assert!(!k.ptx.contains(".extern .shared"), "{}", k.ptx);
        assert!(
            k.ptx.contains(".shared .align 16 .b8 s1_shared[512]"),
            "{}",
            k.ptx
        );
    }
    // Two buffers of 4000 doubles (2 x 32000 bytes > 48 KiB): both dynamic.
    let f = reverse_through_shared(Expr::i64(4000));
    let l = shared_layout(&f).expect("layout");
    assert!(l.statics.is_empty());
    assert_eq!(l.dynamic.len(), 2);
    for k in assemble("big", &f) {
        assert!(k.ptx.contains(".extern .shared"), "{}", k.ptx);
        let mut b = lacuna::stage1::Bindings::default();
        b.params.insert("nb".into(), 1);
        b.params.insert("w".into(), 0);
        let bytes = k.dynamic_shared_bytes(&b).expect("fits both");
        assert_eq!(bytes, 64_000);
    }
    assert_eq!(run_reverse(&f, 0).expect("runs"), reversed());
    // A parameter extent `w + 1`: offsets 0 and round_up(8 (w + 1), 16).
    let f = reverse_through_shared(Expr::add(Expr::Param("w".into()), Expr::i64(1)));
    let l = shared_layout(&f).expect("layout");
    assert_eq!(l.dynamic.len(), 2);
    let kernels = assemble("param", &f);
    for w in [63i64, 64, 100] {
        let mut b = lacuna::stage1::Bindings::default();
        b.params.insert("nb".into(), 1);
        b.params.insert("w".into(), w);
        let one = (8 * (w + 1) + 15) / 16 * 16;
        assert_eq!(
            kernels[0].dynamic_shared_bytes(&b).expect("fits") as i64,
            2 * one,
            "w = {w}"
        );
        assert_eq!(run_reverse(&f, w).expect("runs"), reversed(), "w = {w}");
    }
    // Too small a buffer is caught by the interpreter's bounds checks.
    let e = run_reverse(&f, 10).expect_err("out of bounds");
    assert!(
        matches!(e, Stage2InterpError::OutOfBounds { ref buffer, .. } if buffer == "s1"),
        "{e}"
    );
}

/// A shared buffer whose extent reads a loop variable cannot be sized before the launch: a
/// typed error from the code generator and from the interpreter, naming the buffer.
#[test]
fn shared_extent_reading_a_loop_variable_is_rejected() {
    let f = reverse_through_shared(Expr::add(Expr::var("b"), Expr::i64(64)));
    let e = compile_ptx(&f, GpuArch::Sm90, &CodegenOptions::default()).expect_err("rejected");
    assert!(
        matches!(e, CodegenError::Gpu(GpuError::SharedExtent { ref buffer, .. }) if buffer == "s1"),
        "{e}"
    );
    assert!(e.to_string().contains("variable `b`"), "{e}");
    let e = run_reverse(&f, 0).expect_err("rejected");
    assert!(
        matches!(e, Stage2InterpError::Gpu(GpuError::SharedExtent { .. })),
        "{e}"
    );
}

proptest! {
    #![proptest_config(cases_config(16))]

    /// The dynamic-shared BSR schedule under GPU semantics equals the unscheduled CPU run.
    #[test]
    fn dynamic_shared_schedule_equals_cpu((m, n, rows) in sparse_matrix(), feat in 0usize..70) {
        let file = schedule(DYN);
        let p = kernel("spmm");
        let inputs = inputs_for("spmm", m, n, feat, &rows);
        let want = cpu(&p, "spmm", &inputs);
        let got = run_on(&p, &file, &inputs, Target::InterpGpu).expect("GPU semantics");
        same(&format!("{DYN} m={m} n={n} feat={feat}"), &got, &want);
    }
}

// ---------------------------------------------------------------------------------------
// 2. Vectorized global loads
// ---------------------------------------------------------------------------------------

const VEC: &str = "spmm_gpu_vec.ron";

fn trace(kernel: &str, instrs: Vec<Instruction>) -> ScheduleFile {
    ScheduleFile {
        version: 1,
        kernel: kernel.into(),
        trace: instrs,
    }
}

fn split(l: &str, f: u64) -> Instruction {
    Instruction::Split {
        r#loop: l.into(),
        factors: vec![None, Some(f)],
    }
}

fn bind(l: &str, t: &str) -> Instruction {
    Instruction::Bind {
        r#loop: l.into(),
        thread: t.into(),
    }
}

fn vectorize(l: &str) -> Instruction {
    Instruction::Vectorize { r#loop: l.into() }
}

/// SpMV, a thread per row, the row's entries split by 4 and the inner 4 vectorized: the
/// column indices (`i32`) of 4 entries come in one load where the 4 exist and the first is at
/// a multiple of 4.
fn spmv_vec() -> ScheduleFile {
    trace(
        "spmv",
        vec![
            split("spmv:i", 128),
            bind("i.0", "blockIdx.x"),
            bind("i.1", "threadIdx.x"),
            split("spmv:j", 4),
            vectorize("j.1"),
        ],
    )
}

/// SpMM with the features split by 4 (32 x 4 per chunk of 128) and the inner 4 vectorized.
fn spmm_vec4() -> ScheduleFile {
    trace(
        "spmm",
        vec![
            split("spmm:i", 8),
            bind("i.0", "blockIdx.x"),
            bind("i.1", "threadIdx.y"),
            split("spmm:k", 128),
            split("spmm:k.1", 4),
            Instruction::Reorder {
                loops: vec!["k.0".into(), "k.1.0".into(), "j".into(), "k.1.1".into()],
            },
            bind("spmm:k.1.0", "threadIdx.x"),
            vectorize("spmm:k.1.1"),
            split("spmm_init:k", 128),
            split("spmm_init:k.1", 4),
            bind("spmm_init:k.1.0", "threadIdx.x"),
        ],
    )
}

/// The SpMM kernel with every value buffer in f32.
fn spmm_f32() -> Program {
    let mut p = kernel("spmm");
    for b in &mut p.buffers {
        b.dtype = DType::F32;
    }
    p
}

/// The vectorized loops load B (f64 pairs, f32 quadruples) and J.indices (i32 quadruples) with
/// one read-only vector load each; `ptxas` assembles every kernel for sm_80 and sm_90. Without
/// `vectorize`, the same loads stay scalar.
#[test]
fn vectorized_loops_load_vectors_in_ptx() {
    let cases: Vec<(&str, Program, ScheduleFile, &str)> = vec![
        (
            "spmm_vec",
            kernel("spmm"),
            schedule(VEC),
            "ld.global.nc.v2.f64",
        ),
        (
            "spmm_vec4_f32",
            spmm_f32(),
            spmm_vec4(),
            "ld.global.nc.v4.f32",
        ),
        (
            "spmv_vec",
            kernel("spmv"),
            spmv_vec(),
            "ld.global.nc.v4.u32",
        ),
    ];
    for (what, p, file, want) in cases {
        let flat = flat_of(&p, &file);
        for k in assemble(what, &flat) {
            assert!(k.ptx.contains(want), "{what}: {want} missing in\n{}", k.ptx);
        }
        // The same schedule without `vectorize`: scalar loads only.
        let mut plain = file.clone();
        plain
            .trace
            .retain(|i| !matches!(i, Instruction::Vectorize { .. }));
        let flat = flat_of(&p, &plain);
        let k = compile_ptx(&flat, GpuArch::Sm90, &CodegenOptions::default()).expect("PTX");
        assert!(
            !k.ptx.contains(".v2.") && !k.ptx.contains(".v4."),
            "{what} without vectorize:\n{}",
            k.ptx
        );
    }
}

/// Input buffers are `readonly noalias` kernel parameters (loads through the read-only cache);
/// the output is not.
#[test]
fn input_buffers_are_read_only_kernel_parameters() {
    let flat = flat_of(&kernel("spmm"), &schedule(VEC));
    let ir = lacuna::target::emit_nvptx_ir(
        &flat,
        GpuArch::Sm90,
        &CodegenOptions {
            optimized_ir: false,
            ..CodegenOptions::default()
        },
    )
    .expect("IR");
    let head = ir
        .lines()
        .find(|l| l.contains("define ptx_kernel void @lacuna_spmm("))
        .expect("the kernel");
    assert!(
        head.contains("ptr addrspace(1) noalias nocapture readonly %B"),
        "{head}"
    );
    assert!(
        head.contains("ptr addrspace(1) noalias nocapture %C"),
        "{head}"
    );
    assert!(ir.contains("llvm.nvvm.ldg.global.f.v2f64"), "{ir}");
}

/// Runs `file` on the JIT with the GPU path's vector loads (unaligned on the CPU).
fn run_cpu_vector_loads(
    p: &Program,
    file: &ScheduleFile,
    inputs: &BTreeMap<String, Input>,
) -> lacuna::stage1::Output {
    with_cpu_vector_loads(|| run_on(p, file, inputs, Target::Jit)).expect("CPU run")
}

/// The vector path is real code: on the CPU (where it can run here) the vectorized loops load
/// vectors, test the guards and the alignment at run time, and fall back to the scalar loop.
#[test]
fn cpu_vector_loads_take_both_paths() {
    let flat = flat_of(&kernel("spmm"), &schedule(VEC));
    let ir = with_cpu_vector_loads(|| {
        lacuna::target::emit_llvm_ir(
            &flat,
            &CodegenOptions {
                optimized_ir: false,
                ..CodegenOptions::default()
            },
        )
    })
    .expect("IR");
    assert!(ir.contains("load <2 x double>"), "{ir}");
    assert!(ir.contains("vec.scalar") && ir.contains("aligned"), "{ir}");
    let plain = lacuna::target::emit_llvm_ir(
        &flat,
        &CodegenOptions {
            optimized_ir: false,
            ..CodegenOptions::default()
        },
    )
    .expect("IR");
    assert!(!plain.contains("load <2 x double>"), "CPU code by default");
    // Even `feat`: the pairs are aligned (vector path); odd: B's rows start at odd elements
    // for odd columns, and the last pair is cut (scalar path). Both equal the CPU.
    let rows = vec![
        vec![(0, 1.5), (2, -2.0)],
        vec![],
        vec![(1, 3.0), (2, 0.25), (3, 1.0)],
    ];
    let p = kernel("spmm");
    for feat in [1usize, 2, 3, 6, 7, 64, 65, 130] {
        let inputs = inputs_for("spmm", 3, 4, feat, &rows);
        let got = run_cpu_vector_loads(&p, &schedule(VEC), &inputs);
        same(&format!("feat = {feat}"), &got, &cpu(&p, "spmm", &inputs));
    }
}

proptest! {
    #![proptest_config(cases_config(16))]

    /// Vectorized-load schedules: GPU semantics and the CPU with the vector-load code equal
    /// the unscheduled CPU run (rows of every length, so tails and misaligned starts occur).
    #[test]
    fn vector_load_schedules_equal_cpu((m, n, rows) in sparse_matrix(), feat in 0usize..20) {
        for (kernel_name, file) in [("spmm", schedule(VEC)), ("spmm", spmm_vec4()), ("spmv", spmv_vec())] {
            let p = kernel(kernel_name);
            let inputs = inputs_for(kernel_name, m, n, feat, &rows);
            let want = cpu(&p, kernel_name, &inputs);
            let gpu = run_on(&p, &file, &inputs, Target::InterpGpu).expect("GPU semantics");
            same(&format!("{kernel_name} GPU m={m} n={n} feat={feat}"), &gpu, &want);
            let vec = run_cpu_vector_loads(&p, &file, &inputs);
            same(&format!("{kernel_name} CPU vector loads m={m} n={n} feat={feat}"), &vec, &want);
        }
    }
}

/// With `feat` specialized to 64 the alignment is proved statically (the index is
/// `col * 64 + k.0 * 64 + k.1.0 * 2 + k.1.1`) and no feature is cut: only the vector path is
/// emitted, without a run-time test or a scalar fallback.
#[test]
fn proved_alignment_needs_no_fallback() {
    let mut file = schedule(VEC);
    file.trace.insert(
        0,
        Instruction::Specialize {
            param: "feat".into(),
            value: 64,
        },
    );
    let flat = flat_of(&kernel("spmm"), &file);
    let ir = lacuna::target::emit_nvptx_ir(
        &flat,
        GpuArch::Sm90,
        &CodegenOptions {
            optimized_ir: false,
            ..CodegenOptions::default()
        },
    )
    .expect("IR");
    assert!(ir.contains("llvm.nvvm.ldg.global.f.v2f64"), "{ir}");
    assert!(
        !ir.contains("vec.scalar") && !ir.contains("aligned"),
        "{ir}"
    );
    for k in assemble("spmm_vec_64", &flat) {
        assert!(k.ptx.contains("ld.global.nc.v2.f64"), "{}", k.ptx);
    }
    // The unspecialized schedule needs both.
    let flat = flat_of(&kernel("spmm"), &schedule(VEC));
    let ir = lacuna::target::emit_nvptx_ir(
        &flat,
        GpuArch::Sm90,
        &CodegenOptions {
            optimized_ir: false,
            ..CodegenOptions::default()
        },
    )
    .expect("IR");
    assert!(ir.contains("vec.scalar") && ir.contains("aligned"), "{ir}");
}

// ---------------------------------------------------------------------------------------
// 3. nnz-split SpMV
// ---------------------------------------------------------------------------------------

/// The GPU nnz-split SpMV: the init in its own nest (rows on blockIdx.x/threadIdx.x), the
/// stored entries split evenly over blocks of 128 threads whatever the rows, each entry's row
/// found by a binary search of J.indptr, its product added atomically into y.
fn nnz_split_gpu(atomic: bool) -> ScheduleFile {
    let mut t = vec![
        Instruction::SparseDecomposeInit {
            iter: "spmv".into(),
        },
        Instruction::SparseFuse {
            iter: "spmv".into(),
            axes: vec!["I".into(), "J".into()],
        },
        split("spmv_init:i", 128),
        bind("spmv_init:i.0", "blockIdx.x"),
        bind("spmv_init:i.1", "threadIdx.x"),
        split("spmv:j", 128),
    ];
    if atomic {
        t.push(Instruction::Annotate {
            r#loop: "spmv:j.0".into(),
            key: "atomic".into(),
            value: 0,
        });
    }
    t.push(bind("spmv:j.0", "blockIdx.x"));
    t.push(bind("spmv:j.1", "threadIdx.x"));
    trace("spmv", t)
}

/// Empty rows, one dense row among short ones, nnz = 0, rows longer than a block's chunk.
/// A matrix: rows, columns and each row's entries.
type Matrix = (usize, usize, Vec<Vec<(usize, f64)>>);

fn special_matrices() -> Vec<Matrix> {
    let dense_row: Vec<(usize, f64)> = (0..300).map(|j| (j, 0.5 + j as f64)).collect();
    vec![
        (0, 0, vec![]),
        (4, 3, vec![vec![]; 4]),
        (
            5,
            300,
            vec![
                vec![],
                vec![(3, 1.0)],
                dense_row,
                vec![],
                vec![(0, -2.0), (299, 4.0)],
            ],
        ),
        (
            300,
            2,
            (0..300)
                .map(|i| {
                    if i % 3 == 0 {
                        vec![(i % 2, 1.0)]
                    } else {
                        vec![]
                    }
                })
                .collect(),
        ),
    ]
}

/// The nnz-split SpMV on the CPU (`spmv_nnz_split.ron`: chunks of entries in parallel, atomic
/// sums) equals the unscheduled kernel, on the JIT and the interpreter.
#[test]
fn nnz_split_spmv_on_the_cpu() {
    let p = kernel("spmv");
    let file = schedule("spmv_nnz_split.ron");
    let flat = flat_of(&p, &file);
    let text = lacuna::stage2::print_func(&flat);
    assert!(
        text.contains("segment(J.indptr") && text.contains("atomic_add(y["),
        "{text}"
    );
    for (m, n, rows) in special_matrices() {
        let inputs = inputs_for("spmv", m, n, 0, &rows);
        let want = cpu(&p, "spmv", &inputs);
        for target in [Target::Jit, Target::Interp] {
            let got = run_on(&p, &file, &inputs, target).expect("runs");
            same(&format!("{target:?} m={m}"), &got, &want);
        }
    }
}

/// `sparse_decompose_init` checks its arguments; without it, fusing rows with entries has no
/// place for the init; without `atomic`, binding the nnz loop is refused (rows cut by a chunk
/// boundary are written by two threads).
#[test]
fn nnz_split_primitives_check_their_use() {
    let p = kernel("spmv");
    let apply = |t: Vec<Instruction>| Schedule::replay(&p, &t).map(|_| ());
    let dec = Instruction::SparseDecomposeInit {
        iter: "spmv".into(),
    };
    let e = apply(vec![dec.clone(), dec.clone()]).expect_err("twice");
    assert!(e.to_string().contains("has no init"), "{e}");
    let e = apply(vec![Instruction::SparseDecomposeInit {
        iter: "nope".into(),
    }])
    .expect_err("unknown");
    assert!(e.to_string().contains("no iteration named `nope`"), "{e}");
    let e = apply(nnz_split_gpu(true).trace[1..].to_vec()).expect_err("init without a place");
    assert!(e.to_string().contains("init without a place"), "{e}");
    let e = apply(nnz_split_gpu(false).trace).expect_err("bind without atomic");
    assert!(e.to_string().contains("bind"), "{e}");
    // The decomposed init is its own iteration, before the sums.
    let s = Schedule::replay(&p, &[dec]).expect("applies");
    let text = lacuna::stage1::print_program(s.program());
    let init = "sp_iter spmv_init [I] \"S\" (i) {\n    y[i] = 0.0\n  }";
    let sums = "sp_iter spmv [I, J] \"SR\" (i, j) {\n    y[i] = y[i] + A[i, j] * x[j]\n  }";
    let (a, b) = (
        text.find(init).expect("the init iteration"),
        text.find(sums).expect("the sums without init"),
    );
    assert!(a < b, "{text}");
}

/// The nnz-split nest as a GPU kernel: `ptxas` assembles it for sm_80 and sm_90 (a binary
/// search loop and f64 atomic adds); under GPU semantics it equals the CPU (y zeroed before,
/// as the separate init launch does), and with plain sums instead of atomics two threads of a
/// row cut by a chunk boundary race on y. In one launch with its init nest it races too: the
/// init must be a launch of its own.
#[test]
fn nnz_split_gpu_kernel() {
    let p = kernel("spmv");
    let file = nnz_split_gpu(true);
    let s = Schedule::replay(&p, &file.trace).expect("applies");
    let scheduled = s.program().clone();
    let flat = flat_of(&p, &file);
    for k in assemble("spmv_nnz_split", &flat) {
        assert!(k.ptx.contains("atom.global.add.f64"), "{}", k.ptx);
    }
    let nest_only = |f: &Func| Func {
        body: f.body[1..].to_vec(),
        ..f.clone()
    };
    assert!(
        matches!(
            flat.body[0],
            Stmt::For {
                kind: ForKind::Bound(GpuAxis::BlockX),
                ..
            }
        ),
        "the init nest comes first"
    );
    let kernel_only = nest_only(&flat);
    // Plain sums: `y[i] = y[i] + e` instead of the atomic add.
    fn plain(stmts: &mut [Stmt]) {
        for s in stmts {
            if let Stmt::Atomic {
                buffer,
                indices,
                value,
                ..
            } = s
            {
                let load = Expr::Load {
                    buffer: buffer.clone(),
                    indices: indices.clone(),
                };
                *s = Stmt::Store {
                    buffer: buffer.clone(),
                    indices: indices.clone(),
                    value: Expr::add(load, value.clone()),
                };
                continue;
            }
            match s {
                Stmt::For { body, .. }
                | Stmt::While { body, .. }
                | Stmt::Attr { body, .. }
                | Stmt::Block { body, .. } => plain(body),
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    plain(then_body);
                    plain(else_body);
                }
                _ => {}
            }
        }
    }
    let mut racy = kernel_only.clone();
    plain(&mut racy.body);
    let bindings = |m: usize, n: usize, rows: &[Vec<(usize, f64)>]| {
        let inputs = inputs_for("spmv", m, n, 0, rows);
        let mut b = lacuna::stage1::bind_with(
            &scheduled,
            &inputs,
            &BTreeMap::new(),
            lacuna::stage1::Bindings::default(),
        )
        .expect("binds");
        reset_outputs(&scheduled, &mut b);
        (inputs, b)
    };
    for (m, n, rows) in special_matrices() {
        let (inputs, mut b) = bindings(m, n, &rows);
        interpret_gpu(&kernel_only, &mut b).expect("GPU semantics");
        let got = unpack(&scheduled, &b, "y").expect("unpacks");
        same(&format!("nnz split m={m}"), &got, &cpu(&p, "spmv", &inputs));
        let nnz: usize = rows.iter().map(Vec::len).sum();
        if nnz > 128 {
            // The dense row spans several threads (and blocks).
            let (_, mut b) = bindings(m, n, &rows);
            let e = interpret_gpu(&racy, &mut b).expect_err("a race on y");
            assert!(
                matches!(e, Stage2InterpError::GpuRace { ref buffer, .. } if buffer == "y"),
                "{e}"
            );
            let (_, mut b) = bindings(m, n, &rows);
            let e = interpret_gpu(&flat, &mut b).expect_err("init and sums in one launch");
            assert!(
                matches!(e, Stage2InterpError::GpuRace { ref buffer, .. } if buffer == "y"),
                "{e}"
            );
        }
    }
}

proptest! {
    #![proptest_config(cases_config(16))]

    /// The nnz-split kernel under GPU semantics and the CPU nnz-split schedule equal the
    /// unscheduled CPU run on random matrices.
    #[test]
    fn nnz_split_equals_cpu((m, n, rows) in sparse_matrix()) {
        let p = kernel("spmv");
        let inputs = inputs_for("spmv", m, n, 0, &rows);
        let want = cpu(&p, "spmv", &inputs);
        let got = run_on(&p, &schedule("spmv_nnz_split.ron"), &inputs, Target::Jit).expect("JIT");
        same(&format!("CPU nnz split m={m} n={n}"), &got, &want);
        let file = nnz_split_gpu(true);
        let scheduled = Schedule::replay(&p, &file.trace).expect("applies").program().clone();
        let flat = flat_of(&p, &file);
        let kernel_only = Func { body: flat.body[1..].to_vec(), ..flat.clone() };
        let mut b = lacuna::stage1::bind_with(&scheduled, &inputs, &BTreeMap::new(), lacuna::stage1::Bindings::default())
            .expect("binds");
        reset_outputs(&scheduled, &mut b);
        interpret_gpu(&kernel_only, &mut b).expect("GPU semantics");
        let got = unpack(&scheduled, &b, "y").expect("unpacks");
        same(&format!("GPU nnz split m={m} n={n}"), &got, &want);
    }
}

/// `spmv_gpu_nnz_split.ron`: the init in launch 0, the nnz-split sums in launch 1. Under GPU
/// semantics it equals the CPU on empty rows, a dense row and nnz = 0; without the launch
/// boundary the init races with the sums, and without `atomic` the binding is refused.
#[test]
fn nnz_split_gpu_example_in_two_launches() {
    let p = kernel("spmv");
    let file = schedule("spmv_gpu_nnz_split.ron");
    let flat = flat_of(&p, &file);
    for k in assemble("spmv_gpu_nnz_split", &flat) {
        assert_eq!(k.launches.len(), 2, "two launches");
        assert!(k.ptx.contains("atom.global.add.f64"), "{}", k.ptx);
    }
    let mut one_launch = file.clone();
    one_launch
        .trace
        .retain(|i| !matches!(i, Instruction::Annotate { key, .. } if key == "launch"));
    let mut no_atomic = file.clone();
    no_atomic
        .trace
        .retain(|i| !matches!(i, Instruction::Annotate { key, .. } if key == "atomic"));
    assert!(Schedule::replay(&p, &no_atomic.trace).is_err());
    for (m, n, rows) in special_matrices() {
        let inputs = inputs_for("spmv", m, n, 0, &rows);
        let want = cpu(&p, "spmv", &inputs);
        let got = run_on(&p, &file, &inputs, Target::InterpGpu).expect("GPU semantics");
        same(&format!("spmv_gpu_nnz_split m={m}"), &got, &want);
        let cpu_run = run_on(&p, &file, &inputs, Target::Jit).expect("CPU");
        same(
            &format!("spmv_gpu_nnz_split on the CPU m={m}"),
            &cpu_run,
            &want,
        );
        if m > 0 && rows.iter().any(|r| !r.is_empty()) {
            let e = run_on(&p, &one_launch, &inputs, Target::InterpGpu).expect_err("a race");
            assert!(
                matches!(e, DriverError::Interp2(Stage2InterpError::GpuRace { ref buffer, .. }) if buffer == "y"),
                "{e}"
            );
        }
    }
}

/// A guard that reads what the loop writes is evaluated by each iteration after the earlier
/// ones ran, so it cannot be checked for every lane up front: the load under it stays scalar.
/// `for v in 0..2 (vectorized) { if flag[0] > 0 { y[v] = x[v]; flag[0] = 0 } }` copies only
/// x[0].
#[test]
fn a_guard_reading_what_the_loop_writes_keeps_loads_scalar() {
    let f = Func {
        scratch: vec![],
        name: "first_only".into(),
        params: vec![],
        axes: vec![],
        buffers: vec![
            decl("x", DType::F64, Role::Input),
            decl("flag", DType::I32, Role::Output),
            decl("y", DType::F64, Role::Output),
        ],
        body: vec![Stmt::For {
            var: "v".into(),
            start: Expr::i64(0),
            end: Expr::i64(2),
            kind: ForKind::Vectorized,
            body: vec![Stmt::If {
                cond: Expr::bin(
                    lacuna::stage1::BinOp::Gt,
                    load("flag", Expr::i64(0)),
                    Expr::Int(0, DType::I32),
                ),
                then_body: vec![
                    Stmt::Store {
                        buffer: "y".into(),
                        indices: vec![Expr::var("v")],
                        value: load("x", Expr::var("v")),
                    },
                    Stmt::Store {
                        buffer: "flag".into(),
                        indices: vec![Expr::i64(0)],
                        value: Expr::Int(0, DType::I32),
                    },
                ],
                else_body: vec![],
            }],
        }],
    };
    let ir = with_cpu_vector_loads(|| {
        lacuna::target::emit_llvm_ir(
            &f,
            &CodegenOptions {
                optimized_ir: false,
                ..CodegenOptions::default()
            },
        )
    })
    .expect("IR");
    assert!(!ir.contains("<2 x double>"), "{ir}");
    let mut b = lacuna::stage1::Bindings::default();
    b.buffers.insert("x".into(), ArrayData::F64(vec![1.5, 2.5]));
    b.buffers.insert("flag".into(), ArrayData::I32(vec![1]));
    b.buffers.insert("y".into(), ArrayData::F64(vec![0.0, 0.0]));
    let k = with_cpu_vector_loads(|| lacuna::target::compile(&f, &CodegenOptions::default()))
        .expect("compiles");
    // SAFETY: every array as long as the function's constant-bound loop reaches (2 elements).
    unsafe { k.run(&mut b) }.expect("runs");
    assert_eq!(b.buffers["y"], ArrayData::F64(vec![1.5, 0.0]));
    // Without the write to `flag`, the same loop loads x as one vector.
    let mut g = f.clone();
    if let Stmt::For { body, .. } = &mut g.body[0] {
        if let Stmt::If { then_body, .. } = &mut body[0] {
            then_body.pop();
        }
    }
    let ir = with_cpu_vector_loads(|| {
        lacuna::target::emit_llvm_ir(
            &g,
            &CodegenOptions {
                optimized_ir: false,
                ..CodegenOptions::default()
            },
        )
    })
    .expect("IR");
    assert!(ir.contains("load <2 x double>"), "{ir}");
}
