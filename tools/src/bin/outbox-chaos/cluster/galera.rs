//! A three-node MariaDB Galera cluster, every node written to: on each node
//! a producer committing one order and its task per transaction, one
//! committing five at a time through `enqueue_many`, and a relay. One node is
//! SIGKILLed mid-run and started again to rejoin while the others go on.
//!
//! Galera replaces cross-node row locks with certification at commit: two
//! relays on different nodes can lock the same available row at once, and
//! the later commit fails with a deadlock error. The checks: nothing
//! committed is lost, every task finishes, no task failed (a lost
//! certification is a lost claim, tried again), and the ids `enqueue`
//! and `enqueue_many` returned are those of the rows they inserted, with
//! interleaved auto-increment ids (`innodb_autoinc_lock_mode=2`, an
//! offset per node).

use std::{
    collections::HashMap,
    path::Path,
    sync::{Mutex, PoisonError},
    time::Duration,
};

use diesel::{
    QueryableByName,
    sql_types::{BigInt, Text},
};
use diesel_outbox_core::{CancellationToken, TaskId};
use diesel_outbox_sql::BackendKind;
use diesel_outbox_testkit::{TestBackend, mysql::MysqlTestDb};
use tokio::time::MissedTickBehavior;

use super::ClusterCtx;
use crate::{
    clock,
    db::{self, ChaosDb, Payload},
    producer::{self, Commit, Tally},
    relays::{RelaySpec, Relays},
    report::Report,
    scenarios::{pause, settle, then_stop},
    servers::galera::GaleraCluster,
};

/// Nodes in the cluster.
const NODES: usize = 3;
/// The node SIGKILLed and rejoined (not the one that bootstrapped).
const VICTIM: usize = 1;
/// Orders per `enqueue_many` transaction.
const BATCH: usize = 5;
/// Order ids of node `i` start after `i * ORDER_SPAN`.
const ORDER_SPAN: i64 = 100_000_000;

/// What the batch producers' commits returned: `(orders, ids)` per commit,
/// and how many failed.
#[derive(Debug, Default)]
struct Batches {
    committed: Mutex<Vec<(Vec<i64>, Vec<TaskId>)>>,
    errors: Mutex<Vec<String>>,
}

impl Batches {
    fn tasks(&self) -> usize {
        self.committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(orders, _)| orders.len())
            .sum()
    }
}

/// Commits `BATCH` orders and their tasks per transaction through
/// `enqueue_many` on `db`'s pool, `per_second` transactions, until `stop`.
async fn batches(
    db: &MysqlTestDb,
    per_second: f64,
    tally: &Tally,
    out: &Batches,
    stop: &CancellationToken,
) {
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / per_second.max(0.001)));
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let orders: Vec<i64> = (0..BATCH).map(|_| tally.next_order()).collect();
        match MysqlTestDb::enqueue_orders_pooled(db.store(), &orders).await {
            Ok(ids) => out
                .committed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((orders, ids)),
            Err(error) => out
                .errors
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(format!("{error:#}")),
        }
    }
}

#[derive(QueryableByName)]
struct TaskPayload {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    payload: String,
}

/// Every task's order, by task id, read from `db`.
async fn orders_by_task(db: &MysqlTestDb) -> anyhow::Result<HashMap<i64, i64>> {
    use diesel_async::RunQueryDsl as _;
    let mut conn = db.connect().await?;
    let rows: Vec<TaskPayload> = diesel::sql_query(
        "SELECT id, CAST(payload AS CHAR) AS payload FROM outbox_tasks WHERE kind = ?",
    )
    .bind::<Text, _>(db::KIND)
    .load(&mut conn)
    .await?;
    rows.into_iter()
        .map(|row| Ok((row.id, serde_json::from_str::<Payload>(&row.payload)?.order)))
        .collect()
}

#[derive(QueryableByName)]
struct Unsucceeded {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Text)]
    last_error: String,
}

