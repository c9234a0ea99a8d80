//! Named statements read out of the `.sql` files in `src/store/sql/`, at compile time.
//!
//! A file holds blocks that each begin with a `-- name: some_statement` line and a comment
//! header (what the statement does, why, and a `-- $n name: meaning` line per parameter); the
//! statement follows, ending in `;`, so that a block can be pasted into psql or sqlite3 as it is.
//! [`named`] picks a block's statement (without its header and final `;`), and [`template`] cuts
//! the text of a statement generated for a number of rows at its `{holes}`: both run in `const`
//! items, so a missing name or hole stops the build, and the hot path only joins the pieces.

/// The statement named `name` in `file`: the text after its header comment, up to the next
/// `-- name:` line, without the final `;` (the store appends to some statements, and joins
/// others into one command). Panics (at compile time, in a `const` item) if `file` has no
/// statement of that name.
pub(crate) const fn named(file: &'static str, name: &str) -> &'static str {
    let bytes = file.as_bytes();
    let mut from = 0;
    let start = loop {
        let Some(at) = find(bytes, NAME_LINE.as_bytes(), from) else {
            panic!("no statement of that name in the file");
        };
        let name_at = at + NAME_LINE.len();
        let end_of_name = name_at + name.len();
        if end_of_name < bytes.len() && starts_with(bytes, name_at, name.as_bytes()) && bytes[end_of_name] == b'\n' {
            break end_of_name + 1;
        }
        from = name_at;
    };
    // The header: comment lines and blank lines.
    let mut start = start;
    while start < bytes.len() && (bytes[start] == b'\n' || starts_with(bytes, start, b"--")) {
        while start < bytes.len() && bytes[start] != b'\n' {
            start += 1;
        }
        start += 1;
    }
    let mut end = match find(bytes, b"\n-- name: ", start) {
        Some(next) => next,
        None => bytes.len(),
    };
    while end > start && matches!(bytes[end - 1], b'\n' | b' ' | b';') {
        end -= 1;
    }
    assert!(end > start, "a named statement is empty");
    slice(file, start, end)
}

const NAME_LINE: &str = "-- name: ";

/// The text of a generated statement, cut at its holes: `pieces[i]` comes before hole `i`, then
/// `tail`. Filling it joins static pieces and the generated parts, with nothing to parse.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Template<const N: usize> {
    pieces: [&'static str; N],
    tail: &'static str,
}

/// Cuts `text` at `holes` (each written `{name}` in the text), which must appear in this order
/// and be the only braces in it. Panics (at compile time, in a `const` item) otherwise.
pub(crate) const fn template<const N: usize>(text: &'static str, holes: [&'static str; N]) -> Template<N> {
    let bytes = text.as_bytes();
    let mut pieces = [""; N];
    let mut from = 0;
    let mut i = 0;
    while i < N {
        let Some(at) = find(bytes, holes[i].as_bytes(), from) else {
            panic!("a template lacks one of its holes, or has them in another order");
        };
        pieces[i] = slice(text, from, at);
        from = at + holes[i].len();
        i += 1;
    }
    let mut braces = 0;
    let mut b = 0;
    while b < bytes.len() {
        if bytes[b] == b'{' {
            braces += 1;
        }
        b += 1;
    }
    assert!(braces == N, "a template has a hole it does not name");
    Template { pieces, tail: slice(text, from, bytes.len()) }
}

impl<const N: usize> Template<N> {
    /// The text before each hole, and after the last: for a statement whose holes take terms
    /// that bind as they are written.
    pub(crate) const fn pieces(&self) -> ([&'static str; N], &'static str) {
        (self.pieces, self.tail)
    }

    /// The statement with `parts[i]` in hole `i`.
    pub(crate) fn fill(&self, parts: [&str; N]) -> String {
        let length = self.pieces.iter().chain(&parts).map(|piece| piece.len()).sum::<usize>() + self.tail.len();
        let mut sql = String::with_capacity(length);
        for (piece, part) in self.pieces.iter().zip(parts) {
            sql.push_str(piece);
            sql.push_str(part);
        }
        sql.push_str(self.tail);
        sql
    }
}

const fn starts_with(bytes: &[u8], at: usize, prefix: &[u8]) -> bool {
    if at + prefix.len() > bytes.len() {
        return false;
    }
    let mut i = 0;
    while i < prefix.len() {
        if bytes[at + i] != prefix[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn find(bytes: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while at + needle.len() <= bytes.len() {
        if starts_with(bytes, at, needle) {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// `text[start..end]`, in a `const fn`.
const fn slice(text: &'static str, start: usize, end: usize) -> &'static str {
    let (head, _) = text.as_bytes().split_at(end);
    let (_, part) = head.split_at(start);
    match core::str::from_utf8(part) {
        Ok(part) => part,
        Err(_) => panic!("a statement is cut inside a character"),
    }
}

/// The names of the statements in `file`, in order.
#[cfg(test)]
pub(crate) fn names(file: &str) -> Vec<&str> {
    file.lines().filter_map(|line| line.strip_prefix(NAME_LINE)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "-- The file's own header.\n\n-- name: one\n-- What one does.\n-- $1 key: a key\nSELECT 1\nFROM t\nWHERE k = $1;\n\n-- name: one_more\n-- Another.\nSELECT {rows} FROM u{lock};\n";

    #[test]
    fn a_name_picks_its_statement_without_header_or_semicolon() {
        assert_eq!(named(FILE, "one"), "SELECT 1\nFROM t\nWHERE k = $1");
        assert_eq!(named(FILE, "one_more"), "SELECT {rows} FROM u{lock}");
        assert_eq!(names(FILE), ["one", "one_more"]);
    }

    #[test]
    #[should_panic(expected = "no statement of that name")]
    fn a_missing_name_fails() {
        named(FILE, "two");
    }

    #[test]
    fn a_template_fills_its_holes_in_order() {
        let template = template(named(FILE, "one_more"), ["{rows}", "{lock}"]);
        assert_eq!(template.fill(["a, b", " FOR UPDATE"]), "SELECT a, b FROM u FOR UPDATE");
    }

    #[test]
    #[should_panic(expected = "a template has a hole it does not name")]
    fn a_template_must_name_every_hole() {
        template(named(FILE, "one_more"), ["{rows}"]);
    }
}
