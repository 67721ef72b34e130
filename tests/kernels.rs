//! Every example kernel: JIT = stage-II interpreter (stage II and flat) = stage-I interpreter =
//! a dense reference, on random shapes and densities (empty rows, nnz = 0, 1×1, skewed rows).
//! Floats agree within `common::REL_TOL` (relative, 1e-12).

mod common;

use common::*;
use lacuna::ir::{ArrayData, CooTensor};
use lacuna::stage1::Input;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(24),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn spmv((m, n, rows) in sparse_matrix(), seed in any::<u64>()) {
        let p = kernel("spmv");
        let x = values(n, seed);
        let a = to_dense(m, n, &rows);
        let want: Vec<f64> = (0..m).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect();
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows))), ("x".to_string(), dense(&[n], x))]);
        for (target, outs) in run_all(&p, &inputs) {
            assert_dense(target, &outs["y"], &[m], &want);
        }
    }

    #[test]
    fn spmm((m, n, rows) in sparse_matrix(), k in 1usize..5, seed in any::<u64>()) {
        for name in ["spmm", "spmm_dense_iter"] {
            let p = kernel(name);
            let b = values(n * k, seed);
            let a = to_dense(m, n, &rows);
            let want: Vec<f64> = (0..m * k).map(|ik| (0..n).map(|j| a[ik / k * n + j] * b[j * k + ik % k]).sum()).collect();
            let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows))), ("B".to_string(), dense(&[n, k], b))]);
            for (target, outs) in run_all(&p, &inputs) {
                assert_dense(&format!("{name}/{target}"), &outs["C"], &[m, k], &want);
            }
        }
    }

    #[test]
    fn sddmm((m, n, rows) in sparse_matrix(), k in 1usize..5, seed in any::<u64>()) {
        let p = kernel("sddmm");
        let x = values(m * k, seed);
        let w = values(n * k, seed ^ 0x9e37);
        let want: Vec<(Vec<usize>, f64)> = rows.iter().enumerate().flat_map(|(i, r)| {
            let (x, w) = (&x, &w);
            r.iter().map(move |&(j, s)| (vec![i, j], (0..k).map(|kk| s * x[i * k + kk] * w[j * k + kk]).sum()))
        }).collect();
        let inputs = BTreeMap::from([
            ("S".to_string(), Input::Coo(to_coo(m, n, &rows))),
            ("X".to_string(), dense(&[m, k], x)),
            ("W".to_string(), dense(&[n, k], w)),
        ]);
        for (target, outs) in run_all(&p, &inputs) {
            assert_sparse(target, &outs["C"], &[m, n], &want);
        }
    }

    #[test]
    fn csr_reduce((m, n, rows) in sparse_matrix()) {
        let p = kernel("csr_reduce");
        let a = to_dense(m, n, &rows);
        let want: Vec<f64> = (0..m).map(|i| (0..n).map(|j| a[i * n + j]).sum()).collect();
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows)))]);
        for (target, outs) in run_all(&p, &inputs) {
            assert_dense(target, &outs["b"], &[m], &want);
        }
    }

    #[test]
    fn csr_element_wise((m, n, rows) in sparse_matrix()) {
        let p = kernel("csr_element_wise");
        let want: Vec<(Vec<usize>, f64)> = rows.iter().enumerate().flat_map(|(i, r)| r.iter().map(move |&(j, v)| (vec![i, j], v * v + 1.0))).collect();
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows)))]);
        for (target, outs) in run_all(&p, &inputs) {
            assert_sparse(target, &outs["B"], &[m, n], &want);
        }
    }

    #[test]
    fn segment_reduce(lens in proptest::collection::vec(0usize..7, 0..10), seed in any::<u64>()) {
        let p = kernel("segment_reduce");
        let m = lens.len();
        let max_len = lens.iter().copied().max().unwrap_or(0);
        let vals = values(lens.iter().sum(), seed);
        let mut coords = vec![Vec::new(), Vec::new()];
        let mut it = vals.iter();
        let mut want = vec![0.0; m];
        let mut data = Vec::new();
        for (i, &l) in lens.iter().enumerate() {
            for j in 0..l {
                let v = *it.next().expect("enough values");
                coords[0].push(i);
                coords[1].push(j);
                data.push(v);
                want[i] += v;
            }
        }
        let coo = CooTensor { shape: vec![m, max_len], coords, values: ArrayData::F64(data) };
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(coo))]);
        for (target, outs) in run_all(&p, &inputs) {
            assert_dense(target, &outs["b"], &[m], &want);
        }
    }

    #[test]
    fn square_sum(dims in (0usize..5, 0usize..5, 0usize..5), entries in proptest::collection::btree_map((0usize..5, 0usize..5, 0usize..5), -3.0f64..3.0, 0..40)) {
        let p = kernel("square_sum");
        let (m, n, q) = dims;
        let mut coords = vec![Vec::new(), Vec::new(), Vec::new()];
        let mut data = Vec::new();
        let mut want = vec![0.0; m];
        for (&(i, j, k), &v) in entries.iter().filter(|((i, j, k), _)| *i < m && *j < n && *k < q) {
            coords[0].push(i);
            coords[1].push(j);
            coords[2].push(k);
            data.push(v);
            want[i] += v * v;
        }
        let coo = CooTensor { shape: vec![m, n, q], coords, values: ArrayData::F64(data) };
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(coo))]);
        for (target, outs) in run_all(&p, &inputs) {
            assert_dense(target, &outs["b"], &[m], &want);
        }
    }
}

