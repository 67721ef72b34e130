//! The schedule primitives, one file per family.

pub mod annotate;
pub mod decompose_format;
pub mod loop_kind;
pub mod loop_transform;
pub mod rfactor;
pub mod sparse;
