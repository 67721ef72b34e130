//! The format language: the egg [`Format`] language, the typed [`Layout`] tree, and validated
//! [`Decomposition`]s with their text form.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use egg::{Id, RecExpr};
use serde::{Deserialize, Serialize};

use super::error::DecomposeError;

/// The deepest nesting a decomposition may have; deeper input is rejected before parsing.
pub const MAX_DEPTH: usize = 128;

/// The most lanes (rows per group) of a `sell` part.
pub const MAX_SELL_LANES: u32 = 64;

/// The most diagonals of a `dia` part.
pub const MAX_DIA_DIAGONALS: u32 = 64;

/// The most lanes (rows per block) of a `dia` part.
pub const MAX_DIA_LANES: u32 = 64;

mod def {
    #![allow(missing_docs)]
    use egg::Id;
    egg::define_language! {
        /// One e-node of the format language. Parameters are [`Format::Num`] children.
        ///
        /// `csr`, `remainder`: store every entry left in the context as CSR.
        /// `(ell w)`: the first `min(len, w)` entries of each non-empty row, padded to `w`.
        /// `(bsr b)`: the entries inside the full `b`×`b` blocks, with explicit zeros.
        /// `(padded t)`: every entry, as CSR with each row padded to a multiple of `t`.
        /// `(split_rows w)`: every entry, each row cut into chunks of `w` (last one padded).
        /// `(sell c s)`: every entry, as sliced ELL (SELL-C-σ): rows in groups of `c`, sorted
        /// by length within windows of `s` rows, each group padded to its longest row and
        /// stored column by column, so that the `c` rows of a group run as vector lanes.
        /// `(dia d c)`: every entry, stored by diagonal (DIA): the context's entries lie on at
        /// most `d` diagonals (column minus row); rows in blocks of `c`, each block holding one
        /// slot per diagonal and row, so that a block's rows run as vector lanes reading `x`
        /// contiguously, with no column indices.
        /// `(panels w)`: every entry, in column panels of `w` columns: panel by panel, each
        /// panel's non-empty rows (with their row ids) as CSR of their entries in the panel, so
        /// that a pass over one panel gathers from `w` columns only.
        /// `rcm`: every entry, as CSR over every row of the matrix (empty ones included) with
        /// row ids, the rows in reverse Cuthill–McKee order of the row–column graph, so that
        /// rows sharing columns run one after another; only as the whole decomposition.
        /// `(bucket lo hi f)`: `f` on the rows whose length (in the context) is in `[lo, hi)`.
        /// `(colpart k p f)`: `f` on the entries whose column lies in part `p` of `k`.
        /// `(+ a b)`: `a`, then `b` on what `a` left.
        pub enum Format {
            "csr" = Csr,
            "remainder" = Remainder,
            "ell" = Ell(Id),
            "bsr" = Bsr(Id),
            "padded" = Padded(Id),
            "split_rows" = SplitRows(Id),
            "sell" = Sell([Id; 2]),
            "dia" = Dia([Id; 2]),
            "panels" = Panels(Id),
            "rcm" = Rcm,
            "bucket" = Bucket([Id; 3]),
            "colpart" = ColPart([Id; 3]),
            "+" = Sum([Id; 2]),
            Num(u32),
        }
    }
}

pub use def::Format;

