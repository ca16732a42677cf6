//! Every subcommand, its table and its JSON, and its exit codes.

use diesel_outbox_core::{Maintenance as _, Status, Store as _, Task};
use diesel_outbox_testkit::{
    TestBackend, conformance::support::KIND, mysql::MysqlTestDb, postgres::PgTestDb,
};

use crate::support::{INJECTED, outbox, seed};

/// `migrate`: applied, up to date, printed, reverted only when confirmed.
async fn migrate<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let url = db.url();
    let run = outbox(url, &["migrate"]).expect(0);
    assert!(run.stdout.contains("up to date"), "{run:?}");
    assert_eq!(
        outbox(url, &["migrate", "--json"]).expect(0).json()["applied"],
        serde_json::json!([])
    );
    let printed = outbox(url, &["migrate", "--print"]).expect(0);
    assert!(printed.stdout.contains("CREATE TABLE"), "{printed:?}");
    let printed = outbox(url, &["migrate", "--print", "--revert"]).expect(0);
    assert!(printed.stdout.contains("DROP TABLE"), "{printed:?}");

    let declined = outbox(url, &["migrate", "--revert"]).expect(5);
    assert!(declined.stderr.contains("--yes"), "{declined:?}");
    assert_eq!(db.count_tasks().await?, 0, "the table is still there");
    let reverted = outbox(url, &["migrate", "--revert", "--yes", "--json"])
        .expect(0)
        .json();
    assert_eq!(
        reverted["reverted"].as_array().map(Vec::len),
        Some(B::migration_sql()?.len())
    );
    assert!(db.count_tasks().await.is_err(), "the table is gone");
    let applied = outbox(url, &["migrate"]).expect(0);
    assert!(applied.stdout.starts_with("applied "), "{applied:?}");
    assert_eq!(db.count_tasks().await?, 0);
    Ok(())
}

