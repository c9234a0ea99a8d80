//! The header: which ledger, who is reviewing, a count per state, stale claims and whether the
//! ledger answers; then the tabs.

use super::{Theme, fit, short_duration};
use crate::console::model::{Away, Model, Pane};
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
    if let Some(away) = &model.connection.away {
        frame.render_widget(Paragraph::new(vec![first, unreachable(model, away, theme, width)]), area);
        return;
    }
    // The tabs below carry the counts of the states under review; this line the rest.
    let stale = if model.stale_claims > 0 {
        Span::styled(format!("STALE CLAIMS {}", model.stale_claims), theme.warn())
    } else {
        Span::styled("stale claims 0".to_owned(), theme.ok())
    };
    let total: i64 = model.counts.iter().map(|(_, n)| n).sum();
    let filtered = model.filter.as_ref().map(|_| "  (filtered)").unwrap_or_default();
    // From the longest to the shortest: the completed actions have their tab, and "(filtered)"
    // is the last to go, since every count on the screen depends on it.
    let counts = [
        format!(
            "  completed {}  cancelled {}  all actions {total}{filtered}",
            count(model, State::Completed),
            count(model, State::Cancelled),
        ),
        format!("  cancelled {}  all actions {total}{filtered}", count(model, State::Cancelled)),
        format!("  all actions {total}{filtered}"),
    ];
    // The connection, at the end of the line: in full where it fits, else shorter, else the
    // counts give way to it, shorter and then cut.
    let words = connected(model);
    let fits = |rest: &String, answering: &String| {
        stale.width() + rest.chars().count() + 2 + answering.chars().count() <= width
    };
    let (rest, answering) = counts
        .iter()
        .flat_map(|rest| words.iter().map(move |answering| (rest, answering)))
        .find(|(rest, answering)| fits(rest, answering))
        .map_or_else(
            || {
                let answering = words.last().cloned().unwrap_or_default();
                let room = width.saturating_sub(stale.width() + 2 + answering.chars().count());
                (fit(&counts[counts.len() - 1], room), answering)
            },
            |(rest, answering)| (rest.clone(), answering.clone()),
        );
    let gap = " ".repeat(width.saturating_sub(stale.width() + rest.chars().count() + answering.chars().count()).max(2));
    let second = Line::from(vec![stale, Span::raw(rest), Span::raw(gap), Span::styled(answering, theme.dim())]);
    frame.render_widget(Paragraph::new(vec![first, second]), area);
}

/// The ledger answers: how long ago rows last came, in words from the longest to the shortest.
fn connected(model: &Model) -> Vec<String> {
    match (model.connection.refreshed, model.clock) {
        (None, _) => vec!["connecting…".to_owned()],
        (Some(refreshed), Some(now)) => {
            let ago = short_duration(now - refreshed);
            vec![format!("connected, refreshed {ago} ago"), format!("refreshed {ago} ago")]
        }
        (Some(_), None) => vec!["connected".to_owned()],
    }
}

/// The ledger cannot be reached: the whole line says so, and how old the rows shown are.
fn unreachable(model: &Model, away: &Away, theme: Theme, width: usize) -> Line<'static> {
    let rows = match (model.connection.refreshed, model.clock) {
        (Some(refreshed), Some(now)) => format!("rows shown are {} old", short_duration(now - refreshed)),
        (Some(_), None) => "rows shown are from before".to_owned(),
        (None, _) => "nothing loaded yet".to_owned(),
    };
    let text = format!("DATABASE UNREACHABLE{}, retrying; {rows}", away.since_text());
    Line::from(Span::styled(fit(&text, width), theme.error()))
}

/// How much of each tab fits: the first of these that fits the terminal's width is drawn, so
/// that every tab keeps its digit however narrow the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TabStyle {
    /// `1 pending 12`, with room around each tab.
    Wide,
    /// `1 pending 12`.
    Full,
    /// `1 pending 12k`: counts abbreviated.
    Abbreviated,
    /// `1 pend 12k`: short names but the current tab's, and no count where it is 0.
    Short,
    /// `1pend 12k`: as short, the digit against the name.
    Tight,
    /// `1:12k`: the digit and the count; the current tab keeps its name.
    Digits,
}

/// A pane's name in four letters or fewer, for a narrow terminal.
fn short_title(pane: Pane) -> &'static str {
    match pane {
        Pane::Pending => "pend",
        Pane::InProgress => "prog",
        Pane::Unknown => "unkn",
        Pane::Conflict => "conf",
        Pane::Failed => "fail",
        Pane::Held => "held",
        Pane::Refused => "refu",
        Pane::LateResults => "late",
        Pane::Completed => "done",
        Pane::Cancelled => "canc",
        Pane::All => "all",
    }
}

