//! Line charts for the experiments' results: one line per series, PNG and
//! SVG from the same drawing code (`plotters`).
//!
//! ```no_run
//! use duality_bench::plot::line_chart;
//! let series = vec![
//!     ("a".to_string(), vec![(1.0, 10.0), (4.0, 35.0), (16.0, 40.0)]),
//!     ("b".to_string(), vec![(1.0, 12.0), (4.0, 30.0), (16.0, 20.0)]),
//! ];
//! // Writes results/demo.png and results/demo.svg.
//! line_chart("results/demo".as_ref(), "Demo", "clients", "Mbit/s", &series, true).unwrap();
//! ```
//!
//! Text is drawn with the system's sans-serif font (found through
//! fontconfig), so a machine without any font cannot draw charts: the error
//! says so, and the numbers (table, JSON, CSV) are written regardless.

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Pixel size of the charts.
pub const SIZE: (u32, u32) = (960, 600);

/// One named line: `(x, y)` points, drawn in the order given.
pub type Series = (String, Vec<(f64, f64)>);

/// One series per name of `names` (in that order): the `point`s of the
/// rows whose `name` it is, in the rows' order.
pub fn series_by<R>(
    rows: &[R],
    names: &[String],
    name: impl Fn(&R) -> &str,
    point: impl Fn(&R) -> (f64, f64),
) -> Vec<Series> {
    names
        .iter()
        .map(|n| {
            let pts = rows.iter().filter(|r| name(r) == n).map(&point).collect();
            (n.clone(), pts)
        })
        .collect()
}

/// Draws `series` as a line chart into `<path_stem>.png` and
/// `<path_stem>.svg`; `log_x` makes the x axis logarithmic (every x must
/// then be positive). The y axis starts at 0. Returns the two paths.
pub fn line_chart(
    path_stem: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> anyhow::Result<(PathBuf, PathBuf)> {
    let points = || series.iter().flat_map(|(_, p)| p.iter().copied());
    anyhow::ensure!(points().next().is_some(), "nothing to plot for {title:?}");
    anyhow::ensure!(
        points().all(|(x, y)| x.is_finite() && y.is_finite()),
        "{title:?}: every point must be finite"
    );
    anyhow::ensure!(
        !log_x || points().all(|(x, _)| x > 0.0),
        "{title:?}: a logarithmic x axis needs positive x"
    );
    let (mut x_min, mut x_max) = points().fold((f64::MAX, f64::MIN), |(lo, hi), (x, _)| {
        (lo.min(x), hi.max(x))
    });
    if x_min == x_max {
        // One x value: widen so the axis has a length.
        if log_x {
            (x_min, x_max) = (x_min / 2.0, x_max * 2.0);
        } else {
            (x_min, x_max) = (x_min - 1.0, x_max + 1.0);
        }
    }
    let y_max = points().map(|(_, y)| y).fold(0.0f64, f64::max);
    let y_max = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    let y_min = points().map(|(_, y)| y).fold(0.0f64, f64::min);
    let spec = Spec {
        title,
        x_label,
        y_label,
        series,
        y: y_min..y_max,
    };

    let png = path_stem.with_extension("png");
    let svg = path_stem.with_extension("svg");
    if let Some(dir) = path_stem.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    // Each file whole or not at all, and none once the run was interrupted.
    crate::interrupt::results_step(|| -> anyhow::Result<()> {
        let root = BitMapBackend::new(&png, SIZE).into_drawing_area();
        if log_x {
            draw(&root, &spec, (x_min..x_max).log_scale())?;
        } else {
            draw(&root, &spec, x_min..x_max)?;
        }
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", png.display()))
    })?;
    crate::interrupt::results_step(|| -> anyhow::Result<()> {
        let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
        if log_x {
            draw(&root, &spec, (x_min..x_max).log_scale())?;
        } else {
            draw(&root, &spec, x_min..x_max)?;
        }
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", svg.display()))
    })?;
    Ok((png, svg))
}

/// Line colours, in series order (Tableau 10: distinct, readable on white).
const COLORS: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];

