//! Run-time data of a stage-I program: parameter values, axis structure arrays and buffer values.
//!
//! [`bind`] turns user inputs (dense arrays and coordinate tensors) into [`Bindings`]: it packs
//! sparse inputs into the structure of their buffer's axes, binds symbolic sizes from the shapes,
//! checks that inputs agree, allocates outputs, and validates every structure array, so that
//! kernels compiled without bounds checks only ever see consistent storage.

use crate::ir::{Axis, AxisKind, IndexType, Program, Role, Size};
use lacuna_ir::{ArrayData, ArrayView, CooTensor, DType, DenseArray, Scalar};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Structure arrays of one axis.
#[derive(Clone, Debug, PartialEq)]
pub struct AxisData {
    /// Segment boundaries, `parent_len + 1` entries (variable axes).
    pub indptr: Option<ArrayData>,
    /// Stored coordinates (sparse axes).
    pub indices: Option<ArrayData>,
}

/// Everything a kernel reads and writes.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Bindings {
    /// Values of the symbolic sizes.
    pub params: BTreeMap<String, i64>,
    /// Structure arrays per axis name (axes without structure are absent).
    pub axes: BTreeMap<String, AxisData>,
    /// Values per buffer name, in storage order.
    pub buffers: BTreeMap<String, ArrayData>,
}

/// Read access to parameters and structure arrays, whoever owns them: [`Bindings`] or a
/// [`crate::BindingsView`] over borrowed arrays. Lengths and validation are defined once over it.
pub(crate) trait Structure {
    /// Values of the symbolic sizes.
    fn params(&self) -> &BTreeMap<String, i64>;
    /// Whether the axis has structure bound (even if neither array is).
    fn has_axis(&self, axis: &str) -> bool;
    /// The `indptr` of an axis, if bound.
    fn indptr(&self, axis: &str) -> Option<ArrayView<'_>>;
    /// The `indices` of an axis, if bound.
    fn indices(&self, axis: &str) -> Option<ArrayView<'_>>;
    /// The values of a buffer, if bound.
    fn values(&self, buffer: &str) -> Option<ArrayView<'_>>;
}

impl Structure for Bindings {
    fn params(&self) -> &BTreeMap<String, i64> {
        &self.params
    }
    fn has_axis(&self, axis: &str) -> bool {
        self.axes.contains_key(axis)
    }
    fn indptr(&self, axis: &str) -> Option<ArrayView<'_>> {
        self.axes.get(axis)?.indptr.as_ref().map(ArrayData::view)
    }
    fn indices(&self, axis: &str) -> Option<ArrayView<'_>> {
        self.axes.get(axis)?.indices.as_ref().map(ArrayData::view)
    }
    fn values(&self, buffer: &str) -> Option<ArrayView<'_>> {
        self.buffers.get(buffer).map(ArrayData::view)
    }
}

/// A user input for one buffer.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// A dense array (e.g. from `.npy`).
    Dense(DenseArray),
    /// A coordinate tensor (e.g. from `.mtx`).
    Coo(CooTensor),
    /// A tensor already in storage (validated when it was built or assembled), e.g. a
    /// caller's CSR arrays: co-iteration kernels read it as it is stored where its
    /// encoding is the one they plan (at any index widths); other consumers read its entries
    /// ([`Input::coo`]).
    Sparse(lacuna_ir::storage::SparseTensor),
}

impl Input {
    /// Extents of the dimensions.
    pub fn shape(&self) -> &[usize] {
        match self {
            Input::Dense(d) => &d.shape,
            Input::Coo(c) => &c.shape,
            Input::Sparse(t) => t.dim_shape(),
        }
    }

    /// The stored entries as a coordinate tensor: borrowed from a [`Input::Coo`], the
    /// stored entries of a [`Input::Sparse`] (the visible ones of a view), `None` for a
    /// dense array.
    pub fn coo(&self) -> Option<Cow<'_, CooTensor>> {
        match self {
            Input::Dense(_) => None,
            _ => Some(self.entries()),
        }
    }

    /// [`Input::coo`], with a dense array's non-zeros as its entries (how binding stores a
    /// dense input into sparse structure).
    fn entries(&self) -> Cow<'_, CooTensor> {
        match self {
            Input::Dense(d) => Cow::Owned(dense_to_coo(d)),
            Input::Coo(c) => Cow::Borrowed(c),
            Input::Sparse(t) => Cow::Owned(t.to_coo()),
        }
    }

    /// Values it holds: a dense array's elements, a coordinate tensor's entries, a stored
    /// tensor's visible entries.
    pub fn stored_len(&self) -> usize {
        match self {
            Input::Dense(d) => d.data.len(),
            Input::Coo(c) => c.nnz(),
            Input::Sparse(t) => t.number_of_visible_entries(),
        }
    }

    /// As a dense array for buffer `buffer`: a dense input checked against its shape
    /// ([`check_dense_len`]; kernels index it by the extents, unchecked), the entries of a
    /// sparse one scattered ([`dense_of_coo`]).
    pub fn dense(&self, buffer: &str) -> Result<Cow<'_, DenseArray>, BindError> {
        match self {
            Input::Dense(d) => {
                check_dense_len(buffer, d)?;
                Ok(Cow::Borrowed(d))
            }
            other => Ok(Cow::Owned(dense_of_coo(buffer, &other.entries())?)),
        }
    }
}

/// A computed buffer, in the user's terms.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// A buffer over dense axes only.
    Dense(DenseArray),
    /// A buffer with sparse structure, as its stored entries.
    Coo(CooTensor),
    /// A buffer with sparse structure, in the storage of its declared encoding (MLIR's
    /// storage layout: positions and coordinates per level, then values).
    Sparse(lacuna_ir::storage::SparseTensor),
}

impl Output {
    /// Extents of the dimensions.
    pub fn shape(&self) -> &[usize] {
        match self {
            Output::Dense(d) => &d.shape,
            Output::Coo(c) => &c.shape,
            Output::Sparse(t) => t.dim_shape(),
        }
    }
    /// Number of stored values.
    pub fn nnz(&self) -> usize {
        match self {
            Output::Dense(d) => d.data.len(),
            Output::Coo(c) => c.nnz(),
            Output::Sparse(t) => t.values().len(),
        }
    }
    /// The values.
    pub fn values(&self) -> &ArrayData {
        match self {
            Output::Dense(d) => &d.data,
            Output::Coo(c) => &c.values,
            Output::Sparse(t) => t.values(),
        }
    }
    /// The stored entries in coordinate form (sparse results; `None` for dense ones).
    pub fn to_coo(&self) -> Option<CooTensor> {
        match self {
            Output::Dense(_) => None,
            Output::Coo(c) => Some(c.clone()),
            Output::Sparse(t) => Some(t.to_coo()),
        }
    }
}

