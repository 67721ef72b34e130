//! Dimension slices (MLIR's `#sparse_tensor<slice(offset, size, stride)>`): zero-copy views
//! ([`SparseTensor::view`], [`SparseTensor::view_as`]), `extract_slice` (a re-based copy),
//! and the storage of encodings with static slices.
//!
//! A tensor whose encoding slices dimension `d` by `(offset, size, stride)` has size `size` in
//! `d`, and its entry at coordinate `c` is stored at the coordinate `offset + c * stride` of an
//! underlying tensor. A view shares the underlying tensor's buffers and level sizes; built
//! from entries ([`SparseTensor::from_coo`], [`SparseTensor::assemble`]) the underlying size
//! in `d` is the smallest that holds the slice, `offset + (size - 1) * stride + 1`. The levels
//! map the underlying coordinates, as in MLIR, so code reading the storage applies the slice
//! exactly as MLIR's generated code does. Stored entries off the slice's lattice are invisible.

use super::Entries;
use crate::encoding::{Dim, DimSlice, Encoding, SliceBound, Var};
use crate::storage::convert::is_zero;
use crate::storage::error::StorageError;
use crate::storage::tensor::SparseTensor;
use crate::CooTensor;
use std::borrow::Cow;

/// A slice whose offset, size and stride are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StaticSlice {
    pub(crate) offset: usize,
    pub(crate) size: usize,
    pub(crate) stride: usize,
}

impl StaticSlice {
    /// The size of the smallest underlying dimension holding the slice.
    fn extent(self) -> Option<usize> {
        let last = self.size.checked_sub(1)?.checked_mul(self.stride)?;
        self.offset.checked_add(last)?.checked_add(1)
    }
    /// The slice coordinate of underlying coordinate `u`, if the slice views it.
    pub(crate) fn to_view(self, u: usize) -> Option<usize> {
        let rel = u.checked_sub(self.offset)?;
        (rel % self.stride == 0 && rel / self.stride < self.size).then_some(rel / self.stride)
    }
    /// The underlying coordinate of slice coordinate `c < size` (fits by construction).
    pub(crate) fn to_underlying(self, c: usize) -> usize {
        self.offset + c * self.stride
    }
}

/// Per dimension, the static slice of `enc`, if any; [`StorageError::Slices`] when a slice is
/// dynamic, [`StorageError::TooLarge`] when it does not fit in memory sizes.
pub(crate) fn static_slices(enc: &Encoding) -> Result<Vec<Option<StaticSlice>>, StorageError> {
    let known = |b: SliceBound| match b {
        SliceBound::Static(v) => usize::try_from(v).map_err(|_| StorageError::TooLarge("slice")),
        SliceBound::Dynamic => Err(StorageError::Slices),
    };
    (0..enc.dim_rank())
        .map(|d| {
            let Some(s) = enc.dim_slice(Dim::from_index(d)) else {
                return Ok(None);
            };
            let slice = StaticSlice {
                offset: known(s.offset)?,
                size: known(s.size)?,
                stride: known(s.stride)?,
            };
            if slice.size == 0 || slice.stride == 0 {
                // The encoding verifier rejects these; keep storage total anyway.
                return Err(StorageError::Slices);
            }
            slice.extent().ok_or(StorageError::TooLarge("slice"))?;
            Ok(Some(slice))
        })
        .collect()
}

/// The dimension sizes of the underlying tensor that stores a tensor of `dim_shape` in `enc`:
/// `dim_shape` itself without slices. Each sliced dimension must have the slice's size
/// ([`StorageError::SliceSize`]). `dim_shape` has `enc`'s rank.
pub(crate) fn underlying_shape(
    enc: &Encoding,
    dim_shape: &[usize],
) -> Result<Vec<usize>, StorageError> {
    let slices = static_slices(enc)?;
    (dim_shape.iter().enumerate())
        .map(|(d, &n)| match slices.get(d).copied().flatten() {
            None => Ok(n),
            Some(s) if s.size == n => s.extent().ok_or(StorageError::TooLarge("slice")),
            Some(s) => Err(StorageError::SliceSize {
                dim: Dim::from_index(d),
                expected: s.size,
                found: n,
            }),
        })
        .collect()
}

/// `coo` moved to the coordinates of the underlying tensor of `enc` (see the module docs), or
/// borrowed as is without slices. Coordinates outside `coo.shape` are errors here, in the
/// slice's terms; rank and length mismatches are left to the caller's checks.
pub(crate) fn underlying_coo<'a>(
    coo: &'a CooTensor,
    enc: &Encoding,
) -> Result<Cow<'a, CooTensor>, StorageError> {
    if !enc.has_slices() {
        return Ok(Cow::Borrowed(coo));
    }
    let slices = static_slices(enc)?;
    let mut out = coo.clone();
    out.shape = underlying_shape(enc, &coo.shape)?;
    for (d, coords) in out.coords.iter_mut().enumerate() {
        let (Some(Some(s)), Some(&extent)) = (slices.get(d), coo.shape.get(d)) else {
            continue;
        };
        for (entry, c) in coords.iter_mut().enumerate() {
            if *c >= extent {
                return Err(StorageError::DimCoordOutOfRange {
                    entry,
                    dim: Dim::from_index(d),
                    coord: *c,
                    extent,
                });
            }
            *c = s.to_underlying(*c);
        }
    }
    Ok(Cow::Owned(out))
}

