//! The cache and scope primitives (`cache_read`, `cache_write`, `reverse_cache_read`,
//! `reverse_cache_write`, `set_scope`): golden IR before/after, results equal to the dense
//! reference and the unscheduled interpreter on random matrices (stage-II interpreter and JIT),
//! traces that round-trip through RON, and typed errors that leave the schedule unchanged.

mod common;

use common::*;
use lacuna::driver::{reset_outputs, Executable, Target};
use lacuna::schedule::{Instruction, Schedule, ScheduleFile};
use lacuna::stage1::{unpack, Input, Output, Program};
use lacuna::stage2::print_func;
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

fn s(x: &str) -> String {
    x.to_string()
}

fn cache_read(block: &str, buffer: &str, scope: &str, at: &str) -> Instruction {
    Instruction::CacheRead {
        block: s(block),
        buffer: s(buffer),
        scope: s(scope),
        at: Some(s(at)),
    }
}

fn cache_write(block: &str, buffer: &str, scope: &str, at: &str) -> Instruction {
    Instruction::CacheWrite {
        block: s(block),
        buffer: s(buffer),
        scope: s(scope),
        at: Some(s(at)),
    }
}

fn reverse_cache_read(block: &str, buffer: &str, scope: &str, at: &str) -> Instruction {
    Instruction::ReverseCacheRead {
        block: s(block),
        buffer: s(buffer),
        scope: s(scope),
        at: Some(s(at)),
    }
}

fn reverse_cache_write(block: &str, buffer: &str, scope: &str, at: &str) -> Instruction {
    Instruction::ReverseCacheWrite {
        block: s(block),
        buffer: s(buffer),
        scope: s(scope),
        at: Some(s(at)),
    }
}

fn split(l: &str, f: u64) -> Instruction {
    Instruction::Split {
        r#loop: s(l),
        factors: vec![None, Some(f)],
    }
}

fn schedule_file(name: &str) -> ScheduleFile {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("examples/schedules/{name}.ron"));
    ScheduleFile::from_ron(&std::fs::read_to_string(path).expect("schedule file")).expect("parses")
}

/// SDDMM: the features split by 4; the X and W slices of a chunk staged in registers.
fn sddmm_trace() -> Vec<Instruction> {
    schedule_file("sddmm_cache").trace
}

/// SpMV: y[i] accumulated in a register (cache_write of the reduction).
fn spmv_write_trace() -> Vec<Instruction> {
    vec![cache_write("spmv", "y", "local", "spmv:i")]
}

/// SpMM: the features split by 4; B's chunk of the row a nonzero selects is gathered through
/// `J.indices` in the copy stage (reverse_cache_read under k.0).
fn spmm_trace() -> Vec<Instruction> {
    vec![
        split("spmm:k", 4),
        reverse_cache_read("spmm", "B", "local", "k.0"),
    ]
}

/// hyb SpMM's split-row part: each chunk's row segment accumulated in a local cache, then
/// added back into C through the row map (reverse_cache_write).
fn hyb_trace() -> Vec<Instruction> {
    vec![
        Instruction::DecomposeFormat {
            buffer: s("A"),
            into: s("(+ (ell 2) (split_rows 2))"),
        },
        split("spmm_p1:k", 4),
        Instruction::Reorder {
            loops: vec![s("spmm_p1:k.0"), s("j.p1")],
        },
        reverse_cache_write("spmm_p1", "C", "local", "spmm_p1:k.0"),
    ]
}

