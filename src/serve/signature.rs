//! Webhook signatures: each scheme providers sign with (Stripe, Slack, Standard Webhooks, GitHub,
//! Shopify, or an HMAC-SHA256 in a header of the intake's choosing), checked against every secret
//! the intake holds, so that a secret can be rotated without refusing a delivery.

use crate::config::{SignatureConfig, SignatureEncoding, SignatureScheme};
use axum::http::HeaderMap;
use base64::Engine as _;
use hmac::{KeyInit as _, Mac as _};
use std::time::Duration;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// A shared secret as the MAC takes it; never printed.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// A secret the scheme cannot use. The secret itself is never part of the error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretRefused {
    #[error("is empty")]
    Empty,
    #[error("is not a Standard Webhooks secret (whsec_ followed by base64)")]
    NotStandardWebhooks,
}

/// Why a signed webhook was refused: nothing of it is recorded, since anyone could have sent it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureRefused {
    #[error("the request has no {header} header; this intake needs a signed body")]
    Missing { header: String },
    #[error("the {header} header is not {expected}")]
    Unreadable { header: String, expected: &'static str },
    #[error("the {header} header is not a Unix time in seconds")]
    BadTimestamp { header: String },
    #[error("the signature's timestamp is {age} s from the server's time; at most {tolerance} s are accepted")]
    Stale { age: u64, tolerance: u64 },
    #[error("the signature does not match the body")]
    Mismatch,
}

/// What a verified signature vouches for besides the body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    /// The time the sender signed, where the scheme signs one (Unix seconds).
    pub timestamp: Option<i64>,
    /// The delivery's id, where the scheme signs one (Standard Webhooks' `webhook-id`).
    pub delivery_id: Option<String>,
}

/// How one scheme's signature is found, and what it signs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scheme {
    Hmac { header: String, encoding: SignatureEncoding, prefix: String, timestamp_header: Option<String> },
    Stripe,
    Slack,
    StandardWebhooks,
}

/// Checks one intake's signatures.
#[derive(Debug, Clone)]
pub struct Verifier {
    scheme: Scheme,
    secrets: Vec<Secret>,
    tolerance: Duration,
}

const STRIPE_HEADER: &str = "Stripe-Signature";
const SLACK_HEADER: &str = "X-Slack-Signature";
const SLACK_TIMESTAMP: &str = "X-Slack-Request-Timestamp";
/// Standard Webhooks' headers, and the same under Svix's names.
const STANDARD_HEADERS: [[&str; 3]; 2] =
    [["webhook-id", "webhook-timestamp", "webhook-signature"], ["svix-id", "svix-timestamp", "svix-signature"]];

impl Verifier {
    /// A verifier for `config` with `secrets` as they are configured (a Standard Webhooks
    /// `whsec_` secret is decoded here). Each refused secret is named by its position.
    pub fn new(config: &SignatureConfig, secrets: &[&[u8]]) -> Result<Self, (usize, SecretRefused)> {
        let scheme = match config.scheme {
            SignatureScheme::HmacSha256 => Scheme::Hmac {
                header: config.header.clone().unwrap_or_default(),
                encoding: config.encoding.unwrap_or_default(),
                prefix: config.prefix.clone().unwrap_or_default(),
                timestamp_header: config.timestamp_header.clone(),
            },
            SignatureScheme::Github => Scheme::Hmac {
                header: "X-Hub-Signature-256".to_owned(),
                encoding: SignatureEncoding::Hex,
                prefix: "sha256=".to_owned(),
                timestamp_header: None,
            },
            SignatureScheme::Shopify => Scheme::Hmac {
                header: "X-Shopify-Hmac-Sha256".to_owned(),
                encoding: SignatureEncoding::Base64,
                prefix: String::new(),
                timestamp_header: None,
            },
            SignatureScheme::Stripe => Scheme::Stripe,
            SignatureScheme::Slack => Scheme::Slack,
            SignatureScheme::StandardWebhooks => Scheme::StandardWebhooks,
        };
        let secrets = secrets
            .iter()
            .enumerate()
            .map(|(at, secret)| secret_for(&scheme, secret).map_err(|refused| (at, refused)))
            .collect::<Result<_, _>>()?;
        Ok(Self { scheme, secrets, tolerance: config.tolerance })
    }

