//! The conversion routines: build each part's storage of a decomposition from a CSR matrix
//! ([`materialize`]), or only its structure and where each value slot's entry lies in the CSR
//! matrix ([`inspect`]), for a generated value copy.
//!
//! Evaluation follows the module's semantics on concrete entries: a context is the set of
//! entries a node sees (non-empty rows with the CSR positions of their entries), and each node
//! returns the entries it left unstored.

use super::error::DecomposeError;
use super::lang::{Decomposition, Layout};
use super::matrix::CsrMatrix;
use super::parts::{
    BsrStorage, DiaStorage, EllStorage, Filter, PaddedStorage, PanelsStorage, Part, RowsStorage,
    SellStorage, Storage,
};
use super::stats::part_width;

/// The most slots (entries plus padding) one part may hold.
pub const MAX_PART_SLOTS: usize = 1 << 28;

/// Non-empty rows in increasing order, each with the positions of its entries in column order.
type Context = Vec<(usize, Positions)>;

/// The positions in the CSR matrix of one row's entries in a context, in column order: a range
/// of the row's storage while no node has picked some of them (so that the root context of a
/// large matrix costs no list of its positions), a list once one has.
#[derive(Clone, Debug)]
enum Positions {
    Range(std::ops::Range<usize>),
    List(Vec<usize>),
}

/// The iterator of [`Positions::iter`].
#[derive(Clone)]
enum PositionsIter<'a> {
    Range(std::ops::Range<usize>),
    List(std::iter::Copied<std::slice::Iter<'a, usize>>),
}

impl Iterator for PositionsIter<'_> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        match self {
            PositionsIter::Range(r) => r.next(),
            PositionsIter::List(l) => l.next(),
        }
    }
    fn nth(&mut self, n: usize) -> Option<usize> {
        match self {
            PositionsIter::Range(r) => r.nth(n),
            PositionsIter::List(l) => l.nth(n),
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            PositionsIter::Range(r) => r.size_hint(),
            PositionsIter::List(l) => l.size_hint(),
        }
    }
}

