//! What the apiserver's batch validation refuses in a Job or CronJob, worded as it words it
//! (Kubernetes 1.28 `pkg/apis/batch/validation`): a CronJob name longer than 52 characters (its
//! Jobs append 11), a schedule that does not parse or names a zone inline (`TZ=`/`CRON_TZ=`), an
//! unknown `timeZone`, a `concurrencyPolicy` other than Allow/Forbid/Replace, a pod template
//! whose `restartPolicy` is not OnFailure or Never, a negative `backoffLimit`, a non-positive
//! `activeDeadlineSeconds`, a Job whose `spec.selector` is missing or does not match its pod
//! template's labels, and (in [`check_job_update`]) a change of a Job's pod template. Before a new
//! Job is validated, [`generate_selector`] gives it the selector and labels the apiserver's Job
//! strategy generates.

use serde_json::Value;

use crate::sim::api_error::{ApiError, Cause};
use crate::sim::controllers::cron::Schedule;
use crate::sim::resources::Kind;

/// The longest CronJob name: its Jobs are `<name>-<minutes since the epoch>` within 63.
const CRONJOB_NAME_MAX: usize = 52;
/// The longest Job name: it becomes the value of its pods' `job-name` label.
const JOB_NAME_MAX: usize = 63;

fn invalid(field: &str, value: &Value, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {value}: {detail}"),
        field: field.into(),
    }
}

fn unsupported(field: &str, value: &Value, supported: &[&str]) -> Cause {
    let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported".into(),
        message: format!("Unsupported value: {value}: supported values: {}", supported.join(", ")),
        field: field.into(),
    }
}

/// Whether the apiserver knows the time zone (it loads Go's tz database).
fn known_time_zone(name: &str) -> bool {
    matches!(name, "UTC" | "Etc/UTC") || jiff::tz::db().get(name).is_ok()
}

/// The refusals of a Job spec at `path` (`spec` of a Job, `spec.jobTemplate.spec` of a CronJob).
fn job_spec_causes(spec: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let policy = &spec["template"]["spec"]["restartPolicy"];
    if !matches!(policy.as_str(), Some("OnFailure" | "Never")) {
        causes.push(unsupported(
            &format!("{path}.template.spec.restartPolicy"),
            policy,
            &["OnFailure", "Never"],
        ));
    }
    if spec["backoffLimit"].as_i64().is_some_and(|n| n < 0) {
        causes.push(invalid(
            &format!("{path}.backoffLimit"),
            &spec["backoffLimit"],
            "must be greater than or equal to 0",
        ));
    }
    if spec["activeDeadlineSeconds"].as_i64().is_some_and(|n| n <= 0) {
        causes.push(invalid(
            &format!("{path}.activeDeadlineSeconds"),
            &spec["activeDeadlineSeconds"],
            "must be greater than 0",
        ));
    }
    causes
}

/// The labels the Job strategy puts on a Job's pod template (legacy and prefixed, 1.27 and later)
/// and the one key its generated selector matches.
const JOB_NAME_LABELS: [&str; 2] = ["job-name", "batch.kubernetes.io/job-name"];
const CONTROLLER_UID_LABELS: [&str; 2] = ["controller-uid", "batch.kubernetes.io/controller-uid"];
const SELECTOR_LABEL: &str = "batch.kubernetes.io/controller-uid";

/// Gives a new Job (named and with its uid) the selector and pod template labels that 1.28's
/// `pkg/registry/batch/job/strategy.go` `generateSelector` gives it, unless
/// `spec.manualSelector` is true: the template gains `job-name` and
/// `batch.kubernetes.io/job-name` (the Job's name) and `controller-uid` and
/// `batch.kubernetes.io/controller-uid` (its uid) where it lacks them, and `spec.selector`
/// gains `matchLabels` `batch.kubernetes.io/controller-uid: <uid>` (a selector the user gave
/// keeps its own terms). Labels the user set are kept; a conflict is refused by validation.
pub fn generate_selector(job: &mut Value) {
    if job["spec"]["manualSelector"] == true || !job["spec"].is_object() {
        return;
    }
    let name = job["metadata"]["name"].clone();
    let uid = job["metadata"]["uid"].clone();
    let template = &mut job["spec"]["template"];
    if !template.is_object() {
        *template = serde_json::json!({});
    }
    if !template["metadata"].is_object() {
        template["metadata"] = serde_json::json!({});
    }
    if !template["metadata"]["labels"].is_object() {
        template["metadata"]["labels"] = serde_json::json!({});
    }
    let labels = &mut template["metadata"]["labels"];
    for (keys, value) in [(JOB_NAME_LABELS, &name), (CONTROLLER_UID_LABELS, &uid)] {
        for key in keys {
            if labels.get(key).is_none() {
                labels[key] = value.clone();
            }
        }
    }
    let selector = &mut job["spec"]["selector"];
    if !selector.is_object() {
        *selector = serde_json::json!({});
    }
    if !selector["matchLabels"].is_object() {
        selector["matchLabels"] = serde_json::json!({});
    }
    if selector["matchLabels"].get(SELECTOR_LABEL).is_none() {
        selector["matchLabels"][SELECTOR_LABEL] = uid;
    }
}

