//! The stage-II loop IR: loops, blocks and conditionals over buffers in position space.
//!
//! Two levels share these types. At *stage II* value buffers keep their axes (`layout`) and are
//! accessed with one position per axis; sparse axes use *global* positions (the index into the
//! axis's `indices`), so `A[i, p]` for CSR `A` means row `i`, stored entry `p`. After
//! `lower_sparse_buffer` the program is *flat*: every buffer is a 1-D array (empty `layout`),
//! every access has exactly one index, and no `Coord` or `Block::init` remains.

use lacuna_ir::DType;
use lacuna_stage1::{Axis, BinOp, IterKind, Role, UnOp};
use serde::{Deserialize, Serialize};

/// A function: the unit of code generation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Func {
    /// Kernel name.
    pub name: String,
    /// Symbolic `i64` sizes, passed by value in this order.
    pub params: Vec<String>,
    /// Axes of the stage-I program (stage-II layouts refer to them by name).
    pub axes: Vec<Axis>,
    /// Buffers, passed by pointer in this order.
    pub buffers: Vec<BufferDecl>,
    /// The body.
    pub body: Vec<Stmt>,
    /// Scratch buffers allocated inside the body by [`Stmt::Alloc`] (flat 1-D at every level,
    /// accessed with one index); listed here so that their element type is known everywhere.
    #[serde(default)]
    pub scratch: Vec<ScratchDecl>,
}

/// Where a scratch buffer lives (TVM's storage scopes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MemScope {
    /// Device (or host) memory visible to every thread of a launch.
    Global,
    /// GPU shared memory: one copy per thread block (address space 3).
    Shared,
    /// Private to one thread (registers or the stack).
    Local,
}

impl MemScope {
    /// The scope's name as written in schedules and printed IR.
    pub fn name(self) -> &'static str {
        match self {
            MemScope::Global => "global",
            MemScope::Shared => "shared",
            MemScope::Local => "local",
        }
    }
    /// Parses [`MemScope::name`].
    pub fn from_name(name: &str) -> Option<MemScope> {
        [MemScope::Global, MemScope::Shared, MemScope::Local]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

/// A scratch buffer of a function (see [`Func::scratch`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScratchDecl {
    /// Name (distinct from every buffer's).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Where it lives.
    pub scope: MemScope,
}

/// The read-modify-write of an atomic update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AtomicOp {
    /// `b[i] = b[i] + v`
    Add,
    /// `b[i] = min(b[i], v)`
    Min,
    /// `b[i] = max(b[i], v)`
    Max,
}

impl AtomicOp {
    /// The operation's name (`add`, `min`, `max`).
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::Add => "add",
            AtomicOp::Min => "min",
            AtomicOp::Max => "max",
        }
    }
}

/// Which lane a warp shuffle reads (CUDA's `__shfl_*_sync` with a full mask).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ShuffleKind {
    /// `__shfl_down_sync`: lane `l + offset` of the same `width`-segment (own value past its end).
    Down,
    /// `__shfl_xor_sync`: lane `l ^ mask`.
    Xor,
    /// `__shfl_sync`: lane `src` of the same `width`-segment.
    Idx,
}

impl ShuffleKind {
    /// CUDA-like name: `shfl_down`, `shfl_xor`, `shfl_idx`.
    pub fn name(self) -> &'static str {
        match self {
            ShuffleKind::Down => "shfl_down",
            ShuffleKind::Xor => "shfl_xor",
            ShuffleKind::Idx => "shfl_idx",
        }
    }
}

/// Where a buffer's data comes from at run time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BufferKind {
    /// The values of a stage-I buffer.
    Values(Role),
    /// The `indptr` array of an axis.
    Indptr(String),
    /// The `indices` array of an axis.
    Indices(String),
}

/// A buffer parameter of a function.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BufferDecl {
    /// Name: a stage-I buffer name, or `AXIS.indptr` / `AXIS.indices`.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Axes at stage II; empty for flat (1-D) buffers.
    pub layout: Vec<String>,
    /// What the buffer holds.
    pub kind: BufferKind,
}

/// How a loop runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ForKind {
    /// One iteration after another.
    Serial,
    /// Iterations may run in parallel (no loop-carried dependence).
    Parallel,
    /// Iterations may be executed as vector lanes.
    Vectorized,
    /// Fully unrolled.
    Unrolled,
    /// Bound to a GPU grid or block dimension: every iteration runs concurrently. CPU code
    /// runs it serially; the interpreter checks that no two iterations touch one element where
    /// either writes it.
    Bound(GpuAxis),
}

