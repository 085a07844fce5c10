//! The frame decoder never panics on arbitrary bytes and never accepts corrupted frames.

use bytes::BytesMut;
use cairn_msgr::{Frame, Limits};
use proptest::prelude::*;

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        let mut buf = BytesMut::from(&data[..]);
        let limits = Limits { max_payload_bytes: 1024, ..Limits::default() };
        for _ in 0..4 {
            match Frame::decode(&mut buf, &limits) {
                Ok(Some(_)) => continue,
                _ => break,
            }
        }
    }

    #[test]
    fn any_single_bit_flip_is_caught(
        payload in prop::collection::vec(any::<u8>(), 0..512),
        data in prop::collection::vec(any::<u8>(), 0..512),
        bit in 0usize..8192,
    ) {
        let mut buf = BytesMut::new();
        Frame::with_data(5, payload.clone(), data.into())
            .encode(&Limits::default(), &mut buf)
            .unwrap();
        let bit = bit % (buf.len() * 8);
        buf[bit / 8] ^= 1 << (bit % 8);
        if let Ok(Some(f)) = Frame::decode(&mut buf, &Limits::default()) {
            prop_assert!(false, "corrupted frame accepted: {:?}", f.header);
        }
    }
}