/// Inputs that do not fit the program.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BindError {
    /// No input was given for an input buffer.
    #[error("no input given for buffer `{buffer}` (pass --input {buffer}=FILE)")]
    MissingInput {
        /// The buffer.
        buffer: String,
    },
    /// An input names a buffer that the schedule's format conversion builds (the parts of a
    /// decomposed buffer, their row ids and source maps): the kernel relies on what it built.
    #[error("input `{name}` is built by the schedule's format conversion from the decomposed buffer; give that buffer instead")]
    Converted {
        /// The given name.
        name: String,
    },
    /// An input names no input buffer of the kernel.
    #[error("input `{name}` is not an input buffer of kernel `{kernel}` (its inputs: {known})")]
    UnknownInput {
        /// The given name.
        name: String,
        /// The kernel.
        kernel: String,
        /// The input buffers.
        known: String,
    },
    /// An input has a different number of dimensions than its buffer.
    #[error("input `{buffer}` has {found} dimensions but the buffer has {expected} axes")]
    Rank {
        /// The buffer.
        buffer: String,
        /// Its rank.
        expected: usize,
        /// The input's rank.
        found: usize,
    },
    /// Two sources give a size different values.
    #[error("shape mismatch: size `{param}` is {first} (from {first_source}) but {second} (from {second_source})")]
    ShapeMismatch {
        /// The symbolic or constant size.
        param: String,
        /// First value.
        first: i64,
        /// Where it came from.
        first_source: String,
        /// Conflicting value.
        second: i64,
        /// Where it came from.
        second_source: String,
    },
    /// A size could not be determined from the inputs.
    #[error("size `{param}` is not determined by the inputs; pass --param {param}=VALUE")]
    UnboundParam {
        /// The parameter.
        param: String,
    },
    /// Two buffers that share an axis have different structure.
    #[error("buffers share axis `{axis}` but `{buffer}` has a different sparsity pattern than an earlier input")]
    PatternMismatch {
        /// The axis.
        axis: String,
        /// The later buffer.
        buffer: String,
    },
    /// The data breaks a closed form a schedule asserted for a structure array
    /// (`specialize_buffer`).
    #[error("`{axis}.{array}[{position}]` is {found}, but specialize_buffer asserts {expected}")]
    ClosedForm {
        /// The axis.
        axis: String,
        /// `indptr` or `indices`.
        array: &'static str,
        /// The first mismatching position.
        position: usize,
        /// The value of the closed form.
        expected: i64,
        /// The value in the data.
        found: i64,
    },
    /// An input does not fit an axis's structure (ragged prefix, fixed width, index width).
    #[error("input `{buffer}` does not fit axis `{axis}`: {reason}")]
    Structure {
        /// The buffer.
        buffer: String,
        /// The axis.
        axis: String,
        /// What is wrong.
        reason: String,
    },
    /// An axis that an output or iteration needs has no structure arrays.
    #[error("axis `{axis}` has no structure: it must belong to an input buffer ({why})")]
    NoStructure {
        /// The axis.
        axis: String,
        /// Who needs it.
        why: String,
    },
    /// A value cannot be represented in the buffer's element type.
    #[error("input `{buffer}`: value {value} at entry {entry} is not representable as {dtype}")]
    Value {
        /// The buffer.
        buffer: String,
        /// Entry index.
        entry: usize,
        /// The value.
        value: f64,
        /// The element type.
        dtype: DType,
    },
    /// A coordinate is outside the input's declared shape.
    #[error(
        "input `{buffer}`: coordinate {coord} out of range in dimension {dim} (extent {extent})"
    )]
    CoordRange {
        /// The buffer.
        buffer: String,
        /// Dimension.
        dim: usize,
        /// The coordinate.
        coord: usize,
        /// The extent.
        extent: usize,
    },
    /// A value of a buffer declared `coordinates_of` an axis is not a coordinate of it.
    #[error("input `{buffer}`: value {value} at position {position} is not a coordinate of axis `{axis}` (0..{extent})")]
    NotCoordinate {
        /// The buffer.
        buffer: String,
        /// The axis its values are coordinates of.
        axis: String,
        /// The first position holding a value outside.
        position: usize,
        /// The value.
        value: i64,
        /// The axis's coordinate extent.
        extent: i64,
    },
    /// A buffer declared a permutation of an axis's coordinates holds one twice, or not
    /// every one.
    #[error("buffer `{buffer}`: not a permutation of the coordinates of axis `{axis}` (0..{extent}): {reason}")]
    NotPermutation {
        /// The buffer.
        buffer: String,
        /// The axis it permutes.
        axis: String,
        /// The axis's coordinate extent.
        extent: i64,
        /// What is wrong, with the position.
        reason: String,
    },
    /// An axis declared to tile a larger extent has more coordinates than fit in it.
    #[error(
        "axis `{axis}`: {extent} coordinates of {factor} each exceed `{tiled}` = {tiled_extent}"
    )]
    Tiles {
        /// The axis.
        axis: String,
        /// Its coordinate extent.
        extent: i64,
        /// Tiled coordinates per coordinate.
        factor: u64,
        /// The tiled extent's size.
        tiled: String,
        /// Its value.
        tiled_extent: i64,
    },
    /// A size parameter was given a negative value.
    #[error("parameter `{param}` = {value} must not be negative")]
    NegativeParam {
        /// The parameter.
        param: String,
        /// The value given.
        value: i64,
    },
    /// An array of a buffer (handed in without copying, or bound by hand) has the wrong number
    /// of elements.
    #[error("buffer `{buffer}`: {array} has {found} elements, expected {expected}")]
    Length {
        /// The buffer.
        buffer: String,
        /// Which array (`values`, `indptr`, `indices`).
        array: String,
        /// The length the kernel expects.
        expected: usize,
        /// The length given.
        found: usize,
    },
    /// A buffer would be too large for this machine.
    #[error("buffer `{buffer}` is too large to allocate on this machine")]
    TooLarge {
        /// The buffer.
        buffer: String,
    },
}

/// Resolves a size to its value, if bound.
pub fn size_value(s: &Size, params: &BTreeMap<String, i64>) -> Option<i64> {
    match s {
        Size::Const(c) => i64::try_from(*c).ok(),
        Size::Param(p) => params.get(p).copied(),
    }
}

struct Binder<'p> {
    p: &'p Program,
    params: BTreeMap<String, i64>,
    sources: BTreeMap<String, String>,
    axes: BTreeMap<String, AxisData>,
    buffers: BTreeMap<String, ArrayData>,
}

impl Binder<'_> {
    fn bind_size(&mut self, s: &Size, value: usize, source: &str) -> Result<(), BindError> {
        let value = i64::try_from(value).map_err(|_| BindError::TooLarge {
            buffer: source.to_string(),
        })?;
        let (key, existing) = match s {
            Size::Const(c) => (c.to_string(), i64::try_from(*c).ok()),
            Size::Param(p) => (p.clone(), self.params.get(p).copied()),
        };
        match existing {
            Some(v) if v != value => Err(BindError::ShapeMismatch {
                param: key.clone(),
                first: v,
                first_source: self
                    .sources
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| "the kernel".into()),
                second: value,
                second_source: source.to_string(),
            }),
            Some(_) => Ok(()),
            None => {
                if let Size::Param(p) = s {
                    self.params.insert(p.clone(), value);
                    self.sources.insert(p.clone(), source.to_string());
                }
                Ok(())
            }
        }
    }

    fn axis(&self, name: &str) -> &Axis {
        self.p
            .axis(name)
            .expect("verified programs name only declared axes")
    }
}

fn check_values(buffer: &str, values: &ArrayData, dtype: DType) -> Result<ArrayData, BindError> {
    if dtype.is_int() && values.dtype().is_float() {
        for (e, v) in values.to_f64_vec().into_iter().enumerate() {
            let fits = v.fract() == 0.0
                && match dtype {
                    DType::I8 => (i8::MIN as f64..=i8::MAX as f64).contains(&v),
                    DType::I32 => v.abs() <= i32::MAX as f64,
                    _ => v.abs() < 9.2e18,
                };
            if !fits {
                return Err(BindError::Value {
                    buffer: buffer.to_string(),
                    entry: e,
                    value: v,
                    dtype,
                });
            }
        }
    }
    let narrower = dtype.is_int()
        && values.dtype().is_int()
        && dtype.size_bytes() < values.dtype().size_bytes();
    if narrower {
        for (e, v) in values.to_i64_vec().into_iter().enumerate() {
            let fits = match dtype {
                DType::I8 => i8::try_from(v).is_ok(),
                _ => i32::try_from(v).is_ok(),
            };
            if !fits {
                return Err(BindError::Value {
                    buffer: buffer.to_string(),
                    entry: e,
                    value: v as f64,
                    dtype,
                });
            }
        }
    }
    Ok(values.cast(dtype))
}

/// The non-zero entries of a dense input to buffer `buffer`, as a coordinate tensor; an error
/// when its data is not as long as its shape says.
pub fn dense_nonzeros(buffer: &str, d: &DenseArray) -> Result<CooTensor, BindError> {
    check_dense_len(buffer, d)?;
    Ok(dense_to_coo(d))
}

/// Checks that a dense input to buffer `buffer` holds exactly as many values as its shape.
pub fn check_dense_len(buffer: &str, d: &DenseArray) -> Result<(), BindError> {
    let expected = d
        .shape
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b))
        .ok_or_else(|| BindError::TooLarge {
            buffer: buffer.to_string(),
        })?;
    if d.data.len() != expected {
        return Err(BindError::Length {
            buffer: buffer.to_string(),
            array: "values".into(),
            expected,
            found: d.data.len(),
        });
    }
    Ok(())
}

fn dense_to_coo(d: &DenseArray) -> CooTensor {
    let rank = d.shape.len();
    let mut coords = vec![Vec::new(); rank];
    let mut vals = Vec::new();
    let mut idx = vec![0usize; rank];
    for flat in 0..d.data.len() {
        let v = d.data.get(flat).unwrap_or(Scalar::F64(0.0));
        if v.as_f64() != 0.0 {
            for (dim, &c) in idx.iter().enumerate() {
                coords[dim].push(c);
            }
            vals.push(v);
        }
        for dim in (0..rank).rev() {
            idx[dim] += 1;
            if idx[dim] < d.shape[dim] {
                break;
            }
            idx[dim] = 0;
        }
    }
    let mut values = ArrayData::zeros(d.data.dtype(), vals.len());
    for (i, v) in vals.into_iter().enumerate() {
        values.set(i, v);
    }
    CooTensor {
        shape: d.shape.clone(),
        coords,
        values,
    }
}

