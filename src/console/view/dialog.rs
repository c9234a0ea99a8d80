//! A command dialog: what will happen to which key, the fields it needs, and the confirmation.

use super::Theme;
use crate::console::model::{Dialog, DialogStage, NOT_WRITTEN_ANSWER, OLD_WORKER_STOPPED_ANSWER};
use crate::console::safe_text::SafeText;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};

pub fn draw(dialog: &Dialog, theme: Theme, frame: &mut Frame<'_>, area: Rect) {
    let title = if dialog.bulk.is_empty() {
        format!(" {} {} ", dialog.command.label(), SafeText::new(dialog.action.key.as_str()))
    } else {
        format!(" {} {} ", dialog.command.label(), crate::console::model::marked_actions(dialog.bulk.len()))
    };
    let mut lines: Vec<Line<'_>> = dialog.description.iter().map(|d| Line::raw(SafeText::new(d).to_string())).collect();
    if dialog.bulk.is_empty() {
        lines.push(Line::raw(format!(
            "As seen: {}, version {}; refused if it changed since.",
            dialog.action.state, dialog.action.revision
        )));
    }
    lines.push(Line::raw(""));
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
    lines.push(match dialog.stage {
        DialogStage::DestinationId | DialogStage::Reason | DialogStage::OldWorkerStopped | DialogStage::NotWritten => {
            Line::styled("Enter to continue, Esc to cancel", theme.dim())
        }
        DialogStage::Confirm => Line::styled("Confirm? y yes, n no", theme.warn()),
        DialogStage::Running => Line::styled("working…", theme.dim()),
    });
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::default().borders(Borders::ALL).title(Line::styled(title, theme.title()))),
        area,
    );
}
