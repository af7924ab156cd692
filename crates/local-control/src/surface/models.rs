//! Surface entries of the model and media compute methods (`models.*` reads and invoke, `images.generate`,
//! `speech.generate`, `videos.generate`, `audio.transcribe*`).
//!
//! Source: DeepChat `src/main/cli/surface.ts` (`CLI_SURFACE_V2_ENTRIES`: `modelsInvokeRoute`, `mediaEntry`,
//! `audioTranscribeUploadRoute`, `audioTranscribeArtifactRoute`: effects, callers, scopes, transports, audit
//! projections and limits). `models.listPublic` and `models.getCapabilities` are reads under `models:read`
//! (DeepChat lists models through `providers.listPublic` under `providers:read`).

use serde_json::{Value, json};

use super::{
    ApprovalMode, AuditProjection, DIAGNOSTIC_LIMITS, Effect, EffectRule, HUMAN, HUMAN_AND_AGENT,
    KIB, MAX_REQUEST_TIMEOUT, MIB, MethodSpec, RouteLimits, Transport, read, select_scalar_fields,
};
use crate::caller::Scope;

/// `AUDIO_TRANSCRIPTION_MAX_INPUT_BYTES` (25 MiB), the upload body bound of `audio.transcribeUpload`.
const AUDIO_UPLOAD_MAX_BYTES: u64 = 25 * MIB;

fn invoke_audit(params: &Value) -> Value {
    let mut selected = select_scalar_fields(
        params,
        &["providerId", "modelId", "temperature", "maxTokens"],
    );
    let count = params
        .get("messages")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if let Value::Object(map) = &mut selected {
        map.insert("messageCount".to_owned(), json!(count));
    }
    selected
}

fn compute(
    method: &'static str,
    callers: &'static [crate::caller::Principal],
    scopes: &'static [Scope],
    transport: Transport,
    audit: AuditProjection,
    max_body_bytes: u64,
) -> MethodSpec {
    MethodSpec {
        method,
        effect: EffectRule::Fixed(Effect::Compute),
        callers,
        scopes,
        transport,
        approval: ApprovalMode::Never,
        agent_policy: None,
        agent_input_allowed: None,
        audit,
        limits: RouteLimits {
            max_body_bytes,
            timeout: MAX_REQUEST_TIMEOUT,
        },
    }
}

/// The eight entries, in DeepChat's order.
pub(super) fn specs() -> Vec<MethodSpec> {
    const MEDIA_AUDIT: AuditProjection = AuditProjection::Fields(&["providerId", "modelId"]);
    vec![
        read(
            "models.listPublic",
            HUMAN_AND_AGENT,
            &[Scope::ModelsRead],
            AuditProjection::Fields(&["providerId", "enabledOnly"]),
            DIAGNOSTIC_LIMITS,
        ),
        read(
            "models.getCapabilities",
            HUMAN_AND_AGENT,
            &[Scope::ModelsRead],
            AuditProjection::Fields(&["providerId", "modelId"]),
            DIAGNOSTIC_LIMITS,
        ),
        compute(
            "models.invoke",
            HUMAN_AND_AGENT,
            &[Scope::ModelsInvoke],
            Transport::Stream,
            AuditProjection::Custom(invoke_audit),
            5 * MIB,
        ),
        compute(
            "images.generate",
            HUMAN_AND_AGENT,
            &[Scope::MediaGenerate],
            Transport::Stream,
            MEDIA_AUDIT,
            512 * KIB,
        ),
        compute(
            "videos.generate",
            HUMAN_AND_AGENT,
            &[Scope::MediaGenerate],
            Transport::Stream,
            MEDIA_AUDIT,
            512 * KIB,
        ),
        compute(
            "speech.generate",
            HUMAN_AND_AGENT,
            &[Scope::MediaGenerate],
            Transport::Stream,
            MEDIA_AUDIT,
            512 * KIB,
        ),
        compute(
            "audio.transcribeUpload",
            HUMAN,
            &[Scope::AudioTranscribe],
            Transport::Upload,
            AuditProjection::Fields(&["providerId", "modelId", "mimeType"]),
            AUDIO_UPLOAD_MAX_BYTES,
        ),
        compute(
            "audio.transcribeArtifact",
            HUMAN_AND_AGENT,
            &[Scope::AudioTranscribe, Scope::ArtifactsRead],
            Transport::Rpc,
            AuditProjection::Fields(&["providerId", "modelId", "artifactId"]),
            16 * KIB,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_valid_and_never_hash_prompts() {
        let surface = super::super::Surface::from_specs(specs()).expect("valid entries");
        assert_eq!(surface.specs().len(), 8);
        let spec = surface
            .lookup("models.invoke", Transport::Stream)
            .expect("invoke");
        let projected = spec.audit.project(&json!({"providerId":"p","modelId":"m",
            "messages":[{"role":"user","content":"secret prompt"}]}));
        assert_eq!(
            projected,
            json!({"providerId":"p","modelId":"m","messageCount":1})
        );
        assert!(
            surface
                .lookup("audio.transcribeUpload", Transport::Upload)
                .is_ok()
        );
    }
}
