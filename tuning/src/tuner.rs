//! The tuning loop: propose points, turn them into schedules, measure them through a
//! [`Measurer`], record every outcome, stop at the budget.

use crate::db::{self, Database, DbError, FinalRound, Record, Status, Timing, RECORD_VERSION};
use crate::features::{Machine, MatrixFeatures};
use crate::space::Point;
use crate::strategy::{SearchState, Strategy, StrategyKind};
use crate::template::Template;
use lacuna_schedule::Instruction;
use rand::SeedableRng;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// What is tuned: a kernel on data, on a machine, at a thread count.
#[derive(Clone, Debug)]
pub struct Task {
    /// Kernel name.
    pub kernel: String,
    /// [`crate::features::kernel_hash`].
    pub kernel_hash: String,
    /// [`crate::features::data_signature`].
    pub data: String,
    /// Features of the sparse input.
    pub features: MatrixFeatures,
    /// The machine.
    pub machine: Machine,
    /// Worker threads.
    pub threads: usize,
}

impl Task {
    fn owns(&self, r: &Record) -> bool {
        r.kernel_hash == self.kernel_hash
            && r.data == self.data
            && r.machine.id() == self.machine.id()
            && r.threads == self.threads
    }
}

/// A schedule to measure.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Trial number in its run.
    pub trial: usize,
    /// The template's decisions.
    pub decisions: BTreeMap<String, String>,
    /// The schedule trace.
    pub trace: Vec<Instruction>,
}

/// How a measurement ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Ran and matched the reference.
    Ok(Timing),
    /// Did not produce a trustworthy time.
    Failed {
        /// Which failure.
        status: Status,
        /// Details (an error message, a signal).
        detail: String,
    },
}

/// Measures candidates (in an isolated worker process, or by a model in tests).
pub trait Measurer {
    /// Measures `batch` one candidate at a time (compiling may happen together first), calling
    /// `done` after each; stops when `done` returns `false`, leaving the rest unmeasured.
    fn measure(
        &mut self,
        batch: &[Candidate],
        done: &mut dyn FnMut(&Candidate, Outcome) -> bool,
    ) -> Result<(), TuneError>;
}

/// Errors that stop tuning (a failing candidate never does).
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// The records database.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The measurement machinery itself (e.g. the worker cannot start, or the reference run
    /// fails).
    #[error("measurement: {0}")]
    Measure(String),
    /// The search space has no point.
    #[error("the kernel's schedule template has no decision to tune")]
    EmptySpace,
}

/// Options of a tuning run.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    /// Strategy.
    pub strategy: StrategyKind,
    /// Wall-clock budget of the run (a resumed run continues the count).
    pub budget: Duration,
    /// Stop after this many trials in the run (records of the search; the final round's
    /// verdicts are not trials).
    pub max_trials: Option<usize>,
    /// Candidates proposed (and compiled) together.
    pub batch: usize,
    /// Seed of the strategy's random choices.
    pub seed: u64,
    /// Amortize conversion time over this many runs in the score (`None`: run time only).
    pub amortize: Option<f64>,
    /// Continue the last run of this task in the database instead of starting a new one.
    pub resume: bool,
    /// Try the best schedules of earlier runs and of similar matrices first.
    pub warm_start: bool,
    /// Rounds of the final round (0: none). When the search stops, the [`finalists`] best
    /// candidates of the run and the built-in schedule are measured again, side by side, this
    /// many times (each round in another order); each gets a record of the verdict, scored by
    /// the median of its rounds, and such verdicts rank before single measurements (see
    /// [`db::rank`]). A single measurement can be lucky or unlucky by more than the candidates
    /// differ; the final round keeps the run from returning one that is not the fastest,
    /// the built-in schedule included. It follows the budget and the trial limit.
    ///
    /// [`finalists`]: TuneOptions::finalists
    pub final_rounds: usize,
    /// Candidates of the final round besides the built-in schedule.
    pub finalists: usize,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            strategy: StrategyKind::Evolutionary,
            budget: Duration::from_secs(60),
            max_trials: None,
            batch: 8,
            seed: 0,
            amortize: None,
            resume: false,
            warm_start: true,
            final_rounds: 3,
            finalists: 3,
        }
    }
}

