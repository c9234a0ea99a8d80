//! The help screen: every key binding.

use super::Theme;
use crate::console::keys::{Action, BINDING_TABLES, CommandKind};
use crate::console::layout;
use crate::console::model::Model;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

/// The help screen's lines for this console.
fn lines(model: &Model, theme: Theme) -> Vec<Line<'static>> {
    // `l` is listed only when a configured destination declares a lookup; without a
    // configuration the help says so instead.
    let lookups = model.destinations.any_lookup();
    let is_lookup = |b: &&crate::console::keys::Binding| {
        b.actions.iter().any(|&(_, action)| action == Action::Command(CommandKind::Lookup))
    };
    let mut lines: Vec<Line<'static>> = Vec::new();
    for (index, (place, bindings)) in BINDING_TABLES.iter().enumerate() {
        // The first table needs no heading: it is what keys mean wherever nothing else says.
        if index > 0 {
            lines.push(Line::styled(format!("{place}:"), theme.title()));
        }
        lines.extend(
            bindings
                .iter()
                .filter(|b| lookups || !is_lookup(b))
                .map(|b| Line::from(vec![Span::styled(format!("{:<16}", b.keys), theme.key()), Span::raw(b.help)])),
        );
    }
    if model.configured.is_empty() {
        lines.push(Line::styled("no --config: look up (l) needs the destinations' configuration", theme.dim()));
    }
    lines
}

/// How far the help scrolls at most in `area`: a short terminal scrolls it with j/k.
pub fn max_scroll(model: &Model, area: Rect) -> u16 {
    layout::max_scroll(lines(model, Theme::PLAIN).len(), area.height.saturating_sub(2))
}

pub fn draw(model: &Model, theme: Theme, frame: &mut Frame<'_>, area: Rect) {
    let max = max_scroll(model, area);
    let title = if max > 0 { " keys (j/k scroll, Esc closes) " } else { " keys (Esc closes) " };
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines(model, theme))
            .scroll((model.help_scroll.min(max), 0))
            .block(Block::default().borders(Borders::ALL).title(Line::styled(title, theme.title()))),
        area,
    );
}
