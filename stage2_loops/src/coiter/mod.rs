//! Co-iteration: several sparse operands merged per index variable, results whose pattern the
//! kernel computes (TACO's merge lattices and assembly, MLIR's sparsifier semantics).
//!
//! [`CoKernel::new`] reads the kernel's index notation ([`notation`]), plans the iteration
//! order and the result's assembly ([`lower::plan`]) and generates a *count* and a *compute*
//! function ([`lower::generate`]) from the merge lattices ([`lattice`]). Both are ordinary flat
//! stage-II functions: the stage-II interpreter runs them, and so does the LLVM backend.
//! [`CoKernel::bind`] converts the inputs into the planned storage, [`CoKernel::run`] runs the
//! passes (sizing the result between them), [`CoKernel::output`] reads the result back, and
//! [`CoKernel::reference`] computes it independently, point by point over the whole iteration
//! space with the same presence semantics (`+`, `-`: either operand; every other operation:
//! both), as the stage-I interpreter of these kernels.

pub mod lattice;
pub mod lower;
pub mod notation;

pub use lattice::{Lattice, Point};
pub use lower::{row_range_params, OutMode, Pass, Plan};
pub use notation::{analyze, is_coiteration, Assignment, TExpr, TRegion};

use crate::ir::Func;
use lacuna_ir::storage::{IndexArray, SparseTensor};
use lacuna_ir::{ArrayData, CooTensor, DType, DenseArray, Scalar};
use lacuna_stage1::{eval_binop, eval_unop, size_value, Bindings, Input, Output, Program, Size};
use notation::VKind;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

/// A co-iteration kernel that cannot be compiled or run.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CoiterError {
    /// A construct outside what co-iteration compiles.
    #[error("co-iteration: {what}")]
    Unsupported {
        /// What.
        what: String,
    },
    /// No iteration order respects the level order of every operand.
    #[error("co-iteration: no iteration order respects the level orders of {operands}; store one operand in another order, or allow a transposed copy with `coiteration: Some((transpose: true))`")]
    InconsistentLevelOrder {
        /// The operands with their level orders.
        operands: String,
    },
    /// Galloping asked for where the lattice is not a pure intersection.
    #[error("co-iteration: galloping merges only pure intersections, but the lattice of `{var}` is a union (or covers the dense range)")]
    GallopingUnion {
        /// The index variable.
        var: String,
    },
    /// An input is missing, of the wrong shape or type, or not convertible.
    #[error("input `{buffer}`: {what}")]
    Input {
        /// The buffer.
        buffer: String,
        /// What is wrong.
        what: String,
    },
    /// A pass failed to run.
    #[error("co-iteration pass `{pass}`: {what}")]
    Run {
        /// The function.
        pass: String,
        /// What happened.
        what: String,
    },
}

/// A compiled co-iteration kernel: its notation, plan and functions.
#[derive(Clone, Debug, PartialEq)]
pub struct CoKernel {
    /// The index notation.
    pub assignment: Assignment,
    /// Order, storage and result mode.
    pub plan: Plan,
    /// The count pass (sparse results only).
    pub count: Option<Func>,
    /// The compute pass.
    pub compute: Func,
    /// The compute pass writing the result's positions too, run alone on one thread
    /// ([`lower::generate_one_pass`], [`CoKernel::run_one_pass`]).
    pub one_pass: Option<Func>,
}

const REFERENCE_LIMIT: u128 = 200_000_000;

/// How the operands of a co-iteration kernel's one-pass function merge
/// ([`CoKernel::merge_sample`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MergeSample {
    /// Stored entries of the operands, over all rows.
    pub entries: i64,
    /// Over the sampled rows, the share of merged coordinates held by another set of operands
    /// than the coordinate before them in the row: 0 when the operands store the same pattern
    /// (or when the sample was skipped), near 1 when they alternate entry by entry. A merge
    /// branches on it, so it measures how often the branch changes direction.
    pub switches: f64,
}

/// A chunk of rows of a one-pass run ([`CoKernel::prepare_one_pass_chunks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowChunk {
    /// First row.
    pub lo: i64,
    /// One past the last row.
    pub hi: i64,
    /// The first result slot the chunk appends at.
    pub q0: i64,
}

impl CoKernel {
    /// Analyzes and lowers a co-iteration kernel, with 64-bit indices.
    pub fn new(p: &Program) -> Result<CoKernel, CoiterError> {
        let assignment = analyze(p)?;
        let plan = lower::plan(&assignment)?;
        Self::lowered(assignment, plan)
    }

    /// The kernel lowered again with `index` (`I32` or `I64`) as [`Plan::index`]; its
    /// [`CoKernel::bind`] then refuses data whose indices do not fit.
    pub fn with_index(&self, index: DType) -> Result<CoKernel, CoiterError> {
        if !matches!(index, DType::I32 | DType::I64) {
            return Err(CoiterError::Unsupported {
                what: format!("{index} indices (only i32 and i64)"),
            });
        }
        self.relowered(|plan| plan.index = index)
    }

    /// The kernel lowered again with [`Plan::equal_segments`] set to `on`: without them, rows
    /// whose operands hold the same coordinates go through the merge loops like any other.
    pub fn with_equal_segments(&self, on: bool) -> Result<CoKernel, CoiterError> {
        self.relowered(|plan| plan.equal_segments = on)
    }

    /// The kernel lowered again with [`Plan::row_blocks`] set to `on`: without them, the
    /// one-pass function goes row by row.
    pub fn with_row_blocks(&self, on: bool) -> Result<CoKernel, CoiterError> {
        self.relowered(|plan| plan.row_blocks = on)
    }

    /// The kernel lowered again with its plan changed by `edit`.
    fn relowered(&self, edit: impl FnOnce(&mut Plan)) -> Result<CoKernel, CoiterError> {
        let mut plan = self.plan.clone();
        edit(&mut plan);
        Self::lowered(self.assignment.clone(), plan)
    }

    /// The same kernel with 32-bit indices ([`Plan::index`]), with `b`'s index arrays
    /// converted to them, when every operand position and coordinate bound in `b` and every
    /// coordinate the result can hold fit in `i32`; `Ok(None)`, with `b` unchanged, when one
    /// does not or the kernel is already narrow. `b` comes from [`CoKernel::bind`] of `self`.
    pub fn narrowed(&self, b: &mut Bindings) -> Result<Option<CoKernel>, CoiterError> {
        if self.plan.index != DType::I64 {
            return Ok(None);
        }
        let narrow = self.with_index(DType::I32)?;
        Ok(self.narrow_bindings(&narrow, b).then_some(narrow))
    }

    /// Converts `b` (bound for `self`) for `narrow`, the same kernel with 32-bit indices
    /// ([`CoKernel::with_index`], lowered once for many runs), when every index array `narrow`
    /// takes narrower and every coordinate the result can hold fit in `i32`; returns whether it
    /// did (`b` is unchanged otherwise).
    pub fn narrow_bindings(&self, narrow: &CoKernel, b: &mut Bindings) -> bool {
        let out = self.assignment.output();
        let fits = |v: i64| (0..=i32::MAX as i64).contains(&v);
        if narrow.assignment != self.assignment || !self.result_extents_fit_i32(b) {
            return false;
        }
        let wide = lower::buffers(&self.assignment, &self.plan, Pass::Compute);
        let thin = lower::buffers(&narrow.assignment, &narrow.plan, Pass::Compute);
        let result_prefix = format!("{}.", out.name);
        let inputs: Vec<&str> = wide
            .iter()
            .zip(&thin)
            .filter(|(w, t)| w.dtype != t.dtype && b.buffers.contains_key(&t.name))
            .filter(|(_, t)| !t.name.starts_with(&result_prefix))
            .map(|(_, t)| t.name.as_str())
            .collect();
        let all_fit = inputs.iter().all(|name| match &b.buffers[*name] {
            ArrayData::I64(v) => v.iter().all(|&x| fits(x)),
            ArrayData::I32(v) => v.iter().all(|&x| x >= 0),
            _ => false,
        });
        if !all_fit {
            return false;
        }
        for name in inputs {
            if let Some(a) = b.buffers.get_mut(name) {
                *a = a.cast(DType::I32);
            }
        }
        true
    }

