//! Key bindings: which key does what, in one table that input handling, the footer and the help
//! screen all read; and the key names scripted sessions use.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde::{Deserialize, Serialize};

/// A command on the selected action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandKind {
    Retry,
    ResolveCompleted,
    ResolveNotWritten,
    Cancel,
    Approve,
    Reject,
    Takeover,
    Lookup,
    Assign,
    Acknowledge,
}

impl CommandKind {
    /// Whether the command applies to a set of marked actions with one reason: all but those
    /// that need one action's answer (a destination id) or one action's destination (a lookup).
    /// A bulk approval takes each action's only waiting proposal; where several wait, the ledger
    /// refuses it and the person opens that action to choose.
    pub fn applies_to_marks(self) -> bool {
        matches!(
            self,
            Self::Retry
                | Self::Cancel
                | Self::Takeover
                | Self::ResolveNotWritten
                | Self::Assign
                | Self::Approve
                | Self::Reject
                | Self::Acknowledge
        )
    }

    pub const ALL: [Self; 10] = [
        Self::Retry,
        Self::ResolveCompleted,
        Self::ResolveNotWritten,
        Self::Cancel,
        Self::Approve,
        Self::Reject,
        Self::Takeover,
        Self::Lookup,
        Self::Assign,
        Self::Acknowledge,
    ];

    /// The shortest name, for the footer of a narrow terminal.
    pub fn short_label(self) -> &'static str {
        match self {
            Self::ResolveCompleted => "completed",
            Self::ResolveNotWritten => "not-written",
            Self::Takeover => "takeover",
            Self::Lookup => "lookup",
            Self::Assign => "mine",
            Self::Acknowledge => "ack",
            other => other.label(),
        }
    }

    /// The name dialogs and messages use.
    pub fn label(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::ResolveCompleted => "completed",
            Self::ResolveNotWritten => "not written",
            Self::Cancel => "cancel",
            Self::Approve => "approve",
            Self::Reject => "reject",
            Self::Takeover => "take over",
            Self::Lookup => "look up",
            Self::Assign => "assign to me",
            Self::Acknowledge => "acknowledge",
        }
    }
}

/// What a key asks for. Serializable so bindings can be listed and scripted by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "action", content = "arg")]
pub enum Action {
    SelectPane(usize),
    /// The next history pane: completed, cancelled, all.
    NextHistory,
    /// Newest first, oldest first or most attempts first.
    Sort,
    NextPane,
    PreviousPane,
    Down,
    Up,
    PageDown,
    PageUp,
    Top,
    Bottom,
    Open,
    Back,
    Filter,
    /// Every value of the open action in full: payloads, each attempt's error and response body,
    /// each lookup's answer, the last error.
    Values,
    /// Show the next of the proposals waiting on the open action: approve and reject act on the
    /// one shown.
    NextProposal,
    Help,
    Quit,
    /// Give the terminal back to the shell until `fg` brings the console back.
    Suspend,
    /// Mark or unmark the selected action for a bulk command.
    Mark,
    /// Mark every action that matches the pane and the filter.
    MarkAll,
    /// Clear every mark.
    ClearMarks,
    /// Copy the selected action's key to the clipboard.
    CopyKey,
    /// Copy the selected action's destination id to the clipboard.
    CopyDestinationId,
    Command(CommandKind),
    /// Open the search line of the open detail.
    Search,
    /// Show the next match of the detail's search, round to the first.
    NextMatch,
    /// Show the previous match of the detail's search, round to the last.
    PreviousMatch,
}

/// A key as a binding lists it. An event is this key when it has the same code and has Ctrl
/// exactly when the key does; Shift and Alt are not compared (terminals send Shift-Tab as
/// `BackTab`, and `G` or `?` with or without Shift).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub code: KeyCode,
    pub ctrl: bool,
}

impl Key {
    const fn plain(code: KeyCode) -> Self {
        Self { code, ctrl: false }
    }

    const fn char(c: char) -> Self {
        Self::plain(KeyCode::Char(c))
    }

    const fn ctrl(c: char) -> Self {
        Self { code: KeyCode::Char(c), ctrl: true }
    }

    pub fn matches(self, event: KeyEvent) -> bool {
        event.code == self.code && event.modifiers.contains(KeyModifiers::CONTROL) == self.ctrl
    }
}

