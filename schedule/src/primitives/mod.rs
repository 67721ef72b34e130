//! The schedule primitives, one file per family.

pub mod blockize;
pub mod compute_at;
pub mod decompose_format;
pub mod horizontal;
pub mod loop_kind;
pub mod loop_transform;
pub mod sparse;
mod tree;
