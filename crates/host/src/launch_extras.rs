//! One launch's additions to a configured agent: a system prompt (`chat --system`) and extra arguments
//! (`chat --agent-arg`), validated and applied to a copy of the [`AgentSpec`].
//!
//! The system prompt reaches the agent the way its protocol family knows:
//! - `stream-json` (Claude Code): `--append-system-prompt PROMPT` (Claude Code's flag, appended to its default
//!   system prompt; `--append-system-prompt=PROMPT` when the prompt starts with `-`, so it cannot be read as a
//!   flag).
//! - `awp-jsonl`: the AWP launch contract defines no system prompt flag (the reference `awp-agent` rejects
//!   unknown arguments), and `acp`: ACP `session/new` has no system prompt field. Both are refused with
//!   [`LaunchExtrasError::SystemPromptUnsupported`]; an agent with its own flag gets it through `--agent-arg`.
//!
//! Extra arguments go after the agent's configured `args` and before the protocol's own flags (`--model`,
//! `--resume`, …); the launch rules of `agentwire-awp` (no NUL, no remote URL without the opt-in) apply to them as
//! to configured ones. Neither is stored: they hold for this launch only.

use crate::agents::{AgentProtocol, AgentSpec};

/// Longest system prompt, in bytes (64 KiB).
pub const MAX_SYSTEM_PROMPT_BYTES: usize = 64 * 1024;
/// Longest extra argument, in bytes (16 KiB).
pub const MAX_AGENT_ARG_BYTES: usize = 16 * 1024;
/// Most extra arguments per launch.
pub const MAX_AGENT_ARGS: usize = 64;

/// What one launch adds to the configured agent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaunchExtras {
    /// A system prompt to append (see the module docs for how each protocol gets it).
    pub system_prompt: Option<String>,
    /// Extra arguments, in order.
    pub agent_args: Vec<String>,
}

/// Why the extras cannot be applied.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LaunchExtrasError {
    /// The system prompt is empty (or only whitespace).
    #[error("the system prompt is empty")]
    SystemPromptEmpty,
    /// The system prompt is longer than [`MAX_SYSTEM_PROMPT_BYTES`].
    #[error("the system prompt is {len} bytes; at most {max} are accepted")]
    SystemPromptTooLarge {
        /// Its length in bytes.
        len: usize,
        /// [`MAX_SYSTEM_PROMPT_BYTES`].
        max: usize,
    },
    /// The agent's protocol has no way to receive a system prompt.
    #[error(
        "agent {agent} speaks {protocol}, which has no system prompt option (only stream-json agents take \
         --system, as --append-system-prompt); pass the agent's own flag with --agent-arg"
    )]
    SystemPromptUnsupported {
        /// Agent name.
        agent: String,
        /// Its protocol.
        protocol: &'static str,
    },
    /// More than [`MAX_AGENT_ARGS`] extra arguments.
    #[error("{count} extra agent arguments; at most {max} are accepted")]
    TooManyAgentArgs {
        /// How many were given.
        count: usize,
        /// [`MAX_AGENT_ARGS`].
        max: usize,
    },
    /// An extra argument is empty or longer than [`MAX_AGENT_ARG_BYTES`].
    #[error("extra agent argument {index} is {len} bytes; 1 to {max} are accepted")]
    AgentArgLength {
        /// Zero-based position among the extra arguments.
        index: usize,
        /// Its length in bytes.
        len: usize,
        /// [`MAX_AGENT_ARG_BYTES`].
        max: usize,
    },
    /// The system prompt or an extra argument holds a NUL byte (it cannot be passed in an argv).
    #[error("{what} contains a NUL byte")]
    ContainsNul {
        /// `the system prompt` or `extra agent argument N`.
        what: String,
    },
    /// An extra argument holds a non-loopback `http(s)://` URL and the agent is not opted in to remote APIs (the
    /// launch rule of `agentwire-awp`, checked here so that the hint names the agent's own switch).
    #[error("extra agent argument {index} holds a non-loopback URL; {hint}")]
    RemoteUrl {
        /// Zero-based position among the extra arguments.
        index: usize,
        /// How this agent is opted in ([`crate::agents::remote_opt_in_hint`]).
        hint: &'static str,
    },
}

