//! A PostgreSQL primary with a streaming standby; the primary is ended
//! (immediate shutdown) under load and the standby promoted. Relays and
//! producers connect with one multi-host URL,
//! `postgres://…@primary,standby/db?target_session_attrs=read-write`, and
//! follow the promotion without a restart.
//!
//! Run twice: with synchronous replication (the standby named in
//! `synchronous_standby_names`), where every commit that returned `Ok` must
//! be on the promoted standby; and asynchronous, where commits the old
//! primary acknowledged may be missing on the new one: that window is
//! measured, not checked. In both, every order the new primary holds is
//! delivered, by the same relay processes.

use std::{collections::HashSet, time::Duration};

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use diesel_outbox_core::CancellationToken;
use diesel_outbox_sql::BackendKind;
use diesel_outbox_testkit::{TestBackend, postgres::PgTestDb};

use super::ClusterCtx;
use crate::{
    clock, db,
    producer::{self, Commit, Tally},
    records,
    relays::{RelaySpec, Relays},
    report::Report,
    scenarios::{pause, quantile, settle, then_stop},
    servers::{DbServer as _, postgres::PgServer},
};

/// The scenario's database.
const DATABASE: &str = "chaos_failover";

/// The relays' poll interval: the default. Wake-ups (NOTIFY) bring tasks in
/// long before it, once a relay listens on the new primary.
const POLL: Duration = Duration::from_secs(1);

/// Synchronous or asynchronous streaming replication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replication {
    Sync,
    Async,
}

impl Replication {
    fn name(self) -> &'static str {
        match self {
            Replication::Sync => "sync",
            Replication::Async => "async",
        }
    }
}

/// Sends every task insert's wake-up at commit, as `PgStore::with_notify`
/// does for the enqueues of a store that opted in (the producers here write
/// through the scenarios' shared code, on a store that did not).
const WAKE_TRIGGER: &str = "
    CREATE FUNCTION outbox_wake() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_notify('outbox_tasks', ''); RETURN NULL; END $$;
    CREATE TRIGGER outbox_wake AFTER INSERT ON outbox_tasks
        FOR EACH STATEMENT EXECUTE FUNCTION outbox_wake();";

pub(crate) async fn run(ctx: &mut ClusterCtx<'_>, report: &mut Report) -> anyhow::Result<()> {
    for replication in [Replication::Sync, Replication::Async] {
        let mut part = Report::new("failover", "postgres");
        variant(ctx, replication, &mut part).await?;
        let prefix = replication.name();
        for mut check in part.checks {
            check.name = format!("{prefix}: {}", check.name);
            report.checks.push(check);
        }
        for mut figure in part.figures {
            figure.name = format!("{prefix}: {}", figure.name);
            report.figures.push(figure);
        }
    }
    Ok(())
}

