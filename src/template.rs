//! Templates for destination URLs and bodies: `{{placeholders}}` filled from the action.
//!
//! A body template is structured: a string leaf that is exactly one placeholder becomes that JSON
//! value (object, number, ...), and text around placeholders is interpolated as text. Values are
//! never spliced into JSON source, so a payload cannot inject structure into a request.

use crate::domain::ActionRecord;
use serde_json::Value;

/// What placeholders can refer to.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    pub action: &'a ActionRecord,
    pub external_ref: Option<&'a str>,
    pub base_url: Option<&'a str>,
    /// The action this one ran after, with its destination id once completed.
    pub after: Option<&'a ActionRecord>,
}

const NAMES: &str = "key, external_ref, base_url, ownership_version, payload, payload.FIELD, after.key, \
                     after.destination_id, destination_id";

/// Why a template could not be filled for an action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{{after.…}}` for an action submitted without `--after`.
    #[error("{{{{{placeholder}}}}} needs an action submitted with --after")]
    NeedsAfter { placeholder: String },
    /// `{{external_ref}}` inside the external reference's own template.
    #[error("{{{{external_ref}}}} cannot refer to itself")]
    ExternalRefRefersToItself,
    #[error("{{{{base_url}}}} is used but the destination has no base_url")]
    NoBaseUrl,
    /// `{{after.destination_id}}` while the earlier action has not completed.
    #[error("the action {after} has no destination id yet")]
    NoDestinationIdYet { after: String },
    /// `{{destination_id}}` for an action that neither updates a record nor has one.
    #[error("{{{{destination_id}}}} is used but {key} has no destination record yet")]
    NoDestinationId { key: String },
    #[error("the payload has no field {path}")]
    NoField { path: String },
    #[error("unknown placeholder {{{{{placeholder}}}}}; use one of {NAMES}", NAMES = NAMES)]
    UnknownPlaceholder { placeholder: String },
    #[error("unclosed {{{{ in template {template:?}")]
    Unclosed { template: String },
}

impl Context<'_> {
    fn resolve(&self, name: &str) -> Result<Value, TemplateError> {
        let name = name.trim();
        let a = self.action;
        let after = || self.after.ok_or_else(|| TemplateError::NeedsAfter { placeholder: name.to_owned() });
        match name {
            "key" => Ok(Value::String(a.key.to_string())),
            "external_ref" => {
                self.external_ref.map(|r| Value::String(r.to_owned())).ok_or(TemplateError::ExternalRefRefersToItself)
            }
            "base_url" => {
                self.base_url.map(|u| Value::String(u.trim_end_matches('/').to_owned())).ok_or(TemplateError::NoBaseUrl)
            }
            "ownership_version" => Ok(Value::from(a.ownership_version)),
            // An update action's record is the one the action it updates created.
            "destination_id" => a
                .updates_destination_id
                .as_ref()
                .or(a.destination_id.as_ref())
                .map(|id| Value::String(id.clone()))
                .ok_or_else(|| TemplateError::NoDestinationId { key: a.key.to_string() }),
            "payload" => Ok(a.payload.value()),
            "after.key" => Ok(Value::String(after()?.key.to_string())),
            "after.destination_id" => {
                let after = after()?;
                after
                    .destination_id
                    .clone()
                    .map(Value::String)
                    .ok_or_else(|| TemplateError::NoDestinationIdYet { after: after.key.to_string() })
            }
            _ => match name.strip_prefix("payload.") {
                Some(path) => {
                    field(&a.payload.value(), path).ok_or_else(|| TemplateError::NoField { path: path.to_owned() })
                }
                None => Err(TemplateError::UnknownPlaceholder { placeholder: name.to_owned() }),
            },
        }
    }
}

