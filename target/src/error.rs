//! Errors of code generation ([`CodegenError`]) and of running a compiled kernel ([`RuntimeError`]).

use lacuna_ir::DType;
use lacuna_stage1::BinOp;

/// A function that cannot be compiled, or a failure inside LLVM.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CodegenError {
    /// A buffer still has stage-II axes (the function is not flat).
    #[error("not flat: buffer `{buffer}` still has axes {layout:?}")]
    NotFlatBuffer {
        /// The buffer.
        buffer: String,
        /// Its remaining layout.
        layout: Vec<String>,
    },
    /// A load or store with other than exactly one index (the function is not flat).
    #[error("not flat: access to `{buffer}` with {count} indices (expected 1)")]
    NotFlatAccess {
        /// The buffer.
        buffer: String,
        /// Number of indices of the access.
        count: usize,
    },
    /// An untranslated coordinate remains (the function is not flat).
    #[error("not flat: untranslated coordinate @{var}")]
    Coordinate {
        /// The iterator variable.
        var: String,
    },
    /// A block still has init statements (the function is not flat).
    #[error("not flat: block `{block}` has init statements")]
    BlockInit {
        /// The block's name.
        block: String,
    },
    /// Two buffers of the function share a name.
    #[error("buffer `{buffer}` is declared twice")]
    DuplicateBuffer {
        /// The buffer.
        buffer: String,
    },
    /// A buffer declared with element type `bool`.
    #[error("buffer `{buffer}` has element type bool, which buffers cannot hold")]
    BoolBuffer {
        /// The buffer.
        buffer: String,
    },
    /// An access names no declared buffer.
    #[error("unknown buffer `{buffer}`")]
    UnknownBuffer {
        /// The buffer.
        buffer: String,
    },
    /// A variable is used outside the scope of any loop or `Let` binding it.
    #[error("unknown variable `{var}`")]
    UnknownVariable {
        /// The variable.
        var: String,
    },
    /// An assignment to a loop or `Let` variable (only `Decl` variables are mutable).
    #[error("assignment to `{var}`, which is not a mutable (declared) variable")]
    AssignImmutable {
        /// The variable.
        var: String,
    },
    /// A parameter not listed in the function's parameters.
    #[error("unknown parameter `{param}`")]
    UnknownParam {
        /// The parameter.
        param: String,
    },
    /// The operands of a binary operation have different types.
    #[error("operands of {op:?} have different types {left} and {right}")]
    OperandTypes {
        /// The operation.
        op: BinOp,
        /// Type of the left operand.
        left: DType,
        /// Type of the right operand.
        right: DType,
    },
    /// The two arms of a `select` have different types.
    #[error("arms of select have different types {then_type} and {else_type}")]
    SelectTypes {
        /// Type of the value when the condition holds.
        then_type: DType,
        /// Type of the value otherwise.
        else_type: DType,
    },
    /// A binary operation applied to a type it is not defined on (e.g. `pow` on integers).
    #[error("{op:?} is not defined on {dtype}")]
    BinaryType {
        /// The operation.
        op: BinOp,
        /// The operands' type.
        dtype: DType,
    },
    /// A buffer index that is not an integer.
    #[error("index into `{buffer}` has type {dtype}, expected an integer")]
    IndexType {
        /// The buffer.
        buffer: String,
        /// The index's type.
        dtype: DType,
    },
    /// A loop bound that is not an integer.
    #[error("bound of loop `{var}` has type {dtype}, expected an integer")]
    LoopBoundType {
        /// The loop variable.
        var: String,
        /// The bound's type.
        dtype: DType,
    },
    /// A search in a buffer that does not hold integers.
    #[error(
        "search in `{buffer}` of element type {dtype}: only i32 and i64 buffers can be searched"
    )]
    SearchBuffer {
        /// The buffer.
        buffer: String,
        /// Its element type.
        dtype: DType,
    },
    /// A search bound or searched value that is not an integer.
    #[error("operand of search in `{buffer}` has type {dtype}, expected an integer")]
    SearchOperand {
        /// The buffer.
        buffer: String,
        /// The operand's type.
        dtype: DType,
    },
    /// An optimization level outside 0..=3.
    #[error("optimization level {level} is not supported (use 0 to 3)")]
    OptLevel {
        /// The requested level.
        level: u8,
    },
    /// The host target cannot be initialized or has no target machine.
    #[error("cannot set up the host target: {message}")]
    Target {
        /// LLVM's message.
        message: String,
    },
    /// The generated module is invalid (a bug of the code generator).
    #[error("LLVM rejected the generated module for `{kernel}`: {message}")]
    Verify {
        /// The kernel.
        kernel: String,
        /// The verifier's message.
        message: String,
    },
    /// The optimization pipeline failed.
    #[error("LLVM optimization failed: {message}")]
    Optimize {
        /// LLVM's message.
        message: String,
    },
    /// The JIT could not be created or did not produce the entry point.
    #[error("JIT compilation failed: {message}")]
    Jit {
        /// LLVM's message.
        message: String,
    },
    /// The function cannot be launched as a GPU kernel.
    #[error(transparent)]
    Gpu(#[from] lacuna_stage2::gpu::GpuError),
    /// A CUDA target other than `cuda`, `cuda:sm_80` or `cuda:sm_90`.
    #[error("unknown GPU target `{target}`: use cuda:sm_80 or cuda:sm_90")]
    GpuTarget {
        /// The requested target.
        target: String,
    },
    /// A barrier or warp shuffle in code for the CPU.
    #[error("{what} is GPU-only: compile the kernel for a cuda target (cuda:sm_80 or cuda:sm_90)")]
    GpuOnly {
        /// `barrier` or `warp shuffle`.
        what: &'static str,
    },
    /// A scratch buffer that cannot be allocated where it is.
    #[error("scratch buffer `{buffer}` ({scope}): {why}")]
    Scratch {
        /// The scratch buffer.
        buffer: String,
        /// Its scope.
        scope: &'static str,
        /// What is wrong.
        why: String,
    },
    /// A malformed warp shuffle.
    #[error("warp shuffle: {why}")]
    Shuffle {
        /// What is wrong.
        why: String,
    },
    /// An LLVM builder call failed (a bug of the code generator).
    #[error("LLVM builder error: {message}")]
    Llvm {
        /// What failed.
        message: String,
    },
}

impl From<inkwell::builder::BuilderError> for CodegenError {
    fn from(e: inkwell::builder::BuilderError) -> Self {
        CodegenError::Llvm {
            message: e.to_string(),
        }
    }
}

/// Bound data that does not fit a compiled kernel.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    /// A value buffer of the kernel has no data in the bindings.
    #[error("no data bound for buffer `{buffer}`")]
    MissingBuffer {
        /// The buffer.
        buffer: String,
    },
    /// A structure array the kernel reads is not bound.
    #[error("buffer `{buffer}`: axis `{axis}` has no bound {array} array")]
    MissingStructure {
        /// The buffer (`AXIS.indptr` or `AXIS.indices`).
        buffer: String,
        /// The axis.
        axis: String,
        /// `indptr` or `indices`.
        array: &'static str,
    },
    /// Bound data has another element type than the kernel was compiled for.
    #[error(
        "buffer `{buffer}` is bound with element type {found}, but the kernel expects {expected}"
    )]
    DType {
        /// The buffer.
        buffer: String,
        /// Declared element type.
        expected: DType,
        /// Bound element type.
        found: DType,
    },
    /// A parameter of the kernel has no value.
    #[error("no value bound for parameter `{param}`")]
    MissingParam {
        /// The parameter.
        param: String,
    },
}
