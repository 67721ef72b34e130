//! The emitted LLVM IR (ABI, attributes, vectorization, options) and kernel ownership
//! (`Send`/`Sync`, dropping, many kernels at once).

mod common;
use common::*;
use lacuna_ir::{ArrayData, DType};
use lacuna_stage1::BinOp;
use lacuna_stage2::{ForKind, Func};
use lacuna_target::{compile, emit_llvm_ir, CodegenOptions, CompiledKernel};

fn axpy() -> Func {
    // out[i] = a[i] * 2.5 + b[i]
    elementwise(
        DType::F64,
        DType::F64,
        bin(
            BinOp::Add,
            bin(BinOp::Mul, load("a", var("i")), f64c(2.5)),
            load("b", var("i")),
        ),
    )
}

#[test]
fn unoptimized_ir_has_the_abi_and_attributes() {
    let ir = emit_llvm_ir(
        &axpy(),
        &CodegenOptions {
            optimized_ir: false,
            ..Default::default()
        },
    )
    .expect("emits");
    assert!(ir.contains("define void @lacuna_elementwise(ptr"), "{ir}");
    assert!(
        ir.contains("define internal void @lacuna_elementwise_body(ptr noalias nocapture"),
        "{ir}"
    );
    assert!(ir.contains("alwaysinline"), "{ir}");
    assert!(ir.contains("\"target-cpu\""), "{ir}");
    assert!(!ir.contains("fast"), "no fast-math flags: {ir}");
}

#[test]
fn optimized_ir_inlines_the_body_and_vectorizes_without_alias_checks() {
    let ir = emit_llvm_ir(&axpy(), &CodegenOptions::default()).expect("emits");
    assert!(
        !ir.contains("@lacuna_elementwise_body"),
        "body inlined and removed: {ir}"
    );
    assert!(ir.contains("x double>"), "vectorized: {ir}");
    assert!(
        !ir.contains("vector.memcheck"),
        "noalias buffers need no runtime alias checks: {ir}"
    );
    let k = compile(&axpy(), &CodegenOptions::default()).expect("compiles");
    assert!(k.llvm_ir().contains("x double>"));
    assert_eq!(k.name(), "elementwise");
}

#[test]
fn generic_cpu_ir_has_no_host_features() {
    let ir = emit_llvm_ir(
        &axpy(),
        &CodegenOptions {
            host_cpu: false,
            optimized_ir: false,
            ..Default::default()
        },
    )
    .expect("emits");
    assert!(ir.contains("\"target-cpu\"=\"generic\""), "{ir}");
    assert!(!ir.contains("target-features"), "{ir}");
    let b = bindings(
        vec![
            ("a", ArrayData::F64(vec![1.0, 2.0])),
            ("b", ArrayData::F64(vec![0.5, 0.25])),
            ("out", ArrayData::zeros(DType::F64, 2)),
        ],
        &[("n", 2)],
    );
    let got = run_jit(
        &axpy(),
        &b,
        &CodegenOptions {
            host_cpu: false,
            ..Default::default()
        },
    );
    assert_eq!(got.buffers["out"], ArrayData::F64(vec![3.0, 5.25]));
}

/// `s[0] = s[0] + a[i]` over `i`, with the loop marked `kind`.
fn reduction(kind: ForKind) -> Func {
    func(
        "reduce",
        &["n"],
        vec![input("a", DType::F64), output("s", DType::F64)],
        vec![for_kind(
            "i",
            i64c(0),
            param("n"),
            kind,
            vec![store(
                "s",
                i64c(0),
                bin(BinOp::Add, load("s", i64c(0)), load("a", var("i"))),
            )],
        )],
    )
}

#[test]
fn serial_fp_reductions_keep_their_order_and_vectorized_loops_carry_the_hint() {
    let serial =
        emit_llvm_ir(&reduction(ForKind::Serial), &CodegenOptions::default()).expect("emits");
    assert!(
        !serial.contains("fadd <"),
        "a serial FP reduction is not reassociated: {serial}"
    );
    let hinted = emit_llvm_ir(
        &reduction(ForKind::Vectorized),
        &CodegenOptions {
            optimized_ir: false,
            ..Default::default()
        },
    )
    .expect("emits");
    assert!(hinted.contains("llvm.loop.vectorize.enable"), "{hinted}");
    let unrolled = emit_llvm_ir(
        &reduction(ForKind::Unrolled),
        &CodegenOptions {
            optimized_ir: false,
            ..Default::default()
        },
    )
    .expect("emits");
    assert!(unrolled.contains("llvm.loop.unroll.full"), "{unrolled}");
    // A serial reduction sums in order, exactly like the interpreter.
    let a: Vec<f64> = (0..1000).map(|i| 1.0 / (i as f64 + 1.0)).collect();
    let b = bindings(
        vec![
            ("a", ArrayData::F64(a.clone())),
            ("s", ArrayData::zeros(DType::F64, 1)),
        ],
        &[("n", 1000)],
    );
    let got = run_checked(&reduction(ForKind::Serial), &b);
    assert_eq!(
        got.buffers["s"],
        ArrayData::F64(vec![a.iter().fold(0.0, |s, x| s + x)])
    );
}

