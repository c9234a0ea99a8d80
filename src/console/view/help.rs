//! The help screen: every key binding.

use super::Theme;
use crate::console::keys::{Action, BINDINGS, CommandKind};
use crate::console::model::Model;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

pub fn draw(model: &Model, theme: Theme, frame: &mut Frame<'_>, area: Rect) {
    // `l` is listed only when a configured destination declares a lookup; without a
    // configuration the help says so instead.
    let lookups = model.destinations.any_lookup();
    let is_lookup = |b: &&crate::console::keys::Binding| {
        b.actions.iter().any(|&(_, action)| action == Action::Command(CommandKind::Lookup))
    };
    let mut lines: Vec<Line<'_>> = BINDINGS
        .iter()
        .filter(|b| lookups || !is_lookup(b))
        .map(|b| Line::from(vec![Span::styled(format!("{:<16}", b.keys), theme.key()), Span::raw(b.help)]))
        .collect();
    if model.configured.is_empty() {
        lines.push(Line::styled("no --config: look up (l) needs the destinations' configuration", theme.dim()));
    }
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines)
            .block(Block::default().borders(Borders::ALL).title(Line::styled(" keys (Esc closes) ", theme.title()))),
        area,
    );
}
