//! Binding borrowed arrays: inputs owned elsewhere (NumPy arrays, SciPy CSR matrices) bound to a
//! program without copying, then validated exactly as [`crate::bind`] validates owned data.
//!
//! [`bind_views`] takes dense arrays and CSR triples for the input buffers, binds the symbolic
//! sizes from their shapes, and checks every array's length and structure (monotone `indptr`
//! from zero, coordinates in range, strictly increasing where the axis is `sorted`). Output and
//! allocated buffers are left to the caller, who sizes them with [`buffer_len_view`] and checks
//! them with [`check_length`].

use crate::data::{axis_len_of, buffer_len_of, validate_structure, Structure};
use crate::ir::{AxisKind, Program, Role, Size};
use crate::BindError;
use lacuna_ir::{ArrayView, DType};
use std::collections::BTreeMap;

/// A borrowed input for one buffer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InputView<'a> {
    /// A row-major dense array, for a buffer over dense axes only.
    Dense {
        /// Extents of the dimensions.
        shape: &'a [usize],
        /// The elements, row-major.
        data: ArrayView<'a>,
    },
    /// A compressed sparse row matrix, for a buffer over `[I, J]` with `I` dense and `J` a
    /// `sparse_variable` child of `I`: `indptr` and `indices` become `J`'s structure.
    Csr {
        /// Rows and columns.
        shape: [usize; 2],
        /// Row boundaries (`rows + 1` entries).
        indptr: ArrayView<'a>,
        /// Column of each stored entry.
        indices: ArrayView<'a>,
        /// Value of each stored entry.
        values: ArrayView<'a>,
    },
}

/// Structure arrays of one axis, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct AxisView<'a> {
    /// Segment boundaries.
    pub indptr: Option<ArrayView<'a>>,
    /// Stored coordinates.
    pub indices: Option<ArrayView<'a>>,
}

/// Parameters, axis structure and input values of a program, with every array borrowed.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct BindingsView<'a> {
    /// Values of the symbolic sizes.
    pub params: BTreeMap<String, i64>,
    /// Structure arrays per axis name.
    pub axes: BTreeMap<String, AxisView<'a>>,
    /// Values of the input buffers.
    pub buffers: BTreeMap<String, ArrayView<'a>>,
}

impl Structure for BindingsView<'_> {
    fn params(&self) -> &BTreeMap<String, i64> {
        &self.params
    }
    fn has_axis(&self, axis: &str) -> bool {
        self.axes.contains_key(axis)
    }
    fn indptr(&self, axis: &str) -> Option<ArrayView<'_>> {
        self.axes.get(axis)?.indptr
    }
    fn indices(&self, axis: &str) -> Option<ArrayView<'_>> {
        self.axes.get(axis)?.indices
    }
    fn values(&self, buffer: &str) -> Option<ArrayView<'_>> {
        self.buffers.get(buffer).copied()
    }
}

/// Whether a buffer can take an input without copying: with no extra storage, and either over
/// dense axes only ([`InputView::Dense`]) or over a dense axis and its `sparse_variable` child
/// ([`InputView::Csr`]), the latter also when the buffer is declared with an encoding that is
/// CSR (identity map, dense then ordered unique compressed level, one index width). Returns the
/// form it takes, or `None`.
pub fn view_form(p: &Program, buffer: &str) -> Option<ViewForm> {
    let buf = p.buffer(buffer)?;
    if buf.extra_storage != 0 {
        return None;
    }
    if !buf.dims.is_empty() && !is_csr_encoding(buf) {
        return None;
    }
    let kinds: Vec<&AxisKind> = buf
        .axes
        .iter()
        .map(|a| p.axis(a).map(|x| &x.kind))
        .collect::<Option<_>>()?;
    if kinds
        .iter()
        .all(|k| matches!(k, AxisKind::DenseFixed { .. }))
    {
        return Some(ViewForm::Dense);
    }
    match kinds.as_slice() {
        [AxisKind::DenseFixed { .. }, AxisKind::SparseVariable {
            parent,
            loose: false,
            ..
        }] if *parent == buf.axes[0] => Some(ViewForm::Csr {
            axis: buf.axes[1].clone(),
            index: p.axis(&buf.axes[1])?.idtype.dtype(),
        }),
        _ => None,
    }
}

