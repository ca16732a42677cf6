//! A private Redis killed and started again: a publish that got no reply
//! fails retryably, the next one after the restart works (the script is
//! loaded again), and with append-only persistence the dedup window
//! survives the restart.

use diesel_outbox_postgres::outbox::{Delivery, OutboxId, Task, TaskId};
use diesel_outbox_redis::StreamPublisher;
use diesel_outbox_testkit::{private_server::PrivateServer, redis::TestRedis};

fn delivery(id: i64) -> Delivery {
    Delivery::new(TaskId::new(id), 1, Task::new("order.created", 1, "{}"))
        .in_outbox(OutboxId::new("a1"))
}

fn redis_server(name: &str, persistent: bool) -> anyhow::Result<PrivateServer> {
    let appendonly = if persistent { "yes" } else { "no" };
    PrivateServer::start(
        name,
        "redis-server",
        &[
            "--bind",
            "127.0.0.1",
            "--port",
            "{port}",
            "--dir",
            "{dir}",
            "--appendonly",
            appendonly,
            "--appendfsync",
            "always",
            "--save",
            "",
        ],
    )
}

async fn restarts(persistent: bool) -> anyhow::Result<()> {
    let name = if persistent {
        "redis-aof"
    } else {
        "redis-memory"
    };
    let mut server = redis_server(name, persistent)?;
    let url = format!("redis://127.0.0.1:{}", server.port());
    let redis = TestRedis::on(name, &url).await?;
    let stream = redis.name("orders");
    let publisher = StreamPublisher::builder(&url)
        .route("order.created", 1, &stream)
        .build()?;
    let first = publisher
        .publish(&delivery(1))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    server.kill()?;
    let error = publisher
        .publish(&delivery(2))
        .await
        .expect_err("no server, no success");
    assert!(!error.is_permanent(), "{error}");
    server.restart()?;
    // The connection reopens by itself; the script cache is empty now.
    let mut answer = publisher.publish(&delivery(2)).await;
    for _ in 0..50 {
        if answer.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        answer = publisher.publish(&delivery(2)).await;
    }
    assert!(!answer.map_err(|e| anyhow::anyhow!("{e}"))?.replay);
    let replay = publisher
        .publish(&delivery(1))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if persistent {
        assert!(replay.replay, "the dedup window is on disk with the stream");
        assert_eq!(replay.entry_id, first.entry_id);
        assert_eq!(redis.stream_len(&stream).await?, 2);
    } else {
        // Without persistence Redis forgot the stream and the window alike.
        assert!(!replay.replay);
        assert_eq!(redis.stream_len(&stream).await?, 2);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_only_redis_restarted_keeps_the_window_and_the_script_is_loaded_again()
-> anyhow::Result<()> {
    restarts(true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_without_persistence_restarted_takes_publishes_again() -> anyhow::Result<()> {
    restarts(false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_whose_reply_never_came_is_retried_and_the_window_absorbs_it()
-> anyhow::Result<()> {
    let server = redis_server("redis-paused", false)?;
    let url = format!("redis://127.0.0.1:{}", server.port());
    let redis = TestRedis::on("redis-paused", &url).await?;
    let stream = redis.name("orders");
    let publisher = StreamPublisher::builder(&url)
        .route("order.created", 1, &stream)
        .build()?;
    publisher
        .publish(&delivery(1))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // Redis holds every script for 7 s, past the publisher's 5 s wait for a
    // reply; it runs them when the pause ends.
    let mut admin = redis.connection().await?;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(7000)
        .arg("WRITE")
        .query_async(&mut admin)
        .await?;
    let error = publisher
        .publish(&delivery(2))
        .await
        .expect_err("no reply in time");
    assert!(
        !error.is_permanent() && error.to_string().contains("no answer"),
        "{error}"
    );
    // The retry, once Redis answers again, finds the add that did happen.
    let mut retried = publisher.publish(&delivery(2)).await;
    for _ in 0..100 {
        if retried.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        retried = publisher.publish(&delivery(2)).await;
    }
    let retried = retried.map_err(|e| anyhow::anyhow!("{e}"))?;
    assert!(
        retried.replay,
        "the paused add ran when the pause ended: {retried:?}"
    );
    assert_eq!(redis.stream_len(&stream).await?, 2, "task 2 added once");
    Ok(())
}
