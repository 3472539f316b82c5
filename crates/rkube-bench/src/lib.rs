//! `rkube bench`: reproducible performance scenarios for rkube.
//!
//! Each scenario ([`scenarios`]) starts what it needs as child processes —
//! `rkube apiserver` (this very binary) on a free loopback port and a
//! temporary data dir, and a real etcd on loopback ([`procs`]) — drives it
//! over HTTP ([`client`]), and writes a [`report::Report`] as JSON, Markdown
//! and an SVG plot ([`svg`]) into `bench-results/`. Every process a run
//! starts is stopped by PID when it ends, fails or is interrupted.
//!
//! Modules: [`cli`] (flags, `run`), [`scenarios`] (`list`, `watch`,
//! `cluster`, `init`, `writes`), [`procs`], [`client`], [`load`] (bulk
//! loading straight into storage), [`objects`] (pods ~1.5 KB, configmaps
//! ~1 KB, ...), [`stats`] (percentiles, histograms), [`report`], [`svg`],
//! [`machine`] (nproc, memory, kernel, git commit), [`progress`], [`summary`]
//! (BENCHMARKS.md from the reports of one commit).

#![deny(missing_docs)]

pub mod cli;
pub mod client;
pub mod load;
pub mod machine;
pub mod objects;
pub mod procs;
pub mod progress;
pub mod report;
pub mod scenarios;
pub mod stats;
pub mod summary;
pub mod svg;
