//! The official schema itself: it compiles offline (internal `$ref`s only), and every example it carries (the
//! `default` values of its properties) validates and round-trips through the v1 types.

mod support;

use agentwire_acp::schema::{
    AgentAuthCapabilities, AgentCapabilities, AuthCapabilities, ClientCapabilities,
    FileSystemCapabilities, McpCapabilities, PromptCapabilities, SessionCapabilities,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use support::{schema_root, validate_def};

/// Deserializes `value` as `T` and serializes it back.
fn round_trip<T: DeserializeOwned + Serialize>(value: &Value) -> Value {
    let typed: T = serde_json::from_value(value.clone()).expect("example deserializes");
    serde_json::to_value(typed).expect("serializes")
}

/// The `$defs` name a property schema points to (`$ref` or `allOf: [{$ref}]`).
fn ref_target(property: &Value) -> Option<String> {
    let reference = property.get("$ref").or_else(|| {
        property
            .get("allOf")
            .and_then(|all| all.get(0))
            .and_then(|first| first.get("$ref"))
    })?;
    reference
        .as_str()?
        .strip_prefix("#/$defs/")
        .map(str::to_owned)
}

#[test]
fn every_schema_default_validates_and_round_trips() {
    let defs = schema_root()["$defs"].as_object().expect("$defs");
    let mut checked = Vec::new();
    for (def_name, def) in defs {
        let Some(properties) = def.get("properties").and_then(Value::as_object) else {
            continue;
        };
        for (property_name, property) in properties {
            let Some(example) = property.get("default") else {
                continue;
            };
            let target = ref_target(property);
            // Every example is valid for what it describes.
            if let Some(target) = &target {
                validate_def(target, example)
                    .unwrap_or_else(|e| panic!("{def_name}.{property_name}: {e}"));
            }
            let round_tripped = match target.as_deref() {
                Some("AgentCapabilities") => round_trip::<AgentCapabilities>(example),
                Some("ClientCapabilities") => round_trip::<ClientCapabilities>(example),
                Some("PromptCapabilities") => round_trip::<PromptCapabilities>(example),
                Some("McpCapabilities") => round_trip::<McpCapabilities>(example),
                Some("FileSystemCapabilities") => round_trip::<FileSystemCapabilities>(example),
                Some("AuthCapabilities") => round_trip::<AuthCapabilities>(example),
                Some("SessionCapabilities") => round_trip::<SessionCapabilities>(example),
                Some("AgentAuthCapabilities") => round_trip::<AgentAuthCapabilities>(example),
                // Scalars and the elicitation schema defaults are not whole messages of ours.
                _ => continue,
            };
            assert_eq!(&round_tripped, example, "{def_name}.{property_name}");
            checked.push(format!("{def_name}.{property_name}"));
        }
    }
    // InitializeRequest.clientCapabilities, InitializeResponse.agentCapabilities, the capability objects' parts.
    assert!(checked.len() >= 8, "{checked:?}");
}

#[test]
fn the_envelopes_compile_and_judge() {
    let request = json!({"jsonrpc":"2.0","id":0,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}});
    validate_def("ClientRequest", &request).expect("valid request");
    validate_def("NewSessionRequest", &request["params"]).expect("valid params");
    // mcpServers is required: a client that omits it is wrong.
    let missing = json!({"cwd":"/w"});
    assert!(validate_def("NewSessionRequest", &missing).is_err());
    // protocolVersion is an integer; the Kandev dialect's string is not ACP v1.
    assert!(validate_def("InitializeRequest", &json!({"protocolVersion":"1.0"})).is_err());
    assert!(validate_def("InitializeRequest", &json!({"protocolVersion":1})).is_ok());
    let cancelled = json!({"outcome":{"outcome":"cancelled"}});
    validate_def("RequestPermissionResponse", &cancelled).expect("cancelled outcome");
    assert!(validate_def("StopReason", &json!("bored")).is_err());
    let update = json!({"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}});
    validate_def("SessionNotification", &update).expect("update");
}
