//! A private MariaDB server: `mariadb-install-db` and `mariadbd` with no
//! option files read, a data directory, socket and pid file under the run
//! directory, and a free port.

use std::{path::PathBuf, time::Duration};

use anyhow::Context as _;
use diesel_async::{AsyncConnection, AsyncMysqlConnection};
use rustix::process::Signal;
use tokio::process::Command;

use super::{DbServer, free_port, is_root, wait_until};
use crate::{process::Proc, run_dir::RunDir};

/// The private server.
#[derive(Debug)]
pub(crate) struct MariaDbServer {
    data: PathBuf,
    dir: PathBuf,
    port: u16,
    server: Option<Proc>,
}

impl MariaDbServer {
    async fn launch(&mut self, run: &RunDir) -> anyhow::Result<()> {
        let mut command = Command::new("mariadbd");
        command.arg("--no-defaults");
        if is_root() {
            command.arg("--user=root");
        }
        command.args([
            format!("--datadir={}", self.data.display()),
            format!("--port={}", self.port),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--socket={}", self.dir.join("mariadb.sock").display()),
            format!("--pid-file={}", self.dir.join("mariadb.pid").display()),
            // Its own directory for temporary tables: servers sharing one
            // name theirs alike and remove each other's files.
            format!("--tmpdir={}", self.dir.join("mariadb-tmp").display()),
            "--skip-log-bin".to_owned(),
            "--max-connections=300".to_owned(),
            "--innodb-buffer-pool-size=64M".to_owned(),
            // A crash here is the server process's, never the machine's:
            // what a commit wrote to the kernel survives it.
            "--innodb-flush-log-at-trx-commit=2".to_owned(),
        ]);
        self.server = Some(Proc::spawn(
            "mariadbd",
            &mut command,
            &self.dir.join("mariadb.log"),
            Signal::KILL,
            run,
        )?);
        let url = self.admin_url();
        wait_until("the private MariaDB", Duration::from_secs(60), || async {
            AsyncMysqlConnection::establish(&url).await?;
            Ok(())
        })
        .await
    }
}

impl DbServer for MariaDbServer {
    const CRASH: &'static str = "SIGKILL of mariadbd";

    async fn start(run: &RunDir) -> anyhow::Result<Self> {
        let dir = run.path().to_path_buf();
        let data = dir.join("mariadb");
        std::fs::create_dir(&data)?;
        std::fs::create_dir(dir.join("mariadb-tmp"))?;
        let out = std::fs::File::create(dir.join("mariadb-install-db.log"))?;
        let mut install = Command::new("mariadb-install-db");
        install.arg("--no-defaults");
        if is_root() {
            install.arg("--user=root");
        }
        let status = install
            .arg(format!("--datadir={}", data.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .stdout(out.try_clone()?)
            .stderr(out)
            .status()
            .await
            .context("running mariadb-install-db")?;
        anyhow::ensure!(
            status.success(),
            "mariadb-install-db failed ({status}); see mariadb-install-db.log in the run directory"
        );
        let mut server = Self {
            data,
            dir,
            port: free_port()?,
            server: None,
        };
        server.launch(run).await?;
        Ok(server)
    }

    fn url(&self, name: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{name}", self.port)
    }

    fn admin_url(&self) -> String {
        self.url("mysql")
    }

    async fn crash(&mut self) -> anyhow::Result<()> {
        if let Some(mut server) = self.server.take() {
            server.kill().await?;
        }
        Ok(())
    }

    async fn restart(&mut self, run: &RunDir) -> anyhow::Result<()> {
        self.crash().await?;
        self.launch(run).await
    }
}
