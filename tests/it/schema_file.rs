//! The schema as it stands: a fresh `migrate` of each store, read back from the database's
//! catalog, equals the committed file beside the migrations (`migrations/postgres.schema.sql`,
//! `migrations/sqlite.schema.sql`), so that a reader sees what the database enforces without
//! replaying the migrations, and a migration that changes the schema shows its change there.
//! Regenerate both: `ACTIONLEDGER_UPDATE_SCHEMA=1 cargo test --test it schema_file::`.

use crate::support;
use actionledger::store::PostgresStore;
use sqlx::Connection as _;
use std::fmt::Write as _;

const REGENERATE: &str = "ACTIONLEDGER_UPDATE_SCHEMA=1 cargo test --test it schema_file::";
const POSTGRES_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/postgres.schema.sql");
const SQLITE_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite.schema.sql");

/// The ledger's own roles (migration 0004), shown by name; any other role that owns or holds a
/// privilege is the one that ran the migrations, whose name depends on the cluster.
const LEDGER_ROLES: [&str; 4] =
    ["actionledger_owner", "actionledger_worker", "actionledger_reviewer", "actionledger_viewer"];
const MIGRATING_ROLE: &str = "<migrating role>";
/// Stands for the ledger's schema, whose name the operator chooses.
const SCHEMA: &str = "<schema>";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_postgres_schema_file_shows_a_fresh_migrate() {
    let Some(url) = support::pg::fresh_database().await else { return };
    let store = PostgresStore::open(&url).await.expect("open and migrate the PostgreSQL ledger");
    let rendered = render_postgres(&url, store.schema()).await;
    compare_with_file(POSTGRES_FILE, &rendered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sqlite_schema_file_shows_a_fresh_migrate() {
    let db = support::sqlite().await;
    let rendered = render_sqlite(&db.url).await;
    compare_with_file(SQLITE_FILE, &rendered);
}

/// Passes when `path` holds `rendered`; writes it there with `ACTIONLEDGER_UPDATE_SCHEMA` set;
/// otherwise fails with the first lines that differ and the command that regenerates the file.
fn compare_with_file(path: &str, rendered: &str) {
    let committed = std::fs::read_to_string(path);
    if committed.as_deref().is_ok_and(|committed| committed == rendered) {
        return;
    }
    if std::env::var_os("ACTIONLEDGER_UPDATE_SCHEMA").is_some() {
        std::fs::write(path, rendered).unwrap_or_else(|e| panic!("cannot write {path}: {e}"));
        return;
    }
    let committed = committed.unwrap_or_else(|e| panic!("cannot read {path} ({e}); generate it: {REGENERATE}"));
    panic!(
        "{path} differs from the schema a fresh migrate makes (- committed, + migrated):\n{}\n\
         If the change is meant, regenerate the file in the same commit: {REGENERATE}",
        short_diff(&committed, rendered, 40)
    );
}

/// The lines only one side has, in order, numbered by the side's line, at most `limit` of them.
fn short_diff(old: &str, new: &str, limit: usize) -> String {
    let old: Vec<&str> = old.lines().collect();
    let new: Vec<&str> = new.lines().collect();
    // Longest common subsequence, from the end, so that the walk below goes forward.
    let mut common = vec![vec![0u32; new.len() + 1]; old.len() + 1];
    for i in (0..old.len()).rev() {
        for j in (0..new.len()).rev() {
            common[i][j] =
                if old[i] == new[j] { common[i + 1][j + 1] + 1 } else { common[i + 1][j].max(common[i][j + 1]) };
        }
    }
    let mut lines = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        if i < old.len() && j < new.len() && old[i] == new[j] {
            i += 1;
            j += 1;
        } else if j < new.len() && (i == old.len() || common[i][j + 1] >= common[i + 1][j]) {
            lines.push(format!("+{:>5} {}", j + 1, new[j]));
            j += 1;
        } else {
            lines.push(format!("-{:>5} {}", i + 1, old[i]));
            i += 1;
        }
    }
    let more = lines.len().saturating_sub(limit);
    lines.truncate(limit);
    if more > 0 {
        lines.push(format!("... and {more} more differing lines"));
    }
    lines.join("\n")
}

/// One object of the catalog: the key it is sorted by, and its text.
type Item = (String, String);

/// A row of `PG_PRIVILEGES`.
type Privilege = (String, Option<String>, Option<String>, String, String, bool);

/// The tables, with their columns in the order of the table, their defaults and constraints.
const PG_TABLES: &str = r#"
SELECT c.relname::text, format(E'CREATE TABLE %I (\n%s\n)%s;', c.relname,
    array_to_string(array(
        SELECT format('    %I %s%s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                      CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
                      COALESCE(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid, true), ''))
          FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
         ORDER BY a.attnum)
    || array(
        SELECT format('    CONSTRAINT %I %s', k.conname, pg_get_constraintdef(k.oid, true))
          FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype <> 'n'
         ORDER BY k.conname COLLATE "C"), E',\n'),
    COALESCE(' WITH (' || array_to_string(c.reloptions, ', ') || ')', ''))
  FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')"#;