    /// Binds `inputs` for `narrow`, this kernel with 32-bit indices
    /// ([`CoKernel::with_index`]), converting the operands' indices straight to 32 bits
    /// (without the 64-bit copies of [`CoKernel::bind`] followed by
    /// [`CoKernel::narrow_bindings`]). `None` where `narrow` is not that kernel, where an
    /// operand's index or a size of the result does not fit `i32`, or where binding fails
    /// (binding for `self` then says why).
    pub fn bind_narrow(
        &self,
        narrow: &CoKernel,
        inputs: &BTreeMap<String, Input>,
        params: &BTreeMap<String, i64>,
    ) -> Option<Bindings> {
        if narrow.assignment != self.assignment || narrow.plan.index != DType::I32 {
            return None;
        }
        // Its binding refuses an index or a result extent past `i32`.
        narrow.bind(inputs, params).ok()
    }

    /// [`CoKernel::bind_narrow`] of inputs handed over ([`CoKernel::bind_owned`]), decided
    /// before binding since the inputs are spent: `Err` with them back where `narrow` is not
    /// this kernel with 32-bit indices or where their sizes leave room for an index past
    /// `i32` (a size or a parameter above 2^30, or an input of more than 2^30 entries; the
    /// positions a level stores count its entries, its coordinates stay below its size).
    #[allow(clippy::result_large_err)]
    pub fn bind_narrow_owned(
        &self,
        narrow: &CoKernel,
        inputs: BTreeMap<String, Input>,
        params: &BTreeMap<String, i64>,
    ) -> Result<Result<Bindings, CoiterError>, BTreeMap<String, Input>> {
        const ROOM: usize = 1 << 30;
        let small = params.values().all(|&v| (0..=ROOM as i64).contains(&v))
            && inputs
                .values()
                .all(|i| i.stored_len() <= ROOM && i.shape().iter().all(|&e| e <= ROOM))
            && self.assignment.output().extents.iter().all(|s| match s {
                Size::Const(c) => *c <= ROOM as u64,
                Size::Param(_) => true,
            });
        if narrow.assignment != self.assignment || narrow.plan.index != DType::I32 || !small {
            return Err(inputs);
        }
        Ok(narrow.bind_owned(inputs, params))
    }

    /// Whether every coordinate the result can hold fits in `i32`.
    fn result_extents_fit_i32(&self, b: &Bindings) -> bool {
        let fits = |v: i64| (0..=i32::MAX as i64).contains(&v);
        self.assignment
            .output()
            .extents
            .iter()
            .all(|s| size_value(s, &b.params).is_some_and(fits))
    }

    fn lowered(assignment: Assignment, plan: Plan) -> Result<CoKernel, CoiterError> {
        let count = (plan.mode != OutMode::Dense)
            .then(|| lower::generate(&assignment, &plan, Pass::Count))
            .transpose()?;
        let compute = lower::generate(&assignment, &plan, Pass::Compute)?;
        let one_pass = lower::generate_one_pass(&assignment, &plan)?;
        Ok(CoKernel {
            assignment,
            plan,
            count,
            compute,
            one_pass,
        })
    }

    /// The merge lattice of every index variable at the top of the expression, in iteration
    /// order: `i: [A B] (A + B)` lines.
    pub fn lattices(&self) -> String {
        let a = &self.assignment;
        let tensors: Vec<String> = a.tensors.iter().map(|t| t.name.clone()).collect();
        let vars: Vec<String> = a.vars.iter().map(|v| v.name.clone()).collect();
        let mut out = String::new();
        for &v in &self.plan.order {
            let sparse = |t: usize| t != a.out && lower::sparse_at(a, &self.plan.levels, t, v);
            let l = lattice::build(&a.rhs, &sparse);
            for line in l.render(&tensors, &vars).lines() {
                out.push_str(&format!("{}: {line}\n", vars[v]));
            }
        }
        out
    }

    /// Binds parameters from the inputs' shapes, converts the inputs into the planned storage
    /// and allocates the result.
    pub fn bind(
        &self,
        inputs: &BTreeMap<String, Input>,
        params: &BTreeMap<String, i64>,
    ) -> Result<Bindings, CoiterError> {
        self.bind_from(Source::Borrowed(inputs), params)
    }

    /// [`CoKernel::bind`] of inputs handed over: the arrays of a [`Input::Sparse`] stored as
    /// the kernel reads it (its encoding's layout, indices of the kernel's width, values of
    /// its element type) move into the bindings instead of being copied.
    pub fn bind_owned(
        &self,
        inputs: BTreeMap<String, Input>,
        params: &BTreeMap<String, i64>,
    ) -> Result<Bindings, CoiterError> {
        self.bind_from(Source::Owned(inputs), params)
    }

