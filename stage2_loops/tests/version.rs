//! `version_ranges` gives a loop whose iterations range-check coordinates a second copy of its
//! body without the checks, taken where a check per iteration proves them; results stay equal,
//! and loops where that would not be exact (or gain nothing) are left alone.

use lacuna_ir::{ArrayData, DType};
use lacuna_stage1::{BinOp, Bindings, Role};
use lacuna_stage2::passes::version_ranges::version_ranges;
use lacuna_stage2::{interpret_func, BufferDecl, BufferKind, Expr, ForKind, Func, MemScope};
use lacuna_stage2::{ScratchDecl, Stmt};
use proptest::prelude::*;

/// Rows per block (vector lanes).
const W: i64 = 4;

fn load(b: &str, i: Expr) -> Expr {
    Expr::Load {
        buffer: b.into(),
        indices: vec![i],
    }
}

fn var(v: &str) -> Expr {
    Expr::var(v)
}

fn and(a: Expr, b: Expr) -> Expr {
    Expr::bin(BinOp::And, a, b)
}

/// `select(0 <= e < bound, e, -1)`: a coordinate checked against its extent.
fn checked(e: Expr, bound: &str) -> Expr {
    Expr::Select(
        Box::new(and(
            Expr::bin(BinOp::Ge, e.clone(), Expr::i64(0)),
            Expr::bin(BinOp::Lt, e.clone(), Expr::Param(bound.into())),
        )),
        Box::new(e),
        Box::new(Expr::i64(-1)),
    )
}

/// The lowered form of SpMV on DIA: blocks of `W` rows, `Q` diagonals at offsets `off` (of
/// type `off_type`), each block's sums in a local cache zeroed and written back by two loops
/// that bind the same names alike, as `ReverseCacheWrite` makes them.
fn dia_func(off_type: DType, kind: ForKind) -> Func {
    let row = |l: &str| Expr::add(Expr::mul(var("g"), Expr::i64(W)), var(l));
    let col = Expr::add(row("l"), Expr::load_i64("off", var("d"), off_type));
    let cache_loop = |body: Vec<Stmt>| Stmt::For {
        var: "l0".into(),
        start: Expr::i64(0),
        end: Expr::i64(W),
        kind: ForKind::Serial,
        body: [
            vec![Stmt::Let {
                var: "r0".into(),
                value: checked(row("l0"), "m"),
            }],
            body,
        ]
        .concat(),
    };
    let body = vec![
        Stmt::Alloc {
            buffer: "acc".into(),
            dtype: DType::F64,
            extent: Expr::i64(W),
            scope: MemScope::Local,
        },
        cache_loop(vec![Stmt::Store {
            buffer: "acc".into(),
            indices: vec![var("l0")],
            value: Expr::Float(0.0, DType::F64),
        }]),
        Stmt::For {
            var: "d".into(),
            start: Expr::i64(0),
            end: Expr::Param("Q".into()),
            kind: ForKind::Serial,
            body: vec![Stmt::For {
                var: "l".into(),
                start: Expr::i64(0),
                end: Expr::i64(W),
                kind: ForKind::Vectorized,
                body: vec![
                    Stmt::Let {
                        var: "c".into(),
                        value: checked(col, "n"),
                    },
                    Stmt::Store {
                        buffer: "acc".into(),
                        indices: vec![var("l")],
                        value: Expr::add(
                            load("acc", var("l")),
                            Expr::mul(
                                load(
                                    "a",
                                    Expr::add(
                                        Expr::mul(
                                            Expr::add(
                                                Expr::mul(var("g"), Expr::Param("Q".into())),
                                                var("d"),
                                            ),
                                            Expr::i64(W),
                                        ),
                                        var("l"),
                                    ),
                                ),
                                Expr::Select(
                                    Box::new(Expr::bin(BinOp::Ge, var("c"), Expr::i64(0))),
                                    Box::new(load("x", var("c"))),
                                    Box::new(Expr::Float(0.0, DType::F64)),
                                ),
                            ),
                        ),
                    },
                ],
            }],
        },
        cache_loop(vec![Stmt::If {
            cond: Expr::bin(BinOp::Ge, var("r0"), Expr::i64(0)),
            then_body: vec![Stmt::Store {
                buffer: "y".into(),
                indices: vec![var("r0")],
                value: load("acc", var("l0")),
            }],
            else_body: vec![],
        }]),
    ];
    let decl = |name: &str, dtype, role| BufferDecl {
        name: name.into(),
        dtype,
        layout: vec![],
        kind: BufferKind::Values(role),
    };
    Func {
        name: "dia".into(),
        params: ["m", "n", "G", "Q"].map(String::from).to_vec(),
        axes: vec![],
        buffers: vec![
            decl("off", off_type, Role::Input),
            decl("a", DType::F64, Role::Input),
            decl("x", DType::F64, Role::Input),
            decl("y", DType::F64, Role::Output),
        ],
        body: vec![Stmt::For {
            var: "g".into(),
            start: Expr::i64(0),
            end: Expr::Param("G".into()),
            kind,
            body,
        }],
        scratch: vec![ScratchDecl {
            name: "acc".into(),
            dtype: DType::F64,
            scope: MemScope::Local,
        }],
    }
}

