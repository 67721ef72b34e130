//! Schedule templates: a search space and, for each of its points, a schedule trace. The
//! decisions a point takes are recorded with the trace, so a tuned schedule is an ordinary RON
//! schedule file.

use crate::space::{Point, Space};
use lacuna_schedule::decompose::{
    enumerate, hyb, panel_width, Candidates, Decomposition, Layout, MatrixStats,
};
use lacuna_schedule::{Instruction, Schedule};
use lacuna_stage1::{AxisKind, Program, Size};
use lacuna_stage2::{Expr, ForKind, Func, Stmt};
use std::collections::BTreeMap;

/// A search space whose points are schedules.
pub trait Template {
    /// The decisions.
    fn space(&self) -> &Space;

    /// The schedule trace of a point, or why the point is not a legal schedule (the
    /// primitive's typed error, as text).
    fn trace(&self, p: &Point) -> Result<Vec<Instruction>, String>;

    /// Features of the point's scheduled program for the cost model (beyond the decisions'
    /// one-hot encoding); empty by default.
    fn features(&self, _p: &Point) -> Vec<f32> {
        Vec::new()
    }
}

/// What the kernel template explores.
#[derive(Clone, Debug)]
pub struct TemplateOptions {
    /// Format decompositions of the sparse input taken from the e-graph (cheapest first by the
    /// extraction cost), besides the stored CSR itself; 0 leaves the format alone.
    pub formats: usize,
    /// Candidate tile sizes of the feature loop (only divisors of its extent are kept).
    pub tiles: Vec<u64>,
    /// Whether to try parallel loops (pointless with one worker thread).
    pub parallel: bool,
    /// SparseTIR's hyb formats to try besides the e-graph's cheapest: (column parts, widest
    /// ELL bucket); column parts keep the dense operand's rows that a part reads in cache.
    pub hyb: Vec<(u32, u32)>,
    /// BSR block sizes to try (`(+ (bsr b) remainder)`: full blocks as BSR, the rest CSR).
    pub bsr: Vec<u32>,
    /// Whether kernels that walk a sparse row innermost (SpMV) also try [`LANES_FORMATS`],
    /// whose rows run as vector lanes.
    pub lanes: bool,
    /// Column-panel widths such kernels also try (`(panels w)`, where the matrix has more
    /// columns than `w`): each panel's rows gather from `w` elements of the dense operand only
    /// (`lacuna tune` passes the host's L2-sized width, as the built-in SpMV schedule uses).
    pub panels: Vec<u32>,
    /// Bytes of the dense operand's rows that a column panel holds for kernels with a feature
    /// loop (SpMM's `B`): they also try `(panels w)` with `w` the power of two of rows of
    /// the feature width nearest below it (at least 16), where the matrix has more columns;
    /// 0 tries none. `lacuna tune` passes half of the host's L2, as the built-in SpMM
    /// schedule's panels hold (`lacuna::driver::spmm_panel_width`).
    pub row_panel_bytes: usize,
    /// Whether such kernels also try their vector lanes' gathers assembled from scalar loads
    /// (the `gathers` decision; `scalar_gathers` takes effect only on hosts where
    /// `lacuna_target::host_assembles_gathers`, which `lacuna tune` passes here).
    pub scalar_gathers: bool,
    /// Bytes of output from which kernels with a feature loop also try each output row
    /// accumulated in registers and stored with streaming stores (the `stores` decision; the
    /// output counted as the matrix's rows times the feature width in f64); `None` tries it
    /// nowhere. `lacuna tune` passes the built-in SpMM schedule's threshold
    /// (`lacuna::driver::SPMM_STREAM_MIN_BYTES`) on hosts with streaming stores.
    pub stream_rows: Option<usize>,
    /// Whether kernels with a feature loop also try `rcm` (the sparse input's rows in reverse
    /// Cuthill–McKee order, so that rows gathering the same rows of the dense operand run
    /// together; `lacuna tune` tries it, as the built-in SpMM schedule may choose it).
    pub row_orders: bool,
    /// Whether the sparse input's values are all equal (a `pattern` file): candidates also
    /// store them once (the `values` decision: `iso_values` after the format, refused by
    /// formats that pad), as the built-in SpMV schedule does (`lacuna tune` sets it from the
    /// data).
    pub iso_values: bool,
}