/// Views, should a migration make one.
const PG_VIEWS: &str = r"
SELECT c.relname::text, format(E'CREATE %sVIEW %I AS\n%s', CASE c.relkind WHEN 'm' THEN 'MATERIALIZED ' ELSE '' END,
                                c.relname, pg_get_viewdef(c.oid, true))
  FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('v', 'm')";

/// The sequences, with the column each belongs to.
const PG_SEQUENCES: &str = r"
SELECT c.relname::text, format('CREATE SEQUENCE %I AS %s%s;', c.relname, format_type(s.seqtypid, NULL),
                               COALESCE(' OWNED BY ' || quote_ident(t.relname) || '.' || quote_ident(a.attname), ''))
  FROM pg_class c JOIN pg_sequence s ON s.seqrelid = c.oid
  LEFT JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
                       AND d.refclassid = 'pg_class'::regclass AND d.deptype = 'a'
  LEFT JOIN pg_class t ON t.oid = d.refobjid
  LEFT JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
 WHERE c.relnamespace = current_schema()::regnamespace";

/// The indexes but those that a table's constraint makes (shown with the table).
const PG_INDEXES: &str = r"
SELECT t.relname::text || ' ' || x.relname::text, pg_get_indexdef(i.indexrelid) || ';'
  FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid JOIN pg_class x ON x.oid = i.indexrelid
 WHERE t.relnamespace = current_schema()::regnamespace
   AND NOT EXISTS (SELECT 1 FROM pg_constraint k
                    WHERE k.conindid = i.indexrelid AND k.conrelid = i.indrelid AND k.contype IN ('p', 'u', 'x'))";

/// The domains, with their constraints.
const PG_DOMAINS: &str = r#"
SELECT t.typname::text, format('CREATE DOMAIN %I AS %s%s%s%s;', t.typname, format_type(t.typbasetype, t.typtypmod),
    COALESCE(' COLLATE ' || quote_ident(co.collname), ''),
    COALESCE(' DEFAULT ' || t.typdefault, ''),
    CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END
    || COALESCE((SELECT string_agg(E'\n    CONSTRAINT ' || quote_ident(k.conname) || ' ' || pg_get_constraintdef(k.oid, true),
                                   '' ORDER BY k.conname COLLATE "C")
                   FROM pg_constraint k WHERE k.contypid = t.oid), ''))
  FROM pg_type t LEFT JOIN pg_collation co ON co.oid = t.typcollation AND t.typcollation <> 0
                                              AND co.collname <> 'default'
 WHERE t.typnamespace = current_schema()::regnamespace AND t.typtype = 'd'"#;

