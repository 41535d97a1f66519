//! srt-tokio's listener knows a caller by its address and port. A caller on the port of one
//! whose connection is over — it vanished without a shutdown, or we closed it — is a new caller:
//! its induction is answered and it connects (vendor/srt-protocol PATCHED.md, stale sessions).

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use srt_protocol::listener::STALE_SESSION_REPLACE_AFTER;
use srt_tokio::{SrtListener, SrtSocket};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use super::srt::{conclude_holding, CONCLUSION};

/// A listener on 127.0.0.1 that accepts every caller and hands over our end of each connection.
pub(crate) async fn listener() -> (SrtListener, SocketAddr, mpsc::Receiver<SrtSocket>) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let (listener, mut incoming) = SrtListener::builder()
        .socket(socket)
        .bind(addr)
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        while let Some(request) = incoming.incoming().next().await {
            if let Ok(socket) = request.accept(None).await {
                let _ = tx.send(socket).await;
            }
        }
    });
    (listener, addr, rx)
}

/// Connects from `local`; the caller's socket (held by the caller) and ours.
async fn connect(
    local: &str,
    srt: SocketAddr,
    ours: &mut mpsc::Receiver<SrtSocket>,
) -> (UdpSocket, SrtSocket) {
    let (answer, caller) = conclude_holding(local, &srt.to_string(), b"s").await;
    assert_eq!(answer, Some(CONCLUSION), "a caller from {local}");
    let server = tokio::time::timeout(Duration::from_secs(2), ours.recv())
        .await
        .expect("accepted")
        .unwrap();
    (caller, server)
}

/// Waits for the listener's shutdown control packet (type 5) to `caller`.
async fn shutdown_reaches(caller: &UdpSocket) {
    let mut buf = [0u8; 1500];
    loop {
        let n = caller.recv(&mut buf).await.unwrap();
        if n >= 16 && buf[0..2] == [0x80, 0x05] {
            return;
        }
    }
}

#[tokio::test]
async fn caller_on_a_vanished_callers_port_connects() {
    let (_listener, srt, mut ours) = listener().await;
    let (caller, _server) = connect("127.0.0.1:0", srt, &mut ours).await;
    let local = caller.local_addr().unwrap().to_string();
    // Gone without a shutdown; our end keeps its connection (as within its idle deadline).
    drop(caller);
    // Before: the new caller was taken for the open connection and never answered.
    tokio::time::sleep(STALE_SESSION_REPLACE_AFTER + Duration::from_millis(300)).await;
    let (_caller, _server) = connect(&local, srt, &mut ours).await;
}

#[tokio::test]
async fn caller_on_the_port_of_a_connection_we_closed_connects_at_once() {
    let (_listener, srt, mut ours) = listener().await;
    let (caller, server) = connect("127.0.0.1:0", srt, &mut ours).await;
    let local = caller.local_addr().unwrap().to_string();
    drop(server);
    tokio::time::timeout(Duration::from_secs(3), shutdown_reaches(&caller))
        .await
        .expect("our shutdown");
    // Our connection's task ends right after its shutdown.
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(caller);
    // One induction only (conclude_holding): it must be answered, not lost on the old session.
    let (_caller, _server) = connect(&local, srt, &mut ours).await;
}
