//! `build` and the callable it returns: binds NumPy arrays and CSR triples to a compiled kernel.
//!
//! Two paths. The *zero-copy* path (JIT target, no format conversion, every input a dense
//! array or a CSR matrix whose buffer takes one; see `lacuna_stage1::view_form`) borrows the
//! arrays' memory, validates it with `lacuna_stage1::bind_views`, and runs the machine code on
//! it with `CompiledKernel::run_raw`, writing outputs into NumPy arrays allocated here or
//! given as `out=`. Every Python call the binding makes comes before the validation, and the
//! arrays the kernel trusts for addresses (structure, coordinates) cannot change during the
//! run, which releases the GIL: it reads validated copies of them. The *copying* path (interpreters, co-iteration kernels,
//! encoded buffers, decomposed formats) converts the arguments into owned inputs and runs the
//! driver's path. Arrays whose element type or layout differ are converted by NumPy first
//! (same-kind casts only), unless `copy=False`, which makes any copy an error.

use crate::errors::{bind_error, catch, driver_error, internal, BindError, ShapeError};
use crate::kernel::{PyKernel, PySchedule};
use lacuna::driver::{convert_inputs, reset_outputs, CoExecutable, Executable, Target};
use lacuna_ir::storage::IndexArray;
use lacuna_ir::{ArrayData, ArrayView, CooTensor, DType, DenseArray};
use lacuna_schedule::Conversion;
use lacuna_stage1::{
    bind_views, bind_with, buffer_len_view, check_length, size_value, unpack, view_form, AxisKind,
    Bindings, BindingsView, Input, InputView, Output, Program, Role, ViewForm,
};
use lacuna_stage2::coiter::CoKernel;
use lacuna_target::{CompiledKernel, RawArray, RawBindings};
use numpy::{
    PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyReadwriteArrayDyn,
    PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::collections::BTreeMap;

enum Inner {
    Standard {
        exe: Executable,
        conversions: Vec<Conversion>,
    },
    Coiter {
        /// The kernel and its functions for the target.
        wide: Box<CoExecutable>,
        /// The same kernel with 32-bit indices (`CoKernel::with_index`), run on data whose
        /// indices fit (`CoExecutable::narrow`), as `lacuna run` does.
        narrow: Box<CoExecutable>,
    },
}

/// A kernel compiled for a target, callable on NumPy arrays and CSR matrices.
#[pyclass(module = "lacuna._lacuna", name = "Executable", frozen)]
pub struct PyExecutable {
    program: Program,
    /// The parameters of the kernel as written (a schedule may specialize some away): a
    /// `params=` key outside them is an error.
    declared: Vec<String>,
    target: Target,
    inner: Inner,
}

fn parse_target(target: &str) -> PyResult<Target> {
    match target {
        "cpu" | "jit" | "llvm" => Ok(Target::Jit),
        "interp" => Ok(Target::Interp),
        "interp-stage1" => Ok(Target::InterpStage1),
        "interp-gpu" => Ok(Target::InterpGpu),
        _ => Err(PyValueError::new_err(format!(
            "unknown target `{target}` (expected cpu, interp, interp-stage1 or interp-gpu)"
        ))),
    }
}

/// Compiles a kernel, or a scheduled kernel, for `target`, without the GIL.
#[pyfunction]
#[pyo3(signature = (kernel, schedule = None, target = "cpu"))]
pub fn build(
    py: Python<'_>,
    kernel: PyRef<'_, PyKernel>,
    schedule: Option<PyRef<'_, PySchedule>>,
    target: &str,
) -> PyResult<PyExecutable> {
    let target = parse_target(target)?;
    let file = schedule.map(|s| s.file());
    let p = kernel.prepared.clone();
    let declared = p.params.clone();
    let built = py.detach(move || {
        catch(
            move || -> Result<PyExecutable, lacuna::driver::DriverError> {
                if lacuna_stage2::coiter::is_coiteration(&p) {
                    if file.as_ref().is_some_and(|f| !f.trace.is_empty()) {
                        return Err(lacuna_stage2::coiter::CoiterError::Unsupported {
                            what: "schedules of co-iteration kernels".into(),
                        }
                        .into());
                    }
                    let k = CoKernel::new(&p)?;
                    let narrow = k.with_index(lacuna::ir::DType::I32)?;
                    return Ok(PyExecutable {
                        program: p,
                        declared,
                        target,
                        inner: Inner::Coiter {
                            wide: Box::new(CoExecutable::new(k, target)?),
                            narrow: Box::new(CoExecutable::new(narrow, target)?),
                        },
                    });
                }
                let (program, exe, conversions) =
                    Executable::build_converting(&p, file.as_ref(), target)?;
                Ok(PyExecutable {
                    program,
                    declared,
                    target,
                    inner: Inner::Standard { exe, conversions },
                })
            },
        )
    });
    match built {
        Ok(Ok(exe)) => Ok(exe),
        Ok(Err(e)) => Err(driver_error(&e)),
        Err(panic) => Err(internal("build", panic)),
    }
}

/// A read-only borrow of a NumPy array of one of the four element types.
enum ReadGuard<'py> {
    F32(PyReadonlyArrayDyn<'py, f32>),
    F64(PyReadonlyArrayDyn<'py, f64>),
    I8(PyReadonlyArrayDyn<'py, i8>),
    I32(PyReadonlyArrayDyn<'py, i32>),
    I64(PyReadonlyArrayDyn<'py, i64>),
}

impl ReadGuard<'_> {
    fn view(&self) -> ArrayView<'_> {
        const CHECKED: &str = "arrays are checked C-contiguous before they are borrowed";
        match self {
            ReadGuard::F32(a) => ArrayView::F32(a.as_slice().expect(CHECKED)),
            ReadGuard::F64(a) => ArrayView::F64(a.as_slice().expect(CHECKED)),
            ReadGuard::I8(a) => ArrayView::I8(a.as_slice().expect(CHECKED)),
            ReadGuard::I32(a) => ArrayView::I32(a.as_slice().expect(CHECKED)),
            ReadGuard::I64(a) => ArrayView::I64(a.as_slice().expect(CHECKED)),
        }
    }
}

/// A writable borrow of a NumPy array.
enum WriteGuard<'py> {
    F32(PyReadwriteArrayDyn<'py, f32>),
    F64(PyReadwriteArrayDyn<'py, f64>),
    I8(PyReadwriteArrayDyn<'py, i8>),
    I32(PyReadwriteArrayDyn<'py, i32>),
    I64(PyReadwriteArrayDyn<'py, i64>),
}

impl WriteGuard<'_> {
    /// Its number of elements.
    fn len(&self) -> usize {
        match self {
            WriteGuard::F32(a) => a.len(),
            WriteGuard::F64(a) => a.len(),
            WriteGuard::I8(a) => a.len(),
            WriteGuard::I32(a) => a.len(),
            WriteGuard::I64(a) => a.len(),
        }
    }

    /// Its first byte and its size in bytes.
    fn bytes(&self) -> (*const u8, usize) {
        fn of<T>(a: &PyReadwriteArrayDyn<'_, T>) -> (*const u8, usize)
        where
            T: numpy::Element,
        {
            (
                a.data().cast_const().cast(),
                a.len() * std::mem::size_of::<T>(),
            )
        }
        match self {
            WriteGuard::F32(a) => of(a),
            WriteGuard::F64(a) => of(a),
            WriteGuard::I8(a) => of(a),
            WriteGuard::I32(a) => of(a),
            WriteGuard::I64(a) => of(a),
        }
    }

    /// Zero-fills the array and returns its memory for the kernel.
    fn zeroed_raw(&mut self) -> RawArray {
        const CHECKED: &str = "outputs are checked C-contiguous before they are borrowed";
        fn raw<T: Default + Copy>(s: &mut [T], dtype: DType) -> RawArray {
            s.fill(T::default());
            RawArray {
                ptr: s.as_mut_ptr().cast(),
                len: s.len(),
                dtype,
            }
        }
        match self {
            WriteGuard::F32(a) => raw(a.as_slice_mut().expect(CHECKED), DType::F32),
            WriteGuard::F64(a) => raw(a.as_slice_mut().expect(CHECKED), DType::F64),
            WriteGuard::I8(a) => raw(a.as_slice_mut().expect(CHECKED), DType::I8),
            WriteGuard::I32(a) => raw(a.as_slice_mut().expect(CHECKED), DType::I32),
            WriteGuard::I64(a) => raw(a.as_slice_mut().expect(CHECKED), DType::I64),
        }
    }
}

fn numpy_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::I8 => "int8",
        DType::I32 | DType::Bool => "int32",
        DType::I64 => "int64",
    }
}

fn dtype_of(a: &Bound<'_, PyAny>) -> PyResult<String> {
    a.getattr("dtype")?.getattr("name")?.extract()
}

/// NumPy's descriptor of `d`'s element type, in native byte order.
fn descr(py: Python<'_>, d: DType) -> Bound<'_, numpy::PyArrayDescr> {
    match d {
        DType::F32 => numpy::dtype::<f32>(py),
        DType::F64 => numpy::dtype::<f64>(py),
        DType::I8 => numpy::dtype::<i8>(py),
        DType::I32 | DType::Bool => numpy::dtype::<i32>(py),
        DType::I64 => numpy::dtype::<i64>(py),
    }
}

/// The element type of ndarray `a`, where it is one that kernels take, in native byte order.
/// Through NumPy's C API: `dtype.name` runs Python code in NumPy 2 (importing a module on
/// every call), which made the checks of a call's arrays most of a small call's time.
fn element_type(a: &Bound<'_, PyAny>) -> Option<DType> {
    let d = a.cast::<PyUntypedArray>().ok()?.dtype();
    [DType::F64, DType::F32, DType::I32, DType::I64, DType::I8]
        .into_iter()
        .find(|&t| d.is_equiv_to(&descr(a.py(), t)))
}

/// Whether `a` is an ndarray of `dtype`, C-contiguous and aligned: usable without a copy.
fn usable(a: &Bound<'_, PyAny>, dtype: DType) -> PyResult<bool> {
    let Ok(arr) = a.cast::<PyUntypedArray>() else {
        return Ok(false);
    };
    Ok(arr.dtype().is_equiv_to(&descr(a.py(), dtype)) && arr.is_c_contiguous() && arr.is_aligned())
}

/// The `numpy` module, imported once.
fn numpy_module(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    static NUMPY: pyo3::sync::PyOnceLock<Py<PyModule>> = pyo3::sync::PyOnceLock::new();
    NUMPY
        .get_or_try_init(py, || py.import("numpy").map(Bound::unbind))
        .map(|m| m.bind(py).clone())
}

/// What the call does about arrays that cannot be used as they are.
struct Prep<'py, 'a> {
    py: Python<'py>,
    np: Bound<'py, PyModule>,
    copy: bool,
    /// Descriptions of the copies made (for `copy=False` errors and `last_copies`).
    copies: &'a mut Vec<String>,
}

impl<'py> Prep<'py, '_> {
    /// `a` as an ndarray of `dtype`, C-contiguous and aligned: itself when it already is,
    /// else a converted copy (same-kind casts only; integers narrowed only when they fit).
    fn array(
        &mut self,
        a: &Bound<'py, PyAny>,
        dtype: DType,
        what: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        if usable(a, dtype)? {
            return Ok(a.clone());
        }
        let arr = self.np.call_method1("asarray", (a,))?;
        let found = arr.getattr("dtype")?.str()?.to_string();
        if !self.copy {
            return Err(BindError::new_err(format!(
                "{what} would be copied (it is {found}{}, the kernel takes C-contiguous {}) but copy=False",
                if arr.cast::<PyUntypedArray>().is_ok_and(|x| x.is_c_contiguous()) { "" } else { ", not C-contiguous" },
                numpy_name(dtype)
            )));
        }
        let target = numpy_name(dtype);
        let can: bool = self
            .np
            .call_method1("can_cast", (arr.getattr("dtype")?, target, "same_kind"))?
            .extract()?;
        if !can {
            return Err(BindError::new_err(format!(
                "{what} has element type {found}, which does not convert to the kernel's {target}"
            )));
        }
        if dtype.is_int() && arr.getattr("size")?.extract::<usize>()? > 0 {
            let info = self.np.call_method1("iinfo", (target,))?;
            let (lo, hi): (i128, i128) = (
                info.getattr("min")?.extract()?,
                info.getattr("max")?.extract()?,
            );
            let (min, max): (i128, i128) = (
                arr.call_method0("min")?.call_method0("item")?.extract()?,
                arr.call_method0("max")?.call_method0("item")?.extract()?,
            );
            if min < lo || max > hi {
                return Err(BindError::new_err(format!(
                    "{what} holds values in {min}..={max}, which do not fit the kernel's {target}"
                )));
            }
        }
        self.copies.push(format!("{what}: {found} -> {target}"));
        let kwargs = PyDict::new(self.py);
        kwargs.set_item("dtype", target)?;
        kwargs.set_item("requirements", ("C", "A"))?;
        self.np.call_method("require", (arr,), Some(&kwargs))
    }
}

fn read<'py>(a: &Bound<'py, PyAny>, what: &str) -> PyResult<ReadGuard<'py>> {
    let busy = |_| {
        BindError::new_err(format!(
            "{what} is being written by this call (the same array is also an output)"
        ))
    };
    Ok(match element_type(a) {
        Some(DType::F32) => {
            ReadGuard::F32(a.cast::<PyArrayDyn<f32>>()?.try_readonly().map_err(busy)?)
        }
        Some(DType::F64) => {
            ReadGuard::F64(a.cast::<PyArrayDyn<f64>>()?.try_readonly().map_err(busy)?)
        }
        Some(DType::I8) => ReadGuard::I8(a.cast::<PyArrayDyn<i8>>()?.try_readonly().map_err(busy)?),
        Some(DType::I32) => {
            ReadGuard::I32(a.cast::<PyArrayDyn<i32>>()?.try_readonly().map_err(busy)?)
        }
        Some(DType::I64) => {
            ReadGuard::I64(a.cast::<PyArrayDyn<i64>>()?.try_readonly().map_err(busy)?)
        }
        _ => {
            return Err(BindError::new_err(format!(
                "{what}: unsupported element type {}",
                dtype_of(a)?
            )))
        }
    })
}

fn write<'py>(a: &Bound<'py, PyAny>, what: &str) -> PyResult<WriteGuard<'py>> {
    let busy = |_| {
        BindError::new_err(format!(
            "{what} is not writeable or is also an input of this call"
        ))
    };
    Ok(match element_type(a) {
        Some(DType::F32) => {
            WriteGuard::F32(a.cast::<PyArrayDyn<f32>>()?.try_readwrite().map_err(busy)?)
        }
        Some(DType::F64) => {
            WriteGuard::F64(a.cast::<PyArrayDyn<f64>>()?.try_readwrite().map_err(busy)?)
        }
        Some(DType::I8) => {
            WriteGuard::I8(a.cast::<PyArrayDyn<i8>>()?.try_readwrite().map_err(busy)?)
        }
        Some(DType::I32) => {
            WriteGuard::I32(a.cast::<PyArrayDyn<i32>>()?.try_readwrite().map_err(busy)?)
        }
        Some(DType::I64) => {
            WriteGuard::I64(a.cast::<PyArrayDyn<i64>>()?.try_readwrite().map_err(busy)?)
        }
        _ => {
            return Err(BindError::new_err(format!(
                "{what}: unsupported element type {}",
                dtype_of(a)?
            )))
        }
    })
}

/// One argument as the Python layer hands it over.
enum Arg<'py> {
    /// A dense array (any array-like).
    Dense(Bound<'py, PyAny>),
    /// A CSR matrix: shape, indptr, indices, data.
    Csr(
        [usize; 2],
        Bound<'py, PyAny>,
        Bound<'py, PyAny>,
        Bound<'py, PyAny>,
    ),
}

fn parse_arg<'py>(name: &str, v: &Bound<'py, PyAny>) -> PyResult<Arg<'py>> {
    if let Ok(t) = v.cast::<PyTuple>() {
        let kind: String = t.get_item(0)?.extract()?;
        return match kind.as_str() {
            "csr" => Ok(Arg::Csr(
                t.get_item(1)?.extract()?,
                t.get_item(2)?,
                t.get_item(3)?,
                t.get_item(4)?,
            )),
            "dense" => Ok(Arg::Dense(t.get_item(1)?)),
            _ => Err(BindError::new_err(format!(
                "argument `{name}`: unknown kind {kind}"
            ))),
        };
    }
    Ok(Arg::Dense(v.clone()))
}

