//! The PostgreSQL guards made cheaper per action (migration 0016) decide as before: each session
//! is given the same duties, the value lists hold on every column that had them, and no table
//! keeps a CHECK constraint that lists values (those are re-read at each statement).

use crate::roles::{database_name, exec, ledger, url_as};
use actionledger::Ledger;
use actionledger::domain::{ActorKind, AttemptOutcome, Event, RawSubmission, State};
use actionledger::store::{PostgresStore, Store};

/// The duties the database gives a session, as actionledger_session_duties() answers them.
async fn duties_of(pool: &sqlx::PgPool) -> i32 {
    sqlx::query_scalar("SELECT actionledger_session_duties()").fetch_one(pool).await.unwrap()
}

/// A pool on the ledger's schema, logged in as a new login (`name`, unique to this test database)
/// that is a member of `groups`.
async fn session_in(admin: &Ledger<PostgresStore>, url: &str, name: &str, groups: &[&str]) -> sqlx::PgPool {
    let login = format!("{}_{name}", database_name(url));
    let groups = groups.join(", ");
    exec(admin, &format!("CREATE ROLE {login} LOGIN PASSWORD 'secret-{login}' IN ROLE {groups}")).await.unwrap();
    let store = PostgresStore::open_with(&url_as(url, &login, &format!("secret-{login}")), 1)
        .await
        .unwrap_or_else(|e| panic!("a member of {groups} opens the ledger: {e}"));
    store.pool().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_session_is_given_the_duties_it_had() {
    let Some((admin, url)) = ledger().await else { return };
    // The superuser holds every role: both duties.
    assert_eq!(duties_of(admin.store().pool()).await, 3, "the superuser");
    let worker = session_in(&admin, &url, "w", &["actionledger_worker"]).await;
    assert_eq!(duties_of(&worker).await, 1, "a worker");
    let reviewer = session_in(&admin, &url, "r", &["actionledger_reviewer"]).await;
    assert_eq!(duties_of(&reviewer).await, 2, "a reviewer");
    let viewer = session_in(&admin, &url, "v", &["actionledger_viewer"]).await;
    assert_eq!(duties_of(&viewer).await, 0, "a viewer");
    // A member of the owner role holds neither duty: only the owner's query says it may do all.
    let owner = session_in(&admin, &url, "o", &["actionledger_owner"]).await;
    assert_eq!(duties_of(&owner).await, 3, "a member of the owner role");
    // A worker that was granted the grant option the owner test looks for first is still a worker.
    exec(&admin, &format!("GRANT TRIGGER ON actions TO {}_w WITH GRANT OPTION", database_name(&url))).await.unwrap();
    assert_eq!(duties_of(&worker).await, 1, "a worker with a grant option on actions");
    let worker_who_owns = session_in(&admin, &url, "wo", &["actionledger_worker", "actionledger_owner"]).await;
    assert_eq!(duties_of(&worker_who_owns).await, 3, "a worker that is also a member of the owner role");
    // And what each may do follows: a worker still may not cancel, the owner's member still may.
    admin
        .submit(&RawSubmission {
            key: Some("g:1".into()),
            payload: b"{}".to_vec(),
            source: Some("shop".into()),
            ..RawSubmission::default()
        })
        .await
        .unwrap();
    let cancel = "UPDATE actions SET state = 'cancelled' WHERE key = 'g:1'";
    match sqlx::query(cancel).execute(&worker).await {
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42501") => {}
        other => panic!("a worker must not cancel: {other:?}"),
    }
    assert_eq!(sqlx::query(cancel).execute(&worker_who_owns).await.unwrap().rows_affected(), 1);
}

/// The domain of each column that had a list of values, as information_schema names it.
async fn domain_of(pool: &sqlx::PgPool, table: &str, column: &str) -> Option<String> {
    sqlx::query_scalar(
        "SELECT domain_name::text FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2",
    )
    .bind(table)
    .bind(column)
    .fetch_one(pool)
    .await
    .unwrap_or_else(|e| panic!("{table}.{column}: {e}"))
}

/// The values a domain's constraint accepts, from the database's own text of it.
async fn domain_values(pool: &sqlx::PgPool, domain: &str) -> std::collections::BTreeSet<String> {
    let definition: String = sqlx::query_scalar(
        "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c \
         WHERE c.contypid = to_regtype(current_schema() || '.' || $1)",
    )
    .bind(domain)
    .fetch_one(pool)
    .await
    .unwrap_or_else(|e| panic!("{domain}: {e}"));
    definition.split('\'').skip(1).step_by(2).map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_value_lists_are_domains_on_every_column_that_had_one() {
    let Some((admin, _url)) = ledger().await else { return };
    let pool = admin.store().pool();
    for (table, column, domain) in [
        ("actions", "state", "actionledger_state"),
        ("actions", "resume_state", "actionledger_state"),
        ("audit_trail", "from_state", "actionledger_state"),
        ("audit_trail", "to_state", "actionledger_state"),
        ("audit_trail", "event", "actionledger_event"),
        ("audit_trail", "actor_kind", "actionledger_actor_kind"),
        ("attempts", "outcome", "actionledger_attempt_outcome"),
    ] {
        assert_eq!(domain_of(pool, table, column).await.as_deref(), Some(domain), "{table}.{column}");
    }
    let strings = |values: Vec<&str>| values.into_iter().map(str::to_owned).collect::<std::collections::BTreeSet<_>>();
    assert_eq!(
        domain_values(pool, "actionledger_state").await,
        strings(State::ALL.iter().map(|s| s.as_str()).collect())
    );
    assert_eq!(
        domain_values(pool, "actionledger_event").await,
        strings(Event::ALL.iter().map(|e| e.as_str()).collect())
    );
    assert_eq!(
        domain_values(pool, "actionledger_actor_kind").await,
        strings([ActorKind::Worker, ActorKind::Person, ActorKind::Source].iter().map(|k| k.as_str()).collect())
    );
    assert_eq!(
        domain_values(pool, "actionledger_attempt_outcome").await,
        strings(AttemptOutcome::ALL.iter().map(|o| o.as_str()).collect())
    );

    // Refused as before (SQLSTATE 23514), even for the superuser, and nothing changes.
    admin
        .submit(&RawSubmission {
            key: Some("v:1".into()),
            payload: b"{}".to_vec(),
            source: Some("shop".into()),
            ..RawSubmission::default()
        })
        .await
        .unwrap();
    for bad in [
        "UPDATE actions SET state = 'nowhere' WHERE key = 'v:1'",
        "UPDATE actions SET resume_state = 'nowhere' WHERE key = 'v:1'",
        "INSERT INTO audit_trail (action_key, at, actor, actor_kind, event, to_state, ownership_version, revision) \
         VALUES ('v:1', 0, 'w', 'robot', 'claimed', 'in_progress', 0, 1)",
        "INSERT INTO audit_trail (action_key, at, actor, actor_kind, event, from_state, to_state, ownership_version, \
         revision) VALUES ('v:1', 0, 'w', 'worker', 'claimed', 'limbo', 'in_progress', 0, 1)",
    ] {
        match exec(&admin, bad).await {
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("23514") => {}
            other => panic!("{bad} must be refused as an unknown value, got {other:?}"),
        }
    }
    let record = admin.store().find(&actionledger::domain::ActionKey::parse("v:1").unwrap()).await.unwrap().unwrap();
    assert_eq!(record.state, State::Pending);

    // No CHECK constraint on the tables of the per-action path lists values: such a list is
    // re-read from its text at every statement that writes the table.
    let listing: Vec<String> = sqlx::query_scalar(
        "SELECT conrelid::regclass::text || ' ' || conname::text FROM pg_constraint \
         WHERE contype = 'c' AND conrelid IN ('actions'::regclass, 'audit_trail'::regclass, 'attempts'::regclass) \
           AND pg_get_constraintdef(oid) LIKE '%ARRAY[%'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(listing.is_empty(), "value lists left as CHECK constraints: {listing:?}");
}
