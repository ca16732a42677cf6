//! What the broker outage scenarios share: three relays publishing
//! through a broker's batch publisher and a producer committing orders,
//! the broker SIGKILLed and started again mid-run, and the service's inbox
//! consumer applying each message to the database.
//!
//! Invariants checked here: no committed order is lost, each is applied
//! exactly once through the inbox, and the consumer came back after the
//! broker. Each scenario adds what its broker promises beyond that.

use std::{future::Future, time::Duration};

use diesel_outbox_core::{CancellationToken, consume::ConsumerReport};
use tokio::task::JoinHandle;

use super::{Setup, pause, settle, then_stop};
use crate::{
    clock,
    db::ChaosDb,
    producer::{self, Commit, Tally},
    progress::Progress,
    records::Event,
    relays::RelaySpec,
    report::Report,
    run_dir::RunDir,
};

/// The service's effect: a shipment row per order, in the inbox's
/// transaction.
pub(crate) struct Ship;

#[async_trait::async_trait]
impl<C> diesel_outbox_core::consume::ConsumeHandler<C> for Ship
where
    C: diesel_async::AsyncConnection + diesel_async::SimpleAsyncConnection + Send + 'static,
{
    async fn handle(
        &self,
        conn: &mut C,
        incoming: &diesel_outbox_core::consume::Incoming,
    ) -> Result<(), diesel_outbox_core::HandlerError> {
        let payload: crate::db::Payload = incoming.json()?;
        conn.batch_execute(&format!(
            "INSERT INTO shipments (order_id) VALUES ({})",
            payload.order
        ))
        .await?;
        Ok(())
    }
}

/// The producer's pace, orders committed per second.
pub(crate) const ORDERS_PER_SECOND: f64 = 100.0;

/// A private broker the scenarios kill and start again.
pub(crate) trait Broker {
    /// SIGKILL: gone until [`Broker::restart`].
    fn kill(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// Starts it again on the same port and files, once it answers.
    fn restart(&mut self, run: &RunDir) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// One outage run: the broker's name, how long the load runs before and
/// after the outage and how long the broker stays down, the relays'
/// settings, and the consumer (its task, what stops it, and whether it
/// counts the lost connection).
pub(crate) struct Plan<'a> {
    pub(crate) label: &'a str,
    pub(crate) load: Duration,
    pub(crate) down: Duration,
    pub(crate) spec: RelaySpec,
    /// Whether the consumer counts the outage as receive errors (a client
    /// that reconnects inside its own fetches reports none).
    pub(crate) counts_losses: bool,
    pub(crate) consumer: JoinHandle<anyhow::Result<ConsumerReport>>,
    pub(crate) stop_consuming: CancellationToken,
}

/// What an outage run measured, for the scenario's own checks.
pub(crate) struct Outage {
    /// The committed orders.
    pub(crate) orders: Vec<i64>,
    /// The consumer's report.
    pub(crate) consumed: ConsumerReport,
    /// Publishing attempts the broker never answered (begun, not done).
    pub(crate) unanswered: usize,
}

/// Runs three relays of the plan's settings, a producer
/// ([`ORDERS_PER_SECOND`]) and the plan's consumer through an outage of
/// `broker`; checks the shared invariants into `report`.
pub(crate) async fn run<B: ChaosDb, K: Broker>(
    setup: &mut Setup<B>,
    run: &RunDir,
    progress: &Progress,
    broker: &mut K,
    plan: Plan<'_>,
    report: &mut Report,
) -> anyhow::Result<Outage> {
    let (label, load, down, spec) = (plan.label, plan.load, plan.down, &plan.spec);
    let mut relays = Vec::new();
    for slot in ["r1", "r2", "r3"] {
        relays.push(setup.relays.start(slot, spec, run)?);
    }
    let tally = Tally::default();
    let stop = CancellationToken::new();
    let committed = || tally.committed().len();
    progress.phase(&format!(
        "a producer, 3 relays publishing to {label}, a consumer; {label} killed for {} s",
        down.as_secs()
    ));
    let producing = producer::run(
        &setup.db,
        Commit::Plain,
        1,
        ORDERS_PER_SECOND,
        &tally,
        &stop,
    );
    let (dir, db) = (setup.dir.clone(), &setup.db);
    let outage = then_stop(&stop, async {
        pause(progress, load, "publishing", committed, &dir).await;
        let before_kill = db.count("shipments").await?;
        progress.phase(&format!("{label} killed (SIGKILL)"));
        let killed = clock::now_us();
        broker.kill().await?;
        pause(progress, down, &format!("{label} down"), committed, &dir).await;
        broker.restart(run).await?;
        let back = clock::now_us();
        let when_back = db.count("shipments").await?;
        progress.phase(&format!("{label} back"));
        pause(progress, load, "publishing", committed, &dir).await;
        anyhow::Ok((killed, back, before_kill, when_back))
    });
    let ((), outage) = tokio::join!(producing, outage);
    let (killed, back, before_kill, when_back) = outage?;
    let delivered = settle(
        &setup.db,
        &setup.dir,
        Duration::from_secs(90),
        progress,
        report,
    )
    .await?;

    // Every message the broker took reaches the consumer: wait for the last ones.
    let orders = setup.db.order_ids().await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut applied = setup.db.count("shipments").await?;
    while usize::try_from(applied)? < orders.len() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        applied = setup.db.count("shipments").await?;
    }
    plan.stop_consuming.cancel();
    let consumed = plan.consumer.await??;
    let distinct = setup
        .db
        .count("(SELECT DISTINCT order_id FROM shipments) AS shipped")
        .await?;
    report.check(
        "every order applied once through the inbox",
        usize::try_from(applied)? == orders.len() && applied == distinct,
        format!(
            "{applied} shipments, {distinct} distinct, {} committed orders",
            orders.len()
        ),
    );
    report.check(
        &format!("the consumer came back after {label}"),
        (consumed.receive_errors > 0 || !plan.counts_losses) && applied > when_back,
        format!(
            "{} connection losses seen, {before_kill} applied before the kill, {when_back} when \
             {label} was back, {applied} at the end",
            consumed.receive_errors
        ),
    );
    let (mut begun, mut done) = (0usize, 0usize);
    let mut first_after = None::<u64>;
    for log in &delivered.logs {
        for (at, event) in &log.events {
            match event {
                Event::Begin { .. } => begun += 1,
                Event::Done { .. } => {
                    done += 1;
                    if *at >= back {
                        first_after = Some(first_after.map_or(*at, |first| first.min(*at)));
                    }
                }
                _ => {}
            }
        }
    }
    let unanswered = begun.saturating_sub(done);
    report.millis(&format!("{label} down"), clock::between(killed, back));
    if let Some(first) = first_after {
        report.millis(
            &format!("{label} back to first acknowledged publish"),
            clock::between(back, first),
        );
    }
    report.figure(
        "attempts that did not publish (no answer, retried)",
        unanswered,
        "",
    );
    report.figure("copies the inbox suppressed", consumed.duplicates, "");
    drop(relays);
    Ok(Outage {
        orders,
        consumed,
        unanswered,
    })
}
