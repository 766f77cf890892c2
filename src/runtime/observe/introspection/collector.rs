//! The informers' figures as Prometheus metrics ([`InformerCollector`]).

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::*;
use crate::runtime::informer::InformerStats;
/// A metric's name, help and how to read it from an informer's figures.
type Figure<T> = (&'static str, &'static str, fn(&InformerStats) -> T);

/// The informers' figures as Prometheus metrics: `informer_objects`, `informer_synced`,
/// `informer_events_total{type}`, `informer_relists_total`, `informer_watch_restarts_total`,
/// `informer_gone_total`, each labelled with `informer`; and, with leader election,
/// `leader_election_master_status{name}` (1 while this replica leads).
#[derive(Clone)]
pub struct InformerCollector {
    pub(super) registered: Arc<Registered>,
}

impl std::fmt::Debug for InformerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InformerCollector")
    }
}

impl Collector for InformerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats: Vec<(String, InformerStats)> =
            self.registered.informers.read().iter().map(|(name, i)| (name.clone(), i.stats())).collect();
        let gauges: [Figure<i64>; 2] = [
            ("informer_objects", "Objects in the informer's cache", |s| s.objects as i64),
            ("informer_synced", "Whether the informer applied its first list (1) or not (0)", |s| {
                i64::from(s.synced)
            }),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(0i64);
            let mut metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            for (informer, s) in &stats {
                ConstGauge::new(value(s))
                    .encode(metric.encode_family(&[("informer", informer.as_str())])?)?;
            }
        }
        let counters: [Figure<u64>; 3] = [
            ("informer_relists", "Full lists the informer started, the first included", |s| s.relists),
            ("informer_watch_restarts", "Watches resumed after the previous one ended", |s| s.watch_restarts),
            ("informer_gone", "410 Gone answers that forced a relist", |s| s.gone),
        ];
        for (name, help, value) in counters {
            let counter = ConstCounter::new(0u64);
            let mut metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            for (informer, s) in &stats {
                ConstCounter::new(value(s))
                    .encode(metric.encode_family(&[("informer", informer.as_str())])?)?;
            }
        }
        let counter = ConstCounter::new(0u64);
        let mut metric = encoder.encode_descriptor(
            "informer_events",
            "Changes the informer applied to its cache, by type",
            None,
            counter.metric_type(),
        )?;
        for (informer, s) in &stats {
            for (kind, value) in [("added", s.added), ("updated", s.updated), ("deleted", s.deleted)] {
                let labels = [("informer", informer.as_str()), ("type", kind)];
                ConstCounter::new(value).encode(metric.encode_family(&labels)?)?;
            }
        }
        if let Some((name, leading)) = self.registered.leading.read().as_ref() {
            let gauge = ConstGauge::new(i64::from(*leading.borrow()));
            let mut metric = encoder.encode_descriptor(
                "leader_election_master_status",
                "Whether this replica leads (1) or not (0), per lease",
                None,
                gauge.metric_type(),
            )?;
            gauge.encode(metric.encode_family(&[("name", name.as_str())])?)?;
        }
        Ok(())
    }
}
