//! The compiled code's scalar semantics agree with the interpreters' on the corner cases:
//! integer division by zero and MIN / -1, NaN in min/max and comparisons, saturating casts,
//! lazy select guarding an out-of-bounds load, short-circuit `&&`, binary search.

use lacuna_ir::{ArrayData, DType, Scalar};
use lacuna_stage1::{eval_binop, BinOp, Bindings, Role, UnOp};
use lacuna_stage2::{interpret_func, BufferDecl, BufferKind, Expr, ForKind, Func, Stmt};
use lacuna_target::{compile, CodegenOptions};
use proptest::prelude::*;

fn out_decl(name: &str, dtype: DType) -> BufferDecl {
    BufferDecl {
        name: name.into(),
        dtype,
        layout: vec![],
        kind: BufferKind::Values(Role::Output),
    }
}
fn in_decl(name: &str, dtype: DType) -> BufferDecl {
    BufferDecl {
        name: name.into(),
        dtype,
        layout: vec![],
        kind: BufferKind::Values(Role::Input),
    }
}

/// `out[0] = e` with inputs `a` and `b` (one element each, of `t`), run on the JIT and the
/// interpreter; returns both results.
fn both(e: Expr, t: DType, out_t: DType, a: Scalar, b: Scalar) -> (Scalar, Scalar) {
    let f = Func {
        scratch: vec![],
        name: "t".into(),
        params: vec![],
        axes: vec![],
        buffers: vec![in_decl("a", t), in_decl("b", t), out_decl("out", out_t)],
        body: vec![Stmt::Store {
            buffer: "out".into(),
            indices: vec![Expr::i64(0)],
            value: e,
        }],
    };
    let mut bind = Bindings::default();
    bind.buffers.insert("a".into(), ArrayData::filled(t, 1, a));
    bind.buffers.insert("b".into(), ArrayData::filled(t, 1, b));
    bind.buffers
        .insert("out".into(), ArrayData::zeros(out_t, 1));
    let mut b2 = bind.clone();
    interpret_func(&f, &mut b2).expect("interprets");
    let k = compile(&f, &CodegenOptions::default()).expect("compiles");
    // SAFETY: one element per buffer, the one element the function reads or writes.
    unsafe { k.run(&mut bind) }.expect("runs");
    (
        bind.buffers["out"].get(0).expect("one"),
        b2.buffers["out"].get(0).expect("one"),
    )
}

fn load(name: &str) -> Expr {
    Expr::Load {
        buffer: name.into(),
        indices: vec![Expr::i64(0)],
    }
}

fn same(x: Scalar, y: Scalar) -> bool {
    match (x, y) {
        (Scalar::F64(a), Scalar::F64(b)) => {
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
        }
        (Scalar::F32(a), Scalar::F32(b)) => {
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
        }
        _ => x == y,
    }
}

#[test]
fn integer_division_never_traps() {
    for t in [DType::I32, DType::I64] {
        let min = if t == DType::I32 {
            i32::MIN as i64
        } else {
            i64::MIN
        };
        for (a, b) in [(7, 0), (min, -1), (-7, 2), (7, -2), (0, 0)] {
            let (x, y) = (Scalar::I64(a).cast(t), Scalar::I64(b).cast(t));
            let (jit, interp) = both(Expr::bin(BinOp::Div, load("a"), load("b")), t, t, x, y);
            assert_eq!(jit, interp, "{a} / {b} in {t}");
            assert_eq!(jit, eval_binop(BinOp::Div, x, y));
        }
    }
}

#[test]
fn nan_in_min_max_and_comparisons() {
    let nan = Scalar::F64(f64::NAN);
    let one = Scalar::F64(1.0);
    for op in [BinOp::Min, BinOp::Max, BinOp::Add, BinOp::Pow] {
        for (a, b) in [(nan, one), (one, nan), (nan, nan)] {
            let (jit, interp) = both(
                Expr::bin(op, load("a"), load("b")),
                DType::F64,
                DType::F64,
                a,
                b,
            );
            assert!(
                same(jit, interp),
                "{op:?}({a}, {b}): jit {jit} interp {interp}"
            );
        }
    }
    for op in [
        BinOp::Lt,
        BinOp::Le,
        BinOp::Gt,
        BinOp::Ge,
        BinOp::Eq,
        BinOp::Ne,
    ] {
        let e = Expr::Cast(DType::I32, Box::new(Expr::bin(op, load("a"), load("b"))));
        let (jit, interp) = both(e, DType::F64, DType::I32, nan, one);
        assert_eq!(jit, interp, "{op:?} with NaN");
    }
}

