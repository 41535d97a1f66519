//! SRT ingest (srt-tokio): a listener that authorises each caller from its stream id at the
//! handshake (with the stream's passphrase enforced by SRT encryption), and a connection shell
//! that feeds the MPEG-TS payload through the TS → media adapter to the registry.

pub mod conn;
pub mod listener;
pub mod streamid;
