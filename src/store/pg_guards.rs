//! What each PostgreSQL role may change, table by table and column by column: the policy the
//! privileges and guard functions of `migrations/postgres` enforce (0004, 0011, 0016, 0093, 0095, 0098),
//! written once as data so that docs/RULES.md shows it and a test tries every column of every
//! table with each role's login against it. SQLite has no roles: whoever may write its file may
//! write anything, so this policy is PostgreSQL's alone.

/// How one role may change one column by an UPDATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Refused, whatever else the same statement or transaction writes.
    Never,
    /// Only as part of the whole write of a command of the role, which the text names: a change
    /// of the column alone (no step of the revision, no audit entry, not the command's values) is
    /// refused.
    ByCommand(&'static str),
    /// The column alone may change, within what the text says; nothing else needs to.
    Alone(&'static str),
}

impl Change {
    /// Whether an UPDATE of this column alone, to another value, is accepted (where the text's
    /// conditions hold).
    pub fn accepts_alone(self) -> bool {
        matches!(self, Change::Alone(_))
    }

    fn describe(self) -> &'static str {
        match self {
            Change::Never => "never",
            Change::ByCommand(how) | Change::Alone(how) => how,
        }
    }
}

/// One column's policy for the two roles that write. A viewer changes nothing; the owner role
/// (migrations and `purge`) changes anything.
#[derive(Debug, Clone, Copy)]
pub struct ColumnPolicy {
    pub table: &'static str,
    pub column: &'static str,
    pub worker: Change,
    pub reviewer: Change,
}

use Change::{Alone, ByCommand, Never};

const fn column(table: &'static str, column: &'static str, worker: Change, reviewer: Change) -> ColumnPolicy {
    ColumnPolicy { table, column, worker, reviewer }
}

/// A table no role but the owner changes: every column `never`.
const fn owners(table: &'static str, column_name: &'static str) -> ColumnPolicy {
    column(table, column_name, Never, Never)
}

const STEP: &str = "one step forward with every write of a command";
const STATE_BY_WORKER: &str = "along a move the transition table gives automation, with its audit entry";
const STATE_BY_PERSON: &str = "along a move the transition table gives people, with the person's audit entry";
/// 0098: the completed update action's values, taken on by the action it updates.
const TAKE_ON_BY_WORKER: &str =
    "to its update action KEY#update-N's, as that update completes (its result or a lookup)";
const PERSON: &str = "by a person's command, with the person's audit entry";

