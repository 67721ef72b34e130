//! Shared memory of a GPU kernel: which shared scratch buffers are static and which are
//! dynamic, and how many bytes a launch needs.
//!
//! CUDA gives a block shared memory in two ways: static `.shared` arrays of a size fixed in the
//! PTX (at most 48 KiB in all), and one dynamic `.extern .shared` array whose size is passed
//! to the launch (`sharedMemBytes`; above 48 KiB only after the kernel opts in, up to the
//! device's limit: 163 KiB on sm_80, 227 KiB on sm_90). The rule here:
//!
//! - a shared scratch buffer ([`Stmt::Alloc`] in [`MemScope::Shared`]) of constant extent is
//!   **static**, unless the constant-extent shared buffers of the kernel take more than 48 KiB
//!   together, in which case all of them are dynamic (the only way to get more);
//! - a shared scratch buffer whose extent is an expression is **dynamic**. The expression may
//!   read parameters and elements at positions computable from them (like `J.indptr[m]`), as
//!   launch extents may ([`crate::gpu`]): it is evaluated on the host before the launch. An
//!   extent that reads a loop variable or depends on a search is [`GpuError::SharedExtent`].
//!
//! The dynamic buffers are carved out of the one extern array in the order of their first
//! allocation in the body, each at a byte offset that is a multiple of 16
//! ([`SharedLayout::dynamic`]); the launch needs [`SharedLayout::dynamic_bytes`] bytes. A buffer
//! allocated by several statements gets the largest of their extents.

use crate::gpu::{eval_host, non_param, GpuError};
use crate::ir::{Expr, Func, MemScope, Stmt};
use crate::passes::simplify;
use lacuna_ir::{DType, Scalar};
use lacuna_stage1::BinOp;
use std::collections::BTreeMap;

/// CUDA's limit on the static shared memory of a kernel (and on dynamic shared memory of a
/// kernel that has not opted in to more).
pub const STATIC_SHARED_LIMIT: u64 = 48 * 1024;

/// The most shared memory a block may use on sm_80 (A100) after opting in: 163 KiB.
pub const MAX_SHARED_SM80: u64 = 163 * 1024;

/// The most shared memory a block may use on sm_90 (H100) after opting in: 227 KiB.
pub const MAX_SHARED_SM90: u64 = 227 * 1024;

/// Byte alignment of every dynamic shared buffer (and of the extern array).
pub const SHARED_ALIGN: i64 = 16;

/// A shared scratch buffer carved out of the dynamic shared memory.
#[derive(Clone, Debug, PartialEq)]
pub struct DynamicShared {
    /// The scratch buffer.
    pub buffer: String,
    /// Its element type.
    pub dtype: DType,
    /// Its byte offset in the extern array (`i64`, a multiple of [`SHARED_ALIGN`]).
    pub offset: Expr,
    /// Its size in bytes (`i64`).
    pub bytes: Expr,
}

/// The shared memory of a kernel (see the module documentation).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct SharedLayout {
    /// Static shared buffers with their sizes in bytes.
    pub statics: Vec<(String, u64)>,
    /// Dynamic shared buffers, in the order of the extern array.
    pub dynamic: Vec<DynamicShared>,
    /// Bytes of dynamic shared memory a launch needs (`i64` over parameters); `None` when no
    /// buffer is dynamic.
    pub dynamic_bytes: Option<Expr>,
}

impl SharedLayout {
    /// Bytes of static shared memory.
    pub fn static_bytes(&self) -> u64 {
        self.statics.iter().map(|(_, b)| b).sum()
    }

    /// The dynamic buffer `name`, if it is one.
    pub fn dynamic_buffer(&self, name: &str) -> Option<&DynamicShared> {
        self.dynamic.iter().find(|d| d.buffer == name)
    }

