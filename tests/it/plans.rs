//! Every statement on a hot path is served by an index, on both stores: checked with EXPLAIN on
//! the very text the store sends (with sequential scans discouraged on PostgreSQL, where a small
//! table would otherwise be scanned whatever the indexes).

use crate::support;
use actionledger::domain::{State, Timestamp};
use actionledger::store::{ListFilter, ListOrder, hot_statements, list_statement};

/// Names the hot statements give their own rows: CTEs and VALUES lists.
const OWN_ROWS: [&str; 4] = ["picked", "changed", "finished", "3 CONSTANT ROWS"];

/// The lists workers and consoles ask for, each with the index that must find its rows (and
/// give them in id order, so that a page never sorts).
fn hot_lists() -> Vec<(&'static str, ListFilter, &'static str)> {
    let pane = ListFilter { state: Some(State::Pending), limit: 50, ..ListFilter::default() };
    let search = ListFilter { key_contains: Some("order-1".to_owned()), ..pane.clone() };
    vec![
        ("a pane's first page", pane.clone(), "actions_state"),
        ("a pane's next page", ListFilter { before_id: Some(500), ..pane.clone() }, "actions_state"),
        ("a pane's newer rows", ListFilter { after_id: Some(500), ..pane.clone() }, "actions_state"),
        ("a pane searched by key", search.clone(), "actions_state"),
        ("a searched pane's next page", ListFilter { before_id: Some(500), ..search.clone() }, "actions_state"),
        ("a searched pane's newer rows", ListFilter { after_id: Some(500), ..search }, "actions_state"),
        ("uncertain outcomes to settle", ListFilter { state: Some(State::Unknown), ..pane }, "actions_state"),
        (
            "a destination's actions",
            ListFilter {
                destination: Some("crm".to_owned()),
                before_id: Some(500),
                limit: 50,
                ..ListFilter::default()
            },
            "actions_destination",
        ),
    ]
}

/// The other lists (the command line's filters, reconciliation's pages): no index has their
/// columns, so they walk actions newest first and stop at the limit, but must never sort.
fn other_lists() -> Vec<(&'static str, ListFilter)> {
    let since = Some(Timestamp::UNIX_EPOCH);
    vec![
        ("every action", ListFilter { limit: 50, ..ListFilter::default() }),
        ("an owner's actions", ListFilter { owner: Some("ana".to_owned()), limit: 50, ..ListFilter::default() }),
        ("the late pane", ListFilter { late_results: true, limit: 50, ..ListFilter::default() }),
        (
            "the late pane's next page",
            ListFilter { late_results: true, before_id: Some(500), limit: 50, ..ListFilter::default() },
        ),
        ("a reconciliation's first page", ListFilter { created_since: since, limit: 50, ..ListFilter::default() }),
        (
            "a reconciliation's next page",
            ListFilter { created_since: since, before_id: Some(500), limit: 50, ..ListFilter::default() },
        ),
        (
            "every filter at once",
            ListFilter {
                state: Some(State::Held),
                destination: Some("crm".to_owned()),
                owner: Some("ana".to_owned()),
                before_id: Some(500),
                created_since: since,
                key_contains: Some("order".to_owned()),
                limit: 50,
                ..ListFilter::default()
            },
        ),
    ]
}

/// The conflict pane's pages: conflicts first, then the proposals waiting in other states, newest
/// proposal first. No index has that order, so its rows are sorted; but only its own rows, found
/// through the state and proposal indexes, never by walking every action.
fn conflict_pane() -> Vec<(&'static str, ListFilter)> {
    let pane = ListFilter { state: Some(State::Conflict), or_proposed: true, limit: 50, ..ListFilter::default() };
    vec![
        ("the conflict pane's first page", pane.clone()),
        ("the conflict pane's next page", ListFilter { before_id: Some(500), ..pane.clone() }),
        ("the conflict pane's newer rows", ListFilter { after_id: Some(500), ..pane.clone() }),
        ("the conflict pane oldest first", ListFilter { order: ListOrder::OldestFirst, ..pane }),
    ]
}

/// Which way a page's keyset cursor points, if it has one: the index must start there rather
/// than walk from the newest row.
fn cursor(filter: &ListFilter) -> Option<&'static str> {
    match (filter.before_id, filter.after_id) {
        (Some(_), _) => Some("<"),
        (_, Some(_)) => Some(">"),
        _ => None,
    }
}

async fn sqlite_plan(pool: &sqlx::SqlitePool, sql: &str) -> Vec<String> {
    let plan: Vec<(i64, i64, i64, String)> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}"))).fetch_all(pool).await.unwrap();
    plan.into_iter().map(|row| row.3).collect()
}

#[tokio::test]
async fn sqlite_hot_statements_use_indexes() {
    let db = support::sqlite().await;
    let pool = db.ledger.store().pool();
    for (name, sql) in hot_statements(false) {
        let details = sqlite_plan(pool, &sql).await;
        // Scans of a statement's own rows (its VALUES lists, CTEs and JSON arrays) are expected;
        // a scan of anything else without an index is not.
        let full_scans: Vec<&String> = details
            .iter()
            .filter(|d| {
                let Some(scanned) = d.strip_prefix("SCAN ") else { return false };
                let own_rows = OWN_ROWS.iter().any(|own| scanned.starts_with(own));
                !own_rows && !scanned.contains("USING") && !scanned.contains("json_each")
            })
            .collect();
        assert!(full_scans.is_empty(), "{name} scans a whole table: {details:?}");
    }
}