fn field(value: &Value, path: &str) -> Option<Value> {
    path.split('.')
        .try_fold(value, |v, part| match v {
            Value::Object(map) => map.get(part),
            Value::Array(items) => part.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
        .cloned()
}

fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Splits a template into literal text and placeholder names.
fn pieces(template: &str) -> Result<Vec<(bool, &str)>, TemplateError> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let end = rest[start..].find("}}").ok_or_else(|| TemplateError::Unclosed { template: template.to_owned() })?;
        out.push((false, &rest[..start]));
        out.push((true, &rest[start + 2..start + end]));
        rest = &rest[start + end + 2..];
    }
    out.push((false, rest));
    Ok(out)
}

/// Fills a text template; `encode` percent-encodes each value, for URLs. `{{base_url}}` is
/// inserted as it is, being the address itself.
pub fn render_text(template: &str, context: &Context<'_>, encode: bool) -> Result<String, TemplateError> {
    let mut out = String::new();
    for (is_name, piece) in pieces(template)? {
        if !is_name {
            out.push_str(piece);
            continue;
        }
        let text = as_text(&context.resolve(piece)?);
        if encode && piece.trim() != "base_url" {
            out.extend(percent_encoding::utf8_percent_encode(&text, percent_encoding::NON_ALPHANUMERIC));
        } else {
            out.push_str(&text);
        }
    }
    Ok(out)
}

/// Fills a body template.
pub fn render_body(template: &toml::Value, context: &Context<'_>) -> Result<Value, TemplateError> {
    Ok(match template {
        toml::Value::String(s) => match pieces(s)?.as_slice() {
            [(false, ""), (true, name), (false, "")] => context.resolve(name)?,
            _ => Value::String(render_text(s, context, false)?),
        },
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => Value::from(*f),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => {
            Value::Array(items.iter().map(|i| render_body(i, context)).collect::<Result<_, _>>()?)
        }
        toml::Value::Table(table) => Value::Object(
            table
                .iter()
                .map(|(k, v)| Ok((k.clone(), render_body(v, context)?)))
                .collect::<Result<_, TemplateError>>()?,
        ),
    })
}

/// Why a webhook intake's template could not be filled from a request (`[intake.NAME]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookTemplateError {
    #[error("the body has no field {path}")]
    NoBodyField { path: String },
    /// A body field that is there but cannot name anything: see [`Unusable`].
    #[error("the body field {path} is {found}, and a value the intake builds on must be text or a number")]
    UnusableBodyField { path: String, found: Unusable },
    /// `{{body}}` for a body that is not text or a number.
    #[error("the body is {found}, and a value the intake builds on must be text or a number")]
    UnusableBody { found: Unusable },
    /// A number that is not a whole number within ±(2^53 − 1): see [`crate::domain::key::number_in_key`].
    /// `field` is the placeholder's name: `body` or `body.PATH`.
    #[error(
        "{{{{{field}}}}} is the number {number}, and a number the intake builds on must be a whole number of at most \
         9007199254740991 in size (written in one form: 7100, 7100.0 and 7.1e3 all give 7100)"
    )]
    NotWholeNumber { field: String, number: String },
    #[error("the request has no header {name}")]
    NoHeader { name: String },
    #[error("the request's header {name} is empty")]
    EmptyHeader { name: String },
    #[error("unknown placeholder {{{{{placeholder}}}}}; use body.FIELD or header.NAME")]
    UnknownPlaceholder { placeholder: String },
    #[error(transparent)]
    Template(#[from] TemplateError),
}

impl HookTemplateError {
    /// The placeholder whose value was missing or unusable, as the template names it
    /// (`body.id`, `header.X-Event-Id`), so that a refusal can point at the field to fix.
    pub fn field(&self) -> Option<String> {
        match self {
            Self::UnusableBody { .. } => Some("body".to_owned()),
            Self::NotWholeNumber { field, .. } => Some(field.clone()),
            Self::NoBodyField { path } | Self::UnusableBodyField { path, .. } => Some(format!("body.{path}")),
            Self::NoHeader { name } | Self::EmptyHeader { name } => Some(format!("header.{name}")),
            Self::UnknownPlaceholder { .. } | Self::Template(_) => None,
        }
    }
}

