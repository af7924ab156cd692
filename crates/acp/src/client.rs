//! The client role: drive an ACP agent (a spawned process or any stream pair) over an agentwire-jsonrpc connection.
//!
//! One dispatcher task reads the connection's [`Incoming`]: it routes `session/update` notifications to their
//! session (in arrival order) and runs a task per agent request (`session/request_permission`, `fs/*`,
//! `terminal/*`, `elicitation/create`) on the installed handlers; `elicitation/complete` goes to the elicitation
//! handler. Turns ([`Turn`]) merge the session's updates with the `session/prompt` answer; before a turn
//! ends, the dispatcher is asked to route everything already read (a barrier), so every update the agent sent before
//! its answer is yielded before [`TurnEvent::End`].

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{
    AuthenticateRequest, CancelNotification, ClientCapabilities, CloseSessionRequest,
    CompleteElicitationNotification, ContentBlock, CreateElicitationRequest,
    CreateElicitationResponse, DeleteSessionRequest, ElicitationAction, ElicitationScope,
    FileSystemCapabilities, Implementation, InitializeRequest, InitializeResponse,
    ListSessionsRequest, ListSessionsResponse, LoadSessionRequest, LoadSessionResponse,
    LogoutRequest, NewSessionRequest, NewSessionResponse, PromptRequest, ReadTextFileRequest,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    ResumeSessionRequest, ResumeSessionResponse, SessionCapabilities, SessionConfigId,
    SessionConfigOption, SessionConfigOptionCategory, SessionConfigOptionValue, SessionId,
    SessionModeState, SessionUpdate, SetSessionConfigOptionRequest, SetSessionConfigOptionResponse,
    SetSessionModeRequest, StopReason, TextContent, UsageUpdate, WriteTextFileRequest,
};
use agentwire_jsonrpc::{
    Connection, ErrorObject, Incoming, IncomingMessage, IncomingRequest, PendingCall,
};
use agentwire_process::{ChildHandle, StopOutcome, StopPlan};
use futures_util::FutureExt as _;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::error::AcpError;
use crate::handlers::{
    DynElicitationHandler, DynFsHandler, DynPermissionHandler, ElicitationHandler, FsHandler,
    PermissionHandler, RejectPermissions,
};
use crate::kandev::{Dialect, KandevEvent, KandevMapper};
use crate::terminal::{DynTerminalHandler, TerminalHandler};
use crate::turn::{PROMPT, kandev_accept_outcome, prompt_outcome};
use crate::update::{Update, UpdateParams, parse_update_params};

/// Limits and identity of a [`Client`].
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The JSON-RPC connection's limits. Default: `agentwire_jsonrpc::Config::default()` (64 MiB lines, no call
    /// timeout: a turn lasts as long as the agent works).
    pub rpc: agentwire_jsonrpc::Config,
    /// Sent as `clientInfo` in `initialize`. Default `{"name":"agentwire-acp","version":<crate version>}`.
    pub client_info: Implementation,
    /// Capacity, in updates, of each session's queue. Default 256. When a session's queue is full, the dispatcher
    /// waits (back-pressure to the agent through the pipe): drain [`Session`]/[`Turn`] updates.
    pub session_update_queue: usize,
    /// Most updates kept for a session not registered yet *while a `session/new` is in flight* (an update sent
    /// right after the `session/new` answer can be read before [`Client::new_session`] registers the session).
    /// Default 1024. On overflow the oldest is dropped. An update for an unknown session while no `session/new` is
    /// in flight (a session never created, or one whose [`Session`] was dropped) is dropped at once; when the last
    /// `session/new` in flight ends, what is still kept (for sessions that were never created) is dropped. Every
    /// drop is counted in [`ClientStats::unrouted_updates_dropped`].
    pub max_unrouted_updates: usize,
    /// Most bytes (measured as the updates' JSON size) kept for unregistered sessions, under the same rule as
    /// [`ClientConfig::max_unrouted_updates`]. Default 16 MiB. An update larger than this is dropped at once; on
    /// overflow the oldest kept are dropped first.
    pub max_unrouted_bytes: usize,
    /// How long closing the connection may wait for queued output to be written. Default 2 s.
    pub close_timeout: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            rpc: agentwire_jsonrpc::Config::default(),
            client_info: Implementation::new("agentwire-acp", env!("CARGO_PKG_VERSION")),
            session_update_queue: 256,
            max_unrouted_updates: 1024,
            max_unrouted_bytes: 16 * 1024 * 1024,
            close_timeout: Duration::from_secs(2),
        }
    }
}

/// Counters of what the client dropped or noticed, next to the connection's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// The JSON-RPC connection's counters (invalid lines, unknown/late responses, …).
    pub rpc: agentwire_jsonrpc::Stats,
    /// `session/update` notifications that are neither v1 nor Kandev shaped, dropped.
    pub invalid_updates: u64,
    /// Updates for sessions that are not registered, dropped (see [`ClientConfig::max_unrouted_updates`]): a
    /// session never created, a dropped [`Session`], or a buffer over its bounds.
    pub unrouted_updates_dropped: u64,
    /// Updates routed to a session whose [`Session`] was being dropped (once it is unregistered, later updates
    /// for it count in [`ClientStats::unrouted_updates_dropped`]).
    pub updates_for_dropped_sessions: u64,
    /// Permission requests answered `cancelled` because the turn was cancelled.
    pub permissions_cancelled: u64,
    /// `elicitation/create` requests answered without a user: declined (no handler installed) or cancelled (the
    /// turn of their session was cancelled).
    pub elicitations_refused: u64,
}

/// Configures and connects a [`Client`]: the handlers installed decide the capabilities advertised.
pub struct ClientBuilder {
    config: ClientConfig,
    permission: Arc<dyn DynPermissionHandler>,
    fs: Option<Arc<dyn DynFsHandler>>,
    terminal: Option<Arc<dyn DynTerminalHandler>>,
    elicitation: Option<Arc<dyn DynElicitationHandler>>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("config", &self.config)
            .field("fs", &self.fs.is_some())
            .field("terminal", &self.terminal.is_some())
            .field("elicitation", &self.elicitation.is_some())
            .finish()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder::new()
    }
}

impl ClientBuilder {
    /// Default config, [`RejectPermissions`] (fail closed), no file system, no terminals and no elicitation handler
    /// (none advertised; an `elicitation/create` sent anyway is declined, as
    /// [`DeclineElicitations`](crate::DeclineElicitations) does).
    pub fn new() -> Self {
        ClientBuilder {
            config: ClientConfig::default(),
            permission: Arc::new(RejectPermissions),
            fs: None,
            terminal: None,
            elicitation: None,
        }
    }

    /// Replaces the config.
    pub fn config(mut self, config: ClientConfig) -> Self {
        self.config = config;
        self
    }

    /// Installs the permission handler (default [`RejectPermissions`]).
    pub fn permission_handler(mut self, handler: impl PermissionHandler) -> Self {
        self.permission = Arc::new(handler);
        self
    }

    /// Installs a file handler and advertises `fs.readTextFile` and `fs.writeTextFile`.
    pub fn fs_handler(mut self, handler: impl FsHandler) -> Self {
        self.fs = Some(Arc::new(handler));
        self
    }

    /// Installs a terminal handler and advertises `terminal: true`.
    pub fn terminal_handler(mut self, handler: impl TerminalHandler) -> Self {
        self.terminal = Some(Arc::new(handler));
        self
    }

    /// Installs an elicitation handler and advertises its [`ElicitationHandler::capabilities`] as
    /// `clientCapabilities.elicitation`. Without one nothing is advertised and requests are declined.
    pub fn elicitation_handler(mut self, handler: impl ElicitationHandler) -> Self {
        self.elicitation = Some(Arc::new(handler));
        self
    }

    /// The `clientCapabilities` this builder advertises: only what the installed handlers serve.
    pub fn capabilities(&self) -> ClientCapabilities {
        let fs = self.fs.is_some();
        ClientCapabilities::new()
            .fs(FileSystemCapabilities::new()
                .read_text_file(fs)
                .write_text_file(fs))
            .terminal(self.terminal.is_some())
            .elicitation(
                self.elicitation
                    .as_ref()
                    .map(|handler| handler.capabilities()),
            )
    }

