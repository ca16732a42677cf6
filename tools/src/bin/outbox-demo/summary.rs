//! The demo's closing summary, read back from the database (and, with a
//! broker, from the broker and the shipping service).

use std::time::Duration;

use diesel_outbox_core::Maintenance;

use crate::{
    broker::Carried,
    raw::Raw,
    shipping::ShippingSummary,
    stats::{ms, percentile},
};

/// What the demo did, counted from the tables.
pub(crate) struct Summary {
    pub(crate) orders: i64,
    delivered: i64,
    duplicates: i64,
    retried: i64,
    pub(crate) lost: i64,
    placing: Duration,
    total: Duration,
    latencies: Vec<Duration>,
    dropped_by_broker: i64,
    carried: Option<Carried>,
    shipping: Option<ShippingSummary>,
}

impl Summary {
    pub(crate) async fn collect<B: Raw>(
        db: &B,
        placing: Duration,
        total: Duration,
    ) -> anyhow::Result<Self> {
        let orders = db.count("orders").await?;
        let delivered = db
            .count("(SELECT DISTINCT task_id FROM deliveries) AS d")
            .await?;
        let rows = db.count("deliveries").await?;
        let retried = db.count("outbox_tasks WHERE attempts > 1").await?;
        let dropped_by_broker = db.count("deliveries WHERE duplicate = 1").await?;
        let stats = db.store().stats().await?;
        let lost = orders - i64::try_from(stats.succeeded)?.min(delivered);
        let latencies = db
            .first_delivery_latencies()
            .await?
            .into_iter()
            .map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0)))
            .collect();
        Ok(Self {
            orders,
            delivered,
            duplicates: rows - delivered,
            retried,
            lost,
            placing,
            total,
            latencies,
            dropped_by_broker,
            carried: None,
            shipping: None,
        })
    }

    /// Adds what the broker carried and what the shipping service applied.
    pub(crate) fn with_broker(mut self, carried: Carried, shipping: ShippingSummary) -> Self {
        self.carried = Some(carried);
        self.shipping = Some(shipping);
        self
    }

    /// Fails unless the shipping service (when it ran) shipped every order
    /// exactly once.
    pub(crate) fn check_shipping(&self) -> anyhow::Result<()> {
        if let Some(shipping) = &self.shipping {
            anyhow::ensure!(
                shipping.shipped == self.orders,
                "the shipping service lost {} orders",
                self.orders - shipping.shipped
            );
            anyhow::ensure!(
                shipping.once == shipping.shipped,
                "the shipping service applied {} orders more than once",
                shipping.shipped - shipping.once
            );
        }
        Ok(())
    }

    #[allow(clippy::print_stdout)] // the summary is the command's output
    pub(crate) fn print(&self) {
        let rate = |n: i64, d: Duration| whole(n as f64 / d.as_secs_f64().max(f64::EPSILON));
        println!();
        println!("| measure | value |");
        println!("|---|---|");
        println!("| orders committed | {} |", self.orders);
        println!(
            "| messages delivered (distinct tasks) | {} |",
            self.delivered
        );
        println!(
            "| duplicate deliveries (after the kill) | {} |",
            self.duplicates
        );
        println!("| tasks that needed a retry | {} |", self.retried);
        println!("| lost | {} |", self.lost);
        println!(
            "| orders placed per second | {} |",
            rate(self.orders, self.placing)
        );
        println!(
            "| messages delivered per second, from the first order to the last delivery | {} |",
            rate(self.delivered, self.total)
        );
        println!(
            "| commit to first delivery: p50 / p99 / max | {:.1} / {:.1} / {:.1} ms |",
            ms(percentile(&self.latencies, 0.5)),
            ms(percentile(&self.latencies, 0.99)),
            ms(percentile(&self.latencies, 1.0))
        );
        if let Some(carried) = &self.carried {
            println!(
                "| {} messages (distinct task ids) | {} ({}) |",
                carried.broker, carried.messages, carried.ids
            );
            if carried.deduplicates {
                println!(
                    "| replays {} dropped as duplicates | {} |",
                    carried.broker, self.dropped_by_broker
                );
            }
        }
        if let Some(shipping) = &self.shipping {
            println!(
                "| shipping: orders applied once | {} of {} |",
                shipping.once, self.orders
            );
            println!(
                "| shipping: duplicates suppressed by the inbox | {} |",
                shipping.duplicates
            );
            println!(
                "| shipping: orders applied more than once | {} |",
                shipping.shipped - shipping.once
            );
            println!("| shipping: lost | {} |", self.orders - shipping.shipped);
        }
        println!();
        let lease = super::settings::LEASE;
        let past_lease = self.latencies.iter().filter(|l| **l >= lease).count();
        if past_lease > 0 {
            println!(
                "{past_lease} tasks waited at least the lease ({} s) for their first delivery: \
                 the killed relay had claimed them, and a claimed task stays leased until its \
                 lease lapses; only then may another relay take it.",
                lease.as_secs()
            );
        }
        println!(
            "The rest of the spread is queueing while orders are placed faster than they are \
             delivered, and the backoff (up to 1 s) of retries after injected failures."
        );
    }
}

/// `x` rounded to a whole number, with thousands separated by commas:
/// `92859.13` is `92,859`.
pub(crate) fn whole(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::whole;

    #[test]
    fn whole_numbers_with_thousands_separated() {
        assert_eq!(whole(92_859.130_8), "92,859");
        assert_eq!(whole(999.6), "1,000");
        assert_eq!(whole(76.0), "76");
        assert_eq!(whole(1_234_567.0), "1,234,567");
        assert_eq!(whole(0.2), "0");
    }
}