/// ELL (sparse_fixed) SpMV with f32 values and 64-bit indices: every row stores exactly `w`
/// columns.
const ELL_SPMV: &str = r#"(
    version: 1, name: "ell_spmv", params: ["m", "n", "w"],
    axes: [
        (name: "I", kind: DenseFixed(n: "m")),
        (name: "J", kind: SparseFixed(parent: "I", n: "n", nnz_cols: "w"), idtype: I64),
        (name: "J_", kind: DenseFixed(n: "n")),
    ],
    buffers: [
        (name: "A", axes: ["I", "J"], dtype: F32),
        (name: "x", axes: ["J_"], dtype: F32),
        (name: "y", axes: ["I"], dtype: F32, role: Output),
    ],
    body: [Iter((name: "ell", axes: ["I", "J"], kinds: "SR", vars: ["i", "j"],
        init: [Store("y[i] = 0.0")], body: [Store("y[i] = y[i] + A[i, j] * x[j]")]))],
)"#;

/// Nested iterations and integer arithmetic: an outer iteration over rows runs an inner
/// iteration over the row's entries; values are i32, coordinates used as values.
const NESTED_INT: &str = r#"(
    version: 1, name: "nested_int", params: ["m", "n", "nnz"],
    axes: [
        (name: "I", kind: DenseFixed(n: "m")),
        (name: "J", kind: SparseVariable(parent: "I", n: "n", nnz: "nnz")),
    ],
    buffers: [
        (name: "A", axes: ["I", "J"], dtype: I32),
        (name: "s", axes: ["I"], dtype: I32),
        (name: "B", axes: ["I", "J"], dtype: I32, role: Output),
    ],
    body: [Iter((name: "rows", axes: ["I"], kinds: "S", vars: ["i"], body: [
        Iter((name: "entries", axes: ["J"], kinds: "S", vars: ["j"], body: [
            Store("B[i, j] = select(A[i, j] > 0, A[i, j] * s[i] + i32(j), A[i, j] / (s[i] - 1) - i32(i))"),
        ])),
    ]))],
)"#;

