//! Parallel loops on the rayon runtime: with 1 to 4 worker threads, on skewed matrices (one
//! dense row, many empty rows, a single row, nnz = 0), scheduled kernels give the stage-II
//! interpreter's results bit for bit (rows are independent and summed in order), and the
//! runtime balances rows by stored entries when the body walks a row-pointer array.

mod common;

use lacuna::driver::{load_kernel, load_schedule, Executable, Target};
use lacuna::ir::{ArrayData, CooTensor, DenseArray};
use lacuna::stage1::{Input, Output, Program, Role};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

fn example(name: &str) -> Program {
    load_kernel(&Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/{name}.ron")))
        .expect("kernel")
}

fn schedule(name: &str) -> lacuna::schedule::ScheduleFile {
    load_schedule(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/schedules/{name}.ron")),
    )
    .expect("schedule")
}

/// Skewed patterns: `style` 0 random, 1 one dense row among empty ones, 2 many empty rows,
/// 3 a single row, 4 no entries.
fn matrix() -> impl Strategy<Value = (usize, usize, Vec<(usize, usize, f64)>)> {
    (1usize..40, 1usize..30, 0u8..5, any::<u64>()).prop_map(|(m, n, style, seed)| {
        let (m, entries) = common::skewed_entries(m, n, style, seed);
        (m, n, entries)
    })
}

fn coo(m: usize, n: usize, e: &[(usize, usize, f64)]) -> CooTensor {
    CooTensor {
        shape: vec![m, n],
        coords: vec![
            e.iter().map(|t| t.0).collect(),
            e.iter().map(|t| t.1).collect(),
        ],
        values: ArrayData::F64(e.iter().map(|t| t.2).collect()),
    }
}

fn dense(shape: Vec<usize>, seed: usize) -> Input {
    let len = shape.iter().product();
    let data = (0..len)
        .map(|k| ((k * 37 + seed) % 29) as f64 / 7.0 - 2.0)
        .collect();
    Input::Dense(DenseArray {
        shape,
        data: ArrayData::F64(data),
    })
}

fn run(p: &Program, s: &str, inputs: &BTreeMap<String, Input>, target: Target) -> Output {
    let o = p
        .buffers
        .iter()
        .find(|x| x.role == Role::Output)
        .expect("an output");
    // Converts decomposed inputs (`sell`) as `lacuna run` does.
    let mut report = lacuna::driver::run_kernel_scheduled(
        p,
        Some(&schedule(s)),
        inputs,
        &BTreeMap::new(),
        target,
        1,
    )
    .expect("schedule applies and runs");
    report.outputs.remove(&o.name).expect("the output")
}

fn values(o: &Output) -> Vec<f64> {
    match o {
        Output::Dense(d) => d.data.to_f64_vec(),
        Output::Coo(c) => c.values.to_f64_vec(),
        Output::Sparse(t) => t.values().to_f64_vec(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn parallel_schedules_equal_the_interpreter_at_every_thread_count((m, n, e) in matrix(), k in 1usize..6) {
        let a = Input::Coo(coo(m, n, &e));
        let cases = [
            ("spmv", "spmv_parallel", BTreeMap::from([("A".to_string(), a.clone()), ("x".to_string(), dense(vec![n], 1))])),
            // Sliced ELL: groups of 8 rows as vector lanes, groups in parallel.
            ("spmv", "spmv_sell", BTreeMap::from([("A".to_string(), a.clone()), ("x".to_string(), dense(vec![n], 1))])),
            // Column panels (one here: the matrices are narrower than a panel), y zeroed and
            // each panel's rows in parallel.
            ("spmv", "spmv_panels", BTreeMap::from([("A".to_string(), a.clone()), ("x".to_string(), dense(vec![n], 1))])),
            // Prefetches 64 entries ahead across rows: clamped at each chunk's last entry.
            ("spmv", "spmv_prefetch", BTreeMap::from([("A".to_string(), a.clone()), ("x".to_string(), dense(vec![n], 1))])),
            ("spmm", "spmm_split_k", BTreeMap::from([("A".to_string(), a.clone()), ("B".to_string(), dense(vec![n, k], 2))])),
            ("sddmm", "sddmm_parallel", BTreeMap::from([
                ("S".to_string(), a.clone()),
                ("X".to_string(), dense(vec![m, k], 3)),
                ("W".to_string(), dense(vec![n, k], 4)),
            ])),
        ];
        for (kernel, sched, inputs) in cases {
            let p = example(kernel);
            let want = run(&p, sched, &inputs, Target::Interp);
            let mut first = None;
            for threads in 1..=4 {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
                let got = pool.install(|| run(&p, sched, &inputs, Target::Jit));
                // Compiled code may fuse a product and its sum (one rounding instead of two,
                // `CodegenOptions::fp_contract`): within 1e-12 relative of the interpreter...
                let (g, w) = (values(&got), values(&want));
                prop_assert_eq!(g.len(), w.len());
                for (x, y) in g.iter().zip(&w) {
                    prop_assert!((x - y).abs() <= 1e-12 * y.abs().max(1.0), "{} with {} threads: {} vs {}", kernel, threads, x, y);
                }
                // ...and bit for bit the same at every thread count.
                match &first {
                    None => first = Some(got),
                    Some(f) => prop_assert_eq!(&got, f, "{} with {} threads vs 1", kernel, threads),
                }
            }
        }
        // SpMM over `rcm`'s rows (every row once, in reverse Cuthill–McKee order), each row
        // summed in registers and stored once (streamed where the width splits evenly), the
        // rows in parallel; SpMM and SpMV over BSR blocks of 2, 3 and 4 (the rest, in the last
        // rows and columns, as CSR), indexed without range checks, each block row's rows of
        // the result in registers, the block rows in parallel.
        let file = |kernel: &str, trace| lacuna::schedule::ScheduleFile {
            version: 1,
            kernel: kernel.into(),
            trace,
        };
        let reference = |p: &Program, inputs: &BTreeMap<String, Input>, out: &str| {
            values(&lacuna::driver::run_kernel(p, inputs, &BTreeMap::new(), Target::Interp, 1).expect("runs").outputs[out])
        };
        let p = example("spmm");
        let inputs = BTreeMap::from([("A".to_string(), a.clone()), ("B".to_string(), dense(vec![n, k], 2))]);
        let want = reference(&p, &inputs, "C");
        let rcm = lacuna::driver::spmm_rcm_trace(k, 2, k % 2 == 0, false, k % 2 == 0, true);
        assert_threads_agree(&p, &file("spmm", rcm), &inputs, &want);
        let spmv = example("spmv");
        let spmv_inputs = BTreeMap::from([("A".to_string(), a.clone()), ("x".to_string(), dense(vec![n], 1))]);
        let spmv_want = reference(&spmv, &spmv_inputs, "y");
        for block in 2..=4 {
            let bsr = lacuna::driver::spmm_bsr_trace(block, k, 2, true);
            assert_threads_agree(&p, &file("spmm", bsr), &inputs, &want);
            let bsr = lacuna::driver::spmv_bsr_trace(block, true);
            assert_threads_agree(&spmv, &file("spmv", bsr), &spmv_inputs, &spmv_want);
        }
    }
}

#[test]
fn parallel_loops_are_compiled_to_the_runtime_and_balanced_by_nnz() {
    let p = example("spmv");
    let (_, exe) =
        Executable::build_with(&p, Some(&schedule("spmv_parallel")), Target::Jit).expect("builds");
    assert!(exe.has_parallel_loops());
    let Executable::Jit(k) = &exe else {
        panic!("a JIT kernel")
    };
    // The row loop walks `J.indptr[i]..J.indptr[i + 1]`: its i32 row pointers balance the
    // chunks (weight width 32 is passed to the runtime).
    let call = k
        .llvm_ir()
        .lines()
        .find(|l| l.contains("call void @lacuna_rt_parallel_for"))
        .expect("a parallel-for call");
    assert!(
        call.trim_end().ends_with("i64 32)") || call.contains("i64 32)"),
        "{call}"
    );
    // Without a schedule nothing is parallel.
    let (_, serial) = Executable::build_with(&p, None, Target::Jit).expect("builds");
    assert!(!serial.has_parallel_loops());
}

/// The built-in schedules (register-blocked SpMM at k = 16..64, vector-blocked SpMM at
/// k = 96..512, vectorized SpMV rows on long rows, rows in parallel from 20 000 entries) give
/// the unscheduled kernel's results.
#[test]
fn built_in_schedules_keep_results() {
    use lacuna::driver::{default_schedule, run_kernel, run_kernel_scheduled, DataStats};
    let (m, n) = (4000, 2000);
    let mut e = Vec::new();
    for i in 0..m {
        // Skewed: a few long rows, many short or empty ones (6 per row on average: SpMV's
        // rows stay scalar, below `SPMV_VECTOR_MIN_ROW`, except on hosts with vector masks,
        // where lengths changing from row to row make them masked vector lanes).
        let len = if i % 199 == 0 { 400 } else { i % 9 };
        for t in 0..len {
            e.push((i, (i * 31 + t * 17) % n, ((i + t) % 11) as f64 / 3.0 - 1.5));
        }
    }
    e.sort_by_key(|x| (x.0, x.1));
    e.dedup_by_key(|x| (x.0, x.1));
    assert!(e.len() >= lacuna::driver::PARALLEL_MIN_NNZ);
    assert!((e.len() as f64) < lacuna::driver::SPMV_VECTOR_MIN_ROW * m as f64);
    let a = Input::Coo(coo(m, n, &e));
    let masks = lacuna::target::host_has_vector_masks();
    let whole = lacuna::target::host_blocks_whole_width();
    // Long rows (33..=80 entries, 56 on average, one empty row): SpMV's rows become vector lanes.
    let (lm, ln) = (700, 1500);
    let mut long = Vec::new();
    for i in 0..lm {
        let len = if i == 3 { 0 } else { 33 + (i * 7) % 48 };
        for t in 0..len {
            long.push((
                i,
                (i * 13 + t * 29) % ln,
                ((i * 3 + t) % 13) as f64 / 4.0 - 1.5,
            ));
        }
    }
    long.sort_by_key(|x| (x.0, x.1));
    long.dedup_by_key(|x| (x.0, x.1));
    let long = Input::Coo(coo(lm, ln, &long));
    // Rows of 5..=25 entries (15 on average): SpMM's k = 128 splits by 64 on AVX-512 hosts.
    let (mm, mn) = (3000, 2500);
    let mut mid = Vec::new();
    for i in 0..mm {
        for t in 0..5 + (i * 11) % 21 {
            mid.push((
                i,
                (i * 7 + t * 97) % mn,
                ((i + 5 * t) % 17) as f64 / 6.0 - 1.4,
            ));
        }
    }
    mid.sort_by_key(|x| (x.0, x.1));
    mid.dedup_by_key(|x| (x.0, x.1));
    let mid = Input::Coo(coo(mm, mn, &mid));
    // (kernel, inputs, built-in unrolls, built-in vectorizes)
    for (kernel, inputs, unroll, vectorize) in [
        (
            "spmv",
            BTreeMap::from([
                ("A".to_string(), a.clone()),
                ("x".to_string(), dense(vec![n], 5)),
            ]),
            false,
            masks,
        ),
        (
            "spmv",
            BTreeMap::from([
                ("A".to_string(), long.clone()),
                ("x".to_string(), dense(vec![ln], 11)),
            ]),
            false,
            true,
        ),
        (
            "spmm",
            BTreeMap::from([
                ("A".to_string(), a.clone()),
                ("B".to_string(), dense(vec![n, 32], 6)),
            ]),
            // k = 32 whole, as vector lanes, on hosts that block the whole width.
            !whole,
            whole,
        ),
        (
            "spmm",
            BTreeMap::from([
                ("A".to_string(), a.clone()),
                ("B".to_string(), dense(vec![n, 48], 7)),
            ]),
            true,
            false,
        ),
        (
            "spmm",
            BTreeMap::from([
                ("A".to_string(), a.clone()),
                ("B".to_string(), dense(vec![n, 128], 12)),
            ]),
            false,
            true,
        ),
        (
            "spmm",
            BTreeMap::from([
                ("A".to_string(), mid.clone()),
                ("B".to_string(), dense(vec![mn, 128], 16)),
            ]),
            false,
            true,
        ),
        (
            "spmm",
            BTreeMap::from([
                ("A".to_string(), a.clone()),
                ("B".to_string(), dense(vec![n, 5], 8)),
            ]),
            false,
            false,
        ),
        (
            "sddmm",
            BTreeMap::from([
                ("S".to_string(), a.clone()),
                ("X".to_string(), dense(vec![m, 24], 9)),
                ("W".to_string(), dense(vec![n, 24], 10)),
            ]),
            false,
            true,
        ),
        // k = 64: specialized, rows of W prefetched (clamped at the last entry).
        (
            "sddmm",
            BTreeMap::from([
                ("S".to_string(), a.clone()),
                ("X".to_string(), dense(vec![m, 64], 14)),
                ("W".to_string(), dense(vec![n, 64], 15)),
            ]),
            false,
            true,
        ),
    ] {
        let p = example(kernel);
        let s = default_schedule(&p, &inputs).expect("a built-in schedule for a large input");
        let names: Vec<&str> = s.trace.iter().map(|t| t.name()).collect();
        assert!(names.contains(&"parallel"), "{kernel}: {names:?}");
        // Where `B` exceeds this host's L2 (512 KiB on Zen 3, 2 MiB on the Xeons) and reverse
        // Cuthill–McKee order saves far gathers, SpMM's rows run in that order, each row of
        // `C` summed in registers across its unrolled chunks.
        let rcm = kernel == "spmm" && lacuna::driver::spmm_by_rcm(&DataStats::of(&inputs));
        if rcm {
            assert!(decomposes_into(&s, "rcm"), "{kernel}: {names:?}");
        }
        assert_eq!(
            names.contains(&"unroll"),
            unroll || rcm,
            "{kernel}: {names:?}"
        );
        assert_eq!(
            names.contains(&"vectorize"),
            vectorize,
            "{kernel}: {names:?}"
        );
        let want = run_kernel(&p, &inputs, &BTreeMap::new(), Target::Interp, 1).expect("runs");
        let got = run_kernel_scheduled(&p, Some(&s), &inputs, &BTreeMap::new(), Target::Jit, 1)
            .expect("runs");
        for (name, w) in &want.outputs {
            let (g, w) = (
                got.outputs[name].values().to_f64_vec(),
                w.values().to_f64_vec(),
            );
            assert_eq!(g.len(), w.len());
            for (x, y) in g.iter().zip(&w) {
                assert!(
                    (x - y).abs() <= 1e-12 * y.abs().max(1.0),
                    "{kernel}: {x} vs {y}"
                );
            }
        }
    }
}

/// SpMM's built-in schedule prefetches the rows of `B` it gathers exactly when `B` exceeds
/// `SPMM_PREFETCH_MIN_BYTES` on a host whose hardware prefetchers do not cover them, and the
/// schedule replays (the annotation names a loop of it).
#[test]
fn builtin_spmm_prefetches_gathers_only_beyond_the_cache() {
    use lacuna::driver::{builtin_schedule, DataStats, SPMM_PREFETCH_MIN_BYTES};
    let p = example("spmm");
    for (bytes, hw, want) in [
        (SPMM_PREFETCH_MIN_BYTES - 8, false, false),
        (SPMM_PREFETCH_MIN_BYTES, false, true),
        (SPMM_PREFETCH_MIN_BYTES, true, false),
    ] {
        let stats = DataStats {
            nnz: 1_000_000,
            rows: 30_000,
            feat: Some(128),
            gathered_bytes: bytes,
            hw_prefetches_rows: hw,
            ..Default::default()
        };
        let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
        assert_eq!(
            prefetches(&s),
            want,
            "{bytes} bytes, hardware {hw}: {:?}",
            s.trace
        );
        lacuna::schedule::Schedule::replay(&p, &s.trace).expect("replays");
    }
}

/// SpMM's built-in schedule splits k = 128 .. 512 by 64 exactly on AVX-512 hosts, for widths
/// that are multiples of 64 and rows of `SPMM_WIDE_CHUNK_ROWS` entries on average; by 32
/// otherwise; k = 32 by 32 (whole) on hosts that block the whole width, by 16 elsewhere; the
/// schedule replays.
#[test]
fn builtin_spmm_splits_wide_features_by_64_on_avx512_mid_rows() {
    use lacuna::driver::{builtin_schedule, DataStats, SPMM_WIDE_CHUNK_ROWS as R};
    let p = example("spmm");
    let chunk = |s: &lacuna::schedule::ScheduleFile| {
        s.trace.iter().find_map(|t| match t {
            lacuna::schedule::Instruction::Split { factors, .. } => {
                factors.last().copied().flatten()
            }
            _ => None,
        })
    };
    let rows_for = |mean: f64| (1_000_000.0 / mean).ceil() as usize;
    // (k, mean entries per row, AVX-512, split)
    for (k, mean, masks, want) in [
        (128, 12.0, true, 64),
        (256, 44.0, true, 64),
        (512, R.start, true, 64),
        (128, 12.0, false, 32),
        (96, 12.0, true, 32),
        (160, 12.0, true, 32),
        (128, 5.0, true, 32),
        (128, R.end + 9.0, true, 32),
        (32, 12.0, true, 16),
        (64, 12.0, true, 16),
    ] {
        for whole in [false, true] {
            let want = if k == 32 && whole { 32 } else { want };
            let stats = DataStats {
                nnz: 1_000_000,
                rows: rows_for(mean),
                feat: Some(k),
                vector_masks: masks,
                whole_width_blocks: whole,
                ..Default::default()
            };
            let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
            assert_eq!(
                chunk(&s),
                Some(want),
                "k {k}, {mean} per row, masks {masks}, whole {whole}: {:?}",
                s.trace
            );
            lacuna::schedule::Schedule::replay(&p, &s.trace).expect("replays");
        }
    }
}

/// The whole-width k = 32 blocks give the interpreter's results on every host, whichever this
/// host's built-in schedule uses, with rows in parallel on 1 to 4 threads.
#[test]
fn whole_width_spmm_blocks_keep_results() {
    use lacuna::driver::{builtin_schedule, run_kernel, run_kernel_scheduled, DataStats};
    let (m, n) = (3000, 1700);
    let mut e = Vec::new();
    for i in 0..m {
        // One long row, empty rows, and rows of 1..=12 entries.
        let len = if i == 17 { 900 } else { i % 13 };
        for t in 0..len {
            e.push((
                i,
                (i * 7 + t * 131) % n,
                ((i + 3 * t) % 17) as f64 / 5.0 - 1.6,
            ));
        }
    }
    e.sort_by_key(|x| (x.0, x.1));
    e.dedup_by_key(|x| (x.0, x.1));
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(coo(m, n, &e))),
        ("B".to_string(), dense(vec![n, 32], 21)),
    ]);
    let p = example("spmm");
    let stats = DataStats {
        whole_width_blocks: true,
        ..DataStats::of(&inputs)
    };
    let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
    assert!(
        s.trace.iter().any(|t| matches!(t,
            lacuna::schedule::Instruction::Split { factors, .. } if factors.last() == Some(&Some(32)))),
        "{:?}",
        s.trace
    );
    let want = run_kernel(&p, &inputs, &BTreeMap::new(), Target::Interp, 1).expect("runs");
    let want = want.outputs["C"].values().to_f64_vec();
    for threads in 1..=4 {
        let pool = lacuna::target::pool_builder(threads).build().expect("pool");
        let got = pool.install(|| {
            run_kernel_scheduled(&p, Some(&s), &inputs, &BTreeMap::new(), Target::Jit, 1)
                .expect("runs")
        });
        let got = got.outputs["C"].values().to_f64_vec();
        assert_eq!(got.len(), want.len());
        for (x, y) in got.iter().zip(&want) {
            assert!(
                (x - y).abs() <= 1e-12 * y.abs().max(1.0),
                "{threads} threads: {x} vs {y}"
            );
        }
    }
}

