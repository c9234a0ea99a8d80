//! The worker's configuration file (`actionledger.toml`): destinations and their capabilities.
//!
//! Credentials are never written here or in the ledger: a header value may name an environment
//! variable, read when the worker starts.

use crate::domain::ReviewOwners;
use crate::domain::input::{InputError, Person, validate_destination_name};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default configuration file, in the current directory.
pub const DEFAULT_CONFIG_FILE: &str = "actionledger.toml";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub worker: WorkerSettings,
    #[serde(default)]
    pub destinations: BTreeMap<String, DestinationConfig>,
    /// Destinations whose effect an automation performs itself, through `serve`'s register
    /// (`:begin`, `:heartbeat`, `:finish`, `/v1/claims`): what each declares against a second
    /// effect, with no request for the worker to send.
    #[serde(default)]
    pub executors: BTreeMap<String, ExecutorConfig>,
    /// Webhook intakes for `actionledger serve`: `POST /v1/hooks/NAME` maps a sender's body.
    #[serde(default)]
    pub intake: BTreeMap<String, IntakeConfig>,
    /// Who reviews the actions whose keys start with a prefix (`[[review_owners]]`): the longest
    /// matching prefix wins over a destination's `review_owner`.
    #[serde(default)]
    pub review_owners: Vec<ReviewOwnerRule>,
}

/// One `[[review_owners]]` rule: actions whose key starts with `prefix` go to `owner` when they
/// need a person and nobody is assigned.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewOwnerRule {
    pub prefix: String,
    pub owner: String,
}

/// How a webhook body becomes a submission (`[intake.NAME]`). Templates take
/// `{{body.FIELD.PATH}}` (a field of the JSON body) and `{{header.NAME}}` (a request header).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntakeConfig {
    /// The action key, e.g. `shop:order:{{body.id}}:create-task`.
    pub key: String,
    /// The event id, e.g. `{{header.X-Shop-Event-Id}}` or `{{body.event.id}}`.
    #[serde(default)]
    pub event_id: Option<String>,
    /// The source version: a template that must give a whole number, e.g. `{{body.version}}`.
    #[serde(default)]
    pub source_version: Option<String>,
    /// The source recorded with each delivery; the intake's name by default.
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub destination: Option<String>,
    /// The body fields that form the payload, as paths (`customer.email`); the whole body without it.
    #[serde(default)]
    pub payload: Option<Vec<String>>,
    /// A signature the sender must put on every body; without it a bearer token is required.
    #[serde(default)]
    pub signature: Option<SignatureConfig>,
    /// Deliveries answered 200 and not recorded (`[[intake.NAME.ignore]]`), such as a sender's
    /// `ping`: checked after the signature, so an unsigned one is still refused.
    #[serde(default)]
    pub ignore: Vec<IgnoreRule>,
}

/// One accept-and-ignore rule: a delivery whose `field` (`header.NAME` or `body.PATH`) is
/// `equals` is answered 200 with why, and nothing of it is recorded.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IgnoreRule {
    pub field: String,
    pub equals: String,
}

/// How the sender signs its deliveries (`[intake.NAME.signature]`): one of the schemes providers
/// use, by name, or an HMAC-SHA256 in a header of the intake's choosing (`hmac-sha256`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureConfig {
    #[serde(default)]
    pub scheme: SignatureScheme,
    /// The environment variables that hold the shared secrets, never the secrets themselves: one
    /// name, or a list of names while a secret is rotated (any of them verifies a delivery).
    #[serde(deserialize_with = "one_or_several")]
    pub secret_env: Vec<String>,
    /// `hmac-sha256` only: the header carrying the signature, e.g. `X-Shop-Hmac-Sha256`.
    #[serde(default)]
    pub header: Option<String>,
    /// `hmac-sha256` only: how the signature is written (hex by default).
    #[serde(default)]
    pub encoding: Option<SignatureEncoding>,
    /// `hmac-sha256` only: text before the signature in the header, e.g. `sha256=`.
    #[serde(default)]
    pub prefix: Option<String>,
    /// `hmac-sha256` only: the header carrying the time the sender signed (Unix seconds); the
    /// sender then signs `TIMESTAMP.BODY`.
    #[serde(default)]
    pub timestamp_header: Option<String>,
    /// How far a signed timestamp may be from the server's clock, either way.
    #[serde(default = "default_tolerance", with = "duration_text")]
    pub tolerance: Duration,
    /// A template naming each delivery (`{{body.id}}`, `{{header.X-GitHub-Delivery}}`): one
    /// already accepted with the same signed timestamp is refused as a replay. The
    /// `standard-webhooks` scheme names its deliveries itself (`webhook-id`).
    #[serde(default)]
    pub delivery_id: Option<String>,
}

/// The signature schemes an intake can name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SignatureScheme {
    /// HMAC-SHA256 over `BODY` (or `TIMESTAMP.BODY`) in the configured header.
    #[default]
    HmacSha256,
    /// `Stripe-Signature: t=TS,v1=HEX,...` over `TS.BODY`.
    Stripe,
    /// `X-Slack-Signature: v0=HEX` over `v0:TS:BODY`, with `X-Slack-Request-Timestamp`.
    Slack,
    /// Standard Webhooks (Svix): `webhook-signature: v1,BASE64 ...` over `ID.TS.BODY`.
    StandardWebhooks,
    /// `X-Hub-Signature-256: sha256=HEX` over `BODY`.
    Github,
    /// `X-Shopify-Hmac-Sha256: BASE64` over `BODY`.
    Shopify,
}

impl SignatureScheme {
    pub fn name(self) -> &'static str {
        match self {
            Self::HmacSha256 => "hmac-sha256",
            Self::Stripe => "stripe",
            Self::Slack => "slack",
            Self::StandardWebhooks => "standard-webhooks",
            Self::Github => "github",
            Self::Shopify => "shopify",
        }
    }
}

