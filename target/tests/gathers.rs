//! Gathers of vectorized loops annotated `scalar_gathers`, assembled from scalar loads
//! (`CodegenOptions::assemble_gathers`): results equal the interpreter's with and without it,
//! in every element and index type, on random indices that reach both ends of the gathered
//! array and loop lengths with and without a tail; where the host's vectorizer emits gathers,
//! the option replaces every unmasked one of 8-byte elements in the annotated loop's function,
//! and none without the annotation.

mod common;
use common::*;
use lacuna_ir::{ArrayData, DType};
use lacuna_stage1::BinOp;
use lacuna_stage2::{Expr, ForKind, Func, Stmt};
use lacuna_target::{emit_llvm_ir, host_assembles_gathers, CodegenOptions};
use proptest::prelude::*;

/// `attr scalar_gathers = 1 { vectorized for j in 0..n { out[j] = v[j] * x[idx[j]] } }`
/// (`reduce`: `out[0] += ...`, as SpMV's sum over a row).
fn gather(vt: DType, it: DType, reduce: bool) -> Func {
    annotated(gather_loop(vt, it, reduce))
}

fn annotated(mut f: Func) -> Func {
    f.body = vec![Stmt::Attr {
        key: "scalar_gathers".into(),
        value: Expr::Int(1, DType::I64),
        body: std::mem::take(&mut f.body),
    }];
    f
}

/// The loop of [`gather`] without the annotation.
fn gather_loop(vt: DType, it: DType, reduce: bool) -> Func {
    let index = if it == DType::I64 {
        load("idx", var("j"))
    } else {
        cast(DType::I64, load("idx", var("j")))
    };
    let product = bin(BinOp::Mul, load("v", var("j")), load("x", index));
    let body = if reduce {
        store(
            "out",
            i64c(0),
            bin(BinOp::Add, load("out", i64c(0)), product),
        )
    } else {
        store("out", var("j"), product)
    };
    func(
        "gather",
        &["n"],
        vec![
            input("v", vt),
            input("x", vt),
            input("idx", it),
            output("out", vt),
        ],
        vec![for_kind(
            "j",
            i64c(0),
            param("n"),
            ForKind::Vectorized,
            vec![body],
        )],
    )
}

fn values(vt: DType, v: &[i64]) -> ArrayData {
    match vt {
        DType::I64 => ArrayData::I64(v.to_vec()),
        _ => ArrayData::F64(v.iter().map(|&a| a as f64 * 0.375 - 2.0).collect()).cast(vt),
    }
}