#[derive(diesel::QueryableByName)]
struct Standby {
    #[diesel(sql_type = diesel::sql_types::Text)]
    state: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    sync_state: String,
}

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// The standby's replication state and sync state as the primary sees it,
/// once it streams as `expected` (`sync` or `async`), or as last seen after
/// 30 s. (A synchronous standby first streams as `async`, then the primary
/// makes it synchronous.)
async fn streaming(primary: &PgServer, expected: &str) -> anyhow::Result<(String, String)> {
    let mut conn = AsyncPgConnection::establish(&primary.admin_url()).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut seen = ("not connected".to_owned(), "-".to_owned());
    while tokio::time::Instant::now() < deadline {
        let rows: Vec<Standby> = diesel::sql_query(
            "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = 'standby'",
        )
        .load(&mut conn)
        .await?;
        if let Some(row) = rows.into_iter().next() {
            seen = (row.state, row.sync_state);
            if seen.0 == "streaming" && seen.1 == expected {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(seen)
}

/// Sessions on `server` whose latest statement was the relays' `LISTEN`
/// (a LISTEN connection runs nothing else).
async fn listeners(server: &PgServer) -> anyhow::Result<i64> {
    let mut conn = AsyncPgConnection::establish(&server.url(DATABASE)).await?;
    let count: Count = diesel::sql_query(
        "SELECT COUNT(*) AS n FROM pg_stat_activity
          WHERE datname = current_database() AND query = 'LISTEN outbox_tasks'",
    )
    .get_result(&mut conn)
    .await?;
    Ok(count.n)
}

/// Polls until `want` relays listen on `server`, at most `limit`; when.
async fn wait_listening(server: &PgServer, want: i64, limit: Duration) -> Option<u64> {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if listeners(server).await.is_ok_and(|n| n >= want) {
            return Some(clock::now_us());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

async fn variant(
    ctx: &mut ClusterCtx<'_>,
    replication: Replication,
    report: &mut Report,
) -> anyhow::Result<()> {
    let name = replication.name();
    let (load, detect, after) = ctx.pick(
        (
            Duration::from_secs(4),
            Duration::from_secs(1),
            Duration::from_secs(6),
        ),
        (
            Duration::from_secs(15),
            Duration::from_secs(2),
            Duration::from_secs(20),
        ),
    );
    ctx.progress
        .phase(&format!("{name}: a primary and a streaming standby"));
    let mut primary_settings = vec!["wal_level=replica", "max_wal_senders=10"];
    if replication == Replication::Sync {
        primary_settings.extend(["synchronous_standby_names=standby", "synchronous_commit=on"]);
    }
    let mut primary =
        PgServer::init(ctx.run, &format!("{name}-primary"), &primary_settings).await?;
    // The standby's walreceiver introduces itself by `cluster_name`; it
    // names no synchronous standby of its own, so that once promoted it
    // commits alone.
    let standby = primary
        .standby_of(
            ctx.run,
            &format!("{name}-standby"),
            &["hot_standby=on", "cluster_name=standby"],
        )
        .await?;
    let expected = match replication {
        Replication::Sync => "sync",
        Replication::Async => "async",
    };
    let (state, sync_state) = streaming(&primary, expected).await?;
    report.check(
        "standby streams",
        state == "streaming" && sync_state == expected,
        format!("pg_stat_replication: {state}, {sync_state}"),
    );

    let setup: PgTestDb = db::create(&primary.admin_url(), DATABASE).await?;
    setup.execute_sql(WAKE_TRIGGER).await?;
    drop(setup);
    // The standby first: only `target_session_attrs=read-write` keeps
    // connections off it while it is read-only.
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{DATABASE}?target_session_attrs=read-write",
        standby.port(),
        primary.port()
    );
    let db = PgTestDb::attach(&url).await?;
    let dir = ctx.run.subdir(&format!("failover-{name}"))?;
    let mut starter = Relays::new(BackendKind::Postgres, &url, dir.clone());
    let spec = RelaySpec {
        notify: true,
        poll_ms: u64::try_from(POLL.as_millis())?,
        ..RelaySpec::default()
    };
    let mut relays = Vec::new();
    for slot in ["r1", "r2", "r3"] {
        relays.push(starter.start(slot, &spec, ctx.run)?);
    }
    let listening_before = wait_listening(&primary, 3, Duration::from_secs(10))
        .await
        .is_some();
    report.check(
        "every relay listens on the primary",
        listening_before,
        if listening_before {
            "3 LISTEN sessions".to_owned()
        } else {
            format!("{} LISTEN sessions after 10 s", listeners(&primary).await?)
        },
    );

    let tally = Tally::default();
    let stop = CancellationToken::new();
    let committed = || tally.committed().len();
    ctx.progress.phase(&format!(
        "{name}: 4 producers, 3 relays; primary ended (immediate), standby promoted"
    ));
    let producing = producer::run(&db, Commit::Plain, 4, 200.0, &tally, &stop);
    let progress = &ctx.progress;
    let failover = then_stop(&stop, async {
        pause(progress, load, "under load", committed, &dir).await;
        progress.phase(&format!("{name}: primary ended (immediate shutdown)"));
        let ended = clock::now_us();
        primary.stop_immediate().await?;
        pause(progress, detect, "primary gone", committed, &dir).await;
        progress.phase(&format!("{name}: standby promoted"));
        standby.promote().await?;
        let promoted = clock::now_us();
        let listening = wait_listening(&standby, 3, after).await;
        let left = after.saturating_sub(clock::between(promoted, clock::now_us()));
        pause(progress, left, "on the new primary", committed, &dir).await;
        anyhow::Ok((ended, promoted, listening))
    });
    let ((), failover) = tokio::join!(producing, failover);
    let (ended, promoted, listening) = failover?;

    let delivered = settle(&db, &dir, Duration::from_secs(60), &ctx.progress, report).await?;

    // What the producers were told, against what the new primary holds.
    let held: HashSet<i64> = delivered.orders.iter().copied().collect();
    let ok = tally.committed();
    let missing = ok
        .iter()
        .filter(|(order, _, _)| !held.contains(order))
        .count();
    match replication {
        Replication::Sync => report.check(
            "every Ok commit on the new primary",
            missing == 0,
            format!(
                "{missing} of {} orders whose commit returned Ok are missing",
                ok.len()
            ),
        ),
        Replication::Async => report.figure(
            "acknowledged but not replicated (lost with the old primary)",
            format!("{missing} of {}", ok.len()),
            "",
        ),
    }
    let errors = tally.errors();
    report.figure("commits that returned an error", errors.len(), "");
    report.figure(
        "... of which on the new primary all the same",
        errors
            .iter()
            .filter(|(order, _)| held.contains(order))
            .count(),
        "",
    );

    // The same relay processes wrote results on the new primary.
    let mut firsts = Vec::new();
    let mut recovered = true;
    for relay in &mut relays {
        let log = records::read_file(&dir.join(format!("{}.log", relay.owner)))?;
        match log.first_write_after(promoted) {
            Some(at) if relay.proc.running() => firsts.push(clock::between(promoted, at)),
            _ => recovered = false,
        }
    }
    report.check(
        "relays follow the promotion without a restart",
        recovered,
        match recovered {
            true => "all 3 relay processes wrote results on the new primary".to_owned(),
            false => "a relay process exited or wrote nothing after the promotion".to_owned(),
        },
    );
    report.check(
        "every relay listens on the new primary",
        listening.is_some(),
        match listening {
            Some(at) => format!(
                "3 LISTEN sessions {:.0} ms after the promotion",
                clock::ms(clock::between(promoted, at))
            ),
            None => format!(
                "{} LISTEN sessions {} s after the promotion",
                listeners(&standby).await?,
                after.as_secs()
            ),
        },
    );
    let first_commit = ok
        .iter()
        .map(|(_, _, at)| *at)
        .filter(|at| *at >= promoted)
        .min();
    report.check(
        "producers commit on the new primary",
        first_commit.is_some(),
        format!(
            "{} commits after the promotion",
            ok.iter().filter(|(_, _, at)| *at >= promoted).count()
        ),
    );
    report.millis(
        "primary ended to promotion",
        clock::between(ended, promoted),
    );
    if let Some(at) = first_commit {
        report.millis(
            "promotion to first producer commit",
            clock::between(promoted, at),
        );
    }
    if let (Some(first), Some(last)) = (firsts.iter().min(), firsts.iter().max()) {
        report.millis("promotion to first write-back, first relay", *first);
        report.millis("promotion to first write-back, last relay", *last);
    }
    if let Some(at) = listening {
        report.millis(
            "promotion to every relay listening",
            clock::between(promoted, at),
        );
        // Commit to delivery once the relays listen again: well under the
        // poll interval when wake-ups arrive.
        let mut latencies: Vec<Duration> = ok
            .iter()
            .filter(|(_, _, committed)| *committed >= at)
            .filter_map(|(order, _, committed)| {
                let (done, _, _) = delivered.deliveries.get(order)?.iter().next()?;
                Some(clock::between(*committed, *done))
            })
            .collect();
        report.millis(
            "commit to delivery on the new primary, median",
            quantile(&mut latencies, 0.5),
        );
        report.millis(
            "commit to delivery on the new primary, p99",
            quantile(&mut latencies, 0.99),
        );
    }
    drop(relays);
    drop(db);
    drop(standby);
    Ok(())
}
