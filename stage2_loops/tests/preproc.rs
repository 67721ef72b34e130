//! The `extract_preprocess` pass on hand-built stage-II functions: the kernel plus its
//! preprocessing function compute what the original computes (stage-II interpreter), the
//! kernel no longer searches, and searches that cannot move are typed errors.

use lacuna_ir::{ArrayData, DType};
use lacuna_stage1::{AxisData, BinOp, Bindings, IterKind, Role};
use lacuna_stage2::passes::extract_preprocess::{allocate_aux, extract_preprocess, ExtractError};
use lacuna_stage2::{
    interpret_func, print_func, BufferDecl, BufferKind, Expr, ForKind, Func, IterVar, Stmt,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

fn decl(name: &str, dtype: DType, kind: BufferKind) -> BufferDecl {
    BufferDecl {
        name: name.into(),
        dtype,
        layout: vec![],
        kind,
    }
}

fn load(b: &str, i: Expr) -> Expr {
    Expr::Load {
        buffer: b.into(),
        indices: vec![i],
    }
}

fn for_(var: &str, start: Expr, end: Expr, body: Vec<Stmt>) -> Stmt {
    Stmt::For {
        var: var.into(),
        start,
        end,
        kind: ForKind::Serial,
        body,
    }
}

fn let_(var: &str, value: Expr) -> Stmt {
    Stmt::Let {
        var: var.into(),
        value,
    }
}

fn segment(value: Expr) -> Expr {
    Expr::Segment {
        buffer: "J.indptr".into(),
        lo: Box::new(Expr::i64(0)),
        hi: Box::new(Expr::Param("m".into())),
        value: Box::new(value),
    }
}

/// Row sums of a CSR matrix over a fused loop of its nonzeros: `R[row(p)] += A[p]`, the row
/// found by a segment search of `J.indptr`; also `D[p] = row(p) * 10 + col(p)` through a second
/// `let` reading the first.
fn fused_rowsum(extra: Vec<Stmt>) -> Func {
    let p = Expr::var("p");
    Func {
        name: "rowsum".into(),
        params: vec!["m".into()],
        axes: vec![],
        buffers: vec![
            decl("J.indptr", DType::I64, BufferKind::Indptr("J".into())),
            decl("J.indices", DType::I64, BufferKind::Indices("J".into())),
            decl("A", DType::F64, BufferKind::Values(Role::Input)),
            decl("R", DType::F64, BufferKind::Values(Role::Output)),
            decl("D", DType::I64, BufferKind::Values(Role::Output)),
        ],
        body: vec![for_(
            "p",
            Expr::i64(0),
            load("J.indptr", Expr::Param("m".into())),
            [
                vec![
                    let_("i", segment(p.clone())),
                    Stmt::Store {
                        buffer: "R".into(),
                        indices: vec![Expr::var("i")],
                        value: Expr::add(load("R", Expr::var("i")), load("A", p.clone())),
                    },
                    let_("c", load("J.indices", p.clone())),
                    Stmt::Store {
                        buffer: "D".into(),
                        indices: vec![p.clone()],
                        value: Expr::add(Expr::mul(Expr::var("i"), Expr::i64(10)), Expr::var("c")),
                    },
                ],
                extra,
            ]
            .concat(),
        )],
        scratch: vec![],
    }
}

fn bindings(lens: &[usize], seed: u64) -> Bindings {
    let mut indptr = vec![0i64];
    let mut indices = vec![];
    for (r, &l) in lens.iter().enumerate() {
        indptr.push(indptr[r] + l as i64);
        indices.extend((0..l as i64).map(|c| (c * 3 + r as i64) % 7));
    }
    let nnz = indices.len();
    let m = lens.len();
    Bindings {
        params: BTreeMap::from([("m".to_string(), m as i64)]),
        axes: BTreeMap::from([(
            "J".to_string(),
            AxisData {
                indptr: Some(ArrayData::I64(indptr)),
                indices: Some(ArrayData::I64(indices)),
            },
        )]),
        buffers: BTreeMap::from([
            (
                "A".to_string(),
                ArrayData::F64(
                    (0..nnz)
                        .map(|k| ((k as u64 * 2654435761 + seed) % 97) as f64 - 48.0)
                        .collect(),
                ),
            ),
            ("R".to_string(), ArrayData::F64(vec![0.0; m])),
            ("D".to_string(), ArrayData::I64(vec![0; nnz])),
        ]),
    }
}

fn has_search(stmts: &[Stmt]) -> bool {
    fn e(x: &Expr) -> bool {
        matches!(x, Expr::Search { .. } | Expr::Segment { .. }) || x.children().into_iter().any(e)
    }
    stmts
        .iter()
        .any(|s| s.exprs().into_iter().any(e) || s.bodies().into_iter().any(|b| has_search(b)))
}

proptest! {
    /// Preprocessing then kernel = the original, on random row lengths (empty rows, nnz = 0);
    /// exact (integer rows, sums of small integers).
    #[test]
    fn extraction_preserves_results(lens in proptest::collection::vec(0usize..5, 0..9), seed in any::<u64>()) {
        let f = fused_rowsum(vec![]);
        let mut want = bindings(&lens, seed);
        interpret_func(&f, &mut want).expect("original runs");
        let (kernel, pre) = extract_preprocess(f, &BTreeSet::new()).expect("extracts");
        prop_assert!(!has_search(&kernel.body));
        prop_assert!(has_search(&pre.func.body));
        let mut b = bindings(&lens, seed);
        allocate_aux(&pre, &mut b).expect("sizes");
        prop_assert_eq!(b.buffers["mid_0"].len(), lens.iter().sum::<usize>());
        interpret_func(&pre.func, &mut b).expect("preprocessing runs");
        interpret_func(&kernel, &mut b).expect("kernel runs");
        prop_assert_eq!(&b.buffers["R"], &want.buffers["R"]);
        prop_assert_eq!(&b.buffers["D"], &want.buffers["D"]);
    }
}

#[test]
fn golden_kernel_and_preprocessing() {
    let (kernel, pre) =
        extract_preprocess(fused_rowsum(vec![]), &BTreeSet::new()).expect("extracts");
    assert_eq!(
        print_func(&kernel),
        "func rowsum(m) {
  in J.indptr: i64[]
  in J.indices: i64[]
  in A: f64[]
  out R: f64[]
  out D: i64[]
  in mid_0: i64[]
  for p in 0..J.indptr[m] {
    let i = mid_0[p]
    R[i] = R[i] + A[p]
    let c = J.indices[p]
    D[p] = i * 10 + c
  }
}
"
    );
    assert_eq!(
        print_func(&pre.func),
        "func rowsum_preprocess(m) {
  in J.indptr: i64[]
  out mid_0: i64[]
  for p in 0..J.indptr[m] {
    mid_0[p] = segment(J.indptr[0..m], p)
  }
}
"
    );
    assert_eq!(pre.aux[0].dtype, DType::I64);
}

