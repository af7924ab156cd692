//! Handlers of capability row 8, provider/model administration: `providers.listPublic`,
//! `providers.testPublicConnection`, `providers.addPublic`, `providers.updatePublic`, `providers.remove`,
//! `providers.setCredential` (set and clear), `models.listRuntime`, `models.setStatus`, `models.getPublicConfig`,
//! `models.setPublicConfig`, `models.resetConfig`.
//!
//! Policy (effects, callers, scopes, renderer approval) was decided before dispatch from the surface entries
//! (`agentwire_local_control::surface`); these handlers map the wire DTOs onto [`ProviderRegistry`] and back.
//! Source of the shapes and error choices: DeepChat `src/main/cli/providerModelAdminRoutes.ts` (`not_found` for
//! an unknown provider or model, `conflict` for the built-in provider's adapter, `unavailable` with a fixed
//! "Could not …" message when storage fails, a fixed `errorMsg` for a failed connection test). Registry work
//! (SQLite, the credential file's fsyncs) runs on the blocking pool.

use agentwire_local_control::contract::Method;
use agentwire_local_control::contract::model_config::{
    self as wire_models, ConfigResult, ListRuntimeResult, ModelStatus, ModelSummary, ResetResult,
};
use agentwire_local_control::contract::providers::{
    self as wire, AddResult, CredentialAction, ListResult, PublicProvider, PublicProviderModel,
    PublicProviderSummary, RemoveResult, SetCredentialResult, UpdateResult,
};
use agentwire_local_control::envelope::{ErrorBody, ErrorCode};
use serde_json::Value;

use super::{ControlPlane, error, params, result};
use crate::providers::{
    ApiKey, ModelRecord, NewProvider, ProviderChange, ProviderError, ProviderRecord,
    ProviderRegistry,
};

/// The methods this module serves.
const METHODS: &[&str] = &[
    wire::ListPublic::NAME,
    wire::TestPublicConnection::NAME,
    wire::AddPublic::NAME,
    wire::UpdatePublic::NAME,
    wire::Remove::NAME,
    wire::SetCredential::NAME,
    wire_models::ListRuntime::NAME,
    wire_models::SetStatus::NAME,
    wire_models::GetPublicConfig::NAME,
    wire_models::SetPublicConfig::NAME,
    wire_models::ResetConfig::NAME,
];

/// Whether `method` is one of this module's.
pub(super) fn handles(method: &str) -> bool {
    METHODS.contains(&method)
}

/// The wire error of a registry failure, with the registry's stable code in `details.code` (e.g.
/// `provider_name_taken`). Messages never hold a credential (the registry's errors cannot).
pub(crate) fn provider_error(e: &ProviderError, action: &str) -> ErrorBody {
    let mut details = serde_json::Map::new();
    details.insert("code".into(), Value::String(e.code().to_owned()));
    let body = match e {
        ProviderError::ProviderNotFound(_) => error(ErrorCode::NotFound, "Provider was not found"),
        ProviderError::ModelNotFound { .. } => error(ErrorCode::NotFound, "Model was not found"),
        ProviderError::NoEnabledModel(_)
        | ProviderError::ProviderDisabled(_)
        | ProviderError::ModelDisabled { .. }
        | ProviderError::BuiltinImmutable(_)
        | ProviderError::NameTaken(_) => error(ErrorCode::Conflict, e.to_string()),
        ProviderError::UnsupportedApiType(_)
        | ProviderError::InvalidBaseUrl
        | ProviderError::InvalidModelId
        | ProviderError::TooMany { .. } => error(ErrorCode::InvalidRequest, e.to_string()),
        _ => {
            tracing::warn!(code = e.code(), "provider administration failed: {action}");
            error(ErrorCode::Unavailable, format!("Could not {action}")).retriable(true)
        }
    };
    body.with_details(details)
}

