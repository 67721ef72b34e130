//! NumPy `.npy` files (format versions 1.0, 2.0 and 3.0): reader and writer.

use super::atomic::write_atomic;
use super::error::{snippet, IoError};
use super::lex::read_file;
use super::npy_header::Header;
use crate::{ArrayData, DType, DenseArray};
use std::path::Path;

const MAGIC: &[u8] = b"\x93NUMPY";
const SUPPORTED: &str = "supported: '|i1', '<f4', '<f8', '<i4', '<i8'";

/// Reads a `.npy` file (see [`parse_npy`]).
pub fn read_npy(path: &Path) -> Result<DenseArray, IoError> {
    parse_npy(&read_file(path)?, path)
}

/// Parses the bytes of a `.npy` file; `path` is used only in error messages.
///
/// Accepts format versions 1.0, 2.0 and 3.0 and the little-endian dtypes `<f4`, `<f8`, `<i4`
/// and `<i8`; any other descr (big-endian, bool, unsigned, structured...) is
/// [`IoError::Unsupported`]. A Fortran-order array is transposed into C order. Shape `()` gives
/// a 0-d array (`shape == []`, one element). The data must be exactly as long as the shape says.
pub fn parse_npy(bytes: &[u8], path: &Path) -> Result<DenseArray, IoError> {
    let malformed = |reason: String| IoError::Npy {
        path: path.to_path_buf(),
        reason,
    };
    if bytes.get(..MAGIC.len()) != Some(MAGIC) {
        return Err(malformed(
            "missing the magic string \\x93NUMPY at the start".into(),
        ));
    }
    let (Some(&major), Some(&minor)) = (bytes.get(6), bytes.get(7)) else {
        return Err(malformed("truncated before the format version".into()));
    };
    let (len_bytes, start) = match major {
        1 => (bytes.get(8..10), 10usize),
        2 | 3 => (bytes.get(8..12), 12usize),
        _ => {
            return Err(IoError::Unsupported {
                path: path.to_path_buf(),
                line: None,
                what: format!(".npy format version {major}.{minor} (supported: 1.0, 2.0, 3.0)"),
            })
        }
    };
    let header_len = match len_bytes {
        Some(&[a, b]) => u16::from_le_bytes([a, b]) as usize,
        Some(&[a, b, c, d]) => {
            usize::try_from(u32::from_le_bytes([a, b, c, d])).unwrap_or(usize::MAX)
        }
        _ => return Err(malformed("truncated before the header length".into())),
    };
    let data_start = start.saturating_add(header_len);
    let Some(header) = bytes.get(start..data_start) else {
        return Err(malformed(format!(
            "header of {header_len} bytes is truncated (file has {} bytes)",
            bytes.len()
        )));
    };
    let header = std::str::from_utf8(header).map_err(|_| malformed("header is not text".into()))?;
    let hdr = Header::parse(header).map_err(malformed)?;
    let dtype = match hdr.descr.as_str() {
        "<f4" => DType::F32,
        "<f8" => DType::F64,
        "|i1" | "<i1" => DType::I8,
        "<i4" => DType::I32,
        "<i8" => DType::I64,
        d => {
            return Err(IoError::Unsupported {
                path: path.to_path_buf(),
                line: None,
                what: format!("dtype descr '{}' ({SUPPORTED})", snippet(d)),
            })
        }
    };
    let overflow = || IoError::Overflow {
        path: path.to_path_buf(),
        line: None,
        what: format!("the byte size of shape {:?}", hdr.shape),
    };
    let count = hdr
        .shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    let nbytes = count.checked_mul(dtype.size_bytes()).ok_or_else(overflow)?;
    let data = bytes.get(data_start..).unwrap_or(&[]);
    if data.len() != nbytes {
        return Err(IoError::NpyLength {
            path: path.to_path_buf(),
            shape: hdr.shape,
            descr: hdr.descr,
            expected_bytes: nbytes,
            found_bytes: data.len(),
        });
    }
    let mut data = decode(dtype, data);
    if hdr.fortran_order && hdr.shape.len() > 1 {
        data = match data {
            ArrayData::F32(v) => ArrayData::F32(fortran_to_c(&v, &hdr.shape)),
            ArrayData::F64(v) => ArrayData::F64(fortran_to_c(&v, &hdr.shape)),
            ArrayData::I8(v) => ArrayData::I8(fortran_to_c(&v, &hdr.shape)),
            ArrayData::I32(v) => ArrayData::I32(fortran_to_c(&v, &hdr.shape)),
            ArrayData::I64(v) => ArrayData::I64(fortran_to_c(&v, &hdr.shape)),
        };
    }
    Ok(DenseArray {
        shape: hdr.shape,
        data,
    })
}

