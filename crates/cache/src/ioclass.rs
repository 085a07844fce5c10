//! I/O classes: rules that classify a request (size, store hints), each class with an eviction
//! priority and an allocation share; loaded from casadm's CSV format.
//!
//! Owns parsing (`IO class id,IO class name,Eviction priority,Allocation`), validation and
//! classification. It must never panic on malformed input: every problem is a
//! [`CacheError::IoClassCsv`] naming the 1-based line.

use crate::error::{CacheError, Result};

/// Highest I/O class id (ids are 0 ..= `MAX_CLASS_ID`; 0 is the unclassified class).
pub const MAX_CLASS_ID: u8 = 32;
/// Number of class slots (`MAX_CLASS_ID + 1`).
pub const CLASS_SLOTS: usize = MAX_CLASS_ID as usize + 1;
/// The header line casadm writes and expects.
pub const CSV_HEADER: &str = "IO class id,IO class name,Eviction priority,Allocation";

/// What the object store tells the cache about a request (the block layer cannot know it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoHint {
    /// True for store metadata (KV, allocator state), false for object data.
    pub metadata: bool,
    /// Object class chosen by the store (0 = none).
    pub object_class: u8,
}

/// A comparison in a `request_size` rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// Less than.
    Lt,
    /// Less or equal.
    Le,
    /// Equal.
    Eq,
    /// Greater or equal.
    Ge,
    /// Greater than.
    Gt,
}

/// One condition of a class; a class matches when all its conditions do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// Matches everything (class 0's rule).
    Unclassified,
    /// Request size compared with a number of bytes (`request_size:le:131072`).
    RequestSize(Cmp, u64),
    /// The store marked the request as metadata (`metadata`).
    Metadata,
    /// The store marked the request as data (`data`).
    Data,
    /// The store's object class equals the number (`object_class:3`).
    ObjectClass(u8),
}

impl Condition {
    fn matches(&self, len_bytes: u64, hint: IoHint) -> bool {
        match *self {
            Self::Unclassified => true,
            Self::RequestSize(cmp, n) => match cmp {
                Cmp::Lt => len_bytes < n,
                Cmp::Le => len_bytes <= n,
                Cmp::Eq => len_bytes == n,
                Cmp::Ge => len_bytes >= n,
                Cmp::Gt => len_bytes > n,
            },
            Self::Metadata => hint.metadata,
            Self::Data => !hint.metadata,
            Self::ObjectClass(c) => hint.object_class == c,
        }
    }

    fn parse(text: &str) -> std::result::Result<Self, String> {
        let parts: Vec<&str> = text.trim().split(':').collect();
        match parts.as_slice() {
            ["unclassified"] => Ok(Self::Unclassified),
            ["metadata"] => Ok(Self::Metadata),
            ["data"] => Ok(Self::Data),
            ["object_class", n] => n
                .parse()
                .map(Self::ObjectClass)
                .map_err(|_| format!("object_class {n:?} is not 0..=255")),
            ["request_size", op, n] => {
                let cmp = match *op {
                    "lt" => Cmp::Lt,
                    "le" => Cmp::Le,
                    "eq" => Cmp::Eq,
                    "ge" => Cmp::Ge,
                    "gt" => Cmp::Gt,
                    _ => return Err(format!("unknown comparison {op:?}")),
                };
                n.parse()
                    .map(|v| Self::RequestSize(cmp, v))
                    .map_err(|_| format!("request size {n:?} is not a number"))
            }
            _ => Err(format!("unknown rule {text:?}")),
        }
    }
}

/// One I/O class.
#[derive(Debug, Clone, PartialEq)]
pub struct IoClass {
    /// Id, 0 ..= [`MAX_CLASS_ID`].
    pub id: u8,
    /// The name column as written (also the rule text, as in casadm).
    pub name: String,
    /// Conditions, all of which must match.
    pub conditions: Vec<Condition>,
    /// 0 (evicted last) ..= 255 (evicted first).
    pub eviction_priority: u8,
    /// Share of the cache this class may occupy, 0.0 ..= 1.0; 0 means never cached.
    pub allocation: f64,
}

