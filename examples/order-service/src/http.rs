//! The order service over HTTP on PostgreSQL: an axum route that places an
//! order through the outbox's `transaction` helper.
//!
//! `POST /orders` with an [`Order`] as JSON inserts the order row and
//! enqueues its `order.created` task in one transaction; after the commit the
//! task is sent in the background, and the route answers `201 Created` with
//! the order id. An order whose id is taken answers `409 Conflict`, and
//! nothing is enqueued.
//!
//! A `500` does not always mean nothing happened: when the connection is lost
//! during the commit, the transaction may have committed all the same. The
//! order id is chosen by the client, so retrying the request is safe: the
//! retry answers `201` if the first attempt rolled back, and `409` if it had
//! committed (and its task is then delivered by the relay's rounds).

use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel_async::{AsyncPgConnection, RunQueryDsl, pooled_connection::deadpool::Pool};
use diesel_outbox_postgres::{PgStore, outbox::Worker, transaction};

use crate::{Order, OrderId, order_created_task, schema::orders};

/// What the routes share: the outbox worker, and the pool the business
/// transactions take their connections from.
#[derive(Clone)]
pub struct App {
    /// Sends what a transaction enqueued, after its commit.
    pub worker: Worker<PgStore>,
    /// Connections for the business transactions.
    pub pool: Pool<AsyncPgConnection>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("worker", &self.worker)
            .field("pool", &self.pool.status())
            .finish()
    }
}

/// The service's routes: `POST /orders`.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/orders", post(place_order))
        .with_state(app)
}

/// `POST /orders`: inserts the order and enqueues `order.created` in one
/// transaction, sent once it committed.
async fn place_order(
    State(app): State<App>,
    Json(order): Json<Order>,
) -> Result<(StatusCode, Json<OrderId>), ApiError> {
    let task = order_created_task(&order).map_err(anyhow::Error::from)?;
    let mut conn = app.pool.get().await.map_err(anyhow::Error::from)?;
    let id = transaction(&app.worker, &mut conn, async |mut tx| {
        diesel::insert_into(orders::table)
            .values(&order)
            .execute(tx.conn())
            .await?;
        tx.enqueue(task).await?;
        Ok::<_, ApiError>(OrderId(order.id))
    })
    .await?;
    Ok((StatusCode::CREATED, Json(id)))
}

/// Why a request failed: a taken order id, or anything else (a database
/// fault, say).
#[derive(Debug)]
enum ApiError {
    Conflict,
    Internal(anyhow::Error),
}

impl From<DieselError> for ApiError {
    fn from(error: DieselError) -> Self {
        match error {
            DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _) => Self::Conflict,
            other => Self::Internal(other.into()),
        }
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(error: anyhow::Error) -> Self {
        Self::Internal(error)
    }
}

impl From<diesel_outbox_postgres::outbox::Error> for ApiError {
    fn from(error: diesel_outbox_postgres::outbox::Error) -> Self {
        Self::Internal(error.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            Self::Conflict => (StatusCode::CONFLICT, "order id taken").into_response(),
            Self::Internal(error) => {
                eprintln!("placing an order failed: {error:#}");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "could not place the order",
                )
                    .into_response()
            }
        }
    }
}
