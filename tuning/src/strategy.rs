//! Search strategies: which points to measure next, given what has been measured.

use crate::model::{CostModel, MIN_SAMPLES};
use crate::space::{Point, Space};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Spaces up to this size are enumerated (shuffled, or scored whole by the cost model).
pub const ENUMERABLE: u128 = 4096;

/// A search strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StrategyKind {
    /// Every point, in order.
    Exhaustive,
    /// Points drawn uniformly at random without replacement.
    Random,
    /// Mutations and crossovers of the best points so far, ranked by the learned cost model
    /// (with a share of random points to keep exploring).
    Evolutionary,
}

impl StrategyKind {
    /// The default for a space: exhaustive when it is small, evolutionary otherwise.
    pub fn for_space(space: &Space, budget_trials_hint: usize) -> StrategyKind {
        if space.size() <= budget_trials_hint as u128 {
            StrategyKind::Exhaustive
        } else {
            StrategyKind::Evolutionary
        }
    }

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            StrategyKind::Exhaustive => "exhaustive",
            StrategyKind::Random => "random",
            StrategyKind::Evolutionary => "evolutionary",
        }
    }
}

/// What a strategy knows when it proposes.
pub struct SearchState<'a> {
    /// Measured points and their scores (`None`: failed).
    pub history: &'a [(Point, Option<f64>)],
    /// Every point already proposed (measured, failed, invalid or pending).
    pub proposed: &'a BTreeSet<Point>,
}

/// A strategy with its state (a cursor, a random generator, a cost model).
pub struct Strategy {
    kind: StrategyKind,
    rng: StdRng,
    cursor: u128,
    shuffled: Option<Vec<u128>>,
    model: CostModel,
    features: BTreeMap<Point, Vec<f32>>,
}

impl Strategy {
    /// A strategy of `kind` seeded with `rng`.
    pub fn new(kind: StrategyKind, rng: StdRng) -> Strategy {
        Strategy {
            kind,
            rng,
            cursor: 0,
            shuffled: None,
            model: CostModel::new(),
            features: BTreeMap::new(),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> StrategyKind {
        self.kind
    }

    /// Measurements the cost model was last fitted on (0: not fitted).
    pub fn model_samples(&self) -> usize {
        self.model.samples()
    }

    /// Up to `n` points not yet proposed; fewer (or none) when the space is exhausted.
    /// `features` gives a point's feature vector for the cost model.
    pub fn propose(
        &mut self,
        space: &Space,
        state: &SearchState,
        n: usize,
        features: &mut dyn FnMut(&Point) -> Vec<f32>,
    ) -> Vec<Point> {
        match self.kind {
            StrategyKind::Exhaustive => self.next_in_order(space, state, n),
            StrategyKind::Random => self.random(space, state, n, &BTreeSet::new()),
            StrategyKind::Evolutionary => self.evolve(space, state, n, features),
        }
    }

    fn next_in_order(&mut self, space: &Space, state: &SearchState, n: usize) -> Vec<Point> {
        let mut out = Vec::new();
        while out.len() < n && self.cursor < space.size() {
            let p = space.point(self.cursor);
            self.cursor += 1;
            if !state.proposed.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    fn random(
        &mut self,
        space: &Space,
        state: &SearchState,
        n: usize,
        also_taken: &BTreeSet<Point>,
    ) -> Vec<Point> {
        let size = space.size();
        let mut out: Vec<Point> = Vec::new();
        let taken = |p: &Point, out: &[Point]| {
            state.proposed.contains(p) || also_taken.contains(p) || out.contains(p)
        };
        if size <= ENUMERABLE {
            if self.shuffled.is_none() {
                let mut all: Vec<u128> = (0..size).collect();
                all.shuffle(&mut self.rng);
                self.shuffled = Some(all);
            }
            let all = self.shuffled.as_ref().map_or(&[][..], |v| &v[..]);
            for &i in all {
                if out.len() >= n {
                    break;
                }
                let p = space.point(i);
                if !taken(&p, &out) {
                    out.push(p);
                }
            }
            return out;
        }
        let mut tries = 0;
        while out.len() < n && tries < 64 * n.max(1) {
            tries += 1;
            let p = space.random(&mut self.rng);
            if !taken(&p, &out) {
                out.push(p);
            }
        }
        out
    }

    fn evolve(
        &mut self,
        space: &Space,
        state: &SearchState,
        n: usize,
        features: &mut dyn FnMut(&Point) -> Vec<f32>,
    ) -> Vec<Point> {
        let mut measured: Vec<(Point, f64)> = state
            .history
            .iter()
            .filter_map(|(p, s)| s.map(|s| (p.clone(), s)))
            .collect();
        if measured.len() < MIN_SAMPLES + 2 {
            return self.random(space, state, n, &BTreeSet::new());
        }
        measured.sort_by(|a, b| a.1.total_cmp(&b.1));
        // Refit on every measurement so far.
        let mut samples = Vec::with_capacity(measured.len());
        for (p, s) in &measured {
            let f = self.featurize(space, p, features);
            samples.push((f, *s));
        }
        self.model.fit(&samples);
        // Candidate pool: the whole space when small, else offspring of the best points.
        let mut pool: BTreeSet<Point> = BTreeSet::new();
        if space.size() <= ENUMERABLE.min(512) {
            for i in 0..space.size() {
                pool.insert(space.point(i));
            }
        } else {
            let elite: Vec<&Point> = measured.iter().take(6).map(|(p, _)| p).collect();
            for (i, a) in elite.iter().enumerate() {
                for _ in 0..12 {
                    let mut q = space.mutate(a, &mut self.rng);
                    if self.rng.random_bool(0.3) {
                        q = space.mutate(&q, &mut self.rng);
                    }
                    pool.insert(q);
                }
                for b in elite.iter().skip(i + 1) {
                    pool.insert(space.crossover(a, b, &mut self.rng));
                }
            }
            for _ in 0..48 {
                pool.insert(space.random(&mut self.rng));
            }
        }
        let pool: Vec<Point> = pool
            .into_iter()
            .filter(|p| !state.proposed.contains(p))
            .collect();
        if pool.is_empty() {
            return self.random(space, state, n, &BTreeSet::new());
        }
        let explore = (n / 4).max(1).min(n);
        let exploit = n - explore;
        let feats: Vec<Vec<f32>> = pool
            .iter()
            .map(|p| self.featurize(space, p, features))
            .collect();
        let mut out: Vec<Point> = Vec::new();
        if let Some(pred) = self.model.predict(&feats) {
            let mut ranked: Vec<(f64, &Point)> = pred.into_iter().zip(&pool).collect();
            ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
            out.extend(ranked.iter().take(exploit).map(|(_, p)| (*p).clone()));
        }
        let taken: BTreeSet<Point> = out.iter().cloned().collect();
        let rest = n.saturating_sub(out.len());
        out.extend(self.random(space, state, rest, &taken));
        out
    }

    fn featurize(
        &mut self,
        space: &Space,
        p: &Point,
        features: &mut dyn FnMut(&Point) -> Vec<f32>,
    ) -> Vec<f32> {
        if let Some(f) = self.features.get(p) {
            return f.clone();
        }
        let mut f = space.one_hot(p);
        f.extend(features(p));
        self.features.insert(p.clone(), f.clone());
        f
    }
}
