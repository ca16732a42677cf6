//! The dashboard at 3 a.m.: which outbox and database it shows and as of
//! when, a confirmation before every discard, a blocked task's head one
//! click away, HTML pages for every error, and a password when it must
//! listen beyond loopback.

use std::{
    io::{BufRead as _, BufReader},
    process::{Command, Stdio},
};

use diesel_outbox_core::{Maintenance as _, Status, Store as _, Task};
use diesel_outbox_testkit::{TestBackend, conformance::support::KIND, postgres::PgTestDb};

use crate::{
    dashboard::{FORM, Process, failed_task, http, page_token, serve, serve_with},
    support::{OUTBOX, seed},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_says_which_outbox_and_database_as_of_when() {
    let db = PgTestDb::create("cli_incident_frame").await.unwrap();
    let id = failed_task(&db).await;
    let (_server, base) = serve_with(db.url(), &["--name", "orders-prod", "--refresh", "20s"]);
    let database = db.url().rsplit_once('/').unwrap().1;
    let (status, page) = http(&base, "GET", "/", &[], "");
    assert_eq!(status, 200, "{page}");
    for expected in [
        "<title>orders-prod · dashboard · outbox</title>",
        "<strong id=\"name\">orders-prod</strong>",
        &format!("<code id=\"database\">127.0.0.1:5432, database {database}</code>"),
        "<span id=\"as-of\">20",
        "<meta http-equiv=\"refresh\" content=\"20; url=/\">",
        "reloads every 20 s",
    ] {
        assert!(page.contains(expected), "{expected:?} in {page}");
    }
    assert!(
        !page.contains("postgres://"),
        "the URL is never shown: {page}"
    );
    // A page the operator acts on never reloads under their hands.
    let (status, confirm) = http(&base, "GET", &format!("/tasks/{id}/discard"), &[], "");
    assert_eq!(status, 200, "{confirm}");
    assert!(
        confirm.contains("<strong id=\"name\">orders-prod</strong>"),
        "{confirm}"
    );
    assert!(!confirm.contains("http-equiv=\"refresh\""), "{confirm}");

    let (_quiet, base) = serve_with(db.url(), &["--refresh", "0s"]);
    let (_, page) = http(&base, "GET", "/", &[], "");
    assert!(!page.contains("http-equiv=\"refresh\""), "{page}");
}

/// The front page lists the relays heard of, silent ones marked, and says
/// so when there is none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_page_lists_the_relays() {
    let db = PgTestDb::create("cli_incident_relays").await.unwrap();
    let (_server, base) = serve(db.url());
    let (_, page) = http(&base, "GET", "/", &[], "");
    assert!(page.contains("No relay heard of in the last day"), "{page}");
    let mut gone = diesel_outbox_core::Heartbeat::new("relay-<9>", std::time::Duration::ZERO);
    gone.ttl = std::time::Duration::ZERO;
    db.store().beat(&gone).await.unwrap();
    let (_, page) = http(&base, "GET", "/", &[], "");
    assert!(
        page.contains("<tr id=\"relay-relay-&lt;9&gt;\"><td>relay-&lt;9&gt;</td><td class=\"failed\">silent</td>"),
        "{page}"
    );
    assert!(page.contains("<td id=\"live-relays\">0</td>"), "{page}");
}