/// An input converted to owned data (the copying path).
fn owned_input(np: &Bound<'_, PyModule>, name: &str, arg: &Arg<'_>) -> PyResult<Input> {
    fn data(
        np: &Bound<'_, PyModule>,
        a: &Bound<'_, PyAny>,
        what: &str,
    ) -> PyResult<(Vec<usize>, ArrayData)> {
        let arr = np.call_method1("ascontiguousarray", (a,))?;
        let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
        // Converted (where it must be) to a kernel's element type in native byte order, then
        // copied out through the buffer protocol, not element by element. (The name is read
        // only for other types: `dtype.name` runs Python code in NumPy 2.)
        let name = match element_type(&arr) {
            Some(t) => numpy_name(t).to_string(),
            None => dtype_of(&arr)?,
        };
        let target = match name.as_str() {
            "float32" | "float64" | "int8" | "int32" | "int64" => name.as_str(),
            "bool" | "int16" | "uint8" | "uint16" => "int64",
            "uint32" | "uint64" => "uint64",
            "float16" => "float32",
            other => {
                return Err(BindError::new_err(format!(
                    "{what} has element type {other}, which does not convert to a kernel's element types (float32, float64, int8, int32, int64)"
                )))
            }
        };
        let kwargs = PyDict::new(a.py());
        kwargs.set_item("copy", false)?;
        let flat =
            arr.call_method1("reshape", (-1,))?
                .call_method("astype", (target,), Some(&kwargs))?;
        fn vec_of<T: numpy::Element + Copy>(flat: &Bound<'_, PyAny>) -> PyResult<Vec<T>> {
            let view = flat
                .cast::<numpy::PyArray1<T>>()?
                .try_readonly()
                .map_err(|e| BindError::new_err(format!("an argument cannot be read: {e}")))?;
            Ok(view.as_slice()?.to_vec())
        }
        let d = match target {
            "float32" => ArrayData::F32(vec_of(&flat)?),
            "float64" => ArrayData::F64(vec_of(&flat)?),
            "int8" => ArrayData::I8(vec_of(&flat)?),
            "int32" => ArrayData::I32(vec_of(&flat)?),
            "int64" => ArrayData::I64(vec_of(&flat)?),
            _ => ArrayData::I64(
                vec_of::<u64>(&flat)?
                    .into_iter()
                    .map(i64::try_from)
                    .collect::<Result<_, _>>()
                    .map_err(|_| {
                        BindError::new_err(format!("{what}: a value does not fit int64"))
                    })?,
            ),
        };
        Ok((shape, d))
    }
    match arg {
        Arg::Dense(a) => {
            let (shape, data) = data(np, a, &format!("argument `{name}`"))?;
            Ok(Input::Dense(DenseArray { shape, data }))
        }
        Arg::Csr(shape, indptr, indices, values) => {
            let what = |part: &str| format!("argument `{name}` {part}");
            // Canonical CSR (each row's columns increasing) is taken as it is stored, at its
            // index widths, once every check of assembled storage passes: co-iteration
            // kernels then read it without a detour through coordinates. Anything else
            // (unsorted or repeated columns, a malformed indptr) is read again and goes
            // through coordinates, which sort, sum repeats or say what is wrong.
            // Index arrays of integers only: a float index would be truncated.
            let index = |a: &Bound<'_, PyAny>, part: &str| -> PyResult<ArrayData> {
                let d = data(np, a, &what(part))?.1;
                if d.dtype().is_int() {
                    Ok(d)
                } else {
                    Err(BindError::new_err(format!(
                        "{} has element type {}, which is not an integer type",
                        what(part),
                        numpy_name(d.dtype())
                    )))
                }
            };
            let ip = IndexArray::from_signed(index(indptr, "indptr")?);
            let ind = IndexArray::from_signed(index(indices, "indices")?);
            let (_, vals) = data(np, values, &what("data"))?;
            let width = |a: &IndexArray| match a {
                IndexArray::U32(_) => lacuna_ir::encoding::IndexWidth::W32,
                _ => lacuna_ir::encoding::IndexWidth::Native,
            };
            let enc = lacuna_ir::encoding::preset("csr")
                .map_err(|e| internal("run", e.to_string()))?
                .with_widths(width(&ip), width(&ind));
            if let Ok(t) = lacuna_ir::storage::SparseTensor::assemble(
                &enc,
                shape,
                vec![ip, ind],
                vals,
                lacuna_ir::storage::Validation::Checked,
            ) {
                return Ok(Input::Sparse(t));
            }
            let ip = index(indptr, "indptr")?.to_i64_vec();
            let ind = index(indices, "indices")?.to_i64_vec();
            let (_, values) = data(np, values, &what("data"))?;
            if ip.len() != shape[0] + 1
                || ip.last().copied() != Some(ind.len() as i64)
                || ind.len() != values.len()
            {
                return Err(ShapeError::new_err(format!(
                    "argument `{name}`: a CSR matrix of {} rows needs {} indptr entries ending at the number of indices ({}) and values ({})",
                    shape[0], shape[0] + 1, ind.len(), values.len()
                )));
            }
            let mut rows = Vec::with_capacity(ind.len());
            for r in 0..shape[0] {
                let (s, t) = (ip[r], ip[r + 1]);
                if s < 0 || t < s || t as usize > ind.len() {
                    return Err(BindError::new_err(format!(
                        "argument `{name}`: indptr is not monotone at row {r}"
                    )));
                }
                rows.extend(std::iter::repeat_n(r, (t - s) as usize));
            }
            let cols = ind
                .iter()
                .map(|&c| usize::try_from(c))
                .collect::<Result<Vec<usize>, _>>()
                .map_err(|_| {
                    BindError::new_err(format!("argument `{name}`: a negative column index"))
                })?;
            Ok(Input::Coo(CooTensor {
                shape: shape.to_vec(),
                coords: vec![rows, cols],
                values,
            }))
        }
    }
}

