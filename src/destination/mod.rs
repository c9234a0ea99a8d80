//! Destinations: generic HTTP systems that perform actions, with declared capabilities
//! (idempotency keys, lookup by external reference, fencing) that decide the recovery rules.
//! Requests carry JSON, form or raw bodies; answers name their record in the body or a header,
//! are read up to a cap, and have every credential the request carried masked before they are
//! kept, logged or printed.

pub mod gate;

use crate::config::{BodyFormat, DEFAULT_ID_POINTER, DestinationConfig, HeaderValue};
use crate::domain::record::MAX_EVIDENCE_BODY_BYTES;
use crate::domain::text::{escape_untrusted, truncate};
use crate::domain::{
    ActionRecord, Capabilities, DestinationCatalog, Evidence, LookupReport, LookupVerdict, RetryPolicy,
};
use crate::template::{self, Context, TemplateError};
use reqwest::header::{HeaderMap, HeaderName};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

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
    /// An executor's destination: its automation performs the action; the ledger only looks up.
    #[error("destination {name} is performed by an automation through serve; the ledger sends it nothing")]
    NoCreate { name: String },
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
    /// A form body is built from an object: the body template or the payload was something else.
    #[error("destination {name}: a form body needs an object, not {found}")]
    FormNotObject { name: String, found: &'static str },
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
        let mut destinations = Self::new(by_name, config.worker.default_destination.clone());
        destinations.catalog = destinations.catalog.with_executors(executor_capabilities(config));
        // An executor's destination is asked only through its lookup, by whoever settles its
        // actions (serve, a worker's settler, `reconcile`, a person's lookup); nothing claims it.
        for (name, executor) in config.executors.iter().filter(|(_, e)| e.lookup.is_some()) {
            destinations.by_name.insert(name.clone(), Destination::new(name, executor.lookup_destination())?);
        }
        // Checked when the configuration was read; a configuration built in code without them
        // routes nobody rather than fail.
        if let Ok(owners) = config.review_owner_rules() {
            destinations = destinations.with_review_owners(owners);
        }
        Ok(destinations)
    }

    /// These destinations with `owners` as who reviews what, in the catalogue the ledger
    /// decides with.
    #[must_use]
    pub fn with_review_owners(mut self, owners: crate::domain::ReviewOwners) -> Self {
        self.catalog = self.catalog.with_review_owners(owners);
        self
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

    /// The destinations a worker sends to: an executor's is performed by its automation.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str).filter(|name| !self.catalog.is_executor(name))
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
    /// The pace and pauses shared by every clone of this destination (all of a worker's tasks).
    gate: Arc<gate::Gate>,
    /// Credential values sent in headers: masked in every response body and error kept,
    /// logged or printed, longest first.
    secrets: Arc<Vec<String>>,
}