/// One line of the help screen: the keys, what each of them does, and the line's text.
#[derive(Debug)]
pub struct Binding {
    /// The keys as the help screen names them.
    pub keys: &'static str,
    /// Each key the line names, with its action: the only place a key gets its meaning.
    pub actions: &'static [(Key, Action)],
    pub help: &'static str,
}

/// Every binding, in the order the help screen lists them.
pub const BINDINGS: &[Binding] = &[
    Binding {
        keys: "1-9",
        actions: &[
            (Key::char('1'), Action::SelectPane(0)),
            (Key::char('2'), Action::SelectPane(1)),
            (Key::char('3'), Action::SelectPane(2)),
            (Key::char('4'), Action::SelectPane(3)),
            (Key::char('5'), Action::SelectPane(4)),
            (Key::char('6'), Action::SelectPane(5)),
            (Key::char('7'), Action::SelectPane(6)),
            (Key::char('8'), Action::SelectPane(7)),
            (Key::char('9'), Action::SelectPane(8)),
        ],
        help: "show a pane (the tabs, left to right; 9 is history)",
    },
    Binding {
        keys: "s",
        actions: &[(Key::char('s'), Action::Sort)],
        help: "sort: newest first / oldest first / most attempts first",
    },
    Binding {
        keys: "h",
        actions: &[(Key::char('h'), Action::NextHistory)],
        help: "history: completed, then cancelled, then all actions",
    },
    Binding {
        keys: "Tab / Shift-Tab",
        actions: &[(Key::plain(KeyCode::Tab), Action::NextPane), (Key::plain(KeyCode::BackTab), Action::PreviousPane)],
        help: "next / previous pane",
    },
    Binding {
        keys: "j k / Down Up",
        actions: &[
            (Key::char('j'), Action::Down),
            (Key::char('k'), Action::Up),
            (Key::plain(KeyCode::Down), Action::Down),
            (Key::plain(KeyCode::Up), Action::Up),
        ],
        help: "move the selection; in a detail, scroll a line",
    },
    Binding {
        keys: "PageDown PageUp",
        actions: &[(Key::plain(KeyCode::PageDown), Action::PageDown), (Key::plain(KeyCode::PageUp), Action::PageUp)],
        help: "move a page; in a detail, scroll a page",
    },
    Binding {
        keys: "g G / Home End",
        actions: &[
            (Key::char('g'), Action::Top),
            (Key::char('G'), Action::Bottom),
            (Key::plain(KeyCode::Home), Action::Top),
            (Key::plain(KeyCode::End), Action::Bottom),
        ],
        help: "first / last in the order shown; in a detail, top / end",
    },
    Binding {
        keys: "Enter",
        actions: &[(Key::plain(KeyCode::Enter), Action::Open)],
        help: "open the selected action (or refused submission) in full",
    },
    Binding {
        keys: "v",
        actions: &[(Key::char('v'), Action::Values)],
        help: "every value in full: payloads, errors, bodies, lookups",
    },
    Binding { keys: "Esc", actions: &[(Key::plain(KeyCode::Esc), Action::Back)], help: "back, or cancel a dialog" },
    Binding {
        keys: "/",
        actions: &[(Key::char('/'), Action::Filter)],
        help: "filter: key text, dest:NAME, mine, age:30m (Enter applies)",
    },
    Binding {
        keys: "Space / * / u",
        actions: &[
            (Key::char(' '), Action::Mark),
            (Key::char('*'), Action::MarkAll),
            (Key::char('u'), Action::ClearMarks),
        ],
        help: "mark one / all matching / none; r x t n o a d e act on them",
    },
    Binding {
        keys: "r",
        actions: &[(Key::char('r'), Action::Command(CommandKind::Retry))],
        help: "retry under the same key",
    },
    Binding {
        keys: "c",
        actions: &[(Key::char('c'), Action::Command(CommandKind::ResolveCompleted))],
        help: "resolve as completed: the destination has it",
    },
    Binding {
        keys: "n",
        actions: &[(Key::char('n'), Action::Command(CommandKind::ResolveNotWritten))],
        help: "resolve as not written: runs again, same key",
    },
    Binding {
        keys: "x",
        actions: &[(Key::char('x'), Action::Command(CommandKind::Cancel))],
        help: "cancel: the action must not happen",
    },
    Binding {
        keys: "a",
        actions: &[(Key::char('a'), Action::Command(CommandKind::Approve))],
        help: "approve the proposed payload of a conflict",
    },
    Binding {
        keys: "d",
        actions: &[(Key::char('d'), Action::Command(CommandKind::Reject))],
        help: "reject the proposed payload, keep the approved",
    },
    Binding {
        keys: "p",
        actions: &[(Key::char('p'), Action::NextProposal)],
        help: "next proposal waiting; a and d act on the one shown",
    },
    Binding {
        keys: "t",
        actions: &[(Key::char('t'), Action::Command(CommandKind::Takeover))],
        help: "take over a stale claim (its lease expired)",
    },
    Binding {
        keys: "l",
        actions: &[(Key::char('l'), Action::Command(CommandKind::Lookup))],
        help: "look it up at its destination now",
    },
    Binding {
        keys: "o",
        actions: &[(Key::char('o'), Action::Command(CommandKind::Assign))],
        help: "assign the action to me",
    },
    Binding {
        keys: "e",
        actions: &[(Key::char('e'), Action::Command(CommandKind::Acknowledge))],
        help: "acknowledge its late results (evidence seen)",
    },
    Binding {
        keys: "y / Y",
        actions: &[(Key::char('y'), Action::CopyKey), (Key::char('Y'), Action::CopyDestinationId)],
        help: "copy the key / the destination id to the clipboard",
    },
    Binding { keys: "?", actions: &[(Key::char('?'), Action::Help)], help: "this help" },
    Binding {
        keys: "q / Ctrl-C",
        actions: &[(Key::char('q'), Action::Quit), (Key::ctrl('c'), Action::Quit)],
        help: "quit",
    },
    Binding {
        keys: "Ctrl-Z",
        actions: &[(Key::ctrl('z'), Action::Suspend)],
        help: "suspend: back to the shell; fg brings the console back",
    },
];

