pub mod encryption;
pub mod handshake;
pub mod output;
pub mod pending_connection;
pub mod receiver;
pub mod sender;
pub mod time;
