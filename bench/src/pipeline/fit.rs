//! The cost per packet and per octet: a line fitted through the pipeline's configurations of
//! one ULPDU size at several MSS.

use super::PipelineReport;

/// Cost per packet and per payload octet, fitted (least squares) over configurations that differ
/// in MSS: `ns per segment = ns_per_packet + ns_per_kib × payload KiB per segment`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct CostFit {
    pub(crate) ns_per_packet: f64,
    pub(crate) ns_per_kib: f64,
    /// Configurations fitted.
    pub(crate) points: usize,
}

/// The fit over `reports` of ULPDU size `size`; `None` with fewer than two distinct payload
/// sizes per segment.
pub(crate) fn cost_fit(reports: &[PipelineReport], size: usize) -> Option<CostFit> {
    let pts: Vec<(f64, f64)> = reports
        .iter()
        .filter(|r| r.opts.size == size && r.last.frames > 0)
        .map(|r| {
            let kib = r.last.payload_octets as f64 / r.last.frames as f64 / 1024.0;
            (kib, r.ns_per_segment.median)
        })
        .collect();
    fit_line(&pts).map(|(a, b)| CostFit {
        ns_per_packet: a,
        ns_per_kib: b,
        points: pts.len(),
    })
}

/// Least squares `y = a + b·x`; `None` unless the x values differ.
fn fit_line(pts: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = pts.len() as f64;
    let (sx, sy) = pts
        .iter()
        .fold((0.0, 0.0), |(sx, sy), &(x, y)| (sx + x, sy + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = pts.iter().map(|&(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = pts.iter().map(|&(x, y)| (x - mx) * (y - my)).sum();
    if pts.len() < 2 || sxx <= f64::EPSILON {
        return None;
    }
    let b = sxy / sxx;
    Some((my - b * mx, b))
}

#[cfg(test)]
mod tests {
    use super::fit_line;

    #[test]
    fn the_cost_line_is_fitted_through_the_points() {
        // 100 ns per packet + 200 ns per KiB, exactly.
        let pts = [(1.0, 300.0), (2.0, 500.0), (8.0, 1700.0)];
        let (a, b) = fit_line(&pts).unwrap();
        assert!(
            (a - 100.0).abs() < 1e-9 && (b - 200.0).abs() < 1e-9,
            "{a} {b}"
        );
        // One payload size, or none: nothing to fit.
        assert_eq!(fit_line(&[(1.4, 300.0), (1.4, 320.0)]), None);
        assert_eq!(fit_line(&[]), None);
    }
}
