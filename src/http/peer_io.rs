//! One HTTP connection's socket as hyper sees it: closed when no byte moves either way for the
//! stall timeout while it waits on its peer (a body that stopped coming, a response nobody
//! reads), and on close drained for a moment before the descriptor goes (nginx's lingering
//! close) so a client still sending its body reads our answer instead of a reset. It holds the
//! connection's admission ticket until the descriptor is closed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::admission::Ticket;

/// How long a closing connection's unread input is drained, and how much of it at most.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1024 * 1024;

pub struct PeerIo {
    /// `None` only once dropped into the lingering task.
    stream: Option<TcpStream>,
    stall: Duration,
    timer: Pin<Box<Sleep>>,
    /// The timer runs: something is pending and nothing has moved since it started.
    armed: bool,
    ticket: Option<Ticket>,
}

impl PeerIo {
    pub fn new(stream: TcpStream, stall: Duration, ticket: Ticket) -> PeerIo {
        PeerIo {
            stream: Some(stream),
            stall,
            timer: Box::pin(tokio::time::sleep(stall)),
            armed: false,
            ticket: Some(ticket),
        }
    }

    fn stream(&mut self) -> Pin<&mut TcpStream> {
        Pin::new(self.stream.as_mut().expect("present until dropped"))
    }

    /// Bytes moved: the stall clock stops.
    fn moved(&mut self) {
        self.armed = false;
    }

    /// A write's outcome: bytes out stop the stall clock, a pending write runs it.
    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(r) => {
                if matches!(r, Ok(n) if n > 0) {
                    self.moved();
                }
                Poll::Ready(r)
            }
            Poll::Pending => self.waiting(cx).map(Err),
        }
    }

    /// Nothing moved: start the clock if it is not running, and fail once it has run out.
    fn waiting(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if !self.armed {
            self.armed = true;
            let at = Instant::now() + self.stall;
            self.timer.as_mut().reset(at);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no byte moved for {:?}", self.stall),
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for PeerIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match self.stream().poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    self.moved();
                }
                Poll::Ready(r)
            }
            Poll::Pending => self.waiting(cx).map(Err),
        }
    }
}

impl AsyncWrite for PeerIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = self.stream().poll_write(cx, buf);
        self.wrote(cx, written)
    }

    // Forwarded so that hyper queues a response's body beside its head and sends both with one
    // writev: without it hyper copies every body (a part, a segment) into its own buffer first,
    // which at 2 000 viewers was an eighth of the daemon's CPU.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = self.stream().poll_write_vectored(cx, bufs);
        self.wrote(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.stream().poll_flush(cx) {
            Poll::Pending => self.waiting(cx).map(Err),
            ready => ready,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.stream().poll_shutdown(cx) {
            Poll::Pending => self.waiting(cx).map(Err),
            ready => ready,
        }
    }
}

impl Drop for PeerIo {
    fn drop(&mut self) {
        let (Some(stream), Some(ticket)) = (self.stream.take(), self.ticket.take()) else {
            return;
        };
        // Outside a runtime (its shutdown), the descriptor just closes.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(linger(stream, ticket));
        }
    }
}

/// Our side is finished (hyper has sent its FIN, or we send it now); what the client still sends
/// is read and dropped until it closes too, for a bounded time and size. Closing with unread input
/// would send a reset, which discards our response in the client's receive buffer.
async fn linger(mut stream: TcpStream, ticket: Ticket) {
    use tokio::io::AsyncWriteExt;
    let _ = tokio::time::timeout(Duration::from_millis(100), stream.shutdown()).await;
    let drain = async {
        let mut buf = [0u8; 8192];
        let mut total = 0;
        while total < LINGER_BYTES {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drain).await;
    drop(stream);
    drop(ticket);
}
