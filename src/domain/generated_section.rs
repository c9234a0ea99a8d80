//! Test support: a section of a document generated from the code (the transition table, the
//! column guards, the console keys), checked against what the code generates now, and rewritten
//! in place when the variable that asks for it is set.

/// Checks that `doc` (a path below the crate) holds `expected` between the lines `begin` and
/// `end`; writes it there instead when the environment variable `update` is set. `what` names the
/// section and `regenerate` the command that rewrites it, for the failure's message.
pub(crate) fn check(doc: &str, begin: &str, end: &str, expected: &str, update: &str, what: &str, regenerate: &str) {
    let path = format!("{}/{doc}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    let (before, rest) = text.split_once(begin).unwrap_or_else(|| panic!("{path} lacks {begin}"));
    let (shown, after) = rest.split_once(end).unwrap_or_else(|| panic!("{path} lacks {end}"));
    let expected = format!("\n{expected}");
    if shown == expected {
        return;
    }
    if std::env::var_os(update).is_some() {
        std::fs::write(&path, format!("{before}{begin}{expected}{end}{after}"))
            .unwrap_or_else(|e| panic!("cannot write {path}: {e}"));
        return;
    }
    panic!(
        "{what} in {doc} differ from the code.\nRegenerate: {update}=1 {regenerate}\n\
         (or put this between the markers by hand):\n{expected}"
    );
}