/// Other types (enums, composite types of their own), should a migration make one.
const PG_TYPES: &str = r"
SELECT t.typname::text, format('-- type %I (%s)', t.typname, CASE t.typtype WHEN 'e' THEN 'enum: '
           || (SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder) FROM pg_enum e
                WHERE e.enumtypid = t.oid)
           WHEN 'c' THEN 'composite' WHEN 'r' THEN 'range' ELSE t.typtype::text END)
  FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
 WHERE t.typnamespace = current_schema()::regnamespace AND t.typtype NOT IN ('d', 'b', 'm')
   AND (t.typtype <> 'c' OR c.relkind = 'c')";

/// The functions, as the server writes them back.
const PG_FUNCTIONS: &str = r"
SELECT p.proname::text || '(' || pg_get_function_identity_arguments(p.oid) || ')', pg_get_functiondef(p.oid)
  FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace";

/// The triggers, by table and then by name, the order in which a table's triggers fire.
const PG_TRIGGERS: &str = r"
SELECT c.relname::text || ' ' || g.tgname::text, pg_get_triggerdef(g.oid, true) || ';'
    || CASE g.tgenabled WHEN 'O' THEN '' ELSE format(E'\n-- enabled: %s', g.tgenabled) END
  FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
 WHERE c.relnamespace = current_schema()::regnamespace AND NOT g.tgisinternal";

/// Who owns each object: its kind, its name and the owning role.
const PG_OWNERS: &str = r"
SELECT 'SCHEMA', NULL::text, n.nspowner::regrole::text
  FROM pg_namespace n WHERE n.oid = current_schema()::regnamespace
UNION ALL
SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
       quote_ident(c.relname), c.relowner::regrole::text
  FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
UNION ALL
SELECT 'FUNCTION', quote_ident(p.proname) || '(' || pg_get_function_identity_arguments(p.oid) || ')',
       p.proowner::regrole::text
  FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace
UNION ALL
SELECT CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, quote_ident(t.typname), t.typowner::regrole::text
  FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
 WHERE t.typnamespace = current_schema()::regnamespace AND t.typtype NOT IN ('b', 'm')
   AND (t.typtype <> 'c' OR c.relkind = 'c')";

/// Every privilege, as the roles hold it (a default ACL spelled out): the object's kind and name,
/// the columns for a column privilege, the grantee (`-` for PUBLIC), the privileges and whether
/// the grantee may grant them on.
const PG_PRIVILEGES: &str = r#"
WITH objects (kind, name, acl) AS (
    SELECT 'SCHEMA', NULL::text, COALESCE(n.nspacl, acldefault('n', n.nspowner))
      FROM pg_namespace n WHERE n.oid = current_schema()::regnamespace
    UNION ALL
    SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, quote_ident(c.relname),
           COALESCE(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char", c.relowner))
      FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
    UNION ALL
    SELECT 'FUNCTION', quote_ident(p.proname) || '(' || pg_get_function_identity_arguments(p.oid) || ')',
           COALESCE(p.proacl, acldefault('f', p.proowner))
      FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace
    UNION ALL
    SELECT CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, quote_ident(t.typname),
           COALESCE(t.typacl, acldefault('T', t.typowner))
      FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
     WHERE t.typnamespace = current_schema()::regnamespace AND t.typtype NOT IN ('b', 'm')
       AND (t.typtype <> 'c' OR c.relkind = 'c')
)
SELECT o.kind, o.name, NULL::text, x.grantee::regrole::text,
       string_agg(x.privilege_type, ', ' ORDER BY x.privilege_type COLLATE "C"), x.is_grantable
  FROM objects o, aclexplode(o.acl) x
 GROUP BY o.kind, o.name, x.grantee, x.is_grantable
UNION ALL
SELECT 'TABLE', quote_ident(c.relname), string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum),
       x.grantee::regrole::text, x.privilege_type, x.is_grantable
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid, aclexplode(a.attacl) x
 WHERE c.relnamespace = current_schema()::regnamespace AND a.attacl IS NOT NULL AND NOT a.attisdropped
 GROUP BY c.relname, x.grantee, x.privilege_type, x.is_grantable"#;

