//! CSR SpMV written by hand in the flat IR (structure arrays bound through `Bindings::axes`),
//! in several element and index types, and the example kernels lowered by the real pipeline.

mod common;
use common::*;
use lacuna_ir::{ArrayData, CooTensor, DType, DenseArray};
use lacuna_stage1::{bind, interpret, AxisKind, BinOp, Input, Program, Size};
use lacuna_stage2::{lower, Config, Expr, Func};
use lacuna_target::{compile, CodegenOptions};
use std::collections::BTreeMap;

/// `for i in 0..m { y[i] = 0; for p in indptr[i]..indptr[i+1] { y[i] += A[p] * x[indices[p]] } }`
fn spmv(vt: DType, it: DType) -> Func {
    let widen = |e: Expr| {
        if it == DType::I64 {
            e
        } else {
            cast(DType::I64, e)
        }
    };
    let zero = if vt == DType::F32 {
        f32c(0.0)
    } else {
        f64c(0.0)
    };
    func(
        "spmv",
        &["m"],
        vec![
            input("A", vt),
            input("x", vt),
            output("y", vt),
            indptr("J", it),
            indices("J", it),
        ],
        vec![for_(
            "i",
            i64c(0),
            param("m"),
            vec![
                store("y", var("i"), zero),
                for_(
                    "p",
                    widen(load("J.indptr", var("i"))),
                    widen(load("J.indptr", bin(BinOp::Add, var("i"), i64c(1)))),
                    vec![store(
                        "y",
                        var("i"),
                        bin(
                            BinOp::Add,
                            load("y", var("i")),
                            bin(
                                BinOp::Mul,
                                load("A", var("p")),
                                load("x", widen(load("J.indices", var("p")))),
                            ),
                        ),
                    )],
                ),
            ],
        )],
    )
}

/// A deterministic CSR matrix with empty rows: (indptr, indices, values).
fn matrix(m: usize, n: usize) -> (Vec<i64>, Vec<i64>, Vec<f64>) {
    let (mut ip, mut ind, mut val) = (vec![0i64], vec![], vec![]);
    for i in 0..m {
        for j in 0..n {
            if (i * 7 + j * 3) % 5 == 0 && i % 4 != 2 {
                ind.push(j as i64);
                val.push((i as f64 + 1.0) * 0.5 - j as f64 * 0.25);
            }
        }
        ip.push(ind.len() as i64);
    }
    (ip, ind, val)
}

fn index_array(v: &[i64], it: DType) -> ArrayData {
    if it == DType::I64 {
        ArrayData::I64(v.to_vec())
    } else {
        ArrayData::I32(v.iter().map(|&x| x as i32).collect())
    }
}

#[test]
fn csr_spmv_in_every_element_and_index_type() {
    for (m, n) in [(13, 9), (0, 4), (3, 0), (1, 1), (40, 33)] {
        let (ip, ind, val) = matrix(m, n);
        let x: Vec<f64> = (0..n).map(|j| 1.0 + j as f64 * 0.125).collect();
        for vt in [DType::F64, DType::F32] {
            for it in [DType::I32, DType::I64] {
                let f = spmv(vt, it);
                let b = bindings(
                    vec![
                        ("A", ArrayData::F64(val.clone()).cast(vt)),
                        ("x", ArrayData::F64(x.clone()).cast(vt)),
                        ("y", ArrayData::zeros(vt, m)),
                    ],
                    &[("m", m as i64)],
                );
                let b = with_axis(
                    b,
                    "J",
                    Some(index_array(&ip, it)),
                    Some(index_array(&ind, it)),
                );
                let got = run_checked(&f, &b).buffers["y"].clone();
                // Plain Rust, in the same summation order and precision.
                let want = match vt {
                    DType::F32 => ArrayData::F32(
                        (0..m)
                            .map(|i| {
                                (ip[i]..ip[i + 1]).fold(0.0f32, |acc, p| {
                                    acc + val[p as usize] as f32
                                        * x[ind[p as usize] as usize] as f32
                                })
                            })
                            .collect(),
                    ),
                    _ => ArrayData::F64(
                        (0..m)
                            .map(|i| {
                                (ip[i]..ip[i + 1]).fold(0.0, |acc, p| {
                                    acc + val[p as usize] * x[ind[p as usize] as usize]
                                })
                            })
                            .collect(),
                    ),
                };
                assert_eq!(got, want, "{m}x{n} {vt} {it}");
            }
        }
    }
}

