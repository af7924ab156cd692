//! Conformance report types shared by the protocol checks (`agentwire_awp::conformance`,
//! `agentwire_acp::conformance`): a [`Rule`] table, one [`Outcome`] per rule, and a [`CheckReport`] that counts,
//! judges and renders them.
//!
//! This crate holds data only: no IO, no clock, no protocol knowledge. Each protocol crate owns its rule table and the
//! engine that judges it, and re-exports these types from its own `conformance` module.
//!
//! The honesty rule of the checks lives here: a rule is [`Outcome::Pass`] only when it was exercised and held; a rule
//! that could not be exercised is [`Outcome::Skipped`] with the reason, and the summary counts passed, failed and
//! skipped rules apart for required ([`Severity::Must`]) and optional ([`Severity::Should`]) rules.
//!
//! Text output looks like:
//!
//! ```text
//! PASS  spawns            required  the agent process starts
//! FAIL  stdout_only_json  required  every stdout line is one JSON object with a string "type"
//!       evidence: turn 1, stdout line 1: Welcome (not a JSON line)
//! SKIP  init_first        optional  the first event of the first turn is system/init with the session_id
//!       why: turn 1 produced no event
//! not conformant: required rules 1 passed, 1 failed, 0 skipped; optional rules 0 passed, 0 failed, 1 skipped
//! ```

use serde::Serialize;
use serde::ser::SerializeStruct as _;

/// How strict a rule is. JSON: `"must"` / `"should"`; text: `required` / `optional`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// A protocol requirement (text label `required`): a failure fails the check.
    Must,
    /// A recommendation (text label `optional`): a failure is reported as a warning and never fails the check.
    Should,
}

impl Severity {
    /// The text label: `required` or `optional`.
    pub fn label(self) -> &'static str {
        match self {
            Severity::Must => "required",
            Severity::Should => "optional",
        }
    }
}

/// One rule of a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Stable snake_case id, e.g. `no_output_before_input`.
    pub id: &'static str,
    /// Must or should.
    pub severity: Severity,
    /// One line: what a conforming agent does.
    pub description: &'static str,
    /// The spec section the rule checks (e.g. `Page § Section <URL>`); empty when the protocol names none.
    pub spec: &'static str,
}

impl Rule {
    /// A required rule without a spec reference.
    pub const fn must(id: &'static str, description: &'static str) -> Rule {
        Rule {
            id,
            severity: Severity::Must,
            description,
            spec: "",
        }
    }

    /// An optional rule (a recommendation) without a spec reference.
    pub const fn should(id: &'static str, description: &'static str) -> Rule {
        Rule {
            id,
            severity: Severity::Should,
            description,
            spec: "",
        }
    }

    /// The same rule naming the spec section it checks.
    pub const fn with_spec(self, spec: &'static str) -> Rule {
        Rule { spec, ..self }
    }
}

/// The verdict of one rule. JSON: `{"outcome":"pass"}`, `{"outcome":"fail","evidence":"…"}`,
/// `{"outcome":"skipped","why":"…"}` (flattened into the [`RuleResult`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The rule was exercised and held.
    Pass,
    /// The rule was broken; `evidence` names where (bounded by the check's evidence limit).
    Fail {
        /// Where and how, with quoted output escaped and cut.
        evidence: String,
    },
    /// The rule could not be exercised (an earlier step failed, or the agent never gave the occasion).
    Skipped {
        /// Why.
        why: String,
    },
}

/// One line of the report:
/// `{"id":"stdout_only_json","severity":"must","description":"…","outcome":"fail","evidence":"…"}`
/// (plus `"spec":"…"` when the rule names a spec section).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuleResult {
    /// The rule id.
    pub id: &'static str,
    /// Must or should.
    pub severity: Severity,
    /// What the rule requires.
    pub description: &'static str,
    /// The spec section it checks; empty (and absent from JSON) when none.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub spec: &'static str,
    /// The verdict.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl RuleResult {
    /// The verdict `outcome` of `rule`.
    pub fn new(rule: &Rule, outcome: Outcome) -> RuleResult {
        RuleResult {
            id: rule.id,
            severity: rule.severity,
            description: rule.description,
            spec: rule.spec,
            outcome,
        }
    }
}

