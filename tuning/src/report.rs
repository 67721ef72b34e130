//! For people: the table of the best schedules and the convergence plot of a run.

use crate::db::{Record, Status};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::Path;

/// Best time so far after each trial of the search (seconds; `None` until a trial succeeds);
/// the final round's verdicts are not trials of the search and are left out.
pub fn convergence(records: &[Record]) -> Vec<(usize, Option<f64>)> {
    let mut best: Option<f64> = None;
    records
        .iter()
        .filter(|r| !r.is_final())
        .enumerate()
        .map(|(i, r)| {
            if r.status == Status::Ok {
                if let Some(s) = r.score {
                    best = Some(best.map_or(s, |b: f64| b.min(s)));
                }
            }
            (i + 1, best)
        })
        .collect()
}

/// Trials it took to come within `fraction` of the best time (e.g. 0.95: a time at most
/// best / 0.95), counted from the run's first record.
pub fn trials_to_reach(records: &[Record], fraction: f64) -> Option<usize> {
    let curve = convergence(records);
    let best = curve.last()?.1?;
    curve
        .iter()
        .find(|(_, b)| b.is_some_and(|b| b <= best / fraction))
        .map(|(i, _)| *i)
}

/// The `n` fastest successful records as a text table, with their speedup over `baseline`, in
/// the order they rank ([`crate::db::rank`]): the final round's verdicts first (a trial with a
/// verdict is listed by it alone), `meas` telling how many measurements (side-by-side rounds)
/// a time sums up.
pub fn table(records: &[Record], baseline: Option<f64>, n: usize) -> String {
    let judged: std::collections::BTreeSet<usize> = records
        .iter()
        .filter_map(|r| r.final_round.as_ref().map(|f| f.of_trial))
        .collect();
    let mut ok: Vec<&Record> = records
        .iter()
        .filter(|r| r.status == Status::Ok && r.score.is_some())
        .filter(|r| r.is_final() || !judged.contains(&r.trial))
        .collect();
    ok.sort_by(|a, b| crate::db::rank(a, b));
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>4}  {:>6}  {:>12}  {:>4}  {:>12}  {:>8}  decisions",
        "rank", "trial", "time (ms)", "meas", "convert (ms)", "speedup"
    );
    for (i, r) in ok.iter().take(n).enumerate() {
        let (trial, meas) = r
            .final_round
            .as_ref()
            .map_or((r.trial, 1), |f| (f.of_trial, f.scores.len()));
        let t = r.score.unwrap_or(f64::NAN);
        let conv = r.timing.map_or(0.0, |t| t.conversion);
        let speedup = baseline.map_or("-".to_string(), |b| format!("{:.2}x", b / t));
        let decisions = r
            .decisions
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(
            s,
            "{:>4}  {:>6}  {:>12.4}  {:>4}  {:>12.3}  {:>8}  {}",
            i + 1,
            trial,
            t * 1e3,
            meas,
            conv * 1e3,
            speedup,
            decisions
        );
    }
    s
}

/// Writes the convergence plot (best time in ms against the trial number, failed trials as
/// red marks on the axis) as SVG.
pub fn plot_svg(records: &[Record], title: &str, path: &Path) -> Result<(), String> {
    let curve: Vec<(f64, f64)> = convergence(records)
        .into_iter()
        .filter_map(|(i, b)| b.map(|b| (i as f64, b * 1e3)))
        .collect();
    // The search's trials; the final round's verdicts are not on its axis.
    let search: Vec<&Record> = records.iter().filter(|r| !r.is_final()).collect();
    let points: Vec<(f64, f64)> = search
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.score.map(|s| ((i + 1) as f64, s * 1e3)))
        .collect();
    let failed: Vec<f64> = search
        .iter()
        .enumerate()
        .filter(|(_, r)| !matches!(r.status, Status::Ok | Status::Invalid))
        .map(|(i, _)| (i + 1) as f64)
        .collect();
    let n = search.len().max(1) as f64;
    let ymax = points.iter().map(|p| p.1).fold(0.0f64, f64::max).max(1e-6) * 1.05;
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| e.to_string();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n + 1.0, 0.0..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("trial")
        .y_desc("time (ms)")
        .draw()
        .map_err(|e| err(&e))?;
    chart
        .draw_series(
            points
                .iter()
                .map(|&(x, y)| Circle::new((x, y), 2, BLUE.mix(0.4).filled())),
        )
        .map_err(|e| err(&e))?
        .label("trial")
        .legend(|(x, y)| Circle::new((x, y), 3, BLUE.mix(0.4).filled()));
    chart
        .draw_series(LineSeries::new(curve, &BLACK))
        .map_err(|e| err(&e))?
        .label("best so far")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK));
    chart
        .draw_series(
            failed
                .iter()
                .map(|&x| Cross::new((x, 0.0), 4, RED.filled())),
        )
        .map_err(|e| err(&e))?
        .label("failed")
        .legend(|(x, y)| Cross::new((x, y), 4, RED.filled()));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