/// A result stored as CSR ([`lacuna_ir::encoding::Encoding::is_csr`]) as
/// `("csr", shape, indptr, indices, data)`, its arrays moved into NumPy,
/// not copied, where the tensor owns them alone; `Err` with the tensor for other storage.
fn csr_arrays<'py>(
    py: Python<'py>,
    t: lacuna_ir::storage::SparseTensor,
) -> PyResult<Result<Bound<'py, PyTuple>, lacuna_ir::storage::SparseTensor>> {
    if !t.encoding().is_csr() {
        return Ok(Err(t));
    }
    let shape = t.dim_shape().to_vec();
    let (buffers, values) = t.into_buffers();
    let Ok([indptr, indices]) = <[IndexArray; 2]>::try_from(buffers) else {
        return Err(internal(
            "run",
            "a CSR result without two index arrays".to_string(),
        ));
    };
    // Indices as NumPy's signed integers: 32-bit where every entry of both arrays fits, as
    // SciPy stores them (its constructor would otherwise scan and cast them again), the same
    // buffers where they are 32-bit already; 64-bit otherwise.
    let small = [&indptr, &indices].iter().all(|a| match a {
        IndexArray::U64(v) => v.iter().all(|&x| x <= i32::MAX as u64),
        _ => true,
    });
    let signed = |a: IndexArray| -> ArrayData {
        match a {
            IndexArray::U64(v) if small => ArrayData::I32(v.iter().map(|&x| x as i32).collect()),
            a => a
                .into_signed_as(DType::I32)
                .or_else(|a| a.into_signed_as(DType::I64))
                .unwrap_or_else(|a| {
                    ArrayData::I64(a.to_u64_vec().into_iter().map(|x| x as i64).collect())
                }),
        }
    };
    let n = values.len();
    Ok(Ok(PyTuple::new(
        py,
        [
            "csr".into_pyobject(py)?.into_any(),
            PyTuple::new(py, &shape)?.into_any(),
            into_numpy(py, signed(indptr), &[shape[0] + 1])?,
            into_numpy(py, signed(indices), &[n])?,
            into_numpy(py, values, &[n])?,
        ],
    )?))
}

