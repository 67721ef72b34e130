//! Co-iteration kernels (SpAdd, element-wise multiply, SpGEMM, masked SpGEMM, SpMSpV) against a
//! dense reference over operands with independent, identical, nested, disjoint and empty
//! patterns, every combination of CSR/CSC/DCSR/COO inputs and several result encodings; the
//! JIT, the stage-II interpreter and the point-by-point reference interpreter must agree.
//! Also: golden merge lattices, and the typed errors (galloping on a union, inconsistent level
//! orders, mismatched shapes).

use lacuna::driver::{
    parse_kernel_with_formats, run_coiteration, CoData, CoExecutable, DriverError, Target,
};
use lacuna::ir::{ArrayData, CooTensor, DenseArray};
use lacuna::stage1::{BinOp, Coiteration, Input, Merge, Output, Program, Stmt};
use lacuna::stage2::coiter::{lattice, CoKernel, CoiterError, Pass, TExpr};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const TOL: f64 = 1e-12;

type Pattern = BTreeSet<(usize, usize)>;

fn kernel(name: &str, formats: &[(&str, &str)], coiteration: Option<Coiteration>) -> Program {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(format!("{name}.ron"));
    let text = std::fs::read_to_string(&path).expect("example exists");
    let formats: Vec<(String, String)> = formats
        .iter()
        .map(|(b, f)| (b.to_string(), f.to_string()))
        .collect();
    let mut p = parse_kernel_with_formats(&text, &path, &formats).expect("kernel loads");
    if let Some(c) = coiteration {
        let Stmt::Iter(it) = &mut p.body[0] else {
            panic!("one iteration")
        };
        it.coiteration = Some(c);
    }
    p
}

fn coo(shape: (usize, usize), entries: &BTreeMap<(usize, usize), f64>) -> CooTensor {
    CooTensor {
        shape: vec![shape.0, shape.1],
        coords: vec![
            entries.keys().map(|k| k.0).collect(),
            entries.keys().map(|k| k.1).collect(),
        ],
        values: ArrayData::F64(entries.values().copied().collect()),
    }
}

/// How the second operand's pattern relates to the first's.
#[derive(Clone, Copy, Debug)]
enum Relation {
    Independent,
    Identical,
    Nested,
    Disjoint,
    Empty,
}

fn values_for(p: &Pattern, seed: u64) -> BTreeMap<(usize, usize), f64> {
    p.iter()
        .enumerate()
        .map(|(e, &k)| {
            let v = ((e as u64 * 2654435761 + seed) % 17) as f64 / 4.0 - 2.0;
            (k, if v == 0.0 { 0.5 } else { v })
        })
        .collect()
}

fn pattern(m: usize, n: usize, bits: &[bool]) -> Pattern {
    (0..m * n)
        .filter(|&x| bits[x % bits.len()])
        .map(|x| (x / n.max(1), x % n.max(1)))
        .collect()
}

/// Two operands of shape m×n with related patterns.
fn operands() -> impl Strategy<Value = (usize, usize, Pattern, Pattern)> {
    (
        1usize..7,
        1usize..7,
        prop::collection::vec(any::<bool>(), 49),
        prop::collection::vec(any::<bool>(), 49),
        0u8..5,
    )
        .prop_map(|(m, n, a_bits, b_bits, rel)| {
            let a = pattern(m, n, &a_bits);
            let other = pattern(m, n, &b_bits);
            let rel = [
                Relation::Independent,
                Relation::Identical,
                Relation::Nested,
                Relation::Disjoint,
                Relation::Empty,
            ][rel as usize];
            let b = match rel {
                Relation::Independent => other,
                Relation::Identical => a.clone(),
                Relation::Nested => a.intersection(&other).copied().collect(),
                Relation::Disjoint => other.difference(&a).copied().collect(),
                Relation::Empty => Pattern::new(),
            };
            (m, n, a, b)
        })
}

const INPUT_FORMATS: [&str; 4] = ["csr", "csc", "dcsr", "coo"];
/// The last is CSR with 32-bit positions and coordinates: with 32-bit operand indices
/// ([`CoKernel::narrowed`]) the kernel writes its coordinates as `i32` directly.
const OUTPUT_FORMATS: [&str; 5] = [
    "csr",
    "dcsr",
    "csc",
    "coo",
    "map = (i, j) -> (i : dense, j : compressed), posWidth = 32, crdWidth = 32",
];

fn sparse_output(o: &Output) -> BTreeMap<(usize, usize), f64> {
    let Output::Sparse(t) = o else {
        panic!("a sparse result in its encoding's storage")
    };
    let c = t.to_coo();
    let mut m = BTreeMap::new();
    for e in 0..c.nnz() {
        let v = c.values.get(e).expect("value").as_f64();
        assert!(
            m.insert((c.coords[0][e], c.coords[1][e]), v).is_none(),
            "duplicate entry in a unique result"
        );
    }
    m
}

/// A kernel compiled once (both passes) and run by every target; with its 32-bit-index
/// variant ([`CoKernel::narrowed`]), which the driver runs on data that fits.
struct Compiled {
    k: CoKernel,
    count: Option<lacuna::target::CompiledKernel>,
    compute: lacuna::target::CompiledKernel,
    one_pass: Option<lacuna::target::CompiledKernel>,
    narrow: Option<Box<Compiled>>,
}

fn compiled(p: &Program) -> Compiled {
    let k = CoKernel::new(p).unwrap_or_else(|e| panic!("{}: {e}", p.name));
    let narrow = k
        .with_index(lacuna::ir::DType::I32)
        .unwrap_or_else(|e| panic!("{}: {e}", p.name));
    let mut c = compile_kernel(k);
    c.narrow = Some(Box::new(compile_kernel(narrow)));
    c
}

/// Compiles `k`'s functions as the driver does ([`lacuna::driver::CompiledCoKernel::new`]:
/// side by side), checking that every result is its function's.
fn compile_kernel(k: CoKernel) -> Compiled {
    let lacuna::driver::CompiledCoKernel {
        count,
        compute,
        one_pass,
    } = lacuna::driver::CompiledCoKernel::new(&k).expect("compiles");
    let names = |c: Option<&lacuna::target::CompiledKernel>| c.map(|c| c.name().to_string());
    let funcs = |f: Option<&lacuna::stage2::ir::Func>| f.map(|f| f.name.clone());
    assert_eq!(names(count.as_ref()), funcs(k.count.as_ref()));
    assert_eq!(compute.name(), k.compute.name);
    assert_eq!(names(one_pass.as_ref()), funcs(k.one_pass.as_ref()));
    Compiled {
        k,
        count,
        compute,
        one_pass,
        narrow: None,
    }
}

/// The result by the JIT, the stage-II interpreter and the reference interpreter; then by the
/// 32-bit-index variant (JIT and interpreter), on the same data narrowed.
fn run_all_compiled(
    c: &Compiled,
    inputs: &BTreeMap<String, Input>,
) -> Vec<BTreeMap<(usize, usize), f64>> {
    let fresh = c.k.bind(inputs, &BTreeMap::new()).expect("binds");
    let mut outs = compiled_outputs(c, &fresh);
    outs.insert(2, c.k.reference(&fresh, inputs).expect("reference runs"));
    if let Some(n) = &c.narrow {
        let mut narrowed = fresh.clone();
        let k = c.k.narrowed(&mut narrowed).expect("narrows");
        assert_eq!(k.as_ref(), Some(&n.k), "small data takes 32-bit indices");
        assert!(
            narrowed
                .buffers
                .values()
                .any(|a| a.dtype() == lacuna::ir::DType::I32),
            "index arrays converted"
        );
        outs.extend(compiled_outputs(n, &narrowed));
    }
    // Every result comes back in the storage of the declared encoding.
    let declared = c.k.assignment.output().encoding.as_ref();
    for o in &outs {
        if let (Output::Sparse(t), Some(enc)) = (o, declared) {
            assert_eq!(t.encoding(), enc, "result storage in the declared encoding");
            // Release builds check only the result's positions when assembling it: every
            // check holds (coordinates in bounds, sorted, unique).
            t.validate().expect("a valid result");
        }
    }
    outs.iter().map(sparse_output).collect()
}

/// The results of `c`'s compiled passes and of the stage-II interpreter on `fresh`; then of
/// its one-pass function, compiled (on zeroed and on reserved arrays) and interpreted.
fn compiled_outputs(c: &Compiled, fresh: &lacuna::stage1::Bindings) -> Vec<Output> {
    let mut jit = fresh.clone();
    c.k.run(&mut jit, &mut |pass, _, b| {
        let kernel = match pass {
            Pass::Count => c.count.as_ref().expect("count pass"),
            Pass::Compute => &c.compute,
        };
        // SAFETY: `CoKernel::bind` built `fresh` from checked inputs; the count pass sized the
        // compute pass's arrays.
        unsafe { kernel.run(b) }.map_err(|e| e.to_string())
    })
    .expect("jit runs");
    let mut interp = fresh.clone();
    c.k.run(&mut interp, &mut |_, f, b| {
        lacuna::stage2::interpret_func(f, b).map_err(|e| e.to_string())
    })
    .expect("interpreter runs (bounds checked)");
    let mut outs = vec![
        c.k.output(&mut jit).expect("jit output"),
        c.k.output(&mut interp).expect("interp output"),
    ];
    // The one-pass function, where the kernel has one, compiled and interpreted (bounds
    // checked: its arrays are sized by the operands' stored entries).
    if let Some(one) = &c.one_pass {
        let mut jit = fresh.clone();
        // SAFETY: as above; `run_one_pass` sizes the result's arrays by the operands' entries.
        let ran = c.k.run_one_pass(&mut jit, &mut |_, b| {
            unsafe { one.run(b) }.map_err(|e| e.to_string())
        });
        assert!(ran.expect("one pass runs"));
        outs.push(c.k.output(&mut jit).expect("one-pass output"));
        // With the result's arrays reserved, not zeroed (the driver's path).
        let mut jit = fresh.clone();
        // SAFETY: compiled machine code of the one-pass function.
        let ran = unsafe {
            c.k.run_one_pass_reserved(&mut jit, &mut |_, b| one.run(b).map_err(|e| e.to_string()))
        };
        assert!(ran.expect("one pass runs on reserved arrays"));
        outs.push(c.k.output(&mut jit).expect("reserved one-pass output"));
        let mut interp = fresh.clone();
        c.k.run_one_pass(&mut interp, &mut |f, b| {
            lacuna::stage2::interpret_func(f, b).map_err(|e| e.to_string())
        })
        .expect("one pass interpreted");
        outs.push(c.k.output(&mut interp).expect("one-pass interp output"));
    }
    outs
}

fn run_all(p: &Program, inputs: &BTreeMap<String, Input>) -> Vec<BTreeMap<(usize, usize), f64>> {
    run_all_compiled(&compiled(p), inputs)
}

/// Deterministic cases from a strategy (one compiled kernel serves them all).
fn cases<S: Strategy>(s: S, n: usize) -> Vec<S::Value> {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    (0..n)
        .map(|_| s.new_tree(&mut runner).expect("a case").current())
        .collect()
}

