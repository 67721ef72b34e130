//! Lacuna: a compiler for sparse tensor algebra.
//!
//! A kernel is written once as a stage-I program (sparse axes, sparse buffers, sparse
//! iterations), lowered through stage II (loops in position space) to flat loops, and compiled
//! by LLVM for the host CPU. This crate is the facade: it re-exports the public API of the
//! workspace crates and provides the [`driver`] used by the `lacuna` command line.
#![warn(missing_docs)]

pub mod alloc;
pub mod bench;
pub mod driver;
pub mod tune;

pub use lacuna_ir as ir;
pub use lacuna_schedule as schedule;
pub use lacuna_stage1 as stage1;
pub use lacuna_stage2 as stage2;
pub use lacuna_target as target;
pub use lacuna_tuning as tuning;