#[tokio::test]
async fn sqlite_lists_use_their_index_and_never_sort() {
    let db = support::sqlite().await;
    let pool = db.ledger.store().pool();
    for (name, filter, index) in hot_lists() {
        let details = sqlite_plan(pool, &list_statement(false, &filter)).await;
        let searched = details.iter().any(|d| d.starts_with(&format!("SEARCH actions USING INDEX {index} (")));
        assert!(searched, "{name} is not served by {index}: {details:?}");
        if let Some(towards) = cursor(&filter) {
            let starts = details.iter().any(|d| d.contains(&format!("id{towards}?")));
            assert!(starts, "{name} does not start at its cursor: {details:?}");
        }
        assert!(!details.iter().any(|d| d.contains("TEMP B-TREE")), "{name} sorts: {details:?}");
    }
    for (name, filter) in other_lists() {
        let details = sqlite_plan(pool, &list_statement(false, &filter)).await;
        assert!(!details.iter().any(|d| d.contains("TEMP B-TREE")), "{name} sorts: {details:?}");
    }
    for (name, filter) in conflict_pane() {
        let details = sqlite_plan(pool, &list_statement(false, &filter)).await;
        let walks = details.iter().any(|d| d.starts_with("SCAN ") && !d.contains("USING") && !d.contains("CONSTANT"));
        assert!(!walks, "{name} walks a whole table: {details:?}");
        for index in ["actions_state", "actions_proposed"] {
            assert!(details.iter().any(|d| d.contains(index)), "{name} does not use {index}: {details:?}");
        }
    }
}

/// The plan of `sql` with every parameter `'1'`.
async fn postgres_plan(conn: &mut sqlx::PgConnection, name: &str, sql: &str) -> Vec<String> {
    sqlx::query(sqlx::AssertSqlSafe(format!("PREPARE {name} AS {sql}"))).execute(&mut *conn).await.unwrap();
    let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT cardinality(parameter_types)::bigint FROM pg_prepared_statements WHERE name = '{name}'"
    )))
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    let args = vec!["'1'"; usize::try_from(count).unwrap()].join(", ");
    let execute =
        if count == 0 { format!("EXPLAIN EXECUTE {name}") } else { format!("EXPLAIN EXECUTE {name}({args})") };
    sqlx::query_scalar(sqlx::AssertSqlSafe(execute)).fetch_all(&mut *conn).await.unwrap()
}

/// A connection to a fresh ledger that avoids sequential scans wherever an index could serve.
async fn postgres_connection() -> Option<sqlx::PgConnection> {
    let url = support::pg::fresh_database().await?;
    let store = actionledger::store::PostgresStore::open(&url).await.unwrap();
    // One of the store's own connections: it works in the ledger's schema.
    let mut conn = store.pool().acquire().await.unwrap().detach();
    sqlx::query("SET enable_seqscan = off").execute(&mut conn).await.unwrap();
    Some(conn)
}

#[tokio::test]
async fn postgres_hot_statements_use_indexes() {
    let Some(mut conn) = postgres_connection().await else { return };
    for (n, (name, sql)) in hot_statements(true).into_iter().enumerate() {
        let plan = postgres_plan(&mut conn, &format!("hot{n}"), &sql).await;
        let seq: Vec<&String> = plan.iter().filter(|line| line.contains("Seq Scan")).collect();
        assert!(seq.is_empty(), "{name} scans a whole table:\n{}", plan.join("\n"));
    }
}

#[tokio::test]
async fn postgres_lists_use_their_index_and_never_sort() {
    let Some(mut conn) = postgres_connection().await else { return };
    for (n, (name, filter, index)) in hot_lists().into_iter().enumerate() {
        let plan = postgres_plan(&mut conn, &format!("hot_list{n}"), &list_statement(true, &filter)).await;
        let searched = plan.iter().any(|line| line.contains(&format!(" using {index} on actions")));
        assert!(searched, "{name} is not served by {index}:\n{}", plan.join("\n"));
        if let Some(towards) = cursor(&filter) {
            let starts =
                plan.iter().any(|line| line.contains("Index Cond:") && line.contains(&format!("(id {towards} ")));
            assert!(starts, "{name} does not start at its cursor:\n{}", plan.join("\n"));
        }
        assert!(!plan.iter().any(|line| line.contains("Sort")), "{name} sorts:\n{}", plan.join("\n"));
    }
    for (n, (name, filter)) in other_lists().into_iter().enumerate() {
        let plan = postgres_plan(&mut conn, &format!("other_list{n}"), &list_statement(true, &filter)).await;
        assert!(!plan.iter().any(|line| line.contains("Sort")), "{name} sorts:\n{}", plan.join("\n"));
        let seq: Vec<&String> = plan.iter().filter(|line| line.contains("Seq Scan")).collect();
        assert!(seq.is_empty(), "{name} scans a whole table:\n{}", plan.join("\n"));
    }
    for (n, (name, filter)) in conflict_pane().into_iter().enumerate() {
        let plan = postgres_plan(&mut conn, &format!("conflict_pane{n}"), &list_statement(true, &filter)).await;
        let seq: Vec<&String> = plan.iter().filter(|line| line.contains("Seq Scan")).collect();
        assert!(seq.is_empty(), "{name} scans a whole table:\n{}", plan.join("\n"));
        for index in ["actions_state", "actions_proposed"] {
            assert!(plan.iter().any(|line| line.contains(index)), "{name} does not use {index}:\n{}", plan.join("\n"));
        }
    }
}
