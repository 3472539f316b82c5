//! Summaries of repeated measurements: median, p50/p90/p99, min, max, mean.
//!
//! Percentiles use the nearest-rank method (the value at rank
//! `ceil(p/100 × n)` of the sorted samples), so every reported figure is a
//! sample that was actually observed. With few runs, p90/p99 equal the max.

use serde::{Deserialize, Serialize};

/// Summary of `runs` samples of one measurement, all in the measurement's unit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub runs: usize,
    /// The median (mean of the two middle samples for an even count).
    pub median: f64,
    /// 50th percentile (nearest rank).
    pub p50: f64,
    /// 90th percentile (nearest rank).
    pub p90: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

impl Summary {
    /// Summarizes `samples` (any order; NaNs are dropped). `None` when empty.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Summary {
            runs: n,
            median,
            p50: nearest_rank(&v, 50.0),
            p90: nearest_rank(&v, 90.0),
            p99: nearest_rank(&v, 99.0),
            min: v[0],
            max: v[n - 1],
            mean: v.iter().sum::<f64>() / n as f64,
        })
    }

    /// Summarizes durations given in microseconds, reported in seconds.
    pub fn of_micros(samples: &[u32]) -> Option<Summary> {
        let secs: Vec<f64> = samples.iter().map(|&us| f64::from(us) / 1e6).collect();
        Summary::of(&secs)
    }
}

/// The nearest-rank percentile of sorted, non-empty `v`.
fn nearest_rank(v: &[f64], p: f64) -> f64 {
    let n = v.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    v[rank.clamp(1, n) - 1]
}

/// A duration in seconds as microseconds, saturating (for compact sample storage).
pub fn micros(d: std::time::Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// Formats seconds for humans: `850 µs`, `12.3 ms`, `1.25 s`.
pub fn fmt_secs(s: f64) -> String {
    if !s.is_finite() {
        return "n/a".into();
    }
    if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        let ms = s * 1e3;
        if ms >= 100.0 {
            format!("{ms:.0} ms")
        } else if ms >= 10.0 {
            format!("{ms:.1} ms")
        } else {
            format!("{ms:.2} ms")
        }
    } else {
        format!("{s:.2} s")
    }
}

/// Formats a rate: `1,234/s`.
pub fn fmt_rate(per_sec: f64) -> String {
    if !per_sec.is_finite() {
        return "n/a".into();
    }
    format!("{}/s", fmt_count(per_sec.round() as u64))
}

/// Formats a count with thousands separators: `300,000`.
pub fn fmt_count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Formats bytes: `1.5 KiB`, `312 MiB`.
pub fn fmt_bytes(b: u64) -> String {
    const K: f64 = 1024.0;
    let f = b as f64;
    if f < K {
        format!("{b} B")
    } else if f < K * K {
        format!("{:.1} KiB", f / K)
    } else if f < K * K * K {
        format!("{:.0} MiB", f / (K * K))
    } else {
        format!("{:.2} GiB", f / (K * K * K))
    }
}

/// A latency histogram with logarithmic buckets (5% wide) from 1 µs to the
/// largest sample a `u32` of microseconds holds (~71 minutes), for millions of
/// samples (watch event deliveries) in fixed memory.
/// Percentiles are the upper bound of the bucket holding the rank, so they
/// overstate by at most 5%; min, max, mean and count are exact.
#[derive(Debug, Clone)]
pub struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    sum_us: f64,
    min_us: u32,
    max_us: u32,
}

/// Bucket growth factor.
const GROWTH: f64 = 1.05;
/// Buckets: ceil(ln(u32::MAX µs) / ln(1.05)) + 1.
const BUCKETS: usize = 456;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: vec![0; BUCKETS],
            count: 0,
            sum_us: 0.0,
            min_us: u32::MAX,
            max_us: 0,
        }
    }
}

