//! Strategy logic without timing noise: a template whose schedules are fake and a measurer
//! whose timings are a deterministic function of the decisions.

use lacuna_schedule::Instruction;
use lacuna_tuning::db::{Database, Status, Timing};
use lacuna_tuning::{
    tune, Candidate, Machine, MatrixFeatures, Measurer, Outcome, Point, Space, Stop, StrategyKind,
    Task, Template, TuneError, TuneOptions,
};
use std::collections::BTreeSet;
use std::time::Duration;

/// Three decisions of six options: 216 points.
struct Fake {
    space: Space,
}

impl Fake {
    fn new() -> Fake {
        let mut space = Space::default();
        for d in ["a", "b", "c"] {
            space.push(d, (0..6).map(|i| i.to_string()).collect());
        }
        Fake { space }
    }
}

fn values(labels: &std::collections::BTreeMap<String, String>) -> (i64, i64, i64) {
    let v = |k: &str| labels[k].parse::<i64>().expect("numeric label");
    (v("a"), v("b"), v("c"))
}

impl Template for Fake {
    fn space(&self) -> &Space {
        &self.space
    }
    fn trace(&self, p: &Point) -> Result<Vec<Instruction>, String> {
        let (a, b, c) = values(&self.space.labels(p));
        if a == 5 && b == 5 {
            return Err("split: factor does not divide the extent".into());
        }
        Ok(vec![Instruction::Specialize {
            param: "abc".into(),
            value: (a * 100 + b * 10 + c) as u64,
        }])
    }
}

/// Time in ms: smallest (1.0) at a = 4, b = 1, c = 2; a = 0 with b = 0 crashes.
fn fake_time(a: i64, b: i64, c: i64) -> f64 {
    1.0 + 0.3 * ((a - 4) * (a - 4)) as f64
        + 0.5 * (b - 1).abs() as f64
        + if c == 2 { 0.0 } else { 0.4 + 0.1 * c as f64 }
        + 0.05 * ((a * b) % 3) as f64 * (a != 4) as i64 as f64
}

const OPTIMUM: (i64, i64, i64) = (4, 1, 2);

#[derive(Default)]
struct FakeMeasurer {
    measured: usize,
}

impl Measurer for FakeMeasurer {
    fn measure(
        &mut self,
        batch: &[Candidate],
        done: &mut dyn FnMut(&Candidate, Outcome) -> bool,
    ) -> Result<(), TuneError> {
        for c in batch {
            self.measured += 1;
            let outcome = if c.decisions.contains_key("template") {
                Outcome::Ok(timing(5.0))
            } else {
                let (a, b, cc) = values(&c.decisions);
                if a == 0 && b == 0 {
                    Outcome::Failed {
                        status: Status::Crashed,
                        detail: "killed by signal 11".into(),
                    }
                } else {
                    Outcome::Ok(timing(fake_time(a, b, cc)))
                }
            };
            if !done(c, outcome) {
                break;
            }
        }
        Ok(())
    }
}

fn timing(ms: f64) -> Timing {
    Timing {
        min: ms * 1e-3,
        median: ms * 1e-3,
        runs: 3,
        compile: 0.0,
        conversion: 0.0,
    }
}

fn task() -> Task {
    Task {
        kernel: "fake".into(),
        kernel_hash: "k".into(),
        data: "d".into(),
        features: MatrixFeatures::default(),
        machine: Machine::host(),
        threads: 1,
    }
}

fn opts(strategy: StrategyKind, seed: u64, max_trials: Option<usize>) -> TuneOptions {
    TuneOptions {
        strategy,
        budget: Duration::from_secs(3600),
        max_trials,
        batch: 4,
        seed,
        amortize: None,
        resume: false,
        warm_start: true,
        // The search alone; the final round has tests of its own.
        final_rounds: 0,
        finalists: 3,
    }
}

fn is_optimum(r: &lacuna_tuning::Record) -> bool {
    !r.decisions.contains_key("template") && values(&r.decisions) == OPTIMUM
}