proptest! {
    #![proptest_config(config())]

    #[test]
    fn ell_spmv_f32(m in 0usize..8, n in 1usize..8, w in 0usize..4, seed in any::<u64>()) {
        let w = w.min(n);
        let p = inline_kernel(ELL_SPMV);
        let x = values(n, seed);
        let vals = values(m * w, seed ^ 7);
        let mut coords = [Vec::new(), Vec::new()];
        let mut want = vec![0.0f32; m];
        for i in 0..m {
            for t in 0..w {
                let j = (i + 2 * t) % n;
                if coords[1].iter().zip(&coords[0]).any(|(&c, &r)| r == i && c == j) { continue; }
                coords[0].push(i);
                coords[1].push(j);
            }
        }
        // Rows where the stride collided get fewer entries; ELL needs exactly w, so use the
        // smallest count as the width and keep that many entries per row.
        let per_row: Vec<usize> = (0..m).map(|i| coords[0].iter().filter(|&&r| r == i).count()).collect();
        let w = per_row.iter().copied().min().unwrap_or(0);
        let mut kept = vec![Vec::new(), Vec::new()];
        let mut data = Vec::new();
        #[allow(clippy::needless_range_loop)]
        for i in 0..m {
            let mut cols: Vec<usize> = coords[0].iter().zip(&coords[1]).filter(|(&r, _)| r == i).map(|(_, &c)| c).collect();
            cols.sort_unstable();
            for &j in cols.iter().take(w) {
                let v = vals[data.len()] as f32;
                kept[0].push(i);
                kept[1].push(j);
                data.push(v);
                want[i] += v * x[j] as f32;
            }
        }
        let coo = CooTensor { shape: vec![m, n], coords: kept, values: ArrayData::F32(data) };
        let xs = lacuna::ir::DenseArray { shape: vec![n], data: ArrayData::F32(x.iter().map(|&v| v as f32).collect()) };
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(coo)), ("x".to_string(), Input::Dense(xs))]);
        let params = BTreeMap::from([("w".to_string(), w as i64)]);
        let base = lacuna::stage1::bind(&p, &inputs, &params).expect("binds");
        for target in [lacuna::driver::Target::InterpStage1, lacuna::driver::Target::Interp, lacuna::driver::Target::Jit] {
            let exe = lacuna::driver::Executable::build(&p, target).expect("builds");
            let mut b = base.clone();
            exe.run(&p, &mut b).expect("runs");
            let got = b.buffers["y"].to_f64_vec();
            #[allow(clippy::needless_range_loop)]
            for i in 0..m {
                // f32 sums in one order on every target: a tolerance of 1e-5 relative covers
                // the reference's own rounding.
                prop_assert!((got[i] - want[i] as f64).abs() <= 1e-5 * (want[i].abs() as f64).max(1.0), "{}: row {}: {} vs {}", target.name(), i, got[i], want[i]);
            }
        }
    }

    #[test]
    fn nested_iterations_with_integers((m, n, rows) in sparse_matrix(), seed in any::<u64>()) {
        let p = inline_kernel(NESTED_INT);
        let s: Vec<f64> = values(m, seed).iter().map(|v| (v * 3.0).round()).collect();
        let rows_i: Vec<Vec<(usize, f64)>> = rows.iter().map(|r| r.iter().map(|&(j, v)| (j, (v * 10.0).round())).collect()).collect();
        let want: Vec<(Vec<usize>, f64)> = rows_i.iter().enumerate().flat_map(|(i, r)| {
            let si = s[i] as i32;
            r.iter().map(move |&(j, v)| {
                let a = v as i32;
                let out = if a > 0 { a.wrapping_mul(si).wrapping_add(j as i32) } else {
                    let d = si - 1;
                    (if d == 0 { 0 } else { a.wrapping_div(d) }) - i as i32
                };
                (vec![i, j], out as f64)
            })
        }).collect();
        let coo = to_coo(m, n, &rows_i);
        let coo = CooTensor { values: ArrayData::I32(coo.values.to_f64_vec().iter().map(|&v| v as i32).collect()), ..coo };
        let sv = lacuna::ir::DenseArray { shape: vec![m], data: ArrayData::I32(s.iter().map(|&v| v as i32).collect()) };
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(coo)), ("s".to_string(), Input::Dense(sv))]);
        for (target, outs) in run_all(&p, &inputs) {
            assert_sparse(target, &outs["B"], &[m, n], &want);
        }
    }
}

