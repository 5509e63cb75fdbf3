//! Argument values and parsers more than one subcommand takes.

use std::time::Duration;

/// Default backend when neither `--backend` nor `LOCKSMITH_BACKEND` is given.
pub const DEFAULT_BACKEND: &str = "locksmith://127.0.0.1:7531";

/// Parses `500ms`, `10s`, `2m`, `1m30s` for clap.
pub fn duration_arg(s: &str) -> Result<Duration, String> {
    locksmith_core::parse_duration(s).map_err(|e| e.to_string())
}

/// Parses a session TTL for clap: a duration in the accepted range, refused in the user's own
/// spelling.
pub fn ttl_arg(s: &str) -> Result<Duration, String> {
    use locksmith_core::{format_duration, validate_ttl, MAX_TTL, MIN_TTL};
    let ttl = duration_arg(s)?;
    validate_ttl(ttl).map_err(|_| {
        let (min, max) = (format_duration(MIN_TTL), format_duration(MAX_TTL));
        format!("{s:?} is outside the TTL range {min} to {max}")
    })
}

/// `--durability` values of the native server (`locksmith serve`, and the server `locksmith
/// chaos` starts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DurabilityArg {
    /// Every grant is on disk before its holder hears of it.
    Grants,
    /// Only reserved token blocks and the longest lease are on disk.
    Leases,
}

impl DurabilityArg {
    /// The value as `--durability` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Grants => "grants",
            Self::Leases => "leases",
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    /// `as_str` spells each value as `--durability` accepts it (chaos passes it to `serve`).
    #[test]
    fn durability_values_spell_as_clap_parses_them() {
        for v in DurabilityArg::value_variants() {
            let parsed = DurabilityArg::from_str(v.as_str(), false);
            assert_eq!(parsed, Ok(*v), "{}", v.as_str());
        }
    }

    /// A TTL outside the range is refused in the user's own spelling; durations take units.
    #[test]
    fn ttls_out_of_range_are_refused_as_written() {
        assert_eq!(duration_arg("1m30s"), Ok(Duration::from_secs(90)));
        assert!(duration_arg("soon").is_err());
        assert_eq!(ttl_arg("10s"), Ok(Duration::from_secs(10)));
        let e = ttl_arg("2h").unwrap_err();
        assert!(e.starts_with("\"2h\" is outside the TTL range"), "{e}");
    }
}
