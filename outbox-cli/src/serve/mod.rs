//! `outbox serve`: a small dashboard over the maintenance API: the stats,
//! failure groups, failed tasks with their last errors, one task's detail,
//! and requeue and discard actions guarded against cross-site requests
//! ([`guard`]), optionally behind a password ([`auth`]).

mod auth;
mod groups;
mod guard;
mod listing;
mod pages;

use std::{collections::HashMap, sync::Arc, time::Duration};

use axum::{
    Router,
    extract::{
        Form, Path, Query, Request, State,
        rejection::{FormRejection, PathRejection},
    },
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{Html, IntoResponse, Redirect, Response},
    routing::get,
};
use diesel_outbox_core::{Error, Listed, PageRequest, Status, TaskFilter, TaskId, failure_groups};

use crate::{
    args::ServeArgs,
    commands::{OperatorStore, Shown},
    failure::Failure,
};

use guard::{CsrfToken, Hosts};

/// What every request handler shares.
#[derive(Debug)]
struct App<S> {
    store: S,
    /// The outbox shown.
    shown: Shown,
    /// The name the operator gave it.
    name: Option<String>,
    /// How often the front page reloads itself.
    refresh: Option<Duration>,
    token: CsrfToken,
}

impl<S> App<S> {
    /// The header of a page read now.
    fn frame(&self) -> pages::Frame<'_> {
        pages::Frame {
            name: self.name.as_deref(),
            table: &self.shown.table,
            database: self.shown.database.as_deref(),
            as_of: chrono::Utc::now(),
            refresh: self.refresh,
        }
    }
}

type Shared<S> = Arc<App<S>>;

/// Failed tasks on the front page.
const FAILED_ON_PAGE: u32 = 50;
/// Latest tasks on the front page.
const RECENT_ON_PAGE: u32 = 20;

/// Serves the dashboard as `args` say until interrupted.
pub(crate) async fn run<S: OperatorStore>(
    store: S,
    shown: Shown,
    args: &ServeArgs,
) -> Result<(), Failure> {
    let bind = args.bind;
    let credentials = match &args.auth_file {
        Some(path) => Some(Arc::new(auth::Credentials::read(path)?)),
        None => None,
    };
    // A dashboard over a database it cannot read would serve only errors:
    // refuse to start, with the reason, so the operator sees it at once.
    store.stats().await?;
    let app = Arc::new(App {
        store,
        shown,
        name: args.name.clone(),
        refresh: Some(args.refresh).filter(|every| !every.is_zero()),
        token: CsrfToken::generate()?,
    });
    let hosts = Arc::new(Hosts::new(&args.allow_hosts));
    let router = Router::new()
        .route("/", get(index::<S>))
        .route("/tasks", get(listing::list::<S>))
        .route("/tasks/{id}", get(detail::<S>))
        .route("/tasks/{id}/{action}", get(confirm::<S>).post(act::<S>))
        .route(
            "/groups/{id}/{action}",
            get(groups::confirm::<S>).post(groups::act::<S>),
        )
        .fallback(no_such_page)
        .method_not_allowed_fallback(no_such_method)
        .with_state(app)
        .layer(middleware::from_fn_with_state(
            credentials.clone(),
            auth::require,
        ))
        .layer(middleware::from_fn_with_state(hosts, guard_hosts));
    if credentials.is_none() && !bind.ip().is_loopback() {
        eprintln!(
            "outbox: warning: serving on {bind}, beyond loopback, without --auth-file: \
             anyone who reaches it can requeue and discard"
        );
    }
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|error| Failure::Error(anyhow::anyhow!("cannot listen on {bind}: {error}")))?;
    let addr = listener.local_addr()?;
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        writeln!(out, "outbox dashboard on http://{addr}/")?;
        out.flush()?;
    }
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// Refuses requests addressed to a foreign host name, and sets the headers
/// that keep the pages out of frames and scripts out of the pages.
async fn guard_hosts(State(hosts): State<Arc<Hosts>>, request: Request, next: Next) -> Response {
    if !hosts.allows(request.headers()) {
        return refused("this dashboard does not answer to that Host name");
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

fn refused(message: &str) -> Response {
    (
        StatusCode::FORBIDDEN,
        Html(pages::problem("refused", message)),
    )
        .into_response()
}

fn failed(error: &Error) -> Response {
    let status = match error {
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::NotFailed { .. } | Error::NotDiscardable { .. } => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (
        status,
        Html(pages::problem("error", &crate::failure::explain(error))),
    )
        .into_response()
}

async fn index<S: OperatorStore>(
    State(app): State<Shared<S>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let page = async {
        let stats = app.store.stats().await?;
        let failed = app
            .store
            .list(
                &TaskFilter::new().status(Status::Failed),
                &PageRequest::first(FAILED_ON_PAGE)?.without_payloads(),
            )
            .await?;
        let recent = app
            .store
            .list(
                &TaskFilter::new(),
                &PageRequest::first(RECENT_ON_PAGE)?.without_payloads(),
            )
            .await?;
        let groups = failure_groups(&app.store, &TaskFilter::new()).await?;
        let relays = app.store.relays().await?;
        Ok::<_, Error>(pages::Front {
            stats,
            relays,
            groups,
            failed: failed.rows(),
            recent: recent.rows(),
        })
    };
    let notice = ["requeued", "discarded"].into_iter().find_map(|done| {
        if let Some(group) = query.get(&format!("{done}_group")) {
            let count: u64 = query.get("count")?.parse().ok()?;
            return Some(format!("{done} {count} task(s) of group {group}"));
        }
        let id: i64 = query.get(done)?.parse().ok()?;
        Some(format!("{done} task {id}"))
    });
    match page.await {
        Ok(front) => Html(pages::index(
            &app.frame(),
            &front,
            notice.as_deref(),
            app.token.value(),
        ))
        .into_response(),
        Err(error) => self::failed(&error),
    }
}

/// The 400 page for a path whose task id is not a number.
fn not_a_task_id(rejection: &PathRejection) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Html(pages::problem(
            "bad request",
            &format!("not a task id: {}", rejection.body_text()),
        )),
    )
        .into_response()
}

async fn no_such_page() -> Response {
    (
        StatusCode::NOT_FOUND,
        Html(pages::problem("not found", "no such page")),
    )
        .into_response()
}

async fn no_such_method() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        Html(pages::problem(
            "method not allowed",
            "this page does not take that method",
        )),
    )
        .into_response()
}