/// A decomposition as a typed tree; see the module documentation for what each node stores.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Layout {
    /// Every entry left in the context, as CSR (the whole matrix at the root).
    Csr,
    /// Every entry left in the context, as CSR (what earlier summands did not store).
    Remainder,
    /// The first `min(len, width)` entries of each non-empty row, padded to `width`.
    Ell {
        /// Slots per row.
        width: u32,
    },
    /// The entries inside full `block`×`block` blocks, with explicit (masked) zeros.
    Bsr {
        /// Block edge.
        block: u32,
    },
    /// Every entry, as CSR with each row padded to a multiple of `tile`.
    Padded {
        /// Row-length granule.
        tile: u32,
    },
    /// Every entry; each row cut into chunks of `width` slots, one ELL row per chunk.
    SplitRows {
        /// Slots per chunk.
        width: u32,
    },
    /// Every entry, as sliced ELL (SELL-C-σ, Kreutzer et al. 2014): the context's rows, sorted
    /// by decreasing length within consecutive windows of `sigma` rows, are cut into groups of
    /// `lanes`; a group holds as many steps as its longest row, each step one slot per lane
    /// (step `q` of lane `l` is entry `q` of the group's `l`-th row, padding past its end).
    Sell {
        /// Rows per group (vector lanes).
        lanes: u32,
        /// Rows per sorting window (1: rows keep their order).
        sigma: u32,
    },
    /// Every entry, by diagonal (DIA): the distinct diagonals (`column - row`) of the
    /// context's entries, at most `diagonals` of them (more is a conversion error), in
    /// increasing order; the matrix rows, in blocks of `lanes`; diagonal `k` holds, for each
    /// block `b`, one slot per lane `l` (at `(k * blocks + b) * lanes + l`): the entry of row
    /// `b * lanes + l` on diagonal `k`, or padding (value 0) where that row has none there or
    /// lies past the last row. Diagonal-major: a pass over the rows reads one stream per
    /// diagonal, which the hardware prefetchers run ahead of in parallel (one interleaved
    /// stream of every diagonal's blocks ran 1.4× slower beyond the caches on Zen 4).
    Dia {
        /// The most diagonals.
        diagonals: u32,
        /// Rows per block (vector lanes).
        lanes: u32,
    },
    /// Every entry, in column panels: the columns cut into ranges of `width`; panel by panel,
    /// the context's rows holding entries in the panel, in increasing order, each with its
    /// entries there in column order (a doubly compressed CSR per panel, all panels in one
    /// part). A pass over one panel gathers from `width` columns of the dense operand only, which
    /// stay in cache where the whole operand would not; a row with entries in several panels is
    /// written once per panel.
    Panels {
        /// Columns per panel.
        width: u32,
    },
    /// Every entry, as CSR over every row of the matrix, empty rows included, each with its
    /// row id, the rows in reverse Cuthill–McKee order of the graph joining each row to its
    /// columns: rows that share columns (and so gather the same rows of a dense operand) run
    /// one after another, which keeps those rows in cache on matrices whose stored order
    /// scatters them. Each row is stored exactly once (the row ids are a permutation of the
    /// rows), so a kernel may set each row of its result instead of adding to it. Only valid as
    /// the whole decomposition.
    Rcm,
    /// `inner` on the rows whose length in the context lies in `[lo, hi)`.
    Bucket {
        /// Smallest row length (inclusive).
        lo: u32,
        /// Largest row length (exclusive).
        hi: u32,
        /// The format of the bucket.
        inner: Box<Layout>,
    },
    /// `inner` on the entries whose column lies in part `part` of `parts` equal ranges.
    ColPart {
        /// Number of column parts, `ceil(n_cols / parts)` columns each.
        parts: u32,
        /// Which part.
        part: u32,
        /// The format of the part.
        inner: Box<Layout>,
    },
    /// The first summand, then the second on what the first did not store.
    Sum(Box<Layout>, Box<Layout>),
}