/// Why a run stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The time budget is spent.
    Budget,
    /// The trial limit is reached.
    Trials,
    /// Every point of the space has been tried.
    Exhausted,
}

/// Hears about each trial (a progress bar).
pub trait Observer {
    /// A record was written; `best` is the best so far, `baseline` the built-in schedule's.
    fn trial(&mut self, record: &Record, best: Option<&Record>, baseline: Option<&Record>);
}

impl Observer for () {
    fn trial(&mut self, _: &Record, _: Option<&Record>, _: Option<&Record>) {}
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct Summary {
    /// The run's identifier.
    pub run: String,
    /// Whether it continued an earlier run.
    pub resumed: bool,
    /// The run's records (earlier ones included when resumed), in order.
    pub records: Vec<Record>,
    /// Why it stopped.
    pub stop: Stop,
    /// The strategy used.
    pub strategy: StrategyKind,
    /// Number of points in the space.
    pub space_size: u128,
}

impl Summary {
    /// The best successful record of the run: a final round's verdict when there is one
    /// ([`db::rank`]).
    pub fn best(&self) -> Option<&Record> {
        best_of(&self.records)
    }

    /// The built-in schedule's record, if it was measured: its last final-round verdict when
    /// there is one (the figure the best's verdict was measured beside).
    pub fn baseline(&self) -> Option<&Record> {
        baseline_of(&self.records)
    }

    /// Trials of the search (the final round's verdicts are not trials).
    pub fn trials(&self) -> usize {
        search_trials(&self.records)
    }

