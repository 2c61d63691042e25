//! berth's default AppArmor profile (`packaging/apparmor/berth-default`),
//! loaded at start-up with `apparmor_parser` where the host has AppArmor and
//! the profile is not loaded yet — as containerd loads its own default.
//!
//! When it cannot be loaded, the reason is kept in the spec options: a
//! container that would run under it (RuntimeDefault, or no request) is then
//! refused with that reason instead of running unconfined in silence.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The profile's text.
pub const PROFILE: &str = include_str!("../packaging/apparmor/berth-default");

/// How long one `apparmor_parser` run may take.
const PARSER_TIMEOUT: Duration = Duration::from_secs(30);

/// Where `apparmor_parser` is looked for, in order, when PATH has none.
const PARSER_PATHS: [&str; 2] = ["/sbin/apparmor_parser", "/usr/sbin/apparmor_parser"];

/// The parser to run: the first of PATH, then the usual places.
pub fn find_parser() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("apparmor_parser"))
        .chain(PARSER_PATHS.iter().map(PathBuf::from))
        .find(|p| p.is_file())
}

/// Loads the default profile when AppArmor is on and it is not loaded:
/// on success `opts.apparmor_default` names it, on failure
/// `opts.apparmor_default_problem` says why. `file` (in a private dir) is
/// where the profile is written for the parser (removed after the load).
pub fn ensure_default(opts: &mut berth_spec::SpecOptions, parser: Option<&Path>, file: &Path) {
    if !opts.apparmor_enabled || opts.apparmor_default.is_some() {
        return;
    }
    let result = match parser {
        None => Err("apparmor_parser is not installed (Debian: apt-get install apparmor)".into()),
        Some(parser) => load(parser, file),
    };
    match result {
        Ok(()) => {
            tracing::info!(
                profile = berth_spec::APPARMOR_DEFAULT,
                "loaded the default AppArmor profile"
            );
            opts.apparmor_default = Some(berth_spec::APPARMOR_DEFAULT.to_string());
        }
        Err(problem) => {
            tracing::error!(%problem, "the default AppArmor profile could not be loaded: containers that would run under it are refused");
            opts.apparmor_default_problem = Some(format!(
                "berth's default AppArmor profile {:?} could not be loaded: {problem}",
                berth_spec::APPARMOR_DEFAULT
            ));
        }
    }
}

/// Writes the profile to `file` and runs `parser -Kr FILE` (replace,
/// no cache), bounded by [`PARSER_TIMEOUT`].
fn load(parser: &Path, file: &Path) -> Result<(), String> {
    berth_atomic_file::write(file, PROFILE.as_bytes(), 0o600)
        .map_err(|e| format!("writing {}: {e}", file.display()))?;
    let result = run_bounded(parser, file, PARSER_TIMEOUT);
    let _ = std::fs::remove_file(file);
    result
}

fn run_bounded(parser: &Path, file: &Path, timeout: Duration) -> Result<(), String> {
    let mut child = std::process::Command::new(parser)
        .arg("-Kr")
        .arg(file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("running {}: {e}", parser.display()))?;
    let status = crate::process::wait_or_kill(&mut child, timeout)
        .map_err(|e| format!("waiting for {}: {e}", parser.display()))?
        .ok_or_else(|| format!("{} timed out after {timeout:?}", parser.display()))?;
    if status.success() {
        return Ok(());
    }
    // Bounded: the first 4 KiB of what it said.
    let mut said = Vec::new();
    if let Some(stderr) = child.stderr.take() {
        let _ = stderr.take(4096).read_to_end(&mut said);
    }
    Err(format!(
        "{} {status}: {}",
        parser.display(),
        String::from_utf8_lossy(&said).trim()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in parser: records its arguments and the profile it was
    /// given, then exits with `code`.
    fn stand_in(dir: &Path, code: i32) -> PathBuf {
        let script = dir.join("apparmor_parser");
        let source = dir.join("apparmor_parser.txt");
        let text = format!(
            "#!/bin/sh\necho \"$@\" > {0}/args\ncat \"$2\" > {0}/profile\necho 'parse error' >&2\nexit {code}\n",
            dir.display()
        );
        std::fs::write(&source, text).unwrap();
        // Installed by another process: a sibling test's fork never holds
        // the executable open for writing (ETXTBSY at exec).
        let ok = std::process::Command::new("install")
            .args(["-m", "0755"])
            .arg(&source)
            .arg(&script)
            .status()
            .unwrap();
        assert!(ok.success());
        script
    }

    fn enabled() -> berth_spec::SpecOptions {
        berth_spec::SpecOptions {
            apparmor_enabled: true,
            ..Default::default()
        }
    }

    #[test]
    fn loads_the_profile_with_replace_and_no_cache() {
        let dir = tempfile::tempdir().unwrap();
        let parser = stand_in(dir.path(), 0);
        let mut opts = enabled();
        ensure_default(
            &mut opts,
            Some(&parser),
            &dir.path().join("berth-default.apparmor"),
        );
        assert_eq!(opts.apparmor_default.as_deref(), Some("berth-default"));
        assert_eq!(opts.apparmor_default_problem, None);
        let args = std::fs::read_to_string(dir.path().join("args")).unwrap();
        assert!(args.starts_with("-Kr "), "{args}");
        let profile = std::fs::read_to_string(dir.path().join("profile")).unwrap();
        assert_eq!(profile, PROFILE);
        assert!(profile.contains("profile berth-default "));
        // The scratch file is gone.
        assert!(!dir.path().join("berth-default.apparmor").exists());
    }

    #[test]
    fn a_failed_load_is_kept_as_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let parser = stand_in(dir.path(), 1);
        let mut opts = enabled();
        ensure_default(
            &mut opts,
            Some(&parser),
            &dir.path().join("berth-default.apparmor"),
        );
        assert_eq!(opts.apparmor_default, None);
        let problem = opts.apparmor_default_problem.unwrap();
        assert!(problem.contains("parse error"), "{problem}");

        let mut opts = enabled();
        ensure_default(&mut opts, None, &dir.path().join("berth-default.apparmor"));
        assert!(opts
            .apparmor_default_problem
            .unwrap()
            .contains("not installed"));
    }

    /// The real parser accepts the profile (`-Q`: parse and compile, load
    /// nothing: this kernel has no AppArmor). hack/install-deps.sh installs it.
    #[test]
    #[ignore = "needs apparmor_parser: hack/test.sh runs it (--include-ignored)"]
    fn the_real_parser_accepts_the_profile() {
        let Some(parser) = find_parser() else {
            eprintln!("skipped: apparmor_parser is not installed");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("profile");
        std::fs::write(&file, PROFILE).unwrap();
        let out = std::process::Command::new(parser)
            .args(["-QTK"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn nothing_is_run_without_apparmor_or_when_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let parser = stand_in(dir.path(), 1);
        let mut off = berth_spec::SpecOptions::default();
        ensure_default(
            &mut off,
            Some(&parser),
            &dir.path().join("berth-default.apparmor"),
        );
        let mut loaded = enabled();
        loaded.apparmor_default = Some("berth-default".into());
        ensure_default(
            &mut loaded,
            Some(&parser),
            &dir.path().join("berth-default.apparmor"),
        );
        assert!(!dir.path().join("args").exists());
        assert_eq!(off.apparmor_default_problem, None);
        assert_eq!(loaded.apparmor_default_problem, None);
    }
}
