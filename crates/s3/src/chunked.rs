//! aws-chunked request bodies checked before s3s reads them: every chunk is buffered whole
//! (at most [`MAX_CHUNK_BYTES`]), its signature verified in constant time by
//! [`ChunkSigner`], and only then passed on to s3s byte for byte; the trailer and its
//! signature likewise. A body that fails stops at the last good chunk and records why, so the
//! server can answer SignatureDoesNotMatch and the operation stores nothing. Decodes nothing
//! for s3s (s3s still decodes the framing); owns no other request state.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures::Stream;
use hyper::body::Body as HttpBody;
use s3s::StdError;

use crate::sigv4::{AuthError, ChunkSigner};

/// Largest chunk payload accepted (clients send 64 KiB to 1 MiB).
pub const MAX_CHUNK_BYTES: u64 = 8 << 20;
/// Longest chunk header line (`size;chunk-signature=...`).
pub const MAX_CHUNK_LINE_BYTES: usize = 1024;
/// Largest trailer block.
pub const MAX_TRAILER_BYTES: usize = 16 << 10;

/// How the chunks of a body are signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkMode {
    /// Every chunk signed, no trailer (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`).
    Signed,
    /// Every chunk and the trailer signed (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`).
    SignedTrailer,
    /// Chunks unsigned, a trailer without signature (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`).
    UnsignedTrailer,
}

#[derive(Debug)]
enum State {
    Line,
    Data {
        line_len: usize,
        size: usize,
        signature: Option<String>,
    },
    Trailer,
    Done,
}

/// Incremental checker of one aws-chunked body.
#[derive(Debug)]
pub struct ChunkChecker {
    mode: ChunkMode,
    signer: ChunkSigner,
    decoded_len: u64,
    data_len: u64,
    buf: BytesMut,
    state: State,
}

