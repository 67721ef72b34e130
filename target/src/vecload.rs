//! Vectorized global loads: a `vectorized` loop of 2 or 4 iterations in a GPU kernel loads
//! consecutive elements of a global buffer with one vector load (`ld.global.v2.f64`,
//! `ld.global.v4.f32`, `.v2`/`.v4` for `i32`), instead of one load per iteration.
//!
//! A loop `vectorized for v in lo..lo+n` qualifies when its body is straight-line code (lets,
//! guards, blocks, stores, atomics; no loops, mutable variables, allocations, barriers or
//! shuffles) and `n` elements of the buffer's type take at most 16 bytes. A load `b[idx]` in it
//! is vectorized when `b` is a global buffer the body does not write, the load is evaluated
//! whenever its statement runs (not in an arm of a `select` or the right side of `&&`/`||`),
//! the `let`s and guards above it read nothing the body writes (they are evaluated for every
//! iteration up front), and `idx` (through the `let`s above it) is `base + v`: the `n`
//! iterations read `b[base + lo .. base + lo + n]`. The vector load needs:
//!
//! - every iteration to reach the load: the guards (`if`s) above it hold for all `n` values of
//!   `v` (a tail iteration past the end of the data fails them);
//! - `base + lo` to be a multiple of `n`: buffers start 256-byte aligned (`cuMemAlloc`), so the
//!   address is then aligned to the vector's size. It is proved statically where the index is
//!   a sum of multiples of `n` (e.g. `k.0 * 64 + k.1.0 * 2`), else tested at run time.
//!
//! The loop becomes `if (all guards hold and the base is aligned) { vector loads; the n
//! iterations unrolled, each taking its lane, the checked guards known to hold } else { the
//! scalar loop }`; where nothing needs a
//! test, only the vector path is emitted. Input buffers (never written by the kernel) are also
//! `readonly` kernel parameters, so their loads become `ld.global.nc` (the read-only cache).

use crate::emit::{set_align, Emitter, Val};
use crate::error::CodegenError;
use inkwell::values::IntValue;
use lacuna_ir::DType;
use lacuna_stage1::BinOp;
use lacuna_stage2::{Expr, ForKind, Func, Stmt};
use std::cell::Cell;
use std::collections::{BTreeSet, HashMap};

type R<T> = Result<T, CodegenError>;

thread_local! {
    /// Whether host code built on this thread vectorizes loads as GPU kernels do (see
    /// [`with_cpu_vector_loads`]).
    static CPU_VECTOR_LOADS: Cell<bool> = const { Cell::new(false) };
}

/// Runs `build` with explicit vector loads enabled for host code built on this thread (they
/// are unaligned there: host arrays are only element-aligned). This executes the code that
/// GPU kernels get — the guards, the alignment test, the lanes, the scalar fallback — on the
/// CPU, where it can be compared with the interpreter without a GPU.
pub fn with_cpu_vector_loads<T>(build: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            CPU_VECTOR_LOADS.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(CPU_VECTOR_LOADS.with(|c| c.replace(true)));
    build()
}

/// One step on the way from the loop's body to a load: a `let`, or a guard that holds
/// (`false`: its negation holds, in an `else`).
#[derive(Clone, Copy)]
enum Step<'a> {
    Let(&'a str, &'a Expr),
    Guard(&'a Expr, bool),
}

/// A load that becomes a lane of a vector load.
struct Candidate<'a> {
    load: &'a Expr,
    buffer: &'a str,
    index: &'a Expr,
    path: Vec<Step<'a>>,
    aligned: bool,
}

/// The buffers a statement list writes.
fn written(stmts: &[Stmt], out: &mut BTreeSet<String>) {
    for s in stmts {
        match s {
            Stmt::Store { buffer, .. } | Stmt::Atomic { buffer, .. } => {
                out.insert(buffer.clone());
            }
            _ => {}
        }
        for b in s.bodies() {
            written(b, out);
        }
    }
}

/// The buffers a kernel never writes (its `readonly` parameters).
pub(crate) fn read_only(f: &Func) -> BTreeSet<String> {
    let mut w = BTreeSet::new();
    written(&f.body, &mut w);
    f.buffers
        .iter()
        .map(|b| b.name.clone())
        .filter(|n| !w.contains(n))
        .collect()
}

fn has_shuffle(e: &Expr) -> bool {
    matches!(e, Expr::Shuffle { .. }) || e.children().into_iter().any(has_shuffle)
}

/// Whether a loop body is straight-line code the vector path can duplicate and pre-evaluate.
fn straight(stmts: &[Stmt]) -> bool {
    stmts.iter().all(|s| {
        let ok = match s {
            Stmt::Let { .. } | Stmt::Store { .. } | Stmt::Atomic { .. } => true,
            Stmt::If { .. } | Stmt::Attr { .. } => true,
            Stmt::Block { init, .. } => init.is_empty(),
            _ => false,
        };
        ok && !s.exprs().into_iter().any(has_shuffle) && s.bodies().into_iter().all(|b| straight(b))
    })
}