fn prefetches(s: &lacuna::schedule::ScheduleFile) -> bool {
    s.trace.iter().any(
        |t| matches!(t, lacuna::schedule::Instruction::Annotate { key, .. } if key == "prefetch"),
    )
}

/// SDDMM's built-in schedule specializes the feature width exactly for widths from
/// `SDDMM_SPECIALIZE_MIN_FEAT` to `SDDMM_SPECIALIZE_MAX_FEAT`, and prefetches the rows of `W`
/// there: `SDDMM_PREFETCH_DISTANCE` entries ahead from the first specialized width on hosts
/// whose prefetchers do not cover gathered rows, and on the others
/// `SDDMM_SHORT_ROWS_PREFETCH_DISTANCE` ahead at the widths of `SDDMM_SHORT_ROWS_PREFETCH`,
/// `SDDMM_PREFETCH_DISTANCE` ahead from `SDDMM_PREFETCH_MIN_FEAT` beyond them, none below;
/// reading the width of `W` as `lacuna run` binds it; the schedule replays.
#[test]
fn builtin_sddmm_prefetches_wide_rows_only() {
    use lacuna::driver::{
        builtin_schedule, DataStats, SDDMM_PREFETCH_DISTANCE as D, SDDMM_PREFETCH_MIN_FEAT as PF,
        SDDMM_SHORT_ROWS_PREFETCH as SHORT, SDDMM_SHORT_ROWS_PREFETCH_DISTANCE as DS,
        SDDMM_SPECIALIZE_MAX_FEAT as HI, SDDMM_SPECIALIZE_MIN_FEAT as LO,
    };
    let p = example("sddmm");
    assert!(*SHORT.start() > LO && *SHORT.end() < HI);
    // (k, hardware prefetches rows, specialized, prefetched this many entries ahead)
    for (feat, hw, fixed, prefetched) in [
        (8, false, false, None),
        (LO - 1, false, false, None),
        (LO, false, true, Some(D)),
        (32, false, true, Some(D)),
        (64, false, true, Some(D)),
        (LO, true, true, None),
        (*SHORT.start() - 8, true, true, None),
        (*SHORT.start(), true, true, Some(DS)),
        (32, true, true, Some(DS)),
        (*SHORT.end(), true, true, Some(DS)),
        (PF.max(*SHORT.end() + 32), true, true, Some(D)),
        (128, true, true, Some(D)),
        (128, false, true, Some(D)),
        (HI, true, true, Some(D)),
        (HI + 32, false, false, None),
        (HI + 32, true, false, None),
    ] {
        let stats = DataStats {
            nnz: 1_000_000,
            rows: 30_000,
            feat: Some(feat),
            gathered_bytes: 30_000 * feat * 8,
            hw_prefetches_rows: hw,
            ..Default::default()
        };
        let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
        let specialized = s
            .trace
            .iter()
            .any(|t| matches!(t, lacuna::schedule::Instruction::Specialize { value, .. } if *value == feat as u64));
        let distance = s.trace.iter().find_map(|t| match t {
            lacuna::schedule::Instruction::Annotate { key, value, .. } if key == "prefetch" => {
                Some(*value)
            }
            _ => None,
        });
        assert_eq!(distance, prefetched, "k = {feat}, hw {hw}: {:?}", s.trace);
        assert_eq!(specialized, fixed, "k = {feat}, hw {hw}: {:?}", s.trace);
        lacuna::schedule::Schedule::replay(&p, &s.trace).expect("replays");
    }
    let (m, n) = (30, 20);
    let inputs = BTreeMap::from([
        (
            "S".to_string(),
            Input::Coo(coo(m, n, &[(0, 1, 1.0), (29, 19, 2.0)])),
        ),
        ("X".to_string(), dense(vec![m, 96], 1)),
        ("W".to_string(), dense(vec![n, 96], 2)),
    ]);
    let stats = DataStats::of(&inputs);
    assert_eq!((stats.feat, stats.gathered_bytes), (Some(96), n * 96 * 8));
}

/// SDDMM's built-in schedule on a host whose prefetchers cover gathered rows, at the widths it
/// prefetches `SDDMM_SHORT_ROWS_PREFETCH_DISTANCE` entries ahead (beyond a row's end, across
/// rows, and past the last entry, which a prefetch never faults on), gives the interpreter's
/// results at 1 to 4 threads on skewed matrices (one dense row, many empty rows, a single row,
/// no entries).
#[test]
fn builtin_sddmm_prefetched_far_ahead_keeps_results() {
    use lacuna::driver::{builtin_schedule, run_kernel, DataStats, SDDMM_SHORT_ROWS_PREFETCH};
    let p = example("sddmm");
    for k in [
        *SDDMM_SHORT_ROWS_PREFETCH.start(),
        *SDDMM_SHORT_ROWS_PREFETCH.end(),
    ] {
        for style in 0..5u8 {
            let (m, e) = common::skewed_entries(90, 70, style, 11 + style as u64);
            let n = 70;
            let inputs = BTreeMap::from([
                ("S".to_string(), Input::Coo(coo(m, n, &e))),
                ("X".to_string(), dense(vec![m, k], 3)),
                ("W".to_string(), dense(vec![n, k], 4)),
            ]);
            let stats = DataStats {
                hw_prefetches_rows: true,
                ..DataStats::of(&inputs)
            };
            let mut s = builtin_schedule(&p, &stats).expect("a built-in schedule");
            assert!(prefetches(&s), "k = {k}: {:?}", s.trace);
            if !parallel(&s) {
                // Small inputs stay serial; run the rows in parallel too.
                s.trace.push(lacuna::schedule::Instruction::Parallel {
                    r#loop: "sddmm:i".into(),
                });
            }
            let want = run_kernel(&p, &inputs, &BTreeMap::new(), Target::Interp, 1).expect("runs");
            let want = want.outputs["C"].values().to_f64_vec();
            let mut first = None;
            for threads in 1..=4 {
                let got = jit_output(&p, &s, &inputs, threads);
                // Vector lanes reassociate the dot product: within a relative 1e-12.
                assert_close(
                    &got,
                    &want,
                    &format!("k = {k}, style {style}, {threads} threads"),
                );
                match &first {
                    None => first = Some(got),
                    Some(f) => assert_eq!(&got, f, "{threads} threads vs 1"),
                }
            }
        }
    }
}

