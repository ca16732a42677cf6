//! The dashboard in headless Chromium, and its refusal of forged POSTs.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, ChildStdout, Command, Stdio},
};

use diesel_outbox_core::{Maintenance as _, Status, Store as _, Task, TaskId};
use diesel_outbox_testkit::{TestBackend, conformance::support::KIND, postgres::PgTestDb};
use fantoccini::{ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;

use crate::support::{INJECTED, OUTBOX, seed};

/// A child process that is killed, by its pid, when dropped.
pub(crate) struct Process(pub(crate) Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads the child's stdout until a line contains `marker`; returns it.
fn line_with(stdout: ChildStdout, marker: &str) -> String {
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        let read = reader.read_line(&mut line).unwrap();
        assert!(read > 0, "the process ended before printing {marker:?}");
        if line.contains(marker) {
            return line.trim().to_owned();
        }
    }
}

/// `outbox serve` on a free loopback port; returns it and its base URL.
pub(crate) fn serve(database_url: &str) -> (Process, String) {
    serve_with(database_url, &[])
}

/// [`serve`] with more options.
pub(crate) fn serve_with(database_url: &str, options: &[&str]) -> (Process, String) {
    let mut child = Command::new(OUTBOX)
        .args(["serve", "--bind", "127.0.0.1:0"])
        .args(options)
        .env("DATABASE_URL", database_url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let process = Process(child);
    let line = line_with(stdout, "outbox dashboard on ");
    let url = line.rsplit(' ').next().unwrap().to_owned();
    (process, url)
}

/// Sends a raw HTTP/1.1 request to the dashboard; returns the status code
/// and the body.
pub(crate) fn http(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let authority = base.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = TcpStream::connect(authority).unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str(&format!("Host: {authority}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, response)
}

pub(crate) const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");

/// The token the front page's forms carry.
pub(crate) fn page_token(base: &str) -> String {
    let (status, page) = http(base, "GET", "/", &[], "");
    assert_eq!(status, 200, "{page}");
    let start = page.find("name=\"csrf\" value=\"").unwrap() + "name=\"csrf\" value=\"".len();
    page[start..start + 64].to_owned()
}

pub(crate) async fn failed_task(db: &PgTestDb) -> TaskId {
    let task = Task::new(KIND, 1, r#"{"order":42}"#);
    seed(db, vec![task], 1).await.unwrap()[0]
}

/// The id of the one failure group of `db`'s failed tasks whose class is
/// `class`.
pub(crate) async fn group_of(db: &PgTestDb, class: &str) -> String {
    diesel_outbox_core::failure_groups(db.store(), &diesel_outbox_core::TaskFilter::new())
        .await
        .unwrap()
        .into_iter()
        .find(|group| group.class == class)
        .unwrap_or_else(|| panic!("no group {class:?}"))
        .id
}

/// A failure group's discard: the front page lists the group, its link
/// leads to a page that says how many tasks it touches, and only the POST
/// with the page's token discards them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_group_is_discarded_after_its_confirmation() {
    let db = PgTestDb::create("cli_dashboard_groups").await.unwrap();
    let ids = crate::support::fail_with(&db, &["timeout after 5s", "timeout after 30s"])
        .await
        .unwrap();
    let group = group_of(&db, "timeout after #").await;
    let (_server, base) = serve(db.url());
    let (status, page) = http(&base, "GET", "/", &[], "");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&format!("id=\"group-{group}\"")), "{page}");
    assert!(
        page.contains(&format!("href=\"/groups/{group}/discard\"")),
        "{page}"
    );

    let path = format!("/groups/{group}/discard");
    let (status, confirm) = http(&base, "GET", &path, &[], "");
    assert_eq!(status, 200, "{confirm}");
    assert!(
        confirm.contains("discard <strong>2</strong> failed"),
        "{confirm}"
    );
    assert!(confirm.contains("cannot be undone"), "{confirm}");
    assert_eq!(
        db.store().stats().await.unwrap().failed,
        2,
        "a GET changes nothing"
    );

    let (status, _) = http(&base, "POST", &path, &[FORM], "");
    assert_eq!(status, 403, "no token");
    let token = page_token(&base);
    let start = confirm.find("name=\"tasks\" value=\"").unwrap() + "name=\"tasks\" value=\"".len();
    let confirmed = confirm[start..start + 16].to_owned();

    // A task failed into the group after the page was read: the confirmed
    // action is refused, nothing changes, and the page says so.
    let late = crate::support::fail_with(&db, &["timeout after 9s"])
        .await
        .unwrap()[0];
    let form = format!("csrf={token}&tasks={confirmed}");
    let (status, changed) = http(&base, "POST", &path, &[FORM], &form);
    assert_eq!(status, 409, "{changed}");
    assert!(changed.contains("it now holds 3 task(s)"), "{changed}");
    assert_eq!(db.store().stats().await.unwrap().failed, 3);
    db.store().discard(late).await.unwrap();

    let (status, _) = http(&base, "POST", &path, &[FORM], &form);
    assert_eq!(status, 303);
    for id in ids {
        assert_eq!(db.store().get(id).await.unwrap().status, Status::Discarded);
    }
    let (status, gone) = http(&base, "GET", &path, &[], "");
    assert_eq!(status, 404, "{gone}");
    assert!(gone.contains("No failure group"), "{gone}");
    let (status, _) = http(&base, "GET", &format!("/groups/{group}/explode"), &[], "");
    assert_eq!(status, 404);
}

/// A POST without the page's token is refused, and so is one with the
/// token from a foreign origin; the page's own form data goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_without_the_pages_token_is_refused() {
    let db = PgTestDb::create("cli_dashboard_csrf").await.unwrap();
    let id = failed_task(&db).await;
    let (_server, base) = serve(db.url());
    let path = format!("/tasks/{id}/requeue");

    let (status, body) = http(&base, "POST", &path, &[FORM], "");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("missing CSRF token"), "{body}");
    let (status, _) = http(&base, "POST", &path, &[], "");
    assert_eq!(status, 403, "no form at all");
    let (status, _) = http(
        &base,
        "POST",
        &path,
        &[FORM],
        &format!("csrf={}", "0".repeat(64)),
    );
    assert_eq!(status, 403, "a guessed token");
    let token = page_token(&base);
    let (status, _) = http(
        &base,
        "POST",
        &path,
        &[FORM, ("Origin", "http://evil.example")],
        &format!("csrf={token}"),
    );
    assert_eq!(status, 403, "the right token from another site");
    let (status, _) = http(&base, "GET", "/", &[("Host", "evil.example")], "");
    assert_eq!(status, 403, "a foreign Host name (DNS rebinding)");
    assert_eq!(
        db.store().get(id).await.unwrap().status,
        Status::Failed,
        "nothing changed"
    );

    let (status, response) = http(&base, "POST", &path, &[FORM], &format!("csrf={token}"));
    assert_eq!(status, 303, "{response}");
    assert_eq!(db.store().get(id).await.unwrap().status, Status::Available);
}

