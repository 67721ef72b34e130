//! The `Schedule`: a program, the primitives applied to it, and their trace.

use crate::error::{Condition, ScheduleError};
use crate::primitives::cache::{self, CacheKind};
use crate::primitives::decompose_format::{self, Conversion};
use crate::primitives::{
    annotate, blockize, compute_at, horizontal, iso, loop_kind, loop_transform, sparse,
};
use crate::trace::{Instruction, ScheduleFile, SCHEDULE_FORMAT_VERSION};
use lacuna_stage1::{sparsify, verify, Program};
use lacuna_stage2::passes::extract_preprocess::{extract_preprocess, Preprocess};
use lacuna_stage2::{lower_to_stage2, ForKind, Func, GpuAxis};

/// Whether a loop name (`var` or `BLOCK:var`) names a dispatch loop of `horizontal_fuse`.
fn is_hfused(name: &str) -> bool {
    name.ends_with("_hfused")
}

/// A program being scheduled. Stage-I primitives transform the (sparsified) stage-I program;
/// the first stage-II primitive lowers it to stage II, where the rest apply.
#[derive(Clone, Debug)]
pub struct Schedule {
    program: Program,
    stage2: Option<Func>,
    trace: Vec<Instruction>,
    conversions: Vec<Conversion>,
    preprocess: Option<Preprocess>,
}

impl Schedule {
    /// Starts scheduling a verified program.
    pub fn new(p: &Program) -> Result<Schedule, ScheduleError> {
        let invalid = |e: String| ScheduleError {
            primitive: "schedule",
            args: p.name.clone(),
            condition: Condition::Invalid(e),
        };
        verify(p).map_err(|e| invalid(e.to_string()))?;
        let program = sparsify(p).map_err(|e| invalid(e.to_string()))?;
        Ok(Schedule {
            program,
            stage2: None,
            trace: Vec::new(),
            conversions: Vec::new(),
            preprocess: None,
        })
    }

    /// Replays a trace on a program; stops at the first primitive that fails.
    pub fn replay(p: &Program, trace: &[Instruction]) -> Result<Schedule, ScheduleError> {
        let mut s = Schedule::new(p)?;
        for inst in trace {
            s.apply(inst.clone())?;
        }
        Ok(s)
    }

    /// The conversions that `decompose_format` primitives need before the kernel runs.
    pub fn conversions(&self) -> &[Conversion] {
        &self.conversions
    }

    /// The preprocessing function that `extract_preprocess` split off the kernel, if any: it
    /// runs once per matrix before the kernel and fills the kernel's aux buffers.
    pub fn preprocess(&self) -> Option<&Preprocess> {
        self.preprocess.as_ref()
    }

    /// The iterations annotated `preprocess` = `true` (SparseTIR's `sparse_annotate`), which
    /// `extract_preprocess` moves into the preprocessing function.
    pub fn preprocess_iterations(&self) -> std::collections::BTreeSet<String> {
        self.program
            .iterations()
            .into_iter()
            .filter(|it| {
                it.annotations
                    .get("preprocess")
                    .is_some_and(|v| v == "true" || v == "1")
            })
            .map(|it| it.name.clone())
            .collect()
    }

    /// The names of the loops enclosing block `block`, outermost first (`BLOCK:var` where a
    /// variable names several loops), as primitives take them.
    pub fn get_loops(&self, block: &str) -> Result<Vec<String>, ScheduleError> {
        let f = self.stage2()?;
        crate::loops::enclosing(&f.body, block).ok_or_else(|| ScheduleError {
            primitive: "get_loops",
            args: format!("{block:?}"),
            condition: Condition::NotFound {
                what: "block",
                name: block.to_string(),
            },
        })
    }

    /// The block named `name` (SparseTIR's `get_block`; blocks are named by their handle).
    pub fn get_block(&self, name: &str) -> Result<String, ScheduleError> {
        if self.get_blocks()?.iter().any(|b| b == name) {
            Ok(name.to_string())
        } else {
            Err(ScheduleError {
                primitive: "get_block",
                args: format!("{name:?}"),
                condition: Condition::NotFound {
                    what: "block",
                    name: name.to_string(),
                },
            })
        }
    }

    /// The sparse iteration named `name` (SparseTIR's `get_sparse_iteration`), looked up in the
    /// stage-I program at any nesting depth.
    pub fn get_sparse_iteration(&self, name: &str) -> Result<String, ScheduleError> {
        fn find(stmts: &[lacuna_stage1::Stmt], name: &str) -> bool {
            stmts.iter().any(|s| match s {
                lacuna_stage1::Stmt::Iter(it) => it.name == name || find(&it.body, name),
                _ => false,
            })
        }
        if find(&self.program.body, name) {
            Ok(name.to_string())
        } else {
            Err(ScheduleError {
                primitive: "get_sparse_iteration",
                args: format!("{name:?}"),
                condition: Condition::NotFound {
                    what: "iteration",
                    name: name.to_string(),
                },
            })
        }
    }

    /// The names of the blocks of the stage-II function, in program order.
    pub fn get_blocks(&self) -> Result<Vec<String>, ScheduleError> {
        Ok(crate::loops::blocks(&self.stage2()?.body))
    }

