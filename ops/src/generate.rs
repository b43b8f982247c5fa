//! Man pages and shell completions written from a program's clap definition, so that they
//! never disagree with `--help` (`make install` writes them; docs/operations.md):
//!
//! ```text
//! mpa-control --generate man DIR      # mpa-control.8, mpa-control-serve.8, …
//! mpa-control --generate bash DIR     # also zsh, fish, elvish
//! ```
//!
//! The request is read before clap parses the command line: the programs' subcommands are
//! required, and generating must work without them. It is not in `--help` (it is for
//! packagers, not for users of the program).

use clap::Command;
use clap_complete::Shell;
use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

/// The first argument that asks for generation.
pub const FLAG: &str = "--generate";

/// When the command line is `PROGRAM --generate KIND DIR`, writes what KIND names into DIR
/// and returns the exit status (2 with a message for a bad request); otherwise `None` and
/// the program goes on. `man_section` is 1 for commands, 8 for daemons.
pub fn if_asked(command: impl FnOnce() -> Command, man_section: &'static str) -> Option<ExitCode> {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).and_then(|a| a.to_str()) != Some(FLAG) {
        return None;
    }
    let cmd = command();
    let name = cmd.get_name().to_string();
    let (Some(kind), Some(dir), None) = (
        args.get(2).and_then(|a| a.to_str()),
        args.get(3),
        args.get(4),
    ) else {
        eprintln!("{name}: usage: {name} {FLAG} man|bash|zsh|fish|elvish DIR");
        return Some(ExitCode::from(2));
    };
    let dir = Path::new(dir);
    let result = match kind {
        "man" => man_pages(cmd, man_section, dir),
        shell => match shell.parse::<Shell>() {
            Ok(shell) => {
                let mut cmd = cmd;
                clap_complete::generate_to(shell, &mut cmd, &name, dir).map(|_| ())
            }
            Err(_) => {
                eprintln!("{name}: {FLAG} {shell:?}: expected man, bash, zsh, fish or elvish");
                return Some(ExitCode::from(2));
            }
        },
    };
    Some(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {FLAG} {kind} {}: {e}", dir.display());
            ExitCode::FAILURE
        }
    })
}

/// One page for the program and one per visible subcommand (`mpa-control-serve.8`), as
/// git and cargo ship theirs.
pub fn man_pages(cmd: Command, section: &'static str, dir: &Path) -> std::io::Result<()> {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    write_pages(&cmd, section, dir)
}

fn write_pages(cmd: &Command, section: &'static str, dir: &Path) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, section, dir)?;
    }
    let page = clap_mangen::Man::new(cmd.clone()).section(section);
    page.generate_to(dir).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli() -> Command {
        Command::new("prog").about("A program.").subcommand(
            Command::new("serve").about("Serve.").arg(
                clap::Arg::new("config")
                    .long("config")
                    .help("The configuration file."),
            ),
        )
    }

    #[test]
    fn a_page_for_the_program_and_each_subcommand() {
        let dir = std::env::temp_dir().join(format!("mpa-ops-man-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        man_pages(cli(), "8", &dir).unwrap();
        let top = std::fs::read_to_string(dir.join("prog.8")).unwrap();
        assert!(top.contains(".TH prog 8"), "{top}");
        let serve = std::fs::read_to_string(dir.join("prog-serve.8")).unwrap();
        assert!(serve.contains("\\-\\-config"), "{serve}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