#[test]
fn casts_saturate_like_the_interpreter() {
    let targets = [DType::I32, DType::I64, DType::F32, DType::F64];
    for v in [
        f64::NAN,
        f64::INFINITY,
        -f64::INFINITY,
        3.9e10,
        -3.9e10,
        2.5,
        -2.5,
        0.0,
    ] {
        for t in targets {
            let (jit, interp) = both(
                Expr::Cast(t, Box::new(load("a"))),
                DType::F64,
                t,
                Scalar::F64(v),
                Scalar::F64(0.0),
            );
            assert!(
                same(jit, interp),
                "cast {v} to {t}: jit {jit} interp {interp}"
            );
        }
    }
    for v in [i64::MAX, i64::MIN, -1, 1 << 40] {
        for t in targets {
            let (jit, interp) = both(
                Expr::Cast(t, Box::new(load("a"))),
                DType::I64,
                t,
                Scalar::I64(v),
                Scalar::I64(0),
            );
            assert!(
                same(jit, interp),
                "cast {v} to {t}: jit {jit} interp {interp}"
            );
        }
    }
}

#[test]
fn unary_operations_agree() {
    for op in [UnOp::Neg, UnOp::Abs, UnOp::Exp, UnOp::Log, UnOp::Sqrt] {
        for v in [-2.5, 0.0, 1.0, 7.25] {
            let (jit, interp) = both(
                Expr::Unary(op, Box::new(load("a"))),
                DType::F64,
                DType::F64,
                Scalar::F64(v),
                Scalar::F64(0.0),
            );
            assert!(
                same(jit, interp)
                    || (jit.as_f64() - interp.as_f64()).abs() <= 1e-15 * interp.as_f64().abs(),
                "{op:?}({v})"
            );
        }
    }
    let (jit, interp) = both(
        Expr::Unary(UnOp::Abs, Box::new(load("a"))),
        DType::I32,
        DType::I32,
        Scalar::I32(i32::MIN),
        Scalar::I32(0),
    );
    assert_eq!(jit, interp);
}

/// `out[0] = select(p >= 0, a[p], -1.0)` with p = -1 reads nothing; with a zero-length `a` a
/// speculated load would be out of bounds.
#[test]
fn lazy_select_and_short_circuit_guard_loads() {
    let guarded = Expr::Select(
        Box::new(Expr::bin(BinOp::Ge, Expr::var("p"), Expr::i64(0))),
        Box::new(Expr::Load {
            buffer: "a".into(),
            indices: vec![Expr::var("p")],
        }),
        Box::new(Expr::Float(-1.0, DType::F64)),
    );
    let and = Expr::bin(
        BinOp::And,
        Expr::bin(BinOp::Ge, Expr::var("p"), Expr::i64(0)),
        Expr::bin(
            BinOp::Gt,
            Expr::Load {
                buffer: "a".into(),
                indices: vec![Expr::var("p")],
            },
            Expr::Float(0.0, DType::F64),
        ),
    );
    let f = Func {
        scratch: vec![],
        name: "guard".into(),
        params: vec![],
        axes: vec![],
        buffers: vec![in_decl("a", DType::F64), out_decl("out", DType::F64)],
        body: vec![
            Stmt::Let {
                var: "p".into(),
                value: Expr::i64(-1),
            },
            Stmt::Store {
                buffer: "out".into(),
                indices: vec![Expr::i64(0)],
                value: guarded,
            },
            Stmt::If {
                cond: and,
                then_body: vec![Stmt::Store {
                    buffer: "out".into(),
                    indices: vec![Expr::i64(1)],
                    value: Expr::Float(9.0, DType::F64),
                }],
                else_body: vec![],
            },
        ],
    };
    let mut b = Bindings::default();
    b.buffers.insert("a".into(), ArrayData::F64(vec![]));
    b.buffers
        .insert("out".into(), ArrayData::F64(vec![0.0, 0.0]));
    let mut b2 = b.clone();
    interpret_func(&f, &mut b2).expect("the interpreter checks bounds, so no load happened");
    let k = compile(&f, &CodegenOptions::default()).expect("compiles");
    // SAFETY: the interpreter, which checks every access, ran the same function on this data.
    unsafe { k.run(&mut b) }.expect("runs");
    assert_eq!(b.buffers["out"], ArrayData::F64(vec![-1.0, 0.0]));
    assert_eq!(b.buffers["out"], b2.buffers["out"]);
}

