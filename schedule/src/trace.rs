//! Schedule instructions and schedule files (RON): a kernel name and a trace, replayed in order.

use serde::{Deserialize, Serialize};

/// Version of the schedule file format.
pub const SCHEDULE_FORMAT_VERSION: u32 = 1;

/// One applied primitive, with its arguments.
///
/// Loops are named by their iterator variable (`"k"`), or `"BLOCK:var"` to pick the loop of
/// `var` that encloses block `BLOCK` when several loops share a variable (e.g. an init nest).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Instruction {
    /// Stage I: iterate the axes of a sparse iteration in another order.
    SparseReorder {
        /// The iteration (block) name.
        iter: String,
        /// All of its axes, in the new order.
        axes: Vec<String>,
    },
    /// Stage I: move the init of a sparse iteration into its own iteration `ITER_init` over
    /// the spatial axes, placed just before it (so that a spatial and a reduction axis can then
    /// be fused).
    SparseDecomposeInit {
        /// The iteration (block) name.
        iter: String,
    },
    /// Stage I: iterate a dense axis and its variable child as one flat axis.
    SparseFuse {
        /// The iteration (block) name.
        iter: String,
        /// The two axes, parent first.
        axes: Vec<String>,
    },
    /// Stage I: store a CSR buffer as a sum of parts in other formats (a decomposition term of
    /// `lacuna_schedule::decompose`, e.g. `(+ (bucket 1 5 (ell 4)) (split_rows 4))`), each
    /// part computed by its own copy of the iterations that read the buffer.
    DecomposeFormat {
        /// The buffer.
        buffer: String,
        /// The decomposition.
        into: String,
    },
    /// Stage I: store the values of a sparse buffer whose values are all equal once (GraphBLAS's
    /// iso-valued matrices; a Matrix Market `pattern` file): the kernel reads one value instead
    /// of one per entry, and the run checks the buffer's values equal. Applies to a buffer as
    /// stored or after its `decompose_format` into parts that store exactly its entries
    /// (`csr`, `remainder`, `rcm`, `panels`, `sell`).
    IsoValues {
        /// The buffer.
        buffer: String,
    },
    /// Stage I: iterate the stored positions of a buffer's sparse axis instead of a dense
    /// axis's coordinates (TACO's `pos`).
    Pos {
        /// The iteration (block) name.
        iter: String,
        /// The dense axis it iterates.
        axis: String,
        /// The buffer whose positions to iterate.
        buffer: String,
    },
    /// Stage I: bind a symbolic size to a constant.
    Specialize {
        /// The parameter.
        param: String,
        /// Its value.
        value: u64,
    },
    /// Stage II: split a loop into nested loops of the given extents (one may be `None`,
    /// inferred); a tail that does not divide evenly is guarded.
    Split {
        /// The loop.
        r#loop: String,
        /// Extents, outermost first.
        factors: Vec<Option<u64>>,
    },
    /// Stage II: divide a loop into `parts` outer chunks of equal size (TACO's `divide`; a
    /// split whose outer extent is given).
    Divide {
        /// The loop.
        r#loop: String,
        /// Number of chunks.
        parts: u64,
    },
    /// Stage II: fuse two directly nested loops into one.
    Fuse {
        /// The outer loop.
        outer: String,
        /// The inner loop.
        inner: String,
    },
    /// Stage II: permute perfectly nested loops.
    Reorder {
        /// The loops in their new order, outermost first.
        loops: Vec<String>,
    },
    /// Stage II: run a loop's iterations in parallel.
    Parallel {
        /// The loop.
        r#loop: String,
    },
    /// Stage II: execute an innermost loop's iterations as vector lanes.
    Vectorize {
        /// The loop.
        r#loop: String,
    },
    /// Stage II: bind a loop to a GPU thread dimension (`blockIdx.x`, `threadIdx.y`, ...);
    /// requires independent iterations. Runs serially on the CPU; the stage-II interpreter
    /// checks bound loops for races.
    Bind {
        /// The loop.
        r#loop: String,
        /// The thread dimension.
        thread: String,
    },
    /// Stage II: unroll a loop.
    Unroll {
        /// The loop.
        r#loop: String,
    },
    // --- compute_at family, block structure, bound, annotations ---
    /// Stage II: move the loop nest of a producer block under a later consumer's loop,
    /// computing one slice per iteration of the loop (TVM's compute_at).
    ComputeAt {
        /// The producer block.
        block: String,
        /// The consumer's loop.
        r#loop: String,
    },
    /// Stage II: move the loop nest of a consumer block under an earlier producer's loop, at
    /// the end of its body (TVM's reverse_compute_at).
    ReverseComputeAt {
        /// The consumer block.
        block: String,
        /// The producer's loop.
        r#loop: String,
    },
    /// Stage II: move the init of a reduction block (`BLOCK_init`) out of a loop that
    /// encloses it, into its own copy of the loops, before that loop.
    DecomposeReduction {
        /// The reduction block.
        block: String,
        /// The loop to move the init before.
        r#loop: String,
    },
    /// Stage II: wrap a loop and its subtree in a new block `blockize_VAR`.
    Blockize {
        /// The loop.
        r#loop: String,
    },
    /// Stage II: move a loop that is the only statement of a block's body outside the block,
    /// adding its variable to the block's iterators (SparseTIR's lift_loop).
    LiftLoop {
        /// The loop.
        r#loop: String,
    },
    /// Stage II: give a loop a constant extent with a guard (TACO's bound), followed by a
    /// remainder loop for longer ranges.
    Bound {
        /// The loop.
        r#loop: String,
        /// Its constant extent.
        extent: u64,
    },
    /// Stage II post pass: fuse consecutive sibling loops (e.g. the per-part nests of
    /// `decompose_format`) into one loop over their concatenated ranges, dispatching on the part
    /// (SparseTIR's horizontal fusion).
    HorizontalFuse {
        /// The loops, in program order.
        loops: Vec<String>,
    },
    /// Stage I: assert a closed form for an axis's `indptr` or `indices` (e.g. a band, or
    /// rows of one length); the kernel computes it instead of loading the array, and binding
    /// checks the data against it.
    SpecializeBuffer {
        /// The axis.
        axis: String,
        /// The closed form.
        form: lacuna_stage1::ClosedForm,
    },
    /// Stage I: set an annotation of a sparse iteration (e.g. `preprocess`; SparseTIR's
    /// `annotate` on sparse iterations).
    SparseAnnotate {
        /// The iteration.
        iter: String,
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Stage I: remove an annotation of a sparse iteration.
    SparseUnannotate {
        /// The iteration.
        iter: String,
        /// The key.
        key: String,
    },
    /// Stage II: factor a reduction loop of constant extent into per-iteration partial results
    /// (a `local` scratch buffer) and a final reduction loop `LOOP.rf` (TVM's `rfactor`).
    /// Binding `LOOP.rf` to `threadIdx.x` then makes the final reduction a warp reduction.
    /// When the loop is the only statement of enclosing serial loops that the reduced element
    /// does not vary in (the inner part of a split reduction), the partial results span them:
    /// several accumulators once the loop is unrolled. On the way there it may cross loops of
    /// constant range that move the element (a BSR block's rows): one set per element.
    Rfactor {
        /// The loop.
        r#loop: String,
    },
    /// Stage II: annotate a loop (TVM's `annotate`): `atomic` (its stores, sums into
    /// elements, become atomic adds, so that the loop may be bound or parallelized),
    /// `pragma_unroll` (unroll count hint, `value` ≥ 1), `prefetch` (CPU codegen prefetches
    /// the loads `value` ≥ 1 iterations ahead), `masked` (a vectorized loop's tail runs as
    /// masked lanes, `value` ≥ 1 vector registers per step).
    Annotate {
        /// The loop.
        r#loop: String,
        /// `atomic`, `pragma_unroll`, `prefetch`, `masked` or `launch`.
        key: String,
        /// The annotation's value (ignored for `atomic`, 0 for `launch`).
        value: i64,
    },
    /// Stage II: remove an annotation from a loop (atomics become plain stores again).
    Unannotate {
        /// The loop.
        r#loop: String,
        /// The annotation's key.
        key: String,
    },
    // --- cache and scope primitives ---
    /// Stage II: stage the elements of `buffer` that block `block` reads under loop `at` (the
    /// outermost loop of the block when `None`) in a new scratch buffer `BUFFER_SCOPE` of
    /// `scope` (`local` or `shared`), filled by a copy stage before the consumer (TVM's
    /// `cache_read`); the cache is laid out like the buffer's region.
    CacheRead {
        /// The consumer block.
        block: String,
        /// The buffer.
        buffer: String,
        /// `local` or `shared`.
        scope: String,
        /// The loop under which the region is staged.
        #[serde(default)]
        at: Option<String>,
    },
    /// Stage II: stage the element block `block` writes in a cache of `scope` under loop `at`,
    /// loaded first when the block also reads it, and written back after the consumer (TVM's
    /// `cache_write`).
    CacheWrite {
        /// The producer block.
        block: String,
        /// The buffer.
        buffer: String,
        /// `local` or `shared`.
        scope: String,
        /// The loop under which the region is staged.
        #[serde(default)]
        at: Option<String>,
    },
    /// Stage II: like `CacheRead`, but the cache is indexed by the consumer's loops and the
    /// (possibly indirect) index is applied in the copy stage: a gather (SparseTIR's
    /// `reverse_cache_read`).
    ReverseCacheRead {
        /// The consumer block.
        block: String,
        /// The buffer.
        buffer: String,
        /// `local` or `shared`.
        scope: String,
        /// The loop under which the region is staged.
        #[serde(default)]
        at: Option<String>,
    },
    /// Stage II: accumulate the block's sum into `buffer` in a zero-initialized cache indexed
    /// by the consumer's loops, and add it back (a scatter-add, atomic when the update was)
    /// after the consumer (SparseTIR's `reverse_cache_write`).
    ReverseCacheWrite {
        /// The producer block.
        block: String,
        /// The buffer.
        buffer: String,
        /// `local` or `shared`.
        scope: String,
        /// The loop under which the region is staged.
        #[serde(default)]
        at: Option<String>,
    },
    /// Stage II: change the scope of a scratch buffer (`global`, `shared`, `local`); to
    /// `shared` only where all its accesses happen inside one block's threads.
    SetScope {
        /// The scratch buffer.
        buffer: String,
        /// The new scope.
        scope: String,
    },
    /// Stage II post pass: move the structure-only work (coordinate searches over
    /// indptr/indices, and the iterations annotated `preprocess`) into a preprocessing
    /// function that runs once per matrix before the kernel; the kernel reads the searches'
    /// results from aux buffers `mid_K` (SparseTIR's `ExtractPreprocess`/`RemovePreprocess`).
    ExtractPreprocess,
}

