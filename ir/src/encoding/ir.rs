//! The encoding itself: levels with their dim->lvl expressions, the lvl->dim inverse, slices and
//! overhead widths.

use super::affine::AffineExpr;
use super::error::EncodingError;
use super::ids::{Dim, Lvl, Var};
use super::level::{IndexWidth, LevelType};
use super::verify::{build, Spans};
use serde::{Deserialize, Serialize};

/// One level of a map: the level coordinate as an expression over dimensions, and its type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LevelSpec {
    /// The level coordinate, e.g. `d0 floordiv 2`.
    pub expr: AffineExpr<Dim>,
    /// How the level is stored.
    pub lvl_type: LevelType,
}

impl LevelSpec {
    /// The level `expr : lvl_type`.
    pub fn new(expr: AffineExpr<Dim>, lvl_type: LevelType) -> LevelSpec {
        LevelSpec { expr, lvl_type }
    }
    /// The level `d : lvl_type` for dimension `d`.
    pub fn of_dim(d: usize, lvl_type: LevelType) -> LevelSpec {
        LevelSpec::new(AffineExpr::var(Dim::from_index(d)), lvl_type)
    }
}

/// One of offset, size, stride of a dimension slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SliceBound {
    /// A value known in the encoding.
    Static(u64),
    /// `?`: known only at run time.
    Dynamic,
}

/// A dimension slice `#sparse_tensor<slice(offset, size, stride)>`: the dimension views
/// coordinates `offset + i * stride`, `0 <= i < size`, of an underlying tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DimSlice {
    /// First coordinate viewed (non-negative).
    pub offset: SliceBound,
    /// Number of coordinates viewed (positive).
    pub size: SliceBound,
    /// Distance between viewed coordinates (positive).
    pub stride: SliceBound,
}

/// Everything that defines an encoding, before verification (see [`Encoding::from_parts`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EncodingParts {
    /// Number of symbols (`[s0, ...]`).
    pub n_symbols: usize,
    /// Number of dimensions.
    pub dim_rank: usize,
    /// The levels, outermost first.
    pub levels: Vec<LevelSpec>,
    /// Per dimension, an explicit expression over levels, or `None` to infer it. Empty: infer all.
    pub lvl_to_dim: Vec<Option<AffineExpr<Lvl>>>,
    /// Per dimension, an optional slice. Empty: no slices.
    pub dim_slices: Vec<Option<DimSlice>>,
    /// `posWidth`.
    pub pos_width: IndexWidth,
    /// `crdWidth`.
    pub crd_width: IndexWidth,
}

/// A verified sparse tensor encoding, MLIR's `#sparse_tensor.encoding<{...}>`.
///
/// Invariants (checked by [`Encoding::from_parts`] and the parser): one to 64 dimensions and
/// levels, at most 64 symbols, at most 1024 nodes per expression; every expression is affine
/// and in range; level types are placed as MLIR requires (singletons after compressed levels and
/// only singletons after them, n:m last after dense levels); `lvl_to_dim` has one expression per
/// dimension that inverts the map.
///
/// It serializes as its canonical MLIR text and deserializes by parsing (so verified).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Encoding {
    pub(crate) n_symbols: u32,
    pub(crate) dim_rank: u32,
    pub(crate) levels: Vec<LevelSpec>,
    pub(crate) lvl_to_dim: Vec<AffineExpr<Lvl>>,
    pub(crate) dim_slices: Vec<Option<DimSlice>>,
    pub(crate) pos_width: IndexWidth,
    pub(crate) crd_width: IndexWidth,
}