/// A sparse result stored other than as CSR: `("coo", shape, [coordinates per dimension],
/// values)`.
fn coo_tuple<'py>(py: Python<'py>, c: &CooTensor) -> PyResult<Bound<'py, PyTuple>> {
    let coords = PyList::empty(py);
    for dim in &c.coords {
        coords.append(numpy::PyArray1::from_iter(
            py,
            dim.iter().map(|&x| x as i64),
        ))?;
    }
    PyTuple::new(
        py,
        [
            "coo".into_pyobject(py)?.into_any(),
            PyTuple::new(py, &c.shape)?.into_any(),
            coords.into_any(),
            to_numpy(py, &c.values, &[c.values.len()])?,
        ],
    )
}

fn to_numpy<'py>(
    py: Python<'py>,
    data: &ArrayData,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let flat: Bound<'py, PyAny> = match data {
        ArrayData::F32(v) => numpy::PyArray1::from_slice(py, v).into_any(),
        ArrayData::F64(v) => numpy::PyArray1::from_slice(py, v).into_any(),
        ArrayData::I8(v) => numpy::PyArray1::from_slice(py, v).into_any(),
        ArrayData::I32(v) => numpy::PyArray1::from_slice(py, v).into_any(),
        ArrayData::I64(v) => numpy::PyArray1::from_slice(py, v).into_any(),
    };
    flat.call_method1("reshape", (PyTuple::new(py, shape)?,))
}

