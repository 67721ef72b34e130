//! Typed arrays: flat data, dense n-D arrays and coordinate (COO) tensors.

use crate::dtype::{DType, Scalar};
use serde::{Deserialize, Serialize};

/// An owned, typed, contiguous 1-D array.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ArrayData {
    /// 32-bit floats.
    F32(Vec<f32>),
    /// 64-bit floats.
    F64(Vec<f64>),
    /// 8-bit integers.
    I8(Vec<i8>),
    /// 32-bit integers.
    I32(Vec<i32>),
    /// 64-bit integers.
    I64(Vec<i64>),
}

impl ArrayData {
    /// A zero-filled array of `len` elements. `Bool` is stored as `I32`.
    pub fn zeros(dtype: DType, len: usize) -> ArrayData {
        match dtype {
            DType::F32 => ArrayData::F32(vec![0.0; len]),
            DType::F64 => ArrayData::F64(vec![0.0; len]),
            DType::I8 => ArrayData::I8(vec![0; len]),
            DType::I32 | DType::Bool => ArrayData::I32(vec![0; len]),
            DType::I64 => ArrayData::I64(vec![0; len]),
        }
    }
    /// A zero-filled array of `len` elements, or `None` when the memory cannot be reserved.
    pub fn try_zeros(dtype: DType, len: usize) -> Option<ArrayData> {
        fn zeros<T: Clone + Default>(len: usize) -> Option<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(len).ok()?;
            v.resize(len, T::default());
            Some(v)
        }
        Some(match dtype {
            DType::F32 => ArrayData::F32(zeros(len)?),
            DType::F64 => ArrayData::F64(zeros(len)?),
            DType::I8 => ArrayData::I8(zeros(len)?),
            DType::I32 | DType::Bool => ArrayData::I32(zeros(len)?),
            DType::I64 => ArrayData::I64(zeros(len)?),
        })
    }
    /// An empty array with room for `capacity` elements that are not initialized: a kernel
    /// writes them through [`ArrayData::as_mut_ptr`] (a `Vec`'s pointer is its allocation even
    /// when empty), then [`ArrayData::assume_written`] makes the written prefix the array's
    /// contents (the pattern of `Vec::set_len` for foreign writers). Saves zeroing result
    /// arrays sized by an upper bound, e.g. a one-pass co-iteration's coordinates and values.
    pub fn reserved(dtype: DType, capacity: usize) -> ArrayData {
        match dtype {
            DType::F32 => ArrayData::F32(Vec::with_capacity(capacity)),
            DType::F64 => ArrayData::F64(Vec::with_capacity(capacity)),
            DType::I8 => ArrayData::I8(Vec::with_capacity(capacity)),
            DType::I32 | DType::Bool => ArrayData::I32(Vec::with_capacity(capacity)),
            DType::I64 => ArrayData::I64(Vec::with_capacity(capacity)),
        }
    }
    /// [`ArrayData::reserved`], reusing this array's allocation when it stores `dtype`: its
    /// contents dropped, its capacity grown to `capacity` when smaller. The pages of a reused
    /// allocation are resident already, so a kernel writing it does not fault them in again.
    pub fn into_reserved(self, dtype: DType, capacity: usize) -> ArrayData {
        fn reuse<T>(mut v: Vec<T>, capacity: usize) -> Vec<T> {
            v.clear();
            v.reserve(capacity);
            v
        }
        match (self, dtype) {
            (ArrayData::F32(v), DType::F32) => ArrayData::F32(reuse(v, capacity)),
            (ArrayData::F64(v), DType::F64) => ArrayData::F64(reuse(v, capacity)),
            (ArrayData::I8(v), DType::I8) => ArrayData::I8(reuse(v, capacity)),
            (ArrayData::I32(v), DType::I32 | DType::Bool) => ArrayData::I32(reuse(v, capacity)),
            (ArrayData::I64(v), DType::I64) => ArrayData::I64(reuse(v, capacity)),
            _ => ArrayData::reserved(dtype, capacity),
        }
    }
    /// [`ArrayData::zeros`], reusing this array's allocation when it stores `dtype` (zeroed
    /// in place, as [`ArrayData::fill_zeros`]); a fresh zeroed array otherwise.
    pub fn into_zeros(self, dtype: DType, len: usize) -> ArrayData {
        fn reuse<T: Clone>(mut v: Vec<T>, len: usize, zero: T) -> Vec<T> {
            v.clear();
            v.resize(len, zero);
            v
        }
        match (self, dtype) {
            (ArrayData::F32(v), DType::F32) => ArrayData::F32(reuse(v, len, 0.0)),
            (ArrayData::F64(v), DType::F64) => ArrayData::F64(reuse(v, len, 0.0)),
            (ArrayData::I8(v), DType::I8) => ArrayData::I8(reuse(v, len, 0)),
            (ArrayData::I32(v), DType::I32 | DType::Bool) => ArrayData::I32(reuse(v, len, 0)),
            (ArrayData::I64(v), DType::I64) => ArrayData::I64(reuse(v, len, 0)),
            _ => ArrayData::zeros(dtype, len),
        }
    }
    /// Room for elements: at least the length.
    pub fn capacity(&self) -> usize {
        match self {
            ArrayData::F32(v) => v.capacity(),
            ArrayData::F64(v) => v.capacity(),
            ArrayData::I8(v) => v.capacity(),
            ArrayData::I32(v) => v.capacity(),
            ArrayData::I64(v) => v.capacity(),
        }
    }
    /// Sets the length to `n`, making elements written past the old length through
    /// [`ArrayData::as_mut_ptr`] part of the array. Returns false, and changes nothing, when
    /// `n` exceeds the capacity.
    ///
    /// # Safety
    ///
    /// Every element below `n` has been written (they are plain numbers, so any bit pattern is
    /// a valid value, but reading never-written memory is undefined behaviour).
    pub unsafe fn assume_written(&mut self, n: usize) -> bool {
        if n > self.capacity() {
            return false;
        }
        // SAFETY: `n` is within the capacity and the caller vouches the elements are written.
        unsafe {
            match self {
                ArrayData::F32(v) => v.set_len(n),
                ArrayData::F64(v) => v.set_len(n),
                ArrayData::I8(v) => v.set_len(n),
                ArrayData::I32(v) => v.set_len(n),
                ArrayData::I64(v) => v.set_len(n),
            }
        }
        true
    }
    /// Sets every element to zero in place, keeping the allocation (and its mapped pages): a
    /// kernel run after it writes memory that is already resident, as a caller reusing its
    /// output array would, instead of faulting in a fresh allocation.
    pub fn fill_zeros(&mut self) {
        match self {
            ArrayData::F32(v) => v.fill(0.0),
            ArrayData::F64(v) => v.fill(0.0),
            ArrayData::I8(v) => v.fill(0),
            ArrayData::I32(v) => v.fill(0),
            ArrayData::I64(v) => v.fill(0),
        }
    }
    /// An array filled with `value` converted to `dtype`.
    pub fn filled(dtype: DType, len: usize, value: Scalar) -> ArrayData {
        let mut a = ArrayData::zeros(dtype, len);
        for i in 0..len {
            a.set(i, value);
        }
        a
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        match self {
            ArrayData::F32(_) => DType::F32,
            ArrayData::F64(_) => DType::F64,
            ArrayData::I8(_) => DType::I8,
            ArrayData::I32(_) => DType::I32,
            ArrayData::I64(_) => DType::I64,
        }
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            ArrayData::F32(v) => v.len(),
            ArrayData::F64(v) => v.len(),
            ArrayData::I8(v) => v.len(),
            ArrayData::I32(v) => v.len(),
            ArrayData::I64(v) => v.len(),
        }
    }
    /// Keeps the first `n` elements (no effect when there are at most `n`).
    pub fn truncate(&mut self, n: usize) {
        match self {
            ArrayData::F32(v) => v.truncate(n),
            ArrayData::F64(v) => v.truncate(n),
            ArrayData::I8(v) => v.truncate(n),
            ArrayData::I32(v) => v.truncate(n),
            ArrayData::I64(v) => v.truncate(n),
        }
    }
    /// True when the array has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Element `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<Scalar> {
        Some(match self {
            ArrayData::F32(v) => Scalar::F32(*v.get(i)?),
            ArrayData::F64(v) => Scalar::F64(*v.get(i)?),
            ArrayData::I8(v) => Scalar::I8(*v.get(i)?),
            ArrayData::I32(v) => Scalar::I32(*v.get(i)?),
            ArrayData::I64(v) => Scalar::I64(*v.get(i)?),
        })
    }
    /// Sets element `i` to `value` converted to this array's type. Returns false past the end.
    pub fn set(&mut self, i: usize, value: Scalar) -> bool {
        if i >= self.len() {
            return false;
        }
        match self {
            ArrayData::F32(v) => v[i] = value.cast(DType::F32).as_f64() as f32,
            ArrayData::F64(v) => v[i] = value.as_f64(),
            ArrayData::I8(v) => v[i] = value.cast(DType::I8).as_i64() as i8,
            ArrayData::I32(v) => v[i] = value.cast(DType::I32).as_i64() as i32,
            ArrayData::I64(v) => v[i] = value.as_i64(),
        }
        true
    }
    /// All elements converted to `f64`.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            ArrayData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            ArrayData::F64(v) => v.clone(),
            ArrayData::I8(v) => v.iter().map(|&x| x as f64).collect(),
            ArrayData::I32(v) => v.iter().map(|&x| x as f64).collect(),
            ArrayData::I64(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }
    /// All elements converted to `i64` (floats truncate).
    pub fn to_i64_vec(&self) -> Vec<i64> {
        match self {
            ArrayData::F32(v) => v.iter().map(|&x| x as i64).collect(),
            ArrayData::F64(v) => v.iter().map(|&x| x as i64).collect(),
            ArrayData::I8(v) => v.iter().map(|&x| x as i64).collect(),
            ArrayData::I32(v) => v.iter().map(|&x| x as i64).collect(),
            ArrayData::I64(v) => v.clone(),
        }
    }
    /// A copy converted element by element to `dtype` (C-cast semantics).
    pub fn cast(&self, dtype: DType) -> ArrayData {
        if self.dtype() == dtype {
            return self.clone();
        }
        // Index arrays narrowed and widened (co-iteration's 32-bit kernels) without a scalar
        // per element; the same `as` conversions as `Scalar::cast`.
        match (self, dtype) {
            (ArrayData::I64(v), DType::I32) => {
                return ArrayData::I32(v.iter().map(|&x| x as i32).collect())
            }
            (ArrayData::I32(v), DType::I64) => {
                return ArrayData::I64(v.iter().map(|&x| i64::from(x)).collect())
            }
            _ => {}
        }
        let mut out = ArrayData::zeros(dtype, self.len());
        for i in 0..self.len() {
            if let Some(v) = self.get(i) {
                out.set(i, v);
            }
        }
        out
    }
    /// Raw pointer to the first element, for the JIT runtime.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            ArrayData::F32(v) => v.as_mut_ptr() as *mut u8,
            ArrayData::F64(v) => v.as_mut_ptr() as *mut u8,
            ArrayData::I8(v) => v.as_mut_ptr() as *mut u8,
            ArrayData::I32(v) => v.as_mut_ptr() as *mut u8,
            ArrayData::I64(v) => v.as_mut_ptr() as *mut u8,
        }
    }
    /// Sum of all elements as `f64` (the CLI's checksum).
    pub fn sum_f64(&self) -> f64 {
        self.to_f64_vec().iter().sum()
    }
}