    /// Checks a delivery's signature against every secret, in constant time for each, and its
    /// signed timestamp against `now` (Unix seconds) where the scheme signs one.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<Verified, SignatureRefused> {
        let (signed, candidates, verified) = match &self.scheme {
            Scheme::Hmac { header, encoding, prefix, timestamp_header } => {
                let presented = text(headers, header)?;
                let presented = presented.strip_prefix(prefix.as_str()).unwrap_or(presented);
                let tag = decode(presented, *encoding).ok_or(SignatureRefused::Unreadable {
                    header: header.clone(),
                    expected: match encoding {
                        SignatureEncoding::Hex => "a hex signature",
                        SignatureEncoding::Base64 => "a base64 signature",
                    },
                })?;
                let timestamp = timestamp_header.as_ref().map(|name| timestamp(headers, name)).transpose()?;
                let signed = match timestamp {
                    Some(at) => signed_content(&[at.to_string().as_bytes(), b".", body]),
                    None => body.to_vec(),
                };
                (signed, vec![tag], Verified { timestamp, delivery_id: None })
            }
            Scheme::Stripe => {
                let (at, tags) = stripe_header(text(headers, STRIPE_HEADER)?).ok_or(SignatureRefused::Unreadable {
                    header: STRIPE_HEADER.to_owned(),
                    expected: "t=TIMESTAMP,v1=SIGNATURE (hex)",
                })?;
                let signed = signed_content(&[at.to_string().as_bytes(), b".", body]);
                (signed, tags, Verified { timestamp: Some(at), delivery_id: None })
            }
            Scheme::Slack => {
                let at = timestamp(headers, SLACK_TIMESTAMP)?;
                let presented = text(headers, SLACK_HEADER)?;
                let tag = presented.strip_prefix("v0=").and_then(|hex| hex::decode(hex).ok()).ok_or(
                    SignatureRefused::Unreadable { header: SLACK_HEADER.to_owned(), expected: "v0=SIGNATURE (hex)" },
                )?;
                let signed = signed_content(&[b"v0:", at.to_string().as_bytes(), b":", body]);
                (signed, vec![tag], Verified { timestamp: Some(at), delivery_id: None })
            }
            Scheme::StandardWebhooks => {
                // Svix's names where the standard's are absent.
                let names =
                    STANDARD_HEADERS.iter().find(|[id, ..]| headers.contains_key(*id)).unwrap_or(&STANDARD_HEADERS[0]);
                let [id_header, timestamp_header, signature_header] = *names;
                let id = text(headers, id_header)?;
                let at = timestamp(headers, timestamp_header)?;
                let tags =
                    standard_signatures(text(headers, signature_header)?).ok_or(SignatureRefused::Unreadable {
                        header: signature_header.to_owned(),
                        expected: "a space-separated list of v1,SIGNATURE (base64)",
                    })?;
                let signed = signed_content(&[id.as_bytes(), b".", at.to_string().as_bytes(), b".", body]);
                (signed, tags, Verified { timestamp: Some(at), delivery_id: Some(id.to_owned()) })
            }
        };
        // The timestamp is checked only once the signature holds, so that a forged request learns
        // nothing of the server's clock.
        let matched = self.secrets.iter().any(|secret| {
            let mac =
                HmacSha256::new_from_slice(&secret.0).expect("HMAC takes a key of any length").chain_update(&signed);
            candidates.iter().any(|tag| mac.clone().verify_slice(tag).is_ok())
        });
        if !matched {
            return Err(SignatureRefused::Mismatch);
        }
        if let Some(at) = verified.timestamp {
            let age = now.abs_diff(at);
            if Duration::from_secs(age) > self.tolerance {
                return Err(SignatureRefused::Stale { age, tolerance: self.tolerance.as_secs() });
            }
        }
        Ok(verified)
    }
}