    /// A client over `reader` (the agent's stdout) and `writer` (the agent's stdin). Spawns its tasks on the current
    /// tokio runtime. Call [`Client::initialize`] next.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn connect<R, W>(self, reader: R, writer: W) -> Client
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let (connection, incoming) = Connection::new(reader, writer, self.config.rpc.clone());
        self.over(connection, incoming, None)
    }

    /// A client over an existing connection, e.g. one end of [`Connection::memory`].
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn connect_connection(self, connection: Connection, incoming: Incoming) -> Client {
        self.over(connection, incoming, None)
    }

    /// Spawns the agent (stdout read as raw bytes) and connects to its stdin/stdout. The process runs in its own
    /// process group; [`Client::stop`] runs the stop ladder, and dropping the last handle kills the group.
    ///
    /// # Errors
    ///
    /// [`AcpError::Spawn`] when the program cannot be started.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn spawn(self, command: &mut agentwire_process::Command) -> Result<Client, AcpError> {
        let mut child = command.stdout_bytes().spawn()?;
        let stdin = child.stdin();
        let Some(stdout) = child.take_stdout() else {
            // A freshly spawned child always has its stdout; be explicit rather than panic.
            return Err(AcpError::ConnectionClosed);
        };
        let (reader, writer) = crate::stdio::child_pipes(stdout, stdin);
        let (connection, incoming) = Connection::new(reader, writer, self.config.rpc.clone());
        Ok(self.over(connection, incoming, Some(child)))
    }

    fn over(
        self,
        connection: Connection,
        incoming: Incoming,
        child: Option<agentwire_process::Child>,
    ) -> Client {
        let capabilities = self.capabilities();
        let router = Arc::new(Router {
            sessions: Mutex::new(HashMap::new()),
            unrouted: Mutex::new(Unrouted::default()),
            kandev: Mutex::new(KandevRouting::default()),
            max_unrouted: self.config.max_unrouted_updates,
            max_unrouted_bytes: self.config.max_unrouted_bytes,
            counters: Counters::default(),
        });
        // Unbounded but small: at most one barrier per turn that is ending.
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let dispatcher = Dispatcher {
            router: router.clone(),
            permission: self.permission,
            fs: self.fs,
            terminal: self.terminal,
            elicitation: self.elicitation,
        };
        tokio::spawn(dispatcher.run(incoming, control_rx));
        Client {
            inner: Arc::new(Inner {
                connection,
                router,
                control: control_tx,
                capabilities,
                config: self.config,
                state: Mutex::new(State::default()),
                child,
            }),
        }
    }
}

/// An ACP client connected to one agent. Cheap to clone.
///
/// ```no_run
/// # async fn demo() -> Result<(), agentwire_acp::AcpError> {
/// use agentwire_acp::{ClientBuilder, TurnEvent};
/// let mut command = agentwire_process::Command::new("acp-fixture");
/// let client = ClientBuilder::new().spawn(&mut command)?;
/// client.initialize().await?;
/// let mut session = client.new_session(std::path::Path::new("/tmp")).await?;
/// let mut turn = session.prompt_text("hello").await?;
/// while let Some(event) = turn.next().await {
///     match event {
///         TurnEvent::Update(update) => println!("{:?}", update.agent_text()),
///         TurnEvent::End(outcome) => println!("stop reason {outcome:?}"),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("connection", &self.inner.connection)
            .finish_non_exhaustive()
    }
}

struct Inner {
    connection: Connection,
    router: Arc<Router>,
    control: mpsc::UnboundedSender<Control>,
    capabilities: ClientCapabilities,
    config: ClientConfig,
    state: Mutex<State>,
    child: Option<agentwire_process::Child>,
}

#[derive(Default)]
struct State {
    dialect: Option<Dialect>,
    agent: Option<InitializeResponse>,
}

enum Control {
    /// Route every message already read, then answer.
    Barrier(oneshot::Sender<()>),
}

