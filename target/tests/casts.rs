//! Conversions and unary operations of compiled code against plain Rust: every cast
//! (saturating float-to-int, NaN, through bool), typed literals, neg/abs/exp/log/sqrt/not.

mod common;
use common::*;
use lacuna_ir::{ArrayData, DType, Scalar};
use lacuna_stage1::UnOp;
use lacuna_stage2::Expr;

const NAN: f64 = f64::NAN;

fn samples(t: DType) -> ArrayData {
    match t {
        DType::F64 => ArrayData::F64(vec![
            0.0,
            -0.0,
            1.5,
            -1.5,
            2.5,
            -2.7,
            1e10,
            -1e10,
            1e20,
            -1e20,
            NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            3e9,
            -3e9,
            2147483647.5,
            -2147483648.9,
            f64::MAX,
            f64::MIN_POSITIVE,
            1e-300,
            16777217.0,
            9.3e18,
            -9.3e18,
        ]),
        DType::F32 => ArrayData::F32(vec![
            0.0,
            -0.0,
            1.5,
            -1.5,
            2.5,
            -2.7,
            1e10,
            -1e10,
            1e20,
            -1e20,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            3e9,
            -3e9,
            2147483600.0,
            f32::MAX,
            f32::MIN_POSITIVE,
            1e-40,
            9.3e18,
            -9.3e18,
        ]),
        DType::I64 => ArrayData::I64(vec![
            0,
            1,
            -1,
            i64::MIN,
            i64::MAX,
            1 << 40,
            3_000_000_000,
            -3_000_000_000,
            16_777_217,
            (1 << 53) + 1,
            i32::MIN as i64 - 1,
            255,
        ]),
        DType::I8 => ArrayData::I8(vec![0, 1, -1, i8::MIN, i8::MAX, 100, -100, 64]),
        _ => ArrayData::I32(vec![
            0,
            1,
            -1,
            i32::MIN,
            i32::MAX,
            16_777_217,
            -16_777_217,
            255,
            65536,
        ]),
    }
}

#[test]
fn every_cast_matches_rust_as() {
    let types = [DType::F32, DType::F64, DType::I8, DType::I32, DType::I64];
    for from in types {
        let a = samples(from);
        let n = a.len();
        for to in types {
            let f = elementwise(from, to, cast(to, load("a", var("i"))));
            let bnd = bindings(
                vec![
                    ("a", a.clone()),
                    ("b", ArrayData::zeros(from, n)),
                    ("out", ArrayData::zeros(to, n)),
                ],
                &[("n", n as i64)],
            );
            let got = run_checked(&f, &bnd).buffers["out"].clone();
            let mut want = ArrayData::zeros(to, n);
            for i in 0..n {
                want.set(i, a.get(i).expect("in range").cast(to));
            }
            assert!(
                same_bits(&got, &want),
                "{from} -> {to}: {got:?} vs {want:?}"
            );
        }
        // Through bool: x != 0 (NaN is true), back to integers and floats.
        for to in types {
            let f = elementwise(from, to, cast(to, cast(DType::Bool, load("a", var("i")))));
            let bnd = bindings(
                vec![
                    ("a", a.clone()),
                    ("b", ArrayData::zeros(from, n)),
                    ("out", ArrayData::zeros(to, n)),
                ],
                &[("n", n as i64)],
            );
            let got = run_checked(&f, &bnd).buffers["out"].clone();
            let want: Vec<f64> = a
                .to_f64_vec()
                .iter()
                .map(|&x| (x != 0.0) as i64 as f64)
                .collect();
            assert_eq!(got.to_f64_vec(), want, "{from} -> bool -> {to}");
        }
    }
}

#[test]
fn saturating_float_to_int_examples() {
    let a = vec![
        NAN,
        1e300,
        -1e300,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.99,
        0.99,
        2147483648.0,
    ];
    let n = a.len();
    let f = elementwise(
        DType::F64,
        DType::I32,
        cast(DType::I32, load("a", var("i"))),
    );
    let bnd = bindings(
        vec![
            ("a", ArrayData::F64(a)),
            ("b", ArrayData::zeros(DType::F64, n)),
            ("out", ArrayData::zeros(DType::I32, n)),
        ],
        &[("n", n as i64)],
    );
    assert_eq!(
        run_checked(&f, &bnd).buffers["out"],
        ArrayData::I32(vec![
            0,
            i32::MAX,
            i32::MIN,
            i32::MAX,
            i32::MIN,
            0,
            0,
            i32::MAX
        ])
    );
}