/// SpMV's built-in schedule prefetches its gathers of `x` exactly when they are scattered
/// (`SPMV_PREFETCH_MIN_SCATTERED`) over an `x` of `SPMV_PREFETCH_MIN_BYTES` or more with short
/// rows, or of `SPMV_VECTOR_PREFETCH_MIN_BYTES` or more with rows long enough for vector lanes
/// (`SPMV_VECTOR_MIN_ROW`), unless it stores the matrix in column panels instead (short rows,
/// `x` of `SPMV_PANELS_MIN_BYTES` or more); the schedule replays.
#[test]
fn builtin_spmv_prefetches_scattered_gathers_only() {
    use lacuna::driver::{
        builtin_schedule, by_panels, DataStats, SPMV_PANELS_MIN_BYTES as P,
        SPMV_PREFETCH_MIN_BYTES as B, SPMV_PREFETCH_MIN_SCATTERED as S,
        SPMV_VECTOR_PREFETCH_MIN_BYTES as V,
    };
    let p = example("spmv");
    for (rows, bytes, scattered, want) in [
        // 4 entries per row: scalar rows.
        (250_000, B, S, true),
        (250_000, B - 8, S, false),
        (250_000, B, S - 1, false),
        (250_000, P - 8, 1000, true),
        // In column panels, gathering from a slice of `x` at a time: no prefetch.
        (250_000, P * 4, 1000, false),
        // 10 and 50 entries per row: vector lanes, which prefetch only from V bytes (from
        // there rows shorter than SPMV_UNMASKED_MIN_ROW run scalar, prefetched, or in panels).
        (100_000, B * 4, 1000, false),
        (100_000, V, S, V < P),
        (100_000, V - 8, S, false),
        (20_000, V, S - 1, false),
        (20_000, V * 4, 1000, true),
        // The vector lanes' threshold: 8 entries per row on average.
        (125_000, B, S, false),
        (125_001, B, S, true),
    ] {
        let stats = DataStats {
            nnz: 1_000_000,
            rows,
            gathered_bytes: bytes,
            scattered_permille: scattered,
            ..Default::default()
        };
        let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
        assert_eq!(
            prefetches(&s),
            want,
            "{rows} rows, {bytes} bytes, {scattered}‰: {:?}",
            s.trace
        );
        assert_eq!(decomposes_into(&s, "(panels"), by_panels(&stats));
        if by_panels(&stats) {
            lacuna::schedule::Schedule::replay(&p, &s.trace).expect("replays");
            continue;
        }
        let vector = s
            .trace
            .iter()
            .any(|t| matches!(t, lacuna::schedule::Instruction::Vectorize { .. }));
        let far = scattered >= S && bytes >= V;
        assert_eq!(
            vector,
            stats.mean_row() >= lacuna::driver::SPMV_VECTOR_MIN_ROW
                && !(far && stats.mean_row() < lacuna::driver::SPMV_UNMASKED_MIN_ROW),
            "{rows} rows: {:?}",
            s.trace
        );
        lacuna::schedule::Schedule::replay(&p, &s.trace).expect("replays");
    }
}

/// SpMV's built-in schedule runs rows as masked vector lanes (`annotate(j, masked, 2)`) exactly
/// on hosts with vector masks when row lengths change for `SPMV_MASKED_MIN_ROW_CHANGES` or more
/// of the rows, whatever their mean length on hosts whose masks pay off on long rows, and only
/// below `SPMV_UNMASKED_MIN_ROW` (below `SPMV_VECTOR_MIN_ROW` with `x` within
/// `SPMV_L1_GATHER_BYTES`) on the others; the schedule replays, and on a skewed matrix its
/// compiled code equals the interpreter whether the host has masks or not.
#[test]
fn builtin_spmv_masks_rows_whose_lengths_change() {
    use lacuna::driver::{
        builtin_schedule, run_kernel, DataStats, SPMV_L1_GATHER_BYTES as L1,
        SPMV_MASKED_MIN_ROW_CHANGES as C, SPMV_VECTOR_MIN_ROW,
    };
    let p = example("spmv");
    let masked = |s: &lacuna::schedule::ScheduleFile| {
        s.trace.iter().any(|t| {
            matches!(t, lacuna::schedule::Instruction::Annotate { key, value: 2, .. } if key == "masked")
        })
    };
    let vector = |s: &lacuna::schedule::ScheduleFile| {
        s.trace
            .iter()
            .any(|t| matches!(t, lacuna::schedule::Instruction::Vectorize { .. }))
    };
    // Unmasked vector rows of 40 entries or more fill 512-bit vectors on AVX-512 hosts.
    let lanes = |s: &lacuna::schedule::ScheduleFile| {
        s.trace.iter().any(|t| {
            matches!(t, lacuna::schedule::Instruction::Annotate { key, value: 8, .. } if key == "lanes")
        })
    };
    // (rows for 1M entries, row changes, host masks, masks on long rows, bytes of x, masked,
    // 8 lanes)
    let big = 1 << 20;
    for (rows, changes, masks, long, x, want, wide) in [
        (250_000, C, true, true, big, true, false),
        (250_000, 1000, true, true, big, true, false),
        (250_000, C - 1, true, true, big, false, false),
        (250_000, 1000, false, true, big, false, false),
        (20_000, C, true, true, big, true, false),
        (20_000, C - 1, true, true, big, false, true),
        (20_000, 1000, false, true, big, false, false),
        // Hosts whose masks lose on long rows: 4 per row masked wherever x lives, 10 per row
        // only beyond L1, 50 per row never.
        (250_000, C, true, false, big, true, false),
        (250_000, C, true, false, L1, true, false),
        (100_000, C, true, false, big, true, false),
        (100_000, C, true, false, L1, false, false),
        (100_000, C, true, false, L1 + 1, true, false),
        (20_000, C, true, false, big, false, true),
        (20_000, C - 1, true, false, big, false, true),
        // 8 lanes from 40 per row on average.
        (25_000, 0, true, false, big, false, true),
        (25_001, 0, true, false, big, false, false),
        (20_000, 0, false, false, big, false, false),
        (100_000, 0, true, true, big, false, false),
    ] {
        let stats = DataStats {
            nnz: 1_000_000,
            rows,
            row_changes_permille: changes,
            vector_masks: masks,
            masks_long_rows: long,
            gathered_bytes: x,
            ..Default::default()
        };
        let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
        let case = format!("{rows} rows, {changes}‰, masks {masks}, long {long}, x {x} B");
        assert_eq!(masked(&s), want, "{case}: {:?}", s.trace);
        assert_eq!(lanes(&s), wide, "{case}: {:?}", s.trace);
        assert_eq!(
            vector(&s),
            want || stats.mean_row() >= SPMV_VECTOR_MIN_ROW,
            "{case}: {:?}",
            s.trace
        );
        lacuna::schedule::Schedule::replay(&p, &s.trace).expect("replays");
    }
    // Rows of 0..=12 entries, lengths changing on every row, and one long row.
    let inputs = changing_rows(|i| if i == 1234 { 700 } else { (i * 5) % 13 });
    let stats = DataStats::of(&inputs);
    assert!(stats.row_changes_permille >= C, "{stats:?}");
    assert_eq!(stats.vector_masks, lacuna::target::host_has_vector_masks());
    assert_eq!(
        stats.masks_long_rows,
        lacuna::target::host_masks_long_rows()
    );
    assert_eq!(
        stats.hw_prefetches_rows,
        lacuna::target::host_prefetches_rows()
    );
    assert_eq!(
        stats.whole_width_blocks,
        lacuna::target::host_blocks_whole_width()
    );
    let want = run_kernel(&p, &inputs, &BTreeMap::new(), Target::Interp, 1).expect("runs");
    let want = want.outputs["y"].values().to_f64_vec();
    for masks in [false, true] {
        let s = builtin_schedule(
            &p,
            &DataStats {
                vector_masks: masks,
                gathers_rows: false,
                ..stats
            },
        )
        .expect("a built-in schedule");
        assert_eq!(masked(&s), masks);
        for threads in [1, 3] {
            // Vector lanes reassociate each row's sum.
            let got = jit_output(&p, &s, &inputs, threads);
            assert_close(&got, &want, &format!("masks {masks}, {threads} threads"));
        }
    }
}

/// SpMV's inputs: a 4000 × 900 `A` whose row `i` holds `len(i)` entries (fewer where columns
/// repeat), and an `x`.
fn changing_rows(len: impl Fn(usize) -> usize) -> BTreeMap<String, Input> {
    let (m, n) = (4000, 900);
    let mut e = Vec::new();
    for i in 0..m {
        for t in 0..len(i) {
            e.push((
                i,
                (i * 37 + t * 11) % n,
                ((i + 2 * t) % 17) as f64 / 5.0 - 1.7,
            ));
        }
    }
    e.sort_by_key(|x| (x.0, x.1));
    e.dedup_by_key(|x| (x.0, x.1));
    BTreeMap::from([
        ("A".to_string(), Input::Coo(coo(m, n, &e))),
        ("x".to_string(), dense(vec![n], 13)),
    ])
}

/// SpMV's `y` from the JIT with schedule `s` on a pool of `threads` workers.
fn jit_output(
    p: &Program,
    s: &lacuna::schedule::ScheduleFile,
    inputs: &BTreeMap<String, Input>,
    threads: usize,
) -> Vec<f64> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    let got = pool
        .install(|| {
            lacuna::driver::run_kernel_scheduled(
                p,
                Some(s),
                inputs,
                &BTreeMap::new(),
                Target::Jit,
                1,
            )
        })
        .expect("runs");
    let out = p
        .buffers
        .iter()
        .find(|b| b.role == Role::Output)
        .expect("an output");
    got.outputs[&out.name].values().to_f64_vec()
}

/// Equal lengths and each value within 1e-12 relative (at least absolute) of `want`'s.
fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (x, y) in got.iter().zip(want) {
        assert!(
            (x - y).abs() <= 1e-12 * y.abs().max(1.0),
            "{what}: {x} vs {y}"
        );
    }
}

/// Whether schedule `s` decomposes a buffer into a term starting with `head`.
fn decomposes_into(s: &lacuna::schedule::ScheduleFile, head: &str) -> bool {
    s.trace.iter().any(|t| {
        matches!(t, lacuna::schedule::Instruction::DecomposeFormat { into, .. } if into.starts_with(head))
    })
}

/// Whether schedule `s` runs a loop in parallel.
fn parallel(s: &lacuna::schedule::ScheduleFile) -> bool {
    s.trace
        .iter()
        .any(|t| matches!(t, lacuna::schedule::Instruction::Parallel { .. }))
}

/// Kernel `p` with schedule `s` at 1 to 4 threads: its output within 1e-12 of `reference`,
/// and bit for bit the same at every thread count.
fn assert_threads_agree(
    p: &Program,
    s: &lacuna::schedule::ScheduleFile,
    inputs: &BTreeMap<String, Input>,
    reference: &[f64],
) {
    let mut first = None;
    for threads in 1..=4 {
        let got = jit_output(p, s, inputs, threads);
        assert_close(&got, reference, &format!("{threads} threads"));
        match &first {
            None => first = Some(got),
            Some(f) => assert_eq!(&got, f, "{threads} threads vs 1"),
        }
    }
}

