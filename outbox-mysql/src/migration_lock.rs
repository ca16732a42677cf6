//! The user-level lock that serialises outbox migration runs on one
//! MySQL/MariaDB database.

use diesel::{
    QueryableByName, RunQueryDsl,
    mysql::Mysql,
    sql_types::{BigInt, Nullable, Text},
};
use diesel_async::AsyncConnection;
use diesel_outbox_core::{Error, Result};
use diesel_outbox_sql::{MigrationConnection, MigrationLock};

/// `GET_LOCK` for the whole run, named `outbox_migrations:` and the
/// connection's database (cut to the server's 64-character limit).
/// User-level locks are server-wide, so the name holds the database: runs on
/// different databases of one server do not wait for each other. The wait is
/// bounded by the session's `lock_wait_timeout`, the bound the migrations'
/// own DDL waits under.
#[derive(Debug, Default)]
pub(crate) struct UserLock {
    /// The name taken, once [`MigrationLock::acquire`] has succeeded.
    held: Option<String>,
}

#[derive(QueryableByName)]
struct Name {
    #[diesel(sql_type = Nullable<Text>)]
    name: Option<String>,
}

#[derive(QueryableByName)]
struct Outcome {
    #[diesel(sql_type = Nullable<BigInt>)]
    acquired: Option<i64>,
    #[diesel(sql_type = BigInt)]
    waited: i64,
}

impl<C> MigrationLock<MigrationConnection<C>> for UserLock
where
    C: AsyncConnection<Backend = Mysql> + 'static,
{
    fn acquire(&mut self, conn: &mut MigrationConnection<C>) -> Result<()> {
        let Name { name } =
            diesel::sql_query("SELECT LEFT(CONCAT('outbox_migrations:', DATABASE()), 64) AS name")
                .get_result(conn)
                .map_err(Error::database)?;
        let Some(name) = name else {
            return Err(Error::database(
                "no database selected: the connection must name the database of `outbox_tasks`",
            ));
        };
        let outcome: Outcome = diesel::sql_query(
            "SELECT GET_LOCK(?, @@SESSION.lock_wait_timeout) AS acquired, \
             CAST(@@SESSION.lock_wait_timeout AS SIGNED) AS waited",
        )
        .bind::<Text, _>(&name)
        .get_result(conn)
        .map_err(Error::database)?;
        match outcome.acquired {
            Some(1) => {
                self.held = Some(name);
                Ok(())
            }
            Some(_) => Err(Error::database(format!(
                "timed out after {} s (the session's lock_wait_timeout) waiting for the \
                 migration lock `{name}`: another session is migrating this database",
                outcome.waited
            ))),
            None => Err(Error::database(format!(
                "the server refused the migration lock `{name}` (GET_LOCK returned NULL)"
            ))),
        }
    }

    fn release(&mut self, conn: &mut MigrationConnection<C>) -> Result<()> {
        let Some(name) = self.held.take() else {
            return Ok(());
        };
        diesel::sql_query("SELECT RELEASE_LOCK(?)")
            .bind::<Text, _>(name)
            .execute(conn)
            .map(drop)
            .map_err(Error::database)
    }
}