/// A count in at most four characters: 999, 1.2k, 12k, 123k, 1.2M, 12M.
pub fn abbreviated(n: i64) -> String {
    let scaled = |unit: i64, suffix: &str| {
        let tenths = n * 10 / unit;
        if tenths < 100 { format!("{}.{}{suffix}", tenths / 10, tenths % 10) } else { format!("{}{suffix}", n / unit) }
    };
    if n < 1000 {
        n.to_string()
    } else if n < 1_000_000 {
        scaled(1000, "k")
    } else {
        scaled(1_000_000, "M")
    }
}

/// Each tab's pane and count, in order: the history panes share the ninth tab, which shows
/// the one chosen last.
fn tabs(model: &Model) -> Vec<(Pane, i64, Option<i64>)> {
    Pane::ALL
        .into_iter()
        .filter(|p| !p.is_history() || *p == model.history)
        .map(|pane| {
            let (total, more) = match pane.state() {
                // The conflict pane also lists proposals waiting on actions in other states.
                Some(State::Conflict) if model.proposed_elsewhere > 0 => {
                    (count(model, State::Conflict), Some(model.proposed_elsewhere))
                }
                Some(state) => (count(model, state), None),
                None if pane == Pane::LateResults => (model.late_results, None),
                None if pane == Pane::All => (model.counts.iter().map(|(_, n)| n).sum::<i64>(), None),
                None => (model.refused, None),
            };
            (pane, total, more)
        })
        .collect()
}

/// The tabs' texts in a style: each tab's label, and whether it is the current one.
fn labels(model: &Model, style: TabStyle) -> Vec<(Pane, String)> {
    tabs(model)
        .into_iter()
        .enumerate()
        .map(|(n, (pane, total, more))| {
            let number =
                |n: i64| if matches!(style, TabStyle::Wide | TabStyle::Full) { n.to_string() } else { abbreviated(n) };
            let count = match more {
                Some(more) => format!("{}+{}", number(total), number(more)),
                None => number(total),
            };
            let digit = n + 1;
            let label = match style {
                TabStyle::Digits if pane != model.pane => format!("{digit}:{count}"),
                // A pane with nothing in it needs no count when room is short.
                TabStyle::Short if pane != model.pane && total == 0 && more.is_none() => {
                    format!("{digit} {}", short_title(pane))
                }
                TabStyle::Short if pane != model.pane => format!("{digit} {} {count}", short_title(pane)),
                TabStyle::Tight if pane != model.pane && total == 0 && more.is_none() => {
                    format!("{digit}{}", short_title(pane))
                }
                TabStyle::Tight if pane != model.pane => format!("{digit}{} {count}", short_title(pane)),
                _ => format!("{digit} {} {count}", pane.title()),
            };
            (pane, label)
        })
        .collect()
}

/// The tabs' line in a style: the current tab in brackets, the others after a space (two
/// spaces around each in the wide style).
fn spans(model: &Model, theme: Theme, style: TabStyle) -> Vec<Span<'static>> {
    labels(model, style)
        .into_iter()
        .map(|(pane, label)| {
            let wide = style == TabStyle::Wide;
            if pane == model.pane {
                Span::styled(format!("[{label}]"), theme.selected())
            } else {
                let text = if wide { format!(" {label} ") } else { format!(" {label}") };
                if pane == Pane::LateResults && model.late_results > 0 {
                    Span::styled(text, theme.warn())
                } else {
                    Span::raw(text)
                }
            }
        })
        .collect()
}

