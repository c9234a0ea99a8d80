//! Every statement exactly as the store sends it, for both dialects, as snapshots a review reads
//! as SQL; and the checks that keep the named texts whole.

use super::*;
use crate::store::sql_text;
use std::collections::BTreeSet;

/// Each statement of `dialect` by its name in the `.sql` files, generated ones for 1 and 3 rows.
// One list of every statement, in the order of the files, reads better than pieces of it.
#[allow(clippy::too_many_lines)]
fn sent(dialect: Dialect) -> Vec<(String, String)> {
    let postgres = matches!(dialect.params, Params::Numbered);
    let params = dialect.params;
    let mut sent: Vec<(String, String)> = Vec::new();
    let mut fixed = |name: &str, sql: &str| sent.push((name.to_owned(), sql.to_owned()));
    for (name, sql) in [
        ("select_action", SELECT_ACTION),
        ("after_links", AFTER_LINKS),
        ("renew_lease", RENEW_LEASE),
        ("count_stale_claims", COUNT_STALE_CLAIMS),
        ("count_late_results", COUNT_LATE_RESULTS),
        ("pending_backoffs", PENDING_BACKOFFS),
        ("ledger_stats", LEDGER_STATS),
        ("claimable_since_by_destination", CLAIMABLE_SINCE_BY_DESTINATION),
        ("count_by_state", COUNT_BY_STATE),
        ("count_waiting_by_after_state", COUNT_WAITING_BY_AFTER_STATE),
        ("count_proposed_elsewhere", COUNT_PROPOSED_ELSEWHERE),
        ("enforced_pairs", ENFORCED_PAIRS),
        ("attempt_started_under", ATTEMPT_STARTED_UNDER),
        ("cut_off_attempts", CUT_OFF_ATTEMPTS),
        ("select_attempt", SELECT_ATTEMPT),
        ("select_attempts", SELECT_ATTEMPTS),
        ("acknowledge_late_results", ACKNOWLEDGE_LATE_RESULTS),
        ("select_deliveries", SELECT_DELIVERIES),
        ("select_lookups", SELECT_LOOKUPS),
        ("unknown_lookup_failures", UNKNOWN_LOOKUP_FAILURES),
        ("select_audit", SELECT_AUDIT),
        ("latest_recorded_time", LATEST_RECORDED_TIME),
        ("select_proposals", SELECT_PROPOSALS),
        ("select_waiting_proposals", SELECT_WAITING_PROPOSALS),
        ("keep_proposal", KEEP_PROPOSAL),
        ("decide_proposal", DECIDE_PROPOSAL),
        ("insert_purge", INSERT_PURGE),
        ("select_purge_of", SELECT_PURGE_OF),
        ("applied_migrations", APPLIED_MIGRATIONS),
    ] {
        fixed(name, sql);
    }
    fixed("expired_claims", &expired_claims_sql(dialect));
    if postgres {
        for (name, sql) in [
            ("postgres_has_migrations", POSTGRES_HAS_MIGRATIONS),
            ("schema_exists", SCHEMA_EXISTS),
            ("ledger_in_public", LEDGER_IN_PUBLIC),
            ("public_migrations", PUBLIC_MIGRATIONS),
            ("public_functions", PUBLIC_FUNCTIONS),
            ("public_tables", PUBLIC_TABLES),
            ("serving_duties", PG_SERVING_DUTIES),
            ("grant_serve", PG_GRANT_SERVE),
        ] {
            fixed(name, sql);
        }
        for (name, sql) in [
            ("clock", dialect.clock),
            ("purge_permission", dialect.purge_permission),
            ("after_links_lock", dialect.after_links_lock),
        ] {
            fixed(name, sql.unwrap_or_default());
        }
    } else {
        fixed("sqlite_claim", &sqlite_claim_sql(false));
        fixed("sqlite_claim (one key)", &sqlite_claim_sql(true));
        fixed("sqlite_has_migrations", SQLITE_HAS_MIGRATIONS);
    }
    let mut generated = |name: &str, rows: &str, sql: String| sent.push((format!("{name} ({rows})"), sql));
    for n in [1, 3] {
        let rows = if n == 1 { "1 row".to_owned() } else { format!("{n} rows") };
        generated("lock_actions", &rows, lock_actions_sql(dialect, n));
        generated("select_states", &rows, select_states_sql(params, n));
        generated("insert_actions", &rows, insert_actions_sql(params, n));
        generated("update_actions", &rows, update_actions_sql(params, n));
        generated("count_attempts", &rows, count_attempts_sql(params, n));
        generated("insert_attempts", &rows, insert_attempts_sql(params, n));
        generated("finish_attempts", &rows, finish_attempts_sql(params, n));
        generated("insert_deliveries", &rows, insert_deliveries_sql(params, n));
        generated("append_audit", &rows, append_audit_sql(params, n));
        generated("purge_candidates", &rows, purge_candidates_sql(dialect, n));
        generated("empty_purged_actions", &rows, empty_purged_actions_sql(params, n));
        generated("delete_purged_proposals", &rows, delete_purged_proposals_sql(params, n));
        for (history, name) in
            PURGED_HISTORIES.iter().zip(["delete_purged_deliveries", "delete_purged_attempts", "delete_purged_lookups"])
        {
            generated(name, &rows, delete_purged_history_sql(params, history, n));
        }
        generated("mark_purged", &rows, mark_purged_sql(params, n));
        if postgres {
            let limit = i64::try_from(n).unwrap_or_default();
            generated("pg_claim_with_audit", &format!("limit {n}"), pg_claim_with_audit_sql(limit, false));
            generated("pg_claim_and_start", &format!("limit {n}"), pg_claim_and_start_sql(limit, false));
            if n == 1 {
                generated("pg_claim_with_audit", "one key", pg_claim_with_audit_sql(limit, true));
                generated("pg_claim_and_start", "one key", pg_claim_and_start_sql(limit, true));
            }
            generated("pg_lock_actions_now", &rows, pg_lock_actions_now_sql(n));
            generated("pg_start_attempts", &rows, pg_start_attempts_sql(n));
            generated("pg_update_actions_with_deferred", &format!("{rows}, 1 attempt, {n} entries"), {
                pg_update_actions_with_deferred_sql(n, n)
            });
            generated("pg_finish_attempts_with_audit", &format!("{rows}, {n} entries"), {
                pg_finish_attempts_with_audit_sql(n, n)
            });
        } else {
            generated("sqlite_start_attempts", &rows, sqlite_start_attempts_sql(n));
            generated("sqlite_update_actions_returning_id", &format!("{rows}, {n} attempts, {n} entries"), {
                sqlite_update_actions_with_deferred_sql(n, n, n)
            });
            generated("sqlite_update_actions_returning_id", &format!("{rows} alone"), {
                sqlite_update_actions_with_deferred_sql(n, 0, 0)
            });
        }
    }
    generated("insert_lookup", "1 row", insert_lookup_sql(params));
    generated("insert_refusal", "1 row", insert_refusal_sql(params));
    for (filter_name, filter) in filters() {
        let now = chrono::DateTime::UNIX_EPOCH;
        let texts = if postgres {
            [
                list_actions::<sqlx::Postgres>(&filter).sql().to_owned(),
                count_matching_by_state::<sqlx::Postgres>(&filter).sql().to_owned(),
                count_matching_notices::<sqlx::Postgres>(&filter, now).sql().to_owned(),
                list_refused::<sqlx::Postgres>(&filter).sql().to_owned(),
                count_refused::<sqlx::Postgres>(&filter).sql().to_owned(),
            ]
        } else {
            [
                list_actions::<sqlx::Sqlite>(&filter).sql().to_owned(),
                count_matching_by_state::<sqlx::Sqlite>(&filter).sql().to_owned(),
                count_matching_notices::<sqlx::Sqlite>(&filter, now).sql().to_owned(),
                list_refused::<sqlx::Sqlite>(&filter).sql().to_owned(),
                count_refused::<sqlx::Sqlite>(&filter).sql().to_owned(),
            ]
        };
        let names =
            ["list_actions", "count_matching_by_state", "count_matching_notices", "list_refused", "count_refused"];
        for (name, text) in names.into_iter().zip(texts) {
            generated(name, filter_name, text);
        }
    }
    sent
}