fn cases_count() -> usize {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

fn close(a: f64, b: f64, scale: f64) -> bool {
    (a - b).abs() <= TOL * scale.max(1.0)
}

/// Checks every target's result against the expected pattern and values.
fn check(got: &[BTreeMap<(usize, usize), f64>], want: &BTreeMap<(usize, usize), f64>) {
    let scale = want.values().fold(0.0f64, |m, v| m.max(v.abs()));
    for (t, g) in got.iter().enumerate() {
        let gp: Vec<_> = g.keys().collect();
        let wp: Vec<_> = want.keys().collect();
        assert_eq!(gp, wp, "target {t}: pattern");
        for (k, v) in g {
            assert!(
                close(*v, want[k], scale),
                "target {t} at {k:?}: {v} vs {}",
                want[k]
            );
        }
    }
    // The JIT and the stage-II interpreter run the same program: bit-identical.
    assert_eq!(got[0], got[1]);
}

fn transpose_allowed() -> Option<Coiteration> {
    Some(Coiteration {
        merge: Merge::TwoFinger,
        transpose: true,
    })
}

type Entries = BTreeMap<(usize, usize), f64>;

/// Entries of A and B over patterns `pa` and `pb` (values 1 and 7), as inputs, with their
/// sum (the union; an entry present in both holds the sum) and their element-wise product
/// (the intersection).
fn add_and_mul(
    shape: (usize, usize),
    pa: &Pattern,
    pb: &Pattern,
) -> (BTreeMap<String, Input>, Entries, Entries) {
    let (va, vb) = (values_for(pa, 1), values_for(pb, 7));
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(coo(shape, &va))),
        ("B".to_string(), Input::Coo(coo(shape, &vb))),
    ]);
    let mut sum = va.clone();
    for (k, v) in &vb {
        *sum.entry(*k).or_insert(0.0) += v;
    }
    let product = va
        .iter()
        .filter_map(|(k, a)| vb.get(k).map(|b| (*k, a * b)))
        .collect();
    (inputs, sum, product)
}

#[test]
fn spadd_and_spmul_match_the_dense_reference() {
    let all = cases(operands(), cases_count());
    let data: Vec<_> = all
        .iter()
        .map(|(m, n, pa, pb)| add_and_mul((*m, *n), pa, pb))
        .collect();
    let mut combos: Vec<[&str; 3]> = Vec::new();
    for fa in INPUT_FORMATS {
        for fb in INPUT_FORMATS {
            combos.push([fa, fb, "csr"]);
        }
    }
    for fc in OUTPUT_FORMATS {
        combos.push(["csr", "coo", fc]);
    }
    for [fa, fb, fc] in combos {
        let formats = [("A", fa), ("B", fb), ("C", fc)];
        let add = compiled(&kernel("spadd", &formats, transpose_allowed()));
        let mul = compiled(&kernel("spmul", &formats, transpose_allowed()));
        for (inputs, sum, product) in &data {
            check(&run_all_compiled(&add, inputs), sum);
            check(&run_all_compiled(&mul, inputs), product);
        }
    }
}

/// SpAdd's result is the storage of C's encoding, array by array (MLIR's storage layout).
#[test]
fn sparse_results_are_stored_in_the_declared_encoding() {
    use lacuna::ir::encoding::Lvl;
    let a = coo(
        (3, 3),
        &[((0, 0), 1.0), ((0, 2), 2.0), ((2, 1), 3.0)].into(),
    );
    let b = coo((3, 3), &[((0, 2), 1.0), ((2, 0), 4.0)].into());
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(a)),
        ("B".to_string(), Input::Coo(b)),
    ]);
    let arrays = |fc: &str, target: Target| {
        let p = kernel("spadd", &[("C", fc)], transpose_allowed());
        let r = run_coiteration(&p, &inputs, &BTreeMap::new(), target, 1).expect("runs");
        let Output::Sparse(t) = &r.outputs["C"] else {
            panic!("{fc}: the result in its encoding's storage")
        };
        let get = |x: Option<&lacuna::ir::storage::IndexArray>| x.map(|a| a.to_u64_vec());
        let levels: Vec<_> = (0..2)
            .map(|l| (get(t.positions(Lvl(l))), get(t.coordinates(Lvl(l)))))
            .collect();
        (levels, t.values().to_f64_vec())
    };
    // C = [[1, 0, 3], [0, 0, 0], [4, 3, 0]].
    for target in [Target::Jit, Target::Interp, Target::InterpStage1] {
        let (l, v) = arrays("csr", target);
        assert_eq!(l[0], (None, None), "{target:?}");
        assert_eq!(l[1], (Some(vec![0, 2, 2, 4]), Some(vec![0, 2, 0, 1])));
        assert_eq!(v, vec![1.0, 3.0, 4.0, 3.0]);
        let (l, v) = arrays("csc", target);
        assert_eq!(l[1], (Some(vec![0, 2, 3, 4]), Some(vec![0, 2, 2, 0])));
        assert_eq!(v, vec![1.0, 4.0, 3.0, 3.0]);
        let (l, v) = arrays("dcsr", target);
        assert_eq!(l[0], (Some(vec![0, 2]), Some(vec![0, 2])));
        assert_eq!(l[1], (Some(vec![0, 2, 4]), Some(vec![0, 2, 0, 1])));
        assert_eq!(v, vec![1.0, 3.0, 4.0, 3.0]);
        let (l, v) = arrays("coo", target);
        assert_eq!(l[0].0, Some(vec![0, 4]));
        assert_eq!(v, vec![1.0, 3.0, 4.0, 3.0]);
    }
}

/// The entries a format stores for `entries` (blocked formats add their blocks' explicit
/// zeros and padding), summed per coordinate: what co-iteration sees of a blocked operand.
fn stored(
    entries: &BTreeMap<(usize, usize), f64>,
    shape: (usize, usize),
    fmt: &str,
) -> BTreeMap<(usize, usize), f64> {
    let enc = lacuna::ir::encoding::parse_format(fmt).expect("format");
    let t = lacuna::ir::storage::SparseTensor::from_coo(&coo(shape, entries), &enc)
        .unwrap_or_else(|e| panic!("{fmt}: {e}"));
    let c = t.to_coo();
    let mut m = BTreeMap::new();
    for e in 0..c.nnz() {
        *m.entry((c.coords[0][e], c.coords[1][e])).or_insert(0.0) +=
            c.values.get(e).expect("value").as_f64();
    }
    m
}

/// Blocked operands (BSR, ELL) are co-iterated through an unblocked copy: SpAdd and SpGEMM
/// against the dense model over the entries the blocked storage holds.
#[test]
fn blocked_operands_are_co_iterated() {
    let strategy = (
        operands(),
        1usize..7,
        prop::collection::vec(any::<bool>(), 49),
    );
    for ((m, n, pa, pb), l, bits) in cases(strategy, cases_count()) {
        let (va, vb) = (values_for(&pa, 1), values_for(&pb, 7));
        let width = (0..m)
            .map(|i| pa.iter().filter(|k| k.0 == i).count())
            .max()
            .unwrap_or(0)
            .max(1);
        for fa in [
            "bsr(2,2)".to_string(),
            "bsr(2,3)".into(),
            format!("ell({width})"),
        ] {
            let sa = stored(&va, (m, n), &fa);
            // SpAdd with B in CSR: the union of A's stored entries and B's.
            let mut sum = sa.clone();
            for (k, v) in &vb {
                *sum.entry(*k).or_insert(0.0) += v;
            }
            let inputs = BTreeMap::from([
                ("A".to_string(), Input::Coo(coo((m, n), &va))),
                ("B".to_string(), Input::Coo(coo((m, n), &vb))),
            ]);
            let add = kernel("spadd", &[("A", fa.as_str())], None);
            check(&run_all(&add, &inputs), &sum);
            // SpGEMM A (m×n, blocked) times B2 (n×l, CSR).
            let pb2 = pattern(n, l, &bits);
            let vb2 = values_for(&pb2, 5);
            let mut want: BTreeMap<(usize, usize), f64> = BTreeMap::new();
            for (&(i, k), a) in &sa {
                for (&(k2, j), b) in &vb2 {
                    if k == k2 {
                        *want.entry((i, j)).or_insert(0.0) += a * b;
                    }
                }
            }
            let inputs = BTreeMap::from([
                ("A".to_string(), Input::Coo(coo((m, n), &va))),
                ("B".to_string(), Input::Coo(coo((n, l), &vb2))),
            ]);
            let gemm = kernel("spgemm", &[("A", fa.as_str())], None);
            check(&run_all(&gemm, &inputs), &want);
        }
    }
}

/// Values with many distinct magnitudes, so that a different order of additions would show.
fn rough_values(p: &Pattern, seed: u64) -> BTreeMap<(usize, usize), f64> {
    p.iter()
        .enumerate()
        .map(|(e, &k)| {
            let x = (e as u64 + 1)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(seed);
            (
                k,
                ((x >> 11) as f64 / (1u64 << 53) as f64 - 0.3) * 10f64.powi((x % 7) as i32 - 3),
            )
        })
        .collect()
}

/// Inputs `A` (`shape_a`, pattern `pa`) and `B` (`shape_b`, pattern `pb`) with
/// [`rough_values`] from seeds `sa` and `sb`.
fn rough_pair(
    shape_a: (usize, usize),
    pa: &Pattern,
    sa: u64,
    shape_b: (usize, usize),
    pb: &Pattern,
    sb: u64,
) -> BTreeMap<String, Input> {
    BTreeMap::from([
        (
            "A".to_string(),
            Input::Coo(coo(shape_a, &rough_values(pa, sa))),
        ),
        (
            "B".to_string(),
            Input::Coo(coo(shape_b, &rough_values(pb, sb))),
        ),
    ])
}

/// `k` built for the JIT (its compiled functions) and for the stage-II interpreter.
struct Executables {
    jit: CoExecutable,
    interp: CoExecutable,
}

impl Executables {
    fn new(k: &CoKernel) -> Executables {
        Executables {
            jit: CoExecutable::new(k.clone(), Target::Jit).expect("compiles"),
            interp: CoExecutable::new(k.clone(), Target::Interp).expect("builds"),
        }
    }

    fn of(&self, target: Target) -> &CoExecutable {
        match target {
            Target::Jit => &self.jit,
            _ => &self.interp,
        }
    }

    /// One run of the executable for `target` on `inputs`, bound afresh.
    fn run(&self, inputs: &BTreeMap<String, Input>, threads: usize, target: Target) -> Output {
        let exe = self.of(target);
        run_once(
            exe,
            &exe.bind(inputs, &BTreeMap::new()).expect("binds"),
            inputs,
            threads,
        )
    }
}

/// One run of `exe` through the driver on a pool of `threads` workers, from a copy of `data`
/// (bound by `exe`, possibly with a result recycled).
fn run_once(
    exe: &CoExecutable,
    data: &CoData,
    inputs: &BTreeMap<String, Input>,
    threads: usize,
) -> Output {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    pool.install(|| exe.run(&mut data.clone(), inputs).expect("runs"))
}

