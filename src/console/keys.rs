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
}

impl CommandKind {
    pub const ALL: [Self; 9] = [
        Self::Retry,
        Self::ResolveCompleted,
        Self::ResolveNotWritten,
        Self::Cancel,
        Self::Approve,
        Self::Reject,
        Self::Takeover,
        Self::Lookup,
        Self::Assign,
    ];

    /// The shortest name, for the footer of a narrow terminal.
    pub fn short_label(self) -> &'static str {
        match self {
            Self::ResolveCompleted => "completed",
            Self::ResolveNotWritten => "not-written",
            Self::Takeover => "takeover",
            Self::Lookup => "lookup",
            Self::Assign => "mine",
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
        }
    }
}

/// What a key asks for. Serializable so bindings can be listed and scripted by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "action", content = "arg")]
pub enum Action {
    SelectPane(usize),
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
    Help,
    Quit,
    Command(CommandKind),
}

/// One line of the help screen: the keys, and what they do.
#[derive(Debug)]
pub struct Binding {
    pub keys: &'static str,
    pub action: Action,
    pub help: &'static str,
}

/// Every binding, in the order the help screen lists them.
pub const BINDINGS: &[Binding] = &[
    Binding { keys: "1-7", action: Action::SelectPane(0), help: "show a pane (the tabs, left to right)" },
    Binding { keys: "Tab / Shift-Tab", action: Action::NextPane, help: "next / previous pane" },
    Binding { keys: "j k / Down Up", action: Action::Down, help: "move the selection" },
    Binding { keys: "PageDown PageUp", action: Action::PageDown, help: "move a page" },
    Binding { keys: "g / G", action: Action::Top, help: "newest / oldest" },
    Binding { keys: "Enter", action: Action::Open, help: "open the selected action's detail" },
    Binding { keys: "Esc", action: Action::Back, help: "back, or cancel a dialog" },
    Binding { keys: "/", action: Action::Filter, help: "filter by key (Enter applies, empty clears)" },
    Binding { keys: "r", action: Action::Command(CommandKind::Retry), help: "retry under the same key" },
    Binding {
        keys: "c",
        action: Action::Command(CommandKind::ResolveCompleted),
        help: "resolve as completed: the destination has it",
    },
    Binding {
        keys: "n",
        action: Action::Command(CommandKind::ResolveNotWritten),
        help: "resolve as not written: runs again, same key",
    },
    Binding { keys: "x", action: Action::Command(CommandKind::Cancel), help: "cancel: the action must not happen" },
    Binding {
        keys: "a",
        action: Action::Command(CommandKind::Approve),
        help: "approve the proposed payload of a conflict",
    },
    Binding {
        keys: "d",
        action: Action::Command(CommandKind::Reject),
        help: "reject the proposed payload, keep the approved",
    },
    Binding {
        keys: "t",
        action: Action::Command(CommandKind::Takeover),
        help: "take over a stale claim (its lease expired)",
    },
    Binding { keys: "l", action: Action::Command(CommandKind::Lookup), help: "look it up at its destination now" },
    Binding { keys: "o", action: Action::Command(CommandKind::Assign), help: "assign the action to me" },
    Binding { keys: "?", action: Action::Help, help: "this help" },
    Binding { keys: "q / Ctrl-C", action: Action::Quit, help: "quit" },
];

/// The key of a command, for the footer.
pub fn command_key(kind: CommandKind) -> &'static str {
    BINDINGS.iter().find(|b| b.action == Action::Command(kind)).map_or("?", |b| b.keys)
}