fn search_func(t: DType) -> Func {
    // out[q] = search(idx[lo..hi], keys[q]) for q in 0..nq
    Func {
        scratch: vec![],
        name: "search".into(),
        params: vec!["nq".into(), "lo".into(), "hi".into()],
        axes: vec![],
        buffers: vec![
            in_decl("idx", t),
            in_decl("keys", DType::I64),
            out_decl("out", DType::I64),
        ],
        body: vec![Stmt::For {
            var: "q".into(),
            start: Expr::i64(0),
            end: Expr::Param("nq".into()),
            kind: ForKind::Serial,
            body: vec![Stmt::Store {
                buffer: "out".into(),
                indices: vec![Expr::var("q")],
                value: Expr::Search {
                    buffer: "idx".into(),
                    lo: Box::new(Expr::Param("lo".into())),
                    hi: Box::new(Expr::Param("hi".into())),
                    value: Box::new(Expr::Load {
                        buffer: "keys".into(),
                        indices: vec![Expr::var("q")],
                    }),
                },
            }],
        }],
    }
}

proptest! {
    #[test]
    fn binary_search_matches_a_linear_scan(set in proptest::collection::btree_set(-20i64..20, 0..12), keys in proptest::collection::vec(-22i64..22, 0..10), wide in any::<bool>(), cut in 0usize..4) {
        let t = if wide { DType::I64 } else { DType::I32 };
        let sorted: Vec<i64> = set.into_iter().collect();
        let (lo, hi) = (cut.min(sorted.len()), sorted.len());
        let f = search_func(t);
        let mut b = Bindings::default();
        b.buffers.insert("idx".into(), if wide { ArrayData::I64(sorted.clone()) } else { ArrayData::I32(sorted.iter().map(|&v| v as i32).collect()) });
        b.buffers.insert("keys".into(), ArrayData::I64(keys.clone()));
        b.buffers.insert("out".into(), ArrayData::I64(vec![0; keys.len()]));
        b.params.insert("nq".into(), keys.len() as i64);
        b.params.insert("lo".into(), lo as i64);
        b.params.insert("hi".into(), hi as i64);
        let mut b2 = b.clone();
        interpret_func(&f, &mut b2).expect("interprets");
        let k = compile(&f, &CodegenOptions::default()).expect("compiles");
        // SAFETY: the interpreter, which checks every access, ran the same function on this data.
        unsafe { k.run(&mut b) }.expect("runs");
        let want: Vec<i64> = keys.iter().map(|k| (lo..hi).find(|&p| sorted[p] == *k).map_or(-1, |p| p as i64)).collect();
        prop_assert_eq!(&b.buffers["out"], &ArrayData::I64(want));
        prop_assert_eq!(&b.buffers["out"], &b2.buffers["out"]);
    }
}

#[test]
fn a_function_that_is_not_flat_is_an_error() {
    let f = Func {
        scratch: vec![],
        name: "nf".into(),
        params: vec![],
        axes: vec![],
        buffers: vec![out_decl("out", DType::F64)],
        body: vec![Stmt::Store {
            buffer: "out".into(),
            indices: vec![Expr::i64(0), Expr::i64(0)],
            value: Expr::Float(1.0, DType::F64),
        }],
    };
    assert!(compile(&f, &CodegenOptions::default()).is_err());
    let g = Func {
        body: vec![Stmt::Store {
            buffer: "out".into(),
            indices: vec![Expr::i64(0)],
            value: Expr::Coord("i".into()),
        }],
        ..f
    };
    assert!(compile(&g, &CodegenOptions::default()).is_err());
}

#[test]
fn missing_and_mistyped_buffers_are_runtime_errors() {
    let f = search_func(DType::I32);
    let k = compile(&f, &CodegenOptions::default()).expect("compiles");
    let mut b = Bindings::default();
    // SAFETY (both runs): `run` refuses the missing or mistyped arrays before it calls the
    // machine code.
    assert!(unsafe { k.run(&mut b) }.is_err());
    b.buffers.insert("idx".into(), ArrayData::I64(vec![]));
    b.buffers.insert("keys".into(), ArrayData::I64(vec![]));
    b.buffers.insert("out".into(), ArrayData::I64(vec![]));
    b.params.extend([
        ("nq".to_string(), 0),
        ("lo".to_string(), 0),
        ("hi".to_string(), 0),
    ]);
    let e = unsafe { k.run(&mut b) }.unwrap_err();
    assert!(e.to_string().contains("idx"), "{e}");
}
