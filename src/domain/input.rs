//! Validation of everything a person or a source system hands to the ledger.

use super::key::{ActionKey, KeyError, is_invisible_format};
use super::payload::{Payload, PayloadError};
use super::text::{escape_untrusted, truncate};

/// A submission as delivered, before any validation.
#[derive(Debug, Clone, Default)]
pub struct RawSubmission {
    pub key: Option<String>,
    pub payload: Vec<u8>,
    pub event_id: Option<String>,
    pub source: Option<String>,
    pub source_version: Option<i64>,
    pub destination: Option<String>,
    pub after: Option<String>,
}

/// A submission that passed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    pub key: ActionKey,
    pub payload: Payload,
    pub event_id: Option<String>,
    pub source: Option<String>,
    pub source_version: Option<i64>,
    pub destination: Option<String>,
    pub after: Option<ActionKey>,
}

/// Why a submission was refused, in a form that can be stored and shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("submission refused: {message}")]
pub struct SubmissionRefused {
    /// A short stable code, such as `key_contains_email`.
    pub problem: &'static str,
    pub message: String,
}

impl SubmissionRefused {
    /// A new action whose `after` chain leads back to it, so that it could never run: `cycle`
    /// lists the keys from the new one round to it again.
    pub fn after_cycle(cycle: &[ActionKey]) -> Self {
        let chain = cycle.iter().map(ActionKey::as_str).collect::<Vec<_>>().join(" -> ");
        Self {
            problem: "after_cycle",
            message: format!(
                "the after key closes a cycle, so none of these actions could ever run: {}",
                truncate(&chain, 2000)
            ),
        }
    }
}

impl Submission {
    pub fn validate(raw: &RawSubmission) -> Result<Self, SubmissionRefused> {
        let key = ActionKey::parse(raw.key.as_deref().unwrap_or_default())
            .map_err(|e| SubmissionRefused { problem: key_problem(&e), message: e.to_string() })?;
        let payload = Payload::parse(&raw.payload)
            .map_err(|e| SubmissionRefused { problem: payload_problem(&e), message: e.to_string() })?;
        let label = |field: &'static str, value: &Option<String>| -> Result<Option<String>, SubmissionRefused> {
            value
                .as_deref()
                .map(|v| Label::parse(field, v).map(|l| l.0))
                .transpose()
                .map_err(|e| SubmissionRefused { problem: "invalid_field", message: e.to_string() })
        };
        let event_id = label("event id", &raw.event_id)?;
        let source = label("source", &raw.source)?;
        let destination = raw
            .destination
            .as_deref()
            .map(validate_destination_name)
            .transpose()
            .map_err(|e| SubmissionRefused { problem: "invalid_destination", message: e.to_string() })?;
        if let Some(version) = raw.source_version
            && version < 0
        {
            return Err(SubmissionRefused {
                problem: "invalid_source_version",
                message: format!("the source version is {version}; it must be zero or more"),
            });
        }
        let after = raw
            .after
            .as_deref()
            .map(|a| {
                ActionKey::parse_existing(a).map_err(|e| SubmissionRefused {
                    problem: "invalid_after_key",
                    message: format!("the after key is invalid: {e}"),
                })
            })
            .transpose()?;
        if after.as_ref() == Some(&key) {
            return Err(SubmissionRefused {
                problem: "invalid_after_key",
                message: "an action cannot wait for itself (its after key is its own key)".to_owned(),
            });
        }
        Ok(Self { key, payload, event_id, source, source_version: raw.source_version, destination, after })
    }
}

impl RawSubmission {
    /// The key as it may be shown to reviewers: escaped, cut short, and withheld entirely when it
    /// held an e-mail address, so refusing personal data does not store it anyway.
    pub fn key_excerpt(&self, refusal: &SubmissionRefused) -> Option<String> {
        if refusal.problem == "key_contains_email" {
            return Some("<withheld: contained an e-mail address>".to_owned());
        }
        self.key.as_deref().map(|k| escape_untrusted(&truncate(k, 300)))
    }
}