/// Runs `work` on a registry of the plane's data directory on the blocking pool.
async fn with_registry<T: Send + 'static>(
    plane: &ControlPlane,
    action: &'static str,
    work: impl FnOnce(&mut ProviderRegistry) -> Result<T, ProviderError> + Send + 'static,
) -> Result<T, ErrorBody> {
    let data_dir = plane.inner.data_dir.clone();
    let joined = tokio::task::spawn_blocking(move || {
        let mut registry = ProviderRegistry::open(&data_dir)?;
        work(&mut registry)
    })
    .await;
    match joined {
        Ok(answer) => answer.map_err(|e| provider_error(&e, action)),
        Err(_) => Err(error(ErrorCode::Unavailable, format!("Could not {action}")).retriable(true)),
    }
}

fn summary(provider: &ProviderRecord, has_key: bool) -> PublicProviderSummary {
    PublicProviderSummary {
        id: provider.id.clone(),
        name: provider.name.clone(),
        api_type: provider.api_type.clone(),
        enabled: provider.enabled,
        custom: provider.custom,
        stored_credential_configured: has_key,
    }
}

fn public_model(model: &ModelRecord) -> PublicProviderModel {
    PublicProviderModel {
        id: model.model_id.clone(),
        name: model.name.clone(),
        group: crate::providers::DEFAULT_GROUP.to_owned(),
        enabled: model.enabled,
        custom: model.custom,
        vision: model.config.vision,
        function_call: model.config.function_call,
        reasoning: model.config.reasoning,
        enable_search: model.config.enable_search.unwrap_or(false),
        model_type: Some(model.config.model_type),
        context_length: Some(model.config.context_length),
        max_tokens: Some(model.config.max_tokens),
    }
}

fn runtime_model(model: &ModelRecord) -> ModelSummary {
    ModelSummary {
        id: model.model_id.clone(),
        name: model.name.clone(),
        group: crate::providers::DEFAULT_GROUP.to_owned(),
        provider_id: model.provider_id.clone(),
        enabled: Some(model.enabled),
        is_custom: Some(model.custom),
        vision: Some(model.config.vision),
        function_call: Some(model.config.function_call),
        reasoning: Some(model.config.reasoning),
        model_type: Some(model.config.model_type),
        context_length: Some(model.config.context_length),
        max_tokens: Some(model.config.max_tokens),
    }
}

/// The registry's adapter and URL rules ([`ProviderRegistry::add`]), applied before an approval is asked for.
fn check_endpoint(
    api_type: Option<wire::ApiType>,
    base_url: Option<&str>,
) -> Result<(), ErrorBody> {
    if let Some(api_type) = api_type.filter(|t| !t.is_openai_compatible()) {
        return Err(provider_error(
            &ProviderError::UnsupportedApiType(api_type.as_str()),
            "check provider",
        ));
    }
    if base_url.is_some_and(|url| agentwire_provider::validate_base_url(url).is_err()) {
        return Err(provider_error(
            &ProviderError::InvalidBaseUrl,
            "check provider",
        ));
    }
    Ok(())
}