impl LaunchExtrasError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            LaunchExtrasError::SystemPromptEmpty => "system_prompt_empty",
            LaunchExtrasError::SystemPromptTooLarge { .. } => "system_prompt_too_large",
            LaunchExtrasError::SystemPromptUnsupported { .. } => "system_prompt_unsupported",
            LaunchExtrasError::TooManyAgentArgs { .. } => "too_many_agent_args",
            LaunchExtrasError::AgentArgLength { .. } => "agent_arg_invalid",
            LaunchExtrasError::ContainsNul { .. } => "argument_contains_nul",
            LaunchExtrasError::RemoteUrl { .. } => "remote_url_not_allowed",
        }
    }
}

impl LaunchExtras {
    /// Checks the bounds (independent of the agent).
    ///
    /// # Errors
    /// Every [`LaunchExtrasError`] except [`LaunchExtrasError::SystemPromptUnsupported`].
    pub fn validate(&self) -> Result<(), LaunchExtrasError> {
        if let Some(prompt) = &self.system_prompt {
            if prompt.trim().is_empty() {
                return Err(LaunchExtrasError::SystemPromptEmpty);
            }
            if prompt.len() > MAX_SYSTEM_PROMPT_BYTES {
                return Err(LaunchExtrasError::SystemPromptTooLarge {
                    len: prompt.len(),
                    max: MAX_SYSTEM_PROMPT_BYTES,
                });
            }
            if prompt.contains('\0') {
                return Err(LaunchExtrasError::ContainsNul {
                    what: "the system prompt".to_owned(),
                });
            }
        }
        if self.agent_args.len() > MAX_AGENT_ARGS {
            return Err(LaunchExtrasError::TooManyAgentArgs {
                count: self.agent_args.len(),
                max: MAX_AGENT_ARGS,
            });
        }
        for (index, arg) in self.agent_args.iter().enumerate() {
            if arg.is_empty() || arg.len() > MAX_AGENT_ARG_BYTES {
                return Err(LaunchExtrasError::AgentArgLength {
                    index,
                    len: arg.len(),
                    max: MAX_AGENT_ARG_BYTES,
                });
            }
            if arg.contains('\0') {
                return Err(LaunchExtrasError::ContainsNul {
                    what: format!("extra agent argument {index}"),
                });
            }
        }
        Ok(())
    }

