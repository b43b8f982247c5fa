//! Metrics for Prometheus and other OpenMetrics scrapers (docs/operations.md, "Metrics"):
//! [`Endpoint`] answers `GET /metrics` with what a render function returns, encoded by the
//! `prometheus-client` crate, to several scrapers at once within bounds of time, size and
//! connections; [`datapath`] turns the datapath's statistics document into
//! metric families; [`Families`] is how a program writes its own.

pub mod datapath;
mod endpoint;

pub use endpoint::{
    Endpoint, EndpointStats, CONTENT_TYPE, MAX_CONNECTIONS, MAX_REQUEST, REQUEST_DEADLINE,
    WRITE_DEADLINE,
};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

/// One label set: names and values.
pub type Labels = Vec<(&'static str, String)>;

/// Writes metric families into one scrape.
pub struct Families<'a, 'b> {
    encoder: &'a mut DescriptorEncoder<'b>,
}

impl<'a, 'b> Families<'a, 'b> {
    /// Over the encoder a [`Collector`] is given.
    pub fn new(encoder: &'a mut DescriptorEncoder<'b>) -> Self {
        Families { encoder }
    }

    /// A counter family (the encoder adds `_total`, and the unit's suffix before it).
    pub fn counter<V: EncodeCounterValue>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        samples: impl IntoIterator<Item = (Labels, V)>,
    ) -> std::fmt::Result {
        let samples = samples.into_iter().map(|(l, v)| (l, ConstCounter::new(v)));
        self.family(name, help, unit, samples)
    }

    /// A gauge family.
    pub fn gauge<V: EncodeGaugeValue>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        samples: impl IntoIterator<Item = (Labels, V)>,
    ) -> std::fmt::Result {
        let samples = samples.into_iter().map(|(l, v)| (l, ConstGauge::new(v)));
        self.family(name, help, unit, samples)
    }

    fn family<M: EncodeMetric>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        samples: impl Iterator<Item = (Labels, M)>,
    ) -> std::fmt::Result {
        // A family with no sample is left out: it says nothing, and some parsers take the
        // next family's lines for its own.
        let mut samples = samples.peekable();
        let Some(kind) = samples.peek().map(|(_, m)| m.metric_type()) else {
            return Ok(());
        };
        let mut family = self
            .encoder
            .encode_descriptor(name, help, unit.as_ref(), kind)?;
        for (labels, m) in samples {
            m.encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// The OpenMetrics text of one collector (a registry made for the scrape: the collector
/// holds a snapshot, so every family in one scrape is from the same moment).
pub fn encode(collector: impl Collector) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collector));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

/// A label set of one label.
pub fn label(name: &'static str, value: impl ToString) -> Labels {
    vec![(name, value.to_string())]
}
