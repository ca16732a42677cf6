//! [`Names`]: what an outbox's tables, indexes and constraints are called
//! in one database, and the statements written with those names.
//!
//! Every statement of a backend is written once with the default names
//! (`outbox_tasks`, `outbox_ordering_keys`, `outbox_inbox`, `outbox_meta`,
//! `outbox_relays`, and the indexes and constraints named after them). A store whose names
//! differ renders each fixed statement's text once, with its names in
//! place, and keeps it ([`Names::sql`]); a statement whose text is built at
//! run time (a list of ids, a number of rows) is renamed as it is built
//! ([`Names::rendered`]). Either way the names are part of the text each
//! connection prepares, never bound per call, so a statement keeps its
//! cached, prepared form and its plan. A name is checked before it is used
//! ([`Names::with_table_prefix`], [`Names::with_schema`]): no statement is
//! ever built from an unchecked string.

use std::{
    borrow::Cow,
    collections::HashMap,
    ops::Deref,
    sync::{Arc, PoisonError, RwLock},
};

use diesel_outbox_core::{Error, Result};

use crate::BackendKind;

/// The tables an outbox owns, under their default names. Every other name
/// of the outbox (an index, a constraint, a sequence) starts with one of
/// them, so renaming these renames the whole outbox.
pub const TABLES: [&str; 5] = [
    "outbox_tasks",
    "outbox_ordering_keys",
    "outbox_inbox",
    "outbox_meta",
    "outbox_relays",
];

/// The longest table prefix accepted, in bytes: the longest name an outbox
/// gives an object (PostgreSQL names a check constraint
/// `outbox_ordering_keys_open_tasks_check`, 37 bytes) plus the prefix stays
/// within every backend's identifier length (63 bytes on PostgreSQL, 64 on
/// MySQL).
pub const MAX_TABLE_PREFIX_BYTES: usize = 20;

/// The most bytes a schema and a table prefix take together: diesel
/// records a migration's version in a `VARCHAR(50)`, and an outbox's
/// versions hold both after the migration's 14-digit stamp and a
/// separator ([`MigrationSql::named`](crate::MigrationSql::named)).
pub const MAX_SCHEMA_AND_PREFIX_BYTES: usize = 35;

/// The names of one outbox's objects in its database: the defaults, or
/// each one with a prefix of the user's ([`with_table_prefix`]), or its
/// tables in a schema of their own ([`with_schema`]: a PostgreSQL schema, a
/// MySQL database), or both, so that several outboxes live side by side in
/// one database without seeing each other. Clones share the statements
/// rendered so far.
///
/// ```
/// use diesel_outbox_sql::Names;
///
/// let names = Names::default().with_table_prefix("billing_")?;
/// assert_eq!(names.table("outbox_tasks"), "billing_outbox_tasks");
/// assert_eq!(
///     &*names.sql("SELECT id FROM outbox_tasks t WHERE t.id = $1"),
///     "SELECT id FROM billing_outbox_tasks t WHERE t.id = $1",
/// );
/// assert!(Names::default().with_table_prefix("Billing").is_err());
///
/// let billing = Names::default().with_schema("billing")?;
/// assert_eq!(
///     &*billing.sql("SELECT id FROM outbox_tasks t WHERE t.id = $1"),
///     r#"SELECT id FROM "billing".outbox_tasks t WHERE t.id = $1"#,
/// );
/// assert_eq!(billing.display_table("outbox_tasks"), "billing.outbox_tasks");
/// # Ok::<(), diesel_outbox_core::Error>(())
/// ```
///
/// [`with_table_prefix`]: Names::with_table_prefix
/// [`with_schema`]: Names::with_schema
#[derive(Clone)]
pub struct Names {
    /// `None` for the default names, whose statements are their templates.
    named: Option<Arc<Named>>,
    /// The identifier quote of the backend these names are for
    /// ([`Names::for_backend`]), kept by every later change: the schema is
    /// written quoted, so that no keyword of any backend is refused as one.
    quote: char,
}

impl Default for Names {
    fn default() -> Self {
        Self {
            named: None,
            quote: '"',
        }
    }
}

/// A store's names other than the defaults, and its statements rendered
/// with them, keyed by the address and length of their templates.
struct Named {
    prefix: String,
    schema: Option<String>,
    /// Rendered with the quote of the [`Names`] holding it: a change of
    /// quote builds a new one.
    rendered: RwLock<HashMap<(usize, usize), Arc<str>>>,
}

