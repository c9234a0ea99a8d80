//! `actionledger migrate`: create or upgrade the ledger schema, say where it stands, print the SQL
//! it would run, or move a PostgreSQL ledger out of the `public` schema.

use super::is_postgres;
use crate::error::{Error, exit};
use crate::store::{PostgresStore, SchemaStatus, SqliteStore};
use std::fmt::Write as _;

#[derive(Debug, Default, clap::Args)]
pub struct MigrateArgs {
    /// List the migrations the ledger has had and those pending; change nothing.
    #[arg(long, conflicts_with = "dry_run")]
    pub status: bool,
    /// Print the SQL that migrating would run; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// PostgreSQL: move a ledger an earlier version made in the `public` schema into the ledger's
    /// own schema (with --dry-run: print the SQL), then migrate it.
    #[arg(long)]
    pub move_from_public: bool,
}

/// What `migrate` does before the ledger is opened: the answer, for `--status` and `--dry-run`
/// (which never open it for writing), or `None` to go on and migrate.
pub async fn before_opening(url: &str, schema: Option<&str>, args: &MigrateArgs) -> Result<Option<i32>, Error> {
    let postgres = is_postgres(url);
    if args.move_from_public {
        if !postgres {
            return Err(Error::Invalid("--move-from-public concerns PostgreSQL ledgers only".to_owned()));
        }
        match PostgresStore::move_from_public(url, schema, args.dry_run).await? {
            Some(sql) if args.dry_run => {
                println!("BEGIN;\n{sql}\nCOMMIT;");
                return Ok(Some(exit::OK));
            }
            Some(_) => println!("moved the ledger out of the public schema"),
            None => {
                return Err(Error::Invalid(
                    "the public schema holds no ledger made by an earlier actionledger: nothing to move".to_owned(),
                ));
            }
        }
    }
    if !args.status && !args.dry_run {
        return Ok(None);
    }
    let status = if postgres {
        PostgresStore::schema_status(url, schema).await?
    } else {
        SqliteStore::schema_status(url).await?
    };
    if args.dry_run {
        status.refuse_newer()?;
        print!("{}", status.dry_run_sql());
    } else {
        print!("{}", status_text(&status));
    }
    Ok(Some(exit::OK))
}

/// `migrate --status`: one line per migration, applied, pending or newer than this build.
fn status_text(status: &SchemaStatus) -> String {
    let mut text = format!("ledger: {}\n", status.ledger);
    if !status.exists {
        text.push_str("no ledger there yet: `actionledger migrate` creates it\n");
    }
    if status.in_public {
        text.push_str(
            "the public schema holds a ledger made by an earlier actionledger: move it with \
             `actionledger migrate --move-from-public`\n",
        );
    }
    for applied in &status.applied {
        let note = if status.changed.contains(&applied.version) {
            "  (changed since it was applied: this build's text differs)"
        } else if status.newer.iter().any(|n| n.version == applied.version) {
            "  (newer than this actionledger)"
        } else {
            ""
        };
        let _ = writeln!(text, "applied  {:04}  {}{note}", applied.version, applied.description);
    }
    for pending in &status.pending {
        let _ = writeln!(text, "pending  {:04}  {}", pending.version, pending.description);
    }
    if let Err(refusal) = status.refuse_newer() {
        let _ = writeln!(text, "{refusal}");
    }
    text
}