/// Runs `p` scheduled by `trace` on the stage-II interpreter and the JIT.
fn run_scheduled(
    p: &Program,
    trace: &[Instruction],
    inputs: &BTreeMap<String, Input>,
) -> Vec<(&'static str, Output)> {
    let file = ScheduleFile {
        version: 1,
        kernel: p.name.clone(),
        trace: trace.to_vec(),
    };
    let mut out = Vec::new();
    for target in [Target::Interp, Target::Jit] {
        let (scheduled, exe, conversions) =
            Executable::build_converting(p, Some(&file), target).expect("the schedule applies");
        let given = lacuna::driver::convert_inputs(&conversions, inputs).expect("converts");
        let mut b =
            lacuna::stage1::bind_with(&scheduled, inputs, &BTreeMap::new(), given).expect("binds");
        reset_outputs(&scheduled, &mut b);
        exe.run(&scheduled, &mut b).expect("runs");
        let o = scheduled
            .buffers
            .iter()
            .find(|x| x.role == lacuna::stage1::Role::Output)
            .expect("an output");
        out.push((
            target.name(),
            unpack(&scheduled, &b, &o.name).expect("unpacks"),
        ));
    }
    out
}

fn ir(p: &Program, trace: &[Instruction]) -> String {
    print_func(
        &Schedule::replay(p, trace)
            .expect("applies")
            .stage2()
            .expect("lowers"),
    )
}

#[test]
fn golden_cache_primitives() {
    // (name, kernel, trace, number of instructions before the cache primitives)
    let cases: Vec<(&str, &str, Vec<Instruction>, usize)> = vec![
        ("cache_read_sddmm", "sddmm", sddmm_trace()[..3].to_vec(), 1),
        ("cache_write_spmv", "spmv", spmv_write_trace(), 0),
        ("reverse_cache_read_spmm", "spmm", spmm_trace(), 1),
        ("reverse_cache_write_hyb", "spmm", hyb_trace(), 3),
    ];
    for (name, kernel_name, trace, prefix) in cases {
        let p = kernel(kernel_name);
        let before = ir(&p, &trace[..prefix]);
        let after = ir(&p, &trace);
        assert_ne!(before, after, "{name}");
        insta::assert_snapshot!(format!("{name}_before"), before);
        insta::assert_snapshot!(format!("{name}_after"), after);
    }
}

/// The traces round-trip through RON and replay to the same IR.
#[test]
fn cache_traces_round_trip() {
    for (kernel_name, trace) in [
        ("sddmm", sddmm_trace()),
        ("spmv", spmv_write_trace()),
        ("spmm", spmm_trace()),
        ("spmm", hyb_trace()),
    ] {
        let p = kernel(kernel_name);
        let s = Schedule::replay(&p, &trace).expect("applies");
        let text = s.to_file().to_ron();
        let file = ScheduleFile::from_ron(&text).expect("parses back");
        assert_eq!(file.trace, trace);
        let again = Schedule::replay(&p, &file.trace).expect("replays");
        assert_eq!(
            print_func(&again.stage2().expect("lowers")),
            print_func(&s.stage2().expect("lowers"))
        );
    }
}

fn spmm_reference(m: usize, n: usize, k: usize, rows: &[Vec<(usize, f64)>], b: &[f64]) -> Vec<f64> {
    let a = to_dense(m, n, rows);
    (0..m * k)
        .map(|ik| (0..n).map(|j| a[ik / k * n + j] * b[j * k + ik % k]).sum())
        .collect()
}

