//! Every statement on a hot path is served by an index, on both stores: checked with EXPLAIN
//! (with sequential scans discouraged on PostgreSQL, where a small table would otherwise be scanned
//! whatever the indexes).

use crate::support;
use actionledger::store::hot_statements;

/// Names the hot statements give their own rows: CTEs and VALUES lists.
const OWN_ROWS: [&str; 4] = ["picked", "changed", "finished", "3 CONSTANT ROWS"];

#[tokio::test]
async fn sqlite_hot_statements_use_indexes() {
    let db = support::sqlite().await;
    let pool = db.ledger.store().pool();
    for (name, sql) in hot_statements(false) {
        let plan: Vec<(i64, i64, i64, String)> =
            sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}"))).fetch_all(pool).await.unwrap();
        let details: Vec<&str> = plan.iter().map(|row| row.3.as_str()).collect();
        // Scans of a statement's own rows (its VALUES lists, CTEs and JSON arrays) are expected;
        // a scan of anything else without an index is not.
        let full_scans: Vec<&&str> = details
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
async fn postgres_hot_statements_use_indexes() {
    use sqlx::Connection as _;
    let Some(url) = support::pg::fresh_database().await else { return };
    let _store = actionledger::store::PostgresStore::open(&url).await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("SET enable_seqscan = off").execute(&mut conn).await.unwrap();
    for (n, (name, sql)) in hot_statements(true).into_iter().enumerate() {
        sqlx::query(sqlx::AssertSqlSafe(format!("PREPARE hot{n} AS {sql}"))).execute(&mut conn).await.unwrap();
        let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT cardinality(parameter_types)::bigint FROM pg_prepared_statements WHERE name = 'hot{n}'"
        )))
        .fetch_one(&mut conn)
        .await
        .unwrap();
        let args = vec!["'1'"; usize::try_from(count).unwrap()].join(", ");
        let execute =
            if count == 0 { format!("EXPLAIN EXECUTE hot{n}") } else { format!("EXPLAIN EXECUTE hot{n}({args})") };
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(execute)).fetch_all(&mut conn).await.unwrap();
        let seq: Vec<&String> = plan.iter().filter(|line| line.contains("Seq Scan")).collect();
        assert!(seq.is_empty(), "{name} scans a whole table:\n{}", plan.join("\n"));
    }
}