/// `--table-prefix`: the command works on the outbox it names, beside the
/// default one in the same database, and refuses a prefix it cannot use.
async fn prefixed<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let url = db.url();
    let names = diesel_outbox_sql::Names::default().with_table_prefix("billing_")?;
    let billing = db.another_outbox(&names).await?;
    let mut conn = db.connect().await?;
    diesel_async::AsyncConnection::transaction::<_, anyhow::Error, _>(&mut conn, async |tx| {
        billing.enqueue(tx, Task::new(KIND, 1, "{}")).await?;
        Ok(())
    })
    .await?;

    let prefixed = |args: &[&str]| {
        let mut all = vec!["--table-prefix", "billing_"];
        all.extend_from_slice(args);
        outbox(url, &all)
    };
    assert!(
        prefixed(&["migrate"])
            .expect(0)
            .stdout
            .contains("up to date")
    );
    assert_eq!(
        prefixed(&["stats", "--json"]).expect(0).json()["available"],
        1
    );
    assert_eq!(
        outbox(url, &["stats", "--json"]).expect(0).json()["available"],
        0
    );
    let listed = prefixed(&["list", "--json"]).expect(0).json();
    assert_eq!(
        listed["tasks"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    let printed = prefixed(&["migrate", "--print"]).expect(0);
    assert!(
        printed.stdout.contains("CREATE TABLE billing_outbox_tasks"),
        "{printed:?}"
    );

    // A third outbox, migrated and reverted through the command alone.
    let crm = |args: &[&str]| {
        let mut all = vec!["--table-prefix", "crm_"];
        all.extend_from_slice(args);
        outbox(url, &all)
    };
    crm(&["stats"]).expect(1);
    assert!(crm(&["migrate"]).expect(0).stdout.starts_with("applied "));
    assert_eq!(crm(&["stats", "--json"]).expect(0).json()["available"], 0);
    let reverted = crm(&["migrate", "--revert", "--yes", "--json"])
        .expect(0)
        .json();
    assert_eq!(
        reverted["reverted"].as_array().map(Vec::len),
        Some(B::migration_sql()?.len())
    );
    crm(&["stats"]).expect(1);
    assert_eq!(
        prefixed(&["stats", "--json"]).expect(0).json()["available"],
        1
    );
    assert_eq!(
        db.count_tasks().await?,
        0,
        "the default outbox is still there"
    );

    let refused = outbox(url, &["--table-prefix", "Billing", "stats"]).expect(2);
    assert!(refused.stderr.contains("table_prefix"), "{refused:?}");
    assert!(refused.stderr.contains("lower-case"), "{refused:?}");
    Ok(())
}

/// `--schema`: the command works on the outbox in that schema (on MySQL, a
/// database), beside the default one, migrates it there and prints its
/// SQL; SQLite, without schemas, refuses the option as a usage error.
async fn in_schema<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let url = db.url();
    let Some(schema) = db.another_schema() else {
        let refused = outbox(url, &["--schema", "billing", "stats"]).expect(2);
        assert!(refused.stderr.contains("schema"), "{refused:?}");
        assert!(
            refused.stderr.contains("SQLite has no schemas"),
            "{refused:?}"
        );
        return Ok(());
    };
    let in_schema = |args: &[&str]| {
        let mut all = vec!["--schema", schema.as_str()];
        all.extend_from_slice(args);
        outbox(url, &all)
    };
    in_schema(&["stats"]).expect(1);
    assert!(
        in_schema(&["migrate"])
            .expect(0)
            .stdout
            .starts_with("applied ")
    );
    let names = diesel_outbox_sql::Names::default().with_schema(&schema)?;
    let billing = db.another_outbox(&names).await?;
    let mut conn = db.connect().await?;
    diesel_async::AsyncConnection::transaction::<_, anyhow::Error, _>(&mut conn, async |tx| {
        billing.enqueue(tx, Task::new(KIND, 1, "{}")).await?;
        Ok(())
    })
    .await?;
    assert_eq!(
        in_schema(&["stats", "--json"]).expect(0).json()["available"],
        1
    );
    assert_eq!(
        outbox(url, &["stats", "--json"]).expect(0).json()["available"],
        0
    );
    let printed = in_schema(&["migrate", "--print"]).expect(0);
    assert!(
        printed.stdout.contains("CREATE SCHEMA")
            && (printed.stdout.contains(&format!("`{schema}`.outbox_tasks"))
                || printed
                    .stdout
                    .contains(&format!("\"{schema}\".outbox_tasks"))),
        "{printed:?}"
    );
    let reverted = in_schema(&["migrate", "--revert", "--yes", "--json"])
        .expect(0)
        .json();
    assert_eq!(
        reverted["reverted"].as_array().map(Vec::len),
        Some(B::migration_sql()?.len())
    );
    in_schema(&["stats"]).expect(1);
    assert_eq!(
        db.count_tasks().await?,
        0,
        "the default outbox is still there"
    );

    let refused = outbox(url, &["--schema", "pg_catalog", "stats"]).expect(2);
    assert!(refused.stderr.contains("schema"), "{refused:?}");
    Ok(())
}

