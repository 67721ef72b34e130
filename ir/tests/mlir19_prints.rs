//! `SparseTensor::print` against MLIR 19.1.7's own `sparse_tensor.print` of the same tensors
//! (golden files in `tests/data/mlir19`, written by `scripts/mlir-compare-print --golden --save`):
//! per case `NAME.input` names the tensor file, `NAME.encoding` the encoding (a sliced encoding
//! views the file's tensor, as MLIR's `tensor.extract_slice`), `NAME.print` MLIR's output.
//! Structure lines must be identical; values equal within a relative 1e-12 (as
//! `/work/shared/checks/compare_print.py`).

use lacuna_ir::encoding::parse_encoding;
use lacuna_ir::io::{read_mtx, read_tns, MtxData};
use lacuna_ir::storage::SparseTensor;
use std::path::Path;

fn lacuna_print(dir: &Path, name: &str) -> String {
    let read = |ext: &str| {
        std::fs::read_to_string(dir.join(format!("{name}.{ext}")))
            .unwrap_or_else(|e| panic!("{name}.{ext}: {e}"))
    };
    let input = dir.join(read("input").trim());
    let enc = parse_encoding(read("encoding").trim()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let coo = match input.extension().and_then(|e| e.to_str()) {
        Some("tns") => read_tns(&input).unwrap(),
        _ => match read_mtx(&input).unwrap() {
            MtxData::Coo(c) => c,
            MtxData::Dense(_) => panic!("{name}: a coordinate file"),
        },
    };
    let t = if enc.has_slices() {
        let base = SparseTensor::from_coo(&coo, &enc.without_slices()).unwrap();
        base.view_by(&enc).unwrap()
    } else {
        SparseTensor::from_coo(&coo, &enc).unwrap()
    };
    t.print()
}

fn numbers(s: &str) -> Vec<f64> {
    s.trim_matches(|c| c == '(' || c == ')' || c == ' ')
        .split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| {
            x.trim()
                .parse()
                .unwrap_or_else(|_| panic!("`{x}` is no number"))
        })
        .collect()
}

#[test]
fn prints_match_mlir_19() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mlir19");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".print").map(str::to_string)
        })
        .collect();
    names.sort();
    assert!(names.len() >= 15, "golden cases: {names:?}");
    for name in &names {
        let want = std::fs::read_to_string(dir.join(format!("{name}.print"))).unwrap();
        let got = lacuna_print(&dir, name);
        let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
        assert_eq!(w.len(), g.len(), "{name}: lines\n{got}");
        for (a, b) in w.iter().zip(&g) {
            match (a.strip_prefix("values : "), b.strip_prefix("values : ")) {
                (Some(x), Some(y)) => {
                    let (x, y) = (numbers(x), numbers(y));
                    assert_eq!(x.len(), y.len(), "{name}: number of values");
                    for (p, q) in x.iter().zip(&y) {
                        assert!(
                            (p - q).abs() <= 1e-12 * p.abs().max(1.0),
                            "{name}: value {q}, MLIR {p}"
                        );
                    }
                }
                _ => assert_eq!(a, b, "{name}"),
            }
        }
    }
}
