//! `/tasks`: tasks by status, kind, ordering key and age, newest first, a
//! page at a time, as `outbox list` pages them.

use std::collections::HashMap;

use axum::{
    extract::{Query, State},
    http::StatusCode,
    response::{Html, IntoResponse, Response},
};
use diesel_outbox_core::{PageRequest, Status, TaskFilter, TaskId};

use super::{Shared, failed, pages};
use crate::{commands::OperatorStore, duration::parse_since};

/// Tasks per page.
const PER_PAGE: u32 = 50;

/// The filters of a listing as the form sent them (empty fields left out),
/// and the filter they make.
#[derive(Debug, Default)]
pub(crate) struct Filters {
    /// `status`, `kind`, `key` and `since` as given, for the form and the
    /// next page's link.
    pub(crate) given: Vec<(&'static str, String)>,
    pub(crate) filter: TaskFilter,
    pub(crate) after: Option<TaskId>,
}

impl Filters {
    /// Reads the query; an error names the field that cannot be read.
    fn read(query: &HashMap<String, String>) -> Result<Self, String> {
        let mut filters = Self::default();
        for field in ["status", "kind", "key", "since"] {
            let Some(value) = query.get(field).map(|v| v.trim()).filter(|v| !v.is_empty()) else {
                continue;
            };
            filters.filter = match field {
                "status" => {
                    let status: Status =
                        value.parse().map_err(|error| format!("status: {error}"))?;
                    filters.filter.status(status)
                }
                "kind" => filters.filter.kind(value),
                "key" => filters.filter.ordering_key(value),
                _ => filters
                    .filter
                    .since(parse_since(value).map_err(|error| format!("since: {error}"))?),
            };
            filters.given.push((field, value.to_owned()));
        }
        if let Some(after) = query.get("after").filter(|v| !v.is_empty()) {
            let after: i64 = after
                .parse()
                .map_err(|_| format!("after: `{after}` is not a task id"))?;
            filters.after = Some(TaskId::new(after));
        }
        Ok(filters)
    }

    /// The query string of this listing's page after `next`.
    pub(crate) fn next_query(&self, next: TaskId) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (field, value) in &self.given {
            query.append_pair(field, value);
        }
        query.append_pair("after", &next.to_string());
        query.finish()
    }
}

/// GET `/tasks`.
pub(super) async fn list<S: OperatorStore>(
    State(app): State<Shared<S>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let filters = match Filters::read(&query) {
        Ok(filters) => filters,
        Err(reason) => {
            return (
                StatusCode::BAD_REQUEST,
                Html(pages::problem("bad request", &reason)),
            )
                .into_response();
        }
    };
    // The table shows no payload: leave them in the database.
    let request = match PageRequest::first(PER_PAGE).map(PageRequest::without_payloads) {
        Ok(request) => filters.after.map_or(request, |after| request.after(after)),
        Err(error) => return failed(&error),
    };
    match app.store.list(&filters.filter, &request).await {
        Ok(page) => Html(pages::listing(
            &app.frame(),
            &filters,
            &page.rows(),
            page.next,
            app.token.value(),
        ))
        .into_response(),
        Err(error) => failed(&error),
    }
}
