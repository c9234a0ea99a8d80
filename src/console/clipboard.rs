//! Copying to the person's clipboard through their terminal (OSC 52), which works over SSH. The
//! console emits this escape itself and nothing else may: the text travels base64-encoded, so
//! nothing in it, however hostile, can end the sequence or start another.

/// The escape that asks the terminal to put `text` on the clipboard.
pub fn osc52(text: &str) -> String {
    format!("\u{1b}]52;c;{}\u{7}", base64(text.as_bytes()))
}

/// Standard base64 with padding: the only alphabet inside the escape.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[usize::try_from((n >> shift) & 63).unwrap_or(0)]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_travels_encoded() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"acme:order:1"), "YWNtZTpvcmRlcjox");
        let hostile = osc52("x\u{7}\u{1b}]52;c;ZXZpbA==\u{7}");
        assert_eq!(hostile.matches('\u{1b}').count(), 1, "one escape: the console's own");
        assert_eq!(hostile.matches('\u{7}').count(), 1);
        assert!(hostile.starts_with("\u{1b}]52;c;") && hostile.ends_with('\u{7}'));
    }
}
