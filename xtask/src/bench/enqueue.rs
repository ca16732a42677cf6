//! Scenario 1: what enqueueing adds to a business transaction.

use std::time::Instant;

use diesel_async::AsyncConnection;
use diesel_outbox_core::{Store, Task};

use super::{
    Plan,
    raw::{Prepare, Raw},
    stats::{Figure, median},
};

fn payload(order: i64) -> Vec<u8> {
    format!("{{\"order\":{order},\"customer\":\"customer-9\",\"total_cents\":4200}}").into_bytes()
}

/// Which variant of the business transaction a run measures.
#[derive(Clone, Copy)]
enum Variant {
    Library,
    Raw,
    /// The hand-written INSERT prepared on every call (`sql_query`).
    RawEachCall,
    LibraryMany,
    RawMany,
    OrderOnly,
}

/// Commits/s of `plan.transactions` business transactions of one variant.
async fn run<B: Raw>(
    db: &B,
    variant: Variant,
    plan: &Plan,
    next_order: &mut i64,
) -> anyhow::Result<f64> {
    let mut conn = db.connect().await?;
    let store = db.store();
    let many = matches!(variant, Variant::LibraryMany | Variant::RawMany);
    let transactions = if many {
        plan.transactions / 10
    } else {
        plan.transactions
    };
    let started = Instant::now();
    for _ in 0..transactions {
        *next_order += 1;
        let order = *next_order;
        conn.transaction::<_, anyhow::Error, _>(async |tx| {
            let prepare = if matches!(variant, Variant::RawEachCall) {
                Prepare::EachCall
            } else {
                Prepare::Once
            };
            B::insert_order(tx, order, prepare).await?;
            match variant {
                Variant::Library => {
                    store
                        .enqueue(tx, Task::new("order.created", 1, payload(order)))
                        .await?;
                }
                Variant::Raw | Variant::RawEachCall => {
                    B::insert_task(tx, &payload(order), prepare).await?;
                }
                Variant::LibraryMany => {
                    let tasks =
                        (0..100).map(|n| Task::new("order.created", 1, payload(order * 100 + n)));
                    store.enqueue_many(tx, tasks.collect()).await?;
                }
                Variant::RawMany => {
                    let payloads: Vec<Vec<u8>> =
                        (0..100).map(|n| payload(order * 100 + n)).collect();
                    B::insert_tasks(tx, &payloads).await?;
                }
                Variant::OrderOnly => {}
            }
            Ok(())
        })
        .await?;
    }
    Ok(transactions as f64 / started.elapsed().as_secs_f64())
}

/// Library vs raw, interleaved run by run, for one enqueue and for 100.
pub(crate) async fn measure<B: Raw>(db: &B, plan: &Plan) -> anyhow::Result<Vec<Figure>> {
    db.reset().await?;
    let mut next_order = 0;
    // Warm both paths (connections, prepared statements) before measuring.
    let warm = Plan {
        transactions: 50,
        ..plan.clone()
    };
    for variant in [
        Variant::Library,
        Variant::Raw,
        Variant::RawEachCall,
        Variant::OrderOnly,
    ] {
        run(db, variant, &warm, &mut next_order).await?;
    }
    let (mut library, mut raw, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    let mut each_call = Vec::new();
    let (mut library_many, mut raw_many) = (Vec::new(), Vec::new());
    for _ in 0..plan.runs {
        library.push(run(db, Variant::Library, plan, &mut next_order).await?);
        raw.push(run(db, Variant::Raw, plan, &mut next_order).await?);
        each_call.push(run(db, Variant::RawEachCall, plan, &mut next_order).await?);
        bare.push(run(db, Variant::OrderOnly, plan, &mut next_order).await?);
        library_many.push(run(db, Variant::LibraryMany, plan, &mut next_order).await?);
        raw_many.push(run(db, Variant::RawMany, plan, &mut next_order).await?);
    }
    let (library, raw, bare) = (median(&library), median(&raw), median(&bare));
    let each_call = median(&each_call);
    let (library_many, raw_many) = (median(&library_many), median(&raw_many));
    Ok(vec![
        Figure {
            backend: B::NAME,
            scenario: "order + enqueue: time per commit (commits/s shown)".into(),
            unit: "commits/s",
            library,
            baseline: raw,
            // A cost ratio: how much longer a commit takes with the library.
            ratio: raw / library,
            higher_is_better: false,
            runs: plan.runs,
            target: Some(1.05),
            baseline_name: "hand-written INSERT, prepared once",
        },
        Figure {
            backend: B::NAME,
            scenario: "order + enqueue vs statements prepared on every call (sql_query)".into(),
            unit: "commits/s",
            library,
            baseline: each_call,
            ratio: each_call / library,
            higher_is_better: false,
            runs: plan.runs,
            target: None,
            baseline_name: "hand-written INSERT, sql_query",
        },
        Figure {
            backend: B::NAME,
            scenario: "order alone vs order + raw INSERT (what any outbox costs)".into(),
            unit: "commits/s",
            library: raw,
            baseline: bare,
            ratio: bare / raw,
            higher_is_better: false,
            runs: plan.runs,
            target: None,
            baseline_name: "order only",
        },
        Figure {
            backend: B::NAME,
            scenario: "order + enqueue_many(100): time per commit".into(),
            unit: "commits/s",
            library: library_many,
            baseline: raw_many,
            ratio: raw_many / library_many,
            higher_is_better: false,
            runs: plan.runs,
            target: Some(1.10),
            baseline_name: "hand-written multi-row INSERT",
        },
    ])
}
