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
    /// The smallest job table a user would write instead (`minimal_queue`).
    Minimal,
    /// `enqueue` through a store that wakes relays at commit (`NOTIFY`),
    /// where the backend has it; elsewhere the plain store.
    LibraryNotify,
}

/// Every variant, in the order the first block runs them, as a ring: each
/// compared pair has neighbours alike. `Library`, `Raw`, `Minimal` and
/// `LibraryNotify` each sit next to one variant writing 100 rows per commit
/// and one writing a single row; `LibraryMany` and `RawMany` each sit
/// between two single-row variants.
const VARIANTS: [Variant; 8] = [
    Variant::RawEachCall,
    Variant::Library,
    Variant::LibraryMany,
    Variant::Minimal,
    Variant::Raw,
    Variant::RawMany,
    Variant::LibraryNotify,
    Variant::OrderOnly,
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
    let notifying = db.notifying_store();
    let store = match variant {
        Variant::LibraryNotify => notifying.as_ref().unwrap_or(db.store()),
        _ => db.store(),
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
                Variant::Library | Variant::LibraryNotify => {
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
                Variant::Minimal => {
                    B::insert_queued(tx, &payload(order)).await?;
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
    db.create_minimal_queue().await?;
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
    let [
        each_call,
        library,
        library_many,
        minimal,
        raw,
        raw_many,
        notifying,
        bare,
    ] = rates;
    let (library, raw, bare) = (median(&library), median(&raw), median(&bare));
    let (minimal, notifying) = (median(&minimal), median(&notifying));
    let each_call = median(&each_call);
    let (library_many, raw_many) = (median(&library_many), median(&raw_many));
    let mut figures = vec![
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
        Figure {
            backend: B::NAME,
            scenario: "order + enqueue vs order + a minimal queue table's insert".into(),
            unit: "commits/s",
            library,
            baseline: minimal,
            // A rate ratio: the library's commits/s over the minimal table's.
            ratio: library / minimal,
            higher_is_better: true,
            runs: plan.runs,
            // A target on the servers only: SQLite's figure is shown
            // without one (see docs/benchmarks.md).
            target: (B::NAME != "sqlite").then_some(0.85),
            baseline_name: "INSERT into a 5-column table, primary key + pending index",
            cpu: None,
            plot: Plot::None,
        },
    ];
    if db.notifying_store().is_some() {
        figures.push(Figure {
            backend: B::NAME,
            scenario: "order + enqueue with NOTIFY vs order + a minimal queue table's insert"
                .into(),
            unit: "commits/s",
            library: notifying,
            baseline: minimal,
            ratio: notifying / minimal,
            higher_is_better: true,
            runs: plan.runs,
            target: Some(0.75),
            baseline_name: "INSERT into a 5-column table, primary key + pending index",
            cpu: None,
            plot: Plot::None,
        });
    }
    Ok(figures)
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
        let minimal = index(|v| matches!(v, Variant::Minimal));
        let notifying = index(|v| matches!(v, Variant::LibraryNotify));
        assert_eq!(after_many(library), after_many(raw));
        assert_eq!(after_many(minimal), after_many(notifying));
        // Of 16 blocks, one more for the minimal table: a ring of eight
        // cannot make the boundaries between blocks fall alike for all four.
        assert!(after_many(library).abs_diff(after_many(minimal)) <= 1);
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
                    n - 1..=n
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
