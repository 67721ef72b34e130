//! `assemble`: a sparse tensor from buffers in MLIR's storage-layout order, optionally validated.

use super::error::StorageError;
use super::index_array::IndexArray;
use super::layout::{storage_fields, Field};
use super::tensor::{lvl_shape, LevelStorage, SparseTensor};
use crate::encoding::{Encoding, LevelFormat, Lvl, Var};
use crate::ArrayData;

/// How much [`SparseTensor::assemble`] checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Validation {
    /// Everything: buffer count, lengths and widths, positions (start at 0, non-decreasing,
    /// within the coordinates), coordinates below the level size, sorted in ordered levels and
    /// without repeats in unique levels.
    Checked,
    /// Buffer count, lengths, widths and positions (O(positions)); the caller vouches for the
    /// coordinates. For storage that compiled code produced from validated operands, e.g. the
    /// result of a co-iteration kernel: its rows' coordinates are merges of sorted, unique,
    /// in-bounds ones, and checking them again cost a third of SpAdd's run.
    Positions,
    /// Buffer count, lengths and widths only (O(levels)); the caller vouches for the rest.
    Trusted,
}

impl SparseTensor {
    /// Builds a tensor of `dim_shape` from `buffers` in the order of
    /// [`super::storage_fields`] (per level positions then coordinates; one interleaved buffer
    /// for an array-of-structs COO region) and `values`, like MLIR's `sparse_tensor.assemble`.
    /// Buffers of any width are accepted and stored at the declared widths; a value that does
    /// not fit is an error.
    pub fn assemble(
        enc: &Encoding,
        dim_shape: &[usize],
        buffers: Vec<IndexArray>,
        values: ArrayData,
        validation: Validation,
    ) -> Result<SparseTensor, StorageError> {
        let lvl_shape = lvl_shape(enc, dim_shape)?;
        let fields = storage_fields(enc);
        if buffers.len() != fields.len() {
            return Err(StorageError::BufferCount {
                expected: fields.len(),
                found: buffers.len(),
            });
        }
        let mut levels: Vec<LevelStorage> = (0..enc.lvl_rank())
            .map(|_| LevelStorage {
                positions: None,
                coordinates: None,
            })
            .collect();
        for (field, buf) in fields.into_iter().zip(buffers) {
            let (lvl, width) = match field {
                Field::Positions(l) => (l, enc.pos_width()),
                Field::Coordinates(l) | Field::CooCoordinates(l) => (l, enc.crd_width()),
                Field::Values => unreachable!("storage_fields lists no values"),
            };
            let buf = buf
                .into_width(width)
                .map_err(|e| StorageError::WidthOverflow {
                    field,
                    index: e.index,
                    value: e.value,
                    width: width.bits(),
                })?;
            let slot = &mut levels[lvl.index()];
            match field {
                Field::Positions(_) => slot.positions = Some(buf),
                Field::Coordinates(_) | Field::CooCoordinates(_) | Field::Values => {
                    slot.coordinates = Some(buf)
                }
            }
        }
        let t = SparseTensor::from_levels(enc, dim_shape.to_vec(), lvl_shape, levels, values)?;
        let parents = t.check_lengths(validation)?;
        if validation == Validation::Checked {
            t.check_coordinates(&parents)?;
        }
        Ok(t)
    }

    /// Runs every check of [`Validation::Checked`] on this tensor.
    pub fn validate(&self) -> Result<(), StorageError> {
        let parents = self.check_lengths(Validation::Checked)?;
        self.check_coordinates(&parents)
    }

