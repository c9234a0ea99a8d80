//! The HTTP API's contract, enforced: the OpenAPI document's request schemas are checked against
//! every JSON body before its handler reads it, so that the server refuses exactly what the
//! document refuses (400, naming where), and the ledger is asked only about what the document
//! allows. The checker knows the part of JSON Schema the document uses; a test keeps the document
//! within it.

use super::problem::Problem;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Number, Value};
use std::fmt;
use std::sync::LazyLock;

/// The OpenAPI document, as served at `/v1/openapi.json`.
pub const OPENAPI: &str = include_str!("openapi.json");

static DOCUMENT: LazyLock<Value> =
    LazyLock::new(|| serde_json::from_str(OPENAPI).expect("the OpenAPI document is JSON (a test reads it)"));

/// The parsed OpenAPI document.
pub fn document() -> &'static Value {
    &DOCUMENT
}

/// The keywords of JSON Schema the checker applies; anything else in the document is refused by a
/// test, so that no rule of the document goes unenforced.
pub const KNOWN_KEYWORDS: &[&str] = &[
    "$ref",
    "type",
    "enum",
    "properties",
    "required",
    "additionalProperties",
    "unevaluatedProperties",
    "allOf",
    "anyOf",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
];

/// Keywords that describe and constrain nothing.
pub const ANNOTATIONS: &[&str] = &["description", "title", "examples", "default", "format"];

/// Where a body departs from its schema: a JSON Pointer into the body, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{violation}", at_words(pointer))]
pub struct Mismatch {
    pub pointer: String,
    pub violation: Violation,
}

fn at_words(pointer: &str) -> String {
    if pointer.is_empty() { String::new() } else { format!("at {pointer}: ") }
}

/// How a value departs from its schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("expected {expected}, found {found}")]
    WrongType { expected: String, found: &'static str },
    #[error("the member {0:?} is required")]
    Missing(String),
    #[error("there is no member {member:?}; the members are {allowed}")]
    Unknown { member: String, allowed: String },
    #[error("the member {0:?} is given twice")]
    Repeated(String),
    #[error("empty or too short: at least {0} characters")]
    TooShort(u64),
    #[error("too long: at most {0} characters")]
    TooLong(u64),
    #[error("too few items: at least {0}")]
    TooFewItems(u64),
    #[error("too many items: at most {0}")]
    TooManyItems(u64),
    #[error("{value} is below the least allowed, {minimum}")]
    BelowMinimum { value: String, minimum: String },
    #[error("{value} is above the largest allowed, {maximum}")]
    AboveMaximum { value: String, maximum: String },
    #[error("{value} is not one of {allowed}")]
    NotOneOf { value: String, allowed: String },
    #[error("matches none of the forms allowed here")]
    NoAlternative,
}

impl From<Mismatch> for Problem {
    fn from(mismatch: Mismatch) -> Self {
        Problem::bad_request(format!("the body does not match the API's schema: {mismatch}"))
            .with("pointer", mismatch.pointer)
    }
}

/// Checks `body` against the document's schema `name` (`#/components/schemas/NAME`).
pub fn check(name: &str, body: &[u8]) -> Result<(), Mismatch> {
    let raw: &RawValue = serde_json::from_slice(body)
        .map_err(|e| Mismatch { pointer: String::new(), violation: Violation::NotJson(e.to_string()) })?;
    check_raw(&named_schema(name), raw, "")
}

/// The schema a body is checked against, as a reference into the document.
fn named_schema(name: &str) -> Value {
    serde_json::json!({ "$ref": format!("#/components/schemas/{name}") })
}

/// Checks a value already parsed (a response document, in tests) against schema `name`.
pub fn check_value(name: &str, value: &Value) -> Result<(), Mismatch> {
    check_against(&named_schema(name), value)
}

/// Checks a value against a schema of the document (or a `$ref` to one).
pub fn check_against(schema: &Value, value: &Value) -> Result<(), Mismatch> {
    let raw = serde_json::value::to_raw_value(value).expect("a JSON value serializes");
    check_raw(schema, &raw, "")
}

/// The member names an object schema allows, its own and those of its `allOf` parts.
pub fn member_names(schema: &Value) -> Vec<String> {
    evaluated_names(schema)
}

