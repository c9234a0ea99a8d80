//! A short SQLite write transaction sent in as few commands as its statements allow.
//!
//! sqlx-sqlite runs each command on the connection's own thread, and each command is a hop there
//! and back, made while the write lock is held once the transaction has begun; sqlx's own
//! transaction sends `BEGIN` and `COMMIT` as commands of their own. Here `BEGIN IMMEDIATE` goes
//! with the transaction's first statements and `COMMIT` with its last (see
//! [`Dialect::statements_in_one_command`](super::backend::Dialect::statements_in_one_command)):
//! a claim is two commands instead of four, the start of attempts one instead of four, a result
//! three (the locking read with the `BEGIN`, the writes, the `COMMIT`) instead of six (docs/BENCHMARKS.md, "The
//! drain").
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
    /// `COMMIT` or `ROLLBACK` succeeded.
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
        self.fetch_all(statement).await
    }

    /// Runs `statement` in the transaction, beginning it with the same command if nothing was
    /// sent yet; answers every row.
    pub(crate) async fn fetch_all(&mut self, statement: Statement<B>) -> Result<Vec<B::Row>, sqlx::Error> {
        let statement = self.begun(statement);
        // Every row, not the first only: a fetch of one row stops the command at the statement
        // that gave it, and the statements after it would never run.
        B::fetch_all(&mut *self.connection, statement).await
    }

    /// [`OneCommandTx::fetch_all`] for a statement that answers at most one row (a `BEGIN` before
    /// it answers none).
    pub(crate) async fn fetch_optional(&mut self, statement: Statement<B>) -> Result<Option<B::Row>, sqlx::Error> {
        let statement = self.begun(statement);
        B::fetch_optional(&mut *self.connection, statement).await
    }

    /// Runs `statement`, which answers a count of changed rows. A `BEGIN` not sent yet goes first
    /// as a command of its own: in the same command, SQLite's count of changes would count the
    /// last write before it again.
    pub(crate) async fn execute(&mut self, statement: Statement<B>) -> Result<u64, sqlx::Error> {
        if !self.open {
            self.open = true;
            B::execute(&mut *self.connection, Statement::new(B::DIALECT.begin)).await?;
        }
        B::execute(&mut *self.connection, statement).await
    }

    /// Runs `statement`, if any, and commits, in one command; answers its rows. A transaction
    /// that sent nothing has nothing to commit.
    pub(crate) async fn commit_with(mut self, statement: Option<Statement<B>>) -> Result<Vec<B::Row>, sqlx::Error> {
        let statement = match statement {
            Some(statement) => self.begun(statement).push("; COMMIT"),
            None if self.open => Statement::new("COMMIT"),
            None => return Ok(Vec::new()),
        };
        let rows = B::fetch_all(&mut *self.connection, statement).await?;
        self.open = false;
        Ok(rows)
    }

    /// The whole transaction in one command: begins, runs `statement`, commits.
    pub(crate) async fn run(self, statement: Statement<B>) -> Result<Vec<B::Row>, sqlx::Error> {
        self.commit_with(Some(statement)).await
    }

    /// Rolls back what was sent. Should that fail, the connection is closed all the same.
    pub(crate) async fn rollback(mut self) -> Result<(), sqlx::Error> {
        if self.open {
            B::execute(&mut *self.connection, Statement::new("ROLLBACK")).await?;
            self.open = false;
        }
        Ok(())
    }

    /// `statement`, after the `BEGIN` if this is the transaction's first command.
    fn begun(&mut self, statement: Statement<B>) -> Statement<B> {
        if self.open {
            return statement;
        }
        self.open = true;
        statement.after(B::DIALECT.begin)
    }
}

impl<B: Backend> Drop for OneCommandTx<B> {
    fn drop(&mut self) {
        if self.open {
            self.connection.close_on_drop();
        }
    }
}