/// A GPU thread-hierarchy dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GpuAxis {
    /// `blockIdx.x`
    BlockX,
    /// `blockIdx.y`
    BlockY,
    /// `blockIdx.z`
    BlockZ,
    /// `threadIdx.x`
    ThreadX,
    /// `threadIdx.y`
    ThreadY,
    /// `threadIdx.z`
    ThreadZ,
}

impl GpuAxis {
    /// CUDA's name, e.g. `threadIdx.x`.
    pub fn name(self) -> &'static str {
        match self {
            GpuAxis::BlockX => "blockIdx.x",
            GpuAxis::BlockY => "blockIdx.y",
            GpuAxis::BlockZ => "blockIdx.z",
            GpuAxis::ThreadX => "threadIdx.x",
            GpuAxis::ThreadY => "threadIdx.y",
            GpuAxis::ThreadZ => "threadIdx.z",
        }
    }
    /// Parses CUDA's name.
    pub fn from_name(name: &str) -> Option<GpuAxis> {
        [
            GpuAxis::BlockX,
            GpuAxis::BlockY,
            GpuAxis::BlockZ,
            GpuAxis::ThreadX,
            GpuAxis::ThreadY,
            GpuAxis::ThreadZ,
        ]
        .into_iter()
        .find(|a| a.name() == name)
    }
}

/// A bound iterator of a block: the loop variable `var` iterates `axis`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IterVar {
    /// Loop variable (a position on `axis`).
    pub var: String,
    /// The iterated axis.
    pub axis: String,
    /// Spatial or reduction.
    pub kind: IterKind,
}

/// A statement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Stmt {
    /// `for var in start..end` with an `i64` variable.
    For {
        /// Loop variable.
        var: String,
        /// First value (inclusive).
        start: Expr,
        /// Bound (exclusive).
        end: Expr,
        /// Execution kind.
        kind: ForKind,
        /// Body.
        body: Vec<Stmt>,
    },
    /// A conditional.
    If {
        /// Condition (bool).
        cond: Expr,
        /// Taken when true.
        then_body: Vec<Stmt>,
        /// Taken when false.
        else_body: Vec<Stmt>,
    },
    /// Binds an immutable variable for the rest of the enclosing statement list.
    Let {
        /// Variable.
        var: String,
        /// Value.
        value: Expr,
    },
    /// Declares a mutable scalar variable for the rest of the enclosing statement list (the
    /// state of a co-iteration while-loop); only [`Stmt::Assign`] changes it.
    Decl {
        /// Variable.
        var: String,
        /// Its type.
        dtype: DType,
        /// Initial value.
        init: Expr,
    },
    /// Assigns a variable declared by [`Stmt::Decl`].
    Assign {
        /// Variable.
        var: String,
        /// New value (of the declared type).
        value: Expr,
    },
    /// `while cond { body }`: the co-iteration loop over several sparse levels.
    While {
        /// Condition (bool), evaluated before every iteration.
        cond: Expr,
        /// Body.
        body: Vec<Stmt>,
    },
    /// Stores `value` into a buffer element.
    Store {
        /// Buffer.
        buffer: String,
        /// One position per layout axis (stage II) or one flat index (flat).
        indices: Vec<Expr>,
        /// Value (same type as the buffer).
        value: Expr,
    },
    /// Allocates the scratch buffer `buffer` (declared in [`Func::scratch`]) of `extent`
    /// elements for the rest of the enclosing statement list; its contents start undefined.
    Alloc {
        /// The scratch buffer.
        buffer: String,
        /// Element type.
        dtype: DType,
        /// Number of elements (`i64`).
        extent: Expr,
        /// Where it lives.
        scope: MemScope,
    },
    /// `__syncthreads()`: every thread of the block waits here; accesses before it happen
    /// before accesses after it. GPU only; every thread of the block must reach it.
    Barrier,
    /// An atomic read-modify-write of one element: never a race with another atomic.
    Atomic {
        /// The operation.
        op: AtomicOp,
        /// Buffer.
        buffer: String,
        /// One position per layout axis (stage II) or one flat index (flat).
        indices: Vec<Expr>,
        /// Operand (same type as the buffer).
        value: Expr,
    },
    /// An annotation of its body (TVM's `AttrStmt`), e.g. `pragma_unroll`, `prefetch`,
    /// `atomic`, `warp_reduce`; executed as its body.
    Attr {
        /// The annotation's key.
        key: String,
        /// Its value.
        value: Expr,
        /// The annotated statements.
        body: Vec<Stmt>,
    },
    /// A named block: the body of a sparse iteration at one point.
    Block {
        /// The iteration's name.
        name: String,
        /// Loop variables bound to the iteration's axes.
        iters: Vec<IterVar>,
        /// Init statements (moved out by `place_init_blocks`).
        init: Vec<Stmt>,
        /// Body.
        body: Vec<Stmt>,
    },
}