/// The renderer's view of a provider/model mutation, checked before an approval is asked for: `None` for a
/// method of another module; `Some(Err)` when the params break their contract (or, for a key, the provider
/// runtime's key rule), so the renderer is never asked to approve a request that cannot succeed; otherwise the
/// display DeepChat's `approvalDisplay` gives (base URL and updates shown, a key never: its provider, action and
/// kind only).
pub(super) fn review(method: &str, p: &Value) -> Option<Result<Value, ErrorBody>> {
    let p = p.clone();
    let display = match method {
        wire::AddPublic::NAME => params::<wire::AddPublic>(p).and_then(|a| {
            check_endpoint(Some(a.api_type), Some(&a.base_url))?;
            Ok(serde_json::json!({"name": a.name, "apiType": a.api_type, "baseUrl": a.base_url, "enabled": a.enabled}))
        }),
        wire::UpdatePublic::NAME => params::<wire::UpdatePublic>(p).and_then(|u| {
            check_endpoint(u.updates.api_type, u.updates.base_url.as_deref())?;
            Ok(serde_json::json!({"providerId": u.provider_id, "updates": u.updates}))
        }),
        wire::SetCredential::NAME => params::<wire::SetCredential>(p).and_then(|c| {
            if let Some(value) = &c.value {
                ApiKey::new(value).map_err(|e| {
                    error(ErrorCode::InvalidRequest, format!("invalid credential: {e}"))
                })?;
            }
            Ok(serde_json::json!({"providerId": c.provider_id, "action": c.action, "kind": c.kind}))
        }),
        wire::Remove::NAME => params::<wire::Remove>(p)
            .map(|r| serde_json::json!({"providerId": r.provider_id})),
        wire_models::SetStatus::NAME => params::<wire_models::SetStatus>(p).map(|s| {
            serde_json::json!({"providerId": s.provider_id, "modelId": s.model_id, "enabled": s.enabled})
        }),
        wire_models::SetPublicConfig::NAME => params::<wire_models::SetPublicConfig>(p).map(|c| {
            serde_json::json!({"providerId": c.provider_id, "modelId": c.model_id, "config": c.config})
        }),
        wire_models::ResetConfig::NAME => params::<wire_models::ResetConfig>(p)
            .map(|r| serde_json::json!({"providerId": r.provider_id, "modelId": r.model_id})),
        _ => return None,
    };
    Some(display)
}

/// The registry's view of a provider/model mutation, checked after [`review`] and before an approval is asked
/// for: a mutation certain to fail on the stored state (a name taken, the built-in provider given a URL, adapter
/// or key, or removed, an unknown provider, an unknown model where none is added) fails here with the error its
/// dispatch would give, so nobody is asked to approve it. Read-only; the dispatch checks again (the state may
/// change while the approval waits). `Ok` for methods of other modules.
pub(super) async fn precheck(
    plane: &ControlPlane,
    method: &str,
    p: &Value,
) -> Result<(), ErrorBody> {
    type Check = Box<dyn FnOnce(&ProviderRegistry) -> Result<(), ProviderError> + Send>;
    let p = p.clone();
    let check: Check = match method {
        wire::AddPublic::NAME => {
            let a = params::<wire::AddPublic>(p)?;
            Box::new(move |r| r.check_name_free(&a.name, None))
        }
        wire::UpdatePublic::NAME => {
            let u = params::<wire::UpdatePublic>(p)?;
            Box::new(move |r| {
                let current = r.find(&u.provider_id)?;
                if current.is_builtin() {
                    if u.updates.api_type.is_some() {
                        return Err(ProviderError::BuiltinImmutable("given another api type"));
                    }
                    if u.updates.base_url.is_some() {
                        return Err(ProviderError::BuiltinImmutable("given a base url"));
                    }
                }
                match &u.updates.name {
                    Some(name) => r.check_name_free(name, Some(&current.id)),
                    None => Ok(()),
                }
            })
        }
        wire::SetCredential::NAME => {
            let c = params::<wire::SetCredential>(p)?;
            Box::new(move |r| {
                let provider = r.find(&c.provider_id)?;
                if provider.is_builtin() && c.value.is_some() {
                    return Err(ProviderError::BuiltinImmutable("given a credential"));
                }
                Ok(())
            })
        }
        wire::Remove::NAME => {
            let d = params::<wire::Remove>(p)?;
            Box::new(move |r| match r.find(&d.provider_id) {
                Ok(provider) if provider.is_builtin() => {
                    Err(ProviderError::BuiltinImmutable("removed"))
                }
                // An unknown provider is `{"removed":false}`, not an error.
                Ok(_) | Err(ProviderError::ProviderNotFound(_)) => Ok(()),
                Err(e) => Err(e),
            })
        }
        wire_models::SetStatus::NAME => {
            let s = params::<wire_models::SetStatus>(p)?;
            Box::new(move |r| {
                let provider = r.find(&s.provider_id)?;
                // A custom provider adds an unknown model; the built-in provider's list is fixed.
                if provider.is_builtin() {
                    r.model(&provider.id, &s.model_id)?;
                }
                Ok(())
            })
        }
        wire_models::SetPublicConfig::NAME => {
            let c = params::<wire_models::SetPublicConfig>(p)?;
            Box::new(move |r| r.model(&c.provider_id, &c.model_id).map(drop))
        }
        wire_models::ResetConfig::NAME => {
            let c = params::<wire_models::ResetConfig>(p)?;
            Box::new(move |r| r.model(&c.provider_id, &c.model_id).map(drop))
        }
        _ => return Ok(()),
    };
    with_registry(plane, "check provider", move |registry| check(registry)).await
}

