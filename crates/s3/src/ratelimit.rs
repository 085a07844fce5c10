//! Token buckets per user and per bucket (requests/s and bytes/s): the gateway side of QoS.
//! A request is refused (SlowDown) while a bucket is empty; admitted requests are charged in
//! full, so a large body may drive a bucket into debt that later requests wait out. Time is
//! passed in: the buckets read no clock. The tables are bounded.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::config::RateLimits;

/// Most users or buckets tracked; past it the table is reset (fresh buckets start full).
pub const MAX_TRACKED: usize = 100_000;

/// One token bucket: `rate` tokens per second, at most `rate` banked (one second of burst).
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    tokens: f64,
    last_ns: u64,
}

impl TokenBucket {
    /// A full bucket at `now_ns`.
    pub fn new(rate: f64, now_ns: u64) -> Self {
        TokenBucket {
            rate,
            tokens: rate,
            last_ns: now_ns,
        }
    }

    fn refill(&mut self, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.last_ns) as f64 / 1e9;
        self.tokens = (self.tokens + dt * self.rate).min(self.rate);
        self.last_ns = self.last_ns.max(now_ns);
    }

    /// Whether the bucket has a positive balance at `now_ns`.
    pub fn ready(&mut self, now_ns: u64) -> bool {
        self.refill(now_ns);
        self.tokens > 0.0
    }

    /// Takes `cost` tokens (the balance may go negative).
    pub fn charge(&mut self, cost: f64, now_ns: u64) {
        self.refill(now_ns);
        self.tokens -= cost;
    }
}

#[derive(Default)]
struct Pair {
    requests: Option<TokenBucket>,
    bytes: Option<TokenBucket>,
}

/// Per-user and per-bucket limits.
pub struct Limiter {
    limits: RateLimits,
    users: Mutex<HashMap<String, Pair>>,
    buckets: Mutex<HashMap<String, Pair>>,
}

/// Which limit refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The user's rate.
    User,
    /// The bucket's rate.
    Bucket,
}

fn admit(
    table: &Mutex<HashMap<String, Pair>>,
    name: &str,
    req_rate: f64,
    byte_rate: f64,
    bytes: u64,
    now_ns: u64,
) -> bool {
    if req_rate <= 0.0 && byte_rate <= 0.0 {
        return true;
    }
    let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
    if t.len() >= MAX_TRACKED && !t.contains_key(name) {
        t.clear();
    }
    let pair = t.entry(name.to_string()).or_default();
    let req = (req_rate > 0.0).then(|| {
        pair.requests
            .get_or_insert_with(|| TokenBucket::new(req_rate, now_ns))
    });
    let req_ok = req.is_none_or(|b| b.ready(now_ns));
    let byte_ok = byte_rate <= 0.0
        || pair
            .bytes
            .get_or_insert_with(|| TokenBucket::new(byte_rate, now_ns))
            .ready(now_ns);
    if !(req_ok && byte_ok) {
        return false;
    }
    if let Some(b) = pair.requests.as_mut() {
        b.charge(1.0, now_ns);
    }
    if let Some(b) = pair.bytes.as_mut() {
        b.charge(bytes as f64, now_ns);
    }
    true
}

fn charge(table: &Mutex<HashMap<String, Pair>>, name: &str, bytes: u64, now_ns: u64) {
    let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(b) = t.get_mut(name).and_then(|p| p.bytes.as_mut()) {
        b.charge(bytes as f64, now_ns);
    }
}

impl Limiter {
    /// Limits as configured.
    pub fn new(limits: RateLimits) -> Self {
        Limiter {
            limits,
            users: Mutex::default(),
            buckets: Mutex::default(),
        }
    }

    /// Admits (and charges) one request of `bytes` body bytes, or says which limit refuses it.
    pub fn admit(
        &self,
        user: &str,
        bucket: Option<&str>,
        bytes: u64,
        now_ns: u64,
    ) -> Result<(), Refusal> {
        let l = &self.limits;
        if !admit(
            &self.users,
            user,
            l.user_requests_per_s,
            l.user_bytes_per_s,
            bytes,
            now_ns,
        ) {
            return Err(Refusal::User);
        }
        if let Some(b) = bucket {
            if !admit(
                &self.buckets,
                b,
                l.bucket_requests_per_s,
                l.bucket_bytes_per_s,
                bytes,
                now_ns,
            ) {
                return Err(Refusal::Bucket);
            }
        }
        Ok(())
    }

    /// Charges response bytes (known only after admission) to the user and bucket.
    pub fn charge_bytes(&self, user: &str, bucket: &str, bytes: u64, now_ns: u64) {
        charge(&self.users, user, bytes, now_ns);
        charge(&self.buckets, bucket, bytes, now_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn request_rate_refuses_past_the_burst_and_refills() {
        let l = Limiter::new(RateLimits {
            user_requests_per_s: 3.0,
            ..Default::default()
        });
        for _ in 0..3 {
            assert_eq!(l.admit("u", Some("b"), 0, 0), Ok(()));
        }
        assert_eq!(l.admit("u", Some("b"), 0, 0), Err(Refusal::User));
        assert_eq!(l.admit("other", Some("b"), 0, 0), Ok(()));
        assert_eq!(l.admit("u", Some("b"), 0, S / 2), Ok(()));
        assert_eq!(l.admit("u", Some("b"), 0, 2 * S), Ok(()));
    }

    #[test]
    fn bytes_go_into_debt_and_bucket_limit_is_shared() {
        let l = Limiter::new(RateLimits {
            bucket_bytes_per_s: 100.0,
            ..Default::default()
        });
        assert_eq!(l.admit("u1", Some("b"), 1000, 0), Ok(()));
        assert_eq!(l.admit("u2", Some("b"), 1, S), Err(Refusal::Bucket));
        assert_eq!(l.admit("u2", Some("c"), 1, S), Ok(()));
        assert_eq!(l.admit("u2", Some("b"), 1, 10 * S), Ok(()));
        l.charge_bytes("u2", "b", 10_000, 10 * S);
        assert_eq!(l.admit("u2", Some("b"), 1, 20 * S), Err(Refusal::Bucket));
    }

    #[test]
    fn unlimited_by_default() {
        let l = Limiter::new(RateLimits::default());
        for i in 0..1000 {
            assert_eq!(l.admit("u", Some("b"), 1 << 30, i), Ok(()));
        }
    }
}