/// The entries of a coordinate input to buffer `buffer` as a dense array (duplicates summed in
/// the values' type); an error for an entry outside the shape, coordinates or values fewer than
/// the entries, or a shape this machine cannot hold.
pub fn dense_of_coo(buffer: &str, c: &CooTensor) -> Result<DenseArray, BindError> {
    let too_large = || BindError::TooLarge {
        buffer: buffer.to_string(),
    };
    let len = c
        .shape
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b))
        .ok_or_else(too_large)?;
    let nnz = c.nnz();
    if c.coords.len() < c.shape.len() {
        return Err(BindError::Rank {
            buffer: buffer.to_string(),
            expected: c.shape.len(),
            found: c.coords.len(),
        });
    }
    for (dim, crd) in c.coords.iter().enumerate().take(c.shape.len()) {
        if crd.len() < nnz {
            return Err(BindError::Length {
                buffer: buffer.to_string(),
                array: format!("coordinates of dimension {dim}"),
                expected: nnz,
                found: crd.len(),
            });
        }
    }
    let mut data = ArrayData::try_zeros(c.values.dtype(), len).ok_or_else(too_large)?;
    for e in 0..nnz {
        let mut off = 0usize;
        for (dim, &ext) in c.shape.iter().enumerate() {
            let x = c.coords[dim][e];
            if x >= ext {
                return Err(BindError::CoordRange {
                    buffer: buffer.to_string(),
                    dim,
                    coord: x,
                    extent: ext,
                });
            }
            off = off * ext + x;
        }
        if let (Some(old), Some(v)) = (data.get(off), c.values.get(e)) {
            data.set(off, crate::interp::eval_binop(crate::BinOp::Add, old, v));
        }
    }
    Ok(DenseArray {
        shape: c.shape.clone(),
        data,
    })
}

fn index_array(
    ty: IndexType,
    v: Vec<i64>,
    buffer: &str,
    axis: &str,
) -> Result<ArrayData, BindError> {
    Ok(match ty {
        IndexType::I64 => ArrayData::I64(v),
        IndexType::I32 => ArrayData::I32(
            v.into_iter()
                .map(i32::try_from)
                .collect::<Result<_, _>>()
                .map_err(|_| BindError::Structure {
                    buffer: buffer.into(),
                    axis: axis.into(),
                    reason: "an index does not fit in i32; declare the axis with idtype: I64"
                        .into(),
                })?,
        ),
    })
}

/// Packs sorted, de-duplicated entries into the structure of `axes`; returns per-entry offsets
/// into the values array and the values array length.
fn pack(
    b: &mut Binder<'_>,
    buffer: &str,
    axes: &[String],
    coo: &CooTensor,
) -> Result<(Vec<usize>, usize), BindError> {
    let n = coo.nnz();
    let mut offs = vec![0usize; n];
    let mut len = 1usize;
    for (d, ax) in axes.iter().enumerate() {
        let axis = b.axis(ax).clone();
        let coords = &coo.coords[d];
        let tl = || BindError::TooLarge {
            buffer: buffer.to_string(),
        };
        match &axis.kind {
            AxisKind::DenseFixed { .. } => {
                let ext = coo.shape[d];
                for e in 0..n {
                    offs[e] = offs[e]
                        .checked_mul(ext)
                        .and_then(|o| o.checked_add(coords[e]))
                        .ok_or_else(tl)?;
                }
                len = len.checked_mul(ext).ok_or_else(tl)?;
            }
            AxisKind::SparseVariable { nnz, .. } | AxisKind::DenseVariable { nnz, .. } => {
                let mut counts = vec![0i64; len + 1];
                let mut indices = Vec::new();
                let mut last: Option<(usize, usize)> = None;
                let mut pos = 0usize;
                for e in 0..n {
                    let key = (offs[e], coords[e]);
                    if last != Some(key) {
                        if last.is_some() {
                            pos += 1;
                        }
                        counts[offs[e] + 1] += 1;
                        indices.push(coords[e] as i64);
                        last = Some(key);
                    }
                    offs[e] = pos;
                }
                let stored = indices.len();
                let mut indptr = counts;
                for i in 1..indptr.len() {
                    indptr[i] += indptr[i - 1];
                }
                if matches!(axis.kind, AxisKind::DenseVariable { .. }) {
                    for seg in 0..len {
                        let (s, t) = (indptr[seg] as usize, indptr[seg + 1] as usize);
                        for (k, &c) in indices[s..t].iter().enumerate() {
                            if c as usize != k {
                                return Err(BindError::Structure {
                                    buffer: buffer.into(),
                                    axis: ax.clone(),
                                    reason: format!("a ragged (dense_variable) axis stores each segment as a prefix 0..len, but segment {seg} stores coordinate {c} at position {k}"),
                                });
                            }
                        }
                    }
                }
                // A loose axis stores each segment as a (lo, hi) pair.
                let indptr = if axis.kind.is_loose() {
                    (0..len).flat_map(|s| [indptr[s], indptr[s + 1]]).collect()
                } else {
                    indptr
                };
                let data = AxisData {
                    indptr: Some(index_array(axis.idtype, indptr, buffer, ax)?),
                    indices: if axis.kind.has_indices() {
                        Some(index_array(axis.idtype, indices, buffer, ax)?)
                    } else {
                        None
                    },
                };
                b.bind_size(nnz, stored, &format!("input `{buffer}`"))?;
                set_axis(b, ax, data, buffer)?;
                len = stored;
            }
            AxisKind::SparseFixed { nnz_cols, .. } => {
                let width =
                    size_value(nnz_cols, &b.params).ok_or_else(|| BindError::UnboundParam {
                        param: nnz_cols.to_string(),
                    })? as usize;
                let mut per_seg = vec![Vec::new(); len];
                let mut last: Option<(usize, usize)> = None;
                let mut entry_seg_rank = vec![(0usize, 0usize); n];
                for e in 0..n {
                    let key = (offs[e], coords[e]);
                    if last != Some(key) {
                        per_seg[offs[e]].push(coords[e] as i64);
                        last = Some(key);
                    }
                    entry_seg_rank[e] = (offs[e], per_seg[offs[e]].len() - 1);
                }
                if let Some((seg, v)) = per_seg.iter().enumerate().find(|(_, v)| v.len() != width) {
                    return Err(BindError::Structure {
                        buffer: buffer.into(),
                        axis: ax.clone(),
                        reason: format!("sparse_fixed stores exactly {width} entries per segment, but segment {seg} has {}", v.len()),
                    });
                }
                for e in 0..n {
                    let (seg, rank) = entry_seg_rank[e];
                    offs[e] = seg * width + rank;
                }
                let indices: Vec<i64> = per_seg.into_iter().flatten().collect();
                set_axis(
                    b,
                    ax,
                    AxisData {
                        indptr: None,
                        indices: Some(index_array(axis.idtype, indices, buffer, ax)?),
                    },
                    buffer,
                )?;
                len = len.checked_mul(width).ok_or_else(tl)?;
            }
            AxisKind::Attached { .. } => {
                // Verification rejects buffers over attached axes; data built elsewhere may not.
                return Err(BindError::Structure {
                    buffer: buffer.into(),
                    axis: ax.clone(),
                    reason: "an attached axis owns no storage and cannot be a buffer axis".into(),
                });
            }
        }
    }
    Ok((offs, len))
}

fn set_axis(b: &mut Binder<'_>, ax: &str, data: AxisData, buffer: &str) -> Result<(), BindError> {
    match b.axes.get(ax) {
        Some(existing) if *existing != data => Err(BindError::PatternMismatch {
            axis: ax.to_string(),
            buffer: buffer.to_string(),
        }),
        Some(_) => Ok(()),
        None => {
            b.axes.insert(ax.to_string(), data);
            Ok(())
        }
    }
}

/// Binds user inputs (by buffer name) and explicit parameter values to a verified program.
pub fn bind(
    p: &Program,
    inputs: &BTreeMap<String, Input>,
    params: &BTreeMap<String, i64>,
) -> Result<Bindings, BindError> {
    bind_with(p, inputs, params, Bindings::default())
}

