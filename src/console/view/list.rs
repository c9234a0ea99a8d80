//! The pane's list: one screen of rows, fetched for the visible window only.

use super::{Theme, fit_middle, short_duration};
use crate::console::model::{Model, Pane, Rows};
use crate::console::safe_text::SafeText;
use crate::domain::{ActionRecord, State};
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState};

/// The selection's symbol, in front of every row.
const HIGHLIGHT: &str = "> ";

pub fn draw(model: &Model, theme: Theme, frame: &mut Frame<'_>, area: Rect) {
    let filter =
        model.filter.as_ref().map(|f| format!(" — {}", SafeText::new(&f.describe()).as_str())).unwrap_or_default();
    let marks = if model.marks.is_empty() { String::new() } else { format!(" — {} marked", model.marks.len()) };
    let order = if model.pane == Pane::Refused { "newest first" } else { model.order.title() };
    let title = format!(" {} — {order}{filter}{marks} ", model.pane.title());
    let block = Block::default()
        .borders(Borders::TOP | Borders::BOTTOM)
        .title(Line::styled(title, theme.title()))
        .title_bottom(super::footer::navigation_line(model, theme, area.width));
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
    let (header, rows, widths): (Vec<&str>, Vec<Row<'_>>, Vec<Constraint>) = match &model.rows {
        Rows::Refused(items) => refused_table(items, now),
        Rows::Actions(items) if model.pane == Pane::InProgress => {
            let columns = [
                Column::fitted("DEST", items.iter().map(destination), 14),
                Column::fixed("REPEAT", 9),
                Column::fixed("LEASE", 10),
                Column::fitted("OWNER", items.iter().map(|a| a.claimed_by.as_deref().unwrap_or("-")), 16),
                Column::fixed("VER", 4),
                Column::fixed("TRY", 3),
            ];
            let key_width = key_width(area.width, &columns);
            (
                header(&columns),
                items.iter().map(|a| in_progress_row(model, a, now, theme, key_width)).collect(),
                widths(key_width, &columns),
            )
        }
        Rows::Actions(items) => {
            // Where rows are in any state, the state is a column of its own.
            let mixed = matches!(model.pane, Pane::All | Pane::LateResults);
            let mut columns = Vec::new();
            if mixed {
                columns.push(Column::fixed("STATE", 11));
            }
            columns.extend([
                Column::fixed("AGE", 5),
                Column::fixed("TRY", 3),
                Column::fitted("DEST", items.iter().map(destination), 12),
                Column::fitted("ASSIGNEE", items.iter().map(|a| a.assignee.as_deref().unwrap_or("-")), 12),
            ]);
            let key_width = key_width(area.width, &columns);
            let rows = items
                .iter()
                .map(|a| {
                    let mut cells = vec![Cell::from(key_cell(model, a, key_width))];
                    if mixed {
                        cells.push(Cell::from(a.state.to_string()));
                    }
                    cells.extend([
                        Cell::from(short_duration(now - a.created_at)),
                        Cell::from(a.attempts.to_string()),
                        Cell::from(SafeText::new(destination(a)).to_string()),
                        Cell::from(SafeText::new(a.assignee.as_deref().unwrap_or("-")).to_string()),
                    ]);
                    Row::new(cells)
                })
                .collect();
            (header(&columns), rows, widths(key_width, &columns))
        }
    };
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(theme.dim()))
        .block(block)
        .row_highlight_style(theme.selected())
        .highlight_symbol(HIGHLIGHT);
    let mut state = TableState::default().with_selected(Some(model.selected));
    frame.render_stateful_widget(table, area, &mut state);
}

/// The refused pane's table: when, what the problem was, the key as far as it was kept, and
/// where it came from with the message.
fn refused_table(
    items: &[crate::domain::RefusedSubmission],
    now: crate::domain::Timestamp,
) -> (Vec<&'static str>, Vec<Row<'static>>, Vec<Constraint>) {
    let widths = [5, 22, 24];
    let key_width = usize::from(widths[2]);
    let rows = items
        .iter()
        .map(|r| {
            Row::new(vec![
                Cell::from(short_duration(now - r.received_at)),
                Cell::from(r.problem.clone()),
                Cell::from(fit_middle(
                    SafeText::stored_escaped(r.key_excerpt.as_deref().unwrap_or("(none)")).as_str(),
                    key_width,
                )),
                Cell::from(format!(
                    "{} {}",
                    SafeText::stored_escaped(r.source.as_deref().unwrap_or("-")),
                    SafeText::new(&r.message)
                )),
            ])
        })
        .collect();
    let constraints = widths.iter().map(|w| Constraint::Length(*w)).chain([Constraint::Min(10)]).collect();
    (vec!["AGE", "PROBLEM", "KEY", "SOURCE / MESSAGE"], rows, constraints)
}