    fn bind_from(
        &self,
        mut inputs: Source<'_>,
        params: &BTreeMap<String, i64>,
    ) -> Result<Bindings, CoiterError> {
        let a = &self.assignment;
        let mut b = Bindings {
            params: params.clone(),
            ..Bindings::default()
        };
        for (t, tensor) in a.tensors.iter().enumerate() {
            if t == a.out {
                continue;
            }
            let bad = |what: String| CoiterError::Input {
                buffer: tensor.name.clone(),
                what,
            };
            let last_use = !a.tensors[t + 1..].iter().any(|x| x.name == tensor.name);
            let input = inputs
                .take(&tensor.name, last_use)
                .ok_or_else(|| bad("not given".into()))?;
            let shape = input.shape().to_vec();
            if shape.len() != tensor.extents.len() {
                return Err(bad(format!(
                    "has {} dimensions, the kernel expects {}",
                    shape.len(),
                    tensor.extents.len()
                )));
            }
            for (d, (ext, &have)) in tensor.extents.iter().zip(&shape).enumerate() {
                match ext {
                    Size::Const(c) if *c as usize != have => {
                        return Err(bad(format!("dimension {d} is {have}, expected {c}")))
                    }
                    Size::Const(_) => {}
                    Size::Param(p) => match b.params.get(p) {
                        Some(&v) if v as usize != have => {
                            return Err(bad(format!(
                                "dimension {d} is {have}, but `{p}` is {v} from another input"
                            )))
                        }
                        Some(_) => {}
                        None => {
                            b.params.insert(p.clone(), have as i64);
                        }
                    },
                }
            }
            match &self.plan.encodings[t] {
                None => {
                    let dense = input.dense(&tensor.name).map_err(|e| bad(e.to_string()))?;
                    let data = checked_cast(&dense.data, tensor.dtype).map_err(bad)?;
                    b.buffers.insert(tensor.name.clone(), data);
                }
                Some(enc) => {
                    let st = if self.plan.unblocked[t] {
                        // Through the operand's own blocked storage, whose stored entries
                        // (the blocks' explicit zeros and padding included) the copy keeps.
                        let blocked = tensor.encoding.as_ref().expect("encoded operand");
                        let mut entries = stored_in(&input, blocked)
                            .map_err(|e| bad(e.to_string()))?
                            .to_coo();
                        entries.sort_and_sum_duplicates();
                        Cow::Owned(
                            SparseTensor::from_coo(&entries, enc)
                                .map_err(|e| bad(e.to_string()))?,
                        )
                    } else {
                        stored_in_owned(input, enc).map_err(|e| bad(e.to_string()))?
                    };
                    let st = match st {
                        Cow::Owned(st) if enc.aos_coo_start().is_none() => {
                            // Its arrays move (copied only where a clone shares them).
                            let (buffers, values) = st.into_buffers();
                            let fields = lacuna_ir::storage::storage_fields(enc);
                            if fields.len() != buffers.len() {
                                return Err(bad("storage of another layout".into()));
                            }
                            for (field, array) in fields.into_iter().zip(buffers) {
                                use lacuna_ir::storage::Field;
                                let key = match field {
                                    Field::Positions(l) => lower::pos_name(&tensor.name, l.index()),
                                    Field::Coordinates(l) => {
                                        lower::crd_name(&tensor.name, l.index())
                                    }
                                    other => return Err(bad(format!("unexpected {other:?}"))),
                                };
                                let data = index_into(array, self.plan.index).map_err(bad)?;
                                b.buffers.insert(key, data);
                            }
                            let values = if values.dtype() == tensor.dtype {
                                values
                            } else {
                                checked_cast(&values, tensor.dtype).map_err(bad)?
                            };
                            b.buffers.insert(lower::vals_name(&tensor.name), values);
                            continue;
                        }
                        st => st,
                    };
                    for l in 0..enc.lvl_rank() {
                        let lvl = lacuna_ir::encoding::Lvl(l as u32);
                        if let Some(p) = st.positions(lvl) {
                            let data = index_data(p, self.plan.index).map_err(bad)?;
                            b.buffers.insert(lower::pos_name(&tensor.name, l), data);
                        }
                        let aos = enc.aos_coo_start().is_some_and(|s| l >= s.index());
                        if let (Some(c), false) = (st.coordinates(lvl), aos) {
                            let data = index_data(c, self.plan.index).map_err(bad)?;
                            b.buffers.insert(lower::crd_name(&tensor.name, l), data);
                        } else if enc.levels()[l].lvl_type.has_coordinates() {
                            // Trailing COO levels in AoS layout share one interleaved array:
                            // each level gets its own (one coordinate per stored entry).
                            let crd: Vec<u64> = (0..st.number_of_entries())
                                .map(|q| st.coordinate(lvl, q))
                                .collect::<Option<_>>()
                                .ok_or_else(|| bad(format!("level {l}: coordinates unreadable")))?;
                            let data =
                                index_into(IndexArray::U64(crd), self.plan.index).map_err(bad)?;
                            b.buffers.insert(lower::crd_name(&tensor.name, l), data);
                        }
                    }
                    let values = checked_cast(st.values(), tensor.dtype).map_err(bad)?;
                    b.buffers.insert(lower::vals_name(&tensor.name), values);
                }
            }
        }
        for p in &a.params {
            if !b.params.contains_key(p) {
                return Err(CoiterError::Input {
                    buffer: a.output().name.clone(),
                    what: format!("size `{p}` is not given by any input (pass --param {p}=N)"),
                });
            }
        }
        let out = a.output();
        let ext = |s: &Size| -> Result<usize, CoiterError> {
            size_value(s, &b.params)
                .map(|v| v as usize)
                .ok_or_else(|| CoiterError::Input {
                    buffer: out.name.clone(),
                    what: format!("unknown size `{s}`"),
                })
        };
        if self.plan.index == DType::I32 {
            // The result's coordinates are computed as i64 but may be stored as i32
            // (`Plan::result_index`), and a dense range's coordinates reach its extent.
            for s in &out.extents {
                if ext(s)? > i32::MAX as usize {
                    return Err(CoiterError::Input {
                        buffer: out.name.clone(),
                        what: format!("extent `{s}` does not fit the kernel's 32-bit indices"),
                    });
                }
            }
        }
        match self.plan.mode {
            OutMode::Dense => {
                let len = out.extents.iter().try_fold(1usize, |acc, s| {
                    Ok::<_, CoiterError>(acc.saturating_mul(ext(s)?))
                })?;
                let mut z =
                    ArrayData::try_zeros(out.dtype, len).ok_or_else(|| CoiterError::Input {
                        buffer: out.name.clone(),
                        what: format!("cannot allocate {len} elements"),
                    })?;
                let fill = self.dense_fill();
                if fill.as_f64() != 0.0 {
                    z = ArrayData::filled(out.dtype, len, fill);
                }
                b.buffers.insert(out.name.clone(), z);
            }
            _ => {
                let rows = self.rows(&b.params)?;
                b.buffers.insert(
                    format!("{}.pos", out.name),
                    ArrayData::zeros(DType::I64, rows + 1),
                );
                if let OutMode::Workspace { .. } = self.plan.mode {
                    let last = self.plan.last_var.expect("sparse result");
                    let n = ext(&a.vars[last].extent)?;
                    b.buffers
                        .insert(format!("{}.w", out.name), ArrayData::zeros(out.dtype, n));
                    b.buffers.insert(
                        format!("{}.flag", out.name),
                        ArrayData::zeros(DType::I64, n),
                    );
                    b.buffers.insert(
                        format!("{}.list", out.name),
                        ArrayData::zeros(DType::I64, n),
                    );
                }
            }
        }
        Ok(b)
    }

    fn rows(&self, params: &BTreeMap<String, i64>) -> Result<usize, CoiterError> {
        let a = &self.assignment;
        self.plan.row_vars.iter().try_fold(1usize, |acc, &v| {
            let n = size_value(&a.vars[v].extent, params).ok_or_else(|| CoiterError::Input {
                buffer: a.output().name.clone(),
                what: format!("unknown size `{}`", a.vars[v].extent),
            })?;
            acc.checked_mul(n as usize)
                .ok_or_else(|| CoiterError::Input {
                    buffer: a.output().name.clone(),
                    what: "too many rows".into(),
                })
        })
    }

    /// Runs the passes on bindings from [`CoKernel::bind`]: `exec` runs one function.
    pub fn run(
        &self,
        b: &mut Bindings,
        exec: &mut dyn FnMut(Pass, &Func, &mut Bindings) -> Result<(), String>,
    ) -> Result<(), CoiterError> {
        let out = self.assignment.output();
        let run_err = |f: &Func, what: String| CoiterError::Run {
            pass: f.name.clone(),
            what,
        };
        if self.plan.parallel_rows {
            // All rows; a caller running chunks sets its own range per chunk.
            let (lo, hi) = lower::row_range_params(&out.name);
            let rows = self.rows(&b.params)?;
            b.params.insert(lo, 0);
            b.params.insert(hi, rows as i64);
        }
        if let Some(count) = &self.count {
            let pos_name = format!("{}.pos", out.name);
            let rows = self.rows(&b.params)?;
            rebind(b, pos_name.clone(), DType::I64, rows + 1, false);
            exec(Pass::Count, count, b).map_err(|e| run_err(count, e))?;
            // Moved out of the bindings, not copied (bound as i64 just above).
            let mut pos = match b.buffers.remove(&pos_name) {
                Some(ArrayData::I64(v)) => v,
                Some(other) => other.to_i64_vec(),
                None => return Err(run_err(count, "result positions missing".into())),
            };
            for r in 0..rows {
                pos[r + 1] += pos[r];
            }
            let nnz = pos[rows] as usize;
            b.buffers.insert(pos_name, ArrayData::I64(pos));
            self.insert_entries(b, nnz, false);
        }
        exec(Pass::Compute, &self.compute, b).map_err(|e| run_err(&self.compute, e))
    }