/// Like [`bind`], starting from data built elsewhere (e.g. the parts a format decomposition's
/// conversion built): its parameters, axis structure and buffers are taken as given, its
/// buffers need no input, and everything is validated together.
pub fn bind_with(
    p: &Program,
    inputs: &BTreeMap<String, Input>,
    params: &BTreeMap<String, i64>,
    given: Bindings,
) -> Result<Bindings, BindError> {
    let sources = given
        .params
        .keys()
        .map(|k| (k.clone(), "the format conversion".to_string()))
        .collect();
    let mut b = Binder {
        p,
        params: given.params,
        sources,
        axes: given.axes,
        buffers: given.buffers,
    };
    for (k, v) in params {
        if *v < 0 {
            return Err(BindError::NegativeParam {
                param: k.clone(),
                value: *v,
            });
        }
        if let Some(&built) = b.params.get(k).filter(|&&built| built != *v) {
            return Err(BindError::ShapeMismatch {
                param: k.clone(),
                first: built,
                first_source: "the format conversion".into(),
                second: *v,
                second_source: "--param".into(),
            });
        }
        b.params.insert(k.clone(), *v);
        b.sources.insert(k.clone(), "--param".into());
    }
    if let Some(name) = inputs.keys().find(|name| b.buffers.contains_key(*name)) {
        return Err(BindError::Converted { name: name.clone() });
    }
    let input_names: Vec<&str> = p
        .buffers
        .iter()
        .filter(|x| x.role == Role::Input)
        .map(|x| x.name.as_str())
        .collect();
    for name in inputs.keys() {
        if !input_names.contains(&name.as_str()) {
            return Err(BindError::UnknownInput {
                name: name.clone(),
                kernel: p.name.clone(),
                known: input_names.join(", "),
            });
        }
    }
    // Dense inputs first, so that sizes such as a sparse_fixed width are known when packing.
    let mut order: Vec<&crate::ir::Buffer> =
        p.buffers.iter().filter(|x| x.role == Role::Input).collect();
    order.sort_by_key(|buf| {
        buf.axes
            .iter()
            .any(|a| p.axis(a).is_some_and(|x| x.kind.parent().is_some()))
    });
    for buf in order {
        if b.buffers.contains_key(&buf.name) {
            // Built by the conversion (an input may not replace it, see above).
            continue;
        }
        let input = inputs
            .get(&buf.name)
            .ok_or_else(|| BindError::MissingInput {
                buffer: buf.name.clone(),
            })?;
        if let Input::Dense(d) = input {
            // Stored sparse, its values would otherwise wrap onto other coordinates.
            check_dense_len(&buf.name, d)?;
        }
        if !buf.dims.is_empty() {
            let values = bind_encoded(&mut b, buf, input)?;
            b.buffers.insert(buf.name.clone(), values);
            continue;
        }
        let shape = input.shape();
        if shape.len() != buf.axes.len() {
            return Err(BindError::Rank {
                buffer: buf.name.clone(),
                expected: buf.axes.len(),
                found: shape.len(),
            });
        }
        let source = format!("input `{}` dimension", buf.name);
        for (d, ax) in buf.axes.iter().enumerate() {
            let ext = b.axis(ax).kind.coord_extent().clone();
            b.bind_size(&ext, shape[d], &format!("{source} {d}"))?;
        }
        let structured = buf.axes.iter().any(|a| b.axis(a).kind.parent().is_some());
        let values = if structured {
            let mut coo = input.entries().into_owned();
            for (dim, &ext) in coo.shape.iter().enumerate() {
                if let Some(&x) = coo.coords[dim].iter().find(|&&x| x >= ext) {
                    return Err(BindError::CoordRange {
                        buffer: buf.name.clone(),
                        dim,
                        coord: x,
                        extent: ext,
                    });
                }
            }
            coo.sort_and_sum_duplicates();
            let (offs, len) = pack(&mut b, &buf.name, &buf.axes, &coo)?;
            let vals = check_values(&buf.name, &coo.values, buf.dtype)?;
            let mut out = alloc(&buf.name, buf.dtype, len, buf.extra_storage)?;
            for (e, &o) in offs.iter().enumerate() {
                out.set(o, vals.get(e).unwrap_or(Scalar::F64(0.0)));
            }
            out
        } else {
            let dense = input.dense(&buf.name)?;
            let mut vals = check_values(&buf.name, &dense.data, buf.dtype)?;
            if buf.extra_storage > 0 {
                let mut grown =
                    ArrayData::zeros(buf.dtype, vals.len() + buf.extra_storage as usize);
                for i in 0..vals.len() {
                    grown.set(i, vals.get(i).unwrap_or(Scalar::F64(0.0)));
                }
                vals = grown;
            }
            vals
        };
        b.buffers.insert(buf.name.clone(), values);
    }
    for name in &p.params {
        if !b.params.contains_key(name) {
            return Err(BindError::UnboundParam {
                param: name.clone(),
            });
        }
    }
    let mut bindings = Bindings {
        params: b.params,
        axes: b.axes,
        buffers: b.buffers,
    };
    for buf in p.buffers.iter().filter(|x| x.role != Role::Input) {
        let len = buffer_len(p, &bindings, &buf.name)?;
        bindings.buffers.insert(
            buf.name.clone(),
            alloc(&buf.name, buf.dtype, len, buf.extra_storage)?,
        );
    }
    validate(p, &bindings)?;
    Ok(bindings)
}

/// A zero-filled buffer of `len + extra` elements, or an error when memory cannot be had.
fn alloc(buffer: &str, dtype: DType, len: usize, extra: u64) -> Result<ArrayData, BindError> {
    let too_large = || BindError::TooLarge {
        buffer: buffer.to_string(),
    };
    let total = usize::try_from(extra)
        .ok()
        .and_then(|e| len.checked_add(e))
        .ok_or_else(too_large)?;
    ArrayData::try_zeros(dtype, total).ok_or_else(too_large)
}

/// Number of positions of an axis (the length of its level), from its structure.
pub fn axis_len(p: &Program, bindings: &Bindings, axis: &str) -> Result<usize, BindError> {
    axis_len_of(p, bindings, axis)
}

pub(crate) fn axis_len_of(
    p: &Program,
    bindings: &dyn Structure,
    axis: &str,
) -> Result<usize, BindError> {
    let a = p
        .axis(axis)
        .expect("verified programs name only declared axes");
    let no_structure = || BindError::NoStructure {
        axis: axis.to_string(),
        why: "its length is needed".into(),
    };
    match &a.kind {
        AxisKind::DenseFixed { n } => {
            Ok(
                size_value(n, bindings.params()).ok_or_else(|| BindError::UnboundParam {
                    param: n.to_string(),
                })? as usize,
            )
        }
        AxisKind::SparseVariable { loose: true, .. } => {
            Ok(bindings.indices(axis).ok_or_else(no_structure)?.len())
        }
        AxisKind::DenseVariable { .. } | AxisKind::SparseVariable { .. } => {
            let ip = bindings.indptr(axis).ok_or_else(no_structure)?;
            Ok(ip
                .get(ip.len().saturating_sub(1))
                .map_or(0, |s| s.as_i64().max(0) as usize))
        }
        AxisKind::SparseFixed { .. } => Ok(bindings.indices(axis).ok_or_else(no_structure)?.len()),
        // An attached axis visits the positions of its base.
        AxisKind::Attached { base, .. } => axis_len_of(p, bindings, base),
    }
}

/// Number of stored values of a buffer (without extra storage).
pub fn buffer_len(p: &Program, bindings: &Bindings, buffer: &str) -> Result<usize, BindError> {
    buffer_len_of(p, bindings, buffer)
}

pub(crate) fn buffer_len_of(
    p: &Program,
    bindings: &dyn Structure,
    buffer: &str,
) -> Result<usize, BindError> {
    let buf = p
        .buffer(buffer)
        .expect("verified programs name only declared buffers");
    let mut len = 1usize;
    for ax in &buf.axes {
        let a = p.axis(ax).expect("verified");
        let l = axis_len_of(p, bindings, ax)?;
        len = if a.kind.parent().is_some() {
            l
        } else {
            len.checked_mul(l).ok_or(BindError::TooLarge {
                buffer: buffer.into(),
            })?
        };
    }
    Ok(len)
}