/// An expression. Integer positions and loop variables are `i64`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Expr {
    /// Integer literal of an integer type.
    Int(i64, DType),
    /// Float literal of a float type.
    Float(f64, DType),
    /// Boolean literal.
    Bool(bool),
    /// A loop or `Let` variable.
    Var(String),
    /// A symbolic size (`i64`).
    Param(String),
    /// A buffer element.
    Load {
        /// Buffer.
        buffer: String,
        /// One position per layout axis (stage II) or one flat index (flat).
        indices: Vec<Expr>,
    },
    /// The coordinate of an iterator, not yet translated (only before `translate_coordinates`).
    Coord(String),
    /// A unary operation.
    Unary(UnOp, Box<Expr>),
    /// A binary operation on two operands of one type.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `select(cond, a, b)`, lazy: only the chosen operand is evaluated (loads may be guarded).
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    /// A conversion.
    Cast(DType, Box<Expr>),
    /// Binary search for `value` in the sorted range `buffer[lo..hi]` of a flat integer buffer:
    /// the position (`i64`) where it is stored, or -1.
    Search {
        /// A flat `indices` buffer.
        buffer: String,
        /// First position (`i64`).
        lo: Box<Expr>,
        /// End position (`i64`, exclusive).
        hi: Box<Expr>,
        /// Searched coordinate (`i64`).
        value: Box<Expr>,
    },
    /// The segment holding a position: in the non-decreasing range `buffer[lo..hi)` of a flat
    /// integer buffer (an `indptr`), the largest `p` with `buffer[p] <= value` (`i64`), or
    /// `lo - 1` when there is none. Recovers the row of a position in a fused loop.
    Segment {
        /// A flat `indptr` buffer.
        buffer: String,
        /// First position (`i64`).
        lo: Box<Expr>,
        /// End position (`i64`, exclusive).
        hi: Box<Expr>,
        /// The position whose segment is sought (`i64`).
        value: Box<Expr>,
    },
    /// A warp shuffle: `value` as computed by another lane of the warp (GPU only).
    Shuffle {
        /// Which lane is read.
        kind: ShuffleKind,
        /// The shuffled value (each lane's own).
        value: Box<Expr>,
        /// Offset (`Down`), mask (`Xor`) or source lane (`Idx`), `i64`.
        lane: Box<Expr>,
        /// Segment width: a power of two, at most 32.
        width: u32,
    },
}

impl Func {
    /// The buffer named `name`.
    pub fn buffer(&self, name: &str) -> Option<&BufferDecl> {
        self.buffers.iter().find(|b| b.name == name)
    }
    /// The scratch buffer named `name`.
    pub fn scratch_buffer(&self, name: &str) -> Option<&ScratchDecl> {
        self.scratch.iter().find(|b| b.name == name)
    }
    /// The element type of a buffer or scratch buffer.
    pub fn elem_type(&self, name: &str) -> Option<DType> {
        self.buffer(name)
            .map(|b| b.dtype)
            .or_else(|| self.scratch_buffer(name).map(|b| b.dtype))
    }
    /// The axis named `name`.
    pub fn axis(&self, name: &str) -> Option<&Axis> {
        self.axes.iter().find(|a| a.name == name)
    }
}