/// How long pooled connections may stay idle: below the common load-balancer idle limits (60 s),
/// so a request never goes out on a connection the other side has already closed, where it
/// would end as an unknown outcome.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// What replaces a credential in any text kept or shown.
pub const MASK: &str = "[redacted]";

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
    /// A conditional update was refused (412 to its `If-Match`): the record changed at the
    /// destination since the ledger last wrote it, and nothing was written. `current_version` is
    /// the entity tag the refusal named, if any.
    PreconditionFailed { response: Response, current_version: Option<String> },
    /// Nothing was sent: the worker stopped while the request waited for its turn (the rate limit,
    /// or a `Retry-After` pause that still has `pause_left`).
    Stopped { pause_left: Duration },
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
            // A redirect is an answer to record, not a second request to send (the first may
            // have been acted on).
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build()
            .map_err(|source| DestinationError::Client { name: name.to_owned(), source })?;
        let mut headers = HeaderMap::new();
        let mut secrets = Vec::new();
        for (header, value) in &config.headers {
            let marked = header.eq_ignore_ascii_case("authorization")
                || config.secret_headers.iter().any(|s| s.eq_ignore_ascii_case(header));
            let text = match value {
                HeaderValue::Literal { value } => {
                    if marked {
                        secrets.extend(secret_forms(value));
                    }
                    value.clone()
                }
                HeaderValue::Env { env, prefix } => {
                    let secret = std::env::var(env).map_err(|_| DestinationError::MissingEnv {
                        name: name.to_owned(),
                        header: header.clone(),
                        env: env.clone(),
                    })?;
                    secrets.extend(secret_forms(&secret));
                    let text = format!("{prefix}{secret}");
                    secrets.extend(secret_forms(&text));
                    text
                }
            };
            let mut value = reqwest::header::HeaderValue::from_str(&text)
                .map_err(|_| DestinationError::HeaderValue { name: name.to_owned(), header: header.clone() })?;
            value.set_sensitive(true);
            let header = HeaderName::from_bytes(header.as_bytes())
                .map_err(|_| DestinationError::HeaderName { name: name.to_owned(), header: header.clone() })?;
            headers.insert(header, value);
        }
        secrets.sort_by_key(|s: &String| std::cmp::Reverse(s.len()));
        secrets.dedup();
        let gate = Arc::new(gate::Gate::new(config.rate_limit));
        Ok(Self { name: name.to_owned(), config, client, headers, gate, secrets: Arc::new(secrets) })
    }

    /// `text` with every credential this destination sends replaced by [`MASK`].
    pub fn mask(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in self.secrets.iter() {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), MASK);
            }
        }
        text
    }

    /// A response as evidence: a body cut at the read cap loses any credential begun before the
    /// cut, then credentials are masked and the text truncated to what evidence keeps.
    fn evidence(&self, status: u16, body: &[u8], cut: bool) -> Response {
        let mut text = String::from_utf8_lossy(body).into_owned();
        if cut {
            for secret in self.secrets.iter() {
                let longest = (secret.len() - 1).min(text.len());
                if let Some(k) = (1..=longest).rev().find(|&k| text.as_bytes().ends_with(&secret.as_bytes()[..k])) {
                    text.truncate(text.len() - k);
                    text.push_str(MASK);
                    break;
                }
            }
        }
        Response { status, body: truncate(&self.mask(&text), MAX_EVIDENCE_BODY_BYTES) }
    }

    /// The outcome with credentials masked in its error text and response body.
    fn masked(&self, outcome: SendOutcome) -> SendOutcome {
        let text = |error: String| self.mask(&error);
        let response = |r: Response| Response { status: r.status, body: self.mask(&r.body) };
        match outcome {
            SendOutcome::Created { destination_id, response: r } => {
                SendOutcome::Created { destination_id, response: response(r) }
            }
            SendOutcome::BeforeWrite { error, response: r, retry_after } => {
                SendOutcome::BeforeWrite { error: text(error), response: r.map(response), retry_after }
            }
            SendOutcome::Permanent { error, response: r } => {
                SendOutcome::Permanent { error: text(error), response: response(r) }
            }
            SendOutcome::Uncertain { error, response: r } => {
                SendOutcome::Uncertain { error: text(error), response: r.map(response) }
            }
            SendOutcome::AlreadyExists { response: r } => SendOutcome::AlreadyExists { response: response(r) },
            SendOutcome::PreconditionFailed { response: r, current_version } => {
                SendOutcome::PreconditionFailed { response: response(r), current_version }
            }
            stopped @ SendOutcome::Stopped { .. } => stopped,
        }
    }

    /// Waits until this worker may send the destination another request: its rate limit, and
    /// any pause a `Retry-After` asked for.
    async fn wait_turn(&self) {
        self.gate.acquire().await;
    }

    /// Whether the destination asked (with `Retry-After`) not to be sent anything for now: a
    /// worker claims nothing for it and looks nothing up there meanwhile.
    pub fn paused(&self) -> bool {
        self.gate.paused()
    }

    /// A `429` or `503` with `Retry-After` pauses the whole destination, not only one action.
    fn honour_retry_after(&self, status: u16, retry_after: Option<Duration>) {
        if let (429 | 503, Some(wait)) = (status, retry_after) {
            self.gate.pause(wait);
        }
    }

    /// What this destination declares against a second effect, for the ledger's decisions.
    pub fn capabilities(&self) -> Capabilities {
        capabilities_of(&self.config)
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

    /// The condition this destination's update requests carry, if it declares one.
    pub fn update_condition(&self) -> Option<crate::domain::UpdateCondition> {
        self.config.update.as_ref().and_then(|u| u.conditional)
    }

    /// The record's version named in an answer this destination gave to a create or an update
    /// (kept as an attempt's evidence body), as the entity tag an `If-Match` carries: a value
    /// that is not already a quoted tag is quoted.
    pub fn version_in(&self, body: &str) -> Option<String> {
        let pointer = self.config.update.as_ref()?.version_pointer.as_deref()?;
        let version = pointer_text(&serde_json::from_str(body).ok()?, pointer)?;
        let quoted = version.starts_with('"') || version.starts_with("W/\"");
        Some(if quoted { version } else { format!("\"{version}\"") })
    }

    /// The body the action's request sends: the create body, or the update body for an update
    /// action.
    pub fn body(&self, action: &ActionRecord, after: Option<&ActionRecord>) -> Result<Value, DestinationError> {
        let external_ref = self.external_ref(action, after)?;
        let context = self.context(action, after, Some(&external_ref));
        let (format, template) = self.body_template(action);
        match (format, template) {
            // A raw body is text: placeholders are interpolated, never taken as values.
            (BodyFormat::Raw, Some(toml::Value::String(text))) => {
                Ok(Value::String(template::render_text(text, &context, false)?))
            }
            (_, Some(template)) => Ok(template::render_body(template, &context)?),
            (_, None) => Ok(action.payload.value()),
        }
    }

    /// The format and body template of the action's request.
    fn body_template(&self, action: &ActionRecord) -> (BodyFormat, Option<&toml::Value>) {
        match (&action.updates, &self.config.update) {
            (Some(_), Some(update)) => (update.format, update.body.as_ref()),
            _ => self.config.create.as_ref().map_or((BodyFormat::Json, None), |c| (c.format, c.body.as_ref())),
        }
    }

    /// The action's request body as sent, with its content type.
    pub fn encoded_body(
        &self,
        action: &ActionRecord,
        after: Option<&ActionRecord>,
    ) -> Result<(String, String), DestinationError> {
        let body = self.body(action, after)?;
        let (format, _) = self.body_template(action);
        let content_type = match (&action.updates, &self.config.update) {
            (Some(_), Some(update)) => update.content_type.clone(),
            _ => self.config.create.as_ref().and_then(|c| c.content_type.clone()),
        };
        let (default_type, text) = match (format, body) {
            (BodyFormat::Json, body) => ("application/json", body.to_string()),
            (BodyFormat::Raw, Value::String(text)) => ("text/plain; charset=utf-8", text),
            (BodyFormat::Raw, body) => ("text/plain; charset=utf-8", body.to_string()),
            (BodyFormat::Form, body) => ("application/x-www-form-urlencoded", form_encode(&self.name, &body)?),
        };
        Ok((content_type.unwrap_or_else(|| default_type.to_owned()), text))
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
        self.send_or_stop(action, after, std::future::pending()).await
    }

    /// [`Destination::send`] for a worker that may be told to stop. While the request waits for
    /// its turn nothing has gone out, so when `stop` completes the wait ends there with
    /// [`SendOutcome::Stopped`] rather than waiting out a pause the destination asked for (up to
    /// an hour); once the turn is taken the request goes.
    pub async fn send_or_stop(
        &self,
        action: &ActionRecord,
        after: Option<&ActionRecord>,
        stop: impl Future<Output = ()>,
    ) -> Result<SendOutcome, DestinationError> {
        self.send_if_match_or_stop(action, after, None, stop).await
    }

    /// [`Destination::send_or_stop`] with `If-Match: if_match` on the request where given (a
    /// conditional update): a 412 answer is then [`SendOutcome::PreconditionFailed`]. Every send
    /// goes through here, so its span names the destination, the key and the ownership version.
    #[tracing::instrument(
        name = "destination_request",
        skip_all,
        fields(destination = %escape_untrusted(&self.name), key = %escape_untrusted(action.key.as_str()), ownership_version = action.ownership_version)
    )]
    pub async fn send_if_match_or_stop(
        &self,
        action: &ActionRecord,
        after: Option<&ActionRecord>,
        if_match: Option<&str>,
        stop: impl Future<Output = ()>,
    ) -> Result<SendOutcome, DestinationError> {
        let external_ref = self.external_ref(action, after)?;
        let context = self.context(action, after, Some(&external_ref));
        let (method, url) = match (&action.updates, &self.config.update) {
            (None, _) => match &self.config.create {
                Some(create) => (&create.method, &create.url),
                None => return Err(DestinationError::NoCreate { name: self.name.clone() }),
            },
            (Some(_), Some(update)) => (&update.method, &update.url),
            (Some(_), None) => return Err(DestinationError::NoUpdate { name: self.name.clone() }),
        };
        let url = template::render_text(url, &context, true)?;
        let (content_type, body) = self.encoded_body(action, after)?;
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|_| DestinationError::Method { name: self.name.clone(), method: method.clone() })?;
        let mut request = self
            .client
            .request(method, &url)
            .headers(self.headers.clone())
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body);
        if let Some(idempotency) = &self.config.idempotency {
            request = request.header(idempotency.header.as_str(), action.sending_key());
        }
        if let Some(fencing) = &self.config.fencing {
            request = request.header(fencing.header.as_str(), action.ownership_version.to_string());
        }
        if let Some(tag) = if_match {
            request = request.header(reqwest::header::IF_MATCH, tag);
        }
        tokio::select! {
            biased;
            () = self.wait_turn() => {}
            () = stop => return Ok(SendOutcome::Stopped { pause_left: self.gate.pause_left() }),
        }
        crate::faults::crash_point(crate::faults::BEFORE_SEND);
        let sent = request.send().await;
        crate::faults::crash_point(crate::faults::AFTER_RESPONSE);
        let outcome = match sent {
            Err(error) => classify_error(&error),
            Ok(response) => self.classify_response(response, action, after, if_match.is_some()).await,
        };
        Ok(self.masked(outcome))
    }

    /// For an update request, the id of the record it changes is the action's: the answer need
    /// not repeat it. A success naming no record is looked up at once where the destination
    /// offers a lookup.
    async fn classify_response(
        &self,
        response: reqwest::Response,
        action: &ActionRecord,
        after: Option<&ActionRecord>,
        conditional: bool,
    ) -> SendOutcome {
        let status = response.status().as_u16();
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let retry_after = header("retry-after").as_deref().and_then(parse_retry_after);
        let location = header("location");
        let etag = header("etag");
        let create = self.config.create.as_ref();
        let header_id =
            create.and_then(|c| c.id_header.as_deref()).and_then(header).and_then(|v| self.id_from_header(&v));
        self.honour_retry_after(status, retry_after);
        let (body, cut) = match read_capped(response, self.config.max_response_bytes).await {
            Ok(read) => read,
            Err(e) if status < 400 => {
                return SendOutcome::Uncertain {
                    error: format!("HTTP {status}, then the response body was lost: {}", describe(&e)),
                    response: Some(Response { status, body: String::new() }),
                };
            }
            Err(_) => (Vec::new(), false),
        };
        let response = self.evidence(status, &body, cut);
        tracing::debug!(status, body = %escape_untrusted(&response.body), "destination answered");
        match status {
            200..=299 => {
                let id = header_id
                    .or_else(|| {
                        serde_json::from_slice::<Value>(&body)
                            .ok()
                            .and_then(|v| pointer_text(&v, create.map_or(DEFAULT_ID_POINTER, |c| &c.id_pointer)))
                    })
                    .or_else(|| action.updates_destination_id.clone());
                match id {
                    Some(destination_id) => SendOutcome::Created { destination_id, response },
                    None => self.look_up_unnamed(action, after, status, response).await,
                }
            }
            300..=399 => {
                let location = location.unwrap_or_else(|| "(no Location)".to_owned());
                let shown = self.mask(&location);
                let body = truncate(&format!("Location: {shown}\n{}", response.body), MAX_EVIDENCE_BODY_BYTES);
                SendOutcome::Uncertain {
                    error: format!(
                        "HTTP {status} redirect to {shown}, not followed: the destination may have acted on the request"
                    ),
                    response: Some(Response { status, body }),
                }
            }
            409 => SendOutcome::AlreadyExists { response },
            412 if conditional => SendOutcome::PreconditionFailed { response, current_version: etag },
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

    /// A success that names no record: where the destination offers a lookup, it is asked at
    /// once (the record exists, the answer said so); otherwise, and when the lookup cannot name
    /// the one record, the outcome is uncertain (docs/RULES.md).
    async fn look_up_unnamed(
        &self,
        action: &ActionRecord,
        after: Option<&ActionRecord>,
        status: u16,
        response: Response,
    ) -> SendOutcome {
        let create = self.config.create.as_ref();
        let pointer = create.map_or(DEFAULT_ID_POINTER, |c| &c.id_pointer);
        let without_id = match create.and_then(|c| c.id_header.as_deref()) {
            Some(header) => format!("HTTP {status} without a record id in {header} or at {pointer}"),
            None => format!("HTTP {status} without a record id at {pointer}"),
        };
        if self.config.lookup.is_none() {
            return SendOutcome::Uncertain { error: without_id, response: Some(response) };
        }
        let judged = match self.lookup(action, after).await {
            Ok(found) => self.judge(action, after, &found),
            Err(error) => Err(error),
        };
        match judged {
            Ok(LookupReport { verdict: LookupVerdict::Found, destination_id: Some(destination_id), .. }) => {
                SendOutcome::Created { destination_id, response }
            }
            Ok(report) => SendOutcome::Uncertain {
                error: format!("{without_id}; the lookup right after: {}", report.detail.unwrap_or_default()),
                response: Some(response),
            },
            Err(error) => SendOutcome::Uncertain {
                error: format!("{without_id}; the lookup right after failed: {error}"),
                response: Some(response),
            },
        }
    }

    /// The record id in a response header such as `Location`: what remains once the configured
    /// prefix and suffix are stripped, or else its last path segment.
    fn id_from_header(&self, value: &str) -> Option<String> {
        let (prefix, suffix) =
            self.config.create.as_ref().map_or((None, None), |c| (c.id_prefix.as_deref(), c.id_suffix.as_deref()));
        let id = if prefix.is_some() || suffix.is_some() {
            let rest = value.strip_prefix(prefix.unwrap_or(""))?;
            rest.strip_suffix(suffix.unwrap_or(""))?.to_owned()
        } else {
            let path = value.split(['?', '#']).next().unwrap_or("");
            let segment = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
            percent_encoding::percent_decode_str(segment).decode_utf8_lossy().into_owned()
        };
        (!id.is_empty()).then_some(id)
    }

    /// Finds the records the destination holds for this action's external reference.
    #[tracing::instrument(
        name = "destination_lookup",
        skip_all,
        fields(destination = %escape_untrusted(&self.name), key = %escape_untrusted(action.key.as_str()))
    )]
    pub async fn lookup(&self, action: &ActionRecord, after: Option<&ActionRecord>) -> Result<Found, DestinationError> {
        let lookup =
            self.config.lookup.as_ref().ok_or_else(|| DestinationError::NoLookup { name: self.name.clone() })?;
        let external_ref = self.external_ref(action, after)?;
        let url = template::render_text(&lookup.url, &self.context(action, after, Some(&external_ref)), true)?;
        self.wait_turn().await;
        let response =
            self.client.get(&url).headers(self.headers.clone()).send().await.map_err(DestinationError::LookupFailed)?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        self.honour_retry_after(status, retry_after);
        let (body, cut) = read_capped(response, self.config.max_response_bytes)
            .await
            .map_err(DestinationError::LookupResponseLost)?;
        let evidence = self.evidence(status, &body, cut);
        tracing::debug!(status, body = %escape_untrusted(&evidence.body), "lookup answered");
        if status == 404 && lookup.records_pointer.is_none() {
            return Ok(Found { records: Vec::new(), response: evidence });
        }
        if !(200..300).contains(&status) {
            return Err(DestinationError::LookupStatus { status });
        }
        let value: Value = serde_json::from_slice(&body).map_err(DestinationError::LookupJson)?;
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
        self.differing_fields(sent, found).is_empty()
    }

    /// The configured `compare` fields (JSON pointers) on which a found record differs from what
    /// this action sends, in the order configured: the one comparison behind [`Self::judge`]'s
    /// `mismatch` and reconciliation's changed records.
    pub fn differing_fields(&self, sent: &Value, found: &Value) -> Vec<String> {
        self.config.lookup.as_ref().map_or_else(Vec::new, |l| {
            l.compare.iter().filter(|pointer| sent.pointer(pointer) != found.pointer(pointer)).cloned().collect()
        })
    }

    /// [`Self::differing_fields`] of `record` against what `action` sends here.
    pub fn changed_fields(
        &self,
        action: &ActionRecord,
        after: Option<&ActionRecord>,
        record: &Value,
    ) -> Result<Vec<String>, DestinationError> {
        Ok(self.differing_fields(&self.body(action, after)?, record))
    }
}

