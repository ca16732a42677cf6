//! A private three-node MariaDB Galera cluster: `mariadbd` processes with no
//! option files read, each with its own data directory, socket, pid file,
//! SQL port and Galera ports (group communication, IST, SST) on loopback.
//!
//! As root, the nodes run as the `mysql` user. The first node is installed
//! with `mariadb-install-db` and bootstraps the cluster
//! (`--wsrep-new-cluster`); the others start on empty data directories and
//! receive a full copy (SST over rsync) when they join. A node killed later
//! takes a full copy again (its position is unknown after a crash), then the
//! write sets committed meanwhile (IST).

use std::{collections::HashMap, os::unix::fs::chown, path::PathBuf, time::Duration};

use anyhow::Context as _;
use diesel::{QueryableByName, sql_types::Text};
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use rustix::process::Signal;
use tokio::process::Command;

use super::{free_port, is_root, system_user};
use crate::{process::Proc, run_dir::RunDir};

/// The Galera provider Debian's `galera-4` package installs.
pub(crate) const PROVIDER: &str = "/usr/lib/galera/libgalera_smm.so";

/// One node: where it keeps its files and which ports it listens on.
#[derive(Debug)]
struct Node {
    name: String,
    dir: PathBuf,
    port: u16,
    gcomm: u16,
    ist: u16,
    sst: u16,
    server: Option<Proc>,
}

/// The cluster.
#[derive(Debug)]
pub(crate) struct GaleraCluster {
    nodes: Vec<Node>,
}

/// A row of `SHOW GLOBAL STATUS`.
#[derive(QueryableByName)]
struct StatusRow {
    #[diesel(sql_type = Text, column_name = "Variable_name")]
    name: String,
    #[diesel(sql_type = Text, column_name = "Value")]
    value: String,
}

impl GaleraCluster {
    /// Installs and starts `size` nodes, one after the other, each waited for
    /// until it is synced with the ones before it.
    pub(crate) async fn start(run: &RunDir, size: usize) -> anyhow::Result<Self> {
        anyhow::ensure!(
            std::path::Path::new(PROVIDER).exists(),
            "the Galera scenario needs the Galera provider {PROVIDER}, which is not installed; \
             install it (Debian: apt-get install galera-4)"
        );
        anyhow::ensure!(
            which("rsync"),
            "the Galera scenario copies state to joining nodes with rsync, which is not \
             installed; install it (Debian: apt-get install rsync)"
        );
        // As root, the nodes run as `mysql`: rsync's daemon, which receives
        // a joiner's copy, would otherwise drop to `nobody` and could not
        // write the data directory.
        let user = if is_root() {
            Some(system_user("mysql")?)
        } else {
            None
        };
        let mut nodes = Vec::with_capacity(size);
        for i in 1..=size {
            let name = format!("node{i}");
            let dir = run.subdir(&format!("galera-{name}"))?;
            let data = dir.join("data");
            std::fs::create_dir(&data)?;
            std::fs::create_dir(dir.join("tmp"))?;
            if let Some((uid, gid)) = user {
                for path in [dir.clone(), data, dir.join("tmp")] {
                    chown(&path, Some(uid), Some(gid))
                        .context("handing a node's directories to mysql")?;
                }
            }
            nodes.push(Node {
                name,
                dir,
                port: free_port()?,
                gcomm: free_port()?,
                ist: free_port()?,
                sst: free_port()?,
                server: None,
            });
        }
        let mut cluster = Self { nodes };
        cluster.install(run).await?;
        for i in 0..size {
            cluster.launch(i, i == 0, run)?;
            cluster
                .wait_synced(i, i + 1, Duration::from_secs(120))
                .await?;
        }
        Ok(cluster)
    }

