//! The host target machine, module set-up and the optimization pipeline.

use crate::error::CodegenError;
use crate::CodegenOptions;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    ByteOrdering, CodeModel, InitializationConfig, RelocMode, Target, TargetMachine,
};
use inkwell::OptimizationLevel;
use std::sync::OnceLock;

/// The machine code generation targets, with the CPU name and features stamped on functions.
pub(crate) struct HostMachine {
    /// The target machine (optimization and the data layout).
    pub tm: TargetMachine,
    /// Value of the `target-cpu` function attribute.
    pub cpu: String,
    /// Value of the `target-features` function attribute.
    pub features: String,
    /// Whether the features include AVX-512F: functions then prefer 512-bit vectors.
    pub wide_vectors: bool,
    /// The bytes of one streaming (non-temporal) vector store, which must be aligned to them:
    /// 64 with AVX-512F, 32 with AVX on x86-64; `None` elsewhere (see
    /// `lacuna_stage2::stream`).
    pub stream_bytes: Option<u32>,
}

/// Initializes the native target once per process.
fn init_native() -> Result<(), CodegenError> {
    static INIT: OnceLock<Result<(), String>> = OnceLock::new();
    INIT.get_or_init(|| Target::initialize_native(&InitializationConfig::default()))
        .clone()
        .map_err(|message| CodegenError::Target { message })
}

/// Whether the host CPU has vector mask registers (AVX-512F), with which a vectorized loop's
/// masked tail (the `masked` annotation) costs about as little as a full vector step. Read
/// once from LLVM's view of the host's features.
pub fn host_has_vector_masks() -> bool {
    static MASKS: OnceLock<bool> = OnceLock::new();
    *MASKS.get_or_init(|| has_avx512f(&TargetMachine::get_host_cpu_features().to_string_lossy()))
}

/// The bytes of one streaming (non-temporal) vector store on the host: 64 with AVX-512F, 32
/// with AVX on x86-64, `None` elsewhere (the `nontemporal` annotation then stores as usual).
/// Read once from LLVM's view of the host.
pub fn host_stream_bytes() -> Option<u32> {
    static BYTES: OnceLock<Option<u32>> = OnceLock::new();
    *BYTES.get_or_init(|| {
        let (triple, features) = host_triple_and_features();
        stream_bytes(&triple, &features)
    })
}

/// How many f64 values the host's vector registers hold in all: 32 registers of 8 with
/// AVX-512F, 16 of 4 with AVX, 16 of 2 on other x86-64 (SSE2), 32 of 2 on AArch64 (NEON), 32
/// elsewhere. Register blockings keep their accumulators within half of it (SpMM's BSR
/// chunk, `lacuna::driver::bsr_chunk`): a blocking sized for AVX-512 spills on AVX2. Read once
/// from LLVM's view of the host.
pub fn host_vector_f64s() -> usize {
    static F64S: OnceLock<usize> = OnceLock::new();
    *F64S.get_or_init(|| {
        let (triple, features) = host_triple_and_features();
        vector_f64s(&triple, &features)
    })
}

/// LLVM's default target triple and the host CPU's feature string, which the host properties
/// above are read from.
fn host_triple_and_features() -> (String, String) {
    (
        TargetMachine::get_default_triple()
            .as_str()
            .to_string_lossy()
            .into_owned(),
        TargetMachine::get_host_cpu_features()
            .to_string_lossy()
            .into_owned(),
    )
}

/// [`host_vector_f64s`] for a target triple and an LLVM feature string.
fn vector_f64s(triple: &str, features: &str) -> usize {
    if triple.starts_with("x86_64") {
        if has_avx512f(features) {
            32 * 8
        } else if has_feature(features, "+avx") {
            16 * 4
        } else {
            16 * 2
        }
    } else if triple.starts_with("aarch64") {
        32 * 2
    } else {
        32
    }
}

/// [`host_stream_bytes`] for a target triple and an LLVM feature string.
fn stream_bytes(triple: &str, features: &str) -> Option<u32> {
    match (
        triple.starts_with("x86_64"),
        has_avx512f(features),
        has_feature(features, "+avx"),
    ) {
        (true, true, _) => Some(64),
        (true, false, true) => Some(32),
        _ => None,
    }
}