/// On hosts that gather rows across lanes, SpMV's built-in schedule stores rows of changing
/// lengths, and uniform rows that are not very short, as sliced ELL; elsewhere, and for long or
/// short uniform rows, it keeps CSR. The
/// sliced schedule gives the interpreters' results (to rounding: lanes reassociate nothing, but
/// products and sums may fuse) at 1 to 4 threads, on skewed rows (one long row, empty rows).
#[test]
fn builtin_spmv_runs_short_changing_rows_as_sliced_ell() {
    use lacuna::driver::{
        builtin_schedule, run_kernel, run_kernel_scheduled, sliced_rows, DataStats,
        SPMV_PREFETCH_MIN_SCATTERED as S, SPMV_SELL_MAX_ROW as R, SPMV_SELL_MIN_ROW_CHANGES as C,
        SPMV_SELL_UNIFORM_MIN_ROW as U,
    };
    let p = example("spmv");
    let sell = |s: &lacuna::schedule::ScheduleFile| decomposes_into(s, "(sell");
    // (entries, rows, row changes, host gathers rows, bytes of x, sliced); gathers scattered
    // unless stated
    let rows = |mean: f64| (1_000_000.0 / mean) as usize;
    let (x, big) = (1 << 20, lacuna::driver::SPMV_SELL_MAX_GATHER_BYTES);
    let check = |nnz: usize,
                 r: usize,
                 changes: usize,
                 gathers: bool,
                 bytes: usize,
                 scattered: usize,
                 want: bool| {
        let stats = DataStats {
            nnz,
            rows: r,
            row_changes_permille: changes,
            vector_masks: gathers,
            gathers_rows: gathers,
            gathered_bytes: bytes,
            scattered_permille: scattered,
            ..Default::default()
        };
        assert_eq!(sliced_rows(&stats), want, "{stats:?}");
        let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
        assert_eq!(sell(&s), want, "{stats:?}: {:?}", s.trace);
        if want {
            // Groups in parallel from the same size as rows.
            assert_eq!(
                parallel(&s),
                nnz >= lacuna::driver::PARALLEL_MIN_NNZ,
                "{:?}",
                s.trace
            );
        }
        lacuna::schedule::Schedule::replay(&p, &s.trace).expect("replays");
    };
    for (nnz, r, changes, gathers, bytes, want) in [
        (1_000_000, rows(5.0), 800, true, x, true),
        (1_000_000, rows(R - 0.5), C, true, x, true),
        (1_000_000, rows(R), 1000, true, x, false),
        (1_000_000, rows(5.0), C - 1, true, x, false),
        // Rows that rarely change length, from a mean of U.
        (1_000_000, rows(U), 0, true, x, true),
        (1_000_000, rows(U - 0.5), C - 1, true, x, false),
        (1_000_000, rows(R), 0, true, x, false),
        (1_000_000, rows(5.0), 800, false, x, false),
        (1_000_000, 0, 800, true, x, false),
        (10_000, 2_000, 800, true, x, true),
        // `x` beyond the caches: rows one by one, their gathers prefetched.
        (1_000_000, rows(5.0), 800, true, big - 1, true),
        (1_000_000, rows(5.0), 800, true, big, false),
    ] {
        check(nnz, r, changes, gathers, bytes, 1000, want);
    }
    // A stencil: gathers that stream through `x` run across lanes whatever its size.
    check(1_000_000, rows(7.0), C, true, big * 4, 0, true);
    check(1_000_000, rows(7.0), C, true, big * 4, S - 1, true);
    // Scattered gathers from an `x` beyond the caches: uniform rows run across lanes below
    // `SPMV_PANELS_MIN_BYTES`, in column panels from there (see
    // `builtin_spmv_stores_scattered_gathers_in_column_panels`).
    let panels = lacuna::driver::SPMV_PANELS_MIN_BYTES;
    assert!(big <= panels);
    check(1_000_000, rows(7.0), C - 1, true, panels - 8, 1000, true);
    check(1_000_000, rows(7.0), C, true, big * 4, 1000, false);
    let stats = DataStats {
        nnz: 1_000_000,
        rows: rows(7.0),
        row_changes_permille: C - 1,
        vector_masks: true,
        gathers_rows: true,
        gathered_bytes: panels,
        scattered_permille: 1000,
        ..Default::default()
    };
    assert!(sliced_rows(&stats));
    let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
    assert!(decomposes_into(&s, "(panels"), "{:?}", s.trace);
    // Rows of 0..=12 entries, one of 700 and a run of empty ones.
    let inputs = changing_rows(|i| match i {
        1234 => 700,
        2000..=2100 => 0,
        _ => (i * 5) % 13,
    });
    let stats = DataStats {
        gathers_rows: true,
        ..DataStats::of(&inputs)
    };
    assert_eq!(
        DataStats::of(&inputs).gathers_rows,
        lacuna::target::host_gathers_rows()
    );
    let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
    assert!(sell(&s) && parallel(&s), "{:?}", s.trace);
    let reference = run_kernel(&p, &inputs, &BTreeMap::new(), Target::Interp, 1).expect("runs");
    let reference = reference.outputs["y"].values().to_f64_vec();
    for target in [Target::Interp, Target::InterpStage1] {
        let got =
            run_kernel_scheduled(&p, Some(&s), &inputs, &BTreeMap::new(), target, 1).expect("runs");
        assert_eq!(
            got.outputs["y"].values().to_f64_vec(),
            reference,
            "{target:?}"
        );
    }
    assert_threads_agree(&p, &s, &inputs, &reference);
}

/// SpMV's built-in schedule stores a matrix whose entries lie on few, well-filled diagonals (a
/// stencil) by diagonal, its blocks of rows in parallel; other matrices keep their schedules.
/// The DIA kernel gives the interpreters' results (to rounding) at 1 to 4 threads on a
/// rectangular stencil with holes, an empty row and a row count that is not a multiple of the
/// lanes, whose columns reach past both ends of `x` for the first and last rows. Its blocks'
/// sums stay in registers (no guard in the vector loop) and are stored to `y` (the DIA part
/// sets every row once: no zeroing pass); without the local cache, the blocks still run in
/// parallel, zeroing their rows before adding to them.
#[test]
fn builtin_spmv_stores_stencils_by_diagonal() {
    use lacuna::driver::{
        builtin_schedule, by_diagonals, diagonal_count, run_kernel, DataStats,
        SPMV_DIA_MAX_DIAGONALS as D, SPMV_DIA_MAX_FILL as F,
    };
    let p = example("spmv");
    let dia = |s: &lacuna::schedule::ScheduleFile| decomposes_into(s, "(dia");
    // (rows, entries, diagonals, stored by diagonal); 8 rows per block, so `rows * diagonals`
    // slots for a multiple of 8.
    let full = |d: usize| 8000 * d;
    for (rows, nnz, diagonals, want) in [
        (8000, full(7), 7, true),
        (8000, full(D), D, true),
        (8000, full(D + 1), D + 1, false),
        (8000, (full(7) as f64 / F) as usize + 1, 7, true),
        (8000, (full(7) as f64 / F) as usize - 1, 7, false),
        (8000, 0, 0, false),
        (0, 0, 0, false),
        // Not a multiple of 8: the last block's spare lanes count as slots.
        (8001, 8001 * 5, 5, true),
    ] {
        let stats = DataStats {
            rows,
            nnz,
            diagonals,
            row_changes_permille: 500,
            gathers_rows: true,
            vector_masks: true,
            gathered_bytes: 1 << 20,
            scattered_permille: 1000,
            ..Default::default()
        };
        assert_eq!(by_diagonals(&stats), want, "{stats:?}");
        let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
        assert_eq!(dia(&s), want, "{stats:?}: {:?}", s.trace);
        if want {
            assert_eq!(parallel(&s), nnz >= lacuna::driver::PARALLEL_MIN_NNZ);
        }
    }
    // A 5003 x 5010 stencil on diagonals -9, -1, 0, 2 and 7, with holes and row 500 empty
    // (enough entries to run in parallel).
    let (m, n) = (5003, 5010);
    let mut e = Vec::new();
    for i in 0..m {
        for off in [-9i64, -1, 0, 2, 7] {
            let j = i as i64 + off;
            if (0..n as i64).contains(&j) && i != 500 && !(i * 7 + j as usize).is_multiple_of(23) {
                e.push((
                    i,
                    j as usize,
                    ((i + 3 * j as usize) % 19) as f64 / 4.0 - 2.3,
                ));
            }
        }
    }
    e.sort_by_key(|x| (x.0, x.1));
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(coo(m, n, &e))),
        ("x".to_string(), dense(vec![n], 5)),
    ]);
    let stats = DataStats::of(&inputs);
    assert_eq!(stats.diagonals, 5);
    assert_eq!(diagonal_count(&coo(m, n, &e)), 5);
    let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
    assert!(dia(&s) && parallel(&s), "{:?}", s.trace);
    // The diagonal loop runs the matrix's 5 diagonals, a constant trip count.
    assert!(
        s.trace
            .contains(&lacuna::schedule::Instruction::Specialize {
                param: "A.p0.diagonals".into(),
                value: 5
            }),
        "{:?}",
        s.trace
    );
    let (text, flat) = {
        let sched = lacuna::schedule::Schedule::replay(&p, &s.trace).expect("replays");
        let stage2 = sched.stage2().expect("lowers");
        let cfg = lacuna::stage2::Config::default();
        let flat =
            lacuna::stage2::lower_to_flat(stage2.clone(), &cfg, &mut |_, _| {}).expect("flattens");
        (
            lacuna::stage2::print_func(&stage2),
            lacuna::stage2::print_func(&flat),
        )
    };
    // Blocks whose rows and columns lie inside the matrix (by the least and greatest offset)
    // run a copy without range checks: unmasked loads of `x`, stores of `y` unguarded.
    let inside = flat
        .split(".hi < n {")
        .nth(1)
        .and_then(|t| t.split("} else {").next())
        .expect("a versioned block loop");
    assert!(flat.contains("A.p0.off.lo"), "{flat}");
    assert!(flat.contains("for j.p0.in in 0..5 {"), "{flat}");
    assert!(
        !inside.contains("select(") && !inside.contains("if "),
        "{inside}"
    );
    let vector = text
        .split("vectorized for")
        .nth(1)
        .and_then(|t| t.split("for i.p0.y_local").next())
        .expect("a vector loop, then the write-back");
    assert!(!vector.contains("if "), "{vector}");
    // `y` is not zeroed in a pass of its own, nor row by row: each block's sums are stored
    // (guarded at the last block), not added.
    assert!(!text.contains("_init"), "{text}");
    let write_back = text
        .split("for i.p0.y_local")
        .last()
        .expect("the write-back");
    assert!(
        write_back.starts_with(".out in 0..8 {")
            && write_back.contains(".y_local.out >= 0 {")
            && write_back.contains("] = y_local["),
        "{write_back}"
    );
    let reference = run_kernel(&p, &inputs, &BTreeMap::new(), Target::Interp, 1).expect("runs");
    let reference = reference.outputs["y"].values().to_f64_vec();
    assert_threads_agree(&p, &s, &inputs, &reference);
    // The cache's zeroing and its write-back have names of their own: a schedule names either.
    let mut named = s.clone();
    named.trace.extend([
        lacuna::schedule::Instruction::Vectorize {
            r#loop: "i.p0.y_local".into(),
        },
        lacuna::schedule::Instruction::Unroll {
            r#loop: "i.p0.y_local.out".into(),
        },
    ]);
    assert_threads_agree(&p, &named, &inputs, &reference);
    // The schedule on a matrix of other diagonals (the stencil without diagonal 7): an error
    // naming the part's offsets, not a wrong result.
    let fewer: Vec<_> = e.iter().copied().filter(|&(i, j, _)| j != i + 7).collect();
    let other = BTreeMap::from([
        ("A".to_string(), Input::Coo(coo(m, n, &fewer))),
        ("x".to_string(), dense(vec![n], 5)),
    ]);
    let Err(err) = lacuna::driver::run_kernel_scheduled(
        &p,
        Some(&s),
        &other,
        &BTreeMap::new(),
        Target::Jit,
        1,
    ) else {
        panic!("4 diagonals against a schedule of 5 ran");
    };
    assert!(err.to_string().contains("A.p0.off"), "{err}");
    let plain = lacuna::schedule::ScheduleFile {
        version: 1,
        kernel: "spmv".into(),
        trace: vec![
            lacuna::schedule::Instruction::DecomposeFormat {
                buffer: "A".into(),
                into: "(dia 8 4)".into(),
            },
            lacuna::schedule::Instruction::Parallel {
                r#loop: "spmv_p0:ig.p0".into(),
            },
        ],
    };
    assert_threads_agree(&p, &plain, &inputs, &reference);
    // After an ELL part has written its rows, the DIA part's sums are added, not stored.
    use lacuna::schedule::Instruction as I;
    let second = lacuna::schedule::ScheduleFile {
        version: 1,
        kernel: "spmv".into(),
        trace: vec![
            I::DecomposeFormat {
                buffer: "A".into(),
                into: "(+ (ell 1) (dia 8 8))".into(),
            },
            I::ReverseCacheWrite {
                block: "spmv_p1".into(),
                buffer: "y".into(),
                scope: "local".into(),
                at: Some("spmv_p1:ig.p1".into()),
            },
            I::Vectorize {
                r#loop: "spmv_p1:i.p1".into(),
            },
        ],
    };
    let text = {
        let sched = lacuna::schedule::Schedule::replay(&p, &second.trace).expect("replays");
        lacuna::stage2::print_func(&sched.stage2().expect("lowers"))
    };
    assert!(text.contains("block spmv_init"), "{text}");
    assert!(text.contains("] + y_local["), "{text}");
    assert_threads_agree(&p, &second, &inputs, &reference);
}