impl SignatureConfig {
    /// The request headers the signature covers besides the body: a signed intake's key and
    /// source version may read these.
    pub fn signed_headers(&self) -> Vec<&str> {
        match self.scheme {
            SignatureScheme::HmacSha256 => self.timestamp_header.iter().map(String::as_str).collect(),
            SignatureScheme::Slack => vec!["X-Slack-Request-Timestamp"],
            SignatureScheme::StandardWebhooks => {
                vec!["webhook-id", "webhook-timestamp", "svix-id", "svix-timestamp"]
            }
            SignatureScheme::Stripe | SignatureScheme::Github | SignatureScheme::Shopify => Vec::new(),
        }
    }

    fn check(&self) -> Result<(), IntakeSettingError> {
        if self.secret_env.is_empty() || self.secret_env.iter().any(|name| name.trim().is_empty()) {
            return Err(IntakeSettingError::NoSecretEnv);
        }
        let own_settings = [
            ("header", self.header.is_some()),
            ("encoding", self.encoding.is_some()),
            ("prefix", self.prefix.is_some()),
            ("timestamp_header", self.timestamp_header.is_some()),
        ];
        if self.scheme == SignatureScheme::HmacSha256 {
            if self.header.is_none() {
                return Err(IntakeSettingError::NoSignatureHeader);
            }
            for header in self.header.iter().chain(&self.timestamp_header) {
                reqwest::header::HeaderName::from_bytes(header.as_bytes())
                    .map_err(|_| IntakeSettingError::HeaderName(header.clone()))?;
            }
        } else if let Some((setting, _)) = own_settings.iter().find(|(_, given)| *given) {
            return Err(IntakeSettingError::SchemeSetting { scheme: self.scheme.name(), setting });
        }
        if let Some(template) = &self.delivery_id {
            if self.scheme == SignatureScheme::StandardWebhooks {
                return Err(IntakeSettingError::SchemeSetting { scheme: self.scheme.name(), setting: "delivery_id" });
            }
            crate::template::intake_placeholders(template)
                .map_err(|problem| IntakeSettingError::Template { field: "signature.delivery_id", problem })?;
        }
        Ok(())
    }
}

impl IgnoreRule {
    fn check(&self) -> Result<(), IntakeSettingError> {
        let unusable = || IntakeSettingError::IgnoreField(self.field.clone());
        match (self.field.strip_prefix("header."), self.field.strip_prefix("body.")) {
            (Some(header), _) => {
                reqwest::header::HeaderName::from_bytes(header.as_bytes()).map_err(|_| unusable())?;
            }
            (None, Some(path)) if !path.is_empty() && path.split('.').all(|part| !part.is_empty()) => {}
            _ => return Err(unusable()),
        }
        Ok(())
    }
}

/// One environment variable's name, or a list of them.
fn one_or_several<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    struct Names;
    impl<'de> serde::de::Visitor<'de> for Names {
        type Value = Vec<String>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an environment variable's name, or a list of names")
        }

        fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Vec<String>, E> {
            Ok(vec![name.to_owned()])
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut names: A) -> Result<Vec<String>, A::Error> {
            let mut all = Vec::new();
            while let Some(name) = names.next_element()? {
                all.push(name);
            }
            Ok(all)
        }
    }
    deserializer.deserialize_any(Names)
}

/// How a signature is written in its header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SignatureEncoding {
    #[default]
    Hex,
    Base64,
}

fn default_tolerance() -> Duration {
    Duration::from_mins(5)
}

/// The most actions one claim of a worker may take.
pub const MAX_BATCH: usize = 1000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerSettings {
    /// How long a claim lasts without a heartbeat.
    #[serde(with = "duration_text")]
    pub lease: Duration,
    /// Actions performed at once in one worker process, each from its claim until its result
    /// commits.
    pub concurrency: usize,
    /// The most actions one claim takes (a claim takes up to the free slots).
    pub batch: usize,
    /// How often an idle worker looks for work.
    #[serde(with = "duration_text")]
    pub poll_interval: Duration,
    /// The destination for actions submitted without `--destination`.
    pub default_destination: Option<String>,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(30),
            concurrency: 16,
            batch: 100,
            poll_interval: Duration::from_millis(250),
            default_destination: None,
        }
    }
}

/// A generic HTTP/JSON destination.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationConfig {
    /// Substituted for `{{base_url}}` in templates.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The request that performs the action. Required of every `[destinations.NAME]`; `None`
    /// only for an executor's lookup (see [`ExecutorConfig::lookup_destination`]), which sends
    /// nothing.
    #[serde(default)]
    pub create: Option<CreateRequest>,
    /// How an approved new version of a completed action changes its record; without it such an
    /// update is held for a person (docs/RULES.md, "Changed payloads").
    #[serde(default)]
    pub update: Option<UpdateRequest>,
    /// The destination's unique external reference for an action; `{{key}}` by default.
    #[serde(default = "default_external_ref")]
    pub external_ref: String,
    #[serde(default)]
    pub idempotency: Option<Idempotency>,
    #[serde(default)]
    pub lookup: Option<Lookup>,
    #[serde(default)]
    pub fencing: Option<Fencing>,
    /// Extra request headers, e.g. `Authorization = { env = "CRM_TOKEN", prefix = "Bearer " }`.
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValue>,
    #[serde(default = "default_timeout", with = "duration_text")]
    pub timeout: Duration,
    #[serde(default = "default_connect_timeout", with = "duration_text")]
    pub connect_timeout: Duration,
    /// Attempts per round before a temporary failure becomes `failed`.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: i64,
    #[serde(default = "default_backoff_base", with = "duration_text")]
    pub backoff_base: Duration,
    #[serde(default = "default_backoff_max", with = "duration_text")]
    pub backoff_max: Duration,
    /// How much of a response is read; the rest is read and discarded, never held in memory.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
    /// Requests per second (and burst) this worker sends to the destination, all its tasks
    /// together; lookups count too.
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    /// Headers whose values are credentials, besides `Authorization` and every header read
    /// from the environment: their values are masked in anything kept, logged or printed.
    #[serde(default)]
    pub secret_headers: Vec<String>,
    /// The person its actions are assigned to when they need a person (unknown, failed, held,
    /// conflict) and nobody is assigned yet.
    #[serde(default)]
    pub review_owner: Option<String>,
}