impl std::fmt::Debug for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Names")
            .field("schema", &self.schema())
            .field("table_prefix", &self.table_prefix())
            .finish()
    }
}

impl PartialEq for Names {
    fn eq(&self, other: &Self) -> bool {
        self.table_prefix() == other.table_prefix()
            && self.schema() == other.schema()
            && self.quote == other.quote
    }
}

impl Eq for Names {}

impl Names {
    /// These names with every table, index and constraint of the outbox
    /// starting with `prefix` (`billing_` gives `billing_outbox_tasks`).
    /// The prefix is lower-case ASCII letters, digits and `_`, starting
    /// with a letter, at most [`MAX_TABLE_PREFIX_BYTES`] bytes (and at most
    /// [`MAX_SCHEMA_AND_PREFIX_BYTES`] with the schema), and not itself
    /// starting with one of the outbox's [`TABLES`]: a name every backend
    /// takes unquoted, the same way on every platform, and that no renaming
    /// mistakes for a default name. An empty prefix gives the tables their
    /// default names. Anything else is [`Error::Config`] naming
    /// `table_prefix`.
    pub fn with_table_prefix(self, prefix: &str) -> Result<Self> {
        let schema = self.schema().map(str::to_owned);
        check_prefix(prefix)
            .and_then(|()| check_lengths(schema.as_deref(), prefix))
            .map_err(|reason| Error::Config {
                field: "table_prefix",
                reason,
            })?;
        Ok(self.rebuilt(prefix.to_owned(), schema))
    }

    /// These names with the outbox's tables in the schema `schema` (on
    /// MySQL and MariaDB, a database): `billing` gives
    /// `"billing".outbox_tasks`, its indexes and constraints in that schema
    /// under their usual names. The outbox's migrations create the schema
    /// when it is missing and leave it in place when reverted. The schema
    /// follows the rules of a table prefix (lower-case a-z, 0-9 and `_`,
    /// starting with a letter), is at most [`MAX_SCHEMA_AND_PREFIX_BYTES`]
    /// bytes with the prefix, and is none of the servers' own
    /// (`information_schema`, `pg_*`, `mysql`, `performance_schema`, `sys`);
    /// it is written quoted, so a keyword is a schema like any other. An
    /// empty schema puts the tables back where the connection finds them
    /// (PostgreSQL's `search_path`, MySQL's current database). Anything
    /// else is [`Error::Config`] naming `schema`; SQLite, which has no
    /// schemas, refuses any when a store takes these names.
    pub fn with_schema(self, schema: &str) -> Result<Self> {
        let prefix = self.table_prefix().to_owned();
        check_schema(schema)
            .and_then(|()| check_lengths(Some(schema), &prefix))
            .map_err(|reason| Error::Config {
                field: "schema",
                reason,
            })?;
        let schema = (!schema.is_empty()).then(|| schema.to_owned());
        Ok(self.rebuilt(prefix, schema))
    }

    /// These names as `backend` writes them (its identifier quote), or
    /// [`Error::Config`] naming `schema` for a schema on SQLite. A store
    /// calls it on the names it is given.
    pub fn for_backend(self, backend: BackendKind) -> Result<Self> {
        let quote = match backend {
            BackendKind::Mysql => '`',
            BackendKind::Postgres | BackendKind::Sqlite => '"',
        };
        if backend == BackendKind::Sqlite && self.schema().is_some() {
            return Err(Error::Config {
                field: "schema",
                reason: "SQLite has no schemas: give the outbox a table prefix, \
                         or a database file of its own"
                    .to_owned(),
            });
        }
        if self.quote == quote {
            return Ok(self);
        }
        let (prefix, schema) = (
            self.table_prefix().to_owned(),
            self.schema().map(str::to_owned),
        );
        Ok(Self { quote, ..self }.rebuilt(prefix, schema))
    }

    /// Names with `prefix` and `schema`, none rendered yet.
    fn rebuilt(self, prefix: String, schema: Option<String>) -> Self {
        let quote = self.quote;
        if prefix.is_empty() && schema.is_none() {
            return Self { named: None, quote };
        }
        Self {
            named: Some(Arc::new(Named {
                prefix,
                schema,
                rendered: RwLock::default(),
            })),
            quote,
        }
    }

