//! Rebuilds the crate when a migration changes: `sqlx::migrate!` embeds `migrations/postgres` and
//! `migrations/sqlite` at compile time, and cargo does not otherwise know the crate reads those
//! files. The generated schema files and the README beside them are not embedded.

fn main() {
    println!("cargo:rerun-if-changed=migrations/postgres");
    println!("cargo:rerun-if-changed=migrations/sqlite");
}
