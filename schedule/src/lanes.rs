//! Schedules of a kernel whose sparse matrix is stored in groups of rows that run as vector
//! lanes (`sell` and `dia` parts): the built-in SpMV schedule's and the tuner's lanes formats.
//!
//! After `decompose_format(A, TERM)` with one such part, the part's iteration `ITER_p0` loops
//! over groups (`ROWg.p0`), then its steps, then the group's rows (`ROW.p0`, the lanes).
//! [`lanes_trace`] keeps a group's sums in a local cache (one register), added or stored to the
//! result after the group, and vectorizes the lanes.

use crate::Instruction;

/// Sliced ELL (SELL-8-1024): groups of 8 rows sorted by length within windows of 1024.
pub const SELL: &str = "(sell 8 1024)";

/// DIA: every entry by diagonal (at most 32 of them), rows in blocks of 8.
pub const DIA: &str = "(dia 32 8)";

/// Rows per group of [`SELL`] and [`DIA`]: one per f64 lane of an AVX-512 register.
pub const LANES: i64 = 8;

/// The group loop of the one part of iteration `iteration` whose row variable is `row`
/// (`ITER_p0:ROWg.p0`), which may run in parallel: each group writes its own rows.
pub fn group_loop(iteration: &str, row: &str) -> String {
    format!("{iteration}_p0:{row}g.p0")
}

/// The lanes loop of the one part of iteration `iteration` whose row variable is `row`
/// (`ITER_p0:ROW.p0`): the group's rows, vectorized by [`lanes_trace`].
pub fn lanes_loop(iteration: &str, row: &str) -> String {
    format!("{iteration}_p0:{row}.p0")
}

/// The primitives that follow `decompose_format` into [`SELL`] or [`DIA`] for iteration
/// `iteration` (row variable `row`) summing into `output`: its group's sums in a local cache,
/// the lanes vectorized [`LANES`] wide.
pub fn lanes_trace(iteration: &str, row: &str, output: &str) -> Vec<Instruction> {
    let block = format!("{iteration}_p0");
    let lanes = lanes_loop(iteration, row);
    vec![
        Instruction::ReverseCacheWrite {
            block: block.clone(),
            buffer: output.into(),
            scope: "local".into(),
            at: Some(group_loop(iteration, row)),
        },
        Instruction::Vectorize {
            r#loop: lanes.clone(),
        },
        Instruction::Annotate {
            r#loop: lanes,
            key: "lanes".into(),
            value: LANES,
        },
    ]
}

/// `specialize` of the diagonal count of [`DIA`]'s one part of `buffer` (the part parameter
/// `BUF.p0.diagonals`) to `diagonals`, the number of distinct diagonals the matrix holds: the
/// loop over a block's diagonals then has a constant trip count, which LLVM unrolls, hoisting
/// the diagonals' offsets out of the block loop. Binding a matrix with another count is an
/// error (the part's offsets have another length), not a wrong result. SpMV on lap3d-large (7
/// diagonals), `lacuna bench`, min over three processes, ms, one / two threads (session 37, Zen
/// 5 guest): 12.3 / 6.3 → 5.9 / 4.1 (33–37 GB/s of DIA's traffic on one thread, STREAM triad
/// 40); lap2d-large (5 diagonals) 8.4 / 5.4 → 5.9 / 4.2.
pub fn specialize_diagonals(buffer: &str, diagonals: u64) -> Instruction {
    Instruction::Specialize {
        param: format!("{buffer}.p0.diagonals"),
        value: diagonals,
    }
}
