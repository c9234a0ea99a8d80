//! Webhook intake: how `POST /v1/hooks/NAME` turns a sender's raw body into a submission, as its
//! `[intake.NAME]` block maps it; the signature that proves the sender ([`super::signature`]), the
//! deliveries it accepts and ignores, and the replays it refuses ([`super::replay`]).

use super::problem::Problem;
use super::replay::{Deliveries, Delivery, Replayed};
use super::signature::{SecretRefused, SignatureRefused, Verified, Verifier};
use crate::config::{IgnoreRule, IntakeConfig};
use crate::domain::{RawSubmission, SubmissionRefused, wide_integers_as_text};
use crate::template::{body_field, render_hook};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::BTreeMap;

pub use super::signature::sign;

/// One configured intake, with its secrets read from the environment.
#[derive(Debug)]
pub struct Intake {
    pub name: String,
    config: IntakeConfig,
    verifier: Option<Verifier>,
    deliveries: Deliveries,
}

/// Why an intake cannot start. A secret is never part of the message, only where it was read.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("intake {intake}: signature.secret_env {env} is not set (or is empty)")]
    MissingSecret { intake: String, env: String },
    #[error("intake {intake}: the secret in {env} {problem}")]
    UnusableSecret { intake: String, env: String, problem: SecretRefused },
}

/// What becomes of a delivery whose sender is proven.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Screened {
    /// To be mapped and submitted; the delivery as remembered against replays, where it is named.
    Deliver(Option<Delivery>),
    /// Answered 200 and not recorded: an `ignore` rule matched.
    Ignored { field: String, value: String },
}

