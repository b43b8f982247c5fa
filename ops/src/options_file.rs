//! A TOML file of a program's options (`mpa-datapath --config /etc/mpa-xdp/datapath.toml`):
//! each key is a long option, with `_` or `-` between words, and its value the option's
//! value. The file's options come first on the command line, so an option also given on the
//! command line wins (the program's parser lets a later occurrence override an earlier one).
//!
//! ```toml
//! queues = 2
//! zero_copy = "auto"
//! spin_us = 1000
//! pin_cpus = true        # a flag: true sets it, false leaves it out
//! ```
//!
//! Only a regular file of at most [`MAX_LEN`] octets is read: a FIFO would hold the start
//! until someone writes to it, and a device such as `/dev/zero` never ends.

use clap::{ArgAction, Command};
use nix::fcntl::OFlag;
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The largest options file read (1 MiB): a few hundred options take a few KiB.
pub const MAX_LEN: u64 = 1 << 20;

/// Why the options file cannot be used; every message names the file and, where there is
/// one, the key.
#[derive(Debug, thiserror::Error)]
pub enum OptionsFileError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A FIFO, a device, a directory or a socket: only a regular file is read.
    #[error("{path}: not a regular file (a {kind})")]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// More than [`MAX_LEN`] octets.
    #[error("{path}: larger than 1 MiB")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// Not TOML.
    #[error("{path}: {source}")]
    Toml {
        /// The file.
        path: PathBuf,
        /// Where and why.
        source: Box<toml::de::Error>,
    },
    /// A key that is no option of the program, or a value the option cannot take.
    #[error("{path}: {key}: {message}")]
    Key {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// `--config` without a file.
    #[error("--{0} needs a file")]
    Missing(String),
}

/// The program's arguments with the options of the file named by `--<file_option> FILE`
/// (if any) put in front of the others; `args[0]` stays first. `cmd` is the program's
/// command: keys are checked against its long options.
pub fn expand(
    cmd: &Command,
    file_option: &str,
    args: Vec<OsString>,
) -> Result<Vec<OsString>, OptionsFileError> {
    let long = format!("--{file_option}");
    let prefixed = format!("--{file_option}=");
    let mut file = None;
    let mut i = 1;
    while i < args.len() {
        match args[i].to_str() {
            Some(a) if a == long => {
                let f = args
                    .get(i + 1)
                    .ok_or_else(|| OptionsFileError::Missing(file_option.to_string()))?;
                file = Some(PathBuf::from(f));
                i += 1;
            }
            Some(a) if a.starts_with(&prefixed) => file = Some(PathBuf::from(&a[prefixed.len()..])),
            Some("--") => break,
            _ => {}
        }
        i += 1;
    }
    let Some(path) = file else { return Ok(args) };
    let from_file = read(cmd, file_option, &path)?;
    let mut out = Vec::with_capacity(args.len() + from_file.len());
    let mut rest = args.into_iter();
    out.extend(rest.next());
    out.extend(from_file);
    out.extend(rest);
    Ok(out)
}

/// The options in `path` as command-line arguments.
pub fn read(
    cmd: &Command,
    file_option: &str,
    path: &Path,
) -> Result<Vec<OsString>, OptionsFileError> {
    let text = read_text(path)?;
    let table: toml::Table = text.parse().map_err(|source| OptionsFileError::Toml {
        path: path.to_path_buf(),
        source: Box::new(source),
    })?;
    let mut out = Vec::new();
    for (key, value) in &table {
        let bad = |message: String| OptionsFileError::Key {
            path: path.to_path_buf(),
            key: key.clone(),
            message,
        };
        let name = key.replace('_', "-");
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(name.as_str()) && name != file_option)
            .ok_or_else(|| bad(format!("no such option (see {} --help)", cmd.get_name())))?;
        let flag = matches!(arg.get_action(), ArgAction::SetTrue);
        let values = match value {
            toml::Value::Array(items) => items.iter().collect(),
            v => vec![v],
        };
        for v in values {
            let text = match v {
                toml::Value::Boolean(b) if flag => {
                    if *b {
                        out.push(OsString::from(format!("--{name}")));
                    }
                    continue;
                }
                _ if flag => return Err(bad("a flag: true or false".into())),
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Float(x) => x.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => return Err(bad(format!("{} is not an option value", other.type_str()))),
            };
            out.push(OsString::from(format!("--{name}={text}")));
        }
    }
    Ok(out)
}