/// Operands given as storage (`Input::Sparse`) bind exactly as their entries given as
/// coordinates do: stored as the kernel plans (CSR, at native or 32-bit widths) they are read
/// as stored, and moved when handed over (`bind_owned`); in another layout (CSC, DCSR, COO), as
/// a view, or with a blocked layout, they are stored anew. The narrow bindings
/// (`bind_narrow`, `bind_narrow_owned`) equal those `narrow_bindings` makes of the wide ones,
/// and `run_owned` gives the result of the interpreters on every target.
#[test]
fn stored_operands_bind_as_their_entries() {
    use lacuna::ir::encoding::parse_format;
    use lacuna::ir::storage::SparseTensor;
    let none = BTreeMap::new();
    let p = kernel("spadd", &[], None);
    let k = CoKernel::new(&p).expect("lowers");
    let thin = k.with_index(lacuna::ir::DType::I32).expect("lowers narrow");
    let exe = |k: &CoKernel, t: Target| CoExecutable::new(k.clone(), t).expect("builds");
    let targets = [Target::Jit, Target::Interp, Target::InterpStage1];
    let wide_exes: Vec<CoExecutable> = targets.iter().map(|&t| exe(&k, t)).collect();
    let thin_exes: Vec<CoExecutable> = targets.iter().map(|&t| exe(&thin, t)).collect();
    let formats = [
        "csr",
        "map = (i, j) -> (i : dense, j : compressed), posWidth = 32, crdWidth = 32",
        "map = (i, j) -> (i : dense, j : compressed), crdWidth = 16",
        "csc",
        "dcsr",
        "coo",
    ];
    for (m, n, pa, pb) in cases(operands(), 16) {
        let given = rough_pair((m, n), &pa, 3, (m, n), &pb, 4);
        let wide = k.bind(&given, &none).expect("binds");
        let mut narrow = wide.clone();
        assert!(k.narrow_bindings(&thin, &mut narrow), "small data narrows");
        let want = sparse_output(
            &wide_exes[1]
                .run(
                    &mut wide_exes[1].bind(&given, &none).expect("binds"),
                    &given,
                )
                .expect("runs"),
        );
        let store = |fmt: &str, frame: bool| -> BTreeMap<String, Input> {
            let enc = parse_format(fmt).expect("format");
            given
                .iter()
                .map(|(name, i)| {
                    let Input::Coo(c) = i else {
                        unreachable!("coordinates")
                    };
                    let t = if frame {
                        // A view of the operand inside a larger matrix with entries around it.
                        let mut big = c.clone();
                        big.shape = vec![m + 2, n + 1];
                        for (r, col) in [(m, 0), (m + 1, n), (0, n)] {
                            big.coords[0].push(r);
                            big.coords[1].push(col);
                            big.values = {
                                let mut v = big.values.to_f64_vec();
                                v.push(7.0);
                                ArrayData::F64(v)
                            };
                        }
                        SparseTensor::from_coo(&big, &enc)
                            .expect("stores")
                            .view(&[0, 0], &[m, n], &[1, 1])
                            .expect("views")
                    } else {
                        SparseTensor::from_coo(c, &enc).expect("stores")
                    };
                    (name.clone(), Input::Sparse(t))
                })
                .collect()
        };
        let mut cases: Vec<(String, BTreeMap<String, Input>)> = formats
            .iter()
            .map(|f| (f.to_string(), store(f, false)))
            .collect();
        cases.push(("a view of csr".into(), store("csr", true)));
        for (what, stored) in &cases {
            assert_eq!(k.bind(stored, &none).expect("binds"), wide, "{what}");
            assert_eq!(
                k.bind_owned(stored.clone(), &none).expect("binds"),
                wide,
                "{what}"
            );
            assert_eq!(
                k.bind_narrow(&thin, stored, &none).as_ref(),
                Some(&narrow),
                "{what}"
            );
            match k.bind_narrow_owned(&thin, stored.clone(), &none) {
                Ok(b) => assert_eq!(b.expect("binds"), narrow, "{what}"),
                Err(_) => panic!("{what}: small data binds narrow"),
            }
            for (w, t) in wide_exes.iter().zip(&thin_exes) {
                let got = w.run_owned(t, stored.clone(), &none).expect("runs");
                assert_eq!(sparse_output(&got), want, "{what} on {:?}", w.target());
            }
        }
    }
    // A blocked operand goes through its blocked storage, as its coordinates do.
    let bits: Vec<bool> = (0..61).map(|x| (x * 29 + 3) % 5 < 2).collect();
    let pa = pattern(6, 8, &bits);
    let given = rough_pair((6, 8), &pa, 5, (6, 8), &pa, 6);
    let bp = kernel("spadd", &[("A", "bsr(2,2)")], None);
    let bk = CoKernel::new(&bp).expect("lowers");
    let enc = parse_format("bsr(2,2)").expect("format");
    let mut stored = given.clone();
    let Input::Coo(a) = &given["A"] else {
        unreachable!()
    };
    stored.insert(
        "A".into(),
        Input::Sparse(SparseTensor::from_coo(a, &enc).expect("stores")),
    );
    assert_eq!(
        bk.bind(&stored, &none).expect("binds"),
        bk.bind(&given, &none).expect("binds")
    );
}

/// Data whose coordinates do not fit in `i32` keeps 64-bit indices: `narrowed` declines, the
/// driver runs the wide kernel correctly, and a kernel lowered for 32-bit indices refuses to
/// bind such data with a typed error instead of truncating.
#[test]
fn indices_beyond_i32_keep_64_bit_kernels() {
    let n = 3_000_000_000usize;
    let va = BTreeMap::from([((0, 5), 1.5), ((1, n - 1), 2.0)]);
    let vb = BTreeMap::from([((0, 5), 0.25), ((0, n - 2), -1.0)]);
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(coo((2, n), &va))),
        ("B".to_string(), Input::Coo(coo((2, n), &vb))),
    ]);
    let p = kernel("spadd", &[], None);
    let k = CoKernel::new(&p).expect("lowers");
    let mut b = k.bind(&inputs, &BTreeMap::new()).expect("binds");
    assert!(k.narrowed(&mut b).expect("checks").is_none());
    let e = k
        .with_index(lacuna::ir::DType::I32)
        .expect("lowers narrow")
        .bind(&inputs, &BTreeMap::new())
        .expect_err("does not fit");
    assert!(e.to_string().contains("32-bit"), "{e}");
    // Small coordinates, a result extent beyond i32: refused too (the result's coordinates
    // and a dense range's reach the extent).
    let small = BTreeMap::from([((0, 5), 1.5)]);
    let small_inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(coo((2, n), &small))),
        ("B".to_string(), Input::Coo(coo((2, n), &small))),
    ]);
    let e = k
        .with_index(lacuna::ir::DType::I32)
        .expect("lowers narrow")
        .bind(&small_inputs, &BTreeMap::new())
        .expect_err("the extent does not fit");
    assert!(
        e.to_string().contains("extent") && e.to_string().contains("32-bit"),
        "{e}"
    );
    let mut b = k.bind(&small_inputs, &BTreeMap::new()).expect("binds wide");
    assert!(k.narrowed(&mut b).expect("checks").is_none());
    let report = lacuna::driver::run_coiteration(&p, &inputs, &BTreeMap::new(), Target::Jit, 1)
        .expect("runs wide");
    let got = sparse_output(&report.outputs["C"]);
    let want = BTreeMap::from([((0, 5), 1.75), ((0, n - 2), -1.0), ((1, n - 1), 2.0)]);
    assert_eq!(got, want);
}

/// SpGEMM's rows run in parallel chunks (one workspace per chunk) and give bit-identical
/// results at 1 to 4 threads, also on skewed operands (one dense row, many empty rows); the
/// result matches the stage-II interpreter (serial) bit for bit.
#[test]
fn parallel_workspace_rows_are_bit_identical_to_serial() {
    let m = 64;
    let n = 48;
    let l = 40;
    let mut operands = Vec::new();
    // Skewed: row 5 dense, rows 0..m mostly empty; B dense in a few rows.
    let mut pa: Pattern = (0..l).map(|k| (5, k)).collect();
    pa.extend([(0, 1), (63, 39), (30, 7)]);
    let pb: Pattern = (0..l)
        .flat_map(|k| {
            (0..n)
                .filter(move |j| (j * 7 + k * 3) % 5 == 0)
                .map(move |j| (k, j))
        })
        .collect();
    operands.push((pa, pb));
    // Uniform random-ish patterns.
    let bits: Vec<bool> = (0..97).map(|x| (x * 37 + 11) % 7 < 2).collect();
    operands.push((pattern(m, l, &bits), pattern(l, n, &bits[3..])));
    // Empty A.
    operands.push((Pattern::new(), pattern(l, n, &bits)));
    for fc in ["csr", "dcsr", "csc"] {
        let p = kernel("spgemm", &[("C", fc)], None);
        let k = CoKernel::new(&p).expect("compiles");
        assert!(k.plan.parallel_rows, "spgemm rows run in chunks");
        let exes = Executables::new(&k);
        for (pa, pb) in &operands {
            let inputs = rough_pair((m, l), pa, 1, (l, n), pb, 2);
            let run = |threads, target| exes.run(&inputs, threads, target);
            let serial = run(1, Target::Jit);
            let interp = run(1, Target::Interp);
            let bits_of = |o: &Output| {
                let c = o.to_coo().expect("sparse");
                let v: Vec<u64> = c.values.to_f64_vec().iter().map(|x| x.to_bits()).collect();
                (c.coords, v)
            };
            // The same entries; values within 1e-12 relative (compiled code may fuse a
            // product and its sum: `CodegenOptions::fp_contract`).
            let ((sc, sv), (ic, iv)) = (bits_of(&serial), bits_of(&interp));
            assert_eq!(sc, ic, "{fc}: JIT vs interpreter, pattern");
            for (x, y) in sv.iter().zip(&iv) {
                let (x, y) = (f64::from_bits(*x), f64::from_bits(*y));
                assert!(
                    (x - y).abs() <= 1e-12 * y.abs().max(1.0),
                    "{fc}: JIT vs interpreter {x} vs {y}"
                );
            }
            for threads in 2..=4 {
                let par = run(threads, Target::Jit);
                assert_eq!(bits_of(&par), bits_of(&serial), "{fc}: {threads} threads");
                assert_eq!(par, serial, "{fc}: {threads} threads, same storage");
            }
        }
    }
}

/// SpAdd and SpMul on CSR operands run their one-pass function over chunks of rows at 2 to 4
/// threads, each chunk appending into its own region, moved together afterwards: bit-identical
/// to the serial one pass and equal to the interpreter, on skewed operands (one dense row, many
/// empty rows, a matrix without entries).
#[test]
fn chunked_one_pass_is_bit_identical_to_serial() {
    let (m, n) = (64, 48);
    let mut skewed: Pattern = (0..n).map(|k| (5, k)).collect();
    skewed.extend([(0, 1), (63, 47), (30, 7)]);
    let bits: Vec<bool> = (0..97).map(|x| (x * 37 + 11) % 7 < 2).collect();
    let uniform = pattern(m, n, &bits);
    let cases = [
        (skewed.clone(), uniform.clone()),
        (uniform.clone(), pattern(m, n, &bits[5..])),
        (Pattern::new(), uniform.clone()),
        (Pattern::new(), Pattern::new()),
    ];
    for name in ["spadd", "spmul"] {
        let mut kinds = Vec::new();
        for fa in ["csr", "coo", "dcsr"] {
            let p = kernel(name, &[("A", fa)], None);
            let k = CoKernel::new(&p).expect("compiles");
            if fa == "csr" {
                assert!(k.one_pass.is_some(), "{name}: a one-pass function");
            }
            if k.one_pass.is_none() {
                continue;
            }
            kinds.push(k.one_pass_row_positions().is_some());
            let exes = Executables::new(&k);
            for (pa, pb) in &cases {
                let inputs = rough_pair((m, n), pa, 1, (m, n), pb, 2);
                let run = |threads, target| exes.run(&inputs, threads, target);
                let serial = run(1, Target::Jit);
                let interp = run(1, Target::Interp);
                assert_eq!(serial, interp, "{name} {fa}: JIT vs interpreter");
                for threads in 2..=4 {
                    assert_eq!(
                        run(threads, Target::Jit),
                        serial,
                        "{name} {fa}: {threads} threads"
                    );
                }
            }
        }
        // CSR operands run in chunks (other storage has no one-pass function here).
        assert_eq!(kinds, [true], "{name}: CSR chunks");
    }
}