proptest! {
    #![proptest_config(config())]

    /// cache_read (SDDMM, X and W in registers) equals the reference and the unscheduled
    /// stage-II interpreter.
    #[test]
    fn cache_read_preserves_sddmm((m, n, rows) in sparse_matrix(), k in 0usize..7, seed in any::<u64>()) {
        let p = kernel("sddmm");
        let x = values(m * k, seed);
        let w = values(n * k, seed ^ 5);
        let inputs = BTreeMap::from([
            ("S".to_string(), Input::Coo(to_coo(m, n, &rows))),
            ("X".to_string(), dense(&[m, k], x.clone())),
            ("W".to_string(), dense(&[n, k], w.clone())),
        ]);
        let want: Vec<(Vec<usize>, f64)> = rows.iter().enumerate().flat_map(|(i, r)| {
            let (x, w) = (&x, &w);
            r.iter().map(move |&(j, s)| (vec![i, j], (0..k).map(|kk| s * x[i * k + kk] * w[j * k + kk]).sum()))
        }).collect();
        for (target, out) in run_scheduled(&p, &sddmm_trace(), &inputs) {
            assert_sparse(&format!("sddmm_cache {target}"), &out, &[m, n], &want);
        }
        for (target, outs) in run_all(&p, &inputs) {
            assert_sparse(&format!("unscheduled {target}"), &outs["C"], &[m, n], &want);
        }
    }

    /// cache_write (SpMV's accumulator) equals the reference.
    #[test]
    fn cache_write_preserves_spmv((m, n, rows) in sparse_matrix(), seed in any::<u64>()) {
        let p = kernel("spmv");
        let x = values(n, seed);
        let a = to_dense(m, n, &rows);
        let want: Vec<f64> = (0..m).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect();
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(to_coo(m, n, &rows))),
            ("x".to_string(), dense(&[n], x)),
        ]);
        for (target, out) in run_scheduled(&p, &spmv_write_trace(), &inputs) {
            assert_dense(&format!("cache_write {target}"), &out, &[m], &want);
        }
    }

    /// reverse_cache_read (SpMM's B gather), reverse_cache_write (hyb's split rows) and
    /// cache_write (C's chunk of a row, loaded, accumulated, stored back) equal the reference.
    #[test]
    fn reverse_caches_preserve_spmm((m, n, rows) in sparse_matrix(), k in 0usize..7, seed in any::<u64>()) {
        let p = kernel("spmm");
        let b = values(n * k, seed);
        let want = spmm_reference(m, n, k, &rows, &b);
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(to_coo(m, n, &rows))),
            ("B".to_string(), dense(&[n, k], b)),
        ]);
        let write_c = vec![split("spmm:k", 4), cache_write("spmm", "C", "local", "k.0")];
        let mut traces = vec![("reverse_cache_read", spmm_trace()), ("reverse_cache_write", hyb_trace()), ("cache_write", write_c)];
        if k > 0 {
            // The row's features in a cache that starts at zero in place of C's init (folded:
            // the row is stored, not added to), streamed where k is a multiple of 4.
            traces.push(("reverse_cache_write at the row", row_cache_trace(k as u64, k % 4 == 0)));
        }
        for (name, trace) in traces {
            for (target, out) in run_scheduled(&p, &trace, &inputs) {
                assert_dense(&format!("{name} {target}"), &out, &[m, k], &want);
            }
        }
    }
}

/// SpMM with the features specialized to `k` and split by 4 (the chunks outside the row's
/// entries), each row accumulated in a local cache at `spmm:i` (`reverse_cache_write`), and
/// with `stream` the row's stores annotated `nontemporal`.
fn row_cache_trace(k: u64, stream: bool) -> Vec<Instruction> {
    let mut t = vec![
        Instruction::Specialize {
            param: s("feat"),
            value: k,
        },
        split("spmm:k", 4),
        Instruction::Reorder {
            loops: vec![s("k.0"), s("j")],
        },
        reverse_cache_write("spmm", "C", "local", "spmm:i"),
    ];
    if stream {
        t.push(Instruction::Annotate {
            r#loop: s("spmm:i"),
            key: s("nontemporal"),
            value: 1,
        });
    }
    t
}

