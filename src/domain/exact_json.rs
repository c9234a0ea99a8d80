//! Reading payload JSON so that nothing submitted is lost unnoticed: an object names each key
//! once, and every number keeps the value it was written with once read as RFC 8785 and I-JSON
//! read numbers, as a 64-bit float (so an integer beyond ±(2^53 - 1) only where a float holds it). What cannot be kept is refused,
//! naming the field by its JSON path (`$.items[2].qty`).
//!
//! serde_json alone keeps the last of two equal keys, and reads an integer beyond the 64-bit
//! range as the nearest double; its `arbitrary_precision` feature would change every `Value` in
//! the crate. So the document is read here into an ordinary `Value` by a visitor that tracks
//! where it is, and each number's canonical text is compared with the number as written.

use super::payload::PayloadError;
use super::text::{escape_untrusted, truncate};
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::cell::RefCell;
use std::fmt::{self, Write as _};

/// Longest JSON path a refusal quotes, in bytes.
const MAX_PATH_BYTES: usize = 300;

/// 2^53 - 1, ECMAScript's `Number.MAX_SAFE_INTEGER`: every integer up to it in magnitude is kept.
pub(super) const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Reads JSON text into a value, refusing duplicate keys and numbers the value would not keep
/// exactly. A document that is not JSON is [`PayloadError::NotJson`], whatever else it holds.
pub(super) fn read(text: &str) -> Result<Value, PayloadError> {
    let reader = RefCell::new(Reader { path: Vec::new(), numbers: number_tokens(text).into_iter(), problem: None });
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let read = Node(&reader).deserialize(&mut deserializer).and_then(|value| deserializer.end().map(|()| value));
    let Reader { path, problem, .. } = reader.into_inner();
    match (read, problem) {
        // serde_json's own wording for a number beyond what a double holds (1e400): it stops at
        // that number, so the path is still where it stands.
        (Err(error), _) if error.to_string().starts_with("number out of range") => {
            Err(PayloadError::NumberOutOfRange { path: render_path(&path) })
        }
        (Err(error), _) => Err(PayloadError::NotJson(error.to_string())),
        (Ok(_), Some(problem)) => Err(problem),
        (Ok(value), None) => Ok(value),
    }
}

/// One step from a value to a value inside it.
#[derive(Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// What the visitors share while they read one document.
struct Reader<'t> {
    /// Where the value being read sits.
    path: Vec<Step>,
    /// The number tokens of the text not read yet, in document order: the parser meets them in
    /// the same order, one per number it reads.
    numbers: std::vec::IntoIter<&'t str>,
    /// The first thing found that cannot be kept. Reading goes on, so that a document that is not
    /// JSON further on is refused as such.
    problem: Option<PayloadError>,
}

impl Reader<'_> {
    fn note(&mut self, problem: impl FnOnce(String) -> PayloadError) {
        if self.problem.is_none() {
            self.problem = Some(problem(render_path(&self.path)));
        }
    }

    /// A number as read, checked against its token: its canonical text (RFC 8785, the double it
    /// reads as) must denote the same decimal value. Within ±(2^53 - 1) every integer passes;
    /// beyond, only those a double holds exactly with the same digits (`9007199254740992`,
    /// `100000000000000000000`), never a neighbour of one (`9007199254740993`).
    fn number(&mut self, number: Option<Number>) -> Value {
        let token = self.numbers.next();
        let kept = match (&number, token) {
            (Some(n), Some(token)) => same_decimal(token, &super::jcs::number_text(n)),
            // Tokens and numbers out of step only happen in text that is not JSON, which the
            // parser refuses anyway.
            (Some(_), None) => true,
            (None, _) => false,
        };
        if !kept {
            let integer = token.is_some_and(|t| !t.contains(['.', 'e', 'E']));
            if integer {
                self.note(|path| PayloadError::IntegerOutOfRange { path });
            } else {
                self.note(|path| PayloadError::InexactNumber { path });
            }
        }
        number.map_or(Value::Null, Value::Number)
    }
}

/// Reads one value at the reader's current path.
#[derive(Clone, Copy)]
struct Node<'r, 't>(&'r RefCell<Reader<'t>>);

