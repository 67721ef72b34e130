//! Element types and scalar values.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The element type of a buffer or of a scalar expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// 8-bit signed integer (MLIR's `i8`).
    I8,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// Boolean (results of comparisons); never the element type of a buffer.
    Bool,
}

impl DType {
    /// True for `F32` and `F64`.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }
    /// True for `I8`, `I32` and `I64`.
    pub fn is_int(self) -> bool {
        matches!(self, DType::I8 | DType::I32 | DType::I64)
    }
    /// Size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::I8 | DType::Bool => 1,
        }
    }
    /// The lower-case name used in the text IR (`f64`, `i32`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }
    /// Parses a lower-case name as printed by [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        Some(match name {
            "f32" => DType::F32,
            "f64" => DType::F64,
            "i8" => DType::I8,
            "i32" => DType::I32,
            "i64" => DType::I64,
            "bool" => DType::Bool,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A typed scalar value, as produced by the interpreters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Scalar {
    /// A 32-bit float.
    F32(f32),
    /// A 64-bit float.
    F64(f64),
    /// An 8-bit integer.
    I8(i8),
    /// A 32-bit integer.
    I32(i32),
    /// A 64-bit integer.
    I64(i64),
    /// A boolean.
    Bool(bool),
}

impl Scalar {
    /// The element type of this value.
    pub fn dtype(self) -> DType {
        match self {
            Scalar::F32(_) => DType::F32,
            Scalar::F64(_) => DType::F64,
            Scalar::I8(_) => DType::I8,
            Scalar::I32(_) => DType::I32,
            Scalar::I64(_) => DType::I64,
            Scalar::Bool(_) => DType::Bool,
        }
    }
    /// The value converted to `f64` (booleans are 0 or 1).
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::F32(v) => v as f64,
            Scalar::F64(v) => v,
            Scalar::I8(v) => v as f64,
            Scalar::I32(v) => v as f64,
            Scalar::I64(v) => v as f64,
            Scalar::Bool(v) => v as i64 as f64,
        }
    }
    /// The value converted to `i64` (floats truncate toward zero, saturating).
    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::F32(v) => v as i64,
            Scalar::F64(v) => v as i64,
            Scalar::I8(v) => v as i64,
            Scalar::I32(v) => v as i64,
            Scalar::I64(v) => v,
            Scalar::Bool(v) => v as i64,
        }
    }
    /// The value as a boolean (non-zero is true).
    pub fn as_bool(self) -> bool {
        match self {
            Scalar::Bool(v) => v,
            other => other.as_f64() != 0.0,
        }
    }
    /// Converts the value to another element type with the semantics of a C cast
    /// (float to int truncates toward zero and saturates; int to float rounds).
    pub fn cast(self, to: DType) -> Scalar {
        match to {
            DType::F32 => Scalar::F32(match self {
                Scalar::F32(v) => v,
                Scalar::F64(v) => v as f32,
                Scalar::I8(v) => v as f32,
                Scalar::I32(v) => v as f32,
                Scalar::I64(v) => v as f32,
                Scalar::Bool(v) => v as i32 as f32,
            }),
            DType::F64 => Scalar::F64(self.as_f64()),
            DType::I8 => Scalar::I8(match self {
                Scalar::F32(v) => v as i8,
                Scalar::F64(v) => v as i8,
                Scalar::I8(v) => v,
                Scalar::I32(v) => v as i8,
                Scalar::I64(v) => v as i8,
                Scalar::Bool(v) => v as i8,
            }),
            DType::I32 => Scalar::I32(match self {
                Scalar::F32(v) => v as i32,
                Scalar::F64(v) => v as i32,
                Scalar::I8(v) => v as i32,
                Scalar::I32(v) => v,
                Scalar::I64(v) => v as i32,
                Scalar::Bool(v) => v as i32,
            }),
            DType::I64 => Scalar::I64(self.as_i64()),
            DType::Bool => Scalar::Bool(self.as_bool()),
        }
    }
    /// The zero of a type.
    pub fn zero(dtype: DType) -> Scalar {
        Scalar::I64(0).cast(dtype)
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::F32(v) => write!(f, "{v:?}f32"),
            Scalar::F64(v) => write!(f, "{v:?}"),
            Scalar::I8(v) => write!(f, "{v}i8"),
            Scalar::I32(v) => write!(f, "{v}i32"),
            Scalar::I64(v) => write!(f, "{v}"),
            Scalar::Bool(v) => write!(f, "{v}"),
        }
    }
}
