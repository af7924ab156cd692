//! The caller model: who is on the other end of a local-control request, built from the transport, never a field.
//!
//! A [`Caller`] is made by the server after authentication: [`Caller::human`] when the presented bearer token
//! is the descriptor token, [`Caller::agent`] from a [`RequestGrant`] that
//! [`TokenAuthority::begin_request`](crate::tokens::TokenAuthority::begin_request) handed out for a valid
//! Agent token, and [`Caller::internal`] for trusted in-process components. No request parameter can select
//! or widen a caller, its scopes or its conversation: [`AgentCaller`] has no public constructor.
//!
//! Source: DeepChat spec, section "Caller Model and Route Migration" (`CliRouteCaller`,
//! `InternalRouteCaller`); scopes from `src/shared/contracts/localControl.ts` (`LOCAL_CONTROL_SCOPES`).

use std::fmt;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::tokens::RequestGrant;

/// The principal of a local-control connection, on the wire `"human"` or `"agent"`.
///
/// Source: DeepChat `LocalControlPrincipalSchema`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Principal {
    /// A same-user local client holding the descriptor token.
    Human,
    /// An Agent shell command holding a short-lived scoped token.
    Agent,
}

impl Principal {
    /// The wire name: `human` or `agent`.
    pub fn as_str(self) -> &'static str {
        match self {
            Principal::Human => "human",
            Principal::Agent => "agent",
        }
    }
}

