//! The surface registry: the deny-by-default allowlist of methods the local socket exposes, with their policy.
//!
//! Each [`MethodSpec`] says what a method does ([`Effect`]), who may call it ([`Principal`]s), which scopes it
//! needs, how it travels ([`Transport`]), whether renderer approval may be required ([`ApprovalMode`]) and its
//! byte/time bounds ([`RouteLimits`]). [`Surface::lookup`] is the only way in: a method that is not registered,
//! or is registered for another transport, is a typed `not_found` — there is no fallback to an internal route.
//! [`Surface::capabilities`] is the `cli.capabilities` payload, built from the same entries.
//!
//! Source: DeepChat spec, sections "Contract Ownership and Surface" and "V2 Capability Matrix";
//! DeepChat `src/main/cli/surface.ts` (`CLI_SURFACE_V2_ENTRIES`: effects, callers, scopes, limits) and
//! `src/shared/contracts/routes/cli.routes.ts` (`LocalControlCapabilitySchema`).

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::caller::{Principal, Scope};
use crate::policy::{self, EffectDecision, PolicyError};

mod models;
mod ocr;
mod providers;

/// What a method does, which decides the policy row. On the wire kebab-case, e.g. `"local-maintenance"`.
///
/// Source: DeepChat `LOCAL_CONTROL_EFFECTS`; the rows are in [`policy::effect_decision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Effect {
    /// Status, redacted lists, snapshots.
    Read,
    /// Model, media, OCR or Agent work.
    Compute,
    /// Cache clear, owned artifact delete, run cancel.
    LocalMaintenance,
    /// UI-safe preferences (font size, notifications).
    PreferenceWrite,
    /// Security policy, MCP enablement, unknown settings.
    SecurityConfig,
    /// Default provider/model, executable configuration.
    ExecutionConfig,
    /// Skill/MCP installation.
    SupplyChain,
    /// Secret updates.
    Credential,
    /// Removal of providers, Skills, MCP servers.
    Destructive,
}

impl Effect {
    /// Every effect, in DeepChat's order.
    pub const ALL: &'static [Effect] = &[
        Effect::Read,
        Effect::Compute,
        Effect::LocalMaintenance,
        Effect::PreferenceWrite,
        Effect::SecurityConfig,
        Effect::ExecutionConfig,
        Effect::SupplyChain,
        Effect::Credential,
        Effect::Destructive,
    ];

    /// The wire name, e.g. `local-maintenance`.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Read => "read",
            Effect::Compute => "compute",
            Effect::LocalMaintenance => "local-maintenance",
            Effect::PreferenceWrite => "preference-write",
            Effect::SecurityConfig => "security-config",
            Effect::ExecutionConfig => "execution-config",
            Effect::SupplyChain => "supply-chain",
            Effect::Credential => "credential",
            Effect::Destructive => "destructive",
        }
    }
}

/// How a method travels: `/v1/rpc`, `/v1/stream`, `/v1/upload` or `/v1/artifacts/:id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Bounded JSON request, one JSON response.
    Rpc,
    /// Bounded JSON request, NDJSON records and one terminal envelope.
    Stream,
    /// Envelope in a header, bounded raw body.
    Upload,
    /// Ownership-checked binary download.
    Download,
}

/// Whether renderer approval can ever be required: `never` or `policy` (the effect table decides).
///
/// A method whose effect needs approval for an allowed caller must say `policy`, or the surface refuses to
/// build (DeepChat reports the same misconfiguration at request time as `internal_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// The method never waits for a renderer decision.
    Never,
    /// The effect policy may require a renderer decision.
    Policy,
}

/// An Agent opt-in for effects that are denied to Agents by default (DeepChat `agentPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentPolicy {
    /// `local-maintenance` is allowed for Agents (e.g. cancelling an owned run).
    Allow,
    /// `preference-write`, `security-config` and `supply-chain` go to renderer approval for Agents.
    Approval,
}

/// The effect of a method: fixed, or derived from its params (e.g. `settings.updatePublic` by setting key).
#[derive(Debug, Clone, Copy)]
pub enum EffectRule {
    /// Always this effect.
    Fixed(Effect),
    /// One of `possible`, chosen by `resolve(params)`; a result outside `possible` is a misconfiguration.
    Derived {
        /// Every effect `resolve` may return (advertised as `possibleEffects`).
        possible: &'static [Effect],
        /// Picks the effect from the request params.
        resolve: fn(&Value) -> Effect,
    },
}

impl EffectRule {
    /// Every effect the method may have.
    pub fn possible(&self) -> &[Effect] {
        match self {
            EffectRule::Fixed(effect) => std::slice::from_ref(effect),
            EffectRule::Derived { possible, .. } => possible,
        }
    }

