//! Stage-I primitive `iso_values`: a sparse buffer whose stored values are all equal keeps one
//! of them (GraphBLAS's iso-valued matrices: a graph's adjacency, a Matrix Market `pattern`
//! file), so that the kernel loads no value per entry, only the structure.
//!
//! The kernel reads the new one-element input `A.iso` wherever it read the buffer; the run
//! fills it from the buffer's values, checked equal bit for bit (an error names the first entry
//! that differs), once per data, where `decompose_format`'s value copies run.
//!
//! On a buffer that a `decompose_format` split, every part must store exactly the buffer's
//! entries: `csr`/`remainder`, `rcm` and `panels` parts read `A.iso[0]` for their values, and a
//! `sell` part, whose groups pad their shorter rows, reads it only in the slots its rows fill:
//! `select(q < A.pT.len[g, l], A.iso[0], 0.0)`, with the new input `A.pT.len` holding each
//! lane's row length. Formats that pad or store explicit zeros (`ell`, `split_rows`, `padded`,
//! `bsr`, `dia`) are refused.
//!
//! Before, after `decompose_format(A, "(sell 8 1024)")`:
//! ```text
//! y[A.p0.row[g, l]] += A.p0[g, q, l] * x[A.p0.col[g, q, l]]
//! ```
//! After `iso_values(A)`:
//! ```text
//! y[A.p0.row[g, l]] += select(q < A.p0.len[g, l], A.iso[0], 0.0) * x[A.p0.col[g, q, l]]
//! ```

use super::decompose_format::{
    buffer_named, i64_axis, input_buffer, part_name, Conversion, PartKind,
};
use crate::decompose::{DecomposeError, Decomposition};
use crate::error::Condition;
use lacuna_ir::DType;
use lacuna_stage1::{AxisKind, BinOp, Expr, Program, Role, Size, Stmt, Store};

/// The one stored value of iso buffer `b`: a one-element input over axis `{b}.iso.k`.
pub fn iso_name(b: &str) -> String {
    format!("{b}.iso")
}

/// The row length of each lane of `sell` part `t` of iso buffer `b` (`i64[g, l]`).
pub fn lane_len_name(b: &str, t: usize) -> String {
    format!("{}.len", part_name(b, t))
}

/// The one value of `values` (0 when empty), or the first entry that differs from entry 0.
pub fn iso_value(values: &[f64]) -> Result<f64, DecomposeError> {
    let Some(&first) = values.first() else {
        return Ok(0.0);
    };
    match values.iter().position(|v| v.to_bits() != first.to_bits()) {
        None => Ok(first),
        Some(position) => Err(DecomposeError::NotIso {
            position,
            value: values[position],
            first,
        }),
    }
}

/// How an iso part reads its value.
enum Read {
    /// Every slot holds an entry.
    Plain,
    /// A `sell` part: slot `[g, q, l]` holds one while `q` is below lane `l`'s row length.
    Lanes(String),
}