fn run(f: &Func, m: usize, n: usize, off: &[i64], off_type: DType, seed: u64) -> Vec<f64> {
    let g = m.div_ceil(W as usize);
    let q = off.len();
    let mut b = Bindings::default();
    for (k, v) in [("m", m), ("n", n), ("G", g), ("Q", q)] {
        b.params.insert(k.into(), v as i64);
    }
    let off = match off_type {
        DType::I32 => ArrayData::I32(off.iter().map(|&o| o as i32).collect()),
        _ => ArrayData::I64(off.to_vec()),
    };
    b.buffers.insert("off".into(), off);
    let value = |i: usize| ((i as u64 * 2654435761 + seed) % 17) as f64 / 4.0 - 2.0;
    b.buffers.insert(
        "a".into(),
        ArrayData::F64((0..g * q * W as usize).map(value).collect()),
    );
    b.buffers.insert(
        "x".into(),
        ArrayData::F64((0..n).map(|i| value(i + 7)).collect()),
    );
    b.buffers
        .insert("y".into(), ArrayData::F64(vec![f64::NAN; g * W as usize]));
    interpret_func(f, &mut b).expect("runs");
    match b.buffers.remove("y") {
        Some(ArrayData::F64(y)) => y,
        other => panic!("y: {other:?}"),
    }
}

/// The versioned loop's body: its scratch allocation, then `if check { copy } else { body }`.
fn versioned(f: &Func) -> Option<(&Expr, &[Stmt], &[Stmt])> {
    let Stmt::For { body, .. } = f.body.last()? else {
        return None;
    };
    match body.as_slice() {
        [Stmt::Alloc { .. }, Stmt::If {
            cond,
            then_body,
            else_body,
        }] => Some((cond, then_body, else_body)),
        _ => None,
    }
}

fn has_select(list: &[Stmt]) -> bool {
    fn expr(e: &Expr) -> bool {
        matches!(e, Expr::Select(..)) || e.children().into_iter().any(expr)
    }
    list.iter()
        .any(|s| s.exprs().into_iter().any(expr) || s.bodies().iter().any(|b| has_select(b)))
}

fn has_if(list: &[Stmt]) -> bool {
    list.iter()
        .any(|s| matches!(s, Stmt::If { .. }) || s.bodies().iter().any(|b| has_if(b)))
}

