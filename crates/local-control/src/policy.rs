//! The effect policy: a pure `decide(caller, spec, params)`, the ownership rule, and Agent compute admission.
//!
//! [`decide`] applies, in DeepChat's order: resolve the effect → caller allowed → every scope held → Agent input
//! allowed → the effect row of [`effect_decision`] → `approval: policy` declared. It returns
//! [`Decision::Allow`], [`Decision::NeedsApproval`] (the shell then asks the renderer-only approval broker) or
//! [`Decision::Deny`] with a [`PolicyError`] whose [`code`](PolicyError::code) is DeepChat's wire code.
//! [`ComputeAdmission`] bounds Agent compute per conversation (2 concurrent, 20 starts per minute).
//!
//! Source: DeepChat spec, section "Effect Policy" (table) and "Cost and concurrency"; DeepChat
//! `src/main/cli/policy.ts` (`resolveEffectDecision`, `CliRequestPolicy.admitCompute`).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::caller::{Caller, Principal};
use crate::surface::{AgentPolicy, ApprovalMode, Effect, MethodSpec};

/// Why the policy refused a request. Messages are lowercase and never carry params, tokens or secrets.
///
/// [`code`](PolicyError::code) is the DeepChat error code the transport puts in the response envelope.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The method is not on the surface, or not on this transport (`not_found`, HTTP 404).
    #[error("method is not exposed by the cli surface")]
    MethodNotExposed,
    /// The caller's principal is not in the method's callers (`permission_denied`, 403).
    #[error("caller is not allowed for method")]
    CallerNotAllowed,
    /// The caller lacks a required scope (`permission_denied`, 403).
    #[error("required scope is missing")]
    MissingScope,
    /// The method's Agent input check refused these params (`permission_denied`, 403).
    #[error("agent input is not allowed for this operation")]
    AgentInputNotAllowed,
    /// The effect table denies this effect to this caller (`permission_denied`, 403).
    #[error("operation is denied for this caller")]
    EffectDenied,
    /// The target belongs to another conversation; reported as absent so existence does not leak (`not_found`).
    #[error("not found")]
    NotOwned,
    /// Approval would be needed but the method does not declare it, or an effect resolver returned an
    /// undeclared effect (`internal_error`, 500).
    #[error("cli effect policy is misconfigured")]
    Misconfigured,
    /// The renderer denied the approval (`approval_denied`).
    #[error("approval was denied")]
    ApprovalDenied,
    /// The approval was not decided in time (`approval_timeout`).
    #[error("approval timed out")]
    ApprovalTimeout,
    /// Agent compute capacity or token quota is exhausted (`rate_limited`, 429, retriable).
    #[error("agent compute capacity is full")]
    RateLimited,
    /// The bearer token is missing, unknown, expired or revoked (`authentication_failed`, 401).
    #[error("authentication failed")]
    AuthenticationFailed,
}

impl PolicyError {
    /// DeepChat's stable snake_case error code.
    pub fn code(&self) -> &'static str {
        match self {
            PolicyError::MethodNotExposed | PolicyError::NotOwned => "not_found",
            PolicyError::CallerNotAllowed
            | PolicyError::MissingScope
            | PolicyError::AgentInputNotAllowed
            | PolicyError::EffectDenied => "permission_denied",
            PolicyError::Misconfigured => "internal_error",
            PolicyError::ApprovalDenied => "approval_denied",
            PolicyError::ApprovalTimeout => "approval_timeout",
            PolicyError::RateLimited => "rate_limited",
            PolicyError::AuthenticationFailed => "authentication_failed",
        }
    }

    /// The HTTP status DeepChat's server answers with.
    pub fn http_status(&self) -> u16 {
        match self {
            PolicyError::MethodNotExposed | PolicyError::NotOwned => 404,
            PolicyError::CallerNotAllowed
            | PolicyError::MissingScope
            | PolicyError::AgentInputNotAllowed
            | PolicyError::EffectDenied
            | PolicyError::ApprovalDenied => 403,
            PolicyError::Misconfigured => 500,
            PolicyError::ApprovalTimeout => 408,
            PolicyError::RateLimited => 429,
            PolicyError::AuthenticationFailed => 401,
        }
    }

    /// Whether the client may retry the same request later (only [`PolicyError::RateLimited`]).
    pub fn retriable(&self) -> bool {
        matches!(self, PolicyError::RateLimited)
    }
}