/// A marked action's key starts with `+`, for the bulk commands.
fn mark(model: &Model, a: &ActionRecord) -> &'static str {
    if model.marks.contains_key(a.key.as_str()) { "+ " } else { "" }
}

fn in_progress_row(
    model: &Model,
    a: &ActionRecord,
    now: crate::domain::Timestamp,
    theme: Theme,
    key_width: usize,
) -> Row<'static> {
    let (lease, style) = match a.lease_expires_at {
        Some(until) if until > now => {
            (format!("{} left", short_duration(until - now)), ratatui::style::Style::default())
        }
        Some(until) => (format!("STALE {}", short_duration(now - until)), theme.warn()),
        None => ("-".to_owned(), ratatui::style::Style::default()),
    };
    // Whether taking over a stale claim is safe, as the ledger decides it from the destination's
    // declaration (rule 5): without the configuration the console cannot say.
    let (repeat, repeat_style) = if model.destinations.of(a).is_none() {
        ("unknown", theme.dim())
    } else if model.destinations.protects_against_repeat(a, now) {
        ("protected", ratatui::style::Style::default())
    } else {
        ("UNSAFE", theme.warn())
    };
    Row::new(vec![
        Cell::from(format!(
            "{}{}",
            mark(model, a),
            fit_middle(SafeText::new(a.key.as_str()).as_str(), key_width - mark(model, a).len())
        )),
        Cell::from(SafeText::new(destination(a)).to_string()),
        Cell::from(repeat).style(repeat_style),
        Cell::from(lease).style(style),
        Cell::from(SafeText::new(a.claimed_by.as_deref().unwrap_or("-")).to_string()),
        Cell::from(a.ownership_version.to_string()),
        Cell::from(a.attempts.to_string()),
    ])
}

/// The key cell: its markers in full (marked, proposal waiting, blocked, late results), then the
/// key, cut in its middle when it does not fit.
fn key_cell(model: &Model, a: &ActionRecord, width: usize) -> String {
    let mut markers = if a.late_results > 0 { format!("[{} late] ", a.late_results) } else { String::new() };
    markers.push_str(mark(model, a));
    // A proposed payload waiting for a decision is marked, whatever the state.
    if a.proposal.is_some() && a.state != State::Conflict {
        markers.push_str("* ");
    }
    if model.blocked.contains_key(&a.key) {
        markers.push_str("[BLOCKED] ");
    }
    let room = width.saturating_sub(markers.chars().count()).max(8);
    format!("{markers}{}", fit_middle(SafeText::new(a.key.as_str()).as_str(), room))
}

fn destination(a: &ActionRecord) -> &str {
    a.destination.as_deref().unwrap_or("-")
}

/// A column beside the key: its header and width.
struct Column {
    header: &'static str,
    width: u16,
}

impl Column {
    fn fixed(header: &'static str, width: u16) -> Self {
        Self { header, width }
    }

    /// As wide as its header and the widest value shown, up to `max`: short values give the key
    /// the room.
    fn fitted<'a>(header: &'static str, values: impl Iterator<Item = &'a str>, max: u16) -> Self {
        let widest = values.map(|v| SafeText::new(v).as_str().chars().count()).max().unwrap_or(0);
        let width = u16::try_from(widest).unwrap_or(u16::MAX).max(u16::try_from(header.len()).unwrap_or(0)).min(max);
        Self { header, width }
    }
}

/// What the key column gets: the row's width less the selection symbol, the other columns and the
/// space between columns.
fn key_width(width: u16, columns: &[Column]) -> usize {
    let others: usize = columns.iter().map(|c| usize::from(c.width) + 1).sum();
    usize::from(width).saturating_sub(HIGHLIGHT.len() + others).max(12)
}

fn header(columns: &[Column]) -> Vec<&'static str> {
    std::iter::once("KEY").chain(columns.iter().map(|c| c.header)).collect()
}

fn widths(key_width: usize, columns: &[Column]) -> Vec<Constraint> {
    std::iter::once(Constraint::Length(u16::try_from(key_width).unwrap_or(u16::MAX)))
        .chain(columns.iter().map(|c| Constraint::Length(c.width)))
        .collect()
}
