//! Status messages the server sends on its own, which rml_rtmp's session has no call for: the
//! notice that the server is shutting down, sent to a publisher just before its connection is
//! closed. Sans-IO: the bytes to write.

use std::collections::HashMap;

use rml_amf0::Amf0Value;
use rml_rtmp::chunk_io::ChunkSerializer;
use rml_rtmp::messages::RtmpMessage;
use rml_rtmp::time::RtmpTimestamp;

/// Adobe's code for "the server-side application is shutting down" (level `error`), a
/// NetConnection status, so it goes on message stream 0, the connection's.
pub const APP_SHUTDOWN: &str = "NetConnection.Connect.AppShutdown";

#[derive(Debug, thiserror::Error)]
#[error("cannot serialize a status message: {0}")]
pub struct StatusError(String);

/// `onStatus({level: "error", code, description})` on message stream 0, chunked at
/// `chunk_size` (the size the session announced: the peer reads our chunks at that size). A
/// serializer of its own sends full chunk headers, which need no earlier chunk to be read.
/// Clients report an `error` level status with its description (ffmpeg: "Server error: …").
pub fn error_status(
    chunk_size: u32,
    code: &str,
    description: &str,
) -> Result<Vec<u8>, StatusError> {
    let fail = |e: &dyn std::fmt::Display| StatusError(e.to_string());
    let mut serializer = ChunkSerializer::new();
    // Our chunk size announced again, unchanged: the packet that states it is part of the
    // serializer's contract, and the bytes stand on their own.
    let mut bytes = serializer
        .set_max_chunk_size(chunk_size, RtmpTimestamp::new(0))
        .map_err(|e| fail(&e))?
        .bytes;
    let info: HashMap<String, Amf0Value> = [
        ("level", "error"),
        ("code", code),
        ("description", description),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Amf0Value::Utf8String(v.to_owned())))
    .collect();
    let message = RtmpMessage::Amf0Command {
        command_name: "onStatus".into(),
        transaction_id: 0.0,
        command_object: Amf0Value::Null,
        additional_arguments: vec![Amf0Value::Object(info)],
    };
    let payload = message
        .into_message_payload(RtmpTimestamp::new(0), 0)
        .map_err(|e| fail(&e))?;
    let packet = serializer
        .serialize(&payload, true, false)
        .map_err(|e| fail(&e))?;
    bytes.extend_from_slice(&packet.bytes);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rml_rtmp::chunk_io::ChunkDeserializer;

    #[test]
    fn a_reader_at_the_announced_chunk_size_gets_the_whole_status() {
        let description = "the server is shutting down; publish again ".repeat(8);
        let bytes = error_status(4096, APP_SHUTDOWN, &description).unwrap();
        let mut reader = ChunkDeserializer::new();
        reader.set_max_chunk_size(4096).unwrap();
        let first = reader.get_next_message(&bytes).unwrap().unwrap();
        assert_eq!(
            first.to_rtmp_message().unwrap(),
            RtmpMessage::SetChunkSize { size: 4096 }
        );
        let status = reader.get_next_message(&[]).unwrap().unwrap();
        assert_eq!(status.message_stream_id, 0);
        let RtmpMessage::Amf0Command {
            command_name,
            additional_arguments,
            ..
        } = status.to_rtmp_message().unwrap()
        else {
            panic!("not a command");
        };
        assert_eq!(command_name, "onStatus");
        let Some(Amf0Value::Object(info)) = additional_arguments.first() else {
            panic!("no info object: {additional_arguments:?}");
        };
        let text = |k: &str| match &info[k] {
            Amf0Value::Utf8String(s) => s.clone(),
            other => panic!("{k}: {other:?}"),
        };
        assert_eq!(text("level"), "error");
        assert_eq!(text("code"), APP_SHUTDOWN);
        assert_eq!(text("description"), description);
        assert!(reader.get_next_message(&[]).unwrap().is_none());
    }
}