fn check(vt: DType, it: DType, reduce: bool, x: &[i64], idx: &[i64], v: &[i64]) {
    let n = idx.len();
    let f = gather(vt, it, reduce);
    let idx = if it == DType::I64 {
        ArrayData::I64(idx.to_vec())
    } else {
        ArrayData::I32(idx.iter().map(|&i| i as i32).collect())
    };
    let b = bindings(
        vec![
            ("v", values(vt, v)),
            ("x", values(vt, x)),
            ("idx", idx),
            ("out", ArrayData::zeros(vt, if reduce { 1 } else { n })),
        ],
        &[("n", n as i64)],
    );
    let mut want = b.clone();
    lacuna_stage2::interpret_func(&f, &mut want).expect("interprets");
    for assemble_gathers in [false, true] {
        let opts = CodegenOptions {
            assemble_gathers,
            // The reduction reassociates nothing: products and sums round as in the
            // interpreter only without contraction.
            fp_contract: false,
            ..CodegenOptions::default()
        };
        let got = run_jit(&f, &b, &opts);
        let (have, want) = (&got.buffers["out"], &want.buffers["out"]);
        if reduce && vt != DType::I64 {
            // A vectorized sum is reassociated into lanes; compare within a tolerance.
            let (h, w) = (have.to_f64_vec(), want.to_f64_vec());
            let tol = 1e-9 * (1.0 + w[0].abs()) * n.max(1) as f64;
            let tol = if vt == DType::F32 { tol * 1e7 } else { tol };
            assert!(
                (h[0] - w[0]).abs() <= tol,
                "{vt} {it} assemble={assemble_gathers}: {} vs {} (tolerance {tol})",
                h[0],
                w[0]
            );
        } else {
            assert!(
                same_bits(have, want),
                "{vt} {it} reduce={reduce} assemble={assemble_gathers}: {have:?} vs {want:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn assembled_gathers_equal_the_interpreter(
        x in prop::collection::vec(-50i64..50, 1..300),
        picks in prop::collection::vec((0usize..1000, -40i64..40), 0..90),
        ends in any::<bool>(),
        reduce in any::<bool>(),
    ) {
        // Indices anywhere in x, and (with `ends`) its first and last element among them.
        let mut idx: Vec<i64> = picks.iter().map(|&(p, _)| (p % x.len()) as i64).collect();
        if ends && idx.len() >= 2 {
            idx[0] = x.len() as i64 - 1;
            let last = idx.len() - 1;
            idx[last] = 0;
        }
        let v: Vec<i64> = picks.iter().map(|&(_, a)| a).collect();
        for vt in [DType::F64, DType::I64, DType::F32] {
            for it in [DType::I32, DType::I64] {
                check(vt, it, reduce, &x, &idx, &v);
            }
        }
    }
}

/// The calls of `@llvm.masked.gather` with 8-byte elements in `ir`.
fn gathers_of_8_bytes(ir: &str) -> usize {
    ir.lines()
        .filter(|l| {
            l.contains("call <")
                && l.contains("@llvm.masked.gather.v")
                && (l.contains("x double> @llvm") || l.contains("x i64> @llvm"))
        })
        .count()
}

#[test]
fn the_option_replaces_every_unmasked_gather_of_8_bytes() {
    for (vt, it) in [
        (DType::F64, DType::I32),
        (DType::F64, DType::I64),
        (DType::I64, DType::I32),
    ] {
        for reduce in [false, true] {
            let f = gather(vt, it, reduce);
            let ir = |assemble_gathers| {
                emit_llvm_ir(
                    &f,
                    &CodegenOptions {
                        assemble_gathers,
                        ..CodegenOptions::default()
                    },
                )
                .expect("emits")
            };
            let (off, on) = (ir(false), ir(true));
            if host_assembles_gathers() {
                // The hosts that assemble gathers (AMD Zen 4 and 5) gather with AVX-512.
                assert!(
                    gathers_of_8_bytes(&off) > 0,
                    "{vt} {it}: no gather to replace: {off}"
                );
            }
            if gathers_of_8_bytes(&off) > 0 {
                // The vectorized body's gathers are unmasked; a gather left must be masked.
                for l in on.lines().filter(|l| l.contains("@llvm.masked.gather.v")) {
                    assert!(!l.contains("<i1 true, i1 true"), "{vt} {it}: left {l}");
                }
                assert!(on.contains("gx.x"), "{vt} {it}: no scalar loads: {on}");
                assert!(gathers_of_8_bytes(&on) < gathers_of_8_bytes(&off));
            }
        }
    }
}

#[test]
fn loops_without_the_annotation_keep_their_gathers() {
    let f = gather_loop(DType::F64, DType::I32, true);
    let opts = CodegenOptions {
        assemble_gathers: true,
        ..CodegenOptions::default()
    };
    let plain = emit_llvm_ir(&f, &opts).expect("emits");
    assert!(!plain.contains("gx.x"), "{plain}");
    if host_assembles_gathers() {
        assert!(gathers_of_8_bytes(&plain) > 0, "{plain}");
        let marked = emit_llvm_ir(&annotated(f), &opts).expect("emits");
        assert!(marked.contains("gx.x"), "{marked}");
    }
}

#[test]
fn gathers_of_4_bytes_are_left_alone() {
    let f = gather(DType::F32, DType::I32, false);
    let ir = emit_llvm_ir(
        &f,
        &CodegenOptions {
            assemble_gathers: true,
            ..CodegenOptions::default()
        },
    )
    .expect("emits");
    assert!(!ir.contains("gx.x"), "{ir}");
}

/// SpMV's product of 4×4 blocks stored row by row, as BSR's schedule emits it: for each block
/// `b` of one block row, columns then rows unrolled, `y[r] += a[(b * 4 + r) * 4 + c] *
/// x[cols[b] * 4 + c]`. No loop is vectorized; LLVM's SLP vectorizer packs the four rows.
fn block_product() -> Func {
    let (r, c) = (var("r"), var("c"));
    let slot = bin(
        BinOp::Add,
        bin(
            BinOp::Mul,
            bin(BinOp::Add, bin(BinOp::Mul, var("b"), i64c(4)), r.clone()),
            i64c(4),
        ),
        c.clone(),
    );
    let column = bin(
        BinOp::Add,
        bin(BinOp::Mul, load("cols", var("b")), i64c(4)),
        c,
    );
    let sum = bin(
        BinOp::Add,
        load("y", r.clone()),
        bin(BinOp::Mul, load("a", slot), load("x", column)),
    );
    func(
        "block_product",
        &["blocks"],
        vec![
            input("a", DType::F64),
            input("x", DType::F64),
            input("cols", DType::I64),
            output("y", DType::F64),
        ],
        vec![for_(
            "b",
            i64c(0),
            param("blocks"),
            vec![for_kind(
                "c",
                i64c(0),
                i64c(4),
                ForKind::Unrolled,
                vec![for_kind(
                    "r",
                    i64c(0),
                    i64c(4),
                    ForKind::Unrolled,
                    vec![store("y", r, sum)],
                )],
            )],
        )],
    )
}

/// With gathers assembled (the hosts whose gather instructions are slow), a function whose
/// vectorized loops load no element at a position loaded per lane is compiled to prefer no
/// gathers: the block product's strided reads of a block's columns become no gather, where
/// SLP packs four rows with one `vgatherqpd` per column otherwise (3.9 → 0.7 ms for SpMV on
/// 4×4 blocks, 2.1M entries, AMD Zen 4). SpMV's vectorized rows keep their gathers. Results
/// equal the interpreter's either way.
#[test]
fn functions_without_lane_loaded_positions_prefer_no_gathers() {
    let f = block_product();
    let opts = |assemble_gathers| CodegenOptions {
        assemble_gathers,
        fp_contract: false,
        ..CodegenOptions::default()
    };
    let on = emit_llvm_ir(&f, &opts(true)).expect("emits");
    assert!(on.contains("+prefer-no-gather"), "{on}");
    assert_eq!(gathers_of_8_bytes(&on), 0, "{on}");
    let off = emit_llvm_ir(&f, &opts(false)).expect("emits");
    assert!(!off.contains("prefer-no-gather"), "{off}");
    if host_assembles_gathers() {
        // What the preference avoids: SLP's strided gathers on AVX-512.
        assert!(gathers_of_8_bytes(&off) > 0, "{off}");
    }
    let rows = emit_llvm_ir(&gather(DType::F64, DType::I32, true), &opts(true)).expect("emits");
    assert!(!rows.contains("prefer-no-gather"), "{rows}");
    let blocks = 37usize;
    let a: Vec<f64> = (0..blocks * 16)
        .map(|i| (i % 23) as f64 * 0.25 - 2.0)
        .collect();
    let x: Vec<f64> = (0..64).map(|i| (i % 7) as f64 - 3.0).collect();
    let cols: Vec<i64> = (0..blocks).map(|b| ((b * 5) % 16) as i64).collect();
    let b = bindings(
        vec![
            ("a", ArrayData::F64(a)),
            ("x", ArrayData::F64(x)),
            ("cols", ArrayData::I64(cols)),
            ("y", ArrayData::zeros(DType::F64, 4)),
        ],
        &[("blocks", blocks as i64)],
    );
    let mut want = b.clone();
    lacuna_stage2::interpret_func(&f, &mut want).expect("interprets");
    for assemble_gathers in [false, true] {
        let got = run_jit(&f, &b, &opts(assemble_gathers));
        assert!(
            same_bits(&got.buffers["y"], &want.buffers["y"]),
            "assemble={assemble_gathers}: {:?} vs {:?}",
            got.buffers["y"],
            want.buffers["y"]
        );
    }
}
