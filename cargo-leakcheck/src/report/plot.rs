//! A line chart of retained bytes over time, one line per stack, as a standalone SVG a
//! person can read at a glance: axes with human units, a legend naming each stack.

use crate::model::human_bytes;
use std::fmt::Write;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 150.0;
const COLORS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Fill colours of stacked areas, lighter than the lines drawn over them.
const AREA_COLORS: [&str; 6] = [
    "#f4a3a3", "#c5b0d5", "#9edae5", "#ffbb78", "#c7c7c7", "#dbdb8d",
];

/// A stacked area: its label and its points (seconds, bottom, top).
type Area = (String, Vec<(f64, u64, u64)>);

/// Draws `series` (label, points of (seconds, bytes)) under `title`.
pub fn line_chart(title: &str, series: &[(String, Vec<(f64, u64)>)]) -> String {
    chart(title, &[], series)
}

/// Draws `stacked` (label, bytes per moment) as areas stacked from the bottom in order, at
/// the moments `at` (seconds), and `series` as lines over them, under `title`.
pub fn stacked_chart(
    title: &str,
    at: &[f64],
    stacked: &[(String, Vec<u64>)],
    series: &[(String, Vec<(f64, u64)>)],
) -> String {
    let areas: Vec<Area> = stacked
        .iter()
        .enumerate()
        .map(|(i, (label, values))| {
            let points = at
                .iter()
                .enumerate()
                .map(|(j, &t)| {
                    let below: u64 = stacked[..i].iter().map(|(_, v)| v[j]).sum();
                    (t, below, below + values[j])
                })
                .collect();
            (label.clone(), points)
        })
        .collect();
    chart(title, &areas, series)
}

/// The plotting area and its scales: seconds across, bytes up.
struct Scale {
    max_t: f64,
    max_b: f64,
    plot_w: f64,
    plot_h: f64,
}

impl Scale {
    /// Scales that fit every point of `areas` and `series`.
    fn fitting(areas: &[Area], series: &[(String, Vec<(f64, u64)>)]) -> Scale {
        let max_t = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.0))
            .chain(areas.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)))
            .fold(0.0f64, f64::max)
            .max(1e-9);
        let max_b = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.1))
            .chain(areas.iter().flat_map(|(_, p)| p.iter().map(|q| q.2)))
            .max()
            .unwrap_or(0)
            .max(1) as f64;
        Scale {
            max_t,
            max_b,
            plot_w: WIDTH - LEFT - RIGHT,
            plot_h: HEIGHT - TOP - BOTTOM,
        }
    }

    fn x(&self, t: f64) -> f64 {
        LEFT + t / self.max_t * self.plot_w
    }

    fn y(&self, b: f64) -> f64 {
        TOP + self.plot_h - b / self.max_b * self.plot_h
    }

    /// A point as SVG coordinates, `x,y`.
    fn point(&self, t: f64, b: u64) -> String {
        format!("{:.1},{:.1}", self.x(t), self.y(b as f64))
    }

    /// The baseline of the legend's `i`th entry when it has two columns.
    fn legend_at(&self, i: usize) -> (f64, f64) {
        (
            LEFT + (i % 2) as f64 * (self.plot_w / 2.0),
            TOP + self.plot_h + 56.0 + (i / 2) as f64 * 16.0,
        )
    }
}