/// `data` as a NumPy array of `shape`, without copying it.
fn into_numpy<'py>(
    py: Python<'py>,
    data: ArrayData,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let flat: Bound<'py, PyAny> = match data {
        ArrayData::F32(v) => numpy::PyArray1::from_vec(py, v).into_any(),
        ArrayData::F64(v) => numpy::PyArray1::from_vec(py, v).into_any(),
        ArrayData::I8(v) => numpy::PyArray1::from_vec(py, v).into_any(),
        ArrayData::I32(v) => numpy::PyArray1::from_vec(py, v).into_any(),
        ArrayData::I64(v) => numpy::PyArray1::from_vec(py, v).into_any(),
    };
    flat.call_method1("reshape", (PyTuple::new(py, shape)?,))
}

#[pymethods]
impl PyExecutable {
    /// The target it was built for.
    #[getter]
    fn target(&self) -> &'static str {
        self.target.name()
    }

    /// The input buffers.
    #[getter]
    fn inputs(&self) -> Vec<String> {
        names(&self.program, Role::Input)
    }

    /// The output buffers.
    #[getter]
    fn outputs(&self) -> Vec<String> {
        names(&self.program, Role::Output)
    }

    /// Runs on `inputs` (buffer name -> ndarray or `("csr", shape, indptr, indices, data)`).
    /// Returns `(outputs, copies)`: outputs by name (ndarrays, or `("csr", shape, indptr,
    /// indices, data)` / `("coo", shape, coords, values)` for sparse ones), and the arguments
    /// that had to be copied.
    /// `threads`: the number of threads parallel loops run on (a pool of that size, kept for
    /// later calls); the global pool (`RAYON_NUM_THREADS`, or one per core) when `None`.
    #[pyo3(signature = (inputs, params = None, out = None, copy = true, threads = None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyDict>,
        params: Option<BTreeMap<String, i64>>,
        out: Option<&Bound<'py, PyDict>>,
        copy: bool,
        threads: Option<usize>,
    ) -> PyResult<(Bound<'py, PyDict>, Vec<String>)> {
        if threads.is_some_and(|n| !(1..=lacuna::target::MAX_THREADS).contains(&n)) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "threads: 1 to {} (or None for the default pool)",
                lacuna::target::MAX_THREADS
            )));
        }
        let params = params.unwrap_or_default();
        lacuna::driver::check_param_names(&self.program.name, &self.declared, &params)
            .map_err(|e| driver_error(&e))?;
        let np = numpy_module(py)?;
        let mut args: BTreeMap<String, Arg<'py>> = BTreeMap::new();
        for (k, v) in inputs.iter() {
            let name: String = k.extract()?;
            let arg = parse_arg(&name, &v)?;
            args.insert(name, arg);
        }
        let known = names(&self.program, Role::Input);
        if let Some(name) = args.keys().find(|n| !known.contains(n)) {
            return Err(bind_error(&lacuna_stage1::BindError::UnknownInput {
                name: name.clone(),
                kernel: self.program.name.clone(),
                known: known.join(", "),
            }));
        }
        let mut outs: BTreeMap<String, Bound<'py, PyAny>> = BTreeMap::new();
        if let Some(out) = out {
            for (k, v) in out.iter() {
                let name: String = k.extract()?;
                if !self
                    .program
                    .buffers
                    .iter()
                    .any(|b| b.name == name && b.role == Role::Output)
                {
                    return Err(BindError::new_err(format!(
                        "out: `{name}` is not an output buffer of kernel `{}` (its outputs: {})",
                        self.program.name,
                        names(&self.program, Role::Output).join(", ")
                    )));
                }
                outs.insert(name, v);
            }
        }
        let mut copies = Vec::new();
        let result = if self.zero_copy_possible(&args) {
            self.run_views(py, &np, &args, &params, &outs, copy, &mut copies, threads)?
        } else {
            if !copy {
                return Err(BindError::new_err(format!(
                    "kernel `{}` on target {} takes these arguments only by copying them (co-iteration, encoded or decomposed buffers, an interpreter, or an argument that is not a dense array / CSR matrix for its buffer), but copy=False",
                    self.program.name,
                    self.target.name()
                )));
            }
            self.run_owned(py, &np, &args, &params, &outs, threads)?
        };
        Ok((result, copies))
    }
}

/// Runs `f` on a rayon pool of `threads` threads, or on the current (global) pool for `None`.
/// Pools are built once per thread count and kept, so calls spawn no threads.
fn in_pool<R: Send>(threads: Option<usize>, f: impl FnOnce() -> R + Send) -> Result<R, String> {
    use std::sync::{Arc, Mutex, OnceLock};
    static POOLS: OnceLock<Mutex<BTreeMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let Some(n) = threads else {
        return Ok(f());
    };
    let pool = {
        let mut pools = POOLS
            .get_or_init(Default::default)
            .lock()
            .map_err(|_| "the thread pool registry is poisoned".to_string())?;
        match pools.get(&n) {
            Some(p) => Arc::clone(p),
            None => {
                let p = Arc::new(
                    lacuna::target::pool_builder(n)
                        .build()
                        .map_err(|e| format!("threads={n}: no thread pool: {e}"))?,
                );
                pools.insert(n, Arc::clone(&p));
                p
            }
        }
    };
    Ok(pool.install(f))
}

