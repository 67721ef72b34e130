//! Regression benchmarks: SpMV, SpMM (k = 32) and SDDMM (k = 32) on bundled matrices, and SpMM
//! over `rcm`'s reordered rows (`lacuna::driver::spmm_rcm_trace`) and over BSR(2) blocks
//! (`lacuna::driver::spmm_bsr_trace`), each JIT-compiled and bound once, outside the timed
//! loop.
//!
//! ```bash
//! cargo bench -p lacuna --bench kernels -- --save-baseline main   # on main
//! cargo bench -p lacuna --bench kernels -- --baseline main        # on a branch: compare
//! cargo bench -p lacuna --bench kernels -- --test                 # run each once (CI)
//! ```

use criterion::{BenchmarkId, Criterion, Throughput};
use lacuna::bench::{compile_kernel, BenchError, Matrix};
use lacuna::schedule::ScheduleFile;
use std::hint::black_box;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// Large arrays start on a cache line, as in the `lacuna` binary (see `lacuna::alloc`).
#[global_allocator]
static ALLOC: lacuna::alloc::CacheAligned = lacuna::alloc::CacheAligned;

const MATRICES: &[&str] = &["1138_bus", "west0479"];
const SEED: u64 = 0;

/// The benchmark groups: name, kernel, feature width, schedule (`None`: the kernel as written).
fn cases() -> Vec<(String, &'static str, usize, Option<ScheduleFile>)> {
    let rcm = ScheduleFile {
        version: 1,
        kernel: "spmm".into(),
        trace: lacuna::driver::spmm_rcm_trace(32, 32, true, false, false, true),
    };
    let bsr = ScheduleFile {
        version: 1,
        kernel: "spmm".into(),
        // The host's chunk (32 with AVX-512, 16 with AVX2), as the built-in schedule picks it.
        trace: lacuna::driver::spmm_bsr_trace(
            2,
            32,
            lacuna::driver::bsr_chunk(2, 32, lacuna_target::host_vector_f64s())
                .expect("2 rows of 8 fit any host's registers"),
            true,
        ),
    };
    vec![
        ("spmv".into(), "spmv", 1, None),
        ("spmm_k32".into(), "spmm", 32, None),
        ("sddmm_k32".into(), "sddmm", 32, None),
        ("spmm_k32_rcm".into(), "spmm", 32, Some(rcm)),
        ("spmm_k32_bsr2".into(), "spmm", 32, Some(bsr)),
    ]
}

fn benches(c: &mut Criterion) -> Result<(), BenchError> {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let matrices = MATRICES
        .iter()
        .map(|name| Matrix::load(&data.join(format!("{name}.mtx"))))
        .collect::<Result<Vec<_>, _>>()?;
    for (group_name, kernel, k, schedule) in cases() {
        let compiled = compile_kernel(
            kernel,
            "csr",
            schedule.as_ref(),
            None,
            lacuna::driver::Target::Jit,
        )?;
        let mut group = c.benchmark_group(group_name);
        for m in &matrices {
            let mut prep = compiled.prepare(m, k, SEED)?;
            // One checked run first: errors surface here, not inside the timed loop.
            prep.run_once()?;
            prep.checksum()?;
            group.throughput(Throughput::Bytes(prep.bytes as u64));
            let mut failed = None;
            group.bench_function(BenchmarkId::from_parameter(&m.name), |b| {
                b.iter(|| {
                    // The kernels initialize their outputs, so runs need no reset.
                    if let Err(e) = prep.run_raw() {
                        failed.get_or_insert(e);
                    }
                    black_box(prep.bindings());
                })
            });
            if let Some(e) = failed {
                return Err(e);
            }
        }
        group.finish();
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    if let Err(e) = benches(&mut c) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    c.final_summary();
    ExitCode::SUCCESS
}