/// Areas (label, points of (seconds, bottom, top)) first, then lines.
fn chart(title: &str, areas: &[Area], series: &[(String, Vec<(f64, u64)>)]) -> String {
    let scale = Scale::fitting(areas, series);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<?xml version="1.0" standalone="no"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="Verdana, sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="24" font-size="16" text-anchor="middle">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    axes(&mut svg, &scale);
    for (i, (label, points)) in areas.iter().enumerate() {
        let color = AREA_COLORS[i % AREA_COLORS.len()];
        let top = points.iter().map(|&(t, _, b)| scale.point(t, b));
        let bottom = points.iter().rev().map(|&(t, b, _)| scale.point(t, b));
        let outline: Vec<String> = top.chain(bottom).collect();
        let _ = writeln!(
            svg,
            r#"<polygon fill="{color}" stroke="none" points="{}"><title>{}</title></polygon>"#,
            outline.join(" "),
            escape(label)
        );
    }
    for (i, (label, _)) in areas.iter().enumerate() {
        let color = AREA_COLORS[i % AREA_COLORS.len()];
        legend_entry(&mut svg, scale.legend_at(i + series.len()), color, label);
    }
    for (i, (label, points)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = points.iter().map(|&(t, b)| scale.point(t, b)).collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        // One column of lines alone; two when areas share the legend.
        let at = if areas.is_empty() {
            (LEFT, TOP + scale.plot_h + 56.0 + i as f64 * 16.0)
        } else {
            scale.legend_at(i)
        };
        legend_entry(&mut svg, at, color, label);
    }
    svg.push_str("</svg>\n");
    svg
}

/// Axes and grid, five steps each way, with their units, and the frame around the plot.
fn axes(svg: &mut String, scale: &Scale) {
    let (plot_w, plot_h) = (scale.plot_w, scale.plot_h);
    for i in 0..=4 {
        let f = i as f64 / 4.0;
        let (gx, gy) = (scale.x(f * scale.max_t), scale.y(f * scale.max_b));
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{gy:.1}" x2="{:.1}" y2="{gy:.1}" stroke="#ddd"/>"##,
            WIDTH - RIGHT
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            gy + 4.0,
            human_bytes((f * scale.max_b) as u64)
        );
        let _ = writeln!(
            svg,
            r##"<line x1="{gx:.1}" y1="{TOP}" x2="{gx:.1}" y2="{:.1}" stroke="#eee"/>"##,
            TOP + plot_h
        );
        let _ = writeln!(
            svg,
            r#"<text x="{gx:.1}" y="{:.1}" text-anchor="middle">{:.1} s</text>"#,
            TOP + plot_h + 16.0,
            f * scale.max_t
        );
    }
    let _ = writeln!(
        svg,
        r#"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time since the first heap snapshot</text>"#,
        LEFT + plot_w / 2.0,
        TOP + plot_h + 34.0
    );
}

/// One entry of the legend: a swatch of `color` and `label`, its baseline at `(x, y)`.
fn legend_entry(svg: &mut String, (x, y): (f64, f64), color: &str, label: &str) {
    let _ = writeln!(
        svg,
        r#"<rect x="{x:.1}" y="{:.1}" width="12" height="12" fill="{color}"/>"#,
        y - 10.0
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{y:.1}">{}</text>"#,
        x + 18.0,
        escape(label)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacked_areas_sit_on_each_other_under_the_lines() {
        let at = [0.0, 10.0];
        let stacked = [
            ("live heap".to_string(), vec![10, 10]),
            ("allocator pages".to_string(), vec![0, 90]),
        ];
        let lines = [("RSS".to_string(), vec![(0.0, 12), (10.0, 100)])];
        let svg = stacked_chart("memory", &at, &stacked, &lines);
        assert_eq!(svg.matches("<polygon").count(), 2, "{svg}");
        // The second area starts where the first ends: its outline reaches the top (100).
        let second = svg.split("<polygon").nth(2).unwrap();
        assert!(
            second.contains("<title>allocator pages</title>"),
            "{second}"
        );
        // Every label is in the legend, and the areas come before the line.
        for label in ["live heap", "allocator pages", "RSS"] {
            assert!(svg.contains(&format!(">{label}</text>")), "{label}: {svg}");
        }
        assert!(svg.find("<polygon").unwrap() < svg.find("<polyline").unwrap());
    }

    #[test]
    fn chart_has_a_line_and_a_legend_entry_per_series() {
        let svg = line_chart(
            "growth of b <x>",
            &[
                ("a::f (src/a.rs:3)".into(), vec![(0.0, 0), (1.0, 2048)]),
                ("b".into(), vec![(0.0, 10), (1.0, 10)]),
            ],
        );
        assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a::f (src/a.rs:3)") && svg.contains("growth of b &lt;x&gt;"));
        assert!(svg.contains("2.0 KiB"), "the y axis is in human units");
    }
}