/// `/tasks` filters and pages like `outbox list`: 50 a page, newest first,
/// the next page's link keeping the filters; a bad filter is a 400 naming
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_filtered_and_paged() {
    let db = PgTestDb::create("cli_incident_paging").await.unwrap();
    let mut tasks: Vec<Task> = (0..55).map(|_| Task::new(KIND, 1, "{}")).collect();
    tasks.extend((0..3).map(|_| Task::new("invoice.sent", 1, "{}")));
    let ids = seed(&db, tasks, 55).await.unwrap();
    let (_server, base) = serve(db.url());
    let (_, front) = http(&base, "GET", "/", &[], "");
    assert!(front.contains("href=\"/tasks?status=failed\""), "{front}");

    let (status, page) = http(&base, "GET", "/tasks?status=failed&kind=", &[], "");
    assert_eq!(status, 200, "{page}");
    assert_eq!(page.matches("<tr id=\"tasks-").count(), 50, "{page}");
    assert!(page.contains("<option selected>failed</option>"), "{page}");
    let next = format!("/tasks?status=failed&amp;after={}", ids[5]);
    assert!(page.contains(&format!("href=\"{next}\"")), "{page}");
    let (status, rest) = http(&base, "GET", &next.replace("&amp;", "&"), &[], "");
    assert_eq!(status, 200, "{rest}");
    assert_eq!(rest.matches("<tr id=\"tasks-").count(), 5, "{rest}");
    assert!(!rest.contains("id=\"next\""), "{rest}");

    let (_, invoices) = http(&base, "GET", "/tasks?kind=invoice.sent&since=1h", &[], "");
    assert_eq!(invoices.matches("<tr id=\"tasks-").count(), 3, "{invoices}");
    assert!(invoices.contains("value=\"invoice.sent\""), "{invoices}");
    let (_, none) = http(
        &base,
        "GET",
        "/tasks?status=failed&kind=invoice.sent",
        &[],
        "",
    );
    assert!(none.contains("<p id=\"tasks\">none</p>"), "{none}");

    for (query, says) in [
        ("status=pending", "status: "),
        ("since=yesterday", "since: "),
        ("after=x", "after: "),
    ] {
        let (status, page) = http(&base, "GET", &format!("/tasks?{query}"), &[], "");
        assert_eq!(status, 400, "{query}: {page}");
        assert!(page.contains(says), "{query}: {page}");
    }
}

/// A discard is a link to a page that says what it gives up; only the
/// POST from that page discards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discard_is_confirmed_first() {
    let db = PgTestDb::create("cli_incident_discard").await.unwrap();
    let id = failed_task(&db).await;
    let (_server, base) = serve(db.url());
    let (_, page) = http(&base, "GET", "/", &[], "");
    assert!(
        page.contains(&format!(
            "<a href=\"/tasks/{id}/discard\" id=\"failed-discard-{id}\">"
        )),
        "{page}"
    );
    let path = format!("/tasks/{id}/discard");
    let (status, confirm) = http(&base, "GET", &path, &[], "");
    assert_eq!(status, 200, "{confirm}");
    assert!(
        confirm.contains(&format!("Discard <code>{KIND}</code> task {id}, failed")),
        "{confirm}"
    );
    assert!(confirm.contains("cannot be undone"), "{confirm}");
    assert!(
        confirm.contains(&format!("id=\"confirm-discard-{id}\"")),
        "{confirm}"
    );
    assert_eq!(db.store().get(id).await.unwrap().status, Status::Failed);
    let token = page_token(&base);
    let (status, _) = http(&base, "POST", &path, &[FORM], &format!("csrf={token}"));
    assert_eq!(status, 303);
    assert_eq!(db.store().get(id).await.unwrap().status, Status::Discarded);
}

/// A blocked task's page names the task its key waits behind, linked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_task_links_to_the_head_it_waits_behind() {
    let db = PgTestDb::create("cli_incident_blocked").await.unwrap();
    let ids = seed(
        &db,
        vec![
            Task::new(KIND, 1, "{}").ordering_key("customer-7"),
            Task::new(KIND, 1, "{}").ordering_key("customer-7"),
            Task::new(KIND, 1, "{}").ordering_key("customer-7"),
        ],
        1,
    )
    .await
    .unwrap();
    assert_eq!(
        db.store().get(ids[2]).await.unwrap().status,
        Status::Blocked
    );
    let (_server, base) = serve(db.url());
    let (status, page) = http(&base, "GET", &format!("/tasks/{}", ids[2]), &[], "");
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains(&format!(
            "Waits behind task <a href=\"/tasks/{head}\">{head}</a> (failed)",
            head = ids[0]
        )),
        "{page}"
    );
    let (_, head) = http(&base, "GET", &format!("/tasks/{}", ids[0]), &[], "");
    assert!(
        !head.contains("blocked-by"),
        "the head waits for nothing: {head}"
    );
    let (_, front) = http(&base, "GET", "/", &[], "");
    assert!(
        front.contains("<td id=\"stopped-keys\"><a href=\"/tasks?status=failed\">1</a></td>"),
        "the stopped key is counted and linked: {front}"
    );
}