/// Whether masked vector lanes also pay off on long rows and on gathers served by L1 (see
/// `lacuna::driver::SPMV_UNMASKED_MIN_ROW`): true on hosts with vector masks except AMD's Zen
/// cores (LLVM's host CPU `znver*`), whose masked loop costs more per step than a full vector
/// body with a scalar remainder there. Read once from LLVM's view of the host.
pub fn host_masks_long_rows() -> bool {
    static LONG: OnceLock<bool> = OnceLock::new();
    *LONG.get_or_init(|| {
        host_has_vector_masks() && masks_long_rows(&TargetMachine::get_host_cpu_name().to_string())
    })
}

/// Whether the host's hardware prefetchers already cover the dense rows a sparse kernel
/// gathers, so that software prefetch of them (SpMM's rows of `B`) only costs: AMD Zen 5
/// (LLVM's `znver5`), where `lacuna bench` measured SpMM k = 128 23–35% slower with it on
/// cage11, ct2010, cit-HepPh and soc-Slashdot0902 (`B` 35–84 MB, session 13). Read once.
pub fn host_prefetches_rows() -> bool {
    static ROWS: OnceLock<bool> = OnceLock::new();
    *ROWS.get_or_init(|| prefetches_rows(&TargetMachine::get_host_cpu_name().to_string()))
}

/// Whether SpMV's gathers scattered over an `x` beyond L2 run faster row by row with a software
/// prefetch of the gathers (or across vector lanes, sliced ELL, where the rows are uniform) than
/// from column panels of `x` (`lacuna::driver::by_panels`): AMD Zen 5 (LLVM's `znver5`), whose
/// memory system keeps enough prefetched gathers in flight that each panel's extra pass over
/// `y` costs more than the narrower slice of `x` saves; panels won on an Intel Xeon guest
/// (session 24) and on AMD Zen 4 (session 34). `lacuna bench`, min of 5–10 runs (rmat-large:
/// the min over three processes), ms, one / two threads (session 37, Zen 5 guest: 1 MiB of L2
/// per core, 32 MiB of L3): rmat-large (`x` 16 MB, hub-heavy) `(panels 262144)` 53.0 / 26.5,
/// rows prefetched 256 entries ahead 40.8 / 20.6; er-large (`x` 16 MB, uniform rows of 10)
/// `(panels 32768)` 41.5 / 23.7, sliced ELL 17.6 / 7.7; a uniform random 8M × 8M with 10 per
/// row (`x` 64 MB, beyond L3) `(panels 32768)` 478 / 276, `(panels 131072)` 327 / 166, sliced
/// ELL 343 / 193, rows prefetched 184 / 94. Read once.
pub fn host_prefetches_far_gathers() -> bool {
    static FAR: OnceLock<bool> = OnceLock::new();
    *FAR.get_or_init(|| prefetches_far_gathers(&TargetMachine::get_host_cpu_name().to_string()))
}

/// [`host_prefetches_far_gathers`] for an LLVM CPU name.
fn prefetches_far_gathers(cpu: &str) -> bool {
    cpu.starts_with("znver5")
}

/// Whether the host gathers 8 f64 lanes from scattered addresses cheaply enough for sparse rows
/// to run across vector lanes (sliced ELL, one row per lane):
/// - AVX-512 on AMD Zen 4 and 5 (LLVM's `znver4`, `znver5`), where `lacuna bench` measured SpMV
///   on `(sell 8 1024)` 0.57–0.72 of the row-by-row schedule's time on road networks, citation
///   and social graphs (session 14);
/// - Intel's server cores with AMX (Sapphire Rapids and later: the `amx-tile` feature), whose
///   gathers run at full speed (they are not affected by Gather Data Sampling, whose microcode
///   mitigation slows the gathers of earlier Intel cores). Measured on one of them in session 20
///   (a 2-vCPU guest reporting model 167, which LLVM names `rocketlake`; AMX, 2 MiB L2 per
///   core), `lacuna bench`, min of 100 in each of two runs, `examples/schedules/spmv_sell.ron`
///   over the row-by-row built-in schedule, one / two threads: de2010 0.54 / 0.70, vt2010
///   0.58 / 0.72, citeseer_features 0.63 / 0.88, ct2010 0.69 / 0.87, cit-HepPh 0.70 / 0.77,
///   email-Enron 0.75 / 0.93, soc-Slashdot0902 0.82 / 0.97, cage10 0.84 / 0.96, ego-Facebook
///   0.84 / 0.87, EX5 1.03 / 0.79, bcsstk16 1.00 / 0.95, cage11 1.00 / 1.06, and wing (uniform
///   rows, which `lacuna::driver::sliced_rows` keeps row by row) 1.03 / 1.06.
///
/// Not measured on other Intel cores. Read once.
pub fn host_gathers_rows() -> bool {
    static GATHERS: OnceLock<bool> = OnceLock::new();
    *GATHERS.get_or_init(|| {
        host_has_vector_masks()
            && gathers_rows(
                &TargetMachine::get_host_cpu_name().to_string(),
                host_amx_core(),
            )
    })
}