/// SpMV's built-in schedule stores a matrix whose rows (shorter than `SPMV_UNMASKED_MIN_ROW` on
/// average) scatter their gathers over an `x` of `SPMV_PANELS_MIN_BYTES` or more in column
/// panels a quarter of L2 wide, zeroing `y` and running each panel's rows in parallel on large
/// inputs; stencils stay by diagonal. Column panels give the interpreters' results (to
/// rounding) at 1 to 4 threads on skewed rows (one dense row, a run of empty rows, empty
/// columns), for panels of one column, of a few, and wider than the matrix.
#[test]
fn builtin_spmv_stores_scattered_gathers_in_column_panels() {
    use lacuna::driver::{
        builtin_schedule, by_panels, run_kernel, run_kernel_scheduled, spmv_panel_width,
        spmv_panels_trace, DataStats, PARALLEL_MIN_NNZ, SPMV_PANELS_MIN_BYTES as B,
        SPMV_PREFETCH_MIN_SCATTERED as S, SPMV_UNMASKED_MIN_ROW as R,
    };
    let p = example("spmv");
    let panels = |s: &lacuna::schedule::ScheduleFile| decomposes_into(s, "(panels");
    // (entries, mean row, bytes of x, scattered, diagonals, stored in panels)
    for (nnz, mean, bytes, scattered, diagonals, want) in [
        (20_000_000, 10.0, B, S, 5000, true),
        (20_000_000, 10.0, B - 8, S, 5000, false),
        (20_000_000, 10.0, B, S - 1, 5000, false),
        (20_000_000, R - 0.5, B * 4, 1000, 5000, true),
        (20_000_000, R, B * 4, 1000, 5000, false),
        (100_000, 1.0, B, 1000, 5000, true),
        (0, 1.0, B, 1000, 0, false),
        // A stencil is stored by diagonal, whatever its `x`.
        (20_000_000, 7.0, B * 4, 1000, 7, false),
    ] {
        let rows = (nnz as f64 / mean).ceil() as usize;
        let stats = DataStats {
            nnz,
            rows,
            gathered_bytes: bytes,
            scattered_permille: scattered,
            diagonals,
            row_changes_permille: 800,
            vector_masks: true,
            gathers_rows: true,
            l2_bytes: 2 << 20,
            ..Default::default()
        };
        // `by_panels` reads no diagonals: the stencil's schedule checks them first.
        assert_eq!(by_panels(&stats), want || diagonals == 7, "{stats:?}");
        let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
        assert_eq!(panels(&s), want, "{stats:?}: {:?}", s.trace);
        if want {
            assert!(decomposes_into(&s, "(panels 65536)"), "{:?}", s.trace);
            assert_eq!(parallel(&s), nnz >= PARALLEL_MIN_NNZ, "{:?}", s.trace);
        }
        lacuna::schedule::Schedule::replay(&p, &s.trace).expect("replays");
    }
    // A quarter of L2 in f64 elements, a power of two, at least 4096.
    let width = |l2_bytes| {
        spmv_panel_width(&DataStats {
            l2_bytes,
            ..Default::default()
        })
    };
    assert_eq!(width(2 << 20), 65536);
    assert_eq!(width(1 << 20), 32768);
    assert_eq!(width(1_250_000), 32768);
    assert_eq!(width(64 << 10), 4096);
    assert_eq!(width(0), width(lacuna::target::DEFAULT_L2_BYTES));
    // 3000 x 700: row 17 dense, rows 1000..1500 empty, columns 600.. empty, the others 1..=12
    // scattered entries.
    let (m, n) = (3000, 700);
    let mut e = Vec::new();
    for i in 0..m {
        let len = match i {
            17 => 600,
            1000..1500 => 0,
            _ => 1 + i % 12,
        };
        for t in 0..len {
            e.push((
                i,
                (i * 131 + t * 257) % 600,
                ((i + 3 * t) % 23) as f64 / 6.0 - 1.9,
            ));
        }
    }
    e.sort_by_key(|x| (x.0, x.1));
    e.dedup_by_key(|x| (x.0, x.1));
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(coo(m, n, &e))),
        ("x".to_string(), dense(vec![n], 3)),
    ]);
    let reference = run_kernel(&p, &inputs, &BTreeMap::new(), Target::Interp, 1).expect("runs");
    let reference = reference.outputs["y"].values().to_f64_vec();
    for width in [1, 64, 250, 4096] {
        for parallel in [false, true] {
            let s = lacuna::schedule::ScheduleFile {
                version: 1,
                kernel: "spmv".into(),
                trace: spmv_panels_trace(width, parallel),
            };
            for target in [Target::Interp, Target::InterpStage1] {
                let got = run_kernel_scheduled(&p, Some(&s), &inputs, &BTreeMap::new(), target, 1)
                    .expect("runs");
                assert_close(
                    &got.outputs["y"].values().to_f64_vec(),
                    &reference,
                    &format!("width {width}, {target:?}"),
                );
            }
            assert_threads_agree(&p, &s, &inputs, &reference);
        }
    }
    // Entries given out of order are sorted before the conversion (sorted ones are read in
    // place).
    let mut reversed = e.clone();
    reversed.reverse();
    let shuffled = BTreeMap::from([
        ("A".to_string(), Input::Coo(coo(m, n, &reversed))),
        ("x".to_string(), dense(vec![n], 3)),
    ]);
    let s = lacuna::schedule::ScheduleFile {
        version: 1,
        kernel: "spmv".into(),
        trace: spmv_panels_trace(64, true),
    };
    assert_threads_agree(&p, &s, &shuffled, &reference);
}

/// On hosts with a fast L3 (`fast_l3`, AMD's Zen), hub-heavy
/// gathers (`hot_permille` from `SPMV_PANELS_HUB_MIN_HOT`) go into panels a sixteenth of L3 wide
/// from an `x` of half of L3, and run row by row with prefetch below that; other gathers, and
/// every gather on other hosts or with the L3 unknown, keep the L2 rule. `lacuna tune` tries
/// both widths on such a host.
#[test]
fn builtin_spmv_sizes_hub_heavy_panels_by_l3() {
    use lacuna::driver::{
        builtin_schedule, by_panels, spmv_panel_width, spmv_panel_widths, DataStats,
        SPMV_PANELS_HUB_MIN_HOT as H, SPMV_PANELS_MIN_BYTES as B,
    };
    let p = example("spmv");
    let (l2, l3) = (1 << 20, 32 << 20);
    // (hot, by L3, L3 bytes, bytes of x, stored in panels, their width)
    for (hot, by_l3, l3_bytes, bytes, want, width) in [
        (H, true, l3, l3 / 2, true, 262144),
        (H, true, l3, l3 / 2 - 8, false, 0),
        (H, true, l3, B, false, 0),
        (1000, true, l3, l3 * 4, true, 262144),
        // Not hub-heavy, not a host that sizes panels by L3, or its L3 unknown: L2's rule.
        (H - 1, true, l3, B, true, 32768),
        (H - 1, true, l3, l3 / 2, true, 32768),
        (H, false, l3, B, true, 32768),
        (H, false, l3, l3 / 2, true, 32768),
        (H, true, 0, B, true, 32768),
        // A small L3 never narrows the panels below L2's quarter, nor starts them below B.
        (H, true, 2 << 20, B, true, 32768),
    ] {
        let stats = DataStats {
            nnz: 20_000_000,
            rows: 2_000_000,
            gathered_bytes: bytes,
            scattered_permille: 1000,
            diagonals: 5000,
            row_changes_permille: 800,
            vector_masks: true,
            gathers_rows: true,
            l2_bytes: l2,
            l3_bytes,
            fast_l3: by_l3,
            hot_permille: hot,
            ..Default::default()
        };
        assert_eq!(by_panels(&stats), want, "{stats:?}");
        let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
        assert_eq!(
            decomposes_into(&s, "(panels"),
            want,
            "{stats:?}: {:?}",
            s.trace
        );
        if want {
            assert_eq!(spmv_panel_width(&stats), width, "{stats:?}");
            let into = format!("(panels {width})");
            assert!(decomposes_into(&s, &into), "{stats:?}: {:?}", s.trace);
        } else {
            // Below half of L3, hub-heavy rows run one by one with their gathers prefetched.
            assert!(prefetches(&s), "{stats:?}: {:?}", s.trace);
        }
        lacuna::schedule::Schedule::replay(&p, &s.trace).expect("replays");
    }
    let host = |fast_l3| DataStats {
        l2_bytes: l2,
        l3_bytes: l3,
        fast_l3,
        ..Default::default()
    };
    assert_eq!(spmv_panel_widths(&host(true)), vec![32768, 262144]);
    assert_eq!(spmv_panel_widths(&host(false)), vec![32768]);
}

/// On hosts whose prefetched rows beat column panels on far gathers (`prefetches_far_gathers`:
/// Zen 5), SpMV's built-in schedule never stores `A` in panels: uniform rows run across vector
/// lanes (sliced ELL) while `x` fits in L3, and otherwise rows run one by one with their gathers
/// prefetched, whether hub-heavy or not. Elsewhere the same statistics take panels. The
/// schedules replay.
#[test]
fn builtin_spmv_prefetches_far_gathers_instead_of_panels_where_they_win() {
    use lacuna::driver::{builtin_schedule, by_panels, sliced_rows, DataStats};
    let p = example("spmv");
    let (l2, l3) = (1 << 20, 32 << 20);
    // (uniform rows, hot permille, bytes of x, L3 bytes, want sliced ELL)
    for (uniform, hot, bytes, l3_bytes, want_sell) in [
        // er-large: uniform rows, `x` of 16 MB within L3.
        (true, 31, 16_000_000, l3, true),
        (true, 31, l3, l3, true),
        // Beyond L3: the lanes' gathers wait on DRAM; prefetched rows.
        (true, 31, l3 + 8, l3, false),
        (true, 31, 64_000_000, l3, false),
        // L3 unknown: uniform rows run across lanes whatever the size of `x`.
        (true, 31, 64_000_000, 0, true),
        // rmat-large: rows of changing lengths, hub-heavy, and the same not hub-heavy.
        (false, 616, 16 << 20, l3, false),
        (false, 100, 16 << 20, l3, false),
    ] {
        let stats = |prefetches_far_gathers| DataStats {
            nnz: 20_000_000,
            rows: 2_000_000,
            gathered_bytes: bytes,
            scattered_permille: 1000,
            diagonals: 5000,
            row_changes_permille: if uniform { 10 } else { 800 },
            vector_masks: true,
            gathers_rows: true,
            l2_bytes: l2,
            l3_bytes,
            fast_l3: true,
            hot_permille: hot,
            prefetches_far_gathers,
            ..Default::default()
        };
        let zen5 = stats(true);
        assert!(!by_panels(&zen5), "{zen5:?}");
        assert_eq!(sliced_rows(&zen5), want_sell, "{zen5:?}");
        let s = builtin_schedule(&p, &zen5).expect("a built-in schedule");
        assert!(!decomposes_into(&s, "(panels"), "{zen5:?}: {:?}", s.trace);
        assert_eq!(
            decomposes_into(&s, "(sell"),
            want_sell,
            "{zen5:?}: {:?}",
            s.trace
        );
        if !want_sell {
            assert!(prefetches(&s), "{zen5:?}: {:?}", s.trace);
        }
        assert!(parallel(&s), "{:?}", s.trace);
        lacuna::schedule::Schedule::replay(&p, &s.trace).expect("replays");
        // The other hosts keep their panels for the same data.
        let other = stats(false);
        assert!(by_panels(&other), "{other:?}");
        let s = builtin_schedule(&p, &other).expect("a built-in schedule");
        assert!(decomposes_into(&s, "(panels"), "{other:?}: {:?}", s.trace);
    }
}

