//! A bare RTMP client (rml_rtmp's client session over a TCP socket): connected to an
//! application first, asked to publish later, so a test decides exactly when the publish
//! reaches the server and reads the server's answer byte for byte.

use std::time::Duration;

use rml_rtmp::handshake::{Handshake, HandshakeProcessResult, PeerType};
use rml_rtmp::sessions::{
    ClientSession, ClientSessionConfig, ClientSessionEvent, ClientSessionResult, PublishRequestType,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const STEP: Duration = Duration::from_secs(10);

/// A client past the handshake and `connect`, not publishing yet.
pub struct Connected {
    sock: TcpStream,
    session: ClientSession,
}

/// `push_url`'s application and stream key (`rtmp://host:port/{app}/{key}`).
pub fn app_and_key(push_url: &str) -> (String, String) {
    let path = push_url.split_once("://").unwrap().1;
    let path = &path[path.find('/').unwrap() + 1..];
    let (app, key) = path.split_once('/').unwrap();
    (app.to_owned(), key.to_owned())
}

async fn read(sock: &mut TcpStream, buf: &mut [u8]) -> usize {
    match tokio::time::timeout(STEP, sock.read(buf)).await {
        Ok(Ok(n)) => n,
        other => panic!("RTMP read: {other:?}"),
    }
}

async fn send(sock: &mut TcpStream, results: Vec<ClientSessionResult>) -> Vec<ClientSessionEvent> {
    let mut events = Vec::new();
    for r in results {
        match r {
            ClientSessionResult::OutboundResponse(p) => sock.write_all(&p.bytes).await.unwrap(),
            ClientSessionResult::RaisedEvent(e) => events.push(e),
            ClientSessionResult::UnhandleableMessageReceived(_) => {}
        }
    }
    events
}

/// Handshake and `connect` to `app` at `addr` (`host:port`); panics unless accepted.
pub async fn connect(addr: &str, app: &str) -> Connected {
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let mut handshake = Handshake::new(PeerType::Client);
    sock.write_all(&handshake.generate_outbound_p0_and_p1().unwrap())
        .await
        .unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let rest = loop {
        let n = read(&mut sock, &mut buf).await;
        assert!(n > 0, "closed during the RTMP handshake");
        match handshake.process_bytes(&buf[..n]).unwrap() {
            HandshakeProcessResult::InProgress { response_bytes } => {
                sock.write_all(&response_bytes).await.unwrap()
            }
            HandshakeProcessResult::Completed {
                response_bytes,
                remaining_bytes,
            } => {
                sock.write_all(&response_bytes).await.unwrap();
                break remaining_bytes;
            }
        }
    };
    let (mut session, initial) = ClientSession::new(ClientSessionConfig::new()).unwrap();
    send(&mut sock, initial).await;
    let request = session.request_connection(app.to_owned()).unwrap();
    send(&mut sock, vec![request]).await;
    let mut input = rest;
    loop {
        let results = session.handle_input(&input).unwrap();
        for event in send(&mut sock, results).await {
            match event {
                ClientSessionEvent::ConnectionRequestAccepted => {
                    return Connected { sock, session }
                }
                ClientSessionEvent::ConnectionRequestRejected { description } => {
                    panic!("connect refused: {description}")
                }
                _ => {}
            }
        }
        let n = read(&mut sock, &mut buf).await;
        assert!(n > 0, "closed before answering connect");
        input = buf[..n].to_vec();
    }
}

impl Connected {
    /// Asks to publish `key`; returns every byte the server sent from then until it closed
    /// the connection (or 10 s passed), for the test to look for the answer in.
    pub async fn publish(mut self, key: &str) -> Vec<u8> {
        let request = self
            .session
            .request_publishing(key.to_owned(), PublishRequestType::Live)
            .unwrap();
        send(&mut self.sock, vec![request]).await;
        let mut received = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let deadline = tokio::time::Instant::now() + STEP;
        loop {
            let n = match tokio::time::timeout_at(deadline, self.sock.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => n,
                _ => return received,
            };
            received.extend_from_slice(&buf[..n]);
            // The session answers createStream's result with the publish itself; whatever
            // it makes of the refusal, the bytes tell.
            if let Ok(results) = self.session.handle_input(&buf[..n]) {
                send(&mut self.sock, results).await;
            }
        }
    }
}
