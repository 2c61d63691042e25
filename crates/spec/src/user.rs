//! The user a container runs as: `run_as_username`, `run_as_user` and
//! `run_as_group` from the security context, else the image's `User`
//! (`uid`, `uid:gid`, `name`, `name:group`), resolved against the container
//! rootfs's /etc/passwd and /etc/group — read with the rootfs as root, so a
//! symlink in the image cannot lead outside it — plus the supplementary
//! groups by `supplemental_groups_policy`.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use cri_api::v1;
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, Mode, SFlag};

use crate::error::{invalid, invalid_path, io_error, Error};

/// The largest id accepted: runc's (and the kernel's overflow id aside,
/// every 32-bit id user space can pass around). 4294967295 is `(uid_t)-1`,
/// "no change" to setresuid, and never valid.
const MAX_ID: u64 = i32::MAX as u64;

/// A uid or gid from a CRI field (an int64), checked to be one runc can
/// set: a silent `as u32` would turn 4294967296 into root.
pub(crate) fn check_id(id: &str, field: &str, value: i64) -> Result<u32, Error> {
    u64::try_from(value)
        .ok()
        .filter(|v| *v <= MAX_ID)
        .map(|v| v as u32)
        .ok_or_else(|| invalid(id, field, format!("{value} is out of range 0..={MAX_ID}")))
}

/// /etc/passwd or /etc/group larger than this is refused.
const MAX_FILE: u64 = 8 << 20;

/// The ids of a container's process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedUser {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, sorted, always holding `gid`.
    pub additional_gids: Vec<u32>,
}

/// One line of /etc/passwd.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PasswdEntry {
    name: String,
    uid: u32,
    gid: u32,
}

/// One line of /etc/group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupEntry {
    name: String,
    gid: u32,
    members: Vec<String>,
}

fn parse_id(s: &str) -> Option<u32> {
    s.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| *n <= MAX_ID)
        .map(|n| n as u32)
}

/// The colon-separated fields of each entry of a passwd-style file.
fn records(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split(':').collect())
}

fn parse_passwd(text: &str) -> Vec<PasswdEntry> {
    records(text)
        .filter_map(|f| {
            Some(PasswdEntry {
                name: f.first()?.to_string(),
                uid: parse_id(f.get(2)?)?,
                gid: parse_id(f.get(3)?)?,
            })
        })
        .collect()
}

fn parse_group(text: &str) -> Vec<GroupEntry> {
    records(text)
        .filter_map(|f| {
            let members = f.get(3).map_or_else(Vec::new, |m| {
                m.split(',')
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(String::from)
                    .collect()
            });
            Some(GroupEntry {
                name: f.first()?.to_string(),
                gid: parse_id(f.get(2)?)?,
                members,
            })
        })
        .collect()
}

/// The container rootfs opened as a directory, to resolve paths inside it.
struct Rootfs<'a> {
    id: &'a str,
    path: &'a Path,
    fd: OwnedFd,
}

impl<'a> Rootfs<'a> {
    fn open(id: &'a str, path: &'a Path) -> Result<Self, Error> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_error(id, "opening the rootfs", path, e.into()))?;
        Ok(Rootfs { id, path, fd })
    }

    /// Reads `rel` (e.g. `etc/passwd`) with the rootfs as `/`: symlinks,
    /// absolute or with `..`, resolve inside it. `None` when there is no such
    /// file.
    fn read(&self, rel: &str) -> Result<Option<String>, Error> {
        let full = self.path.join(rel);
        let how = OpenHow::new()
            .flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK | OFlag::O_NOCTTY)
            .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let fd = match nix::fcntl::openat2(self.fd.as_fd(), rel, how) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) | Err(Errno::ENOTDIR) => return Ok(None),
            Err(e) => return Err(io_error(self.id, "opening", &full, e.into())),
        };
        let st = fstat(&fd).map_err(|e| io_error(self.id, "inspecting", &full, e.into()))?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Err(invalid_path(
                self.id,
                "image",
                &full,
                "is not a regular file",
            ));
        }
        let mut text = String::new();
        std::fs::File::from(fd)
            .take(MAX_FILE + 1)
            .read_to_string(&mut text)
            .map_err(|e| io_error(self.id, "reading", &full, e))?;
        if text.len() as u64 > MAX_FILE {
            return Err(invalid_path(self.id, "image", &full, "is too large"));
        }
        Ok(Some(text))
    }

    fn passwd(&self) -> Result<Vec<PasswdEntry>, Error> {
        Ok(self
            .read("etc/passwd")?
            .map(|t| parse_passwd(&t))
            .unwrap_or_default())
    }

    fn group(&self) -> Result<Vec<GroupEntry>, Error> {
        Ok(self
            .read("etc/group")?
            .map(|t| parse_group(&t))
            .unwrap_or_default())
    }
}

