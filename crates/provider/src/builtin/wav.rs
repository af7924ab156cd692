//! WAV (RIFF, PCM 16-bit) encoding and parsing, and the built-in provider's tone code: text is spoken as one
//! pure tone per 4-bit nibble and heard back with the Goertzel algorithm, so a transcription is derived from
//! the samples themselves.
//!
//! Sources: the RIFF WAVE layout (Microsoft "Multimedia Programming Interface and Data Specifications 1.0",
//! `fmt ` chunk with `WAVE_FORMAT_PCM` = 1); G. Goertzel, "An Algorithm for the Evaluation of Finite
//! Trigonometric Series" (1958), in its usual DSP form `s = x + 2cos(ω)s₁ − s₂`,
//! `power = s₁² + s₂² − 2cos(ω)s₁s₂`.
//!
//! Tone code: 16 kHz mono; blocks of 320 samples (20 ms); two blocks of the sync tone (4200 Hz), then two
//! blocks per byte of UTF-8 (high nibble, low nibble; nibble `v` is `800 + 200·v` Hz), then one silent block.
//! Every frequency is a whole number of cycles per block, so the 17 tones are orthogonal over a block.

/// Sample rate of the speech the built-in provider makes, in Hz.
pub(crate) const SAMPLE_RATE: u32 = 16_000;
/// Samples per symbol (20 ms at 16 kHz).
const BLOCK: usize = 320;
const SYNC_HZ: f64 = 4200.0;
const AMPLITUDE: f64 = 12_000.0;

fn nibble_hz(nibble: u8) -> f64 {
    800.0 + 200.0 * f64::from(nibble)
}

/// A RIFF/WAVE file of 16-bit PCM mono `samples` at `rate` Hz.
pub(crate) fn encode_pcm16_mono(samples: &[i16], rate: u32) -> Vec<u8> {
    let data_len = (samples.len() * 2) as u32;
    let mut out = Vec::with_capacity(44 + samples.len() * 2);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes()); // WAVE_FORMAT_PCM
    out.extend_from_slice(&1u16.to_le_bytes()); // mono
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&(rate * 2).to_le_bytes()); // bytes per second
    out.extend_from_slice(&2u16.to_le_bytes()); // block align
    out.extend_from_slice(&16u16.to_le_bytes()); // bits per sample
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    for sample in samples {
        out.extend_from_slice(&sample.to_le_bytes());
    }
    out
}

/// The first channel of a 16-bit PCM WAV file, and its sample rate; `None` when `bytes` is not one.
pub(crate) fn decode_pcm16(bytes: &[u8]) -> Option<(Vec<i16>, u32)> {
    if bytes.len() < 12 || &bytes[0..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return None;
    }
    let mut rest = &bytes[12..];
    let mut format: Option<(u16, u32, u16)> = None; // channels, rate, bits
    while rest.len() >= 8 {
        let id = &rest[0..4];
        let len = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]) as usize;
        let body = rest.get(8..)?;
        let body = &body[..len.min(body.len())];
        match id {
            b"fmt " if body.len() >= 16 => {
                let tag = u16::from_le_bytes([body[0], body[1]]);
                let channels = u16::from_le_bytes([body[2], body[3]]);
                let rate = u32::from_le_bytes([body[4], body[5], body[6], body[7]]);
                let bits = u16::from_le_bytes([body[14], body[15]]);
                if tag != 1 || channels == 0 || !(8_000..=192_000).contains(&rate) {
                    return None;
                }
                format = Some((channels, rate, bits));
            }
            b"data" => {
                let (channels, rate, bits) = format?;
                if bits != 16 {
                    return None;
                }
                let frame = usize::from(channels) * 2;
                let samples = body
                    .chunks_exact(frame)
                    .map(|f| i16::from_le_bytes([f[0], f[1]]))
                    .collect();
                return Some((samples, rate));
            }
            _ => {}
        }
        // Chunks are padded to an even length.
        let skip = 8 + len + (len & 1);
        rest = rest.get(skip..)?;
    }
    None
}

fn push_tone(samples: &mut Vec<i16>, hz: f64, count: usize) {
    let step = std::f64::consts::TAU * hz / f64::from(SAMPLE_RATE);
    for n in 0..count {
        samples.push((AMPLITUDE * (step * n as f64).sin()) as i16);
    }
}

