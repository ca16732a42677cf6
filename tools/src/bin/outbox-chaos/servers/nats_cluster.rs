//! A private three-node NATS cluster with JetStream: routed `nats-server`
//! processes, each with its own server name, client, cluster and monitoring
//! port, and store under the run directory.

use std::{path::PathBuf, time::Duration};

use anyhow::Context as _;
use rustix::process::Signal;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
    process::Command,
};

use super::{Exited, free_port, wait_until};
use crate::{process::Proc, run_dir::RunDir};

/// The cluster's name (`--cluster_name`).
const CLUSTER: &str = "chaos";

/// One node.
#[derive(Debug)]
struct Node {
    name: String,
    port: u16,
    cluster_port: u16,
    http_port: u16,
    store: PathBuf,
    log: PathBuf,
    server: Option<Proc>,
}

impl Node {
    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

/// The private cluster.
#[derive(Debug)]
pub(crate) struct NatsCluster {
    nodes: Vec<Node>,
}

impl NatsCluster {
    /// Starts `size` nodes routed to each other, and waits until each
    /// accepts clients with JetStream and the cluster has elected a
    /// JetStream meta leader whose peers are all current. A node that exits
    /// while starting (another process took one of its ports between our
    /// check and its listen) has the whole cluster started again on fresh
    /// ports, up to three times: every node's routes name every other's
    /// cluster port.
    pub(crate) async fn start(run: &RunDir, size: usize) -> anyhow::Result<Self> {
        let mut tries = 0;
        loop {
            tries += 1;
            match Self::start_once(run, size, tries).await {
                Err(error) if tries < 3 && error.is::<Exited>() => {
                    eprintln!("chaos: {error:#}; starting the NATS cluster again on other ports");
                }
                started => return started,
            }
        }
    }

    async fn start_once(run: &RunDir, size: usize, attempt: u32) -> anyhow::Result<Self> {
        let mut nodes = Vec::new();
        for n in 1..=size {
            let name = format!("n{n}");
            // A fresh store and log per attempt: nothing of a failed start
            // carries over.
            let dir = match attempt {
                1 => format!("nats-{name}"),
                _ => format!("nats-{name}-attempt{attempt}"),
            };
            nodes.push(Node {
                store: run.subdir(&dir)?,
                log: run.path().join(format!("{dir}.log")),
                name,
                port: free_port()?,
                cluster_port: free_port()?,
                http_port: free_port()?,
                server: None,
            });
        }
        let mut cluster = Self { nodes };
        for index in 0..cluster.nodes.len() {
            cluster.spawn(index, run)?;
        }
        for index in 0..cluster.nodes.len() {
            cluster.wait_ready(index).await?;
        }
        cluster.meta_leader(Duration::from_secs(30)).await?;
        Ok(cluster)
    }

    /// Every node's client URL, separated by commas (what the relays get).
    pub(crate) fn urls(&self) -> String {
        let urls: Vec<String> = self.nodes.iter().map(Node::url).collect();
        urls.join(",")
    }

    /// The server names, in order.
    pub(crate) fn names(&self) -> Vec<String> {
        self.nodes.iter().map(|node| node.name.clone()).collect()
    }

    fn index(&self, name: &str) -> anyhow::Result<usize> {
        self.nodes
            .iter()
            .position(|node| node.name == name)
            .with_context(|| format!("no NATS node named {name}"))
    }

    fn spawn(&mut self, index: usize, run: &RunDir) -> anyhow::Result<()> {
        let routes: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("nats://127.0.0.1:{}", node.cluster_port))
            .collect();
        let node = &mut self.nodes[index];
        let mut command = Command::new("nats-server");
        command
            .args(["-a", "127.0.0.1", "-p", &node.port.to_string()])
            .args(["-n", &node.name, "--cluster_name", CLUSTER])
            .args(["-m", &node.http_port.to_string()])
            .args(["-js", "-sd"])
            .arg(&node.store)
            .args([
                "--cluster",
                &format!("nats://127.0.0.1:{}", node.cluster_port),
                "--routes",
                &routes.join(","),
            ]);
        node.server = Some(Proc::spawn(
            &format!("nats-server {}", node.name),
            &mut command,
            &node.log,
            Signal::KILL,
            run,
        )?);
        Ok(())
    }

