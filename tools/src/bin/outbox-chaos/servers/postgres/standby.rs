//! Streaming replication between two private nodes: a standby made from a
//! primary with `pg_basebackup -R`, promoted, and the primary ended for good.

use anyhow::Context as _;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use rustix::process::Signal;

use super::PgServer;
use crate::{run_dir::RunDir, servers::DbServer as _};

impl PgServer {
    /// A streaming standby of this server: `pg_basebackup -R` into
    /// `<run>/<name>` (which writes `primary_conninfo` and `standby.signal`),
    /// started with `settings`; it answers read-only queries once it runs.
    pub(crate) async fn standby_of(
        &self,
        run: &RunDir,
        name: &str,
        settings: &[&str],
    ) -> anyhow::Result<Self> {
        let mut standby = Self::empty(run, name, settings)?;
        standby.bin.clone_from(&self.bin);
        let out = std::fs::File::create(run.path().join(format!("{name}-basebackup.log")))?;
        let status = standby
            .command("pg_basebackup")
            .args(["-D", &standby.data.display().to_string()])
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args(["-R", "-X", "stream", "--no-sync", "-c", "fast"])
            .stdout(out.try_clone()?)
            .stderr(out)
            .status()
            .await
            .with_context(|| format!("running pg_basebackup from {}", self.bin.display()))?;
        anyhow::ensure!(
            status.success(),
            "pg_basebackup failed ({status}); see {name}-basebackup.log in the run directory"
        );
        standby.launch(run).await?;
        Ok(standby)
    }

    /// Promotes this standby (`pg_promote()`, which waits until the server
    /// accepts writes).
    pub(crate) async fn promote(&self) -> anyhow::Result<()> {
        #[derive(diesel::QueryableByName)]
        struct Promoted {
            #[diesel(sql_type = diesel::sql_types::Bool)]
            promoted: bool,
        }
        let mut conn = AsyncPgConnection::establish(&self.admin_url()).await?;
        let done: Promoted = diesel::sql_query("SELECT pg_promote(true, 60) AS promoted")
            .get_result(&mut conn)
            .await
            .with_context(|| format!("promoting {}", self.name))?;
        anyhow::ensure!(done.promoted, "{} was not promoted within 60 s", self.name);
        Ok(())
    }

    /// The port it listens on.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Ends it the hard way (the postmaster's immediate shutdown) and does
    /// not start it again.
    pub(crate) async fn stop_immediate(&mut self) -> anyhow::Result<()> {
        if let Some(mut postmaster) = self.postmaster.take() {
            postmaster.end_with(Signal::QUIT).await?;
        }
        Ok(())
    }
}
