//! The services the tests talk to: each one's URL, how to tell that it
//! answers, and the command that starts it on this kind of machine.
//!
//! `cargo xtask test` checks each one, starts a local one that does not
//! answer, and waits until it does; a service that still does not answer
//! fails the command with its URL and start command, before any test runs.

use std::{
    io::{Read as _, Write as _},
    net::{TcpStream, ToSocketAddrs as _},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

/// How a service proves it answers, beyond accepting a connection.
#[derive(Debug, Clone, Copy)]
enum Probe {
    /// PostgreSQL: an SSLRequest is answered with `S` or `N`.
    Postgres,
    /// MySQL/MariaDB: the server greets first, protocol version 10.
    Mysql,
    /// NATS: the server greets with `INFO {...}`, here with JetStream on.
    NatsJetStream,
    /// RabbitMQ: the AMQP 0-9-1 protocol header is answered with a method
    /// frame (`connection.start`).
    Amqp,
    /// Redis: `PING` is answered with `+PONG`.
    Redis,
}

/// One service of the test suite.
#[derive(Debug)]
struct Service {
    name: &'static str,
    env: &'static str,
    default_url: &'static str,
    default_port: u16,
    probe: Probe,
    /// The command (program and arguments) that starts it here.
    start: &'static [&'static str],
}

const SERVICES: [Service; 5] = [
    Service {
        name: "PostgreSQL",
        env: "OUTBOX_PG_URL",
        default_url: "postgres://postgres@127.0.0.1:5432/test",
        default_port: 5432,
        probe: Probe::Postgres,
        start: &[
            "sh",
            "-c",
            "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
        ],
    },
    Service {
        name: "MariaDB",
        env: "OUTBOX_MYSQL_URL",
        default_url: "mysql://root@127.0.0.1:3306/test",
        default_port: 3306,
        probe: Probe::Mysql,
        start: &[
            "start-stop-daemon",
            "--start",
            "--oknodo",
            "--background",
            "--exec",
            "/usr/sbin/mariadbd",
        ],
    },
    Service {
        name: "NATS with JetStream",
        env: "OUTBOX_NATS_URL",
        default_url: "nats://127.0.0.1:4222",
        default_port: 4222,
        probe: Probe::NatsJetStream,
        start: &[
            "start-stop-daemon",
            "--start",
            "--oknodo",
            "--background",
            "--exec",
            "/usr/sbin/nats-server",
            "--",
            "-a",
            "127.0.0.1",
            "-p",
            "4222",
            "-js",
            "-sd",
            "/var/lib/nats-server",
        ],
    },
    Service {
        name: "RabbitMQ",
        env: "OUTBOX_AMQP_URL",
        default_url: "amqp://guest:guest@127.0.0.1:5672/%2f",
        default_port: 5672,
        probe: Probe::Amqp,
        start: &["rabbitmq-server", "-detached"],
    },
    Service {
        name: "Redis",
        env: "OUTBOX_REDIS_URL",
        default_url: "redis://127.0.0.1:6379",
        default_port: 6379,
        probe: Probe::Redis,
        start: &[
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            "6379",
            "--daemonize",
            "yes",
        ],
    },
];

/// How long a started service gets to answer.
const START_WAIT: Duration = Duration::from_secs(60);

/// Checks every service, starting the local ones that do not answer.
pub(crate) fn ensure_all() -> anyhow::Result<()> {
    for service in &SERVICES {
        service.ensure()?;
    }
    Ok(())
}

impl Service {
    fn url(&self) -> String {
        std::env::var(self.env).unwrap_or_else(|_| self.default_url.to_owned())
    }

