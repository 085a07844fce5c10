//! File layouts and the virtual extended attributes that show and set them, named as CephFS
//! names them (`ceph.file.layout.object_size`, `ceph.dir.layout`...), so that the scripts and
//! tools operators already use with CephFS (`setfattr`, `getfattr`) work unchanged.
//!
//! A layout here is one object size: a file's bytes go to consecutive objects of that size
//! (CephFS's layout with `stripe_count=1` and `stripe_unit` equal to the object size). A
//! directory may carry a layout of its own; a new file takes the layout of its nearest
//! ancestor that has one, the root always having one. A file's layout may change only while
//! it holds no data (ENOTEMPTY otherwise, as CephFS answers).

/// Names under this prefix are the file system's own, never stored as extended attributes.
pub const VIRTUAL_PREFIX: &[u8] = b"ceph.";
/// Smallest object size, and what every object size is a multiple of (CephFS's 64 KiB
/// stripe-unit granularity).
pub const MIN_OBJECT_SIZE: u32 = 64 << 10;
/// Largest object size: the OSDs' default largest object (`osd_max_object_size`).
pub const MAX_OBJECT_SIZE: u32 = 32 << 20;

/// Which inode a virtual attribute belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `ceph.file.*`: a regular file's own layout.
    File,
    /// `ceph.dir.*`: a directory's layout, inherited by what is created under it.
    Dir,
}

/// One field of a layout, or the whole of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// `ceph.X.layout`: every field as `key=value` pairs.
    Whole,
    /// `ceph.X.layout.object_size`.
    ObjectSize,
    /// `ceph.X.layout.stripe_unit` (always the object size here).
    StripeUnit,
    /// `ceph.X.layout.stripe_count` (always 1 here).
    StripeCount,
    /// `ceph.X.layout.pool` (the file system's data pool).
    Pool,
}

/// A virtual attribute's meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Virtual {
    /// A layout field.
    Layout(Scope, Field),
    /// `ceph.dir.entries`: entries in a directory.
    DirEntries,
    /// `ceph.dir.files`: entries that are not directories.
    DirFiles,
    /// `ceph.dir.subdirs`: entries that are directories.
    DirSubdirs,
}

/// Whether `name` is a virtual attribute's name (reserved, never stored).
pub fn is_virtual(name: &[u8]) -> bool {
    name.starts_with(VIRTUAL_PREFIX)
}

/// The virtual attribute `name` is, if any (`None`: a reserved name with no meaning, which
/// reads as absent and cannot be set).
pub fn parse_name(name: &[u8]) -> Option<Virtual> {
    let rest = name.strip_prefix(VIRTUAL_PREFIX)?;
    let rest = std::str::from_utf8(rest).ok()?;
    match rest {
        "dir.entries" => return Some(Virtual::DirEntries),
        "dir.files" => return Some(Virtual::DirFiles),
        "dir.subdirs" => return Some(Virtual::DirSubdirs),
        _ => {}
    }
    let (scope, field) = rest.split_once(".layout")?;
    let scope = match scope {
        "file" => Scope::File,
        "dir" => Scope::Dir,
        _ => return None,
    };
    let field = match field {
        "" => Field::Whole,
        ".object_size" => Field::ObjectSize,
        ".stripe_unit" => Field::StripeUnit,
        ".stripe_count" => Field::StripeCount,
        ".pool" => Field::Pool,
        _ => return None,
    };
    Some(Virtual::Layout(scope, field))
}

/// How `field` of a layout of `object_size` in `pool` reads.
pub fn show(field: Field, object_size: u32, pool: &str) -> Vec<u8> {
    let text = match field {
        Field::Whole => format!(
            "stripe_unit={object_size} stripe_count=1 object_size={object_size} pool={pool}"
        ),
        Field::ObjectSize | Field::StripeUnit => object_size.to_string(),
        Field::StripeCount => "1".to_string(),
        Field::Pool => pool.to_string(),
    };
    text.into_bytes()
}

/// Checks an object size: a multiple of [`MIN_OBJECT_SIZE`] up to [`MAX_OBJECT_SIZE`].
pub fn check_object_size(object_size: u32) -> Result<u32, i32> {
    let fits = (MIN_OBJECT_SIZE..=MAX_OBJECT_SIZE).contains(&object_size);
    match fits && object_size.is_multiple_of(MIN_OBJECT_SIZE) {
        true => Ok(object_size),
        false => Err(libc::EINVAL),
    }
}