impl Intake {
    /// The intake `name` as configured; its secrets are read from the environment now.
    pub fn new(name: &str, config: IntakeConfig) -> Result<Self, IntakeError> {
        let envs = config.signature.as_ref().map(|s| s.secret_env.clone()).unwrap_or_default();
        let secrets = envs
            .iter()
            .map(|env| {
                std::env::var(env)
                    .ok()
                    .filter(|s| !s.is_empty())
                    .map(String::into_bytes)
                    .ok_or_else(|| IntakeError::MissingSecret { intake: name.to_owned(), env: env.clone() })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let secrets: Vec<&[u8]> = secrets.iter().map(Vec::as_slice).collect();
        Self::build(name, config, &secrets, |at| envs[at].clone())
    }

    /// An intake with its secrets given rather than read from the environment.
    pub fn with_secrets(name: &str, config: IntakeConfig, secrets: &[&[u8]]) -> Result<Self, IntakeError> {
        Self::build(name, config, secrets, |at| format!("secret {}", at + 1))
    }

    /// An intake with its one secret given, for tests; `None` drops the signature, and the
    /// intake then takes a token as an unsigned one does.
    pub fn with_secret(name: &str, config: IntakeConfig, secret: Option<&[u8]>) -> Self {
        match secret {
            Some(secret) => Self::with_secrets(name, config, &[secret]).expect("a test's secret suits its scheme"),
            None => Self::build(name, IntakeConfig { signature: None, ..config }, &[], |_| String::new())
                .expect("an unsigned intake needs no secret"),
        }
    }

    fn build(
        name: &str,
        config: IntakeConfig,
        secrets: &[&[u8]],
        place: impl Fn(usize) -> String,
    ) -> Result<Self, IntakeError> {
        let verifier =
            config.signature.as_ref().map(|signature| Verifier::new(signature, secrets)).transpose().map_err(
                |(at, problem)| IntakeError::UnusableSecret { intake: name.to_owned(), env: place(at), problem },
            )?;
        let window = config.signature.as_ref().map(|s| s.tolerance).unwrap_or_default();
        Ok(Self { name: name.to_owned(), config, verifier, deliveries: Deliveries::new(window) })
    }

    /// Whether the sender proves itself with a signature; otherwise with a bearer token.
    pub fn is_signed(&self) -> bool {
        self.verifier.is_some()
    }

    /// Checks the delivery's signature against each of the intake's secrets, and its signed
    /// timestamp against `now` (Unix seconds) where the scheme signs one.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<Verified, SignatureRefused> {
        match &self.verifier {
            Some(verifier) => verifier.verify(headers, body, now),
            None => Ok(Verified::default()),
        }
    }

    /// What becomes of a proven delivery: ignored by a rule, refused as a replay of one accepted
    /// before, or to be mapped (and then remembered, when the intake names its deliveries).
    pub fn screen(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        verified: &Verified,
        now: i64,
    ) -> Result<Screened, Replayed> {
        let delivery_template = self.config.signature.as_ref().and_then(|s| s.delivery_id.as_deref());
        if self.config.ignore.is_empty() && delivery_template.is_none() && verified.delivery_id.is_none() {
            return Ok(Screened::Deliver(None));
        }
        let value = json_body(body).map_or(Value::Null, |(value, _)| value);
        let texts = header_texts(headers);
        if let Some(rule) = self.config.ignore.iter().find(|rule| ignores(rule, &value, headers)) {
            return Ok(Screened::Ignored { field: rule.field.clone(), value: rule.equals.clone() });
        }
        // A delivery whose id cannot be read is left to the mapping, which names what is missing.
        let id = verified
            .delivery_id
            .clone()
            .or_else(|| delivery_template.and_then(|template| render_hook(template, &value, &texts).ok()));
        let Some(id) = id else { return Ok(Screened::Deliver(None)) };
        let delivery = Delivery { id, timestamp: verified.timestamp };
        self.deliveries.accept(&delivery, now)?;
        Ok(Screened::Deliver(Some(delivery)))
    }

    /// Forgets a delivery accepted but not recorded (the ledger's database failed), so that it
    /// can be sent again.
    pub fn forget(&self, delivery: &Delivery) {
        self.deliveries.forget(delivery);
    }

    /// Maps a body to a submission; a body the mapping cannot use is refused, with what the
    /// mapping could read (the event id too when only the key failed), for the refused
    /// submissions' list.
    pub fn map(&self, headers: &HeaderMap, body: &[u8]) -> Result<RawSubmission, Box<Unmapped>> {
        let mut raw = RawSubmission {
            source: Some(self.config.source.clone().unwrap_or_else(|| self.name.clone())),
            destination: self.config.destination.clone(),
            ..RawSubmission::default()
        };
        let refuse = |raw: &RawSubmission, message: String, field: Option<String>| {
            Box::new(Unmapped {
                raw: raw.clone(),
                refusal: SubmissionRefused { problem: "hook_unmapped", message },
                field,
            })
        };
        let (value, whole) = match json_body(body) {
            Ok(read) => read,
            Err(e) => return Err(refuse(&raw, format!("the intake {} needs a JSON body: {e}", self.name), None)),
        };
        let headers = header_texts(headers);
        let fill = |field: &str, template: &str| {
            render_hook(template, &value, &headers).map_err(|e| {
                let message = format!(
                    "the intake {} cannot make the {field} from this body: {e} (template {template:?})",
                    self.name
                );
                (message, e.field())
            })
        };
        let key = fill("key", &self.config.key);
        let event_id = self.config.event_id.as_ref().map(|template| fill("event id", template)).transpose();
        let version = self.config.source_version.as_ref().map(|template| fill("source version", template)).transpose();
        // What could be read is kept with a refusal, so a reviewer can find the delivery.
        raw.key = key.as_ref().ok().cloned();
        raw.event_id = event_id.as_ref().ok().cloned().flatten();
        let failed = |(message, field)| refuse(&raw, message, field);
        key.map_err(failed)?;
        event_id.map_err(failed)?;
        if let Some(text) = version.map_err(failed)? {
            raw.source_version = Some(text.trim().parse().map_err(|_| {
                refuse(
                    &raw,
                    format!("the intake {}'s source version is {text:?}, not a whole number", self.name),
                    self.config.source_version.as_deref().and_then(single_field),
                )
            })?);
        }
        raw.payload = match &self.config.payload {
            // The body as sent, byte for byte but for its integers beyond what a float keeps: its
            // numbers and text are fingerprinted as they are.
            None => whole.into_owned(),
            Some(fields) => {
                let mut payload = Value::Object(serde_json::Map::new());
                for path in fields {
                    let found = body_field(&value, path).ok_or_else(|| {
                        refuse(
                            &raw,
                            format!("the intake {}'s payload needs the body field {path}, which is missing", self.name),
                            Some(format!("body.{path}")),
                        )
                    })?;
                    place(&mut payload, path, found);
                }
                payload.to_string().into_bytes()
            }
        };
        Ok(raw)
    }
}

/// A webhook body the intake's mapping cannot use: what the mapping could read, why the body is
/// refused, and the field to blame where one is (`body.id`, `header.X-Event-Id`).
#[derive(Debug, Clone)]
pub struct Unmapped {
    pub raw: RawSubmission,
    pub refusal: SubmissionRefused,
    pub field: Option<String>,
}

/// The field a template made of one placeholder reads (`{{body.version}}` reads `body.version`).
fn single_field(template: &str) -> Option<String> {
    let name = template.trim().strip_prefix("{{")?.strip_suffix("}}")?.trim();
    (!name.contains("{{")).then(|| name.to_owned())
}

/// Puts `value` at the dotted `path` of `payload`, making the objects on the way.
fn place(payload: &mut Value, path: &str, value: Value) {
    let mut at = payload;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        if !at.is_object() {
            *at = Value::Object(serde_json::Map::new());
        }
        let map = at.as_object_mut().expect("made an object above");
        if i + 1 == parts.len() {
            map.insert((*part).to_owned(), value);
            return;
        }
        at = map.entry((*part).to_owned()).or_insert_with(|| Value::Object(serde_json::Map::new()));
    }
}

