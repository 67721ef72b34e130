//! Malformed functions are `CodegenError`s (never panics); bindings that do not fit a
//! compiled kernel are `RuntimeError`s naming the buffer or parameter.

mod common;
use common::*;
use lacuna_ir::{ArrayData, DType};
use lacuna_stage1::{BinOp, Role};
use lacuna_stage2::{BufferDecl, BufferKind, Expr, Func, Stmt};
use lacuna_target::{compile, emit_llvm_ir, CodegenError, CodegenOptions, RuntimeError};

fn one_store(value: Expr) -> Func {
    func(
        "bad",
        &["n"],
        vec![
            input("a", DType::F64),
            input("k", DType::I64),
            output("out", DType::F64),
        ],
        vec![store("out", i64c(0), value)],
    )
}

fn codegen_err(f: &Func) -> CodegenError {
    let e = compile(f, &CodegenOptions::default()).expect_err("must not compile");
    // The IR emitter reports the same error.
    assert_eq!(
        emit_llvm_ir(
            f,
            &CodegenOptions {
                optimized_ir: false,
                ..Default::default()
            }
        )
        .expect_err("must not emit"),
        e
    );
    e
}

#[test]
fn non_flat_functions_are_errors() {
    let mut f = one_store(f64c(1.0));
    f.buffers[2].layout = vec!["I".into()];
    assert!(
        matches!(codegen_err(&f), CodegenError::NotFlatBuffer { buffer, .. } if buffer == "out")
    );

    let f = func(
        "bad",
        &[],
        vec![output("out", DType::F64)],
        vec![Stmt::Store {
            buffer: "out".into(),
            indices: vec![i64c(0), i64c(0)],
            value: f64c(1.0),
        }],
    );
    assert!(
        matches!(codegen_err(&f), CodegenError::NotFlatAccess { buffer, count: 2 } if buffer == "out")
    );
    let f = one_store(Expr::Load {
        buffer: "a".into(),
        indices: vec![],
    });
    assert!(
        matches!(codegen_err(&f), CodegenError::NotFlatAccess { buffer, count: 0 } if buffer == "a")
    );
    let f = one_store(Expr::Coord("i".into()));
    assert!(matches!(codegen_err(&f), CodegenError::Coordinate { var } if var == "i"));
    let f = func(
        "bad",
        &[],
        vec![output("out", DType::F64)],
        vec![Stmt::Block {
            name: "b".into(),
            iters: vec![],
            init: vec![store("out", i64c(0), f64c(0.0))],
            body: vec![],
        }],
    );
    assert!(matches!(codegen_err(&f), CodegenError::BlockInit { block } if block == "b"));
}

#[test]
fn unknown_names_are_errors() {
    assert!(
        matches!(codegen_err(&one_store(var("zz"))), CodegenError::UnknownVariable { var } if var == "zz")
    );
    assert!(
        matches!(codegen_err(&one_store(cast(DType::F64, param("q")))), CodegenError::UnknownParam { param } if param == "q")
    );
    assert!(
        matches!(codegen_err(&one_store(load("nope", i64c(0)))), CodegenError::UnknownBuffer { buffer } if buffer == "nope")
    );
    let f = func("bad", &[], vec![], vec![store("nope", i64c(0), f64c(0.0))]);
    assert!(matches!(codegen_err(&f), CodegenError::UnknownBuffer { buffer } if buffer == "nope"));
    assert!(
        matches!(codegen_err(&one_store(search("nope", i64c(0), i64c(0), i64c(0)))), CodegenError::UnknownBuffer { buffer } if buffer == "nope")
    );
    // A variable bound inside a loop is out of scope after it.
    let f = func(
        "bad",
        &[],
        vec![output("out", DType::I64)],
        vec![
            for_("i", i64c(0), i64c(1), vec![let_("x", i64c(1))]),
            store("out", i64c(0), var("x")),
        ],
    );
    assert!(matches!(codegen_err(&f), CodegenError::UnknownVariable { var } if var == "x"));
    let f = func(
        "bad",
        &[],
        vec![output("out", DType::I64)],
        vec![
            for_("i", i64c(0), i64c(1), vec![]),
            store("out", var("i"), i64c(0)),
        ],
    );
    assert!(matches!(codegen_err(&f), CodegenError::UnknownVariable { var } if var == "i"));
}

