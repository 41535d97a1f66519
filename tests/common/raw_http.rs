//! A raw HTTP/1.1 server on loopback for sources no real server would be: each connection on a
//! thread of its own, its request head read, then the test's handler writes whatever it likes
//! (a playlist that changes every time, a body that never ends) on the raw socket.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

/// Serves on a free port until the test ends; `handle` gets each request's path (with its
/// query) and the connection, once the request head is in. Returns the port.
pub fn serve(handle: impl Fn(String, TcpStream) + Send + Sync + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = Arc::new(handle);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { return };
            let handle = handle.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
                handle(path, s);
            });
        }
    });
    port
}
