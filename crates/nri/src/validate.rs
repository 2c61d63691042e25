//! Validation of a merged container adjustment: validator plugins (those
//! subscribed to ValidateContainerAdjustment, called concurrently, any
//! rejection wins) and the built-in default validator.

use std::sync::Arc;

use protobuf::MessageField;

use crate::api::{self, Event, Field};
use crate::merge::CreateMerge;
use crate::nri::Nri;
use crate::plugin::{Call, Plugin};
use crate::{Error, ValidatorConfig};

const EVENT: &str = "ValidateContainerAdjustment";

pub(crate) async fn validate(
    nri: &Nri,
    active: &[Arc<Plugin>],
    pod: &api::PodSandbox,
    ctr: &api::Container,
    merge: &CreateMerge,
) -> Result<(), Error> {
    let cfg = &nri.inner.cfg.validator;
    let validators: Vec<&Arc<Plugin>> = active
        .iter()
        .filter(|p| p.subscribed(Event::VALIDATE_CONTAINER_ADJUSTMENT))
        .collect();
    if !cfg.enable && validators.is_empty() {
        return Ok(());
    }
    let plugins: Vec<api::PluginInstance> = active
        .iter()
        .map(|p| api::PluginInstance {
            name: p.name.clone(),
            index: p.idx.clone(),
            ..Default::default()
        })
        .collect();
    let rejected = |validator: String, reason: String| Error::Rejected {
        validator,
        container: ctr.id.clone(),
        reason,
    };
    if cfg.enable {
        if let Err(reason) = default_validator(cfg, pod, ctr, merge, &plugins) {
            return Err(rejected("default-validator".into(), reason));
        }
    }
    let req = api::ValidateContainerAdjustmentRequest {
        pod: MessageField::some(pod.clone()),
        container: MessageField::some(ctr.clone()),
        adjust: MessageField::some(merge.adjust.clone()),
        update: merge.updates.clone().into_updates(),
        owners: MessageField::some(merge.owners().0.clone()),
        plugins,
        ..Default::default()
    };
    let calls = validators.iter().map(|p| {
        let req = &req;
        async move {
            let fut = p.client().validate_container_adjustment(p.context(), req);
            (p.full_name(), p.call(EVENT, fut).await)
        }
    });
    for (name, res) in futures::future::join_all(calls).await {
        match res? {
            Call::Done(r) if r.reject => {
                let reason = if r.reason.is_empty() {
                    "unknown rejection reason".to_string()
                } else {
                    crate::plugin::truncate(&r.reason)
                };
                return Err(rejected(name, reason));
            }
            Call::Done(_) => {}
            // NRI fails the creation when a validator cannot answer: an
            // unvalidated adjustment must not go through.
            Call::Dropped | Call::Unimplemented => {
                return Err(rejected(name, "validator failed to answer".into()));
            }
        }
    }
    Ok(())
}

/// A pod annotation as it applies to container `ctr`: `KEY/container.NAME`
/// before `KEY/pod` before `KEY` (NRI's `GetEffectiveAnnotation`).
fn effective_annotation<'a>(pod: &'a api::PodSandbox, key: &str, ctr: &str) -> Option<&'a str> {
    [
        format!("{key}/container.{ctr}"),
        format!("{key}/pod"),
        key.to_string(),
    ]
    .iter()
    .find_map(|k| pod.annotations.get(k))
    .map(String::as_str)
}

/// Bound on the required-plugins annotation we parse.
const MAX_ANNOTATION: usize = 4096;

/// The plugins required of container `ctr`: the configured ones and the
/// pod's annotation; none when the pod tolerates missing plugins.
fn required_plugins(
    cfg: &ValidatorConfig,
    pod: &api::PodSandbox,
    ctr: &str,
) -> Result<Vec<String>, String> {
    let tolerate = cfg.tolerate_missing_plugins_annotation.as_str();
    if !tolerate.is_empty() {
        if let Some(v) = effective_annotation(pod, tolerate, ctr) {
            match v.trim() {
                "1" | "t" | "T" | "true" | "TRUE" | "True" => return Ok(Vec::new()),
                "0" | "f" | "F" | "false" | "FALSE" | "False" => {}
                _ => {
                    return Err(format!(
                        "invalid {tolerate} annotation {v:?}: not a boolean"
                    ))
                }
            }
        }
    }
    let mut required = cfg.required_plugins.clone();
    if let Some(v) = effective_annotation(pod, crate::REQUIRED_PLUGINS_ANNOTATION, ctr) {
        let key = crate::REQUIRED_PLUGINS_ANNOTATION;
        if v.len() > MAX_ANNOTATION {
            return Err(format!(
                "invalid {key} annotation: over {MAX_ANNOTATION} bytes"
            ));
        }
        let listed: Vec<String> = serde_yaml_ng::from_str(v)
            .map_err(|e| format!("invalid {key} annotation {v:?}: {e}"))?;
        required.extend(listed);
    }
    Ok(required)
}