impl Histogram {
    fn bucket(us: u32) -> usize {
        if us <= 1 {
            0
        } else {
            ((f64::from(us).ln() / GROWTH.ln()).ceil() as usize).min(BUCKETS - 1)
        }
    }

    /// Records one sample in microseconds.
    pub fn record(&mut self, us: u32) {
        self.buckets[Self::bucket(us)] += 1;
        self.count += 1;
        self.sum_us += f64::from(us);
        self.min_us = self.min_us.min(us);
        self.max_us = self.max_us.max(us);
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.count += other.count;
        self.sum_us += other.sum_us;
        self.min_us = self.min_us.min(other.min_us);
        self.max_us = self.max_us.max(other.max_us);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The `p`th percentile in seconds (nearest rank, bucket upper bound capped at the max).
    pub fn percentile(&self, p: f64) -> f64 {
        if self.count == 0 {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let upper = GROWTH.powi(i as i32);
                return upper
                    .min(f64::from(self.max_us))
                    .max(f64::from(self.min_us))
                    / 1e6;
            }
        }
        f64::from(self.max_us) / 1e6
    }

    /// The summary in seconds (`None` when empty).
    pub fn summary(&self) -> Option<Summary> {
        if self.count == 0 {
            return None;
        }
        let p50 = self.percentile(50.0);
        Some(Summary {
            runs: usize::try_from(self.count).unwrap_or(usize::MAX),
            median: p50,
            p50,
            p90: self.percentile(90.0),
            p99: self.percentile(99.0),
            min: f64::from(self.min_us) / 1e6,
            max: f64::from(self.max_us) / 1e6,
            mean: self.sum_us / self.count as f64 / 1e6,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_uses_nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&samples).unwrap();
        assert_eq!(
            (s.runs, s.p50, s.p90, s.p99, s.min, s.max),
            (100, 50.0, 90.0, 99.0, 1.0, 100.0)
        );
        assert_eq!(s.median, 50.5);
    }

    #[test]
    fn summary_of_few_runs_reports_max_as_tail() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.p90, s.p99), (2.0, 3.0, 3.0));
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn histogram_percentiles_are_within_five_percent() {
        let mut h = Histogram::default();
        for us in 1..=10_000u32 {
            h.record(us);
        }
        let s = h.summary().unwrap();
        assert_eq!(s.runs, 10_000);
        assert!((s.p50 / 0.005 - 1.0).abs() <= 0.05, "p50 {}", s.p50);
        assert!((s.p99 / 0.0099 - 1.0).abs() <= 0.05, "p99 {}", s.p99);
        assert_eq!((s.min, s.max), (1e-6, 0.01));
        let mut m = Histogram::default();
        m.merge(&h);
        assert_eq!(m.count(), 10_000);
    }

    #[test]
    fn percentiles_past_a_hundred_seconds_are_not_clamped() {
        let mut h = Histogram::default();
        for s in [100u32, 300, 600, 900] {
            h.record(s * 1_000_000);
        }
        let sum = h.summary().unwrap();
        assert!((sum.p50 / 300.0 - 1.0).abs() <= 0.05, "p50 {}", sum.p50);
        assert!((sum.p90 / 900.0 - 1.0).abs() <= 0.05, "p90 {}", sum.p90);
        h.record(u32::MAX);
        assert_eq!(h.summary().unwrap().max, f64::from(u32::MAX) / 1e6);
    }

    #[test]
    fn formatting_is_human_readable() {
        assert_eq!(fmt_secs(0.0005), "500 µs");
        assert_eq!(fmt_secs(0.0123), "12.3 ms");
        assert_eq!(fmt_secs(0.25), "250 ms");
        assert_eq!(fmt_secs(1.5), "1.50 s");
        assert_eq!(fmt_count(300000), "300,000");
        assert_eq!(fmt_count(999), "999");
        assert_eq!(fmt_rate(1234.4), "1,234/s");
    }
}