fn key_problem(error: &KeyError) -> &'static str {
    match error {
        KeyError::Missing => "key_missing",
        KeyError::TooLong { .. } => "key_too_long",
        KeyError::Whitespace { .. } => "key_whitespace",
        KeyError::Control { .. } => "key_control_character",
        KeyError::Invisible { .. } => "key_invisible_character",
        KeyError::ContainsEmail => "key_contains_email",
        KeyError::NotNfc { .. } => "key_not_nfc",
        KeyError::MixedScripts { .. } => "key_mixed_scripts",
    }
}

fn payload_problem(error: &PayloadError) -> &'static str {
    match error {
        PayloadError::Missing => "payload_missing",
        PayloadError::TooLarge { .. } => "payload_too_large",
        PayloadError::NotUtf8 { .. } => "payload_not_utf8",
        PayloadError::ContainsNul => "payload_contains_nul",
        PayloadError::NotJson(_) => "payload_not_json",
        PayloadError::DuplicateKey { .. } => "payload_duplicate_key",
        PayloadError::IntegerOutOfRange { .. } => "payload_integer_out_of_range",
        PayloadError::InexactNumber { .. } => "payload_inexact_number",
        PayloadError::NumberOutOfRange { .. } => "payload_number_out_of_range",
    }
}

/// Why a name, label or reason a person or a configuration gave was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// A destination name with characters or a length that names may not have.
    #[error(
        "the destination name {:?} is invalid: use 1 to 64 letters, digits, '_', '-' or '.'",
        escape_untrusted(&truncate(name, 80))
    )]
    DestinationName { name: String },
    /// A required field that is empty or blank.
    #[error("the {field} is empty")]
    Empty { field: String },
    /// A field longer than [`Label`] allows.
    #[error("the {field} is {bytes} bytes long; at most 255 bytes are allowed")]
    TooLong { field: String, bytes: usize },
    /// A control or invisible character in a single-line field.
    #[error("the {field} contains the character {}, which is not allowed", escape_untrusted(&character.to_string()))]
    Character { field: String, character: char },
    /// An owner name longer than 100 bytes.
    #[error("the owner name is longer than 100 bytes")]
    OwnerNameTooLong,
    /// No reason given.
    #[error("a reason is required: say why, for the audit trail")]
    ReasonMissing,
    /// A reason longer than 1,000 characters.
    #[error("the reason is longer than 1,000 characters")]
    ReasonTooLong,
    /// A control or invisible character in a reason.
    #[error(
        "the reason contains the character {}, which is not allowed (one line of plain text)",
        escape_untrusted(&character.to_string())
    )]
    ReasonCharacter { character: char },
}

/// A destination name as configured: letters, digits, `_`, `-` and `.`, up to 64 bytes.
pub fn validate_destination_name(name: &str) -> Result<String, InputError> {
    let ok =
        !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if ok { Ok(name.to_owned()) } else { Err(InputError::DestinationName { name: name.to_owned() }) }
}

/// A short single-line text field (event id, source, person, destination id): printable, no
/// control or invisible characters, at most 255 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label(pub String);

impl Label {
    pub fn parse(field: &str, value: &str) -> Result<Self, InputError> {
        if value.trim().is_empty() {
            return Err(InputError::Empty { field: field.to_owned() });
        }
        if value.len() > 255 {
            return Err(InputError::TooLong { field: field.to_owned(), bytes: value.len() });
        }
        if let Some(character) = value.chars().find(|&c| c.is_control() || is_invisible_format(c)) {
            return Err(InputError::Character { field: field.to_owned(), character });
        }
        Ok(Self(value.to_owned()))
    }
}

/// A named person who runs a manual command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person(String);

