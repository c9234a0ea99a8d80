//! The untrusted-text sanitizer over arbitrary input: `escape_untrusted` never panics, leaves no
//! control character (C0, DEL, C1, so no escape sequence) and no invisible formatting character in
//! its output, and is reversible, so no escape in the input can pass for one of its own.
//! `escape_untrusted_lines` and `truncate`, which feed it, are checked alongside.

#![no_main]

use actionledger::domain::text::{escape_untrusted, escape_untrusted_lines, truncate};
use libfuzzer_sys::fuzz_target;

mod invisible;
use invisible::is_invisible_format;

fn needs_escaping(ch: char) -> bool {
    ch == '\\' || ch.is_control() || is_invisible_format(ch)
}

/// Reverses `escape_untrusted`: `\\`, `\n`, `\r`, `\t`, `\xHH` and `\u{H..}`; `None` on anything
/// else after a backslash.
fn unescape(shown: &str) -> Option<String> {
    let mut out = String::with_capacity(shown.len());
    let mut chars = shown.chars();
    while let Some(ch) = chars.next() {
        if ch != '\\' {
            out.push(ch);
            continue;
        }
        let original = match chars.next()? {
            '\\' => '\\',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'x' => {
                let hex: String = chars.by_ref().take(2).collect();
                let code = u32::from_str_radix(&hex, 16).ok().filter(|&c| hex.len() == 2 && c < 0x80)?;
                char::from_u32(code)?
            }
            'u' => {
                if chars.next()? != '{' {
                    return None;
                }
                let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                if hex.len() < 4 {
                    return None;
                }
                char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?
            }
            _ => return None,
        };
        out.push(original);
    }
    Some(out)
}

fn check_escaped(text: &str, shown: &str) {
    assert!(!shown.chars().any(|c| c.is_control() || is_invisible_format(c)), "{text:?} shown as {shown:?}");
    assert_eq!(unescape(shown).as_deref(), Some(text), "escaping is reversible");
    if !text.chars().any(needs_escaping) {
        assert_eq!(shown, text, "harmless text is shown as it is");
    }
}

fn check(text: &str) {
    let shown = escape_untrusted(text);
    check_escaped(text, &shown);

    let lines = escape_untrusted_lines(text);
    assert_eq!(lines.split('\n').count(), text.split('\n').count(), "line breaks are kept, and only those");
    for (line, shown_line) in text.split('\n').zip(lines.split('\n')) {
        check_escaped(line, shown_line);
    }

    for max in [0, 1, 2, 3, 4, 5, text.len() / 2, text.len().saturating_sub(1), text.len(), 300] {
        let cut = truncate(text, max);
        if text.len() <= max {
            assert_eq!(cut, text);
        } else {
            let (head, tail) = cut.rsplit_once("… [").expect("a cut is marked");
            assert!(text.starts_with(head) && head.len() <= max && max - head.len() < 4, "{text:?} cut at {max}");
            assert_eq!(tail, format!("{} more bytes]", text.len() - head.len()));
        }
        // As refused keys are shown to reviewers.
        let shown_cut = escape_untrusted(&cut);
        assert!(!shown_cut.chars().any(|c| c.is_control() || is_invisible_format(c)));
    }
}

fuzz_target!(|data: &[u8]| {
    match std::str::from_utf8(data) {
        Ok(text) => check(text),
        Err(_) => check(&String::from_utf8_lossy(data)),
    }
});
