//! Shared helpers of the integration tests: random inputs, dense references, comparisons.
#![allow(dead_code)]

pub mod gpu;

use lacuna::driver::{load_kernel, reset_outputs, Executable, Target};
use lacuna::ir::{ArrayData, CooTensor, DenseArray};
use lacuna::stage1::{bind, unpack, Bindings, Input, Output, Program};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// Relative tolerance for f64 comparisons: results may differ by summation order only.
pub const REL_TOL: f64 = 1e-12;

/// A schedule of `p` whose one instruction decomposes `A` into `into` (the format language of
/// `decompose_format`).
pub fn decompose(p: &Program, into: &str) -> lacuna::schedule::ScheduleFile {
    lacuna::schedule::ScheduleFile {
        version: 1,
        kernel: p.name.clone(),
        trace: vec![lacuna::schedule::Instruction::DecomposeFormat {
            buffer: "A".into(),
            into: into.to_string(),
        }],
    }
}

/// An example schedule, `examples/schedules/{name}.ron`.
pub fn schedule_file(name: &str) -> lacuna::schedule::ScheduleFile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/schedules")
        .join(format!("{name}.ron"));
    let text = std::fs::read_to_string(path).expect("example schedules exist");
    lacuna::schedule::ScheduleFile::from_ron(&text).expect("example schedules parse")
}

/// A kernel written in the test, parsed and verified.
pub fn inline_kernel(text: &str) -> Program {
    let p = Program::from_ron(text).expect("inline kernel parses");
    lacuna::stage1::verify(&p).expect("inline kernel verifies");
    p
}

pub fn kernel(name: &str) -> Program {
    load_kernel(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(format!("{name}.ron")),
    )
    .expect("example kernels load")
}

/// A random sparse matrix pattern with values: shape, and for each row a sorted list of
/// (column, value). Includes empty matrices, empty rows, 1×1 and very skewed rows.
pub fn sparse_matrix() -> impl Strategy<Value = (usize, usize, Vec<Vec<(usize, f64)>>)> {
    (0usize..10, 0usize..10, 0u8..4).prop_flat_map(|(m, n, style)| {
        let m = if style == 3 { 1 } else { m };
        let n = if style == 3 { 1 } else { n };
        let rows = proptest::collection::vec(
            proptest::collection::btree_map(0..n.max(1), -4.0f64..4.0, 0..=n),
            m,
        );
        (Just(m), Just(n), rows, Just(style)).prop_map(|(m, n, rows, style)| {
            let mut rows: Vec<Vec<(usize, f64)>> = rows
                .into_iter()
                .map(|r| {
                    if n == 0 {
                        vec![]
                    } else {
                        r.into_iter().collect()
                    }
                })
                .collect();
            match style {
                // Very skewed: the first row dense, every other row at most one entry.
                1 if m > 0 && n > 0 => {
                    rows[0] = (0..n).map(|j| (j, j as f64 + 0.5)).collect();
                    for r in rows.iter_mut().skip(1) {
                        r.truncate(1);
                    }
                }
                // Mostly empty rows.
                2 => {
                    for (i, r) in rows.iter_mut().enumerate() {
                        if i % 3 != 0 {
                            r.clear();
                        }
                    }
                }
                _ => {}
            }
            (m, n, rows)
        })
    })
}

pub fn to_coo(m: usize, n: usize, rows: &[Vec<(usize, f64)>]) -> CooTensor {
    let mut coords = vec![Vec::new(), Vec::new()];
    let mut vals = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        for &(j, v) in r {
            coords[0].push(i);
            coords[1].push(j);
            vals.push(v);
        }
    }
    CooTensor {
        shape: vec![m, n],
        coords,
        values: ArrayData::F64(vals),
    }
}

pub fn to_dense(m: usize, n: usize, rows: &[Vec<(usize, f64)>]) -> Vec<f64> {
    let mut d = vec![0.0; m * n];
    for (i, r) in rows.iter().enumerate() {
        for &(j, v) in r {
            d[i * n + j] = v;
        }
    }
    d
}

pub fn dense(shape: &[usize], data: Vec<f64>) -> Input {
    Input::Dense(DenseArray {
        shape: shape.to_vec(),
        data: ArrayData::F64(data),
    })
}

