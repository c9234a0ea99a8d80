//! The only text the console draws: untrusted text made visible once, where it enters the UI.

use crate::domain::text::{escape_untrusted, escape_untrusted_json, truncate};

/// Longest line the console keeps, in bytes; the rest is counted, not drawn.
const MAX_LINE_BYTES: usize = 2000;

/// Text with every control, escape and invisible character replaced by a visible escape (such as
/// `\x1b`), cut to a drawable length. Views accept nothing else, so untrusted text cannot reach
/// the terminal unescaped by accident.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SafeText(String);

impl SafeText {
    pub fn new(untrusted: &str) -> Self {
        Self(escape_untrusted(&truncate(untrusted, MAX_LINE_BYTES)))
    }

    /// Multi-line text (bodies, errors) as one safe line per line.
    pub fn lines(untrusted: &str) -> Vec<Self> {
        untrusted.lines().map(Self::new).collect()
    }

    /// Text in full, however long: for the view that shows every byte of a value (`v`), which
    /// wraps and scrolls it rather than cut it.
    pub fn whole(untrusted: &str) -> Self {
        Self(escape_untrusted(untrusted))
    }

    /// Multi-line text in full, one safe line per line.
    pub fn whole_lines(untrusted: &str) -> Vec<Self> {
        untrusted.lines().map(Self::whole).collect()
    }

    /// One line of JSON text (a leaf's value): made safe in JSON's own notation, so that its
    /// escapes read once (`\u001b`, not `\\u001b`), and cut like any line.
    pub fn json(json: &str) -> Self {
        Self(escape_untrusted_json(&truncate(json, MAX_LINE_BYTES)))
    }

    /// JSON text (a pretty payload) as one safe line per line, each cut like any line.
    pub fn json_lines(json: &str) -> Vec<Self> {
        json.lines().map(Self::json).collect()
    }

    /// JSON text in full, one safe line per line, however long.
    pub fn whole_json_lines(json: &str) -> Vec<Self> {
        json.lines().map(|line| Self(escape_untrusted_json(line))).collect()
    }

    /// Text the ledger stored already escaped (a refused submission's key excerpt, event id,
    /// source and destination): its backslashes are its own escapes and read once (`\x1b`, not
    /// `\\x1b`); anything left in it that could act on a terminal is still escaped.
    pub fn stored_escaped(escaped: &str) -> Self {
        Self(escape_untrusted_json(&truncate(escaped, MAX_LINE_BYTES)))
    }

    /// Text the console wrote itself (labels, counts): still escaped, so no code path can pass
    /// untrusted text by calling this by mistake.
    pub fn from_ui(text: impl AsRef<str>) -> Self {
        Self::new(text.as_ref())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SafeText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_becomes_visible() {
        let hostile = "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31m\r\u{202e}abc\u{200b}";
        let safe = SafeText::new(hostile);
        assert!(safe.as_str().chars().all(|c| !c.is_control()), "{safe}");
        assert!(safe.as_str().contains("\\x1b]0;pwned\\x07"));
        assert!(safe.as_str().contains("\\u{202e}"));
    }

    #[test]
    fn json_escapes_read_once_and_whole_text_is_never_cut() {
        let payload = serde_json::json!({ "note": "\u{1b}[2J", "path": "c:\\x1b" });
        let shown: Vec<String> = SafeText::json_lines(&serde_json::to_string_pretty(&payload).unwrap())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(shown.contains(&r#"  "note": "\u001b[2J","#.to_owned()), "{shown:?}");
        assert!(
            shown.contains(&r#"  "path": "c:\\x1b""#.to_owned()),
            "a backslash of the data reads as JSON's: {shown:?}"
        );
        let long = format!("{}END\u{1b}", "x".repeat(1 << 20));
        assert!(SafeText::whole(&long).as_str().ends_with("END\\x1b"));
        let json = serde_json::to_string(&long).unwrap();
        assert_eq!(SafeText::whole_json_lines(&json)[0].as_str(), json.as_str(), "every byte, JSON's escape once");
    }

    #[test]
    fn a_huge_line_is_cut() {
        let safe = SafeText::new(&"x".repeat(1 << 20));
        assert!(safe.as_str().len() < 2100);
        assert!(safe.as_str().contains("more bytes"));
    }
}