    fn ensure(&self) -> anyhow::Result<()> {
        let url = self.url();
        let (host, port) = host_port(&url, self.default_port)?;
        if self.answers(&host, port) {
            eprintln!("xtask: {} answers at {host}:{port}", self.name);
            return Ok(());
        }
        let start = self.start.join(" ");
        if !matches!(host.as_str(), "127.0.0.1" | "localhost" | "::1") {
            bail!(
                "{} does not answer at {host}:{port} ({}); it is not local, so it is not started here",
                self.name,
                self.env
            );
        }
        eprintln!(
            "xtask: {} does not answer at {host}:{port}; starting it: {start}",
            self.name
        );
        let status = Command::new(self.start[0])
            .args(&self.start[1..])
            .status()
            .with_context(|| format!("running `{start}`"))?;
        if !status.success() {
            eprintln!("xtask: `{start}` exited with {status}; waiting for the service anyway");
        }
        let deadline = Instant::now() + START_WAIT;
        while Instant::now() < deadline {
            if self.answers(&host, port) {
                eprintln!("xtask: {} answers at {host}:{port}", self.name);
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        bail!(
            "{} does not answer at {host}:{port} ({} = {url}) within {START_WAIT:?} of `{start}`",
            self.name,
            self.env
        )
    }

    fn answers(&self, host: &str, port: u16) -> bool {
        probe(self.probe, host, port).unwrap_or(false)
    }
}

/// Whether the server at `host:port` answers as `probe` expects.
fn probe(probe: Probe, host: &str, port: u16) -> std::io::Result<bool> {
    let timeout = Duration::from_secs(2);
    let address = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("no address"))?;
    let mut stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    let mut reply = [0u8; 512];
    Ok(match probe {
        Probe::Postgres => {
            // Length 8, then the SSLRequest code 80877103.
            stream.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])?;
            let n = stream.read(&mut reply[..1])?;
            n == 1 && matches!(reply[0], b'S' | b'N')
        }
        Probe::Mysql => {
            // A 4-byte packet header, then the protocol version.
            let n = stream.read(&mut reply)?;
            n > 4 && reply[4] == 10
        }
        Probe::NatsJetStream => {
            let n = stream.read(&mut reply)?;
            let info = String::from_utf8_lossy(&reply[..n]);
            info.starts_with("INFO") && info.contains("\"jetstream\":true")
        }
        Probe::Amqp => {
            stream.write_all(b"AMQP\x00\x00\x09\x01")?;
            let n = stream.read(&mut reply)?;
            // Frame type 1 (method), on channel 0.
            n > 3 && reply[0] == 1 && reply[1] == 0 && reply[2] == 0
        }
        Probe::Redis => {
            stream.write_all(b"PING\r\n")?;
            let n = stream.read(&mut reply)?;
            reply[..n].starts_with(b"+PONG")
        }
    })
}

/// The host and port of a URL such as `scheme://user:pass@host:port/path`.
fn host_port(url: &str, default_port: u16) -> anyhow::Result<(String, u16)> {
    let rest = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split(['/', '?'])
        .next()
        .unwrap_or_default();
    let authority = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
            let port = port
                .parse()
                .with_context(|| format!("the port of `{authority}`"))?;
            Ok((host.trim_matches(['[', ']']).to_owned(), port))
        }
        _ => Ok((authority.trim_matches(['[', ']']).to_owned(), default_port)),
    }
}

#[cfg(test)]
mod tests {
    use super::host_port;

    #[test]
    fn urls_give_their_host_and_port() -> anyhow::Result<()> {
        assert_eq!(
            host_port("postgres://postgres@127.0.0.1:5432/test", 1)?,
            ("127.0.0.1".to_owned(), 5432)
        );
        assert_eq!(
            host_port("mysql://root:secret@db.example:3307/test?x=1", 1)?,
            ("db.example".to_owned(), 3307)
        );
        assert_eq!(
            host_port("nats://localhost", 4222)?,
            ("localhost".to_owned(), 4222)
        );
        assert_eq!(
            host_port("amqp://[::1]:5672/%2f", 1)?,
            ("::1".to_owned(), 5672)
        );
        Ok(())
    }
}