struct Spec<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    series: &'a [Series],
    y: std::ops::Range<f64>,
}

/// A short label for an axis value: no needless decimals, thousands as `k`.
fn tick(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn draw<DB, X>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    s: &Spec<'_>,
    x: X,
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {:?}: {e}", s.title);
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(root)
        .caption(s.title, ("sans-serif", 26))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(x, s.y.clone())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(s.x_label)
        .y_desc(s.y_label)
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 18))
        .draw()
        .map_err(|e| err(&e))?;
    fill(&mut chart, s).map_err(|e| err(&e))?;
    Ok(())
}

fn fill<'a, DB, XC>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<XC, RangedCoordf64>>,
    s: &Spec<'_>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    XC: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    for (i, (name, points)) in s.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()].to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(
            points
                .iter()
                .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()?;
    Ok(())
}

/// One named group of bars: a value per category (`None`: no bar).
pub type BarSeries = (String, Vec<Option<f64>>);

/// Draws grouped bars into `<path_stem>.png` and `.svg`: per category one
/// bar per series, on a logarithmic y axis, with a black line at
/// `reference` (e.g. 100% of a baseline). Every value must be positive.
/// Returns the two paths.
pub fn bar_chart(
    path_stem: &Path,
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[BarSeries],
    reference: f64,
) -> anyhow::Result<(PathBuf, PathBuf)> {
    let values = || series.iter().flat_map(|(_, v)| v.iter().flatten().copied());
    anyhow::ensure!(values().next().is_some(), "nothing to plot for {title:?}");
    anyhow::ensure!(
        values().all(|v| v.is_finite() && v > 0.0) && reference > 0.0,
        "{title:?}: bars on a logarithmic axis must be positive and finite"
    );
    anyhow::ensure!(
        series.iter().all(|(_, v)| v.len() == categories.len()),
        "{title:?}: one value per category"
    );
    let lo = values().fold(reference, f64::min) / 2.0;
    let hi = values().fold(reference, f64::max) * 2.0;
    let png = path_stem.with_extension("png");
    let svg = path_stem.with_extension("svg");
    if let Some(dir) = path_stem.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let spec = Bars {
        title,
        y_label,
        categories,
        series,
        reference,
        y: lo..hi,
    };
    crate::interrupt::results_step(|| -> anyhow::Result<()> {
        let root = BitMapBackend::new(&png, SIZE).into_drawing_area();
        draw_bars(&root, &spec)?;
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", png.display()))
    })?;
    crate::interrupt::results_step(|| -> anyhow::Result<()> {
        let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
        draw_bars(&root, &spec)?;
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e}", svg.display()))
    })?;
    Ok((png, svg))
}

struct Bars<'a> {
    title: &'a str,
    y_label: &'a str,
    categories: &'a [String],
    series: &'a [BarSeries],
    reference: f64,
    y: std::ops::Range<f64>,
}

