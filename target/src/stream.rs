//! Streaming (non-temporal) stores on the CPU, inside a `nontemporal` annotation: the loops
//! that `lacuna_stage2::stream::stream_loop` accepts store whole vectors with `!nontemporal`
//! (x86's `vmovntpd`) where the first element starts a vector at run time.
//!
//! ```text
//! base = &b[index at v = lo]
//! if base % VB == 0 {                      VB: 64 bytes with AVX-512, 32 with AVX
//!   n/W vector stores, !nontemporal        W = VB / element bytes; each vector's lanes are
//! } else {                                 the iterations' values, computed in order
//!   the loop as written
//! }
//! ```
//!
//! Loops whose trip count is not a whole number of vectors or spans more than
//! [`STREAM_MAX_BYTES`] (the vector path is straight-line code), and stores into scratch
//! buffers, are emitted as written. A function that issued a streaming store ends with `sfence`
//! ([`Emitter::fence_streams`]): streaming stores are weakly ordered, and the fence orders
//! them before the stores that tell other threads the work is done.

use crate::emit::{set_align, Emitter, Val};
use crate::error::CodegenError;
use inkwell::types::BasicTypeEnum;
use lacuna_ir::DType;
use lacuna_stage2::{Expr, ForKind, Stmt};

type R<T> = Result<T, CodegenError>;

/// The most bytes one streamed loop stores (its vector path is unrolled in full): a row of
/// 1024 f64, four times SpMM's widest built-in feature width.
pub(crate) const STREAM_MAX_BYTES: i64 = 8192;

impl<'a> Emitter<'a, '_> {
    /// A loop of consecutive stores under `nontemporal` (see the module documentation);
    /// `Ok(false)` when it does not qualify (nothing was emitted).
    pub(crate) fn stream_loop(
        &mut self,
        var: &'a str,
        start: &'a Expr,
        end: &'a Expr,
        kind: ForKind,
        body: &'a [Stmt],
    ) -> R<bool> {
        let Some(vb) = self.hm.and_then(|h| h.stream_bytes) else {
            return Ok(false);
        };
        let Some(l) = lacuna_stage2::stream::stream_loop(var, start, end, body) else {
            return Ok(false);
        };
        if !self.gpux.globals.contains_key(l.buffer) {
            return Ok(false);
        }
        let Stmt::Store { indices, value, .. } = l.store else {
            unreachable!("stream_loop returns a store")
        };
        let Some(&(_, t)) = self.bufs.get(l.buffer) else {
            return Ok(false);
        };
        let elem = t.size_bytes() as i64;
        let lanes = i64::from(vb) / elem;
        if !matches!(t, DType::F64 | DType::F32 | DType::I64 | DType::I32)
            || lanes < 2
            || l.n % lanes != 0
            || l.n.saturating_mul(elem) > STREAM_MAX_BYTES
        {
            return Ok(false);
        }
        let lets = &body[..body.len() - 1];
        let i64t = self.ctx.i64_type();
        // The first element's address, and whether it starts a vector.
        let mark = self.env.len();
        let first = Val {
            v: i64t.const_int(l.lo as u64, true).into(),
            t: DType::I64,
        };
        self.env.push((var, first, false));
        self.stmts_in_scope(lets)?;
        let (base, _) = self.element_ptr(l.buffer, indices)?;
        self.env.truncate(mark);
        let addr = self.builder.build_ptr_to_int(base, i64t, "")?;
        let low = self
            .builder
            .build_and(addr, i64t.const_int(u64::from(vb) - 1, false), "")?;
        let aligned = self.builder.build_int_compare(
            inkwell::IntPredicate::EQ,
            low,
            i64t.const_zero(),
            "stream.aligned",
        )?;
        let vec_bb = self
            .ctx
            .append_basic_block(self.func, &format!("{var}.stream"));
        let scalar_bb = self
            .ctx
            .append_basic_block(self.func, &format!("{var}.unaligned"));
        let merge = self
            .ctx
            .append_basic_block(self.func, &format!("{var}.stream.end"));
        self.builder
            .build_conditional_branch(aligned, vec_bb, scalar_bb)?;
        // The vector path: each vector's lanes computed in order, then stored whole.
        self.builder.position_at_end(vec_bb);
        let et: BasicTypeEnum = self.llvm_type(t);
        let vty = match et {
            BasicTypeEnum::FloatType(f) => f.vec_type(lanes as u32),
            BasicTypeEnum::IntType(i) => i.vec_type(lanes as u32),
            _ => return Ok(false),
        };
        for c in 0..l.n / lanes {
            let mut vector = vty.get_undef();
            for lane in 0..lanes {
                let v = Val {
                    v: i64t
                        .const_int((l.lo + c * lanes + lane) as u64, true)
                        .into(),
                    t: DType::I64,
                };
                let mark = self.env.len();
                self.env.push((var, v, false));
                self.stmts_in_scope(lets)?;
                let x = self.expr(value)?;
                let x = self.convert(x, t)?;
                self.env.truncate(mark);
                vector = self.builder.build_insert_element(
                    vector,
                    x.v,
                    self.ctx.i32_type().const_int(lane as u64, false),
                    "",
                )?;
            }
            let offset = i64t.const_int((c * lanes) as u64, false);
            // SAFETY (of the LLVM construct): the loop as written stores these elements.
            let p = unsafe { self.builder.build_in_bounds_gep(et, base, &[offset], "") }?;
            let st = self.builder.build_store(p, vector)?;
            set_align(st, vb)?;
            let one = self.ctx.i32_type().const_int(1, false);
            let node = self.ctx.metadata_node(&[one.into()]);
            let kind_id = self.ctx.get_kind_id("nontemporal");
            st.set_metadata(node, kind_id)
                .map_err(|e| CodegenError::Llvm {
                    message: e.to_string(),
                })?;
        }
        self.streamed = true;
        self.builder.build_unconditional_branch(merge)?;
        // Not aligned: the loop as written.
        self.builder.position_at_end(scalar_bb);
        let lo = i64t.const_int(l.lo as u64, true);
        let hi = i64t.const_int((l.lo + l.n) as u64, true);
        self.for_loop(var, lo, hi, kind, false, body)?;
        self.builder.build_unconditional_branch(merge)?;
        self.builder.position_at_end(merge);
        Ok(true)
    }

    /// `sfence` before the function returns, if it issued streaming stores.
    pub(crate) fn fence_streams(&mut self) -> R<()> {
        if self.streamed {
            self.void_intrinsic("llvm.x86.sse.sfence", &[])?;
        }
        Ok(())
    }

    /// Emits `lets` (simple statements) leaving their variables in scope.
    fn stmts_in_scope(&mut self, lets: &'a [Stmt]) -> R<()> {
        for s in lets {
            self.simple_stmt(s)?;
        }
        Ok(())
    }
}
