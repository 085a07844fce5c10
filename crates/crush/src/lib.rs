//! CRUSH.
