//! Storage classes: STANDARD is the gateway's own pool; every other class the operator
//! configures (`storage_classes`, e.g. `COLD = "s3-cold"`) is another pool of the cluster,
//! which holds the data of the objects written to that class or moved there by a lifecycle
//! transition (`transition`). Indexes, uploads' records and bucket records always stay in the
//! gateway's pool; inline objects of a class other than STANDARD are not inlined, so that
//! their bytes really live in the class's pool.

use std::collections::BTreeMap;

use s3s::{s3_error, S3Result};

/// The class every object has unless it names another: the gateway's own pool.
pub const STANDARD: &str = "STANDARD";
/// Most classes besides STANDARD.
pub const MAX_CLASSES: usize = 16;
/// Longest class name.
pub const MAX_NAME_CHARS: usize = 32;

/// Whether `name` is a class name the gateway accepts in its settings: upper-case letters,
/// digits and `_`, as AWS's own class names are.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_CHARS
        && name
            .bytes()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
}

/// Checks the configured classes: valid names other than STANDARD, a pool each, at most
/// [`MAX_CLASSES`]; the reason otherwise.
pub fn check_classes(classes: &BTreeMap<String, String>) -> Result<(), String> {
    if classes.len() > MAX_CLASSES {
        return Err(format!("storage_classes: at most {MAX_CLASSES} classes"));
    }
    for (name, pool) in classes {
        if !valid_name(name) || name == STANDARD {
            return Err(format!(
                "storage_classes: `{name}` is not a class name (A-Z, 0-9 and _, at most \
                 {MAX_NAME_CHARS}, not {STANDARD})"
            ));
        }
        if pool.is_empty() {
            return Err(format!("storage_classes: class {name} needs a pool"));
        }
    }
    Ok(())
}

/// The class a request names, as an entry records it: None for STANDARD (or none named),
/// `Some(name)` for a configured class among `known`; InvalidStorageClass for any other.
pub fn requested<'a>(
    named: Option<&str>,
    mut known: impl Iterator<Item = &'a String>,
) -> S3Result<Option<String>> {
    match named {
        None | Some(STANDARD) => Ok(None),
        Some(name) if known.any(|k| k == name) => Ok(Some(name.to_string())),
        Some(name) => Err(s3_error!(
            InvalidStorageClass,
            "the storage class `{name}` is not one this gateway stores"
        )),
    }
}

/// The name of the class an entry records (None: STANDARD).
pub fn name_of(class: Option<&str>) -> &str {
    class.unwrap_or(STANDARD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_requests() {
        assert!(valid_name("COLD") && valid_name("STANDARD_IA") && valid_name("T2"));
        for bad in ["", "cold", "A-B", "A B", &"X".repeat(MAX_NAME_CHARS + 1)] {
            assert!(!valid_name(bad), "{bad}");
        }
        let known = ["COLD".to_string()];
        assert_eq!(requested(None, known.iter()).unwrap(), None);
        assert_eq!(requested(Some("STANDARD"), known.iter()).unwrap(), None);
        assert_eq!(
            requested(Some("COLD"), known.iter()).unwrap(),
            Some("COLD".into())
        );
        let err = requested(Some("GLACIER"), known.iter()).unwrap_err();
        assert_eq!(*err.code(), s3s::S3ErrorCode::InvalidStorageClass);
        let many: BTreeMap<String, String> = (0..=MAX_CLASSES)
            .map(|i| (format!("C{i}"), format!("p{i}")))
            .collect();
        assert!(check_classes(&many).is_err());
        assert_eq!(name_of(None), STANDARD);
    }
}
