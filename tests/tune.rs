//! The autotuner end to end: template points compute what the kernel computes, failing
//! candidates are recorded and the run goes on, a killed run resumes without losing or
//! repeating a record, and the best record replays.

use lacuna::driver::{load_input, load_kernel, run_kernel_scheduled, Target};
use lacuna::schedule::ScheduleFile;
use lacuna::stage1::Input;
use lacuna::tuning::db::{Database, Record, Status};
use lacuna::tuning::{KernelTemplate, Template, TemplateOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_lacuna");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn lacuna(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("runs")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A dense B (n × k) for SpMM on `tests/data/1138_bus.mtx`.
fn dense_b(dir: &Path, k: usize) -> PathBuf {
    let path = dir.join(format!("B{k}.npy"));
    ok(&lacuna(&[
        "gen-dense",
        "--shape",
        &format!("1138,{k}"),
        "--seed",
        "3",
        "--out",
        path.to_str().expect("utf-8"),
    ]));
    path
}

fn matrix() -> String {
    root()
        .join("tests/data/1138_bus.mtx")
        .to_string_lossy()
        .into_owned()
}

fn spmm() -> String {
    root()
        .join("examples/spmm.ron")
        .to_string_lossy()
        .into_owned()
}

fn max_rel_diff(a: &Input, b: &lacuna::stage1::Output) -> f64 {
    let a = match a {
        Input::Dense(d) => d.data.to_f64_vec(),
        Input::Coo(c) => c.values.to_f64_vec(),
        Input::Sparse(t) => t.values().to_f64_vec(),
    };
    let b = b.values().to_f64_vec();
    assert_eq!(a.len(), b.len());
    let scale = a.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs() / scale)
        .fold(0.0, f64::max)
}

/// Every point of the SpMM and SDDMM templates (format decompositions, tiles, hoisting,
/// unrolling, vectors, parallel rows) and of SpMV's (formats, rows' entries serial, vector or
/// masked, parallel rows) either is refused by a primitive or computes the unscheduled
/// kernel's result (relative tolerance 1e-12: vector lanes reassociate sums).
#[test]
fn every_template_point_computes_the_kernel() {
    let mut checked = 0;
    for (kernel, k) in [("spmm", 8usize), ("sddmm", 8), ("spmv", 1)] {
        let p = load_kernel(&root().join(format!("examples/{kernel}.ron"))).expect("kernel");
        let sparse = if kernel == "sddmm" { "S" } else { "A" };
        let mut inputs = BTreeMap::new();
        inputs.insert(
            sparse.to_string(),
            load_input(&root().join("tests/data/west0479.mtx")).expect("matrix"),
        );
        let n = 479;
        let dense = |rows: usize, cols: usize, seed: u64| {
            Input::Dense(lacuna::ir::DenseArray {
                shape: vec![rows, cols],
                data: lacuna::ir::ArrayData::F64(
                    (0..rows * cols)
                        .map(|i| ((i as u64 * 2654435761 + seed) % 1000) as f64 / 500.0 - 1.0)
                        .collect(),
                ),
            })
        };
        if kernel == "spmv" {
            let Input::Dense(x) = dense(n, 1, 3) else {
                unreachable!("dense")
            };
            inputs.insert(
                "x".into(),
                Input::Dense(lacuna::ir::DenseArray {
                    shape: vec![n],
                    data: x.data,
                }),
            );
        } else if kernel == "spmm" {
            inputs.insert("B".into(), dense(n, k, 1));
        } else {
            inputs.insert("X".into(), dense(n, k, 1));
            inputs.insert("W".into(), dense(n, k, 2));
        }
        let params = BTreeMap::new();
        let reference =
            run_kernel_scheduled(&p, None, &inputs, &params, Target::Interp, 1).expect("reference");
        let b = lacuna::stage1::bind_with(&p, &inputs, &params, Default::default()).expect("binds");
        let stats = lacuna::tuning::coo_stats(&inputs[sparse].coo().expect("a sparse matrix"));
        let t = KernelTemplate::new(&p, &b.params, stats.as_ref(), &TemplateOptions::default());
        let space = t.space();
        assert!(
            space.decisions.iter().any(|d| d.name == "format"),
            "{space:?}"
        );
        let own = if kernel == "spmv" { "entries" } else { "tile" };
        assert!(space.decisions.iter().any(|d| d.name == own), "{space:?}");
        // A deterministic sample of the space (every 7th point; SpMV's smaller space whole)
        // keeps the test short.
        let step = if kernel == "spmv" { 1 } else { 7 };
        let mut valid = 0;
        for i in (0..space.size()).step_by(step) {
            let point = space.point(i);
            let trace = match t.trace(&point) {
                Ok(trace) => trace,
                // Refused by a primitive (e.g. a vectorized loop that carries a dependence).
                Err(_) => continue,
            };
            valid += 1;
            let file = ScheduleFile {
                version: 1,
                kernel: kernel.into(),
                trace,
            };
            let got = run_kernel_scheduled(&p, Some(&file), &inputs, &params, Target::Jit, 1)
                .unwrap_or_else(|e| panic!("{kernel} {:?}: {e}", space.labels(&point)));
            for (name, want) in &reference.outputs {
                let want = match want {
                    lacuna::stage1::Output::Dense(d) => Input::Dense(d.clone()),
                    other => Input::Coo(other.to_coo().expect("sparse")),
                };
                let d = max_rel_diff(&want, &got.outputs[name]);
                assert!(
                    d <= 1e-12,
                    "{kernel} {:?}: {name} differs by {d}",
                    space.labels(&point)
                );
            }
            checked += 1;
        }
        assert!(
            valid >= 8,
            "{kernel}: only {valid} sampled points are schedules"
        );
    }
    assert!(checked > 20);
}

