//! The programs' help as a user reads it: `-h` of every program and subcommand fits in 100
//! columns, `mpa-datapath -h` (the longest option list) in 50 lines, and `--help` says more
//! than `-h` wherever an option has a long text.

use std::process::Command;

const PROGRAMS: [&str; 4] = ["mpa-datapath", "mpa-control", "mpa-peer", "mpa-bench"];
const COLUMNS: usize = 100;

fn help(program: &str, args: &[&str]) -> String {
    let out = Command::new(mpa_tests::bin(program))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The subcommands `-h` lists (clap's `Commands:` section), `help` left out.
fn subcommands(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| *s != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn short_help_of_every_program_and_subcommand_fits_in_100_columns() {
    for program in PROGRAMS {
        let top = help(program, &["-h"]);
        let mut pages = vec![(program.to_string(), top.clone())];
        for sub in subcommands(&top) {
            pages.push((format!("{program} {sub}"), help(program, &[&sub, "-h"])));
        }
        for (name, text) in pages {
            for line in text.lines() {
                assert!(
                    line.chars().count() <= COLUMNS,
                    "{name} -h: a line of {} columns:\n{line}",
                    line.chars().count()
                );
            }
        }
    }
}

#[test]
fn datapath_short_help_is_at_most_50_lines_and_long_help_says_more() {
    let short = help("mpa-datapath", &["-h"]);
    assert!(
        short.lines().count() <= 50,
        "mpa-datapath -h is {} lines",
        short.lines().count()
    );
    let long = help("mpa-datapath", &["--help"]);
    assert!(long.lines().count() > short.lines().count());
    // One option's two texts: the line in -h, the paragraph in --help.
    assert!(
        short.contains("Poll this many µs before sleeping"),
        "{short}"
    );
    assert!(long.contains("a core's worth of CPU while they"), "{long}");
    assert!(
        !short.contains("a core's worth of CPU while they"),
        "{short}"
    );
}