    /// Binds the result's coordinate and value arrays, `slots` entries each: zeroed, or
    /// `reserve`d ([`ArrayData::reserved`]: empty, with room for them) for compiled code that
    /// writes every slot it uses.
    fn insert_entries(&self, b: &mut Bindings, slots: usize, reserve: bool) {
        let out = self.assignment.output();
        let arrays = [
            (
                format!("{}.crd", out.name),
                self.plan.result_index(&self.assignment),
            ),
            (lower::vals_name(&out.name), out.dtype),
        ];
        for (name, dtype) in arrays {
            rebind(b, name, dtype, slots, reserve);
        }
    }

    /// Hands a previous result of this kernel back to `b`, so that the next run writes its
    /// positions, coordinates and values into that storage instead of fresh allocations. On a
    /// large result, a run into fresh memory spends much of its time faulting pages in (the
    /// kernel zeroes each one); reused pages are resident. Every pass re-initializes the
    /// arrays it uses (zeroed positions, reserved or zeroed entries), so nothing of the
    /// previous contents is read. A result this kernel cannot reuse (another layout, or storage
    /// shared with a clone or view) is dropped.
    pub fn recycle(&self, b: &mut Bindings, previous: Output) {
        if self.plan.mode == OutMode::Dense || !self.rows_are_levels() {
            return;
        }
        let Output::Sparse(t) = previous else {
            return;
        };
        let Some((buffers, values)) = t.into_unshared_buffers() else {
            return;
        };
        let Ok([pos, crd]) = <[IndexArray; 2]>::try_from(buffers) else {
            return;
        };
        let (Some(pos), Some(crd)) = (pos.into_signed(), crd.into_signed()) else {
            return;
        };
        let out = &self.assignment.output().name;
        b.buffers.insert(format!("{out}.pos"), pos);
        b.buffers.insert(format!("{out}.crd"), crd);
        b.buffers.insert(lower::vals_name(out), values);
    }

    /// Sets the one-pass function's rows `[lo, hi)` and its first result slot `q0`.
    fn set_one_pass_range(&self, b: &mut Bindings, lo: i64, hi: i64, q0: i64) {
        let out = &self.assignment.output().name;
        let (l, h) = lower::row_range_params(out);
        b.params.insert(l, lo);
        b.params.insert(h, hi);
        b.params.insert(lower::one_pass_start_param(out), q0);
    }

    /// The position arrays, indexed by result row, of the operands the one-pass result's
    /// entries come from (each a dense row level over the result's row and a compressed level
    /// over its column, e.g. CSR), or `None` when some operand is stored otherwise. The sum of
    /// their positions at row `r` bounds the result's entries in rows `[0, r)`: a chunk of rows
    /// `[lo, hi)` can then append at that bound for `lo` into a region no other chunk writes.
    pub fn one_pass_row_positions(&self) -> Option<Vec<String>> {
        Some(
            self.one_pass_row_levels()?
                .into_iter()
                .map(|(pos, _)| pos)
                .collect(),
        )
    }

    /// The position and coordinate arrays of the operands of
    /// [`CoKernel::one_pass_row_positions`], in the same order.
    pub fn one_pass_row_levels(&self) -> Option<Vec<(String, String)>> {
        self.one_pass.as_ref()?;
        let a = &self.assignment;
        let (&[row], Some(last)) = (self.plan.row_vars.as_slice(), self.plan.last_var) else {
            return None;
        };
        let mut names = Vec::new();
        for (t, tensor) in a.tensors.iter().enumerate() {
            if t == a.out || !lower::sparse_at(a, &self.plan.levels, t, last) {
                continue;
            }
            let levels = self.plan.levels[t].as_ref()?;
            match levels.as_slice() {
                [l0, l1]
                    if l0.kind == VKind::Dense
                        && tensor.vars[l0.dim] == row
                        && l1.kind == VKind::Compressed
                        && tensor.vars[l1.dim] == last =>
                {
                    names.push((
                        lower::pos_name(&tensor.name, l1.storage),
                        lower::crd_name(&tensor.name, l1.storage),
                    ));
                }
                _ => return None,
            }
        }
        (!names.is_empty()).then_some(names)
    }

    /// How the operands of the one-pass function merge, from `samples` rows spread evenly
    /// (see [`MergeSample`]); `None` without a one-pass function over row-stored operands
    /// ([`CoKernel::one_pass_row_levels`]) or when an array is missing. Merges only when the
    /// operands hold at least `min_entries` entries: a smaller kernel is not worth the sample.
    pub fn merge_sample(
        &self,
        b: &Bindings,
        samples: usize,
        min_entries: i64,
    ) -> Option<MergeSample> {
        let levels = self.one_pass_row_levels()?;
        let rows = self.rows(&b.params).ok()?;
        let at = |a: &ArrayData, i: usize| -> Option<i64> {
            match a {
                ArrayData::I32(v) => v.get(i).map(|&x| i64::from(x)),
                ArrayData::I64(v) => v.get(i).copied(),
                ArrayData::I8(v) => v.get(i).map(|&x| i64::from(x)),
                ArrayData::F32(_) | ArrayData::F64(_) => None,
            }
        };
        let arrays: Vec<(&ArrayData, &ArrayData)> = levels
            .iter()
            .map(|(pos, crd)| Some((b.buffers.get(pos)?, b.buffers.get(crd)?)))
            .collect::<Option<_>>()?;
        if arrays.len() > 64 {
            return None;
        }
        let mut entries = 0i64;
        for (pos, _) in &arrays {
            entries = entries.saturating_add(at(pos, rows)?);
        }
        let mut sample = MergeSample {
            entries,
            switches: 0.0,
        };
        if entries < min_entries || rows == 0 || samples == 0 {
            return Some(sample);
        }
        let (mut switches, mut merged) = (0u64, 0u64);
        let mut heads: Vec<(i64, i64)> = Vec::with_capacity(arrays.len());
        for s in 0..samples.min(rows) {
            // Evenly spaced rows; in u128, since `s * rows` may overflow a usize.
            let r = usize::try_from(s as u128 * rows as u128 / samples.min(rows) as u128).ok()?;
            heads.clear();
            for (pos, _) in &arrays {
                heads.push((at(pos, r)?, at(pos, r + 1)?));
            }
            let mut last = 0u64;
            loop {
                // The smallest head coordinate and which operands hold it.
                let mut min = i64::MAX;
                let mut holders = 0u64;
                for (t, &(p, end)) in heads.iter().enumerate() {
                    if p < end {
                        let c = at(arrays[t].1, usize::try_from(p).ok()?)?;
                        if c < min {
                            (min, holders) = (c, 1 << t);
                        } else if c == min {
                            holders |= 1 << t;
                        }
                    }
                }
                if holders == 0 {
                    break;
                }
                for (t, h) in heads.iter_mut().enumerate() {
                    h.0 += i64::from(holders >> t & 1 == 1);
                }
                switches += u64::from(last != 0 && holders != last);
                merged += 1;
                last = holders;
            }
        }
        sample.switches = if merged == 0 {
            0.0
        } else {
            switches as f64 / merged as f64
        };
        Some(sample)
    }