    /// The effect for these params.
    ///
    /// # Errors
    /// [`PolicyError::Misconfigured`] when a derived rule returns an effect it did not declare.
    pub fn resolve(&self, params: &Value) -> Result<Effect, PolicyError> {
        match self {
            EffectRule::Fixed(effect) => Ok(*effect),
            EffectRule::Derived { possible, resolve } => {
                let effect = resolve(params);
                if possible.contains(&effect) {
                    Ok(effect)
                } else {
                    Err(PolicyError::Misconfigured)
                }
            }
        }
    }
}

/// Byte and time bounds of one method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteLimits {
    /// Largest accepted request body in bytes (the JSON envelope, or the upload body); over it is
    /// `body_too_large` before the body is parsed.
    pub max_body_bytes: u64,
    /// How long the server lets the method run before answering `timeout` (at most [`MAX_REQUEST_TIMEOUT`]).
    pub timeout: Duration,
}

/// The longest per-method timeout: 30 minutes (DeepChat `LOCAL_CONTROL_MAX_REQUEST_TIMEOUT_MS`).
pub const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// What of the params an audit record may hash: never the raw prompt, secrets or bytes.
#[derive(Debug, Clone, Copy)]
pub enum AuditProjection {
    /// Hash nothing but the method (`{}`).
    Nothing,
    /// The listed top-level fields that are JSON scalars (strings, finite numbers, booleans, null).
    Fields(&'static [&'static str]),
    /// A method-specific projection.
    Custom(fn(&Value) -> Value),
}

impl AuditProjection {
    /// The redacted view of `params` to hash.
    pub fn project(&self, params: &Value) -> Value {
        match self {
            AuditProjection::Nothing => Value::Object(Map::new()),
            AuditProjection::Fields(fields) => select_scalar_fields(params, fields),
            AuditProjection::Custom(project) => project(params),
        }
    }
}

/// One exposed method and its policy metadata. Shape of DeepChat's `CliSurfaceEntry`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MethodSpec {
    /// The public method name, e.g. `runs.get`.
    pub method: &'static str,
    /// The method's effect.
    pub effect: EffectRule,
    /// Principals that may call it.
    pub callers: &'static [Principal],
    /// Scopes the caller must hold (all of them).
    pub scopes: &'static [Scope],
    /// The HTTP shape it must arrive on.
    pub transport: Transport,
    /// Whether renderer approval may be required.
    pub approval: ApprovalMode,
    /// Agent opt-in for effects denied to Agents by default; `None` = fail closed.
    pub agent_policy: Option<AgentPolicy>,
    /// Extra Agent input check (e.g. only preference keys); `false` is `permission_denied`.
    pub agent_input_allowed: Option<fn(&Value) -> bool>,
    /// The redacted params an audit record hashes.
    pub audit: AuditProjection,
    /// Byte and time bounds.
    pub limits: RouteLimits,
}

impl MethodSpec {
    /// This spec with its effect fixed to `effect`, for a shell that resolves a [`EffectRule::Derived`] effect
    /// from state the resolver cannot see (the host resolves `tools.call` from the loaded app bundle), so that
    /// [`policy::decide`] and the audit record use the resolved effect.
    ///
    /// # Errors
    /// [`PolicyError::Misconfigured`] when `effect` is not one of the method's possible effects.
    pub fn with_effect(&self, effect: Effect) -> Result<MethodSpec, PolicyError> {
        if !self.effect.possible().contains(&effect) {
            return Err(PolicyError::Misconfigured);
        }
        let mut spec = self.clone();
        spec.effect = EffectRule::Fixed(effect);
        Ok(spec)
    }

