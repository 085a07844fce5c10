//! Block images over the cluster, as Ceph's RBD lays them out: an image is a header object
//! (`rbd_header.NAME`: its size and object size, versioned and checksummed) and data objects
//! (`rbd_data.NAME.INDEX`, one per `object_size` bytes of the image, created by their first
//! write: an image is sparse and unwritten ranges read as zeros), listed in the pool's
//! `rbd_directory` object's omap. [`nbd`] exports an image over the NBD protocol, on a TCP
//! address or a unix socket ([`listen`]), so that fio, qemu, nbdcopy or a kernel's nbd client
//! use it as a disk.

// Narrowing conversions are checked (`try_from`): a cast would silently write a wrong length
// or offset.
#![deny(clippy::cast_possible_truncation)]

pub mod clone;
pub mod cow;
pub mod error;
pub mod header;
pub mod image;
pub mod listen;
pub mod lock;
pub mod nbd;
pub mod requests;
pub mod snapshot;

pub use error::RbdError;
pub use image::Image;
