//! The process's Prometheus metrics: what the ledger, the worker and `serve` count as they go, and
//! the ledger figures a refresher sets (`worker --metrics-addr` and `serve --metrics-addr` serve
//! them, see `crate::health`).
//!
//! One registry per process, as a Prometheus client keeps it: counting is an atomic add, so the
//! ledger, the worker and the HTTP API record from anywhere without a handle passed through every
//! call. Only an endpoint started with `--metrics-addr` ever encodes it, in the exposition format
//! the scraper's `Accept` header asks for; elsewhere the counts are simply never read.

#[cfg(target_os = "linux")]
mod process;

use crate::domain::State;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, prometheus_text, text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Metric, Registry};
use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

/// Labels as name and value pairs.
type Labels = Vec<(&'static str, String)>;

/// The commit this binary was built from, as `--version` names it (`abc1234`, `abc1234-dirty`,
/// or `unknown` where the build had no git checkout and no packaged record).
fn build_commit() -> &'static str {
    env!("ACTIONLEDGER_BUILD").split(' ').next().unwrap_or("unknown")
}

/// Every metric this process keeps.
struct Metrics {
    registry: Registry,
    actions: Family<Labels, Gauge>,
    stale_claims: Gauge,
    oldest_age: Family<Labels, Gauge<f64, AtomicU64>>,
    oldest_pending: Family<Labels, Gauge>,
    /// The destinations `oldest_pending` has shown, so that a queue that empties reads 0 rather
    /// than keeping its last figure.
    queues_shown: Mutex<BTreeSet<String>>,
    stats_refreshed: Gauge<f64, AtomicU64>,
    ready: Gauge,
    connections: Family<Labels, Gauge>,
    connections_max: Gauge,
    attempts: Family<Labels, Counter>,
    request_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    sends: Family<Labels, Histogram, fn() -> Histogram>,
    settled_by_lookup: Counter,
    fenced_writes: Counter,
    claims: Counter,
    lease_renewals: Counter,
    http_requests: Family<Labels, Counter>,
    http_request_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    http_refusals: Family<Labels, Counter>,
}

/// A metric of any kind, so that every metric is registered from one table of names and help
/// texts (the registry boxes each metric it is given; this box only forwards to the one inside).
#[derive(Debug)]
struct AnyMetric(Box<dyn Metric>);

impl EncodeMetric for AnyMetric {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Which send of its action each request was: 1 to 20, for a loop that sends one action again
/// and again to stand out from many actions sent once.
fn sends_histogram() -> Histogram {
    Histogram::new([1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0])
}

/// Request latency buckets: 5 ms to about 20 s, doubling.
fn request_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 13))
}