/// What a destination's configuration declares against a second effect.
pub fn capabilities_of(config: &DestinationConfig) -> Capabilities {
    Capabilities {
        idempotency_retention: config.idempotency.as_ref().map(|i| i.retention),
        lookup: config.lookup.is_some(),
        lookup_settle: config.lookup.as_ref().map_or(Duration::ZERO, |l| l.settle),
        retry: RetryPolicy {
            max_attempts: config.max_attempts,
            backoff_base: config.backoff_base,
            backoff_max: config.backoff_max,
        },
        update_condition: config.update.as_ref().and_then(|u| u.conditional),
    }
}

/// The capabilities a configuration declares, without building any destination (no credential
/// is read): for a command that only says what the destinations declare.
pub fn catalog_of(config: &crate::config::Config) -> DestinationCatalog {
    let capabilities = config.destinations.iter().map(|(name, c)| (name.clone(), capabilities_of(c))).collect();
    let catalog = DestinationCatalog::new(capabilities, config.worker.default_destination.clone())
        .with_executors(executor_capabilities(config));
    // Checked when the configuration was read, as in `Destinations::from_config`.
    match config.review_owner_rules() {
        Ok(owners) => catalog.with_review_owners(owners),
        Err(_) => catalog,
    }
}

/// What each executor (a destination an automation performs through `serve`) declares against a
/// second effect: its lookup is one the ledger makes itself.
pub fn executor_capabilities(config: &crate::config::Config) -> BTreeMap<String, Capabilities> {
    config.executors.iter().map(|(name, c)| (name.clone(), capabilities_of(&c.lookup_destination()))).collect()
}

