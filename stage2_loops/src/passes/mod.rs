//! The lowering passes, one per file; `crate::pipeline` runs them in order.

pub mod build_loop_nests;
pub mod extract_preprocess;
pub mod hoist_invariant_lets;
pub mod lower_sparse_buffer;
pub mod materialize_index_buffers;
pub mod partition_loops;
pub mod place_init_blocks;
pub mod simplify;
pub mod specialize_index_buffers;
pub mod translate_coordinates;
pub mod version_ranges;