impl Layout {
    /// Appends this layout to `expr` and returns the id of its root.
    pub fn add_to(&self, expr: &mut RecExpr<Format>) -> Id {
        match self {
            Layout::Csr => expr.add(Format::Csr),
            Layout::Remainder => expr.add(Format::Remainder),
            Layout::Rcm => expr.add(Format::Rcm),
            Layout::Ell { width } => num_node(expr, *width, Format::Ell),
            Layout::Bsr { block } => num_node(expr, *block, Format::Bsr),
            Layout::Padded { tile } => num_node(expr, *tile, Format::Padded),
            Layout::SplitRows { width } => num_node(expr, *width, Format::SplitRows),
            Layout::Panels { width } => num_node(expr, *width, Format::Panels),
            Layout::Sell { lanes, sigma } => {
                let ids = [expr.add(Format::Num(*lanes)), expr.add(Format::Num(*sigma))];
                expr.add(Format::Sell(ids))
            }
            Layout::Dia { diagonals, lanes } => {
                let ids = [
                    expr.add(Format::Num(*diagonals)),
                    expr.add(Format::Num(*lanes)),
                ];
                expr.add(Format::Dia(ids))
            }
            Layout::Bucket { lo, hi, inner } => {
                let ids = [
                    expr.add(Format::Num(*lo)),
                    expr.add(Format::Num(*hi)),
                    inner.add_to(expr),
                ];
                expr.add(Format::Bucket(ids))
            }
            Layout::ColPart { parts, part, inner } => {
                let ids = [
                    expr.add(Format::Num(*parts)),
                    expr.add(Format::Num(*part)),
                    inner.add_to(expr),
                ];
                expr.add(Format::ColPart(ids))
            }
            Layout::Sum(a, b) => {
                let ids = [a.add_to(expr), b.add_to(expr)];
                expr.add(Format::Sum(ids))
            }
        }
    }

    /// Reads the layout rooted at `id` of `expr`, checking sorts (numbers vs formats).
    pub fn from_expr(expr: &RecExpr<Format>, id: Id) -> Result<Layout, DecomposeError> {
        read(expr, id, 0)
    }

    /// Whether `rcm` occurs in this layout.
    fn contains_rcm(&self) -> bool {
        match self {
            Layout::Rcm => true,
            Layout::Bucket { inner, .. } | Layout::ColPart { inner, .. } => inner.contains_rcm(),
            Layout::Sum(a, b) => a.contains_rcm() || b.contains_rcm(),
            _ => false,
        }
    }

    /// The number of e-nodes this layout takes, parameters included.
    pub fn size(&self) -> usize {
        match self {
            Layout::Csr | Layout::Remainder | Layout::Rcm => 1,
            Layout::Ell { .. } | Layout::Bsr { .. } | Layout::Padded { .. } => 2,
            Layout::SplitRows { .. } | Layout::Panels { .. } => 2,
            Layout::Sell { .. } | Layout::Dia { .. } => 3,
            Layout::Bucket { inner, .. } | Layout::ColPart { inner, .. } => 3 + inner.size(),
            Layout::Sum(a, b) => 1 + a.size() + b.size(),
        }
    }
}

fn num_node(expr: &mut RecExpr<Format>, value: u32, make: fn(Id) -> Format) -> Id {
    let id = expr.add(Format::Num(value));
    expr.add(make(id))
}

fn read(expr: &RecExpr<Format>, id: Id, depth: usize) -> Result<Layout, DecomposeError> {
    if depth > MAX_DEPTH {
        return Err(DecomposeError::TooDeep { limit: MAX_DEPTH });
    }
    let num = |id: Id| match &expr[id] {
        Format::Num(value) => Ok(*value),
        _ => Err(DecomposeError::IllSorted {
            node: usize::from(id),
            expected: "a number",
            found: "a format",
        }),
    };
    let sub = |id: Id| read(expr, id, depth + 1).map(Box::new);
    Ok(match &expr[id] {
        Format::Csr => Layout::Csr,
        Format::Remainder => Layout::Remainder,
        Format::Rcm => Layout::Rcm,
        Format::Ell(w) => Layout::Ell { width: num(*w)? },
        Format::Bsr(b) => Layout::Bsr { block: num(*b)? },
        Format::Padded(t) => Layout::Padded { tile: num(*t)? },
        Format::SplitRows(w) => Layout::SplitRows { width: num(*w)? },
        Format::Panels(w) => Layout::Panels { width: num(*w)? },
        Format::Sell([c, s]) => Layout::Sell {
            lanes: num(*c)?,
            sigma: num(*s)?,
        },
        Format::Dia([d, c]) => Layout::Dia {
            diagonals: num(*d)?,
            lanes: num(*c)?,
        },
        Format::Bucket([lo, hi, f]) => Layout::Bucket {
            lo: num(*lo)?,
            hi: num(*hi)?,
            inner: sub(*f)?,
        },
        Format::ColPart([k, p, f]) => Layout::ColPart {
            parts: num(*k)?,
            part: num(*p)?,
            inner: sub(*f)?,
        },
        Format::Sum([a, b]) => Layout::Sum(sub(*a)?, sub(*b)?),
        Format::Num(_) => {
            return Err(DecomposeError::IllSorted {
                node: usize::from(id),
                expected: "a format",
                found: "a number",
            })
        }
    })
}

