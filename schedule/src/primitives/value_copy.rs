//! The generated half of a `decompose_format` conversion: a stage-II function that copies the
//! values of the decomposed buffer into its parts (SparseTIR's `preprocess` iteration
//! `A_s[new] = A[inv_idx_map(new)]`).
//!
//! The inspector ([`convert_structure`](super::decompose_format::convert_structure)) builds each
//! part's structure in Rust, with a source map `A.pT.src`: for every value slot of part `T`,
//! the position of its entry in `A`'s CSR storage, or -1 for padding. The generated function
//! reads only that map, so it runs again unchanged when `A`'s values (not its pattern) change.
//!
//! For `decompose_format(A, "(+ (bucket 1 3 (ell 2)) remainder)")`:
//! ```text
//! func A_values(A.p0.rows, A.p0.w, A.p1.nnz) {
//!   in A: f64[]
//!   in A.p0.src: i64[]
//!   out A.p0: f64[]
//!   ...
//!   parallel for q0 in 0..A.p0.rows * A.p0.w {
//!     let k0 = A.p0.src[q0]
//!     A.p0[q0] = select(k0 >= 0, A[max(k0, 0)], 0.0)
//!   }
//!   parallel for q1 in 0..A.p1.nnz { ... }
//! }
//! ```

use super::decompose_format::{part_name, source_name, Conversion, PartKind};
use lacuna_ir::DType;
use lacuna_stage1::{BinOp, Role};
use lacuna_stage2::{BufferDecl, BufferKind, Expr, ForKind, Func, Stmt};

/// The number of value slots of part `pn` of kind `kind`, as an `i64` expression over the
/// parameters the inspector binds.
fn slots(pn: &str, kind: PartKind) -> Expr {
    let param = |s: &str| Box::new(Expr::Param(format!("{pn}.{s}")));
    match kind {
        PartKind::Ell => Expr::Binary(BinOp::Mul, param("rows"), param("w")),
        PartKind::Sell { lanes, .. } => Expr::Binary(
            BinOp::Mul,
            param("steps"),
            Box::new(Expr::Int(
                i64::try_from(lanes).unwrap_or(i64::MAX),
                DType::I64,
            )),
        ),
        PartKind::Dia { lanes } => Expr::Binary(
            BinOp::Mul,
            Box::new(Expr::Binary(
                BinOp::Mul,
                param("blocks"),
                param("diagonals"),
            )),
            Box::new(Expr::Int(
                i64::try_from(lanes).unwrap_or(i64::MAX),
                DType::I64,
            )),
        ),
        PartKind::Csr | PartKind::Padded | PartKind::Panels { .. } | PartKind::Rows { .. } => {
            Expr::Param(format!("{pn}.nnz"))
        }
        PartKind::Bsr(b) => Expr::Binary(
            BinOp::Mul,
            param("nnzb"),
            Box::new(Expr::Int(
                i64::try_from(b.saturating_mul(b)).unwrap_or(i64::MAX),
                DType::I64,
            )),
        ),
    }
}

/// The parameters `slots` reads.
fn slot_params(pn: &str, kind: PartKind) -> Vec<String> {
    let names: &[&str] = match kind {
        PartKind::Ell => &["rows", "w"],
        PartKind::Csr | PartKind::Padded | PartKind::Panels { .. } | PartKind::Rows { .. } => {
            &["nnz"]
        }
        PartKind::Bsr(_) => &["nnzb"],
        PartKind::Sell { .. } => &["steps"],
        PartKind::Dia { .. } => &["blocks", "diagonals"],
    };
    names.iter().map(|s| format!("{pn}.{s}")).collect()
}

fn flat(name: String, dtype: DType, role: Role) -> BufferDecl {
    BufferDecl {
        name,
        dtype,
        layout: vec![],
        kind: BufferKind::Values(role),
    }
}