/// Whether a schema allows no members beyond those it names.
pub fn is_closed(schema: &Value) -> bool {
    let schema = resolve(schema);
    schema.get("additionalProperties") == Some(&Value::Bool(false))
        || schema.get("unevaluatedProperties") == Some(&Value::Bool(false))
}

/// The schema a `$ref` names; the document's own references only.
pub fn resolve(schema: &Value) -> &Value {
    let mut schema = schema;
    let mut document: &Value = document();
    // References are resolved in the document itself: a schema handed in from elsewhere is only
    // ever one of its references.
    while let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let path = reference.strip_prefix("#/").expect("a reference within the document");
        for part in path.split('/') {
            document = &document[part];
        }
        assert!(!document.is_null(), "the reference {reference} names a schema of the document");
        schema = document;
        document = self::document();
    }
    schema
}

/// The JSON kind of a raw value, from its first character.
fn kind(raw: &RawValue) -> &'static str {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

fn fits_type(name: &str, raw: &RawValue) -> bool {
    match (name, kind(raw)) {
        ("object", "an object")
        | ("array", "an array")
        | ("string", "a string")
        | ("boolean", "a boolean")
        | ("null", "null")
        | ("number", "a number") => true,
        // As JSON Schema counts integers: any number without a fraction (3, 3.0, 3e2).
        ("integer", "a number") => serde_json::from_str::<Number>(raw.get()).is_ok_and(|n| is_whole(&n)),
        _ => false,
    }
}

fn type_words(name: &str) -> &str {
    match name {
        "object" => "an object",
        "array" => "an array",
        "string" => "a string",
        "boolean" => "a boolean",
        "integer" => "an integer",
        "number" => "a number",
        other => other,
    }
}

fn check_raw(schema: &Value, raw: &RawValue, pointer: &str) -> Result<(), Mismatch> {
    let schema = resolve(schema);
    // Any value (a payload): left whole, to be read as the sender wrote it.
    if schema.as_object().is_some_and(|members| members.keys().all(|k| ANNOTATIONS.contains(&k.as_str()))) {
        return Ok(());
    }
    let fail = |violation| Err(Mismatch { pointer: pointer.to_owned(), violation });
    if let Some(types) = schema.get("type") {
        let names: Vec<&str> = match types {
            Value::String(name) => vec![name.as_str()],
            Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !names.iter().any(|name| fits_type(name, raw)) {
            let expected = names.iter().map(|n| type_words(n)).collect::<Vec<_>>().join(" or ");
            return fail(Violation::WrongType { expected, found: kind(raw) });
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        let value: Value = serde_json::from_str(raw.get()).map_err(|e| not_json(pointer, &e))?;
        if !allowed.contains(&value) {
            let allowed = allowed.iter().map(Value::to_string).collect::<Vec<_>>().join(", ");
            return fail(Violation::NotOneOf { value: value.to_string(), allowed });
        }
    }
    for part in schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        check_raw(part, raw, pointer)?;
    }
    if let Some(alternatives) = schema.get("anyOf").and_then(Value::as_array)
        && !alternatives.iter().any(|alternative| check_raw(alternative, raw, pointer).is_ok())
    {
        return fail(Violation::NoAlternative);
    }
    match kind(raw) {
        "an object" => check_object(schema, raw, pointer),
        "an array" => check_array(schema, raw, pointer),
        "a string" => {
            let text: String = serde_json::from_str(raw.get()).map_err(|e| not_json(pointer, &e))?;
            let length = text.chars().count() as u64;
            if let Some(least) = schema.get("minLength").and_then(Value::as_u64)
                && length < least
            {
                return fail(Violation::TooShort(least));
            }
            if let Some(most) = schema.get("maxLength").and_then(Value::as_u64)
                && length > most
            {
                return fail(Violation::TooLong(most));
            }
            Ok(())
        }
        "a number" => check_number(schema, raw, pointer),
        _ => Ok(()),
    }
}

fn not_json(pointer: &str, error: &serde_json::Error) -> Mismatch {
    Mismatch { pointer: pointer.to_owned(), violation: Violation::NotJson(error.to_string()) }
}

/// A JSON Pointer to a member or item, escaped as RFC 6901 says.
fn pointer_to(pointer: &str, part: &str) -> String {
    format!("{pointer}/{}", part.replace('~', "~0").replace('/', "~1"))
}

/// An object's members in the order written, a repeated name kept (where a map would keep one).
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Collect;
        impl<'de> Visitor<'de> for Collect {
            type Value = Members;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(entry);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Collect)
    }
}