/// Keys an open detail reads before [`BINDINGS`]: there `/` searches the detail rather than
/// filter the list.
pub const DETAIL_BINDINGS: &[Binding] = &[Binding {
    keys: "/",
    actions: &[(Key::char('/'), Action::Search)],
    help: "search the detail, any case (Enter: the first match)",
}];

/// Keys an open detail reads first while a search is applied: `n` moves to the next match (and
/// resolves as not written again once `Esc` has ended the search).
pub const FOUND_BINDINGS: &[Binding] = &[Binding {
    keys: "n / N",
    actions: &[(Key::char('n'), Action::NextMatch), (Key::char('N'), Action::PreviousMatch)],
    help: "next / previous match (Esc ends the search)",
}];

/// Each table of bindings with where it applies, in the order the help screen lists them; in an
/// open detail the later tables are read first.
pub const BINDING_TABLES: [(&str, &[Binding]); 3] = [
    ("in the list, and in an open detail unless listed below", BINDINGS),
    ("in an open detail", DETAIL_BINDINGS),
    ("in an open detail, while a search is applied", FOUND_BINDINGS),
];

/// The key of a command, for the footer.
pub fn command_key(kind: CommandKind) -> &'static str {
    action_key(Action::Command(kind))
}

/// The keys bound to an action, as the help lists them.
pub fn action_key(wanted: Action) -> &'static str {
    BINDINGS.iter().find(|b| b.actions.iter().any(|&(_, action)| action == wanted)).map_or("?", |b| b.keys)
}

/// What a key means while browsing (not while typing into a field): the action the first binding
/// that lists the key gives it.
pub fn browse_action(event: KeyEvent) -> Option<Action> {
    BINDINGS.iter().flat_map(|b| b.actions).find(|(key, _)| key.matches(event)).map(|&(_, action)| action)
}

/// What a key means in an open detail (not while typing into a field): what the detail's own
/// bindings give it (those of a search while `searching`), else what it means while browsing.
pub fn detail_action(event: KeyEvent, searching: bool) -> Option<Action> {
    let first = |table: &[Binding]| {
        table.iter().flat_map(|b| b.actions).find(|(key, _)| key.matches(event)).map(|&(_, action)| action)
    };
    searching
        .then(|| first(FOUND_BINDINGS))
        .flatten()
        .or_else(|| first(DETAIL_BINDINGS))
        .or_else(|| browse_action(event))
}

/// Why a script cannot run: found before any key is pressed, so a bad script changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// A `<` with no `>` after it on the same line.
    #[error("script line {line}: `<{rest}` is not closed with `>` (type `<lt>` for a literal `<`)")]
    Unterminated { line: usize, rest: String },
    /// A `<Name>` that names no key.
    #[error(
        "script line {line}: unknown key <{name}>; use Enter, Esc, Tab, BackTab, Up, Down, Left, Right, PageDown, \
         PageUp, Home, End, Backspace, Space, lt (for <), # (for #), or C-x for Ctrl with a letter (any case)"
    )]
    UnknownKey { line: usize, name: String },
}

