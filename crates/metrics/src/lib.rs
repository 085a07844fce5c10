//! The daemons' Prometheus pages, written through `prometheus-client`'s encoder.
//!
//! Every cairn daemon (monitor, OSD, S3 gateway) serves its counters on a metrics port in the
//! Prometheus text exposition format 0.0.4. The format itself — escaping of help texts and label
//! values, the `_total` suffix of counters, cumulative histogram buckets, float formatting — is
//! `prometheus-client`'s job. This crate gives the daemons one small vocabulary over that
//! encoder ([`Families`]: a counter, a gauge, a family of either by label set, a histogram
//! family from bucket counts) and renders a page from one closure ([`render`]), so the daemons'
//! own code only says which numbers a page holds.
//!
//! Values are read when the page is scraped, from the counters the daemons keep anyway
//! (atomics, per-kind tables, snapshots): recording stays a short critical section and costs
//! nothing extra between scrapes.

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`), and this crate keeps them so.
#![deny(clippy::cast_possible_truncation)]

use std::collections::HashMap;
use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

pub use prometheus_client::encoding::DescriptorEncoder;

/// The HTTP `Content-Type` of a page: Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// What writing a family returns: the encoder fails only when its writer does.
pub type Written = Result<(), fmt::Error>;

/// The suffix every counter's exposed name carries (the encoder appends it).
const COUNTER_SUFFIX: &str = "_total";

/// One histogram's state as a page shows it.
#[derive(Debug, Clone, Copy)]
pub struct HistogramSample<'a> {
    /// Upper bounds of the finite buckets, ascending.
    pub bounds: &'a [f64],
    /// Observations per finite bucket (not cumulative), one per bound.
    pub counts: &'a [u64],
    /// Observations in all, those above the last bound included.
    pub count: u64,
    /// Sum of the observed values.
    pub sum: f64,
}

/// The families a page is made of, written on `prometheus-client`'s [`DescriptorEncoder`].
///
/// Names are the exposed ones, in full: a counter's ends in `_total` (checked), so a name in
/// the code is the name an operator greps for.
pub trait Families {
    /// One unlabelled counter.
    fn counter(&mut self, name: &str, help: &str, value: impl EncodeCounterValue) -> Written;

    /// One unlabelled gauge.
    fn gauge(&mut self, name: &str, help: &str, value: impl EncodeGaugeValue) -> Written;

    /// A counter family: one sample per label set.
    fn counters<L, V>(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (L, V)>,
    ) -> Written
    where
        L: EncodeLabelSet,
        V: EncodeCounterValue;

    /// A gauge family: one sample per label set.
    fn gauges<L, V>(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (L, V)>,
    ) -> Written
    where
        L: EncodeLabelSet,
        V: EncodeGaugeValue;

    /// A histogram family: one histogram per label set.
    fn histograms<'h, L>(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (L, HistogramSample<'h>)>,
    ) -> Written
    where
        L: EncodeLabelSet;
}

/// A counter's name as the encoder wants it: without the `_total` it appends.
fn counter_stem(name: &str) -> &str {
    assert!(
        name.ends_with(COUNTER_SUFFIX),
        "counter {name} must be named with its {COUNTER_SUFFIX} suffix"
    );
    &name[..name.len() - COUNTER_SUFFIX.len()]
}

fn write_counter(m: &mut MetricEncoder<'_>, value: &impl EncodeCounterValue) -> Written {
    m.encode_counter::<NoLabelSet, _, u64>(value, None)
}

impl Families for DescriptorEncoder<'_> {
    fn counter(&mut self, name: &str, help: &str, value: impl EncodeCounterValue) -> Written {
        let mut m = self.encode_descriptor(counter_stem(name), help, None, MetricType::Counter)?;
        write_counter(&mut m, &value)
    }

    fn gauge(&mut self, name: &str, help: &str, value: impl EncodeGaugeValue) -> Written {
        self.encode_descriptor(name, help, None, MetricType::Gauge)?
            .encode_gauge(&value)
    }

    fn counters<L, V>(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (L, V)>,
    ) -> Written
    where
        L: EncodeLabelSet,
        V: EncodeCounterValue,
    {
        let mut m = self.encode_descriptor(counter_stem(name), help, None, MetricType::Counter)?;
        for (labels, value) in rows {
            write_counter(&mut m.encode_family(&labels)?, &value)?;
        }
        Ok(())
    }

    fn gauges<L, V>(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (L, V)>,
    ) -> Written
    where
        L: EncodeLabelSet,
        V: EncodeGaugeValue,
    {
        let mut m = self.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, value) in rows {
            m.encode_family(&labels)?.encode_gauge(&value)?;
        }
        Ok(())
    }

    fn histograms<'h, L>(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (L, HistogramSample<'h>)>,
    ) -> Written
    where
        L: EncodeLabelSet,
    {
        let mut m = self.encode_descriptor(name, help, None, MetricType::Histogram)?;
        for (labels, h) in rows {
            assert_eq!(
                h.bounds.len(),
                h.counts.len(),
                "histogram {name}: one count per bucket bound"
            );
            let buckets: Vec<(f64, u64)> = h
                .bounds
                .iter()
                .copied()
                .zip(h.counts.iter().copied())
                .collect();
            m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                h.sum,
                h.count,
                &buckets,
                None::<&HashMap<usize, Exemplar<NoLabelSet, f64>>>,
            )?;
        }
        Ok(())
    }
}

/// A page's contents: a closure writing its families, read at every scrape.
struct Page<F>(F);

impl<F> fmt::Debug for Page<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Page")
    }
}

impl<F> Collector for Page<F>
where
    F: Fn(&mut DescriptorEncoder<'_>) -> Written + Send + Sync + 'static,
{
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Written {
        (self.0)(&mut encoder)
    }
}

/// Renders one page in the Prometheus text format: `write` puts its families on the encoder.
///
/// The encoder fails only when its writer does, and a `String` does not; a page that fails
/// anyway (a bug) ends with a comment saying it is incomplete instead of bringing a daemon
/// down in the middle of a scrape.
pub fn render<F>(write: F) -> String
where
    F: Fn(&mut DescriptorEncoder<'_>) -> Written + Send + Sync + 'static,
{
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Page(write)));
    let mut out = String::new();
    if prometheus_client::encoding::prometheus_text::encode(&mut out, &registry).is_err() {
        out.push_str("# page incomplete: the encoder failed\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_written_in_the_text_format() {
        let page = render(|e| {
            e.counter("demo_ops_total", "Operations.", 3u64)?;
            e.gauge("demo_queued", "Queued.", 7i64)?;
            e.counters(
                "demo_bytes_total",
                "Bytes by op.",
                [([("op", "read")], 10u64), ([("op", "write")], 20)],
            )?;
            e.gauges(
                "demo_ratio",
                "A ratio by pool.",
                [([("pool", "a\"b")], 0.5f64)],
            )?;
            e.histograms(
                "demo_seconds",
                "Latency.",
                [(
                    [("op", "read")],
                    HistogramSample {
                        bounds: &[0.001, 0.01],
                        counts: &[1, 2],
                        count: 4,
                        sum: 1.5,
                    },
                )],
            )
        });
        let has = |l: &str| page.lines().any(|x| x == l);
        assert!(has("# HELP demo_ops_total Operations."), "{page}");
        assert!(has("# TYPE demo_ops_total counter"), "{page}");
        assert!(has("demo_ops_total 3"), "{page}");
        assert!(has("# TYPE demo_queued gauge"), "{page}");
        assert!(has("demo_queued 7"), "{page}");
        assert!(has("demo_bytes_total{op=\"write\"} 20"), "{page}");
        assert!(has("demo_ratio{pool=\"a\\\"b\"} 0.5"), "{page}");
        assert!(
            has("demo_seconds_bucket{op=\"read\",le=\"0.001\"} 1"),
            "{page}"
        );
        assert!(
            has("demo_seconds_bucket{op=\"read\",le=\"0.01\"} 3"),
            "{page}"
        );
        assert!(
            has("demo_seconds_bucket{op=\"read\",le=\"+Inf\"} 4"),
            "{page}"
        );
        assert!(has("demo_seconds_sum{op=\"read\"} 1.5"), "{page}");
        assert!(has("demo_seconds_count{op=\"read\"} 4"), "{page}");
    }

    #[test]
    #[should_panic(expected = "_total suffix")]
    fn a_counter_named_without_its_suffix_is_a_bug() {
        render(|e| e.counter("demo_ops", "Operations.", 1u64));
    }
}