/// The x axis has one slot per bar and one empty slot after each group;
/// a category's name sits under the middle bar of its group.
fn draw_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    s: &Bars<'_>,
) -> anyhow::Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {:?}: {e}", s.title);
    let group = s.series.len() + 1;
    let slots = (s.categories.len() * group) as i32;
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(root)
        .caption(s.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d((0..slots).into_segmented(), s.y.clone().log_scale())
        .map_err(|e| err(&e))?;
    let label = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) if *i >= 0 && (*i as usize) % group == (group - 1) / 2 => s
            .categories
            .get(*i as usize / group)
            .cloned()
            .unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(slots as usize + 1)
        .x_label_formatter(&label)
        .y_desc(s.y_label)
        .y_label_formatter(&|v| tick(*v))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 18))
        .draw()
        .map_err(|e| err(&e))?;
    let y0 = s.y.start;
    for (k, (name, values)) in s.series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let bars = values.iter().enumerate().filter_map(|(c, v)| {
            let x = (c * group + k) as i32;
            v.map(|v| {
                let mut r = Rectangle::new(
                    [
                        (SegmentValue::Exact(x), y0),
                        (SegmentValue::Exact(x + 1), v),
                    ],
                    color.filled(),
                );
                r.set_margin(0, 0, 2, 2);
                r
            })
        });
        chart
            .draw_series(bars)
            .map_err(|e| err(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.filled()));
    }
    chart
        .draw_series(LineSeries::new(
            [
                (SegmentValue::Exact(0), s.reference),
                (SegmentValue::Exact(slots), s.reference),
            ],
            BLACK.stroke_width(2),
        ))
        .map_err(|e| err(&e))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_by_groups_rows_by_name_in_the_names_order() {
        let rows = [("b", 1.0), ("a", 2.0), ("b", 3.0)];
        let names = ["a".to_string(), "b".to_string(), "c".to_string()];
        let s = series_by(&rows, &names, |r| r.0, |r| (r.1, r.1 * 10.0));
        assert_eq!(
            s,
            vec![
                ("a".to_string(), vec![(2.0, 20.0)]),
                ("b".to_string(), vec![(1.0, 10.0), (3.0, 30.0)]),
                ("c".to_string(), vec![]),
            ]
        );
    }

    #[test]
    fn ticks() {
        assert_eq!(tick(1.0), "1");
        assert_eq!(tick(16384.0), "16k");
        assert_eq!(tick(2_500_000.0), "2.5M");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(tick(450.4), "450");
    }

    #[test]
    fn refuses_bad_input() {
        let dir = std::env::temp_dir().join(format!("duality-plot-{}", std::process::id()));
        let stem = dir.join("x");
        assert!(line_chart(&stem, "t", "x", "y", &[], true).is_err());
        let neg = vec![("a".to_string(), vec![(0.0, 1.0)])];
        assert!(line_chart(&stem, "t", "x", "y", &neg, true).is_err());
        let nan = vec![("a".to_string(), vec![(1.0, f64::NAN)])];
        assert!(line_chart(&stem, "t", "x", "y", &nan, false).is_err());
    }

    #[test]
    fn writes_png_and_svg() {
        let dir = std::env::temp_dir().join(format!("duality-plot-ok-{}", std::process::id()));
        let series = vec![
            ("one".to_string(), vec![(1.0, 1.0), (4.0, 3.0), (16.0, 2.0)]),
            ("two".to_string(), vec![(1.0, 2.0), (16.0, 5.0)]),
        ];
        let (png, svg) = line_chart(
            &dir.join("chart"),
            "Test",
            "clients",
            "Mbit/s",
            &series,
            true,
        )
        .unwrap();
        assert!(std::fs::metadata(&png).unwrap().len() > 1000);
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<svg") && text.contains("clients"));
        let (png, _) = line_chart(&dir.join("lin"), "Linear", "x", "y", &series, false).unwrap();
        assert!(png.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bar_charts_are_written_and_refuse_non_positive_values() {
        let dir = std::env::temp_dir().join(format!("duality-plot-bars-{}", std::process::id()));
        let cats = vec!["a".to_string(), "b".to_string()];
        let series = vec![
            ("one".to_string(), vec![Some(5.0), Some(150.0)]),
            ("two".to_string(), vec![Some(80.0), None]),
        ];
        let (png, svg) =
            bar_chart(&dir.join("bars"), "Bars", "% of x", &cats, &series, 100.0).unwrap();
        assert!(std::fs::metadata(&png).unwrap().len() > 1000);
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<svg") && text.contains("% of x"));
        let zero = vec![("z".to_string(), vec![Some(0.0), None])];
        assert!(bar_chart(&dir.join("z"), "t", "y", &cats, &zero, 100.0).is_err());
        let short = vec![("s".to_string(), vec![Some(1.0)])];
        assert!(bar_chart(&dir.join("s"), "t", "y", &cats, &short, 100.0).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