/// How the body of a request is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyFormat {
    /// `application/json`: the body template (or the payload) as JSON.
    #[default]
    Json,
    /// `application/x-www-form-urlencoded`, nested fields as `a[b]=1` and `items[0][sku]=x`.
    Form,
    /// A text template sent as it is, with the request's `content_type`.
    Raw,
}

/// A worker's pace towards one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Most requests in any one second.
    pub per_second: u32,
    /// Most requests sent back to back after a quiet spell; `per_second` by default.
    #[serde(default)]
    pub burst: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    #[serde(default = "default_method")]
    pub method: String,
    /// URL template, e.g. `{{base_url}}/tasks`.
    pub url: String,
    /// Body template: a table whose string leaves may hold `{{placeholders}}`. Without it the
    /// approved payload is sent as it is.
    #[serde(default)]
    pub body: Option<toml::Value>,
    /// How the body is written: `json` (default), `form` or `raw`.
    #[serde(default)]
    pub format: BodyFormat,
    /// The `Content-Type` of a `raw` body (required there).
    #[serde(default)]
    pub content_type: Option<String>,
    /// JSON pointer to the created record's id in the response, e.g. `/id`.
    #[serde(default = "default_id_pointer")]
    pub id_pointer: String,
    /// A response header that names the created record, e.g. `Location`: its last path segment
    /// is the id, or what remains once `id_prefix` and `id_suffix` are stripped. Tried before
    /// the JSON pointer.
    #[serde(default)]
    pub id_header: Option<String>,
    #[serde(default)]
    pub id_prefix: Option<String>,
    #[serde(default)]
    pub id_suffix: Option<String>,
}