/// The member names a schema says itself and through its `allOf` parts: what
/// `unevaluatedProperties: false` leaves room for.
fn evaluated_names(schema: &Value) -> Vec<String> {
    let schema = resolve(schema);
    let mut names: Vec<String> =
        schema.get("properties").and_then(Value::as_object).into_iter().flatten().map(|(n, _)| n.clone()).collect();
    for part in schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        names.extend(evaluated_names(part));
    }
    names
}

fn check_object(schema: &Value, raw: &RawValue, pointer: &str) -> Result<(), Mismatch> {
    let Members(members) = serde_json::from_str(raw.get()).map_err(|e| not_json(pointer, &e))?;
    let fail = |violation| Err(Mismatch { pointer: pointer.to_owned(), violation });
    let mut seen: Vec<&str> = Vec::with_capacity(members.len());
    for (name, _) in &members {
        if seen.contains(&name.as_str()) {
            return fail(Violation::Repeated(name.clone()));
        }
        seen.push(name);
    }
    for required in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if !seen.contains(&required) {
            return fail(Violation::Missing(required.to_owned()));
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false))
        || schema.get("unevaluatedProperties") == Some(&Value::Bool(false));
    let allowed = if closed { evaluated_names(schema) } else { Vec::new() };
    for (name, value) in &members {
        let here = pointer_to(pointer, name);
        match properties.and_then(|p| p.get(name)) {
            Some(property) => check_raw(property, value, &here)?,
            None if closed && !allowed.contains(name) => {
                return fail(Violation::Unknown { member: name.clone(), allowed: allowed.join(", ") });
            }
            None => {
                if let Some(other) = schema.get("additionalProperties").filter(|s| s.is_object()) {
                    check_raw(other, value, &here)?;
                }
            }
        }
    }
    Ok(())
}

fn check_array(schema: &Value, raw: &RawValue, pointer: &str) -> Result<(), Mismatch> {
    let items: Vec<Box<RawValue>> = serde_json::from_str(raw.get()).map_err(|e| not_json(pointer, &e))?;
    let fail = |violation| Err(Mismatch { pointer: pointer.to_owned(), violation });
    if let Some(least) = schema.get("minItems").and_then(Value::as_u64)
        && (items.len() as u64) < least
    {
        return fail(Violation::TooFewItems(least));
    }
    if let Some(most) = schema.get("maxItems").and_then(Value::as_u64)
        && (items.len() as u64) > most
    {
        return fail(Violation::TooManyItems(most));
    }
    if let Some(item_schema) = schema.get("items") {
        for (index, item) in items.iter().enumerate() {
            check_raw(item_schema, item, &pointer_to(pointer, &index.to_string()))?;
        }
    }
    Ok(())
}

fn is_whole(number: &Number) -> bool {
    number.is_i64() || number.is_u64() || number.as_f64().is_some_and(|f| f.fract() == 0.0)
}

/// Reads an optional integer member as the schema's `integer` allows it: any number without a
/// fraction (`3`, `3.0`, `3e2`) that an `i64` holds.
pub(super) fn whole_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    // 2^63: the first whole float beyond i64; every whole float below it converts exactly.
    const BEYOND: f64 = 9_223_372_036_854_775_808.0;
    let number = Number::deserialize(deserializer)?;
    #[expect(clippy::cast_possible_truncation, reason = "a whole float within i64's range converts exactly")]
    let whole = number
        .as_i64()
        .or_else(|| number.as_f64().filter(|f| f.fract() == 0.0 && (-BEYOND..BEYOND).contains(f)).map(|f| f as i64));
    whole.map(Some).ok_or_else(|| serde::de::Error::custom(format!("{number} is not an integer an i64 holds")))
}

/// A number as an exact integer where it is one, for bounds beyond what a float holds exactly.
fn exact(number: &Number) -> Option<i128> {
    number.as_i64().map(i128::from).or_else(|| number.as_u64().map(i128::from))
}