/// The user spec to resolve and the field it came from.
fn user_string(
    id: &str,
    sc: Option<&v1::LinuxContainerSecurityContext>,
    image_user: &str,
) -> Result<(String, &'static str), Error> {
    const SC: &str = "linux.security_context";
    let username = sc.map(|s| s.run_as_username.as_str()).unwrap_or("");
    let uid = sc.and_then(|s| s.run_as_user);
    let gid = sc.and_then(|s| s.run_as_group);
    for (value, field) in [(uid, "run_as_user"), (gid, "run_as_group")] {
        if let Some(v) = value {
            check_id(id, &format!("{SC}.{field}"), v.value)?;
        }
    }
    let user = if !username.is_empty() {
        if username.contains(':') {
            return Err(invalid(
                id,
                format!("{SC}.run_as_username"),
                format!("invalid user name {username:?}"),
            ));
        }
        username.to_string()
    } else if let Some(uid) = uid {
        uid.value.to_string()
    } else {
        String::new()
    };
    if user.is_empty() {
        if gid.is_some() {
            return Err(invalid(
                id,
                format!("{SC}.run_as_group"),
                "is set without run_as_user or run_as_username",
            ));
        }
        return Ok((image_user.trim().to_string(), "image config User"));
    }
    let field = if username.is_empty() {
        "linux.security_context.run_as_user"
    } else {
        "linux.security_context.run_as_username"
    };
    Ok(match gid {
        Some(g) => (format!("{user}:{}", g.value), field),
        None => (user, field),
    })
}

