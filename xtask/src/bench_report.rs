//! Turns criterion's JSON output and the custom benches' markdown fragments into `docs/benchmarks.md`.
//!
//! Convention (see README "Benchmarks"): inside a criterion group our implementation is the function whose id
//! starts with `agentwire`, every other function is a baseline measured in the same run. Each row reports the
//! median time, the throughput when the bench declared one, and the ratio `baseline median / agentwire median`
//! ("how many times faster ours is"; below 1.00 means ours is slower).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

/// One criterion benchmark result, read from `<dir>/new/{benchmark,estimates}.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    pub group: String,
    pub function: String,
    pub parameter: Option<String>,
    /// Median time per iteration, nanoseconds.
    pub median_ns: f64,
    pub throughput: Option<Throughput>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Throughput {
    /// Bytes processed per iteration.
    Bytes(u64),
    /// Elements (messages, calls…) processed per iteration.
    Elements(u64),
}

/// Reads every `new/benchmark.json` below `criterion_dir` (missing dir = no results).
pub fn read_criterion(criterion_dir: &Path) -> Result<Vec<Measurement>> {
    let mut out = Vec::new();
    if criterion_dir.is_dir() {
        walk(criterion_dir, &mut out)?;
    }
    out.sort_by(|a, b| {
        (&a.group, &a.parameter, &a.function).cmp(&(&b.group, &b.parameter, &b.function))
    });
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<Measurement>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if !path.is_dir() {
            continue;
        }
        if path.file_name().is_some_and(|n| n == "new") {
            let bench = path.join("benchmark.json");
            let estimates = path.join("estimates.json");
            if bench.is_file() && estimates.is_file() {
                out.push(
                    parse_measurement(
                        &std::fs::read_to_string(&bench)?,
                        &std::fs::read_to_string(&estimates)?,
                    )
                    .with_context(|| format!("parsing {}", path.display()))?,
                );
            }
        } else if path
            .file_name()
            .is_none_or(|n| n != "report" && n != "base" && n != "change")
        {
            walk(&path, out)?;
        }
    }
    Ok(())
}

/// Parses one pair of criterion files.
pub fn parse_measurement(benchmark_json: &str, estimates_json: &str) -> Result<Measurement> {
    let bench: Value = serde_json::from_str(benchmark_json)?;
    let estimates: Value = serde_json::from_str(estimates_json)?;
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let group = text(&bench, "group_id").context("benchmark.json has no group_id")?;
    let function = text(&bench, "function_id").unwrap_or_else(|| group.clone());
    let parameter = text(&bench, "value_str");
    let median_ns = estimates
        .pointer("/median/point_estimate")
        .and_then(Value::as_f64)
        .context("estimates.json has no median")?;
    let throughput = bench.get("throughput").and_then(|t| {
        let n = |k: &str| t.get(k).and_then(Value::as_u64);
        n("Bytes")
            .or_else(|| n("BytesDecimal"))
            .map(Throughput::Bytes)
            .or_else(|| n("Elements").map(Throughput::Elements))
    });
    Ok(Measurement {
        group,
        function,
        parameter,
        median_ns,
        throughput,
    })
}

fn format_time(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn format_throughput(t: Throughput, ns: f64) -> String {
    let per_second = |n: u64| n as f64 / (ns / 1e9);
    match t {
        Throughput::Bytes(n) => {
            let bps = per_second(n);
            if bps >= 1e9 {
                format!("{:.2} GB/s", bps / 1e9)
            } else {
                format!("{:.1} MB/s", bps / 1e6)
            }
        }
        Throughput::Elements(n) => {
            let eps = per_second(n);
            if eps >= 1e6 {
                format!("{:.2} M/s", eps / 1e6)
            } else {
                format!("{:.0} /s", eps)
            }
        }
    }
}

/// Renders the criterion table: one section per group (and parameter), ratios against the `agentwire*` row.
pub fn render_criterion(measurements: &[Measurement]) -> String {
    let mut groups: BTreeMap<(String, Option<String>), Vec<&Measurement>> = BTreeMap::new();
    for m in measurements {
        groups
            .entry((m.group.clone(), m.parameter.clone()))
            .or_default()
            .push(m);
    }
    let mut out = String::new();
    for ((group, parameter), rows) in &groups {
        let title = match parameter {
            Some(p) => format!("{group} / {p}"),
            None => group.clone(),
        };
        out.push_str(&format!("\n### {title}\n\n"));
        out.push_str(
            "| implementation | median | throughput | agentwire speed-up |\n|---|---|---|---|\n",
        );
        let ours = rows
            .iter()
            .find(|m| m.function.starts_with("agentwire"))
            .map(|m| m.median_ns);
        for m in rows {
            let throughput = m
                .throughput
                .map(|t| format_throughput(t, m.median_ns))
                .unwrap_or_else(|| "–".into());
            let ratio = match ours {
                Some(ours) if ours > 0.0 => format!("{:.2}×", m.median_ns / ours),
                _ => "–".into(),
            };
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                m.function,
                format_time(m.median_ns),
                throughput,
                ratio
            ));
        }
    }
    out
}

