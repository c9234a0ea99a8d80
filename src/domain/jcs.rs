//! The JSON Canonicalization Scheme (RFC 8785, "JCS"): one text for one JSON value, so that equal
//! payloads have one fingerprint whoever wrote them and however.
//!
//! Numbers are written as ECMAScript's `Number.prototype.toString` writes a double (the shortest
//! text that reads back as the same double: `1.0`, `1e0` and `1` are all `1`, `-0` is `0`, `1e2` is
//! `100`, `1e21` is `1e+21`); strings with only the escapes JCS requires (`\"`, `\\`, the short
//! forms `\b \f \n \r \t`, and `\u00xx` for other control characters), everything else as UTF-8;
//! object members sorted by the UTF-16 code units of their names; no whitespace. The value must
//! come from [`super::exact_json::read`], which refuses a number whose text here would denote
//! another value.

use serde_json::Value;

/// The canonical text of `value`.
pub(super) fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // serde_json orders members by UTF-8 bytes (code points), which differs from UTF-16
            // code units where characters beyond U+FFFF meet U+E000..U+FFFF.
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, (name, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(name, out);
                out.push(':');
                write(item, out);
            }
            out.push('}');
        }
    }
}

fn write_number(n: &serde_json::Number, out: &mut String) {
    out.push_str(&number_text(n));
}

/// A number as the double it denotes, in ECMAScript's form (what RFC 8785 writes for it).
pub(super) fn number_text(n: &serde_json::Number) -> String {
    #[allow(clippy::cast_precision_loss)] // as RFC 8785 reads every number: as a double
    let double = match (n.as_i64(), n.as_u64()) {
        (Some(i), _) => i as f64,
        (None, Some(u)) => u as f64,
        (None, None) => n.as_f64().unwrap_or_default(),
    };
    // Finite by construction: serde_json's numbers never hold NaN or an infinity.
    ryu_js::Buffer::new().format_finite(double).to_owned()
}

/// A string with JCS's escapes (RFC 8785 section 3.2.2.2, ECMAScript's `JSON.stringify`).
fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' => {
                use std::fmt::Write as _;
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(bits: u64) -> String {
        let value = serde_json::Number::from_f64(f64::from_bits(bits)).map_or(Value::Null, Value::Number);
        canonical(&value)
    }

    /// RFC 8785 Appendix B: IEEE 754 doubles (as bit patterns) and their canonical text. NaN and
    /// the infinities are not JSON and never reach here.
    #[test]
    fn numbers_follow_rfc_8785_appendix_b() {
        let samples: &[(u64, &str)] = &[
            (0x0000_0000_0000_0000, "0"),
            (0x8000_0000_0000_0000, "0"),
            (0x0000_0000_0000_0001, "5e-324"),
            (0x8000_0000_0000_0001, "-5e-324"),
            (0x7fef_ffff_ffff_ffff, "1.7976931348623157e+308"),
            (0xffef_ffff_ffff_ffff, "-1.7976931348623157e+308"),
            (0x4340_0000_0000_0000, "9007199254740992"),
            (0xc340_0000_0000_0000, "-9007199254740992"),
            (0x4430_0000_0000_0000, "295147905179352830000"),
            (0x44b5_2d02_c7e1_4af5, "9.999999999999997e+22"),
            (0x44b5_2d02_c7e1_4af6, "1e+23"),
            (0x44b5_2d02_c7e1_4af7, "1.0000000000000001e+23"),
            (0x444b_1ae4_d6e2_ef4e, "999999999999999700000"),
            (0x444b_1ae4_d6e2_ef4f, "999999999999999900000"),
            (0x444b_1ae4_d6e2_ef50, "1e+21"),
            (0x3eb0_c6f7_a0b5_ed8c, "9.999999999999997e-7"),
            (0x3eb0_c6f7_a0b5_ed8d, "0.000001"),
            (0x41b3_de43_5555_5553, "333333333.3333332"),
            (0x41b3_de43_5555_5554, "333333333.33333325"),
            (0x41b3_de43_5555_5555, "333333333.3333333"),
            (0x41b3_de43_5555_5556, "333333333.3333334"),
            (0x41b3_de43_5555_5557, "333333333.33333343"),
            (0xbecb_f647_612f_3696, "-0.0000033333333333333333"),
            (0x4314_3ff3_c1cb_0959, "1424953923781206.2"),
        ];
        for &(bits, text) in samples {
            assert_eq!(number(bits), text, "{bits:#018x}");
            // Written as serde_json writes the double, read back through the exact reader: the
            // same text. (Rust's `{:?}` may pick the other of two shortest texts, as for the last
            // sample: 1424953923781206.3 names another decimal, and is refused as inexact.)
            let written = format!("[{}]", serde_json::Number::from_f64(f64::from_bits(bits)).unwrap());
            let read = super::super::exact_json::read(&written).unwrap_or_else(|e| panic!("{written}: {e}"));
            assert_eq!(canonical(&read), format!("[{text}]"), "{written}");
        }
    }

    /// The number samples of RFC 8785 section 3.2.2.3, as JSON text through the exact reader.
    #[test]
    fn numbers_follow_rfc_8785_section_3_2_2_3() {
        let read = |text: &str| canonical(&super::super::exact_json::read(text).unwrap());
        assert_eq!(read("[1.0, 1e0, 1, 1E+0, 10e-1]"), "[1,1,1,1,1]");
        assert_eq!(
            read("[-0, -0.0, 0e5, 1e2, 100.0, 1e21, 1e-7, 0.000001, 1e20]"),
            "[0,0,0,100,100,1e+21,1e-7,0.000001,100000000000000000000]"
        );
        assert_eq!(read("[-1.5e3, 4.50, 2e-3, 0.1]"), "[-1500,4.5,0.002,0.1]");
        assert_eq!(read("[9007199254740991, -9007199254740991]"), "[9007199254740991,-9007199254740991]");
    }

    /// RFC 8785 section 3.2.4 (sorting) and Appendix A's example with its expected output.
    #[test]
    fn the_rfc_examples_canonicalize_as_published() {
        let read = |text: &str| canonical(&super::super::exact_json::read(text).unwrap());
        let sorting = r#"{
            "\u20ac": "Euro Sign",
            "\r": "Carriage Return",
            "\ufb33": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\ud83d\ude00": "Emoji: Grinning Face",
            "\u0080": "Control",
            "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        assert_eq!(
            read(sorting),
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
             \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
             \"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
        );

        // Appendix A writes its first number with more digits than a double keeps: the reader
        // refuses that (it would not come back as written), so it is given here as the double it
        // reads as.
        assert!(super::super::exact_json::read("[333333333.33333329]").is_err());
        let example = r#"{
            "numbers": [333333333.3333333, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]
        }"#;
        assert_eq!(
            read(example),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }
}