fn names(p: &Program, role: Role) -> Vec<String> {
    p.buffers
        .iter()
        .filter(|b| b.role == role)
        .map(|b| b.name.clone())
        .collect()
}

impl PyExecutable {
    fn zero_copy_possible(&self, args: &BTreeMap<String, Arg<'_>>) -> bool {
        let Inner::Standard {
            exe: Executable::Jit(_),
            conversions,
        } = &self.inner
        else {
            return false;
        };
        if !conversions.is_empty() {
            return false;
        }
        let p = &self.program;
        let inputs_ok = p.buffers.iter().filter(|b| b.role == Role::Input).all(|b| {
            match (view_form(p, &b.name), args.get(&b.name)) {
                (Some(ViewForm::Dense), Some(Arg::Dense(_))) => true,
                (Some(ViewForm::Csr { .. }), Some(Arg::Csr(..))) => true,
                // A missing input is reported by the binder.
                (_, None) => true,
                _ => false,
            }
        });
        let outputs_ok = p.buffers.iter().filter(|b| b.role != Role::Input).all(|b| {
            match view_form(p, &b.name) {
                Some(ViewForm::Dense) => true,
                Some(ViewForm::Csr { axis, .. }) => b.role == Role::Alloc || p.buffers.iter().any(|i| {
                    i.role == Role::Input && matches!(view_form(p, &i.name), Some(ViewForm::Csr { axis: a, .. }) if a == axis)
                }),
                None => b.role == Role::Alloc,
            }
        });
        inputs_ok && outputs_ok
    }

