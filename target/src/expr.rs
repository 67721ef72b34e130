//! Expressions: literals, variables, loads, lazy `select`, short-circuit `&&`/`||`, search.
//!
//! Everything that may guard a load is emitted with control flow, so that an operand that is
//! not selected is never evaluated; LLVM turns the diamonds back into `select`s where safe.

use crate::emit::{set_align, Emitter, Val};
use crate::error::CodegenError;
use inkwell::values::{BasicValueEnum, IntValue, PointerValue};
use inkwell::IntPredicate;
use lacuna_ir::{DType, Scalar};
use lacuna_stage1::BinOp;
use lacuna_stage2::Expr;

type R<T> = Result<T, CodegenError>;

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// Emits an expression.
    pub(crate) fn expr(&mut self, e: &'a Expr) -> R<Val<'ctx>> {
        match e {
            Expr::Int(v, t) => Ok(self.constant(Scalar::I64(*v).cast(*t))),
            Expr::Float(v, t) => Ok(self.constant(Scalar::F64(*v).cast(*t))),
            Expr::Bool(v) => Ok(self.constant(Scalar::Bool(*v))),
            Expr::Var(name) => {
                let (v, mutable) = self
                    .env
                    .iter()
                    .rev()
                    .find(|(n, ..)| *n == name.as_str())
                    .map(|(_, v, m)| (*v, *m))
                    .ok_or_else(|| CodegenError::UnknownVariable { var: name.clone() })?;
                if !mutable {
                    return Ok(v);
                }
                let ty = self.llvm_type(v.t);
                let loaded = self
                    .builder
                    .build_load(ty, v.v.into_pointer_value(), name)?;
                Ok(Val { v: loaded, t: v.t })
            }
            Expr::Param(name) => {
                let v =
                    self.params
                        .get(name.as_str())
                        .ok_or_else(|| CodegenError::UnknownParam {
                            param: name.clone(),
                        })?;
                Ok(Val {
                    v: (*v).into(),
                    t: DType::I64,
                })
            }
            Expr::Coord(var) => Err(CodegenError::Coordinate { var: var.clone() }),
            Expr::Load { buffer, indices } => {
                if let Some(v) = self.vector_lane(e)? {
                    return Ok(v);
                }
                let (p, t) = self.element_ptr(buffer, indices)?;
                Ok(Val {
                    v: self.load(p, t, buffer)?,
                    t,
                })
            }
            Expr::Unary(op, a) => {
                let a = self.expr(a)?;
                self.unary(*op, a)
            }
            Expr::Binary(op @ (BinOp::And | BinOp::Or), a, b) => self.logical(*op, a, b),
            Expr::Binary(op, a, b) => {
                let (x, y) = (self.expr(a)?, self.expr(b)?);
                if x.t != y.t {
                    return Err(CodegenError::OperandTypes {
                        op: *op,
                        left: x.t,
                        right: y.t,
                    });
                }
                self.binary(*op, x, y)
            }
            Expr::Select(c, a, b) => self.select(c, a, b),
            Expr::Cast(t, a) => {
                let a = self.expr(a)?;
                self.convert(a, *t)
            }
            Expr::Search {
                buffer,
                lo,
                hi,
                value,
            } => self.search(buffer, lo, hi, value),
            Expr::Segment {
                buffer,
                lo,
                hi,
                value,
            } => self.segment(buffer, lo, hi, value),
            Expr::Shuffle {
                kind,
                value,
                lane,
                width,
            } => self.shuffle(*kind, value, lane, *width),
        }
    }

    /// The buffer (an integer one) and the `i64` operands of a search or segment lookup.
    #[allow(clippy::type_complexity)]
    fn search_operands(
        &mut self,
        buffer: &'a str,
        lo: &'a Expr,
        hi: &'a Expr,
        value: &'a Expr,
    ) -> R<(
        PointerValue<'ctx>,
        DType,
        IntValue<'ctx>,
        IntValue<'ctx>,
        IntValue<'ctx>,
    )> {
        let (base, t) = *self
            .bufs
            .get(buffer)
            .ok_or_else(|| CodegenError::UnknownBuffer {
                buffer: buffer.to_string(),
            })?;
        if !t.is_int() {
            return Err(CodegenError::SearchBuffer {
                buffer: buffer.to_string(),
                dtype: t,
            });
        }
        let operand = |dtype| CodegenError::SearchOperand {
            buffer: buffer.to_string(),
            dtype,
        };
        let lo = self.int_operand(lo, operand)?;
        let hi = self.int_operand(hi, operand)?;
        let v = self.int_operand(value, operand)?;
        Ok((base, t, lo, hi, v))
    }

    /// Upper bound of `value` in the non-decreasing `buffer[lo..hi)`, minus one: the segment
    /// (row) holding position `value`, or `lo - 1`.
    fn segment(
        &mut self,
        buffer: &'a str,
        lo: &'a Expr,
        hi: &'a Expr,
        value: &'a Expr,
    ) -> R<Val<'ctx>> {
        let (base, t, lo, hi, v) = self.search_operands(buffer, lo, hi, value)?;
        let lv = self.bisect(base, t, lo, hi, v, IntPredicate::SLE, "segment")?;
        let (b, one) = (&self.builder, self.ctx.i64_type().const_int(1, false));
        let r = b.build_int_sub(lv, one, "segment")?;
        Ok(Val {
            v: r.into(),
            t: DType::I64,
        })
    }

    /// A constant of the scalar's type.
    pub(crate) fn constant(&self, s: Scalar) -> Val<'ctx> {
        let c = self.ctx;
        let v: BasicValueEnum<'ctx> = match s {
            Scalar::F32(x) => c.f32_type().const_float(x as f64).into(),
            Scalar::F64(x) => c.f64_type().const_float(x).into(),
            Scalar::I8(x) => c.i8_type().const_int(x as i64 as u64, true).into(),
            Scalar::I32(x) => c.i32_type().const_int(x as i64 as u64, true).into(),
            Scalar::I64(x) => c.i64_type().const_int(x as u64, true).into(),
            Scalar::Bool(x) => c.bool_type().const_int(x as u64, false).into(),
        };
        Val { v, t: s.dtype() }
    }

    /// An integer operand widened to `i64`; `err` builds the error for other types.
    pub(crate) fn int_operand(
        &mut self,
        e: &'a Expr,
        err: impl Fn(DType) -> CodegenError,
    ) -> R<IntValue<'ctx>> {
        let v = self.expr(e)?;
        if !v.t.is_int() {
            return Err(err(v.t));
        }
        Ok(self.convert(v, DType::I64)?.v.into_int_value())
    }

    /// The index `e` into `buffer` (an integer widened to `i64`) evaluated with the variable
    /// `var` bound to `at` instead of its value in scope.
    pub(crate) fn index_at(
        &mut self,
        e: &'a Expr,
        var: &'a str,
        at: IntValue<'ctx>,
        buffer: &str,
    ) -> R<IntValue<'ctx>> {
        self.env.push((
            var,
            Val {
                v: at.into(),
                t: DType::I64,
            },
            false,
        ));
        let idx = self.int_operand(e, |dtype| CodegenError::IndexType {
            buffer: buffer.to_string(),
            dtype,
        });
        self.env.pop();
        idx
    }

    /// A condition as `i1` (non-`bool` values test against zero, as in the interpreters).
    pub(crate) fn cond(&mut self, e: &'a Expr) -> R<IntValue<'ctx>> {
        let v = self.expr(e)?;
        Ok(self.convert(v, DType::Bool)?.v.into_int_value())
    }

    /// The address of a flat access `buffer[index]`, with the buffer's element type.
    pub(crate) fn element_ptr(
        &mut self,
        buffer: &'a str,
        indices: &'a [Expr],
    ) -> R<(PointerValue<'ctx>, DType)> {
        let (base, t) = *self
            .bufs
            .get(buffer)
            .ok_or_else(|| CodegenError::UnknownBuffer {
                buffer: buffer.to_string(),
            })?;
        let [index] = indices else {
            return Err(CodegenError::NotFlatAccess {
                buffer: buffer.to_string(),
                count: indices.len(),
            });
        };
        let idx = self.int_operand(index, |dtype| CodegenError::IndexType {
            buffer: buffer.to_string(),
            dtype,
        })?;
        Ok((self.gep(base, t, idx)?, t))
    }

    fn gep(
        &self,
        base: PointerValue<'ctx>,
        t: DType,
        idx: IntValue<'ctx>,
    ) -> R<PointerValue<'ctx>> {
        // SAFETY (of the LLVM construct): an out-of-bounds `inbounds` GEP is poison, not UB;
        // only loads and stores that are actually executed dereference it.
        Ok(unsafe {
            self.builder
                .build_in_bounds_gep(self.llvm_type(t), base, &[idx], "")
        }?)
    }

    fn load(&self, p: PointerValue<'ctx>, t: DType, name: &str) -> R<BasicValueEnum<'ctx>> {
        let v = self.builder.build_load(self.llvm_type(t), p, name)?;
        set_align(v, t.size_bytes() as u32)?;
        Ok(v)
    }

    /// `a && b` / `a || b`: `b` is evaluated only when `a` does not decide the result.
    fn logical(&mut self, op: BinOp, a: &'a Expr, b: &'a Expr) -> R<Val<'ctx>> {
        let x = self.expr(a)?;
        let xb = self.convert(x, DType::Bool)?.v.into_int_value();
        let lhs_end = self.current_block()?;
        let rhs_bb = self.ctx.append_basic_block(
            self.func,
            if op == BinOp::And {
                "and.rhs"
            } else {
                "or.rhs"
            },
        );
        let merge = self.ctx.append_basic_block(
            self.func,
            if op == BinOp::And {
                "and.end"
            } else {
                "or.end"
            },
        );
        if op == BinOp::And {
            self.builder.build_conditional_branch(xb, rhs_bb, merge)?;
        } else {
            self.builder.build_conditional_branch(xb, merge, rhs_bb)?;
        }
        self.builder.position_at_end(rhs_bb);
        let y = self.expr(b)?;
        if x.t != y.t {
            return Err(CodegenError::OperandTypes {
                op,
                left: x.t,
                right: y.t,
            });
        }
        let yb = self.convert(y, DType::Bool)?.v.into_int_value();
        let rhs_end = self.current_block()?;
        self.builder.build_unconditional_branch(merge)?;
        self.builder.position_at_end(merge);
        let phi = self.builder.build_phi(self.ctx.bool_type(), "")?;
        let short = self
            .ctx
            .bool_type()
            .const_int((op == BinOp::Or) as u64, false);
        phi.add_incoming(&[(&short, lhs_end), (&yb, rhs_end)]);
        Ok(Val {
            v: phi.as_basic_value(),
            t: DType::Bool,
        })
    }

    /// Lazy `select(c, a, b)`: only the chosen arm is evaluated.
    fn select(&mut self, c: &'a Expr, a: &'a Expr, b: &'a Expr) -> R<Val<'ctx>> {
        let cv = self.cond(c)?;
        let then_bb = self.ctx.append_basic_block(self.func, "sel.then");
        let else_bb = self.ctx.append_basic_block(self.func, "sel.else");
        let merge = self.ctx.append_basic_block(self.func, "sel.end");
        self.builder
            .build_conditional_branch(cv, then_bb, else_bb)?;
        self.builder.position_at_end(then_bb);
        let x = self.expr(a)?;
        let then_end = self.current_block()?;
        self.builder.build_unconditional_branch(merge)?;
        self.builder.position_at_end(else_bb);
        let y = self.expr(b)?;
        let else_end = self.current_block()?;
        self.builder.build_unconditional_branch(merge)?;
        if x.t != y.t {
            return Err(CodegenError::SelectTypes {
                then_type: x.t,
                else_type: y.t,
            });
        }
        self.builder.position_at_end(merge);
        let phi = self.builder.build_phi(self.llvm_type(x.t), "sel")?;
        phi.add_incoming(&[(&x.v, then_end), (&y.v, else_end)]);
        Ok(Val {
            v: phi.as_basic_value(),
            t: x.t,
        })
    }

    /// Binary search (lower bound) for `value` in the sorted `buffer[lo..hi)`: the position
    /// where it is stored, or -1.
    fn search(
        &mut self,
        buffer: &'a str,
        lo: &'a Expr,
        hi: &'a Expr,
        value: &'a Expr,
    ) -> R<Val<'ctx>> {
        let (base, t, lo, hi, v) = self.search_operands(buffer, lo, hi, value)?;
        let lv = self.bisect(base, t, lo, hi, v, IntPredicate::SLT, "search")?;
        let (b, i64t) = (&self.builder, self.ctx.i64_type());
        let minus_one = i64t.const_all_ones();
        let done = self.current_block()?;
        let check = self.ctx.append_basic_block(self.func, "search.check");
        let end = self.ctx.append_basic_block(self.func, "search.end");
        // done: found iff l < hi && buffer[l] == value
        let inside = b.build_int_compare(IntPredicate::SLT, lv, hi, "")?;
        b.build_conditional_branch(inside, check, end)?;
        b.position_at_end(check);
        let x = self.load_index(base, t, lv)?;
        let b = &self.builder;
        let hit = b.build_int_compare(IntPredicate::EQ, x, v, "")?;
        let r = b.build_select(hit, lv, minus_one, "")?.into_int_value();
        b.build_unconditional_branch(end)?;
        b.position_at_end(end);
        let phi = b.build_phi(i64t, "search")?;
        phi.add_incoming(&[(&minus_one, done), (&r, check)]);
        Ok(Val {
            v: phi.as_basic_value(),
            t: DType::I64,
        })
    }

    /// Binary search over the sorted `buffer[lo..hi)`: the first position whose entry `x` does
    /// not satisfy `x pred value` (`SLT`: lower bound, `SLE`: upper bound).
    #[allow(clippy::too_many_arguments)]
    fn bisect(
        &mut self,
        base: PointerValue<'ctx>,
        t: DType,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        v: IntValue<'ctx>,
        pred: IntPredicate,
        name: &str,
    ) -> R<IntValue<'ctx>> {
        let (b, i64t) = (&self.builder, self.ctx.i64_type());
        let one = i64t.const_int(1, false);
        let pre = self.current_block()?;
        let head = self
            .ctx
            .append_basic_block(self.func, &format!("{name}.head"));
        let step = self
            .ctx
            .append_basic_block(self.func, &format!("{name}.step"));
        let done = self
            .ctx
            .append_basic_block(self.func, &format!("{name}.done"));
        b.build_unconditional_branch(head)?;
        // head: while l < h
        b.position_at_end(head);
        let l = b.build_phi(i64t, &format!("{name}.l"))?;
        let h = b.build_phi(i64t, &format!("{name}.h"))?;
        let (lv, hv) = (
            l.as_basic_value().into_int_value(),
            h.as_basic_value().into_int_value(),
        );
        let more = b.build_int_compare(IntPredicate::SLT, lv, hv, "")?;
        b.build_conditional_branch(more, step, done)?;
        // step: mid = l + (h - l) / 2 (unsigned halving: no overflow for any l < h)
        b.position_at_end(step);
        let diff = b.build_int_sub(hv, lv, "")?;
        let half = b.build_right_shift(diff, one, false, "")?;
        let mid = b.build_int_add(lv, half, &format!("{name}.mid"))?;
        let x = self.load_index(base, t, mid)?;
        let b = &self.builder;
        let go_right = b.build_int_compare(pred, x, v, "")?;
        let mid1 = b.build_int_add(mid, one, "")?;
        let l2 = b.build_select(go_right, mid1, lv, "")?.into_int_value();
        let h2 = b.build_select(go_right, hv, mid, "")?.into_int_value();
        b.build_unconditional_branch(head)?;
        l.add_incoming(&[(&lo, pre), (&l2, step)]);
        h.add_incoming(&[(&hi, pre), (&h2, step)]);
        b.position_at_end(done);
        Ok(lv)
    }

    /// `buffer[idx]` of an integer buffer, widened to `i64`.
    fn load_index(
        &self,
        base: PointerValue<'ctx>,
        t: DType,
        idx: IntValue<'ctx>,
    ) -> R<IntValue<'ctx>> {
        let p = self.gep(base, t, idx)?;
        let x = self.load(p, t, "")?.into_int_value();
        if t == DType::I64 {
            Ok(x)
        } else {
            Ok(self
                .builder
                .build_int_s_extend(x, self.ctx.i64_type(), "")?)
        }
    }
}