/// The tone code of `text` as 16 kHz samples (see the module docs).
pub(crate) fn speak(text: &str) -> Vec<i16> {
    let mut samples = Vec::with_capacity((3 + text.len() * 2) * BLOCK);
    push_tone(&mut samples, SYNC_HZ, 2 * BLOCK);
    for byte in text.bytes() {
        push_tone(&mut samples, nibble_hz(byte >> 4), BLOCK);
        push_tone(&mut samples, nibble_hz(byte & 0x0f), BLOCK);
    }
    samples.extend(std::iter::repeat_n(0, BLOCK));
    samples
}

/// Goertzel power of `hz` in `block` sampled at `rate`.
fn goertzel(block: &[f64], hz: f64, rate: f64) -> f64 {
    let coefficient = 2.0 * (std::f64::consts::TAU * hz / rate).cos();
    let (mut s1, mut s2) = (0.0f64, 0.0f64);
    for &x in block {
        let s = x + coefficient * s1 - s2;
        s2 = s1;
        s1 = s;
    }
    s1 * s1 + s2 * s2 - coefficient * s1 * s2
}

/// The symbol a block carries: `Some(16)` for sync, `Some(0..=15)` for a nibble, `None` for anything else
/// (silence, noise, a mixture, another frequency).
fn symbol(block: &[f64], rate: f64) -> Option<u8> {
    let energy: f64 = block.iter().map(|x| x * x).sum();
    // Quieter than a tone at 1/100 of full scale: silence.
    if energy < (block.len() as f64) * 327.0 * 327.0 / 2.0 {
        return None;
    }
    let mut best = (0u8, 0.0f64);
    for symbol in 0..=16u8 {
        let hz = if symbol == 16 {
            SYNC_HZ
        } else {
            nibble_hz(symbol)
        };
        let power = goertzel(block, hz, rate);
        if power > best.1 {
            best = (symbol, power);
        }
    }
    // A pure tone of the symbol's frequency gives power ≈ energy · N / 2; demand most of that.
    (best.1 >= 0.6 * energy * block.len() as f64 / 2.0).then_some(best.0)
}

/// Decodes the tone code from `samples` at `rate` Hz: the text, or an empty string when the audio does not
/// start with the sync tone. Bytes that are not UTF-8 become U+FFFD.
pub(crate) fn hear(samples: &[i16], rate: u32) -> String {
    let block_len = (rate as usize * BLOCK) / SAMPLE_RATE as usize;
    if block_len == 0 {
        return String::new();
    }
    let rate = f64::from(rate);
    let mut symbols = samples.chunks_exact(block_len).map(|block| {
        let block: Vec<f64> = block.iter().map(|&s| f64::from(s)).collect();
        symbol(&block, rate)
    });
    if symbols.next() != Some(Some(16)) || symbols.next() != Some(Some(16)) {
        return String::new();
    }
    let mut bytes = Vec::new();
    loop {
        match (symbols.next(), symbols.next()) {
            (Some(Some(high)), Some(Some(low))) if high < 16 && low < 16 => {
                bytes.push((high << 4) | low)
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speech_round_trips_through_wav_and_goertzel() {
        for text in ["hello", "Grüße, 世界!", ""] {
            let wav = encode_pcm16_mono(&speak(text), SAMPLE_RATE);
            let (samples, rate) = decode_pcm16(&wav).expect("our own wav");
            assert_eq!(hear(&samples, rate), text);
        }
    }

    #[test]
    fn audio_without_the_sync_tone_is_heard_as_nothing() {
        let mut samples = Vec::new();
        push_tone(&mut samples, 440.0, 8 * BLOCK);
        assert_eq!(hear(&samples, SAMPLE_RATE), "");
        assert_eq!(hear(&[0; 3200], SAMPLE_RATE), "");
        assert_eq!(hear(&[], SAMPLE_RATE), "");
    }

    #[test]
    fn only_pcm16_wav_files_parse() {
        assert_eq!(decode_pcm16(b"not a wav"), None);
        let mut wav = encode_pcm16_mono(&[1, 2, 3], 16_000);
        assert_eq!(decode_pcm16(&wav), Some((vec![1, 2, 3], 16_000)));
        wav[34] = 8; // bits per sample
        assert_eq!(decode_pcm16(&wav), None);
    }
}