/// The trial (1-based position in the run) at which the optimum was first measured.
fn found_at(records: &[lacuna_tuning::Record]) -> Option<usize> {
    records.iter().position(is_optimum).map(|i| i + 1)
}

#[test]
fn exhaustive_visits_every_point_once_and_finds_the_optimum() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::new(dir.path().join("db.jsonl"));
    let t = Fake::new();
    let mut m = FakeMeasurer::default();
    let s = tune(
        &t,
        &task(),
        Some(vec![]),
        &db,
        &mut m,
        &opts(StrategyKind::Exhaustive, 0, None),
        &mut (),
    )
    .expect("tunes");
    assert_eq!(s.stop, Stop::Exhausted);
    assert_eq!(s.records.len(), 1 + 216);
    let invalid = s
        .records
        .iter()
        .filter(|r| r.status == Status::Invalid)
        .count();
    assert_eq!(invalid, 6, "a = 5, b = 5 for each c");
    assert_eq!(m.measured, 1 + 216 - 6, "invalid points are never measured");
    assert_eq!(s.failed(), 6, "a = 0, b = 0 for each c crashed");
    assert!(is_optimum(s.best().expect("a best")));
    assert!(s.baseline().is_some());
    let keys: BTreeSet<String> = s
        .records
        .iter()
        .map(|r| format!("{:?}", r.decisions))
        .collect();
    assert_eq!(keys.len(), s.records.len(), "no point twice");
    assert_eq!(db.load().expect("parses").len(), s.records.len());
}

#[test]
fn random_search_draws_without_replacement() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::new(dir.path().join("db.jsonl"));
    let s = tune(
        &Fake::new(),
        &task(),
        None,
        &db,
        &mut FakeMeasurer::default(),
        &opts(StrategyKind::Random, 7, Some(100)),
        &mut (),
    )
    .expect("tunes");
    assert_eq!(s.stop, Stop::Trials);
    assert_eq!(s.records.len(), 100);
    let keys: BTreeSet<String> = s
        .records
        .iter()
        .map(|r| format!("{:?}", r.decisions))
        .collect();
    assert_eq!(keys.len(), 100);
}

#[test]
fn evolutionary_search_finds_the_optimum_in_a_fraction_of_the_space() {
    // Random search needs 108 trials on average (216 points); the model-guided search must
    // find the optimum within 60 on every seed.
    let mut found = Vec::new();
    for seed in 0..4 {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Database::new(dir.path().join("db.jsonl"));
        let s = tune(
            &Fake::new(),
            &task(),
            None,
            &db,
            &mut FakeMeasurer::default(),
            &opts(StrategyKind::Evolutionary, seed, Some(60)),
            &mut (),
        )
        .expect("tunes");
        found.push(found_at(&s.records));
    }
    eprintln!("optimum found at trials {found:?}");
    assert!(found.iter().all(|f| f.is_some()), "{found:?}");
}

#[test]
fn a_resumed_run_continues_without_repeating_a_candidate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::new(dir.path().join("db.jsonl"));
    let first = tune(
        &Fake::new(),
        &task(),
        Some(vec![]),
        &db,
        &mut FakeMeasurer::default(),
        &opts(StrategyKind::Random, 1, Some(20)),
        &mut (),
    )
    .expect("tunes");
    assert_eq!(first.records.len(), 20);
    let mut o = opts(StrategyKind::Random, 1, Some(50));
    o.resume = true;
    let mut m = FakeMeasurer::default();
    let second = tune(
        &Fake::new(),
        &task(),
        Some(vec![]),
        &db,
        &mut m,
        &o,
        &mut (),
    )
    .expect("tunes");
    assert!(second.resumed);
    assert_eq!(second.run, first.run);
    assert_eq!(second.records.len(), 50);
    assert!(
        m.measured <= 30,
        "only new candidates are measured ({})",
        m.measured
    );
    let all = db.load().expect("parses");
    assert_eq!(all.len(), 50);
    let keys: BTreeSet<String> = all.iter().map(|r| format!("{:?}", r.decisions)).collect();
    assert_eq!(keys.len(), 50, "no record twice");
    let trials: BTreeSet<usize> = all.iter().map(|r| r.trial).collect();
    assert_eq!(trials.len(), 50, "trial numbers continue");
    // A new run (no --resume) starts over but tries the earlier best first.
    let third = tune(
        &Fake::new(),
        &task(),
        None,
        &db,
        &mut FakeMeasurer::default(),
        &opts(StrategyKind::Random, 2, Some(1)),
        &mut (),
    )
    .expect("tunes");
    assert_ne!(third.run, first.run);
    let best_before = lacuna_tuning::db::best(&all, "k", "d", &Machine::host(), Some(1))
        .expect("a best")
        .decisions
        .clone();
    assert_eq!(third.records[0].decisions, best_before);
}

