//! Taking what a recalled directory lease covered out of the kernel's cache: the kernel may
//! cache names and attributes (the directory's and its files') a lease covers (their TTL ends before the lease does), so before
//! the mount gives a recalled lease up it tells the kernel to drop each of them; another
//! client's change, which the MDS holds until then, is seen at once.

use std::time::Duration;

use crate::dirlease::Handed;

/// Longest a recall waits for the kernel to drop what it cached (the kernel drops an entry
/// once no request of that directory is in flight); past it the lease is left to run out.
pub const FORGET_TIMEOUT: Duration = Duration::from_secs(2);

/// The kernel's cache of names and attributes (FUSE's invalidation notices).
pub trait KernelCache: Send + Sync {
    /// Drops the entry of `name` in directory `dir`, a negative one too (NotFound when the
    /// kernel has none).
    fn forget_entry(&self, dir: u64, name: &[u8]) -> std::io::Result<()>;
    /// Drops the cached attributes of `ino` (NotFound when the kernel has no such inode).
    fn forget_attr(&self, ino: u64) -> std::io::Result<()>;
}

/// Drops from `kernel` what it was let cache of directory `dir`; false when the kernel refused
/// something it holds (the lease must then run out instead of being given up).
pub fn forget_handed(kernel: &dyn KernelCache, dir: u64, handed: &Handed) -> bool {
    let names = handed.names.iter().map(Vec::as_slice);
    forget(
        kernel,
        dir,
        names,
        handed.attr,
        handed.files.iter().copied(),
    )
}

/// Drops from `kernel` the entries of `names` in directory `dir`, the directory's attributes
/// when `attr`, and the attributes of `files`; false when the kernel refused something it
/// holds (one it does not hold is no failure).
pub fn forget<'a>(
    kernel: &dyn KernelCache,
    dir: u64,
    names: impl IntoIterator<Item = &'a [u8]>,
    attr: bool,
    files: impl IntoIterator<Item = u64>,
) -> bool {
    let mut all = true;
    let mut note = |r: std::io::Result<()>, what: &str| match r {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(dir, what, error = %e, "the kernel did not drop a cached entry");
            all = false;
        }
    };
    for name in names {
        note(kernel.forget_entry(dir, name), "entry");
    }
    if attr {
        note(kernel.forget_attr(dir), "attributes");
    }
    for ino in files {
        note(kernel.forget_attr(ino), "a file's attributes");
    }
    all
}

/// Runs `dropping` (a [`forget`]) off the runtime's threads and waits for it at most
/// [`FORGET_TIMEOUT`]: the kernel drops an entry only once no request of its directory is in
/// flight, and such a request may be waiting on the caller (a lookup whose request waits for
/// an early create to be settled). False when the kernel kept something or had not dropped
/// it in time (it drops it once the directory's requests are done).
pub async fn bounded(dropping: impl FnOnce() -> bool + Send + 'static) -> bool {
    let forgetting = tokio::task::spawn_blocking(dropping);
    matches!(
        tokio::time::timeout(FORGET_TIMEOUT, forgetting).await,
        Ok(Ok(true))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A kernel that records what it was told, refusing the names in `refuse`.
    #[derive(Default)]
    struct Recorded {
        told: Mutex<Vec<String>>,
        refuse: Vec<Vec<u8>>,
    }

    impl KernelCache for Recorded {
        fn forget_entry(&self, dir: u64, name: &[u8]) -> std::io::Result<()> {
            self.told
                .lock()
                .unwrap()
                .push(format!("{dir}/{}", String::from_utf8_lossy(name)));
            match self.refuse.iter().any(|r| r == name) {
                true => Err(std::io::Error::other("refused")),
                false => Err(std::io::ErrorKind::NotFound.into()),
            }
        }
        fn forget_attr(&self, ino: u64) -> std::io::Result<()> {
            self.told.lock().unwrap().push(format!("{ino}@"));
            Ok(())
        }
    }

    fn handed(names: &[&str], attr: bool) -> Handed {
        let mut h = crate::dirlease::Held::default();
        h.set_kernel_caching(true);
        let t0 = std::time::Instant::now();
        assert!(h.asking(7, t0));
        h.granted(7, 1, Vec::new(), None, t0, t0);
        for n in names {
            assert!(!h.kernel_entry(7, n.as_bytes(), None, t0).is_zero());
        }
        if attr {
            assert!(!h.kernel_attr(7, t0).is_zero());
        }
        h.recalled(7, 1).expect("handed")
    }

    #[test]
    fn every_name_and_the_attributes_are_dropped_and_a_missing_one_is_no_failure() {
        let k = Recorded::default();
        assert!(forget_handed(&k, 7, &handed(&["a", "b"], true)));
        let mut told = k.told.into_inner().unwrap();
        told.sort();
        assert_eq!(told, ["7/a", "7/b", "7@"]);
    }

    /// A kernel that answers nothing until the test lets it (a directory's lock held by a
    /// lookup that waits on the mount).
    struct Stuck(Mutex<std::sync::mpsc::Receiver<()>>);

    impl KernelCache for Stuck {
        fn forget_entry(&self, _dir: u64, _name: &[u8]) -> std::io::Result<()> {
            let _ = self.0.lock().unwrap().recv();
            Ok(())
        }
        fn forget_attr(&self, _ino: u64) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_file_never_made_is_dropped_and_a_stuck_kernel_is_waited_for_a_bounded_time() {
        let never_made = |kernel: Arc<dyn KernelCache>| {
            bounded(move || forget(&*kernel, 7, [b"gone".as_slice()], false, [9]))
        };
        let k = Arc::new(Recorded::default());
        assert!(never_made(k.clone()).await);
        assert_eq!(*k.told.lock().unwrap(), ["7/gone", "9@"]);

        let (go, wait) = std::sync::mpsc::channel();
        let stuck = Arc::new(Stuck(Mutex::new(wait)));
        let started = std::time::Instant::now();
        assert!(!never_made(stuck).await);
        let waited = started.elapsed();
        assert!(waited >= FORGET_TIMEOUT, "gave up after {waited:?}");
        go.send(()).expect("the blocked thread still waits");
    }

    #[test]
    fn a_refusal_keeps_the_lease_from_being_given_up() {
        let k = Recorded {
            refuse: vec![b"b".to_vec()],
            ..Recorded::default()
        };
        assert!(!forget_handed(&k, 7, &handed(&["a", "b"], false)));
    }
}