/// Resolves the container's uid, gid and supplementary groups.
///
/// The user comes from `run_as_username` or `run_as_user` (with
/// `run_as_group`), else from the image's `User`, else root. A name must be in
/// the rootfs's /etc/passwd (a group name in /etc/group); a numeric uid need
/// not be, and then its gid is 0 unless given. With the `Merge` policy the
/// groups of /etc/group that list the user join the supplementary set, with
/// `Strict` only `supplemental_groups` do.
pub fn resolve_user(
    id: &str,
    rootfs: &Path,
    sc: Option<&v1::LinuxContainerSecurityContext>,
    image_user: &str,
) -> Result<ResolvedUser, Error> {
    let (spec, field) = user_string(id, sc, image_user)?;
    let spec = if spec.is_empty() {
        "0".to_string()
    } else {
        spec
    };
    let mut parts = spec.split(':');
    let user_part = parts.next().unwrap_or("");
    let group_part = parts.next();
    if parts.next().is_some() || user_part.is_empty() || group_part == Some("") {
        return Err(invalid(id, field, format!("invalid user {spec:?}")));
    }
    let root = Rootfs::open(id, rootfs)?;
    let passwd = root.passwd()?;
    let numeric = |s: &str| s.bytes().all(|b| b.is_ascii_digit());

    let (uid, mut gid, name) = if numeric(user_part) {
        let uid = parse_id(user_part)
            .ok_or_else(|| invalid(id, field, format!("uid {user_part} is out of range")))?;
        match passwd.iter().find(|e| e.uid == uid) {
            Some(e) => (uid, e.gid, Some(e.name.clone())),
            None => (uid, 0, None),
        }
    } else {
        let e = passwd.iter().find(|e| e.name == user_part).ok_or_else(|| {
            invalid(
                id,
                field,
                format!("user {user_part:?} is not in the image's /etc/passwd"),
            )
        })?;
        (e.uid, e.gid, Some(e.name.clone()))
    };

    let policy = sc.map(|s| s.supplemental_groups_policy).unwrap_or_default();
    let policy = v1::SupplementalGroupsPolicy::try_from(policy).map_err(|_| {
        invalid(
            id,
            "linux.security_context.supplemental_groups_policy",
            format!("unknown policy {policy}"),
        )
    })?;
    let groups = match (group_part, policy, &name) {
        (Some(_), _, _) | (None, v1::SupplementalGroupsPolicy::Merge, Some(_)) => root.group()?,
        _ => Vec::new(),
    };
    if let Some(g) = group_part {
        gid = if numeric(g) {
            parse_id(g).ok_or_else(|| invalid(id, field, format!("gid {g} is out of range")))?
        } else {
            groups
                .iter()
                .find(|e| e.name == g)
                .map(|e| e.gid)
                .ok_or_else(|| {
                    invalid(
                        id,
                        field,
                        format!("group {g:?} is not in the image's /etc/group"),
                    )
                })?
        };
    }

    let mut gids = vec![gid];
    if policy == v1::SupplementalGroupsPolicy::Merge {
        if let Some(name) = &name {
            gids.extend(
                groups
                    .iter()
                    .filter(|g| g.members.iter().any(|m| m == name))
                    .map(|g| g.gid),
            );
        }
    }
    for g in sc
        .map(|s| s.supplemental_groups.as_slice())
        .unwrap_or_default()
    {
        gids.push(check_id(
            id,
            "linux.security_context.supplemental_groups",
            *g,
        )?);
    }
    gids.sort_unstable();
    gids.dedup();
    Ok(ResolvedUser {
        uid,
        gid,
        additional_gids: gids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
        daemon:x:1:1:daemon:/usr/sbin:/bin/false\n\
        # a comment\n\
        broken line\n\
        app:x:1000:1000::/home/app:/bin/sh\n\
        nobody:x:65534:65534:nobody:/:/bin/false\n";
    const GROUP: &str = "root:x:0:\n\
        bin:x:1:root,bin\n\
        wheel:x:10:root,app\n\
        app:x:1000:\n\
        staff:x:50:app\n\
        video:x:44:\n";

    fn rootfs(passwd: &str, group: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        std::fs::write(dir.path().join("etc/passwd"), passwd).unwrap();
        std::fs::write(dir.path().join("etc/group"), group).unwrap();
        dir
    }

    fn sc() -> v1::LinuxContainerSecurityContext {
        v1::LinuxContainerSecurityContext::default()
    }

    fn resolve(
        root: &Path,
        sc: Option<&v1::LinuxContainerSecurityContext>,
        image: &str,
    ) -> ResolvedUser {
        resolve_user("c", root, sc, image).unwrap()
    }

    #[test]
    fn default_is_root_with_its_groups() {
        let r = rootfs(PASSWD, GROUP);
        let u = resolve(r.path(), None, "");
        assert_eq!((u.uid, u.gid), (0, 0));
        assert_eq!(u.additional_gids, vec![0, 1, 10]);
    }

    #[test]
    fn image_user_forms() {
        let r = rootfs(PASSWD, GROUP);
        let u = resolve(r.path(), None, "app");
        assert_eq!((u.uid, u.gid), (1000, 1000));
        assert_eq!(u.additional_gids, vec![10, 50, 1000]);
        let u = resolve(r.path(), None, "1000");
        assert_eq!((u.uid, u.gid), (1000, 1000));
        let u = resolve(r.path(), None, "1000:44");
        assert_eq!((u.uid, u.gid), (1000, 44));
        assert_eq!(u.additional_gids, vec![10, 44, 50]);
        let u = resolve(r.path(), None, "app:video");
        assert_eq!((u.uid, u.gid), (1000, 44));
        // A uid not in passwd: gid 0, no groups.
        let u = resolve(r.path(), None, "4242");
        assert_eq!((u.uid, u.gid), (4242, 0));
        assert_eq!(u.additional_gids, vec![0]);
        let u = resolve(r.path(), None, "4242:4243");
        assert_eq!((u.uid, u.gid), (4242, 4243));
    }

    #[test]
    fn security_context_wins_over_image() {
        let r = rootfs(PASSWD, GROUP);
        let mut s = sc();
        s.run_as_user = Some(v1::Int64Value { value: 1 });
        let u = resolve(r.path(), Some(&s), "app");
        assert_eq!((u.uid, u.gid), (1, 1));
        s.run_as_group = Some(v1::Int64Value { value: 77 });
        let u = resolve(r.path(), Some(&s), "app");
        assert_eq!((u.uid, u.gid), (1, 77));
        let mut s = sc();
        s.run_as_username = "app".into();
        let u = resolve(r.path(), Some(&s), "daemon");
        assert_eq!((u.uid, u.gid), (1000, 1000));
        s.run_as_group = Some(v1::Int64Value { value: 5 });
        let u = resolve(r.path(), Some(&s), "");
        assert_eq!((u.uid, u.gid), (1000, 5));
    }

    #[test]
    fn supplemental_groups_merge_and_strict() {
        let r = rootfs(PASSWD, GROUP);
        let mut s = sc();
        s.run_as_username = "app".into();
        s.supplemental_groups = vec![3000, 50];
        let u = resolve(r.path(), Some(&s), "");
        assert_eq!(u.additional_gids, vec![10, 50, 1000, 3000]);
        s.supplemental_groups_policy = v1::SupplementalGroupsPolicy::Strict as i32;
        let u = resolve(r.path(), Some(&s), "");
        assert_eq!(u.additional_gids, vec![50, 1000, 3000]);
    }

    #[test]
    fn bad_users_are_invalid_argument() {
        let r = rootfs(PASSWD, GROUP);
        let err = |s: Option<&v1::LinuxContainerSecurityContext>, image: &str| {
            let e = resolve_user("c7", r.path(), s, image).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{e}");
            assert!(e.to_string().contains("c7"), "{e}");
            e.to_string()
        };
        assert!(err(None, "ghost").contains("ghost"));
        assert!(err(None, "app:ghosts").contains("ghosts"));
        assert!(err(None, "a:b:c").contains("a:b:c"));
        assert!(err(None, "99999999999").contains("out of range"));
        let mut s = sc();
        s.run_as_username = "ghost".into();
        assert!(err(Some(&s), "").contains("run_as_username"));
        let mut s = sc();
        s.run_as_user = Some(v1::Int64Value { value: -1 });
        assert!(err(Some(&s), "").contains("run_as_user"));
        let mut s = sc();
        s.run_as_group = Some(v1::Int64Value { value: 5 });
        assert!(err(Some(&s), "").contains("run_as_group"));
        let mut s = sc();
        s.run_as_user = Some(v1::Int64Value { value: 5 });
        s.supplemental_groups = vec![-3];
        assert!(err(Some(&s), "").contains("supplemental_groups"));
        // Before, u32::try_from let (uid_t)-1 and ids runc refuses through.
        for g in [4294967295, 4294967296, 1 << 31] {
            s.supplemental_groups = vec![g];
            assert!(err(Some(&s), "").contains("supplemental_groups"), "{g}");
        }
        for (uid, gid) in [(4294967296, 0), (0, 4294967296), (4294967295, 0), (-1, 0)] {
            let mut s = sc();
            s.run_as_user = Some(v1::Int64Value { value: uid });
            s.run_as_group = Some(v1::Int64Value { value: gid });
            let e = err(Some(&s), "");
            assert!(e.contains("out of range"), "{uid}:{gid}: {e}");
        }
    }

    #[test]
    fn no_passwd_file_still_allows_numeric_users() {
        let r = tempfile::tempdir().unwrap();
        let u = resolve(r.path(), None, "");
        assert_eq!((u.uid, u.gid, u.additional_gids), (0, 0, vec![0]));
        let u = resolve(r.path(), None, "123:456");
        assert_eq!((u.uid, u.gid), (123, 456));
        assert!(resolve_user("c", r.path(), None, "app").is_err());
    }

    #[test]
    fn symlinks_do_not_leave_the_rootfs() {
        // The "outside" passwd knows a user the rootfs does not.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("passwd"), "evil:x:0:0::/:/bin/sh\n").unwrap();
        let r = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(r.path().join("etc")).unwrap();
        symlink(outside.path().join("passwd"), r.path().join("etc/passwd")).unwrap();
        let e = resolve_user("c", r.path(), None, "evil").unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{e}");

        // A relative link climbing out is clamped at the rootfs root too.
        std::fs::remove_file(r.path().join("etc/passwd")).unwrap();
        let up = "../".repeat(30)
            + outside
                .path()
                .join("passwd")
                .to_str()
                .unwrap()
                .trim_start_matches('/');
        symlink(up, r.path().join("etc/passwd")).unwrap();
        assert!(resolve_user("c", r.path(), None, "evil").is_err());

        // An absolute link is read inside the rootfs, as the container sees it.
        std::fs::remove_file(r.path().join("etc/passwd")).unwrap();
        std::fs::create_dir_all(r.path().join("real")).unwrap();
        std::fs::write(r.path().join("real/passwd"), "inside:x:7:8::/:/bin/sh\n").unwrap();
        symlink("/real/passwd", r.path().join("etc/passwd")).unwrap();
        let u = resolve(r.path(), None, "inside");
        assert_eq!((u.uid, u.gid), (7, 8));
    }

    #[test]
    fn a_fifo_passwd_is_refused_not_blocked_on() {
        let r = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(r.path().join("etc")).unwrap();
        nix::unistd::mkfifo(
            &r.path().join("etc/passwd"),
            Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let e = resolve_user("c", r.path(), None, "app").unwrap_err();
        assert!(e.to_string().contains("regular file"), "{e}");
    }
}