#[test]
fn dia_blocks_inside_the_matrix_run_unchecked() {
    for off_type in [DType::I64, DType::I32] {
        let f = dia_func(off_type, ForKind::Parallel);
        let v = version_ranges(f.clone());
        let (cond, fast, slow) = versioned(&v).unwrap_or_else(|| panic!("{v:#?}"));
        // Four checks: the block's rows within `m` (two) and its columns within `n` (two, by
        // the least and greatest offset, computed before the loop).
        let text = format!("{cond}");
        assert_eq!(text.matches("&&").count(), 3, "{text}");
        assert!(text.contains("off.lo") && text.contains("off.hi"), "{text}");
        assert!(!has_select(fast) && !has_if(fast), "{fast:#?}");
        // The other copy is the body as it was; the copy renames what it binds.
        let Stmt::For { body, .. } = f.body.last().expect("a loop") else {
            panic!("a loop")
        };
        assert_eq!(slow, &body[1..]);
        let mut names = std::collections::BTreeSet::new();
        lacuna_stage2::ir::bound_vars(fast, &mut names);
        assert!(names.iter().all(|n| n.ends_with(".in")), "{names:?}");
        // The extremes are computed before the loop, once.
        assert!(v.body.len() > 1);
        assert!(matches!(
            v.body.last(),
            Some(Stmt::For {
                kind: ForKind::Parallel,
                ..
            })
        ));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Every shape: blocks all inside, none inside (offsets beyond the matrix), a last block
    /// cut short by `m`, no diagonal at all, offsets unsorted and repeated.
    #[test]
    fn versioned_dia_gives_the_same_sums(
        m in 1usize..40,
        n in 1usize..40,
        off in proptest::collection::vec(-45i64..45, 0..6),
        wide in any::<bool>(),
        seed in 0u64..1000,
    ) {
        let off_type = if wide { DType::I64 } else { DType::I32 };
        let f = dia_func(off_type, ForKind::Serial);
        let v = version_ranges(f.clone());
        prop_assert!(versioned(&v).is_some());
        let want = run(&f, m, n, &off, off_type, seed);
        let got = run(&v, m, n, &off, off_type, seed);
        prop_assert_eq!(
            want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            got.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }
}

/// Rewrites the first statement matching `pick` in the versioned loop's body (at any depth).
fn edit(f: &mut Func, pick: &dyn Fn(&Stmt) -> bool, new: &dyn Fn(Stmt) -> Vec<Stmt>) {
    fn walk(
        list: Vec<Stmt>,
        pick: &dyn Fn(&Stmt) -> bool,
        new: &dyn Fn(Stmt) -> Vec<Stmt>,
        done: &mut bool,
    ) -> Vec<Stmt> {
        let mut out = Vec::new();
        for s in list {
            if !*done && pick(&s) {
                *done = true;
                out.extend(new(s));
            } else {
                out.push(s.map_bodies(&mut |b| walk(b, pick, new, done)));
            }
        }
        out
    }
    let mut done = false;
    f.body = walk(std::mem::take(&mut f.body), pick, new, &mut done);
    assert!(done, "nothing matched");
}

#[test]
fn loops_whose_checks_could_change_or_gain_nothing_stay_as_they_are() {
    let is_let_c = |s: &Stmt| matches!(s, Stmt::Let { var, .. } if var == "c");
    let is_zeroing = |s: &Stmt| matches!(s, Stmt::Store { buffer, value: Expr::Float(..), .. } if buffer == "acc");
    // The offsets written in the loop: their extremes before it would not bound them. (The
    // rows' checks are still proved, so the loop is versioned, but the columns stay checked.)
    let mut f = dia_func(DType::I64, ForKind::Serial);
    edit(&mut f, &is_zeroing, &|s| {
        vec![
            s,
            Stmt::Store {
                buffer: "off".into(),
                indices: vec![Expr::i64(0)],
                value: Expr::i64(1),
            },
        ]
    });
    let v = version_ranges(f.clone());
    let (cond, fast, _) = versioned(&v).expect("versioned on the rows");
    assert!(!format!("{cond}").contains("off"), "{cond}");
    assert!(has_select(fast));
    // The offsets loaded only where a condition holds: loading them all before the loop
    // could read what the loop never reads.
    let mut f = dia_func(DType::I64, ForKind::Serial);
    edit(&mut f, &is_let_c, &|s| {
        let Stmt::Let { var, value } = s else {
            unreachable!("picked a let")
        };
        let cond = Expr::bin(BinOp::Lt, Expr::var("d"), Expr::Param("Q".into()));
        vec![Stmt::Let {
            var,
            value: Expr::Select(Box::new(cond), Box::new(value), Box::new(Expr::i64(-1))),
        }]
    });
    let v = version_ranges(f.clone());
    let (cond, _, _) = versioned(&v).expect("versioned on the rows");
    assert!(!format!("{cond}").contains("off"), "{cond}");
    // A name bound inside the loop and again before it: which binding a check reads is unclear.
    let mut f = dia_func(DType::I64, ForKind::Serial);
    f.body.insert(
        0,
        Stmt::Let {
            var: "c".into(),
            value: Expr::i64(3),
        },
    );
    assert_eq!(version_ranges(f.clone()), f);
    // The two cache loops binding `r0` differently: the write-back's check stays.
    let mut f = dia_func(DType::I64, ForKind::Serial);
    edit(
        &mut f,
        &|s| matches!(s, Stmt::Let { var, .. } if var == "r0"),
        &|_| {
            vec![Stmt::Let {
                var: "r0".into(),
                value: Expr::var("l0"),
            }]
        },
    );
    let v = version_ranges(f.clone());
    let (_, fast, _) = versioned(&v).expect("versioned on the columns");
    assert!(has_if(fast), "{fast:#?}");
    // A barrier in the body: a branch around it must not diverge.
    let mut f = dia_func(DType::I64, ForKind::Serial);
    edit(&mut f, &is_let_c, &|s| vec![s, Stmt::Barrier]);
    assert_eq!(version_ranges(f.clone()), f);
    // Checks with one value per iteration (`g < G` in the body): moving them gains nothing.
    let mut f = dia_func(DType::I64, ForKind::Serial);
    let Some(Stmt::For { body, .. }) = f.body.last_mut() else {
        panic!("a loop")
    };
    *body = vec![Stmt::If {
        cond: Expr::bin(BinOp::Lt, var("g"), Expr::Param("m".into())),
        then_body: vec![Stmt::Store {
            buffer: "y".into(),
            indices: vec![var("g")],
            value: Expr::Float(1.0, DType::F64),
        }],
        else_body: vec![],
    }];
    assert_eq!(version_ranges(f.clone()), f);
}