/// Applies `iso_values` to `buffer` of `p`; `conv` is the conversion of the `decompose_format`
/// that split it, if one did. Returns the program and the buffer's conversion, now iso.
pub fn iso_values(
    mut p: Program,
    buffer: &str,
    conv: Option<&Conversion>,
) -> Result<(Program, Conversion), Condition> {
    let bad = |what: String| Condition::BadArgument { what };
    let buf = buffer_named(&p, buffer)?;
    if buf.role != Role::Input || buf.dtype != DType::F64 {
        return Err(bad(format!(
            "`{buffer}` must be an f64 input (its values are checked equal when bound)"
        )));
    }
    // The loads to replace, each with how it reads the one value.
    let mut reads: Vec<(String, Read)> = Vec::new();
    let conversion = match conv {
        Some(c) if c.iso => {
            return Err(bad(format!("`{buffer}` already stores one value")));
        }
        Some(c) if c.per_relation => {
            return Err(bad(format!(
                "`{buffer}` is decomposed per relation, whose parts are built with their values"
            )));
        }
        Some(c) => {
            for (t, kind) in c.parts.iter().enumerate() {
                let pn = part_name(buffer, t);
                let read = match kind {
                    PartKind::Csr | PartKind::Rows { .. } | PartKind::Panels { .. } => Read::Plain,
                    PartKind::Sell { .. } => Read::Lanes(lane_len_name(buffer, t)),
                    PartKind::Ell | PartKind::Padded | PartKind::Bsr(_) | PartKind::Dia { .. } => {
                        return Err(bad(format!(
                            "part {t} of `{buffer}` ({kind:?}) pads rows or stores explicit zeros, which one stored value would count as entries; iso_values takes csr, remainder, rcm, panels and sell parts"
                        )));
                    }
                };
                if let Read::Lanes(len) = &read {
                    let part = buffer_named(&p, &pn)?;
                    let [g, _, l] = &part.axes[..] else {
                        return Err(Condition::Invalid(format!(
                            "sell part `{pn}` has axes {:?}, not [group, step, lane]",
                            part.axes
                        )));
                    };
                    p.buffers.push(input_buffer(
                        len.clone(),
                        vec![g.clone(), l.clone()],
                        DType::I64,
                    ));
                }
                reads.push((pn, read));
            }
            let names: Vec<&String> = reads.iter().map(|(n, _)| n).collect();
            p.buffers.retain(|b| !names.contains(&&b.name));
            Conversion {
                iso: true,
                ..c.clone()
            }
        }
        None => {
            reads.push((buffer.to_string(), Read::Plain));
            Conversion {
                buffer: buffer.to_string(),
                decomposition: Decomposition::csr(),
                parts: vec![],
                per_relation: false,
                iso: true,
            }
        }
    };
    let iso = iso_name(buffer);
    let axis = format!("{iso}.k");
    for name in [&iso, &axis] {
        if p.buffer(name).is_some() || p.axis(name).is_some() {
            return Err(bad(format!("the program already declares `{name}`")));
        }
    }
    p.axes.push(i64_axis(
        axis.clone(),
        AxisKind::DenseFixed { n: Size::Const(1) },
        true,
    ));
    p.buffers
        .push(input_buffer(iso.clone(), vec![axis], DType::F64));
    let mut replaced = 0usize;
    let body = std::mem::take(&mut p.body);
    p.body = map_stmts(&body, &mut |e| replace(e, &reads, &iso, &mut replaced));
    if replaced == 0 {
        return Err(bad(format!("no iteration reads `{buffer}`'s values")));
    }
    Ok((p, conversion))
}

fn map_stmts(stmts: &[Stmt], f: &mut dyn FnMut(&Expr) -> Expr) -> Vec<Stmt> {
    stmts
        .iter()
        .map(|s| match s {
            Stmt::Store(x) => Stmt::Store(Store {
                buffer: x.buffer.clone(),
                indices: x.indices.iter().map(&mut *f).collect(),
                value: f(&x.value),
            }),
            Stmt::Iter(it) => {
                let mut it = it.clone();
                it.init = map_stmts(&it.init, f);
                it.body = map_stmts(&it.body, f);
                Stmt::Iter(it)
            }
        })
        .collect()
}

/// `e` with every load of a buffer of `reads` replaced by the one value `iso[0]`.
fn replace(e: &Expr, reads: &[(String, Read)], iso: &str, replaced: &mut usize) -> Expr {
    let mapped = e.map_children(&mut |x| replace(x, reads, iso, replaced));
    match &mapped {
        Expr::Load { buffer, indices } => match reads.iter().find(|(n, _)| n == buffer) {
            Some((_, read)) => {
                *replaced += 1;
                one_value(read, indices, iso)
            }
            None => mapped,
        },
        _ => mapped,
    }
}

/// What replaces a load at `indices` of a part read as `read`.
fn one_value(read: &Read, indices: &[Expr], iso: &str) -> Expr {
    let value = Expr::Load {
        buffer: iso.to_string(),
        indices: vec![Expr::Int(0)],
    };
    match (read, indices) {
        (Read::Lanes(len), [g, q, l]) => Expr::Select(
            Box::new(Expr::Binary(
                BinOp::Lt,
                Box::new(q.clone()),
                Box::new(Expr::Load {
                    buffer: len.clone(),
                    indices: vec![g.clone(), l.clone()],
                }),
            )),
            Box::new(value),
            Box::new(Expr::Float(0.0)),
        ),
        _ => value,
    }
}
