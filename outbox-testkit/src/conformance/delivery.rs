//! What reaches the handler, and what is recorded when it fails (issue proof 9).

use diesel_outbox_core::{Headers, Status, Store, handler_fn};

use super::support::{config, enqueue_one, get, registry, task, worker};
use crate::{TestBackend, handler};

/// Headers reach the handler exactly as enqueued.
pub async fn headers_reach_the_handler_unchanged<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let headers: Headers = [
        (
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
        ("correlation-id", "req-7f3a"),
        ("x-note", "ünïcödé ✓ \"quoted\" \\ back"),
        ("empty", ""),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let id = enqueue_one(
        db,
        task(7).headers(headers.clone()).ordering_key("customer-9"),
    )
    .await?;
    worker.send(id).await?;
    let deliveries = handle.deliveries();
    assert_eq!(deliveries.len(), 1);
    let delivery = &deliveries[0];
    assert_eq!(delivery.headers(), &headers);
    assert_eq!((delivery.id, delivery.attempt), (id, 1));
    assert_eq!(delivery.payload(), b"{\"order\":7}");
    assert_eq!(delivery.task.ordering_key.as_deref(), Some("customer-9"));
    Ok(())
}

/// A long multi-byte error is cut to 4 KiB on a character boundary.
pub async fn last_error_is_cut_on_a_utf8_boundary<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let message = "€".repeat(3000); // 9,000 bytes; 4,096 is not a boundary
    let failing = {
        let message = message.clone();
        handler_fn(move |_| {
            let message = message.clone();
            async move { Err(anyhow::anyhow!(message).into()) }
        })
    };
    let worker = worker(db, registry(failing)?, config("w"))?;
    let id = enqueue_one(db, task(1)).await?;
    assert!(worker.send(id).await.is_err());
    let record = get(db, id).await?;
    assert_eq!(record.status, Status::Available);
    assert_eq!(record.last_error.len(), 4095);
    assert!(message.starts_with(&record.last_error));
    Ok(())
}

/// Attempts are counted by outcome and timed, per kind, through the
/// `metrics` facade; building a worker describes every metric with its unit.
pub async fn attempts_are_measured<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let captured = crate::metrics::capture()?;
    // A kind of this test's own: other tests record into the same recorder.
    let kind = format!("metrics.{:08x}", fastrand::u32(..));
    let (mock, handle) = handler::failing(1);
    let registry = diesel_outbox_core::Registry::builder()
        .handler(kind.clone(), 1, mock)
        .build()?;
    let worker = worker(db, registry, config("w"))?;
    for (name, unit, text) in diesel_outbox_core::telemetry::METRICS {
        assert_eq!(
            captured.description(name),
            Some((Some(unit), text.to_owned())),
            "{name} is not described"
        );
    }
    let id = enqueue_one(db, diesel_outbox_core::Task::new(kind.clone(), 1, "{}")).await?;
    let enqueued_before = captured.counter("outbox_enqueued_total", &[]);
    assert!(enqueued_before >= 1, "enqueue was not counted");
    assert!(worker.send(id).await.is_err());
    worker.send(id).await?;
    assert_eq!(handle.calls(), 2);
    let labels = [("kind", kind.as_str())];
    assert_eq!(captured.counter("outbox_retried_total", &labels), 1);
    assert_eq!(captured.counter("outbox_sent_total", &labels), 1);
    assert_eq!(captured.counter("outbox_failed_total", &labels), 0);
    assert_eq!(
        captured
            .samples("outbox_handler_duration_seconds", &labels)
            .len(),
        2
    );
    // Only the first attempt measures the delay from insert to send.
    assert_eq!(
        captured
            .samples("outbox_commit_to_send_seconds", &labels)
            .len(),
        1
    );
    Ok(())
}

/// Each database names its outbox once, at migration: 128 bits in hex, its
/// own (another database's differs) and the same on every read. Every
/// delivery carries it, and its message id is `<outbox id>:<task id>`, by
/// `send` and by a round alike.
pub async fn deliveries_carry_their_outboxs_own_id<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let outbox = db.store().outbox_id().await?;
    anyhow::ensure!(
        outbox.as_str().len() == 32 && outbox.as_str().chars().all(|c| c.is_ascii_hexdigit()),
        "not 128 bits in hex: {outbox}"
    );
    assert_eq!(db.store_with_pool(1)?.outbox_id().await?, outbox);
    let other = B::create("deliveries_carry_their_outboxs_own_id_other").await?;
    assert_ne!(other.store().outbox_id().await?, outbox);

    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let sent = enqueue_one(db, task(1)).await?;
    worker.send(sent).await?;
    let rounded = enqueue_one(db, task(2)).await?;
    worker.retry_pending(10).await?;
    let deliveries = handle.deliveries();
    assert_eq!(deliveries.len(), 2);
    for (delivery, id) in deliveries.iter().zip([sent, rounded]) {
        assert_eq!(delivery.outbox, outbox);
        assert_eq!(delivery.message_id(), format!("{outbox}:{id}"));
    }
    Ok(())
}