/// Checks that every bound input declared `coordinates_of` an axis holds only coordinates of
/// it: kernels index dense axes of that extent with its values unchecked.
fn validate_coordinates(p: &Program, bindings: &dyn Structure) -> Result<(), BindError> {
    for buf in &p.buffers {
        let Some(axis) = &buf.coordinates_of else {
            continue;
        };
        let Some(values) = bindings.values(&buf.name) else {
            continue;
        };
        // Verification refuses both; an unverified program gets the error here.
        let refused = |reason: &str| BindError::Structure {
            buffer: buf.name.clone(),
            axis: axis.clone(),
            reason: format!("coordinates_of: {reason}"),
        };
        let a = p.axis(axis).ok_or_else(|| refused("no such axis"))?;
        let extent = size_value(a.kind.coord_extent(), bindings.params()).ok_or_else(|| {
            BindError::UnboundParam {
                param: a.kind.coord_extent().to_string(),
            }
        })?;
        let outside = |v: i64| v < 0 || v >= extent;
        let bad = match values {
            ArrayView::I64(v) => v.iter().position(|&x| outside(x)),
            ArrayView::I32(v) => v.iter().position(|&x| outside(x.into())),
            ArrayView::I8(v) => v.iter().position(|&x| outside(x.into())),
            ArrayView::F32(_) | ArrayView::F64(_) => {
                return Err(refused("only integer buffers hold coordinates"))
            }
        };
        if let Some(position) = bad {
            let value = values.get(position).map_or(0, Scalar::as_i64);
            return Err(BindError::NotCoordinate {
                buffer: buf.name.clone(),
                axis: axis.clone(),
                position,
                value,
                extent,
            });
        }
        if buf.permutation {
            // Every value is in `0..extent` (checked above): each once, and as many as the
            // extent.
            let not = |reason: String| BindError::NotPermutation {
                buffer: buf.name.clone(),
                axis: axis.clone(),
                extent,
                reason,
            };
            if i64::try_from(values.len()).ok() != Some(extent) {
                return Err(not(format!("{} values", values.len())));
            }
            let mut seen = vec![false; values.len()];
            for position in 0..values.len() {
                let v = values.get(position).map_or(0, Scalar::as_i64);
                let slot = usize::try_from(v).ok().and_then(|v| seen.get_mut(v));
                match slot {
                    Some(s) if !*s => *s = true,
                    _ => return Err(not(format!("{v} again at position {position}"))),
                }
            }
        }
    }
    Ok(())
}

/// Checks each axis's [`Tiles`](crate::Tiles) assertion against the bound sizes: its coordinate
/// extent times the factor within the tiled extent (kernels index the tiled axis without a
/// range check). Sizes not bound are left to the kernels, which refuse to run without them.
fn validate_tiles(p: &Program, params: &BTreeMap<String, i64>) -> Result<(), BindError> {
    for a in &p.axes {
        let Some(t) = &a.tiles else {
            continue;
        };
        let (Some(extent), Some(tiled)) = (
            size_value(a.kind.coord_extent(), params),
            size_value(&t.extent, params),
        ) else {
            continue;
        };
        let covered = i64::try_from(t.factor)
            .ok()
            .and_then(|f| extent.checked_mul(f));
        if covered.is_none_or(|c| c > tiled) {
            return Err(BindError::Tiles {
                axis: a.name.clone(),
                extent,
                factor: t.factor,
                tiled: t.extent.to_string(),
                tiled_extent: tiled,
            });
        }
    }
    Ok(())
}

/// Checks bindings against the program, as every kernel built from it assumes: each structure
/// array against the parameters (lengths, monotone `indptr` starting at zero, coordinates in
/// range, sorted and unique where the axis says so), coordinate buffers in range, and each
/// bound buffer's length against its axes (plus its extra storage).
///
/// Buffers and axes left unbound are not errors here: the kernels that read them refuse to run.
pub fn validate(p: &Program, bindings: &Bindings) -> Result<(), BindError> {
    validate_structure(p, bindings)?;
    for buf in &p.buffers {
        let Some(values) = bindings.buffers.get(&buf.name) else {
            continue;
        };
        // A bound buffer needs the structure of its axes: its length, which the kernel's
        // accesses reach, follows from it (loops over a fixed-width axis load no array that
        // would be missing).
        let len = buffer_len_of(p, bindings, &buf.name)?;
        let expected = usize::try_from(buf.extra_storage)
            .ok()
            .and_then(|extra| len.checked_add(extra))
            .ok_or_else(|| BindError::TooLarge {
                buffer: buf.name.clone(),
            })?;
        if values.len() != expected {
            return Err(BindError::Length {
                buffer: buf.name.clone(),
                array: "values".into(),
                expected,
                found: values.len(),
            });
        }
    }
    Ok(())
}

pub(crate) fn validate_structure(p: &Program, bindings: &dyn Structure) -> Result<(), BindError> {
    validate_coordinates(p, bindings)?;
    validate_tiles(p, bindings.params())?;
    for a in &p.axes {
        let Some(parent) = a.kind.parent() else {
            continue;
        };
        if matches!(a.kind, AxisKind::Attached { .. }) {
            // No storage of its own: its base's structure is validated under the base.
            continue;
        }
        let bad = |reason: String| BindError::Structure {
            buffer: "(structure)".into(),
            axis: a.name.clone(),
            reason,
        };
        if !bindings.has_axis(&a.name) {
            if let Some(form) = a.closed_forms.first() {
                // The kernel computes the array instead of loading it, so nothing would fail
                // later: the data it stands for must be bound and checked here.
                return Err(bad(format!(
                    "no structure bound; specialize_buffer asserts a closed form for its `{}`, which is checked against the bound array",
                    form.array()
                )));
            }
            // Axes that nothing iterates or stores over may stay unbound: compiled code that
            // loads their arrays refuses to run without them.
            continue;
        }
        let (indptr, indices) = (bindings.indptr(&a.name), bindings.indices(&a.name));
        let parent_len = axis_len_of(p, bindings, parent)?;
        let ext = size_value(a.kind.coord_extent(), bindings.params()).ok_or_else(|| {
            BindError::UnboundParam {
                param: a.kind.coord_extent().to_string(),
            }
        })?;
        let segments: Vec<(usize, usize)> = match &a.kind {
            AxisKind::SparseVariable {
                loose: true, nnz, ..
            } => {
                let ip = indptr
                    .ok_or_else(|| bad("missing positions".into()))?
                    .to_i64_vec();
                let n_crd = indices.as_ref().map_or(0, ArrayView::len) as i64;
                if ip.len() != 2 * parent_len {
                    return Err(bad(format!(
                        "a loose axis has {} positions, expected {} (two per parent position)",
                        ip.len(),
                        2 * parent_len
                    )));
                }
                if let Some(v) = size_value(nnz, bindings.params()) {
                    if v != n_crd {
                        return Err(bad(format!("{n_crd} coordinates but nnz `{nnz}` is {v}")));
                    }
                }
                let mut segs = Vec::with_capacity(parent_len);
                for s in 0..parent_len {
                    let (lo, hi) = (ip[2 * s], ip[2 * s + 1]);
                    if lo < 0 || lo > hi || hi > n_crd {
                        return Err(bad(format!(
                            "segment {s} is ({lo}, {hi}), outside 0..={n_crd} or reversed"
                        )));
                    }
                    segs.push((lo as usize, hi as usize));
                }
                segs
            }
            AxisKind::DenseVariable { nnz, .. } | AxisKind::SparseVariable { nnz, .. } => {
                let ip = indptr
                    .ok_or_else(|| bad("missing indptr".into()))?
                    .to_i64_vec();
                if ip.len() != parent_len + 1 {
                    return Err(bad(format!(
                        "indptr has {} entries, expected {} (parent length + 1)",
                        ip.len(),
                        parent_len + 1
                    )));
                }
                if ip[0] != 0 {
                    return Err(bad(format!("indptr[0] is {}, expected 0", ip[0])));
                }
                if let Some(i) = (1..ip.len()).find(|&i| ip[i] < ip[i - 1]) {
                    return Err(bad(format!(
                        "indptr is not monotone at {i} ({} after {})",
                        ip[i],
                        ip[i - 1]
                    )));
                }
                let last = ip[ip.len() - 1];
                if let Some(v) = size_value(nnz, bindings.params()) {
                    if v != last {
                        return Err(bad(format!("indptr ends at {last} but nnz `{nnz}` is {v}")));
                    }
                }
                if let Some(ind) = &indices {
                    if ind.len() as i64 != last {
                        return Err(bad(format!(
                            "indices has {} entries, indptr ends at {last}",
                            ind.len()
                        )));
                    }
                }
                (0..parent_len)
                    .map(|s| (ip[s] as usize, ip[s + 1] as usize))
                    .collect()
            }
            AxisKind::SparseFixed { nnz_cols, .. } => {
                let w = size_value(nnz_cols, bindings.params()).unwrap_or(0).max(0) as usize;
                let n = indices.as_ref().map_or(0, ArrayView::len);
                if n != parent_len * w {
                    return Err(bad(format!(
                        "indices has {n} entries, expected {parent_len} segments × {w}"
                    )));
                }
                (0..parent_len).map(|s| (s * w, (s + 1) * w)).collect()
            }
            AxisKind::DenseFixed { .. } | AxisKind::Attached { .. } => continue,
        };
        for form in &a.closed_forms {
            let mismatch = |position: usize, expected: i64, found: i64| BindError::ClosedForm {
                axis: a.name.clone(),
                array: form.array(),
                position,
                expected,
                found,
            };
            match *form {
                crate::ir::ClosedForm::Indptr { stride } => {
                    // Variable axes have required their `indptr` above.
                    let ip = bindings.indptr(&a.name).map(|x| x.to_i64_vec());
                    for (i, &v) in ip.iter().flatten().enumerate() {
                        let want = stride.wrapping_mul(i as i64);
                        if v != want {
                            return Err(mismatch(i, want, v));
                        }
                    }
                }
                crate::ir::ClosedForm::Indices {
                    row,
                    in_row,
                    constant,
                } => {
                    let Some(ind) = indices.as_ref().map(ArrayView::to_i64_vec) else {
                        // The kernel would compute coordinates that no range check saw.
                        return Err(bad("missing indices; specialize_buffer asserts a closed form for them, which is checked against the bound array".into()));
                    };
                    for (seg, &(s, t)) in segments.iter().enumerate() {
                        for (q, &found) in ind.iter().enumerate().take(t).skip(s) {
                            let want = row
                                .wrapping_mul(seg as i64)
                                .wrapping_add(in_row.wrapping_mul((q - s) as i64))
                                .wrapping_add(constant);
                            if found != want {
                                return Err(mismatch(q, want, found));
                            }
                        }
                    }
                }
            }
        }
        // A dense variable axis's coordinate is the position within its segment, used
        // unchecked on a dense axis of the same extent: extra indices do not replace this.
        if matches!(a.kind, AxisKind::DenseVariable { .. }) || indices.is_none() {
            if let Some((seg, &(s, t))) = segments
                .iter()
                .enumerate()
                .find(|(_, &(s, t))| (t - s) as i64 > ext)
            {
                return Err(bad(format!(
                    "segment {seg} has length {} > max_len {ext}",
                    t - s
                )));
            }
        }
        if let Some(ind) = &indices {
            let checked = match ind {
                ArrayView::I8(v) => check_coordinates(v, &segments, ext, a.sorted),
                ArrayView::I32(v) => check_coordinates(v, &segments, ext, a.sorted),
                ArrayView::I64(v) => check_coordinates(v, &segments, ext, a.sorted),
                ArrayView::F32(_) | ArrayView::F64(_) => {
                    check_coordinates(&ind.to_i64_vec(), &segments, ext, a.sorted)
                }
            };
            checked.map_err(bad)?;
        }
    }
    Ok(())
}

