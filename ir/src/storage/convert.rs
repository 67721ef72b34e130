//! Conversions between sparse storage, coordinate (COO) tensors and dense arrays.

use super::build::add_scalars;
use super::error::StorageError;
use super::tensor::SparseTensor;
use crate::encoding::Encoding;
use crate::{ArrayData, CooTensor, DenseArray, Scalar};

pub(crate) fn is_zero(v: Scalar) -> bool {
    v.as_f64() == 0.0
}

impl SparseTensor {
    /// The stored entries as a COO tensor in storage order, with dimension coordinates. Explicit
    /// zeros are kept; padding outside the dimension shape is dropped.
    pub fn to_coo(&self) -> CooTensor {
        let rank = self.dim_shape.len();
        let mut coords: Vec<Vec<usize>> = vec![Vec::new(); rank];
        let mut values = Vec::new();
        self.foreach(|dims, _, v| {
            for (c, &d) in coords.iter_mut().zip(dims) {
                c.push(d);
            }
            values.push(v);
        });
        let mut data = ArrayData::zeros(self.values.dtype(), values.len());
        for (i, v) in values.into_iter().enumerate() {
            data.set(i, v);
        }
        CooTensor {
            shape: self.dim_shape.clone(),
            coords,
            values: data,
        }
    }

    /// The tensor as a dense row-major array; repeated coordinates (nonunique levels) are summed.
    pub fn to_dense(&self) -> Result<DenseArray, StorageError> {
        let len = (self.dim_shape.iter()).try_fold(1usize, |acc, &n| acc.checked_mul(n));
        let len = len
            .filter(|&n| n <= isize::MAX as usize / 8)
            .ok_or(StorageError::TooLarge("dense array"))?;
        let mut data = try_zeros(self.values.dtype(), len)?;
        let mut seen = vec![false; len];
        self.foreach(|dims, _, v| {
            let idx = dims
                .iter()
                .zip(&self.dim_shape)
                .fold(0usize, |acc, (&c, &n)| acc * n + c);
            if let Some(old) = data.get(idx) {
                let new = if seen[idx] { add_scalars(old, v) } else { v };
                seen[idx] = true;
                data.set(idx, new);
            }
        });
        Ok(DenseArray {
            shape: self.dim_shape.clone(),
            data,
        })
    }

    /// Stores the nonzero entries of `dense` in `enc`. Entries equal to zero are not stored,
    /// except where a dense level or n:m padding forces storage.
    pub fn from_dense(dense: &DenseArray, enc: &Encoding) -> Result<SparseTensor, StorageError> {
        let len = dense
            .shape
            .iter()
            .try_fold(1usize, |acc, &n| acc.checked_mul(n));
        if len != Some(dense.data.len()) {
            return Err(StorageError::DenseLength {
                shape: dense.shape.clone(),
                found: dense.data.len(),
            });
        }
        let rank = dense.shape.len();
        let mut coords: Vec<Vec<usize>> = vec![Vec::new(); rank];
        let mut keep = Vec::new();
        for i in 0..dense.data.len() {
            let Some(v) = dense.data.get(i).filter(|&v| !is_zero(v)) else {
                continue;
            };
            let mut rest = i;
            for d in (0..rank).rev() {
                coords[d].push(rest % dense.shape[d]);
                rest /= dense.shape[d];
            }
            keep.push(v);
        }
        let mut values = ArrayData::zeros(dense.data.dtype(), keep.len());
        for (i, v) in keep.into_iter().enumerate() {
            values.set(i, v);
        }
        let coo = CooTensor {
            shape: dense.shape.clone(),
            coords,
            values,
        };
        SparseTensor::from_coo(&coo, enc)
    }

    /// This tensor stored in another encoding (through COO). Zero values, whether explicit or
    /// padding of dense levels, are not carried over.
    pub fn convert(&self, enc: &Encoding) -> Result<SparseTensor, StorageError> {
        let coo = self.to_coo();
        let mut keep = Vec::with_capacity(coo.nnz());
        for e in 0..coo.nnz() {
            if coo.values.get(e).is_some_and(|v| !is_zero(v)) {
                keep.push(e);
            }
        }
        let coords = coo
            .coords
            .iter()
            .map(|c| keep.iter().map(|&e| c[e]).collect())
            .collect();
        let mut values = ArrayData::zeros(coo.values.dtype(), keep.len());
        for (i, &e) in keep.iter().enumerate() {
            if let Some(v) = coo.values.get(e) {
                values.set(i, v);
            }
        }
        SparseTensor::from_coo(
            &CooTensor {
                shape: coo.shape,
                coords,
                values,
            },
            enc,
        )
    }
}

/// A zero-filled array, failing instead of aborting when it cannot be allocated.
fn try_zeros(dtype: crate::DType, len: usize) -> Result<ArrayData, StorageError> {
    fn zeros<T: Clone + Default>(len: usize) -> Result<Vec<T>, StorageError> {
        let mut v = Vec::new();
        v.try_reserve_exact(len)
            .map_err(|_| StorageError::TooLarge("dense array"))?;
        v.resize(len, T::default());
        Ok(v)
    }
    Ok(match ArrayData::zeros(dtype, 0) {
        ArrayData::F32(_) => ArrayData::F32(zeros(len)?),
        ArrayData::F64(_) => ArrayData::F64(zeros(len)?),
        ArrayData::I8(_) => ArrayData::I8(zeros(len)?),
        ArrayData::I32(_) => ArrayData::I32(zeros(len)?),
        ArrayData::I64(_) => ArrayData::I64(zeros(len)?),
    })
}
