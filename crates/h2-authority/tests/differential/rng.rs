//! A seeded PRNG (SplitMix64) for the differential tests: the same seed
//! gives the same connections, chunkings and header lists.

/// Deterministic noise.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// In `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// In `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// True with `percent` % probability.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// In `1..=max`, small sizes much more often than large ones
    /// (log-uniform).
    pub fn size(&mut self, max: usize) -> usize {
        let bits = usize::BITS - max.leading_zeros();
        let cap = (1usize << self.range(0, bits as usize)).min(max);
        self.range(1, cap.max(1))
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// A fresh generator for a part of the test (its own stream of noise).
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next())
    }
}

/// The base seed: `BERTH_DIFF_SEED` if set (to replay or explore), else a
/// fixed one.
pub fn base_seed() -> u64 {
    std::env::var("BERTH_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x00b3_27b4_a2f1_0025)
}

/// How many rounds: `BERTH_DIFF_ROUNDS` if set, else `default`.
pub fn rounds(default: usize) -> usize {
    std::env::var("BERTH_DIFF_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
