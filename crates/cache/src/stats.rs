//! Statistics in the manner of `casadm -P`: occupancy, clean and dirty lines, read and write
//! hits, misses and pass-throughs, in total and per I/O class.
//!
//! Owns the counters and their reports (a casadm-like table, Prometheus text). It must never
//! influence the data path.

use crate::ioclass::CLASS_SLOTS;
use cairn_metrics::{DescriptorEncoder, Families, Written};
use std::fmt;

/// Request counters of one I/O class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounters {
    /// Reads served entirely from the cache.
    pub read_hits: u64,
    /// Reads partly served from the cache.
    pub read_partial_hits: u64,
    /// Reads that found nothing cached.
    pub read_misses: u64,
    /// Reads sent to the core without the cache (mode, cut-off, allocation 0, no promotion).
    pub read_pass_through: u64,
    /// Writes whose every line was already mapped.
    pub write_hits: u64,
    /// Writes that mapped new lines.
    pub write_misses: u64,
    /// Writes sent to the core without caching.
    pub write_pass_through: u64,
    /// Requests cut off as sequential.
    pub seq_cutoff: u64,
    /// Misses sent to the core because caching them meant evicting dirty lines
    /// ([`crate::DirtyFullPolicy::Bypass`]).
    pub dirty_full_bypass: u64,
}

impl RequestCounters {
    fn add(&mut self, o: &RequestCounters) {
        self.read_hits += o.read_hits;
        self.read_partial_hits += o.read_partial_hits;
        self.read_misses += o.read_misses;
        self.read_pass_through += o.read_pass_through;
        self.write_hits += o.write_hits;
        self.write_misses += o.write_misses;
        self.write_pass_through += o.write_pass_through;
        self.seq_cutoff += o.seq_cutoff;
        self.dirty_full_bypass += o.dirty_full_bypass;
    }
}

/// Counters kept by the cache device.
#[derive(Debug, Clone)]
pub struct Counters {
    /// Per class id.
    pub classes: [RequestCounters; CLASS_SLOTS],
    /// Lines evicted to make room.
    pub evictions: u64,
    /// Dirty lines written to core by cleaning or eviction.
    pub cleaned_lines: u64,
    /// Dirty eviction victims cleaned ahead of their eviction, with the gate let go.
    pub victims_cleaned_ahead: u64,
    /// Dirty eviction victims cleaned while every other request waited (a victim dirtied
    /// again after it was cleaned ahead).
    pub victims_cleaned_blocking: u64,
    /// Metadata pages written.
    pub meta_page_writes: u64,
    /// Persists that dropped clean claims for writers overwriting clean sectors in place,
    /// each shared by every such writer waiting.
    pub claim_releases: u64,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            classes: [RequestCounters::default(); CLASS_SLOTS],
            evictions: 0,
            cleaned_lines: 0,
            victims_cleaned_ahead: 0,
            victims_cleaned_blocking: 0,
            meta_page_writes: 0,
            claim_releases: 0,
        }
    }
}

/// Per-class part of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassStats {
    /// Class id.
    pub id: u8,
    /// Class name.
    pub name: String,
    /// Lines held by the class.
    pub occupancy_lines: u64,
    /// Of those, lines with dirty data.
    pub dirty_lines: u64,
    /// Request counters.
    pub requests: RequestCounters,
}

/// A statistics snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStats {
    /// Cache mode name.
    pub mode: String,
    /// Cache line size.
    pub line_bytes: u64,
    /// Lines in the cache.
    pub total_lines: u64,
    /// Mapped lines.
    pub occupancy_lines: u64,
    /// Free lines.
    pub free_lines: u64,
    /// Mapped lines without dirty data.
    pub clean_lines: u64,
    /// Lines with dirty data.
    pub dirty_lines: u64,
    /// Totals over every class.
    pub requests: RequestCounters,
    /// Per class (defined classes only).
    pub classes: Vec<ClassStats>,
    /// Evicted lines.
    pub evictions: u64,
    /// Lines cleaned.
    pub cleaned_lines: u64,
    /// Dirty eviction victims cleaned ahead, other requests going on meanwhile.
    pub victims_cleaned_ahead: u64,
    /// Dirty eviction victims cleaned while other requests waited.
    pub victims_cleaned_blocking: u64,
    /// Metadata pages written.
    pub meta_page_writes: u64,
    /// Persists that dropped clean claims so that writes could overwrite clean sectors in
    /// place (one serves every writer waiting for it).
    pub claim_releases: u64,
}