/// Two iterations through an allocated i64 intermediate: `cnt[i]` counts the stored entries of
/// row i, then `y[i] = f64(cnt[i]) * 0.5 + s[i]` where `s` is the row sum (exp/sqrt exercised
/// on the way).
const ALLOC_I64: &str = r#"(
    version: 1, name: "alloc_i64", params: ["m", "n", "nnz"],
    axes: [
        (name: "I", kind: DenseFixed(n: "m")),
        (name: "J", kind: SparseVariable(parent: "I", n: "n", nnz: "nnz")),
    ],
    buffers: [
        (name: "A", axes: ["I", "J"], dtype: F64),
        (name: "cnt", axes: ["I"], dtype: I64, role: Alloc),
        (name: "s", axes: ["I"], dtype: F64, role: Alloc),
        (name: "y", axes: ["I"], dtype: F64, role: Output),
    ],
    body: [
        Iter((name: "count", axes: ["I", "J"], kinds: "SR", vars: ["i", "j"],
            init: [Store("cnt[i] = 0"), Store("s[i] = 0.0")],
            body: [Store("cnt[i] += 1"), Store("s[i] += sqrt(exp(A[i, j]))")])),
        Iter((name: "combine", axes: ["I"], kinds: "S", vars: ["i2"],
            body: [Store("y[i2] = f64(cnt[i2]) * 0.5 + s[i2]")])),
    ],
)"#;

proptest! {
    #![proptest_config(config())]

    #[test]
    fn allocated_intermediates_and_i64((m, n, rows) in sparse_matrix()) {
        let p = inline_kernel(ALLOC_I64);
        let want: Vec<f64> = rows.iter().map(|r| r.len() as f64 * 0.5 + r.iter().map(|&(_, v)| v.exp().sqrt()).sum::<f64>()).collect();
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows)))]);
        for (target, outs) in run_all(&p, &inputs) {
            assert_dense(target, &outs["y"], &[m], &want);
        }
    }
}

fn format_kernel(name: &str, formats: &[(&str, &str)]) -> lacuna::stage1::Program {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/formats")
        .join(format!("{name}.ron"));
    let formats: Vec<(String, String)> = formats
        .iter()
        .map(|(b, f)| (b.to_string(), f.to_string()))
        .collect();
    lacuna::driver::load_kernel_with_formats(&path, &formats)
        .unwrap_or_else(|e| panic!("{name} with {formats:?}: {e}"))
}

