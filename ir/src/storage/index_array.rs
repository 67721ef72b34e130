//! Position and coordinate arrays stored at their declared bit width.

use crate::encoding::IndexWidth;
use serde::{Deserialize, Serialize};

/// An array of unsigned positions or coordinates at 8, 16, 32 or 64 bits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IndexArray {
    /// 8-bit entries.
    U8(Vec<u8>),
    /// 16-bit entries.
    U16(Vec<u16>),
    /// 32-bit entries.
    U32(Vec<u32>),
    /// 64-bit entries (also MLIR's native `index` width).
    U64(Vec<u64>),
}

/// A value that does not fit an array's width: its index and the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DoesNotFit {
    /// Index of the first value that does not fit.
    pub index: usize,
    /// That value.
    pub value: u64,
}

impl IndexArray {
    /// An empty array of `width` (native is 64 bits).
    pub fn new(width: IndexWidth) -> IndexArray {
        match width {
            IndexWidth::W8 => IndexArray::U8(Vec::new()),
            IndexWidth::W16 => IndexArray::U16(Vec::new()),
            IndexWidth::W32 => IndexArray::U32(Vec::new()),
            IndexWidth::Native | IndexWidth::W64 => IndexArray::U64(Vec::new()),
        }
    }
    /// `values` stored at `width`, or the first value that does not fit (never wraps).
    pub fn from_u64s(width: IndexWidth, values: &[u64]) -> Result<IndexArray, DoesNotFit> {
        fn narrow<T: TryFrom<u64>>(values: &[u64]) -> Result<Vec<T>, DoesNotFit> {
            (values.iter().enumerate())
                .map(|(index, &value)| T::try_from(value).map_err(|_| DoesNotFit { index, value }))
                .collect()
        }
        Ok(match width {
            IndexWidth::W8 => IndexArray::U8(narrow(values)?),
            IndexWidth::W16 => IndexArray::U16(narrow(values)?),
            IndexWidth::W32 => IndexArray::U32(narrow(values)?),
            IndexWidth::Native | IndexWidth::W64 => IndexArray::U64(values.to_vec()),
        })
    }
    /// This array converted to `width`, or the first value that does not fit.
    pub fn to_width(&self, width: IndexWidth) -> Result<IndexArray, DoesNotFit> {
        if self.bits() == width.max_value().count_ones() {
            return Ok(self.clone());
        }
        IndexArray::from_u64s(width, &self.to_u64_vec())
    }
    /// This array converted to `width` (moved, not copied, when it has that width already),
    /// or the first value that does not fit.
    pub fn into_width(self, width: IndexWidth) -> Result<IndexArray, DoesNotFit> {
        if self.bits() == width.max_value().count_ones() {
            return Ok(self);
        }
        IndexArray::from_u64s(width, &self.to_u64_vec())
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        match self {
            IndexArray::U8(v) => v.len(),
            IndexArray::U16(v) => v.len(),
            IndexArray::U32(v) => v.len(),
            IndexArray::U64(v) => v.len(),
        }
    }
    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The storage width in bits (8, 16, 32 or 64).
    pub fn bits(&self) -> u32 {
        match self {
            IndexArray::U8(_) => 8,
            IndexArray::U16(_) => 16,
            IndexArray::U32(_) => 32,
            IndexArray::U64(_) => 64,
        }
    }
    /// Entry `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<u64> {
        match self {
            IndexArray::U8(v) => v.get(i).map(|&x| u64::from(x)),
            IndexArray::U16(v) => v.get(i).map(|&x| u64::from(x)),
            IndexArray::U32(v) => v.get(i).map(|&x| u64::from(x)),
            IndexArray::U64(v) => v.get(i).copied(),
        }
    }
    /// All entries widened to `u64`.
    /// The entries as `u64`s: borrowed when they are 64-bit already, else widened into a
    /// copy (the checks of a stored tensor read positions this way, without copying the
    /// common 64-bit ones).
    pub fn as_u64s(&self) -> std::borrow::Cow<'_, [u64]> {
        match self {
            IndexArray::U64(v) => std::borrow::Cow::Borrowed(v),
            other => std::borrow::Cow::Owned(other.to_u64_vec()),
        }
    }
    /// Signed indices, as compiled kernels write them, reinterpreted as unsigned: `i64` as
    /// [`IndexArray::U64`] and `i32` as [`IndexArray::U32`], the same buffer without a pass
    /// over it; other types are converted entry by entry. A negative index becomes one too
    /// large for any level, so the checks of [`super::Validation::Checked`] reject it.
    pub fn from_signed(a: crate::ArrayData) -> IndexArray {
        match a {
            crate::ArrayData::I64(v) => IndexArray::U64(bytemuck::allocation::cast_vec(v)),
            crate::ArrayData::I32(v) => IndexArray::U32(bytemuck::allocation::cast_vec(v)),
            other => IndexArray::U64(other.to_i64_vec().into_iter().map(|x| x as u64).collect()),
        }
    }
    /// The inverse of [`IndexArray::from_signed`] for its reinterpreted widths: [`IndexArray::U64`]
    /// as `i64` and [`IndexArray::U32`] as `i32`, the same buffer; `None` for 8- and 16-bit
    /// arrays. For handing a result's storage back to a kernel that writes signed indices.
    pub fn into_signed(self) -> Option<crate::ArrayData> {
        match self {
            IndexArray::U64(v) => Some(crate::ArrayData::I64(bytemuck::allocation::cast_vec(v))),
            IndexArray::U32(v) => Some(crate::ArrayData::I32(bytemuck::allocation::cast_vec(v))),
            IndexArray::U8(_) | IndexArray::U16(_) => None,
        }
    }
    /// The same buffer as `dtype`'s signed integers (`I32` from [`IndexArray::U32`], `I64`
    /// from [`IndexArray::U64`]) where every entry fits, without a pass beyond that check;
    /// the array back for another width or type, or an entry too large.
    pub fn into_signed_as(self, dtype: crate::DType) -> Result<crate::ArrayData, IndexArray> {
        match (self, dtype) {
            (IndexArray::U32(v), crate::DType::I32) if v.iter().all(|&x| x <= i32::MAX as u32) => {
                Ok(crate::ArrayData::I32(bytemuck::allocation::cast_vec(v)))
            }
            (IndexArray::U64(v), crate::DType::I64) if v.iter().all(|&x| x <= i64::MAX as u64) => {
                Ok(crate::ArrayData::I64(bytemuck::allocation::cast_vec(v)))
            }
            (a, _) => Err(a),
        }
    }
    /// The entries widened to `u64`, in a new vector.
    pub fn to_u64_vec(&self) -> Vec<u64> {
        match self {
            IndexArray::U8(v) => v.iter().map(|&x| u64::from(x)).collect(),
            IndexArray::U16(v) => v.iter().map(|&x| u64::from(x)).collect(),
            IndexArray::U32(v) => v.iter().map(|&x| u64::from(x)).collect(),
            IndexArray::U64(v) => v.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ArrayData, DType};

    /// The same buffer where width and values fit; the array back, unchanged, otherwise.
    #[test]
    fn into_signed_as_keeps_fitting_buffers_and_returns_the_rest() {
        let v = vec![0u32, 7, i32::MAX as u32];
        let ptr = v.as_ptr() as usize;
        match IndexArray::U32(v).into_signed_as(DType::I32) {
            Ok(ArrayData::I32(s)) => {
                assert_eq!(s, vec![0, 7, i32::MAX]);
                assert_eq!(s.as_ptr() as usize, ptr, "the same allocation");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            IndexArray::U64(vec![1, i64::MAX as u64]).into_signed_as(DType::I64),
            Ok(ArrayData::I64(vec![1, i64::MAX]))
        );
        for (a, dtype) in [
            (IndexArray::U32(vec![1, i32::MAX as u32 + 1]), DType::I32),
            (IndexArray::U64(vec![u64::MAX]), DType::I64),
            (IndexArray::U32(vec![1, 2]), DType::I64),
            (IndexArray::U64(vec![1, 2]), DType::I32),
            (IndexArray::U16(vec![1, 2]), DType::I32),
        ] {
            assert_eq!(a.clone().into_signed_as(dtype), Err(a));
        }
    }
}
