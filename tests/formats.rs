//! Kernels over sliced operands: `examples/formats/{spmv,spmm,sddmm}.ron` with an input whose
//! encoding has dimension slices compute on the slice of the bound tensor (MLIR's
//! `tensor.extract_slice` view) on every target, against a dense reference of the slice.

mod common;

use common::*;
use lacuna::stage1::{Input, Output};
use proptest::prelude::*;
use std::collections::BTreeMap;

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

/// `format` (a preset or MLIR text) with `slices` on its two dimensions, as MLIR text.
fn sliced(format: &str, slices: [(usize, usize, usize); 2]) -> String {
    let text = lacuna::ir::encoding::parse_format(format)
        .unwrap()
        .to_string();
    let s = |d: usize| {
        let (o, n, st) = slices[d];
        format!("d{d} : #sparse_tensor<slice({o}, {n}, {st})>")
    };
    let out = text.replacen("(d0, d1) ->", &format!("({}, {}) ->", s(0), s(1)), 1);
    assert_ne!(out, text, "{text}");
    out
}

/// A slice of an extent-`n` dimension from raw numbers: size at least 1, stride 1 to 3.
fn slice_of(n: usize, raw: (usize, usize, usize)) -> (usize, usize, usize) {
    let stride = 1 + raw.2 % 3;
    let offset = raw.0 % n;
    let max_size = (n - offset).div_ceil(stride);
    (offset, 1 + raw.1 % max_size, stride)
}

fn nonempty_matrix() -> impl Strategy<Value = (usize, usize, Vec<Vec<(usize, f64)>>)> {
    sparse_matrix().prop_filter("a slice needs a row and a column", |(m, n, _)| {
        *m > 0 && *n > 0
    })
}