/// A validated set of I/O classes.
#[derive(Debug, Clone, PartialEq)]
pub struct IoClassTable {
    classes: Vec<IoClass>,
    slots: [Option<usize>; CLASS_SLOTS],
    csv: String,
}

impl Default for IoClassTable {
    fn default() -> Self {
        let mut slots = [None; CLASS_SLOTS];
        slots[0] = Some(0);
        Self {
            classes: vec![IoClass {
                id: 0,
                name: "unclassified".into(),
                conditions: vec![Condition::Unclassified],
                eviction_priority: 255,
                allocation: 1.0,
            }],
            slots,
            csv: format!("{CSV_HEADER}\n0,unclassified,255,1\n"),
        }
    }
}

impl IoClassTable {
    /// Parses casadm's CSV format. The header must be present; blank lines are skipped; ids are
    /// unique; class 0 is `unclassified` and is added (priority 255, allocation 1) if missing.
    pub fn parse_csv(text: &str) -> Result<Self> {
        let err = |line: usize, reason: String| CacheError::IoClassCsv { line, reason };
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        match lines.next() {
            Some((_, h)) if h.trim() == CSV_HEADER => {}
            Some((i, h)) => {
                return Err(err(
                    i + 1,
                    format!("expected header {CSV_HEADER:?}, got {h:?}"),
                ))
            }
            None => return Err(err(1, "empty file".into())),
        }
        let mut classes: Vec<IoClass> = Vec::new();
        let mut slots = [None; CLASS_SLOTS];
        for (i, line) in lines {
            let n = i + 1;
            let cols: Vec<&str> = line.split(',').map(str::trim).collect();
            if cols.len() != 4 {
                return Err(err(n, format!("expected 4 columns, got {}", cols.len())));
            }
            let id: u8 = cols[0]
                .parse()
                .ok()
                .filter(|&v| v <= MAX_CLASS_ID)
                .ok_or_else(|| {
                    err(
                        n,
                        format!("class id {:?} is not 0..={MAX_CLASS_ID}", cols[0]),
                    )
                })?;
            if slots[id as usize].is_some() {
                return Err(err(n, format!("class id {id} defined twice")));
            }
            if cols[1].is_empty() {
                return Err(err(n, "empty class name".into()));
            }
            let conditions = cols[1]
                .split('&')
                .map(Condition::parse)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|r| err(n, r))?;
            if (id == 0) != conditions.contains(&Condition::Unclassified) {
                return Err(err(
                    n,
                    "class 0, and only class 0, is `unclassified`".into(),
                ));
            }
            let eviction_priority: u8 = cols[2]
                .parse()
                .map_err(|_| err(n, format!("eviction priority {:?} is not 0..=255", cols[2])))?;
            let allocation: f64 = cols[3]
                .parse()
                .ok()
                .filter(|a: &f64| (0.0..=1.0).contains(a))
                .ok_or_else(|| err(n, format!("allocation {:?} is not 0..=1", cols[3])))?;
            slots[id as usize] = Some(classes.len());
            classes.push(IoClass {
                id,
                name: cols[1].to_string(),
                conditions,
                eviction_priority,
                allocation,
            });
        }
        if slots[0].is_none() {
            classes.push(IoClass {
                id: 0,
                name: "unclassified".into(),
                conditions: vec![Condition::Unclassified],
                eviction_priority: 255,
                allocation: 1.0,
            });
        }
        classes.sort_by_key(|c| c.id);
        let mut slots = [None; CLASS_SLOTS];
        for (i, c) in classes.iter().enumerate() {
            slots[c.id as usize] = Some(i);
        }
        Ok(Self {
            classes,
            slots,
            csv: text.to_string(),
        })
    }

    /// The CSV text this table was parsed from (persisted in the superblock).
    pub fn csv(&self) -> &str {
        &self.csv
    }

    /// Classes in id order.
    pub fn classes(&self) -> &[IoClass] {
        &self.classes
    }

    /// The class with this id, if defined.
    pub fn get(&self, id: u8) -> Option<&IoClass> {
        self.slots
            .get(id as usize)
            .copied()
            .flatten()
            .map(|i| &self.classes[i])
    }

    /// The lowest-id class other than 0 whose conditions all match, else class 0.
    pub fn classify(&self, len_bytes: u64, hint: IoHint) -> u8 {
        self.classes
            .iter()
            .filter(|c| c.id != 0)
            .find(|c| c.conditions.iter().all(|r| r.matches(len_bytes, hint)))
            .map_or(0, |c| c.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = "IO class id,IO class name,Eviction priority,Allocation\n\
                        0,unclassified,22,0\n\
                        1,request_size:le:131072,1,1\n";

    #[test]
    fn seed_config_classifies_by_request_size() {
        let t = IoClassTable::parse_csv(SEED).unwrap();
        assert_eq!(t.classes().len(), 2);
        assert_eq!(t.classify(4096, IoHint::default()), 1);
        assert_eq!(t.classify(131072, IoHint::default()), 1);
        assert_eq!(t.classify(131072 + 4096, IoHint::default()), 0);
        assert_eq!(t.get(0).unwrap().allocation, 0.0);
        assert_eq!(t.get(1).unwrap().eviction_priority, 1);
        assert_eq!(t.csv(), SEED);
    }

    #[test]
    fn hints_and_conjunctions() {
        let csv = format!(
            "{CSV_HEADER}\n0,unclassified,100,1\n1,metadata,0,0.25\n\
             2,data&object_class:3&request_size:lt:65536,5,0.5\n"
        );
        let t = IoClassTable::parse_csv(&csv).unwrap();
        let md = IoHint {
            metadata: true,
            object_class: 3,
        };
        let d3 = IoHint {
            metadata: false,
            object_class: 3,
        };
        assert_eq!(t.classify(4096, md), 1);
        assert_eq!(t.classify(4096, d3), 2);
        assert_eq!(t.classify(65536, d3), 0);
        assert_eq!(t.classify(4096, IoHint::default()), 0);
        assert_eq!(t.get(1).unwrap().allocation, 0.25);
    }

    #[test]
    fn default_table_equals_its_parsed_csv() {
        let d = IoClassTable::default();
        assert_eq!(IoClassTable::parse_csv(d.csv()).unwrap(), d);
    }

    #[test]
    fn missing_class_zero_is_added() {
        let t =
            IoClassTable::parse_csv(&format!("{CSV_HEADER}\n3,request_size:gt:0,2,1\n")).unwrap();
        assert_eq!(t.get(0).unwrap().eviction_priority, 255);
        assert_eq!(t.classes()[0].id, 0);
    }

    #[test]
    fn malformed_files_name_the_line() {
        let cases = [
            ("", 1),
            ("id,name\n0,unclassified,1,1\n", 1),
            (&format!("{CSV_HEADER}\n0,unclassified,1\n") as &str, 2),
            (
                &format!("{CSV_HEADER}\n\n0,unclassified,1,1\n33,request_size:le:1,1,1\n"),
                4,
            ),
            (
                &format!("{CSV_HEADER}\n0,unclassified,1,1\n1,request_size:lte:4,1,1\n"),
                3,
            ),
            (
                &format!("{CSV_HEADER}\n0,unclassified,1,1\n1,request_size:le:x,1,1\n"),
                3,
            ),
            (
                &format!("{CSV_HEADER}\n0,unclassified,1,1\n1,colour:red,1,1\n"),
                3,
            ),
            (&format!("{CSV_HEADER}\n0,unclassified,256,1\n"), 2),
            (&format!("{CSV_HEADER}\n0,unclassified,1,1.5\n"), 2),
            (&format!("{CSV_HEADER}\n0,unclassified,1,-0.1\n"), 2),
            (
                &format!("{CSV_HEADER}\n0,unclassified,1,1\n0,unclassified,1,1\n"),
                3,
            ),
            (&format!("{CSV_HEADER}\n1,unclassified,1,1\n"), 2),
            (&format!("{CSV_HEADER}\n0,metadata,1,1\n"), 2),
            (&format!("{CSV_HEADER}\n0,unclassified,1,1\n2,,1,1\n"), 3),
        ];
        for (text, want) in cases {
            match IoClassTable::parse_csv(text) {
                Err(CacheError::IoClassCsv { line, .. }) => assert_eq!(line, want, "{text:?}"),
                other => panic!("{text:?} gave {other:?}"),
            }
        }
    }
}