/// The request that changes an existing record: the templates may use `{{destination_id}}`, the
/// id of the record the updated action created.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateRequest {
    #[serde(default = "default_update_method")]
    pub method: String,
    /// URL template, e.g. `{{base_url}}/tasks/{{destination_id}}`.
    pub url: String,
    /// Body template, as for create; without it the approved payload is sent as it is.
    #[serde(default)]
    pub body: Option<toml::Value>,
    /// How the body is written, as for create.
    #[serde(default)]
    pub format: BodyFormat,
    #[serde(default)]
    pub content_type: Option<String>,
    /// `"if-match"`: the request carries `If-Match` with the version the destination answered
    /// this ledger's last write of the record with, and a refusal (412) sends the update to
    /// `conflict` instead of overwriting a change made at the destination. Without it the update
    /// is unconditional: it overwrites whatever the destination holds.
    #[serde(default)]
    pub conditional: Option<crate::domain::UpdateCondition>,
    /// JSON pointer to the record's version (its entity tag) in the answer to a create or an
    /// update, e.g. `/version`; kept with the attempt's evidence. Needed by `conditional`.
    #[serde(default)]
    pub version_pointer: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Idempotency {
    /// The header that carries the action key, e.g. `Idempotency-Key`.
    pub header: String,
    /// How long the destination remembers a key, e.g. `24h`.
    #[serde(with = "duration_text")]
    pub retention: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lookup {
    /// URL template that finds records by external reference, e.g.
    /// `{{base_url}}/records?external_ref={{external_ref}}`.
    pub url: String,
    /// JSON pointer to the list of matching records; without it the response is one record and
    /// 404 means none.
    #[serde(default)]
    pub records_pointer: Option<String>,
    /// JSON pointer to a record's id, relative to the record.
    #[serde(default = "default_id_pointer")]
    pub id_pointer: String,
    /// JSON pointers compared between the body sent and the record found; a difference makes
    /// the found record a mismatch (`conflict`).
    #[serde(default)]
    pub compare: Vec<String>,
    /// How long after an uncertain send to wait before a lookup may conclude anything, so a
    /// request still in flight at the destination is not mistaken for no record.
    #[serde(default = "default_settle", with = "duration_text")]
    pub settle: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fencing {
    /// The header that carries the ownership version, for destinations that reject obsolete
    /// writers.
    pub header: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum HeaderValue {
    /// Read from an environment variable when the worker starts.
    Env {
        env: String,
        #[serde(default)]
        prefix: String,
    },
    Literal {
        value: String,
    },
}

fn default_external_ref() -> String {
    "{{key}}".to_owned()
}
fn default_method() -> String {
    "POST".to_owned()
}
fn default_update_method() -> String {
    "PATCH".to_owned()
}
/// Where a record's id is read when the configuration names no pointer.
pub const DEFAULT_ID_POINTER: &str = "/id";
fn default_id_pointer() -> String {
    DEFAULT_ID_POINTER.to_owned()
}
fn default_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_connect_timeout() -> Duration {
    Duration::from_secs(3)
}
// The retry budget's defaults are the domain's, so that an action whose destination is not
// configured here is bounded exactly as a configured one that names none.
fn default_max_attempts() -> i64 {
    crate::domain::RetryPolicy::default().max_attempts
}
fn default_backoff_base() -> Duration {
    crate::domain::RetryPolicy::default().backoff_base
}
fn default_backoff_max() -> Duration {
    crate::domain::RetryPolicy::default().backoff_max
}
fn default_max_response_bytes() -> usize {
    64 * 1024
}
fn default_settle() -> Duration {
    Duration::from_secs(2)
}

/// A destination performed by an automation of its own (a script, a flow in an automation
/// platform) that asks the ledger through `serve` before it acts and reports what happened: the
/// same declarations as a destination the worker sends to, without the requests.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorConfig {
    /// The destination takes an idempotency key (the automation sends the one `:begin` answers,
    /// in this header) and remembers it this long.
    #[serde(default)]
    pub idempotency: Option<Idempotency>,
    /// The destination refuses obsolete writers given the ownership version (the automation sends
    /// the one `:begin` answers, in this header).
    #[serde(default)]
    pub fencing: Option<Fencing>,
    #[serde(default = "default_max_attempts")]
    pub max_attempts: i64,
    #[serde(default = "default_backoff_base", with = "duration_text")]
    pub backoff_base: Duration,
    #[serde(default = "default_backoff_max", with = "duration_text")]
    pub backoff_max: Duration,
    /// Who reviews this destination's actions that need a person.
    #[serde(default)]
    pub review_owner: Option<String>,
    /// How the ledger itself finds the record the automation made, by the action's external
    /// reference: an automation that stopped between acting and `:finish` is then settled by
    /// what the destination holds, not held for a person. As a destination's `lookup`; its
    /// `compare` pointers are read in the payload.
    #[serde(default)]
    pub lookup: Option<Lookup>,
    /// Substituted for `{{base_url}}` in the lookup's URL.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The destination's unique external reference for an action; `{{key}}` by default.
    #[serde(default = "default_external_ref")]
    pub external_ref: String,
    /// Headers the lookup request carries, as a destination's `headers`.
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValue>,
    #[serde(default)]
    pub secret_headers: Vec<String>,
    #[serde(default = "default_timeout", with = "duration_text")]
    pub timeout: Duration,
    #[serde(default = "default_connect_timeout", with = "duration_text")]
    pub connect_timeout: Duration,
}

impl ExecutorConfig {
    fn check(&self) -> Result<(), DestinationSettingError> {
        let has_lookup_settings =
            self.base_url.is_some() || !self.headers.is_empty() || !self.secret_headers.is_empty();
        if self.lookup.is_none() && has_lookup_settings {
            return Err(DestinationSettingError::NoLookupForSettings);
        }
        self.lookup_destination().check_requests()
    }

    /// What the ledger asks this executor's destination with: a destination that sends nothing
    /// (no create request), only its lookup; the worker never claims its actions.
    pub fn lookup_destination(&self) -> DestinationConfig {
        DestinationConfig {
            base_url: self.base_url.clone(),
            create: None,
            update: None,
            external_ref: self.external_ref.clone(),
            idempotency: self.idempotency.clone(),
            lookup: self.lookup.clone(),
            fencing: self.fencing.clone(),
            headers: self.headers.clone(),
            timeout: self.timeout,
            connect_timeout: self.connect_timeout,
            max_attempts: self.max_attempts,
            backoff_base: self.backoff_base,
            backoff_max: self.backoff_max,
            max_response_bytes: default_max_response_bytes(),
            rate_limit: None,
            secret_headers: self.secret_headers.clone(),
            review_owner: self.review_owner.clone(),
        }
    }
}

/// Why a configuration cannot be used. It is the user's input: a usage error.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    /// The file was read, and what it says cannot be used.
    #[error("{}: {source}", path.display())]
    InFile { path: PathBuf, source: Box<ConfigError> },
    /// Not TOML, or not the fields and types a configuration has.
    #[error("{0}")]
    Syntax(#[from] toml::de::Error),
    #[error("worker.concurrency is {0}; give 1 to 256")]
    Concurrency(usize),
    #[error("worker.batch is {0}; give 1 to {MAX_BATCH}", MAX_BATCH = MAX_BATCH)]
    Batch(usize),
    #[error("worker.lease must be at least 1s")]
    LeaseTooShort,
    #[error("worker.default_destination {0:?} is not a configured destination")]
    UnknownDefaultDestination(String),
    /// A destination name that names may not be.
    #[error(transparent)]
    DestinationName(#[from] InputError),
    /// One destination's settings are inconsistent.
    #[error("destination {name}: {problem}")]
    Destination { name: String, problem: DestinationSettingError },
    /// One executor's settings are inconsistent.
    #[error("executor {name}: {problem}")]
    Executor { name: String, problem: DestinationSettingError },
    /// A name declared both as a destination the worker sends to and as an executor's.
    #[error(
        "{0} is both [destinations.{0}] and [executors.{0}]: an action's destination is performed either by the \
         worker or by an automation through serve, so keep one"
    )]
    DestinationAndExecutor(String),
    /// One webhook intake's settings cannot be used.
    #[error("intake {name}: {problem}")]
    Intake { name: String, problem: IntakeSettingError },
    /// A review owner that is not a person's name.
    #[error("{place}: review owner {owner:?}: {problem}")]
    ReviewOwner { place: String, owner: String, problem: InputError },
    /// A `[[review_owners]]` prefix that is empty or given twice.
    #[error("review_owners: prefix {0:?} is empty or given twice")]
    ReviewOwnerPrefix(String),
}

/// What is wrong with one webhook intake's settings.
#[derive(Debug, thiserror::Error)]
pub enum IntakeSettingError {
    /// A template names a placeholder a request cannot fill.
    #[error("{field}: {problem}")]
    Template { field: &'static str, problem: crate::template::HookTemplateError },
    /// The declared destination's name is invalid.
    #[error(transparent)]
    Destination(#[from] InputError),
    #[error("{0:?} is not a valid header name")]
    HeaderName(String),
    #[error("signature.secret_env names no environment variable")]
    NoSecretEnv,
    #[error("signature.header is needed: the header the sender puts its signature in")]
    NoSignatureHeader,
    /// A setting the named scheme fixes itself, such as the header Stripe signs in.
    #[error("signature.{setting} is set by the scheme {scheme}; remove it")]
    SchemeSetting { scheme: &'static str, setting: &'static str },
    #[error("ignore: field {0:?} is neither header.NAME nor body.PATH")]
    IgnoreField(String),
    /// A signed intake's key or source version read from a header the signature does not cover:
    /// anyone holding one signed body could replay it under other keys (`X-Order-Ref: A1`, `A2`,
    /// ...) or versions, each accepted as signed.
    #[error(
        "{field} reads the header {header}, which the signature does not cover: a signed intake builds its key \
         and source version from the signed body (or the signature's timestamp header) only, or one signed body \
         could be replayed under other keys"
    )]
    UnsignedHeader { field: &'static str, header: String },
}

/// What is wrong with one destination's settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationSettingError {
    #[error("create.method {0:?} is not an HTTP method")]
    Method(String),
    #[error("update.method {0:?} is not an HTTP method")]
    UpdateMethod(String),
    #[error("{0:?} is not a JSON pointer (it must start with /)")]
    Pointer(String),
    #[error("max_attempts must be at least 1")]
    MaxAttempts,
    #[error("idempotency.retention must be longer than zero")]
    ZeroRetention,
    #[error("{0:?} is not a valid header name")]
    HeaderName(String),
    #[error("header {header} needs the environment variable {env}, which is not set")]
    MissingEnv { header: String, env: String },
    #[error("{request}.format = \"raw\" needs a content_type and a body that is one text template")]
    RawBody { request: &'static str },
    #[error("{request}.format = \"form\" needs a body that is a table (or none: the payload object)")]
    FormBody { request: &'static str },
    #[error("{request}.content_type {value:?} is not a valid header value")]
    ContentType { request: &'static str, value: String },
    #[error("rate_limit.per_second and rate_limit.burst must be at least 1")]
    RateLimit,
    #[error("max_response_bytes must be at least 1024")]
    MaxResponseBytes,
    #[error(
        "update.conditional = \"if-match\" needs update.version_pointer: where the answers name the record's version"
    )]
    NoVersionPointer,
    #[error(
        "no create request: give [destinations.NAME.create] with its url (an effect an automation performs itself is declared as [executors.NAME])"
    )]
    NoCreate,
    #[error("base_url, headers and secret_headers are what the lookup request uses, and no lookup is declared")]
    NoLookupForSettings,
}

