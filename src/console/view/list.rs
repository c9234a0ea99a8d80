//! The pane's list: one screen of rows, fetched for the visible window only.

use super::{Theme, fit, short_duration};
use crate::console::model::{Model, Pane, Rows};
use crate::console::safe_text::SafeText;
use crate::domain::{ActionRecord, State};
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState};

pub fn draw(model: &Model, theme: Theme, frame: &mut Frame<'_>, area: Rect) {
    let filter =
        model.filter.as_ref().map(|f| format!(" — {}", SafeText::new(&f.describe()).as_str())).unwrap_or_default();
    let marks = if model.marks.is_empty() { String::new() } else { format!(" — {} marked", model.marks.len()) };
    let order = if model.pane == Pane::Refused { "newest first" } else { model.order.title() };
    let title = format!(" {} — {order}{filter}{marks} ", model.pane.title());
    let block = Block::default().borders(Borders::TOP | Borders::BOTTOM).title(Line::styled(title, theme.title()));
    if model.rows.is_empty() {
        let empty = match (&model.filter, model.now) {
            (_, None) => "loading…".to_owned(),
            (Some(_), _) => "no action in this pane matches the filter".to_owned(),
            (None, _) => format!("nothing {} right now", model.pane.title()),
        };
        frame.render_widget(Paragraph::new(empty).block(block), area);
        return;
    }
    let now = model.now.unwrap_or_default();
    let width = usize::from(area.width);
    let (header, rows, widths): (Vec<&str>, Vec<Row<'_>>, Vec<Constraint>) = match &model.rows {
        Rows::Refused(items) => (
            vec!["AGE", "PROBLEM", "KEY", "SOURCE / MESSAGE"],
            items
                .iter()
                .map(|r| {
                    Row::new(vec![
                        Cell::from(short_duration(now - r.received_at)),
                        Cell::from(r.problem.clone()),
                        Cell::from(SafeText::new(r.key_excerpt.as_deref().unwrap_or("(none)")).to_string()),
                        Cell::from(format!(
                            "{} {}",
                            SafeText::new(r.source.as_deref().unwrap_or("-")),
                            SafeText::new(&r.message)
                        )),
                    ])
                })
                .collect(),
            vec![Constraint::Length(5), Constraint::Length(22), Constraint::Length(24), Constraint::Min(10)],
        ),
        Rows::Actions(items) if model.pane == Pane::InProgress => (
            vec!["KEY", "LEASE", "OWNER", "VER", "TRY"],
            items.iter().map(|a| in_progress_row(a, now, theme, mark(model, a))).collect(),
            vec![
                Constraint::Min(20),
                Constraint::Length(10),
                Constraint::Length(16),
                Constraint::Length(4),
                Constraint::Length(3),
            ],
        ),
        Rows::Actions(items) => (
            vec!["KEY", "AGE", "TRY", "DESTINATION", "ASSIGNEE"],
            items
                .iter()
                .map(|a| {
                    Row::new(vec![
                        // A proposed payload waiting for a decision is marked, whatever the state.
                        Cell::from(fit(
                            &late_marker(
                                a,
                                &format!(
                                    "{}{}{}{}",
                                    mark(model, a),
                                    if a.proposal.is_some() && a.state != State::Conflict { "* " } else { "" },
                                    // In front, like the late marker: a long key cut short never hides it.
                                    if model.blocked.contains_key(&a.key) { "[BLOCKED] " } else { "" },
                                    SafeText::new(a.key.as_str()).as_str()
                                ),
                            ),
                            width.saturating_sub(36),
                        )),
                        Cell::from(short_duration(now - a.created_at)),
                        Cell::from(a.attempts.to_string()),
                        Cell::from(SafeText::new(a.destination.as_deref().unwrap_or("-")).to_string()),
                        Cell::from(SafeText::new(a.assignee.as_deref().unwrap_or("-")).to_string()),
                    ])
                })
                .collect(),
            vec![
                Constraint::Min(20),
                Constraint::Length(5),
                Constraint::Length(3),
                Constraint::Length(12),
                Constraint::Length(12),
            ],
        ),
    };
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(theme.dim()))
        .block(block)
        .row_highlight_style(theme.selected())
        .highlight_symbol("> ");
    let mut state = TableState::default().with_selected(Some(model.selected));
    frame.render_stateful_widget(table, area, &mut state);
}

/// A marked action's key starts with `+`, for the bulk commands.
fn mark(model: &Model, a: &ActionRecord) -> &'static str {
    if model.marks.contains_key(a.key.as_str()) { "+ " } else { "" }
}

fn in_progress_row(a: &ActionRecord, now: crate::domain::Timestamp, theme: Theme, mark: &str) -> Row<'static> {
    let (lease, style) = match a.lease_expires_at {
        Some(until) if until > now => {
            (format!("{} left", short_duration(until - now)), ratatui::style::Style::default())
        }
        Some(until) => (format!("STALE {}", short_duration(now - until)), theme.warn()),
        None => ("-".to_owned(), ratatui::style::Style::default()),
    };
    Row::new(vec![
        Cell::from(format!("{mark}{}", SafeText::new(a.key.as_str()))),
        Cell::from(lease).style(style),
        Cell::from(SafeText::new(a.claimed_by.as_deref().unwrap_or("-")).to_string()),
        Cell::from(a.ownership_version.to_string()),
        Cell::from(a.attempts.to_string()),
    ])
}

/// The key, after a marker of late results waiting for acknowledgement (rule 8): in front, so
/// that a long key cut short never hides it.
fn late_marker(a: &ActionRecord, key: &str) -> String {
    if a.late_results > 0 { format!("[{} late] {key}", a.late_results) } else { key.to_owned() }
}
