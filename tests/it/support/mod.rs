//! Test databases: a fresh SQLite file per test, and a fresh PostgreSQL database per test on a
//! throwaway cluster that this test process starts (or on `ACTIONLEDGER_TEST_PG_URL`); with them
//! the simulated CRM's destination kinds (`crm`), the binary as a child process (`process`) and
//! Prometheus's checker (`promtool`).

pub mod crm;
pub mod pg;
pub mod process;
pub mod promtool;

use actionledger::Ledger;
use actionledger::store::{PostgresStore, SqliteStore};

/// A submission from the shop for the `crm` destination.
pub fn order(key: &str, payload: &str) -> actionledger::domain::RawSubmission {
    actionledger::domain::RawSubmission {
        key: Some(key.to_owned()),
        payload: payload.as_bytes().to_vec(),
        destination: Some("crm".to_owned()),
        source: Some("shop".to_owned()),
        ..actionledger::domain::RawSubmission::default()
    }
}

/// A command by Ana Lima, who checked the CRM by hand, on the action with key `key`.
pub fn person_request(key: &str, command: actionledger::domain::ManualCommand) -> actionledger::ledger::ManualRequest {
    actionledger::ledger::ManualRequest {
        key: actionledger::domain::ActionKey::parse(key).expect("a valid key"),
        person: actionledger::domain::Person::parse("Ana Lima").expect("a valid name"),
        reason: actionledger::domain::Reason::parse("checked the CRM by hand").expect("a valid reason"),
        expect_version: None,
        command,
        old_worker_stopped: false,
        confirmed_not_written: false,
    }
}

/// Ana Lima's cancellation of `key`, with her word that the destination holds no record of it:
/// what a cancellation of an action a request may have written needs.
pub fn checked_cancel(key: &str) -> actionledger::ledger::ManualRequest {
    actionledger::ledger::ManualRequest {
        confirmed_not_written: true,
        ..person_request(key, actionledger::domain::ManualCommand::Cancel)
    }
}

/// The same ledger, deciding as if the destinations named (the first also for actions without
/// one) protect against a repeat with a lookup by external reference.
pub fn protected_by_lookup<S: actionledger::store::Store>(ledger: &Ledger<S>, destinations: &[&str]) -> Ledger<S> {
    let lookup = actionledger::domain::Capabilities { idempotency_retention: None, lookup: true, ..Default::default() };
    ledger.clone().with_destinations(actionledger::domain::DestinationCatalog::new(
        destinations.iter().map(|name| ((*name).to_owned(), lookup)).collect(),
        destinations.first().map(|name| (*name).to_owned()),
    ))
}

/// Keeps a test database alive for as long as the test holds it.
pub struct TestDb<S> {
    pub ledger: Ledger<S>,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

pub async fn sqlite() -> TestDb<SqliteStore> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let url = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let store = SqliteStore::open(&url).await.expect("open the SQLite ledger");
    TestDb { ledger: Ledger::new(store), url, _dir: Some(dir) }
}

/// A fresh PostgreSQL ledger, or `None` (after a loud message) when no PostgreSQL can be had
/// outside CI. With `CI=true` a missing PostgreSQL fails the test instead.
pub async fn postgres() -> Option<TestDb<PostgresStore>> {
    let url = pg::fresh_database().await?;
    let store = PostgresStore::open(&url).await.expect("open the PostgreSQL ledger");
    Some(TestDb { ledger: Ledger::new(store), url, _dir: None })
}

/// Runs one generic test body against both stores: `conformance!(name1, name2, ...)` expects
/// `async fn name<S: Store>(db: TestDb<S>)` in scope and makes `sqlite::name` and `postgres::name`.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::support::sqlite().await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let Some(db) = $crate::support::postgres().await else { return };
                    super::$name(db).await;
                }
            )*
        }
    };
}

/// A console screen with what changes from run to run (times, ages, countdowns) replaced, so that
/// screens can be compared and kept as snapshots.
pub fn mask_times(screen: &str) -> String {
    let word = |word: &str| {
        let chars: Vec<char> = word.chars().collect();
        let digits_then_unit = chars.len() > 1
            && chars[..chars.len() - 1].iter().all(char::is_ascii_digit)
            && matches!(chars[chars.len() - 1], 's' | 'm' | 'h' | 'd');
        let clock = chars.len() == 8 && chars[2] == ':' && chars[5] == ':';
        let date = chars.len() == 10 && chars[4] == '-' && chars[7] == '-';
        if digits_then_unit {
            "Ns".to_owned()
        } else if clock {
            "hh:mm:ss".to_owned()
        } else if date {
            "YYYY-MM-DD".to_owned()
        } else {
            word.to_owned()
        }
    };
    screen.lines().map(|line| line.split(' ').map(word).collect::<Vec<_>>().join(" ")).collect::<Vec<_>>().join("\n")
}

/// Runs the binary on the ledger at `url` with `args`, away from any ledger the environment
/// names, without colour.
pub fn run_cli(url: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_actionledger"))
        .env_remove("ACTIONLEDGER_DB")
        .env_remove("DATABASE_URL")
        .env("NO_COLOR", "1")
        .current_dir(std::env::temp_dir())
        .args(["--db", url])
        .args(args)
        .output()
        .expect("run actionledger")
}
