//! Gathers assembled from scalar loads.
//!
//! LLVM's loop vectorizer turns a loop that reads `x[idx[j]]` into `llvm.masked.gather` over a
//! vector of indices loaded from `idx`, which the X86 backend emits as one gather instruction
//! (`vgatherdpd`). On AMD Zen 5 that instruction loads fewer elements per cycle than scalar
//! loads do: the loop `sum += v[j] * x[idx[j]]` with `x` in L1 takes 0.23 ns per element with
//! 8-wide gathers and 0.17 ns with each 8 elements assembled from scalar loads
//! (`scripts/gather_bound.c`'s loop, session 17). [`assemble_gathers`] rewrites the optimized
//! module accordingly: a gather of 8-byte elements whose mask is all true and whose addresses
//! are `base + idx` with `idx` one contiguous vector load becomes, per lane, a scalar load of
//! the index and one of the element, inserted into the vector (the backend's `vmovsd`,
//! `vmovhpd`, `vinsertf128`, `vinsertf64x4`). Two 32-bit indices are read with one 64-bit load
//! and split by a shift. Only the functions holding a loop annotated `scalar_gathers` are
//! rewritten: with the gathered array beyond L2 the gather instruction is the faster one (SpMV
//! on er-mid, `x` 1.6 MB: 1.25 ms with gathers, 2.06 assembled). Masked gathers (a vectorized loop's folded tail) stay gathers: their
//! lanes may be off, and an off lane's index must not be read.

use inkwell::attributes::AttributeLoc;
use inkwell::builder::Builder;
use inkwell::llvm_sys::core::{
    LLVMConstIntGetZExtValue, LLVMGetAggregateElement, LLVMGetCalledValue,
    LLVMGetGEPSourceElementType, LLVMGetValueName2, LLVMIsAConstantInt, LLVMIsInBounds,
};
use inkwell::module::Module;
use inkwell::types::{AnyTypeEnum, AsTypeRef, BasicTypeEnum, VectorType};
use inkwell::values::{
    AsValueRef, BasicValue, BasicValueEnum, FunctionValue, InstructionOpcode, InstructionValue,
    IntValue, Operand, PointerValue,
};

/// How the indices of an assembled gather are read.
enum Indices<'ctx> {
    /// 32-bit indices at `ptr`, sign- or zero-extended to 64 bits.
    Narrow {
        ptr: PointerValue<'ctx>,
        signed: bool,
    },
    /// 64-bit indices at `ptr`.
    Wide { ptr: PointerValue<'ctx> },
}

/// A gather [`assemble_gathers`] rewrites.
struct Site<'ctx> {
    call: InstructionValue<'ctx>,
    /// The vector type of the result.
    ty: VectorType<'ctx>,
    /// The scalar base address of every lane.
    base: PointerValue<'ctx>,
    inbounds: bool,
    indices: Indices<'ctx>,
    align: u32,
    /// The instructions that computed the addresses, erased when nothing else uses them.
    feeding: Vec<InstructionValue<'ctx>>,
}

/// The function attribute that marks a function whose gathers [`assemble_gathers`] rewrites:
/// set by the emitter on the function holding a loop annotated `scalar_gathers`, and by
/// [`propagate_marks`] on the functions it is inlined into.
pub(crate) const SCALAR_GATHERS: &str = "lacuna-scalar-gathers";

fn marked(f: FunctionValue<'_>) -> bool {
    f.get_string_attribute(AttributeLoc::Function, SCALAR_GATHERS)
        .is_some()
}

