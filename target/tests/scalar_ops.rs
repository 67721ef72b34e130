//! Binary operations of compiled code against plain Rust: integer division by zero and
//! MIN / -1, wrapping arithmetic, float arithmetic, min/max and comparisons with NaN.

mod common;
use common::*;
use lacuna_ir::{ArrayData, DType};
use lacuna_stage1::BinOp;
use lacuna_stage2::Expr;

fn run_binary(
    t: DType,
    out_t: DType,
    op: BinOp,
    a: ArrayData,
    b: ArrayData,
    wrap_out: impl Fn(Expr) -> Expr,
) -> ArrayData {
    let n = a.len();
    let f = elementwise(
        t,
        out_t,
        wrap_out(bin(op, load("a", var("i")), load("b", var("i")))),
    );
    let bnd = bindings(
        vec![("a", a), ("b", b), ("out", ArrayData::zeros(out_t, n))],
        &[("n", n as i64)],
    );
    run_checked(&f, &bnd).buffers["out"].clone()
}

#[test]
fn integer_division_by_zero_and_min_by_minus_one() {
    let a = vec![
        7,
        -7,
        7,
        -7,
        i64::MIN,
        i64::MIN,
        5,
        0,
        i64::MAX,
        3,
        i64::MIN,
        -1,
    ];
    let b = vec![2, 2, -2, -2, -1, 1, 0, 0, -1, 7, 0, i64::MIN];
    let want: Vec<i64> = a
        .iter()
        .zip(&b)
        .map(|(&x, &y)| if y == 0 { 0 } else { x.wrapping_div(y) })
        .collect();
    let got = run_binary(
        DType::I64,
        DType::I64,
        BinOp::Div,
        ArrayData::I64(a.clone()),
        ArrayData::I64(b.clone()),
        |e| e,
    );
    assert_eq!(got, ArrayData::I64(want));
    let a32: Vec<i32> = vec![7, -7, i32::MIN, i32::MIN, 5, i32::MAX, -9];
    let b32: Vec<i32> = vec![2, 0, -1, 1, 0, -1, 4];
    let want32: Vec<i32> = a32
        .iter()
        .zip(&b32)
        .map(|(&x, &y)| if y == 0 { 0 } else { x.wrapping_div(y) })
        .collect();
    let got = run_binary(
        DType::I32,
        DType::I32,
        BinOp::Div,
        ArrayData::I32(a32),
        ArrayData::I32(b32),
        |e| e,
    );
    assert_eq!(got, ArrayData::I32(want32));
    let a8: Vec<i8> = vec![7, -7, i8::MIN, i8::MIN, 5, i8::MAX, -9, i8::MIN, 0];
    let b8: Vec<i8> = vec![2, 0, -1, 1, 0, -1, 4, i8::MIN, -1];
    let want8: Vec<i8> = a8
        .iter()
        .zip(&b8)
        .map(|(&x, &y)| if y == 0 { 0 } else { x.wrapping_div(y) })
        .collect();
    let got = run_binary(
        DType::I8,
        DType::I8,
        BinOp::Div,
        ArrayData::I8(a8),
        ArrayData::I8(b8),
        |e| e,
    );
    assert_eq!(got, ArrayData::I8(want8));
}

#[test]
fn integer_arithmetic_wraps_and_min_max_are_signed() {
    let a = vec![i64::MAX, i64::MIN, -5, 3, i64::MIN, 1 << 62];
    let b = vec![1, 1, 7, -3, -1, 4];
    type Op = fn(i64, i64) -> i64;
    let cases: [(BinOp, Op); 5] = [
        (BinOp::Add, |x, y| x.wrapping_add(y)),
        (BinOp::Sub, |x, y| x.wrapping_sub(y)),
        (BinOp::Mul, |x, y| x.wrapping_mul(y)),
        (BinOp::Min, |x, y| x.min(y)),
        (BinOp::Max, |x, y| x.max(y)),
    ];
    for (op, rust) in cases {
        let want: Vec<i64> = a.iter().zip(&b).map(|(&x, &y)| rust(x, y)).collect();
        assert_eq!(
            run_binary(
                DType::I64,
                DType::I64,
                op,
                ArrayData::I64(a.clone()),
                ArrayData::I64(b.clone()),
                |e| e
            ),
            ArrayData::I64(want),
            "{op:?} i64"
        );
        let (a32, b32): (Vec<i32>, Vec<i32>) = (
            vec![i32::MAX, i32::MIN, -5, 3, i32::MIN, 1 << 30],
            vec![1, 1, 7, -3, -1, 4],
        );
        let want32: Vec<i32> = a32
            .iter()
            .zip(&b32)
            .map(|(&x, &y)| rust(x as i64, y as i64) as i32)
            .collect();
        assert_eq!(
            run_binary(
                DType::I32,
                DType::I32,
                op,
                ArrayData::I32(a32),
                ArrayData::I32(b32),
                |e| e
            ),
            ArrayData::I32(want32),
            "{op:?} i32"
        );
        let (a8, b8): (Vec<i8>, Vec<i8>) = (
            vec![i8::MAX, i8::MIN, -5, 3, i8::MIN, 1 << 6, 100, -100],
            vec![1, 1, 7, -3, -1, 4, 100, 27],
        );
        let want8: Vec<i8> = a8
            .iter()
            .zip(&b8)
            .map(|(&x, &y)| rust(x as i64, y as i64) as i8)
            .collect();
        assert_eq!(
            run_binary(
                DType::I8,
                DType::I8,
                op,
                ArrayData::I8(a8),
                ArrayData::I8(b8),
                |e| e
            ),
            ArrayData::I8(want8),
            "{op:?} i8"
        );
    }
}

