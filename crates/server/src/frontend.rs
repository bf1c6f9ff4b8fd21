//! Decoding what clients send: the startup packets and the typed messages after them.
//!
//! Every byte here comes from the network, so nothing may panic and nothing may allocate
//! more than the message holds: all reads go through [`Cursor`], which checks bounds, and
//! a message body is cut out of the stream before it is decoded, so a field that claims
//! more bytes than its message has is an error, never a read into the next message.
//! (pgwire's own frontend decoders read straight from the shared buffer with `get_u16`
//! and friends, which panic on a truncated body; the server encodes with pgwire but
//! decodes here.) `tests/fuzz_protocol.rs` feeds this module random and mutated input.
//!
//! ```text
//!  startup phase:  int32 length | int32 code | body          (no type byte)
//!                  code 80877103 SSLRequest, 80877104 GSSENCRequest,
//!                  80877102 CancelRequest, 3.x StartupMessage
//!  afterwards:     byte type | int32 length (includes itself) | body
//! ```

use bytes::{Buf, Bytes, BytesMut};

/// Longest startup packet accepted (PostgreSQL's `MAX_STARTUP_PACKET_LENGTH`).
pub const MAX_STARTUP_PACKET: usize = 10_000;

const SSL_REQUEST_CODE: u32 = 80_877_103;
const GSSENC_REQUEST_CODE: u32 = 80_877_104;
const CANCEL_REQUEST_CODE: u32 = 80_877_102;
/// Longest cancel key accepted (protocol 3.2 allows up to 256 bytes).
const MAX_CANCEL_KEY: usize = 256;

/// A malformed message: the SQLSTATE and text of the error the client gets. `fatal`
/// errors close the connection, because the byte stream can no longer be trusted to
/// be in step with message boundaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError {
    pub code: &'static str,
    pub message: String,
    pub fatal: bool,
}

impl ProtocolError {
    pub fn fatal(code: &'static str, message: impl Into<String>) -> Self {
        ProtocolError { code, message: message.into(), fatal: true }
    }

    /// A malformed body inside a well-framed message: the session can go on.
    pub fn invalid(message: impl Into<String>) -> Self {
        ProtocolError { code: PROTOCOL_VIOLATION, message: message.into(), fatal: false }
    }
}

pub const PROTOCOL_VIOLATION: &str = "08P01";
pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
pub const CHARACTER_NOT_IN_REPERTOIRE: &str = "22021";

/// The first packet of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupPacket {
    SslRequest,
    GssEncRequest,
    Cancel { process_id: i32, secret_key: Vec<u8> },
    Startup { major: u16, minor: u16, parameters: Vec<(String, String)> },
}

/// `Describe` and `Close` name a prepared statement or a portal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Statement,
    Portal,
}

/// A message after the startup packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontendMessage {
    Query(String),
    Parse {
        name: String,
        sql: String,
        parameter_types: Vec<u32>,
    },
    Bind {
        portal: String,
        statement: String,
        parameter_formats: Vec<i16>,
        parameters: Vec<Option<Bytes>>,
        result_formats: Vec<i16>,
    },
    Describe {
        target: Target,
        name: String,
    },
    Execute {
        portal: String,
        max_rows: i32,
    },
    Close {
        target: Target,
        name: String,
    },
    Sync,
    Flush,
    Terminate,
    CopyData(Bytes),
    CopyDone,
    CopyFail(String),
    /// `p`: a password, SASLInitialResponse or SASLResponse; which one depends on the
    /// authentication exchange, so the body stays raw.
    Password(Bytes),
    /// `F`: the legacy fast-path function call, which Apiary does not offer.
    FunctionCall,
}

impl FrontendMessage {
    /// Whether the message belongs to the extended query protocol (after an error in
    /// one, everything up to the next Sync is skipped).
    pub fn is_extended(&self) -> bool {
        matches!(
            self,
            FrontendMessage::Parse { .. }
                | FrontendMessage::Bind { .. }
                | FrontendMessage::Describe { .. }
                | FrontendMessage::Execute { .. }
                | FrontendMessage::Close { .. }
                | FrontendMessage::Flush
                | FrontendMessage::Sync
        )
    }
}

