//! Drawing: `view(&Model, &mut Frame)`. One file per part of the screen (every pane is drawn by
//! `list`), and `reflow`, which wraps the detail's long text into rows; every string drawn is a
//! `SafeText` or the console's own label.

mod detail;
mod dialog;
mod footer;
mod header;
mod help;
mod list;
mod reflow;
mod result;

use super::layout::{self, ScrollLimits};
use super::model::{Dialog, Mode, Model};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};

/// The colours of one kind of terminal, chosen once at start: 256 colours where the terminal
/// says it has them, else the 16 every colour terminal has (`TERM=xterm`, `screen`, `linux`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Palette {
    pub title: Color,
    /// Secondary text; `None` leaves it in the terminal's own colour (a 16-colour console may
    /// draw "bright black" as black on black).
    pub dim: Option<Color>,
    pub warn: Color,
    pub error: Color,
    pub ok: Color,
    pub key: Color,
}

impl Palette {
    pub const COLORS_256: Self = Self {
        title: Color::Indexed(81),
        dim: Some(Color::Indexed(245)),
        warn: Color::Indexed(214),
        error: Color::Indexed(203),
        ok: Color::Indexed(114),
        key: Color::Indexed(117),
    };

    pub const COLORS_16: Self = Self {
        title: Color::Cyan,
        dim: None,
        warn: Color::Yellow,
        error: Color::Red,
        ok: Color::Green,
        key: Color::Cyan,
    };

    /// The palette for a terminal described by `TERM` and `COLORTERM`.
    pub fn for_terminal(term: Option<&str>, colorterm: Option<&str>) -> Self {
        let truecolor = colorterm.is_some_and(|c| matches!(c, "truecolor" | "24bit"));
        let term = term.unwrap_or_default();
        if truecolor || term.contains("256color") || term.contains("direct") {
            Self::COLORS_256
        } else {
            Self::COLORS_16
        }
    }
}

/// Styles, with or without colour (`NO_COLOR`). The selection is always marked with a symbol too,
/// because some terminals drop reverse video when colour is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    /// The colours, or `None` for none at all.
    pub palette: Option<Palette>,
}

impl Theme {
    /// No colour: `NO_COLOR`, scripted sessions, measuring.
    pub const PLAIN: Self = Self { palette: None };

    pub fn colored(palette: Palette) -> Self {
        Self { palette: Some(palette) }
    }

    pub fn from_environment() -> Self {
        if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
            return Self::PLAIN;
        }
        let var = |name| std::env::var(name).ok();
        Self::for_terminal(var("TERM").as_deref(), var("COLORTERM").as_deref())
    }

    /// The theme for a terminal described by `TERM` and `COLORTERM`: none at all for one that
    /// has no colour (`dumb`, the DEC terminals `vt52` to `vt320`), where colour codes would be
    /// printed or ignored; the selection still shows, by its symbol and reverse video.
    pub fn for_terminal(term: Option<&str>, colorterm: Option<&str>) -> Self {
        let monochrome = term.is_some_and(|t| t == "dumb" || (t.starts_with("vt") && !t.contains("color")));
        if monochrome && colorterm.is_none() {
            Self::PLAIN
        } else {
            Self::colored(Palette::for_terminal(term, colorterm))
        }
    }

    fn fg(self, color: impl Fn(Palette) -> Color) -> Style {
        self.palette.map_or_else(Style::default, |p| Style::default().fg(color(p)))
    }

    pub fn title(self) -> Style {
        self.fg(|p| p.title).add_modifier(Modifier::BOLD)
    }

    pub fn dim(self) -> Style {
        match self.palette.and_then(|p| p.dim) {
            Some(color) => Style::default().fg(color),
            None => Style::default(),
        }
    }

    pub fn warn(self) -> Style {
        self.fg(|p| p.warn).add_modifier(Modifier::BOLD)
    }

    pub fn error(self) -> Style {
        self.fg(|p| p.error).add_modifier(Modifier::BOLD)
    }

    pub fn ok(self) -> Style {
        self.fg(|p| p.ok)
    }

    pub fn selected(self) -> Style {
        Style::default().add_modifier(Modifier::REVERSED | Modifier::BOLD)
    }

    pub fn key(self) -> Style {
        self.fg(|p| p.key).add_modifier(Modifier::BOLD)
    }
}

/// The parts of the screen: header, tabs, body, status and footer, with the status line as tall
/// as its message wraps at this width.
pub fn areas(model: &Model, area: Rect) -> [Rect; 5] {
    layout::screen(area, footer::status_height(model, area.width))
}

/// How far the parts open on this console's screen scroll at most: what the update bounds
/// scrolling by. Only what is open is measured.
pub fn scroll_limits(model: &Model) -> ScrollLimits {
    let screen = Rect::new(0, 0, model.width, model.height);
    let mut limits = ScrollLimits::default();
    if model.mode == Mode::Detail {
        let [_, _, body, _, _] = areas(model, screen);
        (limits.detail, limits.detail_matches) = detail::measure(model, body);
        limits.detail_page = layout::detail_page(body);
    }
    if model.help {
        limits.help = help::max_scroll(model, layout::help_area(screen));
    }
    if let Some(result) = &model.result {
        limits.result = result::max_scroll(result, layout::result_area(screen));
    }
    if let Mode::Dialog(dialog) = &model.mode {
        (limits.dialog, limits.dialog_page) = dialog::scroll_limits(dialog, dialog_area(model, dialog, screen));
    }
    limits
}

