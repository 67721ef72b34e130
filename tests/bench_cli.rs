//! `lacuna bench`: its records parse, its checksums agree with `lacuna run` and with a dense
//! reference on the same generated data, `--compare` of a file with itself gives 1.00, and bad
//! input is a clean error.

use lacuna::bench::{gen_er, random_dense};
use lacuna::ir::io::write_mtx_coo;
use lacuna::ir::CooTensor;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lacuna"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("lacuna-bench-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("temp dir");
        TempDir(d)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ok(out: Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed: {stderr}");
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

fn run(args: &[&str]) -> String {
    ok(bin().args(args).output().expect("the binary runs"))
}

fn records(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("each line is a JSON object"))
        .collect()
}

fn find<'a>(recs: &'a [Value], kernel: &str, threads: u64) -> &'a Value {
    recs.iter()
        .find(|r| r["kernel"] == kernel && r["threads"] == threads)
        .unwrap_or_else(|| panic!("no {kernel} record with {threads} threads"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
}

const ROWS: usize = 37;
const COLS: usize = 29;
const PER_ROW: usize = 4;
const K: usize = 3;
const SEED: u64 = 5;

/// Dense reference checksums (sum of the output) for the generated data, computed here.
fn reference(a: &CooTensor) -> [(&'static str, f64); 3] {
    let v = a.values.to_f64_vec();
    let entries = || (0..a.nnz()).map(|e| (a.coords[0][e], a.coords[1][e], v[e]));
    let x = random_dense(&[COLS], SEED + 1)
        .expect("small")
        .data
        .to_f64_vec();
    let b = random_dense(&[COLS, K], SEED + 1)
        .expect("small")
        .data
        .to_f64_vec();
    let xs = random_dense(&[ROWS, K], SEED + 1)
        .expect("small")
        .data
        .to_f64_vec();
    let w = random_dense(&[COLS, K], SEED + 2)
        .expect("small")
        .data
        .to_f64_vec();
    let spmv: f64 = entries().map(|(_, j, a)| a * x[j]).sum();
    let spmm: f64 = entries()
        .map(|(_, j, a)| (0..K).map(|k| a * b[j * K + k]).sum::<f64>())
        .sum();
    let sddmm: f64 = entries()
        .map(|(i, j, a)| a * (0..K).map(|k| xs[i * K + k] * w[j * K + k]).sum::<f64>())
        .sum();
    [("spmv", spmv), ("spmm", spmm), ("sddmm", sddmm)]
}

#[test]
fn records_parse_and_checksums_match_run_and_reference() {
    let dir = TempDir::new("check");
    let out = dir.path("r.jsonl");
    let spec = format!("er:{ROWS}:{COLS}:{PER_ROW}");
    let stdout = run(&[
        "bench",
        "--gen",
        &spec,
        "--seed",
        &SEED.to_string(),
        "--kernels",
        "spmv,spmm,sddmm",
        "--k",
        &K.to_string(),
        "--threads",
        "1,2",
        "--repeat",
        "2",
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    assert!(stdout.is_empty(), "--out leaves stdout empty: {stdout}");
    let text = std::fs::read_to_string(&out).expect("--out was written");
    let recs = records(&text);
    assert_eq!(recs.len(), 6, "3 kernels x 2 thread counts:\n{text}");
    let a = gen_er(ROWS, COLS, PER_ROW, SEED);
    for r in &recs {
        for f in [
            "compile_s",
            "convert_s",
            "run_s_min",
            "run_s_median",
            "gflops",
            "gbps",
            "checksum",
            "flops",
        ] {
            let v = r[f]
                .as_f64()
                .unwrap_or_else(|| panic!("{f} is a number: {r}"));
            assert!(v.is_finite() && v >= 0.0 || f == "checksum", "{f} = {v}");
        }
        for f in ["rows", "cols", "nnz", "threads", "repeats", "bytes"] {
            assert!(r[f].as_u64().is_some(), "{f} is an integer: {r}");
        }
        for f in ["kernel", "matrix", "format", "schedule"] {
            assert!(r[f].as_str().is_some(), "{f} is a string: {r}");
        }
        assert_eq!(r["rows"], ROWS as u64);
        assert_eq!(r["cols"], COLS as u64);
        assert_eq!(r["nnz"], a.nnz() as u64);
        assert_eq!(r["repeats"], 2);
        assert_eq!(r["format"], "csr");
        assert_eq!(r["schedule"], "builtin");
        assert!(r["run_s_min"].as_f64() <= r["run_s_median"].as_f64());
        let k = if r["kernel"] == "spmv" {
            assert!(r["k"].is_null());
            1.0
        } else {
            assert_eq!(r["k"], K as u64);
            K as f64
        };
        assert_eq!(r["flops"].as_f64(), Some(2.0 * a.nnz() as f64 * k));
    }
    // Both thread counts ran the same computation.
    for kernel in ["spmv", "spmm", "sddmm"] {
        assert_eq!(
            find(&recs, kernel, 1)["checksum"],
            find(&recs, kernel, 2)["checksum"]
        );
    }
    for (kernel, want) in reference(&a) {
        let got = find(&recs, kernel, 1)["checksum"]
            .as_f64()
            .unwrap_or(f64::NAN);
        assert!(close(got, want), "{kernel}: bench {got}, reference {want}");
    }

    // `lacuna run` on the same data, written to files.
    let mtx = dir.path("a.mtx");
    write_mtx_coo(&mtx, &a).expect("write the matrix");
    let dense = |name: &str, shape: &str, seed: u64| -> String {
        let p = dir.path(name);
        let ps = p.to_str().expect("utf-8 path").to_string();
        run(&[
            "gen-dense",
            "--shape",
            shape,
            "--seed",
            &seed.to_string(),
            "--out",
            &ps,
        ]);
        ps
    };
    let x = dense("x.npy", &COLS.to_string(), SEED + 1);
    let b = dense("b.npy", &format!("{COLS},{K}"), SEED + 1);
    let xs = dense("xs.npy", &format!("{ROWS},{K}"), SEED + 1);
    let w = dense("w.npy", &format!("{COLS},{K}"), SEED + 2);
    let m = mtx.to_str().expect("utf-8 path");
    let cases: [(&str, Vec<String>); 3] = [
        ("spmv", vec![format!("A={m}"), format!("x={x}")]),
        ("spmm", vec![format!("A={m}"), format!("B={b}")]),
        (
            "sddmm",
            vec![format!("S={m}"), format!("X={xs}"), format!("W={w}")],
        ),
    ];
    for (kernel, inputs) in cases {
        let ron = format!("examples/{kernel}.ron");
        let mut args = vec!["run", ron.as_str()];
        for i in &inputs {
            args.extend(["--input", i.as_str()]);
        }
        let report: Value = serde_json::from_str(&run(&args)).expect("run prints JSON");
        let want = report["checksum"].as_f64().unwrap_or(f64::NAN);
        let got = find(&recs, kernel, 1)["checksum"]
            .as_f64()
            .unwrap_or(f64::NAN);
        assert!(close(got, want), "{kernel}: bench {got}, lacuna run {want}");
    }

    // The same matrix from the .mtx file gives the same results.
    let from_file = records(&run(&[
        "bench",
        m,
        "--seed",
        &SEED.to_string(),
        "--k",
        &K.to_string(),
        "--repeat",
        "1",
    ]));
    assert_eq!(from_file.len(), 3);
    for r in &from_file {
        assert_eq!(r["matrix"], "a");
        let kernel = r["kernel"].as_str().unwrap_or_default();
        let want = find(&recs, kernel, 1)["checksum"]
            .as_f64()
            .unwrap_or(f64::NAN);
        assert!(close(r["checksum"].as_f64().unwrap_or(f64::NAN), want));
    }
}

/// `--target interp-gpu` runs every GPU example schedule with GPU semantics (blocks, threads,
/// races checked) through the same bench path as `--target cuda`; its checksums equal the dense
/// reference. A GPU target refuses CPU schedules, and without a driver `cuda` is a clean error.
#[test]
fn gpu_targets_run_gpu_schedules() {
    let spec = format!("er:{ROWS}:{COLS}:{PER_ROW}");
    let mut gpu: Vec<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/schedules"))
            .expect("examples/schedules")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("_gpu") && n.ends_with(".ron"))
            .map(|n| format!("examples/schedules/{n}"))
            .collect();
    gpu.sort();
    assert!(gpu.len() >= 11, "the GPU examples: {gpu:?}");
    let mut args = vec![
        "bench".to_string(),
        "--gen".into(),
        spec.clone(),
        "--seed".into(),
        SEED.to_string(),
        "--kernels".into(),
        "spmv,spmm,sddmm".into(),
        "--k".into(),
        K.to_string(),
        "--repeat".into(),
        "1".into(),
        "--target".into(),
        "interp-gpu".into(),
    ];
    for s in &gpu {
        args.extend(["--schedule".to_string(), s.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let recs = records(&run(&args));
    assert_eq!(recs.len(), gpu.len(), "one record per GPU schedule");
    let a = gen_er(ROWS, COLS, PER_ROW, SEED);
    let want: std::collections::HashMap<_, _> = reference(&a).into_iter().collect();
    for r in &recs {
        assert_eq!(r["target"], "interp-gpu");
        let kernel = r["kernel"].as_str().unwrap_or_default();
        let got = r["checksum"].as_f64().unwrap_or(f64::NAN);
        assert!(
            close(got, want[kernel]),
            "{}: {got}, reference {}",
            r["schedule"],
            want[kernel]
        );
    }
    // The host's records say so too.
    let host = records(&run(&[
        "bench",
        "--gen",
        &spec,
        "--kernels",
        "spmv",
        "--repeat",
        "1",
    ]));
    assert_eq!(host[0]["target"], "jit");

    let e = fails(&["bench", "--gen", &spec, "--target", "interp-gpu"]);
    assert!(
        e.contains("--schedule builtin") && e.contains("CPU schedule"),
        "{e}"
    );
    let e = fails(&["bench", "--gen", &spec, "--target", "gpu"]);
    assert!(e.contains("'gpu'") && e.contains("--target"), "{e}");
    if lacuna::target::cuda_available().is_err() {
        let e = fails(&[
            "bench",
            "--gen",
            &spec,
            "--kernels",
            "spmv",
            "--target",
            "cuda:sm_90",
            "--schedule",
            "examples/schedules/spmv_gpu_warp_row.ron",
        ]);
        assert!(e.contains("CUDA driver"), "{e}");
    }
}

#[test]
fn formats_agree_with_csr() {
    let text = run(&[
        "bench",
        "--gen",
        "er:24:3",
        "--kernels",
        "spmm,sddmm",
        "--k",
        "2",
        "--format",
        "csr",
        "--format",
        "csc",
        "--format",
        "bsr(2,2)",
        "--repeat",
        "1",
    ]);
    let recs = records(&text);
    assert_eq!(recs.len(), 6);
    for r in &recs {
        let csr = recs
            .iter()
            .find(|c| c["kernel"] == r["kernel"] && c["format"] == "csr")
            .expect("a csr record");
        let (a, b) = (
            r["checksum"].as_f64().unwrap_or(f64::NAN),
            csr["checksum"].as_f64().unwrap_or(f64::NAN),
        );
        assert!(
            close(a, b),
            "{}: {} {a} vs csr {b}",
            r["kernel"],
            r["format"]
        );
    }
}

#[test]
fn compare_with_itself_is_one() {
    let dir = TempDir::new("compare");
    let out = dir.path("base.jsonl");
    let o = out.to_str().expect("utf-8 path");
    run(&[
        "bench",
        "--gen",
        "er:50:3",
        "--kernels",
        "spmv,spmm",
        "--k",
        "4",
        "--threads",
        "1,2",
        "--repeat",
        "2",
        "--out",
        o,
    ]);
    let table = run(&["bench", "--compare", o, "--new", o]);
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("spmv") || l.starts_with("spmm"))
        .collect();
    assert_eq!(rows.len(), 4, "{table}");
    for r in rows {
        assert!(r.trim_end().ends_with("1.00"), "{r}");
    }
    assert!(
        table.contains("geometric mean new/base: 1.00 over 4 configurations"),
        "{table}"
    );
}

/// Runs the CLI expecting a clean failure; returns stderr.
fn fails(args: &[&str]) -> String {
    let out = bin().args(args).output().expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "expected failure for {args:?}");
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "a clean error, not a crash: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "panic for {args:?}: {stderr}");
    assert!(stderr.contains("error"), "{stderr}");
    stderr
}

#[test]
fn bad_input_is_a_clean_error() {
    let e = fails(&["bench", "does/not/exist.mtx"]);
    assert!(e.contains("does/not/exist.mtx"), "{e}");
    let e = fails(&["bench", "--gen", "er:10"]);
    assert!(e.contains("er:10"), "{e}");
    let e = fails(&["bench", "--gen", "blob:10:2"]);
    assert!(e.contains("unknown generator"), "{e}");
    let e = fails(&["bench", "--gen", "er:10:2", "--kernels", "spmv,nope"]);
    assert!(e.contains("unknown kernel `nope`"), "{e}");
    let e = fails(&["bench"]);
    assert!(e.contains("no matrices"), "{e}");
    fails(&["bench", "--gen", "er:10:2", "--threads", "0"]);
    fails(&["bench", "--gen", "er:10:2", "--repeat", "0"]);
    let e = fails(&["bench", "--gen", "er:10:2", "--format", "nonsense(("]);
    assert!(e.contains("encoding"), "{e}");
    let e = fails(&[
        "bench",
        "--gen",
        "er:10:2",
        "--schedule",
        "no/such/schedule.ron",
    ]);
    assert!(e.contains("no/such/schedule.ron"), "{e}");
    let e = fails(&[
        "bench",
        "--compare",
        "no/base.jsonl",
        "--new",
        "no/base.jsonl",
    ]);
    assert!(e.contains("no/base.jsonl"), "{e}");

    let dir = TempDir::new("bad");
    let junk = dir.path("junk.jsonl");
    std::fs::write(&junk, "{\"kernel\": \"spmv\"}\n").expect("write");
    let j = junk.to_str().expect("utf-8 path");
    let e = fails(&["bench", "--compare", j, "--new", j]);
    assert!(e.contains(":1:"), "names the line: {e}");
    let nowhere = dir.path("no/such/dir/out.jsonl");
    let n = nowhere.to_str().expect("utf-8 path");
    let e = fails(&[
        "bench",
        "--gen",
        "er:10:2",
        "--kernels",
        "spmv",
        "--repeat",
        "1",
        "--out",
        n,
    ]);
    assert!(e.contains("out.jsonl"), "{e}");
    assert!(!Path::new(&nowhere).exists());
}

/// With `--schedule builtin`, each record names the schedule the built-in chose for its data
/// (`builtin_schedule`, RON on one line); saved as a file and given with `--schedule`, it runs
/// the same kernel (the same checksum, bit for bit), and that record names none.
#[test]
fn builtin_records_name_the_schedule_they_ran() {
    let dir = TempDir::new("builtin");
    // 32000 entries: large enough for the built-in's parallel rows.
    let spec = "er:4000:4000:8";
    let bench = |kernel: &str, schedule: &str| {
        records(&run(&[
            "bench",
            "--gen",
            spec,
            "--kernels",
            kernel,
            "--k",
            "16",
            "--threads",
            "2",
            "--repeat",
            "1",
            "--schedule",
            schedule,
        ]))
    };
    for kernel in ["spmv", "spmm", "sddmm"] {
        let builtin = bench(kernel, "builtin");
        assert_eq!(builtin.len(), 1, "{builtin:?}");
        let text = builtin[0]["builtin_schedule"]
            .as_str()
            .unwrap_or_else(|| panic!("a builtin_schedule string: {}", builtin[0]));
        assert!(!text.contains('\n'), "one line: {text}");
        let file = lacuna::schedule::ScheduleFile::from_ron(text).expect("a schedule file");
        assert_eq!(file.kernel, kernel);
        assert!(!file.trace.is_empty(), "{kernel}: {text}");
        let path = dir.path(&format!("{kernel}.ron"));
        std::fs::write(&path, text).expect("write the schedule");
        let again = bench(kernel, path.to_str().expect("utf-8 path"));
        assert_eq!(again.len(), 1, "{again:?}");
        assert!(again[0].get("builtin_schedule").is_none(), "{}", again[0]);
        assert_eq!(
            again[0]["checksum"].as_f64().map(f64::to_bits),
            builtin[0]["checksum"].as_f64().map(f64::to_bits),
            "{kernel}: {text}"
        );
    }
}
