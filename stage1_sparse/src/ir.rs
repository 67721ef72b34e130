//! The stage-I program: symbolic sizes, sparse axes, sparse buffers and sparse iterations.

use crate::parse::{parse_size, parse_stmt_text};
use lacuna_ir::DType;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Version of the RON kernel format written by this crate.
pub const KERNEL_FORMAT_VERSION: u32 = 1;

/// A whole stage-I kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Program {
    /// Format version of the kernel file (currently 1).
    pub version: u32,
    /// Kernel name.
    pub name: String,
    /// Symbolic integer sizes (extents and nnz counts), bound from the inputs at run time.
    #[serde(default)]
    pub params: Vec<String>,
    /// Axes in definition order; a parent is defined before its children.
    pub axes: Vec<Axis>,
    /// Buffers, matched to inputs/outputs or allocated as intermediates.
    pub buffers: Vec<Buffer>,
    /// Top-level statements, usually sparse iterations.
    pub body: Vec<Stmt>,
}

/// A symbolic or constant size.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Size {
    /// A constant.
    Const(u64),
    /// A parameter of the program.
    Param(String),
}

impl TryFrom<String> for Size {
    type Error = String;
    fn try_from(s: String) -> Result<Size, String> {
        parse_size(&s)
    }
}
impl From<Size> for String {
    fn from(s: Size) -> String {
        s.to_string()
    }
}
impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Size::Const(c) => write!(f, "{c}"),
            Size::Param(p) => f.write_str(p),
        }
    }
}

/// Element type of an axis's structure arrays (indptr, indices).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum IndexType {
    /// 32-bit indices.
    #[default]
    I32,
    /// 64-bit indices.
    I64,
}

impl IndexType {
    /// The element type of the structure arrays.
    pub fn dtype(self) -> DType {
        match self {
            IndexType::I32 => DType::I32,
            IndexType::I64 => DType::I64,
        }
    }
}

/// A sparse axis (SparseTIR): a dimension of iteration and storage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Axis {
    /// Unique name, e.g. `J`.
    pub name: String,
    /// Shape and structure.
    pub kind: AxisKind,
    /// Element type of the structure arrays.
    #[serde(default)]
    pub idtype: IndexType,
    /// Whether coordinates within a segment are strictly increasing (enables binary search).
    #[serde(default = "default_true")]
    pub sorted: bool,
    /// Closed forms asserted for the structure arrays (schedule primitive `specialize_buffer`):
    /// the kernel computes them instead of loading the arrays, and binding checks the data.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closed_forms: Vec<ClosedForm>,
    /// Set where this axis's coordinates number whole tiles of a larger extent (BSR's block
    /// rows and block columns, which hold only blocks inside the matrix): every coordinate `c`,
    /// times the factor plus an offset below it, lies within the tiled extent. Checked when
    /// data is bound; a kernel then indexes the tiled axis by `c * factor + offset` without a
    /// range check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiles: Option<Tiles>,
}

/// What [`Axis::tiles`] asserts: the axis's coordinate extent times `factor` is at most
/// `extent`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tiles {
    /// The tiled extent (of the matrix's rows or columns).
    pub extent: Size,
    /// Coordinates of the tiled extent per coordinate of this axis (the block edge).
    pub factor: u64,
}

/// A closed form of an axis's structure array, in terms of the parent position `i` and the
/// stored position `p` (e.g. a band: `indices[p] = i + (p - indptr[i]) - w`; rows of one
/// length `w`: `indptr[i] = w * i`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ClosedForm {
    /// `indptr[i] = stride * i`.
    Indptr {
        /// Entries per segment.
        stride: i64,
    },
    /// `indices[p] = row * i + in_row * (p - indptr[i]) + constant` for `p` in segment `i`.
    Indices {
        /// Coefficient of the parent position.
        row: i64,
        /// Coefficient of the position within the segment.
        in_row: i64,
        /// Constant term.
        constant: i64,
    },
}

impl ClosedForm {
    /// The array it replaces: `indptr` or `indices`.
    pub fn array(&self) -> &'static str {
        match self {
            ClosedForm::Indptr { .. } => "indptr",
            ClosedForm::Indices { .. } => "indices",
        }
    }
}

fn default_true() -> bool {
    true
}

