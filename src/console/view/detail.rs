//! The selected action in full: record and source, how it was settled, deliveries, expected
//! payload (whenever a proposal waits, in any state: each field it changes with both values in
//! full), every attempt, destination evidence, audit trail; and with `v` every value in full.
//! A search (`/`) marks its matches and scrolls to the one shown.

use super::reflow::{self, Found};
use super::{Theme, fit, fit_middle, short_duration};
use crate::console::layout;
use crate::console::model::{DetailView, Model, Pane, Rows};
use crate::console::safe_text::SafeText;
use crate::domain::{ActorKind, AuditEntry, RefusedSubmission};
use crate::ledger::ActionDetail;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};

fn time(t: crate::domain::Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// The open detail's title and lines, before they are wrapped: the selected action's, or in the
/// refused pane the selected refused submission's; `None` while it loads.
fn content(model: &Model, theme: Theme, width: u16) -> Option<(String, Vec<Line<'_>>)> {
    match (&model.detail, &model.rows) {
        (None, Rows::Refused(rows)) if model.pane == Pane::Refused => {
            let refused = rows.get(model.selected)?;
            Some((format!(" refused submission {} ", refused.id), refused_lines(model, refused, theme)))
        }
        (None, _) => None,
        (Some(detail), _) if model.detail_view == DetailView::Values => {
            Some(key_titled(detail, " — full values (v or Esc: back)", width, values(detail, theme)))
        }
        (Some(detail), _) => Some(key_titled(detail, "", width, lines(model, detail, theme, usize::from(width)))),
    }
}

/// The title names the action's key; a key too long for it is cut in its middle there and
/// given whole, wrapped, as the first line: two long keys are never told apart by a cut.
fn key_titled<'a>(
    detail: &ActionDetail,
    suffix: &str,
    width: u16,
    mut lines: Vec<Line<'a>>,
) -> (String, Vec<Line<'a>>) {
    let key = SafeText::new(detail.action.key.as_str()).to_string();
    let room = usize::from(width).saturating_sub(suffix.chars().count() + 4);
    if key.chars().count() > room {
        lines.insert(0, Line::raw(format!("key {key}")));
    }
    (format!(" {}{suffix} ", fit_middle(&key, room)), lines)
}

/// The open detail as drawn in an area `width` wide: its title, its rows, and the row of each
/// match of `needle` (the search applied, or the one being typed).
struct Shown {
    title: String,
    rows: Vec<Line<'static>>,
    found_rows: Vec<usize>,
}

fn shown(model: &Model, theme: Theme, width: u16, needle: Option<&str>) -> Option<Shown> {
    let (title, lines) = content(model, theme, width)?;
    let found: Vec<Found> = needle.map(|n| reflow::find(&lines, n)).unwrap_or_default();
    let current = model.detail_search.as_ref().filter(|s| Some(s.text.as_str()) == needle).map(|s| s.current);
    let marks =
        (Style::default().add_modifier(Modifier::UNDERLINED | Modifier::BOLD), theme.selected().patch(theme.warn()));
    let (rows, found_rows) = reflow::wrap(&lines, width, &found, current, marks);
    Some(Shown { title, rows, found_rows })
}

/// Rows of the detail that fit `area` at once: the area but its top and bottom borders.
fn rows_shown(area: Rect) -> u16 {
    area.height.saturating_sub(2)
}

/// How the detail scrolls in `area`: how far at most (its rows as wrapped at that width, so the
/// end of the last section is always reachable), and the row of each match of the search being
/// typed, else of the one applied, for the update to scroll to.
pub fn measure(model: &Model, area: Rect) -> (usize, Vec<usize>) {
    let needle = model.search_line.as_deref().or(model.detail_search.as_ref().map(|s| s.text.as_str()));
    shown(model, Theme::PLAIN, area.width, needle).map_or((0, Vec::new()), |shown| {
        (layout::max_scroll_rows(shown.rows.len(), rows_shown(area)), shown.found_rows)
    })
}