impl Config {
    /// Reads and checks a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        Self::parse(&text).map_err(|e| ConfigError::InFile { path: path.to_owned(), source: Box::new(e) })
    }

    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let config: Self = toml::from_str(text)?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ConfigError> {
        if self.worker.concurrency == 0 || self.worker.concurrency > 256 {
            return Err(ConfigError::Concurrency(self.worker.concurrency));
        }
        if self.worker.batch == 0 || self.worker.batch > MAX_BATCH {
            return Err(ConfigError::Batch(self.worker.batch));
        }
        if self.worker.lease < Duration::from_secs(1) {
            return Err(ConfigError::LeaseTooShort);
        }
        if let Some(default) = &self.worker.default_destination
            && !self.destinations.contains_key(default)
        {
            return Err(ConfigError::UnknownDefaultDestination(default.clone()));
        }
        for (name, destination) in &self.destinations {
            validate_destination_name(name)?;
            destination.check().map_err(|problem| ConfigError::Destination { name: name.clone(), problem })?;
        }
        for (name, executor) in &self.executors {
            validate_destination_name(name)?;
            executor.check().map_err(|problem| ConfigError::Executor { name: name.clone(), problem })?;
            if self.destinations.contains_key(name) {
                return Err(ConfigError::DestinationAndExecutor(name.clone()));
            }
        }
        for (name, intake) in &self.intake {
            validate_destination_name(name)?;
            intake.check().map_err(|problem| ConfigError::Intake { name: name.clone(), problem })?;
        }
        self.review_owner_rules()?;
        Ok(())
    }

    /// Who reviews what, as the ledger routes actions that need a person: each owner checked
    /// as a person's name, each prefix given once.
    pub fn review_owner_rules(&self) -> Result<ReviewOwners, ConfigError> {
        let person = |place: String, owner: &str| {
            Person::parse(owner).map_err(|problem| ConfigError::ReviewOwner { place, owner: owner.to_owned(), problem })
        };
        let mut owners = ReviewOwners::default();
        for (name, destination) in &self.destinations {
            if let Some(owner) = &destination.review_owner {
                let owner = person(format!("destination {name}"), owner)?;
                owners.by_destination.insert(name.clone(), owner.as_str().to_owned());
            }
        }
        for (name, executor) in &self.executors {
            if let Some(owner) = &executor.review_owner {
                let owner = person(format!("executor {name}"), owner)?;
                owners.by_destination.insert(name.clone(), owner.as_str().to_owned());
            }
        }
        for rule in &self.review_owners {
            let owner = person(format!("review_owners prefix {:?}", rule.prefix), &rule.owner)?;
            if rule.prefix.is_empty() || owners.by_prefix.iter().any(|(prefix, _)| *prefix == rule.prefix) {
                return Err(ConfigError::ReviewOwnerPrefix(rule.prefix.clone()));
            }
            owners.by_prefix.push((rule.prefix.clone(), owner.as_str().to_owned()));
        }
        Ok(owners)
    }

    /// The configured destination names.
    pub fn destination_names(&self) -> Vec<String> {
        self.destinations.keys().cloned().collect()
    }
}

impl IntakeConfig {
    /// Checks what can be checked before a body arrives: the templates' placeholders, the
    /// header names, the destination's name. The secret is read when `serve` starts.
    fn check(&self) -> Result<(), IntakeSettingError> {
        let templates = std::iter::once(("key", &self.key))
            .chain(self.event_id.as_ref().map(|t| ("event_id", t)))
            .chain(self.source_version.as_ref().map(|t| ("source_version", t)));
        for (field, template) in templates {
            crate::template::intake_placeholders(template)
                .map_err(|problem| IntakeSettingError::Template { field, problem })?;
        }
        if let Some(destination) = &self.destination {
            validate_destination_name(destination)?;
        }
        for rule in &self.ignore {
            rule.check()?;
        }
        if let Some(signature) = &self.signature {
            signature.check()?;
            // The event id may come from any header: it names a delivery, not an action, so a
            // forged one records one more delivery of the same signed action and changes nothing.
            let identity =
                std::iter::once(("key", &self.key)).chain(self.source_version.as_ref().map(|t| ("source_version", t)));
            for (field, template) in identity {
                let headers = crate::template::intake_headers(template)
                    .map_err(|problem| IntakeSettingError::Template { field, problem })?;
                let signed =
                    |header: &&str| signature.signed_headers().iter().any(|signed| signed.eq_ignore_ascii_case(header));
                if let Some(header) = headers.into_iter().find(|header| !signed(header)) {
                    return Err(IntakeSettingError::UnsignedHeader { field, header: header.to_owned() });
                }
            }
        }
        Ok(())
    }
}