/// Whether `e` loads from (or searches) one of `buffers`.
fn reads_any(e: &Expr, buffers: &BTreeSet<String>) -> bool {
    match e {
        Expr::Load { buffer, .. } | Expr::Search { buffer, .. } | Expr::Segment { buffer, .. }
            if buffers.contains(buffer) =>
        {
            true
        }
        other => other.children().into_iter().any(|c| reads_any(c, buffers)),
    }
}

/// The definition of `name` among the path's lets (the innermost), with the lets before it.
fn lookup<'p, 'a>(name: &str, lets: &'p [Step<'a>]) -> Option<(&'a Expr, &'p [Step<'a>])> {
    lets.iter().enumerate().rev().find_map(|(i, s)| match s {
        Step::Let(n, e) if *n == name => Some((*e, &lets[..i])),
        _ => None,
    })
}

/// Whether `e` depends on `var` (through the lets of `path`).
fn depends(e: &Expr, var: &str, path: &[Step<'_>]) -> bool {
    match e {
        Expr::Var(x) => match lookup(x, path) {
            Some((d, before)) => depends(d, var, before),
            None => x == var,
        },
        other => other.children().into_iter().any(|c| depends(c, var, path)),
    }
}

/// The constant value of an integer expression, if it is one.
fn constant(e: &Expr) -> Option<i64> {
    match e {
        Expr::Int(v, _) => Some(*v),
        Expr::Cast(t, a) if t.is_int() => constant(a),
        _ => None,
    }
}

/// The coefficient of `var` in `e` when `e` is affine in it (through the lets of `path`).
fn coefficient(e: &Expr, var: &str, path: &[Step<'_>]) -> Option<i64> {
    if !depends(e, var, path) {
        return Some(0);
    }
    match e {
        Expr::Var(x) => match lookup(x, path) {
            Some((d, before)) => coefficient(d, var, before),
            None => Some(1),
        },
        Expr::Cast(t, a) if t.is_int() => coefficient(a, var, path),
        Expr::Binary(BinOp::Add, a, b) => {
            coefficient(a, var, path)?.checked_add(coefficient(b, var, path)?)
        }
        Expr::Binary(BinOp::Sub, a, b) => {
            coefficient(a, var, path)?.checked_sub(coefficient(b, var, path)?)
        }
        Expr::Binary(BinOp::Mul, a, b) => {
            let (ca, cb) = (coefficient(a, var, path)?, coefficient(b, var, path)?);
            match (ca, cb) {
                (0, c) => constant(a)?.checked_mul(c),
                (c, 0) => constant(b)?.checked_mul(c),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether `e` at `var = lo` is provably a multiple of `n`.
fn multiple(e: &Expr, n: i64, var: &str, lo: i64, path: &[Step<'_>]) -> bool {
    match e {
        Expr::Int(v, _) => v % n == 0,
        Expr::Var(x) => match lookup(x, path) {
            Some((d, before)) => multiple(d, n, var, lo, before),
            None => x == var && lo % n == 0,
        },
        Expr::Cast(t, a) if t.is_int() => multiple(a, n, var, lo, path),
        Expr::Binary(BinOp::Add | BinOp::Sub, a, b) => {
            multiple(a, n, var, lo, path) && multiple(b, n, var, lo, path)
        }
        Expr::Binary(BinOp::Mul, a, b) => {
            multiple(a, n, var, lo, path) || multiple(b, n, var, lo, path)
        }
        _ => false,
    }
}

struct Finder<'a, 'f> {
    var: &'a str,
    lo: i64,
    n: i64,
    written: BTreeSet<String>,
    func_buffers: &'f HashMap<&'a str, DType>,
    out: Vec<Candidate<'a>>,
}

impl<'a> Finder<'a, '_> {
    fn stmts(&mut self, stmts: &'a [Stmt], path: &mut Vec<Step<'a>>) {
        let mark = path.len();
        for s in stmts {
            match s {
                Stmt::Let { var, value } => {
                    self.expr(value, path);
                    path.push(Step::Let(var, value));
                }
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    self.expr(cond, path);
                    path.push(Step::Guard(cond, true));
                    self.stmts(then_body, path);
                    path.pop();
                    path.push(Step::Guard(cond, false));
                    self.stmts(else_body, path);
                    path.pop();
                }
                Stmt::Block { body, .. } | Stmt::Attr { body, .. } => self.stmts(body, path),
                Stmt::Store { indices, value, .. } | Stmt::Atomic { indices, value, .. } => {
                    indices.iter().for_each(|i| self.expr(i, path));
                    self.expr(value, path);
                }
                _ => {}
            }
        }
        path.truncate(mark);
    }

    /// The loads `e` always evaluates.
    fn expr(&mut self, e: &'a Expr, path: &[Step<'a>]) {
        match e {
            Expr::Load { buffer, indices } => {
                if let [index] = indices.as_slice() {
                    self.consider(e, buffer, index, path);
                }
                indices.iter().for_each(|i| self.expr(i, path));
            }
            Expr::Select(c, _, _) => self.expr(c, path),
            Expr::Binary(BinOp::And | BinOp::Or, a, _) => self.expr(a, path),
            Expr::Search { .. } | Expr::Segment { .. } | Expr::Shuffle { .. } => {}
            other => other
                .children()
                .into_iter()
                .for_each(|c| self.expr(c, path)),
        }
    }

    fn consider(&mut self, load: &'a Expr, buffer: &'a str, index: &'a Expr, path: &[Step<'a>]) {
        let Some(t) = self.func_buffers.get(buffer) else {
            return; // scratch
        };
        // The lets and guards above the load are evaluated for every lane before any lane
        // runs: they must not read what the body writes (an earlier lane could change it).
        let stale = path.iter().any(|s| match s {
            Step::Let(_, e) | Step::Guard(e, _) => reads_any(e, &self.written),
        });
        if self.written.contains(buffer)
            || stale
            || reads_any(index, &self.written)
            || self.n * t.size_bytes() as i64 > 16
            || coefficient(index, self.var, path) != Some(1)
        {
            return;
        }
        let aligned = multiple(index, self.n, self.var, self.lo, path);
        self.out.push(Candidate {
            load,
            buffer,
            index,
            path: path.to_vec(),
            aligned,
        });
    }
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// Whether this emitter vectorizes loads (GPU kernels; host code inside
    /// [`with_cpu_vector_loads`]).
    fn vector_loads(&self) -> bool {
        self.gpu || CPU_VECTOR_LOADS.with(Cell::get)
    }

    /// The lane of a vectorized load being emitted in an unrolled iteration, if `e` is one.
    pub(crate) fn vector_lane(&self, e: &Expr) -> R<Option<Val<'ctx>>> {
        let Some(lane) = self.gpux.lane else {
            return Ok(None);
        };
        let Some(&(v, t)) = self.gpux.vector.get(&(e as *const Expr as usize)) else {
            return Ok(None);
        };
        let i = self.ctx.i32_type().const_int(lane, false);
        Ok(Some(Val {
            v: self.builder.build_extract_element(v, i, "lane")?,
            t,
        }))
    }

    /// A `vectorized` loop with vector loads (see the module documentation); `Ok(false)` when
    /// the loop does not qualify (nothing was emitted).
    pub(crate) fn vector_loop(
        &mut self,
        var: &'a str,
        start: &'a Expr,
        end: &'a Expr,
        body: &'a [Stmt],
    ) -> R<bool> {
        if !self.vector_loads() || self.gpux.lane.is_some() {
            return Ok(false);
        }
        let (Some(lo), Some(hi)) = (constant(start), constant(end)) else {
            return Ok(false);
        };
        let n = hi - lo;
        if !matches!(n, 2 | 4) || !straight(body) {
            return Ok(false);
        }
        let mut w = BTreeSet::new();
        written(body, &mut w);
        let mut finder = Finder {
            var,
            lo,
            n,
            written: w,
            func_buffers: &self.gpux.globals,
            out: Vec::new(),
        };
        finder.stmts(body, &mut Vec::new());
        let found = finder.out;
        if found.is_empty() {
            return Ok(false);
        }
        // The checks: every lane passes each load's guards, each base is aligned.
        let i64t = self.ctx.i64_type();
        let mut fallback = None;
        let mut bases: Vec<IntValue<'ctx>> = Vec::new();
        for c in &found {
            let guarded = c.path.iter().any(|s| matches!(s, Step::Guard(..)));
            let lanes = if guarded { n } else { 1 };
            for lane in 0..lanes {
                let mark = self.env.len();
                let v = Val {
                    v: i64t.const_int((lo + lane) as u64, true).into(),
                    t: DType::I64,
                };
                self.env.push((var, v, false));
                for step in &c.path {
                    match *step {
                        Step::Let(name, value) => {
                            let x = self.expr(value)?;
                            self.env.push((name, x, false));
                        }
                        Step::Guard(cond, holds) => {
                            self.gpux.known.insert(cond as *const Expr as usize, holds);
                            let mut ok = self.cond(cond)?;
                            if !holds {
                                ok = self.builder.build_not(ok, "")?;
                            }
                            self.branch_or(ok, &mut fallback)?;
                        }
                    }
                }
                if lane == 0 {
                    let base = self.int_operand(c.index, |dtype| CodegenError::IndexType {
                        buffer: c.buffer.to_string(),
                        dtype,
                    })?;
                    if !c.aligned {
                        let low = self.builder.build_and(
                            base,
                            i64t.const_int((n - 1) as u64, false),
                            "",
                        )?;
                        let ok = self.builder.build_int_compare(
                            inkwell::IntPredicate::EQ,
                            low,
                            i64t.const_zero(),
                            "aligned",
                        )?;
                        self.branch_or(ok, &mut fallback)?;
                    }
                    bases.push(base);
                }
                self.env.truncate(mark);
            }
        }
        // The vector path.
        let merge = self
            .ctx
            .append_basic_block(self.func, &format!("{var}.vec.end"));
        for (c, base) in found.iter().zip(&bases) {
            let (p, t) = *self
                .bufs
                .get(c.buffer)
                .ok_or_else(|| CodegenError::UnknownBuffer {
                    buffer: c.buffer.to_string(),
                })?;
            let elem = self.llvm_type(t);
            // SAFETY (of the LLVM construct): the checks above hold, so the n elements from
            // `base` are all read by the scalar loop too.
            let addr = unsafe { self.builder.build_in_bounds_gep(elem, p, &[*base], "") }?;
            let vty = vector_type(elem, n as u32)?;
            let bytes = n as u32 * t.size_bytes() as u32;
            let v = if self.gpu && self.gpux.read_only.contains(c.buffer) {
                // `ld.global.nc.v{n}`, which LLVM does not split up again.
                self.ldg(vty, addr, bytes)?
            } else {
                let v = self.builder.build_load(vty, addr, c.buffer)?;
                set_align(
                    v,
                    if self.gpu {
                        bytes
                    } else {
                        t.size_bytes() as u32
                    },
                )?;
                v.into_vector_value()
            };
            self.gpux
                .vector
                .insert(c.load as *const Expr as usize, (v, t));
        }
        for lane in 0..n {
            let v = Val {
                v: i64t.const_int((lo + lane) as u64, true).into(),
                t: DType::I64,
            };
            self.env.push((var, v, false));
            self.gpux.lane = Some(lane as u64);
            let r = self.stmts(body);
            self.gpux.lane = None;
            self.env.pop();
            r?;
        }
        self.gpux.vector.clear();
        self.gpux.known.clear();
        self.builder.build_unconditional_branch(merge)?;
        // The scalar loop, where a check failed.
        if let Some(bb) = fallback {
            self.builder.position_at_end(bb);
            let lo_v = i64t.const_int(lo as u64, true);
            let hi_v = i64t.const_int(hi as u64, true);
            self.for_loop(var, lo_v, hi_v, ForKind::Vectorized, false, body)?;
            self.builder.build_unconditional_branch(merge)?;
        }
        self.builder.position_at_end(merge);
        Ok(true)
    }

    /// A load through the read-only data cache: `llvm.nvvm.ldg.global.{f,i}` of a vector type.
    fn ldg(
        &self,
        vty: inkwell::types::VectorType<'ctx>,
        addr: inkwell::values::PointerValue<'ctx>,
        align: u32,
    ) -> R<inkwell::values::VectorValue<'ctx>> {
        let name = if vty.get_element_type().is_float_type() {
            "llvm.nvvm.ldg.global.f"
        } else {
            "llvm.nvvm.ldg.global.i"
        };
        let align = self.ctx.i32_type().const_int(u64::from(align), false);
        let v = self.intrinsic(
            name,
            &[vty.into(), addr.get_type().into()],
            &[addr.into(), align.into()],
        )?;
        Ok(v.into_vector_value())
    }

    /// Continues where `ok` holds; otherwise branches to the fallback block (created on first
    /// use).
    fn branch_or(
        &mut self,
        ok: IntValue<'ctx>,
        fallback: &mut Option<inkwell::basic_block::BasicBlock<'ctx>>,
    ) -> R<()> {
        let fb = match fallback {
            Some(b) => *b,
            None => {
                let b = self.ctx.append_basic_block(self.func, "vec.scalar");
                *fallback = Some(b);
                b
            }
        };
        let next = self.ctx.append_basic_block(self.func, "vec.check");
        self.builder.build_conditional_branch(ok, next, fb)?;
        self.builder.position_at_end(next);
        Ok(())
    }
}

/// `<n x elem>` for a scalar element type.
fn vector_type<'ctx>(
    elem: inkwell::types::BasicTypeEnum<'ctx>,
    n: u32,
) -> R<inkwell::types::VectorType<'ctx>> {
    use inkwell::types::BasicTypeEnum as T;
    match elem {
        T::FloatType(f) => Ok(f.vec_type(n)),
        T::IntType(i) => Ok(i.vec_type(n)),
        other => Err(CodegenError::Llvm {
            message: format!("no vector of {other:?}"),
        }),
    }
}