impl CacheStats {
    /// Sums class counters into totals.
    pub fn total(classes: &[ClassStats]) -> RequestCounters {
        let mut t = RequestCounters::default();
        for c in classes {
            t.add(&c.requests);
        }
        t
    }

    /// Dirty share of the cache, percent.
    pub fn dirty_pct(&self) -> f64 {
        pct(self.dirty_lines, self.total_lines)
    }

    /// Writes the snapshot on a metrics page, every series labelled with `cache` (a cached
    /// device serves it on its OSD's page).
    pub fn encode(&self, e: &mut DescriptorEncoder<'_>, cache: &str) -> Written {
        let at = [("cache", cache)];
        for (name, help, value) in [
            ("cairn_cache_lines", "Cache lines.", self.total_lines),
            (
                "cairn_cache_occupancy_lines",
                "Mapped cache lines.",
                self.occupancy_lines,
            ),
            (
                "cairn_cache_dirty_lines",
                "Cache lines holding data not yet on the core.",
                self.dirty_lines,
            ),
            (
                "cairn_cache_clean_lines",
                "Mapped lines without dirty data.",
                self.clean_lines,
            ),
            (
                "cairn_cache_line_bytes",
                "Cache line size in bytes.",
                self.line_bytes,
            ),
        ] {
            e.gauges(name, help, [(at, value)])?;
        }
        let mut requests = Vec::with_capacity(self.classes.len() * 8);
        for c in &self.classes {
            let q = &c.requests;
            let class = c.id.to_string();
            for (outcome, n) in [
                ("read_hit", q.read_hits),
                ("read_partial_hit", q.read_partial_hits),
                ("read_miss", q.read_misses),
                ("read_pass_through", q.read_pass_through),
                ("write_hit", q.write_hits),
                ("write_miss", q.write_misses),
                ("write_pass_through", q.write_pass_through),
                ("seq_cutoff", q.seq_cutoff),
                ("dirty_full_bypass", q.dirty_full_bypass),
            ] {
                requests.push((
                    [
                        ("cache", cache.to_string()),
                        ("class", class.clone()),
                        ("outcome", outcome.to_string()),
                    ],
                    n,
                ));
            }
        }
        e.counters(
            "cairn_cache_requests_total",
            "Requests by I/O class and outcome.",
            requests,
        )?;
        e.counters(
            "cairn_cache_cleaned_lines_total",
            "Lines cleaned (dirty data written to the core).",
            [(at, self.cleaned_lines)],
        )?;
        e.counters(
            "cairn_cache_dirty_victims_cleaned_total",
            "Dirty eviction victims cleaned, by whether other requests went on meanwhile.",
            [
                (
                    [("cache", cache), ("mode", "ahead")],
                    self.victims_cleaned_ahead,
                ),
                (
                    [("cache", cache), ("mode", "blocking")],
                    self.victims_cleaned_blocking,
                ),
            ],
        )?;
        e.counters(
            "cairn_cache_claim_releases_total",
            "Metadata persists that dropped clean claims for writes over clean sectors.",
            [(at, self.claim_releases)],
        )?;
        e.counters(
            "cairn_cache_evictions_total",
            "Lines evicted to make room.",
            [(at, self.evictions)],
        )
    }
}

fn pct(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 * 100.0 / d as f64
    }
}