impl Expr {
    /// The direct sub-expressions, in evaluation order.
    pub fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Int(..)
            | Expr::Float(..)
            | Expr::Bool(_)
            | Expr::Var(_)
            | Expr::Param(_)
            | Expr::Coord(_) => vec![],
            Expr::Load { indices, .. } => indices.iter().collect(),
            Expr::Unary(_, a) | Expr::Cast(_, a) => vec![a],
            Expr::Binary(_, a, b) => vec![a, b],
            Expr::Select(c, a, b) => vec![c, a, b],
            Expr::Search { lo, hi, value, .. } | Expr::Segment { lo, hi, value, .. } => {
                vec![lo, hi, value]
            }
            Expr::Shuffle { value, lane, .. } => vec![value, lane],
        }
    }
    /// The expression with each direct sub-expression replaced by `f(child)`, in evaluation
    /// order; leaves are returned as they are. The building block of expression rewrites.
    pub fn map_children(self, f: &mut dyn FnMut(Expr) -> Expr) -> Expr {
        let mut b = |x: Box<Expr>| Box::new(f(*x));
        match self {
            leaf @ (Expr::Int(..)
            | Expr::Float(..)
            | Expr::Bool(_)
            | Expr::Var(_)
            | Expr::Param(_)
            | Expr::Coord(_)) => leaf,
            Expr::Load { buffer, indices } => Expr::Load {
                buffer,
                indices: indices.into_iter().map(|i| *b(Box::new(i))).collect(),
            },
            Expr::Unary(op, a) => Expr::Unary(op, b(a)),
            Expr::Binary(op, a, c) => {
                let a = b(a);
                Expr::Binary(op, a, b(c))
            }
            Expr::Select(c, x, y) => {
                let c = b(c);
                let x = b(x);
                Expr::Select(c, x, b(y))
            }
            Expr::Cast(t, a) => Expr::Cast(t, b(a)),
            Expr::Search {
                buffer,
                lo,
                hi,
                value,
            } => {
                let (lo, hi) = (b(lo), b(hi));
                Expr::Search {
                    buffer,
                    lo,
                    hi,
                    value: b(value),
                }
            }
            Expr::Segment {
                buffer,
                lo,
                hi,
                value,
            } => {
                let (lo, hi) = (b(lo), b(hi));
                Expr::Segment {
                    buffer,
                    lo,
                    hi,
                    value: b(value),
                }
            }
            Expr::Shuffle {
                kind,
                value,
                lane,
                width,
            } => {
                let value = b(value);
                Expr::Shuffle {
                    kind,
                    value,
                    lane: b(lane),
                    width,
                }
            }
        }
    }
    /// True when the expression contains a warp shuffle.
    pub fn has_shuffle(&self) -> bool {
        matches!(self, Expr::Shuffle { .. }) || self.children().into_iter().any(Expr::has_shuffle)
    }
    /// True when the expression reads a variable for which `is_var` holds.
    pub fn reads_var(&self, is_var: &dyn Fn(&str) -> bool) -> bool {
        match self {
            Expr::Var(v) => is_var(v),
            other => other.children().into_iter().any(|c| c.reads_var(is_var)),
        }
    }
    /// The expression with every read of variable `var` replaced by `value`.
    pub fn subst_var(self, var: &str, value: &Expr) -> Expr {
        match self {
            Expr::Var(v) if v == var => value.clone(),
            other => other.map_children(&mut |c| c.subst_var(var, value)),
        }
    }
}

/// Convenience constructors used by the passes (named like the operators they build).
#[allow(clippy::should_implement_trait)]
impl Expr {
    /// An `i64` literal.
    pub fn i64(v: i64) -> Expr {
        Expr::Int(v, DType::I64)
    }
    /// A variable.
    pub fn var(name: &str) -> Expr {
        Expr::Var(name.to_string())
    }
    /// `a + b`.
    pub fn add(a: Expr, b: Expr) -> Expr {
        Expr::Binary(BinOp::Add, Box::new(a), Box::new(b))
    }
    /// `a - b`.
    pub fn sub(a: Expr, b: Expr) -> Expr {
        Expr::Binary(BinOp::Sub, Box::new(a), Box::new(b))
    }
    /// `a * b`.
    pub fn mul(a: Expr, b: Expr) -> Expr {
        Expr::Binary(BinOp::Mul, Box::new(a), Box::new(b))
    }
    /// A binary operation.
    pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }
    /// A load, converted to `i64` when the buffer holds narrower integers.
    pub fn load_i64(buffer: &str, index: Expr, dtype: DType) -> Expr {
        let l = Expr::Load {
            buffer: buffer.to_string(),
            indices: vec![index],
        };
        if dtype == DType::I64 {
            l
        } else {
            Expr::Cast(DType::I64, Box::new(l))
        }
    }
}

