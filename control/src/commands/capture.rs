//! `capture`: the datapath's frames of one flow (or all) into a pcap file.

use crate::cli::CaptureArgs;
use mpa_control::capture::{capture, CaptureOptions, CaptureSummary};
use mpa_ctl_proto::capture::{MAX_BYTES, MAX_DURATION_MS, MAX_SNAPLEN, MIN_BYTES};
use serde_json::json;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// The capture's bounds from the command line, checked.
fn capture_options(a: &CaptureArgs) -> Result<CaptureOptions, String> {
    let max_s = MAX_DURATION_MS / 1000;
    if !(a.duration.is_finite() && a.duration > 0.0 && a.duration <= max_s as f64) {
        return Err(format!(
            "--duration {}: must be more than 0 and at most {max_s} seconds",
            a.duration
        ));
    }
    let duration = Duration::from_secs_f64(a.duration).max(Duration::from_millis(1));
    if !(MIN_BYTES..=MAX_BYTES).contains(&a.max_bytes) {
        return Err(format!(
            "--max-bytes {}: must be {MIN_BYTES} to {MAX_BYTES} (4 GiB)",
            a.max_bytes
        ));
    }
    if a.snaplen == 0 || a.snaplen > MAX_SNAPLEN {
        return Err(format!(
            "--snaplen {}: must be 1 to {MAX_SNAPLEN}",
            a.snaplen
        ));
    }
    Ok(CaptureOptions {
        flow: a.flow,
        max_bytes: a.max_bytes,
        duration,
        snaplen: a.snaplen,
    })
}

pub(crate) fn capture_cmd(a: &CaptureArgs) -> Result<(), String> {
    let opts = capture_options(a)?;
    // A signal ends the capture early (the file stays valid), it does not kill us.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| format!("signals: {e}"))?;
    }
    let file = std::fs::File::create(&a.out)
        .map_err(|e| format!("capture file {}: {e}", a.out.display()))?;
    let (mut dp, path) = a.target.connect()?;
    let out = std::io::BufWriter::new(file);
    let (summary, _) = capture(&mut dp, &opts, out, &stop).map_err(|e| {
        format!(
            "capture into {} (datapath at {}): {e}",
            a.out.display(),
            path.display()
        )
    })?;
    println!("{}", capture_line(&summary, &a.out, a.json));
    Ok(())
}

/// The summary line, human or JSON.
fn capture_line(s: &CaptureSummary, out: &Path, json: bool) -> String {
    if json {
        json!({
            "out": out.display().to_string(),
            "frames": s.frames,
            "rx": s.rx,
            "tx": s.tx,
            "reconstructed": s.reconstructed,
            "bytes": s.bytes,
            "dropped": s.dropped,
            "reason": s.reason,
        })
        .to_string()
    } else {
        format!(
            "capture: {} frames ({} rx, {} tx, {} reconstructed), {} bytes in {}, {} dropped, ended: {}",
            s.frames,
            s.rx,
            s.tx,
            s.reconstructed,
            s.bytes,
            out.display(),
            s.dropped,
            s.reason
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Cmd};
    use clap::Parser;
    use serde_json::Value;

    fn capture_args(args: &[&str]) -> Result<CaptureArgs, String> {
        let mut v = vec!["mpa-control", "capture"];
        v.extend_from_slice(args);
        match Cli::try_parse_from(v) {
            Ok(Cli {
                cmd: Cmd::Capture(a),
                ..
            }) => Ok(a),
            Ok(_) => Err("not capture".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn capture_wants_exactly_one_of_flow_and_all() {
        let a = capture_args(&["--all", "--out", "x.pcap", "--duration", "2"]).unwrap();
        let o = capture_options(&a).unwrap();
        assert_eq!(o.flow, None);
        assert_eq!(o.duration, Duration::from_secs(2));
        assert_eq!((o.max_bytes, o.snaplen), (64 << 20, 65535));
        let a = capture_args(&["--flow", "7", "--out", "x.pcap", "--duration", "0.25"]).unwrap();
        let o = capture_options(&a).unwrap();
        assert_eq!((o.flow, o.duration), (Some(7), Duration::from_millis(250)));
        let both = capture_args(&["--flow", "7", "--all", "--out", "x", "--duration", "1"]);
        assert!(both.unwrap_err().contains("cannot be used with"));
        let neither = capture_args(&["--out", "x", "--duration", "1"]);
        assert!(neither.unwrap_err().contains("required"));
        assert!(
            capture_args(&["--all", "--duration", "1"]).is_err(),
            "--out needed"
        );
    }

    #[test]
    fn capture_bounds_are_checked_with_clear_errors() {
        for (args, want) in [
            (vec!["--duration", "0"], "--duration 0: must be more than 0"),
            (vec!["--duration=-1"], "--duration -1"),
            (vec!["--duration", "3601"], "at most 3600 seconds"),
            (vec!["--duration", "NaN"], "--duration NaN"),
            (
                vec!["--duration", "1", "--max-bytes", "10"],
                "--max-bytes 10: must be 41",
            ),
            (
                vec!["--duration", "1", "--max-bytes", "5000000000"],
                "--max-bytes 5000000000",
            ),
            (vec!["--duration", "1", "--snaplen", "0"], "--snaplen 0"),
            (
                vec!["--duration", "1", "--snaplen", "300000"],
                "--snaplen 300000",
            ),
        ] {
            let mut v = vec!["--all", "--out", "x.pcap"];
            v.extend(args.iter());
            let a = capture_args(&v).unwrap();
            let e = capture_options(&a).unwrap_err();
            assert!(e.contains(want), "{args:?}: {e}");
        }
        let a = capture_args(&[
            "--all",
            "--out",
            "x",
            "--duration",
            "3600",
            "--max-bytes",
            "41",
        ]);
        assert!(capture_options(&a.unwrap()).is_ok());
    }

    #[test]
    fn capture_summary_line() {
        let s = CaptureSummary {
            frames: 10,
            rx: 6,
            tx: 4,
            reconstructed: 1,
            bytes: 2000,
            dropped: 0,
            reason: "duration".into(),
        };
        assert_eq!(
            capture_line(&s, Path::new("a.pcap"), false),
            "capture: 10 frames (6 rx, 4 tx, 1 reconstructed), 2000 bytes in a.pcap, 0 dropped, ended: duration"
        );
        let j: Value = serde_json::from_str(&capture_line(&s, Path::new("a.pcap"), true)).unwrap();
        assert_eq!(j["frames"], 10);
        assert_eq!(j["reason"], "duration");
        assert_eq!(j["out"], "a.pcap");
    }
}
