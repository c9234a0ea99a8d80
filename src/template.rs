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
    #[error("the request has no header {name}")]
    NoHeader { name: String },
    #[error("unknown placeholder {{{{{placeholder}}}}}; use body.FIELD or header.NAME")]
    UnknownPlaceholder { placeholder: String },
    #[error(transparent)]
    Template(#[from] TemplateError),
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

/// Fills an intake template from a webhook's JSON body and its headers (by lower-case name).
/// The text is taken as it is: the ledger validates the key, event id and version it makes.
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
            out.push_str(&as_text(body));
        } else if let Some(path) = name.strip_prefix("body.") {
            let value = field(body, path).ok_or_else(|| HookTemplateError::NoBodyField { path: path.to_owned() })?;
            out.push_str(&as_text(&value));
        } else if let Some(header) = name.strip_prefix("header.") {
            let value = headers
                .get(&header.to_ascii_lowercase())
                .ok_or_else(|| HookTemplateError::NoHeader { name: header.to_owned() })?;
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
    }
}