    /// Failed trials of the search (crashed, timed out, wrong, error).
    pub fn failed(&self) -> usize {
        self.records
            .iter()
            .filter(|r| !r.is_final() && !matches!(r.status, Status::Ok | Status::Invalid))
            .count()
    }
}

/// Decisions recorded for the built-in schedule.
pub fn baseline_decisions() -> BTreeMap<String, String> {
    BTreeMap::from([("template".to_string(), "builtin".to_string())])
}

fn is_baseline(r: &Record) -> bool {
    r.decisions.get("template").map(String::as_str) == Some("builtin")
}

fn best_of(records: &[Record]) -> Option<&Record> {
    records
        .iter()
        .filter(|r| r.status == Status::Ok && r.score.is_some())
        .min_by(|a, b| db::rank(a, b))
}

/// Appends `r` to the run's records and tells `observer`, with the best and the built-in
/// schedule's record so far.
fn push_observed(records: &mut Vec<Record>, r: Record, observer: &mut dyn Observer) {
    records.push(r);
    if let Some(r) = records.last() {
        observer.trial(r, best_of(records), baseline_of(records));
    }
}

/// Trials of the search among a run's records: the final round's verdicts are not trials.
fn search_trials(records: &[Record]) -> usize {
    records.iter().filter(|r| !r.is_final()).count()
}

fn baseline_of(records: &[Record]) -> Option<&Record> {
    records
        .iter()
        .rev()
        .find(|r| is_baseline(r) && r.is_final())
        .or_else(|| records.iter().find(|r| is_baseline(r)))
}

/// The final round's candidates among a run's records: the built-in schedule's measurement and
/// the `n` best other schedules (distinct traces), each as first measured by the search.
fn finalists(records: &[Record], n: usize) -> Vec<Candidate> {
    let mut ok: Vec<&Record> = records
        .iter()
        .filter(|r| !r.is_final() && r.status == Status::Ok && r.score.is_some())
        .collect();
    ok.sort_by(|a, b| db::rank(a, b));
    let candidate = |r: &Record| Candidate {
        trial: r.trial,
        decisions: r.decisions.clone(),
        trace: r.trace.clone(),
    };
    let base = ok.iter().position(|r| is_baseline(r)).map(|i| ok.remove(i));
    let mut seen: BTreeSet<String> = base.iter().map(|r| trace_key(&r.trace)).collect();
    let mut out: Vec<Candidate> = base.into_iter().map(candidate).collect();
    let want = out.len() + n;
    for r in ok {
        if out.len() >= want {
            break;
        }
        if seen.insert(trace_key(&r.trace)) {
            out.push(candidate(r));
        }
    }
    out
}

/// The verdict on one finalist from its outcomes over `rounds` rounds: the timing of its median
/// round (by `score`) with every round's score, or the first failure.
fn verdict(
    outcomes: Vec<Outcome>,
    rounds: usize,
    score: impl Fn(&Timing) -> f64,
) -> (Outcome, Vec<f64>) {
    let mut timings: Vec<Timing> = Vec::new();
    let mut scores: Vec<f64> = Vec::new();
    for (i, o) in outcomes.into_iter().enumerate() {
        match o {
            Outcome::Ok(t) => {
                scores.push(score(&t));
                timings.push(t);
            }
            Outcome::Failed { status, detail } => {
                let detail = format!("round {} of the final round: {detail}", i + 1);
                return (Outcome::Failed { status, detail }, scores);
            }
        }
    }
    if timings.len() < rounds.max(1) {
        let detail = format!(
            "measured in {} of the final round's {rounds} rounds",
            timings.len()
        );
        return (
            Outcome::Failed {
                status: Status::Error,
                detail,
            },
            scores,
        );
    }
    let mut order: Vec<usize> = (0..timings.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let median = timings[order[(order.len() - 1) / 2]];
    (Outcome::Ok(median), scores)
}

fn trace_key(t: &[Instruction]) -> String {
    serde_json::to_string(t).unwrap_or_default()
}

/// A fresh run identifier: the start time and the process.
pub fn new_run_id() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{t}-{}", std::process::id())
}

/// Tunes `task` over `template`'s space: measures `baseline` (the built-in schedule) first
/// when given, then what the strategy proposes, until the budget, the trial limit or the
/// space is exhausted. Every outcome is appended to `db` as soon as it is known.
#[allow(clippy::too_many_arguments)]
pub fn tune(
    template: &dyn Template,
    task: &Task,
    baseline: Option<Vec<Instruction>>,
    db: &Database,
    measurer: &mut dyn Measurer,
    opts: &TuneOptions,
    observer: &mut dyn Observer,
) -> Result<Summary, TuneError> {
    let space = template.space();
    if space.decisions.is_empty() {
        return Err(TuneError::EmptySpace);
    }
    let all = db.load()?;
    let mine: Vec<&Record> = all.iter().filter(|r| task.owns(r)).collect();
    let previous_run = mine.last().map(|r| r.run.clone());
    let (run, resumed) = match (&previous_run, opts.resume) {
        (Some(run), true) => (run.clone(), true),
        _ => (new_run_id(), false),
    };
    let mut records: Vec<Record> = if resumed {
        mine.iter()
            .filter(|r| r.run == run)
            .map(|r| (*r).clone())
            .collect()
    } else {
        vec![]
    };
    let elapsed0 = records.iter().map(|r| r.elapsed).fold(0.0, f64::max);
    let start = Instant::now();
    let elapsed = |start: &Instant| elapsed0 + start.elapsed().as_secs_f64();
    let mut next_trial = records.iter().map(|r| r.trial + 1).max().unwrap_or(0);
    // What the strategy has seen: every point with a record, and the traces already measured.
    let mut proposed: BTreeSet<Point> = BTreeSet::new();
    let mut history: Vec<(Point, Option<f64>)> = Vec::new();
    let mut by_trace: BTreeMap<String, Option<f64>> = BTreeMap::new();
    for r in &records {
        by_trace.insert(trace_key(&r.trace), r.score);
        if let Some(p) = space.from_labels(&r.decisions) {
            proposed.insert(p.clone());
            if r.status != Status::Invalid {
                history.push((p, r.score));
            }
        }
    }
    let mut strategy = Strategy::new(opts.strategy, rand::rngs::StdRng::seed_from_u64(opts.seed));
    let out_of_time = |start: &Instant| elapsed(start) >= opts.budget.as_secs_f64();
    // A resumed run's earlier verdicts are not trials.
    let out_of_trials =
        |records: &[Record]| opts.max_trials.is_some_and(|m| search_trials(records) >= m);

    let score_of = |t: &Timing| t.min + opts.amortize.map_or(0.0, |n| t.conversion / n);
    let make_record = |c: &Candidate, outcome: Outcome, elapsed: f64| -> Record {
        let (status, detail, timing) = match outcome {
            Outcome::Ok(t) => (Status::Ok, None, Some(t)),
            Outcome::Failed { status, detail } => (status, Some(detail), None),
        };
        let score = timing.as_ref().map(score_of);
        Record {
            version: RECORD_VERSION,
            kernel: task.kernel.clone(),
            kernel_hash: task.kernel_hash.clone(),
            data: task.data.clone(),
            features: task.features.clone(),
            machine: task.machine.clone(),
            threads: task.threads,
            run: run.clone(),
            trial: c.trial,
            elapsed,
            decisions: c.decisions.clone(),
            trace: c.trace.clone(),
            status,
            detail,
            timing,
            score,
            final_round: None,
        }
    };

    // The built-in schedule first, as the reference point of speedups.
    if let Some(trace) = baseline {
        if !records.iter().any(|r| is_baseline(r) && !r.is_final()) && !out_of_trials(&records) {
            let c = Candidate {
                trial: next_trial,
                decisions: baseline_decisions(),
                trace,
            };
            next_trial += 1;
            let mut result = None;
            measurer.measure(std::slice::from_ref(&c), &mut |c, o| {
                result = Some((c.clone(), o));
                true
            })?;
            if let Some((c, o)) = result {
                let r = make_record(&c, o, elapsed(&start));
                db.append(&r)?;
                by_trace.insert(trace_key(&r.trace), r.score);
                push_observed(&mut records, r, observer);
            }
        }
    }

    // Warm start: the best points of earlier runs of this task and of similar matrices.
    let mut queue: Vec<Point> = Vec::new();
    if opts.warm_start {
        let mut earlier: Vec<&Record> = mine
            .iter()
            .copied()
            .filter(|r| r.run != run && r.status == Status::Ok)
            .collect();
        earlier.sort_by(|a, b| db::rank(a, b));
        let similar = db::similar(&all, &task.kernel_hash, &task.data, &task.features, 3);
        for r in earlier.into_iter().take(3).chain(similar) {
            if let Some(p) = space.from_labels(&r.decisions) {
                if !proposed.contains(&p) && !queue.contains(&p) {
                    queue.push(p);
                }
            }
        }
    }

    let mut features = |p: &Point| template.features(p);
    let stop = loop {
        if out_of_time(&start) {
            break Stop::Budget;
        }
        if out_of_trials(&records) {
            break Stop::Trials;
        }
        let want = opts.batch.max(1);
        let mut points: Vec<Point> = Vec::new();
        while points.len() < want && !queue.is_empty() {
            let p = queue.remove(0);
            if !proposed.contains(&p) {
                points.push(p);
            }
        }
        if points.len() < want {
            let taken: BTreeSet<Point> = proposed
                .union(&points.iter().cloned().collect())
                .cloned()
                .collect();
            let state = SearchState {
                history: &history,
                proposed: &taken,
            };
            points.extend(strategy.propose(space, &state, want - points.len(), &mut features));
        }
        if points.is_empty() {
            break Stop::Exhausted;
        }
        let mut batch: Vec<(Candidate, Point)> = Vec::new();
        for p in points {
            proposed.insert(p.clone());
            let decisions = space.labels(&p);
            match template.trace(&p) {
                Err(why) => {
                    if out_of_trials(&records) {
                        break;
                    }
                    let c = Candidate {
                        trial: next_trial,
                        decisions,
                        trace: vec![],
                    };
                    next_trial += 1;
                    let r = make_record(
                        &c,
                        Outcome::Failed {
                            status: Status::Invalid,
                            detail: why,
                        },
                        elapsed(&start),
                    );
                    db.append(&r)?;
                    push_observed(&mut records, r, observer);
                }
                Ok(trace) => {
                    if let Some(score) = by_trace.get(&trace_key(&trace)) {
                        // Another point with the same schedule was measured: same outcome.
                        history.push((p, *score));
                        continue;
                    }
                    by_trace.insert(trace_key(&trace), None);
                    let c = Candidate {
                        trial: 0,
                        decisions,
                        trace,
                    };
                    batch.push((c, p));
                }
            }
        }
        let budget_left = opts
            .max_trials
            .map_or(usize::MAX, |m| m.saturating_sub(search_trials(&records)));
        batch.truncate(budget_left);
        for (c, _) in batch.iter_mut() {
            c.trial = next_trial;
            next_trial += 1;
        }
        let points_of: BTreeMap<usize, Point> =
            batch.iter().map(|(c, p)| (c.trial, p.clone())).collect();
        let candidates: Vec<Candidate> = batch.into_iter().map(|(c, _)| c).collect();
        let mut failure: Option<TuneError> = None;
        measurer.measure(&candidates, &mut |c, o| {
            let r = make_record(c, o, elapsed(&start));
            if let Err(e) = db.append(&r) {
                failure = Some(e.into());
                return false;
            }
            by_trace.insert(trace_key(&r.trace), r.score);
            if let Some(p) = points_of.get(&c.trial) {
                history.push((p.clone(), r.score));
            }
            push_observed(&mut records, r, observer);
            !out_of_time(&start) && !out_of_trials(&records)
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        // Candidates left unmeasured by a stop are forgotten (a resumed run proposes them again).
        for c in &candidates {
            if !records.iter().any(|r| r.trial == c.trial) {
                by_trace.remove(&trace_key(&c.trace));
                if let Some(p) = points_of.get(&c.trial) {
                    proposed.remove(p);
                }
            }
        }
    };
    // The final round: the finalists again, side by side, in rotating order.
    let finalists = if opts.final_rounds > 0 {
        finalists(&records, opts.finalists)
    } else {
        vec![]
    };
    if finalists.len() >= 2 {
        let mut outcomes: BTreeMap<usize, Vec<Outcome>> = BTreeMap::new();
        for round in 0..opts.final_rounds {
            let mut order = finalists.clone();
            order.rotate_left(round % finalists.len());
            measurer.measure(&order, &mut |c, o| {
                outcomes.entry(c.trial).or_default().push(o);
                true
            })?;
        }
        for c in &finalists {
            let got = outcomes.remove(&c.trial).unwrap_or_default();
            let (outcome, scores) = verdict(got, opts.final_rounds, score_of);
            let verdict = Candidate {
                trial: next_trial,
                ..c.clone()
            };
            next_trial += 1;
            let mut r = make_record(&verdict, outcome, elapsed(&start));
            r.final_round = Some(FinalRound {
                of_trial: c.trial,
                scores,
            });
            db.append(&r)?;
            push_observed(&mut records, r, observer);
        }
    }
    Ok(Summary {
        run,
        resumed,
        records,
        stop,
        strategy: strategy.kind(),
        space_size: space.size(),
    })
}
