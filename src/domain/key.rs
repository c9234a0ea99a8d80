//! The action key: the stable identity of one intended action, validated once where it enters.

use std::fmt;
use unicode_normalization::UnicodeNormalization as _;
use unicode_normalization::is_nfc;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory as _};

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
        "the action key contains an invisible or formatting character (such as a zero-width or bidi mark, a \
         variation selector or a blank-looking filler) at byte {at}"
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
    /// `shоp` with a Cyrillic `о` looks like `shop` with a Latin one: a word that mixes the
    /// scripts whose letters pass for each other would be a second action that looks like the first.
    #[error(
        "the action key mixes {first} and {second} letters in one word at byte {at}: it would look like a \
         different key (a Cyrillic о passes for a Latin o); write each word in one script"
    )]
    MixedScripts { at: usize, first: Script, second: Script },
}

/// The scripts whose letters are mistaken for each other (Latin `o`, Greek `ο`, Cyrillic `о`),
/// which a word of a key may not mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    Latin,
    Greek,
    Cyrillic,
}

impl fmt::Display for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Latin => "Latin",
            Self::Greek => "Greek",
            Self::Cyrillic => "Cyrillic",
        })
    }
}

impl ActionKey {
    /// Validates a new key: every rule, Unicode NFC, invisible characters and mixed scripts
    /// included.
    pub fn parse(raw: &str) -> Result<Self, KeyError> {
        check_length(raw)?;
        for (at, ch) in raw.char_indices() {
            check_printable(at, ch)?;
            if is_invisible_format(ch) {
                return Err(KeyError::Invisible { at });
            }
        }
        if contains_email(raw) {
            return Err(KeyError::ContainsEmail);
        }
        if !is_nfc(raw) {
            // Printable by now (no control, whitespace or invisible character): safe to show.
            return Err(KeyError::NotNfc { nfc: raw.nfc().collect() });
        }
        if let Some((at, first, second)) = mixed_scripts(raw) {
            return Err(KeyError::MixedScripts { at, first, second });
        }
        Ok(Self(raw.to_owned()))
    }