    /// Checks buffer lengths level by level; returns the number of parent positions per level.
    fn check_lengths(&self, validation: Validation) -> Result<Vec<usize>, StorageError> {
        let checked = validation != Validation::Trusted;
        let enc = &self.encoding;
        let too_large = StorageError::TooLarge("positions");
        let mut parents_at = Vec::with_capacity(enc.lvl_rank());
        let mut parents = 1usize;
        for (l, spec) in enc.levels().iter().enumerate() {
            parents_at.push(parents);
            let lvl = Lvl::from_index(l);
            let pos = self.levels[l].positions.as_ref();
            let crd_field = match enc.aos_coo_start() {
                Some(s) if s == lvl => Field::CooCoordinates(lvl),
                _ => Field::Coordinates(lvl),
            };
            let stride = enc
                .aos_coo_start()
                .filter(|&s| s == lvl)
                .map_or(1, |s| enc.lvl_rank() - s.index());
            let crd_buf_len = match enc.aos_coo_start() {
                Some(s) if lvl > s => None,
                _ => self.levels[l].coordinates.as_ref().map(IndexArray::len),
            };
            let wrong = |field, expected, found| StorageError::WrongLength {
                field,
                expected,
                found,
            };
            let expect_crd = |count: usize| -> Result<(), StorageError> {
                match crd_buf_len {
                    Some(len) => {
                        let want = count
                            .checked_mul(stride)
                            .ok_or(StorageError::TooLarge("coordinates"))?;
                        if len != want {
                            return Err(wrong(crd_field, want, len));
                        }
                        Ok(())
                    }
                    None => Ok(()),
                }
            };
            parents = match spec.lvl_type.format() {
                LevelFormat::Dense => parents
                    .checked_mul(self.lvl_shape[l])
                    .ok_or(too_large.clone())?,
                LevelFormat::Compressed => {
                    let pos = pos.expect("compressed levels have positions");
                    let want = parents.checked_add(1).ok_or(too_large.clone())?;
                    if pos.len() != want {
                        return Err(wrong(Field::Positions(lvl), want, pos.len()));
                    }
                    if checked {
                        check_positions(lvl, pos, 1)?;
                    }
                    let last = pos.get(parents).unwrap_or(0);
                    let count = usize::try_from(last).map_err(|_| too_large.clone())?;
                    expect_crd(count)?;
                    count
                }
                LevelFormat::LooseCompressed => {
                    let pos = pos.expect("loose_compressed levels have positions");
                    let want = parents.checked_mul(2).ok_or(too_large.clone())?;
                    if pos.len() != want {
                        return Err(wrong(Field::Positions(lvl), want, pos.len()));
                    }
                    let count = crd_buf_len.unwrap_or(0) / stride;
                    expect_crd(count)?;
                    if checked {
                        check_positions(lvl, pos, 2)?;
                        check_within(lvl, pos, count)?;
                    }
                    count
                }
                LevelFormat::Singleton => {
                    expect_crd(parents)?;
                    parents
                }
                LevelFormat::NOutOfM { n, .. } => {
                    let count = parents.checked_mul(n as usize).ok_or(too_large.clone())?;
                    expect_crd(count)?;
                    count
                }
            };
        }
        if self.values.len() != parents {
            return Err(StorageError::WrongLength {
                field: Field::Values,
                expected: parents,
                found: self.values.len(),
            });
        }
        Ok(parents_at)
    }

