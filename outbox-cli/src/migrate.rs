//! `outbox migrate`: apply, revert, or print the outbox migrations (or,
//! with `--inbox`, the inbox's).

use std::fmt::Write as _;

use diesel_outbox_sql::{MigrationSql, Names};
use serde_json::json;

use crate::{
    args::MigrateArgs,
    backend::Backend,
    commands::{self, Output},
    failure::Failure,
};

/// Runs `migrate` on `url`.
pub(crate) async fn run(
    backend: Backend,
    url: &str,
    names: &Names,
    args: &MigrateArgs,
    out: Output,
) -> Result<(), Failure> {
    if args.print {
        let sql = sql_text(
            &backend.migration_sql(args.inbox, names)?,
            args.revert,
            args.inbox,
        );
        return if out.json {
            print(&format!(
                "{}\n",
                serde_json::to_string(&json!({ "sql": sql }))?
            ))
        } else {
            print(&sql)
        };
    }
    if args.revert && !args.yes {
        commands::confirm(if args.inbox {
            "revert the inbox migrations, dropping every record of applied messages?"
        } else {
            "revert the outbox migrations, dropping every task?"
        })?;
    }
    let versions = backend.migrate(url, names, args.revert, args.inbox).await?;
    let verb = if args.revert { "reverted" } else { "applied" };
    if out.json {
        return print(&format!(
            "{}\n",
            serde_json::to_string(&json!({ verb: versions }))?
        ));
    }
    let mut text = String::new();
    if versions.is_empty() {
        let _ = writeln!(text, "up to date: no migration {verb}");
    }
    for version in versions {
        let _ = writeln!(text, "{verb} {version}");
    }
    print(&text)
}

fn print(text: &str) -> Result<(), Failure> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Every migration's `up.sql`, oldest first, or with `revert` every
/// `down.sql`, newest first, each under a comment naming it (and its set,
/// the outbox's or the inbox's).
fn sql_text(migrations: &[MigrationSql], revert: bool, inbox: bool) -> String {
    let set = if inbox { "inbox" } else { "outbox" };
    let ordered: Vec<&MigrationSql> = if revert {
        migrations.iter().rev().collect()
    } else {
        migrations.iter().collect()
    };
    let mut text = String::new();
    for (i, migration) in ordered.into_iter().enumerate() {
        let (file, sql) = if revert {
            ("down.sql", migration.down())
        } else {
            ("up.sql", migration.up())
        };
        if i > 0 {
            text.push('\n');
        }
        let _ = writeln!(
            text,
            "-- {set} migration {} ({}), {file}",
            migration.version(),
            migration.name()
        );
        text.push_str(sql);
        if !sql.ends_with('\n') {
            text.push('\n');
        }
    }
    text
}