#[test]
fn a_partial_last_line_is_skipped_and_repaired() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db.jsonl");
    let db = Database::new(&path);
    tune(
        &Fake::new(),
        &task(),
        None,
        &db,
        &mut FakeMeasurer::default(),
        &opts(StrategyKind::Exhaustive, 0, Some(3)),
        &mut (),
    )
    .expect("tunes");
    let mut text = std::fs::read_to_string(&path).expect("reads");
    text.push_str("{\"version\":1,\"kernel\":\"fa");
    std::fs::write(&path, &text).expect("writes");
    assert_eq!(db.load().expect("a cut line is skipped").len(), 3);
    let mut o = opts(StrategyKind::Exhaustive, 0, Some(5));
    o.resume = true;
    tune(
        &Fake::new(),
        &task(),
        None,
        &db,
        &mut FakeMeasurer::default(),
        &o,
        &mut (),
    )
    .expect("tunes");
    assert_eq!(db.load().expect("parses").len(), 5);
    // A corrupt line in the middle is an error that names it.
    let text = std::fs::read_to_string(&path).expect("reads");
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(1, "not json");
    std::fs::write(&path, lines.join("\n") + "\n").expect("writes");
    let e = db.load().expect_err("corrupt");
    assert!(e.to_string().contains(":2:"), "{e}");
}

#[test]
fn records_of_a_similar_matrix_warm_start_a_new_search() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::new(dir.path().join("db.jsonl"));
    // Tune on a "similar" matrix (another data signature, nearby features) first.
    let mut other = task();
    other.data = "other".into();
    other.features.nnz = 1000.0;
    let mut far = task();
    far.data = "far".into();
    far.features.nnz = 1e9;
    for t in [&other, &far] {
        tune(
            &Fake::new(),
            t,
            None,
            &db,
            &mut FakeMeasurer::default(),
            &opts(StrategyKind::Exhaustive, 0, None),
            &mut (),
        )
        .expect("tunes");
    }
    let mut me = task();
    me.features.nnz = 1100.0;
    let mut o = opts(StrategyKind::Random, 5, Some(2));
    o.batch = 1;
    let s = tune(
        &Fake::new(),
        &me,
        None,
        &db,
        &mut FakeMeasurer::default(),
        &o,
        &mut (),
    )
    .expect("tunes");
    assert!(is_optimum(&s.records[0]), "{:?}", s.records[0].decisions);
    // Without warm starts, the first point is the strategy's own.
    let mut o = opts(StrategyKind::Exhaustive, 5, Some(1));
    o.warm_start = false;
    let s = tune(
        &Fake::new(),
        &me,
        None,
        &db,
        &mut FakeMeasurer::default(),
        &o,
        &mut (),
    )
    .expect("tunes");
    assert_eq!(values(&s.records[0].decisions), (0, 0, 0));
}

