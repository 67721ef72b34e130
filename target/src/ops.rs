//! Scalar operations and conversions, with the semantics of `lacuna_stage1::{eval_binop,
//! eval_unop}` and `Scalar::cast`: IEEE floats without fast-math flags, wrapping integers,
//! integer division by zero giving zero, saturating float-to-integer conversion.

use crate::emit::{Emitter, Val};
use crate::error::CodegenError;
use inkwell::intrinsics::Intrinsic;
use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicMetadataValueEnum, BasicValueEnum, FloatValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};
use lacuna_ir::DType;
use lacuna_stage1::{BinOp, UnOp};

type R<T> = Result<T, CodegenError>;

impl<'ctx> Emitter<'_, 'ctx> {
    /// The LLVM type of a Lacuna type (`bool` is `i1`).
    pub(crate) fn llvm_type(&self, t: DType) -> BasicTypeEnum<'ctx> {
        match t {
            DType::F32 => self.ctx.f32_type().into(),
            DType::F64 => self.ctx.f64_type().into(),
            DType::I8 => self.ctx.i8_type().into(),
            DType::I32 => self.ctx.i32_type().into(),
            DType::I64 => self.ctx.i64_type().into(),
            DType::Bool => self.ctx.bool_type().into(),
        }
    }

    /// Calls the overloaded intrinsic `name` instantiated at `types`.
    pub(crate) fn intrinsic(
        &self,
        name: &str,
        types: &[BasicTypeEnum<'ctx>],
        args: &[BasicMetadataValueEnum<'ctx>],
    ) -> R<BasicValueEnum<'ctx>> {
        let missing = || CodegenError::Llvm {
            message: format!("intrinsic {name} is not available"),
        };
        let decl = Intrinsic::find(name)
            .ok_or_else(missing)?
            .get_declaration(self.module, types)
            .ok_or_else(missing)?;
        match self
            .builder
            .build_call(decl, args, "")?
            .try_as_basic_value()
        {
            inkwell::values::ValueKind::Basic(v) => Ok(v),
            inkwell::values::ValueKind::Instruction(_) => Err(CodegenError::Llvm {
                message: format!("intrinsic {name} returned void"),
            }),
        }
    }

    fn float_intrinsic(&self, name: &str, t: DType, args: &[FloatValue<'ctx>]) -> R<Val<'ctx>> {
        let args: Vec<BasicMetadataValueEnum> = args.iter().map(|a| (*a).into()).collect();
        Ok(Val {
            v: self.intrinsic(name, &[self.llvm_type(t)], &args)?,
            t,
        })
    }

    /// Converts `v` to `to` (`Scalar::cast` semantics).
    pub(crate) fn convert(&self, v: Val<'ctx>, to: DType) -> R<Val<'ctx>> {
        let b = &self.builder;
        let ty = self.llvm_type(to);
        let out: BasicValueEnum<'ctx> = match (v.t, to) {
            (from, to) if from == to => return Ok(v),
            (from, to) if from.is_float() && to.is_float() => {
                let x = v.v.into_float_value();
                if to.size_bytes() > from.size_bytes() {
                    b.build_float_ext(x, ty.into_float_type(), "")?.into()
                } else {
                    b.build_float_trunc(x, ty.into_float_type(), "")?.into()
                }
            }
            // Saturating, NaN to zero: Rust's `as`.
            (from, to) if from.is_float() && to.is_int() => self.intrinsic(
                "llvm.fptosi.sat",
                &[ty, self.llvm_type(from)],
                &[v.v.into()],
            )?,
            (from, DType::Bool) if from.is_float() => {
                let x = v.v.into_float_value();
                b.build_float_compare(FloatPredicate::UNE, x, x.get_type().const_zero(), "")?
                    .into()
            }
            (from, to) if from.is_int() && to.is_float() => b
                .build_signed_int_to_float(v.v.into_int_value(), ty.into_float_type(), "")?
                .into(),
            (from, to) if from.is_int() && to.is_int() => {
                let x = v.v.into_int_value();
                if to.size_bytes() > from.size_bytes() {
                    b.build_int_s_extend(x, ty.into_int_type(), "")?.into()
                } else {
                    b.build_int_truncate(x, ty.into_int_type(), "")?.into()
                }
            }
            (from, DType::Bool) if from.is_int() => {
                let x = v.v.into_int_value();
                b.build_int_compare(IntPredicate::NE, x, x.get_type().const_zero(), "")?
                    .into()
            }
            (DType::Bool, to) if to.is_float() => b
                .build_unsigned_int_to_float(v.v.into_int_value(), ty.into_float_type(), "")?
                .into(),
            (DType::Bool, _) => b
                .build_int_z_extend(v.v.into_int_value(), ty.into_int_type(), "")?
                .into(),
            (from, to) => {
                return Err(CodegenError::Llvm {
                    message: format!("no conversion from {from} to {to}"),
                })
            }
        };
        Ok(Val { v: out, t: to })
    }

    /// A unary operation (`eval_unop`): `neg`/`abs` of a bool is the bool; `exp`, `log` and
    /// `sqrt` of an integer or bool compute in `f64`; `!x` tests `x` against zero.
    pub(crate) fn unary(&self, op: UnOp, a: Val<'ctx>) -> R<Val<'ctx>> {
        let b = &self.builder;
        match op {
            UnOp::Neg | UnOp::Abs if a.t == DType::Bool => Ok(a),
            UnOp::Neg if a.t.is_float() => Ok(Val {
                v: b.build_float_neg(a.v.into_float_value(), "")?.into(),
                t: a.t,
            }),
            UnOp::Neg => {
                let x = a.v.into_int_value();
                Ok(Val {
                    v: b.build_int_sub(x.get_type().const_zero(), x, "")?.into(),
                    t: a.t,
                })
            }
            UnOp::Abs if a.t.is_float() => {
                self.float_intrinsic("llvm.fabs", a.t, &[a.v.into_float_value()])
            }
            UnOp::Abs => {
                // `is_int_min_poison = false`: abs(MIN) = MIN, like `wrapping_abs`.
                let no_poison = self.ctx.bool_type().const_zero();
                Ok(Val {
                    v: self.intrinsic(
                        "llvm.abs",
                        &[self.llvm_type(a.t)],
                        &[a.v.into(), no_poison.into()],
                    )?,
                    t: a.t,
                })
            }
            UnOp::Exp | UnOp::Log | UnOp::Sqrt => {
                let a = if a.t.is_float() {
                    a
                } else {
                    self.convert(a, DType::F64)?
                };
                let name = match op {
                    UnOp::Exp => "llvm.exp",
                    UnOp::Log => "llvm.log",
                    _ => "llvm.sqrt",
                };
                self.float_intrinsic(name, a.t, &[a.v.into_float_value()])
            }
            UnOp::Not => {
                let x = self.convert(a, DType::Bool)?.v.into_int_value();
                Ok(Val {
                    v: b.build_not(x, "")?.into(),
                    t: DType::Bool,
                })
            }
        }
    }

    /// A binary operation on two operands of type `x.t` (`eval_binop`); `&&` and `||` arrive
    /// here only when already evaluated (see `Emitter::logical` for the lazy form).
    pub(crate) fn binary(&self, op: BinOp, x: Val<'ctx>, y: Val<'ctx>) -> R<Val<'ctx>> {
        let t = x.t;
        if op.is_comparison() {
            return self.compare(op, x, y);
        }
        if op.is_logical() {
            let (xb, yb) = (
                self.convert(x, DType::Bool)?.v.into_int_value(),
                self.convert(y, DType::Bool)?.v.into_int_value(),
            );
            let v = if op == BinOp::And {
                self.builder.build_and(xb, yb, "")?
            } else {
                self.builder.build_or(xb, yb, "")?
            };
            return Ok(Val {
                v: v.into(),
                t: DType::Bool,
            });
        }
        if t.is_float() {
            let (a, c) = (x.v.into_float_value(), y.v.into_float_value());
            let b = &self.builder;
            let v: FloatValue<'ctx> = match op {
                BinOp::Add => b.build_float_add(a, c, "")?,
                BinOp::Sub => b.build_float_sub(a, c, "")?,
                BinOp::Mul => b.build_float_mul(a, c, "")?,
                BinOp::Div => b.build_float_div(a, c, "")?,
                // `f64::min`/`max` ignore a NaN operand, like minnum/maxnum.
                BinOp::Min => return self.float_intrinsic("llvm.minnum", t, &[a, c]),
                BinOp::Max => return self.float_intrinsic("llvm.maxnum", t, &[a, c]),
                _ => return self.float_intrinsic("llvm.pow", t, &[a, c]),
            };
            return Ok(Val { v: v.into(), t });
        }
        if t.is_int() {
            let (a, c) = (x.v.into_int_value(), y.v.into_int_value());
            let b = &self.builder;
            let v: IntValue<'ctx> = match op {
                BinOp::Add => b.build_int_add(a, c, "")?,
                BinOp::Sub => b.build_int_sub(a, c, "")?,
                BinOp::Mul => b.build_int_mul(a, c, "")?,
                BinOp::Div => self.safe_div(a, c)?,
                BinOp::Min | BinOp::Max => {
                    let name = if op == BinOp::Min {
                        "llvm.smin"
                    } else {
                        "llvm.smax"
                    };
                    return Ok(Val {
                        v: self.intrinsic(name, &[self.llvm_type(t)], &[a.into(), c.into()])?,
                        t,
                    });
                }
                _ => return Err(CodegenError::BinaryType { op, dtype: t }),
            };
            return Ok(Val { v: v.into(), t });
        }
        Err(CodegenError::BinaryType { op, dtype: t })
    }

    /// `a / c` truncating, with `c == 0` giving 0 and `MIN / -1` giving `MIN`, without UB:
    /// the divisor is replaced by 1 in both special cases and the result fixed up.
    fn safe_div(&self, a: IntValue<'ctx>, c: IntValue<'ctx>) -> R<IntValue<'ctx>> {
        let b = &self.builder;
        let ty = a.get_type();
        let zero = ty.const_zero();
        let is_zero = b.build_int_compare(IntPredicate::EQ, c, zero, "div.zero")?;
        let is_m1 = b.build_int_compare(IntPredicate::EQ, c, ty.const_all_ones(), "div.m1")?;
        let special = b.build_or(is_zero, is_m1, "")?;
        let safe = b
            .build_select(special, ty.const_int(1, false), c, "")?
            .into_int_value();
        let q = b.build_int_signed_div(a, safe, "")?;
        let neg = b.build_int_sub(zero, a, "")?;
        let q = b.build_select(is_m1, neg, q, "")?.into_int_value();
        Ok(b.build_select(is_zero, zero, q, "div")?.into_int_value())
    }

    /// Comparisons: signed for integers, ordered for floats except `!=` (unordered), unsigned
    /// for bools (`false < true`).
    fn compare(&self, op: BinOp, x: Val<'ctx>, y: Val<'ctx>) -> R<Val<'ctx>> {
        let b = &self.builder;
        let v = if x.t.is_float() {
            let p = match op {
                BinOp::Lt => FloatPredicate::OLT,
                BinOp::Le => FloatPredicate::OLE,
                BinOp::Gt => FloatPredicate::OGT,
                BinOp::Ge => FloatPredicate::OGE,
                BinOp::Eq => FloatPredicate::OEQ,
                _ => FloatPredicate::UNE,
            };
            b.build_float_compare(p, x.v.into_float_value(), y.v.into_float_value(), "")?
        } else {
            let signed = x.t != DType::Bool;
            let p = match (op, signed) {
                (BinOp::Lt, true) => IntPredicate::SLT,
                (BinOp::Le, true) => IntPredicate::SLE,
                (BinOp::Gt, true) => IntPredicate::SGT,
                (BinOp::Ge, true) => IntPredicate::SGE,
                (BinOp::Lt, false) => IntPredicate::ULT,
                (BinOp::Le, false) => IntPredicate::ULE,
                (BinOp::Gt, false) => IntPredicate::UGT,
                (BinOp::Ge, false) => IntPredicate::UGE,
                (BinOp::Eq, _) => IntPredicate::EQ,
                _ => IntPredicate::NE,
            };
            b.build_int_compare(p, x.v.into_int_value(), y.v.into_int_value(), "")?
        };
        Ok(Val {
            v: v.into(),
            t: DType::Bool,
        })
    }
}
