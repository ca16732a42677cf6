//! The operator's tools: listing tasks by filter a keyset page at a time,
//! and requeueing or discarding in bulk by the same filters.

use chrono::{TimeDelta, Utc};
use diesel_outbox_core::{
    Error, Maintenance, Order, PageRequest, Registry, Status, Task, TaskFilter, TaskId,
};

use super::support::{KIND, config, enqueue_committed, get, registry, task, worker};
use crate::{TestBackend, handler};

/// Another kind, so filters have something to leave out.
const OTHER: &str = "invoice.issued";

/// Every id of every page of `filter`, walked in `order`, `limit` at a time.
async fn walk<S: Maintenance>(
    store: &S,
    filter: &TaskFilter,
    limit: u32,
    order: Order,
) -> anyhow::Result<Vec<TaskId>> {
    let mut request = PageRequest::first(limit)?.order(order);
    let mut ids = Vec::new();
    for _ in 0..100 {
        let page = store.list(filter, &request).await?;
        anyhow::ensure!(
            page.records.len() <= limit as usize,
            "a page beyond its limit"
        );
        ids.extend(page.records.iter().map(|record| record.id));
        match page.next {
            Some(next) => request = request.after(next),
            None => return Ok(ids),
        }
    }
    anyhow::bail!("the pages never ended")
}

/// Fails `ids` for good through a worker whose handler refuses them.
async fn fail<B: TestBackend>(db: &B, ids: &[TaskId]) -> anyhow::Result<()> {
    let (mock, _) = handler::failing_permanently();
    let registry = Registry::builder()
        .handler(KIND, 1, mock.clone())
        .handler(OTHER, 1, mock)
        .build()?;
    let worker = worker(db, registry, config("operator"))?;
    for &id in ids {
        anyhow::ensure!(worker.send(id).await.is_err(), "task {id} did not fail");
    }
    Ok(())
}

/// Listings combine their filters with AND and walk the ids in pages,
/// newest or oldest first, each task exactly once.
pub async fn listing_filters_combine_and_pages_cover_each_task_once<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let ids = enqueue_committed(
        db,
        vec![
            task(0),
            task(1).ordering_key("k"),
            Task::new(OTHER, 1, "{}"),
            task(3),
            task(4),
            Task::new(OTHER, 1, "{}").ordering_key("k"),
            task(6),
        ],
    )
    .await?;
    fail(db, &[ids[0], ids[3]]).await?;
    let store = db.store();

    let mut newest = ids.clone();
    newest.reverse();
    for limit in [1, 2, 3, 7, 1000] {
        let all = walk(store, &TaskFilter::new(), limit, Order::NewestFirst).await?;
        assert_eq!(all, newest, "newest first, {limit} a page");
        let all = walk(store, &TaskFilter::new(), limit, Order::OldestFirst).await?;
        assert_eq!(all, ids, "oldest first, {limit} a page");
    }

    let failed = TaskFilter::new().status(Status::Failed);
    assert_eq!(
        walk(store, &failed, 10, Order::OldestFirst).await?,
        [ids[0], ids[3]]
    );
    let page = store.list(&failed, &PageRequest::first(10)?).await?;
    assert!(
        page.records
            .iter()
            .all(|record| !record.last_error.is_empty()),
        "failed tasks come with their last error"
    );
    let other = TaskFilter::new().kind(OTHER);
    assert_eq!(
        walk(store, &other, 10, Order::OldestFirst).await?,
        [ids[2], ids[5]]
    );
    let keyed = TaskFilter::new().ordering_key("k");
    assert_eq!(
        walk(store, &keyed, 10, Order::OldestFirst).await?,
        [ids[1], ids[5]]
    );
    let both = TaskFilter::new().ordering_key("k").kind(OTHER);
    assert_eq!(walk(store, &both, 10, Order::OldestFirst).await?, [ids[5]]);
    let none = TaskFilter::new().status(Status::Failed).kind(OTHER);
    assert!(walk(store, &none, 10, Order::OldestFirst).await?.is_empty());

    let created = get(db, ids[0]).await?.created_at;
    let since_then = TaskFilter::new().since(created - TimeDelta::minutes(5));
    assert_eq!(walk(store, &since_then, 10, Order::OldestFirst).await?, ids);
    let future = TaskFilter::new().since(Utc::now() + TimeDelta::hours(1));
    assert!(
        walk(store, &future, 10, Order::OldestFirst)
            .await?
            .is_empty()
    );

    let after = store
        .matching_ids(&TaskFilter::new().kind(KIND), Some(ids[1]), 2)
        .await?;
    assert_eq!(
        after,
        [ids[3], ids[4]],
        "ids above the cursor, lowest first"
    );
    Ok(())
}

