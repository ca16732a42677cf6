//! The order service over HTTP on PostgreSQL: an axum route that places an
//! order through the outbox's `transaction` helper.
//!
//! `POST /orders` with an [`Order`] as JSON inserts the order row and
//! enqueues its `order.created` task in one transaction; after the commit the
//! task is sent in the background, and the route answers `201 Created` with
//! the order id. An order whose id is taken answers `409 Conflict`, and
//! nothing is enqueued; while the database cannot be reached, `503 Service
//! Unavailable`. No answer carries the database's own words: they go to
//! the log.
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
use diesel_async::{
    AsyncPgConnection, RunQueryDsl,
    pooled_connection::{
        AsyncDieselConnectionManager,
        deadpool::{Pool, PoolError},
    },
};
use diesel_outbox_postgres::{
    PgStore,
    outbox::{self, Worker},
    transaction,
};

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

impl App {
    /// The routes' state: `worker`, and a pool of up to `max_size`
    /// connections to `database_url` that gives up on a connection after
    /// 5 s (the request then answers `503`).
    pub fn new(
        database_url: &str,
        max_size: usize,
        worker: Worker<PgStore>,
    ) -> anyhow::Result<Self> {
        let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new(database_url);
        let timeout = Some(std::time::Duration::from_secs(5));
        let pool = Pool::builder(manager)
            .max_size(max_size)
            .runtime(deadpool::Runtime::Tokio1)
            .wait_timeout(timeout)
            .create_timeout(timeout)
            .build()?;
        Ok(Self { worker, pool })
    }
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
    let task = order_created_task(&order)?;
    let mut conn = app.pool.get().await?;
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

/// Why a request failed: a taken order id, a database out of reach, or
/// anything else (a fault in the database, say).
#[derive(Debug)]
enum ApiError {
    Conflict,
    Unavailable(String),
    Internal(String),
}

impl From<DieselError> for ApiError {
    fn from(error: DieselError) -> Self {
        match error {
            DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _) => Self::Conflict,
            DieselError::DatabaseError(DatabaseErrorKind::ClosedConnection, _) => {
                Self::Unavailable(error.to_string())
            }
            other => Self::Internal(other.to_string()),
        }
    }
}

impl From<outbox::Error> for ApiError {
    fn from(error: outbox::Error) -> Self {
        let cause = error.chain();
        match error.database_kind() {
            Some(
                outbox::DatabaseErrorKind::Connection | outbox::DatabaseErrorKind::PoolTimeout,
            ) => Self::Unavailable(cause),
            _ => Self::Internal(cause),
        }
    }
}

impl From<PoolError> for ApiError {
    fn from(error: PoolError) -> Self {
        // No connection: the server is down or out of reach, or the pool
        // stayed exhausted for its wait timeout.
        Self::Unavailable(error.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            Self::Conflict => (StatusCode::CONFLICT, "order id taken").into_response(),
            Self::Unavailable(cause) => {
                eprintln!("placing an order: the database is unavailable: {cause}");
                (StatusCode::SERVICE_UNAVAILABLE, "try again later").into_response()
            }
            Self::Internal(cause) => {
                eprintln!("placing an order failed: {cause}");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "could not place the order",
                )
                    .into_response()
            }
        }
    }
}
