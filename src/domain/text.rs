//! Untrusted text made safe to show: control, escape and invisible characters become visible.

use std::fmt::Write as _;

/// Renders untrusted text (payloads, errors, destination bodies, keys of refused submissions) so
/// that no byte of it can act on a terminal: control characters (C0, DEL, C1) and invisible
/// formatting characters (bidi overrides, zero-width marks) are written as escapes such as `\x1b`
/// or `\u{202e}`, and backslashes are doubled so an escape in the input cannot pass for ours.
pub fn escape_untrusted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() || super::key::is_invisible_format(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Like [`escape_untrusted`] but keeps line breaks, for multi-line text such as pretty JSON.
pub fn escape_untrusted_lines(text: &str) -> String {
    text.split('\n').map(escape_untrusted).collect::<Vec<_>>().join("\n")
}

/// Renders one line of JSON text (as `serde_json` writes it) so that no byte of it can act on a terminal,
/// in JSON's own notation: a control or invisible character still in it (JSON escapes only
/// those below U+0020) becomes `\uXXXX`, as JSON would write it. Its backslashes are left alone:
/// in JSON text each one already starts an escape (a backslash of the data is written `\\`), so
/// the text stays valid JSON that reads as the value, where [`escape_untrusted`] would show the
/// escape `\u001b` as `\\u001b`.
pub fn escape_untrusted_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for ch in json.chars() {
        if ch.is_control() || super::key::is_invisible_format(ch) {
            let mut units = [0u16; 2];
            for unit in ch.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(ch);
        }
    }
    out
}

/// Cuts text to at most `max_bytes`, on a character boundary, marking the cut.
pub fn truncate(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} more bytes]", &text[..end], text.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_invisible_characters_become_visible() {
        assert_eq!(escape_untrusted("a\u{1b}[31mb"), "a\\x1b[31mb");
        assert_eq!(escape_untrusted("\u{9b}2J"), "\\u{009b}2J");
        assert_eq!(escape_untrusted("x\u{202e}y\u{200b}"), "x\\u{202e}y\\u{200b}");
        assert_eq!(escape_untrusted("line\r\nnext\0"), "line\\r\\nnext\\x00");
        assert_eq!(escape_untrusted("c:\\x1b"), "c:\\\\x1b");
        assert_eq!(escape_untrusted("ordinary ü ✓"), "ordinary ü ✓");
    }

    #[test]
    fn nothing_escapes_the_escaping() {
        let hostile: String = (0u32..0x250).filter_map(char::from_u32).collect();
        let shown = escape_untrusted(&hostile);
        assert!(!shown.chars().any(|c| c.is_control() || crate::domain::key::is_invisible_format(c)));
    }

    #[test]
    fn json_text_keeps_its_own_escapes_and_escapes_what_it_left() {
        let value = serde_json::json!({ "note": "\u{1b}[2J a\\b \u{9b}31m \u{202e}x \u{e0001}" });
        let json = serde_json::to_string(&value).unwrap();
        let shown = escape_untrusted_json(&json);
        assert_eq!(shown, r#"{"note":"\u001b[2J a\\b \u009b31m \u202ex \udb40\udc01"}"#);
        assert!(!shown.chars().any(|c| c.is_control() || crate::domain::key::is_invisible_format(c)));
        let read: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(read, value, "what is shown is the same JSON value");
    }

    #[test]
    fn truncation_respects_characters() {
        assert_eq!(truncate("héllo", 2), "h… [5 more bytes]");
        assert_eq!(truncate("abc", 3), "abc");
    }
}