/// A reverse write cache of a whole row folds the init of `C` in where the two cover the same
/// elements, counted by running their loops: with 10 features split by 4 (the last chunk
/// guarded), `C` is no longer zeroed, and each element is stored from the cache once, not
/// added to. `nontemporal` accepts loops that store consecutive elements, and rejects others.
#[test]
fn reverse_cache_write_of_a_row_folds_the_init_of_split_features() {
    let p = kernel("spmm");
    for k in [8, 10] {
        let text = ir(&p, &row_cache_trace(k, false));
        assert!(!text.contains("spmm_init"), "k = {k}:\n{text}");
        assert!(
            text.contains("C[i, k.C_local.out] = C_local["),
            "k = {k}:\n{text}"
        );
        assert!(!text.contains("C[i, k.C_local.out] + "), "k = {k}:\n{text}");
    }
    // A feature width not specialized: the init's range is not known, nothing folds.
    let generic = vec![
        split("spmm:k", 4),
        reverse_cache_write("spmm", "C", "local", "k.0"),
    ];
    let text = ir(&p, &generic);
    assert!(
        text.contains("spmm_init") && text.contains("C[i, k.C_local.out] + "),
        "{text}"
    );
    assert!(ir(&p, &row_cache_trace(8, true)).contains("attr nontemporal"));
    // A sum into C (no cache) is read back; the guarded last chunk of 10 features is not a
    // plain loop of stores.
    let nontemporal = Instruction::Annotate {
        r#loop: s("spmm:i"),
        key: s("nontemporal"),
        value: 1,
    };
    rejects("spmm", &[], nontemporal.clone(), "no loop under `spmm:i`");
    rejects(
        "spmm",
        &row_cache_trace(10, false),
        nontemporal,
        "stores consecutive elements",
    );
}

/// Applies `trace` then `inst`, which must fail with an error naming the primitive and
/// containing `needle`, leaving the schedule unchanged.
fn rejects(kernel_name: &str, trace: &[Instruction], inst: Instruction, needle: &str) {
    let p = kernel(kernel_name);
    let mut s = Schedule::replay(&p, trace).expect("the prefix applies");
    let before = print_func(&s.stage2().expect("lowers"));
    let e = s
        .apply(inst.clone())
        .expect_err(&format!("{inst:?} must be rejected"));
    let msg = e.to_string();
    assert!(
        msg.starts_with(inst.name()) && msg.contains(needle),
        "{msg}"
    );
    assert_eq!(s.trace().len(), trace.len());
    assert_eq!(print_func(&s.stage2().expect("lowers")), before);
}

#[test]
fn cache_primitives_reject_what_they_cannot_do() {
    let k4 = [split("sddmm:k", 4)];
    // Unknown scope, block, buffer, loop.
    rejects(
        "sddmm",
        &k4,
        cache_read("sddmm", "X", "texture", "k.0"),
        "`local` or `shared`",
    );
    rejects(
        "sddmm",
        &k4,
        cache_read("nope", "X", "local", "k.0"),
        "no block named `nope`",
    );
    rejects(
        "sddmm",
        &k4,
        cache_read("sddmm", "Q", "local", "k.0"),
        "no buffer named `Q`",
    );
    rejects(
        "sddmm",
        &k4,
        cache_read("sddmm", "X", "local", "zz"),
        "no loop named `zz`",
    );
    // A data-dependent / symbolic extent.
    rejects(
        "sddmm",
        &[],
        cache_read("sddmm", "X", "local", "sddmm:j"),
        "not a constant",
    );
    // The block writes C: cache_read of it is refused, cache_write of X too.
    rejects(
        "sddmm",
        &k4,
        cache_read("sddmm", "C", "local", "k.0"),
        "use cache_write",
    );
    rejects(
        "sddmm",
        &k4,
        cache_write("sddmm", "X", "local", "k.0"),
        "use cache_read",
    );
    // An index varying in two cached loops needs the reverse form (which takes it).
    let k22 = [Instruction::Split {
        r#loop: s("sddmm:k"),
        factors: vec![None, Some(2), Some(2)],
    }];
    rejects(
        "sddmm",
        &k22,
        cache_read("sddmm", "X", "local", "k.0"),
        "use reverse_cache_read",
    );
    let p = kernel("sddmm");
    let mut sch = Schedule::replay(&p, &k22).expect("splits");
    sch.apply(reverse_cache_read("sddmm", "X", "local", "k.0"))
        .expect("the reverse form takes any index");
    assert!(print_func(&sch.stage2().expect("lowers")).contains("alloc local X_local: f64[4]"));
    // A guard (`k < feat`) keeps the loops it reads in the copy stage: here k.0, of symbolic
    // extent.
    rejects(
        "sddmm",
        &[
            split("sddmm:k", 4),
            Instruction::Bound {
                r#loop: s("sddmm:j"),
                extent: 2,
            },
        ],
        cache_read("sddmm", "S", "local", "j.b"),
        "along loop `k.0`",
    );
    // A shared cache outside a GPU kernel.
    rejects(
        "sddmm",
        &k4,
        cache_read("sddmm", "X", "shared", "k.0"),
        "blockIdx",
    );
    // reverse_cache_write of something that is not a sum.
    rejects(
        "sddmm",
        &k4,
        reverse_cache_write("sddmm_init", "C", "local", "sddmm:j"),
        "not a sum",
    );
}

