//! Payload canonicalization over arbitrary bytes: `Payload::parse` never panics, refuses with the
//! right reason, and for every payload it accepts the canonical form is a fixed point, re-parses to
//! the value submitted (numbers compared as the doubles RFC 8785 reads them as), ignores layout,
//! key order and string escaping, and the fingerprint is the SHA-256 of the canonical text. A
//! payload that repeats a key in an object is never accepted. Before the first input, the
//! published RFC 8785 test vectors (Appendix B's numbers, section 3.2.4's sorting example,
//! Appendix A's example) must canonicalize as published.

#![no_main]

use actionledger::domain::payload::{MAX_PAYLOAD_BYTES, sha256_hex};
use actionledger::domain::{Payload, PayloadError};
use libfuzzer_sys::fuzz_target;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt::{self, Write as _};
use std::sync::Once;

static VECTORS: Once = Once::new();

fuzz_target!(|data: &[u8]| {
    VECTORS.call_once(check_published_vectors);
    match Payload::parse(data) {
        Ok(payload) => check_accepted(data, &payload),
        Err(error) => check_refused(data, &error),
    }
});

fn check_accepted(data: &[u8], payload: &Payload) {
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

    // What was submitted is what is kept: the input read by serde_json alone is the value the
    // canonical text reads back as, and no object in the input repeated a key (serde_json keeps
    // the last of two, so the input would hold more keys than its value).
    let submitted: Value = serde_json::from_slice(data).expect("an accepted payload is JSON");
    let value = payload.value();
    assert!(same_value(&submitted, &value), "the canonical text reads back as the value submitted: {value}");
    assert_eq!(keys_written(data), keys_kept(&value), "an input that repeats a key was accepted");

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

/// RFC 8785's published vectors. Appendix B: IEEE 754 doubles (bit patterns) and their canonical
/// text, each given as serde_json writes the double.
fn check_published_vectors() {
    let samples: &[(u64, &str)] = &[
        (0x0000_0000_0000_0000, "0"),
        (0x8000_0000_0000_0000, "0"),
        (0x0000_0000_0000_0001, "5e-324"),
        (0x8000_0000_0000_0001, "-5e-324"),
        (0x7fef_ffff_ffff_ffff, "1.7976931348623157e+308"),
        (0xffef_ffff_ffff_ffff, "-1.7976931348623157e+308"),
        (0x4340_0000_0000_0000, "9007199254740992"),
        (0xc340_0000_0000_0000, "-9007199254740992"),
        (0x4430_0000_0000_0000, "295147905179352830000"),
        (0x44b5_2d02_c7e1_4af5, "9.999999999999997e+22"),
        (0x44b5_2d02_c7e1_4af6, "1e+23"),
        (0x44b5_2d02_c7e1_4af7, "1.0000000000000001e+23"),
        (0x444b_1ae4_d6e2_ef4e, "999999999999999700000"),
        (0x444b_1ae4_d6e2_ef4f, "999999999999999900000"),
        (0x444b_1ae4_d6e2_ef50, "1e+21"),
        (0x3eb0_c6f7_a0b5_ed8c, "9.999999999999997e-7"),
        (0x3eb0_c6f7_a0b5_ed8d, "0.000001"),
        (0x41b3_de43_5555_5553, "333333333.3333332"),
        (0x41b3_de43_5555_5554, "333333333.33333325"),
        (0x41b3_de43_5555_5555, "333333333.3333333"),
        (0x41b3_de43_5555_5556, "333333333.3333334"),
        (0x41b3_de43_5555_5557, "333333333.33333343"),
        (0xbecb_f647_612f_3696, "-0.0000033333333333333333"),
        (0x4314_3ff3_c1cb_0959, "1424953923781206.2"),
    ];
    for &(bits, expected) in samples {
        let written = format!("[{}]", serde_json::Number::from_f64(f64::from_bits(bits)).expect("finite"));
        let payload = Payload::parse(written.as_bytes()).unwrap_or_else(|e| panic!("{written}: {e}"));
        assert_eq!(payload.canonical(), format!("[{expected}]"), "{bits:#018x}");
    }
    let sorting = r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}"#;
    assert_eq!(
        Payload::parse(sorting.as_bytes()).unwrap().canonical(),
        "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"\u{f6}\":\"Latin Small Letter O With \
         Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet \
         With Dagesh\"}"
    );
    // Appendix A, its first number given as the double it reads as (written with more digits, the
    // payload reader refuses it: it would not come back as written).
    let example = r#"{"numbers":[333333333.3333333,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}"#;
    assert_eq!(
        Payload::parse(example.as_bytes()).unwrap().canonical(),
        r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
    );
}

/// Equal JSON values, numbers compared as the doubles RFC 8785 reads them as (`1.0` is `1`).
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
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
        PayloadError::DuplicateKey { path } => {
            let value: Value = serde_json::from_str(text).expect("a repeated key is refused only in JSON");
            assert!(keys_written(data) > keys_kept(&value), "no key is repeated: {text:?}");
            assert!(path.starts_with('$'), "{path:?}");
        }
        PayloadError::IntegerOutOfRange { path } | PayloadError::InexactNumber { path } => {
            // serde_json alone reads it, rounding the number that this refusal is about.
            assert!(serde_json::from_str::<Value>(text).is_ok(), "{text:?}");
            assert!(path.starts_with('$'), "{path:?}");
        }
        PayloadError::NumberOutOfRange { path } => {
            let error = serde_json::from_str::<Value>(text).expect_err("a number out of range is not read");
            assert!(error.to_string().starts_with("number out of range"), "{error}");
            assert!(path.starts_with('$'), "{path:?}");
        }
        PayloadError::TooLarge { .. } | PayloadError::NotUtf8 { .. } => panic!("{error:?} for {data:?}"),
    }
}

/// How many object keys the JSON text writes, repeated ones included, counted by serde_json
/// without building a value.
fn keys_written(data: &[u8]) -> usize {
    serde_json::from_slice::<KeyCount>(data).expect("counted only in JSON").0
}

/// How many object keys a value holds.
fn keys_kept(value: &Value) -> usize {
    match value {
        Value::Array(items) => items.iter().map(keys_kept).sum(),
        Value::Object(map) => map.len() + map.values().map(keys_kept).sum::<usize>(),
        _ => 0,
    }
}

struct KeyCount(usize);

impl<'de> Deserialize<'de> for KeyCount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KeyCountVisitor)
    }
}

struct KeyCountVisitor;

impl<'de> Visitor<'de> for KeyCountVisitor {
    type Value = KeyCount;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<KeyCount, E> {
        Ok(KeyCount(0))
    }

    fn visit_i64<E>(self, _: i64) -> Result<KeyCount, E> {
        Ok(KeyCount(0))
    }

    fn visit_u64<E>(self, _: u64) -> Result<KeyCount, E> {
        Ok(KeyCount(0))
    }

    fn visit_f64<E>(self, _: f64) -> Result<KeyCount, E> {
        Ok(KeyCount(0))
    }

    fn visit_str<E>(self, _: &str) -> Result<KeyCount, E> {
        Ok(KeyCount(0))
    }

    fn visit_unit<E>(self) -> Result<KeyCount, E> {
        Ok(KeyCount(0))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<KeyCount, A::Error> {
        let mut count = 0;
        while let Some(KeyCount(inner)) = seq.next_element()? {
            count += inner;
        }
        Ok(KeyCount(count))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyCount, A::Error> {
        let mut count = 0;
        while let Some(IgnoredAny) = map.next_key()? {
            count += 1 + map.next_value::<KeyCount>()?.0;
        }
        Ok(KeyCount(count))
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
