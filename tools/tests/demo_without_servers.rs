//! `cargo xtask demo` runs on SQLite by default and needs no server: with
//! every server URL pointing to a closed port it completes, and no order
//! loses its message. Asked for two brokers, it refuses before starting.

use std::{
    net::{Ipv4Addr, TcpListener, TcpStream},
    process::Command,
};

/// A local port nothing listens on: bound, then released. Another process
/// of the test run may take a released port at once; another is tried then.
fn closed_port() -> u16 {
    for _ in 0..20 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free port");
        let port = listener.local_addr().expect("its address").port();
        drop(listener);
        if TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            return port;
        }
    }
    panic!("20 released ports in a row still answered");
}

#[test]
fn the_demo_runs_on_sqlite_with_every_server_unreachable() {
    let port = closed_port();
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-demo"))
        .args(["--orders", "200"])
        .env(
            "OUTBOX_PG_URL",
            format!("postgres://postgres@127.0.0.1:{port}/test"),
        )
        .env(
            "OUTBOX_MYSQL_URL",
            format!("mysql://root@127.0.0.1:{port}/test"),
        )
        .env("OUTBOX_NATS_URL", format!("nats://127.0.0.1:{port}"))
        .env(
            "OUTBOX_AMQP_URL",
            format!("amqp://guest:guest@127.0.0.1:{port}/%2f"),
        )
        .env(
            "DATABASE_URL",
            format!("postgres://postgres@127.0.0.1:{port}/test"),
        )
        .output()
        .expect("run the demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the demo failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stderr.contains("on sqlite"), "not on SQLite:\n{stderr}");
    assert!(stdout.contains("| orders committed | 200 |"), "{stdout}");
    assert!(stdout.contains("| lost | 0 |"), "{stdout}");
}

#[test]
fn the_demo_refuses_two_brokers_at_once() {
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-demo"))
        .args(["--orders", "1", "--nats", "--rabbitmq"])
        .output()
        .expect("run the demo");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the demo ran:\n{stderr}");
    assert!(
        stderr.contains("--nats") && stderr.contains("--rabbitmq"),
        "the refusal does not name both flags:\n{stderr}"
    );
}