pub fn draw(model: &Model, theme: Theme, frame: &mut Frame<'_>, area: Rect) {
    let needle = model.detail_search.as_ref().map(|s| s.text.as_str());
    let Some(shown) = shown(model, theme, area.width, needle) else {
        frame.render_widget(Paragraph::new("loading…").block(Block::default().borders(Borders::TOP)), area);
        return;
    };
    let max = layout::max_scroll_rows(shown.rows.len(), rows_shown(area));
    let scroll = model.detail_scroll.min(max);
    let visible: Vec<Line<'static>> = shown.rows.into_iter().skip(scroll).take(usize::from(rows_shown(area))).collect();
    let block = Block::default()
        .borders(Borders::TOP | Borders::BOTTOM)
        .title(Line::styled(shown.title, theme.title()))
        .title_bottom(super::footer::navigation_line(model, theme, area.width));
    frame.render_widget(Paragraph::new(visible).block(block), area);
}

/// Every value of the action in full, nothing cut: the approved payload, each proposal waiting,
/// each attempt's error and response body, each lookup's answer, and the last error.
fn values<'a>(detail: &ActionDetail, theme: Theme) -> Vec<Line<'a>> {
    let a = &detail.action;
    let indented = |lines: Vec<SafeText>| lines.into_iter().map(|l| Line::raw(format!("  {l}"))).collect::<Vec<_>>();
    let block = |text: &str| indented(SafeText::whole_lines(text));
    let json = |text: &str| indented(SafeText::whole_json_lines(text));
    let mut out = vec![section(&format!("payload ({})", a.payload.fingerprint().short()), theme)];
    if detail.purge.is_some() {
        out.push(Line::raw("  removed by retention; only its fingerprint is kept"));
    } else {
        out.extend(json(&a.payload.pretty()));
    }
    out.push(Line::raw(""));
    // Every proposal waiting, oldest first.
    let waiting: Vec<_> = detail.waiting_proposals().collect();
    if waiting.is_empty() {
        out.push(section("proposed payload: none", theme));
    }
    for (n, proposal) in waiting.iter().enumerate() {
        let title = if waiting.len() > 1 {
            format!("proposed payload {} of {} ({})", n + 1, waiting.len(), proposal.payload.fingerprint().short())
        } else {
            format!("proposed payload ({})", proposal.payload.fingerprint().short())
        };
        out.push(section(&title, theme));
        out.extend(json(&proposal.payload.pretty()));
    }
    if detail.attempts.is_empty() {
        out.extend([Line::raw(""), section("attempts: none", theme)]);
    }
    for at in detail.attempts.iter().rev() {
        let ev = &at.evidence;
        out.push(Line::raw(""));
        out.push(section(
            &format!(
                "attempt #{} by {} (ownership {}): {}, status {}, destination id {}",
                at.number,
                safe(&at.worker),
                at.ownership_version,
                at.outcome.map_or("in flight", |o| o.as_str()),
                ev.status.map_or("-".to_owned(), |s| s.to_string()),
                safe(ev.destination_id.as_deref().unwrap_or("-"))
            ),
            theme,
        ));
        match &at.error {
            Some(error) => {
                out.push(Line::raw("error"));
                out.extend(block(error));
            }
            None => out.push(Line::raw("error: none")),
        }
        match &ev.body {
            Some(body) => {
                out.push(Line::raw("response body"));
                out.extend(block(body));
            }
            None => out.push(Line::raw("response body: none")),
        }
    }
    for lookup in detail.lookups.iter().rev() {
        out.push(Line::raw(""));
        out.push(section(
            &format!(
                "lookup {} by {}: {}, {} records, status {}, destination id {}",
                time(lookup.at),
                safe(&lookup.actor),
                lookup.verdict.as_str(),
                lookup.records,
                lookup.evidence.status.map_or("-".to_owned(), |s| s.to_string()),
                safe(lookup.destination_id.as_deref().unwrap_or("-"))
            ),
            theme,
        ));
        if let Some(said) = &lookup.detail {
            out.push(Line::raw("what it found"));
            out.extend(block(said));
        }
        match &lookup.evidence.body {
            Some(body) => {
                out.push(Line::raw("response body"));
                out.extend(block(body));
            }
            None => out.push(Line::raw("response body: none")),
        }
    }
    out.push(Line::raw(""));
    match &a.last_error {
        Some(error) => {
            out.push(section("last error", theme));
            out.extend(block(error));
        }
        None => out.push(section("last error: none", theme)),
    }
    out
}