/// The record id a stored response body names at `pointer` (a destination's configured id
/// pointer): the console offers it when a person resolves an action, e.g. from a 409 body that
/// names the existing record.
pub fn id_in_body(body: &str, pointer: &str) -> Option<String> {
    pointer_text(&serde_json::from_str(body).ok()?, pointer)
}

/// The forms a credential can take in a response: as sent, and after the first space (the
/// token of `Bearer TOKEN`), each also as JSON escapes it.
fn secret_forms(value: &str) -> Vec<String> {
    let mut forms = vec![value.to_owned()];
    if let Some((_, token)) = value.split_once(' ') {
        forms.push(token.to_owned());
    }
    let escaped: Vec<String> = forms
        .iter()
        .filter_map(|f| serde_json::to_string(f).ok())
        .map(|quoted| quoted[1..quoted.len() - 1].to_owned())
        .collect();
    forms.extend(escaped);
    forms.retain(|f| !f.trim().is_empty());
    forms
}

/// Reads a response body up to `cap` bytes, chunk by chunk; the rest is read and dropped (so the
/// connection can be reused) and never held. Returns the kept bytes and whether any were cut.
async fn read_capped(mut response: reqwest::Response, cap: usize) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut kept = Vec::new();
    let mut cut = false;
    while let Some(chunk) = response.chunk().await? {
        let room = cap.saturating_sub(kept.len());
        if chunk.len() > room {
            cut = true;
        }
        kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }
    Ok((kept, cut))
}

