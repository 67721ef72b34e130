//! What a tuning task is measured on: signatures of the kernel, the data and the machine, and
//! the numeric features of a matrix that tell similar matrices apart.

use lacuna_ir::CooTensor;
use lacuna_schedule::decompose::MatrixStats;
use lacuna_stage1::{Input, Program};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use xxhash_rust::xxh3::Xxh3;

/// A stable hexadecimal hash of a kernel (its canonical serialization): records of one kernel
/// share it whatever file it was read from.
pub fn kernel_hash(p: &Program) -> String {
    let text = serde_json::to_string(p).unwrap_or_default();
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

/// A stable hash of the data a kernel runs on: the shape and stored coordinates of each sparse
/// input and the shape of each dense one (the values do not change the time a schedule takes),
/// by buffer name.
pub fn data_signature(inputs: &BTreeMap<String, Input>) -> String {
    let mut h = Xxh3::new();
    for (name, input) in inputs {
        h.update(name.as_bytes());
        h.update(&[0]);
        // A tensor in storage hashes as its entries do: the same data, the same signature.
        match input.coo() {
            Some(c) => {
                h.update(b"coo");
                for &e in &c.shape {
                    h.update(&(e as u64).to_le_bytes());
                }
                for dim in &c.coords {
                    for &x in dim {
                        h.update(&(x as u64).to_le_bytes());
                    }
                }
            }
            None => {
                h.update(b"dense");
                for &e in input.shape() {
                    h.update(&(e as u64).to_le_bytes());
                }
            }
        }
    }
    format!("{:016x}", h.digest())
}

/// The machine a measurement was taken on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model (from `/proc/cpuinfo`, or the architecture name).
    pub cpu: String,
    /// Vector and arithmetic features that change generated code.
    pub features: Vec<String>,
    /// Hardware threads.
    pub cores: usize,
}

impl Machine {
    /// This machine.
    pub fn host() -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        #[allow(unused_mut)]
        let mut features: Vec<String> = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            macro_rules! detect {
                ($($f:tt),*) => {
                    $( if std::is_x86_feature_detected!($f) { features.push($f.to_string()); } )*
                };
            }
            detect!("sse4.2", "avx", "avx2", "fma", "avx512f", "avx512vl", "avx512bw");
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Machine {
            cpu,
            features,
            cores,
        }
    }

    /// A short stable identifier of the model and features.
    pub fn id(&self) -> String {
        let text = format!("{}|{}", self.cpu, self.features.join(","));
        format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
    }
}

/// Numeric features of a sparse matrix: what makes one schedule faster than another.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MatrixFeatures {
    /// Rows.
    pub rows: f64,
    /// Columns.
    pub cols: f64,
    /// Stored entries.
    pub nnz: f64,
    /// Mean stored entries per row.
    pub mean_row: f64,
    /// Longest row.
    pub max_row: f64,
    /// Coefficient of variation of row lengths (0 for equal rows).
    pub cv_row: f64,
    /// Fraction of empty rows.
    pub empty_rows: f64,
    /// Fraction of the slots of non-empty 4×4 blocks that hold an entry.
    pub block4_density: f64,
    /// Width of the feature (dense) dimension, when the kernel has one.
    pub feature_width: f64,
}

impl MatrixFeatures {
    /// Features of `stats`.
    pub fn of(stats: &MatrixStats, feature_width: Option<u64>) -> MatrixFeatures {
        let rows = stats.n_rows as f64;
        let nnz = stats.nnz as f64;
        let mean = if rows > 0.0 { nnz / rows } else { 0.0 };
        let mut var = 0.0;
        let mut max_row = 0usize;
        let mut empty = 0usize;
        for (&len, &count) in &stats.row_lengths {
            var += count as f64 * (len as f64 - mean).powi(2);
            max_row = max_row.max(len);
            if len == 0 {
                empty += count;
            }
        }
        let sd = if rows > 0.0 { (var / rows).sqrt() } else { 0.0 };
        MatrixFeatures {
            rows,
            cols: stats.n_cols as f64,
            nnz,
            mean_row: mean,
            max_row: max_row as f64,
            cv_row: if mean > 0.0 { sd / mean } else { 0.0 },
            empty_rows: if rows > 0.0 { empty as f64 / rows } else { 0.0 },
            block4_density: stats.blocks.get(&4).map_or(1.0, |b| b.density(4)),
            feature_width: feature_width.unwrap_or(0) as f64,
        }
    }