    /// Splits the rows into `chunks` ranges of about equal operand entries for a chunked run
    /// of the one-pass function: `(lo, hi, q0)` per chunk, `q0` the chunk's first slot; with
    /// the result's positions zeroed and its coordinates and values reserved
    /// ([`ArrayData::reserved`]) for all operand entries. `None` when the kernel has no
    /// one-pass function or an operand is not stored as [`CoKernel::one_pass_row_positions`]
    /// requires. Run the chunks (each with `row_lo`, `row_hi` and `q0` set, in any order or
    /// at once: their writes are disjoint), then [`CoKernel::finish_one_pass_chunks`].
    pub fn prepare_one_pass_chunks(
        &self,
        b: &mut Bindings,
        chunks: usize,
    ) -> Result<Option<Vec<RowChunk>>, CoiterError> {
        let Some(names) = self.one_pass_row_positions() else {
            return Ok(None);
        };
        let out = self.assignment.output();
        let rows = self.rows(&b.params)?;
        let mut weight = vec![0i64; rows + 1];
        for n in &names {
            let p = b.buffers.get(n).ok_or_else(|| CoiterError::Run {
                pass: format!("{}_one_pass", self.assignment.name),
                what: format!("`{n}` not bound"),
            })?;
            for (r, w) in weight.iter_mut().enumerate() {
                *w += p.get(r).map_or(0, |x| x.as_i64());
            }
        }
        let total = weight[rows];
        let chunks = chunks.clamp(1, rows.max(1));
        let bounds: Vec<usize> = lacuna_ir::partition::balanced_bounds(
            0,
            rows as i64,
            chunks as i64,
            Some(&|r: i64| weight[r as usize]),
        )
        .into_iter()
        .map(|r| r as usize)
        .collect();
        rebind(b, format!("{}.pos", out.name), DType::I64, rows + 1, false);
        self.insert_entries(b, usize::try_from(total).unwrap_or(0), true);
        self.set_one_pass_range(b, 0, rows as i64, 0);
        Ok(Some(
            bounds
                .windows(2)
                .map(|w| RowChunk {
                    lo: w[0] as i64,
                    hi: w[1] as i64,
                    q0: weight[w[0]],
                })
                .collect(),
        ))
    }

    /// After every chunk of [`CoKernel::prepare_one_pass_chunks`] has run: moves each chunk's
    /// entries down to follow the previous chunk's (its positions shifted alike), so that the
    /// result's arrays hold the rows' entries contiguously, and takes the written prefix as
    /// the coordinates and values.
    ///
    /// # Safety
    ///
    /// Every chunk ran the compiled one-pass function over its rows with its `q0`, which wrote
    /// the coordinate and value of every slot from `q0` to its last row's end position (as
    /// [`lower::generate_one_pass`] emits it).
    pub unsafe fn finish_one_pass_chunks(
        &self,
        b: &mut Bindings,
        chunks: &[RowChunk],
    ) -> Result<(), CoiterError> {
        let out = self.assignment.output();
        let err = |what: String| CoiterError::Run {
            pass: format!("{}_one_pass", self.assignment.name),
            what,
        };
        let pos_name = format!("{}.pos", out.name);
        // Moved out of the bindings, not copied (the positions are i64 as bound).
        let mut pos = match b.buffers.remove(&pos_name) {
            Some(ArrayData::I64(v)) => v,
            Some(other) => other.to_i64_vec(),
            None => return Err(err("result positions missing".into())),
        };
        let crd_name = format!("{}.crd", out.name);
        let vals_name = lower::vals_name(&out.name);
        let reserved = b.buffers.get(&crd_name).map_or(0, |a| a.capacity()) as i64;
        let mut end = 0i64;
        let mut moves = Vec::new();
        for (c, &RowChunk { lo, hi, q0 }) in chunks.iter().enumerate() {
            let next = chunks.get(c + 1).map_or(reserved, |n| n.q0);
            let (lo_u, hi_u) = (lo as usize, hi as usize);
            let stop = *pos
                .get(hi_u)
                .filter(|_| lo <= hi)
                .ok_or_else(|| err(format!("chunk rows {lo}..{hi} outside the positions")))?;
            let written = if lo == hi { q0 } else { stop };
            if written < q0 || written > next {
                return Err(err(format!(
                    "chunk rows {lo}..{hi} wrote slots {q0}..{written}, beyond its region"
                )));
            }
            if q0 != end {
                let shift = q0 - end;
                for p in &mut pos[lo_u + 1..=hi_u] {
                    *p -= shift;
                }
                moves.push((q0 as usize, end as usize, (written - q0) as usize));
            }
            end += written - q0;
        }
        for name in [&crd_name, &vals_name] {
            let a = b
                .buffers
                .get_mut(name)
                .ok_or_else(|| err(format!("`{name}` missing")))?;
            if (end as usize) > a.capacity() {
                return Err(err(format!("`{name}` holds fewer slots than written")));
            }
            let size = a.dtype().size_bytes();
            let base = a.as_mut_ptr();
            for &(from, to, n) in &moves {
                // SAFETY: both ranges lie within the reservation (`from + n` is at most the
                // next chunk's start, checked above, and the reservation holds every chunk's
                // region); the source slots were written by the chunk (the caller's contract);
                // `copy` allows the overlap of a move down.
                unsafe {
                    std::ptr::copy(base.add(from * size), base.add(to * size), n * size);
                }
            }
            // SAFETY: slots below `end` hold the chunks' entries, moved contiguously above.
            unsafe { a.assume_written(end as usize) };
        }
        b.buffers.insert(pos_name, ArrayData::I64(pos));
        Ok(())
    }

    /// Runs [`CoKernel::one_pass`] (when there is one; `Ok(false)` otherwise) through `exec`:
    /// the result's positions zeroed, its coordinates and values sized by the stored entries
    /// of the operands it can hold entries of ([`Plan::one_pass`]); [`CoKernel::output`]
    /// trims them to the entries written.
    pub fn run_one_pass(
        &self,
        b: &mut Bindings,
        exec: &mut dyn FnMut(&Func, &mut Bindings) -> Result<(), String>,
    ) -> Result<bool, CoiterError> {
        // SAFETY: the arrays are zeroed, not reserved.
        unsafe { self.one_pass_with(b, false, exec) }
    }

    /// [`CoKernel::run_one_pass`] with the result's coordinates and values reserved
    /// ([`ArrayData::reserved`]: empty, with room for the bound) instead of zeroed: writing
    /// them in place of zeroing saves a pass over memory as large as both operands.
    ///
    /// # Safety
    ///
    /// `exec` runs [`CoKernel::one_pass`] as machine code that writes through the arrays'
    /// pointers (never an interpreter, which would see them empty): the function writes the
    /// coordinate and value of every slot below the positions' end, which is how
    /// [`lower::generate_one_pass`] emits it (one entry per slot, in order, from 0).
    pub unsafe fn run_one_pass_reserved(
        &self,
        b: &mut Bindings,
        exec: &mut dyn FnMut(&Func, &mut Bindings) -> Result<(), String>,
    ) -> Result<bool, CoiterError> {
        // SAFETY: forwarded from the caller.
        unsafe { self.one_pass_with(b, true, exec) }
    }

    /// # Safety
    ///
    /// With `reserve`, as [`CoKernel::run_one_pass_reserved`].
    unsafe fn one_pass_with(
        &self,
        b: &mut Bindings,
        reserve: bool,
        exec: &mut dyn FnMut(&Func, &mut Bindings) -> Result<(), String>,
    ) -> Result<bool, CoiterError> {
        let Some(f) = &self.one_pass else {
            return Ok(false);
        };
        let a = &self.assignment;
        let out = a.output();
        let last = self.plan.last_var.ok_or_else(|| CoiterError::Run {
            pass: f.name.clone(),
            what: "a one-pass function without a sparse result".into(),
        })?;
        let mut bound = 0usize;
        for (t, tensor) in a.tensors.iter().enumerate() {
            if t != a.out && lower::sparse_at(a, &self.plan.levels, t, last) {
                let vals = b
                    .buffers
                    .get(&lower::vals_name(&tensor.name))
                    .ok_or_else(|| CoiterError::Run {
                        pass: f.name.clone(),
                        what: format!("`{}` not bound", tensor.name),
                    })?;
                bound = bound.saturating_add(vals.len());
            }
        }
        let rows = self.rows(&b.params)?;
        rebind(b, format!("{}.pos", out.name), DType::I64, rows + 1, false);
        self.set_one_pass_range(b, 0, rows as i64, 0);
        self.insert_entries(b, bound, reserve);
        exec(f, b).map_err(|what| CoiterError::Run {
            pass: f.name.clone(),
            what,
        })?;
        // Trimmed to the entries written, as a count pass would have sized them.
        let nnz = b
            .buffers
            .get(&format!("{}.pos", out.name))
            .and_then(|pos| pos.get(rows))
            .map(|x| x.as_i64())
            .and_then(|x| usize::try_from(x).ok())
            .filter(|&x| x <= bound)
            .ok_or_else(|| CoiterError::Run {
                pass: f.name.clone(),
                what: format!("`{}.pos` ends outside the {bound} slots sized", out.name),
            })?;
        for name in [format!("{}.crd", out.name), lower::vals_name(&out.name)] {
            if let Some(a) = b.buffers.get_mut(&name) {
                if reserve {
                    // SAFETY: `nnz` is within the reserved bound (checked above) and the
                    // function wrote every slot below it (the caller's contract).
                    if !unsafe { a.assume_written(nnz) } {
                        return Err(CoiterError::Run {
                            pass: f.name.clone(),
                            what: format!("`{name}` was replaced during the run"),
                        });
                    }
                } else {
                    a.truncate(nnz);
                }
            }
        }
        Ok(true)
    }