/// Decodes little-endian elements; `bytes.len()` is a multiple of the element size.
fn decode(dtype: DType, bytes: &[u8]) -> ArrayData {
    fn words<const N: usize>(bytes: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
        bytes.chunks_exact(N).map(|c| {
            let mut w = [0u8; N];
            w.copy_from_slice(c);
            w
        })
    }
    match dtype {
        DType::F32 => ArrayData::F32(words::<4>(bytes).map(f32::from_le_bytes).collect()),
        DType::I8 => ArrayData::I8(words::<1>(bytes).map(i8::from_le_bytes).collect()),
        DType::I32 | DType::Bool => {
            ArrayData::I32(words::<4>(bytes).map(i32::from_le_bytes).collect())
        }
        DType::F64 => ArrayData::F64(words::<8>(bytes).map(f64::from_le_bytes).collect()),
        DType::I64 => ArrayData::I64(words::<8>(bytes).map(i64::from_le_bytes).collect()),
    }
}

/// Reorders column-major (first index fastest) elements into row-major order.
fn fortran_to_c<T: Copy>(v: &[T], shape: &[usize]) -> Vec<T> {
    let n = shape.len();
    // Column-major strides: stride[0] = 1, stride[d] = stride[d - 1] * shape[d - 1].
    let mut stride = vec![1usize; n];
    for d in 1..n {
        stride[d] = stride[d - 1].saturating_mul(shape[d - 1]);
    }
    let mut idx = vec![0usize; n];
    let mut off = 0usize;
    let mut out = Vec::with_capacity(v.len());
    for _ in 0..v.len() {
        out.extend(v.get(off).copied());
        // Advance the row-major multi-index (last dimension fastest), keeping `off` in step.
        for d in (0..n).rev() {
            idx[d] += 1;
            off += stride[d];
            if idx[d] < shape[d] {
                break;
            }
            off -= stride[d] * idx[d];
            idx[d] = 0;
        }
    }
    out
}

/// The bytes of a `.npy` file holding `a`: format 1.0 (2.0 if the header needs it), C order,
/// little-endian, header padded with spaces and a final `\n` to a multiple of 64 bytes, exactly
/// as NumPy writes it. `path` is used only in error messages.
pub fn encode_npy(a: &DenseArray, path: &Path) -> Result<Vec<u8>, IoError> {
    let count = a
        .shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d));
    if count != Some(a.data.len()) {
        return Err(IoError::InvalidTensor {
            path: path.to_path_buf(),
            reason: format!(
                "shape {:?} does not match {} elements",
                a.shape,
                a.data.len()
            ),
        });
    }
    let descr = match a.data.dtype() {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::I8 => "|i1",
        DType::I32 | DType::Bool => "<i4",
        DType::I64 => "<i8",
    };
    let shape = match a.shape.as_slice() {
        [d] => format!("({d},)"),
        s => format!(
            "({})",
            s.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Like NumPy: spare room so the first dimension can grow to 21 digits in place.
    if let Some(first) = a.shape.first() {
        header.push_str(&" ".repeat(21usize.saturating_sub(first.to_string().len())));
    }
    // Like NumPy: (magic + version + length field + header + '\n') is a multiple of 64, with 1 to
    // 64 spaces of padding; version 1.0 unless the length does not fit its 16-bit field.
    let padded = |prefix: usize| header.len() + 1 + 64 - (prefix + header.len() + 1) % 64;
    let version_1 = u16::try_from(padded(10)).ok();
    let prefix = if version_1.is_some() { 10 } else { 12 };
    let header_len = padded(prefix);
    header.push_str(&" ".repeat(header_len - header.len() - 1));
    header.push('\n');
    let data_len = a.data.len().saturating_mul(a.data.dtype().size_bytes());
    let mut out = Vec::with_capacity(prefix.saturating_add(header_len).saturating_add(data_len));
    out.extend_from_slice(MAGIC);
    match (version_1, u32::try_from(header_len)) {
        (Some(len), _) => {
            out.extend_from_slice(&[1, 0]);
            out.extend_from_slice(&len.to_le_bytes());
        }
        (None, Ok(len)) => {
            out.extend_from_slice(&[2, 0]);
            out.extend_from_slice(&len.to_le_bytes());
        }
        (None, Err(_)) => {
            return Err(IoError::InvalidTensor {
                path: path.to_path_buf(),
                reason: format!("a {}-D shape does not fit a .npy header", a.shape.len()),
            })
        }
    }
    out.extend_from_slice(header.as_bytes());
    match &a.data {
        ArrayData::F32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        ArrayData::F64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        ArrayData::I8(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        ArrayData::I32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        ArrayData::I64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
    }
    Ok(out)
}

/// Writes `a` as a `.npy` file (see [`encode_npy`]), atomically; `numpy.load` reads it.
pub fn write_npy(path: &Path, a: &DenseArray) -> Result<(), IoError> {
    write_atomic(path, &encode_npy(a, path)?)
}
