//! `cli.status`, `cli.version`, `cli.capabilities`, `cli.doctor`: the diagnostics of the bundled CLI.
//!
//! Source: DeepChat `src/shared/contracts/routes/cli.routes.ts` (the `possibleEffects` revision) and the
//! enums of `src/shared/contracts/localControl.ts`. Inputs are `z.object({}).default({})` ([`NoParams`]);
//! outputs are plain (non-strict) objects except the capability and doctor-check items, which are strict.

use serde::{Deserialize, Serialize};

use crate::envelope::is_valid_method;

use super::{
    ContractError, Method, NoParams, PROTOCOL_VERSION, Problem, SURFACE_VERSION, Validate,
    check_len,
};

/// `cli.status`: `{}` → [`StatusResult`].
#[derive(Debug, Clone, Copy)]
pub struct Status;
impl Method for Status {
    const NAME: &'static str = "cli.status";
    type Params = NoParams;
    type Result = StatusResult;
}

/// Kind of local endpoint (`unix` socket or Windows named `pipe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndpointKind {
    /// Unix domain socket.
    Unix,
    /// Windows named pipe.
    Pipe,
}

/// Result of `cli.status`.
///
/// `{"running":true,"pid":4242,"startedAt":1767225600000,"uptimeMs":1500,"endpointKind":"unix","activeConnections":1,"pendingRequests":0}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusResult {
    /// Always true when answered.
    pub running: bool,
    /// Server process id (positive).
    pub pid: u32,
    /// Server start, Unix milliseconds.
    pub started_at: u64,
    /// Milliseconds since start.
    pub uptime_ms: u64,
    /// Endpoint kind.
    pub endpoint_kind: EndpointKind,
    /// Open connections.
    pub active_connections: u64,
    /// Requests being served.
    pub pending_requests: u64,
}

impl Validate for StatusResult {
    fn validate(&self) -> Result<(), ContractError> {
        if self.pid == 0 {
            return Err(ContractError::field("pid", Problem::OutOfRange));
        }
        Ok(())
    }
}

/// `cli.version`: `{}` → [`VersionResult`].
#[derive(Debug, Clone, Copy)]
pub struct Version;
impl Method for Version {
    const NAME: &'static str = "cli.version";
    type Params = NoParams;
    type Result = VersionResult;
}

/// Result of `cli.version`. `{"appVersion":"0.1.0","protocolVersion":1,"surfaceVersion":2}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionResult {
    /// Server application version (non-empty).
    pub app_version: String,
    /// Must equal [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// Must equal [`SURFACE_VERSION`].
    pub surface_version: u32,
}

impl VersionResult {
    /// The result for this build's versions.
    pub fn new(app_version: impl Into<String>) -> Self {
        VersionResult {
            app_version: app_version.into(),
            protocol_version: PROTOCOL_VERSION,
            surface_version: SURFACE_VERSION,
        }
    }
}

fn check_versions(protocol: u32, surface: u32) -> Result<(), ContractError> {
    if protocol != PROTOCOL_VERSION {
        return Err(ContractError::field("protocolVersion", Problem::OutOfRange));
    }
    if surface != SURFACE_VERSION {
        return Err(ContractError::field("surfaceVersion", Problem::OutOfRange));
    }
    Ok(())
}

impl Validate for VersionResult {
    fn validate(&self) -> Result<(), ContractError> {
        check_len("appVersion", &self.app_version, 1, usize::MAX)?;
        check_versions(self.protocol_version, self.surface_version)
    }
}

/// `cli.capabilities`: `{}` → [`CapabilitiesResult`].
#[derive(Debug, Clone, Copy)]
pub struct Capabilities;
impl Method for Capabilities {
    const NAME: &'static str = "cli.capabilities";
    type Params = NoParams;
    type Result = CapabilitiesResult;
}

// The capability vocabulary is defined once, where the policy uses it: effects, transports, approval modes and
// the `cli.capabilities` item in `crate::surface`, principals and scopes in `crate::caller`. Their serde shapes are
// DeepChat's (`LOCAL_CONTROL_EFFECTS`, `LOCAL_CONTROL_SCOPES`, `LocalControlCapabilitySchema`), so the contract
// re-exports them instead of keeping a second copy to convert through JSON.
pub use crate::caller::{Principal, Scope};
pub use crate::surface::{ApprovalMode, Capability, Effect, Transport};