/// `hot_columns`: the share of entries in the `HOT_COLUMNS` columns holding the most, in
/// thousandths; 1000 with no more columns than that, 0 without entries or for other ranks.
#[test]
fn hot_columns_counts_the_hottest_columns_entries() {
    use lacuna::driver::{hot_columns, HOT_COLUMNS as H};
    let n = 4 * H;
    // Column j < H holds 3 entries (rows 0..3), every other column 1: 3H of 3H + 3H.
    let mut e = Vec::new();
    for j in 0..n {
        let copies = if j < H { 3 } else { 1 };
        for i in 0..copies {
            e.push((i, j, 1.0));
        }
    }
    e.sort_by_key(|x| (x.0, x.1));
    assert_eq!(hot_columns(&coo(3, n, &e)), 500);
    // Uniform: H of 4H columns hold a quarter.
    let uniform: Vec<_> = (0..n).map(|j| (0, j, 1.0)).collect();
    assert_eq!(hot_columns(&coo(1, n, &uniform)), 250);
    // One hub column with as many entries as all the others.
    let mut hub: Vec<_> = (0..n).map(|i| (i, 5, 1.0)).collect();
    hub.extend((0..n).map(|i| (i, (i * 7 + 11) % n, 1.0)));
    hub.sort_by_key(|x| (x.0, x.1));
    hub.dedup_by_key(|x| (x.0, x.1));
    let got = hot_columns(&coo(n, n, &hub));
    let want = (n + H - 1) * 1000 / hub.len();
    assert_eq!(got, want);
    assert_eq!(hot_columns(&coo(4, H, &[(0, 3, 1.0), (2, 1, 1.0)])), 1000);
    assert_eq!(hot_columns(&coo(4, n, &[])), 0);
    let mut cube = coo(2, 2, &[(0, 1, 1.0)]);
    cube.shape.push(2);
    cube.coords.push(vec![0]);
    assert_eq!(hot_columns(&cube), 0);
}

/// `diagonal_count`: distinct `column - row` of the stored entries; 0 for other ranks.
#[test]
fn diagonal_count_counts_distinct_offsets() {
    use lacuna::driver::diagonal_count;
    assert_eq!(
        diagonal_count(&coo(
            3,
            5,
            &[(0, 4, 1.0), (1, 0, 1.0), (2, 1, 1.0), (2, 4, 1.0)]
        )),
        3
    );
    assert_eq!(diagonal_count(&coo(4, 4, &[])), 0);
    let mut cube = coo(2, 2, &[(0, 1, 1.0)]);
    cube.shape.push(2);
    cube.coords.push(vec![0]);
    assert_eq!(diagonal_count(&cube), 0);
}

/// `row_length_changes`: rows of one length read 0, lengths changing on every row 1000, a
/// change on one row in four 250 (rounded down); degenerate tensors give 0.
#[test]
fn row_length_changes_count_rows_unlike_the_previous() {
    use lacuna::driver::row_length_changes;
    let uniform: Vec<_> = (0..100)
        .flat_map(|i| (0..4).map(move |t| (i, (i + t) % 50, 1.0)))
        .collect();
    assert_eq!(row_length_changes(&coo(100, 50, &uniform)), 0);
    let alternating: Vec<_> = (0..100)
        .flat_map(|i| (0..1 + i % 2).map(move |t| (i, t, 1.0)))
        .collect();
    assert_eq!(row_length_changes(&coo(100, 50, &alternating)), 1000);
    // Lengths 1, 1, 1, 1, 2, 2, 2, 2, ...: 24 changes over 99 neighbouring pairs.
    let blocks: Vec<_> = (0..100)
        .flat_map(|i| (0..1 + (i / 4) % 2).map(move |t| (i, t, 1.0)))
        .collect();
    assert_eq!(row_length_changes(&coo(100, 50, &blocks)), 24 * 1000 / 99);
    assert_eq!(row_length_changes(&coo(1, 5, &[(0, 1, 1.0)])), 0);
    assert_eq!(row_length_changes(&coo(0, 5, &[])), 0);
    let mut cube = coo(2, 2, &[(0, 1, 1.0)]);
    cube.shape.push(2);
    cube.coords.push(vec![0]);
    assert_eq!(row_length_changes(&cube), 0);
}

/// `scattered_gathers`: neighbouring rows gathering neighbouring parts of `x` (a band, a
/// stencil, a band far from the diagonal) read as not scattered, whatever the matrix's size;
/// random columns as scattered; degenerate tensors give 0.
#[test]
fn scattered_gathers_tell_streams_from_random_columns() {
    use lacuna::driver::scattered_gathers;
    let n: usize = 200_000;
    let band: Vec<_> = (0..n)
        .flat_map(|i| [i.saturating_sub(1), i, (i + 1).min(n - 1)].map(|j| (i, j, 1.0)))
        .collect();
    assert!(scattered_gathers(&coo(n, n, &band)) <= 10);
    // A 7-point stencil on a 50³ grid: seven streams.
    let g: usize = 50;
    let cells = g * g * g;
    let stencil: Vec<_> = (0..cells)
        .flat_map(|i| {
            [
                i.checked_sub(g * g),
                i.checked_sub(g),
                i.checked_sub(1),
                Some(i),
                Some(i + 1),
                Some(i + g),
                Some(i + g * g),
            ]
            .into_iter()
            .flatten()
            .filter(move |&j| j < cells)
            .map(move |j| (i, j, 1.0))
        })
        .collect();
    assert!(scattered_gathers(&coo(cells, cells, &stencil)) <= 10);
    // The band moved half the matrix away from the diagonal: still streams.
    let shifted: Vec<_> = band
        .iter()
        .map(|&(i, j, v)| (i, (j + n / 2) % n, v))
        .collect();
    assert!(scattered_gathers(&coo(n, n, &shifted)) <= 10);
    // Columns spread over the whole row.
    let scattered: Vec<_> = (0..n)
        .flat_map(|i| (0..4).map(move |t| (i, (i * 7919 + t * 50_021 + i * i) % n, 1.0)))
        .collect();
    let s = scattered_gathers(&coo(n, n, &scattered));
    assert!(s >= 900, "{s}‰ for random columns");
    // `lacuna run`'s statistics: SpMV's `x` is the gathered operand.
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(coo(n, n, &scattered))),
        ("x".to_string(), dense(vec![n], 1)),
    ]);
    let stats = lacuna::driver::DataStats::of(&inputs);
    assert_eq!((stats.gathered_bytes, stats.scattered_permille), (n * 8, s));
    assert_eq!(scattered_gathers(&coo(10, 10, &[])), 0);
    assert_eq!(scattered_gathers(&coo(4, 4, &[(1, 1, 1.0)])), 0);
    let mut cube = coo(2, 2, &[(0, 1, 1.0)]);
    cube.shape.push(2);
    cube.coords.push(vec![0]);
    assert_eq!(scattered_gathers(&cube), 0);
}

/// SpMM's built-in schedule stores `A` in column panels exactly for feature widths of 64 to
/// 512 in multiples of 32, a `B` beyond L2, far gathers (`SPMM_PANELS_MIN_FAR`) and runs of
/// `SPMM_PANELS_MIN_RUN` entries or more per row and panel; the panel holds half of L2 in rows
/// of `B`; the schedule replays, and gives the interpreter's results at 1 to 4 threads (bit for
/// bit the same at each) on skewed rows.
#[test]
fn builtin_spmm_stores_far_gathers_of_long_runs_in_column_panels() {
    use lacuna::driver::{
        builtin_schedule, run_kernel, spmm_by_panels, spmm_panel_stats, spmm_panel_width,
        DataStats, PARALLEL_MIN_NNZ, SPMM_PANELS_MIN_FAR as F, SPMM_PANELS_MIN_RUN as R,
    };
    let p = example("spmm");
    let chunk = |s: &lacuna::schedule::ScheduleFile| {
        s.trace.iter().find_map(|t| match t {
            lacuna::schedule::Instruction::Split { factors, .. } => {
                factors.last().copied().flatten()
            }
            _ => None,
        })
    };
    let l2 = 2 << 20;
    // (entries, k, bytes of B, far, runs, AVX-512, stored in panels)
    for (nnz, k, bytes, far, runs, masks, want) in [
        (1_000_000, 128, 8 << 20, F, 1_000_000 / R, true, true),
        (1_000_000, 128, 8 << 20, F, 1_000_000 / R, false, true),
        (10_000, 256, 8 << 20, 900, 10, true, true),
        (1_000_000, 96, 8 << 20, 900, 1000, true, true),
        (1_000_000, 128, 8 << 20, F - 1, 1000, true, false),
        (1_000_000, 128, 8 << 20, 900, 1_000_000 / R + 1, true, false),
        (1_000_000, 128, l2, 900, 1000, true, false),
        (1_000_000, 32, 8 << 20, 900, 1000, true, false),
        (1_000_000, 48, 8 << 20, 900, 1000, true, false),
        (1_000_000, 1024, 8 << 20, 900, 1000, true, false),
        (1_000_000, 128, 8 << 20, 900, 0, true, false),
    ] {
        let stats = DataStats {
            nnz,
            rows: nnz / 40,
            feat: Some(k),
            gathered_bytes: bytes,
            far_rows_permille: far,
            panel_runs: runs,
            vector_masks: masks,
            l2_bytes: l2,
            ..Default::default()
        };
        assert_eq!(spmm_by_panels(&stats), want, "{stats:?}");
        let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
        assert_eq!(
            decomposes_into(&s, "(panels"),
            want,
            "{stats:?}: {:?}",
            s.trace
        );
        if want {
            let width = spmm_panel_width(l2, k);
            assert!(
                decomposes_into(&s, &format!("(panels {width})")),
                "{:?}",
                s.trace
            );
            assert_eq!(parallel(&s), nnz >= PARALLEL_MIN_NNZ, "{:?}", s.trace);
            let wide = masks && k % 64 == 0;
            assert_eq!(chunk(&s), Some(if wide { 64 } else { 32 }), "{:?}", s.trace);
        }
        lacuna::schedule::Schedule::replay(&p, &s.trace).expect("replays");
    }
    // Half of L2 in rows of `feat` f64, a power of two, at least 16.
    assert_eq!(spmm_panel_width(2 << 20, 128), 1024);
    assert_eq!(spmm_panel_width(2 << 20, 32), 4096);
    assert_eq!(spmm_panel_width(1_250_000, 128), 512);
    assert_eq!(spmm_panel_width(64 << 10, 512), 16);
    assert_eq!(
        spmm_panel_width(0, 128),
        spmm_panel_width(lacuna::target::DEFAULT_L2_BYTES, 128)
    );
    // Gathers in stored order, window 2, panels of 4 columns: only (1, 5) is within 2 entries
    // of its column's previous gather; the runs are (0, 0) (0, 1) (1, 0) (1, 1) (2, 0) (2, 1).
    let small = coo(
        3,
        8,
        &[
            (0, 0, 1.0),
            (0, 1, 1.0),
            (0, 5, 1.0),
            (1, 0, 1.0),
            (1, 5, 1.0),
            (2, 1, 1.0),
            (2, 7, 1.0),
        ],
    );
    assert_eq!(spmm_panel_stats(&small, 4, 2), (6 * 1000 / 7, 6));
    assert_eq!(spmm_panel_stats(&coo(3, 8, &[]), 4, 2), (0, 0));
    // 700 x 1600, k = 128, on a host with 64 KiB of L2 (panels of 32 rows of B, a window of 64
    // gathers): each row's entries in two runs of 32 columns that change from row to row; row
    // 17 dense over 900 columns, rows 100..150 empty.
    let (m, n, k) = (700, 1600, 128);
    let mut e = Vec::new();
    for i in 0..m {
        if (100..150).contains(&i) {
            continue;
        }
        if i == 17 {
            e.extend((0..900).map(|c| (i, c, (c % 13) as f64 / 4.0 - 1.5)));
            continue;
        }
        for (run, base) in [(i * 37) % 50, (i * 11 + 23) % 50].into_iter().enumerate() {
            for t in 0..12 {
                e.push((
                    i,
                    base * 32 + (t * 5 + run) % 32,
                    ((i + 3 * t) % 17) as f64 / 5.0 - 1.6,
                ));
            }
        }
    }
    e.sort_by_key(|x| (x.0, x.1));
    e.dedup_by_key(|x| (x.0, x.1));
    let a = coo(m, n, &e);
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(a.clone())),
        ("B".to_string(), dense(vec![n, k], 5)),
    ]);
    let stats = DataStats {
        l2_bytes: 64 << 10,
        ..DataStats::of(&inputs)
    }
    .with_spmm_stats(&a);
    assert!(spmm_by_panels(&stats), "{stats:?}");
    let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
    assert!(decomposes_into(&s, "(panels 32)"), "{:?}", s.trace);
    let want = run_kernel(&p, &inputs, &BTreeMap::new(), Target::Interp, 1).expect("runs");
    assert_threads_agree(&p, &s, &inputs, &want.outputs["C"].values().to_f64_vec());
}

