//! The integration tests, as one binary: each module was once a binary of its own, and each of
//! those linked sqlx, ratatui and reqwest again. One link after a change to the crate instead of
//! one per suite; run one suite with `cargo test --test it <module>::`.

#[macro_use]
mod support;

mod bench;
mod blocked;
mod bounds;
mod canon;
mod claim_start;
mod cli;
mod column_guards;
mod concurrency;
mod conformance;
mod connections;
mod console;
mod console_bulk;
mod console_detail;
mod console_triage;
mod contract;
mod crash;
mod db_faults;
mod destinations;
mod docs;
mod drain;
mod evidence;
mod frontends;
mod guard_cost;
mod hostile;
mod keys;
mod late;
mod layering;
mod model;
mod observability;
mod packaging;
mod pause;
mod per_action;
mod plans;
mod properties;
mod read_only;
mod reconcile;
mod register;
mod retention;
mod review_owners;
mod roles;
mod scale;
mod schema;
mod schema_file;
mod secrets;
mod serve;
mod serve_hooks;
mod sim_crm;
mod sqlite_commands;
mod stops;
mod storage;
mod submissions;
mod tls;
mod tmux;
mod updates;
mod wait;
mod wake;
mod worker;