/// The four axis kinds of SparseTIR, plus attached axes (SparseTIR's `T.attach`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AxisKind {
    /// Every coordinate `0..n` is stored. Has no parent.
    DenseFixed {
        /// Extent.
        n: Size,
    },
    /// A ragged axis: each parent segment stores coordinates `0..len` (len from `indptr`).
    DenseVariable {
        /// Parent axis.
        parent: String,
        /// Upper bound of a segment's length (the coordinate extent).
        max_len: Size,
        /// Total number of stored positions.
        nnz: Size,
    },
    /// Each parent segment stores exactly `nnz_cols` coordinates (ELL), given by `indices`.
    SparseFixed {
        /// Parent axis.
        parent: String,
        /// Coordinate extent.
        n: Size,
        /// Stored coordinates per segment.
        nnz_cols: Size,
    },
    /// CSR-like: each parent segment stores the coordinates `indices[indptr[p]..indptr[p+1]]`
    /// (or `indices[indptr[2p]..indptr[2p+1]]` when `loose`: MLIR's loose_compressed, whose
    /// segments are (lo, hi) pairs that may leave gaps).
    SparseVariable {
        /// Parent axis.
        parent: String,
        /// Coordinate extent.
        n: Size,
        /// Total number of stored positions (the length of `indices`).
        nnz: Size,
        /// Segments are (lo, hi) pairs.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        loose: bool,
    },
    /// SparseTIR's `attach(base, parent)`: the fibers of `base` (whose own parent is a
    /// detached `dense_fixed` axis) re-parented under `parent`. Under a point of `parent` it
    /// visits the fiber of `base` selected by the parent's *coordinate* (not its position):
    /// positions `indptr[c]..indptr[c + 1]` of `base`, `c` the coordinate of the parent's
    /// iterator. It owns no storage (it shares `base`'s indptr/indices) and is only iterated,
    /// never a buffer axis: accesses index `base`'s buffers with its iterator.
    Attached {
        /// The re-parented axis (dense_variable, sparse_fixed or sparse_variable over a
        /// dense_fixed axis).
        base: String,
        /// The new parent; its coordinate extent equals that of `base`'s parent.
        parent: String,
        /// Coordinate extent, equal to `base`'s.
        n: Size,
    },
}

impl AxisKind {
    /// True for a sparse_variable axis whose segments are (lo, hi) pairs.
    pub fn is_loose(&self) -> bool {
        matches!(self, AxisKind::SparseVariable { loose: true, .. })
    }
    /// Indices into `indptr` of the start and end of the segment of parent position `o`.
    pub fn segment_slots(&self, o: usize) -> (usize, usize) {
        if self.is_loose() {
            (2 * o, 2 * o + 1)
        } else {
            (o, o + 1)
        }
    }
    /// The parent axis, if any.
    pub fn parent(&self) -> Option<&str> {
        match self {
            AxisKind::DenseFixed { .. } => None,
            AxisKind::DenseVariable { parent, .. }
            | AxisKind::SparseFixed { parent, .. }
            | AxisKind::SparseVariable { parent, .. }
            | AxisKind::Attached { parent, .. } => Some(parent),
        }
    }
    /// The extent of coordinates on this axis.
    pub fn coord_extent(&self) -> &Size {
        match self {
            AxisKind::DenseFixed { n } => n,
            AxisKind::DenseVariable { max_len, .. } => max_len,
            AxisKind::SparseFixed { n, .. }
            | AxisKind::SparseVariable { n, .. }
            | AxisKind::Attached { n, .. } => n,
        }
    }
    /// True when segments are delimited by an `indptr` array.
    pub fn has_indptr(&self) -> bool {
        matches!(
            self,
            AxisKind::DenseVariable { .. } | AxisKind::SparseVariable { .. }
        )
    }
    /// True when stored coordinates are given by an `indices` array.
    pub fn has_indices(&self) -> bool {
        matches!(
            self,
            AxisKind::SparseFixed { .. } | AxisKind::SparseVariable { .. }
        )
    }
    /// True for the dense kinds (coordinate = position within the segment).
    pub fn is_dense(&self) -> bool {
        matches!(
            self,
            AxisKind::DenseFixed { .. } | AxisKind::DenseVariable { .. }
        )
    }
    /// The short name used by the printer.
    pub fn keyword(&self) -> &'static str {
        match self {
            AxisKind::DenseFixed { .. } => "dense_fixed",
            AxisKind::DenseVariable { .. } => "dense_variable",
            AxisKind::SparseFixed { .. } => "sparse_fixed",
            AxisKind::SparseVariable { .. } => "sparse_variable",
            AxisKind::Attached { .. } => "attach",
        }
    }
    /// The base axis of an attached axis.
    pub fn attached_base(&self) -> Option<&str> {
        match self {
            AxisKind::Attached { base, .. } => Some(base),
            _ => None,
        }
    }
}