#[test]
fn set_scope_checks_where_the_buffer_is_accessed() {
    // rfactor's partial results are local scratch of the SpMV row loop.
    let rf = vec![
        split("spmv:j", 4),
        Instruction::Reorder {
            loops: vec![s("j.1"), s("j.0")],
        },
        Instruction::Rfactor { r#loop: s("j.1") },
    ];
    let set = |b: &str, sc: &str| Instruction::SetScope {
        buffer: s(b),
        scope: s(sc),
    };
    // Not a scratch buffer, unknown, unknown scope, same scope.
    rejects("spmv", &rf, set("y", "shared"), "not a scratch buffer");
    rejects("spmv", &rf, set("nope", "local"), "no buffer named `nope`");
    rejects("spmv", &rf, set("y_rf", "texture"), "unknown scope");
    rejects("spmv", &rf, set("y_rf", "local"), "already");
    // Shared needs a GPU kernel.
    rejects("spmv", &rf, set("y_rf", "shared"), "GPU kernel");
    // On a GPU kernel with the rows on threads, the partials are allocated inside a thread loop:
    // not shared.
    let mut gpu = vec![
        Instruction::Split {
            r#loop: s("spmv:i"),
            factors: vec![None, Some(8)],
        },
        Instruction::Bind {
            r#loop: s("i.0"),
            thread: s("blockIdx.x"),
        },
        Instruction::Bind {
            r#loop: s("i.1"),
            thread: s("threadIdx.x"),
        },
    ];
    gpu.extend(rf.iter().cloned());
    rejects("spmv", &gpu, set("y_rf", "shared"), "threadIdx");
    // Global is legal on the CPU, and set back to local restores the IR.
    let p = kernel("spmv");
    let mut sch = Schedule::replay(&p, &rf).expect("applies");
    let local = print_func(&sch.stage2().expect("lowers"));
    sch.apply(set("y_rf", "global")).expect("global on the CPU");
    let global = print_func(&sch.stage2().expect("lowers"));
    assert!(global.contains("alloc global y_rf"), "{global}");
    insta::assert_snapshot!("set_scope_global", global);
    sch.apply(set("y_rf", "local")).expect("back to local");
    assert_eq!(print_func(&sch.stage2().expect("lowers")), local);
}

proptest! {
    #![proptest_config(config())]

    /// set_scope(global) of rfactor's partials keeps SpMV's result.
    #[test]
    fn set_scope_preserves_spmv((m, n, rows) in sparse_matrix(), seed in any::<u64>()) {
        let p = kernel("spmv");
        let x = values(n, seed);
        let a = to_dense(m, n, &rows);
        let want: Vec<f64> = (0..m).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect();
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(to_coo(m, n, &rows))),
            ("x".to_string(), dense(&[n], x)),
        ]);
        let trace = vec![
            split("spmv:j", 4),
            Instruction::Reorder { loops: vec![s("j.1"), s("j.0")] },
            Instruction::Rfactor { r#loop: s("j.1") },
            Instruction::SetScope { buffer: s("y_rf"), scope: s("global") },
        ];
        for (target, out) in run_scheduled(&p, &trace, &inputs) {
            assert_dense(&format!("set_scope {target}"), &out, &[m], &want);
        }
    }
}
