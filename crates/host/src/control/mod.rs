//! The host's local control plane: the [`Service`] behind `awp-host serve`, which plays DeepChat's main process.
//!
//! [`ControlPlane`] ties the transport of `agentwire-local-control` to the host's domain: the surface, caller policy,
//! agent tokens, event hub and audit log of `agentwire-local-control`, the approval broker of `agentwire-approval`
//! (the approvals console is its renderer), the artifact spool of `agentwire-spool`, and this crate's store and
//! [`RunManager`] (detached runs are the same runs as `awp-host chat`'s).
//!
//! Domain mapping (DeepChat → here): a session is a thread (`sessionId` = thread id), `agentId` is an agent name,
//! `projectDir` is the agent's working directory for the run, `modelId` is the model override. Shapes are
//! DeepChat's, from `agentwire_local_control::contract`.
//!
//! Order of checks for every request (DeepChat's): token → surface → caller policy (effect, scopes, ownership) →
//! approval (CLI mutation guard: a fresh approval per request, failing closed at once with no renderer) → dispatch;
//! every decision is written to the audit log (method, effect, outcome, hash of the redacted arguments).

pub mod admission;
pub mod approver;
mod models;
mod ocr;
mod providers;
mod runs;
pub mod settings;
pub mod tools;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agentwire_approval::{
    Approvals, CliMutation, CliMutationGuard, GuardError, Limits as ApprovalLimits,
};
use agentwire_local_control::audit::{AuditLimits, AuditLog, AuditRecord, Outcome};
use agentwire_local_control::caller::{Caller, Scope};
use agentwire_local_control::contract::{self, Method, Validate};
use agentwire_local_control::envelope::{
    ErrorBody, ErrorCode, RequestEnvelope, UploadRequestEnvelope,
};
use agentwire_local_control::hub::{EventHub, HubLimits};
use agentwire_local_control::policy::{self, Decision, PolicyError};
use agentwire_local_control::server::{
    AgentToken, AuthorizeTarget, Download, PresentedToken, RequestContext, Route, Service,
    StreamSink, Transport as WireTransport, UploadedFile,
};
use agentwire_local_control::surface::{MethodSpec, Surface, Transport};
use agentwire_local_control::tokens::{IssueRequest, RequestGrant, TokenAuthority, TokenLimits};
use agentwire_spool::{ArtifactSpool, Limits as SpoolLimits};
use serde_json::Value;

use crate::agents::AgentRegistry;
use crate::detached::{AgentEnv, RunEvents, RunManager};
use crate::turn::TurnOptions;

pub use ocr::OcrConfig;
pub use runs::RunBridge;

/// The agent-token variable DeepChat's CLI reads (`DEEPCHAT_CLI_AGENT_TOKEN`).
pub const AGENT_TOKEN_ENV: &str = "DEEPCHAT_CLI_AGENT_TOKEN";

/// Scopes of the token an agent launched by the host gets: read its own runs and artifacts, cancel its own runs,
/// read the host's status and public settings, list the app's tools and call those whose TOOL.md says
/// `mutates: false` (`skills:read`; a mutating tool is denied to every agent token), list providers and models
/// and read model configurations (`providers:read`, `models:read`; every provider/model mutation is human-only),
/// invoke models and generate or transcribe media through compute admission (`models:invoke`, `media:generate`,
/// `audio:transcribe`; results are artifact ids and metadata, never bytes), read the OCR runtime's status and
/// extract text from its own artifacts (`ocr:read`, `ocr:extract`; never `ocr:manage`). Never `sessions:run` (an
/// agent cannot start runs).
pub const AGENT_SCOPES: &[Scope] = &[
    Scope::SystemRead,
    Scope::RunsRead,
    Scope::RunsCancel,
    Scope::ArtifactsRead,
    Scope::ArtifactsManage,
    Scope::SettingsRead,
    Scope::SkillsRead,
    Scope::ProvidersRead,
    Scope::ModelsRead,
    Scope::ModelsInvoke,
    Scope::MediaGenerate,
    Scope::AudioTranscribe,
    Scope::OcrRead,
    Scope::OcrExtract,
];

/// How the control plane is set up. Every field documents its default.
#[derive(Debug, Clone)]
pub struct ControlConfig {
    /// The host's data directory (store, settings; `local-control/` holds socket, descriptor, spool, audit).
    pub data_dir: PathBuf,
    /// Reported as `appVersion`.
    pub app_version: String,
    /// Directory prepended to an agent's `PATH` (the `deepchat` binary's). Default `None` (PATH unchanged).
    pub deepchat_dir: Option<PathBuf>,
    /// Options of detached runs. Default [`TurnOptions::default`].
    pub turn_options: TurnOptions,
    /// Approval timeout. Default 2 min (DeepChat's).
    pub approval_timeout: Duration,
    /// The app bundle whose tools `tools.list`/`tools.call` serve (`awp-host serve --app DIR`), loaded with
    /// [`tools::tool_limits`]. Default `None`: `tools.list` answers `[]` and `tools.call` `not_found`.
    pub app: Option<PathBuf>,
    /// Background compute admission (model/media/OCR and agents' tool calls). Default
    /// [`admission::AdmissionLimits::default`].
    pub admission: admission::AdmissionLimits,
    /// Bounds of every provider call of the compute methods (time, response bytes). Default
    /// [`agentwire_provider::Limits::default`].
    pub provider_limits: agentwire_provider::Limits,
    /// Offline OCR helpers and bounds. Default [`OcrConfig::default`] (`tesseract`, `pdftoppm`, `pdfinfo` on
    /// `PATH`).
    pub ocr: OcrConfig,
}

