//! The built-in provider's output checked by independent readers: the `png` decoder, the `hound` WAV reader,
//! `file(1)` and, when installed, `ffprobe`.

use std::io::Write;

use agentwire_provider::{
    ImageRequest, Limits, Provider, SpeechRequest, StreamItem, TranscriptionRequest, VideoRequest,
    VideoStatus,
};

/// Runs `program args… <file holding bytes>` and returns its stdout, `None` when the program is not installed.
async fn run_on(program: &str, args: &[&str], bytes: &[u8]) -> Option<String> {
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(bytes).expect("write");
    let mut command = agentwire_process::Command::new(program);
    command.args(args).arg(file.path()).inherit_os_env();
    let mut child = command.spawn().ok()?;
    let mut stdout = child.take_stdout().expect("stdout");
    let mut out = Vec::new();
    while let Some(item) = stdout.next().await {
        if let agentwire_process::StdoutItem::Bytes(bytes) = item {
            out.extend_from_slice(&bytes);
        }
    }
    assert!(child.wait().await.success(), "{program} failed");
    Some(String::from_utf8_lossy(&out).trim().to_owned())
}

async fn file_says(bytes: &[u8]) -> String {
    run_on("file", &["-b"], bytes)
        .await
        .expect("file(1) is installed (.ci/run installs it)")
}

#[tokio::test]
async fn chat_streams_several_deltas_then_finish_and_usage() {
    let provider = Provider::default();
    let request = agentwire_provider::ChatRequest {
        messages: vec![agentwire_provider::ChatMessage::text(
            agentwire_provider::Role::User,
            "hello there",
        )],
        ..Default::default()
    };
    let mut stream = provider.chat(&request).await.expect("stream");
    let mut items = Vec::new();
    while let Some(item) = stream.next().await.expect("item") {
        items.push(item);
    }
    let texts = items
        .iter()
        .filter(|i| matches!(i, StreamItem::Text(_)))
        .count();
    assert!(texts >= 3, "{items:?}");
    assert!(matches!(items[items.len() - 2], StreamItem::Finish(ref r) if r.0 == "stop"));
    assert!(matches!(items[items.len() - 1], StreamItem::Usage(u) if u.input_tokens == 2));
    let models: Vec<String> = provider
        .list_models()
        .await
        .expect("models")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(
        models,
        [
            "builtin-demo",
            "builtin-image",
            "builtin-speech",
            "builtin-transcribe",
            "builtin-video"
        ]
    );
}

#[tokio::test]
async fn images_are_pngs_a_decoder_and_file_accept() {
    let images = Provider::default()
        .generate_images(&ImageRequest {
            prompt: "a lighthouse at dusk".into(),
            size: Some("64x32".into()),
            n: 2,
            ..ImageRequest::default()
        })
        .await
        .expect("images");
    assert_eq!(images.len(), 2);
    assert_ne!(images[0].bytes, images[1].bytes);
    for image in &images {
        assert_eq!(image.mime, "image/png");
        let decoder = png::Decoder::new(std::io::Cursor::new(&image.bytes));
        let mut reader = decoder.read_info().expect("png header");
        let mut pixels = vec![0; reader.output_buffer_size().expect("size")];
        let info = reader
            .next_frame(&mut pixels)
            .expect("png data (crc, zlib)");
        assert_eq!((info.width, info.height), (64, 32));
        assert_eq!(info.color_type, png::ColorType::Rgb);
        assert!(
            pixels.chunks(3).any(|p| p != &pixels[0..3]),
            "not a flat image"
        );
        assert_eq!(
            file_says(&image.bytes).await,
            "PNG image data, 64 x 32, 8-bit/color RGB, non-interlaced"
        );
    }
}