/// A bulk requeue takes the failed tasks its filter matches, in batches,
/// exactly as the single-task requeue does each: available again, deadline
/// cleared, attempts and last error kept. Other statuses are left alone, and
/// a filter asking for them is refused.
pub async fn bulk_requeue_takes_matching_failed_tasks_in_batches<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let mut tasks: Vec<Task> = (0..7)
        .map(|n| task(n).expires_at(Utc::now() + TimeDelta::hours(1)))
        .collect();
    tasks.push(Task::new(OTHER, 1, "{}"));
    tasks.push(task(8));
    let ids = enqueue_committed(db, tasks).await?;
    let (failing, _) = ids.split_at(8);
    fail(db, failing).await?;
    let store = db.store();

    let refused = store
        .requeue_matching(&TaskFilter::new().status(Status::Available), 10)
        .await;
    assert!(
        matches!(
            refused,
            Err(Error::InvalidArgument {
                field: "status",
                ..
            })
        ),
        "{refused:?}"
    );
    let refused = store.requeue_matching(&TaskFilter::new(), 0).await;
    assert!(
        matches!(refused, Err(Error::InvalidArgument { field: "batch", .. })),
        "{refused:?}"
    );

    let requeued = store
        .requeue_matching(&TaskFilter::new().kind(KIND), 3)
        .await?;
    assert_eq!(
        requeued, 7,
        "seven failed tasks of the kind, in batches of 3"
    );
    for &id in &ids[..7] {
        let record = get(db, id).await?;
        assert_eq!((record.status, record.attempts), (Status::Available, 1));
        assert_eq!(record.task.expires_at, None, "the deadline is cleared");
        assert!(record.finished_at.is_none());
        assert!(
            record
                .last_error
                .contains(handler::INJECTED_PERMANENT_FAILURE)
        );
    }
    assert_eq!(
        get(db, ids[7]).await?.status,
        Status::Failed,
        "another kind"
    );
    assert_eq!(get(db, ids[8]).await?.status, Status::Available);
    assert_eq!(
        store.requeue_matching(&TaskFilter::new(), 2).await?,
        1,
        "no filter: every failed task, here the last one"
    );
    assert_eq!(store.stats().await?.failed, 0);
    Ok(())
}

/// A bulk discard gives up what may be given up (never a succeeded task),
/// and a discarded failed head lets its key move on, as discarding it alone
/// would; a filter for a status that cannot be discarded is refused.
pub async fn bulk_discard_lets_ordering_keys_move_on<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let ids = enqueue_committed(
        db,
        vec![
            task(0).ordering_key("k"),
            task(1).ordering_key("k"),
            task(2).ordering_key("k"),
            task(3),
            task(4),
            Task::new(OTHER, 1, "{}"),
        ],
    )
    .await?;
    fail(db, &[ids[0]]).await?;
    let (mock, _) = handler::recording();
    worker(db, registry(mock)?, config("sender"))?
        .send(ids[3])
        .await?;
    let store = db.store();
    assert_eq!(get(db, ids[1]).await?.status, Status::Blocked);

    let refused = store
        .discard_matching(&TaskFilter::new().status(Status::Succeeded), 10)
        .await;
    assert!(
        matches!(
            refused,
            Err(Error::InvalidArgument {
                field: "status",
                ..
            })
        ),
        "{refused:?}"
    );

    let failed_heads = TaskFilter::new().status(Status::Failed).ordering_key("k");
    assert_eq!(store.discard_matching(&failed_heads, 10).await?, 1);
    assert_eq!(get(db, ids[0]).await?.status, Status::Discarded);
    assert_eq!(
        get(db, ids[1]).await?.status,
        Status::Available,
        "the key's next task goes"
    );
    assert_eq!(get(db, ids[2]).await?.status, Status::Blocked);

    let discarded = store
        .discard_matching(&TaskFilter::new().kind(KIND), 2)
        .await?;
    assert_eq!(
        discarded, 3,
        "the key's two open tasks and the keyless available one"
    );
    let statuses = [
        get(db, ids[1]).await?.status,
        get(db, ids[2]).await?.status,
        get(db, ids[3]).await?.status,
        get(db, ids[4]).await?.status,
        get(db, ids[5]).await?.status,
    ];
    assert_eq!(
        statuses,
        [
            Status::Discarded,
            Status::Discarded,
            Status::Succeeded,
            Status::Discarded,
            Status::Available,
        ]
    );
    assert_eq!(
        db.count("outbox_ordering_keys").await?,
        0,
        "the key is closed"
    );

    // Blocked tasks discarded behind a failed head, in batches: the head
    // keeps its key, and the key counts only the head from then on.
    let behind =
        enqueue_committed(db, (10..14).map(|n| task(n).ordering_key("m")).collect()).await?;
    fail(db, &behind[..1]).await?;
    let blocked = TaskFilter::new().status(Status::Blocked).ordering_key("m");
    assert_eq!(store.discard_matching(&blocked, 2).await?, 3);
    assert_eq!(get(db, behind[0]).await?.status, Status::Failed);
    for &id in &behind[1..] {
        assert_eq!(get(db, id).await?.status, Status::Discarded);
    }
    assert_eq!(db.count("outbox_ordering_keys").await?, 1);
    store.requeue(behind[0]).await?;
    let (mock, _) = handler::recording();
    worker(db, registry(mock)?, config("sender"))?
        .send(behind[0])
        .await?;
    assert_eq!(
        db.count("outbox_ordering_keys").await?,
        0,
        "the head was the key's last open task"
    );
    Ok(())
}