#[test]
fn every_opt_level_computes_the_same() {
    let b = bindings(
        vec![
            ("a", ArrayData::F64((0..50).map(f64::from).collect())),
            ("b", ArrayData::F64(vec![1.0; 50])),
            ("out", ArrayData::zeros(DType::F64, 50)),
        ],
        &[("n", 50)],
    );
    let want: Vec<f64> = (0..50).map(|i| f64::from(i) * 2.5 + 1.0).collect();
    for opt_level in 0..=3 {
        let got = run_jit(
            &axpy(),
            &b,
            &CodegenOptions {
                opt_level,
                ..Default::default()
            },
        );
        assert_eq!(
            got.buffers["out"],
            ArrayData::F64(want.clone()),
            "O{opt_level}"
        );
    }
}

#[test]
fn kernels_are_send_and_sync_and_run_from_other_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CompiledKernel>();
    // Compile on several threads at once, run on others, share one kernel between threads.
    let kernels: Vec<CompiledKernel> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| compile(&axpy(), &CodegenOptions::default()).expect("compiles")))
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    let shared = &kernels[0];
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                let n = 100 + t;
                let mut b = bindings(
                    vec![
                        ("a", ArrayData::F64(vec![2.0; n])),
                        ("b", ArrayData::F64(vec![1.0; n])),
                        ("out", ArrayData::zeros(DType::F64, n)),
                    ],
                    &[("n", n as i64)],
                );
                // SAFETY: `a`, `b` and `out` hold `n` elements; the loop runs over `0..n`.
                unsafe { shared.run(&mut b) }.expect("runs");
                assert_eq!(b.buffers["out"], ArrayData::F64(vec![6.0; n]));
            });
        }
    });
    let moved = std::thread::spawn(move || kernels.len())
        .join()
        .expect("no panic");
    assert_eq!(moved, 4);
}

#[test]
fn diagnostics_are_collected_not_printed() {
    // A loop with a data-dependent branch and an unknown trip count cannot be fully unrolled:
    // LLVM warns, and the warning ends up in `diagnostics()` rather than on stderr.
    let body = vec![for_kind(
        "i",
        i64c(0),
        param("n"),
        ForKind::Unrolled,
        vec![if_(
            bin(BinOp::Gt, load("a", var("i")), f64c(0.0)),
            vec![store("out", var("i"), f64c(1.0))],
            vec![store("out", var("i"), load("b", var("i")))],
        )],
    )];
    let f = func(
        "branchy",
        &["n"],
        vec![
            input("a", DType::F64),
            input("b", DType::F64),
            output("out", DType::F64),
        ],
        body,
    );
    let k = compile(&f, &CodegenOptions::default()).expect("compiles");
    assert!(
        k.diagnostics()
            .iter()
            .any(|d| d.starts_with("warning:") && d.contains("unrolled")),
        "{:?}",
        k.diagnostics()
    );
    let k = compile(&axpy(), &CodegenOptions::default()).expect("compiles");
    assert!(k.diagnostics().is_empty(), "{:?}", k.diagnostics());
}

#[test]
fn vectorized_fp_reductions_may_be_reassociated_but_stay_close() {
    let ir =
        emit_llvm_ir(&reduction(ForKind::Vectorized), &CodegenOptions::default()).expect("emits");
    assert!(
        ir.lines()
            .any(|l| l.contains("fadd") && l.contains("x double>")),
        "the hint lets LLVM vectorize the reduction: {ir}"
    );
    let a: Vec<f64> = (0..1001).map(|i| 1.0 / (i as f64 + 1.0)).collect();
    let b = bindings(
        vec![
            ("a", ArrayData::F64(a.clone())),
            ("s", ArrayData::zeros(DType::F64, 1)),
        ],
        &[("n", 1001)],
    );
    let got = run_jit(
        &reduction(ForKind::Vectorized),
        &b,
        &CodegenOptions::default(),
    );
    let want: f64 = a.iter().sum();
    let s = got.buffers["s"].to_f64_vec()[0];
    assert!((s - want).abs() <= 1e-12 * want, "{s} vs {want}");
}

#[test]
fn products_and_sums_contract_into_fused_multiply_adds_unless_turned_off() {
    // out[i] = a[i] * b[i] + (-1): with a = 1 + 2^-30 and b = 1 - 2^-30 the exact product is
    // 1 - 2^-60, which rounds to 1, so two roundings give 0 and one rounding (FMA) -2^-60.
    let f = elementwise(
        DType::F64,
        DType::F64,
        bin(
            BinOp::Add,
            bin(BinOp::Mul, load("a", var("i")), load("b", var("i"))),
            f64c(-1.0),
        ),
    );
    let eps = 2f64.powi(-30);
    let n = 20;
    let b = bindings(
        vec![
            ("a", ArrayData::F64(vec![1.0 + eps; n])),
            ("b", ArrayData::F64(vec![1.0 - eps; n])),
            ("out", ArrayData::zeros(DType::F64, n)),
        ],
        &[("n", n as i64)],
    );
    let on = CodegenOptions::default();
    let off = CodegenOptions {
        fp_contract: false,
        ..Default::default()
    };
    assert!(emit_llvm_ir(&f, &on)
        .expect("emits")
        .contains("fmul contract"));
    assert!(!emit_llvm_ir(&f, &off).expect("emits").contains("contract"));
    // Off: every operation rounds, bit for bit as the interpreter computes it.
    let separate = run_jit(&f, &b, &off);
    assert_eq!(separate.buffers["out"], ArrayData::F64(vec![0.0; n]));
    // On: fused where the CPU has FMA (within one rounding of the separate result anyway).
    let fused = run_jit(&f, &b, &on).buffers["out"].to_f64_vec();
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        assert_eq!(fused, vec![-(2f64.powi(-60)); n]);
    }
    assert!(fused.iter().all(|x| x.abs() <= 2f64.powi(-52)), "{fused:?}");
}