fn bad(msg: impl Into<String>) -> AuthError {
    AuthError::Chunked(msg.into())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl ChunkChecker {
    /// A checker for a body of `decoded_len` payload bytes (`x-amz-decoded-content-length`)
    /// whose signatures chain from `signer`.
    pub fn new(mode: ChunkMode, signer: ChunkSigner, decoded_len: u64) -> Self {
        ChunkChecker {
            mode,
            signer,
            decoded_len,
            data_len: 0,
            buf: BytesMut::new(),
            state: State::Line,
        }
    }

    fn signed(&self) -> bool {
        self.mode != ChunkMode::UnsignedTrailer
    }

    /// Parses a chunk header line (without CRLF): size and, when signed, the signature.
    fn parse_line(&self, line: &[u8]) -> Result<(u64, Option<String>), AuthError> {
        let line = std::str::from_utf8(line).map_err(|_| bad("chunk header is not ASCII"))?;
        let (size, ext) = match line.split_once(';') {
            Some((s, e)) => (s, Some(e)),
            None => (line, None),
        };
        if size.is_empty() || size.len() > 16 {
            return Err(bad(format!("bad chunk size `{size}`")));
        }
        let size =
            u64::from_str_radix(size, 16).map_err(|_| bad(format!("bad chunk size `{size}`")))?;
        let signature = match (self.signed(), ext) {
            (true, Some(e)) => Some(
                e.strip_prefix("chunk-signature=")
                    .ok_or_else(|| bad(format!("bad chunk extension `{e}`")))?
                    .to_string(),
            ),
            (true, None) => return Err(bad("chunk without chunk-signature")),
            (false, None) => None,
            (false, Some(_)) => return Err(bad("signed chunk in an unsigned body")),
        };
        if size > MAX_CHUNK_BYTES {
            return Err(bad(format!(
                "chunk of {size} bytes exceeds {MAX_CHUNK_BYTES}"
            )));
        }
        if self.data_len + size > self.decoded_len {
            return Err(bad(format!(
                "chunks exceed x-amz-decoded-content-length {}",
                self.decoded_len
            )));
        }
        if size == 0 && self.data_len != self.decoded_len {
            return Err(bad(format!(
                "body ended after {} of {} bytes",
                self.data_len, self.decoded_len
            )));
        }
        Ok((size, signature))
    }

    /// Checks the trailer block (lines up to and including the empty line).
    fn check_trailer(&mut self, block: &[u8]) -> Result<(), AuthError> {
        let text = std::str::from_utf8(block).map_err(|_| bad("trailer is not UTF-8"))?;
        let mut entries = Vec::new();
        let mut signature = None;
        for line in text.split("\r\n").filter(|l| !l.is_empty()) {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| bad(format!("bad trailer line `{line}`")))?;
            let name = name.trim().to_ascii_lowercase();
            let value = value.trim().to_string();
            if name == "x-amz-trailer-signature" {
                if signature.replace(value).is_some() {
                    return Err(bad("two trailer signatures"));
                }
            } else {
                entries.push((name, value));
            }
        }
        entries.sort();
        let canonical: String = entries.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
        match (self.signed(), signature) {
            (true, Some(sig)) => self.signer.verify_trailer(canonical.as_bytes(), &sig),
            (true, None) => Err(bad("signed trailer without x-amz-trailer-signature")),
            (false, None) => Ok(()),
            (false, Some(_)) => Err(bad("trailer signature in an unsigned body")),
        }
    }

    /// Feeds body bytes; returns the bytes now verified, to be passed on unchanged.
    pub fn feed(&mut self, data: &[u8]) -> Result<Vec<Bytes>, AuthError> {
        self.buf.extend_from_slice(data);
        let mut out = Vec::new();
        loop {
            match &self.state {
                State::Line => {
                    let Some(end) = find(
                        &self.buf[..self.buf.len().min(MAX_CHUNK_LINE_BYTES + 2)],
                        b"\r\n",
                    ) else {
                        if self.buf.len() > MAX_CHUNK_LINE_BYTES {
                            return Err(bad("chunk header line too long"));
                        }
                        break;
                    };
                    let (size, signature) = self.parse_line(&self.buf[..end])?;
                    let line_len = end + 2;
                    if size == 0 && self.mode != ChunkMode::Signed {
                        if let Some(sig) = &signature {
                            self.signer.verify_chunk(&[], sig)?;
                        }
                        out.push(self.buf.split_to(line_len).freeze());
                        self.state = State::Trailer;
                    } else {
                        let size = usize::try_from(size)
                            .map_err(|_| bad(format!("chunk of {size} bytes is too large")))?;
                        self.state = State::Data {
                            line_len,
                            size,
                            signature,
                        };
                    }
                }
                State::Data {
                    line_len,
                    size,
                    signature,
                } => {
                    let (line_len, size) = (*line_len, *size);
                    let need = line_len + size + 2;
                    if self.buf.len() < need {
                        break;
                    }
                    if &self.buf[line_len + size..need] != b"\r\n" {
                        return Err(bad("chunk data not followed by CRLF"));
                    }
                    if let Some(sig) = signature.clone() {
                        self.signer
                            .verify_chunk(&self.buf[line_len..line_len + size], &sig)?;
                    }
                    self.data_len += size as u64;
                    out.push(self.buf.split_to(need).freeze());
                    self.state = if size == 0 { State::Done } else { State::Line };
                }
                State::Trailer => {
                    let window = &self.buf[..self.buf.len().min(MAX_TRAILER_BYTES)];
                    let end = if window.starts_with(b"\r\n") {
                        Some(2)
                    } else {
                        find(window, b"\r\n\r\n").map(|p| p + 4)
                    };
                    let Some(end) = end else {
                        if self.buf.len() >= MAX_TRAILER_BYTES {
                            return Err(bad("trailer too long"));
                        }
                        break;
                    };
                    let block = self.buf.split_to(end).freeze();
                    self.check_trailer(&block)?;
                    out.push(block);
                    self.state = State::Done;
                }
                State::Done => {
                    if !self.buf.is_empty() {
                        return Err(bad("data after the final chunk"));
                    }
                    break;
                }
            }
        }
        Ok(out)
    }

    /// The body ended: Ok only if it was complete.
    pub fn finish(&self) -> Result<(), AuthError> {
        match self.state {
            State::Done => Ok(()),
            _ => Err(bad(format!(
                "body ended early after {} of {} bytes",
                self.data_len, self.decoded_len
            ))),
        }
    }
}

/// A request body passed through a [`ChunkChecker`]: yields only verified bytes; on the
/// first failure yields the error and records it in the shared cell.
pub struct CheckedBody<B> {
    inner: B,
    checker: ChunkChecker,
    ready: VecDeque<Bytes>,
    failure: Arc<OnceLock<AuthError>>,
    ended: bool,
}

impl<B> CheckedBody<B> {
    /// Checks `inner`; a failure is also stored in `failure`.
    pub fn new(inner: B, checker: ChunkChecker, failure: Arc<OnceLock<AuthError>>) -> Self {
        CheckedBody {
            inner,
            checker,
            ready: VecDeque::new(),
            failure,
            ended: false,
        }
    }

    fn fail(&mut self, e: AuthError) -> Poll<Option<Result<Bytes, StdError>>> {
        self.ended = true;
        self.ready.clear();
        let _ = self.failure.set(e.clone());
        Poll::Ready(Some(Err(Box::new(e))))
    }
}