/// The JSON size of an update, in bytes (what keeping it costs, roughly); counted without building the JSON.
fn routed_bytes(routed: &Routed) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let written = match routed {
        Routed::Update(Update::Known(update)) => serde_json::to_writer(&mut count, update.as_ref()),
        Routed::Update(Update::Raw { update, .. }) => serde_json::to_writer(&mut count, update),
        Routed::KandevEnd(Ok(_)) => Ok(()),
        Routed::KandevEnd(Err(message)) => serde_json::to_writer(&mut count, message),
    };
    match written {
        Ok(()) => count.0,
        // Not serializable (cannot happen for these types): count it as too large to keep.
        Err(_) => usize::MAX,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks cannot leave the data inconsistent (plain inserts/removes).
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn to_params<T: Serialize>(value: &T) -> Result<Option<Value>, AcpError> {
    serde_json::to_value(value)
        .map(Some)
        .map_err(|error| AcpError::Encode(error.to_string()))
}

fn parse_answer<T: DeserializeOwned>(method: &str, value: Value) -> Result<T, AcpError> {
    serde_json::from_value(value).map_err(|error| AcpError::invalid_response(method, error))
}

impl Client {
    /// Starts building a client.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::new()
    }

    /// The underlying JSON-RPC connection (for extension methods and diagnostics).
    pub fn connection(&self) -> &Connection {
        &self.inner.connection
    }

    /// The spawned agent's process handle (pid, stderr tail, wait), when the client spawned it.
    pub fn child(&self) -> Option<ChildHandle> {
        self.inner
            .child
            .as_ref()
            .map(agentwire_process::Child::handle)
    }

    /// The capabilities advertised in `initialize`.
    pub fn capabilities(&self) -> &ClientCapabilities {
        &self.inner.capabilities
    }

    /// The dialect decided by `initialize`, `None` before it.
    pub fn dialect(&self) -> Option<Dialect> {
        lock(&self.inner.state).dialect
    }

    /// The agent's `initialize` answer (synthesized with default capabilities for the Kandev dialect).
    pub fn agent(&self) -> Option<InitializeResponse> {
        lock(&self.inner.state).agent.clone()
    }

    /// Counters of dropped and noticed input.
    pub fn stats(&self) -> ClientStats {
        let counters = &self.inner.router.counters;
        ClientStats {
            rpc: self.inner.connection.stats(),
            invalid_updates: counters.invalid_updates.load(Ordering::Relaxed),
            unrouted_updates_dropped: counters.unrouted_dropped.load(Ordering::Relaxed),
            updates_for_dropped_sessions: counters.dropped_sessions.load(Ordering::Relaxed),
            permissions_cancelled: counters.permissions_cancelled.load(Ordering::Relaxed),
            elicitations_refused: counters.elicitations_refused.load(Ordering::Relaxed),
        }
    }

    async fn call(&self, method: &str, params: Option<Value>) -> Result<Value, AcpError> {
        self.inner
            .connection
            .call(method, params)
            .await
            .map_err(|error| AcpError::from_call(method, error))
    }

    fn require_dialect(&self) -> Result<Dialect, AcpError> {
        self.dialect().ok_or(AcpError::NotInitialized)
    }

    /// Sends `initialize` with protocol version 1, the installed handlers' capabilities and `clientInfo`, and
    /// negotiates: an answer of version 1 selects ACP v1; a string version (`"1.0"`) selects the Kandev dialect;
    /// any other answer closes the connection.
    ///
    /// JSON sent: `{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false},"clientInfo":{…}}`.
    ///
    /// # Errors
    ///
    /// [`AcpError::UnsupportedProtocolVersion`] (connection closed), [`AcpError::Rpc`], [`AcpError::InvalidResponse`],
    /// [`AcpError::ConnectionClosed`].
    pub async fn initialize(&self) -> Result<InitializeResponse, AcpError> {
        const METHOD: &str = "initialize";
        let request = InitializeRequest::new(ProtocolVersion::V1)
            .client_capabilities(self.inner.capabilities.clone())
            .client_info(self.inner.config.client_info.clone());
        let answer = self.call(METHOD, to_params(&request)?).await?;
        let (dialect, response) = match Dialect::from_initialize_answer(&answer) {
            Some(Dialect::AcpV1) => (
                Dialect::AcpV1,
                parse_answer::<InitializeResponse>(METHOD, answer)?,
            ),
            Some(Dialect::Kandev) => (
                Dialect::Kandev,
                InitializeResponse::new(ProtocolVersion::V1),
            ),
            None => {
                let answered = answer
                    .get("protocolVersion")
                    .map_or_else(|| "none".to_owned(), Value::to_string);
                self.close().await;
                return Err(AcpError::UnsupportedProtocolVersion {
                    answered,
                    supported: ProtocolVersion::V1.as_u16(),
                });
            }
        };
        let mut state = lock(&self.inner.state);
        state.dialect = Some(dialect);
        state.agent = Some(response.clone());
        Ok(response)
    }

    /// Sends `authenticate {"methodId": …}` with one of the agent's advertised `authMethods`.
    ///
    /// # Errors
    ///
    /// [`AcpError::NotInitialized`], [`AcpError::Rpc`], [`AcpError::ConnectionClosed`].
    pub async fn authenticate(&self, method_id: &str) -> Result<(), AcpError> {
        self.require_dialect()?;
        let request = AuthenticateRequest::new(method_id.to_owned());
        self.call("authenticate", to_params(&request)?).await?;
        Ok(())
    }

    /// The agent's `sessionCapabilities` (empty before `initialize` and for the Kandev dialect).
    pub fn session_capabilities(&self) -> SessionCapabilities {
        lock(&self.inner.state)
            .agent
            .as_ref()
            .map(|agent| agent.agent_capabilities.session_capabilities.clone())
            .unwrap_or_default()
    }

    fn require_v1(&self, capability: &'static str, has: bool) -> Result<(), AcpError> {
        match self.require_dialect()? {
            Dialect::AcpV1 if has => Ok(()),
            _ => Err(AcpError::CapabilityMissing { capability }),
        }
    }

    /// Sends `logout {}`: the agent forgets its credentials (ACP v1 "Authentication", schema `$defs/LogoutRequest`).
    ///
    /// # Errors
    ///
    /// [`AcpError::CapabilityMissing`] unless the agent advertised `agentCapabilities.auth.logout`;
    /// [`AcpError::Rpc`], [`AcpError::ConnectionClosed`].
    pub async fn logout(&self) -> Result<(), AcpError> {
        let has = self
            .agent()
            .is_some_and(|agent| agent.agent_capabilities.auth.logout.is_some());
        self.require_v1("agentCapabilities.auth.logout", has)?;
        self.call("logout", to_params(&LogoutRequest::new())?)
            .await?;
        Ok(())
    }

    /// Sends `session/list {"cwd"?,"cursor"?}` (ACP v1 "Session List", schema `$defs/ListSessionsRequest`): one
    /// page of the agent's stored sessions; pass `nextCursor` back as `cursor` for the next.
    ///
    /// # Errors
    ///
    /// [`AcpError::CapabilityMissing`] unless `sessionCapabilities.list` was advertised; [`AcpError::Rpc`],
    /// [`AcpError::InvalidResponse`], [`AcpError::ConnectionClosed`].
    pub async fn list_sessions(
        &self,
        request: ListSessionsRequest,
    ) -> Result<ListSessionsResponse, AcpError> {
        const METHOD: &str = "session/list";
        let has = self.session_capabilities().list.is_some();
        self.require_v1("agentCapabilities.sessionCapabilities.list", has)?;
        let answer = self.call(METHOD, to_params(&request)?).await?;
        parse_answer(METHOD, answer)
    }

    /// Sends `session/resume {"sessionId":…,"cwd":…,"mcpServers":[]}` (ACP v1 "Resuming Sessions"): reopens a
    /// stored session **without** a history replay. The session is registered before the request goes out, so
    /// an agent that replays anyway is seen ([`Session::next_update`]).
    ///
    /// # Errors
    ///
    /// [`AcpError::CapabilityMissing`] unless `sessionCapabilities.resume` was advertised; otherwise as
    /// [`Client::new_session`].
    pub async fn resume_session(
        &self,
        session_id: SessionId,
        cwd: &Path,
    ) -> Result<Session, AcpError> {
        const METHOD: &str = "session/resume";
        let has = self.session_capabilities().resume.is_some();
        self.require_v1("agentCapabilities.sessionCapabilities.resume", has)?;
        let request = ResumeSessionRequest::new(session_id.clone(), cwd).mcp_servers(Vec::new());
        let params = to_params(&request)?;
        let mut session = self.register(session_id, None);
        let answer = self.call(METHOD, params).await?;
        let answer = if answer.is_null() {
            Value::Object(serde_json::Map::new())
        } else {
            answer
        };
        let response: ResumeSessionResponse = parse_answer(METHOD, answer)?;
        session.modes = response.modes;
        session.config_options = response.config_options;
        Ok(session)
    }

    /// Sends `session/close {"sessionId":…}` (ACP v1 "Closing Sessions"): the agent frees the session (it may be
    /// resumed or loaded later). See also [`Session::close`].
    ///
    /// # Errors
    ///
    /// [`AcpError::CapabilityMissing`] unless `sessionCapabilities.close` was advertised; [`AcpError::Rpc`],
    /// [`AcpError::ConnectionClosed`].
    pub async fn close_session(&self, session_id: &SessionId) -> Result<(), AcpError> {
        let has = self.session_capabilities().close.is_some();
        self.require_v1("agentCapabilities.sessionCapabilities.close", has)?;
        let request = CloseSessionRequest::new(session_id.clone());
        self.call("session/close", to_params(&request)?).await?;
        Ok(())
    }

    /// Sends `session/delete {"sessionId":…}` (ACP v1 "Deleting Sessions"): the agent forgets a stored session.
    ///
    /// # Errors
    ///
    /// [`AcpError::CapabilityMissing`] unless `sessionCapabilities.delete` was advertised; [`AcpError::Rpc`],
    /// [`AcpError::ConnectionClosed`].
    pub async fn delete_session(&self, session_id: &SessionId) -> Result<(), AcpError> {
        let has = self.session_capabilities().delete.is_some();
        self.require_v1("agentCapabilities.sessionCapabilities.delete", has)?;
        let request = DeleteSessionRequest::new(session_id.clone());
        self.call("session/delete", to_params(&request)?).await?;
        Ok(())
    }

    /// Creates a session with `cwd` (absolute) and no MCP servers.
    ///
    /// JSON sent (v1): `{"cwd":"/work","mcpServers":[]}`; Kandev dialect: `{}`.
    ///
    /// # Errors
    ///
    /// [`AcpError::NotInitialized`], [`AcpError::Rpc`] (e.g. -32000 auth required), [`AcpError::InvalidResponse`],
    /// [`AcpError::ConnectionClosed`].
    pub async fn new_session(&self, cwd: &Path) -> Result<Session, AcpError> {
        self.new_session_with(NewSessionRequest::new(cwd).mcp_servers(Vec::new()))
            .await
    }

    /// Creates a session from a full `session/new` request (MCP servers, …).
    ///
    /// # Errors
    ///
    /// As [`Client::new_session`].
    pub async fn new_session_with(&self, request: NewSessionRequest) -> Result<Session, AcpError> {
        const METHOD: &str = "session/new";
        let dialect = self.require_dialect()?;
        let params = match dialect {
            Dialect::AcpV1 => to_params(&request)?,
            Dialect::Kandev => Some(Value::Object(serde_json::Map::new())),
        };
        // Updates for the new session may be read before it is registered: keep them meanwhile.
        let _creating = self.inner.router.creating();
        let answer = self.call(METHOD, params).await?;
        let (session_id, modes, config_options) = match dialect {
            Dialect::AcpV1 => {
                let response: NewSessionResponse = parse_answer(METHOD, answer)?;
                (response.session_id, response.modes, response.config_options)
            }
            Dialect::Kandev => match answer.get("sessionId").and_then(Value::as_str) {
                Some(id) => (SessionId::new(id), None, None),
                None => {
                    return Err(AcpError::invalid_response(
                        METHOD,
                        "missing string sessionId",
                    ));
                }
            },
        };
        let mut session = self.register(session_id, modes);
        session.config_options = config_options;
        Ok(session)
    }

    /// Loads a saved session: the agent replays its history as `session/update`s, which the returned [`Session`]
    /// yields ([`Session::next_update`]) — those sent before the answer and those sent after it alike. The session is
    /// registered before the request goes out.
    ///
    /// # Errors
    ///
    /// [`AcpError::CapabilityMissing`] when the agent did not advertise `loadSession`; otherwise as
    /// [`Client::new_session`].
    pub async fn load_session(
        &self,
        session_id: SessionId,
        cwd: &Path,
    ) -> Result<Session, AcpError> {
        const METHOD: &str = "session/load";
        let dialect = self.require_dialect()?;
        let params = match dialect {
            Dialect::AcpV1 => {
                let can_load = self
                    .agent()
                    .is_some_and(|agent| agent.agent_capabilities.load_session);
                if !can_load {
                    return Err(AcpError::CapabilityMissing {
                        capability: "agentCapabilities.loadSession",
                    });
                }
                to_params(
                    &LoadSessionRequest::new(session_id.clone(), cwd).mcp_servers(Vec::new()),
                )?
            }
            Dialect::Kandev => Some(serde_json::json!({"sessionId": session_id})),
        };
        let mut session = self.register(session_id, None);
        let answer = self.call(METHOD, params).await?;
        if dialect == Dialect::AcpV1 {
            // The answer may be `null` or `{}` (schema `$defs/LoadSessionResponse`).
            let answer = if answer.is_null() {
                Value::Object(serde_json::Map::new())
            } else {
                answer
            };
            let response: LoadSessionResponse = parse_answer(METHOD, answer)?;
            session.modes = response.modes;
            session.config_options = response.config_options;
        }
        Ok(session)
    }

    fn register(&self, session_id: SessionId, modes: Option<SessionModeState>) -> Session {
        let (tx, rx) = mpsc::channel(self.inner.config.session_update_queue.max(1));
        let shared = Arc::new(SessionShared::default());
        let (backlog, previous) =
            self.inner
                .router
                .register(session_id.clone(), tx, shared.clone());
        Session {
            id: session_id,
            client: self.clone(),
            rx,
            backlog,
            received: 0,
            shared,
            previous,
            modes,
            config_options: None,
            usage: None,
            title: None,
        }
    }

    /// Flushes queued output and closes the connection (the agent sees stdin EOF), waiting at most
    /// [`ClientConfig::close_timeout`].
    pub async fn close(&self) {
        // On timeout the writer is stuck on a peer that does not read; the connection is abandoned all the same.
        let _ = tokio::time::timeout(
            self.inner.config.close_timeout,
            self.inner.connection.close(),
        )
        .await;
    }

    /// Closes the connection, then stops the spawned agent with `plan` (stdin EOF → grace → SIGTERM to its process
    /// group → grace → SIGKILL; what remains of the group is killed). `None` when the client did not spawn the agent.
    pub async fn stop(&self, plan: StopPlan) -> Option<StopOutcome> {
        self.close().await;
        match &self.inner.child {
            Some(child) => Some(child.stop(plan).await),
            None => None,
        }
    }

    /// Resolves once every message read so far was routed to its session (or the dispatcher is gone): after
    /// [`Client::load_session`], the replayed history is then all in [`Session::try_next_update`].
    pub async fn routed(&self) {
        // An error means the dispatcher is gone: nothing is left to route.
        let _ = self.barrier().await;
    }

    /// Asks the dispatcher to route every message read so far; resolves when it has (or when it is gone).
    fn barrier(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        // If the dispatcher is gone, the receiver resolves (with an error) at once: nothing is left to route.
        let _ = self.inner.control.send(Control::Barrier(tx));
        rx
    }
}

