//! Errors of format decomposition: bad matrices, bad decompositions, bad candidate sets.

use egg::{FromOpError, RecExprParseError};

/// What a decomposition, a candidate set or a matrix handed to this module got wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecomposeError {
    /// The text is not an s-expression of the format language.
    #[error("cannot parse the decomposition: {0}")]
    Parse(#[from] RecExprParseError<FromOpError>),
    /// A term has no nodes.
    #[error("the decomposition is empty")]
    Empty,
    /// The term nests deeper than the limit.
    #[error("the decomposition nests deeper than {limit} levels")]
    TooDeep {
        /// The limit, [`MAX_DEPTH`](super::MAX_DEPTH).
        limit: usize,
    },
    /// A number stands where a format is expected, or a format where a number is expected.
    #[error("node {node} is {found}, expected {expected}")]
    IllSorted {
        /// Index of the node in the expression (post-order, children first).
        node: usize,
        /// `a format` or `a number`.
        expected: &'static str,
        /// What stands there instead.
        found: &'static str,
    },
    /// A parameter is out of its range, e.g. `(ell 0)` or `(colpart 2 5 csr)`.
    #[error("`{op}`: {param} = {value} is out of range ({expected})")]
    BadParameter {
        /// The operator.
        op: &'static str,
        /// The parameter's name.
        param: &'static str,
        /// The value given.
        value: u32,
        /// The admissible range, in words.
        expected: &'static str,
    },
    /// A format valid only as the whole decomposition appears inside another.
    #[error("`{op}` is only valid as the whole decomposition, not inside another format")]
    NotAtRoot {
        /// The format.
        op: &'static str,
    },
    /// The decomposition may leave some entries unstored: its last summand must store
    /// everything that is left (`csr`, `remainder`, `padded`, `split_rows`, or a full set of
    /// column parts).
    #[error("the decomposition does not store every entry (it must end in a total format)")]
    NotTotal,
    /// A candidate set is empty or holds a value out of range.
    #[error("candidate {field}: {value} is out of range ({expected})")]
    BadCandidate {
        /// `widths`, `blocks`, `col_parts` or `pad_tiles`.
        field: &'static str,
        /// The value given (0 for an empty set).
        value: u32,
        /// The admissible range, in words.
        expected: &'static str,
    },
    /// `indptr` has the wrong length.
    #[error("indptr has {found} entries, expected n_rows + 1 = {expected}")]
    IndptrLength {
        /// `n_rows + 1`.
        expected: usize,
        /// The length given.
        found: usize,
    },
    /// `indptr` does not start at 0, decreases, or does not end at `indices.len()`.
    #[error("indptr is not monotone from 0 to nnz = {nnz} at row {row}")]
    IndptrNotMonotone {
        /// The first row whose bounds are wrong.
        row: usize,
        /// The number of stored entries.
        nnz: usize,
    },
    /// The values of a buffer stored once (`iso_values`) are not all equal.
    #[error("stored entry {position} is {value:e}, unlike entry 0 ({first:e}): iso_values stores one value for every entry, so the values must be equal bit for bit")]
    NotIso {
        /// The first entry (in storage order) that differs from entry 0.
        position: usize,
        /// Its value.
        value: f64,
        /// Entry 0's value.
        first: f64,
    },
    /// `values` and `indices` have different lengths.
    #[error("values has {found} entries, expected nnz = {expected}")]
    ValuesLength {
        /// `indices.len()`.
        expected: usize,
        /// `values.len()`.
        found: usize,
    },
    /// A column index is not below `n_cols`.
    #[error("row {row}: column {col} is out of range (n_cols = {n_cols})")]
    ColumnOutOfRange {
        /// The row.
        row: usize,
        /// The column index.
        col: usize,
        /// The number of columns.
        n_cols: usize,
    },
    /// A triple's row is not below `n_rows`.
    #[error("row {row} is out of range (n_rows = {n_rows})")]
    RowOutOfRange {
        /// The row index.
        row: usize,
        /// The number of rows.
        n_rows: usize,
    },
    /// Columns within a row are not strictly increasing (unsorted or duplicated).
    #[error("row {row}: columns are not strictly increasing at column {col}")]
    ColumnsNotIncreasing {
        /// The row.
        row: usize,
        /// The first column out of order.
        col: usize,
    },
    /// A part's source map, as bound for the generated value copy, points past the decomposed
    /// buffer's entries (bindings changed by hand after the conversion).
    #[error(
        "source map `{map}`: slot {slot} holds entry {value}, past the buffer's {nnz} entries"
    )]
    SourceMap {
        /// The map (`A.pT.src`).
        map: String,
        /// The slot.
        slot: usize,
        /// The entry it holds.
        value: i64,
        /// The decomposed buffer's number of entries.
        nnz: usize,
    },
    /// A relation-level (`per_relation`) decomposition got a tensor or term it cannot take.
    #[error("per_relation: {0}")]
    Relations(String),
    /// A part would hold more slots (entries plus padding) than [`MAX_PART_SLOTS`].
    ///
    /// [`MAX_PART_SLOTS`]: super::MAX_PART_SLOTS
    #[error("part `{op}` would hold {slots} slots, more than the limit {limit}")]
    StorageTooLarge {
        /// The operator of the part.
        op: &'static str,
        /// The number of slots it would need (saturating).
        slots: usize,
        /// The limit.
        limit: usize,
    },
    /// A `dia` part got entries on more diagonals than it may store.
    #[error("part `dia {limit}` would store entries on {found} diagonals, more than {limit} (first beyond: column - row = {first_beyond})")]
    TooManyDiagonals {
        /// Distinct diagonals of the part's entries.
        found: usize,
        /// The most the part stores.
        limit: usize,
        /// The diagonal (in increasing order) past the limit.
        first_beyond: i64,
    },
    /// A part's row id or position does not fit the 32-bit indices of the kernel's axes.
    #[error("part `{op}`: {what} {value} does not fit the kernel's 32-bit indices")]
    IndexTooWide {
        /// The operator of the part.
        op: &'static str,
        /// Which array: `row id`, `position`, `column`.
        what: &'static str,
        /// The value.
        value: usize,
    },
}
