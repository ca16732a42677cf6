//! SVG plots for `--write-docs`, drawn by hand: horizontal bar charts of
//! one or more panels, in plain `<svg>` with `rect`, `line` and `text`
//! only, so that they render wherever Markdown shows images (GitHub
//! included, which strips scripts and styles sheets but keeps these).
//!
//! A chart is a title, a legend naming its series, and panels stacked one
//! above the other. Each panel has its own axis (linear from zero, or
//! logarithmic for latencies that span decades) and one group of bars per
//! row: a label on the left, one bar per series, each bar's value at its
//! end, and an optional note under the label (a ratio, a target).

use std::fmt::Write as _;

/// One series of bars: its name in the legend, and its fill colour.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Series {
    pub(crate) name: &'static str,
    pub(crate) color: &'static str,
}

/// The library's bars.
pub(crate) const LIBRARY: Series = Series {
    name: "library",
    color: "#3b6fb6",
};

/// The baseline's bars.
pub(crate) const BASELINE: Series = Series {
    name: "hand-written baseline",
    color: "#e08a2c",
};

/// One row of a panel: a label, one value per series (none where it was
/// not measured), and a note under the label.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub(crate) label: String,
    pub(crate) values: Vec<Option<f64>>,
    pub(crate) note: Option<String>,
}

/// How a panel's axis maps values to lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scale {
    /// From zero to a round number above the largest value.
    Linear,
    /// Decades, from one below the smallest value to one above the largest.
    Log,
}

/// A panel: its title, the unit of its axis, and its rows.
#[derive(Debug, Clone)]
pub(crate) struct Panel {
    pub(crate) title: String,
    pub(crate) unit: String,
    pub(crate) scale: Scale,
    pub(crate) groups: Vec<Group>,
}

/// A whole figure.
#[derive(Debug, Clone)]
pub(crate) struct Chart {
    pub(crate) title: String,
    /// A line under the title: the run it comes from.
    pub(crate) subtitle: String,
    pub(crate) series: Vec<Series>,
    pub(crate) panels: Vec<Panel>,
}

pub(crate) const FONT: &str = "Helvetica, Arial, sans-serif";
/// Average width of a character of the 12 px labels, to size the label
/// column (an estimate: SVG cannot measure text).
const CHAR_WIDTH: f64 = 6.6;
const MARGIN: f64 = 16.0;
/// Width of the bars' area.
const PLOT_WIDTH: f64 = 440.0;
/// Room right of the bars for the longest bar's value.
const VALUE_ROOM: f64 = 80.0;
const BAR: f64 = 13.0;
const BAR_GAP: f64 = 2.0;
const GROUP_GAP: f64 = 12.0;
const PANEL_TITLE: f64 = 26.0;
const AXIS: f64 = 40.0;
const PANEL_GAP: f64 = 14.0;
pub(crate) const TEXT: &str = "#222222";
pub(crate) const MUTED: &str = "#666666";
pub(crate) const GRID: &str = "#dddddd";

