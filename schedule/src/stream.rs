//! Output rows kept in registers and written once with streaming stores: the trace the
//! built-in SpMM schedule (`lacuna::driver::spmm_stream_trace`) and the tuning template's
//! `stores: streamed` decision both apply, after a feature loop's split and hoist.

use crate::Instruction;

/// The primitives that keep each row of `output`, which block `block` sums into under its row
/// loop `row`, in a local cache (`reverse_cache_write` at the row: the cache starts at zero in
/// place of the output's init, which it folds in), unroll the hoisted feature tiles `tiles` so
/// that the cache's vectors stay in registers, and store the row once with streaming stores
/// (`annotate(row, nontemporal)`).
pub fn streamed_rows_trace(block: &str, output: &str, row: &str, tiles: &str) -> Vec<Instruction> {
    let mut trace = cached_rows_trace(block, output, row, tiles);
    trace.push(Instruction::Annotate {
        r#loop: row.into(),
        key: "nontemporal".into(),
        value: 1,
    });
    trace
}

/// [`streamed_rows_trace`] without the streaming stores: each row of `output` summed in
/// registers (its init folded into the cache) and stored once, plainly.
pub fn cached_rows_trace(block: &str, output: &str, row: &str, tiles: &str) -> Vec<Instruction> {
    vec![
        Instruction::ReverseCacheWrite {
            block: block.into(),
            buffer: output.into(),
            scope: "local".into(),
            at: Some(row.into()),
        },
        Instruction::Unroll {
            r#loop: tiles.into(),
        },
    ]
}
