//! Generated conversion routines of `decompose_format` (issue 4): the inspector builds each
//! part's structure and source map in Rust, a generated stage-II function copies the values.
//! The copied values equal the hand-written conversion's (`materialize`) bit for bit on every
//! backend, the kernel still computes the dense reference, the copy reruns on new values over
//! the same structure, and its IR has a golden.

mod common;

use common::*;
use lacuna::driver::{convert_inputs, DriverError, Executable, Target};
use lacuna::ir::ArrayData;
use lacuna::schedule::decompose::{materialize, CsrMatrix, Decomposition};
use lacuna::schedule::{Conversion, Instruction};
use lacuna::stage1::{bind_with, unpack, BindError, Bindings, Input, Program};
use lacuna::stage2::print_func;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use std::collections::BTreeMap;

/// Decompositions covering every part kind: ELL buckets, split rows, a CSR remainder, BSR,
/// padded CSR, sliced ELL, DIA, column parts, column panels, rows in reverse Cuthill–McKee
/// order, plain CSR. The widest ELL part has 2 slots.
const TERMS: &[&str] = &[
    "(+ (bucket 1 2 (ell 1)) (+ (bucket 2 3 (ell 2)) (split_rows 2)))",
    "(+ (bucket 1 3 (ell 2)) remainder)",
    "(+ (ell 2) (split_rows 3))",
    "(+ (bsr 2) remainder)",
    "(padded 3)",
    "(sell 4 8)",
    "(+ (bucket 1 3 (ell 2)) (sell 2 1))",
    "(dia 64 4)",
    "(+ (bucket 1 3 (ell 2)) (dia 64 3))",
    "(+ (colpart 2 0 (ell 2)) (+ (colpart 2 1 (ell 1)) remainder))",
    "(panels 3)",
    "(+ (bucket 1 3 (ell 2)) (panels 2))",
    "rcm",
    "csr",
];

const TARGETS: [Target; 3] = [Target::Jit, Target::Interp, Target::InterpStage1];

/// Feature width of SpMM's B.
const K: usize = 3;

type Rows = Vec<Vec<(usize, f64)>>;

/// A scheduled SpMM built for one target.
struct Built {
    term: &'static str,
    target: Target,
    program: Program,
    exe: Executable,
    conversions: Vec<Conversion>,
}

fn build_all(p: &Program) -> Vec<Built> {
    let mut out = Vec::new();
    for &term in TERMS {
        for target in TARGETS {
            let (program, exe, conversions) =
                Executable::build_converting(p, Some(&decompose(p, term)), target)
                    .unwrap_or_else(|e| panic!("{term} {}: {e}", target.name()));
            out.push(Built {
                term,
                target,
                program,
                exe,
                conversions,
            });
        }
    }
    out
}

fn csr_of(m: usize, n: usize, rows: &Rows) -> CsrMatrix {
    let triples: Vec<(usize, usize, f64)> = rows
        .iter()
        .enumerate()
        .flat_map(|(i, r)| r.iter().map(move |&(j, v)| (i, j, v)))
        .collect();
    CsrMatrix::from_triples(m, n, &triples).expect("a valid matrix")
}

fn inputs(m: usize, n: usize, rows: &Rows, b: &[f64]) -> BTreeMap<String, Input> {
    BTreeMap::from([
        ("A".to_string(), Input::Coo(to_coo(m, n, rows))),
        ("B".to_string(), dense(&[n, K], b.to_vec())),
    ])
}

fn spmm_reference(m: usize, n: usize, rows: &Rows, b: &[f64]) -> Vec<f64> {
    let a = to_dense(m, n, rows);
    let mut c = vec![0.0; m * K];
    for i in 0..m {
        for j in 0..n {
            for k in 0..K {
                c[i * K + k] += a[i * n + j] * b[j * K + k];
            }
        }
    }
    c
}

