//! SVG line charts: panels stacked one above the other on one linear axis
//! (minutes since the start of a soak, or the relays of the scaling
//! curve), each with its own linear value axis from zero, drawn by hand in
//! plain `<svg>` as the bar charts of [`plot`](super::plot) are, so that
//! GitHub shows them.

use std::fmt::Write as _;

use super::plot::{
    BASELINE, FONT, GRID, LIBRARY, MUTED, TEXT, escape, line, nice_step, px, rect, text, tick,
};

/// One line: its name in the legend, and its points (x, value).
#[derive(Debug, Clone)]
pub(crate) struct Line {
    pub(crate) name: String,
    pub(crate) points: Vec<(f64, f64)>,
}

/// One panel: a title, the unit of its values, and its lines.
#[derive(Debug, Clone)]
pub(crate) struct TimePanel {
    pub(crate) title: String,
    pub(crate) unit: String,
    pub(crate) lines: Vec<Line>,
}

/// A chart: a title and its panels, all on the same x axis, named by
/// `x_label`.
#[derive(Debug, Clone)]
pub(crate) struct TimeChart {
    pub(crate) title: String,
    pub(crate) x_label: String,
    pub(crate) panels: Vec<TimePanel>,
}

/// A line's colour by its place in its panel.
const COLORS: [&str; 4] = [LIBRARY.color, BASELINE.color, "#4a9a5b", "#9b59b6"];
const WIDTH: f64 = 720.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const MARGIN: f64 = 16.0;
const TOP: f64 = 44.0;
const PANEL: f64 = 150.0;
const PANEL_TITLE: f64 = 24.0;
const PANEL_GAP: f64 = 30.0;
const X_AXIS: f64 = 36.0;

/// The points of a line that can be drawn.
fn finite(points: &[(f64, f64)]) -> impl Iterator<Item = (f64, f64)> + '_ {
    points
        .iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
}

/// A round maximum at or above `largest`, and the step of its gridlines.
fn axis(largest: f64) -> (f64, f64) {
    if largest <= 0.0 {
        return (1.0, 0.25);
    }
    let step = nice_step(largest / 4.0);
    ((largest / step).ceil().max(1.0) * step, step)
}

