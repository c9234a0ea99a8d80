//! The one way rows are written: a list of columns, each with the SQL type and the value it takes
//! from a record, from which both the statement's `VALUES` rows and their bound values are made,
//! in the same order, so that a column and its value cannot drift apart.
//!
//! A batch of one uses the same statements, so each write has one statement shape whatever its
//! size; a batch of many is one statement for as many rows as fit.

use super::backend::{Backend, Params, Statement};
use std::fmt::Write as _;

/// One column of a written row: its name, and what each record puts in it.
pub(crate) type Column<R> = (&'static str, Cell<R>);

/// What a record puts in a column. Each bound value is cast to its column's type: PostgreSQL
/// cannot infer the type of a parameter in a `VALUES` list that is joined rather than inserted.
pub(crate) enum Cell<R> {
    Text(fn(&R) -> Option<&str>),
    BigInt(fn(&R) -> Option<i64>),
    Boolean(fn(&R) -> bool),
    /// The same value in every row, written into the statement.
    Constant(&'static str),
}

/// At most this many bound parameters in one statement: below SQLite's 32,766 and PostgreSQL's
/// 65,535.
pub(crate) const MAX_BINDS_PER_STATEMENT: usize = 30_000;

/// How many values one row of `row` binds.
pub(crate) fn binds_per_row<R>(row: &[Column<R>]) -> usize {
    row.iter().filter(|(_, cell)| !matches!(cell, Cell::Constant(_))).count()
}

/// How many rows of `row` fit in one statement.
pub(crate) fn rows_per_statement<R>(row: &[Column<R>]) -> usize {
    let binds = row.iter().filter(|(_, cell)| !matches!(cell, Cell::Constant(_))).count().max(1);
    (MAX_BINDS_PER_STATEMENT / binds).max(1)
}

/// `name, name, ...`
pub(crate) fn names<R>(row: &[Column<R>]) -> String {
    row.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ")
}

/// `rows` parenthesised rows shaped like `row`, their parameters numbered from 1, one row a line.
pub(crate) fn values<R>(params: Params, rows: usize, row: &[Column<R>]) -> String {
    values_from(params, 1, rows, row)
}

/// [`values`] with the parameters numbered from `first`: rows that follow others' in one
/// statement.
pub(crate) fn values_from<R>(params: Params, first: usize, rows: usize, row: &[Column<R>]) -> String {
    let mut out = String::new();
    let mut n = first;
    for r in 0..rows {
        out.push_str(if r == 0 { "(" } else { ",\n    (" });
        for (c, (_, cell)) in row.iter().enumerate() {
            if c > 0 {
                out.push_str(", ");
            }
            let ty = match cell {
                Cell::Constant(text) => {
                    out.push_str(text);
                    continue;
                }
                Cell::Text(_) => "TEXT",
                Cell::BigInt(_) => "BIGINT",
                Cell::Boolean(_) => "BOOLEAN",
            };
            let _ = write!(out, "CAST({} AS {ty})", params.at(n));
            n += 1;
        }
        out.push(')');
    }
    out
}

/// `column = rows.column, ...` for the columns of `row` other than `except`, one a line.
pub(crate) fn set_from<R>(rows: &str, row: &[Column<R>], except: &[&str]) -> String {
    row.iter()
        .filter(|(name, _)| !except.contains(name))
        .map(|(name, _)| format!("{name} = {rows}.{name}"))
        .collect::<Vec<_>>()
        .join(",\n    ")
}

impl<B: Backend> Statement<B> {
    /// Binds the values of `records`, in the order [`values`] numbers their parameters.
    pub(crate) fn rows<'r, R: 'r>(mut self, row: &[Column<R>], records: impl IntoIterator<Item = &'r R>) -> Self {
        for record in records {
            for (_, cell) in row {
                self = match cell {
                    Cell::Text(value) => self.text(value(record)),
                    Cell::BigInt(value) => self.int(value(record)),
                    Cell::Boolean(value) => self.flag(value(record)),
                    Cell::Constant(_) => self,
                };
            }
        }
        self
    }
}