pub fn draw_tabs(model: &Model, theme: Theme, frame: &mut Frame<'_>, area: Rect) {
    let width = usize::from(area.width);
    let styles =
        [TabStyle::Wide, TabStyle::Full, TabStyle::Abbreviated, TabStyle::Short, TabStyle::Tight, TabStyle::Digits];
    let fits = |style: &TabStyle| spans(model, Theme::PLAIN, *style).iter().map(Span::width).sum::<usize>() <= width;
    // The wide style only where it always did (100 columns and more), so wide screens stay as
    // they were.
    let style =
        styles.into_iter().filter(|s| *s != TabStyle::Wide || area.width >= 100).find(fits).unwrap_or(TabStyle::Digits);
    frame.render_widget(Paragraph::new(Line::from(spans(model, theme, style))), area);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Person;
    use ratatui::backend::TestBackend;

    /// The tabs' line drawn at `width` for a big ledger.
    fn tab_line(pane: Pane, width: u16) -> String {
        let mut model = Model::new("x", Person::parse("ana").unwrap(), width, 24);
        model.counts = vec![
            (State::Pending, 12_345),
            (State::InProgress, 250),
            (State::Unknown, 3),
            (State::Conflict, 17),
            (State::Failed, 1_204),
            (State::Held, 0),
            (State::Completed, 1_234_567),
        ];
        model.proposed_elsewhere = 2;
        model.refused = 41;
        model.late_results = 5;
        model.pane = pane;
        let mut terminal = ratatui::Terminal::new(TestBackend::new(width, 1)).unwrap();
        terminal.draw(|frame| draw_tabs(&model, Theme::PLAIN, frame, frame.area())).unwrap();
        let buffer = terminal.backend().buffer().clone();
        (0..width).map(|x| buffer[(x, 0)].symbol().to_owned()).collect::<String>().trim_end().to_owned()
    }

    #[test]
    fn every_tab_keeps_its_digit_at_any_width_down_to_60_columns() {
        for width in [60, 80, 100, 120] {
            for pane in [Pane::Pending, Pane::Held, Pane::Completed] {
                let line = tab_line(pane, width);
                assert!(line.chars().count() <= usize::from(width), "{width}: {line}");
                let mut from = 0;
                for digit in 1..=9 {
                    let at = line[from..].find(&digit.to_string()).map(|i| i + from);
                    assert!(at.is_some(), "tab {digit} at {width} columns: {line}");
                    from = at.unwrap_or(from) + 1;
                }
                assert!(line.contains(&format!("[{} ", pane.index().min(8) + 1)), "the current tab: {line}");
                assert!(line.contains(pane.title()), "the current tab is named in full: {line}");
            }
        }
        assert_eq!(
            tab_line(Pane::Unknown, 80),
            " 1:12k 2:250[3 unknown 3] 4:17+2 5:1.2k 6:0 7:41 8:5 9:1.2M",
            "80 columns: the digits and counts"
        );
        assert_eq!(
            tab_line(Pane::Unknown, 120),
            " 1 pend 12k 2 prog 250[3 unknown 3] 4 conf 17+2 5 fail 1.2k 6 held 7 refu 41 8 late 5 9 done 1.2M",
            "120 columns: short names, counts abbreviated"
        );
    }

    /// The header's second line, drawn at `width`.
    fn state_line(model: &Model, width: u16) -> String {
        let mut terminal = ratatui::Terminal::new(TestBackend::new(width, 2)).unwrap();
        terminal.draw(|frame| draw(model, Theme::PLAIN, frame, frame.area())).unwrap();
        let buffer = terminal.backend().buffer().clone();
        (0..width).map(|x| buffer[(x, 1)].symbol().to_owned()).collect::<String>().trim_end().to_owned()
    }

    /// 14:02 and `seconds`, by the host's clock.
    fn at(seconds: u32) -> crate::domain::Timestamp {
        chrono::TimeZone::with_ymd_and_hms(&chrono::Utc, 2024, 5, 1, 14, 2, seconds).unwrap()
    }

    /// A refresh asked for at `now`, answered with no rows or not at all.
    fn refresh_at(model: &mut Model, now: crate::domain::Timestamp, reached: bool) {
        use crate::console::model::{Done, Effect, Msg, Rows, Snapshot, update};
        model.clock = Some(now);
        let Some(Effect::Load(request)) = update(model, Msg::Tick).pop() else { panic!("a refresh") };
        let done = if reached {
            let snapshot = Snapshot {
                counts: None,
                now,
                rows: Rows::Actions(Vec::new()),
                blocked: std::collections::BTreeMap::new(),
            };
            Done::Loaded { request, result: Ok(snapshot) }
        } else {
            Done::Unreachable { request, message: "no answer from the ledger within 2s".into() }
        };
        update(model, Msg::Done(done));
    }

    #[test]
    fn the_header_says_whether_the_ledger_answers() {
        let mut model = Model::new("x", Person::parse("ana").unwrap(), 80, 24);
        let counts = "stale claims 0  completed 0  cancelled 0  all actions 0";
        assert_eq!(state_line(&model, 80), format!("{counts}{}connecting…", " ".repeat(14)));
        refresh_at(&mut model, at(5), true);
        model.clock = Some(at(8));
        assert_eq!(state_line(&model, 80), format!("{counts}{}refreshed 3s ago", " ".repeat(9)));
        assert_eq!(state_line(&model, 100), format!("{counts}{}connected, refreshed 3s ago", " ".repeat(18)));
        model.counts = vec![(State::Completed, 1_234_567), (State::Cancelled, 12_345)];
        let line = state_line(&model, 80);
        assert!(line.ends_with("  refreshed 3s ago") && !line.contains("completed"), "the counts give way: {line}");
        model.filter = Some(crate::console::model::FilterTerms::default());
        let line = state_line(&model, 80);
        assert!(line.contains("all actions 1246912  (filtered)"), "the filter's mark is kept: {line}");
        model.filter = None;

        refresh_at(&mut model, at(11), false);
        model.clock = Some(at(14));
        let line = state_line(&model, 80);
        assert_eq!(line, "DATABASE UNREACHABLE since 14:02:11 UTC, retrying; rows shown are 9s old");
        refresh_at(&mut model, at(16), true);
        assert!(state_line(&model, 100).ends_with("  connected, refreshed 0s ago"), "cleared by itself");
    }

    #[test]
    fn counts_fit_in_four_characters() {
        let cases = [(0, "0"), (999, "999"), (1000, "1.0k"), (1234, "1.2k"), (12_345, "12k"), (999_999, "999k")];
        for (n, text) in cases {
            assert_eq!(abbreviated(n), text);
        }
        assert_eq!(abbreviated(1_234_567), "1.2M");
        assert_eq!(abbreviated(12_345_678), "12M");
    }
}
