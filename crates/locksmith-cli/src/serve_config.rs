//! `locksmith serve --config FILE`: options from a TOML file whose keys are the long option
//! names (`max-connections = 500`, `data-dir = "/var/lib/locksmith"`, `insecure-listen-anywhere
//! = true`). A flag beats an environment variable (clap reads those), which beats the file,
//! which beats the default.
//!
//! The file's values go through the same parsers as flags: each key the command line and the
//! environment left unset becomes `--key value` in front of the real arguments, and clap parses
//! the lot again. So a value means the same wherever it is written.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Args, FromArgMatches};

use crate::serve::ServeArgs;

/// A config file that cannot be used (`locksmith serve` exits with `exit::CONFIG`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigError {
    path: PathBuf,
    message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "config file {}: {}", self.path.display(), self.message)
    }
}

/// `locksmith serve`'s arguments (`argv`: what follows `serve`) with the file named by
/// `--config` (or `LOCKSMITH_CONFIG`) folded in; `None` when no file is named.
///
/// # Errors
/// The file cannot be read or parsed, names an unknown key, or a value its option refuses.
pub(crate) fn with_config_file(argv: &[OsString]) -> Result<Option<ServeArgs>, ConfigError> {
    let cmd = command();
    let error = |path: &Path, message: String| ConfigError { path: path.to_path_buf(), message };
    // The arguments were parsed once already; this parse only finds the file and each
    // value's source.
    let matches = cmd.clone().try_get_matches_from(argv).map_err(|e| error(Path::new("?"), first_line(&e)))?;
    let Some(path) = matches.get_one::<PathBuf>("config").cloned() else { return Ok(None) };
    let text = std::fs::read_to_string(&path).map_err(|e| error(&path, format!("cannot read it: {e}")))?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| error(&path, e.message().to_string()))?;
    let mut args = file_args(&cmd, &matches, &table).map_err(|m| error(&path, m))?;
    args.extend(argv.iter().cloned());
    let matches = cmd.try_get_matches_from(&args).map_err(|e| error(&path, file_error(&e)))?;
    ServeArgs::from_arg_matches(&matches).map(Some).map_err(|e| error(&path, first_line(&e)))
}

/// The `serve` command on its own, parsing arguments without a program name.
fn command() -> clap::Command {
    ServeArgs::augment_args(clap::Command::new("serve")).no_binary_name(true)
}

/// The file's settings as arguments, for each key whose option was given neither as a flag nor
/// in the environment. Values are checked when the whole is parsed (see [`file_error`]).
fn file_args(cmd: &clap::Command, matches: &ArgMatches, table: &toml::Table) -> Result<Vec<OsString>, String> {
    let mut args = Vec::new();
    for (key, value) in table {
        let arg =
            cmd.get_arguments().find(|a| a.get_long() == Some(key.as_str()) && key != "config").ok_or_else(|| {
                format!(
                    "unknown key `{key}` (keys are the long option names of `locksmith serve`, e.g. `max-connections`)"
                )
            })?;
        if matches!(
            matches.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        let flag = OsString::from(format!("--{key}"));
        if matches!(arg.get_action(), ArgAction::SetTrue) {
            match value {
                toml::Value::Boolean(true) => args.push(flag),
                toml::Value::Boolean(false) => {}
                _ => return Err(format!("key `{key}`: expected true or false, got a {}", value.type_str())),
            }
            continue;
        }
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            _ => return Err(format!("key `{key}`: expected a string or a number, got a {}", value.type_str())),
        };
        args.extend([flag, OsString::from(text)]);
    }
    Ok(args)
}

/// What clap says of the merged arguments, naming the file's key. The command line alone parsed
/// already, so what fails now is a value from the file (or one the file is missing: a
/// `tls-cert` without `tls-key`).
fn file_error(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let message = first_line(e);
    match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => {
            let key = arg.trim_start_matches('-').split([' ', '=']).next().unwrap_or(arg);
            format!("key `{key}`: {message}")
        }
        // Missing options: clap lists them on the lines after the first.
        Some(ContextValue::Strings(args)) => format!("{message} {}", args.join(", ")),
        _ => message,
    }
}

/// The first line of clap's message, without its `error: ` prefix (the rest is usage help).
fn first_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let line = text.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn parse(file: &str, argv: &[&str]) -> Result<ServeArgs, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve.toml");
        std::fs::write(&path, file).unwrap();
        let mut all: Vec<OsString> = vec!["--config".into(), path.into()];
        all.extend(argv.iter().map(OsString::from));
        with_config_file(&all).map(|a| a.expect("a config file was named"))
    }

    /// A file value applies where nothing else sets the option; a flag overrides it; an
    /// environment variable overrides it too but not a flag.
    #[test]
    fn a_flag_beats_the_environment_which_beats_the_file_which_beats_the_default() {
        let file = "open-timeout = \"3s\"\nmax-connections = 7\nfirst-byte-timeout = \"4s\"\ninsecure-listen-anywhere = true\n";
        let a = parse(file, &[]).unwrap();
        assert_eq!(a.open_timeout, Duration::from_secs(3));
        assert_eq!(a.max_connections, 7);
        assert!(a.insecure_listen_anywhere);
        assert_eq!(a.keepalive_timeout, Duration::from_secs(10), "a default");

        let a = parse(file, &["--open-timeout", "5s"]).unwrap();
        assert_eq!(a.open_timeout, Duration::from_secs(5), "the flag");
        assert_eq!(a.max_connections, 7, "the file, for what the flags leave alone");

        // Only this test reads this variable.
        std::env::set_var("LOCKSMITH_FIRST_BYTE_TIMEOUT", "6s");
        let from_env = parse(file, &[]).map(|a| a.first_byte_timeout);
        let from_flag = parse(file, &["--first-byte-timeout", "2s"]).map(|a| a.first_byte_timeout);
        std::env::remove_var("LOCKSMITH_FIRST_BYTE_TIMEOUT");
        assert_eq!(from_env.unwrap(), Duration::from_secs(6), "the environment over the file");
        assert_eq!(from_flag.unwrap(), Duration::from_secs(2), "the flag over the environment");
    }

    /// Every error names the key, and the file.
    #[test]
    fn a_bad_key_or_value_is_refused_naming_it() {
        let e = parse("max-conections = 5\n", &[]).unwrap_err().to_string();
        assert!(e.contains("unknown key `max-conections`") && e.contains("serve.toml"), "{e}");
        let e = parse("max-connections = \"lots\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("key `max-connections`") && e.contains("lots"), "{e}");
        let e = parse("open-timeout = \"soon\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("key `open-timeout`"), "{e}");
        let e = parse("insecure-listen-anywhere = \"yes\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("key `insecure-listen-anywhere`: expected true or false"), "{e}");
        let e = parse("config = \"other.toml\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("unknown key `config`"), "{e}");
        let e = parse("listen = [1, 2]\n", &[]).unwrap_err().to_string();
        assert!(e.contains("key `listen`"), "{e}");
        let e = parse("tls-cert = \"server.pem\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("--tls-key"), "{e}");
        let e = parse("not toml", &[]).unwrap_err().to_string();
        assert!(e.starts_with("config file "), "{e}");
    }

    /// Without `--config` nothing is read.
    #[test]
    fn without_a_file_there_is_nothing_to_fold_in() {
        assert!(matches!(with_config_file(&[OsString::from("--open-timeout"), "2s".into()]), Ok(None)));
    }
}
