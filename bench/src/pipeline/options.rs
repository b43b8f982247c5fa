//! `mpa-bench pipeline`'s options checked before any frame is built: each bad value refused
//! with its reason (exit code 2), not run into a failed round, a panic or a silent default.

use super::gen::{frame_header_len, FIRST_PEER_PORT};
use super::PipelineArgs;
use anyhow::Result;
use mpa_datapath::io::{MAX_DESCS, MAX_FRAME};
use mpa_stack::sender::MIN_EMSS;
use mpa_stack::wire::tcp::TIMESTAMPS_OPTION_LEN;

/// The smallest MSS a flow takes from its peer: what is left of a segment after the
/// timestamps option (when the frames carry it) must hold the shortest FPDU the flow sends
/// ([`MIN_EMSS`], the flow's hand-over check).
const fn min_mss(timestamps: bool) -> usize {
    MIN_EMSS + if timestamps { TIMESTAMPS_OPTION_LEN } else { 0 }
}

/// Refuses what no run could honour.
pub(super) fn check(a: &PipelineArgs) -> Result<()> {
    if a.rounds == 0 {
        mpa_cli::usage!("--rounds must be at least 1");
    }
    if a.flows == 0 {
        mpa_cli::usage!("--flows must be at least 1");
    }
    if a.workers == 0 {
        mpa_cli::usage!("--workers must be at least 1");
    }
    let ports = usize::from(u16::MAX - FIRST_PEER_PORT) + 1;
    if a.flows.saturating_mul(a.workers) > ports {
        mpa_cli::usage!(
            "--flows {} × --workers {} is more flows than the {ports} peer ports the frames can carry",
            a.flows,
            a.workers
        );
    }
    for (name, v) in [("--loss", a.loss), ("--reorder", a.reorder)] {
        if !(0.0..=100.0).contains(&v) {
            mpa_cli::usage!("{name} {v} is not a percentage (0 to 100)");
        }
    }
    let timestamps = !a.no_timestamps;
    for &mss in &a.mss {
        let min = min_mss(timestamps);
        if mss < min {
            mpa_cli::usage!(
                "--mss {mss}: a flow takes no MSS under {min} from its peer{} (segments of \
                 fewer than {MIN_EMSS} octets of data cannot carry FPDUs)",
                if timestamps {
                    " that sends timestamps"
                } else {
                    ""
                }
            );
        }
        let frame = frame_header_len(timestamps).saturating_add(mss);
        if frame > MAX_FRAME {
            mpa_cli::usage!(
                "--mss {mss} makes {frame}-octet frames; the datapath takes frames of at most {MAX_FRAME} octets"
            );
        }
        if a.umem_chunk > 0 && frame.div_ceil(a.umem_chunk) > MAX_DESCS {
            mpa_cli::usage!(
                "--umem-chunk {} cuts the {frame}-octet frames of --mss {mss} into {} descriptors; \
                 the datapath takes at most {MAX_DESCS} per frame",
                a.umem_chunk,
                frame.div_ceil(a.umem_chunk)
            );
        }
    }
    for &size in &a.sizes {
        let size = size as u64;
        if a.bytes < size.saturating_mul(a.flows as u64) {
            mpa_cli::usage!(
                "--bytes {} holds no {size}-octet message for each of the {} flow(s)",
                a.bytes,
                a.flows
            );
        }
        if a.region_bytes < size {
            mpa_cli::usage!(
                "--region-bytes {} holds no {size}-octet message",
                a.region_bytes
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: PipelineArgs,
    }

    fn refused(args: &[&str]) -> String {
        let cli = Cli::try_parse_from(std::iter::once("pipeline").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?} parse: {e}"));
        let e = check(&cli.a).expect_err(&format!("{args:?} taken"));
        assert_eq!(mpa_cli::exit::code(&e), 2, "{args:?}: {e:#}");
        format!("{e:#}")
    }

    #[test]
    fn every_option_no_run_could_honour_is_refused_with_its_reason() {
        for (args, reason) in [
            (&["--rounds", "0"][..], "--rounds must be at least 1"),
            (&["--flows", "0"], "--flows must be at least 1"),
            (&["--workers", "0"], "--workers must be at least 1"),
            (
                &["--flows", "30000", "--workers", "2"],
                "--flows 30000 × --workers 2 is more flows than the 58536 peer ports",
            ),
            (&["--loss", "150"], "--loss 150 is not a percentage (0 to 100)"),
            (&["--reorder", "NaN"], "--reorder NaN is not a percentage"),
            (
                &["--mss", "1448,10"],
                "--mss 10: a flow takes no MSS under 76 from its peer that sends timestamps",
            ),
            (
                &["--mss", "63", "--no-timestamps"],
                "--mss 63: a flow takes no MSS under 64 from its peer (segments",
            ),
            (
                &["--mss", "70000"],
                "--mss 70000 makes 70066-octet frames; the datapath takes frames of at most 9248 octets",
            ),
            (
                &["--mss", "8948", "--umem-chunk", "100"],
                "--umem-chunk 100 cuts the 9014-octet frames of --mss 8948 into 91 descriptors; the datapath takes at most 18 per frame",
            ),
            (
                &["--bytes", "0"],
                "--bytes 0 holds no 4096-octet message for each of the 1 flow(s)",
            ),
            (
                &["--bytes", "8K", "--flows", "3"],
                "--bytes 8192 holds no 4096-octet message for each of the 3 flow(s)",
            ),
            (
                &["--region-bytes", "1", "--sizes", "4096"],
                "--region-bytes 1 holds no 4096-octet message",
            ),
        ] {
            let text = refused(args);
            assert!(text.contains(reason), "{args:?}: {text}");
        }
    }

    #[test]
    fn the_limits_themselves_are_taken() {
        for args in [
            &["--mss", "76"][..],
            &["--mss", "64", "--no-timestamps"],
            &["--mss", "9182"],
            &["--mss", "8948", "--umem-chunk", "501"],
            &["--loss", "100", "--reorder", "0"],
            &["--flows", "29268", "--workers", "2"],
            &[
                "--bytes",
                "4096",
                "--region-bytes",
                "4096",
                "--sizes",
                "4096",
            ],
        ] {
            let cli = Cli::try_parse_from(std::iter::once("pipeline").chain(args.iter().copied()))
                .unwrap();
            check(&cli.a).unwrap_or_else(|e| panic!("{args:?}: {e:#}"));
        }
    }
}
