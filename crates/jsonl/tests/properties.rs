//! Property tests: any split of any input gives the frames of the reference model.

mod common;

use common::invariants::{check_fuzz_input, check_split};

use agentwire_jsonl::Limits;
use proptest::prelude::*;

/// Pieces that exercise every rule: values, banners, terminators, whitespace, U+2028, invalid UTF-8,
/// truncated JSON and runs long enough to cross small limits.
fn piece() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"{\"id\":1,\"method\":\"ping\"}".to_vec()),
        Just(b"[1,2,3]".to_vec()),
        Just(b"\"a\xe2\x80\xa8b\xe2\x80\xa9c\"".to_vec()),
        Just(b"{\"a\":".to_vec()),
        Just(b"Starting agent...".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b" ".to_vec()),
        Just(b"\t".to_vec()),
        Just(b"\xff".to_vec()),
        Just(b"\xe2\x82".to_vec()),
        Just("é€".as_bytes().to_vec()),
        (0usize..80).prop_map(|len| vec![b'x'; len]),
        (0usize..80).prop_map(|len| vec![b' '; len]),
        (0usize..80).prop_map(|len| format!("\"{}\"", "y".repeat(len)).into_bytes()),
    ]
}

fn input() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(piece(), 0..24).prop_map(|pieces| pieces.concat())
}

fn limits() -> impl Strategy<Value = Limits> {
    (
        prop_oneof![0usize..64, Just(agentwire_jsonl::DEFAULT_MAX_LINE_BYTES)],
        0usize..32,
    )
        .prop_map(|(max_line_bytes, max_preview_bytes)| Limits {
            max_line_bytes,
            max_preview_bytes,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_split_matches_the_reference(
        limits in limits(),
        input in input(),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let cuts: Vec<usize> = cuts.iter().map(|cut| cut % (input.len() + 1)).collect();
        check_split(&limits, &input, &cuts);
        check_split(&limits, &input, &[]);
    }

    #[test]
    fn fuzz_body_holds_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        check_fuzz_input(&data);
    }

    #[test]
    fn fuzz_body_holds_on_structured_input(
        head in proptest::array::uniform3(any::<u8>()),
        input in input(),
    ) {
        let data = [head.as_slice(), &input].concat();
        check_fuzz_input(&data);
    }
}

/// Small inputs cut into three pieces at every pair of byte boundaries.
#[test]
fn every_pair_of_cuts_in_small_inputs() {
    let inputs: [&[u8]; 8] = [
        b"{\"a\":1}\r\n[2]\n",
        b"  \r\n\n3\r",
        b"banner\n{\"a\":\"\xe2\x80\xa8\"}\r\n{\"a\":",
        b"\"12345678\"\r\n\"123456789\"\r\n1",
        b"123456789012\r\r\n\"x\"",
        b"\xff\xfe\n\r\r\n7",
        b"\n\n\n",
        b"\r",
    ];
    for max_line_bytes in [0, 1, 5, 10, 11, 64] {
        let limits = Limits {
            max_line_bytes,
            max_preview_bytes: 4,
        };
        for input in inputs {
            for first in 0..=input.len() {
                for second in first..=input.len() {
                    check_split(&limits, input, &[first, second]);
                }
            }
        }
    }
}