/// Serves one of [`METHODS`].
pub(super) async fn dispatch(
    plane: &ControlPlane,
    method: &'static str,
    p: Value,
) -> Result<Value, ErrorBody> {
    match method {
        wire::ListPublic::NAME => {
            let params = params::<wire::ListPublic>(p)?;
            let enabled_only = params.enabled_only.unwrap_or(false);
            let providers = with_registry(plane, "list providers", move |registry| {
                let keys = registry.providers_with_keys()?;
                let mut out = Vec::new();
                for provider in registry.list(enabled_only)? {
                    let models = registry.models(&provider.id)?;
                    let s = summary(&provider, keys.contains(&provider.id));
                    out.push(PublicProvider {
                        id: s.id,
                        name: s.name,
                        api_type: s.api_type,
                        enabled: s.enabled,
                        custom: s.custom,
                        stored_credential_configured: s.stored_credential_configured,
                        models: models.iter().map(public_model).collect(),
                    });
                }
                Ok(out)
            })
            .await?;
            result::<wire::ListPublic>(&ListResult { providers })
        }
        wire::TestPublicConnection::NAME => {
            let params = params::<wire::TestPublicConnection>(p)?;
            test_connection(plane, params).await
        }
        wire::AddPublic::NAME => {
            let params = params::<wire::AddPublic>(p)?;
            let provider = with_registry(plane, "add provider", move |registry| {
                registry.add(NewProvider {
                    name: params.name,
                    api_type: params.api_type,
                    base_url: params.base_url,
                    enabled: params.enabled,
                })
            })
            .await?;
            result::<wire::AddPublic>(&AddResult {
                provider: summary(&provider, false),
            })
        }
        wire::UpdatePublic::NAME => {
            let params = params::<wire::UpdatePublic>(p)?;
            let (provider, rebuild, has_key) =
                with_registry(plane, "update provider", move |registry| {
                    let (provider, rebuild) = registry.update(
                        &params.provider_id,
                        ProviderChange {
                            name: params.updates.name,
                            api_type: params.updates.api_type,
                            base_url: params.updates.base_url,
                            enabled: params.updates.enabled,
                        },
                    )?;
                    let has_key = registry.has_api_key(&provider.id)?;
                    Ok((provider, rebuild, has_key))
                })
                .await?;
            result::<wire::UpdatePublic>(&UpdateResult {
                provider: summary(&provider, has_key),
                requires_rebuild: rebuild,
            })
        }
        wire::Remove::NAME => {
            let params = params::<wire::Remove>(p)?;
            let removed = with_registry(plane, "remove provider", move |registry| {
                registry.remove(&params.provider_id)
            })
            .await?;
            result::<wire::Remove>(&RemoveResult { removed })
        }
        wire::SetCredential::NAME => {
            let params = params::<wire::SetCredential>(p)?;
            let (action, kind) = (params.action, params.kind);
            // The provider runtime's key rules (at most 4096 bytes, no whitespace or control characters) on top of
            // DeepChat's contract (64 KiB); the error names the rule, never the value.
            let key = match (params.action, &params.value) {
                (CredentialAction::Set, Some(value)) => Some(ApiKey::new(value).map_err(|e| {
                    error(
                        ErrorCode::InvalidRequest,
                        format!("invalid credential: {e}"),
                    )
                })?),
                _ => None,
            };
            let (provider_id, configured) =
                with_registry(plane, "update provider credential", move |registry| {
                    let provider_id = registry.find(&params.provider_id)?.id;
                    match &key {
                        Some(key) => registry.set_api_key(&provider_id, key)?,
                        None => {
                            registry.clear_api_key(&provider_id)?;
                        }
                    }
                    Ok((provider_id.clone(), registry.has_api_key(&provider_id)?))
                })
                .await?;
            result::<wire::SetCredential>(&SetCredentialResult {
                provider_id,
                action,
                kind,
                stored_api_key_configured: configured,
            })
        }
        wire_models::ListRuntime::NAME => {
            let params = params::<wire_models::ListRuntime>(p)?;
            let (models, endpoint) = with_registry(plane, "list models", move |registry| {
                let models = registry.models(&params.provider_id)?;
                let endpoint = registry.endpoint(&params.provider_id)?;
                Ok((models, endpoint))
            })
            .await?;
            let mut listed: Vec<ModelSummary> = models.iter().map(runtime_model).collect();
            let (provider, key) = endpoint;
            if let (true, Some(base_url)) = (provider.enabled, provider.base_url.clone()) {
                for id in catalog(base_url, key).await {
                    if listed.len() >= wire::MAX_LISTED_MODELS {
                        break;
                    }
                    if !listed.iter().any(|m| m.id == id) {
                        listed.push(catalog_model(&provider.id, id));
                    }
                }
            }
            result::<wire_models::ListRuntime>(&ListRuntimeResult { models: listed })
        }
        wire_models::SetStatus::NAME => {
            let params = params::<wire_models::SetStatus>(p)?;
            let model = with_registry(plane, "update model status", move |registry| {
                registry.set_model_status(&params.provider_id, &params.model_id, params.enabled)
            })
            .await?;
            result::<wire_models::SetStatus>(&ModelStatus {
                provider_id: model.provider_id,
                model_id: model.model_id,
                enabled: model.enabled,
            })
        }
        wire_models::GetPublicConfig::NAME => {
            let params = params::<wire_models::GetPublicConfig>(p)?;
            let model = with_registry(plane, "read model configuration", move |registry| {
                registry.model(&params.provider_id, &params.model_id)
            })
            .await?;
            result::<wire_models::GetPublicConfig>(&ConfigResult {
                config: model.config,
            })
        }
        wire_models::SetPublicConfig::NAME => {
            let params = params::<wire_models::SetPublicConfig>(p)?;
            let config = with_registry(plane, "update model configuration", move |registry| {
                registry.set_model_config(&params.provider_id, &params.model_id, params.config)
            })
            .await?;
            result::<wire_models::SetPublicConfig>(&ConfigResult { config })
        }
        wire_models::ResetConfig::NAME => {
            let params = params::<wire_models::ResetConfig>(p)?;
            let reset = with_registry(plane, "reset model configuration", move |registry| {
                registry.reset_model_config(&params.provider_id, &params.model_id)
            })
            .await?;
            result::<wire_models::ResetConfig>(&ResetResult { reset })
        }
        other => Err(error(
            ErrorCode::NotFound,
            format!("{other} is not served on /v1/rpc"),
        )),
    }
}

