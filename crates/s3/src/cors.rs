//! Cross-origin resource sharing: a bucket's CORS rules (PutBucketCors), checked as S3 does,
//! and the rule that answers a browser's request: a preflight `OPTIONS` (origin, the method
//! it will use, the headers it will send) or an actual request carrying `Origin`. The first
//! rule whose origins, methods and headers all match wins. Pure: no I/O.

use s3s::dto::CORSRule;
use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};

/// Most rules in one configuration (AWS: 100).
pub const MAX_RULES: usize = 100;
/// Methods a rule may allow.
pub const METHODS: [&str; 5] = ["GET", "PUT", "POST", "DELETE", "HEAD"];

/// One stored rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// Its id, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Origins, each with at most one `*`.
    pub origins: Vec<String>,
    /// Methods (of [`METHODS`]).
    pub methods: Vec<String>,
    /// Request headers a preflight may name, each with at most one `*` (case-insensitive).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<String>,
    /// Response headers a browser may let scripts read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose: Vec<String>,
    /// How long a browser may cache the preflight's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_seconds: Option<i32>,
}

/// Checks a configuration as S3 does (1 to 100 rules, each with origins and known methods,
/// at most one `*` per origin or header pattern) and converts it.
pub fn from_config(rules: &[CORSRule]) -> S3Result<Vec<Rule>> {
    if rules.is_empty() || rules.len() > MAX_RULES {
        return Err(s3_error!(
            MalformedXML,
            "a CORS configuration has 1 to {MAX_RULES} rules"
        ));
    }
    rules
        .iter()
        .map(|r| {
            if r.allowed_origins.is_empty() || r.allowed_methods.is_empty() {
                return Err(s3_error!(
                    MalformedXML,
                    "a CORS rule needs an AllowedOrigin and an AllowedMethod"
                ));
            }
            if let Some(m) = r
                .allowed_methods
                .iter()
                .find(|m| !METHODS.contains(&m.as_str()))
            {
                return Err(s3_error!(
                    InvalidRequest,
                    "Found unsupported HTTP method in CORS config. Unsupported method is {m}"
                ));
            }
            let headers = r.allowed_headers.clone().unwrap_or_default();
            for p in r.allowed_origins.iter().chain(&headers) {
                if p.matches('*').count() > 1 {
                    return Err(s3_error!(
                        InvalidRequest,
                        "{p} can not have more than one wildcard"
                    ));
                }
            }
            Ok(Rule {
                id: r.id.clone(),
                origins: r.allowed_origins.clone(),
                methods: r.allowed_methods.clone(),
                headers,
                expose: r.expose_headers.clone().unwrap_or_default(),
                max_age_seconds: r.max_age_seconds,
            })
        })
        .collect()
}

/// The configuration for a GetBucketCors reply.
pub fn to_config(rules: &[Rule]) -> Vec<CORSRule> {
    rules
        .iter()
        .map(|r| CORSRule {
            id: r.id.clone(),
            allowed_origins: r.origins.clone(),
            allowed_methods: r.methods.clone(),
            allowed_headers: (!r.headers.is_empty()).then(|| r.headers.clone()),
            expose_headers: (!r.expose.is_empty()).then(|| r.expose.clone()),
            max_age_seconds: r.max_age_seconds,
        })
        .collect()
}

/// Whether `value` matches `pattern`, which may hold one `*` standing for any run of
/// characters; `fold` compares without case.
fn matches(pattern: &str, value: &str, fold: bool) -> bool {
    let (p, v) = if fold {
        (pattern.to_ascii_lowercase(), value.to_ascii_lowercase())
    } else {
        (pattern.to_string(), value.to_string())
    };
    match p.split_once('*') {
        None => p == v,
        Some((head, tail)) => {
            v.len() >= head.len() + tail.len() && v.starts_with(head) && v.ends_with(tail)
        }
    }
}