macro_rules! scopes {
    ($($variant:ident => $name:literal,)*) => {
        /// A capability scope an Agent token carries (a human connection holds all of them).
        ///
        /// On the wire the `domain:verb` string, e.g. `"runs:read"`.
        /// Source: DeepChat `LOCAL_CONTROL_SCOPES` (the same 22 names, in the same order; `ocr:manage` is the
        /// revision whose `surface.ts` guards `ocr.clearCache` with it).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum Scope {
            $(
                #[doc = concat!("`", $name, "`")]
                #[serde(rename = $name)]
                $variant,
            )*
        }

        impl Scope {
            /// Every scope, in DeepChat's order.
            pub const ALL: &'static [Scope] = &[$(Scope::$variant,)*];

            /// The wire name, e.g. `runs:read`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Scope::$variant => $name,)*
                }
            }

            /// Parses a wire name; `None` for anything that is not one of [`Scope::ALL`].
            pub fn parse(name: &str) -> Option<Scope> {
                match name {
                    $($name => Some(Scope::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

scopes! {
    SystemRead => "system:read",
    ModelsRead => "models:read",
    ModelsInvoke => "models:invoke",
    MediaGenerate => "media:generate",
    AudioTranscribe => "audio:transcribe",
    OcrRead => "ocr:read",
    OcrExtract => "ocr:extract",
    OcrManage => "ocr:manage",
    SessionsRun => "sessions:run",
    RunsRead => "runs:read",
    RunsCancel => "runs:cancel",
    ArtifactsRead => "artifacts:read",
    ArtifactsManage => "artifacts:manage",
    SettingsRead => "settings:read",
    SettingsWrite => "settings:write",
    ProvidersRead => "providers:read",
    ProvidersWrite => "providers:write",
    ProvidersCredential => "providers:credential",
    SkillsRead => "skills:read",
    SkillsWrite => "skills:write",
    McpRead => "mcp:read",
    McpWrite => "mcp:write",
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A trusted in-process component calling domain services directly (not over the socket).
///
/// Source: DeepChat `InternalRouteCaller.component`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InternalComponent {
    /// Scheduled background work.
    Scheduler,
    /// Data migration at startup.
    Migration,
    /// The Agent-CLI integration issuing tokens.
    AgentCli,
}

/// An authenticated Agent connection: the claims of a valid token, bound to one conversation.
///
/// Only [`Caller::agent`] makes one, from a grant the token authority issued for a presented token.
/// Debug shows the token id (an opaque handle, not the secret), never the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCaller {
    connection_id: String,
    token_id: String,
    conversation_id: String,
    scopes: Vec<Scope>,
    expires_at: Instant,
}

impl AgentCaller {
    /// The transport connection this request arrived on (quota and audit provenance).
    pub fn connection_id(&self) -> &str {
        &self.connection_id
    }

    /// The token's random public id (22 base64url characters); never the token itself.
    pub fn token_id(&self) -> &str {
        &self.token_id
    }

    /// The conversation the token is bound to; the Agent owns only this conversation's runs and artifacts.
    pub fn conversation_id(&self) -> &str {
        &self.conversation_id
    }

    /// The scopes the token was minted with.
    pub fn scopes(&self) -> &[Scope] {
        &self.scopes
    }

    /// When the token stops being accepted.
    pub fn expires_at(&self) -> Instant {
        self.expires_at
    }
}

/// Who is calling: a human CLI connection, an Agent CLI connection, or a trusted internal component.
///
/// Source: DeepChat `RouteCaller` minus the renderer variant (renderer callers never reach this crate).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Caller {
    /// A connection that presented the descriptor token; holds every [`Scope`].
    Human {
        /// The transport connection id (quota and audit provenance).
        connection_id: String,
    },
    /// A connection that presented a valid Agent token.
    Agent(AgentCaller),
    /// A trusted in-process component; never a socket peer, so the CLI surface denies it.
    Internal {
        /// Which component.
        component: InternalComponent,
    },
}

impl Caller {
    /// A human caller on `connection_id`, for a request whose bearer token matched the descriptor token.
    pub fn human(connection_id: impl Into<String>) -> Caller {
        Caller::Human {
            connection_id: connection_id.into(),
        }
    }

    /// An Agent caller on `connection_id`, from the grant of a validated Agent token.
    pub fn agent(connection_id: impl Into<String>, grant: &RequestGrant) -> Caller {
        let claims = grant.claims();
        Caller::Agent(AgentCaller {
            connection_id: connection_id.into(),
            token_id: claims.token_id().to_owned(),
            conversation_id: claims.conversation_id().to_owned(),
            scopes: claims.scopes().to_vec(),
            expires_at: claims.expires_at(),
        })
    }

    /// A trusted internal component.
    pub fn internal(component: InternalComponent) -> Caller {
        Caller::Internal { component }
    }

    /// The CLI principal, or `None` for an internal component.
    pub fn principal(&self) -> Option<Principal> {
        match self {
            Caller::Human { .. } => Some(Principal::Human),
            Caller::Agent(_) => Some(Principal::Agent),
            Caller::Internal { .. } => None,
        }
    }

    /// The caller kind for audit records: `human`, `agent` or `internal`.
    pub fn kind(&self) -> &'static str {
        match self {
            Caller::Human { .. } => "human",
            Caller::Agent(_) => "agent",
            Caller::Internal { .. } => "internal",
        }
    }

    /// Whether the caller holds `scope`: a human holds all, an Agent those of its token, internal none.
    pub fn has_scope(&self, scope: Scope) -> bool {
        match self {
            Caller::Human { .. } => true,
            Caller::Agent(agent) => agent.scopes.contains(&scope),
            Caller::Internal { .. } => false,
        }
    }

    /// The transport connection id, if the caller came over the socket.
    pub fn connection_id(&self) -> Option<&str> {
        match self {
            Caller::Human { connection_id } => Some(connection_id),
            Caller::Agent(agent) => Some(&agent.connection_id),
            Caller::Internal { .. } => None,
        }
    }

    /// The conversation an Agent caller is bound to; `None` for human and internal callers.
    pub fn conversation_id(&self) -> Option<&str> {
        match self {
            Caller::Agent(agent) => Some(&agent.conversation_id),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_round_trip_and_match_deepchat_order() {
        assert_eq!(Scope::ALL.len(), 22);
        assert_eq!(Scope::ALL[0].as_str(), "system:read");
        assert_eq!(Scope::ALL[7].as_str(), "ocr:manage");
        assert_eq!(Scope::ALL[21].as_str(), "mcp:write");
        for scope in Scope::ALL {
            assert_eq!(Scope::parse(scope.as_str()), Some(*scope));
            let json = serde_json::to_string(scope).expect("serialize");
            assert_eq!(json, format!("\"{}\"", scope.as_str()));
        }
        assert_eq!(Scope::parse("runs:write"), None);
    }

    #[test]
    fn human_holds_every_scope_internal_none() {
        let human = Caller::human("c1");
        let internal = Caller::internal(InternalComponent::Scheduler);
        for scope in Scope::ALL {
            assert!(human.has_scope(*scope));
            assert!(!internal.has_scope(*scope));
        }
        assert_eq!(human.principal(), Some(Principal::Human));
        assert_eq!(internal.principal(), None);
        assert_eq!(internal.kind(), "internal");
        assert_eq!(human.connection_id(), Some("c1"));
        assert_eq!(human.conversation_id(), None);
    }
}
