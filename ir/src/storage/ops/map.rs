//! `crd_translate` and `reinterpret_map`: coordinates through an encoding's map, and the same
//! storage under another map.

use super::slice::{static_slices, StaticSlice};
use crate::encoding::{Dim, Encoding, Lvl, Var};
use crate::storage::error::StorageError;
use crate::storage::tensor::{lvl_shape, SparseTensor};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Which way [`SparseTensor::crd_translate`] maps coordinates (MLIR's `CrdTransDirectionKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CrdTransDirection {
    /// Dimension coordinates to level coordinates, through the level expressions.
    DimToLvl,
    /// Level coordinates to dimension coordinates, through the (inferred or explicit) inverse.
    LvlToDim,
}

/// `dim_to_lvl` or `lvl_to_dim`, as MLIR spells the direction.
impl fmt::Display for CrdTransDirection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CrdTransDirection::DimToLvl => "dim_to_lvl",
            CrdTransDirection::LvlToDim => "lvl_to_dim",
        })
    }
}

impl SparseTensor {
    /// Translates `coords` through `enc`'s map, like MLIR's `sparse_tensor.crd_translate`:
    /// `DimToLvl` takes one coordinate per dimension and gives one per level, `LvlToDim` the
    /// reverse. Static dimension slices are applied: a dimension coordinate `c` of a slice
    /// `(offset, size, stride)` is the underlying coordinate `offset + c * stride` the levels
    /// map. For dynamic slices use [`SparseTensor::translate`] on a view, which has them bound.
    ///
    /// Errors: symbols ([`StorageError::Symbols`]), dynamic slices ([`StorageError::Slices`]),
    /// the wrong number of coordinates ([`StorageError::CrdArity`]), a coordinate above
    /// `i64::MAX` ([`StorageError::TooLarge`]), a result that is negative or overflows
    /// ([`StorageError::CrdOutOfRange`]), a dimension coordinate outside its slice
    /// ([`StorageError::CrdOffSlice`]).
    pub fn crd_translate(
        enc: &Encoding,
        direction: CrdTransDirection,
        coords: &[u64],
    ) -> Result<Vec<u64>, StorageError> {
        let slices = static_slices(enc)?;
        translate_with(enc, &slices, direction, coords)
    }

    /// [`SparseTensor::crd_translate`] through this tensor's encoding, with the slices of a
    /// view bound (`?` parts included).
    pub fn translate(
        &self,
        direction: CrdTransDirection,
        coords: &[u64],
    ) -> Result<Vec<u64>, StorageError> {
        translate_with(&self.encoding, &self.slices, direction, coords)
    }

    /// The same storage read through another map, like MLIR's `sparse_tensor.reinterpret_map`
    /// (no data moves; the result's buffers equal this tensor's). `new` must have the same
    /// number of levels, the same level types and the same widths. The result keeps this
    /// tensor's dimension sizes if `new` gives the same level shape from them; otherwise its
    /// sizes are one more than the largest coordinates `new`'s inverse reaches over the level
    /// shape, and `new` must give back the level shape from those. So BSR over a `6 x 12` matrix
    /// reinterprets as `map = (i, j, k, l) -> (i : dense, j : compressed, k : dense, l : dense)`
    /// over a `3 x 4 x 2 x 3` tensor and back. Padding stored by the old map (partial blocks)
    /// becomes visible as explicit zeros where the new map places it inside the shape.
    ///
    /// Errors: symbols or slices in either encoding; another level count, level type or width
    /// ([`StorageError::LevelRank`], [`StorageError::ReinterpretLevelType`],
    /// [`StorageError::ReinterpretWidths`]); another level shape
    /// ([`StorageError::ReinterpretLevelSize`]).
    pub fn reinterpret_map(&self, new: &Encoding) -> Result<SparseTensor, StorageError> {
        let old = &self.encoding;
        for enc in [old, new] {
            if enc.n_symbols() > 0 {
                return Err(StorageError::Symbols);
            }
            if enc.has_slices() {
                return Err(StorageError::Slices);
            }
        }
        if new.lvl_rank() != old.lvl_rank() {
            return Err(StorageError::LevelRank {
                expected: old.lvl_rank(),
                found: new.lvl_rank(),
            });
        }
        for (l, (a, b)) in old.levels().iter().zip(new.levels()).enumerate() {
            if a.lvl_type != b.lvl_type {
                return Err(StorageError::ReinterpretLevelType {
                    lvl: Lvl::from_index(l),
                    expected: a.lvl_type,
                    found: b.lvl_type,
                });
            }
        }
        let widths = |e: &Encoding| (e.pos_width(), e.crd_width());
        if widths(old) != widths(new) {
            return Err(StorageError::ReinterpretWidths {
                expected: widths(old),
                found: widths(new),
            });
        }
        let keep = new.dim_rank() == self.dim_shape.len()
            && lvl_shape(new, &self.dim_shape).as_deref() == Ok(&self.lvl_shape[..]);
        let dim_shape = if keep {
            self.dim_shape.clone()
        } else {
            reached_dim_shape(new, &self.lvl_shape)?
        };
        let new_lvl_shape = lvl_shape(new, &dim_shape)?;
        for (l, (&want, &found)) in self.lvl_shape.iter().zip(&new_lvl_shape).enumerate() {
            if want != found {
                return Err(StorageError::ReinterpretLevelSize {
                    lvl: Lvl::from_index(l),
                    expected: want,
                    found,
                });
            }
        }
        Ok(SparseTensor {
            encoding: new.clone(),
            base_shape: dim_shape.clone(),
            slices: Vec::new(),
            dim_shape,
            lvl_shape: new_lvl_shape,
            levels: self.levels.clone(),
            values: self.values.clone(),
        })
    }
}

