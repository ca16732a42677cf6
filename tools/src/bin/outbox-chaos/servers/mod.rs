//! Private server instances, started for this run and never shared: a
//! PostgreSQL cluster, a MariaDB server (or a Galera cluster of them), a
//! NATS server, a RabbitMQ broker, a Redis and a Kafka-protocol broker
//! (tansu), each on a free port with its data under the run directory.

#[cfg(feature = "mysql")]
pub(crate) mod galera;
#[cfg(feature = "kafka")]
pub(crate) mod kafka;
#[cfg(feature = "mysql")]
pub(crate) mod mariadb;
#[cfg(feature = "nats")]
pub(crate) mod nats;
#[cfg(feature = "nats")]
pub(crate) mod nats_cluster;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "rabbitmq")]
pub(crate) mod rabbitmq;
#[cfg(feature = "redis")]
pub(crate) mod redis;

use std::{
    collections::BTreeSet,
    future::Future,
    net::TcpListener,
    sync::{Mutex, PoisonError},
    time::Duration,
};

use anyhow::Context as _;

use super::run_dir::RunDir;

/// A database server the scenarios may crash and start again.
pub(crate) trait DbServer: Send + Sync + Sized + 'static {
    /// Initialises a data directory under `run` and starts the server.
    fn start(run: &RunDir) -> impl Future<Output = anyhow::Result<Self>> + Send;

    /// URL of a database `name` on this server (created or not).
    fn url(&self, name: &str) -> String;

    /// URL of the administrative database that always exists.
    fn admin_url(&self) -> String;

    /// Ends the server the hard way: PostgreSQL's immediate shutdown (no
    /// checkpoint, crash recovery at the next start), SIGKILL of `mariadbd`.
    fn crash(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Starts the server again on the same data and port, and waits until it
    /// accepts connections.
    fn restart(&mut self, run: &RunDir) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// What the crash does, for the report.
    const CRASH: &'static str;
}

/// Ports [`free_port`] has handed out in this process.
static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A TCP port on 127.0.0.1 that nothing listens on right now, and that this
/// process has not handed out before: the kernel may offer a just-released
/// port again, and two servers of one run told the same port would leave
/// the second unable to listen.
pub(crate) fn free_port() -> anyhow::Result<u16> {
    let mut given = GIVEN.lock().unwrap_or_else(PoisonError::into_inner);
    for _ in 0..100 {
        let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
        let port = listener.local_addr()?.port();
        if given.insert(port) {
            return Ok(port);
        }
    }
    anyhow::bail!("no port this run has not handed out already, after 100 tries")
}

/// What a readiness probe answers when the server's process has ended:
/// [`wait_until`] stops at once instead of polling a dead server until its
/// limit.
#[derive(Debug)]
pub(crate) struct Exited {
    /// The server.
    pub(crate) what: String,
    /// The last lines of its log.
    pub(crate) log_tail: String,
}

impl Exited {
    /// `what` exited; quotes the last five lines of `log`.
    pub(crate) fn new(what: &str, log: &std::path::Path) -> Self {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
        Self {
            what: what.to_owned(),
            log_tail: tail,
        }
    }
}

impl std::fmt::Display for Exited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} exited; the end of its log: {}",
            self.what, self.log_tail
        )
    }
}

impl std::error::Error for Exited {}

/// The longest one try of [`wait_until`] may take.
const PROBE_LIMIT: Duration = Duration::from_secs(5);

/// Polls `ready` every 20 ms until it succeeds, for at most `limit` or
/// until it answers [`Exited`]; the last error says why not. Each try gets
/// at most 5 s (and never more than what is left of `limit`): a probe whose
/// server accepted the connection but never answers is cut and tried again,
/// never waited on for ever.
pub(crate) async fn wait_until<F, Fut>(
    what: &str,
    limit: Duration,
    mut ready: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let error = match tokio::time::timeout(left.min(PROBE_LIMIT), ready()).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(error)) => error,
            Err(_) => anyhow::anyhow!("a probe of {what} got no answer within {PROBE_LIMIT:?}"),
        };
        if error.is::<Exited>() {
            return Err(error);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(error.context(format!("{what} not ready after {limit:?}")));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `(uid, gid)` of the system user `name`, from `/etc/passwd`.
pub(crate) fn system_user(name: &str) -> anyhow::Result<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").context("reading /etc/passwd")?;
    passwd
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&name) && fields.len() > 3)
                .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                .flatten()
        })
        .next()
        .with_context(|| format!("no system user {name}"))
}

/// Whether this process runs as root (servers refuse to).
pub(crate) fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_port_never_hands_out_a_port_twice() {
        let ports: Vec<u16> = (0..500).map(|_| free_port().unwrap()).collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
    }

    #[tokio::test]
    async fn wait_until_stops_at_once_when_the_server_exited() {
        let started = tokio::time::Instant::now();
        let error = wait_until("a server", Duration::from_secs(30), || async {
            Err(Exited {
                what: "a server".to_owned(),
                log_tail: "address already in use".to_owned(),
            }
            .into())
        })
        .await
        .unwrap_err();
        assert!(error.is::<Exited>());
        assert!(error.to_string().contains("address already in use"));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
