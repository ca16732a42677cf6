//! Why a connection to the database could not be made, said once and
//! naming the server: [`ConnectFailed`], and [`target_of`], the part of a
//! database URL it names the server by.

use std::fmt;

use diesel_outbox_core::Error;

/// A connection to the database could not be made: the source of an
/// [`Error::Database`] raised while a pool opened a connection, in place of
/// the pool's own error (whose message wraps the driver's in the pool's
/// words and repeats it as its cause).
///
/// ```
/// use diesel_outbox_core::{DatabaseErrorKind, Error};
/// use diesel_outbox_sql::ConnectFailed;
///
/// let refused = ConnectFailed::new("error connecting to server: Connection refused (os error 111)")
///     .at(Some("127.0.0.1:5432, database orders"));
/// let error = Error::database_with(DatabaseErrorKind::Connection, None, refused);
/// assert_eq!(
///     error.chain(),
///     "database error (connection): could not connect to 127.0.0.1:5432, database orders: \
///      error connecting to server: Connection refused (os error 111)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectFailed {
    target: Option<String>,
    reason: String,
}

impl ConnectFailed {
    /// A failure for `reason` (the driver's words), at no server named yet.
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            target: None,
            reason: reason.into(),
        }
    }

    /// The same failure, at the server `target` names (see [`target_of`]);
    /// `None` keeps the one it had.
    pub fn at(mut self, target: Option<&str>) -> Self {
        if let Some(target) = target {
            self.target = Some(target.to_owned());
        }
        self
    }

    /// The server it names, if known.
    pub fn target(&self) -> Option<&str> {
        self.target.as_deref()
    }

    /// The driver's words for why.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for ConnectFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Some(target) => write!(f, "could not connect to {target}: {}", self.reason),
            None => write!(f, "could not connect: {}", self.reason),
        }
    }
}

impl std::error::Error for ConnectFailed {}

/// `error` with the server `target` named, when it is an
/// [`Error::Database`] whose source is a [`ConnectFailed`]; any other
/// error as it is.
pub fn connecting_to(error: Error, target: Option<&str>) -> Error {
    match error {
        Error::Database { kind, code, source } => match source.downcast::<ConnectFailed>() {
            Ok(failed) => Error::database_with(kind, code, (*failed).at(target)),
            Err(source) => Error::Database { kind, code, source },
        },
        other => other,
    }
}

/// The server a database URL names, without its user or password: `host:port,
/// database name` for a server's URL (the default port when none is given),
/// the file's path for SQLite. `None` for text that is not a URL of either
/// form.
///
/// ```
/// use diesel_outbox_sql::target_of;
///
/// assert_eq!(
///     target_of("postgres://app:secret@db.internal/orders?sslmode=disable").as_deref(),
///     Some("db.internal:5432, database orders")
/// );
/// assert_eq!(
///     target_of("mysql://root@127.0.0.1:3307/shop").as_deref(),
///     Some("127.0.0.1:3307, database shop")
/// );
/// assert_eq!(target_of("sqlite:///var/lib/app/outbox.db").as_deref(), Some("/var/lib/app/outbox.db"));
/// ```
pub fn target_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme {
        "postgres" | "postgresql" => 5432,
        "mysql" | "mariadb" => 3306,
        "sqlite" | "file" => {
            let path = rest.split('?').next().unwrap_or(rest);
            return (!path.is_empty()).then(|| path.to_owned());
        }
        _ => return None,
    };
    // The user and password end at the last `@` of the URL: drivers read
    // them up to an `@`, so a password may hold `/`, `?` or `#`, and
    // nothing before that `@` is ever shown.
    let rest = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    let (hosts, database) = rest.split_once('/').unwrap_or((rest, ""));
    if hosts.is_empty() {
        return None;
    }
    let hosts: Vec<String> = hosts
        .split(',')
        .map(|host| with_port(host, default_port))
        .collect();
    let mut target = hosts.join(", ");
    if !database.is_empty() {
        target.push_str(", database ");
        target.push_str(database);
    }
    Some(target)
}

/// `host` with `default` as its port when it names none (`[::1]` style
/// addresses included).
fn with_port(host: &str, default: u16) -> String {
    let has_port = match host.rsplit_once(':') {
        Some((before, port)) => {
            !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!before.contains(':') || before.ends_with(']'))
        }
        None => false,
    };
    if has_port {
        host.to_owned()
    } else {
        format!("{host}:{default}")
    }
}

#[cfg(test)]
mod tests {
    use diesel_outbox_core::DatabaseErrorKind;

    use super::*;

    #[test]
    fn a_target_never_shows_the_user_or_password() {
        for url in [
            "postgres://app:s3cr@t@db:6432/orders",
            "postgresql://app:pw@db:6432/orders?application_name=x",
            "mysql://app:pw@db:6432/orders",
            "postgres://app:s3cr/t@db:6432/orders",
            "postgres://app:s3cr?t@db:6432/orders",
            "mysql://app:s3cr#t@db:6432/orders",
        ] {
            let target = target_of(url).expect("a server URL");
            assert_eq!(target, "db:6432, database orders", "{url}");
            assert!(
                !target.contains("pw") && !target.contains("s3cr"),
                "{target}"
            );
        }
        assert_eq!(
            target_of("postgres://db1:5433,db2/app").as_deref(),
            Some("db1:5433, db2:5432, database app")
        );
        assert_eq!(
            target_of("postgres://[::1]/app").as_deref(),
            Some("[::1]:5432, database app")
        );
        assert_eq!(target_of("postgres://[::1]:7/").as_deref(), Some("[::1]:7"));
        assert_eq!(
            target_of("sqlite://outbox.db?mode=rwc").as_deref(),
            Some("outbox.db")
        );
        assert_eq!(target_of("host=db user=app"), None);
        assert_eq!(target_of("redis://db/0"), None);
        assert_eq!(target_of("postgres:///app"), None);
    }

    #[test]
    fn the_server_is_named_once_and_other_errors_pass_through() {
        let failed = Error::database_with(
            DatabaseErrorKind::Connection,
            None,
            ConnectFailed::new("Connection refused (os error 111)"),
        );
        let named = connecting_to(failed, Some("db:5432"));
        assert_eq!(
            named.chain(),
            "database error (connection): could not connect to db:5432: Connection refused (os error 111)"
        );
        assert_eq!(named.database_kind(), Some(DatabaseErrorKind::Connection));
        let other = connecting_to(Error::database("boom"), Some("db:5432"));
        assert_eq!(other.chain(), "database error (other): boom");
    }
}
