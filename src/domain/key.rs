//! The action key: the stable identity of one intended action, validated once where it enters.

use std::fmt;
use unicode_normalization::UnicodeNormalization as _;
use unicode_normalization::is_nfc;

/// Longest key accepted, in bytes (UTF-8).
pub const MAX_KEY_BYTES: usize = 255;

/// A validated action key such as `acme:order:ORD-1042:create-task`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct ActionKey(String);

/// Why a key was refused. Messages never repeat an e-mail address found in the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the action key is missing: every action needs a stable key such as acme:order:ORD-1042:create-task")]
    Missing,
    #[error("the action key is {bytes} bytes long; at most {MAX_KEY_BYTES} bytes are allowed")]
    TooLong { bytes: usize },
    #[error("the action key contains whitespace at byte {at}; keys are printable with no whitespace")]
    Whitespace { at: usize },
    #[error("the action key contains a control character at byte {at}; keys are printable with no control characters")]
    Control { at: usize },
    #[error(
        "the action key contains an invisible formatting character (such as a zero-width or bidi mark) at byte {at}"
    )]
    Invisible { at: usize },
    #[error("the action key contains an e-mail address; keys must carry no personal data (use a record id instead)")]
    ContainsEmail,
    /// Two spellings of one text (`café` composed and decomposed) would be two actions that look
    /// identical everywhere: keys are in Unicode Normalization Form C.
    #[error(
        "the action key is not in Unicode normalization form C (NFC): it would look identical to a different key; \
         use {nfc}"
    )]
    NotNfc { nfc: String },
}

impl ActionKey {
    /// Validates a new key: every rule, Unicode NFC included.
    pub fn parse(raw: &str) -> Result<Self, KeyError> {
        let key = Self::parse_existing(raw)?;
        if !is_nfc(raw) {
            // Printable by now (no control, whitespace or invisible character): safe to show.
            return Err(KeyError::NotNfc { nfc: raw.nfc().collect() });
        }
        Ok(key)
    }

    /// Validates a key that names an action which may have been recorded before keys had to be in
    /// NFC (a stored row, a key a person types to settle it): every rule but that one, so that
    /// such an action can still be read and settled.
    pub fn parse_existing(raw: &str) -> Result<Self, KeyError> {
        if raw.is_empty() {
            return Err(KeyError::Missing);
        }
        if raw.len() > MAX_KEY_BYTES {
            return Err(KeyError::TooLong { bytes: raw.len() });
        }
        for (at, ch) in raw.char_indices() {
            if ch.is_control() {
                return Err(KeyError::Control { at });
            }
            if ch.is_whitespace() {
                return Err(KeyError::Whitespace { at });
            }
            if is_invisible_format(ch) {
                return Err(KeyError::Invisible { at });
            }
        }
        if contains_email(raw) {
            return Err(KeyError::ContainsEmail);
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key of the update action that carries payload revision `revision` of this completed
    /// action: `KEY#update-N`. Refused like any key, e.g. when it would be too long.
    pub fn update_key(&self, revision: i64) -> Result<Self, KeyError> {
        Self::parse(&format!("{}#update-{revision}", self.0))
    }

    /// The key of the `n`th re-creation of this completed action, whose record was removed at the
    /// destination: `KEY#recreate-N`. Refused like any key, e.g. when it would be too long.
    pub fn recreate_key(&self, n: i64) -> Result<Self, KeyError> {
        Self::parse(&format!("{}#recreate-{n}", self.0))
    }

    /// The idempotency key that requests carrying payload revision `revision` use once an earlier
    /// payload may have been sent under this key: `KEY#rev-N`. Held to the same limits as a key.
    pub fn revision_key(&self, revision: i64) -> Result<Self, KeyError> {
        Self::parse(&format!("{}#rev-{revision}", self.0))
    }
}

impl fmt::Display for ActionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for ActionKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Characters that render as nothing, reorder text or break a line: Unicode format characters
/// (category Cf), fillers, variation selectors and the line and paragraph separators. A key
/// holding one would look identical to a different key on screen.
pub(crate) fn is_invisible_format(ch: char) -> bool {
    matches!(ch,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{180E}'
        | '\u{200B}'..='\u{200F}'
        | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}'
        | '\u{3164}'
        | '\u{FE00}'..='\u{FE0F}'
        | '\u{FEFF}'
        | '\u{FFA0}'
        | '\u{FFF9}'..='\u{FFFB}'
        | '\u{13430}'..='\u{1343F}'
        | '\u{1BCA0}'..='\u{1BCA3}'
        | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E007F}'
        | '\u{E0100}'..='\u{E01EF}')
}

