//! Lacuna's autotuner: search spaces from schedule templates whose primitives take sampled
//! decisions, search strategies (exhaustive, random, evolutionary guided by a learned cost
//! model), the tuning loop with its budget, and the records database.
//!
//! Measuring is abstracted by [`Measurer`]: the command line measures each candidate in an
//! isolated worker process (see `lacuna tune`), tests inject deterministic timings.
#![warn(missing_docs)]

pub mod db;
pub mod features;
pub mod model;
pub mod report;
pub mod space;
pub mod strategy;
pub mod template;
pub mod tuner;

pub use db::{Database, DbError, FinalRound, Record, Status, Timing};
pub use features::{coo_stats, data_signature, kernel_hash, Machine, MatrixFeatures};
pub use space::{Decision, Point, Space};
pub use strategy::StrategyKind;
pub use template::{KernelTemplate, Template, TemplateOptions, MASKED_REGISTERS};
pub use tuner::{
    baseline_decisions, tune, Candidate, Measurer, Observer, Outcome, Stop, Summary, Task,
    TuneError, TuneOptions,
};