    async fn wait_ready(&mut self, index: usize) -> anyhow::Result<()> {
        let node = &mut self.nodes[index];
        let url = node.url();
        let what = format!("NATS node {}", node.name);
        let (log, server) = (&node.log, &mut node.server);
        wait_until(&what, Duration::from_secs(30), || {
            let exited = !server.as_mut().is_some_and(Proc::running);
            let (url, what) = (&url, &what);
            async move {
                if exited {
                    return Err(Exited::new(what, log).into());
                }
                let client = async_nats::connect(url).await?;
                anyhow::ensure!(client.server_info().jetstream, "JetStream is off");
                Ok(())
            }
        })
        .await
    }

    /// Waits until some running node names a JetStream meta leader and
    /// reports every other node a current peer of the meta group, at most
    /// `limit`, and returns the leader's name. A leader alone is not enough:
    /// until its peers have caught up, it cannot place a replicated stream,
    /// and a request to create one times out.
    pub(crate) async fn meta_leader(&self, limit: Duration) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            for node in self.nodes.iter().filter(|node| node.server.is_some()) {
                if let Ok(jsz) = self.jsz(&node.name, "").await
                    && let Some(name) = jsz["meta_cluster"]["leader"].as_str()
                    && name == node.name
                    && let Some(peers) = jsz["meta_cluster"]["replicas"].as_array()
                    && peers.len() + 1 == self.nodes.len()
                    && peers
                        .iter()
                        .all(|peer| peer["current"].as_bool() == Some(true))
                {
                    return Ok(name.to_owned());
                }
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "no node led a JetStream meta group with every other node current within {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Node `name`'s JetStream monitoring report (`/jsz?<query>`).
    pub(crate) async fn jsz(&self, name: &str, query: &str) -> anyhow::Result<serde_json::Value> {
        let node = &self.nodes[self.index(name)?];
        let mut socket = TcpStream::connect(("127.0.0.1", node.http_port)).await?;
        socket
            .write_all(format!("GET /jsz?{query} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .await?;
        let mut response = Vec::new();
        socket.read_to_end(&mut response).await?;
        let text = String::from_utf8_lossy(&response);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .context("an HTTP answer without a body")?;
        anyhow::ensure!(
            head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
            "/jsz on {name} answered {}",
            head.lines().next().unwrap_or_default()
        );
        Ok(serde_json::from_str(body)?)
    }

    /// Node `name`'s own view of `stream` (from `/jsz`), if it holds a replica.
    async fn stream_detail(
        &self,
        name: &str,
        stream: &str,
    ) -> anyhow::Result<Option<serde_json::Value>> {
        let jsz = self.jsz(name, "accounts=true&streams=true").await?;
        let accounts = jsz["account_details"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok(accounts
            .iter()
            .flat_map(|account| {
                account["stream_detail"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .find(|detail| detail["name"].as_str() == Some(stream)))
    }

    /// How many messages node `name` holds in its replica of `stream`
    /// (`None` while it has none).
    pub(crate) async fn replica_messages(
        &self,
        name: &str,
        stream: &str,
    ) -> anyhow::Result<Option<u64>> {
        Ok(self
            .stream_detail(name, stream)
            .await?
            .and_then(|detail| detail["state"]["messages"].as_u64()))
    }

    /// The running node that says it leads `stream`, if one does. Asked of
    /// the nodes' monitoring ports, so it answers at once during an
    /// election (when JetStream's own stream info requests time out).
    pub(crate) async fn stream_leader(&self, stream: &str) -> Option<String> {
        for node in self.nodes.iter().filter(|node| node.server.is_some()) {
            if let Ok(Some(detail)) = self.stream_detail(&node.name, stream).await
                && detail["cluster"]["leader"].as_str() == Some(node.name.as_str())
            {
                return Some(node.name.clone());
            }
        }
        None
    }

    /// SIGKILL of node `name`: gone until [`NatsCluster::restart`].
    pub(crate) async fn kill(&mut self, name: &str) -> anyhow::Result<()> {
        let index = self.index(name)?;
        if let Some(mut server) = self.nodes[index].server.take() {
            server.kill().await?;
        }
        Ok(())
    }

    /// Starts node `name` again on the same ports, name and store, and waits
    /// until it accepts clients with JetStream.
    pub(crate) async fn restart(&mut self, name: &str, run: &RunDir) -> anyhow::Result<()> {
        self.kill(name).await?;
        let index = self.index(name)?;
        self.spawn(index, run)?;
        self.wait_ready(index).await
    }
}