/// The read commands on a small outbox: two failed tasks, two available
/// ones (one with an ordering key), one of another kind.
async fn reads<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let url = db.url();
    let ids = seed(
        db,
        vec![
            Task::new(KIND, 1, r#"{"order":1,"items":["a","b"]}"#)
                .header("traceparent", "00-abc-01"),
            Task::new(KIND, 1, "not json"),
            Task::new(KIND, 1, "{}").ordering_key("customer-7"),
            Task::new(KIND, 1, "{}"),
            Task::new("invoice.issued", 2, "{}"),
        ],
        2,
    )
    .await?;

    let stats = outbox(url, &["stats"]).expect(0);
    assert!(stats.stdout.starts_with("STATUS"), "{stats:?}");
    let failed_row = stats.stdout.lines().find(|line| line.starts_with("failed"));
    assert_eq!(
        failed_row.map(|row| row.split_whitespace().collect::<Vec<_>>()),
        Some(vec!["failed", "2"])
    );
    let stats = outbox(url, &["stats", "--json"]).expect(0).json();
    assert_eq!(
        (
            stats["failed"].as_u64(),
            stats["available"].as_u64(),
            stats["backlog"].as_u64()
        ),
        (Some(2), Some(3), Some(3))
    );
    assert!(stats["oldest_due_age_seconds"].is_number(), "{stats}");
    assert!(stats["oldest_running_age_seconds"].is_null(), "{stats}");

    let list = outbox(url, &["list"]).expect(0);
    let lines: Vec<&str> = list.stdout.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("LAST ERROR"),
        "{list:?}"
    );
    assert_eq!(lines.len(), 6, "a header and five tasks: {list:?}");
    assert!(
        lines[1].starts_with(&ids[4].to_string()),
        "newest first: {list:?}"
    );
    assert!(
        lines[5].contains(INJECTED),
        "the failed task's error: {list:?}"
    );

    let failed = outbox(url, &["list", "--status", "failed", "--json"])
        .expect(0)
        .json();
    let listed: Vec<i64> = failed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect();
    assert_eq!(listed, [ids[1].get(), ids[0].get()]);
    assert!(failed["next"].is_null());
    assert!(
        failed["tasks"][0]["last_error"]
            .as_str()
            .unwrap()
            .contains(INJECTED)
    );
    assert_eq!(failed["tasks"][0]["status"], "failed");

    let keyed = outbox(
        url,
        &["list", "--key", "customer-7", "--kind", KIND, "--json"],
    )
    .expect(0)
    .json();
    assert_eq!(keyed["tasks"].as_array().map(Vec::len), Some(1));
    assert_eq!(keyed["tasks"][0]["ordering_key"], "customer-7");
    let none = outbox(
        url,
        &["list", "--status", "failed", "--kind", "invoice.issued"],
    )
    .expect(0);
    assert!(none.stdout.contains("no tasks match"), "{none:?}");
    let recent = outbox(url, &["list", "--since", "1h", "--json"])
        .expect(0)
        .json();
    assert_eq!(recent["tasks"].as_array().map(Vec::len), Some(5));
    let future = outbox(url, &["list", "--since", "2999-01-01T00:00:00Z", "--json"])
        .expect(0)
        .json();
    assert_eq!(future["tasks"].as_array().map(Vec::len), Some(0));

    let first = outbox(url, &["list", "--limit", "2", "--oldest-first", "--json"])
        .expect(0)
        .json();
    assert_eq!(first["tasks"][0]["id"].as_i64(), Some(ids[0].get()));
    let next = first["next"].as_i64().unwrap();
    assert_eq!(next, ids[1].get());
    let second = outbox(
        url,
        &[
            "list",
            "--limit",
            "2",
            "--oldest-first",
            "--after",
            &next.to_string(),
            "--json",
        ],
    )
    .expect(0)
    .json();
    assert_eq!(second["tasks"][0]["id"].as_i64(), Some(ids[2].get()));
    let table = outbox(url, &["list", "--limit", "2"]).expect(0);
    assert!(table.stdout.contains("more: --after"), "{table:?}");

    let show = outbox(url, &["show", &ids[0].to_string()]).expect(0);
    let field = |name: &str| {
        show.stdout
            .lines()
            .find_map(|line| {
                line.strip_prefix(name)
                    .filter(|rest| rest.starts_with("  "))
            })
            .map(str::trim)
            .map(str::to_owned)
    };
    assert_eq!(field("status").as_deref(), Some("failed"), "{show:#?}");
    assert_eq!(field("attempts").as_deref(), Some("1"), "{show:#?}");
    for expected in [
        "traceparent: 00-abc-01",
        INJECTED,
        "payload (json",
        "  \"items\": [",
    ] {
        assert!(show.stdout.contains(expected), "{expected:?} in {show:#?}");
    }
    let detail = outbox(url, &["show", &ids[0].to_string(), "--json"])
        .expect(0)
        .json();
    assert_eq!(detail["payload_encoding"], "json");
    assert_eq!(detail["payload"]["items"][1], "b");
    assert_eq!(detail["headers"]["traceparent"], "00-abc-01");
    assert_eq!(
        (detail["attempts"].as_i64(), detail["runs"].as_i64()),
        (Some(1), Some(1))
    );
    assert!(detail["finished_at"].is_string());
    let text = outbox(url, &["show", &ids[1].to_string(), "--json"])
        .expect(0)
        .json();
    assert_eq!(
        (text["payload_encoding"].as_str(), text["payload"].as_str()),
        (Some("utf8"), Some("not json"))
    );

    let missing = outbox(url, &["show", "987654321"]).expect(3);
    assert!(missing.stderr.contains("not found"), "{missing:?}");

    let watch = outbox(
        url,
        &["watch", "--count", "2", "--every", "100ms", "--json"],
    )
    .expect(0);
    let samples: Vec<serde_json::Value> = watch
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(samples.len(), 2, "{watch:?}");
    assert!(
        samples
            .iter()
            .all(|sample| sample["failed"] == 2 && sample["at"].is_string())
    );
    let watch = outbox(url, &["watch", "--count", "1"]).expect(0);
    assert!(watch.stdout.contains("failed=2"), "{watch:?}");
    Ok(())
}