/// What a key means while browsing (not while typing into a field).
pub fn browse_action(key: KeyEvent) -> Option<Action> {
    if key.modifiers.contains(KeyModifiers::CONTROL) {
        return matches!(key.code, KeyCode::Char('c')).then_some(Action::Quit);
    }
    Some(match key.code {
        KeyCode::Char(c @ '1'..='7') => Action::SelectPane(usize::from(c as u8 - b'1')),
        KeyCode::Tab => Action::NextPane,
        KeyCode::BackTab => Action::PreviousPane,
        KeyCode::Char('j') | KeyCode::Down => Action::Down,
        KeyCode::Char('k') | KeyCode::Up => Action::Up,
        KeyCode::PageDown => Action::PageDown,
        KeyCode::PageUp => Action::PageUp,
        KeyCode::Char('g') | KeyCode::Home => Action::Top,
        KeyCode::Char('G') | KeyCode::End => Action::Bottom,
        KeyCode::Enter => Action::Open,
        KeyCode::Esc => Action::Back,
        KeyCode::Char('/') => Action::Filter,
        KeyCode::Char('?') => Action::Help,
        KeyCode::Char('q') => Action::Quit,
        KeyCode::Char('r') => Action::Command(CommandKind::Retry),
        KeyCode::Char('c') => Action::Command(CommandKind::ResolveCompleted),
        KeyCode::Char('n') => Action::Command(CommandKind::ResolveNotWritten),
        KeyCode::Char('x') => Action::Command(CommandKind::Cancel),
        KeyCode::Char('a') => Action::Command(CommandKind::Approve),
        KeyCode::Char('d') => Action::Command(CommandKind::Reject),
        KeyCode::Char('t') => Action::Command(CommandKind::Takeover),
        KeyCode::Char('l') => Action::Command(CommandKind::Lookup),
        KeyCode::Char('o') => Action::Command(CommandKind::Assign),
        _ => return None,
    })
}

/// Parses one line of a script into the key events it stands for: `<Name>` for a named key, or
/// literal text typed character by character.
pub fn parse_script_line(line: &str) -> Result<Vec<KeyEvent>, String> {
    let trimmed = line.trim_end_matches(['\r', '\n']);
    if let Some(name) = trimmed.strip_prefix('<').and_then(|rest| rest.strip_suffix('>'))
        && !name.is_empty()
    {
        return named_key(name).map(|key| vec![key]);
    }
    Ok(trimmed.chars().map(|c| KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)).collect())
}

fn named_key(name: &str) -> Result<KeyEvent, String> {
    let plain = |code| Ok(KeyEvent::new(code, KeyModifiers::NONE));
    if let Some(letter) = name.strip_prefix("C-") {
        let mut chars = letter.chars();
        if let (Some(c), None) = (chars.next(), chars.next()) {
            return Ok(KeyEvent::new(KeyCode::Char(c.to_ascii_lowercase()), KeyModifiers::CONTROL));
        }
    }
    match name {
        "Enter" => plain(KeyCode::Enter),
        "Esc" => plain(KeyCode::Esc),
        "Tab" => plain(KeyCode::Tab),
        "BackTab" | "S-Tab" => Ok(KeyEvent::new(KeyCode::BackTab, KeyModifiers::SHIFT)),
        "Up" => plain(KeyCode::Up),
        "Down" => plain(KeyCode::Down),
        "Left" => plain(KeyCode::Left),
        "Right" => plain(KeyCode::Right),
        "PageDown" => plain(KeyCode::PageDown),
        "PageUp" => plain(KeyCode::PageUp),
        "Home" => plain(KeyCode::Home),
        "End" => plain(KeyCode::End),
        "Backspace" => plain(KeyCode::Backspace),
        "Space" => plain(KeyCode::Char(' ')),
        "lt" => plain(KeyCode::Char('<')),
        _ => Err(format!(
            "unknown key <{name}>; use Enter, Esc, Tab, BackTab, Up, Down, Left, Right, PageDown, PageUp, Home, End, \
             Backspace, Space, lt, or C-x for Ctrl with a letter"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_lines() {
        assert_eq!(parse_script_line("<Enter>").unwrap(), vec![KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)]);
        assert_eq!(parse_script_line("<C-c>").unwrap()[0].modifiers, KeyModifiers::CONTROL);
        assert_eq!(parse_script_line("ok <Enter>").unwrap().len(), 10, "text with brackets inside is literal");
        assert!(parse_script_line("<Bogus>").unwrap_err().contains("unknown key"));
        assert!(parse_script_line("").unwrap().is_empty());
    }

    #[test]
    fn help_lines_fit_an_80_column_terminal() {
        for binding in BINDINGS {
            assert!(16 + binding.help.len() <= 76, "{}", binding.help);
        }
    }

    #[test]
    fn every_command_has_a_key_and_a_help_line() {
        for kind in CommandKind::ALL {
            assert_ne!(command_key(kind), "?", "{kind:?}");
        }
    }

    #[test]
    fn actions_serialize_by_name() {
        let text = serde_json::to_string(&Action::Command(CommandKind::Retry)).unwrap();
        assert_eq!(text, r#"{"action":"command","arg":"retry"}"#);
    }
}
