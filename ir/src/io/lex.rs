//! Helpers shared by the line-oriented text formats (Matrix Market and FROSTT).

use super::error::{snippet, IoError};
use crate::{ArrayData, CooTensor, Scalar};
use std::fmt::Write as _;
use std::iter::Enumerate;
use std::path::Path;
use std::str::Lines;

/// Reads a whole file, mapping failures to [`IoError::Open`].
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>, IoError> {
    std::fs::read(path).map_err(|source| IoError::Open {
        path: path.to_path_buf(),
        source,
    })
}

/// Decodes a text file, reporting the line of the first invalid byte.
pub(crate) fn decode_text<'a>(bytes: &'a [u8], path: &Path) -> Result<&'a str, IoError> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s),
        Err(e) => {
            let valid = bytes.get(..e.valid_up_to()).unwrap_or(&[]);
            Err(IoError::NotUtf8 {
                path: path.to_path_buf(),
                line: valid.iter().filter(|&&b| b == b'\n').count() + 1,
            })
        }
    }
}

/// The lines of a text file that carry data: blank lines and lines whose first non-blank
/// character is the comment character are skipped. Yields `(1-based line number, line)`.
pub(crate) struct DataLines<'a> {
    lines: Enumerate<Lines<'a>>,
    comment: char,
    /// Number of the last line looked at (data or not); 0 before the first.
    pub last_line: usize,
}

impl<'a> DataLines<'a> {
    /// Data lines of `lines`, whose line numbers continue after `last_line`.
    pub(crate) fn new(lines: Enumerate<Lines<'a>>, comment: char, last_line: usize) -> Self {
        DataLines {
            lines,
            comment,
            last_line,
        }
    }
}

impl<'a> Iterator for DataLines<'a> {
    type Item = (usize, &'a str);
    fn next(&mut self) -> Option<(usize, &'a str)> {
        loop {
            let (i, line) = self.lines.next()?;
            self.last_line = i + 1;
            let t = line.trim_start();
            if !t.is_empty() && !t.starts_with(self.comment) {
                return Some((i + 1, line));
            }
        }
    }
}

/// Splits `text` into exactly `N` whitespace-separated fields.
pub(crate) fn fields<'a, const N: usize>(
    text: &'a str,
    path: &Path,
    line: usize,
) -> Result<[&'a str; N], IoError> {
    let mut out = [""; N];
    let mut it = text.split_ascii_whitespace();
    for (k, slot) in out.iter_mut().enumerate() {
        *slot = it.next().ok_or_else(|| IoError::ShortLine {
            path: path.to_path_buf(),
            line,
            expected_fields: N,
            found: k,
        })?;
    }
    if it.next().is_some() {
        return Err(IoError::ExtraFields {
            path: path.to_path_buf(),
            line,
            expected_fields: N,
            found: N + 1 + it.count(),
        });
    }
    Ok(out)
}

/// A [`IoError::BadNumber`] for `token`.
pub(crate) fn bad_number(path: &Path, line: usize, token: &str, expected: &'static str) -> IoError {
    IoError::BadNumber {
        path: path.to_path_buf(),
        line,
        token: snippet(token),
        expected,
    }
}

/// Parses a non-negative integer (an index or an extent).
pub(crate) fn parse_u64(
    token: &str,
    path: &Path,
    line: usize,
    expected: &'static str,
) -> Result<u64, IoError> {
    token
        .parse::<u64>()
        .map_err(|_| bad_number(path, line, token, expected))
}

/// Parses an extent or count that must fit `usize`.
pub(crate) fn parse_usize(
    token: &str,
    path: &Path,
    line: usize,
    expected: &'static str,
) -> Result<usize, IoError> {
    token
        .parse::<usize>()
        .map_err(|_| bad_number(path, line, token, expected))
}

/// Parses a real number; Fortran exponents (`1.5D+03`) are accepted too.
pub(crate) fn parse_f64(token: &str) -> Option<f64> {
    match token.parse::<f64>() {
        Ok(v) => Some(v),
        Err(_) if token.contains(['d', 'D']) => token.replace(['d', 'D'], "e").parse().ok(),
        Err(_) => None,
    }
}

/// Checks that `t` is a consistent tensor: one coordinate vector per dimension, each as long as
/// the values, every coordinate inside the shape. Returns the number of entries.
pub(crate) fn check_coo(t: &CooTensor, path: &Path) -> Result<usize, IoError> {
    let invalid = |reason: String| IoError::InvalidTensor {
        path: path.to_path_buf(),
        reason,
    };
    let nnz = t.nnz();
    if t.coords.len() != t.shape.len() {
        return Err(invalid(format!(
            "{} coordinate vectors for {} dimensions",
            t.coords.len(),
            t.shape.len()
        )));
    }
    for (d, (c, &extent)) in t.coords.iter().zip(&t.shape).enumerate() {
        if c.len() != nnz {
            return Err(invalid(format!(
                "dimension {d} has {} coordinates for {nnz} values",
                c.len()
            )));
        }
        if let Some((e, &i)) = c.iter().enumerate().find(|&(_, &i)| i >= extent) {
            return Err(invalid(format!(
                "entry {e} has coordinate {i} in dimension {d} of extent {extent}"
            )));
        }
    }
    Ok(nnz)
}

/// Appends value `e` of `data` in a form that reads back exactly: floats in Rust's shortest
/// round-trip notation (`f32` widened to `f64` first), integers in decimal.
pub(crate) fn push_value(out: &mut String, data: &ArrayData, e: usize) {
    let _ = match data.get(e) {
        Some(Scalar::F32(v)) => write!(out, "{:?}", v as f64),
        Some(Scalar::F64(v)) => write!(out, "{v:?}"),
        Some(Scalar::I8(v)) => write!(out, "{v}"),
        Some(Scalar::I32(v)) => write!(out, "{v}"),
        Some(Scalar::I64(v)) => write!(out, "{v}"),
        Some(Scalar::Bool(v)) => write!(out, "{}", v as i32),
        None => Ok(()),
    };
}