/// A throughput floor a criterion row must reach (issue 10's goals).
struct ThroughputGoal {
    group: &'static str,
    function: &'static str,
    min_mib_per_s: f64,
    what: &'static str,
    why_missed: &'static str,
}

/// A ratio goal: `function`'s median must be at most `max_ratio` × `baseline`'s median (≤ 1 = at least as fast).
struct RatioGoal {
    group: &'static str,
    function: &'static str,
    baseline: &'static str,
    max_ratio: f64,
    what: &'static str,
}

const THROUGHPUT_GOALS: &[ThroughputGoal] = &[ThroughputGoal {
    group: "normalize_claude_recordings",
    function: "agentwire_stdout_decoder_machine",
    min_mib_per_s: 370.0,
    what: "stream-json normalization of the real Claude Code recordings (5× the Claude Agent SDK's Python `parse_message`)",
    why_missed: "every byte of every line is still read and checked (serde_json's string scanning and object walking \
                 dominate the profile; more than half of the input is the big `init` and `result` lines whose fields \
                 are only validated); see the header of `crates/awp/benches/normalize.rs`",
}];

const RATIO_GOALS: &[RatioGoal] = &[
    RatioGoal {
        group: "decode_1kib_lines",
        function: "agentwire",
        baseline: "baseline_lines_codec_serde_value",
        max_ratio: 1.0,
        what: "validated JSONL decode, 1 KiB lines, vs `LinesCodec` + `serde_json::from_slice::<Value>`",
    },
    RatioGoal {
        group: "decode_64kib_lines",
        function: "agentwire",
        baseline: "baseline_lines_codec_serde_value",
        max_ratio: 1.0,
        what: "validated JSONL decode, 64 KiB lines, vs `LinesCodec` + `serde_json::from_slice::<Value>`",
    },
];

/// Goals the custom benches check themselves: each writes `… goal … — met.` / `— missed by N×.` lines into its
/// fragment; the report lists them together (or says the fragment is missing from this run). Each entry is
/// (fragment file, a text the goal's own verdict lines contain, what the goal is).
const CUSTOM_GOALS: &[(&str, &str, &str)] = &[
    (
        "host-compute.md",
        "the direct call",
        "`models.invoke` through the socket vs the same loopback provider called directly: ≤ 1.2× (first text, total)",
    ),
    (
        "host-compute.md",
        "`cp`",
        "media artifact write + read (spool) vs `cp`: ≥ 0.5× its speed",
    ),
];

/// The "goal" lines of the custom benches' fragments, for [`CUSTOM_GOALS`]: under each goal, the fragment's
/// `- … goal …` lines that contain its marker.
fn render_custom_goals(fragments_dir: &Path) -> String {
    let mut out = String::new();
    for (file, marker, what) in CUSTOM_GOALS {
        out.push_str(&format!("- {what} ({file})\n"));
        match std::fs::read_to_string(fragments_dir.join(file)) {
            Ok(text) => {
                let verdicts: Vec<&str> = text
                    .lines()
                    .filter(|l| l.starts_with("- ") && l.contains("goal") && l.contains(marker))
                    .collect();
                if verdicts.is_empty() {
                    out.push_str("  - no verdict for this goal in the fragment\n");
                }
                for line in verdicts {
                    out.push_str(&format!("  {line}\n"));
                }
            }
            Err(_) => out.push_str("  - not measured in this run\n"),
        }
    }
    out
}

