//! The sparse tensor: per-level positions and coordinates, then values, and their traversal.

use super::error::StorageError;
use super::index_array::IndexArray;
use super::layout::Field;
use super::ops::slice::StaticSlice;
use crate::encoding::{Dim, Encoding, LevelFormat, Lvl, Var};
use crate::{ArrayData, Scalar};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The overhead arrays of one level. In an array-of-structs COO region the first level holds
/// the interleaved coordinates of all its levels and the later levels hold none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LevelStorage {
    pub(crate) positions: Option<IndexArray>,
    pub(crate) coordinates: Option<IndexArray>,
}

impl LevelStorage {
    /// The positions (compressed: `parent + 1`; loose_compressed: `(lo, hi)` pairs).
    pub fn positions(&self) -> Option<&IndexArray> {
        self.positions.as_ref()
    }
    /// The coordinates (see the type's note on COO).
    pub fn coordinates(&self) -> Option<&IndexArray> {
        self.coordinates.as_ref()
    }
}

/// A tensor stored in the layout its [`Encoding`] prescribes (MLIR's storage layout).
///
/// Invariants (checked by every constructor): the encoding has no symbols; `lvl_shape` is the
/// encoding's level shape of `base_shape`, the dimension sizes of the stored tensor; buffers
/// have the lengths the level formats require and the declared widths; `values` has one value
/// per position of the last level.
///
/// A tensor whose encoding slices dimensions is a *view* (MLIR's `tensor.extract_slice` of a
/// sparse tensor): its levels, shared with the tensor it views (no copy, see
/// [`SparseTensor::view`]), store the underlying tensor of `base_shape`, and its dimension
/// `d` of size `dim_shape[d]` sees the underlying coordinates `offset + i * stride`. The
/// slices' values, `?` ones included, are bound in the tensor.
/// A tensor assembled without validation may break ordering, uniqueness and bounds of its
/// coordinates; traversals then give unspecified entries but never panic.
///
/// It serializes as [`TensorParts`] and deserializes through checked assembly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "TensorParts", try_from = "TensorParts")]
pub struct SparseTensor {
    pub(crate) encoding: Encoding,
    pub(crate) dim_shape: Vec<usize>,
    /// The dimension sizes of the stored (underlying) tensor: `dim_shape` without slices.
    pub(crate) base_shape: Vec<usize>,
    /// Per dimension, the bound slice (all `None`, or empty, without slices).
    pub(crate) slices: Vec<Option<StaticSlice>>,
    pub(crate) lvl_shape: Vec<usize>,
    pub(crate) levels: Arc<Vec<LevelStorage>>,
    pub(crate) values: Arc<ArrayData>,
}

/// What [`SparseTensor::assemble`] takes and [`SparseTensor::disassemble`] gives, with the
/// encoding and shape: the serialized form of a tensor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorParts {
    /// The encoding.
    pub encoding: Encoding,
    /// The dimension sizes.
    pub dim_shape: Vec<usize>,
    /// The index buffers in storage-layout order.
    pub buffers: Vec<IndexArray>,
    /// The values.
    pub values: ArrayData,
    /// For a view (an encoding with dimension slices), the dimension sizes of the underlying
    /// tensor, and the offset, size and stride of every dimension (`?` bound); `None` stores
    /// the smallest underlying tensor holding the static slices ([`SparseTensor::assemble`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<ViewParts>,
}

/// The bound slices of a view: what [`TensorParts::view`] holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewParts {
    /// The dimension sizes of the underlying tensor.
    pub base_shape: Vec<usize>,
    /// Per dimension, `(offset, size, stride)` in the underlying tensor.
    pub slices: Vec<(usize, usize, usize)>,
}

impl From<SparseTensor> for TensorParts {
    fn from(t: SparseTensor) -> TensorParts {
        let (buffers, values) = t.disassemble();
        let view = t.encoding.has_slices().then(|| ViewParts {
            base_shape: t.base_shape.clone(),
            slices: t.bound_slices(),
        });
        TensorParts {
            encoding: t.encoding,
            dim_shape: t.dim_shape,
            buffers,
            values,
            view,
        }
    }
}

impl TryFrom<TensorParts> for SparseTensor {
    type Error = StorageError;
    fn try_from(p: TensorParts) -> Result<SparseTensor, StorageError> {
        let validation = super::Validation::Checked;
        match p.view {
            None => {
                SparseTensor::assemble(&p.encoding, &p.dim_shape, p.buffers, p.values, validation)
            }
            Some(v) => {
                let base = p.encoding.without_slices();
                let t =
                    SparseTensor::assemble(&base, &v.base_shape, p.buffers, p.values, validation)?;
                let (offsets, sizes, strides) = unzip3(&v.slices);
                if sizes != p.dim_shape {
                    return Err(StorageError::ViewShape {
                        expected: sizes,
                        found: p.dim_shape,
                    });
                }
                t.view_as(&p.encoding, &offsets, &sizes, &strides)
            }
        }
    }
}

