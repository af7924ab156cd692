//! Fuzz target `local_control`: the local-control parsers on arbitrary bytes.
//!
//! Byte 0 picks the parser; the rest is its input:
//! - 0 `json_limits::parse` with small limits from bytes 1..=3: a value it accepts is within every limit, and a
//!   refusal names a limit the value really exceeds (checked against an independent recursive count);
//! - 1 `Cursor::parse`: an accepted cursor is exactly `incarnation:offset`, rebuilds with `Cursor::new`, survives a
//!   serde round trip, and `contract::runs::is_event_cursor` agrees;
//! - 2 `RequestEnvelope` (bounded parse, serde, `validate`): an accepted envelope round-trips;
//! - 3 the `x-deepchat-upload-request` header: the steps of `server.rs` `parse_upload_header` (charset and length,
//!   canonical base64url, bounded JSON, `UploadRequestEnvelope`, `validate`) on the bytes as a header value and on
//!   the bytes base64url-encoded; an accepted binding has size > 0 and a lowercase 64-hex sha256;
//! - 4 `StreamLine::parse`: an accepted line serializes and parses back to the same line;
//! - 5 the descriptor file (`descriptor::discover_at` on a private temp file): an accepted descriptor has the
//!   schema's ranges and reads back the same after being written again.
//!
//! Source: `protocols/local-control.md` ("Envelopes", "Discovery", "Uploads"), DeepChat's
//! `src/shared/contracts/localControl*` schemas as transcribed in `envelope.rs` and `descriptor.rs`.
#![no_main]

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use agentwire_local_control::contract::runs::is_event_cursor;
use agentwire_local_control::descriptor::{DiscoveryOptions, discover_at};
use agentwire_local_control::envelope::{
    Cursor, RequestEnvelope, StreamLine, UploadRequestEnvelope, is_valid_method,
    is_valid_request_id,
};
use agentwire_local_control::json_limits::{self, JsonLimits, JsonShapeError};
use agentwire_local_control::limits::{
    MAX_UPLOAD_REQUEST_HEADER_BYTES, PROTOCOL_VERSION, SURFACE_VERSION,
};
use base64::Engine as _;
use serde_json::Value;

/// (depth of the deepest value, object keys, values) of `value`, counted recursively, with `json_limits`'
/// definition: the top-level value is at depth 0 and each element or member one deeper, so an empty container
/// adds no depth (`[]` is depth 0, `[[]]` depth 1). An earlier version counted `[]` as depth 1 and reported the
/// library's correct acceptance of `[]` under `max_depth = 0` as a crash (seed `empty-array-depth-0`).
fn measure(value: &Value) -> (usize, usize, usize) {
    match value {
        Value::Array(items) => items.iter().map(measure).fold((0, 0, 1), |acc, m| {
            (acc.0.max(m.0 + 1), acc.1 + m.1, acc.2 + m.2)
        }),
        Value::Object(map) => map.values().map(measure).fold((0, map.len(), 1), |acc, m| {
            (acc.0.max(m.0 + 1), acc.1 + m.1, acc.2 + m.2)
        }),
        _ => (0, 0, 1),
    }
}

fn limits_case(data: &[u8]) {
    let [depth, keys, nodes, json @ ..] = data else {
        return;
    };
    let mut limits = JsonLimits::default();
    limits.max_depth = usize::from(*depth % 8);
    limits.max_keys = usize::from(*keys % 16);
    limits.max_nodes = usize::from(*nodes % 32);
    let parsed = serde_json::from_slice::<Value>(json).ok();
    let result = json_limits::parse(json, limits);
    let Some(value) = parsed else {
        assert_eq!(result, Err(JsonShapeError::Syntax));
        return;
    };
    let (d, k, n) = measure(&value);
    match result {
        Ok(accepted) => {
            assert_eq!(accepted, value);
            assert!(d <= limits.max_depth && k <= limits.max_keys && n <= limits.max_nodes);
        }
        Err(JsonShapeError::TooDeep { max }) => assert!(max == limits.max_depth && d > max),
        Err(JsonShapeError::TooManyKeys { max }) => assert!(max == limits.max_keys && k > max),
        Err(JsonShapeError::TooManyNodes { max }) => assert!(max == limits.max_nodes && n > max),
        Err(other) => panic!("unexpected refusal of valid json: {other:?}"),
    }
}

fn cursor_case(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let cursor = Cursor::parse(&text);
    assert_eq!(
        is_event_cursor(&text),
        cursor.is_some() && text.len() <= 4096
    );
    let Some(cursor) = cursor else {
        return;
    };
    assert_eq!(cursor.as_str(), text);
    assert_eq!(
        format!("{}:{}", cursor.incarnation(), cursor.offset()),
        text,
        "the offset is canonical"
    );
    assert_eq!(
        Cursor::new(cursor.incarnation(), cursor.offset()),
        Some(cursor.clone())
    );
    let json = serde_json::to_string(&cursor).expect("a cursor serializes");
    assert_eq!(serde_json::from_str::<Cursor>(&json).ok(), Some(cursor));
}

