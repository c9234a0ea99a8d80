//! Where a ledger's schema stands against the migrations this build carries: what is applied,
//! what is pending, and whether a newer build has migrated it (then this one must not write).

use super::StoreError;
use sqlx::migrate::Migrator;
use std::fmt::Write as _;

/// A migration recorded in the ledger's `_sqlx_migrations` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedMigration {
    pub version: i64,
    pub description: String,
    pub checksum: Vec<u8>,
    /// How long applying it took.
    pub took: std::time::Duration,
}

/// A migration this build carries that the ledger has not had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingMigration {
    pub version: i64,
    pub description: String,
    pub sql: String,
    /// What sqlx records for it in `_sqlx_migrations.checksum` (SHA-384 of its text).
    pub checksum: Vec<u8>,
}

/// A ledger's schema, read without changing anything.
#[derive(Debug, Clone)]
pub struct SchemaStatus {
    /// The ledger as shown to people: its URL with any password hidden (and its schema).
    pub ledger: String,
    /// Whether the ledger exists: its migrations table does.
    pub exists: bool,
    pub applied: Vec<AppliedMigration>,
    pub pending: Vec<PendingMigration>,
    /// Applied migrations this build does not carry: a newer build migrated the ledger.
    pub newer: Vec<AppliedMigration>,
    /// Applied migrations whose text differs from this build's.
    pub changed: Vec<i64>,
    /// Statements migrating runs before the migrations (PostgreSQL: making and entering the schema).
    pub preamble: Vec<String>,
    /// The newest migration this build carries.
    pub newest_known: i64,
    /// PostgreSQL: the `public` schema holds a ledger made before ledgers had a schema of their own.
    pub in_public: bool,
}

impl AppliedMigration {
    /// The rows of the migrations table (version, description, checksum, execution time in
    /// nanoseconds), as read by either store.
    pub(crate) fn from_rows(rows: Vec<(i64, String, Vec<u8>, i64)>) -> Vec<Self> {
        rows.into_iter()
            .map(|(version, description, checksum, nanos)| Self {
                version,
                description,
                checksum,
                took: std::time::Duration::from_nanos(u64::try_from(nanos).unwrap_or(0)),
            })
            .collect()
    }
}

impl SchemaStatus {
    /// Compares what the ledger has had (`None`: no migrations table) with `migrator`.
    pub(crate) fn compare(ledger: String, migrator: &Migrator, applied: Option<Vec<AppliedMigration>>) -> Self {
        let exists = applied.is_some();
        let applied = applied.unwrap_or_default();
        let known: Vec<_> = migrator.iter().filter(|m| !m.migration_type.is_down_migration()).collect();
        let pending = known
            .iter()
            .filter(|m| !applied.iter().any(|a| a.version == m.version))
            .map(|m| PendingMigration {
                version: m.version,
                description: m.description.to_string(),
                sql: m.sql.as_str().to_owned(),
                checksum: m.checksum.to_vec(),
            })
            .collect();
        let changed = known
            .iter()
            .filter(|m| applied.iter().any(|a| a.version == m.version && a.checksum != *m.checksum))
            .map(|m| m.version)
            .collect();
        let newer = applied.iter().filter(|a| !known.iter().any(|m| m.version == a.version)).cloned().collect();
        let newest_known = known.iter().map(|m| m.version).max().unwrap_or(0);
        Self { ledger, exists, applied, pending, newer, changed, preamble: Vec::new(), newest_known, in_public: false }
    }

    /// Whether every migration this build carries has been applied, unchanged.
    pub fn is_current(&self) -> bool {
        self.exists && self.pending.is_empty() && self.changed.is_empty()
    }

    /// Refuses a ledger that a newer build has migrated: this build does not know what the newer
    /// schema requires of writers, so it must not write.
    pub fn refuse_newer(&self) -> Result<(), StoreError> {
        match self.newer.last() {
            Some(newest) => Err(StoreError::NewerSchema {
                ledger: self.ledger.clone(),
                version: newest.version,
                description: newest.description.clone(),
                known: self.newest_known,
            }),
            None => Ok(()),
        }
    }

    /// The SQL migrating would run, in order, as a script a person can read.
    pub fn dry_run_sql(&self) -> String {
        if self.pending.is_empty() {
            return format!("-- {}: the ledger schema is up to date; migrating runs nothing\n", self.ledger);
        }
        let mut script = format!("-- {}: migrating would run, each migration in its own transaction:\n", self.ledger);
        for statement in &self.preamble {
            script.push_str(statement);
            script.push('\n');
        }
        for migration in &self.pending {
            let _ = writeln!(script, "\n-- migration {:04} {}", migration.version, migration.description);
            script.push_str(migration.sql.trim_end());
            script.push('\n');
        }
        script
    }
}

/// One migration written out for another migration tool (Flyway, Liquibase, a DBA's script):
/// its file name and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedMigration {
    /// `V0001__ledger.sql`: Flyway's versioned name, which sorts in order for any tool.
    pub file_name: String,
    pub sql: String,
}

/// How a store's migrations table is made and a migration recorded in it, as sqlx does, so that
/// a ledger migrated by another tool is current to this build.
#[derive(Debug)]
pub(crate) struct RecordSql {
    table: &'static str,
    /// The checksum's bytes as a literal, from their hex.
    checksum: fn(&str) -> String,
}

pub(crate) const POSTGRES_RECORD: RecordSql = RecordSql {
    table: "CREATE TABLE IF NOT EXISTS _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
            installed_on TIMESTAMPTZ NOT NULL DEFAULT now(), success BOOLEAN NOT NULL, checksum BYTEA NOT NULL, \
            execution_time BIGINT NOT NULL);",
    checksum: |hex| format!("decode('{hex}', 'hex')"),
};

pub(crate) const SQLITE_RECORD: RecordSql = RecordSql {
    table: "CREATE TABLE IF NOT EXISTS _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
            installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, success BOOLEAN NOT NULL, checksum BLOB NOT \
            NULL, execution_time BIGINT NOT NULL);",
    checksum: |hex| format!("X'{hex}'"),
};

/// Each migration `migrator` carries as a script: `preamble` (the schema), the migration, and
/// the row sqlx would record for it, so that this build finds the ledger current afterwards.
pub(crate) fn export(preamble: &[String], migrator: &Migrator, record: &RecordSql) -> Vec<ExportedMigration> {
    SchemaStatus::compare(String::new(), migrator, None)
        .pending
        .into_iter()
        .map(|migration| {
            let hex = migration.checksum.iter().fold(String::new(), |mut hex, byte| {
                let _ = write!(hex, "{byte:02x}");
                hex
            });
            let description = migration.description.replace('\'', "''");
            let mut sql = format!(
                "-- actionledger migration {:04} {}: run each file once, in order, in one transaction.\n",
                migration.version, migration.description
            );
            for statement in preamble {
                sql.push_str(statement);
                sql.push('\n');
            }
            sql.push('\n');
            sql.push_str(migration.sql.trim_end());
            sql.push_str("\n\n-- Recorded as actionledger records it, so that it finds this migration applied.\n");
            sql.push_str(record.table);
            let _ = writeln!(
                sql,
                "\nINSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)\nVALUES ({}, \
                 '{description}', true, {}, 0);",
                migration.version,
                (record.checksum)(&hex)
            );
            ExportedMigration {
                file_name: format!("V{:04}__{}.sql", migration.version, migration.description.replace(' ', "_")),
                sql,
            }
        })
        .collect()
}