    /// The applied primitives.
    pub fn trace(&self) -> &[Instruction] {
        &self.trace
    }

    /// The schedule as a file for `kernel`.
    pub fn to_file(&self) -> ScheduleFile {
        ScheduleFile {
            version: SCHEDULE_FORMAT_VERSION,
            kernel: self.program.name.clone(),
            trace: self.trace.clone(),
        }
    }

    /// The stage-I program (after stage-I primitives).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The stage-II function: lowered now if no stage-II primitive has run yet.
    pub fn stage2(&self) -> Result<Func, ScheduleError> {
        match &self.stage2 {
            Some(f) => Ok(f.clone()),
            None => lower_to_stage2(&self.program, &mut |_, _| {}).map_err(|e| ScheduleError {
                primitive: "lower",
                args: self.program.name.clone(),
                condition: Condition::Invalid(e.to_string()),
            }),
        }
    }

    /// Checks that the fused dispatch loop `name` may run in parallel (see
    /// [`horizontal::check_parallel`]), from what the conversions guarantee.
    fn check_hfused(&self, body: &[lacuna_stage2::Stmt], name: &str) -> Result<(), Condition> {
        horizontal::check_parallel(body, name, &horizontal::RowFacts::of(&self.conversions))
    }

    /// Checks that the iterations of loop `name` write disjoint rows of exclusive parts (see
    /// [`horizontal::check_rows`]).
    fn check_rows(&self, body: &[lacuna_stage2::Stmt], name: &str) -> Result<(), Condition> {
        horizontal::check_rows(body, name, &horizontal::RowFacts::of(&self.conversions))
    }