/// The formats to store a slice in; `widest` is the longest row of the slice, `n` its width.
fn formats(widest: usize, n: usize) -> Vec<String> {
    let widest = widest.max(1);
    let mut v: Vec<String> = [
        "csr",
        "csc",
        "dcsr",
        "dcsc",
        "coo",
        "bsr(2,2)",
        "bsr(2,3)",
        "bcoo(2)",
        "map = (i, j) -> (i : dense, j : loose_compressed)",
        "map = (i, j) -> (i : compressed(nonunique), j : singleton(soa))",
        "map = (i, j) -> (i : dense, j : compressed), posWidth = 8, crdWidth = 16",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if widest <= n {
        v.push(format!("ell({widest})"));
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// spmv, spmm and sddmm on a sliced A (S) equal the dense reference of the slice on every
    /// format and target; strides above 1 included.
    #[test]
    fn kernels_on_sliced_operands(
        (m, n, rows) in nonempty_matrix(),
        raw in prop::array::uniform2((0usize..16, 0usize..16, 0usize..16)),
        seed in any::<u64>(),
    ) {
        let full = to_dense(m, n, &rows);
        let s = [slice_of(m, raw[0]), slice_of(n, raw[1])];
        let (ms, ns) = (s[0].1, s[1].1);
        let a: Vec<f64> = (0..ms * ns)
            .map(|e| full[(s[0].0 + e / ns * s[0].2) * n + s[1].0 + e % ns * s[1].2])
            .collect();
        let k = 2;
        let x = values(ns, seed);
        let b = values(ns * k, seed ^ 1);
        let xs = values(ms * k, seed ^ 2);
        let w = values(ns * k, seed ^ 3);
        let y_want: Vec<f64> = (0..ms).map(|i| (0..ns).map(|j| a[i * ns + j] * x[j]).sum()).collect();
        let c_want: Vec<f64> = (0..ms * k)
            .map(|ik| (0..ns).map(|j| a[ik / k * ns + j] * b[j * k + ik % k]).sum())
            .collect();
        let s_want: Vec<f64> = (0..ms * ns)
            .map(|e| a[e] * (0..k).map(|kk| xs[e / ns * k + kk] * w[e % ns * k + kk]).sum::<f64>())
            .collect();
        let coo = Input::Coo(to_coo(m, n, &rows));
        let widest = (0..ms).map(|i| a[i * ns..(i + 1) * ns].iter().filter(|v| **v != 0.0).count()).max().unwrap_or(0);
        for f in formats(widest, ns) {
            let enc = sliced(&f, s);
            let p = format_kernel("spmv", &[("A", &enc)]);
            let inputs = BTreeMap::from([("A".to_string(), coo.clone()), ("x".to_string(), dense(&[ns], x.clone()))]);
            for (target, outs) in run_all(&p, &inputs) {
                assert_dense(&format!("spmv {enc} {target}"), &outs["y"], &[ms], &y_want);
            }
            let p = format_kernel("spmm", &[("A", &enc)]);
            let inputs = BTreeMap::from([("A".to_string(), coo.clone()), ("B".to_string(), dense(&[ns, k], b.clone()))]);
            for (target, outs) in run_all(&p, &inputs) {
                assert_dense(&format!("spmm {enc} {target}"), &outs["C"], &[ms, k], &c_want);
            }
            // C, declared with S's encoding, is stored in the pattern of S's slice.
            let p = format_kernel("sddmm", &[("S", &enc), ("C", &enc)]);
            let inputs = BTreeMap::from([
                ("S".to_string(), coo.clone()),
                ("X".to_string(), dense(&[ms, k], xs.clone())),
                ("W".to_string(), dense(&[ns, k], w.clone())),
            ]);
            for (target, outs) in run_all(&p, &inputs) {
                let Output::Coo(c) = &outs["C"] else { panic!("sparse output") };
                prop_assert_eq!(&c.shape, &vec![ms, ns]);
                let mut got = vec![0.0; ms * ns];
                let vals = c.values.to_f64_vec();
                for e in 0..c.nnz() {
                    got[c.coords[0][e] * ns + c.coords[1][e]] += vals[e];
                }
                for (i, (g, w)) in got.iter().zip(&s_want).enumerate() {
                    prop_assert!(close(*g, *w), "sddmm {} {}: element {}: {} vs {}", enc, target, i, g, w);
                }
            }
        }
    }
}

fn bind_error(kernel: &str, buffer: &str, enc: &str, inputs: BTreeMap<String, Input>) -> String {
    let p = format_kernel(kernel, &[(buffer, enc)]);
    match lacuna::stage1::bind(&p, &inputs, &BTreeMap::new()) {
        Ok(_) => panic!("{enc}: binds"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_slice_outside_the_input_is_a_bind_error_naming_the_dimension() {
    let rows = vec![vec![(0, 1.0), (3, 2.0)], vec![(1, 3.0)], vec![]];
    let inputs = |nx: usize| {
        BTreeMap::from([
            ("A".to_string(), Input::Coo(to_coo(3, 4, &rows))),
            ("x".to_string(), dense(&[nx], vec![1.0; nx])),
        ])
    };
    let e = bind_error(
        "spmv",
        "A",
        &sliced("csr", [(0, 2, 1), (1, 2, 3)]),
        inputs(2),
    );
    assert!(e.contains("dimension 1") && e.contains("size 4"), "{e}");
    let e = bind_error(
        "spmv",
        "A",
        &sliced("csr", [(2, 2, 1), (0, 4, 1)]),
        inputs(4),
    );
    assert!(e.contains("dimension 0"), "{e}");
    // The dense operand must have the slice's size.
    let e = bind_error(
        "spmv",
        "A",
        &sliced("csr", [(0, 2, 1), (0, 2, 2)]),
        inputs(4),
    );
    assert!(e.contains('2') && e.contains('4'), "{e}");
}

#[test]
fn dynamic_slices_and_symbols_in_kernels_are_typed_errors() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/formats/spmv.ron");
    for (enc, what) in [
        (
            "map = (i : #sparse_tensor<slice(?, 2, 1)>, j) -> (i : dense, j : compressed)",
            "`?`",
        ),
        ("map = [s0](i, j) -> (i : dense, j : compressed)", "symbol"),
    ] {
        let formats = vec![("A".to_string(), enc.to_string())];
        let e = lacuna::driver::load_kernel_with_formats(&path, &formats)
            .err()
            .unwrap_or_else(|| panic!("{enc}: accepted"))
            .to_string();
        assert!(e.contains(what) && e.contains('A'), "{enc}: {e}");
    }
}

fn lacuna(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_lacuna"))
        .args(args)
        .output()
        .expect("lacuna runs")
}

#[test]
fn the_cli_views_a_file_through_a_sliced_encoding() {
    let dir = std::env::temp_dir().join(format!("lacuna-formats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a = dir.join("a.mtx");
    // Rows 1, 2 and columns 1, 3 of this 3 x 4 matrix: (1, 3) = 2 and (2, 1) = 3 (0-based),
    // at view coordinates (0, 1) and (1, 0).
    std::fs::write(
        &a,
        "%%MatrixMarket matrix coordinate real general\n3 4 3\n1 1 1.0\n2 4 2.0\n3 2 3.0\n",
    )
    .unwrap();
    let a = a.to_str().unwrap();
    let sliced = "map = (i : #sparse_tensor<slice(1, 2, 1)>, j : #sparse_tensor<slice(1, 2, 2)>) -> (i : dense, j : compressed)";
    let out = lacuna(&["convert", a, "--to", sliced, "--print"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // MLIR's print of a slice: the file's CSR buffers, the slice's sizes.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "---- Sparse Tensor ----\nnse = 3\ndim = ( 2, 2 )\nlvl = ( 2, 2 )\npos[1] : ( 0, 1, 2, 3 )\ncrd[1] : ( 0, 3, 1 )\nvalues : ( 1, 2, 3 )\n----\n"
    );
    let csr = lacuna(&[
        "convert",
        a,
        "--to",
        sliced,
        "--out",
        dir.join("v.mtx").to_str().unwrap(),
    ]);
    assert!(csr.status.success());
    let v = std::fs::read_to_string(dir.join("v.mtx")).unwrap();
    let body: Vec<&str> = v.lines().filter(|l| !l.starts_with('%')).collect();
    assert_eq!(body, ["2 2 2", "1 2 2.0", "2 1 3.0"]);
    // A slice past the file's shape, a dynamic slice, a co-iteration kernel: errors.
    for (args, what) in [
        (
            vec![
                "convert",
                a,
                "--to",
                "map = (i : #sparse_tensor<slice(2, 2, 1)>, j) -> (i : dense, j : compressed)",
            ],
            "dimension 0",
        ),
        (
            vec![
                "convert",
                a,
                "--to",
                "map = (i : #sparse_tensor<slice(?, 2, 1)>, j) -> (i : dense, j : compressed)",
            ],
            "`?`",
        ),
    ] {
        let out = lacuna(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(what) && !err.contains("panicked"),
            "{err}"
        );
    }
    let spadd = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/spadd.ron");
    let out = lacuna(&[
        "run",
        spadd.to_str().unwrap(),
        "--input",
        &format!("A={a}"),
        "--input",
        &format!("B={a}"),
        "--format",
        &format!("A={sliced}"),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("dimension slices") && !err.contains("panicked"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