/// The model ids an enabled custom provider lists (`GET <base>/models`), within [`PROVIDER_TEST_TIMEOUT`]; empty when
/// it does not answer (the stored models are listed anyway; upstream errors never cross).
async fn catalog(base_url: String, key: Option<ApiKey>) -> Vec<String> {
    let config = agentwire_provider::OpenAiConfig {
        base_url,
        api_key: key,
        default_model: None,
        limits: agentwire_provider::Limits {
            connect_timeout: PROVIDER_TEST_TIMEOUT,
            total_timeout: PROVIDER_TEST_TIMEOUT,
            ..agentwire_provider::Limits::default()
        },
    };
    let Ok(client) = agentwire_provider::OpenAiProvider::new(config) else {
        return Vec::new();
    };
    match tokio::time::timeout(PROVIDER_TEST_TIMEOUT, client.list_models()).await {
        Ok(Ok(models)) => models
            .into_iter()
            .map(|m| m.id)
            .filter(|id| !id.chars().any(char::is_control))
            .collect(),
        _ => Vec::new(),
    }
}

/// A model the provider lists but the host has not stored: disabled until `models.setStatus` enables (adds) it.
fn catalog_model(provider_id: &str, id: String) -> ModelSummary {
    let config = crate::providers::default_config(
        agentwire_local_control::contract::model_config::ModelType::Chat,
    );
    ModelSummary {
        name: id.clone(),
        id,
        group: crate::providers::DEFAULT_GROUP.to_owned(),
        provider_id: provider_id.to_owned(),
        enabled: Some(false),
        is_custom: Some(false),
        vision: Some(config.vision),
        function_call: Some(config.function_call),
        reasoning: Some(config.reasoning),
        model_type: Some(config.model_type),
        context_length: Some(config.context_length),
        max_tokens: Some(config.max_tokens),
    }
}

