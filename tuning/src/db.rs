//! The records database: one JSON object per line, appended atomically (a whole line in one
//! `write` on a file opened for appending, then synced), so a killed tuner leaves at most a
//! partial last line (a record never finished), which reading skips and the next append cuts
//! off.

use crate::features::{Machine, MatrixFeatures};
use lacuna_schedule::{Instruction, ScheduleFile, SCHEDULE_FORMAT_VERSION};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Version of the record format.
pub const RECORD_VERSION: u32 = 1;

/// How a candidate ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Built, ran and matched the reference.
    Ok,
    /// The point is not a legal schedule (a primitive refused it); never compiled.
    Invalid,
    /// Did not compile, or failed to run with an error.
    Error,
    /// Its results differ from the reference.
    Wrong,
    /// The worker process died while running it (e.g. a segmentation fault).
    Crashed,
    /// Ran past the time limit; the worker was killed.
    Timeout,
}

/// Seconds measured for a candidate that ran.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Fastest run.
    pub min: f64,
    /// Median run.
    pub median: f64,
    /// Number of timed runs.
    pub runs: usize,
    /// Lowering and code generation.
    pub compile: f64,
    /// Format conversions (preprocessing), once per data.
    pub conversion: f64,
}

/// One measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Record format version.
    pub version: u32,
    /// Kernel name.
    pub kernel: String,
    /// [`crate::features::kernel_hash`] of the kernel.
    pub kernel_hash: String,
    /// [`crate::features::data_signature`] of the inputs.
    pub data: String,
    /// Features of the sparse input (for warm starts from similar matrices).
    pub features: MatrixFeatures,
    /// The machine.
    pub machine: Machine,
    /// Worker threads of the measurement.
    pub threads: usize,
    /// The tuning run (an identifier chosen when it started).
    pub run: String,
    /// Trial number within the run (0: the built-in schedule).
    pub trial: usize,
    /// Seconds since the run started when the measurement ended (resumed runs continue the
    /// count).
    pub elapsed: f64,
    /// The template's decisions (`{"template": "builtin"}` for the built-in schedule).
    pub decisions: BTreeMap<String, String>,
    /// The schedule trace.
    pub trace: Vec<Instruction>,
    /// Outcome.
    pub status: Status,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Timings, if it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    /// The time the search ranks by: the fastest run, plus conversion time divided by the
    /// number of runs it is amortized over when that was given. For a record of the final
    /// round, the median of its rounds' scores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// Set on a record of a run's final round: the verdict on re-measuring an earlier trial
    /// side by side with the other finalists (see [`crate::TuneOptions::final_rounds`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_round: Option<FinalRound>,
}

/// What the final round measured for one finalist.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FinalRound {
    /// The trial of the run it re-measured.
    pub of_trial: usize,
    /// The score of each round that ran, in order (seconds).
    pub scores: Vec<f64>,
}

impl Record {
    /// Whether the record is a final round's verdict.
    pub fn is_final(&self) -> bool {
        self.final_round.is_some()
    }

    /// The trace as a schedule file for the record's kernel.
    pub fn schedule(&self) -> ScheduleFile {
        ScheduleFile {
            version: SCHEDULE_FORMAT_VERSION,
            kernel: self.kernel.clone(),
            trace: self.trace.clone(),
        }
    }

    /// Whether two records measure one candidate of one task (same kernel, data, machine,
    /// threads and trace).
    pub fn same_candidate(&self, other: &Record) -> bool {
        self.kernel_hash == other.kernel_hash
            && self.data == other.data
            && self.machine.id() == other.machine.id()
            && self.threads == other.threads
            && self.trace == other.trace
    }
}

/// Errors of the database.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A complete line is not a record (the file is not a records database, or was edited).
    #[error("{path}:{line}: not a tuning record: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// The parser's message.
        message: String,
    },
}

/// A records database file.
#[derive(Clone, Debug)]
pub struct Database {
    path: PathBuf,
}

