//! Every example of `fixtures/deepchat/providers-examples.json` (provider/model administration shapes written from
//! DeepChat's zod schemas; each case names its source) decodes, validates and re-encodes as the contract says.

use agentwire_local_control::contract::{self, ContractError, Method, model_config, providers};
use serde_json::Value;

const EXAMPLES: &str = include_str!("../fixtures/deepchat/providers-examples.json");

fn round_trip<M: Method>(kind: &str, json: Value) -> Result<Value, ContractError> {
    let encoded = match kind {
        "params" => serde_json::to_value(contract::decode_params::<M>(json)?),
        "result" => serde_json::to_value(contract::decode_result::<M>(json)?),
        other => panic!("unknown kind {other}"),
    };
    Ok(encoded.expect("a decoded DTO serializes"))
}

fn decode(method: &str, kind: &str, json: Value) -> Result<Value, ContractError> {
    match method {
        providers::ListPublic::NAME => round_trip::<providers::ListPublic>(kind, json),
        providers::TestPublicConnection::NAME => {
            round_trip::<providers::TestPublicConnection>(kind, json)
        }
        providers::AddPublic::NAME => round_trip::<providers::AddPublic>(kind, json),
        providers::UpdatePublic::NAME => round_trip::<providers::UpdatePublic>(kind, json),
        providers::Remove::NAME => round_trip::<providers::Remove>(kind, json),
        providers::SetCredential::NAME => round_trip::<providers::SetCredential>(kind, json),
        model_config::ListRuntime::NAME => round_trip::<model_config::ListRuntime>(kind, json),
        model_config::SetStatus::NAME => round_trip::<model_config::SetStatus>(kind, json),
        model_config::GetPublicConfig::NAME => {
            round_trip::<model_config::GetPublicConfig>(kind, json)
        }
        model_config::SetPublicConfig::NAME => {
            round_trip::<model_config::SetPublicConfig>(kind, json)
        }
        model_config::ResetConfig::NAME => round_trip::<model_config::ResetConfig>(kind, json),
        other => panic!("no method {other}"),
    }
}

#[test]
fn provider_and_model_examples_decode_as_the_contract_says() {
    let fixture: Value = serde_json::from_str(EXAMPLES).expect("fixture is JSON");
    let cases = fixture["cases"].as_array().expect("cases");
    let mut methods = std::collections::BTreeSet::new();
    for case in cases {
        let method = case["method"].as_str().expect("method");
        let kind = case["kind"].as_str().expect("kind");
        methods.insert(method);
        let json = case["json"].clone();
        let label = format!("{method} {kind} from {}", case["source"]);
        let got = decode(method, kind, json.clone());
        if case["valid"].as_bool().expect("valid") {
            let expect = case.get("canonical").cloned().unwrap_or(json);
            assert_eq!(
                got.unwrap_or_else(|e| panic!("{label}: {e}")),
                expect,
                "{label}"
            );
        } else {
            let err = got.expect_err(&label);
            assert_eq!(
                err.code(),
                case["code"].as_str().expect("code"),
                "{label}: {err}"
            );
        }
    }
    // Every method of capability row 8 has at least one example.
    assert_eq!(methods.len(), 11, "{methods:?}");
}