impl<'de> DeserializeSeed<'de> for Node<'_, '_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(self.0.borrow_mut().number(Some(v.into())))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(self.0.borrow_mut().number(Some(v.into())))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(self.0.borrow_mut().number(Number::from_f64(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            self.0.borrow_mut().path.push(Step::Index(items.len()));
            // On an error the path stays where it stopped, for the refusal to name.
            let item = seq.next_element_seed(self)?;
            self.0.borrow_mut().path.pop();
            match item {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let repeated = object.contains_key(&key);
            self.0.borrow_mut().path.push(Step::Key(key.clone()));
            if repeated {
                self.0.borrow_mut().note(|path| PayloadError::DuplicateKey { path });
            }
            let value = map.next_value_seed(self)?;
            self.0.borrow_mut().path.pop();
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// A path as people read it: `$`, `.name` for a key that is a plain name, `["any key"]`
/// otherwise (escaped, as untrusted text), `[2]` for an index.
fn render_path(path: &[Step]) -> String {
    let mut out = String::from("$");
    for step in path {
        match step {
            Step::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
            Step::Key(key) if is_plain_name(key) => {
                out.push('.');
                out.push_str(key);
            }
            Step::Key(key) => {
                out.push_str("[\"");
                out.push_str(&escape_untrusted(&truncate(key, 64)).replace('"', "\\\""));
                out.push_str("\"]");
            }
        }
    }
    truncate(&out, MAX_PATH_BYTES)
}

fn is_plain_name(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The number tokens of JSON text, in document order: see [`number_spans`].
fn number_tokens(text: &str) -> Vec<&str> {
    number_spans(text).into_iter().map(|span| &text[span]).collect()
}

/// JSON text with every integer beyond ±(2^53 - 1) written as a string of its exact digits
/// (`820982911946154508` becomes `"820982911946154508"`), the text as it is when there is none.
/// A webhook intake takes a sender's body so: providers send ids that wide (Shopify's order ids)
/// as numbers, which a 64-bit float, as RFC 8785 and I-JSON read numbers, would not keep, and the
/// sender cannot be asked to send them as strings. `text` must be JSON: in other text, a quoted
/// token could make a string where there was none.
pub fn wide_integers_as_text(text: &str) -> std::borrow::Cow<'_, str> {
    let wide = |token: &str| {
        let digits = token.strip_prefix('-').unwrap_or(token);
        let beyond = digits.len() > 16 || digits.parse::<u64>().is_ok_and(|n| n > MAX_SAFE_INTEGER);
        !digits.contains(['.', 'e', 'E']) && beyond
    };
    let spans: Vec<_> = number_spans(text).into_iter().filter(|span| wide(&text[span.clone()])).collect();
    if spans.is_empty() {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 2 * spans.len());
    let mut from = 0;
    for span in spans {
        out.push_str(&text[from..span.start]);
        out.push('"');
        out.push_str(&text[span.clone()]);
        out.push('"');
        from = span.end;
    }
    out.push_str(&text[from..]);
    std::borrow::Cow::Owned(out)
}

/// Where the number tokens of JSON text are, in document order, by the grammar's rule
/// (`-? digits (. digits)? ([eE] [+-]? digits)?`), skipping strings. In JSON the parser accepts
/// (and in any part of a text before the parser's first error) these are exactly the numbers
/// it reads, in the order it reads them.
fn number_spans(text: &str) -> Vec<std::ops::Range<usize>> {
    let bytes = text.as_bytes();
    let digits = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() {
                    match bytes[i] {
                        b'\\' => i += 2,
                        b'"' => {
                            i += 1;
                            break;
                        }
                        _ => i += 1,
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i = digits(if bytes[i] == b'-' { i + 1 } else { i });
                if i < bytes.len() && bytes[i] == b'.' {
                    i = digits(i + 1);
                }
                if i < bytes.len() && matches!(bytes[i], b'e' | b'E') {
                    i += 1;
                    if i < bytes.len() && matches!(bytes[i], b'+' | b'-') {
                        i += 1;
                    }
                    i = digits(i);
                }
                tokens.push(start..i);
            }
            _ => i += 1,
        }
    }
    tokens
}

/// Whether two JSON number tokens denote the same decimal value (`100`, `1E+2` and `100.0` do;
/// `0.1` and `0.10000000000000001` do not). Zero is zero whatever its sign.
fn same_decimal(a: &str, b: &str) -> bool {
    match (decimal(a), decimal(b)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// A number token as (negative, significant digits, exponent of the last of them); `None` for an
/// exponent too large to compare, which no double's canonical text has.
fn decimal(token: &str) -> Option<(bool, String, i64)> {
    let (negative, rest) = token.strip_prefix('-').map_or((false, token), |rest| (true, rest));
    let (mantissa, exponent) = rest.split_once(['e', 'E']).unwrap_or((rest, "0"));
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = whole.chars().chain(fraction.chars()).collect();
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return Some((false, String::new(), 0));
    }
    let trimmed = significant.trim_end_matches('0');
    let dropped = i64::try_from(significant.len() - trimmed.len()).ok()?;
    let fraction_len = i64::try_from(fraction.len()).ok()?;
    let exponent = exponent.parse::<i64>().ok()?.checked_sub(fraction_len)?.checked_add(dropped)?;
    Some((negative, trimmed.to_owned(), exponent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_beyond_what_a_float_keeps_become_their_digits_as_text() {
        // Shopify's documented order id (its webhook reference's order example).
        let body = r#"{"id": 820982911946154508, "n": 9007199254740991, "m": -9007199254740992, "s": "1e999",
                       "f": 1.5e300, "list": [12345678901234567890123, 7]}"#;
        let wide = wide_integers_as_text(body);
        let value: Value = serde_json::from_str(&wide).unwrap();
        assert_eq!(value["id"], "820982911946154508");
        assert_eq!(value["n"], 9_007_199_254_740_991_i64, "within ±(2^53 - 1) a number stays a number");
        assert_eq!(value["m"], "-9007199254740992");
        assert_eq!((value["s"].as_str(), value["f"].as_f64()), (Some("1e999"), Some(1.5e300)));
        assert_eq!(value["list"][0], "12345678901234567890123");
        assert!(read(&wide).is_ok(), "the payload rule keeps every number left");
        let plain = r#"{"id": 42}"#;
        assert!(matches!(wide_integers_as_text(plain), std::borrow::Cow::Borrowed(text) if text == plain));
    }
}
