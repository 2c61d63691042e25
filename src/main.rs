//! The berth daemon: a Kubernetes container runtime that serves CRI v1.

mod apparmor;
mod check;
mod cli;
mod compose;
mod config;
mod container;
mod core;
mod counters;
mod daemon;
mod error;
mod failpoint;
mod host_dirs;
mod images_cli;
mod layout;
mod logging;
mod node;
mod nri;
mod objects;
mod pull_render;
mod sandbox;
mod sd_notify;
mod server;
mod undo;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use cli::{Cli, Command, ConfigAction, Flags};
use config::{Config, Loaded};

fn main() -> ExitCode {
    // First, while berth has one thread: no child of berth may inherit it.
    sd_notify::take_socket();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Config { action }) => config_command(&cli.flags, action),
        Some(Command::Check) => check_command(&cli.flags),
        Some(Command::Completions { shell }) => {
            clap_complete::generate(shell, &mut Cli::command(), "berth", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Some(Command::Man) => {
            let man = clap_mangen::Man::new(Cli::command()).section("8");
            match man.render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(e.into()),
            }
        }
        Some(Command::Recover { dry_run }) => recover_command(&cli.flags, dry_run),
        Some(Command::Images { action }) => match images_cli::run(&cli.flags, action) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        },
        None => serve(&cli.flags),
    }
}

/// `berth config default|default-commented|show|import-containerd`.
fn config_command(flags: &Flags, action: ConfigAction) -> ExitCode {
    match action {
        ConfigAction::ImportContainerd { file } => match config::import_containerd_file(&file) {
            Ok(text) => print!("{text}"),
            Err(e) => return fail(e.into()),
        },
        ConfigAction::Default => print!("{}", Config::default_toml()),
        ConfigAction::DefaultCommented => print!("{}", Config::commented_default_toml()),
        ConfigAction::Show => match flags.load().and_then(|l| l.validate().map(|()| l)) {
            Ok(loaded) => print!("{}", show(&loaded)),
            Err(e) => return fail(e.into()),
        },
    }
    ExitCode::SUCCESS
}

/// `berth check`: the host's checks, and the configuration's.
fn check_command(flags: &Flags) -> ExitCode {
    let loaded = match flags.load() {
        Ok(loaded) => loaded,
        Err(e) => return fail(e.into()),
    };
    let mut items = check::run(&loaded.config, &check::RealHost);
    // A configuration that does not validate is reported with the host's checks.
    if let Err(e) = loaded.validate() {
        items.insert(0, check::config_item(&e.to_string()));
    }
    print!("{}", check::render(&items));
    if check::passed(&items) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `berth recover --dry-run`: what recovery would change.
fn recover_command(flags: &Flags, dry_run: bool) -> ExitCode {
    if !dry_run {
        return fail(anyhow::anyhow!(
            "recovery runs when berth starts; use --dry-run to list what it would change"
        ));
    }
    let config = match flags.effective_config() {
        Ok(config) => config,
        Err(e) => return fail(e.into()),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(e.into()),
    };
    let layout = compose::layout(&config);
    match runtime.block_on(compose::recovery_plan(&config, layout)) {
        Ok(lines) if lines.is_empty() => {
            println!("nothing to recover");
            ExitCode::SUCCESS
        }
        Ok(lines) => {
            for line in lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.into()),
    }
}

/// `berth`: the daemon.
fn serve(flags: &Flags) -> ExitCode {
    let loaded = match flags.load().and_then(|l| l.validate().map(|()| l)) {
        Ok(loaded) => loaded,
        Err(e) => return fail(e.into()),
    };
    logging::init(&loaded.config);
    tracing::info!(files = ?loaded.files, "configuration loaded");
    match daemon::run(loaded.config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            fail(e)
        }
    }
}

/// `berth config show`: the effective configuration as TOML, then which file
/// or flag set each key that is not an embedded default.
fn show(loaded: &Loaded) -> String {
    let mut out = String::from(
        "# The effective configuration: embedded defaults, then the files below\n\
         # in this order, then flags.\n",
    );
    if loaded.files.is_empty() {
        out.push_str("# Files read: none\n");
    }
    for file in &loaded.files {
        out.push_str(&format!("# File read: {}\n", file.display()));
    }
    out.push('\n');
    out.push_str(&toml::to_string_pretty(&loaded.config).expect("config serializes"));
    out.push_str("\n# Set by a file or a flag (every other key is the embedded default):\n");
    if loaded.origins.is_empty() {
        out.push_str("#   none\n");
    }
    for (key, origin) in &loaded.origins {
        out.push_str(&format!("#   {key}  <-  {origin}\n"));
    }
    out
}

fn fail(e: anyhow::Error) -> ExitCode {
    eprintln!("berth: error: {e:#}");
    ExitCode::FAILURE
}
