//! The error type of building, assembling and converting sparse tensors.

use super::layout::Field;
use super::ops::CrdTransDirection;
use crate::encoding::{Dim, IndexWidth, LevelType, Lvl};
use crate::DType;

/// Why a sparse tensor could not be built, assembled or converted. Levels and positions are
/// 0-based; a position is an index into the level's coordinates (or positions) array.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The encoding has symbols, whose values storage does not know.
    #[error("cannot store an encoding with symbols (their values are unknown)")]
    Symbols,
    /// The encoding has a dynamic (`?`) dimension slice, whose offset, size or stride storage
    /// does not know. Static slices are stored (see [`super::SparseTensor::from_coo`]).
    #[error("the encoding's dynamic (`?`) dimension slices have no values here; a view binds them (SparseTensor::view_as)")]
    Slices,
    /// The size of a statically sliced dimension differs from the slice's size.
    #[error("dimension {} is sliced to size {expected}, the tensor has size {found}", .dim.0)]
    SliceSize {
        /// The dimension.
        dim: Dim,
        /// The slice's size.
        expected: usize,
        /// The tensor's size.
        found: usize,
    },
    /// The shape has the wrong number of dimensions.
    #[error("the encoding has {expected} dimensions, the tensor {found}")]
    DimRank {
        /// The encoding's dimension rank.
        expected: usize,
        /// The rank given.
        found: usize,
    },
    /// A size computation overflowed or exceeds what can be stored.
    #[error("too large: {0}")]
    TooLarge(&'static str),
    /// A level expression takes negative values over the shape.
    #[error("level {} can be negative over this shape", .0 .0)]
    NegativeLevel(Lvl),
    /// A coordinate array of the COO input has the wrong length.
    #[error("coordinates of dimension {} have {found} entries, the values {expected}", .dim.0)]
    CooLength {
        /// The dimension.
        dim: Dim,
        /// Number of values.
        expected: usize,
        /// Number of coordinates.
        found: usize,
    },
    /// An input coordinate lies outside the shape.
    #[error("entry {entry}: coordinate {coord} out of range for dimension {} (extent {extent})", .dim.0)]
    DimCoordOutOfRange {
        /// The entry of the input.
        entry: usize,
        /// The dimension.
        dim: Dim,
        /// The coordinate.
        coord: usize,
        /// The dimension's extent.
        extent: usize,
    },
    /// The encoding's lvl->dim map does not give back the coordinates of an entry.
    #[error("entry {entry}: the encoding's inverse map does not recover its coordinates")]
    InverseMismatch {
        /// The entry of the input.
        entry: usize,
    },
    /// A position or coordinate does not fit the declared width.
    #[error("{field}[{index}] = {value} does not fit in {width} bits")]
    WidthOverflow {
        /// The buffer.
        field: Field,
        /// Index in the buffer.
        index: usize,
        /// The value.
        value: u64,
        /// The declared width in bits.
        width: u32,
    },
    /// A singleton level would need more than one coordinate for one parent position.
    #[error("singleton level {}: parent position {parent} holds {count} entries (a unique parent level cannot hold them)", .lvl.0)]
    SingletonOverflow {
        /// The level.
        lvl: Lvl,
        /// The parent position.
        parent: usize,
        /// Entries under it.
        count: usize,
    },
    /// An n:m level group with more than n entries.
    #[error("structured level {}: parent position {parent} holds {count} entries, more than n = {n}", .lvl.0)]
    TooManyInGroup {
        /// The level.
        lvl: Lvl,
        /// The parent position.
        parent: usize,
        /// Entries in the group.
        count: usize,
        /// Slots per group.
        n: u32,
    },
    /// An n:m level too small to pad a group to n distinct coordinates.
    #[error("structured level {}: size {size} is smaller than n = {n}", .lvl.0)]
    GroupTooSmall {
        /// The level.
        lvl: Lvl,
        /// Slots per group.
        n: u32,
        /// The level size.
        size: usize,
    },
    /// `assemble` got the wrong number of index buffers.
    #[error("expected {expected} index buffers (see storage_fields), got {found}")]
    BufferCount {
        /// Buffers the encoding stores.
        expected: usize,
        /// Buffers given.
        found: usize,
    },
    /// A buffer has the wrong length.
    #[error("{field} has {found} entries, expected {expected}")]
    WrongLength {
        /// The buffer.
        field: Field,
        /// Required length.
        expected: usize,
        /// Actual length.
        found: usize,
    },
    /// The first position of a compressed level is not 0.
    #[error("pos[{}][0] = {value}, expected 0", .lvl.0)]
    PositionsStart {
        /// The level.
        lvl: Lvl,
        /// The first position.
        value: u64,
    },
    /// Positions decrease: `pos[position] > pos[position + 1]` (for loose_compressed, `lo > hi`).
    #[error("pos[{}] decreases at index {position}", .lvl.0)]
    PositionsNotMonotone {
        /// The level.
        lvl: Lvl,
        /// Index in the positions array.
        position: usize,
    },
    /// A position points past the end of the level's coordinates.
    #[error("pos[{}][{position}] = {value} exceeds the {len} coordinates", .lvl.0)]
    PositionOutOfRange {
        /// The level.
        lvl: Lvl,
        /// Index in the positions array.
        position: usize,
        /// The position.
        value: u64,
        /// Number of coordinates.
        len: usize,
    },
    /// A coordinate is not below the level size.
    #[error("crd[{}][{position}] = {coordinate} is not below the level size {size}", .lvl.0)]
    CoordinateOutOfBounds {
        /// The level.
        lvl: Lvl,
        /// The position.
        position: usize,
        /// The coordinate.
        coordinate: u64,
        /// The level size.
        size: usize,
    },
    /// Coordinates decrease within a segment of an ordered level.
    #[error("crd[{}][{position}] is smaller than the previous coordinate of its segment in ordered level {}", .lvl.0, .lvl.0)]
    Unsorted {
        /// The level.
        lvl: Lvl,
        /// The position.
        position: usize,
    },
    /// A coordinate repeats within a segment of a unique level.
    #[error("crd[{}][{position}] repeats the previous coordinate of its segment in unique level {}", .lvl.0, .lvl.0)]
    Duplicate {
        /// The level.
        lvl: Lvl,
        /// The position.
        position: usize,
    },
    /// A dense array's data length differs from the product of its shape.
    #[error("dense array of shape {shape:?} has {found} elements")]
    DenseLength {
        /// The shape.
        shape: Vec<usize>,
        /// Number of elements.
        found: usize,
    },
    /// `concatenate` got no parts.
    #[error("concatenate needs at least one part")]
    NoParts,
    /// The concatenation dimension is not a dimension of the parts.
    #[error("cannot concatenate along dimension {} of a {rank}-dimensional tensor", .dim.0)]
    ConcatDim {
        /// The dimension asked for.
        dim: Dim,
        /// The rank of the parts.
        rank: usize,
    },
    /// A part of a concatenation has another rank than part 0.
    #[error("part {part} has {found} dimensions, part 0 has {expected}")]
    ConcatRank {
        /// The part (0-based).
        part: usize,
        /// The rank of part 0.
        expected: usize,
        /// The rank of this part.
        found: usize,
    },
    /// A part of a concatenation differs from part 0 in a dimension other than the
    /// concatenation dimension.
    #[error("part {part}: dimension {} has size {found}, part 0 has size {expected}", .dim.0)]
    ConcatShape {
        /// The part (0-based).
        part: usize,
        /// The dimension.
        dim: Dim,
        /// The size in part 0.
        expected: usize,
        /// The size in this part.
        found: usize,
    },
    /// A part of a concatenation has another element type than part 0.
    #[error("part {part} holds {found} values, part 0 holds {expected}")]
    ConcatDType {
        /// The part (0-based).
        part: usize,
        /// The element type of part 0.
        expected: DType,
        /// The element type of this part.
        found: DType,
    },
    /// `crd_translate` got the wrong number of coordinates.
    #[error("crd_translate {direction}: expected {expected} coordinates, got {found}")]
    CrdArity {
        /// The direction.
        direction: CrdTransDirection,
        /// The rank of the source side (dimensions for `dim_to_lvl`, levels for `lvl_to_dim`).
        expected: usize,
        /// Coordinates given.
        found: usize,
    },
    /// `crd_translate` computed a negative or overflowing coordinate.
    #[error("crd_translate {direction}: result coordinate {index} is negative or overflows")]
    CrdOutOfRange {
        /// The direction.
        direction: CrdTransDirection,
        /// The index of the result coordinate.
        index: usize,
    },
    /// The target encoding of `reinterpret_map` or `reorder_coo` has another number of levels.
    #[error("the target encoding has {found} levels, the tensor {expected}")]
    LevelRank {
        /// The tensor's number of levels.
        expected: usize,
        /// The target's number of levels.
        found: usize,
    },
    /// `reinterpret_map`: a level of the target has another level type.
    #[error("reinterpret_map: level {} is `{found}` in the target, `{expected}` in the tensor", .lvl.0)]
    ReinterpretLevelType {
        /// The level.
        lvl: Lvl,
        /// The tensor's level type.
        expected: LevelType,
        /// The target's level type.
        found: LevelType,
    },
    /// `reinterpret_map`: a level of the target has another size.
    #[error("reinterpret_map: level {} has size {found} in the target, {expected} in the tensor", .lvl.0)]
    ReinterpretLevelSize {
        /// The level.
        lvl: Lvl,
        /// The tensor's level size.
        expected: usize,
        /// The target's level size.
        found: usize,
    },
    /// `reinterpret_map`: the target stores positions or coordinates at other widths.
    #[error(
        "reinterpret_map: the target has posWidth {} and crdWidth {}, the tensor {} and {}",
        .found.0.bits(), .found.1.bits(), .expected.0.bits(), .expected.1.bits()
    )]
    ReinterpretWidths {
        /// The tensor's `(posWidth, crdWidth)`.
        expected: (IndexWidth, IndexWidth),
        /// The target's `(posWidth, crdWidth)`.
        found: (IndexWidth, IndexWidth),
    },
    /// `reorder_coo`: a level of the target differs from the tensor's in more than ordering
    /// (its expression, format, uniqueness).
    #[error("reorder_coo: level {} of the target differs from the tensor's in more than ordering", .lvl.0)]
    ReorderLevel {
        /// The level.
        lvl: Lvl,
    },
    /// `reorder_coo`: the target has other dimensions (rank, lvl->dim map or slices).
    #[error("reorder_coo: the target's dimensions differ from the tensor's")]
    ReorderDims,
    /// `extract_slice` or a view got offsets, sizes or strides of the wrong length.
    #[error("slice: the tensor has {expected} dimensions, got {found} {what}")]
    SliceArity {
        /// `"offsets"`, `"sizes"` or `"strides"`.
        what: &'static str,
        /// The tensor's rank.
        expected: usize,
        /// Entries given.
        found: usize,
    },
    /// `extract_slice`: a slice reaches outside its dimension or has stride 0.
    #[error(
        "slice (offset {offset}, size {size}, stride {stride}) does not fit dimension {} of size {extent}",
        .dim.0
    )]
    SliceOutOfBounds {
        /// The dimension.
        dim: Dim,
        /// The offset.
        offset: usize,
        /// The size.
        size: usize,
        /// The stride.
        stride: usize,
        /// The dimension's size.
        extent: usize,
    },
    /// A view's encoding stores other levels or widths than the tensor it views.
    #[error("view: the encoding `{found}` does not store the levels of the viewed tensor's `{expected}`")]
    ViewEncoding {
        /// The viewed tensor's encoding, without slices.
        expected: String,
        /// The view's encoding, without slices.
        found: String,
    },
    /// A view's encoding fixes a slice part to another value than the one asked for.
    #[error("view: dimension {} has slice {what} {expected} in the encoding, got {found}", .dim.0)]
    SliceMismatch {
        /// The dimension.
        dim: Dim,
        /// `"offset"`, `"size"` or `"stride"`.
        what: &'static str,
        /// The encoding's value (for a dimension without slice: 0, its size, 1).
        expected: usize,
        /// The value asked for.
        found: usize,
    },
    /// Serialized view parts whose slice sizes are not the dimension sizes.
    #[error("view: the slice sizes {expected:?} are not the dimension sizes {found:?}")]
    ViewShape {
        /// The slice sizes.
        expected: Vec<usize>,
        /// The dimension sizes.
        found: Vec<usize>,
    },
    /// `crd_translate`: a dimension coordinate outside its dimension's slice (`dim_to_lvl`:
    /// not below the slice size; `lvl_to_dim`: an underlying coordinate the slice does not see).
    #[error("crd_translate {direction}: coordinate {coord} of dimension {} is outside its slice", .dim.0)]
    CrdOffSlice {
        /// The direction.
        direction: CrdTransDirection,
        /// The dimension.
        dim: Dim,
        /// The coordinate (of the slice for `dim_to_lvl`, underlying for `lvl_to_dim`).
        coord: u64,
    },
}
