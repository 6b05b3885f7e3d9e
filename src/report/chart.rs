//! Charts for `herald report` with plotters: the day picture (seeds/000's batchstat: delivery
//! spikes per minute, post arrivals marked below the axis, cumulative deliveries as a line) and
//! one post's curve. PNG or SVG by the output's extension.
//!
//! Text is drawn with DejaVu Sans embedded in the binary (`assets/fonts`, Bitstream Vera
//! licence, see DejaVu-LICENSE.txt) through plotters' `ab_glyph` backend: no system fonts are
//! needed, so the same picture comes out on a bare server.
//!
//! Self-contained (plotters + the API's report views only) so the report benchmark example
//! can include it.

use herald_api_types::{DayReport, PostReport};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

const FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
const WIDTH: u32 = 1200;
const HEIGHT: u32 = 600;

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error("the embedded font could not be loaded")]
    Font,
    #[error("output file name must end in .png or .svg: {0}")]
    Format(String),
    #[error("drawing failed: {0}")]
    Draw(String),
}

fn draw_err<E: std::fmt::Display>(e: E) -> ChartError {
    ChartError::Draw(e.to_string())
}

fn register_font() -> Result<(), ChartError> {
    // Registering again is harmless; it only replaces the same bytes.
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| ChartError::Font)
}

/// Draws with a PNG or SVG backend chosen by `out`'s extension.
fn with_backend(
    out: &Path,
    draw: impl FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), ChartError>,
    draw_svg: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), ChartError>,
) -> Result<(), ChartError> {
    register_font()?;
    let ext = out.extension().and_then(|e| e.to_str()).unwrap_or("");
    match ext.to_ascii_lowercase().as_str() {
        "png" => {
            let root = BitMapBackend::new(out, (WIDTH, HEIGHT)).into_drawing_area();
            draw(&root)?;
            root.present().map_err(draw_err)
        }
        "svg" => {
            let root = SVGBackend::new(out, (WIDTH, HEIGHT)).into_drawing_area();
            draw_svg(&root)?;
            root.present().map_err(draw_err)
        }
        _ => Err(ChartError::Format(out.display().to_string())),
    }
}

/// The day picture.
pub fn day(rep: &DayReport, title: &str, out: &Path) -> Result<(), ChartError> {
    with_backend(
        out,
        |a| draw_day(a, rep, title),
        |a| draw_day(a, rep, title),
    )
}

/// One post's curve: deliveries per second and the cumulative count.
pub fn post(rep: &PostReport, out: &Path) -> Result<(), ChartError> {
    with_backend(out, |a| draw_post(a, rep), |a| draw_post(a, rep))
}

/// The cumulative deliveries of the day as (hour, count) points that follow the deliveries:
/// flat until a minute with deliveries begins, up by that minute's count across it. (Joining
/// only the minutes' ends drew a straight ramp from midnight over the hours with none.)
fn cumulative_line(rep: &DayReport) -> Vec<(f64, f64)> {
    let hour = |ms: u64| ms.saturating_sub(rep.day_start_ms) as f64 / 3_600_000.0;
    let mut cumulative = 0.0;
    let mut line = vec![(0.0, 0.0)];
    for m in &rep.minutes {
        let x = hour(m.minute_ms);
        line.push((x, cumulative));
        cumulative += m.delivered as f64;
        line.push((x + 1.0 / 60.0, cumulative));
    }
    line
}