/// The choices of a template's `format` decision (none without one).
fn format_choices(t: &KernelTemplate) -> Vec<String> {
    t.space()
        .decisions
        .iter()
        .find(|d| d.name == "format")
        .map(|d| d.choices.clone())
        .unwrap_or_default()
}

/// The `Parallel` loops of a template point's trace.
fn parallel_loops(trace: &[lacuna::schedule::Instruction]) -> Vec<&str> {
    trace
        .iter()
        .filter_map(|inst| match inst {
            lacuna::schedule::Instruction::Parallel { r#loop } => Some(r#loop.as_str()),
            _ => None,
        })
        .collect()
}

/// Runs `kernel` scheduled by `trace` with the JIT at 1 and 3 threads and checks its result
/// `out` against `want` (relative 1e-12).
#[allow(clippy::too_many_arguments)]
fn assert_point_computes(
    p: &lacuna::stage1::Program,
    kernel: &str,
    trace: Vec<lacuna::schedule::Instruction>,
    inputs: &BTreeMap<String, Input>,
    params: &BTreeMap<String, i64>,
    out: &str,
    want: &Input,
    what: &str,
) {
    let file = ScheduleFile {
        version: 1,
        kernel: kernel.into(),
        trace,
    };
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        let got = pool
            .install(|| run_kernel_scheduled(p, Some(&file), inputs, params, Target::Jit, 1))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let d = max_rel_diff(want, &got.outputs[out]);
        assert!(d <= 1e-12, "{what}, {threads} threads: differs by {d}");
    }
}

/// SpMV's inputs for matrix `a` (an `x` of `n` values from `x(j)`) and the stage-II
/// interpreter's `y` for them, as an input to compare results with.
fn spmv_inputs_and_reference(
    p: &lacuna::stage1::Program,
    a: &lacuna::ir::CooTensor,
    x: impl Fn(usize) -> f64,
) -> (BTreeMap<String, Input>, Input) {
    let n = a.shape[1];
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(a.clone())),
        (
            "x".to_string(),
            Input::Dense(lacuna::ir::DenseArray {
                shape: vec![n],
                data: lacuna::ir::ArrayData::F64((0..n).map(x).collect()),
            }),
        ),
    ]);
    let reference = run_kernel_scheduled(p, None, &inputs, &BTreeMap::new(), Target::Interp, 1)
        .expect("reference");
    let want = Input::Dense(match &reference.outputs["y"] {
        lacuna::stage1::Output::Dense(d) => d.clone(),
        other => panic!("{other:?}"),
    });
    (inputs, want)
}