/// Per-session flags shared with the dispatcher.
#[derive(Default)]
struct SessionShared {
    /// The cancel flag of the turn in progress, if any.
    turn: Mutex<Option<CancellationToken>>,
    /// How many items (updates, Kandev turn ends) were delivered to this session: sent to its queue, or kept for
    /// it before it was registered. See [`RoutedCount`].
    routed: AtomicU64,
}

/// How many updates were routed to one [`Session`] so far (the dispatcher's side of [`Session::received`]): a
/// handle that does not keep the connection open. Read by an agent-request handler (e.g. a permission question),
/// it counts every `session/update` the agent wrote before that request, since the dispatcher routes messages in
/// arrival order and starts a request's task only after routing everything read before it; comparing it with
/// [`Session::received`] / [`Turn::received`] tells whether the session's reader has taken them all.
#[derive(Clone)]
pub struct RoutedCount(Arc<SessionShared>);

impl RoutedCount {
    /// Items routed to the session so far (updates, and the Kandev dialect's end-of-turn updates).
    pub fn get(&self) -> u64 {
        self.0.routed.load(Ordering::Acquire)
    }
}

impl std::fmt::Debug for RoutedCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RoutedCount").field(&self.get()).finish()
    }
}

/// What the dispatcher delivers to a session.
#[derive(Debug)]
enum Routed {
    Update(Update),
    /// The Kandev dialect ends turns with an update (`complete` / `error`).
    KandevEnd(Result<StopReason, String>),
}

#[derive(Default)]
struct Counters {
    invalid_updates: AtomicU64,
    unrouted_dropped: AtomicU64,
    dropped_sessions: AtomicU64,
    permissions_cancelled: AtomicU64,
    elicitations_refused: AtomicU64,
}

#[derive(Default)]
struct KandevRouting {
    mapper: KandevMapper,
    /// The session whose turn is in progress (Kandev updates do not name their session).
    active: Option<SessionId>,
}

struct SessionSlot {
    tx: mpsc::Sender<Routed>,
    shared: Arc<SessionShared>,
}

/// Updates for sessions not registered yet, kept only while a `session/new` is in flight.
#[derive(Default)]
struct Unrouted {
    /// `(session, update, its JSON size)`, oldest first.
    queue: VecDeque<(SessionId, Routed, usize)>,
    /// The sum of the queue's sizes.
    bytes: usize,
    /// `session/new` calls in flight (until their session is registered or the call failed).
    creating: usize,
}

impl Unrouted {
    /// Drops the oldest kept update; false when none is left.
    fn drop_oldest(&mut self, counters: &Counters) -> bool {
        let Some((_, _, size)) = self.queue.pop_front() else {
            return false;
        };
        self.bytes = self.bytes.saturating_sub(size);
        counters.unrouted_dropped.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// Marks a `session/new` in flight for the router; dropped after the session is registered (or the call failed).
struct Creating<'a> {
    router: &'a Router,
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        let mut unrouted = lock(&self.router.unrouted);
        unrouted.creating = unrouted.creating.saturating_sub(1);
        if unrouted.creating == 0 {
            // No session can still claim what is kept: those sessions were never created.
            while unrouted.drop_oldest(&self.router.counters) {}
        }
    }
}

struct Router {
    sessions: Mutex<HashMap<SessionId, SessionSlot>>,
    /// Lock order: `sessions`, then `unrouted`.
    unrouted: Mutex<Unrouted>,
    kandev: Mutex<KandevRouting>,
    max_unrouted: usize,
    max_unrouted_bytes: usize,
    counters: Counters,
}

impl Router {
    /// Registers a session; returns the updates that arrived for it before, and the registration it replaced (a
    /// handle on the same id still alive, e.g. before a `session/resume` of it).
    fn register(
        &self,
        id: SessionId,
        tx: mpsc::Sender<Routed>,
        shared: Arc<SessionShared>,
    ) -> (VecDeque<Routed>, Option<SessionSlot>) {
        let mut sessions = lock(&self.sessions);
        let previous = sessions.insert(
            id.clone(),
            SessionSlot {
                tx,
                shared: shared.clone(),
            },
        );
        let mut unrouted = lock(&self.unrouted);
        let (mine, others): (VecDeque<_>, VecDeque<_>) = unrouted
            .queue
            .drain(..)
            .partition(|(session, _, _)| *session == id);
        shared.routed.fetch_add(mine.len() as u64, Ordering::AcqRel);
        unrouted.queue = others;
        unrouted.bytes = unrouted.queue.iter().map(|(_, _, size)| size).sum();
        (
            mine.into_iter().map(|(_, routed, _)| routed).collect(),
            previous,
        )
    }