/// The request's headers by lower-case name (the first value of each), for templates.
fn header_texts(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut texts = BTreeMap::new();
    for (name, value) in headers {
        if let Ok(value) = value.to_str() {
            texts.entry(name.as_str().to_owned()).or_insert_with(|| value.to_owned());
        }
    }
    texts
}

/// A webhook's JSON body as the intake reads it, and as its whole-body payload is recorded: each
/// integer beyond ±(2^53 - 1) as a string of its exact digits (see [`wide_integers_as_text`]).
fn json_body(body: &[u8]) -> Result<(Value, Cow<'_, [u8]>), serde_json::Error> {
    let value: Value = serde_json::from_slice(body)?;
    let text = std::str::from_utf8(body).expect("JSON that parses is UTF-8");
    match wide_integers_as_text(text) {
        Cow::Borrowed(_) => Ok((value, Cow::Borrowed(body))),
        Cow::Owned(wide) => Ok((serde_json::from_str(&wide)?, Cow::Owned(wide.into_bytes()))),
    }
}

/// Whether `rule` ignores a delivery: its field holds exactly the rule's text (a number as JSON
/// writes it).
fn ignores(rule: &IgnoreRule, body: &Value, headers: &HeaderMap) -> bool {
    if let Some(name) = rule.field.strip_prefix("header.") {
        return headers.get_all(name).iter().any(|value| value.to_str().is_ok_and(|text| text.trim() == rule.equals));
    }
    let Some(path) = rule.field.strip_prefix("body.") else { return false };
    match body_field(body, path) {
        Some(Value::String(text)) => text == rule.equals,
        Some(Value::Number(number)) => number.to_string() == rule.equals,
        _ => false,
    }
}

/// The answer to an ignored delivery: 200, saying which rule and that nothing was recorded.
pub fn ignored_response(intake: &str, field: &str, value: &str) -> axum::response::Response {
    let document = json!({
        "outcome": "ignored",
        "intake": intake,
        "field": field,
        "equals": value,
        "detail": format!("the intake {intake} ignores deliveries whose {field} is {value:?}; nothing was recorded"),
    });
    axum::response::IntoResponse::into_response((
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        document.to_string(),
    ))
}

