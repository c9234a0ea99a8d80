//! Payload canonicalization over arbitrary bytes: `Payload::parse` never panics, refuses with the
//! right reason, and for every payload it accepts the canonical form is a fixed point, ignores
//! layout, key order and string escaping, and the fingerprint is the SHA-256 of the canonical text.

#![no_main]

use actionledger::domain::payload::{MAX_PAYLOAD_BYTES, sha256_hex};
use actionledger::domain::{Payload, PayloadError};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::fmt::Write as _;

fuzz_target!(|data: &[u8]| {
    match Payload::parse(data) {
        Ok(payload) => check_accepted(&payload),
        Err(error) => check_refused(data, &error),
    }
});

fn check_accepted(payload: &Payload) {
    let canonical = payload.canonical();
    let fingerprint = payload.fingerprint();

    // The fingerprint is the SHA-256 of the canonical text, so equal text gives an equal one.
    assert_eq!(fingerprint.as_str(), sha256_hex(canonical.as_bytes()));
    assert!(
        fingerprint.as_str().len() == 64
            && fingerprint.as_str().bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    );
    assert_eq!(fingerprint.short(), &fingerprint.as_str()[..12]);
    assert_eq!(fingerprint.to_string(), format!("sha256:{}", fingerprint.as_str()));
    assert_eq!(&Payload::from_stored(canonical.to_owned(), fingerprint.as_str().to_owned()), payload);

    // Canonicalizing the canonical text again changes nothing.
    let again = Payload::parse(canonical.as_bytes()).expect("the canonical form is accepted");
    assert_eq!(again.canonical(), canonical, "canonical of canonical is itself");
    assert_eq!(again.fingerprint(), fingerprint);
    assert!(no_whitespace_outside_strings(canonical), "{canonical:?}");

    let value = payload.value();
    assert!(!holds_nul(&value), "an accepted payload holds no NUL");

    // The same value written another way (indented; keys in reverse order with every string
    // character as a \u escape) has the same canonical form and fingerprint.
    let pretty = payload.pretty();
    let mut reordered = String::new();
    write_reordered(&value, &mut reordered);
    for (how, text) in [("pretty", pretty), ("reordered", reordered)] {
        if text.len() > MAX_PAYLOAD_BYTES {
            continue;
        }
        let other = Payload::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{how} form refused: {e}: {text:?}"));
        assert_eq!(other.canonical(), canonical, "{how} form canonicalizes differently: {text:?}");
        assert_eq!(other.fingerprint(), fingerprint);
    }
}

fn check_refused(data: &[u8], error: &PayloadError) {
    let message = error.to_string();
    assert!(!message.is_empty() && !message.chars().any(char::is_control), "{message:?}");
    if data.len() > MAX_PAYLOAD_BYTES {
        assert_eq!(*error, PayloadError::TooLarge { bytes: data.len() });
        return;
    }
    let text = match std::str::from_utf8(data) {
        Ok(text) => text,
        Err(e) => {
            assert_eq!(*error, PayloadError::NotUtf8 { at: e.valid_up_to() });
            return;
        }
    };
    match error {
        PayloadError::Missing => assert!(text.trim().is_empty()),
        PayloadError::ContainsNul => {
            assert!(text.contains('\0') || serde_json::from_str::<Value>(text).is_ok_and(|v| holds_nul(&v)));
        }
        PayloadError::NotJson(_) => assert!(serde_json::from_str::<Value>(text).is_err()),
        PayloadError::TooLarge { .. } | PayloadError::NotUtf8 { .. } => panic!("{error:?} for {data:?}"),
    }
}

fn holds_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
    }
}

/// True when the JSON text has no space, tab or line break outside its strings.
fn no_whitespace_outside_strings(json: &str) -> bool {
    let (mut in_string, mut escaped) = (false, false);
    for ch in json.chars() {
        if in_string {
            match (escaped, ch) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if ch == '"' {
            in_string = true;
        } else if matches!(ch, ' ' | '\t' | '\n' | '\r') {
            return false;
        }
    }
    !in_string
}

/// Writes `value` as JSON with object keys in reverse order, whitespace around every token and
/// every string character as a `\u` escape (surrogate pairs beyond the BMP).
fn write_reordered(value: &Value, out: &mut String) {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => out.push_str(&value.to_string()),
        Value::String(s) => write_escaped(s, out),
        Value::Array(items) => {
            out.push_str("[ ");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(" ,\n");
                }
                write_reordered(item, out);
            }
            out.push_str("\t]");
        }
        Value::Object(map) => {
            out.push_str("{\r\n");
            for (i, (key, item)) in map.iter().rev().enumerate() {
                if i > 0 {
                    out.push_str(" , ");
                }
                write_escaped(key, out);
                out.push_str(" : ");
                write_reordered(item, out);
            }
            out.push_str(" }");
        }
    }
}

fn write_escaped(s: &str, out: &mut String) {
    out.push('"');
    for unit in s.encode_utf16() {
        let _ = write!(out, "\\u{unit:04X}");
    }
    out.push('"');
}