/// Bounds-checked reads from one message body.
struct Cursor {
    bytes: Bytes,
}

impl Cursor {
    fn new(bytes: Bytes) -> Self {
        Cursor { bytes }
    }

    fn truncated(what: &str) -> ProtocolError {
        ProtocolError::invalid(format!("invalid message format: the message ends inside {what}"))
    }

    fn u8(&mut self, what: &str) -> Result<u8, ProtocolError> {
        if self.bytes.is_empty() {
            return Err(Self::truncated(what));
        }
        Ok(self.bytes.get_u8())
    }

    fn i16(&mut self, what: &str) -> Result<i16, ProtocolError> {
        if self.bytes.len() < 2 {
            return Err(Self::truncated(what));
        }
        Ok(self.bytes.get_i16())
    }

    fn i32(&mut self, what: &str) -> Result<i32, ProtocolError> {
        if self.bytes.len() < 4 {
            return Err(Self::truncated(what));
        }
        Ok(self.bytes.get_i32())
    }

    fn take(&mut self, len: usize, what: &str) -> Result<Bytes, ProtocolError> {
        if self.bytes.len() < len {
            return Err(Self::truncated(what));
        }
        Ok(self.bytes.split_to(len))
    }

    /// A NUL-terminated UTF-8 string.
    fn cstring(&mut self, what: &str) -> Result<String, ProtocolError> {
        let Some(end) = self.bytes.iter().position(|&b| b == 0) else {
            return Err(ProtocolError::invalid(format!("invalid string in message: {what} is not terminated")));
        };
        let raw = self.bytes.split_to(end);
        self.bytes.advance(1);
        String::from_utf8(raw.to_vec()).map_err(|_| ProtocolError {
            code: CHARACTER_NOT_IN_REPERTOIRE,
            message: format!("invalid byte sequence for encoding \"UTF8\" in {what}"),
            fatal: false,
        })
    }

    /// A count followed by that many items of at least `item_bytes` each: the count
    /// is checked against what is left before anything is allocated.
    fn count(&mut self, item_bytes: usize, what: &str) -> Result<usize, ProtocolError> {
        // Counts are unsigned 16-bit (up to 65535 parameters).
        let count = self.i16(what)? as u16 as usize;
        if count * item_bytes > self.bytes.len() {
            return Err(Self::truncated(what));
        }
        Ok(count)
    }

    fn finish(self, message: &str) -> Result<(), ProtocolError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(ProtocolError::invalid(format!("invalid message format: {} extra bytes at the end of {message}", self.bytes.len())))
        }
    }
}

/// Decodes a startup-phase packet (the bytes after its length word).
pub fn decode_startup(body: Bytes) -> Result<StartupPacket, ProtocolError> {
    let mut cursor = Cursor::new(body);
    let code = cursor.i32("the startup code").map_err(|e| ProtocolError { fatal: true, ..e })? as u32;
    let fatal = |e: ProtocolError| ProtocolError { fatal: true, ..e };
    match code {
        SSL_REQUEST_CODE => {
            cursor.finish("SSLRequest").map_err(fatal)?;
            Ok(StartupPacket::SslRequest)
        }
        GSSENC_REQUEST_CODE => {
            cursor.finish("GSSENCRequest").map_err(fatal)?;
            Ok(StartupPacket::GssEncRequest)
        }
        CANCEL_REQUEST_CODE => {
            let process_id = cursor.i32("the cancel request's process id").map_err(fatal)?;
            let key_len = cursor.bytes.len();
            if !(4..=MAX_CANCEL_KEY).contains(&key_len) {
                return Err(ProtocolError::fatal(PROTOCOL_VIOLATION, format!("invalid length of cancel key: {key_len}")));
            }
            let secret_key = cursor.take(key_len, "the cancel key").map_err(fatal)?.to_vec();
            Ok(StartupPacket::Cancel { process_id, secret_key })
        }
        _ => {
            let major = (code >> 16) as u16;
            let minor = (code & 0xffff) as u16;
            if major != 3 {
                return Err(ProtocolError::fatal(
                    "0A000",
                    format!("unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.0"),
                ));
            }
            let mut parameters = Vec::new();
            loop {
                let name = cursor.cstring("a startup parameter name").map_err(fatal)?;
                if name.is_empty() {
                    break;
                }
                let value = cursor.cstring("a startup parameter value").map_err(fatal)?;
                parameters.push((name, value));
            }
            cursor.finish("the startup packet").map_err(fatal)?;
            Ok(StartupPacket::Startup { major, minor, parameters })
        }
    }
}

