//! PostgreSQL for tests: a fresh database on the throwaway server, or a loud skip outside CI.

pub use actionledger::testkit::throwaway_pg::URL_VARIABLE;

/// Creates an empty database and returns its URL; `None` (after a loud message) if PostgreSQL is
/// unavailable here. With `CI=true` a missing PostgreSQL fails the test instead.
pub async fn fresh_database() -> Option<String> {
    match actionledger::testkit::throwaway_pg::fresh_database().await {
        Ok(url) => Some(url),
        Err(why) => {
            assert!(
                !std::env::var("CI").is_ok_and(|v| v == "true"),
                "PostgreSQL is required in CI but could not be started: {why}"
            );
            eprintln!(
                "\n!!! SKIPPING a PostgreSQL test: {why}\n!!! Install PostgreSQL (initdb, pg_ctl) or set {URL_VARIABLE}.\n"
            );
            None
        }
    }
}

/// A PostgreSQL server of the test's own, to stop and start without taking any other test's
/// database away; `None` (after a loud message) if none can be had here. With `CI=true` a missing
/// PostgreSQL fails the test instead.
pub fn private_server() -> Option<actionledger::testkit::throwaway_pg::PrivateCluster> {
    private_server_with("")
}

/// A [`private_server`] started with server options of the test's own.
pub fn private_server_with(options: &str) -> Option<actionledger::testkit::throwaway_pg::PrivateCluster> {
    match actionledger::testkit::throwaway_pg::start_private_server_with(options) {
        Ok(cluster) => Some(cluster),
        Err(why) => {
            assert!(
                !std::env::var("CI").is_ok_and(|v| v == "true"),
                "PostgreSQL is required in CI but a server of its own could not be started: {why}"
            );
            eprintln!("\n!!! SKIPPING a PostgreSQL test: no server of its own: {why}\n");
            None
        }
    }
}