/// The changing commands: requeue and discard, one or in bulk, and purge,
/// with the exit codes scripts rely on.
async fn changes<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let url = db.url();
    let tasks = (0..6)
        .map(|n| Task::new(KIND, 1, format!("{{\"n\":{n}}}")))
        .collect();
    let ids = seed(db, tasks, 5).await?;
    let store = db.store();
    let id = |n: usize| ids[n].to_string();

    let run = outbox(url, &["requeue", &id(0)]).expect(0);
    assert_eq!(run.stdout, format!("requeued task {}\n", ids[0]));
    assert_eq!(store.get(ids[0]).await?.status, Status::Available);
    let again = outbox(url, &["requeue", &id(0)]).expect(4);
    assert!(again.stderr.contains("not failed"), "{again:?}");
    outbox(url, &["requeue", "987654321"]).expect(3);
    outbox(url, &["requeue"]).expect(2);
    outbox(url, &["requeue", "--status", "available", "--yes"]).expect(2);
    outbox(url, &["requeue", &id(1), "--status", "failed"]).expect(2);

    let json = outbox(url, &["discard", &id(1), "--json"]).expect(0).json();
    assert_eq!(
        (json["discarded"].as_u64(), json["id"].as_i64()),
        (Some(1), Some(ids[1].get()))
    );
    outbox(url, &["discard", &id(1)]).expect(4);

    let declined = outbox(url, &["requeue", "--status", "failed"]).expect(5);
    assert!(
        declined
            .stderr
            .contains("requeue 3 task(s) matching status=failed"),
        "{declined:?}"
    );
    assert_eq!(store.stats().await?.failed, 3, "nothing changed");
    let run = outbox(
        url,
        &[
            "requeue", "--status", "failed", "--kind", KIND, "--batch", "2", "--yes",
        ],
    )
    .expect(0);
    assert_eq!(run.stdout, "requeued 3 task(s)\n");
    assert_eq!(store.stats().await?.failed, 0);

    outbox(url, &["discard", "--status", "available"]).expect(5);
    let json = outbox(
        url,
        &["discard", "--status", "available", "--yes", "--json"],
    )
    .expect(0)
    .json();
    assert_eq!(json["discarded"].as_u64(), Some(5));
    outbox(url, &["discard", "--status", "succeeded", "--yes"]).expect(2);
    let stats = store.stats().await?;
    assert_eq!((stats.discarded, stats.available), (6, 0));

    outbox(url, &["purge", "--older-than", "0s"]).expect(5);
    outbox(url, &["purge", "--older-than", "soon", "--yes"]).expect(2);
    let kept = outbox(url, &["purge", "--older-than", "1h", "--yes", "--json"])
        .expect(0)
        .json();
    assert_eq!(kept["purged"].as_u64(), Some(0), "finished just now");
    let purged = outbox(url, &["purge", "--older-than", "0s", "--yes"]).expect(0);
    assert_eq!(purged.stdout, "purged 6 task(s)\n");
    assert_eq!(db.count_tasks().await?, 0);
    Ok(())
}

