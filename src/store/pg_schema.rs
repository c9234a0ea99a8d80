//! The PostgreSQL schema a ledger lives in: which one (explicit, the URL's `search_path`, or
//! `actionledger`), and the move of a ledger an earlier version made in `public`.
//!
//! Every pooled connection's `search_path` holds the ledger's schema alone, so the migrations,
//! sqlx's `_sqlx_migrations` and every statement name tables unqualified and still never reach
//! an application's tables in another schema.

use super::StoreError;
use super::statements;
use sqlx::migrate::Migrator;

/// The schema a PostgreSQL ledger lives in when neither `--schema`, `ACTIONLEDGER_SCHEMA` nor
/// the URL's `search_path` names one.
pub const DEFAULT_SCHEMA: &str = "actionledger";

/// Why a schema name cannot hold the ledger.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaProblem {
    #[error("give a lower-case name of letters, digits and underscores, at most 63, not starting with a digit")]
    NotAName,
    #[error("names starting with pg_ belong to PostgreSQL")]
    Reserved,
    #[error("the URL's search_path lists several schemas; the ledger lives in one, so give one")]
    Several,
    #[error("the URL's search_path names {url_schema}; give one or the other, or the same")]
    DiffersFromUrl { url_schema: String },
}

/// The schema the ledger lives in, and whether the connection options must set `search_path`
/// (they must unless the URL already sets it to that schema).
pub(crate) fn choose_schema(url_options: Option<&str>, explicit: Option<&str>) -> Result<(String, bool), StoreError> {
    let from_url = url_options.map(search_path_of).transpose()?.flatten();
    let invalid = |name: &str, problem| StoreError::InvalidSchema { name: name.to_owned(), problem };
    let (schema, set) = match (explicit, from_url) {
        (Some(explicit), Some(url_schema)) if explicit != url_schema => {
            return Err(invalid(explicit, SchemaProblem::DiffersFromUrl { url_schema }));
        }
        (_, Some(url_schema)) => (url_schema, false),
        (Some(explicit), None) => (explicit.to_owned(), true),
        (None, None) => (DEFAULT_SCHEMA.to_owned(), true),
    };
    if schema.starts_with("pg_") {
        return Err(invalid(&schema, SchemaProblem::Reserved));
    }
    let mut chars = schema.chars();
    let well_formed = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && schema.len() <= 63;
    if !well_formed {
        return Err(invalid(&schema, SchemaProblem::NotAName));
    }
    Ok((schema, set))
}

/// The schema a connection's `options` (`-c search_path=x`, `-csearch_path=x`,
/// `--search_path=x`) put first, if they set one.
fn search_path_of(options: &str) -> Result<Option<String>, StoreError> {
    let mut tokens = options.split_whitespace();
    let mut found = None;
    while let Some(token) = tokens.next() {
        let setting = match token {
            "-c" => tokens.next().unwrap_or_default(),
            other => other.strip_prefix("--").or_else(|| other.strip_prefix("-c")).unwrap_or_default(),
        };
        if let Some(value) = setting.strip_prefix("search_path=") {
            found = Some(value.to_owned());
        }
    }
    let Some(value) = found else { return Ok(None) };
    let schemas: Vec<&str> = value.split(',').map(|s| s.trim().trim_matches('"')).filter(|s| !s.is_empty()).collect();
    match schemas[..] {
        [one] => Ok(Some(one.to_owned())),
        _ => Err(StoreError::InvalidSchema { name: value, problem: SchemaProblem::Several }),
    }
}

