//! Mutable variables and while-loops (the statements of co-iteration): a two-finger merge of two
//! sorted coordinate lists, compiled at O0 and O3 and interpreted, against a Rust reference.

mod common;
use common::*;
use lacuna_ir::{ArrayData, DType};
use lacuna_stage1::BinOp;
use lacuna_stage2::{Expr, Stmt};
use proptest::prelude::*;

fn decl(var: &str, dtype: DType, init: Expr) -> Stmt {
    Stmt::Decl {
        var: var.into(),
        dtype,
        init,
    }
}
fn assign(var: &str, value: Expr) -> Stmt {
    Stmt::Assign {
        var: var.into(),
        value,
    }
}

/// `out` gets the union of the sorted lists `a` and `b` (each coordinate once); `n[0]` its
/// length and `both[0]` the size of the intersection.
fn merge() -> lacuna_stage2::Func {
    let a = || load("a", var("p"));
    let b = || load("b", var("q"));
    let lt = |x, y| bin(BinOp::Lt, x, y);
    let add1 = |v: &str| assign(v, bin(BinOp::Add, var(v), i64c(1)));
    let emit = |c: Expr| vec![store("out", var("k"), c), add1("k")];
    let mut then_both = emit(a());
    then_both.extend([
        add1("p"),
        add1("q"),
        assign("m", bin(BinOp::Add, var("m"), i32c(1))),
    ]);
    let mut then_a = emit(a());
    then_a.push(add1("p"));
    let mut then_b = emit(b());
    then_b.push(add1("q"));
    let body = vec![
        decl("p", DType::I64, i64c(0)),
        decl("q", DType::I64, i64c(0)),
        decl("k", DType::I64, i64c(0)),
        decl("m", DType::I32, i64c(0)),
        Stmt::While {
            cond: bin(
                BinOp::And,
                lt(var("p"), param("na")),
                lt(var("q"), param("nb")),
            ),
            body: vec![
                Stmt::Let {
                    var: "ca".into(),
                    value: a(),
                },
                Stmt::Let {
                    var: "cb".into(),
                    value: b(),
                },
                if_(
                    bin(BinOp::Eq, var("ca"), var("cb")),
                    then_both,
                    vec![if_(lt(var("ca"), var("cb")), then_a, then_b)],
                ),
            ],
        },
        Stmt::While {
            cond: lt(var("p"), param("na")),
            body: {
                let mut v = emit(a());
                v.push(add1("p"));
                v
            },
        },
        Stmt::While {
            cond: lt(var("q"), param("nb")),
            body: {
                let mut v = emit(b());
                v.push(add1("q"));
                v
            },
        },
        store("n", i64c(0), var("k")),
        store("both", i64c(0), var("m")),
    ];
    func(
        "merge",
        &["na", "nb"],
        vec![
            input("a", DType::I64),
            input("b", DType::I64),
            output("out", DType::I64),
            output("n", DType::I64),
            output("both", DType::I32),
        ],
        body,
    )
}

proptest! {
    #[test]
    fn two_finger_merge_matches_reference(
        a in proptest::collection::btree_set(0i64..60, 0..20),
        b in proptest::collection::btree_set(0i64..60, 0..20),
    ) {
        let a: Vec<i64> = a.into_iter().collect();
        let b: Vec<i64> = b.into_iter().collect();
        let f = merge();
        let bind = bindings(
            vec![
                ("a", ArrayData::I64(a.clone())),
                ("b", ArrayData::I64(b.clone())),
                ("out", ArrayData::zeros(DType::I64, a.len() + b.len())),
                ("n", ArrayData::zeros(DType::I64, 1)),
                ("both", ArrayData::zeros(DType::I32, 1)),
            ],
            &[("na", a.len() as i64), ("nb", b.len() as i64)],
        );
        let got = run_checked(&f, &bind);
        let union: std::collections::BTreeSet<i64> = a.iter().chain(&b).copied().collect();
        let inter = a.iter().filter(|x| b.contains(x)).count();
        let n = union.len();
        let mut want = union.into_iter().collect::<Vec<_>>();
        want.resize(a.len() + b.len(), 0);
        prop_assert_eq!(&got.buffers["out"], &ArrayData::I64(want));
        prop_assert_eq!(&got.buffers["n"], &ArrayData::I64(vec![n as i64]));
        prop_assert_eq!(&got.buffers["both"], &ArrayData::I32(vec![inter as i32]));
    }
}

/// Assigning a loop variable is a typed codegen error, not a miscompile.
#[test]
fn assigning_an_immutable_variable_is_an_error() {
    let f = func(
        "bad",
        &["n"],
        vec![output("out", DType::I64)],
        vec![for_(
            "i",
            i64c(0),
            param("n"),
            vec![assign("i", i64c(3)), store("out", i64c(0), var("i"))],
        )],
    );
    let err = lacuna_target::compile(&f, &Default::default()).expect_err("must not compile");
    assert!(err.to_string().contains("`i`"), "{err}");
}
