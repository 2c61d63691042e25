//! The test plugin's `Plugin` service: logs every event, misbehaves on
//! request, and answers from the script.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use ttrpc::r#async::TtrpcContext;

use berth_nri::api;
use berth_nri::api_ttrpc::{self, RuntimeClient};
use berth_nri::events::{parse_event, EventMask};

use crate::script::{Misbehave, Script};

pub struct TestPlugin {
    pub script: Script,
    pub log: Option<Mutex<std::fs::File>>,
    pub runtime: OnceLock<RuntimeClient>,
    /// A second handle on the trunk, for the "oversize" misbehaviour.
    pub raw: tokio::sync::Mutex<Option<tokio::net::UnixStream>>,
}

fn pod_json(p: &api::PodSandbox) -> Value {
    json!({"id": p.id, "name": p.name, "uid": p.uid, "namespace": p.namespace,
        "labels": p.labels, "annotations": p.annotations})
}

fn ctr_json(c: &api::Container) -> Value {
    json!({"id": c.id, "pod_sandbox_id": c.pod_sandbox_id, "name": c.name,
        "state": format!("{:?}", c.state.enum_value_or_default()), "pid": c.pid,
        "labels": c.labels, "annotations": c.annotations, "env": c.env})
}

type R<T> = ttrpc::Result<T>;

impl TestPlugin {
    pub fn record(&self, event: &str, extra: Value) {
        let mut line = json!({"event": event});
        if let (Some(m), Value::Object(extra)) = (line.as_object_mut(), extra) {
            m.extend(extra);
        }
        if let Some(log) = &self.log {
            if let Ok(mut f) = log.lock() {
                let _ = writeln!(f, "{line}");
            }
        }
    }

    /// Applies the scripted misbehaviour for `event`, if any.
    pub async fn misbehave(&self, event: &str) -> R<()> {
        match self.script.misbehave.get(event) {
            None => Ok(()),
            Some(Misbehave::Hang) => {
                // Logged as it starts: a test sees the hang under way
                // without timing it.
                self.record("Hang", json!({"for": event}));
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(())
            }
            Some(Misbehave::Crash) => std::process::exit(3),
            Some(Misbehave::Delay(ms)) => {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                // Logged before the reply goes: a caller that finds no
                // such line has not waited for the reply.
                self.record("Delayed", json!({"for": event}));
                Ok(())
            }
            Some(Misbehave::Oversize) => {
                if let Some(raw) = self.raw.lock().await.as_mut() {
                    let hdr = berth_nri::mux::encode_header(2, berth_nri::mux::MAX_PAYLOAD + 1);
                    let _ = raw.write_all(&hdr).await;
                }
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(())
            }
            Some(Misbehave::Error(msg)) => Err(ttrpc::Error::RpcStatus(ttrpc::get_status(
                ttrpc::Code::UNKNOWN,
                msg.clone(),
            ))),
        }
    }

    async fn event(
        &self,
        name: &str,
        pod: &api::PodSandbox,
        ctr: Option<&api::Container>,
    ) -> R<()> {
        // Without an events file (a no-op plugin, as the bench runs it)
        // nothing is recorded: nothing to build.
        if self.log.is_some() {
            let mut extra = json!({"pod": pod_json(pod)});
            if let Some(c) = ctr {
                extra["container"] = ctr_json(c);
            }
            self.record(name, extra);
        }
        self.misbehave(name).await
    }

    fn mask(&self) -> i32 {
        let mut m = EventMask::default();
        for name in &self.script.subscribe {
            if let Some(e) = parse_event(name) {
                m = m.with(e);
            }
        }
        m.0
    }

    async fn send_unsolicited(self: Arc<Self>) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Some(rt) = self.runtime.get() else { return };
        let req = api::UpdateContainersRequest {
            update: self
                .script
                .update_after_sync
                .iter()
                .map(|u| u.to_api())
                .collect(),
            ..Default::default()
        };
        let res = rt
            .update_containers(ttrpc::context::with_timeout(0), &req)
            .await;
        match res {
            Ok(r) => self.record("UpdateContainersResult", json!({"failed": r.failed.iter().map(|u| u.container_id.clone()).collect::<Vec<_>>()})),
            Err(e) => self.record("UpdateContainersResult", json!({"error": e.to_string()})),
        }
    }
}

pub struct Service(pub Arc<TestPlugin>);

#[async_trait::async_trait]
impl api_ttrpc::Plugin for Service {
    async fn configure(
        &self,
        _: &TtrpcContext,
        req: api::ConfigureRequest,
    ) -> R<api::ConfigureResponse> {
        self.0.record(
            "Configure",
            json!({"config": req.config, "runtime_name": req.runtime_name,
            "runtime_version": req.runtime_version, "request_timeout": req.request_timeout,
            "registration_timeout": req.registration_timeout}),
        );
        self.0.misbehave("Configure").await?;
        Ok(api::ConfigureResponse {
            events: self.0.mask(),
            ..Default::default()
        })
    }

    async fn synchronize(
        &self,
        _: &TtrpcContext,
        req: api::SynchronizeRequest,
    ) -> R<api::SynchronizeResponse> {
        self.0.record("Synchronize", json!({"pods": req.pods.iter().map(pod_json).collect::<Vec<_>>(),
            "containers": req.containers.iter().map(ctr_json).collect::<Vec<_>>(), "more": req.more}));
        self.0.misbehave("Synchronize").await?;
        if !req.more && !self.0.script.update_after_sync.is_empty() {
            tokio::spawn(self.0.clone().send_unsolicited());
        }
        Ok(api::SynchronizeResponse {
            more: req.more,
            ..Default::default()
        })
    }

