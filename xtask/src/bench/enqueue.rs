//! Scenario 1: what enqueueing adds to a business transaction.

use std::time::{Duration, Instant};

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

/// Every variant, in the order the first block runs them.
const VARIANTS: [Variant; 6] = [
    Variant::Library,
    Variant::Raw,
    Variant::RawEachCall,
    Variant::OrderOnly,
    Variant::LibraryMany,
    Variant::RawMany,
];

/// Blocks each run is cut into, the variants taking turns block by block,
/// so that a checkpoint, an autovacuum or a slow disk flush lasting a
/// second falls on all of them alike instead of on whichever ran then.
const BLOCKS: usize = 10;

/// Which variant (its index in [`VARIANTS`]) runs `step`-th in `block`.
///
/// Blocks go in pairs: the first of a pair runs the variants in order,
/// starting one variant later than the pair before, the second runs the
/// same order backwards. A slow drift then falls on every variant alike
/// within a pair, and each variant follows each of its two neighbours in
/// [`VARIANTS`] in about half the blocks: a variant that leaves flushes
/// behind (100 rows per commit) slows the one after it, and rotation alone
/// would always put the same one there.
fn turn(block: usize, step: usize) -> usize {
    let (n, start) = (VARIANTS.len(), block / 2);
    if block.is_multiple_of(2) {
        (start + step) % n
    } else {
        (start + n - 1 - step) % n
    }
}

/// Commits of one variant in one run: `plan.transactions`, a tenth of that
/// for the variants that enqueue 100 tasks per commit.
fn commits(variant: Variant, plan: &Plan) -> usize {
    if matches!(variant, Variant::LibraryMany | Variant::RawMany) {
        plan.transactions / 10
    } else {
        plan.transactions
    }
}

/// Time taken by `transactions` business transactions of one variant on
/// `conn` (each variant keeps its own connection, so its statements stay
/// prepared from the warm-up on).
async fn run<B: Raw>(
    db: &B,
    conn: &mut B::Conn,
    variant: Variant,
    transactions: usize,
    next_order: &mut i64,
) -> anyhow::Result<Duration> {
    let store = db.store();
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
    Ok(started.elapsed())
}

/// Library vs raw, interleaved block by block, for one enqueue and for 100.
pub(crate) async fn measure<B: Raw>(db: &B, plan: &Plan) -> anyhow::Result<Vec<Figure>> {
    db.reset().await?;
    let mut next_order = 0;
    let mut conns = Vec::with_capacity(VARIANTS.len());
    for _ in VARIANTS {
        conns.push(db.connect().await?);
    }
    // Warm every path (connections, prepared statements) before measuring.
    for (variant, conn) in VARIANTS.into_iter().zip(&mut conns) {
        run(db, conn, variant, 50, &mut next_order).await?;
    }
    // Commits/s of each variant, one per run.
    let mut rates: [Vec<f64>; VARIANTS.len()] = Default::default();
    for _ in 0..plan.runs {
        let mut spent = [Duration::ZERO; VARIANTS.len()];
        for block in 0..BLOCKS {
            for step in 0..VARIANTS.len() {
                let at = turn(block, step);
                let variant = VARIANTS[at];
                // The run's commits, spread over its blocks.
                let total = commits(variant, plan);
                let share = total * (block + 1) / BLOCKS - total * block / BLOCKS;
                spent[at] += run(db, &mut conns[at], variant, share, &mut next_order).await?;
            }
        }
        for ((variant, spent), rates) in VARIANTS.into_iter().zip(spent).zip(&mut rates) {
            rates.push(commits(variant, plan) as f64 / spent.as_secs_f64());
        }
    }
    let [library, raw, each_call, bare, library_many, raw_many] = rates;
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

#[cfg(test)]
mod tests {
    use super::{BLOCKS, VARIANTS, turn};

    #[test]
    fn every_block_runs_each_variant_once() {
        for block in 0..BLOCKS {
            let mut order: Vec<usize> = (0..VARIANTS.len()).map(|s| turn(block, s)).collect();
            order.sort_unstable();
            assert_eq!(
                order,
                (0..VARIANTS.len()).collect::<Vec<_>>(),
                "block {block}"
            );
        }
    }

    #[test]
    fn each_variant_follows_both_neighbours_about_equally() {
        let n = VARIANTS.len();
        for variant in 0..n {
            let (mut after_lower, mut after_upper) = (0, 0);
            for block in 0..BLOCKS {
                for step in 1..n {
                    if turn(block, step) != variant {
                        continue;
                    }
                    let before = turn(block, step - 1);
                    if before == (variant + n - 1) % n {
                        after_lower += 1;
                    } else if before == (variant + 1) % n {
                        after_upper += 1;
                    } else {
                        panic!("variant {variant} followed {before}, not a neighbour");
                    }
                }
            }
            assert!(
                after_lower >= 4 && after_upper >= 4,
                "variant {variant}: {after_lower} and {after_upper} blocks after each neighbour"
            );
        }
    }
}