    /// A copy of `agent` with these extras added to its launch arguments (see the module docs).
    ///
    /// # Errors
    /// As [`LaunchExtras::validate`], [`LaunchExtrasError::RemoteUrl`] for an extra argument with a remote URL
    /// when the agent is not opted in, and [`LaunchExtrasError::SystemPromptUnsupported`] for a system prompt to
    /// an `awp-jsonl` or `acp` agent.
    pub fn apply(&self, agent: &AgentSpec) -> Result<AgentSpec, LaunchExtrasError> {
        self.validate()?;
        if !agent.launch.remote_api_opt_in
            && let Some(index) = self
                .agent_args
                .iter()
                .position(|a| agentwire_awp::launch::contains_remote_url(a))
        {
            return Err(LaunchExtrasError::RemoteUrl {
                index,
                hint: crate::agents::remote_opt_in_hint(agent.source),
            });
        }
        let mut out = agent.clone();
        out.launch
            .prefix_args
            .extend(self.agent_args.iter().cloned());
        if let Some(prompt) = &self.system_prompt {
            match agent.protocol {
                AgentProtocol::StreamJson => {
                    if prompt.starts_with('-') {
                        out.launch
                            .prefix_args
                            .push(format!("--append-system-prompt={prompt}"));
                    } else {
                        out.launch
                            .prefix_args
                            .extend(["--append-system-prompt".to_owned(), prompt.clone()]);
                    }
                }
                other => {
                    return Err(LaunchExtrasError::SystemPromptUnsupported {
                        agent: agent.name.clone(),
                        protocol: other.as_str(),
                    });
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(protocol: AgentProtocol) -> AgentSpec {
        AgentSpec {
            name: "a".to_owned(),
            source: crate::agents::AgentSource::ConfigFile,
            protocol,
            launch: {
                let mut l = agentwire_awp::LaunchConfig::new("/bin/agent");
                l.prefix_args = vec!["--configured".to_owned()];
                l
            },
            max_line_bytes: 1024,
            first_output_timeout: None,
            include_partial_messages: false,
            control_protocol: false,
            provider: None,
        }
    }

    #[test]
    fn stream_json_gets_append_system_prompt_after_configured_and_extra_args() {
        let extras = LaunchExtras {
            system_prompt: Some("be brief".to_owned()),
            agent_args: vec!["--x".to_owned(), "1".to_owned()],
        };
        let out = extras.apply(&agent(AgentProtocol::StreamJson)).unwrap();
        assert_eq!(
            out.launch.prefix_args,
            [
                "--configured",
                "--x",
                "1",
                "--append-system-prompt",
                "be brief"
            ]
        );
        let dash = LaunchExtras {
            system_prompt: Some("-v is not a flag".to_owned()),
            agent_args: Vec::new(),
        };
        let out = dash.apply(&agent(AgentProtocol::StreamJson)).unwrap();
        assert_eq!(
            out.launch.prefix_args,
            ["--configured", "--append-system-prompt=-v is not a flag"]
        );
    }

    #[test]
    fn other_protocols_refuse_a_system_prompt_but_take_extra_args() {
        for protocol in [AgentProtocol::AwpJsonl, AgentProtocol::Acp] {
            let e = LaunchExtras {
                system_prompt: Some("x".to_owned()),
                agent_args: Vec::new(),
            }
            .apply(&agent(protocol))
            .unwrap_err();
            assert_eq!(e.code(), "system_prompt_unsupported");
            let out = LaunchExtras {
                system_prompt: None,
                agent_args: vec!["--y".to_owned()],
            }
            .apply(&agent(protocol))
            .unwrap();
            assert_eq!(out.launch.prefix_args, ["--configured", "--y"]);
        }
    }

    #[test]
    fn bounds_hold_at_the_limit_and_one_past_it() {
        let check = |extras: LaunchExtras| extras.validate().map_err(|e| e.code());
        let prompt = |n: usize| LaunchExtras {
            system_prompt: Some("p".repeat(n)),
            agent_args: Vec::new(),
        };
        assert_eq!(check(prompt(MAX_SYSTEM_PROMPT_BYTES)), Ok(()));
        assert_eq!(
            check(prompt(MAX_SYSTEM_PROMPT_BYTES + 1)),
            Err("system_prompt_too_large")
        );
        let args = |n: usize, len: usize| LaunchExtras {
            system_prompt: None,
            agent_args: vec!["a".repeat(len); n],
        };
        assert_eq!(check(args(MAX_AGENT_ARGS, MAX_AGENT_ARG_BYTES)), Ok(()));
        assert_eq!(
            check(args(MAX_AGENT_ARGS + 1, 1)),
            Err("too_many_agent_args")
        );
        assert_eq!(
            check(args(1, MAX_AGENT_ARG_BYTES + 1)),
            Err("agent_arg_invalid")
        );
        assert_eq!(check(args(1, 0)), Err("agent_arg_invalid"));
        assert_eq!(
            check(LaunchExtras {
                system_prompt: Some(" \n".to_owned()),
                agent_args: Vec::new()
            }),
            Err("system_prompt_empty")
        );
        assert_eq!(
            check(LaunchExtras {
                system_prompt: Some("a\0b".to_owned()),
                agent_args: Vec::new()
            }),
            Err("argument_contains_nul")
        );
        assert_eq!(
            check(LaunchExtras {
                system_prompt: None,
                agent_args: vec!["a\0b".to_owned()]
            }),
            Err("argument_contains_nul")
        );
    }
}