    /// Checks bounds, order and uniqueness of every level's coordinates.
    fn check_coordinates(&self, parents_at: &[usize]) -> Result<(), StorageError> {
        let enc = &self.encoding;
        let coo_start = enc.coo_start().map(Lvl::index);
        for (l, spec) in enc.levels().iter().enumerate() {
            let lt = spec.lvl_type;
            if !lt.has_coordinates() {
                continue;
            }
            let lvl = Lvl::from_index(l);
            let size = self.lvl_shape[l];
            // The level's buffer looked up once (not per coordinate: this loop runs over
            // every stored entry, e.g. of each result a co-iteration kernel assembles).
            let buffer = self.crd_buffer(l);
            let crd = |q: usize| match buffer {
                Some((buf, stride, offset)) => buf.get(q * stride + offset).unwrap_or(u64::MAX),
                None => u64::MAX,
            };
            let compare = |q: usize| -> Result<(), StorageError> {
                let (a, b) = (crd(q - 1), crd(q));
                if lt.is_ordered() && b < a {
                    return Err(StorageError::Unsorted { lvl, position: q });
                }
                if lt.is_unique() && a == b {
                    return Err(StorageError::Duplicate { lvl, position: q });
                }
                Ok(())
            };
            if lt.is_singleton() {
                let start = coo_start.expect("a singleton level lies in a COO region");
                let group = self.segment_ids(start, parents_at[start]);
                for q in 1..group.len() {
                    let same_prefix = (start..l).all(|k| {
                        let k = Lvl::from_index(k);
                        self.coordinate(k, q - 1) == self.coordinate(k, q)
                    });
                    if group[q] != usize::MAX && group[q] == group[q - 1] && same_prefix {
                        compare(q)?;
                    }
                }
            } else if let Some((buf, 1, 0)) = buffer {
                // One buffer of this level's own: scanned as a typed slice.
                // A compressed level's segments are its consecutive positions, read as one
                // typed slice (not looked up per parent: this runs once per row).
                let positions = match lt.format() {
                    LevelFormat::Compressed => {
                        self.levels[l].positions.as_ref().map(|p| p.as_u64s())
                    }
                    _ => None,
                };
                let segments: Box<dyn Iterator<Item = (usize, usize)>> = match &positions {
                    Some(p) => Box::new(
                        p.windows(2)
                            .take(parents_at[l])
                            .map(|w| (w[0] as usize, w[1] as usize)),
                    ),
                    None => Box::new((0..parents_at[l]).map(|p| self.segment(l, p))),
                };
                let (ordered, unique) = (lt.is_ordered(), lt.is_unique());
                // Segments that tile the coordinates: one pass over every adjacent pair, the
                // pairs across segment boundaries subtracted (`in_order_within`); the segments
                // are scanned one by one only to locate a disorder.
                let tiled = positions.as_ref().and_then(|p| {
                    let p = p.get(..=parents_at[l])?;
                    (p.first() == Some(&0) && p.last() == Some(&(buf.len() as u64))).then_some(p)
                });
                let in_order = tiled.is_some_and(|p| match buf {
                    IndexArray::U8(c) => in_order_within(c, p, ordered, unique),
                    IndexArray::U16(c) => in_order_within(c, p, ordered, unique),
                    IndexArray::U32(c) => in_order_within(c, p, ordered, unique),
                    IndexArray::U64(c) => in_order_within(c, p, ordered, unique),
                });
                let found = match buf {
                    _ if in_order => None,
                    IndexArray::U8(c) => first_disorder(c, segments, ordered, unique),
                    IndexArray::U16(c) => first_disorder(c, segments, ordered, unique),
                    IndexArray::U32(c) => first_disorder(c, segments, ordered, unique),
                    IndexArray::U64(c) => first_disorder(c, segments, ordered, unique),
                };
                match found {
                    Some((position, true)) => {
                        return Err(StorageError::Duplicate { lvl, position })
                    }
                    Some((position, false)) => {
                        return Err(StorageError::Unsorted { lvl, position })
                    }
                    None => {}
                }
                // Sorted segments that cover every coordinate: each one's largest coordinate
                // is its last, so only those are compared with the size (one per parent, not
                // one per entry).
                let last_only = match &positions {
                    Some(p) if ordered => {
                        let covered = p.get(parents_at[l]).copied().unwrap_or(0);
                        p.first() == Some(&0) && covered == buf.len() as u64
                    }
                    _ => false,
                };
                let found = match (buf, &positions) {
                    (IndexArray::U8(c), Some(p)) if last_only => {
                        first_last_at_least(c, &p[..=parents_at[l]], size)
                    }
                    (IndexArray::U16(c), Some(p)) if last_only => {
                        first_last_at_least(c, &p[..=parents_at[l]], size)
                    }
                    (IndexArray::U32(c), Some(p)) if last_only => {
                        first_last_at_least(c, &p[..=parents_at[l]], size)
                    }
                    (IndexArray::U64(c), Some(p)) if last_only => {
                        first_last_at_least(c, &p[..=parents_at[l]], size)
                    }
                    (IndexArray::U8(c), _) => first_at_least(c, size as u64),
                    (IndexArray::U16(c), _) => first_at_least(c, size as u64),
                    (IndexArray::U32(c), _) => first_at_least(c, size as u64),
                    (IndexArray::U64(c), _) => first_at_least(c, size as u64),
                };
                if let Some((position, coordinate)) = found {
                    return Err(StorageError::CoordinateOutOfBounds {
                        lvl,
                        position,
                        coordinate,
                        size,
                    });
                }
                continue;
            } else {
                for p in 0..parents_at[l] {
                    let (lo, hi) = self.segment(l, p);
                    for q in lo + 1..hi {
                        compare(q)?;
                    }
                }
            }
            for q in 0..self.crd_len(l) {
                let c = crd(q);
                if c >= size as u64 {
                    return Err(StorageError::CoordinateOutOfBounds {
                        lvl,
                        position: q,
                        coordinate: c,
                        size,
                    });
                }
            }
        }
        Ok(())
    }

