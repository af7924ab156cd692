//! The tokio-util shell: `FramedRead` / `FramedWrite` over async streams.
#![cfg(feature = "codec")]

use agentwire_jsonl::{EncodeError, Frame, InvalidLine, JsonlDecoder, JsonlEncoder, Limits};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio_util::codec::{FramedRead, FramedWrite};

/// Writes `chunks` into one end of an in-process stream (each chunk a separate write), closes it, and
/// collects the frames `FramedRead` yields from the other end.
async fn read_frames(limits: Limits, chunks: Vec<Vec<u8>>) -> Vec<Frame> {
    let (mut writer, reader) = tokio::io::duplex(64 * 1024);
    let writing = tokio::spawn(async move {
        for chunk in chunks {
            writer.write_all(&chunk).await?;
        }
        writer.shutdown().await
    });
    let mut framed = FramedRead::new(reader, JsonlDecoder::new(limits));
    let mut frames = Vec::new();
    while let Some(frame) = framed.next().await {
        frames.push(frame.expect("the decoder never fails"));
    }
    writing.await.expect("writer task").expect("writing");
    frames
}

fn invalid(preview: &str, len: usize, unterminated: bool, error: &str) -> Frame {
    Frame::Invalid(InvalidLine {
        preview: preview.to_owned(),
        len,
        unterminated,
        error: error.to_owned(),
    })
}

#[tokio::test]
async fn framed_read_yields_every_frame_and_the_final_line() {
    let chunks = [
        "Agent v1 ready\r\n{\"id\"",
        ":1}\n\n",
        "{\"id\":2}\r",
        "\n{\"id\":3}",
    ]
    .map(|chunk| chunk.as_bytes().to_vec())
    .to_vec();
    let frames = read_frames(Limits::default(), chunks).await;
    assert_eq!(
        frames,
        [
            invalid(
                "Agent v1 ready",
                14,
                false,
                "expected value at line 1 column 1"
            ),
            Frame::Json(Bytes::from_static(b"{\"id\":1}")),
            Frame::Json(Bytes::from_static(b"{\"id\":2}")),
            Frame::Json(Bytes::from_static(b"{\"id\":3}")),
        ]
    );
}

#[tokio::test]
async fn framed_read_reports_truncated_final_line() {
    let frames = read_frames(Limits::default(), vec![b"{\"id\":1}\n{\"id\":".to_vec()]).await;
    assert_eq!(
        frames,
        [
            Frame::Json(Bytes::from_static(b"{\"id\":1}")),
            invalid(
                "{\"id\":",
                6,
                true,
                "EOF while parsing a value at line 1 column 6"
            ),
        ]
    );
}

#[tokio::test]
async fn framed_read_survives_a_twenty_mb_line() {
    let mut chunks: Vec<Vec<u8>> = (0..20_000_000 / 50_000)
        .map(|_| vec![b'a'; 50_000])
        .collect();
    chunks.push(b"\r\n[\"next\"]\n".to_vec());
    let frames = read_frames(Limits::default(), chunks).await;
    assert_eq!(
        frames,
        [
            Frame::TooLong {
                bytes_discarded: 20_000_000
            },
            Frame::Json(Bytes::from_static(b"[\"next\"]")),
        ]
    );
}

#[tokio::test]
async fn framed_write_round_trips_through_framed_read() {
    let mut sink = FramedWrite::new(Vec::new(), JsonlEncoder);
    sink.send(
        serde_json::json!({"jsonrpc": "2.0", "method": "note", "params": {"text": "a\nb\u{2028}"}}),
    )
    .await
    .unwrap();
    // A value serde_json refuses writes nothing, and the sink stays usable.
    let mut bad = std::collections::BTreeMap::new();
    bad.insert((1, 2), 3);
    let error = sink.send(&bad).await.unwrap_err();
    assert!(matches!(error, EncodeError::Serialize(_)), "{error}");
    sink.send(&[1, 2, 3]).await.unwrap();
    let written = sink.into_inner();
    assert_eq!(
        String::from_utf8(written.clone()).unwrap(),
        "{\"jsonrpc\":\"2.0\",\"method\":\"note\",\"params\":{\"text\":\"a\\nb\u{2028}\"}}\n[1,2,3]\n"
    );

    let frames: Vec<Frame> = FramedRead::new(&written[..], JsonlDecoder::default())
        .map(|frame| frame.unwrap())
        .collect()
        .await;
    let value: serde_json::Value = frames[0].parse().unwrap();
    assert_eq!(value["params"]["text"], "a\nb\u{2028}");
    assert_eq!(frames[1].parse::<Vec<u8>>().unwrap(), [1, 2, 3]);
    assert_eq!(frames.len(), 2);
}
