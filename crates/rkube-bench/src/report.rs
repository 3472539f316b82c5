//! A scenario's report and its three files in the output directory:
//! `<scenario>.json` (machine, parameters, every measurement's summary,
//! tables, what was not measured and why), `<scenario>.md` (the same as
//! Markdown tables) and `<scenario>.svg` (the plots, when the scenario has any).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::machine::MachineInfo;
use crate::stats::Summary;
use crate::svg::{self, Plot};

/// Errors writing a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Creating the directory or writing a file failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Serializing the JSON failed.
    #[error("serializing the report: {0}")]
    Json(#[from] serde_json::Error),
}

/// One measured quantity, repeated `summary.runs` times.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    /// Stable name, e.g. `list/configmaps/rv0`.
    pub name: String,
    /// Unit of every summary field: `s`, `objects/s`, `bytes`, ...
    pub unit: String,
    /// What distinguishes this measurement (size, mode, backend, verb, ...).
    pub labels: BTreeMap<String, String>,
    /// The samples' summary.
    pub summary: Summary,
}

/// A measurement that was not taken, and why.
#[derive(Debug, Clone, Serialize)]
pub struct NotMeasured {
    /// What would have been measured.
    pub name: String,
    /// Why it was not.
    pub reason: String,
}

/// A table rendered in the Markdown file (and kept in the JSON).
#[derive(Debug, Clone, Serialize)]
pub struct Table {
    /// Heading above the table.
    pub title: String,
    /// Column headers.
    pub columns: Vec<String>,
    /// Rows, each as many cells as columns.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these headers and no rows.
    pub fn new(title: impl Into<String>, columns: &[&str]) -> Table {
        Table { title: title.into(), columns: columns.iter().map(|c| c.to_string()).collect(), rows: Vec::new() }
    }

    /// Appends a row (padded or cut to the number of columns).
    pub fn row(&mut self, cells: Vec<String>) {
        let mut cells = cells;
        cells.resize(self.columns.len(), String::new());
        self.rows.push(cells);
    }

    /// The table as GitHub Markdown.
    pub fn to_markdown(&self) -> String {
        let esc = |s: &str| s.replace('|', "\\|").replace('\n', " ");
        let mut out = format!("### {}\n\n", self.title);
        out += &format!("| {} |\n", self.columns.iter().map(|c| esc(c)).collect::<Vec<_>>().join(" | "));
        out += &format!("|{}\n", "---|".repeat(self.columns.len()));
        for row in &self.rows {
            out += &format!("| {} |\n", row.iter().map(|c| esc(c)).collect::<Vec<_>>().join(" | "));
        }
        out
    }
}

/// Everything one scenario run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `list`, `watch`, `cluster`, `init` or `writes`.
    pub scenario: String,
    /// RFC 3339 start time (UTC).
    pub started_at: String,
    /// Wall-clock length of the run, in seconds.
    pub duration_seconds: f64,
    /// The command line that produced it.
    pub command: String,
    /// Where it ran.
    pub machine: MachineInfo,
    /// The scenario's parameters (sizes, runs, backend, ...).
    pub parameters: serde_json::Value,
    /// Every measurement.
    pub measurements: Vec<Measurement>,
    /// What was not measured, and why.
    pub not_measured: Vec<NotMeasured>,
    /// The result tables.
    pub tables: Vec<Table>,
    /// Free-text remarks (scale-downs, what served what, caveats).
    pub notes: Vec<String>,
    /// Goals the run missed (the command exits non-zero after writing the report when any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missed_goals: Vec<String>,
    /// Plots, written to `<scenario>.svg` (not serialized: the data is in `measurements`).
    #[serde(skip)]
    pub plots: Vec<Plot>,
}