/// Errors that are the database's or the user's, not a task's.
async fn bad_databases<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let run = outbox("redis://127.0.0.1/0", &["stats"]).expect(2);
    assert!(run.stderr.contains("unsupported database URL"), "{run:?}");
    let scheme = db
        .url()
        .split_once("://")
        .map(|(scheme, _)| scheme)
        .unwrap_or_default();
    // Nothing listens on port 9: each command names the server (never the
    // password), the kind, and the operating system's reason, once.
    let unreachable = format!("{scheme}://root:hunter2@127.0.0.1:9/none");
    for command in ["stats", "migrate"] {
        let run = outbox(&unreachable, &[command]).expect(1);
        assert!(
            run.stderr.starts_with(
                "outbox: database error (connection): could not connect to 127.0.0.1:9, \
                 database none: "
            ),
            "{command}: {run:?}"
        );
        assert!(
            run.stderr
                .trim_end()
                .ends_with("Connection refused (os error 111)"),
            "{command}: {run:?}"
        );
        assert!(!run.stderr.contains("hunter2"), "{command}: {run:?}");
        assert_eq!(
            run.stderr.matches("connecting to server").count(),
            usize::from(scheme == "postgres"),
            "{command}: {run:?}"
        );
    }
    // A database the server does not have: its words, once.
    let (server, _) = db.url().rsplit_once('/').unwrap_or_default();
    let missing = format!("{server}/cli_no_such_database");
    let run = outbox(&missing, &["stats"]).expect(1);
    assert!(
        run.stderr.contains(", database cli_no_such_database: "),
        "{run:?}"
    );
    assert_eq!(
        run.stderr.matches("cli_no_such_database").count(),
        2,
        "{run:?}"
    );
    let run = outbox(db.url(), &["list", "--limit", "0"]).expect(2);
    assert!(run.stderr.contains("limit"), "{run:?}");
    let run = std::process::Command::new(crate::support::OUTBOX)
        .arg("stats")
        .env_remove("DATABASE_URL")
        .output()?;
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    Ok(())
}

/// A database without the outbox's tables: every command says so and what
/// to run, and `serve` refuses to start rather than serve only errors.
async fn unmigrated<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let url = db.url();
    outbox(url, &["migrate", "--revert", "--yes"]).expect(0);
    for args in [
        &["stats"][..],
        &["list"],
        &["requeue", "--status", "failed", "--yes"],
        &["show", "1"],
    ] {
        let run = outbox(url, args).expect(1);
        assert!(run.stderr.contains("outbox_tasks"), "{args:?}: {run:?}");
        assert!(
            run.stderr.contains(
                "hint: the outbox's tables are not in this database: \
                 run `outbox migrate`"
            ),
            "{args:?}: {run:?}"
        );
    }
    let serve = crate::support::outbox_within(
        url,
        &["serve", "--bind", "127.0.0.1:0"],
        std::time::Duration::from_secs(60),
    )
    .await?
    .expect(1);
    assert!(serve.stdout.is_empty(), "it never listened: {serve:?}");
    assert!(serve.stderr.contains("run `outbox migrate`"), "{serve:?}");
    outbox(url, &["migrate"]).expect(0);
    outbox(url, &["stats"]).expect(0);
    Ok(())
}

