//! The interpreter runs GPU-bound loops with GPU semantics: iterations are concurrent, so two
//! of them touching one element where either writes it is reported as a race.

use lacuna_ir::{ArrayData, DType};
use lacuna_stage1::{BinOp, Bindings, Role};
use lacuna_stage2::{
    interpret_func, BufferDecl, BufferKind, Expr, ForKind, Func, GpuAxis, Stage2InterpError, Stmt,
};

fn func(store_at: Expr) -> Func {
    // for i in 0..n bound to threadIdx.x { y[store_at] = y[store_at] + x[i] }
    let load = |b: &str, i: Expr| Expr::Load {
        buffer: b.into(),
        indices: vec![i],
    };
    Func {
        scratch: vec![],
        name: "scatter".into(),
        params: vec!["n".into()],
        axes: vec![],
        buffers: vec![
            BufferDecl {
                name: "x".into(),
                dtype: DType::F64,
                layout: vec![],
                kind: BufferKind::Values(Role::Input),
            },
            BufferDecl {
                name: "y".into(),
                dtype: DType::F64,
                layout: vec![],
                kind: BufferKind::Values(Role::Output),
            },
        ],
        body: vec![Stmt::For {
            var: "i".into(),
            start: Expr::i64(0),
            end: Expr::Param("n".into()),
            kind: ForKind::Bound(GpuAxis::ThreadX),
            body: vec![Stmt::Store {
                buffer: "y".into(),
                indices: vec![store_at.clone()],
                value: Expr::bin(BinOp::Add, load("y", store_at), load("x", Expr::var("i"))),
            }],
        }],
    }
}

fn bindings(n: usize) -> Bindings {
    let mut b = Bindings::default();
    b.params.insert("n".into(), n as i64);
    b.buffers.insert(
        "x".into(),
        ArrayData::F64((0..n).map(|v| v as f64).collect()),
    );
    b.buffers.insert("y".into(), ArrayData::F64(vec![0.0; n]));
    b
}

#[test]
fn a_non_atomic_scatter_is_a_race() {
    let e = interpret_func(&func(Expr::i64(0)), &mut bindings(4))
        .expect_err("every thread adds into y[0]");
    assert!(
        matches!(e, Stage2InterpError::Race { ref buffer, index: 0, .. } if buffer == "y"),
        "{e}"
    );
}

#[test]
fn a_scatter_that_collides_for_some_threads_is_a_race() {
    // y[i / 2]: threads 0 and 1 share y[0].
    let e = interpret_func(
        &func(Expr::bin(BinOp::Div, Expr::var("i"), Expr::i64(2))),
        &mut bindings(4),
    )
    .expect_err("collides");
    assert!(
        matches!(
            e,
            Stage2InterpError::Race {
                first: 0,
                second: 1,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn one_element_per_thread_is_not_a_race() {
    let mut b = bindings(4);
    interpret_func(&func(Expr::var("i")), &mut b).expect("disjoint writes");
    assert_eq!(b.buffers["y"], ArrayData::F64(vec![0.0, 1.0, 2.0, 3.0]));
}