/// A JSON object as `application/x-www-form-urlencoded`, nested the way payment APIs read it:
/// `customer[name]=Ana`, `items[0][sku]=X-1`. `null` is sent empty; `true`/`false` as words.
pub fn form_encode(name: &str, body: &Value) -> Result<String, DestinationError> {
    fn pairs(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    let name = if prefix.is_empty() { key.clone() } else { format!("{prefix}[{key}]") };
                    pairs(&name, value, out);
                }
            }
            Value::Array(items) => {
                for (index, value) in items.iter().enumerate() {
                    pairs(&format!("{prefix}[{index}]"), value, out);
                }
            }
            Value::Null => out.push((prefix.to_owned(), String::new())),
            Value::String(text) => out.push((prefix.to_owned(), text.clone())),
            other => out.push((prefix.to_owned(), other.to_string())),
        }
    }
    let Value::Object(_) = body else {
        let found = match body {
            Value::Array(_) => "a list",
            Value::String(_) => "a text",
            Value::Number(_) => "a number",
            Value::Bool(_) => "a boolean",
            _ => "null",
        };
        return Err(DestinationError::FormNotObject { name: name.to_owned(), found });
    };
    let mut out = Vec::new();
    pairs("", body, &mut out);
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    for (key, value) in &out {
        form.append_pair(key, value);
    }
    Ok(form.finish())
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
    retry_after_from(text, std::time::SystemTime::now())
}