/// What a skipped required rule means for [`CheckReport::passed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipPolicy {
    /// A skipped required rule fails the check (the AWP check: every required rule is exercised by a working agent).
    RequiredSkipFails,
    /// A skipped required rule does not fail the check (the ACP check: some rules apply only to what the agent
    /// advertises, and the cancel rule cannot be exercised against agents whose turns end too fast).
    RequiredSkipAllowed,
}

/// Passed / failed / skipped counts of one severity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Rules exercised that held.
    pub passed: usize,
    /// Rules broken (for optional rules: warnings).
    pub failed: usize,
    /// Rules that could not be exercised.
    pub skipped: usize,
}

/// The summary of a report: `{"required":{"passed":12,"failed":0,"skipped":0},"optional":{…}}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Counts of the [`Severity::Must`] rules.
    pub required: Counts,
    /// Counts of the [`Severity::Should`] rules.
    pub optional: Counts,
}

/// The verdicts of every rule, in the check's rule order.
///
/// JSON: `{"rules":[RuleResult…],"summary":Summary,"conformant":true}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// One result per rule.
    pub rules: Vec<RuleResult>,
    /// Whether a skipped required rule fails the check.
    pub skip_policy: SkipPolicy,
}

impl CheckReport {
    /// A report of `rules` judged under `skip_policy`.
    pub fn new(rules: Vec<RuleResult>, skip_policy: SkipPolicy) -> CheckReport {
        CheckReport { rules, skip_policy }
    }

    /// True when no [`Severity::Must`] rule failed, and (under [`SkipPolicy::RequiredSkipFails`]) none was
    /// skipped. Optional rules never decide it.
    pub fn passed(&self) -> bool {
        let summary = self.summary();
        summary.required.failed == 0
            && (self.skip_policy == SkipPolicy::RequiredSkipAllowed
                || summary.required.skipped == 0)
    }

    /// The result of rule `id`.
    pub fn get(&self, id: &str) -> Option<&RuleResult> {
        self.rules.iter().find(|rule| rule.id == id)
    }

    /// The ids of the failed rules (must and should).
    pub fn failed_ids(&self) -> Vec<&'static str> {
        self.rules
            .iter()
            .filter(|rule| matches!(rule.outcome, Outcome::Fail { .. }))
            .map(|rule| rule.id)
            .collect()
    }

    /// Passed / failed / skipped counts for required and optional rules.
    pub fn summary(&self) -> Summary {
        let mut summary = Summary::default();
        for rule in &self.rules {
            let counts = match rule.severity {
                Severity::Must => &mut summary.required,
                Severity::Should => &mut summary.optional,
            };
            match rule.outcome {
                Outcome::Pass => counts.passed += 1,
                Outcome::Fail { .. } => counts.failed += 1,
                Outcome::Skipped { .. } => counts.skipped += 1,
            }
        }
        summary
    }

    /// Human-readable report: one `PASS`/`FAIL`/`WARN`/`SKIP` line per rule with its id, its label (`required` /
    /// `optional`) and what it requires; evidence or the reason for a skip indented below (then the spec section,
    /// when the rule names one); a summary line last. `WARN` is a failed optional rule. Evidence is shown as the
    /// check quoted it (the engines escape control characters).
    pub fn render_text(&self) -> String {
        let width = self
            .rules
            .iter()
            .map(|rule| rule.id.len())
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for rule in &self.rules {
            let (tag, detail) = match (&rule.outcome, rule.severity) {
                (Outcome::Pass, _) => ("PASS", None),
                (Outcome::Fail { evidence }, Severity::Must) => {
                    ("FAIL", Some(("evidence", evidence)))
                }
                (Outcome::Fail { evidence }, Severity::Should) => {
                    ("WARN", Some(("evidence", evidence)))
                }
                (Outcome::Skipped { why }, _) => ("SKIP", Some(("why", why))),
            };
            out.push_str(&format!(
                "{tag}  {:<width$}  {:<8}  {}\n",
                rule.id,
                rule.severity.label(),
                rule.description
            ));
            if let Some((label, text)) = detail {
                out.push_str(&format!("      {label}: {text}\n"));
                if !rule.spec.is_empty() {
                    out.push_str(&format!("      spec: {}\n", rule.spec));
                }
            }
        }
        let Summary { required, optional } = self.summary();
        let verdict = if self.passed() {
            "conformant"
        } else {
            "not conformant"
        };
        out.push_str(&format!(
            "{verdict}: required rules {} passed, {} failed, {} skipped; optional rules {} passed, {} failed, {} skipped\n",
            required.passed,
            required.failed,
            required.skipped,
            optional.passed,
            optional.failed,
            optional.skipped,
        ));
        out
    }
}

