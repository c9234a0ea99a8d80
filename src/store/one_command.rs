//! A short SQLite write transaction sent in as few commands as its statements allow.
//!
//! sqlx-sqlite runs each command on the connection's own thread, and each command is a hop there
//! and back, made while the write lock is held once the transaction has begun; sqlx's own
//! transaction sends `BEGIN` and `COMMIT` as commands of their own. Here `BEGIN IMMEDIATE` goes
//! with the transaction's first statements and `COMMIT` with its last (see
//! [`Dialect::statements_in_one_command`](super::backend::Dialect::statements_in_one_command)):
//! a claim is two commands instead of four (six when it starts attempts), the start of attempts
//! one instead of four (docs/BENCHMARKS.md, "The drain").
//!
//! sqlx does not know of such a transaction and cannot roll it back. So a connection whose
//! transaction may still be open (a statement failed, or the caller went away while a command
//! ran) is closed instead of going back to the pool, and SQLite rolls back what a closing
//! connection left open; only a command that ended with a successful `COMMIT` gives the
//! connection back.

use super::backend::{Backend, Statement};
use sqlx::pool::PoolConnection;

/// A write transaction on one pooled connection, begun and committed inside its commands.
pub(crate) struct OneCommandTx<B: Backend> {
    connection: PoolConnection<B>,
    /// Whether a transaction may be open on the connection: from the first command until a
    /// `COMMIT` succeeded.
    open: bool,
}

impl<B: Backend> OneCommandTx<B> {
    /// Takes a connection from the pool; nothing is sent yet.
    pub(crate) async fn acquire(pool: &sqlx::Pool<B>) -> Result<Self, sqlx::Error> {
        Ok(Self { connection: pool.acquire().await?, open: false })
    }

    /// Begins the transaction (the dialect's `BEGIN`, which takes the write lock) and runs
    /// `statement` in the same command; answers its rows.
    pub(crate) async fn begin_with(&mut self, statement: Statement<B>) -> Result<Vec<B::Row>, sqlx::Error> {
        self.send(statement.after(B::DIALECT.begin)).await
    }

    /// Runs `statement`, if any, and commits, in one command; answers its rows.
    pub(crate) async fn commit_with(mut self, statement: Option<Statement<B>>) -> Result<Vec<B::Row>, sqlx::Error> {
        let statement = statement.map_or_else(|| Statement::new("COMMIT"), |statement| statement.push("; COMMIT"));
        let rows = self.send(statement).await?;
        self.open = false;
        Ok(rows)
    }

    /// The whole transaction in one command: begins, runs `statement`, commits.
    pub(crate) async fn run(mut self, statement: Statement<B>) -> Result<Vec<B::Row>, sqlx::Error> {
        let rows = self.send(statement.after(B::DIALECT.begin).push("; COMMIT")).await?;
        self.open = false;
        Ok(rows)
    }

    async fn send(&mut self, statement: Statement<B>) -> Result<Vec<B::Row>, sqlx::Error> {
        self.open = true;
        // Every row, not the first only: a fetch of one row stops the command at the statement
        // that gave it, and the statements after it (the `COMMIT`) would never run.
        B::fetch_all(&mut *self.connection, statement).await
    }
}

impl<B: Backend> Drop for OneCommandTx<B> {
    fn drop(&mut self) {
        if self.open {
            self.connection.close_on_drop();
        }
    }
}
