//! The `mpa-control serve` configuration file (TOML).
//!
//! ```toml
//! datapath_socket = "/run/mpa-datapath.sock"   # default
//! startup_timeout_ms = 10000                    # each wait of the startup phase
//! max_connections = 1024                        # in setup + handed over, all listeners
//! max_connections_per_source = 256              # of those, from one peer address
//! metrics = "127.0.0.1:9465"                    # OpenMetrics at http://ADDR/metrics
//!
//! [[listener]]
//! bind = "10.0.0.2:7777"
//! revision = 2                  # highest revision accepted: 1 (RFC 5044) or 2 (RFC 6581)
//! markers_required = true
//! crc_suppressed_by_admin = false
//! permissive = false            # accept MPA revision 0 (RDMA Consortium) peers
//! ird = 8
//! ord = 8
//! rtr_support = ["send", "write", "read"]
//! private_data_prefix = "iser"  # or: private_data_max_len = 64 (not both)
//! reject_reason = "not for us"
//! reply_private_data = "welcome"
//! pd = 1                        # protection domain of its connections (placement)
//! advertise_region = true       # put a region advertisement (mpa_ctl_proto::region_ad) in the
//!                               # Reply: the lowest STag of domain `pd` with remote write
//! advertise_recv_size = 4096    # ... and say Sends are accepted into buffers of this size
//! aligned_sender = true         # peers align FPDUs with segments: without markers, place
//!                               # out-of-order segments whose first FPDU verifies by CRC
//! ```
//!
//! Every error names the key it is about; listener keys are prefixed with the listener's
//! position and bind address.

