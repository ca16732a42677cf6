//! One partition's records, applied one after another: a record is done
//! (applied, a duplicate, or dead-lettered) before the next starts, so a
//! key's records apply in their order; a record handed back is tried again
//! in place after its delay.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use confluent_kafka::consumer::ConsumerRecord;
use diesel_outbox_core::{
    CancellationToken, Inbox,
    consume::{ConsumeHandler, Outcome},
};
use tokio::sync::mpsc;
use tracing::Instrument as _;

use super::{
    Shared,
    answer::{Answer, Answering},
};

/// What a partition's worker tells the consumer: a delivery's outcome, and
/// the offset the partition may commit (the next record's) once a record
/// is done.
#[derive(Debug)]
pub(crate) struct Progress {
    pub(crate) partition: i32,
    pub(crate) outcome: Outcome,
    pub(crate) next_offset: Option<i64>,
}

/// The records waiting for one partition's worker.
pub(crate) struct Queue {
    pub(crate) records: mpsc::UnboundedSender<ConsumerRecord<Vec<u8>, Vec<u8>>>,
    /// How many records are queued and not yet started.
    pub(crate) waiting: Arc<AtomicUsize>,
    /// Whether the consumer paused fetching the partition.
    pub(crate) paused: bool,
}

/// Applies `partition`'s records as they come, until its queue closes or
/// `stop` is cancelled; once `stop` is cancelled it starts no record (one
/// waiting for its turn among the partitions included: it stays
/// uncommitted and comes again), and stops waiting out a hand-back's delay.
pub(crate) async fn work<I, H>(
    shared: Arc<Shared>,
    flow: Arc<diesel_outbox_core::consume::ConsumeFlow<I, H>>,
    partition: i32,
    mut records: mpsc::UnboundedReceiver<ConsumerRecord<Vec<u8>, Vec<u8>>>,
    waiting: Arc<AtomicUsize>,
    progress: mpsc::UnboundedSender<Progress>,
    stop: CancellationToken,
) where
    I: Inbox + 'static,
    H: ConsumeHandler<I::Conn> + 'static,
{
    loop {
        let record = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            record = records.recv() => match record {
                Some(record) => record,
                None => return,
            },
        };
        waiting.fetch_sub(1, Ordering::Relaxed);
        let mut delivered: i64 = 1;
        loop {
            if stop.is_cancelled() {
                return;
            }
            let answering = Answering::new(&record, &shared, delivered);
            let span = tracing::info_span!(
                "outbox.consume",
                consumer = %flow.name(),
                record = %answering.position(),
                delivered,
            );
            let outcome = {
                let permit = tokio::select! {
                    biased;
                    () = stop.cancelled() => return,
                    permit = shared.permits.acquire() => permit,
                };
                let Ok(_permit) = permit else {
                    return;
                };
                let decoded = answering.decode();
                flow.process(&answering, delivered, decoded)
                    .instrument(span)
                    .await
            };
            let answer = answering.answer();
            let next_offset = (answer == Answer::Done).then(|| record.offset().saturating_add(1));
            if progress
                .send(Progress {
                    partition,
                    outcome,
                    next_offset,
                })
                .is_err()
            {
                return;
            }
            match answer {
                Answer::Done => break,
                Answer::Again(delay) => {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(delay) => {}
                    }
                    delivered = delivered.saturating_add(1);
                }
            }
        }
    }
}
