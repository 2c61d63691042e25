//! AppArmor and SELinux, decided as containerd decides, so that no request
//! is dropped in silence:
//!
//! - AppArmor on the host: `Localhost` runs under the named profile,
//!   `Unconfined` unconfined, `RuntimeDefault` (and no request) under
//!   berth's default profile (`SpecOptions::apparmor_default`, loaded by the
//!   daemon at start-up and checked enforced); where it could not be loaded
//!   or is not enforced they are refused with the reason
//!   (`apparmor_default_problem`).
//! - No AppArmor: `Localhost` is refused (the profile cannot be applied);
//!   `RuntimeDefault` and `Unconfined` run unconfined, as containerd does.
//! - SELinux enforcing or permissive on the host: `selinux_options` are not
//!   applied by berth yet, so a request with them is refused. Without
//!   SELinux they are ignored, as containerd ignores them.

use cri_api::v1;

use crate::error::{invalid, Error};
use crate::SpecOptions;

/// What a container (or pod) asked for, from the field or the deprecated
/// string (`runtime/default`, `unconfined`, `localhost/NAME`).
fn apparmor_request(
    id: &str,
    profile: Option<&v1::SecurityProfile>,
    deprecated: &str,
) -> Result<Option<(v1::security_profile::ProfileType, String)>, Error> {
    use v1::security_profile::ProfileType as T;
    if let Some(p) = profile {
        let kind = T::try_from(p.profile_type).map_err(|_| {
            invalid(
                id,
                "apparmor.profile_type",
                format!("unknown type {}", p.profile_type),
            )
        })?;
        return Ok(Some((kind, p.localhost_ref.clone())));
    }
    Ok(match deprecated {
        "" => None,
        "runtime/default" => Some((T::RuntimeDefault, String::new())),
        "unconfined" => Some((T::Unconfined, String::new())),
        other => match other.strip_prefix("localhost/") {
            Some(name) => Some((T::Localhost, name.to_string())),
            None => {
                return Err(invalid(
                    id,
                    "apparmor_profile",
                    format!("{other:?} is not a profile berth knows"),
                ))
            }
        },
    })
}

/// The AppArmor profile of a process (`process.apparmorProfile`).
pub fn apparmor_profile(
    id: &str,
    profile: Option<&v1::SecurityProfile>,
    deprecated: &str,
    opts: &SpecOptions,
) -> Result<Option<String>, Error> {
    use v1::security_profile::ProfileType as T;
    let request = apparmor_request(id, profile, deprecated)?;
    if !opts.apparmor_enabled {
        return match request {
            Some((T::Localhost, name)) => Err(invalid(
                id,
                "apparmor",
                format!("AppArmor is not enabled on this host: profile {name:?} cannot be applied"),
            )),
            _ => Ok(None),
        };
    }
    match request {
        Some((T::Localhost, name)) if name.is_empty() => Err(invalid(
            id,
            "apparmor.localhost_ref",
            "a Localhost profile needs a name",
        )),
        Some((T::Localhost, name)) => Ok(Some(name)),
        Some((T::Unconfined, _)) => Ok(Some("unconfined".into())),
        // No request means the default, as with containerd: where it is
        // not loaded, refused (never unconfined in silence).
        Some((T::RuntimeDefault, _)) | None => match &opts.apparmor_default {
            Some(name) => Ok(Some(name.clone())),
            None => Err(invalid(
                id,
                "apparmor",
                opts.apparmor_default_problem.clone().unwrap_or_else(|| {
                    "berth's default AppArmor profile is not loaded on this host".into()
                }),
            )),
        },
    }
}

/// Refuses SELinux options where SELinux would need them applied.
pub fn check_selinux(
    id: &str,
    options: Option<&v1::SeLinuxOption>,
    opts: &SpecOptions,
) -> Result<(), Error> {
    let asked = options.is_some_and(|o| {
        !(o.user.is_empty() && o.role.is_empty() && o.r#type.is_empty() && o.level.is_empty())
    });
    if asked && opts.selinux_enabled {
        return Err(invalid(
            id,
            "selinux_options",
            "SELinux is enabled on this host and berth does not apply SELinux labels yet",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use v1::security_profile::ProfileType as T;

    fn profile(kind: T, name: &str) -> v1::SecurityProfile {
        v1::SecurityProfile {
            profile_type: kind as i32,
            localhost_ref: name.into(),
        }
    }

    #[test]
    fn without_apparmor_localhost_is_refused_the_rest_unconfined() {
        let opts = SpecOptions::default();
        let e = apparmor_profile("c", Some(&profile(T::Localhost, "web")), "", &opts).unwrap_err();
        assert!(e.to_string().contains("not enabled"), "{e}");
        assert!(apparmor_profile("c", None, "localhost/web", &opts).is_err());
        for p in [T::RuntimeDefault, T::Unconfined] {
            assert_eq!(
                apparmor_profile("c", Some(&profile(p, "")), "", &opts).unwrap(),
                None
            );
        }
        assert_eq!(apparmor_profile("c", None, "", &opts).unwrap(), None);
    }

    #[test]
    fn with_apparmor_profiles_are_applied() {
        let mut opts = SpecOptions {
            apparmor_enabled: true,
            ..Default::default()
        };
        let get = |p: Option<v1::SecurityProfile>, d: &str, o: &SpecOptions| {
            apparmor_profile("c", p.as_ref(), d, o)
        };
        assert_eq!(
            get(Some(profile(T::Localhost, "web")), "", &opts)
                .unwrap()
                .as_deref(),
            Some("web")
        );
        assert_eq!(
            get(None, "localhost/web", &opts).unwrap().as_deref(),
            Some("web")
        );
        assert_eq!(
            get(Some(profile(T::Unconfined, "")), "", &opts)
                .unwrap()
                .as_deref(),
            Some("unconfined")
        );
        // Berth's default is not loaded: RuntimeDefault, asked or implied,
        // is refused with the reason the daemon kept.
        assert!(get(Some(profile(T::RuntimeDefault, "")), "", &opts).is_err());
        assert!(get(None, "", &opts).is_err());
        opts.apparmor_default_problem = Some("apparmor_parser exit 1: boom".into());
        let e = get(None, "", &opts).unwrap_err().to_string();
        assert!(e.contains("boom"), "{e}");
        opts.apparmor_default = Some("berth-default".into());
        assert_eq!(
            get(None, "runtime/default", &opts).unwrap().as_deref(),
            Some("berth-default")
        );
        assert_eq!(
            get(None, "", &opts).unwrap().as_deref(),
            Some("berth-default")
        );
        assert!(get(None, "bogus", &opts).is_err());
    }

    #[test]
    fn selinux_options_are_refused_only_where_selinux_is_on() {
        let o = v1::SeLinuxOption {
            r#type: "spc_t".into(),
            ..Default::default()
        };
        let mut opts = SpecOptions::default();
        check_selinux("c", Some(&o), &opts).unwrap();
        opts.selinux_enabled = true;
        assert!(check_selinux("c", Some(&o), &opts).is_err());
        check_selinux("c", Some(&v1::SeLinuxOption::default()), &opts).unwrap();
    }
}