impl Report {
    /// An empty report for `scenario` started now.
    pub fn new(scenario: &str, machine: MachineInfo, parameters: serde_json::Value) -> Report {
        Report {
            scenario: scenario.to_string(),
            started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            duration_seconds: 0.0,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            machine,
            parameters,
            measurements: Vec::new(),
            not_measured: Vec::new(),
            tables: Vec::new(),
            notes: Vec::new(),
            missed_goals: Vec::new(),
            plots: Vec::new(),
        }
    }

    /// Records a measurement from raw samples; returns its summary (`None` when no samples).
    pub fn measure(&mut self, name: &str, unit: &str, labels: &[(&str, String)], samples: &[f64]) -> Option<Summary> {
        let summary = Summary::of(samples)?;
        self.push_summary(name, unit, labels, summary);
        Some(summary)
    }

    /// Records an already summarized measurement.
    pub fn push_summary(&mut self, name: &str, unit: &str, labels: &[(&str, String)], summary: Summary) {
        self.measurements.push(Measurement {
            name: name.to_string(),
            unit: unit.to_string(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            summary,
        });
    }

    /// Records that `name` was not measured because of `reason`.
    pub fn not_measured(&mut self, name: impl Into<String>, reason: impl Into<String>) {
        self.not_measured.push(NotMeasured { name: name.into(), reason: reason.into() });
    }

    /// Adds a remark.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// The Markdown document.
    pub fn to_markdown(&self) -> String {
        let mut out = format!("# rkube bench {}\n\n", self.scenario);
        out += &format!("- Command: `{}`\n", self.command);
        out += &format!("- Started: {} (took {:.0} s)\n", self.started_at, self.duration_seconds);
        out += &format!("- Machine: {}\n", self.machine.one_line());
        if let Some(etcd) = &self.machine.etcd_version {
            out += &format!("- etcd: {etcd}\n");
        }
        out += &format!("- Parameters: `{}`\n\n", self.parameters);
        for t in &self.tables {
            out += &t.to_markdown();
            out += "\n";
        }
        if !self.missed_goals.is_empty() {
            out += "### Goals missed\n\n";
            for g in &self.missed_goals {
                out += &format!("- {g}\n");
            }
            out += "\n";
        }
        if !self.notes.is_empty() {
            out += "### Notes\n\n";
            for n in &self.notes {
                out += &format!("- {n}\n");
            }
            out += "\n";
        }
        if !self.not_measured.is_empty() {
            out += "### Not measured\n\n";
            for n in &self.not_measured {
                out += &format!("- {}: {}\n", n.name, n.reason);
            }
            out += "\n";
        }
        if !self.plots.is_empty() {
            out += &format!("![{} plots]({}.svg)\n", self.scenario, self.scenario);
        }
        out
    }

    /// Writes `<out>/<scenario>.json`, `.md` and (with plots) `.svg`; returns the paths written.
    pub fn write(&self, out: &Path) -> Result<Vec<PathBuf>, ReportError> {
        let werr = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ReportError::Write { path, source }
        };
        std::fs::create_dir_all(out).map_err(werr(out))?;
        let mut written = Vec::new();
        let json_path = out.join(format!("{}.json", self.scenario));
        let json = serde_json::to_vec_pretty(self)?;
        std::fs::write(&json_path, json).map_err(werr(&json_path))?;
        written.push(json_path);
        let md_path = out.join(format!("{}.md", self.scenario));
        std::fs::write(&md_path, self.to_markdown()).map_err(werr(&md_path))?;
        written.push(md_path);
        if !self.plots.is_empty() {
            let svg_path = out.join(format!("{}.svg", self.scenario));
            std::fs::write(&svg_path, svg::render(&self.plots)).map_err(werr(&svg_path))?;
            written.push(svg_path);
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_table_has_header_separator_and_rows() {
        let mut t = Table::new("LIST", &["objects", "median"]);
        t.row(vec!["10,000".into(), "1 | 2".into()]);
        let md = t.to_markdown();
        assert!(md.contains("| objects | median |\n|---|---|\n| 10,000 | 1 \\| 2 |\n"), "{md}");
    }
}