impl Positions {
    fn len(&self) -> usize {
        match self {
            Positions::Range(r) => r.len(),
            Positions::List(l) => l.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn iter(&self) -> PositionsIter<'_> {
        match self {
            Positions::Range(r) => PositionsIter::Range(r.clone()),
            Positions::List(l) => PositionsIter::List(l.iter().copied()),
        }
    }

    /// The positions after the first `n`.
    fn skip(self, n: usize) -> Positions {
        match self {
            Positions::Range(r) => Positions::Range(r.start.saturating_add(n).min(r.end)..r.end),
            Positions::List(mut l) => {
                l.drain(..n.min(l.len()));
                Positions::List(l)
            }
        }
    }

    /// Splits the positions by `keep` into those it holds for and the others (lists, in order).
    fn partition(&self, keep: impl FnMut(&usize) -> bool) -> (Positions, Positions) {
        let (i, o): (Vec<usize>, Vec<usize>) = self.iter().partition(keep);
        (Positions::List(i), Positions::List(o))
    }
}

/// Builds the storage of every part of `decomposition` from `csr`, in left-to-right order of the
/// leaves; every leaf yields one part, possibly empty.
///
/// Summing the parts ([`to_coo`](super::to_coo)) gives back exactly the entries of `csr`.
pub fn materialize(
    csr: &CsrMatrix,
    decomposition: &Decomposition,
) -> Result<Vec<Part>, DecomposeError> {
    Ok(build(csr, decomposition, true)?.parts)
}

/// The inspector half of a conversion: the structure of every part and, per stored slot, where
/// its value comes from; the values themselves are left to a generated copy.
#[derive(Clone, Debug, PartialEq)]
pub struct Inspection {
    /// The parts as [`materialize`] builds them, except that every value is 0.
    pub parts: Vec<Part>,
    /// Per part, one entry per value slot in storage order (`values` of the part's storage): the
    /// position in `csr`'s storage (`indices`/`values`) of the entry stored there, or -1 for a
    /// padding slot. Copying `csr.values[src]` (0 for -1) gives [`materialize`]'s values.
    pub sources: Vec<Vec<i64>>,
}

/// Builds the structure of every part of `decomposition` from `csr` and the map from each value
/// slot to its entry in `csr` (see [`Inspection`]), without copying a value.
///
/// The structure is the one [`materialize`] builds, for any values of `csr`: only its pattern is
/// read.
pub fn inspect(
    csr: &CsrMatrix,
    decomposition: &Decomposition,
) -> Result<Inspection, DecomposeError> {
    build(csr, decomposition, false)
}

/// Where the parts go while the tree is walked.
struct Out {
    /// Whether to copy the values (else they stay 0).
    values: bool,
    parts: Vec<Part>,
    sources: Vec<Vec<i64>>,
}

fn build(
    csr: &CsrMatrix,
    decomposition: &Decomposition,
    values: bool,
) -> Result<Inspection, DecomposeError> {
    csr.validate()?;
    let mut out = Out {
        values,
        parts: Vec::new(),
        sources: Vec::new(),
    };
    // Every row's range of positions, not a list of them: a list per row, as large as the
    // matrix, cost 0.4-1.0 s of rmat-large's 6-7 s conversion to panels (session 24).
    let context: Context = csr
        .row_ranges()
        .filter(|(_, range)| !range.is_empty())
        .map(|(r, range)| (r, Positions::Range(range)))
        .collect();
    let left = walk(
        csr,
        decomposition.layout(),
        context,
        &mut Vec::new(),
        &mut out,
    )?;
    assert!(
        left.is_empty(),
        "a total decomposition left {} rows unstored",
        left.len()
    );
    let Out {
        mut parts, sources, ..
    } = out;
    let mut writes = vec![0u32; csr.n_rows];
    let written: Vec<Vec<usize>> = parts.iter().map(Part::written_rows).collect();
    for &row in written.iter().flatten() {
        writes[row] = writes[row].saturating_add(1);
    }
    for (part, rows) in parts.iter_mut().zip(&written) {
        part.accumulate = rows.iter().any(|&r| writes[r] > 1);
    }
    Ok(Inspection { parts, sources })
}

fn walk(
    csr: &CsrMatrix,
    layout: &Layout,
    context: Context,
    filters: &mut Vec<Filter>,
    out: &mut Out,
) -> Result<Context, DecomposeError> {
    let copy = out.values;
    let mut push = |(storage, sources): (Storage, Vec<i64>)| {
        out.parts.push(Part {
            leaf: layout.clone(),
            filters: filters.clone(),
            storage,
            accumulate: false,
        });
        out.sources.push(sources);
    };
    match layout {
        Layout::Csr | Layout::Remainder => {
            let (m, sources) = to_csr(csr, copy, &context);
            push((Storage::Csr(m), sources));
            Ok(Vec::new())
        }
        Layout::Ell { width } => {
            let width = *width as usize;
            let kept = context.iter().map(|(r, p)| (*r, p.iter().take(width)));
            let (e, sources) = ell(csr, copy, "ell", width, kept)?;
            push((Storage::Ell(e), sources));
            Ok(context
                .into_iter()
                .filter(|(_, p)| p.len() > width)
                .map(|(r, p)| (r, p.skip(width)))
                .collect())
        }
        Layout::SplitRows { width } => {
            let width = *width as usize;
            let chunks = context.iter().flat_map(|(r, p)| {
                (0..p.len())
                    .step_by(width.max(1))
                    .map(move |start| (*r, p.iter().skip(start).take(width)))
            });
            let (e, sources) = ell(csr, copy, "split_rows", width, chunks)?;
            push((Storage::SplitRows(e), sources));
            Ok(Vec::new())
        }
        Layout::Padded { tile } => {
            let (s, sources) = padded(csr, copy, &context, *tile as usize)?;
            push((Storage::Padded(s), sources));
            Ok(Vec::new())
        }
        Layout::Sell { lanes, sigma } => {
            let (s, sources) = sell(csr, copy, &context, *lanes as usize, *sigma as usize)?;
            push((Storage::Sell(s), sources));
            Ok(Vec::new())
        }
        Layout::Panels { width } => {
            let rows = || context.iter().map(|(r, p)| (*r, p.iter()));
            let (s, sources) = panels(csr, copy, rows, *width as usize)?;
            push((Storage::Panels(s), sources));
            Ok(Vec::new())
        }
        Layout::Rcm => {
            let (s, sources) = rcm(csr, copy)?;
            push((Storage::Rows(s), sources));
            Ok(Vec::new())
        }
        Layout::Dia { diagonals, lanes } => {
            let (s, sources) = dia(csr, copy, &context, *diagonals as usize, *lanes as usize)?;
            push((Storage::Dia(s), sources));
            Ok(Vec::new())
        }
        Layout::Bsr { block } => {
            let (storage, sources, left) = bsr(csr, copy, context, *block as usize)?;
            push((Storage::Bsr(storage), sources));
            Ok(left)
        }
        Layout::Bucket { lo, hi, inner } => {
            let range = *lo as usize..*hi as usize;
            let (inside, outside): (Context, Context) = context
                .into_iter()
                .partition(|(_, p)| range.contains(&p.len()));
            filters.push(Filter::Bucket { lo: *lo, hi: *hi });
            let left = walk(csr, inner, inside, filters, out);
            filters.pop();
            Ok(merge(left?, outside))
        }
        Layout::ColPart {
            parts: k,
            part,
            inner,
        } => {
            let width = part_width(csr.n_cols, *k);
            let start = width.saturating_mul(*part as usize);
            let columns = start..start.saturating_add(width);
            let (mut inside, mut outside) = (Vec::new(), Vec::new());
            for (row, positions) in context {
                let (i, o) = positions.partition(|&k| columns.contains(&csr.indices[k]));
                if !i.is_empty() {
                    inside.push((row, i));
                }
                if !o.is_empty() {
                    outside.push((row, o));
                }
            }
            filters.push(Filter::ColPart {
                parts: *k,
                part: *part,
            });
            let left = walk(csr, inner, inside, filters, out);
            filters.pop();
            Ok(merge(left?, outside))
        }
        Layout::Sum(a, b) => {
            let left = walk(csr, a, context, filters, out)?;
            walk(csr, b, left, filters, out)
        }
    }
}

/// Merges two contexts with disjoint entries.
fn merge(a: Context, b: Context) -> Context {
    let mut out: Context = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        // The rows in order; a row in both gets the positions of both, sorted.
        let next = match (a.peek().map(|x| x.0), b.peek().map(|y| y.0)) {
            (Some(x), Some(y)) if x == y => a.next().zip(b.next()).map(|((row, p), (_, q))| {
                let mut both: Vec<usize> = p.iter().chain(q.iter()).collect();
                both.sort_unstable();
                (row, Positions::List(both))
            }),
            (Some(x), Some(y)) if x < y => a.next(),
            (Some(_), None) => a.next(),
            _ => b.next(),
        };
        match next {
            Some(row) => out.push(row),
            None => return out,
        }
    }
}