    /// The result, taken from bindings after [`CoKernel::run`] (its arrays are moved out, not
    /// copied): a dense array, or the storage of the result's declared encoding (validated by
    /// the storage module's checks).
    pub fn output(&self, b: &mut Bindings) -> Result<Output, CoiterError> {
        if self.plan.mode == OutMode::Dense {
            return self.output_entries(b);
        }
        let out = self.assignment.output();
        let enc = out.encoding.as_ref().expect("a sparse result is encoded");
        let shape: Vec<usize> = out
            .extents
            .iter()
            .map(|s| size_value(s, &b.params).unwrap_or(0) as usize)
            .collect();
        let bad = |e: lacuna_ir::storage::StorageError| CoiterError::Run {
            pass: self.compute.name.clone(),
            what: format!("result `{}` in {enc}: {e}", out.name),
        };
        if self.rows_are_levels() {
            // Dense levels over the row variables, then one compressed level: the passes'
            // positions and coordinates are that storage as they are.
            let mut take = |n: String| {
                b.buffers.remove(&n).ok_or_else(|| CoiterError::Run {
                    pass: self.compute.name.clone(),
                    what: format!("result array `{n}` missing"),
                })
            };
            // The passes write indices that are never negative (`Plan::index` wide, the
            // positions always 64-bit), reinterpreted as unsigned without a pass over them; a
            // negative one becomes too large for the checks below.
            use lacuna_ir::storage::Validation;
            let index = IndexArray::from_signed;
            let pos = index(take(format!("{}.pos", out.name))?);
            let mut crd = take(format!("{}.crd", out.name))?;
            let mut values = take(lower::vals_name(&out.name))?;
            let nnz = pos.get(pos.len().wrapping_sub(1)).unwrap_or(0) as usize;
            if crd.len() > nnz {
                // Never longer than the count; trimmed defensively for the checks below.
                crd.truncate(nnz);
                values.truncate(nnz);
            }
            // Positions are checked (they address everything else); the coordinates are the
            // kernel's merges of validated operands' sorted rows, checked fully in debug
            // builds (and by the tests, `SparseTensor::validate`).
            let validation = if cfg!(debug_assertions) {
                Validation::Checked
            } else {
                Validation::Positions
            };
            let t = SparseTensor::assemble(enc, &shape, vec![pos, index(crd)], values, validation)
                .map_err(bad)?;
            return Ok(Output::Sparse(t));
        }
        let coo = match self.output_entries(b)? {
            Output::Coo(c) => c,
            other => return Ok(other),
        };
        Ok(Output::Sparse(
            SparseTensor::from_coo(&coo, enc).map_err(bad)?,
        ))
    }

    /// Whether the result's encoding is dense levels over the row variables in iteration
    /// order, then one unique, ordered compressed level over the innermost result variable.
    pub fn rows_are_levels(&self) -> bool {
        let out = self.assignment.output();
        let Some(enc) = &out.encoding else {
            return false;
        };
        let Some(last) = self.plan.last_var else {
            return false;
        };
        let vars: Vec<usize> = self.plan.row_vars.iter().copied().chain([last]).collect();
        let levels = enc.levels();
        enc.is_permutation()
            && levels.len() == vars.len()
            && levels.iter().enumerate().all(|(l, spec)| {
                let var = spec.expr.as_var().map(|d| out.vars[d.index()]);
                let t = spec.lvl_type;
                let kind_ok = if l + 1 == levels.len() {
                    t.is_compressed() && t.is_unique() && t.is_ordered()
                } else {
                    t.is_dense()
                };
                var == Some(vars[l]) && kind_ok
            })
    }

    /// The result as a dense array or as its entries in coordinate form.
    pub fn output_entries(&self, b: &Bindings) -> Result<Output, CoiterError> {
        let a = &self.assignment;
        let out = a.output();
        let shape: Vec<usize> = out
            .extents
            .iter()
            .map(|s| size_value(s, &b.params).unwrap_or(0) as usize)
            .collect();
        let missing = |what: &str| CoiterError::Run {
            pass: self.compute.name.clone(),
            what: format!("result array `{what}` missing"),
        };
        if self.plan.mode == OutMode::Dense {
            let data = b.buffers.get(&out.name).ok_or_else(|| missing(&out.name))?;
            return Ok(Output::Dense(DenseArray {
                shape,
                data: data.clone(),
            }));
        }
        let pos = b
            .buffers
            .get(&format!("{}.pos", out.name))
            .ok_or_else(|| missing("pos"))?
            .to_i64_vec();
        let crd = b
            .buffers
            .get(&format!("{}.crd", out.name))
            .ok_or_else(|| missing("crd"))?
            .to_i64_vec();
        let values = b
            .buffers
            .get(&lower::vals_name(&out.name))
            .ok_or_else(|| missing("vals"))?
            .clone();
        let last = self.plan.last_var.expect("sparse result");
        let dim_of = |v: usize| out.vars.iter().position(|&x| x == v).expect("result var");
        let mut coords = vec![Vec::with_capacity(crd.len()); shape.len()];
        for r in 0..pos.len().saturating_sub(1) {
            // Decode the row's coordinates (mixed radix over the row variables).
            let mut rest = r;
            let mut row = vec![0usize; self.plan.row_vars.len()];
            for (k, &v) in self.plan.row_vars.iter().enumerate().rev() {
                let n = shape[dim_of(v)].max(1);
                row[k] = rest % n;
                rest /= n;
            }
            for &c in &crd[pos[r] as usize..pos[r + 1] as usize] {
                for (k, &v) in self.plan.row_vars.iter().enumerate() {
                    coords[dim_of(v)].push(row[k]);
                }
                coords[dim_of(last)].push(c as usize);
            }
        }
        Ok(Output::Coo(CooTensor {
            shape,
            coords,
            values,
        }))
    }

    /// The first value of every result entry (zero for sums).
    pub fn identity(&self) -> Scalar {
        let a = &self.assignment;
        let t = a.output().dtype;
        eval_point(a, &[], &a.reduce.1, &[], t, &[]).unwrap_or(Scalar::F64(0.0).cast(t))
    }

    /// What a dense result holds before the kernel runs: the identity of its reduction, or
    /// zero.
    pub fn dense_fill(&self) -> Scalar {
        if self.assignment.accumulate {
            self.identity()
        } else {
            Scalar::F64(0.0).cast(self.assignment.output().dtype)
        }
    }

    /// The result computed point by point over the whole iteration space (the reference).
    pub fn reference(
        &self,
        b: &Bindings,
        inputs: &BTreeMap<String, Input>,
    ) -> Result<Output, CoiterError> {
        reference(self, b, inputs)
    }
}