impl ControlConfig {
    /// Defaults for `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>, app_version: impl Into<String>) -> ControlConfig {
        ControlConfig {
            data_dir: data_dir.into(),
            app_version: app_version.into(),
            deepchat_dir: None,
            turn_options: TurnOptions::default(),
            approval_timeout: Duration::from_secs(120),
            app: None,
            admission: admission::AdmissionLimits::default(),
            provider_limits: agentwire_provider::Limits::default(),
            ocr: OcrConfig::default(),
        }
    }
}

/// Why the control plane could not be set up.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A directory or file under the data dir could not be prepared.
    #[error("{what}: {message}")]
    Setup {
        /// What was being prepared.
        what: &'static str,
        /// Why it failed.
        message: String,
    },
    /// The app bundle of [`ControlConfig::app`] did not load (code `manifest_*`, `cwd_escape`, …; the error
    /// names the file, line and field).
    #[error("app bundle: {0}")]
    App(#[from] agentwire_cli_driver::LoadError),
}

impl ControlError {
    /// A stable snake_case code: `local_control_setup`, or the app bundle's load code.
    pub fn code(&self) -> &'static str {
        match self {
            ControlError::Setup { .. } => "local_control_setup",
            ControlError::App(e) => e.code(),
        }
    }
}

/// Counters the transport reports for `cli.status` (set once the server runs).
pub trait ServerStats: Send + Sync {
    /// Open connections.
    fn active_connections(&self) -> u64;
    /// Requests being served.
    fn pending_requests(&self) -> u64;
}

pub(crate) struct Inner {
    pub(crate) data_dir: PathBuf,
    pub(crate) app_version: String,
    pub(crate) started_at_ms: u64,
    pub(crate) started: Instant,
    pub(crate) surface: Surface,
    pub(crate) tokens: Mutex<TokenAuthority>,
    pub(crate) hub: EventHub,
    pub(crate) audit: Mutex<AuditLog>,
    pub(crate) approvals: Approvals,
    pub(crate) guard: CliMutationGuard,
    pub(crate) approval_timeout: Duration,
    pub(crate) spool: ArtifactSpool,
    pub(crate) runs: OnceLock<Arc<RunManager>>,
    pub(crate) bridge: RunBridge,
    pub(crate) settings: Mutex<settings::Settings>,
    pub(crate) stats: OnceLock<Arc<dyn ServerStats>>,
    pub(crate) app: Option<Arc<agentwire_cli_driver::AppBundle>>,
    /// The host environment at open, the source of the tools' `sandbox.env.pass` and secrets (as for
    /// `awp-host tools call`).
    pub(crate) tool_env: std::collections::BTreeMap<String, String>,
    /// Background compute admission ([`admission`]).
    pub(crate) admission: admission::ComputeAdmission,
    /// Bounds of the compute methods' provider calls ([`ControlConfig::provider_limits`]).
    pub(crate) provider_limits: agentwire_provider::Limits,
    /// The compute methods' registry and provider clients ([`models`]).
    pub(crate) compute: models::ComputeState,
    /// Offline OCR runtime and cache.
    pub(crate) ocr: ocr::OcrService,
}

/// The control plane; cheap to clone (a shared handle).
#[derive(Clone)]
pub struct ControlPlane {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("data_dir", &self.inner.data_dir)
            .finish_non_exhaustive()
    }
}

/// What `authorize` hands to dispatch.
#[derive(Debug)]
pub struct Grant {
    caller: Caller,
    method: &'static str,
    token: Option<RequestGrant>,
    /// Held while a background compute request runs ([`admission`]); `None` for everything else.
    compute: Option<admission::ComputePermit>,
}

