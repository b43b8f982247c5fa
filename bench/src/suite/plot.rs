//! PNG plots of the experiments (plotters, bitmap backend): the latency CDF of both receivers
//! per size, goodput against message size of both receivers, and the pipeline's cost per
//! packet by stage. Text is drawn with DejaVu Sans read at run time (Debian's
//! `fonts-dejavu-core`; `MPA_BENCH_FONT` names another TrueType file).

use anyhow::{anyhow, bail, Context, Result};
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const SIZE: (u32, u32) = (900, 560);
const KERNEL: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const DATAPATH: RGBColor = RGBColor(0xd6, 0x27, 0x28);

/// Registers the font once; an error names the file and the package.
fn font() -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let path = std::env::var("MPA_BENCH_FONT").unwrap_or_else(|_| DEFAULT_FONT.into());
        let bytes = std::fs::read(&path).map_err(|e| {
            format!("plots need a TrueType font: {path}: {e} (apt-get install fonts-dejavu-core, or set MPA_BENCH_FONT)")
        })?;
        // The font lives as long as the process: plotters keeps a reference to it.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{path} is not a font plotters can read"))
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

fn color(receiver: &str) -> RGBColor {
    match receiver {
        "kernel" => KERNEL,
        // The datapath's latency modes, apart in one plot.
        "datapath-spin" => RGBColor(230, 140, 20),
        "datapath-rtc" => RGBColor(40, 150, 60),
        _ => DATAPATH,
    }
}

fn err<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> anyhow::Error {
    move |e| anyhow!("{what}: {e:?}")
}

/// One receiver's latency distribution: (µs, percentile 0..100) points.
pub(crate) struct CdfSeries {
    pub(crate) receiver: &'static str,
    pub(crate) points: Vec<(f64, f64)>,
}

/// The CDF points of a histogram of ns values.
pub(crate) fn cdf_points(h: &hdrhistogram::Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    h.iter_quantiles(5)
        .map(|v| {
            (
                h.highest_equivalent(v.value_iterated_to()) as f64 / 1000.0,
                v.quantile_iterated_to() * 100.0,
            )
        })
        .collect()
}