/// One cell of the effect table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectDecision {
    /// Proceed.
    Allow,
    /// Proceed only after a renderer approval.
    Approval,
    /// Refuse with `permission_denied`.
    Deny,
}

/// The effect table: what `effect` means for `principal`, given the method's Agent opt-in.
///
/// | effect | human | agent |
/// |---|---|---|
/// | read, compute | allow | allow (scope/quota checked elsewhere) |
/// | local-maintenance | allow (audited) | allow only with [`AgentPolicy::Allow`], else deny |
/// | preference-write | allow (audited) | approval only with [`AgentPolicy::Approval`], else deny |
/// | security-config, supply-chain | approval | approval only with [`AgentPolicy::Approval`], else deny |
/// | execution-config, credential, destructive | approval | deny |
///
/// Source: DeepChat spec "Effect Policy" table; `policy.ts` `resolveEffectDecision`.
pub fn effect_decision(
    effect: Effect,
    principal: Principal,
    agent_policy: Option<AgentPolicy>,
) -> EffectDecision {
    match principal {
        Principal::Human => match effect {
            Effect::Read | Effect::Compute | Effect::LocalMaintenance | Effect::PreferenceWrite => {
                EffectDecision::Allow
            }
            Effect::SecurityConfig
            | Effect::ExecutionConfig
            | Effect::SupplyChain
            | Effect::Credential
            | Effect::Destructive => EffectDecision::Approval,
        },
        Principal::Agent => match (effect, agent_policy) {
            (Effect::Read | Effect::Compute, _) => EffectDecision::Allow,
            (Effect::LocalMaintenance, Some(AgentPolicy::Allow)) => EffectDecision::Allow,
            (
                Effect::PreferenceWrite | Effect::SecurityConfig | Effect::SupplyChain,
                Some(AgentPolicy::Approval),
            ) => EffectDecision::Approval,
            _ => EffectDecision::Deny,
        },
    }
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Dispatch (after compute admission for Agent compute).
    Allow,
    /// Dispatch only after the renderer approves this exact request.
    NeedsApproval,
    /// Refuse with this error.
    Deny(PolicyError),
}

/// Decides whether `caller` may call `spec` with `params`. Pure: no clock, no state.
///
/// Internal callers are denied (`permission_denied`): they call domain services directly, never the CLI
/// surface. Use [`resolve_effect`] for the effect to record in the audit log.
pub fn decide(caller: &Caller, spec: &MethodSpec, params: &Value) -> Decision {
    let effect = match spec.effect.resolve(params) {
        Ok(effect) => effect,
        Err(error) => return Decision::Deny(error),
    };
    let Some(principal) = caller.principal() else {
        return Decision::Deny(PolicyError::CallerNotAllowed);
    };
    if !spec.callers.contains(&principal) {
        return Decision::Deny(PolicyError::CallerNotAllowed);
    }
    if !spec.scopes.iter().all(|scope| caller.has_scope(*scope)) {
        return Decision::Deny(PolicyError::MissingScope);
    }
    if principal == Principal::Agent
        && let Some(allowed) = spec.agent_input_allowed
        && !allowed(params)
    {
        return Decision::Deny(PolicyError::AgentInputNotAllowed);
    }
    match effect_decision(effect, principal, spec.agent_policy) {
        EffectDecision::Allow => Decision::Allow,
        EffectDecision::Deny => Decision::Deny(PolicyError::EffectDenied),
        EffectDecision::Approval if spec.approval == ApprovalMode::Policy => {
            Decision::NeedsApproval
        }
        EffectDecision::Approval => Decision::Deny(PolicyError::Misconfigured),
    }
}

/// The effect of this request, for audit. A misconfigured resolver falls back to the first declared effect.
pub fn resolve_effect(spec: &MethodSpec, params: &Value) -> Effect {
    spec.effect.resolve(params).unwrap_or_else(|_| {
        spec.effect
            .possible()
            .first()
            .copied()
            .unwrap_or(Effect::Read)
    })
}

