//! The lowering pipeline from stage I to flat loops, one line per pass.

use crate::ir::{Expr, Func, Stmt};
use crate::passes::{
    build_loop_nests::build_loop_nests, hoist_invariant_lets::hoist_invariant_lets,
    lower_sparse_buffer::lower_sparse_buffer, materialize_index_buffers::materialize_index_buffers,
    partition_loops::partition_loops, place_init_blocks::place_init_blocks, simplify::simplify,
    specialize_index_buffers::specialize_index_buffers,
    translate_coordinates::translate_coordinates, version_ranges::version_ranges,
};
use crate::LowerError;
use lacuna_stage1::{sparsify, verify, Program};

/// Options of the pipeline.
#[derive(Clone, Debug)]
pub struct Config {
    /// Run the simplifier on the flat program, and version loops on their range guards
    /// (`version_ranges`).
    pub simplify: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config { simplify: true }
    }
}

/// The products of lowering.
#[derive(Clone, Debug, PartialEq)]
pub struct Lowered {
    /// Stage II: loops and blocks over buffers in position space.
    pub stage2: Func,
    /// Flat: 1-D buffers, ready for code generation.
    pub flat: Func,
}

/// Lowers a stage-I program; `after_pass(name, func)` sees the function after each pass.
pub fn lower(
    p: &Program,
    cfg: &Config,
    after_pass: &mut dyn FnMut(&str, &Func),
) -> Result<Lowered, LowerError> {
    let stage2 = lower_to_stage2(p, after_pass)?;
    let flat = lower_to_flat(stage2.clone(), cfg, after_pass)?;
    Ok(Lowered { stage2, flat })
}

/// The first half of [`lower`]: stage I to stage II (where stage-II schedules apply).
pub fn lower_to_stage2(
    p: &Program,
    after_pass: &mut dyn FnMut(&str, &Func),
) -> Result<Func, LowerError> {
    verify(p)?;
    if crate::coiter::is_coiteration(p) {
        // Sharing one structure among its encoded buffers would be wrong here.
        return Err(LowerError::Coiteration {
            kernel: p.name.clone(),
        });
    }
    // Encoded buffers become level axes; a program without encodings is unchanged.
    let sparse = sparsify(p)?;
    verify(&sparse)?;
    let p = &sparse;
    let f = materialize_index_buffers(p);
    after_pass("materialize_index_buffers", &f);
    let f = build_loop_nests(p, f)?;
    after_pass("build_loop_nests", &f);
    let f = place_init_blocks(f)?;
    after_pass("place_init_blocks", &f);
    let stage2 = translate_coordinates(p, f)?;
    after_pass("translate_coordinates", &stage2);
    let stage2 = if p.axes.iter().any(|a| !a.closed_forms.is_empty()) {
        let f = specialize_index_buffers(p, stage2);
        after_pass("specialize_index_buffers", &f);
        f
    } else {
        stage2
    };
    Ok(stage2)
}

/// The second half of [`lower`]: stage II to flat loops, ready for code generation.
pub fn lower_to_flat(
    stage2: Func,
    cfg: &Config,
    after_pass: &mut dyn FnMut(&str, &Func),
) -> Result<Func, LowerError> {
    let flat = lower_sparse_buffer(stage2)?;
    after_pass("lower_sparse_buffer", &flat);
    let flat = partition_loops(flat);
    after_pass("partition_loops", &flat);
    let flat = if cfg.simplify { simplify(flat) } else { flat };
    if cfg.simplify {
        after_pass("simplify", &flat);
    }
    let flat = hoist_invariant_lets(flat);
    after_pass("hoist_invariant_lets", &flat);
    let flat = if cfg.simplify {
        let flat = version_ranges(flat);
        after_pass("version_ranges", &flat);
        flat
    } else {
        flat
    };
    verify_flat(&flat)?;
    Ok(flat)
}

/// Checks that a function is flat: 1-D buffers, one index per access, no coordinates or init.
pub fn verify_flat(f: &Func) -> Result<(), LowerError> {
    if let Some(b) = f.buffers.iter().find(|b| !b.layout.is_empty()) {
        return Err(LowerError::NotFlat {
            what: format!("buffer `{}` still has axes", b.name),
        });
    }
    fn expr(e: &Expr) -> Result<(), LowerError> {
        match e {
            Expr::Coord(v) => Err(LowerError::NotFlat {
                what: format!("coordinate @{v}"),
            }),
            Expr::Load { buffer, indices } if indices.len() != 1 => Err(LowerError::NotFlat {
                what: format!("load of `{buffer}` with {} indices", indices.len()),
            }),
            Expr::Load { indices, .. } => indices.iter().try_for_each(expr),
            Expr::Unary(_, a) | Expr::Cast(_, a) => expr(a),
            Expr::Binary(_, a, b) => expr(a).and(expr(b)),
            Expr::Select(c, a, b) => expr(c).and(expr(a)).and(expr(b)),
            Expr::Search { lo, hi, value, .. } | Expr::Segment { lo, hi, value, .. } => {
                expr(lo).and(expr(hi)).and(expr(value))
            }
            Expr::Shuffle { value, lane, .. } => expr(value).and(expr(lane)),
            Expr::Int(..) | Expr::Float(..) | Expr::Bool(_) | Expr::Var(_) | Expr::Param(_) => {
                Ok(())
            }
        }
    }
    fn stmts(v: &[Stmt]) -> Result<(), LowerError> {
        for s in v {
            match s {
                Stmt::For {
                    start, end, body, ..
                } => {
                    expr(start)?;
                    expr(end)?;
                    stmts(body)?;
                }
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    expr(cond)?;
                    stmts(then_body)?;
                    stmts(else_body)?;
                }
                Stmt::Let { value, .. } | Stmt::Assign { value, .. } => expr(value)?,
                Stmt::Decl { init, .. } => expr(init)?,
                Stmt::While { cond, body } => {
                    expr(cond)?;
                    stmts(body)?;
                }
                Stmt::Store {
                    buffer,
                    indices,
                    value,
                } => {
                    if indices.len() != 1 {
                        return Err(LowerError::NotFlat {
                            what: format!("store to `{buffer}` with {} indices", indices.len()),
                        });
                    }
                    expr(&indices[0])?;
                    expr(value)?;
                }
                Stmt::Atomic {
                    buffer,
                    indices,
                    value,
                    ..
                } => {
                    if indices.len() != 1 {
                        return Err(LowerError::NotFlat {
                            what: format!("atomic on `{buffer}` with {} indices", indices.len()),
                        });
                    }
                    expr(&indices[0])?;
                    expr(value)?;
                }
                Stmt::Alloc { extent, .. } => expr(extent)?,
                Stmt::Barrier => {}
                Stmt::Attr { value, body, .. } => {
                    expr(value)?;
                    stmts(body)?;
                }
                Stmt::Block {
                    name, init, body, ..
                } => {
                    if !init.is_empty() {
                        return Err(LowerError::NotFlat {
                            what: format!("block `{name}` has init"),
                        });
                    }
                    stmts(body)?;
                }
            }
        }
        Ok(())
    }
    stmts(&f.body)
}
