//! Payloads: the approved JSON content of an action, its canonical form and its fingerprint.

use sha2::{Digest, Sha256};
use std::fmt;

/// Largest payload accepted, in bytes, as delivered.
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;

/// A validated payload in canonical form: RFC 8785 (JCS), so equal JSON values have one text
/// and one fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    canonical: String,
    fingerprint: Fingerprint,
}

/// SHA-256 of the canonical serialization, as lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Fingerprint(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("the payload is missing")]
    Missing,
    #[error("the payload is {bytes} bytes; at most {MAX_PAYLOAD_BYTES} bytes (256 KiB) are allowed")]
    TooLarge { bytes: usize },
    #[error("the payload is not valid UTF-8 (invalid byte at offset {at})")]
    NotUtf8 { at: usize },
    #[error("the payload contains a NUL character, which cannot be stored or sent safely")]
    ContainsNul,
    #[error("the payload is not valid JSON: {0}")]
    NotJson(String),
    /// An object names a key twice: which value was meant cannot be told, so neither is kept.
    #[error("the payload repeats the key {path}: each key may appear once in an object")]
    DuplicateKey { path: String },
    /// An integer that would come back as a different number: beyond ±(2^53 - 1), a 64-bit float
    /// (how RFC 8785 and I-JSON read numbers) holds only some integers.
    #[error(
        "the integer at {path} cannot be kept exactly: beyond -{0} to {0} (2^53 - 1) a 64-bit float, as RFC 8785 and \
         I-JSON read numbers, holds only some integers; send it as a string",
        super::exact_json::MAX_SAFE_INTEGER
    )]
    IntegerOutOfRange { path: String },
    /// A number with more precision than a 64-bit float keeps, which would come back rounded.
    #[error(
        "the number at {path} cannot be kept exactly as written (a 64-bit floating-point number keeps about 17 \
         significant digits); send it as a string"
    )]
    InexactNumber { path: String },
    /// A number beyond what a 64-bit float can represent at all, such as `1e400`.
    #[error("the number at {path} is too large to represent (beyond about ±1.8e308); send it as a string")]
    NumberOutOfRange { path: String },
}

impl Payload {
    /// Validates a payload as delivered and computes its canonical form.
    pub fn parse(raw: &[u8]) -> Result<Self, PayloadError> {
        if raw.len() > MAX_PAYLOAD_BYTES {
            return Err(PayloadError::TooLarge { bytes: raw.len() });
        }
        let text = std::str::from_utf8(raw).map_err(|e| PayloadError::NotUtf8 { at: e.valid_up_to() })?;
        if text.trim().is_empty() {
            return Err(PayloadError::Missing);
        }
        if text.contains('\0') {
            return Err(PayloadError::ContainsNul);
        }
        let value = super::exact_json::read(text)?;
        if contains_nul(&value) {
            return Err(PayloadError::ContainsNul);
        }
        Ok(Self::from_value(&value))
    }

    /// Rebuilds a payload read back from storage. The fingerprint was computed in Rust when the
    /// payload was first accepted and is stored as text, so nothing the database does to JSON
    /// (reordering, dropping duplicate keys) can change what it identifies.
    pub fn from_stored(canonical: String, fingerprint: String) -> Self {
        Self { canonical, fingerprint: Fingerprint(fingerprint) }
    }

    fn from_value(value: &serde_json::Value) -> Self {
        let canonical = super::jcs::canonical(value);
        let fingerprint = Fingerprint::of(&canonical);
        Self { canonical, fingerprint }
    }

    /// Whether this payload, as delivered, is the same JSON value as `recorded`, a payload read
    /// from storage. Equal fingerprints say so at once. A payload recorded before canonical text
    /// followed RFC 8785 (an earlier version kept `1.0`, `-0.0` and `1e+16` as Rust writes them) has
    /// another text and fingerprint for the same value: its text is canonicalized again to compare.
    pub fn is_same_as(&self, recorded: &Payload) -> bool {
        self.fingerprint == recorded.fingerprint
            || Self::parse(recorded.canonical.as_bytes()).is_ok_and(|now| now.fingerprint == self.fingerprint)
    }