/// What a body field held that an intake cannot build a key, event id or version from. Each
/// would make a key that names no record (`shop:order:null:create-task`, `shop:order::create-task`)
/// under which unrelated deliveries merge as duplicates, or splice JSON text into it.
///
/// A boolean is refused too: `true` tells two records apart no better than `null` does, and a
/// template that reads one has almost certainly named the wrong field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    Null,
    /// Text that is empty, or white space only.
    Empty,
    Boolean,
    Object,
    Array,
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Null => "null",
            Self::Empty => "empty",
            Self::Boolean => "a boolean",
            Self::Object => "an object",
            Self::Array => "an array",
        })
    }
}

/// A body value as text for a key, event id or version: non-empty text, or a whole number in its
/// one canonical spelling, nothing else. `path` is the field's, `None` for the whole body.
fn hook_text(value: &Value, path: Option<&str>) -> Result<String, HookTemplateError> {
    let unusable = |found| match path {
        Some(path) => HookTemplateError::UnusableBodyField { path: path.to_owned(), found },
        None => HookTemplateError::UnusableBody { found },
    };
    match value {
        Value::String(s) if s.trim().is_empty() => Err(unusable(Unusable::Empty)),
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => crate::domain::key::number_in_key(n).ok_or_else(|| HookTemplateError::NotWholeNumber {
            field: path.map_or_else(|| "body".to_owned(), |path| format!("body.{path}")),
            number: n.to_string(),
        }),
        Value::Null => Err(unusable(Unusable::Null)),
        Value::Bool(_) => Err(unusable(Unusable::Boolean)),
        Value::Object(_) => Err(unusable(Unusable::Object)),
        Value::Array(_) => Err(unusable(Unusable::Array)),
    }
}

/// Checks an intake template's placeholders before any request arrives.
pub fn intake_placeholders(template: &str) -> Result<(), HookTemplateError> {
    for (is_name, piece) in pieces(template)? {
        let name = piece.trim();
        if is_name && !(name == "body" || name.starts_with("body.") || name.starts_with("header.")) {
            return Err(HookTemplateError::UnknownPlaceholder { placeholder: name.to_owned() });
        }
    }
    Ok(())
}

/// The request headers an intake template reads (`{{header.NAME}}`), as written.
pub fn intake_headers(template: &str) -> Result<Vec<&str>, HookTemplateError> {
    Ok(pieces(template)?
        .into_iter()
        .filter_map(|(is_name, piece)| if is_name { piece.trim().strip_prefix("header.") } else { None })
        .collect())
}