#[test]
fn a_search_reading_values_is_rejected() {
    // `let q = segment(J.indptr[0..m], i64(A[p]))`: A's values change between runs.
    let f = fused_rowsum(vec![let_(
        "q",
        segment(Expr::Cast(DType::I64, Box::new(load("A", Expr::var("p"))))),
    )]);
    let e = extract_preprocess(f, &BTreeSet::new()).expect_err("reads values");
    assert_eq!(
        e,
        ExtractError::ValueDependent {
            var: "q".into(),
            buffer: "A".into()
        }
    );
    assert!(e.to_string().contains("reads the values of `A`"), "{e}");
}

#[test]
fn a_search_reading_a_loop_carried_variable_is_rejected() {
    // A co-iteration-like cursor: `q` changes from one iteration to the next.
    let mut f = fused_rowsum(vec![]);
    let Stmt::For { body, .. } = &mut f.body[0] else {
        unreachable!()
    };
    body.insert(
        0,
        let_("r", segment(Expr::add(Expr::var("q"), Expr::i64(1)))),
    );
    body.push(Stmt::Assign {
        var: "q".into(),
        value: Expr::add(Expr::var("q"), Expr::i64(1)),
    });
    f.body.insert(
        0,
        Stmt::Decl {
            var: "q".into(),
            dtype: DType::I64,
            init: Expr::i64(0),
        },
    );
    let e = extract_preprocess(f, &BTreeSet::new()).expect_err("loop-carried");
    assert_eq!(
        e,
        ExtractError::LoopCarried {
            var: "r".into(),
            carried: "q".into()
        }
    );
}