fn too_large(op: &'static str, slots: usize) -> DecomposeError {
    DecomposeError::StorageTooLarge {
        op,
        slots,
        limit: MAX_PART_SLOTS,
    }
}

/// The position of entry `k` of the CSR matrix as a source (positions fit: they index memory).
fn source(k: usize) -> i64 {
    k as i64
}

fn to_csr(csr: &CsrMatrix, copy: bool, context: &Context) -> (CsrMatrix, Vec<i64>) {
    let mut indptr = vec![0; csr.n_rows + 1];
    let (mut indices, mut values, mut sources) = (Vec::new(), Vec::new(), Vec::new());
    for (row, positions) in context {
        indptr[row + 1] = positions.len();
        indices.extend(positions.iter().map(|k| csr.indices[k]));
        sources.extend(positions.iter().map(source));
        if copy {
            values.extend(positions.iter().map(|k| csr.values[k]));
        }
    }
    if !copy {
        values = vec![0.0; indices.len()];
    }
    for r in 0..csr.n_rows {
        indptr[r + 1] += indptr[r];
    }
    let m = CsrMatrix {
        n_rows: csr.n_rows,
        n_cols: csr.n_cols,
        indptr,
        indices,
        values,
    };
    (m, sources)
}

/// One ELL row of `width` slots per `(row, positions)` item (at most `width` positions each).
fn ell<P: Iterator<Item = usize>>(
    csr: &CsrMatrix,
    copy: bool,
    op: &'static str,
    width: usize,
    rows: impl Iterator<Item = (usize, P)> + Clone,
) -> Result<(EllStorage, Vec<i64>), DecomposeError> {
    let n = rows.clone().count();
    let slots = n
        .checked_mul(width)
        .filter(|s| *s <= MAX_PART_SLOTS)
        .ok_or_else(|| too_large(op, n.saturating_mul(width)))?;
    let mut storage = EllStorage {
        width,
        rows: Vec::with_capacity(n),
        indices: vec![0; slots],
        values: vec![0.0; slots],
        mask: vec![false; slots],
    };
    let mut sources = vec![-1; slots];
    for (i, (row, positions)) in rows.enumerate() {
        storage.rows.push(row);
        for (j, k) in positions.enumerate() {
            storage.indices[i * width + j] = csr.indices[k];
            if copy {
                storage.values[i * width + j] = csr.values[k];
            }
            storage.mask[i * width + j] = true;
            sources[i * width + j] = source(k);
        }
    }
    Ok((storage, sources))
}

