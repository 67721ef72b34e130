//! Shared helpers of the GPU tests (`tests/gpu.rs`, `gpumem.rs`, `gpulaunch.rs`): schedules,
//! flat functions, `ptxas`, inputs, runs on a target and comparisons with the CPU.

use super::{close, dense, to_coo, values};
use lacuna::driver::Target;
use lacuna::driver::{convert_inputs, load_schedule, reset_outputs, DriverError, Executable};
use lacuna::schedule::{Schedule, ScheduleFile};
use lacuna::stage1::{bind_with, unpack, Input, Output, Program, Role};
use lacuna::stage2::{lower_to_flat, Config, Func};
use lacuna::target::GpuArch;
use proptest::prelude::ProptestConfig;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Proptest's configuration: `PROPTEST_CASES` cases, else `default`.
pub fn cases_config(default: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
        ..ProptestConfig::default()
    }
}

/// A schedule of `examples/schedules`.
pub fn schedule(name: &str) -> ScheduleFile {
    load_schedule(&root().join("examples/schedules").join(name)).expect("schedule loads")
}

/// `p` scheduled by `file`: the scheduled program and its flat function.
pub fn scheduled_flat(p: &Program, file: &ScheduleFile) -> (Program, Func) {
    let s = Schedule::replay(p, &file.trace).expect("the schedule applies");
    let flat = lower_to_flat(
        s.stage2().expect("lowers"),
        &Config::default(),
        &mut |_, _| {},
    )
    .expect("flattens");
    (s.program().clone(), flat)
}

/// The flat function of `p` scheduled by `file`.
pub fn flat_of(p: &Program, file: &ScheduleFile) -> Func {
    scheduled_flat(p, file).1
}

/// `ptxas` from the PyPI wheel `nvidia-cuda-nvcc-cu12` in `.venv` (installed by
/// `scripts/setup`), or `$PTXAS`.
pub fn find_ptxas() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("PTXAS") {
        return Some(PathBuf::from(p));
    }
    let lib = root().join(".venv/lib");
    for e in std::fs::read_dir(lib).ok()?.flatten() {
        let p = e.path().join("site-packages/nvidia/cuda_nvcc/bin/ptxas");
        if p.is_file() {
            return Some(p);
        }
    }
    None
}

/// [`find_ptxas`], which the GPU tests need.
pub fn ptxas() -> PathBuf {
    find_ptxas().expect(
        "ptxas not found: run ./scripts/setup (installs nvidia-cuda-nvcc-cu12 into .venv) or set PTXAS",
    )
}

/// Asserts that `ptxas` assembles `ptx` for `arch` (`stem` names it in files and messages).
pub fn assemble_ptx(ptx: &str, arch: GpuArch, stem: &str) {
    let tmp = std::env::temp_dir().join(format!(
        "lacuna-ptx-{}-{stem}-{}",
        std::process::id(),
        arch.name()
    ));
    std::fs::create_dir_all(&tmp).expect("temp dir");
    let file = tmp.join(format!("{stem}.ptx"));
    std::fs::write(&file, ptx).expect("writes PTX");
    let out = Command::new(ptxas())
        .arg(format!("-arch={}", arch.name()))
        .arg(&file)
        .arg("-o")
        .arg(tmp.join(format!("{stem}.cubin")))
        .output()
        .expect("ptxas runs");
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(
        out.status.success(),
        "ptxas -arch={} rejected {stem}:\n{}\n{ptx}",
        arch.name(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The inputs of a kernel (`spmm`, `spmv`, `sddmm`) for a CSR matrix `rows` (m × n) and `feat`
/// features, dense operands from fixed seeds.
pub fn inputs_for(
    kernel: &str,
    m: usize,
    n: usize,
    feat: usize,
    rows: &[Vec<(usize, f64)>],
) -> BTreeMap<String, Input> {
    let a = Input::Coo(to_coo(m, n, rows));
    match kernel {
        "spmm" => BTreeMap::from([
            ("A".to_string(), a),
            ("B".to_string(), dense(&[n, feat], values(n * feat, 7))),
        ]),
        "spmv" => BTreeMap::from([
            ("A".to_string(), a),
            ("x".to_string(), dense(&[n], values(n, 3))),
        ]),
        "sddmm" => BTreeMap::from([
            ("S".to_string(), a),
            ("X".to_string(), dense(&[m, feat], values(m * feat, 5))),
            ("W".to_string(), dense(&[n, feat], values(n * feat, 9))),
        ]),
        other => panic!("no inputs for {other}"),
    }
}

/// Runs `p` scheduled by `file` on `target` (decomposed formats converted from the inputs);
/// its output.
pub fn run_on(
    p: &Program,
    file: &ScheduleFile,
    inputs: &BTreeMap<String, Input>,
    target: Target,
) -> Result<Output, DriverError> {
    let (scheduled, exe, conversions) = Executable::build_converting(p, Some(file), target)?;
    let given = convert_inputs(&conversions, inputs).expect("converts");
    let mut b = bind_with(&scheduled, inputs, &BTreeMap::new(), given).expect("binds");
    reset_outputs(&scheduled, &mut b);
    exe.run(&scheduled, &mut b)?;
    let o = scheduled
        .buffers
        .iter()
        .find(|x| x.role == Role::Output)
        .expect("an output");
    Ok(unpack(&scheduled, &b, &o.name).expect("unpacks"))
}

/// The unscheduled kernel `kernel` on the JIT.
pub fn cpu(p: &Program, kernel: &str, inputs: &BTreeMap<String, Input>) -> Output {
    let plain = ScheduleFile {
        version: 1,
        kernel: kernel.into(),
        trace: vec![],
    };
    run_on(p, &plain, inputs, Target::Jit).expect("CPU run")
}

/// Asserts `got` equals the CPU's `want`: shape, number of values, each within [`close`].
pub fn same(what: &str, got: &Output, want: &Output) {
    let (g, w) = (got.values().to_f64_vec(), want.values().to_f64_vec());
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(g.len(), w.len(), "{what}: number of values");
    for (i, (x, y)) in g.iter().zip(&w).enumerate() {
        assert!(close(*x, *y), "{what}: value {i}: {x} vs CPU {y}");
    }
}