/// The text of `path` if it is a regular file of at most [`MAX_LEN`] octets. The type is
/// checked on the opened file, so what is read is what was checked; O_NONBLOCK lets the open
/// of a FIFO return at once instead of waiting for a writer.
fn read_text(path: &Path) -> Result<String, OptionsFileError> {
    let io = |source| OptionsFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits())
        .open(path)
        .map_err(io)?;
    let kind = file.metadata().map_err(io)?.file_type();
    if !kind.is_file() {
        return Err(OptionsFileError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_name(kind),
        });
    }
    let mut octets = Vec::new();
    File::take(file, MAX_LEN + 1)
        .read_to_end(&mut octets)
        .map_err(io)?;
    if octets.len() as u64 > MAX_LEN {
        return Err(OptionsFileError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    String::from_utf8(octets)
        .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

fn kind_name(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "directory"
    } else if kind.is_fifo() {
        "FIFO"
    } else if kind.is_char_device() {
        "character device"
    } else if kind.is_block_device() {
        "block device"
    } else if kind.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Arg;

    fn cmd() -> Command {
        Command::new("prog")
            .args_override_self(true)
            .arg(Arg::new("config").long("config"))
            .arg(Arg::new("queues").long("queues"))
            .arg(Arg::new("spin-us").long("spin-us"))
            .arg(
                Arg::new("pin-cpus")
                    .long("pin-cpus")
                    .action(ArgAction::SetTrue),
            )
    }

    fn file(text: &str) -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("mpa-ops-opts-{}-{n}.toml", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn file_options_come_first_and_the_command_line_wins() {
        let p = file("queues = 2\nspin_us = 100\npin_cpus = true\n");
        let args = os(&["prog", "--config", p.to_str().unwrap(), "--queues", "4"]);
        let out = expand(&cmd(), "config", args).unwrap();
        let m = cmd().try_get_matches_from(out).unwrap();
        assert_eq!(m.get_one::<String>("queues").unwrap(), "4");
        assert_eq!(m.get_one::<String>("spin-us").unwrap(), "100");
        assert!(m.get_flag("pin-cpus"));
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_false_flag_is_left_out() {
        let p = file("pin-cpus = false\n");
        let out = read(&cmd(), "config", &p).unwrap();
        assert!(out.is_empty());
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn errors_name_the_file_and_the_key() {
        for (text, want) in [
            ("quees = 2\n", "quees: no such option"),
            ("pin_cpus = 3\n", "pin_cpus: a flag"),
            (
                "queues = { a = 1 }\n",
                "queues: table is not an option value",
            ),
            ("config = \"x\"\n", "config: no such option"),
        ] {
            let p = file(text);
            let e = read(&cmd(), "config", &p).unwrap_err().to_string();
            assert!(
                e.starts_with(p.to_str().unwrap()) && e.contains(want),
                "{text}: {e}"
            );
            std::fs::remove_file(p).unwrap();
        }
        let p = file("queues = \n");
        let e = read(&cmd(), "config", &p).unwrap_err();
        assert!(matches!(e, OptionsFileError::Toml { .. }), "{e}");
        std::fs::remove_file(p).unwrap();
        let e = expand(&cmd(), "config", os(&["prog", "--config"])).unwrap_err();
        assert_eq!(e.to_string(), "--config needs a file");
        let e = read(&cmd(), "config", Path::new("/nonexistent/x.toml")).unwrap_err();
        assert!(matches!(e, OptionsFileError::Read { .. }), "{e}");
    }

    /// Each is refused at once with its path and reason; before the checks a FIFO held the
    /// read until a writer came, and `/dev/zero` was read until memory ran out.
    #[test]
    fn only_a_regular_file_of_at_most_1_mib_is_read() {
        let dir = std::env::temp_dir().join(format!("mpa-ops-opts-special-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo.toml");
        let _ = std::fs::remove_file(&fifo);
        nix::unistd::mkfifo(
            &fifo,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .unwrap();
        let large = dir.join("large.toml");
        // Valid TOML throughout, so that only the size refuses it.
        let line = format!("# {}\n", "x".repeat(1021));
        std::fs::write(&large, line.repeat(1025)).unwrap();
        let cases: [(&Path, &str); 4] = [
            (&fifo, "not a regular file (a FIFO)"),
            (
                Path::new("/dev/zero"),
                "not a regular file (a character device)",
            ),
            (&dir, "not a regular file (a directory)"),
            (&large, "larger than 1 MiB"),
        ];
        for (path, why) in cases {
            let start = std::time::Instant::now();
            let e = read(&cmd(), "config", path).unwrap_err();
            assert_eq!(e.to_string(), format!("{}: {why}", path.display()));
            assert!(
                start.elapsed() < std::time::Duration::from_secs(1),
                "{}: {:?}",
                path.display(),
                start.elapsed()
            );
        }
        // The same file at the bound is read.
        let line_count = MAX_LEN as usize / line.len();
        std::fs::write(&large, line.repeat(line_count)).unwrap();
        assert!(read(&cmd(), "config", &large).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