/// A script that cannot run is the user's input: a usage error.
impl From<ScriptError> for crate::Error {
    fn from(error: ScriptError) -> Self {
        crate::error::FrontendError::new(crate::error::Kind::Usage, error).into()
    }
}

/// One line of a script that presses keys, with its number in the file (from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptLine {
    pub number: usize,
    pub text: String,
    pub keys: Vec<KeyEvent>,
}

/// Parses a whole script: each line is literal text typed character by character, with `<Name>`
/// for a named key anywhere in it (`<lt>` types `<`, `<#>` types `#`). A line starting with `#`
/// is a comment and an empty line is skipped. Any error names its line, and the whole script is
/// read before a key is pressed.
pub fn parse_script(script: &str) -> Result<Vec<ScriptLine>, ScriptError> {
    let mut lines = Vec::new();
    for (index, line) in script.lines().enumerate() {
        let number = index + 1;
        let text = line.trim_end_matches(['\r', '\n']);
        // A comment may be indented like the lines around it; `<#>` types a `#`.
        if text.trim().is_empty() || text.trim_start().starts_with('#') {
            continue;
        }
        let keys = parse_line(text, number)?;
        lines.push(ScriptLine { number, text: text.to_owned(), keys });
    }
    Ok(lines)
}

/// Parses one line of a script (see [`parse_script`]); a comment or empty line presses nothing.
pub fn parse_script_line(line: &str) -> Result<Vec<KeyEvent>, ScriptError> {
    Ok(parse_script(line)?.pop().map(|l| l.keys).unwrap_or_default())
}

fn parse_line(text: &str, line: usize) -> Result<Vec<KeyEvent>, ScriptError> {
    let mut keys = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '<' {
            let after = &rest[1..];
            let Some(end) = after.find('>') else {
                return Err(ScriptError::Unterminated { line, rest: after.to_owned() });
            };
            let name = &after[..end];
            keys.push(named_key(name).ok_or_else(|| ScriptError::UnknownKey { line, name: name.to_owned() })?);
            rest = &after[end + 1..];
        } else {
            keys.push(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
            rest = &rest[c.len_utf8()..];
        }
    }
    Ok(keys)
}

