//! Retries of abandoned calls, waits for calls in progress, and the CNI
//! capabilities of annotations.

use super::*;

/// Runs `call` as the RPC layer does: on its own task, tracked so that it
/// sees its client go when the returned guard is dropped.
fn as_rpc<T: Send + 'static>(
    call: impl std::future::Future<Output = T> + Send + 'static,
) -> (super::caller::CallerGuard, tokio::task::JoinHandle<T>) {
    let (guard, body) = super::caller::track(call);
    (guard, tokio::spawn(body))
}

#[tokio::test]
async fn a_retry_of_an_abandoned_run_pod_sandbox_gets_its_id_once() {
    let r = rig();
    r.fake.delay("cni.add", Duration::from_millis(300));
    let core = r.core.clone();
    let (client, first) = as_rpc(async move { core.run_pod_sandbox(pod("web")).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The client times out; its call goes on.
    drop(client);
    // A different config for the same name is refused at once.
    let mut other = pod("web");
    other.config.hostname = "other".into();
    let e = r.core.run_pod_sandbox(other).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists);
    // The same request waits for the first and gets its id.
    let core = r.core.clone();
    let (retry_client, retry) = as_rpc(async move { core.run_pod_sandbox(pod("web")).await });
    let id = retry.await.unwrap().unwrap();
    retry_client.answered();
    assert_eq!(first.await.unwrap().unwrap(), id);
    assert_eq!(r.core.sandboxes.list().len(), 1);
    assert_eq!(r.fake.count("cni.add"), 1);
    // Once: a further identical request is told who holds the name.
    let e = r.core.run_pod_sandbox(pod("web")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists);
    assert!(e.to_string().contains(&id));
}

#[tokio::test]
async fn a_pod_whose_client_got_its_id_is_not_handed_out_again() {
    let r = rig();
    let core = r.core.clone();
    let (client, call) = as_rpc(async move { core.run_pod_sandbox(pod("web")).await });
    call.await.unwrap().unwrap();
    client.answered();
    let e = r.core.run_pod_sandbox(pod("web")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists);
}

#[tokio::test]
async fn a_retry_of_a_failed_abandoned_call_makes_the_pod_anew() {
    let r = rig();
    r.fake.delay("cni.add", Duration::from_millis(200));
    r.fake.fail("cni.add");
    let core = r.core.clone();
    let (client, first) = as_rpc(async move { core.run_pod_sandbox(pod("web")).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(client);
    let core = r.core.clone();
    let fake = r.fake.clone();
    let (_retry_client, retry) = as_rpc(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        // Heals before the first fails: the retry's own attempt works.
        fake.heal("cni.add");
        core.run_pod_sandbox(pod("web")).await
    });
    first.await.unwrap().unwrap_err();
    let id = retry.await.unwrap().unwrap();
    assert_eq!(
        r.core.sandboxes.get(&id).unwrap().status().state,
        SandboxState::Ready
    );
}

#[tokio::test]
async fn a_retry_of_an_abandoned_create_container_gets_its_id_once() {
    let r = rig();
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    r.fake
        .delay("files.mount_rootfs", Duration::from_millis(300));
    let core = r.core.clone();
    let req = container(&pod_id, "app");
    let (client, first) = as_rpc(async move { core.create_container(req).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(client);
    let mut other = container(&pod_id, "app");
    other.config.command = vec!["true".into()];
    assert_eq!(
        r.core.create_container(other).await.unwrap_err().code(),
        tonic::Code::AlreadyExists
    );
    let core = r.core.clone();
    let req = container(&pod_id, "app");
    let (_c, retry) = as_rpc(async move { core.create_container(req).await });
    let id = retry.await.unwrap().unwrap();
    assert_eq!(first.await.unwrap().unwrap(), id);
    assert_eq!(r.core.containers.list().len(), 1);
    assert_eq!(
        r.core
            .create_container(container(&pod_id, "app"))
            .await
            .unwrap_err()
            .code(),
        tonic::Code::AlreadyExists
    );
}

#[tokio::test]
async fn remove_pod_sandbox_waits_for_a_run_in_progress() {
    let r = rig();
    r.fake.delay("cni.add", Duration::from_millis(200));
    let core = r.core.clone();
    let run = tokio::spawn(async move { core.run_pod_sandbox(pod("web")).await });
    // The half-made sandbox is visible but locked.
    let id = loop {
        if let Some(s) = r.core.sandboxes.list().first() {
            break s.meta.id.clone();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    r.core.remove_pod_sandbox(&id).await.unwrap();
    run.await.unwrap().unwrap();
    // The remove came after the run: nothing is left, nothing raced.
    r.assert_empty();
    let steps = r.fake.steps();
    let add = steps.iter().position(|s| s == "cni.add").unwrap();
    let del = steps.iter().position(|s| s == "cni.del").unwrap();
    assert!(add < del, "{steps:?}");
}

#[tokio::test]
async fn bandwidth_annotations_become_the_cni_capability() {
    let r = rig();
    let mut req = pod("shaped");
    req.config.annotations = [
        (
            "kubernetes.io/ingress-bandwidth".to_string(),
            "10M".to_string(),
        ),
        (
            "kubernetes.io/egress-bandwidth".to_string(),
            "1M".to_string(),
        ),
    ]
    .into();
    r.core.run_pod_sandbox(req).await.unwrap();
    let added = r.fake.added.lock().unwrap().clone();
    let b = added[0]
        .capabilities
        .bandwidth
        .clone()
        .expect("bandwidth capability");
    assert_eq!((b.ingress_rate, b.egress_rate), (10_000_000, 1_000_000));
    // A value kubelet would never send is refused, not dropped.
    let mut req = pod("bad");
    req.config.annotations = [(
        "kubernetes.io/ingress-bandwidth".to_string(),
        "fast".to_string(),
    )]
    .into();
    let e = r.core.run_pod_sandbox(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}

/// The core keeps nothing of pods and containers that are gone (#28): the
/// creations in flight (requests kept for retries), the NRI stop
/// notifications, the stores' ids, names and groups are empty once the
/// life cycles are over, whether each call's client waited for it or
/// (the pods of odd cycles) went away and a retry claimed what it made.
#[tokio::test]
async fn life_cycles_leave_nothing_in_the_cores_maps() {
    let r = rig();
    for i in 0..10 {
        let name = format!("churn-{i}");
        let pod_id = if i % 2 == 1 {
            // Abandoned; a retry claims the pod.
            let core = r.core.clone();
            let req = pod(&name);
            let (client, first) = as_rpc(async move {
                super::caller::wait_gone().await;
                core.run_pod_sandbox(req).await
            });
            drop(client);
            let id = first.await.unwrap().unwrap();
            let core = r.core.clone();
            let (retry_client, retry) =
                as_rpc(async move { core.run_pod_sandbox(pod(&name)).await });
            assert_eq!(retry.await.unwrap().unwrap(), id);
            retry_client.answered();
            id
        } else {
            let core = r.core.clone();
            let (client, call) = as_rpc(async move { core.run_pod_sandbox(pod(&name)).await });
            let id = call.await.unwrap().unwrap();
            client.answered();
            id
        };
        let core = r.core.clone();
        let req = container(&pod_id, "app");
        let (client, call) = as_rpc(async move { core.create_container(req).await });
        let id = call.await.unwrap().unwrap();
        client.answered();
        r.core.start_container(&id).await.unwrap();
        r.core
            .stop_container(&id, Duration::from_secs(1))
            .await
            .unwrap();
        r.core.remove_container(&id).await.unwrap();
        r.core.stop_pod_sandbox(&pod_id).await.unwrap();
        r.core.remove_pod_sandbox(&pod_id).await.unwrap();
    }
    r.assert_empty();
    assert_eq!(r.core.pods_in_flight.len(), 0, "pod creations kept");
    assert_eq!(
        r.core.containers_in_flight.len(),
        0,
        "container creations kept"
    );
    assert!(
        r.core.plugin_stopped.lock().unwrap().is_empty(),
        "NRI stop notifications kept"
    );
}