/// A borrowed, typed, contiguous 1-D array: the read-only counterpart of [`ArrayData`] for
/// data owned elsewhere (e.g. a NumPy array handed in without copying).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArrayView<'a> {
    /// 32-bit floats.
    F32(&'a [f32]),
    /// 64-bit floats.
    F64(&'a [f64]),
    /// 8-bit integers.
    I8(&'a [i8]),
    /// 32-bit integers.
    I32(&'a [i32]),
    /// 64-bit integers.
    I64(&'a [i64]),
}

impl ArrayView<'_> {
    /// Element type.
    pub fn dtype(&self) -> DType {
        match self {
            ArrayView::F32(_) => DType::F32,
            ArrayView::F64(_) => DType::F64,
            ArrayView::I8(_) => DType::I8,
            ArrayView::I32(_) => DType::I32,
            ArrayView::I64(_) => DType::I64,
        }
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            ArrayView::F32(v) => v.len(),
            ArrayView::F64(v) => v.len(),
            ArrayView::I8(v) => v.len(),
            ArrayView::I32(v) => v.len(),
            ArrayView::I64(v) => v.len(),
        }
    }
    /// True when the array has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Element `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<Scalar> {
        Some(match self {
            ArrayView::F32(v) => Scalar::F32(*v.get(i)?),
            ArrayView::F64(v) => Scalar::F64(*v.get(i)?),
            ArrayView::I8(v) => Scalar::I8(*v.get(i)?),
            ArrayView::I32(v) => Scalar::I32(*v.get(i)?),
            ArrayView::I64(v) => Scalar::I64(*v.get(i)?),
        })
    }
    /// All elements converted to `i64` (floats truncate).
    pub fn to_i64_vec(&self) -> Vec<i64> {
        match self {
            ArrayView::F32(v) => v.iter().map(|&x| x as i64).collect(),
            ArrayView::F64(v) => v.iter().map(|&x| x as i64).collect(),
            ArrayView::I8(v) => v.iter().map(|&x| x as i64).collect(),
            ArrayView::I32(v) => v.iter().map(|&x| x as i64).collect(),
            ArrayView::I64(v) => v.to_vec(),
        }
    }
    /// An owned copy.
    pub fn to_owned(&self) -> ArrayData {
        match self {
            ArrayView::F32(v) => ArrayData::F32(v.to_vec()),
            ArrayView::F64(v) => ArrayData::F64(v.to_vec()),
            ArrayView::I8(v) => ArrayData::I8(v.to_vec()),
            ArrayView::I32(v) => ArrayData::I32(v.to_vec()),
            ArrayView::I64(v) => ArrayData::I64(v.to_vec()),
        }
    }
    /// Pointer to the first element.
    pub fn as_ptr(&self) -> *const u8 {
        match self {
            ArrayView::F32(v) => v.as_ptr() as *const u8,
            ArrayView::F64(v) => v.as_ptr() as *const u8,
            ArrayView::I8(v) => v.as_ptr() as *const u8,
            ArrayView::I32(v) => v.as_ptr() as *const u8,
            ArrayView::I64(v) => v.as_ptr() as *const u8,
        }
    }
}

impl ArrayData {
    /// A borrowed view of the elements.
    pub fn view(&self) -> ArrayView<'_> {
        match self {
            ArrayData::F32(v) => ArrayView::F32(v),
            ArrayData::F64(v) => ArrayView::F64(v),
            ArrayData::I8(v) => ArrayView::I8(v),
            ArrayData::I32(v) => ArrayView::I32(v),
            ArrayData::I64(v) => ArrayView::I64(v),
        }
    }
}