/// `failures` groups failed tasks by kind and folded error, largest first;
/// `requeue --group` and `discard --group` change a whole group, after a
/// confirmation that says how many tasks it touches.
async fn groups<B: TestBackend>(db: &B, url: &str) -> anyhow::Result<()> {
    crate::support::fail_with(
        db,
        &[
            "order 1 declined by 'acme'",
            "timeout after 5s",
            "order 22 declined by 'globex'",
            "order 333 declined by 'initech'",
            "timeout after 30s",
        ],
    )
    .await?;
    let listed = outbox(url, &["failures", "--json"]).expect(0).json();
    let groups = listed["groups"].as_array().cloned().unwrap_or_default();
    let summary: Vec<(String, u64)> = groups
        .iter()
        .map(|group| {
            (
                group["class"].as_str().unwrap_or_default().to_owned(),
                group["count"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("order # declined by '…'".to_owned(), 3),
            ("timeout after #".to_owned(), 2)
        ],
        "{listed}"
    );
    assert_eq!(groups[0]["example"], "order 333 declined by 'initech'");
    let declined = groups[0]["group"].as_str().unwrap_or_default().to_owned();
    let timeouts = groups[1]["group"].as_str().unwrap_or_default().to_owned();
    let table = outbox(url, &["failures"]).expect(0);
    assert!(table.stdout.contains(&declined), "{table:?}");
    assert!(table.stdout.contains("order # declined by"), "{table:?}");

    // Without a terminal and without --yes: nothing changes, and the
    // question says how many tasks it would touch.
    let declined_run = outbox(url, &["requeue", "--group", &declined]).expect(5);
    assert!(
        declined_run.stderr.contains(&format!(
            "requeue 3 failed {KIND} task(s) of group {declined}"
        )),
        "{declined_run:?}"
    );
    assert_eq!(db.store().stats().await?.failed, 5);

    // On a terminal, a group that changes while the question waits is left
    // alone: the operator confirmed three tasks, not four.
    let mut asked = crate::support::OnTerminal::start(url, &["discard", "--group", &declined])?;
    asked.wait_for("[y/N]")?;
    crate::support::fail_with(db, &["order 4444 declined by 'umbrella'"]).await?;
    let (code, shown) = asked.answer("y")?;
    assert_eq!(code, 4, "{shown}");
    assert!(
        shown.contains(&format!(
            "failure group {declined} changed while you were asked (it now holds 4 task(s))"
        )),
        "{shown}"
    );
    let stats = db.store().stats().await?;
    assert_eq!((stats.failed, stats.discarded), (6, 0), "nothing changed");
    // Answered no: nothing changes either.
    let mut asked = crate::support::OnTerminal::start(url, &["discard", "--group", &declined])?;
    asked.wait_for("discard 4 failed")?;
    asked.wait_for("[y/N]")?;
    let (code, shown) = asked.answer("n")?;
    assert_eq!(code, 5, "{shown}");
    assert_eq!(db.store().stats().await?.failed, 6);

    let requeued = outbox(url, &["requeue", "--group", &declined, "--yes", "--json"])
        .expect(0)
        .json();
    assert_eq!(requeued["requeued"], 4, "{requeued}");
    let discarded = outbox(url, &["discard", "--group", &timeouts, "--yes"]).expect(0);
    assert!(
        discarded.stdout.contains("discarded 2 task(s)"),
        "{discarded:?}"
    );
    let stats = db.store().stats().await?;
    assert_eq!((stats.failed, stats.available, stats.discarded), (0, 4, 2));

    let gone = outbox(url, &["requeue", "--group", &timeouts, "--yes"]).expect(3);
    assert!(gone.stderr.contains("no failure group"), "{gone:?}");
    outbox(
        url,
        &["requeue", "--group", &declined, "--status", "failed"],
    )
    .expect(2);
    assert_eq!(
        outbox(url, &["failures"]).expect(0).stdout,
        "no failed tasks\n"
    );
    Ok(())
}

/// `relays`: every relay heard of in the last day, live or silent, with
/// its ages; `stats` counts the live ones.
async fn relays<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let url = db.url();
    let none = outbox(url, &["relays"]).expect(0);
    assert_eq!(none.stdout, "no relay heard of in the last day\n");
    let mut beat =
        diesel_outbox_core::Heartbeat::new("relay-7", std::time::Duration::from_secs(90));
    beat.since_claim = Some(std::time::Duration::from_secs(1));
    db.store().beat(&beat).await?;
    let mut silent = diesel_outbox_core::Heartbeat::new("relay-8", std::time::Duration::ZERO);
    silent.ttl = std::time::Duration::ZERO;
    db.store().beat(&silent).await?;

    let listed = outbox(url, &["relays", "--json"]).expect(0).json();
    let relays = listed["relays"].as_array().cloned().unwrap_or_default();
    assert_eq!(relays.len(), 2, "{listed}");
    assert_eq!(relays[0]["owner"], "relay-7");
    assert_eq!(relays[0]["live"], true);
    assert_eq!(relays[0]["pid"], i64::from(beat.pid));
    assert!(relays[0]["write_seconds_ago"].is_null(), "{listed}");
    assert!(
        relays[0]["claim_seconds_ago"]
            .as_f64()
            .is_some_and(|s| s < 3.0),
        "{listed}"
    );
    assert_eq!(relays[1]["live"], false);
    let table = outbox(url, &["relays"]).expect(0).stdout;
    let line = table
        .lines()
        .find(|line| line.starts_with("relay-7"))
        .unwrap_or_default();
    assert!(
        line.contains(" live ") && line.ends_with("never"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|line| line.starts_with("relay-8") && line.contains(" silent ")),
        "{table}"
    );
    assert_eq!(
        outbox(url, &["stats", "--json"]).expect(0).json()["live_relays"],
        1
    );
    Ok(())
}

async fn groups_on_server<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    groups(db, db.url()).await
}