/// Tasks that did not succeed, read from `db`.
async fn unsucceeded(db: &MysqlTestDb) -> anyhow::Result<Vec<Unsucceeded>> {
    use diesel_async::RunQueryDsl as _;
    let mut conn = db.connect().await?;
    Ok(diesel::sql_query(
        "SELECT id, status, last_error FROM outbox_tasks \
         WHERE status <> 'succeeded' ORDER BY id",
    )
    .load(&mut conn)
    .await?)
}

/// How many of each kind, by name.
type Counts = Vec<(String, usize)>;

/// The failed claims and writes the relays recorded: how many of each
/// error kind (`("claim deadlock", 12)`, ...), and the errors that were not
/// retryable (the probe follows their kind with their message).
fn store_errors(dir: &Path) -> anyhow::Result<(Counts, Vec<String>)> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut not_retryable = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_none_or(|ext| ext != "log") {
            continue;
        }
        for line in std::fs::read_to_string(&path)?.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let (key, message) = match words.as_slice() {
                [_, "claimerr", kind, message @ ..] => (format!("claim {kind}"), message),
                [_, "writeerr", _, kind, message @ ..] => (format!("write {kind}"), message),
                _ => continue,
            };
            if !message.is_empty() {
                not_retryable.push(format!("{key}: {}", message.join(" ").replace('_', " ")));
            }
            *counts.entry(key).or_default() += 1;
        }
    }
    let mut counts: Vec<(String, usize)> = counts.into_iter().collect();
    counts.sort();
    Ok((counts, not_retryable))
}

/// Kinds of the producers' failed commits, counted by their first line.
fn error_kinds(errors: impl IntoIterator<Item = String>) -> String {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for error in errors {
        let head: String = error.chars().take(60).collect();
        *counts.entry(head).or_default() += 1;
    }
    let mut counts: Vec<(String, usize)> = counts.into_iter().collect();
    counts.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    counts
        .iter()
        .take(4)
        .map(|(head, n)| format!("{n}x {head}"))
        .collect::<Vec<_>>()
        .join("; ")
}