/// How a buffer is bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum Role {
    /// A parameter read by the kernel; must be given.
    #[default]
    Input,
    /// A parameter written by the kernel; allocated zero-filled and returned.
    Output,
    /// An intermediate allocated by the kernel and not returned.
    Alloc,
}

/// A sparse buffer: a tensor stored over a list of axes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Buffer {
    /// Unique name, e.g. `A`.
    pub name: String,
    /// Axes in storage order; an axis with a parent directly follows it.
    pub axes: Vec<String>,
    /// Element type.
    pub dtype: DType,
    /// Input, output or intermediate.
    #[serde(default)]
    pub role: Role,
    /// Value read at coordinates that are not stored (defaults to zero).
    #[serde(default)]
    pub default_value: Option<f64>,
    /// Extra elements allocated past the stored positions.
    #[serde(default)]
    pub extra_storage: u64,
    /// Storage format as an MLIR encoding (`map = (i, j) -> (...)`) or a preset (`csc`,
    /// `bsr(2,2)`, ...). The buffer's `axes` are then its dimensions (dense axes), and
    /// `sparsify` rewrites the program to iterate the encoding's levels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    /// Set by `sparsify` on an encoded buffer: its dimension axes (its `axes` are then the
    /// level axes of the encoding).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dims: Vec<String>,
    /// An integer input whose every value is a coordinate of this axis (`0 <= v < extent`),
    /// checked when data is bound (a typed error names the first value outside). A dense axis
    /// of the same extent indexed by such a value then needs no range check in the kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinates_of: Option<String>,
    /// With `coordinates_of`, on a buffer of one axis: it holds every coordinate of that axis
    /// exactly once (a permutation), checked when data is bound. A format's row ids declared
    /// so let a kernel set each row of its result instead of adding into a zeroed one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub permutation: bool,
}

/// Whether an iteration axis is spatial or a reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IterKind {
    /// Spatial: indexes the written buffer.
    S,
    /// Reduction: summed over.
    R,
}

/// A sparse iteration: loops over the stored points of its axes, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Iteration {
    /// Unique name (the block's name).
    pub name: String,
    /// Iterated axes, outermost first.
    pub axes: Vec<String>,
    /// One letter `S` or `R` per axis, e.g. `"SRS"`.
    pub kinds: String,
    /// Iterator variable per axis, e.g. `["i", "j", "k"]`.
    pub vars: Vec<String>,
    /// Statements run once per spatial point before the reduction.
    #[serde(default)]
    pub init: Vec<Stmt>,
    /// Statements run at every point.
    pub body: Vec<Stmt>,
    /// Pairs of consecutive axes iterated as one (SparseTIR's `sparse_fuse`): a parent and its
    /// variable child become one loop over the child's positions, the parent's position
    /// recovered by a search of the child's `indptr`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fused: Vec<(String, String)>,
    /// Compile by co-iteration (merge lattices over several sparse operands, results whose
    /// pattern is computed), with these options. Chosen automatically when the iteration reads
    /// two encoded operands or writes an encoded result of its own structure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coiteration: Option<Coiteration>,
    /// Annotations (SparseTIR's `sp_iter_attr`), key to value, set by the `annotate` schedule
    /// primitive, e.g. `preprocess`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// Options of co-iteration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coiteration {
    /// How co-iterated levels are merged.
    #[serde(default)]
    pub merge: Merge,
    /// Whether an operand whose level order conflicts with the iteration order may be copied
    /// into a compatible order (an automatic transposition) instead of being an error.
    #[serde(default)]
    pub transpose: bool,
}

/// Merge strategy of co-iterated sparse levels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Merge {
    /// Advance every iterator at the smallest coordinate (any lattice).
    #[default]
    TwoFinger,
    /// Skip ahead by exponential then binary search (pure intersections only).
    Galloping,
}

