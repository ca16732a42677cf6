//! Scenario 4: a claim's cost with a million finished rows in the table.

use std::time::{Duration, Instant};

use outbox_core::{BatchRequest, LeaseRequest, Store};

use super::{
    Plan,
    raw::Raw,
    stats::{Figure, median},
};

const PENDING: u64 = 10_000;

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

/// Claims of 100 on `empty` (no finished rows) and `full` (`plan.finished`
/// finished rows), interleaved; the ratio of their medians.
pub(crate) async fn measure<B: Raw>(empty: &B, full: &B, plan: &Plan) -> anyhow::Result<Figure> {
    for (db, finished) in [(empty, 0), (full, plan.finished)] {
        db.reset().await?;
        if finished > 0 {
            db.fill_finished(finished).await?;
        }
        db.fill_pending(PENDING, "bench.scale").await?;
        db.analyze().await?;
        claim(db).await?; // warm the connection and the statement cache
    }
    let (mut on_empty, mut on_full) = (Vec::new(), Vec::new());
    for _ in 0..plan.claims {
        on_empty.push(claim(empty).await?);
        on_full.push(claim(full).await?);
    }
    let (empty_cost, full_cost) = (median(&on_empty), median(&on_full));
    Ok(Figure {
        backend: B::NAME,
        scenario: format!("claim of 100 with {} finished rows", plan.finished),
        unit: "ms per claim",
        library: full_cost * 1000.0,
        baseline: empty_cost * 1000.0,
        ratio: full_cost / empty_cost,
        higher_is_better: false,
        runs: plan.claims,
        target: Some(1.2),
        baseline_name: "the same claim, no finished rows",
    })
}
