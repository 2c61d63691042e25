//! An undo stack: each step that allocates registers how to give it back
//! before it runs; on failure the steps unwind in reverse, and their errors
//! (each an [`Error`]) are reported together with the original one.
//!
//! Two kinds of step: those that give back a resource ([`Undo::push`]) and
//! those that forget the object ([`Undo::push_forget`]: delete its record,
//! free its name). Once a step has failed, forgetting is skipped: the object
//! stays, so that the next Stop/Remove retries what is left (as containerd
//! keeps a sandbox whose CNI DEL failed).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::error::Error;

type Step = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'static>>;

/// How long each undo step may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// Steps to run, newest first, unless [`Undo::disarm`] is called.
#[derive(Default)]
pub struct Undo {
    steps: Vec<(&'static str, bool, Step)>,
}

impl Undo {
    pub fn new() -> Undo {
        Undo::default()
    }

    /// Registers how to undo the step about to run.
    pub fn push<F>(&mut self, what: &'static str, step: F)
    where
        F: Future<Output = Result<(), Error>> + Send + 'static,
    {
        self.steps.push((what, false, Box::pin(step)));
    }

    /// Registers how to forget the object (record, name): skipped when a
    /// later step's undo failed, so the object is kept for a retry.
    pub fn push_forget<F>(&mut self, what: &'static str, step: F)
    where
        F: Future<Output = Result<(), Error>> + Send + 'static,
    {
        self.steps.push((what, true, Box::pin(step)));
    }

    /// Success: nothing is undone.
    pub fn disarm(mut self) {
        self.steps.clear();
    }

    /// Runs every step, newest first, each on its own timeout, and returns
    /// `error` with any cleanup failures added (its kind kept). Whether
    /// something was kept is [`Error::Cleanup`].
    pub async fn unwind(mut self, error: Error) -> Error {
        let mut failures = Vec::new();
        while let Some((what, forget, step)) = self.steps.pop() {
            if forget && !failures.is_empty() {
                tracing::warn!(step = what, "kept: an earlier cleanup step failed");
                continue;
            }
            match tokio::time::timeout(STEP_TIMEOUT, step).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failures.push(format!("{what}: {e}")),
                Err(_) => failures.push(format!("{what}: timed out after {STEP_TIMEOUT:?}")),
            }
        }
        if failures.is_empty() {
            return error;
        }
        tracing::error!(cleanup_errors = ?failures, "cleanup after a failure did not finish");
        error.with_cleanup(failures.join("; "))
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        if !self.steps.is_empty() {
            tracing::error!(
                steps = self.steps.len(),
                "undo stack dropped without unwind or disarm"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[tokio::test]
    async fn unwinds_in_reverse_and_reports_failures() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut undo = Undo::new();
        for i in 0..3 {
            let log = log.clone();
            undo.push("step", async move {
                log.lock().unwrap().push(i);
                if i == 1 {
                    Err(Error::Internal("busy".into()))
                } else {
                    Ok(())
                }
            });
        }
        let err = undo.unwind(Error::Internal("cni add failed".into())).await;
        assert_eq!(*log.lock().unwrap(), vec![2, 1, 0]);
        assert!(matches!(err, Error::Cleanup { .. }));
        assert_eq!(
            err.to_string(),
            "cni add failed (and cleanup failed: step: busy)"
        );
    }

    #[tokio::test]
    async fn a_failed_step_keeps_the_object() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut undo = Undo::new();
        let l = log.clone();
        undo.push_forget("delete the record", async move {
            l.lock().unwrap().push("record");
            Ok(())
        });
        let l = log.clone();
        undo.push("remove the netns", async move {
            l.lock().unwrap().push("netns");
            Ok(())
        });
        undo.push("CNI DEL", async {
            Err(Error::Internal("plugin failed".into()))
        });
        let err = undo.unwind(Error::DeadlineExceeded("slow".into())).await;
        // Resources still given back; the record kept.
        assert_eq!(*log.lock().unwrap(), vec!["netns"]);
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded);
    }

    #[tokio::test]
    async fn disarmed_runs_nothing() {
        let ran = Arc::new(Mutex::new(false));
        let mut undo = Undo::new();
        let r = ran.clone();
        undo.push("x", async move {
            *r.lock().unwrap() = true;
            Ok(())
        });
        undo.disarm();
        assert!(!*ran.lock().unwrap());
    }
}