/// Latency buckets of the HTTP API's answers: 1 ms (a probe, a refusal) to about 33 s, past the
/// default request timeout of 30 s, doubling.
fn http_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::default();
    #[cfg(target_os = "linux")]
    registry.register_collector(Box::new(process::ProcessCollector));
    let ours = registry.sub_registry_with_prefix("actionledger");
    let metrics = Metrics {
        registry: Registry::default(),
        actions: Family::default(),
        stale_claims: Gauge::default(),
        oldest_age: Family::default(),
        oldest_pending: Family::default(),
        queues_shown: Mutex::default(),
        stats_refreshed: Gauge::default(),
        ready: Gauge::default(),
        connections: Family::default(),
        connections_max: Gauge::default(),
        attempts: Family::default(),
        request_seconds: Family::new_with_constructor(request_histogram),
        sends: Family::new_with_constructor(sends_histogram),
        settled_by_lookup: Counter::default(),
        fenced_writes: Counter::default(),
        claims: Counter::default(),
        lease_renewals: Counter::default(),
        http_requests: Family::default(),
        http_request_seconds: Family::new_with_constructor(http_histogram),
        http_refusals: Family::default(),
    };
    let build = Info::new(vec![("version", env!("CARGO_PKG_VERSION")), ("commit", build_commit())]);
    let described: [(&str, &str, Box<dyn Metric>); 19] = [
        ("actions", "Actions in each state, as of the last refresh", Box::new(metrics.actions.clone())),
        (
            "stale_claims",
            "Claims whose lease expired without a result, as of the last refresh",
            Box::new(metrics.stale_claims.clone()),
        ),
        (
            "oldest_action_age_seconds",
            "Seconds since the least recently changed action in each state last changed: pending (how long the \
             queue's oldest work has waited) and the uncertain states (unknown, held, conflict); 0 when there is \
             none",
            Box::new(metrics.oldest_age.clone()),
        ),
        (
            "oldest_pending_seconds",
            "Seconds the longest-waiting action a worker may claim has been claimable, by destination (the \
             queue's latency: pending, its backoff over, nothing before it unfinished); 0 when there is none",
            Box::new(metrics.oldest_pending.clone()),
        ),
        (
            "stats_refreshed_timestamp_seconds",
            "When the ledger figures were last read (Unix time, database clock)",
            Box::new(metrics.stats_refreshed.clone()),
        ),
        (
            "ready",
            "1 when the database answered and its schema was current at the last refresh, else 0 (as /readyz)",
            Box::new(metrics.ready.clone()),
        ),
        (
            "database_connections",
            "Connections this process's pool holds open to the ledger's database, by state: in_use or idle",
            Box::new(metrics.connections.clone()),
        ),
        (
            "database_connections_max",
            "The most connections this process's pool opens to the ledger's database",
            Box::new(metrics.connections_max.clone()),
        ),
        ("attempts", "Requests sent to destinations, by destination and outcome", Box::new(metrics.attempts.clone())),
        (
            "request_duration_seconds",
            "Time from sending a request to a destination until its outcome is known",
            Box::new(metrics.request_seconds.clone()),
        ),
        (
            "sends_per_action",
            "Which send of its action each request to a destination was (1 for the first): sends that climb past \
             the destinations' max_attempts show an action sent again and again",
            Box::new(metrics.sends.clone()),
        ),
        (
            "settled_by_lookup",
            "Unknown actions settled by a lookup at the destination",
            Box::new(metrics.settled_by_lookup.clone()),
        ),
        (
            "fenced_writes",
            "Writes refused because the claim's ownership version had moved on",
            Box::new(metrics.fenced_writes.clone()),
        ),
        ("claims", "Actions claimed, including expired claims taken over", Box::new(metrics.claims.clone())),
        ("lease_renewals", "Leases renewed by a heartbeat", Box::new(metrics.lease_renewals.clone())),
        (
            "http_requests",
            "Requests the HTTP API (serve) answered, by method, route (its template, such as /v1/actions/{key}; \
             unmatched for a path no route has) and status",
            Box::new(metrics.http_requests.clone()),
        ),
        (
            "http_request_duration_seconds",
            "Time the HTTP API (serve) took to answer a request, by method and route",
            Box::new(metrics.http_request_seconds.clone()),
        ),
        (
            "http_refusals",
            "Requests the HTTP API (serve) refused before asking the ledger, by reason: no_token, unknown_token, \
             role, rate, too_large, signature",
            Box::new(metrics.http_refusals.clone()),
        ),
        ("build", "The version of this build, as labels; always 1", Box::new(build)),
    ];
    for (name, help, metric) in described {
        ours.register(name, help, AnyMetric(metric));
    }
    Metrics { registry, ..metrics }
});

/// Counts actions claimed.
pub fn claimed(count: usize) {
    METRICS.claims.inc_by(u64::try_from(count).unwrap_or(u64::MAX));
}

/// Counts a renewed lease.
pub fn lease_renewed() {
    METRICS.lease_renewals.inc();
}

/// Counts a write refused because the ownership version moved on (rule 8).
pub fn fenced_write() {
    METRICS.fenced_writes.inc();
}

