//! The berth daemon: a Kubernetes container runtime that serves CRI v1.

mod cli;
mod config;
mod container;
mod daemon;
mod error;
mod logging;
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