/// The formats whose rows run as vector lanes ([`lacuna_schedule::lanes`], also the built-in
/// SpMV schedule's): sliced ELL, and DIA where the matrix's entries lie on no more diagonals
/// than it stores.
pub const LANES_FORMATS: [&str; 2] = [lacuna_schedule::lanes::SELL, lacuna_schedule::lanes::DIA];

impl Default for TemplateOptions {
    fn default() -> Self {
        TemplateOptions {
            formats: 5,
            tiles: vec![2, 4, 8, 16, 32, 64],
            parallel: true,
            hyb: vec![(1, 32), (2, 32), (4, 32)],
            bsr: vec![2, 4],
            lanes: true,
            panels: vec![],
            row_panel_bytes: 0,
            scalar_gathers: false,
            stream_rows: None,
            row_orders: false,
            iso_values: false,
        }
    }
}

/// The schedule template of a stage-I kernel with one main sparse iteration (SpMV, SpMM,
/// SDDMM, ...), from its structure and its data:
///
/// - `format`: the sparse input as stored (`csr`), one of the format decompositions that
///   equality saturation finds equivalent and cheapest (hyb buckets, BSR + remainder, padded
///   rows, ...), one of SparseTIR's hyb formats with column parts, or BSR blocks with a CSR
///   remainder; one compute iteration per part. For kernels that walk a sparse row innermost,
///   also [`LANES_FORMATS`] (sliced ELL, DIA), scheduled as the built-in SpMV schedule does:
///   a group's sums in a local cache, its rows as vector lanes; and column panels of the
///   widths in [`TemplateOptions::panels`]; kernels with a feature loop, column panels of
///   [`TemplateOptions::row_panel_bytes`] and, where [`TemplateOptions::row_orders`], `rcm`
///   (every row once, in reverse Cuthill–McKee order);
/// - `tile`: the dense innermost (feature) loop split by a divisor of its extent (the extent
///   specialized, so the split is exact), or not; `T-hoisted` also moves the outer part of the
///   split out of the sparse loop (the row's entries are then read once per tile of features,
///   and a tile's accumulators stay in registers);
/// - `inner`: the innermost feature loop serial, unrolled or vectorized;
/// - `entries` (kernels whose innermost loop walks a sparse row, as SpMV's does, instead of a
///   feature loop): each row's entries serial, as vector lanes, or as vector lanes with the
///   tail masked (`masked`, two registers per step);
/// - `gathers` (with `entries`, where [`TemplateOptions::scalar_gathers`]): the vector lanes'
///   gathers as gather instructions (`hardware`) or assembled from scalar loads (`scalar`:
///   the `scalar_gathers` annotation, which needs unmasked vector lanes);
/// - `stores` (with a feature loop and an output of [`TemplateOptions::stream_rows`] bytes or
///   more): the output as
///   the kernel stores it (`plain`), or each row accumulated in a local cache that replaces
///   its init (`reverse_cache_write` at the row, the hoisted tiles unrolled so the cache stays
///   in registers) and stored once with streaming stores (`streamed`: the `nontemporal`
///   annotation; the stored CSR or `rcm`, and hoisted tiles only);
/// - `parallel`: the outermost loop of every compute iteration serial, or parallel where that
///   is legal (the runtime balances a row loop by stored entries; parts whose rows repeat, as
///   split rows do, stay serial).
///
/// Decisions that do not apply to the kernel (no feature loop, no CSR input) are left out.
#[derive(Clone, Debug)]
pub struct KernelTemplate {
    program: Program,
    space: Space,
    /// The decomposed buffer and each `format` option's term (`None`: as stored).
    buffer: Option<String>,
    formats: Vec<Option<String>>,
    /// The feature loop's variable, size parameter and extent.
    feature: Option<(String, String, u64)>,
    /// Without a feature loop: the variable of the innermost loop when it walks a sparse row.
    entries: Option<String>,
    /// The main iteration's name, row variable and result buffer, which a lanes format's
    /// schedule names; `None` when the kernel tries no lanes format.
    lanes: Option<(String, String, String)>,
    /// The output buffer that the `stores` decision streams.
    output: Option<String>,
    /// The distinct diagonals of the CSR input, to which a DIA format's diagonal loop is
    /// specialized ([`lacuna_schedule::lanes::specialize_diagonals`]).
    diagonals: Option<u64>,
}

