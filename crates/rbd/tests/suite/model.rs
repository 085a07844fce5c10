//! A model of an image's bytes, driven by the same random operations as the image, and the
//! checks that compare the two by checksum.

use cairn_rbd::Image;

/// A small deterministic random source (xorshift), so that a failure repeats.
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Bytes that differ from one write to the next.
pub fn fill(len: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed | 1);
    (0..len).map(|_| (r.next() >> 24) as u8).collect()
}

/// Applies `count` random writes and discards to both `image` and `model`; every few are in
/// flight together (disjoint ranges).
pub async fn churn(image: &Image, model: &mut [u8], rng: &mut Rng, count: usize) {
    let size = model.len() as u64;
    let mut done = 0;
    while done < count {
        let mut batch: Vec<(u64, u64, Option<Vec<u8>>)> = Vec::new();
        for _ in 0..4 {
            let offset = rng.below(size);
            let len = 1 + rng.below((size - offset).min(3 * 4096));
            if batch
                .iter()
                .any(|(o, l, _)| offset < o + l && *o < offset + len)
            {
                continue;
            }
            let data = (rng.below(4) != 0).then(|| fill(len as usize, rng.next()));
            batch.push((offset, len, data));
        }
        let ops = batch.iter().map(|(offset, len, data)| async move {
            match data {
                Some(d) => image.write(*offset, d).await,
                None => image.discard(*offset, *len).await,
            }
        });
        for r in futures_util::future::join_all(ops).await {
            r.unwrap();
        }
        for (offset, len, data) in &batch {
            let range = *offset as usize..(*offset + *len) as usize;
            match data {
                Some(d) => model[range].copy_from_slice(d),
                None => model[range].fill(0),
            }
        }
        done += batch.len();
    }
}

/// Reads all of `image` and compares it with `expected` by checksum (and says where they
/// first differ).
pub async fn assert_reads(image: &Image, expected: &[u8], what: &str) {
    assert_eq!(image.size(), expected.len() as u64, "{what}: size");
    let got = image.read(0, expected.len() as u64).await.unwrap();
    if crc_fast::crc32_iscsi(&got) != crc_fast::crc32_iscsi(expected) {
        let at = got.iter().zip(expected).position(|(a, b)| a != b);
        panic!("{what}: the bytes differ, first at {at:?}");
    }
}
