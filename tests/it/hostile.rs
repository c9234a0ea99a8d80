//! A corpus of hostile submissions: each is refused with a message that names the problem, and
//! nothing is written but the record of the refusal. Run on both stores.

use crate::support::TestDb;
use actionledger::domain::RawSubmission;
use actionledger::ledger::LedgerError;
use actionledger::store::{ListFilter, Store};

conformance!(hostile_submissions_are_refused_and_nothing_is_written);

fn with_payload(payload: Vec<u8>) -> RawSubmission {
    RawSubmission { key: Some("acme:hostile".to_owned()), payload, ..RawSubmission::default() }
}

fn with_key(key: String) -> RawSubmission {
    RawSubmission { key: Some(key), payload: b"{}".to_vec(), ..RawSubmission::default() }
}

/// (what it is, the submission, words the refusal must contain)
fn corpus() -> Vec<(&'static str, RawSubmission, &'static str)> {
    let big = format!(r#"{{"x":"{}"}}"#, "a".repeat(256 * 1024));
    vec![
        ("oversize payload", with_payload(big.into_bytes()), "at most 262144 bytes"),
        (
            "deep nesting",
            with_payload(format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes()),
            "not valid JSON",
        ),
        ("invalid UTF-8", with_payload(b"{\"a\":\"\xc3\x28\"}".to_vec()), "not valid UTF-8"),
        ("overlong UTF-8", with_payload(b"{\"a\":\"\xc0\xaf\"}".to_vec()), "not valid UTF-8"),
        ("raw NUL", with_payload(b"{\"a\":\"x\0y\"}".to_vec()), "NUL"),
        ("escaped NUL", with_payload(br#"{"a":"x\u0000y"}"#.to_vec()), "NUL"),
        ("escaped NUL in a key", with_payload(br#"{"a\u0000":1}"#.to_vec()), "NUL"),
        ("lone high surrogate", with_payload(br#"{"a":"\ud800"}"#.to_vec()), "not valid JSON"),
        ("lone low surrogate", with_payload(br#"{"a":"\udc00"}"#.to_vec()), "not valid JSON"),
        ("truncated JSON", with_payload(br#"{"a":"#.to_vec()), "not valid JSON"),
        ("trailing garbage", with_payload(br#"{"a":1} {"b":2}"#.to_vec()), "not valid JSON"),
        ("empty payload", with_payload(Vec::new()), "payload is missing"),
        ("key of 256 bytes", with_key("k".repeat(256)), "256 bytes long"),
        ("key of 128 two-byte characters plus one", with_key(format!("{}x", "é".repeat(128))), "257 bytes long"),
        ("key with a newline", with_key("acme:a\nb".to_owned()), "control character"),
        ("key with ANSI escape", with_key("acme:\u{1b}[2J".to_owned()), "control character"),
        ("key with C1 CSI", with_key("acme:\u{9b}2J".to_owned()), "control character"),
        ("key with bidi override", with_key("acme:\u{202e}gnp.exe".to_owned()), "invisible"),
        ("key with zero-width space", with_key("acme:a\u{200b}b".to_owned()), "invisible"),
        ("key with a space", with_key("acme:a b".to_owned()), "whitespace"),
        ("key with e-mail", with_key("acme:contact:x.y+z@mail.example.org:create".to_owned()), "e-mail"),
        ("key with encoded e-mail", with_key("acme:x.y%40example.com".to_owned()), "e-mail"),
        (
            "missing key",
            RawSubmission { key: None, payload: b"{}".to_vec(), ..RawSubmission::default() },
            "key is missing",
        ),
    ]
}

async fn hostile_submissions_are_refused_and_nothing_is_written<S: Store>(db: TestDb<S>) {
    let corpus = corpus();
    for (what, submission, words) in &corpus {
        match db.ledger.submit(submission).await {
            Err(LedgerError::SubmissionRefused(refusal)) => {
                assert!(refusal.message.contains(words), "{what}: {:?} should say {words:?}", refusal.message);
            }
            other => panic!("{what}: expected a refusal, got {other:?}"),
        }
    }
    let written = db.ledger.list(&ListFilter { limit: 100, ..ListFilter::default() }).await.unwrap();
    assert!(written.is_empty(), "no action written");
    let refused = db.ledger.list_refused(None, 100).await.unwrap();
    assert_eq!(refused.len(), corpus.len(), "each refusal is recorded for review");
    for r in &refused {
        let shown = format!("{:?}{:?}", r.key_excerpt, r.message);
        assert!(!r.key_excerpt.as_deref().unwrap_or_default().chars().any(char::is_control), "{shown}");
        assert!(!shown.contains("x.y"), "no e-mail kept: {shown}");
    }
    // At the limit exactly: accepted.
    assert!(db.ledger.submit(&with_key("k".repeat(255))).await.is_ok());
    let store = std::any::type_name::<S>().rsplit("::").next().unwrap_or_default();
    println!("hostile ({store}): {} hostile submissions refused with their reasons, no action written", corpus.len());
}
