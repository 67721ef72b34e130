//! Filling the levels of a tensor from sorted level-coordinate entries, and packing the
//! buffers at their declared widths.

use super::build::{add_scalars, LvlEntries};
use super::error::StorageError;
use super::index_array::IndexArray;
use super::layout::Field;
use super::tensor::{LevelStorage, SparseTensor};
use crate::encoding::{Encoding, IndexWidth, LevelFormat, Lvl, Var};
use crate::{ArrayData, DType};

/// Positions and coordinates of one level before packing to the declared widths.
#[derive(Default)]
pub(crate) struct RawLevel {
    pub pos: Option<Vec<u64>>,
    pub crd: Option<Vec<u64>>,
}

/// Fills the levels top-down. `segs[p]` is the range of entries under position `p` of the
/// level being filled (one root position at first); an empty range is a padding position.
pub(crate) fn fill_levels(
    enc: &Encoding,
    lvl_shape: &[usize],
    entries: &LvlEntries,
    dtype: DType,
) -> Result<(Vec<RawLevel>, ArrayData), StorageError> {
    let rank = enc.lvl_rank();
    let n = entries.values.len();
    let mut segs: Vec<(usize, usize)> = vec![(0, n)];
    let mut raw = Vec::with_capacity(rank);
    let mut groups: Vec<(u64, usize, usize)> = Vec::new();
    for (l, spec) in enc.levels().iter().enumerate() {
        let lt = spec.lvl_type;
        let size = lvl_shape[l];
        let lvl = Lvl::from_index(l);
        let coord = |e: usize| entries.coords[e * rank + l];
        let mut next: Vec<(usize, usize)> = Vec::new();
        let mut level = RawLevel::default();
        let cap = match lt.format() {
            LevelFormat::Dense => segs.len().checked_mul(size),
            LevelFormat::NOutOfM { n, .. } => segs.len().checked_mul(n as usize),
            LevelFormat::Compressed | LevelFormat::LooseCompressed | LevelFormat::Singleton => {
                Some(n)
            }
        };
        let cap = cap
            .filter(|&c| c <= isize::MAX as usize / 16)
            .ok_or(StorageError::TooLarge("storage"))?;
        next.try_reserve_exact(cap)
            .map_err(|_| StorageError::TooLarge("storage"))?;
        let mut pos = Vec::new();
        let mut crd = Vec::new();
        if lt.is_compressed() {
            pos.push(0);
        }
        for (parent, &(lo, hi)) in segs.iter().enumerate() {
            groups.clear();
            let mut e = lo;
            while e < hi {
                let start = e;
                e += 1;
                while lt.is_unique() && e < hi && coord(e) == coord(start) {
                    e += 1;
                }
                groups.push((coord(start), start, e));
            }
            match lt.format() {
                LevelFormat::Dense => {
                    let mut g = groups.iter().peekable();
                    for c in 0..size as u64 {
                        match g.next_if(|x| x.0 == c) {
                            Some(&(_, s, t)) => next.push((s, t)),
                            None => next.push((hi, hi)),
                        }
                    }
                }
                LevelFormat::Compressed | LevelFormat::LooseCompressed => {
                    if lt.is_loose_compressed() {
                        pos.push(next.len() as u64);
                    }
                    for &(c, s, t) in &groups {
                        crd.push(c);
                        next.push((s, t));
                    }
                    pos.push(next.len() as u64);
                }
                LevelFormat::Singleton => match groups.as_slice() {
                    [(c, s, t)] => {
                        crd.push(*c);
                        next.push((*s, *t));
                    }
                    _ => {
                        return Err(StorageError::SingletonOverflow {
                            lvl,
                            parent,
                            count: hi - lo,
                        })
                    }
                },
                LevelFormat::NOutOfM { n, .. } => {
                    if groups.len() > n as usize {
                        return Err(StorageError::TooManyInGroup {
                            lvl,
                            parent,
                            count: groups.len(),
                            n,
                        });
                    }
                    if size < n as usize {
                        return Err(StorageError::GroupTooSmall { lvl, n, size });
                    }
                    let mut pad = (0..size as u64).filter(|c| !groups.iter().any(|g| g.0 == *c));
                    let mut pads: Vec<u64> = (&mut pad).take(n as usize - groups.len()).collect();
                    pads.reverse();
                    let mut g = groups.iter().peekable();
                    for _ in 0..n {
                        let take_real = match (g.peek(), pads.last()) {
                            (Some(x), Some(&p)) => x.0 < p,
                            (Some(_), None) => true,
                            (None, _) => false,
                        };
                        if take_real {
                            let &(c, s, t) = g.next().expect("peeked");
                            crd.push(c);
                            next.push((s, t));
                        } else {
                            crd.push(pads.pop().expect("enough padding"));
                            next.push((hi, hi));
                        }
                    }
                }
            }
        }
        if lt.has_positions() {
            level.pos = Some(pos);
        }
        if lt.has_coordinates() {
            level.crd = Some(crd);
        }
        raw.push(level);
        segs = next;
    }
    let mut values = ArrayData::zeros(dtype, segs.len());
    for (q, &(lo, hi)) in segs.iter().enumerate() {
        if let Some(first) = entries.values.get(lo).filter(|_| lo < hi) {
            let sum = entries.values[lo + 1..hi]
                .iter()
                .fold(*first, |a, &b| add_scalars(a, b));
            values.set(q, sum);
        }
    }
    Ok((raw, values))
}

fn pack(field: Field, width: IndexWidth, values: &[u64]) -> Result<IndexArray, StorageError> {
    IndexArray::from_u64s(width, values).map_err(|e| StorageError::WidthOverflow {
        field,
        index: e.index,
        value: e.value,
        width: width.bits(),
    })
}

/// Packs raw levels at the declared widths, interleaving an array-of-structs COO region.
pub(crate) fn finish(
    enc: &Encoding,
    dim_shape: Vec<usize>,
    lvl_shape: Vec<usize>,
    mut raw: Vec<RawLevel>,
    values: ArrayData,
) -> Result<SparseTensor, StorageError> {
    if let Some(start) = enc.aos_coo_start().map(Lvl::index) {
        let cols: Vec<Vec<u64>> = raw[start..]
            .iter_mut()
            .map(|r| r.crd.take().unwrap_or_default())
            .collect();
        let len = cols[0].len();
        let mut aos = Vec::with_capacity(len * cols.len());
        for q in 0..len {
            aos.extend(cols.iter().map(|c| c.get(q).copied().unwrap_or(0)));
        }
        raw[start].crd = Some(aos);
    }
    let mut levels = Vec::with_capacity(raw.len());
    for (l, r) in raw.into_iter().enumerate() {
        let lvl = Lvl::from_index(l);
        let crd_field = match enc.aos_coo_start() {
            Some(s) if s == lvl => Field::CooCoordinates(lvl),
            _ => Field::Coordinates(lvl),
        };
        let positions = r
            .pos
            .map(|p| pack(Field::Positions(lvl), enc.pos_width(), &p))
            .transpose()?;
        let coordinates = r
            .crd
            .map(|c| pack(crd_field, enc.crd_width(), &c))
            .transpose()?;
        levels.push(LevelStorage {
            positions,
            coordinates,
        });
    }
    SparseTensor::from_levels(enc, dim_shape, lvl_shape, levels, values)
}
