//! Functions of several GPU launches: `attr launch` on a top-level statement starts a new
//! kernel; the interpreter runs the launches in order with races checked per launch, each with
//! its own extents; what crosses a launch boundary besides buffers is a typed error.

use lacuna_ir::{ArrayData, DType};
use lacuna_stage1::{BinOp, Bindings, Role};
use lacuna_stage2::gpu::{launch, split_launches, GpuError, LAUNCH_KEY};
use lacuna_stage2::{
    interpret_func, interpret_gpu, BufferDecl, BufferKind, Expr, ForKind, Func, GpuAxis,
    Stage2InterpError, Stmt,
};

fn load(b: &str, i: Expr) -> Expr {
    Expr::Load {
        buffer: b.into(),
        indices: vec![i],
    }
}

fn bound(var: &str, end: Expr, axis: GpuAxis, body: Vec<Stmt>) -> Stmt {
    Stmt::For {
        var: var.into(),
        start: Expr::i64(0),
        end,
        kind: ForKind::Bound(axis),
        body,
    }
}

fn launch_attr(s: Stmt) -> Stmt {
    Stmt::Attr {
        key: LAUNCH_KEY.into(),
        value: Expr::i64(0),
        body: vec![s],
    }
}

fn n() -> Expr {
    Expr::Param("n".into())
}

/// `y[b] = x[b]` by grid block `b`.
fn copy_nest() -> Stmt {
    bound(
        "b",
        n(),
        GpuAxis::BlockX,
        vec![Stmt::Store {
            buffer: "y".into(),
            indices: vec![Expr::var("b")],
            value: load("x", Expr::var("b")),
        }],
    )
}

/// `y[n-1-b] = y[n-1-b] * 2` by grid block `b`: the element another block of the copy wrote.
fn double_reversed_nest() -> Stmt {
    let at = Expr::sub(Expr::sub(n(), Expr::i64(1)), Expr::var("b"));
    bound(
        "b",
        n(),
        GpuAxis::BlockX,
        vec![Stmt::Store {
            buffer: "y".into(),
            indices: vec![at.clone()],
            value: Expr::bin(BinOp::Mul, load("y", at), Expr::Float(2.0, DType::F64)),
        }],
    )
}

fn func(body: Vec<Stmt>) -> Func {
    Func {
        scratch: vec![],
        name: "two".into(),
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
        body,
    }
}

fn bindings(n: usize) -> Bindings {
    let mut b = Bindings::default();
    b.params.insert("n".into(), n as i64);
    b.buffers.insert(
        "x".into(),
        ArrayData::F64((0..n).map(|v| v as f64 + 1.0).collect()),
    );
    b.buffers.insert("y".into(), ArrayData::F64(vec![0.0; n]));
    b
}

#[test]
fn one_launch_races_two_launches_do_not() {
    // One launch: block 0 doubles y[3], which block 3 writes.
    let one = func(vec![copy_nest(), double_reversed_nest()]);
    assert_eq!(split_launches(&one).expect("splits").len(), 1);
    let e = interpret_gpu(&one, &mut bindings(4)).expect_err("a race between blocks");
    assert!(
        matches!(e, Stage2InterpError::GpuRace { ref buffer, .. } if buffer == "y"),
        "{e}"
    );
    // Two launches: the second sees every write of the first.
    let two = func(vec![copy_nest(), launch_attr(double_reversed_nest())]);
    let kernels = split_launches(&two).expect("splits");
    assert_eq!(kernels.len(), 2);
    assert_eq!(kernels[0].body, vec![copy_nest()]);
    assert_eq!(kernels[1].body, vec![launch_attr(double_reversed_nest())]);
    for n in [0usize, 1, 4, 7] {
        let mut gpu = bindings(n);
        interpret_gpu(&two, &mut gpu).expect("race-free");
        let want: Vec<f64> = (0..n).map(|v| 2.0 * (v as f64 + 1.0)).collect();
        assert_eq!(gpu.buffers["y"], ArrayData::F64(want), "n = {n}");
        // The CPU reading (the annotation runs as its body) agrees.
        let mut cpu = bindings(n);
        interpret_func(&two, &mut cpu).expect("CPU");
        assert_eq!(cpu.buffers["y"], gpu.buffers["y"]);
    }
}

