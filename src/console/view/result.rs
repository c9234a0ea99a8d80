//! A bulk command's result: every action done with its change, every one refused with the
//! ledger's reason in full, every one that failed otherwise with its kind, wrapped and
//! scrollable, so that nothing is cut at 80x24.

use super::Theme;
use crate::console::layout;
use crate::console::model::BulkResult;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};

fn lines(result: &BulkResult, theme: Theme) -> Vec<Line<'static>> {
    let mut lines = vec![Line::styled(format!("done ({}), by key:", result.done.len()), theme.title())];
    if result.done.is_empty() {
        lines.push(Line::raw("  none"));
    }
    for (key, change) in &result.done {
        lines.push(Line::from(vec![Span::raw(format!("  {key}: ")), Span::styled(change.to_string(), theme.ok())]));
    }
    lines.push(Line::raw(""));
    let marked = if result.refused.is_empty() { "" } else { ", by key; they stay marked" };
    lines.push(Line::styled(format!("refused ({}){marked}:", result.refused.len()), theme.title()));
    if result.refused.is_empty() {
        lines.push(Line::raw("  none"));
    }
    for (key, why) in &result.refused {
        lines.push(Line::from(vec![Span::raw(format!("  {key}: ")), Span::styled(why.to_string(), theme.error())]));
    }
    // Not refusals: the ledger did not decide on these, so they are not listed as if it had.
    if !result.failed.is_empty() {
        lines.push(Line::raw(""));
        lines.push(Line::styled(format!("failed ({}), by key; they stay marked:", result.failed.len()), theme.title()));
    }
    for (key, why) in &result.failed {
        lines.push(Line::from(vec![Span::raw(format!("  {key}: ")), Span::styled(why.to_string(), theme.error())]));
    }
    lines
}

fn paragraph(result: &BulkResult, theme: Theme) -> Paragraph<'static> {
    Paragraph::new(lines(result, theme)).wrap(Wrap { trim: false })
}

/// How far the result scrolls at most in `area`: its lines as wrapped inside the box.
pub fn max_scroll(result: &BulkResult, area: Rect) -> u16 {
    let inner = area.width.saturating_sub(2);
    layout::max_scroll(paragraph(result, Theme::PLAIN).line_count(inner), area.height.saturating_sub(2))
}

pub fn draw(result: &BulkResult, theme: Theme, frame: &mut Frame<'_>, area: Rect) {
    let max = max_scroll(result, area);
    let keys = if max > 0 { "j/k scroll, Esc closes" } else { "Esc closes" };
    let title = format!(" {} ({keys}) ", result.summary());
    frame.render_widget(Clear, area);
    frame.render_widget(
        paragraph(result, theme)
            .scroll((result.scroll.min(max), 0))
            .block(Block::default().borders(Borders::ALL).title(Line::styled(title, theme.title()))),
        area,
    );
}
