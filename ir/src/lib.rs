//! Shared vocabulary of Lacuna: element types, typed arrays, coordinate tensors and file I/O.
//!
//! Everything above this crate (stage I, stage II, the targets) talks about data through the
//! types defined here: [`DType`] names an element type, [`ArrayData`] owns a typed 1-D array,
//! [`DenseArray`] a row-major n-D array, and [`CooTensor`] a tensor given by its stored entries.
//! Readers and writers for Matrix Market, FROSTT `.tns` and NumPy `.npy` files live in [`io`].
#![warn(missing_docs)]

mod array;
mod dtype;
pub mod encoding;
pub mod io;
pub mod partition;
pub mod storage;

pub use array::{ArrayData, ArrayView, CooTensor, DenseArray};
pub use dtype::{DType, Scalar};