/// A task's page shows every field, its headers, its last error and its
/// payload pretty-printed, with the page's buttons; an unknown id is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_page_shows_it_whole() {
    let db = PgTestDb::create("cli_dashboard_detail").await.unwrap();
    let task = Task::new(KIND, 1, r#"{"order":42,"lines":[1,2]}"#)
        .ordering_key("customer-<7>")
        .header("traceparent", "00-abc-01");
    let id = seed(&db, vec![task], 1).await.unwrap()[0];
    let (_server, base) = serve(db.url());

    let (status, page) = http(&base, "GET", &format!("/tasks/{id}"), &[], "");
    assert_eq!(status, 200, "{page}");
    for expected in [
        "<th>status</th><td>failed</td>",
        "<th>attempts</th><td>1</td>",
        "<th>ordering key</th><td>customer-&lt;7&gt;</td>",
        "<th>traceparent</th><td>00-abc-01</td>",
        INJECTED,
        "Payload (json)",
        "  &quot;lines&quot;: [",
        &format!("id=\"task-requeue-{id}\""),
        &format!("id=\"task-discard-{id}\""),
        "content-security-policy: default-src 'none'",
    ] {
        assert!(page.contains(expected), "{expected:?} in {page}");
    }
    let (status, _) = http(&base, "GET", "/tasks/987654321", &[], "");
    assert_eq!(status, 404);
}

