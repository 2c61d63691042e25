//! The container's command line, environment and working directory, from the
//! CRI config over the image config, as kubelet expects.

use cri_api::v1;

use crate::error::{invalid, Error};
use crate::ImageInfo;

/// PATH when neither the image nor the config sets one.
pub const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The process's argv: `command` replaces the image's Entrypoint and drops
/// its Cmd; `args` replaces the Cmd. An Entrypoint of `[""]` means none.
pub fn process_args(
    id: &str,
    config: &v1::ContainerConfig,
    image: &ImageInfo,
) -> Result<Vec<String>, Error> {
    let mut command = config.command.clone();
    let mut args = config.args.clone();
    if command.is_empty() {
        if args.is_empty() {
            args = image.cmd.clone();
        }
        if !(image.entrypoint.len() == 1 && image.entrypoint[0].is_empty()) {
            command = image.entrypoint.clone();
        }
    }
    command.extend(args);
    if command.is_empty() {
        return Err(invalid(
            id,
            "command",
            "no command: the config has no command or args and the image no Entrypoint or Cmd",
        ));
    }
    Ok(command)
}

fn key(entry: &str) -> &str {
    entry.split_once('=').map_or(entry, |(k, _)| k)
}

/// Applies `overrides` to `env` in order: `K=V` replaces `K` where it is or
/// appends it; a bare `K` removes `K`.
pub fn merge_env(env: &mut Vec<String>, overrides: impl IntoIterator<Item = String>) {
    for entry in overrides {
        let k = key(&entry).to_string();
        if !entry.contains('=') {
            env.retain(|e| key(e) != k);
            continue;
        }
        match env.iter_mut().find(|e| key(e) == k) {
            Some(slot) => *slot = entry,
            None => env.push(entry),
        }
    }
}

/// An env value as the runtime spec can carry it: JSON strings are UTF-8, so
/// each byte that is not part of valid UTF-8 becomes U+FFFD, one per byte, as
/// containerd's encoder (Go's `encoding/json`) does with the bytes a kubelet
/// passes for a binary Secret (cri-api v0.36.2 made `KeyValue.value` bytes).
pub fn env_value(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for _ in chunk.invalid() {
            out.push(char::REPLACEMENT_CHARACTER);
        }
    }
    out
}

/// Refuses what cannot be an environment variable: a NUL byte ends a C
/// string, so the process would see another value than asked for.
fn check_env(id: &str, field: &str, key: &str, value: &[u8]) -> Result<(), Error> {
    if key.contains('\0') || value.contains(&0) {
        return Err(invalid(
            id,
            field,
            format!("env {key:?} holds a NUL byte, which no environment variable can"),
        ));
    }
    Ok(())
}

/// The environment: a default PATH, `HOSTNAME`, then the image's variables,
/// then the config's (later wins, by name). A NUL byte in a name or value,
/// the image's or the config's, is refused naming the variable.
pub fn process_env(
    id: &str,
    config: &v1::ContainerConfig,
    image: &ImageInfo,
    hostname: &str,
) -> Result<Vec<String>, Error> {
    for entry in &image.env {
        check_env(id, "image config Env", key(entry), entry.as_bytes())?;
    }
    for kv in &config.envs {
        check_env(id, "envs", &kv.key, &kv.value)?;
    }
    let mut env = vec![DEFAULT_PATH.to_string()];
    merge_env(&mut env, [format!("HOSTNAME={hostname}")]);
    merge_env(&mut env, image.env.iter().cloned());
    merge_env(
        &mut env,
        config
            .envs
            .iter()
            .map(|kv| format!("{}={}", kv.key, env_value(&kv.value))),
    );
    Ok(env)
}