const NAN: f64 = f64::NAN;

fn float_pairs() -> (Vec<f64>, Vec<f64>) {
    let a = vec![
        NAN,
        1.0,
        NAN,
        -1.0,
        f64::INFINITY,
        2.5,
        -0.5,
        3.0,
        1e300,
        0.0,
    ];
    let b = vec![
        2.0,
        NAN,
        NAN,
        f64::NEG_INFINITY,
        1.0,
        2.5,
        4.0,
        -3.0,
        1e300,
        7.0,
    ];
    (a, b)
}

#[test]
fn float_arithmetic_min_max_pow_with_nan() {
    let (a, b) = float_pairs();
    type Op = fn(f64, f64) -> f64;
    let cases: [(BinOp, Op); 7] = [
        (BinOp::Add, |x, y| x + y),
        (BinOp::Sub, |x, y| x - y),
        (BinOp::Mul, |x, y| x * y),
        (BinOp::Div, |x, y| x / y),
        (BinOp::Min, f64::min),
        (BinOp::Max, f64::max),
        (BinOp::Pow, f64::powf),
    ];
    for (op, rust) in cases {
        let want = ArrayData::F64(a.iter().zip(&b).map(|(&x, &y)| rust(x, y)).collect());
        let got = run_binary(
            DType::F64,
            DType::F64,
            op,
            ArrayData::F64(a.clone()),
            ArrayData::F64(b.clone()),
            |e| e,
        );
        assert!(same_bits(&got, &want), "{op:?} f64: {got:?} vs {want:?}");
        let (a32, b32): (Vec<f32>, Vec<f32>) = (
            a.iter().map(|&x| x as f32).collect(),
            b.iter().map(|&x| x as f32).collect(),
        );
        let want = ArrayData::F32(
            a32.iter()
                .zip(&b32)
                .map(|(&x, &y)| rust32(op, x, y))
                .collect(),
        );
        let got = run_binary(
            DType::F32,
            DType::F32,
            op,
            ArrayData::F32(a32),
            ArrayData::F32(b32),
            |e| e,
        );
        assert!(same_bits(&got, &want), "{op:?} f32: {got:?} vs {want:?}");
    }
}

fn rust32(op: BinOp, x: f32, y: f32) -> f32 {
    match op {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x * y,
        BinOp::Div => x / y,
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        _ => x.powf(y),
    }
}

#[test]
fn comparisons_are_ordered_except_not_equal() {
    let (a, b) = float_pairs();
    type Cmp = fn(f64, f64) -> bool;
    let cases: [(BinOp, Cmp); 6] = [
        (BinOp::Lt, |x, y| x < y),
        (BinOp::Le, |x, y| x <= y),
        (BinOp::Gt, |x, y| x > y),
        (BinOp::Ge, |x, y| x >= y),
        (BinOp::Eq, |x, y| x == y),
        (BinOp::Ne, |x, y| x != y),
    ];
    let (ia, ib) = (
        vec![i64::MIN, -1, 0, 5, 5, i64::MAX],
        vec![i64::MAX, 1, 0, 5, 4, i64::MIN],
    );
    for (op, rust) in cases {
        let want: Vec<i32> = a.iter().zip(&b).map(|(&x, &y)| rust(x, y) as i32).collect();
        let got = run_binary(
            DType::F64,
            DType::I32,
            op,
            ArrayData::F64(a.clone()),
            ArrayData::F64(b.clone()),
            |e| cast(DType::I32, e),
        );
        assert_eq!(got, ArrayData::I32(want), "{op:?} f64");
        let want: Vec<i32> = ia
            .iter()
            .zip(&ib)
            .map(|(&x, &y)| icmp(op, x, y) as i32)
            .collect();
        let got = run_binary(
            DType::I64,
            DType::I32,
            op,
            ArrayData::I64(ia.clone()),
            ArrayData::I64(ib.clone()),
            |e| cast(DType::I32, e),
        );
        assert_eq!(got, ArrayData::I32(want), "{op:?} i64");
        // Booleans compare as false < true.
        let f = elementwise(
            DType::I64,
            DType::I32,
            cast(
                DType::I32,
                bin(
                    op,
                    bin(BinOp::Lt, load("a", var("i")), i64c(0)),
                    bin(BinOp::Lt, load("b", var("i")), i64c(0)),
                ),
            ),
        );
        let bnd = bindings(
            vec![
                ("a", ArrayData::I64(ia.clone())),
                ("b", ArrayData::I64(ib.clone())),
                ("out", ArrayData::zeros(DType::I32, ia.len())),
            ],
            &[("n", ia.len() as i64)],
        );
        let want: Vec<i32> = ia
            .iter()
            .zip(&ib)
            .map(|(&x, &y)| bcmp(op, x < 0, y < 0) as i32)
            .collect();
        assert_eq!(
            run_checked(&f, &bnd).buffers["out"],
            ArrayData::I32(want),
            "{op:?} bool"
        );
    }
}

fn icmp(op: BinOp, x: i64, y: i64) -> bool {
    match op {
        BinOp::Lt => x < y,
        BinOp::Le => x <= y,
        BinOp::Gt => x > y,
        BinOp::Ge => x >= y,
        BinOp::Eq => x == y,
        _ => x != y,
    }
}

fn bcmp(op: BinOp, x: bool, y: bool) -> bool {
    icmp(op, x as i64, y as i64)
}
