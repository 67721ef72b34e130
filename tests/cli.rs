//! The `lacuna` command line: bad input gives a clean error, real matrices give right answers.

mod common;

use common::{close, kernel};
use lacuna::driver::{load_input, run_kernel, Target};
use lacuna::ir::io::{read_mtx, read_npy, write_npy, MtxData};
use lacuna::ir::{ArrayData, CooTensor, DenseArray};
use lacuna::stage1::{Input, Output};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lacuna"))
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("lacuna-cli-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("temp dir");
        TempDir(d)
    }
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write fixture");
        p
    }
    /// `lacuna gen-dense --shape SHAPE --seed SEED` into `name` here.
    fn gen_dense(&self, name: &str, shape: &str, seed: &str) -> PathBuf {
        let p = self.0.join(name);
        succeeds(&[
            "gen-dense",
            "--shape",
            shape,
            "--seed",
            seed,
            "--out",
            p.to_str().expect("path"),
        ]);
        p
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the CLI in the repository root expecting success (stderr in the message otherwise);
/// returns its stdout.
fn succeeds<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Vec<u8> {
    let out = bin()
        .current_dir(repo())
        .args(args)
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Runs the CLI expecting failure; returns stderr, after checking it is a clean error.
fn fails(args: &[&str]) -> String {
    let out = bin()
        .current_dir(repo())
        .args(args)
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "expected failure for {args:?}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "a clean error exits with 1, not a crash: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "panic for {args:?}: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(out.stdout.is_empty(), "no JSON on failure");
    stderr
}

fn spmv_with_matrix(t: &TempDir, mtx: &str) -> String {
    let a = t.file("a.mtx", mtx);
    let x = t.0.join("x.npy");
    write_npy(
        &x,
        &DenseArray {
            shape: vec![2],
            data: ArrayData::F64(vec![1.0, 2.0]),
        },
    )
    .expect("write x");
    let y = t.0.join("y.npy");
    let err = fails(&[
        "run",
        "examples/spmv.ron",
        "--input",
        &format!("A={}", a.display()),
        "--input",
        &format!("x={}", x.display()),
        "--out",
        &format!("y={}", y.display()),
    ]);
    assert!(!y.exists(), "no output file after a failure");
    assert!(err.contains("a.mtx"), "the message names the file: {err}");
    err
}

#[test]
fn malformed_mtx_bad_header() {
    let t = TempDir::new("hdr");
    let e = spmv_with_matrix(
        &t,
        "%%MatrixMarket matrix coordinate real weird\n2 2 1\n1 1 1.0\n",
    );
    assert!(e.contains(":1:"), "{e}");
}

#[test]
fn malformed_mtx_short_line() {
    let t = TempDir::new("short");
    let e = spmv_with_matrix(
        &t,
        "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1.0\n2\n",
    );
    assert!(e.contains(":4:"), "{e}");
}

#[test]
fn malformed_mtx_index_out_of_range() {
    let t = TempDir::new("range");
    let e = spmv_with_matrix(
        &t,
        "%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1.0\n",
    );
    assert!(e.contains(":3:") && e.contains("out of range"), "{e}");
}

#[test]
fn malformed_mtx_wrong_count() {
    let t = TempDir::new("count");
    let e = spmv_with_matrix(
        &t,
        "%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1.0\n",
    );
    assert!(e.contains('3') && e.contains('1'), "{e}");
}

#[test]
fn shape_mismatch_between_inputs() {
    let t = TempDir::new("shape");
    let a = t.file(
        "a.mtx",
        "%%MatrixMarket matrix coordinate real general\n2 3 1\n1 1 1.0\n",
    );
    let x = t.0.join("x.npy");
    write_npy(
        &x,
        &DenseArray {
            shape: vec![2],
            data: ArrayData::F64(vec![1.0, 2.0]),
        },
    )
    .expect("write x");
    let e = fails(&[
        "run",
        "examples/spmv.ron",
        "--input",
        &format!("A={}", a.display()),
        "--input",
        &format!("x={}", x.display()),
    ]);
    assert!(
        e.contains("shape mismatch") && e.contains("`A`") && e.contains("`x`"),
        "{e}"
    );
}

#[test]
fn kernel_with_unknown_axis() {
    let t = TempDir::new("axis");
    let text = std::fs::read_to_string(repo().join("examples/spmv.ron"))
        .expect("spmv")
        .replace(r#"axes: ["I", "J"], dtype"#, r#"axes: ["I", "Q"], dtype"#);
    let k = t.file("bad.ron", &text);
    let e = fails(&["lower", k.to_str().expect("utf-8 path")]);
    assert!(
        e.contains("bad.ron") && e.contains("unknown axis `Q`"),
        "{e}"
    );
}

#[test]
fn kernel_with_reduction_axis_written_as_spatial() {
    let t = TempDir::new("sr");
    let text = std::fs::read_to_string(repo().join("examples/spmv.ron"))
        .expect("spmv")
        .replace(r#"kinds: "SR""#, r#"kinds: "SS""#);
    let k = t.file("bad.ron", &text);
    let e = fails(&[
        "run",
        k.to_str().expect("utf-8 path"),
        "--input",
        "A=tests/data/lp_afiro.mtx",
    ]);
    assert!(
        e.contains("bad.ron") && e.contains("axis `J` is marked spatial (S)"),
        "{e}"
    );
}

#[test]
fn kernel_with_ron_syntax_error_names_line_and_column() {
    let t = TempDir::new("ron");
    let k = t.file("bad.ron", "(\n  version: 1,\n  name: \"x\",\n  axes: [ (name: \"I\" kind: DenseFixed(n: \"m\")) ],\n)");
    let e = fails(&["lower", k.to_str().expect("utf-8 path")]);
    assert!(e.contains("bad.ron:4:"), "{e}");
}

#[test]
fn missing_input_and_unknown_output() {
    let e = fails(&[
        "run",
        "examples/spmv.ron",
        "--input",
        "A=tests/data/lp_afiro.mtx",
    ]);
    assert!(e.contains("no input given for buffer `x`"), "{e}");
    let e = fails(&["run", "examples/spmv.ron", "--out", "Z=z.npy"]);
    assert!(e.contains("`Z` is not an output"), "{e}");
    let e = fails(&["run", "examples/spmv.ron", "--input", "A"]);
    assert!(e.contains("NAME=VALUE"), "{e}");
}

#[test]
fn run_prints_the_documented_json_and_writes_outputs() {
    let t = TempDir::new("json");
    let b = t.gen_dense("B.npy", "51,4", "3");
    let c = t.0.join("C.npy");
    let out = succeeds(&[
        "run",
        "examples/spmm.ron",
        "--input",
        "A=tests/data/lp_afiro.mtx",
        "--input",
        &format!("B={}", b.display()),
        "--out",
        &format!("C={}", c.display()),
        "--repeat",
        "3",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out).expect("one JSON object");
    assert_eq!(v["kernel"], "spmm");
    assert_eq!(v["target"], "jit");
    assert_eq!(v["repeat"], 3);
    assert!(v["compile_seconds"].as_f64().expect("number") > 0.0);
    assert!(
        v["run_seconds"]["min"].as_f64().expect("min")
            <= v["run_seconds"]["median"].as_f64().expect("median")
    );
    assert_eq!(v["outputs"]["C"]["shape"], serde_json::json!([27, 4]));
    let written = read_npy(&c).expect("C.npy written");
    let sum: f64 = written.data.to_f64_vec().iter().sum();
    assert!(close(v["checksum"].as_f64().expect("checksum"), sum));
}

/// Without `--schedule`, `lacuna run` names the built-in schedule it chose as a schedule file
/// on one line (`built-in: (version: 1, ...)`); saved and given back with `--schedule`, it
/// runs the same kernel: the same checksum, bit for bit.
#[test]
fn run_names_the_built_in_schedule_it_chose() {
    let t = TempDir::new("builtin");
    // lp_afiro is 27 x 51; SDDMM's built-in schedule always runs the features as vector lanes.
    let x = t.gen_dense("X.npy", "27,16", "1");
    let w = t.gen_dense("W.npy", "51,16", "2");
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "run".to_string(),
            "examples/sddmm.ron".into(),
            "--input".into(),
            "S=tests/data/lp_afiro.mtx".into(),
            "--input".into(),
            format!("X={}", x.display()),
            "--input".into(),
            format!("W={}", w.display()),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        serde_json::from_slice(&succeeds(&args)).expect("one JSON object")
    };
    let builtin = run(&[]);
    let named = builtin["schedule"].as_str().expect("a schedule string");
    let text = named
        .strip_prefix("built-in: ")
        .unwrap_or_else(|| panic!("{named}"));
    let file = lacuna::schedule::ScheduleFile::from_ron(text).expect("a schedule file");
    assert_eq!(file.kernel, "sddmm");
    assert!(
        file.trace
            .iter()
            .any(|i| matches!(i, lacuna::schedule::Instruction::Vectorize { .. })),
        "{text}"
    );
    let saved = t.file("builtin.ron", text);
    let given = run(&["--schedule", saved.to_str().expect("path")]);
    assert_eq!(given["schedule"], "given");
    assert_eq!(
        given["checksum"].as_f64().map(f64::to_bits),
        builtin["checksum"].as_f64().map(f64::to_bits)
    );
}

#[test]
fn lower_prints_every_stage() {
    for (stage, needle) in [
        ("1", "sp_iter spmv"),
        ("2", "A[i, j]"),
        ("flat", "A[j]"),
        ("llvm", "define"),
    ] {
        let out = succeeds(&["lower", "examples/spmv.ron", "--stage", stage]);
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains(needle), "stage {stage}: {text}");
    }
}

/// `lower --stage llvm --unoptimized` prints the IR as generated (the row loop's blocks as the
/// emitter names them, which the optimizer renames or removes); co-iteration kernels print the
/// one-pass function too.
#[test]
fn lower_prints_unoptimized_llvm_and_the_one_pass_function() {
    let lower = |args: &[&str]| String::from_utf8_lossy(&succeeds(args)).into_owned();
    let raw = lower(&[
        "lower",
        "examples/spmv.ron",
        "--stage",
        "llvm",
        "--unoptimized",
    ]);
    let opt = lower(&["lower", "examples/spmv.ron", "--stage", "llvm"]);
    assert!(raw.contains("i.head:") && raw.contains("j.body:"), "{raw}");
    assert!(!opt.contains("j.body:"), "{opt}");
    let co = lower(&["lower", "examples/spadd.ron", "--stage", "2"]);
    assert!(
        co.contains("func spadd_count(") && co.contains("func spadd("),
        "{co}"
    );
    assert!(
        co.contains("C.row_lo"),
        "the one-pass function's row range: {co}"
    );
    // Any other stage has no LLVM passes to skip: an error, not a silently ignored flag.
    for stage in ["1", "2", "flat", "ptx"] {
        let out = bin()
            .current_dir(repo())
            .args([
                "lower",
                "examples/spmv.ron",
                "--stage",
                stage,
                "--unoptimized",
            ])
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "stage {stage}");
        assert!(
            err.contains("--unoptimized applies to --stage llvm only"),
            "stage {stage}: {err}"
        );
        assert!(out.stdout.is_empty(), "stage {stage}: nothing printed");
    }
}

/// CSR reference products computed directly from the coordinate entries.
fn reference(coo: &CooTensor, kernel: &str, dense: &[Vec<f64>]) -> Vec<f64> {
    let (m, n) = (coo.shape[0], coo.shape[1]);
    let vals = coo.values.to_f64_vec();
    match kernel {
        "spmv" => {
            let mut y = vec![0.0; m];
            for e in 0..coo.nnz() {
                y[coo.coords[0][e]] += vals[e] * dense[0][coo.coords[1][e]];
            }
            y
        }
        "spmm" => {
            let k = dense[0].len() / n.max(1);
            let mut c = vec![0.0; m * k];
            for e in 0..coo.nnz() {
                for kk in 0..k {
                    c[coo.coords[0][e] * k + kk] += vals[e] * dense[0][coo.coords[1][e] * k + kk];
                }
            }
            c
        }
        _ => {
            let k = dense[0].len() / m.max(1);
            (0..coo.nnz())
                .map(|e| {
                    vals[e]
                        * (0..k)
                            .map(|kk| {
                                dense[0][coo.coords[0][e] * k + kk]
                                    * dense[1][coo.coords[1][e] * k + kk]
                            })
                            .sum::<f64>()
                })
                .collect()
        }
    }
}

fn check_matrix(path: &Path) {
    let Ok(MtxData::Coo(mut coo)) = read_mtx(path) else {
        return;
    };
    coo.sort_and_sum_duplicates();
    let (m, n) = (coo.shape[0], coo.shape[1]);
    let a = load_input(path).expect("loads");
    let rel = |got: &[f64], want: &[f64]| {
        let scale = want.iter().fold(0.0f64, |s, v| s.max(v.abs())).max(1e-300);
        got.iter()
            .zip(want)
            .fold(0.0f64, |s, (g, w)| s.max((g - w).abs()))
            / scale
    };
    let k = 8;
    let x = common::values(n, 1);
    let b = common::values(n * k, 2);
    let xs = common::values(m * k, 3);
    let w = common::values(n * k, 4);
    for (name, inputs, dense) in [
        (
            "spmv",
            vec![("A", a.clone()), ("x", common::dense(&[n], x.clone()))],
            vec![x],
        ),
        (
            "spmm",
            vec![("A", a.clone()), ("B", common::dense(&[n, k], b.clone()))],
            vec![b],
        ),
        (
            "sddmm",
            vec![
                ("S", a.clone()),
                ("X", common::dense(&[m, k], xs.clone())),
                ("W", common::dense(&[n, k], w.clone())),
            ],
            vec![xs, w],
        ),
    ] {
        let p = kernel(name);
        let inputs: BTreeMap<String, Input> = inputs
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let r = run_kernel(&p, &inputs, &BTreeMap::new(), Target::Jit, 1)
            .unwrap_or_else(|e| panic!("{name} on {}: {e}", path.display()));
        let out = r.outputs.values().next().expect("one output");
        let got = match out {
            Output::Dense(d) => d.data.to_f64_vec(),
            Output::Coo(c) => c.values.to_f64_vec(),
            Output::Sparse(t) => t.values().to_f64_vec(),
        };
        let want = reference(&coo, name, &dense);
        assert_eq!(got.len(), want.len(), "{name} on {}", path.display());
        let err = rel(&got, &want);
        assert!(
            err <= 1e-12,
            "{name} on {}: relative error {err:e}",
            path.display()
        );
    }
}

#[test]
fn real_matrices_in_the_repo() {
    let dir = repo().join("tests/data");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/data") {
        let p = entry.expect("entry").path();
        if p.extension().is_some_and(|e| e == "mtx") {
            check_matrix(&p);
            n += 1;
        }
    }
    assert!(n >= 5, "expected the bundled matrices, found {n}");
}

#[test]
fn real_matrices_in_shared_when_present() {
    let dir = repo().join("../shared/matrices");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!(
            "SKIPPED: {} is not present; only the bundled matrices were checked",
            dir.display()
        );
        return;
    };
    let mut n = 0;
    for entry in entries {
        let p = entry.expect("entry").path();
        let small = std::fs::metadata(&p)
            .map(|m| m.len() < 12_000_000)
            .unwrap_or(false);
        if p.extension().is_some_and(|e| e == "mtx") && small {
            check_matrix(&p);
            n += 1;
        }
    }
    eprintln!(
        "checked spmv/spmm/sddmm on {n} matrices of {}",
        dir.display()
    );
    assert!(n > 0);
}