/// SpMM's streamed rows ([`lacuna::driver::spmm_stream_trace`]): the built-in schedule adds
/// them for an output of `SPMM_STREAM_MIN_BYTES` (an eighth of a fast L3) or more in rows of
/// `SPMM_STREAM_MIN_ROW_BYTES` or more on hosts with streaming stores (k = 128 by 64 or 32 as
/// vector lanes, 256; not the narrower blockings: k = 32 whole, 48 by 16 unrolled, 96), and
/// for shorter rows of 32 or 64 features (as 32 vector lanes) where `C` is far beyond L3.
/// The compiled kernel gives the interpreter's `C` whether the output starts a vector (the
/// streaming path) or not (the loop as written), at 1 to 4 threads, and writes nothing
/// outside `C`.
#[test]
fn builtin_spmm_streams_large_outputs_and_keeps_results() {
    use lacuna::driver::{
        builtin_schedule, run_kernel, spmm_stream_min_bytes, spmm_stream_short_rows_min_bytes,
        DataStats, SPMM_STREAM_FAST_L3_DIVISOR, SPMM_STREAM_MIN_BYTES, SPMM_STREAM_MIN_ROW_BYTES,
        SPMM_STREAM_SHORT_ROWS_LLC_MULTIPLE, SPMM_STREAM_SHORT_ROW_BYTES,
    };
    use lacuna::target::{RawArray, RawBindings};
    let p = example("spmm");
    let streams = |s: &lacuna::schedule::ScheduleFile| {
        s.trace.iter().any(|t| {
            matches!(t, lacuna::schedule::Instruction::Annotate { key, .. } if key == "nontemporal")
        })
    };
    for (k, masks) in [
        (32, true),
        (48, true),
        (64, true),
        (96, true),
        (128, true),
        (128, false),
        (256, true),
    ] {
        let big = SPMM_STREAM_MIN_BYTES / (8 * k) + 1;
        let wide = 8 * k >= SPMM_STREAM_MIN_ROW_BYTES;
        // `rows` rows of k features on a host with or without streaming stores.
        let shape = |rows: usize, stream_stores| DataStats {
            nnz: rows * 10,
            rows,
            feat: Some(k),
            gathered_bytes: rows * k * 8,
            vector_masks: masks,
            whole_width_blocks: true,
            stream_stores,
            ..Default::default()
        };
        for (rows, stream_stores, want) in [
            (big, true, wide),
            (big - 2, true, false),
            (big, false, false),
        ] {
            let stats = shape(rows, stream_stores);
            let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
            assert_eq!(streams(&s), want, "{stats:?}: {:?}", s.trace);
        }
        // On a host with a fast L3 (AMD Zen), from an eighth of it; with its size unknown,
        // from SPMM_STREAM_MIN_BYTES as elsewhere.
        let l3 = 32usize << 20;
        let from = (l3 / SPMM_STREAM_FAST_L3_DIVISOR).div_ceil(8 * k);
        for (rows, l3_bytes, want) in [
            (from, l3, wide),
            (from - 1, l3, false),
            (from, 0, false),
            (big, 0, wide),
        ] {
            let stats = DataStats {
                fast_l3: true,
                l3_bytes,
                ..shape(rows, true)
            };
            let min = if l3_bytes > 0 {
                l3 / SPMM_STREAM_FAST_L3_DIVISOR
            } else {
                SPMM_STREAM_MIN_BYTES
            };
            assert_eq!(spmm_stream_min_bytes(&stats), min);
            let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
            assert_eq!(streams(&s), want, "{stats:?}: {:?}", s.trace);
        }
        // Shorter rows of a multiple of SPMM_STREAM_SHORT_ROW_BYTES (k = 32, 64, 96; not 48)
        // stream where `C` holds SPMM_STREAM_SHORT_ROWS_LLC_MULTIPLE times the L3 (times
        // SPMM_STREAM_MIN_BYTES where its size is unknown), as 32 vector lanes per pass.
        let short = 8 * k >= SPMM_STREAM_SHORT_ROW_BYTES
            && (8 * k).is_multiple_of(SPMM_STREAM_SHORT_ROW_BYTES);
        for (l3_bytes, fast_l3) in [(l3, true), (l3, false), (0, false)] {
            let with_l3 = |rows| DataStats {
                fast_l3,
                l3_bytes,
                ..shape(rows, true)
            };
            let min = spmm_stream_short_rows_min_bytes(&with_l3(1));
            let llc = if l3_bytes > 0 {
                l3_bytes
            } else {
                SPMM_STREAM_MIN_BYTES
            };
            assert_eq!(min, llc * SPMM_STREAM_SHORT_ROWS_LLC_MULTIPLE);
            let from = min.div_ceil(8 * k);
            for (rows, want) in [(from, wide || short), (from - 1, wide)] {
                let stats = with_l3(rows);
                let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
                assert_eq!(streams(&s), want, "{stats:?}: {:?}", s.trace);
                if want {
                    let lanes = s.trace.iter().any(|t| {
                        matches!(t, lacuna::schedule::Instruction::Split { factors, .. }
                            if factors.last() == Some(&Some(32)) || factors.last() == Some(&Some(64)))
                    }) && s.trace.iter().any(|t| {
                        matches!(t, lacuna::schedule::Instruction::Vectorize { r#loop } if r#loop == "k.1")
                    });
                    assert!(lanes, "{stats:?}: {:?}", s.trace);
                }
            }
        }
    }
    // Results: 70 rows (one dense, ten empty) by 90 columns.
    let (m, n) = (70usize, 90usize);
    let mut e = Vec::new();
    for i in 0..m {
        if (20..30).contains(&i) {
            continue;
        }
        let cols: Vec<usize> = if i == 3 {
            (0..n).collect()
        } else {
            (0..(i % 7)).map(|t| (i * 13 + t * 29) % n).collect()
        };
        e.extend(
            cols.into_iter()
                .map(|c| (i, c, ((i + c) % 11) as f64 / 3.0 - 1.5)),
        );
    }
    e.sort_by_key(|x| (x.0, x.1));
    e.dedup_by_key(|x| (x.0, x.1));
    let streaming_host = lacuna::target::host_stream_bytes().is_some();
    for k in [32usize, 64, 128, 256] {
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(coo(m, n, &e))),
            ("B".to_string(), dense(vec![n, k], 7)),
        ]);
        // Long rows from SPMM_STREAM_MIN_BYTES (or less: an eighth of a fast L3), short ones
        // from SPMM_STREAM_SHORT_ROWS_LLC_MULTIPLE times it (the L3's size left unknown).
        let min = if 8 * k >= SPMM_STREAM_MIN_ROW_BYTES {
            SPMM_STREAM_MIN_BYTES
        } else {
            SPMM_STREAM_MIN_BYTES * SPMM_STREAM_SHORT_ROWS_LLC_MULTIPLE
        };
        let stats = DataStats {
            rows: min / (8 * k) + 1,
            stream_stores: true,
            l3_bytes: 0,
            ..DataStats::of(&inputs)
        };
        let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
        assert!(streams(&s), "k = {k}: {:?}", s.trace);
        let func = lacuna::schedule::Schedule::replay(&p, &s.trace)
            .and_then(|s| s.stage2())
            .expect("replays");
        let flat = lacuna::stage2::lower_to_flat(
            func,
            &lacuna::stage2::pipeline::Config::default(),
            &mut |_, _| {},
        )
        .expect("lowers");
        let kernel = lacuna::target::compile(&flat, &Default::default()).expect("compiles");
        let ir = kernel.llvm_ir();
        assert_eq!(ir.contains("!nontemporal"), streaming_host, "k = {k}");
        assert_eq!(ir.contains("sfence"), streaming_host, "k = {k}");
        let want = run_kernel(&p, &inputs, &BTreeMap::new(), Target::Interp, 1).expect("runs");
        let want = want.outputs["C"].values().to_f64_vec();
        let mut b = lacuna::stage1::bind(&p, &inputs, &BTreeMap::new()).expect("binds");
        let raw = |a: &mut ArrayData| RawArray {
            ptr: a.as_mut_ptr(),
            len: a.len(),
            dtype: a.dtype(),
        };
        let mut rb = RawBindings {
            params: b.params.clone(),
            ..Default::default()
        };
        for (name, a) in b.buffers.iter_mut() {
            rb.buffers.insert(name.clone(), raw(a));
        }
        for (name, ax) in b.axes.iter_mut() {
            if let Some(a) = ax.indptr.as_mut() {
                rb.indptr.insert(name.clone(), raw(a));
            }
            if let Some(a) = ax.indices.as_mut() {
                rb.indices.insert(name.clone(), raw(a));
            }
        }
        // `C` placed on a 64-byte boundary, then 8 bytes past one, in a larger buffer.
        let len = m * k;
        let mut out = vec![f64::NAN; len + 16];
        let first = (0..8)
            .find(|o| (out[*o..].as_ptr() as usize).is_multiple_of(64))
            .expect("an aligned start");
        for offset in [first, first + 1] {
            for threads in 1..=4 {
                out.fill(f64::NAN);
                rb.buffers.insert(
                    "C".into(),
                    RawArray {
                        ptr: out[offset..].as_mut_ptr().cast(),
                        len,
                        dtype: lacuna::ir::DType::F64,
                    },
                );
                let pool = lacuna::target::pool_builder(threads).build().expect("pool");
                /// The raw bindings, handed to the pool's thread for the call.
                struct Call<'a>(&'a RawBindings);
                // SAFETY: the pointers stay valid during `install`, which blocks until the
                // call returns; only the kernel touches the arrays meanwhile.
                unsafe impl Send for Call<'_> {}
                unsafe impl Sync for Call<'_> {}
                impl Call<'_> {
                    fn bindings(&self) -> &RawBindings {
                        self.0
                    }
                }
                let call = Call(&rb);
                // SAFETY: `b`'s arrays passed binding's checks for `p`, and `C` gets `m * k`
                // elements of its own.
                pool.install(|| unsafe { kernel.run_raw(call.bindings()) })
                    .expect("runs");
                let what = format!("k = {k}, offset {offset}, {threads} threads");
                assert_close(&out[offset..offset + len], &want, &what);
                assert!(
                    out[..offset]
                        .iter()
                        .chain(&out[offset + len..])
                        .all(|x| x.is_nan()),
                    "{what}: written outside C"
                );
            }
        }
    }
}

