//! Pass `materialize_index_buffers`: creates the function skeleton, with one buffer parameter per
//! stage-I buffer (keeping its axes as layout) and flat `indptr`/`indices` buffers per axis.
//!
//! Before: `A: f64[I, J]` with `J = sparse_variable(I, n, nnz)`.
//! After:  `buffer A: f64[I, J]`, `buffer J.indptr: i32[]`, `buffer J.indices: i32[]`.

use crate::ir::{BufferDecl, BufferKind, Func};
use lacuna_stage1::Program;

/// Name of the `indptr` buffer of an axis.
pub fn indptr_name(axis: &str) -> String {
    format!("{axis}.indptr")
}

/// Name of the `indices` buffer of an axis.
pub fn indices_name(axis: &str) -> String {
    format!("{axis}.indices")
}

/// Builds the empty function for `p`: parameters, axes and buffers, no body.
pub fn materialize_index_buffers(p: &Program) -> Func {
    let mut buffers: Vec<BufferDecl> = p
        .buffers
        .iter()
        .map(|b| BufferDecl {
            name: b.name.clone(),
            dtype: b.dtype,
            layout: b.axes.clone(),
            kind: BufferKind::Values(b.role),
        })
        .collect();
    for a in &p.axes {
        if a.kind.has_indptr() {
            buffers.push(BufferDecl {
                name: indptr_name(&a.name),
                dtype: a.idtype.dtype(),
                layout: vec![],
                kind: BufferKind::Indptr(a.name.clone()),
            });
        }
        if a.kind.has_indices() {
            buffers.push(BufferDecl {
                name: indices_name(&a.name),
                dtype: a.idtype.dtype(),
                layout: vec![],
                kind: BufferKind::Indices(a.name.clone()),
            });
        }
    }
    Func {
        name: p.name.clone(),
        params: p.params.clone(),
        axes: p.axes.clone(),
        buffers,
        body: vec![],
        scratch: vec![],
    }
}