/// Whether SpMM's register blocks keep a feature width of 32 f64 whole (four AVX-512 registers
/// of accumulators, one pass over the row) rather than two passes of 16 (see
/// `lacuna::driver::builtin_schedule`): on Intel's AMX server cores (the `amx-tile` feature, as
/// for [`host_gathers_rows`]). Measured in session 20 on the host described there, `lacuna
/// bench` at k = 32, min of 20 in each of two runs, split by 32 with vector lanes over split
/// by 16 unrolled, one / two threads, on the thirteen shared matrices above 100K entries:
/// geometric mean 0.93 / 0.89, from bcsstk16 0.72 / 0.67 and ego-Facebook 0.78 / 0.81 to
/// de2010 1.01 / 0.97 and vt2010 1.01 / 0.91. Zen 5 keeps 16 (session 13). Read once.
pub fn host_blocks_whole_width() -> bool {
    host_has_vector_masks() && host_amx_core()
}

/// Whether the host is one of Intel's AMX server cores ([`amx_core`]). Read once.
fn host_amx_core() -> bool {
    static AMX: OnceLock<bool> = OnceLock::new();
    *AMX.get_or_init(|| amx_core(&TargetMachine::get_host_cpu_features().to_string_lossy()))
}

/// Whether an LLVM feature string is that of one of Intel's server cores with AMX (Sapphire
/// Rapids and later): the `amx-tile` feature, read rather than the CPU's name, which a guest
/// may report as another model's.
fn amx_core(features: &str) -> bool {
    has_feature(features, "+amx-tile")
}

/// Whether the loops annotated `scalar_gathers` assemble their gathers of 8-byte elements from
/// scalar loads rather than gather instructions (see `gather.rs`): on AMD Zen 5 (LLVM's
/// `znver5`), where an element costs 0.17 ns that way against 0.23 with `vgatherdpd` (`x` in
/// L1; SpMV 10–24% faster on seven matrices with `x` in L1 or L2, session 17), and Zen 4, whose
/// gathers are slower still (not measured). `LACUNA_GATHERS=hardware` in the environment keeps
/// every gather instruction, `LACUNA_GATHERS=loads` assembles the gathers of every loop on any
/// host, annotated or not (for comparisons). Read once.
pub fn host_assembles_gathers() -> bool {
    static SCALAR: OnceLock<bool> = OnceLock::new();
    *SCALAR.get_or_init(|| match gathers_env().as_deref() {
        Some("hardware") => false,
        Some("loads") => true,
        _ => assembles_gathers(&TargetMachine::get_host_cpu_name().to_string()),
    })
}

fn gathers_env() -> Option<String> {
    std::env::var("LACUNA_GATHERS").ok()
}

/// `LACUNA_GATHERS=loads`: every function's gathers are assembled, not only the annotated
/// loops'. Read once.
fn gathers_everywhere() -> bool {
    static ALL: OnceLock<bool> = OnceLock::new();
    *ALL.get_or_init(|| gathers_env().as_deref() == Some("loads"))
}

/// [`host_assembles_gathers`] for an LLVM CPU name.
fn assembles_gathers(cpu: &str) -> bool {
    cpu.starts_with("znver4") || cpu.starts_with("znver5")
}

/// [`host_gathers_rows`] for an LLVM CPU name and whether the host is an AMX core (assuming
/// AVX-512).
fn gathers_rows(cpu: &str, amx: bool) -> bool {
    cpu.starts_with("znver4") || cpu.starts_with("znver5") || amx
}