#[test]
fn amortized_scores_count_conversion_time() {
    struct Converting;
    impl Measurer for Converting {
        fn measure(
            &mut self,
            batch: &[Candidate],
            done: &mut dyn FnMut(&Candidate, Outcome) -> bool,
        ) -> Result<(), TuneError> {
            for c in batch {
                // Option a = 0 runs fastest but converts slowest.
                let (a, _, _) = values(&c.decisions);
                let mut t = timing(1.0 + a as f64 * 0.1);
                t.conversion = if a == 0 { 1.0 } else { 0.0 };
                if !done(c, Outcome::Ok(t)) {
                    break;
                }
            }
            Ok(())
        }
    }
    for (amortize, want_a) in [(None, 0), (Some(10.0), 1)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Database::new(dir.path().join("db.jsonl"));
        let mut o = opts(StrategyKind::Exhaustive, 0, None);
        o.amortize = amortize;
        let s = tune(
            &Fake::new(),
            &task(),
            None,
            &db,
            &mut Converting,
            &o,
            &mut (),
        )
        .expect("tunes");
        let best = s.best().expect("a best");
        assert_eq!(values(&best.decisions).0, want_a, "amortize {amortize:?}");
    }
}

/// Measures like [`FakeMeasurer`], with noise: the first measurement of `lucky` comes out at
/// `lucky_ms`, the built-in schedule's first at `baseline_first_ms` and later ones at
/// `baseline_ms`, and `flaky` crashes on its second measurement. Records the order of each
/// batch.
struct Noisy {
    lucky: (i64, i64, i64),
    lucky_ms: f64,
    baseline_ms: f64,
    baseline_first_ms: f64,
    flaky: Option<(i64, i64, i64)>,
    seen: std::collections::BTreeMap<String, usize>,
    batches: Vec<Vec<usize>>,
}

impl Noisy {
    fn new(lucky: (i64, i64, i64), lucky_ms: f64) -> Noisy {
        Noisy {
            lucky,
            lucky_ms,
            baseline_ms: 5.0,
            baseline_first_ms: 5.0,
            flaky: None,
            seen: Default::default(),
            batches: vec![],
        }
    }
}

impl Measurer for Noisy {
    fn measure(
        &mut self,
        batch: &[Candidate],
        done: &mut dyn FnMut(&Candidate, Outcome) -> bool,
    ) -> Result<(), TuneError> {
        self.batches.push(batch.iter().map(|c| c.trial).collect());
        for c in batch {
            let n = self.seen.entry(format!("{:?}", c.decisions)).or_insert(0);
            *n += 1;
            let outcome = if c.decisions.contains_key("template") {
                Outcome::Ok(timing(if *n == 1 {
                    self.baseline_first_ms
                } else {
                    self.baseline_ms
                }))
            } else {
                let v = values(&c.decisions);
                if Some(v) == self.flaky && *n == 2 {
                    Outcome::Failed {
                        status: Status::Crashed,
                        detail: "killed by signal 11".into(),
                    }
                } else if v == self.lucky && *n == 1 {
                    Outcome::Ok(timing(self.lucky_ms))
                } else {
                    Outcome::Ok(timing(fake_time(v.0, v.1, v.2)))
                }
            };
            if !done(c, outcome) {
                break;
            }
        }
        Ok(())
    }
}

/// Tunes [`Fake`] with `m` and `o` into `db`, the built-in schedule being `baseline`.
fn tune_fake(
    db: &Database,
    m: &mut dyn Measurer,
    o: &TuneOptions,
    baseline: Vec<Instruction>,
) -> lacuna_tuning::Summary {
    tune(&Fake::new(), &task(), Some(baseline), db, m, o, &mut ()).expect("tunes")
}

/// [`tune_fake`] into a fresh database (kept as long as the directory).
fn tune_noisy(
    m: &mut Noisy,
    o: &TuneOptions,
    baseline: Vec<Instruction>,
) -> (tempfile::TempDir, Database, lacuna_tuning::Summary) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::new(dir.path().join("db.jsonl"));
    let s = tune_fake(&db, m, o, baseline);
    (dir, db, s)
}

fn with_final_round(rounds: usize, finalists: usize) -> TuneOptions {
    let mut o = opts(StrategyKind::Exhaustive, 0, None);
    o.final_rounds = rounds;
    o.finalists = finalists;
    o
}

