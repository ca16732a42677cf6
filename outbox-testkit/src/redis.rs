//! Redis for tests: a key prefix of its own per test, [`TestRedis`].

use anyhow::Context as _;
use redis::aio::MultiplexedConnection;

use crate::url;

/// Environment variable naming the Redis tests use.
pub const URL_VAR: &str = "OUTBOX_REDIS_URL";
/// The server used when [`URL_VAR`] is unset.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
/// How to start the local server when it is not running.
pub const START_HINT: &str =
    "start it with: redis-server --bind 127.0.0.1 --port 6379 --daemonize yes";

/// The test server's URL ([`URL_VAR`], or [`DEFAULT_URL`]).
pub fn server_url() -> String {
    url::from_env(URL_VAR, DEFAULT_URL)
}

/// A connection to the Redis at `address`, or an error naming it and how
/// to start the shared one.
pub async fn connect_to(address: &str) -> anyhow::Result<MultiplexedConnection> {
    let client = redis::Client::open(address).with_context(|| format!("Redis URL {address}"))?;
    client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("Redis at {address} ({URL_VAR}) is unreachable; {START_HINT}"))
}

/// One stream entry as a test reads it back: its id, and its fields in
/// order, names and values as bytes (an entry may hold any bytes).
pub type Entry = (String, Vec<(Vec<u8>, Vec<u8>)>);

/// The keys of one test: every name it hands out starts with its own
/// prefix; they are deleted when it is dropped, kept when the test panics.
#[derive(Debug)]
pub struct TestRedis {
    prefix: String,
    url: String,
}

impl TestRedis {
    /// A prefix for `test`, on the shared server (checked to answer).
    pub async fn create(test: &str) -> anyhow::Result<Self> {
        Self::on(test, &server_url()).await
    }

    /// A prefix for `test` on the Redis at `url` (a private server).
    pub async fn on(test: &str, url: &str) -> anyhow::Result<Self> {
        let mut connection = connect_to(url).await?;
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
            .with_context(|| format!("Redis at {url} does not answer PING"))?;
        Ok(Self {
            prefix: url::database_name(test),
            url: url.to_owned(),
        })
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A name for this test's `what` (a stream, a queue): `<prefix>:<what>`.
    pub fn name(&self, what: &str) -> String {
        format!("{}:{what}", self.prefix)
    }

    /// A new connection to the server.
    pub async fn connection(&self) -> anyhow::Result<MultiplexedConnection> {
        connect_to(&self.url).await
    }

    /// The number of entries in `stream`.
    pub async fn stream_len(&self, stream: &str) -> anyhow::Result<usize> {
        let mut connection = self.connection().await?;
        Ok(redis::cmd("XLEN")
            .arg(stream)
            .query_async(&mut connection)
            .await?)
    }

    /// Every entry of `stream`, oldest first: its id and its fields in
    /// order, values as bytes.
    pub async fn entries(&self, stream: &str) -> anyhow::Result<Vec<Entry>> {
        let mut connection = self.connection().await?;
        let entries: Vec<Entry> = redis::cmd("XRANGE")
            .arg(stream)
            .arg("-")
            .arg("+")
            .query_async(&mut connection)
            .await?;
        Ok(entries)
    }

    /// Adds an entry with `fields` (names and values as bytes, any bytes)
    /// to `stream`, as another program would.
    pub async fn add_raw(&self, stream: &str, fields: &[(&[u8], &[u8])]) -> anyhow::Result<String> {
        let mut connection = self.connection().await?;
        let mut add = redis::cmd("XADD");
        add.arg(stream).arg("*");
        for (name, value) in fields {
            add.arg(*name).arg(*value);
        }
        Ok(add.query_async(&mut connection).await?)
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let pattern = format!("*{}*", self.prefix);
        let Ok(client) = redis::Client::open(self.url.as_str()) else {
            return;
        };
        let Ok(mut connection) = client.get_connection() else {
            return;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(&pattern)
            .query(&mut connection)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _ = redis::cmd("DEL").arg(keys).query::<i64>(&mut connection);
        }
    }
}