/// Checks the coordinates `ind` holds in each segment: within `0..ext`, and strictly increasing
/// where `sorted`. Generic over the stored integer type, so that no converted copy is made: the
/// Python binding validates every call's arrays.
fn check_coordinates<T: CoordScan>(
    ind: &[T],
    segments: &[(usize, usize)],
    ext: i64,
    sorted: bool,
) -> Result<(), String> {
    // Segments that tile the array in order (every axis but a loose one): two branch-free
    // passes over the whole array, which vectorize; the rows are short.
    let tiles = segments.first().map_or(0, |s| s.0) == 0
        && segments.windows(2).all(|w| w[0].1 == w[1].0)
        && segments.last().map_or(0, |s| s.1) == ind.len();
    if tiles && ext >= 0 && tiled_coordinates_ok(ind, segments, ext, sorted) {
        return Ok(());
    }
    // Find what failed, segment by segment.
    for (seg, &(s, t)) in segments.iter().enumerate() {
        let Some(row) = ind.get(s..t) else {
            return Err(format!(
                "segment {seg} is ({s}, {t}), past the {} coordinates",
                ind.len()
            ));
        };
        let mut prev = i64::MIN;
        for (k, &x) in row.iter().enumerate() {
            let x: i64 = x.into();
            let q = s + k;
            if x < 0 || x >= ext {
                return Err(format!(
                    "coordinate {x} at position {q} is out of range 0..{ext}"
                ));
            }
            if sorted && x <= prev {
                return Err(format!("coordinates of segment {seg} are not strictly increasing at position {q} (declare the axis `sorted: false` for unsorted input)"));
            }
            prev = x;
        }
    }
    Ok(())
}

/// Whether `ind`, split into `segments` that tile it in order, holds coordinates within
/// `0..ext` (`ext >= 0`), strictly increasing in each segment where `sorted`: compiled for
/// AVX2 where the CPU has it, in lanes of the stored width. The baseline x86-64 has no 64-bit
/// vector compare: with 32-bit indices widened to 64 bits, this check took a quarter of a
/// Python call of SpMV on cage10 (0.24 ms, against 0.04 for the kernel).
fn tiled_coordinates_ok<T: CoordScan>(
    ind: &[T],
    segments: &[(usize, usize)],
    ext: i64,
    sorted: bool,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (just checked).
        return unsafe { tiled_coordinates_ok_avx2(ind, segments, ext, sorted) };
    }
    tiled_coordinates_scan(ind, segments, ext, sorted)
}

/// [`tiled_coordinates_scan`] compiled for AVX2.
///
/// # Safety
///
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tiled_coordinates_ok_avx2<T: CoordScan>(
    ind: &[T],
    segments: &[(usize, usize)],
    ext: i64,
    sorted: bool,
) -> bool {
    tiled_coordinates_scan(ind, segments, ext, sorted)
}

/// Branch-free passes over `ind`, which vectorize: the largest coordinate (as unsigned, so that
/// a negative one is larger still) below `ext`, and (where `sorted`) as many falls between
/// neighbours as segments that start with one, the only places a sorted array may fall.
#[inline(always)]
fn tiled_coordinates_scan<T: CoordScan>(
    ind: &[T],
    segments: &[(usize, usize)],
    ext: i64,
    sorted: bool,
) -> bool {
    let in_range = ind.is_empty() || T::max_unsigned(ind) < ext;
    let ordered = !sorted || {
        let at_starts = segments
            .iter()
            .filter(|&&(s, t)| s > 0 && s < t && ind[s].into() <= ind[s - 1].into())
            .count();
        T::falls(ind) == at_starts
    };
    in_range && ordered
}

/// Coordinate scans in lanes of the stored width.
trait CoordScan: Copy + Into<i64> {
    /// The largest value with the bits read as unsigned, as `i64`; `i64::MAX` where that is
    /// a negative value's (out of range of any extent).
    fn max_unsigned(v: &[Self]) -> i64;
    /// How many `i` have `v[i + 1] <= v[i]`.
    fn falls(v: &[Self]) -> usize;
}

macro_rules! coord_scan {
    ($t:ty, $u:ty, $count:ty) => {
        impl CoordScan for $t {
            #[inline(always)]
            fn max_unsigned(v: &[$t]) -> i64 {
                let m = v.iter().fold(0 as $u, |m, &x| m.max(x as $u));
                // Above the signed maximum: a negative value.
                if m > <$t>::MAX as $u {
                    i64::MAX
                } else {
                    m as i64
                }
            }

            #[inline(always)]
            fn falls(v: &[$t]) -> usize {
                // Counted in lanes of the stored width, in blocks short enough not to wrap.
                const BLOCK: usize = 1 << 24;
                let pairs = v.len().saturating_sub(1);
                (0..pairs)
                    .step_by(BLOCK)
                    .map(|s| {
                        let e = (s + BLOCK).min(pairs);
                        v[s..e]
                            .iter()
                            .zip(&v[s + 1..e + 1])
                            .fold(0 as $count, |n, (&a, &b)| n + <$count>::from(b <= a))
                            as usize
                    })
                    .sum()
            }
        }
    };
}
coord_scan!(i8, u8, u32);
coord_scan!(i32, u32, u32);
coord_scan!(i64, u64, u64);

