//! `partition_loops` takes the guard of a split's tail out of the full chunks, keeps the
//! iterations' order and results, and leaves loops alone where that would not be exact.

use lacuna_ir::{ArrayData, DType};
use lacuna_stage1::{BinOp, Bindings, Role};
use lacuna_stage2::passes::partition_loops::partition_loops;
use lacuna_stage2::{interpret_func, BufferDecl, BufferKind, Expr, ForKind, Func, Stmt};

fn load(b: &str, i: Expr) -> Expr {
    Expr::Load {
        buffer: b.into(),
        indices: vec![i],
    }
}

/// `for o in 0..ceil((n - s) / w) { for u in 0..w { let v = s + (o * w + u);
/// if v < end { body(v) } } }`, `split`'s form, with `s` = `x[0]` truncated (a bound read from
/// memory) and `y[k] = y[k - 1] * 2 + x[v]` writes: a recurrence whose result depends on the
/// order of the iterations.
fn split_func(w: i64, outer: ForKind, end: Expr) -> Func {
    let s = Expr::Cast(DType::I64, Box::new(load("x", Expr::i64(0))));
    let v = Expr::var("v");
    let body = vec![Stmt::Store {
        buffer: "y".into(),
        indices: vec![Expr::add(v.clone(), Expr::i64(1))],
        value: Expr::add(
            Expr::mul(load("y", v.clone()), Expr::Float(2.0, DType::F64)),
            load("x", v.clone()),
        ),
    }];
    let chunk = vec![
        Stmt::Let {
            var: "v".into(),
            value: Expr::add(
                s.clone(),
                Expr::add(Expr::mul(Expr::var("o"), Expr::i64(w)), Expr::var("u")),
            ),
        },
        Stmt::If {
            cond: Expr::bin(BinOp::Lt, v, end.clone()),
            then_body: body,
            else_body: vec![],
        },
    ];
    let chunks = Expr::bin(
        BinOp::Div,
        Expr::add(Expr::sub(end, s), Expr::i64(w - 1)),
        Expr::i64(w),
    );
    let decl = |name: &str, role| BufferDecl {
        name: name.into(),
        dtype: DType::F64,
        layout: vec![],
        kind: BufferKind::Values(role),
    };
    Func {
        scratch: vec![],
        name: "split".into(),
        params: vec!["n".into()],
        axes: vec![],
        buffers: vec![decl("x", Role::Input), decl("y", Role::Output)],
        body: vec![Stmt::For {
            var: "o".into(),
            start: Expr::i64(0),
            end: chunks,
            kind: outer,
            body: vec![Stmt::For {
                var: "u".into(),
                start: Expr::i64(0),
                end: Expr::i64(w),
                kind: ForKind::Unrolled,
                body: chunk,
            }],
        }],
    }
}

fn run(f: &Func, n: usize, first: f64) -> ArrayData {
    let mut b = Bindings::default();
    b.params.insert("n".into(), n as i64);
    let mut x: Vec<f64> = (0..n).map(|v| v as f64 + 0.5).collect();
    if let Some(x0) = x.first_mut() {
        *x0 = first;
    }
    b.buffers.insert("x".into(), ArrayData::F64(x));
    b.buffers
        .insert("y".into(), ArrayData::F64(vec![1.0; n + 1]));
    interpret_func(f, &mut b).expect("runs");
    b.buffers.remove("y").expect("bound")
}

/// Whether any `if` is left inside the first loop's chunk, and how many loops the top level has.
fn shape(f: &Func) -> (usize, bool) {
    let loops = f
        .body
        .iter()
        .filter(|s| matches!(s, Stmt::For { .. }))
        .count();
    let guarded = match f.body.first() {
        Some(Stmt::For { body, .. }) => match body.first() {
            Some(Stmt::For { body, .. }) => body.iter().any(|s| matches!(s, Stmt::If { .. })),
            _ => true,
        },
        _ => true,
    };
    (loops, guarded)
}

#[test]
fn full_chunks_lose_the_guard_and_results_stay_equal() {
    for w in 1..5 {
        let f = split_func(w, ForKind::Serial, Expr::Param("n".into()));
        let g = partition_loops(f.clone());
        assert_eq!(shape(&g), (2, false), "width {w}: {g:?}");
        // Every length and start, including an empty range and a start past the end (the
        // start is x[0] truncated: 0, 1, 3 or beyond n).
        for n in 1..12 {
            for first in [0.25, 1.0, 3.0, 40.0] {
                assert_eq!(
                    run(&f, n, first),
                    run(&g, n, first),
                    "width {w}, n {n}, x[0] {first}"
                );
            }
        }
    }
}

#[test]
fn loops_whose_bound_may_change_or_that_are_not_serial_keep_their_guard() {
    // The end read from `y`, which the body writes.
    let f = split_func(
        3,
        ForKind::Serial,
        Expr::Cast(DType::I64, Box::new(load("y", Expr::i64(0)))),
    );
    assert_eq!(partition_loops(f.clone()), f);
    // A parallel outer loop keeps its partition of the whole range.
    let f = split_func(3, ForKind::Parallel, Expr::Param("n".into()));
    assert_eq!(partition_loops(f.clone()), f);
}