impl DestinationConfig {
    fn check(&self) -> Result<(), DestinationSettingError> {
        let create = self.create.as_ref().ok_or(DestinationSettingError::NoCreate)?;
        reqwest::Method::from_bytes(create.method.as_bytes())
            .map_err(|_| DestinationSettingError::Method(create.method.clone()))?;
        check_body("create", create.format, create.content_type.as_deref(), create.body.as_ref())?;
        if let Some(name) = &create.id_header {
            reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| DestinationSettingError::HeaderName(name.clone()))?;
        }
        self.check_requests()
    }

    /// Everything but the create request: what a lookup-only destination (an executor's) needs too.
    fn check_requests(&self) -> Result<(), DestinationSettingError> {
        if let Some(update) = &self.update {
            reqwest::Method::from_bytes(update.method.as_bytes())
                .map_err(|_| DestinationSettingError::UpdateMethod(update.method.clone()))?;
            if update.conditional.is_some() && update.version_pointer.is_none() {
                return Err(DestinationSettingError::NoVersionPointer);
            }
        }
        for pointer in self
            .create
            .iter()
            .map(|c| &c.id_pointer)
            .chain(self.lookup.iter().flat_map(|l| l.records_pointer.iter().chain([&l.id_pointer]).chain(&l.compare)))
            .chain(self.update.iter().flat_map(|u| u.version_pointer.iter()))
        {
            if !pointer.is_empty() && !pointer.starts_with('/') {
                return Err(DestinationSettingError::Pointer(pointer.clone()));
            }
        }
        if self.max_attempts < 1 {
            return Err(DestinationSettingError::MaxAttempts);
        }
        if let Some(update) = &self.update {
            check_body("update", update.format, update.content_type.as_deref(), update.body.as_ref())?;
        }
        if let Some(limit) = &self.rate_limit
            && (limit.per_second == 0 || limit.burst == Some(0))
        {
            return Err(DestinationSettingError::RateLimit);
        }
        if self.max_response_bytes < 1024 {
            return Err(DestinationSettingError::MaxResponseBytes);
        }
        let protocol_headers = self.idempotency.iter().map(|i| &i.header).chain(self.fencing.iter().map(|f| &f.header));
        for name in self.secret_headers.iter().chain(protocol_headers) {
            reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| DestinationSettingError::HeaderName(name.clone()))?;
        }
        if let Some(idempotency) = &self.idempotency
            && idempotency.retention.is_zero()
        {
            return Err(DestinationSettingError::ZeroRetention);
        }
        for (name, value) in &self.headers {
            reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| DestinationSettingError::HeaderName(name.clone()))?;
            if let HeaderValue::Env { env, .. } = value
                && std::env::var_os(env).is_none()
            {
                return Err(DestinationSettingError::MissingEnv { header: name.clone(), env: env.clone() });
            }
        }
        Ok(())
    }
}

/// A body format's needs: a raw body is one text with a content type, a form body a table.
fn check_body(
    request: &'static str,
    format: BodyFormat,
    content_type: Option<&str>,
    body: Option<&toml::Value>,
) -> Result<(), DestinationSettingError> {
    if let Some(value) = content_type
        && reqwest::header::HeaderValue::from_str(value).is_err()
    {
        return Err(DestinationSettingError::ContentType { request, value: value.to_owned() });
    }
    match format {
        BodyFormat::Raw if content_type.is_none() || !matches!(body, Some(toml::Value::String(_))) => {
            Err(DestinationSettingError::RawBody { request })
        }
        BodyFormat::Form if !matches!(body, None | Some(toml::Value::Table(_))) => {
            Err(DestinationSettingError::FormBody { request })
        }
        _ => Ok(()),
    }
}

