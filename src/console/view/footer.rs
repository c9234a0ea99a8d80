//! The status line (what just happened, or a database error) and the keys that apply now.

use super::Theme;
use crate::console::keys::{FOUND_BINDINGS, command_key};
use crate::console::model::{DetailView, DialogStage, FilterTerms, Mode, Model, StatusKind, applicable_commands};
use crate::console::safe_text::SafeText;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};

fn status_line(model: &Model, theme: Theme) -> Line<'static> {
    if let Mode::Filter(text) = &model.mode {
        // The filter as typed, and what it will show, while it is typed.
        let meaning = match FilterTerms::parse(text, &model.owner) {
            Ok(terms) if terms.line.is_empty() => "empty: Enter clears the filter".to_owned(),
            Ok(terms) => format!("shows {}", terms.describe()),
            Err(problem) => problem.to_string(),
        };
        return Line::from(vec![
            Span::styled("/", theme.key()),
            Span::raw(format!("{}_  ", SafeText::new(text))),
            Span::styled(format!("({})", SafeText::new(&meaning)), theme.dim()),
        ]);
    }
    if let (Mode::Detail, Some(text)) = (&model.mode, &model.search_line) {
        return Line::from(vec![
            Span::styled("/", theme.key()),
            Span::raw(format!("{}_  ", SafeText::new(text))),
            Span::styled("(search the detail, any case)", theme.dim()),
        ]);
    }
    match (&model.status, &model.hint) {
        (_, Some(hint)) => Line::styled(hint.clone(), theme.ok()),
        (Some(status), None) => {
            let style = if status.kind == StatusKind::Error { theme.error() } else { theme.ok() };
            Line::styled(status.text.to_string(), style)
        }
        (None, None) => Line::styled("ready", theme.dim()),
    }
}

/// The status line wraps rather than cut a message: the lines it needs at this width.
pub fn status_height(model: &Model, width: u16) -> u16 {
    let lines = Paragraph::new(status_line(model, Theme::PLAIN)).wrap(Wrap { trim: false }).line_count(width);
    u16::try_from(lines).unwrap_or(u16::MAX).max(1)
}

pub fn draw_status(model: &Model, theme: Theme, frame: &mut Frame<'_>, area: Rect) {
    frame.render_widget(Paragraph::new(status_line(model, theme)).wrap(Wrap { trim: false }), area);
}

/// The keys that apply in the current mode, for the selected action's state.
pub fn hints(model: &Model) -> Vec<(String, String)> {
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    if model.help {
        return vec![pair("Esc", "close help"), pair("j/k", "scroll")];
    }
    if model.result.is_some() {
        return vec![pair("Esc", "close the result"), pair("j/k", "scroll")];
    }
    match &model.mode {
        Mode::Filter(_) => {
            vec![pair("type", "key text, dest:NAME, mine, age:30m"), pair("Enter", "apply"), pair("Esc", "cancel")]
        }
        Mode::Dialog(dialog) => match dialog.stage {
            DialogStage::DestinationId => {
                vec![pair("type", "the destination's record id"), pair("Enter", "next"), pair("Esc", "cancel")]
            }
            DialogStage::Reason => vec![pair("type", "a reason"), pair("Enter", "next"), pair("Esc", "cancel")],
            DialogStage::OldWorkerStopped => {
                vec![pair("type", "stopped, once checked"), pair("Enter", "next"), pair("Esc", "cancel")]
            }
            DialogStage::NotWritten => {
                vec![pair("type", "not written, once checked"), pair("Enter", "next"), pair("Esc", "cancel")]
            }
            DialogStage::Confirm => vec![pair("y", "confirm"), pair("n/Esc", "cancel")],
            DialogStage::Running => vec![pair("…", "working")],
        },
        Mode::Detail if model.search_line.is_some() => {
            vec![pair("type", "text to find"), pair("Enter", "go to the first match"), pair("Esc", "cancel")]
        }
        Mode::List | Mode::Detail => {
            // Most useful first: what can be done to the selected action, then help; the rest
            // as room allows (help lists everything).
            let mut keys = Vec::new();
            // While a detail's search is applied, its keys come first, and n means the search's.
            let searching = model.mode == Mode::Detail && model.detail_search.is_some();
            if searching {
                keys.push(pair("n/N", "next/previous match"));
            }
            if model.connection.away.is_some() {
                // Every command is held back before its dialog until the ledger answers again.
                keys.push(pair("…", "commands wait for the ledger"));
            } else if let Some(action) = model.selected_action() {
                let shadowed =
                    |key: &str| searching && FOUND_BINDINGS.iter().any(|b| b.keys.split(" / ").any(|k| k == key));
                for kind in applicable_commands(model, action) {
                    if !shadowed(command_key(kind)) {
                        keys.push(pair(command_key(kind), kind.short_label()));
                    }
                }
            }
            if !model.marks.is_empty() {
                keys.push(pair("u", &format!("unmark {}", model.marks.len())));
            }
            keys.push(pair("?", "help"));
            if searching {
                keys.push(pair("Esc", "end search"));
            } else if model.mode == Mode::Detail {
                keys.push(pair("Esc", "back"));
            }
            keys.push(pair("q", "quit"));
            keys
        }
    }
}