/// A layout that stores every entry of every matrix exactly once, with parameters in range.
///
/// Its text form is egg's s-expression: `(+ (bucket 1 2 (ell 1)) remainder)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Decomposition {
    layout: Layout,
}

impl Decomposition {
    /// Checks parameters, nesting depth and totality (the last summand stores what is left).
    pub fn new(layout: Layout) -> Result<Decomposition, DecomposeError> {
        check(&layout, 0)?;
        if !matches!(layout, Layout::Rcm) && layout.contains_rcm() {
            return Err(DecomposeError::NotAtRoot { op: "rcm" });
        }
        if cover(&layout) != Cover::All {
            return Err(DecomposeError::NotTotal);
        }
        Ok(Decomposition { layout })
    }

    /// The whole matrix as CSR.
    pub fn csr() -> Decomposition {
        Decomposition {
            layout: Layout::Csr,
        }
    }

    /// The typed tree.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The term as an egg expression.
    pub fn to_rec_expr(&self) -> RecExpr<Format> {
        let mut expr = RecExpr::default();
        self.layout.add_to(&mut expr);
        expr
    }
}

impl fmt::Display for Decomposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_rec_expr())
    }
}

impl FromStr for Decomposition {
    type Err = DecomposeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        // egg's s-expression reader recurses once per level: bound the depth before calling it.
        let mut depth = 0usize;
        for c in text.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth > MAX_DEPTH {
                return Err(DecomposeError::TooDeep { limit: MAX_DEPTH });
            }
        }
        let expr: RecExpr<Format> = text.parse()?;
        if expr.is_empty() {
            return Err(DecomposeError::Empty);
        }
        Decomposition::new(Layout::from_expr(&expr, expr.root())?)
    }
}

