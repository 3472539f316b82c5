//! A small hand-written SVG line chart: one panel per [`Plot`], stacked
//! vertically in one document; x linear or logarithmic, y linear from zero
//! (or logarithmic), one polyline with point markers per series, a legend.

use std::fmt::Write as _;

/// One series of points `(x, y)`.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points in any order (drawn sorted by x); non-finite points are skipped.
    pub points: Vec<(f64, f64)>,
}

/// One chart panel.
#[derive(Debug, Clone)]
pub struct Plot {
    /// Title above the panel.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Logarithmic x axis (for sizes such as 10k…300k).
    pub log_x: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// The series.
    pub series: Vec<Series>,
}

const W: f64 = 760.0;
const H: f64 = 380.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: &[&str] = &["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// "Nice" tick values covering `[lo, hi]` (about five).
fn linear_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| span / s <= 6.0).unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let mut out = Vec::new();
    let mut k = first;
    while (k as f64) * step <= hi + step * 1e-9 && out.len() < 20 {
        out.push(k as f64 * step);
        k += 1;
    }
    out
}

/// Decades covering `[lo, hi]` (both > 0).
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut e = lo.log10().floor() as i32;
    while 10f64.powi(e) <= hi * 1.0001 && out.len() < 20 {
        if 10f64.powi(e) >= lo * 0.9999 {
            out.push(10f64.powi(e));
        }
        e += 1;
    }
    out
}

/// Short tick label: 300k, 1.5M, 0.25.
fn tick_label(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    if a >= 1e6 {
        trim(format!("{:.2}", v / 1e6)) + "M"
    } else if a >= 1e3 {
        trim(format!("{:.1}", v / 1e3)) + "k"
    } else if a >= 1.0 || a == 0.0 {
        trim(format!("{v:.2}"))
    } else {
        trim(format!("{v:.4}"))
    }
}

struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Axis {
    fn new(values: impl Iterator<Item = f64> + Clone, log: bool, from_zero: bool) -> Axis {
        let finite = values.filter(|v| v.is_finite() && (!log || *v > 0.0));
        let lo = finite.clone().fold(f64::INFINITY, f64::min);
        let hi = finite.fold(f64::NEG_INFINITY, f64::max);
        let (mut lo, mut hi) = if lo.is_finite() { (lo, hi) } else { (if log { 1.0 } else { 0.0 }, 1.0) };
        if log {
            // A little room around the data (ticks are the data's own values or decades).
            lo /= 1.25;
            hi *= 1.25;
        } else {
            if from_zero {
                lo = lo.min(0.0);
            }
            if hi <= lo {
                hi = lo + 1.0;
            }
            if from_zero {
                hi *= 1.08;
            }
        }
        Axis { lo, hi, log }
    }

    /// Position in [0, 1].
    fn frac(&self, v: f64) -> f64 {
        if self.log {
            (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    fn ticks(&self, data: &[f64]) -> Vec<f64> {
        if self.log {
            // Label the data's own x values when few (sizes such as 10k, 50k, 300k).
            let mut d: Vec<f64> = data.iter().copied().filter(|v| v.is_finite() && *v > 0.0).collect();
            d.sort_by(f64::total_cmp);
            d.dedup();
            if !d.is_empty() && d.len() <= 8 {
                return d;
            }
            log_ticks(self.lo, self.hi)
        } else {
            linear_ticks(self.lo, self.hi)
        }
    }
}

fn panel(out: &mut String, plot: &Plot, y0: f64) {
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let xs: Vec<f64> = plot.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
    let ys: Vec<f64> = plot.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).collect();
    let xa = Axis::new(xs.iter().copied(), plot.log_x, false);
    let ya = Axis::new(ys.iter().copied(), plot.log_y, true);
    let px = |x: f64| LEFT + xa.frac(x) * pw;
    let py = |y: f64| y0 + TOP + (1.0 - ya.frac(y)) * ph;
    let _ = writeln!(out, r#"<text x="{}" y="{}" font-size="15" font-weight="bold">{}</text>"#, LEFT, y0 + 24.0, esc(&plot.title));
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##,
        y0 + TOP
    );
    for t in xa.ticks(&xs) {
        let x = px(t);
        let _ = writeln!(out, r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/>"##, y0 + TOP, y0 + TOP + ph);
        let _ = writeln!(out, r#"<text x="{x:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"#, y0 + TOP + ph + 16.0, tick_label(t));
    }
    for t in ya.ticks(&ys) {
        let y = py(t);
        let _ = writeln!(out, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##, LEFT + pw);
        let _ = writeln!(out, r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"#, LEFT - 6.0, y + 4.0, tick_label(t));
    }
    let _ = writeln!(out, r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#, LEFT + pw / 2.0, y0 + H - 12.0, esc(&plot.x_label));
    let _ = writeln!(
        out,
        r#"<text x="16" y="{:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
        y0 + TOP + ph / 2.0,
        y0 + TOP + ph / 2.0,
        esc(&plot.y_label)
    );
    for (i, s) in plot.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite() && (!plot.log_x || *x > 0.0) && (!plot.log_y || *y > 0.0))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let coords: Vec<String> = pts.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
        if !coords.is_empty() {
            let _ = writeln!(out, r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#, coords.join(" "));
        }
        for &(x, y) in &pts {
            let _ = writeln!(out, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#, px(x), py(y));
        }
        let ly = y0 + TOP + 14.0 + i as f64 * 18.0;
        let lx = LEFT + pw + 12.0;
        let _ = writeln!(out, r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="3"/>"#, lx + 18.0);
        let _ = writeln!(out, r#"<text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#, lx + 24.0, ly + 4.0, esc(&s.name));
    }
}

/// The SVG document with every plot stacked vertically.
pub fn render(plots: &[Plot]) -> String {
    let total_h = H * plots.len().max(1) as f64;
    let mut out = String::new();
    let _ = writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{total_h}" viewBox="0 0 {W} {total_h}" font-family="sans-serif">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (i, p) in plots.iter().enumerate() {
        panel(&mut out, p, i as f64 * H);
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_draws_one_polyline_per_series_and_escapes_text() {
        let plot = Plot {
            title: "LIST <configmaps>".into(),
            x_label: "objects".into(),
            y_label: "seconds".into(),
            log_x: true,
            log_y: false,
            series: vec![
                Series { name: "cache RV=0".into(), points: vec![(10_000.0, 0.1), (50_000.0, 0.5)] },
                Series { name: "storage".into(), points: vec![(10_000.0, 0.3), (50_000.0, f64::NAN)] },
            ],
        };
        let svg = render(&[plot]);
        assert!(svg.starts_with("<?xml"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("LIST &lt;configmaps&gt;"));
        assert!(svg.contains(">10k<") && svg.contains(">50k<"));
    }

    #[test]
    fn ticks_are_round_numbers() {
        let labels: Vec<String> = linear_ticks(0.0, 1.0).into_iter().map(tick_label).collect();
        assert_eq!(labels, ["0", "0.2", "0.4", "0.6", "0.8", "1"]);
        assert_eq!(log_ticks(1.0, 1000.0), vec![1.0, 10.0, 100.0, 1000.0]);
        assert_eq!(tick_label(300_000.0), "300k");
        assert_eq!(tick_label(0.25), "0.25");
    }
}