/// A point measured once at half its time wins the search; measured again beside the other
/// finalists it loses to the optimum, whose verdict is the best of the run and of the
/// database.
#[test]
fn the_final_round_overrules_a_lucky_measurement() {
    let lucky = (4, 1, 3); // 1.7 ms, measured once at 0.5 ms
    assert!(fake_time(4, 1, 3) > 1.5);
    // Without a final round the lucky measurement wins.
    let mut m = Noisy::new(lucky, 0.5);
    let (_dir, _db, s) = tune_noisy(&mut m, &with_final_round(0, 3), vec![]);
    assert_eq!(values(&s.best().expect("best").decisions), lucky);
    assert!(s.records.iter().all(|r| r.final_round.is_none()));

    let mut m = Noisy::new(lucky, 0.5);
    let (_dir, db, s) = tune_noisy(&mut m, &with_final_round(3, 3), vec![]);
    let search = 1 + 216;
    assert_eq!(
        s.records.len(),
        search + 4,
        "3 finalists and the built-in schedule"
    );
    let verdicts: Vec<&lacuna_tuning::Record> = s.records.iter().filter(|r| r.is_final()).collect();
    assert!(s.records[..search].iter().all(|r| !r.is_final()));
    assert_eq!(verdicts.len(), 4);
    // The finalists: the built-in schedule and the three best of the search, each judged once,
    // by the median of three rounds, under a trial number of its own.
    let judged: Vec<usize> = verdicts
        .iter()
        .map(|r| r.final_round.as_ref().expect("verdict").of_trial)
        .collect();
    assert_eq!(judged[0], s.records[0].trial, "the built-in schedule first");
    let mut search_best: Vec<&lacuna_tuning::Record> = s.records[1..search]
        .iter()
        .filter(|r| r.status == Status::Ok)
        .collect();
    search_best.sort_by(|a, b| a.score.unwrap_or(9.0).total_cmp(&b.score.unwrap_or(9.0)));
    let top3: BTreeSet<usize> = search_best[..3].iter().map(|r| r.trial).collect();
    assert_eq!(judged[1..].iter().copied().collect::<BTreeSet<_>>(), top3);
    let trials: BTreeSet<usize> = s.records.iter().map(|r| r.trial).collect();
    assert_eq!(trials.len(), s.records.len(), "trial numbers stay unique");
    for v in &verdicts {
        let f = v.final_round.as_ref().expect("verdict");
        assert_eq!(f.scores.len(), 3);
        let mut sorted = f.scores.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(v.score, Some(sorted[1]), "the median round");
        let first = s
            .records
            .iter()
            .find(|r| r.trial == f.of_trial)
            .expect("judged trial");
        assert_eq!(first.trace, v.trace);
        assert_eq!(first.decisions, v.decisions);
    }
    let best = s.best().expect("best");
    assert!(best.is_final());
    assert!(is_optimum(best), "{:?}", best.decisions);
    let lucky_verdict = verdicts
        .iter()
        .find(|r| !r.decisions.contains_key("template") && values(&r.decisions) == lucky)
        .expect("the lucky point is a finalist");
    assert!((lucky_verdict.score.expect("score") - fake_time(4, 1, 3) * 1e-3).abs() < 1e-12);
    // Each round measures every finalist once, each round in another order.
    let rounds = &m.batches[m.batches.len() - 3..];
    for r in rounds {
        assert_eq!(
            r.iter().copied().collect::<BTreeSet<_>>(),
            judged.iter().copied().collect()
        );
    }
    assert_ne!(rounds[0], rounds[1]);
    assert_ne!(rounds[1], rounds[2]);
    // What `lacuna tune apply-best` reads: the verdict, before the lucky single measurement.
    let all = db.load().expect("parses");
    assert_eq!(all.len(), s.records.len());
    let t = task();
    let from_db =
        lacuna_tuning::db::best(&all, &t.kernel_hash, &t.data, &t.machine, Some(1)).expect("best");
    assert_eq!(from_db, best);
    // The speedup is taken between verdicts.
    assert!(s.baseline().expect("baseline").is_final());
    let table = lacuna_tuning::report::table(&s.records, s.baseline().and_then(|b| b.score), 5);
    let first_row = table.lines().nth(1).expect("a row");
    assert!(first_row.contains("    3  "), "3 measurements: {table}");
}

