//! The crate's layering, as `src/lib.rs` states it, checked against the code: a module uses only
//! the modules of the layers below its own, so that a rule decided in the ledger cannot come to
//! depend on a front end. An import that points up fails here, naming the file and the line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The crate's top-level modules, bottom first; a module may use those of lower layers only.
/// Modules in one layer do not use each other.
const LAYERS: &[&[&str]] = &[
    &["faults"],
    &["domain", "testkit"],
    &["metrics", "store"],
    &["ledger"],
    &["template"],
    &["config"],
    &["destination"],
    &["connections", "error"],
    &["document", "health", "reconcile"],
    &["console", "serve", "worker"],
    &["sim_crm"],
    &["bench", "demo"],
    &["cli"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file that the build of the library uses: comment lines and the unit tests at the
/// end of the file (`#[cfg(test)]` followed by a module) are left out, since tests may reach up.
fn product_lines(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if trimmed == "#[cfg(test)]" && lines.get(n + 1).is_some_and(|next| next.trim_start().starts_with("mod ")) {
            break;
        }
        if !trimmed.starts_with("//") {
            out.push((n + 1, *line));
        }
    }
    out
}

/// The top-level modules a line names through `crate::`.
fn crate_paths(line: &str) -> Vec<&str> {
    line.match_indices("crate::")
        .filter(|(at, _)| !line[..*at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$'))
        .filter_map(|(at, found)| {
            let rest = &line[at + found.len()..];
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
            (end > 0).then(|| &rest[..end])
        })
        .collect()
}

/// `use crate::{a, b::c}`: the modules of a grouped import.
fn grouped_paths(line: &str) -> Vec<&str> {
    let Some(rest) = line.trim_start().strip_prefix("use crate::{") else { return Vec::new() };
    rest.split([',', '}'])
        .map(|item| item.trim().split("::").next().unwrap_or("").trim())
        .filter(|name| !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_'))
        .collect()
}

#[test]
fn no_import_points_up() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut upward = Vec::new();
    let mut unplaced = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str().to_str().unwrap();
        let module = first.strip_suffix(".rs").unwrap_or(first);
        if matches!(module, "lib" | "main") {
            continue;
        }
        let Some(own) = layer_of(module) else {
            unplaced.insert(module.to_owned(), relative.display().to_string());
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for (number, line) in product_lines(&text) {
            for used in crate_paths(line).into_iter().chain(grouped_paths(line)) {
                // The names lib.rs re-exports at the root are their modules'.
                let theirs = match used {
                    "Error" => layer_of("error"),
                    "Ledger" => layer_of("ledger"),
                    other => layer_of(other),
                };
                match theirs {
                    _ if used == module => {}
                    Some(theirs) if theirs < own => {}
                    _ => upward.push(format!("{}:{number}: {module} uses {used}: {}", relative.display(), line.trim())),
                }
            }
        }
    }
    assert!(unplaced.is_empty(), "modules missing from the layers (place them in LAYERS and in lib.rs): {unplaced:?}");
    assert!(upward.is_empty(), "imports that point up or across a layer:\n{}", upward.join("\n"));
}

/// lib.rs declares exactly the modules placed here, and lists them in its layout doc in this order.
#[test]
fn the_crate_root_declares_the_layers_in_order() {
    let root = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let declared: Vec<&str> = root
        .lines()
        .filter_map(|line| line.strip_prefix("pub mod ").or_else(|| line.strip_prefix("mod ")))
        .map(|rest| rest.trim_end_matches(';'))
        .collect();
    let mut placed: Vec<&str> = LAYERS.iter().flat_map(|layer| layer.iter().copied()).collect();
    let mut sorted_declared = declared.clone();
    placed.sort_unstable();
    sorted_declared.sort_unstable();
    assert_eq!(sorted_declared, placed, "lib.rs and LAYERS disagree on the crate's modules");
    let layer_sequence: Vec<usize> = declared.iter().map(|m| layer_of(m).unwrap()).collect();
    assert!(layer_sequence.is_sorted(), "lib.rs declares its modules bottom first: {declared:?}");
}

/// The line scanner itself: what counts as a use of a module.
#[test]
fn the_scanner_finds_crate_paths() {
    assert_eq!(crate_paths("use crate::ledger::LedgerError;"), ["ledger"]);
    assert_eq!(crate_paths("let x = crate::console::keys::parse(crate::domain::X);"), ["console", "domain"]);
    assert_eq!(crate_paths("use actionledger_crate::x;"), Vec::<&str>::new());
    assert_eq!(grouped_paths("use crate::{domain::ActionKey, error::Error, Ledger};"), ["domain", "error", "Ledger"]);
    let text = "fn a() { crate::cli::x(); }\n// crate::cli::y\n#[cfg(test)]\nmod tests {\n crate::cli::z();\n}\n";
    let lines: Vec<usize> = product_lines(text).into_iter().map(|(n, _)| n).collect();
    assert_eq!(lines, [1]);
}

/// Inside the console the same holds: the pure model (state, effects, loads, dialogs, update) and
/// the layout arithmetic never reach the view, which draws them; only the driver knows both.
#[test]
fn the_console_model_never_uses_its_view() {
    let console = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/console");
    let mut files = Vec::new();
    sources(&console.join("model"), &mut files);
    files.extend(["layout.rs", "keys.rs", "safe_text.rs", "clipboard.rs"].map(|name| console.join(name)));
    let mut upward = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (number, line) in product_lines(&text) {
            if line.contains("console::view") || line.contains("super::view") || line.contains("view::") {
                upward.push(format!("{}:{number}: {}", file.display(), line.trim()));
            }
        }
    }
    assert!(upward.is_empty(), "the console's model reaches its view:\n{}", upward.join("\n"));
}
