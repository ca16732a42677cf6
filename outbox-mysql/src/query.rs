//! Plain reads of `outbox_tasks`.

use diesel::prelude::*;
use diesel_async::{AsyncMysqlConnection, RunQueryDsl};
use diesel_outbox_core::{Record, Result, TaskId};
use diesel_outbox_sql::mysql_error;

use crate::{row::TaskRow, schema::outbox_tasks};

/// Reads one task, `None` when there is no such row.
pub(crate) async fn get(conn: &mut AsyncMysqlConnection, id: TaskId) -> Result<Option<Record>> {
    outbox_tasks::table
        .find(id.get())
        .select(TaskRow::as_select())
        .first(conn)
        .await
        .optional()
        .map_err(mysql_error)?
        .map(Record::try_from)
        .transpose()
}
