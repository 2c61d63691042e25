//! Command-line interface.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, ConfigError, LogFormat};

/// The default config file, read when it exists and `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/berth/config.toml";

/// berth: a Kubernetes container runtime that speaks CRI v1.
#[derive(Debug, Parser)]
#[command(name = "berth", version, about)]
pub struct Cli {
    #[command(flatten)]
    pub flags: Flags,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Flags that override the config file.
#[derive(Debug, Args)]
pub struct Flags {
    /// TOML config file (default: /etc/berth/config.toml when it exists).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Unix socket to serve CRI on.
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Directory for persistent state.
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Directory for runtime state.
    #[arg(long, global = true, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// Log filter: error, warn, info, debug, trace, or a tracing directive list.
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Log format.
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Configuration helpers.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Recovery runs whenever berth starts; with --dry-run, list what it
    /// would change now, changing nothing.
    Recover {
        /// Only list the changes.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Print the embedded default configuration as TOML.
    Default,
    /// Print the effective configuration (defaults, file, flags) as TOML.
    Show,
}

impl Flags {
    /// Defaults, then the config file, then these flags; validated.
    pub fn effective_config(&self) -> Result<Config, ConfigError> {
        let mut config = match &self.config {
            Some(path) => Config::load(path)?,
            None if std::path::Path::new(DEFAULT_CONFIG_PATH).exists() => {
                Config::load(std::path::Path::new(DEFAULT_CONFIG_PATH))?
            }
            None => Config::default(),
        };
        if let Some(v) = &self.socket {
            config.socket = v.clone();
        }
        if let Some(v) = &self.root {
            config.root = v.clone();
        }
        if let Some(v) = &self.state {
            config.state = v.clone();
        }
        if let Some(v) = &self.log_level {
            config.log_level = v.clone();
        }
        if let Some(v) = self.log_format {
            config.log_format = v;
        }
        config.validate()?;
        Ok(config)
    }
}