fn unzip3(v: &[(usize, usize, usize)]) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let mut out = (Vec::new(), Vec::new(), Vec::new());
    for &(a, b, c) in v {
        out.0.push(a);
        out.1.push(b);
        out.2.push(c);
    }
    out
}

/// Rejects encodings storage cannot handle (symbols, dynamic slices).
pub(crate) fn check_storable(enc: &Encoding) -> Result<(), StorageError> {
    if enc.n_symbols() > 0 {
        return Err(StorageError::Symbols);
    }
    super::ops::slice::static_slices(enc).map(|_| ())
}

/// The level shape of `enc`'s levels over dimension sizes `shape` (slices not applied).
pub(crate) fn levels_over(enc: &Encoding, shape: &[usize]) -> Result<Vec<usize>, StorageError> {
    let extents: Vec<u64> = shape.iter().map(|&n| n as u64).collect();
    (enc.levels().iter().enumerate())
        .map(|(l, spec)| match spec.expr.bounds(&extents) {
            Ok(None) => Ok(0),
            Ok(Some(b)) if b.lo < 0 => Err(StorageError::NegativeLevel(Lvl::from_index(l))),
            Ok(Some(b)) => (b.hi.checked_add(1).and_then(|s| usize::try_from(s).ok()))
                .ok_or(StorageError::TooLarge("level size")),
            Err(()) => Err(StorageError::TooLarge("level size")),
        })
        .collect()
}

/// The level shape of a tensor of `dim_shape` under `enc`: each level's largest value plus one
/// over the shape; `d floordiv c` gives `ceil(n / c)` and `d mod c` gives `c` (as in MLIR, so
/// blocks pad the shape). A sliced dimension must have the slice's size, and the levels range
/// over the underlying tensor the slice views (see [`SparseTensor::from_coo`]).
pub fn lvl_shape(enc: &Encoding, dim_shape: &[usize]) -> Result<Vec<usize>, StorageError> {
    check_storable(enc)?;
    if dim_shape.len() != enc.dim_rank() {
        return Err(StorageError::DimRank {
            expected: enc.dim_rank(),
            found: dim_shape.len(),
        });
    }
    let underlying = super::ops::slice::underlying_shape(enc, dim_shape)?;
    levels_over(enc, &underlying)
}