    /// Bytes of dynamic shared memory for these parameter values (`load` gives elements of
    /// bound buffers, as for [`crate::gpu::Launch::dims`]); checks that static plus dynamic
    /// shared memory stays within `limit` bytes, `what` naming whose limit it is.
    pub fn dynamic_bytes_for(
        &self,
        params: &BTreeMap<String, i64>,
        load: &dyn Fn(&str, i64) -> Option<Scalar>,
        limit: u64,
        what: &str,
    ) -> Result<u64, GpuError> {
        let dynamic_bytes = match &self.dynamic_bytes {
            None => 0,
            Some(e) => {
                let v = eval_host(e, params, load).map_err(|param| GpuError::Unbound {
                    axis: "dynamic shared memory",
                    param,
                })?;
                u64::try_from(v.max(0)).unwrap_or(0)
            }
        };
        let static_bytes = self.static_bytes();
        let bytes = static_bytes.saturating_add(dynamic_bytes);
        if bytes > limit {
            return Err(GpuError::SharedMemory {
                bytes,
                static_bytes,
                dynamic_bytes,
                limit,
                what: what.to_string(),
            });
        }
        Ok(dynamic_bytes)
    }
}

/// The shared scratch buffers of `f` in the order of their first allocation, with their element
/// types and (largest) extents.
fn shared_allocs(f: &Func) -> Vec<(String, DType, Expr)> {
    fn walk(stmts: &[Stmt], out: &mut Vec<(String, DType, Expr)>) {
        for s in stmts {
            if let Stmt::Alloc {
                buffer,
                dtype,
                extent,
                scope: MemScope::Shared,
            } = s
            {
                match out.iter_mut().find(|(n, ..)| n == buffer) {
                    None => out.push((buffer.clone(), *dtype, extent.clone())),
                    Some((_, _, e)) if e == extent => {}
                    Some((_, _, e)) => {
                        *e = Expr::bin(BinOp::Max, e.clone(), extent.clone());
                    }
                }
            }
            for b in s.bodies() {
                walk(b, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&f.body, &mut out);
    out
}

/// The shared memory layout of `f` (see the module documentation for the rule).
pub fn shared_layout(f: &Func) -> Result<SharedLayout, GpuError> {
    let allocs = shared_allocs(f);
    let constant = |e: &Expr| match simplify::expr(e.clone()) {
        Expr::Int(n, _) => Some(n.max(0) as u64),
        _ => None,
    };
    let static_total: u64 = allocs
        .iter()
        .filter_map(|(_, t, e)| constant(e).map(|n| n.saturating_mul(t.size_bytes() as u64)))
        .fold(0u64, u64::saturating_add);
    let all_dynamic = static_total > STATIC_SHARED_LIMIT;
    let mut layout = SharedLayout::default();
    let mut offset = Expr::i64(0);
    for (buffer, dtype, extent) in allocs {
        match constant(&extent) {
            Some(n) if !all_dynamic => {
                layout
                    .statics
                    .push((buffer, n.saturating_mul(dtype.size_bytes() as u64)));
                continue;
            }
            _ => {}
        }
        if let Some(what) = non_param(&extent) {
            return Err(GpuError::SharedExtent {
                buffer,
                extent: extent.to_string(),
                what,
            });
        }
        let bytes = simplify::expr(Expr::mul(
            Expr::bin(BinOp::Max, extent, Expr::i64(0)),
            Expr::i64(dtype.size_bytes() as i64),
        ));
        let end = Expr::add(offset.clone(), bytes.clone());
        let next = simplify::expr(Expr::mul(
            Expr::bin(
                BinOp::Div,
                Expr::add(end, Expr::i64(SHARED_ALIGN - 1)),
                Expr::i64(SHARED_ALIGN),
            ),
            Expr::i64(SHARED_ALIGN),
        ));
        layout.dynamic.push(DynamicShared {
            buffer,
            dtype,
            offset: offset.clone(),
            bytes,
        });
        offset = next;
    }
    if !layout.dynamic.is_empty() {
        layout.dynamic_bytes = Some(offset);
    }
    Ok(layout)
}
