//! The learned cost model: gradient-boosted regression trees (the `gbdt` crate) predicting the
//! logarithm of a candidate's time from its features, refitted as measurements arrive.

use gbdt::config::Config;
use gbdt::decision_tree::{Data, DataVec};
use gbdt::gradient_boost::GBDT;

/// Fewest measurements the model is fitted on; below, it predicts nothing.
pub const MIN_SAMPLES: usize = 6;

/// A regression model over feature vectors of one length.
pub struct CostModel {
    model: Option<GBDT>,
    width: usize,
    samples: usize,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel::new()
    }
}

impl CostModel {
    /// An unfitted model.
    pub fn new() -> CostModel {
        CostModel {
            model: None,
            width: 0,
            samples: 0,
        }
    }

    /// Whether it has been fitted.
    pub fn is_fitted(&self) -> bool {
        self.model.is_some()
    }

    /// Number of measurements of the last fit.
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// Fits on `(features, seconds)` pairs (seconds > 0); fewer than [`MIN_SAMPLES`] or
    /// vectors of different lengths leave the model unfitted.
    pub fn fit(&mut self, samples: &[(Vec<f32>, f64)]) {
        self.model = None;
        self.samples = 0;
        let Some(width) = samples.first().map(|s| s.0.len()) else {
            return;
        };
        let usable: Vec<&(Vec<f32>, f64)> = samples
            .iter()
            .filter(|(f, t)| f.len() == width && t.is_finite() && *t > 0.0)
            .collect();
        if usable.len() < MIN_SAMPLES || width == 0 {
            return;
        }
        let mut cfg = Config::new();
        cfg.set_feature_size(width);
        cfg.set_max_depth(4);
        cfg.set_iterations(60);
        cfg.set_shrinkage(0.2);
        cfg.set_min_leaf_size(1);
        cfg.set_loss("SquaredError");
        let mut data: DataVec = usable
            .iter()
            .map(|(f, t)| Data::new_training_data(f.clone(), 1.0, t.ln() as f32, None))
            .collect();
        let mut model = GBDT::new(&cfg);
        model.fit(&mut data);
        self.model = Some(model);
        self.width = width;
        self.samples = usable.len();
    }

    /// Predicted seconds of each feature vector (`None` if unfitted or of another length).
    pub fn predict(&self, features: &[Vec<f32>]) -> Option<Vec<f64>> {
        let model = self.model.as_ref()?;
        if features.iter().any(|f| f.len() != self.width) {
            return None;
        }
        let data: DataVec = features
            .iter()
            .map(|f| Data::new_test_data(f.clone(), None))
            .collect();
        Some(
            model
                .predict(&data)
                .into_iter()
                .map(|y| f64::from(y).exp())
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_which_choice_is_faster() {
        // Time = 1 ms × 4 if option a0, × 1 otherwise, × (1 + b).
        let mut samples = Vec::new();
        for a in 0..2 {
            for b in 0..4 {
                let f = vec![a as f32, b as f32];
                let t = 1e-3 * if a == 0 { 4.0 } else { 1.0 } * (1.0 + b as f64);
                samples.push((f, t));
            }
        }
        let mut m = CostModel::new();
        m.fit(&samples[..3]);
        assert!(!m.is_fitted(), "too few samples");
        m.fit(&samples);
        assert!(m.is_fitted());
        let p = m
            .predict(&[vec![0.0, 0.0], vec![1.0, 0.0], vec![1.0, 3.0]])
            .expect("fitted");
        assert!(p[1] < p[0], "{p:?}");
        assert!(p[1] < p[2], "{p:?}");
        assert!(m.predict(&[vec![1.0]]).is_none(), "wrong width");
    }
}