/// Whether an encoded (sparsified) buffer is stored exactly as CSR over its two level axes.
fn is_csr_encoding(buf: &crate::ir::Buffer) -> bool {
    let Ok(Some(enc)) = crate::sparsify::buffer_encoding(buf) else {
        return false;
    };
    enc.is_csr()
        && enc.n_symbols() == 0
        && enc.pos_width() == enc.crd_width()
        && buf.dims.len() == 2
        && buf.axes.len() == 2
}

/// How a buffer takes a borrowed input (see [`view_form`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ViewForm {
    /// A dense row-major array.
    Dense,
    /// A CSR matrix whose structure is that of `axis`, with indices of type `index`.
    Csr {
        /// The `sparse_variable` axis.
        axis: String,
        /// The element type of its `indptr` and `indices`.
        index: DType,
    },
}

/// Binds borrowed inputs (by buffer name) and explicit parameter values to a verified,
/// sparsified program, and validates them: sizes agree across inputs, every array has the
/// length the kernel expects and the element type of its buffer or axis, and the structure is
/// well formed. Output and allocated buffers are not included.
pub fn bind_views<'a>(
    p: &Program,
    inputs: &BTreeMap<String, InputView<'a>>,
    params: &BTreeMap<String, i64>,
) -> Result<BindingsView<'a>, BindError> {
    let mut b = BindingsView::default();
    let mut sources: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in params {
        if *v < 0 {
            return Err(BindError::NegativeParam {
                param: k.clone(),
                value: *v,
            });
        }
        b.params.insert(k.clone(), *v);
        sources.insert(k.clone(), "params".into());
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
    for buf in p.buffers.iter().filter(|x| x.role == Role::Input) {
        let input = inputs
            .get(&buf.name)
            .ok_or_else(|| BindError::MissingInput {
                buffer: buf.name.clone(),
            })?;
        let form = view_form(p, &buf.name);
        let structure = |reason: String| BindError::Structure {
            buffer: buf.name.clone(),
            axis: buf.axes.join(", "),
            reason,
        };
        let dtype_check = |what: &str, found: DType, expected: DType| {
            if found == expected {
                Ok(())
            } else {
                Err(structure(format!(
                    "{what} are {found} but the kernel expects {expected}"
                )))
            }
        };
        let (shape, values): (Vec<usize>, ArrayView<'a>) = match (input, &form) {
            (InputView::Dense { shape, data }, Some(ViewForm::Dense)) => (shape.to_vec(), *data),
            (
                InputView::Csr {
                    shape,
                    indptr,
                    indices,
                    values,
                },
                Some(ViewForm::Csr { axis, index }),
            ) => {
                dtype_check("indptr elements", indptr.dtype(), *index)?;
                dtype_check("indices elements", indices.dtype(), *index)?;
                let view = AxisView {
                    indptr: Some(*indptr),
                    indices: Some(*indices),
                };
                match b.axes.get(axis) {
                    Some(existing) if !same_structure(existing, &view) => {
                        return Err(BindError::PatternMismatch {
                            axis: axis.clone(),
                            buffer: buf.name.clone(),
                        })
                    }
                    Some(_) => {}
                    None => {
                        b.axes.insert(axis.clone(), view);
                    }
                }
                if let Some(AxisKind::SparseVariable { nnz, .. }) = p.axis(axis).map(|a| &a.kind)
                {
                    let source = format!("input `{}` indices", buf.name);
                    bind_size(&mut b.params, &mut sources, nnz, indices.len(), &source)?;
                }
                (shape.to_vec(), *values)
            }
            (InputView::Dense { .. }, _) => {
                return Err(structure(
                    "a dense array cannot be bound without copying to a buffer with sparse axes"
                        .into(),
                ))
            }
            (InputView::Csr { .. }, _) => {
                return Err(structure(
                    "a CSR matrix can be bound without copying only to a buffer over a dense axis and its sparse_variable child".into(),
                ))
            }
        };
        if shape.len() != buf.axes.len() {
            return Err(BindError::Rank {
                buffer: buf.name.clone(),
                expected: buf.axes.len(),
                found: shape.len(),
            });
        }
        for (d, ax) in buf.axes.iter().enumerate() {
            let ext = p
                .axis(ax)
                .expect("verified programs name only declared axes")
                .kind
                .coord_extent()
                .clone();
            let source = format!("input `{}` dimension {d}", buf.name);
            bind_size(&mut b.params, &mut sources, &ext, shape[d], &source)?;
        }
        // An encoded buffer's dimensions (its level axes are bound above).
        for (d, ax) in buf.dims.iter().enumerate() {
            let ext = p
                .axis(ax)
                .expect("verified programs name only declared axes")
                .kind
                .coord_extent()
                .clone();
            let source = format!("input `{}` dimension {d}", buf.name);
            bind_size(&mut b.params, &mut sources, &ext, shape[d], &source)?;
        }
        dtype_check("values", values.dtype(), buf.dtype)?;
        b.buffers.insert(buf.name.clone(), values);
    }
    for name in &p.params {
        if !b.params.contains_key(name) {
            return Err(BindError::UnboundParam {
                param: name.clone(),
            });
        }
    }
    validate_structure(p, &b)?;
    for (name, values) in &b.buffers {
        check_length(p, &b, name, "values", values.len())?;
    }
    Ok(b)
}