/// Where a dialog goes: kept above the status line and the footer, which say what a key just did
/// and what to press. As tall as what it says, up to all the room there is; a bulk command's list
/// of every action scrolls inside it.
fn dialog_area(model: &Model, dialog: &Dialog, screen: Rect) -> Rect {
    let [_, _, _, status_area, _] = areas(model, screen);
    let room = status_area.y.saturating_sub(screen.y);
    let width = 72.min(screen.width);
    let needed = dialog::needed_height(dialog, width);
    // A confirmation (the old worker stopped, nothing written) adds its question and field.
    let height = match (dialog.bulk.is_empty(), dialog.asks_old_worker_stopped() || dialog.asks_not_written()) {
        (false, _) => needed,
        (true, true) => needed.max(18),
        (true, false) => needed.max(14),
    };
    let mut area = layout::centered(screen, width, height.min(room));
    area.y = area.y.min(status_area.y.saturating_sub(area.height));
    area
}

/// Draws the whole console.
pub fn view(model: &Model, theme: Theme, frame: &mut Frame<'_>) {
    let [header_area, tabs_area, body, status_area, footer_area] = areas(model, frame.area());
    header::draw(model, theme, frame, header_area);
    header::draw_tabs(model, theme, frame, tabs_area);
    match (&model.mode, &model.detail) {
        (Mode::Detail, _) | (Mode::Dialog(_), Some(_)) => detail::draw(model, theme, frame, body),
        _ => list::draw(model, theme, frame, body),
    }
    footer::draw_status(model, theme, frame, status_area);
    footer::draw_keys(model, theme, frame, footer_area);
    if let Mode::Dialog(dialog) = &model.mode {
        dialog::draw(dialog, theme, frame, dialog_area(model, dialog, frame.area()));
    }
    if let Some(result) = &model.result {
        result::draw(result, theme, frame, layout::result_area(frame.area()));
    }
    if model.help {
        help::draw(model, theme, frame, layout::help_area(frame.area()));
    }
}

/// A duration as people read it in a narrow column: 42s, 7m, 3h, 2d.
pub fn short_duration(delta: chrono::TimeDelta) -> String {
    let seconds = delta.num_seconds().max(0);
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m", seconds / 60),
        3600..86_400 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

/// Cuts a line to `width` display columns, marking the cut.
pub fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Cuts a key to `width` columns in its middle, keeping its start and more of its end: keys of one
/// source share their start and differ at the end (`…:create-task`, `…:send-confirmation`).
pub fn fit_middle(text: &str, width: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= width {
        return text.to_owned();
    }
    let room = width.saturating_sub(1);
    let head = room / 3;
    let tail = room - head;
    let mut out: String = chars[..head].iter().collect();
    out.push('…');
    out.extend(&chars[chars.len() - tail..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_cut_in_the_middle_keeps_the_end_where_keys_differ() {
        let create = "acme-corporation-emea:salesforce-opportunity:OPP-0012345:create-task";
        let confirm = "acme-corporation-emea:salesforce-opportunity:OPP-0012345:send-confirmation";
        for width in [24, 30, 41] {
            let (a, b) = (fit_middle(create, width), fit_middle(confirm, width));
            assert_eq!((a.chars().count(), b.chars().count()), (width, width), "{a} {b}");
            assert_ne!(a, b, "told apart at {width} columns");
            assert!(a.starts_with("acme") && a.ends_with(":create-task") && a.contains('…'), "{a}");
        }
        assert_eq!(fit_middle("acme:1", 6), "acme:1", "a key that fits is whole");
        assert_eq!(fit_middle("abcdefgh", 4), "a…gh");
    }

    #[test]
    fn a_terminal_without_colour_gets_none() {
        for term in ["dumb", "vt100", "vt102", "vt220", "vt52"] {
            assert_eq!(Theme::for_terminal(Some(term), None), Theme::PLAIN, "{term}");
        }
        assert_eq!(Theme::for_terminal(Some("xterm"), None), Theme::colored(Palette::COLORS_16));
        assert_eq!(Theme::for_terminal(Some("linux"), None), Theme::colored(Palette::COLORS_16));
        assert_eq!(Theme::for_terminal(Some("xterm-256color"), None), Theme::colored(Palette::COLORS_256));
    }

    #[test]
    fn a_terminal_without_256_colours_gets_the_16_colour_palette() {
        for term in ["xterm", "screen", "linux", "vt100", "xterm-color", "ansi"] {
            assert_eq!(Palette::for_terminal(Some(term), None), Palette::COLORS_16, "{term}");
        }
        assert_eq!(Palette::for_terminal(None, None), Palette::COLORS_16, "no TERM");
        for term in ["xterm-256color", "screen-256color", "tmux-256color", "xterm-direct"] {
            assert_eq!(Palette::for_terminal(Some(term), None), Palette::COLORS_256, "{term}");
        }
        assert_eq!(Palette::for_terminal(Some("screen"), Some("truecolor")), Palette::COLORS_256);
        let sixteen = [Color::Cyan, Color::Yellow, Color::Red, Color::Green];
        let p = Palette::COLORS_16;
        for color in [p.title, p.warn, p.error, p.ok, p.key] {
            assert!(sixteen.contains(&color), "{color:?} is one of the basic colours");
        }
    }
}
