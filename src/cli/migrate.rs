//! `actionledger migrate`: create or upgrade the ledger schema and say each migration it applied,
//! say where the schema stands (exiting non-zero while it is not current), print the SQL it would
//! run, write the migrations out for another migration tool, or move a PostgreSQL ledger out of
//! the `public` schema.

use super::is_postgres;
use crate::error::{Error, exit};
use crate::store::{PostgresStore, SchemaStatus, SqliteStore, Store};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Debug, Default, clap::Args)]
#[allow(clippy::struct_excessive_bools, reason = "each flag is one of migrate's modes or its output form")]
pub struct MigrateArgs {
    /// List the migrations the ledger has had and those pending; change nothing. Exits 5 while
    /// the schema is not the one this build expects (migrations pending, changed or newer).
    #[arg(long, conflicts_with_all = ["dry_run", "export"])]
    pub status: bool,
    /// Print the SQL that migrating would run; change nothing.
    #[arg(long, conflicts_with = "export")]
    pub dry_run: bool,
    /// Write every migration into DIR as a file another migration tool runs (Flyway's
    /// `V0001__name.sql`), each recording itself where actionledger looks; connect to nothing.
    #[arg(long, value_name = "DIR")]
    pub export: Option<PathBuf>,
    /// PostgreSQL: move a ledger an earlier version made in the `public` schema into the ledger's
    /// own schema (with --dry-run: print the SQL), then migrate it.
    #[arg(long, conflicts_with = "export")]
    pub move_from_public: bool,
    /// Print what was applied, or the status, as one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Why `migrate --export` cannot write.
#[derive(Debug, thiserror::Error)]
enum ExportError {
    #[error("{} already holds .sql files; export into an empty or new directory, so no old migration is left beside the new ones", dir.display())]
    NotEmpty { dir: PathBuf },
}

impl From<ExportError> for Error {
    fn from(error: ExportError) -> Self {
        crate::error::FrontendError::new(crate::error::Kind::Usage, error).into()
    }
}

/// `migrate` in every form; the exit code.
pub async fn migrate(url: &str, schema: Option<&str>, args: &MigrateArgs) -> Result<i32, Error> {
    let postgres = is_postgres(url);
    if let Some(dir) = &args.export {
        return export(url, schema, dir, args.json);
    }
    if args.move_from_public {
        if !postgres {
            return Err(Error::Invalid("--move-from-public concerns PostgreSQL ledgers only".to_owned()));
        }
        match PostgresStore::move_from_public(url, schema, args.dry_run).await? {
            Some(sql) if args.dry_run => {
                println!("BEGIN;\n{sql}\nCOMMIT;");
                return Ok(exit::OK);
            }
            Some(_) => println!("moved the ledger out of the public schema"),
            None => {
                return Err(Error::Invalid(
                    "the public schema holds no ledger made by an earlier actionledger: nothing to move".to_owned(),
                ));
            }
        }
    }
    let before = if postgres {
        PostgresStore::schema_status(url, schema).await?
    } else {
        SqliteStore::schema_status(url).await?
    };
    if args.dry_run {
        before.refuse_newer()?;
        print!("{}", before.dry_run_sql());
        return Ok(exit::OK);
    }
    if args.status {
        if args.json {
            println!("{}", status_json(&before));
        } else {
            print!("{}", status_text(&before));
        }
        return Ok(if before.is_current() && before.newer.is_empty() { exit::OK } else { exit::NOT_CURRENT });
    }
    let (after, access) = if postgres {
        let store = PostgresStore::open_in(url, schema, true).await?;
        let read = (store.schema_status().await, store.access_report().await);
        store.close().await;
        (read.0?, read.1?)
    } else {
        let store = SqliteStore::open(url).await?;
        let after = store.schema_status().await;
        store.close().await;
        (after?, None)
    };
    // What was pending before and is applied now: another process migrating at the same moment
    // may have applied some of it, which is the same schema either way.
    let applied: Vec<_> =
        after.applied.iter().filter(|a| before.pending.iter().any(|p| p.version == a.version)).collect();
    if args.json {
        let applied: Vec<Value> = applied
            .iter()
            .map(|a| json!({ "version": a.version, "description": a.description, "seconds": a.took.as_secs_f64() }))
            .collect();
        println!(
            "{}",
            json!({ "ledger": before.ledger, "applied": applied, "current": after.is_current(), "access": access })
        );
        return Ok(exit::OK);
    }
    for migration in &applied {
        println!(
            "applied  {:04}  {}  ({:.1} ms)",
            migration.version,
            migration.description,
            migration.took.as_secs_f64() * 1000.0
        );
    }
    let summary = match applied.len() {
        0 => "nothing to apply".to_owned(),
        1 => "1 migration applied".to_owned(),
        n => format!("{n} migrations applied"),
    };
    println!("ledger schema is up to date at {} ({summary})", before.ledger);
    if let Some(access) = access {
        println!("access: {access}");
    }
    Ok(exit::OK)
}

/// `migrate --export DIR`.
fn export(url: &str, schema: Option<&str>, dir: &Path, json: bool) -> Result<i32, Error> {
    let migrations = if is_postgres(url) {
        PostgresStore::exported_migrations(url, schema)?
    } else {
        SqliteStore::exported_migrations()
    };
    let cannot = |e| Error::io(format!("cannot write the migrations into {}", dir.display()), e);
    if let Ok(entries) = std::fs::read_dir(dir)
        && entries.filter_map(Result::ok).any(|e| e.path().extension().is_some_and(|x| x == "sql"))
    {
        return Err(ExportError::NotEmpty { dir: dir.to_owned() }.into());
    }
    std::fs::create_dir_all(dir).map_err(cannot)?;
    for migration in &migrations {
        // Written whole under a temporary name, then renamed: an interrupted export leaves no
        // half file that a tool would run.
        let target = dir.join(&migration.file_name);
        let partial = dir.join(format!(".{}.partial", migration.file_name));
        std::fs::write(&partial, &migration.sql).map_err(cannot)?;
        std::fs::rename(&partial, &target).map_err(cannot)?;
    }
    let names: Vec<&str> = migrations.iter().map(|m| m.file_name.as_str()).collect();
    if json {
        println!("{}", json!({ "directory": dir.display().to_string(), "files": names }));
    } else {
        println!(
            "wrote {} migrations into {} ({} .. {})",
            names.len(),
            dir.display(),
            names.first().copied().unwrap_or("-"),
            names.last().copied().unwrap_or("-")
        );
        println!(
            "run them in order, each once and in one transaction, as the login that owns the ledger; each records \
             itself in _sqlx_migrations, so `actionledger migrate --status` then says the schema is current"
        );
    }
    Ok(exit::OK)
}

/// `migrate --status --json`.
fn status_json(status: &SchemaStatus) -> Value {
    let listed = |version: i64, description: &str| json!({ "version": version, "description": description });
    json!({
        "ledger": status.ledger,
        "exists": status.exists,
        "current": status.is_current() && status.newer.is_empty(),
        "applied": status.applied.iter().map(|a| listed(a.version, &a.description)).collect::<Vec<_>>(),
        "pending": status.pending.iter().map(|p| listed(p.version, &p.description)).collect::<Vec<_>>(),
        "changed": status.changed,
        "newer": status.newer.iter().map(|n| listed(n.version, &n.description)).collect::<Vec<_>>(),
        "in_public": status.in_public,
    })
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
    if !status.pending.is_empty() {
        let _ = writeln!(text, "{} pending: run `actionledger migrate`", status.pending.len());
    }
    text
}
