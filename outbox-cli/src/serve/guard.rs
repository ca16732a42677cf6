//! What keeps the dashboard's buttons for its own page: a per-process CSRF
//! token in every form, and `Host`, `Origin` and `Sec-Fetch-Site` checks.

use std::fmt::Write as _;

use std::collections::HashMap;

use axum::{
    extract::{Form, rejection::FormRejection},
    http::{HeaderMap, header},
};

/// The token every form carries and every POST must send back: 32 random
/// bytes, hex, drawn when the process starts.
#[derive(Clone)]
pub(crate) struct CsrfToken(String);

impl std::fmt::Debug for CsrfToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CsrfToken(..)")
    }
}

impl CsrfToken {
    /// A fresh token from the operating system's random source.
    pub(crate) fn generate() -> anyhow::Result<Self> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|error| anyhow::anyhow!("no random source for the CSRF token: {error}"))?;
        let mut hex = String::with_capacity(64);
        for byte in bytes {
            let _ = write!(hex, "{byte:02x}");
        }
        Ok(Self(hex))
    }

    /// The value forms embed.
    pub(crate) fn value(&self) -> &str {
        &self.0
    }

    /// Whether `sent` is this token, compared in constant time.
    pub(crate) fn matches(&self, sent: &str) -> bool {
        let (ours, theirs) = (self.0.as_bytes(), sent.as_bytes());
        ours.len() == theirs.len()
            && ours
                .iter()
                .zip(theirs)
                .fold(0u8, |diff, (a, b)| diff | (a ^ b))
                == 0
    }
}

/// The host names a request may address: loopback names, plus those the
/// operator allowed for a proxy in front.
#[derive(Debug, Clone)]
pub(crate) struct Hosts {
    allowed: Vec<String>,
}

impl Hosts {
    /// Loopback names and `extra`.
    pub(crate) fn new(extra: &[String]) -> Self {
        let mut allowed: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        allowed.extend(extra.iter().map(|host| host.to_ascii_lowercase()));
        Self { allowed }
    }

    /// Whether the request's `Host` names an allowed host (any port): a page
    /// reached through a foreign name (DNS rebinding) is refused.
    pub(crate) fn allows(&self, headers: &HeaderMap) -> bool {
        let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let name = strip_port(host).to_ascii_lowercase();
        self.allowed.contains(&name)
    }
}

/// `host[:port]` without the port; an IPv6 literal keeps its brackets.
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

/// Why a POST is refused, if it is: it must come from this dashboard's own
/// pages (same origin), as far as the browser says, and carry the token.
pub(crate) fn refuse_post(
    headers: &HeaderMap,
    token: &CsrfToken,
    sent: Option<&str>,
) -> Option<&'static str> {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && !matches!(site, "same-origin" | "none")
    {
        return Some("cross-site request");
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
        let origin = origin.to_str().ok();
        let same = match (origin, host) {
            (Some(origin), Some(host)) => origin
                .split_once("://")
                .is_some_and(|(_, rest)| rest.eq_ignore_ascii_case(host)),
            _ => false,
        };
        if !same {
            return Some("the request's Origin is not this dashboard");
        }
    }
    match sent {
        Some(sent) if token.matches(sent) => None,
        Some(_) => Some("wrong CSRF token"),
        None => Some("missing CSRF token"),
    }
}

/// [`refuse_post`] for a POSTed form, whose `csrf` field carries the
/// token; a form that could not be read carries none.
pub(crate) fn refuse_form(
    headers: &HeaderMap,
    token: &CsrfToken,
    form: &Result<Form<HashMap<String, String>>, FormRejection>,
) -> Option<&'static str> {
    let sent = form
        .as_ref()
        .ok()
        .and_then(|Form(fields)| fields.get("csrf"))
        .map(String::as_str);
    refuse_post(headers, token, sent)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn a_post_needs_the_token_and_the_same_origin() -> anyhow::Result<()> {
        let token = CsrfToken::generate()?;
        let same = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ]);
        assert_eq!(refuse_post(&same, &token, Some(token.value())), None);
        assert!(refuse_post(&same, &token, None).is_some());
        assert!(refuse_post(&same, &token, Some("0")).is_some());
        let foreign = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://evil.example"),
        ]);
        assert!(refuse_post(&foreign, &token, Some(token.value())).is_some());
        let cross = headers(&[("host", "127.0.0.1:8080"), ("sec-fetch-site", "cross-site")]);
        assert!(refuse_post(&cross, &token, Some(token.value())).is_some());
        Ok(())
    }

    #[test]
    fn only_loopback_and_allowed_hosts_are_served() {
        let hosts = Hosts::new(&["outbox.internal".to_owned()]);
        for host in [
            "127.0.0.1:80",
            "localhost",
            "[::1]:8080",
            "Outbox.Internal:443",
        ] {
            assert!(hosts.allows(&headers(&[("host", host)])), "{host}");
        }
        for host in ["evil.example", "127.0.0.2:80", "[::2]"] {
            assert!(!hosts.allows(&headers(&[("host", host)])), "{host}");
        }
        assert!(!hosts.allows(&HeaderMap::new()));
    }
}