#[test]
fn a_function_without_boundaries_is_one_launch_unchanged() {
    let f = func(vec![copy_nest()]);
    assert_eq!(split_launches(&f).expect("splits"), vec![f.clone()]);
    // A boundary on the first nest (after top-level lets only) starts no empty launch.
    let g = func(vec![
        Stmt::Let {
            var: "h".into(),
            value: Expr::bin(BinOp::Div, n(), Expr::i64(2)),
        },
        launch_attr(copy_nest()),
    ]);
    assert_eq!(split_launches(&g).expect("splits"), vec![g.clone()]);
}

#[test]
fn every_launch_has_its_own_extents_and_races_are_per_launch() {
    // Launch 1 spreads the doubling over 3 threads of one block, each doing its share.
    let doubled = bound(
        "t",
        Expr::i64(3),
        GpuAxis::ThreadX,
        vec![Stmt::For {
            var: "q".into(),
            start: Expr::i64(0),
            end: n(),
            kind: ForKind::Serial,
            body: vec![
                Stmt::Let {
                    var: "e".into(),
                    value: Expr::add(Expr::var("t"), Expr::mul(Expr::i64(3), Expr::var("q"))),
                },
                Stmt::If {
                    cond: Expr::bin(BinOp::Lt, Expr::var("e"), n()),
                    then_body: vec![Stmt::Store {
                        buffer: "y".into(),
                        indices: vec![Expr::var("e")],
                        value: Expr::bin(
                            BinOp::Mul,
                            load("y", Expr::var("e")),
                            Expr::Float(2.0, DType::F64),
                        ),
                    }],
                    else_body: vec![],
                },
            ],
        }],
    );
    let f = func(vec![copy_nest(), launch_attr(doubled.clone())]);
    let kernels = split_launches(&f).expect("splits");
    let l0 = launch(&kernels[0]).expect("launch 0");
    let l1 = launch(&kernels[1]).expect("launch 1");
    let axes = |l: &lacuna_stage2::gpu::Launch| l.bound_axes().collect::<Vec<_>>();
    assert_eq!(axes(&l0), vec![GpuAxis::BlockX]);
    assert_eq!(axes(&l1), vec![GpuAxis::ThreadX]);
    assert_eq!(l1.constant_block(), Some([3, 1, 1]));
    let mut b = bindings(8);
    interpret_gpu(&f, &mut b).expect("race-free");
    let want: Vec<f64> = (0..8).map(|v| 2.0 * (v as f64 + 1.0)).collect();
    assert_eq!(b.buffers["y"], ArrayData::F64(want));
    // A race inside launch 1 is still one, and the message names the launch: every thread
    // doubles y[0].
    let racy = bound(
        "t",
        Expr::i64(3),
        GpuAxis::ThreadX,
        vec![Stmt::Store {
            buffer: "y".into(),
            indices: vec![Expr::i64(0)],
            value: load("y", Expr::i64(0)),
        }],
    );
    let f = func(vec![copy_nest(), launch_attr(racy)]);
    let e = interpret_gpu(&f, &mut bindings(4)).expect_err("a race in launch 1");
    assert!(e.to_string().contains("launch 1 block (0, 0, 0)"), "{e}");
}