/// The built-in default validator's checks.
fn default_validator(
    cfg: &ValidatorConfig,
    pod: &api::PodSandbox,
    ctr: &api::Container,
    merge: &CreateMerge,
    plugins: &[api::PluginInstance],
) -> Result<(), String> {
    let owners = merge.owners();
    let id = ctr.id.as_str();
    if cfg.reject_oci_hook_adjustment {
        if let Some(o) = owners.owner(id, Field::OciHooks) {
            return Err(format!(
                "plugin(s) {o:?} attempted restricted OCI hook injection"
            ));
        }
    }
    if let Some(o) = owners.owner(id, Field::SeccompPolicy) {
        use api::security_profile::ProfileType;
        let profile = ctr.linux.seccomp_profile.as_ref();
        let kind = profile.map(|p| p.profile_type.enum_value_or_default());
        let (reject, what) = match kind {
            None | Some(ProfileType::UNCONFINED) => {
                (cfg.reject_unconfined_seccomp_adjustment, "unconfined")
            }
            Some(ProfileType::RUNTIME_DEFAULT) => (
                cfg.reject_runtime_default_seccomp_adjustment,
                "runtime default",
            ),
            Some(ProfileType::LOCALHOST) => (cfg.reject_custom_seccomp_adjustment, "custom"),
        };
        if reject {
            return Err(format!(
                "plugin {o:?} attempted restricted {what} seccomp policy adjustment"
            ));
        }
    }
    if cfg.reject_namespace_adjustment {
        let ns = owners.entries(id, Field::Namespace);
        if !ns.is_empty() {
            let list: Vec<String> = ns
                .iter()
                .map(|(n, p)| format!("{p:?} (namespace {n:?})"))
                .collect();
            return Err(format!(
                "attempted restricted namespace adjustment by {}",
                list.join(", ")
            ));
        }
    }
    if cfg.reject_sysctl_adjustment {
        let s = owners.entries(id, Field::Sysctl);
        if !s.is_empty() {
            let list: Vec<&str> = s.iter().map(|(_, p)| p.as_str()).collect();
            return Err(format!(
                "attempted restricted sysctl adjustment by plugin(s) {}",
                list.join(", ")
            ));
        }
    }
    let required = required_plugins(cfg, pod, &ctr.name)?;
    let missing: Vec<&str> = required
        .iter()
        .filter(|r| {
            !plugins
                .iter()
                .any(|p| &p.name == *r || &format!("{}-{}", p.index, p.name) == *r)
        })
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "required plugin(s) {:?} not present",
            missing.join(",")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merged_with_hook() -> (api::Container, CreateMerge) {
        let mut c = api::Container::new();
        c.id = "c".into();
        let mut m = CreateMerge::new(api::CreateContainerRequest {
            container: MessageField::some(c.clone()),
            ..Default::default()
        });
        let mut a = api::ContainerAdjustment::new();
        a.hooks
            .mut_or_insert_default()
            .prestart
            .push(api::Hook::new());
        a.linux
            .mut_or_insert_default()
            .sysctl
            .insert("k".into(), "v".into());
        let rpl = api::CreateContainerResponse {
            adjust: MessageField::some(a),
            ..Default::default()
        };
        m.apply(&rpl, "10-hooker").unwrap();
        (c, m)
    }

    #[test]
    fn default_validator_rules() {
        let (c, m) = merged_with_hook();
        let pod = api::PodSandbox::new();
        let mut cfg = ValidatorConfig::default();
        assert!(default_validator(&cfg, &pod, &c, &m, &[]).is_ok());
        cfg.reject_oci_hook_adjustment = true;
        let e = default_validator(&cfg, &pod, &c, &m, &[]).unwrap_err();
        assert!(e.contains("10-hooker") && e.contains("OCI hook"), "{e}");
        cfg.reject_oci_hook_adjustment = false;
        cfg.reject_sysctl_adjustment = true;
        assert!(default_validator(&cfg, &pod, &c, &m, &[])
            .unwrap_err()
            .contains("sysctl"));
        cfg.reject_sysctl_adjustment = false;
        cfg.required_plugins = vec!["needed".into()];
        assert!(default_validator(&cfg, &pod, &c, &m, &[])
            .unwrap_err()
            .contains("needed"));
        let present = api::PluginInstance {
            name: "needed".into(),
            index: "05".into(),
            ..Default::default()
        };
        assert!(default_validator(&cfg, &pod, &c, &m, &[present]).is_ok());
    }

    #[test]
    fn required_plugins_from_the_pod_and_their_toleration() {
        let (mut c, m) = merged_with_hook();
        c.name = "app".into();
        let mut pod = api::PodSandbox::new();
        let mut cfg = ValidatorConfig::default();
        let present = api::PluginInstance {
            name: "here".into(),
            index: "10".into(),
            ..Default::default()
        };
        let check = |cfg: &ValidatorConfig, pod: &api::PodSandbox| {
            default_validator(cfg, pod, &c, &m, std::slice::from_ref(&present))
        };
        let key = crate::REQUIRED_PLUGINS_ANNOTATION;
        pod.annotations.insert(key.into(), "[10-here]".into());
        assert!(check(&cfg, &pod).is_ok());
        // The container's own annotation wins over the pod's.
        pod.annotations
            .insert(format!("{key}/container.app"), "- here\n- gone\n".into());
        let e = check(&cfg, &pod).unwrap_err();
        assert!(e.contains("gone") && !e.contains("here"), "{e}");
        pod.annotations
            .insert(format!("{key}/container.app"), "{not: a list}".into());
        assert!(check(&cfg, &pod).unwrap_err().contains("invalid"));
        pod.annotations.clear();
        cfg.required_plugins = vec!["gone".into()];
        assert!(check(&cfg, &pod).unwrap_err().contains("\"gone\""));
        // Toleration is only read when configured, then needs a boolean.
        pod.annotations.insert("tolerate".into(), "true".into());
        assert!(check(&cfg, &pod).is_err());
        cfg.tolerate_missing_plugins_annotation = "tolerate".into();
        assert!(check(&cfg, &pod).is_ok());
        pod.annotations
            .insert("tolerate/container.app".into(), "false".into());
        assert!(check(&cfg, &pod).unwrap_err().contains("gone"));
        pod.annotations
            .insert("tolerate/container.app".into(), "maybe".into());
        assert!(check(&cfg, &pod).unwrap_err().contains("not a boolean"));
    }
}