fn below(value: &Number, bound: &Number) -> bool {
    match (exact(value), exact(bound)) {
        (Some(value), Some(bound)) => value < bound,
        _ => value.as_f64().unwrap_or(f64::NAN) < bound.as_f64().unwrap_or(f64::NAN),
    }
}

fn check_number(schema: &Value, raw: &RawValue, pointer: &str) -> Result<(), Mismatch> {
    let fail = |violation| Err(Mismatch { pointer: pointer.to_owned(), violation });
    // A number beyond what a float holds is above any bound.
    let Ok(value) = serde_json::from_str::<Number>(raw.get()) else {
        return match schema.get("maximum") {
            Some(maximum) => {
                fail(Violation::AboveMaximum { value: raw.get().to_owned(), maximum: maximum.to_string() })
            }
            None => Ok(()),
        };
    };
    if let Some(Value::Number(minimum)) = schema.get("minimum")
        && below(&value, minimum)
    {
        return fail(Violation::BelowMinimum { value: value.to_string(), minimum: minimum.to_string() });
    }
    if let Some(Value::Number(maximum)) = schema.get("maximum")
        && below(maximum, &value)
    {
        return fail(Violation::AboveMaximum { value: value.to_string(), maximum: maximum.to_string() });
    }
    Ok(())
}

/// Refuses, 415, a body that is not plain JSON: a `Content-Type` other than `application/json`
/// (parameters such as `charset=utf-8` allowed) or any `Content-Encoding` (the server decodes
/// none).
pub fn require_json(headers: &HeaderMap) -> Result<(), Problem> {
    let media_type = headers.get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap_or("(not text)"));
    let is_json = media_type
        .and_then(|text| text.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        let sent = media_type.map_or_else(|| "no Content-Type".to_owned(), |t| format!("Content-Type {t:?}"));
        return Err(Problem::unsupported_media_type(format!(
            "the body must be JSON, sent as Content-Type: application/json; this request has {sent}"
        )));
    }
    if let Some(coding) = headers.get(header::CONTENT_ENCODING) {
        let coding = coding.to_str().unwrap_or("(not text)");
        if !coding.trim().eq_ignore_ascii_case("identity") {
            return Err(Problem::unsupported_media_type(format!(
                "the body is sent with Content-Encoding {coding:?}; send it unencoded"
            )));
        }
    }
    Ok(())
}

/// Answers an error that is not already a problem document (the router's own answers: a method a
/// route does not take, a path it cannot read) as one, with the same status and the text as its
/// detail, and the headers such as `Allow` kept.
pub async fn problems_only(request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(super::problem::PROBLEM_JSON.as_bytes()));
    if is_problem || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_owned();
    let problem = Problem::for_status(status, text);
    let mut answer = axum::response::IntoResponse::into_response(problem);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CONTENT_TYPE);
    for (name, value) in &parts.headers {
        answer.headers_mut().entry(name).or_insert_with(|| value.clone());
    }
    answer
}

