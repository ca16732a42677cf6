//! Scenario 4: a claim's cost, and the read of the ages an alert watches,
//! beside each backlog an outbox meets in production (waiting, blocked
//! behind a failed head, finished), against the same on a table holding
//! only the due rows.

use std::time::{Duration, Instant};

use diesel_outbox_core::{BatchRequest, LeaseRequest, Maintenance, Store};
use diesel_outbox_testkit::backlog::Backlog;

use super::{
    Plan,
    figure::{Figure, Plot},
    raw::Raw,
    stats::median,
};

/// Due rows in both tables: enough for every claim of a scenario to take
/// 100 rows no earlier claim took, and enough that PostgreSQL plans the
/// due-only table's claim as it plans the larger ones (below about 15,000
/// rows it joins the claimed ids to a full scan of the table instead of
/// looking each one up).
const DUE: u64 = 30_000;

/// Seconds one claim of 100 took.
async fn claim<B: Raw>(db: &B) -> anyhow::Result<f64> {
    let request = BatchRequest {
        lease: LeaseRequest {
            owner: "bench".into(),
            duration: Duration::from_secs(600),
        },
        limit: 100,
        after: None,
        due_by: None,
    };
    let started = Instant::now();
    let claimed = db.store().claim_due(&request).await?;
    let took = started.elapsed().as_secs_f64();
    anyhow::ensure!(claimed.len() == 100, "claimed {} of 100", claimed.len());
    Ok(took)
}

/// Seconds one read of the ages took.
async fn ages<B: Raw>(db: &B) -> anyhow::Result<f64> {
    let started = Instant::now();
    let ages = db.store().ages().await?;
    let took = started.elapsed().as_secs_f64();
    anyhow::ensure!(ages.oldest_due.is_some(), "no due task aged: {ages:?}");
    Ok(took)
}

/// How many rows of `backlog` the plan asks for.
fn rows(backlog: Backlog, plan: &Plan) -> u64 {
    match backlog {
        Backlog::NotDue | Backlog::Backoff => plan.waiting,
        Backlog::FailedHead | Backlog::SucceededKey => plan.keyed,
        Backlog::Finished => plan.finished,
    }
}

/// One figure per backlog shape: claims of 100 on `shaped` (the shape, then
/// the due rows) and on `due_only` (the due rows alone), interleaved; the
/// ratio of their medians. Both tables are refilled for each shape, so every
/// claim takes rows no earlier claim took.
pub(crate) async fn measure<B: Raw>(
    due_only: &B,
    shaped: &B,
    plan: &Plan,
) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for backlog in Backlog::ALL {
        let rows = rows(backlog, plan);
        for (db, backlog) in [(due_only, None), (shaped, Some(backlog))] {
            db.reset().await?;
            if let Some(backlog) = backlog {
                db.fill_backlog(backlog, rows).await?;
            }
            db.fill_pending(DUE, "bench.scale").await?;
            db.analyze().await?;
            claim(db).await?; // warm the connection and the statement cache
        }
        let (mut on_due_only, mut on_shaped) = (Vec::new(), Vec::new());
        for _ in 0..plan.claims {
            on_due_only.push(claim(due_only).await?);
            on_shaped.push(claim(shaped).await?);
        }
        let (due_only_cost, shaped_cost) = (median(&on_due_only), median(&on_shaped));
        // The ages, on the same tables (each now holding its claimed rows
        // too), interleaved the same way, after one read each to warm.
        ages(due_only).await?;
        ages(shaped).await?;
        let (mut aged_due_only, mut aged_shaped) = (Vec::new(), Vec::new());
        for _ in 0..plan.claims {
            aged_due_only.push(ages(due_only).await?);
            aged_shaped.push(ages(shaped).await?);
        }
        let (due_only_read, shaped_read) = (median(&aged_due_only), median(&aged_shaped));
        figures.push(Figure {
            backend: B::NAME,
            scenario: format!("ages read beside {}", backlog.describe(rows)),
            unit: "us per read",
            library: shaped_read * 1e6,
            baseline: due_only_read * 1e6,
            ratio: shaped_read / due_only_read,
            higher_is_better: false,
            runs: plan.claims,
            target: Some(1.2),
            baseline_name: "the same read, due rows only",
            cpu: None,
            plot: Plot::None,
        });
        figures.push(Figure {
            backend: B::NAME,
            scenario: format!("claim of 100 beside {}", backlog.describe(rows)),
            unit: "ms per claim",
            library: shaped_cost * 1000.0,
            baseline: due_only_cost * 1000.0,
            ratio: shaped_cost / due_only_cost,
            higher_is_better: false,
            runs: plan.claims,
            target: Some(1.2),
            baseline_name: "the same claim, due rows only",
            cpu: None,
            plot: Plot::Claim(backlog.describe(rows)),
        });
    }
    Ok(figures)
}