/// The key a scheme's MAC takes from a configured secret.
fn secret_for(scheme: &Scheme, secret: &[u8]) -> Result<Secret, SecretRefused> {
    if secret.is_empty() {
        return Err(SecretRefused::Empty);
    }
    match scheme {
        Scheme::StandardWebhooks => {
            let encoded = secret.strip_prefix(b"whsec_").unwrap_or(secret);
            let key = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|_| SecretRefused::NotStandardWebhooks)?;
            if key.is_empty() {
                return Err(SecretRefused::NotStandardWebhooks);
            }
            Ok(Secret(key))
        }
        // Stripe and Slack MAC with the secret's text as it is, `whsec_` and all.
        Scheme::Hmac { .. } | Scheme::Stripe | Scheme::Slack => Ok(Secret(secret.to_vec())),
    }
}

fn signed_content(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn text<'h>(headers: &'h HeaderMap, name: &str) -> Result<&'h str, SignatureRefused> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| SignatureRefused::Missing { header: name.to_owned() })
}

fn timestamp(headers: &HeaderMap, name: &str) -> Result<i64, SignatureRefused> {
    text(headers, name)?.parse().map_err(|_| SignatureRefused::BadTimestamp { header: name.to_owned() })
}

/// `t=TS,v1=HEX[,v1=HEX...]`: the timestamp and every `v1` signature (Stripe sends one per
/// secret during a roll); other schemes' entries (`v0`) are skipped.
fn stripe_header(value: &str) -> Option<(i64, Vec<Vec<u8>>)> {
    let mut at = None;
    let mut tags = Vec::new();
    for item in value.split(',') {
        match item.trim().split_once('=')? {
            ("t", stamp) => at = Some(stamp.parse().ok()?),
            ("v1", tag) => tags.push(hex::decode(tag).ok()?),
            _ => {}
        }
    }
    if tags.is_empty() {
        return None;
    }
    Some((at?, tags))
}

/// `v1,BASE64 v1,BASE64 ...`: every `v1` signature; other versions (`v1a`, asymmetric) skipped.
fn standard_signatures(value: &str) -> Option<Vec<Vec<u8>>> {
    let mut tags = Vec::new();
    for item in value.split_whitespace() {
        if let ("v1", tag) = item.split_once(',')? {
            tags.push(base64::engine::general_purpose::STANDARD.decode(tag).ok()?);
        }
    }
    (!tags.is_empty()).then_some(tags)
}

fn decode(text: &str, encoding: SignatureEncoding) -> Option<Vec<u8>> {
    match encoding {
        SignatureEncoding::Hex => hex::decode(text).ok(),
        SignatureEncoding::Base64 => base64::engine::general_purpose::STANDARD.decode(text).ok(),
    }
}

