//! The concurrency job: pods with a container each started all at once,
//! timed until every one runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use cri_api::v1;

use super::{first_error, order, run_limited, Settings, Workload, PHASE};
use crate::report::Report;
use crate::target::Target;

impl Workload {
    /// Starts `k` pods with a container each at once, for each `k`: the time
    /// until every one runs.
    pub async fn concurrency(
        self: &Arc<Self>,
        targets: &[Target],
        s: &Settings,
        report: &mut Report,
    ) {
        for (round, &k) in s.concurrency.iter().enumerate() {
            let mut values = vec![None; targets.len()];
            for ti in order(round, targets.len()) {
                let t = &targets[ti];
                let phase = format!("concurrency-{k}");
                match self.start_at_once(t, k, &phase).await {
                    Ok(elapsed) => values[ti] = Some(elapsed.as_secs_f64()),
                    Err(e) => report.error(t.name(), &phase, &e),
                }
                if let Err(e) = self.teardown(t, Some(&phase)).await {
                    report.error(t.name(), &format!("{phase} teardown"), &e);
                }
            }
            report.add(
                "concurrency",
                &format!("{k} pods started at once, until all run"),
                "s",
                values,
            );
            eprintln!("concurrency: {k} pods done");
        }
    }

    async fn start_at_once(
        self: &Arc<Self>,
        t: &Target,
        k: usize,
        phase: &str,
    ) -> Result<Duration> {
        let configs = (0..k)
            .map(|j| self.pod_config(t, &format!("c{k}-{j}"), phase))
            .collect::<Result<Vec<_>>>()?;
        let start = Instant::now();
        let results = run_limited(configs, k, |config| {
            let (w, t, phase) = (self.clone(), t.clone(), phase.to_string());
            async move { w.pod_with_container(&t, config, &phase).await }
        })
        .await;
        let elapsed = start.elapsed();
        if let Some(e) = first_error(&results) {
            return Err(e);
        }
        let running = t
            .list_containers(
                &[(PHASE, phase)],
                Some(v1::ContainerState::ContainerRunning),
            )
            .await?;
        if running != k {
            return Err(anyhow!("{running} of {k} containers run"));
        }
        Ok(elapsed)
    }
}
