//! What each PostgreSQL role may change, table by table and column by column: the policy the
//! privileges and guard functions of `migrations/postgres` enforce (0004, 0011, 0016, 0093, 0095, 0096, 0098, 0099),
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

/// How one role may set one column of a row it inserts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Insert {
    /// The role inserts no row into the table.
    NotGranted,
    /// Whatever the command takes (from the submission, the worker, the evidence): another value
    /// alone is accepted.
    Given(&'static str),
    /// Only what the text says: another value alone is refused.
    Held(&'static str),
}

impl Insert {
    /// Whether an INSERT of the row a command writes, with this column alone set to another
    /// value, is accepted.
    pub fn accepts_another(self) -> bool {
        matches!(self, Insert::Given(_))
    }

    fn describe(self) -> &'static str {
        match self {
            Insert::NotGranted => "no insert",
            Insert::Given(how) | Insert::Held(how) => how,
        }
    }
}

/// One column's policy for the rows the two roles that write insert (0095, 0096, 0099).
#[derive(Debug, Clone, Copy)]
pub struct InsertPolicy {
    pub table: &'static str,
    pub column: &'static str,
    pub worker: Insert,
    pub reviewer: Insert,
}

use Insert::{Given, Held, NotGranted};

const fn insert(table: &'static str, column: &'static str, worker: Insert, reviewer: Insert) -> InsertPolicy {
    InsertPolicy { table, column, worker, reviewer }
}

/// A column of a new action that starts at one value whoever inserts it.
const fn initial(column: &'static str, value: &'static str) -> InsertPolicy {
    insert("actions", column, Held(value), Held(value))
}

/// A column of a table only a worker inserts into.
const fn workers(table: &'static str, column: &'static str, worker: Insert) -> InsertPolicy {
    insert(table, column, worker, NotGranted)
}

const SEQUENCE: Insert = Given("any (the sequence's)");
const NONE: Insert = Held("none");
const NOW_OR_LATER: Insert = Held("the database's time of the transaction or later");
const ORIGINALS: Insert = Held("the completed original's");
/// 0099: an update action carries the proposal approved in its transaction; a re-creation the
/// completed original's payload.
const APPROVED_OR_ORIGINALS: &str =
    "the proposal approved in the same transaction's (an update action); the completed original's (a re-creation)";