impl<B> Stream for CheckedBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<StdError>,
{
    type Item = Result<Bytes, StdError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(b) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(b)));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        match this.checker.feed(&data) {
                            Ok(v) => this.ready.extend(v),
                            Err(e) => return this.fail(e),
                        }
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(e.into())));
                }
                Poll::Ready(None) => {
                    this.ended = true;
                    if let Err(e) = this.checker.finish() {
                        return this.fail(e);
                    }
                }
            }
        }
    }
}

impl<B> s3s::stream::ByteStream for CheckedBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<StdError>,
{
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sigv4::tests::{headers, AK, SECRET};
    use crate::sigv4::{hex, hmac_sha256, parse, sha256_hex, signing_key, Signed, EMPTY_SHA256};
    use hyper::http::{Method, Uri};

    const SEED: &str = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";

    /// AWS's documented aws-chunked example: 64 KiB + 1 KiB of `a`, three chunk signatures.
    fn example_signer() -> ChunkSigner {
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request,SignedHeaders=\
             content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;\
             x-amz-decoded-content-length;x-amz-storage-class,Signature={SEED}"
        );
        let h = headers(&[
            ("host", "s3.amazonaws.com"),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ("authorization", &auth),
            ("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", "66560"),
            ("content-length", "66824"),
        ]);
        let uri: Uri = "/examplebucket/chunkObject.txt".parse().unwrap();
        let Signed::V4(sig) = parse(&Method::PUT, &uri, &h).unwrap() else {
            panic!("unsigned")
        };
        sig.verify(&Method::PUT, &uri, &h, SECRET).unwrap()
    }

    fn example_body() -> Vec<u8> {
        let mut b = Vec::new();
        for (size, sig) in [
            (
                65536,
                "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
            ),
            (
                1024,
                "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
            ),
            (
                0,
                "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
            ),
        ] {
            b.extend_from_slice(format!("{size:x};chunk-signature={sig}\r\n").as_bytes());
            b.extend(std::iter::repeat_n(b'a', size));
            b.extend_from_slice(b"\r\n");
        }
        b
    }

    /// Feeds `body` in `step`-byte pieces; (bytes passed on, result).
    fn run(mut c: ChunkChecker, body: &[u8], step: usize) -> (Vec<u8>, Result<(), AuthError>) {
        let mut out = Vec::new();
        for piece in body.chunks(step) {
            match c.feed(piece) {
                Ok(v) => v.iter().for_each(|b| out.extend_from_slice(b)),
                Err(e) => return (out, Err(e)),
            }
        }
        let r = c.finish();
        (out, r)
    }

    #[test]
    fn aws_chunked_example_passes_unchanged_in_any_pieces() {
        let body = example_body();
        assert_eq!(body.len(), 66824);
        for step in [1, 7, 4096, body.len()] {
            let (out, r) = run(
                ChunkChecker::new(ChunkMode::Signed, example_signer(), 66560),
                &body,
                step,
            );
            r.unwrap();
            assert_eq!(out, body, "step {step}");
        }
    }

    #[test]
    fn tampered_chunks_are_refused_before_they_pass() {
        let body = example_body();
        let first_chunk_end = 88 + 65536 + 2;
        // A data byte of the second chunk changed: only the first chunk passes.
        let mut data = body.clone();
        data[first_chunk_end + 90] = b'b';
        let (out, r) = run(
            ChunkChecker::new(ChunkMode::Signed, example_signer(), 66560),
            &data,
            1000,
        );
        assert_eq!(r.unwrap_err(), AuthError::SignatureMismatch);
        assert!(out == body[..first_chunk_end], "{} bytes passed", out.len());
        // A chunk signature of the right length, one hex digit changed.
        let mut sig = body.clone();
        let at = body.windows(5).position(|w| w == b"00556").unwrap();
        sig[at] = b'1';
        let (out, r) = run(
            ChunkChecker::new(ChunkMode::Signed, example_signer(), 66560),
            &sig,
            1000,
        );
        assert_eq!(r.unwrap_err(), AuthError::SignatureMismatch);
        assert!(out == body[..first_chunk_end], "{} bytes passed", out.len());
        // The chunks of another upload (another seed) do not verify.
        let mut first = body.clone();
        first[0..5].copy_from_slice(b"10000");
        first[30] ^= 1;
        let (out, r) = run(
            ChunkChecker::new(ChunkMode::Signed, example_signer(), 66560),
            &first,
            1 << 20,
        );
        assert!(r.is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn malformed_bodies_are_refused() {
        let body = example_body();
        let fresh = || ChunkChecker::new(ChunkMode::Signed, example_signer(), 66560);
        let (_, r) = run(fresh(), &body[..body.len() - 3], 999);
        assert!(matches!(r, Err(AuthError::Chunked(_))), "truncated: {r:?}");
        let mut extra = body.clone();
        extra.extend_from_slice(b"0\r\n");
        assert!(matches!(
            run(fresh(), &extra, 999).1,
            Err(AuthError::Chunked(_))
        ));
        let short = ChunkChecker::new(ChunkMode::Signed, example_signer(), 66559);
        assert!(matches!(
            run(short, &body, 999).1,
            Err(AuthError::Chunked(_))
        ));
        let long = ChunkChecker::new(ChunkMode::Signed, example_signer(), 66561);
        assert!(matches!(
            run(long, &body, 999).1,
            Err(AuthError::Chunked(_))
        ));
        let huge = format!(
            "{:x};chunk-signature={}\r\n",
            MAX_CHUNK_BYTES + 1,
            "0".repeat(64)
        );
        let big = ChunkChecker::new(ChunkMode::Signed, example_signer(), u64::MAX / 2);
        assert!(matches!(
            run(big, huge.as_bytes(), 999).1,
            Err(AuthError::Chunked(_))
        ));
        let endless = vec![b'1'; MAX_CHUNK_LINE_BYTES + 10];
        assert!(matches!(
            run(fresh(), &endless, 999).1,
            Err(AuthError::Chunked(_))
        ));
        let unsigned = b"10000\r\n";
        assert!(matches!(
            run(fresh(), unsigned, 999).1,
            Err(AuthError::Chunked(_))
        ));
    }

    /// Signs a trailer the way a client does, independently of `ChunkSigner`.
    fn client_trailer_signature(prev: &str, canonical: &str) -> String {
        let key = signing_key(SECRET, "20130524", "us-east-1", "s3");
        let sts = format!(
            "AWS4-HMAC-SHA256-TRAILER\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n{prev}\n{}",
            sha256_hex(canonical.as_bytes())
        );
        hex(&hmac_sha256(&key, sts.as_bytes()))
    }

    fn client_chunk_signature(prev: &str, data: &[u8]) -> String {
        let key = signing_key(SECRET, "20130524", "us-east-1", "s3");
        let sts = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n{prev}\n{EMPTY_SHA256}\n{}",
            sha256_hex(data)
        );
        hex(&hmac_sha256(&key, sts.as_bytes()))
    }

    #[test]
    fn signed_trailer_is_verified() {
        let data = b"hello trailer";
        let s1 = client_chunk_signature(SEED, data);
        let s0 = client_chunk_signature(&s1, b"");
        let ts = client_trailer_signature(&s0, "x-amz-checksum-crc32:ABCDEF==\n");
        let body = |crc: &str, sig: &str| {
            format!(
                "d;chunk-signature={s1}\r\nhello trailer\r\n0;chunk-signature={s0}\r\n\
                 x-amz-checksum-crc32:{crc}\r\nx-amz-trailer-signature:{sig}\r\n\r\n"
            )
        };
        let fresh = || ChunkChecker::new(ChunkMode::SignedTrailer, example_signer(), 13);
        let good = body("ABCDEF==", &ts);
        let (out, r) = run(fresh(), good.as_bytes(), 5);
        r.unwrap();
        assert_eq!(out, good.as_bytes());
        let (_, r) = run(fresh(), body("ABCDEG==", &ts).as_bytes(), 5);
        assert_eq!(
            r.unwrap_err(),
            AuthError::SignatureMismatch,
            "changed checksum"
        );
        let (_, r) = run(
            fresh(),
            body("ABCDEF==", &format!("{}0", &ts[..63])).as_bytes(),
            5,
        );
        assert!(r.is_err(), "changed trailer signature");
        let unsigned_trailer = format!(
            "d;chunk-signature={s1}\r\nhello trailer\r\n0;chunk-signature={s0}\r\nx-amz-checksum-crc32:ABCDEF==\r\n\r\n"
        );
        let (_, r) = run(fresh(), unsigned_trailer.as_bytes(), 5);
        assert!(
            matches!(r, Err(AuthError::Chunked(_))),
            "signature required"
        );
    }

    #[test]
    fn unsigned_trailer_body_passes_and_refuses_signatures() {
        let good = "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\n\r\n";
        let fresh = || ChunkChecker::new(ChunkMode::UnsignedTrailer, example_signer(), 5);
        let (out, r) = run(fresh(), good.as_bytes(), 3);
        r.unwrap();
        assert_eq!(out, good.as_bytes());
        let with_sig = format!("5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\nx-amz-trailer-signature:{SEED}\r\n\r\n");
        assert!(run(fresh(), with_sig.as_bytes(), 3).1.is_err());
        let signed_chunk = format!("5;chunk-signature={SEED}\r\nhello\r\n0\r\n\r\n");
        assert!(run(fresh(), signed_chunk.as_bytes(), 3).1.is_err());
    }
}