#[test]
fn type_errors() {
    let e = codegen_err(&one_store(bin(BinOp::Add, load("a", i64c(0)), i64c(1))));
    assert_eq!(
        e,
        CodegenError::OperandTypes {
            op: BinOp::Add,
            left: DType::F64,
            right: DType::I64
        }
    );
    let e = codegen_err(&one_store(bin(
        BinOp::And,
        bin(BinOp::Lt, i64c(0), i64c(1)),
        i64c(1),
    )));
    assert_eq!(
        e,
        CodegenError::OperandTypes {
            op: BinOp::And,
            left: DType::Bool,
            right: DType::I64
        }
    );
    let e = codegen_err(&one_store(sel(boolc(true), f64c(1.0), f32c(1.0))));
    assert_eq!(
        e,
        CodegenError::SelectTypes {
            then_type: DType::F64,
            else_type: DType::F32
        }
    );
    let e = codegen_err(&one_store(cast(
        DType::F64,
        bin(BinOp::Pow, i64c(2), i64c(3)),
    )));
    assert_eq!(
        e,
        CodegenError::BinaryType {
            op: BinOp::Pow,
            dtype: DType::I64
        }
    );
    let e = codegen_err(&one_store(cast(
        DType::F64,
        bin(BinOp::Add, boolc(true), boolc(true)),
    )));
    assert_eq!(
        e,
        CodegenError::BinaryType {
            op: BinOp::Add,
            dtype: DType::Bool
        }
    );
    let e = codegen_err(&one_store(load("a", f64c(0.0))));
    assert_eq!(
        e,
        CodegenError::IndexType {
            buffer: "a".into(),
            dtype: DType::F64
        }
    );
    let f = func(
        "bad",
        &[],
        vec![],
        vec![for_("i", i64c(0), f64c(3.0), vec![])],
    );
    assert_eq!(
        codegen_err(&f),
        CodegenError::LoopBoundType {
            var: "i".into(),
            dtype: DType::F64
        }
    );
    let e = codegen_err(&one_store(cast(
        DType::F64,
        search("a", i64c(0), i64c(1), i64c(0)),
    )));
    assert_eq!(
        e,
        CodegenError::SearchBuffer {
            buffer: "a".into(),
            dtype: DType::F64
        }
    );
    let e = codegen_err(&one_store(cast(
        DType::F64,
        search("k", i64c(0), boolc(true), i64c(0)),
    )));
    assert_eq!(
        e,
        CodegenError::SearchOperand {
            buffer: "k".into(),
            dtype: DType::Bool
        }
    );
}

#[test]
fn bad_declarations_and_options() {
    let f = func(
        "bad",
        &[],
        vec![input("a", DType::F64), output("a", DType::F64)],
        vec![],
    );
    assert_eq!(
        codegen_err(&f),
        CodegenError::DuplicateBuffer { buffer: "a".into() }
    );
    let f = func("bad", &[], vec![input("m", DType::Bool)], vec![]);
    assert_eq!(
        codegen_err(&f),
        CodegenError::BoolBuffer { buffer: "m".into() }
    );
    let ok = one_store(f64c(0.0));
    let e = compile(
        &ok,
        &CodegenOptions {
            opt_level: 4,
            ..Default::default()
        },
    )
    .expect_err("no O4");
    assert_eq!(e, CodegenError::OptLevel { level: 4 });
    // Messages name the culprit.
    assert!(CodegenError::UnknownBuffer {
        buffer: "xyz".into()
    }
    .to_string()
    .contains("xyz"));
}

#[test]
fn runtime_errors_name_buffers_and_params() {
    let f = func(
        "rt",
        &["n"],
        vec![
            input("a", DType::F64),
            output("out", DType::I32),
            indptr("J", DType::I32),
            BufferDecl {
                name: "w".into(),
                dtype: DType::F32,
                layout: vec![],
                kind: BufferKind::Values(Role::Alloc),
            },
        ],
        vec![for_(
            "i",
            i64c(0),
            param("n"),
            vec![store(
                "out",
                var("i"),
                cast(
                    DType::I32,
                    bin(
                        BinOp::Add,
                        load("a", var("i")),
                        cast(DType::F64, load("J.indptr", var("i"))),
                    ),
                ),
            )],
        )],
    );
    let k = compile(&f, &CodegenOptions::default()).expect("compiles");
    let full = || {
        with_axis(
            bindings(
                vec![
                    ("a", ArrayData::F64(vec![1.0, 2.0])),
                    ("out", ArrayData::zeros(DType::I32, 2)),
                    ("w", ArrayData::F32(vec![])),
                ],
                &[("n", 2)],
            ),
            "J",
            Some(ArrayData::I32(vec![5, 7, 9])),
            None,
        )
    };
    // SAFETY (every run below): `full()` binds arrays as long as the loop over `0..n` reaches
    // and coordinates within them; each variant breaks it in one array, which `run` refuses
    // before it calls the machine code.
    let mut b = full();
    unsafe { k.run(&mut b) }.expect("runs");
    assert_eq!(b.buffers["out"], ArrayData::I32(vec![6, 9]));

    let mut b = full();
    b.buffers.remove("a");
    assert_eq!(
        unsafe { k.run(&mut b) },
        Err(RuntimeError::MissingBuffer { buffer: "a".into() })
    );
    let mut b = full();
    b.buffers.remove("w");
    assert_eq!(
        unsafe { k.run(&mut b) },
        Err(RuntimeError::MissingBuffer { buffer: "w".into() }),
        "value buffers are required even when unused"
    );
    let mut b = full();
    b.buffers.insert("out".into(), ArrayData::I64(vec![0, 0]));
    assert_eq!(
        unsafe { k.run(&mut b) },
        Err(RuntimeError::DType {
            buffer: "out".into(),
            expected: DType::I32,
            found: DType::I64
        })
    );
    let mut b = full();
    b.params.clear();
    assert_eq!(
        unsafe { k.run(&mut b) },
        Err(RuntimeError::MissingParam { param: "n".into() })
    );
    let mut b = full();
    b.axes.clear();
    assert_eq!(
        unsafe { k.run(&mut b) },
        Err(RuntimeError::MissingStructure {
            buffer: "J.indptr".into(),
            axis: "J".into(),
            array: "indptr"
        })
    );
    let mut b = full();
    b.axes.get_mut("J").expect("bound").indptr = Some(ArrayData::I64(vec![0, 0, 0]));
    assert!(
        matches!(unsafe { k.run(&mut b) }, Err(RuntimeError::DType { buffer, .. }) if buffer == "J.indptr")
    );
}