/// The key a `<Name>` stands for; names are case-insensitive.
fn named_key(name: &str) -> Option<KeyEvent> {
    let plain = |code| Some(KeyEvent::new(code, KeyModifiers::NONE));
    let lower = name.to_ascii_lowercase();
    if let Some(letter) = lower.strip_prefix("c-") {
        let mut chars = letter.chars();
        if let (Some(c), None) = (chars.next(), chars.next())
            && c.is_ascii_alphabetic()
        {
            return Some(KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL));
        }
    }
    match lower.as_str() {
        "enter" => plain(KeyCode::Enter),
        "esc" => plain(KeyCode::Esc),
        "tab" => plain(KeyCode::Tab),
        "backtab" | "s-tab" => Some(KeyEvent::new(KeyCode::BackTab, KeyModifiers::SHIFT)),
        "up" => plain(KeyCode::Up),
        "down" => plain(KeyCode::Down),
        "left" => plain(KeyCode::Left),
        "right" => plain(KeyCode::Right),
        "pagedown" => plain(KeyCode::PageDown),
        "pageup" => plain(KeyCode::PageUp),
        "home" => plain(KeyCode::Home),
        "end" => plain(KeyCode::End),
        "backspace" => plain(KeyCode::Backspace),
        "space" => plain(KeyCode::Char(' ')),
        "lt" => plain(KeyCode::Char('<')),
        "#" => plain(KeyCode::Char('#')),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn script_lines() {
        let enter = KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE);
        assert_eq!(parse_script_line("<Enter>").unwrap(), vec![enter]);
        assert_eq!(parse_script_line("<enter>").unwrap(), vec![enter], "names are case-insensitive");
        assert_eq!(parse_script_line("<ENTER>").unwrap(), vec![enter]);
        assert_eq!(parse_script_line("<C-c>").unwrap()[0].modifiers, KeyModifiers::CONTROL);
        assert_eq!(parse_script_line("<c-C>").unwrap()[0].code, KeyCode::Char('c'));
        assert_eq!(parse_script_line("ok<Enter>").unwrap(), vec![char_key('o'), char_key('k'), enter]);
        assert_eq!(parse_script_line("<lt>x>").unwrap(), vec![char_key('<'), char_key('x'), char_key('>')]);
        assert_eq!(parse_script_line("<#> 1").unwrap(), vec![char_key('#'), char_key(' '), char_key('1')]);
        assert!(parse_script_line("").unwrap().is_empty());
        assert!(parse_script_line("# a comment <Enter").unwrap().is_empty(), "a comment is never parsed");
        assert!(parse_script_line("    # indented like the lines around it").unwrap().is_empty());
        assert!(parse_script_line("   ").unwrap().is_empty(), "a line of blanks presses nothing");
    }

    fn char_key(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
    }

    #[test]
    fn a_bad_script_names_its_line_and_nothing_of_it_is_kept() {
        let script = "# retry\n5\n\nr\nreason<Enter\ny\n";
        assert_eq!(parse_script(script).unwrap_err(), ScriptError::Unterminated { line: 5, rest: "Enter".into() });
        let error = parse_script("1\n<Bogus>\n").unwrap_err();
        assert_eq!(error, ScriptError::UnknownKey { line: 2, name: "Bogus".into() });
        assert!(error.to_string().starts_with("script line 2: unknown key <Bogus>"), "{error}");
        let lines = parse_script("# comment\n\n3\n<Enter>\n").unwrap();
        let numbers: Vec<usize> = lines.iter().map(|l| l.number).collect();
        assert_eq!(numbers, [3, 4], "comments and empty lines press nothing, and lines keep their numbers");
    }

    #[test]
    fn help_lines_fit_an_80_column_terminal() {
        for binding in BINDING_TABLES.iter().flat_map(|(_, table)| table.iter()) {
            assert!(16 + binding.help.len() <= 76, "{}", binding.help);
        }
    }

    #[test]
    fn every_command_has_a_key_and_a_help_line() {
        for kind in CommandKind::ALL {
            assert_ne!(command_key(kind), "?", "{kind:?}");
        }
    }

    /// The name a binding's `keys` gives a key.
    fn name(key: Key) -> String {
        let base = match key.code {
            KeyCode::Char(c) if key.ctrl => c.to_ascii_uppercase().to_string(),
            KeyCode::Char(' ') => "Space".to_owned(),
            KeyCode::Char(c) => c.to_string(),
            KeyCode::BackTab => "Shift-Tab".to_owned(),
            code => format!("{code:?}"),
        };
        if key.ctrl { format!("Ctrl-{base}") } else { base }
    }

    /// The keys a help line names: words, `a-b` for a range of characters, and a lone `/`
    /// separating alternatives where the line names more than one key.
    fn named(keys: &str) -> BTreeSet<String> {
        let words: Vec<&str> = keys.split_whitespace().collect();
        let mut names = BTreeSet::new();
        for word in &words {
            match word.chars().collect::<Vec<_>>().as_slice() {
                ['/'] if words.len() > 1 => {}
                &[from, '-', to] => names.extend((from..=to).map(String::from)),
                _ => {
                    names.insert((*word).to_owned());
                }
            }
        }
        names
    }

    /// Every key code a terminal is likely to send, with and without each modifier.
    fn every_key_event() -> Vec<KeyEvent> {
        let mut codes: Vec<KeyCode> = (' '..='~').chain(['é', 'ß', '€']).map(KeyCode::Char).collect();
        codes.extend([
            KeyCode::Backspace,
            KeyCode::Enter,
            KeyCode::Left,
            KeyCode::Right,
            KeyCode::Up,
            KeyCode::Down,
            KeyCode::Home,
            KeyCode::End,
            KeyCode::PageUp,
            KeyCode::PageDown,
            KeyCode::Tab,
            KeyCode::BackTab,
            KeyCode::Delete,
            KeyCode::Insert,
            KeyCode::Esc,
            KeyCode::Null,
            KeyCode::Menu,
        ]);
        codes.extend((1..=12).map(KeyCode::F));
        let modifiers = [
            KeyModifiers::NONE,
            KeyModifiers::SHIFT,
            KeyModifiers::ALT,
            KeyModifiers::CONTROL,
            KeyModifiers::CONTROL | KeyModifiers::SHIFT,
            KeyModifiers::CONTROL | KeyModifiers::ALT,
            KeyModifiers::SHIFT | KeyModifiers::ALT,
        ];
        codes.iter().flat_map(|&code| modifiers.map(|m| KeyEvent::new(code, m))).collect()
    }

    #[test]
    fn every_listed_key_does_what_its_line_says() {
        for binding in BINDINGS {
            for &(key, action) in binding.actions {
                let ctrl = if key.ctrl { KeyModifiers::CONTROL } else { KeyModifiers::NONE };
                for modifiers in [ctrl, ctrl | KeyModifiers::SHIFT] {
                    assert_eq!(
                        browse_action(KeyEvent::new(key.code, modifiers)),
                        Some(action),
                        "{} ({modifiers:?}) on the help line {:?}",
                        name(key),
                        binding.keys
                    );
                }
            }
        }
    }

    #[test]
    fn a_detail_reads_its_own_keys_first() {
        for table in [DETAIL_BINDINGS, FOUND_BINDINGS] {
            for binding in table {
                for &(key, action) in binding.actions {
                    let event = KeyEvent::new(key.code, KeyModifiers::NONE);
                    assert_eq!(detail_action(event, true), Some(action), "{} while searching", name(key));
                }
            }
        }
        let key = |c| KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE);
        assert_eq!(browse_action(key('/')), Some(Action::Filter), "the list filters");
        assert_eq!(detail_action(key('/'), false), Some(Action::Search), "a detail searches");
        assert_eq!(detail_action(key('n'), true), Some(Action::NextMatch));
        assert_eq!(detail_action(key('N'), true), Some(Action::PreviousMatch));
        let not_written = Some(Action::Command(CommandKind::ResolveNotWritten));
        assert_eq!(detail_action(key('n'), false), not_written, "without a search n resolves as not written");
        assert_eq!(detail_action(key('N'), false), None);
        assert_eq!(detail_action(key('j'), true), Some(Action::Down), "the rest as while browsing");
    }

    #[test]
    fn each_help_line_names_exactly_the_keys_it_binds() {
        for binding in BINDING_TABLES.iter().flat_map(|(_, table)| table.iter()) {
            let bound: BTreeSet<String> = binding.actions.iter().map(|&(key, _)| name(key)).collect();
            assert_eq!(named(binding.keys), bound, "the help line {:?}", binding.keys);
        }
    }

    #[test]
    fn every_key_that_does_something_is_in_the_help() {
        for event in every_key_event() {
            let Some(action) = browse_action(event) else { continue };
            let listed = BINDINGS.iter().find_map(|b| {
                b.actions.iter().find(|&&(key, a)| key.matches(event) && a == action).map(|&(key, _)| (b, key))
            });
            let Some((binding, key)) = listed else { panic!("{event:?} does {action:?} but no help line lists it") };
            assert!(named(binding.keys).contains(&name(key)), "{event:?} is not named in {:?}", binding.keys);
        }
    }

    const KEYS_BEGIN: &str = "<!-- console keys: generated from BINDINGS in src/console/keys.rs (the help screen's \
                              lines); regenerate with ACTIONLEDGER_UPDATE_DOCS=1 cargo test --lib \
                              the_review_guide_lists_every_console_key -->";
    const KEYS_END: &str = "<!-- end of console keys -->";

    /// The help screen's lines as Markdown tables, one per place they apply.
    fn keys_markdown() -> String {
        let table = |(place, bindings): &(&str, &[Binding])| {
            let rows = bindings.iter().map(|binding| {
                let keys: Vec<String> = binding.keys.split(" / ").map(|k| format!("`{k}`")).collect();
                format!("| {} | {} |\n", keys.join(" / "), binding.help)
            });
            std::iter::once(format!("| keys {place} | what they do |\n|---|---|\n")).chain(rows).collect::<String>()
        };
        BINDING_TABLES.iter().map(table).collect::<Vec<_>>().join("\n")
    }

    /// The review owners' guide lists every console key with the help screen's own words: one
    /// source for both.
    #[test]
    fn the_review_guide_lists_every_console_key() {
        crate::domain::generated_section::check(
            "docs/review.md",
            KEYS_BEGIN,
            KEYS_END,
            &keys_markdown(),
            "ACTIONLEDGER_UPDATE_DOCS",
            "the console keys (BINDINGS in src/console/keys.rs)",
            "cargo test --lib the_review_guide_lists_every_console_key",
        );
    }

    #[test]
    fn actions_serialize_by_name() {
        let text = serde_json::to_string(&Action::Command(CommandKind::Retry)).unwrap();
        assert_eq!(text, r#"{"action":"command","arg":"retry"}"#);
    }
}