/// A row another program wrote whose headers are not a map of strings, failed
/// by the claim: `list` still shows every failed task, the bad row marked
/// unreadable with its reason, `show` says why it cannot be read, and
/// `discard` gives it up. `url` is the database as the command takes it.
async fn unreadable<B: TestBackend>(db: &B, url: &str) -> anyhow::Result<()> {
    let ids = seed(
        db,
        vec![Task::new(KIND, 1, "{}"), Task::new(KIND, 1, "{}")],
        1,
    )
    .await?;
    db.execute_sql(&format!(
        "UPDATE outbox_tasks SET headers = '{{\"retries\": 3}}' WHERE id = {}",
        ids[1].get()
    ))
    .await?;
    let (mock, _) = diesel_outbox_testkit::handler::recording();
    let worker = diesel_outbox_testkit::conformance::support::worker(
        db,
        diesel_outbox_testkit::conformance::support::registry(mock)?,
        diesel_outbox_testkit::conformance::support::config("cli-reader"),
    )?;
    worker.retry_pending(10).await?;
    assert_eq!(
        db.store().inspect(ids[1]).await.map(|row| row.id())?,
        ids[1]
    );

    let list = outbox(url, &["list", "--status", "failed"]).expect(0);
    let lines: Vec<&str> = list.stdout.lines().collect();
    assert_eq!(
        lines.len(),
        3,
        "a header, the failed task and the unreadable row: {list:?}"
    );
    assert!(
        lines[1].starts_with(&ids[1].to_string()) && lines[1].contains("unreadable headers"),
        "{list:?}"
    );
    assert!(lines[2].starts_with(&ids[0].to_string()), "{list:?}");
    let json = outbox(url, &["list", "--status", "failed", "--json"])
        .expect(0)
        .json();
    assert_eq!(json["tasks"].as_array().map(Vec::len), Some(1), "{json}");
    assert_eq!(
        json["unreadable"][0]["id"],
        serde_json::json!(ids[1].get()),
        "{json}"
    );
    assert_eq!(
        json["unreadable"][0]["unreadable"]["field"], "headers",
        "{json}"
    );

    let show = outbox(url, &["show", &ids[1].to_string()]).expect(0);
    assert!(
        show.stdout.contains("unreadable: the headers column"),
        "{show:?}"
    );
    let shown = outbox(url, &["show", &ids[1].to_string(), "--json"])
        .expect(0)
        .json();
    assert_eq!(shown["status"], "failed", "{shown}");

    outbox(url, &["discard", &ids[1].to_string()]).expect(0);
    let shown = outbox(url, &["show", &ids[1].to_string(), "--json"])
        .expect(0)
        .json();
    assert_eq!(shown["status"], "discarded", "{shown}");
    Ok(())
}

