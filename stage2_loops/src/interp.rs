//! The stage-II interpreter: runs a stage-II or flat function on bound data.
//!
//! Every access is checked: a flat index must be inside its buffer, and at stage II a position
//! on a sparse axis must lie inside the segment of its parent position. A failed check is an
//! error naming the buffer, never a panic, so the interpreter doubles as a bounds checker for
//! lowered code. Scalar semantics are those of `lacuna_stage1::{eval_binop, eval_unop}`.

use crate::ir::{BufferKind, Expr, ForKind, Func, Stmt};
use lacuna_ir::{ArrayData, Scalar};
use lacuna_stage1::{eval_binop, eval_unop, size_value, AxisKind, BinOp, Bindings, Role};
use std::collections::BTreeMap;

/// A failure while interpreting stage II.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Stage2InterpError {
    /// A buffer, parameter or variable has no value.
    #[error("no value for {what} `{name}`")]
    Unbound {
        /// `buffer`, `parameter` or `variable`.
        what: &'static str,
        /// Its name.
        name: String,
    },
    /// A flat index outside its buffer.
    #[error("index {index} out of bounds for buffer `{buffer}` of length {len}")]
    OutOfBounds {
        /// The buffer.
        buffer: String,
        /// The index.
        index: i64,
        /// The buffer's length.
        len: usize,
    },
    /// A position outside the segment of its parent position.
    #[error("position {pos} on axis `{axis}` of `{buffer}` is outside its segment {start}..{end}")]
    OutsideSegment {
        /// The buffer.
        buffer: String,
        /// The axis.
        axis: String,
        /// The position.
        pos: i64,
        /// Segment start.
        start: i64,
        /// Segment end.
        end: i64,
    },
    /// Two iterations of a GPU-bound loop touch one element and one of them writes it.
    #[error("race in GPU-bound loop `{loop}`: iterations {first} and {second} both access `{buffer}`[{index}] and one writes it")]
    Race {
        /// The loop variable.
        r#loop: String,
        /// The buffer.
        buffer: String,
        /// The flat index.
        index: usize,
        /// One iteration.
        first: i64,
        /// The other.
        second: i64,
    },
    /// Two GPU threads touch one element and one of them writes it (GPU semantics).
    #[error("race between GPU threads: {first} and {second} both access `{buffer}`[{index}] and one writes it without an atomic")]
    GpuRace {
        /// The buffer.
        buffer: String,
        /// The flat index.
        index: usize,
        /// One thread, as `block (x, y, z) thread (x, y, z)`.
        first: String,
        /// The other.
        second: String,
    },
    /// The function cannot be launched as a GPU kernel.
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    /// An access with the wrong number of indices, or another malformed construct.
    #[error("malformed function: {what}")]
    Malformed {
        /// What is malformed.
        what: String,
    },
}

type R<T> = Result<T, Stage2InterpError>;

struct Machine<'f> {
    f: &'f Func,
    data: BTreeMap<String, ArrayData>,
    params: BTreeMap<String, i64>,
    env: Vec<(String, Scalar)>,
    /// One tracker per enclosing GPU-bound loop: which iteration wrote or read each element.
    concurrent: Vec<Tracker>,
    /// Under GPU semantics: the running thread and every element's accesses so far.
    gpu: Option<GpuState>,
}

/// The thread being run under GPU semantics and the accesses of all threads.
struct GpuState {
    /// Its index per dimension, in the order of `gpu::GPU_AXES`.
    idx: [i64; 6],
    /// A number unique to the thread.
    id: u64,
    /// (buffer, index) → (thread that wrote it, one that read it, whether another read it).
    seen: BTreeMap<(String, usize), SeenBy<u64>>,
    /// Thread numbers to their indices, for messages.
    dims: ([u32; 3], [u32; 3]),
}

