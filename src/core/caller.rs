//! Whether the client of the call being served is still there. The RPC
//! layer runs each call's body on its own task and wraps it with
//! [`track`]; when the client goes away (deadline, cancel) before the body
//! ends, the body can see it ([`gone`], [`wait_gone`]) and keep going —
//! creations finish and wait for a retry to claim them.

use std::future::Future;

use tokio::sync::watch;

tokio::task_local! {
    static CALLER: watch::Receiver<bool>;
}

/// Held by the RPC layer while it waits for the body: dropping it before
/// [`CallerGuard::answered`] tells the body its client has gone.
pub struct CallerGuard {
    gone: Option<watch::Sender<bool>>,
}

impl CallerGuard {
    /// The body ended while its client waited.
    pub fn answered(mut self) {
        self.gone = None;
    }
}

impl Drop for CallerGuard {
    fn drop(&mut self) {
        if let Some(tx) = self.gone.take() {
            tx.send_replace(true);
        }
    }
}

/// Wraps a call's body so that it can see its client go.
pub fn track<F: Future>(body: F) -> (CallerGuard, impl Future<Output = F::Output>) {
    let (tx, rx) = watch::channel(false);
    (CallerGuard { gone: Some(tx) }, CALLER.scope(rx, body))
}

/// Whether the current call's client has gone (never, outside a call).
pub fn gone() -> bool {
    CALLER.try_with(|rx| *rx.borrow()).unwrap_or(false)
}

/// Until the current call's client goes (forever, outside a call).
pub async fn wait_gone() {
    let Ok(mut rx) = CALLER.try_with(|rx| rx.clone()) else {
        return std::future::pending().await;
    };
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            // The RPC layer answered: the client is there.
            return std::future::pending().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dropped_guard_tells_the_body() {
        let (guard, body) = track(async {
            wait_gone().await;
            gone()
        });
        let task = tokio::spawn(body);
        drop(guard);
        assert!(task.await.unwrap());
        let (guard, body) = track(async { gone() });
        assert!(!body.await);
        guard.answered();
        assert!(!gone());
    }
}