impl fmt::Display for CacheStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines = |f: &mut fmt::Formatter<'_>, name: &str, n: u64| {
            writeln!(
                f,
                "| {name:<22} | {n:>12} | {:>6.1} | lines ({} KiB each)",
                pct(n, self.total_lines),
                self.line_bytes / 1024
            )
        };
        writeln!(f, "Cache mode: {}", self.mode)?;
        writeln!(
            f,
            "| Usage statistics       |        Count |      % | Units"
        )?;
        lines(f, "Occupancy", self.occupancy_lines)?;
        lines(f, "Free", self.free_lines)?;
        lines(f, "Clean", self.clean_lines)?;
        lines(f, "Dirty", self.dirty_lines)?;
        let r = &self.requests;
        let reads = r.read_hits + r.read_partial_hits + r.read_misses + r.read_pass_through;
        let writes = r.write_hits + r.write_misses + r.write_pass_through;
        let total = reads + writes;
        writeln!(
            f,
            "| Request statistics     |        Count |      % | Units"
        )?;
        for (name, n) in [
            ("Read hits", r.read_hits),
            ("Read partial misses", r.read_partial_hits),
            ("Read full misses", r.read_misses),
            ("Pass-Through reads", r.read_pass_through),
            ("Write hits", r.write_hits),
            ("Write misses", r.write_misses),
            ("Pass-Through writes", r.write_pass_through),
            ("Sequential cut-off", r.seq_cutoff),
            ("Dirty-full bypass", r.dirty_full_bypass),
            ("Total requests", total),
        ] {
            writeln!(
                f,
                "| {name:<22} | {n:>12} | {:>6.1} | requests",
                pct(n, total)
            )?;
        }
        writeln!(
            f,
            "| Evictions              | {:>12} |        | lines",
            self.evictions
        )?;
        writeln!(
            f,
            "| Cleaned                | {:>12} |        | lines",
            self.cleaned_lines
        )?;
        writeln!(
            f,
            "| Victims cleaned ahead  | {:>12} |        | lines",
            self.victims_cleaned_ahead
        )?;
        writeln!(
            f,
            "| Victims cleaned inline | {:>12} |        | lines",
            self.victims_cleaned_blocking
        )?;
        writeln!(
            f,
            "| Clean claims released  | {:>12} |        | persists",
            self.claim_releases
        )?;
        writeln!(f, "| IO class                | Occupancy |  Dirty | Read hits | Read misses | Write hits | Write misses | Pass-through")?;
        for c in &self.classes {
            let q = &c.requests;
            writeln!(
                f,
                "| {:>2} {:<20} | {:>9} | {:>6} | {:>9} | {:>11} | {:>10} | {:>12} | {}",
                c.id,
                c.name,
                c.occupancy_lines,
                c.dirty_lines,
                q.read_hits,
                q.read_misses + q.read_partial_hits,
                q.write_hits,
                q.write_misses,
                q.read_pass_through + q.write_pass_through
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_shows_lines_and_requests_by_class_and_outcome() {
        let requests = RequestCounters {
            read_hits: 5,
            write_misses: 2,
            ..RequestCounters::default()
        };
        let stats = CacheStats {
            mode: "wb".to_string(),
            line_bytes: 4096,
            total_lines: 100,
            occupancy_lines: 40,
            free_lines: 60,
            clean_lines: 30,
            dirty_lines: 10,
            requests,
            classes: vec![ClassStats {
                id: 1,
                name: "metadata".to_string(),
                occupancy_lines: 40,
                dirty_lines: 10,
                requests,
            }],
            evictions: 3,
            cleaned_lines: 7,
            victims_cleaned_ahead: 5,
            victims_cleaned_blocking: 1,
            meta_page_writes: 0,
            claim_releases: 2,
        };
        let page = cairn_metrics::render(move |e| stats.encode(e, "osd.0"));
        let has = |l: &str| page.lines().any(|x| x == l);
        assert!(has("cairn_cache_dirty_lines{cache=\"osd.0\"} 10"), "{page}");
        assert!(
            has("cairn_cache_line_bytes{cache=\"osd.0\"} 4096"),
            "{page}"
        );
        assert!(has(
            "cairn_cache_requests_total{cache=\"osd.0\",class=\"1\",outcome=\"read_hit\"} 5"
        ));
        assert!(has(
            "cairn_cache_requests_total{cache=\"osd.0\",class=\"1\",outcome=\"write_miss\"} 2"
        ));
        assert!(has("cairn_cache_evictions_total{cache=\"osd.0\"} 3"));
        assert!(has("cairn_cache_cleaned_lines_total{cache=\"osd.0\"} 7"));
        assert!(has("cairn_cache_claim_releases_total{cache=\"osd.0\"} 2"));
        assert!(has(
            "cairn_cache_dirty_victims_cleaned_total{cache=\"osd.0\",mode=\"ahead\"} 5"
        ));
    }
}