    /// Marks a `session/new` in flight until the guard is dropped.
    fn creating(&self) -> Creating<'_> {
        lock(&self.unrouted).creating += 1;
        Creating { router: self }
    }

    /// Keeps an update for an unregistered session while a `session/new` is in flight, within the bounds;
    /// otherwise drops and counts it.
    fn keep_unrouted(&self, id: SessionId, routed: Routed) {
        let mut unrouted = lock(&self.unrouted);
        let size = if unrouted.creating == 0 || self.max_unrouted == 0 {
            None
        } else {
            Some(routed_bytes(&routed)).filter(|&size| size <= self.max_unrouted_bytes)
        };
        let Some(size) = size else {
            self.counters
                .unrouted_dropped
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(session = %id, "dropping an update for a session that is not registered");
            return;
        };
        while unrouted.queue.len() >= self.max_unrouted
            || unrouted.bytes + size > self.max_unrouted_bytes
        {
            if !unrouted.drop_oldest(&self.counters) {
                break;
            }
        }
        unrouted.bytes += size;
        unrouted.queue.push_back((id, routed, size));
    }

    /// Unregisters `id` if its slot is still `shared`'s (a later registration of the same id is left alone). The
    /// registration it replaced takes over again when its handle is still alive (a failed `session/resume` or
    /// `session/load` of an id whose old handle is in use leaves that handle working).
    fn unregister(
        &self,
        id: &SessionId,
        shared: &Arc<SessionShared>,
        previous: Option<SessionSlot>,
    ) {
        let mut sessions = lock(&self.sessions);
        if sessions
            .get(id)
            .is_some_and(|slot| Arc::ptr_eq(&slot.shared, shared))
        {
            match previous.filter(|slot| !slot.tx.is_closed()) {
                Some(slot) => sessions.insert(id.clone(), slot),
                None => sessions.remove(id),
            };
        }
    }

    fn turn_token(&self, id: &SessionId) -> Option<CancellationToken> {
        let sessions = lock(&self.sessions);
        let slot = sessions.get(id)?;
        lock(&slot.shared.turn).clone()
    }

    async fn route(&self, id: SessionId, routed: Routed) {
        let (tx, shared) = {
            let sessions = lock(&self.sessions);
            match sessions.get(&id) {
                Some(slot) => (slot.tx.clone(), slot.shared.clone()),
                None => {
                    // Still under the `sessions` lock: a session registered meanwhile takes what is kept.
                    self.keep_unrouted(id, routed);
                    return;
                }
            }
        };
        if tx.send(routed).await.is_err() {
            self.counters
                .dropped_sessions
                .fetch_add(1, Ordering::Relaxed);
        } else {
            shared.routed.fetch_add(1, Ordering::AcqRel);
        }
    }
}

struct Dispatcher {
    router: Arc<Router>,
    permission: Arc<dyn DynPermissionHandler>,
    fs: Option<Arc<dyn DynFsHandler>>,
    terminal: Option<Arc<dyn DynTerminalHandler>>,
    elicitation: Option<Arc<dyn DynElicitationHandler>>,
}

impl Dispatcher {
    async fn run(self, mut incoming: Incoming, mut control: mpsc::UnboundedReceiver<Control>) {
        let mut control_open = true;
        loop {
            tokio::select! {
                message = incoming.next() => match message {
                    Some(message) => self.handle(message).await,
                    None => break,
                },
                command = control.recv(), if control_open => match command {
                    Some(Control::Barrier(ack)) => {
                        while let Some(Some(message)) = incoming.next().now_or_never() {
                            self.handle(message).await;
                        }
                        // The turn may have stopped waiting; nothing to do then.
                        let _ = ack.send(());
                    }
                    None => control_open = false,
                },
            }
        }
        // The connection is closed: answer pending barriers, and end every session's stream.
        control.close();
        while let Ok(Control::Barrier(ack)) = control.try_recv() {
            let _ = ack.send(());
        }
        lock(&self.router.sessions).clear();
    }

    async fn handle(&self, message: IncomingMessage) {
        match message {
            IncomingMessage::Notification(notification)
                if notification.method == "session/update" =>
            {
                self.on_update(notification.params).await;
            }
            IncomingMessage::Notification(notification)
                if notification.method == "elicitation/complete" =>
            {
                let parsed = parse_params::<CompleteElicitationNotification>(notification.params);
                match (&self.elicitation, parsed) {
                    (Some(handler), Ok(complete)) => {
                        let handler = handler.clone();
                        tokio::spawn(async move { handler.complete_elicitation(complete).await });
                    }
                    (None, _) => tracing::debug!("elicitation/complete without a handler"),
                    (_, Err(error)) => tracing::debug!(?error, "invalid elicitation/complete"),
                }
            }
            IncomingMessage::Notification(notification) => {
                tracing::debug!(method = %notification.method, "ignoring agent notification");
            }
            IncomingMessage::Request(request) => {
                let task = AgentRequestTask {
                    router: self.router.clone(),
                    permission: self.permission.clone(),
                    fs: self.fs.clone(),
                    terminal: self.terminal.clone(),
                    elicitation: self.elicitation.clone(),
                };
                tokio::spawn(task.run(request));
            }
        }
    }

    async fn on_update(&self, params: Option<Value>) {
        match parse_update_params(params) {
            UpdateParams::V1 { session_id, update } => {
                self.router.route(session_id, Routed::Update(update)).await
            }
            UpdateParams::Kandev { kind, data } => {
                let (target, event) = {
                    let mut kandev = lock(&self.router.kandev);
                    let target = KandevMapper::session_id(&data).or_else(|| kandev.active.clone());
                    (target, kandev.mapper.map(&kind, data))
                };
                let routed = match event {
                    KandevEvent::Update(update) => Routed::Update(update),
                    KandevEvent::TurnEnd(end) => Routed::KandevEnd(end),
                };
                match target {
                    Some(session_id) => self.router.route(session_id, routed).await,
                    None => {
                        self.router
                            .counters
                            .invalid_updates
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%kind, "Kandev update with no session to route to");
                    }
                }
            }
            UpdateParams::Invalid(why) => {
                self.router
                    .counters
                    .invalid_updates
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%why, "dropping invalid session/update");
            }
        }
    }
}

/// One agent-initiated request, handled on its own task so a slow human never blocks the connection.
struct AgentRequestTask {
    router: Arc<Router>,
    permission: Arc<dyn DynPermissionHandler>,
    fs: Option<Arc<dyn DynFsHandler>>,
    terminal: Option<Arc<dyn DynTerminalHandler>>,
    elicitation: Option<Arc<dyn DynElicitationHandler>>,
}

fn parse_params<T: DeserializeOwned>(params: Option<Value>) -> Result<T, ErrorObject> {
    serde_json::from_value(params.unwrap_or(Value::Null))
        .map_err(|error| ErrorObject::invalid_params(error.to_string()))
}

fn to_result<T: Serialize>(value: Result<T, ErrorObject>) -> Result<Value, ErrorObject> {
    value.and_then(|value| {
        serde_json::to_value(value).map_err(|error| ErrorObject::internal_error(error.to_string()))
    })
}

impl AgentRequestTask {
    async fn run(self, mut request: IncomingRequest) {
        let params = request.params.take();
        let method = request.method.clone();
        let result = match method.as_str() {
            "session/request_permission" => {
                match parse_params::<RequestPermissionRequest>(params) {
                    Ok(params) => self.permission(params, &request).await,
                    Err(error) => Err(error),
                }
            }
            "fs/read_text_file" => match (&self.fs, parse_params::<ReadTextFileRequest>(params)) {
                (None, _) => Err(ErrorObject::method_not_found(&method)),
                (Some(_), Err(error)) => Err(error),
                (Some(fs), Ok(params)) => to_result(fs.read_text_file(params).await),
            },
            "fs/write_text_file" => {
                match (&self.fs, parse_params::<WriteTextFileRequest>(params)) {
                    (None, _) => Err(ErrorObject::method_not_found(&method)),
                    (Some(_), Err(error)) => Err(error),
                    (Some(fs), Ok(params)) => to_result(fs.write_text_file(params).await),
                }
            }
            "elicitation/create" => match parse_params::<CreateElicitationRequest>(params) {
                Ok(params) => self.elicitation(params, &request).await,
                Err(error) => Err(error),
            },
            terminal if terminal.starts_with("terminal/") => match &self.terminal {
                Some(handler) => handler.handle(terminal, params).await,
                None => Err(ErrorObject::method_not_found(&method)),
            },
            _ => Err(ErrorObject::method_not_found(&method)),
        };
        if let Err(error) = request.respond(result).await {
            tracing::debug!(%error, %method, "could not answer the agent's request");
        }
    }

