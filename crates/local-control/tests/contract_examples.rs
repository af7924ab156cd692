//! Every example of `fixtures/deepchat/examples.json` (DeepChat test literals and schema-derived cases, see
//! the fixture's README for provenance) decodes, validates and re-encodes as DeepChat's zod contract says.

use agentwire_local_control::contract::{
    self, ContractError, Method, artifacts, cli, ours, runs, runs::RunEvent, settings,
};
use serde_json::Value;

const EXAMPLES: &str = include_str!("../fixtures/deepchat/examples.json");

fn round_trip<M: Method>(kind: &str, json: Value) -> Result<Value, ContractError> {
    let encoded = match kind {
        "params" => serde_json::to_value(contract::decode_params::<M>(json)?),
        "result" => serde_json::to_value(contract::decode_result::<M>(json)?),
        other => panic!("unknown kind {other}"),
    };
    Ok(encoded.expect("a decoded DTO serializes"))
}

fn decode(
    method: &str,
    kind: &str,
    event: Option<&str>,
    json: Value,
) -> Result<Value, ContractError> {
    if kind == "event" {
        return RunEvent::decode(event.expect("event name"), json).map(|e| e.data());
    }
    match method {
        "cli.status" => round_trip::<cli::Status>(kind, json),
        "cli.version" => round_trip::<cli::Version>(kind, json),
        "cli.capabilities" => round_trip::<cli::Capabilities>(kind, json),
        "cli.doctor" => round_trip::<cli::Doctor>(kind, json),
        "sessions.runDetached" => round_trip::<runs::RunDetached>(kind, json),
        "runs.get" => round_trip::<runs::Get>(kind, json),
        "runs.cancel" => round_trip::<runs::Cancel>(kind, json),
        "events.subscribe" => round_trip::<runs::Subscribe>(kind, json),
        "artifacts.describe" => round_trip::<artifacts::Describe>(kind, json),
        "artifacts.read" => round_trip::<artifacts::Read>(kind, json),
        "artifacts.delete" => round_trip::<artifacts::Delete>(kind, json),
        "settings.getPublic" => round_trip::<settings::GetPublic>(kind, json),
        "settings.updatePublic" => round_trip::<settings::UpdatePublic>(kind, json),
        "threads.list" => round_trip::<ours::ThreadsList>(kind, json),
        "threads.get" => round_trip::<ours::ThreadsGet>(kind, json),
        "approvals.listPending" => round_trip::<ours::ApprovalsListPending>(kind, json),
        "runs.exportTranscript" => round_trip::<ours::RunsExportTranscript>(kind, json),
        other => panic!("no method {other}"),
    }
}

#[test]
fn deepchat_examples_decode_as_the_contract_says() {
    let fixture: Value = serde_json::from_str(EXAMPLES).expect("fixture is JSON");
    let cases = fixture["cases"].as_array().expect("cases");
    assert!(cases.len() >= 40);
    for case in cases {
        let method = case["method"].as_str().expect("method");
        let kind = case["kind"].as_str().expect("kind");
        let event = case["event"].as_str();
        let json = case["json"].clone();
        let label = format!("{method} {kind} {event:?} from {}", case["source"]);
        let got = decode(method, kind, event, json.clone());
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
}

#[test]
fn method_names_are_the_wire_names() {
    let names = [
        cli::Status::NAME,
        cli::Version::NAME,
        cli::Capabilities::NAME,
        cli::Doctor::NAME,
        runs::RunDetached::NAME,
        runs::Get::NAME,
        runs::Cancel::NAME,
        runs::Subscribe::NAME,
        artifacts::Describe::NAME,
        artifacts::Read::NAME,
        artifacts::Delete::NAME,
        settings::GetPublic::NAME,
        settings::UpdatePublic::NAME,
        ours::ThreadsList::NAME,
        ours::ThreadsGet::NAME,
        ours::ApprovalsListPending::NAME,
        ours::RunsExportTranscript::NAME,
        ours::AgentTokensIssue::NAME,
        ours::AgentTokensRevoke::NAME,
    ];
    for name in names {
        assert!(
            agentwire_local_control::envelope::is_valid_method(name),
            "{name}"
        );
    }
    let unique: std::collections::HashSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len());
    let listed: Vec<&str> = contract::DEEPCHAT_METHODS
        .iter()
        .chain(contract::OUR_METHODS.iter())
        .copied()
        .collect();
    assert_eq!(listed, names);
}
