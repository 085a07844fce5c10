//! Where the messenger's bytes travel: TCP sockets from the kernel, or — with the `sim`
//! feature, inside a `turmoil` simulation — the simulator's in-memory network, whose links
//! can be delayed, cut and partitioned under a seed. The choice is made per call: code running
//! as a simulated host gets the simulated network, everything else real sockets, so the same
//! daemons run unchanged in both.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// True when the caller runs inside a network simulation (its sockets are the simulator's).
pub fn simulated() -> bool {
    #[cfg(feature = "sim")]
    {
        turmoil::in_simulation()
    }
    #[cfg(not(feature = "sim"))]
    {
        false
    }
}

/// A connected stream, not yet split.
pub enum Stream {
    /// A kernel TCP socket.
    Tcp(tokio::net::TcpStream),
    /// A simulated connection.
    #[cfg(feature = "sim")]
    Sim(turmoil::net::TcpStream),
}

/// The reading half of a [`Stream`].
pub enum ReadHalf {
    /// Of a kernel TCP socket.
    Tcp(tokio::net::tcp::OwnedReadHalf),
    /// Of a simulated connection.
    #[cfg(feature = "sim")]
    Sim(turmoil::net::tcp::OwnedReadHalf),
}

/// The writing half of a [`Stream`].
pub enum WriteHalf {
    /// Of a kernel TCP socket.
    Tcp(tokio::net::tcp::OwnedWriteHalf),
    /// Of a simulated connection.
    #[cfg(feature = "sim")]
    Sim(turmoil::net::tcp::OwnedWriteHalf),
}

impl Stream {
    /// Connects to `addr` over the caller's network.
    pub async fn connect(addr: SocketAddr) -> io::Result<Stream> {
        #[cfg(feature = "sim")]
        if simulated() {
            return Ok(Stream::Sim(turmoil::net::TcpStream::connect(addr).await?));
        }
        Ok(Stream::Tcp(tokio::net::TcpStream::connect(addr).await?))
    }

    /// Splits the stream into halves owned by a reader and a writer; small frames go out at
    /// once (Nagle off) on real sockets.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Tcp(s) => {
                let _ = s.set_nodelay(true);
                let (r, w) = s.into_split();
                (ReadHalf::Tcp(r), WriteHalf::Tcp(w))
            }
            #[cfg(feature = "sim")]
            Stream::Sim(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Sim(r), WriteHalf::Sim(w))
            }
        }
    }
}

impl From<tokio::net::TcpStream> for Stream {
    fn from(s: tokio::net::TcpStream) -> Self {
        Stream::Tcp(s)
    }
}

/// A bound listening socket on the caller's network.
pub enum Listener {
    /// A kernel TCP listener.
    Tcp(tokio::net::TcpListener),
    /// A simulated listener, and the address it answers as: a simulated host binds its
    /// wildcard address, and the caller's own address stands for it.
    #[cfg(feature = "sim")]
    Sim(turmoil::net::TcpListener, std::net::IpAddr),
}

impl Listener {
    /// Binds `addr` (port 0: an ephemeral port).
    pub async fn bind(addr: SocketAddr) -> io::Result<Listener> {
        #[cfg(feature = "sim")]
        if simulated() {
            let wildcard = SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), addr.port());
            let listener = turmoil::net::TcpListener::bind(wildcard).await?;
            return Ok(Listener::Sim(listener, addr.ip()));
        }
        Ok(Listener::Tcp(tokio::net::TcpListener::bind(addr).await?))
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr(),
            #[cfg(feature = "sim")]
            Listener::Sim(l, ip) => Ok(SocketAddr::new(*ip, l.local_addr()?.port())),
        }
    }

    /// The next connection and its peer's address.
    pub async fn accept(&self) -> io::Result<(Stream, SocketAddr)> {
        match self {
            Listener::Tcp(l) => l.accept().await.map(|(s, a)| (Stream::Tcp(s), a)),
            #[cfg(feature = "sim")]
            Listener::Sim(l, _) => l.accept().await.map(|(s, a)| (Stream::Sim(s), a)),
        }
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Tcp(r) => Pin::new(r).poll_read(cx, buf),
            #[cfg(feature = "sim")]
            ReadHalf::Sim(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            #[cfg(feature = "sim")]
            WriteHalf::Sim(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Tcp(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            #[cfg(feature = "sim")]
            WriteHalf::Sim(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            WriteHalf::Tcp(w) => w.is_write_vectored(),
            #[cfg(feature = "sim")]
            WriteHalf::Sim(w) => w.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(w) => Pin::new(w).poll_flush(cx),
            #[cfg(feature = "sim")]
            WriteHalf::Sim(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            #[cfg(feature = "sim")]
            WriteHalf::Sim(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}