pub fn values(len: usize, seed: u64) -> Vec<f64> {
    // A small deterministic generator keeps the inputs reproducible from the proptest case.
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) * 4.0 - 2.0
        })
        .collect()
}

/// Runs a kernel on every target and returns the outputs per target name.
pub fn run_all(
    p: &Program,
    inputs: &BTreeMap<String, Input>,
) -> Vec<(&'static str, BTreeMap<String, Output>)> {
    let base: Bindings = bind(p, inputs, &BTreeMap::new()).expect("inputs bind");
    let mut results = Vec::new();
    for target in [Target::InterpStage1, Target::Interp, Target::Jit] {
        let exe = Executable::build(p, target).expect("kernel builds");
        let mut b = base.clone();
        reset_outputs(p, &mut b);
        exe.run(p, &mut b).expect("kernel runs");
        let outs = p
            .buffers
            .iter()
            .filter(|x| x.role == lacuna::stage1::Role::Output)
            .map(|x| {
                (
                    x.name.clone(),
                    unpack(p, &b, &x.name).expect("output unpacks"),
                )
            })
            .collect();
        results.push((target.name(), outs));
    }
    // The stage-II interpreter also runs the un-flattened stage-II program.
    let lowered = lacuna::stage2::lower(p, &Default::default(), &mut |_, _| {}).expect("lowers");
    let mut b = base;
    reset_outputs(p, &mut b);
    lacuna::stage2::interpret_func(&lowered.stage2, &mut b).expect("stage II interprets");
    let outs = p
        .buffers
        .iter()
        .filter(|x| x.role == lacuna::stage1::Role::Output)
        .map(|x| {
            (
                x.name.clone(),
                unpack(p, &b, &x.name).expect("output unpacks"),
            )
        })
        .collect();
    results.push(("interp-stage2", outs));
    results
}

pub fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= REL_TOL * want.abs().max(1.0)
}

/// Asserts a dense output equals the reference within [`REL_TOL`].
pub fn assert_dense(target: &str, out: &Output, shape: &[usize], want: &[f64]) {
    let Output::Dense(d) = out else {
        panic!("{target}: expected a dense output")
    };
    assert_eq!(d.shape, shape, "{target}: shape");
    let got = d.data.to_f64_vec();
    assert_eq!(got.len(), want.len(), "{target}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(close(*g, *w), "{target}: element {i}: got {g}, want {w}");
    }
}

/// Asserts a sparse output has exactly the given entries (row-major order) within [`REL_TOL`].
pub fn assert_sparse(target: &str, out: &Output, shape: &[usize], want: &[(Vec<usize>, f64)]) {
    let Some(c) = out.to_coo() else {
        panic!("{target}: expected a sparse output")
    };
    assert_eq!(c.shape, shape, "{target}: shape");
    assert_eq!(c.nnz(), want.len(), "{target}: nnz");
    let vals = c.values.to_f64_vec();
    for (e, (coords, w)) in want.iter().enumerate() {
        let got_coords: Vec<usize> = c.coords.iter().map(|d| d[e]).collect();
        assert_eq!(&got_coords, coords, "{target}: coordinates of entry {e}");
        assert!(
            close(vals[e], *w),
            "{target}: entry {e}: got {}, want {w}",
            vals[e]
        );
    }
}

/// Skewed sparse patterns for the parallel tests, `m` × `n` (`m` is 1 for `style` 3): `style`
/// 0 random (a third of the entries), 1 one dense row among empty ones, 2 many empty rows,
/// 3 a single random row, 4 no entries. Each entry has a value in [-2, 2), all drawn from
/// `seed`.
pub fn skewed_entries(
    m: usize,
    n: usize,
    style: u8,
    seed: u64,
) -> (usize, Vec<(usize, usize, f64)>) {
    let m = if style == 3 { 1 } else { m };
    let mut entries = Vec::new();
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..m {
        for j in 0..n {
            let keep = match style {
                0 | 3 => next() % 3 == 0,
                1 => i == m / 2,
                2 => i % 7 == 0 && next() % 2 == 0,
                _ => false,
            };
            if keep {
                entries.push((i, j, (next() % 1000) as f64 / 250.0 - 2.0));
            }
        }
    }
    (m, entries)
}
