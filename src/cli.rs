//! Command-line interface.

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, ConfigError, Layers, Loaded, LogFormat};

/// The default config file, read when it exists and `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/berth/config.toml";

/// The name of the drop-in directory beside the main config file.
pub const DROP_IN_DIR_NAME: &str = "config.d";

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
    /// Drop-in directory: its `*.toml` files are merged after the main file,
    /// in lexical order (default: `config.d` beside the main file, i.e.
    /// /etc/berth/config.d).
    #[arg(long, global = true, value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
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
    /// Check the host's prerequisites (runtimes, cgroups, overlayfs, CNI,
    /// sysctls, security modules) and say how to fix what is missing; exits
    /// non-zero when something required is missing.
    Check,
    /// Print a shell completion script for berth.
    #[command(hide = true)]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print berth's man page (roff).
    #[command(hide = true)]
    Man,
    /// Image pulls and archives, through the running daemon (its socket:
    /// --socket or the configured one).
    Images {
        #[command(subcommand)]
        action: ImagesAction,
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
pub enum ImagesAction {
    /// Pull an image into the daemon's image store, as kubelet's pulls do,
    /// showing each layer's progress: a bar per layer on a terminal, a line
    /// per finished layer otherwise; then the image id and the reference
    /// with its digest.
    Pull {
        /// Credentials for the image's registry, USER:PASSWORD (else the
        /// node's, from `registry.auth_file`, or none).
        #[arg(long, value_name = "USER:PASSWORD")]
        creds: Option<String>,
        /// The image reference.
        image: String,
    },
    /// Load docker-archive (`docker save`) or OCI-archive tarballs, or OCI
    /// layout directories, into the daemon's image store, with their names.
    Import {
        /// Archives (tar files) or OCI layout directories.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Write images as an OCI archive with Docker's manifest.json, as `ctr
    /// images export` does (readable by skopeo as oci-archive: and
    /// docker-archive:, `ctr import`, `docker load` and `berth images
    /// import`). Each image is written under the names given; one given by
    /// id or digest without a name.
    Export {
        /// The archive to write.
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// Write each image under every name it has in the store too.
        #[arg(long)]
        all_tags: bool,
        /// Image references or ids.
        #[arg(required = true)]
        images: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Print the embedded default configuration as TOML.
    Default,
    /// Print the effective configuration (defaults, file, drop-ins, flags)
    /// as TOML, and which file or flag set each key.
    Show,
    /// Print the embedded defaults as the commented config file that the
    /// package installs as /etc/berth/config.toml.
    DefaultCommented,
    /// Read a containerd config (version 2, as containerd 1.6/1.7 write it,
    /// or 3, as 2.x does) and print the equivalent berth config; each key
    /// that is not carried over is printed as a comment saying why.
    ImportContainerd {
        /// The containerd config file, e.g. /etc/containerd/config.toml.
        file: PathBuf,
    },
}

impl Flags {
    /// Defaults, then the config file, then these flags; validated.
    pub fn effective_config(&self) -> Result<Config, ConfigError> {
        let loaded = self.load()?;
        loaded.validate()?;
        Ok(loaded.config)
    }

    /// The main file (`--config`, else /etc/berth/config.toml when it
    /// exists), the drop-ins (`--config-dir`, else `config.d` beside the main
    /// file), then these flags; not validated.
    pub fn load(&self) -> Result<Loaded, ConfigError> {
        let default_path = Path::new(DEFAULT_CONFIG_PATH);
        let main = self.config.as_deref().unwrap_or(default_path);
        let mut layers = Layers::new();
        if self.config.is_some() || main.exists() {
            layers.add_file(main)?;
        }
        match &self.config_dir {
            Some(dir) => layers.add_dir(dir, true)?,
            None => {
                let dir = main
                    .parent()
                    .unwrap_or(Path::new("."))
                    .join(DROP_IN_DIR_NAME);
                layers.add_dir(&dir, false)?;
            }
        }
        let flags: [(&str, &'static str, bool); 5] = [
            ("socket", "--socket", self.socket.is_some()),
            ("root", "--root", self.root.is_some()),
            ("state", "--state", self.state.is_some()),
            ("log_level", "--log-level", self.log_level.is_some()),
            ("log_format", "--log-format", self.log_format.is_some()),
        ];
        for (key, flag, set) in flags {
            if set {
                layers.flag(key, flag);
            }
        }
        layers.finish(|config| {
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
        })
    }
}