/// The refusals of a Job's selector (1.28 `validateJobSpec`): one is required, and its
/// `matchLabels` must match the pod template's labels (`matchExpressions` are not checked).
fn selector_causes(spec: &Value) -> Vec<Cause> {
    let selector = &spec["selector"];
    if selector.is_null() {
        return vec![Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: "spec.selector".into(),
        }];
    }
    let labels = &spec["template"]["metadata"]["labels"];
    let matches = selector["matchLabels"]
        .as_object()
        .is_none_or(|terms| terms.iter().all(|(key, value)| labels.get(key) == Some(value)));
    if matches {
        return Vec::new();
    }
    vec![invalid("spec.template.metadata.labels", labels, "`selector` does not match template `labels`")]
}

/// The refusals of a Job or CronJob being created or updated (none for other kinds).
pub fn causes(kind: &Kind, obj: &Value) -> Vec<Cause> {
    let name = &obj["metadata"]["name"];
    let too_long = |max: usize| name.as_str().is_some_and(|n| n.len() > max);
    match (kind.group.as_str(), kind.plural.as_str()) {
        ("batch", "jobs") => {
            let mut causes = job_spec_causes(&obj["spec"], "spec");
            causes.extend(selector_causes(&obj["spec"]));
            if too_long(JOB_NAME_MAX) {
                causes.push(invalid("metadata.name", name, "must be no more than 63 characters"));
            }
            causes
        }
        ("batch", "cronjobs") => {
            let spec = &obj["spec"];
            let mut causes = job_spec_causes(&spec["jobTemplate"]["spec"], "spec.jobTemplate.spec");
            if too_long(CRONJOB_NAME_MAX) {
                causes.push(invalid("metadata.name", name, "must be no more than 52 characters"));
            }
            let schedule = spec["schedule"].as_str().unwrap_or_default();
            if schedule.contains("TZ=") {
                causes.push(invalid(
                    "spec.schedule",
                    &spec["schedule"],
                    "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
                ));
            } else if Schedule::parse(schedule).is_none() {
                causes.push(invalid("spec.schedule", &spec["schedule"], "not a valid cron schedule"));
            }
            if let Some(zone) = spec["timeZone"].as_str().filter(|z| !known_time_zone(z)) {
                causes.push(invalid(
                    "spec.timeZone",
                    &spec["timeZone"],
                    &format!("unknown time zone {zone}"),
                ));
            }
            let policy = &spec["concurrencyPolicy"];
            if !policy.is_null() && !matches!(policy.as_str(), Some("Allow" | "Forbid" | "Replace")) {
                causes.push(unsupported("spec.concurrencyPolicy", policy, &["Allow", "Forbid", "Replace"]));
            }
            causes
        }
        _ => Vec::new(),
    }
}

