//! Surface entries of capability row 8, provider/model administration: `providers.*` and the `models.*`
//! administration methods (`listRuntime`, `setStatus`, `getPublicConfig`, `setPublicConfig`, `resetConfig`).
//!
//! Source: DeepChat `src/main/cli/surface.ts` (`CLI_SURFACE_V2_ENTRIES`, the entries of these eleven contracts:
//! effects, callers, scopes, limits, audit projections) and the spec's "V2 Capability Matrix" row 8 (reads for
//! humans and scoped agents; execution-config, credential and destructive mutations for humans only, behind a
//! renderer approval). No audit projection ever includes a credential value or a config value.

use serde_json::Value;

use super::{
    APPROVED_MUTATION_LIMITS, ApprovalMode, AuditProjection, DIAGNOSTIC_LIMITS, Effect, EffectRule,
    HUMAN, HUMAN_AND_AGENT, KIB, MAX_REQUEST_TIMEOUT, MethodSpec, RouteLimits, Transport,
    select_scalar_fields,
};
use crate::caller::Scope;

/// The sorted keys of the object field `field` of `params` (DeepChat `objectFieldKeys`).
fn object_field_keys(params: &Value, field: &str) -> Vec<Value> {
    let mut keys: Vec<String> = params
        .get(field)
        .and_then(Value::as_object)
        .map(|map| map.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys.into_iter().map(Value::String).collect()
}

fn with_fields(params: &Value, scalars: &[&str], object: &str) -> Value {
    let mut projected = select_scalar_fields(params, scalars);
    if let Value::Object(map) = &mut projected {
        map.insert(
            "fields".to_owned(),
            Value::Array(object_field_keys(params, object)),
        );
    }
    projected
}

fn update_audit(params: &Value) -> Value {
    with_fields(params, &["providerId"], "updates")
}

fn set_config_audit(params: &Value) -> Value {
    with_fields(params, &["providerId", "modelId"], "config")
}

fn admin(
    method: &'static str,
    effect: Effect,
    scope: &'static [Scope],
    fields: &'static [&'static str],
    limits: RouteLimits,
) -> MethodSpec {
    MethodSpec {
        method,
        effect: EffectRule::Fixed(effect),
        callers: HUMAN,
        scopes: scope,
        transport: Transport::Rpc,
        approval: ApprovalMode::Policy,
        agent_policy: None,
        agent_input_allowed: None,
        audit: AuditProjection::Fields(fields),
        limits,
    }
}

fn read(
    method: &'static str,
    scope: &'static [Scope],
    audit: AuditProjection,
    limits: RouteLimits,
) -> MethodSpec {
    MethodSpec {
        method,
        effect: EffectRule::Fixed(Effect::Read),
        callers: HUMAN_AND_AGENT,
        scopes: scope,
        transport: Transport::Rpc,
        approval: ApprovalMode::Never,
        agent_policy: None,
        agent_input_allowed: None,
        audit,
        limits,
    }
}

