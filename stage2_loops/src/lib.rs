//! Stage II of Lacuna: the loop IR, lowering from stage I, flattening, simplification and an
//! interpreter.
//!
//! See [`ir`] for the meaning of the IR at its two levels (stage II and flat), and
//! [`pipeline::lower`] for the passes from stage I down to flat loops.
#![warn(missing_docs)]

pub mod coiter;
pub mod gpu;
pub mod gpu_mem;
mod interp;
pub mod ir;
pub mod passes;
pub mod pipeline;
mod print;
pub mod stream;

pub use interp::{interpret_func, interpret_gpu, Stage2InterpError};
pub use ir::{
    bound_vars, expr_type, AtomicOp, BufferDecl, BufferKind, Expr, ForKind, Func, GpuAxis, IterVar,
    MemScope, ScratchDecl, ShuffleKind, Stmt,
};
pub use pipeline::{lower, lower_to_flat, lower_to_stage2, verify_flat, Config, Lowered};
pub use print::print_func;

/// A program that cannot be lowered.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LowerError {
    /// The stage-I program is invalid.
    #[error(transparent)]
    Verify(#[from] lacuna_stage1::VerifyError),
    /// The kernel merges several sparse operands or computes a sparse result's pattern: it
    /// is compiled by [`coiter::CoKernel`], not by this pipeline.
    #[error("kernel `{kernel}` co-iterates sparse operands (or computes the pattern of a sparse result): compile it with co-iteration (`coiter::CoKernel`); sparse-iteration schedules do not apply to it")]
    Coiteration {
        /// The kernel.
        kernel: String,
    },
    /// An axis is iterated without its parent.
    #[error("axis `{axis}` is iterated but its parent `{parent}` is not iterated before it")]
    ParentNotIterated {
        /// The axis.
        axis: String,
        /// Its parent.
        parent: String,
    },
    /// A coordinate names an iterator not in scope.
    #[error("iterator `{var}` is not in scope")]
    UnboundIterator {
        /// The iterator.
        var: String,
    },
    /// An access needs a search on an axis whose coordinates are not sorted.
    #[error("reading `{buffer}` needs a coordinate search on axis `{axis}`, which is declared unsorted; iterate the axis itself or declare it sorted")]
    UnsortedSearch {
        /// The buffer.
        buffer: String,
        /// The axis.
        axis: String,
    },
    /// The init of an iteration has no well-defined space.
    #[error("iteration `{iteration}`: spatial axis `{axis}` depends on reduction axis `{parent}`, so its init block cannot be placed")]
    InitSpace {
        /// The iteration.
        iteration: String,
        /// The spatial axis.
        axis: String,
        /// The reduction parent.
        parent: String,
    },
    /// A flat function still has stage-II constructs.
    #[error("not flat: {what}")]
    NotFlat {
        /// The remaining construct.
        what: String,
    },
    /// An internal inconsistency between passes (a bug).
    #[error("malformed intermediate program: {what}")]
    Malformed {
        /// What is malformed.
        what: String,
    },
}
