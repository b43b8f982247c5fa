//! RTR indications by name: the control protocol is JSON read by people as well.

use mpa::startup::RtrType;
use serde::{de::Error, Deserialize, Deserializer, Serializer};

fn name(t: RtrType) -> &'static str {
    match t {
        RtrType::ZeroLengthSend => "ZeroLengthSend",
        RtrType::ZeroLengthWrite => "ZeroLengthWrite",
        RtrType::ZeroLengthReadRequest => "ZeroLengthReadRequest",
    }
}

pub fn serialize<S: Serializer>(v: &[RtrType], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|t| name(*t)))
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<RtrType>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    names
        .iter()
        .map(|n| {
            RtrType::ALL
                .into_iter()
                .find(|t| name(*t).eq_ignore_ascii_case(n.trim()))
                .ok_or_else(|| D::Error::custom(format!("unknown RTR indication {n:?}")))
        })
        .collect()
}