/// The object size a layout becomes when `field` is set to `value`, from `current` (EINVAL
/// for a value this layout cannot take: another pool, several stripes, a stripe unit other
/// than the object size, a malformed number).
pub fn assign(field: Field, value: &[u8], current: u32, pool: &str) -> Result<u32, i32> {
    let text = std::str::from_utf8(value)
        .map_err(|_| libc::EINVAL)?
        .trim_end_matches('\0')
        .trim();
    match field {
        Field::Whole => {
            let mut object_size = None;
            let mut stripe_unit = None;
            let mut rest = Vec::new();
            for pair in text.split_whitespace() {
                let (key, v) = pair.split_once('=').ok_or(libc::EINVAL)?;
                match key {
                    "object_size" => object_size = Some(number(v)?),
                    "stripe_unit" => stripe_unit = Some(number(v)?),
                    "stripe_count" => rest.push((Field::StripeCount, v)),
                    "pool" => rest.push((Field::Pool, v)),
                    _ => return Err(libc::EINVAL),
                }
            }
            for (f, v) in rest {
                assign(f, v.as_bytes(), current, pool)?;
            }
            let size = object_size.or(stripe_unit).unwrap_or(current);
            if stripe_unit.is_some_and(|u| u != size) {
                return Err(libc::EINVAL);
            }
            check_object_size(size)
        }
        Field::ObjectSize | Field::StripeUnit => check_object_size(number(text)?),
        Field::StripeCount => match number(text)? {
            1 => Ok(current),
            _ => Err(libc::EINVAL),
        },
        Field::Pool => match text == pool {
            true => Ok(current),
            false => Err(libc::EINVAL),
        },
    }
}

fn number(text: &str) -> Result<u32, i32> {
    text.parse().map_err(|_| libc::EINVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_as_cephfs_names_them() {
        assert_eq!(
            parse_name(b"ceph.file.layout.object_size"),
            Some(Virtual::Layout(Scope::File, Field::ObjectSize))
        );
        assert_eq!(
            parse_name(b"ceph.dir.layout"),
            Some(Virtual::Layout(Scope::Dir, Field::Whole))
        );
        assert_eq!(parse_name(b"ceph.dir.entries"), Some(Virtual::DirEntries));
        assert_eq!(parse_name(b"ceph.dir.layout.bogus"), None);
        assert_eq!(parse_name(b"ceph.other"), None);
        assert_eq!(parse_name(b"user.ceph.dir.layout"), None);
        assert!(is_virtual(b"ceph.anything"));
        assert!(!is_virtual(b"user.x"));
    }

    #[test]
    fn object_sizes_are_64k_multiples_within_bounds() {
        assert_eq!(check_object_size(1 << 20), Ok(1 << 20));
        assert_eq!(check_object_size(64 << 10), Ok(64 << 10));
        assert_eq!(check_object_size(32 << 20), Ok(32 << 20));
        assert_eq!(check_object_size(0), Err(libc::EINVAL));
        assert_eq!(check_object_size(4096), Err(libc::EINVAL));
        assert_eq!(check_object_size((1 << 20) + 4096), Err(libc::EINVAL));
        assert_eq!(check_object_size(64 << 20), Err(libc::EINVAL));
    }

    #[test]
    fn whole_layouts_set_and_show() {
        let pool = "fs.data";
        assert_eq!(
            show(Field::Whole, 1 << 20, pool),
            b"stripe_unit=1048576 stripe_count=1 object_size=1048576 pool=fs.data".to_vec()
        );
        let shown = show(Field::Whole, 1 << 20, pool);
        assert_eq!(assign(Field::Whole, &shown, 4 << 20, pool), Ok(1 << 20));
        assert_eq!(
            assign(Field::Whole, b"object_size=2097152", 4 << 20, pool),
            Ok(2 << 20)
        );
        assert_eq!(
            assign(
                Field::Whole,
                b"stripe_unit=65536 object_size=1048576",
                4 << 20,
                pool
            ),
            Err(libc::EINVAL),
            "striping over several objects is not built"
        );
        assert_eq!(
            assign(Field::Whole, b"stripe_count=2", 4 << 20, pool),
            Err(libc::EINVAL)
        );
        assert_eq!(
            assign(Field::Whole, b"pool=other", 4 << 20, pool),
            Err(libc::EINVAL)
        );
        assert_eq!(
            assign(Field::Whole, b"colour=blue", 4 << 20, pool),
            Err(libc::EINVAL)
        );
        assert_eq!(
            assign(Field::Whole, b"object_size", 4 << 20, pool),
            Err(libc::EINVAL)
        );
    }

    #[test]
    fn fields_set_one_at_a_time() {
        let pool = "p";
        assert_eq!(
            assign(Field::ObjectSize, b"8388608", 4 << 20, pool),
            Ok(8 << 20)
        );
        assert_eq!(
            assign(Field::StripeUnit, b"131072", 4 << 20, pool),
            Ok(128 << 10)
        );
        assert_eq!(assign(Field::StripeCount, b"1", 4 << 20, pool), Ok(4 << 20));
        assert_eq!(assign(Field::Pool, b"p", 4 << 20, pool), Ok(4 << 20));
        assert_eq!(
            assign(Field::ObjectSize, b"-1", 4 << 20, pool),
            Err(libc::EINVAL)
        );
        assert_eq!(
            assign(Field::ObjectSize, b"\xff", 4 << 20, pool),
            Err(libc::EINVAL)
        );
    }
}
