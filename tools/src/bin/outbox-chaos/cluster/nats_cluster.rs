//! Three routed JetStream nodes, a stream with three replicas, relays that
//! publish every task through `diesel-outbox-nats` with all three URLs; the
//! stream's leader is SIGKILLed mid-run and started again, then a relay
//! while its handlers linger after publishing (so it may die between a
//! publish and its completion, and the task be published again; the run
//! reports how many such replays JetStream dropped): nothing is lost,
//! the stream ends with exactly one message per task id, and every replica,
//! the restarted one too, holds every message.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use anyhow::Context as _;
use async_nats::jetstream::{self, stream};
use diesel_outbox_core::CancellationToken;
use diesel_outbox_nats::StreamSpec;
use diesel_outbox_sql::BackendKind;
use diesel_outbox_testkit::postgres::PgTestDb;

use super::ClusterCtx;
use crate::{
    clock, db,
    effect::{self, STREAM, publisher},
    producer::{self, Commit, Tally},
    records::{Event, ProcessLog},
    relays::{RelaySpec, Relays},
    report::Report,
    scenarios::{nats::check_one_per_task, pause, settle, then_stop},
    servers::{DbServer as _, nats_cluster::NatsCluster, postgres::PgServer, wait_until},
};

/// Nodes, and replicas of the stream: a majority (2) survives one loss.
const NODES: usize = 3;

/// The stream's cluster view: `(leader, replicas)`.
async fn placement(
    jetstream: &jetstream::Context,
) -> anyhow::Result<(String, Vec<stream::PeerInfo>)> {
    let mut stream = jetstream.get_stream(STREAM).await?;
    let cluster = stream
        .info()
        .await?
        .cluster
        .clone()
        .context("the stream has no cluster information")?;
    Ok((cluster.leader.unwrap_or_default(), cluster.replicas))
}

/// Whether node `name` leads the stream or is a current replica of it.
async fn caught_up(jetstream: &jetstream::Context, name: &str) -> anyhow::Result<Option<()>> {
    let (leader, replicas) = placement(jetstream).await?;
    let current = leader == name
        || replicas.iter().any(|peer| {
            peer.name == name && peer.current && !peer.offline && peer.lag.unwrap_or(0) == 0
        });
    Ok(current.then_some(()))
}

