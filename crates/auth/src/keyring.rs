//! Keyring files: entities, their keys and capabilities, in Ceph's keyring layout.
//!
//! ```text
//! [client.admin]
//!     key = 3q2+7w...=
//!     caps mon = "allow *"
//!     caps osd = "allow *"
//! ```
//!
//! Files are written with mode 0600 (readable by their owner only), created so, never
//! loosened afterwards, and replaced atomically.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use crate::caps::Caps;
use crate::entity::EntityName;
use crate::error::AuthError;
use crate::key::SecretKey;

/// Largest keyring file read.
pub const MAX_KEYRING_BYTES: u64 = 4 << 20;

/// One entity's key and capability strings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyringEntry {
    /// Its secret.
    pub key: SecretKey,
    /// Its capability strings by service.
    pub caps: BTreeMap<String, String>,
}

impl KeyringEntry {
    /// An entry with a new random key and `caps`.
    pub fn generate(caps: &Caps) -> KeyringEntry {
        KeyringEntry {
            key: SecretKey::generate(),
            caps: caps.raw().clone(),
        }
    }
}

/// Entities and their keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keyring {
    /// Entries by entity.
    pub entries: BTreeMap<EntityName, KeyringEntry>,
}

impl Keyring {
    /// A keyring holding one entry.
    pub fn single(entity: EntityName, entry: KeyringEntry) -> Keyring {
        Keyring {
            entries: [(entity, entry)].into(),
        }
    }

    /// The keyring in `text`; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Keyring, AuthError> {
        let err = |line: usize, why: String| AuthError::Keyring {
            path: origin.to_string(),
            why: format!("line {line}: {why}"),
        };
        let mut ring = Keyring::default();
        let mut current: Option<(EntityName, Option<SecretKey>, BTreeMap<String, String>)> = None;
        let mut finish =
            |cur: Option<(EntityName, Option<SecretKey>, BTreeMap<String, String>)>,
             line: usize|
             -> Result<(), AuthError> {
                if let Some((entity, key, caps)) = cur {
                    let key = key.ok_or_else(|| err(line, format!("[{entity}] has no key")))?;
                    Caps::parse(&caps).map_err(|e| err(line, e.to_string()))?;
                    ring.entries.insert(entity, KeyringEntry { key, caps });
                }
                Ok(())
            };
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                finish(current.take(), n)?;
                let entity: EntityName = name
                    .trim()
                    .parse()
                    .map_err(|e: AuthError| err(n, e.to_string()))?;
                current = Some((entity, None, BTreeMap::new()));
                continue;
            }
            let Some((lhs, rhs)) = line.split_once('=') else {
                return Err(err(
                    n,
                    "expected `key = ...` or `caps SERVICE = \"...\"`".into(),
                ));
            };
            let Some((_, key, caps)) = current.as_mut() else {
                return Err(err(n, "a setting before any [entity] section".into()));
            };
            let value = rhs.trim().trim_matches('"').to_string();
            let lhs: Vec<&str> = lhs.split_whitespace().collect();
            match lhs.as_slice() {
                ["key"] => {
                    *key = Some(SecretKey::from_base64(&value).map_err(|e| err(n, e.to_string()))?)
                }
                ["caps", service] => {
                    caps.insert(service.to_string(), value);
                }
                _ => return Err(err(n, format!("unknown setting {:?}", lhs.join(" ")))),
            }
        }
        finish(current.take(), text.lines().count())?;
        Ok(ring)
    }

    /// The keyring's text, in the layout [`Keyring::parse`] reads.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (entity, e) in &self.entries {
            out.push_str(&format!("[{entity}]\n\tkey = {}\n", e.key.to_base64()));
            for (service, cap) in &e.caps {
                out.push_str(&format!("\tcaps {service} = \"{cap}\"\n"));
            }
        }
        out
    }

    /// Reads the keyring file at `path`.
    pub fn load(path: &Path) -> Result<Keyring, AuthError> {
        let shown = path.display().to_string();
        let io = |e: std::io::Error| AuthError::Keyring {
            path: shown.clone(),
            why: e.to_string(),
        };
        let len = std::fs::metadata(path).map_err(io)?.len();
        if len > MAX_KEYRING_BYTES {
            return Err(AuthError::Keyring {
                path: shown,
                why: format!("{len} bytes, more than {MAX_KEYRING_BYTES}"),
            });
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        Keyring::parse(&text, &shown)
    }

    /// Writes the keyring to `path` with mode 0600, replacing it atomically (through a
    /// temporary file created 0600 beside it).
    pub fn save(&self, path: &Path) -> Result<(), AuthError> {
        let shown = path.display().to_string();
        let io = |e: std::io::Error| AuthError::Keyring {
            path: shown.clone(),
            why: e.to_string(),
        };
        let tmp = path.with_extension("tmp-keyring");
        let _ = std::fs::remove_file(&tmp);
        let mut f = private_file(&tmp).map_err(io)?;
        f.write_all(self.render().as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)?;
        Ok(())
    }

    /// The entry of `entity`.
    pub fn get(&self, entity: &EntityName) -> Option<&KeyringEntry> {
        self.entries.get(entity)
    }
}

/// A new file at `path` that only its owner may read or write (mode 0600 on Unix), failing if
/// one exists: secrets are never briefly readable by others.
pub fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyrings_round_trip_through_a_private_file() {
        let mut ring = Keyring::default();
        ring.entries.insert(
            EntityName::admin(),
            KeyringEntry::generate(&Caps::everything()),
        );
        ring.entries.insert(
            EntityName::Osd(3),
            KeyringEntry::generate(&Caps::osd_daemon()),
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keyring");
        ring.save(&path).unwrap();
        assert_eq!(Keyring::load(&path).unwrap(), ring);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        ring.save(&path).unwrap();
        assert_eq!(
            Keyring::load(&path).unwrap(),
            ring,
            "saving again replaces it"
        );
    }

    #[test]
    fn cephs_layout_parses_and_bad_keyrings_name_their_line() {
        let key = SecretKey::generate().to_base64();
        let text = format!(
            "# comment\n[client.admin]\n\tkey = {key}\n\tcaps mon = \"allow *\"\n  caps mgr = allow *\n\n[osd.0]\nkey={key}\n"
        );
        let ring = Keyring::parse(&text, "t").unwrap();
        assert_eq!(ring.entries.len(), 2);
        assert_eq!(
            ring.get(&EntityName::admin()).unwrap().caps["mgr"],
            "allow *"
        );
        let cases = [
            ("[client.admin]\n", "no key"),
            ("key = x\n", "before any"),
            ("[bogus]\nkey = x\n", "line 1"),
            ("[client.a]\nkey = short\n", "line 2"),
            ("[client.a]\nfoo = bar\n", "unknown setting"),
            (
                &format!("[client.a]\nkey = {key}\ncaps osd = \"allow q\"\n"),
                "allow q",
            ),
            ("[client.a]\njunk\n", "expected"),
        ];
        for (text, want) in cases {
            let e = Keyring::parse(text, "t").unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