/// SpMV's template also tries the formats whose rows run as vector lanes: sliced ELL on any
/// matrix, DIA on a stencil (not on a matrix with more diagonals than it stores). Their points
/// compute the kernel; with a lanes format, rows walked one at a time (`entries`) are refused.
#[test]
fn spmv_template_tries_lanes_formats() {
    use lacuna::tuning::template::LANES_FORMATS;
    // The built-in schedule's formats.
    assert_eq!(
        LANES_FORMATS,
        [lacuna::driver::SPMV_SELL, lacuna::driver::SPMV_DIA]
    );
    let p = load_kernel(&root().join("examples/spmv.ron")).expect("kernel");
    let (m, n) = (301, 305);
    let mut entries = Vec::new();
    for i in 0..m {
        for off in [-17i64, -1, 0, 1, 17] {
            let j = i as i64 + off;
            if (0..n as i64).contains(&j) {
                entries.push((i, j as usize, ((i * 5 + j as usize) % 11) as f64 - 5.0));
            }
        }
    }
    let coo = lacuna::ir::CooTensor {
        shape: vec![m, n],
        coords: vec![
            entries.iter().map(|e| e.0).collect(),
            entries.iter().map(|e| e.1).collect(),
        ],
        values: lacuna::ir::ArrayData::F64(entries.iter().map(|e| e.2).collect()),
    };
    let (inputs, want) = spmv_inputs_and_reference(&p, &coo, |j| j as f64 / 7.0 - 3.0);
    let params = BTreeMap::new();
    // A point's trace, compiled and run (at 1 and 3 threads), computes the interpreter's `y`.
    let computes_y = |trace, what: &str| {
        assert_point_computes(&p, "spmv", trace, &inputs, &params, "y", &want, what);
    };
    let b = lacuna::stage1::bind_with(&p, &inputs, &params, Default::default()).expect("binds");
    let stats = lacuna::tuning::coo_stats(&coo);
    let t = KernelTemplate::new(&p, &b.params, stats.as_ref(), &TemplateOptions::default());
    let space = t.space();
    let formats = &format_choices(&t);
    assert!(!formats.is_empty(), "a format decision");
    for term in LANES_FORMATS {
        assert!(formats.iter().any(|f| f == term), "{term}: {formats:?}");
    }
    let mut lanes_points = 0;
    for i in 0..space.size() {
        let point = space.point(i);
        let labels = space.labels(&point);
        if !LANES_FORMATS.contains(&labels["format"].as_str()) {
            continue;
        }
        match (labels["entries"].as_str(), t.trace(&point)) {
            ("serial", Ok(trace)) => {
                // DIA's diagonal loop runs the stencil's 5 diagonals, a constant trip count.
                let specialized = trace.contains(&lacuna::schedule::Instruction::Specialize {
                    param: "A.p0.diagonals".into(),
                    value: 5,
                });
                assert_eq!(
                    specialized,
                    labels["format"] == lacuna::driver::SPMV_DIA,
                    "{labels:?}: {trace:?}"
                );
                computes_y(trace, &format!("{labels:?}"));
                lanes_points += 1;
            }
            ("serial", Err(e)) => panic!("{labels:?}: {e}"),
            (_, result) => assert!(result.is_err(), "{labels:?}"),
        }
    }
    // Two formats, serial and parallel groups.
    assert_eq!(lanes_points, 4);
    // With `scalar_gathers`, each vector-lane point also comes with its gathers assembled from
    // scalar loads (the annotation), and computes the same; masked or serial rows refuse it.
    let opts = TemplateOptions {
        scalar_gathers: true,
        ..TemplateOptions::default()
    };
    let t = KernelTemplate::new(&p, &b.params, stats.as_ref(), &opts);
    let space = t.space();
    assert!(space.decisions.iter().any(|d| d.name == "gathers"));
    let mut scalar_points = 0;
    for i in 0..space.size() {
        let point = space.point(i);
        let labels = space.labels(&point);
        if labels["gathers"] != "scalar" {
            continue;
        }
        let lanes = LANES_FORMATS.contains(&labels["format"].as_str());
        let vector_lanes = if lanes {
            labels["entries"] == "serial"
        } else {
            labels["entries"] == "vector"
        };
        match t.trace(&point) {
            Ok(trace) => {
                assert!(vector_lanes, "{labels:?}");
                assert!(
                    trace.iter().any(|inst| matches!(inst,
                        lacuna::schedule::Instruction::Annotate { key, .. } if key == "scalar_gathers")),
                    "{labels:?}: {trace:?}"
                );
                computes_y(trace, &format!("{labels:?}"));
                scalar_points += 1;
            }
            Err(e) => assert!(!vector_lanes || !lanes, "{labels:?}: {e}"),
        }
    }
    // At least the lanes formats' four points, and CSR's vector rows.
    assert!(scalar_points >= 6, "{scalar_points}");
    // A matrix on more diagonals than DIA stores gets sliced ELL only.
    let wide = load_input(&root().join("tests/data/west0479.mtx")).expect("matrix");
    let Input::Coo(wide) = wide else {
        panic!("a sparse matrix")
    };
    let stats = lacuna::tuning::coo_stats(&wide);
    let t = KernelTemplate::new(&p, &b.params, stats.as_ref(), &TemplateOptions::default());
    let formats = &t.space().decisions[0].choices;
    assert!(formats.iter().any(|f| f == LANES_FORMATS[0]), "{formats:?}");
    assert!(
        !formats.iter().any(|f| f == LANES_FORMATS[1]),
        "{formats:?}"
    );
}

