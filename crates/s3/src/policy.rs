//! Bucket policies: the JSON document of Put/Get/DeleteBucketPolicy, parsed and checked
//! ([`Policy::parse`]) and evaluated for one request ([`Policy::evaluate`]). Supported:
//! `Version`, `Id`, `Statement` (one or a list) of `Sid`, `Effect` (`Allow`/`Deny`),
//! `Principal` (`"*"` or `{"AWS": ...}` with user names, `arn:aws:iam::ACCOUNT:user/NAME` or
//! `"*"`), `Action` (`s3:...` with `*`/`?` wildcards) and `Resource` (`arn:aws:s3:::bucket`
//! and `arn:aws:s3:::bucket/...` with wildcards, always inside the policy's own bucket).
//! Elements the gateway cannot honour (`Condition`, `NotAction`, `NotPrincipal`,
//! `NotResource`, other principal kinds) make the whole policy MalformedPolicy rather than
//! being ignored, so a policy never grants more than it says. Pure: no I/O.

use serde_json::Value;
use thiserror::Error;

/// Largest policy document (AWS: 20 KiB).
pub const MAX_POLICY_BYTES: usize = 20 * 1024;
/// Most statements in one policy.
pub const MAX_STATEMENTS: usize = 100;
/// Most actions, principals or resources in one statement.
pub const MAX_LIST: usize = 100;

/// Why a policy document was refused (every case is S3's MalformedPolicy).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PolicyError {
    /// Over [`MAX_POLICY_BYTES`].
    #[error("policies are at most {MAX_POLICY_BYTES} bytes")]
    TooLarge,
    /// Not JSON.
    #[error("policy is not valid JSON: {0}")]
    Json(String),
    /// JSON, but not a policy the gateway accepts.
    #[error("{0}")]
    Invalid(String),
}

impl PolicyError {
    /// The S3 error a client gets.
    pub fn to_s3(&self) -> s3s::S3Error {
        s3s::s3_error!(MalformedPolicy, "{}", self)
    }
}

/// A statement's effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Grants.
    Allow,
    /// Refuses, over every Allow and over ownership.
    Deny,
}

/// Who a statement applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Principal {
    /// Everyone, anonymous requesters included.
    Anyone,
    /// These users (names).
    Users(Vec<String>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Statement {
    effect: Effect,
    principal: Principal,
    /// Lower-case action patterns (`s3:getobject`, `s3:*`).
    actions: Vec<String>,
    /// Resource patterns (`arn:aws:s3:::b/*`).
    resources: Vec<String>,
}

/// A parsed, checked bucket policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    statements: Vec<Statement>,
}

/// What a policy says about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No statement matches.
    Silent,
    /// An Allow statement matches and no Deny does.
    Allow,
    /// A Deny statement matches.
    Deny,
}

/// Whether `text` matches the glob `pattern` (`*`: any run, `?`: any one character).
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

fn invalid(msg: impl Into<String>) -> PolicyError {
    PolicyError::Invalid(msg.into())
}

/// One string or a non-empty list of strings.
fn strings(v: &Value, what: &str) -> Result<Vec<String>, PolicyError> {
    let list = match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| invalid(format!("{what} entries must be strings")))
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(invalid(format!(
                "{what} must be a string or a list of strings"
            )))
        }
    };
    if list.is_empty() || list.len() > MAX_LIST {
        return Err(invalid(format!("{what} must list 1..={MAX_LIST} entries")));
    }
    Ok(list)
}

/// A user name from a principal entry: the name itself or an IAM user ARN.
fn principal_name(s: &str) -> Result<String, PolicyError> {
    if let Some(rest) = s.strip_prefix("arn:aws:iam::") {
        return rest
            .split_once(":user/")
            .map(|(_, name)| name.to_string())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| invalid(format!("principal `{s}`: only user ARNs are supported")));
    }
    if s.is_empty() || s.starts_with("arn:") {
        return Err(invalid(format!("invalid principal `{s}`")));
    }
    Ok(s.to_string())
}