/// The signature a sender puts on `body` for an `hmac-sha256` intake (with `timestamp` where the
/// intake signs one), as the intake's header carries it: for tests and senders' examples.
pub fn sign(secret: &[u8], config: &SignatureConfig, timestamp: Option<i64>, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length");
    if let Some(at) = timestamp {
        mac.update(format!("{at}.").as_bytes());
    }
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    let text = match config.encoding.unwrap_or_default() {
        SignatureEncoding::Hex => hex::encode(tag),
        SignatureEncoding::Base64 => base64::engine::general_purpose::STANDARD.encode(tag),
    };
    format!("{}{text}", config.prefix.as_deref().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn verifier(signature: &str, secrets: &[&str]) -> Verifier {
        let config =
            Config::parse(&format!("[intake.x]\nkey = \"x:{{{{body.id}}}}\"\nsignature = {{ {signature} }}\n"))
                .expect("the intake parses");
        let secrets: Vec<&[u8]> = secrets.iter().map(|s| s.as_bytes()).collect();
        Verifier::new(config.intake["x"].signature.as_ref().unwrap(), &secrets).expect("the secrets suit the scheme")
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
        }
        headers
    }

    /// The example of the Standard Webhooks specification (standard-webhooks/standard-webhooks,
    /// spec/standard-webhooks.md, "Verifying webhook authenticity").
    #[test]
    fn standard_webhooks_verifies_the_specifications_example() {
        let scheme =
            verifier("scheme = \"standard-webhooks\", secret_env = \"S\"", &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]);
        let body = br#"{"test": 2432232314}"#;
        let signed = |names: [&str; 3], signature: &str| {
            headers(&[(names[0], "msg_p5jXN8AQM9LWM0D4loKWxJek"), (names[1], "1614265330"), (names[2], signature)])
        };
        let example = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        let verified =
            Verified { timestamp: Some(1_614_265_330), delivery_id: Some("msg_p5jXN8AQM9LWM0D4loKWxJek".into()) };
        for names in STANDARD_HEADERS {
            assert_eq!(scheme.verify(&signed(names, example), body, 1_614_265_330 + 299), Ok(verified.clone()));
            // Several signatures, the one that matches last, as a sender rotating its secret sends them.
            let several = format!("v1,{} v1a,ignored {example}", "A".repeat(44));
            assert_eq!(scheme.verify(&signed(names, &several), body, 1_614_265_330), Ok(verified.clone()));
        }
        let names = STANDARD_HEADERS[0];
        assert_eq!(
            scheme.verify(&signed(names, example), br#"{"test": 2432232315}"#, 1_614_265_330),
            Err(SignatureRefused::Mismatch)
        );
        assert_eq!(
            scheme.verify(&signed(names, example), body, 1_614_265_330 + 301),
            Err(SignatureRefused::Stale { age: 301, tolerance: 300 })
        );
        let mut other_id = signed(names, example);
        other_id.insert("webhook-id", "msg_other".parse().unwrap());
        assert_eq!(scheme.verify(&other_id, body, 1_614_265_330), Err(SignatureRefused::Mismatch), "the id is signed");
        assert!(matches!(
            scheme.verify(&signed(names, "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="), body, 1_614_265_330),
            Err(SignatureRefused::Unreadable { .. })
        ));
        // The base64 part of the secret is the key; the secret's text as it is verifies nothing.
        let undecoded =
            Verifier { secrets: vec![Secret(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_vec())], ..scheme.clone() };
        assert_eq!(undecoded.verify(&signed(names, example), body, 1_614_265_330), Err(SignatureRefused::Mismatch));
    }

    /// The example of Slack's "Verifying requests from Slack" (api.slack.com/authentication/verifying-requests-from-slack).
    #[test]
    fn slack_verifies_its_documentations_example() {
        let scheme = verifier("scheme = \"slack\", secret_env = \"S\"", &["8f742231b10e8888abcd99yyyzzz85a5"]);
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&\
channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2F\
hooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.\
803a0bc887a14d10d2c447fce8b6703c";
        let request = |at: &str| {
            headers(&[
                ("X-Slack-Request-Timestamp", at),
                ("X-Slack-Signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"),
            ])
        };
        let verified = Verified { timestamp: Some(1_531_420_618), delivery_id: None };
        assert_eq!(scheme.verify(&request("1531420618"), body, 1_531_420_618 + 60), Ok(verified));
        assert_eq!(scheme.verify(&request("1531420619"), body, 1_531_420_618), Err(SignatureRefused::Mismatch));
        assert_eq!(
            scheme.verify(&request("1531420618"), body, 1_531_420_618 + 301),
            Err(SignatureRefused::Stale { age: 301, tolerance: 300 })
        );
        assert_eq!(
            scheme.verify(&headers(&[("X-Slack-Signature", "v0=00")]), body, 0),
            Err(SignatureRefused::Missing { header: SLACK_TIMESTAMP.into() })
        );
    }

    /// Stripe publishes its algorithm, not a vector: this one is HMAC-SHA256 of `t.body` with the
    /// secret's text as key, computed apart from this code (`printf '%s' '1700000000.BODY' |
    /// openssl dgst -sha256 -hmac whsec_stripe_test_secret`).
    #[test]
    fn stripe_takes_any_v1_of_the_header_and_refuses_a_stale_t() {
        let body = br#"{"id":"evt_1","type":"charge.succeeded"}"#;
        let good = "fb22ffbfe8f82e398afe03ad6d385a59a0083f46bbd8b0ffad81467124cf7673";
        let other = "5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd";
        let scheme = verifier("scheme = \"stripe\", secret_env = \"S\"", &["whsec_stripe_test_secret"]);
        let header = |value: &str| headers(&[("Stripe-Signature", value)]);
        let verified = Verified { timestamp: Some(1_700_000_000), delivery_id: None };
        let rolled = format!("t=1700000000,v1={other},v1={good},v0={other}");
        assert_eq!(scheme.verify(&header(&rolled), body, 1_700_000_100), Ok(verified.clone()));
        assert_eq!(
            scheme.verify(&header(&format!("t=1700000000,v1={other}")), body, 1_700_000_000),
            Err(SignatureRefused::Mismatch)
        );
        assert_eq!(
            scheme.verify(&header(&format!("t=1700000001,v1={good}")), body, 1_700_000_000),
            Err(SignatureRefused::Mismatch)
        );
        assert_eq!(
            scheme.verify(&header(&format!("t=1700000000,v1={good}")), body, 1_700_000_000 + 301),
            Err(SignatureRefused::Stale { age: 301, tolerance: 300 })
        );
        for unreadable in [format!("v1={good}"), "t=1700000000".to_owned(), format!("t=x,v1={good}"), "junk".to_owned()]
        {
            assert!(
                matches!(
                    scheme.verify(&header(&unreadable), body, 1_700_000_000),
                    Err(SignatureRefused::Unreadable { .. })
                ),
                "{unreadable}"
            );
        }
        // Rotation on this side: the old secret listed after the new one still verifies.
        let rotating = verifier(
            "scheme = \"stripe\", secret_env = [\"NEW\", \"OLD\"]",
            &["whsec_new", "whsec_stripe_test_secret"],
        );
        assert_eq!(rotating.verify(&header(&format!("t=1700000000,v1={good}")), body, 1_700_000_000), Ok(verified));
    }

    /// GitHub's test values from "Validating webhook deliveries" (docs.github.com/webhooks/securing).
    #[test]
    fn github_and_shopify_are_named_hmac_schemes() {
        let github = verifier("scheme = \"github\", secret_env = \"S\"", &["It's a Secret to Everybody"]);
        let signature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        let request = headers(&[("X-Hub-Signature-256", signature)]);
        assert_eq!(github.verify(&request, b"Hello, World!", 0), Ok(Verified::default()));
        assert_eq!(github.verify(&request, b"Hello, World?", 0), Err(SignatureRefused::Mismatch));
        // Computed apart from this code: `openssl dgst -sha256 -hmac shopify-secret -binary | base64`.
        let shopify = verifier("scheme = \"shopify\", secret_env = \"S\"", &["shopify-secret"]);
        let body = br#"{"id":820982911946154508,"email":"jon@example.com"}"#;
        let request = headers(&[("X-Shopify-Hmac-Sha256", "idSMsYHcTIfqStNmryJ9KCy8bgY0Czx3Mfnr/diquzc=")]);
        assert_eq!(shopify.verify(&request, body, 0), Ok(Verified::default()));
        assert_eq!(shopify.verify(&request, b"{}", 0), Err(SignatureRefused::Mismatch));
    }

    #[test]
    fn a_secret_the_scheme_cannot_use_is_refused_and_never_shown() {
        let config = Config::parse(
            "[intake.x]\nkey = \"x:{{body.id}}\"\nsignature = { scheme = \"standard-webhooks\", secret_env = [\"A\", \"B\"] }\n",
        )
        .unwrap();
        let signature = config.intake["x"].signature.clone().unwrap();
        let refused = Verifier::new(&signature, &[b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", b"whsec_not base64!"]);
        assert_eq!(refused.map(|_| ()), Err((1, SecretRefused::NotStandardWebhooks)));
        let shown = format!("{:?}", verifier("scheme = \"slack\", secret_env = \"S\"", &["hush-hush-secret"]));
        assert!(!shown.contains("hush") && !shown.contains("104, 117"), "{shown}");
    }
}