#[tokio::test]
async fn speech_is_a_wav_and_its_transcription_is_derived_from_the_samples() {
    let provider = Provider::default();
    let text = "Meet me at 10:30, café?";
    let audio = provider
        .generate_speech(&SpeechRequest {
            input: text.into(),
            ..SpeechRequest::default()
        })
        .await
        .expect("speech");
    assert_eq!(audio.mime, "audio/wav");
    let reader = hound::WavReader::new(std::io::Cursor::new(&audio.bytes)).expect("wav");
    let spec = reader.spec();
    assert_eq!(
        (spec.channels, spec.sample_rate, spec.bits_per_sample),
        (1, 16_000, 16)
    );
    assert_eq!(spec.sample_format, hound::SampleFormat::Int);
    assert!(reader.len() > 16_000 / 10);
    assert!(
        file_says(&audio.bytes)
            .await
            .starts_with("RIFF (little-endian) data, WAVE audio")
    );

    let transcribe = |bytes: Vec<u8>| {
        let provider = &provider;
        async move {
            provider
                .transcribe(&TranscriptionRequest {
                    audio: bytes,
                    file_name: "speech.wav".into(),
                    mime: "audio/wav".into(),
                    ..TranscriptionRequest::default()
                })
                .await
        }
    };
    assert_eq!(
        transcribe(audio.bytes.clone()).await.expect("text").text,
        text
    );

    // Another WAV (a 440 Hz tone written by hound) carries no text.
    let mut other = std::io::Cursor::new(Vec::new());
    {
        let mut writer = hound::WavWriter::new(&mut other, spec).expect("writer");
        for n in 0..16_000 {
            let x = (n as f64 * 440.0 * std::f64::consts::TAU / 16_000.0).sin();
            writer.write_sample((x * 10_000.0) as i16).expect("sample");
        }
        writer.finalize().expect("finalize");
    }
    assert_eq!(transcribe(other.into_inner()).await.expect("text").text, "");
    // A different spoken text gives a different transcription.
    let other_speech = provider
        .generate_speech(&SpeechRequest {
            input: "something else".into(),
            ..SpeechRequest::default()
        })
        .await
        .expect("speech");
    assert_eq!(
        transcribe(other_speech.bytes).await.expect("text").text,
        "something else"
    );
    assert_eq!(
        transcribe(b"not audio".to_vec())
            .await
            .map_err(|e| e.code()),
        Err("provider_invalid_input")
    );
}

#[tokio::test]
async fn uploads_are_bounded_at_the_limit() {
    let limits = Limits {
        max_upload_bytes: 1000,
        ..Limits::default()
    };
    let provider = Provider::builtin(limits);
    let request = |len: usize| TranscriptionRequest {
        audio: vec![0; len],
        ..TranscriptionRequest::default()
    };
    // At the limit the size is fine (and the bytes are not a WAV); one past is refused.
    assert_eq!(
        provider
            .transcribe(&request(1000))
            .await
            .map_err(|e| e.code()),
        Err("provider_invalid_input")
    );
    assert_eq!(
        provider
            .transcribe(&request(1001))
            .await
            .map_err(|e| e.code()),
        Err("provider_input_too_large")
    );
}

#[tokio::test]
async fn videos_are_avi_files_with_progress() {
    let mut progress = Vec::new();
    let video = Provider::default()
        .generate_video(
            &VideoRequest {
                prompt: "a red bar sliding".into(),
                seconds: Some(1),
                size: Some("32x24".into()),
                ..VideoRequest::default()
            },
            &mut |job| progress.push((job.status, job.progress)),
        )
        .await
        .expect("video");
    assert_eq!(
        progress,
        [
            (VideoStatus::Queued, 0),
            (VideoStatus::InProgress, 50),
            (VideoStatus::Completed, 100)
        ]
    );
    assert_eq!(video.mime, "video/x-msvideo");
    let described = file_says(&video.bytes).await;
    assert!(
        described.starts_with("RIFF (little-endian) data, AVI"),
        "{described}"
    );
    assert!(described.contains("32 x 24"), "{described}");
    // ffprobe is optional on developer machines; where it is installed it must read every frame.
    if let Some(probe) = run_on(
        "ffprobe",
        &[
            "-v",
            "error",
            "-count_frames",
            "-show_entries",
            "stream=codec_type,width,height,nb_read_frames",
            "-of",
            "csv=p=0",
        ],
        &video.bytes,
    )
    .await
    {
        assert_eq!(probe, "video,32,24,8");
    }
}