/// Bytes of the host's per-core L2 cache (the unified or data cache of level 2 of CPU 0, as
/// Linux's sysfs reports it), or [`DEFAULT_L2_BYTES`] where it cannot be read. Read once.
pub fn host_l2_bytes() -> usize {
    static L2: OnceLock<usize> = OnceLock::new();
    *L2.get_or_init(|| host_cache_bytes(2).unwrap_or(DEFAULT_L2_BYTES))
}

/// Bytes of the host's level-3 cache as CPU 0 sees it (the slice it shares with its neighbours:
/// a CCX's on AMD), as Linux's sysfs reports it, or 0 where there is none or it cannot be read.
/// Read once.
pub fn host_l3_bytes() -> usize {
    static L3: OnceLock<usize> = OnceLock::new();
    *L3.get_or_init(|| host_cache_bytes(3).unwrap_or(0))
}

/// The unified or data cache of `level` of CPU 0 in sysfs, in bytes.
fn host_cache_bytes(level: u32) -> Option<usize> {
    (0..8).find_map(|i| {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
        let at_level = read("level")?.trim().parse::<u32>().ok()? == level;
        let kind = read("type")?;
        let usable = matches!(kind.trim(), "Unified" | "Data");
        if at_level && usable {
            cache_bytes(&read("size")?)
        } else {
            None
        }
    })
}

/// Whether the host's L3 serves gathers from a working set several times L2's size nearly as
/// well as L2: AMD's Zen cores (LLVM's `znver*`), whose L3 is a victim cache of the cores' L2s,
/// 32 MiB per CCX at about 50 cycles. The built-in schedules then size their layouts by it:
/// SpMV's column panels over hub-heavy gathers a sixteenth of L3 wide
/// (`lacuna::driver::spmv_panel_width`), SpMM's rows in reverse Cuthill–McKee order only where
/// `B` exceeds L3 (`lacuna::driver::spmm_by_rcm`). Measured on Zen 4 (session 34); Zen 3 and
/// 5 share the cache design, not measured. Read once.
pub fn host_fast_l3() -> bool {
    static L3: OnceLock<bool> = OnceLock::new();
    *L3.get_or_init(|| fast_l3(&TargetMachine::get_host_cpu_name().to_string()))
}

/// [`host_fast_l3`] for an LLVM CPU name.
fn fast_l3(cpu: &str) -> bool {
    cpu.starts_with("znver")
}

/// The L2 size assumed where the host's cannot be read.
pub const DEFAULT_L2_BYTES: usize = 1 << 20;