fn padded(
    csr: &CsrMatrix,
    copy: bool,
    context: &Context,
    tile: usize,
) -> Result<(PaddedStorage, Vec<i64>), DecomposeError> {
    let mut indptr = vec![0usize; csr.n_rows + 1];
    for (row, positions) in context {
        indptr[row + 1] = positions.len().div_ceil(tile).saturating_mul(tile);
    }
    for r in 0..csr.n_rows {
        indptr[r + 1] = indptr[r + 1].saturating_add(indptr[r]);
    }
    let slots = indptr[csr.n_rows];
    if slots > MAX_PART_SLOTS {
        return Err(too_large("padded", slots));
    }
    let mut storage = PaddedStorage {
        tile,
        indptr,
        indices: vec![0; slots],
        values: vec![0.0; slots],
        mask: vec![false; slots],
    };
    let mut sources = vec![-1; slots];
    for (row, positions) in context {
        let start = storage.indptr[*row];
        for (j, k) in positions.iter().enumerate() {
            storage.indices[start + j] = csr.indices[k];
            if copy {
                storage.values[start + j] = csr.values[k];
            }
            storage.mask[start + j] = true;
            sources[start + j] = source(k);
        }
    }
    Ok((storage, sources))
}

/// SELL-C-σ of the context's rows (see [`Layout::Sell`]): sorted by decreasing length (stable)
/// within windows of `sigma` rows, then cut into groups of `lanes`.
fn sell(
    csr: &CsrMatrix,
    copy: bool,
    context: &Context,
    lanes: usize,
    sigma: usize,
) -> Result<(SellStorage, Vec<i64>), DecomposeError> {
    let mut order: Vec<&(usize, Positions)> = context.iter().collect();
    for window in order.chunks_mut(sigma.max(1)) {
        window.sort_by_key(|(_, p)| std::cmp::Reverse(p.len()));
    }
    let lanes = lanes.max(1);
    let groups: Vec<&[&(usize, Positions)]> = order.chunks(lanes).collect();
    let mut steps = Vec::with_capacity(groups.len() + 1);
    steps.push(0usize);
    for g in &groups {
        let width = g.iter().map(|(_, p)| p.len()).max().unwrap_or(0);
        let next = steps[steps.len() - 1].saturating_add(width);
        steps.push(next);
    }
    let total = steps[groups.len()];
    let slots = total
        .checked_mul(lanes)
        .filter(|s| *s <= MAX_PART_SLOTS)
        .ok_or_else(|| too_large("sell", total.saturating_mul(lanes)))?;
    let mut storage = SellStorage {
        lanes,
        sigma,
        rows: Vec::with_capacity(groups.len() * lanes),
        steps,
        indices: vec![0; slots],
        values: vec![0.0; slots],
        mask: vec![false; slots],
    };
    let mut sources = vec![-1; slots];
    for (g, group) in groups.iter().enumerate() {
        let first = group.first().map_or(0, |(r, _)| *r);
        for l in 0..lanes {
            let Some((row, positions)) = group.get(l) else {
                storage.rows.push(first);
                continue;
            };
            storage.rows.push(*row);
            for (q, k) in positions.iter().enumerate() {
                let slot = (storage.steps[g] + q) * lanes + l;
                storage.indices[slot] = csr.indices[k];
                if copy {
                    storage.values[slot] = csr.values[k];
                }
                storage.mask[slot] = true;
                sources[slot] = source(k);
            }
        }
    }
    Ok((storage, sources))
}

