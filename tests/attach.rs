//! Attached axes (SparseTIR's `attach`) and the kernels that use them: hyper-GNN in one
//! iteration through `attach(I_T, J)`, checked on every target (stage-I and stage-II
//! interpreters, the JIT, the scheduled kernel) against a dense Rust reference and against the
//! two-iteration `hypergnn` kernel; and the typed errors of malformed attached axes.

mod common;

use common::*;
use lacuna::driver::{parse_kernel_with_formats, reset_outputs, DriverError, Executable, Target};
use lacuna::schedule::ScheduleFile;
use lacuna::stage1::{bind, print_program, unpack, Input, Output, Program, VerifyError};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(24),
        ..ProptestConfig::default()
    }
}

fn schedule_file(name: &str) -> ScheduleFile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/schedules")
        .join(format!("{name}.ron"));
    lacuna::driver::load_schedule(&path).expect("example schedules load")
}

/// Runs `p` scheduled by the example schedule `schedule` on the stage-II interpreter and the JIT.
fn run_scheduled(
    p: &Program,
    schedule: &str,
    inputs: &BTreeMap<String, Input>,
    output: &str,
) -> Vec<(String, Output)> {
    let file = schedule_file(schedule);
    let mut out = Vec::new();
    for target in [Target::Interp, Target::Jit] {
        let (scheduled, exe) =
            Executable::build_with(p, Some(&file), target).expect("the schedule applies");
        let mut b = bind(&scheduled, inputs, &BTreeMap::new()).expect("binds");
        reset_outputs(&scheduled, &mut b);
        exe.run(&scheduled, &mut b).expect("runs");
        out.push((
            format!("{schedule} {}", target.name()),
            unpack(&scheduled, &b, output).expect("unpacks"),
        ));
    }
    out
}

/// A random sparse pattern `m × n` with values: rows as sorted (column, value) lists. `seed`
/// picks the pattern; about a third of the rows are left empty, and `density` (0..=4, in
/// quarters) sets how full the others are.
fn pattern(m: usize, n: usize, density: u8, seed: u64) -> Vec<Vec<(usize, f64)>> {
    let vals = values(m * n + 1, seed);
    let keep = values(m * n + m + 1, seed ^ 0x9e37_79b9);
    (0..m)
        .map(|i| {
            if keep[m * n + i] < -0.7 {
                return Vec::new();
            }
            (0..n)
                .filter(|&j| keep[i * n + j] + 2.0 < f64::from(density))
                .map(|j| (j, vals[i * n + j]))
                .collect()
        })
        .collect()
}

/// `Y = H · HT · X` with plain loops over dense arrays.
fn reference(
    nv: usize,
    ne: usize,
    h: &[Vec<(usize, f64)>],
    ht: &[Vec<(usize, f64)>],
    x: &[f64],
    feat: usize,
) -> Vec<f64> {
    let h = to_dense(nv, ne, h);
    let ht = to_dense(ne, nv, ht);
    let mut y = vec![0.0; nv * feat];
    for i in 0..nv {
        for j in 0..ne {
            for i2 in 0..nv {
                for f in 0..feat {
                    y[i * feat + f] += h[i * ne + j] * ht[j * nv + i2] * x[i2 * feat + f];
                }
            }
        }
    }
    y
}

