//! Golden IR of every example kernel at stage I, stage II and flat (insta snapshots under
//! `tests/snapshots/`; review changes with `cargo insta review`).

use lacuna_stage1::{print_program, Program};
use lacuna_stage2::{lower, print_func, Config};
use std::path::Path;

fn examples() -> Vec<(String, Program)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("examples/ exists") {
        let path = entry.expect("readable entry").path();
        if path.extension().is_some_and(|e| e == "ron") {
            let text = std::fs::read_to_string(&path).expect("readable kernel");
            let p = Program::from_ron(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            out.push((
                path.file_stem()
                    .expect("a file name")
                    .to_string_lossy()
                    .into_owned(),
                p,
            ));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(
        out.len() >= 8,
        "expected the eight example kernels, found {}",
        out.len()
    );
    out
}

#[test]
fn golden_ir_of_every_kernel() {
    for (name, p) in examples() {
        if lacuna_stage2::coiter::is_coiteration(&p) {
            let k =
                lacuna_stage2::coiter::CoKernel::new(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
            insta::assert_snapshot!(format!("{name}.stage1"), print_program(&p));
            insta::assert_snapshot!(format!("{name}.lattices"), k.lattices());
            if let Some(count) = &k.count {
                insta::assert_snapshot!(format!("{name}.count"), print_func(count));
            }
            insta::assert_snapshot!(format!("{name}.flat"), print_func(&k.compute));
            continue;
        }
        let lowered =
            lower(&p, &Config::default(), &mut |_, _| {}).unwrap_or_else(|e| panic!("{name}: {e}"));
        insta::assert_snapshot!(format!("{name}.stage1"), print_program(&p));
        insta::assert_snapshot!(format!("{name}.stage2"), print_func(&lowered.stage2));
        insta::assert_snapshot!(format!("{name}.flat"), print_func(&lowered.flat));
    }
}

#[test]
fn every_pass_leaves_a_printable_program_and_the_pipeline_names_them_in_order() {
    let (_, p) = examples()
        .into_iter()
        .find(|(n, _)| n == "spmm")
        .expect("spmm example");
    let mut names = Vec::new();
    lower(&p, &Config::default(), &mut |name, f| {
        assert!(!print_func(f).is_empty());
        names.push(name.to_string());
    })
    .expect("spmm lowers");
    assert_eq!(
        names,
        [
            "materialize_index_buffers",
            "build_loop_nests",
            "place_init_blocks",
            "translate_coordinates",
            "lower_sparse_buffer",
            "partition_loops",
            "simplify",
            "hoist_invariant_lets",
            "version_ranges",
        ]
    );
}

#[test]
fn kernels_round_trip_through_ron() {
    for (name, p) in examples() {
        let again = Program::from_ron(&p.to_ron())
            .unwrap_or_else(|e| panic!("{name}: {e}\n{}", p.to_ron()));
        assert_eq!(again, p, "{name}");
    }
}
