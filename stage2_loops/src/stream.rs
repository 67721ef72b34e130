//! Streaming stores: the loops whose stores a `nontemporal` annotation may turn into
//! non-temporal (streaming) vector stores on the CPU.
//!
//! A store that writes a whole cache line the kernel does not read again need not bring the
//! line into the caches first (the read-for-ownership of an ordinary store) nor evict other
//! data with it: x86's `vmovntpd` writes it to memory through a write-combining buffer. That
//! pays for outputs larger than the last-level cache written once, such as SpMM's `C` rows
//! stored from the registers that accumulated them (`reverse_cache_write`).
//!
//! The emitter streams exactly the loops [`stream_loop`] accepts:
//!
//! ```text
//! for v in lo..lo+n {          // constant range
//!   let x = ...                // any lets
//!   b[.., e + v] = value       // one store; the last index is `v` plus terms not reading
//! }                            // `v`, the others do not read `v`; `value` does not read `b`
//! ```
//!
//! so that the `n` iterations store `n` consecutive elements of `b` (buffers are laid out
//! row-major, the last index contiguous). It tests at run time that the first element starts
//! a vector (64 bytes with AVX-512, 32 with AVX2) and then stores whole vectors
//! non-temporally; otherwise, or where `n` is not a whole number of vectors, it runs the loop
//! as written. Streaming stores are weakly ordered: the emitter ends every function that
//! issued one with a store fence (`sfence`), before its results are read elsewhere.

use crate::ir::{Expr, Stmt};
use crate::passes::simplify;
use lacuna_stage1::BinOp;

/// A loop [`stream_loop`] accepts: its `n` iterations from `lo` store consecutive elements of
/// `buffer` with `store`.
#[derive(Clone, Copy, Debug)]
pub struct StreamLoop<'a> {
    /// The stored buffer.
    pub buffer: &'a str,
    /// The loop's first value.
    pub lo: i64,
    /// The loop's trip count.
    pub n: i64,
    /// The store (the body's last statement).
    pub store: &'a Stmt,
}

/// True when `e` is `v` plus terms that do not read `v` (sums and differences).
pub fn unit_in(e: &Expr, v: &str) -> bool {
    let m = |x: &Expr| x.reads_var(&|y| y == v);
    match e {
        Expr::Var(x) => x == v,
        Expr::Binary(BinOp::Add, a, b) => (unit_in(a, v) && !m(b)) || (unit_in(b, v) && !m(a)),
        Expr::Binary(BinOp::Sub, a, b) => unit_in(a, v) && !m(b),
        _ => false,
    }
}

fn reads_buffer(e: &Expr, b: &str) -> bool {
    matches!(e, Expr::Load { buffer, .. } if buffer == b)
        || e.children().into_iter().any(|c| reads_buffer(c, b))
}

/// The loop `for var in start..end { body }` if its iterations store consecutive elements of
/// one buffer (see the module documentation); `None` otherwise.
pub fn stream_loop<'a>(
    var: &str,
    start: &Expr,
    end: &Expr,
    body: &'a [Stmt],
) -> Option<StreamLoop<'a>> {
    let (Expr::Int(lo, _), Expr::Int(hi, _)) =
        (simplify::expr(start.clone()), simplify::expr(end.clone()))
    else {
        return None;
    };
    let (store, lets) = body.split_last()?;
    let Stmt::Store {
        buffer,
        indices,
        value,
    } = store
    else {
        return None;
    };
    let mut resolved = indices.clone();
    for s in lets.iter().rev() {
        let Stmt::Let { var: x, value: v } = s else {
            return None;
        };
        if x == var || reads_buffer(v, buffer) {
            return None;
        }
        resolved = resolved.into_iter().map(|e| e.subst_var(x, v)).collect();
    }
    let (last, outer) = resolved.split_last()?;
    let reads = |e: &Expr| e.reads_var(&|y| y == var);
    (hi > lo
        && unit_in(last, var)
        && !outer.iter().any(reads)
        && !reads_buffer(value, buffer)
        && !indices.iter().any(|i| reads_buffer(i, buffer)))
    .then_some(StreamLoop {
        buffer,
        lo,
        n: hi - lo,
        store,
    })
}

/// Whether some loop in `stmts` (at any depth) is a [`stream_loop`] storing into a buffer for
/// which `global` holds (not a scratch buffer).
pub fn has_stream_loop(stmts: &[Stmt], global: &dyn Fn(&str) -> bool) -> bool {
    stmts.iter().any(|s| {
        let here = match s {
            Stmt::For {
                var,
                start,
                end,
                body,
                ..
            } => stream_loop(var, start, end, body).is_some_and(|l| global(l.buffer)),
            _ => false,
        };
        here || s.bodies().into_iter().any(|b| has_stream_loop(b, global))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lacuna_ir::DType;

    fn store(b: &str, idx: Vec<Expr>, value: Expr) -> Stmt {
        Stmt::Store {
            buffer: b.into(),
            indices: idx,
            value,
        }
    }
    fn add(a: Expr, b: Expr) -> Expr {
        Expr::bin(BinOp::Add, a, b)
    }

    #[test]
    fn a_row_copied_from_a_cache_streams_and_other_stores_do_not() {
        let k = add(Expr::mul(Expr::var("k0"), Expr::i64(64)), Expr::var("v"));
        let body = vec![
            Stmt::Let {
                var: "k".into(),
                value: k,
            },
            store(
                "C",
                vec![Expr::var("i"), Expr::var("k")],
                Expr::Load {
                    buffer: "C_local".into(),
                    indices: vec![Expr::var("v")],
                },
            ),
        ];
        let l = stream_loop("v", &Expr::i64(0), &Expr::i64(64), &body).expect("streams");
        assert_eq!((l.buffer, l.lo, l.n), ("C", 0, 64));
        // Not a constant range.
        assert!(stream_loop("v", &Expr::i64(0), &Expr::var("n"), &body).is_none());
        // A stride of 2.
        let strided = vec![store(
            "C",
            vec![Expr::mul(Expr::var("v"), Expr::i64(2))],
            Expr::Float(0.0, DType::F64),
        )];
        assert!(stream_loop("v", &Expr::i64(0), &Expr::i64(8), &strided).is_none());
        // The loop variable in an outer index: a column, not a row.
        let column = vec![store(
            "C",
            vec![Expr::var("v"), Expr::var("j")],
            Expr::Float(0.0, DType::F64),
        )];
        assert!(stream_loop("v", &Expr::i64(0), &Expr::i64(8), &column).is_none());
        // A sum into the buffer reads it.
        let sum = vec![store(
            "C",
            vec![Expr::var("v")],
            add(
                Expr::Load {
                    buffer: "C".into(),
                    indices: vec![Expr::var("v")],
                },
                Expr::Float(1.0, DType::F64),
            ),
        )];
        assert!(stream_loop("v", &Expr::i64(0), &Expr::i64(8), &sum).is_none());
        // Found below other loops, for global buffers only.
        let nest = vec![Stmt::For {
            var: "k0".into(),
            start: Expr::i64(0),
            end: Expr::i64(2),
            kind: crate::ir::ForKind::Serial,
            body: vec![Stmt::For {
                var: "v".into(),
                start: Expr::i64(0),
                end: Expr::i64(64),
                kind: crate::ir::ForKind::Serial,
                body,
            }],
        }];
        assert!(has_stream_loop(&nest, &|b| b == "C"));
        assert!(!has_stream_loop(&nest, &|b| b != "C"));
    }
}