    /// Validates a key that names an action which may have been recorded under older rules (a
    /// stored row, a key a person types to settle it): length, control characters, whitespace and
    /// e-mail addresses, which were always refused, but not NFC, invisible characters or mixed
    /// scripts, so that such an action can still be read, shown escaped and settled.
    pub fn parse_existing(raw: &str) -> Result<Self, KeyError> {
        check_length(raw)?;
        for (at, ch) in raw.char_indices() {
            check_printable(at, ch)?;
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

fn check_length(raw: &str) -> Result<(), KeyError> {
    if raw.is_empty() {
        return Err(KeyError::Missing);
    }
    if raw.len() > MAX_KEY_BYTES {
        return Err(KeyError::TooLong { bytes: raw.len() });
    }
    Ok(())
}

fn check_printable(at: usize, ch: char) -> Result<(), KeyError> {
    if ch.is_control() {
        return Err(KeyError::Control { at });
    }
    if ch.is_whitespace() {
        return Err(KeyError::Whitespace { at });
    }
    Ok(())
}

/// Characters that render as nothing, reorder text, change the look of their neighbours or look
/// blank: every format character (general category Cf, from `unicode-properties`), the other
/// default-ignorable code points (Unicode's DerivedCoreProperties.txt, Other_Default_Ignorable_Code_Point
/// and Variation_Selector), the line and paragraph separators, and letters and symbols drawn
/// blank (Hangul fillers, the blank Braille pattern). A key holding one would look identical to a
/// different key on screen; untrusted text shows them escaped.
pub(crate) fn is_invisible_format(ch: char) -> bool {
    ch.general_category() == GeneralCategory::Format
        || matches!(ch,
            // Other_Default_Ignorable_Code_Point, with the Hangul fillers that draw blank.
            '\u{034F}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}' | '\u{2065}' | '\u{3164}' | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFF8}'
            | '\u{E0000}'..='\u{E0FFF}'
            // Variation_Selector: Mongolian free variation selectors, the standardized and the
            // ideographic variation selectors.
            | '\u{180B}'..='\u{180F}'
            | '\u{FE00}'..='\u{FE0F}'
            // Line and paragraph separators.
            | '\u{2028}' | '\u{2029}'
            // Braille pattern blank: a symbol, drawn as a space.
            | '\u{2800}'
            // Egyptian hieroglyph format controls and the musical symbol formats (Cf in recent
            // Unicode versions; named so that an older table does not let them through).
            | '\u{13430}'..='\u{1343F}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{00AD}' | '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// The script of a letter from the scripts that pass for each other, by Unicode block.
fn confusable_script(ch: char) -> Option<Script> {
    match ch {
        'A'..='Z' | 'a'..='z' | '\u{00AA}' | '\u{00BA}' => Some(Script::Latin),
        '\u{00D7}' | '\u{00F7}' => None,
        '\u{00C0}'..='\u{024F}' | '\u{1E00}'..='\u{1EFF}' | '\u{2C60}'..='\u{2C7F}' | '\u{A720}'..='\u{A7FF}' => {
            Some(Script::Latin)
        }
        '\u{0370}'..='\u{03FF}' | '\u{1F00}'..='\u{1FFF}' => Some(Script::Greek),
        '\u{0400}'..='\u{052F}' | '\u{1C80}'..='\u{1C8F}' | '\u{2DE0}'..='\u{2DFF}' | '\u{A640}'..='\u{A69F}' => {
            Some(Script::Cyrillic)
        }
        _ => None,
    }
}

/// The first letter of a word (a run of letters, marks and digits) whose script differs from an
/// earlier letter's in that word, with the two scripts. Separators such as `:`, `-` and `#` start
/// a new word, so `acme:заказ:ORD-1` is fine and `acme:shоp` (Cyrillic `о`) is not.
fn mixed_scripts(raw: &str) -> Option<(usize, Script, Script)> {
    let mut word_script = None;
    for (at, ch) in raw.char_indices() {
        let in_word =
            ch.is_alphanumeric() || ch.general_category_group() == unicode_properties::GeneralCategoryGroup::Mark;
        if !in_word {
            word_script = None;
            continue;
        }
        // Marks carry no script of their own here: a combining accent belongs to its letter.
        let script = if ch.is_alphabetic() { confusable_script(ch) } else { None };
        match (word_script, script) {
            (Some(first), Some(second)) if first != second => return Some((at, first, second)),
            (None, Some(script)) => word_script = Some(script),
            _ => {}
        }
    }
    None
}

/// A JSON number as part of a key: a whole number within ±(2^53 − 1), written as RFC 8785 writes
/// it for the payload's fingerprint (`7100`, `7100.0`, `7.1e3` and `71e2` are all `7100`, `-0` is
/// `0`), so that one number makes one key however the sender spelled it. `None` for a number with
/// a fraction, and for one beyond that range, where two numbers a sender tells apart may read as
/// one double and so as one key.
pub fn number_in_key(number: &serde_json::Number) -> Option<String> {
    #[allow(clippy::cast_precision_loss)] // read as RFC 8785 reads every number: as a double
    let within = number.as_f64().is_some_and(|double| double.abs() <= super::exact_json::MAX_SAFE_INTEGER as f64);
    let text = super::jcs::number_text(number);
    let digits = text.strip_prefix('-').unwrap_or(&text);
    (within && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(text)
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
    fn format_and_default_ignorable_characters_are_refused_in_new_keys_only() {
        // Arabic number sign (Cf), Mongolian free variation selector, Braille pattern blank,
        // Khmer inherent vowel, a tag character, a variation selector beyond the BMP.
        for (ch, at) in [
            ('\u{0600}', 11),
            ('\u{180B}', 11),
            ('\u{2800}', 11),
            ('\u{17B4}', 11),
            ('\u{E0041}', 11),
            ('\u{E0100}', 11),
            ('\u{110BD}', 11),
        ] {
            let raw = format!("shop:order:{ch}7100");
            assert_eq!(ActionKey::parse(&raw), Err(KeyError::Invisible { at }), "{:04x}", ch as u32);
            // An action recorded under older rules can still be read and named.
            assert_eq!(ActionKey::parse_existing(&raw).unwrap().as_str(), raw);
            assert!(crate::domain::text::escape_untrusted(&raw).contains(&format!("\\u{{{:04x}}}", ch as u32)));
        }
        assert!(ActionKey::parse("shop:order:7100").is_ok());
    }

    #[test]
    fn a_word_that_mixes_confusable_scripts_is_refused() {
        let cyrillic_o = "acme:sh\u{043E}p:1";
        assert_eq!(
            ActionKey::parse(cyrillic_o),
            Err(KeyError::MixedScripts { at: 7, first: Script::Latin, second: Script::Cyrillic })
        );
        assert!(ActionKey::parse(cyrillic_o).unwrap_err().to_string().contains("mixes Latin and Cyrillic"));
        assert_eq!(
            ActionKey::parse("acme:\u{03BF}k"),
            Err(KeyError::MixedScripts { at: 7, first: Script::Greek, second: Script::Latin })
        );
        // Each word in one script, digits and other scripts alongside, is fine.
        for key in ["acme:\u{0437}\u{0430}\u{043A}\u{0430}\u{0437}:ORD-1", "caf\u{e9}:\u{0410}1", "\u{6CE8}\u{6587}:A1"]
        {
            assert!(ActionKey::parse(key).is_ok(), "{key}");
        }
        assert!(matches!(ActionKey::parse("ORD\u{0414}"), Err(KeyError::MixedScripts { at: 3, .. })));
        // A key recorded before the rule can still be named.
        assert!(ActionKey::parse_existing(cyrillic_o).is_ok());
    }

    #[test]
    fn a_number_in_a_key_has_one_spelling_and_no_fraction() {
        let number = |text: &str| number_in_key(&serde_json::from_str(text).unwrap());
        for text in ["7100", "7100.0", "7.1e3", "71e2", "7100e0", "710000e-2"] {
            assert_eq!(number(text).as_deref(), Some("7100"), "{text}");
        }
        assert_eq!(number("-0").as_deref(), Some("0"));
        assert_eq!(number("-0.0").as_deref(), Some("0"));
        assert_eq!(number("-12").as_deref(), Some("-12"));
        assert_eq!(number("9007199254740991").as_deref(), Some("9007199254740991"));
        for text in ["7100.5", "1e-7", "9007199254740992", "9007199254740993", "1e21", "-1e30", "18446744073709551615"]
        {
            assert_eq!(number(text), None, "{text}");
        }
    }

    #[test]
    fn email_refusal_does_not_echo_the_address() {
        let message = ActionKey::parse("c:jane@example.com").unwrap_err().to_string();
        assert!(!message.contains("jane"), "{message}");
    }
}