/// `Retry-After` read at `now`: delta-seconds, or a date in any of the three forms HTTP requires a
/// recipient to accept (IMF-fixdate, RFC 850, asctime; RFC 9110 section 5.6.7). A date already
/// past asks for no wait.
fn retry_after_from(text: &str, now: std::time::SystemTime) -> Option<Duration> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    httpdate::parse_http_date(text).ok()?.duration_since(now).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(" 120 "), Some(Duration::from_mins(2)));
        // RFC 9110's own example, thirty seconds before it, in each form a recipient must accept.
        let now = std::time::UNIX_EPOCH + Duration::from_secs(784_111_747);
        for form in ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"] {
            assert_eq!(retry_after_from(form, now), Some(Duration::from_secs(30)), "{form}");
        }
        assert_eq!(retry_after_from("Sun, 06 Nov 1994 08:49:37 GMT", now + Duration::from_mins(1)), None, "past");
        let later = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(30));
        let parsed = parse_retry_after(&later).unwrap();
        assert!(parsed > Duration::from_secs(25) && parsed <= Duration::from_secs(30), "{parsed:?}");
        assert_eq!(parse_retry_after("soon"), None);
    }

    fn destination(extra: &str) -> Destination {
        let text = format!("[destinations.d]\ncreate = {{ url = \"http://x\" }}\n{extra}");
        let config = crate::config::Config::parse(&text).unwrap().destinations["d"].clone();
        Destination::new("d", config).unwrap()
    }

    #[test]
    fn a_conditional_update_needs_a_version_pointer_and_sends_it_as_an_entity_tag() {
        let update = "update = { url = \"http://x/{{destination_id}}\", conditional = \"if-match\" }";
        let text = format!("[destinations.d]\ncreate = {{ url = \"http://x\" }}\n{update}");
        let refused = crate::config::Config::parse(&text).unwrap_err().to_string();
        assert!(refused.contains("needs update.version_pointer"), "{refused}");
        let d = destination(&update.replace(" }", ", version_pointer = \"/meta/etag\" }"));
        assert_eq!(d.capabilities().update_condition, Some(crate::domain::UpdateCondition::IfMatch));
        assert_eq!(d.version_in(r#"{"meta":{"etag":3}}"#).as_deref(), Some("\"3\""), "a bare version is quoted");
        assert_eq!(d.version_in(r#"{"meta":{"etag":"W/\"a1\""}}"#).as_deref(), Some("W/\"a1\""), "a tag is kept");
        assert_eq!(d.version_in(r#"{"meta":{}}"#), None);
        assert_eq!(d.version_in("not json"), None);
        assert_eq!(destination("").version_in(r#"{"meta":{"etag":3}}"#), None, "no declaration, no version");
    }

    #[test]
    fn form_bodies_nest_as_payment_apis_read_them() {
        let body = serde_json::json!({
            "amount": 1250, "paid": false, "note": null, "customer": {"name": "Ana & Co"},
            "items": [{"sku": "X-1", "qty": 2}, {"sku": "Y 2"}]
        });
        let form = form_encode("d", &body).unwrap();
        let pairs: Vec<(String, String)> = url::form_urlencoded::parse(form.as_bytes()).into_owned().collect();
        let expected = [
            ("amount", "1250"),
            ("customer[name]", "Ana & Co"),
            ("items[0][qty]", "2"),
            ("items[0][sku]", "X-1"),
            ("items[1][sku]", "Y 2"),
            ("note", ""),
            ("paid", "false"),
        ];
        let expected: Vec<(String, String)> =
            expected.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        assert_eq!(pairs, expected);
        let error = form_encode("d", &serde_json::json!([1])).unwrap_err().to_string();
        assert_eq!(error, "destination d: a form body needs an object, not a list");
    }

    #[test]
    fn ids_from_a_header_take_the_last_segment_or_strip_a_pattern() {
        let plain = destination("");
        assert_eq!(plain.id_from_header("/v1/tasks/R-7?expand=1").as_deref(), Some("R-7"));
        assert_eq!(plain.id_from_header("https://crm.example/tasks/a%20b/").as_deref(), Some("a b"));
        assert_eq!(plain.id_from_header("/").as_deref(), None);
        let mut stripped = destination("");
        let create = stripped.config.create.as_mut().unwrap();
        create.id_prefix = Some("https://crm.example/api/tasks/".to_owned());
        create.id_suffix = Some("/view".to_owned());
        assert_eq!(stripped.id_from_header("https://crm.example/api/tasks/T-9/view").as_deref(), Some("T-9"));
        assert_eq!(stripped.id_from_header("https://elsewhere/T-9/view"), None, "a prefix that does not match");
    }

    #[test]
    fn credentials_are_masked_whole_and_where_a_cut_splits_them() {
        let d = destination(
            "secret_headers = [\"X-Api-Key\"]\nheaders = { Authorization = { value = \"Bearer tok-123456\" }, \
             X-Api-Key = { value = \"k-\\\"quoted\\\"\" }, X-Team = { value = \"ops\" } }",
        );
        let text = r#"{"authorization":"Bearer tok-123456","x-api-key":"k-\"quoted\"","x-team":"ops"} tok-123456"#;
        let masked = d.mask(text);
        assert_eq!(masked, r#"{"authorization":"[redacted]","x-api-key":"[redacted]","x-team":"ops"} [redacted]"#);
        // A body cut at the read cap in the middle of a token keeps none of it.
        let cut = d.evidence(400, b"echo: Bearer tok-12", true);
        assert_eq!(cut.body, "echo: [redacted]");
        let whole = d.evidence(400, b"echo: tok-12", false);
        assert_eq!(whole.body, "echo: tok-12", "only a cut body can end in part of a secret");
    }

    #[test]
    fn the_configured_backoff_is_the_retry_policy() {
        let config = crate::config::Config::parse(
            "[destinations.d]\ncreate = { url = \"http://x\" }\nbackoff_base = \"100ms\"\nbackoff_max = \"1s\"\nmax_attempts = 3",
        )
        .unwrap()
        .destinations["d"]
            .clone();
        let retry = Destination::new("d", config).unwrap().capabilities().retry;
        assert_eq!(retry.max_attempts, 3);
        assert_eq!(retry.backoff(1, None, 0.0), Duration::from_millis(50));
        assert!(retry.backoff(1, None, 0.999) <= Duration::from_millis(100));
        assert!(retry.backoff(2, None, 0.0) == Duration::from_millis(100), "doubles");
        assert!(retry.backoff(10, None, 0.999) <= Duration::from_secs(1), "capped");
        assert!(retry.backoff(1, Some(Duration::from_secs(5)), 0.5) >= Duration::from_secs(5));
    }
}