    /// For each position of level `l`, the parent position owning it (`usize::MAX` for
    /// positions no segment covers, as gaps of loose_compressed levels).
    fn segment_ids(&self, l: usize, parents: usize) -> Vec<usize> {
        let mut ids = vec![usize::MAX; self.crd_len(l)];
        for p in 0..parents {
            let (lo, hi) = self.segment(l, p);
            for id in ids.iter_mut().take(hi).skip(lo) {
                *id = p;
            }
        }
        ids
    }
}

/// The first position of a segment whose coordinate is below its predecessor's (`ordered`)
/// or equal to it (`unique`), with `true` for an equal one. Segments are clamped to `crd`.
///
/// Each segment is first tested without early exits ([`segment_in_order`], which LLVM turns
/// into vector compares); only a segment that fails is scanned for the position.
fn first_disorder<T: Copy + Into<u64> + Ord>(
    crd: &[T],
    segments: impl Iterator<Item = (usize, usize)>,
    ordered: bool,
    unique: bool,
) -> Option<(usize, bool)> {
    if !ordered && !unique {
        return None;
    }
    for (lo, hi) in segments {
        let Some(seg) = crd.get(lo..hi.min(crd.len())) else {
            continue;
        };
        if segment_in_order(seg, ordered, unique) {
            continue;
        }
        for (i, w) in seg.windows(2).enumerate() {
            let (a, b): (u64, u64) = (w[0].into(), w[1].into());
            if ordered && b < a {
                return Some((lo + i + 1, false));
            }
            if unique && a == b {
                return Some((lo + i + 1, true));
            }
        }
    }
    None
}

/// Whether, within every segment `[positions[r], positions[r + 1])` of `crd` (which the
/// segments tile: `positions` runs from 0 to `crd.len()`, non-decreasing), no coordinate is
/// below its predecessor (`ordered`) or equal to it (`unique`): the adjacent pairs of the
/// whole array that break the rule, counted in one branch-free pass ([`pairs_out_of_order`]),
/// are exactly those across segment boundaries.
fn in_order_within<T: Copy + Ord>(
    crd: &[T],
    positions: &[u64],
    ordered: bool,
    unique: bool,
) -> bool {
    let bad = |a: T, b: T| (ordered && b < a) || (unique && a == b);
    let mut at_boundaries = 0usize;
    let mut last = 0u64;
    for &p in positions {
        if p > last && (p as usize) < crd.len() {
            at_boundaries += usize::from(bad(crd[p as usize - 1], crd[p as usize]));
            last = p;
        }
    }
    pairs_out_of_order(crd, ordered, unique) == at_boundaries
}

/// The adjacent pairs `(a, b)` of `crd` with `b < a` (`ordered`) or `a == b` (`unique`), on
/// x86-64 with AVX2 where the processor has it (LLVM's vector compares of 64-bit lanes; the
/// baseline target has none).
fn pairs_out_of_order<T: Copy + Ord>(crd: &[T], ordered: bool, unique: bool) -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor supports AVX2, checked just above.
        return unsafe { pairs_out_of_order_avx2(crd, ordered, unique) };
    }
    count_pairs(crd, ordered, unique)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn pairs_out_of_order_avx2<T: Copy + Ord>(crd: &[T], ordered: bool, unique: bool) -> usize {
    count_pairs(crd, ordered, unique)
}

#[inline(always)]
fn count_pairs<T: Copy + Ord>(crd: &[T], ordered: bool, unique: bool) -> usize {
    let (Some(head), Some(tail)) = (crd.get(..crd.len().saturating_sub(1)), crd.get(1..)) else {
        return 0;
    };
    let pairs = head.iter().zip(tail);
    match (ordered, unique) {
        (true, true) => pairs.map(|(a, b)| usize::from(b <= a)).sum(),
        (true, false) => pairs.map(|(a, b)| usize::from(b < a)).sum(),
        (false, true) => pairs.map(|(a, b)| usize::from(b == a)).sum(),
        (false, false) => 0,
    }
}