/// Latency CDF of both receivers for one size.
pub(crate) fn latency_cdf(path: &Path, title: &str, series: &[CdfSeries]) -> Result<()> {
    font()?;
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let lo = pts().map(|p| p.0).fold(f64::INFINITY, f64::min).max(0.1);
    let hi = pts().map(|p| p.0).fold(0.0, f64::max);
    if hi <= 0.0 {
        bail!("{title}: no samples to plot");
    }
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err("plot"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((lo * 0.8..hi * 1.25).log_scale(), 0f64..100f64)
        .map_err(err("plot"))?;
    chart
        .configure_mesh()
        .x_desc("one-way latency, µs (log)")
        .y_desc("percentile")
        .draw()
        .map_err(err("plot"))?;
    for s in series {
        let c = color(s.receiver);
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
            .map_err(err("plot"))?
            .label(s.receiver)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err("plot"))?;
    root.present()
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// One receiver's goodput by size: (size, median, min, max).
pub(crate) struct BwSeries {
    pub(crate) receiver: &'static str,
    pub(crate) points: Vec<(f64, f64, f64, f64)>,
}

/// Goodput against message size of both receivers, min–max as whiskers.
pub(crate) fn goodput_by_size(path: &Path, title: &str, series: &[BwSeries]) -> Result<()> {
    font()?;
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let (lo, hi) = pts().fold((f64::INFINITY, 0.0f64), |(l, h), p| {
        (l.min(p.0), h.max(p.0))
    });
    let top = pts().map(|p| p.3).fold(0.0, f64::max);
    if top.is_nan() || top <= 0.0 {
        bail!("{title}: no goodput to plot");
    }
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err("plot"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((lo / 1.5..hi * 1.5).log_scale(), 0f64..top * 1.15)
        .map_err(err("plot"))?;
    chart
        .configure_mesh()
        .x_desc("ULPDU size, octets (log)")
        .y_desc("goodput, Gbit/s (median, min–max)")
        .draw()
        .map_err(err("plot"))?;
    for s in series {
        let c = color(s.receiver);
        chart
            .draw_series(LineSeries::new(
                s.points.iter().map(|p| (p.0, p.1)),
                c.stroke_width(2),
            ))
            .map_err(err("plot"))?
            .label(s.receiver)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(
                s.points
                    .iter()
                    .map(|p| Circle::new((p.0, p.1), 4, c.filled())),
            )
            .map_err(err("plot"))?;
        chart
            .draw_series(
                s.points
                    .iter()
                    .map(|p| PathElement::new(vec![(p.0, p.2), (p.0, p.3)], c.stroke_width(1))),
            )
            .map_err(err("plot"))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err("plot"))?;
    root.present()
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// The pipeline's ns per packet by stage, as horizontal bars.
pub(crate) fn stages(path: &Path, title: &str, stages: &[(&str, f64)]) -> Result<()> {
    font()?;
    if stages.is_empty() {
        bail!("{title}: no stages to plot");
    }
    let top = stages.iter().map(|s| s.1).fold(0.0, f64::max).max(1.0);
    let n = stages.len() as f64;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err("plot"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(10)
        .build_cartesian_2d(0f64..top * 1.6, 0f64..n)
        .map_err(err("plot"))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc("ns per packet (difference of adjacent configurations' medians)")
        .draw()
        .map_err(err("plot"))?;
    for (i, (name, ns)) in stages.iter().enumerate() {
        let y = n - 1.0 - i as f64;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.0, y + 0.2), (ns.max(0.0), y + 0.8)],
                DATAPATH.mix(0.7).filled(),
            )))
            .map_err(err("plot"))?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{name}: {ns:.0} ns"),
                (ns.max(0.0) + top * 0.02, y + 0.62),
                ("sans-serif", 16),
            )))
            .map_err(err("plot"))?;
    }
    root.present()
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_points_rise_to_100() {
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
        for ns in 1..=1000u64 {
            h.record(ns * 1000).unwrap();
        }
        let p = cdf_points(&h);
        assert!(p.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(p.last().unwrap().1, 100.0);
        assert!((p.last().unwrap().0 - 1000.0).abs() < 1.0);
        assert!(cdf_points(&hdrhistogram::Histogram::<u64>::new(3).unwrap()).is_empty());
    }

    #[test]
    fn writes_pngs_when_a_font_is_there() {
        // `make test` (MPA_REQUIRE_PRIVILEGED=1, after `make deps`) has the font; elsewhere a
        // missing font skips the rendering.
        if font().is_err() && std::env::var_os("MPA_REQUIRE_PRIVILEGED").is_none() {
            eprintln!("no font: skipped");
            return;
        }
        let dir = std::env::temp_dir().join(format!("mpa-bench-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let png = |name: &str| {
            let p = dir.join(name);
            let b = std::fs::read(&p).unwrap();
            assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{name}");
        };
        latency_cdf(
            &dir.join("cdf.png"),
            "t",
            &[CdfSeries {
                receiver: "kernel",
                points: vec![(10.0, 0.0), (20.0, 50.0), (40.0, 100.0)],
            }],
        )
        .unwrap();
        png("cdf.png");
        goodput_by_size(
            &dir.join("bw.png"),
            "t",
            &[BwSeries {
                receiver: "datapath",
                points: vec![(4096.0, 2.0, 1.5, 2.5), (65536.0, 3.0, 2.0, 3.5)],
            }],
        )
        .unwrap();
        png("bw.png");
        stages(&dir.join("st.png"), "t", &[("a", 100.0), ("b", -3.0)]).unwrap();
        png("st.png");
        assert!(goodput_by_size(&dir.join("x.png"), "t", &[]).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
