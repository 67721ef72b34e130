//! Stage I of Lacuna: sparse axes, sparse buffers and sparse iterations, in coordinate space.
//!
//! A [`Program`] declares symbolic sizes, axes (`dense_fixed`, `dense_variable`, `sparse_fixed`,
//! `sparse_variable`, as in SparseTIR), buffers stored over lists of axes, and sparse iterations
//! whose bodies store scalar expressions into buffers. Invariants checked by [`verify`]:
//! names are unique; an axis's parent is declared before it and, in a buffer's axis list,
//! directly precedes it; an iteration iterates a parent before its children; spatial axes index
//! every buffer the iteration writes and reduction axes none; expressions are well typed.
//!
//! Structure arrays (`indptr`, `indices`) belong to axes, so buffers over the same axes share
//! them. [`bind`] builds them from user inputs; [`interpret`] runs a program directly in
//! coordinate space and is the oracle for every lowering pass.
#![warn(missing_docs)]

mod data;
mod interp;
mod ir;
mod parse;
mod print;
mod sparsify;
mod verify;
mod view;

pub use data::{
    axis_len, bind, bind_with, buffer_len, check_dense_len, dense_nonzeros, dense_of_coo,
    for_each_stored, size_value, unpack, validate, AxisData, BindError, Bindings, Input, Output,
};
pub use interp::{eval_binop, eval_unop, interpret, InterpError};
pub use ir::{
    substitute, Axis, AxisKind, BinOp, Buffer, ClosedForm, Coiteration, Expr, IndexType, IterKind,
    Iteration, Merge, Program, Region, Role, Semiring, Size, Stmt, Store, Tiles, UnOp,
    KERNEL_FORMAT_VERSION,
};
pub use parse::{parse_expr, parse_stmt_text, ParseError};
pub use print::print_program;
pub use sparsify::{buffer_encoding, declared_encoding, sparsify};
pub use verify::{
    concrete_type, resolve_index, resolve_literals, type_of, unify, verify, Ty, VerifyError,
};
pub use view::{
    axis_len_view, bind_views, buffer_len_view, check_length, view_form, AxisView, BindingsView,
    InputView, ViewForm,
};