fn target(byte: u8) -> Result<Target, ProtocolError> {
    match byte {
        b'S' => Ok(Target::Statement),
        b'P' => Ok(Target::Portal),
        other => Err(ProtocolError::invalid(format!("invalid DESCRIBE/CLOSE message subtype {other}"))),
    }
}

/// Decodes the body of a typed message. An unknown type is fatal (the stream may not be
/// a PostgreSQL client at all); a malformed body is not.
pub fn decode_message(tag: u8, body: Bytes) -> Result<FrontendMessage, ProtocolError> {
    let mut cursor = Cursor::new(body);
    let message = match tag {
        b'Q' => {
            let sql = cursor.cstring("the query string")?;
            cursor.finish("Query")?;
            FrontendMessage::Query(sql)
        }
        b'P' => {
            let name = cursor.cstring("the statement name")?;
            let sql = cursor.cstring("the query string")?;
            let count = cursor.count(4, "parameter type count")?;
            let mut parameter_types = Vec::with_capacity(count);
            for _ in 0..count {
                parameter_types.push(cursor.i32("a parameter type")? as u32);
            }
            cursor.finish("Parse")?;
            FrontendMessage::Parse { name, sql, parameter_types }
        }
        b'B' => {
            let portal = cursor.cstring("the portal name")?;
            let statement = cursor.cstring("the statement name")?;
            let format_count = cursor.count(2, "parameter format count")?;
            let mut parameter_formats = Vec::with_capacity(format_count);
            for _ in 0..format_count {
                parameter_formats.push(cursor.i16("a parameter format")?);
            }
            let parameter_count = cursor.count(4, "parameter count")?;
            let mut parameters = Vec::with_capacity(parameter_count);
            for _ in 0..parameter_count {
                let len = cursor.i32("a parameter length")?;
                if len == -1 {
                    parameters.push(None);
                } else if len < 0 {
                    return Err(ProtocolError::invalid(format!("invalid message format: parameter length {len}")));
                } else {
                    parameters.push(Some(cursor.take(len as usize, "a parameter value")?));
                }
            }
            let result_count = cursor.count(2, "result format count")?;
            let mut result_formats = Vec::with_capacity(result_count);
            for _ in 0..result_count {
                result_formats.push(cursor.i16("a result format")?);
            }
            cursor.finish("Bind")?;
            FrontendMessage::Bind { portal, statement, parameter_formats, parameters, result_formats }
        }
        b'D' | b'C' => {
            let target = target(cursor.u8("the target kind")?)?;
            let name = cursor.cstring("the name")?;
            cursor.finish(if tag == b'D' { "Describe" } else { "Close" })?;
            if tag == b'D' {
                FrontendMessage::Describe { target, name }
            } else {
                FrontendMessage::Close { target, name }
            }
        }
        b'E' => {
            let portal = cursor.cstring("the portal name")?;
            let max_rows = cursor.i32("the row limit")?;
            cursor.finish("Execute")?;
            FrontendMessage::Execute { portal, max_rows }
        }
        b'S' | b'H' | b'X' | b'c' => {
            cursor.finish("a message without a body")?;
            match tag {
                b'S' => FrontendMessage::Sync,
                b'H' => FrontendMessage::Flush,
                b'X' => FrontendMessage::Terminate,
                _ => FrontendMessage::CopyDone,
            }
        }
        b'd' => FrontendMessage::CopyData(cursor.bytes),
        b'f' => {
            let reason = cursor.cstring("the failure message")?;
            cursor.finish("CopyFail")?;
            FrontendMessage::CopyFail(reason)
        }
        b'p' => FrontendMessage::Password(cursor.bytes),
        b'F' => FrontendMessage::FunctionCall,
        other => {
            return Err(ProtocolError::fatal(PROTOCOL_VIOLATION, format!("invalid frontend message type {other}")));
        }
    };
    Ok(message)
}