/// `CoKernel::merge_sample` counts the operands' entries and how often the merge changes
/// branch; the driver runs SpAdd's one-pass function in two chunks on two threads only for a
/// large merge that keeps switching (`one_pass_in_chunks`), and the result is the serial one.
#[test]
fn two_threads_chunk_only_large_switching_merges() {
    use lacuna::driver::{one_pass_in_chunks, ONE_PASS_CHUNK_MIN_ENTRIES};
    let p = kernel("spadd", &[], None);
    let k = CoKernel::new(&p).expect("compiles");
    // One row: A at 0 1 2 5, B at 2 3 4 6; merged A A AB B B A B, 4 changes in 7 coordinates.
    let a: Pattern = [0, 1, 2, 5].map(|j| (0, j)).into();
    let b: Pattern = [2, 3, 4, 6].map(|j| (0, j)).into();
    let fresh = k
        .bind(&rough_pair((1, 8), &a, 1, (1, 8), &b, 2), &BTreeMap::new())
        .expect("binds");
    let s = k.merge_sample(&fresh, 64, 0).expect("CSR operands");
    assert_eq!((s.entries, s.switches), (8, 4.0 / 7.0));
    // More samples than rows sample every row once.
    let s = k.merge_sample(&fresh, usize::MAX, 0).expect("CSR operands");
    assert_eq!((s.entries, s.switches), (8, 4.0 / 7.0));
    // Below the minimum it counts the entries and samples nothing.
    let s = k.merge_sample(&fresh, 64, 9).expect("CSR operands");
    assert_eq!((s.entries, s.switches), (8, 0.0));

    // A on even columns, B on odd ones: every coordinate switches.
    let (n, width) = (512usize, 160usize);
    let rows = |entries: i64| (entries as usize).div_ceil(width);
    let alternating = |m: usize, parity: usize| -> Pattern {
        (0..m)
            .flat_map(|i| (0..width / 2).map(move |j| (i, 2 * j + parity)))
            .collect()
    };
    let m = rows(ONE_PASS_CHUNK_MIN_ENTRIES) + 8;
    let (even, odd) = (alternating(m, 0), alternating(m, 1));
    let large = k
        .bind(
            &rough_pair((m, n), &even, 1, (m, n), &odd, 2),
            &BTreeMap::new(),
        )
        .expect("binds");
    let s = k.merge_sample(&large, 64, 0).expect("CSR operands");
    assert_eq!(s.entries, (m * width) as i64);
    assert!(s.switches > 0.99, "{s:?}");
    assert!(!one_pass_in_chunks(&k, &large, 1));
    assert!(one_pass_in_chunks(&k, &large, 2));
    assert!(one_pass_in_chunks(&k, &large, 3));
    // The same pattern twice: the merge never switches, memory binds it.
    let same = k
        .bind(
            &rough_pair((m, n), &even, 1, (m, n), &even, 2),
            &BTreeMap::new(),
        )
        .expect("binds");
    assert_eq!(k.merge_sample(&same, 64, 0).expect("CSR").switches, 0.0);
    assert!(!one_pass_in_chunks(&k, &same, 2));
    assert!(
        one_pass_in_chunks(&k, &same, 3),
        "above two threads, always"
    );
    // Switching, but too small to pay for a second thread.
    let m_small = rows(ONE_PASS_CHUNK_MIN_ENTRIES) - 8;
    let small = k
        .bind(
            &rough_pair(
                (m_small, n),
                &alternating(m_small, 0),
                1,
                (m_small, n),
                &alternating(m_small, 1),
                2,
            ),
            &BTreeMap::new(),
        )
        .expect("binds");
    assert!(!one_pass_in_chunks(&k, &small, 2));

    // Two chunks on two threads give the serial result, bit for bit.
    let exes = Executables::new(&k);
    let inputs = rough_pair((m, n), &even, 1, (m, n), &odd, 2);
    let serial = exes.run(&inputs, 1, Target::Jit);
    assert_eq!(exes.run(&inputs, 2, Target::Jit), serial);
    assert_eq!(serial.to_coo().expect("sparse").values.len(), m * width);
}

/// An executable runs only the data it bound itself (or narrowed to it): another
/// executable's data, even of the same kernel, gets a typed error and is left as it was, and
/// neither `narrow` nor `recycle` takes data they do not own.
#[test]
fn executables_refuse_data_bound_by_another() {
    let p = kernel("spadd", &[], None);
    let k = CoKernel::new(&p).expect("compiles");
    let wide = Executables::new(&k);
    let narrow = CoExecutable::new(
        k.with_index(lacuna::ir::DType::I32).expect("lowers"),
        Target::Jit,
    )
    .expect("compiles");
    let bits: Vec<bool> = (0..97).map(|x| (x * 37 + 11) % 7 < 2).collect();
    let inputs = rough_pair(
        (9, 7),
        &pattern(9, 7, &bits),
        1,
        (9, 7),
        &pattern(9, 7, &bits[4..]),
        2,
    );
    let want = wide.run(&inputs, 1, Target::Interp);
    let data = wide.jit.bind(&inputs, &BTreeMap::new()).expect("binds");
    for other in [&wide.interp, &narrow] {
        let mut d = data.clone();
        match other.run(&mut d, &inputs) {
            Err(DriverError::Coiter(CoiterError::Run { what, .. })) => {
                assert!(what.contains("bound for another kernel"), "{what}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(d.bindings(), data.bindings(), "refused data is unchanged");
    }
    // `narrow` hands data over only from the executable that bound it.
    let mut d = data.clone();
    assert!(
        !wide.interp.narrow(&narrow, &mut d),
        "not the interpreter's data"
    );
    assert!(
        !narrow.narrow(&wide.jit, &mut d),
        "not the narrow kernel's data"
    );
    assert_eq!(d.bindings(), data.bindings());
    assert!(wide.jit.narrow(&narrow, &mut d), "small data narrows");
    assert_eq!(run_once(&narrow, &d, &inputs, 1), want);
    assert!(
        wide.jit.run(&mut d.clone(), &inputs).is_err(),
        "handed over"
    );
    // `recycle` ignores another executable's data.
    let mut d = data.clone();
    wide.interp.recycle(&mut d, want.clone());
    assert_eq!(d.bindings(), data.bindings());
    assert_eq!(run_once(&wide.jit, &d, &inputs, 1), want);
}

/// A run handed the previous run's result (`CoKernel::recycle`, as `lacuna run --repeat` does)
/// writes into its storage and gives the same result as a run into fresh arrays: nothing of the
/// previous contents leaks, whether the previous result was larger or smaller, on every path
/// (the serial one pass, chunks at 3 threads, the two passes of the interpreter). A result
/// whose storage a clone shares, and a result of the wrong kind, are dropped.
#[test]
fn recycled_results_equal_fresh_ones() {
    let (m, n) = (40, 30);
    let bits: Vec<bool> = (0..200).map(|x| (x * 37 + 11) % 7 < 3).collect();
    let dense_row: Pattern = (0..n).map(|k| (3, k)).collect();
    let patterns = [
        (pattern(m, n, &bits), pattern(m, n, &bits[9..])),
        (dense_row.clone(), Pattern::new()),
        (Pattern::new(), Pattern::new()),
        (pattern(m, n, &bits[3..]), dense_row),
    ];
    for name in ["spadd", "spmul"] {
        let p = kernel(name, &[("A", "csr")], None);
        let k = CoKernel::new(&p).expect("compiles");
        let exes = Executables::new(&k);
        for (threads, target) in [(1, Target::Jit), (3, Target::Jit), (1, Target::Interp)] {
            let exe = exes.of(target);
            let mut previous: Option<Output> = None;
            for (round, (pa, pb)) in patterns.iter().chain(patterns.iter().rev()).enumerate() {
                let inputs = BTreeMap::from([
                    (
                        "A".to_string(),
                        Input::Coo(coo((m, n), &rough_values(pa, round as u64))),
                    ),
                    (
                        "B".to_string(),
                        Input::Coo(coo((m, n), &rough_values(pb, 9))),
                    ),
                ]);
                let fresh = exe.bind(&inputs, &BTreeMap::new()).expect("binds");
                let want = run_once(exe, &fresh, &inputs, threads);
                let mut data = fresh.clone();
                if let Some(prev) = previous.take() {
                    exe.recycle(&mut data, prev);
                }
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .expect("pool");
                let got = pool.install(|| exe.run(&mut data, &inputs)).expect("runs");
                assert_eq!(
                    got, want,
                    "{name} round {round}, {threads} threads, {target:?}"
                );
                previous = Some(got);
            }
            // Shared storage is not reused (the clone keeps its contents); a dense output is
            // not a sparse result's storage.
            let (pa, pb) = &patterns[0];
            let inputs = rough_pair((m, n), pa, 1, (m, n), pb, 2);
            let fresh = exe.bind(&inputs, &BTreeMap::new()).expect("binds");
            let kept = run_once(exe, &fresh, &inputs, threads);
            let result_arrays = |d: &CoData| {
                let mut names: Vec<&String> = d
                    .bindings()
                    .buffers
                    .keys()
                    .filter(|n| n.starts_with("C."))
                    .collect();
                names.sort();
                names.into_iter().cloned().collect::<Vec<_>>()
            };
            let bound = result_arrays(&fresh);
            let mut data = fresh.clone();
            exe.recycle(&mut data, kept.clone());
            assert_eq!(result_arrays(&data), bound, "shared storage is dropped");
            let mut unshared = fresh.clone();
            exe.recycle(&mut unshared, run_once(exe, &fresh, &inputs, threads));
            assert_eq!(
                result_arrays(&unshared).len(),
                3,
                "{:?}",
                result_arrays(&unshared)
            );
            exe.recycle(
                &mut data,
                Output::Dense(lacuna::ir::DenseArray {
                    shape: vec![m, n],
                    data: lacuna::ir::ArrayData::F64(vec![0.0; m * n]),
                }),
            );
            assert_eq!(result_arrays(&data), bound, "a dense output is dropped");
            assert_eq!(run_once(exe, &data, &inputs, threads), kept);
        }
    }
}

/// `run_coiteration` with several repeats keeps the operands bound across runs and restores
/// everything else: the last run's result equals a single run's, for a sparse result (written
/// into the recycled storage) and a dense one, at one and three threads, compiled and
/// interpreted.
#[test]
fn repeated_runs_equal_one_run() {
    let (m, n) = (40, 30);
    let bits: Vec<bool> = (0..200).map(|x| (x * 37 + 11) % 7 < 3).collect();
    let inputs = rough_pair(
        (m, n),
        &pattern(m, n, &bits),
        1,
        (m, n),
        &pattern(m, n, &bits[5..]),
        2,
    );
    let programs = [
        kernel("spadd", &[("A", "csr")], None),
        matrix_kernel("dense_sum", "C[i, j] = A[i, j] + B[i, j]", "F64", "None"),
    ];
    for p in &programs {
        for (threads, target) in [(1, Target::Jit), (3, Target::Jit), (1, Target::Interp)] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("pool");
            let run = |repeat| {
                pool.install(|| run_coiteration(p, &inputs, &BTreeMap::new(), target, repeat))
                    .expect("runs")
            };
            let (once, four) = (run(1), run(4));
            assert_eq!(four.run_seconds.len(), 4);
            assert_eq!(
                four.outputs, once.outputs,
                "{}: {threads} threads, {target:?}",
                p.name
            );
        }
    }
}

#[test]
fn spgemm_and_masked_spgemm_match_the_dense_reference() {
    let strategy = (
        operands(),
        1usize..7,
        prop::collection::vec(any::<bool>(), 49),
        prop::collection::vec(any::<bool>(), 49),
    );
    let mut data = Vec::new();
    for ((m, l, pa, _), n, b_bits, mask_bits) in cases(strategy, cases_count()) {
        let pb = pattern(l, n, &b_bits);
        let pm = pattern(m, n, &mask_bits);
        let (va, vb, vm) = (values_for(&pa, 3), values_for(&pb, 5), values_for(&pm, 11));
        // Structural product: an entry wherever some k meets, even if the sum cancels.
        let mut want: BTreeMap<(usize, usize), f64> = BTreeMap::new();
        for (&(i, k), a) in &va {
            for (&(k2, j), b) in &vb {
                if k == k2 {
                    *want.entry((i, j)).or_insert(0.0) += a * b;
                }
            }
        }
        let masked: BTreeMap<_, _> = want
            .iter()
            .filter_map(|(k, v)| vm.get(k).map(|mv| (*k, mv * v)))
            .collect();
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(coo((m, l), &va))),
            ("B".to_string(), Input::Coo(coo((l, n), &vb))),
            ("M".to_string(), Input::Coo(coo((m, n), &vm))),
        ]);
        data.push((inputs, want, masked));
    }
    for fa in ["csr", "dcsr", "coo"] {
        for fb in ["csr", "dcsr", "coo"] {
            let k = compiled(&kernel("spgemm", &[("A", fa), ("B", fb)], None));
            for (inputs, want, _) in &data {
                check(&run_all_compiled(&k, inputs), want);
            }
        }
    }
    for fc in OUTPUT_FORMATS {
        let k = compiled(&kernel("spgemm", &[("C", fc)], None));
        for (inputs, want, _) in &data {
            check(&run_all_compiled(&k, inputs), want);
        }
    }
    for fm in ["csr", "dcsr", "coo"] {
        let k = compiled(&kernel("masked_spgemm", &[("M", fm)], None));
        for (inputs, _, masked) in &data {
            check(&run_all_compiled(&k, inputs), masked);
        }
    }
}

