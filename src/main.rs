//! The berth daemon: a Kubernetes container runtime that serves CRI v1.

mod cli;
mod config;
mod container;
mod core;
mod daemon;
mod error;
mod events;
mod failpoint;
mod logging;
mod metrics;
mod objects;
mod sandbox;
mod server;
mod undo;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command, ConfigAction};
use config::Config;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Config {
            action: ConfigAction::Default,
        }) => {
            print!("{}", Config::default_toml());
            ExitCode::SUCCESS
        }
        Some(Command::Config {
            action: ConfigAction::Show,
        }) => match cli.flags.effective_config() {
            Ok(config) => {
                print!(
                    "{}",
                    toml::to_string_pretty(&config).expect("config serializes")
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(e.into()),
        },
        Some(Command::Recover { dry_run }) => {
            if !dry_run {
                return fail(anyhow::anyhow!(
                    "recovery runs when berth starts; use --dry-run to list what it would change"
                ));
            }
            let config = match cli.flags.effective_config() {
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
            match runtime.block_on(server::recovery_plan(&config)) {
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
        None => {
            let config = match cli.flags.effective_config() {
                Ok(config) => config,
                Err(e) => return fail(e.into()),
            };
            logging::init(&config);
            match daemon::run(config) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e:#}");
                    fail(e)
                }
            }
        }
    }
}

fn fail(e: anyhow::Error) -> ExitCode {
    eprintln!("berth: error: {e:#}");
    ExitCode::FAILURE
}