use mpa::startup::{PrivateDataRule, RtrSet, RtrType, StartupPolicy};
use mpa_ctl_proto::DATAPATH_MAX_IRD;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The datapath socket when neither the command line nor a config names one.
pub const DEFAULT_SOCKET: &str = "/run/mpa-datapath.sock";
/// `startup_timeout_ms` when absent.
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 10_000;
/// `max_connections` when absent.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// `max_connections_per_source` when absent: a quarter of the default `max_connections`,
/// so that one host cannot hold every slot.
pub const DEFAULT_MAX_CONNECTIONS_PER_SOURCE: usize = DEFAULT_MAX_CONNECTIONS / 4;
/// Largest `startup_timeout_ms` accepted (ten minutes).
const MAX_STARTUP_TIMEOUT_MS: u64 = 600_000;
/// Most private data a startup frame carries (RFC 5044 §7.1: PD_Length ≤ 512).
const MAX_PRIVATE_DATA: usize = 512;
/// Octets of a revision-2 frame's private data taken by the enhanced fields (RFC 6581 §9.1).
const ENHANCED_LEN: usize = 8;
/// IRD/ORD are 14-bit fields (RFC 6581 §9.1).
const IRD_ORD_MAX: u16 = 0x3FFF;

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not valid TOML, an unknown key, or a value of the wrong type (the message shows the
    /// line and the key).
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// A value out of range or inconsistent.
    #[error("{key}: {message}")]
    Invalid {
        /// The key, e.g. `listener[0] (bind 10.0.0.2:7777).ird`.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The datapath's control socket.
    pub datapath_socket: PathBuf,
    /// How long each wait of the startup phase may last.
    pub startup_timeout: Duration,
    /// Connections in setup plus handed over (frozen sockets held), all listeners together.
    pub max_connections: usize,
    /// Of those, from one peer address at most.
    pub max_connections_per_source: usize,
    /// The operator's listeners; none when the daemon serves applications' Listen and
    /// Connect only.
    pub listeners: Vec<ListenerConfig>,
    /// Where to serve metrics (`--metrics` overrides).
    pub metrics: Option<SocketAddr>,
}

/// One listening address and its policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    /// Where to listen.
    pub bind: SocketAddr,
    /// The Responder policy (`startup_timeout` filled in from the top level).
    pub policy: StartupPolicy,
    /// The private data of an accepting Reply.
    pub reply_private_data: Vec<u8>,
    /// Protection domain of its connections: their RDMA messages place into its regions.
    pub pd: Option<u32>,
    /// Advertise a region of `pd` in the accepting Reply.
    pub advertise_region: bool,
    /// Receive buffer size to advertise for Sends (0: Sends not advertised).
    pub advertise_recv_size: u32,
    /// The peers align FPDUs with segments: place out-of-order segments without markers.
    pub aligned_sender: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    datapath_socket: Option<PathBuf>,
    startup_timeout_ms: Option<u64>,
    max_connections: Option<usize>,
    max_connections_per_source: Option<usize>,
    metrics: Option<SocketAddr>,
    #[serde(default)]
    listener: Vec<RawListener>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListener {
    bind: String,
    revision: Option<u8>,
    markers_required: Option<bool>,
    crc_suppressed_by_admin: Option<bool>,
    permissive: Option<bool>,
    ird: Option<u16>,
    ord: Option<u16>,
    rtr_support: Option<Vec<String>>,
    private_data_prefix: Option<String>,
    private_data_max_len: Option<usize>,
    reject_reason: Option<String>,
    reply_private_data: Option<String>,
    pd: Option<u32>,
    advertise_region: Option<bool>,
    advertise_recv_size: Option<u32>,
    aligned_sender: Option<bool>,
}

impl Config {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text)
    }

    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text)?;
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            key: key.to_string(),
            message,
        };
        let datapath_socket = raw
            .datapath_socket
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET));
        if datapath_socket.as_os_str().is_empty() {
            return Err(invalid("datapath_socket", "must not be empty".into()));
        }
        let ms = raw.startup_timeout_ms.unwrap_or(DEFAULT_STARTUP_TIMEOUT_MS);
        if !(1..=MAX_STARTUP_TIMEOUT_MS).contains(&ms) {
            return Err(invalid(
                "startup_timeout_ms",
                format!("{ms} is not between 1 and {MAX_STARTUP_TIMEOUT_MS}"),
            ));
        }
        let startup_timeout = Duration::from_millis(ms);
        let max_connections = raw.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
        if max_connections == 0 {
            return Err(invalid("max_connections", "must be at least 1".into()));
        }
        let max_connections_per_source = raw
            .max_connections_per_source
            .unwrap_or(DEFAULT_MAX_CONNECTIONS_PER_SOURCE.min(max_connections));
        if !(1..=max_connections).contains(&max_connections_per_source) {
            return Err(invalid(
                "max_connections_per_source",
                format!(
                    "{max_connections_per_source} is not between 1 and max_connections \
                     ({max_connections})"
                ),
            ));
        }
        let mut listeners: Vec<ListenerConfig> = Vec::new();
        for (i, l) in raw.listener.into_iter().enumerate() {
            let lc = listener(i, l, startup_timeout)?;
            if listeners.iter().any(|o| o.bind == lc.bind) {
                return Err(invalid(
                    &format!("listener[{i}].bind"),
                    format!("{} is already bound by another listener", lc.bind),
                ));
            }
            listeners.push(lc);
        }
        Ok(Config {
            datapath_socket,
            startup_timeout,
            max_connections,
            max_connections_per_source,
            listeners,
            metrics: raw.metrics,
        })
    }
}