impl GpuState {
    fn describe(&self, id: u64) -> String {
        let ([gx, gy, _], [bx, by, bz]) = self.dims;
        let per_block = bx as u64 * by as u64 * bz as u64;
        let (blk, thr) = (id / per_block, id % per_block);
        let (bxx, byy) = (gx as u64, gy as u64);
        let (tx, ty) = (bx as u64, by as u64);
        format!(
            "block ({}, {}, {}) thread ({}, {}, {})",
            blk % bxx,
            blk / bxx % byy,
            blk / (bxx * byy),
            thr % tx,
            thr / tx % ty,
            thr / (tx * ty)
        )
    }
}

/// The iteration that wrote an element, one that read it, and whether another read it too.
type Seen = SeenBy<i64>;

/// The thread or iteration that wrote an element, one that read it, and whether another did.
type SeenBy<T> = (Option<T>, Option<T>, bool);

/// Accesses of the iterations of one GPU-bound loop, to find races.
struct Tracker {
    var: String,
    iteration: i64,
    /// (buffer, index) → (iteration that wrote it, an iteration that read it, whether another
    /// iteration read it too).
    seen: BTreeMap<(String, usize), Seen>,
}

/// Runs `f` on `b`; output and intermediate buffers are updated in place.
pub fn interpret_func(f: &Func, b: &mut Bindings) -> R<()> {
    let data = bind_data(f, b)?;
    let mut m = Machine {
        f,
        data,
        params: b.params.clone(),
        env: Vec::new(),
        concurrent: Vec::new(),
        gpu: None,
    };
    m.stmts(&f.body)?;
    m.finish(b);
    Ok(())
}

/// Runs `f` on `b` with GPU semantics (see [`crate::gpu`]): every thread of the launch, one
/// after another, runs the body with its bound loops replaced by guards. Two threads touching
/// one element where either writes it is a [`Stage2InterpError::GpuRace`].
pub fn interpret_gpu(f: &Func, b: &mut Bindings) -> R<()> {
    let launch = crate::gpu::launch(f)?;
    let data = bind_data(f, b)?;
    let load = |name: &str, i: i64| {
        let a = data.get(name)?;
        a.get(usize::try_from(i).ok()?)
    };
    let dims = launch.dims(&b.params, &load)?;
    let mut m = Machine {
        f,
        data,
        params: b.params.clone(),
        env: Vec::new(),
        concurrent: Vec::new(),
        gpu: Some(GpuState {
            idx: [0; 6],
            id: 0,
            seen: BTreeMap::new(),
            dims,
        }),
    };
    let ([gx, gy, gz], [bx, by, bz]) = dims;
    let mut id = 0u64;
    for z in 0..gz {
        for y in 0..gy {
            for x in 0..gx {
                for tz in 0..bz {
                    for ty in 0..by {
                        for tx in 0..bx {
                            if let Some(g) = m.gpu.as_mut() {
                                g.idx = [x, y, z, tx, ty, tz].map(i64::from);
                                g.id = id;
                            }
                            id += 1;
                            m.env.clear();
                            m.stmts(&f.body)?;
                        }
                    }
                }
            }
        }
    }
    m.finish(b);
    Ok(())
}

fn bind_data(f: &Func, b: &Bindings) -> R<BTreeMap<String, ArrayData>> {
    let mut data = BTreeMap::new();
    for decl in &f.buffers {
        let arr = match &decl.kind {
            BufferKind::Values(_) => b.buffers.get(&decl.name).cloned(),
            BufferKind::Indptr(ax) => b.axes.get(ax).and_then(|a| a.indptr.clone()),
            BufferKind::Indices(ax) => b.axes.get(ax).and_then(|a| a.indices.clone()),
        };
        match arr {
            Some(a) => {
                data.insert(decl.name.clone(), a);
            }
            // Structure of axes nothing binds is only an error if it is read.
            None if !matches!(decl.kind, BufferKind::Values(_)) => {}
            None => {
                return Err(Stage2InterpError::Unbound {
                    what: "buffer",
                    name: decl.name.clone(),
                })
            }
        }
    }
    Ok(data)
}

