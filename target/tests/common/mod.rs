//! Helpers shared by the integration tests: constructors for flat functions and a runner that
//! checks the JIT against the stage-II interpreter.
#![allow(dead_code)]

use lacuna_ir::{ArrayData, DType};
use lacuna_stage1::{AxisData, BinOp, Bindings, Role, UnOp};
use lacuna_stage2::{interpret_func, BufferDecl, BufferKind, Expr, ForKind, Func, Stmt};
use lacuna_target::{compile, CodegenOptions};

/// A flat function without axes.
pub fn func(name: &str, params: &[&str], buffers: Vec<BufferDecl>, body: Vec<Stmt>) -> Func {
    Func {
        scratch: vec![],
        name: name.into(),
        params: params.iter().map(|s| s.to_string()).collect(),
        axes: vec![],
        buffers,
        body,
    }
}

/// An input value buffer.
pub fn input(name: &str, dtype: DType) -> BufferDecl {
    BufferDecl {
        name: name.into(),
        dtype,
        layout: vec![],
        kind: BufferKind::Values(Role::Input),
    }
}

/// An output value buffer.
pub fn output(name: &str, dtype: DType) -> BufferDecl {
    BufferDecl {
        name: name.into(),
        dtype,
        layout: vec![],
        kind: BufferKind::Values(Role::Output),
    }
}

/// The `indptr` array of `axis`.
pub fn indptr(axis: &str, dtype: DType) -> BufferDecl {
    BufferDecl {
        name: format!("{axis}.indptr"),
        dtype,
        layout: vec![],
        kind: BufferKind::Indptr(axis.into()),
    }
}

/// The `indices` array of `axis`.
pub fn indices(axis: &str, dtype: DType) -> BufferDecl {
    BufferDecl {
        name: format!("{axis}.indices"),
        dtype,
        layout: vec![],
        kind: BufferKind::Indices(axis.into()),
    }
}

pub fn for_(var: &str, start: Expr, end: Expr, body: Vec<Stmt>) -> Stmt {
    Stmt::For {
        var: var.into(),
        start,
        end,
        kind: ForKind::Serial,
        body,
    }
}

pub fn for_kind(var: &str, start: Expr, end: Expr, kind: ForKind, body: Vec<Stmt>) -> Stmt {
    Stmt::For {
        var: var.into(),
        start,
        end,
        kind,
        body,
    }
}

pub fn let_(var: &str, value: Expr) -> Stmt {
    Stmt::Let {
        var: var.into(),
        value,
    }
}

pub fn store(buffer: &str, index: Expr, value: Expr) -> Stmt {
    Stmt::Store {
        buffer: buffer.into(),
        indices: vec![index],
        value,
    }
}

pub fn if_(cond: Expr, then_body: Vec<Stmt>, else_body: Vec<Stmt>) -> Stmt {
    Stmt::If {
        cond,
        then_body,
        else_body,
    }
}

pub fn load(buffer: &str, index: Expr) -> Expr {
    Expr::Load {
        buffer: buffer.into(),
        indices: vec![index],
    }
}

pub fn var(name: &str) -> Expr {
    Expr::var(name)
}

pub fn param(name: &str) -> Expr {
    Expr::Param(name.into())
}

pub fn i64c(v: i64) -> Expr {
    Expr::Int(v, DType::I64)
}

pub fn i32c(v: i32) -> Expr {
    Expr::Int(v as i64, DType::I32)
}

pub fn f64c(v: f64) -> Expr {
    Expr::Float(v, DType::F64)
}

pub fn f32c(v: f32) -> Expr {
    Expr::Float(v as f64, DType::F32)
}

pub fn boolc(v: bool) -> Expr {
    Expr::Bool(v)
}

pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    Expr::bin(op, a, b)
}

pub fn un(op: UnOp, a: Expr) -> Expr {
    Expr::Unary(op, Box::new(a))
}

pub fn cast(t: DType, a: Expr) -> Expr {
    Expr::Cast(t, Box::new(a))
}

pub fn sel(c: Expr, a: Expr, b: Expr) -> Expr {
    Expr::Select(Box::new(c), Box::new(a), Box::new(b))
}

pub fn search(buffer: &str, lo: Expr, hi: Expr, value: Expr) -> Expr {
    Expr::Search {
        buffer: buffer.into(),
        lo: Box::new(lo),
        hi: Box::new(hi),
        value: Box::new(value),
    }
}

/// Bindings with the given value buffers and parameters.
pub fn bindings(buffers: Vec<(&str, ArrayData)>, params: &[(&str, i64)]) -> Bindings {
    Bindings {
        params: params.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        axes: Default::default(),
        buffers: buffers
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    }
}

/// Adds structure arrays for `axis`.
pub fn with_axis(
    mut b: Bindings,
    axis: &str,
    indptr: Option<ArrayData>,
    indices: Option<ArrayData>,
) -> Bindings {
    b.axes
        .insert(axis.to_string(), AxisData { indptr, indices });
    b
}

/// Bitwise equality of arrays (NaNs with equal payloads compare equal).
pub fn same_bits(a: &ArrayData, b: &ArrayData) -> bool {
    match (a, b) {
        (ArrayData::F32(x), ArrayData::F32(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
        }
        (ArrayData::F64(x), ArrayData::F64(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
        }
        _ => a == b,
    }
}

/// Runs `f` on `b` with the JIT (at every optimization level) and with the stage-II
/// interpreter; asserts that all agree bit for bit and returns the JIT's bindings.
pub fn run_checked(f: &Func, b: &Bindings) -> Bindings {
    let mut expected = b.clone();
    interpret_func(f, &mut expected).unwrap_or_else(|e| panic!("interpreter: {e}"));
    let mut last = None;
    for opt_level in [0, 3] {
        let got = run_jit(
            f,
            b,
            &CodegenOptions {
                opt_level,
                ..CodegenOptions::default()
            },
        );
        for (name, want) in &expected.buffers {
            let have = &got.buffers[name];
            assert!(
                same_bits(have, want),
                "O{opt_level} buffer `{name}`: JIT {have:?} vs interpreter {want:?}"
            );
        }
        last = Some(got);
    }
    last.expect("ran at least once")
}

/// Runs `f` on a copy of `b` with the JIT, after the stage-II interpreter, which checks every
/// access, ran it on another copy (its results are not compared here).
pub fn run_jit(f: &Func, b: &Bindings, opts: &CodegenOptions) -> Bindings {
    let k = compile(f, opts).unwrap_or_else(|e| panic!("compile: {e}"));
    interpret_func(f, &mut b.clone()).unwrap_or_else(|e| panic!("interpreter: {e}"));
    let mut got = b.clone();
    // SAFETY: the machine code reaches the elements the interpreter reached on the same data,
    // all in bounds.
    unsafe { k.run(&mut got) }.unwrap_or_else(|e| panic!("run: {e}"));
    got
}

/// An elementwise kernel `out[i] = e(i)` for `i in 0..n`, over inputs `a` and `b` of type `t`.
pub fn elementwise(t: DType, out_t: DType, e: Expr) -> Func {
    func(
        "elementwise",
        &["n"],
        vec![input("a", t), input("b", t), output("out", out_t)],
        vec![for_(
            "i",
            i64c(0),
            param("n"),
            vec![store("out", var("i"), e)],
        )],
    )
}