    /// The schema the outbox's tables are in, if one was chosen.
    pub fn schema(&self) -> Option<&str> {
        self.named
            .as_deref()
            .and_then(|named| named.schema.as_deref())
    }

    /// The prefix of every name (empty for the defaults).
    pub fn table_prefix(&self) -> &str {
        self.named.as_deref().map_or("", |named| &named.prefix)
    }

    /// Whether these are the default names.
    pub fn is_default(&self) -> bool {
        self.named.is_none()
    }

    /// What the object called `default` by default is called here, within
    /// its schema (`outbox_tasks`, `outbox_tasks_available_idx`...).
    pub fn table(&self, default: &str) -> String {
        format!("{}{default}", self.table_prefix())
    }

    /// The table called `default` by default as an operator reads it: its
    /// name here, after its schema and a dot if it has one
    /// (`billing.outbox_tasks`).
    pub fn display_table(&self, default: &str) -> String {
        match self.schema() {
            Some(schema) => format!("{schema}.{}", self.table(default)),
            None => self.table(default),
        }
    }

    /// The statement that creates the schema when it is missing, if there
    /// is one: what a migration runs first. On PostgreSQL a `CREATE SCHEMA`
    /// only when no schema of that name exists, since PostgreSQL asks for
    /// the right to create schemas even where `IF NOT EXISTS` finds one (a
    /// role that was given a schema a DBA created migrates into it); on
    /// MySQL `CREATE SCHEMA IF NOT EXISTS`, its `CREATE DATABASE`.
    pub fn create_schema_sql(&self) -> Option<String> {
        let schema = self.schema()?;
        Some(match self.quote {
            '`' => format!("CREATE SCHEMA IF NOT EXISTS `{schema}`;\n"),
            _ => format!(
                "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = '{schema}') \
                 THEN CREATE SCHEMA \"{schema}\"; END IF; END $$;\n"
            ),
        })
    }

    /// The statement `template`, written with the default names, as this
    /// outbox runs it: the template itself for the default names, else its
    /// text with every name of the outbox renamed, rendered on first use
    /// and kept.
    pub fn sql(&self, template: &'static str) -> Sql {
        let Some(named) = &self.named else {
            return Sql(SqlText::Template(template));
        };
        let key = (template.as_ptr() as usize, template.len());
        let cached = named
            .rendered
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        let text = match cached {
            Some(text) => text,
            None => {
                let text: Arc<str> = rename(template, named, self.quote).into();
                named
                    .rendered
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key, Arc::clone(&text));
                text
            }
        };
        Sql(SqlText::Rendered(text))
    }

    /// [`render`](Self::render) for text the caller owns: `text` itself
    /// for the default names.
    pub fn rendered(&self, text: String) -> String {
        match &self.named {
            None => text,
            Some(named) => rename(&text, named, self.quote),
        }
    }

    /// `text` (built at run time, written with the default names) with
    /// every name of the outbox renamed; not kept.
    pub fn render<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match &self.named {
            None => Cow::Borrowed(text),
            Some(named) => Cow::Owned(rename(text, named, self.quote)),
        }
    }
}

/// A statement's text as a store runs it ([`Names::sql`]).
#[derive(Debug, Clone)]
pub struct Sql(SqlText);

#[derive(Debug, Clone)]
enum SqlText {
    Template(&'static str),
    Rendered(Arc<str>),
}

impl Deref for Sql {
    type Target = str;