/// A refused submission in full: nothing of its problem or message is cut.
fn refused_lines<'a>(model: &Model, r: &RefusedSubmission, theme: Theme) -> Vec<Line<'a>> {
    let now = model.now.unwrap_or(r.received_at);
    vec![
        Line::from(vec![Span::styled("refused", theme.error()), Span::raw(format!("  {}", r.problem))]),
        Line::raw(format!("received {}  {} ago", time(r.received_at), short_duration(now - r.received_at))),
        Line::raw(format!(
            "key {}",
            SafeText::stored_escaped(r.key_excerpt.as_deref().unwrap_or("(none, or withheld)"))
        )),
        Line::raw(format!(
            "source {}  event {}  destination {}",
            SafeText::stored_escaped(r.source.as_deref().unwrap_or("-")),
            SafeText::stored_escaped(r.event_id.as_deref().unwrap_or("-")),
            SafeText::stored_escaped(r.destination.as_deref().unwrap_or("-"))
        )),
        Line::raw(""),
        section("why it was refused", theme),
        Line::raw(safe(&r.message)),
        Line::raw(""),
        Line::raw("Nothing was recorded for it: the sender fixes it and submits again."),
    ]
}

fn section<'a>(title: &str, theme: Theme) -> Line<'a> {
    Line::styled(title.to_owned(), theme.title())
}

fn lines<'a>(model: &Model, detail: &'a ActionDetail, theme: Theme, width: usize) -> Vec<Line<'a>> {
    let a = &detail.action;
    let now = model.now.unwrap_or(a.updated_at);
    let mut out = vec![
        Line::from(vec![
            Span::styled(a.state.as_str().to_owned(), theme.warn()),
            Span::raw(format!(
                "  version {}  ownership version {}  attempts {}  destination {}  assigned to {}",
                a.revision,
                a.ownership_version,
                a.attempts,
                safe(a.destination.as_deref().unwrap_or("-")),
                safe(a.assignee.as_deref().unwrap_or("nobody"))
            )),
        ]),
        Line::raw(format!(
            "source {} version {}  created {} ago  updated {} ago{}",
            safe(a.source.as_deref().unwrap_or("-")),
            a.source_version.map_or("-".to_owned(), |v| v.to_string()),
            short_duration(now - a.created_at),
            short_duration(now - a.updated_at),
            a.after.as_ref().map(|k| format!("  runs after {}", safe(k.as_str()))).unwrap_or_default()
        )),
    ];
    out.extend(settled(detail, theme, width));
    if let Some(blocked) = &detail.blocked {
        out.push(Line::styled(format!("BLOCKED: {}", safe(&blocked.reason())), theme.warn()));
        out.push(Line::raw(if blocked.after_can_be_retried() {
            format!(
                "It runs once {} completes: retry that one (the failed pane, 5, then r), or cancel this one (x).",
                safe(blocked.after.as_str())
            )
        } else {
            "It can never run by itself: cancel it (x) if it must not happen.".to_owned()
        }));
    }
    if let Some(updated) = &a.updates {
        out.push(Line::raw(format!(
            "updates {} (destination record {})",
            safe(updated.as_str()),
            safe(a.updates_destination_id.as_deref().unwrap_or("-"))
        )));
    }
    for update in &detail.updates {
        let line = crate::domain::manual::describe_update(update, a);
        let failed = matches!(update.state, crate::domain::State::Failed | crate::domain::State::Cancelled);
        out.push(if failed { Line::styled(safe(&line), theme.warn()) } else { Line::raw(safe(&line)) });
    }
    if let Some(guard) = detail.update_guard {
        let words = format!("update {}", safe(&guard.describe(a.updates_destination_id.as_deref().unwrap_or("-"))));
        // An update that may overwrite a change made at the destination is a warning to read.
        out.push(if guard.overwrites() == Some(false) { Line::raw(words) } else { Line::styled(words, theme.warn()) });
    }
    if a.payload_revision > 1 || a.idempotency_key.is_some() {
        out.push(Line::raw(format!(
            "payload revision {}  idempotency key {}",
            a.payload_revision,
            safe(a.sending_key())
        )));
    }
    if let Some(worker) = &a.claimed_by {
        let lease = a.lease_expires_at.map_or("-".to_owned(), |until| {
            if until > now {
                format!("{} left", short_duration(until - now))
            } else {
                format!("STALE for {}", short_duration(now - until))
            }
        });
        out.push(Line::raw(format!("claimed by {}  lease {lease}", safe(worker))));
    }
    if let Some(error) = &a.last_error {
        out.push(Line::from(vec![Span::styled("last error ", theme.error()), Span::raw(safe(error))]));
    }
    if a.old_worker_may_act {
        out.push(Line::styled(
            "held after an unsafe takeover: the old worker may still act; retry asks you to confirm it stopped",
            theme.warn(),
        ));
    }
    out.extend(late_results(detail, theme));

    out.extend(deliveries(detail, theme));
    out.extend(payloads(detail, model.proposal_shown, theme));
    out.extend(attempts(detail, theme, width));
    out.extend(evidence(model, detail, theme, width));
    out.extend(audit(detail, theme));
    out
}