/// A database that fails after the dashboard started: the page gives the
/// whole reason, and what to run when the tables are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_database_is_explained_on_the_page() {
    let db = PgTestDb::create("cli_dashboard_failing").await.unwrap();
    let (_server, base) = serve(db.url());
    let (status, _) = http(&base, "GET", "/", &[], "");
    assert_eq!(status, 200);
    crate::support::outbox(db.url(), &["migrate", "--revert", "--yes"]).expect(0);
    let (status, page) = http(&base, "GET", "/", &[], "");
    assert_eq!(status, 500, "{page}");
    for expected in [
        "database error (other): relation &quot;outbox_tasks&quot; does not exist",
        "hint: the outbox&#39;s tables are not in this database: run `outbox migrate`",
    ] {
        assert!(page.contains(expected), "{expected:?} in {page}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_says_which_outbox_it_shows() {
    let db = PgTestDb::create("cli_dashboard_outbox").await.unwrap();
    let names = diesel_outbox_sql::Names::default()
        .with_table_prefix("billing_")
        .unwrap();
    let billing = db.another_outbox(&names).await.unwrap();
    let mut conn = db.connect().await.unwrap();
    let id =
        diesel_async::AsyncConnection::transaction::<_, anyhow::Error, _>(&mut conn, async |tx| {
            Ok(billing.enqueue(tx, Task::new(KIND, 1, "{}")).await?)
        })
        .await
        .unwrap();
    let link = format!("href=\"/tasks/{id}\"");
    let (_default, base) = serve(db.url());
    let (status, page) = http(&base, "GET", "/", &[], "");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<code>outbox_tasks</code>"), "{page}");
    assert!(
        !page.contains(&link),
        "the default outbox shows billing's task: {page}"
    );
    let (_billing, base) = serve_with(db.url(), &["--table-prefix", "billing_"]);
    let (status, page) = http(&base, "GET", "/", &[], "");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<code>billing_outbox_tasks</code>"), "{page}");
    assert!(page.contains(&link), "billing's task is not shown: {page}");

    let schema = diesel_outbox_sql::Names::default()
        .with_schema("crm")
        .unwrap();
    let crm = db.another_outbox(&schema).await.unwrap();
    let crm_id =
        diesel_async::AsyncConnection::transaction::<_, anyhow::Error, _>(&mut conn, async |tx| {
            // Two tasks: the second's id is in no other outbox of the
            // database (billing holds task 1, the default outbox none).
            crm.enqueue(tx, Task::new(KIND, 1, "{}")).await?;
            Ok(crm.enqueue(tx, Task::new(KIND, 1, "{}")).await?)
        })
        .await
        .unwrap();
    let (_crm, base) = serve_with(db.url(), &["--schema", "crm"]);
    let (status, page) = http(&base, "GET", "/", &[], "");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<code>crm.outbox_tasks</code>"), "{page}");
    assert!(
        page.contains(&format!("href=\"/tasks/{crm_id}\"")),
        "crm's task is not shown: {page}"
    );
}

/// Where screenshots go: the workspace's target directory.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// A program's path: the environment variable `var`, else the path the
/// Debian package installs.
fn program(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

/// chromedriver (`OUTBOX_CHROMEDRIVER`, default the Debian package's) on a
/// free port, ready for sessions.
fn chromedriver() -> (Process, u16) {
    let driver = program("OUTBOX_CHROMEDRIVER", "/usr/bin/chromedriver");
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(&driver)
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| {
            panic!("{driver}: {error}; install it with apt-get install -y chromium chromium-driver")
        });
    let stdout = child.stdout.take().unwrap();
    let process = Process(child);
    line_with(stdout, "started successfully");
    (process, port)
}

/// Headless Chromium loads the dashboard, shows the failed task with its
/// last error, requeues it with a click, and the task is available in the
/// table afterwards; a screenshot is left in the target directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_requeues_a_failed_task_in_a_browser() {
    let db = PgTestDb::create("cli_dashboard_browser").await.unwrap();
    let id = failed_task(&db).await;
    let timeouts = crate::support::fail_with(&db, &["timeout after 5s", "timeout after 30s"])
        .await
        .unwrap();
    let group = group_of(&db, "timeout after #").await;
    let (_server, base) = serve(db.url());
    let (_driver, port) = chromedriver();

    let profile =
        std::env::temp_dir().join(format!("outbox-chromium-{}-{port}", std::process::id()));
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        serde_json::json!({
            "binary": program("OUTBOX_CHROMIUM", "/usr/bin/chromium"),
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1400,900",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let client = ClientBuilder::new(HttpConnector::new())
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap();

    let result = async {
        client.goto(&base).await?;
        let row = client.find(Locator::Id(&format!("failed-{id}"))).await?;
        let text = row.text().await?;
        assert!(text.contains("failed") && text.contains(INJECTED), "{text}");
        client
            .find(Locator::Id(&format!("failed-requeue-{id}")))
            .await?
            .click()
            .await?;
        let notice = client.wait().for_element(Locator::Id("notice")).await?;
        assert_eq!(notice.text().await?, format!("requeued task {id}"));
        let status = client
            .find(Locator::Css(&format!("#recent-{id} td.status")))
            .await?
            .text()
            .await?;
        assert_eq!(status, "available");
        assert!(
            client
                .find(Locator::Id(&format!("failed-{id}")))
                .await
                .is_err(),
            "no longer failed"
        );
        let png = client.screenshot().await?;
        let path = target_dir().join("outbox-dashboard.png");
        std::fs::write(&path, png).unwrap();
        println!("screenshot: {}", path.display());

        // A whole failure group, through its confirmation page.
        client
            .find(Locator::Id(&format!("group-discard-{group}")))
            .await?
            .click()
            .await?;
        let question = client.wait().for_element(Locator::Id("question")).await?;
        assert_eq!(
            question.text().await?,
            format!("discard 2 failed {KIND} task(s) of group {group}?")
        );
        let png = client.screenshot().await?;
        let path = target_dir().join("outbox-dashboard-group.png");
        std::fs::write(&path, png).unwrap();
        println!("screenshot: {}", path.display());
        client
            .find(Locator::Id("confirm-discard"))
            .await?
            .click()
            .await?;
        let notice = client.wait().for_element(Locator::Id("notice")).await?;
        assert_eq!(
            notice.text().await?,
            format!("discarded 2 task(s) of group {group}")
        );
        Ok::<_, fantoccini::error::CmdError>(())
    }
    .await;
    let _ = client.close().await;
    let _ = std::fs::remove_dir_all(&profile);
    result.unwrap();
    assert_eq!(db.store().get(id).await.unwrap().status, Status::Available);
    for id in timeouts {
        assert_eq!(db.store().get(id).await.unwrap().status, Status::Discarded);
    }
}

/// A row another program wrote that cannot be read does not take the
/// front page down: it is listed with the other failed tasks, marked
/// unreadable, its page says why, and its discard button works.
async fn unreadable_rows_are_shown_and_discarded<B: TestBackend>(db: &B, url: &str) {
    let ids = seed(
        db,
        vec![Task::new(KIND, 1, "{}"), Task::new(KIND, 1, "{}")],
        1,
    )
    .await
    .unwrap();
    let bad = ids[1];
    db.execute_sql(&format!(
        "UPDATE outbox_tasks SET headers = '{{\"retries\": 3}}' WHERE id = {bad}"
    ))
    .await
    .unwrap();
    let (mock, _) = diesel_outbox_testkit::handler::recording();
    let worker = diesel_outbox_testkit::conformance::support::worker(
        db,
        diesel_outbox_testkit::conformance::support::registry(mock).unwrap(),
        diesel_outbox_testkit::conformance::support::config("dashboard-reader"),
    )
    .unwrap();
    worker.retry_pending(10).await.unwrap();
    let (_server, base) = serve(url);

    let (status, page) = http(&base, "GET", "/", &[], "");
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains(&format!("id=\"failed-{bad}\" class=\"unreadable\"")),
        "{page}"
    );
    assert!(
        page.contains(&format!("id=\"failed-{}\"", ids[0])),
        "{page}"
    );
    let (status, detail) = http(&base, "GET", &format!("/tasks/{bad}"), &[], "");
    assert_eq!(status, 200, "{detail}");
    assert!(detail.contains("the headers column"), "{detail}");
    assert!(
        detail.contains(&format!("id=\"task-discard-{bad}\"")),
        "{detail}"
    );

    let token = page_token(&base);
    let (status, response) = http(
        &base,
        "POST",
        &format!("/tasks/{bad}/discard"),
        &[FORM],
        &format!("csrf={token}"),
    );
    assert_eq!(status, 303, "{response}");
    match db.store().inspect(bad).await.unwrap() {
        diesel_outbox_core::Listed::Unreadable(row) => assert_eq!(row.status, "discarded"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_rows_are_shown_and_discarded_on_postgres() {
    let db = PgTestDb::create("cli_dashboard_unreadable").await.unwrap();
    unreadable_rows_are_shown_and_discarded(&db, db.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_rows_are_shown_and_discarded_on_sqlite() {
    let db = diesel_outbox_testkit::sqlite::SqliteTestDb::create("cli_dashboard_unreadable")
        .await
        .unwrap();
    let url = format!("sqlite://{}", db.url());
    unreadable_rows_are_shown_and_discarded(&db, &url).await;
}
