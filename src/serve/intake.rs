//! Webhook intake: how `POST /v1/hooks/NAME` turns a sender's raw body into a submission, as its
//! `[intake.NAME]` block maps it, and the optional HMAC-SHA256 signature that proves the sender.

use crate::config::{IntakeConfig, SignatureConfig, SignatureEncoding};
use crate::domain::{RawSubmission, SubmissionRefused};
use crate::template::{body_field, render_hook};
use axum::http::HeaderMap;
use base64::Engine as _;
use hmac::{KeyInit as _, Mac as _};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// One configured intake, with its secret read from the environment.
#[derive(Debug, Clone)]
pub struct Intake {
    pub name: String,
    config: IntakeConfig,
    secret: Option<Vec<u8>>,
}

/// Why an intake cannot start.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("intake {intake}: signature.secret_env {env} is not set (or is empty)")]
    MissingSecret { intake: String, env: String },
}

/// Why a signed webhook was refused: nothing of it is recorded, since anyone could have sent it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureRefused {
    #[error("the request has no {header} header; this intake needs a signed body")]
    Missing { header: String },
    #[error("the {header} header is not a {encoding} signature")]
    NotEncoded { header: String, encoding: &'static str },
    #[error("the {header} header is not a Unix time in seconds")]
    BadTimestamp { header: String },
    #[error("the signature's timestamp is {age} s from the server's time; at most {tolerance} s are accepted")]
    Stale { age: u64, tolerance: u64 },
    #[error("the signature does not match the body")]
    Mismatch,
}

impl Intake {
    /// The intake `name` as configured; its secret is read from the environment now.
    pub fn new(name: &str, config: IntakeConfig) -> Result<Self, IntakeError> {
        let secret = match &config.signature {
            None => None,
            Some(signature) => Some(
                std::env::var(&signature.secret_env)
                    .ok()
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| IntakeError::MissingSecret {
                        intake: name.to_owned(),
                        env: signature.secret_env.clone(),
                    })?
                    .into_bytes(),
            ),
        };
        Ok(Self { name: name.to_owned(), config, secret })
    }

    /// An intake with its secret given, for tests.
    pub fn with_secret(name: &str, config: IntakeConfig, secret: Option<&[u8]>) -> Self {
        Self { name: name.to_owned(), config, secret: secret.map(<[u8]>::to_vec) }
    }

    /// Whether the sender proves itself with a signature; otherwise with a bearer token.
    pub fn is_signed(&self) -> bool {
        self.config.signature.is_some()
    }

    /// Checks the body's signature, in constant time, and its timestamp against `now` (Unix
    /// seconds) where the intake has one.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<(), SignatureRefused> {
        let (Some(config), Some(secret)) = (&self.config.signature, &self.secret) else { return Ok(()) };
        let text = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .ok_or_else(|| SignatureRefused::Missing { header: name.to_owned() })
        };
        let presented = text(&config.header)?;
        let presented = presented.strip_prefix(config.prefix.as_str()).unwrap_or(presented);
        let presented = decode(presented, config.encoding)
            .ok_or(SignatureRefused::NotEncoded { header: config.header.clone(), encoding: encoding_name(config) })?;
        let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length");
        if let Some(header) = &config.timestamp_header {
            let stamp = text(header)?;
            let at: i64 = stamp.parse().map_err(|_| SignatureRefused::BadTimestamp { header: header.clone() })?;
            let age = now.abs_diff(at);
            if Duration::from_secs(age) > config.tolerance {
                return Err(SignatureRefused::Stale { age, tolerance: config.tolerance.as_secs() });
            }
            mac.update(stamp.as_bytes());
            mac.update(b".");
        }
        mac.update(body);
        mac.verify_slice(&presented).map_err(|_| SignatureRefused::Mismatch)
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
        let value: Value = match serde_json::from_slice(body) {
            Ok(value) => value,
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
            // The body as sent, byte for byte: its numbers and text are fingerprinted as they are.
            None => body.to_vec(),
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

fn decode(text: &str, encoding: SignatureEncoding) -> Option<Vec<u8>> {
    match encoding {
        SignatureEncoding::Hex => hex::decode(text).ok(),
        SignatureEncoding::Base64 => base64::engine::general_purpose::STANDARD.decode(text).ok(),
    }
}

fn encoding_name(config: &SignatureConfig) -> &'static str {
    match config.encoding {
        SignatureEncoding::Hex => "hex",
        SignatureEncoding::Base64 => "base64",
    }
}

/// The signature a sender puts on `body` (with `timestamp` where the intake signs one), as the
/// intake's header carries it: for tests, the benchmark and senders' examples.
pub fn sign(secret: &[u8], config: &SignatureConfig, timestamp: Option<i64>, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length");
    if let Some(at) = timestamp {
        mac.update(format!("{at}.").as_bytes());
    }
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    let text = match config.encoding {
        SignatureEncoding::Hex => hex::encode(tag),
        SignatureEncoding::Base64 => base64::engine::general_purpose::STANDARD.encode(tag),
    };
    format!("{}{text}", config.prefix)
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
        assert_eq!(shop.verify(&headers(&good, 1000), body, 1100), Ok(()));
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
        assert_eq!(shop.verify(&headers, body, 0), Ok(()));
        headers.insert("x-hmac", hex::encode([0u8; 32]).parse().unwrap());
        assert!(matches!(
            shop.verify(&headers, body, 0),
            Err(SignatureRefused::Mismatch | SignatureRefused::NotEncoded { .. })
        ));
    }
}