/// Polls until `ready` answers `Some`, at most `limit`; when it did (µs),
/// and what it answered.
async fn poll_until<T, F, Fut>(limit: Duration, mut ready: F) -> Option<(u64, T)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if let Ok(Some(answer)) = ready().await {
            return Some((clock::now_us(), answer));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// How many messages each node holds in its replica of the stream.
async fn replica_counts(nats: &NatsCluster) -> Vec<(String, Option<u64>)> {
    let mut counts = Vec::new();
    for node in nats.names() {
        let count = nats.replica_messages(&node, STREAM).await.ok().flatten();
        counts.push((node, count));
    }
    counts
}

/// What the records say about publishing around the kill at `killed`.
#[derive(Debug, Default)]
struct AroundKill {
    /// When the first publish begun after the kill was acknowledged.
    resumed: Option<u64>,
    /// Attempts begun after the kill, until `resumed`, that did not publish.
    failed_in_election: usize,
    /// Attempts that did not publish, over the whole run.
    failed: usize,
    /// Publishes JetStream acknowledged as duplicates (`PubAck.duplicate`).
    replays: usize,
}

fn around_kill(logs: &[ProcessLog], killed: u64) -> AroundKill {
    let mut found = AroundKill::default();
    // Per process: when each attempt began, and whether it published.
    let mut attempts: Vec<HashMap<(i64, i64), (u64, bool)>> = Vec::new();
    for log in logs {
        let mut begun = HashMap::new();
        for (at, event) in &log.events {
            match event {
                Event::Begin { fence, .. } => {
                    begun.insert(*fence, (*at, false));
                }
                Event::Done { fence, replay, .. } => {
                    found.replays += usize::from(*replay);
                    if let Some((began, done)) = begun.get_mut(fence) {
                        *done = true;
                        if *began >= killed && found.resumed.is_none_or(|first| *at < first) {
                            found.resumed = Some(*at);
                        }
                    }
                }
                _ => {}
            }
        }
        attempts.push(begun);
    }
    let resumed = found.resumed.unwrap_or(u64::MAX);
    for (began, done) in attempts.iter().flat_map(HashMap::values) {
        if !done {
            found.failed += 1;
            if (killed..resumed).contains(began) {
                found.failed_in_election += 1;
            }
        }
    }
    found
}

pub(crate) async fn run(ctx: &mut ClusterCtx<'_>, report: &mut Report) -> anyhow::Result<()> {
    let run = ctx.run;
    let load = ctx.pick(Duration::from_secs(5), Duration::from_secs(15));
    // Longer than an election (JetStream's Raft waits 4-9 s for a leader).
    let down = ctx.pick(Duration::from_secs(10), Duration::from_secs(20));
    // Far beyond how long a task of this run can be retried (the run itself).
    let window = Duration::from_secs(600);
    ctx.progress
        .phase("starting a private PostgreSQL and three NATS nodes");
    let pg = PgServer::start(run).await?;
    let mut nats = NatsCluster::start(run, NODES).await?;
    let urls = nats.urls();
    let name = "chaos_nats_cluster";
    let db: PgTestDb = db::create(&pg.admin_url(), name).await?;
    let dir = run.subdir("postgres-nats-cluster")?;
    let mut relays = Relays::new(BackendKind::Postgres, &pg.url(name), dir.clone());

    let jetstream = jetstream::new(effect::connect(&urls).await?);
    let spec = StreamSpec::for_publisher(STREAM, &publisher(&urls).await?)
        .duplicate_window(window)
        .replicas(NODES);
    // Creating the stream is idempotent; a request that times out while
    // the new cluster settles is asked again, for at most 30 s.
    wait_until("the replicated stream", Duration::from_secs(30), || async {
        spec.ensure(&jetstream).await.map(drop).map_err(Into::into)
    })
    .await
    .context("creating the replicated stream")?;
    let everyone_current = || async {
        let (leader, replicas) = placement(&jetstream).await?;
        let current = !leader.is_empty()
            && replicas.len() == NODES - 1
            && replicas.iter().all(|peer| peer.current);
        Ok(current.then_some(()))
    };
    poll_until(Duration::from_secs(30), everyone_current)
        .await
        .context("the stream's three replicas never became current")?;

    // A relay killed in the linger after a publish replays it: JetStream
    // must drop the replay by its `Nats-Msg-Id`.
    let relay = RelaySpec {
        work_ms: 0,
        linger_ms: 50,
        timeout_ms: 2000,
        lease_ms: 6000,
        retry_ms: 500,
        nats_url: Some(urls.clone()),
        ..RelaySpec::default()
    };
    let mut running = Vec::new();
    for slot in ["r1", "r2", "r3"] {
        running.push(relays.start(slot, &relay, run)?);
    }
    let tally = Tally::default();
    let stop = CancellationToken::new();
    let committed = || tally.committed().len();
    ctx.progress.phase(&format!(
        "2 producers, 3 relays publishing to a 3-node JetStream cluster; \
         the stream leader SIGKILLed for {} s, then a relay",
        down.as_secs()
    ));
    let producing = producer::run(&db, Commit::Plain, 2, 200.0, &tally, &stop);
    let progress = &ctx.progress;
    let (cluster, js) = (&mut nats, &jetstream);
    let (running_ref, relay_ref) = (&mut running, &relay);
    let outage = then_stop(&stop, async {
        pause(progress, load, "publishing", committed, &dir).await;
        let (leader, _) = placement(js).await?;
        progress.phase(&format!("stream leader {leader} killed (SIGKILL)"));
        let killed = clock::now_us();
        cluster.kill(&leader).await?;
        let cluster_now = &*cluster;
        let elected = poll_until(down, || async {
            Ok(cluster_now.stream_leader(STREAM).await)
        })
        .await;
        let (elected, successor) = elected.unzip();
        let rest = down.saturating_sub(clock::between(killed, clock::now_us()));
        pause(progress, rest, "a node down", committed, &dir).await;
        let restarting = clock::now_us();
        cluster.restart(&leader, run).await?;
        progress.phase(&format!("{leader} restarted; waiting until it caught up"));
        let caught = poll_until(Duration::from_secs(60), || caught_up(js, &leader))
            .await
            .map(|(at, ())| at);
        pause(progress, load / 2, "publishing", committed, &dir).await;
        progress.phase("relay r1 killed (SIGKILL) and started again");
        running_ref[0].proc.kill().await?;
        running_ref[0] = relays.start("r1", relay_ref, run)?;
        pause(progress, load / 2, "publishing", committed, &dir).await;
        anyhow::Ok((leader, successor, killed, elected, restarting, caught))
    });
    let ((), outage) = tokio::join!(producing, outage);
    let (leader, successor, killed, elected, restarting, caught) = outage?;
    let delivered = settle(&db, &dir, Duration::from_secs(90), &ctx.progress, report).await?;

    check_one_per_task(&db, &urls, report).await?;
    let tasks = u64::try_from(db::task_ids(&db).await?.len())?;
    // Followers apply what the leader committed a little later: poll.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let held = loop {
        let held = replica_counts(&nats).await;
        let all = held.iter().all(|(_, count)| *count == Some(tasks));
        if all || tokio::time::Instant::now() >= deadline {
            break held;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    report.check(
        "every replica holds every message",
        held.iter().all(|(_, count)| *count == Some(tasks)),
        format!(
            "{} of {tasks}",
            held.iter()
                .map(|(node, count)| match count {
                    Some(count) => format!("{node} {count}"),
                    None => format!("{node} none"),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    report.check(
        "killed node caught up",
        caught.is_some(),
        format!("{leader} current again: {}", caught.is_some()),
    );

    let found = around_kill(&delivered.logs, killed);
    let distinct: HashSet<i64> = delivered.deliveries.keys().copied().collect();
    report.figure("stream leader killed", leader.clone(), "");
    report.figure(
        "new stream leader",
        successor.unwrap_or_else(|| "none within the outage".to_owned()),
        "",
    );
    report.figure("duplicate window", window.as_secs(), "s");
    report.figure("orders published", distinct.len(), "");
    if let Some(elected) = elected {
        report.millis("kill to new stream leader", clock::between(killed, elected));
    }
    if let Some(resumed) = found.resumed {
        report.millis(
            "kill to first acknowledged publish sent after it",
            clock::between(killed, resumed),
        );
    }
    report.figure(
        "attempts that did not publish in the election (failed or timed out, retried)",
        found.failed_in_election,
        "",
    );
    report.figure(
        "attempts that did not publish, whole run (retried)",
        found.failed,
        "",
    );
    report.figure(
        "replays JetStream dropped by Nats-Msg-Id (PubAck duplicate)",
        found.replays,
        "",
    );
    if let Some(caught) = caught {
        report.millis(
            "restart to the killed node caught up",
            clock::between(restarting, caught),
        );
    }
    drop(running);
    Ok(())
}