/// One part's slice of the value copy of a conversion: the copy reads `source[q]` and writes
/// `part[q]` for every `q < slots`, and reads the decomposed buffer at every non-negative
/// `source[q]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyExtent {
    /// The part's source map (`A.pT.src`).
    pub source: String,
    /// The part's values (`A.pT`).
    pub part: String,
    /// Its number of value slots from the bound parameters; `None` where one is unbound or the
    /// product overflows.
    pub slots: Option<usize>,
}

/// What the value copy of `conv` reads and writes, for the parameters `params` (those the
/// inspector bound): one [`CopyExtent`] per part, in order. Empty for a `per_relation` or iso
/// conversion, which has no generated copy. The driver checks bindings against these before running a
/// compiled copy, which does no bounds checks.
pub fn value_copy_extents(
    conv: &Conversion,
    params: &std::collections::BTreeMap<String, i64>,
) -> Vec<CopyExtent> {
    fn eval(e: &Expr, params: &std::collections::BTreeMap<String, i64>) -> Option<i64> {
        match e {
            Expr::Param(p) => params.get(p).copied(),
            Expr::Int(v, _) => Some(*v),
            Expr::Binary(BinOp::Mul, a, b) => eval(a, params)?.checked_mul(eval(b, params)?),
            _ => None,
        }
    }
    if conv.per_relation || conv.iso {
        return vec![];
    }
    conv.parts
        .iter()
        .enumerate()
        .map(|(t, &kind)| {
            let part = part_name(&conv.buffer, t);
            let slots = eval(&slots(&part, kind), params).and_then(|n| usize::try_from(n).ok());
            CopyExtent {
                source: source_name(&conv.buffer, t),
                part,
                slots,
            }
        })
        .collect()
}

/// The value copy of a conversion, generated from its parts' kinds: for every part `A.pT`, one
/// parallel loop over its value slots `q` storing `select(src[q] >= 0, A[max(src[q], 0)], 0.0)`,
/// with `src` the part's source map. The function is flat (1-D buffers), ready for the JIT or
/// the stage-II interpreter; it reads `A`'s values as bound for the decomposed program (CSR
/// order) and writes the parts' values.
///
/// `None` for a `per_relation` conversion, whose parts are still built with their values, and
/// for an iso one (`iso_values`), whose parts hold no values.
pub fn value_copy_func(conv: &Conversion) -> Option<Func> {
    if conv.per_relation || conv.iso {
        return None;
    }
    let a = &conv.buffer;
    let mut params = Vec::new();
    let mut buffers = vec![flat(a.clone(), DType::F64, Role::Input)];
    let mut body = Vec::new();
    for (t, &kind) in conv.parts.iter().enumerate() {
        let pn = part_name(a, t);
        let src = source_name(a, t);
        params.extend(slot_params(&pn, kind));
        buffers.push(flat(src.clone(), DType::I64, Role::Input));
        buffers.push(flat(pn.clone(), DType::F64, Role::Output));
        let (q, k) = (format!("q{t}"), format!("k{t}"));
        let zero = || Box::new(Expr::Int(0, DType::I64));
        let value = Expr::Select(
            Box::new(Expr::Binary(
                BinOp::Ge,
                Box::new(Expr::Var(k.clone())),
                zero(),
            )),
            Box::new(Expr::Load {
                buffer: a.clone(),
                indices: vec![Expr::Binary(
                    BinOp::Max,
                    Box::new(Expr::Var(k.clone())),
                    zero(),
                )],
            }),
            Box::new(Expr::Float(0.0, DType::F64)),
        );
        body.push(Stmt::For {
            var: q.clone(),
            start: Expr::Int(0, DType::I64),
            end: slots(&pn, kind),
            kind: ForKind::Parallel,
            body: vec![
                Stmt::Let {
                    var: k,
                    value: Expr::Load {
                        buffer: src,
                        indices: vec![Expr::Var(q.clone())],
                    },
                },
                Stmt::Store {
                    buffer: pn,
                    indices: vec![Expr::Var(q)],
                    value,
                },
            ],
        });
    }
    Some(Func {
        name: format!("{a}_values"),
        params,
        axes: vec![],
        buffers,
        body,
        scratch: vec![],
    })
}