#[test]
fn a_search_over_a_ragged_nest_is_rejected() {
    // for i in 0..m { for p in indptr[i]..indptr[i+1] { let x = search(indices[..], p + i) } }:
    // the points (i, p) do not form a box.
    let i = Expr::var("i");
    let f = Func {
        body: vec![for_(
            "i",
            Expr::i64(0),
            Expr::Param("m".into()),
            vec![for_(
                "p",
                load("J.indptr", i.clone()),
                load("J.indptr", Expr::add(i.clone(), Expr::i64(1))),
                vec![let_(
                    "x",
                    Expr::Search {
                        buffer: "J.indices".into(),
                        lo: Box::new(Expr::i64(0)),
                        hi: Box::new(load("J.indptr", Expr::Param("m".into()))),
                        value: Box::new(Expr::bin(BinOp::Add, Expr::var("p"), i.clone())),
                    },
                )],
            )],
        )],
        ..fused_rowsum(vec![])
    };
    let e = extract_preprocess(f, &BTreeSet::new()).expect_err("ragged");
    assert!(
        matches!(&e, ExtractError::NotExpressible { var, why } if var == "x" && why.contains("range of loop `p` depends on loop `i`")),
        "{e}"
    );
}

fn block(name: &str, body: Vec<Stmt>) -> Stmt {
    Stmt::Block {
        name: name.into(),
        iters: vec![IterVar {
            var: "p".into(),
            axis: "J".into(),
            kind: IterKind::S,
        }],
        init: vec![],
        body,
    }
}

#[test]
fn preprocess_blocks_move_and_order_is_checked() {
    let n = || load("J.indptr", Expr::Param("m".into()));
    let p = Expr::var("p");
    // pre: D[p] = J.indices[p]; kernel: R[0] += A[p] * D[p]
    let pre_nest = for_(
        "p",
        Expr::i64(0),
        n(),
        vec![block(
            "pre",
            vec![Stmt::Store {
                buffer: "D".into(),
                indices: vec![p.clone()],
                value: load("J.indices", p.clone()),
            }],
        )],
    );
    let kernel_nest = for_(
        "p",
        Expr::i64(0),
        n(),
        vec![block(
            "main",
            vec![Stmt::Store {
                buffer: "R".into(),
                indices: vec![Expr::i64(0)],
                value: Expr::add(load("R", Expr::i64(0)), load("A", p.clone())),
            }],
        )],
    );
    let base = fused_rowsum(vec![]);
    let f = Func {
        body: vec![pre_nest.clone(), kernel_nest.clone()],
        ..base.clone()
    };
    let (kernel, pre) =
        extract_preprocess(f, &BTreeSet::from(["pre".to_string()])).expect("extracts");
    assert_eq!(kernel.body, vec![kernel_nest.clone()]);
    assert_eq!(pre.func.body, vec![pre_nest.clone()]);
    assert_eq!(pre.writes, vec!["D".to_string()]);
    assert!(pre.aux.is_empty());
    // Not annotated: nothing to extract.
    let f = Func {
        body: vec![pre_nest.clone(), kernel_nest.clone()],
        ..base.clone()
    };
    assert_eq!(
        extract_preprocess(f, &BTreeSet::new()).expect_err("nothing"),
        ExtractError::Nothing
    );
    // The kernel writes D before the preprocessing nest reads it... here: writes what it reads.
    let writes_d = for_(
        "p",
        Expr::i64(0),
        n(),
        vec![block(
            "main",
            vec![Stmt::Store {
                buffer: "D".into(),
                indices: vec![p.clone()],
                value: Expr::i64(1),
            }],
        )],
    );
    let f = Func {
        body: vec![writes_d.clone(), pre_nest.clone()],
        ..base.clone()
    };
    let e = extract_preprocess(f, &BTreeSet::from(["pre".to_string()])).expect_err("order");
    assert!(
        matches!(&e, ExtractError::Order { block, buffer, .. } if block == "pre" && buffer == "D"),
        "{e}"
    );
    // A nest holding both kinds of block.
    let mixed = for_(
        "p",
        Expr::i64(0),
        n(),
        vec![block("pre", vec![]), block("main", vec![])],
    );
    let f = Func {
        body: vec![mixed],
        ..base
    };
    let e = extract_preprocess(f, &BTreeSet::from(["pre".to_string()])).expect_err("mixed");
    assert_eq!(
        e,
        ExtractError::MixedNest {
            block: "pre".into(),
            other: "main".into()
        }
    );
}