/// Inputs found by fuzzing the CLI (session 19) that crashed, hung or gave wrong results: each
/// is now a clean error naming what is wrong.
#[test]
fn fuzzed_inputs_are_clean_errors() {
    let t = TempDir::new("fuzzed");
    let schedule = |name: &str, trace: &str| {
        t.file(
            name,
            &format!("(version: 1, kernel: \"spmv\", trace: [{trace}])"),
        )
    };
    // An empty reorder panicked; split factors past i64 wrapped to -1 (silently wrong); a
    // 100,000-iteration unroll hung code generation.
    let cases = [
        ("reorder.ron", "Reorder(loops: [])", "at least one loop"),
        (
            "split.ron",
            "Split(loop: \"spmv:j\", factors: [None, 18446744073709551615])",
            "at most 2147483647",
        ),
        (
            "split2.ron",
            "Split(loop: \"spmv:j\", factors: [None, 65536, 65536])",
            "at most 2147483647",
        ),
        (
            "unroll.ron",
            "Split(loop: \"spmv:j\", factors: [None, 100000]), Unroll(loop: \"j.1\")",
            "at most 1024",
        ),
    ];
    for (file, trace, want) in cases {
        let s = schedule(file, trace);
        let err = fails(&[
            "lower",
            "examples/spmv.ron",
            "--schedule",
            s.to_str().unwrap(),
        ]);
        assert!(err.contains(want), "{trace}: {err}");
    }
    // 5,000 nested parentheses overflowed the stack.
    let text = std::fs::read_to_string(repo().join("examples/spmv.ron")).expect("example");
    let deep = format!("{}y[i]{}", "(".repeat(5000), ")".repeat(5000));
    let k = t.file(
        "deep.ron",
        &text.replace("y[i] + A[i, j] * x[j]", &format!("{deep} + A[i, j] * x[j]")),
    );
    let err = fails(&["lower", k.to_str().unwrap()]);
    assert!(err.contains("more than 1024 tokens"), "{err}");
    // A declared 10^12 rows aborted on allocation in `info` and in the statistics of `run`.
    let huge = t.file(
        "huge.mtx",
        "%%MatrixMarket matrix coordinate real general\n1000000000000 1000000000000 1\n1 1 1\n",
    );
    let err = fails(&["info", huge.to_str().unwrap()]);
    assert!(err.contains("too large"), "{err}");
    let x = t.file(
        "x.mtx",
        "%%MatrixMarket matrix array real general\n3 1\n1\n2\n3\n",
    );
    let a = format!("A={}", huge.display());
    let x = format!("x={}", x.display());
    fails(&["run", "examples/spmv.ron", "--input", &a, "--input", &x]);
    // A generated width of 10^11 aborted too.
    let m = t.file(
        "m.mtx",
        "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1\n",
    );
    let err = fails(&[
        "bench",
        m.to_str().unwrap(),
        "--kernels",
        "spmm",
        "--k",
        "100000000000",
        "--repeat",
        "1",
    ]);
    assert!(err.contains("too large"), "{err}");
}