/// The names that `CREATE TABLE` or `CREATE [OR REPLACE] FUNCTION` give in the migrations: the
/// ledger's own tables and functions, as this build knows them.
fn created_names(migrator: &Migrator, kind: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for migration in migrator.iter() {
        for line in migration.sql.as_str().lines() {
            let line = line.trim_start().replace("OR REPLACE ", "");
            let Some(rest) = line.strip_prefix(&format!("CREATE {kind} ")) else { continue };
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// The SQL that moves a ledger an earlier version made in `public` into `schema`, or `None`
/// when `public` holds none. Tables move with their indexes, sequences and triggers; the
/// functions move by signature; the ledger's rows of `public._sqlx_migrations` move (the whole
/// table, when no other rows share it), so an application's own migrations stay as they were.
/// Each function is told its new schema (migration 0008). Last, the roles are granted on the new schema as migration 0004 grants them.
pub(crate) async fn move_from_public_sql(
    pool: &sqlx::PgPool,
    schema: &str,
    migrator: &Migrator,
) -> Result<Option<String>, StoreError> {
    if schema == "public" {
        return Ok(None);
    }
    let in_public: bool = sqlx::query_scalar(statements::LEDGER_IN_PUBLIC).fetch_one(pool).await?;
    if !in_public {
        return Ok(None);
    }
    let tables: Vec<String> =
        sqlx::query_scalar(statements::PUBLIC_TABLES).bind(created_names(migrator, "TABLE")).fetch_all(pool).await?;
    let functions: Vec<String> = sqlx::query_scalar(statements::PUBLIC_FUNCTIONS)
        .bind(created_names(migrator, "FUNCTION"))
        .fetch_all(pool)
        .await?;
    let rows: Vec<(i64, String, Vec<u8>)> = sqlx::query_as(statements::PUBLIC_MIGRATIONS).fetch_all(pool).await?;
    let ours: Vec<i64> = rows
        .iter()
        .filter(|(version, _, checksum)| migrator.iter().any(|m| m.version == *version && *m.checksum == checksum[..]))
        .map(|(version, _, _)| *version)
        .collect();
    let mut sql = vec![format!("CREATE SCHEMA IF NOT EXISTS {schema};")];
    sql.extend(tables.iter().map(|table| format!("ALTER TABLE public.{table} SET SCHEMA {schema};")));
    for function in &functions {
        let signature = function.strip_prefix("public.").unwrap_or(function);
        sql.push(format!("ALTER FUNCTION public.{signature} SET SCHEMA {schema};"));
        // Where migration 0008 already ran in public, the function would still look there.
        sql.push(format!("ALTER FUNCTION {schema}.{signature} SET search_path = {schema}, pg_temp;"));
    }
    if ours.len() == rows.len() {
        sql.push(format!("ALTER TABLE public._sqlx_migrations SET SCHEMA {schema};"));
    } else {
        let versions = ours.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
        sql.push(format!("CREATE TABLE {schema}._sqlx_migrations (LIKE public._sqlx_migrations INCLUDING ALL);"));
        sql.push(format!(
            "INSERT INTO {schema}._sqlx_migrations SELECT * FROM public._sqlx_migrations WHERE version IN ({versions});"
        ));
        sql.push(format!("DELETE FROM public._sqlx_migrations WHERE version IN ({versions});"));
    }
    if functions.iter().any(|f| f.contains("actionledger_grant_roles(")) {
        sql.push(format!("SET LOCAL search_path TO {schema};"));
        sql.push("SELECT actionledger_grant_roles();".to_owned());
    }
    Ok(Some(sql.join("\n")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_comes_from_the_flag_or_the_url_or_the_default() {
        assert_eq!(choose_schema(None, None).unwrap(), ("actionledger".to_owned(), true));
        assert_eq!(choose_schema(Some("-c idle=1"), Some("ops")).unwrap(), ("ops".to_owned(), true));
        assert_eq!(choose_schema(Some("-csearch_path=ops"), None).unwrap(), ("ops".to_owned(), false));
        assert_eq!(choose_schema(Some("-c search_path=ops"), Some("ops")).unwrap(), ("ops".to_owned(), false));
        assert_eq!(choose_schema(Some("--search_path=\"ops\""), None).unwrap(), ("ops".to_owned(), false));
        let problem = |options, explicit| match choose_schema(options, explicit) {
            Err(StoreError::InvalidSchema { problem, .. }) => problem,
            other => panic!("{other:?}"),
        };
        assert_eq!(problem(Some("-csearch_path=a,public"), None), SchemaProblem::Several);
        assert_eq!(
            problem(Some("-csearch_path=a"), Some("b")),
            SchemaProblem::DiffersFromUrl { url_schema: "a".to_owned() }
        );
        assert_eq!(problem(None, Some("Ops")), SchemaProblem::NotAName);
        assert_eq!(problem(None, Some("a;drop")), SchemaProblem::NotAName);
        assert_eq!(problem(None, Some("pg_ledger")), SchemaProblem::Reserved);
    }
}
