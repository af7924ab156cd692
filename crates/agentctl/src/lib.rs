//! agentctl: a Kandev-compatible sidecar that runs one JSON-RPC agent subprocess (ACP v1, or Kandev's simplified
//! dialect) and exposes it over HTTP + WebSocket.
//!
//! It is a relay, not a protocol client: messages pass verbatim in both directions and only their JSON-RPC
//! envelope (id / method / result / error) is looked at, so agents of either dialect work. This crate is its core;
//! the `agentctl` binary (`bins/agentctl`) only parses the configuration, binds and calls [`run`]. An
//! orchestrator can reuse the types (configuration, status, error shape, [`router::Router`]).
//!
//! Code map: [`config`] (every `AGENTCTL_*` variable) → [`App::new`] wires [`agent::Supervisor`] (spawn, stop
//! ladder, status; the only IO on the agent's pipes), [`relay::Relay`] (the tokio shell) around the sans-IO
//! [`router::Router`] (where each message goes), [`hub::Hub`] (bounded subscriber queues), [`fs::FsService`]
//! (confined `fs/*`), [`output::OutputBuffer`] (stderr ring) → [`http`] (axum routes, the cross-site guard,
//! WebSockets, errors in the shape of [`error::ApiError`]; [`ws`] frames `/acp/stream` from shared buffers) →
//! [`server`] (accept loop: connection cap, header-read timeout). [`run`] serves until the shutdown future
//! resolves, then stops the agent and closes every socket.
//!
//! Source: `protocols/agentctl.md`; Kandev agent protocol ("agentctl", "agentctl HTTP API").

pub mod agent;
pub mod auth;
pub mod config;
pub mod envelope;
pub mod error;
pub mod fs;
pub mod http;
pub mod hub;
pub mod output;
pub mod relay;
pub mod router;
pub mod server;
pub mod ws;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::Config;

/// How long shutdown waits for open WebSockets and in-flight requests after the agent stopped.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(15);

/// Everything the handlers share.
#[derive(Debug)]
pub struct App {
    /// The configuration.
    pub config: Config,
    /// The agent's argv.
    pub argv: Vec<String>,
    /// The canonical workdir.
    pub workdir: PathBuf,
    /// The port actually bound.
    pub port: u16,
    /// The token check, when `AGENTCTL_TOKEN` is set.
    pub token: Option<auth::TokenCheck>,
    /// The relay.
    pub relay: Arc<relay::Relay>,
    /// The supervisor.
    pub supervisor: Arc<agent::Supervisor>,
    /// The output buffer.
    pub output: output::OutputBuffer,
    /// WebSocket tasks, waited for at shutdown.
    pub tracker: TaskTracker,
    /// Cancelled when shutdown begins.
    pub shutdown: CancellationToken,
}

impl App {
    /// Validates `config` and wires the parts; `port` is the port actually bound.
    ///
    /// # Errors
    /// An unsplittable agent command, a missing workdir, or a non-loopback listen address without a token.
    pub fn new(config: Config, port: u16) -> anyhow::Result<Arc<Self>> {
        config.validate()?;
        let argv = config.agent_argv().context("AGENTCTL_AGENT_COMMAND")?;
        let workdir = match &config.workdir {
            Some(dir) => dir.clone(),
            None => std::env::current_dir().context("reading the current directory")?,
        };
        let fs = fs::FsService::new(&workdir, config.max_message_bytes)
            .with_context(|| format!("AGENTCTL_WORKDIR {}", workdir.display()))?;
        let workdir = fs.root().to_path_buf();
        let output =
            output::OutputBuffer::new(config.output_buffer_size, config.subscriber_queue_len());
        let relay = relay::Relay::new(
            config.router_limits(),
            config.auto_approve_permissions,
            config.hub_limits(),
            fs,
            config.max_stdin_queue_bytes,
        );
        let supervisor = agent::Supervisor::new(
            agent::AgentSettings {
                argv: argv.clone(),
                workdir: workdir.clone(),
                env: match config.agent_env_mode {
                    config::AgentEnvMode::Inherit => agent::AgentEnv::Inherit,
                    config::AgentEnvMode::Allowlist => {
                        agent::AgentEnv::Allowlist(config.agent_env_names())
                    }
                },
                max_message_bytes: config.max_message_bytes,
                max_output_line_bytes: config.max_output_line_bytes,
                stop_grace: Duration::from_millis(config.stop_grace_ms),
                term_grace: Duration::from_millis(config.term_grace_ms),
            },
            relay.clone(),
            output.clone(),
        );
        let token = config.token().map(auth::TokenCheck::new);
        Ok(Arc::new(Self {
            config,
            argv,
            workdir,
            port,
            token,
            relay,
            supervisor,
            output,
            tracker: TaskTracker::new(),
            shutdown: CancellationToken::new(),
        }))
    }
}

/// Serves `listener` until `shutdown` resolves; then stops accepting, stops the agent with the ladder, closes every
/// WebSocket (code 1001) and returns.
///
/// # Errors
/// Invalid configuration (see [`App::new`]) or a failing listener.
pub async fn run(
    config: Config,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let port = listener
        .local_addr()
        .context("reading the bound address")?
        .port();
    let app = App::new(config, port)?;
    tokio::spawn(app.relay.clone().run_timer(app.shutdown.clone()));
    if app.config.auto_start
        && let Err(error) = app.supervisor.start()
    {
        tracing::error!(message = %error.message, "AGENTCTL_AUTO_START: the agent did not start");
    }
    let limits = app.config.server_limits();
    let server = tokio::spawn(server::serve(
        listener,
        http::router(app.clone()),
        limits,
        app.shutdown.clone(),
    ));
    shutdown.await;
    tracing::info!("shutting down");
    app.shutdown.cancel();
    app.supervisor.shutdown().await;
    app.relay
        .close_subscribers(hub::CLOSE_GOING_AWAY, "agentctl shutting down");
    app.tracker.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, app.tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("websockets still open after the shutdown grace; closing them");
    }
    match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
        Ok(Ok(())) => {}
        Ok(Err(join)) => return Err(join).context("the http server task failed"),
        Err(_) => tracing::warn!("requests still in flight after the shutdown grace"),
    }
    Ok(())
}
