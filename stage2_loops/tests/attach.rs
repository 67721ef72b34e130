//! Lowering of attached axes: golden IR after `build_loop_nests` (the attached loop runs over
//! the base's segment at `indptr[coord(parent)]`) and after `translate_coordinates` (the base's
//! buffer is indexed by the attached iterator directly; elsewhere by a coordinate search), and
//! the flat program interpreted equals the stage-I interpreter.

use lacuna_ir::{ArrayData, CooTensor, DenseArray};
use lacuna_stage1::{bind, interpret, unpack, Input, Output, Program};
use lacuna_stage2::{interpret_func, lower, print_func, Config};
use std::collections::BTreeMap;
use std::path::Path;

fn example(name: &str) -> Program {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(format!("{name}.ron"));
    let text = std::fs::read_to_string(&path).expect("readable kernel");
    let p = Program::from_ron(&text).expect("parses");
    lacuna_stage1::verify(&p).expect("verifies");
    p
}

/// The program after each named pass.
fn passes(p: &Program) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    lower(p, &Config::default(), &mut |name, f| {
        out.insert(name.to_string(), print_func(f));
    })
    .expect("lowers");
    out
}

#[test]
fn attached_loop_bounds_and_direct_positions() {
    let after = passes(&example("hypergnn_attach"));
    let nests = &after["build_loop_nests"];
    assert!(
        nests.contains(
            "for i2 in i64(I_T.indptr[i64(J.indices[j])])..i64(I_T.indptr[i64(J.indices[j]) + 1])"
        ),
        "{nests}"
    );
    insta::assert_snapshot!("hypergnn_attach.build_loop_nests", nests);
    let translated = &after["translate_coordinates"];
    // HT[j, i2]: the detached dimension is j's coordinate, so i2 is HT's position: no search.
    assert!(
        translated.contains("HT[i64(J.indices[j]), i2]"),
        "{translated}"
    );
    assert!(!translated.contains("search"), "{translated}");
    insta::assert_snapshot!("hypergnn_attach.translate_coordinates", translated);
}

#[test]
fn attached_iterator_elsewhere_is_searched() {
    let mut p = example("hypergnn_attach");
    let lacuna_stage1::Stmt::Iter(it) = &mut p.body[0] else {
        panic!("an iteration")
    };
    it.axes = ["I", "J", "I_TJ", "J_", "F"].map(String::from).to_vec();
    it.vars = ["i", "j", "i2", "j2", "f"].map(String::from).to_vec();
    it.kinds = "SRRRS".into();
    let lacuna_stage1::Stmt::Store(st) = &mut it.body[0] else {
        panic!("a store")
    };
    *st = lacuna_stage1::parse_stmt_text("Y[i, f] = Y[i, f] + H[i, j] * HT[j2, i2] * X[i2, f]")
        .expect("parses");
    lacuna_stage1::verify(&p).expect("verifies");
    let translated = &passes(&p)["translate_coordinates"];
    assert!(
        translated.contains("search(I_T.indices[i64(I_T.indptr[j2])..i64(I_T.indptr[j2 + 1])], i64(I_T.indices[i2]))"),
        "{translated}"
    );
}

fn coo(shape: [usize; 2], entries: &[(usize, usize, f64)]) -> Input {
    Input::Coo(CooTensor {
        shape: shape.to_vec(),
        coords: vec![
            entries.iter().map(|e| e.0).collect(),
            entries.iter().map(|e| e.1).collect(),
        ],
        values: ArrayData::F64(entries.iter().map(|e| e.2).collect()),
    })
}

#[test]
fn flat_program_equals_stage1_interpreter() {
    let p = example("hypergnn_attach");
    // Vertex 0 in hyperedges 1 and 3; hyperedge 1 holds vertices 0 and 2, hyperedge 3 holds 1;
    // hyperedges 0 and 2 and vertex 1 have no incidences in H.
    let inputs = BTreeMap::from([
        (
            "H".to_string(),
            coo([3, 4], &[(0, 1, 2.0), (0, 3, -1.0), (2, 1, 0.5)]),
        ),
        (
            "HT".to_string(),
            coo([4, 3], &[(1, 0, 1.0), (1, 2, 3.0), (3, 1, 4.0)]),
        ),
        (
            "X".to_string(),
            Input::Dense(DenseArray {
                shape: vec![3, 2],
                data: ArrayData::F64(vec![1.0, 2.0, 10.0, 20.0, 100.0, 200.0]),
            }),
        ),
    ]);
    let b0 = bind(&p, &inputs, &BTreeMap::new()).expect("binds");
    let mut b1 = b0.clone();
    interpret(&p, &mut b1).expect("stage I interprets");
    let lowered = lower(&p, &Config::default(), &mut |_, _| {}).expect("lowers");
    let mut b2 = b0;
    interpret_func(&lowered.flat, &mut b2).expect("flat interprets");
    // Y[0] = 2·(1·X0 + 3·X2) − 1·4·X1; Y[1] = 0; Y[2] = 0.5·(1·X0 + 3·X2).
    let want = [562.0, 1124.0, 0.0, 0.0, 150.5, 301.0];
    for b in [&b1, &b2] {
        let Output::Dense(y) = unpack(&p, b, "Y").expect("unpacks") else {
            panic!("dense Y")
        };
        assert_eq!(y.data.to_f64_vec(), want);
    }
}