impl TryFrom<String> for Decomposition {
    type Error = DecomposeError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<Decomposition> for String {
    fn from(d: Decomposition) -> String {
        d.to_string()
    }
}

fn bad(
    op: &'static str,
    param: &'static str,
    value: u32,
    expected: &'static str,
) -> DecomposeError {
    DecomposeError::BadParameter {
        op,
        param,
        value,
        expected,
    }
}

fn check(layout: &Layout, depth: usize) -> Result<(), DecomposeError> {
    if depth > MAX_DEPTH {
        return Err(DecomposeError::TooDeep { limit: MAX_DEPTH });
    }
    match layout {
        Layout::Csr | Layout::Remainder | Layout::Rcm => Ok(()),
        Layout::Ell { width: 0 } => Err(bad("ell", "width", 0, "at least 1")),
        Layout::Bsr { block: 0 } => Err(bad("bsr", "block", 0, "at least 1")),
        Layout::Padded { tile: 0 } => Err(bad("padded", "tile", 0, "at least 1")),
        Layout::SplitRows { width: 0 } => Err(bad("split_rows", "width", 0, "at least 1")),
        Layout::Panels { width: 0 } => Err(bad("panels", "width", 0, "at least 1")),
        Layout::Sell { lanes, .. } if !(1..=MAX_SELL_LANES).contains(lanes) => {
            Err(bad("sell", "lanes", *lanes, "from 1 to 64"))
        }
        Layout::Sell { sigma: 0, .. } => Err(bad("sell", "sigma", 0, "at least 1")),
        Layout::Sell { .. } => Ok(()),
        Layout::Dia { diagonals, .. } if !(1..=MAX_DIA_DIAGONALS).contains(diagonals) => {
            Err(bad("dia", "diagonals", *diagonals, "from 1 to 64"))
        }
        Layout::Dia { lanes, .. } if !(1..=MAX_DIA_LANES).contains(lanes) => {
            Err(bad("dia", "lanes", *lanes, "from 1 to 64"))
        }
        Layout::Dia { .. } => Ok(()),
        Layout::Ell { .. } | Layout::Bsr { .. } | Layout::Padded { .. } => Ok(()),
        Layout::SplitRows { .. } | Layout::Panels { .. } => Ok(()),
        Layout::Bucket { lo, hi, inner } => {
            if hi <= lo {
                return Err(bad("bucket", "hi", *hi, "greater than lo"));
            }
            check(inner, depth + 1)
        }
        Layout::ColPart { parts, part, inner } => {
            if *parts == 0 {
                return Err(bad("colpart", "parts", 0, "at least 1"));
            }
            if part >= parts {
                return Err(bad("colpart", "part", *part, "below the number of parts"));
            }
            check(inner, depth + 1)
        }
        Layout::Sum(a, b) => {
            check(a, depth + 1)?;
            check(b, depth + 1)
        }
    }
}

/// Which entries a layout is sure to store, whatever its context.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Cover {
    Nothing,
    /// These parts of a `k`-way column partition.
    Parts(u32, BTreeSet<u32>),
    All,
}

fn cover(layout: &Layout) -> Cover {
    match layout {
        Layout::Csr
        | Layout::Remainder
        | Layout::Rcm
        | Layout::Padded { .. }
        | Layout::SplitRows { .. }
        | Layout::Panels { .. }
        | Layout::Sell { .. }
        | Layout::Dia { .. } => Cover::All,
        Layout::Ell { .. } | Layout::Bsr { .. } | Layout::Bucket { .. } => Cover::Nothing,
        Layout::ColPart { parts, part, inner } => match cover(inner) {
            Cover::All => normalize(*parts, BTreeSet::from([*part])),
            Cover::Nothing | Cover::Parts(..) => Cover::Nothing,
        },
        Layout::Sum(a, b) => match (cover(a), cover(b)) {
            (Cover::All, _) | (_, Cover::All) => Cover::All,
            (Cover::Nothing, other) | (other, Cover::Nothing) => other,
            (Cover::Parts(k, mut left), Cover::Parts(j, right)) => {
                if k == j {
                    left.extend(right);
                    normalize(k, left)
                } else if left.len() as u64 * u64::from(j) >= right.len() as u64 * u64::from(k) {
                    Cover::Parts(k, left)
                } else {
                    Cover::Parts(j, right)
                }
            }
        },
    }
}

fn normalize(k: u32, set: BTreeSet<u32>) -> Cover {
    if set.len() as u64 >= u64::from(k) {
        Cover::All
    } else {
        Cover::Parts(k, set)
    }
}

/// The width of column panels (`(panels w)`) whose slice of the dense operand fits in `bytes`,
/// each column gathering `column_bytes` of it (8 for SpMV's `x`, a row of `B` for SpMM): the
/// power of two of columns nearest below `bytes / column_bytes`, clamped to `min..=2^30`.
pub fn panel_width(bytes: usize, column_bytes: usize, min: usize) -> u32 {
    let columns = (bytes / column_bytes.max(1)).clamp(min.max(1), 1 << 30);
    1 << columns.ilog2()
}