    #[allow(clippy::too_many_arguments)]
    fn run_views<'py>(
        &self,
        py: Python<'py>,
        np: &Bound<'py, PyModule>,
        args: &BTreeMap<String, Arg<'py>>,
        params: &BTreeMap<String, i64>,
        outs: &BTreeMap<String, Bound<'py, PyAny>>,
        copy: bool,
        copies: &mut Vec<String>,
        threads: Option<usize>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let Inner::Standard {
            exe: Executable::Jit(kernel),
            ..
        } = &self.inner
        else {
            unreachable!("zero_copy_possible checked the executable");
        };
        let p = &self.program;
        // Arrays usable as they are (or converted copies), kept alive for the call.
        let mut prep = Prep {
            py,
            np: np.clone(),
            copy,
            copies,
        };
        struct Prepared<'py> {
            shape: Vec<usize>,
            arrays: Vec<Bound<'py, PyAny>>,
        }
        let mut prepared: BTreeMap<String, Prepared<'py>> = BTreeMap::new();
        // Axis -> the (indptr, indices) arrays bound to it, to return sparse outputs over it.
        let mut structure: BTreeMap<String, (Bound<'py, PyAny>, Bound<'py, PyAny>)> =
            BTreeMap::new();
        for (name, arg) in args {
            let Some(buf) = p.buffer(name) else {
                continue; // reported by the binder
            };
            match (arg, view_form(p, name)) {
                (Arg::Dense(a), _) => {
                    let arr = prep.array(a, buf.dtype, &format!("argument `{name}`"))?;
                    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
                    prepared.insert(
                        name.clone(),
                        Prepared {
                            shape,
                            arrays: vec![arr],
                        },
                    );
                }
                (Arg::Csr(shape, ip, ind, vals), Some(ViewForm::Csr { axis, index })) => {
                    let ip = prep.array(ip, index, &format!("argument `{name}` indptr"))?;
                    let ind = prep.array(ind, index, &format!("argument `{name}` indices"))?;
                    let vals = prep.array(vals, buf.dtype, &format!("argument `{name}` data"))?;
                    for (a, what) in [(&ip, "indptr"), (&ind, "indices"), (&vals, "data")] {
                        if a.getattr("ndim")?.extract::<usize>()? != 1 {
                            return Err(ShapeError::new_err(format!(
                                "argument `{name}`: {what} must be one-dimensional"
                            )));
                        }
                    }
                    structure.entry(axis).or_insert((ip.clone(), ind.clone()));
                    prepared.insert(
                        name.clone(),
                        Prepared {
                            shape: shape.to_vec(),
                            arrays: vec![ip, ind, vals],
                        },
                    );
                }
                (Arg::Csr(..), _) => unreachable!("zero_copy_possible checked the forms"),
            }
        }
        // Every Python call comes before the validation below: Python code run after it (a
        // property of an ndarray subclass, a finalizer) could change the arrays it accepted.
        // Given outputs: checked, and their shapes read, here; compared after binding.
        let mut given: BTreeMap<String, (Bound<'py, PyAny>, Vec<usize>)> = BTreeMap::new();
        for buf in p.buffers.iter().filter(|b| b.role == Role::Output) {
            let Some(arr) = outs.get(&buf.name) else {
                continue;
            };
            if !usable(arr, buf.dtype)?
                || !arr
                    .getattr("flags")?
                    .getattr("writeable")?
                    .extract::<bool>()?
            {
                return Err(BindError::new_err(format!(
                    "out `{}` must be a writeable, C-contiguous {} ndarray (it is written in place)",
                    buf.name,
                    numpy_name(buf.dtype)
                )));
            }
            let shape = arr.cast::<PyUntypedArray>()?.shape().to_vec();
            given.insert(buf.name.clone(), (arr.clone(), shape));
        }
        // Borrow the inputs read-only and the given outputs read-write.
        let guards: BTreeMap<&String, Vec<ReadGuard<'py>>> = prepared
            .iter()
            .map(|(name, pr)| {
                let g = pr
                    .arrays
                    .iter()
                    .map(|a| read(a, &format!("argument `{name}`")))
                    .collect::<PyResult<Vec<_>>>()?;
                Ok((name, g))
            })
            .collect::<PyResult<_>>()?;
        let mut out_guards: BTreeMap<String, WriteGuard<'py>> = BTreeMap::new();
        for (name, (arr, _)) in &given {
            out_guards.insert(name.clone(), write(arr, &format!("out `{name}`"))?);
        }
        // No Python code runs from here until the kernel has returned.
        //
        // An output must not share memory with an input or another output: the kernel would
        // read what it wrote. (NumPy's borrow checks see overlaps within one base array only.)
        let span = |ptr: *const u8, bytes: usize| (ptr as usize, ptr as usize + bytes);
        let mut spans: Vec<(String, (usize, usize))> = Vec::new();
        for (name, g) in &guards {
            for v in g.iter().map(ReadGuard::view) {
                let bytes = v.len() * v.dtype().size_bytes();
                spans.push((format!("argument `{name}`"), span(v.as_ptr(), bytes)));
            }
        }
        for (name, g) in &out_guards {
            let (ptr, bytes) = g.bytes();
            let (lo, hi) = span(ptr, bytes);
            if let Some((other, _)) = spans.iter().find(|(_, (l, h))| lo < *h && *l < hi) {
                return Err(BindError::new_err(format!(
                    "out `{name}` shares memory with {other} (the kernel would read what it writes)"
                )));
            }
            spans.push((format!("out `{name}`"), (lo, hi)));
        }
        // The machine code trusts the structure arrays (and coordinate buffers): their bounds
        // are checked once, below. The kernel runs on validated copies of them, which no other
        // thread (Python without the GIL, native code, another view of the memory) can change.
        let trusted: Vec<(&String, usize)> = prepared
            .iter()
            .flat_map(|(name, pr)| {
                let coords = p.buffer(name).is_some_and(|b| b.coordinates_of.is_some());
                let n = match pr.arrays.len() {
                    3 => 2,
                    _ if coords => 1,
                    _ => 0,
                };
                (0..n).map(move |k| (name, k))
            })
            .collect();
        let snapshots: BTreeMap<(String, usize), ArrayData> = trusted
            .iter()
            .map(|&(n, k)| ((n.clone(), k), guards[n][k].view().to_owned()))
            .collect();
        fn view_in<'a>(
            snapshots: &'a BTreeMap<(String, usize), ArrayData>,
            guards: &'a [ReadGuard<'_>],
            name: &str,
            k: usize,
        ) -> ArrayView<'a> {
            match snapshots.get(&(name.to_string(), k)) {
                Some(owned) => owned.view(),
                None => guards[k].view(),
            }
        }
        let view_of = |name: &String, k: usize| view_in(&snapshots, &guards[name], name, k);
        let views: BTreeMap<String, InputView<'_>> = guards
            .iter()
            .map(|(name, g)| {
                let shape = &prepared[*name].shape;
                let v = match g.len() {
                    1 => InputView::Dense {
                        shape,
                        data: view_of(name, 0),
                    },
                    3 => InputView::Csr {
                        shape: [shape[0], shape[1]],
                        indptr: view_of(name, 0),
                        indices: view_of(name, 1),
                        values: view_of(name, 2),
                    },
                    _ => unreachable!("one or three arrays per input"),
                };
                ((*name).clone(), v)
            })
            .collect();
        let bound: BindingsView<'_> = bind_views(p, &views, params).map_err(|e| bind_error(&e))?;
        // Outputs: the user's arrays, checked, or new ones (NumPy arrays after the run);
        // allocated buffers: owned.
        let mut fresh: BTreeMap<String, (ArrayData, Vec<usize>)> = BTreeMap::new();
        let mut allocs: BTreeMap<String, ArrayData> = BTreeMap::new();
        for buf in p.buffers.iter().filter(|b| b.role != Role::Input) {
            let len = buffer_len_view(p, &bound, &buf.name).map_err(|e| bind_error(&e))?;
            let too_large = || {
                bind_error(&lacuna_stage1::BindError::TooLarge {
                    buffer: buf.name.clone(),
                })
            };
            if buf.role == Role::Alloc {
                let total = len
                    .checked_add(usize::try_from(buf.extra_storage).map_err(|_| too_large())?)
                    .ok_or_else(too_large)?;
                let data = ArrayData::try_zeros(buf.dtype, total).ok_or_else(too_large)?;
                allocs.insert(buf.name.clone(), data);
                continue;
            }
            let shape: Vec<usize> = match view_form(p, &buf.name) {
                Some(ViewForm::Dense) => buf
                    .axes
                    .iter()
                    .map(|a| match &p.axis(a).expect("verified").kind {
                        AxisKind::DenseFixed { n } => {
                            size_value(n, &bound.params).unwrap_or(0) as usize
                        }
                        _ => unreachable!("dense form"),
                    })
                    .collect(),
                _ => vec![len],
            };
            match (given.get(&buf.name), out_guards.get(&buf.name)) {
                (Some((_, given_shape)), Some(g)) => {
                    if *given_shape != shape {
                        return Err(ShapeError::new_err(format!(
                            "out `{}` has shape {given_shape:?}, the kernel writes {shape:?}",
                            buf.name
                        )));
                    }
                    check_length(p, &bound, &buf.name, "values", g.len())
                        .map_err(|e| bind_error(&e))?;
                }
                _ => {
                    let data = ArrayData::try_zeros(buf.dtype, len).ok_or_else(too_large)?;
                    fresh.insert(buf.name.clone(), (data, shape));
                }
            }
        }
        let mut raw = RawBindings {
            params: bound.params.clone(),
            ..RawBindings::default()
        };
        let as_raw = |v: &ArrayView<'_>| RawArray {
            ptr: v.as_ptr().cast_mut(),
            len: v.len(),
            dtype: v.dtype(),
        };
        for (name, v) in &bound.buffers {
            raw.buffers.insert(name.clone(), as_raw(v));
        }
        for (axis, a) in &bound.axes {
            if let Some(ip) = &a.indptr {
                raw.indptr.insert(axis.clone(), as_raw(ip));
            }
            if let Some(ind) = &a.indices {
                raw.indices.insert(axis.clone(), as_raw(ind));
            }
        }
        for (name, g) in out_guards.iter_mut() {
            raw.buffers.insert(name.clone(), g.zeroed_raw());
        }
        let owned = |a: &mut ArrayData| RawArray {
            ptr: a.as_mut_ptr(),
            len: a.len(),
            dtype: a.dtype(),
        };
        for (name, (a, _)) in fresh.iter_mut() {
            raw.buffers.insert(name.clone(), owned(a));
        }
        for (name, a) in allocs.iter_mut() {
            raw.buffers.insert(name.clone(), owned(a));
        }
        let raw = SendRaw(raw);
        let kernel: &CompiledKernel = kernel;
        // SAFETY: every input array was validated by `bind_views` against the parameters in
        // `raw` (lengths, structure, element types); the arrays the kernel trusts for addresses
        // (structure, coordinates) are the validated copies, owned here; every output and
        // allocated buffer has the length `check_length` or the binding gave it, is borrowed
        // read-write (NumPy) or owned until the call returns, and overlaps no other array
        // (checked above). Values another thread changes meanwhile give other values, as in
        // NumPy's own operations without the GIL, never other addresses.
        let run = move || {
            let raw = raw;
            in_pool(threads, move || {
                let raw = raw;
                catch(|| unsafe { kernel.run_raw(&raw.0) })
            })
        };
        let ran = py
            .detach(run)
            .map_err(crate::errors::ExecutionError::new_err)?;
        drop(out_guards);
        match ran {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(crate::errors::ExecutionError::new_err(e.to_string())),
            Err(panic) => return Err(internal("run", panic)),
        }
        let mut out_arrays: BTreeMap<String, Bound<'py, PyAny>> = given
            .into_iter()
            .map(|(name, (arr, _))| (name, arr))
            .collect();
        for (name, (data, shape)) in fresh {
            out_arrays.insert(name, into_numpy(py, data, &shape)?);
        }
        let result = PyDict::new(py);
        for (name, arr) in out_arrays {
            match view_form(p, &name) {
                Some(ViewForm::Csr { axis, .. }) => {
                    let (ip, ind) = structure
                        .get(&axis)
                        .expect("zero_copy_possible checked the axis is an input's")
                        .clone();
                    let buf = p.buffer(&name).expect("verified");
                    let dims: Vec<usize> = buf
                        .axes
                        .iter()
                        .map(|a| {
                            size_value(
                                p.axis(a).expect("verified").kind.coord_extent(),
                                &bound.params,
                            )
                            .unwrap_or(0) as usize
                        })
                        .collect();
                    let t = PyTuple::new(
                        py,
                        [
                            "csr".into_pyobject(py)?.into_any(),
                            PyTuple::new(py, &dims)?.into_any(),
                            ip,
                            ind,
                            arr,
                        ],
                    )?;
                    result.set_item(name, t)?;
                }
                _ => result.set_item(name, arr)?,
            }
        }
        Ok(result)
    }

    fn run_owned<'py>(
        &self,
        py: Python<'py>,
        np: &Bound<'py, PyModule>,
        args: &BTreeMap<String, Arg<'py>>,
        params: &BTreeMap<String, i64>,
        outs: &BTreeMap<String, Bound<'py, PyAny>>,
        threads: Option<usize>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let inputs: BTreeMap<String, Input> = args
            .iter()
            .map(|(name, a)| Ok((name.clone(), owned_input(np, name, a)?)))
            .collect::<PyResult<_>>()?;
        let p = &self.program;
        let inner = &self.inner;
        let params = params.clone();
        let ran = py
            .detach(move || {
                in_pool(threads, move || {
                    catch(
                        move || -> Result<BTreeMap<String, Output>, lacuna::driver::DriverError> {
                            match inner {
                                Inner::Standard { exe, conversions } => {
                                    let given = convert_inputs(conversions, &inputs)?;
                                    let mut b: Bindings = bind_with(p, &inputs, &params, given)?;
                                    reset_outputs(p, &mut b);
                                    exe.run(p, &mut b)?;
                                    let mut outputs = BTreeMap::new();
                                    for buf in p.buffers.iter().filter(|x| x.role == Role::Output) {
                                        outputs.insert(buf.name.clone(), unpack(p, &b, &buf.name)?);
                                    }
                                    Ok(outputs)
                                }
                                Inner::Coiter { wide, narrow } => {
                                    let name = wide.kernel().assignment.output().name.clone();
                                    let out = wide.run_owned(narrow, inputs, &params)?;
                                    Ok(BTreeMap::from([(name, out)]))
                                }
                            }
                        },
                    )
                })
            })
            .map_err(crate::errors::ExecutionError::new_err)?;
        let outputs = match ran {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => return Err(driver_error(&e)),
            Err(panic) => return Err(internal("run", panic)),
        };
        let result = PyDict::new(py);
        for (name, o) in outputs {
            match o {
                Output::Dense(d) => {
                    let arr = to_numpy(py, &d.data, &d.shape)?;
                    match outs.get(&name) {
                        Some(given) => {
                            let given_shape: Vec<usize> = given.getattr("shape")?.extract()?;
                            if given_shape != d.shape {
                                return Err(ShapeError::new_err(format!(
                                    "out `{name}` has shape {given_shape:?}, the kernel writes {:?}",
                                    d.shape
                                )));
                            }
                            np.call_method1("copyto", (given, &arr))?;
                            result.set_item(name, given)?;
                        }
                        None => result.set_item(name, arr)?,
                    }
                }
                Output::Coo(_) | Output::Sparse(_) if outs.contains_key(&name) => {
                    return Err(BindError::new_err(format!(
                        "out `{name}`: a sparse result is returned, not written into an array"
                    )));
                }
                Output::Sparse(t) => {
                    let value = match csr_arrays(py, t)? {
                        Ok(csr) => csr,
                        Err(t) => coo_tuple(py, &t.to_coo())?,
                    };
                    result.set_item(name, value)?;
                }
                Output::Coo(c) => result.set_item(name, coo_tuple(py, &c)?)?,
            }
        }
        Ok(result)
    }
}

/// Raw pointers moved into the GIL-free closure; see the safety comment at the call.
struct SendRaw(RawBindings);
// SAFETY: the pointed-to arrays stay borrowed (and alive) by the calling thread until the
// closure returns; the kernel only reads inputs and writes its own exclusive outputs.
unsafe impl Send for SendRaw {}