fn listener(
    i: usize,
    l: RawListener,
    startup_timeout: Duration,
) -> Result<ListenerConfig, ConfigError> {
    let bind: SocketAddr = l.bind.parse().map_err(|e| ConfigError::Invalid {
        key: format!("listener[{i}].bind"),
        message: format!("{:?} is not ADDR:PORT ({e})", l.bind),
    })?;
    let key = |k: &str| format!("listener[{i}] (bind {bind}).{k}");
    let invalid = |k: &str, message: String| ConfigError::Invalid {
        key: key(k),
        message,
    };
    if bind.port() == 0 {
        return Err(ConfigError::Invalid {
            key: format!("listener[{i}].bind"),
            message: format!("{bind}: port 0 is not a listening port"),
        });
    }
    let mut policy = StartupPolicy {
        startup_timeout,
        ..StartupPolicy::default()
    };
    match l.revision {
        None | Some(2) => {
            policy.revision = 2;
            policy.accept_rev2 = true;
        }
        Some(1) => {
            policy.revision = 1;
            policy.accept_rev2 = false;
        }
        Some(r) => {
            return Err(invalid(
                "revision",
                format!("{r}: the highest revision accepted is 1 or 2"),
            ))
        }
    }
    if let Some(m) = l.markers_required {
        policy.markers_required = m;
    }
    if let Some(c) = l.crc_suppressed_by_admin {
        policy.crc_suppressed_by_admin = c;
    }
    if let Some(p) = l.permissive {
        policy.permissive = p;
    }
    for (k, v, field) in [
        ("ird", l.ird, &mut policy.ird),
        ("ord", l.ord, &mut policy.ord),
    ] {
        if let Some(v) = v {
            if v > IRD_ORD_MAX {
                return Err(invalid(
                    k,
                    format!("{v} exceeds the 14-bit maximum {IRD_ORD_MAX}"),
                ));
            }
            // An IRD is a promise to hold that many Read Requests: no more than the
            // datapath's queue (0x3FFF leaves IRD/ORD to the ULP and offers nothing).
            if k == "ird" && v > DATAPATH_MAX_IRD && v != IRD_ORD_MAX {
                return Err(invalid(
                    k,
                    format!(
                        "{v} exceeds the {DATAPATH_MAX_IRD} inbound RDMA Reads the datapath \
                         holds per connection"
                    ),
                ));
            }
            *field = v;
        }
    }
    if let Some(names) = l.rtr_support {
        let mut set = RtrSet::EMPTY;
        for n in &names {
            let t = match n.as_str() {
                "send" => RtrType::ZeroLengthSend,
                "write" => RtrType::ZeroLengthWrite,
                "read" => RtrType::ZeroLengthReadRequest,
                other => {
                    return Err(invalid(
                        "rtr_support",
                        format!("{other:?} is not one of \"send\", \"write\", \"read\""),
                    ))
                }
            };
            set = set.with(t);
        }
        policy.rtr_support = set;
    }
    let pd_max = if policy.accept_rev2 {
        MAX_PRIVATE_DATA - ENHANCED_LEN
    } else {
        MAX_PRIVATE_DATA
    };
    policy.private_data_rule = match (l.private_data_prefix, l.private_data_max_len) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "private_data_prefix",
                "and private_data_max_len are exclusive: give one rule".into(),
            ))
        }
        (Some(p), None) => {
            if p.len() > pd_max {
                return Err(invalid(
                    "private_data_prefix",
                    format!(
                        "{} octets: no private data can be longer than {pd_max}",
                        p.len()
                    ),
                ));
            }
            PrivateDataRule::RequirePrefix(p.into_bytes())
        }
        (None, Some(n)) => {
            if n > pd_max {
                return Err(invalid(
                    "private_data_max_len",
                    format!("{n} exceeds the {pd_max} octets a Request can carry"),
                ));
            }
            PrivateDataRule::MaxLen(n)
        }
        (None, None) => PrivateDataRule::AcceptAny,
    };
    if let Some(r) = l.reject_reason {
        if r.len() > pd_max {
            return Err(invalid(
                "reject_reason",
                format!("{} octets exceed the {pd_max} a Reply can carry", r.len()),
            ));
        }
        policy.reject_reason = r.into_bytes();
    }
    let advertise_region = l.advertise_region.unwrap_or(false);
    if advertise_region && l.pd.is_none() {
        return Err(invalid(
            "advertise_region",
            "needs `pd`: the region advertised is one of that protection domain".into(),
        ));
    }
    if l.advertise_recv_size.is_some() && !advertise_region {
        return Err(invalid(
            "advertise_recv_size",
            "needs advertise_region = true".into(),
        ));
    }
    let reply_private_data = l.reply_private_data.unwrap_or_default().into_bytes();
    let ad_len = if advertise_region {
        mpa_ctl_proto::region_ad::LEN
    } else {
        0
    };
    if reply_private_data.len() + ad_len > pd_max {
        return Err(invalid(
            "reply_private_data",
            format!(
                "{} octets{} exceed the {pd_max} a Reply can carry",
                reply_private_data.len(),
                if ad_len > 0 {
                    " and the region advertisement"
                } else {
                    ""
                }
            ),
        ));
    }
    policy.validate().map_err(|e| ConfigError::Invalid {
        key: format!("listener[{i}] (bind {bind})"),
        message: format!("policy: {e}"),
    })?;
    Ok(ListenerConfig {
        bind,
        policy,
        reply_private_data,
        pd: l.pd,
        advertise_region,
        advertise_recv_size: l.advertise_recv_size.unwrap_or(0),
        aligned_sender: l.aligned_sender.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Config::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn sample_config_installed_under_etc_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/config/control.toml");
        let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.datapath_socket, Path::new("/run/mpa-xdp/eth0.sock"));
        assert_eq!(c.metrics, Some("127.0.0.1:9465".parse().unwrap()));
        assert_eq!(c.listeners.len(), 1);
    }

    #[test]
    fn full_config_maps_onto_the_policy() {
        let c = Config::parse(
            r#"
            datapath_socket = "/tmp/dp.sock"
            startup_timeout_ms = 2500
            max_connections = 7

            [[listener]]
            bind = "10.0.0.2:7777"
            revision = 1
            markers_required = true
            crc_suppressed_by_admin = true
            permissive = true
            ird = 4
            ord = 0
            rtr_support = ["write"]
            private_data_prefix = "iser"
            reject_reason = "go away"
            reply_private_data = "hello"
            pd = 3
            advertise_region = true
            advertise_recv_size = 4096
            aligned_sender = true

            [[listener]]
            bind = "[fd00::2]:7778"
            private_data_max_len = 16
            "#,
        )
        .unwrap();
        assert_eq!(c.datapath_socket, PathBuf::from("/tmp/dp.sock"));
        assert_eq!(c.startup_timeout, Duration::from_millis(2500));
        assert_eq!(c.max_connections, 7);
        assert_eq!(c.listeners.len(), 2);
        let l = &c.listeners[0];
        assert_eq!(l.bind, "10.0.0.2:7777".parse().unwrap());
        let p = &l.policy;
        assert_eq!((p.revision, p.accept_rev2), (1, false));
        assert!(p.markers_required && p.crc_suppressed_by_admin && p.permissive);
        assert_eq!((p.ird, p.ord), (4, 0));
        assert_eq!(p.rtr_support, RtrSet::single(RtrType::ZeroLengthWrite));
        assert_eq!(
            p.private_data_rule,
            PrivateDataRule::RequirePrefix(b"iser".to_vec())
        );
        assert_eq!(p.reject_reason, b"go away");
        assert_eq!(p.startup_timeout, Duration::from_millis(2500));
        assert_eq!(l.reply_private_data, b"hello");
        assert_eq!(l.pd, Some(3));
        assert!(l.advertise_region && l.aligned_sender);
        assert_eq!(l.advertise_recv_size, 4096);
        let l = &c.listeners[1];
        assert_eq!(l.pd, None);
        assert!(!l.advertise_region && !l.aligned_sender);
        assert_eq!(l.bind, "[fd00::2]:7778".parse().unwrap());
        assert_eq!(l.policy.private_data_rule, PrivateDataRule::MaxLen(16));
        assert!(l.policy.accept_rev2);
        assert_eq!(l.policy.rtr_support, RtrSet::ALL);
    }

    #[test]
    fn defaults() {
        let c = Config::parse("[[listener]]\nbind = \"127.0.0.1:9\"\n").unwrap();
        assert_eq!(c.datapath_socket, PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(
            c.startup_timeout,
            Duration::from_millis(DEFAULT_STARTUP_TIMEOUT_MS)
        );
        assert_eq!(c.max_connections, DEFAULT_MAX_CONNECTIONS);
        let l = &c.listeners[0];
        assert_eq!(l.policy.private_data_rule, PrivateDataRule::AcceptAny);
        assert!(l.reply_private_data.is_empty());
        assert!(l.policy.validate().is_ok());
    }

    #[test]
    fn bad_files_name_their_key() {
        const L: &str = "[[listener]]\nbind = \"10.0.0.2:7777\"\n";
        let cases: Vec<(String, &[&str])> = vec![
            // Syntax, unknown keys and types: toml's message shows the key's line.
            (
                "max_connections = ".into(),
                &["TOML parse error", "max_connections"],
            ),
            (
                format!("max_conections = 3\n{L}"),
                &["unknown field `max_conections`", "max_connections"],
            ),
            (
                format!("{L}markers = true\n"),
                &["unknown field `markers`", "markers_required"],
            ),
            (
                format!("{L}ird = \"lots\"\n"),
                &["ird = \"lots\"", "invalid type"],
            ),
            (format!("{L}ord = -1\n"), &["ord = -1"]),
            (
                format!("{L}advertise_region = true\n"),
                &["advertise_region", "needs `pd`"],
            ),
            (
                format!("{L}pd = 1\nadvertise_recv_size = 64\n"),
                &["advertise_recv_size", "needs advertise_region = true"],
            ),
            (
                format!(
                    "{L}pd = 1\nadvertise_region = true\nreply_private_data = \"{}\"\n",
                    "x".repeat(480)
                ),
                &["reply_private_data", "and the region advertisement exceed"],
            ),
            (
                "[[listener]]\nrevision = 2\n".into(),
                &["missing field `bind`"],
            ),
            // Top-level values.
            (
                format!("startup_timeout_ms = 0\n{L}"),
                &["startup_timeout_ms: 0 is not between 1 and 600000"],
            ),
            (
                format!("max_connections = 0\n{L}"),
                &["max_connections: must be at least 1"],
            ),
            (
                format!("datapath_socket = \"\"\n{L}"),
                &["datapath_socket: must not be empty"],
            ),
            (
                "[[listener]]\nbind = \"10.0.0.2\"\n".into(),
                &["listener[0].bind: \"10.0.0.2\" is not ADDR:PORT"],
            ),
            (
                "[[listener]]\nbind = \"10.0.0.2:0\"\n".into(),
                &["listener[0].bind: 10.0.0.2:0: port 0"],
            ),
            (
                "[[listener]]\nbind = \"10.0.0.2:1\"\n[[listener]]\nbind = \"10.0.0.2:1\"\n".into(),
                &["listener[1].bind: 10.0.0.2:1 is already bound"],
            ),
        ];
        let listener_cases: Vec<(String, &[&str])> = vec![
            (
                "revision = 3".into(),
                &[".revision: 3: the highest revision"],
            ),
            (
                "ird = 16384".into(),
                &[".ird: 16384 exceeds the 14-bit maximum"],
            ),
            (
                "ird = 33".into(),
                &[".ird: 33 exceeds the 32 inbound RDMA Reads the datapath holds"],
            ),
            ("ord = 20000".into(), &[".ord: 20000 exceeds"]),
            (
                "rtr_support = [\"send\", \"recv\"]".into(),
                &[".rtr_support: \"recv\" is not one of"],
            ),
            (
                "private_data_prefix = \"a\"\nprivate_data_max_len = 3".into(),
                &[".private_data_prefix: and private_data_max_len are exclusive"],
            ),
            (
                "private_data_max_len = 600".into(),
                &[".private_data_max_len: 600 exceeds the 504"],
            ),
            (
                format!("private_data_prefix = \"{}\"", "p".repeat(505)),
                &[".private_data_prefix: 505 octets"],
            ),
            (
                format!("reject_reason = \"{}\"", "r".repeat(505)),
                &[".reject_reason: 505 octets exceed the 504"],
            ),
            (
                format!("revision = 1\nreply_private_data = \"{}\"", "x".repeat(513)),
                &[".reply_private_data: 513 octets exceed the 512"],
            ),
            // StartupPolicy::validate, reported with the bind address.
            (
                "rtr_support = []".into(),
                &[": policy: revision 2 needs at least one RTR type"],
            ),
            (
                "ird = 0\nrtr_support = [\"read\"]".into(),
                &[": policy: revision 2 needs at least one RTR type"],
            ),
        ];
        for (text, wants) in cases {
            let e = err(&text);
            for w in wants {
                assert!(e.contains(w), "config:\n{text}\nerror: {e}\nmissing: {w}");
            }
        }
        for (text, wants) in listener_cases {
            let text = format!("{L}{text}\n");
            let e = err(&text);
            // Found after parsing: the listener and its address come first.
            assert!(e.starts_with("listener[0] (bind 10.0.0.2:7777)"), "{e}");
            for w in wants {
                assert!(e.contains(w), "config:\n{text}\nerror: {e}\nmissing: {w}");
            }
        }
    }

    #[test]
    fn unreadable_file_names_the_path() {
        let e = Config::load(Path::new("/nonexistent/mpa.toml")).unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/mpa.toml: "), "{e}");
    }
}
