//! The only text the console draws: untrusted text made visible once, where it enters the UI.

use crate::domain::text::{escape_untrusted, truncate};

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

    /// Multi-line text (pretty JSON, bodies) as one safe line per line.
    pub fn lines(untrusted: &str) -> Vec<Self> {
        untrusted.lines().map(Self::new).collect()
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
    fn a_huge_line_is_cut() {
        let safe = SafeText::new(&"x".repeat(1 << 20));
        assert!(safe.as_str().len() < 2100);
        assert!(safe.as_str().contains("more bytes"));
    }
}