    fn deref(&self) -> &str {
        match &self.0 {
            SqlText::Template(text) => text,
            SqlText::Rendered(text) => text,
        }
    }
}

/// Why `prefix` cannot be a table prefix, if it cannot.
fn check_prefix(prefix: &str) -> std::result::Result<(), String> {
    if prefix.len() > MAX_TABLE_PREFIX_BYTES {
        return Err(format!(
            "`{prefix}` is {} bytes; at most {MAX_TABLE_PREFIX_BYTES}",
            prefix.len()
        ));
    }
    check_identifier(prefix)?;
    if let Some(table) = TABLES.iter().find(|table| prefix.starts_with(*table)) {
        return Err(format!(
            "`{prefix}` starts with the outbox's own table name `{table}`, \
             which would make its names ambiguous"
        ));
    }
    Ok(())
}

/// Why `name` (a prefix or a schema) is not lower-case a-z, 0-9 and `_`
/// starting with a letter, if it is not: the names every backend takes the
/// same way on every platform.
fn check_identifier(name: &str) -> std::result::Result<(), String> {
    if let Some(first) = name.chars().next()
        && !first.is_ascii_lowercase()
    {
        return Err(format!(
            "`{name}` must start with a lower-case letter (a-z)"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_'))
    {
        return Err(format!(
            "`{name}` holds {bad:?}; only a-z, 0-9 and _ are allowed"
        ));
    }
    Ok(())
}

/// Why `schema` cannot be a schema, if it cannot.
fn check_schema(schema: &str) -> std::result::Result<(), String> {
    check_identifier(schema)?;
    if schema.starts_with("pg_")
        || ["information_schema", "mysql", "performance_schema", "sys"].contains(&schema)
    {
        return Err(format!("`{schema}` is the server's own schema"));
    }
    Ok(())
}

/// Why a schema and a prefix are too long together, if they are.
fn check_lengths(schema: Option<&str>, prefix: &str) -> std::result::Result<(), String> {
    let schema = schema.unwrap_or_default();
    let total = schema.len() + prefix.len();
    if total > MAX_SCHEMA_AND_PREFIX_BYTES {
        return Err(format!(
            "the schema `{schema}` and the table prefix `{prefix}` take {total} bytes; \
             at most {MAX_SCHEMA_AND_PREFIX_BYTES} together"
        ));
    }
    Ok(())
}

/// Whether `word` is, or starts with, the default name of one of the
/// outbox's [`TABLES`]: a name a prefix renames.
fn is_outbox_name(word: &str) -> bool {
    TABLES.iter().any(|table| {
        word.strip_prefix(table)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('_'))
    })
}

/// `text` with the prefix before every word that [`is_outbox_name`] (a
/// word: a run of ASCII letters, digits, `_` and `$`, as identifiers are
/// written), and the schema, between `quote`s, before each of the [`TABLES`]
/// (in a string too, as PostgreSQL reads `'outbox_tasks'::regclass`), unless
/// a dot already stands before it. Indexes and constraints go where their
/// table goes, under their own names.
fn rename(text: &str, named: &Named, quote: char) -> String {
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    let prefix = named.prefix.as_str();
    let qualifier = named
        .schema
        .as_deref()
        .map(|schema| format!("{quote}{schema}{quote}."));
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 8 * (prefix.len() + 8));
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        if !is_word(bytes[at]) {
            at += 1;
            continue;
        }
        let start = at;
        while at < bytes.len() && is_word(bytes[at]) {
            at += 1;
        }
        let word = &text[start..at];
        if is_outbox_name(word) {
            out.push_str(&text[copied..start]);
            if let Some(qualifier) = &qualifier
                && TABLES.contains(&word)
                && !text[..start].ends_with('.')
            {
                out.push_str(qualifier);
            }
            out.push_str(prefix);
            copied = start;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// The names `sql` (a migration) creates or drops, lower-case words after
/// `TABLE`, `INDEX`, `CONSTRAINT`, `KEY`, `TRIGGER`, `SEQUENCE` or `VIEW`
/// (comments skipped), that no prefix would rename: each should be empty,
/// or a second outbox's migration would collide with the first's.
pub fn unrenamed_names(sql: &str) -> Vec<String> {
    const KEYWORDS: [&str; 11] = [
        "TABLE",
        "INDEX",
        "CONSTRAINT",
        "KEY",
        "TRIGGER",
        "SEQUENCE",
        "VIEW",
        "FUNCTION",
        "PROCEDURE",
        "TYPE",
        "POLICY",
    ];
    let code: String = sql
        .lines()
        .map(|line| line.split("--").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    // Words and single punctuation marks, so that a keyword's next token
    // is a name only when nothing stands between them (`PRIMARY KEY (id)`
    // and `PRIMARY KEY,` name nothing).
    let mut words: Vec<&str> = Vec::new();
    let mut rest = code.as_str();
    while let Some(c) = rest.chars().next() {
        let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let len = match is_word(c) {
            true => rest.find(|c: char| !is_word(c)).unwrap_or(rest.len()),
            false => c.len_utf8(),
        };
        let token = &rest[..len];
        if !token.trim().is_empty()
            && !matches!(
                token,
                "IF" | "NOT" | "EXISTS" | "CONCURRENTLY" | "OR" | "REPLACE"
            )
        {
            words.push(token);
        }
        rest = &rest[len..];
    }
    words
        .windows(2)
        .filter(|pair| KEYWORDS.contains(&pair[0]))
        .map(|pair| pair[1])
        .filter(|name| {
            name.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        })
        .filter(|name| !is_outbox_name(name))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefixed(prefix: &str) -> Names {
        Names::default().with_table_prefix(prefix).unwrap()
    }

    #[test]
    fn default_names_run_the_template_itself() {
        let template: &'static str = "SELECT id FROM outbox_tasks";
        let sql = Names::default().sql(template);
        assert_eq!(sql.as_ptr(), template.as_ptr());
        assert!(Names::default().is_default());
        assert!(prefixed("").is_default());
    }

    #[test]
    fn every_name_of_the_outbox_is_renamed_and_nothing_else() {
        let names = prefixed("billing_");
        let template = "INSERT INTO outbox_ordering_keys (ordering_key) \
             SELECT t.ordering_key FROM outbox_tasks t \
             JOIN outbox_inbox USING (id) WHERE outbox_tasks.id = ANY($1) \
             AND pg_get_serial_sequence('outbox_tasks', 'id') <> '' \
             AND name = 'outbox_id' AND x.my_outbox_tasks = 1 \
             AND outbox_tasksx = 2; \
             CREATE INDEX outbox_tasks_available_idx ON outbox_tasks (id); \
             SELECT value FROM outbox_meta";
        assert_eq!(
            &*names.sql(template),
            "INSERT INTO billing_outbox_ordering_keys (ordering_key) \
             SELECT t.ordering_key FROM billing_outbox_tasks t \
             JOIN billing_outbox_inbox USING (id) WHERE billing_outbox_tasks.id = ANY($1) \
             AND pg_get_serial_sequence('billing_outbox_tasks', 'id') <> '' \
             AND name = 'outbox_id' AND x.my_outbox_tasks = 1 \
             AND outbox_tasksx = 2; \
             CREATE INDEX billing_outbox_tasks_available_idx ON billing_outbox_tasks (id); \
             SELECT value FROM billing_outbox_meta"
        );
    }

    #[test]
    fn a_created_name_no_prefix_renames_is_found() {
        let sql = "-- CREATE TABLE jobs in a comment\n\
            CREATE TABLE IF NOT EXISTS outbox_tasks (id INT PRIMARY KEY, key VARCHAR(10),\n\
            PRIMARY KEY (id), CONSTRAINT outbox_tasks_id_check CHECK (id > 0));\n\
            CREATE INDEX jobs_idx ON outbox_tasks (id);\n\
            CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_kind_idx ON outbox_tasks (kind);\n\
            CREATE OR REPLACE FUNCTION notify_jobs() RETURNS trigger AS $$ SELECT 1 $$;\n\
            CREATE UNIQUE INDEX outbox_tasks_key_idx ON outbox_tasks (key);";
        assert_eq!(
            unrenamed_names(sql),
            ["jobs_idx", "jobs_kind_idx", "notify_jobs"]
        );
    }

    #[test]
    fn a_rendered_statement_is_kept_and_shared_by_clones() {
        let names = prefixed("a_");
        let template: &'static str = "SELECT 1 FROM outbox_tasks";
        let first = names.sql(template);
        let again = names.clone().sql(template);
        assert_eq!(first.as_ptr(), again.as_ptr());
        assert_eq!(&*first, "SELECT 1 FROM a_outbox_tasks");
    }

    #[test]
    fn a_prefix_a_backend_would_reject_or_need_quoted_is_refused_by_name() {
        for bad in [
            "Billing_",
            "1st_",
            "_x",
            "bill-ing",
            "bill ing",
            "b\"; DROP TABLE outbox_tasks; --",
            "outbox_tasks_",
            "ünï_",
            "a_prefix_of_21_bytes_",
        ] {
            let error = Names::default().with_table_prefix(bad).unwrap_err();
            assert!(
                matches!(
                    error,
                    Error::Config {
                        field: "table_prefix",
                        ..
                    }
                ),
                "{bad}: {error}"
            );
        }
        assert_eq!(prefixed("a_prefix_of_20bytes_").table_prefix().len(), 20);
        assert_eq!(prefixed("t1").table("outbox_meta"), "t1outbox_meta");
    }

    fn in_schema(schema: &str, prefix: &str) -> Names {
        Names::default()
            .with_schema(schema)
            .unwrap()
            .with_table_prefix(prefix)
            .unwrap()
    }

    #[test]
    fn a_schema_qualifies_each_table_and_moves_its_indexes_with_it() {
        let template = "INSERT INTO outbox_ordering_keys (ordering_key) \
             SELECT t.ordering_key FROM outbox_tasks t WHERE outbox_tasks.id = ANY($1) \
             AND pg_get_serial_sequence('outbox_tasks', 'id') <> '' AND name = 'outbox_id'; \
             CREATE INDEX outbox_tasks_available_idx ON outbox_tasks (id); \
             SELECT 1 FROM x.outbox_tasks";
        assert_eq!(
            &*in_schema("billing", "").sql(template),
            "INSERT INTO \"billing\".outbox_ordering_keys (ordering_key) \
             SELECT t.ordering_key FROM \"billing\".outbox_tasks t \
             WHERE \"billing\".outbox_tasks.id = ANY($1) \
             AND pg_get_serial_sequence('\"billing\".outbox_tasks', 'id') <> '' \
             AND name = 'outbox_id'; \
             CREATE INDEX outbox_tasks_available_idx ON \"billing\".outbox_tasks (id); \
             SELECT 1 FROM x.outbox_tasks"
        );
        let both = in_schema("order", "t_")
            .for_backend(BackendKind::Mysql)
            .unwrap();
        assert_eq!(
            both.render("CREATE INDEX outbox_tasks_idx ON outbox_tasks (id)"),
            "CREATE INDEX t_outbox_tasks_idx ON `order`.t_outbox_tasks (id)"
        );
        assert_eq!(both.display_table("outbox_tasks"), "order.t_outbox_tasks");
        assert_eq!(both.table("outbox_tasks"), "t_outbox_tasks");
        assert_eq!(
            both.create_schema_sql().as_deref(),
            Some("CREATE SCHEMA IF NOT EXISTS `order`;\n")
        );
        assert!(
            in_schema("billing", "")
                .create_schema_sql()
                .is_some_and(|sql| sql.contains("nspname = 'billing'")
                    && sql.contains("CREATE SCHEMA \"billing\";"))
        );
        assert_eq!(Names::default().create_schema_sql(), None);
    }

    #[test]
    fn a_schema_and_a_prefix_are_kept_by_each_other() {
        let names = Names::default()
            .with_table_prefix("t_")
            .unwrap()
            .with_schema("billing")
            .unwrap();
        assert_eq!(names, in_schema("billing", "t_"));
        assert_eq!(names.schema(), Some("billing"));
        assert_eq!(names.table_prefix(), "t_");
        let back = names
            .with_schema("")
            .unwrap()
            .with_table_prefix("")
            .unwrap();
        assert!(back.is_default());
        // The backend's quote stays through later changes.
        let mysql = Names::default()
            .for_backend(BackendKind::Mysql)
            .unwrap()
            .with_schema("billing")
            .unwrap();
        assert_eq!(mysql.render("outbox_tasks"), "`billing`.outbox_tasks");
        assert_ne!(mysql, in_schema("billing", ""));
    }

    #[test]
    fn a_schema_a_backend_would_reject_is_refused_by_name() {
        for bad in [
            "Billing",
            "1st",
            "_x",
            "bill-ing",
            "b\"; DROP SCHEMA public; --",
            "b`x",
            "pg_catalog",
            "information_schema",
            "mysql",
            "a_schema_name_of_thirty_six_bytes_xx",
        ] {
            let error = Names::default().with_schema(bad).unwrap_err();
            assert!(
                matches!(
                    error,
                    Error::Config {
                        field: "schema",
                        ..
                    }
                ),
                "{bad}: {error}"
            );
        }
        let long = Names::default()
            .with_schema("a_schema_of_twenty_bytes")
            .unwrap()
            .with_table_prefix("a_prefix_of_12_")
            .unwrap_err();
        assert!(
            matches!(
                long,
                Error::Config {
                    field: "table_prefix",
                    ..
                }
            ),
            "{long}"
        );
        let sqlite = in_schema("billing", "")
            .for_backend(BackendKind::Sqlite)
            .unwrap_err();
        assert!(
            matches!(
                sqlite,
                Error::Config {
                    field: "schema",
                    ..
                }
            ),
            "{sqlite}"
        );
        assert!(prefixed("t_").for_backend(BackendKind::Sqlite).is_ok());
        // A keyword is a schema like any other: it is written quoted.
        assert_eq!(in_schema("select", "").schema(), Some("select"));
    }
}