/// Whether `caller` owns a run/thread/artifact that belongs to `owner_conversation_id`.
///
/// A human owns everything of the local user; an Agent owns only its token's conversation.
///
/// # Errors
/// [`PolicyError::NotOwned`] (`not_found`) otherwise, so an Agent cannot probe other conversations' ids.
pub fn check_owner(
    caller: &Caller,
    owner_conversation_id: Option<&str>,
) -> Result<(), PolicyError> {
    match caller {
        Caller::Human { .. } => Ok(()),
        Caller::Agent(agent) if owner_conversation_id == Some(agent.conversation_id()) => Ok(()),
        _ => Err(PolicyError::NotOwned),
    }
}

/// Bounds of [`ComputeAdmission`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeLimits {
    /// Concurrent Agent compute requests per conversation. Default 2; one more is `rate_limited`.
    pub max_concurrent: usize,
    /// Agent compute starts per conversation within any [`window`](ComputeLimits::window). Default 20;
    /// the 21st is `rate_limited` until the oldest start leaves the window.
    pub max_starts_per_window: usize,
    /// The sliding window. Default 60 s.
    pub window: Duration,
    /// Conversations tracked at once. Default 1024 (four times the 256-token cap); a new conversation over it
    /// is `rate_limited` until idle ones age out.
    pub max_conversations: usize,
}

impl Default for ComputeLimits {
    fn default() -> Self {
        ComputeLimits {
            max_concurrent: 2,
            max_starts_per_window: 20,
            window: Duration::from_secs(60),
            max_conversations: 1024,
        }
    }
}

/// A held unit of Agent compute capacity; give it back with [`ComputeAdmission::release`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a permit holds capacity until released"]
pub struct ComputePermit {
    conversation_id: String,
}

#[derive(Debug, Default)]
struct ComputeOwner {
    active: usize,
    starts: VecDeque<Instant>,
}

/// Agent compute admission per conversation: at most `max_concurrent` in flight and `max_starts_per_window`
/// starts in any sliding `window`. Human callers and non-compute effects are not limited here.
///
/// Sans-IO: every call takes `now`. This is DeepChat's sliding-window log (`admitCompute`), which is exact
/// where a token bucket would allow a burst at the window edge.
#[derive(Debug)]
pub struct ComputeAdmission {
    limits: ComputeLimits,
    owners: HashMap<String, ComputeOwner>,
}

impl ComputeAdmission {
    /// An admission controller with these limits.
    pub fn new(limits: ComputeLimits) -> Self {
        ComputeAdmission {
            limits,
            owners: HashMap::new(),
        }
    }

    /// Admits one request. `Ok(None)` when no limit applies (human caller, or an effect other than compute);
    /// `Ok(Some(permit))` when an Agent compute request is admitted.
    ///
    /// # Errors
    /// [`PolicyError::RateLimited`] when the conversation is at its concurrency or start-rate limit.
    pub fn admit(
        &mut self,
        caller: &Caller,
        effect: Effect,
        now: Instant,
    ) -> Result<Option<ComputePermit>, PolicyError> {
        let Caller::Agent(agent) = caller else {
            return Ok(None);
        };
        if effect != Effect::Compute {
            return Ok(None);
        }
        let conversation_id = agent.conversation_id();
        if !self.owners.contains_key(conversation_id) {
            self.prune(now);
            if self.owners.len() >= self.limits.max_conversations {
                return Err(PolicyError::RateLimited);
            }
        }
        let window = self.limits.window;
        let owner = self.owners.entry(conversation_id.to_owned()).or_default();
        while owner
            .starts
            .front()
            .is_some_and(|start| now.saturating_duration_since(*start) >= window)
        {
            owner.starts.pop_front();
        }
        if owner.active >= self.limits.max_concurrent
            || owner.starts.len() >= self.limits.max_starts_per_window
        {
            return Err(PolicyError::RateLimited);
        }
        owner.starts.push_back(now);
        owner.active += 1;
        Ok(Some(ComputePermit {
            conversation_id: conversation_id.to_owned(),
        }))
    }

