//! Writes `assets/console.svg`: the review console after the demo scenario, drawn cell by cell
//! from the same buffer the terminal gets. `cargo run --example screenshot`.

use actionledger::Ledger;
use actionledger::console::view::Theme;
use actionledger::console::{ConsoleOptions, ScriptedConsole};
use actionledger::destination::Destinations;
use actionledger::domain::Person;
use actionledger::store::SqliteStore;
use ratatui::style::{Color, Modifier};
use std::fmt::Write as _;
use std::time::Duration;

const CELL_W: usize = 9;
const CELL_H: usize = 18;

fn rgb(color: Color, default: &'static str) -> &'static str {
    match color {
        Color::Cyan => "#56b6c2",
        Color::Yellow => "#e5c07b",
        Color::Red => "#e06c75",
        Color::Green => "#98c379",
        Color::DarkGray => "#7f848e",
        _ => default,
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[tokio::main]
async fn main() {
    let dir = std::env::temp_dir().join(format!("actionledger-screenshot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ledger = Ledger::new(SqliteStore::open(&format!("sqlite://{}", dir.join("demo.db").display())).await.unwrap());
    actionledger::demo::run(&ledger, "sqlite://demo.db", Person::parse("ana").unwrap(), false).await.unwrap();
    let options = ConsoleOptions {
        owner: Person::parse("ana").unwrap(),
        ledger_label: "sqlite://demo.db".to_owned(),
        destinations: Destinations::default(),
        refresh: Duration::from_hours(1),
        hint: None,
        filter: None,
    };
    let (width, height) = (100u16, 32u16);
    let mut console = ScriptedConsole::start(&ledger, &options, width, height).await.unwrap();
    for key in ["4", "<Enter>"] {
        console.press(key).await.unwrap();
    }
    let buffer = console.render(Theme::colored(actionledger::console::view::Palette::COLORS_256)).unwrap();
    let (w, h) = (usize::from(width) * CELL_W + 20, usize::from(height) * CELL_H + 20);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"DejaVu Sans Mono, Menlo, monospace\" font-size=\"14\">\n<rect width=\"100%\" height=\"100%\" fill=\"#1e2127\" rx=\"8\"/>\n"
    );
    for y in 0..height {
        for x in 0..width {
            let cell = &buffer[(x, y)];
            let reversed = cell.modifier.contains(Modifier::REVERSED);
            let fg = rgb(cell.fg, "#d7dae0");
            let (px, py) = (10 + usize::from(x) * CELL_W, 10 + usize::from(y) * CELL_H);
            if reversed {
                let _ =
                    writeln!(svg, "<rect x=\"{px}\" y=\"{py}\" width=\"{CELL_W}\" height=\"{CELL_H}\" fill=\"{fg}\"/>");
            }
            let symbol = cell.symbol();
            if symbol.trim().is_empty() {
                continue;
            }
            let weight = if cell.modifier.contains(Modifier::BOLD) { " font-weight=\"bold\"" } else { "" };
            let fill = if reversed { "#1e2127" } else { fg };
            let _ =
                writeln!(svg, "<text x=\"{px}\" y=\"{}\" fill=\"{fill}\"{weight}>{}</text>", py + 14, escape(symbol));
        }
    }
    svg.push_str("</svg>\n");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/console.svg");
    std::fs::write(&path, svg).unwrap();
    let _ = std::fs::remove_dir_all(dir);
    println!("wrote {}", path.display());
}
