//! How busy the machine's processors were between two readings of
//! `/proc/stat` (Linux), every process on it together. Where the database
//! runs on the same machine as the soak's producers and relays, a sample
//! whose processors were nearly always busy measures what the machine has
//! left, not what the outbox costs.

/// The processors' time counters at one moment, every core together.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct CpuTimes {
    busy: u64,
    total: u64,
}

impl CpuTimes {
    /// The counters now; `None` where `/proc/stat` cannot be read (not
    /// Linux).
    pub(crate) fn now() -> Option<Self> {
        parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The share of the time since `earlier` that the processors were busy,
    /// in percent; `None` when no time passed between the two. The kernel
    /// may count I/O wait backwards, so the share is held to 100%.
    pub(crate) fn busy_since(self, earlier: Self) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total)?;
        let busy = self.busy.checked_sub(earlier.busy)?;
        (total > 0).then(|| (busy as f64 / total as f64 * 100.0).min(100.0))
    }
}

/// The busy share of the time from `earlier` to `later`, where both were read.
pub(crate) fn busy_between(earlier: Option<CpuTimes>, later: Option<CpuTimes>) -> Option<f64> {
    later?.busy_since(earlier?)
}

/// The `cpu` line of `/proc/stat`: user, nice, system, idle, iowait, irq,
/// softirq and steal time (guest time is counted in user and nice already).
/// Waiting for I/O counts as idle: the processor could have run something
/// else.
fn parse(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().find(|line| line.starts_with("cpu "))?;
    let fields = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|field| field.parse::<u64>().ok())
        .collect::<Option<Vec<u64>>>()?;
    let [user, nice, system, idle, iowait, irq, softirq, steal] = fields[..] else {
        return None;
    };
    let idle = idle.checked_add(iowait)?;
    let busy = [user, nice, system, irq, softirq, steal]
        .into_iter()
        .try_fold(0_u64, u64::checked_add)?;
    Some(CpuTimes {
        busy,
        total: busy.checked_add(idle)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_share_leaves_out_idle_and_io_wait() {
        // Guest time (the last two fields) is inside user and nice already.
        let before = parse("cpu  100 0 50 800 50 0 0 0 30 0\ncpu0 50 0 25 400 25 0 0 0 15 0\n");
        let after = parse("cpu  160 0 70 900 70 5 5 0 90 7\n");
        // Busy 150 -> 240 (+90), idle with I/O wait 850 -> 970 (+120).
        let share = busy_between(before, after).expect("both read");
        assert!((share - 90.0 / 210.0 * 100.0).abs() < 1e-9, "{share}");
    }

    #[test]
    fn unreadable_or_unmoved_counters_give_no_share() {
        assert_eq!(parse("cpu  1 2 3\n"), None, "too few fields");
        assert_eq!(parse("intr 1 2 3 4 5 6 7 8\n"), None, "no cpu line");
        let same = parse("cpu  1 2 3 4 5 6 7 8 0 0\n");
        assert_eq!(busy_between(same, same), None, "no time passed");
        assert_eq!(busy_between(None, same), None);
    }

    #[test]
    fn io_wait_counted_backwards_leaves_the_share_at_most_100() {
        let before = parse("cpu  100 0 0 100 50 0 0 0 0 0\n");
        let after = parse("cpu  200 0 0 100 40 0 0 0 0 0\n");
        assert_eq!(busy_between(before, after), Some(100.0));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn linux_reads_its_counters() {
        assert!(CpuTimes::now().is_some());
    }
}