#[test]
fn saturating_float_to_i8_and_wrapping_int_to_i8() {
    let a = vec![
        NAN, 1e300, -1e300, 127.9, -128.9, 128.0, -129.0, -0.99, 42.5,
    ];
    let n = a.len();
    let f = elementwise(DType::F64, DType::I8, cast(DType::I8, load("a", var("i"))));
    let bnd = bindings(
        vec![
            ("a", ArrayData::F64(a)),
            ("b", ArrayData::zeros(DType::F64, n)),
            ("out", ArrayData::zeros(DType::I8, n)),
        ],
        &[("n", n as i64)],
    );
    assert_eq!(
        run_checked(&f, &bnd).buffers["out"],
        ArrayData::I8(vec![0, 127, -128, 127, -128, 127, -128, 0, 42])
    );
    // Integer to i8 keeps the low 8 bits, like `as i8`.
    let a = vec![128i64, 255, 256, -129, 300, i64::MIN, i64::MAX];
    let n = a.len();
    let f = elementwise(DType::I64, DType::I8, cast(DType::I8, load("a", var("i"))));
    let bnd = bindings(
        vec![
            ("a", ArrayData::I64(a.clone())),
            ("b", ArrayData::zeros(DType::I64, n)),
            ("out", ArrayData::zeros(DType::I8, n)),
        ],
        &[("n", n as i64)],
    );
    let want: Vec<i8> = a.iter().map(|&x| x as i8).collect();
    assert_eq!(run_checked(&f, &bnd).buffers["out"], ArrayData::I8(want));
}

#[test]
fn literals_of_every_type_convert_like_scalars() {
    let lits = [
        Expr::Int(-3, DType::F64),
        Expr::Float(2.9, DType::I64),
        Expr::Float(f64::NAN, DType::I32),
        Expr::Float(-300.0, DType::I8),
        Expr::Int(200, DType::I8),
        Expr::Int(5, DType::Bool),
        Expr::Float(1e40, DType::F32),
        Expr::Bool(true),
    ];
    for lit in lits {
        let f = elementwise(DType::F64, DType::F64, cast(DType::F64, lit.clone()));
        let bnd = bindings(
            vec![
                ("a", ArrayData::zeros(DType::F64, 1)),
                ("b", ArrayData::zeros(DType::F64, 1)),
                ("out", ArrayData::zeros(DType::F64, 1)),
            ],
            &[("n", 1)],
        );
        let want = match &lit {
            Expr::Int(v, t) => Scalar::I64(*v).cast(*t),
            Expr::Float(v, t) => Scalar::F64(*v).cast(*t),
            _ => Scalar::Bool(true),
        };
        assert!(
            same_bits(
                &run_checked(&f, &bnd).buffers["out"],
                &ArrayData::F64(vec![want.as_f64()])
            ),
            "{lit:?}"
        );
    }
}

