//! Destinations: generic HTTP/JSON systems that perform actions, with declared capabilities
//! (idempotency keys, lookup by external reference, fencing) that decide the recovery rules.

pub mod template;

use crate::config::{DestinationConfig, HeaderValue};
use crate::domain::record::MAX_EVIDENCE_BODY_BYTES;
use crate::domain::text::truncate;
use crate::domain::{ActionRecord, Capabilities, DestinationCatalog, Evidence, LookupReport, LookupVerdict};
use reqwest::header::{HeaderMap, HeaderName};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use template::{Context, TemplateError};

/// Why a destination could not be built, asked, or its answer used.
#[derive(Debug, thiserror::Error)]
pub enum DestinationError {
    #[error("destination {name}: cannot build the HTTP client: {source}")]
    Client { name: String, source: reqwest::Error },
    #[error("destination {name}: header {header} needs ${env}, which is not set")]
    MissingEnv { name: String, header: String, env: String },
    #[error("destination {name}: header {header} has a value that is not valid in HTTP")]
    HeaderValue { name: String, header: String },
    #[error("destination {name}: {header:?} is not a header name")]
    HeaderName { name: String, header: String },
    #[error("destination {name}: {method:?} is not an HTTP method")]
    Method { name: String, method: String },
    /// A URL, body or external reference template could not be filled for the action.
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error("destination {name} offers no lookup")]
    NoLookup { name: String },
    /// An update action for a destination that declares no `update` request.
    #[error("destination {name} declares no update request")]
    NoUpdate { name: String },
    /// The action's destination is not in the configuration this front end was given.
    #[error("no configuration for destination {name}: give --config FILE with its [destinations.NAME] block")]
    NotConfigured { name: String },
    /// The lookup request got no response.
    #[error("lookup failed: {}", describe(.0))]
    LookupFailed(#[source] reqwest::Error),
    /// The lookup's response ended before its body was read.
    #[error("lookup response lost: {}", describe(.0))]
    LookupResponseLost(#[source] reqwest::Error),
    #[error("lookup answered HTTP {status}")]
    LookupStatus { status: u16 },
    #[error("lookup answered with invalid JSON: {0}")]
    LookupJson(#[source] serde_json::Error),
    #[error("lookup response has no list at {pointer}")]
    LookupNoList { pointer: String },
}

/// The destinations a front end was configured with, and the one that actions submitted without
/// a destination go to. Which destination an action goes to, and what each declares, is the
/// catalogue's answer, the same one the ledger decides with.
#[derive(Debug, Clone, Default)]
pub struct Destinations {
    by_name: BTreeMap<String, Destination>,
    catalog: DestinationCatalog,
}

impl Destinations {
    pub fn new(by_name: BTreeMap<String, Destination>, default_destination: Option<String>) -> Self {
        let capabilities = by_name.iter().map(|(name, d)| (name.clone(), d.capabilities())).collect();
        Self { catalog: DestinationCatalog::new(capabilities, default_destination), by_name }
    }

    /// Builds every destination a configuration declares.
    pub fn from_config(config: &crate::config::Config) -> Result<Self, DestinationError> {
        let by_name = config
            .destinations
            .iter()
            .map(|(name, c)| Destination::new(name, c.clone()).map(|d| (name.clone(), d)))
            .collect::<Result<_, _>>()?;
        Ok(Self::new(by_name, config.worker.default_destination.clone()))
    }

    /// The destination an action goes to, if it is configured here.
    pub fn of(&self, action: &ActionRecord) -> Option<&Destination> {
        self.by_name.get(self.catalog.destination_name(action)?)
    }

    /// [`Destinations::of`], for a caller that cannot go on without it.
    pub fn require(&self, action: &ActionRecord) -> Result<&Destination, DestinationError> {
        self.of(action).ok_or_else(|| DestinationError::NotConfigured {
            name: self.catalog.destination_name(action).unwrap_or("(none)").to_owned(),
        })
    }

    pub fn get(&self, name: &str) -> Option<&Destination> {
        self.by_name.get(name)
    }

    pub fn all(&self) -> impl Iterator<Item = &Destination> {
        self.by_name.values()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    pub fn default_destination(&self) -> Option<&str> {
        self.catalog.default_destination()
    }

    /// The declared capabilities of each, for the ledger to decide with.
    pub fn catalog(&self) -> DestinationCatalog {
        self.catalog.clone()
    }
}

/// One configured destination, ready to send.
#[derive(Debug, Clone)]
pub struct Destination {
    pub name: String,
    pub config: DestinationConfig,
    client: reqwest::Client,
    headers: HeaderMap,
}

/// What one create request came to, classified for the recovery rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// The destination confirmed and named the record.
    Created { destination_id: String, response: Response },
    /// Nothing was written (connection refused, 408, 429, 503): retrying may help.
    BeforeWrite { error: String, response: Option<Response>, retry_after: Option<Duration> },
    /// Refused for good (validation, permission, an obsolete writer).
    Permanent { error: String, response: Response },
    /// The destination may or may not have acted (timeout or connection lost after sending, a 5xx other than 503,
    /// a 2xx without a record id).
    Uncertain { error: String, response: Option<Response> },
    /// The external reference already exists at the destination (409).
    AlreadyExists { response: Response },
}

/// A response kept as evidence: status and a truncated body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// Records found by a lookup.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub records: Vec<FoundRecord>,
    pub response: Response,
}

impl Found {
    /// The id of each record found, `?` where a record names none.
    pub fn ids(&self) -> Vec<String> {
        self.records.iter().map(|r| r.id.clone().unwrap_or_else(|| "?".to_owned())).collect()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct FoundRecord {
    pub id: Option<String>,
    pub record: Value,
}

impl Destination {
    /// Builds the HTTP client and reads credentials from the environment.
    pub fn new(name: &str, config: DestinationConfig) -> Result<Self, DestinationError> {
        // reqwest is built without a default TLS provider; installing one twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.connect_timeout)
            .user_agent(concat!("actionledger/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|source| DestinationError::Client { name: name.to_owned(), source })?;
        let mut headers = HeaderMap::new();
        for (header, value) in &config.headers {
            let text = match value {
                HeaderValue::Literal { value } => value.clone(),
                HeaderValue::Env { env, prefix } => {
                    let secret = std::env::var(env).map_err(|_| DestinationError::MissingEnv {
                        name: name.to_owned(),
                        header: header.clone(),
                        env: env.clone(),
                    })?;
                    format!("{prefix}{secret}")
                }
            };
            let mut value = reqwest::header::HeaderValue::from_str(&text)
                .map_err(|_| DestinationError::HeaderValue { name: name.to_owned(), header: header.clone() })?;
            value.set_sensitive(true);
            let header = HeaderName::from_bytes(header.as_bytes())
                .map_err(|_| DestinationError::HeaderName { name: name.to_owned(), header: header.clone() })?;
            headers.insert(header, value);
        }
        Ok(Self { name: name.to_owned(), config, client, headers })
    }

    /// What this destination declares against a second effect, for the ledger's decisions.
    pub fn capabilities(&self) -> Capabilities {
        Capabilities {
            idempotency_retention: self.config.idempotency.as_ref().map(|i| i.retention),
            lookup: self.config.lookup.is_some(),
        }
    }

    fn context<'a>(
        &'a self,
        action: &'a ActionRecord,
        after: Option<&'a ActionRecord>,
        external_ref: Option<&'a str>,
    ) -> Context<'a> {
        Context { action, external_ref, base_url: self.config.base_url.as_deref(), after }
    }

    /// The action's unique reference at this destination.
    pub fn external_ref(
        &self,
        action: &ActionRecord,
        after: Option<&ActionRecord>,
    ) -> Result<String, DestinationError> {
        // An update action refers to the record of the action it updates: `{{key}}` there is
        // that action's key.
        let updated = action.updates.as_ref().map(|key| ActionRecord { key: key.clone(), ..action.clone() });
        let target = updated.as_ref().unwrap_or(action);
        Ok(template::render_text(&self.config.external_ref, &self.context(target, after, None), false)?)
    }

    /// Whether this destination declares how to update a record.
    pub fn can_update(&self) -> bool {
        self.config.update.is_some()
    }

    /// The body the action's request sends: the create body, or the update body for an update
    /// action.
    pub fn body(&self, action: &ActionRecord, after: Option<&ActionRecord>) -> Result<Value, DestinationError> {
        let external_ref = self.external_ref(action, after)?;
        let context = self.context(action, after, Some(&external_ref));
        let template = match (&action.updates, &self.config.update) {
            (Some(_), Some(update)) => update.body.as_ref(),
            _ => self.config.create.body.as_ref(),
        };
        match template {
            Some(template) => Ok(template::render_body(template, &context)?),
            None => Ok(action.payload.value()),
        }
    }

    /// Sends the action's request: the create request, or for an update action the update
    /// request. It carries the action's idempotency key (the action key, or the key derived when
    /// an approval changed the payload after a send, rule 9) and its ownership version where the
    /// destination fences obsolete writers.
    /// The error is a request that could not be built, so nothing was sent.
    pub async fn send(
        &self,
        action: &ActionRecord,
        after: Option<&ActionRecord>,
    ) -> Result<SendOutcome, DestinationError> {
        let external_ref = self.external_ref(action, after)?;
        let context = self.context(action, after, Some(&external_ref));
        let (method, url) = match (&action.updates, &self.config.update) {
            (None, _) => (&self.config.create.method, &self.config.create.url),
            (Some(_), Some(update)) => (&update.method, &update.url),
            (Some(_), None) => return Err(DestinationError::NoUpdate { name: self.name.clone() }),
        };
        let url = template::render_text(url, &context, true)?;
        let body = self.body(action, after)?;
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|_| DestinationError::Method { name: self.name.clone(), method: method.clone() })?;
        let mut request = self
            .client
            .request(method, &url)
            .headers(self.headers.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(idempotency) = &self.config.idempotency {
            request = request.header(idempotency.header.as_str(), action.sending_key());
        }
        if let Some(fencing) = &self.config.fencing {
            request = request.header(fencing.header.as_str(), action.ownership_version.to_string());
        }
        crate::faults::crash_point(crate::faults::BEFORE_SEND);
        let sent = request.send().await;
        crate::faults::crash_point(crate::faults::AFTER_RESPONSE);
        Ok(match sent {
            Err(error) => classify_error(&error),
            Ok(response) => self.classify_response(response, action.updates_destination_id.as_deref()).await,
        })
    }

    /// `updated_id` is, for an update request, the id of the record it changes: the answer need
    /// not repeat it.
    async fn classify_response(&self, response: reqwest::Response, updated_id: Option<&str>) -> SendOutcome {
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let body = match response.text().await {
            Ok(body) => body,
            Err(e) if (200..300).contains(&status) => {
                return SendOutcome::Uncertain {
                    error: format!("HTTP {status}, then the response body was lost: {e}"),
                    response: Some(Response { status, body: String::new() }),
                };
            }
            Err(_) => String::new(),
        };
        let response = Response { status, body: truncate(&body, MAX_EVIDENCE_BODY_BYTES) };
        match status {
            200..=299 => {
                let id = serde_json::from_str::<Value>(&body)
                    .ok()
                    .and_then(|v| pointer_text(&v, &self.config.create.id_pointer))
                    .or_else(|| updated_id.map(str::to_owned));
                match id {
                    Some(destination_id) => SendOutcome::Created { destination_id, response },
                    None => SendOutcome::Uncertain {
                        error: format!("HTTP {status} without a record id at {}", self.config.create.id_pointer),
                        response: Some(response),
                    },
                }
            }
            409 => SendOutcome::AlreadyExists { response },
            408 | 429 | 503 => SendOutcome::BeforeWrite {
                error: format!("HTTP {status}: the destination did not accept the request"),
                response: Some(response),
                retry_after,
            },
            400..=499 => {
                SendOutcome::Permanent { error: format!("HTTP {status}: refused by the destination"), response }
            }
            _ => SendOutcome::Uncertain {
                error: format!("HTTP {status}: the destination may have acted before failing"),
                response: Some(response),
            },
        }
    }

    /// Finds the records the destination holds for this action's external reference.
    pub async fn lookup(&self, action: &ActionRecord, after: Option<&ActionRecord>) -> Result<Found, DestinationError> {
        let lookup =
            self.config.lookup.as_ref().ok_or_else(|| DestinationError::NoLookup { name: self.name.clone() })?;
        let external_ref = self.external_ref(action, after)?;
        let url = template::render_text(&lookup.url, &self.context(action, after, Some(&external_ref)), true)?;
        let response =
            self.client.get(&url).headers(self.headers.clone()).send().await.map_err(DestinationError::LookupFailed)?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(DestinationError::LookupResponseLost)?;
        let evidence = Response { status, body: truncate(&body, MAX_EVIDENCE_BODY_BYTES) };
        if status == 404 && lookup.records_pointer.is_none() {
            return Ok(Found { records: Vec::new(), response: evidence });
        }
        if !(200..300).contains(&status) {
            return Err(DestinationError::LookupStatus { status });
        }
        let value: Value = serde_json::from_str(&body).map_err(DestinationError::LookupJson)?;
        let records = match &lookup.records_pointer {
            Some(pointer) => value
                .pointer(pointer)
                .and_then(Value::as_array)
                .cloned()
                .ok_or_else(|| DestinationError::LookupNoList { pointer: pointer.clone() })?,
            None => vec![value],
        };
        let records = records
            .into_iter()
            .map(|record| FoundRecord { id: pointer_text(&record, &lookup.id_pointer), record })
            .collect();
        Ok(Found { records, response: evidence })
    }

    /// What a lookup's records mean for this action: one matching record is `found`, none is
    /// `not_found`, one that differs is a `mismatch`, several are `duplicates`.
    pub fn judge(
        &self,
        action: &ActionRecord,
        after: Option<&ActionRecord>,
        found: &Found,
    ) -> Result<LookupReport, DestinationError> {
        let sent = self.body(action, after)?;
        let records = i64::try_from(found.records.len()).unwrap_or(i64::MAX);
        if action.updates.is_some() {
            return Ok(self.judge_update(&sent, records, found));
        }
        let (verdict, destination_id, detail) = match found.records.as_slice() {
            [] => (LookupVerdict::NotFound, None, "the destination has no record for this action".to_owned()),
            [one] if self.matches(&sent, &one.record) => {
                (LookupVerdict::Found, one.id.clone(), format!("found record {}", one.id.as_deref().unwrap_or("?")))
            }
            [one] => (
                LookupVerdict::Mismatch,
                one.id.clone(),
                format!("record {} differs from what this action sends", one.id.as_deref().unwrap_or("?")),
            ),
            many => (
                LookupVerdict::Duplicates,
                None,
                format!("{} records share this external reference: {}", many.len(), found.ids().join(", ")),
            ),
        };
        let evidence = Evidence {
            status: Some(i64::from(found.response.status)),
            destination_id: destination_id.clone(),
            body: Some(found.response.body.clone()),
        };
        Ok(LookupReport { verdict, records, destination_id, evidence, detail: Some(detail) })
    }

    /// What a lookup means for an update action: the record it updates carrying what the update
    /// sends is `found` (applied); carrying something else, the update was not applied
    /// (`not_found`: nothing was written by it); no record at all is a `mismatch`, since the
    /// record to update is gone.
    fn judge_update(&self, sent: &Value, records: i64, found: &Found) -> LookupReport {
        let (verdict, destination_id, detail) = match found.records.as_slice() {
            [] => (LookupVerdict::Mismatch, None, "the record this update changes is missing".to_owned()),
            [one] if self.matches(sent, &one.record) => (
                LookupVerdict::Found,
                one.id.clone(),
                format!("record {} carries the update", one.id.as_deref().unwrap_or("?")),
            ),
            [one] => (
                LookupVerdict::NotFound,
                None,
                format!("record {} does not carry the update yet", one.id.as_deref().unwrap_or("?")),
            ),
            many => (LookupVerdict::Duplicates, None, format!("{} records share this external reference", many.len())),
        };
        let evidence = Evidence {
            status: Some(i64::from(found.response.status)),
            destination_id: destination_id.clone(),
            body: Some(found.response.body.clone()),
        };
        LookupReport { verdict, records, destination_id, evidence, detail: Some(detail) }
    }

    /// Whether a found record matches what this action sends, on the configured fields.
    pub fn matches(&self, sent: &Value, found: &Value) -> bool {
        self.config
            .lookup
            .as_ref()
            .is_none_or(|l| l.compare.iter().all(|pointer| sent.pointer(pointer) == found.pointer(pointer)))
    }
}

/// The record id a stored response body names at `pointer` (a destination's configured id
/// pointer): the console offers it when a person resolves an action, e.g. from a 409 body that
/// names the existing record.
pub fn id_in_body(body: &str, pointer: &str) -> Option<String> {
    pointer_text(&serde_json::from_str(body).ok()?, pointer)
}

fn pointer_text(value: &Value, pointer: &str) -> Option<String> {
    match value.pointer(pointer)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn describe(error: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Before the connection is up nothing can have been written; after it, silence is uncertain.
fn classify_error(error: &reqwest::Error) -> SendOutcome {
    let text = describe(error);
    if error.is_connect() || error.is_builder() {
        SendOutcome::BeforeWrite { error: format!("could not connect: {text}"), response: None, retry_after: None }
    } else if error.is_timeout() {
        SendOutcome::Uncertain { error: format!("timed out after the request was sent: {text}"), response: None }
    } else {
        SendOutcome::Uncertain { error: format!("connection lost after the request was sent: {text}"), response: None }
    }
}

/// `Retry-After` in seconds or as an HTTP date.
pub fn parse_retry_after(text: &str) -> Option<Duration> {
    if let Ok(seconds) = text.trim().parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc2822(text.trim()).ok()?;
    (at.with_timezone(&chrono::Utc) - chrono::Utc::now()).to_std().ok()
}

/// Exponential backoff with full jitter, at least what the destination asked for.
pub fn backoff(config: &DestinationConfig, attempt: i64, retry_after: Option<Duration>) -> Duration {
    let exponent = u32::try_from(attempt.clamp(1, 30) - 1).unwrap_or(0);
    let ceiling = config.backoff_base.saturating_mul(2u32.saturating_pow(exponent)).min(config.backoff_max);
    let jittered = ceiling.mul_f64(0.5 + fastrand::f64() / 2.0);
    retry_after.map_or(jittered, |asked| asked.max(jittered))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        let later = (chrono::Utc::now() + chrono::Duration::seconds(30)).to_rfc2822();
        let parsed = parse_retry_after(&later).unwrap();
        assert!(parsed > Duration::from_secs(25) && parsed <= Duration::from_secs(30));
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn backoff_grows_is_capped_and_honours_retry_after() {
        let config = crate::config::Config::parse(
            "[destinations.d]\ncreate = { url = \"http://x\" }\nbackoff_base = \"100ms\"\nbackoff_max = \"1s\"",
        )
        .unwrap()
        .destinations["d"]
            .clone();
        for _ in 0..100 {
            let first = backoff(&config, 1, None);
            assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
            assert!(backoff(&config, 10, None) <= Duration::from_secs(1));
            assert!(backoff(&config, 1, Some(Duration::from_secs(5))) >= Duration::from_secs(5));
        }
    }
}