/// A dense row-major (C order) n-D array.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DenseArray {
    /// Extent of each dimension.
    pub shape: Vec<usize>,
    /// `shape.iter().product()` elements, last dimension fastest.
    pub data: ArrayData,
}

/// A tensor given by its stored entries in coordinate form (one coordinate vector per dimension).
///
/// Entries may be unsorted and may repeat a coordinate; consumers decide whether to sum or reject.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CooTensor {
    /// Extent of each dimension.
    pub shape: Vec<usize>,
    /// `coords[d][e]` is the 0-based coordinate of entry `e` in dimension `d`.
    pub coords: Vec<Vec<usize>>,
    /// `values[e]` is the value of entry `e`.
    pub values: ArrayData,
}

impl CooTensor {
    /// Number of stored entries.
    pub fn nnz(&self) -> usize {
        self.values.len()
    }
    /// Sorts entries lexicographically by coordinate and sums duplicates (stored explicit zeros
    /// are kept as entries).
    pub fn sort_and_sum_duplicates(&mut self) {
        let n = self.nnz();
        if self.sorted_and_unique() {
            // Nothing to move: data read from a sorted file, or sorted before.
            return;
        }
        let order = match self.row_order() {
            Some(order) => order,
            None => {
                let mut order: Vec<usize> = (0..n).collect();
                let coords = &self.coords;
                order.sort_by(|&a, &b| {
                    for c in coords {
                        match c[a].cmp(&c[b]) {
                            std::cmp::Ordering::Equal => continue,
                            o => return o,
                        }
                    }
                    std::cmp::Ordering::Equal
                });
                order
            }
        };
        let mut new_coords: Vec<Vec<usize>> = vec![Vec::with_capacity(n); self.coords.len()];
        let mut new_vals = ArrayData::zeros(self.values.dtype(), 0);
        let mut vals: Vec<Scalar> = Vec::with_capacity(n);
        let mut last: Option<usize> = None;
        for &e in &order {
            let same = last.is_some_and(|l| self.coords.iter().all(|c| c[l] == c[e]));
            let v = self.values.get(e).unwrap_or(Scalar::F64(0.0));
            if same {
                let acc = vals.last_mut().expect("a previous entry exists");
                *acc = add_scalars(*acc, v);
            } else {
                for (d, c) in self.coords.iter().enumerate() {
                    new_coords[d].push(c[e]);
                }
                vals.push(v);
            }
            last = Some(e);
        }
        new_vals = match new_vals {
            ArrayData::F32(_) => ArrayData::F32(vals.iter().map(|v| v.as_f64() as f32).collect()),
            ArrayData::F64(_) => ArrayData::F64(vals.iter().map(|v| v.as_f64()).collect()),
            ArrayData::I8(_) => ArrayData::I8(vals.iter().map(|v| v.as_i64() as i8).collect()),
            ArrayData::I32(_) => ArrayData::I32(vals.iter().map(|v| v.as_i64() as i32).collect()),
            ArrayData::I64(_) => ArrayData::I64(vals.iter().map(|v| v.as_i64()).collect()),
        };
        self.coords = new_coords;
        self.values = new_vals;
    }
}