/// The type of an expression, given the types of variables in scope.
pub fn expr_type(f: &Func, e: &Expr, var_type: &dyn Fn(&str) -> Option<DType>) -> DType {
    match e {
        Expr::Int(_, t) | Expr::Float(_, t) | Expr::Cast(t, _) => *t,
        Expr::Bool(_) => DType::Bool,
        Expr::Var(v) => var_type(v).unwrap_or(DType::I64),
        Expr::Param(_) | Expr::Coord(_) | Expr::Search { .. } | Expr::Segment { .. } => DType::I64,
        Expr::Load { buffer, .. } => f.elem_type(buffer).unwrap_or(DType::F64),
        Expr::Shuffle { value, .. } => expr_type(f, value, var_type),
        Expr::Unary(_, a) => expr_type(f, a, var_type),
        Expr::Binary(op, a, _) => {
            if op.is_comparison() {
                DType::Bool
            } else {
                expr_type(f, a, var_type)
            }
        }
        Expr::Select(_, a, _) => expr_type(f, a, var_type),
    }
}

impl Stmt {
    /// The statement lists nested directly in this statement.
    pub fn bodies(&self) -> Vec<&Vec<Stmt>> {
        match self {
            Stmt::For { body, .. } | Stmt::While { body, .. } | Stmt::Attr { body, .. } => {
                vec![body]
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => vec![then_body, else_body],
            Stmt::Block { init, body, .. } => vec![init, body],
            Stmt::Let { .. }
            | Stmt::Decl { .. }
            | Stmt::Assign { .. }
            | Stmt::Store { .. }
            | Stmt::Alloc { .. }
            | Stmt::Barrier
            | Stmt::Atomic { .. } => vec![],
        }
    }
    /// The statement with each nested statement list (see [`Stmt::bodies`]) replaced by
    /// `f(list)`; the first error stops the rewrite. The building block of statement rewrites
    /// that recurse into every nested list.
    pub fn try_map_bodies<E>(
        self,
        f: &mut dyn FnMut(Vec<Stmt>) -> Result<Vec<Stmt>, E>,
    ) -> Result<Stmt, E> {
        Ok(match self {
            Stmt::For {
                var,
                start,
                end,
                kind,
                body,
            } => Stmt::For {
                var,
                start,
                end,
                kind,
                body: f(body)?,
            },
            Stmt::While { cond, body } => Stmt::While {
                cond,
                body: f(body)?,
            },
            Stmt::Attr { key, value, body } => Stmt::Attr {
                key,
                value,
                body: f(body)?,
            },
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => Stmt::If {
                cond,
                then_body: f(then_body)?,
                else_body: f(else_body)?,
            },
            Stmt::Block {
                name,
                iters,
                init,
                body,
            } => Stmt::Block {
                name,
                iters,
                init: f(init)?,
                body: f(body)?,
            },
            leaf @ (Stmt::Let { .. }
            | Stmt::Decl { .. }
            | Stmt::Assign { .. }
            | Stmt::Store { .. }
            | Stmt::Alloc { .. }
            | Stmt::Barrier
            | Stmt::Atomic { .. }) => leaf,
        })
    }
    /// [`Stmt::try_map_bodies`] with a rewrite that cannot fail.
    pub fn map_bodies(self, f: &mut dyn FnMut(Vec<Stmt>) -> Vec<Stmt>) -> Stmt {
        match self.try_map_bodies(&mut |b| Ok::<_, std::convert::Infallible>(f(b))) {
            Ok(s) => s,
            Err(never) => match never {},
        }
    }
    /// The statement with each of its own expressions (see [`Stmt::exprs`]; not those of
    /// nested statements) replaced by `f(expr)`, in the order `exprs` lists them.
    pub fn map_exprs(self, f: &mut dyn FnMut(Expr) -> Expr) -> Stmt {
        match self {
            Stmt::For {
                var,
                start,
                end,
                kind,
                body,
            } => {
                let start = f(start);
                Stmt::For {
                    var,
                    start,
                    end: f(end),
                    kind,
                    body,
                }
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => Stmt::If {
                cond: f(cond),
                then_body,
                else_body,
            },
            Stmt::While { cond, body } => Stmt::While {
                cond: f(cond),
                body,
            },
            Stmt::Let { var, value } => Stmt::Let {
                var,
                value: f(value),
            },
            Stmt::Assign { var, value } => Stmt::Assign {
                var,
                value: f(value),
            },
            Stmt::Attr { key, value, body } => Stmt::Attr {
                key,
                value: f(value),
                body,
            },
            Stmt::Decl { var, dtype, init } => Stmt::Decl {
                var,
                dtype,
                init: f(init),
            },
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let indices = indices.into_iter().map(&mut *f).collect();
                Stmt::Store {
                    buffer,
                    indices,
                    value: f(value),
                }
            }
            Stmt::Atomic {
                op,
                buffer,
                indices,
                value,
            } => {
                let indices = indices.into_iter().map(&mut *f).collect();
                Stmt::Atomic {
                    op,
                    buffer,
                    indices,
                    value: f(value),
                }
            }
            Stmt::Alloc {
                buffer,
                dtype,
                extent,
                scope,
            } => Stmt::Alloc {
                buffer,
                dtype,
                extent: f(extent),
                scope,
            },
            leaf @ (Stmt::Barrier | Stmt::Block { .. }) => leaf,
        }
    }
    /// The expressions of this statement itself (not of nested statements).
    pub fn exprs(&self) -> Vec<&Expr> {
        match self {
            Stmt::For { start, end, .. } => vec![start, end],
            Stmt::If { cond, .. } | Stmt::While { cond, .. } => vec![cond],
            Stmt::Let { value, .. } | Stmt::Assign { value, .. } | Stmt::Attr { value, .. } => {
                vec![value]
            }
            Stmt::Decl { init, .. } => vec![init],
            Stmt::Store { indices, value, .. } | Stmt::Atomic { indices, value, .. } => {
                indices.iter().chain(std::iter::once(value)).collect()
            }
            Stmt::Alloc { extent, .. } => vec![extent],
            Stmt::Barrier | Stmt::Block { .. } => vec![],
        }
    }
    /// True when the statement contains a barrier, at any depth.
    pub fn has_barrier(&self) -> bool {
        matches!(self, Stmt::Barrier)
            || self
                .bodies()
                .iter()
                .any(|b| b.iter().any(Stmt::has_barrier))
    }
    /// True when the statement is or contains a loop bound to a GPU grid or block dimension.
    pub fn has_bound_loop(&self) -> bool {
        matches!(
            self,
            Stmt::For {
                kind: ForKind::Bound(_),
                ..
            }
        ) || self
            .bodies()
            .iter()
            .any(|b| b.iter().any(Stmt::has_bound_loop))
    }
    /// True when the statement contains a warp shuffle, at any depth.
    pub fn has_shuffle(&self) -> bool {
        self.exprs().iter().any(|e| e.has_shuffle())
            || self
                .bodies()
                .iter()
                .any(|b| b.iter().any(Stmt::has_shuffle))
    }
}

/// `stmts` with variable names replaced everywhere — reads and coordinates, loop, `let`,
/// declared and assigned variables, block iterators — by `name(v)` where it gives one.
pub fn rename_vars(stmts: Vec<Stmt>, name: &dyn Fn(&str) -> Option<String>) -> Vec<Stmt> {
    let rename = |v: &mut String| {
        if let Some(new) = name(v) {
            *v = new;
        }
    };
    stmts
        .into_iter()
        .map(|s| {
            let mut s = s.map_exprs(&mut |e| rename_vars_expr(e, name));
            match &mut s {
                Stmt::For { var, .. }
                | Stmt::Let { var, .. }
                | Stmt::Decl { var, .. }
                | Stmt::Assign { var, .. } => rename(var),
                Stmt::Block { iters, .. } => iters.iter_mut().for_each(|it| rename(&mut it.var)),
                _ => {}
            }
            s.map_bodies(&mut |b| rename_vars(b, name))
        })
        .collect()
}

/// `e` with variable names replaced as [`rename_vars`] does.
pub fn rename_vars_expr(e: Expr, name: &dyn Fn(&str) -> Option<String>) -> Expr {
    match e {
        Expr::Var(v) => Expr::Var(name(&v).unwrap_or(v)),
        Expr::Coord(v) => Expr::Coord(name(&v).unwrap_or(v)),
        other => other.map_children(&mut |c| rename_vars_expr(c, name)),
    }
}

/// Every variable a statement list binds (loops, lets, declarations), at any depth.
pub fn bound_vars(stmts: &[Stmt], out: &mut std::collections::BTreeSet<String>) {
    for s in stmts {
        match s {
            Stmt::For { var, .. } | Stmt::Let { var, .. } | Stmt::Decl { var, .. } => {
                out.insert(var.clone());
            }
            _ => {}
        }
        for b in s.bodies() {
            bound_vars(b, out);
        }
    }
}