async fn unreadable_on_server<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    unreadable(db, db.url()).await
}

/// The same on SQLite, whose URL the command takes as `sqlite://PATH`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_unreadable_rows_are_listed_shown_and_discarded() {
    let db = diesel_outbox_testkit::sqlite::SqliteTestDb::create("cli_sqlite_unreadable")
        .await
        .unwrap();
    let url = format!("sqlite://{}", db.url());
    unreadable(&db, &url).await.unwrap();
}

/// A SQLite file that is not there: every command but `migrate` refuses it
/// without creating it, `migrate` creates it, and a file without the
/// outbox's tables gets the hint to migrate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_refuses_a_missing_file_and_hints_at_migrate() {
    let dir = std::env::temp_dir().join(format!("outbox-cli-missing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("orders.db");
    let url = format!("sqlite://{}", file.display());
    for args in [
        &["stats"][..],
        &["list"],
        &["serve", "--bind", "127.0.0.1:0"],
    ] {
        let run = outbox(&url, args).expect(1);
        assert_eq!(
            run.stderr.trim_end(),
            format!(
                "outbox: no SQLite database at {}: check the path, or create it with \
                 `outbox migrate`",
                file.display()
            ),
            "{args:?}"
        );
        assert!(!file.exists(), "{args:?} created the file");
    }
    std::fs::write(&file, b"").unwrap();
    let run = outbox(&url, &["stats"]).expect(1);
    assert!(
        run.stderr.contains("no such table: outbox_tasks"),
        "{run:?}"
    );
    assert!(run.stderr.contains("run `outbox migrate`"), "{run:?}");
    std::fs::remove_file(&file).unwrap();
    outbox(&url, &["migrate"]).expect(0);
    outbox(&url, &["stats"]).expect(0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_failure_groups_are_listed_and_changed_whole() {
    let db = diesel_outbox_testkit::sqlite::SqliteTestDb::create("cli_sqlite_groups")
        .await
        .unwrap();
    let url = format!("sqlite://{}", db.url());
    groups(&db, &url).await.unwrap();
}

/// `--schema` on SQLite, which has no schemas: a usage error that says so,
/// for reads and for `migrate --print` alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_refuses_a_schema() {
    let db = diesel_outbox_testkit::sqlite::SqliteTestDb::create("cli_sqlite_schema")
        .await
        .unwrap();
    let url = format!("sqlite://{}", db.url());
    for args in [
        &["--schema", "billing", "stats"][..],
        &["--schema", "billing", "migrate", "--print"],
    ] {
        let refused = outbox(&url, args).expect(2);
        assert!(refused.stderr.contains("schema"), "{refused:?}");
        assert!(
            refused.stderr.contains("SQLite has no schemas"),
            "{refused:?}"
        );
    }
}

macro_rules! each_backend {
    ($($name:ident => $scenario:ident),* $(,)?) => {
        mod postgres {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = PgTestDb::create(concat!("cli_", stringify!($name))).await.unwrap();
                    $scenario(&db).await.unwrap();
                }
            )*
        }
        mod mariadb {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = MysqlTestDb::create(concat!("cli_", stringify!($name))).await.unwrap();
                    $scenario(&db).await.unwrap();
                }
            )*
        }
    };
}

each_backend! {
    migrate_applies_prints_and_reverts_when_confirmed => migrate,
    stats_list_show_and_watch_read_the_outbox => reads,
    requeue_discard_and_purge_change_it => changes,
    bad_urls_and_values_exit_with_their_codes => bad_databases,
    unreadable_rows_are_listed_shown_and_discarded => unreadable_on_server,
    an_unmigrated_database_says_to_migrate => unmigrated,
    failure_groups_are_listed_and_changed_whole => groups_on_server,
    relays_lists_live_and_silent_relays => relays,
    a_table_prefix_picks_one_of_two_outboxes => prefixed,
    a_schema_picks_the_outbox_in_it => in_schema,
}