/// Every 4xx answers an HTML page in the dashboard's layout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_html_pages() {
    let db = PgTestDb::create("cli_incident_errors").await.unwrap();
    failed_task(&db).await; // a form on the front page, for its token
    let (_server, base) = serve(db.url());
    for (method, path, status, says) in [
        ("GET", "/tasks/abc", 400, "not a task id"),
        ("GET", "/nowhere", 404, "no such page"),
        ("GET", "/tasks/1/explode", 404, "no such page"),
        ("GET", "/tasks/987654321", 404, "987654321"),
        ("DELETE", "/", 405, "does not take that method"),
    ] {
        let (code, page) = http(&base, method, path, &[], "");
        assert_eq!(code, status, "{method} {path}: {page}");
        assert!(
            page.contains("content-type: text/html"),
            "{method} {path}: {page}"
        );
        assert!(
            page.contains("<p id=\"problem\">"),
            "{method} {path}: {page}"
        );
        assert!(page.contains(says), "{method} {path}: {page}");
    }
    let token = page_token(&base);
    let (code, page) = http(
        &base,
        "POST",
        "/tasks/abc/requeue",
        &[FORM],
        &format!("csrf={token}"),
    );
    assert_eq!(code, 400, "{page}");
    assert!(page.contains("not a task id"), "{page}");
}

/// With `--auth-file`, every request needs the user and password (a
/// browser asks for them); without it, binding beyond loopback warns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_guards_every_page_when_set() {
    let db = PgTestDb::create("cli_incident_auth").await.unwrap();
    let file = std::env::temp_dir().join(format!("outbox-auth-{}", std::process::id()));
    std::fs::write(&file, "ops:s3cret\n").unwrap();
    let (_server, base) = serve_with(db.url(), &["--auth-file", file.to_str().unwrap()]);
    std::fs::remove_file(&file).unwrap();
    let (status, page) = http(&base, "GET", "/", &[], "");
    assert_eq!(status, 401, "{page}");
    assert!(
        page.contains("www-authenticate: Basic realm=\"outbox\""),
        "{page}"
    );
    let wrong = ("Authorization", "Basic b3BzOndyb25n"); // ops:wrong
    assert_eq!(http(&base, "GET", "/", &[wrong], "").0, 401);
    let right = ("Authorization", "Basic b3BzOnMzY3JldA=="); // ops:s3cret
    let (status, page) = http(&base, "GET", "/", &[right], "");
    assert_eq!(status, 200, "{page}");
    // The token check still holds behind the password.
    let (status, _) = http(&base, "POST", "/tasks/1/requeue", &[right, FORM], "");
    assert_eq!(status, 403);

    let missing = crate::support::outbox(
        db.url(),
        &[
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--auth-file",
            "/nonexistent/outbox-auth",
        ],
    )
    .expect(2);
    assert!(
        missing
            .stderr
            .contains("--auth-file /nonexistent/outbox-auth"),
        "{missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_beyond_loopback_without_a_password_warns() {
    let db = PgTestDb::create("cli_incident_open").await.unwrap();
    let mut child = Command::new(OUTBOX)
        .args(["serve", "--bind", "0.0.0.0:0"])
        .env("DATABASE_URL", db.url())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _process = Process(child);
    let mut line = String::new();
    BufReader::new(stderr).read_line(&mut line).unwrap();
    assert!(
        line.starts_with(
            "outbox: warning: serving on 0.0.0.0:0, beyond loopback, without --auth-file"
        ),
        "{line}"
    );
}