/// What a browser asks of a bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask<'a> {
    /// `Origin`.
    pub origin: &'a str,
    /// The method (a preflight's `Access-Control-Request-Method`).
    pub method: &'a str,
    /// The headers a preflight names (`Access-Control-Request-Headers`); none for an actual
    /// request.
    pub headers: Vec<&'a str>,
}

impl Rule {
    fn allows(&self, ask: &Ask<'_>) -> bool {
        self.origins.iter().any(|o| matches(o, ask.origin, false))
            && self.methods.iter().any(|m| m == ask.method)
            && ask
                .headers
                .iter()
                .all(|h| self.headers.iter().any(|p| matches(p, h, true)))
    }

    /// The `Access-Control-Allow-Origin` it answers `origin` with (`*` when it allows every
    /// origin).
    pub fn allow_origin(&self, origin: &str) -> String {
        if self.origins.iter().any(|o| o == "*") {
            "*".into()
        } else {
            origin.to_string()
        }
    }
}

/// The first rule that allows `ask`.
pub fn find<'r>(rules: &'r [Rule], ask: &Ask<'_>) -> Option<&'r Rule> {
    rules.iter().find(|r| r.allows(ask))
}

/// The header names of an `Access-Control-Request-Headers` value.
pub fn header_list(value: &str) -> Vec<&str> {
    value
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> CORSRule {
        CORSRule {
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            allowed_methods: methods.iter().map(|s| s.to_string()).collect(),
            allowed_headers: Some(headers.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        }
    }

    fn ask<'a>(origin: &'a str, method: &'a str, headers: &[&'a str]) -> Ask<'a> {
        Ask {
            origin,
            method,
            headers: headers.to_vec(),
        }
    }

    #[test]
    fn the_first_matching_rule_answers() {
        let rules = from_config(&[
            rule(
                &["https://*.example.com"],
                &["GET", "PUT"],
                &["x-amz-*", "content-type"],
            ),
            rule(&["*"], &["GET"], &[]),
        ])
        .unwrap();
        let r = find(
            &rules,
            &ask(
                "https://app.example.com",
                "PUT",
                &["Content-Type", "X-Amz-Date"],
            ),
        );
        assert_eq!(
            r.map(|r| r.allow_origin("https://app.example.com"))
                .as_deref(),
            Some("https://app.example.com")
        );
        assert!(find(
            &rules,
            &ask("https://app.example.com", "PUT", &["authorization"])
        )
        .is_none());
        assert!(find(&rules, &ask("https://evil.com", "PUT", &[])).is_none());
        let anyone = find(&rules, &ask("https://evil.com", "GET", &[])).unwrap();
        assert_eq!(anyone.allow_origin("https://evil.com"), "*");
        assert!(find(&rules, &ask("https://evil.com", "GET", &["x-custom"])).is_none());
        assert_eq!(to_config(&rules).len(), 2);
        assert_eq!(header_list(" a, b ,,c"), vec!["a", "b", "c"]);
    }

    #[test]
    fn bad_configurations_are_refused() {
        let code = |rules: &[CORSRule]| from_config(rules).unwrap_err().code().as_str().to_string();
        assert_eq!(code(&[]), "MalformedXML");
        assert_eq!(code(&[rule(&["*"], &["PATCH"], &[])]), "InvalidRequest");
        assert_eq!(
            code(&[rule(&["https://*.*.com"], &["GET"], &[])]),
            "InvalidRequest"
        );
        assert_eq!(code(&[rule(&[], &["GET"], &[])]), "MalformedXML");
        let many: Vec<CORSRule> = (0..101).map(|_| rule(&["*"], &["GET"], &[])).collect();
        assert_eq!(code(&many), "MalformedXML");
    }

    #[test]
    fn wildcards_match_one_run() {
        assert!(matches("a*z", "az", false));
        assert!(matches("a*z", "abcz", false));
        assert!(
            !matches("ab*bc", "abc", false),
            "head and tail may not overlap"
        );
        assert!(matches("X-Amz-*", "x-amz-date", true));
        assert!(!matches("X-Amz-*", "x-amz-date", false));
    }
}