/// A bulk requeue or discard takes any number of ids at once: more than
/// every database binds in one statement (SQLite 32,766 values, PostgreSQL
/// and MySQL 65,535), most of them naming no task.
pub async fn bulk_changes_take_more_ids_than_a_statement_binds<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let ids = enqueue_committed(
        db,
        vec![
            task(0).ordering_key("k"),
            task(1).ordering_key("k"),
            task(2),
        ],
    )
    .await?;
    fail(db, &[ids[2]]).await?;
    let first = ids[0].get();
    let many: Vec<TaskId> = (first..first + 70_000).map(TaskId::new).collect();
    let store = db.store();

    assert_eq!(store.requeue_failed_many(&many).await?, 1, "the failed one");
    assert_eq!(get(db, ids[2]).await?.status, Status::Available);
    assert_eq!(store.discard_many(&many).await?, 3);
    for id in &ids {
        assert_eq!(get(db, *id).await?.status, Status::Discarded, "task {id}");
    }
    assert_eq!(
        db.count("outbox_ordering_keys").await?,
        0,
        "the key is closed"
    );
    Ok(())
}

/// A page read without payloads holds the same tasks, every field as the
/// full page has it but the payload, which comes back empty; failure
/// groups, which read that way, hold every failed task.
pub async fn listings_without_payloads_keep_every_other_field<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let heavy = vec![b'x'; 64 * 1024];
    let ids = enqueue_committed(
        db,
        vec![
            Task::new(KIND, 1, heavy.clone())
                .ordering_key("k")
                .dedup_key("d-1")
                .header("tenant", "t-9")
                .max_attempts(3),
            task(1).ordering_key("k"),
            Task::new(OTHER, 1, heavy).not_before(Utc::now() + TimeDelta::hours(1)),
            task(3),
        ],
    )
    .await?;
    fail(db, &[ids[0], ids[3]]).await?;
    let store = db.store();
    for filter in [TaskFilter::new(), TaskFilter::new().status(Status::Failed)] {
        let request = PageRequest::first(10)?.order(Order::OldestFirst);
        let full = store.list(&filter, &request).await?;
        let light = store.list(&filter, &request.without_payloads()).await?;
        assert!(!full.records.is_empty(), "{filter:?}");
        assert_eq!(light.records.len(), full.records.len(), "{filter:?}");
        assert_eq!(light.next, full.next);
        for (light, full) in light.records.iter().zip(&full.records) {
            assert!(
                light.task.payload.is_empty(),
                "task {} kept its payload",
                light.id
            );
            let mut expected = full.clone();
            expected.task.payload = Vec::new();
            assert_eq!(light, &expected);
        }
    }
    let groups = diesel_outbox_core::failure_groups(store, &TaskFilter::new()).await?;
    let mut grouped: Vec<TaskId> = groups.iter().flat_map(|g| g.ids.clone()).collect();
    grouped.sort();
    assert_eq!(grouped, [ids[0], ids[3]]);
    Ok(())
}