impl SparseTensor {
    /// A tensor of `dim_shape` in `enc` over built buffers: for static slices, the smallest
    /// underlying tensor holding them (see [`SparseTensor::from_coo`]).
    pub(crate) fn from_levels(
        enc: &Encoding,
        dim_shape: Vec<usize>,
        lvl_shape: Vec<usize>,
        levels: Vec<LevelStorage>,
        values: ArrayData,
    ) -> Result<SparseTensor, StorageError> {
        let base_shape = super::ops::slice::underlying_shape(enc, &dim_shape)?;
        let slices = match enc.has_slices() {
            true => super::ops::slice::static_slices(enc)?,
            false => Vec::new(),
        };
        Ok(SparseTensor {
            encoding: enc.clone(),
            dim_shape,
            base_shape,
            slices,
            lvl_shape,
            levels: Arc::new(levels),
            values: Arc::new(values),
        })
    }
    /// The encoding.
    pub fn encoding(&self) -> &Encoding {
        &self.encoding
    }
    /// The dimension sizes.
    pub fn dim_shape(&self) -> &[usize] {
        &self.dim_shape
    }
    /// The level sizes of the storage (of the underlying tensor for a view).
    pub fn lvl_shape(&self) -> &[usize] {
        &self.lvl_shape
    }
    /// The dimension sizes of the stored tensor: [`Self::dim_shape`] without slices, the shape
    /// of the underlying tensor for a view.
    pub fn base_shape(&self) -> &[usize] {
        &self.base_shape
    }
    /// True when this tensor's encoding has dimension slices: it views an underlying tensor.
    pub fn is_view(&self) -> bool {
        self.slices.iter().any(Option::is_some)
    }
    /// Per dimension, `(offset, size, stride)` into the underlying tensor (`(0, n, 1)` for a
    /// dimension that is not sliced), `?` parts bound.
    pub fn bound_slices(&self) -> Vec<(usize, usize, usize)> {
        (0..self.dim_shape.len())
            .map(|d| match self.slices.get(d).copied().flatten() {
                Some(s) => (s.offset, s.size, s.stride),
                None => (0, self.dim_shape[d], 1),
            })
            .collect()
    }
    /// True when `self` and `other` hold the very same position, coordinate and value arrays
    /// (a view and the tensor it views, or a `reinterpret_map`): shared, not equal copies.
    pub fn shares_storage_with(&self, other: &SparseTensor) -> bool {
        Arc::ptr_eq(&self.levels, &other.levels) && Arc::ptr_eq(&self.values, &other.values)
    }
    /// The per-level buffers.
    pub fn levels(&self) -> &[LevelStorage] {
        &self.levels
    }
    /// The values, one per stored entry, in storage order.
    pub fn values(&self) -> &ArrayData {
        &self.values
    }
    /// The number of stored values including explicit zeros: MLIR's
    /// `sparse_tensor.number_of_entries` and the `nse` of its print. For a view, this counts
    /// the underlying tensor's stored values, as MLIR 19 does; see
    /// [`Self::number_of_visible_entries`] for those inside the slice.
    pub fn number_of_entries(&self) -> usize {
        self.values.len()
    }
    /// The number of stored values [`Self::foreach`] visits: those inside the dimension shape
    /// and, for a view, inside its slices (explicit zeros included). Equals
    /// [`Self::number_of_entries`] for a tensor that is no view and has no block padding.
    pub fn number_of_visible_entries(&self) -> usize {
        // Every stored value of a tensor whose levels are its dimensions (no blocks, no
        // padding) and that is no view lies inside the shape: no walk over the entries.
        if !self.is_view() && self.encoding.is_permutation() {
            return self.number_of_entries();
        }
        let mut n = 0;
        self.foreach(|_, _, _| n += 1);
        n
    }
    /// The positions of level `l`, if it has any.
    pub fn positions(&self, l: Lvl) -> Option<&IndexArray> {
        self.levels.get(l.index())?.positions()
    }
    /// The coordinates buffer of level `l` as stored (interleaved at the start of an
    /// array-of-structs COO region, `None` for the later levels of that region).
    pub fn coordinates(&self, l: Lvl) -> Option<&IndexArray> {
        self.levels.get(l.index())?.coordinates()
    }
    /// The coordinate of level `l` at position `q`, reading through COO interleaving.
    pub fn coordinate(&self, l: Lvl, q: usize) -> Option<u64> {
        let (buf, stride, offset) = self.crd_buffer(l.index())?;
        buf.get(q.checked_mul(stride)?.checked_add(offset)?)
    }
    /// Number of coordinates of level `l` (positions of the level for non-dense levels).
    pub(crate) fn crd_len(&self, l: usize) -> usize {
        self.crd_buffer(l)
            .map_or(0, |(b, stride, _)| b.len() / stride)
    }
    /// The buffer holding level `l`'s coordinates, with stride and offset.
    pub(crate) fn crd_buffer(&self, l: usize) -> Option<(&IndexArray, usize, usize)> {
        match self.encoding.aos_coo_start().map(Lvl::index) {
            Some(s) if l >= s => {
                let buf = self.levels.get(s)?.coordinates.as_ref()?;
                Some((buf, self.encoding.lvl_rank() - s, l - s))
            }
            _ => Some((self.levels.get(l)?.coordinates.as_ref()?, 1, 0)),
        }
    }
    /// The positions `[lo, hi)` of level `l` under parent position `parent`, clamped to the
    /// buffers so that a broken unchecked tensor cannot make traversal panic.
    pub(crate) fn segment(&self, l: usize, parent: usize) -> (usize, usize) {
        let size = self.lvl_shape[l];
        let pos = |i: usize| {
            let p = self.levels[l]
                .positions
                .as_ref()
                .and_then(|p| p.get(i))
                .unwrap_or(0);
            usize::try_from(p).unwrap_or(usize::MAX)
        };
        let (lo, hi, cap) = match self.encoding.levels()[l].lvl_type.format() {
            LevelFormat::Dense => match parent.checked_mul(size) {
                Some(lo) => (lo, lo.saturating_add(size), usize::MAX),
                None => (0, 0, 0),
            },
            LevelFormat::Compressed => {
                (pos(parent), pos(parent.saturating_add(1)), self.crd_len(l))
            }
            LevelFormat::LooseCompressed => {
                let i = parent.saturating_mul(2);
                (pos(i), pos(i.saturating_add(1)), self.crd_len(l))
            }
            LevelFormat::Singleton => (parent, parent.saturating_add(1), self.crd_len(l)),
            LevelFormat::NOutOfM { n, .. } => {
                let lo = parent.saturating_mul(n as usize);
                (lo, lo.saturating_add(n as usize), self.crd_len(l))
            }
        };
        let hi = hi.min(cap);
        (lo.min(hi), hi)
    }
    /// Visits every stored value in storage order with its level coordinates and value position.
    pub(crate) fn walk(&self, mut f: impl FnMut(&[u64], usize)) {
        let rank = self.levels.len();
        let mut q = vec![0usize; rank];
        let mut end = vec![0usize; rank];
        let mut parent = vec![0usize; rank];
        let mut coords = vec![0u64; rank];
        (q[0], end[0]) = self.segment(0, 0);
        let mut l = 0;
        loop {
            if q[l] >= end[l] {
                if l == 0 {
                    return;
                }
                l -= 1;
                q[l] += 1;
                continue;
            }
            coords[l] = match self.encoding.levels()[l].lvl_type.format() {
                LevelFormat::Dense => (q[l] - parent[l] * self.lvl_shape[l]) as u64,
                LevelFormat::Compressed
                | LevelFormat::LooseCompressed
                | LevelFormat::Singleton
                | LevelFormat::NOutOfM { .. } => self
                    .coordinate(Lvl::from_index(l), q[l])
                    .unwrap_or(u64::MAX),
            };
            if l + 1 == rank {
                f(&coords, q[l]);
                q[l] += 1;
            } else {
                parent[l + 1] = q[l];
                (q[l + 1], end[l + 1]) = self.segment(l + 1, q[l]);
                l += 1;
            }
        }
    }
    /// Calls `f(dim_coords, lvl_coords, value)` for every stored value in storage order, explicit
    /// zeros included, except padding whose dimension coordinates fall outside the shape.
    /// Through a dimension slice, the dimension coordinates are the slice's, and entries off
    /// the slice are skipped.
    pub fn foreach(&self, mut f: impl FnMut(&[usize], &[u64], Scalar)) {
        let slices = &self.slices;
        let mut dims = vec![0usize; self.dim_shape.len()];
        let mut lvl_i64 = vec![0i64; self.levels.len()];
        let mut scratch = Vec::new();
        self.walk(|lvl, q| {
            let Some(value) = self.values.get(q) else {
                return;
            };
            for (dst, &c) in lvl_i64.iter_mut().zip(lvl) {
                let Ok(c) = i64::try_from(c) else { return };
                *dst = c;
            }
            for (d, dst) in dims.iter_mut().enumerate() {
                let expr = self.encoding.lvl_to_dim(Dim::from_index(d));
                let c = expr.eval_with(&lvl_i64, &[], &mut scratch);
                let c = c.and_then(|c| usize::try_from(c).ok());
                let c = match slices.get(d).copied().flatten() {
                    Some(slice) => c.and_then(|c| slice.to_view(c)),
                    None => c,
                };
                match c {
                    Some(c) if c < self.dim_shape[d] => *dst = c,
                    _ => return,
                }
            }
            f(&dims, lvl, value);
        });
    }
    /// The index buffers in MLIR's storage-layout order (see [`super::storage_fields`]) and the
    /// values: what `sparse_tensor.disassemble` returns.
    pub fn disassemble(&self) -> (Vec<IndexArray>, ArrayData) {
        let mut buffers = Vec::new();
        for level in self.levels.iter() {
            buffers.extend(level.positions.iter().cloned());
            buffers.extend(level.coordinates.iter().cloned());
        }
        (buffers, ArrayData::clone(&self.values))
    }
    /// The index buffers in storage-layout order and the values, as [`SparseTensor::disassemble`]
    /// gives them but moved out, not copied, when this tensor is their only owner (no clone or
    /// view shares them); `None` otherwise. For a caller that reuses their storage, e.g. the
    /// next run of a kernel writing a result of the same shape.
    pub fn into_unshared_buffers(self) -> Option<(Vec<IndexArray>, ArrayData)> {
        let levels = Arc::try_unwrap(self.levels).ok()?;
        let values = Arc::try_unwrap(self.values).ok()?;
        let mut buffers = Vec::new();
        for level in levels {
            buffers.extend(level.positions);
            buffers.extend(level.coordinates);
        }
        Some((buffers, values))
    }
    /// The index buffers in storage-layout order and the values, moved out where this tensor
    /// is their only owner ([`SparseTensor::into_unshared_buffers`]) and copied where a clone
    /// or view shares them.
    pub fn into_buffers(self) -> (Vec<IndexArray>, ArrayData) {
        let levels = Arc::try_unwrap(self.levels).unwrap_or_else(|l| (*l).clone());
        let values = Arc::try_unwrap(self.values).unwrap_or_else(|v| (*v).clone());
        let mut buffers = Vec::new();
        for level in levels {
            buffers.extend(level.positions);
            buffers.extend(level.coordinates);
        }
        (buffers, values)
    }
    /// The buffer named by `field`.
    pub fn field(&self, field: Field) -> Option<&IndexArray> {
        match field {
            Field::Positions(l) => self.positions(l),
            Field::Coordinates(l) | Field::CooCoordinates(l) => self.coordinates(l),
            Field::Values => None,
        }
    }
}