/// A cache size as sysfs writes it (`2048K`, `1M`, `512`), in bytes; `None` for anything else
/// or zero.
fn cache_bytes(text: &str) -> Option<usize> {
    let t = text.trim();
    let (digits, unit) = match t.strip_suffix(['K', 'k']) {
        Some(d) => (d, 1usize << 10),
        None => match t.strip_suffix(['M', 'm']) {
            Some(d) => (d, 1 << 20),
            None => (t, 1),
        },
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .filter(|&n| n > 0)
}

/// [`host_prefetches_rows`] for an LLVM CPU name.
fn prefetches_rows(cpu: &str) -> bool {
    cpu.starts_with("znver5")
}

/// [`host_masks_long_rows`] for an LLVM CPU name (assuming vector masks).
fn masks_long_rows(cpu: &str) -> bool {
    !cpu.starts_with("znver")
}

/// Whether an LLVM feature string (`+sse2,+avx512f,...`) enables AVX-512F.
fn has_avx512f(features: &str) -> bool {
    has_feature(features, "+avx512f")
}

/// Whether an LLVM feature string holds `feature` (`+name`: enabled) exactly.
fn has_feature(features: &str, feature: &str) -> bool {
    features.split(',').any(|f| f == feature)
}

/// The LLVM optimization level for `opts.opt_level` (0 to 3).
pub(crate) fn opt_level(opts: &CodegenOptions) -> Result<OptimizationLevel, CodegenError> {
    Ok(match opts.opt_level {
        0 => OptimizationLevel::None,
        1 => OptimizationLevel::Less,
        2 => OptimizationLevel::Default,
        3 => OptimizationLevel::Aggressive,
        level => return Err(CodegenError::OptLevel { level }),
    })
}

/// A target machine for the host, with its CPU and features unless `opts.host_cpu` is off.
pub(crate) fn host_machine(opts: &CodegenOptions) -> Result<HostMachine, CodegenError> {
    let level = opt_level(opts)?;
    init_native()?;
    let triple = TargetMachine::get_default_triple();
    let target = Target::from_triple(&triple).map_err(|e| CodegenError::Target {
        message: e.to_string(),
    })?;
    let (cpu, features) = if opts.host_cpu {
        (
            TargetMachine::get_host_cpu_name().to_string(),
            TargetMachine::get_host_cpu_features().to_string(),
        )
    } else {
        ("generic".to_string(), String::new())
    };
    let tm = target
        .create_target_machine(
            &triple,
            &cpu,
            &features,
            level,
            RelocMode::Default,
            CodeModel::JITDefault,
        )
        .ok_or_else(|| CodegenError::Target {
            message: format!(
                "no target machine for {} (cpu {cpu})",
                triple.as_str().to_string_lossy()
            ),
        })?;
    let wide_vectors = has_avx512f(&features);
    let stream_bytes = stream_bytes(&triple.as_str().to_string_lossy(), &features);
    Ok(HostMachine {
        tm,
        cpu,
        features,
        wide_vectors,
        stream_bytes,
    })
}

/// Sets the module's triple and data layout from the target machine.
pub(crate) fn configure_module(module: &Module<'_>, hm: &HostMachine) {
    module.set_triple(&hm.tm.get_triple());
    module.set_data_layout(&hm.tm.get_target_data().get_data_layout());
}

/// Runs the `default<On>` pipeline (which always runs the always-inliner).
pub(crate) fn optimize(
    module: &Module<'_>,
    hm: &HostMachine,
    opts: &CodegenOptions,
) -> Result<(), CodegenError> {
    opt_level(opts)?;
    if opts.fp_contract {
        allow_contraction(module);
    }
    let pbo = PassBuilderOptions::create();
    let vectorize = opts.opt_level >= 2;
    pbo.set_loop_vectorization(vectorize);
    pbo.set_loop_slp_vectorization(vectorize);
    pbo.set_loop_interleaving(vectorize);
    pbo.set_loop_unrolling(opts.opt_level >= 2);
    let pipeline = format!("default<O{}>", opts.opt_level);
    crate::gather::propagate_marks(module);
    module
        .run_passes(&pipeline, &hm.tm, pbo)
        .map_err(|e| CodegenError::Optimize {
            message: e.to_string(),
        })?;
    let little_endian = hm.tm.get_target_data().get_byte_ordering() == ByteOrdering::LittleEndian;
    if opts.assemble_gathers && opts.host_cpu && little_endian {
        crate::gather::assemble_gathers(module, gathers_everywhere());
    }
    Ok(())
}

/// Marks every floating-point multiply, add and subtract of `module` `contract`: LLVM may fuse
/// a product and the sum it feeds into one fused multiply-add (`vfmadd`, PTX `fma.rn`), which
/// rounds once instead of twice. Nothing is reassociated; results may differ from the
/// interpreters' (two roundings) in the last bits. C compilers do the same by default
/// (`-ffp-contract`, `nvcc --fmad=true`); [`CodegenOptions::fp_contract`] turns it off.
pub(crate) fn allow_contraction(module: &Module<'_>) {
    use inkwell::values::{FastMathFlags, InstructionOpcode};
    let mut f = module.get_first_function();
    while let Some(func) = f {
        for bb in func.get_basic_blocks() {
            let mut i = bb.get_first_instruction();
            while let Some(inst) = i {
                if matches!(
                    inst.get_opcode(),
                    InstructionOpcode::FMul | InstructionOpcode::FAdd | InstructionOpcode::FSub
                ) {
                    let flags = inst.get_fast_math_flags().unwrap_or(FastMathFlags::empty());
                    // Only fails for an instruction without fast-math flags, not these.
                    let _ = inst.set_fast_math_flags(flags | FastMathFlags::AllowContract);
                }
                i = inst.get_next_instruction();
            }
        }
        f = func.get_next_function();
    }
}

#[cfg(test)]
mod tests {
    use super::{
        amx_core, assembles_gathers, cache_bytes, fast_l3, gathers_rows, has_avx512f,
        masks_long_rows, prefetches_far_gathers, prefetches_rows, vector_f64s,
    };

    /// Sizes as sysfs writes them; anything else is unreadable, not a guess.
    #[test]
    fn cache_sizes_are_read_in_sysfs_units() {
        assert_eq!(cache_bytes("2048K\n"), Some(2 << 20));
        assert_eq!(cache_bytes("1M"), Some(1 << 20));
        assert_eq!(cache_bytes("512"), Some(512));
        assert_eq!(cache_bytes("0K"), None);
        assert_eq!(cache_bytes(""), None);
        assert_eq!(cache_bytes("2 MiB"), None);
        assert_eq!(cache_bytes("99999999999999999999K"), None);
    }

    #[test]
    fn zen_cores_have_a_fast_l3() {
        assert!(fast_l3("znver4"));
        assert!(fast_l3("znver3"));
        assert!(!fast_l3("skylake-avx512"));
        assert!(!fast_l3("sapphirerapids"));
    }

    #[test]
    fn zen4_and_zen5_assemble_gathers() {
        assert!(assembles_gathers("znver5"));
        assert!(assembles_gathers("znver4"));
        assert!(!assembles_gathers("znver3"));
        assert!(!assembles_gathers("skylake-avx512"));
    }

    /// Rows across vector lanes only on the cores where they were measured to win: Zen 4 and 5
    /// by name, Intel's AMX cores by feature (a guest may report another model's name).
    #[test]
    fn zen4_zen5_and_amx_cores_gather_rows() {
        assert!(gathers_rows("znver4", false));
        assert!(gathers_rows("znver5", false));
        assert!(!gathers_rows("znver3", false));
        assert!(!gathers_rows("skylake-avx512", false));
        assert!(!gathers_rows("icelake-server", false));
        assert!(gathers_rows("sapphirerapids", true));
        assert!(gathers_rows("rocketlake", true));
    }

    /// AMX cores are recognised by the enabled `amx-tile` feature alone.
    #[test]
    fn amx_cores_are_read_from_the_feature_string() {
        assert!(amx_core("+avx2,+avx512f,+amx-bf16,+amx-int8,+amx-tile"));
        assert!(!amx_core("+avx2,+avx512f,+avx512vl"));
        assert!(!amx_core("+avx512f,-amx-tile,+amx-tilex"));
    }

    /// Zen 5 prefetches gathered rows itself; older and other cores are left to software.
    #[test]
    fn zen5_prefetches_rows_itself() {
        assert!(prefetches_rows("znver5"));
        assert!(!prefetches_rows("znver3"));
        assert!(!prefetches_rows("sapphirerapids"));
    }

    /// Prefetched rows beat column panels on far gathers on Zen 5 only.
    #[test]
    fn zen5_prefetches_far_gathers_without_panels() {
        assert!(prefetches_far_gathers("znver5"));
        assert!(!prefetches_far_gathers("znver4"));
        assert!(!prefetches_far_gathers("sapphirerapids"));
        assert!(!prefetches_far_gathers("skylake-avx512"));
    }

    /// AMD's Zen cores keep masked lanes to short rows; other AVX-512 cores use them throughout.
    #[test]
    fn zen_cores_keep_masks_to_short_rows() {
        assert!(!masks_long_rows("znver4"));
        assert!(!masks_long_rows("znver5"));
        assert!(masks_long_rows("sapphirerapids"));
        assert!(masks_long_rows("icelake-server"));
    }

    /// Only the feature itself, enabled, counts: not a disabled one nor a longer name.
    #[test]
    fn avx512f_is_read_from_the_feature_string() {
        assert!(has_avx512f("+sse2,+avx2,+avx512f,+fma"));
        assert!(!has_avx512f("+sse2,-avx512f,+avx512fp16"));
        assert!(!has_avx512f(""));
    }

    /// The register file by the widest vector feature enabled: a disabled AVX-512F counts as
    /// absent.
    #[test]
    fn vector_registers_are_counted_by_the_widest_feature() {
        let x86 = "x86_64-unknown-linux-gnu";
        assert_eq!(vector_f64s(x86, "+sse2,+avx,+avx2,+avx512f"), 256);
        assert_eq!(vector_f64s(x86, "+sse2,+avx,+avx2,-avx512f"), 64);
        assert_eq!(vector_f64s(x86, "+sse2"), 32);
        assert_eq!(vector_f64s("aarch64-unknown-linux-gnu", "+neon"), 64);
        assert_eq!(vector_f64s("riscv64gc-unknown-linux-gnu", ""), 32);
    }
}