/// The entries of `rows()` (non-empty rows in increasing order, each with the positions of its
/// entries in `csr` in column order) in column panels of `width` columns (see
/// [`Layout::Panels`]).
fn panels<R, P>(
    csr: &CsrMatrix,
    copy: bool,
    rows: impl Fn() -> R,
    width: usize,
) -> Result<(PanelsStorage, Vec<i64>), DecomposeError>
where
    R: Iterator<Item = (usize, P)>,
    P: Iterator<Item = usize>,
{
    let width = width.max(1);
    let n_panels = csr.n_cols.div_ceil(width);
    // Panel rows and entries per panel (a row's positions are in column order, so its panels
    // come in increasing order).
    let (mut rows_in, mut entries_in) = (vec![0usize; n_panels + 1], vec![0usize; n_panels + 1]);
    for (_, positions) in rows() {
        let mut last = usize::MAX;
        for k in positions {
            let p = csr.indices[k] / width;
            entries_in[p + 1] += 1;
            if p != last {
                rows_in[p + 1] += 1;
                last = p;
            }
        }
    }
    for p in 0..n_panels {
        rows_in[p + 1] += rows_in[p];
        entries_in[p + 1] += entries_in[p];
    }
    let (n_rows, nnz) = (rows_in[n_panels], entries_in[n_panels]);
    if nnz > MAX_PART_SLOTS || n_rows > MAX_PART_SLOTS {
        return Err(too_large("panels", nnz.max(n_rows)));
    }
    let mut storage = PanelsStorage {
        width,
        panel_rows: rows_in.clone(),
        rows: vec![0; n_rows],
        indptr: vec![0; n_rows + 1],
        indices: vec![0; nnz],
        values: vec![0.0; nnz],
    };
    let mut sources = vec![-1; nnz];
    // The next panel row and entry of each panel.
    let (mut next_row, mut next_entry) = (rows_in, entries_in);
    for (row, positions) in rows() {
        let mut last = usize::MAX;
        for k in positions {
            let p = csr.indices[k] / width;
            if p != last {
                let r = next_row[p];
                next_row[p] += 1;
                storage.rows[r] = row;
                storage.indptr[r] = next_entry[p];
                last = p;
            }
            let e = next_entry[p];
            next_entry[p] += 1;
            storage.indices[e] = csr.indices[k];
            if copy {
                storage.values[e] = csr.values[k];
            }
            sources[e] = source(k);
        }
    }
    // Panel rows follow each other, panel after panel: each ends where the next starts.
    storage.indptr[n_rows] = nnz;
    Ok((storage, sources))
}

/// Every entry of `csr` as CSR over every matrix row with row ids, rows in reverse
/// Cuthill–McKee order (see [`Layout::Rcm`]: only the whole decomposition, whose context is
/// the whole matrix, so each row's entries are its range of `csr`).
fn rcm(csr: &CsrMatrix, copy: bool) -> Result<(RowsStorage, Vec<i64>), DecomposeError> {
    let nnz = csr.nnz();
    // The order takes a slot per row and per column.
    let slots = nnz.max(csr.n_rows).max(csr.n_cols);
    if slots > MAX_PART_SLOTS {
        return Err(too_large("rcm", slots));
    }
    let rows = super::order::rcm_rows(csr.n_rows, csr.n_cols, &csr.indptr, &csr.indices);
    let mut storage = RowsStorage {
        indptr: Vec::with_capacity(rows.len() + 1),
        indices: Vec::with_capacity(nnz),
        values: Vec::with_capacity(nnz),
        rows,
    };
    let mut sources = Vec::with_capacity(nnz);
    storage.indptr.push(0);
    for &row in &storage.rows {
        // A validated matrix's row range (nothing for one that falls outside).
        let start = csr.indptr.get(row).copied().unwrap_or(0);
        let end = csr.indptr.get(row + 1).copied().unwrap_or(start).max(start);
        let range = if end <= csr.indices.len() {
            start..end
        } else {
            0..0
        };
        storage
            .indices
            .extend_from_slice(&csr.indices[range.clone()]);
        if copy {
            let values = csr.values.get(range.clone()).unwrap_or_default();
            storage.values.extend_from_slice(values);
        }
        sources.extend(range.map(source));
        storage.indptr.push(storage.indices.len());
    }
    if !copy {
        storage.values = vec![0.0; storage.indices.len()];
    }
    Ok((storage, sources))
}

