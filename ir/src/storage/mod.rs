//! Storage of sparse tensors in any [`Encoding`](crate::encoding::Encoding), in MLIR's layout.
//!
//! A [`SparseTensor`] holds, per level, a positions array (compressed: `parent + 1` entries;
//! loose_compressed: `(lo, hi)` pairs) and a coordinates array (every format but dense), then the
//! values: MLIR's storage-layout order, so [`SparseTensor::assemble`] and
//! [`SparseTensor::disassemble`] take and give MLIR's buffers, and [`SparseTensor::print`]
//! writes what `sparse_tensor.print` writes. Positions and coordinates are stored at the
//! declared widths ([`IndexArray`]); a value that does not fit is an error, never a wrap.
//!
//! ```
//! use lacuna_ir::encoding::preset;
//! use lacuna_ir::storage::SparseTensor;
//! use lacuna_ir::{ArrayData, CooTensor};
//! let coo = CooTensor {
//!     shape: vec![2, 3],
//!     coords: vec![vec![0, 1, 1], vec![2, 0, 2]],
//!     values: ArrayData::F64(vec![1.0, 2.0, 3.0]),
//! };
//! let csr = SparseTensor::from_coo(&coo, &preset("csr").unwrap()).unwrap();
//! assert!(csr.print().contains("pos[1] : ( 0, 1, 3 )\ncrd[1] : ( 2, 0, 2 )\n"));
//! ```
//!
//! Encodings with symbols cannot be stored ([`StorageError::Symbols`]). A tensor whose encoding
//! has dimension slices is a view of an underlying tensor, as in MLIR: [`SparseTensor::view`]
//! and [`SparseTensor::view_as`] (which binds `?` slice parts) share the viewed tensor's
//! buffers without copying; [`SparseTensor::from_coo`] stores static slices over the smallest
//! underlying tensor and rejects dynamic ones ([`StorageError::Slices`]). The operations of MLIR's
//! `sparse_tensor` dialect on stored tensors (`concatenate`, `sort`, `reorder_coo`,
//! `crd_translate`, `reinterpret_map`, `extract_slice`) are methods of [`SparseTensor`].

mod assemble;
mod build;
mod convert;
mod error;
mod fill;
mod index_array;
mod layout;
mod ops;
mod print;
mod tensor;

pub use assemble::Validation;
pub use error::StorageError;
pub use index_array::{DoesNotFit, IndexArray};
pub use layout::{storage_fields, Field};
pub use ops::CrdTransDirection;
pub use print::format_g;
pub use tensor::{lvl_shape, LevelStorage, SparseTensor, TensorParts, ViewParts};