    /// The features as a vector on log scales where sizes span orders of magnitude.
    pub fn vector(&self) -> Vec<f32> {
        let l = |x: f64| (1.0 + x).ln() as f32;
        vec![
            l(self.rows),
            l(self.cols),
            l(self.nnz),
            l(self.mean_row),
            l(self.max_row),
            self.cv_row as f32,
            self.empty_rows as f32,
            self.block4_density as f32,
            l(self.feature_width),
        ]
    }

    /// Distance between two matrices' features (Euclidean on [`MatrixFeatures::vector`]).
    pub fn distance(&self, other: &MatrixFeatures) -> f64 {
        self.vector()
            .iter()
            .zip(other.vector())
            .map(|(a, b)| f64::from(a - b).powi(2))
            .sum::<f64>()
            .sqrt()
    }
}

/// The CSR statistics of a 2-D coordinate tensor (entries sorted, duplicates counted once).
pub fn coo_stats(c: &CooTensor) -> Option<MatrixStats> {
    if c.shape.len() != 2 {
        return None;
    }
    let mut pairs: Vec<(usize, usize)> = c.coords[0]
        .iter()
        .copied()
        .zip(c.coords[1].iter().copied())
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    let mut indptr = vec![0usize; c.shape[0] + 1];
    for &(r, _) in &pairs {
        if r >= c.shape[0] {
            return None;
        }
        indptr[r + 1] += 1;
    }
    for r in 0..c.shape[0] {
        indptr[r + 1] += indptr[r];
    }
    let indices: Vec<usize> = pairs.iter().map(|&(_, col)| col).collect();
    MatrixStats::from_csr(&indptr, &indices, c.shape[1]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lacuna_ir::{ArrayData, DenseArray};

    fn coo(rows: &[usize], cols: &[usize]) -> CooTensor {
        CooTensor {
            shape: vec![4, 4],
            coords: vec![rows.to_vec(), cols.to_vec()],
            values: ArrayData::F64(vec![1.0; rows.len()]),
        }
    }

    #[test]
    fn data_signature_sees_structure_and_shapes_not_values() {
        let mut a = BTreeMap::new();
        a.insert("A".to_string(), Input::Coo(coo(&[0, 1], &[1, 2])));
        a.insert(
            "x".to_string(),
            Input::Dense(DenseArray {
                shape: vec![4],
                data: ArrayData::F64(vec![1.0; 4]),
            }),
        );
        let mut b = a.clone();
        if let Some(Input::Dense(d)) = b.get_mut("x") {
            d.data = ArrayData::F64(vec![2.0; 4]);
        }
        assert_eq!(data_signature(&a), data_signature(&b));
        b.insert("A".to_string(), Input::Coo(coo(&[0, 1], &[1, 3])));
        assert_ne!(data_signature(&a), data_signature(&b));
    }

    #[test]
    fn features_of_a_skewed_matrix() {
        let c = coo(&[0, 0, 0, 0, 2], &[0, 1, 2, 3, 1]);
        let s = coo_stats(&c).expect("2-D");
        let f = MatrixFeatures::of(&s, Some(32));
        assert_eq!(f.nnz, 5.0);
        assert_eq!(f.max_row, 4.0);
        assert_eq!(f.empty_rows, 0.5);
        assert!(f.cv_row > 1.0);
        assert_eq!(f.distance(&f), 0.0);
        let g = MatrixFeatures::of(&s, Some(64));
        assert!(f.distance(&g) > 0.0);
    }
}
