//! [`PrivateServer`]: a server process of a test's own, on a free loopback
//! port with its data in a scratch folder, that the test may kill and start
//! again (the shared servers are never touched).

use std::{
    net::{Ipv4Addr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

/// A free loopback port: bound, then released.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// A server process started by a test, in its scratch folder (the
/// process's working directory), killed (by its pid) when dropped; its
/// scratch folder is removed then too.
#[derive(Debug)]
pub struct PrivateServer {
    program: String,
    args: Vec<String>,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl PrivateServer {
    /// Starts `program` with `args`, in which `{port}` and `{dir}` stand for
    /// the server's port and scratch folder, and waits until the port
    /// accepts connections.
    pub fn start(name: &str, program: &str, args: &[&str]) -> anyhow::Result<Self> {
        let port = free_port()?;
        let dir = std::env::temp_dir().join(format!("outbox-{name}-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let args = args
            .iter()
            .map(|arg| {
                arg.replace("{port}", &port.to_string())
                    .replace("{dir}", &dir.display().to_string())
            })
            .collect();
        let mut server = Self {
            program: program.to_owned(),
            args,
            port,
            dir,
            child: None,
        };
        server.restart()?;
        Ok(server)
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's scratch folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kills the server with SIGKILL and waits for it to end.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().context("waiting for the killed server")?;
        }
        Ok(())
    }

    /// Starts the server again (after [`kill`](Self::kill)) on the same
    /// port and folder, and waits until it accepts connections.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill()?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", self.program))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_err() {
            if Instant::now() > deadline {
                bail!(
                    "{} did not listen on port {} within 30 s",
                    self.program,
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.kill().ok();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}