/// DIA of the context's entries (see [`Layout::Dia`]): its distinct diagonals, at most
/// `diagonals` of them, over every matrix row in blocks of `lanes`.
fn dia(
    csr: &CsrMatrix,
    copy: bool,
    context: &Context,
    diagonals: usize,
    lanes: usize,
) -> Result<(DiaStorage, Vec<i64>), DecomposeError> {
    let lanes = lanes.max(1);
    let entries = context
        .iter()
        .flat_map(|(row, positions)| positions.iter().map(|k| (*row, csr.indices[k])));
    let offsets = super::stats::diagonals(csr.n_rows, csr.n_cols, entries);
    if offsets.len() > diagonals {
        return Err(DecomposeError::TooManyDiagonals {
            found: offsets.len(),
            limit: diagonals,
            first_beyond: offsets[diagonals],
        });
    }
    // The part's diagonal of each diagonal `k - shift` (validated entries lie on one of them).
    let shift = csr.n_rows.saturating_sub(1);
    let mut index = vec![usize::MAX; (csr.n_rows + csr.n_cols).saturating_sub(1)];
    for (d, &off) in offsets.iter().enumerate() {
        index[(off + shift as i64) as usize] = d;
    }
    let blocks = csr.n_rows.div_ceil(lanes);
    let slots = blocks
        .checked_mul(lanes)
        .and_then(|s| s.checked_mul(offsets.len()))
        .filter(|s| *s <= MAX_PART_SLOTS)
        .ok_or_else(|| {
            too_large(
                "dia",
                blocks.saturating_mul(lanes).saturating_mul(offsets.len()),
            )
        })?;
    let mut storage = DiaStorage {
        lanes,
        n_rows: csr.n_rows,
        values: vec![0.0; slots],
        mask: vec![false; slots],
        offsets,
    };
    let mut sources = vec![-1; slots];
    for (row, positions) in context {
        let (b, l) = (row / lanes, row % lanes);
        for k in positions.iter() {
            let d = index[csr.indices[k] + shift - row];
            let slot = (d * blocks + b) * lanes + l;
            if copy {
                storage.values[slot] = csr.values[k];
            }
            storage.mask[slot] = true;
            sources[slot] = source(k);
        }
    }
    Ok((storage, sources))
}

fn bsr(
    csr: &CsrMatrix,
    copy: bool,
    context: Context,
    block: usize,
) -> Result<(BsrStorage, Vec<i64>, Context), DecomposeError> {
    let (n_block_rows, n_block_cols) = (csr.n_rows / block, csr.n_cols / block);
    let (aligned_rows, aligned_cols) = (n_block_rows * block, n_block_cols * block);
    // (block row, block col, slot in block, position) of every entry inside a full block.
    let mut inside = Vec::new();
    let mut left = Vec::new();
    for (row, positions) in context {
        let (i, o) = positions.partition(|&k| row < aligned_rows && csr.indices[k] < aligned_cols);
        for k in i.iter() {
            let col = csr.indices[k];
            inside.push((
                row / block,
                col / block,
                (row % block) * block + col % block,
                k,
            ));
        }
        if !o.is_empty() {
            left.push((row, o));
        }
    }
    inside.sort_unstable();
    let mut indptr = vec![0usize; n_block_rows + 1];
    let mut indices: Vec<usize> = Vec::new();
    let mut keys: Vec<(usize, usize)> = Vec::new();
    for &(block_row, block_col, _, _) in &inside {
        if keys.last() != Some(&(block_row, block_col)) {
            keys.push((block_row, block_col));
            indices.push(block_col);
            indptr[block_row + 1] += 1;
        }
    }
    for r in 0..n_block_rows {
        indptr[r + 1] += indptr[r];
    }
    let area = block.checked_mul(block);
    let slots = area
        .and_then(|a| a.checked_mul(keys.len()))
        .filter(|s| *s <= MAX_PART_SLOTS);
    let Some(slots) = slots else {
        return Err(too_large(
            "bsr",
            keys.len().saturating_mul(block).saturating_mul(block),
        ));
    };
    let area = block * block;
    let (mut values, mut mask) = (vec![0.0; slots], vec![false; slots]);
    let mut sources = vec![-1; slots];
    let mut b = 0;
    for (n, &(block_row, block_col, slot, k)) in inside.iter().enumerate() {
        if n > 0 && (inside[n - 1].0, inside[n - 1].1) != (block_row, block_col) {
            b += 1;
        }
        if copy {
            values[b * area + slot] = csr.values[k];
        }
        mask[b * area + slot] = true;
        sources[b * area + slot] = source(k);
    }
    Ok((
        BsrStorage {
            block,
            n_block_rows,
            n_block_cols,
            indptr,
            indices,
            values,
            mask,
        },
        sources,
        left,
    ))
}