/// The eleven entries, in DeepChat's order.
pub(super) fn specs() -> Vec<MethodSpec> {
    const WRITE: &[Scope] = &[Scope::ProvidersWrite];
    let long = RouteLimits {
        max_body_bytes: 16 * KIB,
        timeout: MAX_REQUEST_TIMEOUT,
    };
    let mut set_config = admin(
        "models.setPublicConfig",
        Effect::ExecutionConfig,
        WRITE,
        &[],
        RouteLimits {
            max_body_bytes: 64 * KIB,
            timeout: APPROVED_MUTATION_LIMITS.timeout,
        },
    );
    set_config.audit = AuditProjection::Custom(set_config_audit);
    let mut update = admin(
        "providers.updatePublic",
        Effect::ExecutionConfig,
        WRITE,
        &[],
        APPROVED_MUTATION_LIMITS,
    );
    update.audit = AuditProjection::Custom(update_audit);
    vec![
        read(
            "providers.listPublic",
            &[Scope::ProvidersRead],
            AuditProjection::Nothing,
            DIAGNOSTIC_LIMITS,
        ),
        MethodSpec {
            method: "providers.testPublicConnection",
            effect: EffectRule::Fixed(Effect::Compute),
            callers: HUMAN,
            scopes: &[Scope::ProvidersRead],
            transport: Transport::Rpc,
            approval: ApprovalMode::Never,
            agent_policy: None,
            agent_input_allowed: None,
            audit: AuditProjection::Fields(&["providerId", "modelId"]),
            limits: long,
        },
        admin(
            "providers.addPublic",
            Effect::ExecutionConfig,
            WRITE,
            &["name", "apiType", "enabled"],
            APPROVED_MUTATION_LIMITS,
        ),
        update,
        admin(
            "providers.setCredential",
            Effect::Credential,
            &[Scope::ProvidersCredential],
            &["providerId", "action", "kind"],
            RouteLimits {
                max_body_bytes: 128 * KIB,
                timeout: APPROVED_MUTATION_LIMITS.timeout,
            },
        ),
        admin(
            "providers.remove",
            Effect::Destructive,
            WRITE,
            &["providerId"],
            APPROVED_MUTATION_LIMITS,
        ),
        read(
            "models.listRuntime",
            &[Scope::ModelsRead],
            AuditProjection::Fields(&["providerId"]),
            long,
        ),
        read(
            "models.getPublicConfig",
            &[Scope::ModelsRead],
            AuditProjection::Fields(&["providerId", "modelId"]),
            DIAGNOSTIC_LIMITS,
        ),
        admin(
            "models.setStatus",
            Effect::ExecutionConfig,
            WRITE,
            &["providerId", "modelId", "enabled"],
            APPROVED_MUTATION_LIMITS,
        ),
        set_config,
        admin(
            "models.resetConfig",
            Effect::ExecutionConfig,
            WRITE,
            &["providerId", "modelId"],
            APPROVED_MUTATION_LIMITS,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::Surface;
    use serde_json::{Value, json};

    #[test]
    fn deepchat_entries_match() {
        let surface = Surface::standard();
        let check = |method: &str, expect: Value| {
            let spec = surface.get(method).expect(method);
            assert_eq!(
                serde_json::to_value(spec.capability()).expect("serialize"),
                expect,
                "{method}"
            );
        };
        check(
            "providers.listPublic",
            json!({"method":"providers.listPublic","possibleEffects":["read"],"callers":["human","agent"],
                "scopes":["providers:read"],"transport":"rpc","approval":"never","maxBodyBytes":16384,"timeoutMs":5000}),
        );
        check(
            "providers.testPublicConnection",
            json!({"method":"providers.testPublicConnection","possibleEffects":["compute"],"callers":["human"],
                "scopes":["providers:read"],"transport":"rpc","approval":"never","maxBodyBytes":16384,"timeoutMs":1800000}),
        );
        check(
            "providers.setCredential",
            json!({"method":"providers.setCredential","possibleEffects":["credential"],"callers":["human"],
                "scopes":["providers:credential"],"transport":"rpc","approval":"policy","maxBodyBytes":131072,"timeoutMs":300000}),
        );
        check(
            "providers.remove",
            json!({"method":"providers.remove","possibleEffects":["destructive"],"callers":["human"],
                "scopes":["providers:write"],"transport":"rpc","approval":"policy","maxBodyBytes":16384,"timeoutMs":300000}),
        );
        check(
            "models.setPublicConfig",
            json!({"method":"models.setPublicConfig","possibleEffects":["execution-config"],"callers":["human"],
                "scopes":["providers:write"],"transport":"rpc","approval":"policy","maxBodyBytes":65536,"timeoutMs":300000}),
        );
        check(
            "models.listRuntime",
            json!({"method":"models.listRuntime","possibleEffects":["read"],"callers":["human","agent"],
                "scopes":["models:read"],"transport":"rpc","approval":"never","maxBodyBytes":16384,"timeoutMs":1800000}),
        );
    }

    #[test]
    fn audit_projections_never_carry_values() {
        let surface = Surface::standard();
        let project =
            |method: &str, params: Value| surface.get(method).expect(method).audit.project(&params);
        assert_eq!(
            project(
                "providers.setCredential",
                json!({"providerId":"p","action":"set","kind":"api-key","value":"sk-PLANTED"})
            ),
            json!({"providerId":"p","action":"set","kind":"api-key"})
        );
        assert_eq!(
            project(
                "models.setPublicConfig",
                json!({"providerId":"p","modelId":"m","config":{"temperature":1,"maxTokens":9}})
            ),
            json!({"providerId":"p","modelId":"m","fields":["maxTokens","temperature"]})
        );
        assert_eq!(
            project(
                "providers.updatePublic",
                json!({"providerId":"p","updates":{"baseUrl":"http://h","name":"n"}})
            ),
            json!({"providerId":"p","fields":["baseUrl","name"]})
        );
    }
}