/// Every column of every table of the PostgreSQL ledger (tests/it/column_guards.rs fails on a
/// column missing here), in the order of `migrations/postgres.schema.sql`.
pub const POLICY: &[ColumnPolicy] = &[
    owners("_sqlx_migrations", "version"),
    owners("_sqlx_migrations", "description"),
    owners("_sqlx_migrations", "installed_on"),
    owners("_sqlx_migrations", "success"),
    owners("_sqlx_migrations", "checksum"),
    owners("_sqlx_migrations", "execution_time"),
    column("actions", "id", Never, Never),
    column("actions", "key", Never, Never),
    column("actions", "state", ByCommand(STATE_BY_WORKER), ByCommand(STATE_BY_PERSON)),
    column(
        "actions",
        "payload",
        ByCommand(TAKE_ON_BY_WORKER),
        ByCommand(
            "to the proposed payload, by approving it; or to its completed update action's, by resolving that completed",
        ),
    ),
    column(
        "actions",
        "fingerprint",
        ByCommand(TAKE_ON_BY_WORKER),
        ByCommand(
            "to the proposed payload's, by approving it; or to its completed update action's, by resolving that completed",
        ),
    ),
    column(
        "actions",
        "proposed_payload",
        ByCommand("set by a submission with a changed payload; never cleared"),
        ByCommand("cleared by deciding the proposal"),
    ),
    column(
        "actions",
        "proposed_fingerprint",
        ByCommand("with the proposed payload"),
        ByCommand("cleared with the proposed payload"),
    ),
    column(
        "actions",
        "proposed_source_version",
        ByCommand("with the proposed payload"),
        ByCommand("cleared with the proposed payload"),
    ),
    column("actions", "resume_state", ByCommand("with a change of state"), ByCommand("with a change of state")),
    column("actions", "source", Never, Never),
    column(
        "actions",
        "source_version",
        ByCommand(TAKE_ON_BY_WORKER),
        ByCommand(
            "to the approved proposal's, by approving it; or to its completed update action's, by resolving that completed",
        ),
    ),
    column("actions", "destination", Never, Never),
    column("actions", "after_key", Never, Never),
    column("actions", "claimed_by", ByCommand("by a claim or its end"), ByCommand("by a takeover")),
    column(
        "actions",
        "ownership_version",
        ByCommand("one step, by a claim, with its audit entry"),
        ByCommand("one step, by a takeover, with the person's audit entry"),
    ),
    column(
        "actions",
        "revision",
        ByCommand("one step forward with every write of a command; a renewal of the lease keeps it"),
        ByCommand(STEP),
    ),
    column(
        "actions",
        "lease_expires_at",
        Alone("renewed alone while the action is claimed (no revision step); set by a claim, cleared by its end"),
        ByCommand("cleared by a takeover"),
    ),
    column(
        "actions",
        "not_before",
        ByCommand(
            "set only as the action goes back to pending (a retry scheduled, a lookup found nothing); cleared by a claim",
        ),
        ByCommand(
            "set only as the person's lookup that found nothing moves the action to pending; cleared by a retry or a resolution as not written",
        ),
    ),
    column("actions", "attempts", ByCommand("one at a time, as an attempt starts"), Never),
    column(
        "actions",
        "attempts_in_round",
        ByCommand("as attempts start and rounds end"),
        ByCommand("to zero by a retry, a resolution as not written or an approval"),
    ),
    column(
        "actions",
        "assignee",
        ByCommand("from nobody to the review owner, as the action comes to need a person"),
        ByCommand(PERSON),
    ),
    column(
        "actions",
        "destination_id",
        ByCommand("only as the action becomes completed"),
        ByCommand("only as the action becomes completed (a resolution as completed)"),
    ),
    column("actions", "first_sent_at", ByCommand("set once, as the first attempt starts"), Never),
    column("actions", "last_error", ByCommand("with a result or a recovery"), ByCommand(PERSON)),
    column("actions", "created_at", Never, Never),
    column(
        "actions",
        "updated_at",
        ByCommand("to the database's time of the writing transaction or later"),
        ByCommand("to the database's time of the writing transaction or later"),
    ),
    column(
        "actions",
        "window_started_at",
        ByCommand("set once, under a claim, at the database's time"),
        ByCommand("cleared only as the action goes back to pending (a retry from held, a resolution as not written)"),
    ),
    column(
        "actions",
        "late_results",
        ByCommand("counts up as late results arrive"),
        ByCommand("to zero, by acknowledging every late attempt"),
    ),
    column(
        "actions",
        "old_worker_may_act",
        ByCommand("set as an expired claim is held; never cleared"),
        ByCommand("with a change of state or owner (a takeover, a retry confirming the old worker stopped)"),
    ),
    column(
        "actions",
        "payload_revision",
        ByCommand("forward to N, as its update action KEY#update-N completes"),
        ByCommand(
            "one step, by approving a proposal; or forward to N, by resolving its update action KEY#update-N completed",
        ),
    ),
    column("actions", "idempotency_key", Never, ByCommand("to KEY#rev-N, by approving a proposal after a send")),
    column("actions", "updates_key", Never, Never),
    column("actions", "updates_destination_id", Never, Never),
    column(
        "actions",
        "may_have_written",
        ByCommand(
            "set by a result or a cut-off attempt; cleared only as a lookup that found nothing moves the action to pending or failed",
        ),
        ByCommand(
            "set by a takeover that cuts an attempt off; cleared only as the person's check moves the action to pending",
        ),
    ),
    column("attempts", "id", Never, Never),
    column("attempts", "action_key", Never, Never),
    column("attempts", "number", Never, Never),
    column("attempts", "worker", Never, Never),
    column("attempts", "ownership_version", Never, Never),
    column("attempts", "started_at", Never, Never),
    column("attempts", "ended_at", ByCommand("set once, as the attempt ends, not before it started"), Never),
    column(
        "attempts",
        "outcome",
        ByCommand("set once, as the attempt ends (or marked cut off while unfinished)"),
        ByCommand("only from none to cut off, on an unfinished attempt, by a takeover"),
    ),
    column("attempts", "error", ByCommand("set once, as the attempt ends"), Never),
    column("attempts", "response_status", ByCommand("set once, as the attempt ends"), Never),
    column("attempts", "destination_id", ByCommand("set once, as the attempt ends"), Never),
    column("attempts", "response_body", ByCommand("set once, as the attempt ends"), Never),
    column("attempts", "stale", ByCommand("set once, as a late result ends the attempt"), Never),
    column("attempts", "acknowledged_by", Never, Alone("set once, to a late attempt, by acknowledging it")),
    column("attempts", "acknowledged_at", Never, Alone("set once, with who acknowledged")),
    column("attempts", "idempotency_key", Never, Never),
    owners("audit_trail", "id"),
    owners("audit_trail", "action_key"),
    owners("audit_trail", "at"),
    owners("audit_trail", "actor"),
    owners("audit_trail", "actor_kind"),
    owners("audit_trail", "event"),
    owners("audit_trail", "from_state"),
    owners("audit_trail", "to_state"),
    owners("audit_trail", "ownership_version"),
    owners("audit_trail", "revision"),
    owners("audit_trail", "reason"),
    owners("deliveries", "id"),
    owners("deliveries", "action_key"),
    owners("deliveries", "event_id"),
    owners("deliveries", "source"),
    owners("deliveries", "source_version"),
    owners("deliveries", "fingerprint"),
    owners("deliveries", "outcome"),
    owners("deliveries", "received_at"),
    owners("lookups", "id"),
    owners("lookups", "action_key"),
    owners("lookups", "at"),
    owners("lookups", "actor"),
    owners("lookups", "verdict"),
    owners("lookups", "records"),
    owners("lookups", "destination_id"),
    owners("lookups", "response_status"),
    owners("lookups", "response_body"),
    owners("lookups", "detail"),
    owners("person_logins", "login"),
    owners("person_logins", "person"),
    column("proposals", "id", Never, Never),
    column("proposals", "action_key", Never, Never),
    column("proposals", "fingerprint", Never, Never),
    column("proposals", "payload", Never, Never),
    column("proposals", "source", ByCommand("as a rejected proposal is submitted again"), Never),
    column("proposals", "event_id", ByCommand("as a rejected proposal is submitted again"), Never),
    column("proposals", "source_version", ByCommand("as a rejected proposal is submitted again"), Never),
    column("proposals", "received_at", ByCommand("as a rejected proposal is submitted again"), Never),
    column(
        "proposals",
        "decision",
        ByCommand("a rejection cleared, as the proposal is submitted again"),
        ByCommand("once, by approving or rejecting, with the person's audit entry"),
    ),
    column(
        "proposals",
        "decided_by",
        ByCommand("cleared with the decision"),
        ByCommand("once, the person of the login"),
    ),
    column(
        "proposals",
        "decided_at",
        ByCommand("cleared with the decision"),
        ByCommand("once, the database's time of the decision"),
    ),
    owners("purged_actions", "action_key"),
    owners("purged_actions", "purge_id"),
    owners("purges", "id"),
    owners("purges", "at"),
    owners("purges", "owner"),
    owners("purges", "reason"),
    owners("purges", "older_than_ms"),
    owners("purges", "settled_before"),
    owners("purges", "states"),
    owners("purges", "actions"),
    owners("purges", "deliveries"),
    owners("purges", "attempts"),
    owners("purges", "lookups"),
    owners("refused_submissions", "id"),
    owners("refused_submissions", "received_at"),
    owners("refused_submissions", "key_excerpt"),
    owners("refused_submissions", "problem"),
    owners("refused_submissions", "message"),
    owners("refused_submissions", "event_id"),
    owners("refused_submissions", "source"),
    owners("refused_submissions", "destination"),
    owners("state_transitions", "from_state"),
    owners("state_transitions", "to_state"),
    owners("state_transitions", "by_automation"),
    owners("state_transitions", "by_people"),
];