impl Validate for Capability {
    fn validate(&self) -> Result<(), ContractError> {
        if !is_valid_method(&self.method) {
            return Err(ContractError::field("method", Problem::BadFormat));
        }
        if self.possible_effects.is_empty() {
            return Err(ContractError::field("possibleEffects", Problem::TooShort));
        }
        if self.callers.is_empty() {
            return Err(ContractError::field("callers", Problem::TooShort));
        }
        if self.callers.len() > 2 {
            return Err(ContractError::field("callers", Problem::TooLong));
        }
        if self.scopes.is_empty() {
            return Err(ContractError::field("scopes", Problem::TooShort));
        }
        if self.max_body_bytes == 0 {
            return Err(ContractError::field("maxBodyBytes", Problem::OutOfRange));
        }
        if self.timeout_ms == 0 {
            return Err(ContractError::field("timeoutMs", Problem::OutOfRange));
        }
        Ok(())
    }
}

/// Result of `cli.capabilities`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilitiesResult {
    /// Must equal [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// Must equal [`SURFACE_VERSION`].
    pub surface_version: u32,
    /// The exposed methods.
    pub capabilities: Vec<Capability>,
}

impl Validate for CapabilitiesResult {
    fn validate(&self) -> Result<(), ContractError> {
        check_versions(self.protocol_version, self.surface_version)?;
        self.capabilities.iter().try_for_each(Validate::validate)
    }
}

/// `cli.doctor`: `{}` → [`DoctorResult`].
#[derive(Debug, Clone, Copy)]
pub struct Doctor;
impl Method for Doctor {
    const NAME: &'static str = "cli.doctor";
    type Params = NoParams;
    type Result = DoctorResult;
}

/// What a doctor check looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckId {
    /// The socket.
    Transport,
    /// The descriptor file.
    Descriptor,
    /// The method surface.
    Surface,
    /// The approval renderer.
    Renderer,
}

/// Outcome of one doctor check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    /// Fine.
    Ok,
    /// Works, with a caveat.
    Warning,
    /// Broken.
    Error,
}

/// One doctor check (strict). `{"id":"renderer","status":"warning","message":"no approval console attached"}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DoctorCheck {
    /// Which check.
    pub id: CheckId,
    /// Outcome.
    pub status: CheckStatus,
    /// 1..=1024 characters.
    pub message: String,
}

/// Result of `cli.doctor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoctorResult {
    /// True when no check is `error`.
    pub healthy: bool,
    /// The checks.
    pub checks: Vec<DoctorCheck>,
}

impl Validate for DoctorResult {
    fn validate(&self) -> Result<(), ContractError> {
        self.checks
            .iter()
            .try_for_each(|c| check_len("checks[].message", &c.message, 1, 1024))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doctor_message_limit() {
        let check = |n: usize| {
            DoctorResult {
                healthy: true,
                checks: vec![DoctorCheck {
                    id: CheckId::Transport,
                    status: CheckStatus::Ok,
                    message: "m".repeat(n),
                }],
            }
            .validate()
        };
        assert!(check(1024).is_ok());
        assert!(check(1025).is_err());
        assert!(check(0).is_err());
    }

    #[test]
    fn capability_limits() {
        let base = Capability {
            method: "runs.get".into(),
            possible_effects: vec![Effect::Read],
            callers: vec![Principal::Human, Principal::Agent],
            scopes: vec![Scope::RunsRead],
            transport: Transport::Rpc,
            approval: ApprovalMode::Never,
            max_body_bytes: 1,
            timeout_ms: 1,
        };
        assert!(base.validate().is_ok());
        let mut three = base.clone();
        three.callers.push(Principal::Human);
        assert_eq!(three.validate().unwrap_err().code(), "too_long");
        let mut zero = base.clone();
        zero.timeout_ms = 0;
        assert_eq!(zero.validate().unwrap_err().code(), "out_of_range");
        let mut none = base;
        none.scopes.clear();
        assert_eq!(none.validate().unwrap_err().code(), "too_short");
    }
}