/// Refuses an update of a Job that changes its pod template (immutable after creation).
pub fn check_job_update(kind: &Kind, old: &Value, new: &Value) -> Result<(), ApiError> {
    if kind.group != "batch" || kind.plural != "jobs" || old["spec"]["template"] == new["spec"]["template"] {
        return Ok(());
    }
    let name = new["metadata"]["name"].as_str().unwrap_or_default();
    Err(ApiError::invalid(
        kind,
        name,
        vec![invalid("spec.template", &new["spec"]["template"], "field is immutable")],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kind(plural: &str) -> std::sync::Arc<Kind> {
        crate::sim::resources::Registry::default().get("batch", "v1", plural).expect("a built-in batch kind")
    }

    fn cron_job(name: &str, schedule: &str, zone: Option<&str>, policy: &str) -> Value {
        json!({
            "metadata": {"name": name},
            "spec": {
                "schedule": schedule, "timeZone": zone, "concurrencyPolicy": "Forbid",
                "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": policy}}}},
            },
        })
    }

    fn fields(causes: &[Cause]) -> Vec<&str> {
        causes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn a_cron_job_is_refused_what_the_apiserver_refuses() {
        let cj = kind("cronjobs");
        assert!(causes(&cj, &cron_job("pg-backup", "*/5 * * * *", Some("Etc/UTC"), "Never")).is_empty());
        assert!(causes(&cj, &cron_job("pg-backup", "@daily", None, "OnFailure")).is_empty());
        let long = "a".repeat(53);
        assert_eq!(fields(&causes(&cj, &cron_job(&long, "@daily", None, "Never"))), ["metadata.name"]);
        assert_eq!(fields(&causes(&cj, &cron_job("x", "99 99 99 99 99", None, "Never"))), ["spec.schedule"]);
        for sunday_as_seven in ["0 3 * * 7", "0 3 * * MON-SUN"] {
            let refused = causes(&cj, &cron_job("x", sunday_as_seven, None, "Never"));
            assert_eq!(fields(&refused), ["spec.schedule"], "{sunday_as_seven}: robfig/cron's days are 0-6");
        }
        let inline = causes(&cj, &cron_job("x", "TZ=UTC 0 0 * * *", None, "Never"));
        assert!(inline[0].message.contains("use timeZone field instead"), "{inline:?}");
        assert_eq!(
            fields(&causes(&cj, &cron_job("x", "@daily", Some("Mars/Olympus"), "Never"))),
            ["spec.timeZone"]
        );
        assert_eq!(
            fields(&causes(&cj, &cron_job("x", "@daily", None, "Always"))),
            ["spec.jobTemplate.spec.template.spec.restartPolicy"]
        );
    }

    #[test]
    fn a_job_needs_a_run_once_restart_policy_and_keeps_its_template() {
        let jobs = kind("jobs");
        let job = |policy: &str, backoff: i64| {
            let mut job = json!({"metadata": {"name": "b", "uid": "u1"}, "spec": {"backoffLimit": backoff, "template": {"spec": {"restartPolicy": policy}}}});
            generate_selector(&mut job);
            job
        };
        assert!(causes(&jobs, &job("Never", 0)).is_empty());
        assert_eq!(
            fields(&causes(&jobs, &job("Always", -1))),
            ["spec.template.spec.restartPolicy", "spec.backoffLimit"]
        );
        assert!(check_job_update(&jobs, &job("Never", 0), &job("Never", 1)).is_ok());
        let changed = check_job_update(&jobs, &job("Never", 0), &job("OnFailure", 0)).unwrap_err();
        assert_eq!(changed.code, 422);
    }

    // mirrors pkg/registry/batch/job/strategy.go (1.28): `generateSelector`, called from
    // `(jobStrategy).PrepareForCreate` unless `spec.manualSelector`, and `validateJobSpec`'s
    // check that the selector matches the template's labels.
    #[test]
    fn a_new_job_gets_the_generated_selector_and_template_labels_unless_manual() {
        let jobs = kind("jobs");
        let mut job = json!({
            "metadata": {"name": "pg-backup-1", "uid": "u-1"},
            "spec": {"template": {"metadata": {"labels": {"app": "pg", "job-name": "mine"}}, "spec": {"restartPolicy": "Never"}}},
        });
        generate_selector(&mut job);
        assert_eq!(
            job["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
        );
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"],
            json!({
                "app": "pg", "job-name": "mine", "batch.kubernetes.io/job-name": "pg-backup-1",
                "controller-uid": "u-1", "batch.kubernetes.io/controller-uid": "u-1",
            }),
            "a label the user set is kept"
        );
        assert!(causes(&jobs, &job).is_empty());

        let manual = |selector: Value| {
            let mut job = json!({
                "metadata": {"name": "m", "uid": "u-2"},
                "spec": {"manualSelector": true, "selector": selector, "template": {"metadata": {"labels": {"app": "m"}}, "spec": {"restartPolicy": "Never"}}},
            });
            generate_selector(&mut job);
            job
        };
        let chosen = manual(json!({"matchLabels": {"app": "m"}}));
        assert_eq!(chosen["spec"]["selector"], json!({"matchLabels": {"app": "m"}}), "left as given");
        assert_eq!(chosen["spec"]["template"]["metadata"]["labels"], json!({"app": "m"}));
        assert!(causes(&jobs, &chosen).is_empty());
        assert_eq!(fields(&causes(&jobs, &manual(Value::Null))), ["spec.selector"]);
        let wrong = causes(&jobs, &manual(json!({"matchLabels": {"app": "other"}})));
        assert_eq!(fields(&wrong), ["spec.template.metadata.labels"]);
        assert!(wrong[0].message.contains("`selector` does not match template `labels`"), "{wrong:?}");
    }
}
