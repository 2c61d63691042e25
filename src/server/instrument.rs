//! The one layer around every RPC: refuses calls until start-up (recovery)
//! has finished, runs the handler on its own task so a client that cancels
//! cannot cut the work short, logs the call in a span that names the RPC and
//! the ids it touches, and maps the handler's error to a gRPC status.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tonic::{Response, Status};
use tracing::{field, Instrument};

use crate::error::Error;

/// Closed until the daemon has finished starting up; calls get `Unavailable` until then.
#[derive(Debug, Default)]
pub struct Gate(AtomicBool);

impl Gate {
    /// Lets calls through from now on.
    pub fn open(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether calls are let through.
    pub fn is_open(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The ids a request is about, recorded in the RPC's span.
#[derive(Debug, Default, Clone)]
pub struct Ids {
    pub pod: Option<String>,
    pub container: Option<String>,
    pub image: Option<String>,
}

/// Requests say which ids they touch.
pub trait RequestIds {
    fn ids(&self) -> Ids {
        Ids::default()
    }
}

/// Runs one RPC through the layer.
pub async fn call<T, F>(
    gate: &Gate,
    rpc: &'static str,
    ids: Ids,
    body: F,
) -> Result<Response<T>, Status>
where
    T: Send + 'static,
    F: Future<Output = Result<T, Error>> + Send + 'static,
{
    let span = tracing::info_span!(
        "rpc",
        rpc,
        pod = field::Empty,
        container = field::Empty,
        image = field::Empty
    );
    if let Some(id) = &ids.pod {
        span.record("pod", id.as_str());
    }
    if let Some(id) = &ids.container {
        span.record("container", id.as_str());
    }
    if let Some(image) = &ids.image {
        span.record("image", image.as_str());
    }
    async move {
        if !gate.is_open() {
            tracing::debug!("refused: still starting up");
            return Err(Error::Starting.into());
        }
        let started = Instant::now();
        tracing::debug!("call");
        // Own task: dropping this future (client cancelled) does not drop
        // the body, which can see its client go (core::caller).
        let (caller, body) = crate::core::caller::track(body);
        let result = match tokio::spawn(body.in_current_span()).await {
            Ok(result) => result,
            Err(e) => Err(Error::Internal(format!("{rpc} handler failed: {e}"))),
        };
        caller.answered();
        let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
        let code = result.as_ref().err().map_or(tonic::Code::Ok, Error::code);
        crate::counters::rpc_done(rpc, code, started.elapsed());
        match result {
            Ok(value) => {
                tracing::debug!(elapsed_ms, "ok");
                Ok(Response::new(value))
            }
            Err(e) => {
                let code = e.code();
                if code == tonic::Code::Unimplemented {
                    tracing::debug!(elapsed_ms, ?code, error = %e, "failed");
                } else {
                    tracing::warn!(elapsed_ms, ?code, error = %e, "failed");
                }
                Err(e.into())
            }
        }
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tonic::Code;

    #[tokio::test]
    async fn closed_gate_answers_unavailable() {
        let gate = Gate::default();
        let status = call(&gate, "Version", Ids::default(), async { Ok(1u32) })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        gate.open();
        let resp = call(&gate, "Version", Ids::default(), async { Ok(1u32) })
            .await
            .unwrap();
        assert_eq!(resp.into_inner(), 1);
    }

    #[tokio::test]
    async fn errors_map_to_status() {
        let gate = Gate::default();
        gate.open();
        let status = call::<(), _>(&gate, "X", Ids::default(), async {
            Err(Error::InvalidArgument("bad".into()))
        })
        .await
        .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), "bad");
    }

    #[tokio::test]
    async fn panicking_handler_is_internal() {
        let gate = Gate::default();
        gate.open();
        let status = call::<(), _>(&gate, "X", Ids::default(), async { panic!("boom") })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Internal);
    }

    #[tokio::test]
    async fn cancelled_call_finishes_its_body() {
        let gate = Arc::new(Gate::default());
        gate.open();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let g = gate.clone();
        let caller = tokio::spawn(async move {
            call(&g, "X", Ids::default(), async move {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                let _ = tx.send(());
                Ok(())
            })
            .await
        });
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        caller.abort();
        tokio::time::timeout(std::time::Duration::from_secs(5), rx)
            .await
            .expect("body ran to its end")
            .unwrap();
    }
}