impl Machine<'_> {
    /// Moves the written buffers back into the bindings.
    fn finish(mut self, b: &mut Bindings) {
        let f = self.f;
        for decl in &f.buffers {
            if matches!(decl.kind, BufferKind::Values(Role::Output | Role::Alloc)) {
                if let Some(a) = self.data.remove(&decl.name) {
                    b.buffers.insert(decl.name.clone(), a);
                }
            }
        }
    }

    /// Records an access for every enclosing GPU-bound loop; two of its iterations touching
    /// one element where either writes it is a race.
    fn track(&mut self, buffer: &str, off: usize, write: bool) -> R<()> {
        if let Some(g) = self.gpu.as_mut() {
            let me = g.id;
            let entry = g
                .seen
                .entry((buffer.to_string(), off))
                .or_insert((None, None, false));
            let conflict = match (write, *entry) {
                (_, (Some(w), _, _)) if w != me => Some(w),
                (true, (_, Some(r), multi)) if r != me || multi => Some(r),
                _ => None,
            };
            if let Some(other) = conflict {
                return Err(Stage2InterpError::GpuRace {
                    buffer: buffer.to_string(),
                    index: off,
                    first: g.describe(other),
                    second: g.describe(me),
                });
            }
            if write {
                entry.0 = Some(me);
            } else {
                match entry.1 {
                    None => entry.1 = Some(me),
                    Some(r) if r != me => entry.2 = true,
                    Some(_) => {}
                }
            }
            return Ok(());
        }
        for t in &mut self.concurrent {
            let entry = t
                .seen
                .entry((buffer.to_string(), off))
                .or_insert((None, None, false));
            let me = t.iteration;
            let conflict = match (write, *entry) {
                (_, (Some(w), _, _)) if w != me => Some(w),
                (true, (_, Some(r), multi)) if r != me || multi => Some(r),
                _ => None,
            };
            if let Some(other) = conflict {
                return Err(Stage2InterpError::Race {
                    r#loop: t.var.clone(),
                    buffer: buffer.to_string(),
                    index: off,
                    first: other,
                    second: me,
                });
            }
            if write {
                entry.0 = Some(me);
            } else {
                match entry.1 {
                    None => entry.1 = Some(me),
                    Some(r) if r != me => entry.2 = true,
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    fn stmts(&mut self, stmts: &[Stmt]) -> R<()> {
        let mark = self.env.len();
        for s in stmts {
            self.stmt(s)?;
        }
        self.env.truncate(mark);
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> R<()> {
        match s {
            Stmt::For {
                var,
                start,
                end,
                body,
                kind,
            } => {
                let (s0, e0) = (self.eval(start)?.as_i64(), self.eval(end)?.as_i64());
                if let (Some(g), ForKind::Bound(axis)) = (&self.gpu, kind) {
                    // One thread: the guarded statement `let v = start + idx; if v < end`.
                    let v = s0.wrapping_add(g.idx[crate::gpu::axis_slot(*axis)]);
                    if v < e0 {
                        self.env.push((var.clone(), Scalar::I64(v)));
                        self.stmts(body)?;
                        self.env.pop();
                    }
                    return Ok(());
                }
                let bound = matches!(
                    s,
                    Stmt::For {
                        kind: ForKind::Bound(_),
                        ..
                    }
                );
                if bound {
                    self.concurrent.push(Tracker {
                        var: var.clone(),
                        iteration: 0,
                        seen: BTreeMap::new(),
                    });
                }
                for v in s0..e0 {
                    if let Some(t) = self.concurrent.last_mut().filter(|_| bound) {
                        t.iteration = v;
                    }
                    self.env.push((var.clone(), Scalar::I64(v)));
                    self.stmts(body)?;
                    self.env.pop();
                }
                if bound {
                    self.concurrent.pop();
                }
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                if self.eval(cond)?.as_bool() {
                    self.stmts(then_body)?;
                } else {
                    self.stmts(else_body)?;
                }
            }
            Stmt::Let { var, value } => {
                let v = self.eval(value)?;
                self.env.push((var.clone(), v));
            }
            Stmt::Decl { var, dtype, init } => {
                let v = self.eval(init)?.cast(*dtype);
                self.env.push((var.clone(), v));
            }
            Stmt::Assign { var, value } => {
                let v = self.eval(value)?;
                let slot = self
                    .env
                    .iter_mut()
                    .rev()
                    .find(|(n, _)| n == var)
                    .ok_or_else(|| Stage2InterpError::Unbound {
                        what: "variable",
                        name: var.clone(),
                    })?;
                slot.1 = v.cast(slot.1.dtype());
            }
            Stmt::While { cond, body } => {
                while self.eval(cond)?.as_bool() {
                    self.stmts(body)?;
                }
            }
            Stmt::Store {
                buffer,
                indices,
                value,
            } => {
                let v = self.eval(value)?;
                let off = self.offset(buffer, indices)?;
                self.track(buffer, off, true)?;
                let arr = self
                    .data
                    .get_mut(buffer)
                    .ok_or_else(|| Stage2InterpError::Unbound {
                        what: "buffer",
                        name: buffer.clone(),
                    })?;
                let dtype = arr.dtype();
                arr.set(off, v.cast(dtype));
            }
            Stmt::Block { init, body, .. } => {
                self.stmts(init)?;
                self.stmts(body)?;
            }
        }
        Ok(())
    }

    fn array(&self, name: &str) -> R<&ArrayData> {
        self.data
            .get(name)
            .ok_or_else(|| Stage2InterpError::Unbound {
                what: "buffer",
                name: name.to_string(),
            })
    }

    fn read(&self, name: &str, index: i64) -> R<Scalar> {
        let a = self.array(name)?;
        usize::try_from(index)
            .ok()
            .and_then(|i| a.get(i))
            .ok_or(Stage2InterpError::OutOfBounds {
                buffer: name.to_string(),
                index,
                len: a.len(),
            })
    }

    /// Flat offset of an access, checking every position.
    fn offset(&mut self, buffer: &str, indices: &[Expr]) -> R<usize> {
        let decl = self
            .f
            .buffer(buffer)
            .ok_or_else(|| Stage2InterpError::Unbound {
                what: "buffer",
                name: buffer.to_string(),
            })?;
        let pos: Vec<i64> = indices
            .iter()
            .map(|e| self.eval(e).map(Scalar::as_i64))
            .collect::<R<_>>()?;
        let len = self.array(buffer)?.len();
        let oob = |index: i64| Stage2InterpError::OutOfBounds {
            buffer: buffer.to_string(),
            index,
            len,
        };
        let flat = if decl.layout.is_empty() {
            match pos.as_slice() {
                [i] => *i,
                _ => {
                    return Err(Stage2InterpError::Malformed {
                        what: format!("flat buffer `{buffer}` with {} indices", pos.len()),
                    })
                }
            }
        } else {
            if decl.layout.len() != pos.len() {
                return Err(Stage2InterpError::Malformed {
                    what: format!(
                        "`{buffer}` has {} axes, accessed with {}",
                        decl.layout.len(),
                        pos.len()
                    ),
                });
            }
            let mut off: Option<i64> = None;
            for (ax, &p) in decl.layout.iter().zip(&pos) {
                let a = self
                    .f
                    .axis(ax)
                    .ok_or_else(|| Stage2InterpError::Malformed {
                        what: format!("axis `{ax}`"),
                    })?;
                let param = |s| {
                    size_value(s, &self.params).ok_or_else(|| Stage2InterpError::Unbound {
                        what: "parameter",
                        name: format!("{s}"),
                    })
                };
                off = Some(match (&a.kind, off) {
                    (AxisKind::DenseFixed { n }, o) => {
                        let n = param(n)?;
                        if p < 0 || p >= n {
                            return Err(Stage2InterpError::OutsideSegment {
                                buffer: buffer.into(),
                                axis: ax.clone(),
                                pos: p,
                                start: 0,
                                end: n,
                            });
                        }
                        o.map_or(p, |o| o * n + p)
                    }
                    (_, None) => {
                        return Err(Stage2InterpError::Malformed {
                            what: format!("axis `{ax}` first in `{buffer}`"),
                        })
                    }
                    (kind, Some(o)) => {
                        let (s, e) = match kind {
                            AxisKind::SparseFixed { nnz_cols, .. } => {
                                let w = param(nnz_cols)?;
                                (o * w, o * w + w)
                            }
                            _ => {
                                let ip = format!("{ax}.indptr");
                                let lo = if kind.is_loose() { 2 * o } else { o };
                                (
                                    self.read(&ip, lo)?.as_i64(),
                                    self.read(&ip, lo + 1)?.as_i64(),
                                )
                            }
                        };
                        if p < s || p >= e {
                            return Err(Stage2InterpError::OutsideSegment {
                                buffer: buffer.into(),
                                axis: ax.clone(),
                                pos: p,
                                start: s,
                                end: e,
                            });
                        }
                        p
                    }
                });
            }
            off.unwrap_or(0)
        };
        usize::try_from(flat)
            .ok()
            .filter(|&i| i < len)
            .ok_or_else(|| oob(flat))
    }

    fn eval(&mut self, e: &Expr) -> R<Scalar> {
        Ok(match e {
            Expr::Int(v, t) => Scalar::I64(*v).cast(*t),
            Expr::Float(v, t) => Scalar::F64(*v).cast(*t),
            Expr::Bool(v) => Scalar::Bool(*v),
            Expr::Var(v) => self
                .env
                .iter()
                .rev()
                .find(|(n, _)| n == v)
                .map(|(_, s)| *s)
                .ok_or_else(|| Stage2InterpError::Unbound {
                    what: "variable",
                    name: v.clone(),
                })?,
            Expr::Param(p) => {
                Scalar::I64(
                    *self
                        .params
                        .get(p)
                        .ok_or_else(|| Stage2InterpError::Unbound {
                            what: "parameter",
                            name: p.clone(),
                        })?,
                )
            }
            Expr::Coord(v) => {
                return Err(Stage2InterpError::Malformed {
                    what: format!("untranslated coordinate @{v}"),
                })
            }
            Expr::Load { buffer, indices } => {
                let off = self.offset(buffer, indices)?;
                self.track(buffer, off, false)?;
                self.read(buffer, off as i64)?
            }
            Expr::Unary(op, a) => eval_unop(*op, self.eval(a)?),
            Expr::Binary(op, a, b) => {
                let x = self.eval(a)?;
                match op {
                    BinOp::And if !x.as_bool() => Scalar::Bool(false),
                    BinOp::Or if x.as_bool() => Scalar::Bool(true),
                    _ => {
                        let y = self.eval(b)?;
                        if x.dtype() != y.dtype() {
                            return Err(Stage2InterpError::Malformed {
                                what: format!(
                                    "operands of {op:?} have types {} and {}",
                                    x.dtype(),
                                    y.dtype()
                                ),
                            });
                        }
                        eval_binop(*op, x, y)
                    }
                }
            }
            Expr::Select(c, a, b) => {
                if self.eval(c)?.as_bool() {
                    self.eval(a)?
                } else {
                    self.eval(b)?
                }
            }
            Expr::Cast(t, a) => self.eval(a)?.cast(*t),
            Expr::Search {
                buffer,
                lo,
                hi,
                value,
            } => {
                let (lo, hi, v) = (
                    self.eval(lo)?.as_i64(),
                    self.eval(hi)?.as_i64(),
                    self.eval(value)?.as_i64(),
                );
                // A linear scan: independent of the binary search the code generator emits.
                let mut found = -1;
                for q in lo..hi {
                    if self.read(buffer, q)?.as_i64() == v {
                        found = q;
                        break;
                    }
                }
                Scalar::I64(found)
            }
            Expr::Segment {
                buffer,
                lo,
                hi,
                value,
            } => {
                let (lo, hi, v) = (
                    self.eval(lo)?.as_i64(),
                    self.eval(hi)?.as_i64(),
                    self.eval(value)?.as_i64(),
                );
                // A linear scan for the last entry not above the value.
                let mut found = lo - 1;
                for q in lo..hi {
                    if self.read(buffer, q)?.as_i64() <= v {
                        found = q;
                    } else {
                        break;
                    }
                }
                Scalar::I64(found)
            }
        })
    }
}