/// Calls `f(coords, offset)` for every stored position of a buffer, in storage order.
pub fn for_each_stored(
    p: &Program,
    bindings: &Bindings,
    buffer: &str,
    f: &mut dyn FnMut(&[usize], usize),
) -> Result<(), BindError> {
    let buf = p
        .buffer(buffer)
        .expect("verified programs name only declared buffers");
    let mut levels = Vec::new();
    for ax in &buf.axes {
        let a = p.axis(ax).expect("verified").clone();
        let data = bindings.axes.get(ax).cloned();
        if a.kind.parent().is_some() && data.is_none() {
            return Err(BindError::NoStructure {
                axis: ax.clone(),
                why: format!("buffer `{buffer}` is stored over it"),
            });
        }
        let ext = axis_len(p, bindings, ax)?;
        levels.push((
            a,
            data.map(|d| {
                (
                    d.indptr.map(|x| x.to_i64_vec()),
                    d.indices.map(|x| x.to_i64_vec()),
                )
            }),
            ext,
        ));
    }
    let mut coords = vec![0usize; levels.len()];
    walk(&levels, 0, 0, &mut coords, f);
    Ok(())
}

type Level = (Axis, Option<(Option<Vec<i64>>, Option<Vec<i64>>)>, usize);

fn walk(
    levels: &[Level],
    d: usize,
    off: usize,
    coords: &mut Vec<usize>,
    f: &mut dyn FnMut(&[usize], usize),
) {
    if d == levels.len() {
        f(coords, off);
        return;
    }
    let (axis, data, ext) = &levels[d];
    match &axis.kind {
        AxisKind::DenseFixed { .. } => {
            for c in 0..*ext {
                coords[d] = c;
                walk(levels, d + 1, off * ext + c, coords, f);
            }
        }
        AxisKind::DenseVariable { .. }
        | AxisKind::SparseVariable { .. }
        | AxisKind::SparseFixed { .. } => {
            let Some((indptr, indices)) = data else {
                return;
            };
            let (s, t) = match (&axis.kind, indptr) {
                (AxisKind::SparseFixed { .. }, _) => {
                    let w = indices.as_ref().map_or(0, Vec::len) / levels[d - 1].2.max(1);
                    (off * w, off * w + w)
                }
                (kind, Some(ip)) => {
                    let (lo, hi) = kind.segment_slots(off);
                    (ip[lo] as usize, ip[hi] as usize)
                }
                (_, None) => return,
            };
            for q in s..t {
                coords[d] = match indices {
                    Some(ind) => ind[q] as usize,
                    None => q - s,
                };
                walk(levels, d + 1, q, coords, f);
            }
        }
        // Never a buffer axis (verified): nothing is stored under it.
        AxisKind::Attached { .. } => {}
    }
}

/// Reads a buffer back in the user's terms: dense arrays for buffers over dense axes only,
/// coordinate tensors otherwise.
pub fn unpack(p: &Program, bindings: &Bindings, buffer: &str) -> Result<Output, BindError> {
    let buf = p
        .buffer(buffer)
        .expect("verified programs name only declared buffers");
    let values = bindings
        .buffers
        .get(buffer)
        .ok_or_else(|| BindError::MissingInput {
            buffer: buffer.to_string(),
        })?;
    let dim_axes = if buf.dims.is_empty() {
        &buf.axes
    } else {
        &buf.dims
    };
    let shape: Vec<usize> = dim_axes
        .iter()
        .map(|ax| {
            let a = p.axis(ax).expect("verified");
            size_value(a.kind.coord_extent(), &bindings.params)
                .map(|v| v.max(0) as usize)
                .ok_or_else(|| BindError::UnboundParam {
                    param: a.kind.coord_extent().to_string(),
                })
        })
        .collect::<Result<_, _>>()?;
    let structured = buf
        .axes
        .iter()
        .any(|a| p.axis(a).is_some_and(|x| x.kind.parent().is_some()));
    let len = buffer_len(p, bindings, buffer)?;
    if !structured {
        let mut data = ArrayData::zeros(buf.dtype, len);
        for i in 0..len {
            data.set(i, values.get(i).unwrap_or(Scalar::F64(0.0)));
        }
        return Ok(Output::Dense(DenseArray { shape, data }));
    }
    let mut coords: Vec<Vec<usize>> = vec![Vec::new(); shape.len()];
    let mut offs = Vec::new();
    // Encoded buffers store level coordinates: map them back to dimensions, dropping the
    // padding of blocks that reach past the dimension sizes.
    let enc = crate::sparsify::buffer_encoding(buf)
        .ok()
        .flatten()
        .filter(|_| !buf.dims.is_empty());
    let rooted = enc
        .as_ref()
        .is_some_and(|e| buf.axes.len() == e.lvl_rank() + 1);
    for_each_stored(p, bindings, buffer, &mut |c, off| {
        let dims: Vec<usize> = match &enc {
            None => c.to_vec(),
            Some(e) => {
                let lvl = &c[usize::from(rooted)..];
                (0..e.dim_rank())
                    .map(|d| {
                        eval_affine(e.lvl_to_dim(lacuna_ir::encoding::Dim(d as u32)), lvl).max(0)
                            as usize
                    })
                    .collect()
            }
        };
        if dims.iter().zip(&shape).any(|(x, n)| x >= n) {
            return;
        }
        for (d, &x) in dims.iter().enumerate() {
            coords[d].push(x);
        }
        offs.push(off);
    })?;
    let mut vals = ArrayData::zeros(buf.dtype, offs.len());
    for (e, &o) in offs.iter().enumerate() {
        vals.set(e, values.get(o).unwrap_or(Scalar::F64(0.0)));
    }
    Ok(Output::Coo(CooTensor {
        shape,
        coords,
        values: vals,
    }))
}

/// Binds an input stored per its encoding: dimension sizes from the input's shape, level
/// structure from the storage `lacuna_ir::storage` builds, values in storage order.
fn bind_encoded(
    b: &mut Binder<'_>,
    buf: &crate::ir::Buffer,
    input: &Input,
) -> Result<ArrayData, BindError> {
    use lacuna_ir::encoding::Lvl;
    let bad = |reason: String| BindError::Structure {
        buffer: buf.name.clone(),
        axis: buf.axes.first().cloned().unwrap_or_default(),
        reason,
    };
    let declared = crate::sparsify::declared_encoding(buf)
        .map_err(|e| bad(e.to_string()))?
        .ok_or_else(|| bad("no encoding".into()))?;
    let enc = declared.without_slices();
    let coo = input.entries();
    // A sliced buffer views its input (as MLIR's `tensor.extract_slice`): the kernel computes
    // on the entries inside the slice, stored in the encoding without slices.
    // The input is stored as COO first: the slice, not the whole input, must fit `enc` (an
    // ELL width or n:m pattern).
    let viewed = declared.has_slices().then(|| {
        let rank = coo.shape.len();
        let mut slices = (vec![0; rank], coo.shape.clone(), vec![1; rank]);
        for d in 0..rank.min(declared.dim_rank()) {
            let Some(s) = declared.dim_slice(lacuna_ir::encoding::Dim(d as u32)) else {
                continue;
            };
            for (dst, b) in [
                (&mut slices.0, s.offset),
                (&mut slices.1, s.size),
                (&mut slices.2, s.stride),
            ] {
                match b {
                    lacuna_ir::encoding::SliceBound::Static(v) => {
                        dst[d] = usize::try_from(v).unwrap_or(usize::MAX)
                    }
                    lacuna_ir::encoding::SliceBound::Dynamic => {
                        return Err(lacuna_ir::storage::StorageError::Slices)
                    }
                }
            }
        }
        let coo_enc = lacuna_ir::encoding::preset(&format!("coo({rank})"))
            .map_err(|_| lacuna_ir::storage::StorageError::Slices)?;
        let base = lacuna_ir::storage::SparseTensor::from_coo(&coo, &coo_enc)?;
        base.view(&slices.0, &slices.1, &slices.2)?.convert(&enc)
    });
    let viewed = viewed.transpose().map_err(|e| bad(e.to_string()))?;
    let shape: Vec<usize> = viewed
        .as_ref()
        .map_or(&coo.shape[..], |t| t.dim_shape())
        .to_vec();
    if coo.shape.len() != buf.dims.len() {
        return Err(BindError::Rank {
            buffer: buf.name.clone(),
            expected: buf.dims.len(),
            found: coo.shape.len(),
        });
    }
    for (d, ax) in buf.dims.iter().enumerate() {
        let ext = b.axis(ax).kind.coord_extent().clone();
        b.bind_size(
            &ext,
            shape[d],
            &format!("input `{}` dimension {d}", buf.name),
        )?;
    }
    let t = match viewed {
        Some(t) => t,
        None => lacuna_ir::storage::SparseTensor::from_coo(&coo, &enc)
            .map_err(|e| bad(e.to_string()))?,
    };
    let rooted = buf.axes.len() == enc.lvl_rank() + 1;
    for k in 0..enc.lvl_rank() {
        let ax = &buf.axes[k + usize::from(rooted)];
        let axis = b.axis(ax).clone();
        let source = format!("input `{}` level {k}", buf.name);
        b.bind_size(axis.kind.coord_extent(), t.lvl_shape()[k], &source)?;
        let positions = t.positions(Lvl(k as u32)).map(|p| p.to_u64_vec());
        let n_crd = match &positions {
            // Loose (lo, hi) pairs may come in any order: the coordinates end at the largest hi.
            Some(p) if enc.lvl_type(Lvl(k as u32)).is_loose_compressed() => {
                p.iter().copied().max().unwrap_or(0) as usize
            }
            Some(p) => p.last().copied().unwrap_or(0) as usize,
            None => 0,
        };
        let lt = enc.lvl_type(Lvl(k as u32));
        let coords: Option<Vec<i64>> =
            if lt.is_dense() && matches!(axis.kind, AxisKind::SparseFixed { .. }) {
                // A dense level stored as a fixed-width axis: every coordinate of every segment.
                let parent_len = crate::data::level_len(&t, k - 1);
                let w = t.lvl_shape()[k] as i64;
                Some((0..parent_len).flat_map(|_| 0..w).collect())
            } else if lt.has_coordinates() {
                let count = if lt.has_positions() {
                    n_crd
                } else {
                    // Singleton and n:m levels store one coordinate per position of the level.
                    let parent_len = if k == 0 {
                        1
                    } else {
                        crate::data::level_len(&t, k - 1)
                    };
                    match lt.n_out_of_m_sizes() {
                        Some((nn, _)) => parent_len * nn as usize,
                        None => parent_len,
                    }
                };
                Some(
                    (0..count)
                        .map(|q| t.coordinate(Lvl(k as u32), q).map_or(-1, |c| c as i64))
                        .collect(),
                )
            } else {
                None
            };
        let indptr = positions.map(|p| p.into_iter().map(|x| x as i64).collect::<Vec<i64>>());
        if let AxisKind::SparseVariable { nnz, .. } = &axis.kind {
            b.bind_size(nnz, n_crd, &source)?;
        }
        let data = AxisData {
            indptr: indptr
                .map(|v| index_array(axis.idtype, v, &buf.name, ax))
                .transpose()?,
            indices: coords
                .map(|v| index_array(axis.idtype, v, &buf.name, ax))
                .transpose()?,
        };
        if data.indptr.is_some() || data.indices.is_some() {
            set_axis(b, ax, data, &buf.name)?;
        }
    }
    check_values(&buf.name, t.values(), buf.dtype)
}