/// Whether no coordinate of `seg` is below its predecessor (`ordered`) or equal to it
/// (`unique`), by one pass over adjacent pairs that accumulates instead of returning early.
fn segment_in_order<T: Copy + Ord>(seg: &[T], ordered: bool, unique: bool) -> bool {
    let (Some(head), Some(tail)) = (seg.get(..seg.len().saturating_sub(1)), seg.get(1..)) else {
        return true;
    };
    let pairs = head.iter().zip(tail);
    let bad = match (ordered, unique) {
        (true, true) => pairs.fold(false, |bad, (a, b)| bad | (b <= a)),
        (true, false) => pairs.fold(false, |bad, (a, b)| bad | (b < a)),
        (false, true) => pairs.fold(false, |bad, (a, b)| bad | (b == a)),
        (false, false) => false,
    };
    !bad
}

/// The first coordinate `>= size`, with its position.
fn first_at_least<T: Copy + Into<u64>>(crd: &[T], size: u64) -> Option<(usize, u64)> {
    crd.iter()
        .map(|&c| c.into())
        .enumerate()
        .find(|&(_, c)| c >= size)
}

/// The first coordinate `>= size` with its position, for sorted segments between consecutive
/// `positions` that cover `crd`: only a segment whose last coordinate is out of range holds
/// one, found by binary search.
fn first_last_at_least<T: Copy + Into<u64>>(
    crd: &[T],
    positions: &[u64],
    size: usize,
) -> Option<(usize, u64)> {
    let size = size as u64;
    positions.windows(2).find_map(|w| {
        let seg = crd.get(w[0] as usize..w[1] as usize)?;
        let last: u64 = (*seg.last()?).into();
        if last < size {
            return None;
        }
        let at = seg.partition_point(|&c| c.into() < size);
        Some((w[0] as usize + at, seg[at].into()))
    })
}

/// Positions non-decreasing and starting at 0 (`step` 1), or `lo <= hi` per pair (`step` 2).
fn check_positions(lvl: Lvl, pos: &IndexArray, step: usize) -> Result<(), StorageError> {
    let p = pos.as_u64s();
    if step == 1 {
        if let Some(&first) = p.first().filter(|&&f| f != 0) {
            return Err(StorageError::PositionsStart { lvl, value: first });
        }
        if let Some(i) = p.windows(2).position(|w| w[0] > w[1]) {
            return Err(StorageError::PositionsNotMonotone { lvl, position: i });
        }
    } else if let Some(i) = p.chunks(2).position(|w| w.len() == 2 && w[0] > w[1]) {
        return Err(StorageError::PositionsNotMonotone {
            lvl,
            position: 2 * i,
        });
    }
    Ok(())
}

/// Every position at most `len`.
fn check_within(lvl: Lvl, pos: &IndexArray, len: usize) -> Result<(), StorageError> {
    match pos.as_u64s().iter().position(|&v| v > len as u64) {
        Some(i) => Err(StorageError::PositionOutOfRange {
            lvl,
            position: i,
            value: pos.get(i).unwrap_or(0),
            len,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The one-pass count agrees with the segment-by-segment scan on segments that tile
        /// the coordinates (empty ones included), for every combination of the two rules.
        #[test]
        fn in_order_within_agrees_with_the_segment_scan(
            crd in proptest::collection::vec(0u64..6, 0..40),
            cuts in proptest::collection::vec(0usize..41, 0..8),
            ordered: bool,
            unique: bool,
        ) {
            let mut positions: Vec<u64> = cuts
                .iter()
                .map(|&c| c.min(crd.len()) as u64)
                .chain([0, crd.len() as u64])
                .collect();
            positions.sort_unstable();
            let segments = positions.windows(2).map(|w| (w[0] as usize, w[1] as usize));
            let scan = first_disorder(&crd, segments, ordered, unique).is_none();
            prop_assert_eq!(in_order_within(&crd, &positions, ordered, unique), scan);
            let narrow: Vec<u32> = crd.iter().map(|&c| c as u32).collect();
            prop_assert_eq!(in_order_within(&narrow, &positions, ordered, unique), scan);
        }
    }
}
