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

// ---- GPU semantics (`interpret_gpu`): shared memory, barriers, shuffles, atomics ----

mod lockstep {
    use lacuna_ir::{ArrayData, DType};
    use lacuna_stage1::{BinOp, Bindings, Role};
    use lacuna_stage2::{
        interpret_func, interpret_gpu, AtomicOp, BufferDecl, BufferKind, Expr, ForKind, Func,
        GpuAxis, MemScope, ScratchDecl, ShuffleKind, Stage2InterpError, Stmt,
    };

    fn buf(name: &str, role: Role) -> BufferDecl {
        BufferDecl {
            name: name.into(),
            dtype: DType::F64,
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
    fn store(b: &str, i: Expr, v: Expr) -> Stmt {
        Stmt::Store {
            buffer: b.into(),
            indices: vec![i],
            value: v,
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
    fn func(scratch: Vec<ScratchDecl>, body: Vec<Stmt>) -> Func {
        Func {
            scratch,
            name: "k".into(),
            params: vec!["nb".into()],
            axes: vec![],
            buffers: vec![buf("x", Role::Input), buf("y", Role::Output)],
            body,
        }
    }
    fn data(nb: i64, n: usize) -> Bindings {
        let mut b = Bindings::default();
        b.params.insert("nb".into(), nb);
        b.buffers.insert(
            "x".into(),
            ArrayData::F64((0..n).map(|v| (v * v % 17) as f64 + 0.5).collect()),
        );
        b.buffers.insert("y".into(), ArrayData::F64(vec![0.0; n]));
        b
    }
    fn xs(b: &Bindings) -> Vec<f64> {
        b.buffers["x"].to_f64_vec()
    }
    fn ys(b: &Bindings) -> Vec<f64> {
        b.buffers["y"].to_f64_vec()
    }

    /// Each block stages 64 elements of `x` in shared memory and writes them reversed: with
    /// the barrier between the two phases it is correct, without it a race on the tile.
    fn reverse_blocks(with_barrier: bool) -> Func {
        let g = || Expr::add(Expr::mul(Expr::var("b"), Expr::i64(64)), Expr::var("t"));
        let mut body = vec![bound(
            "t",
            Expr::i64(64),
            GpuAxis::ThreadX,
            vec![store("tile", Expr::var("t"), load("x", g()))],
        )];
        if with_barrier {
            body.push(Stmt::Barrier);
        }
        body.push(bound(
            "t",
            Expr::i64(64),
            GpuAxis::ThreadX,
            vec![store(
                "y",
                g(),
                load("tile", Expr::sub(Expr::i64(63), Expr::var("t"))),
            )],
        ));
        func(
            vec![ScratchDecl {
                name: "tile".into(),
                dtype: DType::F64,
                scope: MemScope::Shared,
            }],
            vec![
                Stmt::Alloc {
                    buffer: "tile".into(),
                    dtype: DType::F64,
                    extent: Expr::i64(64),
                    scope: MemScope::Shared,
                },
                bound("b", Expr::Param("nb".into()), GpuAxis::BlockX, body),
            ],
        )
    }

    #[test]
    fn shared_tile_with_barrier_is_per_block_and_race_free() {
        let mut b = data(3, 192);
        interpret_gpu(&reverse_blocks(true), &mut b).expect("race-free");
        let (x, y) = (xs(&b), ys(&b));
        for blk in 0..3 {
            for t in 0..64 {
                assert_eq!(
                    y[blk * 64 + t],
                    x[blk * 64 + 63 - t],
                    "block {blk} thread {t}"
                );
            }
        }
    }

    #[test]
    fn missing_barrier_is_a_race_on_shared_memory() {
        let e = interpret_gpu(&reverse_blocks(false), &mut data(2, 128)).expect_err("a race");
        assert!(
            matches!(e, Stage2InterpError::GpuRace { ref buffer, .. } if buffer == "tile"),
            "{e}"
        );
    }

    #[test]
    fn barrier_on_cpu_is_a_typed_error() {
        let e = interpret_func(&reverse_blocks(true), &mut data(1, 64)).expect_err("GPU-only");
        assert!(
            matches!(e, Stage2InterpError::GpuOnly { what: "barrier" }),
            "{e}"
        );
    }

    #[test]
    fn barrier_in_thread_divergent_if_is_flagged() {
        let f = func(
            vec![],
            vec![bound(
                "t",
                Expr::i64(64),
                GpuAxis::ThreadX,
                vec![Stmt::If {
                    cond: Expr::bin(BinOp::Lt, Expr::var("t"), Expr::i64(32)),
                    then_body: vec![Stmt::Barrier],
                    else_body: vec![],
                }],
            )],
        );
        let e = interpret_gpu(&f, &mut data(1, 64)).expect_err("divergent barrier");
        assert!(
            matches!(
                e,
                Stage2InterpError::Divergence {
                    scope: "block",
                    sync: "barrier",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("if t < 32"), "{e}");
        // A condition uniform across the block (on blockIdx) is fine.
        let f = func(
            vec![],
            vec![bound(
                "b",
                Expr::i64(2),
                GpuAxis::BlockX,
                vec![bound(
                    "t",
                    Expr::i64(64),
                    GpuAxis::ThreadX,
                    vec![Stmt::If {
                        cond: Expr::bin(BinOp::Lt, Expr::var("b"), Expr::i64(1)),
                        then_body: vec![Stmt::Barrier],
                        else_body: vec![],
                    }],
                )],
            )],
        );
        interpret_gpu(&f, &mut data(1, 64)).expect("uniform");
    }

    fn shfl(kind: ShuffleKind, v: &str, lane: i64, width: u32) -> Expr {
        Expr::Shuffle {
            kind,
            value: Box::new(Expr::var(v)),
            lane: Box::new(Expr::i64(lane)),
            width,
        }
    }
    fn let_(v: &str, e: Expr) -> Stmt {
        Stmt::Let {
            var: v.into(),
            value: e,
        }
    }

    /// A tree reduction over segments of `width` lanes with `kind`; lane 0 of each segment
    /// (Down) or every lane (Xor) ends with the segment's sum; `y[t]` gets each lane's value.
    fn reduce(kind: ShuffleKind, width: u32, threads: i64) -> Func {
        let mut body = vec![let_("v0", load("x", Expr::var("t")))];
        let (mut off, mut k) = (width / 2, 0);
        while off > 0 {
            body.push(let_(
                &format!("v{}", k + 1),
                Expr::add(
                    Expr::var(&format!("v{k}")),
                    shfl(kind, &format!("v{k}"), off as i64, width),
                ),
            ));
            off /= 2;
            k += 1;
        }
        body.push(store("y", Expr::var("t"), Expr::var(&format!("v{k}"))));
        func(
            vec![],
            vec![bound("t", Expr::i64(threads), GpuAxis::ThreadX, body)],
        )
    }

    #[test]
    fn shuffle_down_reduces_each_segment_into_its_first_lane() {
        for width in [32u32, 8, 2] {
            let mut b = data(1, 64);
            interpret_gpu(&reduce(ShuffleKind::Down, width, 64), &mut b).expect("runs");
            let (x, y) = (xs(&b), ys(&b));
            for seg in 0..64 / width as usize {
                let lo = seg * width as usize;
                let want: f64 = x[lo..lo + width as usize].iter().sum();
                assert!((y[lo] - want).abs() < 1e-9, "width {width} segment {seg}");
            }
        }
    }

    #[test]
    fn shuffle_xor_gives_every_lane_the_sum() {
        let mut b = data(1, 64);
        interpret_gpu(&reduce(ShuffleKind::Xor, 32, 64), &mut b).expect("runs");
        let (x, y) = (xs(&b), ys(&b));
        for (t, got) in y.iter().enumerate() {
            let w = t / 32 * 32;
            let want: f64 = x[w..w + 32].iter().sum();
            assert!((got - want).abs() < 1e-9, "lane {t}");
        }
    }

    #[test]
    fn shuffle_idx_broadcasts_a_lane() {
        let f = func(
            vec![],
            vec![bound(
                "t",
                Expr::i64(64),
                GpuAxis::ThreadX,
                vec![
                    let_("v", load("x", Expr::var("t"))),
                    store("y", Expr::var("t"), shfl(ShuffleKind::Idx, "v", 3, 32)),
                ],
            )],
        );
        let mut b = data(1, 64);
        interpret_gpu(&f, &mut b).expect("runs");
        let (x, y) = (xs(&b), ys(&b));
        for t in 0..64 {
            assert_eq!(y[t], x[t / 32 * 32 + 3], "lane {t}");
        }
    }

    #[test]
    fn shuffle_errors_divergent_partial_warps_and_cpu() {
        // A shuffle under a condition that splits a warp.
        let f = func(
            vec![],
            vec![bound(
                "t",
                Expr::i64(64),
                GpuAxis::ThreadX,
                vec![
                    let_("v", load("x", Expr::var("t"))),
                    Stmt::If {
                        cond: Expr::bin(BinOp::Lt, Expr::var("t"), Expr::i64(40)),
                        then_body: vec![store(
                            "y",
                            Expr::var("t"),
                            shfl(ShuffleKind::Down, "v", 1, 32),
                        )],
                        else_body: vec![],
                    },
                ],
            )],
        );
        let e = interpret_gpu(&f, &mut data(1, 64)).expect_err("divergent warp");
        assert!(
            matches!(
                e,
                Stage2InterpError::Divergence {
                    scope: "warp",
                    sync: "warp shuffle",
                    ..
                }
            ),
            "{e}"
        );
        // A condition that splits the block at a warp boundary is fine.
        let mut f2 = f.clone();
        if let Stmt::For { body, .. } = &mut f2.body[0] {
            if let Stmt::If { cond, .. } = &mut body[1] {
                *cond = Expr::bin(BinOp::Lt, Expr::var("t"), Expr::i64(32));
            }
        }
        interpret_gpu(&f2, &mut data(1, 64)).expect("whole warps");
        // Blocks of 16 threads have no whole warp.
        let e = interpret_gpu(&reduce(ShuffleKind::Down, 8, 16), &mut data(1, 16))
            .expect_err("partial warp");
        assert!(
            matches!(e, Stage2InterpError::ShuffleWarp { threads: 16 }),
            "{e}"
        );
        // Shuffles have no CPU meaning.
        let e = interpret_func(&reduce(ShuffleKind::Down, 32, 32), &mut data(1, 32))
            .expect_err("GPU-only");
        assert!(matches!(e, Stage2InterpError::GpuOnly { .. }), "{e}");
    }

    /// `y[t % 4] += x[t]` by 64 threads: atomics make it race-free and exact; a plain store
    /// of one of the elements by another thread races with the atomics.
    #[test]
    fn atomics_do_not_race_with_each_other_but_plain_stores_do() {
        let atomic = |plain_too: bool| {
            let mut body = vec![Stmt::Atomic {
                op: AtomicOp::Add,
                buffer: "y".into(),
                indices: vec![Expr::sub(
                    Expr::var("t"),
                    Expr::mul(
                        Expr::bin(BinOp::Div, Expr::var("t"), Expr::i64(4)),
                        Expr::i64(4),
                    ),
                )],
                value: load("x", Expr::var("t")),
            }];
            if plain_too {
                body.push(Stmt::If {
                    cond: Expr::bin(BinOp::Eq, Expr::var("t"), Expr::i64(9)),
                    then_body: vec![store("y", Expr::i64(0), Expr::Float(1.0, DType::F64))],
                    else_body: vec![],
                });
            }
            func(
                vec![],
                vec![bound("t", Expr::i64(64), GpuAxis::ThreadX, body)],
            )
        };
        let mut b = data(1, 64);
        interpret_gpu(&atomic(false), &mut b).expect("atomics commute");
        let (x, y) = (xs(&b), ys(&b));
        for (r, got) in y.iter().take(4).enumerate() {
            let want: f64 = (0..64).filter(|t| t % 4 == r).map(|t| x[t]).sum();
            assert!((got - want).abs() < 1e-9, "y[{r}]");
        }
        // The CPU reading (serial bound loop) agrees and sees no race either.
        let mut c = data(1, 64);
        interpret_func(&atomic(false), &mut c).expect("serial");
        assert_eq!(ys(&c)[..4], y[..4]);
        let e = interpret_gpu(&atomic(true), &mut data(1, 64)).expect_err("plain store races");
        assert!(
            matches!(e, Stage2InterpError::GpuRace { ref buffer, index: 0, .. } if buffer == "y"),
            "{e}"
        );
    }

    /// Local scratch is private to each thread: every thread uses the same indices without
    /// a race.
    #[test]
    fn local_scratch_is_per_thread() {
        let f = func(
            vec![ScratchDecl {
                name: "acc".into(),
                dtype: DType::F64,
                scope: MemScope::Local,
            }],
            vec![bound(
                "t",
                Expr::i64(64),
                GpuAxis::ThreadX,
                vec![
                    Stmt::Alloc {
                        buffer: "acc".into(),
                        dtype: DType::F64,
                        extent: Expr::i64(2),
                        scope: MemScope::Local,
                    },
                    store("acc", Expr::i64(0), load("x", Expr::var("t"))),
                    store(
                        "acc",
                        Expr::i64(1),
                        Expr::mul(load("acc", Expr::i64(0)), Expr::Float(2.0, DType::F64)),
                    ),
                    store("y", Expr::var("t"), load("acc", Expr::i64(1))),
                ],
            )],
        );
        let mut b = data(1, 64);
        interpret_gpu(&f, &mut b).expect("private");
        let (x, y) = (xs(&b), ys(&b));
        assert!(x.iter().zip(&y).all(|(a, b)| *b == 2.0 * a));
    }
}