fn safe(text: &str) -> String {
    SafeText::new(text).to_string()
}

/// The late results no person has acknowledged, with their evidence, first: they are what the
/// person must look at (rule 8).
fn late_results<'a>(detail: &ActionDetail, theme: Theme) -> Vec<Line<'a>> {
    let late: Vec<_> = detail.late_results().collect();
    if late.is_empty() {
        return Vec::new();
    }
    let title = format!("late results ({}): from an obsolete owner, changed nothing; e to acknowledge", late.len());
    let mut out = vec![Line::raw(""), Line::styled(title, theme.warn())];
    for at in late {
        out.push(Line::raw(format!(
            "  #{} {} by {} under ownership version {}  ended {}",
            at.number,
            at.outcome.map_or("in flight", |o| o.as_str()),
            safe(&at.worker),
            at.ownership_version,
            at.ended_at.map_or("-".to_owned(), time)
        )));
        let ev = &at.evidence;
        out.push(Line::raw(format!(
            "    status {}  destination id {}{}",
            ev.status.map_or("-".to_owned(), |s| s.to_string()),
            safe(ev.destination_id.as_deref().unwrap_or("-")),
            at.error.as_deref().map(|e| format!("  error {}", safe(e))).unwrap_or_default()
        )));
        if let Some(body) = &ev.body {
            out.push(Line::raw(format!("    body {}", safe(body))));
        }
    }
    out
}

fn deliveries<'a>(detail: &ActionDetail, theme: Theme) -> Vec<Line<'a>> {
    let mut out = vec![Line::raw(""), section(&format!("deliveries ({})", detail.deliveries.len()), theme)];
    for d in detail.deliveries.iter().rev().take(5) {
        out.push(Line::raw(format!(
            "  {}  {:<9} event {}  source {} v{}  payload {}",
            time(d.received_at),
            d.outcome.as_str(),
            safe(d.event_id.as_deref().unwrap_or("-")),
            safe(d.source.as_deref().unwrap_or("-")),
            d.source_version.map_or("-".to_owned(), |v| v.to_string()),
            &d.fingerprint[..12.min(d.fingerprint.len())]
        )));
    }
    out
}

/// The approved payload, or what the proposal shown (`shown`, among those waiting) changes.
fn payloads<'a>(detail: &ActionDetail, shown: usize, theme: Theme) -> Vec<Line<'a>> {
    let a = &detail.action;
    let mut out = vec![Line::raw("")];
    if let Some(purge) = &detail.purge {
        // A tombstone: its payload was removed by retention (rule 7); the fingerprint is kept.
        out.push(section(
            &format!("purged by purge run {} on {} ({})", purge.id, time(purge.at), safe(&purge.owner)),
            theme,
        ));
        out.push(Line::raw(format!(
            "  payload removed; fingerprint {} kept, so a replay of the key is still a duplicate",
            a.payload.fingerprint().short()
        )));
        return out;
    }
    let waiting: Vec<_> = detail.waiting_proposals().collect();
    let shown = waiting.len().checked_sub(1).map(|last| shown.min(last));
    match shown.map(|i| (i, waiting[i].proposal())).or_else(|| a.proposal.clone().map(|p| (0, p))) {
        None => {
            out.push(section(&format!("expected payload ({})", a.payload.fingerprint().short()), theme));
            out.extend(SafeText::json_lines(&a.payload.pretty()).into_iter().map(|l| Line::raw(format!("  {l}"))));
        }
        Some((index, proposal)) => {
            // Per changed field, both values in full (the paragraph wraps them): two columns
            // would cut exactly the long values a reviewer has to compare.
            if waiting.len() > 1 {
                out.push(section(
                    &format!(
                        "payload: what proposal {} of {} changes (p: next; approve with a, the others are rejected; \
                         reject this one with d)",
                        index + 1,
                        waiting.len()
                    ),
                    theme,
                ));
            } else {
                out.push(section("payload: what the proposal changes (approve with a, reject with d)", theme));
            }
            if a.state == crate::domain::State::Completed {
                out.push(Line::raw(format!(
                    "  completed: approving records the update action {}#update-{}",
                    safe(a.key.as_str()),
                    detail.next_update_number()
                )));
            }
            out.push(Line::raw(format!(
                "  approved {}  proposed {}",
                a.payload.fingerprint().short(),
                proposal.payload.fingerprint().short()
            )));
            let changes = a.payload.changes_to(&proposal.payload);
            let absent = "(absent)";
            for change in &changes.changed {
                out.push(Line::styled(format!("  {}", safe(&change.field)), theme.warn()));
                out.push(Line::raw(format!(
                    "    approved  {}",
                    SafeText::json(change.approved.as_deref().unwrap_or(absent))
                )));
                out.push(Line::raw(format!(
                    "    proposed  {}",
                    SafeText::json(change.proposed.as_deref().unwrap_or(absent))
                )));
            }
            out.push(Line::raw(format!("  {} field(s) unchanged; the approved payload in full:", changes.unchanged)));
            out.extend(SafeText::json_lines(&a.payload.pretty()).into_iter().map(|l| Line::raw(format!("  {l}"))));
        }
    }

    out
}