impl Encoding {
    /// An encoding of `dim_rank` dimensions with these levels, the inverse inferred, no symbols
    /// or slices, native widths.
    pub fn new(dim_rank: usize, levels: Vec<LevelSpec>) -> Result<Encoding, EncodingError> {
        Encoding::from_parts(EncodingParts {
            dim_rank,
            levels,
            ..EncodingParts::default()
        })
    }
    /// Verifies `parts` and infers the missing inverse expressions. Errors carry empty spans.
    pub fn from_parts(parts: EncodingParts) -> Result<Encoding, EncodingError> {
        build(parts, &Spans::default())
    }
    /// The same encoding with other overhead widths.
    pub fn with_widths(&self, pos_width: IndexWidth, crd_width: IndexWidth) -> Encoding {
        Encoding {
            pos_width,
            crd_width,
            ..self.clone()
        }
    }
    /// Number of dimensions.
    pub fn dim_rank(&self) -> usize {
        self.dim_rank as usize
    }
    /// Number of levels.
    pub fn lvl_rank(&self) -> usize {
        self.levels.len()
    }
    /// Number of symbols.
    pub fn n_symbols(&self) -> usize {
        self.n_symbols as usize
    }
    /// The levels, outermost first.
    pub fn levels(&self) -> &[LevelSpec] {
        &self.levels
    }
    /// The type of level `l`. Panics when `l` is out of range.
    pub fn lvl_type(&self, l: Lvl) -> LevelType {
        self.levels[l.index()].lvl_type
    }
    /// The level types, outermost first.
    pub fn lvl_types(&self) -> Vec<LevelType> {
        self.levels.iter().map(|s| s.lvl_type).collect()
    }
    /// The expression computing level `l` from dimensions. Panics when `l` is out of range.
    pub fn dim_to_lvl(&self, l: Lvl) -> &AffineExpr<Dim> {
        &self.levels[l.index()].expr
    }
    /// The expression computing dimension `d` from levels. Panics when `d` is out of range.
    pub fn lvl_to_dim(&self, d: Dim) -> &AffineExpr<Lvl> {
        &self.lvl_to_dim[d.index()]
    }
    /// The slice of dimension `d`, if any.
    pub fn dim_slice(&self, d: Dim) -> Option<&DimSlice> {
        self.dim_slices.get(d.index()).and_then(|s| s.as_ref())
    }
    /// The same encoding without dimension slices: that of the tensor a view views.
    pub fn without_slices(&self) -> Encoding {
        Encoding {
            dim_slices: Vec::new(),
            ..self.clone()
        }
    }
    /// True when some dimension is sliced.
    pub fn has_slices(&self) -> bool {
        self.dim_slices.iter().any(Option::is_some)
    }
    /// `posWidth`.
    pub fn pos_width(&self) -> IndexWidth {
        self.pos_width
    }
    /// `crdWidth`.
    pub fn crd_width(&self) -> IndexWidth {
        self.crd_width
    }
    /// True when level `i` is exactly dimension `i` for all `i`.
    pub fn is_identity(&self) -> bool {
        self.lvl_rank() == self.dim_rank()
            && (self.levels.iter().enumerate())
                .all(|(i, s)| s.expr.as_var() == Some(Dim::from_index(i)))
    }
    /// True for CSR storage, at any widths: two dimensions in order, a dense level then a
    /// unique, ordered compressed one, no slices.
    pub fn is_csr(&self) -> bool {
        let types = self.lvl_types();
        self.dim_rank() == 2
            && self.is_identity()
            && !self.has_slices()
            && types[0].is_dense()
            && types[1].is_compressed()
            && types[1].is_unique()
            && types[1].is_ordered()
    }
    /// True when every level is a distinct dimension (no blocks, no symbols).
    pub fn is_permutation(&self) -> bool {
        let mut seen = vec![false; self.dim_rank()];
        self.lvl_rank() == self.dim_rank()
            && self.levels.iter().all(|s| match s.expr.as_var() {
                Some(d) => !std::mem::replace(&mut seen[d.index()], true),
                None => false,
            })
    }
    /// The trailing COO region `[start, lvl_rank)`: a compressed or loose_compressed level
    /// followed by singleton levels only, as MLIR's `getCOOSegments`. `None` without one.
    pub fn coo_start(&self) -> Option<Lvl> {
        let first_singleton = self.levels.iter().position(|s| s.lvl_type.is_singleton())?;
        let start = first_singleton.checked_sub(1)?;
        Some(Lvl::from_index(start))
    }
    /// Like [`Self::coo_start`], but only when the COO coordinates are stored array-of-structs
    /// (one interleaved coordinate buffer), not `soa`.
    pub fn aos_coo_start(&self) -> Option<Lvl> {
        let start = self.coo_start()?;
        let soa = self.levels[start.index() + 1].lvl_type.is_soa();
        (!soa).then_some(start)
    }
}