/// Vector registers per step of the `entries` decision's `masked` option, which the built-in
/// SpMV schedule uses too (`lacuna::driver::SPMV_MASKED_REGISTERS`, with the measurements).
pub const MASKED_REGISTERS: i64 = 2;

/// The buffer a kernel's main iteration reads as a 2-D CSR (a dense axis and its sparse
/// variable child), if any.
pub fn csr_buffer(p: &Program) -> Option<String> {
    p.buffers
        .iter()
        .filter(|b| b.role == lacuna_stage1::Role::Input && b.axes.len() == 2)
        .find(|b| {
            let a0 = p.axis(&b.axes[0]);
            let a1 = p.axis(&b.axes[1]);
            matches!(
                (a0.map(|a| &a.kind), a1.map(|a| &a.kind)),
                (
                    Some(AxisKind::DenseFixed { .. }),
                    Some(AxisKind::SparseVariable { .. })
                )
            )
        })
        .map(|b| b.name.clone())
}

impl KernelTemplate {
    /// The template of `p` with its sizes bound by `params`; `stats` describes the CSR input
    /// that the `format` decision decomposes (no decomposition without it).
    pub fn new(
        p: &Program,
        params: &BTreeMap<String, i64>,
        stats: Option<&MatrixStats>,
        opts: &TemplateOptions,
    ) -> KernelTemplate {
        let mut space = Space::default();
        let buffer = csr_buffer(p);
        let mut formats: Vec<Option<String>> = vec![None];
        if let (Some(buf), Some(stats)) = (&buffer, stats) {
            if opts.formats > 0 || !opts.hyb.is_empty() || !opts.bsr.is_empty() {
                let terms: Vec<Decomposition> =
                    enumerate(stats, &Candidates::default(), opts.formats + 1);
                let hybs = opts.hyb.iter().filter_map(|&(parts, widest)| {
                    Decomposition::new(hyb(&Candidates::default(), parts, widest)).ok()
                });
                let bsrs = opts.bsr.iter().filter_map(|b| {
                    format!("(+ (bsr {b}) remainder)")
                        .parse::<Decomposition>()
                        .ok()
                });
                let limit = opts.formats + opts.hyb.len() + opts.bsr.len();
                for d in terms
                    .into_iter()
                    .take(opts.formats + 1)
                    .chain(hybs)
                    .chain(bsrs)
                {
                    let term = d.to_string();
                    if term == "csr" || formats.iter().flatten().any(|t| *t == term) {
                        continue;
                    }
                    // Only decompositions this kernel accepts.
                    if decomposes(p, buf, &term) {
                        formats.push(Some(term));
                    }
                    if formats.len() > limit {
                        break;
                    }
                }
            }
        }
        // Without a feature loop: the innermost loop when it walks a sparse row (SpMV's).
        let entries_var = match feature_loop(p, params) {
            None => entry_loop(p),
            Some(_) => None,
        };
        let mut lanes = None;
        if let (true, Some(_), Some(buf), Some(stats)) = (opts.lanes, &entries_var, &buffer, stats)
        {
            lanes = lanes_names(p, buf);
            for term in LANES_FORMATS.into_iter().filter(|_| lanes.is_some()) {
                let fits = match term.parse::<Decomposition>().map(|d| d.layout().clone()) {
                    Ok(Layout::Dia { diagonals, .. }) => stats.diagonals <= diagonals as usize,
                    Ok(_) => true,
                    Err(_) => false,
                };
                if fits && !formats.iter().flatten().any(|t| t == term) && decomposes(p, buf, term)
                {
                    formats.push(Some(term.to_string()));
                }
            }
        }
        // Column panels: SpMV's of the given widths; a feature loop's holding
        // `row_panel_bytes` of the dense operand's rows.
        let feature = feature_loop(p, params);
        let panel_widths: Vec<u32> = match &feature {
            None if entries_var.is_some() => opts.panels.clone(),
            Some((_, _, extent)) if opts.row_panel_bytes > 0 => {
                let row_bytes = (*extent as usize).saturating_mul(std::mem::size_of::<f64>());
                vec![panel_width(opts.row_panel_bytes, row_bytes, 16)]
            }
            _ => vec![],
        };
        if let (Some(buf), Some(stats)) = (&buffer, stats) {
            for width in panel_widths.iter().filter(|&&w| stats.n_cols > w as usize) {
                let term = format!("(panels {width})");
                if !formats.iter().flatten().any(|t| *t == term) && decomposes(p, buf, &term) {
                    formats.push(Some(term));
                }
            }
        }
        if let (true, Some(_), Some(buf)) = (opts.row_orders, &feature, &buffer) {
            if !formats.iter().flatten().any(|t| t == "rcm") && decomposes(p, buf, "rcm") {
                formats.push(Some("rcm".to_string()));
            }
        }
        if opts.iso_values && buffer.is_some() {
            space.push("values", vec!["stored".into(), "one".into()]);
        }
        if formats.len() > 1 {
            space.push(
                "format",
                formats
                    .iter()
                    .map(|f| f.clone().unwrap_or_else(|| "csr".into()))
                    .collect(),
            );
        }
        if let Some((_, _, extent)) = &feature {
            let mut tiles = vec!["none".to_string()];
            let divisors: Vec<u64> = opts
                .tiles
                .iter()
                .copied()
                .filter(|&t| t > 1 && t < *extent && extent % t == 0)
                .collect();
            tiles.extend(divisors.iter().map(|t| t.to_string()));
            tiles.extend(divisors.iter().map(|t| format!("{t}-hoisted")));
            space.push("tile", tiles);
            space.push(
                "inner",
                vec!["serial".into(), "unroll".into(), "vectorize".into()],
            );
        }
        let outputs: Vec<&str> = p
            .buffers
            .iter()
            .filter(|b| b.role == lacuna_stage1::Role::Output)
            .map(|b| b.name.as_str())
            .collect();
        let output = match (opts.stream_rows, &feature, outputs.as_slice(), stats) {
            (Some(min), Some((_, _, extent)), [out], Some(m))
                if m.n_rows
                    .saturating_mul(*extent as usize)
                    .saturating_mul(std::mem::size_of::<f64>())
                    >= min =>
            {
                Some(out.to_string())
            }
            _ => None,
        };
        if output.is_some() {
            space.push("stores", vec!["plain".into(), "streamed".into()]);
        }
        let entries = entries_var;
        if entries.is_some() {
            space.push(
                "entries",
                vec!["serial".into(), "vector".into(), "masked".into()],
            );
        }
        if entries.is_some() && opts.scalar_gathers {
            space.push("gathers", vec!["hardware".into(), "scalar".into()]);
        }
        if opts.parallel {
            space.push("parallel", vec!["serial".into(), "rows".into()]);
        }
        KernelTemplate {
            program: p.clone(),
            space,
            buffer,
            formats,
            feature,
            entries,
            lanes,
            output,
            diagonals: stats.map(|s| s.diagonals as u64),
        }
    }

