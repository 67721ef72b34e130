//! Sparse tensors in any encoding: conversion, and MLIR's assemble/disassemble over NumPy arrays.

use crate::errors::{guard, FormatError};
use lacuna_ir::encoding::{parse_format, Encoding};
use lacuna_ir::storage::{storage_fields, IndexArray, SparseTensor, Validation};
use lacuna_ir::{ArrayData, CooTensor, DenseArray};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// A tensor stored in an encoding (MLIR's storage layout).
#[pyclass(module = "lacuna._lacuna", name = "SparseTensor", frozen)]
pub struct PySparseTensor {
    tensor: SparseTensor,
}

fn encoding(text: &str) -> PyResult<Encoding> {
    parse_format(text)
        .map_err(|e| FormatError::new_err(format!("bad encoding:\n{}", e.render(text))))
}

fn storage_err(e: lacuna_ir::storage::StorageError) -> PyErr {
    FormatError::new_err(e.to_string())
}

fn values_of(v: &Bound<'_, PyAny>) -> PyResult<ArrayData> {
    let np = v.py().import("numpy")?;
    let arr = np
        .call_method1("ascontiguousarray", (v,))?
        .call_method1("reshape", (-1,))?;
    let dtype: String = arr.getattr("dtype")?.getattr("name")?.extract()?;
    Ok(match dtype.as_str() {
        "float32" => ArrayData::F32(arr.extract()?),
        "int8" => ArrayData::I8(arr.extract()?),
        "int32" => ArrayData::I32(arr.extract()?),
        "int64" => ArrayData::I64(arr.extract()?),
        _ => ArrayData::F64(arr.call_method1("astype", ("float64",))?.extract()?),
    })
}

fn array_to_py<'py>(py: Python<'py>, d: &ArrayData) -> Bound<'py, PyAny> {
    match d {
        ArrayData::F32(v) => PyArray1::from_slice(py, v).into_any(),
        ArrayData::F64(v) => PyArray1::from_slice(py, v).into_any(),
        ArrayData::I8(v) => PyArray1::from_slice(py, v).into_any(),
        ArrayData::I32(v) => PyArray1::from_slice(py, v).into_any(),
        ArrayData::I64(v) => PyArray1::from_slice(py, v).into_any(),
    }
}

fn index_to_py<'py>(py: Python<'py>, a: &IndexArray) -> Bound<'py, PyAny> {
    match a {
        IndexArray::U8(v) => PyArray1::from_slice(py, v).into_any(),
        IndexArray::U16(v) => PyArray1::from_slice(py, v).into_any(),
        IndexArray::U32(v) => PyArray1::from_slice(py, v).into_any(),
        IndexArray::U64(v) => PyArray1::from_slice(py, v).into_any(),
    }
}

/// Stores a tensor given by its entries (`coords[d][e]`, `values[e]`) in `encoding`.
#[pyfunction]
pub fn from_coo(
    shape: Vec<usize>,
    coords: Vec<Vec<usize>>,
    values: &Bound<'_, PyAny>,
    encoding_text: &str,
) -> PyResult<PySparseTensor> {
    let enc = encoding(encoding_text)?;
    let values = values_of(values)?;
    if coords.len() != shape.len() || coords.iter().any(|c| c.len() != values.len()) {
        return Err(FormatError::new_err(format!(
            "a tensor of rank {} needs {} coordinate arrays of {} entries each",
            shape.len(),
            shape.len(),
            values.len()
        )));
    }
    let coo = CooTensor {
        shape,
        coords,
        values,
    };
    guard("convert", || {
        Ok(PySparseTensor {
            tensor: SparseTensor::from_coo(&coo, &enc).map_err(storage_err)?,
        })
    })
}

/// Stores a dense array in `encoding` (its non-zeros).
#[pyfunction]
pub fn from_dense(array: &Bound<'_, PyAny>, encoding_text: &str) -> PyResult<PySparseTensor> {
    let enc = encoding(encoding_text)?;
    let shape: Vec<usize> = array.getattr("shape")?.extract()?;
    let dense = DenseArray {
        shape,
        data: values_of(array)?,
    };
    guard("convert", || {
        Ok(PySparseTensor {
            tensor: SparseTensor::from_dense(&dense, &enc).map_err(storage_err)?,
        })
    })
}

