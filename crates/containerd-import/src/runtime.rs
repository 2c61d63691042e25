//! Runtime handlers, the default handler, the cgroup driver, CDI and CNI:
//! containerd's `containerd.*`, `cdi_spec_dirs` and `cni.*` (the runtime
//! plugin in version 3).

use std::path::Path;

use toml::Value;

use super::reasons::{handler_reason, Group};
use super::values::segment;
use super::{cat, owned, Import};

/// A handler carried over: its name, its SystemdCgroup, and where that was
/// set.
type Mapped = (String, bool, Option<Vec<String>>);

/// The berth section of runtime handler `name`.
fn handler_section(name: &str) -> String {
    format!("runtime.handlers.{}", segment(name))
}

impl Import<'_> {
    /// Handlers, the default handler, the cgroup driver, CDI dirs.
    pub(super) fn runtime(&mut self) {
        let (r, _, _) = self.roots();
        let base = ["plugins", r, "containerd"];
        let names = self.table_keys(&[&base[..], &["runtimes"]].concat());
        let mut mapped: Vec<Mapped> = Vec::new();
        for name in &names {
            if let Some(systemd) = self.handler(r, name) {
                mapped.push((name.clone(), systemd.0, systemd.1));
            }
        }
        let default = self.default_handler(r, &names, &mapped);
        self.cgroup_driver(&mapped, default.as_ref());
        let cdi_path = ["plugins", r, "cdi_spec_dirs"];
        if let Some(dirs) = self.strings(&cdi_path) {
            self.put(
                "runtime",
                "cdi_spec_dirs",
                Value::Array(dirs.into_iter().map(Value::String).collect()),
                &[&cdi_path],
                "",
            );
        }
    }

    /// `runtime.default_handler` from `default_runtime_name` under plugin
    /// `r`, given the file's handler `names` and those carried over
    /// (`mapped`); returns berth's default handler when the file's is kept.
    fn default_handler(&mut self, r: &str, names: &[String], mapped: &[Mapped]) -> Option<String> {
        let base = ["plugins", r, "containerd"];
        let default_path = [&base[..], &["default_runtime_name"]].concat();
        let wanted = self
            .string(&default_path)
            .map(str::to_string)
            .unwrap_or_else(|| "runc".into());
        let default = if names.is_empty() {
            // No runtimes in the file: berth's embedded runc and crun stay.
            self.out.comment(
                "runtime",
                "No containerd.runtimes in the file: berth's embedded handlers (runc, crun) stay.",
            );
            (wanted == "runc" || wanted == "crun").then_some(wanted.clone())
        } else if mapped.iter().any(|(n, ..)| *n == wanted) {
            Some(wanted.clone())
        } else {
            None
        };
        match (&default, self.lookup(&default_path)) {
            (Some(name), Some(_)) => self.put(
                "runtime",
                "default_handler",
                Value::String(name.clone()),
                &[&default_path],
                "",
            ),
            (Some(_), None) => {}
            (None, value) => {
                let fallback = mapped
                    .iter()
                    .find(|(n, ..)| n == "runc")
                    .or(mapped.first())
                    .map(|(n, ..)| n.clone());
                let why = match &fallback {
                    Some(f) => format!(
                        "handler {wanted:?} is not carried over (see its runtime_type); berth's \
                         default handler is {f:?} instead"
                    ),
                    None => format!(
                        "handler {wanted:?} is not carried over (see its runtime_type), nor any \
                         other: berth keeps its embedded handlers (runc, crun)"
                    ),
                };
                let value = value.cloned().unwrap_or(Value::String(wanted.clone()));
                self.note(&default_path, &value, Group::Check, why);
                if let Some(f) = fallback {
                    self.put(
                        "runtime",
                        "default_handler",
                        Value::String(f),
                        &[],
                        "containerd's default handler is not carried over",
                    );
                }
            }
        }
        default
    }

    /// One cgroup driver for all handlers: the `default` handler's, else
    /// the first's; the handlers that say otherwise are noted.
    fn cgroup_driver(&mut self, mapped: &[Mapped], default: Option<&String>) {
        let driver_from = mapped
            .iter()
            .find(|(n, ..)| Some(n) == default)
            .or(mapped.first())
            .cloned();
        if let Some((from, systemd, _)) = driver_from {
            let driver = if systemd { "systemd" } else { "cgroupfs" };
            let sources: Vec<Vec<&str>> = mapped
                .iter()
                .filter(|(_, s, _)| *s == systemd)
                .filter_map(|(_, _, at)| at.as_ref())
                .map(|at| at.iter().map(String::as_str).collect())
                .collect();
            let sources: Vec<&[&str]> = sources.iter().map(Vec::as_slice).collect();
            let why = match sources.is_empty() {
                true => format!("SystemdCgroup is not set for handler {from}"),
                false => String::new(),
            };
            self.put(
                "runtime",
                "cgroup_driver",
                Value::String(driver.into()),
                &sources,
                &why,
            );
            for (name, other, at) in mapped {
                if *other != systemd {
                    if let Some(at) = at {
                        let at: Vec<&str> = at.iter().map(String::as_str).collect();
                        self.note(
                            &at,
                            &Value::Boolean(*other),
                            Group::Check,
                            format!(
                                "berth has one cgroup driver for every handler: \
                                 runtime.cgroup_driver = {driver:?} (from handler {from}), \
                                 not this handler's ({name})"
                            ),
                        );
                    }
                }
            }
        }
    }

    /// Runtime handler `name` under plugin `r`: carried over when it is a
    /// runc one; returns its SystemdCgroup and where that was set.
    fn handler(&mut self, r: &str, name: &str) -> Option<(bool, Option<Vec<String>>)> {
        let base = ["plugins", r, "containerd", "runtimes", name];
        let at = |rest: &[&'static str]| cat(&base, rest);
        let type_path = at(&["runtime_type"]);
        let runtime_type = self.string(&type_path).unwrap_or("");
        let runc = matches!(
            runtime_type,
            "io.containerd.runc.v2" | "io.containerd.runc.v1"
        );
        let own_leaves: Vec<Vec<String>> = self
            .leaves
            .iter()
            .filter(|(p, _)| p.len() > base.len() && p[..base.len()] == base)
            .map(|(p, _)| p.clone())
            .collect();
        if !runc {
            let why = match runtime_type {
                "" => format!(
                    "handler {name} has no runtime_type; berth runs runc-compatible runtimes \
                     only (io.containerd.runc.v2): the handler is not carried over"
                ),
                "io.containerd.runtime.v1.linux" => format!(
                    "containerd 1.x's old v1 shim: rewrite handler {name} as \
                     io.containerd.runc.v2 (BinaryName) in containerd, or add it as \
                     runtime.handlers.{name} by hand; not carried over"
                ),
                other => format!(
                    "berth runs runc-compatible runtimes only (berth-shim drives the runtime's \
                     runc command line), not {other}: handler {name} is not carried over"
                ),
            };
            let value = Value::String(runtime_type.into());
            self.note(&type_path, &value, Group::Check, why);
            for path in own_leaves {
                if self.done.contains(&path) {
                    continue;
                }
                let value = self.lookup_owned(&path);
                let segments: Vec<&str> = path.iter().map(String::as_str).collect();
                self.note(
                    &segments,
                    &value,
                    Group::Nothing,
                    format!("belongs to handler {name}, which is not carried over"),
                );
            }
            return None;
        }
        let section = handler_section(name);
        let binary_path = at(&["options", "BinaryName"]);
        let binary = self.string(&binary_path).unwrap_or("");
        let (binary, why) = match binary {
            "" => ("runc", "runc.v2 runs runc when BinaryName is empty"),
            b => (b, ""),
        };
        let from: Vec<&[&str]> = match self.lookup(&binary_path) {
            Some(_) => vec![&type_path, &binary_path],
            None => vec![&type_path],
        };
        self.put(&section, "binary", Value::String(binary.into()), &from, why);
        for key in ["pod_annotations", "container_annotations"] {
            let path = at(&[key]);
            if let Some(list) = self.strings(&path) {
                self.put(
                    &section,
                    key,
                    Value::Array(list.into_iter().map(Value::String).collect()),
                    &[&path],
                    "",
                );
            }
        }
        let systemd_path = at(&["options", "SystemdCgroup"]);
        let systemd = self.boolean(&systemd_path);
        for path in own_leaves {
            if self.done.contains(&path) {
                continue;
            }
            let value = self.lookup_owned(&path);
            let (group, why) = handler_reason(
                &path[base.len()..]
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
                &value,
            );
            let segments: Vec<&str> = path.iter().map(String::as_str).collect();
            self.note(&segments, &value, group, why);
        }
        let set_at = systemd.map(|_| owned(&systemd_path));
        Some((systemd.unwrap_or(false), set_at))
    }

    /// `[cni]`: dirs, and no default network of berth's own.
    pub(super) fn cni(&mut self) {
        let (r, _, _) = self.roots();
        let at = |key: &'static str| ["plugins", r, "cni", key];
        if let Some(dir) = self.absolute(&at("conf_dir"), "cni.conf_dir") {
            self.put(
                "cni",
                "conf_dir",
                Value::String(dir),
                &[&at("conf_dir")],
                "",
            );
        }
        self.cni_bin_dirs(r);
        if let Some(n) = self.integer(&at("max_conf_num")) {
            let value = Value::Integer(n);
            if n == 1 {
                self.note(
                    &at("max_conf_num"),
                    &value,
                    Group::Nothing,
                    "berth attaches each pod to one network (cni.network_name, else the first \
                     file of cni.conf_dir), as containerd with 1",
                );
            } else {
                self.note(
                    &at("max_conf_num"),
                    &value,
                    Group::Check,
                    "berth attaches each pod to one network only (cni.network_name, else the \
                     first file of cni.conf_dir)",
                );
            }
        }
        self.put(
            "cni",
            "write_default_network",
            Value::Boolean(false),
            &[],
            "containerd writes no network of its own: wait for the cluster's CNI",
        );
    }

    /// `cni.bin_dirs` from `bin_dir` (containerd 1.x, deprecated in 2.1) or
    /// `bin_dirs` (2.1+): containerd takes `bin_dir` when it is set and
    /// `bin_dirs` is its default, and refuses both set.
    fn cni_bin_dirs(&mut self, r: &'static str) {
        let dir_path = ["plugins", r, "cni", "bin_dir"];
        let dirs_path = ["plugins", r, "cni", "bin_dirs"];
        let dir_value = self.lookup(&dir_path);
        let dirs_value = self.lookup(&dirs_path);
        let dir = self.string(&dir_path).filter(|d| !d.is_empty());
        let dirs = self.strings(&dirs_path);
        let (chosen, from): (Vec<String>, &[&str]) = match (dir, dirs) {
            (Some(dir), dirs) => {
                if let (Some(dirs), Some(value)) = (dirs, dirs_value) {
                    let (group, why) = if dirs.is_empty() || dirs == ["/opt/cni/bin"] {
                        (Group::Nothing, "containerd's default, replaced by bin_dir")
                    } else {
                        (
                            Group::Check,
                            "containerd refuses bin_dir and bin_dirs together; bin_dir is taken",
                        )
                    };
                    self.note(&dirs_path, value, group, why);
                }
                (vec![dir.to_string()], &dir_path)
            }
            (None, dirs) => {
                if let Some(value) = dir_value {
                    if value.as_str() == Some("") {
                        self.note(&dir_path, value, Group::Nothing, "empty: not used");
                    }
                }
                match (dirs, dirs_value) {
                    (Some(dirs), Some(value)) if dirs.is_empty() => {
                        self.note(
                            &dirs_path,
                            value,
                            Group::Nothing,
                            "empty: cni.bin_dirs keeps berth's default",
                        );
                        return;
                    }
                    (Some(dirs), _) => (dirs, &dirs_path),
                    _ => return,
                }
            }
        };
        if chosen.iter().all(|d| Path::new(d).is_absolute()) {
            self.put(
                "cni",
                "bin_dirs",
                Value::Array(chosen.into_iter().map(Value::String).collect()),
                &[from],
                "",
            );
        } else if let Some(value) = self.lookup(from) {
            self.note(
                from,
                value,
                Group::Check,
                "not all absolute paths, which berth needs for cni.bin_dirs",
            );
        }
    }
}
