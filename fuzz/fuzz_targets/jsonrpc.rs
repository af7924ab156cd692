//! Fuzz target `jsonrpc`: `Message::from_slice` on arbitrary bytes never panics; a message it accepts serializes
//! to one line that parses back to the same message; a message it refuses carries code -32700 or -32600, and its
//! answer exists exactly when it is not response-like and is itself a valid error response.
#![no_main]

use agentwire_jsonrpc::{ErrorCode, Message};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    match Message::from_slice(data) {
        Ok(message) => {
            let line = message.to_line().expect("an accepted message serializes");
            assert_eq!(line.last(), Some(&b'\n'), "one line, newline-terminated");
            assert!(
                !line[..line.len() - 1].contains(&b'\n'),
                "no newline inside the line"
            );
            let again = Message::from_slice(&line[..line.len() - 1])
                .expect("a serialized message parses again");
            assert_eq!(again, message, "round trip changes the message");
        }
        Err(invalid) => {
            assert!(
                invalid.code == ErrorCode::PARSE_ERROR
                    || invalid.code == ErrorCode::INVALID_REQUEST,
                "unexpected code {:?}",
                invalid.code
            );
            match invalid.answer() {
                Some(answer) => {
                    assert!(
                        !invalid.response_like,
                        "a response-like message is never answered"
                    );
                    let line = Message::Response(answer.clone())
                        .to_line()
                        .expect("an answer serializes");
                    let parsed = Message::from_slice(&line[..line.len() - 1])
                        .expect("the answer is a valid message");
                    assert_eq!(parsed, Message::Response(answer));
                }
                None => assert!(invalid.response_like),
            }
        }
    }
});
