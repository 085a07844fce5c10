//! TBF rule expressions: `attr=pattern` conditions joined by `&` (binds tighter) and `|`.
//!
//! Owns parsing (typed errors, never a panic) and matching. Attributes: `client`, `job`, `op`,
//! `class`, `target`, `object`. A pattern is a glob (`*`, `?`) over the attribute's text (decimal
//! for numbers, the name for ops and classes) or a set `{a,b*,c}`. A missing attribute (no job,
//! no object) matches nothing. Matching never allocates.

use crate::error::QosError;
use crate::request::Request;

/// A request attribute a rule can test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attr {
    /// `client_id`.
    Client,
    /// `job_id`.
    Job,
    /// `op` (read, write, other).
    Op,
    /// `class` (client, recovery, best_effort, immediate).
    Class,
    /// `target`.
    Target,
    /// `object_id`.
    Object,
}

impl Attr {
    fn parse(s: &str) -> Option<Attr> {
        Some(match s {
            "client" => Attr::Client,
            "job" => Attr::Job,
            "op" => Attr::Op,
            "class" => Attr::Class,
            "target" => Attr::Target,
            "object" => Attr::Object,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Cond {
    attr: Attr,
    patterns: Vec<Box<[u8]>>,
}

/// A compiled expression: an OR of ANDs of conditions.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    any_of: Vec<Vec<Cond>>,
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

fn decimal(v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &buf[i..]
}

impl Cond {
    fn matches(&self, req: &Request) -> bool {
        let mut buf = [0u8; 20];
        let text: &[u8] = match self.attr {
            Attr::Client => decimal(req.client_id, &mut buf),
            Attr::Target => decimal(req.target as u64, &mut buf),
            Attr::Job => match req.job_id {
                Some(j) => decimal(j as u64, &mut buf),
                None => return false,
            },
            Attr::Object => match req.object_id {
                Some(o) => decimal(o, &mut buf),
                None => return false,
            },
            Attr::Op => req.op.name().as_bytes(),
            Attr::Class => req.class.name().as_bytes(),
        };
        self.patterns.iter().any(|p| glob(p, text))
    }
}

impl Expr {
    /// Parses an expression such as `client=1* & op=write | class=recovery`.
    pub fn parse(text: &str) -> Result<Expr, QosError> {
        let err = |pos: usize, reason: &str| QosError::BadRule {
            pos,
            reason: reason.to_string(),
        };
        let b = text.as_bytes();
        let mut i = 0;
        let skip_ws = |i: &mut usize| {
            while *i < b.len() && b[*i].is_ascii_whitespace() {
                *i += 1;
            }
        };
        let is_word =
            |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'*' | b'?' | b'.' | b'-');
        let mut any_of = Vec::new();
        let mut all_of = Vec::new();
        loop {
            skip_ws(&mut i);
            let start = i;
            while i < b.len() && b[i].is_ascii_alphabetic() {
                i += 1;
            }
            let name = &text[start..i];
            let attr = Attr::parse(name).ok_or_else(|| err(start, "expected an attribute"))?;
            skip_ws(&mut i);
            if i >= b.len() || b[i] != b'=' {
                return Err(err(i, "expected `=`"));
            }
            i += 1;
            skip_ws(&mut i);
            let mut patterns = Vec::new();
            let braced = i < b.len() && b[i] == b'{';
            if braced {
                i += 1;
            }
            loop {
                skip_ws(&mut i);
                let vs = i;
                while i < b.len() && is_word(b[i]) {
                    i += 1;
                }
                if vs == i {
                    return Err(err(i, "expected a value"));
                }
                patterns.push(b[vs..i].to_vec().into_boxed_slice());
                skip_ws(&mut i);
                if braced && i < b.len() && b[i] == b',' {
                    i += 1;
                    continue;
                }
                break;
            }
            if braced {
                if i >= b.len() || b[i] != b'}' {
                    return Err(err(i, "expected `}`"));
                }
                i += 1;
            }
            all_of.push(Cond { attr, patterns });
            skip_ws(&mut i);
            if i >= b.len() {
                any_of.push(std::mem::take(&mut all_of));
                break;
            }
            match b[i] {
                b'&' => i += 1,
                b'|' => {
                    i += 1;
                    any_of.push(std::mem::take(&mut all_of));
                }
                _ => return Err(err(i, "expected `&`, `|` or end")),
            }
        }
        Ok(Expr { any_of })
    }

    /// True if the request satisfies the expression.
    pub fn matches(&self, req: &Request) -> bool {
        self.any_of
            .iter()
            .any(|all| all.iter().all(|c| c.matches(req)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{OpKind, QosClass};

    fn req(client: u64, op: OpKind, job: Option<u32>) -> Request {
        Request {
            op,
            job_id: job,
            ..Request::new(0, QosClass::Client, client, 1)
        }
    }

    #[test]
    fn and_binds_tighter_than_or_and_globs_match() {
        let e = Expr::parse("client=1* & op=write | job={7,9?}").unwrap();
        assert!(e.matches(&req(12, OpKind::Write, None)));
        assert!(!e.matches(&req(12, OpKind::Read, None)));
        assert!(!e.matches(&req(21, OpKind::Write, None)));
        assert!(e.matches(&req(21, OpKind::Read, Some(7))));
        assert!(e.matches(&req(21, OpKind::Read, Some(93))));
        assert!(!e.matches(&req(21, OpKind::Read, Some(930))));
        let all = Expr::parse("class=*").unwrap();
        assert!(all.matches(&req(5, OpKind::Other, None)));
        assert!(!Expr::parse("object=*")
            .unwrap()
            .matches(&req(1, OpKind::Read, None)));
    }

    #[test]
    fn malformed_expressions_are_typed_errors() {
        for bad in [
            "",
            "client",
            "client=",
            "colour=red",
            "client=1 &",
            "client={1,2",
            "op=read ^ x",
        ] {
            assert!(
                matches!(Expr::parse(bad), Err(QosError::BadRule { .. })),
                "{bad:?} should fail"
            );
        }
    }
}