/// Per dimension, one more than the largest value `enc`'s inverse takes over `lvl_shape`.
fn reached_dim_shape(enc: &Encoding, lvl_shape: &[usize]) -> Result<Vec<usize>, StorageError> {
    let extents: Vec<u64> = lvl_shape.iter().map(|&n| n as u64).collect();
    (0..enc.dim_rank())
        .map(|d| {
            let d = Dim::from_index(d);
            match enc.lvl_to_dim(d).bounds(&extents) {
                Ok(None) => Ok(0),
                Ok(Some(b)) => (b.hi.checked_add(1))
                    .and_then(|s| usize::try_from(s.max(0)).ok())
                    .ok_or(StorageError::TooLarge("dimension size")),
                Err(()) => Err(StorageError::TooLarge("dimension size")),
            }
        })
        .collect()
}

fn translate_with(
    enc: &Encoding,
    slices: &[Option<StaticSlice>],
    direction: CrdTransDirection,
    coords: &[u64],
) -> Result<Vec<u64>, StorageError> {
    if enc.n_symbols() > 0 {
        return Err(StorageError::Symbols);
    }
    let (from, to) = match direction {
        CrdTransDirection::DimToLvl => (enc.dim_rank(), enc.lvl_rank()),
        CrdTransDirection::LvlToDim => (enc.lvl_rank(), enc.dim_rank()),
    };
    if coords.len() != from {
        return Err(StorageError::CrdArity {
            direction,
            expected: from,
            found: coords.len(),
        });
    }
    let slice = |d: usize| slices.get(d).copied().flatten();
    let mut vars: Vec<i64> = (coords.iter())
        .map(|&c| i64::try_from(c).map_err(|_| StorageError::TooLarge("coordinate")))
        .collect::<Result<_, _>>()?;
    if direction == CrdTransDirection::DimToLvl {
        for (d, v) in vars.iter_mut().enumerate() {
            let Some(s) = slice(d) else { continue };
            let c = *v as usize;
            if c >= s.size {
                return Err(StorageError::CrdOffSlice {
                    direction,
                    dim: Dim::from_index(d),
                    coord: c as u64,
                });
            }
            *v = i64::try_from(s.to_underlying(c))
                .map_err(|_| StorageError::TooLarge("coordinate"))?;
        }
    }
    let mut scratch = Vec::new();
    (0..to)
        .map(|index| {
            let value =
                match direction {
                    CrdTransDirection::DimToLvl => enc
                        .dim_to_lvl(Lvl::from_index(index))
                        .eval_with(&vars, &[], &mut scratch),
                    CrdTransDirection::LvlToDim => enc
                        .lvl_to_dim(Dim::from_index(index))
                        .eval_with(&vars, &[], &mut scratch),
                };
            let value = (value.and_then(|v| u64::try_from(v).ok()))
                .ok_or(StorageError::CrdOutOfRange { direction, index })?;
            match (direction, slice(index)) {
                (CrdTransDirection::LvlToDim, Some(s)) => usize::try_from(value)
                    .ok()
                    .and_then(|u| s.to_view(u))
                    .map(|c| c as u64)
                    .ok_or(StorageError::CrdOffSlice {
                        direction,
                        dim: Dim::from_index(index),
                        coord: value,
                    }),
                _ => Ok(value),
            }
        })
        .collect()
}