/// Builds a tensor from its buffers in MLIR's storage-layout order (see `storage_fields`), as
/// `sparse_tensor.assemble`; `validate=False` checks only counts, lengths and widths.
#[pyfunction]
#[pyo3(signature = (encoding_text, shape, buffers, values, validate = true))]
pub fn assemble(
    encoding_text: &str,
    shape: Vec<usize>,
    buffers: Vec<Bound<'_, PyAny>>,
    values: &Bound<'_, PyAny>,
    validate: bool,
) -> PyResult<PySparseTensor> {
    let enc = encoding(encoding_text)?;
    let mut bufs = Vec::with_capacity(buffers.len());
    for (i, b) in buffers.iter().enumerate() {
        let np = b.py().import("numpy")?;
        let arr = np
            .call_method1("asarray", (b,))?
            .call_method1("reshape", (-1,))?;
        let kind: String = arr.getattr("dtype")?.getattr("kind")?.extract()?;
        if kind != "i" && kind != "u" {
            return Err(FormatError::new_err(format!(
                "buffer {i} must hold integers, not {kind:?} values"
            )));
        }
        let v: Vec<i128> = arr.call_method0("tolist")?.extract()?;
        let v: Vec<u64> = v
            .into_iter()
            .map(u64::try_from)
            .collect::<Result<_, _>>()
            .map_err(|_| FormatError::new_err(format!("buffer {i} holds a negative value")))?;
        bufs.push(IndexArray::U64(v));
    }
    let values = values_of(values)?;
    let validation = if validate {
        Validation::Checked
    } else {
        Validation::Trusted
    };
    guard("assemble", || {
        Ok(PySparseTensor {
            tensor: SparseTensor::assemble(&enc, &shape, bufs, values, validation)
                .map_err(storage_err)?,
        })
    })
}

/// The names of the index buffers an encoding stores, in MLIR's storage-layout order
/// (`pos[1]`, `crd[1]`, ...); the values come after them.
#[pyfunction]
pub fn storage_layout(encoding_text: &str) -> PyResult<Vec<String>> {
    Ok(storage_fields(&encoding(encoding_text)?)
        .iter()
        .map(|f| f.to_string())
        .collect())
}

#[pymethods]
impl PySparseTensor {
    /// The encoding, in MLIR syntax.
    #[getter]
    fn encoding(&self) -> String {
        self.tensor.encoding().to_string()
    }
    /// Extents of the dimensions.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.tensor.dim_shape().to_vec()
    }
    /// Extents of the levels.
    #[getter]
    fn level_shape(&self) -> Vec<usize> {
        self.tensor.lvl_shape().to_vec()
    }
    /// Number of stored entries (`nse`).
    #[getter]
    fn nse(&self) -> usize {
        self.tensor.number_of_entries()
    }
    /// The storage as MLIR's `sparse_tensor.print` writes it.
    fn print(&self) -> String {
        self.tensor.print()
    }
    /// The index buffers (in storage-layout order, at their widths) and the values.
    fn disassemble<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let (bufs, values) = self.tensor.disassemble();
        let list = PyList::empty(py);
        for b in &bufs {
            list.append(index_to_py(py, b))?;
        }
        PyTuple::new(py, [list.into_any(), array_to_py(py, &values)])
    }
    /// The stored entries: a list of coordinate arrays (one per dimension) and the values.
    fn to_coo<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let c = self.tensor.to_coo();
        let list = PyList::empty(py);
        for d in &c.coords {
            list.append(PyArray1::from_iter(py, d.iter().map(|&x| x as i64)))?;
        }
        PyTuple::new(py, [list.into_any(), array_to_py(py, &c.values)])
    }
    /// The tensor as a dense array (repeated entries summed).
    fn to_dense<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let d = self.tensor.to_dense().map_err(storage_err)?;
        array_to_py(py, &d.data).call_method1("reshape", (PyTuple::new(py, &d.shape)?,))
    }
    /// The same tensor stored in another encoding.
    fn convert(&self, encoding_text: &str) -> PyResult<PySparseTensor> {
        let enc = encoding(encoding_text)?;
        guard("convert", || {
            Ok(PySparseTensor {
                tensor: self.tensor.convert(&enc).map_err(storage_err)?,
            })
        })
    }
    fn __repr__(&self) -> String {
        format!(
            "SparseTensor(shape={:?}, nse={}, encoding={:?})",
            self.tensor.dim_shape(),
            self.tensor.number_of_entries(),
            self.tensor.encoding().to_string()
        )
    }
}