async fn detail<S: OperatorStore>(
    State(app): State<Shared<S>>,
    path: Result<Path<i64>, PathRejection>,
) -> Response {
    let id = match path {
        Ok(Path(id)) => TaskId::new(id),
        Err(rejection) => return not_a_task_id(&rejection),
    };
    match app.store.inspect(id).await {
        Ok(Listed::Task(record)) => {
            let head = match blocked_by(&app.store, &record).await {
                Ok(head) => head,
                Err(error) => return failed(&error),
            };
            Html(pages::detail(
                &app.frame(),
                &record,
                head,
                app.token.value(),
            ))
            .into_response()
        }
        Ok(Listed::Unreadable(row)) => Html(pages::unreadable(&app.frame(), &row)).into_response(),
        Err(error) => failed(&error),
    }
}

/// For a blocked task, the oldest unfinished task of its ordering key,
/// which it waits behind: one read per status a head can have, the lowest
/// id of them.
async fn blocked_by<S: OperatorStore>(
    store: &S,
    record: &diesel_outbox_core::Record,
) -> Result<Option<(TaskId, Status)>, Error> {
    let (Status::Blocked, Some(key)) = (record.status, &record.task.ordering_key) else {
        return Ok(None);
    };
    let first = PageRequest::first(1)?
        .order(diesel_outbox_core::Order::OldestFirst)
        .without_payloads();
    let mut head: Option<(TaskId, Status)> = None;
    for status in [
        Status::Failed,
        Status::Running,
        Status::Available,
        Status::Waiting,
    ] {
        let filter = TaskFilter::new().ordering_key(key.clone()).status(status);
        if let Some(row) = store.list(&filter, &first).await?.rows().first()
            && head.is_none_or(|(id, _)| row.id() < id)
        {
            head = Some((row.id(), status));
        }
    }
    Ok(head.filter(|(id, _)| *id < record.id))
}

/// GET `/tasks/{id}/discard`: the page that confirms the discard.
async fn confirm<S: OperatorStore>(
    State(app): State<Shared<S>>,
    path: Result<Path<(i64, String)>, PathRejection>,
) -> Response {
    let id = match path {
        Ok(Path((id, action))) if action == "discard" => TaskId::new(id),
        Ok(_) => return no_such_page().await,
        Err(rejection) => return not_a_task_id(&rejection),
    };
    match app.store.inspect(id).await {
        Ok(listed) => Html(pages::discard_confirm(
            &app.frame(),
            &listed,
            app.token.value(),
        ))
        .into_response(),
        Err(error) => failed(&error),
    }
}

async fn act<S: OperatorStore>(
    State(app): State<Shared<S>>,
    path: Result<Path<(i64, String)>, PathRejection>,
    headers: HeaderMap,
    form: Result<Form<HashMap<String, String>>, FormRejection>,
) -> Response {
    if let Some(reason) = guard::refuse_form(&headers, &app.token, &form) {
        return refused(reason);
    }
    let (id, action) = match path {
        Ok(Path((id, action))) => (TaskId::new(id), action),
        Err(rejection) => return not_a_task_id(&rejection),
    };
    let done = match action.as_str() {
        "requeue" => app.store.requeue(id).await.map(|()| "requeued"),
        "discard" => app.store.discard(id).await.map(|()| "discarded"),
        _ => {
            return (
                StatusCode::NOT_FOUND,
                Html(pages::problem("not found", "no such action")),
            )
                .into_response();
        }
    };
    match done {
        Ok(done) => Redirect::to(&format!("/?{done}={id}")).into_response(),
        Err(error) => failed(&error),
    }
}