impl Database {
    /// The database at `path` (created by the first append).
    pub fn new(path: impl Into<PathBuf>) -> Database {
        Database { path: path.into() }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every record, in file order. A last line without its newline (an append cut short by a
    /// kill) is skipped; any other line that is not a record is an error naming it.
    pub fn load(&self) -> Result<Vec<Record>, DbError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(source) => {
                return Err(DbError::Io {
                    path: self.path.clone(),
                    source,
                })
            }
        };
        let complete = text.ends_with('\n');
        let lines: Vec<&str> = text.lines().collect();
        let mut out = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Record>(line) {
                Ok(r) => out.push(r),
                Err(_) if i + 1 == lines.len() && !complete => {}
                Err(e) => {
                    return Err(DbError::Corrupt {
                        path: self.path.clone(),
                        line: i + 1,
                        message: e.to_string(),
                    })
                }
            }
        }
        Ok(out)
    }

    /// Appends one record as one line: a single write to a file opened for appending, synced
    /// to disk before returning. A partial last line (an append cut short by a kill: a record
    /// that was never finished) is cut off first.
    pub fn append(&self, r: &Record) -> Result<(), DbError> {
        let io = |source| DbError::Io {
            path: self.path.clone(),
            source,
        };
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&self.path)
            .map_err(io)?;
        let len = f.metadata().map_err(io)?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            f.seek(SeekFrom::End(-1)).map_err(io)?;
            f.read_exact(&mut last).map_err(io)?;
            if last[0] != b'\n' {
                let mut all = Vec::new();
                f.seek(SeekFrom::Start(0)).map_err(io)?;
                f.read_to_end(&mut all).map_err(io)?;
                let keep = all.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                f.set_len(keep as u64).map_err(io)?;
            }
        }
        let mut line = String::new();
        line.push_str(&serde_json::to_string(r).map_err(|e| io(std::io::Error::other(e)))?);
        line.push('\n');
        f.write_all(line.as_bytes()).map_err(io)?;
        f.sync_data().map_err(io)?;
        Ok(())
    }
}

/// The order in which records rank: a final round's verdicts (each measured side by side with
/// the other finalists, several times) before single measurements, then by score (a record
/// without one last); `min_by` keeps the earliest of equals.
pub fn rank(a: &Record, b: &Record) -> std::cmp::Ordering {
    let key = |r: &Record| (!r.is_final(), r.score.unwrap_or(f64::INFINITY));
    let (fa, sa) = key(a);
    let (fb, sb) = key(b);
    fa.cmp(&fb).then(sa.total_cmp(&sb))
}

/// The best successful record among `records` for a kernel and data, preferring this machine
/// and thread count: a final round's verdict before single measurements ([`rank`]), then the
/// lowest score, ties broken by the earliest.
pub fn best<'a>(
    records: &'a [Record],
    kernel_hash: &str,
    data: &str,
    machine: &Machine,
    threads: Option<usize>,
) -> Option<&'a Record> {
    let ok = |r: &&Record| {
        r.status == Status::Ok
            && r.kernel_hash == kernel_hash
            && r.data == data
            && r.score.is_some()
    };
    let pick = |filter: &dyn Fn(&&Record) -> bool| {
        records
            .iter()
            .filter(ok)
            .filter(|r| filter(r))
            .min_by(|a, b| rank(a, b))
    };
    let id = machine.id();
    pick(&|r| r.machine.id() == id && threads.is_none_or(|t| r.threads == t))
        .or_else(|| pick(&|r| r.machine.id() == id))
        .or_else(|| pick(&|_| true))
}

/// Records of the same kernel on other data, nearest first by matrix features: for each of up
/// to `n` other data signatures, its best successful record ([`rank`]).
pub fn similar<'a>(
    records: &'a [Record],
    kernel_hash: &str,
    data: &str,
    features: &MatrixFeatures,
    n: usize,
) -> Vec<&'a Record> {
    let mut best_per_data: BTreeMap<&str, &Record> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r.kernel_hash == kernel_hash && r.data != data && r.status == Status::Ok)
    {
        let e = best_per_data.entry(r.data.as_str()).or_insert(r);
        if rank(r, e).is_lt() {
            *e = r;
        }
    }
    let mut v: Vec<&Record> = best_per_data.into_values().collect();
    v.sort_by(|a, b| {
        a.features
            .distance(features)
            .total_cmp(&b.features.distance(features))
    });
    v.truncate(n);
    v
}