impl Person {
    pub fn parse(name: &str) -> Result<Self, InputError> {
        let label = Label::parse("owner name", name)?;
        if label.0.len() > 100 {
            return Err(InputError::OwnerNameTooLong);
        }
        Ok(Self(label.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Why a person did something: required, single line, at most 1,000 characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason(String);

impl Reason {
    pub fn parse(text: &str) -> Result<Self, InputError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(InputError::ReasonMissing);
        }
        if trimmed.chars().count() > 1000 {
            return Err(InputError::ReasonTooLong);
        }
        if let Some(character) = trimmed.chars().find(|&c| c.is_control() || is_invisible_format(c)) {
            return Err(InputError::ReasonCharacter { character });
        }
        Ok(Self(trimmed.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(key: &str, payload: &str) -> RawSubmission {
        RawSubmission { key: Some(key.into()), payload: payload.as_bytes().to_vec(), ..Default::default() }
    }

    #[test]
    fn a_valid_submission_passes() {
        let s = Submission::validate(&raw("acme:order:1:create", r#"{"a":1}"#)).unwrap();
        assert_eq!(s.key.as_str(), "acme:order:1:create");
    }

    #[test]
    fn refusals_carry_a_problem_code() {
        let cases = [
            (RawSubmission { key: None, payload: b"{}".to_vec(), ..Default::default() }, "key_missing"),
            (raw("c:jane@example.com", "{}"), "key_contains_email"),
            (raw("k", "{"), "payload_not_json"),
            (raw("k", r#"{"a":1,"a":1}"#), "payload_duplicate_key"),
            (raw("k", "18446744073709551616"), "payload_integer_out_of_range"),
            (raw("k", "0.10000000000000000001"), "payload_inexact_number"),
            (raw("k", "1e400"), "payload_number_out_of_range"),
            (raw("k", ""), "payload_missing"),
            (RawSubmission { destination: Some("crm prod".into()), ..raw("k", "{}") }, "invalid_destination"),
            (RawSubmission { after: Some("k".into()), ..raw("k", "{}") }, "invalid_after_key"),
            (RawSubmission { source_version: Some(-1), ..raw("k", "{}") }, "invalid_source_version"),
            (RawSubmission { event_id: Some("e\u{1b}".into()), ..raw("k", "{}") }, "invalid_field"),
        ];
        for (submission, problem) in cases {
            assert_eq!(Submission::validate(&submission).unwrap_err().problem, problem);
        }
    }

    #[test]
    fn an_email_key_is_withheld_from_the_refusal_record() {
        let submission = raw("c:jane@example.com", "{}");
        let refusal = Submission::validate(&submission).unwrap_err();
        assert!(!submission.key_excerpt(&refusal).unwrap().contains("jane"));
    }

    #[test]
    fn names_and_reasons_are_checked() {
        assert!(Person::parse("").is_err());
        assert!(Person::parse("ana\u{202e}").is_err());
        assert_eq!(Person::parse("Ana Lima").unwrap().as_str(), "Ana Lima");
        assert!(Reason::parse("   ").is_err());
        assert!(Reason::parse("two\nlines").is_err());
        assert_eq!(Reason::parse(" checked CRM ").unwrap().as_str(), "checked CRM");
    }

    #[test]
    fn refusals_of_names_and_reasons_read_as_before() {
        let cases = [
            (Person::parse(" ").unwrap_err(), "the owner name is empty"),
            (Person::parse(&"a".repeat(101)).unwrap_err(), "the owner name is longer than 100 bytes"),
            (
                Label::parse("worker id", &"a".repeat(256)).unwrap_err(),
                "the worker id is 256 bytes long; at most 255 bytes are allowed",
            ),
            (
                Label::parse("destination id", "T\u{202e}1").unwrap_err(),
                "the destination id contains the character \\u{202e}, which is not allowed",
            ),
            (Reason::parse("").unwrap_err(), "a reason is required: say why, for the audit trail"),
            (Reason::parse(&"r".repeat(1001)).unwrap_err(), "the reason is longer than 1,000 characters"),
            (
                Reason::parse("two\nlines").unwrap_err(),
                "the reason contains the character \\n, which is not allowed (one line of plain text)",
            ),
            (
                validate_destination_name("crm prod").unwrap_err(),
                "the destination name \"crm prod\" is invalid: use 1 to 64 letters, digits, '_', '-' or '.'",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message);
        }
    }
}