impl Iteration {
    /// The kind of each axis, if `kinds` is well-formed.
    pub fn iter_kinds(&self) -> Option<Vec<IterKind>> {
        self.kinds
            .chars()
            .map(|c| match c {
                'S' => Some(IterKind::S),
                'R' => Some(IterKind::R),
                _ => None,
            })
            .collect()
    }
}

/// A statement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Stmt {
    /// `BUF[i, j] = expr`, written in RON as a string.
    Store(Store),
    /// A nested sparse iteration.
    Iter(Iteration),
}

/// A store of a scalar expression into a buffer element.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Store {
    /// Written buffer.
    pub buffer: String,
    /// Coordinate per buffer axis: usually an iterator variable, or an integer expression
    /// of iterator coordinates (e.g. `io * 2 + ii`).
    pub indices: Vec<Expr>,
    /// Stored value.
    pub value: Expr,
}

impl TryFrom<String> for Store {
    type Error = String;
    fn try_from(s: String) -> Result<Store, String> {
        parse_stmt_text(&s).map_err(|e| e.render(&s))
    }
}
impl From<Store> for String {
    fn from(s: Store) -> String {
        s.to_string()
    }
}

/// Unary scalar operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnOp {
    /// `-x`
    Neg,
    /// `!x` (booleans)
    Not,
    /// `abs(x)`
    Abs,
    /// `exp(x)`
    Exp,
    /// `log(x)`
    Log,
    /// `sqrt(x)`
    Sqrt,
}

/// Binary scalar operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b` (integers: truncating; division by zero gives 0)
    Div,
    /// `min(a, b)`
    Min,
    /// `max(a, b)`
    Max,
    /// `pow(a, b)`
    Pow,
    /// `a < b`
    Lt,
    /// `a <= b`
    Le,
    /// `a > b`
    Gt,
    /// `a >= b`
    Ge,
    /// `a == b`
    Eq,
    /// `a != b`
    Ne,
    /// `a && b`
    And,
    /// `a || b`
    Or,
}

impl BinOp {
    /// Binding strength in the text form: `||` 1, `&&` 2, comparisons 3, `+ -` 4, `* /` 5;
    /// the call-like `min max pow` 7.
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And => 2,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => 3,
            BinOp::Add | BinOp::Sub => 4,
            BinOp::Mul | BinOp::Div => 5,
            BinOp::Min | BinOp::Max | BinOp::Pow => 7,
        }
    }
    /// The operator or function name in the text form.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Min => "min",
            BinOp::Max => "max",
            BinOp::Pow => "pow",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }
    /// True for the comparisons, whose result is a boolean.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne
        )
    }
    /// True for `&&` and `||`.
    pub fn is_logical(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or)
    }
}

/// A scalar expression (coordinate space: loads are indexed by iterator variables).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Expr {
    /// An integer literal; takes the type its context asks for (default i64).
    Int(i64),
    /// A float literal; takes the float type its context asks for (default f64).
    Float(f64),
    /// The coordinate of an iterator variable (an i64).
    Var(String),
    /// A buffer element at the given coordinates.
    Load {
        /// Read buffer.
        buffer: String,
        /// One coordinate expression per buffer axis.
        indices: Vec<Expr>,
    },
    /// A unary operation.
    Unary(UnOp, Box<Expr>),
    /// A binary operation.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `select(cond, a, b)`.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `f32(x)`, `i64(x)`, ...
    Cast(DType, Box<Expr>),
    /// One of MLIR's semiring operations (co-iteration kernels only).
    Semiring(Box<Semiring>),
}

/// A region of a semiring operation: a computation over the region arguments `x` (and `y`)
/// and the iterator coordinates, the operand itself, or nothing (no entry).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Region {
    /// No entry (`empty`).
    Empty,
    /// The operand's value (`identity`).
    Identity,
    /// A computation.
    Expr(Expr),
}