/// Durations as people write them: `500ms`, `30s`, `5m`, `24h`, `7d`, and as humantime reads
/// them besides (`1h 30m`, `90min`, `2 days`, `1.5h`).
pub mod duration_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Why a text is not a duration.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    pub enum DurationError {
        #[error("{0:?} is not a duration such as 30s, 5m or 24h")]
        NotANumber(String),
        #[error("{0:?} has no known unit; use ms, s, m, h or d")]
        UnknownUnit(String),
        #[error("{0:?} is too long; at most 36500d (100 years)")]
        TooLong(String),
        #[error("{0:?} is finer than a millisecond, the finest a duration here is kept to")]
        FinerThanAMillisecond(String),
    }

    /// The longest duration accepted anywhere (a lease, a window, a period): 100 years. Every
    /// time the ledger computes from one (now plus a lease, now minus a period) stays far inside
    /// what a timestamp can hold, so no user-given duration can overflow a time.
    pub const MAX: Duration = Duration::from_hours(24 * 36_500);

    pub fn parse(text: &str) -> Result<Duration, DurationError> {
        let text = text.trim();
        let duration = humantime::parse_duration(text).map_err(|error| match error {
            humantime::DurationError::UnknownUnit { .. } => DurationError::UnknownUnit(text.to_owned()),
            humantime::DurationError::NumberOverflow => DurationError::TooLong(text.to_owned()),
            humantime::DurationError::InvalidCharacter(_)
            | humantime::DurationError::NumberExpected(_)
            | humantime::DurationError::Empty => DurationError::NotANumber(text.to_owned()),
        })?;
        if duration > MAX {
            return Err(DurationError::TooLong(text.to_owned()));
        }
        // `format` and every store keep milliseconds: a finer duration would read back as another.
        if duration.subsec_nanos() % 1_000_000 != 0 {
            return Err(DurationError::FinerThanAMillisecond(text.to_owned()));
        }
        Ok(duration)
    }

    pub fn format(duration: Duration) -> String {
        let ms = duration.as_millis();
        match ms {
            0 => "0s".to_owned(),
            ms if ms % 86_400_000 == 0 && ms > 86_400_000 => format!("{}d", ms / 86_400_000),
            ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
            ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
            ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
            ms => format!("{ms}ms"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse(&text).map_err(serde::de::Error::custom)
    }

    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format(*duration))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
        [worker]
        lease = "20s"
        concurrency = 8

        [destinations.crm]
        base_url = "http://127.0.0.1:8787"
        create = { url = "{{base_url}}/records", body = { external_ref = "{{external_ref}}", data = "{{payload}}" } }
        idempotency = { header = "Idempotency-Key", retention = "24h" }
        lookup = { url = "{{base_url}}/records?external_ref={{external_ref}}", records_pointer = "/records" }
        headers = { X-Team = { value = "ops" } }
    "#;

    #[test]
    fn parses_a_destination() {
        let config = Config::parse(EXAMPLE).unwrap();
        assert_eq!(config.worker.lease, Duration::from_secs(20));
        let crm = &config.destinations["crm"];
        assert_eq!(crm.idempotency.as_ref().unwrap().retention, Duration::from_hours(24));
        assert_eq!(crm.create.as_ref().unwrap().method, "POST");
        assert_eq!(crm.lookup.as_ref().unwrap().settle, Duration::from_secs(2));
    }

    #[test]
    fn refuses_what_would_fail_later() {
        let bad = [
            (EXAMPLE.replace("24h", "soon"), "not a duration"),
            (EXAMPLE.replace("concurrency = 8", "concurrency = 0"), "concurrency"),
            (EXAMPLE.replace("concurrency = 8", "batch = 0"), "worker.batch is 0"),
            (EXAMPLE.replace("base_url =", "base_uri ="), "unknown field"),
            (
                EXAMPLE.replace("X-Team = { value = \"ops\" }", "Auth = { env = \"AL_TEST_UNSET_VAR\" }"),
                "AL_TEST_UNSET_VAR",
            ),
            (EXAMPLE.replace("[destinations.crm]", "[destinations.\"crm prod\"]"), "invalid"),
        ];
        for (text, expected) in bad {
            let error = Config::parse(&text).unwrap_err().to_string();
            assert!(error.contains(expected), "{expected}: {error}");
        }
    }

    #[test]
    fn an_executor_declares_its_protections_and_a_lookup_the_ledger_makes() {
        let config = Config::parse(
            r#"
            [executors.receipts]
            idempotency = { header = "Idempotency-Key", retention = "24h" }
            base_url = "https://mail.example"
            headers = { Authorization = { value = "Bearer t" } }
            lookup = { url = "{{base_url}}/sent?ref={{external_ref}}", records_pointer = "/items", settle = "5s" }
            "#,
        )
        .unwrap();
        let lookup = config.executors["receipts"].lookup_destination();
        assert!(lookup.create.is_none(), "nothing is sent to an executor's destination");
        assert_eq!(lookup.lookup.as_ref().unwrap().settle, Duration::from_secs(5));
        assert_eq!(lookup.external_ref, "{{key}}");
        let refused = [
            ("base_url = \"https://m\"", "no lookup is declared"),
            ("lookup = { url = \"x\", records_pointer = \"items\" }", "items"),
            ("lookup = { url = \"x\" }\nheaders = { \"bad header\" = { value = \"v\" } }", "bad header"),
            ("create = { url = \"x\" }", "unknown field `create`"),
        ];
        for (block, expected) in refused {
            let error = Config::parse(&format!("[executors.e]\n{block}")).unwrap_err().to_string();
            assert!(error.contains(expected), "{expected}: {error}");
        }
        let error = Config::parse("[destinations.d]\nbase_url = \"x\"").unwrap_err().to_string();
        assert!(error.contains("no create request") && error.contains("[executors.NAME]"), "{error}");
    }

    #[test]
    fn request_formats_ids_from_headers_and_paces() {
        let config = Config::parse(
            r#"
            [destinations.payments]
            rate_limit = { per_second = 10, burst = 5 }
            secret_headers = ["X-Api-Key"]
            create = { url = "http://p/v1/charges", format = "form", id_header = "Location", body = { amount = "{{payload.amount}}", customer = { name = "{{payload.name}}" } } }

            [destinations.notes]
            create = { url = "http://n/notes", format = "raw", content_type = "text/csv", body = "{{key}},{{payload.total}}" }
            "#,
        )
        .unwrap();
        let payments = &config.destinations["payments"];
        assert_eq!(payments.create.as_ref().unwrap().format, BodyFormat::Form);
        assert_eq!(payments.create.as_ref().unwrap().id_header.as_deref(), Some("Location"));
        assert_eq!(payments.rate_limit, Some(RateLimit { per_second: 10, burst: Some(5) }));
        assert_eq!(payments.max_response_bytes, 64 * 1024);
        assert_eq!(config.destinations["notes"].create.as_ref().unwrap().format, BodyFormat::Raw);
        let refused = [
            (r#"create = { url = "x", format = "raw", body = "t" }"#, "needs a content_type"),
            (r#"create = { url = "x", format = "raw", content_type = "text/plain", body = { a = 1 } }"#, "one text"),
            (r#"create = { url = "x", format = "form", body = "{{payload}}" }"#, "a table"),
            (r#"create = { url = "x", format = "xml" }"#, "unknown variant"),
            ("create = { url = \"x\" }\nrate_limit = { per_second = 0 }", "at least 1"),
            ("create = { url = \"x\" }\nmax_response_bytes = 10", "at least 1024"),
            ("create = { url = \"x\" }\nsecret_headers = [\"bad header\"]", "not a valid header name"),
        ];
        for (block, expected) in refused {
            let error = Config::parse(&format!("[destinations.d]\n{block}")).unwrap_err().to_string();
            assert!(error.contains(expected), "{expected}: {error}");
        }
    }

    #[test]
    fn a_file_names_itself_in_its_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("actionledger.toml");
        let missing = Config::load(&path).unwrap_err().to_string();
        assert!(missing.starts_with(&format!("cannot read {}: ", path.display())), "{missing}");
        std::fs::write(&path, EXAMPLE.replace("headers =", "max_attempts = 0\n        headers =")).unwrap();
        assert_eq!(
            Config::load(&path).unwrap_err().to_string(),
            format!("{}: destination crm: max_attempts must be at least 1", path.display())
        );
    }

    #[test]
    fn a_signed_intake_builds_its_key_from_signed_content_only() {
        let intake = |key: &str, version: &str| {
            format!(
                "[intake.shop]\nkey = \"{key}\"\nevent_id = \"{{{{header.X-Event-Id}}}}\"\nsource_version = \"{version}\"\n\
                 signature = {{ secret_env = \"S\", header = \"X-Sig\", timestamp_header = \"X-Ts\" }}\n"
            )
        };
        let refused =
            Config::parse(&intake("shop:order:{{header.X-Order-Ref}}", "{{body.v}}")).unwrap_err().to_string();
        assert!(
            refused.starts_with("intake shop: key reads the header X-Order-Ref, which the signature does not cover"),
            "{refused}"
        );
        let refused = Config::parse(&intake("shop:{{body.id}}", "{{header.X-Version}}")).unwrap_err().to_string();
        assert!(refused.starts_with("intake shop: source_version reads the header X-Version,"), "{refused}");
        // The body and the signed timestamp are covered; an event id may name the delivery from any header.
        assert!(Config::parse(&intake("shop:{{body.id}}:{{header.x-ts}}", "{{body.v}}")).is_ok());
        // Without a signature, nothing is signed and any header may be read.
        let unsigned = intake("shop:{{header.X-Order-Ref}}", "{{body.v}}");
        let unsigned = unsigned.lines().filter(|line| !line.starts_with("signature")).collect::<Vec<_>>().join("\n");
        assert!(Config::parse(&unsigned).is_ok());
    }

    #[test]
    fn a_named_signature_scheme_fixes_its_own_headers_and_may_sign_some() {
        let intake = |key: &str, signature: &str| {
            Config::parse(&format!("[intake.hooks]\nkey = \"{key}\"\nsignature = {{ {signature} }}\n"))
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let stripe = "scheme = \"stripe\", secret_env = [\"NEW\", \"OLD\"], delivery_id = \"{{body.id}}\"";
        assert_eq!(intake("s:{{body.id}}", stripe), Ok(()));
        assert_eq!(
            intake("s:{{body.id}}", "scheme = \"stripe\", secret_env = \"S\", header = \"Stripe-Signature\""),
            Err("intake hooks: signature.header is set by the scheme stripe; remove it".into())
        );
        assert_eq!(
            intake(
                "s:{{body.id}}",
                "scheme = \"standard-webhooks\", secret_env = \"S\", delivery_id = \"{{body.id}}\""
            ),
            Err("intake hooks: signature.delivery_id is set by the scheme standard-webhooks; remove it".into())
        );
        assert_eq!(
            intake("s:{{body.id}}", "secret_env = \"S\""),
            Err("intake hooks: signature.header is needed: the header the sender puts its signature in".into())
        );
        assert!(intake("s:{{body.id}}", "secret_env = []").unwrap_err().contains("names no environment variable"));
        assert!(
            intake("s:{{body.id}}", "scheme = \"paypal\", secret_env = \"S\"").unwrap_err().contains("unknown variant")
        );
        // What a scheme signs besides the body may build the key; other headers may not.
        let slack = "scheme = \"slack\", secret_env = \"S\"";
        assert_eq!(intake("s:{{body.id}}:{{header.x-slack-request-timestamp}}", slack), Ok(()));
        let standard = "scheme = \"standard-webhooks\", secret_env = \"S\"";
        assert_eq!(intake("s:{{header.webhook-id}}", standard), Ok(()));
        assert!(intake("s:{{header.X-Slack-Signature}}", slack).unwrap_err().contains("does not cover"));
        assert!(intake("s:{{header.webhook-id}}", stripe).unwrap_err().contains("does not cover"));
    }

    #[test]
    fn an_ignore_rule_names_a_header_or_a_body_field() {
        let rule = |field: &str| {
            Config::parse(&format!(
                "[intake.gh]\nkey = \"gh:{{{{body.id}}}}\"\n[[intake.gh.ignore]]\nfield = \"{field}\"\nequals = \"ping\"\n"
            ))
            .map(|config| config.intake["gh"].ignore.len())
            .map_err(|e| e.to_string())
        };
        assert_eq!(rule("header.X-GitHub-Event"), Ok(1));
        assert_eq!(rule("body.type"), Ok(1));
        assert_eq!(rule("body.data.object"), Ok(1));
        for wrong in ["type", "body.", "body.a..b", "header.bad header", "query.x"] {
            assert_eq!(
                rule(wrong),
                Err(format!("intake gh: ignore: field {wrong:?} is neither header.NAME nor body.PATH")),
                "{wrong}"
            );
        }
    }

    #[test]
    fn durations_round_trip() {
        for text in ["500ms", "30s", "5m", "24h", "7d"] {
            assert_eq!(duration_text::format(duration_text::parse(text).unwrap()), text);
        }
        // The forms humantime reads besides, each the same duration as its short form.
        for (text, short) in [("1h 30m", "90m"), ("90min", "90m"), ("2 days", "2d"), ("1.5h", "90m"), ("1w", "7d")] {
            assert_eq!(duration_text::parse(text), duration_text::parse(short), "{text}");
        }
        for (text, refused) in [
            ("5 fortnights", duration_text::DurationError::UnknownUnit("5 fortnights".into())),
            ("5", duration_text::DurationError::UnknownUnit("5".into())),
            ("soon", duration_text::DurationError::NotANumber("soon".into())),
            ("-5s", duration_text::DurationError::NotANumber("-5s".into())),
            ("", duration_text::DurationError::NotANumber(String::new())),
            ("500us", duration_text::DurationError::FinerThanAMillisecond("500us".into())),
        ] {
            assert_eq!(duration_text::parse(text), Err(refused), "{text:?}");
        }
        // At most 100 years, so that no time computed from a duration overflows.
        assert_eq!(duration_text::parse("36500d"), Ok(duration_text::MAX));
        for too_long in ["36501d", "10000000000000s", "18446744073709551615d"] {
            assert!(
                matches!(duration_text::parse(too_long), Err(duration_text::DurationError::TooLong(_))),
                "{too_long}"
            );
        }
    }
}