impl TimeChart {
    /// The chart as an SVG document.
    pub(crate) fn svg(&self) -> String {
        let all = || {
            self.panels
                .iter()
                .flat_map(|p| &p.lines)
                .flat_map(|l| finite(&l.points))
        };
        let (x_max, x_step) = axis(all().map(|(x, _)| x).fold(0.0, f64::max));
        let plot_width = WIDTH - LEFT - RIGHT;
        let height =
            TOP + self.panels.len() as f64 * (PANEL_TITLE + PANEL + PANEL_GAP) + X_AXIS + MARGIN;
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="{FONT}" font-size="12">"#,
            w = px(WIDTH),
            h = px(height)
        );
        let _ = writeln!(out, "<title>{}</title>", escape(&self.title));
        rect(&mut out, 0.0, 0.0, WIDTH, height, "#ffffff");
        text(
            &mut out,
            MARGIN,
            24.0,
            "start",
            &format!(r#"font-size="15" font-weight="bold" fill="{TEXT}""#),
            &self.title,
        );
        let x_of = |minutes: f64| LEFT + minutes / x_max * plot_width;
        let mut y = TOP;
        for panel in &self.panels {
            text(
                &mut out,
                LEFT,
                y + 16.0,
                "start",
                &format!(r#"font-weight="bold" fill="{TEXT}""#),
                &format!("{} ({})", panel.title, panel.unit),
            );
            let top = y + PANEL_TITLE;
            let bottom = top + PANEL;
            let largest = panel
                .lines
                .iter()
                .flat_map(|l| finite(&l.points))
                .map(|(_, v)| v)
                .fold(0.0, f64::max);
            let (y_max, y_step) = axis(largest);
            let y_of = |value: f64| bottom - value.max(0.0) / y_max * PANEL;
            let mut at = 0.0;
            while at <= y_max + y_step / 2.0 {
                line(&mut out, LEFT, y_of(at), LEFT + plot_width, y_of(at), GRID);
                text(
                    &mut out,
                    LEFT - 6.0,
                    y_of(at) + 4.0,
                    "end",
                    &format!(r#"fill="{MUTED}""#),
                    &tick(at),
                );
                at += y_step;
            }
            let mut minute = 0.0;
            while minute <= x_max + x_step / 2.0 {
                line(&mut out, x_of(minute), top, x_of(minute), bottom, GRID);
                text(
                    &mut out,
                    x_of(minute),
                    bottom + 14.0,
                    "middle",
                    &format!(r#"fill="{MUTED}""#),
                    &tick(minute),
                );
                minute += x_step;
            }
            line(&mut out, LEFT, bottom, LEFT + plot_width, bottom, MUTED);
            if panel
                .lines
                .iter()
                .all(|l| finite(&l.points).next().is_none())
            {
                text(
                    &mut out,
                    LEFT + plot_width / 2.0,
                    top + PANEL / 2.0,
                    "middle",
                    &format!(r#"fill="{MUTED}""#),
                    "no samples",
                );
            }
            for (n, series) in panel.lines.iter().enumerate() {
                let color = COLORS[n % COLORS.len()];
                let points: Vec<(f64, f64)> = finite(&series.points)
                    .map(|(x, v)| (x_of(x), y_of(v)))
                    .collect();
                match points.as_slice() {
                    [] => {}
                    [(x, y)] => {
                        let _ = writeln!(
                            out,
                            r#"<circle cx="{}" cy="{}" r="3" fill="{color}"/>"#,
                            px(*x),
                            px(*y)
                        );
                    }
                    many => {
                        let path: Vec<String> = many
                            .iter()
                            .map(|(x, y)| format!("{},{}", px(*x), px(*y)))
                            .collect();
                        let _ = writeln!(
                            out,
                            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                            path.join(" ")
                        );
                    }
                }
                let legend = top + 10.0 + n as f64 * 18.0;
                rect(
                    &mut out,
                    LEFT + plot_width + 14.0,
                    legend - 8.0,
                    12.0,
                    3.0,
                    color,
                );
                text(
                    &mut out,
                    LEFT + plot_width + 32.0,
                    legend - 2.0,
                    "start",
                    &format!(r#"fill="{TEXT}""#),
                    &series.name,
                );
            }
            y = bottom + PANEL_GAP;
        }
        text(
            &mut out,
            LEFT + plot_width / 2.0,
            y - PANEL_GAP + X_AXIS,
            "middle",
            &format!(r#"fill="{MUTED}""#),
            &self.x_label,
        );
        out.push_str("</svg>\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::tests::assert_well_formed;

    fn chart(panels: Vec<TimePanel>) -> TimeChart {
        TimeChart {
            title: "Soak <a&b>".to_owned(),
            x_label: "minutes".to_owned(),
            panels,
        }
    }

    #[test]
    fn each_line_is_one_polyline_and_names_are_escaped() {
        let svg = chart(vec![TimePanel {
            title: "throughput".to_owned(),
            unit: "tasks/s".to_owned(),
            lines: vec![
                Line {
                    name: "a<b&c".to_owned(),
                    points: vec![(1.0, 10.0), (2.0, 20.0), (3.0, f64::NAN)],
                },
                Line {
                    name: "handled".to_owned(),
                    points: vec![(1.0, 9.0), (2.0, 19.0)],
                },
            ],
        }])
        .svg();
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<polyline ").count(), 2, "{svg}");
        assert!(svg.contains("a&lt;b&amp;c"), "{svg}");
        assert!(svg.contains("Soak &lt;a&amp;b&gt;"), "{svg}");
        assert!(!svg.contains("NaN"), "{svg}");
    }

    #[test]
    fn the_value_axis_reaches_the_largest_value() {
        assert_eq!(axis(1_234.0), (1_500.0, 500.0));
        assert_eq!(axis(20.0), (20.0, 5.0));
        assert!(axis(0.37).0 >= 0.37);
        assert_eq!(axis(0.0), (1.0, 0.25));
        let svg = chart(vec![TimePanel {
            title: "claim".to_owned(),
            unit: "ms".to_owned(),
            lines: vec![Line {
                name: "p99".to_owned(),
                points: vec![(0.5, 1_234.0), (1.0, 800.0)],
            }],
        }])
        .svg();
        assert!(svg.contains(">1,500</text>"), "{svg}");
    }

    #[test]
    fn an_empty_panel_says_so_and_one_point_is_a_dot() {
        let svg = chart(vec![
            TimePanel {
                title: "dead rows".to_owned(),
                unit: "rows".to_owned(),
                lines: vec![Line {
                    name: "dead".to_owned(),
                    points: Vec::new(),
                }],
            },
            TimePanel {
                title: "one".to_owned(),
                unit: "ms".to_owned(),
                lines: vec![Line {
                    name: "p50".to_owned(),
                    points: vec![(0.5, 2.0)],
                }],
            },
        ])
        .svg();
        assert_well_formed(&svg);
        assert!(svg.contains(">no samples</text>"), "{svg}");
        assert_eq!(svg.matches("<circle ").count(), 1, "{svg}");
        assert_eq!(svg.matches("<polyline ").count(), 0, "{svg}");
    }
}