impl Grant {
    /// The compute capacity this request holds, `None` unless the method is background compute
    /// ([`admission::compute_domain`]); its [`queue_ms`](admission::ComputePermit::queue_ms) is the wait
    /// DeepChat reports as `latency.queueMs`.
    pub fn compute_permit(&self) -> Option<&admission::ComputePermit> {
        self.compute.as_ref()
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn setup_error(what: &'static str) -> impl Fn(String) -> ControlError {
    move |message| ControlError::Setup { what, message }
}

impl ControlPlane {
    /// Sets up the control plane for `config.data_dir` with agents from `registry`: opens the spool (removing
    /// stale spool files of an earlier start), the audit log and the settings, and the run manager.
    ///
    /// # Errors
    /// [`ControlError::Setup`] when a directory or file cannot be prepared; [`ControlError::App`] when
    /// [`ControlConfig::app`] does not load.
    pub async fn open(
        config: ControlConfig,
        registry: Arc<AgentRegistry>,
    ) -> Result<ControlPlane, ControlError> {
        let app = match &config.app {
            Some(dir) => Some(Arc::new(agentwire_cli_driver::AppBundle::load_with(
                dir,
                tools::tool_limits(),
            )?)),
            None => None,
        };
        let control_dir = config.data_dir.join("local-control");
        crate::paths::create_private_dir(&control_dir)
            .map_err(|e| setup_error("local-control directory")(e.to_string()))?;
        let spool = ArtifactSpool::open(control_dir.join("spool"), SpoolLimits::default())
            .await
            .map_err(|e| setup_error("artifact spool")(e.to_string()))?;
        let audit = AuditLog::open(&control_dir.join("audit"), AuditLimits::default())
            .map_err(|e| setup_error("audit log")(e.to_string()))?;
        let hub = EventHub::new(HubLimits::default())
            .map_err(|e| setup_error("event hub")(e.to_string()))?;
        let approvals = Approvals::new(ApprovalLimits::default());
        let inner = Arc::new(Inner {
            data_dir: config.data_dir.clone(),
            app_version: config.app_version.clone(),
            started_at_ms: now_ms(),
            started: Instant::now(),
            surface: Surface::standard(),
            tokens: Mutex::new(TokenAuthority::new(TokenLimits::default())),
            hub,
            audit: Mutex::new(audit),
            guard: CliMutationGuard::new(approvals.clone()),
            approvals,
            approval_timeout: config.approval_timeout,
            spool,
            runs: OnceLock::new(),
            bridge: RunBridge::default(),
            settings: Mutex::new(settings::Settings::load(&config.data_dir)),
            stats: OnceLock::new(),
            app,
            tool_env: agentwire_cli_driver::CallContext::from_process_env().env,
            admission: admission::ComputeAdmission::new(config.admission.clone()),
            provider_limits: config.provider_limits.clone(),
            compute: models::ComputeState::default(),
            ocr: ocr::OcrService::new(config.ocr.clone(), &config.data_dir),
        });
        let plane = ControlPlane { inner };
        let events: RunEvents = {
            let weak = Arc::downgrade(&plane.inner);
            Arc::new(move |run, signal| {
                if let Some(inner) = weak.upgrade() {
                    runs::on_signal(&inner, run, signal);
                }
            })
        };
        let agent_env: AgentEnv = {
            let weak = Arc::downgrade(&plane.inner);
            let deepchat_dir = config.deepchat_dir.clone();
            Arc::new(move |thread, run| match weak.upgrade() {
                Some(inner) => agent_env(&inner, deepchat_dir.as_deref(), thread.as_str(), run),
                None => Vec::new(),
            })
        };
        let manager = RunManager::new(
            config.data_dir.clone(),
            registry,
            config.turn_options.clone(),
            events,
        )
        .with_agent_env(agent_env);
        let _ = plane.inner.runs.set(Arc::new(manager));
        Ok(plane)
    }

    /// Issues an agent token scoped to conversation (thread) `conversation` with [`AGENT_SCOPES`], as a run's
    /// agent gets in `DEEPCHAT_CLI_AGENT_TOKEN`; it expires with the default TTL (35 min) and is not tied to a run.
    ///
    /// # Errors
    /// The token authority's code (`invalid_request`, `rate_limited` when full).
    pub fn issue_agent_token(&self, conversation: &str) -> Result<String, String> {
        lock(&self.inner.tokens)
            .issue(
                IssueRequest::new(conversation, AGENT_SCOPES.to_vec()),
                Instant::now(),
            )
            .map(|issued| issued.token.expose().to_owned())
            .map_err(|e| e.code().to_owned())
    }

    /// Gives `cli.status` the transport's counters.
    pub fn set_server_stats(&self, stats: Arc<dyn ServerStats>) {
        let _ = self.inner.stats.set(stats);
    }

    /// The loaded app bundle (`ControlConfig::app`), if any.
    pub fn app(&self) -> Option<&agentwire_cli_driver::AppBundle> {
        self.inner.app.as_deref()
    }

    /// The background compute admission every `compute` method but `sessions.runDetached` passes
    /// ([`admission`]); handlers read their wait from [`Grant::compute_permit`].
    pub fn compute_admission(&self) -> &admission::ComputeAdmission {
        &self.inner.admission
    }

    /// The artifact spool (owned output artifacts; owners are `human` or `agent:<conversation id>`).
    pub fn spool(&self) -> &ArtifactSpool {
        &self.inner.spool
    }

    /// The approval broker (attach the approvals console as a renderer).
    pub fn approvals(&self) -> &Approvals {
        &self.inner.approvals
    }

    /// The detached runs.
    pub fn runs(&self) -> &Arc<RunManager> {
        // Set in `open` before the plane is returned.
        self.inner
            .runs
            .get()
            .unwrap_or_else(|| unreachable!("set in open"))
    }

    /// Shutdown, in the spec's order after the server stopped accepting: cancel live runs (bounded by `grace`),
    /// close event subscribers, cancel every approval, revoke every token, clear the spool.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.ocr.close();
        let left = self.runs().shutdown(grace).await;
        if !left.is_empty() {
            tracing::warn!(
                runs = left.len(),
                "runs still live at shutdown; they become interrupted"
            );
        }
        self.inner.hub.close();
        self.inner.approvals.clear();
        lock(&self.inner.tokens).clear();
        if let Err(e) = self.inner.spool.clear().await {
            tracing::warn!(error = %e, "could not clear the artifact spool");
        }
    }
}

/// Environment for the agent of run `run` in thread `thread`: a run-scoped agent token and `PATH` with the
/// `deepchat` binary's directory first.
fn agent_env(
    inner: &Inner,
    deepchat_dir: Option<&Path>,
    thread: &str,
    run: &crate::ids::RunId,
) -> Vec<(String, String)> {
    runs::run_recorded(inner, thread, run);
    let mut env = Vec::new();
    let issued = lock(&inner.tokens).issue(
        IssueRequest::new(thread, AGENT_SCOPES.to_vec()),
        Instant::now(),
    );
    match issued {
        Ok(issued) => {
            inner
                .bridge
                .remember_token(run.as_str(), issued.claims.token_id());
            env.push((AGENT_TOKEN_ENV.to_owned(), issued.token.expose().to_owned()));
        }
        Err(e) => tracing::warn!(code = e.code(), "no agent token for the run"),
    }
    env.push(data_dir_env(&inner.data_dir));
    env.extend(deepchat_dir.and_then(path_with_first));
    env
}

/// `("AWP_HOST_DATA_DIR", dir)`: where the agent's `deepchat` finds this host's descriptor (whatever data dir the
/// host runs with).
pub fn data_dir_env(dir: &Path) -> (String, String) {
    // Absolute: the agent may run in another directory (`projectDir`).
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    (
        "AWP_HOST_DATA_DIR".to_owned(),
        dir.to_string_lossy().into_owned(),
    )
}

/// `("PATH", dir + this process's PATH)`: how an agent finds the `deepchat` binary next to the host's.
pub fn path_with_first(dir: &Path) -> Option<(String, String)> {
    let mut paths = vec![dir.to_path_buf()];
    if let Some(path) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&path));
    }
    let joined = std::env::join_paths(paths).ok()?;
    Some(("PATH".to_owned(), joined.to_string_lossy().into_owned()))
}

