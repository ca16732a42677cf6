//! `--backend` on the tools' command lines: a [`BackendKind`] among those a
//! tool runs on.

use std::ffi::OsStr;

use clap::{
    Arg, Command,
    builder::{PossibleValue, TypedValueParser},
    error::ErrorKind,
};
use diesel_outbox_sql::BackendKind;

/// A clap value parser for `--backend` that takes the
/// [`name`](BackendKind::name) of one of the backends a tool runs on:
/// `--help` lists them, and any other value is refused with the list (and,
/// for a backend the tool does not run on, the reason it was given).
#[derive(Debug, Clone)]
pub struct BackendParser {
    supported: &'static [BackendKind],
    why: Option<&'static str>,
}

/// The parser of a `--backend` that takes one of `supported`.
pub fn parser(supported: &'static [BackendKind]) -> BackendParser {
    BackendParser {
        supported,
        why: None,
    }
}

impl BackendParser {
    /// Says why the tool does not run on the backends outside the
    /// supported ones, when one of them is given.
    pub fn because(self, why: &'static str) -> Self {
        Self {
            why: Some(why),
            ..self
        }
    }

    /// `postgres, mysql or sqlite`.
    fn expected(&self) -> String {
        let names: Vec<&str> = self.supported.iter().map(|kind| kind.name()).collect();
        match names.split_last() {
            Some((last, [])) => (*last).to_owned(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => "nothing".to_owned(),
        }
    }
}

impl TypedValueParser for BackendParser {
    type Value = BackendKind;

    fn parse_ref(
        &self,
        cmd: &Command,
        arg: Option<&Arg>,
        value: &OsStr,
    ) -> Result<BackendKind, clap::Error> {
        let given = value.to_string_lossy();
        let reason = match given.parse::<BackendKind>() {
            Ok(kind) if self.supported.contains(&kind) => return Ok(kind),
            Ok(_) => self.why.map(|why| format!("{why}; ")).unwrap_or_default(),
            Err(_) => String::new(),
        };
        let arg = arg.map_or_else(|| "--backend".to_owned(), ToString::to_string);
        let message = format!(
            "invalid value '{given}' for '{arg}': {reason}expected {}\n",
            self.expected()
        );
        Err(clap::Error::raw(ErrorKind::InvalidValue, message).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(self.supported.iter().map(|kind| {
            PossibleValue::new(kind.name()).help(kind.product())
        })))
    }
}

#[cfg(test)]
mod tests {
    use clap::{Arg, Command, error::ErrorKind};
    use diesel_outbox_sql::BackendKind;

    use super::BackendParser;

    const SERVERS: [BackendKind; 2] = [BackendKind::Postgres, BackendKind::Mysql];

    fn parse(parser: BackendParser, value: &str) -> Result<BackendKind, clap::Error> {
        let command =
            Command::new("tool").arg(Arg::new("backend").long("backend").value_parser(parser));
        let matches = command.try_get_matches_from(["tool", "--backend", value])?;
        Ok(*matches
            .get_one::<BackendKind>("backend")
            .expect("--backend was given"))
    }

    #[test]
    fn takes_each_supported_name() {
        for kind in BackendKind::ALL {
            assert_eq!(
                parse(super::parser(&BackendKind::ALL), kind.name()).ok(),
                Some(kind)
            );
        }
        for kind in SERVERS {
            assert_eq!(parse(super::parser(&SERVERS), kind.name()).ok(), Some(kind));
        }
    }

    #[test]
    fn refuses_an_unsupported_backend_with_the_reason() {
        let parser = super::parser(&SERVERS).because("the tool faults servers");
        let error = parse(parser.clone(), "sqlite").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidValue);
        assert_eq!(
            error.to_string(),
            "error: invalid value 'sqlite' for '--backend <backend>': the tool faults servers; \
             expected postgres or mysql\n"
        );
        let error = parse(parser, "oracle").unwrap_err();
        assert_eq!(
            error.to_string(),
            "error: invalid value 'oracle' for '--backend <backend>': expected postgres or mysql\n"
        );
        let error = parse(super::parser(&BackendKind::ALL), "postgresql").unwrap_err();
        assert_eq!(
            error.to_string(),
            "error: invalid value 'postgresql' for '--backend <backend>': \
             expected postgres, mysql or sqlite\n"
        );
    }

    #[test]
    fn help_lists_the_supported_backends() {
        let mut command = Command::new("tool").arg(
            Arg::new("backend")
                .long("backend")
                .value_parser(super::parser(&SERVERS)),
        );
        let help = command.render_long_help().to_string();
        assert!(help.contains("postgres: PostgreSQL"), "{help}");
        assert!(help.contains("mysql:    MySQL or MariaDB"), "{help}");
        assert!(!help.contains("sqlite"), "{help}");
    }
}