/// The PostgreSQL ledger at `url`, in `schema`, as a text that diffs cleanly: each kind of object
/// in a section, sorted by name; names unqualified, the schema's name and the migrating role's
/// replaced by placeholders.
async fn render_postgres(url: &str, schema: &str) -> String {
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect to the ledger's database");
    // The ledger's schema alone, as the store's connections have it: the server writes names in
    // it unqualified.
    sqlx::query(sqlx::AssertSqlSafe(format!("SET search_path TO {schema}")))
        .execute(&mut conn)
        .await
        .expect("set the search path");
    let unqualified =
        |text: &str| text.replace(&format!("{schema}."), "").replace(&format!("'{schema}'"), &format!("'{SCHEMA}'"));
    let mut out = String::from(
        "-- The PostgreSQL ledger as a fresh `actionledger migrate` makes it, read from the server's\n\
         -- catalog. Generated by tests/it/schema_file.rs; do not edit. After a migration, regenerate it\n\
         -- in the same commit:\n",
    );
    let _ = writeln!(out, "--   {REGENERATE}");
    let _ = writeln!(
        out,
        "-- Names are unqualified: every object is in the ledger's schema, written {SCHEMA} where it is\n\
         -- named (actionledger unless configured). {MIGRATING_ROLE} is the role that ran the migrations."
    );
    for (title, sql) in [
        ("Domains", PG_DOMAINS),
        ("Types", PG_TYPES),
        ("Tables", PG_TABLES),
        ("Views", PG_VIEWS),
        ("Sequences", PG_SEQUENCES),
        ("Indexes", PG_INDEXES),
        ("Functions", PG_FUNCTIONS),
        ("Triggers", PG_TRIGGERS),
    ] {
        let mut items: Vec<Item> = sqlx::query_as(sql)
            .fetch_all(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("read the {title} from the catalog: {e}"));
        if items.is_empty() {
            continue;
        }
        items.sort();
        let _ = write!(out, "\n-- {title}\n");
        for (_, text) in items {
            out.push('\n');
            out.push_str(&normalise_lines(&unqualified(&text)));
            // The server writes a function back without the statement's end.
            if title == "Functions" {
                out.push(';');
            }
            out.push('\n');
        }
    }

    let owners: Vec<(String, Option<String>, String)> =
        sqlx::query_as(PG_OWNERS).fetch_all(&mut conn).await.expect("read the owners");
    let mut owners: Vec<String> = owners
        .into_iter()
        .map(|(kind, name, owner)| {
            format!("ALTER {kind} {} OWNER TO {};", name.as_deref().unwrap_or(SCHEMA), shown_role(&owner))
        })
        .collect();
    owners.sort();
    out.push_str("\n-- Owners\n\n");
    out.push_str(&owners.join("\n"));
    out.push('\n');

    let privileges: Vec<Privilege> =
        sqlx::query_as(PG_PRIVILEGES).fetch_all(&mut conn).await.expect("read the privileges");
    let mut grants: Vec<String> = privileges
        .into_iter()
        .map(|(kind, name, columns, grantee, privileges, grantable)| {
            let privileges = match columns {
                Some(columns) => format!("{privileges} ({columns})"),
                None => privileges,
            };
            let grantee = if grantee == "-" { "PUBLIC".to_owned() } else { shown_role(&grantee) };
            let option = if grantable { " WITH GRANT OPTION" } else { "" };
            format!("GRANT {privileges} ON {kind} {} TO {grantee}{option};", name.as_deref().unwrap_or(SCHEMA))
        })
        .collect();
    grants.sort();
    out.push_str("\n-- Privileges (defaults spelled out)\n\n");
    out.push_str(&grants.join("\n"));
    out.push('\n');
    conn.close().await.ok();
    out
}

/// A role as the file shows it: the ledger's roles by name, any other as the migrating role.
fn shown_role(role: &str) -> String {
    if LEDGER_ROLES.contains(&role) { role.to_owned() } else { MIGRATING_ROLE.to_owned() }
}