/// Counts an unknown action settled by a lookup.
pub fn settled_by_lookup() {
    METRICS.settled_by_lookup.inc();
}

/// Counts one request to `destination` and how long it took, by the outcome it was recorded as
/// (`completed`, `retry`, `failed`, `unknown`).
pub fn attempt(destination: &str, outcome: &'static str, took: Duration) {
    let name = destination.to_owned();
    METRICS.attempts.get_or_create(&vec![("destination", name.clone()), ("outcome", outcome.to_owned())]).inc();
    METRICS.request_seconds.get_or_create(&vec![("destination", name)]).observe(took.as_secs_f64());
}

/// Counts one send of an action to `destination`, the `number`-th of that action.
pub fn sent(destination: &str, number: i64) {
    #[allow(clippy::cast_precision_loss)] // send counts stay far below 2^52
    let number = number as f64;
    METRICS.sends.get_or_create(&vec![("destination", destination.to_owned())]).observe(number);
}

/// Counts one answer of the HTTP API and how long it took. `route` is the route's template, never
/// the path a client sent, so that the series stay as few as the routes.
pub fn http_request(method: &'static str, route: &str, status: u16, took: Duration) {
    let route = route.to_owned();
    METRICS
        .http_requests
        .get_or_create(&vec![("method", method.to_owned()), ("route", route.clone()), ("status", status.to_string())])
        .inc();
    METRICS
        .http_request_seconds
        .get_or_create(&vec![("method", method.to_owned()), ("route", route)])
        .observe(took.as_secs_f64());
}

/// Counts one request the HTTP API refused before asking the ledger, by its reason.
pub fn http_refused(reason: &'static str) {
    METRICS.http_refusals.get_or_create(&vec![("reason", reason.to_owned())]).inc();
}

/// The ledger figures the gauges show, from one reading (see `crate::ledger::LedgerStats`).
#[derive(Debug, Clone, Default)]
pub struct LedgerGauges {
    /// Every state with its count.
    pub actions: Vec<(State, i64)>,
    pub stale_claims: i64,
    /// Seconds the oldest action of each state shown (pending and the uncertain ones) has waited;
    /// `None` when there is none.
    pub oldest_age_seconds: Vec<(State, Option<i64>)>,
    /// When the figures were read, in milliseconds since 1970 by the database's clock.
    pub read_at_ms: i64,
}

/// Sets the ledger gauges.
pub fn set_ledger_gauges(gauges: &LedgerGauges) {
    for (state, count) in &gauges.actions {
        METRICS.actions.get_or_create(&vec![("state", state.as_str().to_owned())]).set(*count);
    }
    METRICS.stale_claims.set(gauges.stale_claims);
    for (state, age) in &gauges.oldest_age_seconds {
        #[allow(clippy::cast_precision_loss)] // ages in seconds stay far below 2^52
        let seconds = age.unwrap_or(0) as f64;
        METRICS.oldest_age.get_or_create(&vec![("state", state.as_str().to_owned())]).set(seconds);
    }
    #[allow(clippy::cast_precision_loss)] // milliseconds since 1970 stay far below 2^52
    let at = gauges.read_at_ms as f64 / 1000.0;
    METRICS.stats_refreshed.set(at);
}

/// Sets how long each destination's longest-waiting claimable action has waited (`""`: actions
/// without a destination); a destination shown before and missing now reads 0.
pub fn set_queue_waits(waits: &[(String, i64)]) {
    let mut shown = METRICS.queues_shown.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for destination in shown.iter() {
        if !waits.iter().any(|(waiting, _)| waiting == destination) {
            METRICS.oldest_pending.get_or_create(&vec![("destination", destination.clone())]).set(0);
        }
    }
    for (destination, seconds) in waits {
        METRICS.oldest_pending.get_or_create(&vec![("destination", destination.clone())]).set(*seconds);
        shown.insert(destination.clone());
    }
}