/// With equal values (`iso_values`), SpMV's template also tries storing one (the `values`
/// decision, after the format): its points compute the kernel, and formats that pad (BSR)
/// refuse it. `lacuna tune` sets the option from the data: its candidates on a `pattern` file
/// store one value.
#[test]
fn spmv_template_tries_one_stored_value_on_equal_values() {
    let p = load_kernel(&root().join("examples/spmv.ron")).expect("kernel");
    let (m, n) = (97, 83);
    let entries: Vec<(usize, usize)> = (0..m)
        .flat_map(|i| (0..(i % 9) + 1).map(move |k| (i, (i * 13 + k * 7) % n)))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let coo = lacuna::ir::CooTensor {
        shape: vec![m, n],
        coords: vec![
            entries.iter().map(|e| e.0).collect(),
            entries.iter().map(|e| e.1).collect(),
        ],
        values: lacuna::ir::ArrayData::F64(vec![1.0; entries.len()]),
    };
    let (inputs, want) = spmv_inputs_and_reference(&p, &coo, |j| j as f64 / 5.0 - 2.0);
    let params = BTreeMap::new();
    let b = lacuna::stage1::bind_with(&p, &inputs, &params, Default::default()).expect("binds");
    let stats = lacuna::tuning::coo_stats(&coo);
    let plain = KernelTemplate::new(&p, &b.params, stats.as_ref(), &TemplateOptions::default());
    assert!(!plain.space().decisions.iter().any(|d| d.name == "values"));
    let opts = TemplateOptions {
        iso_values: true,
        ..TemplateOptions::default()
    };
    let t = KernelTemplate::new(&p, &b.params, stats.as_ref(), &opts);
    let space = t.space();
    let mut one = 0;
    for i in 0..space.size() {
        let point = space.point(i);
        let labels = space.labels(&point);
        if labels["values"] != "one" || labels["parallel"] != "rows" {
            continue;
        }
        let pads = labels["format"].contains("bsr") || labels["format"].contains("ell ");
        match t.trace(&point) {
            Ok(trace) => {
                assert!(
                    trace
                        .iter()
                        .any(|i| matches!(i, lacuna::schedule::Instruction::IsoValues { .. })),
                    "{labels:?}: {trace:?}"
                );
                assert_point_computes(
                    &p,
                    "spmv",
                    trace,
                    &inputs,
                    &params,
                    "y",
                    &want,
                    &format!("{labels:?}"),
                );
                one += 1;
            }
            Err(e) => assert!(pads || labels["entries"] != "serial", "{labels:?}: {e}"),
        }
    }
    assert!(one >= 4, "{one} points store one value");
}

/// SpMV's template tries the column-panel widths it is given (those narrower than the
/// matrix); its panel points compute the kernel at 1 and 3 threads, and with `parallel: rows`
/// each panel's rows run in parallel, the panel loop serial.
#[test]
fn spmv_template_tries_column_panels() {
    let p = load_kernel(&root().join("examples/spmv.ron")).expect("kernel");
    let a = load_input(&root().join("tests/data/west0479.mtx")).expect("matrix");
    let Input::Coo(coo) = a else {
        panic!("a sparse matrix")
    };
    let (inputs, want) = spmv_inputs_and_reference(&p, &coo, |j| j as f64 / 9.0 - 2.0);
    let params = BTreeMap::new();
    let b = lacuna::stage1::bind_with(&p, &inputs, &params, Default::default()).expect("binds");
    let stats = lacuna::tuning::coo_stats(&coo);
    let opts = TemplateOptions {
        panels: vec![64, 4096],
        ..TemplateOptions::default()
    };
    let t = KernelTemplate::new(&p, &b.params, stats.as_ref(), &opts);
    let space = t.space();
    let formats = &format_choices(&t);
    assert!(!formats.is_empty(), "a format decision");
    // west0479 has 479 columns: panels of 4096 would hold them all.
    assert!(formats.iter().any(|f| f == "(panels 64)"), "{formats:?}");
    assert!(!formats.iter().any(|f| f == "(panels 4096)"), "{formats:?}");
    let mut parallel_points = 0;
    for i in 0..space.size() {
        let point = space.point(i);
        let labels = space.labels(&point);
        if labels["format"] != "(panels 64)" {
            continue;
        }
        let Ok(trace) = t.trace(&point) else { continue };
        if labels.get("parallel").map(String::as_str) == Some("rows") {
            let parallel = parallel_loops(&trace);
            assert!(
                parallel
                    .iter()
                    .any(|l| l.ends_with("i.p0") && !l.ends_with("ip.p0")),
                "{labels:?}: {trace:?}"
            );
            assert!(!parallel.iter().any(|l| l.ends_with("ip.p0")), "{trace:?}");
            parallel_points += 1;
        }
        let what = format!("{labels:?}");
        assert_point_computes(&p, "spmv", trace, &inputs, &params, "y", &want, &what);
    }
    assert!(parallel_points > 0);
}

