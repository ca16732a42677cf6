//! `outbox serve`: a small dashboard over the maintenance API: the stats,
//! failed tasks with their last errors, one task's detail, and requeue and
//! discard buttons guarded against cross-site requests ([`guard`]).

mod groups;
mod guard;
mod pages;

use std::{collections::HashMap, net::SocketAddr, sync::Arc};

use axum::{
    Router,
    extract::{Form, Path, Query, Request, State, rejection::FormRejection},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{Html, IntoResponse, Redirect, Response},
    routing::{get, post},
};
use diesel_outbox_core::{Error, Listed, PageRequest, Status, TaskFilter, TaskId, failure_groups};

use crate::{commands::OperatorStore, failure::Failure};

use guard::{CsrfToken, Hosts};

/// What every request handler shares.
#[derive(Debug)]
struct App<S> {
    store: S,
    /// The tasks table of the outbox shown.
    outbox: String,
    token: CsrfToken,
}

type Shared<S> = Arc<App<S>>;

/// Failed tasks on the front page.
const FAILED_ON_PAGE: u32 = 50;
/// Latest tasks on the front page.
const RECENT_ON_PAGE: u32 = 20;

/// Serves the dashboard on `bind` until interrupted; `allow_hosts` are host
/// names besides loopback that requests may address (a proxy's name).
pub(crate) async fn run<S: OperatorStore>(
    store: S,
    outbox: &str,
    bind: SocketAddr,
    allow_hosts: &[String],
) -> Result<(), Failure> {
    // A dashboard over a database it cannot read would serve only errors:
    // refuse to start, with the reason, so the operator sees it at once.
    store.stats().await?;
    let app = Arc::new(App {
        store,
        outbox: outbox.to_owned(),
        token: CsrfToken::generate()?,
    });
    let hosts = Arc::new(Hosts::new(allow_hosts));
    let router = Router::new()
        .route("/", get(index::<S>))
        .route("/tasks/{id}", get(detail::<S>))
        .route("/tasks/{id}/{action}", post(act::<S>))
        .route(
            "/groups/{id}/{action}",
            get(groups::confirm::<S>).post(groups::act::<S>),
        )
        .with_state(app)
        .layer(middleware::from_fn_with_state(hosts, guard_hosts));
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
                &PageRequest::first(FAILED_ON_PAGE)?,
            )
            .await?;
        let recent = app
            .store
            .list(&TaskFilter::new(), &PageRequest::first(RECENT_ON_PAGE)?)
            .await?;
        let groups = failure_groups(&app.store, &TaskFilter::new()).await?;
        Ok::<_, Error>((stats, groups, failed.rows(), recent.rows()))
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
        Ok((stats, groups, failed, recent)) => Html(pages::index(
            &app.outbox,
            &stats,
            &groups,
            &failed,
            &recent,
            notice.as_deref(),
            app.token.value(),
        ))
        .into_response(),
        Err(error) => self::failed(&error),
    }
}

async fn detail<S: OperatorStore>(State(app): State<Shared<S>>, Path(id): Path<i64>) -> Response {
    match app.store.inspect(TaskId::new(id)).await {
        Ok(Listed::Task(record)) => Html(pages::detail(&record, app.token.value())).into_response(),
        Ok(Listed::Unreadable(row)) => {
            Html(pages::unreadable(&row, app.token.value())).into_response()
        }
        Err(error) => failed(&error),
    }
}

async fn act<S: OperatorStore>(
    State(app): State<Shared<S>>,
    Path((id, action)): Path<(i64, String)>,
    headers: HeaderMap,
    form: Result<Form<HashMap<String, String>>, FormRejection>,
) -> Response {
    let sent = form
        .as_ref()
        .ok()
        .and_then(|Form(fields)| fields.get("csrf"))
        .map(String::as_str);
    if let Some(reason) = guard::refuse_post(&headers, &app.token, sent) {
        return refused(reason);
    }
    let id = TaskId::new(id);
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