    pub fn canonical(&self) -> &str {
        &self.canonical
    }

    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(&self.canonical).expect("canonical payload is valid JSON")
    }

    /// Indented JSON for people to read.
    pub fn pretty(&self) -> String {
        serde_json::to_string_pretty(&self.value()).expect("a JSON value always serializes")
    }

    /// What `proposed` changes of this payload, field by field: what a person compares before
    /// approving or rejecting it.
    pub fn changes_to(&self, proposed: &Payload) -> PayloadChanges {
        let (approved, proposed) = (leaves(&self.value()), leaves(&proposed.value()));
        let fields: std::collections::BTreeSet<&String> = approved.keys().chain(proposed.keys()).collect();
        let mut changes = PayloadChanges::default();
        for field in fields {
            let (old, new) = (approved.get(field), proposed.get(field));
            if old == new {
                changes.unchanged += 1;
            } else {
                changes.changed.push(FieldChange {
                    field: field.clone(),
                    approved: old.cloned(),
                    proposed: new.cloned(),
                });
            }
        }
        changes
    }
}

/// The fields a proposed payload changes, each a leaf of the JSON value named by its JSON pointer
/// (an empty object or array is a leaf), in the order of their pointers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PayloadChanges {
    pub changed: Vec<FieldChange>,
    /// How many fields both payloads hold with the same value.
    pub unchanged: usize,
}

/// One field a proposal changes, with both values as JSON text; `None` where a payload lacks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldChange {
    pub field: String,
    pub approved: Option<String>,
    pub proposed: Option<String>,
}

impl fmt::Display for FieldChange {
    /// `qty: 1 -> 2`, with `(absent)` for a field added or removed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.field.strip_prefix('/').filter(|n| !n.is_empty()).unwrap_or(&self.field);
        let absent = "(absent)";
        let (old, new) = (self.approved.as_deref().unwrap_or(absent), self.proposed.as_deref().unwrap_or(absent));
        write!(f, "{name}: {old} -> {new}")
    }
}

