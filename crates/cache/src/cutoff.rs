//! Sequential stream detection for the cut-off: tracks several concurrent streams and tells how
//! many bytes a request's stream has already moved sequentially.
//!
//! Owns a bounded table of streams (explicit limit, least-recently-used replacement). Pure: no
//! I/O, no clock. It must never grow past its limit.

/// One tracked stream.
#[derive(Debug, Clone, Copy)]
struct Stream {
    next_offset_bytes: u64,
    write: bool,
    bytes: u64,
    last_use: u64,
}

/// Detects sequential streams among interleaved requests.
#[derive(Debug, Clone)]
pub struct SeqDetector {
    streams: Vec<Stream>,
    max_streams: usize,
    tick: u64,
}

impl SeqDetector {
    /// A detector tracking at most `max_streams` streams (at least 1).
    pub fn new(max_streams: usize) -> Self {
        Self {
            streams: Vec::with_capacity(max_streams.max(1)),
            max_streams: max_streams.max(1),
            tick: 0,
        }
    }

    /// Records a request and returns the bytes its stream has moved sequentially including this
    /// request, or 0 when the request does not continue a known stream (it starts a new one).
    pub fn observe(&mut self, write: bool, offset_bytes: u64, len_bytes: u64) -> u64 {
        self.tick += 1;
        let end = offset_bytes.saturating_add(len_bytes);
        if let Some(s) = self
            .streams
            .iter_mut()
            .find(|s| s.write == write && s.next_offset_bytes == offset_bytes)
        {
            s.bytes = s.bytes.saturating_add(len_bytes);
            s.next_offset_bytes = end;
            s.last_use = self.tick;
            return s.bytes;
        }
        let fresh = Stream {
            next_offset_bytes: end,
            write,
            bytes: len_bytes,
            last_use: self.tick,
        };
        if self.streams.len() < self.max_streams {
            self.streams.push(fresh);
        } else if let Some(oldest) = self.streams.iter_mut().min_by_key(|s| s.last_use) {
            *oldest = fresh;
        }
        0
    }

    /// Streams currently tracked.
    pub fn streams(&self) -> usize {
        self.streams.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_streams_are_each_detected() {
        let mut d = SeqDetector::new(4);
        let k = 4096;
        for i in 0..8u64 {
            let a = d.observe(false, i * k, k);
            let b = d.observe(false, (1 << 30) + i * k, k);
            let c = d.observe(true, (2 << 30) + i * k, k);
            let want = if i == 0 { 0 } else { (i + 1) * k };
            assert_eq!((a, b, c), (want, want, want));
        }
        assert_eq!(d.streams(), 3);
        assert_eq!(
            d.observe(true, 0, k),
            0,
            "a write does not continue a read stream"
        );
    }

    #[test]
    fn table_is_bounded_and_replaces_the_least_recent_stream() {
        let mut d = SeqDetector::new(2);
        d.observe(false, 0, 512);
        d.observe(false, 10_000, 512);
        d.observe(false, 512, 512);
        d.observe(false, 50_000, 512);
        assert_eq!(d.streams(), 2);
        assert_eq!(d.observe(false, 1024, 512), 1536, "recent stream survives");
        assert_eq!(
            d.observe(false, 10_512, 512),
            0,
            "least recent stream was replaced"
        );
    }
}
