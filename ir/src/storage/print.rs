//! The text MLIR 19's `sparse_tensor.print` writes for a tensor.

use super::index_array::IndexArray;
use super::tensor::{levels_over, SparseTensor};
use crate::ArrayData;
use std::fmt::Write;

impl SparseTensor {
    /// The layout of MLIR 19's `sparse_tensor.print`:
    ///
    /// ```text
    /// ---- Sparse Tensor ----
    /// nse = 12
    /// dim = ( 4, 6 )
    /// lvl = ( 2, 3, 2, 2 )
    /// pos[1] : ( 0, 2, 3 )
    /// crd[1] : ( 0, 2, 1 )
    /// values : ( 1, 2, 0, 3, 4, 0, 0, 5, 6, 7, 8, 0 )
    /// ----
    /// ```
    ///
    /// For a view ([`SparseTensor::view`]) this is what MLIR 19 prints for a sliced tensor:
    /// `nse` and the buffers of the underlying tensor, `dim` and `lvl` of the slice.
    ///
    /// Buffers come in storage-layout order (a loose_compressed level's positions with the
    /// trailing `0` MLIR 19 prints after the pairs); an array-of-structs COO region prints one
    /// interleaved `crd` line at its first level. Floats print as C's `%g` (as MLIR's runtime
    /// `printF64`), integers in decimal; positions and coordinates print unsigned (MLIR would
    /// sign-extend an 8-bit coordinate of 200 to -56).
    pub fn print(&self) -> String {
        let mut out = String::from("---- Sparse Tensor ----\n");
        let _ = writeln!(out, "nse = {}", self.number_of_entries());
        let _ = writeln!(
            out,
            "dim = {}",
            list(self.dim_shape.iter().map(|n| n.to_string()))
        );
        // MLIR 19 sets a view's level sizes to its slice sizes (the FIXME in its
        // `SparseExtractSliceConverter`): the levels over the view's dimension sizes.
        let view_lvls;
        let lvl_shape = if self.is_view() {
            let enc = self.encoding.without_slices();
            view_lvls = levels_over(&enc, &self.dim_shape).unwrap_or_default();
            &view_lvls
        } else {
            &self.lvl_shape
        };
        let _ = writeln!(
            out,
            "lvl = {}",
            list(lvl_shape.iter().map(|n| n.to_string()))
        );
        for (l, level) in self.levels.iter().enumerate() {
            if let Some(p) = &level.positions {
                let mut items: Vec<String> = p.to_u64_vec().iter().map(u64::to_string).collect();
                // MLIR 19's positions buffer of a loose_compressed level holds one slot past its
                // (lo, hi) pairs, and its print shows it: a trailing 0.
                if self.encoding.levels()[l].lvl_type.is_loose_compressed() {
                    items.push("0".into());
                }
                let _ = writeln!(out, "pos[{l}] : {}", list(items.into_iter()));
            }
            if let Some(c) = &level.coordinates {
                let _ = writeln!(out, "crd[{l}] : {}", index_list(c));
            }
        }
        let _ = writeln!(out, "values : {}", list(value_strings(&self.values)));
        out.push_str("----\n");
        out
    }
}

/// `( a, b, c )`, and `(  )` when empty, as MLIR's vector printing.
fn list(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    format!("( {} )", items.join(", "))
}

fn index_list(a: &IndexArray) -> String {
    list(a.to_u64_vec().into_iter().map(|v| v.to_string()))
}

fn value_strings(values: &ArrayData) -> Box<dyn Iterator<Item = String> + '_> {
    match values {
        ArrayData::F32(v) => Box::new(v.iter().map(|&x| format_g(f64::from(x)))),
        ArrayData::F64(v) => Box::new(v.iter().map(|&x| format_g(x))),
        ArrayData::I8(v) => Box::new(v.iter().map(|x| x.to_string())),
        ArrayData::I32(v) => Box::new(v.iter().map(|x| x.to_string())),
        ArrayData::I64(v) => Box::new(v.iter().map(|x| x.to_string())),
    }
}

/// C's `printf("%g", x)`: 6 significant digits, scientific when the exponent is below -4 or at
/// least 6, trailing zeros removed; `nan`, `-nan`, `inf`, `-inf` as glibc prints them.
pub fn format_g(x: f64) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let sci = format!("{x:.5e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{}e{sign}{:02}", strip_zeros(mantissa), exp.abs());
    }
    let decimals = (5 - exp) as usize;
    strip_zeros(&format!("{x:.decimals$}")).to_string()
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}