    async fn install(&self, run: &RunDir) -> anyhow::Result<()> {
        let first = &self.nodes[0];
        let out = std::fs::File::create(first.dir.join("mariadb-install-db.log"))?;
        let mut install = Command::new("mariadb-install-db");
        install.arg("--no-defaults");
        if is_root() {
            install.arg("--user=mysql");
        }
        let status = install
            .arg(format!("--datadir={}", first.dir.join("data").display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .stdout(out.try_clone()?)
            .stderr(out)
            .status()
            .await
            .context("running mariadb-install-db")?;
        anyhow::ensure!(
            status.success(),
            "mariadb-install-db failed ({status}); see {}/mariadb-install-db.log under {}",
            first.name,
            run.path().display()
        );
        Ok(())
    }

    /// Starts node `i`; `bootstrap` makes it form a new cluster alone.
    fn launch(&mut self, i: usize, bootstrap: bool, run: &RunDir) -> anyhow::Result<()> {
        let members = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.gcomm))
            .collect::<Vec<_>>()
            .join(",");
        let node = &mut self.nodes[i];
        let mut command = Command::new("mariadbd");
        command.arg("--no-defaults");
        if is_root() {
            command.arg("--user=mysql");
        }
        command.args([
            format!("--datadir={}", node.dir.join("data").display()),
            format!("--port={}", node.port),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--socket={}", node.dir.join("mariadb.sock").display()),
            format!("--pid-file={}", node.dir.join("mariadb.pid").display()),
            // Internal temporary tables of their own: nodes sharing `/tmp`
            // name them alike and remove each other's.
            format!("--tmpdir={}", node.dir.join("tmp").display()),
            "--max-connections=300".to_owned(),
            "--innodb-buffer-pool-size=64M".to_owned(),
            "--innodb-flush-log-at-trx-commit=2".to_owned(),
            // What Galera requires of every node.
            "--binlog-format=ROW".to_owned(),
            "--innodb-autoinc-lock-mode=2".to_owned(),
            "--default-storage-engine=InnoDB".to_owned(),
            "--wsrep-on=ON".to_owned(),
            format!("--wsrep-provider={PROVIDER}"),
            "--wsrep-cluster-name=outbox-chaos".to_owned(),
            format!("--wsrep-cluster-address=gcomm://{members}"),
            format!("--wsrep-node-name={}", node.name),
            "--wsrep-node-address=127.0.0.1".to_owned(),
            format!(
                "--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{};\
                 ist.recv_addr=127.0.0.1:{};gcache.size=256M",
                node.gcomm, node.ist
            ),
            "--wsrep-sst-method=rsync".to_owned(),
            format!("--wsrep-sst-receive-address=127.0.0.1:{}", node.sst),
            "--wsrep-slave-threads=2".to_owned(),
        ]);
        if bootstrap {
            command.arg("--wsrep-new-cluster");
        }
        node.server = Some(Proc::spawn(
            &format!("mariadbd {}", node.name),
            &mut command,
            &node.dir.join("mariadb.log"),
            Signal::KILL,
            run,
        )?);
        Ok(())
    }

    /// How many nodes the cluster has.
    pub(crate) fn size(&self) -> usize {
        self.nodes.len()
    }

    /// URL of database `name` on node `i`.
    pub(crate) fn url(&self, i: usize, name: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{name}", self.nodes[i].port)
    }

    /// URL of the administrative database on node `i`.
    pub(crate) fn admin_url(&self, i: usize) -> String {
        self.url(i, "mysql")
    }

    /// The node's `wsrep_*` status variables.
    pub(crate) async fn status(&self, i: usize) -> anyhow::Result<HashMap<String, String>> {
        let mut conn = AsyncMysqlConnection::establish(&self.admin_url(i)).await?;
        let rows: Vec<StatusRow> = diesel::sql_query("SHOW GLOBAL STATUS LIKE 'wsrep_%'")
            .load(&mut conn)
            .await?;
        Ok(rows.into_iter().map(|row| (row.name, row.value)).collect())
    }

    /// Waits until node `i` is ready for clients (`wsrep_ready=ON`), synced,
    /// and sees a cluster of `size` nodes; fails at once if it exited.
    pub(crate) async fn wait_synced(
        &mut self,
        i: usize,
        size: usize,
        limit: Duration,
    ) -> anyhow::Result<()> {
        let name = self.nodes[i].name.clone();
        let log = self.nodes[i].dir.join("mariadb.log");
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let exited = self.nodes[i]
                .server
                .as_mut()
                .is_none_or(|server| !server.running());
            anyhow::ensure!(
                !exited,
                "Galera {name} exited while joining; see {}",
                log.display()
            );
            let why = match self.status(i).await {
                Ok(status) => {
                    let get = |name: &str| status.get(name).map_or("?", String::as_str);
                    if get("wsrep_ready") == "ON"
                        && get("wsrep_local_state_comment") == "Synced"
                        && get("wsrep_cluster_size") == size.to_string()
                    {
                        return Ok(());
                    }
                    anyhow::anyhow!(
                        "wsrep_ready={}, state {}, cluster size {}",
                        get("wsrep_ready"),
                        get("wsrep_local_state_comment"),
                        get("wsrep_cluster_size"),
                    )
                }
                Err(error) => error,
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(why.context(format!(
                    "Galera {name} not synced in a cluster of {size} after {limit:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILLs node `i`.
    pub(crate) async fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        if let Some(mut server) = self.nodes[i].server.take() {
            server.kill().await?;
        }
        Ok(())
    }

    /// Starts node `i` again on its data, joining the running cluster.
    pub(crate) fn rejoin(&mut self, i: usize, run: &RunDir) -> anyhow::Result<()> {
        self.launch(i, false, run)
    }

    /// How node `i` caught up when it last joined, from its log: `IST` or
    /// `SST`.
    pub(crate) fn last_transfer(&self, i: usize) -> &'static str {
        let log =
            std::fs::read_to_string(self.nodes[i].dir.join("mariadb.log")).unwrap_or_default();
        let ist = log.rfind("IST received");
        let sst = log.rfind("SST received");
        match (ist, sst) {
            (Some(ist), Some(sst)) if ist > sst => "IST",
            (Some(_), None) => "IST",
            (_, Some(_)) => "SST",
            (None, None) => "unknown",
        }
    }
}

/// Whether `program` is on the `PATH`.
fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}