/// SpMM's built-in schedule runs `A`'s rows in reverse Cuthill–McKee order (`rcm`) exactly
/// where that order saves `SPMM_RCM_MIN_GAIN` thousandths of far gathers or more, for feature
/// widths in multiples of 16 up to 512 and a `B` beyond L2; each row is then summed in
/// registers and stored once (streamed where `C` is large), the rows in parallel. On a band
/// whose rows are stored shuffled (one row dense, some empty), the statistics say so, and the
/// schedule (and its streamed variant) gives the interpreter's `C` at 1 to 4 threads, bit for
/// bit the same at each.
#[test]
fn builtin_spmm_runs_rows_in_rcm_order_where_it_saves_far_gathers() {
    use lacuna::driver::{
        builtin_schedule, run_kernel, spmm_by_rcm, spmm_rcm_far, spmm_rcm_trace, DataStats,
        SPMM_RCM_FAST_L3_MIN_GAIN as F, SPMM_RCM_MIN_GAIN as G, SPMM_STREAM_MIN_BYTES,
    };
    // Shapes far larger than the entries (a file may declare any extent) are not reordered:
    // nothing saved, nothing allocated per declared row.
    assert_eq!(
        spmm_rcm_far(&coo(1 << 40, 10, &[(0, 1, 1.0), (5, 2, 1.0)]), 8),
        1000
    );
    assert_eq!(
        spmm_rcm_far(&coo(10, 1 << 40, &[(0, 1, 1.0), (5, 2, 1.0)]), 8),
        1000
    );
    assert_eq!(spmm_rcm_far(&coo(4, 4, &[]), 8), 0);
    use lacuna::schedule::Instruction;
    let p = example("spmm");
    let streams = |s: &lacuna::schedule::ScheduleFile| {
        s.trace
            .iter()
            .any(|t| matches!(t, Instruction::Annotate { key, .. } if key == "nontemporal"))
    };
    let l2 = 2 << 20;
    // (k, bytes of B, far in stored order, far in rcm's, rcm)
    for (k, bytes, far, rcm_far, want) in [
        (32, 8 << 20, 900, 900 - G, true),
        (128, 8 << 20, 500, 100, true),
        (16, 8 << 20, 900, 100, true),
        (512, 8 << 20, 900, 100, true),
        (32, 8 << 20, 900, 901 - G, false),
        (32, 8 << 20, 100, 900, false),
        (32, l2, 900, 100, false),
        (24, 8 << 20, 900, 100, false),
        (1024, 8 << 20, 900, 100, false),
    ] {
        let stats = DataStats {
            nnz: 1_000_000,
            rows: 200_000,
            feat: Some(k),
            gathered_bytes: bytes,
            far_rows_permille: far,
            rcm_far_permille: rcm_far,
            l2_bytes: l2,
            stream_stores: true,
            ..Default::default()
        };
        assert_eq!(spmm_by_rcm(&stats), want, "{stats:?}");
        // On a host with a fast L3 of 32 MiB, `B` must exceed it and the order save
        // SPMM_RCM_FAST_L3_MIN_GAIN; with the L3's size unknown, the rule above holds.
        let l3 = 32 << 20;
        for (l3_bytes, bytes, saved, fast_want) in [
            (l3, l3 + 8, F, true),
            (l3, l3, F, false),
            (l3, l3 + 8, F - 1, false),
            (l3, 8 << 20, 800, false),
            (0, bytes, far.saturating_sub(rcm_far), want),
        ] {
            let fast = DataStats {
                fast_l3: true,
                l3_bytes,
                gathered_bytes: bytes,
                far_rows_permille: 900,
                rcm_far_permille: 900 - saved,
                ..stats
            };
            let fast_want = fast_want && (16..=512).contains(&k) && k % 16 == 0;
            assert_eq!(spmm_by_rcm(&fast), fast_want, "{fast:?}");
            let s = builtin_schedule(&p, &fast).expect("a built-in schedule");
            assert_eq!(
                decomposes_into(&s, "rcm"),
                fast_want,
                "{fast:?}: {:?}",
                s.trace
            );
        }
        let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
        assert_eq!(decomposes_into(&s, "rcm"), want, "{stats:?}: {:?}", s.trace);
        if want {
            assert!(parallel(&s), "{:?}", s.trace);
            let c_bytes = stats.rows * k * 8;
            assert_eq!(
                streams(&s),
                k >= 128 && c_bytes >= SPMM_STREAM_MIN_BYTES,
                "{stats:?}: {:?}",
                s.trace
            );
            assert!(
                s.trace
                    .iter()
                    .any(|t| matches!(t, Instruction::ReverseCacheWrite { .. })),
                "rows in registers: {:?}",
                s.trace
            );
        }
    }
    // A band of width 5 over 2000 columns, its rows stored in a scrambled order (by a
    // multiplicative hash); stored row 3 dense, band rows 100..140 left empty.
    let (m, n) = (2000usize, 2000usize);
    let mut by_hash: Vec<usize> = (0..m).collect();
    by_hash.sort_by_key(|&i| (i as u64).wrapping_mul(2_654_435_761) % (1 << 32));
    let mut stored_at = vec![0; m];
    for (r, &i) in by_hash.iter().enumerate() {
        stored_at[i] = r;
    }
    let mut e = Vec::new();
    for (i, &r) in stored_at.iter().enumerate() {
        if r == 3 {
            continue;
        }
        if (100..140).contains(&i) {
            continue;
        }
        for c in i.saturating_sub(2)..(i + 3).min(n) {
            e.push((r, c, ((i + 3 * c) % 17) as f64 / 5.0 - 1.6));
        }
    }
    e.extend((0..n).map(|c| (3, c, (c % 13) as f64 / 4.0 - 1.5)));
    e.sort_by_key(|x| (x.0, x.1));
    let a = coo(m, n, &e);
    for k in [32, 128] {
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(a.clone())),
            ("B".to_string(), dense(vec![n, k], 7)),
        ]);
        // A host with 64 KiB of L2 (and no fast L3): a window of 256 (k = 32) or 64 gathers
        // of B's rows.
        let stats = DataStats {
            l2_bytes: 64 << 10,
            fast_l3: false,
            ..DataStats::of(&inputs)
        }
        .with_spmm_stats(&a);
        assert!(spmm_by_rcm(&stats), "{stats:?}");
        assert!(stats.far_rows_permille >= 900, "{stats:?}");
        assert!(stats.rcm_far_permille <= 400, "{stats:?}");
        let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
        assert!(decomposes_into(&s, "rcm"), "{:?}", s.trace);
        let want = run_kernel(&p, &inputs, &BTreeMap::new(), Target::Interp, 1).expect("runs");
        let want = want.outputs["C"].values().to_f64_vec();
        let streamed = lacuna::schedule::ScheduleFile {
            version: 1,
            kernel: "spmm".into(),
            trace: spmm_rcm_trace(k, 32, true, true, true, true),
        };
        // The format alone, rows in parallel: the init and the sums of a row, lowered apart,
        // both index `C` by the row's id.
        let plain = lacuna::schedule::ScheduleFile {
            version: 1,
            kernel: "spmm".into(),
            trace: vec![
                Instruction::DecomposeFormat {
                    buffer: "A".into(),
                    into: "rcm".into(),
                },
                Instruction::Parallel {
                    r#loop: "spmm_p0:i.p0".into(),
                },
            ],
        };
        for schedule in [&s, &streamed, &plain] {
            assert_threads_agree(&p, schedule, &inputs, &want);
        }
    }
}

/// SpMM's (and SpMV's) built-in schedule stores `A` as BSR where its entries fill whole blocks (FEM
/// matrices with several degrees of freedom per node): the largest of `BSR_BLOCKS` whose
/// blocks inside the matrix waste at most `BSR_MAX_FILL` slots per thousand entries and
/// hold nearly all of them, in rows of `BSR_MIN_ROW` entries or more on average. On a
/// matrix of 3×3 blocks with two rows and a column beyond the last whole block (a few entries
/// there, run as CSR), the statistics pick 3; the kernel indexes blocks without range checks,
/// and gives the interpreter's `C` at 1 to 4 threads, bit for bit the same at each. Half-empty
/// blocks, too many entries outside whole blocks, or shorter rows are left to CSR.
#[test]
fn builtin_spmm_stores_whole_blocks_as_bsr() {
    use lacuna::driver::{bsr_chunk, builtin_schedule, run_kernel, whole_blocks, DataStats};
    let (q, m, n) = (40usize, 122usize, 112usize);
    let mut full = Vec::new();
    let mut half = Vec::new();
    for bi in 0..q {
        for bj in 0..n / 3 {
            // Every other block: 54 entries per row.
            if (bi + bj) % 2 != 0 {
                continue;
            }
            for i in 0..3 {
                for j in 0..3 {
                    let (r, c) = (bi * 3 + i, bj * 3 + j);
                    let v = ((r * 5 + c * 3) % 19) as f64 / 4.0 - 2.2;
                    full.push((r, c, v));
                    if (i + j) % 2 == 0 {
                        half.push((r, c, v));
                    }
                }
            }
        }
    }
    // Beyond the last whole block: rows 120 and 121, column 111.
    let border = [(120, 5, 1.5), (121, 111, -0.5), (7, 111, 2.0)];
    full.extend(border);
    half.extend(border);
    for e in [&mut full, &mut half] {
        e.sort_by_key(|x| (x.0, x.1));
    }
    let a = coo(m, n, &full);
    assert_eq!(whole_blocks(&a), 3);
    assert_eq!(whole_blocks(&coo(m, n, &half)), 0);
    // Entries outside whole blocks beyond one in a hundred: not BSR.
    let mut outside = full.clone();
    outside.extend((0..m).map(|r| (r, 111, 1.0)));
    outside.sort_by_key(|x| (x.0, x.1));
    outside.dedup_by_key(|x| (x.0, x.1));
    assert_eq!(whole_blocks(&coo(m, n, &outside)), 0);
    assert_eq!(whole_blocks(&coo(4, 4, &[])), 0);
    let p = example("spmm");
    // Whole blocks in shorter rows (a third of the blocks dropped): CSR.
    let sparse: Vec<_> = full
        .iter()
        .copied()
        .filter(|&(r, c, _)| (r / 3 + 2 * (c / 3)) % 3 != 0 || r >= 120 || c >= 111)
        .collect();
    let short = coo(m, n, &sparse);
    assert_eq!(whole_blocks(&short), 3);
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(short.clone())),
        ("B".to_string(), dense(vec![n, 32], 5)),
    ]);
    let stats = DataStats::of(&inputs);
    assert!(stats.mean_row() < lacuna::driver::BSR_MIN_ROW, "{stats:?}");
    let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
    assert!(!decomposes_into(&s, "(+ (bsr"), "{:?}", s.trace);
    for k in [32, 48, 128] {
        let inputs = BTreeMap::from([
            ("A".to_string(), Input::Coo(a.clone())),
            ("B".to_string(), dense(vec![n, k], 5)),
        ]);
        let stats = DataStats::of(&inputs);
        assert_eq!(stats.block, 3, "{stats:?}");
        let s = builtin_schedule(&p, &stats).expect("a built-in schedule");
        assert!(
            decomposes_into(&s, "(+ (bsr 3) remainder)"),
            "{:?}",
            s.trace
        );
        let scheduled = lacuna::schedule::Schedule::replay(&p, &s.trace).expect("replays");
        let lowered =
            lacuna::stage2::lower(scheduled.program(), &Default::default(), &mut |_, _| {})
                .expect("lowers");
        let text = lowered.flat.to_string();
        assert!(!text.contains("select("), "range checks left: {text}");
        let want = run_kernel(&p, &inputs, &BTreeMap::new(), Target::Interp, 1).expect("runs");
        let want = want.outputs["C"].values().to_f64_vec();
        assert_threads_agree(&p, &s, &inputs, &want);
        // The block's sums fit half the register file, whatever this host's: AVX-512's 256
        // values (32 at a time where k allows) and AVX2's 64 (8 at a time for 3 rows).
        for (registers, chunk) in [(256, if k % 32 == 0 { 32 } else { 16 }), (64, 8)] {
            assert_eq!(bsr_chunk(3, k, registers), Some(chunk));
            let host = DataStats {
                vector_f64s: registers,
                ..stats
            };
            let s = builtin_schedule(&p, &host).expect("a built-in schedule");
            let split = s.trace.iter().find_map(|i| match i {
                lacuna::schedule::Instruction::Split { r#loop, factors }
                    if r#loop == "spmm_p0:k" =>
                {
                    Some(factors.clone())
                }
                _ => None,
            });
            assert_eq!(split, Some(vec![None, Some(chunk)]), "{:?}", s.trace);
            assert_threads_agree(&p, &s, &inputs, &want);
        }
    }
    // No chunk of 4 or more divides the width, or fits: no register blocking of blocks.
    assert_eq!(bsr_chunk(3, 34, 256), None);
    assert_eq!(bsr_chunk(16, 32, 64), None);
    assert_eq!(bsr_chunk(2, 32, 64), Some(16));
    assert_eq!(bsr_chunk(4, 64, 0), Some(32));
    // SpMV too, by the same statistics.
    let spmv = example("spmv");
    let inputs = BTreeMap::from([
        ("A".to_string(), Input::Coo(a.clone())),
        ("x".to_string(), dense(vec![n], 6)),
    ]);
    let s = builtin_schedule(&spmv, &DataStats::of(&inputs)).expect("a built-in schedule");
    assert!(
        decomposes_into(&s, "(+ (bsr 3) remainder)"),
        "{:?}",
        s.trace
    );
    let want = run_kernel(&spmv, &inputs, &BTreeMap::new(), Target::Interp, 1).expect("runs");
    assert_threads_agree(&spmv, &s, &inputs, &want.outputs["y"].values().to_f64_vec());
    // SpMV stores whole blocks from shorter rows than SpMM (`SPMV_BSR_MIN_ROW`): the matrix
    // with a third of its blocks dropped (36 entries per row) runs as BSR there, and a sparser
    // one (one block in five kept: below the threshold) as CSR.
    let shorter = BTreeMap::from([
        ("A".to_string(), Input::Coo(short)),
        ("x".to_string(), dense(vec![n], 6)),
    ]);
    let stats = DataStats::of(&shorter);
    assert!(
        stats.mean_row() >= lacuna::driver::SPMV_BSR_MIN_ROW,
        "{stats:?}"
    );
    assert_eq!(stats.block, 3, "{stats:?}");
    let s = builtin_schedule(&spmv, &stats).expect("a built-in schedule");
    assert!(
        decomposes_into(&s, "(+ (bsr 3) remainder)"),
        "{:?}",
        s.trace
    );
    let want = run_kernel(&spmv, &shorter, &BTreeMap::new(), Target::Interp, 1).expect("runs");
    assert_threads_agree(
        &spmv,
        &s,
        &shorter,
        &want.outputs["y"].values().to_f64_vec(),
    );
    let few: Vec<_> = full
        .iter()
        .copied()
        .filter(|&(r, c, _)| (r / 3 + 2 * (c / 3)) % 5 == 0 && r < 120 && c < 111)
        .collect();
    let few = BTreeMap::from([
        ("A".to_string(), Input::Coo(coo(m, n, &few))),
        ("x".to_string(), dense(vec![n], 6)),
    ]);
    let stats = DataStats::of(&few);
    assert!(
        stats.mean_row() < lacuna::driver::SPMV_BSR_MIN_ROW,
        "{stats:?}"
    );
    let s = builtin_schedule(&spmv, &stats);
    assert!(
        !s.as_ref().is_some_and(|s| decomposes_into(s, "(+ (bsr")),
        "{:?}",
        s.map(|s| s.trace)
    );
}