/// Number of positions of an axis (see [`crate::axis_len`]).
pub fn axis_len_view(p: &Program, b: &BindingsView<'_>, axis: &str) -> Result<usize, BindError> {
    axis_len_of(p, b, axis)
}

/// Number of stored values of a buffer, without extra storage (see [`crate::buffer_len`]).
pub fn buffer_len_view(
    p: &Program,
    b: &BindingsView<'_>,
    buffer: &str,
) -> Result<usize, BindError> {
    buffer_len_of(p, b, buffer)
}

/// Checks that an array of `len` elements holds exactly the values of `buffer` (its stored
/// entries plus extra storage).
pub fn check_length(
    p: &Program,
    b: &BindingsView<'_>,
    buffer: &str,
    array: &str,
    len: usize,
) -> Result<(), BindError> {
    let extra = p.buffer(buffer).map_or(0, |x| x.extra_storage);
    let expected = buffer_len_of(p, b, buffer)?
        .checked_add(usize::try_from(extra).unwrap_or(usize::MAX))
        .ok_or_else(|| BindError::TooLarge {
            buffer: buffer.to_string(),
        })?;
    if len != expected {
        return Err(BindError::Length {
            buffer: buffer.to_string(),
            array: array.to_string(),
            expected,
            found: len,
        });
    }
    Ok(())
}

/// Same arrays (by address and length) or equal contents.
fn same_structure(a: &AxisView<'_>, b: &AxisView<'_>) -> bool {
    let same = |x: &Option<ArrayView<'_>>, y: &Option<ArrayView<'_>>| match (x, y) {
        (Some(x), Some(y)) => {
            (x.as_ptr() == y.as_ptr() && x.len() == y.len()) || x.to_i64_vec() == y.to_i64_vec()
        }
        (None, None) => true,
        _ => false,
    };
    same(&a.indptr, &b.indptr) && same(&a.indices, &b.indices)
}

fn bind_size(
    params: &mut BTreeMap<String, i64>,
    sources: &mut BTreeMap<String, String>,
    s: &Size,
    value: usize,
    source: &str,
) -> Result<(), BindError> {
    let value = i64::try_from(value).map_err(|_| BindError::TooLarge {
        buffer: source.to_string(),
    })?;
    let (key, existing) = match s {
        Size::Const(c) => (c.to_string(), i64::try_from(*c).ok()),
        Size::Param(p) => (p.clone(), params.get(p).copied()),
    };
    match existing {
        Some(v) if v != value => Err(BindError::ShapeMismatch {
            first: v,
            first_source: sources
                .get(&key)
                .cloned()
                .unwrap_or_else(|| "the kernel".into()),
            param: key,
            second: value,
            second_source: source.to_string(),
        }),
        Some(_) => Ok(()),
        None => {
            if let Size::Param(p) = s {
                params.insert(p.clone(), value);
                sources.insert(p.clone(), source.to_string());
            }
            Ok(())
        }
    }
}