    async fn shutdown(&self, _: &TtrpcContext, _: api::Empty) -> R<api::Empty> {
        self.0.record("Shutdown", json!({}));
        Ok(api::Empty::new())
    }

    async fn run_pod_sandbox(
        &self,
        _: &TtrpcContext,
        r: api::RunPodSandboxRequest,
    ) -> R<api::RunPodSandboxResponse> {
        self.0
            .event("RunPodSandbox", &r.pod, None)
            .await
            .map(|_| Default::default())
    }

    async fn update_pod_sandbox(
        &self,
        _: &TtrpcContext,
        r: api::UpdatePodSandboxRequest,
    ) -> R<api::UpdatePodSandboxResponse> {
        self.0
            .event("UpdatePodSandbox", &r.pod, None)
            .await
            .map(|_| Default::default())
    }

    async fn post_update_pod_sandbox(
        &self,
        _: &TtrpcContext,
        r: api::PostUpdatePodSandboxRequest,
    ) -> R<api::PostUpdatePodSandboxResponse> {
        self.0
            .event("PostUpdatePodSandbox", &r.pod, None)
            .await
            .map(|_| Default::default())
    }

    async fn stop_pod_sandbox(
        &self,
        _: &TtrpcContext,
        r: api::StopPodSandboxRequest,
    ) -> R<api::StopPodSandboxResponse> {
        self.0
            .event("StopPodSandbox", &r.pod, None)
            .await
            .map(|_| Default::default())
    }

    async fn remove_pod_sandbox(
        &self,
        _: &TtrpcContext,
        r: api::RemovePodSandboxRequest,
    ) -> R<api::RemovePodSandboxResponse> {
        self.0
            .event("RemovePodSandbox", &r.pod, None)
            .await
            .map(|_| Default::default())
    }

    async fn create_container(
        &self,
        _: &TtrpcContext,
        r: api::CreateContainerRequest,
    ) -> R<api::CreateContainerResponse> {
        self.0
            .event("CreateContainer", &r.pod, Some(&r.container))
            .await?;
        let adjust = self
            .0
            .script
            .adjust
            .to_api()
            .map_err(ttrpc::Error::Others)?;
        Ok(api::CreateContainerResponse {
            adjust: protobuf::MessageField::some(adjust),
            update: self.0.script.updates.iter().map(|u| u.to_api()).collect(),
            ..Default::default()
        })
    }

    async fn post_create_container(
        &self,
        _: &TtrpcContext,
        r: api::PostCreateContainerRequest,
    ) -> R<api::PostCreateContainerResponse> {
        self.0
            .event("PostCreateContainer", &r.pod, Some(&r.container))
            .await
            .map(|_| Default::default())
    }

    async fn start_container(
        &self,
        _: &TtrpcContext,
        r: api::StartContainerRequest,
    ) -> R<api::StartContainerResponse> {
        self.0
            .event("StartContainer", &r.pod, Some(&r.container))
            .await
            .map(|_| Default::default())
    }

    async fn post_start_container(
        &self,
        _: &TtrpcContext,
        r: api::PostStartContainerRequest,
    ) -> R<api::PostStartContainerResponse> {
        self.0
            .event("PostStartContainer", &r.pod, Some(&r.container))
            .await
            .map(|_| Default::default())
    }

    async fn update_container(
        &self,
        _: &TtrpcContext,
        r: api::UpdateContainerRequest,
    ) -> R<api::UpdateContainerResponse> {
        self.0
            .event("UpdateContainer", &r.pod, Some(&r.container))
            .await?;
        Ok(api::UpdateContainerResponse {
            update: self.0.script.updates.iter().map(|u| u.to_api()).collect(),
            ..Default::default()
        })
    }

    async fn post_update_container(
        &self,
        _: &TtrpcContext,
        r: api::PostUpdateContainerRequest,
    ) -> R<api::PostUpdateContainerResponse> {
        self.0
            .event("PostUpdateContainer", &r.pod, Some(&r.container))
            .await
            .map(|_| Default::default())
    }

    async fn stop_container(
        &self,
        _: &TtrpcContext,
        r: api::StopContainerRequest,
    ) -> R<api::StopContainerResponse> {
        self.0
            .event("StopContainer", &r.pod, Some(&r.container))
            .await
            .map(|_| Default::default())
    }

    async fn remove_container(
        &self,
        _: &TtrpcContext,
        r: api::RemoveContainerRequest,
    ) -> R<api::RemoveContainerResponse> {
        self.0
            .event("RemoveContainer", &r.pod, Some(&r.container))
            .await
            .map(|_| Default::default())
    }

    async fn state_change(&self, _: &TtrpcContext, r: api::StateChangeEvent) -> R<api::Empty> {
        let name = format!("StateChange:{:?}", r.event.enum_value_or_default());
        self.0
            .event(&name, &r.pod, r.container.as_ref())
            .await
            .map(|_| api::Empty::new())
    }

    async fn validate_container_adjustment(
        &self,
        _: &TtrpcContext,
        r: api::ValidateContainerAdjustmentRequest,
    ) -> R<api::ValidateContainerAdjustmentResponse> {
        self.0
            .event("ValidateContainerAdjustment", &r.pod, Some(&r.container))
            .await?;
        Ok(api::ValidateContainerAdjustmentResponse {
            reject: self.0.script.reject.is_some(),
            reason: self.0.script.reject.clone().unwrap_or_default(),
            ..Default::default()
        })
    }
}