/// The 2-D formats every kernel written over dimensions must compute the same result on.
fn formats_for(n: usize, rows: &[Vec<(usize, f64)>]) -> Vec<String> {
    let widest = rows.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let mut v: Vec<String> = [
        "csr",
        "csc",
        "dcsr",
        "dcsc",
        "coo",
        "bsr(2,2)",
        "bsr(4,4)",
        "bsr(2,3)",
        "map = (i, j) -> (i : dense, j : compressed(nonordered))",
        "map = (i, j) -> (i : dense, j : loose_compressed)",
        "map = (i, j) -> (i : compressed(nonunique), j : singleton(soa))",
        "bcoo(2)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // ELL's width cannot exceed the number of columns (storage rejects it).
    if n > 0 {
        v.push(format!("ell({widest})"));
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: config().cases / 3 + 1, ..config() })]

    /// spmv, spmm and sddmm written once over dimensions give the dense reference's result on
    /// every format, on every target.
    #[test]
    fn kernels_over_every_format((m, n, rows) in sparse_matrix(), seed in any::<u64>()) {
        let a = to_dense(m, n, &rows);
        let k = 3;
        let x = values(n, seed);
        let b = values(n * k, seed ^ 1);
        let xs = values(m * k, seed ^ 2);
        let w = values(n * k, seed ^ 3);
        let y_want: Vec<f64> = (0..m).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect();
        let c_want: Vec<f64> = (0..m * k).map(|ik| (0..n).map(|j| a[ik / k * n + j] * b[j * k + ik % k]).sum()).collect();
        for f in formats_for(n, &rows) {
            let p = format_kernel("spmv", &[("A", &f)]);
            let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows))), ("x".to_string(), dense(&[n], x.clone()))]);
            for (target, outs) in run_all(&p, &inputs) {
                assert_dense(&format!("spmv {f} {target}"), &outs["y"], &[m], &y_want);
            }
            let p = format_kernel("spmm", &[("A", &f)]);
            let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows))), ("B".to_string(), dense(&[n, k], b.clone()))]);
            for (target, outs) in run_all(&p, &inputs) {
                assert_dense(&format!("spmm {f} {target}"), &outs["C"], &[m, k], &c_want);
            }
            // SDDMM: C in S's pattern; blocked formats also store the blocks' explicit zeros,
            // so compare as dense matrices.
            let p = format_kernel("sddmm", &[("S", &f), ("C", &f)]);
            let inputs = BTreeMap::from([
                ("S".to_string(), Input::Coo(to_coo(m, n, &rows))),
                ("X".to_string(), dense(&[m, k], xs.clone())),
                ("W".to_string(), dense(&[n, k], w.clone())),
            ]);
            let mut s_want = vec![0.0; m * n];
            for (i, r) in rows.iter().enumerate() {
                for &(j, s) in r {
                    s_want[i * n + j] = s * (0..k).map(|kk| xs[i * k + kk] * w[j * k + kk]).sum::<f64>();
                }
            }
            for (target, outs) in run_all(&p, &inputs) {
                let c = outs["C"].to_coo().expect("sparse output");
                let mut got = vec![0.0; m * n];
                let vals = c.values.to_f64_vec();
                for e in 0..c.nnz() {
                    got[c.coords[0][e] * n + c.coords[1][e]] += vals[e];
                }
                for (i, (g, w)) in got.iter().zip(&s_want).enumerate() {
                    prop_assert!(close(*g, *w), "sddmm {} {}: element {}: {} vs {}", f, target, i, g, w);
                }
            }
        }
    }

    /// 2:4 structured sparsity: every group of four columns stores exactly two entries.
    #[test]
    fn spmv_on_two_out_of_four(m in 0usize..6, groups in 1usize..4, pick in proptest::collection::vec(0usize..6, 24), seed in any::<u64>()) {
        let n = groups * 4;
        let pairs = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)];
        let vals = values(m * groups * 2, seed);
        let mut rows = vec![Vec::new(); m];
        for (i, row) in rows.iter_mut().enumerate() {
            for g in 0..groups {
                let (a, b) = pairs[pick[(i * groups + g) % pick.len()]];
                let e = (i * groups + g) * 2;
                row.push((g * 4 + a, vals[e]));
                row.push((g * 4 + b, vals[e + 1]));
            }
        }
        let x = values(n, seed ^ 9);
        let a = to_dense(m, n, &rows);
        let want: Vec<f64> = (0..m).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect();
        let p = format_kernel("spmv", &[("A", "2:4")]);
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows))), ("x".to_string(), dense(&[n], x))]);
        for (target, outs) in run_all(&p, &inputs) {
            assert_dense(&format!("2:4 {target}"), &outs["y"], &[m], &want);
        }
    }
}

fn tensor3(
    dims: (usize, usize, usize),
    entries: &std::collections::BTreeMap<(usize, usize, usize), f64>,
) -> CooTensor {
    let (m, n, q) = dims;
    let mut coords = vec![Vec::new(), Vec::new(), Vec::new()];
    let mut data = Vec::new();
    for (&(i, j, k), &v) in entries
        .iter()
        .filter(|((i, j, k), _)| *i < m && *j < n && *k < q)
    {
        coords[0].push(i);
        coords[1].push(j);
        coords[2].push(k);
        data.push(v);
    }
    CooTensor {
        shape: vec![m, n, q],
        coords,
        values: ArrayData::F64(data),
    }
}