impl Instruction {
    /// The primitive's name, as in error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Instruction::SparseReorder { .. } => "sparse_reorder",
            Instruction::SparseFuse { .. } => "sparse_fuse",
            Instruction::SparseDecomposeInit { .. } => "sparse_decompose_init",
            Instruction::Pos { .. } => "pos",
            Instruction::DecomposeFormat { .. } => "decompose_format",
            Instruction::IsoValues { .. } => "iso_values",
            Instruction::Specialize { .. } => "specialize",
            Instruction::Split { .. } => "split",
            Instruction::Divide { .. } => "divide",
            Instruction::Fuse { .. } => "fuse",
            Instruction::Reorder { .. } => "reorder",
            Instruction::Parallel { .. } => "parallel",
            Instruction::Vectorize { .. } => "vectorize",
            Instruction::Unroll { .. } => "unroll",
            Instruction::Bind { .. } => "bind",
            Instruction::ComputeAt { .. } => "compute_at",
            Instruction::ReverseComputeAt { .. } => "reverse_compute_at",
            Instruction::DecomposeReduction { .. } => "decompose_reduction",
            Instruction::Blockize { .. } => "blockize",
            Instruction::LiftLoop { .. } => "lift_loop",
            Instruction::Bound { .. } => "bound",
            Instruction::HorizontalFuse { .. } => "horizontal_fuse",
            Instruction::SpecializeBuffer { .. } => "specialize_buffer",
            Instruction::SparseAnnotate { .. } => "sparse_annotate",
            Instruction::SparseUnannotate { .. } => "sparse_unannotate",
            Instruction::Rfactor { .. } => "rfactor",
            Instruction::Annotate { .. } => "annotate",
            Instruction::Unannotate { .. } => "unannotate",
            Instruction::CacheRead { .. } => "cache_read",
            Instruction::CacheWrite { .. } => "cache_write",
            Instruction::ReverseCacheRead { .. } => "reverse_cache_read",
            Instruction::ReverseCacheWrite { .. } => "reverse_cache_write",
            Instruction::SetScope { .. } => "set_scope",
            Instruction::ExtractPreprocess => "extract_preprocess",
        }
    }
    /// True for primitives that transform the stage-I program.
    pub fn is_stage1(&self) -> bool {
        matches!(
            self,
            Instruction::SparseReorder { .. }
                | Instruction::SparseFuse { .. }
                | Instruction::SparseDecomposeInit { .. }
                | Instruction::Pos { .. }
                | Instruction::DecomposeFormat { .. }
                | Instruction::IsoValues { .. }
                | Instruction::Specialize { .. }
                | Instruction::SparseAnnotate { .. }
                | Instruction::SpecializeBuffer { .. }
                | Instruction::SparseUnannotate { .. }
        )
    }
}

