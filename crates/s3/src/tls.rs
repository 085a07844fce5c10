//! TLS for the gateway: the rustls server settings from a PEM certificate chain and private
//! key (`tls_cert`, `tls_key` in the gateway's TOML), with the `ring` provider, TLS 1.2 and
//! 1.3 and HTTP/1.1 by ALPN; and, for a laptop cluster (`cairn up --s3-tls`), a generated
//! pair: a local CA and a certificate it signs for `localhost` and `127.0.0.1` (plus any
//! other names), so clients trust the gateway with the CA file alone (`aws --ca-bundle`).
//! Private keys are written with mode 0600 from their creation.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use thiserror::Error;

/// Errors loading or generating certificates.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A PEM file holds nothing usable.
    #[error("{path}: {what}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// rustls refused the certificate or key.
    #[error("TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
    /// Generating a certificate failed.
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

fn pem_error(path: &Path, what: impl std::fmt::Display) -> TlsError {
    TlsError::Pem {
        path: path.to_path_buf(),
        what: what.to_string(),
    }
}

/// The server settings for the certificate chain in `cert` (PEM, leaf first) and the
/// private key in `key` (PEM: PKCS#8, PKCS#1 or SEC1).
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| pem_error(cert, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| pem_error(cert, e))?;
    if chain.is_empty() {
        return Err(pem_error(cert, "no CERTIFICATE in the file"));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| pem_error(key, e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Where [`generate`] put its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// The CA certificate clients trust (`--ca-bundle`).
    pub ca: PathBuf,
    /// The gateway's certificate chain (its certificate, then the CA's).
    pub cert: PathBuf,
    /// The gateway's private key (mode 0600).
    pub key: PathBuf,
}

/// Creates `path` with `data`, readable by its owner only when `private` (mode 0600 from the
/// creation on, never widened), replacing an older file atomically.
pub fn write_file(path: &Path, data: &[u8], private: bool) -> Result<(), TlsError> {
    let io = |source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(if private { 0o600 } else { 0o644 });
    }
    let mut f = opts.open(&tmp).map_err(io)?;
    f.write_all(data).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Creates in `dir` a CA (`s3-ca.pem`) and a certificate it signs for `localhost`,
/// `127.0.0.1` and `names` (`s3-cert.pem`, key `s3-key.pem`), valid ten years; when the three
/// files exist already they are kept, so clients keep trusting the same CA.
pub fn generate(dir: &Path, names: &[String]) -> Result<Generated, TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let out = Generated {
        ca: dir.join("s3-ca.pem"),
        cert: dir.join("s3-cert.pem"),
        key: dir.join("s3-key.pem"),
    };
    if out.ca.exists() && out.cert.exists() && out.key.exists() {
        return Ok(out);
    }
    let now = time::OffsetDateTime::now_utc();
    let validity = |p: &mut CertificateParams| {
        p.not_before = now - time::Duration::days(1);
        p.not_after = now + time::Duration::days(3650);
    };
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "cairn S3 gateway local CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut ca);
    let ca_cert = ca.self_signed(&ca_key)?;
    let mut sans = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    sans.extend(names.iter().cloned());
    let leaf_key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(sans)?;
    leaf.distinguished_name
        .push(DnType::CommonName, "cairn S3 gateway");
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.use_authority_key_identifier_extension = true;
    validity(&mut leaf);
    let issuer = Issuer::new(ca, &ca_key);
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;
    write_file(&out.key, leaf_key.serialize_pem().as_bytes(), true)?;
    write_file(
        &out.cert,
        format!("{}{}", leaf_cert.pem(), ca_cert.pem()).as_bytes(),
        false,
    )?;
    write_file(&out.ca, ca_cert.pem().as_bytes(), false)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_pairs_load_and_keys_are_private() {
        let dir = std::env::temp_dir().join(format!("cairn-tls-{}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let g = generate(&dir, &["gw.example".into()]).unwrap();
        server_config(&g.cert, &g.key).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&g.key).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // Kept on a second call: the same CA.
        let ca = std::fs::read(&g.ca).unwrap();
        assert_eq!(generate(&dir, &[]).unwrap(), g);
        assert_eq!(std::fs::read(&g.ca).unwrap(), ca);
        // Unusable files are clear errors, never a panic.
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a pem").unwrap();
        assert!(matches!(
            server_config(&junk, &g.key),
            Err(TlsError::Pem { .. })
        ));
        assert!(matches!(
            server_config(&g.cert, &junk),
            Err(TlsError::Pem { .. })
        ));
        assert!(server_config(&dir.join("missing"), &g.key).is_err());
        // A key that is not the certificate's.
        assert!(server_config(&g.ca, &g.key).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