/// How a settled action (completed, cancelled, or failed for good) came to its state: the audit
/// entry that moved it there, with who (a person, or a worker and its ownership version), when
/// (the ledger's time) and how (the command and its reason, or the worker's result and its
/// evidence). An action still to be decided has its own sections for what waits.
fn settled<'a>(detail: &ActionDetail, theme: Theme, width: usize) -> Vec<Line<'a>> {
    use crate::domain::State;
    let a = &detail.action;
    if !matches!(a.state, State::Completed | State::Cancelled | State::Failed) {
        return Vec::new();
    }
    let Some(entry) = detail.audit.iter().rev().find(|e| e.to_state == a.state && e.from_state != Some(a.state)) else {
        return Vec::new();
    };
    let how = format!("{} by {} at {}", entry.event.as_str().replace('_', " "), actor(entry), time(entry.at));
    // A worker's result: its attempt under that claim says what the destination answered.
    let attempt = (entry.actor_kind == ActorKind::Worker)
        .then(|| {
            detail
                .attempts
                .iter()
                .rev()
                .find(|at| at.ownership_version == entry.ownership_version && at.worker == entry.actor && !at.stale)
        })
        .flatten();
    let record = match a.state {
        State::Completed => a.destination_id.as_deref(),
        _ => attempt.and_then(|at| at.evidence.destination_id.as_deref()),
    };
    // The last error has its own line below, and a worker's reason is its error: said once.
    let said_below = |text: &&str| a.last_error.as_deref() == Some(*text);
    let error = attempt.and_then(|at| at.error.as_deref()).filter(|e| !said_below(e));
    let reason = entry.reason.as_deref().filter(|r| !said_below(r) && error != Some(*r));
    let cut = |text: &str| fit(&safe(text), width.saturating_mul(2));
    let evidence: Vec<String> = [
        attempt.and_then(|at| at.evidence.status).map(|status| format!("HTTP {status}")),
        record.map(|record| format!("record {}", safe(record))),
        error.map(|error| format!("error {}", cut(error))),
        reason.map(|reason| format!("reason: {}", cut(reason))),
    ]
    .into_iter()
    .flatten()
    .collect();
    // A dash after the time, not a comma: the time reads as one word of its own.
    let evidence = if evidence.is_empty() { String::new() } else { format!(" — {}", evidence.join(", ")) };
    vec![Line::from(vec![Span::styled("settled: ", theme.title()), Span::raw(format!("{how}{evidence}"))])]
}

/// Who made an audit entry: a person by name, a worker with the ownership version it acted under.
fn actor(entry: &AuditEntry) -> String {
    match entry.actor_kind {
        ActorKind::Worker => format!("{} (ownership {})", safe(&entry.actor), entry.ownership_version),
        ActorKind::Person => safe(&entry.actor),
        ActorKind::Source => format!("source {}", safe(&entry.actor)),
    }
}