/// Marks every function that calls a marked one (before optimization: the loop's code is
/// inlined into its callers, the entry function and the runtime's chunk functions).
pub(crate) fn propagate_marks(module: &Module<'_>) {
    let ctx = module.get_context();
    loop {
        let mut changed = false;
        let mut f = module.get_first_function();
        while let Some(func) = f {
            f = func.get_next_function();
            if marked(func) {
                continue;
            }
            let calls_marked = func.get_basic_blocks().into_iter().any(|bb| {
                let mut i = bb.get_first_instruction();
                while let Some(inst) = i {
                    if inst.get_opcode() == InstructionOpcode::Call
                        && callee_name(inst)
                            .and_then(|n| module.get_function(&n))
                            .is_some_and(marked)
                    {
                        return true;
                    }
                    i = inst.get_next_instruction();
                }
                false
            });
            if calls_marked {
                func.add_attribute(
                    AttributeLoc::Function,
                    ctx.create_string_attribute(SCALAR_GATHERS, "true"),
                );
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
}

/// Rewrites every gather that qualifies (see the module documentation) into scalar loads, in
/// the functions of `module` marked [`SCALAR_GATHERS`] (in all of them with `everywhere`);
/// returns how many. Only for little-endian targets (two 32-bit indices are one 64-bit load,
/// low index first).
pub(crate) fn assemble_gathers(module: &Module<'_>, everywhere: bool) -> usize {
    let ctx = module.get_context();
    let builder = ctx.create_builder();
    let mut sites = Vec::new();
    let mut f = module.get_first_function();
    while let Some(func) = f {
        if !everywhere && !marked(func) {
            f = func.get_next_function();
            continue;
        }
        for bb in func.get_basic_blocks() {
            let mut i = bb.get_first_instruction();
            while let Some(inst) = i {
                if let Some(site) = site(inst) {
                    sites.push(site);
                }
                i = inst.get_next_instruction();
            }
        }
        f = func.get_next_function();
    }
    let mut done = 0;
    for site in sites {
        if rewrite(&builder, &site).is_some() {
            done += 1;
        }
    }
    done
}

/// The called function's name of a call instruction.
fn callee_name(call: InstructionValue<'_>) -> Option<String> {
    // SAFETY: `call` is a call instruction; its called operand and that value's name (owned
    // by LLVM, valid while the module lives) are read and copied at once.
    unsafe {
        let callee = LLVMGetCalledValue(call.as_value_ref());
        if callee.is_null() {
            return None;
        }
        let mut len = 0usize;
        let name = LLVMGetValueName2(callee, &mut len);
        if name.is_null() {
            return None;
        }
        let bytes = std::slice::from_raw_parts(name.cast::<u8>(), len);
        Some(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// Whether `v` is a constant vector of `lanes` ones (`true` for `i1`).
fn all_true(v: BasicValueEnum<'_>, lanes: u32) -> bool {
    let BasicValueEnum::VectorValue(mask) = v else {
        return false;
    };
    if !mask.is_const() {
        return false;
    }
    (0..lanes).all(|l| {
        // SAFETY: `mask` is a constant vector of `lanes` elements; an element that is not a
        // constant integer (poison, undef, an expression) is refused before it is read.
        unsafe {
            let e = LLVMGetAggregateElement(mask.as_value_ref(), l);
            !e.is_null() && !LLVMIsAConstantInt(e).is_null() && LLVMConstIntGetZExtValue(e) == 1
        }
    })
}

fn operand<'ctx>(inst: InstructionValue<'ctx>, i: u32) -> Option<BasicValueEnum<'ctx>> {
    match inst.get_operand(i)? {
        Operand::Value(v) => Some(v),
        Operand::Block(_) => None,
    }
}

/// The gather at `inst`, if it is one that [`assemble_gathers`] rewrites.
fn site(inst: InstructionValue<'_>) -> Option<Site<'_>> {
    if inst.get_opcode() != InstructionOpcode::Call
        || !callee_name(inst)?.starts_with("llvm.masked.gather.")
    {
        return None;
    }
    // Operands: addresses, alignment, mask, pass-through, callee.
    let AnyTypeEnum::VectorType(ty) = inst.get_type() else {
        return None;
    };
    let lanes = ty.get_size();
    let elem = ty.get_element_type();
    let eight_bytes = match elem {
        BasicTypeEnum::FloatType(t) => t == t.get_context().f64_type(),
        BasicTypeEnum::IntType(t) => t.get_bit_width() == 64,
        _ => false,
    };
    if !eight_bytes || !(2..=16).contains(&lanes) || !all_true(operand(inst, 2)?, lanes) {
        return None;
    }
    let align = match operand(inst, 1)? {
        BasicValueEnum::IntValue(a) => a.get_zero_extended_constant()? as u32,
        _ => return None,
    };
    let gep = operand(inst, 0)?.as_instruction_value()?;
    if gep.get_opcode() != InstructionOpcode::GetElementPtr || gep.get_num_operands() != 2 {
        return None;
    }
    // SAFETY: `gep` is a getelementptr instruction.
    let (source, inbounds) = unsafe {
        (
            LLVMGetGEPSourceElementType(gep.as_value_ref()),
            LLVMIsInBounds(gep.as_value_ref()) != 0,
        )
    };
    if source != elem.as_type_ref() {
        return None;
    }
    let BasicValueEnum::PointerValue(base) = operand(gep, 0)? else {
        return None;
    };
    // The lanes' indices, as 64-bit integers (a GEP sign-extends narrower ones itself).
    let BasicValueEnum::VectorValue(index_vector) = operand(gep, 1)? else {
        return None;
    };
    let wide = index_vector.get_type().get_element_type();
    if !matches!(wide, BasicTypeEnum::IntType(t) if t.get_bit_width() == 64) {
        return None;
    }
    let idx = operand(gep, 1)?.as_instruction_value()?;
    let mut feeding = vec![gep, idx];
    let indices = match idx.get_opcode() {
        InstructionOpcode::SExt | InstructionOpcode::ZExt if lanes % 2 == 0 => {
            let load = operand(idx, 0)?.as_instruction_value()?;
            let BasicValueEnum::VectorValue(narrow) = operand(idx, 0)? else {
                return None;
            };
            if load.get_opcode() != InstructionOpcode::Load
                || load.get_volatile().unwrap_or(true)
                || narrow
                    .get_type()
                    .get_element_type()
                    .into_int_type()
                    .get_bit_width()
                    != 32
            {
                return None;
            }
            feeding.push(load);
            if !unchanged_until(load, inst) {
                return None;
            }
            let BasicValueEnum::PointerValue(ptr) = operand(load, 0)? else {
                return None;
            };
            Indices::Narrow {
                ptr,
                signed: idx.get_opcode() == InstructionOpcode::SExt,
            }
        }
        InstructionOpcode::Load
            if !idx.get_volatile().unwrap_or(true) && unchanged_until(idx, inst) =>
        {
            let BasicValueEnum::PointerValue(ptr) = operand(idx, 0)? else {
                return None;
            };
            Indices::Wide { ptr }
        }
        _ => return None,
    };
    Some(Site {
        call: inst,
        ty,
        base,
        inbounds,
        indices,
        align,
        feeding,
    })
}

/// Whether memory cannot change between `load` and `gather`: both in one basic block, and
/// nothing between them stores or calls anything but the intrinsics that only read (so the
/// indices can be read again at the gather).
fn unchanged_until(load: InstructionValue<'_>, gather: InstructionValue<'_>) -> bool {
    if load.get_parent() != gather.get_parent() {
        return false;
    }
    let mut i = load.get_next_instruction();
    while let Some(inst) = i {
        if inst == gather {
            return true;
        }
        let writes = match inst.get_opcode() {
            InstructionOpcode::Store
            | InstructionOpcode::AtomicRMW
            | InstructionOpcode::AtomicCmpXchg
            | InstructionOpcode::Fence
            | InstructionOpcode::Invoke
            | InstructionOpcode::CallBr => true,
            InstructionOpcode::Call => !callee_name(inst).is_some_and(|n| {
                [
                    "llvm.masked.gather.",
                    "llvm.prefetch",
                    "llvm.fma.",
                    "llvm.fmuladd.",
                ]
                .iter()
                .any(|p| n.starts_with(p))
            }),
            _ => false,
        };
        if writes {
            return false;
        }
        i = inst.get_next_instruction();
    }
    false
}

/// Replaces `site`'s gather by scalar loads; `None` (the module unchanged but for dead
/// instructions) if the builder fails.
fn rewrite<'ctx>(b: &Builder<'ctx>, site: &Site<'ctx>) -> Option<()> {
    let ctx = site.ty.get_context();
    let i64t = ctx.i64_type();
    let i32t = ctx.i32_type();
    let elem = site.ty.get_element_type();
    b.position_before(&site.call);
    let lanes = site.ty.get_size();
    let mut idx: Vec<IntValue<'ctx>> = Vec::with_capacity(lanes as usize);
    match site.indices {
        Indices::Narrow { ptr, signed } => {
            for pair in 0..u64::from(lanes / 2) {
                // SAFETY: the gather reads `lanes` 32-bit indices from `ptr`; pair `pair` is
                // within them.
                let at = unsafe {
                    b.build_in_bounds_gep(i64t, ptr, &[i64t.const_int(pair, false)], "gx.ip")
                        .ok()?
                };
                let w = b.build_load(i64t, at, "gx.iw").ok()?;
                w.as_instruction_value()?.set_alignment(4).ok()?;
                let w = w.into_int_value();
                let low = b.build_int_truncate(w, i32t, "gx.lo32").ok()?;
                let (low, high) = if signed {
                    (
                        b.build_int_s_extend(low, i64t, "gx.lo").ok()?,
                        b.build_right_shift(w, i64t.const_int(32, false), true, "gx.hi")
                            .ok()?,
                    )
                } else {
                    (
                        b.build_int_z_extend(low, i64t, "gx.lo").ok()?,
                        b.build_right_shift(w, i64t.const_int(32, false), false, "gx.hi")
                            .ok()?,
                    )
                };
                idx.extend([low, high]);
            }
        }
        Indices::Wide { ptr } => {
            for l in 0..u64::from(lanes) {
                // SAFETY: lane `l` of the `lanes` indices the gather reads.
                let at = unsafe {
                    b.build_in_bounds_gep(i64t, ptr, &[i64t.const_int(l, false)], "gx.ip")
                        .ok()?
                };
                idx.push(b.build_load(i64t, at, "gx.i").ok()?.into_int_value());
            }
        }
    }
    let mut v = site.ty.get_poison();
    for (l, i) in idx.into_iter().enumerate() {
        // SAFETY: the gather's own address of lane `l`, `base + idx[l]` (inbounds where the
        // gather's was).
        let at = unsafe {
            if site.inbounds {
                b.build_in_bounds_gep(elem, site.base, &[i], "gx.p").ok()?
            } else {
                b.build_gep(elem, site.base, &[i], "gx.p").ok()?
            }
        };
        let x = b.build_load(elem, at, "gx.x").ok()?;
        x.as_instruction_value()?.set_alignment(site.align).ok()?;
        v = b
            .build_insert_element(v, x, i64t.const_int(l as u64, false), "gx.v")
            .ok()?;
    }
    site.call.replace_all_uses_with(&v.as_instruction()?);
    site.call.erase_from_basic_block();
    for inst in &site.feeding {
        if inst.get_first_use().is_none() {
            inst.erase_from_basic_block();
        }
    }
    Some(())
}
