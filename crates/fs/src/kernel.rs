//! Taking what a recalled directory lease covered out of the kernel's cache: the kernel may
//! cache names and attributes (the directory's and its files') a lease covers (their TTL ends before the lease does), so before
//! the mount gives a recalled lease up it tells the kernel to drop each of them; another
//! client's change, which the MDS holds until then, is seen at once.

use std::sync::Arc;
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
pub fn forget(kernel: &dyn KernelCache, dir: u64, handed: &Handed) -> bool {
    let mut all = true;
    let mut note = |r: std::io::Result<()>, what: &str| match r {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(dir, what, error = %e, "the kernel did not drop a leased entry");
            all = false;
        }
    };
    for name in &handed.names {
        note(kernel.forget_entry(dir, name), "entry");
    }
    if handed.attr {
        note(kernel.forget_attr(dir), "attributes");
    }
    for ino in &handed.files {
        note(kernel.forget_attr(*ino), "a file's attributes");
    }
    all
}

/// Drops from `kernel` the entry of `name` in `dir` and the attributes of `ino`: a file the
/// mount answered a create of by itself that the MDS never made. Runs off the runtime's threads
/// and waits at most [`FORGET_TIMEOUT`]: the kernel drops an entry under the directory's lock,
/// which a lookup there may hold while its request waits for that create to be settled.
/// False when the kernel kept either, or had not dropped them in time (it drops them once the
/// directory's requests are done).
pub async fn forget_never_made(
    kernel: Arc<dyn KernelCache>,
    dir: u64,
    name: Vec<u8>,
    ino: u64,
) -> bool {
    let forgetting = tokio::task::spawn_blocking(move || {
        let cached = |r: std::io::Result<()>| match r {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r,
        };
        cached(kernel.forget_entry(dir, &name))?;
        cached(kernel.forget_attr(ino))
    });
    matches!(
        tokio::time::timeout(FORGET_TIMEOUT, forgetting).await,
        Ok(Ok(Ok(())))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

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
        assert!(h.asking(7));
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
        assert!(forget(&k, 7, &handed(&["a", "b"], true)));
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
        let k = Arc::new(Recorded::default());
        assert!(forget_never_made(k.clone(), 7, b"gone".to_vec(), 9).await);
        assert_eq!(*k.told.lock().unwrap(), ["7/gone", "9@"]);

        let (go, wait) = std::sync::mpsc::channel();
        let stuck = Arc::new(Stuck(Mutex::new(wait)));
        let started = std::time::Instant::now();
        assert!(!forget_never_made(stuck, 7, b"gone".to_vec(), 9).await);
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
        assert!(!forget(&k, 7, &handed(&["a", "b"], false)));
    }
}