    /// Returns a permit's capacity (the request finished, failed or was cancelled).
    pub fn release(&mut self, permit: ComputePermit) {
        if let Some(owner) = self.owners.get_mut(&permit.conversation_id) {
            owner.active = owner.active.saturating_sub(1);
        }
    }

    /// In-flight Agent compute requests of `conversation_id`.
    pub fn active(&self, conversation_id: &str) -> usize {
        self.owners
            .get(conversation_id)
            .map_or(0, |owner| owner.active)
    }

    /// Forgets conversations with nothing in flight and no start inside the window.
    pub fn prune(&mut self, now: Instant) {
        let window = self.limits.window;
        self.owners.retain(|_, owner| {
            owner.active > 0
                || owner
                    .starts
                    .back()
                    .is_some_and(|last| now.saturating_duration_since(*last) < window)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caller::{InternalComponent, Scope};
    use crate::surface::Surface;
    use crate::tokens::{IssueRequest, TokenAuthority, TokenLimits};
    use serde_json::json;

    fn agent_with(scopes: &[Scope], conversation: &str) -> Caller {
        let mut authority = TokenAuthority::new(TokenLimits::default());
        let now = Instant::now();
        let issued = authority
            .issue(IssueRequest::new(conversation, scopes.to_vec()), now)
            .expect("issue");
        let grant = authority
            .begin_request(issued.token.expose(), now)
            .expect("grant");
        Caller::agent("conn-a", &grant)
    }

    fn agent_all() -> Caller {
        agent_with(Scope::ALL, "conv-1")
    }

    #[test]
    fn tools_call_fails_closed_until_the_shell_resolves_mutates() {
        let surface = Surface::standard();
        let spec = surface.get("tools.call").expect("tools.call");
        let params = json!({"toolId": "echo", "input": {}});
        let human = Caller::human("conn-h");
        let agent = agent_with(&[Scope::SkillsRead], "conv-1");
        // Unresolved: the strictest row.
        assert_eq!(decide(&human, spec, &params), Decision::NeedsApproval);
        assert_eq!(
            decide(&agent, spec, &params),
            Decision::Deny(PolicyError::EffectDenied)
        );
        // `mutates: false` resolved by the shell: allowed for both.
        let compute = spec.with_effect(Effect::Compute).expect("declared");
        assert_eq!(decide(&human, &compute, &params), Decision::Allow);
        assert_eq!(decide(&agent, &compute, &params), Decision::Allow);
        assert_eq!(resolve_effect(&compute, &params), Effect::Compute);
        // Without `skills:read` an agent calls no tool at all.
        let no_scope = agent_with(&[Scope::RunsRead], "conv-1");
        assert_eq!(
            decide(&no_scope, &compute, &params),
            Decision::Deny(PolicyError::MissingScope)
        );
        // An effect the method does not declare is refused.
        assert_eq!(
            spec.with_effect(Effect::Credential)
                .expect_err("undeclared"),
            PolicyError::Misconfigured
        );
    }

    #[test]
    fn effect_table_every_row() {
        use EffectDecision::{Allow, Approval, Deny};
        // (effect, human, agent with no opt-in, agent Allow, agent Approval)
        let rows = [
            (Effect::Read, Allow, Allow, Allow, Allow),
            (Effect::Compute, Allow, Allow, Allow, Allow),
            (Effect::LocalMaintenance, Allow, Deny, Allow, Deny),
            (Effect::PreferenceWrite, Allow, Deny, Deny, Approval),
            (Effect::SecurityConfig, Approval, Deny, Deny, Approval),
            (Effect::ExecutionConfig, Approval, Deny, Deny, Deny),
            (Effect::SupplyChain, Approval, Deny, Deny, Approval),
            (Effect::Credential, Approval, Deny, Deny, Deny),
            (Effect::Destructive, Approval, Deny, Deny, Deny),
        ];
        assert_eq!(rows.len(), Effect::ALL.len());
        for (effect, human, agent, agent_allow, agent_approval) in rows {
            for policy in [None, Some(AgentPolicy::Allow), Some(AgentPolicy::Approval)] {
                assert_eq!(
                    effect_decision(effect, Principal::Human, policy),
                    human,
                    "{effect:?}"
                );
            }
            assert_eq!(
                effect_decision(effect, Principal::Agent, None),
                agent,
                "{effect:?}"
            );
            assert_eq!(
                effect_decision(effect, Principal::Agent, Some(AgentPolicy::Allow)),
                agent_allow,
                "{effect:?}"
            );
            assert_eq!(
                effect_decision(effect, Principal::Agent, Some(AgentPolicy::Approval)),
                agent_approval,
                "{effect:?}"
            );
        }
    }

    fn check(caller: &Caller, method: &str, params: Value, expect: Decision) {
        let surface = Surface::standard();
        let spec = surface.get(method).expect(method);
        assert_eq!(decide(caller, spec, &params), expect, "{method} {params}");
    }

    #[test]
    fn every_standard_method_for_human_agent_and_internal() {
        let human = Caller::human("c");
        let agent = agent_all();
        let internal = Caller::internal(InternalComponent::Scheduler);
        let denied_caller = Decision::Deny(PolicyError::CallerNotAllowed);
        // (method, human, agent)
        let rows = [
            (
                "sessions.runDetached",
                Decision::Allow,
                denied_caller.clone(),
            ),
            ("runs.get", Decision::Allow, Decision::Allow),
            ("runs.cancel", Decision::Allow, Decision::Allow),
            ("events.subscribe", Decision::Allow, denied_caller.clone()),
            ("artifacts.describe", Decision::Allow, Decision::Allow),
            ("artifacts.read", Decision::Allow, denied_caller.clone()),
            ("artifacts.delete", Decision::Allow, denied_caller.clone()),
            ("settings.getPublic", Decision::Allow, Decision::Allow),
            ("cli.status", Decision::Allow, Decision::Allow),
            ("cli.version", Decision::Allow, Decision::Allow),
            ("cli.capabilities", Decision::Allow, Decision::Allow),
            ("cli.doctor", Decision::Allow, Decision::Allow),
            ("threads.list", Decision::Allow, denied_caller.clone()),
            ("threads.get", Decision::Allow, Decision::Allow),
            (
                "approvals.listPending",
                Decision::Allow,
                denied_caller.clone(),
            ),
            (
                "runs.exportTranscript",
                Decision::Allow,
                denied_caller.clone(),
            ),
            ("agentTokens.issue", Decision::Allow, denied_caller.clone()),
            ("agentTokens.revoke", Decision::Allow, denied_caller.clone()),
            ("tools.list", Decision::Allow, Decision::Allow),
            ("models.listPublic", Decision::Allow, Decision::Allow),
            ("models.getCapabilities", Decision::Allow, Decision::Allow),
            ("models.invoke", Decision::Allow, Decision::Allow),
            ("images.generate", Decision::Allow, Decision::Allow),
            ("videos.generate", Decision::Allow, Decision::Allow),
            ("speech.generate", Decision::Allow, Decision::Allow),
            (
                "audio.transcribeUpload",
                Decision::Allow,
                denied_caller.clone(),
            ),
            ("audio.transcribeArtifact", Decision::Allow, Decision::Allow),
            ("ocr.getRuntimeStatus", Decision::Allow, Decision::Allow),
            ("ocr.extractUpload", Decision::Allow, denied_caller.clone()),
            ("ocr.extractArtifact", Decision::Allow, Decision::Allow),
            ("ocr.clearCache", Decision::Allow, denied_caller.clone()),
            // Unresolved (no bundle): the strictest row; the host resolves `mutates:` first.
            (
                "tools.call",
                Decision::NeedsApproval,
                Decision::Deny(PolicyError::EffectDenied),
            ),
            // Capability row 8: reads for both, the connection test for humans, mutations behind approval and
            // human-only.
            ("providers.listPublic", Decision::Allow, Decision::Allow),
            (
                "providers.testPublicConnection",
                Decision::Allow,
                denied_caller.clone(),
            ),
            ("models.listRuntime", Decision::Allow, Decision::Allow),
            ("models.getPublicConfig", Decision::Allow, Decision::Allow),
        ];
        let admin_mutations = [
            "providers.addPublic",
            "providers.updatePublic",
            "providers.setCredential",
            "providers.remove",
            "models.setStatus",
            "models.setPublicConfig",
            "models.resetConfig",
        ];
        for method in admin_mutations {
            check(&human, method, json!({}), Decision::NeedsApproval);
            check(&agent, method, json!({}), denied_caller.clone());
            check(&internal, method, json!({}), denied_caller.clone());
        }
        let rows_len = rows.len() + admin_mutations.len();
        assert_eq!(rows_len + 1, Surface::standard().specs().len());
        for (method, for_human, for_agent) in rows {
            check(&human, method, json!({}), for_human);
            check(&agent, method, json!({}), for_agent);
            check(&internal, method, json!({}), denied_caller.clone());
        }
    }

    #[test]
    fn settings_update_rows() {
        let human = Caller::human("c");
        let agent = agent_all();
        let changes = |key: &str| json!({"changes": [{"key": key, "value": true}]});
        check(
            &human,
            "settings.updatePublic",
            changes("notificationsEnabled"),
            Decision::Allow,
        );
        check(
            &human,
            "settings.updatePublic",
            changes("ocrBackend"),
            Decision::NeedsApproval,
        );
        check(
            &human,
            "settings.updatePublic",
            changes("proxyUrl"),
            Decision::NeedsApproval,
        );
        check(
            &agent,
            "settings.updatePublic",
            changes("notificationsEnabled"),
            Decision::NeedsApproval,
        );
        check(
            &agent,
            "settings.updatePublic",
            changes("ocrBackend"),
            Decision::Deny(PolicyError::AgentInputNotAllowed),
        );
        check(
            &agent,
            "settings.updatePublic",
            changes("proxyUrl"),
            Decision::Deny(PolicyError::AgentInputNotAllowed),
        );
    }

    #[test]
    fn agent_scopes_are_required() {
        let reader = agent_with(&[Scope::RunsRead], "conv-1");
        check(&reader, "runs.get", json!({}), Decision::Allow);
        check(
            &reader,
            "runs.cancel",
            json!({}),
            Decision::Deny(PolicyError::MissingScope),
        );
        check(
            &reader,
            "cli.status",
            json!({}),
            Decision::Deny(PolicyError::MissingScope),
        );
        let error = PolicyError::MissingScope;
        assert_eq!(
            (error.code(), error.http_status()),
            ("permission_denied", 403)
        );
    }

    #[test]
    fn request_fields_cannot_select_or_widen_the_caller() {
        // The caller comes from the transport and token; params naming a principal, scopes or a conversation
        // change nothing.
        let reader = agent_with(&[Scope::RunsRead], "conv-1");
        let forged = json!({
            "principal": "human", "caller": {"kind": "human"}, "scopes": ["sessions:run"],
            "conversationId": "conv-2", "confirmed": true
        });
        check(
            &reader,
            "sessions.runDetached",
            forged.clone(),
            Decision::Deny(PolicyError::CallerNotAllowed),
        );
        check(
            &reader,
            "runs.cancel",
            forged,
            Decision::Deny(PolicyError::MissingScope),
        );
        assert_eq!(reader.conversation_id(), Some("conv-1"));
    }

    #[test]
    fn misconfigured_approval_is_internal_error() {
        let surface = Surface::standard();
        let mut spec = surface.get("settings.updatePublic").expect("spec").clone();
        spec.approval = ApprovalMode::Never;
        let params = json!({"changes": [{"key": "ocrBackend", "value": "x"}]});
        assert_eq!(
            decide(&Caller::human("c"), &spec, &params),
            Decision::Deny(PolicyError::Misconfigured)
        );
        assert_eq!(PolicyError::Misconfigured.code(), "internal_error");
    }

    #[test]
    fn error_codes_are_deepchat_codes() {
        let cases = [
            (PolicyError::MethodNotExposed, "not_found"),
            (PolicyError::CallerNotAllowed, "permission_denied"),
            (PolicyError::MissingScope, "permission_denied"),
            (PolicyError::AgentInputNotAllowed, "permission_denied"),
            (PolicyError::EffectDenied, "permission_denied"),
            (PolicyError::NotOwned, "not_found"),
            (PolicyError::Misconfigured, "internal_error"),
            (PolicyError::ApprovalDenied, "approval_denied"),
            (PolicyError::ApprovalTimeout, "approval_timeout"),
            (PolicyError::RateLimited, "rate_limited"),
            (PolicyError::AuthenticationFailed, "authentication_failed"),
        ];
        for (error, code) in cases {
            assert_eq!(error.code(), code);
            assert_eq!(error.retriable(), code == "rate_limited");
            let message = error.to_string();
            assert_eq!(message, message.to_lowercase());
        }
    }

    #[test]
    fn ownership_is_conversation_bound_for_agents() {
        let agent = agent_with(&[Scope::RunsRead], "conv-1");
        assert_eq!(check_owner(&agent, Some("conv-1")), Ok(()));
        assert_eq!(
            check_owner(&agent, Some("conv-2")),
            Err(PolicyError::NotOwned)
        );
        assert_eq!(check_owner(&agent, None), Err(PolicyError::NotOwned));
        assert_eq!(check_owner(&Caller::human("c"), Some("conv-2")), Ok(()));
        assert_eq!(
            check_owner(
                &Caller::internal(InternalComponent::Migration),
                Some("conv-1")
            ),
            Err(PolicyError::NotOwned)
        );
    }

    #[test]
    fn compute_admission_two_concurrent() {
        let mut admission = ComputeAdmission::new(ComputeLimits::default());
        let agent = agent_all();
        let now = Instant::now();
        let first = admission
            .admit(&agent, Effect::Compute, now)
            .expect("1")
            .expect("permit");
        let second = admission
            .admit(&agent, Effect::Compute, now)
            .expect("2")
            .expect("permit");
        assert_eq!(admission.active("conv-1"), 2);
        assert_eq!(
            admission.admit(&agent, Effect::Compute, now),
            Err(PolicyError::RateLimited)
        );
        // Other conversations, reads and humans are not affected.
        let other = agent_with(Scope::ALL, "conv-2");
        assert!(
            admission
                .admit(&other, Effect::Compute, now)
                .expect("other")
                .is_some()
        );
        assert_eq!(admission.admit(&agent, Effect::Read, now), Ok(None));
        assert_eq!(
            admission.admit(&Caller::human("c"), Effect::Compute, now),
            Ok(None)
        );
        admission.release(first);
        let third = admission
            .admit(&agent, Effect::Compute, now)
            .expect("3")
            .expect("permit");
        admission.release(second);
        admission.release(third);
        assert_eq!(admission.active("conv-1"), 0);
    }

    #[test]
    fn compute_admission_twenty_starts_per_sliding_minute() {
        let mut admission = ComputeAdmission::new(ComputeLimits::default());
        let agent = agent_all();
        let start = Instant::now();
        for i in 0..20u64 {
            let permit = admission
                .admit(&agent, Effect::Compute, start + Duration::from_secs(i))
                .expect("admitted")
                .expect("permit");
            admission.release(permit);
        }
        // The 21st within the window is refused ...
        assert_eq!(
            admission.admit(&agent, Effect::Compute, start + Duration::from_secs(59)),
            Err(PolicyError::RateLimited)
        );
        // ... until the first start is 60 s old.
        let permit = admission
            .admit(&agent, Effect::Compute, start + Duration::from_secs(60))
            .expect("window moved")
            .expect("permit");
        admission.release(permit);
        assert_eq!(
            admission.admit(&agent, Effect::Compute, start + Duration::from_secs(60)),
            Err(PolicyError::RateLimited)
        );
    }

    #[test]
    fn compute_admission_bounds_tracked_conversations() {
        let limits = ComputeLimits {
            max_conversations: 1,
            ..ComputeLimits::default()
        };
        let mut admission = ComputeAdmission::new(limits);
        let now = Instant::now();
        let first = agent_with(Scope::ALL, "conv-1");
        let second = agent_with(Scope::ALL, "conv-2");
        let permit = admission
            .admit(&first, Effect::Compute, now)
            .expect("1")
            .expect("permit");
        assert_eq!(
            admission.admit(&second, Effect::Compute, now),
            Err(PolicyError::RateLimited)
        );
        admission.release(permit);
        let later = now + Duration::from_secs(60);
        assert!(
            admission
                .admit(&second, Effect::Compute, later)
                .expect("pruned")
                .is_some()
        );
    }
}
