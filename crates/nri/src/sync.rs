//! Synchronize: sending a new plugin every existing pod and container.
//!
//! A ttrpc message is at most 4 MiB, so a large node's state is split into
//! several requests with `more` set on all but the last, as NRI does; the
//! plugin answers those with `more` echoed and no updates, and its updates
//! come with the last reply.

use protobuf::Message;

use crate::api;
use crate::plugin::{Call, Plugin};

/// Budget per request, leaving room under ttrpc's 4 MiB for the envelope.
const CHUNK_BUDGET: usize = 3 << 20;

/// Splits the state into requests each encoding within the budget (an
/// object larger than the budget on its own still goes, alone).
pub fn chunks(
    pods: Vec<api::PodSandbox>,
    containers: Vec<api::Container>,
    budget: usize,
) -> Vec<api::SynchronizeRequest> {
    let mut out = Vec::new();
    let mut cur = api::SynchronizeRequest::new();
    let mut size = 0;
    let flush = |cur: &mut api::SynchronizeRequest, out: &mut Vec<_>, size: &mut usize| {
        out.push(std::mem::take(cur));
        *size = 0;
    };
    for p in pods {
        let n = p.compute_size() as usize + 8;
        if size + n > budget && size > 0 {
            flush(&mut cur, &mut out, &mut size);
        }
        size += n;
        cur.pods.push(p);
    }
    for c in containers {
        let n = c.compute_size() as usize + 8;
        if size + n > budget && size > 0 {
            flush(&mut cur, &mut out, &mut size);
        }
        size += n;
        cur.containers.push(c);
    }
    out.push(cur);
    let last = out.len() - 1;
    for (i, r) in out.iter_mut().enumerate() {
        r.more = i < last;
    }
    out
}

/// Synchronizes `p`, returning the container updates it asked for. Each
/// request is bounded by `timeout`.
pub(crate) async fn synchronize(
    p: &Plugin,
    pods: Vec<api::PodSandbox>,
    containers: Vec<api::Container>,
    timeout: std::time::Duration,
) -> Result<Vec<api::ContainerUpdate>, String> {
    let reqs = chunks(pods, containers, CHUNK_BUDGET);
    let mut updates = Vec::new();
    for req in reqs {
        let fut = p.client().synchronize(p.context_within(timeout), &req);
        match p.call_within("Synchronize", timeout, fut).await {
            Ok(Call::Done(rpl)) => {
                if req.more && (!rpl.update.is_empty() || !rpl.more) {
                    return Err("plugin does not handle split sync requests".into());
                }
                updates = rpl.update;
            }
            Ok(_) => return Err("timed out, closed or unimplemented".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(updates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_by_size_and_sets_more() {
        let pods: Vec<api::PodSandbox> = (0..10)
            .map(|i| api::PodSandbox {
                id: format!("{i:0100}"),
                ..Default::default()
            })
            .collect();
        let one = chunks(pods.clone(), vec![], 1 << 20);
        assert_eq!(one.len(), 1);
        assert!(!one[0].more);
        let many = chunks(pods, vec![api::Container::new()], 250);
        assert!(many.len() > 2);
        assert!(many[..many.len() - 1].iter().all(|r| r.more));
        assert!(!many[many.len() - 1].more);
        let total: usize = many.iter().map(|r| r.pods.len() + r.containers.len()).sum();
        assert_eq!(total, 11);
        assert_eq!(chunks(vec![], vec![], 10).len(), 1);
    }
}
