//! Rebuilds the crate when a migration changes, and names the commit it is built from.
//!
//! `sqlx::migrate!` embeds `migrations/postgres` and `migrations/sqlite` at compile time, and cargo
//! does not otherwise know the crate reads those files. The generated schema files and the README
//! beside them are not embedded.
//!
//! `ACTIONLEDGER_BUILD` (for `--version`) is the commit and its date, `abc1234 2026-12-05`, with
//! `-dirty` after the commit when tracked files differ from it; in a packaged crate (no git
//! checkout) the commit cargo recorded when packaging, else `unknown`. Git is never required.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=migrations/postgres");
    println!("cargo:rerun-if-changed=migrations/sqlite");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let build = from_checkout(&manifest_dir)
        .or_else(|| from_packaged_crate(&manifest_dir))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=ACTIONLEDGER_BUILD={build}");
}

/// The commit of the git checkout the crate is built in: only where the crate is the checkout's
/// own top level, not a packaged crate unpacked inside some other repository.
fn from_checkout(manifest_dir: &Path) -> Option<String> {
    let top = git(manifest_dir, &["rev-parse", "--show-toplevel"])?;
    if std::fs::canonicalize(&top).ok()? != std::fs::canonicalize(manifest_dir).ok()? {
        return None;
    }
    // Rerun when HEAD moves, the branch gets a commit, the index changes or a source file is
    // edited: each may change the commit or whether the tree is dirty.
    for path in ["HEAD", "index", "packed-refs"] {
        if let Some(path) = git(manifest_dir, &["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={}", manifest_dir.join(path).display());
        }
    }
    if let Some(branch) = git(manifest_dir, &["symbolic-ref", "-q", "HEAD"])
        && let Some(path) = git(manifest_dir, &["rev-parse", "--git-path", &branch])
    {
        println!("cargo:rerun-if-changed={}", manifest_dir.join(path).display());
    }
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=Cargo.toml");
    let commit = git(manifest_dir, &["rev-parse", "--short", "HEAD"])?;
    let date = git(manifest_dir, &["log", "-1", "--format=%cs"])?;
    let dirty = git(manifest_dir, &["status", "--porcelain", "--untracked-files=no"]).is_none_or(|s| !s.is_empty());
    Some(format!("{commit}{} {date}", if dirty { "-dirty" } else { "" }))
}

/// The commit `cargo package` recorded in `.cargo_vcs_info.json` (`"sha1": "…"`, and `"dirty":
/// true` where the tree was), shortened as git shortens it; the date is not recorded there.
fn from_packaged_crate(manifest_dir: &Path) -> Option<String> {
    let info = std::fs::read_to_string(manifest_dir.join(".cargo_vcs_info.json")).ok()?;
    let after = info.split_once("\"sha1\"")?.1;
    let sha1: String = after.split('"').nth(1)?.chars().take(7).collect();
    if sha1.len() < 7 || !sha1.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let dirty = info.replace(' ', "").contains("\"dirty\":true");
    Some(format!("{sha1}{}", if dirty { "-dirty" } else { "" }))
}

/// A git command's trimmed output, or `None` where git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git").current_dir(dir).args(args).output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