/// The problem a bare status stands for, where the router answered without one.
pub fn kind_of(status: StatusCode) -> (&'static str, &'static str) {
    match status {
        StatusCode::BAD_REQUEST => ("bad_request", "Malformed request"),
        StatusCode::NOT_FOUND => ("not_found", "Not found"),
        StatusCode::METHOD_NOT_ALLOWED => ("method_not_allowed", "Method not allowed"),
        StatusCode::PAYLOAD_TOO_LARGE => ("too_large", "Request too large"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ("unsupported_media_type", "Unsupported media type"),
        status if status.is_server_error() => ("server_error", "Server error"),
        _ => ("client_error", "Request refused"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn violation(name: &str, body: &str) -> Option<(String, Violation)> {
        check(name, body.as_bytes()).err().map(|m| (m.pointer, m.violation))
    }

    #[test]
    fn a_submission_must_be_an_object_with_its_key_and_payload() {
        assert_eq!(violation("Submission", r#"{"key": "a:1", "payload": {"n": 1e400}}"#), None);
        assert!(
            matches!(violation("Submission", r#"["a:1", {}]"#), Some((p, Violation::WrongType { .. })) if p.is_empty())
        );
        assert_eq!(
            violation("Submission", r#"{"key": "a:1"}"#),
            Some((String::new(), Violation::Missing("payload".into())))
        );
        assert_eq!(
            violation("Submission", r#"{"key": "", "payload": 1}"#),
            Some(("/key".into(), Violation::TooShort(1)))
        );
        assert!(matches!(
            violation("Submission", r#"{"key": "a", "payload": 1, "colour": "blue"}"#),
            Some((_, Violation::Unknown { member, .. })) if member == "colour"
        ));
        assert_eq!(
            violation("Submission", r#"{"key": "a", "key": "b", "payload": 1}"#),
            Some((String::new(), Violation::Repeated("key".into())))
        );
        assert!(matches!(
            violation("Submission", r#"{"key": "a", "payload": 1, "source_version": 9223372036854775808}"#),
            Some((p, Violation::AboveMaximum { .. })) if p == "/source_version"
        ));
        assert_eq!(
            violation("Submission", r#"{"key": "a", "payload": 1, "source_version": 9223372036854775807}"#),
            None
        );
        assert!(matches!(
            violation("Submission", r#"{"key": "a", "payload": 1, "source_version": 1.5}"#),
            Some((_, Violation::WrongType { .. }))
        ));
        assert_eq!(violation("Submission", r#"{"key": "a", "payload": 1, "source_version": 4.0}"#), None);
        assert!(matches!(
            violation("Submission", r#"{"key": "a", "payload": 1, "source_version": -1}"#),
            Some((_, Violation::BelowMinimum { .. }))
        ));
        assert!(matches!(
            violation("Submission", r#"{"key": "a", "payload": 1, "event_id": null}"#),
            Some((p, Violation::WrongType { .. })) if p == "/event_id"
        ));
        assert!(matches!(violation("Submission", "{"), Some((_, Violation::NotJson(_)))));
    }

    #[test]
    fn a_batch_item_is_named_by_its_place() {
        let body = r#"{"actions": [{"key": "a", "payload": 1}, {"key": "b"}]}"#;
        assert_eq!(violation("Batch", body), Some(("/actions/1".into(), Violation::Missing("payload".into()))));
        let many = format!(r#"{{"actions": [{}]}}"#, vec![r#"{"key":"a","payload":1}"#; 1001].join(","));
        assert_eq!(violation("Batch", &many), Some(("/actions".into(), Violation::TooManyItems(1000))));
    }

    #[test]
    fn a_command_is_checked_too() {
        assert_eq!(violation("Command", r#"{"reason": "checked", "version": 3}"#), None);
        assert_eq!(
            violation("Command", r#"{"version": 3}"#),
            Some((String::new(), Violation::Missing("reason".into())))
        );
        assert!(matches!(
            violation("Command", r#"{"reason": "checked", "as": "maybe"}"#),
            Some((p, Violation::NotOneOf { .. })) if p == "/as"
        ));
        assert!(matches!(
            violation("Command", r#"{"reason": "checked", "colour": 1}"#),
            Some((_, Violation::Unknown { .. }))
        ));
    }

    #[test]
    fn a_whole_number_is_read_as_json_schema_counts_integers() {
        #[derive(serde::Deserialize)]
        struct Versioned {
            #[serde(default, deserialize_with = "whole_number")]
            version: Option<i64>,
        }
        let read = |text: &str| serde_json::from_str::<Versioned>(text).map(|v| v.version).ok();
        assert_eq!(read(r#"{"version": 3}"#), Some(Some(3)));
        assert_eq!(read(r#"{"version": 3.0}"#), Some(Some(3)));
        assert_eq!(read(r#"{"version": 3e2}"#), Some(Some(300)));
        assert_eq!(read(r#"{"version": 9223372036854775807}"#), Some(Some(i64::MAX)));
        assert_eq!(read("{}"), Some(None));
        for refused in ["3.5", "9223372036854775808", "9.3e18", "null", "\"3\""] {
            assert_eq!(read(&format!(r#"{{"version": {refused}}}"#)), None, "{refused}");
        }
    }

    #[test]
    fn a_pointer_escapes_slashes_and_tildes() {
        assert_eq!(pointer_to("", "a/b~c"), "/a~1b~0c");
    }

    /// Every schema of the document uses only keywords the checker applies (or annotations), so
    /// that no rule the document states goes unchecked.
    #[test]
    fn the_document_uses_only_keywords_the_checker_applies() {
        fn walk(schema: &Value, at: &str, unknown: &mut Vec<String>) {
            let Some(members) = schema.as_object() else { return };
            for (keyword, value) in members {
                // If-Match's pattern is the one the command route checks itself (if_match_version).
                let checked_by_its_route = keyword == "pattern" && at.contains("If-Match");
                if !KNOWN_KEYWORDS.contains(&keyword.as_str())
                    && !ANNOTATIONS.contains(&keyword.as_str())
                    && !checked_by_its_route
                {
                    unknown.push(format!("{at}/{keyword}"));
                }
                match keyword.as_str() {
                    "properties" => {
                        for (name, property) in value.as_object().into_iter().flatten() {
                            walk(property, &format!("{at}/properties/{name}"), unknown);
                        }
                    }
                    "items" | "additionalProperties" => walk(value, &format!("{at}/{keyword}"), unknown),
                    "allOf" | "anyOf" => {
                        for (index, part) in value.as_array().into_iter().flatten().enumerate() {
                            walk(part, &format!("{at}/{keyword}/{index}"), unknown);
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut unknown = Vec::new();
        for (name, schema) in document()["components"]["schemas"].as_object().expect("schemas") {
            walk(schema, &format!("#/components/schemas/{name}"), &mut unknown);
        }
        for (path, item) in document()["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("a path item") {
                for parameter in operation["parameters"].as_array().into_iter().flatten() {
                    walk(&parameter["schema"], &format!("{path} {method} {}", parameter["name"]), &mut unknown);
                }
                for (_, media) in operation["requestBody"]["content"].as_object().into_iter().flatten() {
                    walk(&media["schema"], &format!("{path} {method} body"), &mut unknown);
                }
            }
        }
        assert!(unknown.is_empty(), "keywords the checker does not apply: {unknown:?}");
    }

    /// The member names a type's `Deserialize` reads, as serde declares them.
    fn members_of<T: serde::de::DeserializeOwned>() -> Vec<String> {
        #[derive(Debug)]
        struct Declared(Vec<&'static str>);
        impl fmt::Display for Declared {
            fn fmt(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                write!(formatter, "{:?}", self.0)
            }
        }
        impl std::error::Error for Declared {}
        impl serde::de::Error for Declared {
            fn custom<M: fmt::Display>(_: M) -> Self {
                Self(Vec::new())
            }
        }
        struct Asker;
        impl<'de> Deserializer<'de> for Asker {
            type Error = Declared;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Declared> {
                Err(Declared(Vec::new()))
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Declared> {
                Err(Declared(fields.to_vec()))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
                unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
            }
        }
        let Err(Declared(fields)) = T::deserialize(Asker) else { unreachable!("the asker never gives a value") };
        let mut fields: Vec<String> = fields.into_iter().map(str::to_owned).collect();
        fields.sort();
        fields
    }

    fn property_names(schema: &Value) -> Vec<String> {
        let mut names = evaluated_names(schema);
        names.sort();
        names
    }

    fn required_names(schema: &Value) -> Vec<&str> {
        resolve(schema)["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect()
    }

    /// A value the schema allows: the least one, so that bounds are met.
    fn sample(schema: &Value) -> Value {
        let schema = resolve(schema);
        if let Some(first) = schema.get("enum").and_then(|e| e.get(0)) {
            return first.clone();
        }
        let kind = match &schema["type"] {
            Value::String(kind) => kind.as_str(),
            Value::Array(kinds) => kinds.iter().filter_map(Value::as_str).find(|k| *k != "null").unwrap_or("null"),
            _ => return serde_json::json!({ "any": [1, "value"] }),
        };
        match kind {
            "string" => Value::String("x".repeat(usize::try_from(schema["minLength"].as_u64().unwrap_or(1)).unwrap())),
            "integer" => schema.get("minimum").cloned().unwrap_or_else(|| Value::from(1)),
            "boolean" => Value::Bool(true),
            "array" => Value::Array(vec![sample(&schema["items"])]),
            "object" => Value::Object(
                schema["properties"].as_object().into_iter().flatten().map(|(n, s)| (n.clone(), sample(s))).collect(),
            ),
            other => panic!("no sample for type {other}"),
        }
    }

    /// A request schema and the type its handler reads agree member for member: the same names,
    /// every member the schema allows read by the type, and every member the type needs required
    /// by the schema. A change to either without the other fails here.
    fn agree<T: serde::de::DeserializeOwned>(name: &str) {
        let schema = named_schema(name);
        assert_eq!(members_of::<T>(), property_names(&schema), "the members of {name} and of its handler's type");
        let full = sample(&schema);
        assert_eq!(check_value(name, &full), Ok(()), "the sample of {name} is one it allows");
        serde_json::from_value::<T>(full.clone()).unwrap_or_else(|e| panic!("{name} with every member: {e}"));
        let least: serde_json::Map<String, Value> = full
            .as_object()
            .expect("an object")
            .iter()
            .filter(|(member, _)| required_names(&schema).contains(&member.as_str()))
            .map(|(m, v)| (m.clone(), v.clone()))
            .collect();
        serde_json::from_value::<T>(Value::Object(least))
            .unwrap_or_else(|e| panic!("{name} with only its required members: {e}"));
        for (member, property) in resolve(&schema)["properties"].as_object().expect("properties") {
            // Each member read as the schema types it: a value of another kind is refused by both.
            let mut wrong = full.clone();
            let other =
                if property.get("type").is_some_and(|t| t == "string") { Value::from(7) } else { Value::from("seven") };
            if property.as_object().is_some_and(|p| p.keys().all(|k| ANNOTATIONS.contains(&k.as_str()))) {
                continue;
            }
            wrong[member] = other;
            assert!(check_value(name, &wrong).is_err(), "{name}.{member}: the schema refuses {wrong}");
            assert!(serde_json::from_value::<T>(wrong.clone()).is_err(), "{name}.{member}: the type refuses {wrong}");
        }
    }

    #[test]
    fn each_request_schema_agrees_with_its_handlers_type() {
        agree::<super::super::routes::Envelope>("Submission");
        agree::<super::super::routes::CommandBody>("Command");
        let batch = named_schema("Batch");
        assert_eq!(members_of::<super::super::routes::Batch>(), property_names(&batch));
        assert_eq!(required_names(&batch), ["actions"]);
    }

    #[test]
    fn each_query_agrees_with_its_parameters() {
        let parameters = |path: &str| -> Vec<String> {
            let mut names: Vec<String> = document()["paths"][path]["get"]["parameters"]
                .as_array()
                .expect("parameters")
                .iter()
                .map(|p| p["name"].as_str().expect("a name").to_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(members_of::<super::super::routes::ListQuery>(), parameters("/v1/actions"));
        assert_eq!(members_of::<super::super::routes::RefusedQuery>(), parameters("/v1/refused"));
        let states: Vec<String> = crate::domain::State::ALL.iter().map(|s| format!("\"{}\"", s.as_str())).collect();
        let documented: Vec<String> =
            resolve(&named_schema("State"))["enum"].as_array().expect("states").iter().map(Value::to_string).collect();
        assert_eq!(documented, states, "the document's states are the ledger's");
    }

    #[test]
    fn the_documents_enumerations_are_the_ledgers() {
        use crate::domain::{AttemptOutcome, Event, LookupVerdict};
        let documented = |schema: &str, member: &str| -> Vec<String> {
            resolve(&named_schema(schema))["properties"][member]["enum"]
                .as_array()
                .expect("an enumeration")
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        };
        let names = |all: &[&str]| all.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(documented("AuditEntry", "event"), names(&Event::ALL.map(Event::as_str)));
        let attempt_outcomes: Vec<String> = resolve(&named_schema("AttemptOutcome"))["enum"]
            .as_array()
            .expect("an enumeration")
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        assert_eq!(attempt_outcomes, names(&AttemptOutcome::ALL.map(AttemptOutcome::as_str)));
        assert_eq!(documented("Lookup", "verdict"), names(&LookupVerdict::ALL.map(LookupVerdict::as_str)));
    }
}