#[test]
fn spmspv_and_galloping_intersections() {
    let pa: Pattern = (0..6)
        .flat_map(|i| {
            (0..9)
                .filter(move |j| (i + j) % 3 != 0)
                .map(move |j| (i, j))
        })
        .collect();
    let va = values_for(&pa, 2);
    let x: BTreeMap<usize, f64> = [(1, 2.0), (4, -1.0), (8, 0.5)].into();
    let xt = CooTensor {
        shape: vec![9],
        coords: vec![x.keys().copied().collect()],
        values: ArrayData::F64(x.values().copied().collect()),
    };
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(coo((6, 9), &va))),
        ("x".to_string(), Input::Coo(xt)),
    ]);
    let p = kernel("spmspv", &[], None);
    let r = run_coiteration(&p, &inputs, &BTreeMap::new(), Target::Jit, 1).expect("runs");
    let y = &r.outputs["y"].to_coo().expect("sparse y");
    let mut want: BTreeMap<usize, f64> = BTreeMap::new();
    for (&(i, j), a) in &va {
        if let Some(xv) = x.get(&j) {
            *want.entry(i).or_insert(0.0) += a * xv;
        }
    }
    let got: BTreeMap<usize, f64> = (0..y.nnz())
        .map(|e| (y.coords[0][e], y.values.get(e).unwrap().as_f64()))
        .collect();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (k, v) in &want {
        assert!(close(got[k], *v, 4.0));
    }
    // Galloping gives the two-finger result on an intersection of a dense-ish and a sparse row.
    let pb: Pattern = [(0, 8), (1, 1), (2, 5), (5, 0), (5, 8)].into();
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(coo((6, 9), &va))),
        (
            "B".to_string(),
            Input::Coo(coo((6, 9), &values_for(&pb, 4))),
        ),
    ]);
    let two = run_all(&kernel("spmul", &[], None), &inputs);
    let gallop = run_all(
        &kernel(
            "spmul",
            &[],
            Some(Coiteration {
                merge: Merge::Galloping,
                transpose: false,
            }),
        ),
        &inputs,
    );
    assert_eq!(two, gallop);
    assert!(!two[0].is_empty());
}

#[test]
fn golden_merge_lattices() {
    let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    let (a, b, c) = (
        || TExpr::Access(0),
        || TExpr::Access(1),
        || TExpr::Access(2),
    );
    let bin = |op, x, y| TExpr::Binary(op, Box::new(x), Box::new(y));
    let render = |e: &TExpr| lattice::build(e, &|_| true).render(&names, &[]);
    assert_eq!(render(&bin(BinOp::Mul, a(), b())), "[a b] (a * b)\n");
    assert_eq!(
        render(&bin(BinOp::Add, a(), b())),
        "[a b] (a + b)\n[a] a\n[b] b\n"
    );
    assert_eq!(
        render(&bin(BinOp::Add, bin(BinOp::Mul, a(), b()), c())),
        "[a b c] ((a * b) + c)\n[a b] (a * b)\n[c] c\n"
    );
    assert_eq!(
        render(&bin(BinOp::Mul, bin(BinOp::Add, a(), b()), c())),
        "[a b c] ((a + b) * c)\n[a c] (a * c)\n[b c] (b * c)\n"
    );
    // a - b: b alone is negated. A dense operand (c) in a union covers the dense range: only
    // the points holding it are kept.
    assert_eq!(
        render(&bin(BinOp::Sub, a(), b())),
        "[a b] (a - b)\n[a] a\n[b] -b\n"
    );
    let dense_c = lattice::build(&bin(BinOp::Add, a(), c()), &|t| t != 2).render(&names, &[]);
    assert_eq!(dense_c, "[a U] (a + c)\n[U] c\n");
    // ... and multiplying by it is located, not iterated.
    let times_c = lattice::build(&bin(BinOp::Mul, a(), c()), &|t| t != 2).render(&names, &[]);
    assert_eq!(times_c, "[a] (a * c)\n");
}

#[test]
fn galloping_on_a_union_is_an_error() {
    let p = kernel(
        "spadd",
        &[],
        Some(Coiteration {
            merge: Merge::Galloping,
            transpose: false,
        }),
    );
    let err = CoKernel::new(&p).expect_err("galloping on a union");
    assert!(
        matches!(err, CoiterError::GallopingUnion { ref var } if var == "j"),
        "{err}"
    );
}

#[test]
fn inconsistent_level_orders_need_permission_to_transpose() {
    let p = kernel("spadd", &[("A", "csr"), ("B", "csc")], None);
    let err = CoKernel::new(&p).expect_err("no order respects CSR and CSC");
    assert!(
        matches!(err, CoiterError::InconsistentLevelOrder { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("`A` (i → j)") && err.to_string().contains("`B` (j → i)"),
        "{err}"
    );
    let k = CoKernel::new(&kernel(
        "spadd",
        &[("A", "csr"), ("B", "csc")],
        transpose_allowed(),
    ))
    .expect("transposed copy");
    assert_eq!(k.plan.transposed, vec![false, false, true]);
}

#[test]
fn shape_mismatch_and_missing_inputs_are_typed_errors() {
    let p = kernel("spadd", &[], None);
    let a = coo((3, 4), &[((0, 1), 1.0)].into());
    let b = coo((4, 3), &[((1, 0), 1.0)].into());
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(a.clone())),
        ("B".to_string(), Input::Coo(b)),
    ]);
    let err = match run_coiteration(&p, &inputs, &BTreeMap::new(), Target::Jit, 1) {
        Err(e) => e,
        Ok(_) => panic!("a shape mismatch must be an error"),
    };
    assert!(
        matches!(err, DriverError::Coiter(CoiterError::Input { ref buffer, .. }) if buffer == "B"),
        "{err}"
    );
    let inputs = BTreeMap::from([("A".to_string(), Input::Coo(a))]);
    let err = match run_coiteration(&p, &inputs, &BTreeMap::new(), Target::Jit, 1) {
        Err(e) => e,
        Ok(_) => panic!("a missing input must be an error"),
    };
    assert!(err.to_string().contains("`B`"), "{err}");
}

#[test]
fn i8_operands_out_of_range_are_typed_errors() {
    let p = kernel_text(
        r#"(
    version: 1, name: "add8", params: ["n"],
    axes: [(name: "I", kind: DenseFixed(n: "n"))],
    buffers: [
        (name: "A", axes: ["I"], dtype: I8, encoding: Some("map = (d0) -> (d0 : compressed)")),
        (name: "B", axes: ["I"], dtype: I8, encoding: Some("map = (d0) -> (d0 : compressed)")),
        (name: "C", axes: ["I"], dtype: I8, role: Output, encoding: Some("map = (d0) -> (d0 : compressed)")),
    ],
    body: [Iter((name: "add8", axes: ["I"], kinds: "S", vars: ["i"], body: [Store("C[i] = A[i] + B[i]")]))],
)"#,
    );
    let vec_input = |entries: &[(usize, i64)]| {
        Input::Coo(CooTensor {
            shape: vec![4],
            coords: vec![entries.iter().map(|e| e.0).collect()],
            values: ArrayData::I64(entries.iter().map(|e| e.1).collect()),
        })
    };
    // In range: i8 arithmetic wraps (100 + 100 = -56), as `i8::wrapping_add`.
    let inputs = BTreeMap::from([
        ("A".to_string(), vec_input(&[(0, 100), (2, -128)])),
        ("B".to_string(), vec_input(&[(0, 100), (3, 127)])),
    ]);
    for target in [Target::Jit, Target::Interp, Target::InterpStage1] {
        let r = run_coiteration(&p, &inputs, &BTreeMap::new(), target, 1).expect("runs");
        let c = r.outputs["C"].to_coo().expect("sparse");
        assert_eq!(c.coords[0], vec![0, 2, 3], "{target:?}");
        assert_eq!(c.values, ArrayData::I8(vec![-56, -128, 127]), "{target:?}");
    }
    let inputs = BTreeMap::from([
        ("A".to_string(), vec_input(&[(0, 100), (2, 300)])),
        ("B".to_string(), vec_input(&[(0, 1)])),
    ]);
    let err = match run_coiteration(&p, &inputs, &BTreeMap::new(), Target::Jit, 1) {
        Err(e) => e,
        Ok(_) => panic!("300 does not fit i8"),
    };
    assert!(
        matches!(err, DriverError::Coiter(CoiterError::Input { ref buffer, .. }) if buffer == "A"),
        "{err}"
    );
    assert!(err.to_string().contains("300"), "{err}");
}

#[test]
fn sparse_iteration_pipeline_refuses_coiteration_kernels() {
    let p = kernel("spadd", &[], None);
    let err = lacuna::stage2::lower(&p, &Default::default(), &mut |_, _| {}).expect_err("refused");
    assert!(err.to_string().contains("co-iterates"), "{err}");
}

/// A kernel from RON text (test-local kernels over A, B → C, all CSR unless given).
fn kernel_text(text: &str) -> Program {
    parse_kernel_with_formats(text, Path::new("test.ron"), &[]).expect("kernel loads")
}

fn matrix_kernel(name: &str, store: &str, b_dtype: &str, c_encoding: &str) -> Program {
    kernel_text(&format!(
        r#"(
    version: 1, name: "{name}", params: ["m", "n"],
    axes: [(name: "I", kind: DenseFixed(n: "m")), (name: "J", kind: DenseFixed(n: "n"))],
    buffers: [
        (name: "A", axes: ["I", "J"], dtype: F64, encoding: Some("csr")),
        (name: "B", axes: ["I", "J"], dtype: {b_dtype}, encoding: Some("csr")),
        (name: "C", axes: ["I", "J"], dtype: F64, role: Output, encoding: {c_encoding}),
    ],
    body: [Iter((name: "{name}", axes: ["I", "J"], kinds: "SS", vars: ["i", "j"], body: [Store("{store}")]))],
)"#
    ))
}