/// Sets the connection pool's figures: `open` connections, `idle` of them, at most `max`.
pub fn set_connections(open: u32, idle: u32, max: u32) {
    for (state, count) in [("in_use", open.saturating_sub(idle)), ("idle", idle)] {
        METRICS.connections.get_or_create(&vec![("state", state.to_owned())]).set(i64::from(count));
    }
    METRICS.connections_max.set(i64::from(max));
}

/// Sets whether the ledger was ready at the last refresh.
pub fn set_ready(ready: bool) {
    METRICS.ready.set(i64::from(ready));
}

/// The two exposition formats `/metrics` answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposition {
    /// Prometheus's text format 0.0.4: what any scraper reads, and the answer when the client
    /// names neither format.
    PrometheusText,
    /// OpenMetrics 1.0.0, which Prometheus asks for first.
    OpenMetrics,
}

impl Exposition {
    /// The format an `Accept` header asks for, negotiated as Prometheus's own client libraries do:
    /// of the media ranges that name one of the two formats (at a version it has), the one with
    /// the highest `q`, the first listed among equals; text 0.0.4 when none does (no header,
    /// `*/*`, a version not served).
    pub fn negotiate(accept: Option<&str>) -> Self {
        let mut chosen: Option<(f32, Self)> = None;
        for range in accept.unwrap_or_default().split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media_type = parts.next().unwrap_or_default().to_ascii_lowercase();
            let (mut version, mut quality) = (None, 1.0_f32);
            for parameter in parts {
                let Some((name, value)) = parameter.split_once('=') else { continue };
                let value = value.trim().trim_matches('"');
                match name.trim().to_ascii_lowercase().as_str() {
                    "version" => version = Some(value.to_owned()),
                    "q" => quality = value.parse().unwrap_or(0.0),
                    _ => {}
                }
            }
            let format = match (media_type.as_str(), version.as_deref()) {
                ("application/openmetrics-text", None | Some("1.0.0" | "0.0.1")) => Self::OpenMetrics,
                ("text/plain", None | Some("0.0.4")) => Self::PrometheusText,
                _ => continue,
            };
            if quality > 0.0 && chosen.is_none_or(|(best, _)| quality > best) {
                chosen = Some((quality, format));
            }
        }
        chosen.map_or(Self::PrometheusText, |(_, format)| format)
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::PrometheusText => prometheus_text::CONTENT_TYPE,
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// Every metric in this format.
    pub fn encode(self) -> String {
        let mut encoded = String::new();
        let written = match self {
            Self::PrometheusText => prometheus_text::encode(&mut encoded, &METRICS.registry),
            Self::OpenMetrics => text::encode(&mut encoded, &METRICS.registry),
        };
        written.expect("writing to a String cannot fail");
        encoded
    }
}