impl CooTensor {
    /// For a matrix whose row coordinates lie within its rows, the entries in the order of a
    /// stable sort by (row, column): a counting sort by row, then each row's entries sorted by
    /// column (stably, so duplicates keep their order). `None` for other ranks, rows out of
    /// range and more rows than a few per entry (the general sort takes those).
    fn row_order(&self) -> Option<Vec<usize>> {
        let (&[rows, _], [r, c]) = (self.shape.as_slice(), self.coords.as_slice()) else {
            return None;
        };
        let n = self.nnz();
        // A counting sort allocates a slot per row: not for shapes far larger than the data
        // (a file may declare any extent), which the general sort takes.
        if rows > n.saturating_mul(4).saturating_add(1024)
            || r.len() < n
            || c.len() < n
            || r[..n].iter().any(|&x| x >= rows)
        {
            return None;
        }
        let mut start = vec![0usize; rows + 1];
        for &x in &r[..n] {
            start[x + 1] += 1;
        }
        for i in 0..rows {
            start[i + 1] += start[i];
        }
        let mut next = start.clone();
        let mut order = vec![0usize; n];
        for (e, &x) in r[..n].iter().enumerate() {
            order[next[x]] = e;
            next[x] += 1;
        }
        for w in start.windows(2) {
            let row = &mut order[w[0]..w[1]];
            if row.windows(2).any(|p| c[p[0]] > c[p[1]]) {
                row.sort_by_key(|&e| c[e]);
            }
        }
        Some(order)
    }