/// Every column of every table a worker or a reviewer inserts into, in the order of
/// `migrations/postgres.schema.sql`. The tables not named here no role but the owner inserts
/// into.
pub const INSERT_POLICY: &[InsertPolicy] = &[
    insert("actions", "id", SEQUENCE, SEQUENCE),
    insert("actions", "key", Given("the submission's"), Held("KEY#recreate-N or KEY#update-N of a completed action")),
    initial("state", "pending"),
    insert("actions", "payload", Held("the submission's, with its fingerprint"), Held(APPROVED_OR_ORIGINALS)),
    insert("actions", "fingerprint", Held("the SHA-256 of the payload"), Held(APPROVED_OR_ORIGINALS)),
    initial("proposed_payload", "none"),
    initial("proposed_fingerprint", "none"),
    initial("proposed_source_version", "none"),
    initial("resume_state", "none"),
    insert("actions", "source", Given("the submission's"), ORIGINALS),
    insert(
        "actions",
        "source_version",
        Given("the submission's"),
        Held("the approved proposal's, else the original's (an update action); the original's (a re-creation)"),
    ),
    insert("actions", "destination", Given("the submission's"), ORIGINALS),
    insert("actions", "after_key", Given("the submission's"), NONE),
    initial("claimed_by", "none"),
    initial("ownership_version", "0"),
    initial("revision", "1"),
    initial("lease_expires_at", "none"),
    initial("not_before", "none"),
    initial("attempts", "0"),
    initial("attempts_in_round", "0"),
    initial("assignee", "none"),
    initial("destination_id", "none"),
    initial("first_sent_at", "none"),
    initial("last_error", "none"),
    insert("actions", "created_at", NOW_OR_LATER, NOW_OR_LATER),
    insert("actions", "updated_at", Held("its creation time"), Held("its creation time")),
    initial("window_started_at", "none"),
    initial("late_results", "0"),
    initial("old_worker_may_act", "false"),
    initial("payload_revision", "1"),
    initial("idempotency_key", "none"),
    insert("actions", "updates_key", NONE, Held("the completed action an update action updates; none otherwise")),
    insert("actions", "updates_destination_id", NONE, Held("the updated action's destination id")),
    initial("may_have_written", "false"),
    workers("attempts", "id", SEQUENCE),
    workers("attempts", "action_key", Given("the claimed action's")),
    workers("attempts", "number", Given("the next")),
    workers("attempts", "worker", Given("the claim's worker")),
    workers("attempts", "ownership_version", Given("the claim's")),
    workers("attempts", "started_at", Given("the database's time (not checked)")),
    workers("attempts", "ended_at", NONE),
    workers("attempts", "outcome", NONE),
    workers("attempts", "error", NONE),
    workers("attempts", "response_status", NONE),
    workers("attempts", "destination_id", NONE),
    workers("attempts", "response_body", NONE),
    workers("attempts", "stale", Held("false")),
    workers("attempts", "acknowledged_by", NONE),
    workers("attempts", "acknowledged_at", NONE),
    workers("attempts", "idempotency_key", Given("the action's")),
    insert("audit_trail", "id", SEQUENCE, SEQUENCE),
    insert(
        "audit_trail",
        "action_key",
        Held("an action in the entry's state at the commit"),
        Held("an action in the entry's state at the commit"),
    ),
    insert("audit_trail", "at", NOW_OR_LATER, NOW_OR_LATER),
    insert("audit_trail", "actor", Given("the worker's or source's name"), Held("the person of the login")),
    insert("audit_trail", "actor_kind", Given("worker or source"), Held("person")),
    insert("audit_trail", "event", Given("the command's"), Given("the command's")),
    insert(
        "audit_trail",
        "from_state",
        Held("the state the action left (none for its creation)"),
        Held("the state the action left (none for its creation)"),
    ),
    insert(
        "audit_trail",
        "to_state",
        Held("the action's state at the commit"),
        Held("the action's state at the commit"),
    ),
    insert(
        "audit_trail",
        "ownership_version",
        Held("the action's after the change"),
        Held("the action's after the change"),
    ),
    insert(
        "audit_trail",
        "revision",
        Held("the action's after the change: not past it, not before the entry before"),
        Held("the action's after the change: not past it, not before the entry before"),
    ),
    insert("audit_trail", "reason", Given("the command's"), Given("the command's")),
    workers("deliveries", "id", SEQUENCE),
    workers("deliveries", "action_key", Held("the submitted action (created: inserted by the same transaction)")),
    workers("deliveries", "event_id", Given("the submission's")),
    workers("deliveries", "source", Given("the submission's")),
    workers("deliveries", "source_version", Given("the submission's")),
    workers("deliveries", "fingerprint", Held("the approved payload's, for a duplicate or a creation")),
    workers("deliveries", "outcome", Held("created only with the action inserted, duplicate only of its payload")),
    workers("deliveries", "received_at", NOW_OR_LATER),
    insert("lookups", "id", SEQUENCE, SEQUENCE),
    insert(
        "lookups",
        "action_key",
        Held("an unknown action, or one whose lookup entry the transaction writes"),
        Held("an unknown action, or one whose lookup entry the transaction writes"),
    ),
    insert("lookups", "at", NOW_OR_LATER, NOW_OR_LATER),
    insert("lookups", "actor", Given("the worker's name"), Held("the person of the login")),
    insert(
        "lookups",
        "verdict",
        Held("failed alone; any other with the lookup's audit entry by the same actor"),
        Held("failed alone; any other with the lookup's audit entry by the same actor"),
    ),
    insert("lookups", "records", Held("0 when failed"), Held("0 when failed")),
    insert("lookups", "destination_id", Held("none when failed"), Held("none when failed")),
    insert("lookups", "response_status", Given("the destination's answer"), Given("the destination's answer")),
    insert("lookups", "response_body", Given("the destination's answer"), Given("the destination's answer")),
    insert("lookups", "detail", Given("the lookup's"), Given("the lookup's")),
    workers("proposals", "id", SEQUENCE),
    workers("proposals", "action_key", Given("the submission's")),
    workers("proposals", "fingerprint", Held("the SHA-256 of the payload")),
    workers("proposals", "payload", Held("the submission's, with its fingerprint")),
    workers("proposals", "source", Given("the submission's")),
    workers("proposals", "event_id", Given("the submission's")),
    workers("proposals", "source_version", Given("the submission's")),
    workers("proposals", "received_at", NOW_OR_LATER),
    workers("proposals", "decision", NONE),
    workers("proposals", "decided_by", NONE),
    workers("proposals", "decided_at", NONE),
    workers("refused_submissions", "id", SEQUENCE),
    workers("refused_submissions", "received_at", Given("the database's time (not checked)")),
    workers("refused_submissions", "key_excerpt", Given("the refused submission's")),
    workers("refused_submissions", "problem", Given("the refusal's")),
    workers("refused_submissions", "message", Given("the refusal's")),
    workers("refused_submissions", "event_id", Given("the refused submission's")),
    workers("refused_submissions", "source", Given("the refused submission's")),
    workers("refused_submissions", "destination", Given("the refused submission's")),
];

/// The insert policy of one column, if a role inserts into its table.
pub fn insert_policy_of(table: &str, column: &str) -> Option<&'static InsertPolicy> {
    INSERT_POLICY.iter().find(|p| p.table == table && p.column == column)
}

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
    ) + &insert_policy_markdown()
}

/// The insert policy as docs/RULES.md shows it, after the update policy: one row per column of
/// each table a role inserts into.
fn insert_policy_markdown() -> String {
    let rows: Vec<String> = INSERT_POLICY
        .iter()
        .map(|p| format!("| {} | `{}` | {} | {} |\n", p.table, p.column, p.worker.describe(), p.reviewer.describe()))
        .collect();
    format!(
        "\nWhat a row a role inserts may hold (migrations 0095, 0096 and 0099): `none` and a value are all the column may \
         hold; a column the text calls the command's, the submission's or any may hold another value. A new action \
         also needs its `submitted` entry in the same transaction, and a lookup other than a failed one the \
         lookup's entry.\n\n| table | column | worker inserts | reviewer inserts |\n|---|---|---|---|\n{}",
        rows.concat()
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
    fn every_inserted_column_is_classified_once() {
        for (index, policy) in INSERT_POLICY.iter().enumerate() {
            let again = INSERT_POLICY[index + 1..].iter().any(|p| p.table == policy.table && p.column == policy.column);
            assert!(!again, "{}.{} is classified twice", policy.table, policy.column);
            assert!(
                policy_of(policy.table, policy.column).is_some(),
                "{}.{} is no column",
                policy.table,
                policy.column
            );
        }
    }

    #[test]
    fn the_rules_document_shows_the_column_guards() {
        crate::domain::generated_section::check(
            "docs/RULES.md",
            TABLE_BEGIN,
            TABLE_END,
            &policy_markdown(),
            "ACTIONLEDGER_UPDATE_RULES",
            "the column guards (POLICY in src/store/pg_guards.rs)",
            "cargo test --lib the_rules_document_shows_the_column_guards",
        );
    }
}