/// Fills an intake template from a webhook's JSON body and its headers (by lower-case name).
/// Every placeholder must find a value that names something: a body field that is absent, null,
/// empty, a boolean, an object or an array is refused, as is a header that is absent or empty
/// (see [`Unusable`]). The text is otherwise taken as it is: the ledger validates the key, event
/// id and version it makes.
pub fn render_hook(
    template: &str,
    body: &Value,
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<String, HookTemplateError> {
    let mut out = String::new();
    for (is_name, piece) in pieces(template)? {
        if !is_name {
            out.push_str(piece);
            continue;
        }
        let name = piece.trim();
        if name == "body" {
            out.push_str(&hook_text(body, None)?);
        } else if let Some(path) = name.strip_prefix("body.") {
            let value = field(body, path).ok_or_else(|| HookTemplateError::NoBodyField { path: path.to_owned() })?;
            out.push_str(&hook_text(&value, Some(path))?);
        } else if let Some(header) = name.strip_prefix("header.") {
            let value = headers
                .get(&header.to_ascii_lowercase())
                .ok_or_else(|| HookTemplateError::NoHeader { name: header.to_owned() })?;
            if value.trim().is_empty() {
                return Err(HookTemplateError::EmptyHeader { name: header.to_owned() });
            }
            out.push_str(value);
        } else {
            return Err(HookTemplateError::UnknownPlaceholder { placeholder: name.to_owned() });
        }
    }
    Ok(out)
}

/// A field of a JSON value by dotted path (`customer.email`, `items.0.sku`).
pub fn body_field(value: &Value, path: &str) -> Option<Value> {
    field(value, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::input::{RawSubmission, Submission};

    fn action(payload: &str) -> ActionRecord {
        let raw =
            RawSubmission { key: Some("acme:o:1".into()), payload: payload.as_bytes().to_vec(), ..Default::default() };
        ActionRecord::new_pending(&Submission::validate(&raw).unwrap(), crate::domain::Timestamp::default())
    }

    #[test]
    fn urls_encode_values_but_not_the_base() {
        let a = action(r#"{"email":"a b&c"}"#);
        let ctx = Context { action: &a, external_ref: Some("acme:o:1"), base_url: Some("http://h:1/"), after: None };
        let url = render_text("{{base_url}}/r?ref={{external_ref}}&q={{payload.email}}", &ctx, true).unwrap();
        assert_eq!(url, "http://h:1/r?ref=acme%3Ao%3A1&q=a%20b%26c");
    }

    #[test]
    fn bodies_take_whole_values_and_never_splice_json() {
        let a = action(r#"{"n":2,"title":"x\"}, \"evil\": {"}"#);
        let mut predecessor = action("{}");
        predecessor.destination_id = Some("T-9".into());
        let ctx = Context { action: &a, external_ref: Some("ref-1"), base_url: None, after: Some(&predecessor) };
        let template: toml::Value = toml::from_str(
            r#"ref = "{{external_ref}}"
               data = "{{payload}}"
               n = "{{payload.n}}"
               title = "Order: {{payload.title}}"
               task = "{{after.destination_id}}"
               fixed = 3"#,
        )
        .unwrap();
        let body = render_body(&template, &ctx).unwrap();
        assert_eq!(body["n"], 2);
        assert_eq!(body["data"]["n"], 2);
        assert_eq!(body["title"], "Order: x\"}, \"evil\": {");
        assert_eq!(body["task"], "T-9");
        assert_eq!(body["fixed"], 3);
        assert_eq!(body.as_object().unwrap().len(), 6);
    }

    #[test]
    fn missing_fields_and_unknown_names_are_errors() {
        let a = action("{}");
        let ctx = Context { action: &a, external_ref: None, base_url: None, after: None };
        let error = |template| render_text(template, &ctx, false).unwrap_err().to_string();
        assert_eq!(error("{{payload.nope}}"), "the payload has no field nope");
        assert_eq!(
            error("{{ secret }}"),
            format!("unknown placeholder {{{{secret}}}}; use one of {NAMES}"),
            "the name as trimmed"
        );
        assert_eq!(
            error("{{after.destination_id}}"),
            "{{after.destination_id}} needs an action submitted with --after"
        );
        assert_eq!(error("{{key"), r#"unclosed {{ in template "{{key""#);
        let mut predecessor = action("{}");
        predecessor.key = crate::domain::ActionKey::parse("acme:o:0").unwrap();
        let ctx = Context { action: &a, external_ref: None, base_url: None, after: Some(&predecessor) };
        let error = render_text("{{after.destination_id}}", &ctx, false).unwrap_err().to_string();
        assert_eq!(error, "the action acme:o:0 has no destination id yet");
        let error = render_text("{{external_ref}}/{{base_url}}", &ctx, false).unwrap_err().to_string();
        assert_eq!(error, "{{external_ref}} cannot refer to itself");
    }

    #[test]
    fn hook_templates_take_body_fields_and_headers() {
        let body: Value = serde_json::json!({"id": 42, "customer": {"email": "a@b"}});
        let headers = std::collections::BTreeMap::from([("x-event".to_owned(), "ev-1".to_owned())]);
        assert_eq!(render_hook("shop:order:{{body.id}}:task", &body, &headers).unwrap(), "shop:order:42:task");
        assert_eq!(render_hook("{{header.X-Event}}", &body, &headers).unwrap(), "ev-1");
        assert_eq!(
            render_hook("{{body.nope}}", &body, &headers).unwrap_err().to_string(),
            "the body has no field nope"
        );
        assert_eq!(
            render_hook("{{header.X-Other}}", &body, &headers).unwrap_err().to_string(),
            "the request has no header X-Other"
        );
        assert!(intake_placeholders("{{payload.id}}").is_err());
        assert!(intake_placeholders("a:{{body.id}}:{{header.x}}").is_ok());
        assert_eq!(intake_headers("a:{{body.id}}:{{ header.X-A }}:{{header.b}}").unwrap(), ["X-A", "b"]);
    }

    #[test]
    fn hook_values_that_name_nothing_are_refused_with_their_field() {
        let headers = std::collections::BTreeMap::from([("x-event".to_owned(), " ".to_owned())]);
        let refused = |body: Value, template: &str| render_hook(template, &body, &headers).unwrap_err();
        let key = "shop:order:{{body.id}}:create-task";
        for (body, found) in [
            (serde_json::json!({"id": null}), Unusable::Null),
            (serde_json::json!({"id": ""}), Unusable::Empty),
            (serde_json::json!({"id": "  "}), Unusable::Empty),
            (serde_json::json!({"id": true}), Unusable::Boolean),
            (serde_json::json!({"id": {"n": 1}}), Unusable::Object),
            (serde_json::json!({"id": [1]}), Unusable::Array),
        ] {
            let error = refused(body.clone(), key);
            assert_eq!(error, HookTemplateError::UnusableBodyField { path: "id".into(), found }, "{body}");
            assert_eq!(error.field().as_deref(), Some("body.id"));
            assert!(error.to_string().starts_with(&format!("the body field id is {found}")), "{error}");
        }
        let absent = refused(serde_json::json!({"order": {"id": 1}}), "{{body.order.number}}");
        assert_eq!(absent.field().as_deref(), Some("body.order.number"));
        assert_eq!(absent.to_string(), "the body has no field order.number");
        let empty_header = refused(serde_json::json!({}), "{{header.X-Event}}");
        assert_eq!(empty_header, HookTemplateError::EmptyHeader { name: "X-Event".into() });
        assert_eq!(empty_header.field().as_deref(), Some("header.X-Event"));
        assert_eq!(refused(serde_json::json!({}), "{{header.X-None}}").field().as_deref(), Some("header.X-None"));
        let whole = refused(serde_json::json!({"id": 1}), "k:{{body}}");
        assert_eq!(
            (whole.field().as_deref(), whole.to_string().as_str()),
            (Some("body"), "the body is an object, and a value the intake builds on must be text or a number")
        );
        // Text and numbers, nested and in arrays, are what keys are made of.
        let body = serde_json::json!({"id": "ORD-1", "n": 0, "x": 15, "items": [{"sku": "A"}]});
        let made = render_hook("{{body.id}}:{{body.n}}:{{body.x}}:{{body.items.0.sku}}", &body, &headers).unwrap();
        assert_eq!(made, "ORD-1:0:15:A");
    }

    #[test]
    fn hook_numbers_have_one_spelling_and_no_fraction() {
        let headers = std::collections::BTreeMap::new();
        let key = |body: &str| render_hook("shop:order:{{body.n}}", &serde_json::from_str(body).unwrap(), &headers);
        for body in [r#"{"n":7100}"#, r#"{"n":7100.0}"#, r#"{"n":7.1e3}"#, r#"{"n":71e2}"#] {
            assert_eq!(key(body).unwrap(), "shop:order:7100", "{body}");
        }
        assert_eq!(key(r#"{"n":-0}"#).unwrap(), "shop:order:0");
        let fraction = key(r#"{"n":7100.5}"#).unwrap_err();
        assert_eq!(fraction, HookTemplateError::NotWholeNumber { field: "body.n".into(), number: "7100.5".into() });
        assert_eq!(fraction.field().as_deref(), Some("body.n"));
        assert!(fraction.to_string().starts_with("{{body.n}} is the number 7100.5, and a number"), "{fraction}");
        assert!(key(r#"{"n":9007199254740993}"#).is_err(), "beyond what a double tells apart");
        let whole = render_hook("{{body}}", &serde_json::json!(1.5), &headers).unwrap_err();
        assert_eq!(whole.field().as_deref(), Some("body"));
    }
}