/// Arguments that used to be taken silently or tried literally: a `--param` naming no
/// parameter of the kernel (ignored), a million worker threads (a pool of a million), and
/// `gen-dense --out` with another extension than .npy (NumPy bytes under a `.mtx` name).
#[test]
fn misnamed_params_huge_pools_and_output_extensions_are_handled() {
    let t = TempDir::new("args");
    let err = fails(&[
        "run",
        "examples/spmv.ron",
        "--input",
        "A=tests/data/1138_bus.mtx",
        "--param",
        "nn=1138",
    ]);
    assert!(
        err.contains("has no parameter `nn`") && err.contains("m, n, nnz"),
        "{err}"
    );
    let err = fails(&[
        "run",
        "examples/spmv.ron",
        "--input",
        "A=tests/data/1138_bus.mtx",
        "--threads",
        "1000000",
    ]);
    assert!(err.contains("more than the 1024 allowed"), "{err}");
    let err = fails(&[
        "bench",
        "tests/data/1138_bus.mtx",
        "--kernels",
        "spmv",
        "--threads",
        "1,1000000",
    ]);
    assert!(err.contains("--threads 1000000: at most 1024"), "{err}");
    // A declared parameter is still taken (and checked against the data).
    let x = t.0.join("x.npy");
    write_npy(
        &x,
        &DenseArray {
            shape: vec![1138],
            data: ArrayData::F64(vec![1.0; 1138]),
        },
    )
    .expect("x");
    let err = fails(&[
        "run",
        "examples/spmv.ron",
        "--input",
        "A=tests/data/1138_bus.mtx",
        "--input",
        &format!("x={}", x.display()),
        "--param",
        "m=7",
    ]);
    assert!(err.contains("shape mismatch: size `m` is 7"), "{err}");
    // gen-dense writes the format its extension names, or refuses it.
    let (mtx, npy) = (t.0.join("g.mtx"), t.0.join("g.npy"));
    for file in [&mtx, &npy] {
        let file = file.to_str().expect("path");
        succeeds(&["gen-dense", "--shape", "3,2", "--seed", "5", "--out", file]);
    }
    let from_npy = read_npy(&npy).expect("npy");
    match read_mtx(&mtx).expect("a Matrix Market array") {
        MtxData::Dense(d) => assert_eq!(d, from_npy),
        other => panic!("expected a dense array, got {other:?}"),
    }
    let txt = t.0.join("g.txt");
    let err = fails(&[
        "gen-dense",
        "--shape",
        "3,2",
        "--out",
        txt.to_str().unwrap(),
    ]);
    assert!(err.contains("unknown extension"), "{err}");
    assert!(!txt.exists(), "nothing written");
}