    /// `elicitation/create`: the handler's answer; `cancel` when the turn of its session is (or gets) cancelled;
    /// `decline` without a handler (fail closed); -32800 on `$/cancel_request`.
    async fn elicitation(
        &self,
        params: CreateElicitationRequest,
        request: &IncomingRequest,
    ) -> Result<Value, ErrorObject> {
        let token = match params.scope() {
            ElicitationScope::Session(scope) => self.router.turn_token(&scope.session_id),
            _ => None,
        };
        let refused = |action: ElicitationAction| {
            self.router
                .counters
                .elicitations_refused
                .fetch_add(1, Ordering::Relaxed);
            CreateElicitationResponse::new(action)
        };
        let handler = self.elicitation.clone();
        let ask = async move {
            match handler {
                Some(handler) => Some(handler.create_elicitation(params).await),
                None => None,
            }
        };
        let response = match token {
            Some(token) if token.is_cancelled() => refused(ElicitationAction::Cancel),
            Some(token) => tokio::select! {
                answer = ask => answer.unwrap_or_else(|| refused(ElicitationAction::Decline)),
                () = token.cancelled() => refused(ElicitationAction::Cancel),
                () = request.cancelled() => return Err(ErrorObject::request_cancelled()),
            },
            None => tokio::select! {
                answer = ask => answer.unwrap_or_else(|| refused(ElicitationAction::Decline)),
                () = request.cancelled() => return Err(ErrorObject::request_cancelled()),
            },
        };
        to_result(Ok(response))
    }

    async fn permission(
        &self,
        params: RequestPermissionRequest,
        request: &IncomingRequest,
    ) -> Result<Value, ErrorObject> {
        let token = self.router.turn_token(&params.session_id);
        let cancelled = RequestPermissionOutcome::Cancelled;
        let outcome = match token {
            Some(token) if token.is_cancelled() => cancelled,
            Some(token) => tokio::select! {
                outcome = self.permission.request_permission(params) => outcome,
                () = token.cancelled() => cancelled,
                () = request.cancelled() => return Err(ErrorObject::request_cancelled()),
            },
            None => tokio::select! {
                outcome = self.permission.request_permission(params) => outcome,
                () = request.cancelled() => return Err(ErrorObject::request_cancelled()),
            },
        };
        if outcome == RequestPermissionOutcome::Cancelled {
            self.router
                .counters
                .permissions_cancelled
                .fetch_add(1, Ordering::Relaxed);
        }
        to_result(Ok(RequestPermissionResponse::new(outcome)))
    }
}

/// One session of a [`Client`]: its id, its modes, and its updates in arrival order.
///
/// Updates that arrive outside a turn (a `session/load` replay, updates sent after a prompt answer) are read with
/// [`Session::next_update`]; during a turn, [`Turn::next`] yields them. Dropping the session unregisters it (later
/// updates for it are dropped and counted in [`ClientStats::unrouted_updates_dropped`]).
pub struct Session {
    id: SessionId,
    client: Client,
    rx: mpsc::Receiver<Routed>,
    backlog: VecDeque<Routed>,
    /// Items taken from `backlog` and `rx` so far.
    received: u64,
    shared: Arc<SessionShared>,
    /// The registration this one replaced (see `Router::unregister`).
    previous: Option<SessionSlot>,
    modes: Option<SessionModeState>,
    config_options: Option<Vec<SessionConfigOption>>,
    usage: Option<UsageUpdate>,
    title: Option<String>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let previous = self.previous.take();
        self.client
            .inner
            .router
            .unregister(&self.id, &self.shared, previous);
    }
}

impl Session {
    /// The agent's session id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// The modes the agent announced in `session/new` / `session/load`, if any.
    pub fn modes(&self) -> Option<&SessionModeState> {
        self.modes.as_ref()
    }

    /// The session's configuration options (`model`, `mode`, …) as last announced: by `session/new`,
    /// `session/load`, `session/resume`, a `session/set_config_option` answer, or a `config_option_update` read
    /// from this session.
    pub fn config_options(&self) -> Option<&[SessionConfigOption]> {
        self.config_options.as_deref()
    }

    /// The last `usage_update` read from this session (context tokens `used` of `size`, and `cost` when the agent
    /// reports it). Source: ACP v1 "Session Usage", schema `$defs/UsageUpdate`.
    pub fn usage(&self) -> Option<&UsageUpdate> {
        self.usage.as_ref()
    }

