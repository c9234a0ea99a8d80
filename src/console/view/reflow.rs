//! Long text as screen rows: lines wrapped at a width as the detail draws them, and where a
//! searched text is found in them, so that a search can scroll to a match and mark it.
//!
//! The detail wraps its lines itself rather than leave it to the paragraph: a value can be
//! hundreds of kilobytes (thousands of rows), and a search must know the row of each match.

use ratatui::buffer::CellWidth as _;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

/// One match of a search: in which line, from which character to which (not included), counted
/// in the line's characters as drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub line: usize,
    pub start: usize,
    pub end: usize,
}

/// A character as a case-insensitive search compares it.
fn fold(c: char) -> char {
    c.to_lowercase().next().unwrap_or(c)
}

/// Every place `needle` is found in `lines`, ignoring case, in reading order; matches do not
/// overlap. An empty needle is found nowhere.
pub fn find(lines: &[Line<'_>], needle: &str) -> Vec<Found> {
    let needle: Vec<char> = needle.chars().map(fold).collect();
    let mut found = Vec::new();
    if needle.is_empty() {
        return found;
    }
    for (index, line) in lines.iter().enumerate() {
        let text: Vec<char> = line.spans.iter().flat_map(|s| s.content.chars()).map(fold).collect();
        let mut at = 0;
        while at + needle.len() <= text.len() {
            if text[at..at + needle.len()] == needle[..] {
                found.push(Found { line: index, start: at, end: at + needle.len() });
                at += needle.len();
            } else {
                at += 1;
            }
        }
    }
    found
}

/// Lines as rows of at most `width` columns, wrapped between words where a line has room and
/// inside a word where one word is wider than a row; nothing of the text is dropped but the space
/// a row ends at. The matches in `found` are drawn with `mark`, the one at index `current` with
/// `current_mark`. Returns the rows and, for each match, the row it starts on.
pub fn wrap(
    lines: &[Line<'_>],
    width: u16,
    found: &[Found],
    current: Option<usize>,
    (mark, current_mark): (Style, Style),
) -> (Vec<Line<'static>>, Vec<usize>) {
    let width = usize::from(width.max(1));
    let mut rows = Vec::new();
    let mut found_rows = vec![0; found.len()];
    for (index, line) in lines.iter().enumerate() {
        // This line's matches, in order (`find` sorts them by line, then by start).
        let (from, to) = (found.partition_point(|f| f.line < index), found.partition_point(|f| f.line <= index));
        let mut hit = from;
        let mut line_rows: Vec<Vec<Cell>> = Vec::new();
        let mut row: Vec<Cell> = Vec::new();
        let mut row_width = 0;
        let mut offset = 0;
        for grapheme in line.styled_graphemes(Style::default()) {
            let symbol = grapheme.symbol;
            let symbol_width = usize::from(symbol.cell_width());
            let start = offset;
            offset += symbol.chars().count();
            if symbol_width > width {
                continue;
            }
            while hit < to && found[hit].end <= start {
                hit += 1;
            }
            let style = match (hit < to && found[hit].start <= start, current == Some(hit)) {
                (true, true) => grapheme.style.patch(current_mark),
                (true, false) => grapheme.style.patch(mark),
                (false, _) => grapheme.style,
            };
            let whitespace = symbol.chars().all(char::is_whitespace);
            if row_width + symbol_width > width {
                if whitespace {
                    // The space a row ends at is not carried to the next.
                    line_rows.push(std::mem::take(&mut row));
                    row_width = 0;
                    continue;
                }
                // Wrap after the last space that follows a word; else cut the word.
                let first_word = row.iter().position(|c| !c.whitespace);
                let break_at =
                    row.iter().rposition(|c| c.whitespace).filter(|&space| first_word.is_some_and(|w| w < space));
                let carried = break_at.map_or_else(Vec::new, |space| row.split_off(space + 1));
                line_rows.push(std::mem::replace(&mut row, carried));
                row_width = row.iter().map(|c| c.width).sum();
            }
            row.push(Cell { symbol: symbol.to_owned(), style, start, width: symbol_width, whitespace });
            row_width += symbol_width;
        }
        // An empty line is a blank row; a line that ended with the space it wrapped at is not.
        if !row.is_empty() || line_rows.is_empty() {
            line_rows.push(row);
        }
        let mut placed = from;
        for cells in line_rows {
            // A match is on the row that holds its first character.
            if let Some(last) = cells.last() {
                while placed < to && found[placed].start <= last.start {
                    found_rows[placed] = rows.len();
                    placed += 1;
                }
            }
            rows.push(row_line(cells));
        }
    }
    (rows, found_rows)
}

/// A grapheme placed on a row: its style (a match's mark included) and where it was in its line.
struct Cell {
    symbol: String,
    style: Style,
    /// Its first character's place in the line, counted in characters.
    start: usize,
    width: usize,
    whitespace: bool,
}

/// One row's cells as a line, a span per run of one style (the line's own style is in each).
fn row_line(cells: Vec<Cell>) -> Line<'static> {
    let mut spans: Vec<Span<'static>> = Vec::new();
    for cell in cells {
        match spans.last_mut() {
            Some(span) if span.style == cell.style => span.content.to_mut().push_str(&cell.symbol),
            _ => spans.push(Span::styled(cell.symbol, cell.style)),
        }
    }
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::style::Modifier;

    fn text(rows: &[Line<'_>]) -> Vec<String> {
        rows.iter().map(|r| r.spans.iter().map(|s| s.content.as_ref()).collect::<String>()).collect()
    }

    const MARKS: (Style, Style) =
        (Style::new().add_modifier(Modifier::UNDERLINED), Style::new().add_modifier(Modifier::REVERSED));

    #[test]
    fn rows_wrap_between_words_and_cut_a_word_wider_than_a_row() {
        let lines = [Line::raw("the quick brown fox"), Line::raw(""), Line::raw("abcdefghij")];
        let (rows, _) = wrap(&lines, 10, &[], None, MARKS);
        assert_eq!(text(&rows), ["the quick ", "brown fox", "", "abcdefghij"]);
        let (rows, _) = wrap(&[Line::raw("abcdefghijklmnopqrstuvwxyz")], 10, &[], None, MARKS);
        assert_eq!(text(&rows), ["abcdefghij", "klmnopqrst", "uvwxyz"], "nothing dropped");
        let (rows, _) = wrap(&[Line::raw("  indented words here")], 9, &[], None, MARKS);
        assert_eq!(text(&rows), ["  indente", "d words ", "here"]);
    }

    /// The rows a wrapping paragraph draws for `text`, trailing spaces trimmed.
    fn paragraph_rows(text: &str, width: u16) -> Vec<String> {
        use ratatui::widgets::{Paragraph, Widget as _, Wrap};
        let paragraph = Paragraph::new(Line::raw(text.to_owned())).wrap(Wrap { trim: false });
        let height = u16::try_from(paragraph.line_count(width)).unwrap();
        let area = ratatui::layout::Rect::new(0, 0, width, height);
        let mut buffer = ratatui::buffer::Buffer::empty(area);
        paragraph.render(area, &mut buffer);
        (0..height)
            .map(|y| (0..width).map(|x| buffer[(x, y)].symbol()).collect::<String>().trim_end().to_owned())
            .collect()
    }

    /// The detail drew its lines with a wrapping paragraph before it wrapped them itself: a
    /// screen reads the same, words and spaces anywhere, at any width.
    #[test]
    fn rows_break_where_a_wrapping_paragraph_breaks_them() {
        let mut seed = 7u64;
        for _ in 0..3000 {
            let mut line = String::new();
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            for _ in 0..seed % 60 {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                line.push(['a', 'a', 'a', 'b', ' ', 'é'][usize::try_from((seed >> 33) % 6).unwrap()]);
            }
            let width = 3 + u16::try_from((seed >> 40) % 12).unwrap();
            let (rows, _) = wrap(&[Line::raw(line.clone())], width, &[], None, MARKS);
            let rows: Vec<String> = text(&rows).iter().map(|r| r.trim_end().to_owned()).collect();
            assert_eq!(rows, paragraph_rows(&line, width), "{line:?} at width {width}");
        }
    }

    #[test]
    fn a_match_is_found_ignoring_case_and_placed_on_its_row() {
        let value = format!("{}END-of-value", "x".repeat(95));
        let lines = [Line::raw("end here"), Line::raw(value)];
        let found = find(&lines, "END");
        assert_eq!(found.len(), 2);
        assert_eq!(found[1], Found { line: 1, start: 95, end: 98 });
        let (rows, found_rows) = wrap(&lines, 10, &found, Some(1), MARKS);
        assert_eq!(found_rows, [0, 10]);
        assert!(text(&rows)[10].starts_with("xxxxxEND-o"), "{:?}", text(&rows));
        let marked: Vec<&Span<'_>> = rows[10].spans.iter().filter(|s| s.style == MARKS.1).collect();
        assert_eq!(marked.len(), 1);
        assert_eq!(marked[0].content, "END", "the current match is marked, nothing else");
        assert_eq!(rows[0].spans[0].style, MARKS.0, "another match is marked as a match");
        assert!(find(&lines, "").is_empty());
        assert!(find(&lines, "absent").is_empty());
    }
}
