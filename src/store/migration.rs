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
}

/// A migration this build carries that the ledger has not had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingMigration {
    pub version: i64,
    pub description: String,
    pub sql: String,
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
