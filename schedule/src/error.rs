//! Errors of schedule primitives: which primitive, with which arguments, broke which condition.

use crate::trace::Instruction;

/// A primitive that cannot be applied; the schedule is left unchanged.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{primitive}({args}): {condition}")]
pub struct ScheduleError {
    /// The primitive's name.
    pub primitive: &'static str,
    /// Its arguments, as written in the trace.
    pub args: String,
    /// The violated condition.
    pub condition: Condition,
}

/// The conditions a primitive checks.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Condition {
    /// No loop, iteration or parameter has that name.
    #[error("no {what} named `{name}`")]
    NotFound {
        /// `loop`, `iteration` or `parameter`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// Several loops match a name.
    #[error("{count} loops are named `{name}`; write `BLOCK:{name}` to pick one")]
    Ambiguous {
        /// The name.
        name: String,
        /// How many match.
        count: usize,
    },
    /// The axes of a sparse_reorder are not a permutation of the iteration's.
    #[error("the new order {given:?} is not a permutation of the iteration's axes {expected:?}")]
    NotPermutation {
        /// The iteration's axes.
        expected: Vec<String>,
        /// The given order.
        given: Vec<String>,
    },
    /// An axis would come before its parent.
    #[error("axis `{axis}` would be iterated before its parent `{parent}`")]
    ChildBeforeParent {
        /// The child.
        axis: String,
        /// Its parent.
        parent: String,
    },
    /// A loop's bounds would use a variable of a loop inside it.
    #[error(
        "the bounds of loop `{inner}` depend on loop `{outer}`, which would no longer enclose it"
    )]
    BoundDependence {
        /// The loop whose bounds read the variable.
        inner: String,
        /// The loop defining it.
        outer: String,
    },
    /// Loops are not perfectly nested.
    #[error("loops {loops:?} are not perfectly nested (each must be the only statement of the previous)")]
    NotPerfectlyNested {
        /// The loops.
        loops: Vec<String>,
    },
    /// A loop carries a dependence between iterations.
    #[error("loop `{loop}` carries a dependence through `{buffer}`: it is written at positions that do not vary with the loop (or read at other positions)")]
    CarriedDependence {
        /// The loop.
        r#loop: String,
        /// The buffer.
        buffer: String,
    },
    /// A loop to vectorize contains another loop.
    #[error("loop `{loop}` is not innermost")]
    NotInnermost {
        /// The loop.
        r#loop: String,
    },
    /// An argument is out of range.
    #[error("{what}")]
    BadArgument {
        /// What is wrong.
        what: String,
    },
    /// A stage-I primitive after stage-II ones.
    #[error("stage-I primitives must come before stage-II primitives in a trace")]
    StageOrder,
    /// A moved nest's region is not confined to one slice per iteration of the target loops
    /// (`compute_at`, `reverse_compute_at`, `decompose_reduction`).
    #[error("the region of `{buffer}` does not fit: {what}")]
    Region {
        /// The buffer.
        buffer: String,
        /// Why.
        what: String,
    },
    /// Moving a block would reorder its accesses with conflicting ones.
    #[error("moving `{block}` would reorder its accesses of `{buffer}` with {what}")]
    Conflict {
        /// The moved block.
        block: String,
        /// The buffer.
        buffer: String,
        /// What it would be reordered with.
        what: String,
    },
    /// Preprocessing cannot be extracted.
    #[error(transparent)]
    Preprocess(#[from] lacuna_stage2::passes::extract_preprocess::ExtractError),
    /// The program after the primitive fails to verify or lower.
    #[error("{0}")]
    Invalid(String),
}

impl ScheduleError {
    /// An error of `inst` for `condition`.
    pub fn new(inst: &Instruction, condition: Condition) -> ScheduleError {
        let args = match inst {
            Instruction::SparseReorder { iter, axes } | Instruction::SparseFuse { iter, axes } => {
                format!("{iter:?}, {axes:?}")
            }
            Instruction::Specialize { param, value } => format!("{param:?}, {value}"),
            Instruction::SparseDecomposeInit { iter } => format!("{iter:?}"),
            Instruction::Pos { iter, axis, buffer } => format!("{iter:?}, {axis:?}, {buffer:?}"),
            Instruction::DecomposeFormat { buffer, into } => format!("{buffer:?}, {into:?}"),
            Instruction::IsoValues { buffer } => format!("{buffer:?}"),
            Instruction::Split { r#loop, factors } => format!("{loop:?}, {factors:?}"),
            Instruction::Fuse { outer, inner } => format!("{outer:?}, {inner:?}"),
            Instruction::Divide { r#loop, parts } => format!("{loop:?}, {parts}"),
            Instruction::Bind { r#loop, thread } => format!("{loop:?}, {thread:?}"),
            Instruction::Reorder { loops } => format!("{loops:?}"),
            Instruction::Parallel { r#loop }
            | Instruction::Vectorize { r#loop }
            | Instruction::Unroll { r#loop } => format!("{loop:?}"),
            Instruction::ComputeAt { block, r#loop }
            | Instruction::ReverseComputeAt { block, r#loop }
            | Instruction::DecomposeReduction { block, r#loop } => format!("{block:?}, {loop:?}"),
            Instruction::Blockize { r#loop } | Instruction::LiftLoop { r#loop } => {
                format!("{loop:?}")
            }
            Instruction::Bound { r#loop, extent } => format!("{loop:?}, {extent}"),
            Instruction::HorizontalFuse { loops } => format!("{loops:?}"),
            Instruction::SpecializeBuffer { axis, form } => format!("{axis:?}, {form:?}"),
            Instruction::SparseAnnotate { iter, key, value } => {
                format!("{iter:?}, {key:?}, {value:?}")
            }
            Instruction::SparseUnannotate { iter, key } => format!("{iter:?}, {key:?}"),
            Instruction::Rfactor { r#loop } => format!("{loop:?}"),
            Instruction::Annotate { r#loop, key, value } => format!("{loop:?}, {key:?}, {value}"),
            Instruction::Unannotate { r#loop, key } => format!("{loop:?}, {key:?}"),
            Instruction::CacheRead {
                block,
                buffer,
                scope,
                at,
            }
            | Instruction::CacheWrite {
                block,
                buffer,
                scope,
                at,
            }
            | Instruction::ReverseCacheRead {
                block,
                buffer,
                scope,
                at,
            }
            | Instruction::ReverseCacheWrite {
                block,
                buffer,
                scope,
                at,
            } => match at {
                Some(at) => format!("{block:?}, {buffer:?}, {scope:?}, {at:?}"),
                None => format!("{block:?}, {buffer:?}, {scope:?}"),
            },
            Instruction::SetScope { buffer, scope } => format!("{buffer:?}, {scope:?}"),
            Instruction::ExtractPreprocess => String::new(),
        };
        ScheduleError {
            primitive: inst.name(),
            args,
            condition,
        }
    }
}