/// MLIR's `sparse_tensor` semiring operations, as they appear in a store's expression. Their
/// regions decide where the result has entries: `binary` has one where its regions say,
/// `unary` where its operand is (`present`) or is not (`absent`), `select` where the predicate
/// holds, and `reduce` combines every value reduced into one result entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Semiring {
    /// `binary(a, b, overlap, left, right)`: `overlap` over `x`, `y` where both are stored,
    /// `left` over `x` where only `a` is, `right` over `y` where only `b` is.
    Binary {
        /// Left operand.
        a: Expr,
        /// Right operand.
        b: Expr,
        /// Both present.
        overlap: Region,
        /// Only `a` present.
        left: Region,
        /// Only `b` present.
        right: Region,
    },
    /// `unary(a, present, absent)`: `present` over `x` where `a` is stored, `absent` elsewhere.
    Unary {
        /// Operand.
        a: Expr,
        /// `a` present.
        present: Region,
        /// `a` absent (not `identity`).
        absent: Region,
    },
    /// `select(a, pred)` with two arguments: `a`'s entries for which `pred` (over `x`) holds.
    Select {
        /// Operand.
        a: Expr,
        /// Predicate over `x`.
        pred: Expr,
    },
    /// `reduce(value, combine, identity)`: the reduction of a store `C[..] = reduce(...)`,
    /// combining the entry so far `x` with each `value` as `y`, starting from `identity`.
    Reduce {
        /// Reduced value.
        value: Expr,
        /// Combiner over `x` (the entry so far) and `y` (the next value).
        combine: Expr,
        /// First value of every entry.
        identity: Expr,
    },
}

impl Semiring {
    /// The operands and region computations, operands first.
    pub fn exprs(&self) -> Vec<&Expr> {
        fn region(r: &Region) -> Option<&Expr> {
            match r {
                Region::Expr(e) => Some(e),
                _ => None,
            }
        }
        match self {
            Semiring::Binary {
                a,
                b,
                overlap,
                left,
                right,
            } => [
                Some(a),
                Some(b),
                region(overlap),
                region(left),
                region(right),
            ]
            .into_iter()
            .flatten()
            .collect(),
            Semiring::Unary { a, present, absent } => [Some(a), region(present), region(absent)]
                .into_iter()
                .flatten()
                .collect(),
            Semiring::Select { a, pred } => vec![a, pred],
            Semiring::Reduce {
                value,
                combine,
                identity,
            } => vec![value, identity, combine],
        }
    }
    /// The same operation with every operand and region computation mapped by `f`.
    pub fn map(&self, f: &mut dyn FnMut(&Expr) -> Expr) -> Semiring {
        let region = |r: &Region, f: &mut dyn FnMut(&Expr) -> Expr| match r {
            Region::Expr(e) => Region::Expr(f(e)),
            other => other.clone(),
        };
        match self {
            Semiring::Binary {
                a,
                b,
                overlap,
                left,
                right,
            } => Semiring::Binary {
                a: f(a),
                b: f(b),
                overlap: region(overlap, f),
                left: region(left, f),
                right: region(right, f),
            },
            Semiring::Unary { a, present, absent } => Semiring::Unary {
                a: f(a),
                present: region(present, f),
                absent: region(absent, f),
            },
            Semiring::Select { a, pred } => Semiring::Select {
                a: f(a),
                pred: f(pred),
            },
            Semiring::Reduce {
                value,
                combine,
                identity,
            } => Semiring::Reduce {
                value: f(value),
                combine: f(combine),
                identity: f(identity),
            },
        }
    }
    /// The operands (not region computations).
    pub fn operands(&self) -> Vec<&Expr> {
        match self {
            Semiring::Binary { a, b, .. } => vec![a, b],
            Semiring::Unary { a, .. } | Semiring::Select { a, .. } => vec![a],
            Semiring::Reduce {
                value, identity, ..
            } => vec![value, identity],
        }
    }
}

/// `e` with every variable `x` replaced by `with("x")` where that gives an expression.
pub fn substitute(e: &Expr, with: &dyn Fn(&str) -> Option<Expr>) -> Expr {
    match e {
        Expr::Var(v) => with(v).unwrap_or_else(|| e.clone()),
        Expr::Int(_) | Expr::Float(_) => e.clone(),
        Expr::Load { buffer, indices } => Expr::Load {
            buffer: buffer.clone(),
            indices: indices.iter().map(|i| substitute(i, with)).collect(),
        },
        Expr::Unary(op, a) => Expr::Unary(*op, Box::new(substitute(a, with))),
        Expr::Cast(t, a) => Expr::Cast(*t, Box::new(substitute(a, with))),
        Expr::Binary(op, a, b) => Expr::Binary(
            *op,
            Box::new(substitute(a, with)),
            Box::new(substitute(b, with)),
        ),
        Expr::Select(c, a, b) => Expr::Select(
            Box::new(substitute(c, with)),
            Box::new(substitute(a, with)),
            Box::new(substitute(b, with)),
        ),
        // Region arguments are bound by the inner operation.
        Expr::Semiring(s) => Expr::Semiring(Box::new(s.map(&mut |x| substitute(x, with)))),
    }
}