/// Finds `local@domain.tld`, also when the `@` is percent-encoded, as automations often do.
fn contains_email(raw: &str) -> bool {
    let decoded = raw.replace("%40", "@");
    let bytes = decoded.as_bytes();
    let is_local = |b: u8| b.is_ascii_alphanumeric() || b"._%+-".contains(&b);
    let is_domain = |b: u8| b.is_ascii_alphanumeric() || b".-".contains(&b);
    for (at, _) in decoded.match_indices('@') {
        let has_local = at > 0 && is_local(bytes[at - 1]);
        let domain: &[u8] = {
            let rest = &bytes[at + 1..];
            let end = rest.iter().position(|&b| !is_domain(b)).unwrap_or(rest.len());
            &rest[..end]
        };
        let domain = std::str::from_utf8(domain).unwrap_or_default().trim_end_matches('.');
        let tld_ok = domain.rsplit_once('.').is_some_and(|(head, tld)| {
            !head.is_empty() && tld.len() >= 2 && tld.bytes().all(|b| b.is_ascii_alphabetic())
        });
        if has_local && tld_ok {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_structured_keys() {
        for key in ["acme:order:ORD-1042:create-task", "a", "x@y", "ws:2026-11:invoice#7", "é:ü"] {
            assert!(ActionKey::parse(key).is_ok(), "{key}");
        }
        assert!(ActionKey::parse(&"k".repeat(255)).is_ok());
    }

    #[test]
    fn refuses_bad_keys_with_the_reason() {
        assert_eq!(ActionKey::parse(""), Err(KeyError::Missing));
        assert_eq!(ActionKey::parse(&"k".repeat(256)), Err(KeyError::TooLong { bytes: 256 }));
        assert_eq!(ActionKey::parse("a b"), Err(KeyError::Whitespace { at: 1 }));
        assert_eq!(ActionKey::parse("a\u{1b}[31m"), Err(KeyError::Control { at: 1 }));
        assert_eq!(ActionKey::parse("a\u{0}"), Err(KeyError::Control { at: 1 }));
        assert_eq!(ActionKey::parse("ab\u{202e}"), Err(KeyError::Invisible { at: 2 }));
        assert_eq!(ActionKey::parse("a\u{200b}b"), Err(KeyError::Invisible { at: 1 }));
        for key in [
            "acme:contact:jane.doe@example.com:create",
            "jane@example.co",
            "acme:jane%40example.com",
            "acme:JANE%40EXAMPLE.ORG:x",
        ] {
            assert_eq!(ActionKey::parse(key), Err(KeyError::ContainsEmail), "{key}");
        }
    }

    #[test]
    fn derived_keys_append_the_revision_and_respect_the_limit() {
        let key = ActionKey::parse("acme:order:ORD-1042:create-task").unwrap();
        assert_eq!(key.update_key(2).unwrap().as_str(), "acme:order:ORD-1042:create-task#update-2");
        assert_eq!(key.revision_key(3).unwrap().as_str(), "acme:order:ORD-1042:create-task#rev-3");
        let long = ActionKey::parse(&"k".repeat(250)).unwrap();
        assert_eq!(long.update_key(2), Err(KeyError::TooLong { bytes: 259 }));
        assert!(ActionKey::parse(&"k".repeat(246)).unwrap().update_key(2).is_ok());
    }

    #[test]
    fn a_key_not_in_nfc_is_refused_with_its_nfc_form() {
        let decomposed = "acme:cafe\u{301}:create";
        let composed = "acme:caf\u{e9}:create";
        assert_eq!(ActionKey::parse(decomposed), Err(KeyError::NotNfc { nfc: composed.to_owned() }));
        assert!(ActionKey::parse(decomposed).unwrap_err().to_string().ends_with("use acme:caf\u{e9}:create"));
        assert_eq!(ActionKey::parse(composed).unwrap().as_str(), composed);
        // An action recorded before the rule can still be named.
        assert_eq!(ActionKey::parse_existing(decomposed).unwrap().as_str(), decomposed);
        assert_eq!(ActionKey::parse("Å:\u{212b}"), Err(KeyError::NotNfc { nfc: "Å:\u{c5}".to_owned() }));
    }

    #[test]
    fn email_refusal_does_not_echo_the_address() {
        let message = ActionKey::parse("c:jane@example.com").unwrap_err().to_string();
        assert!(!message.contains("jane"), "{message}");
    }
}
