//! Surface entries of offline OCR: `ocr.getRuntimeStatus`, `ocr.extractUpload`, `ocr.extractArtifact`,
//! `ocr.clearCache`.
//!
//! Source: DeepChat `src/main/cli/surface.ts` (`CLI_SURFACE_V2_ENTRIES`): effects, callers, scopes, transports,
//! audit projections and limits as there. `ocr.clearCache` is `local-maintenance` for humans only (no approval;
//! an Agent is refused by the caller list); the extraction methods are `compute`, so the host admits them through
//! its background compute admission.

use std::time::Duration;

use super::{
    ApprovalMode, AuditProjection, Effect, EffectRule, MethodSpec, RouteLimits, Transport,
};
use crate::caller::{Principal, Scope};
use crate::contract::ocr::MAX_INPUT_BYTES;
use crate::limits::MAX_REQUEST_TIMEOUT;

const HUMAN: &[Principal] = &[Principal::Human];
const HUMAN_AND_AGENT: &[Principal] = &[Principal::Human, Principal::Agent];
const KIB: u64 = 1024;

/// The four OCR methods.
pub fn specs() -> Vec<MethodSpec> {
    let spec = |method, effect, callers, scopes, transport, audit, limits| MethodSpec {
        method,
        effect: EffectRule::Fixed(effect),
        callers,
        scopes,
        transport,
        approval: ApprovalMode::Never,
        agent_policy: None,
        agent_input_allowed: None,
        audit,
        limits,
    };
    vec![
        spec(
            "ocr.getRuntimeStatus",
            Effect::Read,
            HUMAN_AND_AGENT,
            &[Scope::OcrRead],
            Transport::Rpc,
            AuditProjection::Nothing,
            RouteLimits {
                max_body_bytes: 16 * KIB,
                timeout: Duration::from_secs(5),
            },
        ),
        spec(
            "ocr.extractUpload",
            Effect::Compute,
            HUMAN,
            &[Scope::OcrExtract],
            Transport::Upload,
            AuditProjection::Fields(&[
                "mimeType",
                "backend",
                "sourcePageCountHint",
                "generationTokenLimit",
            ]),
            RouteLimits {
                max_body_bytes: MAX_INPUT_BYTES,
                timeout: MAX_REQUEST_TIMEOUT,
            },
        ),
        spec(
            "ocr.extractArtifact",
            Effect::Compute,
            HUMAN_AND_AGENT,
            &[Scope::OcrExtract, Scope::ArtifactsRead],
            Transport::Rpc,
            AuditProjection::Fields(&[
                "artifactId",
                "backend",
                "sourcePageCountHint",
                "generationTokenLimit",
            ]),
            RouteLimits {
                max_body_bytes: 16 * KIB,
                timeout: MAX_REQUEST_TIMEOUT,
            },
        ),
        spec(
            "ocr.clearCache",
            Effect::LocalMaintenance,
            HUMAN,
            &[Scope::OcrManage],
            Transport::Rpc,
            AuditProjection::Nothing,
            RouteLimits {
                max_body_bytes: 16 * KIB,
                timeout: MAX_REQUEST_TIMEOUT,
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::surface::Surface;

    #[test]
    fn entries_match_deepchat_and_build_a_valid_surface() {
        let surface = Surface::from_specs(specs()).expect("valid");
        let upload = surface
            .lookup("ocr.extractUpload", Transport::Upload)
            .expect("upload");
        assert_eq!(upload.limits.max_body_bytes, 50 * 1024 * 1024);
        assert_eq!(upload.callers, HUMAN);
        let clear = surface.get("ocr.clearCache").expect("clear");
        assert_eq!(clear.callers, HUMAN);
        assert_eq!(clear.scopes, &[Scope::OcrManage]);
        assert!(
            surface
                .lookup("ocr.extractArtifact", Transport::Upload)
                .is_err()
        );
        assert!(Surface::standard().get("ocr.getRuntimeStatus").is_some());
    }
}
