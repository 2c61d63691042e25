//! The files a pod's containers share: hostname, /etc/hosts, resolv.conf,
//! and the /dev/shm tmpfs.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use cri_api::v1;
use nix::mount::{mount, umount2, MntFlags, MsFlags};

/// Size of a pod's /dev/shm, as containerd and CRI-O default.
const SHM_SIZE: &str = "65536k";

/// The /etc/hosts of a pod with its own network namespace.
const POD_HOSTS: &str = "127.0.0.1\tlocalhost\n\
::1\tlocalhost ip6-localhost ip6-loopback\n\
fe00::0\tip6-localnet\n\
ff00::0\tip6-mcastprefix\n\
ff02::1\tip6-allnodes\n\
ff02::2\tip6-allrouters\n";

/// Paths of a sandbox's shared files.
#[derive(Debug, Clone)]
pub struct SandboxFiles {
    /// Persistent dir: hostname, hosts, resolv.conf.
    pub root: PathBuf,
    /// Runtime dir: shm mount point, the pause bundle.
    pub state: PathBuf,
}

impl SandboxFiles {
    pub fn hostname(&self) -> PathBuf {
        self.root.join("hostname")
    }
    pub fn hosts(&self) -> PathBuf {
        self.root.join("hosts")
    }
    pub fn resolv_conf(&self) -> PathBuf {
        self.root.join("resolv.conf")
    }
    pub fn shm(&self) -> PathBuf {
        self.state.join("shm")
    }
    pub fn bundle(&self) -> PathBuf {
        self.state.join("pause")
    }

    /// Writes hostname, hosts and resolv.conf.
    pub fn write(
        &self,
        hostname: &str,
        host_network: bool,
        dns: Option<&v1::DnsConfig>,
    ) -> io::Result<()> {
        std::fs::create_dir_all(&self.root)?;
        std::fs::write(self.hostname(), format!("{hostname}\n"))?;
        if host_network {
            std::fs::copy("/etc/hosts", self.hosts())?;
        } else {
            std::fs::write(self.hosts(), POD_HOSTS)?;
        }
        match dns {
            Some(dns) => std::fs::write(self.resolv_conf(), resolv_conf(dns))?,
            None => {
                std::fs::copy("/etc/resolv.conf", self.resolv_conf())?;
            }
        }
        // Bound into every container of the pod: readable by its users,
        // writable by none but root, whatever the umask or the host's modes.
        for file in [self.hostname(), self.hosts(), self.resolv_conf()] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
        }
        Ok(())
    }

    /// Mounts the pod's /dev/shm tmpfs.
    pub fn mount_shm(&self) -> io::Result<()> {
        let shm = self.shm();
        std::fs::create_dir_all(&shm)?;
        mount(
            Some("shm"),
            &shm,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some(format!("mode=1777,size={SHM_SIZE}").as_str()),
        )
        .map_err(io::Error::from)
    }

    /// Unmounts /dev/shm; not mounted is fine.
    pub fn unmount_shm(&self) -> io::Result<()> {
        match umount2(&self.shm(), MntFlags::MNT_DETACH) {
            Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes both dirs (after unmounting shm); absent is fine.
    pub fn remove(&self) -> io::Result<()> {
        self.unmount_shm()?;
        for dir in [&self.state, &self.root] {
            match std::fs::remove_dir_all(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// resolv.conf text from the pod's DNS config.
pub fn resolv_conf(dns: &v1::DnsConfig) -> String {
    let mut text = String::new();
    if !dns.searches.is_empty() {
        text.push_str(&format!("search {}\n", dns.searches.join(" ")));
    }
    for server in &dns.servers {
        text.push_str(&format!("nameserver {server}\n"));
    }
    if !dns.options.is_empty() {
        text.push_str(&format!("options {}\n", dns.options.join(" ")));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_from_dns_config() {
        let dns = v1::DnsConfig {
            servers: vec!["10.96.0.10".into(), "1.1.1.1".into()],
            searches: vec![
                "default.svc.cluster.local".into(),
                "svc.cluster.local".into(),
            ],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(
            resolv_conf(&dns),
            "search default.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\nnameserver 1.1.1.1\noptions ndots:5\n"
        );
    }

    #[test]
    fn writes_files() {
        let dir = tempfile::tempdir().unwrap();
        let files = crate::layout::Layout::new(dir.path().join("root"), dir.path().join("state"))
            .sandbox_files("abc");
        let dns = v1::DnsConfig {
            servers: vec!["10.0.0.10".into()],
            ..Default::default()
        };
        files.write("web-0", false, Some(&dns)).unwrap();
        assert_eq!(
            std::fs::read_to_string(files.hostname()).unwrap(),
            "web-0\n"
        );
        assert!(std::fs::read_to_string(files.hosts())
            .unwrap()
            .starts_with("127.0.0.1\tlocalhost"));
        assert_eq!(
            std::fs::read_to_string(files.resolv_conf()).unwrap(),
            "nameserver 10.0.0.10\n"
        );
        files.remove().unwrap();
        assert!(!files.root.exists());
        files.remove().unwrap();
    }
}