/// The working directory: the config's, else the image's, else `/`; a
/// relative one is taken from `/`.
pub fn working_dir(config: &v1::ContainerConfig, image: &ImageInfo) -> String {
    let dir = [config.working_dir.as_str(), image.working_dir.as_str()]
        .into_iter()
        .find(|d| !d.trim().is_empty())
        .unwrap_or("/");
    if dir.starts_with('/') {
        dir.to_string()
    } else {
        format!("/{dir}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn config(command: &[&str], args: &[&str]) -> v1::ContainerConfig {
        v1::ContainerConfig {
            command: s(command),
            args: s(args),
            ..Default::default()
        }
    }

    fn image(entrypoint: &[&str], cmd: &[&str]) -> ImageInfo {
        ImageInfo {
            entrypoint: s(entrypoint),
            cmd: s(cmd),
            ..Default::default()
        }
    }

    #[test]
    fn command_and_args_combinations() {
        let img = image(&["/entry", "-x"], &["serve", "--port=80"]);
        let args =
            |c: &[&str], a: &[&str], i: &ImageInfo| process_args("c", &config(c, a), i).unwrap();
        // Nothing given: entrypoint + cmd.
        assert_eq!(
            args(&[], &[], &img),
            s(&["/entry", "-x", "serve", "--port=80"])
        );
        // Args only: entrypoint + args.
        assert_eq!(args(&[], &["run"], &img), s(&["/entry", "-x", "run"]));
        // Command only: command, the image's cmd dropped.
        assert_eq!(args(&["/bin/sh"], &[], &img), s(&["/bin/sh"]));
        // Both: command + args.
        assert_eq!(
            args(&["/bin/sh"], &["-c", "id"], &img),
            s(&["/bin/sh", "-c", "id"])
        );
        // Image with only cmd.
        let img = image(&[], &["sh"]);
        assert_eq!(args(&[], &[], &img), s(&["sh"]));
        assert_eq!(args(&[], &["top"], &img), s(&["top"]));
        // An entrypoint of [""] is none.
        let img = image(&[""], &["sh"]);
        assert_eq!(args(&[], &[], &img), s(&["sh"]));
    }

    #[test]
    fn no_command_at_all_is_invalid() {
        let e = process_args("c3", &config(&[], &[]), &image(&[], &[])).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("c3"), "{e}");
    }

    #[test]
    fn env_merges_by_name_config_wins() {
        let img = ImageInfo {
            env: s(&["PATH=/opt/bin", "A=image", "B=image"]),
            ..Default::default()
        };
        let mut c = config(&[], &[]);
        c.envs = vec![
            v1::KeyValue {
                key: "B".into(),
                value: "config".into(),
            },
            v1::KeyValue {
                key: "C".into(),
                value: "x=y".into(),
            },
        ];
        let env = process_env("c", &c, &img, "pod-a").unwrap();
        assert_eq!(
            env,
            s(&[
                "PATH=/opt/bin",
                "HOSTNAME=pod-a",
                "A=image",
                "B=config",
                "C=x=y"
            ])
        );
    }

    #[test]
    fn default_path_when_nobody_sets_one() {
        let env = process_env("c", &config(&[], &[]), &ImageInfo::default(), "h").unwrap();
        assert_eq!(env, s(&[DEFAULT_PATH, "HOSTNAME=h"]));
        let mut c = config(&[], &[]);
        c.envs = vec![v1::KeyValue {
            key: "PATH".into(),
            value: "/x".into(),
        }];
        assert_eq!(
            process_env("c", &c, &ImageInfo::default(), "h").unwrap()[0],
            "PATH=/x"
        );
    }

    #[test]
    fn binary_values_become_utf8_one_replacement_per_invalid_byte() {
        // As Go's encoding/json (containerd): every byte that is not part of
        // valid UTF-8 is one U+FFFD, a truncated sequence included.
        assert_eq!(env_value(b"plain"), "plain");
        assert_eq!(env_value("é€😀".as_bytes()), "é€😀");
        assert_eq!(env_value(&[0xff, b'a', 0xfe]), "\u{fffd}a\u{fffd}");
        assert_eq!(env_value(&[0xf0, 0x9f, 0x98]), "\u{fffd}\u{fffd}\u{fffd}");
        assert_eq!(env_value(&[0xed, 0xa0, 0x80]), "\u{fffd}\u{fffd}\u{fffd}");
        assert_eq!(env_value(&[0xc3, 0x28]), "\u{fffd}(");
        let mut c = config(&[], &[]);
        c.envs = vec![v1::KeyValue {
            key: "SECRET".into(),
            value: vec![b'k', 0x80, 0xc3, 0xa9],
        }];
        let env = process_env("c", &c, &ImageInfo::default(), "h").unwrap();
        assert_eq!(env.last().unwrap(), "SECRET=k\u{fffd}é");
    }

    #[test]
    fn nul_in_env_is_refused_naming_the_key() {
        let mut c = config(&[], &[]);
        c.envs = vec![v1::KeyValue {
            key: "TOKEN".into(),
            value: b"a\0b".to_vec(),
        }];
        let e = process_env("c9", &c, &ImageInfo::default(), "h").unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(
            e.to_string().contains("\"TOKEN\"") && e.to_string().contains("c9"),
            "{e}"
        );
        c.envs[0] = v1::KeyValue {
            key: "BAD\0KEY".into(),
            value: b"v".to_vec(),
        };
        assert!(process_env("c", &c, &ImageInfo::default(), "h").is_err());
        let img = ImageInfo {
            env: s(&["IMG=x\0y"]),
            ..Default::default()
        };
        let e = process_env("c", &config(&[], &[]), &img, "h").unwrap_err();
        assert!(
            e.to_string().contains("\"IMG\"") && e.to_string().contains("image"),
            "{e}"
        );
    }

    #[test]
    fn bare_key_removes() {
        let mut env = s(&["A=1", "B=2"]);
        merge_env(&mut env, s(&["A", "C=3"]));
        assert_eq!(env, s(&["B=2", "C=3"]));
    }

    #[test]
    fn working_dir_order() {
        let mut c = config(&[], &[]);
        let mut img = ImageInfo::default();
        assert_eq!(working_dir(&c, &img), "/");
        img.working_dir = "/srv".into();
        assert_eq!(working_dir(&c, &img), "/srv");
        c.working_dir = "/data".into();
        assert_eq!(working_dir(&c, &img), "/data");
        c.working_dir = "rel".into();
        assert_eq!(working_dir(&c, &img), "/rel");
    }
}
