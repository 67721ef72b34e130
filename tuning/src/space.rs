//! Search spaces: named decisions, each a categorical choice among labelled options; a point
//! picks one option per decision.

use rand::Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One decision of a schedule template, e.g. `tile ∈ {none, 4, 8, 16}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Name, unique in its space.
    pub name: String,
    /// The options' labels, as recorded in the database (at least one).
    pub choices: Vec<String>,
}

/// A point of a space: the index of the chosen option of each decision, in decision order.
pub type Point = Vec<usize>;

/// The decisions of a template.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Space {
    /// Decisions in the order a template takes them.
    pub decisions: Vec<Decision>,
}

impl Space {
    /// Adds a decision; one with no option is left out (it cannot be decided).
    pub fn push(&mut self, name: &str, choices: Vec<String>) {
        if !choices.is_empty() {
            self.decisions.push(Decision {
                name: name.to_string(),
                choices,
            });
        }
    }

    /// Number of points (saturating at `u128::MAX`).
    pub fn size(&self) -> u128 {
        self.decisions
            .iter()
            .fold(1u128, |n, d| n.saturating_mul(d.choices.len() as u128))
    }

    /// The point of a mixed-radix index (`index < size()`), the last decision varying fastest.
    pub fn point(&self, index: u128) -> Point {
        let mut rest = index;
        let mut p = vec![0; self.decisions.len()];
        for (slot, d) in p.iter_mut().zip(&self.decisions).rev() {
            let n = d.choices.len() as u128;
            *slot = (rest % n) as usize;
            rest /= n;
        }
        p
    }

    /// Whether `p` picks a valid option of every decision.
    pub fn contains(&self, p: &Point) -> bool {
        p.len() == self.decisions.len()
            && p.iter()
                .zip(&self.decisions)
                .all(|(&c, d)| c < d.choices.len())
    }

    /// A uniformly random point.
    pub fn random(&self, rng: &mut impl Rng) -> Point {
        self.decisions
            .iter()
            .map(|d| rng.random_range(0..d.choices.len()))
            .collect()
    }

    /// `p` with one decision (of more than one option) changed to another option.
    pub fn mutate(&self, p: &Point, rng: &mut impl Rng) -> Point {
        let open: Vec<usize> = (0..self.decisions.len())
            .filter(|&i| self.decisions[i].choices.len() > 1)
            .collect();
        let mut q = p.clone();
        if open.is_empty() {
            return q;
        }
        let i = open[rng.random_range(0..open.len())];
        let n = self.decisions[i].choices.len();
        q[i] = (p[i] + rng.random_range(1..n)) % n;
        q
    }

    /// Each decision taken from `a` or `b` at random.
    pub fn crossover(&self, a: &Point, b: &Point, rng: &mut impl Rng) -> Point {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| if rng.random_bool(0.5) { x } else { y })
            .collect()
    }

    /// The chosen label of each decision.
    pub fn labels(&self, p: &Point) -> BTreeMap<String, String> {
        self.decisions
            .iter()
            .zip(p)
            .map(|(d, &c)| (d.name.clone(), d.choices[c].clone()))
            .collect()
    }

    /// The point with these labels, if every decision has one that names an option.
    pub fn from_labels(&self, labels: &BTreeMap<String, String>) -> Option<Point> {
        self.decisions
            .iter()
            .map(|d| {
                let l = labels.get(&d.name)?;
                d.choices.iter().position(|c| c == l)
            })
            .collect()
    }

    /// The label a point picks for a decision (`None` if the space has no such decision).
    pub fn label<'a>(&'a self, p: &Point, decision: &str) -> Option<&'a str> {
        let i = self.decisions.iter().position(|d| d.name == decision)?;
        Some(self.decisions[i].choices[*p.get(i)?].as_str())
    }

    /// One-hot encoding of a point (a feature vector for the cost model).
    pub fn one_hot(&self, p: &Point) -> Vec<f32> {
        let mut v = Vec::new();
        for (d, &c) in self.decisions.iter().zip(p) {
            for i in 0..d.choices.len() {
                v.push(if i == c { 1.0 } else { 0.0 });
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn space() -> Space {
        let mut s = Space::default();
        s.push("a", vec!["x".into(), "y".into()]);
        s.push("b", vec!["1".into(), "2".into(), "3".into()]);
        s.push("empty", vec![]);
        s
    }

    #[test]
    fn mixed_radix_indices_enumerate_every_point_once() {
        let s = space();
        assert_eq!(s.decisions.len(), 2);
        assert_eq!(s.size(), 6);
        let pts: Vec<Point> = (0..s.size()).map(|i| s.point(i)).collect();
        let unique: std::collections::BTreeSet<_> = pts.iter().cloned().collect();
        assert_eq!(unique.len(), 6);
        assert!(pts.iter().all(|p| s.contains(p)));
        assert_eq!(pts[1], vec![0, 1]);
    }

    #[test]
    fn labels_round_trip_and_mutation_changes_one_decision() {
        let s = space();
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..50 {
            let p = s.random(&mut rng);
            assert_eq!(s.from_labels(&s.labels(&p)), Some(p.clone()));
            let q = s.mutate(&p, &mut rng);
            assert!(s.contains(&q));
            assert_eq!(p.iter().zip(&q).filter(|(a, b)| a != b).count(), 1);
        }
        let mut other = BTreeMap::new();
        other.insert("a".to_string(), "z".to_string());
        assert_eq!(s.from_labels(&other), None);
    }
}
