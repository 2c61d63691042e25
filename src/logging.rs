//! Logging through `tracing` to stderr: human readable by default (colours
//! only when stderr is a terminal), JSON lines on request.
//!
//! The JSON fields are a contract for log shippers (docs/operating.md,
//! *Logs*): `timestamp` (RFC 3339, UTC), `level` (`ERROR`…`TRACE`), `target`
//! (the Rust module), `fields` (`message` and the event's own fields) and,
//! inside a span, `span` (its `name` and fields, such as the RPC's `method`
//! and the pod or container id). Fields are only ever added.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{Config, LogFormat};

/// Installs the global subscriber, writing to stderr.
pub fn init(config: &Config) {
    let filter = EnvFilter::try_new(&config.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(use_colour(std::io::stderr().is_terminal()));
    match config.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
}

/// Colours (ANSI escapes) only on a terminal, and never when `NO_COLOR` is
/// set (<https://no-color.org>): a file, a pipe or journald gets plain text.
fn use_colour(stderr_is_terminal: bool) -> bool {
    stderr_is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_colour_off_a_terminal() {
        assert!(!use_colour(false));
    }
}
