//! JetStream for tests: a stream of its own per test, [`TestStream`].

use anyhow::Context as _;
use async_nats::jetstream::{self, message::StreamMessage, stream};

use crate::url;

/// Environment variable naming the NATS server tests use.
pub const URL_VAR: &str = "OUTBOX_NATS_URL";
/// The server used when [`URL_VAR`] is unset.
pub const DEFAULT_URL: &str = "nats://127.0.0.1:4222";
/// How to start the local server when it is not running.
pub const START_HINT: &str = "start it with: start-stop-daemon --start --oknodo --background \
    --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server";

/// A JetStream context on the test server, or an error naming the URL and
/// how to start the server.
pub async fn jetstream() -> anyhow::Result<jetstream::Context> {
    let address = url::from_env(URL_VAR, DEFAULT_URL);
    let client = async_nats::connect(&address)
        .await
        .with_context(|| format!("NATS at {address} ({URL_VAR}) is unreachable; {START_HINT}"))?;
    Ok(jetstream::new(client))
}

/// How many times [`TestStream::create_now`] asks for a stream the server
/// failed to set up files for.
pub const STORE_ATTEMPTS: u64 = 3;

/// Whether the server answered a create with the fixed sentence it gives for
/// a stream whose files it could not set up.
fn is_store_failure(error: &jetstream::context::CreateStreamError) -> bool {
    match error.kind() {
        jetstream::context::CreateStreamErrorKind::JetStream(error) => {
            error.error_code() == jetstream::ErrorCode::STREAM_CREATE
                && error
                    .to_string()
                    .contains("error creating store for stream")
        }
        _ => false,
    }
}

/// A stream and a subject space of its own for one test: subjects
/// `<prefix>.>`, deleted when dropped, kept when the test panics.
#[derive(Debug)]
pub struct TestStream {
    name: String,
    prefix: String,
    jetstream: jetstream::Context,
}

impl TestStream {
    /// Names a stream for `test` without creating it (see [`TestStream::create_now`]).
    pub async fn planned(test: &str) -> anyhow::Result<Self> {
        let unique = url::database_name(test);
        Ok(Self {
            name: unique.to_uppercase(),
            prefix: unique,
            jetstream: jetstream().await?,
        })
    }

    /// Creates a stream for `test` capturing `<prefix>.>`.
    pub async fn create(test: &str) -> anyhow::Result<Self> {
        let stream = Self::planned(test).await?;
        stream.create_now().await?;
        Ok(stream)
    }

    /// Creates the planned stream, with JetStream's default duplicate window.
    ///
    /// The server answers some failures to set up a stream's files only with
    /// the fixed sentence "error creating store for stream" (code 10049) and
    /// writes the cause to its own log. A test suite once met it for a new,
    /// unique name while other tests created and deleted their streams, so
    /// that answer is tried again, [`STORE_ATTEMPTS`] times in all, naming
    /// each failure; any other error fails at once.
    pub async fn create_now(&self) -> anyhow::Result<()> {
        let config = stream::Config {
            name: self.name.clone(),
            subjects: vec![format!("{}.>", self.prefix)],
            ..Default::default()
        };
        let mut attempt = 1;
        loop {
            match self.jetstream.create_stream(config.clone()).await {
                Ok(_) => return Ok(()),
                Err(error) if attempt < STORE_ATTEMPTS && is_store_failure(&error) => {
                    eprintln!(
                        "creating stream {} (attempt {attempt} of {STORE_ATTEMPTS}): {error}; \
                         the server's log names the cause",
                        self.name
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(100 * attempt)).await;
                    attempt += 1;
                }
                Err(error) => {
                    return Err(error).with_context(|| format!("creating stream {}", self.name));
                }
            }
        }
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The first subject token reserved for this test.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The JetStream context used.
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    /// Every message the stream holds, in sequence order.
    pub async fn messages(&self) -> anyhow::Result<Vec<StreamMessage>> {
        let mut stream = self.jetstream.get_stream(&self.name).await?;
        let state = stream.info().await?.state.clone();
        let mut messages = Vec::new();
        for sequence in state.first_sequence..=state.last_sequence {
            if state.messages == 0 {
                break;
            }
            messages.push(stream.get_raw_message(sequence).await?);
        }
        Ok(messages)
    }

    /// How many messages the stream holds.
    pub async fn count(&self) -> anyhow::Result<u64> {
        let mut stream = self.jetstream.get_stream(&self.name).await?;
        Ok(stream.info().await?.state.messages)
    }
}

impl Drop for TestStream {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test failed: kept stream {}", self.name);
            return;
        }
        let (jetstream, name) = (self.jetstream.clone(), self.name.clone());
        crate::drop_database::run(async move {
            // A planned stream may never have been created.
            let _ = jetstream.delete_stream(&name).await;
            Ok(())
        });
    }
}

/// A NATS server with JetStream of a test's own (see
/// [`PrivateServer`](crate::private_server::PrivateServer)), to kill and
/// start again; its URL is `nats://127.0.0.1:<port>`.
pub fn private_server(name: &str) -> anyhow::Result<crate::private_server::PrivateServer> {
    crate::private_server::PrivateServer::start(
        name,
        "nats-server",
        &["-a", "127.0.0.1", "-p", "{port}", "-js", "-sd", "{dir}"],
    )
}
