//! The help screen: every key binding.

use super::Theme;
use crate::console::keys::BINDINGS;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

pub fn draw(theme: Theme, frame: &mut Frame<'_>, area: Rect) {
    let lines: Vec<Line<'_>> = BINDINGS
        .iter()
        .map(|b| Line::from(vec![Span::styled(format!("{:<16}", b.keys), theme.key()), Span::raw(b.help)]))
        .collect();
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines)
            .block(Block::default().borders(Borders::ALL).title(Line::styled(" keys (Esc closes) ", theme.title()))),
        area,
    );
}