fn draw_day<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rep: &DayReport,
    title: &str,
) -> Result<(), ChartError> {
    area.fill(&WHITE).map_err(draw_err)?;
    let peak = rep
        .minutes
        .iter()
        .map(|m| m.delivered + m.failed)
        .max()
        .unwrap_or(0)
        .max(10) as f64;
    let total = (rep.delivered.max(1)) as f64;
    // Below zero: a band for the arrival marks.
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .right_y_label_area_size(80)
        .build_cartesian_2d(0f64..24f64, (-peak * 0.12)..(peak * 1.05))
        .map_err(draw_err)?
        .set_secondary_coord(0f64..24f64, (-total * 0.12)..(total * 1.05));
    chart
        .configure_mesh()
        .x_labels(13)
        .x_label_formatter(&|h| format!("{:02}:00", *h as u32))
        .y_label_formatter(&|v| {
            if *v < 0.0 {
                String::new()
            } else {
                format!("{v:.0}")
            }
        })
        .y_desc("copies per minute")
        .x_desc("time of day (UTC) · marks below the axis: post arrivals")
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(draw_err)?;
    chart
        .configure_secondary_axes()
        .y_desc("delivered since midnight")
        .label_style(("sans-serif", 12))
        .y_label_formatter(&|v| {
            if *v < 0.0 {
                String::new()
            } else {
                format!("{v:.0}")
            }
        })
        .draw()
        .map_err(draw_err)?;
    let hour = |ms: u64| ms.saturating_sub(rep.day_start_ms) as f64 / 3_600_000.0;
    let line = cumulative_line(rep);
    chart
        .draw_secondary_series(AreaSeries::new(line, 0.0, RGBColor(200, 200, 200).mix(0.5)))
        .map_err(draw_err)?;
    let spikes = rep.minutes.iter().flat_map(|m| {
        let x = hour(m.minute_ms);
        let d = m.delivered as f64;
        [
            PathElement::new(vec![(x, 0.0), (x, d)], BLACK.stroke_width(2)),
            PathElement::new(vec![(x, d), (x, d + m.failed as f64)], RED.stroke_width(2)),
        ]
    });
    chart.draw_series(spikes).map_err(draw_err)?;
    let marks = rep.arrivals.iter().map(|a| {
        let x = hour(a.accepted_at_ms);
        PathElement::new(
            vec![(x, -peak * 0.02), (x, -peak * 0.10)],
            BLUE.stroke_width(1),
        )
    });
    chart.draw_series(marks).map_err(draw_err)?;
    Ok(())
}

fn draw_post<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rep: &PostReport,
) -> Result<(), ChartError> {
    area.fill(&WHITE).map_err(draw_err)?;
    let span = rep.curve.last().map_or(10, |p| p.second + 1).max(10) as f64;
    let peak = rep
        .curve
        .iter()
        .map(|p| p.delivered + p.failed)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let total = rep.recipients.unwrap_or(rep.delivered + rep.failed).max(1) as f64;
    let title = format!("post {} · {}", rep.post, rep.list.as_deref().unwrap_or("?"));
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .right_y_label_area_size(80)
        .build_cartesian_2d(0f64..span, 0f64..peak * 1.05)
        .map_err(draw_err)?
        .set_secondary_coord(0f64..span, 0f64..total * 1.05);
    chart
        .configure_mesh()
        .x_desc("seconds after acceptance")
        .y_desc("copies per second")
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(draw_err)?;
    chart
        .configure_secondary_axes()
        .y_desc("delivered (cumulative)")
        .draw()
        .map_err(draw_err)?;
    let bars = rep.curve.iter().map(|p| {
        let x = p.second as f64;
        Rectangle::new([(x, 0.0), (x + 1.0, p.delivered as f64)], BLACK.filled())
    });
    chart.draw_series(bars).map_err(draw_err)?;
    let mut cum = 0.0;
    let line: Vec<(f64, f64)> = rep
        .curve
        .iter()
        .map(|p| {
            cum += p.delivered as f64;
            (p.second as f64 + 1.0, cum)
        })
        .collect();
    chart
        .draw_secondary_series(LineSeries::new(line, BLUE.stroke_width(2)))
        .map_err(draw_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_api_types::MinutePoint;

    #[test]
    fn the_cumulative_line_stays_flat_until_the_deliveries() {
        let minute = |m: u64, delivered: u64| MinutePoint {
            minute_ms: m * 60_000,
            delivered,
            ..MinutePoint::default()
        };
        let rep = DayReport {
            day_start_ms: 0,
            // Deliveries at 10:00 and 10:05 only.
            minutes: vec![minute(600, 100), minute(605, 50)],
            delivered: 150,
            ..DayReport::default()
        };
        let line = cumulative_line(&rep);
        // Flat at zero until 10:00, not a ramp from midnight.
        assert_eq!(line[0], (0.0, 0.0));
        assert_eq!(line[1], (10.0, 0.0));
        assert!((line[2].0 - (10.0 + 1.0 / 60.0)).abs() < 1e-9 && line[2].1 == 100.0);
        assert_eq!(line[3].1, 100.0, "flat between the two minutes");
        assert_eq!(line.last().map(|p| p.1), Some(150.0));
        assert!(line
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    }
}
