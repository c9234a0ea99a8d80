//! Properties of the input boundary, over arbitrary input: key validation, payload
//! canonicalization and the text sanitizer never panic, and hold their promises.

use actionledger::domain::text::escape_untrusted;
use actionledger::domain::{ActionKey, KeyError, Payload, PayloadError};
use proptest::prelude::*;

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        // Integers within ±(2^53 - 1), the range kept (RFC 8785, I-JSON); beyond it, refused alike.
        (-9_007_199_254_740_991_i64..=9_007_199_254_740_991).prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        // Finite floats of every magnitude: the shortest form of each must read back as itself.
        any::<f64>().prop_filter("JSON has no NaN or infinity", |f| f.is_finite()).prop_map(serde_json::Value::from),
        "\\PC{0,12}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::btree_map("\\PC{0,8}", inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn key_validation_never_panics_and_accepted_keys_are_clean(raw in any::<String>()) {
        match ActionKey::parse(&raw) {
            Ok(key) => {
                prop_assert!(!key.as_str().is_empty() && key.as_str().len() <= 255);
                prop_assert!(!key.as_str().chars().any(|c| c.is_control() || c.is_whitespace()));
                prop_assert_eq!(escape_untrusted(key.as_str()).len() >= key.as_str().len(), true);
            }
            Err(KeyError::TooLong { bytes }) => prop_assert_eq!(bytes, raw.len()),
            Err(_) => {}
        }
    }

    #[test]
    fn payload_parsing_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = Payload::parse(&bytes);
    }

    #[test]
    fn canonical_form_is_a_fixed_point_and_ignores_layout(value in json_value()) {
        let compact = value.to_string();
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        match (Payload::parse(compact.as_bytes()), Payload::parse(pretty.as_bytes())) {
            (Ok(a), Ok(b)) => {
                prop_assert_eq!(a.fingerprint(), b.fingerprint(), "layout does not change the fingerprint");
                let again = Payload::parse(a.canonical().as_bytes()).unwrap();
                prop_assert_eq!(again.canonical(), a.canonical(), "canonical of canonical is itself");
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "compact {a:?} and pretty {b:?} disagree"),
        }
    }

    #[test]
    fn the_sanitizer_leaves_nothing_a_terminal_would_act_on(text in any::<String>()) {
        let shown = escape_untrusted(&text);
        prop_assert!(!shown.chars().any(char::is_control), "{shown:?}");
        let invisible = ['\u{202e}', '\u{200b}'];
        prop_assert!(!shown.contains(invisible), "{:?}", shown);
    }
}

/// The hostile inputs fuzzers found first, kept as a seed corpus.
#[test]
fn seed_corpus() {
    for key in ["", " ", "\u{0}", "a\u{85}b", "\u{feff}k", &"é".repeat(128), "x@y.zz", "%40a.bc", "a%40b.cd"] {
        let _ = ActionKey::parse(key);
    }
    for payload in
        [&b"\xef\xbb\xbf{}"[..], b"[[[[[[[[[[", b"\"\\ud834\\udd1e\"", b"1e999999", b"-0", b"{\"a\":1,\"a\":2}"]
    {
        let _ = Payload::parse(payload);
    }
    assert_eq!(
        Payload::parse(br#"{"a":1,"a":2}"#),
        Err(PayloadError::DuplicateKey { path: "$.a".to_owned() }),
        "a repeated key is refused, not settled by the last value as serde_json would"
    );
}

/// Found by the `payload` fuzz target: without serde_json's exact float parsing, `4e-30` read as
/// the neighbouring double and its canonical form (`3.9999999999999996e-30`) named a different
/// number, so the canonical text of a canonical text differed and so did its fingerprint.
#[test]
fn regression_a_float_canonicalizes_to_itself() {
    for text in ["4e-30", "0.1", "1e308", "-2.5e-7", "3.141592653589793", "5e-324", "[1.7976931348623157e308]"] {
        let payload = Payload::parse(text.as_bytes()).unwrap();
        let again = Payload::parse(payload.canonical().as_bytes()).unwrap();
        assert_eq!(again.canonical(), payload.canonical(), "{text}");
        assert_eq!(again.fingerprint(), payload.fingerprint(), "{text}");
        let expected: serde_json::Value = text.parse::<serde_json::Value>().unwrap();
        assert_eq!(payload.canonical(), expected.to_string(), "{text} keeps its value");
    }
    assert_eq!(Payload::parse(b"4e-30").unwrap().canonical(), "4e-30");
}

/// Found by the fuzz targets: fillers, variation selectors and the line and paragraph separators
/// render as nothing or break a line, so keys refuse them and the sanitizer escapes them.
#[test]
fn regression_fillers_variation_selectors_and_separators_are_invisible() {
    for ch in ['\u{034f}', '\u{3164}', '\u{fe0f}', '\u{1bca0}', '\u{1d173}', '\u{13430}', '\u{e0100}', '\u{2028}'] {
        let key = format!("acme:order{ch}:1");
        assert!(ActionKey::parse(&key).is_err(), "{ch:?} accepted in a key");
        let shown = escape_untrusted(&format!("a{ch}b"));
        assert!(!shown.contains(ch), "{ch:?} passed the sanitizer: {shown:?}");
    }
}
