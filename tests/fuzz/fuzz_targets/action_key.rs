//! Action key validation over arbitrary input: `ActionKey::parse` never panics, refuses with the
//! right reason at the right byte, and every key it accepts is clean.

#![no_main]

use actionledger::domain::key::MAX_KEY_BYTES;
use actionledger::domain::text::escape_untrusted;
use actionledger::domain::{ActionKey, KeyError};
use libfuzzer_sys::fuzz_target;

mod invisible;
use invisible::is_invisible_format;

fn is_refused_char(ch: char) -> bool {
    ch.is_control() || ch.is_whitespace() || is_invisible_format(ch)
}

fn check(raw: &str) {
    let parsed = ActionKey::parse(raw);
    assert_eq!(parsed, raw.parse::<ActionKey>(), "FromStr and parse agree");
    match parsed {
        Ok(key) => {
            assert_eq!(key.as_str(), raw, "an accepted key is kept as given");
            assert_eq!(key.to_string(), raw);
            assert!(!raw.is_empty() && raw.len() <= MAX_KEY_BYTES);
            assert!(!raw.chars().any(is_refused_char), "accepted key {raw:?} holds a refused character");
            // Nothing in an accepted key needs escaping for display but its backslashes.
            assert_eq!(escape_untrusted(raw), raw.replace('\\', "\\\\"));
        }
        Err(error) => {
            let message = error.to_string();
            assert!(!message.is_empty());
            match error {
                KeyError::Missing => assert!(raw.is_empty()),
                KeyError::TooLong { bytes } => assert!(bytes == raw.len() && bytes > MAX_KEY_BYTES),
                KeyError::Control { at } | KeyError::Whitespace { at } | KeyError::Invisible { at } => {
                    assert!(raw.len() <= MAX_KEY_BYTES);
                    let ch = raw[at..].chars().next().expect("the byte offset is a character boundary");
                    match error {
                        KeyError::Control { .. } => assert!(ch.is_control()),
                        KeyError::Whitespace { .. } => assert!(ch.is_whitespace() && !ch.is_control()),
                        _ => assert!(is_invisible_format(ch) && !ch.is_control() && !ch.is_whitespace()),
                    }
                    assert!(!raw[..at].chars().any(is_refused_char), "the first offending character is named");
                }
                KeyError::ContainsEmail => {
                    assert!(!raw.is_empty() && raw.len() <= MAX_KEY_BYTES);
                    assert!(!raw.chars().any(is_refused_char));
                    assert!(raw.contains('@') || raw.contains("%40"));
                    assert!(!message.contains('@'), "the refusal does not repeat the address");
                }
                KeyError::MixedScripts { at, first, second } => {
                    // Every other rule holds: only the mix of scripts in one word is refused.
                    assert!(ActionKey::parse_existing(raw).is_ok() && raw.len() <= MAX_KEY_BYTES);
                    assert!(!raw.chars().any(is_refused_char));
                    assert_ne!(first, second, "two scripts are named");
                    assert!(raw[at..].chars().next().is_some_and(char::is_alphabetic), "{raw:?} at {at}");
                }
                KeyError::NotNfc { nfc } => {
                    // Every other rule holds: only the normalization form is refused.
                    assert!(ActionKey::parse_existing(raw).is_ok(), "only NFC is wrong with {raw:?}");
                    assert_ne!(nfc, raw, "the suggested form is another spelling");
                    assert!(
                        !matches!(ActionKey::parse(&nfc), Err(KeyError::NotNfc { .. })),
                        "the suggested form {nfc:?} is itself in NFC"
                    );
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    match std::str::from_utf8(data) {
        Ok(raw) => check(raw),
        // Keys arrive as text; still exercise what invalid bytes become after lossy decoding.
        Err(_) => check(&String::from_utf8_lossy(data)),
    }
});