/// Checks `offsets`, `sizes`, `strides` against `shape`: one entry per dimension, positive
/// strides, slices inside their dimensions (an empty slice may start at the end).
fn checked_slices(
    shape: &[usize],
    offsets: &[usize],
    sizes: &[usize],
    strides: &[usize],
) -> Result<Vec<StaticSlice>, StorageError> {
    let rank = shape.len();
    for (what, v) in [("offsets", offsets), ("sizes", sizes), ("strides", strides)] {
        if v.len() != rank {
            return Err(StorageError::SliceArity {
                what,
                expected: rank,
                found: v.len(),
            });
        }
    }
    let mut slices = Vec::with_capacity(rank);
    for (d, &extent) in shape.iter().enumerate() {
        let (offset, size, stride) = (offsets[d], sizes[d], strides[d]);
        let s = StaticSlice {
            offset,
            size,
            stride,
        };
        let fits = match s.extent() {
            _ if stride == 0 => false,
            Some(end) => end <= extent,
            None => size == 0 && offset <= extent,
        };
        if !fits {
            return Err(StorageError::SliceOutOfBounds {
                dim: Dim::from_index(d),
                offset,
                size,
                stride,
                extent,
            });
        }
        slices.push(s);
    }
    Ok(slices)
}

impl SparseTensor {
    /// A zero-copy view of a slice of this tensor, like MLIR's `tensor.extract_slice` on a
    /// sparse tensor: dimension `d` sees coordinates `offsets[d] + i * strides[d]` for
    /// `0 <= i < sizes[d]`. The view shares this tensor's positions, coordinates and values
    /// ([`SparseTensor::shares_storage_with`]); its encoding is this one with static slices
    /// (a size of 0, which an encoding cannot state, becomes `?`). A view of a view slices
    /// the underlying tensor once, with the composed offsets and strides.
    ///
    /// Errors: arity ([`StorageError::SliceArity`]); a zero stride or a slice reaching past
    /// its dimension ([`StorageError::SliceOutOfBounds`], naming the dimension); symbols.
    pub fn view(
        &self,
        offsets: &[usize],
        sizes: &[usize],
        strides: &[usize],
    ) -> Result<SparseTensor, StorageError> {
        let abs = self.absolute_slices(offsets, sizes, strides)?;
        let bound = |v: usize| SliceBound::Static(v as u64);
        let dim_slices = abs
            .iter()
            .map(|s| {
                Some(DimSlice {
                    offset: bound(s.offset),
                    size: if s.size == 0 {
                        SliceBound::Dynamic
                    } else {
                        bound(s.size)
                    },
                    stride: bound(s.stride),
                })
            })
            .collect();
        let enc = Encoding {
            dim_slices,
            ..self.encoding.clone()
        };
        Ok(self.view_with(enc, abs))
    }