/// The text with each line's trailing blanks and the blank lines at its ends removed.
fn normalise_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let first = lines.iter().position(|line| !line.is_empty()).unwrap_or(lines.len());
    let last = lines.iter().rposition(|line| !line.is_empty()).map_or(first, |last| last + 1);
    lines[first..last].join("\n")
}

/// The kinds of `sqlite_master` entries, in the order of the file's sections, and their titles.
const SQLITE_SECTIONS: [(&str, &str); 4] =
    [("table", "Tables"), ("view", "Views"), ("index", "Indexes"), ("trigger", "Triggers")];

/// The SQLite ledger at `url` as a text that diffs cleanly: every entry of `sqlite_master` but
/// SQLite's own, by kind and then name, each as the migrations wrote it, with the lines' trailing
/// blanks and the empty lines removed.
async fn render_sqlite(url: &str) -> String {
    let mut conn = sqlx::SqliteConnection::connect(url).await.expect("open the SQLite ledger");
    let mut entries: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
    )
    .fetch_all(&mut conn)
    .await
    .expect("read sqlite_master");
    conn.close().await.ok();
    let section_of = |kind: &str| SQLITE_SECTIONS.iter().position(|(k, _)| *k == kind).unwrap_or(SQLITE_SECTIONS.len());
    entries.sort_by(|a, b| (section_of(&a.0), &a.1).cmp(&(section_of(&b.0), &b.1)));
    let mut out = String::from(
        "-- The SQLite ledger as a fresh `actionledger migrate` makes it, read from sqlite_master.\n\
         -- Generated by tests/it/schema_file.rs; do not edit. After a migration, regenerate it in the\n\
         -- same commit:\n",
    );
    let _ = writeln!(out, "--   {REGENERATE}");
    let mut section = None;
    for (kind, _, sql) in entries {
        if section != Some(section_of(&kind)) {
            let title = SQLITE_SECTIONS.get(section_of(&kind)).map_or(kind.as_str(), |(_, title)| title);
            let _ = write!(out, "\n-- {title}\n");
            section = Some(section_of(&kind));
        }
        out.push('\n');
        if kind == "table" {
            out.push_str(&sqlite_table(&sql));
        } else {
            let lines: Vec<&str> = sql.lines().map(str::trim_end).filter(|line| !line.trim().is_empty()).collect();
            out.push_str(&lines.join("\n"));
        }
        out.push_str(";\n");
    }
    out
}

/// A `CREATE TABLE` as SQLite keeps it, one column or constraint a line, its comments left out and
/// its blanks collapsed: SQLite appends a column that `ALTER TABLE ... ADD COLUMN` adds to the
/// line that closes the table, where a diff would show the whole line changed.
fn sqlite_table(sql: &str) -> String {
    let mut parts = Vec::new();
    let mut part = String::new();
    let mut depth = 0usize;
    let mut chars = sql.chars().peekable();
    let mut head = None;
    while let Some(c) = chars.next() {
        match c {
            '-' if chars.peek() == Some(&'-') => {
                // A comment, to the end of its line.
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
                part.push(' ');
                continue;
            }
            '\'' | '"' | '`' => {
                part.push(c);
                for inner in chars.by_ref() {
                    part.push(inner);
                    if inner == c {
                        break;
                    }
                }
                continue;
            }
            '(' if depth == 0 && head.is_none() => {
                head = Some(std::mem::take(&mut part));
                depth = 1;
                continue;
            }
            '(' => depth += 1,
            ')' if depth == 1 => {
                parts.push(std::mem::take(&mut part));
                depth = 0;
                continue;
            }
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 1 => {
                parts.push(std::mem::take(&mut part));
                continue;
            }
            _ => {}
        }
        part.push(c);
    }
    let collapse = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let elements: Vec<String> = parts.iter().map(|part| format!("    {}", collapse(part))).collect();
    let tail = collapse(&part);
    format!(
        "{} (\n{}\n){}{tail}",
        collapse(head.as_deref().unwrap_or_default()),
        elements.join(",\n"),
        if tail.is_empty() { "" } else { " " }
    )
}
