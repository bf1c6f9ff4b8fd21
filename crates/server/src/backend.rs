//! Encoding what the server sends. The message structs and their encoders are pgwire's;
//! DataRow is written here directly from the result vectors (the hot path: no
//! per-row allocation), and every text field is bounded so that no message exceeds what
//! pgwire (and libpq) accept for its type.

use bytes::{BufMut, BytesMut};
use pgwire::messages::copy::{CopyInResponse, CopyOutResponse};
use pgwire::messages::data::{FieldDescription, ParameterDescription, RowDescription};
use pgwire::messages::response::{CommandComplete, ErrorResponse, NoticeResponse, ReadyForQuery, TransactionStatus};
use pgwire::messages::startup::{Authentication, BackendKeyData, NegotiateProtocolVersion, ParameterStatus, SecretKey};
use pgwire::messages::Message;

use apiary::DataType;
use apiary_types::pg::{pg_type, type_modifier};
use apiary_types::DataChunk;

use crate::values::{put_field, Format};

/// Longest text of an error or notice field (libpq refuses error messages over 30000
/// bytes; a long SQL echo or value must not cut the connection).
const MAX_ERROR_FIELD_BYTES: usize = 4000;

/// An error or notice for the client: severity, SQLSTATE, message, and where known the
/// 1-based character position in the statement, a detail and a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorInfo {
    pub severity: Severity,
    pub code: String,
    pub message: String,
    pub position: Option<usize>,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The statement failed; the session goes on.
    Error,
    /// The session ends.
    Fatal,
    Warning,
}

impl Severity {
    fn text(self) -> &'static str {
        match self {
            Severity::Error => "ERROR",
            Severity::Fatal => "FATAL",
            Severity::Warning => "WARNING",
        }
    }
}

impl ErrorInfo {
    pub fn new(severity: Severity, code: &str, message: impl Into<String>) -> Self {
        ErrorInfo { severity, code: code.to_string(), message: message.into(), position: None, detail: None, hint: None }
    }

    pub fn error(code: &str, message: impl Into<String>) -> Self {
        Self::new(Severity::Error, code, message)
    }

    pub fn fatal(code: &str, message: impl Into<String>) -> Self {
        Self::new(Severity::Fatal, code, message)
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    fn fields(&self) -> Vec<(u8, String)> {
        let mut fields = vec![
            (b'S', self.severity.text().to_string()),
            (b'V', self.severity.text().to_string()),
            (b'C', self.code.clone()),
            (b'M', bounded(&self.message)),
        ];
        if let Some(detail) = &self.detail {
            fields.push((b'D', bounded(detail)));
        }
        if let Some(hint) = &self.hint {
            fields.push((b'H', bounded(hint)));
        }
        if let Some(position) = self.position {
            fields.push((b'P', position.to_string()));
        }
        fields
    }
}

/// Cuts `text` to [`MAX_ERROR_FIELD_BYTES`] on a character boundary, without NULs
/// (a C string cannot hold them).
fn bounded(text: &str) -> String {
    let clean: String = text.chars().filter(|&c| c != '\0').collect();
    if clean.len() <= MAX_ERROR_FIELD_BYTES {
        return clean;
    }
    let mut cut = MAX_ERROR_FIELD_BYTES;
    while !clean.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &clean[..cut])
}

/// A result column as RowDescription describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub data_type: DataType,
}

/// Transaction status as ReadyForQuery reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxStatus {
    Idle,
    InBlock,
    Failed,
}

/// Backend messages accumulated for the socket.
#[derive(Default)]
pub struct BackendBuffer {
    pub bytes: BytesMut,
}