impl Serialize for CheckReport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut report = serializer.serialize_struct("CheckReport", 3)?;
        report.serialize_field("rules", &self.rules)?;
        report.serialize_field("summary", &self.summary())?;
        report.serialize_field("conformant", &self.passed())?;
        report.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: &[Rule] = &[
        Rule::must("spawns", "the agent process starts"),
        Rule::must("answers", "the agent answers")
            .with_spec("Spec § Answers <https://example.invalid/a>"),
        Rule::should("has_usage", "every answer carries usage"),
    ];

    fn report(outcomes: [Outcome; 3], policy: SkipPolicy) -> CheckReport {
        let rules = RULES
            .iter()
            .zip(outcomes)
            .map(|(rule, outcome)| RuleResult::new(rule, outcome))
            .collect();
        CheckReport::new(rules, policy)
    }

    fn fail(text: &str) -> Outcome {
        Outcome::Fail {
            evidence: text.to_owned(),
        }
    }

    fn skip(text: &str) -> Outcome {
        Outcome::Skipped {
            why: text.to_owned(),
        }
    }

    #[test]
    fn a_skipped_required_rule_fails_only_under_the_strict_policy() {
        let outcomes = || [Outcome::Pass, skip("no answer to judge"), Outcome::Pass];
        assert!(!report(outcomes(), SkipPolicy::RequiredSkipFails).passed());
        assert!(report(outcomes(), SkipPolicy::RequiredSkipAllowed).passed());
    }

    #[test]
    fn optional_failures_warn_and_required_failures_fail() {
        let warned = report(
            [Outcome::Pass, Outcome::Pass, fail("no usage")],
            SkipPolicy::RequiredSkipFails,
        );
        assert!(warned.passed());
        assert_eq!(warned.failed_ids(), ["has_usage"]);
        let failed = report(
            [fail("exit 1"), Outcome::Pass, Outcome::Pass],
            SkipPolicy::RequiredSkipAllowed,
        );
        assert!(!failed.passed());
        assert_eq!(
            failed.get("spawns").map(|r| r.severity),
            Some(Severity::Must)
        );
    }

    #[test]
    fn the_summary_counts_passed_failed_and_skipped_apart() {
        let report = report(
            [fail("exit 1"), skip("not started"), skip("not started")],
            SkipPolicy::RequiredSkipFails,
        );
        let summary = report.summary();
        assert_eq!(
            summary.required,
            Counts {
                passed: 0,
                failed: 1,
                skipped: 1
            }
        );
        assert_eq!(
            summary.optional,
            Counts {
                passed: 0,
                failed: 0,
                skipped: 1
            }
        );
    }

    #[test]
    fn text_labels_rules_and_counts_every_verdict() {
        let report = report(
            [
                Outcome::Pass,
                skip("the agent never answered"),
                fail("no usage"),
            ],
            SkipPolicy::RequiredSkipFails,
        );
        assert_eq!(
            report.render_text(),
            "PASS  spawns     required  the agent process starts\n\
             SKIP  answers    required  the agent answers\n\
             \x20     why: the agent never answered\n\
             \x20     spec: Spec § Answers <https://example.invalid/a>\n\
             WARN  has_usage  optional  every answer carries usage\n\
             \x20     evidence: no usage\n\
             not conformant: required rules 1 passed, 0 failed, 1 skipped; optional rules 0 passed, 1 failed, 0 skipped\n"
        );
    }

    #[test]
    fn json_has_rules_summary_and_verdict() {
        let report = report(
            [Outcome::Pass, fail("bad"), Outcome::Pass],
            SkipPolicy::RequiredSkipAllowed,
        );
        let value = serde_json::to_value(&report).expect("serializes");
        assert_eq!(
            value,
            serde_json::json!({
                "rules": [
                    {"id":"spawns","severity":"must","description":"the agent process starts","outcome":"pass"},
                    {"id":"answers","severity":"must","description":"the agent answers",
                     "spec":"Spec § Answers <https://example.invalid/a>","outcome":"fail","evidence":"bad"},
                    {"id":"has_usage","severity":"should","description":"every answer carries usage","outcome":"pass"},
                ],
                "summary": {"required":{"passed":1,"failed":1,"skipped":0},"optional":{"passed":1,"failed":0,"skipped":0}},
                "conformant": false,
            })
        );
    }
}
