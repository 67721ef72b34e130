//! Sparse tensor encodings: MLIR's `#sparse_tensor.encoding<{ ... }>` language.
//!
//! An [`Encoding`] maps the `dim_rank` dimensions of a tensor to `lvl_rank` storage levels. Each
//! level is an affine expression over dimensions (and symbols) plus a [`LevelType`]: a
//! [`LevelFormat`] with properties read through predicates (`has_positions()`, `is_unique()`,
//! ...). Dimensions ([`Dim`]) and levels ([`Lvl`]) are distinct types; `dim_to_lvl` maps one
//! way, `lvl_to_dim` (inferred, or written explicitly) the other.
//!
//! ```
//! use lacuna_ir::encoding::{parse_encoding, preset};
//! let bsr = parse_encoding(
//!     "map = (i, j) -> (i floordiv 2 : dense, j floordiv 3 : compressed, i mod 2 : dense, j mod 3 : dense)",
//! ).unwrap();
//! assert_eq!(bsr, preset("BSR(2, 3)").unwrap());
//! assert_eq!(
//!     bsr.to_string(),
//!     "map = (d0, d1) -> (d0 floordiv 2 : dense, d1 floordiv 3 : compressed, d0 mod 2 : dense, d1 mod 3 : dense)"
//! );
//! assert_eq!(bsr.to_string().parse(), Ok(bsr));
//! ```
//!
//! What is supported beyond syntax:
//! - Symbols (`[s0](d0, d1) -> (d0 * (s0 * 4) : dense, ...)`, MLIR's ELL sketch) are parsed,
//!   verified and printed; storage ([`crate::storage`]) rejects encodings with symbols, since
//!   their values are unknown.
//! - Dimension slices are parsed, verified (offset >= 0, size and stride > 0) and printed;
//!   a stored tensor with slices is a zero-copy view of an underlying tensor, as in MLIR
//!   (`?` parts bound when the view is made, see [`crate::storage::SparseTensor::view_as`]).
//! - `floordiv` and `mod` take positive integer constants only; `ceildiv` is rejected.
//! - Widths other than 0, 8, 16, 32, 64 are errors (MLIR rejects 2-bit coordinates, too).

mod affine;
mod error;
mod ids;
mod ir;
mod level;
mod lexer;
mod parse;
mod parse_expr;
mod parse_level;
mod parser;
mod presets;
mod print;
mod verify;

pub use affine::{AffineExpr, AffineNode, Bounds};
pub use error::{EncodingError, EncodingErrorKind, Span, WidthKey};
pub use ids::{Dim, Lvl, Sym, Var};
pub use ir::{DimSlice, Encoding, EncodingParts, LevelSpec, SliceBound};
pub use level::{IndexWidth, LevelFormat, LevelProps, LevelType, LevelTypeError};
pub use parse::parse_encoding;
pub use presets::{parse_format, preset, PRESET_EXAMPLES};
