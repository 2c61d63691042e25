//! Single-use tokens: the RPC stores its request under a random token and
//! returns a URL with it; the first request to that URL takes it out. A
//! token that is not used in time expires.

use berth_lock::MutexExt;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;

use crate::error::Error;

/// Random bytes per token (base64url: 22 characters).
const TOKEN_BYTES: usize = 16;

/// What a token lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<T> {
    Found(T),
    /// It existed, but its time ran out.
    Expired,
    /// Never issued, already used, or expired long ago.
    Unknown,
}

/// Requests waiting for their client, by token.
#[derive(Debug)]
pub struct TokenCache<T> {
    ttl: Duration,
    max: usize,
    entries: Mutex<HashMap<String, (T, Instant)>>,
}

impl<T: Clone> TokenCache<T> {
    /// Tokens live `ttl`; at most `max` wait at once.
    pub fn new(ttl: Duration, max: usize) -> TokenCache<T> {
        TokenCache {
            ttl,
            max,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// How long a token lives.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, (T, Instant)>> {
        self.entries.lock_unpoisoned()
    }

    /// Stores `value` under a fresh token.
    pub fn insert(&self, value: T) -> Result<String, Error> {
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::getrandom(&mut bytes).map_err(|e| Error::Random(e.to_string()))?;
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let now = Instant::now();
        let mut entries = self.entries();
        entries.retain(|_, (_, expires)| *expires > now);
        if entries.len() >= self.max {
            return Err(Error::TooManyRequests(entries.len()));
        }
        entries.insert(token.clone(), (value, now + self.ttl));
        Ok(token)
    }

    /// Looks at a token without using it.
    pub fn peek(&self, token: &str) -> Lookup<T> {
        match self.entries().get(token) {
            Some((_, expires)) if *expires <= Instant::now() => Lookup::Expired,
            Some((value, _)) => Lookup::Found(value.clone()),
            None => Lookup::Unknown,
        }
    }

    /// Uses a token: it is gone afterwards.
    pub fn take(&self, token: &str) -> Lookup<T> {
        match self.entries().remove(token) {
            Some((_, expires)) if expires <= Instant::now() => Lookup::Expired,
            Some((value, _)) => Lookup::Found(value),
            None => Lookup::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_single_use_and_unguessable() {
        let cache = TokenCache::new(Duration::from_secs(60), 10);
        let a = cache.insert(1).unwrap();
        let b = cache.insert(2).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 22);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert_eq!(cache.peek(&a), Lookup::Found(1));
        assert_eq!(cache.take(&a), Lookup::Found(1));
        assert_eq!(cache.take(&a), Lookup::Unknown);
        assert_eq!(cache.take("nope"), Lookup::Unknown);
        assert_eq!(cache.take(&b), Lookup::Found(2));
    }

    #[test]
    fn tokens_expire() {
        let cache = TokenCache::new(Duration::from_millis(20), 10);
        let a = cache.insert("x").unwrap();
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(cache.peek(&a), Lookup::Expired);
        assert_eq!(cache.take(&a), Lookup::Expired);
        assert_eq!(cache.take(&a), Lookup::Unknown);
    }

    #[test]
    fn in_flight_tokens_are_bounded_and_expired_ones_make_room() {
        let cache = TokenCache::new(Duration::from_millis(20), 2);
        cache.insert(1).unwrap();
        cache.insert(2).unwrap();
        assert!(matches!(cache.insert(3), Err(Error::TooManyRequests(2))));
        std::thread::sleep(Duration::from_millis(40));
        cache.insert(4).unwrap();
    }
}