impl Chart {
    /// The chart as an SVG document.
    pub(crate) fn svg(&self) -> String {
        let longest = self
            .panels
            .iter()
            .flat_map(|p| &p.groups)
            .flat_map(|g| std::iter::once(&g.label).chain(&g.note))
            .map(|text| text.chars().count())
            .max()
            .unwrap_or(0);
        let label_width = (longest as f64 * CHAR_WIDTH + 12.0).clamp(110.0, 380.0);
        let left = MARGIN + label_width;
        // Wide enough for the title (16 px, bold) and the subtitle too.
        let header = (self.title.chars().count() as f64 * CHAR_WIDTH * 1.45)
            .max(self.subtitle.chars().count() as f64 * CHAR_WIDTH);
        let width = (left + PLOT_WIDTH + VALUE_ROOM + MARGIN).max(2.0 * MARGIN + header);
        let top = 66.0;
        let height = top
            + self
                .panels
                .iter()
                .map(|p| self.panel_height(p) + PANEL_GAP)
                .sum::<f64>()
            + MARGIN;
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="{FONT}" font-size="12">"#,
            w = px(width),
            h = px(height)
        );
        let _ = writeln!(out, "<title>{}</title>", escape(&self.title));
        let _ = writeln!(
            out,
            r##"<rect x="0" y="0" width="{}" height="{}" fill="#ffffff"/>"##,
            px(width),
            px(height)
        );
        text(
            &mut out,
            MARGIN,
            24.0,
            "start",
            &format!(r#"font-size="16" font-weight="bold" fill="{TEXT}""#),
            &self.title,
        );
        text(
            &mut out,
            MARGIN,
            42.0,
            "start",
            &format!(r#"fill="{MUTED}""#),
            &self.subtitle,
        );
        let mut x = MARGIN;
        for series in &self.series {
            rect(&mut out, x, 51.0, 12.0, 12.0, series.color);
            text(
                &mut out,
                x + 17.0,
                61.0,
                "start",
                &format!(r#"fill="{TEXT}""#),
                series.name,
            );
            x += 17.0 + series.name.chars().count() as f64 * CHAR_WIDTH + 20.0;
        }
        let mut y = top;
        for panel in &self.panels {
            self.draw_panel(&mut out, panel, left, y);
            y += self.panel_height(panel) + PANEL_GAP;
        }
        out.push_str("</svg>\n");
        out
    }

    fn group_height(&self) -> f64 {
        let bars = self.series.len().max(1) as f64;
        bars * BAR + (bars - 1.0) * BAR_GAP
    }

    fn panel_height(&self, panel: &Panel) -> f64 {
        let groups = panel.groups.len() as f64;
        PANEL_TITLE + groups * (self.group_height() + GROUP_GAP) + AXIS
    }

    fn draw_panel(&self, out: &mut String, panel: &Panel, left: f64, top: f64) {
        text(
            out,
            MARGIN,
            top + 16.0,
            "start",
            &format!(r#"font-size="13" font-weight="bold" fill="{TEXT}""#),
            &panel.title,
        );
        let values = panel.groups.iter().flat_map(|g| g.values.iter().flatten());
        let axis = Axis::new(panel.scale, values.copied());
        let plot_top = top + PANEL_TITLE;
        let plot_bottom = plot_top + panel.groups.len() as f64 * (self.group_height() + GROUP_GAP);
        for (tick, label) in axis.ticks() {
            let x = left + axis.position(tick) * PLOT_WIDTH;
            line(out, x, plot_top - 4.0, x, plot_bottom, GRID);
            text(
                out,
                x,
                plot_bottom + 14.0,
                "middle",
                &format!(r#"fill="{MUTED}""#),
                &label,
            );
        }
        line(out, left, plot_top - 4.0, left, plot_bottom, MUTED);
        text(
            out,
            left + PLOT_WIDTH / 2.0,
            plot_bottom + 31.0,
            "middle",
            &format!(r#"fill="{TEXT}""#),
            &panel.unit,
        );
        let mut y = plot_top + GROUP_GAP / 2.0;
        for group in &panel.groups {
            let middle = y + self.group_height() / 2.0;
            let label_y = if group.note.is_some() {
                middle - 2.0
            } else {
                middle + 4.0
            };
            text(
                out,
                left - 8.0,
                label_y,
                "end",
                &format!(r#"fill="{TEXT}""#),
                &group.label,
            );
            if let Some(note) = &group.note {
                text(
                    out,
                    left - 8.0,
                    middle + 12.0,
                    "end",
                    &format!(r#"font-size="11" fill="{MUTED}""#),
                    note,
                );
            }
            for (n, series) in self.series.iter().enumerate() {
                let bar_y = y + n as f64 * (BAR + BAR_GAP);
                match group.values.get(n).copied().flatten() {
                    Some(value) => {
                        let length = (axis.position(value) * PLOT_WIDTH).max(1.0);
                        rect(out, left, bar_y, length, BAR, series.color);
                        text(
                            out,
                            left + length + 4.0,
                            bar_y + BAR - 2.0,
                            "start",
                            &format!(r#"font-size="11" fill="{TEXT}""#),
                            &number(value),
                        );
                    }
                    None => text(
                        out,
                        left + 4.0,
                        bar_y + BAR - 2.0,
                        "start",
                        &format!(r#"font-size="11" fill="{MUTED}""#),
                        "not measured",
                    ),
                }
            }
            y += self.group_height() + GROUP_GAP;
        }
    }
}

/// A panel's axis: where a value falls, from 0 (the axis) to 1 (its end).
struct Axis {
    scale: Scale,
    low: f64,
    high: f64,
    step: f64,
}

impl Axis {
    fn new(scale: Scale, values: impl Iterator<Item = f64>) -> Self {
        let values: Vec<f64> = values.filter(|v| v.is_finite() && *v > 0.0).collect();
        let max = values.iter().copied().fold(0.0, f64::max);
        match scale {
            Scale::Linear => {
                let max = if max > 0.0 { max } else { 1.0 };
                let step = nice_step(max / 5.0);
                Self {
                    scale,
                    low: 0.0,
                    high: (max / step).ceil() * step,
                    step,
                }
            }
            Scale::Log => {
                let min = values.iter().copied().fold(f64::INFINITY, f64::min);
                let (min, max) = if values.is_empty() {
                    (1.0, 10.0)
                } else {
                    (min, max)
                };
                let low = min.log10().floor();
                let high = max.log10().ceil().max(low + 1.0);
                Self {
                    scale,
                    low,
                    high,
                    step: 1.0,
                }
            }
        }
    }

    fn position(&self, value: f64) -> f64 {
        let at = match self.scale {
            Scale::Linear => value,
            Scale::Log => value.max(f64::MIN_POSITIVE).log10(),
        };
        ((at - self.low) / (self.high - self.low)).clamp(0.0, 1.0)
    }

    /// Each tick's value and label.
    fn ticks(&self) -> Vec<(f64, String)> {
        let mut ticks = Vec::new();
        let mut n = 0.0;
        // A linear axis has 5 or 6 steps, a logarithmic one a decade each.
        while self.low + n * self.step <= self.high + self.step / 2.0 {
            ticks.push(self.low + n * self.step);
            n += 1.0;
        }
        ticks
            .into_iter()
            .map(|at| match self.scale {
                Scale::Linear => (at, tick(at)),
                Scale::Log => {
                    let value = 10f64.powf(at);
                    (value, tick(value))
                }
            })
            .collect()
    }
}

/// The smallest of 1, 2 and 5 times a power of ten that is at least `raw`.
pub(crate) fn nice_step(raw: f64) -> f64 {
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|step| *step >= raw)
        .unwrap_or(10.0 * magnitude)
}

/// A value as the docs print it: thousands grouped from 100 up, one
/// decimal from 10, two from 0.1, three below.
pub(crate) fn number(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 100.0 {
        group_digits(&format!("{value:.0}"))
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else if magnitude >= 0.1 || magnitude == 0.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

/// An axis tick: [`number`] without trailing zeros (`1`, `0.5`, `2,000`).
pub(crate) fn tick(value: f64) -> String {
    let text = number(value);
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// Every run of five or more digits in `text` with its thousands separated
/// by commas (`100000` becomes `100,000`; a four-digit year stays as it
/// is).
pub(crate) fn group_digits(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_digit() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            let run = &chars[start..i];
            // Digits after a decimal point are a fraction, not thousands.
            let fraction = start > 0 && chars[start - 1] == '.';
            if run.len() >= 4 && !fraction && (run.len() >= 5 || plain_number(text)) {
                for (n, digit) in run.iter().enumerate() {
                    if n > 0 && (run.len() - n).is_multiple_of(3) {
                        out.push(',');
                    }
                    out.push(*digit);
                }
            } else {
                out.extend(run);
            }
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// Whether `text` is one number alone (so that `1867` is grouped too).
fn plain_number(text: &str) -> bool {
    text.trim_start_matches('-')
        .chars()
        .all(|c| c.is_ascii_digit() || c == '.')
}

/// `text` with the characters XML reserves escaped.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A coordinate, to a tenth of a pixel.
pub(crate) fn px(value: f64) -> String {
    let text = format!("{value:.1}");
    text.strip_suffix(".0").map_or(text.clone(), str::to_owned)
}

pub(crate) fn text(
    out: &mut String,
    x: f64,
    y: f64,
    anchor: &str,
    attributes: &str,
    content: &str,
) {
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="{anchor}" {attributes}>{}</text>"#,
        px(x),
        px(y),
        escape(content)
    );
}

pub(crate) fn rect(out: &mut String, x: f64, y: f64, width: f64, height: f64, fill: &str) {
    let _ = writeln!(
        out,
        r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{fill}"/>"#,
        px(x),
        px(y),
        px(width),
        px(height)
    );
}

pub(crate) fn line(out: &mut String, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str) {
    let _ = writeln!(
        out,
        r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{stroke}" stroke-width="1"/>"#,
        px(x1),
        px(y1),
        px(x2),
        px(y2)
    );
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Checks that `svg` is one `<svg>` element whose tags all nest and
    /// close, without parsing XML: every `<name ...>` is matched by a
    /// `</name>` in order, or closes itself (`/>`), and no text holds a raw
    /// `<` or `&` that is not an entity.
    pub(crate) fn assert_well_formed(svg: &str) {
        assert!(svg.starts_with("<svg "), "starts with <svg: {svg:.40}");
        assert!(svg.trim_end().ends_with("</svg>"), "ends with </svg>");
        assert!(svg.contains(r#"xmlns="http://www.w3.org/2000/svg""#));
        for attribute in ["width=\"", "height=\"", "viewBox=\"0 0 "] {
            assert!(svg.contains(attribute), "has {attribute}");
        }
        let mut open: Vec<String> = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let text = &rest[..start];
            assert!(!text.contains('>'), "a stray > in text {text:?}");
            for (at, _) in text.match_indices('&') {
                let entity = &text[at..];
                assert!(
                    ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"]
                        .iter()
                        .any(|e| entity.starts_with(e)),
                    "a bare & in {text:?}"
                );
            }
            let end = rest[start..].find('>').expect("every tag ends") + start;
            let tag = &rest[start + 1..end];
            assert!(!tag.contains('<'), "a < inside tag {tag:?}");
            assert_eq!(tag.matches('"').count() % 2, 0, "quotes pair in {tag:?}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop().as_deref(), Some(name), "closing </{name}>");
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().expect("a tag has a name");
                open.push(name.to_owned());
            }
            if open.is_empty() {
                assert!(
                    rest[end + 1..].trim().is_empty(),
                    "nothing after the root element"
                );
            }
            rest = &rest[end + 1..];
        }
        assert!(open.is_empty(), "unclosed: {open:?}");
        for element in ["<rect ", "<text ", "<line "] {
            assert!(svg.contains(element), "draws {element}");
        }
    }

    fn chart(scale: Scale) -> Chart {
        Chart {
            title: "Throughput & more <test>".into(),
            subtitle: "a run of 2026-12-01".into(),
            series: vec![LIBRARY, BASELINE],
            panels: vec![
                Panel {
                    title: "order + enqueue".into(),
                    unit: "commits/s".into(),
                    scale,
                    groups: vec![
                        Group {
                            label: "PostgreSQL".into(),
                            values: vec![Some(1867.0), Some(1931.0)],
                            note: Some("ratio 1.034 (cost)".into()),
                        },
                        Group {
                            label: "SQLite".into(),
                            values: vec![Some(3644.0), None],
                            note: None,
                        },
                    ],
                },
                Panel {
                    title: "drain: 2 relays".into(),
                    unit: "tasks/s".into(),
                    scale,
                    groups: vec![Group {
                        label: "MariaDB".into(),
                        values: vec![Some(0.42), Some(16_552.0)],
                        note: None,
                    }],
                },
            ],
        }
    }

    #[test]
    fn a_small_chart_is_well_formed_and_names_everything() {
        for scale in [Scale::Linear, Scale::Log] {
            let svg = chart(scale).svg();
            assert_well_formed(&svg);
            for label in [
                "Throughput &amp; more &lt;test&gt;",
                "a run of 2026-12-01",
                "library",
                "hand-written baseline",
                "order + enqueue",
                "drain: 2 relays",
                "commits/s",
                "tasks/s",
                "PostgreSQL",
                "SQLite",
                "MariaDB",
                "ratio 1.034 (cost)",
                "1,867",
                "16,552",
                "0.42",
                "not measured",
            ] {
                assert!(svg.contains(label), "{scale:?}: no {label:?}");
            }
        }
    }

    #[test]
    fn the_checker_catches_what_it_should() {
        for broken in [
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1\" height=\"1\" viewBox=\"0 0 1 1\"><text>a</svg>",
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1\" height=\"1\" viewBox=\"0 0 1 1\"><rect/><line/><text>a & b</text></svg>",
        ] {
            let caught = std::panic::catch_unwind(|| assert_well_formed(broken));
            assert!(caught.is_err(), "accepted {broken}");
        }
    }

    #[test]
    fn axes_cover_their_values_with_round_ticks() {
        let axis = Axis::new(Scale::Linear, [1867.0, 1931.0].into_iter());
        assert_eq!(axis.step, 500.0);
        assert_eq!(axis.high, 2000.0);
        assert_eq!(
            axis.ticks().last().map(|t| t.1.clone()).as_deref(),
            Some("2,000")
        );
        assert!((axis.position(1000.0) - 0.5).abs() < 1e-9);
        let log = Axis::new(Scale::Log, [0.33, 108.9].into_iter());
        let labels: Vec<String> = log.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0.1", "1", "10", "100", "1,000"]);
        assert!((log.position(10.0) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn numbers_read_as_the_tables_print_them() {
        assert_eq!(number(53_369.4), "53,369");
        assert_eq!(number(1867.0), "1,867");
        assert_eq!(number(19.44), "19.4");
        assert_eq!(number(1.234), "1.23");
        assert_eq!(number(1.0), "1.00");
        assert_eq!(number(0.5), "0.50");
        assert_eq!(number(0.0421), "0.042");
        assert_eq!(tick(10.0), "10");
        assert_eq!(tick(0.5), "0.5");
        assert_eq!(tick(2000.0), "2,000");
        assert_eq!(
            group_digits("drain 100000: 2 relays, on 2026-12-01, 0.12345"),
            "drain 100,000: 2 relays, on 2026-12-01, 0.12345"
        );
    }
}