/// Filters that between them add every term [`list_actions`] knows.
fn filters() -> Vec<(&'static str, ListFilter)> {
    let everything = ListFilter {
        state: Some(State::Held),
        or_proposed: true,
        late_results: true,
        destination: Some("crm".to_owned()),
        owner: Some("ana".to_owned()),
        created_since: Some(crate::domain::Timestamp::UNIX_EPOCH),
        updated_before: Some(crate::domain::Timestamp::UNIX_EPOCH),
        key_contains: Some("order".to_owned()),
        before_id: Some(500),
        limit: 50,
        ..ListFilter::default()
    };
    vec![
        ("no filter", ListFilter { limit: 50, ..ListFilter::default() }),
        (
            "a pane's next page",
            ListFilter { state: Some(State::Pending), before_id: Some(500), limit: 50, ..ListFilter::default() },
        ),
        ("every term", everything.clone()),
        (
            "most attempts, newer rows",
            ListFilter { order: ListOrder::MostAttempts, before_id: None, after_id: Some(500), ..everything.clone() },
        ),
        (
            "oldest first, at a cursor",
            ListFilter { order: ListOrder::OldestFirst, start: PageStart::AtCursor, ..everything },
        ),
    ]
}

fn snapshot(dialect: Dialect) -> String {
    sent(dialect).into_iter().map(|(name, sql)| format!("-- {name}\n{sql};\n")).collect::<Vec<_>>().join("\n")
}

