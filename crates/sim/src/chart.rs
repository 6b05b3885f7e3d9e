//! The cumulative delivery curve of a [`Report`] as PNG and SVG: deliverable recipients
//! delivered over time above the axis; permanent failures and deferrals below it (drawn as
//! negative counts) — the picture an operator wants of a run.
//!
//! Pure Rust (plotters), no system fonts: the PNG's text is rasterized with ab_glyph from a font
//! compiled into the binary (DejaVu Sans Mono, Bitstream Vera licence, `assets/DejaVu-LICENSE`).
//! The SVG names the font family and leaves rendering to the viewer.
//!
//! Limits: the curve has at most a few hundred points (see [`crate::report`]).

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::path::Path;
use std::sync::OnceLock;

use crate::report::Report;

/// The font every chart's text uses.
static FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");
/// The family name the font is registered under.
const FAMILY: &str = "sans-serif";
/// Chart size in pixels.
const SIZE: (u32, u32) = (1200, 700);

/// A chart could not be drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error("the embedded chart font is invalid")]
    Font,
    #[error("{path}: {message}")]
    Draw { path: String, message: String },
}

fn register() -> Result<(), ChartError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        [FontStyle::Normal, FontStyle::Bold]
            .iter()
            .all(|s| register_font(FAMILY, *s, FONT).is_ok())
    });
    ok.then_some(()).ok_or(ChartError::Font)
}

/// Writes the curve of `report` to `png` and `svg`, titled `title`.
pub fn write_charts(
    report: &Report,
    title: &str,
    png: &Path,
    svg: &Path,
) -> Result<(), ChartError> {
    register()?;
    let err = |path: &Path| {
        let path = path.display().to_string();
        move |message: String| ChartError::Draw { path, message }
    };
    draw(
        BitMapBackend::new(png, SIZE).into_drawing_area(),
        report,
        title,
    )
    .map_err(err(png))?;
    draw(
        SVGBackend::new(svg, SIZE).into_drawing_area(),
        report,
        title,
    )
    .map_err(err(svg))
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    report: &Report,
    title: &str,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let last = report.curve.last().copied().unwrap_or_default();
    let x_max = (last.at_ms as f64 / 1000.0).max(0.001);
    let top = (report.deliverable.max(last.delivered) as f64 * 1.05).max(1.0);
    let bottom = -((last.failed.max(last.deferred) as f64 * 1.1).max(top * 0.05));
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(90)
        .build_cartesian_2d(0f64..x_max, bottom..top)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("seconds since start")
        .y_desc("recipients (failures and deferrals below 0)")
        .label_style((FAMILY, 14))
        .draw()
        .map_err(e)?;
    let series = |f: fn(&crate::report::CurvePoint) -> f64| {
        report
            .curve
            .iter()
            .map(move |p| (p.at_ms as f64 / 1000.0, f(p)))
            .collect::<Vec<_>>()
    };
    let green = RGBColor(30, 140, 60);
    let red = RGBColor(200, 40, 40);
    let amber = RGBColor(220, 150, 20);
    let delivered = series(|p| p.delivered as f64);
    chart
        .draw_series(AreaSeries::new(delivered, 0.0, green.mix(0.25)).border_style(green))
        .map_err(e)?
        .label(format!(
            "delivered ({} of {} deliverable)",
            last.delivered, report.deliverable
        ))
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], green.filled()));
    chart
        .draw_series(
            AreaSeries::new(series(|p| -(p.deferred as f64)), 0.0, amber.mix(0.2))
                .border_style(amber),
        )
        .map_err(e)?
        .label(format!("deferrals, 4xx ({})", last.deferred))
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], amber.filled()));
    chart
        .draw_series(LineSeries::new(
            series(|p| -(p.failed as f64)),
            red.stroke_width(2),
        ))
        .map_err(e)?
        .label(format!("permanent failures, 5xx ({})", last.failed))
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], red.filled()));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)
}
