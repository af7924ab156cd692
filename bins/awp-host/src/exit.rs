//! The exit code table of `awp-host` (one place; tested). Documented in `docs/awp-host.md`.

use std::process::ExitCode;

/// Every exit status `awp-host` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 0: success (the turn succeeded; every check rule passed).
    Ok,
    /// 2: usage error: bad flags, unknown thread or agent name, unreadable/oversized/unsupported attachment or
    /// prompt, invalid configuration file.
    Usage,
    /// 3: agent unavailable: launch validation failed, executable missing, spawn failure; or the thread is busy
    /// (`thread_busy`: another turn is running on it).
    AgentUnavailable,
    /// 6: the turn failed: the agent's result was an error, it exited mid-turn, stdin could not be written.
    TurnFailed,
    /// 7: the turn was cancelled (Ctrl-C, SIGTERM, SIGHUP) or timed out (idle or first-output timeout).
    Cancelled,
    /// 8: protocol violation or internal error: stdout line over the limit, invalid session id, a failed
    /// conformance rule, a store failure.
    Protocol,
    /// 130: a second Ctrl-C/SIGTERM/SIGHUP during cancellation killed the agent's process group and exited at once
    /// (128 + SIGINT).
    Interrupted,
}

impl Exit {
    /// The numeric status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Usage => 2,
            Exit::AgentUnavailable => 3,
            Exit::TurnFailed => 6,
            Exit::Cancelled => 7,
            Exit::Protocol => 8,
            Exit::Interrupted => 130,
        }
    }

    /// Exit status for a run that ended with failure code `code` (the stable codes of `agentwire_awp::codes`,
    /// `agentwire_process` spawn codes and the turn runner's codes).
    pub fn for_turn_code(code: &str) -> Exit {
        match code {
            "spawn_failed" => Exit::AgentUnavailable,
            "aborted" => Exit::Interrupted,
            "cancelled" | "agent_idle_timeout" | "agent_first_output_timeout" => Exit::Cancelled,
            "stdout_line_too_long"
            | "invalid_session_id"
            | "output_before_input"
            | "unsupported_protocol_version"
            | "invalid_response" => Exit::Protocol,
            _ => Exit::TurnFailed,
        }
    }

    /// Exit status for `tools call` / `tools list` ending with failure code `code` (an
    /// `agentwire_cli_driver::ErrorCode`, a load error code, or this binary's own usage codes): the same table
    /// as `chat`, read for a tool instead of an agent.
    pub fn for_tool_code(code: &str) -> Exit {
        match code {
            "spawn_failed" | "no_driver" | "missing_secret" => Exit::AgentUnavailable,
            "timeout" | "cancelled" => Exit::Cancelled,
            "internal" => Exit::Protocol,
            "tool_not_found"
            | "input_invalid"
            | "argv_too_large"
            | "input_not_json"
            | "input_too_large"
            | "input_unreadable"
            | "io_error"
            | "manifest_too_large"
            | "front_matter_missing"
            | "manifest_invalid"
            | "cwd_outside_app"
            | "duplicate_id"
            | "unknown_tool" => Exit::Usage,
            _ => Exit::TurnFailed,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(code: &str, expect: u8) {
        assert_eq!(Exit::for_turn_code(code).code(), expect, "{code}");
    }

    #[test]
    fn turn_codes_map_to_the_documented_exit_statuses() {
        check("agent_error", 6);
        check("agent_exited_mid_turn", 6);
        check("stdin_write_failed", 6);
        check("spawn_failed", 3);
        check("cancelled", 7);
        check("agent_idle_timeout", 7);
        check("agent_first_output_timeout", 7);
        check("aborted", 130);
        check("stdout_line_too_long", 8);
        check("invalid_session_id", 8);
        check("unsupported_protocol_version", 8);
        check("invalid_response", 8);
        check("refusal", 6);
        check("max_tokens", 6);
    }

    #[test]
    fn tool_codes_map_to_the_documented_exit_statuses() {
        let table = [
            ("input_invalid", 2),
            ("tool_not_found", 2),
            ("input_not_json", 2),
            ("manifest_invalid", 2),
            ("cwd_outside_app", 2),
            ("argv_too_large", 2),
            ("spawn_failed", 3),
            ("no_driver", 3),
            ("missing_secret", 3),
            ("upstream_error", 6),
            ("auth_required", 6),
            ("usage_error", 6),
            ("not_found", 6),
            ("rate_limited", 6),
            ("killed", 6),
            ("output_parse_failed", 6),
            ("timeout", 7),
            ("cancelled", 7),
            ("internal", 8),
        ];
        for (code, expect) in table {
            assert_eq!(Exit::for_tool_code(code).code(), expect, "{code}");
        }
    }

    #[test]
    fn the_table_is_stable() {
        let all = [
            (Exit::Ok, 0),
            (Exit::Usage, 2),
            (Exit::AgentUnavailable, 3),
            (Exit::TurnFailed, 6),
            (Exit::Cancelled, 7),
            (Exit::Protocol, 8),
            (Exit::Interrupted, 130),
        ];
        for (exit, code) in all {
            assert_eq!(exit.code(), code);
        }
    }
}
