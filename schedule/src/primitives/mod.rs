//! The schedule primitives, one file per family.

pub mod annotate;
pub mod blockize;
pub mod cache;
pub mod compute_at;
pub mod decompose_format;
pub mod horizontal;
pub mod iso;
pub mod loop_kind;
pub mod loop_transform;
pub mod rfactor;
pub mod sparse;
mod tree;
pub mod value_copy;