fn parse_principal(v: &Value) -> Result<Principal, PolicyError> {
    match v {
        Value::String(s) if s == "*" => Ok(Principal::Anyone),
        Value::Object(m) => {
            if let Some(k) = m.keys().find(|k| *k != "AWS") {
                return Err(invalid(format!("principal kind `{k}` is not supported")));
            }
            let aws = m
                .get("AWS")
                .ok_or_else(|| invalid("Principal needs an AWS entry"))?;
            let names = strings(aws, "Principal.AWS")?;
            if names.iter().any(|n| n == "*") {
                return Ok(Principal::Anyone);
            }
            Ok(Principal::Users(
                names
                    .iter()
                    .map(|n| principal_name(n))
                    .collect::<Result<_, _>>()?,
            ))
        }
        _ => Err(invalid("Principal must be \"*\" or {\"AWS\": ...}")),
    }
}

fn parse_action(a: &str) -> Result<String, PolicyError> {
    let ok = a == "*"
        || a.strip_prefix("s3:").is_some_and(|n| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '*' || c == '?')
        });
    if !ok {
        return Err(invalid(format!("invalid action `{a}`")));
    }
    Ok(a.to_ascii_lowercase())
}

fn parse_resource(r: &str, bucket: &str) -> Result<String, PolicyError> {
    let own = format!("arn:aws:s3:::{bucket}");
    if r == own
        || r.strip_prefix(&own)
            .is_some_and(|rest| rest.starts_with('/'))
    {
        return Ok(r.to_string());
    }
    Err(invalid(format!(
        "resource `{r}` is not bucket {bucket} or inside it"
    )))
}

fn parse_statement(v: &Value, bucket: &str) -> Result<Statement, PolicyError> {
    let m = v
        .as_object()
        .ok_or_else(|| invalid("each statement must be an object"))?;
    for k in m.keys() {
        match k.as_str() {
            "Sid" | "Effect" | "Principal" | "Action" | "Resource" => {}
            "Condition" | "NotAction" | "NotPrincipal" | "NotResource" => {
                return Err(invalid(format!("{k} is not supported")))
            }
            other => return Err(invalid(format!("unknown statement element `{other}`"))),
        }
    }
    if m.get("Sid").is_some_and(|s| !s.is_string()) {
        return Err(invalid("Sid must be a string"));
    }
    let effect = match m.get("Effect").and_then(Value::as_str) {
        Some("Allow") => Effect::Allow,
        Some("Deny") => Effect::Deny,
        _ => return Err(invalid("Effect must be \"Allow\" or \"Deny\"")),
    };
    let principal = parse_principal(
        m.get("Principal")
            .ok_or_else(|| invalid("a statement needs a Principal"))?,
    )?;
    let actions = strings(
        m.get("Action")
            .ok_or_else(|| invalid("a statement needs an Action"))?,
        "Action",
    )?
    .iter()
    .map(|a| parse_action(a))
    .collect::<Result<_, _>>()?;
    let resources = strings(
        m.get("Resource")
            .ok_or_else(|| invalid("a statement needs a Resource"))?,
        "Resource",
    )?
    .iter()
    .map(|r| parse_resource(r, bucket))
    .collect::<Result<_, _>>()?;
    Ok(Statement {
        effect,
        principal,
        actions,
        resources,
    })
}

