//! A command dialog: what will happen to which key (scrolled where it is long: a bulk command lists
//! every marked action), the fields it needs, and the confirmation, always in view below it.

use super::Theme;
use crate::console::layout;
use crate::console::model::{Dialog, DialogStage, NOT_WRITTEN_ANSWER, OLD_WORKER_STOPPED_ANSWER};
use crate::console::safe_text::SafeText;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};

/// What the dialog says will happen: the part that scrolls.
fn description(dialog: &Dialog) -> Paragraph<'static> {
    let mut lines: Vec<Line<'static>> =
        dialog.description.iter().map(|d| Line::raw(SafeText::new(d).to_string())).collect();
    if dialog.bulk.is_empty() {
        lines.push(Line::raw(format!(
            "As seen: {}, version {}; refused if it changed since.",
            dialog.action.state, dialog.action.revision
        )));
    }
    Paragraph::new(lines).wrap(Wrap { trim: false })
}

/// The fields and the key to press next, below the description: never scrolled away.
fn fields(dialog: &Dialog, theme: Theme, scrolled: Option<String>) -> Paragraph<'static> {
    let mut lines = vec![Line::raw("")];
    let field = |label: &str, value: &str, active: bool| {
        let cursor = if active { "_" } else { "" };
        Line::from(vec![
            Span::styled(format!("{label}: "), theme.key()),
            Span::raw(format!("{}{cursor}", SafeText::new(value))),
        ])
    };
    if dialog.command == crate::console::keys::CommandKind::ResolveCompleted {
        lines.push(field("destination id", &dialog.destination_id, dialog.stage == DialogStage::DestinationId));
    }
    if dialog.stage != DialogStage::DestinationId {
        lines.push(field("reason", &dialog.reason, dialog.stage == DialogStage::Reason));
    }
    if matches!(dialog.stage, DialogStage::OldWorkerStopped | DialogStage::Confirm | DialogStage::Running)
        && dialog.asks_old_worker_stopped()
    {
        lines.push(Line::styled(
            format!("Old worker stopped? Check it, then type {OLD_WORKER_STOPPED_ANSWER:?}."),
            theme.warn(),
        ));
        lines.push(field("old worker", &dialog.old_worker_answer, dialog.stage == DialogStage::OldWorkerStopped));
    }
    if matches!(dialog.stage, DialogStage::NotWritten | DialogStage::Confirm | DialogStage::Running)
        && dialog.asks_not_written()
    {
        lines.push(Line::styled(
            format!("No record at the destination? Check it, then type {NOT_WRITTEN_ANSWER:?}."),
            theme.warn(),
        ));
        lines.push(field("destination", &dialog.not_written_answer, dialog.stage == DialogStage::NotWritten));
    }
    lines.push(Line::raw(""));
    if let Some(scrolled) = scrolled {
        lines.push(Line::styled(scrolled, theme.dim()));
    }
    lines.push(match dialog.stage {
        DialogStage::DestinationId | DialogStage::Reason | DialogStage::OldWorkerStopped | DialogStage::NotWritten => {
            Line::styled("Enter to continue, Esc to cancel", theme.dim())
        }
        DialogStage::Confirm => Line::styled("Confirm? y yes, n no", theme.warn()),
        DialogStage::Running => Line::styled("working…", theme.dim()),
    });
    Paragraph::new(lines).wrap(Wrap { trim: false })
}

/// Lines a paragraph takes at `width`.
fn height(paragraph: &Paragraph<'_>, width: u16) -> u16 {
    u16::try_from(paragraph.line_count(width)).unwrap_or(u16::MAX)
}

/// The parts of the dialog inside its border: the description, and the fields below it. The
/// line that says how to scroll is there only when the description does not fit.
fn parts(dialog: &Dialog, area: Rect) -> (Rect, Rect, Option<(u16, u16)>) {
    let inner = Block::default().borders(Borders::ALL).inner(area);
    let fields_height = |scrolls: bool| height(&fields(dialog, Theme::PLAIN, scrolls.then(String::new)), inner.width);
    let lines = height(&description(dialog), inner.width);
    let scrolls = lines > inner.height.saturating_sub(fields_height(false));
    // What fits is followed by the fields at once; what does not takes all the room they leave.
    let fields = Constraint::Length(fields_height(scrolls));
    let [top, bottom] = if scrolls {
        Layout::vertical([Constraint::Fill(1), fields]).areas(inner)
    } else {
        let [top, bottom, _] = Layout::vertical([Constraint::Length(lines), fields, Constraint::Fill(1)]).areas(inner);
        [top, bottom]
    };
    (top, bottom, scrolls.then_some((lines, top.height)))
}

/// How far the description scrolls at most in a dialog drawn in `area`, and how many of its lines
/// show at once.
pub fn scroll_limits(dialog: &Dialog, area: Rect) -> (u16, u16) {
    let (top, _, _) = parts(dialog, area);
    (layout::max_scroll(usize::from(height(&description(dialog), top.width)), top.height), top.height)
}

/// The lines a dialog needs to show everything at `width`, borders included.
pub fn needed_height(dialog: &Dialog, width: u16) -> u16 {
    let inner = width.saturating_sub(2);
    height(&description(dialog), inner) + height(&fields(dialog, Theme::PLAIN, None), inner) + 2
}

pub fn draw(dialog: &Dialog, theme: Theme, frame: &mut Frame<'_>, area: Rect) {
    let title = if dialog.bulk.is_empty() {
        format!(" {} {} ", dialog.command.label(), SafeText::new(dialog.action.key.as_str()))
    } else {
        format!(" {} {} ", dialog.command.label(), crate::console::model::marked_actions(dialog.bulk.len()))
    };
    let (top, bottom, scrolls) = parts(dialog, area);
    let (max, _) = scroll_limits(dialog, area);
    let scroll = dialog.scroll.min(max);
    let scrolled = scrolls.map(|(lines, shown)| {
        let last = (scroll + shown).min(lines);
        format!("lines {}-{last} of {lines}: Up/Down, PageUp/PageDown, Home/End scroll", scroll + 1)
    });
    frame.render_widget(Clear, area);
    frame.render_widget(Block::default().borders(Borders::ALL).title(Line::styled(title, theme.title())), area);
    frame.render_widget(description(dialog).scroll((scroll, 0)), top);
    frame.render_widget(fields(dialog, theme, scrolled), bottom);
}
