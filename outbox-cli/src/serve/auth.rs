//! Optional access control for a dashboard that must listen beyond
//! loopback: HTTP basic authentication against a user and password read
//! from a file (`--auth-file`), compared in constant time.

use std::{path::Path, sync::Arc};

use axum::{
    extract::{Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::{Html, IntoResponse, Response},
};
use base64::Engine as _;

use super::pages;
use crate::failure::Failure;

/// The `Authorization` header value every request must carry.
pub(crate) struct Credentials {
    expected: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(..)")
    }
}

impl Credentials {
    /// `USER:PASSWORD` from the first line of the file at `path`; a usage
    /// error naming the file when it cannot be read or holds no such line.
    pub(crate) fn read(path: &Path) -> Result<Self, Failure> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| Failure::Usage(format!("--auth-file {}: {error}", path.display())))?;
        Self::parse(text.lines().next().unwrap_or_default())
            .map_err(|reason| Failure::Usage(format!("--auth-file {}: {reason}", path.display())))
    }

    fn parse(line: &str) -> Result<Self, &'static str> {
        let line = line.trim_end_matches('\r');
        match line.split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => Ok(Self {
                expected: format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(line)
                ),
            }),
            _ => Err("its first line must be USER:PASSWORD, both not empty"),
        }
    }

    /// Whether `sent` is the expected header value, compared in constant
    /// time.
    fn accepts(&self, sent: &[u8]) -> bool {
        let ours = self.expected.as_bytes();
        ours.len() == sent.len()
            && ours
                .iter()
                .zip(sent)
                .fold(0u8, |diff, (a, b)| diff | (a ^ b))
                == 0
    }
}

/// Lets a request through when no credentials are set or it carries them;
/// else answers 401, which makes a browser ask for them.
pub(crate) async fn require(
    State(credentials): State<Option<Arc<Credentials>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(credentials) = credentials else {
        return next.run(request).await;
    };
    let sent = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    if credentials.accepts(sent) {
        return next.run(request).await;
    }
    let mut response = (
        StatusCode::UNAUTHORIZED,
        Html(pages::problem(
            "sign in",
            "this dashboard needs its user and password",
        )),
    )
        .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"outbox\", charset=\"UTF-8\""),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_basic_with_the_line_in_base64() {
        let credentials = Credentials::parse("ops:s3cret\r").unwrap();
        assert!(credentials.accepts(b"Basic b3BzOnMzY3JldA=="));
        assert!(!credentials.accepts(b"Basic b3BzOnMzY3JldB=="));
        assert!(!credentials.accepts(b""));
    }

    #[test]
    fn a_line_without_user_or_password_is_refused() {
        for line in ["", "ops", "ops:", ":s3cret"] {
            assert!(Credentials::parse(line).is_err(), "{line:?}");
        }
    }
}