impl From<Replayed> for Problem {
    fn from(replayed: Replayed) -> Self {
        Self::new(StatusCode::CONFLICT, "replayed_delivery", "Delivery already received", replayed.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn intake(extra: &str) -> Intake {
        let config = Config::parse(&format!(
            "[intake.shop]\nkey = \"shop:order:{{{{body.id}}}}:create-task\"\n\
             event_id = \"{{{{header.X-Event-Id}}}}\"\nsource_version = \"{{{{body.version}}}}\"\n{extra}"
        ))
        .unwrap();
        Intake::with_secret("shop", config.intake["shop"].clone(), Some(b"k"))
    }

    #[test]
    fn a_body_maps_to_a_submission() {
        let mut headers = HeaderMap::new();
        headers.insert("x-event-id", "ev-7".parse().unwrap());
        let raw = intake("payload = [\"id\", \"customer.email\"]")
            .map(&headers, br#"{"id": 42, "version": 3, "customer": {"email": "a@b.c", "x": 1}}"#)
            .unwrap();
        assert_eq!(raw.key.as_deref(), Some("shop:order:42:create-task"));
        assert_eq!((raw.event_id.as_deref(), raw.source_version), (Some("ev-7"), Some(3)));
        assert_eq!(raw.source.as_deref(), Some("shop"));
        assert_eq!(String::from_utf8(raw.payload).unwrap(), r#"{"customer":{"email":"a@b.c"},"id":42}"#);
        let refused = intake("").map(&headers, br#"{"version": 3}"#).unwrap_err();
        assert_eq!(refused.refusal.problem, "hook_unmapped");
        assert!(refused.refusal.message.contains("the body has no field id"), "{}", refused.refusal.message);
        assert_eq!(refused.field.as_deref(), Some("body.id"));
        assert_eq!(refused.raw.event_id.as_deref(), Some("ev-7"), "the event id is kept with the refusal");
        let refused = intake("").map(&headers, br#"{"id": 1, "version": "x"}"#).unwrap_err();
        assert!(refused.refusal.message.contains("not a whole number"), "{}", refused.refusal.message);
        assert_eq!(refused.field.as_deref(), Some("body.version"));
    }

    #[test]
    fn missing_values_are_refused_naming_their_field() {
        let mut headers = HeaderMap::new();
        headers.insert("x-event-id", "ev-8".parse().unwrap());
        for (body, field, words) in [
            (r#"{"id": null, "version": 1}"#, "body.id", "the body field id is null"),
            (r#"{"id": "", "version": 1}"#, "body.id", "the body field id is empty"),
            (r#"{"id": {"n": 1}, "version": 1}"#, "body.id", "the body field id is an object"),
            (r#"{"id": 1, "version": null}"#, "body.version", "the body field version is null"),
            (r#"{"id": 1}"#, "body.version", "the body has no field version"),
        ] {
            let refused = intake("").map(&headers, body.as_bytes()).unwrap_err();
            assert_eq!(refused.field.as_deref(), Some(field), "{body}");
            assert!(refused.refusal.message.contains(words), "{body}: {}", refused.refusal.message);
            assert_eq!(refused.raw.event_id.as_deref(), Some("ev-8"), "{body}");
        }
        let mut empty = HeaderMap::new();
        empty.insert("x-event-id", "".parse().unwrap());
        let refused = intake("").map(&empty, br#"{"id": 1, "version": 1}"#).unwrap_err();
        assert_eq!(refused.field.as_deref(), Some("header.X-Event-Id"));
        assert_eq!(refused.raw.key.as_deref(), Some("shop:order:1:create-task"), "the key is kept with the refusal");
        assert_eq!(refused.raw.event_id, None);
    }

    #[test]
    fn signatures_are_checked_with_their_timestamp() {
        let shop = intake(
            "signature = { secret_env = \"SHOP_SECRET\", header = \"X-Sig\", prefix = \"sha256=\", \
             timestamp_header = \"X-Ts\", tolerance = \"5m\" }",
        );
        let config = shop.config.signature.clone().unwrap();
        let body = br#"{"id":1,"version":1}"#;
        let headers = |sig: &str, ts: i64| {
            let mut h = HeaderMap::new();
            h.insert("x-sig", sig.parse().unwrap());
            h.insert("x-ts", ts.to_string().parse().unwrap());
            h
        };
        let good = sign(b"k", &config, Some(1000), body);
        assert!(good.starts_with("sha256="));
        let verified = Verified { timestamp: Some(1000), delivery_id: None };
        assert_eq!(shop.verify(&headers(&good, 1000), body, 1100), Ok(verified));
        assert_eq!(shop.verify(&headers(&good, 1000), b"{}", 1100), Err(SignatureRefused::Mismatch));
        assert_eq!(shop.verify(&headers(&good, 1001), body, 1100), Err(SignatureRefused::Mismatch));
        assert_eq!(
            shop.verify(&headers(&good, 1000), body, 1000 + 301),
            Err(SignatureRefused::Stale { age: 301, tolerance: 300 })
        );
        let wrong_key = sign(b"other", &config, Some(1000), body);
        assert_eq!(shop.verify(&headers(&wrong_key, 1000), body, 1000), Err(SignatureRefused::Mismatch));
        assert!(matches!(shop.verify(&HeaderMap::new(), body, 1000), Err(SignatureRefused::Missing { .. })));
    }

    #[test]
    fn a_base64_signature_over_the_body_alone() {
        let shop = intake("signature = { secret_env = \"SHOP_SECRET\", header = \"X-Hmac\", encoding = \"base64\" }");
        let config = shop.config.signature.clone().unwrap();
        let body = br#"{"id":1}"#;
        let signature = sign(b"k", &config, None, body);
        let mut headers = HeaderMap::new();
        headers.insert("x-hmac", signature.parse().unwrap());
        assert_eq!(shop.verify(&headers, body, 0), Ok(Verified::default()));
        headers.insert("x-hmac", hex::encode([0u8; 32]).parse().unwrap());
        assert!(matches!(
            shop.verify(&headers, body, 0),
            Err(SignatureRefused::Mismatch | SignatureRefused::Unreadable { .. })
        ));
    }
    /// Shopify's documented order id (its order webhook's example), beyond what a float keeps.
    #[test]
    fn an_integer_beyond_what_a_float_keeps_is_kept_as_its_digits() {
        let shop = |payload: &str| {
            let config =
                Config::parse(&format!("[intake.shop]\nkey = \"shop:order:{{{{body.id}}}}\"\n{payload}")).unwrap();
            Intake::with_secret("shop", config.intake["shop"].clone(), None)
        };
        let body = br#"{"id": 820982911946154508, "total": 9007199254740993, "small": 42}"#;
        let raw = shop("").map(&HeaderMap::new(), body).unwrap();
        assert_eq!(raw.key.as_deref(), Some("shop:order:820982911946154508"));
        assert_eq!(
            String::from_utf8(raw.payload).unwrap(),
            r#"{"id": "820982911946154508", "total": "9007199254740993", "small": 42}"#,
            "the whole body, with only the wide integers quoted"
        );
        let raw = shop("payload = [\"id\"]").map(&HeaderMap::new(), body).unwrap();
        assert_eq!(String::from_utf8(raw.payload).unwrap(), r#"{"id":"820982911946154508"}"#);
        let plain = br#"{"id": 7, "n": 1.50}"#;
        assert_eq!(shop("").map(&HeaderMap::new(), plain).unwrap().payload, plain.to_vec(), "otherwise byte for byte");
    }

    #[test]
    fn a_delivery_is_ignored_by_a_rule_or_refused_as_a_replay() {
        let config = Config::parse(
            "[intake.gh]\nkey = \"gh:{{body.id}}\"\n\
             signature = { scheme = \"github\", secret_env = \"S\", delivery_id = \"{{header.X-GitHub-Delivery}}\" }\n\
             [[intake.gh.ignore]]\nfield = \"header.X-GitHub-Event\"\nequals = \"ping\"\n\
             [[intake.gh.ignore]]\nfield = \"body.action\"\nequals = \"deleted\"\n",
        )
        .unwrap();
        let gh = Intake::with_secret("gh", config.intake["gh"].clone(), Some(b"k"));
        let request = |event: &str, delivery: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("x-github-event", event.parse().unwrap());
            headers.insert("x-github-delivery", delivery.parse().unwrap());
            headers
        };
        let unsigned = Verified::default();
        let ping = gh.screen(&request("ping", "d-1"), br#"{"zen": "Keep it simple."}"#, &unsigned, 1000);
        assert_eq!(ping, Ok(Screened::Ignored { field: "header.X-GitHub-Event".into(), value: "ping".into() }));
        let deleted = gh.screen(&request("issues", "d-2"), br#"{"action": "deleted"}"#, &unsigned, 1000);
        assert_eq!(deleted, Ok(Screened::Ignored { field: "body.action".into(), value: "deleted".into() }));
        let push = gh.screen(&request("push", "d-3"), br#"{"action": "opened"}"#, &unsigned, 1000);
        let delivery = Delivery { id: "d-3".into(), timestamp: None };
        assert_eq!(push, Ok(Screened::Deliver(Some(delivery.clone()))));
        let again = gh.screen(&request("push", "d-3"), br#"{"action": "opened"}"#, &unsigned, 1100);
        assert_eq!(again, Err(Replayed { id: "d-3".into() }));
        gh.forget(&delivery);
        assert!(gh.screen(&request("push", "d-3"), b"{}", &unsigned, 1100).is_ok(), "forgotten: taken again");
        // Ignored deliveries are not remembered: nothing of them was taken.
        assert!(gh.screen(&request("push", "d-1"), b"{}", &unsigned, 1100).is_ok());
    }
}