/// A schedule file: the kernel it applies to and the trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleFile {
    /// Format version (1).
    pub version: u32,
    /// The kernel's name.
    pub kernel: String,
    /// Applied primitives, in order.
    pub trace: Vec<Instruction>,
}

impl ScheduleFile {
    /// Parses a schedule file. `Some(x)` may be written `x`.
    pub fn from_ron(text: &str) -> Result<ScheduleFile, ron::error::SpannedError> {
        Self::ron_options().from_str(text)
    }
    /// Serializes to pretty RON.
    pub fn to_ron(&self) -> String {
        let cfg = ron::ser::PrettyConfig::new()
            .struct_names(false)
            .extensions(ron::extensions::Extensions::IMPLICIT_SOME);
        Self::ron_options()
            .to_string_pretty(self, cfg)
            .expect("schedule files always serialize")
    }
    /// Serializes to RON on one line (for a JSON field or a log line); [`ScheduleFile::from_ron`]
    /// reads it back.
    pub fn to_ron_line(&self) -> String {
        Self::ron_options()
            .to_string(self)
            .expect("schedule files always serialize")
    }
    /// RON with `Some(x)` written `x`, as schedule files are read and written.
    fn ron_options() -> ron::Options {
        ron::Options::default().with_default_extension(ron::extensions::Extensions::IMPLICIT_SOME)
    }
}