    /// The title from the last `session_info_update` read from this session that set one.
    pub fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }

    /// Keeps what the session tracks from an update passing through (config options, usage, title).
    fn note(&mut self, routed: &Routed) {
        let Routed::Update(Update::Known(update)) = routed else {
            return;
        };
        match update.as_ref() {
            SessionUpdate::ConfigOptionUpdate(update) => {
                self.config_options = Some(update.config_options.clone());
            }
            SessionUpdate::UsageUpdate(update) => self.usage = Some(update.clone()),
            SessionUpdate::SessionInfoUpdate(info) => {
                if let agent_client_protocol_schema::MaybeUndefined::Value(title) = &info.title {
                    self.title = Some(title.clone());
                }
            }
            _ => {}
        }
    }

    /// How many routed items (updates, and the Kandev dialect's end-of-turn updates) this session has taken so
    /// far, through [`Session::next_update`], [`Session::try_next_update`] or a [`Turn`]; counted like
    /// [`RoutedCount::get`], so `received() >= count` means every item routed by then was taken.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The dispatcher's count of items routed to this session ([`RoutedCount`]).
    pub fn routed_count(&self) -> RoutedCount {
        RoutedCount(self.shared.clone())
    }

    async fn recv(&mut self) -> Option<Routed> {
        let routed = match self.backlog.pop_front() {
            Some(routed) => Some(routed),
            None => self.rx.recv().await,
        };
        if let Some(routed) = &routed {
            self.received += 1;
            self.note(routed);
        }
        routed
    }

    fn try_recv(&mut self) -> Option<Routed> {
        let routed = self.backlog.pop_front().or_else(|| self.rx.try_recv().ok());
        if let Some(routed) = &routed {
            self.received += 1;
            self.note(routed);
        }
        routed
    }

    /// The next update outside a turn; `None` once the connection is closed. A Kandev end-of-turn outside a turn is
    /// skipped.
    pub async fn next_update(&mut self) -> Option<Update> {
        loop {
            match self.recv().await? {
                Routed::Update(update) => return Some(update),
                Routed::KandevEnd(_) => continue,
            }
        }
    }

    /// The next update already received, without waiting.
    pub fn try_next_update(&mut self) -> Option<Update> {
        loop {
            match self.try_recv()? {
                Routed::Update(update) => return Some(update),
                Routed::KandevEnd(_) => continue,
            }
        }
    }

    /// Sends `session/prompt` with one text block.
    ///
    /// # Errors
    ///
    /// As [`Session::prompt`].
    pub async fn prompt_text(&mut self, text: &str) -> Result<Turn<'_>, AcpError> {
        self.prompt(vec![ContentBlock::Text(TextContent::new(text))])
            .await
    }

    /// Sends `session/prompt` and returns the turn: its updates, then its stop reason. One turn at a time per
    /// session (the turn borrows the session).
    ///
    /// JSON sent (v1): `{"sessionId":"s1","prompt":[{"type":"text","text":"hi"}]}`; Kandev dialect:
    /// `{"message":"hi"}` (text blocks joined).
    ///
    /// # Errors
    ///
    /// [`AcpError::NotInitialized`], [`AcpError::TooManyPendingCalls`], [`AcpError::ConnectionClosed`] (nothing sent).
    pub async fn prompt(&mut self, prompt: Vec<ContentBlock>) -> Result<Turn<'_>, AcpError> {
        let dialect = self.client.require_dialect()?;
        let params = match dialect {
            Dialect::AcpV1 => to_params(&PromptRequest::new(self.id.clone(), prompt))?,
            Dialect::Kandev => {
                let message: String = prompt
                    .iter()
                    .filter_map(|block| match block {
                        ContentBlock::Text(text) => Some(text.text.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                lock(&self.client.inner.router.kandev).active = Some(self.id.clone());
                Some(serde_json::json!({"message": message}))
            }
        };
        let token = CancellationToken::new();
        *lock(&self.shared.turn) = Some(token.clone());
        let call = match self
            .client
            .inner
            .connection
            .start_call(PROMPT, params)
            .await
        {
            Ok(call) => call,
            Err(error) => {
                *lock(&self.shared.turn) = None;
                return Err(AcpError::from_call(PROMPT, error));
            }
        };
        Ok(Turn {
            canceller: self.canceller(),
            session: self,
            dialect,
            token,
            call: Some(call),
            phase: Phase::Running,
        })
    }

    /// A handle that cancels this session's turn in progress from another task.
    pub fn canceller(&self) -> Canceller {
        Canceller {
            client: self.client.clone(),
            session_id: self.id.clone(),
            shared: self.shared.clone(),
        }
    }

    /// Sends `session/set_mode {"sessionId":…,"modeId":…}`.
    ///
    /// # Errors
    ///
    /// [`AcpError::Rpc`] (e.g. an unknown mode), [`AcpError::ConnectionClosed`].
    pub async fn set_mode(&self, mode_id: &str) -> Result<(), AcpError> {
        let request = SetSessionModeRequest::new(self.id.clone(), mode_id.to_owned());
        self.client
            .call("session/set_mode", to_params(&request)?)
            .await?;
        Ok(())
    }

    /// Sends `session/set_config_option {"sessionId":…,"configId":…,"value":…}` (ACP v1 "Session Config
    /// Options"; a select takes a value id, a boolean `{"type":"boolean","value":true}`) and keeps the answered
    /// state of every option.
    ///
    /// # Errors
    ///
    /// [`AcpError::Rpc`] (e.g. -32602 for an unknown option or value), [`AcpError::InvalidResponse`],
    /// [`AcpError::ConnectionClosed`]; [`AcpError::CapabilityMissing`] (`configOptions`) in the Kandev dialect.
    pub async fn set_config_option(
        &mut self,
        config_id: impl Into<SessionConfigId>,
        value: SessionConfigOptionValue,
    ) -> Result<&[SessionConfigOption], AcpError> {
        const METHOD: &str = "session/set_config_option";
        // The Kandev dialect has no config options.
        self.client.require_v1("configOptions", true)?;
        let request = SetSessionConfigOptionRequest::new(self.id.clone(), config_id, value);
        let answer = self.client.call(METHOD, to_params(&request)?).await?;
        let response: SetSessionConfigOptionResponse = parse_answer(METHOD, answer)?;
        Ok(self.config_options.insert(response.config_options))
    }

    /// The config option of category `model`, if the agent offers one.
    pub fn model_option(&self) -> Option<&SessionConfigOption> {
        self.config_options
            .as_deref()?
            .iter()
            .find(|option| option.category == Some(SessionConfigOptionCategory::Model))
    }

    /// Selects `model` with the agent's `model` config option (`session/set_model` is gone from v1: models are a
    /// config option of category `model`).
    ///
    /// # Errors
    ///
    /// [`AcpError::CapabilityMissing`] (`configOptions[category=model]`) when the agent offers no model option;
    /// otherwise as [`Session::set_config_option`] (an unknown model is the agent's -32602).
    pub async fn set_model(&mut self, model: &str) -> Result<(), AcpError> {
        let Some(option) = self.model_option() else {
            return Err(AcpError::CapabilityMissing {
                capability: "configOptions[category=model]",
            });
        };
        let id = option.id.clone();
        self.set_config_option(id, SessionConfigOptionValue::value_id(model.to_owned()))
            .await?;
        Ok(())
    }

    /// Sends `session/close` for this session and drops it ([`Client::close_session`]).
    ///
    /// # Errors
    ///
    /// As [`Client::close_session`].
    pub async fn close(self) -> Result<(), AcpError> {
        self.client.close_session(&self.id).await
    }
}

/// Cancels a session's turn in progress: queues `session/cancel {"sessionId":…}` (Kandev dialect: `{"reason":…}`),
/// then sets the turn's cancel flag (pending and later permission requests of the turn are answered `cancelled`,
/// after the notification as ACP v1 "Cancellation" orders it; the turn reports `cancelled` whatever the agent
/// answers). Updates keep being accepted.
#[derive(Clone)]
pub struct Canceller {
    client: Client,
    session_id: SessionId,
    shared: Arc<SessionShared>,
}

impl std::fmt::Debug for Canceller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canceller")
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

impl Canceller {
    /// Cancels the turn in progress; `Ok(false)` (nothing sent) when no turn is in progress.
    ///
    /// # Errors
    ///
    /// [`AcpError::ConnectionClosed`] when the notification could not be sent (the turn is cancelled all the same).
    pub async fn cancel(&self) -> Result<bool, AcpError> {
        let token = lock(&self.shared.turn).clone();
        let Some(token) = token else { return Ok(false) };
        let sent = async {
            let params = match self.client.dialect() {
                Some(Dialect::Kandev) => serde_json::json!({"reason": "cancelled by the client"}),
                _ => serde_json::to_value(CancelNotification::new(self.session_id.clone()))
                    .map_err(|error| AcpError::Encode(error.to_string()))?,
            };
            self.client
                .inner
                .connection
                .notify("session/cancel", Some(params))
                .await?;
            Ok::<_, AcpError>(())
        };
        let sent = sent.await;
        // Once the notification is queued: the `cancelled` answers to pending permission requests follow it.
        token.cancel();
        sent.map(|()| true)
    }
}

/// One event of a [`Turn`].
#[derive(Debug)]
pub enum TurnEvent {
    /// A session update, in arrival order.
    Update(Update),
    /// The turn's outcome; the last event. `Ok(StopReason::Cancelled)` whenever the client cancelled.
    End(Result<StopReason, AcpError>),
}

enum Phase {
    Running,
    /// The answer is in; waiting for the dispatcher to route what was read before it.
    Barrier(oneshot::Receiver<()>, Result<StopReason, AcpError>),
    /// Routing is done: yield what is queued, then the outcome.
    Ending(Result<StopReason, AcpError>),
    Done,
}

/// A prompt turn in progress: yields the session's updates, then [`TurnEvent::End`] once, then `None`.
///
/// Every update the agent sent before its answer is yielded before the end. Updates it sends after its answer
/// (misbehaving, but seen in the wild) are never lost: those already received when the turn ends are its last
/// updates, later ones arrive on the session ([`Session::next_update`]).
///
/// Dropping an unfinished turn abandons it: the agent's answer, when it comes, is dropped and counted as a late
/// response.
pub struct Turn<'s> {
    session: &'s mut Session,
    canceller: Canceller,
    dialect: Dialect,
    token: CancellationToken,
    call: Option<PendingCall>,
    phase: Phase,
}

impl std::fmt::Debug for Turn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn")
            .field("session", &self.session.id)
            .finish_non_exhaustive()
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *lock(&self.session.shared.turn) = None;
        if self.dialect == Dialect::Kandev {
            let mut kandev = lock(&self.session.client.inner.router.kandev);
            if kandev.active.as_ref() == Some(&self.session.id) {
                kandev.active = None;
            }
        }
    }
}

