//! Failure groups on the dashboard: a confirmation page that says how many
//! tasks an action touches, and the action, POSTed with the page's token.

use std::collections::HashMap;

use axum::{
    extract::{Form, Path, State, rejection::FormRejection},
    http::{HeaderMap, StatusCode},
    response::{Html, IntoResponse, Redirect, Response},
};
use diesel_outbox_core::{FailureGroup, TaskFilter, failure_groups};

use super::{Shared, failed, guard, pages, refused};
use crate::commands::OperatorStore;

/// Tasks per statement when a group is requeued or discarded.
const BATCH: usize = 256;

/// The group `id` among the failed tasks now, if it is still there (its
/// tasks may have been requeued or discarded meanwhile).
async fn find<S: OperatorStore>(
    app: &Shared<S>,
    id: &str,
) -> diesel_outbox_core::Result<Option<FailureGroup>> {
    let groups = failure_groups(&app.store, &TaskFilter::new()).await?;
    Ok(groups.into_iter().find(|group| group.id == id))
}

/// The 404 page for a group that is not there, or an action there is not.
fn not_found(message: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Html(pages::problem("not found", message)),
    )
        .into_response()
}

/// The page for group `id`, found or not.
fn gone(id: &str) -> Response {
    not_found(&format!(
        "No failure group {id} now: its tasks may have been requeued or discarded."
    ))
}

/// `requeue` or `discard`; `None` for any other action.
fn action(action: &str) -> Option<&'static str> {
    match action {
        "requeue" => Some("requeue"),
        "discard" => Some("discard"),
        _ => None,
    }
}

/// GET: what the action would touch, and the button that does it.
pub(super) async fn confirm<S: OperatorStore>(
    State(app): State<Shared<S>>,
    Path((id, verb)): Path<(String, String)>,
) -> Response {
    let Some(verb) = action(&verb) else {
        return not_found("no such action");
    };
    match find(&app, &id).await {
        Ok(Some(group)) => Html(pages::group_confirm(
            &app.frame(),
            &group,
            verb,
            app.token.value(),
        ))
        .into_response(),
        Ok(None) => gone(&id),
        Err(error) => failed(&error),
    }
}

/// POST: requeues or discards the group's tasks, in batches.
pub(super) async fn act<S: OperatorStore>(
    State(app): State<Shared<S>>,
    Path((id, verb)): Path<(String, String)>,
    headers: HeaderMap,
    form: Result<Form<HashMap<String, String>>, FormRejection>,
) -> Response {
    if let Some(reason) = guard::refuse_form(&headers, &app.token, &form) {
        return refused(reason);
    }
    let Some(verb) = action(&verb) else {
        return not_found("no such action");
    };
    let group = match find(&app, &id).await {
        Ok(Some(group)) => group,
        Ok(None) => return gone(&id),
        Err(error) => return failed(&error),
    };
    // Only the tasks the operator confirmed: a group that changed since
    // its confirmation page was read is shown again, not acted on.
    let confirmed = form
        .as_ref()
        .ok()
        .and_then(|Form(fields)| fields.get("tasks"));
    if confirmed != Some(&group.fingerprint()) {
        return (
            StatusCode::CONFLICT,
            Html(pages::problem(
                "the group changed",
                &format!(
                    "Failure group {id} changed since you confirmed: it now holds {} task(s). \
                     Nothing was changed; open /groups/{id}/{verb} to review it again.",
                    group.count()
                ),
            )),
        )
            .into_response();
    }
    let mut changed = 0;
    for ids in group.ids.chunks(BATCH) {
        let done = match verb {
            "requeue" => app.store.requeue_failed_many(ids).await,
            _ => app.store.discard_many(ids).await,
        };
        match done {
            Ok(count) => changed += count,
            Err(error) => return failed(&error),
        }
    }
    let done = if verb == "requeue" {
        "requeued"
    } else {
        "discarded"
    };
    Redirect::to(&format!("/?{done}_group={id}&count={changed}")).into_response()
}
