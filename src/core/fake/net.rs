//! The fake network (CNI) and namespaces.

use std::path::Path;

use tonic::async_trait;

use super::Fake;
use crate::core::mechanisms::{Namespaces, Network, PinRequest, UsernsPin};
use crate::error::Error;

#[async_trait]
impl Network for Fake {
    async fn add(
        &self,
        id: &str,
        attachment: &berth_cni::Attachment,
    ) -> Result<Vec<String>, Error> {
        self.added.lock().unwrap().push(attachment.clone());
        self.call("cni.add", id).await?;
        self.world.lock().unwrap().attached.insert(id.to_string());
        Ok(vec!["10.88.0.2".into()])
    }
    async fn del(&self, id: &str, _attachment: &berth_cni::Attachment) -> Result<(), Error> {
        self.call("cni.del", id).await?;
        self.world.lock().unwrap().attached.remove(id);
        Ok(())
    }
    fn ready(&self) -> Result<(), String> {
        Ok(())
    }

    fn attachments(&self) -> Vec<(String, String)> {
        let world = self.world.lock().unwrap();
        world
            .attached
            .iter()
            .map(|id| (id.clone(), "eth0".to_string()))
            .collect()
    }
}

#[async_trait]
impl Namespaces for Fake {
    async fn create_netns(
        &self,
        id: &str,
        path: &Path,
        userns: Option<&UsernsPin>,
    ) -> Result<(), Error> {
        self.call("netns.create", id).await?;
        let mut world = self.world.lock().unwrap();
        world.netns.insert(path.to_path_buf());
        if let Some(u) = userns {
            world.userns.insert(u.path.clone(), u.mapping);
        }
        Ok(())
    }
    async fn remove_netns(&self, id: &str, path: &Path) -> Result<(), Error> {
        self.call("netns.remove", id).await?;
        let mut world = self.world.lock().unwrap();
        world.netns.remove(path);
        if let Some(tree) = crate::layout::pod_userns_of_netns(path) {
            world.userns.retain(|p, _| !p.starts_with(&tree.root));
            world.unbind_below(&tree.root);
        }
        Ok(())
    }
    async fn create_userns(&self, id: &str, userns: &UsernsPin) -> Result<(), Error> {
        self.call("userns.create", id).await?;
        let mut world = self.world.lock().unwrap();
        world.userns.insert(userns.path.clone(), userns.mapping);
        Ok(())
    }
    async fn pin(&self, id: &str, dir: &Path, _req: PinRequest) -> Result<(), Error> {
        self.call("ns.pin", id).await?;
        self.world.lock().unwrap().pins.insert(dir.to_path_buf());
        Ok(())
    }
    async fn unpin(&self, id: &str, dir: &Path) -> Result<(), Error> {
        self.call("ns.unpin", id).await?;
        self.world.lock().unwrap().pins.remove(dir);
        Ok(())
    }
    fn is_pinned(&self, dir: &Path, _req: &PinRequest) -> bool {
        self.world.lock().unwrap().pins.contains(dir)
    }
    fn is_netns(&self, path: &Path) -> bool {
        self.world.lock().unwrap().netns.contains(path)
    }
}
