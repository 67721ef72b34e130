//! Schedules of Lacuna: primitives that transform a kernel without changing what it computes,
//! recorded in a replayable trace, and format decomposition driven by equality saturation.
//!
//! A [`Schedule`] wraps a stage-I program. Stage-I primitives (`sparse_reorder`, `sparse_fuse`,
//! `pos`, `decompose_format`, `specialize`) rewrite the program; stage-II primitives (`split`, `fuse`, `reorder`, `parallel`,
//! `vectorize`, `unroll`) rewrite the loops lowering produced. Every applied primitive is
//! appended to the trace, which serializes to RON ([`ScheduleFile`]) and replays on the same
//! kernel. A primitive that does not apply returns a [`ScheduleError`] naming the primitive,
//! its arguments and the violated condition, and leaves the schedule unchanged.
#![warn(missing_docs)]

pub mod decompose;
mod error;
pub mod lanes;
mod loops;
mod primitives;
mod schedule;
pub mod stream;
mod trace;

pub use error::{Condition, ScheduleError};
pub use primitives::decompose_format::{
    convert, convert_relations, convert_structure, source_len_param, source_name, Conversion,
    PartKind,
};
pub use primitives::iso::{iso_name, iso_value, lane_len_name};
pub use primitives::value_copy::{value_copy_extents, value_copy_func, CopyExtent};
pub use schedule::Schedule;
pub use trace::{Instruction, ScheduleFile, SCHEDULE_FORMAT_VERSION};