/// With `row_panel_bytes`, SpMM's template also tries column panels holding that many bytes of
/// `B`'s rows (a power of two of rows, only where the matrix has more columns); its points
/// split the features inside the panel's runs and run each panel's rows in parallel, and give
/// the interpreter's results at 1 and 3 threads.
#[test]
fn spmm_template_tries_column_panels_of_b_rows() {
    let p = load_kernel(&root().join("examples/spmm.ron")).expect("kernel");
    let a = load_input(&root().join("tests/data/west0479.mtx")).expect("matrix");
    let Input::Coo(coo) = &a else {
        panic!("a sparse matrix")
    };
    let (n, k) = (479, 64);
    let b_data = (0..n * k)
        .map(|i| ((i * 37 + 5) % 101) as f64 / 50.0 - 1.0)
        .collect();
    let inputs = BTreeMap::from([
        ("A".to_string(), a.clone()),
        (
            "B".to_string(),
            Input::Dense(lacuna::ir::DenseArray {
                shape: vec![n, k],
                data: lacuna::ir::ArrayData::F64(b_data),
            }),
        ),
    ]);
    let params = BTreeMap::new();
    let want = run_kernel_scheduled(&p, None, &inputs, &params, Target::Interp, 1)
        .expect("reference")
        .outputs["C"]
        .clone();
    let want = match want {
        lacuna::stage1::Output::Dense(d) => Input::Dense(d),
        other => panic!("a dense result, not {other:?}"),
    };
    let b = lacuna::stage1::bind_with(&p, &inputs, &params, Default::default()).expect("binds");
    let stats = lacuna::tuning::coo_stats(coo);
    let formats = |bytes: usize| {
        let opts = TemplateOptions {
            row_panel_bytes: bytes,
            ..TemplateOptions::default()
        };
        let t = KernelTemplate::new(&p, &b.params, stats.as_ref(), &opts);
        let choices = format_choices(&t);
        (t, choices)
    };
    // 40 rows of 64 f64 fit in 20 KiB: panels of 32 rows; 479 columns fit in 256 KiB whole.
    let (t, choices) = formats(20 << 10);
    assert!(choices.iter().any(|f| f == "(panels 32)"), "{choices:?}");
    assert!(!formats(0).1.iter().any(|f| f.starts_with("(panels")));
    assert!(!formats(256 << 10)
        .1
        .iter()
        .any(|f| f.starts_with("(panels")));
    let space = t.space();
    let mut checked = 0;
    for i in 0..space.size() {
        let point = space.point(i);
        let labels = space.labels(&point);
        let wanted = labels["format"] == "(panels 32)"
            && labels["tile"] == "16-hoisted"
            && labels["inner"] == "vectorize";
        if !wanted {
            continue;
        }
        let trace = t
            .trace(&point)
            .unwrap_or_else(|e| panic!("{labels:?}: {e}"));
        if labels["parallel"] == "rows" {
            let parallel = parallel_loops(&trace);
            assert!(parallel.iter().any(|l| l.ends_with("i.p0")), "{trace:?}");
            assert!(!parallel.iter().any(|l| l.ends_with("ip.p0")), "{trace:?}");
        }
        let what = format!("{labels:?}");
        assert_point_computes(&p, "spmm", trace, &inputs, &params, "C", &want, &what);
        checked += 1;
    }
    assert_eq!(checked, 2, "serial and parallel rows");
}