/// A token for the agent of a turn run outside `serve` (an `awp-host chat` turn), asked from the `serve` running
/// for the same data directory (`agentTokens.issue`) and revoked with [`ChatAgentToken::revoke`] when the turn
/// ends. With no `serve` running (no live descriptor) there is no token and the agent gets none.
#[derive(Debug, Clone)]
pub struct ChatAgentToken {
    client: Option<agentwire_local_control::client::Client>,
    data_dir: PathBuf,
    deepchat_dir: Option<PathBuf>,
    token_id: Arc<Mutex<Option<String>>>,
}

impl ChatAgentToken {
    /// How long one `agentTokens.*` call may take before the turn goes on without a token.
    pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

    /// For the host of `data_dir`; `deepchat_dir` is prepended to the agent's `PATH` when a token was issued.
    pub fn discover(data_dir: &Path, deepchat_dir: Option<PathBuf>) -> ChatAgentToken {
        let client = agentwire_local_control::descriptor::discover(data_dir)
            .ok()
            .and_then(|descriptor| {
                let token = descriptor.token.clone();
                agentwire_local_control::client::Client::from_descriptor(&descriptor, token).ok()
            });
        ChatAgentToken {
            client,
            data_dir: data_dir.to_path_buf(),
            deepchat_dir,
            token_id: Arc::default(),
        }
    }

    /// The hook for [`TurnOptions::on_run_recorded`](crate::turn::TurnOptions::on_run_recorded): asks for a
    /// token scoped to the turn's thread.
    pub fn hook(&self) -> crate::turn::RunRecordedHook {
        let this = self.clone();
        crate::turn::RunRecordedHook(Arc::new(move |thread, _run| {
            let this = this.clone();
            let thread = thread.as_str().to_owned();
            Box::pin(async move { this.issue(&thread).await })
        }))
    }

    async fn issue(&self, thread: &str) -> Vec<(String, String)> {
        let Some(client) = &self.client else {
            return Vec::new();
        };
        let request = RequestEnvelope::new(
            "chat-agent-token",
            contract::ours::AgentTokensIssue::NAME,
            serde_json::json!({ "conversationId": thread }),
        );
        let issued = client
            .rpc(&request, Self::CALL_TIMEOUT)
            .await
            .ok()
            .and_then(|value| {
                contract::decode_result::<contract::ours::AgentTokensIssue>(value).ok()
            });
        let Some(issued) = issued else {
            tracing::debug!("no agent token from the local control plane");
            return Vec::new();
        };
        *lock(&self.token_id) = Some(issued.token_id);
        let mut env = vec![
            (AGENT_TOKEN_ENV.to_owned(), issued.token),
            data_dir_env(&self.data_dir),
        ];
        env.extend(self.deepchat_dir.as_deref().and_then(path_with_first));
        env
    }