/// The SASLInitialResponse in a `p` message: the chosen mechanism and its first data.
pub fn decode_sasl_initial(body: Bytes) -> Result<(String, Bytes), ProtocolError> {
    let mut cursor = Cursor::new(body);
    let mechanism = cursor.cstring("the SASL mechanism")?;
    let len = cursor.i32("the SASL data length")?;
    let data = if len < 0 { Bytes::new() } else { cursor.take(len as usize, "the SASL data")? };
    cursor.finish("SASLInitialResponse")?;
    Ok((mechanism, data))
}

/// Splits framed messages off a stream buffer.
///
/// `max_message_bytes` bounds what a single message may claim: the length word is
/// checked before anything is buffered for the body, so a client cannot make the
/// server reserve a gigabyte by sending five bytes.
#[derive(Debug, Clone, Copy)]
pub struct FrameReader {
    pub max_message_bytes: usize,
}

impl FrameReader {
    /// The next startup-phase packet's body, `None` until it is complete.
    pub fn next_startup(&self, buffer: &mut BytesMut) -> Result<Option<Bytes>, ProtocolError> {
        if buffer.len() < 4 {
            return Ok(None);
        }
        let len = i32::from_be_bytes([buffer[0], buffer[1], buffer[2], buffer[3]]);
        if len < 8 || len as usize > MAX_STARTUP_PACKET {
            return Err(ProtocolError::fatal(PROTOCOL_VIOLATION, format!("invalid length of startup packet: {len}")));
        }
        let len = len as usize;
        if buffer.len() < len {
            buffer.reserve(len - buffer.len());
            return Ok(None);
        }
        let mut packet = buffer.split_to(len);
        packet.advance(4);
        Ok(Some(packet.freeze()))
    }

    /// The next typed message (type byte and body), `None` until it is complete.
    pub fn next_message(&self, buffer: &mut BytesMut) -> Result<Option<(u8, Bytes)>, ProtocolError> {
        if buffer.len() < 5 {
            return Ok(None);
        }
        let tag = buffer[0];
        if !is_known_type(tag) {
            return Err(ProtocolError::fatal(PROTOCOL_VIOLATION, format!("invalid frontend message type {tag}")));
        }
        let len = i32::from_be_bytes([buffer[1], buffer[2], buffer[3], buffer[4]]);
        if len < 4 {
            return Err(ProtocolError::fatal(PROTOCOL_VIOLATION, format!("invalid message length {len}")));
        }
        let body_len = len as usize - 4;
        if body_len > self.max_message_bytes {
            return Err(ProtocolError::fatal(
                PROGRAM_LIMIT_EXCEEDED,
                format!("message of {body_len} bytes exceeds the server's limit of {} bytes (--max-message-size)", self.max_message_bytes),
            ));
        }
        if buffer.len() < 5 + body_len {
            buffer.reserve(5 + body_len - buffer.len());
            return Ok(None);
        }
        buffer.advance(5);
        Ok(Some((tag, buffer.split_to(body_len).freeze())))
    }
}