/// `values` converted to `dtype`, refusing values an integer type cannot hold exactly (out of
/// range, or not whole): never a silent wrap.
fn checked_cast(values: &ArrayData, dtype: DType) -> Result<ArrayData, String> {
    if dtype.is_int() && values.dtype() != dtype {
        let (lo, hi) = match dtype {
            DType::I8 => (i8::MIN as f64, i8::MAX as f64),
            DType::I32 => (i32::MIN as f64, i32::MAX as f64),
            _ => (-9.2e18, 9.2e18),
        };
        for e in 0..values.len() {
            let Some(v) = values.get(e) else { continue };
            let ok = match v {
                Scalar::I64(x) => x as f64 >= lo && x as f64 <= hi,
                other => {
                    let x = other.as_f64();
                    x.fract() == 0.0 && x >= lo && x <= hi
                }
            };
            if !ok {
                return Err(format!("entry {e}: value {v} does not fit {dtype}"));
            }
        }
    }
    Ok(values.cast(dtype))
}

/// The inputs of [`CoKernel::bind`] (borrowed) or [`CoKernel::bind_owned`] (handed over).
enum Source<'a> {
    Borrowed(&'a BTreeMap<String, Input>),
    Owned(BTreeMap<String, Input>),
}

impl<'a> Source<'a> {
    /// The input for `name`: borrowed, or moved out of owned inputs at its last use (cloned
    /// before, for a tensor read twice).
    fn take(&mut self, name: &str, last_use: bool) -> Option<Cow<'a, Input>> {
        match self {
            Source::Borrowed(m) => m.get(name).map(Cow::Borrowed),
            Source::Owned(m) if last_use => m.remove(name).map(Cow::Owned),
            Source::Owned(m) => m.get(name).cloned().map(Cow::Owned),
        }
    }
}

/// [`stored_in`] for an input that may be owned: an owned [`Input::Sparse`] stored as `enc`
/// is handed on as it is.
fn stored_in_owned<'a>(
    input: Cow<'a, Input>,
    enc: &lacuna_ir::encoding::Encoding,
) -> Result<Cow<'a, SparseTensor>, lacuna_ir::storage::StorageError> {
    match input {
        Cow::Borrowed(i) => stored_in(i, enc),
        Cow::Owned(Input::Sparse(t)) if same_layout(&t, enc) => Ok(Cow::Owned(t)),
        Cow::Owned(other) => Ok(Cow::Owned(stored_in(&other, enc)?.into_owned())),
    }
}

/// Whether `t` is stored as `enc` stores, at any index widths (not a view).
fn same_layout(t: &SparseTensor, enc: &lacuna_ir::encoding::Encoding) -> bool {
    use lacuna_ir::encoding::IndexWidth::Native;
    !t.is_view() && t.encoding().with_widths(Native, Native) == enc.with_widths(Native, Native)
}

/// `input` stored in `enc`: a [`Input::Sparse`] as it is where it is stored so (not a view;
/// at any index widths, which binding converts to the kernel's), otherwise its entries
/// (explicit zeros kept, as from a coordinate input) stored anew.
fn stored_in<'a>(
    input: &'a Input,
    enc: &lacuna_ir::encoding::Encoding,
) -> Result<Cow<'a, SparseTensor>, lacuna_ir::storage::StorageError> {
    Ok(match input {
        Input::Coo(c) => Cow::Owned(SparseTensor::from_coo(c, enc)?),
        Input::Dense(d) => Cow::Owned(SparseTensor::from_dense(d, enc)?),
        Input::Sparse(t) if same_layout(t, enc) => Cow::Borrowed(t),
        Input::Sparse(t) => Cow::Owned(SparseTensor::from_coo(&t.to_coo(), enc)?),
    })
}

/// [`index_data`] of an array handed over: the same buffer where it fits
/// ([`IndexArray::into_signed_as`]).
fn index_into(a: IndexArray, dtype: DType) -> Result<ArrayData, String> {
    a.into_signed_as(dtype).or_else(|a| index_data(&a, dtype))
}

/// An index array of the storage as the kernel's `dtype` ([`Plan::index`]): `I64`, or `I32`
/// when every value fits.
fn index_data(a: &IndexArray, dtype: DType) -> Result<ArrayData, String> {
    // Checked first, then converted in one pass (vectorized), without a 64-bit copy between.
    let max = if dtype == DType::I32 {
        i32::MAX as u64
    } else {
        i64::MAX as u64
    };
    let fits = match a {
        IndexArray::U8(_) | IndexArray::U16(_) => true,
        IndexArray::U32(v) => v.iter().all(|&x| u64::from(x) <= max),
        IndexArray::U64(v) => v.iter().all(|&x| x <= max),
    };
    if !fits {
        return Err(if dtype == DType::I32 {
            "an index does not fit the kernel's 32-bit indices".to_string()
        } else {
            "an index does not fit in i64".to_string()
        });
    }
    macro_rules! cast {
        ($t:ty) => {
            match a {
                IndexArray::U8(v) => v.iter().map(|&x| x as $t).collect(),
                IndexArray::U16(v) => v.iter().map(|&x| x as $t).collect(),
                IndexArray::U32(v) => v.iter().map(|&x| x as $t).collect(),
                IndexArray::U64(v) => v.iter().map(|&x| x as $t).collect(),
            }
        };
    }
    Ok(if dtype == DType::I32 {
        ArrayData::I32(cast!(i32))
    } else {
        ArrayData::I64(cast!(i64))
    })
}

/// Stored entries of an operand, by dimension coordinates.
enum Operand {
    Sparse(HashMap<Vec<usize>, Scalar>),
    Dense(ArrayData, Vec<usize>),
}

fn reference(
    k: &CoKernel,
    b: &Bindings,
    inputs: &BTreeMap<String, Input>,
) -> Result<Output, CoiterError> {
    let a = &k.assignment;
    let extents: Vec<usize> = a
        .vars
        .iter()
        .map(|v| size_value(&v.extent, &b.params).unwrap_or(0) as usize)
        .collect();
    let points: u128 = extents.iter().map(|&e| e as u128).product();
    if points > REFERENCE_LIMIT {
        return Err(CoiterError::Unsupported {
            what: format!(
                "the reference interpreter visits every point of the iteration space: {points} is too many (limit {REFERENCE_LIMIT})"
            ),
        });
    }
    let mut operands = Vec::new();
    for (t, tensor) in a.tensors.iter().enumerate() {
        if t == a.out {
            operands.push(Operand::Sparse(HashMap::new()));
            continue;
        }
        let input = inputs.get(&tensor.name).ok_or_else(|| CoiterError::Input {
            buffer: tensor.name.clone(),
            what: "not given".into(),
        })?;
        operands.push(match (&tensor.encoding, input) {
            (Some(enc), input) => {
                let st = stored_in(input, enc).map_err(|e| CoiterError::Input {
                    buffer: tensor.name.clone(),
                    what: e.to_string(),
                })?;
                let mut m = HashMap::new();
                st.foreach(|dims, _, v| {
                    let e = m
                        .entry(dims.to_vec())
                        .or_insert(Scalar::F64(0.0).cast(v.dtype()));
                    *e = eval_binop(lacuna_stage1::BinOp::Add, *e, v);
                });
                Operand::Sparse(m)
            }
            (None, input) => {
                let d = input
                    .dense(&tensor.name)
                    .map_err(|e| CoiterError::Input {
                        buffer: tensor.name.clone(),
                        what: e.to_string(),
                    })?
                    .into_owned();
                Operand::Dense(d.data, d.shape)
            }
        });
    }
    let out = a.output();
    let dtype = out.dtype;
    let mut result: BTreeMap<Vec<usize>, Scalar> = BTreeMap::new();
    let mut point = vec![0usize; a.vars.len()];
    let identity = k.identity();
    if extents.contains(&0) {
        return finish_reference(k, out, &extents, result);
    }
    loop {
        if let Some(v) = eval_point(a, &operands, &a.rhs, &point, dtype, &[]) {
            let key: Vec<usize> = out.vars.iter().map(|&x| point[x]).collect();
            let v = v.cast(dtype);
            let e = result.entry(key).or_insert(identity);
            *e = if a.accumulate {
                eval_point(a, &operands, &a.reduce.0, &point, dtype, &[*e, v]).unwrap_or(*e)
            } else {
                v
            };
        }
        // Next point, the kernel's last variable fastest.
        let mut d = a.vars.len();
        loop {
            if d == 0 {
                return finish_reference(k, out, &extents, result);
            }
            d -= 1;
            point[d] += 1;
            if point[d] < extents[d] {
                break;
            }
            point[d] = 0;
        }
    }
}