#[test]
fn unary_operations() {
    let a = vec![-2.5, 0.0, -0.0, 4.0, NAN, f64::NEG_INFINITY, 1e-3, -1.0];
    let n = a.len();
    type Op = fn(f64) -> f64;
    let cases: [(UnOp, Op); 5] = [
        (UnOp::Neg, |x| -x),
        (UnOp::Abs, f64::abs),
        (UnOp::Exp, f64::exp),
        (UnOp::Log, f64::ln),
        (UnOp::Sqrt, f64::sqrt),
    ];
    for (op, rust) in cases {
        let f = elementwise(DType::F64, DType::F64, un(op, load("a", var("i"))));
        let bnd = bindings(
            vec![
                ("a", ArrayData::F64(a.clone())),
                ("b", ArrayData::zeros(DType::F64, n)),
                ("out", ArrayData::zeros(DType::F64, n)),
            ],
            &[("n", n as i64)],
        );
        let want = ArrayData::F64(a.iter().map(|&x| rust(x)).collect());
        assert!(
            same_bits(&run_checked(&f, &bnd).buffers["out"], &want),
            "{op:?} f64"
        );
        let a32: Vec<f32> = a.iter().map(|&x| x as f32).collect();
        let f = elementwise(DType::F32, DType::F32, un(op, load("a", var("i"))));
        let bnd = bindings(
            vec![
                ("a", ArrayData::F32(a32.clone())),
                ("b", ArrayData::zeros(DType::F32, n)),
                ("out", ArrayData::zeros(DType::F32, n)),
            ],
            &[("n", n as i64)],
        );
        let want = ArrayData::F32(a32.iter().map(|&x| rust32_un(op, x)).collect());
        assert!(
            same_bits(&run_checked(&f, &bnd).buffers["out"], &want),
            "{op:?} f32"
        );
    }
    // Integers: wrapping neg/abs; exp/log/sqrt compute in f64; `!x` tests against zero.
    let ia = vec![i64::MIN, -7, 0, 9, i64::MAX];
    let m = ia.len();
    let ib = || {
        bindings(
            vec![
                ("a", ArrayData::I64(ia.clone())),
                ("b", ArrayData::zeros(DType::I64, m)),
                ("out", ArrayData::zeros(DType::I64, m)),
            ],
            &[("n", m as i64)],
        )
    };
    let f = elementwise(DType::I64, DType::I64, un(UnOp::Neg, load("a", var("i"))));
    assert_eq!(
        run_checked(&f, &ib()).buffers["out"],
        ArrayData::I64(ia.iter().map(|x| x.wrapping_neg()).collect())
    );
    let f = elementwise(DType::I64, DType::I64, un(UnOp::Abs, load("a", var("i"))));
    assert_eq!(
        run_checked(&f, &ib()).buffers["out"],
        ArrayData::I64(ia.iter().map(|x| x.wrapping_abs()).collect())
    );
    let f = elementwise(
        DType::I64,
        DType::I64,
        cast(DType::I64, un(UnOp::Not, load("a", var("i")))),
    );
    assert_eq!(
        run_checked(&f, &ib()).buffers["out"],
        ArrayData::I64(ia.iter().map(|&x| (x == 0) as i64).collect())
    );
    // i8: wrapping neg/abs of MIN.
    let a8 = vec![i8::MIN, -7, 0, 9, i8::MAX];
    let b8 = || {
        bindings(
            vec![
                ("a", ArrayData::I8(a8.clone())),
                ("b", ArrayData::zeros(DType::I8, a8.len())),
                ("out", ArrayData::zeros(DType::I8, a8.len())),
            ],
            &[("n", a8.len() as i64)],
        )
    };
    let f = elementwise(DType::I8, DType::I8, un(UnOp::Neg, load("a", var("i"))));
    assert_eq!(
        run_checked(&f, &b8()).buffers["out"],
        ArrayData::I8(a8.iter().map(|x| x.wrapping_neg()).collect())
    );
    let f = elementwise(DType::I8, DType::I8, un(UnOp::Abs, load("a", var("i"))));
    assert_eq!(
        run_checked(&f, &b8()).buffers["out"],
        ArrayData::I8(a8.iter().map(|x| x.wrapping_abs()).collect())
    );
    let f = elementwise(DType::I64, DType::F64, un(UnOp::Sqrt, load("a", var("i"))));
    let bnd = bindings(
        vec![
            ("a", ArrayData::I64(ia.clone())),
            ("b", ArrayData::zeros(DType::I64, m)),
            ("out", ArrayData::zeros(DType::F64, m)),
        ],
        &[("n", m as i64)],
    );
    assert!(same_bits(
        &run_checked(&f, &bnd).buffers["out"],
        &ArrayData::F64(ia.iter().map(|&x| (x as f64).sqrt()).collect())
    ));
}

fn rust32_un(op: UnOp, x: f32) -> f32 {
    match op {
        UnOp::Neg => -x,
        UnOp::Abs => x.abs(),
        UnOp::Exp => x.exp(),
        UnOp::Log => x.ln(),
        _ => x.sqrt(),
    }
}