    /// A zero-copy view of this tensor typed by `enc`, an encoding with dimension slices whose
    /// levels and widths are this tensor's, like MLIR's `tensor.extract_slice` into a tensor
    /// of that encoding: the `?` parts of `enc`'s slices are bound to `offsets`, `sizes`,
    /// `strides`, and its static parts must equal them. For a view of a view, `enc` states
    /// the composed slice into the underlying tensor. A dimension `enc` does not slice must
    /// be taken whole.
    ///
    /// Errors: those of [`SparseTensor::view`]; other levels or widths
    /// ([`StorageError::ViewEncoding`]); a static part that differs
    /// ([`StorageError::SliceMismatch`], naming the dimension).
    pub fn view_as(
        &self,
        enc: &Encoding,
        offsets: &[usize],
        sizes: &[usize],
        strides: &[usize],
    ) -> Result<SparseTensor, StorageError> {
        let (mine, theirs) = (self.encoding.without_slices(), enc.without_slices());
        if mine != theirs || enc.n_symbols() > 0 {
            return Err(StorageError::ViewEncoding {
                expected: mine.to_string(),
                found: theirs.to_string(),
            });
        }
        let abs = self.absolute_slices(offsets, sizes, strides)?;
        for (d, s) in abs.iter().enumerate() {
            let dim = Dim::from_index(d);
            let want = |b: SliceBound| match b {
                SliceBound::Static(v) => Some(usize::try_from(v).unwrap_or(usize::MAX)),
                SliceBound::Dynamic => None,
            };
            let parts: [(&'static str, Option<usize>, usize); 3] = match enc.dim_slice(dim) {
                Some(ds) => [
                    ("offset", want(ds.offset), s.offset),
                    ("size", want(ds.size), s.size),
                    ("stride", want(ds.stride), s.stride),
                ],
                None => [
                    ("offset", Some(0), s.offset),
                    ("size", Some(self.base_shape[d]), s.size),
                    ("stride", Some(1), s.stride),
                ],
            };
            for (what, expected, found) in parts {
                if let Some(expected) = expected.filter(|&e| e != found) {
                    return Err(StorageError::SliceMismatch {
                        dim,
                        what,
                        expected,
                        found,
                    });
                }
            }
        }
        Ok(self.view_with(enc.clone(), abs))
    }

    /// The view of this tensor that `enc`'s static dimension slices describe (dimensions
    /// `enc` does not slice are taken whole): [`SparseTensor::view_as`] with the encoding's
    /// own values. Dynamic (`?`) parts have no value here ([`StorageError::Slices`]).
    pub fn view_by(&self, enc: &Encoding) -> Result<SparseTensor, StorageError> {
        let rank = self.dim_shape.len();
        let mut offsets = vec![0; rank];
        let mut sizes = self.dim_shape.clone();
        let mut strides = vec![1; rank];
        let known = |b: SliceBound| match b {
            SliceBound::Static(v) => {
                usize::try_from(v).map_err(|_| StorageError::TooLarge("slice"))
            }
            SliceBound::Dynamic => Err(StorageError::Slices),
        };
        for d in 0..rank.min(enc.dim_rank()) {
            if let Some(s) = enc.dim_slice(Dim::from_index(d)) {
                offsets[d] = known(s.offset)?;
                sizes[d] = known(s.size)?;
                strides[d] = known(s.stride)?;
            }
        }
        self.view_as(enc, &offsets, &sizes, &strides)
    }

    /// The slices into the underlying tensor of the slices `offsets`, `sizes`, `strides` of
    /// this tensor (composed with this tensor's own, if it is a view).
    fn absolute_slices(
        &self,
        offsets: &[usize],
        sizes: &[usize],
        strides: &[usize],
    ) -> Result<Vec<StaticSlice>, StorageError> {
        if self.encoding.n_symbols() > 0 {
            return Err(StorageError::Symbols);
        }
        let rel = checked_slices(&self.dim_shape, offsets, sizes, strides)?;
        let too_large = || StorageError::TooLarge("slice");
        (rel.into_iter().enumerate())
            .map(|(d, r)| match self.slices.get(d).copied().flatten() {
                None => Ok(r),
                Some(outer) => Ok(StaticSlice {
                    offset: (r.offset.checked_mul(outer.stride))
                        .and_then(|o| o.checked_add(outer.offset))
                        .ok_or_else(too_large)?,
                    size: r.size,
                    stride: r.stride.checked_mul(outer.stride).ok_or_else(too_large)?,
                }),
            })
            .collect()
    }

    fn view_with(&self, encoding: Encoding, abs: Vec<StaticSlice>) -> SparseTensor {
        SparseTensor {
            encoding,
            dim_shape: abs.iter().map(|s| s.size).collect(),
            base_shape: self.base_shape.clone(),
            slices: abs.into_iter().map(Some).collect(),
            lvl_shape: self.lvl_shape.clone(),
            levels: self.levels.clone(),
            values: self.values.clone(),
        }
    }

    /// The entries inside a slice, like MLIR's `tensor.extract_slice` on a sparse tensor but
    /// as a copy: dimension `d` keeps coordinates `offsets[d] + i * strides[d]` for
    /// `0 <= i < sizes[d]`, re-based to `i`. The result has shape `sizes` and this tensor's
    /// encoding without its dimension slices (if any); as [`SparseTensor::convert`], values
    /// equal to zero are not carried over.
    ///
    /// Errors: `offsets`, `sizes` or `strides` without one entry per dimension
    /// ([`StorageError::SliceArity`]); a zero stride, or a slice reaching past its dimension
    /// ([`StorageError::SliceOutOfBounds`]); what [`SparseTensor::from_coo`] reports.
    pub fn extract_slice(
        &self,
        offsets: &[usize],
        sizes: &[usize],
        strides: &[usize],
    ) -> Result<SparseTensor, StorageError> {
        let rank = self.dim_shape.len();
        let slices = checked_slices(&self.dim_shape, offsets, sizes, strides)?;
        let mut entries = Entries::new(rank);
        let mut view = vec![0usize; rank];
        self.foreach(|dims, _, v| {
            for ((dst, &c), s) in view.iter_mut().zip(dims).zip(&slices) {
                match s.to_view(c) {
                    Some(i) => *dst = i,
                    None => return,
                }
            }
            if !is_zero(v) {
                entries.push(view.iter().copied(), v);
            }
        });
        let enc = self.encoding.without_slices();
        SparseTensor::from_coo(&entries.into_coo(sizes.to_vec(), self.values.dtype()), &enc)
    }
}