/// Number of positions of level `k` of a stored tensor.
pub(crate) fn level_len(t: &lacuna_ir::storage::SparseTensor, k: usize) -> usize {
    use lacuna_ir::encoding::Lvl;
    let enc = t.encoding();
    let mut len = 1usize;
    for l in 0..=k {
        let lt = enc.lvl_type(Lvl(l as u32));
        len = if lt.is_dense() {
            len * t.lvl_shape()[l]
        } else if let Some(p) = t.positions(Lvl(l as u32)) {
            if lt.is_loose_compressed() {
                p.to_u64_vec().into_iter().max().unwrap_or(0) as usize
            } else {
                p.get(p.len().saturating_sub(1)).unwrap_or(0) as usize
            }
        } else if let Some((nn, _)) = lt.n_out_of_m_sizes() {
            len * nn as usize
        } else {
            len
        };
    }
    len
}

/// Evaluates an affine level-to-dimension expression at level coordinates.
fn eval_affine(
    e: &lacuna_ir::encoding::AffineExpr<lacuna_ir::encoding::Lvl>,
    lvl: &[usize],
) -> i64 {
    use lacuna_ir::encoding::AffineNode;
    let mut vals: Vec<i64> = Vec::with_capacity(e.nodes().len());
    for n in e.nodes() {
        let v = match *n {
            AffineNode::Var(l) => lvl.get(l.index()).map_or(0, |&x| x as i64),
            AffineNode::Sym(_) => 0,
            AffineNode::Const(c) => c,
            AffineNode::Add(a, b) => vals[a as usize].wrapping_add(vals[b as usize]),
            AffineNode::Mul(a, b) => vals[a as usize].wrapping_mul(vals[b as usize]),
            AffineNode::FloorDiv(a, b) => vals[a as usize]
                .checked_div_euclid(vals[b as usize])
                .unwrap_or(0),
            AffineNode::Mod(a, b) => vals[a as usize]
                .checked_rem_euclid(vals[b as usize])
                .unwrap_or(0),
        };
        vals.push(v);
    }
    vals.last().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::check_coordinates;
    use proptest::prelude::*;

    /// What `check_coordinates` must find, one coordinate at a time.
    fn naive(ind: &[i64], segments: &[(usize, usize)], ext: i64, sorted: bool) -> bool {
        segments.iter().all(|&(s, t)| {
            (s..t).all(|q| (0..ext).contains(&ind[q]) && (!sorted || q == s || ind[q] > ind[q - 1]))
        })
    }

    proptest! {
        /// The whole-array fast path accepts exactly what the per-coordinate check accepts:
        /// rows of random lengths (empty ones included), coordinates a little outside `0..ext`,
        /// ties and falls within and between rows.
        #[test]
        fn fast_path_agrees_with_the_naive_check(
            rows in proptest::collection::vec(proptest::collection::vec(-1i64..7, 0..5), 0..8),
            ext in 0i64..7,
            sorted in any::<bool>(),
        ) {
            let mut ind = Vec::new();
            let mut segments = Vec::new();
            for r in &rows {
                let s = ind.len();
                ind.extend(r);
                segments.push((s, ind.len()));
            }
            let want = naive(&ind, &segments, ext, sorted);
            let narrow: Vec<i32> = ind.iter().map(|&x| x as i32).collect();
            prop_assert_eq!(check_coordinates(&ind, &segments, ext, sorted).is_ok(), want);
            prop_assert_eq!(check_coordinates(&narrow, &segments, ext, sorted).is_ok(), want);
            let tiny: Vec<i8> = ind.iter().map(|&x| x as i8).collect();
            prop_assert_eq!(check_coordinates(&tiny, &segments, ext, sorted).is_ok(), want);
        }

        /// The scans in lanes of the stored width (unsigned maxima against an extent beyond
        /// the type's range, falls counted per width) agree with the naive check on values at
        /// the edges of each type and extents around them, over arrays longer than a vector.
        #[test]
        fn stored_width_scans_agree_at_the_edges(
            picks in proptest::collection::vec(0usize..8, 0..70),
            cuts in proptest::collection::vec(0usize..70, 0..6),
            ext_pick in 0usize..8,
            sorted in any::<bool>(),
        ) {
            let edges = [-1i64, 0, 1, 126, 127, 128, i32::MAX as i64, i32::MAX as i64 + 1];
            let exts = [0i64, 1, 127, 128, i32::MAX as i64, 1 << 31, 1 << 32, i64::MAX];
            let mut ind: Vec<i64> = picks.iter().map(|&p| edges[p]).collect();
            if sorted {
                ind.sort_unstable();
            }
            let mut bounds: Vec<usize> =
                cuts.iter().map(|&c| c.min(ind.len())).chain([0, ind.len()]).collect();
            bounds.sort_unstable();
            let segments: Vec<(usize, usize)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();
            let ext = exts[ext_pick];
            prop_assert_eq!(
                check_coordinates(&ind, &segments, ext, sorted).is_ok(),
                naive(&ind, &segments, ext, sorted)
            );
            // Narrower arrays hold what fits (the others wrap, as stored data would).
            let narrow: Vec<i32> = ind.iter().map(|&x| x as i32).collect();
            let wide: Vec<i64> = narrow.iter().map(|&x| x as i64).collect();
            prop_assert_eq!(
                check_coordinates(&narrow, &segments, ext, sorted).is_ok(),
                naive(&wide, &segments, ext, sorted)
            );
            let tiny: Vec<i8> = ind.iter().map(|&x| x as i8).collect();
            let wide: Vec<i64> = tiny.iter().map(|&x| x as i64).collect();
            prop_assert_eq!(
                check_coordinates(&tiny, &segments, ext, sorted).is_ok(),
                naive(&wide, &segments, ext, sorted)
            );
        }
    }
}
