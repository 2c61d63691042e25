//! CNI and the pod's namespaces (network; UTS and IPC pinned without a
//! pause) through berth_cni and berth_netns.

use std::path::{Path, PathBuf};

use tonic::async_trait;

use super::blocking;
use super::mounts::{private_to, remove_mounted_tree};
use crate::core::mechanisms::{Namespaces, Network, PinRequest, UsernsPin};
use crate::error::Error;
use crate::layout;

/// CNI through [`berth_cni::Cni`].
pub struct Cni(pub berth_cni::Cni);

#[async_trait]
impl Network for Cni {
    async fn add(
        &self,
        id: &str,
        attachment: &berth_cni::Attachment,
    ) -> Result<Vec<String>, Error> {
        let result = self
            .0
            .add(attachment)
            .await
            .map_err(Error::network(id, "setting up the pod network"))?;
        Ok(result
            .sandbox_ips(&attachment.ifname)
            .iter()
            .map(|ip| ip.to_string())
            .collect())
    }

    async fn del(&self, id: &str, attachment: &berth_cni::Attachment) -> Result<(), Error> {
        self.0
            .del(attachment)
            .await
            .map_err(Error::network(id, "tearing down the pod network"))
    }

    fn ready(&self) -> Result<(), String> {
        self.0
            .network_ready()
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn attachments(&self) -> Vec<(String, String)> {
        self.0.cached_attachments().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "listing the CNI cache");
            Vec::new()
        })
    }
}

/// Network namespaces through [`berth_netns`], each on a fresh thread.
pub struct NetNs;

#[async_trait]
impl Namespaces for NetNs {
    async fn create_netns(
        &self,
        id: &str,
        path: &Path,
        userns: Option<&UsernsPin>,
    ) -> Result<(), Error> {
        let (id, path, userns) = (id.to_string(), path.to_path_buf(), userns.cloned());
        blocking(move || {
            let dir = path.parent().map(PathBuf::from).unwrap_or_default();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let made = match &userns {
                None => berth_netns::NetNs::create(&dir, &name),
                // The network namespace must be owned by the pod's user
                // namespace, or the pod's root could neither join it nor
                // mount sysfs in it. berth makes both itself, in one forked
                // holder process (berth_idmap::Holder), before the pause,
                // as for other pods: CNI ADD runs before the pause exists,
                // so the order of the pod's set-up stays the same for every
                // pod, and it works the same with runc 1.1 and crun 1.8,
                // which only join both namespaces by path. (Letting the
                // runtime make the netns and binding /proc/PID/ns/net
                // afterwards, as containerd 2 does, would move CNI after
                // the pause for these pods only.)
                Some(u) => {
                    let tree = u.path.parent().unwrap_or(Path::new("/"));
                    private_to(tree, u.mapping.host_root_uid(), u.mapping.host_root_gid())
                        .map_err(Error::io(&id, "creating", tree))?;
                    let (uids, gids) = (u.mapping.uids.map_line(), u.mapping.gids.map_line());
                    berth_netns::NetNs::create_owned(&dir, &name, &u.path, &uids, &gids)
                }
            };
            made.map(|_| ()).map_err(|e| {
                Error::io(&id, "creating network namespace", &path)(std::io::Error::other(e))
            })
        })
        .await
    }

    async fn remove_netns(&self, id: &str, path: &Path) -> Result<(), Error> {
        let (id, path) = (id.to_string(), path.to_path_buf());
        blocking(move || {
            berth_netns::remove_path(&path).map_err(|e| {
                Error::io(&id, "removing network namespace", &path)(std::io::Error::other(e))
            })?;
            match layout::pod_userns_of_netns(&path) {
                Some(tree) => remove_mounted_tree(&id, &tree.root),
                None => Ok(()),
            }
        })
        .await
    }

    async fn create_userns(&self, id: &str, userns: &UsernsPin) -> Result<(), Error> {
        let (id, u) = (id.to_string(), userns.clone());
        blocking(move || {
            let tree = u.path.parent().unwrap_or(Path::new("/"));
            private_to(tree, u.mapping.host_root_uid(), u.mapping.host_root_gid())
                .map_err(Error::io(&id, "creating", tree))?;
            let (uids, gids) = (u.mapping.uids.map_line(), u.mapping.gids.map_line());
            berth_netns::create_userns(&u.path, &uids, &gids).map_err(|e| {
                Error::io(&id, "creating user namespace", &u.path)(std::io::Error::other(e))
            })
        })
        .await
    }

    async fn pin(&self, id: &str, dir: &Path, req: PinRequest) -> Result<(), Error> {
        let (id, dir) = (id.to_string(), dir.to_path_buf());
        blocking(move || {
            berth_netns::pin::pin(&dir, &req).map(|_| ()).map_err(|e| {
                Error::io(&id, "pinning the pod's namespaces in", &dir)(std::io::Error::other(e))
            })
        })
        .await
    }

    async fn unpin(&self, id: &str, dir: &Path) -> Result<(), Error> {
        let (id, dir) = (id.to_string(), dir.to_path_buf());
        blocking(move || {
            berth_netns::pin::unpin(&dir).map_err(|e| {
                Error::io(&id, "removing the pod's pinned namespaces in", &dir)(
                    std::io::Error::other(e),
                )
            })
        })
        .await
    }

    fn is_pinned(&self, dir: &Path, req: &PinRequest) -> bool {
        berth_netns::pin::is_pinned(&req.files(dir)).unwrap_or(false)
    }

    fn is_netns(&self, path: &Path) -> bool {
        berth_netns::is_namespace(path).unwrap_or(false)
    }
}