impl Turn<'_> {
    /// [`Session::received`] of the turn's session: after an update was yielded, the count up to and including
    /// it.
    pub fn received(&self) -> u64 {
        self.session.received
    }

    /// Cancels this turn (see [`Canceller`]).
    ///
    /// # Errors
    ///
    /// As [`Canceller::cancel`].
    pub async fn cancel(&self) -> Result<bool, AcpError> {
        self.canceller.cancel().await
    }

    /// A handle that cancels this turn from another task.
    pub fn canceller(&self) -> Canceller {
        self.canceller.clone()
    }

    /// Waits for the end, collecting the updates.
    pub async fn finish(mut self) -> (Vec<Update>, Result<StopReason, AcpError>) {
        let mut updates = Vec::new();
        while let Some(event) = self.next().await {
            match event {
                TurnEvent::Update(update) => updates.push(update),
                TurnEvent::End(outcome) => return (updates, outcome),
            }
        }
        (updates, Err(AcpError::ConnectionClosed))
    }

    /// Synchronous, so that no outcome is lost when a `next()` future is dropped.
    fn end_with(&mut self, outcome: Result<StopReason, AcpError>) {
        let barrier = self.session.client.barrier();
        self.phase = Phase::Barrier(barrier, outcome);
    }

    /// The next event; `None` after [`TurnEvent::End`]. Cancel-safe: dropping the future loses nothing.
    pub async fn next(&mut self) -> Option<TurnEvent> {
        loop {
            match &mut self.phase {
                Phase::Done => return None,
                Phase::Ending(_) => match self.session.try_recv() {
                    Some(Routed::Update(update)) => return Some(TurnEvent::Update(update)),
                    Some(Routed::KandevEnd(_)) => {}
                    None => {
                        *lock(&self.session.shared.turn) = None;
                        if let Phase::Ending(outcome) =
                            std::mem::replace(&mut self.phase, Phase::Done)
                        {
                            return Some(TurnEvent::End(outcome));
                        }
                    }
                },
                Phase::Barrier(ack, _) => {
                    let routed = tokio::select! {
                        biased;
                        routed = self.session.recv() => routed,
                        _ = ack => None,
                    };
                    match routed {
                        Some(Routed::Update(update)) => return Some(TurnEvent::Update(update)),
                        Some(Routed::KandevEnd(_)) => {}
                        // Acknowledged, or the dispatcher is gone: nothing more will be routed before the end.
                        None => {
                            if let Phase::Barrier(_, outcome) =
                                std::mem::replace(&mut self.phase, Phase::Done)
                            {
                                self.phase = Phase::Ending(outcome);
                            }
                        }
                    }
                }
                Phase::Running => {
                    if let Some(event) = self.poll_running().await {
                        return Some(event);
                    }
                }
            }
        }
    }

    /// One step of a running turn: returns an update to yield, or `None` after moving to another phase.
    async fn poll_running(&mut self) -> Option<TurnEvent> {
        let kandev = self.dialect == Dialect::Kandev;
        tokio::select! {
            biased;
            routed = self.session.recv() => match routed {
                Some(Routed::Update(update)) => return Some(TurnEvent::Update(update)),
                Some(Routed::KandevEnd(end)) if kandev => {
                    let outcome = if self.token.is_cancelled() {
                        Ok(StopReason::Cancelled)
                    } else {
                        end.map_err(|message| AcpError::TurnFailed { message })
                    };
                    self.call = None;
                    self.end_with(outcome);
                }
                Some(Routed::KandevEnd(_)) => {}
                None => {
                    // The connection closed. The pending call fails with ConnectionClosed, unless it was answered.
                    let answer = match self.call.as_mut() {
                        Some(call) => call.await,
                        None => Err(agentwire_jsonrpc::CallError::ConnectionClosed),
                    };
                    self.call = None;
                    let cancelled = self.token.is_cancelled();
                    let outcome = if kandev {
                        kandev_accept_outcome(cancelled, answer).unwrap_or(Err(AcpError::ConnectionClosed))
                    } else {
                        prompt_outcome(cancelled, answer)
                    };
                    self.phase = Phase::Ending(outcome);
                }
            },
            answer = async { match self.call.as_mut() { Some(call) => call.await, None => std::future::pending().await } } => {
                self.call = None;
                let cancelled = self.token.is_cancelled();
                if kandev {
                    if let Some(outcome) = kandev_accept_outcome(cancelled, answer) {
                        self.end_with(outcome);
                    }
                } else {
                    let outcome = prompt_outcome(cancelled, answer);
                    self.end_with(outcome);
                }
            }
            () = self.token.cancelled(), if kandev && self.call.is_none() => {
                // The Kandev dialect has no answer to wait for after a cancel.
                self.end_with(Ok(StopReason::Cancelled));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(max_unrouted: usize, max_unrouted_bytes: usize) -> Router {
        Router {
            sessions: Mutex::new(HashMap::new()),
            unrouted: Mutex::new(Unrouted::default()),
            kandev: Mutex::new(KandevRouting::default()),
            max_unrouted,
            max_unrouted_bytes,
            counters: Counters::default(),
        }
    }

    /// A raw update whose JSON size is `"n"` plus quotes: 3 bytes for one digit.
    fn text(n: usize) -> Routed {
        Routed::Update(Update::Raw {
            kind: Some(n.to_string()),
            update: Value::String(n.to_string()),
            error: String::new(),
        })
    }

    fn route_all(router: &Router, session: &str, numbers: impl IntoIterator<Item = usize>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            for n in numbers {
                router.route(SessionId::new(session), text(n)).await;
            }
        });
    }

    fn kinds(backlog: &VecDeque<Routed>) -> Vec<String> {
        backlog
            .iter()
            .filter_map(|routed| match routed {
                Routed::Update(Update::Raw { kind, .. }) => kind.clone(),
                _ => None,
            })
            .collect()
    }

    fn dropped(router: &Router) -> u64 {
        router.counters.unrouted_dropped.load(Ordering::Relaxed)
    }

    /// While a `session/new` is in flight, routes `sent` updates for `later` and one for `other`, then registers
    /// `later`: what it gets, and the drop count before and after the creation ends.
    fn check(
        limits: (usize, usize),
        sent: usize,
        expect_kept: &[&str],
        expect_dropped: u64,
        expect_dropped_after: u64,
    ) {
        let router = router(limits.0, limits.1);
        let creating = router.creating();
        route_all(&router, "later", 0..sent);
        route_all(&router, "other", [9]);
        let (tx, _rx) = mpsc::channel(1);
        let (backlog, _) = router.register(
            SessionId::new("later"),
            tx,
            Arc::new(SessionShared::default()),
        );
        assert_eq!(kinds(&backlog), expect_kept);
        assert_eq!(dropped(&router), expect_dropped);
        drop(creating);
        assert_eq!(dropped(&router), expect_dropped_after);
        assert!(lock(&router.unrouted).queue.is_empty());
        assert_eq!(lock(&router.unrouted).bytes, 0);
    }

    #[test]
    fn unrouted_updates_are_kept_up_to_the_limits_while_a_session_is_created() {
        // 3 for `later` + 1 for `other` = 4 kept at a limit of 4; one past it drops the oldest. The one for `other`
        // (never created) is dropped when the creation ends.
        check((4, 1024), 3, &["0", "1", "2"], 0, 1);
        check((4, 1024), 4, &["1", "2", "3"], 1, 2);
        check((0, 1024), 2, &[], 3, 3);
        // By bytes: each update is 3 bytes; 12 bytes hold 4, 11 hold 3; an update over the byte limit is dropped.
        check((100, 12), 3, &["0", "1", "2"], 0, 1);
        check((100, 11), 3, &["1", "2"], 1, 2);
        check((100, 2), 3, &[], 4, 4);
    }

    #[test]
    fn updates_for_sessions_never_created_are_dropped_at_once() {
        let router = router(1024, 1 << 20);
        route_all(&router, "ghost", 0..100);
        assert_eq!(dropped(&router), 100);
        assert!(lock(&router.unrouted).queue.is_empty());
        // Two creations in flight: what is kept survives the first one's end, not the last one's.
        let first = router.creating();
        let second = router.creating();
        route_all(&router, "ghost", [1]);
        drop(first);
        assert_eq!(lock(&router.unrouted).queue.len(), 1);
        drop(second);
        assert_eq!(dropped(&router), 101);
    }

    #[test]
    fn updates_for_a_registered_session_bypass_the_unrouted_buffer() {
        let router = router(1, 1024);
        let (tx, mut rx) = mpsc::channel(4);
        let (backlog, _) =
            router.register(SessionId::new("s"), tx, Arc::new(SessionShared::default()));
        assert!(backlog.is_empty());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            router.route(SessionId::new("s"), text(1)).await;
            router.route(SessionId::new("s"), text(2)).await;
        });
        assert!(matches!(rx.try_recv(), Ok(Routed::Update(_))));
        assert!(matches!(rx.try_recv(), Ok(Routed::Update(_))));
        assert_eq!(router.counters.unrouted_dropped.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_routed_count_covers_the_kept_backlog_and_each_update_sent_to_the_session() {
        let router = router(1024, 1 << 20);
        let creating = router.creating();
        route_all(&router, "s", 0..2);
        route_all(&router, "other", [9]);
        let (tx, mut rx) = mpsc::channel(8);
        let shared = Arc::new(SessionShared::default());
        let (backlog, _) = router.register(SessionId::new("s"), tx, shared.clone());
        drop(creating);
        let count = RoutedCount(shared);
        // The two kept for it count; the one for another session does not.
        assert_eq!((backlog.len(), count.get()), (2, 2));
        route_all(&router, "s", 2..5);
        assert_eq!(count.get(), 5);
        // Sent to a session whose queue is gone: dropped, not counted.
        rx.close();
        route_all(&router, "s", [5]);
        assert_eq!(count.get(), 5);
        assert_eq!(router.counters.dropped_sessions.load(Ordering::Relaxed), 1);
    }
}