/// The keys that move around, drawn on the body's bottom border so that the footer keeps its
/// line for the commands: most used first, the rest as room allows (help lists everything).
pub fn navigation(model: &Model) -> Vec<(String, String)> {
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    if model.help || model.result.is_some() {
        return Vec::new();
    }
    match &model.mode {
        Mode::Detail if model.search_line.is_some() => Vec::new(),
        Mode::Detail if model.detail_search.is_some() => vec![pair("j/k", "scroll"), pair("/", "search again")],
        Mode::Detail if model.detail_view == DetailView::Values || model.detail.is_none() => {
            vec![pair("j/k", "scroll"), pair("/", "search"), pair("v", "facts")]
        }
        Mode::Detail => vec![
            pair("j/k", "scroll"),
            pair("v", "values"),
            pair("/", "search"),
            pair("Space", "mark"),
            pair("y", "copy key"),
        ],
        Mode::List => vec![
            pair("Enter", "open"),
            pair("Space", "mark"),
            pair("v", "values"),
            pair("y", "copy key"),
            pair("/", "filter"),
            pair("j/k", "move"),
            pair("1-9", "pane"),
        ],
        Mode::Filter(_) | Mode::Dialog(_) => Vec::new(),
    }
}

/// [`navigation`] as a border's title, as many as fit `width`.
pub fn navigation_line(model: &Model, theme: Theme, width: u16) -> Line<'static> {
    let mut room = usize::from(width).saturating_sub(4);
    let mut spans = vec![Span::raw(" ")];
    for (key, label) in navigation(model) {
        let needed = key.chars().count() + label.chars().count() + 3;
        if needed > room {
            break;
        }
        room -= needed;
        spans.push(Span::styled(key, theme.key()));
        spans.push(Span::raw(format!(" {label}  ")));
    }
    if spans.len() == 1 {
        return Line::default();
    }
    Line::from(spans)
}

/// Keys that stay in the footer however narrow the terminal: the way back and the way out.
fn essential(key: &str) -> bool {
    matches!(key, "Esc" | "q" | "n/Esc")
}

pub fn draw_keys(model: &Model, theme: Theme, frame: &mut Frame<'_>, area: Rect) {
    let width = |(key, label): &(String, String)| key.chars().count() + label.chars().count() + 3;
    let hints = hints(model);
    // The essential keys are kept first; the others fill the room left, in their order.
    let mut room = usize::from(area.width).saturating_sub(hints.iter().filter(|h| essential(&h.0)).map(width).sum());
    let mut spans = Vec::new();
    for hint in hints {
        if !essential(&hint.0) {
            if width(&hint) > room {
                continue;
            }
            room -= width(&hint);
        }
        let (key, label) = hint;
        spans.push(Span::styled(key, theme.key()));
        spans.push(Span::raw(format!(" {label}  ")));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}