impl Program {
    /// The axis named `name`.
    pub fn axis(&self, name: &str) -> Option<&Axis> {
        self.axes.iter().find(|a| a.name == name)
    }
    /// The buffer named `name`.
    pub fn buffer(&self, name: &str) -> Option<&Buffer> {
        self.buffers.iter().find(|b| b.name == name)
    }
    /// Parses a kernel from RON text. Errors carry the line and column.
    pub fn from_ron(text: &str) -> Result<Program, ron::error::SpannedError> {
        ron::from_str(text)
    }
    /// Serializes to pretty RON (the kernel file format).
    pub fn to_ron(&self) -> String {
        let cfg = ron::ser::PrettyConfig::new()
            .depth_limit(4)
            .struct_names(false);
        ron::ser::to_string_pretty(self, cfg).expect("stage-I programs always serialize")
    }
    /// All iterations, outer before nested, in program order.
    pub fn iterations(&self) -> Vec<&Iteration> {
        fn walk<'a>(stmts: &'a [Stmt], out: &mut Vec<&'a Iteration>) {
            for s in stmts {
                if let Stmt::Iter(it) = s {
                    out.push(it);
                    walk(&it.init, out);
                    walk(&it.body, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.body, &mut out);
        out
    }
}

impl Expr {
    /// This expression with each direct child expression (a load's indices, operands, a
    /// semiring operation's expressions) replaced by `f` of it; leaves are cloned.
    pub fn map_children(&self, f: &mut dyn FnMut(&Expr) -> Expr) -> Expr {
        match self {
            Expr::Int(_) | Expr::Float(_) | Expr::Var(_) => self.clone(),
            Expr::Load { buffer, indices } => Expr::Load {
                buffer: buffer.clone(),
                indices: indices.iter().map(&mut *f).collect(),
            },
            Expr::Unary(op, a) => Expr::Unary(*op, Box::new(f(a))),
            Expr::Cast(t, a) => Expr::Cast(*t, Box::new(f(a))),
            Expr::Binary(op, a, b) => Expr::Binary(*op, Box::new(f(a)), Box::new(f(b))),
            Expr::Select(c, a, b) => Expr::Select(Box::new(f(c)), Box::new(f(a)), Box::new(f(b))),
            Expr::Semiring(s) => Expr::Semiring(Box::new(s.map(f))),
        }
    }
    /// The iterator variable, when the expression is just one.
    pub fn as_var(&self) -> Option<&str> {
        match self {
            Expr::Var(v) => Some(v),
            _ => None,
        }
    }
    /// Calls `f` on every iterator variable the expression reads (including inside indices).
    pub fn for_each_var(&self, f: &mut dyn FnMut(&str)) {
        match self {
            Expr::Int(_) | Expr::Float(_) => {}
            Expr::Var(v) => f(v),
            Expr::Load { indices, .. } => indices.iter().for_each(|i| i.for_each_var(f)),
            Expr::Unary(_, a) | Expr::Cast(_, a) => a.for_each_var(f),
            Expr::Binary(_, a, b) => {
                a.for_each_var(f);
                b.for_each_var(f);
            }
            Expr::Select(c, a, b) => {
                c.for_each_var(f);
                a.for_each_var(f);
                b.for_each_var(f);
            }
            Expr::Semiring(s) => {
                // Region arguments `x` and `y` are not iterators.
                let operands = s.operands().len();
                for (k, e) in s.exprs().into_iter().enumerate() {
                    if k < operands {
                        e.for_each_var(f);
                    } else {
                        e.for_each_var(&mut |v| {
                            if v != "x" && v != "y" {
                                f(v)
                            }
                        });
                    }
                }
            }
        }
    }
    /// True when the expression reads iterator `var`.
    pub fn mentions(&self, var: &str) -> bool {
        let mut found = false;
        self.for_each_var(&mut |v| found |= v == var);
        found
    }
}
