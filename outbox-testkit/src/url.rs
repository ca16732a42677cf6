//! Database URLs: where the services are, and the URL of one test database.

/// The URL in `var`, or `default` when unset or empty.
pub fn from_env(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// The server URL from the environment: `var` when set, else `DATABASE_URL`
/// when it names this kind of server (one of `schemes`), else `default`.
pub fn server_from_env(var: &str, schemes: &[&str], default: &str) -> String {
    pick(
        std::env::var(var).ok().as_deref(),
        std::env::var("DATABASE_URL").ok().as_deref(),
        schemes,
        default,
    )
}

/// [`server_from_env`] on the variables' values.
fn pick(own: Option<&str>, database_url: Option<&str>, schemes: &[&str], default: &str) -> String {
    let ours = |url: &&str| schemes.iter().any(|scheme| url.starts_with(scheme));
    own.filter(|url| !url.is_empty())
        .or_else(|| database_url.filter(|url| !url.is_empty()).filter(ours))
        .unwrap_or(default)
        .to_owned()
}

/// `url` with its database (the path) replaced by `database`; the query
/// string, if any, is kept.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut out = format!("{}/{database}", &base[..path_start]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// The server (`host:port`, without credentials) and the database a URL
/// names, for messages: `postgres://u:p@db:5432/test?x=1` gives
/// `("db:5432", "test")`.
pub fn server_and_database(url: &str) -> (&str, &str) {
    let base = url.split_once('?').map_or(url, |(base, _)| base);
    let rest = base.split_once("://").map_or(base, |(_, rest)| rest);
    let (authority, database) = rest.split_once('/').unwrap_or((rest, ""));
    let server = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    (server, database)
}

/// Whether a connection error says the database in the URL does not exist
/// (PostgreSQL's `database "x" does not exist`, MySQL's `Unknown database 'x'`).
pub fn is_missing_database(message: &str) -> bool {
    (message.contains("database \"") && message.contains("does not exist"))
        || message.contains("Unknown database")
}

/// A database name for `test`: lowercase, safe characters only, unique per
/// call, and within the 63/64-character limits of PostgreSQL and MySQL.
pub fn database_name(test: &str) -> String {
    let clean: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("outbox_{clean}_{:08x}", fastrand::u32(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_own_variable_wins_then_a_matching_database_url() {
        let pg = ["postgres://", "postgresql://"];
        let default = "postgres://localhost/test";
        assert_eq!(
            pick(Some("postgres://a/x"), Some("postgres://b/y"), &pg, default),
            "postgres://a/x"
        );
        assert_eq!(
            pick(None, Some("postgresql://b/y"), &pg, default),
            "postgresql://b/y"
        );
        assert_eq!(pick(Some(""), Some("mysql://c/z"), &pg, default), default);
        assert_eq!(pick(None, None, &pg, default), default);
    }

    #[test]
    fn names_the_server_and_database_without_credentials() {
        assert_eq!(
            server_and_database("postgres://u:secret@db:5432/test?sslmode=disable"),
            ("db:5432", "test")
        );
        assert_eq!(
            server_and_database("mysql://root@127.0.0.1:3306/test"),
            ("127.0.0.1:3306", "test")
        );
        assert_eq!(
            server_and_database("mysql://127.0.0.1:3306"),
            ("127.0.0.1:3306", "")
        );
        assert!(is_missing_database(r#"database "test" does not exist"#));
        assert!(is_missing_database("Unknown database 'test'"));
        assert!(!is_missing_database("Connection refused (os error 111)"));
    }

    #[test]
    fn replaces_only_the_database() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/test", "t1"),
            "postgres://postgres@127.0.0.1:5432/t1"
        );
        assert_eq!(
            with_database("mysql://root@localhost:3306/test?ssl-mode=disabled", "t2"),
            "mysql://root@localhost:3306/t2?ssl-mode=disabled"
        );
        assert_eq!(with_database("postgres://h", "t3"), "postgres://h/t3");
    }

    #[test]
    fn keeps_every_host_of_a_multi_host_url() {
        let url = "postgres://app@10.0.0.1:5432,10.0.0.2:5433/test?target_session_attrs=read-write";
        assert_eq!(
            with_database(url, "t4"),
            "postgres://app@10.0.0.1:5432,10.0.0.2:5433/t4?target_session_attrs=read-write"
        );
        assert_eq!(
            server_and_database(url),
            ("10.0.0.1:5432,10.0.0.2:5433", "test")
        );
    }

    #[test]
    fn names_are_safe_unique_and_short() {
        let a = database_name("Send::Concurrent-Calls once");
        let b = database_name("Send::Concurrent-Calls once");
        assert_ne!(a, b);
        assert!(a.starts_with("outbox_send__concurrent_calls_once_"));
        assert!(a.len() <= 63);
        assert!(database_name(&"x".repeat(200)).len() <= 63);
    }
}