/// A JSON value as its leaves: JSON pointer to the leaf's JSON text (an empty object or array is
/// a leaf).
fn leaves(value: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    fn walk(value: &serde_json::Value, at: String, out: &mut std::collections::BTreeMap<String, String>) {
        match value {
            serde_json::Value::Object(map) if !map.is_empty() => {
                for (name, inner) in map {
                    walk(inner, format!("{at}/{}", name.replace('~', "~0").replace('/', "~1")), out);
                }
            }
            serde_json::Value::Array(items) if !items.is_empty() => {
                for (index, inner) in items.iter().enumerate() {
                    walk(inner, format!("{at}/{index}"), out);
                }
            }
            leaf => {
                let at = if at.is_empty() { "/".to_owned() } else { at };
                out.insert(at, leaf.to_string());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(value, String::new(), &mut out);
    out
}

impl Fingerprint {
    fn of(canonical: &str) -> Self {
        Self(sha256_hex(canonical.as_bytes()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 hex digits, enough for people to compare two fingerprints.
    pub fn short(&self) -> &str {
        &self.0[..12.min(self.0.len())]
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

/// SHA-256 of `data` as lowercase hex.
pub fn sha256_hex(data: &[u8]) -> String {
    use fmt::Write as _;
    let mut hex = String::with_capacity(64);
    for byte in Sha256::digest(data) {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

fn contains_nul(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(items) => items.iter().any(contains_nul),
        serde_json::Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || contains_nul(v)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_name_each_field_changed_added_and_removed() {
        let approved = Payload::parse(br#"{"qty":1,"note":"a","customer":{"id":7},"tags":[]}"#).unwrap();
        let proposed = Payload::parse(br#"{"qty":2,"customer":{"id":7},"tags":[],"rush":true}"#).unwrap();
        let changes = approved.changes_to(&proposed);
        let said: Vec<String> = changes.changed.iter().map(ToString::to_string).collect();
        assert_eq!(said, ["note: \"a\" -> (absent)", "qty: 1 -> 2", "rush: (absent) -> true"]);
        assert_eq!(changes.unchanged, 2, "customer/id and the empty tags");
        assert_eq!(approved.changes_to(&approved).changed, []);
    }

    #[test]
    fn canonical_form_sorts_keys_and_drops_whitespace() {
        let a = Payload::parse(br#"{ "b": 1, "a": {"y": [1, 2], "x": "z"} }"#).unwrap();
        let b = Payload::parse(br#"{"a":{"x":"z","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(a.canonical(), r#"{"a":{"x":"z","y":[1,2]},"b":1}"#);
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.fingerprint().as_str().len(), 64);
        let c = Payload::parse(br#"{"a":{"x":"z","y":[2,1]},"b":1}"#).unwrap();
        assert_ne!(a.fingerprint(), c.fingerprint());
    }

    #[test]
    fn refuses_bad_payloads() {
        assert_eq!(Payload::parse(b""), Err(PayloadError::Missing));
        assert_eq!(Payload::parse(b"{\"a\":\0}"), Err(PayloadError::ContainsNul));
        assert_eq!(Payload::parse(br#"{"a":"\u0000"}"#), Err(PayloadError::ContainsNul));
        assert_eq!(Payload::parse(b"{\"a\":\"\xff\"}"), Err(PayloadError::NotUtf8 { at: 6 }));
        assert!(matches!(Payload::parse(b"{\"a\":"), Err(PayloadError::NotJson(_))));
        assert!(matches!(Payload::parse(br#"{"a":"\ud800"}"#), Err(PayloadError::NotJson(_))));
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(matches!(Payload::parse(deep.as_bytes()), Err(PayloadError::NotJson(_))));
        let big = format!("\"{}\"", "x".repeat(MAX_PAYLOAD_BYTES));
        assert!(matches!(Payload::parse(big.as_bytes()), Err(PayloadError::TooLarge { .. })));
    }

    #[test]
    fn a_repeated_key_is_refused_naming_it() {
        let refused = |text: &str| Payload::parse(text.as_bytes()).unwrap_err();
        assert_eq!(refused(r#"{"a":1,"a":2}"#), PayloadError::DuplicateKey { path: "$.a".into() });
        assert_eq!(refused(r#"{"a":1,"a":1}"#), PayloadError::DuplicateKey { path: "$.a".into() });
        let nested = r#"{"items":[{"qty":1},{"qty":2},{"sku":"x","qty":3,"qty":4}]}"#;
        assert_eq!(refused(nested), PayloadError::DuplicateKey { path: "$.items[2].qty".into() });
        assert_eq!(
            refused(nested).to_string(),
            "the payload repeats the key $.items[2].qty: each key may appear once in an object"
        );
        // A key that is no plain name is quoted, escaped as untrusted text.
        assert_eq!(
            refused(r#"{"a b\u001b\\\"":{"":0,"":0}}"#),
            PayloadError::DuplicateKey { path: r#"$["a b\x1b\\\""][""]"#.into() }
        );
        // Keys spelt differently but equal once read are the same key.
        assert!(matches!(refused(r#"{"a":1,"\u0061":2}"#), PayloadError::DuplicateKey { .. }));
        // Equal keys in different objects are not repeated.
        assert!(Payload::parse(br#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#).is_ok());
    }

    #[test]
    fn numbers_are_kept_exactly_or_refused_naming_the_field() {
        let canonical = |text: &str| Payload::parse(text.as_bytes()).unwrap().canonical().to_owned();
        let refused = |text: &str| Payload::parse(text.as_bytes()).unwrap_err();
        // The extremes of the integer range come back as written; numbers as ECMAScript writes them.
        assert_eq!(canonical("[9007199254740991,-9007199254740991]"), "[9007199254740991,-9007199254740991]");
        assert_eq!(
            canonical("[0.1,1E+2,100.0,-0,5e-324,1.7976931348623157e308,1e21,1e-7]"),
            "[0.1,100,100,0,5e-324,1.7976931348623157e+308,1e+21,1e-7]"
        );
        for (text, path) in [
            (r#"{"id":9007199254740993}"#, "$.id"),
            (r#"{"id":18446744073709551615}"#, "$.id"),
            (r#"{"id":18446744073709551617}"#, "$.id"),
            (r#"{"id":-9223372036854775808}"#, "$.id"),
            (r#"{"items":[{"qty":1},{"qty":2},{"qty":-9007199254740993}]}"#, "$.items[2].qty"),
        ] {
            assert_eq!(refused(text), PayloadError::IntegerOutOfRange { path: path.into() }, "{text}");
        }
        // Beyond 2^53 - 1, an integer a double holds with the same digits is kept: RFC 8785 writes
        // doubles up to 1e21 this way, so the canonical text reads back as itself.
        assert_eq!(
            canonical("[9007199254740992,-9007199254740994,100000000000000000000,1e20]"),
            "[9007199254740992,-9007199254740994,100000000000000000000,100000000000000000000]"
        );
        assert_eq!(refused("[1, 0.10000000000000001]"), PayloadError::InexactNumber { path: "$[1]".into() });
        assert_eq!(refused("[9007199254740993.0]"), PayloadError::InexactNumber { path: "$[0]".into() });
        assert_eq!(refused(r#"{"a":1e-400}"#), PayloadError::InexactNumber { path: "$.a".into() });
        assert_eq!(refused(r#"{"a":{"b":[1e400]}}"#), PayloadError::NumberOutOfRange { path: "$.a.b[0]".into() });
        assert_eq!(refused("1e400"), PayloadError::NumberOutOfRange { path: "$".into() });
        assert_eq!(
            refused(r#"{"id":18446744073709551617}"#).to_string(),
            "the integer at $.id cannot be kept exactly: beyond -9007199254740991 to 9007199254740991 (2^53 - 1) a \
             64-bit float, as RFC 8785 and I-JSON read numbers, holds only some integers; send it as a string"
        );
        // Zero written with any exponent is still zero; numbers inside strings are text.
        assert_eq!(canonical("[0e999999999999999999999,\"1e400\"]"), r#"[0,"1e400"]"#);
    }

    #[test]
    fn equal_values_are_one_payload_however_their_numbers_are_written() {
        let parse = |text: &str| Payload::parse(text.as_bytes()).unwrap();
        let one = parse(r#"{"q":1,"p":100,"z":0}"#);
        for text in
            [r#"{"q":1.0,"p":1e2,"z":-0}"#, r#"{"z":0.0,"p":100.00,"q":1e0}"#, r#"{"q":10e-1,"p":1E+2,"z":-0e3}"#]
        {
            let other = parse(text);
            assert_eq!((other.canonical(), other.fingerprint()), (one.canonical(), one.fingerprint()), "{text}");
        }
        assert_eq!(one.canonical(), r#"{"p":100,"q":1,"z":0}"#);
    }

    #[test]
    fn a_payload_recorded_before_rfc_8785_is_still_the_same_payload() {
        // Recorded by an earlier version: serde_json's text, `1.0` and `1e+16` kept as Rust writes them.
        let earlier = r#"{"amount":1.0,"big":1e+16}"#;
        let recorded = Payload::from_stored(earlier.to_owned(), sha256_hex(earlier.as_bytes()));
        for text in [r#"{"big":1e16,"amount":1.0}"#, r#"{"amount":1,"big":10000000000000000}"#] {
            let again = Payload::parse(text.as_bytes()).unwrap();
            assert_eq!(again.canonical(), r#"{"amount":1,"big":10000000000000000}"#);
            assert_ne!(again.fingerprint(), recorded.fingerprint());
            assert!(again.is_same_as(&recorded), "{text}");
        }
        assert!(!Payload::parse(br#"{"amount":2.0,"big":1e16}"#).unwrap().is_same_as(&recorded));
        // Member names beyond U+FFFF sort by UTF-16 code units now, by code points before.
        let names = Payload::parse("{\"\u{fb33}\":2,\"\u{1f600}\":1}".as_bytes()).unwrap();
        assert_eq!(names.canonical(), "{\"\u{1f600}\":1,\"\u{fb33}\":2}");
        let earlier = "{\"\u{fb33}\":2,\"\u{1f600}\":1}";
        assert!(names.is_same_as(&Payload::from_stored(earlier.to_owned(), sha256_hex(earlier.as_bytes()))));
    }

    #[test]
    fn a_document_that_is_not_json_is_refused_as_such_whatever_else_it_holds() {
        for text in [r#"{"a":1,"a":2"#, "[18446744073709551617,]", r#"{"a":1,"a":2} x"#, "[1-2]"] {
            assert!(matches!(Payload::parse(text.as_bytes()), Err(PayloadError::NotJson(_))), "{text}");
        }
    }

    #[test]
    fn exactly_the_limit_is_accepted() {
        let body = format!("\"{}\"", "x".repeat(MAX_PAYLOAD_BYTES - 2));
        assert!(Payload::parse(body.as_bytes()).is_ok());
    }
}