/// How long a connection test may take (DeepChat `PUBLIC_PROVIDER_TEST_TIMEOUT_MS`).
pub const PROVIDER_TEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `providers.testPublicConnection`: `not_found` for an unknown provider; otherwise `{"isOk":…}` with a fixed
/// message on failure (upstream status, headers and bodies never cross). The built-in provider answers when it is
/// enabled; a custom provider when `GET <base>/models` succeeds within [`PROVIDER_TEST_TIMEOUT`] (DeepChat's
/// `check` likewise asks the provider's model list). With `modelId`, that model must exist: in the built-in
/// provider's fixed list, or in the list a custom provider answers with (`not_found`, `details.code`
/// `model_not_found`, otherwise; not checked when the provider does not answer, which is `isOk: false` anyway).
async fn test_connection(
    plane: &ControlPlane,
    params: wire::TestParams,
) -> Result<Value, ErrorBody> {
    let provider_id = params.provider_id.clone();
    let builtin_model = params.model_id.clone();
    let (provider, key) = with_registry(plane, "test provider", move |registry| {
        let endpoint = registry.endpoint(&provider_id)?;
        // The built-in provider's models are its fixed list; an unknown one is not_found.
        if let (true, Some(model)) = (endpoint.0.is_builtin(), &builtin_model) {
            registry.model(&endpoint.0.id, model)?;
        }
        Ok(endpoint)
    })
    .await?;
    let mut missing_model = false;
    let ok = provider.enabled
        && match provider.base_url.clone() {
            None => provider.is_builtin(),
            Some(base_url) => {
                let limits = agentwire_provider::Limits {
                    connect_timeout: PROVIDER_TEST_TIMEOUT,
                    total_timeout: PROVIDER_TEST_TIMEOUT,
                    ..agentwire_provider::Limits::default()
                };
                let config = agentwire_provider::OpenAiConfig {
                    base_url,
                    api_key: key,
                    default_model: params.model_id.clone(),
                    limits,
                };
                match agentwire_provider::OpenAiProvider::new(config) {
                    Ok(client) => {
                        match tokio::time::timeout(PROVIDER_TEST_TIMEOUT, client.list_models())
                            .await
                        {
                            Ok(Ok(models)) => {
                                // A model to try must be one the provider lists.
                                missing_model = params
                                    .model_id
                                    .as_ref()
                                    .is_some_and(|wanted| !models.iter().any(|m| &m.id == wanted));
                                true
                            }
                            _ => false,
                        }
                    }
                    Err(_) => false,
                }
            }
        };
    if missing_model {
        let mut details = serde_json::Map::new();
        details.insert("code".into(), Value::String("model_not_found".to_owned()));
        return Err(error(
            ErrorCode::NotFound,
            "Model was not found in the provider's model list",
        )
        .with_details(details));
    }
    result::<wire::TestPublicConnection>(&wire::TestResult {
        is_ok: ok,
        error_msg: (!ok).then(|| "Provider connection failed".to_owned()),
    })
}