pub(crate) async fn run(ctx: &mut ClusterCtx<'_>, report: &mut Report) -> anyhow::Result<()> {
    let target = ctx.pick(1_500, 10_000);
    // Tasks per second over the cluster: half committed one per
    // transaction, half five per `enqueue_many`.
    let rate = ctx.pick(150.0, 250.0);
    let down = ctx.pick(Duration::from_secs(3), Duration::from_secs(10));
    ctx.progress
        .phase("starting three Galera nodes (the joiners copy the first by rsync)");
    let started = clock::now_us();
    let mut cluster = GaleraCluster::start(ctx.run, NODES).await?;
    report.millis(
        "cluster start (3 nodes synced)",
        clock::between(started, clock::now_us()),
    );
    let name = "chaos_galera";
    let first: MysqlTestDb = db::create(&cluster.admin_url(0), name).await?;
    let mut dbs = vec![first];
    for i in 1..cluster.size() {
        dbs.push(MysqlTestDb::attach(&cluster.url(i, name)).await?);
    }
    let dir = ctx.run.subdir("mysql-galera")?;
    let spec = RelaySpec::default();
    let mut relays = Vec::new();
    for i in 0..cluster.size() {
        let mut starter = Relays::new(BackendKind::Mysql, &cluster.url(i, name), dir.clone());
        relays.push(starter.start(&format!("r{}", i + 1), &spec, ctx.run)?);
    }

    let tallies: Vec<Tally> = (0..NODES)
        .map(|i| Tally::starting_after(i as i64 * ORDER_SPAN))
        .collect();
    let batch_tallies: Vec<Tally> = (0..NODES)
        .map(|i| Tally::starting_after(i as i64 * ORDER_SPAN + ORDER_SPAN / 2))
        .collect();
    let batch_out: Vec<Batches> = (0..NODES).map(|_| Batches::default()).collect();
    let stop = CancellationToken::new();
    let committed = || {
        tallies.iter().map(|t| t.committed().len()).sum::<usize>()
            + batch_out.iter().map(Batches::tasks).sum::<usize>()
    };
    ctx.progress.phase(&format!(
        "a producer, a batch producer and a relay on each of 3 nodes; {target} tasks; \
         node{} SIGKILLed after a third, down {} s, rejoined",
        VICTIM + 1,
        down.as_secs()
    ));
    let per_node = rate / NODES as f64;
    let producing = futures_util::future::join_all((0..NODES).map(|i| {
        let (db, tally, out, stop) = (&dbs[i], &tallies[i], &batch_out[i], &stop);
        let batch_tally = &batch_tallies[i];
        async move {
            tokio::join!(
                producer::run(db, Commit::Plain, 1, per_node / 2.0, tally, stop),
                batches(db, per_node / 2.0 / BATCH as f64, batch_tally, out, stop),
            );
        }
    }));
    let progress = &ctx.progress;
    let run = ctx.run;
    let dir_ref = &dir;
    let cluster_ref = &mut cluster;
    // Producers that stop committing (quorum lost, a stuck donor) fail the
    // scenario instead of holding it forever.
    let until = async |count: usize, what: &str| {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
        while committed() < count {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "{what}: {} of {count} commits after 180 s",
                committed()
            );
            progress.status(what, committed(), dir_ref);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        anyhow::Ok(())
    };
    let fault = then_stop(&stop, async {
        until(target / 3, "producing on 3 nodes").await?;
        progress.phase(&format!("node{} SIGKILLed", VICTIM + 1));
        let killed = clock::now_us();
        cluster_ref.kill(VICTIM).await?;
        let survivors: Vec<usize> = (0..NODES).filter(|i| *i != VICTIM).collect();
        for i in &survivors {
            cluster_ref
                .wait_synced(*i, NODES - 1, Duration::from_secs(60))
                .await?;
        }
        let evicted = clock::now_us();
        let rest = down.saturating_sub(clock::between(killed, evicted));
        pause(progress, rest, "node down", committed, dir_ref).await;
        progress.phase(&format!("node{} restarting", VICTIM + 1));
        let restarted = clock::now_us();
        cluster_ref.rejoin(VICTIM, run)?;
        cluster_ref
            .wait_synced(VICTIM, NODES, Duration::from_secs(120))
            .await?;
        let rejoined = clock::now_us();
        progress.phase(&format!(
            "node{} rejoined ({})",
            VICTIM + 1,
            cluster_ref.last_transfer(VICTIM)
        ));
        until(target, "producing on 3 nodes").await?;
        anyhow::Ok((killed, evicted, restarted, rejoined))
    });
    let (_, fault) = tokio::join!(producing, fault);
    let (killed, evicted, restarted, rejoined) = fault?;

    let delivered = settle(
        &dbs[0],
        &dir,
        Duration::from_secs(120),
        &ctx.progress,
        report,
    )
    .await?;

    // The ids each commit returned, against the rows read back.
    let by_task = orders_by_task(&dbs[0]).await?;
    let mut returned: Vec<(i64, TaskId, bool)> = Vec::new();
    for tally in &tallies {
        returned.extend(tally.committed().into_iter().map(|(o, t, _)| (o, t, false)));
    }
    for out in &batch_out {
        for (orders, ids) in out
            .committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            anyhow::ensure!(
                orders.len() == ids.len(),
                "enqueue_many returned {} ids for {} tasks",
                ids.len(),
                orders.len()
            );
            returned.extend(orders.iter().zip(ids).map(|(o, t)| (*o, *t, true)));
        }
    }
    let wrong: Vec<String> = returned
        .iter()
        .filter(|(order, id, _)| by_task.get(&id.get()) != Some(order))
        .map(|(order, id, many)| {
            format!(
                "order {order}{}: id {id} holds {:?}",
                if *many { " (enqueue_many)" } else { "" },
                by_task.get(&id.get())
            )
        })
        .collect();
    let from_many = returned.iter().filter(|(_, _, many)| *many).count();
    report.check(
        "enqueue_many ids",
        wrong.is_empty() && from_many > 0,
        if wrong.is_empty() {
            format!(
                "{} ids returned ({from_many} by enqueue_many) name the rows inserted",
                returned.len()
            )
        } else {
            format!(
                "{} of {} wrong: {}",
                wrong.len(),
                returned.len(),
                wrong.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
            )
        },
    );

    let failed = unsucceeded(&dbs[0]).await?;
    report.check(
        "no task failed (certification conflicts retried)",
        failed.is_empty(),
        match failed.first() {
            None => "every task succeeded".to_owned(),
            Some(first) => format!(
                "{} tasks did not succeed; first: {} {}: {}",
                failed.len(),
                first.id,
                first.status,
                first.last_error
            ),
        },
    );

    // Duplicates: those whose first delivery came from the relay on the
    // killed node (what it held), and the others.
    let victim_relay = format!("r{}.", VICTIM + 1);
    let (mut from_victim, mut others) = (0, 0);
    for list in delivered.deliveries.values() {
        if let Some((_, first, _)) = list.first() {
            if first.starts_with(&victim_relay) {
                from_victim += list.len() - 1;
            } else {
                others += list.len() - 1;
            }
        }
    }
    let held = delivered
        .logs
        .iter()
        .filter(|log| log.owner.starts_with(&victim_relay))
        .map(|log| log.held().len())
        .sum::<usize>();
    report.check(
        "duplicates from the killed node's relay <= what it held",
        from_victim <= held,
        format!("{from_victim} duplicates, {held} tasks held unwritten"),
    );
    report.figure("tasks", returned.len(), "");
    report.figure(
        "duplicates first delivered by the killed node's relay",
        from_victim,
        "",
    );
    report.figure("tasks that relay held unwritten", held, "");
    report.figure("other duplicates", others, "");
    let (errors, not_retryable) = store_errors(&dir)?;
    report.check(
        "relay errors retryable (certification conflicts, a joining node)",
        not_retryable.is_empty(),
        match not_retryable.first() {
            None => format!(
                "{} failed claims and writes, all retryable",
                errors.iter().map(|(_, n)| n).sum::<usize>()
            ),
            Some(first) => format!("{} not retryable; first: {first}", not_retryable.len()),
        },
    );
    for (what, n) in errors {
        report.figure(&format!("relay {what} errors"), n, "");
    }
    let producer_errors: Vec<String> = tallies
        .iter()
        .flat_map(|t| t.errors().into_iter().map(|(_, e)| e))
        .chain(batch_out.iter().flat_map(|b| {
            b.errors
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }))
        .collect();
    report.figure(
        "producer commits that returned an error",
        producer_errors.len(),
        "",
    );
    if !producer_errors.is_empty() {
        report.figure(
            "producer errors, most frequent first",
            error_kinds(producer_errors),
            "",
        );
    }
    report.millis(
        "kill to survivors synced as 2",
        clock::between(killed, evicted),
    );
    // Writes on the survivors stall until the killed node is evicted: the
    // longest gap between their commits from the last one before the kill.
    let mut times: Vec<u64> = tallies
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != VICTIM)
        .flat_map(|(_, t)| t.committed())
        .map(|(_, _, at)| at)
        .collect();
    times.sort_unstable();
    let from = times.iter().rposition(|at| *at <= killed).unwrap_or(0);
    let stalled = times[from..]
        .windows(2)
        .filter(|pair| pair[0] <= rejoined)
        .map(|pair| pair[1] - pair[0])
        .max()
        .unwrap_or(0);
    report.millis(
        "longest pause in the survivors' commits after the kill",
        Duration::from_micros(stalled),
    );
    report.millis(
        &format!(
            "restart to rejoined and synced ({})",
            cluster.last_transfer(VICTIM)
        ),
        clock::between(restarted, rejoined),
    );
    drop(relays);
    Ok(())
}
