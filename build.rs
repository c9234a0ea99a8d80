//! Rebuilds the crate when a migration changes: `sqlx::migrate!` embeds `migrations/` at compile
//! time, and cargo does not otherwise know the crate reads those files.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