/// With `stream_rows`, SpMM's template also tries each row of `C` accumulated in registers
/// and streamed (`stores: streamed`): only for outputs of at least that many bytes, only with
/// hoisted tiles on the stored CSR; those points compute `C`.
#[test]
fn spmm_template_tries_streamed_rows() {
    let p = load_kernel(&root().join("examples/spmm.ron")).expect("kernel");
    let a = load_input(&root().join("tests/data/west0479.mtx")).expect("matrix");
    let Input::Coo(coo) = &a else {
        panic!("a sparse matrix")
    };
    let (n, k) = (479, 32);
    let b_data = (0..n * k)
        .map(|i| ((i * 29 + 3) % 97) as f64 / 48.0 - 1.0)
        .collect();
    let inputs = BTreeMap::from([
        ("A".to_string(), a.clone()),
        (
            "B".to_string(),
            Input::Dense(lacuna::ir::DenseArray {
                shape: vec![n, k],
                data: lacuna::ir::ArrayData::F64(b_data),
            }),
        ),
    ]);
    let params = BTreeMap::new();
    let want = match run_kernel_scheduled(&p, None, &inputs, &params, Target::Interp, 1)
        .expect("reference")
        .outputs["C"]
        .clone()
    {
        lacuna::stage1::Output::Dense(d) => Input::Dense(d),
        other => panic!("a dense result, not {other:?}"),
    };
    let b = lacuna::stage1::bind_with(&p, &inputs, &params, Default::default()).expect("binds");
    let stats = lacuna::tuning::coo_stats(coo);
    let template = |stream_rows: Option<usize>| {
        let opts = TemplateOptions {
            formats: 1,
            stream_rows,
            row_orders: true,
            ..TemplateOptions::default()
        };
        KernelTemplate::new(&p, &b.params, stats.as_ref(), &opts)
    };
    let has_stores = |t: &KernelTemplate| t.space().decisions.iter().any(|d| d.name == "stores");
    // C is 479 x 32 f64, 122 624 bytes.
    assert!(!has_stores(&template(None)));
    assert!(!has_stores(&template(Some(122_625))));
    let t = template(Some(122_624));
    assert!(has_stores(&t));
    let space = t.space();
    assert!(
        space
            .decisions
            .iter()
            .any(|d| d.name == "format" && d.choices.iter().any(|o| o == "rcm")),
        "the rows in reverse Cuthill–McKee order are a format option"
    );
    let (mut streamed, mut refused, mut reordered) = (0, 0, 0);
    for i in 0..space.size() {
        let point = space.point(i);
        let labels = space.labels(&point);
        if labels["stores"] != "streamed" || labels["inner"] != "vectorize" {
            continue;
        }
        // A row per matrix row: the stored CSR, or its rows reordered.
        let csr = labels
            .get("format")
            .is_none_or(|f| f == "csr" || f == "rcm");
        match t.trace(&point) {
            Ok(trace) => {
                assert!(csr && labels["tile"].ends_with("-hoisted"), "{labels:?}");
                assert!(
                    trace.iter().any(|x| matches!(
                        x,
                        lacuna::schedule::Instruction::Annotate { key, .. } if key == "nontemporal"
                    )),
                    "{trace:?}"
                );
                let what = format!("{labels:?}");
                assert_point_computes(&p, "spmm", trace, &inputs, &params, "C", &want, &what);
                streamed += 1;
                reordered += usize::from(labels.get("format").is_some_and(|f| f == "rcm"));
            }
            Err(e) => {
                assert!(
                    !csr || !labels["tile"].ends_with("-hoisted"),
                    "{labels:?}: {e}"
                );
                refused += 1;
            }
        }
    }
    assert!(
        streamed >= 2 && refused >= 2 && reordered >= 1,
        "{streamed} streamed ({reordered} in rcm order), {refused} refused"
    );
}

fn records(db: &Path) -> Vec<Record> {
    Database::new(db).load().expect("the database parses")
}

/// A candidate that segfaults, one that hangs and one that computes a wrong result (injected
/// in the worker by trial number) are recorded as failed; the run completes.
#[test]
fn crashing_hanging_and_wrong_candidates_are_recorded_as_failed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db.jsonl");
    let b = dense_b(dir.path(), 8);
    let out = Command::new(BIN)
        .env(lacuna::tune::INJECT_ENV, "crash:2,hang:4,wrong:5")
        .args([
            "tune",
            &spmm(),
            "--input",
            &format!("A={}", matrix()),
            "--input",
            &format!("B={}", b.display()),
            "--db",
            db.to_str().expect("utf-8"),
            "--strategy",
            "exhaustive",
            "--trials",
            "9",
            "--timeout",
            "2",
            "--min-seconds",
            "0.001",
            "--budget",
            "120",
            "--threads",
            "1",
            "--quiet",
        ])
        .output()
        .expect("runs");
    let summary: serde_json::Value = serde_json::from_str(&ok(&out)).expect("JSON summary");
    let all = records(&db);
    let rs: Vec<Record> = all.iter().filter(|r| !r.is_final()).cloned().collect();
    assert_eq!(rs.len(), 9, "{all:#?}");
    let by_trial: BTreeMap<usize, &Record> = rs.iter().map(|r| (r.trial, r)).collect();
    assert_eq!(by_trial[&2].status, Status::Crashed);
    assert!(
        by_trial[&2]
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("SIGSEGV"),
        "{:?}",
        by_trial[&2].detail
    );
    assert_eq!(by_trial[&4].status, Status::Timeout);
    assert_eq!(by_trial[&5].status, Status::Wrong);
    assert!(by_trial[&5]
        .detail
        .as_deref()
        .unwrap_or("")
        .contains("differs"));
    for t in [0, 1, 3, 6, 7, 8] {
        assert_eq!(
            by_trial[&t].status,
            Status::Ok,
            "trial {t}: {:?}",
            by_trial[&t].detail
        );
        assert!(by_trial[&t]
            .timing
            .is_some_and(|t| t.min > 0.0 && t.runs >= 3));
    }
    assert_eq!(summary["failed"], 3);
    assert_eq!(summary["trials"], 9);
    // The final round: the built-in schedule (trial 0) and the three best of the others that
    // ran, each measured three more times; the failed ones are not among them.
    let verdicts: Vec<&Record> = all.iter().filter(|r| r.is_final()).collect();
    assert_eq!(verdicts.len(), 4, "{verdicts:#?}");
    assert_eq!(summary["final_round"]["finalists"], 4);
    assert_eq!(summary["final_round"]["failed"], 0);
    let judged: BTreeSet<usize> = verdicts
        .iter()
        .filter_map(|r| r.final_round.as_ref().map(|f| f.of_trial))
        .collect();
    assert_eq!(judged.len(), 4);
    assert!(judged.contains(&0), "{judged:?}");
    for v in &verdicts {
        assert_eq!(v.status, Status::Ok, "{:?}", v.detail);
        let f = v.final_round.as_ref().expect("verdict");
        assert!([0, 1, 3, 6, 7, 8].contains(&f.of_trial), "{}", f.of_trial);
        assert_eq!(f.scores.len(), 3);
        assert_eq!(v.trace, by_trial[&f.of_trial].trace);
    }
    let best = &summary["best"]["final_round"];
    assert_eq!(
        best["scores"].as_array().map(Vec::len),
        Some(3),
        "{summary}"
    );
    assert!(judged.contains(&(best["of_trial"].as_u64().unwrap_or(99) as usize)));
}