    /// The program the template schedules.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Applies the point's decisions one primitive at a time (loop names are resolved on the
    /// schedule as it is then) and returns the schedule.
    pub fn schedule(&self, p: &Point) -> Result<Schedule, String> {
        let sp = &self.space;
        let label = |d: &str| sp.label(p, d).unwrap_or_default().to_string();
        if !sp.contains(p) {
            return Err("the point is not in the space".into());
        }
        let mut s = Schedule::new(&self.program).map_err(|e| e.to_string())?;
        let apply = |s: &mut Schedule, inst: Instruction| s.apply(inst).map_err(|e| e.to_string());
        let mut lanes_format = false;
        let mut panels_format = false;
        // `rcm` keeps one stored row per matrix row: its rows may be streamed as the CSR's.
        let mut whole_rows = true;
        if let Some(i) = sp.decisions.iter().position(|d| d.name == "format") {
            if let (Some(term), Some(buf)) = (&self.formats[p[i]], &self.buffer) {
                apply(
                    &mut s,
                    Instruction::DecomposeFormat {
                        buffer: buf.clone(),
                        into: term.clone(),
                    },
                )?;
                lanes_format = LANES_FORMATS.contains(&term.as_str());
                let dia = matches!(
                    term.parse::<Decomposition>().map(|d| d.layout().clone()),
                    Ok(Layout::Dia { .. })
                );
                if let (true, Some(n)) = (dia, self.diagonals.filter(|&n| n > 0)) {
                    apply(&mut s, lacuna_schedule::lanes::specialize_diagonals(buf, n))?;
                }
                panels_format = term.starts_with("(panels");
                whole_rows = term == "rcm";
            }
        }
        if let (Some(buf), "one") = (&self.buffer, label("values").as_str()) {
            apply(
                &mut s,
                Instruction::IsoValues {
                    buffer: buf.clone(),
                },
            )?;
        }
        if let (true, Some((it, row, out))) = (lanes_format, &self.lanes) {
            if label("entries") != "serial" {
                return Err(
                    "`entries` walks rows one at a time: a lanes format runs them across lanes"
                        .into(),
                );
            }
            for inst in lacuna_schedule::lanes::lanes_trace(it, row, out) {
                apply(&mut s, inst)?;
            }
            if label("gathers") == "scalar" {
                apply(
                    &mut s,
                    Instruction::Annotate {
                        r#loop: lacuna_schedule::lanes::lanes_loop(it, row),
                        key: "scalar_gathers".into(),
                        value: 1,
                    },
                )?;
            }
        } else if label("gathers") == "scalar" && label("entries") != "vector" {
            return Err(
                "`gathers: scalar` assembles the gathers of unmasked vector lanes: `entries` must be `vector` or the format a lanes format"
                    .into(),
            );
        }
        if let Some((var, param, _)) = &self.feature {
            let tile_label = label("tile");
            let hoist = tile_label.ends_with("-hoisted");
            let tile = tile_label.trim_end_matches("-hoisted").parse::<u64>().ok();
            let inner = label("inner");
            let mut hoisted = 0;
            if tile.is_some() {
                let extent = self.feature.as_ref().map_or(0, |f| f.2);
                apply(
                    &mut s,
                    Instruction::Specialize {
                        param: param.clone(),
                        value: extent,
                    },
                )?;
            }
            for block in compute_blocks(&s, var)? {
                let loops = s.get_loops(&block).map_err(|e| e.to_string())?;
                let Some(k) = loops.last().cloned() else {
                    continue;
                };
                let mut innermost = k.clone();
                if let Some(t) = tile {
                    apply(
                        &mut s,
                        Instruction::Split {
                            r#loop: k,
                            factors: vec![None, Some(t)],
                        },
                    )?;
                    let loops = s.get_loops(&block).map_err(|e| e.to_string())?;
                    let n = loops.len();
                    // Init nests (`C[i, k] = 0`) have no sparse loop to leave.
                    if hoist && n >= 4 {
                        hoisted += 1;
                        apply(
                            &mut s,
                            Instruction::Reorder {
                                loops: vec![loops[n - 2].clone(), loops[n - 3].clone()],
                            },
                        )?;
                    }
                    let loops = s.get_loops(&block).map_err(|e| e.to_string())?;
                    innermost = loops.last().cloned().unwrap_or_default();
                }
                match inner.as_str() {
                    "unroll" => apply(&mut s, Instruction::Unroll { r#loop: innermost })?,
                    "vectorize" => apply(&mut s, Instruction::Vectorize { r#loop: innermost })?,
                    _ => {}
                }
            }
            if hoist && hoisted == 0 {
                return Err("no feature loop inside a sparse loop to hoist".into());
            }
            if let (Some(out), "streamed") = (&self.output, label("stores").as_str()) {
                if !hoist || !whole_rows {
                    return Err(
                        "`stores: streamed` keeps a row of the stored CSR in registers: `tile` must be hoisted and `format` csr or rcm"
                            .into(),
                    );
                }
                // The reductions (row, tiles, entries, features), not their inits, which
                // the caches take over.
                let mut rows = Vec::new();
                for block in compute_blocks(&s, var)? {
                    let loops = s.get_loops(&block).map_err(|e| e.to_string())?;
                    if let [row, tiles, _, _, ..] = loops.as_slice() {
                        rows.push((block, row.clone(), tiles.clone()));
                    }
                }
                for (block, row, tiles) in rows {
                    for inst in
                        lacuna_schedule::stream::streamed_rows_trace(&block, out, &row, &tiles)
                    {
                        apply(&mut s, inst)?;
                    }
                }
            }
        }
        if let (false, Some(var)) = (lanes_format, &self.entries) {
            let how = label("entries");
            if how == "vector" || how == "masked" {
                for block in compute_blocks(&s, var)? {
                    let loops = s.get_loops(&block).map_err(|e| e.to_string())?;
                    let Some(j) = loops.last().cloned() else {
                        continue;
                    };
                    apply(&mut s, Instruction::Vectorize { r#loop: j.clone() })?;
                    if label("gathers") == "scalar" {
                        apply(
                            &mut s,
                            Instruction::Annotate {
                                r#loop: j.clone(),
                                key: "scalar_gathers".into(),
                                value: 1,
                            },
                        )?;
                    }
                    if how == "masked" {
                        apply(
                            &mut s,
                            Instruction::Annotate {
                                r#loop: j,
                                key: "masked".into(),
                                value: MASKED_REGISTERS,
                            },
                        )?;
                    }
                }
            }
        }
        if label("parallel") == "rows" {
            let mut done: Vec<String> = Vec::new();
            let mut refused: Option<String> = None;
            let var = self.feature.as_ref().map(|f| f.0.clone());
            let blocks = match &var {
                Some(v) => compute_blocks(&s, v)?,
                None => s.get_blocks().map_err(|e| e.to_string())?,
            };
            for block in blocks {
                let loops = s.get_loops(&block).map_err(|e| e.to_string())?;
                let Some(outer) = loops.first() else { continue };
                let bare = outer.rsplit(':').next().unwrap_or(outer).to_string();
                if done.contains(&bare) && !outer.contains(':') {
                    continue;
                }
                if loops
                    .iter()
                    .take(2)
                    .any(|l| is_parallel(&s, l).unwrap_or(false))
                {
                    continue;
                }
                // Parts whose rows repeat (split rows) carry a dependence: they stay serial.
                // Column panels write a row once per panel: their panel loop stays serial and
                // each panel's rows (the next loop) run in parallel.
                let panels = panels_format && loops.len() > 1;
                let target = if panels { &loops[1] } else { outer };
                match apply(
                    &mut s,
                    Instruction::Parallel {
                        r#loop: target.clone(),
                    },
                ) {
                    Ok(()) => done.push(bare),
                    Err(e) => refused = Some(e),
                }
            }
            if done.is_empty() {
                return Err(refused.unwrap_or_else(|| "no loop to run in parallel".into()));
            }
        }
        Ok(s)
    }
}

/// Whether kernel `p` accepts `buffer` decomposed into `term`.
fn decomposes(p: &Program, buffer: &str, term: &str) -> bool {
    let inst = Instruction::DecomposeFormat {
        buffer: buffer.to_string(),
        into: term.to_string(),
    };
    Schedule::replay(p, &[inst]).is_ok()
}

/// Whether the loop `name` (as `get_loops` names it) is already parallel.
fn is_parallel(s: &Schedule, name: &str) -> Result<bool, String> {
    let f = s.stage2().map_err(|e| e.to_string())?;
    let (block, var) = match name.split_once(':') {
        Some((b, v)) => (Some(b), v),
        None => (None, name),
    };
    fn go(stmts: &[Stmt], block: Option<&str>, var: &str) -> Option<bool> {
        for st in stmts {
            match st {
                Stmt::For {
                    var: v, kind, body, ..
                } => {
                    if v == var && (block.is_none() || contains_block(body, block.unwrap_or(""))) {
                        return Some(*kind == ForKind::Parallel);
                    }
                    if let Some(r) = go(body, block, var) {
                        return Some(r);
                    }
                }
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    if let Some(r) = go(then_body, block, var).or_else(|| go(else_body, block, var))
                    {
                        return Some(r);
                    }
                }
                Stmt::Block { init, body, .. } => {
                    if let Some(r) = go(init, block, var).or_else(|| go(body, block, var)) {
                        return Some(r);
                    }
                }
                Stmt::While { body, .. } => {
                    if let Some(r) = go(body, block, var) {
                        return Some(r);
                    }
                }
                _ => {}
            }
        }
        None
    }
    Ok(go(&f.body, block, var).unwrap_or(false))
}

fn contains_block(stmts: &[Stmt], name: &str) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::For { body, .. } | Stmt::While { body, .. } => contains_block(body, name),
        Stmt::If {
            then_body,
            else_body,
            ..
        } => contains_block(then_body, name) || contains_block(else_body, name),
        Stmt::Block {
            name: n,
            init,
            body,
            ..
        } => n == name || contains_block(init, name) || contains_block(body, name),
        _ => false,
    })
}

/// The blocks whose innermost enclosing loop iterates the feature variable `var` (or a part of
/// it after a split), in program order.
fn compute_blocks(s: &Schedule, var: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for b in s.get_blocks().map_err(|e| e.to_string())? {
        let loops = s.get_loops(&b).map_err(|e| e.to_string())?;
        if let Some(last) = loops.last() {
            let bare = last.rsplit(':').next().unwrap_or(last);
            if bare == var || bare.starts_with(&format!("{var}.")) {
                out.push(b);
            }
        }
    }
    Ok(out)
}

/// The innermost loop of `p`'s first iteration when its axis is sparse (SpMV's `j`, a row's
/// entries): its variable.
/// The name, row variable and result buffer of the iteration of `p` that reads the CSR buffer
/// `buf` (for a lanes format's schedule: its part's blocks and loops are named after them).
fn lanes_names(p: &Program, buf: &str) -> Option<(String, String, String)> {
    let rows = p.buffer(buf)?.axes.first()?.clone();
    p.iterations().into_iter().find_map(|it| {
        let pos = it.axes.iter().position(|a| *a == rows)?;
        let out = it.body.iter().find_map(|st| match st {
            lacuna_stage1::Stmt::Store(x) => Some(x.buffer.clone()),
            _ => None,
        })?;
        Some((it.name.clone(), it.vars.get(pos)?.clone(), out))
    })
}

fn entry_loop(p: &Program) -> Option<String> {
    let it = p.iterations().into_iter().next()?;
    let axis = p.axis(it.axes.last()?)?;
    match axis.kind {
        AxisKind::SparseVariable { .. } => it.vars.last().cloned(),
        _ => None,
    }
}

/// The feature loop of `p`'s first iteration: its innermost axis when that is dense with a
/// size parameter bound in `params` (SpMM's and SDDMM's `k`): variable, parameter, extent.
fn feature_loop(p: &Program, params: &BTreeMap<String, i64>) -> Option<(String, String, u64)> {
    let it = p.iterations().into_iter().next()?;
    if it.axes.len() < 2 {
        return None;
    }
    let axis = p.axis(it.axes.last()?)?;
    let AxisKind::DenseFixed {
        n: Size::Param(param),
    } = &axis.kind
    else {
        return None;
    };
    let extent = u64::try_from(*params.get(param)?).ok().filter(|&e| e > 0)?;
    Some((it.vars.last()?.clone(), param.clone(), extent))
}

impl Template for KernelTemplate {
    fn space(&self) -> &Space {
        &self.space
    }

    fn trace(&self, p: &Point) -> Result<Vec<Instruction>, String> {
        Ok(self.schedule(p)?.trace().to_vec())
    }

    fn features(&self, p: &Point) -> Vec<f32> {
        match self
            .schedule(p)
            .and_then(|s| s.stage2().map_err(|e| e.to_string()))
        {
            Ok(f) => program_features(&f),
            Err(_) => vec![0.0; PROGRAM_FEATURES],
        }
    }
}

/// Number of features [`program_features`] returns.
pub const PROGRAM_FEATURES: usize = 8;

/// Features of a stage-II function for the cost model: loops, nesting depth, parallel,
/// vectorized and unrolled loops, blocks, the largest constant innermost extent (log2), stores.
pub fn program_features(f: &Func) -> Vec<f32> {
    #[derive(Default)]
    struct Acc {
        loops: f32,
        depth: f32,
        parallel: f32,
        vector: f32,
        unrolled: f32,
        blocks: f32,
        inner_extent: f32,
        stores: f32,
    }
    fn go(stmts: &[Stmt], depth: usize, a: &mut Acc) {
        for s in stmts {
            match s {
                Stmt::For {
                    kind,
                    body,
                    start,
                    end,
                    ..
                } => {
                    a.loops += 1.0;
                    a.depth = a.depth.max((depth + 1) as f32);
                    match kind {
                        ForKind::Parallel => a.parallel += 1.0,
                        ForKind::Vectorized => a.vector += 1.0,
                        ForKind::Unrolled => a.unrolled += 1.0,
                        _ => {}
                    }
                    let innermost = !body.iter().any(|b| matches!(b, Stmt::For { .. }));
                    if innermost {
                        if let (Expr::Int(s0, _), Expr::Int(e0, _)) = (start, end) {
                            let ext = (e0 - s0).max(1) as f32;
                            a.inner_extent = a.inner_extent.max(ext.log2());
                        }
                    }
                    go(body, depth + 1, a);
                }
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    go(then_body, depth, a);
                    go(else_body, depth, a);
                }
                Stmt::Block { init, body, .. } => {
                    a.blocks += 1.0;
                    go(init, depth, a);
                    go(body, depth, a);
                }
                Stmt::While { body, .. } => go(body, depth + 1, a),
                Stmt::Store { .. } => a.stores += 1.0,
                _ => {}
            }
        }
    }
    let mut a = Acc::default();
    go(&f.body, 0, &mut a);
    vec![
        a.loops,
        a.depth,
        a.parallel,
        a.vector,
        a.unrolled,
        a.blocks,
        a.inner_extent,
        a.stores,
    ]
}