fn is_known_type(tag: u8) -> bool {
    matches!(tag, b'Q' | b'P' | b'B' | b'D' | b'C' | b'E' | b'S' | b'H' | b'X' | b'd' | b'c' | b'f' | b'p' | b'F')
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    fn frame(tag: u8, body: &[u8]) -> BytesMut {
        let mut buf = BytesMut::new();
        buf.put_u8(tag);
        buf.put_i32(body.len() as i32 + 4);
        buf.put_slice(body);
        buf
    }

    #[test]
    fn decodes_a_query() {
        let reader = FrameReader { max_message_bytes: 1024 };
        let mut buf = frame(b'Q', b"SELECT 1\0");
        let (tag, body) = reader.next_message(&mut buf).unwrap().unwrap();
        assert_eq!(decode_message(tag, body).unwrap(), FrontendMessage::Query("SELECT 1".into()));
        assert!(buf.is_empty());
    }

    #[test]
    fn waits_for_a_whole_message() {
        let reader = FrameReader { max_message_bytes: 1024 };
        let mut whole = frame(b'Q', b"SELECT 1\0");
        let mut partial = whole.split_to(7);
        assert_eq!(reader.next_message(&mut partial).unwrap(), None);
        partial.unsplit(whole);
        assert!(reader.next_message(&mut partial).unwrap().is_some());
    }

    #[test]
    fn refuses_oversized_and_unknown_messages() {
        let reader = FrameReader { max_message_bytes: 16 };
        let mut buf = BytesMut::new();
        buf.put_u8(b'Q');
        buf.put_i32(1 << 30);
        let err = reader.next_message(&mut buf).unwrap_err();
        assert!(err.fatal && err.code == PROGRAM_LIMIT_EXCEEDED, "{err:?}");
        let err = reader.next_message(&mut frame(b'z', b"")).unwrap_err();
        assert!(err.fatal && err.message.contains("invalid frontend message type"), "{err:?}");
        let mut buf = BytesMut::from(&[b'Q', 0, 0, 0, 2][..]);
        assert!(reader.next_message(&mut buf).unwrap_err().fatal);
    }

    #[test]
    fn truncated_bodies_are_errors_not_panics() {
        // A Bind claiming a 100-byte parameter in a 20-byte message.
        let mut body = Vec::new();
        body.extend_from_slice(b"\0\0");
        body.extend_from_slice(&0i16.to_be_bytes());
        body.extend_from_slice(&1i16.to_be_bytes());
        body.extend_from_slice(&100i32.to_be_bytes());
        body.extend_from_slice(b"abc");
        let err = decode_message(b'B', Bytes::from(body)).unwrap_err();
        assert!(!err.fatal && err.message.contains("ends inside"), "{err:?}");
        // A Parse claiming 30000 parameter types.
        let mut body = b"s\0SELECT $1\0".to_vec();
        body.extend_from_slice(&30000i16.to_be_bytes());
        assert!(decode_message(b'P', Bytes::from(body)).is_err());
        assert!(decode_message(b'E', Bytes::from_static(b"p\0\0")).is_err());
        assert!(decode_message(b'Q', Bytes::from_static(b"no terminator")).is_err());
        assert!(decode_message(b'Q', Bytes::from_static(b"\xff\xfe\0")).is_err());
        assert!(decode_message(b'S', Bytes::from_static(b"x")).is_err());
    }

    #[test]
    fn decodes_startup_packets() {
        let mut body = Vec::new();
        body.extend_from_slice(&196608i32.to_be_bytes());
        body.extend_from_slice(b"user\0alice\0database\0db\0\0");
        match decode_startup(Bytes::from(body)).unwrap() {
            StartupPacket::Startup { major: 3, minor: 0, parameters } => {
                assert_eq!(parameters, vec![("user".into(), "alice".into()), ("database".into(), "db".into())]);
            }
            other => panic!("{other:?}"),
        }
        let ssl = Bytes::copy_from_slice(&80877103i32.to_be_bytes());
        assert_eq!(decode_startup(ssl).unwrap(), StartupPacket::SslRequest);
        let mut cancel = 80877102i32.to_be_bytes().to_vec();
        cancel.extend_from_slice(&7i32.to_be_bytes());
        cancel.extend_from_slice(&42i32.to_be_bytes());
        assert_eq!(
            decode_startup(Bytes::from(cancel)).unwrap(),
            StartupPacket::Cancel { process_id: 7, secret_key: 42i32.to_be_bytes().to_vec() }
        );
        let v2 = Bytes::copy_from_slice(&0x0002_0000i32.to_be_bytes());
        assert!(decode_startup(v2).unwrap_err().fatal);
    }
}