impl BackendBuffer {
    pub fn new() -> Self {
        BackendBuffer { bytes: BytesMut::with_capacity(8192) }
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Takes what was written so far.
    pub fn take(&mut self) -> BytesMut {
        self.bytes.split()
    }

    fn put<M: Message>(&mut self, message: &M) {
        // Every message is built within pgwire's limits here (error texts are bounded,
        // counts fit their fields), so encoding cannot fail; if it ever did, the message
        // is dropped rather than sent half-written.
        let before = self.bytes.len();
        if message.encode(&mut self.bytes).is_err() {
            debug_assert!(false, "a backend message exceeded its encoding limits");
            self.bytes.truncate(before);
        }
    }

    /// A message without a body (ParseComplete, NoData, ...): its type and length.
    fn empty_message(&mut self, tag: u8) {
        self.bytes.put_u8(tag);
        self.bytes.put_i32(4);
    }

    pub fn authentication_ok(&mut self) {
        self.put(&Authentication::Ok);
    }

    pub fn authentication_sasl(&mut self, mechanisms: Vec<String>) {
        self.put(&Authentication::SASL(mechanisms));
    }

    pub fn authentication_sasl_continue(&mut self, data: &[u8]) {
        self.put(&Authentication::SASLContinue(bytes::Bytes::copy_from_slice(data)));
    }

    pub fn authentication_sasl_final(&mut self, data: &[u8]) {
        self.put(&Authentication::SASLFinal(bytes::Bytes::copy_from_slice(data)));
    }

    pub fn parameter_status(&mut self, name: &str, value: &str) {
        self.put(&ParameterStatus::new(name.to_string(), value.to_string()));
    }

    pub fn backend_key_data(&mut self, process_id: i32, secret_key: i32) {
        self.put(&BackendKeyData::new(process_id, SecretKey::I32(secret_key)));
    }

    pub fn negotiate_protocol_version(&mut self, newest_minor: i32, unsupported: Vec<String>) {
        self.put(&NegotiateProtocolVersion::new(newest_minor, unsupported));
    }

    pub fn ready_for_query(&mut self, status: TxStatus) {
        let status = match status {
            TxStatus::Idle => TransactionStatus::Idle,
            TxStatus::InBlock => TransactionStatus::Transaction,
            TxStatus::Failed => TransactionStatus::Error,
        };
        self.put(&ReadyForQuery::new(status));
    }

    pub fn error(&mut self, error: &ErrorInfo) {
        match error.severity {
            Severity::Error | Severity::Fatal => self.put(&ErrorResponse::new(error.fields())),
            Severity::Warning => self.put(&NoticeResponse::new(error.fields())),
        }
    }

    pub fn command_complete(&mut self, tag: &str) {
        self.put(&CommandComplete::new(tag.to_string()));
    }

    pub fn empty_query(&mut self) {
        self.empty_message(b'I');
    }

    pub fn parse_complete(&mut self) {
        self.empty_message(b'1');
    }

    pub fn bind_complete(&mut self) {
        self.empty_message(b'2');
    }

    pub fn close_complete(&mut self) {
        self.empty_message(b'3');
    }

    pub fn portal_suspended(&mut self) {
        self.empty_message(b's');
    }

    pub fn no_data(&mut self) {
        self.empty_message(b'n');
    }

    pub fn parameter_description(&mut self, types: &[DataType]) {
        self.put(&ParameterDescription::new(types.iter().map(|t| pg_type(*t).oid).collect()));
    }

    pub fn row_description(&mut self, columns: &[Column], formats: &[Format]) {
        let fields = columns
            .iter()
            .enumerate()
            .map(|(idx, column)| {
                let pg = pg_type(column.data_type);
                FieldDescription::new(
                    column.name.replace('\0', ""),
                    0,
                    0,
                    pg.oid,
                    pg.len,
                    type_modifier(column.data_type),
                    formats.get(idx).copied().unwrap_or(Format::Text).code(),
                )
            })
            .collect();
        self.put(&RowDescription::new(fields));
    }

    /// DataRow messages for rows `start..end` of a chunk (TIMESTAMPTZ text in `zone`).
    pub fn data_rows(&mut self, chunk: &DataChunk, start: usize, end: usize, formats: &[Format], zone: &apiary_types::TimeZone) {
        let columns = chunk.column_count();
        for row in start..end {
            let message_at = self.bytes.len();
            self.bytes.put_u8(b'D');
            self.bytes.put_i32(0);
            self.bytes.put_i16(columns as i16);
            for (idx, vector) in chunk.columns.iter().enumerate() {
                put_field(&mut self.bytes, vector, row, formats.get(idx).copied().unwrap_or(Format::Text), zone);
            }
            let len = (self.bytes.len() - message_at - 1) as i32;
            self.bytes[message_at + 1..message_at + 5].copy_from_slice(&len.to_be_bytes());
        }
    }

    pub fn copy_in_response(&mut self, columns: usize) {
        self.put(&CopyInResponse::new(0, columns as i16, vec![0; columns]));
    }

    pub fn copy_out_response(&mut self, columns: usize) {
        self.put(&CopyOutResponse::new(0, columns as i16, vec![0; columns]));
    }

    pub fn copy_data(&mut self, data: &[u8]) {
        self.bytes.put_u8(b'd');
        self.bytes.put_i32(data.len() as i32 + 4);
        self.bytes.put_slice(data);
    }

    pub fn copy_done(&mut self) {
        self.empty_message(b'c');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_error_messages_are_cut() {
        let mut buffer = BackendBuffer::new();
        buffer.error(&ErrorInfo::error("XX000", "x".repeat(100_000)));
        assert!(buffer.len() > 4000 && buffer.len() < 5000, "{}", buffer.len());
        assert_eq!(buffer.bytes[0], b'E');
    }

    #[test]
    fn ready_for_query_carries_the_status() {
        let mut buffer = BackendBuffer::new();
        buffer.ready_for_query(TxStatus::Failed);
        assert_eq!(&buffer.bytes[..], b"Z\0\0\0\x05E");
    }
}
