//! Reading a whole omap in pages: [`OmapPager`] holds where the last page ended, so every walk
//! over a bucket's index, versions, uploads or parts (and the registry) resumes the same way.

use std::sync::Arc;

use s3s::S3Result;

use crate::backend::Backend;
use crate::data::internal;

/// Pages of one object's omap entries under a prefix, in key order.
pub struct OmapPager<'a> {
    backend: &'a Arc<dyn Backend>,
    object: String,
    prefix: Vec<u8>,
    page: u32,
    after: Vec<u8>,
    done: bool,
}

impl<'a> OmapPager<'a> {
    /// A walk over `object`'s entries whose keys start with `prefix`, `page` at a time.
    pub fn new(backend: &'a Arc<dyn Backend>, object: &str, prefix: &[u8], page: u32) -> Self {
        assert!(page > 0, "a page holds at least one entry");
        OmapPager {
            backend,
            object: object.to_string(),
            prefix: prefix.to_vec(),
            page,
            after: Vec::new(),
            done: false,
        }
    }

    /// The next page (None once every entry was returned).
    pub async fn next_page(&mut self) -> S3Result<Option<Vec<(Vec<u8>, Vec<u8>)>>> {
        if self.done {
            return Ok(None);
        }
        let (page, more) = self
            .backend
            .omap_list(&self.object, &self.after, &self.prefix, self.page)
            .await
            .map_err(internal)?;
        match page.last() {
            Some((k, _)) => self.after.clone_from(k),
            None => self.done = true,
        }
        self.done |= !more;
        Ok((!page.is_empty()).then_some(page))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemBackend;

    /// Every entry under the prefix comes once, in order, across pages of any size.
    #[tokio::test]
    async fn pages_cover_the_prefix_once_in_order() {
        let backend: Arc<dyn Backend> = Arc::new(MemBackend::default());
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..25u8)
            .map(|i| (format!("p/{i:02}").into_bytes(), vec![i]))
            .chain([(b"q/0".to_vec(), vec![99])])
            .collect();
        backend.omap_set("o", &entries).await.unwrap();
        for page in [1, 4, 25, 100] {
            let mut pager = OmapPager::new(&backend, "o", b"p/", page);
            let mut seen = Vec::new();
            while let Some(p) = pager.next_page().await.unwrap() {
                assert!(p.len() <= page as usize);
                seen.extend(p.into_iter().map(|(_, v)| v[0]));
            }
            assert_eq!(seen, (0..25u8).collect::<Vec<_>>(), "page {page}");
        }
        let mut none = OmapPager::new(&backend, "missing", b"", 10);
        assert!(none.next_page().await.unwrap().is_none());
    }
}