/// MLIR's three documented `binary` examples, and `unary`, `select` and a `select` inside a
/// union, against models of MLIR's semantics written out entry by entry.
#[test]
fn semiring_operations_follow_mlir_semantics() {
    let all = cases(operands(), cases_count());
    let triangular = compiled(&kernel("mlir_triangular", &[], None));
    let difference = compiled(&kernel("mlir_set_difference", &[], None));
    let unary_present = compiled(&matrix_kernel(
        "scale",
        "C[i, j] = unary(A[i, j], x * 2.0, empty)",
        "F64",
        "Some(\"csr\")",
    ));
    let unary_absent = compiled(&matrix_kernel(
        "fill",
        "C[i, j] = unary(A[i, j], x + 1.0, 5.0) + B[i, j]",
        "F64",
        "Some(\"csr\")",
    ));
    let keep = compiled(&matrix_kernel(
        "keep_positive",
        "C[i, j] = select(A[i, j], x > 0.0) + B[i, j]",
        "F64",
        "Some(\"dcsr\")",
    ));
    for (m, n, pa, pb) in &all {
        let (va, vb) = (values_for(pa, 1), values_for(pb, 7));
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(coo((*m, *n), &va))),
            ("B".to_string(), Input::Coo(coo((*m, *n), &vb))),
        ]);
        // A + B in the upper triangle, A - B in the lower; A alone as is; B alone as B or -B.
        let mut want = BTreeMap::new();
        for i in 0..*m {
            for j in 0..*n {
                let upper = j >= i;
                let v = match (va.get(&(i, j)), vb.get(&(i, j))) {
                    (Some(a), Some(b)) => Some(if upper { a + b } else { a - b }),
                    (Some(a), None) => Some(*a),
                    (None, Some(b)) => Some(if upper { *b } else { -b }),
                    (None, None) => None,
                };
                if let Some(v) = v {
                    want.insert((i, j), v);
                }
            }
        }
        check(&run_all_compiled(&triangular, &inputs), &want);
        // A where B has no entry, B of type i32.
        let b_i32 = CooTensor {
            values: ArrayData::I32(vb.values().map(|v| (v * 4.0) as i32).collect()),
            ..coo((*m, *n), &vb)
        };
        let mixed = BTreeMap::from([
            ("A".to_string(), Input::Coo(coo((*m, *n), &va))),
            ("B".to_string(), Input::Coo(b_i32)),
        ]);
        let want: BTreeMap<_, _> = va
            .iter()
            .filter(|(k, _)| !vb.contains_key(k))
            .map(|(k, v)| (*k, *v))
            .collect();
        check(&run_all_compiled(&difference, &mixed), &want);
        // unary present: 2x on A's entries.
        let want: BTreeMap<_, _> = va.iter().map(|(k, v)| (*k, 2.0 * v)).collect();
        check(&run_all_compiled(&unary_present, &inputs), &want);
        // unary with an absent region: every coordinate has an entry.
        let mut want = BTreeMap::new();
        for i in 0..*m {
            for j in 0..*n {
                let u = va.get(&(i, j)).map_or(5.0, |a| a + 1.0);
                want.insert((i, j), u + vb.get(&(i, j)).copied().unwrap_or(0.0));
            }
        }
        check(&run_all_compiled(&unary_absent, &inputs), &want);
        // select keeps A's positive entries; `+ B` is a union with what select kept.
        let mut want: BTreeMap<(usize, usize), f64> = va
            .iter()
            .filter(|(_, v)| **v > 0.0)
            .map(|(k, v)| (*k, *v))
            .collect();
        for (k, b) in &vb {
            *want.entry(*k).or_insert(0.0) += b;
        }
        check(&run_all_compiled(&keep, &inputs), &want);
    }
}

#[test]
fn mlir_is_equal_on_sparse_vectors() {
    let k = compiled(&kernel("mlir_is_equal", &[], None));
    let vec_input = |entries: &[(usize, f64)]| {
        Input::Coo(CooTensor {
            shape: vec![10],
            coords: vec![entries.iter().map(|e| e.0).collect()],
            values: ArrayData::F64(entries.iter().map(|e| e.1).collect()),
        })
    };
    let a = [(0, 1.0), (2, 2.0), (5, 3.0), (9, 4.0)];
    let b = [(2, 2.0), (3, 7.0), (5, -3.0), (9, 4.0)];
    let inputs = BTreeMap::from([
        ("A".to_string(), vec_input(&a)),
        ("B".to_string(), vec_input(&b)),
    ]);
    let fresh = k.k.bind(&inputs, &BTreeMap::new()).expect("binds");
    let mut jit = fresh.clone();
    k.k.run(&mut jit, &mut |pass, _, b| {
        let kernel = match pass {
            Pass::Count => k.count.as_ref().expect("count"),
            Pass::Compute => &k.compute,
        };
        // SAFETY: as in `compiled_outputs`.
        unsafe { kernel.run(b) }.map_err(|e| e.to_string())
    })
    .expect("runs");
    for out in [
        k.k.output(&mut jit).expect("output"),
        k.k.reference(&fresh, &inputs).expect("reference"),
    ] {
        let c = out.to_coo().expect("sparse");
        // Intersection {2, 5, 9}: equal, different, equal (i8 flags, as MLIR's).
        assert_eq!(c.coords[0], vec![2, 5, 9]);
        assert_eq!(c.values, ArrayData::I8(vec![1, 0, 1]));
    }
}

#[test]
fn custom_reductions_start_from_their_identity() {
    let product = |c_encoding: &str| {
        kernel_text(&format!(
            r#"(
    version: 1, name: "row_product", params: ["m", "n"],
    axes: [(name: "I", kind: DenseFixed(n: "m")), (name: "J", kind: DenseFixed(n: "n"))],
    buffers: [
        (name: "A", axes: ["I", "J"], dtype: F64, encoding: Some("csr")),
        (name: "y", axes: ["I"], dtype: F64, role: Output, encoding: {c_encoding}),
    ],
    body: [Iter((name: "row_product", axes: ["I", "J"], kinds: "SR", vars: ["i", "j"],
        body: [Store("y[i] = reduce(A[i, j], x * y, 1.0)")], coiteration: Some(()),))],
)"#
        ))
    };
    let a: BTreeMap<(usize, usize), f64> = [((0, 1), 2.0), ((0, 3), -1.5), ((2, 0), 4.0)].into();
    let inputs = BTreeMap::from([("A".to_string(), Input::Coo(coo((4, 5), &a)))]);
    for target in [Target::Jit, Target::Interp, Target::InterpStage1] {
        // Dense result: rows without entries hold the identity.
        let r =
            run_coiteration(&product("None"), &inputs, &BTreeMap::new(), target, 1).expect("runs");
        let Output::Dense(d) = &r.outputs["y"] else {
            panic!("dense y")
        };
        assert_eq!(
            d.data,
            ArrayData::F64(vec![-3.0, 1.0, 4.0, 1.0]),
            "{}",
            target.name()
        );
        // Sparse result: only rows with entries.
        let enc = "Some(\"map = (d0) -> (d0 : compressed)\")";
        let r = run_coiteration(&product(enc), &inputs, &BTreeMap::new(), target, 1).expect("runs");
        let c = r.outputs["y"].to_coo().expect("sparse y");
        assert_eq!(c.coords[0], vec![0, 2], "{}", target.name());
        assert_eq!(
            c.values,
            ArrayData::F64(vec![-3.0, 4.0]),
            "{}",
            target.name()
        );
    }
}

#[test]
fn binary_regions_must_agree_with_each_other_and_the_result() {
    let err = |store: &str, c_dtype: &str| {
        let text = format!(
            r#"(
    version: 1, name: "bad", params: ["m", "n"],
    axes: [(name: "I", kind: DenseFixed(n: "m")), (name: "J", kind: DenseFixed(n: "n"))],
    buffers: [
        (name: "A", axes: ["I", "J"], dtype: F64, encoding: Some("csr")),
        (name: "B", axes: ["I", "J"], dtype: F64, encoding: Some("csr")),
        (name: "C", axes: ["I", "J"], dtype: {c_dtype}, role: Output, encoding: Some("csr")),
    ],
    body: [Iter((name: "bad", axes: ["I", "J"], kinds: "SS", vars: ["i", "j"], body: [Store("{store}")]))],
)"#
        );
        match parse_kernel_with_formats(&text, Path::new("bad.ron"), &[]) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("`{store}` into {c_dtype} must be rejected"),
        }
    };
    let e = err(
        "C[i, j] = binary(A[i, j], B[i, j], x + y, identity, i32(y))",
        "F64",
    );
    assert!(
        e.contains("region `overlap` gives f64 but region `right` gives i32"),
        "{e}"
    );
    let e = err(
        "C[i, j] = binary(A[i, j], B[i, j], x + y, identity, identity)",
        "I32",
    );
    assert!(e.contains("storing into `C` (i32)"), "{e}");
    let e = err(
        "C[i, j] = binary(A[i, j], B[i, j], empty, empty, empty)",
        "F64",
    );
    assert!(e.contains("every region empty"), "{e}");
    let e = err("C[i, j] = unary(A[i, j], x, x + 1.0)", "F64");
    assert!(e.contains("absent region has no `x`"), "{e}");
    let e = err("C[i, j] = select(A[i, j], x + 1.0)", "F64");
    assert!(e.contains("predicate must be bool"), "{e}");
}