fn find<'a>(
    measurements: &'a [Measurement],
    group: &str,
    function: &str,
) -> Option<&'a Measurement> {
    measurements
        .iter()
        .find(|m| m.group == group && m.function == function)
}

/// Renders "Goals" lines for the criterion results: met or missed, and by how much.
pub fn render_goals(measurements: &[Measurement]) -> String {
    let mut out = String::new();
    for goal in THROUGHPUT_GOALS {
        let Some(m) = find(measurements, goal.group, goal.function) else {
            continue;
        };
        let Some(Throughput::Bytes(bytes)) = m.throughput else {
            continue;
        };
        let mib_per_s = bytes as f64 / (m.median_ns / 1e9) / (1024.0 * 1024.0);
        let verdict = if mib_per_s >= goal.min_mib_per_s {
            "met".to_owned()
        } else {
            format!(
                "missed by {:.2}× ({}): {}",
                goal.min_mib_per_s / mib_per_s,
                goal.group,
                goal.why_missed
            )
        };
        out.push_str(&format!(
            "- {}: {mib_per_s:.0} MiB/s, goal ≥ {:.0} MiB/s — {verdict}.\n",
            goal.what, goal.min_mib_per_s
        ));
    }
    for goal in RATIO_GOALS {
        let (Some(ours), Some(base)) = (
            find(measurements, goal.group, goal.function),
            find(measurements, goal.group, goal.baseline),
        ) else {
            continue;
        };
        let ratio = ours.median_ns / base.median_ns;
        let verdict = if ratio <= goal.max_ratio {
            "met".to_owned()
        } else {
            format!("missed by {:.2}×", ratio / goal.max_ratio)
        };
        out.push_str(&format!(
            "- {}: ours takes {ratio:.2}× the baseline's time ({:.2}× its speed), goal ≥ {:.2}× its speed — {verdict}.\n",
            goal.what,
            1.0 / ratio,
            1.0 / goal.max_ratio
        ));
    }
    out
}

