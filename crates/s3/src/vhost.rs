//! Virtual-hosted-style addressing: a request to `BUCKET.DOMAIN` (for one of the gateway's
//! configured `domains`) addresses that bucket, its path the key. Every other host (the
//! domain itself, an IP address, `localhost`) is path style, so path-style clients work
//! unchanged with domains configured. Ports are ignored.

use s3s::host::{S3Host, VirtualHost};
use s3s::S3Result;

/// The gateway's domains, as an s3s host parser.
#[derive(Clone, Debug, Default)]
pub struct Domains(pub Vec<String>);

/// `host` without its port.
fn without_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    }
}

/// The bucket `host` names as a virtual host under one of `domains`, if it names one.
pub fn bucket_of_host<'h>(domains: &[String], host: &'h str) -> Option<&'h str> {
    let name = without_port(host);
    domains.iter().find_map(|d| {
        let bucket = name.strip_suffix(d.as_str())?.strip_suffix('.')?;
        (!bucket.is_empty()).then_some(bucket)
    })
}

/// The bucket a request to `host` (when given) and `path` addresses, if any.
pub fn bucket_of<'a>(domains: &[String], host: Option<&'a str>, path: &'a str) -> Option<&'a str> {
    if let Some(b) = host.and_then(|h| bucket_of_host(domains, h)) {
        return Some(b);
    }
    path.trim_start_matches('/')
        .split('/')
        .next()
        .filter(|b| !b.is_empty())
}

impl S3Host for Domains {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        Ok(match bucket_of_host(&self.0, host) {
            Some(bucket) => VirtualHost::new(host).with_bucket(bucket),
            None => VirtualHost::new(host),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Subdomains of a configured domain name buckets; anything else is path style.
    #[test]
    fn hosts_name_buckets_only_under_a_domain() {
        let d = Domains(vec!["s3.example".into(), "objects.local".into()]);
        assert_eq!(
            bucket_of_host(&d.0, "photos.s3.example:7480"),
            Some("photos")
        );
        assert_eq!(bucket_of_host(&d.0, "a.b.objects.local"), Some("a.b"));
        for path_style in [
            "s3.example",
            "s3.example:80",
            "127.0.0.1:7480",
            "localhost",
            "xs3.example",
            ".s3.example",
            "[::1]:7480",
        ] {
            assert_eq!(bucket_of_host(&d.0, path_style), None, "{path_style}");
        }
        assert_eq!(
            bucket_of(&d.0, Some("photos.s3.example"), "/k/x"),
            Some("photos")
        );
        assert_eq!(bucket_of(&d.0, Some("127.0.0.1"), "/bk/k"), Some("bk"));
        assert_eq!(bucket_of(&d.0, None, "/"), None);
    }
}