/// The encoded-format kernels of `examples/formats` (SpMV, SpMM, SDDMM, TTV, TTM, MTTKRP), run
/// by the sparse-iteration pipeline and, forced, by co-iteration: two independent lowerings
/// must agree, on every 2-D and 3-D format.
#[test]
fn coiteration_agrees_with_the_sparse_iteration_pipeline_on_format_kernels() {
    use lacuna::ir::DenseArray;
    let size = |p: &str| match p {
        "m" => 5,
        "n" => 4,
        "p" => 6,
        _ => 3,
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/formats");
    let mut ran = 0;
    for (name, formats) in [
        ("spmv", vec!["csr", "csc", "dcsr", "coo"]),
        ("spmm", vec!["csr", "dcsc", "coo"]),
        ("sddmm", vec!["csr", "coo"]),
        ("ttv", vec!["csf(3)", "coo3", "bcoo"]),
        ("ttm", vec!["csf(3)", "coo3"]),
        ("mttkrp", vec!["csf(3)", "coo3", "bcoo"]),
    ] {
        let path = dir.join(format!("{name}.ron"));
        let text = std::fs::read_to_string(&path).expect("example");
        let base = Program::from_ron(&text).expect("parses");
        let encoded: Vec<String> = base
            .buffers
            .iter()
            .filter(|b| b.encoding.is_some() && b.role == lacuna::stage1::Role::Input)
            .map(|b| b.name.clone())
            .collect();
        // Inputs: a sparse tensor with a third of its coordinates stored, dense arrays.
        let mut inputs = BTreeMap::new();
        for b in base
            .buffers
            .iter()
            .filter(|b| b.role == lacuna::stage1::Role::Input)
        {
            let shape: Vec<usize> = b
                .axes
                .iter()
                .map(|a| match base.axis(a).expect("axis").kind.coord_extent() {
                    lacuna::stage1::Size::Param(p) => size(p),
                    lacuna::stage1::Size::Const(c) => *c as usize,
                })
                .collect();
            let len: usize = shape.iter().product();
            let value = |e: usize| ((e * 7919 + b.name.len() * 31) % 13) as f64 / 4.0 - 1.5;
            if b.encoding.is_some() {
                let stored: Vec<usize> = (0..len).filter(|e| (e * 5 + 1) % 3 == 0).collect();
                let mut coords = vec![Vec::new(); shape.len()];
                for &e in &stored {
                    let mut rest = e;
                    for d in (0..shape.len()).rev() {
                        coords[d].push(rest % shape[d]);
                        rest /= shape[d];
                    }
                }
                let values = ArrayData::F64(stored.iter().map(|&e| value(e)).collect());
                inputs.insert(
                    b.name.clone(),
                    Input::Coo(CooTensor {
                        shape,
                        coords,
                        values,
                    }),
                );
            } else {
                let data = ArrayData::F64((0..len).map(value).collect());
                inputs.insert(b.name.clone(), Input::Dense(DenseArray { shape, data }));
            }
        }
        for fmt in formats {
            let with: Vec<(String, String)> = encoded
                .iter()
                .map(|b| (b.clone(), fmt.to_string()))
                .collect();
            let p = lacuna::driver::load_kernel_with_formats(&path, &with).expect("loads");
            let want = lacuna::driver::run_kernel(&p, &inputs, &BTreeMap::new(), Target::Jit, 1)
                .unwrap_or_else(|e| panic!("{name}/{fmt}: {e}"));
            let mut forced = base.clone();
            for b in forced
                .buffers
                .iter_mut()
                .filter(|b| encoded.contains(&b.name))
            {
                b.encoding = Some(fmt.to_string());
            }
            let Stmt::Iter(it) = &mut forced.body[0] else {
                panic!("one iteration")
            };
            it.coiteration = Some(Coiteration::default());
            for target in [Target::Jit, Target::Interp] {
                let got = run_coiteration(&forced, &inputs, &BTreeMap::new(), target, 1)
                    .unwrap_or_else(|e| panic!("{name}/{fmt}/{}: {e}", target.name()));
                for (out, w) in &want.outputs {
                    let g = &got.outputs[out];
                    let (gv, wv) = match (g, w) {
                        (Output::Dense(g), Output::Dense(w)) => {
                            (g.data.to_f64_vec(), w.data.to_f64_vec())
                        }
                        (g, w) => {
                            let (Some(g), Some(w)) = (g.to_coo(), w.to_coo()) else {
                                panic!("{name}/{fmt}: {out} kinds differ")
                            };
                            assert_eq!(g.coords, w.coords, "{name}/{fmt}: pattern of {out}");
                            (g.values.to_f64_vec(), w.values.to_f64_vec())
                        }
                    };
                    assert_eq!(gv.len(), wv.len(), "{name}/{fmt}: {out}");
                    let scale = wv.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                    for (x, y) in gv.iter().zip(&wv) {
                        assert!(
                            close(*x, *y, scale),
                            "{name}/{fmt}/{}: {out}: {x} vs {y}",
                            target.name()
                        );
                    }
                }
                ran += 1;
            }
        }
    }
    assert_eq!(ran, 34);
}

/// n:m operands (`2:4`, `1:4`): an n:m pair of levels is iterated as one level (coordinate =
/// block * m + the stored offset). Its padding slots are stored zeros, hence entries of a
/// union; densified, results equal the dense reference, and the three targets agree.
#[test]
fn n_of_m_operands_are_co_iterated() {
    let cases = cases(
        (
            1usize..6,
            1usize..4,
            prop::collection::vec(any::<u8>(), 40),
            operands(),
        ),
        cases_count(),
    );
    for (m, blocks, picks, (_, _, _, _)) in cases {
        let n = blocks * 4;
        for (fmt, per_block) in [("2:4", 2usize), ("1:4", 1)] {
            // At most `per_block` entries per block of 4.
            let mut pa = Pattern::new();
            for i in 0..m {
                for b in 0..blocks {
                    let pick = picks[(i * blocks + b) % picks.len()] as usize;
                    for s in 0..(pick % (per_block + 1)) {
                        pa.insert((i, b * 4 + (pick / 3 + s * 2) % 4));
                    }
                }
            }
            let pb: Pattern = (0..m)
                .flat_map(|i| {
                    (0..n)
                        .filter(move |j| (i + j) % 3 == 0)
                        .map(move |j| (i, j))
                })
                .collect();
            let (va, vb) = (values_for(&pa, 2), values_for(&pb, 3));
            let inputs = BTreeMap::from([
                ("A".to_string(), Input::Coo(coo((m, n), &va))),
                ("B".to_string(), Input::Coo(coo((m, n), &vb))),
            ]);
            for (kernel, op) in [("spadd", BinOp::Add), ("spmul", BinOp::Mul)] {
                let k = compiled(&kernel_named(kernel, &[("A", fmt)]));
                let got = run_all_compiled(&k, &inputs);
                assert_eq!(got[0], got[1], "{fmt} {kernel}: JIT vs interpreter");
                assert_eq!(
                    got[0].keys().collect::<Vec<_>>(),
                    got[2].keys().collect::<Vec<_>>(),
                    "{fmt} {kernel}: pattern vs reference"
                );
                for i in 0..m {
                    for j in 0..n {
                        let (a, b) = (
                            va.get(&(i, j)).copied().unwrap_or(0.0),
                            vb.get(&(i, j)).copied().unwrap_or(0.0),
                        );
                        let want = if op == BinOp::Add { a + b } else { a * b };
                        let have = got[0].get(&(i, j)).copied().unwrap_or(0.0);
                        assert!(
                            close(have, want, 4.0),
                            "{fmt} {kernel} ({i}, {j}): {have} vs {want}"
                        );
                    }
                }
                // Every stored entry of A is an entry of the union, and of the product where B has one.
                for key in va.keys() {
                    assert!(
                        op == BinOp::Mul || got[0].contains_key(key),
                        "{fmt} {kernel}: {key:?} missing"
                    );
                }
            }
        }
    }
}

fn kernel_named(name: &str, formats: &[(&str, &str)]) -> Program {
    kernel(name, formats, None)
}

/// `lacuna run --threads N` on SpGEMM and SpAdd of a real matrix with itself writes the same
/// file at 1 to 4 threads (same entries, same bits).
#[test]
fn cli_threads_give_identical_results() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    let data = root.join("tests/data/west0479.mtx");
    for kernel in ["spgemm", "spadd"] {
        let mut first: Option<Vec<u8>> = None;
        for threads in 1..=4 {
            let out = dir.path().join(format!("{kernel}_{threads}.mtx"));
            let r = std::process::Command::new(env!("CARGO_BIN_EXE_lacuna"))
                .current_dir(root)
                .args(["run", &format!("examples/{kernel}.ron"), "--threads"])
                .arg(threads.to_string())
                .arg("--input")
                .arg(format!("A={}", data.display()))
                .arg("--input")
                .arg(format!("B={}", data.display()))
                .arg("--out")
                .arg(format!("C={}", out.display()))
                .output()
                .expect("lacuna runs");
            assert!(
                r.status.success(),
                "{kernel} --threads {threads}: {}",
                String::from_utf8_lossy(&r.stderr)
            );
            let bytes = std::fs::read(&out).expect("result written");
            assert!(bytes.len() > 100, "{kernel}: a non-trivial result");
            match &first {
                None => first = Some(bytes),
                Some(f) => assert!(f == &bytes, "{kernel}: --threads {threads} differs from 1"),
            }
        }
    }
}

/// Which kernels get a one-pass function: a CSR result of two variables whose entries each sit
/// at a stored operand entry (sums, products), not one with more variables (SpGEMM's `k`) or
/// a row stored sparsely (DCSR operands).
#[test]
fn one_pass_plans() {
    let has = |p: &Program| CoKernel::new(p).expect("compiles").one_pass.is_some();
    assert!(has(&kernel("spadd", &[], None)));
    assert!(has(&kernel("spmul", &[], None)));
    assert!(has(&kernel("spadd", &[("A", "csc"), ("B", "csc")], None)));
    assert!(!has(&kernel("spgemm", &[], None)));
    assert!(!has(&kernel(
        "spadd",
        &[("A", "dcsr"), ("B", "dcsr")],
        None
    )));
    // The one-pass function writes positions row by row: its row loop is serial.
    let k = CoKernel::new(&kernel("spadd", &[], None)).expect("compiles");
    let text = lacuna::stage2::print_func(k.one_pass.as_ref().expect("one pass"));
    assert!(!text.contains("parallel for"), "{text}");
    assert!(text.contains("C.pos[i + 1] = out.q"), "{text}");
}

/// A dense (unencoded) operand is indexed by its extents without checks: `bind` refuses data
/// of another length, and entries outside the shape (which would land on another cell).
#[test]
fn dense_operands_must_match_their_shape() {
    // SpMSpV with `x` dense.
    let mut p = kernel_text(
        r#"(
    version: 1, name: "spmv_coiter", params: ["m", "n"],
    axes: [(name: "I", kind: DenseFixed(n: "m")), (name: "J", kind: DenseFixed(n: "n"))],
    buffers: [
        (name: "A", axes: ["I", "J"], dtype: F64, encoding: Some("csr")),
        (name: "B", axes: ["J"], dtype: F64),
        (name: "C", axes: ["I"], dtype: F64, role: Output, encoding: Some("map = (d0) -> (d0 : compressed)")),
    ],
    body: [Iter((name: "spmv_coiter", axes: ["I", "J"], kinds: "SR", vars: ["i", "j"], body: [Store("C[i] = C[i] + A[i, j] * B[j]")]))],
)"#,
    );
    let Stmt::Iter(it) = &mut p.body[0] else {
        panic!("one iteration")
    };
    it.coiteration = Some(Coiteration::default());
    let k = CoKernel::new(&p).expect("compiles");
    let a = coo((2, 3), &BTreeMap::from([((0, 1), 2.0), ((1, 2), 3.0)]));
    let with_b = |b: Input| {
        BTreeMap::from([
            ("A".to_string(), Input::Coo(a.clone())),
            ("B".to_string(), b),
        ])
    };
    let full = DenseArray {
        shape: vec![3],
        data: ArrayData::F64(vec![1.0, 2.0, 3.0]),
    };
    k.bind(&with_b(Input::Dense(full.clone())), &BTreeMap::new())
        .expect("binds");
    let short = DenseArray {
        data: ArrayData::F64(vec![1.0]),
        ..full
    };
    let e = k
        .bind(&with_b(Input::Dense(short)), &BTreeMap::new())
        .expect_err("1 value for 3");
    assert!(
        e.to_string().contains("values has 1 elements, expected 3"),
        "{e}"
    );
    let outside = CooTensor {
        shape: vec![3],
        coords: vec![vec![5]],
        values: ArrayData::F64(vec![1.0]),
    };
    let e = k
        .bind(&with_b(Input::Coo(outside)), &BTreeMap::new())
        .expect_err("column 5 of 3");
    assert!(
        e.to_string()
            .contains("coordinate 5 out of range in dimension 0 (extent 3)"),
        "{e}"
    );
}