    /// The `cli.capabilities` entry for this method.
    pub fn capability(&self) -> Capability {
        Capability {
            method: self.method.to_owned(),
            possible_effects: self.effect.possible().to_vec(),
            callers: self.callers.to_vec(),
            scopes: self.scopes.to_vec(),
            transport: self.transport,
            approval: self.approval,
            max_body_bytes: self.limits.max_body_bytes,
            timeout_ms: u64::try_from(self.limits.timeout.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// One entry of the `cli.capabilities` result, DeepChat's `LocalControlCapabilitySchema`:
///
/// `{"method":"runs.get","possibleEffects":["read"],"callers":["human","agent"],"scopes":["runs:read"],
/// "transport":"rpc","approval":"never","maxBodyBytes":16384,"timeoutMs":30000}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Capability {
    /// The method name.
    pub method: String,
    /// Every effect the method may have (at least one).
    pub possible_effects: Vec<Effect>,
    /// Principals that may call it (one or two).
    pub callers: Vec<Principal>,
    /// Required scopes (at least one).
    pub scopes: Vec<Scope>,
    /// The HTTP shape.
    pub transport: Transport,
    /// `never` or `policy`.
    pub approval: ApprovalMode,
    /// Request body bound in bytes.
    pub max_body_bytes: u64,
    /// Method timeout in milliseconds.
    pub timeout_ms: u64,
}

/// Why a set of [`MethodSpec`]s is not a valid surface.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SurfaceError {
    /// The name does not match `^[a-z][A-Za-z0-9]*(\.[a-z][A-Za-z0-9]*)+$` (3..=128 bytes).
    #[error("invalid method name {0:?}")]
    InvalidMethodName(&'static str),
    /// Two entries share a name.
    #[error("method {0} is registered twice")]
    Duplicate(&'static str),
    /// Callers, scopes or possible effects are empty, or a limit is zero or over its maximum.
    #[error("method {0} has an empty or out-of-range field")]
    OutOfRange(&'static str),
    /// An allowed caller could need renderer approval but the method says `approval: never`.
    #[error("method {0} can need approval but declares approval never")]
    ApprovalUndeclared(&'static str),
}

/// The registry: method name → [`MethodSpec`], deny by default.
#[derive(Debug, Clone)]
pub struct Surface {
    entries: Vec<MethodSpec>,
    index: HashMap<&'static str, usize>,
}

impl Surface {
    /// The surface this host serves: DeepChat's CLI diagnostics, detached runs, run/event/artifact and public
    /// settings methods (issue 7), plus agentwire's own `threads.list`, `threads.get`,
    /// `approvals.listPending`, `runs.exportTranscript`, `tools.list` and `tools.call`; the provider/model
    /// administration (`surface/providers.rs`), model and media compute (`surface/models.rs`) and OCR
    /// (`surface/ocr.rs`) domains.
    pub fn standard() -> Surface {
        match Surface::from_specs(standard_specs()) {
            Ok(surface) => surface,
            // The standard table is a constant checked by `standard_surface_is_valid`; an empty surface
            // (deny everything) is the fail-closed answer should it ever be wrong.
            Err(_) => Surface {
                entries: Vec::new(),
                index: HashMap::new(),
            },
        }
    }

    /// Builds a surface, checking every entry (name shape, uniqueness, non-empty callers/scopes/effects,
    /// limits in range, and `approval: policy` wherever an allowed caller could need approval).
    ///
    /// # Errors
    /// The first [`SurfaceError`] found.
    pub fn from_specs(entries: Vec<MethodSpec>) -> Result<Surface, SurfaceError> {
        let mut index = HashMap::with_capacity(entries.len());
        for (position, spec) in entries.iter().enumerate() {
            validate_spec(spec)?;
            if index.insert(spec.method, position).is_some() {
                return Err(SurfaceError::Duplicate(spec.method));
            }
        }
        Ok(Surface { entries, index })
    }

    /// The spec of `method` if it is exposed on `transport`.
    ///
    /// # Errors
    /// [`PolicyError::MethodNotExposed`] (`not_found`) for an unknown method or a transport mismatch.
    pub fn lookup(&self, method: &str, transport: Transport) -> Result<&MethodSpec, PolicyError> {
        match self.get(method) {
            Some(spec) if spec.transport == transport => Ok(spec),
            _ => Err(PolicyError::MethodNotExposed),
        }
    }

    /// The spec of `method` whatever its transport.
    pub fn get(&self, method: &str) -> Option<&MethodSpec> {
        self.index
            .get(method)
            .and_then(|position| self.entries.get(*position))
    }

    /// Every spec, in registration order.
    pub fn specs(&self) -> &[MethodSpec] {
        &self.entries
    }

    /// The `cli.capabilities` list, in registration order.
    pub fn capabilities(&self) -> Vec<Capability> {
        self.entries.iter().map(MethodSpec::capability).collect()
    }
}

fn validate_spec(spec: &MethodSpec) -> Result<(), SurfaceError> {
    if !is_method_name(spec.method) {
        return Err(SurfaceError::InvalidMethodName(spec.method));
    }
    let possible = spec.effect.possible();
    if spec.callers.is_empty()
        || spec.callers.len() > 2
        || spec.scopes.is_empty()
        || possible.is_empty()
        || spec.limits.max_body_bytes == 0
        || spec.limits.timeout.is_zero()
        || spec.limits.timeout > MAX_REQUEST_TIMEOUT
    {
        return Err(SurfaceError::OutOfRange(spec.method));
    }
    if spec.approval == ApprovalMode::Never {
        for principal in spec.callers {
            for effect in possible {
                if policy::effect_decision(*effect, *principal, spec.agent_policy)
                    == EffectDecision::Approval
                {
                    return Err(SurfaceError::ApprovalUndeclared(spec.method));
                }
            }
        }
    }
    Ok(())
}

/// Whether `name` is a method name: `^[a-z][A-Za-z0-9]*(\.[a-z][A-Za-z0-9]*)+$`, 3..=128 bytes (DeepChat
/// `LocalControlMethodSchema`). The one check, shared with the envelope's [`crate::envelope::is_valid_method`].
pub use crate::envelope::is_valid_method as is_method_name;

/// Keeps the listed top-level fields of `params` whose values are JSON scalars (strings, numbers, booleans,
/// null); anything else, and any non-object `params`, projects to `{}`. DeepChat `selectAuditFields`.
pub fn select_scalar_fields(params: &Value, fields: &[&str]) -> Value {
    let mut selected = Map::new();
    if let Value::Object(source) = params {
        for field in fields {
            if let Some(value) = source.get(*field)
                && matches!(
                    value,
                    Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_)
                )
            {
                selected.insert((*field).to_owned(), value.clone());
            }
        }
    }
    Value::Object(selected)
}

/// Public setting keys whose change is a `preference-write` (DeepChat `PREFERENCE_SETTING_KEYS`).
pub const PREFERENCE_SETTING_KEYS: &[&str] = &[
    "fontSizeLevel",
    "fontFamily",
    "codeFontFamily",
    "autoScrollEnabled",
    "notificationsEnabled",
    "copyWithCotEnabled",
];

/// Public setting keys whose change is an `execution-config` (DeepChat `EXECUTION_SETTING_KEYS`).
pub const EXECUTION_SETTING_KEYS: &[&str] = &[
    "autoCompactionEnabled",
    "autoCompactionTriggerThreshold",
    "autoCompactionRetainRecentPairs",
    "ocrAutoExtractForNonVisionModels",
    "ocrBackend",
];

/// The keys of `params.changes[*].key` (`settings.updatePublic`), skipping malformed entries.
pub fn setting_change_keys(params: &Value) -> Vec<&str> {
    params
        .get("changes")
        .and_then(Value::as_array)
        .map(|changes| {
            changes
                .iter()
                .filter_map(|change| change.get("key").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

fn settings_update_effect(params: &Value) -> Effect {
    let keys = setting_change_keys(params);
    if keys.iter().all(|key| PREFERENCE_SETTING_KEYS.contains(key)) {
        Effect::PreferenceWrite
    } else if keys.iter().all(|key| EXECUTION_SETTING_KEYS.contains(key)) {
        Effect::ExecutionConfig
    } else {
        Effect::SecurityConfig
    }
}

/// The effect of `tools.call` as far as the surface can tell: `destructive`, because the tool's `mutates:`
/// lives in the app bundle, which only the host sees. The host resolves the real effect (`compute` for
/// `mutates: false`, `destructive` for `mutates: true`) and decides with [`MethodSpec::with_effect`]; a shell
/// that does not is failed closed (humans need an approval, agents are denied).
fn tools_call_effect(_params: &Value) -> Effect {
    Effect::Destructive
}

/// Effects of `tools.call`: `compute` (a tool whose TOOL.md says `mutates: false`) or `destructive`
/// (`mutates: true`: we cannot know what it changes, so it gets the strictest row: human approval, agents denied).
pub const TOOLS_CALL_EFFECTS: &[Effect] = &[Effect::Compute, Effect::Destructive];

fn settings_update_agent_input(params: &Value) -> bool {
    setting_change_keys(params)
        .iter()
        .all(|key| PREFERENCE_SETTING_KEYS.contains(key))
}

fn settings_update_audit(params: &Value) -> Value {
    let keys: Vec<Value> = setting_change_keys(params)
        .into_iter()
        .map(|key| Value::String(key.to_owned()))
        .collect();
    serde_json::json!({ "keys": keys })
}

fn settings_get_audit(params: &Value) -> Value {
    let keys: Vec<Value> = params
        .get("keys")
        .and_then(Value::as_array)
        .map(|keys| keys.iter().filter(|key| key.is_string()).cloned().collect())
        .unwrap_or_default();
    serde_json::json!({ "keys": keys })
}

fn run_detached_audit(params: &Value) -> Value {
    let mut projected =
        select_scalar_fields(params, &["agentId", "providerId", "modelId", "maxTurns"]);
    let prompt_characters = params
        .get("prompt")
        .and_then(Value::as_str)
        .map_or(0, |prompt| prompt.chars().count());
    let system_prompt_present = params.get("systemPrompt").is_some_and(Value::is_string);
    if let Value::Object(map) = &mut projected {
        map.insert("promptCharacters".to_owned(), prompt_characters.into());
        map.insert(
            "systemPromptPresent".to_owned(),
            system_prompt_present.into(),
        );
    }
    projected
}

fn events_subscribe_audit(params: &Value) -> Value {
    let mut projected = select_scalar_fields(params, &["runId", "messageLimit"]);
    let cursor_present = params.get("cursor").is_some_and(Value::is_string);
    if let Value::Object(map) = &mut projected {
        map.insert("cursorPresent".to_owned(), cursor_present.into());
    }
    projected
}

const HUMAN: &[Principal] = &[Principal::Human];
const HUMAN_AND_AGENT: &[Principal] = &[Principal::Human, Principal::Agent];
const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// `cli.*` and public reads: 16 KiB, 5 s (DeepChat `DIAGNOSTIC_LIMITS`).
const DIAGNOSTIC_LIMITS: RouteLimits = RouteLimits {
    max_body_bytes: 16 * KIB,
    timeout: Duration::from_secs(5),
};
/// Run inspection and control: 16 KiB, 30 s (DeepChat `RUN_CONTROL_LIMITS`).
const RUN_CONTROL_LIMITS: RouteLimits = RouteLimits {
    max_body_bytes: 16 * KIB,
    timeout: Duration::from_secs(30),
};
/// Mutations that may wait for approval: 16 KiB, 5 min (DeepChat `APPROVED_MUTATION_LIMITS`).
const APPROVED_MUTATION_LIMITS: RouteLimits = RouteLimits {
    max_body_bytes: 16 * KIB,
    timeout: Duration::from_secs(5 * 60),
};

fn diagnostic(method: &'static str) -> MethodSpec {
    MethodSpec {
        method,
        effect: EffectRule::Fixed(Effect::Read),
        callers: HUMAN_AND_AGENT,
        scopes: &[Scope::SystemRead],
        transport: Transport::Rpc,
        approval: ApprovalMode::Never,
        agent_policy: None,
        agent_input_allowed: None,
        audit: AuditProjection::Nothing,
        limits: DIAGNOSTIC_LIMITS,
    }
}

fn read(
    method: &'static str,
    callers: &'static [Principal],
    scopes: &'static [Scope],
    audit: AuditProjection,
    limits: RouteLimits,
) -> MethodSpec {
    MethodSpec {
        method,
        effect: EffectRule::Fixed(Effect::Read),
        callers,
        scopes,
        transport: Transport::Rpc,
        approval: ApprovalMode::Never,
        agent_policy: None,
        agent_input_allowed: None,
        audit,
        limits,
    }
}

/// A human-only `local-maintenance` rpc method of ours (no approval), auditing the scalar `fields`.
fn human_maintenance(method: &'static str, fields: &'static [&'static str]) -> MethodSpec {
    MethodSpec {
        method,
        effect: EffectRule::Fixed(Effect::LocalMaintenance),
        callers: HUMAN,
        scopes: &[Scope::SessionsRun],
        transport: Transport::Rpc,
        approval: ApprovalMode::Never,
        agent_policy: None,
        agent_input_allowed: None,
        audit: AuditProjection::Fields(fields),
        limits: DIAGNOSTIC_LIMITS,
    }
}

fn standard_specs() -> Vec<MethodSpec> {
    let mut specs = issue7_specs();
    specs.extend(providers::specs());
    specs.extend(models::specs());
    specs.extend(ocr::specs());
    specs
}

fn issue7_specs() -> Vec<MethodSpec> {
    vec![
        MethodSpec {
            method: "sessions.runDetached",
            effect: EffectRule::Fixed(Effect::Compute),
            callers: HUMAN,
            scopes: &[Scope::SessionsRun],
            transport: Transport::Rpc,
            approval: ApprovalMode::Never,
            agent_policy: None,
            agent_input_allowed: None,
            audit: AuditProjection::Custom(run_detached_audit),
            limits: RouteLimits {
                max_body_bytes: 5 * MIB,
                timeout: Duration::from_secs(5 * 60),
            },
        },
        read(
            "runs.get",
            HUMAN_AND_AGENT,
            &[Scope::RunsRead],
            AuditProjection::Fields(&["runId", "limit"]),
            RUN_CONTROL_LIMITS,
        ),
        MethodSpec {
            method: "runs.cancel",
            effect: EffectRule::Fixed(Effect::LocalMaintenance),
            callers: HUMAN_AND_AGENT,
            scopes: &[Scope::RunsCancel],
            transport: Transport::Rpc,
            approval: ApprovalMode::Never,
            agent_policy: Some(AgentPolicy::Allow),
            agent_input_allowed: None,
            audit: AuditProjection::Fields(&["runId"]),
            limits: RUN_CONTROL_LIMITS,
        },
        MethodSpec {
            method: "events.subscribe",
            effect: EffectRule::Fixed(Effect::Read),
            callers: HUMAN,
            scopes: &[Scope::RunsRead],
            transport: Transport::Stream,
            approval: ApprovalMode::Never,
            agent_policy: None,
            agent_input_allowed: None,
            audit: AuditProjection::Custom(events_subscribe_audit),
            limits: RouteLimits {
                max_body_bytes: 16 * KIB,
                timeout: MAX_REQUEST_TIMEOUT,
            },
        },
        read(
            "settings.getPublic",
            HUMAN_AND_AGENT,
            &[Scope::SettingsRead],
            AuditProjection::Custom(settings_get_audit),
            DIAGNOSTIC_LIMITS,
        ),
        MethodSpec {
            method: "settings.updatePublic",
            effect: EffectRule::Derived {
                possible: &[
                    Effect::PreferenceWrite,
                    Effect::ExecutionConfig,
                    Effect::SecurityConfig,
                ],
                resolve: settings_update_effect,
            },
            callers: HUMAN_AND_AGENT,
            scopes: &[Scope::SettingsWrite],
            transport: Transport::Rpc,
            approval: ApprovalMode::Policy,
            agent_policy: Some(AgentPolicy::Approval),
            agent_input_allowed: Some(settings_update_agent_input),
            audit: AuditProjection::Custom(settings_update_audit),
            limits: APPROVED_MUTATION_LIMITS,
        },
        read(
            "artifacts.describe",
            HUMAN_AND_AGENT,
            &[Scope::ArtifactsRead],
            AuditProjection::Fields(&["id"]),
            DIAGNOSTIC_LIMITS,
        ),
        MethodSpec {
            method: "artifacts.read",
            effect: EffectRule::Fixed(Effect::Read),
            callers: HUMAN,
            scopes: &[Scope::ArtifactsRead],
            transport: Transport::Download,
            approval: ApprovalMode::Never,
            agent_policy: None,
            agent_input_allowed: None,
            audit: AuditProjection::Fields(&["id"]),
            limits: RouteLimits {
                max_body_bytes: 1,
                timeout: Duration::from_secs(5 * 60),
            },
        },
        MethodSpec {
            method: "artifacts.delete",
            effect: EffectRule::Fixed(Effect::LocalMaintenance),
            callers: HUMAN,
            scopes: &[Scope::ArtifactsManage],
            transport: Transport::Rpc,
            approval: ApprovalMode::Never,
            agent_policy: None,
            agent_input_allowed: None,
            audit: AuditProjection::Fields(&["id"]),
            limits: DIAGNOSTIC_LIMITS,
        },
        diagnostic("cli.status"),
        diagnostic("cli.version"),
        diagnostic("cli.capabilities"),
        diagnostic("cli.doctor"),
        // agentwire's own methods. They reuse DeepChat's `runs:read` scope so that a strict DeepChat client
        // still parses `cli.capabilities`; the thread list and transcripts carry other conversations' prompts,
        // so they are human-only, and `threads.get` lets an Agent read only its own conversation (the handler
        // applies `policy::check_owner`).
        read(
            "threads.list",
            HUMAN,
            &[Scope::RunsRead],
            AuditProjection::Fields(&["limit", "agent"]),
            DIAGNOSTIC_LIMITS,
        ),
        read(
            "threads.get",
            HUMAN_AND_AGENT,
            &[Scope::RunsRead],
            AuditProjection::Fields(&["threadId", "limit"]),
            RUN_CONTROL_LIMITS,
        ),
        read(
            "approvals.listPending",
            HUMAN,
            &[Scope::RunsRead],
            AuditProjection::Nothing,
            DIAGNOSTIC_LIMITS,
        ),
        read(
            "runs.exportTranscript",
            HUMAN,
            &[Scope::RunsRead],
            AuditProjection::Fields(&["runId", "format"]),
            RUN_CONTROL_LIMITS,
        ),
        // Ours: `awp-host chat` (a human caller holding the descriptor) asks the running host for a token for the
        // agent of its turn, and revokes it when the turn ends; the token authority lives in the serving process.
        human_maintenance("agentTokens.issue", &["conversationId"]),
        human_maintenance("agentTokens.revoke", &["tokenId"]),
        // The app bundle's tools (`awp-host serve --app DIR`), under DeepChat's `skills:read`: its client accepts
        // only its own scope names, and app-bundled tools are the nearest of its domains. The per-tool gate is
        // `mutates:` (see `tools_call_effect`), so an agent token holding `skills:read` may call exactly the
        // tools that say `mutates: false`.
        read(
            "tools.list",
            HUMAN_AND_AGENT,
            &[Scope::SkillsRead],
            AuditProjection::Nothing,
            DIAGNOSTIC_LIMITS,
        ),
        MethodSpec {
            method: "tools.call",
            effect: EffectRule::Derived {
                possible: TOOLS_CALL_EFFECTS,
                resolve: tools_call_effect,
            },
            callers: HUMAN_AND_AGENT,
            scopes: &[Scope::SkillsRead],
            transport: Transport::Rpc,
            approval: ApprovalMode::Policy,
            agent_policy: None,
            agent_input_allowed: None,
            // The tool id only: the input may carry anything, including text a secret was pasted into.
            audit: AuditProjection::Fields(&["toolId"]),
            // 1 MiB of input (as `awp-host tools call --input`); the tool's own timeout applies inside.
            limits: RouteLimits {
                max_body_bytes: MIB + 16 * KIB,
                timeout: Duration::from_secs(10 * 60),
            },
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_surface_is_valid() {
        let surface = Surface::from_specs(standard_specs()).expect("standard surface");
        assert_eq!(issue7_specs().len(), 21);
        // Plus provider/model administration (`surface/providers.rs`).
        assert_eq!(providers::specs().len(), 11);
        assert_eq!(models::specs().len(), 8);
        assert_eq!(ocr::specs().len(), 4);
        assert_eq!(surface.specs().len(), standard_specs().len());
        assert_eq!(Surface::standard().specs().len(), standard_specs().len());
    }

    #[test]
    fn unknown_method_and_wrong_transport_are_not_found() {
        let surface = Surface::standard();
        let err = surface
            .lookup("settings.getAll", Transport::Rpc)
            .expect_err("unknown");
        assert_eq!(err.code(), "not_found");
        let err = surface
            .lookup("events.subscribe", Transport::Rpc)
            .expect_err("transport");
        assert_eq!(err.code(), "not_found");
        assert!(
            surface
                .lookup("events.subscribe", Transport::Stream)
                .is_ok()
        );
    }

    #[test]
    fn deepchat_method_table_matches() {
        // (method, effects, callers, scopes, transport, approval, maxBodyBytes, timeoutMs) from DeepChat surface.ts.
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
            "sessions.runDetached",
            serde_json::json!({"method":"sessions.runDetached","possibleEffects":["compute"],"callers":["human"],
                "scopes":["sessions:run"],"transport":"rpc","approval":"never","maxBodyBytes":5242880,"timeoutMs":300000}),
        );
        check(
            "runs.cancel",
            serde_json::json!({"method":"runs.cancel","possibleEffects":["local-maintenance"],"callers":["human","agent"],
                "scopes":["runs:cancel"],"transport":"rpc","approval":"never","maxBodyBytes":16384,"timeoutMs":30000}),
        );
        check(
            "events.subscribe",
            serde_json::json!({"method":"events.subscribe","possibleEffects":["read"],"callers":["human"],
                "scopes":["runs:read"],"transport":"stream","approval":"never","maxBodyBytes":16384,"timeoutMs":1800000}),
        );
        check(
            "settings.updatePublic",
            serde_json::json!({"method":"settings.updatePublic",
                "possibleEffects":["preference-write","execution-config","security-config"],"callers":["human","agent"],
                "scopes":["settings:write"],"transport":"rpc","approval":"policy","maxBodyBytes":16384,"timeoutMs":300000}),
        );
        check(
            "artifacts.read",
            serde_json::json!({"method":"artifacts.read","possibleEffects":["read"],"callers":["human"],
                "scopes":["artifacts:read"],"transport":"download","approval":"never","maxBodyBytes":1,"timeoutMs":300000}),
        );
        check(
            "artifacts.delete",
            serde_json::json!({"method":"artifacts.delete","possibleEffects":["local-maintenance"],"callers":["human"],
                "scopes":["artifacts:manage"],"transport":"rpc","approval":"never","maxBodyBytes":16384,"timeoutMs":5000}),
        );
        check(
            "cli.doctor",
            serde_json::json!({"method":"cli.doctor","possibleEffects":["read"],"callers":["human","agent"],
                "scopes":["system:read"],"transport":"rpc","approval":"never","maxBodyBytes":16384,"timeoutMs":5000}),
        );
    }

    #[test]
    fn capabilities_round_trip_in_registration_order() {
        let capabilities = Surface::standard().capabilities();
        assert_eq!(capabilities[0].method, "sessions.runDetached");
        let json = serde_json::to_string(&capabilities).expect("serialize");
        let back: Vec<Capability> = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, capabilities);
        for capability in &capabilities {
            assert!(!capability.scopes.is_empty() && !capability.possible_effects.is_empty());
            assert!(is_method_name(&capability.method));
        }
    }

    #[test]
    fn settings_effect_follows_keys() {
        let spec = Surface::standard();
        let spec = spec.get("settings.updatePublic").expect("spec");
        let effect = |keys: &[&str]| {
            let changes: Vec<Value> = keys
                .iter()
                .map(|key| serde_json::json!({"key": key, "value": 1}))
                .collect();
            spec.effect
                .resolve(&serde_json::json!({ "changes": changes }))
                .expect("declared")
        };
        assert_eq!(effect(&["fontSizeLevel"]), Effect::PreferenceWrite);
        assert_eq!(effect(&["ocrBackend"]), Effect::ExecutionConfig);
        assert_eq!(
            effect(&["fontSizeLevel", "ocrBackend"]),
            Effect::SecurityConfig
        );
        assert_eq!(effect(&["proxyUrl"]), Effect::SecurityConfig);
    }

    #[test]
    fn method_names_follow_the_deepchat_pattern() {
        for good in ["a.b", "cli.status", "sessions.runDetached", "a1.b2.c3"] {
            assert!(is_method_name(good), "{good}");
        }
        let long = format!("a.{}", "b".repeat(126));
        assert!(is_method_name(&long));
        let too_long = format!("a.{}", "b".repeat(127));
        for bad in [
            "ab",
            "cli",
            "Cli.status",
            "cli.",
            ".cli",
            "cli..status",
            "cli.Status",
            "cli.st-atus",
            "cli.1",
            too_long.as_str(),
        ] {
            assert!(!is_method_name(bad), "{bad}");
        }
    }

    #[test]
    fn invalid_specs_are_rejected() {
        let mut duplicate = standard_specs();
        duplicate.push(diagnostic("cli.status"));
        assert_eq!(
            Surface::from_specs(duplicate).expect_err("dup"),
            SurfaceError::Duplicate("cli.status")
        );

        let mut approval = diagnostic("x.write");
        approval.effect = EffectRule::Fixed(Effect::Credential);
        assert_eq!(
            Surface::from_specs(vec![approval]).expect_err("approval"),
            SurfaceError::ApprovalUndeclared("x.write")
        );

        let mut no_scope = diagnostic("x.read");
        no_scope.scopes = &[];
        assert_eq!(
            Surface::from_specs(vec![no_scope]).expect_err("scope"),
            SurfaceError::OutOfRange("x.read")
        );

        let mut too_slow = diagnostic("x.slow");
        too_slow.limits.timeout = MAX_REQUEST_TIMEOUT + Duration::from_millis(1);
        assert_eq!(
            Surface::from_specs(vec![too_slow.clone()]).expect_err("timeout"),
            SurfaceError::OutOfRange("x.slow")
        );
        too_slow.limits.timeout = MAX_REQUEST_TIMEOUT;
        assert!(Surface::from_specs(vec![too_slow]).is_ok());

        assert_eq!(
            Surface::from_specs(vec![diagnostic("Bad")]).expect_err("name"),
            SurfaceError::InvalidMethodName("Bad")
        );
    }

    #[test]
    fn audit_projections_drop_prompts_and_values() {
        let surface = Surface::standard();
        let detached = surface.get("sessions.runDetached").expect("spec");
        let projected = detached.audit.project(&serde_json::json!({
            "prompt": "PLANTED-PROMPT", "systemPrompt": "sys", "agentId": "a1", "maxTurns": 3
        }));
        assert_eq!(
            projected,
            serde_json::json!({"agentId":"a1","maxTurns":3,"promptCharacters":14,"systemPromptPresent":true})
        );
        let update = surface.get("settings.updatePublic").expect("spec");
        let projected = update.audit.project(&serde_json::json!({
            "changes": [{"key": "fontFamily", "value": "PLANTED-VALUE"}]
        }));
        assert_eq!(projected, serde_json::json!({"keys":["fontFamily"]}));
        assert_eq!(
            select_scalar_fields(&serde_json::json!({"id": {"nested": 1}, "x": 1}), &["id"]),
            serde_json::json!({})
        );
    }
}