/// Every attempt, newest first, each with its own worker, claim, times, outcome, error and
/// evidence; long errors and bodies are cut to a few rows here and shown in full by `v`.
fn attempts<'a>(detail: &ActionDetail, theme: Theme, width: usize) -> Vec<Line<'a>> {
    let title = match detail.attempts.len() {
        0 => "attempts: none yet".to_owned(),
        1 => "attempts (1)".to_owned(),
        n => format!("attempts ({n}), newest first"),
    };
    let mut out = vec![Line::raw(""), section(&title, theme)];
    for at in detail.attempts.iter().rev() {
        out.push(Line::raw(format!(
            "  #{} by {} under ownership version {}  started {}  ended {}  outcome {}{}",
            at.number,
            safe(&at.worker),
            at.ownership_version,
            time(at.started_at),
            at.ended_at.map_or("-".to_owned(), time),
            at.outcome.map_or("in flight", |o| o.as_str()),
            if at.stale { "  STALE: late result, changed nothing" } else { "" }
        )));
        if let Some(error) = &at.error {
            out.push(Line::raw(format!("    error {}", fit(&safe(error), width.saturating_mul(3).saturating_sub(10)))));
        }
        let ev = &at.evidence;
        if ev.status.is_some() || ev.destination_id.is_some() || ev.body.is_some() {
            let head = format!(
                "    status {}  destination id {}",
                ev.status.map_or("-".to_owned(), |s| s.to_string()),
                safe(ev.destination_id.as_deref().unwrap_or("-"))
            );
            let body = ev.body.as_deref().map_or(String::new(), |body| {
                format!("  body {}", fit(&safe(body), width.saturating_sub(head.chars().count() + 7).max(20)))
            });
            out.push(Line::raw(format!("{head}{body}")));
        }
    }
    out
}

fn evidence<'a>(model: &Model, detail: &ActionDetail, theme: Theme, width: usize) -> Vec<Line<'a>> {
    let a = &detail.action;
    let now = model.now.unwrap_or(a.updated_at);
    let mut out = vec![Line::raw(""), section("destination evidence", theme)];
    out.push(Line::raw(format!(
        "  destination id {}  idempotency key {}",
        safe(a.destination_id.as_deref().unwrap_or("-")),
        safe(a.key.as_str())
    )));
    let retention = a.destination.as_ref().and_then(|d| model.retention.get(d));
    let window = match (a.first_sent_at, retention) {
        (Some(first), Some(retention)) => {
            let closes = first + chrono::Duration::from_std(*retention).unwrap_or_default();
            let when = if closes > now { format!("in {}", short_duration(closes - now)) } else { "CLOSED".to_owned() };
            format!("  first sent {}  retention window closes {} ({when})", time(first), time(closes))
        }
        (Some(first), None) if a.destination.as_ref().is_some_and(|d| model.configured.contains(d)) => format!(
            "  first sent {}  (no idempotency key at {}: no retention window)",
            time(first),
            safe(a.destination.as_deref().unwrap_or("-"))
        ),
        (Some(first), None) => format!("  first sent {}  (retention unknown: start review with --config)", time(first)),
        (None, _) => "  not sent yet".to_owned(),
    };
    out.push(Line::raw(window));
    if let Some(at) = detail.attempts.iter().rev().find(|at| at.evidence.status.is_some() || at.evidence.body.is_some())
    {
        out.push(Line::raw(format!(
            "  response {} {}",
            at.evidence.status.map_or("-".to_owned(), |s| s.to_string()),
            fit(&safe(at.evidence.body.as_deref().unwrap_or("")), width.saturating_sub(16))
        )));
    }
    for lookup in detail.lookups.iter().rev().take(3) {
        out.push(Line::raw(format!(
            "  lookup {} by {}: {} ({} records{}) {}",
            time(lookup.at),
            safe(&lookup.actor),
            lookup.verdict.as_str(),
            lookup.records,
            lookup.destination_id.as_deref().map(|id| format!(", id {}", safe(id))).unwrap_or_default(),
            safe(lookup.detail.as_deref().unwrap_or(""))
        )));
    }

    out
}

fn audit<'a>(detail: &ActionDetail, theme: Theme) -> Vec<Line<'a>> {
    let mut out = vec![Line::raw(""), section(&format!("audit trail ({})", detail.audit.len()), theme)];
    for e in detail.audit.iter().rev() {
        out.push(Line::raw(format!(
            "  {}  {:<20} {} -> {}  by {} {}{}",
            time(e.at),
            e.event.as_str(),
            e.from_state.map_or("(new)", |s| s.as_str()),
            e.to_state,
            e.actor_kind.as_str(),
            safe(&e.actor),
            e.reason.as_deref().map(|r| format!(": {}", safe(r))).unwrap_or_default()
        )));
    }
    out
}