/// Every metric in Prometheus's text format 0.0.4.
pub fn encode_text() -> String {
    Exposition::PrometheusText.encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_figures_appear_in_both_formats_each_by_its_own_rules() {
        attempt("crm-test-metrics", "completed", Duration::from_millis(20));
        attempt("crm-test-metrics", "completed", Duration::from_millis(30));
        for exposition in [Exposition::PrometheusText, Exposition::OpenMetrics] {
            let text = exposition.encode();
            let series = r#"actionledger_attempts_total{destination="crm-test-metrics",outcome="completed"} 2"#;
            assert!(text.contains(series), "{text}");
            assert!(text.contains(r#"actionledger_request_duration_seconds_count{destination="crm-test-metrics"} 2"#));
        }
        // Text 0.0.4 names a counter's family with its `_total`, and has no end marker.
        let text = Exposition::PrometheusText.encode();
        assert!(text.contains("# TYPE actionledger_fenced_writes_total counter\n"), "{text}");
        assert!(text.contains("# HELP actionledger_fenced_writes_total "), "{text}");
        assert!(!text.contains("# EOF") && !text.contains("_created"), "{text}");
        assert!(text.contains("# TYPE actionledger_build_info gauge\n"), "{text}");
        let openmetrics = Exposition::OpenMetrics.encode();
        assert!(openmetrics.contains("# TYPE actionledger_fenced_writes counter\n"), "{openmetrics}");
        assert!(openmetrics.contains("# TYPE actionledger_build info\n"), "{openmetrics}");
        assert!(openmetrics.ends_with("# EOF\n"));
    }

    #[test]
    fn the_build_is_one_series_labelled_with_its_version_and_commit() {
        let text = encode_text();
        let series = format!(
            "actionledger_build_info{{version=\"{}\",commit=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION"),
            super::build_commit()
        );
        assert!(text.contains(&series), "{text}");
        assert!(!super::build_commit().is_empty() && !super::build_commit().contains(' '));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_figures_are_unprefixed_as_every_client_names_them() {
        let text = encode_text();
        for family in [
            "process_cpu_seconds_total counter",
            "process_resident_memory_bytes gauge",
            "process_virtual_memory_bytes gauge",
            "process_open_fds gauge",
            "process_max_fds gauge",
            "process_start_time_seconds gauge",
        ] {
            assert!(text.contains(&format!("# TYPE {family}\n")), "{family}: {text}");
        }
        assert!(!text.contains("actionledger_process"), "{text}");
    }

    #[test]
    fn the_format_follows_accept_as_prometheus_asks() {
        use Exposition::{OpenMetrics, PrometheusText};
        let prometheus_2 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,\
                            text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let prometheus_3 = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,\
                            application/openmetrics-text;version=0.0.1;q=0.4,\
                            text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";
        for (accept, wanted) in [
            (None, PrometheusText),
            (Some("*/*"), PrometheusText),
            (Some("text/plain"), PrometheusText),
            (Some("text/plain; version=0.0.4"), PrometheusText),
            (Some(prometheus_2), OpenMetrics),
            (Some(prometheus_3), OpenMetrics),
            (Some("application/openmetrics-text"), OpenMetrics),
            (Some("Application/OpenMetrics-Text; Version=\"1.0.0\""), OpenMetrics),
            (Some("text/plain;version=0.0.4;q=0.9, application/openmetrics-text;q=0.5"), PrometheusText),
            (Some("text/plain;q=0.5, application/openmetrics-text;q=0.5"), PrometheusText),
            (Some("application/openmetrics-text;q=0"), PrometheusText),
            (Some("application/openmetrics-text;version=2.0.0"), PrometheusText),
            (Some("application/json"), PrometheusText),
        ] {
            assert_eq!(Exposition::negotiate(accept), wanted, "{accept:?}");
        }
        assert_eq!(PrometheusText.content_type(), "text/plain; version=0.0.4; charset=utf-8");
        assert!(OpenMetrics.content_type().starts_with("application/openmetrics-text; version=1.0.0"));
    }

    #[test]
    fn a_queue_that_empties_reads_zero() {
        let series = |text: &str, destination: &str| {
            let name = format!("actionledger_oldest_pending_seconds{{destination=\"{destination}\"}} ");
            text.lines().find_map(|line| line.strip_prefix(&name)).map(str::to_owned)
        };
        set_queue_waits(&[("queue-test-a".to_owned(), 120), ("queue-test-b".to_owned(), 5)]);
        let text = encode_text();
        assert_eq!(
            (series(&text, "queue-test-a").as_deref(), series(&text, "queue-test-b").as_deref()),
            (Some("120"), Some("5"))
        );
        set_queue_waits(&[("queue-test-b".to_owned(), 7)]);
        let text = encode_text();
        assert_eq!(
            (series(&text, "queue-test-a").as_deref(), series(&text, "queue-test-b").as_deref()),
            (Some("0"), Some("7"))
        );
    }
}