#[test]
fn top_level_lets_cross_launches_only_when_they_read_no_written_buffer() {
    // `h = n / 2` and `g = h + 0` (parameters only) are repeated in launch 1, which reads g.
    let lets = vec![
        Stmt::Let {
            var: "h".into(),
            value: Expr::bin(BinOp::Div, n(), Expr::i64(2)),
        },
        Stmt::Let {
            var: "g".into(),
            value: Expr::add(Expr::var("h"), Expr::i64(0)),
        },
    ];
    let first_half = bound(
        "b",
        Expr::var("g"),
        GpuAxis::ThreadX,
        vec![Stmt::Store {
            buffer: "y".into(),
            indices: vec![Expr::var("b")],
            value: Expr::Float(-1.0, DType::F64),
        }],
    );
    let mut body = lets.clone();
    body.push(copy_nest());
    body.push(launch_attr(first_half.clone()));
    let f = func(body);
    let kernels = split_launches(&f).expect("splits");
    assert_eq!(kernels.len(), 2);
    let mut want_body = lets.clone();
    want_body.push(launch_attr(first_half.clone()));
    assert_eq!(kernels[1].body, want_body);
    // ...but a bound loop's extent may not read a variable: the launch is rejected, typed.
    let e = interpret_gpu(&f, &mut bindings(4)).expect_err("extent reads g");
    assert!(
        matches!(
            e,
            Stage2InterpError::Gpu(GpuError::DataDependentExtent { .. })
        ),
        "{e}"
    );
    // A guard reading the repeated let is fine.
    let guarded = bound(
        "b",
        n(),
        GpuAxis::BlockX,
        vec![Stmt::If {
            cond: Expr::bin(BinOp::Lt, Expr::var("b"), Expr::var("g")),
            then_body: vec![Stmt::Store {
                buffer: "y".into(),
                indices: vec![Expr::var("b")],
                value: Expr::Float(-1.0, DType::F64),
            }],
            else_body: vec![],
        }],
    );
    let mut body = lets.clone();
    body.push(copy_nest());
    body.push(launch_attr(guarded.clone()));
    let mut b = bindings(5);
    interpret_gpu(&func(body), &mut b).expect("runs");
    assert_eq!(
        b.buffers["y"],
        ArrayData::F64(vec![-1.0, -1.0, 3.0, 4.0, 5.0])
    );
    // A top-level let reading y (which launch 0 writes) cannot be repeated in launch 1.
    let body = vec![
        copy_nest(),
        Stmt::Let {
            var: "g".into(),
            value: Expr::Cast(DType::I64, Box::new(load("y", Expr::i64(0)))),
        },
        launch_attr(guarded),
    ];
    let e = split_launches(&func(body)).expect_err("crosses a launch");
    assert!(
        matches!(e, GpuError::CrossLaunch { launch: 1, defined_in: 0, ref what } if what.contains("`g`")),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("only buffers survive a kernel launch"),
        "{e}"
    );
}

#[test]
fn scratch_and_mutable_variables_do_not_cross_launches() {
    use lacuna_stage2::{MemScope, ScratchDecl};
    let alloc = Stmt::Alloc {
        buffer: "s".into(),
        dtype: DType::F64,
        extent: Expr::i64(4),
        scope: MemScope::Shared,
    };
    let uses = bound(
        "t",
        Expr::i64(4),
        GpuAxis::ThreadX,
        vec![Stmt::Store {
            buffer: "s".into(),
            indices: vec![Expr::var("t")],
            value: Expr::Float(0.0, DType::F64),
        }],
    );
    let mut f = func(vec![alloc, copy_nest(), launch_attr(uses)]);
    f.scratch.push(ScratchDecl {
        name: "s".into(),
        dtype: DType::F64,
        scope: MemScope::Shared,
    });
    let e = split_launches(&f).expect_err("scratch crosses");
    assert!(
        matches!(e, GpuError::CrossLaunch { ref what, .. } if what.contains("scratch buffer `s`")),
        "{e}"
    );
    let decl = Stmt::Decl {
        var: "c".into(),
        dtype: DType::I64,
        init: Expr::i64(0),
    };
    let reads = bound(
        "b",
        n(),
        GpuAxis::BlockX,
        vec![Stmt::Store {
            buffer: "y".into(),
            indices: vec![Expr::var("b")],
            value: Expr::Cast(DType::F64, Box::new(Expr::var("c"))),
        }],
    );
    let e = split_launches(&func(vec![decl, copy_nest(), launch_attr(reads)]))
        .expect_err("a mutable variable crosses");
    assert!(
        matches!(e, GpuError::CrossLaunch { ref what, .. } if what == "variable `c`"),
        "{e}"
    );
}

#[test]
fn a_nested_launch_annotation_is_rejected() {
    let inner = bound(
        "t",
        Expr::i64(2),
        GpuAxis::ThreadX,
        vec![launch_attr(Stmt::Store {
            buffer: "y".into(),
            indices: vec![Expr::var("t")],
            value: Expr::Float(1.0, DType::F64),
        })],
    );
    let f = func(vec![copy_nest(), inner]);
    let e = split_launches(&f).expect_err("nested");
    assert!(
        matches!(e, GpuError::NestedLaunch { ref parent } if parent == "loop `t`"),
        "{e}"
    );
    let e = interpret_gpu(&f, &mut bindings(2)).expect_err("nested");
    assert!(e.to_string().contains("top-level statement"), "{e}");
}