fn f64s(a: &ArrayData) -> Vec<f64> {
    match a {
        ArrayData::F64(v) => v.clone(),
        other => panic!("expected f64 values, found {:?}", other.dtype()),
    }
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Converts and binds: the inspector's bindings, before any value is copied.
fn bind_converted(built: &Built, inputs: &BTreeMap<String, Input>) -> Bindings {
    let given = convert_inputs(&built.conversions, inputs).expect("the inspector converts");
    let mut b = bind_with(&built.program, inputs, &BTreeMap::new(), given).expect("binds");
    lacuna::driver::reset_outputs(&built.program, &mut b);
    b
}

/// Every part's values in `b` equal `materialize`'s on `csr`, bit for bit; the structure the
/// inspector bound equals the hand-written conversion's.
fn assert_parts(built: &Built, b: &Bindings, csr: &CsrMatrix, what: &str) {
    let conv = &built.conversions[0];
    let d: Decomposition = built.term.parse().expect("parses");
    let parts = materialize(csr, &d).expect("materializes");
    assert_eq!(parts.len(), conv.parts.len(), "{what}: parts");
    let reference = lacuna::schedule::convert(conv, csr).expect("converts");
    for (t, part) in parts.iter().enumerate() {
        let name = format!("A.p{t}");
        let want = part.storage.values().to_vec();
        let got = f64s(&b.buffers[&name]);
        assert_eq!(bits(&got), bits(&want), "{what}: values of {name}");
    }
    for (axis, data) in &reference.axes {
        assert_eq!(b.axes.get(axis), Some(data), "{what}: structure of {axis}");
    }
    for (param, v) in &reference.params {
        assert_eq!(b.params.get(param), Some(v), "{what}: parameter {param}");
    }
    for (buffer, data) in reference
        .buffers
        .iter()
        .filter(|(n, _)| n.ends_with(".row") || n.ends_with(".col") || n.ends_with(".off"))
    {
        assert_eq!(
            b.buffers.get(buffer),
            Some(data),
            "{what}: row ids {buffer}"
        );
    }
}

/// Runs the copies and the kernel; checks the parts and the result against the dense
/// reference.
fn check(built: &Built, m: usize, n: usize, rows: &Rows, seed: u64) {
    let what = format!("{} on {} ({m}x{n})", built.term, built.target.name());
    let b_dense = values(n * K, seed);
    let data = inputs(m, n, rows, &b_dense);
    let mut b = bind_converted(built, &data);
    built
        .exe
        .run_preprocess(&built.program, &mut b)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_parts(built, &b, &csr_of(m, n, rows), &what);
    // SAFETY: `b` is as `run_preprocess` left it.
    unsafe { built.exe.run_kernel(&built.program, &mut b) }
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_dense(
        &what,
        &unpack(&built.program, &b, "C").expect("unpacks"),
        &[m, K],
        &spmm_reference(m, n, rows, &b_dense),
    );
}

/// Random matrices with at least 2 rows and 4 columns: row 0 empty, row 1 full (longer than
/// the widest ELL part), the others random (often empty).
fn matrix() -> impl Strategy<Value = (usize, usize, Rows)> {
    (2usize..9, 4usize..9).prop_flat_map(|(m, n)| {
        let rows = proptest::collection::vec(
            proptest::collection::btree_map(0..n, -4.0f64..4.0, 0..=n),
            m,
        );
        (Just(m), Just(n), rows).prop_map(|(m, n, rows)| {
            let mut rows: Rows = rows.into_iter().map(|r| r.into_iter().collect()).collect();
            rows[0].clear();
            rows[1] = (0..n).map(|j| (j, 0.25 + j as f64)).collect();
            (m, n, rows)
        })
    })
}

#[test]
fn generated_copies_equal_the_handwritten_conversion_bit_for_bit() {
    let p = kernel("spmm");
    let built = build_all(&p);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let mut runner = TestRunner::new(ProptestConfig {
        cases,
        ..ProptestConfig::default()
    });
    runner
        .run(&(matrix(), any::<u64>()), |((m, n, rows), seed)| {
            for b in &built {
                check(b, m, n, &rows, seed);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn empty_matrices_convert_to_empty_parts() {
    let p = kernel("spmm");
    let built = build_all(&p);
    for (m, n) in [(3, 4), (1, 1), (5, 2)] {
        let rows: Rows = vec![vec![]; m];
        for b in &built {
            check(b, m, n, &rows, 7);
        }
    }
}

/// The inspector binds structure and source maps only: the parts' values are zero until the
/// generated copy runs.
#[test]
fn the_inspector_binds_structure_and_sources_not_values() {
    let p = kernel("spmm");
    let (m, n) = (4, 6);
    let rows: Rows = vec![
        vec![(0, 1.5), (3, -2.0)],
        vec![],
        (0..6).map(|j| (j, j as f64 + 1.0)).collect(),
        vec![(5, 3.0)],
    ];
    let data = inputs(m, n, &rows, &values(n * K, 1));
    let term = "(+ (bucket 1 3 (ell 2)) (split_rows 2))";
    let (_, _, conversions) =
        Executable::build_converting(&p, Some(&decompose(&p, term)), Target::Interp)
            .expect("builds");
    let given = convert_inputs(&conversions, &data).expect("converts");
    // Bucket [1, 3): rows 0 and 3 (2 slots each); split rows of 2: row 2 in 3 chunks.
    assert_eq!(given.buffers["A.p0.src"], ArrayData::I64(vec![0, 1, 8, -1]));
    assert_eq!(
        given.buffers["A.p1.src"],
        ArrayData::I64(vec![2, 3, 4, 5, 6, 7])
    );
    assert_eq!(given.params["A.src_nnz"], 9);
    for part in ["A.p0", "A.p1"] {
        assert!(
            f64s(&given.buffers[part]).iter().all(|v| v.to_bits() == 0),
            "{part} holds values before the copy"
        );
    }
}

/// Changing A's values (not its pattern) and rerunning the generated copy updates the parts;
/// the inspector's structure is reused as it is.
#[test]
fn rerunning_the_copy_on_new_values_updates_the_parts() {
    let p = kernel("spmm");
    let (m, n) = (6, 7);
    let rows: Rows = vec![
        vec![(1, 1.0)],
        (0..7).map(|j| (j, 0.5 * j as f64 - 1.0)).collect(),
        vec![],
        vec![(0, 2.0), (2, 3.0), (6, -1.0)],
        vec![(3, 4.0), (4, 5.0)],
        vec![(0, 0.5), (1, 0.25), (2, 0.125), (3, 2.5)],
    ];
    let b_dense = values(n * K, 3);
    let data = inputs(m, n, &rows, &b_dense);
    for &term in TERMS {
        for target in TARGETS {
            let what = format!("{term} on {}", target.name());
            let (program, exe, conversions) =
                Executable::build_converting(&p, Some(&decompose(&p, term)), target)
                    .expect("builds");
            let built = Built {
                term,
                target,
                program,
                exe,
                conversions,
            };
            assert_eq!(built.exe.value_copies().len(), 1, "{what}: one copy");
            let mut b = bind_converted(&built, &data);
            built
                .exe
                .run_preprocess(&built.program, &mut b)
                .expect("copies");
            assert_parts(&built, &b, &csr_of(m, n, &rows), &what);
            let structure = (b.axes.clone(), b.params.clone());
            // New values in place, in A's CSR order: v -> 3v + 1 (never equal to v here).
            let new_rows: Rows = rows
                .iter()
                .map(|r| r.iter().map(|&(j, v)| (j, 3.0 * v + 1.0)).collect())
                .collect();
            let ArrayData::F64(a) = b.buffers.get_mut("A").expect("A is bound") else {
                panic!("A holds f64")
            };
            for v in a.iter_mut() {
                *v = 3.0 * *v + 1.0;
            }
            built
                .exe
                .run_preprocess(&built.program, &mut b)
                .expect("copies again");
            assert_eq!((b.axes.clone(), b.params.clone()), structure, "{what}");
            assert_parts(
                &built,
                &b,
                &csr_of(m, n, &new_rows),
                &format!("{what}, new values"),
            );
            lacuna::driver::reset_outputs(&built.program, &mut b);
            // SAFETY: as `run_preprocess` left it, outputs zeroed.
            unsafe { built.exe.run_kernel(&built.program, &mut b) }.expect("runs");
            assert_dense(
                &what,
                &unpack(&built.program, &b, "C").expect("unpacks"),
                &[m, K],
                &spmm_reference(m, n, &new_rows, &b_dense),
            );
            // A with another number of entries no longer fits the structure and the source
            // maps: a typed error before anything runs. Machine code validates the bindings
            // first; the interpreters leave it to the value copy's own check.
            b.buffers.insert("A".into(), ArrayData::F64(vec![1.0; 3]));
            let err = built
                .exe
                .run_preprocess(&built.program, &mut b)
                .expect_err("A has 3 entries, the maps index 17");
            let validated = matches!(
                err,
                DriverError::Bind(BindError::Length { ref buffer, expected: 17, found: 3, .. })
                    if buffer == "A"
            );
            assert_eq!(validated, target == Target::Jit, "{what}: {err}");
            // The value copy checks it too, when run by itself.
            let err = built.exe.value_copies()[0]
                .run(&built.program, &mut b)
                .expect_err("A has 3 entries, the maps index 17");
            assert!(
                matches!(err, DriverError::Conversion { ref buffer, .. } if buffer == "A"),
                "{what}: {err}"
            );
            assert!(
                err.to_string().contains("expected nnz = 17"),
                "{what}: {err}"
            );
        }
    }
}

/// The generated function of a hybrid decomposition with every part kind.
#[test]
fn value_copy_ir_golden() {
    let p = kernel("spmm");
    let term = "(+ (bucket 1 3 (ell 2)) (+ (bsr 2) (+ (colpart 2 0 (split_rows 4)) (+ (colpart 2 1 (padded 2)) remainder))))";
    let (_, exe, conversions) =
        Executable::build_converting(&p, Some(&decompose(&p, term)), Target::Interp)
            .expect("builds");
    let func = lacuna::schedule::value_copy_func(&conversions[0]).expect("a 2-D decomposition");
    assert_eq!(exe.value_copies()[0].func(), Some(&func));
    insta::assert_snapshot!("hyb_value_copy", print_func(&func));
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]

    /// The inspector builds `materialize`'s structure, and its source maps give back
    /// `materialize`'s values (0 for padding), on any matrix, empty ones included.
    #[test]
    fn inspection_is_materialize_without_values((m, n, rows) in sparse_matrix()) {
        use lacuna::schedule::decompose::inspect;
        let csr = csr_of(m, n, &rows);
        for &term in TERMS {
            let d: Decomposition = term.parse().expect("parses");
            let parts = materialize(&csr, &d).expect("materializes");
            let inspection = inspect(&csr, &d).expect("inspects");
            prop_assert_eq!(inspection.sources.len(), parts.len());
            for ((mut got, src), want) in inspection.parts.into_iter().zip(inspection.sources).zip(&parts) {
                let values = got.storage.values_mut();
                prop_assert!(values.iter().all(|v| v.to_bits() == 0), "{}: values copied", term);
                prop_assert_eq!(values.len(), src.len());
                for (v, &k) in values.iter_mut().zip(&src) {
                    *v = if k >= 0 { csr.values[k as usize] } else { 0.0 };
                }
                prop_assert_eq!(&got, want, "{}", term);
            }
        }
    }
}

/// A sliced ELL part narrows its columns to i32 when the column axis is i32: a column that does
/// not fit is a typed error naming the entry, never a wrapped index.
#[test]
fn sell_columns_past_i32_are_errors() {
    let p = kernel("spmv");
    let s = lacuna::schedule::Schedule::replay(
        &p,
        &[Instruction::DecomposeFormat {
            buffer: "A".into(),
            into: "(sell 4 8)".into(),
        }],
    )
    .expect("decomposes");
    let conv = &s.conversions()[0];
    let wide = 1usize << 31;
    let csr = CsrMatrix::new(2, wide + 1, vec![0, 1, 2], vec![3, wide], vec![1.0, 2.0])
        .expect("a valid CSR matrix");
    let err = lacuna::schedule::convert(conv, &csr).expect_err("does not fit i32");
    assert!(
        matches!(
            err,
            lacuna::schedule::decompose::DecomposeError::ColumnOutOfRange { row: 1, col, .. } if col == wide
        ),
        "{err}"
    );
    let fits = CsrMatrix::new(2, 9, vec![0, 1, 2], vec![3, 8], vec![1.0, 2.0]).expect("valid");
    let b = lacuna::schedule::convert(conv, &fits).expect("converts");
    assert_eq!(b.buffers["A.p0.col"], ArrayData::I32(vec![3, 8, 0, 0]));
}
