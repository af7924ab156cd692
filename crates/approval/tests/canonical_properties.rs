//! Property tests of canonical JSON: independent of key insertion order, valid JSON that parses back to the same
//! value, keys sorted at every level, and equal hashes exactly for equal canonical forms.

use agentwire_approval::{ArgsHash, CanonicalLimits, canonical_json};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// JSON values without floats (their canonical form is normalized, so they would not round-trip bit for bit).
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((any::<String>(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// The same value with every object's entries inserted in reverse order.
fn reinsert_reversed(value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(reinsert_reversed).collect()),
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.reverse();
            Value::Object(
                entries
                    .into_iter()
                    .map(|(key, item)| (key.clone(), reinsert_reversed(item)))
                    .collect(),
            )
        }
        other => other.clone(),
    }
}

/// Reads the keys of every object in document order straight from the canonical text (serde_json's `Map` may
/// reorder them, so the parsed value cannot show the order).
fn object_key_orders(text: &str) -> Vec<Vec<String>> {
    use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
    use std::fmt;

    struct Orders<'a>(&'a mut Vec<Vec<String>>);

    impl<'de> serde::de::DeserializeSeed<'de> for Orders<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
            deserializer.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Orders<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("json")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Orders(self.0))?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let slot = self.0.len();
            self.0.push(Vec::new());
            while let Some(key) = map.next_key::<String>()? {
                self.0[slot].push(key);
                map.next_value_seed(Orders(self.0))?;
            }
            Ok(())
        }
    }

    let mut orders = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_str(text);
    serde::de::DeserializeSeed::deserialize(Orders(&mut orders), &mut deserializer)
        .expect("canonical json parses");
    orders
}

proptest! {
    #[test]
    fn canonical_form_ignores_insertion_order_and_round_trips(value in json_value()) {
        let limits = CanonicalLimits::default();
        let canonical = canonical_json(&value, &limits).expect("small values fit the limits");
        prop_assert_eq!(&canonical, &canonical_json(&reinsert_reversed(&value), &limits).expect("fits"));
        let text = std::str::from_utf8(&canonical).expect("utf-8");
        let parsed: Value = serde_json::from_str(text).expect("canonical form is JSON");
        prop_assert_eq!(&parsed, &value);
        for keys in object_key_orders(text) {
            let units: Vec<Vec<u16>> = keys.iter().map(|key| key.encode_utf16().collect()).collect();
            prop_assert!(units.windows(2).all(|pair| pair[0] < pair[1]), "{keys:?}");
        }
        prop_assert!(!canonical.contains(&b'\n'));
    }

    #[test]
    fn hashes_are_equal_exactly_when_canonical_forms_are(left in json_value(), right in json_value()) {
        let limits = CanonicalLimits::default();
        let left_bytes = canonical_json(&left, &limits).expect("fits");
        let right_bytes = canonical_json(&right, &limits).expect("fits");
        let left_hash = ArgsHash::of(&left, &limits).expect("fits");
        let right_hash = ArgsHash::of(&right, &limits).expect("fits");
        prop_assert_eq!(left_bytes == right_bytes, left_hash == right_hash);
        prop_assert_eq!(left_hash, ArgsHash::of_canonical(&left_bytes));
    }

    #[test]
    fn floats_canonicalize_to_a_number_that_parses_back_to_the_same_f64(float in any::<f64>()) {
        prop_assume!(float.is_finite());
        let value = Value::from(float);
        let text = String::from_utf8(canonical_json(&value, &CanonicalLimits::default()).expect("fits"))
            .expect("utf-8");
        let back: f64 = text.parse().expect("a JSON number");
        // -0.0 prints as 0, as in JavaScript; everything else round-trips exactly.
        prop_assert!(back == float, "{float:?} -> {text}");
        prop_assert_eq!(back.to_bits() == float.to_bits(), float != 0.0 || float.is_sign_positive());
    }
}

#[test]
fn a_serde_json_value_cannot_hold_a_non_finite_number() {
    // Why `CanonicalError::NonFiniteNumber` is defensive: serde_json refuses these at construction and parsing.
    assert!(serde_json::Number::from_f64(f64::NAN).is_none());
    assert!(serde_json::Number::from_f64(f64::INFINITY).is_none());
    assert_eq!(Value::from(f64::NEG_INFINITY), Value::Null);
    assert!(serde_json::from_str::<Value>("1e400").is_err());
}