    /// Whether the entries are in strictly increasing lexicographic order of their coordinates
    /// (sorted, no duplicates), with one coordinate per entry in every dimension: what
    /// [`CooTensor::sort_and_sum_duplicates`] leaves.
    pub fn sorted_and_unique(&self) -> bool {
        let n = self.nnz();
        if self.coords.iter().any(|c| c.len() != n) {
            return false;
        }
        match self.coords.as_slice() {
            [] => n <= 1,
            [c] => c.windows(2).all(|w| w[0] < w[1]),
            [r, c] => (1..n).all(|e| (r[e - 1], c[e - 1]) < (r[e], c[e])),
            coords => (1..n).all(|e| {
                for c in coords {
                    match c[e - 1].cmp(&c[e]) {
                        std::cmp::Ordering::Equal => continue,
                        o => return o == std::cmp::Ordering::Less,
                    }
                }
                false
            }),
        }
    }
}

fn add_scalars(a: Scalar, b: Scalar) -> Scalar {
    match (a, b) {
        (Scalar::F32(x), Scalar::F32(y)) => Scalar::F32(x + y),
        (Scalar::I8(x), Scalar::I8(y)) => Scalar::I8(x.wrapping_add(y)),
        (Scalar::I32(x), Scalar::I32(y)) => Scalar::I32(x.wrapping_add(y)),
        (Scalar::I64(x), Scalar::I64(y)) => Scalar::I64(x.wrapping_add(y)),
        (x, y) => Scalar::F64(x.as_f64() + y.as_f64()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every cast gives what casting each element as a scalar gives (the index fast paths
    /// included: wrapping narrowings, sign-extending widenings).
    #[test]
    fn casts_agree_with_scalar_casts() {
        let sources = [
            ArrayData::I64(vec![0, 1, -1, i32::MAX as i64 + 1, i64::MIN, 1 << 40]),
            ArrayData::I32(vec![0, -7, i32::MIN, i32::MAX]),
            ArrayData::I8(vec![0, -128, 127]),
            ArrayData::F64(vec![0.5, -2.75, 1e10]),
            ArrayData::F32(vec![0.5, -2.75]),
        ];
        for a in &sources {
            for dtype in [DType::F32, DType::F64, DType::I8, DType::I32, DType::I64] {
                let c = a.cast(dtype);
                assert_eq!((c.dtype(), c.len()), (dtype, a.len()));
                for i in 0..a.len() {
                    let want = a.get(i).expect("in range").cast(dtype);
                    assert_eq!(c.get(i), Some(want), "{a:?} as {dtype:?} at {i}");
                }
            }
        }
    }

    #[test]
    fn fill_zeros_keeps_the_length_the_type_and_the_allocation() {
        for dtype in [DType::F32, DType::F64, DType::I8, DType::I32, DType::I64] {
            let mut a = ArrayData::filled(dtype, 1000, Scalar::F64(3.0));
            let ptr = a.as_mut_ptr();
            a.fill_zeros();
            assert_eq!((a.len(), a.dtype()), (1000, dtype));
            assert_eq!(a.as_mut_ptr(), ptr, "{dtype}: the same allocation");
            assert_eq!(a, ArrayData::zeros(dtype, 1000), "{dtype}");
        }
    }

    #[test]
    fn reserved_arrays_take_the_written_prefix() {
        let mut a = ArrayData::reserved(DType::F64, 4);
        assert_eq!((a.len(), a.dtype()), (0, DType::F64));
        assert!(a.capacity() >= 4);
        let p = a.as_mut_ptr().cast::<f64>();
        // SAFETY: within the reserved capacity.
        unsafe {
            p.write(1.5);
            p.add(1).write(-2.0);
        }
        // SAFETY: the two elements below 2 are written.
        assert!(unsafe { a.assume_written(2) });
        assert_eq!(a.to_f64_vec(), vec![1.5, -2.0]);
        // Past the capacity: refused, nothing changes.
        // SAFETY: refused before any element is exposed.
        assert!(!unsafe { a.assume_written(a.capacity() + 1) });
        assert_eq!(a.len(), 2);
    }
}