/// Rows whose operands hold the same coordinates (up to `EQUAL_SEGMENT_MAX`) take straight
/// vector loops with masked tails instead of the merge (`equal_segments`): SpAdd and SpMul of
/// two operands, and a sum of three, over rows of 0 to 40 entries that share their pattern,
/// that share only their length (one coordinate moved), and that differ, with CSR, DCSR and
/// COO operands and CSR, dense-row and dense results; every path (JIT, interpreter,
/// reference, one pass, 32-bit indices) equals the dense reference. The vector loops are
/// vectorized (LLVM reports no loop it could not vectorize) and only the compute passes have
/// them.
#[test]
fn equal_segments_take_vector_loops() {
    use lacuna::stage2::coiter::lower::EQUAL_SEGMENT_MAX;
    let (m, n) = (48usize, 64usize);
    // Row i holds i % 41 coordinates, spread over the columns.
    let shared: Pattern = (0..m)
        .flat_map(|i| (0..i % 41).map(move |k| (i, (k * 3 + i) % n)))
        .collect();
    // The same lengths, one coordinate of every third row moved to a free column.
    let moved: Pattern = (0..m)
        .flat_map(|i| {
            let row: Vec<usize> = shared
                .iter()
                .filter(|(r, _)| *r == i)
                .map(|&(_, c)| c)
                .collect();
            let free = (0..n).find(|c| !row.contains(c));
            let len = row.len();
            row.into_iter().enumerate().map(move |(k, c)| match free {
                Some(f) if i % 3 == 0 && k + 1 == len => (i, f),
                _ => (i, c),
            })
        })
        .collect();
    assert_eq!(moved.len(), shared.len(), "one length per row");
    assert!(shared
        .iter()
        .any(|&(i, _)| i % 41 > EQUAL_SEGMENT_MAX as usize));
    let bits: Vec<bool> = (0..89).map(|x| (x * 29 + 3) % 5 < 2).collect();
    let other = pattern(m, n, &bits);
    let pairs = [
        (shared.clone(), shared.clone()),
        (shared.clone(), moved.clone()),
        (shared.clone(), other.clone()),
    ];
    for (fa, fb) in [("csr", "csr"), ("dcsr", "csr"), ("coo", "coo")] {
        for fc in ["csr", "map = (i, j) -> (i : dense, j : dense)"] {
            let formats = [("A", fa), ("B", fb), ("C", fc)];
            let add = compiled(&kernel("spadd", &formats, transpose_allowed()));
            let mul = compiled(&kernel("spmul", &formats, transpose_allowed()));
            for c in [&add, &mul] {
                let printed = |f: &lacuna::stage2::Func| lacuna::stage2::print_func(f);
                assert!(printed(&c.k.compute).contains(".eq.len"), "{fa} {fb} {fc}");
                if let Some(count) = &c.k.count {
                    assert!(
                        !printed(count).contains(".eq.len"),
                        "no vector loops counting"
                    );
                }
                let kernels = [Some(&c.compute), c.one_pass.as_ref()];
                for k in kernels.into_iter().flatten() {
                    assert!(
                        !k.diagnostics().iter().any(|d| d.contains("vectoriz")),
                        "{fa} {fb} {fc}: {:?}",
                        k.diagnostics()
                    );
                }
            }
            for (pa, pb) in &pairs {
                let (inputs, sum, product) = add_and_mul((m, n), pa, pb);
                let dense = fc.contains("dense, j : dense");
                let full = |want: &BTreeMap<(usize, usize), f64>| {
                    if !dense {
                        return want.clone();
                    }
                    (0..m)
                        .flat_map(|i| (0..n).map(move |j| (i, j)))
                        .map(|k| (k, want.get(&k).copied().unwrap_or(0.0)))
                        .collect()
                };
                check(&run_all_compiled(&add, &inputs), &full(&sum));
                check(&run_all_compiled(&mul, &inputs), &full(&product));
            }
        }
    }
    // Three operands: the vector path needs all three alike.
    let add3 = compiled(&kernel_text(
        r#"(
    version: 1, name: "add3", params: ["m", "n"],
    axes: [(name: "I", kind: DenseFixed(n: "m")), (name: "J", kind: DenseFixed(n: "n"))],
    buffers: [
        (name: "A", axes: ["I", "J"], dtype: F64, encoding: Some("csr")),
        (name: "B", axes: ["I", "J"], dtype: F64, encoding: Some("csr")),
        (name: "D", axes: ["I", "J"], dtype: F64, encoding: Some("csr")),
        (name: "C", axes: ["I", "J"], dtype: F64, role: Output, encoding: Some("csr")),
    ],
    body: [Iter((name: "add3", axes: ["I", "J"], kinds: "SS", vars: ["i", "j"], body: [Store("C[i, j] = A[i, j] + B[i, j] * 2.0 + D[i, j]")]))],
)"#,
    ));
    assert!(lacuna::stage2::print_func(&add3.k.compute).contains(".eq.len"));
    for (pb, pd) in [(&shared, &shared), (&shared, &moved), (&moved, &other)] {
        let (va, vb, vd) = (values_for(&shared, 1), values_for(pb, 7), values_for(pd, 3));
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(coo((m, n), &va))),
            ("B".to_string(), Input::Coo(coo((m, n), &vb))),
            ("D".to_string(), Input::Coo(coo((m, n), &vd))),
        ]);
        let mut sum = va.clone();
        for (k, v) in &vb {
            *sum.entry(*k).or_insert(0.0) += v * 2.0;
        }
        for (k, v) in &vd {
            *sum.entry(*k).or_insert(0.0) += v;
        }
        check(&run_all_compiled(&add3, &inputs), &sum);
    }
    // Without them (the JIT's choice on hosts without vector mask registers, where masked
    // lanes are emulated): the merge alone, in both index widths, the same results.
    let formats = [("A", "csr"), ("B", "csr"), ("C", "csr")];
    let add = CoKernel::new(&kernel("spadd", &formats, transpose_allowed())).expect("lowers");
    let plain = add.with_equal_segments(false).expect("lowers");
    assert!(!plain.plan.equal_segments);
    let narrow = plain
        .with_index(lacuna::ir::DType::I32)
        .expect("lowers narrow");
    assert!(!narrow.plan.equal_segments, "kept by the narrowing");
    for k in [&plain, &narrow] {
        assert!(!lacuna::stage2::print_func(&k.compute).contains(".eq.len"));
    }
    let mut c = compile_kernel(plain);
    c.narrow = Some(Box::new(compile_kernel(narrow)));
    for (pa, pb) in &pairs {
        let (inputs, sum, _) = add_and_mul((m, n), pa, pb);
        check(&run_all_compiled(&c, &inputs), &sum);
    }
    let masks = lacuna::target::host_has_vector_masks();
    let exe = CoExecutable::new(add.clone(), Target::Jit).expect("compiles");
    assert_eq!(exe.kernel().plan.equal_segments, masks);
    let interp = CoExecutable::new(add, Target::Interp).expect("an interpreter");
    assert!(
        interp.kernel().plan.equal_segments,
        "the plan, where nothing is compiled"
    );
}

/// The one-pass function tries blocks of `ROW_BLOCK` rows at once where the operands store
/// the same coordinates in every row of the block (`row_blocks`): SpAdd and SpMul over 200
/// rows (three whole blocks and a partial one) of 0 to 22 entries, with operands that share
/// the pattern, that differ in one coordinate of one row (same lengths), whose rows of one
/// block differ in length but not in total (also where the block's coordinates, read in
/// order, are the same), and that differ everywhere; every path (JIT,
/// interpreter, reference, one pass, 32-bit indices), with the blocks and without, equals the
/// dense reference, and so does the one-pass function run as two chunks of rows split inside
/// a block (the second appending from where the first ended). Only the one-pass function has
/// the blocks, and its loops vectorize.
#[test]
fn row_blocks_compute_blocks_of_equal_rows() {
    use lacuna::stage2::coiter::lower::ROW_BLOCK;
    let (m, n) = (200usize, 96usize);
    assert!(m as i64 > 3 * ROW_BLOCK && m as i64 % ROW_BLOCK != 0);
    let row = |i: usize| -> Vec<usize> { (0..(i * 7) % 23).map(|k| (k * 5 + i) % n).collect() };
    let shared: Pattern = (0..m)
        .flat_map(|i| row(i).into_iter().map(move |c| (i, c)))
        .collect();
    let free = |r: &Pattern, i: usize| (0..n).find(|&c| !r.contains(&(i, c))).expect("room");
    // One coordinate of row 70 moved to a free column.
    let mut moved = shared.clone();
    let last = *moved
        .range((70, 0)..(71, 0))
        .last()
        .expect("row 70 holds entries");
    moved.remove(&last);
    moved.insert((70, free(&shared, 70)));
    // Row 130 one entry shorter and row 131 one longer: the block's total is the same.
    let mut shifted = shared.clone();
    let last = *shifted
        .range((130, 0)..(131, 0))
        .last()
        .expect("row 130 holds entries");
    shifted.remove(&last);
    shifted.insert((131, free(&shared, 131)));
    assert_eq!(shifted.len(), shared.len());
    // Rows 140 and 141 split one run of coordinates differently: [10, 20 | 30] and
    // [10 | 20, 30] (the block's coordinates, read in order, are the same).
    let resplit = |cut: usize| -> Pattern {
        let mut p: Pattern = shared
            .iter()
            .filter(|(i, _)| !(140..142).contains(i))
            .copied()
            .collect();
        p.extend(
            [10, 20, 30]
                .iter()
                .enumerate()
                .map(|(k, &c)| (140 + usize::from(k >= cut), c)),
        );
        p
    };
    let bits: Vec<bool> = (0..89).map(|x| (x * 29 + 3) % 5 < 2).collect();
    let other = pattern(m, n, &bits);
    let pairs = [
        (shared.clone(), shared.clone()),
        (shared.clone(), moved.clone()),
        (shifted.clone(), shared.clone()),
        (resplit(2), resplit(1)),
        (shared.clone(), other.clone()),
        (Pattern::new(), Pattern::new()),
    ];
    let formats = [("A", "csr"), ("B", "csr"), ("C", "csr")];
    for name in ["spadd", "spmul"] {
        let with = compiled(&kernel(name, &formats, transpose_allowed()));
        let printed = |f: &lacuna::stage2::Func| lacuna::stage2::print_func(f);
        let one = with.k.one_pass.as_ref().expect("a one-pass function");
        assert!(printed(one).contains(".blk.done"), "{name}: blocks of rows");
        assert!(
            !printed(&with.k.compute).contains(".blk."),
            "{name}: not in rows' passes"
        );
        let compiled_one = with.one_pass.as_ref().expect("compiled");
        assert!(
            !compiled_one
                .diagnostics()
                .iter()
                .any(|d| d.contains("vectoriz")),
            "{name}: {:?}",
            compiled_one.diagnostics()
        );
        let k = with.k.with_row_blocks(false).expect("lowers");
        assert!(!printed(k.one_pass.as_ref().expect("one pass")).contains(".blk."));
        let narrow = k.with_index(lacuna::ir::DType::I32).expect("lowers narrow");
        assert!(!narrow.plan.row_blocks, "kept by the narrowing");
        let mut without = compile_kernel(k);
        without.narrow = Some(Box::new(compile_kernel(narrow)));
        for (pa, pb) in &pairs {
            let (inputs, sum, product) = add_and_mul((m, n), pa, pb);
            let want = if name == "spadd" { &sum } else { &product };
            check(&run_all_compiled(&with, &inputs), want);
            check(&run_all_compiled(&without, &inputs), want);
            // Two chunks of rows, [0, 100) and [100, m), the second from the first's end.
            let fresh = with.k.bind(&inputs, &BTreeMap::new()).expect("binds");
            let (lo, hi) = lacuna::stage2::coiter::lower::row_range_params("C");
            let q0 = lacuna::stage2::coiter::lower::one_pass_start_param("C");
            let two_chunks =
                |b: &mut lacuna::stage1::Bindings,
                 run: &mut dyn FnMut(&mut lacuna::stage1::Bindings) -> Result<(), String>|
                 -> Result<(), String> {
                    for (start, end) in [(0, 100), (100, m as i64)] {
                        let at = b.buffers["C.pos"]
                            .get(start as usize)
                            .expect("pos")
                            .as_i64();
                        b.params.insert(lo.clone(), start);
                        b.params.insert(hi.clone(), end);
                        b.params.insert(q0.clone(), at);
                        run(b)?;
                    }
                    Ok(())
                };
            let mut jit = fresh.clone();
            let ran = with.k.run_one_pass(&mut jit, &mut |_, b| {
                // SAFETY: compiled from `with.k`, on what it bound; the arrays are sized by
                // the operands' entries and each chunk appends within them.
                two_chunks(b, &mut |b| {
                    unsafe { compiled_one.run(b) }.map_err(|e| e.to_string())
                })
            });
            assert!(ran.expect("runs in two chunks"));
            let mut interp = fresh.clone();
            let ran = with.k.run_one_pass(&mut interp, &mut |f, b| {
                two_chunks(b, &mut |b| {
                    lacuna::stage2::interpret_func(f, b).map_err(|e| e.to_string())
                })
            });
            assert!(ran.expect("interpreted in two chunks"));
            let outs =
                [&mut jit, &mut interp].map(|b| sparse_output(&with.k.output(b).expect("output")));
            check(&outs, want);
        }
    }
}

/// Side-by-side compilation of no functions gives no results, and of one function the same
/// kernel as compiling it alone.
#[test]
fn side_by_side_compiles_each_function_once() {
    let opts = lacuna::target::CodegenOptions::default();
    assert!(lacuna::target::compile_side_by_side(&[], &opts).is_empty());
    let k = CoKernel::new(&kernel("spadd", &[], None)).expect("lowers");
    let alone = lacuna::target::compile(&k.compute, &opts).expect("compiles");
    let out = lacuna::target::compile_side_by_side(&[&k.compute, &k.compute], &opts);
    assert_eq!(out.len(), 2);
    for c in out {
        let c = c.expect("compiles");
        assert_eq!(c.name(), alone.name());
        assert_eq!(c.llvm_ir(), alone.llvm_ir(), "the same module either way");
    }
}
