//! `CompiledKernel::run_raw` on borrowed arrays computes what `run` computes on owned bindings,
//! and rejects missing parameters, missing arrays and other element types before calling.

use lacuna_ir::{ArrayData, CooTensor, DType, DenseArray};
use lacuna_stage1::{bind, Input, Program};
use lacuna_stage2::{lower, Config};
use lacuna_target::{compile, CodegenOptions, RawArray, RawBindings, RuntimeError};
use std::collections::BTreeMap;

fn raw<T>(v: &mut [T], dtype: DType) -> RawArray {
    RawArray {
        ptr: v.as_mut_ptr().cast(),
        len: v.len(),
        dtype,
    }
}

#[test]
fn run_raw_equals_run() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/spmv.ron"))
            .unwrap();
    let p = Program::from_ron(&text).unwrap();
    let l = lower(&p, &Config::default(), &mut |_, _| {}).unwrap();
    let k = compile(&l.flat, &CodegenOptions::default()).unwrap();
    assert!(k.arguments().any(|a| a.name == "y" && a.accessed));
    assert!(k.param_names().contains(&"m".to_string()));
    // A = [[0, 5, 6], [7, 0, 0]], x = [1, 2, 3].
    let inputs = BTreeMap::from([
        (
            "A".to_string(),
            Input::Coo(CooTensor {
                shape: vec![2, 3],
                coords: vec![vec![0, 0, 1], vec![1, 2, 0]],
                values: ArrayData::F64(vec![5.0, 6.0, 7.0]),
            }),
        ),
        (
            "x".to_string(),
            Input::Dense(DenseArray {
                shape: vec![3],
                data: ArrayData::F64(vec![1.0, 2.0, 3.0]),
            }),
        ),
    ]);
    let mut b = bind(&p, &inputs, &BTreeMap::new()).unwrap();
    // SAFETY: bound by `bind` for the program `k` was lowered from.
    unsafe { k.run(&mut b) }.unwrap();
    assert_eq!(b.buffers["y"], ArrayData::F64(vec![28.0, 7.0]));

    let (mut indptr, mut indices) = (vec![0i32, 2, 3], vec![1i32, 2, 0]);
    let (mut a, mut x, mut y) = (
        vec![5.0f64, 6.0, 7.0],
        vec![1.0f64, 2.0, 3.0],
        vec![-1.0f64; 2],
    );
    let mut rb = RawBindings {
        params: b.params.clone(),
        ..RawBindings::default()
    };
    rb.indptr.insert("J".into(), raw(&mut indptr, DType::I32));
    rb.indices.insert("J".into(), raw(&mut indices, DType::I32));
    rb.buffers.insert("A".into(), raw(&mut a, DType::F64));
    rb.buffers.insert("x".into(), raw(&mut x, DType::F64));
    rb.buffers.insert("y".into(), raw(&mut y, DType::F64));
    // SAFETY: the arrays are those `bind` validated above, borrowed exclusively here.
    unsafe { k.run_raw(&rb) }.unwrap();
    assert_eq!(y, vec![28.0, 7.0]);

    let mut wrong = rb.clone();
    let mut xf = vec![1.0f32; 3];
    wrong.buffers.insert("x".into(), raw(&mut xf, DType::F32));
    // SAFETY: rejected before the machine code runs.
    assert!(matches!(
        unsafe { k.run_raw(&wrong) },
        Err(RuntimeError::DType { .. })
    ));
    let mut missing = rb.clone();
    missing.buffers.remove("x");
    // SAFETY: rejected before the machine code runs.
    assert!(matches!(
        unsafe { k.run_raw(&missing) },
        Err(RuntimeError::MissingBuffer { .. })
    ));
    let mut no_param = rb.clone();
    no_param.params.clear();
    // SAFETY: rejected before the machine code runs.
    assert!(matches!(
        unsafe { k.run_raw(&no_param) },
        Err(RuntimeError::MissingParam { .. })
    ));
}