/// SIGKILL the tuner mid-run, then `--resume`: every finished record is kept as it was, none
/// is measured twice, and the database parses.
#[test]
fn a_killed_run_resumes_without_losing_or_repeating_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db.jsonl");
    let b = dense_b(dir.path(), 16);
    let args = |extra: &[&str]| {
        let mut v: Vec<String> = [
            "tune",
            &spmm(),
            "--input",
            &format!("A={}", matrix()),
            "--input",
            &format!("B={}", b.display()),
            "--db",
            db.to_str().expect("utf-8"),
            "--strategy",
            "random",
            "--trials",
            "14",
            "--batch",
            "2",
            "--min-seconds",
            "0.15",
            "--budget",
            "300",
            "--threads",
            "1",
            "--quiet",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let mut child = Command::new(BIN)
        .args(args(&[]))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    let start = Instant::now();
    while records(&db).len() < 4 {
        assert!(start.elapsed() < Duration::from_secs(120), "no progress");
        assert!(
            child.try_wait().expect("waits").is_none(),
            "ended before the kill"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let before = records(&db);
    assert!(before.len() >= 4 && before.len() < 14, "{}", before.len());
    let text_before = std::fs::read_to_string(&db).expect("reads");
    let complete_before: String = text_before
        .lines()
        .take(before.len())
        .map(|l| format!("{l}\n"))
        .collect();
    let out = Command::new(BIN)
        .args(args(&["--resume"]))
        .output()
        .expect("runs");
    let summary: serde_json::Value = serde_json::from_str(&ok(&out)).expect("JSON");
    assert_eq!(summary["resumed"], true);
    let all = records(&db);
    // The resumed run's final round comes after its 14 trials.
    assert_eq!(all.iter().filter(|r| r.is_final()).count(), 4);
    let after: Vec<Record> = all.iter().filter(|r| !r.is_final()).cloned().collect();
    assert_eq!(after.len(), 14);
    assert!(
        std::fs::read_to_string(&db)
            .expect("reads")
            .starts_with(&complete_before),
        "finished records are kept as they were"
    );
    let runs: BTreeSet<&str> = after.iter().map(|r| r.run.as_str()).collect();
    assert_eq!(runs.len(), 1, "one run, continued");
    let traces: BTreeSet<String> = after
        .iter()
        .map(|r| serde_json::to_string(&r.trace).expect("json"))
        .collect();
    assert_eq!(traces.len(), 14, "no candidate measured twice");
    let trials: BTreeSet<usize> = after.iter().map(|r| r.trial).collect();
    assert_eq!(trials.len(), 14);
    assert_eq!(
        after
            .iter()
            .filter(|r| r.decisions.contains_key("template"))
            .count(),
        1,
        "the built-in schedule is measured once"
    );
}

/// The best record replays: `tune apply-best` gives its schedule, which lowers to the same IR
/// as the report's `best.ron`, and `run --tuned` computes the kernel's result.
#[test]
fn the_best_record_replays_to_the_same_ir_and_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db.jsonl");
    let report = dir.path().join("report");
    let b = dense_b(dir.path(), 16);
    let a_arg = format!("A={}", matrix());
    let b_arg = format!("B={}", b.display());
    let dbs = db.to_str().expect("utf-8");
    let summary = ok(&lacuna(&[
        "tune",
        &spmm(),
        "--input",
        &a_arg,
        "--input",
        &b_arg,
        "--db",
        dbs,
        "--trials",
        "12",
        "--budget",
        "120",
        "--threads",
        "1",
        "--quiet",
        "--report",
        report.to_str().expect("utf-8"),
    ]));
    let summary: serde_json::Value = serde_json::from_str(&summary).expect("JSON");
    for f in [
        "best.ron",
        "convergence.svg",
        "records.jsonl",
        "summary.json",
    ] {
        assert!(report.join(f).is_file(), "{f}");
    }
    let svg = std::fs::read_to_string(report.join("convergence.svg")).expect("svg");
    assert!(svg.starts_with("<svg") || svg.contains("<svg"), "an SVG");
    let rs = records(&db);
    // The final round's verdicts rank first.
    let best = rs
        .iter()
        .filter(|r| r.status == Status::Ok)
        .min_by(|a, b| lacuna::tuning::db::rank(a, b))
        .expect("a successful record");
    assert!(best.is_final());
    assert_eq!(summary["best"]["trial"], best.trial);
    let sched = dir.path().join("best.ron");
    ok(&lacuna(&[
        "tune",
        "apply-best",
        &spmm(),
        "--input",
        &a_arg,
        "--input",
        &b_arg,
        "--db",
        dbs,
        "--threads",
        "1",
        "--out",
        sched.to_str().expect("utf-8"),
    ]));
    let applied = ScheduleFile::from_ron(&std::fs::read_to_string(&sched).expect("reads"))
        .expect("a schedule file");
    assert_eq!(applied.trace, best.trace);
    let lower = |s: &Path| {
        ok(&lacuna(&[
            "lower",
            &spmm(),
            "--schedule",
            s.to_str().expect("utf-8"),
            "--stage",
            "flat",
        ]))
    };
    assert_eq!(lower(&sched), lower(&report.join("best.ron")));
    // Same results: the tuned run, the schedule file and the unscheduled kernel.
    let c_tuned = dir.path().join("c_tuned.npy");
    let c_plain = dir.path().join("c_plain.npy");
    let run = ok(&lacuna(&[
        "run",
        &spmm(),
        "--input",
        &a_arg,
        "--input",
        &b_arg,
        "--tuned",
        dbs,
        "--threads",
        "1",
        "--out",
        &format!("C={}", c_tuned.display()),
    ]));
    let run: serde_json::Value = serde_json::from_str(&run).expect("JSON");
    assert!(
        run["schedule"]
            .as_str()
            .unwrap_or("")
            .starts_with("tuned: trial"),
        "{run}"
    );
    ok(&lacuna(&[
        "run",
        &spmm(),
        "--input",
        &a_arg,
        "--input",
        &b_arg,
        "--schedule",
        "none",
        "--target",
        "interp",
        "--out",
        &format!("C={}", c_plain.display()),
    ]));
    let t = load_input(&c_tuned).expect("npy");
    let p = match load_input(&c_plain).expect("npy") {
        Input::Dense(d) => lacuna::stage1::Output::Dense(d),
        Input::Coo(c) => lacuna::stage1::Output::Coo(c),
        Input::Sparse(s) => lacuna::stage1::Output::Sparse(s),
    };
    assert!(max_rel_diff(&t, &p) <= 1e-12);
}

/// Bad input to `tune` and `--tuned` is a clean error that says what is wrong.
#[test]
fn tune_errors_are_clean() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db.jsonl");
    let dbs = db.to_str().expect("utf-8");
    let b = dense_b(dir.path(), 8);
    let a_arg = format!("A={}", matrix());
    let b_arg = format!("B={}", b.display());
    let err = |o: Output| {
        assert!(!o.status.success());
        assert!(o.status.code().is_some(), "no crash");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = err(lacuna(&[
        "tune",
        &spmm(),
        "--input",
        &a_arg,
        "--input",
        &b_arg,
        "--db",
        dbs,
        "--budget",
        "0",
    ]));
    assert!(e.contains("--budget"), "{e}");
    let spadd = root().join("examples/spadd.ron");
    let e = err(lacuna(&[
        "tune",
        spadd.to_str().expect("utf-8"),
        "--input",
        &a_arg,
        "--input",
        &format!("B={}", matrix()),
        "--db",
        dbs,
    ]));
    assert!(e.contains("co-iteration"), "{e}");
    let e = err(lacuna(&[
        "run",
        &spmm(),
        "--input",
        &a_arg,
        "--input",
        &b_arg,
        "--tuned",
        dbs,
    ]));
    assert!(e.contains("no successful record"), "{e}");
    std::fs::write(&db, "{\"not\": \"a record\"}\n{}\n").expect("writes");
    let e = err(lacuna(&[
        "tune",
        "apply-best",
        &spmm(),
        "--input",
        &a_arg,
        "--input",
        &b_arg,
        "--db",
        dbs,
    ]));
    assert!(
        e.contains(":1:") && e.contains("not a tuning record"),
        "{e}"
    );
    let e = err(lacuna(&[
        "tune",
        &spmm(),
        "--input",
        &a_arg,
        "--db",
        dbs,
        "--budget",
        "5",
    ]));
    assert!(e.contains("B"), "a missing input is named: {e}");
}
