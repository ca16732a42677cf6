//! [`BackendKind`]: which SQL backend a database URL, or a name on a
//! command line, means; one answer for the `outbox` CLI and the tools.

use std::{fmt, str::FromStr};

/// One of the SQL backends the outbox runs on.
///
/// Chosen from a database URL's scheme with [`of_url`](Self::of_url), or
/// from its [`name`](Self::name) with [`FromStr`]; [`Display`](fmt::Display)
/// prints the name, so the two round-trip.
///
/// ```
/// use diesel_outbox_sql::BackendKind;
///
/// let kind = BackendKind::of_url("postgresql://app@db.internal/orders")?;
/// assert_eq!(kind, BackendKind::Postgres);
/// assert_eq!("mysql".parse::<BackendKind>()?, BackendKind::of_url("mariadb://db/orders")?);
/// assert_eq!(
///     BackendKind::of_url("redis://cache/0").unwrap_err().to_string(),
///     "unsupported database URL: expected postgres://, mysql:// or sqlite://, got `redis`"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendKind {
    /// PostgreSQL: `postgres://` or `postgresql://`.
    Postgres,
    /// MySQL or MariaDB: `mysql://` or `mariadb://`.
    Mysql,
    /// SQLite: `sqlite://PATH` or `file:PATH`.
    Sqlite,
}

impl BackendKind {
    /// Every backend, in the order of [`of_url`](Self::of_url)'s message.
    pub const ALL: [BackendKind; 3] = [Self::Postgres, Self::Mysql, Self::Sqlite];

    /// The backend a database URL's scheme names: `postgres://` and
    /// `postgresql://`, `mysql://` and `mariadb://`, `sqlite://` and
    /// `file:`. The schemes are matched as written, in lower case.
    ///
    /// The error names the scheme it found (or that there was none), never
    /// the rest of the URL, which may hold a password.
    pub fn of_url(url: &str) -> Result<Self, UnsupportedUrl> {
        if url.starts_with("file:") {
            return Ok(Self::Sqlite);
        }
        match url.split_once("://").map(|(scheme, _)| scheme) {
            Some("postgres" | "postgresql") => Ok(Self::Postgres),
            Some("mysql" | "mariadb") => Ok(Self::Mysql),
            Some("sqlite") => Ok(Self::Sqlite),
            scheme => Err(UnsupportedUrl {
                scheme: scheme.map(str::to_owned),
            }),
        }
    }

    /// The backend's name: `postgres`, `mysql` or `sqlite`, what
    /// [`FromStr`] parses and [`Display`](fmt::Display) prints (and what
    /// the command lines' `--backend` takes).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::Mysql => "mysql",
            Self::Sqlite => "sqlite",
        }
    }

    /// The database the backend talks to, for people: `PostgreSQL`,
    /// `MySQL or MariaDB`, `SQLite`.
    pub const fn product(self) -> &'static str {
        match self {
            Self::Postgres => "PostgreSQL",
            Self::Mysql => "MySQL or MariaDB",
            Self::Sqlite => "SQLite",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = UnknownBackend;

    /// Parses a [`name`](BackendKind::name), exactly as written.
    fn from_str(name: &str) -> Result<Self, UnknownBackend> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| UnknownBackend {
                name: name.to_owned(),
            })
    }
}

/// A database URL whose scheme names no backend: the error of
/// [`BackendKind::of_url`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedUrl {
    scheme: Option<String>,
}

impl UnsupportedUrl {
    /// The scheme the URL has (what comes before its `://`), or `None` if
    /// it has none.
    pub fn scheme(&self) -> Option<&str> {
        self.scheme.as_deref()
    }
}

impl fmt::Display for UnsupportedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unsupported database URL: expected postgres://, mysql:// or sqlite://, got `{}`",
            self.scheme().unwrap_or("no scheme")
        )
    }
}

impl std::error::Error for UnsupportedUrl {}

/// A name that is no backend's: the error of [`BackendKind`]'s [`FromStr`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownBackend {
    name: String,
}

impl UnknownBackend {
    /// The name that was given.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for UnknownBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown backend `{}`: expected postgres, mysql or sqlite",
            self.name
        )
    }
}

impl std::error::Error for UnknownBackend {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn of_url_reads_each_backends_schemes() {
        let cases = [
            (
                "postgres://postgres@127.0.0.1:5432/test",
                BackendKind::Postgres,
            ),
            (
                "postgresql://app:secret@db/orders?sslmode=require",
                BackendKind::Postgres,
            ),
            ("mysql://root@127.0.0.1:3306/test", BackendKind::Mysql),
            ("mariadb://root@127.0.0.1:3306/test", BackendKind::Mysql),
            ("sqlite:///tmp/outbox.db", BackendKind::Sqlite),
            ("sqlite://outbox.db", BackendKind::Sqlite),
            ("file:/tmp/outbox.db?mode=rwc", BackendKind::Sqlite),
            ("file:outbox.db", BackendKind::Sqlite),
        ];
        for (url, kind) in cases {
            assert_eq!(BackendKind::of_url(url), Ok(kind), "{url}");
        }
    }

    #[test]
    fn of_url_names_an_unknown_scheme_and_not_the_rest() {
        let error = BackendKind::of_url("redis://user:secret@cache/0").unwrap_err();
        assert_eq!(error.scheme(), Some("redis"));
        let message = error.to_string();
        assert_eq!(
            message,
            "unsupported database URL: expected postgres://, mysql:// or sqlite://, got `redis`"
        );
        assert!(!message.contains("secret"), "{message}");
        // Schemes are matched as written.
        let error = BackendKind::of_url("POSTGRES://db/orders").unwrap_err();
        assert_eq!(error.scheme(), Some("POSTGRES"));
        let error = BackendKind::of_url("://db/orders").unwrap_err();
        assert_eq!(error.scheme(), Some(""));
    }

    #[test]
    fn of_url_says_when_there_is_no_scheme() {
        for url in [
            "/tmp/outbox.db",
            "outbox.db",
            "",
            "postgres:/db",
            "sqlite:outbox.db",
        ] {
            let error = BackendKind::of_url(url).unwrap_err();
            assert_eq!(error.scheme(), None, "{url}");
            assert_eq!(
                error.to_string(),
                "unsupported database URL: expected postgres://, mysql:// or sqlite://, got `no scheme`",
                "{url}"
            );
        }
    }

    #[test]
    fn names_round_trip_and_nothing_else_parses() {
        for kind in BackendKind::ALL {
            assert_eq!(kind.to_string(), kind.name());
            assert_eq!(kind.name().parse::<BackendKind>(), Ok(kind));
        }
        assert_eq!(
            BackendKind::ALL.map(BackendKind::name),
            ["postgres", "mysql", "sqlite"]
        );
        for name in ["postgresql", "mariadb", "Postgres", "sqlite3", " mysql", ""] {
            let error = name.parse::<BackendKind>().unwrap_err();
            assert_eq!(error.name(), name);
            assert_eq!(
                error.to_string(),
                format!("unknown backend `{name}`: expected postgres, mysql or sqlite")
            );
        }
    }
}