proptest! {
    #![proptest_config(config())]

    /// TTV, TTM and MTTKRP on CSF and COO-3 against dense references.
    #[test]
    fn third_order_kernels_on_csf_and_coo(dims in (0usize..5, 0usize..5, 0usize..5), entries in proptest::collection::btree_map((0usize..5, 0usize..5, 0usize..5), -3.0f64..3.0, 0..40), seed in any::<u64>()) {
        let (m, n, q) = dims;
        let rank = 2;
        let a = tensor3(dims, &entries);
        let at = |i: usize, j: usize, k: usize| entries.get(&(i, j, k)).copied().filter(|_| i < m && j < n && k < q).unwrap_or(0.0);
        let x = values(q, seed);
        let u = values(q * rank, seed ^ 1);
        let b = values(n * rank, seed ^ 2);
        let c = values(q * rank, seed ^ 3);
        let ttv: Vec<f64> = (0..m * n).map(|ij| (0..q).map(|k| at(ij / n.max(1), ij % n.max(1), k) * x[k]).sum()).collect();
        let ttm: Vec<f64> = (0..m * n * rank).map(|t| { let (ij, r) = (t / rank, t % rank); (0..q).map(|k| at(ij / n.max(1), ij % n.max(1), k) * u[k * rank + r]).sum() }).collect();
        let mttkrp: Vec<f64> = (0..m * rank).map(|t| { let (i, r) = (t / rank, t % rank); (0..n).flat_map(|j| (0..q).map(move |k| (j, k))).map(|(j, k)| at(i, j, k) * b[j * rank + r] * c[k * rank + r]).sum() }).collect();
        for f in ["csf(3)", "coo3", "bcoo", "map = (i, j, k) -> (k : compressed, i : compressed, j : compressed)"] {
            let p = format_kernel("ttv", &[("A", f)]);
            let inputs = BTreeMap::from([("A".to_string(), Input::Coo(a.clone())), ("x".to_string(), dense(&[q], x.clone()))]);
            for (target, outs) in run_all(&p, &inputs) {
                assert_dense(&format!("ttv {f} {target}"), &outs["Y"], &[m, n], &ttv);
            }
            let p = format_kernel("ttm", &[("A", f)]);
            let inputs = BTreeMap::from([("A".to_string(), Input::Coo(a.clone())), ("U".to_string(), dense(&[q, rank], u.clone()))]);
            for (target, outs) in run_all(&p, &inputs) {
                assert_dense(&format!("ttm {f} {target}"), &outs["Y"], &[m, n, rank], &ttm);
            }
            let p = format_kernel("mttkrp", &[("A", f)]);
            let inputs = BTreeMap::from([("A".to_string(), Input::Coo(a.clone())), ("B".to_string(), dense(&[n, rank], b.clone())), ("C".to_string(), dense(&[q, rank], c.clone()))]);
            for (target, outs) in run_all(&p, &inputs) {
                assert_dense(&format!("mttkrp {f} {target}"), &outs["M"], &[m, rank], &mttkrp);
            }
        }
    }
}

/// Row maxima with a non-zero init: every row, stored or not, starts at -100, so formats whose
/// spatial levels skip empty rows (DCSR, COO, CSC) must still initialize them.
const ROW_MAX: &str = r#"(
    version: 1, name: "row_max", params: ["m", "n"],
    axes: [(name: "I", kind: DenseFixed(n: "m")), (name: "J", kind: DenseFixed(n: "n"))],
    buffers: [
        (name: "A", axes: ["I", "J"], dtype: F64, encoding: Some("csr")),
        (name: "y", axes: ["I"], dtype: F64, role: Output),
    ],
    body: [Iter((name: "rmax", axes: ["I", "J"], kinds: "SR", vars: ["i", "j"],
        init: [Store("y[i] = -100.0")], body: [Store("y[i] = max(y[i], A[i, j])")]))],
)"#;

