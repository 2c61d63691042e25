//! The last two CPU samples per key (a container or pod id), taken by a
//! background thread, so that the CPU rate (`usage_nano_cores`) is a lookup
//! rather than a wait between two reads.

use berth_lock::MutexExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Cumulative CPU time at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSample {
    /// When it was taken, nanoseconds since the epoch.
    pub timestamp_ns: i64,
    /// Cumulative CPU time, nanoseconds.
    pub usage_ns: u64,
}

/// The CPU rate between two samples, in nanocores (10⁹ is one full core);
/// `None` when time did not advance or the counter went backwards.
pub fn nano_cores(prev: CpuSample, last: CpuSample) -> Option<u64> {
    let elapsed = u64::try_from(last.timestamp_ns.checked_sub(prev.timestamp_ns)?).ok()?;
    if elapsed == 0 {
        return None;
    }
    let used = last.usage_ns.checked_sub(prev.usage_ns)?;
    Some((u128::from(used) * 1_000_000_000 / u128::from(elapsed)) as u64)
}

#[derive(Debug, Clone, Copy)]
struct Pair {
    prev: Option<CpuSample>,
    last: CpuSample,
}

/// The last two samples of every key.
#[derive(Debug, Default)]
pub struct CpuSampler {
    samples: Mutex<HashMap<String, Pair>>,
}

impl CpuSampler {
    pub fn new() -> CpuSampler {
        CpuSampler::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pair>> {
        self.samples.lock_unpoisoned()
    }

    /// Keeps `sample` as the newest of `key`; one not newer than the newest is ignored.
    pub fn record(&self, key: &str, sample: CpuSample) {
        let mut samples = self.lock();
        match samples.get_mut(key) {
            Some(pair) if sample.timestamp_ns > pair.last.timestamp_ns => {
                pair.prev = Some(pair.last);
                pair.last = sample;
            }
            Some(_) => {}
            None => {
                samples.insert(
                    key.to_string(),
                    Pair {
                        prev: None,
                        last: sample,
                    },
                );
            }
        }
    }

    /// The rate between the last two samples of `key`.
    pub fn nano_cores(&self, key: &str) -> Option<u64> {
        let pair = *self.lock().get(key)?;
        nano_cores(pair.prev?, pair.last)
    }

    /// The newest sample of `key`.
    pub fn latest(&self, key: &str) -> Option<CpuSample> {
        self.lock().get(key).map(|p| p.last)
    }

    /// Forgets every key `keep` says no to.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        self.lock().retain(|k, _| keep(k));
    }

    /// Runs a thread that, every `period`, records the samples `collect`
    /// returns and forgets keys it did not return. The thread ends when
    /// `collect` returns `None` (its source is gone).
    pub fn spawn(
        self: &Arc<Self>,
        period: Duration,
        mut collect: impl FnMut() -> Option<Vec<(String, CpuSample)>> + Send + 'static,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let sampler = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("cpu-sampler".into())
            .spawn(move || loop {
                let Some(samples) = collect() else { return };
                let Some(sampler) = sampler.upgrade() else {
                    return;
                };
                let keys: std::collections::HashSet<&str> =
                    samples.iter().map(|(k, _)| k.as_str()).collect();
                sampler.retain(|k| keys.contains(k));
                for (key, sample) in &samples {
                    sampler.record(key, *sample);
                }
                drop(sampler);
                std::thread::sleep(period);
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(timestamp_ns: i64, usage_ns: u64) -> CpuSample {
        CpuSample {
            timestamp_ns,
            usage_ns,
        }
    }

    #[test]
    fn rate() {
        assert_eq!(
            nano_cores(s(0, 0), s(1_000_000_000, 500_000_000)),
            Some(500_000_000)
        );
        assert_eq!(
            nano_cores(s(0, 0), s(2_000_000_000, 4_000_000_000)),
            Some(2_000_000_000)
        );
        assert_eq!(nano_cores(s(5, 0), s(5, 10)), None);
        assert_eq!(nano_cores(s(0, 10), s(5, 0)), None, "counter reset");
        assert_eq!(nano_cores(s(9, 0), s(5, 10)), None);
    }

    #[test]
    fn keeps_last_two() {
        let sampler = CpuSampler::new();
        sampler.record("a", s(0, 0));
        assert_eq!(sampler.nano_cores("a"), None);
        sampler.record("a", s(1_000_000_000, 250_000_000));
        assert_eq!(sampler.nano_cores("a"), Some(250_000_000));
        sampler.record("a", s(2_000_000_000, 1_250_000_000));
        assert_eq!(sampler.nano_cores("a"), Some(1_000_000_000));
        // Stale samples are ignored.
        sampler.record("a", s(1_500_000_000, 0));
        assert_eq!(sampler.latest("a"), Some(s(2_000_000_000, 1_250_000_000)));
        sampler.retain(|k| k != "a");
        assert_eq!(sampler.latest("a"), None);
    }

    #[test]
    fn thread_samples_and_stops() {
        let sampler = Arc::new(CpuSampler::new());
        let mut ticks = 0i64;
        let handle = sampler
            .spawn(Duration::from_millis(1), move || {
                ticks += 1;
                match ticks {
                    1..=3 => Some(vec![("c".to_string(), s(ticks * 1000, ticks as u64 * 500))]),
                    _ => None,
                }
            })
            .unwrap();
        handle.join().unwrap();
        assert_eq!(sampler.nano_cores("c"), Some(500_000_000));
    }
}