#[test]
fn unbound_structure_that_is_read_is_a_runtime_error() {
    let k = compile(&spmv(DType::F64, DType::I32), &CodegenOptions::default()).expect("compiles");
    let mut b = bindings(
        vec![
            ("A", ArrayData::F64(vec![])),
            ("x", ArrayData::F64(vec![])),
            ("y", ArrayData::F64(vec![])),
        ],
        &[("m", 0)],
    );
    // SAFETY: `run` refuses the missing `J.indptr` before it calls the machine code.
    let e = unsafe { k.run(&mut b) }.expect_err("J.indptr is read but unbound");
    assert!(e.to_string().contains("J.indptr"), "{e}");
}

/// Inputs for an example kernel: dense buffers filled with a pattern, sparse ones as COO with
/// a deterministic pattern (ragged prefixes for dense-variable axes).
fn inputs(p: &Program) -> BTreeMap<String, Input> {
    let extent = |s: &Size| match s {
        Size::Const(c) => *c as usize,
        Size::Param(q) => 4 + q.bytes().map(usize::from).sum::<usize>() % 5,
    };
    let mut out = BTreeMap::new();
    for buf in p
        .buffers
        .iter()
        .filter(|b| b.role == lacuna_stage1::Role::Input)
    {
        let axes: Vec<_> = buf
            .axes
            .iter()
            .map(|a| p.axis(a).expect("declared"))
            .collect();
        let shape: Vec<usize> = axes.iter().map(|a| extent(a.kind.coord_extent())).collect();
        // Buffers of coordinates hold coordinates of their axis (binding checks them);
        // others a pattern of small values, negative ones included.
        let coords_of = buf
            .coordinates_of
            .as_ref()
            .map(|a| extent(p.axis(a).expect("declared").kind.coord_extent()).max(1));
        let value = |k: usize| match coords_of {
            Some(n) => (k * 37 % n) as f64,
            None => ((k * 37 % 11) as f64 - 5.0) * 0.5,
        };
        if axes.iter().all(|a| a.kind.parent().is_none()) {
            let len = shape.iter().product();
            out.insert(
                buf.name.clone(),
                Input::Dense(DenseArray {
                    shape,
                    data: ArrayData::F64((0..len).map(value).collect()).cast(buf.dtype),
                }),
            );
        } else {
            // Every coordinate tuple, kept by a rule per dimension that depends only on the
            // coordinates up to it (so dense-variable segments are prefixes).
            let mut coords = vec![vec![]; shape.len()];
            let total: usize = shape.iter().product();
            for flat in 0..total {
                let mut c = vec![0; shape.len()];
                let mut r = flat;
                for d in (0..shape.len()).rev() {
                    c[d] = r % shape[d];
                    r /= shape[d];
                }
                let keep = (1..shape.len()).all(|d| {
                    let h = c[..d].iter().fold(7usize, |h, &x| h * 31 + x);
                    match &axes[d].kind {
                        // Never an empty segment: a parent without children would leave a gap
                        // in the parent level's prefix once nested ragged levels drop it.
                        AxisKind::DenseVariable { .. } => c[d] < 1 + h % shape[d].max(1),
                        AxisKind::DenseFixed { .. } => true,
                        _ => matches!((h + 2 * c[d]) % 3, 0),
                    }
                });
                if keep {
                    for d in 0..shape.len() {
                        coords[d].push(c[d]);
                    }
                }
            }
            let nnz = coords[0].len();
            out.insert(
                buf.name.clone(),
                Input::Coo(CooTensor {
                    shape,
                    coords,
                    values: ArrayData::F64((0..nnz).map(value).collect()).cast(buf.dtype),
                }),
            );
        }
    }
    out
}

#[test]
fn example_kernels_lowered_by_the_pipeline_match_the_stage1_interpreter() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut ran = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/ exists") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "ron") {
            continue;
        }
        let p =
            Program::from_ron(&std::fs::read_to_string(&path).expect("readable")).expect("parses");
        let name = path.display().to_string();
        if lacuna_stage2::coiter::is_coiteration(&p) {
            // Compiled by co-iteration, not this pipeline (tests/coiteration.rs covers them).
            continue;
        }
        let b = match bind(&p, &inputs(&p), &BTreeMap::new()) {
            Ok(b) => b,
            Err(e) => panic!("{name}: bind: {e}"),
        };
        let lowered = lower(&p, &Config::default(), &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{name}: lower: {e}"));
        let got = run_checked(&lowered.flat, &b);
        let mut want = b.clone();
        interpret(&p, &mut want).unwrap_or_else(|e| panic!("{name}: interpret: {e}"));
        for (buf, w) in &want.buffers {
            let (g, w) = (got.buffers[buf].to_f64_vec(), w.to_f64_vec());
            assert_eq!(g.len(), w.len(), "{name}: {buf}");
            for (x, y) in g.iter().zip(&w) {
                assert!(
                    (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
                    "{name}: {buf}: {g:?} vs {w:?}"
                );
            }
        }
        ran += 1;
    }
    assert!(ran >= 8, "ran {ran} example kernels");
}
