//! Scenario 1: what enqueueing adds to a business transaction.

use std::time::{Duration, Instant};

use diesel_async::AsyncConnection;
use diesel_outbox_core::{Store, Task};

use super::{
    Plan,
    figure::{Figure, Plot},
    raw::{Prepare, Raw},
    stats::median,
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

/// Every variant, in the order the first block runs them, as a ring: each
/// compared pair has neighbours alike. `Library` and `Raw` each sit next to
/// one variant writing 100 rows per commit and one writing a single row;
/// `LibraryMany` and `RawMany` each sit between two single-row variants.
const VARIANTS: [Variant; 6] = [
    Variant::Library,
    Variant::LibraryMany,
    Variant::OrderOnly,
    Variant::Raw,
    Variant::RawMany,
    Variant::RawEachCall,
];

/// Blocks each run is cut into, the variants taking turns block by block,
/// so that a checkpoint, an autovacuum or a slow disk flush lasting a
/// second falls on all of them alike instead of on whichever ran then. Two
/// per variant, so that [`turn`] starts a pair of blocks at each variant
/// once.
const BLOCKS: usize = 2 * VARIANTS.len();

/// Which variant (its index in [`VARIANTS`]) runs `step`-th in `block`.
///
/// Blocks go in pairs: the first of a pair runs the ring in order, starting
/// one variant later than the pair before, the second runs the same order
/// backwards. A slow drift then falls on every variant alike within a
/// pair, and over a run each variant comes right after each of its two
/// neighbours in the ring, and after itself, as often as any other variant
/// does: a variant that leaves flushes behind (100 rows per commit) slows
/// the one after it, and rotation alone would always put the same one
/// there.
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
    let [library, library_many, bare, raw, raw_many, each_call] = rates;
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
            cpu: None,
            plot: Plot::Throughput("order + enqueue"),
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
            cpu: None,
            plot: Plot::None,
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
            cpu: None,
            plot: Plot::None,
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
            cpu: None,
            plot: Plot::Throughput("order + enqueue_many(100)"),
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::{BLOCKS, VARIANTS, Variant, turn};

    /// The variants of one run in the order they run, block after block.
    fn sequence() -> Vec<usize> {
        (0..BLOCKS)
            .flat_map(|block| (0..VARIANTS.len()).map(move |step| turn(block, step)))
            .collect()
    }

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

    /// How often the variant at `index` runs right after one that writes
    /// 100 rows per commit, block boundaries included.
    fn after_many(index: usize) -> usize {
        let many = |i: usize| matches!(VARIANTS[i], Variant::LibraryMany | Variant::RawMany);
        sequence()
            .windows(2)
            .filter(|pair| pair[1] == index && many(pair[0]))
            .count()
    }

    fn index(variant: fn(&Variant) -> bool) -> usize {
        VARIANTS
            .iter()
            .position(variant)
            .expect("every variant is listed")
    }

    #[test]
    fn compared_variants_follow_the_heavy_writers_equally_often() {
        let library = index(|v| matches!(v, Variant::Library));
        let raw = index(|v| matches!(v, Variant::Raw));
        let library_many = index(|v| matches!(v, Variant::LibraryMany));
        let raw_many = index(|v| matches!(v, Variant::RawMany));
        assert_eq!(after_many(library), after_many(raw));
        assert_eq!(after_many(library_many), after_many(raw_many));
    }

    #[test]
    fn each_variant_follows_both_ring_neighbours_in_about_half_the_blocks() {
        let n = VARIANTS.len();
        let mut follows = vec![vec![0_usize; n]; n];
        for pair in sequence().windows(2) {
            follows[pair[1]][pair[0]] += 1;
        }
        for (variant, before) in follows.iter().enumerate() {
            let (lower, upper) = ((variant + n - 1) % n, (variant + 1) % n);
            for (other, &times) in before.iter().enumerate() {
                let expected = if other == lower || other == upper {
                    5..=6
                } else if other == variant {
                    1..=1
                } else {
                    0..=0
                };
                assert!(
                    expected.contains(&times),
                    "variant {variant} follows {other} {times} times"
                );
            }
        }
    }
}