impl Policy {
    /// Parses and checks the policy document `text` of bucket `bucket`.
    pub fn parse(text: &str, bucket: &str) -> Result<Policy, PolicyError> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge);
        }
        let doc: Value =
            serde_json::from_str(text).map_err(|e| PolicyError::Json(e.to_string()))?;
        let m = doc
            .as_object()
            .ok_or_else(|| invalid("a policy is a JSON object"))?;
        for k in m.keys() {
            if !matches!(k.as_str(), "Version" | "Id" | "Statement") {
                return Err(invalid(format!("unknown policy element `{k}`")));
            }
        }
        match m.get("Version") {
            None => {}
            Some(Value::String(v)) if v == "2012-10-17" || v == "2008-10-17" => {}
            Some(v) => return Err(invalid(format!("unsupported Version {v}"))),
        }
        if m.get("Id").is_some_and(|s| !s.is_string()) {
            return Err(invalid("Id must be a string"));
        }
        let statements: Vec<&Value> = match m.get("Statement") {
            Some(Value::Array(list)) => list.iter().collect(),
            Some(one @ Value::Object(_)) => vec![one],
            _ => return Err(invalid("Statement must be an object or a list of them")),
        };
        if statements.is_empty() || statements.len() > MAX_STATEMENTS {
            return Err(invalid(format!(
                "a policy has 1..={MAX_STATEMENTS} statements"
            )));
        }
        Ok(Policy {
            statements: statements
                .into_iter()
                .map(|s| parse_statement(s, bucket))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Whether an Allow statement applies to everyone (anonymous callers included): what S3
    /// calls a public policy.
    pub fn is_public(&self) -> bool {
        self.statements
            .iter()
            .any(|s| s.effect == Effect::Allow && s.principal == Principal::Anyone)
    }

    /// The policy without its public Allow statements (what a public access block's
    /// `RestrictPublicBuckets` leaves in force); Deny statements all stay.
    pub fn without_public_grants(&self) -> Policy {
        Policy {
            statements: self
                .statements
                .iter()
                .filter(|s| !(s.effect == Effect::Allow && s.principal == Principal::Anyone))
                .cloned()
                .collect(),
        }
    }

    /// What the policy says about `caller` (None: anonymous) doing `action` (`s3:GetObject`)
    /// on `resource` (`arn:aws:s3:::bucket` or `arn:aws:s3:::bucket/key`): any matching Deny
    /// wins over every Allow.
    pub fn evaluate(&self, caller: Option<&str>, action: &str, resource: &str) -> Verdict {
        let action = action.to_ascii_lowercase();
        let mut verdict = Verdict::Silent;
        for s in &self.statements {
            let who = match &s.principal {
                Principal::Anyone => true,
                Principal::Users(names) => caller.is_some_and(|c| names.iter().any(|n| n == c)),
            };
            if !who
                || !s.actions.iter().any(|p| glob(p, &action))
                || !s.resources.iter().any(|p| glob(p, resource))
            {
                continue;
            }
            match s.effect {
                Effect::Deny => return Verdict::Deny,
                Effect::Allow => verdict = Verdict::Allow,
            }
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("*", ""));
        assert!(glob("a*c", "abbbc"));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "ac"));
        assert!(glob("arn:aws:s3:::b/pub/*", "arn:aws:s3:::b/pub/x/y"));
        assert!(!glob("arn:aws:s3:::b/pub/*", "arn:aws:s3:::b/private"));
        assert!(!glob("arn:aws:s3:::b", "arn:aws:s3:::b/x"));
        assert!(glob("s3:get*", "s3:getobject"));
        assert!(glob("**a", "bba"));
        assert!(!glob("", "x"));
    }

    const PUBLIC_PREFIX: &str = r#"{
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "pub", "Effect": "Allow", "Principal": "*",
             "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/pub/*"},
            {"Effect": "Allow", "Principal": {"AWS": ["bob", "arn:aws:iam::123456789012:user/carol"]},
             "Action": ["s3:ListBucket", "s3:PutObject"],
             "Resource": ["arn:aws:s3:::b", "arn:aws:s3:::b/*"]},
            {"Effect": "Deny", "Principal": {"AWS": "*"},
             "Action": "s3:*", "Resource": "arn:aws:s3:::b/secret*"}
        ]
    }"#;

    #[test]
    fn statements_allow_and_explicit_deny_wins() {
        let p = Policy::parse(PUBLIC_PREFIX, "b").unwrap();
        let get = "s3:GetObject";
        assert_eq!(
            p.evaluate(None, get, "arn:aws:s3:::b/pub/a"),
            Verdict::Allow
        );
        assert_eq!(
            p.evaluate(None, get, "arn:aws:s3:::b/other"),
            Verdict::Silent
        );
        assert_eq!(
            p.evaluate(None, "s3:PutObject", "arn:aws:s3:::b/pub/a"),
            Verdict::Silent
        );
        assert_eq!(
            p.evaluate(Some("bob"), "s3:ListBucket", "arn:aws:s3:::b"),
            Verdict::Allow
        );
        assert_eq!(
            p.evaluate(Some("carol"), "s3:putobject", "arn:aws:s3:::b/k"),
            Verdict::Allow
        );
        assert_eq!(
            p.evaluate(Some("dave"), "s3:PutObject", "arn:aws:s3:::b/k"),
            Verdict::Silent
        );
        assert_eq!(
            p.evaluate(None, "s3:ListBucket", "arn:aws:s3:::b"),
            Verdict::Silent
        );
        // Deny over an Allow that also matches, for named users and anonymous alike.
        assert_eq!(
            p.evaluate(Some("bob"), "s3:PutObject", "arn:aws:s3:::b/secret/x"),
            Verdict::Deny
        );
        assert_eq!(
            p.evaluate(None, get, "arn:aws:s3:::b/secrets"),
            Verdict::Deny
        );
    }

    const ONE: &str = r#"{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}"#;

    #[test]
    fn malformed_or_unsupported_policies_are_refused_never_ignored() {
        let stmt = |extra: &str| {
            format!(
                r#"{{"Statement": {{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"{extra}}}}}"#
            )
        };
        Policy::parse(&stmt(""), "b").unwrap();
        let bad = [
            String::new(),
            "null".into(),
            "[]".into(),
            "{".into(),
            "{\"Statement\": []}".into(),
            "{\"Version\": \"2020-01-01\", \"Statement\": {}}".into(),
            "{\"Statement\": {}, \"Extra\": 1}".into(),
            stmt(r#", "Condition": {"Bool": {"aws:SecureTransport": "true"}}"#),
            stmt(r#", "NotAction": "s3:PutObject""#),
            stmt(r#", "Sid": 5"#),
            stmt(r#", "Whatever": 1"#),
            stmt("").replace("\"Allow\"", "\"allow\""),
            stmt("").replace("\"*\"", "{\"CanonicalUser\": \"x\"}"),
            stmt("").replace("\"*\"", "{\"AWS\": \"arn:aws:iam::1:role/r\"}"),
            stmt("").replace("\"*\"", "{\"AWS\": []}"),
            stmt("").replace("\"*\"", "5"),
            stmt("").replace("s3:GetObject", "ec2:RunInstances"),
            stmt("").replace("s3:GetObject", "s3:Get Object"),
            stmt("").replace("arn:aws:s3:::b/*", "arn:aws:s3:::other/*"),
            stmt("").replace("arn:aws:s3:::b/*", "arn:aws:s3:::bb"),
            stmt("").replace("arn:aws:s3:::b/*", "*"),
            stmt("").replace(", \"Principal\": \"*\"", ""),
            format!(
                "{{\"Statement\": [{}]}}",
                vec![ONE; MAX_STATEMENTS + 1].join(",")
            ),
            "[".repeat(10_000),
        ];
        for text in bad {
            let e = Policy::parse(&text, "b").unwrap_err();
            assert_eq!(
                e.to_s3().code(),
                &s3s::S3ErrorCode::MalformedPolicy,
                "{text:.200}"
            );
        }
        let big = format!("{{\"Id\": \"{}\"}}", "x".repeat(MAX_POLICY_BYTES));
        assert_eq!(Policy::parse(&big, "b").unwrap_err(), PolicyError::TooLarge);
    }
}
