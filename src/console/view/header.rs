//! The header: which ledger, who is reviewing, a count per state, and stale claims; then the tabs.

use super::Theme;
use crate::console::model::{Model, Pane};
use crate::domain::State;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

fn count(model: &Model, state: State) -> i64 {
    model.counts.iter().find(|(s, _)| *s == state).map_or(0, |(_, n)| *n)
}

pub fn draw(model: &Model, theme: Theme, frame: &mut Frame<'_>, area: Rect) {
    let width = usize::from(area.width);
    let first = Line::from(vec![
        Span::styled("actionledger review", theme.title()),
        Span::raw("  ledger "),
        Span::raw(super::fit(model.ledger_label.as_str(), width.saturating_sub(40).max(10))),
        Span::raw("  owner "),
        Span::styled(model.owner.as_str().to_owned(), theme.title()),
    ]);
    // The tabs below carry the counts of the states under review; this line the rest.
    let stale = if model.stale_claims > 0 {
        Span::styled(format!("STALE CLAIMS {}", model.stale_claims), theme.warn())
    } else {
        Span::styled("stale claims 0".to_owned(), theme.ok())
    };
    let total: i64 = model.counts.iter().map(|(_, n)| n).sum();
    let rest = format!(
        "  completed {}  cancelled {}  all actions {total}{}",
        count(model, State::Completed),
        count(model, State::Cancelled),
        model.filter.as_ref().map(|_| "  (filtered)").unwrap_or_default()
    );
    frame.render_widget(Paragraph::new(vec![first, Line::from(vec![stale, Span::raw(rest)])]), area);
}

pub fn draw_tabs(model: &Model, theme: Theme, frame: &mut Frame<'_>, area: Rect) {
    let mut spans = Vec::new();
    // The history panes share the ninth tab: the one chosen last is shown.
    let tabs = Pane::ALL.into_iter().filter(|p| !p.is_history() || *p == model.history);
    for (n, pane) in tabs.enumerate() {
        let total = match pane.state() {
            // The conflict pane also lists proposals waiting on actions in other states.
            Some(State::Conflict) if model.proposed_elsewhere > 0 => {
                format!("{}+{}", count(model, State::Conflict), model.proposed_elsewhere)
            }
            Some(state) => count(model, state).to_string(),
            None if pane == Pane::LateResults => model.late_results.to_string(),
            None if pane == Pane::All => model.counts.iter().map(|(_, n)| n).sum::<i64>().to_string(),
            None => model.refused.to_string(),
        };
        // Narrow terminals drop the pane numbers and a space between tabs; the footer and help
        // still give 1-8.
        let wide = area.width >= 100;
        let label =
            if wide { format!("{} {} {}", n + 1, pane.title(), total) } else { format!("{} {}", pane.title(), total) };
        if pane == model.pane {
            spans.push(Span::styled(format!("[{label}]"), theme.selected()));
        } else if pane == Pane::LateResults && model.late_results > 0 {
            spans.push(Span::styled(if wide { format!(" {label} ") } else { format!(" {label}") }, theme.warn()));
        } else {
            spans.push(Span::raw(if wide { format!(" {label} ") } else { format!(" {label}") }));
        }
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}