proptest! {
    #![proptest_config(config())]

    #[test]
    fn non_zero_init_reaches_rows_a_format_does_not_store((m, n, rows) in sparse_matrix()) {
        let want: Vec<f64> = rows.iter().map(|r| r.iter().fold(-100.0f64, |acc, &(_, v)| acc.max(v))).collect();
        // (Blocked formats store explicit zeros in their blocks, which a max sees: not here.)
        for f in ["csr", "dcsr", "coo", "csc", "dcsc"] {
            let text = ROW_MAX.replace(r#"Some("csr")"#, &format!("Some(\"{f}\")"));
            let p = lacuna::stage1::sparsify(&inline_kernel(&text)).expect("sparsifies");
            let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows)))]);
            for (target, outs) in run_all(&p, &inputs) {
                assert_dense(&format!("{f} {target}"), &outs["y"], &[m], &want);
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// Sparse softmax: nested iterations with allocated intermediates.
    #[test]
    fn sparse_softmax((m, n, rows) in sparse_matrix()) {
        let p = kernel("sparse_softmax");
        let want: Vec<(Vec<usize>, f64)> = rows.iter().enumerate().flat_map(|(i, r)| {
            let mx = r.iter().fold(-1.0e308f64, |a, &(_, v)| a.max(v));
            let sum: f64 = r.iter().map(|&(_, v)| (v - mx).exp()).sum();
            r.iter().map(move |&(j, v)| (vec![i, j], (v - mx).exp() / sum))
        }).collect();
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(to_coo(m, n, &rows)))]);
        for (target, outs) in run_all(&p, &inputs) {
            assert_sparse(target, &outs["B"], &[m, n], &want);
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// RGCN: an indirect index (the edge type) selects each edge's weight matrix.
    #[test]
    fn rgcn_with_typed_edges((m, _n, rows) in sparse_matrix(), seed in any::<u64>()) {
        let p = kernel("rgcn");
        let n = m; // a graph: square adjacency
        let rows: Vec<Vec<(usize, f64)>> = rows.into_iter().map(|r| r.into_iter().filter(|&(j, _)| j < n).collect()).collect();
        let (rel, fi_n, fo_n) = (3usize, 2usize, 2usize);
        let w = values(rel * fo_n * fi_n, seed);
        let x = values(n * fi_n, seed ^ 1);
        let types: Vec<Vec<(usize, f64)>> = rows.iter().enumerate().map(|(i, r)| r.iter().map(|&(j, _)| (j, ((i * 7 + j * 3) % rel) as f64)).collect()).collect();
        let mut want = vec![0.0; n * fo_n];
        for (i, r) in rows.iter().enumerate() {
            for &(j, a) in r {
                let e = (i * 7 + j * 3) % rel;
                for fo in 0..fo_n {
                    for fi in 0..fi_n {
                        want[i * fo_n + fo] += a * w[(e * fo_n + fo) * fi_n + fi] * x[j * fi_n + fi];
                    }
                }
            }
        }
        let e_coo = to_coo(n, n, &types);
        let e_coo = CooTensor { values: ArrayData::I32(e_coo.values.to_f64_vec().iter().map(|&v| v as i32).collect()), ..e_coo };
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(to_coo(n, n, &rows))),
            ("E".to_string(), Input::Coo(e_coo)),
            ("W".to_string(), dense(&[rel, fo_n, fi_n], w)),
            ("X".to_string(), dense(&[n, fi_n], x)),
        ]);
        for (target, outs) in run_all(&p, &inputs) {
            assert_dense(target, &outs["Y"], &[n, fo_n], &want);
        }
    }

    /// Batched matmul over ragged batches (a dense_variable axis shared by A and C).
    #[test]
    fn batched_ragged_matmul(lens in proptest::collection::vec(0usize..4, 0..5), seed in any::<u64>()) {
        let p = kernel("batched_ragged_matmul");
        let (inner, cols) = (3usize, 2usize);
        let nb = lens.len();
        let max_rows = lens.iter().copied().max().unwrap_or(0);
        let total: usize = lens.iter().sum();
        let a_vals = values(total * inner, seed);
        let b = values(nb * inner * cols, seed ^ 4);
        let mut coords = vec![Vec::new(), Vec::new(), Vec::new()];
        let mut data = Vec::new();
        let mut want = Vec::new();
        let mut want_coords = Vec::new();
        let mut e = 0;
        for (bt, &l) in lens.iter().enumerate() {
            for i in 0..l {
                let row: Vec<f64> = (0..inner).map(|j| a_vals[(e + i) * inner + j]).collect();
                for (j, &v) in row.iter().enumerate() {
                    coords[0].push(bt);
                    coords[1].push(i);
                    coords[2].push(j);
                    data.push(v);
                }
                for k in 0..cols {
                    want_coords.push(vec![bt, i, k]);
                    want.push((0..inner).map(|j| row[j] * b[(bt * inner + j) * cols + k]).sum::<f64>());
                }
            }
            e += l;
        }
        let a = CooTensor { shape: vec![nb, max_rows, inner], coords, values: ArrayData::F64(data) };
        let inputs = BTreeMap::from([("A".to_string(), Input::Coo(a)), ("B".to_string(), dense(&[nb, inner, cols], b))]);
        let want: Vec<(Vec<usize>, f64)> = want_coords.into_iter().zip(want).collect();
        for (target, outs) in run_all(&p, &inputs) {
            assert_sparse(target, &outs["C"], &[nb, max_rows, cols], &want);
        }
    }
}
