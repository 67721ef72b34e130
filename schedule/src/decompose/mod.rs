//! Format decomposition with egg: a small format language, tensor-preserving rewrite rules,
//! a cost from matrix statistics to pick a decomposition, and the conversion routines that
//! build each part's storage.
//!
//! # Meaning of a term
//!
//! A term is evaluated in a *context*, the set of stored entries it sees (the whole matrix at
//! the root). It stores some of them in one or more parts and leaves the rest:
//!
//! | term | stores | leaves |
//! |---|---|---|
//! | `csr`, `remainder` | every entry, as CSR | nothing |
//! | `(ell w)` | the first `min(len, w)` entries of each non-empty row, padded to `w` | the rest of longer rows |
//! | `(split_rows w)` | every entry, each row cut into chunks of `w`, one ELL row per chunk | nothing |
//! | `(padded t)` | every entry, as CSR with rows padded to a multiple of `t` | nothing |
//! | `(bsr b)` | the entries inside full `b`×`b` blocks, explicit zeros masked | the last `n_rows % b` rows and `n_cols % b` columns |
//! | `rcm` (whole decomposition only) | every entry, as CSR over every row with row ids, rows in reverse Cuthill–McKee order | nothing |
//! | `(panels w)` | every entry, panel by panel (columns `[p·w, (p+1)·w)`), each panel's non-empty rows as CSR with row ids | nothing |
//! | `(bucket lo hi f)` | what `f` stores of the rows whose length (in the context) is in `[lo, hi)` | the rest |
//! | `(colpart k p f)` | what `f` stores of the entries in columns `[p·s, (p+1)·s)`, `s = ⌈n_cols/k⌉` | the rest |
//! | `(+ a b)` | what `a` stores, then what `b` stores of what `a` left | what `b` left |
//!
//! Two terms are equivalent when they store the same entries in every context. Every rule in
//! [`rules`] rewrites a term into an equivalent one, so every term of the e-class of `csr`
//! stores each entry exactly once. A [`Decomposition`] is a term that stores everything
//! (its last summand is total) with parameters in range; [`materialize`] builds its parts and
//! [`to_coo`] sums them back. [`inspect`] builds the same structure without the values, with
//! the position in the CSR matrix of the entry behind each value slot (a generated copy fills
//! the values from it).
//!
//! Every row a part writes that another part (or the same one, for split rows) also writes is
//! flagged by [`Part::accumulate`]: such parts must add into the output, atomically on a GPU.
//!
//! # Example
//!
//! ```
//! use lacuna_schedule::decompose::{materialize, to_coo, CsrMatrix, Decomposition};
//!
//! let csr = CsrMatrix::new(2, 3, vec![0, 1, 4], vec![2, 0, 1, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
//! let hyb: Decomposition = "(+ (bucket 1 3 (ell 2)) (split_rows 2))".parse().unwrap();
//! let parts = materialize(&csr, &hyb).unwrap();
//! assert_eq!(parts.len(), 2);
//! assert_eq!(to_coo(&parts), csr.to_triples().unwrap());
//! ```

mod cost;
mod error;
mod extract;
mod lang;
mod materialize;
mod matrix;
mod order;
mod parts;
mod region;
mod rules;
mod saturate;
mod stats;

pub use cost::{estimate, Cost, CostWeights, ATOMIC, GROUP, ROW_BOUNDS, UNCONVERTIBLE};
pub use error::DecomposeError;
pub use lang::{
    panel_width, Decomposition, Format, Layout, MAX_DEPTH, MAX_DIA_DIAGONALS, MAX_DIA_LANES,
    MAX_SELL_LANES,
};
pub use materialize::{inspect, materialize, Inspection, MAX_PART_SLOTS};
pub use matrix::CsrMatrix;
pub use order::{rcm_rows, reuse};
pub use parts::{
    to_coo, BsrStorage, DiaStorage, EllStorage, Filter, PaddedStorage, PanelsStorage, Part,
    RowsStorage, SellStorage, Storage,
};
pub use rules::{hyb, rules, Candidates, Rule, MAX_CANDIDATES, MAX_PARTS, MAX_WIDTH};
pub use saturate::{best, enumerate, saturate, saturate_csr, RunnerLimits, Saturation, StopReason};
pub use stats::{diagonals, BlockStats, Histogram, MatrixStats, STAT_SIZES};