/// Checks hypergnn_attach (all targets, scheduled) and hypergnn on one input.
fn check_hypergnn(
    nv: usize,
    ne: usize,
    h: &[Vec<(usize, f64)>],
    ht: &[Vec<(usize, f64)>],
    feat: usize,
    seed: u64,
) {
    let x = values(nv * feat, seed);
    let want = reference(nv, ne, h, ht, &x, feat);
    let inputs = BTreeMap::from([
        ("H".to_string(), Input::Coo(to_coo(nv, ne, h))),
        ("HT".to_string(), Input::Coo(to_coo(ne, nv, ht))),
        ("X".to_string(), dense(&[nv, feat], x)),
    ]);
    let attach = kernel("hypergnn_attach");
    let shape = [nv, feat];
    let mut got = Vec::new();
    for (target, outs) in run_all(&attach, &inputs) {
        assert_dense(target, &outs["Y"], &shape, &want);
        got.push((target.to_string(), outs["Y"].clone()));
    }
    for (target, out) in run_scheduled(&attach, "hypergnn_attach_parallel", &inputs, "Y") {
        assert_dense(&target, &out, &shape, &want);
        got.push((target, out));
    }
    // The two-iteration kernel through the intermediate Z computes the same.
    let two = kernel("hypergnn");
    for (target, outs) in run_all(&two, &inputs) {
        assert_dense(&format!("hypergnn {target}"), &outs["Y"], &shape, &want);
        let Output::Dense(d) = &outs["Y"] else {
            unreachable!("checked dense above")
        };
        for (t, o) in &got {
            let Output::Dense(e) = o else { unreachable!() };
            for (a, b) in d.data.to_f64_vec().iter().zip(e.data.to_f64_vec()) {
                assert!(
                    close(*a, b),
                    "hypergnn {target} vs hypergnn_attach {t}: {a} vs {b}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// Random incidence matrices with empty vertices and empty hyperedges; HT is an independent
    /// pattern (not H's transpose), so a fiber chosen by position instead of coordinate shows.
    #[test]
    fn hypergnn_attach_matches_reference(nv in 0usize..9, ne in 0usize..9, dh in 0u8..5, dt in 0u8..5, feat in 1usize..7, seed in any::<u64>()) {
        let h = pattern(nv, ne, dh, seed);
        let ht = pattern(ne, nv, dt, seed ^ 0x5555);
        check_hypergnn(nv, ne, &h, &ht, feat, seed);
    }

    /// H and its transpose (the hypergraph Laplacian's A·Aᵀ).
    #[test]
    fn hypergnn_attach_transpose(nv in 0usize..9, ne in 0usize..9, dh in 0u8..5, feat in 1usize..6, seed in any::<u64>()) {
        let h = pattern(nv, ne, dh, seed);
        let mut ht: Vec<Vec<(usize, f64)>> = vec![Vec::new(); ne];
        for (v, r) in h.iter().enumerate() {
            for &(e, w) in r {
                ht[e].push((v, w));
            }
        }
        check_hypergnn(nv, ne, &h, &ht, feat, seed);
    }
}

/// No incidences at all (nnz = 0), with vertices and hyperedges present: Y is zero.
#[test]
fn hypergnn_attach_nnz_zero() {
    let (nv, ne) = (4, 3);
    check_hypergnn(nv, ne, &vec![vec![]; nv], &vec![vec![]; ne], 5, 1);
    check_hypergnn(0, 0, &[], &[], 2, 2);
}

/// A hand-checked case: the fiber is chosen by the hyperedge's coordinate. Vertex 0 lies only
/// in hyperedge 2 (position 0 of J), whose vertices are 1 and 2.
#[test]
fn hypergnn_attach_by_coordinate() {
    let h = vec![vec![(2, 1.0)], vec![], vec![(0, 2.0)]];
    let ht = vec![vec![(0, 10.0)], vec![], vec![(1, 1.0), (2, 3.0)]];
    let x = vec![1.0, 100.0, 1000.0];
    assert_eq!(reference(3, 3, &h, &ht, &x, 1), vec![3100.0, 0.0, 20.0]);
    check_hypergnn(3, 3, &h, &ht, 1, 3);
}

const GOOD: &str = include_str!("../examples/hypergnn_attach.ron");

fn verify_error(text: &str) -> VerifyError {
    match parse_kernel_with_formats(text, Path::new("edited.ron"), &[]) {
        Err(DriverError::Verify { source, .. }) => source,
        other => panic!("expected a verification error, got {other:?}"),
    }
}

fn edit(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "the example contains {from}");
    GOOD.replace(from, to)
}

/// The stage-I printer shows the attached axis, and the RON form round-trips.
#[test]
fn attached_axis_prints_and_round_trips() {
    let p = kernel("hypergnn_attach");
    let text = print_program(&p);
    assert!(text.contains("I_TJ = attach(I_T, J, nv)"), "{text}");
    assert!(text.contains("sp_iter hgnn [I, J, I_TJ, F]"), "{text}");
    let again = Program::from_ron(&p.to_ron()).expect("parses");
    assert_eq!(again, p);
}

/// Malformed attached axes are typed verification errors naming the axis.
#[test]
fn attached_axis_errors() {
    // The new parent's extent differs from the base's parent's: I (nv) instead of J (ne).
    let e = verify_error(&edit(
        r#"Attached(base: "I_T", parent: "J", n: "nv")"#,
        r#"Attached(base: "I_T", parent: "I", n: "nv")"#,
    ));
    assert!(
        matches!(&e, VerifyError::AttachExtent { axis, what, .. } if axis == "I_TJ" && what.contains("`I`")),
        "{e:?}"
    );
    // The coordinate extent differs from the base's.
    let e = verify_error(&edit(
        r#"Attached(base: "I_T", parent: "J", n: "nv")"#,
        r#"Attached(base: "I_T", parent: "J", n: "ne")"#,
    ));
    assert!(
        matches!(&e, VerifyError::AttachExtent { what, .. } if what == "coordinate"),
        "{e:?}"
    );
    // A root base cannot be re-parented.
    let e = verify_error(&edit(
        r#"Attached(base: "I_T", parent: "J", n: "nv")"#,
        r#"Attached(base: "J_", parent: "J", n: "ne")"#,
    ));
    assert!(
        matches!(&e, VerifyError::AttachBase { base, .. } if base == "J_"),
        "{e:?}"
    );
    // A base whose parent is not dense_fixed (fibers cannot be chosen by coordinate).
    let text = edit(
        r#"(name: "I_T", kind: SparseVariable(parent: "J_", n: "nv", nnz: "nnz_t")),"#,
        r#"(name: "I_T", kind: SparseVariable(parent: "J_", n: "nv", nnz: "nnz_t")),
        (name: "K", kind: SparseVariable(parent: "I_T", n: "nv", nnz: "nnz_t")),
        (name: "KJ", kind: Attached(base: "K", parent: "J", n: "nv")),"#,
    );
    let e = verify_error(&text);
    assert!(
        matches!(&e, VerifyError::AttachBase { axis, reason, .. } if axis == "KJ" && reason.contains("sparse_variable")),
        "{e:?}"
    );
    // An unknown base.
    let e = verify_error(&edit(r#"base: "I_T""#, r#"base: "Q""#));
    assert!(
        matches!(&e, VerifyError::UnknownAxis { axis, .. } if axis == "Q"),
        "{e:?}"
    );
    // A buffer over the attached axis.
    let e = verify_error(&edit(
        r#"(name: "HT", axes: ["J_", "I_T"], dtype: F64),"#,
        r#"(name: "HT", axes: ["J_", "I_T"], dtype: F64),
        (name: "Bad", axes: ["I", "J", "I_TJ"], dtype: F64),"#,
    ));
    assert!(
        matches!(&e, VerifyError::AttachedBufferAxis { axis, base, .. } if axis == "I_TJ" && base == "I_T"),
        "{e:?}"
    );
    // Iterated before its new parent.
    let e = verify_error(&edit(
        r#"axes: ["I", "J", "I_TJ", "F"], kinds: "SRRS", vars: ["i", "j", "i2", "f"]"#,
        r#"axes: ["I", "I_TJ", "J", "F"], kinds: "SRRS", vars: ["i", "i2", "j", "f"]"#,
    ));
    assert!(
        matches!(&e, VerifyError::ParentNotIterated { axis, parent, .. } if axis == "I_TJ" && parent == "J"),
        "{e:?}"
    );
}

/// An attached iterator indexing a buffer whose detached dimension is *not* its new parent's
/// coordinate falls back to a coordinate search: `HT[j2, i2]` with j2 another hyperedge.
#[test]
fn attached_iterator_in_a_foreign_position_is_searched() {
    let text = GOOD
        .replace(
            r#"axes: ["I", "J", "I_TJ", "F"], kinds: "SRRS", vars: ["i", "j", "i2", "f"]"#,
            r#"axes: ["I", "J", "I_TJ", "J_", "F"], kinds: "SRRRS", vars: ["i", "j", "i2", "j2", "f"]"#,
        )
        .replace(
            "Y[i, f] + H[i, j] * HT[j, i2] * X[i2, f]",
            "Y[i, f] + H[i, j] * HT[j2, i2] * X[i2, f]",
        );
    let p = parse_kernel_with_formats(&text, Path::new("edited.ron"), &[]).expect("verifies");
    let (nv, ne, feat) = (5, 4, 2);
    for seed in 0..6u64 {
        let h = pattern(nv, ne, 2, seed);
        let ht = pattern(ne, nv, 3, seed ^ 9);
        let x = values(nv * feat, seed);
        let (hd, htd) = (to_dense(nv, ne, &h), to_dense(ne, nv, &ht));
        // sum over j in H[i,:], i2 in HT[j,:] (by coordinate of j), all j2 of HT[j2, i2].
        let mut want = vec![0.0; nv * feat];
        for i in 0..nv {
            for j in 0..ne {
                for i2 in 0..nv {
                    if htd[j * nv + i2] == 0.0 || hd[i * ne + j] == 0.0 {
                        continue;
                    }
                    for j2 in 0..ne {
                        for f in 0..feat {
                            want[i * feat + f] +=
                                hd[i * ne + j] * htd[j2 * nv + i2] * x[i2 * feat + f];
                        }
                    }
                }
            }
        }
        let inputs = BTreeMap::from([
            ("H".to_string(), Input::Coo(to_coo(nv, ne, &h))),
            ("HT".to_string(), Input::Coo(to_coo(ne, nv, &ht))),
            ("X".to_string(), dense(&[nv, feat], x)),
        ]);
        for (target, outs) in run_all(&p, &inputs) {
            assert_dense(target, &outs["Y"], &[nv, feat], &want);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// RGCN heterogeneous with 3-D ELL buckets: `decompose_format(A, "(per_relation D)")`.

/// Edges `(relation, destination, source, value)` sorted by (r, i, j): each edge of a random
/// pattern gets a relation; `skip` leaves relation 1 empty; `long` makes destination 0 of
/// relation 0 longer than the widest bucket (4) so that it is split.
fn hetero_edges(
    nodes: usize,
    rel: usize,
    density: u8,
    skip: bool,
    long: bool,
    seed: u64,
) -> Vec<(usize, usize, usize, f64)> {
    let rows = pattern(nodes, nodes, density, seed);
    let mut edges: Vec<(usize, usize, usize, f64)> = rows
        .iter()
        .enumerate()
        .flat_map(|(i, r)| r.iter().map(move |&(j, v)| ((i + 2 * j) % rel, i, j, v)))
        .filter(|e| !(skip && e.0 == 1))
        .collect();
    if long && nodes > 0 {
        edges.retain(|e| !(e.0 == 0 && e.1 == 0));
        let vals = values(nodes, seed ^ 3);
        edges.extend((0..nodes).map(|j| (0, 0, j, vals[j] + 0.25)));
    }
    edges.sort_by_key(|e| (e.0, e.1, e.2));
    edges
}

fn rgcn_inputs(
    edges: &[(usize, usize, usize, f64)],
    rel: usize,
    nodes: usize,
    w: Vec<f64>,
    x: Vec<f64>,
    fo_n: usize,
    fi_n: usize,
) -> BTreeMap<String, Input> {
    let a = lacuna::ir::CooTensor {
        shape: vec![rel, nodes, nodes],
        coords: vec![
            edges.iter().map(|e| e.0).collect(),
            edges.iter().map(|e| e.1).collect(),
            edges.iter().map(|e| e.2).collect(),
        ],
        values: lacuna::ir::ArrayData::F64(edges.iter().map(|e| e.3).collect()),
    };
    BTreeMap::from([
        ("A".to_string(), Input::Coo(a)),
        ("W".to_string(), dense(&[rel, fo_n, fi_n], w)),
        ("X".to_string(), dense(&[nodes, fi_n], x)),
    ])
}

/// Runs rgcn_hetero scheduled by `file` (converting A at bind time) on the stage-I and stage-II
/// interpreters and the JIT; returns Y per target.
fn run_converted(
    p: &Program,
    file: &ScheduleFile,
    inputs: &BTreeMap<String, Input>,
) -> Vec<(&'static str, Output)> {
    let mut out = Vec::new();
    for target in [Target::InterpStage1, Target::Interp, Target::Jit] {
        let (scheduled, exe, conversions) =
            Executable::build_converting(p, Some(file), target).expect("builds");
        let given = lacuna::driver::convert_inputs(&conversions, inputs).expect("converts");
        let mut b =
            lacuna::stage1::bind_with(&scheduled, inputs, &BTreeMap::new(), given).expect("binds");
        reset_outputs(&scheduled, &mut b);
        exe.run(&scheduled, &mut b).expect("runs");
        out.push((target.name(), unpack(&scheduled, &b, "Y").expect("unpacks")));
    }
    out
}

/// A 3-D ELL part's storage read back: `(relation, row, column) -> value`, padding included
/// (it holds value 0).
fn sum_parts(b: &lacuna::stage1::Bindings, rel: usize) -> BTreeMap<(usize, usize, usize), f64> {
    let mut sum: BTreeMap<(usize, usize, usize), f64> = BTreeMap::new();
    let mut add = |k: (usize, usize, usize), v: f64| *sum.entry(k).or_insert(0.0) += v;
    for t in 0.. {
        let pn = format!("A.p{t}");
        let Some(vals) = b.buffers.get(&pn) else {
            break;
        };
        let vals = vals.to_f64_vec();
        if let Some(rows) = b.buffers.get(&format!("{pn}.row")) {
            let rows = rows.to_i64_vec();
            let w = b.params[&format!("{pn}.w")] as usize;
            let g = b.axes[&format!("{pn}.g")]
                .indptr
                .as_ref()
                .expect("groups")
                .to_i64_vec();
            let cols = b.axes[&format!("{pn}.s")]
                .indices
                .as_ref()
                .expect("slots")
                .to_i64_vec();
            assert_eq!(g.len(), rel + 1, "{pn}: one group per relation");
            assert_eq!(cols.len(), rows.len() * w, "{pn}: {w} slots per row");
            for r in 0..rel {
                for (q, &row) in rows
                    .iter()
                    .enumerate()
                    .take(g[r + 1] as usize)
                    .skip(g[r] as usize)
                {
                    for s in q * w..(q + 1) * w {
                        add((r, row as usize, cols[s] as usize), vals[s]);
                    }
                }
            }
        } else {
            let ri = &b.axes[&format!("{pn}.i")];
            let (rp, rows) = (
                ri.indptr.as_ref().expect("rows").to_i64_vec(),
                ri.indices.as_ref().expect("rows").to_i64_vec(),
            );
            let cs = &b.axes[&format!("{pn}.s")];
            let (cp, cols) = (
                cs.indptr.as_ref().expect("cols").to_i64_vec(),
                cs.indices.as_ref().expect("cols").to_i64_vec(),
            );
            for r in 0..rel {
                for q in rp[r] as usize..rp[r + 1] as usize {
                    for s in cp[q] as usize..cp[q + 1] as usize {
                        add((r, rows[q] as usize, cols[s] as usize), vals[s]);
                    }
                }
            }
        }
    }
    sum.retain(|_, v| *v != 0.0);
    sum
}

const ELL3D_WITH_CSR: &str = "(per_relation (+ (bucket 1 2 (ell 1)) (+ (bucket 2 3 (ell 2)) csr)))";

fn with_csr_remainder() -> ScheduleFile {
    ScheduleFile {
        version: 1,
        kernel: "rgcn_hetero".into(),
        trace: vec![lacuna::schedule::Instruction::DecomposeFormat {
            buffer: "A".into(),
            into: ELL3D_WITH_CSR.into(),
        }],
    }
}

fn check_rgcn_ell3d(edges: &[(usize, usize, usize, f64)], rel: usize, nodes: usize, seed: u64) {
    let (fi_n, fo_n) = (2usize, 3usize);
    let w = values(rel * fo_n * fi_n, seed);
    let x = values(nodes * fi_n, seed ^ 7);
    let mut want = vec![0.0; nodes * fo_n];
    for &(r, i, j, a) in edges {
        for fo in 0..fo_n {
            want[i * fo_n + fo] += (0..fi_n)
                .map(|fi| a * w[(r * fo_n + fo) * fi_n + fi] * x[j * fi_n + fi])
                .sum::<f64>();
        }
    }
    let inputs = rgcn_inputs(edges, rel, nodes, w, x, fo_n, fi_n);
    let p = kernel("rgcn_hetero");
    // The decomposition reproduces A exactly, for both schedules.
    let a: BTreeMap<(usize, usize, usize), f64> =
        edges.iter().map(|e| ((e.0, e.1, e.2), e.3)).collect();
    for file in [schedule_file("rgcn_hetero_ell3d"), with_csr_remainder()] {
        let (_, _, conversions) =
            Executable::build_converting(&p, Some(&file), Target::InterpStage1).expect("builds");
        assert!(conversions[0].per_relation);
        let given = lacuna::driver::convert_inputs(&conversions, &inputs).expect("converts");
        assert_eq!(sum_parts(&given, rel), a, "parts of {:?}", file.trace[0]);
    }
    // ELL widths are the buckets', and the bucket for rows of length 3..5 holds no longer row.
    let (_, _, conv) = Executable::build_converting(
        &p,
        Some(&schedule_file("rgcn_hetero_ell3d")),
        Target::InterpStage1,
    )
    .expect("builds");
    let given = lacuna::driver::convert_inputs(&conv, &inputs).expect("converts");
    let widths: Vec<i64> = (0..4).map(|t| given.params[&format!("A.p{t}.w")]).collect();
    assert_eq!(widths, [1, 2, 4, 4]);
    for (target, outs) in run_all(&p, &inputs) {
        assert_dense(target, &outs["Y"], &[nodes, fo_n], &want);
    }
    for file in [schedule_file("rgcn_hetero_ell3d"), with_csr_remainder()] {
        for (target, got) in run_converted(&p, &file, &inputs) {
            assert_dense(&format!("ell3d {target}"), &got, &[nodes, fo_n], &want);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: config().cases / 2 + 1, ..config() })]

    /// RGCN over 3-D ELL buckets: compiled == interpreters == dense reference, the parts sum
    /// back to A; with empty relations and a row longer than the widest bucket.
    #[test]
    fn rgcn_hetero_ell3d(nodes in 0usize..9, density in 0u8..5, skip in any::<bool>(), long in any::<bool>(), seed in any::<u64>()) {
        let rel = 3;
        let edges = hetero_edges(nodes, rel, density, skip, long, seed);
        check_rgcn_ell3d(&edges, rel, nodes, seed);
    }
}

/// nnz = 0 (with nodes and relations), a single long row split into chunks of 4, and all edges
/// in one relation.
#[test]
fn rgcn_hetero_ell3d_edge_cases() {
    check_rgcn_ell3d(&[], 3, 4, 1);
    let long: Vec<_> = (0..11).map(|j| (2, 5, j, j as f64 + 1.0)).collect();
    check_rgcn_ell3d(&long, 3, 11, 2);
    let one = hetero_edges(7, 3, 3, false, true, 5);
    let moved: Vec<_> = {
        let mut m: Vec<_> = one.iter().map(|e| (1, e.1, e.2, e.3)).collect();
        m.sort_by_key(|e| (e.0, e.1, e.2));
        m.dedup_by_key(|e| (e.0, e.1, e.2));
        m
    };
    check_rgcn_ell3d(&moved, 3, 7, 3);
}

/// Bad uses are typed errors: a 2-D buffer, a part kind without a 3-D form, a tensor whose
/// relation coordinate is out of range.
#[test]
fn rgcn_hetero_ell3d_errors() {
    let spmm = kernel("spmm");
    let err = lacuna::schedule::Schedule::replay(
        &spmm,
        &[lacuna::schedule::Instruction::DecomposeFormat {
            buffer: "A".into(),
            into: "(per_relation (split_rows 2))".into(),
        }],
    )
    .expect_err("spmm's A is not relation-CSF");
    assert!(err.to_string().contains("relation-CSF"), "{err}");
    let p = kernel("rgcn_hetero");
    let err = lacuna::schedule::Schedule::replay(
        &p,
        &[lacuna::schedule::Instruction::DecomposeFormat {
            buffer: "A".into(),
            into: "(per_relation (+ (bsr 2) csr))".into(),
        }],
    )
    .expect_err("bsr parts have no relation form");
    assert!(err.to_string().contains("relation-level parts"), "{err}");
    let (_, _, conv) = Executable::build_converting(
        &p,
        Some(&schedule_file("rgcn_hetero_ell3d")),
        Target::InterpStage1,
    )
    .expect("builds");
    let bad = rgcn_inputs(
        &[(3, 0, 0, 1.0)],
        3,
        2,
        values(3 * 3 * 2, 1),
        values(4, 2),
        3,
        2,
    );
    let err = lacuna::driver::convert_inputs(&conv, &bad).expect_err("relation 3 of 3");
    assert!(matches!(err, DriverError::Conversion { .. }), "{err:?}");
    assert!(err.to_string().contains("relation 3"), "{err}");
    let two_d = BTreeMap::from([(
        "A".to_string(),
        Input::Coo(to_coo(2, 2, &[vec![(0, 1.0)], vec![]])),
    )]);
    let err = lacuna::driver::convert_inputs(&conv, &two_d).expect_err("rank 2");
    assert!(err.to_string().contains('3'), "{err}");
}