    /// Applies one primitive; on error the schedule is unchanged.
    pub fn apply(&mut self, inst: Instruction) -> Result<(), ScheduleError> {
        let err = |c: Condition| ScheduleError::new(&inst, c);
        let mut pending: Option<Conversion> = None;
        // The conversion `pending` replaces (`iso_values` of a decomposed buffer).
        let mut replaced: Option<usize> = None;
        if inst.is_stage1() {
            if self.stage2.is_some() {
                return Err(err(Condition::StageOrder));
            }
            let p = match &inst {
                Instruction::SparseReorder { iter, axes } => {
                    sparse::sparse_reorder(self.program.clone(), iter, axes)
                }
                Instruction::Specialize { param, value } => {
                    sparse::specialize(self.program.clone(), param, *value)
                }
                Instruction::SparseFuse { iter, axes } => {
                    sparse::sparse_fuse(self.program.clone(), iter, axes)
                }
                Instruction::SparseDecomposeInit { iter } => {
                    sparse::sparse_decompose_init(self.program.clone(), iter)
                }
                Instruction::Pos { iter, axis, buffer } => {
                    sparse::pos(self.program.clone(), iter, axis, buffer)
                }
                Instruction::DecomposeFormat { buffer, into } => {
                    if self
                        .conversions
                        .iter()
                        .any(|c| c.iso && &c.buffer == buffer)
                    {
                        return Err(err(Condition::BadArgument {
                            what: format!(
                                "`{buffer}` stores one value (iso_values): decompose it before"
                            ),
                        }));
                    }
                    decompose_format::decompose_format(self.program.clone(), buffer, into).map(
                        |(p, conv)| {
                            pending = Some(conv);
                            p
                        },
                    )
                }
                Instruction::IsoValues { buffer } => {
                    let at = self.conversions.iter().rposition(|c| &c.buffer == buffer);
                    let conv = at.map(|i| &self.conversions[i]);
                    iso::iso_values(self.program.clone(), buffer, conv).map(|(p, conv)| {
                        replaced = at;
                        pending = Some(conv);
                        p
                    })
                }
                Instruction::SparseAnnotate { iter, key, value } => {
                    sparse::annotate(self.program.clone(), iter, key, Some(value))
                }
                Instruction::SpecializeBuffer { axis, form } => {
                    sparse::specialize_buffer(self.program.clone(), axis, *form)
                }
                Instruction::SparseUnannotate { iter, key } => {
                    sparse::annotate(self.program.clone(), iter, key, None)
                }
                _ => unreachable!("stage-I primitives"),
            }
            .map_err(err)?;
            verify(&p).map_err(|e| err(Condition::Invalid(e.to_string())))?;
            lower_to_stage2(&p, &mut |_, _| {})
                .map_err(|e| err(Condition::Invalid(e.to_string())))?;
            self.program = p;
            match (replaced, pending) {
                (Some(i), Some(conv)) => self.conversions[i] = conv,
                (_, pending) => self.conversions.extend(pending),
            }
        } else {
            let f = self.stage2()?;
            if let Instruction::ExtractPreprocess = &inst {
                if self.preprocess.is_some() {
                    return Err(err(Condition::BadArgument {
                        what: "the preprocessing is already extracted".into(),
                    }));
                }
                let (kernel, pre) = extract_preprocess(f, &self.preprocess_iterations())
                    .map_err(|e| err(e.into()))?;
                self.stage2 = Some(kernel);
                self.preprocess = Some(pre);
                self.trace.push(inst);
                return Ok(());
            }
            if let Instruction::Rfactor { r#loop } = &inst {
                let g = crate::primitives::rfactor::rfactor(f, r#loop).map_err(err)?;
                self.stage2 = Some(g);
                self.trace.push(inst);
                return Ok(());
            }
            let cached = match &inst {
                Instruction::CacheRead {
                    block,
                    buffer,
                    scope,
                    at,
                } => Some((CacheKind::Read, block, buffer, scope, at)),
                Instruction::CacheWrite {
                    block,
                    buffer,
                    scope,
                    at,
                } => Some((CacheKind::Write, block, buffer, scope, at)),
                Instruction::ReverseCacheRead {
                    block,
                    buffer,
                    scope,
                    at,
                } => Some((CacheKind::ReverseRead, block, buffer, scope, at)),
                Instruction::ReverseCacheWrite {
                    block,
                    buffer,
                    scope,
                    at,
                } => Some((CacheKind::ReverseWrite, block, buffer, scope, at)),
                _ => None,
            };
            if let Some((kind, block, buffer, scope, at)) = cached {
                let g = cache::cache(f, kind, block, buffer, scope, at.as_deref()).map_err(err)?;
                self.stage2 = Some(g);
                self.trace.push(inst);
                return Ok(());
            }
            if let Instruction::SetScope { buffer, scope } = &inst {
                let g = cache::set_scope(f, buffer, scope).map_err(err)?;
                self.stage2 = Some(g);
                self.trace.push(inst);
                return Ok(());
            }
            let body = f.body.clone();
            let body = match &inst {
                Instruction::Split { r#loop, factors } => {
                    loop_transform::split(body, r#loop, factors)
                }
                Instruction::Bind { r#loop, thread } => {
                    match loop_kind::bind(body.clone(), r#loop, thread) {
                        Err(e) if is_hfused(r#loop) => match GpuAxis::from_name(thread) {
                            Some(axis) => self
                                .check_hfused(&body, r#loop)
                                .and_then(|_| loop_kind::mark(body, r#loop, ForKind::Bound(axis))),
                            None => Err(e),
                        },
                        // A loop over rows of exclusive parts (e.g. a group of a bucket's rows).
                        Err(e @ Condition::CarriedDependence { .. }) => {
                            match (GpuAxis::from_name(thread), self.check_rows(&body, r#loop)) {
                                (Some(axis), Ok(())) => {
                                    loop_kind::mark(body, r#loop, ForKind::Bound(axis))
                                }
                                _ => Err(e),
                            }
                        }
                        other => other,
                    }
                }
                Instruction::Divide { r#loop, parts } => {
                    loop_transform::split(body, r#loop, &[Some(*parts), None])
                }
                Instruction::Fuse { outer, inner } => loop_transform::fuse(body, outer, inner),
                Instruction::Reorder { loops } => loop_transform::reorder(body, loops),
                Instruction::Parallel { r#loop } => {
                    match loop_kind::parallel(body.clone(), r#loop) {
                        // A fused dispatch loop: parts writing disjoint rows are independent.
                        Err(_) if is_hfused(r#loop) => self
                            .check_hfused(&body, r#loop)
                            .and_then(|_| loop_kind::mark(body, r#loop, ForKind::Parallel)),
                        // A loop over rows of exclusive parts (e.g. a sliced ELL part's groups).
                        Err(e @ Condition::CarriedDependence { .. }) => {
                            match self.check_rows(&body, r#loop) {
                                Ok(()) => loop_kind::mark(body, r#loop, ForKind::Parallel),
                                Err(_) => Err(e),
                            }
                        }
                        other => other,
                    }
                }
                Instruction::Vectorize { r#loop } => loop_kind::vectorize(body, r#loop),
                Instruction::Unroll { r#loop } => loop_kind::unroll(body, r#loop),
                Instruction::ComputeAt { block, r#loop } => {
                    compute_at::compute_at(body, block, r#loop)
                }
                Instruction::ReverseComputeAt { block, r#loop } => {
                    compute_at::reverse_compute_at(body, block, r#loop)
                }
                Instruction::DecomposeReduction { block, r#loop } => {
                    compute_at::decompose_reduction(body, block, r#loop)
                }
                Instruction::Blockize { r#loop } => blockize::blockize(body, r#loop),
                Instruction::LiftLoop { r#loop } => blockize::lift_loop(body, r#loop),
                Instruction::Bound { r#loop, extent } => blockize::bound(body, r#loop, *extent),
                Instruction::HorizontalFuse { loops } => horizontal::horizontal_fuse(body, loops),
                Instruction::Annotate { r#loop, key, value } => {
                    annotate::annotate(body, r#loop, key, *value)
                }
                Instruction::Unannotate { r#loop, key } => annotate::unannotate(body, r#loop, key),
                _ => unreachable!("stage-II primitives"),
            }
            .map_err(err)?;
            self.stage2 = Some(Func { body, ..f });
        }
        self.trace.push(inst);
        Ok(())
    }
}