/// Renders the whole `docs/benchmarks.md`.
pub fn render(
    criterion_dir: &Path,
    fragments_dir: &Path,
    command: &str,
    machine: &str,
) -> Result<String> {
    let measurements = read_criterion(criterion_dir)?;
    let mut out = String::from("# Benchmarks\n\n");
    out.push_str(&format!(
        "Produced by `{command}` on {machine}.\n\
         Regenerate with the same command; it rewrites this file.\n\
         In the criterion tables, \"agentwire speed-up\" is each row's median divided by the `agentwire` row's median\n\
         in the same run: above 1.00× ours is faster than that baseline.\n"
    ));
    if measurements.is_empty() {
        out.push_str("\nNo criterion results were found.\n");
    } else {
        let goals = render_goals(&measurements);
        if !goals.is_empty() {
            out.push_str("\n## Goals checked against the criterion results\n\n");
            out.push_str(&goals);
        }
        out.push_str("\n## Criterion benchmarks\n");
        out.push_str(&render_criterion(&measurements));
    }
    let mut fragments: Vec<_> = match std::fs::read_dir(fragments_dir) {
        Ok(dir) => dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect(),
        Err(_) => Vec::new(),
    };
    fragments.sort();
    if !fragments.is_empty() {
        out.push_str("\n## Goals of the custom benchmarks\n\n");
        out.push_str(&render_custom_goals(fragments_dir));
        out.push_str("\n## Custom benchmarks\n");
        for path in fragments {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            out.push('\n');
            out.push_str(text.trim_end());
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_result(dir: &Path, group: &str, function: &str, median: f64, throughput: &str) {
        let new = dir.join(group).join(function).join("new");
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(
            new.join("benchmark.json"),
            format!(
                r#"{{"group_id":"{group}","function_id":"{function}","value_str":null,"throughput":{throughput},"full_id":"{group}/{function}","directory_name":"{group}/{function}"}}"#
            ),
        )
        .unwrap();
        std::fs::write(
            new.join("estimates.json"),
            format!(
                r#"{{"mean":{{"point_estimate":{median}}},"median":{{"point_estimate":{median}}}}}"#
            ),
        )
        .unwrap();
    }

    #[test]
    fn ratios_are_baseline_over_agentwire_within_a_group() {
        let tmp = tempfile::tempdir().unwrap();
        write_result(
            tmp.path(),
            "decode_1KiB",
            "agentwire",
            1000.0,
            r#"{"Bytes":1000}"#,
        );
        write_result(
            tmp.path(),
            "decode_1KiB",
            "baseline_lines_codec",
            3500.0,
            r#"{"Bytes":1000}"#,
        );
        let table = render_criterion(&read_criterion(tmp.path()).unwrap());
        assert!(
            table.contains("| `agentwire` | 1.00 µs | 1.00 GB/s | 1.00× |"),
            "{table}"
        );
        assert!(
            table.contains("| `baseline_lines_codec` | 3.50 µs | 285.7 MB/s | 3.50× |"),
            "{table}"
        );
    }

    #[test]
    fn report_includes_fragments_and_the_command() {
        let tmp = tempfile::tempdir().unwrap();
        let fragments = tmp.path().join("frag");
        std::fs::create_dir_all(&fragments).unwrap();
        std::fs::write(
            fragments.join("rpc.md"),
            "### rpc latency\n\n| p50 | p99 |\n",
        )
        .unwrap();
        let report = render(
            &tmp.path().join("none"),
            &fragments,
            "cargo xtask bench",
            "2 CPUs",
        )
        .unwrap();
        assert!(report.contains("Produced by `cargo xtask bench` on 2 CPUs."));
        assert!(report.contains("No criterion results were found."));
        assert!(report.contains("### rpc latency"));
    }

    #[test]
    fn custom_goals_quote_the_fragments_verdicts() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("host-compute.md"),
            "## x\n\n- Total: 3.00× the direct call, goal ≤ 1.20× — missed by 2.50×.\n- other line\n",
        )
        .unwrap();
        let text = render_custom_goals(tmp.path());
        assert!(
            text.contains("  - Total: 3.00× the direct call, goal ≤ 1.20× — missed by 2.50×."),
            "{text}"
        );
        assert!(!text.contains("other line"));
        // The verdict sits under its own goal, and the goal without one says so.
        let (invoke, media) = text.split_once("- media artifact").unwrap();
        assert!(invoke.contains("the direct call, goal"), "{text}");
        assert!(media.contains("no verdict for this goal"), "{text}");
        let missing = render_custom_goals(&tmp.path().join("nothing"));
        assert!(missing.contains("not measured in this run"));
    }

    #[test]
    fn goals_say_met_or_by_how_much_they_are_missed() {
        let m = |group: &str, function: &str, median_ns: f64, throughput| Measurement {
            group: group.into(),
            function: function.into(),
            parameter: None,
            median_ns,
            throughput,
        };
        let rows = [
            // 1 MiB in 4 ms = 250 MiB/s: missed by 1.48×.
            m(
                "normalize_claude_recordings",
                "agentwire_stdout_decoder_machine",
                4e6,
                Some(Throughput::Bytes(1024 * 1024)),
            ),
            m("decode_1kib_lines", "agentwire", 1.0e6, None),
            m(
                "decode_1kib_lines",
                "baseline_lines_codec_serde_value",
                2.0e6,
                None,
            ),
            m("decode_64kib_lines", "agentwire", 3.0e6, None),
            m(
                "decode_64kib_lines",
                "baseline_lines_codec_serde_value",
                2.0e6,
                None,
            ),
        ];
        let text = render_goals(&rows);
        assert!(
            text.contains("250 MiB/s, goal ≥ 370 MiB/s — missed by 1.48×"),
            "{text}"
        );
        assert!(
            text.contains(
                "1 KiB lines, vs `LinesCodec` + `serde_json::from_slice::<Value>`: ours takes 0.50×"
            ),
            "{text}"
        );
        assert!(
            text.contains("2.00× its speed), goal ≥ 1.00× its speed — met."),
            "{text}"
        );
        assert!(
            text.contains("0.67× its speed), goal ≥ 1.00× its speed — missed by 1.50×."),
            "{text}"
        );
    }

    #[test]
    fn malformed_estimates_are_an_error_not_a_zero() {
        assert!(parse_measurement(r#"{"group_id":"g"}"#, r#"{"mean":{}}"#).is_err());
    }
}