fn finish_reference(
    k: &CoKernel,
    out: &notation::Tensor,
    extents: &[usize],
    result: BTreeMap<Vec<usize>, Scalar>,
) -> Result<Output, CoiterError> {
    match finish_reference_entries(k, out, extents, result)? {
        Output::Coo(c) => {
            let enc = out.encoding.as_ref().expect("a sparse result is encoded");
            SparseTensor::from_coo(&c, enc)
                .map(Output::Sparse)
                .map_err(|e| CoiterError::Run {
                    pass: "reference".into(),
                    what: format!("result `{}` in {enc}: {e}", out.name),
                })
        }
        other => Ok(other),
    }
}

fn finish_reference_entries(
    k: &CoKernel,
    out: &notation::Tensor,
    extents: &[usize],
    result: BTreeMap<Vec<usize>, Scalar>,
) -> Result<Output, CoiterError> {
    let shape: Vec<usize> = out.vars.iter().map(|&v| extents[v]).collect();
    if k.plan.mode == OutMode::Dense {
        let len: usize = shape.iter().product();
        let mut data = ArrayData::filled(out.dtype, len, k.dense_fill());
        for (key, v) in result {
            let off = key.iter().zip(&shape).fold(0usize, |o, (&c, &n)| o * n + c);
            data.set(off, v);
        }
        return Ok(Output::Dense(DenseArray { shape, data }));
    }
    let mut coords = vec![Vec::new(); shape.len()];
    let mut values = ArrayData::zeros(out.dtype, result.len());
    for (e, (key, v)) in result.into_iter().enumerate() {
        for (d, &c) in key.iter().enumerate() {
            coords[d].push(c);
        }
        values.set(e, v);
    }
    Ok(Output::Coo(CooTensor {
        shape,
        coords,
        values,
    }))
}

/// The value of `e` at `point`, `None` when absent (presence semantics), typed like the
/// generated code; `Arg(k)` is `args[k]`.
fn eval_point(
    a: &Assignment,
    ops: &[Operand],
    e: &TExpr,
    point: &[usize],
    want: DType,
    args: &[Scalar],
) -> Option<Scalar> {
    let arg_types: Vec<DType> = args.iter().map(|s| s.dtype()).collect();
    let nat = |x: &TExpr| lower::natural_in(a, x, &arg_types);
    let ev = |x: &TExpr, t: DType, args: &[Scalar]| eval_point(a, ops, x, point, t, args);
    let region = |r: &TRegion, x: Option<Scalar>, args: &[Scalar]| -> Option<Scalar> {
        match r {
            TRegion::Empty => None,
            TRegion::Identity => x.map(|v| v.cast(want)),
            TRegion::Expr(f) => ev(f, want, args),
        }
    };
    match e {
        TExpr::Access(t) => {
            let tensor = &a.tensors[*t];
            let key: Vec<usize> = tensor.vars.iter().map(|&v| point[v]).collect();
            let v = match ops.get(*t)? {
                Operand::Sparse(m) => *m.get(&key)?,
                Operand::Dense(data, shape) => {
                    let off = key.iter().zip(shape).fold(0usize, |o, (&c, &n)| o * n + c);
                    data.get(off)?
                }
            };
            Some(v.cast(want))
        }
        TExpr::Arg(k) => args.get(*k).map(|v| v.cast(want)),
        TExpr::Float(v) => Some(if want.is_float() {
            Scalar::F64(*v).cast(want)
        } else {
            Scalar::I64(*v as i64).cast(want)
        }),
        TExpr::Int(v) => Some(Scalar::I64(*v).cast(want)),
        TExpr::Coord(v) => Some(Scalar::I64(point[*v] as i64).cast(want)),
        TExpr::Unary(lacuna_stage1::UnOp::Not, x) => {
            ev(x, DType::Bool, args).map(|x| eval_unop(lacuna_stage1::UnOp::Not, x).cast(want))
        }
        TExpr::Unary(op, x) => ev(x, want, args).map(|x| eval_unop(*op, x)),
        TExpr::Cast(t, x) => Some(ev(x, nat(x), args)?.cast(*t).cast(want)),
        TExpr::Cond(c, x, y) => {
            let (c, x, y) = (
                ev(c, DType::Bool, args)?,
                ev(x, want, args)?,
                ev(y, want, args)?,
            );
            Some(if c.as_bool() { x } else { y })
        }
        TExpr::SBinary(x, y, r) => {
            let (vx, vy) = (ev(x, nat(x), &[]), ev(y, nat(y), &[]));
            match (vx, vy) {
                (Some(p), Some(q)) => region(&r[0], None, &[p, q]),
                (Some(p), None) => region(&r[1], Some(p), &[p]),
                (None, Some(q)) => region(&r[2], Some(q), &[q, q]),
                (None, None) => None,
            }
        }
        TExpr::SUnary(x, r) => match ev(x, nat(x), &[]) {
            Some(p) => region(&r[0], Some(p), &[p]),
            None => region(&r[1], None, &[]),
        },
        TExpr::SSelect(x, pred) => {
            let p = ev(x, nat(x), &[])?;
            ev(pred, DType::Bool, &[p])?.as_bool().then(|| p.cast(want))
        }
        TExpr::Binary(op, x, y) => {
            let ty = if op.is_logical() {
                DType::Bool
            } else if op.is_comparison() {
                match (&**x, &**y) {
                    (TExpr::Float(_) | TExpr::Int(_), other) => nat(other),
                    (other, _) => nat(other),
                }
            } else {
                want
            };
            let (vx, vy) = (ev(x, ty, args), ev(y, ty, args));
            let r = match (vx, vy) {
                (Some(p), Some(q)) => eval_binop(*op, p, q),
                (Some(p), None) if lattice::is_union(*op) => p,
                (None, Some(q)) if *op == lacuna_stage1::BinOp::Add => q,
                (None, Some(q)) if *op == lacuna_stage1::BinOp::Sub => {
                    eval_unop(lacuna_stage1::UnOp::Neg, q)
                }
                _ => return None,
            };
            Some(r.cast(want))
        }
    }
}

/// Binds `name` to `len` zeros of `dtype`, or with `reserve` to an empty array with room for
/// `len` ([`ArrayData::reserved`]), in the storage of the array bound under that name before
/// when there is one (see [`CoKernel::recycle`]).
fn rebind(b: &mut Bindings, name: String, dtype: DType, len: usize, reserve: bool) {
    let array = match (b.buffers.remove(&name), reserve) {
        (Some(old), true) => old.into_reserved(dtype, len),
        (Some(old), false) => old.into_zeros(dtype, len),
        (None, true) => ArrayData::reserved(dtype, len),
        (None, false) => ArrayData::zeros(dtype, len),
    };
    b.buffers.insert(name, array);
}