fn request_case(data: &[u8]) {
    let Ok(value) = json_limits::parse(data, JsonLimits::default()) else {
        return;
    };
    let Ok(envelope) = serde_json::from_value::<RequestEnvelope>(value) else {
        return;
    };
    if envelope.validate().is_ok() {
        assert!(is_valid_request_id(&envelope.id) && is_valid_method(&envelope.method));
        let json = serde_json::to_vec(&envelope).expect("an envelope serializes");
        let again: RequestEnvelope = serde_json::from_slice(&json).expect("and parses back");
        assert_eq!(again, envelope);
    }
}

/// The steps of `server.rs` `parse_upload_header`, through the crate's public parts.
fn upload_header(raw: &str) -> Option<UploadRequestEnvelope> {
    if raw.is_empty()
        || raw.len() > MAX_UPLOAD_REQUEST_HEADER_BYTES
        || !raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return None;
    }
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let decoded = engine.decode(raw).ok()?;
    if engine.encode(&decoded) != raw {
        return None;
    }
    let value = json_limits::parse(&decoded, JsonLimits::default()).ok()?;
    let protocol = value.get("protocolVersion").and_then(Value::as_u64);
    let surface = value.get("surfaceVersion").and_then(Value::as_u64);
    if protocol != Some(u64::from(PROTOCOL_VERSION)) || surface != Some(u64::from(SURFACE_VERSION))
    {
        return None;
    }
    let envelope: UploadRequestEnvelope = serde_json::from_value(value).ok()?;
    envelope.validate().ok()?;
    Some(envelope)
}

fn check_upload(envelope: &UploadRequestEnvelope) {
    assert!(envelope.upload.size > 0);
    assert_eq!(envelope.upload.sha256.len(), 64);
    assert!(
        envelope
            .upload
            .sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    assert!(envelope.request().validate().is_ok());
    let json = serde_json::to_vec(envelope).expect("an envelope serializes");
    let header = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json);
    if header.len() <= MAX_UPLOAD_REQUEST_HEADER_BYTES {
        assert_eq!(upload_header(&header).as_ref(), Some(envelope));
    }
}

fn upload_case(data: &[u8]) {
    if let Some(envelope) = upload_header(&String::from_utf8_lossy(data)) {
        check_upload(&envelope);
    }
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data);
    if let Some(envelope) = upload_header(&encoded) {
        check_upload(&envelope);
    }
}

fn stream_case(data: &[u8]) {
    let Ok(line) = StreamLine::parse(data) else {
        return;
    };
    let json = match &line {
        StreamLine::Event(record) => {
            assert!(record.is_valid());
            serde_json::to_vec(record)
        }
        StreamLine::Terminal(response) => serde_json::to_vec(response),
        _ => return,
    }
    .expect("a stream line serializes");
    assert_eq!(StreamLine::parse(&json), Ok(line));
}

fn descriptor_file() -> PathBuf {
    let dir = std::env::var_os("AGENTWIRE_FUZZ_TMP")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    dir.join(format!(
        "agentwire-fuzz-descriptor-{}.json",
        std::process::id()
    ))
}

fn write_private(path: &PathBuf, bytes: &[u8]) -> bool {
    let _ = std::fs::remove_file(path);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match file {
        Ok(mut file) => file.write_all(bytes).is_ok(),
        Err(_) => false,
    }
}

fn descriptor_case(data: &[u8]) {
    let path = descriptor_file();
    if !write_private(&path, data) {
        return;
    }
    let mut options = DiscoveryOptions::default();
    options.process_alive = |_| true;
    let Ok(descriptor) = discover_at(&path, options) else {
        return;
    };
    assert_eq!(descriptor.protocol_version, PROTOCOL_VERSION);
    assert_eq!(descriptor.surface_version, SURFACE_VERSION);
    assert!((1..=128).contains(&descriptor.app_version.len()));
    assert!((1..=2_147_483_647).contains(&descriptor.pid));
    assert!((43..=256).contains(&descriptor.token.expose().len()));
    let json = serde_json::to_vec(&descriptor).expect("a descriptor serializes");
    if write_private(&path, &json) {
        let again = discover_at(&path, options).expect("a written descriptor is discovered");
        assert_eq!(again, descriptor);
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 6 {
        0 => limits_case(rest),
        1 => cursor_case(rest),
        2 => request_case(rest),
        3 => upload_case(rest),
        4 => stream_case(rest),
        _ => descriptor_case(rest),
    }
});