/// The policy of one column, if it has one.
pub fn policy_of(table: &str, column: &str) -> Option<&'static ColumnPolicy> {
    POLICY.iter().find(|p| p.table == table && p.column == column)
}

/// The tables of the policy whose every column is `never` to both roles (only the owner changes
/// them), in order.
fn owners_only_tables() -> Vec<&'static str> {
    let mut tables: Vec<&'static str> = Vec::new();
    for policy in POLICY {
        if !tables.contains(&policy.table) {
            tables.push(policy.table);
        }
    }
    tables
        .retain(|table| POLICY.iter().filter(|p| p.table == *table).all(|p| p.worker == Never && p.reviewer == Never));
    tables
}

/// The policy as docs/RULES.md shows it: one row per column a role may change in some way, and
/// the tables only the owner changes named together.
pub fn policy_markdown() -> String {
    let owners_only = owners_only_tables();
    let rows: Vec<String> = POLICY
        .iter()
        .filter(|p| !owners_only.contains(&p.table))
        .map(|p| format!("| {} | `{}` | {} | {} |\n", p.table, p.column, p.worker.describe(), p.reviewer.describe()))
        .collect();
    let named: Vec<String> = owners_only.iter().map(|t| format!("`{t}`")).collect();
    format!(
        "| table | column | worker | reviewer |\n|---|---|---|---|\n{}\nEvery column of {} is `never` to both \
         roles: a worker and a reviewer insert into some of them (the audit trail, deliveries, lookups, refused \
         submissions), and no role but the owner updates or deletes a row of any. A viewer changes nothing. The \
         owner role (`actionledger_owner`, which migrates and purges) may change anything.\n",
        rows.concat(),
        named.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines around the generated table in docs/RULES.md.
    const TABLE_BEGIN: &str = "<!-- BEGIN COLUMN GUARDS: generated from POLICY in src/store/pg_guards.rs -->";
    const TABLE_END: &str = "<!-- END COLUMN GUARDS -->";

    #[test]
    fn every_column_is_classified_once() {
        for (index, policy) in POLICY.iter().enumerate() {
            let again = POLICY[index + 1..].iter().any(|p| p.table == policy.table && p.column == policy.column);
            assert!(!again, "{}.{} is classified twice", policy.table, policy.column);
        }
    }

    #[test]
    fn the_rules_document_shows_the_column_guards() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/RULES.md");
        let doc = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
        let (before, rest) = doc.split_once(TABLE_BEGIN).unwrap_or_else(|| panic!("{path} lacks {TABLE_BEGIN}"));
        let (shown, after) = rest.split_once(TABLE_END).unwrap_or_else(|| panic!("{path} lacks {TABLE_END}"));
        let expected = format!("\n{}", policy_markdown());
        if shown == expected {
            return;
        }
        if std::env::var_os("ACTIONLEDGER_UPDATE_RULES").is_some() {
            std::fs::write(path, format!("{before}{TABLE_BEGIN}{expected}{TABLE_END}{after}")).unwrap();
            return;
        }
        panic!(
            "the column guards in docs/RULES.md differ from POLICY in src/store/pg_guards.rs.\n\
             Regenerate them: ACTIONLEDGER_UPDATE_RULES=1 cargo test --lib the_rules_document_shows_the_column_guards\n\
             (or put this between the markers by hand):\n{expected}"
        );
    }
}
