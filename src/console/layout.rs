//! The screen's geometry, which the model and the view share: where the parts of the screen go,
//! how many rows a page holds and how far a text scrolls. Arithmetic on sizes and line counts
//! only: it imports neither the model nor the view, so that both can import it.

use ratatui::layout::{Constraint, Layout, Rect};

/// Rows of a pane that fit a terminal of this height: header, tabs, table borders and header,
/// status and footer take 8 lines.
pub fn visible_rows(height: u16) -> usize {
    usize::from(height.saturating_sub(8)).max(1)
}

/// The parts of the screen: header, tabs, body, status and footer. The status line grows to
/// show a long message in full (`status_lines` as wrapped), up to a third of the screen.
pub fn screen(area: Rect, status_lines: u16) -> [Rect; 5] {
    let status = status_lines.min((area.height / 3).max(1));
    Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(status),
        Constraint::Length(1),
    ])
    .areas(area)
}

/// Lines the open detail shows at once in the body, for paging.
pub fn detail_page(body: Rect) -> u16 {
    body.height.saturating_sub(3).max(1)
}

/// Where a bulk result goes: over the list, leaving the status line and footer in view.
pub fn result_area(area: Rect) -> Rect {
    let height = area.height.saturating_sub(3).max(3);
    centered(Rect { height, ..area }, 78, 30)
}

/// Where the help screen goes.
pub fn help_area(area: Rect) -> Rect {
    centered(area, 78, 26)
}

/// A box of at most `width` x `height` in the middle of `area`.
pub fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect { x: area.x + (area.width - width) / 2, y: area.y + (area.height - height) / 2, width, height }
}

/// How far a text of `lines` lines scrolls at most where `shown` of them fit: its end is always
/// reachable, and never passed.
pub fn max_scroll(lines: usize, shown: u16) -> u16 {
    u16::try_from(lines).unwrap_or(u16::MAX).saturating_sub(shown)
}

/// [`max_scroll`] for a text that may run to more rows than a `u16` counts: a value shown in
/// full can be hundreds of kilobytes.
pub fn max_scroll_rows(rows: usize, shown: u16) -> usize {
    rows.saturating_sub(usize::from(shown))
}

/// How far each scrollable part of the screen scrolls at most, measured by the view for the
/// screen as it is. The driver measures before each key and the update bounds scrolling by these,
/// so that `End` shows the end and `Up` after it moves at once, without the update asking the
/// view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScrollLimits {
    /// The open detail, its lines as wrapped at the screen's width.
    pub detail: usize,
    /// Lines the open detail shows at once: what PageDown moves.
    pub detail_page: u16,
    /// The help screen.
    pub help: u16,
    /// The last bulk command's result.
    pub result: u16,
    /// The row of each match of the detail's search (the one being typed, else the one applied),
    /// in reading order: where a search scrolls to.
    pub detail_matches: Vec<usize>,
    /// The open dialog's description (a bulk command's list of every action).
    pub dialog: u16,
    /// Lines of the open dialog's description shown at once: what PageDown moves.
    pub dialog_page: u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_text_is_reachable_and_never_passed() {
        assert_eq!(max_scroll(10, 4), 6);
        assert_eq!(max_scroll(3, 4), 0, "a text that fits does not scroll");
        assert_eq!(max_scroll(usize::MAX, 4), u16::MAX - 4);
    }

    #[test]
    fn the_status_line_grows_up_to_a_third_of_the_screen() {
        let [header, tabs, body, status, footer] = screen(Rect::new(0, 0, 80, 24), 20);
        assert_eq!((header.height, tabs.height, status.height, footer.height), (2, 1, 8, 1));
        assert_eq!(body.height, 24 - 2 - 1 - 8 - 1);
        assert_eq!(visible_rows(24), 16);
    }
}