    /// Revokes the issued token, if any (errors are ignored: the token also expires on its own).
    pub async fn revoke(&self) {
        let (Some(client), Some(token_id)) = (&self.client, lock(&self.token_id).take()) else {
            return;
        };
        let request = RequestEnvelope::new(
            "chat-agent-token",
            contract::ours::AgentTokensRevoke::NAME,
            serde_json::json!({ "tokenId": token_id }),
        );
        if client.rpc(&request, Self::CALL_TIMEOUT).await.is_err() {
            tracing::debug!("agent token not revoked; it expires on its own");
        }
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn policy_error(error: &PolicyError) -> ErrorBody {
    let code = ErrorCode::parse(error.code()).unwrap_or(ErrorCode::InternalError);
    ErrorBody::new(code, error.to_string()).retriable(error.retriable())
}

pub(crate) fn error(code: ErrorCode, message: impl Into<String>) -> ErrorBody {
    ErrorBody::new(code, message)
}

fn contract_error(e: &contract::ContractError) -> ErrorBody {
    error(ErrorCode::InvalidRequest, e.to_string())
}

/// Decodes and validates `params` as method `M`'s.
pub(crate) fn params<M: Method>(params: Value) -> Result<M::Params, ErrorBody> {
    contract::decode_params::<M>(params).map_err(|e| contract_error(&e))
}

/// Serializes a result after validating it against `M`'s result contract (a shape we would not accept from
/// DeepChat is never sent).
pub(crate) fn result<M: Method>(value: &M::Result) -> Result<Value, ErrorBody>
where
    M::Result: serde::Serialize + Validate,
{
    value
        .validate()
        .map_err(|e| error(ErrorCode::InternalError, format!("result contract: {e}")))?;
    serde_json::to_value(value).map_err(|e| {
        error(
            ErrorCode::InternalError,
            format!("result not serializable: {e}"),
        )
    })
}

fn wire_transport(transport: Transport) -> Option<WireTransport> {
    match transport {
        Transport::Rpc => Some(WireTransport::Rpc),
        Transport::Stream => Some(WireTransport::Stream),
        Transport::Upload => Some(WireTransport::Upload),
        Transport::Download => None,
    }
}

impl ControlPlane {
    fn caller(&self, ctx: &RequestContext) -> Result<(Caller, Option<RequestGrant>), ErrorBody> {
        let connection = ctx.connection_id.to_string();
        match &ctx.token {
            PresentedToken::Human => Ok((Caller::human(connection), None)),
            PresentedToken::Agent(token) => {
                let grant = lock(&self.inner.tokens)
                    .begin_request(token.expose(), Instant::now())
                    .map_err(|e| {
                        let code =
                            ErrorCode::parse(e.code()).unwrap_or(ErrorCode::AuthenticationFailed);
                        error(code, e.to_string())
                    })?;
                Ok((Caller::agent(connection, &grant), Some(grant)))
            }
            _ => Err(error(ErrorCode::AuthenticationFailed, "unknown credential")),
        }
    }

    fn audit(
        &self,
        caller: &Caller,
        spec: &MethodSpec,
        params: &Value,
        outcome: Outcome,
        id: &str,
    ) {
        match AuditRecord::new(caller, spec, params, outcome, id, SystemTime::now()) {
            Ok(record) => {
                if let Err(e) = lock(&self.inner.audit).append(&record) {
                    tracing::warn!(code = e.code(), "audit record not written");
                }
            }
            Err(e) => tracing::warn!(code = e.code(), "audit record not built"),
        }
    }

    async fn authorize_call(
        &self,
        ctx: &RequestContext,
        method: &str,
        transport: Transport,
        params: &Value,
        request_id: &str,
    ) -> Result<Grant, ErrorBody> {
        let (caller, token) = self.caller(ctx)?;
        let release = |token: Option<RequestGrant>| {
            if let Some(token) = token {
                lock(&self.inner.tokens).end_request(token);
            }
        };
        let spec = match self.inner.surface.lookup(method, transport) {
            Ok(spec) => spec,
            Err(e) => {
                release(token);
                return Err(policy_error(&e));
            }
        };
        // `tools.call`: the effect comes from the tool's `mutates:` in the loaded bundle, which the surface's
        // resolver cannot see; an unknown tool is `not_found` before any approval is asked for.
        let resolved;
        let spec = if spec.method == contract::ours::ToolsCall::NAME {
            let tool = tools::tool_id(params).unwrap_or_default();
            let resolved_spec =
                match tools::effect(self.inner.app.as_deref(), tool).map(|e| spec.with_effect(e)) {
                    Some(Ok(resolved_spec)) => resolved_spec,
                    Some(Err(e)) => {
                        self.audit(&caller, spec, params, Outcome::Denied, request_id);
                        release(token);
                        return Err(policy_error(&e));
                    }
                    None => {
                        self.audit(&caller, spec, params, Outcome::Denied, request_id);
                        release(token);
                        return Err(tools::not_loaded(tool));
                    }
                };
            resolved = resolved_spec;
            &resolved
        } else {
            spec
        };
        match policy::decide(&caller, spec, params) {
            Decision::Allow => {}
            Decision::Deny(e) => {
                self.audit(&caller, spec, params, Outcome::Denied, request_id);
                release(token);
                return Err(policy_error(&e));
            }
            Decision::NeedsApproval => {
                let connection = ctx.connection_id.to_string();
                let summary = match providers::review(spec.method, params) {
                    None => spec.audit.project(params),
                    Some(Ok(display)) => display,
                    Some(Err(e)) => {
                        self.audit(&caller, spec, params, Outcome::Denied, request_id);
                        release(token);
                        return Err(e);
                    }
                };
                // A mutation certain to fail on the stored state (a name taken, the built-in provider changed,
                // an unknown provider or model) fails before anyone is asked to approve it.
                if let Err(e) = providers::precheck(self, spec.method, params).await {
                    self.audit(&caller, spec, params, Outcome::Denied, request_id);
                    release(token);
                    return Err(e);
                }
                let display = serde_json::json!({
                    "operation": spec.method,
                    "effect": policy::resolve_effect(spec, params).as_str(),
                    "summary": summary,
                });
                let mutation = CliMutation::new(&connection, spec.method, params)
                    .display(display)
                    .timeout(self.inner.approval_timeout);
                let decided = tokio::select! {
                    decided = self.inner.guard.authorize(mutation) => decided,
                    () = ctx.cancel.cancelled() => Err(GuardError::Cancelled),
                };
                if let Err(e) = decided {
                    let (outcome, code) = match &e {
                        GuardError::Timeout => {
                            (Outcome::ApprovalTimeout, ErrorCode::ApprovalTimeout)
                        }
                        GuardError::Cancelled => (Outcome::Cancelled, ErrorCode::Cancelled),
                        GuardError::NoRenderer => (Outcome::Unavailable, ErrorCode::ApprovalDenied),
                        _ => (
                            Outcome::ApprovalDenied,
                            ErrorCode::parse(e.code()).unwrap_or(ErrorCode::ApprovalDenied),
                        ),
                    };
                    self.audit(&caller, spec, params, outcome, request_id);
                    release(token);
                    return Err(error(code, e.to_string()));
                }
                self.audit(&caller, spec, params, Outcome::Approved, request_id);
                let compute = match self.admit_compute(ctx, &caller, spec, params).await {
                    Ok(compute) => compute,
                    Err(e) => {
                        self.audit(&caller, spec, params, Outcome::RateLimited, request_id);
                        release(token);
                        return Err(e);
                    }
                };
                return Ok(Grant {
                    caller,
                    method: spec.method,
                    token,
                    compute,
                });
            }
        }
        // Compute admission after policy (DeepChat's order): a refusal is audited as `rate-limited` instead of
        // `allowed`.
        let compute = match self.admit_compute(ctx, &caller, spec, params).await {
            Ok(compute) => compute,
            Err(e) => {
                self.audit(&caller, spec, params, Outcome::RateLimited, request_id);
                release(token);
                return Err(e);
            }
        };
        self.audit(&caller, spec, params, Outcome::Allowed, request_id);
        Ok(Grant {
            caller,
            method: spec.method,
            token,
            compute,
        })
    }

    /// Background compute admission for `spec` ([`admission::compute_domain`]); `None` for a method that is not
    /// background compute. Waiting in the queue ends with the request (`ctx.cancel`).
    async fn admit_compute(
        &self,
        ctx: &RequestContext,
        caller: &Caller,
        spec: &MethodSpec,
        params: &Value,
    ) -> Result<Option<admission::ComputePermit>, ErrorBody> {
        let effect = policy::resolve_effect(spec, params);
        let Some(domain) = admission::compute_domain(spec.method, effect) else {
            return Ok(None);
        };
        let request = admission::ComputeRequest::new(spec.method, domain, caller);
        tokio::select! {
            admitted = self.inner.admission.admit(request) => admitted
                .map(Some)
                .map_err(|e| e.to_error_body()),
            () = ctx.cancel.cancelled() => Err(error(ErrorCode::Cancelled, "cancelled while waiting for compute capacity")),
        }
    }

    fn end(&self, grant: &mut Grant) {
        grant.compute = None;
        if let Some(token) = grant.token.take() {
            lock(&self.inner.tokens).end_request(token);
        }
    }
}

impl Service for ControlPlane {
    type Grant = Grant;

    fn route(&self, method: &str) -> Option<Route> {
        let spec = self.inner.surface.get(method)?;
        let transport = wire_transport(spec.transport)?;
        Some(Route::new(
            transport,
            spec.limits.max_body_bytes,
            spec.limits.timeout,
        ))
    }

    fn authenticate_agent(&self, token: &AgentToken) -> Result<(), ErrorBody> {
        if agentwire_local_control::tokens::is_token_shaped(token.expose()) {
            Ok(())
        } else {
            Err(error(ErrorCode::AuthenticationFailed, "invalid token"))
        }
    }

    async fn authorize(
        &self,
        ctx: &RequestContext,
        target: AuthorizeTarget<'_>,
    ) -> Result<Grant, ErrorBody> {
        match target {
            AuthorizeTarget::Request(request, transport) => {
                let transport = match transport {
                    WireTransport::Stream => Transport::Stream,
                    WireTransport::Upload => Transport::Upload,
                    _ => Transport::Rpc,
                };
                self.authorize_call(
                    ctx,
                    &request.method,
                    transport,
                    &request.params,
                    &request.id,
                )
                .await
            }
            AuthorizeTarget::Upload(upload) => {
                let request = upload.request();
                self.authorize_call(
                    ctx,
                    &request.method,
                    Transport::Upload,
                    &request.params,
                    &request.id,
                )
                .await
            }
            AuthorizeTarget::Download { artifact_id } => {
                let params = serde_json::json!({ "id": artifact_id });
                self.authorize_call(
                    ctx,
                    "artifacts.read",
                    Transport::Download,
                    &params,
                    "download",
                )
                .await
            }
            _ => Err(error(ErrorCode::NotFound, "unsupported request")),
        }
    }

    async fn call(
        &self,
        ctx: &RequestContext,
        mut grant: Grant,
        request: RequestEnvelope,
    ) -> Result<Value, ErrorBody> {
        let answer = self.dispatch(ctx, &grant, request).await;
        self.end(&mut grant);
        answer
    }

    async fn stream(
        &self,
        ctx: &RequestContext,
        mut grant: Grant,
        request: RequestEnvelope,
        sink: StreamSink,
    ) -> Result<Value, ErrorBody> {
        let answer = match grant.method {
            contract::runs::Subscribe::NAME => {
                runs::subscribe(self, ctx, &grant.caller, request, sink).await
            }
            m if models::streams(m) => models::stream(self, ctx, &grant, request, sink).await,
            other => Err(error(
                ErrorCode::NotFound,
                format!("{other} is not a stream method"),
            )),
        };
        self.end(&mut grant);
        answer
    }

    async fn upload(
        &self,
        ctx: &RequestContext,
        mut grant: Grant,
        request: UploadRequestEnvelope,
        file: UploadedFile,
    ) -> Result<Value, ErrorBody> {
        let answer = match grant.method {
            m if models::uploads(m) => models::upload(self, ctx, &grant, request, file).await,
            m if ocr::handles(m) => ocr::upload(self, ctx, &grant, request, file).await,
            other => Err(error(
                ErrorCode::NotFound,
                format!("{other} takes no upload on this host"),
            )),
        };
        self.end(&mut grant);
        answer
    }

    async fn download(
        &self,
        _ctx: &RequestContext,
        mut grant: Grant,
        artifact_id: String,
    ) -> Result<Download, ErrorBody> {
        let answer = runs::download(self, &grant.caller, &artifact_id).await;
        if let (Ok(download), Some(token)) = (&answer, &grant.token) {
            let charged =
                lock(&self.inner.tokens).charge_bytes(token, download.size, Instant::now());
            if let Err(e) = charged {
                self.end(&mut grant);
                return Err(error(
                    ErrorCode::parse(e.code()).unwrap_or(ErrorCode::RateLimited),
                    e.to_string(),
                ));
            }
        }
        self.end(&mut grant);
        answer
    }
}

impl ControlPlane {
    async fn dispatch(
        &self,
        ctx: &RequestContext,
        grant: &Grant,
        request: RequestEnvelope,
    ) -> Result<Value, ErrorBody> {
        use contract::{artifacts, cli, ours, runs as wire_runs, settings as wire_settings};
        if models::handles(grant.method) {
            return models::dispatch(self, ctx, grant, request).await;
        }
        let caller = &grant.caller;
        let p = request.params;
        match grant.method {
            cli::Status::NAME => {
                params::<cli::Status>(p)?;
                let (active, pending) = match self.inner.stats.get() {
                    Some(stats) => (stats.active_connections(), stats.pending_requests()),
                    None => (0, 0),
                };
                result::<cli::Status>(&cli::StatusResult {
                    running: true,
                    pid: std::process::id(),
                    started_at: self.inner.started_at_ms,
                    uptime_ms: u64::try_from(self.inner.started.elapsed().as_millis())
                        .unwrap_or(u64::MAX),
                    endpoint_kind: cli::EndpointKind::Unix,
                    active_connections: active,
                    pending_requests: pending,
                })
            }
            cli::Version::NAME => {
                params::<cli::Version>(p)?;
                result::<cli::Version>(&cli::VersionResult::new(self.inner.app_version.clone()))
            }
            cli::Capabilities::NAME => {
                params::<cli::Capabilities>(p)?;
                result::<cli::Capabilities>(&cli::CapabilitiesResult {
                    protocol_version: contract::PROTOCOL_VERSION,
                    surface_version: contract::SURFACE_VERSION,
                    capabilities: self.inner.surface.capabilities(),
                })
            }
            cli::Doctor::NAME => {
                params::<cli::Doctor>(p)?;
                result::<cli::Doctor>(&self.doctor())
            }
            wire_runs::RunDetached::NAME => {
                let params = params::<wire_runs::RunDetached>(p)?;
                runs::run_detached(self, &request.id, params).await
            }
            wire_runs::Get::NAME => {
                let params = params::<wire_runs::Get>(p)?;
                runs::get(self, caller, &params)
            }
            wire_runs::Cancel::NAME => {
                let params = params::<wire_runs::Cancel>(p)?;
                runs::cancel(self, caller, &params.run_id)
            }
            ours::ThreadsList::NAME => {
                let params = params::<ours::ThreadsList>(p)?;
                runs::threads_list(self, &params)
            }
            ours::ThreadsGet::NAME => {
                let params = params::<ours::ThreadsGet>(p)?;
                runs::thread_get(self, caller, &params)
            }
            ours::ApprovalsListPending::NAME => {
                params::<ours::ApprovalsListPending>(p)?;
                result::<ours::ApprovalsListPending>(&self.pending_approvals())
            }
            ours::ToolsList::NAME => {
                params::<ours::ToolsList>(p)?;
                tools::list(self)
            }
            ours::ToolsCall::NAME => {
                let params = params::<ours::ToolsCall>(p)?;
                tools::call(self, ctx, params).await
            }
            ours::RunsExportTranscript::NAME => {
                let params = params::<ours::RunsExportTranscript>(p)?;
                runs::export_transcript(self, ctx, caller, &request.id, &params).await
            }
            ours::AgentTokensIssue::NAME => {
                let params = params::<ours::AgentTokensIssue>(p)?;
                let issued = lock(&self.inner.tokens)
                    .issue(
                        IssueRequest::new(&params.conversation_id, AGENT_SCOPES.to_vec()),
                        Instant::now(),
                    )
                    .map_err(|e| {
                        error(
                            ErrorCode::parse(e.code()).unwrap_or(ErrorCode::InvalidRequest),
                            e.to_string(),
                        )
                    })?;
                let ttl = issued
                    .claims
                    .expires_at()
                    .saturating_duration_since(Instant::now());
                result::<ours::AgentTokensIssue>(&ours::IssueAgentTokenResult {
                    token: issued.token.expose().to_owned(),
                    token_id: issued.claims.token_id().to_owned(),
                    expires_at: now_ms()
                        .saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
                    scopes: AGENT_SCOPES.iter().map(|s| s.as_str().to_owned()).collect(),
                })
            }
            ours::AgentTokensRevoke::NAME => {
                let params = params::<ours::AgentTokensRevoke>(p)?;
                let revoked = lock(&self.inner.tokens).revoke(&params.token_id);
                result::<ours::AgentTokensRevoke>(&ours::RevokeAgentTokenResult { revoked })
            }
            artifacts::Describe::NAME => {
                let params = params::<artifacts::Describe>(p)?;
                runs::artifact_describe(self, caller, &params.id)
            }
            artifacts::Delete::NAME => {
                let params = params::<artifacts::Delete>(p)?;
                runs::artifact_delete(self, caller, &params.id).await
            }
            wire_settings::GetPublic::NAME => {
                let params = params::<wire_settings::GetPublic>(p)?;
                let settings = lock(&self.inner.settings);
                result::<wire_settings::GetPublic>(&wire_settings::GetResult {
                    version: settings.version(),
                    values: settings.get(params.keys.as_deref()),
                })
            }
            wire_settings::UpdatePublic::NAME => {
                let params = params::<wire_settings::UpdatePublic>(p)?;
                let Some(change) = params.changes.into_iter().next() else {
                    return Err(error(ErrorCode::InvalidRequest, "changes is empty"));
                };
                let key = change.key();
                let (version, values) = lock(&self.inner.settings).apply(change).map_err(|e| {
                    error(ErrorCode::Unavailable, format!("settings not saved: {e}"))
                })?;
                result::<wire_settings::UpdatePublic>(&wire_settings::UpdateResult {
                    version,
                    changed_keys: vec![key],
                    values,
                })
            }
            m if providers::handles(m) => providers::dispatch(self, m, p).await,
            m if ocr::handles(m) => ocr::dispatch(self, ctx, grant, p).await,
            other => Err(error(
                ErrorCode::NotFound,
                format!("{other} is not served on /v1/rpc"),
            )),
        }
    }

    fn doctor(&self) -> contract::cli::DoctorResult {
        use contract::cli::{CheckId, CheckStatus, DoctorCheck, DoctorResult};
        let renderer = self.inner.approvals.renderer_count() > 0;
        let checks = vec![
            DoctorCheck {
                id: CheckId::Transport,
                status: CheckStatus::Ok,
                message: "serving on a private Unix socket".to_owned(),
            },
            DoctorCheck {
                id: CheckId::Descriptor,
                status: CheckStatus::Ok,
                message: "descriptor written for this start".to_owned(),
            },
            DoctorCheck {
                id: CheckId::Surface,
                status: CheckStatus::Ok,
                message: format!("{} methods exposed", self.inner.surface.specs().len()),
            },
            DoctorCheck {
                id: CheckId::Renderer,
                status: if renderer {
                    CheckStatus::Ok
                } else {
                    CheckStatus::Warning
                },
                message: if renderer {
                    "an approvals console is attached".to_owned()
                } else {
                    "no approvals console: sensitive mutations are denied at once".to_owned()
                },
            },
        ];
        DoctorResult {
            healthy: true,
            checks,
        }
    }

    fn pending_approvals(&self) -> contract::ours::PendingApprovalsResult {
        let now = Instant::now();
        let now_ms = now_ms();
        let at = |instant: Instant| {
            if instant >= now {
                now_ms.saturating_add(u64::try_from((instant - now).as_millis()).unwrap_or(0))
            } else {
                now_ms.saturating_sub(u64::try_from((now - instant).as_millis()).unwrap_or(0))
            }
        };
        let approvals = self
            .inner
            .approvals
            .pending()
            .into_iter()
            .map(|a| contract::ours::PendingApproval {
                approval_id: a.id.to_string(),
                method: a.method.clone(),
                summary: crate::store::bounded_line(
                    &a.display
                        .get("summary")
                        .map(Value::to_string)
                        .unwrap_or_default(),
                    1000,
                ),
                requested_at: at(a.created_at),
                expires_at: at(a.expires_at),
            })
            .collect();
        contract::ours::PendingApprovalsResult {
            approvals,
            renderer_attached: self.inner.approvals.renderer_count() > 0,
        }
    }
}