#[test]
fn sqlite_statements_as_sent() {
    insta::assert_snapshot!("sqlite", snapshot(SQLITE));
}

#[test]
fn postgres_statements_as_sent() {
    insta::assert_snapshot!("postgres", snapshot(POSTGRES));
}

/// The name a snapshot entry has in the `.sql` files: the label without its row count.
fn file_name(label: &str) -> &str {
    label.split(" (").next().unwrap_or(label)
}

#[test]
fn every_named_statement_is_sent_and_every_sent_one_is_named() {
    let in_files: BTreeSet<&str> = FILES.iter().flat_map(|(_, file)| sql_text::names(file)).collect();
    let sent: Vec<(String, String)> = sent(SQLITE).into_iter().chain(sent(POSTGRES)).collect();
    let sent: BTreeSet<&str> = sent.iter().map(|(label, _)| file_name(label)).collect();
    assert_eq!(in_files, sent, "the `.sql` files and the snapshot list name different statements");
    for (file, text) in FILES {
        let names = sql_text::names(text);
        let unique: BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len(), "{file} names a statement twice");
    }
}

/// Whitespace runs as one space, none inside parentheses' edges: two layouts of one text compare
/// equal.
fn normalized(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ").replace("( ", "(").replace(" )", ")")
}

#[test]
fn statements_that_read_whole_actions_read_every_column() {
    let select = normalized(SELECT_ACTION);
    let columns = select.strip_prefix("SELECT ").and_then(|rest| rest.split(" FROM ").next()).unwrap();
    assert!(columns.ends_with("updates_destination_id"), "{columns}");
    for (name, sql) in [
        ("sqlite_claim", sqlite_claim_sql(false)),
        ("pg_claim_with_audit", pg_claim_with_audit_sql(1, false)),
        ("pg_claim_and_start", pg_claim_and_start_sql(1, false)),
        ("lock_actions", lock_actions_sql(SQLITE, 1)),
        ("pg_lock_actions_now", pg_lock_actions_now_sql(1)),
        ("insert_actions", insert_actions_sql(Params::Numbered, 1)),
        ("expired_claims", expired_claims_sql(SQLITE)),
        ("list_actions", LIST_ACTIONS.to_owned()),
    ] {
        assert!(normalized(&sql).contains(columns), "{name} does not read every column of actions");
    }
}

#[test]
fn a_statement_sent_as_one_has_no_statement_separator_left() {
    for (label, sql) in sent(SQLITE).into_iter().chain(sent(POSTGRES)) {
        let several = label.starts_with("sqlite_start_attempts")
            || (label.starts_with("sqlite_update_actions") && !label.ends_with("alone)"));
        assert_eq!(sql.contains(';'), several, "{label}");
        assert!(!sql.contains('{'), "{label} has a hole left: {sql}");
        assert!(sql == sql.trim(), "{label} starts or ends with white space");
    }
}
