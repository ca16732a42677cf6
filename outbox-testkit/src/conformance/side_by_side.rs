//! Two outboxes in one database, the second with a table prefix or a
//! schema of its own: each sees only its own tasks, keys, inbox and
//! migrations.

use std::time::Duration;

use diesel_async::AsyncConnection;
use diesel_outbox_core::{
    Inbox, Maintenance, PageRequest, Receipt, Status, Store, Task, TaskFilter, TaskId,
};
use diesel_outbox_sql::Names;
use tokio_util::sync::CancellationToken;

use super::{
    relay::{relay_config, spawn_relay},
    support::{config, registry, task},
};
use crate::{TestBackend, handler};

/// The other outbox's table prefix.
const OTHER_PREFIX: &str = "billing_";

/// Enqueues `tasks` on `store` in one committed transaction of `db`.
async fn enqueue<B: TestBackend>(
    db: &B,
    store: &B::Store,
    tasks: Vec<Task>,
) -> anyhow::Result<Vec<TaskId>> {
    let mut conn = db.connect().await?;
    conn.transaction::<_, anyhow::Error, _>(async |tx| Ok(store.enqueue_many(tx, tasks).await?))
        .await
}

/// Records `message_id` for `consumer` in `store`'s inbox, committed.
async fn record<B: TestBackend>(
    db: &B,
    store: &B::Store,
    message_id: &str,
) -> anyhow::Result<Receipt> {
    let mut conn = db.connect().await?;
    conn.transaction::<_, anyhow::Error, _>(async |tx| {
        Ok(store.record(tx, "shipping", message_id).await?)
    })
    .await
}

/// The same ordering key and dedup key in both outboxes, the other one's
/// tables with a prefix of their own: neither blocks nor deduplicates the
/// other's task. A relay on each delivers only its own outbox's tasks,
/// whose message ids differ even where the task ids are equal; listings,
/// stats, purges, the inbox and the migrations stay apart.
pub async fn two_outboxes_in_one_database_stay_apart<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    stay_apart(db, Names::default().with_table_prefix(OTHER_PREFIX)?).await
}

/// [`two_outboxes_in_one_database_stay_apart`] with the other outbox's
/// tables, under their default names, in a schema of their own (a MySQL
/// database), which its migrations create. Where the backend has no
/// schemas (SQLite), a store refuses one, naming the setting.
pub async fn an_outbox_in_another_schema_stays_apart<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let Some(schema) = db.another_schema() else {
        let names = Names::default().with_schema("billing")?;
        let refused = db
            .another_outbox(&names)
            .await
            .err()
            .ok_or_else(|| anyhow::anyhow!("a backend without schemas took one"))?;
        assert!(
            matches!(
                refused.downcast_ref(),
                Some(diesel_outbox_core::Error::Config {
                    field: "schema",
                    ..
                })
            ),
            "{refused:#}"
        );
        return Ok(());
    };
    stay_apart(db, Names::default().with_schema(&schema)?).await
}

/// The body of both scenarios: the other outbox is called `names`.
async fn stay_apart<B: TestBackend>(db: &B, names: Names) -> anyhow::Result<()> {
    db.migrate_inbox().await?;
    let other = db.another_outbox(&names).await?;
    let store = db.store().clone();

    let keyed = |n| task(n).ordering_key("customer-1").dedup_key("order-1");
    let mine = enqueue(
        db,
        &store,
        vec![keyed(1), task(2).ordering_key("customer-1")],
    )
    .await?;
    let theirs = enqueue(
        db,
        &other,
        vec![keyed(101), task(102).ordering_key("customer-1")],
    )
    .await?;
    for (outbox, ids, first) in [(&store, &mine, 1), (&other, &theirs, 101)] {
        let head = outbox.get(ids[0]).await?;
        assert_eq!(
            head.status,
            Status::Available,
            "a key of the other outbox blocked it"
        );
        assert_eq!(
            head.task.payload,
            task(first).payload,
            "the dedup key met the other's"
        );
        assert_eq!(outbox.get(ids[1]).await?.status, Status::Blocked);
    }
    assert_ne!(store.outbox_id().await?, other.outbox_id().await?);

    let (my_handler, my_handle) = handler::recording();
    let (their_handler, their_handle) = handler::recording();
    let shutdown = CancellationToken::new();
    let relays = [
        spawn_relay(
            diesel_outbox_core::Worker::with_config(
                store.clone(),
                registry(my_handler)?,
                config("a"),
            )?,
            relay_config(),
            &shutdown,
        )?,
        spawn_relay(
            diesel_outbox_core::Worker::with_config(
                other.clone(),
                registry(their_handler)?,
                config("b"),
            )?,
            relay_config(),
            &shutdown,
        )?,
    ];
    my_handle.wait_for_successes(2).await;
    their_handle.wait_for_successes(2).await;
    shutdown.cancel();
    for relay in relays {
        relay.await?;
    }
    let payloads = |handle: &handler::HandlerHandle| {
        handle
            .deliveries()
            .into_iter()
            .map(|d| d.task.payload)
            .collect::<Vec<_>>()
    };
    assert_eq!(payloads(&my_handle), [task(1).payload, task(2).payload]);
    assert_eq!(
        payloads(&their_handle),
        [task(101).payload, task(102).payload]
    );
    let message_ids = |handle: &handler::HandlerHandle| {
        handle
            .deliveries()
            .iter()
            .map(|d| d.message_id())
            .collect::<Vec<_>>()
    };
    for id in message_ids(&my_handle) {
        assert!(
            !message_ids(&their_handle).contains(&id),
            "both outboxes sent {id}"
        );
    }

    for (outbox, first) in [(&store, 1), (&other, 101)] {
        let listed = outbox
            .list(&TaskFilter::new(), &PageRequest::first(10)?)
            .await?;
        let mut payloads: Vec<Vec<u8>> = listed
            .records
            .iter()
            .map(|record| record.task.payload.clone())
            .collect();
        payloads.sort();
        let mut expected = vec![task(first).payload, task(first + 1).payload];
        expected.sort();
        assert_eq!(payloads, expected, "a listing crossed over");
    }

    enqueue(db, &other, vec![task(103)]).await?;
    let (my_stats, their_stats) = (store.stats().await?, other.stats().await?);
    assert_eq!((my_stats.succeeded, my_stats.backlog()), (2, 0));
    assert_eq!((their_stats.succeeded, their_stats.backlog()), (2, 1));
    assert_eq!(store.purge_finished(Duration::ZERO, 10).await?, 2);
    assert_eq!(
        other.stats().await?.succeeded,
        2,
        "a purge reached the other outbox"
    );

    assert_eq!(record(db, &store, "orders:1").await?, Receipt::New);
    assert_eq!(record(db, &other, "orders:1").await?, Receipt::New);
    assert_eq!(record(db, &other, "orders:1").await?, Receipt::Duplicate);

    // Reverting this outbox's migrations leaves the other one working.
    db.revert().await?;
    assert!(
        db.count_tasks().await.is_err(),
        "the outbox survived its revert"
    );
    enqueue(db, &other, vec![task(104)]).await?;
    assert_eq!(other.stats().await?.backlog(), 2);
    Ok(())
}