/// The built-in schedule, unlucky in its first measurement, is faster than every candidate:
/// the final round makes it the best, so that tuning never returns a slower schedule.
#[test]
fn the_builtin_schedule_wins_the_final_round_when_it_is_fastest() {
    let mut m = Noisy::new((0, 0, 1), 3.0);
    m.baseline_first_ms = 9.0;
    m.baseline_ms = 0.9;
    let base = vec![Instruction::Specialize {
        param: "builtin".into(),
        value: 0,
    }];
    let (_dir, _db, s) = tune_noisy(&mut m, &with_final_round(3, 2), base.clone());
    let best = s.best().expect("best");
    assert!(best.is_final());
    assert_eq!(best.decisions, lacuna_tuning::baseline_decisions());
    assert_eq!(best.trace, base);
    assert_eq!(s.baseline(), Some(best));
    assert_eq!(s.records.iter().filter(|r| r.is_final()).count(), 3);
}

/// A finalist that crashes when measured again is judged failed, with the round named, and is
/// not chosen; the others' verdicts stand.
#[test]
fn a_finalist_failing_in_the_final_round_is_judged_failed() {
    let mut m = Noisy::new((0, 0, 1), 3.0);
    m.flaky = Some(OPTIMUM);
    let (_dir, _db, s) = tune_noisy(&mut m, &with_final_round(3, 3), vec![]);
    let flaky = s
        .records
        .iter()
        .find(|r| {
            r.is_final() && !r.decisions.contains_key("template") && values(&r.decisions) == OPTIMUM
        })
        .expect("the optimum is a finalist");
    assert_eq!(flaky.status, Status::Crashed);
    assert_eq!(flaky.score, None);
    assert!(
        flaky
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("round 1 of the final round"),
        "{:?}",
        flaky.detail
    );
    assert_eq!(flaky.final_round.as_ref().map(|f| f.scores.len()), Some(0));
    let best = s.best().expect("best");
    assert!(best.is_final() && best.status == Status::Ok);
    assert!(!is_optimum(best));
    assert_eq!(
        s.failed(),
        0,
        "failed() counts the search's trials, which all ran"
    );
}

/// A resumed run counts its trials without the earlier final round's verdicts, and ends with a
/// final round of its own.
#[test]
fn a_resumed_run_counts_trials_without_verdicts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::new(dir.path().join("db.jsonl"));
    let mut m = Noisy::new((0, 0, 1), 3.0);
    let mut o = opts(StrategyKind::Random, 3, Some(10));
    o.final_rounds = 2;
    let first = tune_fake(&db, &mut m, &o, vec![]);
    assert_eq!(first.records.iter().filter(|r| !r.is_final()).count(), 10);
    assert_eq!(first.records.iter().filter(|r| r.is_final()).count(), 4);
    o.max_trials = Some(20);
    o.resume = true;
    let s = tune_fake(&db, &mut m, &o, vec![]);
    assert!(s.resumed);
    assert_eq!(s.records.iter().filter(|r| !r.is_final()).count(), 20);
    assert_eq!(s.records.iter().filter(|r| r.is_final()).count(), 8);
    let builtin = s
        .records
        .iter()
        .filter(|r| !r.is_final() && r.decisions.contains_key("template"))
        .count();
    assert_eq!(builtin, 1, "the built-in schedule is a trial once");
    let trials: BTreeSet<usize> = s.records.iter().map(|r| r.trial).collect();
    assert_eq!(trials.len(), s.records.len());
    assert_eq!(db.load().expect("parses").len(), s.records.len());
}
